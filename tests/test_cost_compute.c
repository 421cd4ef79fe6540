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

/* 8192^3: cuBLAS may run 128x256, 64x256, 128x128 or 64x128 tiles; the
 * best fill is 64x128: 128 x 64 = 8192 tiles over 132 SMs in 63 waves. */
static void large_gemm_runs_at_peak_times_efficiency_times_waves(void)
{
    ap_cluster c = h100();
    double n = 8192;
    double ideal = 2 * n * n * n / (989.4e12 * c.gemm_eff);
    double waves = 8192.0 / (63 * 132);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, n, n, n), ideal / waves, 1e-9);
    CHECK(ap_cost_gemm(&c, AP_BF16, n, n, n) < ideal / 0.9);
}

static void a_partial_last_wave_costs_what_the_best_tile_leaves_idle(void)
{
    ap_cluster c = h100();
    /* 1536 x 2816 is 12 x 11 = 132 tiles of 128x256: one full wave. One
     * more row of tiles (1664 rows) fills waves best with 64x128 tiles:
     * 26 x 22 = 572 tiles in 5 waves of 132. */
    double full = ap_cost_gemm(&c, AP_BF16, 128 * 12, 256 * 11, 8192);
    double spill = ap_cost_gemm(&c, AP_BF16, 128 * 13, 256 * 11, 8192);
    CHECK_NEAR(spill / full, (13.0 / 12) / (572.0 / 660), 1e-9);
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
    /* A 512x512 output is 32 tiles of 64x128: four such GEMMs (128 tiles)
     * share one wave over 132 SMs and take as long as one; a fifth needs a
     * second wave: 160 tiles in 264 slots. */
    double one = ap_cost_bgemm(&c, AP_BF16, 1, 512, 512, 8192);
    double b4 = ap_cost_bgemm(&c, AP_BF16, 4, 512, 512, 8192);
    CHECK_NEAR(b4, one, 1e-9);
    CHECK_NEAR(ap_cost_bgemm(&c, AP_BF16, 5, 512, 512, 8192),
               b4 * (5.0 / 4) * (128.0 / 132) / (160.0 / 264), 1e-9);
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
    RUN(a_partial_last_wave_costs_what_the_best_tile_leaves_idle);
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
