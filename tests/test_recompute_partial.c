/* test_recompute_partial.c -- full recomputation under Megatron-LM's
 * --recompute-method and --recompute-num-layers (Megatron-Core's
 * TransformerBlock._checkpointed_forward), on GPT 1.3B, whose 24 layers are
 * alike, so each closed form is in one layer's price: its forward f, the
 * activations it saves A, its input I.
 *   block N:   the first min(N, chunk) layers of each model chunk (each
 *              virtual stage under interleaving) are recomputed: backward
 *              + N*v*f; they keep I, the others A, plus one layer's A while
 *              it is recomputed.
 *   uniform N: every layer recomputed (backward as uniform 1); one I per
 *              group of N, plus N layers' A while a group is recomputed. */
#include "model.h"

#define SPEC "tp=2,mbs=1,gbs=8"

static ap_graph *gpt(void) { return ap_test_model("examples/gpt-1.3b.json", 0); }

/* Prices SPEC plus `extra` on `gpus` H100s; 0 when it fails. */
static int price(const ap_graph *g, int gpus, const char *extra, ap_plan *p)
{
    char spec[256], err[AP_ERR_LEN];
    snprintf(spec, sizeof spec, "%s,%s", SPEC, extra);
    if (ap_test_megatron_plan(g, gpus, spec, NULL, p, err)) {
        fprintf(stderr, "%s: %s\n", spec, err);
        ap_plan_free(p);
        return 0;
    }
    return 1;
}

/* The micro-batches stage s was priced for (ap_plan_evaluate), over which
 * the working set of a recomputation is spread. */
static double priced_inflight(const ap_plan *p, int s)
{
    return fmin(p->nstages - s, p->nmicro);
}

/* Checks stage s of `rc` against the same stage without recomputation
 * (`none`): `redone` layers recomputed, `kept` inputs kept in place of
 * activations, `live` layers' activations in the working set. */
static void check_stage(const ap_plan *none, const ap_plan *rc, int s, double redone,
                        double kept, double live)
{
    const ap_block_point *l = ap_test_layer(none);
    const ap_stage *a = &none->stages[s], *b = &rc->stages[s];
    CHECK_NEAR(b->bwd, a->bwd + redone * l->fwd, 1e-9 * a->bwd);
    CHECK_NEAR(b->comm_bwd, a->comm_bwd + redone * l->comm_fwd, 1e-9 * a->bwd);
    double act = a->act_bytes - redone * l->act_bytes + kept * l->input_bytes +
                 live * l->act_bytes / priced_inflight(rc, s);
    CHECK_NEAR(b->act_bytes, act, 1e-9 * act);
    CHECK_NEAR(b->recompute_flops, redone * l->flops, 1e-9 * b->flops);
    CHECK(b->recomputed_layers == (int)redone);
    CHECK(l->input_bytes > 0 && l->input_bytes < l->act_bytes);
}

static void block_n_on_one_stage_recomputes_its_first_n_layers(void)
{
    ap_graph *g = gpt();
    ap_plan none, b4;
    if (g && price(g, 2, "recompute=none", &none)) {
        if (price(g, 2, "recompute=full,recompute_method=block,recompute_layers=4", &b4)) {
            CHECK(g->nlayers == 24);
            check_stage(&none, &b4, 0, 4, 4, 1);
            ap_plan_free(&b4);
        }
        ap_plan_free(&none);
    }
    ap_graph_free(g);
}

/* pp=2 with vpp=2: each stage runs two chunks of 6 layers, and block 2
 * recomputes the first 2 of each, 4 per stage. */
static void block_n_under_interleaving_recomputes_n_per_virtual_stage(void)
{
    ap_graph *g = gpt();
    ap_plan none, b2;
    if (g && price(g, 4, "pp=2,vpp=2,recompute=none", &none)) {
        if (price(g, 4, "pp=2,vpp=2,recompute=full,recompute_method=block,"
                        "recompute_layers=2", &b2)) {
            for (int s = 0; s < 2; s++)
                check_stage(&none, &b2, s, 4, 4, 1);
            ap_plan_free(&b2);
        }
        ap_plan_free(&none);
    }
    ap_graph_free(g);
}

/* N past a chunk's layers recomputes them all, one at a time: uniform 1. */
static void block_n_past_the_chunk_is_uniform_one(void)
{
    ap_graph *g = gpt();
    ap_plan full, b7;
    if (g && price(g, 4, "pp=2,vpp=2,recompute=full", &full)) {
        if (price(g, 4, "pp=2,vpp=2,recompute=full,recompute_method=block,"
                        "recompute_layers=7", &b7)) {
            CHECK(b7.step_time == full.step_time);
            CHECK(b7.max_mem_bytes == full.max_mem_bytes);
            ap_plan_free(&b7);
        }
        ap_plan_free(&full);
    }
    ap_graph_free(g);
}

/* Megatron-LM allows block 0: full granularity recomputing nothing. */
static void block_zero_prices_as_no_recomputation(void)
{
    ap_graph *g = gpt();
    ap_plan none, b0;
    if (g && price(g, 4, "pp=2,recompute=none", &none)) {
        if (price(g, 4, "pp=2,recompute=full,recompute_method=block,recompute_layers=0",
                  &b0)) {
            CHECK(b0.step_time == none.step_time);
            CHECK(b0.max_mem_bytes == none.max_mem_bytes);
            CHECK(b0.hw_tflops_per_gpu == b0.model_tflops_per_gpu);
            ap_plan_free(&b0);
        }
        ap_plan_free(&none);
    }
    ap_graph_free(g);
}

