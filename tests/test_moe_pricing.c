/* test_moe_pricing.c -- what a mixture-of-experts layer costs as
 * Megatron-Core runs it: the experts' GEMMs as Transformer Engine's grouped
 * GEMM (one cuBLAS GEMM per expert over four streams), and the alltoall
 * token dispatcher's all-to-alls and second permutation, whose volume is
 * every token's top_k copies (docs/cost-model.md, "Mixture of experts");
 * without --moe-grouped-gemm, SequentialMLP's experts one at a time. */
#include "costmodel/costmodel.h"
#include "model.h"
#include "test.h"

/* The GEMM rate of the h100-sxm kernel figures: 989.4 TFLOP/s at 0.75. */
static double h100_bf16_rate(const ap_cluster *c)
{
    return c->peak_flops[AP_BF16] * ap_cluster_gemm_eff(c, AP_BF16);
}

/* Five experts of 384 tokens, fc1 of a gated FFN of 768 (n = 1536) over
 * k = 4096, on the 132 SMs of an H100 (tiles 128 x 256 and their halves).
 * The first round, four concurrent GEMMs of 6 x 12 tiles of 64 x 128, has
 * 288 tiles: 3 waves, 288/396 busy. The last, one GEMM alone, has 72 tiles
 * in one wave: 72/132. One batched launch of all five would fill 360 of 396
 * slots. All three are compute-bound at these shapes, and each expert then
 * stores its m x n output in bf16. */
static void five_experts_run_as_a_round_of_four_and_one_alone(void)
{
    ap_cluster c = ap_test_h100(8);
    double m = 384, n = 1536, k = 4096;
    double rate = h100_bf16_rate(&c);
    double out = 2 * m * n / ap_cluster_hbm_bw(&c);
    double four = 2 * 4 * m * n * k / (rate * 288.0 / 396.0) + 4 * out;
    double one = 2 * 1 * m * n * k / (rate * 72.0 / 132.0) + out;
    double t = ap_cost_grouped_gemm(&c, AP_BF16, 5, m, n, k);
    CHECK_NEAR(t, four + one, 1e-9);
    double batched = 2 * 5 * m * n * k / (rate * 360.0 / 396.0) + 5 * out;
    CHECK_NEAR(ap_cost_bgemm(&c, AP_BF16, 5, m, n, k), batched, 1e-9);
    CHECK(t > batched * 1.3);
    ap_cluster_free(&c);
}

/* Sixteen experts are four full rounds: four times one round's time. */
static void sixteen_experts_are_four_rounds_of_four(void)
{
    ap_cluster c = ap_test_h100(8);
    double round = ap_cost_bgemm(&c, AP_BF16, 4, 4096, 768, 2048);
    CHECK_NEAR(ap_cost_grouped_gemm(&c, AP_BF16, 16, 4096, 768, 2048), 4 * round, 1e-12);
    CHECK_NEAR(ap_cost_grouped_gemm(&c, AP_BF16, 1, 4096, 768, 2048),
               ap_cost_gemm(&c, AP_BF16, 4096, 768, 2048), 1e-12);
    CHECK(ap_cost_grouped_gemm(&c, AP_BF16, 0, 4096, 768, 2048) == 0);
    ap_cluster_free(&c);
}

/* The streams overlap the GEMMs, not the host's launches of them: 128 tiny
 * experts (one row each) cost 128 kernel floors, not the 32 of their rounds,
 * and not the one a single batched launch would. */
static void tiny_experts_pay_the_floor_once_per_launch(void)
{
    ap_cluster c = ap_test_h100(8);
    double t = ap_cost_grouped_gemm(&c, AP_BF16, 128, 1, 16, 16);
    CHECK_NEAR(t, 128 * c.kernel_floor, 1e-9);
    CHECK_NEAR(ap_cost_bgemm(&c, AP_BF16, 128, 1, 16, 16), c.kernel_floor, 1e-12);
    ap_cluster_free(&c);
}

/* Qwen3-30B-A3B (hidden 2048, 128 experts, top 8) on 8 GPUs of one node,
 * ep = 8, one sequence of 1024 tokens per GPU: each rank sends its tokens'
 * 8 copies, 1024 * 8 * 2048 bf16 = 32 MiB, in one all-to-all each way of
 * dispatch and of combine, forward and again backward. The old price sent
 * 1/(top_k * ep) of it, on the combine only. */
