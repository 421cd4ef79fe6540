/* test_cost_compute.c -- GEMM, attention (flash and unfused) and
 * memory-bound kernel costs. */
#include "costmodel/costmodel.h"
#include "model.h"

/* The store of an m x n output of `bytes` per element over the preset's
 * sustained HBM bandwidth, 3.35 TB/s x 0.9. */
static double store(double m, double n, double bytes)
{
    return bytes * m * n / (3.35e12 * 0.9);
}

/* 8192^3: cuBLAS may run 128x256, 64x256, 128x128 or 64x128 tiles; the
 * best fill is 64x128: 128 x 64 = 8192 tiles over 132 SMs in 63 waves.
 * The output's store follows the multiply. */
static void large_gemm_runs_at_peak_times_efficiency_times_waves(void)
{
    ap_cluster c = ap_test_h100(8);
    double n = 8192;
    double ideal = 2 * n * n * n / (989.4e12 * c.gemm_eff);
    double waves = 8192.0 / (63 * 132);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, n, n, n), ideal / waves + store(n, n, 2), 1e-9);
    CHECK(ap_cost_gemm(&c, AP_BF16, n, n, n) < ideal / 0.9);
}

/* A tile's accumulator is stored once its whole k loop is done, so the
 * store cannot hide behind a multiply as short as a small k makes it: at
 * k 256 a 4096 x 4096 output's store is over a third of the GEMM, at k
 * 8192 under a thirtieth (measured on an H100: 1.87x the roofline at k 256 in
 * bf16, within a few percent at k 1536 and above; docs/validation.md,
 * finding 38). FP8 stores its output in bf16. */
static void a_short_k_gemm_pays_for_its_output_after_the_multiply(void)
{
    ap_cluster c = ap_test_h100(8);
    double m = 4096, n = 4096, waves = 1024.0 / (8 * 132); /* 128x256 tiles */
    for (double k = 256; k <= 8192; k *= 32) {
        double multiply = 2 * m * n * k / (989.4e12 * c.gemm_eff) / waves;
        CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, m, n, k), multiply + store(m, n, 2), 1e-12);
    }
    CHECK(store(m, n, 2) > ap_cost_gemm(&c, AP_BF16, m, n, 256) / 3);
    CHECK(store(m, n, 2) < ap_cost_gemm(&c, AP_BF16, m, n, 8192) / 30);
    double fp8 = 2 * m * n * 8192 / (1978.9e12 * c.gemm_eff_fp8) / waves;
    CHECK_NEAR(ap_cost_gemm(&c, AP_FP8, m, n, 8192), fp8 + store(m, n, 2), 1e-12);
    CHECK(ap_gemm_out_bytes(AP_FP8) == 2 && ap_gemm_out_bytes(AP_FP32) == 4);
}

/* A GEMM that accumulates into its output (cuBLAS's beta = 1, as a weight
 * gradient into an fp32 main_grad) reads it and writes it: `out` is the
 * bytes moved per output element. */
static void an_accumulating_gemm_reads_and_writes_its_output(void)
{
    ap_cluster c = ap_test_h100(8);
    double plain = ap_cost_bgemm(&c, AP_BF16, 1, 4096, 4096, 8192);
    double acc = ap_cost_bgemm_out(&c, AP_BF16, 1, 4096, 4096, 8192, 8);
    CHECK_NEAR(acc - plain, store(4096, 4096, 8 - 2), 1e-12);
    CHECK_NEAR(ap_cost_bgemm_out(&c, AP_BF16, 1, 4096, 4096, 8192, 2), plain, 1e-15);
}

