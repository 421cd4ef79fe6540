/* test_attention_eff.c -- flash attention's backward priced at its own,
 * published efficiency: gpu.attention_backward_efficiency, its default, its
 * validation, and the Hopper presets' figures (FlashAttention-3 paper, cuDNN
 * at 8k tokens, head dim 128, bf16). */
#include "costmodel/costmodel.h"
#include "test.h"
#include "model.h"

#define H100_PEAK 989.4e12

/* A Llama-style layer's attention at 8k tokens: 32 heads of 128. */
static const double bn = 32, s = 8192, d = 128;

/* FlashAttention's benchmark FLOPs: 4 s^2 d per head, halved by a causal
 * mask; the backward is counted as 2.5 times that. */
static double causal_fwd_flops(void)
{
    return 4 * bn * s * s * d / 2;
}

/* The h100-sxm preset's kernel figures price a causal 8k attention at
 * exactly the rates the FlashAttention-3 paper measured for cuDNN: 529
 * TFLOP/s forward (causal) and 518 TFLOP/s backward. */
static void h100_causal_8k_runs_at_the_published_cudnn_rates(void)
{
    ap_cluster c = ap_test_kernel_preset("h100-sxm", 8);
    double f = causal_fwd_flops();
    double fwd = ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 1);
    double bwd = ap_cost_attention_backward(&c, AP_BF16, bn, s, s, d, d, 1);
    CHECK_NEAR(fwd, f / (H100_PEAK * c.attn_eff), 1e-12);
    CHECK_NEAR(bwd, 2.5 * f / (H100_PEAK * c.attn_bwd_eff), 1e-12);
    CHECK_NEAR(f / fwd, 529e12, 1e-9);
    CHECK_NEAR(2.5 * f / bwd, 518e12, 1e-9);
    /* So the backward takes 2.5 x 529/518 = 2.553 forwards, not 2.5. */
    CHECK_NEAR(bwd / fwd, 2.5 * 529.0 / 518.0, 1e-9);
    ap_cluster_free(&c);
}

static void h200_and_h800_share_h100s_attention_figures(void)
{
    const char *names[] = {"h200", "h800"};
    ap_cluster h100;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 0, 0, &h100, err), err);
    for (int i = 0; i < 2; i++) {
        ap_cluster c;
        REQUIRE_OK(ap_cluster_preset(names[i], 0, 0, &c, err), err);
        CHECK(c.attn_eff == h100.attn_eff && c.attn_bwd_eff == h100.attn_bwd_eff);
        ap_cluster_free(&c);
    }
    ap_cluster_free(&h100);
}

/* A100: the FlashAttention-2 paper's best backward (63% of peak) against
 * its best forward (73%) scales the forward figure. */
static void a100_backward_is_lower_by_the_flashattention2_ratio(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("a100-80g", 0, 0, &c, err), err);
    CHECK_NEAR(c.attn_bwd_eff / c.attn_eff, 63.0 / 73.0, 1e-12);
    ap_cluster_free(&c);
}

/* b200 has no published backward figure: no field, so the forward's. */
static void b200_backward_falls_back_to_the_forward_efficiency(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("b200", 0, 0, &c, err), err);
    CHECK(c.attn_bwd_eff == 0);
    double fwd = ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 1);
    CHECK_NEAR(ap_cost_attention_backward(&c, AP_BF16, bn, s, s, d, d, 1),
               2.5 * fwd, 1e-12);
    ap_cluster_free(&c);
}

/* A cluster file; `extra` is spliced into "gpu" (empty for none). */
static int parse_with(const char *extra, ap_cluster *c, char *err)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"format\": \"autopar-cluster/1\", \"name\": \"t\", \"nodes\": 1,"
             " \"gpus_per_node\": 8, \"gpu\": {\"name\": \"H100\", \"sms\": 132,"
             " \"memory_bytes\": 85520809984, \"reserved_bytes\": 5349782323,"
             " \"hbm_bandwidth\": 3.35e12, \"hbm_efficiency\": 0.9,"
             " \"gemm_efficiency\": 0.75, \"attention_efficiency\": 0.6, %s"
             " \"kernel_floor_s\": 4e-6, \"peak_flops\": {\"bf16\": 989.4e12,"
             " \"fp16\": 989.4e12, \"fp32\": 494.7e12}},"
             " \"links\": {\"intra\": {\"bandwidth\": 3.6e11, \"latency_s\": 3.4e-6},"
             " \"inter\": {\"bandwidth\": 4.5e10, \"latency_s\": 9.6e-6}}}",
             extra);
    return ap_cluster_parse(text, strlen(text), "cluster.json", 0, 0, c, err);
}

/* Files written before the field existed price the backward as before:
 * 2.5x the forward's FLOPs at attention_efficiency. */