static void qwen3_dispatch_sends_every_tokens_eight_copies(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,zero=1", &c, &p, err),
               err);
    double bytes = 1024.0 * 8 * 2048 * 2;
    double a2a = ap_cost_alltoall(&c, 8, 1, bytes);
    const char *names[] = {"l0.dispatch", "l0.combine"};
    for (int i = 0; i < 2; i++) {
        double fwd, bwd;
        ap_test_op_comm(g, &c, &p, names[i], &fwd, &bwd);
        CHECK_NEAR(fwd, a2a, 1e-9);
        CHECK_NEAR(bwd, a2a, 1e-9);
    }
    /* 7/8 of 32 MiB over 360 GB/s NVLink, and 7 hops of 3.4 us. */
    CHECK_NEAR(a2a, 7 * 3.4e-6 + 7.0 / 8 * bytes / 360e9, 1e-9);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* With 16 experts per rank, what arrives is sorted into one run per local
 * expert (permutation 2): the 32 MiB read and written once more, forward
 * and backward, on top of the dispatch's own permutation. */
static void sixteen_local_experts_sort_what_arrives(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,zero=1", &c, &p, err),
               err);
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &p, 0);
    ap_strategy s;
    int op = ap_test_layer_op(g, &p, "l0.dispatch", &s);
    REQUIRE_OK(op < 0, "l0.dispatch");
    ap_op_cost oc;
    ap_price_op(&x, op, &s, &oc);
    /* Permutation 1 reads the 8 sequences' tokens (split 8 ways here, as
     * the plan prices the op over the experts) and writes their copies. */
    const ap_op *d = &g->ops[op];
    double b0 = (double)ap_graph_dim(g, ap_graph_label_of(g, AP_DIM_BATCH))->size;
    double scale = x.batch / b0;
    double perm1 = ap_cost_memop(&c, d->flops * scale / 8, d->bytes_moved * scale / 8);
    double sort = ap_cost_memop(&c, 0, 2 * 1024.0 * 8 * 2048 * 2);
    CHECK_NEAR(oc.fwd, perm1 + sort, 1e-9);
    CHECK_NEAR(oc.bwd, 2 * perm1 + sort, 1e-9);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Mixtral's 8 experts over ep = 8 leave one expert per rank: nothing to
 * sort, and top 2 makes the all-to-all 2 copies of each token. */
static void one_local_expert_has_no_second_permutation(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,zero=1", &c, &p, err),
               err);
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &p, 0);
    ap_strategy s;
    int op = ap_test_layer_op(g, &p, "l0.dispatch", &s);
    REQUIRE_OK(op < 0, "l0.dispatch");
    ap_op_cost oc;
    ap_price_op(&x, op, &s, &oc);
    const ap_op *d = &g->ops[op];
    double b0 = (double)ap_graph_dim(g, ap_graph_label_of(g, AP_DIM_BATCH))->size;
    CHECK_NEAR(oc.fwd, ap_cost_memop(&c, 0, d->bytes_moved * x.batch / b0 / 8), 1e-9);
    CHECK_NEAR(oc.fwd_comm, ap_cost_alltoall(&c, 8, 1, 1024.0 * 2 * 4096 * 2), 1e-9);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Without expert parallelism every rank holds every expert and routes its
 * own tokens: no all-to-all at all (the old price charged one). */