static void a_partial_last_wave_costs_what_the_best_tile_leaves_idle(void)
{
    ap_cluster c = ap_test_h100(8);
    /* 1536 x 2816 is 12 x 11 = 132 tiles of 128x256: one full wave. One
     * more row of tiles (1664 rows) fills waves best with 64x128 tiles:
     * 26 x 22 = 572 tiles in 5 waves of 132. The multiply grows by that
     * much, the store by the row. */
    double n = 256 * 11;
    double full = ap_cost_gemm(&c, AP_BF16, 128 * 12, n, 8192) - store(128 * 12, n, 2);
    double spill = ap_cost_gemm(&c, AP_BF16, 128 * 13, n, 8192) - store(128 * 13, n, 2);
    CHECK_NEAR(spill / full, (13.0 / 12) / (572.0 / 660), 1e-9);
}

static void tiny_gemm_hits_the_kernel_floor(void)
{
    ap_cluster c = ap_test_h100(8);
    CHECK(ap_cost_gemm(&c, AP_BF16, 16, 16, 16) == c.kernel_floor);
    CHECK(ap_cost_gemm(&c, AP_BF16, 0, 16, 16) == 0);
}

/* A matrix-vector product is bound by reading the matrix. */
static void skinny_gemm_is_memory_bound(void)
{
    ap_cluster c = ap_test_h100(8);
    double bytes = 2.0 * (1 * 8192 + 8192 * 8192 + 1 * 8192);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, 1, 8192, 8192),
               bytes / (3.35e12 * 0.9), 1e-9);
}

/* The FP8 peak is twice bf16's, but FP8 GEMMs reach less of it. On an
 * H100 SXM the best measured are 1,402.6 TFLOP/s in FP8 at 1024 x 9216 x
 * 14336 and 794.5 in bf16 at 2048 x 2048 x 13312 (ml-engineering's MAMF
 * table); taking out their outputs' stores, the multiplies ran at 75.54%
 * and 84.48% of their peaks (each shape's best tiles keep 97.0% of the SMs
 * busy), so FP8's multiply runs 2 x 75.54/84.48 = 1.79 times as fast as
 * bf16's, not 2. A cluster without the FP8 figure keeps bf16's efficiency
 * and the full factor of 2. */
static void fp8_is_faster_than_bf16_by_the_measured_ratio(void)
{
    ap_cluster c = ap_test_h100(8);
    double out = store(8192, 8192, 2);
    double bf16 = ap_cost_gemm(&c, AP_BF16, 8192, 8192, 8192) - out;
    double fp8 = ap_cost_gemm(&c, AP_FP8, 8192, 8192, 8192) - out;
    CHECK_NEAR(c.gemm_eff_fp8, 0.75 * 75.54 / 84.48, 1e-15);
    CHECK_NEAR(bf16 / fp8, 1978.9 / 989.4 * 75.54 / 84.48, 1e-9);
    c.gemm_eff_fp8 = 0;
    CHECK_NEAR(bf16 / (ap_cost_gemm(&c, AP_FP8, 8192, 8192, 8192) - out), 1978.9 / 989.4,
               1e-9);
}

/* FP8 on a GPU without FP8 tensor cores runs at the bf16 rate and its
 * efficiency, whatever FP8 figure the cluster carries. */
static void fp8_without_an_fp8_peak_runs_as_bf16(void)
{
    ap_cluster c = ap_test_h100(8);
    c.peak_flops[AP_FP8] = 0;
    CHECK_NEAR(ap_cost_gemm(&c, AP_FP8, 8192, 8192, 8192) /
               ap_cost_gemm(&c, AP_BF16, 8192, 8192, 8192), 1.0, 1e-12);
}

static void batched_gemm_shares_the_waves(void)
{
    ap_cluster c = ap_test_h100(8);
    /* A 512x512 output is 32 tiles of 64x128: four such GEMMs (128 tiles)
     * share one wave over 132 SMs and multiply in the time of one; a fifth
     * needs a second wave: 160 tiles in 264 slots. Each stores its own
     * output. */
    double out = store(512, 512, 2);
    double one = ap_cost_bgemm(&c, AP_BF16, 1, 512, 512, 8192) - out;
    double b4 = ap_cost_bgemm(&c, AP_BF16, 4, 512, 512, 8192) - 4 * out;
    CHECK_NEAR(b4, one, 1e-9);
    CHECK_NEAR(ap_cost_bgemm(&c, AP_BF16, 5, 512, 512, 8192) - 5 * out,
               b4 * (5.0 / 4) * (128.0 / 132) / (160.0 / 264), 1e-9);
}

