/* Tied word embeddings (GPT-2's tie_word_embeddings: the LM head reads the
 * embedding table) priced as Megatron-LM holds them. On one pipeline stage
 * the table is one parameter whose gradient both uses accumulate into: its
 * model states and its data-parallel reduction count once. Across stages
 * the last stage keeps a copy of its own (model states and reduction like
 * any weight of its shard), and the two copies' gradients are all-reduced
 * between the first and last stage once per step, after the data-parallel
 * reduction and hidden behind nothing (docs/cost-model.md, "Tied
 * embeddings"). An untied model prices as before. */
#include "model.h"

#define VOCAB 2048.0
#define HIDDEN 256.0

/* A 4-layer GPT-2 at sequence 1024, with or without tied embeddings. */
static ap_graph *gpt2(int tied)
{
    char cfg[512], err[AP_ERR_LEN];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"gpt2\", \"n_layer\": 4, \"n_embd\": %.0f, "
             "\"n_head\": 4, \"vocab_size\": %.0f, \"n_positions\": 1024, "
             "\"tie_word_embeddings\": %s}",
             HIDDEN, VOCAB, tied ? "true" : "false");
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 1024;
    ap_graph *g = NULL;
    if (ap_graph_from_hf(cfg, strlen(cfg), "gpt2.json", &o, &g, err))
        fprintf(stderr, "%s\n", err);
    return g;
}

/* Op `name` of block b (0: before the layers, 1: after them) of stage s,
 * its graph index, and in *st the strategy the plan gives it; -1 if none. */
static int block_op(const ap_graph *g, const ap_plan *p, int s, int b,
                    const char *name, ap_strategy *st)
{
    const ap_stage *stage = &p->stages[s];
    const ap_block *blk = &stage->blocks[b];
    for (int i = 0; blk->npoints && i < blk->nops; i++)
        if (!strcmp(g->ops[blk->ops[i]].name, name)) {
            *st = blk->points[stage->point[b]].strat[i];
            return blk->ops[i];
        }
    return -1;
}

/* Op `name` priced in the context stage s of plan p was priced in. */
static ap_op_cost price_in_stage(const ap_graph *g, const ap_cluster *c,
                                 const ap_plan *p, int s, int b, const char *name)
{
    ap_op_cost oc;
    memset(&oc, 0, sizeof oc);
    ap_strategy st;
    int op = block_op(g, p, s, b, name, &st);
    CHECK(op >= 0);
    if (op < 0)
        return oc;
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, s);
    ap_price_op(&x, op, &st, &oc);
    return oc;
}

/* Megatron-Core's bucket for an overlapped reduction over `dp` ranks:
 * max(40M, 1M x dp) parameters. */
static double bucket_elems(int dp)
{
    return fmax(40e6, 1e6 * dp);
}

/* The whole step sync of n parameters over dp ranks of one node, each
 * parameter once, at ZeRO-0 (all-reduce) or ZeRO-1 (reduce-scatter of the
 * gradients, all-gather of the parameters). */
static double step_sync_of(const ap_cluster *c, double n, int dp, ap_zero zero)
{
    double bucket = bucket_elems(dp) * 2;
    if (zero == AP_ZERO_NONE)
        return ap_cost_collective_bucketed(c, AP_COLL_ALLREDUCE, dp, 1, n * 2, bucket);
    return ap_cost_collective_bucketed(c, AP_COLL_REDUCESCATTER, dp, 1, n * 2, bucket) +
           ap_cost_collective_bucketed(c, AP_COLL_ALLGATHER, dp, 1, n * 2, bucket);
}

/* pp = 1, tp = 1, dp = 8 on one node: every parameter is replicated over
 * the 8 ranks, and the step reduces each once: the table of 2048 x 256
 * is not reduced a second time for the head. */
static void one_stage_reduces_the_tied_table_once(void)
{
    for (ap_zero z = AP_ZERO_NONE; z <= AP_ZERO_1; z++) {
        ap_graph *g = gpt2(1);
        ap_cluster c;
        ap_plan p;
        char err[AP_ERR_LEN], spec[128];
        snprintf(spec, sizeof spec, "tp=1,pp=1,mbs=1,gbs=64,zero=%d", (int)z);
        REQUIRE_OK(ap_test_megatron_plan(g, 8, spec, &c, &p, err), err);
        double once = step_sync_of(&c, g->total_params, 8, z);
        double twice = step_sync_of(&c, g->total_params + VOCAB * HIDDEN, 8, z);
        CHECK_NEAR(p.stages[0].grad_sync, once, 1e-12);
        CHECK(twice > once * 1.1); /* the table is a sixth of the model */
        CHECK(p.stages[0].tied_sync == 0 && p.t_tied_sync == 0);
        /* The head's read adds neither model states nor a reduction. */
        ap_op_cost head = price_in_stage(g, &c, &p, 0, 1, "lm_head");
        CHECK(head.param_bytes == 0 && head.grad_sync == 0 && head.tied_sync == 0);
        ap_op_cost embed = price_in_stage(g, &c, &p, 0, 0, "embed");
        CHECK_NEAR(embed.param_bytes,
                   ap_mem_model_states(VOCAB * HIDDEN, 8, z).total, 1e-12);
        ap_plan_free(&p);
        ap_cluster_free(&c);
        ap_graph_free(g);
    }
}

