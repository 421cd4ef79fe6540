/* test_moe_a2a_overlap.c -- Megatron-Core's combined 1F1B
 * (--overlap-moe-expert-parallel-comm): in each steady-state pair the
 * forward of one micro-batch and the backward of another run layer by
 * layer, each all-to-all beside the other's compute (model_chunk_schedule_
 * plan.py, TransformerLayerSchedulePlan.run); warm-up and cool-down passes
 * have no partner and run alone (docs/cost-model.md, "Mixture of experts"). */
#include "costmodel/costmodel.h"
#include "model.h"
#include "test.h"

static double alone(const ap_moe_phases *f, const ap_moe_phases *b)
{
    return f->attn + f->dispatch + f->expert + f->combine + b->attn + b->dispatch +
           b->expert + b->combine;
}

/* Every all-to-all shorter than the compute beside it: the pair is the
 * two halves' compute, max(4,1) + max(6,1) + max(1,3) + max(1,8). */
static void compute_longer_than_every_all_to_all_hides_them_all(void)
{
    ap_moe_phases f = {.attn = 4, .dispatch = 1, .expert = 3, .combine = 1};
    ap_moe_phases b = {.attn = 8, .dispatch = 1, .expert = 6, .combine = 1, .wgrad = 3};
    CHECK_NEAR(ap_moe_pair_time(&f, &b, 0), 21, 1e-12);
    CHECK_NEAR(alone(&f, &b) - ap_moe_pair_time(&f, &b, 0), 4, 1e-12);
    CHECK_NEAR(ap_moe_pair_time(&f, &b, 1), 21, 1e-12);
}

/* All-to-alls of 3 beside compute of 1 to 4: each phase is its longer
 * side, max(1,3) + max(4,3) + max(3,2) + max(3,2) = 13 of the 21 alone.
 * Delaying the expert wgrad (2 of expert_b's 4) starts the backward
 * dispatch after the data gradient: max(max(2,3) + 3, max(4,3) + 2) = 6
 * for the middle phases instead of 4 + 3. */
static void all_to_all_longer_than_compute_is_hidden_in_part(void)
{
    ap_moe_phases f = {.attn = 1, .dispatch = 3, .expert = 2, .combine = 3};
    ap_moe_phases b = {.attn = 2, .dispatch = 3, .expert = 4, .combine = 3, .wgrad = 2};
    CHECK_NEAR(alone(&f, &b), 21, 1e-12);
    CHECK_NEAR(ap_moe_pair_time(&f, &b, 0), 13, 1e-12);
    CHECK_NEAR(ap_moe_pair_time(&f, &b, 1), 12, 1e-12);
}

/* A dense layer has nothing to hide: the pair is the two halves' sum. */
static void a_layer_without_all_to_all_saves_nothing(void)
{
    ap_moe_phases f = {.attn = 5, .expert = 7};
    ap_moe_phases b = {.attn = 10, .expert = 14, .wgrad = 7};
    CHECK_NEAR(ap_moe_pair_time(&f, &b, 0), alone(&f, &b), 1e-12);
    CHECK_NEAR(ap_moe_pair_time(&f, &b, 1), alone(&f, &b), 1e-12);
}

static ap_pipe_result simulate(ap_schedule sched, int p, int m, int v, double f,
                               double b, const double *save)
{
    double fwd[8], bwd[8];
    for (int i = 0; i < p * v; i++) {
        fwd[i] = f / v;
        bwd[i] = b / v;
    }
    ap_pipe_spec spec = {.schedule = sched, .nstages = p, .nmicro = m, .vchunks = v,
                         .fwd = fwd, .bwd = bwd, .pair_save = save};
    ap_pipe_result r;
    char err[AP_ERR_LEN];
    int rc = ap_pipe_simulate(&spec, &r, err);
    CHECK(rc == AP_OK);
    if (rc)
        fprintf(stderr, "%s\n", err);
    return r;
}

