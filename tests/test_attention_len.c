/* test_attention_len.c -- flash attention's rate follows the kernel's
 * length: the Hopper presets carry cuDNN's curves from the FlashAttention-3
 * paper (H100 SXM5, head dim 128, bf16; TFLOP/s at 512 ... 16k tokens):
 *   forward, causal        315 410 484 518 529 539
 *   forward, no mask       497 574 617 609 600 595
 *   backward (no mask)     305 408 465 499 518 516
 * as factors on the 8k efficiencies (529, 518). The forward is indexed by
 * its keys, the backward by its queries: the loop each thread block runs. */
#include "costmodel/costmodel.h"
#include "test.h"
#include "model.h"

#define H100_PEAK 989.4e12

/* 512 heads of 128: from 512 tokens on (2k on B200) every kernel priced
 * here is bound by the tensor cores, not by HBM or the kernel floor. */
static const double bn = 512, d = 128;

/* The curves are checked against the chart they were read from: the
 * preset's kernel figures, before its training-step scale. */
static ap_cluster preset(const char *name)
{
    return ap_test_kernel_preset(name, 8);
}

/* FlashAttention's benchmark FLOPs, autopar's count: 4 s t d per head,
 * halved by a causal mask. */
static double fwd_flops(double s, double t, int causal)
{
    return 4 * bn * s * t * d * (causal ? 0.5 : 1.0);
}

/* The TFLOP/s a kernel runs at, on the benchmark's FLOP count. */
static double fwd_rate(const ap_cluster *c, double s, double t, int causal)
{
    return fwd_flops(s, t, causal) / ap_cost_attention(c, AP_BF16, bn, s, t, d, d, causal);
}

static double bwd_rate(const ap_cluster *c, double s, double t, int causal)
{
    return 2.5 * fwd_flops(s, t, causal) /
           ap_cost_attention_backward(c, AP_BF16, bn, s, t, d, d, causal);
}

/* The curve's reference point: the causal 8k forward and the 8k backward
 * are the efficiencies themselves, so they price exactly as without it. */
static void h100_causal_8k_prices_exactly_as_without_the_curve(void)
{
    ap_cluster c = preset("h100-sxm"), flat = c;
    flat.attn_len_n = 0;
    CHECK(ap_attention_length_factor(&c, AP_ATTN_FWD_CAUSAL, 8192) == 1);
    CHECK(ap_attention_length_factor(&c, AP_ATTN_BWD, 8192) == 1);
    CHECK(ap_cost_attention(&c, AP_BF16, bn, 8192, 8192, d, d, 1) ==
          ap_cost_attention(&flat, AP_BF16, bn, 8192, 8192, d, d, 1));
    CHECK(ap_cost_attention_backward(&c, AP_BF16, bn, 8192, 8192, d, d, 1) ==
          ap_cost_attention_backward(&flat, AP_BF16, bn, 8192, 8192, d, d, 1));
    CHECK_NEAR(fwd_rate(&c, 8192, 8192, 1), 529e12, 1e-12);
    CHECK_NEAR(bwd_rate(&c, 8192, 8192, 1), 518e12, 1e-12);
}

/* Many runs train at 2k or 4k: there cuDNN is slower than at 8k. */
static void causal_2k_and_4k_run_at_the_published_rates(void)
{
    ap_cluster c = preset("h100-sxm"), flat = c;
    flat.attn_len_n = 0;
    CHECK_NEAR(fwd_rate(&c, 2048, 2048, 1), 484e12, 1e-12);
    CHECK_NEAR(fwd_rate(&c, 2048, 2048, 1) / fwd_rate(&flat, 2048, 2048, 1),
               484.0 / 529.0, 1e-12);
    CHECK_NEAR(fwd_rate(&c, 4096, 4096, 1), 518e12, 1e-12);
    CHECK_NEAR(bwd_rate(&c, 2048, 2048, 1), 465e12, 1e-12);
    CHECK_NEAR(bwd_rate(&c, 4096, 4096, 1), 499e12, 1e-12);
    /* 512 tokens: 0.60 of the 8k rate. */
    CHECK_NEAR(fwd_rate(&c, 512, 512, 1), 315e12, 1e-12);
    CHECK_NEAR(fwd_rate(&c, 512, 512, 1) / fwd_rate(&c, 8192, 8192, 1), 315.0 / 529.0,
               1e-12);
}