/* ZeRO-3 gathers a weight before each use's forward and backward; the
 * table is gathered for the embedding only, so the tied head's forward
 * communication is the untied head's less one bf16 all-gather of the
 * table over the 8 ranks (serial, so that none of it hides behind the
 * compute). */
static void one_stage_zero3_gathers_the_tied_table_once(void)
{
    ap_graph *tied = gpt2(1), *untied = gpt2(0);
    ap_cluster c;
    ap_plan pt, pu;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(tied, 8, "tp=1,pp=1,mbs=1,gbs=64,zero=3,overlap_grad=0",
                                     &c, &pt, err), err);
    REQUIRE_OK(ap_test_megatron_plan(untied, 8, "tp=1,pp=1,mbs=1,gbs=64,zero=3,overlap_grad=0",
                                     NULL, &pu, err), err);
    ap_op_cost ht = price_in_stage(tied, &c, &pt, 0, 1, "lm_head");
    ap_op_cost hu = price_in_stage(untied, &c, &pu, 0, 1, "lm_head");
    double gather = ap_cost_collective(&c, AP_COLL_ALLGATHER, 8, 1, VOCAB * HIDDEN * 2);
    CHECK(gather > 0);
    CHECK_NEAR(ht.fwd_comm, hu.fwd_comm - gather, 1e-12);
    /* Backward: the gather again, and the gradient's reduce-scatter. */
    double rs = ap_cost_collective(&c, AP_COLL_REDUCESCATTER, 8, 1, VOCAB * HIDDEN * 2);
    CHECK_NEAR(ht.bwd_comm, hu.bwd_comm - gather - rs, 1e-12);
    ap_plan_free(&pt);
    ap_plan_free(&pu);
    ap_cluster_free(&c);
    ap_graph_free(tied);
    ap_graph_free(untied);
}

/* The embedding group's all-reduce: each rank's shard of the table,
 * V x h / tp elements in bf16, between 2 ranks, across nodes or not. */
static double tied_allreduce(const ap_cluster *c, int tp, int nodes)
{
    return ap_cost_collective(c, AP_COLL_ALLREDUCE, 2, nodes, VOCAB * HIDDEN / tp * 2);
}

/* pp = 2 at tp = 2 over 16 GPUs: each stage is one node of 8, dp = 4. The
 * last stage holds its own copy of the table's shard, with the model
 * states of any weight of that shard (as the untied model's own head
 * weight has), the first stage what it held before; both all-reduce the
 * shard's gradient across the two nodes. */
static void two_stages_keep_a_copy_and_all_reduce_it(void)
{
    for (ap_zero z = AP_ZERO_NONE; z <= AP_ZERO_1; z++) {
        ap_graph *tied = gpt2(1), *untied = gpt2(0);
        ap_cluster c;
        ap_plan pt, pu;
        char err[AP_ERR_LEN], spec[128];
        snprintf(spec, sizeof spec, "tp=2,pp=2,mbs=1,gbs=64,sp=1,zero=%d", (int)z);
        REQUIRE_OK(ap_test_megatron_plan(tied, 16, spec, &c, &pt, err), err);
        REQUIRE_OK(ap_test_megatron_plan(untied, 16, spec, NULL, &pu, err), err);
        double shard = VOCAB * HIDDEN / 2;
        ap_op_cost head = price_in_stage(tied, &c, &pt, 1, 1, "lm_head");
        CHECK_NEAR(head.param_bytes, ap_mem_model_states(shard, 4, z).total, 1e-12);
        CHECK_NEAR(head.tied_sync, tied_allreduce(&c, 2, 2), 1e-12);
        CHECK_NEAR(head.grad_sync - head.tied_sync, step_sync_of(&c, shard, 4, z), 1e-12);
        for (int s = 0; s < 2; s++) {
            CHECK_NEAR(pt.stages[s].param_bytes, pu.stages[s].param_bytes, 1e-9);
            CHECK_NEAR(pt.stages[s].tied_sync, tied_allreduce(&c, 2, 2), 1e-12);
            CHECK_NEAR(pt.stages[s].grad_sync - pt.stages[s].tied_sync,
                       pu.stages[s].grad_sync, 1e-12);
        }
        /* The copy is the last stage's: 16 bytes an element at ZeRO-0. */
        if (z == AP_ZERO_NONE)
            CHECK_NEAR(head.param_bytes, 16 * shard, 1e-12);
        ap_plan_free(&pt);
        ap_plan_free(&pu);
        ap_cluster_free(&c);
        ap_graph_free(tied);
        ap_graph_free(untied);
    }
}

/* On 8 GPUs the two stages share a node (ranks 0-3 and 4-7): the
 * all-reduce stays on NVLink, and is cheaper than across nodes. */