/* Without pipelining (combined_1f1b_schedule_for_no_pipelining): the first
 * forward alone, m - 1 merged pairs of f + b - save, the last backward
 * alone: 3 + 3 * (3 + 5 - 2) + 5 = 26 against 4 * 8 = 32; two
 * micro-batches in flight instead of one. */
static void no_pipelining_merges_all_but_the_first_forward_and_last_backward(void)
{
    double save[1] = {2};
    ap_pipe_result r = simulate(AP_SCHED_1F1B, 1, 4, 1, 3, 5, save);
    CHECK_NEAR(r.step, 26, 1e-12);
    CHECK(r.saved != NULL);
    if (r.saved)
        CHECK_NEAR(r.saved[0], 6, 1e-12);
    CHECK_NEAR(r.inflight[0], 2, 1e-12);
    ap_pipe_result_free(&r);
    r = simulate(AP_SCHED_1F1B, 1, 4, 1, 3, 5, NULL);
    CHECK_NEAR(r.step, 32, 1e-12);
    CHECK(r.saved == NULL);
    ap_pipe_result_free(&r);
}

/* Stage i of p warms up with p - i forwards (one more than 1F1B's
 * p - i - 1) and drains as many backwards alone, so m - (p - i) pairs
 * merge: at p = 4, m = 8, stage 0 saves 4 pairs, stage 3 seven. */
static void warm_up_and_cool_down_micro_batches_stay_exposed(void)
{
    double save[4] = {0.5, 0.5, 0.5, 0.5};
    ap_pipe_result r = simulate(AP_SCHED_1F1B, 4, 8, 1, 1, 2, save);
    for (int i = 0; i < 4 && r.saved; i++) {
        CHECK_NEAR(r.saved[i], (8 - (4 - i)) * 0.5, 1e-12);
        CHECK_NEAR(r.inflight[i], 4 - i + 1, 1e-12);
    }
    ap_pipe_result_free(&r);
}

/* Interleaved, p = 2, v = 2, m = 4: 8 virtual passes per stage; stage 0
 * warms up with 2(p - 1) + (v - 1)p + 1 = 5 of them, stage 1 with 3
 * (get_pp_rank_microbatches), leaving 3 and 5 merged pairs. */
static void interleaved_warm_up_takes_one_forward_more(void)
{
    double save[4] = {0.25, 0.25, 0.25, 0.25};
    ap_pipe_result r = simulate(AP_SCHED_INTERLEAVED, 2, 4, 2, 1, 2, save);
    if (r.saved) {
        CHECK_NEAR(r.saved[0], 3 * 0.25, 1e-12);
        CHECK_NEAR(r.saved[1], 5 * 0.25, 1e-12);
    }
    ap_pipe_result_free(&r);
}

/* Qwen3-30B-A3B (48 layers of 128 experts, top 8) on 8 H100s, ep 8,
 * without pipelining: the steady state is m - 1 pairs, so the step is
 * shorter by exactly (m - 1) times a pair's saving, and a pair hides
 * no more than the layer's four all-to-alls. */