static void a_file_without_the_field_prices_backward_at_attention_efficiency(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(parse_with("", &c, err), err);
    CHECK(c.attn_bwd_eff == 0);
    double f = causal_fwd_flops();
    double fwd = ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 1);
    double bwd = ap_cost_attention_backward(&c, AP_BF16, bn, s, s, d, d, 1);
    CHECK_NEAR(bwd, 2.5 * f / (H100_PEAK * 0.6), 1e-12);
    CHECK_NEAR(bwd, 2.5 * fwd, 1e-12);
    ap_cluster_free(&c);
}

static void a_file_with_the_field_prices_backward_at_it(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(parse_with("\"attention_backward_efficiency\": 0.4,", &c, err), err);
    CHECK(c.attn_bwd_eff == 0.4);
    double f = causal_fwd_flops();
    CHECK_NEAR(ap_cost_attention_backward(&c, AP_BF16, bn, s, s, d, d, 1),
               2.5 * f / (H100_PEAK * 0.4), 1e-12);
    /* The forward keeps attention_efficiency. */
    CHECK_NEAR(ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 1),
               f / (H100_PEAK * 0.6), 1e-12);
    ap_cluster_free(&c);
}

static void the_field_is_an_efficiency_named_in_errors(void)
{
    const char *bad[] = {"\"attention_backward_efficiency\": 0,",
                         "\"attention_backward_efficiency\": 1.5,",
                         "\"attention_backward_efficiency\": -0.5,",
                         "\"attention_backward_efficiency\": \"0.5\","};
    for (int i = 0; i < 4; i++) {
        ap_cluster c;
        char err[AP_ERR_LEN] = "";
        CHECK(parse_with(bad[i], &c, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "cluster.json: gpu.attention_backward_efficiency: "
                           "must be a number in [0.001, 1]");
        ap_cluster_free(&c);
    }
    ap_cluster c;
    char err[AP_ERR_LEN] = "";
    CHECK(parse_with("\"attention_backward_efficiency\": 0.5, "
                     "\"attention_backward_efficiency\": 0.5,", &c, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "gpu.attention_backward_efficiency: duplicate field");
    ap_cluster_free(&c);
}

static void the_field_round_trips_and_is_written_only_when_set(void)
{
    ap_cluster c, back;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 0, 0, &c, err), err);
    char *text = ap_cluster_to_json(&c);
    CHECK_STR_HAS(text, "\"attention_backward_efficiency\"");
    REQUIRE_OK(ap_cluster_parse(text, strlen(text), "rt.json", 0, 0, &back, err), err);
    CHECK(back.attn_bwd_eff == c.attn_bwd_eff && back.attn_eff == c.attn_eff);
    free(text);
    ap_cluster_free(&back);
    ap_cluster_free(&c);

    REQUIRE_OK(parse_with("", &c, err), err);
    text = ap_cluster_to_json(&c);
    CHECK(!strstr(text, "attention_backward_efficiency"));
    free(text);
    ap_cluster_free(&c);
}

/* At 16 tokens a head does 8 FLOPs per byte, far below the H100's ridge:
 * the backward is bound by its traffic, q, k, v, o, dO in and dQ, dK, dV
 * out, twice the forward's bytes, at the streaming bandwidth. */
static void a_short_backward_is_bound_by_twice_the_forwards_bytes(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 0, 0, &c, err), err);
    double heads = 1e5, t = 16;
    double fwd_bytes = 2.0 * heads * 4 * t * d;
    CHECK_NEAR(ap_cost_attention(&c, AP_BF16, heads, t, t, d, d, 0),
               fwd_bytes / (3.35e12 * 0.9), 1e-12);
    CHECK_NEAR(ap_cost_attention_backward(&c, AP_BF16, heads, t, t, d, d, 0),
               2 * fwd_bytes / (3.35e12 * 0.9), 1e-12);
    ap_cluster_free(&c);
}

static void an_empty_backward_costs_nothing_and_a_tiny_one_the_floor(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 0, 0, &c, err), err);
    CHECK(ap_cost_attention_backward(&c, AP_BF16, 0, s, s, d, d, 1) == 0);
    CHECK(ap_cost_attention_backward(&c, AP_BF16, bn, s, s, d, -1, 1) == 0);
    CHECK(ap_cost_attention_backward(&c, AP_BF16, 1, 1, 1, 8, 8, 0) == c.kernel_floor);
    ap_cluster_free(&c);
}

int main(void)
{
    RUN(h100_causal_8k_runs_at_the_published_cudnn_rates);
    RUN(h200_and_h800_share_h100s_attention_figures);
    RUN(a100_backward_is_lower_by_the_flashattention2_ratio);
    RUN(b200_backward_falls_back_to_the_forward_efficiency);
    RUN(a_file_without_the_field_prices_backward_at_attention_efficiency);
    RUN(a_file_with_the_field_prices_backward_at_it);
    RUN(the_field_is_an_efficiency_named_in_errors);
    RUN(the_field_round_trips_and_is_written_only_when_set);
    RUN(a_short_backward_is_bound_by_twice_the_forwards_bytes);
    RUN(an_empty_backward_costs_nothing_and_a_tiny_one_the_floor);
    return DONE();
}