/* Between two points the factor is linear in log(length): at 2048 * sqrt(2)
 * halfway between 2k and 4k, at 3072 a fraction log(1.5)/log(2) = 0.585
 * of the way. */
static void between_points_the_rate_is_linear_in_log_length(void)
{
    ap_cluster c = preset("h100-sxm");
    double mid = 2048 * sqrt(2.0);
    CHECK_NEAR(fwd_rate(&c, mid, mid, 1), (484e12 + 518e12) / 2, 1e-12);
    double w = log(1.5) / log(2.0);
    CHECK_NEAR(fwd_rate(&c, 3072, 3072, 1), 484e12 + w * (518e12 - 484e12), 1e-12);
    CHECK_NEAR(ap_attention_length_factor(&c, AP_ATTN_BWD, 3072),
               (465 + w * (499 - 465)) / 518.0, 1e-12);
    /* Linear in the length itself would give 501 at 3072, not 503.9. */
    CHECK(fwd_rate(&c, 3072, 3072, 1) > 503e12);
}

/* Without the mask cuDNN is faster at every length, and fastest at 2k. */
static void the_unmasked_forward_has_its_own_curve(void)
{
    ap_cluster c = preset("h100-sxm");
    CHECK_NEAR(fwd_rate(&c, 8192, 8192, 0), 600e12, 1e-12);
    CHECK_NEAR(fwd_rate(&c, 2048, 2048, 0), 617e12, 1e-12);
    CHECK_NEAR(fwd_rate(&c, 512, 512, 0), 497e12, 1e-12);
    CHECK_NEAR(ap_attention_length_factor(&c, AP_ATTN_FWD_NONCAUSAL, 8192),
               600.0 / 529.0, 1e-12);
}

/* Outside the table the nearest point holds. */
static void lengths_outside_the_table_take_its_end_points(void)
{
    ap_cluster c = preset("h100-sxm");
    /* (Below 512 tokens a kernel of head dim 128 is bound by HBM, so the
     * factor itself.) */
    CHECK_NEAR(ap_attention_length_factor(&c, AP_ATTN_FWD_CAUSAL, 128), 315.0 / 529.0,
               1e-12);
    CHECK_NEAR(fwd_rate(&c, 65536, 65536, 1), 539e12, 1e-12);
    CHECK_NEAR(fwd_rate(&c, 131072, 131072, 0), 595e12, 1e-12);
    CHECK_NEAR(bwd_rate(&c, 262144, 262144, 0), 516e12, 1e-12);
    CHECK_NEAR(ap_attention_length_factor(&c, AP_ATTN_BWD, 256), 305.0 / 518.0, 1e-12);
    CHECK(ap_attention_length_factor(&c, AP_ATTN_FWD_CAUSAL, 0) == 1);
    CHECK(ap_attention_length_factor(&c, AP_ATTN_FWD_CAUSAL, NAN) == 1);
}

/* The forward's thread blocks each take 128 queries and loop over the keys;
 * the backward's take 128 keys and loop over the queries. So a context-
 * parallel step of s queries and s/2 keys runs its forward at the 2k rate
 * and its backward at the 4k rate (s = 4096), and an s/2 x s step the
 * other way round, though both do the same FLOPs. */
static void the_forward_follows_the_keys_and_the_backward_the_queries(void)
{
    ap_cluster c = preset("h100-sxm");
    double s = 4096;
    CHECK_NEAR(fwd_rate(&c, s, s / 2, 0), 617e12, 1e-12);
    CHECK_NEAR(fwd_rate(&c, s / 2, s, 0), 609e12, 1e-12);
    CHECK_NEAR(bwd_rate(&c, s, s / 2, 0), 499e12, 1e-12);
    CHECK_NEAR(bwd_rate(&c, s / 2, s, 0), 465e12, 1e-12);
}

/* Context-parallel steps are priced by the same two functions, so a cp = 2
 * rank's causal attention at 8k (steps 4k x 4k causal and 4k x 2k
 * unmasked) runs its forward steps at 518 and 617 TFLOP/s. */