static void qwen3_moe_step_shrinks_by_the_pairs_savings(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 4096);
    const char *off = "tp=1,ep=8,mbs=1,gbs=32", *on = "tp=1,ep=8,mbs=1,gbs=32,moe_a2a_overlap=1";
    char err[AP_ERR_LEN];
    ap_cluster c;
    ap_plan a, b;
    int ra = ap_test_megatron_plan(g, 8, off, NULL, &a, err);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, on, &c, &b, err), err);
    CHECK(ra == AP_OK);
    const ap_stage *st = &b.stages[0];
    CHECK(st->a2a_save > 0);
    /* No more than one micro-batch's expert all-to-alls, forward and
     * backward: within a node the compute beside them hides them all. */
    CHECK_NEAR(st->a2a_save, st->kinds.expert, 1e-9);
    CHECK_NEAR(b.t_a2a_hidden, (b.nmicro - 1) * st->a2a_save, 1e-9);
    CHECK_NEAR(a.step_time - b.step_time, (b.nmicro - 1) * st->a2a_save, 1e-9);
    /* The breakdown's communication is what stays exposed, so its parts
     * still add up to the step. */
    CHECK_NEAR(a.t_comm - b.t_comm, b.t_a2a_hidden, 1e-9);
    CHECK_NEAR(b.t_compute + b.t_comm + b.t_bubble + b.t_grad_sync + b.t_optimizer,
               b.step_time, 1e-9 * b.step_time);
    /* The phases cover the whole layer. */
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &b, 0);
    const ap_block *blk = &st->blocks[2];
    const ap_block_point *bp = ap_test_layer(&b);
    ap_moe_phases f, k;
    ap_moe_block_phases(&x, blk->ops, blk->nops, bp->strat, &f, &k);
    CHECK_NEAR(f.attn + f.dispatch + f.expert + f.combine, bp->fwd, 1e-9);
    CHECK_NEAR(k.attn + k.dispatch + k.expert + k.combine, bp->bwd, 1e-9);
    CHECK(f.dispatch > 0 && f.combine > 0 && k.wgrad > 0 && k.wgrad < k.expert);
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Off, the default, prices the all-to-alls exposed exactly as before. */
static void off_is_the_plan_without_the_key(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 4096);
    char err[AP_ERR_LEN];
    ap_plan a, b;
    int ra = ap_test_megatron_plan(g, 16, "pp=2,vpp=2,ep=8,mbs=1,gbs=32", NULL, &a, err);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "pp=2,vpp=2,ep=8,mbs=1,gbs=32,moe_a2a_overlap=0",
                                     NULL, &b, err), err);
    CHECK(ra == AP_OK);
    CHECK(a.step_time == b.step_time);
    CHECK(a.max_mem_bytes == b.max_mem_bytes);
    CHECK(b.t_a2a_hidden == 0 && b.stages[0].a2a_save == 0);
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_graph_free(g);
}

/* Megatron-Core's asserts (TransformerConfig.__post_init__), each refusal
 * naming the flag. */
static void refused_where_megatron_core_asserts(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 4096);
    const char *bad[][2] = {
        {"ep=1,mbs=1,gbs=32,moe_a2a_overlap=1", "expert parallelism"},
        {"pp=2,ep=8,mbs=1,gbs=32,moe_a2a_overlap=1", "virtual pipeline"},
        {"ep=8,mbs=1,gbs=32,recompute=full,moe_a2a_overlap=1", "full recomputation"},
    };
    for (int i = 0; i < 3; i++) {
        char err[AP_ERR_LEN] = "";
        ap_plan p;
        CHECK(ap_test_megatron_plan(g, 16, bad[i][0], NULL, &p, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "--overlap-moe-expert-parallel-comm");
        CHECK_STR_HAS(err, bad[i][1]);
        ap_plan_free(&p);
    }
    char err[AP_ERR_LEN] = "";
    ap_plan p;
    CHECK(ap_test_megatron_plan(g, 16, "ep=8,mbs=1,gbs=32,delay_wgrad=1", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm");
    ap_plan_free(&p);
    ap_graph_free(g);
}

int main(void)
{
    RUN(compute_longer_than_every_all_to_all_hides_them_all);
    RUN(all_to_all_longer_than_compute_is_hidden_in_part);
    RUN(a_layer_without_all_to_all_saves_nothing);
    RUN(no_pipelining_merges_all_but_the_first_forward_and_last_backward);
    RUN(warm_up_and_cool_down_micro_batches_stay_exposed);
    RUN(interleaved_warm_up_takes_one_forward_more);
    RUN(qwen3_moe_step_shrinks_by_the_pairs_savings);
    RUN(off_is_the_plan_without_the_key);
    RUN(refused_where_megatron_core_asserts);
    return DONE();
}