static void replicated_experts_exchange_no_tokens(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,ep=1,mbs=1,gbs=8,zero=1", &c, &p, err),
               err);
    const char *names[] = {"l0.dispatch", "l0.combine"};
    for (int i = 0; i < 2; i++) {
        double fwd, bwd;
        ap_test_op_comm(g, &c, &p, names[i], &fwd, &bwd);
        CHECK(fwd == 0 && bwd == 0);
    }
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* The allgather dispatcher (Megatron-Core's default): Mixtral's 8 experts
 * on 8 GPUs, each rank's 1024 tokens gathered to all 8 for dispatch, 8 *
 * 1024 * 4096 bf16, the outputs reduce-scattered back for combine; each
 * pass's backward runs the other collective, at the same price. */
static void the_allgather_dispatcher_gathers_every_token(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 1024);
    ap_cluster c;
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "ep=8,mbs=1,gbs=8,dispatcher=allgather", &c, &p),
               "allgather");
    double all = 8 * 1024.0 * 4096 * 2;
    double want[2] = {ap_cost_allgather(&c, 8, 1, all), ap_cost_reducescatter(&c, 8, 1, all)};
    const char *names[] = {"l0.dispatch", "l0.combine"};
    for (int i = 0; i < 2; i++) {
        double fwd, bwd;
        ap_test_op_comm(g, &c, &p, names[i], &fwd, &bwd);
        CHECK_NEAR(fwd, want[i], 1e-9);
        CHECK_NEAR(bwd, want[i], 1e-9);
    }
    /* Four times the all-to-all's bytes at top 2 of 8 (n / top_k), less for the
     * same latency of both. */
    CHECK(want[0] > 2.5 * ap_cost_alltoall(&c, 8, 1, 1024.0 * 2 * 4096 * 2));
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Token dropping: with a capacity factor F each expert takes at most F
 * times its even share of the copies, and padded exactly that many; under
 * the balanced routing priced, min(F, 1) of the dropless copies, or F
 * padded. Mixtral on 8 GPUs at ep 8: the all-to-all moves 1.25 times the
 * copies padded to 1.25, half of them dropped to 0.5, and the experts'
 * GEMMs do as many FLOPs more or fewer. */
static void a_capacity_factor_scales_the_experts_copies(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 1024);
    const char *specs[] = {"ep=8,mbs=1,gbs=8", "ep=8,mbs=1,gbs=8,capacity_factor=1.25,pad_capacity=1",
                           "ep=8,mbs=1,gbs=8,capacity_factor=0.5"};
    double scale[] = {1, 1.25, 0.5};
    double copies = 1024.0 * 2 * 4096 * 2, base_flops = 0;
    for (int i = 0; i < 3; i++) {
        ap_cluster c;
        ap_plan p;
        REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, specs[i], &c, &p), specs[i]);
        double fwd, bwd;
        ap_test_op_comm(g, &c, &p, "l0.dispatch", &fwd, &bwd);
        CHECK_NEAR(fwd, ap_cost_alltoall(&c, 8, 1, copies * scale[i]), 1e-9);
        ap_strategy s;
        int op = ap_test_layer_op(g, &p, "l0.experts.up", &s);
        ap_price_ctx x = ap_test_stage_ctx(g, &c, &p, 0);
        ap_op_cost oc;
        ap_price_op(&x, op, &s, &oc);
        if (i == 0)
            base_flops = oc.flops;
        CHECK_NEAR(oc.flops, base_flops * scale[i], 1e-12);
        ap_plan_free(&p);
        ap_cluster_free(&c);
    }
    ap_graph_free(g);
}

/* Without --moe-grouped-gemm Megatron-Core runs SequentialMLP: each of a
 * rank's 16 Qwen3-30B-A3B experts (512 tokens each here: 8 ranks' 1,024
 * tokens x top 8 over 128 experts) multiplies alone on the GPU, one after
 * another, where the grouped GEMM runs them four at a time; and each
 * expert's activation is a kernel of its own, at least 16 kernel floors. */
static void sequential_experts_multiply_one_at_a_time(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    const char *specs[] = {"tp=1,pp=1,ep=8,mbs=1,gbs=8,zero=1",
                           "tp=1,pp=1,ep=8,mbs=1,gbs=8,zero=1,sequential_experts=1"};
    double up[2], act[2];
    ap_cluster c;
    for (int i = 0; i < 2; i++) {
        ap_plan p;
        REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, specs[i], &c, &p), specs[i]);
        ap_price_ctx x = ap_test_stage_ctx(g, &c, &p, 0);
        ap_strategy s;
        ap_op_cost oc;
        int op = ap_test_layer_op(g, &p, "l0.experts.up", &s);
        REQUIRE_OK(op < 0, "l0.experts.up");
        ap_price_op(&x, op, &s, &oc);
        up[i] = oc.fwd;
        op = ap_test_layer_op(g, &p, "l0.experts.silu", &s);
        REQUIRE_OK(op < 0, "l0.experts.silu");
        ap_price_op(&x, op, &s, &oc);
        act[i] = oc.fwd;
        ap_plan_free(&p);
        if (i == 0)
            ap_cluster_free(&c);
    }
    CHECK_NEAR(up[0], ap_cost_grouped_gemm(&c, AP_BF16, 16, 512, 768, 2048), 1e-12);
    CHECK_NEAR(up[1], 16 * ap_cost_gemm(&c, AP_BF16, 512, 768, 2048), 1e-12);
    CHECK(up[1] > up[0]);
    CHECK(act[1] >= 16 * c.kernel_floor && act[1] >= act[0]);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* The MoE layer block of stage 0 (the one with a dispatch), or NULL. */