static void context_parallel_steps_run_at_their_blocks_rates(void)
{
    ap_cluster c = preset("h100-sxm"), flat = c;
    flat.attn_len_n = 0;
    double s = 4096, heads = bn;
    double steps = fwd_flops(s, s, 1) / 518e12 + fwd_flops(s, s / 2, 0) / 617e12;
    double flat_steps = (fwd_flops(s, s, 1) + fwd_flops(s, s / 2, 0)) / 529e12;
    double with = ap_cost_attention_cp(&c, AP_BF16, heads, heads, s, d, d, 1, 2, 0);
    double without = ap_cost_attention_cp(&flat, AP_BF16, heads, heads, s, d, d, 1, 2, 0);
    /* The corrections between the steps are the same either way. */
    CHECK_NEAR(with - steps, without - flat_steps, 1e-9);
}

/* a100-80g and b200 carry no curve: every length at the one efficiency, as
 * before the curve existed. */
static void clusters_without_a_curve_price_every_length_alike(void)
{
    const char *names[] = {"a100-80g", "b200"};
    for (int i = 0; i < 2; i++) {
        ap_cluster c = preset(names[i]);
        double peak = c.peak_flops[AP_BF16];
        double bwd_eff = c.attn_bwd_eff > 0 ? c.attn_bwd_eff : c.attn_eff;
        CHECK(c.attn_len_n == 0);
        for (double t = 2048; t <= 65536; t *= 2) {
            CHECK_NEAR(fwd_rate(&c, t, t, 1), peak * c.attn_eff, 1e-12);
            CHECK_NEAR(fwd_rate(&c, t, t, 0), peak * c.attn_eff, 1e-12);
            CHECK_NEAR(bwd_rate(&c, t, t, 1), peak * bwd_eff, 1e-12);
            CHECK(ap_attention_length_factor(&c, AP_ATTN_BWD, t) == 1);
        }
    }
    ap_cluster a100 = preset("a100-80g");
    CHECK_NEAR(fwd_rate(&a100, 2048, 2048, 1), 0.6 * 312e12, 1e-12);
}

/* The factors are relative: calibration, which scales attn_eff and
 * attn_bwd_eff, scales the whole curve. */
static void scaling_the_efficiencies_scales_every_length(void)
{
    ap_cluster c = preset("h100-sxm"), half = c;
    half.attn_eff *= 0.5;
    half.attn_bwd_eff *= 0.5;
    for (double t = 512; t <= 16384; t *= 2) {
        CHECK_NEAR(fwd_rate(&half, t, t, 1), 0.5 * fwd_rate(&c, t, t, 1), 1e-12);
        CHECK_NEAR(bwd_rate(&half, t, t, 0), 0.5 * bwd_rate(&c, t, t, 0), 1e-12);
    }
}

/* No kernel runs above the peak, whatever efficiency times factor says. */
static void efficiency_times_factor_is_capped_at_the_peak(void)
{
    ap_cluster c = preset("h100-sxm");
    c.attn_eff = 0.9; /* 0.9 x 617/529 = 1.05 */
    CHECK_NEAR(fwd_rate(&c, 2048, 2048, 0), H100_PEAK, 1e-12);
    CHECK_NEAR(fwd_rate(&c, 2048, 2048, 1), H100_PEAK * 0.9 * 484 / 529, 1e-12);
}

/* Short kernels stay bound by HBM or the floor, as before: the factor only
 * slows the tensor-core term. */
static void a_memory_bound_kernel_is_unchanged(void)
{
    ap_cluster c = preset("h100-sxm"), flat = c;
    flat.attn_len_n = 0;
    double heads = 1e5, t = 16;
    CHECK(ap_cost_attention(&c, AP_BF16, heads, t, t, d, d, 0) ==
          ap_cost_attention(&flat, AP_BF16, heads, t, t, d, d, 0));
    CHECK(ap_cost_attention_backward(&c, AP_BF16, 1, 1, 1, 8, 8, 0) == c.kernel_floor);
}

int main(void)
{
    RUN(h100_causal_8k_prices_exactly_as_without_the_curve);
    RUN(causal_2k_and_4k_run_at_the_published_rates);
    RUN(between_points_the_rate_is_linear_in_log_length);
    RUN(the_unmasked_forward_has_its_own_curve);
    RUN(lengths_outside_the_table_take_its_end_points);
    RUN(the_forward_follows_the_keys_and_the_backward_the_queries);
    RUN(context_parallel_steps_run_at_their_blocks_rates);
    RUN(clusters_without_a_curve_price_every_length_alike);
    RUN(scaling_the_efficiencies_scales_every_length);
    RUN(efficiency_times_factor_is_capped_at_the_peak);
    RUN(a_memory_bound_kernel_is_unchanged);
    return DONE();
}
