/* test_plan_best.c -- the planner's answer is the faster of the search's
 * plan and the fastest Megatron-LM configuration (ap_plan_best): never
 * slower than either, the sweep's plan being its configuration's own, the
 * search's alone under no_sweep, no_pipeline and max_stages, and the
 * search's errors standing. gpt-1.3b on 16 H100s at 8 sequences is a case
 * where the sweep wins: tp 2 with sequence parallelism over 8 data-parallel
 * replicas, one sequence each, which the search's 2-D meshes do not hold. */
#include "planner/planner.h"
#include "model.h"

/* The model at `rel` on `gpus` H100s in nodes of up to 8; 0 when either
 * fails to load (reported). The caller frees both. */
static int setup(const char *rel, int gpus, ap_graph **g, ap_cluster *c)
{
    char err[AP_ERR_LEN];
    *g = ap_test_model(rel, 0);
    CHECK(*g != NULL);
    int rc = ap_cluster_preset("h100-sxm", gpus, gpus < 8 ? gpus : 8, c, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK(rc == AP_OK);
    if (*g && !rc)
        return 1;
    ap_graph_free(*g);
    return 0;
}

static ap_plan_opts opts(int gpus, double gbs)
{
    ap_plan_opts o;
    ap_plan_opts_default(&o);
    o.gpus = gpus;
    o.gpus_per_node = gpus < 8 ? gpus : 8;
    o.global_batch = gbs;
    o.ilp_time_limit = 0; /* the plan must not depend on the machine's load */
    o.progress = 0;
    return o;
}

static void faster_of_search_and_sweep(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g;
    ap_cluster c;
    if (!setup("examples/gpt-1.3b.json", 16, &g, &c))
        return;
    ap_plan_opts o = opts(16, 8);
    ap_plan search, best;
    ap_plan_origin origin;
    ap_sweep_result sw;
    REQUIRE_OK(ap_plan_search(g, &c, &o, &search, err), err);
    REQUIRE_OK(ap_plan_best(g, &c, &o, &best, &origin, &sw, err), err);
    CHECK(origin.swept && sw.found && origin.valid == sw.valid && origin.fit == sw.fit);
    CHECK(origin.search_step == search.step_time);
    CHECK(origin.sweep_step == sw.plan.step_time);
    CHECK(best.step_time <= search.step_time && best.step_time <= sw.plan.step_time);
    /* Here the sweep's is the faster. */
    CHECK(origin.from_sweep);
    CHECK(sw.plan.step_time < search.step_time);
    CHECK(best.step_time == sw.plan.step_time);
    CHECK(best.max_mem_bytes == sw.plan.max_mem_bytes);
    CHECK(origin.best.tp == 2 && origin.best.pp == 1 && origin.best.dp == 8 &&
          origin.best.sp == 1);
    char line[512];
    ap_plan_origin_line(&origin, line, sizeof line);
    CHECK_STR_HAS(line, "Megatron-LM configuration tp=2,pp=1,dp=8,");
    CHECK_STR_HAS(line, "faster than the search's plan");
    ap_plan_free(&best);
    ap_sweep_result_free(&sw);

    /* no_sweep, no_pipeline and max_stages: the search's plan, unswept. */
    for (int k = 0; k < 3; k++) {
        ap_plan_opts q = o;
        q.no_sweep = k == 0;
        q.no_pipeline = k == 1;
        q.max_stages = k == 2 ? 2 : 0;
        ap_plan alone, p;
        REQUIRE_OK(ap_plan_search(g, &c, &q, &alone, err), err);
        REQUIRE_OK(ap_plan_best(g, &c, &q, &p, &origin, NULL, err), err);
        CHECK(!origin.swept && !origin.from_sweep);
        CHECK(p.step_time == alone.step_time);
        ap_plan_origin_line(&origin, line, sizeof line);
        CHECK(line[0] == 0);
        ap_plan_free(&p);
        ap_plan_free(&alone);
    }
    ap_plan_free(&search);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Where the search's plan is the faster (gpt-1.3b on 16 GPUs at 128, the
 * case test_plan_vs_megatron checks), it is the answer, and the line says
 * it was no slower. */
static void search_kept_when_no_slower(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g;
    ap_cluster c;
    if (!setup("examples/gpt-1.3b.json", 16, &g, &c))
        return;
    ap_plan_opts o = opts(16, 128);
    ap_plan p;
    ap_plan_origin origin;
    REQUIRE_OK(ap_plan_best(g, &c, &o, &p, &origin, NULL, err), err);
    CHECK(origin.swept && !origin.from_sweep);
    CHECK(p.step_time == origin.search_step && p.step_time <= origin.sweep_step);
    char line[512];
    ap_plan_origin_line(&origin, line, sizeof line);
    CHECK_STR_HAS(line, "the search's plan: no slower than the fastest of");
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* A model that cannot fit: the search's error, not a sweep's answer. */
static void search_errors_stand(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g;
    ap_cluster c;
    if (!setup("examples/hf/llama-3-70b.json", 1, &g, &c))
        return;
    ap_plan_opts o = opts(1, 8);
    ap_plan p;
    ap_plan_origin origin;
    CHECK(ap_plan_best(g, &c, &o, &p, &origin, NULL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "does not fit");
    CHECK(!origin.swept);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(faster_of_search_and_sweep);
    RUN(search_kept_when_no_slower);
    RUN(search_errors_stand);
    return DONE();
}