static const ap_block *moe_block(const ap_graph *g, const ap_plan *p, int *b)
{
    const ap_stage *st = &p->stages[0];
    for (*b = 2; *b < 2 + p->nclasses; (*b)++)
        for (int i = 0; i < st->blocks[*b].nops; i++)
            if (g->ops[st->blocks[*b].ops[i]].kind == AP_OP_DISPATCH)
                return &st->blocks[*b];
    return NULL;
}

/* Under --moe-shared-expert-overlap the shared experts run on a stream of
 * their own: fc1 and its activation beside the dispatch's all-to-all, fc2
 * beside the combine's, in each pass. DeepSeek-V3's MoE layer hides the
 * shorter of each pair, forward and backward, and nothing else changes. */
static void shared_experts_hide_beside_the_exchanges(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 1024);
    ap_cluster c;
    ap_plan off, on;
    const char *spec = "tp=8,sp=1,pp=2,first=30,ep=8,etp=1,mbs=1,gbs=16";
    char with[128];
    snprintf(with, sizeof with, "%s,shared_overlap=1", spec);
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 16, spec, &c, &off), "off");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 16, with, NULL, &on), "on");
    int b;
    const ap_block *blk = moe_block(g, &off, &b);
    REQUIRE_OK(blk == NULL, "no MoE layer");
    const ap_block_point *bp = &blk->points[off.stages[0].point[b]];
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &off, 0);
    double fc1[2] = {0, 0}, fc2[2] = {0, 0}, disp[2] = {0, 0}, comb[2] = {0, 0};
    for (int i = 0; i < blk->nops; i++) {
        const ap_op *o = &g->ops[blk->ops[i]];
        ap_op_cost oc;
        ap_price_op(&x, blk->ops[i], &bp->strat[i], &oc);
        double *t = o->kind == AP_OP_DISPATCH ? disp : o->kind == AP_OP_COMBINE ? comb
                  : !(o->modules & AP_MODULE_SHARED_EXPERTS) ? NULL
                  : strstr(o->name, "shared.down") ? fc2 : fc1;
        int comm = o->kind == AP_OP_DISPATCH || o->kind == AP_OP_COMBINE;
        if (t) {
            t[0] += comm ? oc.fwd_comm : oc.fwd + oc.fwd_comm;
            t[1] += comm ? oc.bwd_comm : oc.bwd + oc.bwd_comm;
        }
    }
    CHECK(fc1[0] > 0 && fc2[0] > 0 && disp[0] > 0 && comb[0] > 0);
    const ap_block_point *bq = &on.stages[0].blocks[b].points[on.stages[0].point[b]];
    CHECK_NEAR(bp->fwd - bq->fwd, fmin(fc1[0], disp[0]) + fmin(fc2[0], comb[0]), 1e-9);
    CHECK_NEAR(bp->bwd - bq->bwd, fmin(fc1[1], disp[1]) + fmin(fc2[1], comb[1]), 1e-9);
    CHECK_NEAR(bp->kfwd.expert - bq->kfwd.expert, bp->fwd - bq->fwd, 1e-9);
    CHECK(bp->act_bytes == bq->act_bytes && bp->flops == bq->flops);
    ap_plan_free(&off);
    ap_plan_free(&on);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(five_experts_run_as_a_round_of_four_and_one_alone);
    RUN(sixteen_experts_are_four_rounds_of_four);
    RUN(tiny_experts_pay_the_floor_once_per_launch);
    RUN(qwen3_dispatch_sends_every_tokens_eight_copies);
    RUN(sixteen_local_experts_sort_what_arrives);
    RUN(one_local_expert_has_no_second_permutation);
    RUN(replicated_experts_exchange_no_tokens);
    RUN(shared_experts_hide_beside_the_exchanges);
    RUN(the_allgather_dispatcher_gathers_every_token);
    RUN(a_capacity_factor_scales_the_experts_copies);
    RUN(sequential_experts_multiply_one_at_a_time);
    return DONE();
}