static ap_cluster measured_h100(ap_gemm_sample *s, int n)
{
    ap_cluster c = ap_test_h100(8);
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
    ap_cluster a = ap_test_h100(8);
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
    ap_cluster c = ap_test_h100(8);
    double bn = 32 * 32, s = 8192, d = 128;
    double full = ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 0);
    double causal = ap_cost_attention(&c, AP_BF16, bn, s, s, d, d, 1);
    /* Half the FLOPs, but each at its own published 8k rate (cuDNN in the
     * FlashAttention-3 paper): 600 TFLOP/s without the mask, 529 with. */
    CHECK_NEAR(full, 2 * bn * s * s * (d + d) / 600e12, 1e-9);
    CHECK_NEAR(causal, full / 2 * 600.0 / 529.0, 1e-9);
}

/* 32 heads of 128 over 2048 tokens on an H100: the kernels around unfused
 * attention's GEMMs are bound by HBM, so their time is the bytes each
 * moves over 3.35 TB/s x 0.9. P = bn*s*t scores of 2 bytes, masks of 1. A
 * GEMM that reads P (k = s) is bound by reading it; QK^T (k = d = 128)
 * multiplies and then stores the scores, each GEMM priced as
 * ap_cost_bgemm does (tested above). */
static const double bn_ = 32, s_ = 2048, d_ = 128;
static double bw(void) { return 3.35e12 * 0.9; }
static double scores(void) { return bn_ * s_ * s_; }
/* A batched GEMM of bf16 m x k by k x n. */
static double gemm(const ap_cluster *c, double m, double n, double k)
{
    return ap_cost_bgemm(c, AP_BF16, bn_, m, n, k);
}

/* One that reads P: all three matrices cross HBM once. */
static double p_gemm_bytes(double m, double n, double k)
{
    return 2 * bn_ * (m * k + k * n + m * n);
}

static void unfused_forward_is_two_gemms_softmax_and_dropout_through_hbm(void)
{
    ap_cluster c = ap_test_h100(8);
    double P = scores();
    double qk = gemm(&c, s_, s_, d_), pv = p_gemm_bytes(s_, d_, s_) / bw();
    double softmax = 2 * 2 * P;      /* scores in, probabilities out */
    double dropout = (2 + 2 + 1) * P; /* probabilities in, dropped and mask out */
    CHECK_NEAR(gemm(&c, s_, d_, s_), pv, 1e-12);
    CHECK(qk > 2 * bn_ * s_ * s_ * d_ / 989.4e12 + 2 * P / bw());
    CHECK_NEAR(ap_cost_attention_unfused(&c, AP_BF16, bn_, s_, s_, d_, d_, 0.1, 0),
               qk + (softmax + dropout) / bw() + pv, 1e-9);
    CHECK_NEAR(ap_cost_attention_unfused(&c, AP_BF16, bn_, s_, s_, d_, d_, 0, 0),
               qk + softmax / bw() + pv, 1e-9);
}

static void unfused_backward_is_four_gemms_and_the_two_kernels_backward(void)
{
    ap_cluster c = ap_test_h100(8);
    double P = scores();
    /* dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q. */
    double gemms = gemm(&c, s_, s_, d_) + 3 * p_gemm_bytes(s_, d_, s_) / bw();
    double dropout = (2 + 1 + 2) * P; /* gradient and mask in, gradient out */
    double softmax = 3 * 2 * P;       /* probabilities and gradient in, one out */
    CHECK_NEAR(ap_cost_attention_unfused(&c, AP_BF16, bn_, s_, s_, d_, d_, 0.1, 1),
               gemms + (dropout + softmax) / bw(), 1e-9);
    CHECK_NEAR(ap_cost_attention_unfused(&c, AP_BF16, bn_, s_, s_, d_, d_, 0, 1),
               gemms + softmax / bw(), 1e-9);
}

