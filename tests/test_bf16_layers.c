/* The first and last layers kept in bf16 under FP8, as Megatron-LM's
 * --first-last-layers-bf16 (with --num-layers-at-start-in-bf16 and
 * --num-layers-at-end-in-bf16) runs them: get_fp8_context gives those
 * layers no FP8 context, so their linear layers run in bf16 and their
 * weights stay bf16. Llama 3 8B at 4,096 tokens on 8 H100s, tp 1, with
 * tensorwise scaling (Megatron-Core refuses the layers with delayed). */
#include "model.h"

static const char *base = "tp=1,mbs=1,gbs=64,fp8=1,fp8_recipe=tensorwise,fp8_param_gather=1";

static ap_graph *llama(int first, int last)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 4096;
    o.bf16_first = first;
    o.bf16_last = last;
    return ap_test_model_with("examples/hf/llama-3-8b.json", &o);
}

static double step(const ap_graph *g, const char *extra)
{
    char spec[256];
    ap_plan p;
    snprintf(spec, sizeof spec, "%s%s", base, extra);
    double s = ap_test_megatron_plan_ok(g, 8, spec, NULL, &p) ? -1 : p.step_time;
    ap_plan_free(&p);
    return s;
}

/* The kept layers are layer classes of their own, and their matmuls are no
 * FP8 linear layers. */
static void kept_layers_are_classes_of_their_own(void)
{
    ap_graph *g = llama(1, 2);
    CHECK(g && g->bf16_first == 1 && g->bf16_last == 2);
    if (!g)
        return;
    CHECK(g->layer_class[0] == 0 && g->layer_class[29] == 1);
    CHECK(g->layer_class[30] == 0 && g->layer_class[31] == 0);
    int up0 = ap_graph_find_op(g, "l0.mlp.up"), up1 = ap_graph_find_op(g, "l1.mlp.up");
    CHECK(up0 >= 0 && !ap_fp8_linear(g, up0));
    CHECK(up1 >= 0 && ap_fp8_linear(g, up1));
    ap_graph_free(g);
}

/* Every layer kept in bf16 is the bf16 step; two of 32 cost 2/32 of the
 * difference between the FP8 and the bf16 steps, the layers being equal
 * and nothing else changing. */
static void kept_layers_cost_their_share_of_bf16(void)
{
    ap_graph *fp8 = llama(0, 0), *edges = llama(1, 1), *all = llama(16, 16);
    double s_fp8 = step(fp8, ""), s_edges = step(edges, ",bf16_first=1,bf16_last=1");
    double s_all = step(all, ",bf16_first=16,bf16_last=16");
    double s_bf16 = step(fp8, ",fp8=0,fp8_recipe=delayed,fp8_param_gather=0");
    CHECK(s_fp8 > 0 && s_edges > s_fp8 && s_bf16 > s_edges);
    CHECK_NEAR(s_all, s_bf16, 1e-9);
    CHECK_NEAR(s_edges, s_fp8 + 2.0 / 32 * (s_bf16 - s_fp8), 2e-3);
    ap_graph_free(fp8);
    ap_graph_free(edges);
    ap_graph_free(all);
}

/* A graph built otherwise than the configuration, and delayed scaling,
 * are refused. */
static void a_graph_without_them_and_delayed_scaling_are_refused(void)
{
    char err[AP_ERR_LEN], spec[256];
    ap_graph *g = llama(0, 0), *edges = llama(1, 1);
    ap_plan p;
    snprintf(spec, sizeof spec, "%s,bf16_first=1,bf16_last=1", base);
    CHECK(ap_test_megatron_plan(g, 8, spec, NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "keeps 0 first and 0 last layers in bf16");
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(edges, 8, "tp=1,mbs=1,gbs=64,fp8=1,bf16_first=1,bf16_last=1",
                                NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "Delayed scaling does not support first / last layer in BF16");
    ap_plan_free(&p);
    /* Without FP8 every layer is bf16 anyway. */
    CHECK(ap_test_megatron_plan(edges, 8, "tp=1,mbs=1,gbs=64", NULL, &p, err) == AP_OK);
    ap_plan_free(&p);
    ap_graph_free(g);
    ap_graph_free(edges);
}

int main(void)
{
    RUN(kept_layers_are_classes_of_their_own);
    RUN(kept_layers_cost_their_share_of_bf16);
    RUN(a_graph_without_them_and_delayed_scaling_are_refused);
    return DONE();
}