static void two_stages_on_one_node_all_reduce_within_it(void)
{
    ap_graph *g = gpt2(1);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=2,pp=2,mbs=1,gbs=64,sp=1", &c, &p, err), err);
    CHECK_NEAR(p.stages[1].tied_sync, tied_allreduce(&c, 2, 1), 1e-12);
    CHECK_NEAR(p.stages[0].tied_sync, tied_allreduce(&c, 2, 1), 1e-12);
    CHECK(tied_allreduce(&c, 2, 1) < tied_allreduce(&c, 2, 2));
    int nodes = 0;
    CHECK(ap_plan_head_apart(&p, &c, &nodes) == 1 && nodes == 1);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Under overlap_grad the data-parallel reduction of this small model hides
 * behind the last backward, the embedding group's all-reduce does not: it
 * is the whole exposed sync beside the parameter all-gather's (which the
 * backward never hides: test_param_gather.c), and the step is the untied
 * model's plus it. */
static void two_stages_expose_the_all_reduce_in_full(void)
{
    ap_graph *tied = gpt2(1), *untied = gpt2(0);
    ap_cluster c;
    ap_plan pt, pu;
    char err[AP_ERR_LEN];
    const char *spec = "tp=2,pp=2,mbs=4,gbs=64,sp=1,overlap_grad=1";
    REQUIRE_OK(ap_test_megatron_plan(tied, 16, spec, &c, &pt, err), err);
    REQUIRE_OK(ap_test_megatron_plan(untied, 16, spec, NULL, &pu, err), err);
    double ar = tied_allreduce(&c, 2, 2);
    for (int s = 0; s < 2; s++) {
        const ap_stage *st = &pt.stages[s];
        /* the DP reduction hides */
        CHECK(st->grad_sync - st->tied_sync - st->param_sync < st->bwd);
        CHECK_NEAR(st->grad_sync_exposed - st->param_sync_exposed, ar, 1e-12);
        CHECK(pu.stages[s].grad_sync_exposed == pu.stages[s].param_sync_exposed);
    }
    CHECK_NEAR(pt.t_grad_sync - pt.t_param_sync, ar, 1e-12);
    CHECK_NEAR(pt.t_tied_sync, ar, 1e-12);
    CHECK(pu.t_grad_sync == pu.t_param_sync && pu.t_tied_sync == 0);
    CHECK_NEAR(pt.step_time - pt.t_param_sync, pu.step_time - pu.t_param_sync + ar, 1e-12);
    /* plan.json's stages say it. */
    char *json = ap_plan_to_json(tied, &pt);
    CHECK_STR_HAS(json, "\"embedding_grad_allreduce_s\"");
    free(json);
    json = ap_plan_to_json(untied, &pu);
    CHECK(json && !strstr(json, "embedding_grad_allreduce_s"));
    free(json);
    ap_plan_free(&pt);
    ap_plan_free(&pu);
    ap_cluster_free(&c);
    ap_graph_free(tied);
    ap_graph_free(untied);
}

/* Interleaving keeps the embedding on the first stage's first chunk and
 * the head on the last stage's last chunk: the copy and the all-reduce
 * are the same as without it. */
static void interleaved_stages_keep_the_copy_on_the_last_stage(void)
{
    ap_graph *g = gpt2(1);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,pp=2,vpp=2,mbs=1,gbs=64,sp=1", &c, &p,
                                     err), err);
    CHECK(p.vchunks == 2);
    CHECK_NEAR(p.stages[1].tied_sync, tied_allreduce(&c, 2, 2), 1e-12);
    ap_op_cost head = price_in_stage(g, &c, &p, 1, 1, "lm_head");
    CHECK_NEAR(head.param_bytes, ap_mem_model_states(VOCAB * HIDDEN / 2, 4, AP_ZERO_1).total,
               1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* An untied model has no embedding group: its step sync at pp = 1 is
 * every parameter's (the head weight's included) once, and at pp = 2
 * nothing is all-reduced between the stages. */
static void untied_model_prices_as_before(void)
{
    ap_graph *g = gpt2(0);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,mbs=1,gbs=64,zero=1", &c, &p, err), err);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") >= 0);
    CHECK_NEAR(p.stages[0].grad_sync, step_sync_of(&c, g->total_params, 8, AP_ZERO_1),
               1e-12);
    ap_plan_free(&p);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,pp=2,mbs=1,gbs=64,sp=1", NULL, &p, err),
               err);
    CHECK(p.stages[0].tied_sync == 0 && p.stages[1].tied_sync == 0);
    ap_op_cost head = price_in_stage(g, &c, &p, 1, 1, "lm_head");
    CHECK(head.tied_sync == 0);
    CHECK_NEAR(head.param_bytes, ap_mem_model_states(VOCAB * HIDDEN / 2, 4, AP_ZERO_1).total,
               1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(one_stage_reduces_the_tied_table_once);
    RUN(one_stage_zero3_gathers_the_tied_table_once);
    RUN(two_stages_keep_a_copy_and_all_reduce_it);
    RUN(two_stages_on_one_node_all_reduce_within_it);
    RUN(two_stages_expose_the_all_reduce_in_full);
    RUN(interleaved_stages_keep_the_copy_on_the_last_stage);
    RUN(untied_model_prices_as_before);
    return DONE();
}
