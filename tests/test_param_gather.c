/* The distributed optimizer's parameter all-gather (docs/cost-model.md,
 * "Gradient synchronisation"): priced apart from the gradient reduction,
 * exposed in full after the optimizer step without --overlap-param-gather,
 * and with it the first bucket exposed and the rest behind the first
 * micro-batch's forward (Megatron-Core's forward pre-hooks). */
#include <math.h>
#include <string.h>

#include "model.h"

#include "planner/planner.h"

/* gpt-1.3b at 512 tokens, tp=1 and pp=1 on 16 H100s over two nodes: every
 * parameter is gathered over all 16 ranks, across InfiniBand, in buckets of
 * Megatron's max(40M, 1M x 16) = 40M parameters. */
#define SPEC "tp=1,pp=1,mbs=1,gbs=32"
#define BUCKET 40e6

static double gather_of(const ap_graph *g, const ap_cluster *c)
{
    double bytes = 2 * g->total_params;
    return ap_cost_collective(c, AP_COLL_ALLGATHER, 16, 2, 2 * BUCKET) * bytes / (2 * BUCKET);
}

static void gather_is_an_all_gather_of_the_bf16_parameters(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, SPEC, &c, &p, err), err);
    const ap_stage *st = &p.stages[0];
    double a = gather_of(g, &c);
    CHECK_NEAR(st->param_sync / a, 1, 1e-9);
    CHECK_NEAR(st->param_buckets, g->total_params / BUCKET, 1e-9);
    /* The reduce-scatter of the bf16 gradients is the rest of grad_sync. */
    double rs = ap_cost_collective(&c, AP_COLL_REDUCESCATTER, 16, 2, 2 * BUCKET) *
                g->total_params / BUCKET;
    CHECK_NEAR((st->grad_sync - st->param_sync) / rs, 1, 1e-9);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void gather_is_exposed_in_full_without_overlap(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_plan on, off;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, SPEC, NULL, &on, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, SPEC ",overlap_param=0", NULL, &off, err), err);
    const ap_stage *a = &on.stages[0], *b = &off.stages[0];
    CHECK(off.serial_param_gather && !on.serial_param_gather);
    CHECK(b->param_sync > 0);
    CHECK_NEAR(b->param_sync_exposed, b->param_sync, 1e-15);
    CHECK_NEAR(off.t_param_sync, b->param_sync, 1e-15);
    CHECK_NEAR(off.t_param_sync_total, b->param_sync, 1e-15);
    /* Same prices otherwise: only the gather's exposed part differs. */
    CHECK_NEAR(a->param_sync, b->param_sync, 1e-15);
    CHECK_NEAR(off.step_time - on.step_time, b->param_sync - a->param_sync_exposed, 1e-12);
    ap_plan_free(&on);
    ap_plan_free(&off);
    ap_graph_free(g);
}

/* n buckets of A/n, each dispatched when the one before is waited on, each
 * behind the forward of the layers of the bucket before (F/n):
 * A/n + max(0, (n-1)/n (A - F)). */
static void overlapped_gather_exposes_its_first_bucket_and_what_the_forward_leaves(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, SPEC, NULL, &p, err), err);
    const ap_stage *st = &p.stages[0];
    double a = st->param_sync, f = st->fwd;
    double n = ceil(g->total_params / BUCKET);
    CHECK(n >= 2);
    CHECK_NEAR(st->param_sync_exposed, a / n + fmax(0, (n - 1) / n * (a - f)), 1e-15);
    CHECK(st->param_sync_exposed >= a / n && st->param_sync_exposed < a);
    CHECK_NEAR(p.t_param_sync, st->param_sync_exposed, 1e-15);
    /* The gradient reduction's exposed part beside it is unchanged. */
    double reduce = st->grad_sync - a;
    CHECK_NEAR(st->grad_sync_exposed - st->param_sync_exposed, fmax(0, reduce - st->bwd),
               1e-15);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* Plain data parallelism all-reduces gradients: nothing to gather. */
static void zero0_has_no_gather_and_refuses_the_overlap(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, SPEC ",zero=0", NULL, &p, err), err);
    CHECK(p.stages[0].param_sync == 0 && p.stages[0].param_sync_exposed == 0);
    CHECK(p.t_param_sync == 0 && p.stages[0].grad_sync > 0);
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(g, 16, SPEC ",zero=0,overlap_param=1", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "overlap_param: --overlap-param-gather is only supported with the "
                       "distributed optimizer");
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* ZeRO-3 gathers each layer's weights before its forward and backward, per
 * micro-batch: a mechanism of its own, priced as communication, with no
 * once-per-step gather. */
static void zero3_keeps_its_per_layer_gathers(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, SPEC ",zero=3", NULL, &p, err), err);
    CHECK(p.stages[0].param_sync == 0 && p.t_param_sync == 0);
    CHECK(p.t_kinds.param_gather > 0);
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(g, 16, SPEC ",zero=3,overlap_param=1", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "zero=3");
    ap_plan_free(&p);
    ap_graph_free(g);
}

static void overlap_needs_the_overlapped_gradient_reduction(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(ap_test_megatron_plan(g, 16, SPEC ",overlap_grad=0,overlap_param=1", NULL, &p,
                                err) == AP_EINPUT);
    CHECK_STR_HAS(err, "overlap_param: --overlap-param-gather needs --overlap-grad-reduce");
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(g, 16, "--use-distributed-optimizer --overlap-param-gather",
                                NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--overlap-grad-reduce");
    ap_plan_free(&p);
    ap_graph_free(g);
}

static int overlap_of_spec(const char *spec)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    if (ap_megatron_parse(spec, &m, err))
        return -2;
    return ap_megatron_overlap_param(&m);
}

static int overlap_of_args(const char *args)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    if (ap_megatron_parse_args(args, &m, err))
        return -2;
    return ap_megatron_overlap_param(&m);
}

/* A spec that does not name overlap_param means what it meant before the
 * key: the gather overlapped where the gradient reduction is. Megatron-LM's
 * flags default to no overlap. */
static void spec_default_follows_overlap_grad(void)
{
    CHECK(overlap_of_spec("tp=2") == 1);
    CHECK(overlap_of_spec("overlap_grad=0") == 0);
    CHECK(overlap_of_spec("zero=0") == 0);
    CHECK(overlap_of_spec("zero=2") == 0);
    CHECK(overlap_of_spec("overlap_param=0") == 0);
    CHECK(overlap_of_spec("overlap_param=2") == -2);
    CHECK(overlap_of_args("--use-distributed-optimizer --overlap-grad-reduce") == 0);
    CHECK(overlap_of_args("--use-distributed-optimizer --overlap-grad-reduce "
                          "--overlap-param-gather") == 1);
    /* The formatted spec names it only where it differs from that default. */
    ap_megatron m;
    char err[AP_ERR_LEN], buf[512];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse("overlap_param=0", &m, err), err);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",overlap_param=0");
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse("overlap_param=1", &m, err), err);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK(!strstr(buf, "overlap_param"));
}

int main(void)
{
    RUN(gather_is_an_all_gather_of_the_bf16_parameters);
    RUN(gather_is_exposed_in_full_without_overlap);
    RUN(overlapped_gather_exposes_its_first_bucket_and_what_the_forward_leaves);
    RUN(zero0_has_no_gather_and_refuses_the_overlap);
    RUN(zero3_keeps_its_per_layer_gathers);
    RUN(overlap_needs_the_overlapped_gradient_reduction);
    RUN(spec_default_follows_overlap_grad);
    return DONE();
}