/* Uniform 3 on 24 layers: 8 groups, each keeping one input; every layer's
 * forward redone; three layers' activations live while a group is. With one
 * micro-batch in flight that working set outweighs the 16 inputs saved
 * (2A > 16I here): uniform N pays off only under many in flight. */
static void uniform_n_keeps_one_input_per_group_and_n_layers_live(void)
{
    ap_graph *g = gpt();
    ap_plan none, full, u3;
    if (g && price(g, 2, "recompute=none", &none)) {
        if (price(g, 2, "recompute=full", &full)) {
            check_stage(&none, &full, 0, 24, 24, 1);
            if (price(g, 2, "recompute=full,recompute_method=uniform,recompute_layers=3",
                      &u3)) {
                check_stage(&none, &u3, 0, 24, 8, 3);
                CHECK(u3.stages[0].bwd == full.stages[0].bwd);
                ap_plan_free(&u3);
            }
            ap_plan_free(&full);
        }
        ap_plan_free(&none);
    }
    ap_graph_free(g);
}

/* Uniform 1 is recompute=full as it always was, and a zeroed plan's
 * method (uniform, 0 layers) reads as it. */
static void uniform_one_is_full_recomputation(void)
{
    ap_graph *g = gpt();
    ap_plan full, u1;
    ap_cluster c;
    char err[AP_ERR_LEN];
    if (g && price(g, 4, "pp=2,vpp=2,recompute=full", &full)) {
        REQUIRE_OK(ap_test_megatron_plan(g, 4, SPEC ",pp=2,vpp=2,recompute=full,"
                                         "recompute_method=uniform,recompute_layers=1",
                                         &c, &u1, err), err);
        CHECK(u1.step_time == full.step_time);
        CHECK(u1.max_mem_bytes == full.max_mem_bytes);
        u1.recompute_layers = 0;
        REQUIRE_OK(ap_plan_evaluate(g, &c, &u1, err), err);
        CHECK(u1.step_time == full.step_time);
        CHECK(u1.max_mem_bytes == full.max_mem_bytes);
        ap_plan_free(&u1);
        ap_cluster_free(&c);
        ap_plan_free(&full);
    }
    ap_graph_free(g);
}

/* Megatron-LM's rules, as --megatron-args reads them. */
static void megatron_refuses_what_megatron_refuses(void)
{
    ap_graph *g = gpt();
    ap_plan p;
    char err[AP_ERR_LEN];
    const char *layout = "--tensor-model-parallel-size 2 --micro-batch-size 1 "
                         "--global-batch-size 8 ";
    struct {
        const char *args, *says;
    } bad[] = {
        {"--recompute-granularity full", "needs --recompute-method uniform or block"},
        {"--recompute-granularity selective --recompute-method block",
         "--recompute-method applies to --recompute-granularity full only"},
        {"--recompute-granularity selective --recompute-num-layers 2",
         "--recompute-num-layers applies to --recompute-granularity full only"},
        {"--recompute-granularity full --recompute-method uniform --recompute-num-layers 0",
         "groups of no layers never end"},
        {"--recompute-granularity full --recompute-method uniform --recompute-num-layers 5",
         "recompute_layers=5 (--recompute-num-layers) with recompute_method=uniform must "
         "divide the 24 layers of stage 0's model chunk"},
        {"--recompute-granularity full --recompute-method block --recompute-num-layers -1",
         "--recompute-num-layers: bad value \"-1\" (an integer from 0 to 2^30)"},
    };
    for (size_t i = 0; g && i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s%s", layout, bad[i].args);
        CHECK(ap_test_megatron_plan(g, 2, args, NULL, &p, err) == AP_EINPUT);
        CHECK_STR_HAS(err, bad[i].says);
        ap_plan_free(&p);
    }
    char args[512];
    snprintf(args, sizeof args, "%s--recompute-granularity full --recompute-method block "
             "--recompute-num-layers 4", layout);
    ap_plan b4;
    if (g && price(g, 2, "recompute=full,recompute_method=block,recompute_layers=4", &b4)) {
        REQUIRE_OK(ap_test_megatron_plan(g, 2, args, NULL, &p, err), err);
        CHECK(p.step_time == b4.step_time && p.max_mem_bytes == b4.max_mem_bytes);
        ap_plan_free(&p);
        ap_plan_free(&b4);
    }
    ap_graph_free(g);
}

int main(void)
{
    RUN(block_n_on_one_stage_recomputes_its_first_n_layers);
    RUN(block_n_under_interleaving_recomputes_n_per_virtual_stage);
    RUN(block_n_past_the_chunk_is_uniform_one);
    RUN(block_zero_prices_as_no_recomputation);
    RUN(uniform_n_keeps_one_input_per_group_and_n_layers_live);
    RUN(uniform_one_is_full_recomputation);
    RUN(megatron_refuses_what_megatron_refuses);
    return DONE();
}
