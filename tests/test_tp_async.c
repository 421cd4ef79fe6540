/* test_tp_async.c -- a column-parallel linear layer's backward without
 * userbuffers, as Transformer Engine's Linear and LayerNormLinear and
 * Megatron-Core's LinearWithGradAccumulationAndAsyncCommunication run it:
 * the all-reduce (or, under sequence parallelism, the reduce-scatter) of
 * its input gradient is started before its weight-gradient GEMM and waited
 * for after it, so only what outlasts that GEMM shows. tp_sync=1 prices
 * Megatron-LM before 2022, whose ColumnParallelLinear reduced the gradient
 * after the layer's whole backward; the spec, the Megatron-LM flag and
 * plan.json carry it, and the exports refuse it. */
#include <cjson/cJSON.h>

#include "model.h"

#include "planner/planner.h"

static ap_graph *gpt(void)
{
    return ap_test_model("bench/validation/models/megatron-gpt-1.7b.json", 2048);
}

static void only_what_outlasts_the_gemm_shows(void)
{
    CHECK(ap_tp_async_exposed(1e-4, 1e-3) == 0);
    CHECK_NEAR(ap_tp_async_exposed(1e-3, 2e-4), 8e-4, 1e-15);
    CHECK(ap_tp_async_exposed(1e-3, 0) == 1e-3);
    CHECK(ap_tp_async_exposed(0, 1e-3) == 0);
}

/* GPT 1.7B's layer (h = 2304, 4h MLP) at tp = 4 without sequence
 * parallelism, one 2048-token sequence: forward, the two row-parallel
 * all-reduces; backward, the two column-parallel layers' input gradients,
 * QKV's beside its weight-gradient GEMM (Megatron fuses q, k and v, three
 * times one projection's work) and fc1's beside fc1's. */
static void allreduces_hide_behind_the_weight_gradient_gemms(void)
{
    ap_graph *g = gpt();
    ap_cluster c, cs;
    ap_plan p, sync;
    if (!g) {
        CHECK(0);
        return;
    }
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 4, "tp=4,sp=0,mbs=1,gbs=8", &c, &p), "async");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 4, "tp=4,sp=0,mbs=1,gbs=8,tp_sync=1", &cs, &sync),
               "sync");
    double s = 2048, h = 2304, t = 4;
    double ar = ap_cost_allreduce(&c, 4, 1, s * h * 2);
    double qkv = 3 * ap_cost_gemm(&c, AP_BF16, s, h / t, h);
    double fc1 = ap_cost_gemm(&c, AP_BF16, s, 4 * h / t, h);
    const ap_block_point *a = ap_test_layer(&p), *z = ap_test_layer(&sync);
    CHECK(ar > 0 && qkv > 0 && fc1 > 0);
    CHECK_NEAR(a->kfwd.tp, 2 * ar, 1e-12);
    CHECK_NEAR(z->kbwd.tp, 2 * ar, 1e-12);
    CHECK_NEAR(a->kbwd.tp, fmax(0, ar - qkv) + fmax(0, ar - fc1), 1e-12);
    CHECK(a->kbwd.tp < z->kbwd.tp);
    CHECK(p.step_time < sync.step_time);
    /* Only the exposure changes: the GEMMs, the memory and the forward are
     * the same. */
    CHECK_NEAR(a->bwd - a->comm_bwd, z->bwd - z->comm_bwd, 1e-12);
    CHECK(a->fwd == z->fwd && p.max_mem_bytes == sync.max_mem_bytes);
    ap_plan_free(&p);
    ap_plan_free(&sync);
    ap_cluster_free(&c);
    ap_cluster_free(&cs);
    ap_graph_free(g);
}

/* One GPU: nothing to reduce, and tp_sync changes nothing. */
static void at_tp1_the_setting_changes_nothing(void)
{
    ap_graph *g = gpt();
    ap_plan p, sync;
    if (!g) {
        CHECK(0);
        return;
    }
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 4, "tp=1,mbs=1,gbs=8", NULL, &p), "async");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 4, "tp=1,mbs=1,gbs=8,tp_sync=1", NULL, &sync), "sync");
    CHECK(p.step_time == sync.step_time);
    ap_plan_free(&p);
    ap_plan_free(&sync);
    ap_graph_free(g);
}

/* --no-async-tensor-model-parallel-allreduce (Megatron-LM, 2022 to 2024)
 * turned the all-reduce's overlap off; under sequence parallelism
 * Megatron-LM left the reduce-scatter and re-gather asynchronous, so there
 * the flag changes nothing. */
static void the_megatron_flag_means_what_megatron_lm_did(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN], buf[256];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-parallel-size 4 "
                                      "--no-async-tensor-model-parallel-allreduce",
                                      &m, err), err);
    CHECK(m.run.tp_sync == 1);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",tp_sync=1");
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-parallel-size 4 --sequence-parallel "
                                      "--no-async-tensor-model-parallel-allreduce",
                                      &m, err), err);
    CHECK(m.run.tp_sync == 0);
    CHECK(ap_megatron_parse("tp_sync=2", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "(0 or 1)");
}

static void plan_json_carries_it_and_the_exports_refuse_it(void)
{
    ap_graph *g = gpt();
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    if (!g) {
        CHECK(0);
        return;
    }
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=4,sp=1,mbs=1,gbs=16,tp_sync=1", &d, NULL),
               "see above");
    CHECK(d.run.tp_sync == 1);
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "tp_sync=1");
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "estimate without tp_sync");
    ap_plan_desc_free(&d);
    /* Off, the field is not written, and a plan without it reads as off. */
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "tp=4,sp=1,mbs=1,gbs=16", NULL, &p), "plan");
    text = ap_plan_to_json(g, &p);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(root && !cJSON_GetObjectItemCaseSensitive(root, "async_tensor_parallel_backward"));
    cJSON_Delete(root);
    free(text);
    p.run.tp_sync = 1;
    text = ap_plan_to_json(g, &p);
    CHECK_STR_HAS(text, "\"async_tensor_parallel_backward\":\tfalse");
    char *at = text ? strstr(text, "\"async_tensor_parallel_backward\":\tfalse") : NULL;
    if (at) {
        memcpy(at + strlen("\"async_tensor_parallel_backward\":\t"), "0    ", 5);
        CHECK(ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "plan.json: async_tensor_parallel_backward");
    }
    free(text);
    ap_plan_free(&p);
    /* At tp = 1 there is nothing synchronous to state. */
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,mbs=1,gbs=16,tp_sync=1", &d, NULL), "tp1");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

int main(void)
{
    RUN(only_what_outlasts_the_gemm_shows);
    RUN(allreduces_hide_behind_the_weight_gradient_gemms);
    RUN(at_tp1_the_setting_changes_nothing);
    RUN(the_megatron_flag_means_what_megatron_lm_did);
    RUN(plan_json_carries_it_and_the_exports_refuse_it);
    return DONE();
}
