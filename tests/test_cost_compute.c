/* test_cost_compute.c -- GEMM, attention and memory-bound kernel costs. */
#include "costmodel/costmodel.h"
#include "test.h"

static ap_cluster h100(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    ap_cluster_preset("h100-sxm", 8, 0, &c, err);
    return c;
}

/* 8192^3 on a 128x256 tile grid: 64 x 32 = 2048 tiles over 132 SMs take 16
 * waves, so 2048 / (16 * 132) of the SMs are busy on average. */
static void large_gemm_runs_at_peak_times_efficiency_times_waves(void)
{
    ap_cluster c = h100();
    double n = 8192;
    double ideal = 2 * n * n * n / (989.4e12 * c.gemm_eff);
    double waves = 2048.0 / (16 * 132);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, n, n, n), ideal / waves, 1e-9);
    CHECK(ap_cost_gemm(&c, AP_BF16, n, n, n) < ideal / 0.9);
}

static void one_more_tile_costs_a_whole_wave(void)
{
    ap_cluster c = h100();
    /* 12 x 11 = 132 tiles fill one wave; 13 x 11 = 143 need two, so 13/12
     * of the work takes twice as long. */
    double full = ap_cost_gemm(&c, AP_BF16, 128 * 12, 256 * 11, 8192);
    double spill = ap_cost_gemm(&c, AP_BF16, 128 * 13, 256 * 11, 8192);
    CHECK_NEAR(spill / full, 2.0, 1e-9);
}

static void tiny_gemm_hits_the_kernel_floor(void)
{
    ap_cluster c = h100();
    CHECK(ap_cost_gemm(&c, AP_BF16, 16, 16, 16) == c.kernel_floor);
    CHECK(ap_cost_gemm(&c, AP_BF16, 0, 16, 16) == 0);
}

/* A matrix-vector product is bound by reading the matrix. */
static void skinny_gemm_is_memory_bound(void)
{
    ap_cluster c = h100();
    double bytes = 2.0 * (1 * 8192 + 8192 * 8192 + 1 * 8192);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, 1, 8192, 8192),
               bytes / (3.35e12 * 0.9), 1e-9);
}

static void fp8_is_twice_as_fast_as_bf16_when_compute_bound(void)
{
    ap_cluster c = h100();
    double bf16 = ap_cost_gemm(&c, AP_BF16, 8192, 8192, 8192);
    double fp8 = ap_cost_gemm(&c, AP_FP8, 8192, 8192, 8192);
    CHECK_NEAR(bf16 / fp8, 2.0, 1e-3);
}

static void batched_gemm_shares_the_waves(void)
{
    ap_cluster c = h100();
    /* A 1024x1024 output is 8 x 4 = 32 tiles: four such GEMMs (128 tiles)
     * share one wave over 132 SMs, a fifth needs a second wave. */
    double one = ap_cost_bgemm(&c, AP_BF16, 1, 1024, 1024, 8192);
    CHECK_NEAR(ap_cost_bgemm(&c, AP_BF16, 4, 1024, 1024, 8192), one, 1e-9);
    CHECK_NEAR(ap_cost_bgemm(&c, AP_BF16, 5, 1024, 1024, 8192), 2 * one, 1e-9);
}

static ap_cluster measured_h100(ap_gemm_sample *s, int n)
{
    ap_cluster c = h100();
    c.gemm = s;
    c.ngemm = n;
    return c;
}

static void measured_gemm_returns_the_sample_at_its_shape(void)
{
    ap_gemm_sample s[2] = {{AP_BF16, 1024, 1024, 1024, 2.0e-5},
                           {AP_BF16, 8192, 8192, 8192, 1.6e-3}};
    ap_cluster c = measured_h100(s, 2);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, 1024, 1024, 1024), 2.0e-5, 1e-12);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, 8192, 8192, 8192), 1.6e-3, 1e-12);
    /* fp16 has no samples: analytic. */
    ap_cluster a = h100();
    CHECK_NEAR(ap_cost_gemm(&c, AP_FP16, 4096, 4096, 4096),
               ap_cost_gemm(&a, AP_FP16, 4096, 4096, 4096), 1e-12);
}

/* Halfway in log space between two samples, the achieved rate lies between
 * theirs. */
static void measured_gemm_interpolates_between_samples(void)
{
    ap_gemm_sample s[2] = {{AP_BF16, 1024, 1024, 1024, 2.0e-5},
                           {AP_BF16, 8192, 8192, 8192, 1.6e-3}};
    ap_cluster c = measured_h100(s, 2);
    double n = 2896; /* about sqrt(1024 * 8192) */
    double rate = 2 * n * n * n / ap_cost_gemm(&c, AP_BF16, n, n, n);
    double lo = 2 * 1024.0 * 1024 * 1024 / 2.0e-5;
    double hi = 2 * 8192.0 * 8192 * 8192 / 1.6e-3;
    CHECK(rate > lo && rate < hi);
}

static void causal_attention_does_half_the_work(void)
{
    ap_cluster c = h100();
    double bn = 32 * 32, s = 8192, d = 128;
    double full = ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 0);
    double causal = ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 1);
    CHECK_NEAR(full, 2 * bn * s * s * (d + d) / (989.4e12 * c.attn_eff), 1e-9);
    CHECK_NEAR(causal, full / 2, 1e-9);
}

static void memop_is_a_roofline_with_a_floor(void)
{
    ap_cluster c = h100();
    double bytes = 4.0 * 8192 * 8192 * 2;
    CHECK_NEAR(ap_cost_memop(&c, 8192.0 * 8192, bytes), bytes / (3.35e12 * 0.9), 1e-9);
    CHECK(ap_cost_memop(&c, 10, 100) == c.kernel_floor);
    CHECK(ap_cost_memop(&c, 0, 0) == 0);
}

int main(void)
{
    RUN(large_gemm_runs_at_peak_times_efficiency_times_waves);
    RUN(one_more_tile_costs_a_whole_wave);
    RUN(tiny_gemm_hits_the_kernel_floor);
    RUN(skinny_gemm_is_memory_bound);
    RUN(fp8_is_twice_as_fast_as_bf16_when_compute_bound);
    RUN(batched_gemm_shares_the_waves);
    RUN(measured_gemm_returns_the_sample_at_its_shape);
    RUN(measured_gemm_interpolates_between_samples);
    RUN(causal_attention_does_half_the_work);
    RUN(memop_is_a_roofline_with_a_floor);
    return DONE();
}