/* Flash attention (causal, backward 2.5x forward as the planner prices it)
 * against unfused with dropout, forward plus backward: at 2048 tokens the
 * unfused path is several times slower, and the gap grows as s^2 because
 * it is the s x s traffic (doubling s multiplies it by just under 4: the
 * reads of q, k and v grow only as s). */
static double unfused_step(const ap_cluster *c, double s)
{
    return ap_cost_attention_unfused(c, AP_BF16, bn_, s, s, d_, d_, 0.1, 0) +
           ap_cost_attention_unfused(c, AP_BF16, bn_, s, s, d_, d_, 0.1, 1);
}

static double flash_step(const ap_cluster *c, double s)
{
    return 3.5 * ap_cost_attention(c, AP_BF16, bn_, s, s, d_, d_, 1);
}

static void unfused_attention_is_slower_than_flash_by_a_gap_growing_as_s_squared(void)
{
    ap_cluster c = ap_test_h100(8);
    CHECK(unfused_step(&c, 2048) > 5 * flash_step(&c, 2048));
    double gap2k = unfused_step(&c, 2048) - flash_step(&c, 2048);
    double gap4k = unfused_step(&c, 4096) - flash_step(&c, 4096);
    double gap8k = unfused_step(&c, 8192) - flash_step(&c, 8192);
    CHECK(gap4k > 3.85 * gap2k && gap4k < 4 * gap2k);
    CHECK(gap8k > 3.85 * gap4k && gap8k < 4 * gap4k);
}

static void unfused_attention_of_nothing_costs_nothing(void)
{
    ap_cluster c = ap_test_h100(8);
    CHECK(ap_cost_attention_unfused(&c, AP_BF16, 0, s_, s_, d_, d_, 0.1, 0) == 0);
    CHECK(ap_cost_attention_unfused(&c, AP_BF16, bn_, s_, s_, d_, 0, 0.1, 1) == 0);
}

static void memop_is_a_roofline_with_a_floor(void)
{
    ap_cluster c = ap_test_h100(8);
    double bytes = 4.0 * 8192 * 8192 * 2;
    CHECK_NEAR(ap_cost_memop(&c, 8192.0 * 8192, bytes), bytes / (3.35e12 * 0.9), 1e-9);
    CHECK(ap_cost_memop(&c, 10, 100) == c.kernel_floor);
    CHECK(ap_cost_memop(&c, 0, 0) == 0);
}

int main(void)
{
    RUN(large_gemm_runs_at_peak_times_efficiency_times_waves);
    RUN(a_short_k_gemm_pays_for_its_output_after_the_multiply);
    RUN(an_accumulating_gemm_reads_and_writes_its_output);
    RUN(a_partial_last_wave_costs_what_the_best_tile_leaves_idle);
    RUN(tiny_gemm_hits_the_kernel_floor);
    RUN(skinny_gemm_is_memory_bound);
    RUN(fp8_is_faster_than_bf16_by_the_measured_ratio);
    RUN(fp8_without_an_fp8_peak_runs_as_bf16);
    RUN(batched_gemm_shares_the_waves);
    RUN(measured_gemm_returns_the_sample_at_its_shape);
    RUN(measured_gemm_interpolates_between_samples);
    RUN(causal_attention_does_half_the_work);
    RUN(unfused_forward_is_two_gemms_softmax_and_dropout_through_hbm);
    RUN(unfused_backward_is_four_gemms_and_the_two_kernels_backward);
    RUN(unfused_attention_is_slower_than_flash_by_a_gap_growing_as_s_squared);
    RUN(unfused_attention_of_nothing_costs_nothing);
    RUN(memop_is_a_roofline_with_a_floor);
    return DONE();
}
