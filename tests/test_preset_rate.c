/* The presets' tensor-core rate in training: the kernel figures (datasheet
 * peaks at published kernel efficiencies) scaled by one factor per GPU, the
 * median of the factors the GPU's published BF16 runs imply, which is one
 * run's own; each preset prices that run at its measured step, so a change
 * to the cost model that moves it fails here until the median is derived
 * again (`make validate` prints it, docs/validation.md). A profile measures
 * kernels and starts from the kernel figures. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "profiler/profiler.h"

#define HOPPER 0.8440
#define AMPERE 0.8519

static ap_cluster preset(const char *name, int gpus)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    if (ap_cluster_preset(name, gpus, 8, &c, err))
        fprintf(stderr, "%s\n", err);
    return c;
}

/* Every tensor-core efficiency of the H100, H200 and H800 carries the one
 * Hopper factor, the step it came from recorded beside it; memory-bound
 * and communication rates do not. */
static void hopper_presets_run_their_tensor_cores_at_0_8440_of_the_kernel_figures(void)
{
    const char *names[] = {"h100-sxm", "h200", "h800"};
    for (int i = 0; i < 3; i++) {
        ap_cluster c = preset(names[i], 8);
        CHECK(c.calib_scale == HOPPER && c.calib_measured_s == 8.85);
        CHECK_STR_HAS(c.calib_from, "the median of 20 published BF16 runs on H100 SXM and H200");
        CHECK_STR_HAS(c.calib_from, "Llama 3.1 405B (7-layer proxy) on 32 H100 SXM");
        CHECK_NEAR(c.gemm_eff, 0.75 * HOPPER, 1e-15);
        CHECK_NEAR(c.gemm_eff_fp8, 0.75 * 75.54 / 84.48 * HOPPER, 1e-15);
        CHECK_NEAR(c.attn_eff, 529 / 989.4 * HOPPER, 1e-15);
        CHECK_NEAR(c.attn_bwd_eff, 518 / 989.4 * HOPPER, 1e-15);
        CHECK(c.hbm_eff == 0.9 && c.peak_flops[AP_BF16] == 989.4e12);
        CHECK(!strcmp(ap_cluster_basis(&c), "preset"));
        ap_cluster_free(&c);
    }
}

/* Both A100s carry the one Ampere factor: the 40GB has the 80GB's die,
 * clocks and power limit. */
static void the_a100s_run_at_0_8519(void)
{
    const char *names[] = {"a100-80g", "a100-40g"};
    for (int i = 0; i < 2; i++) {
        ap_cluster a = preset(names[i], 8);
        CHECK(a.calib_scale == AMPERE && a.calib_measured_s == 3.697);
        CHECK_STR_HAS(a.calib_from, "the median of 24 published BF16 and FP16 runs on A100");
        CHECK_STR_HAS(a.calib_from, "GPT 3.6B on 64 A100 80GB");
        CHECK_NEAR(a.gemm_eff, 0.85 * AMPERE, 1e-15);
        CHECK_NEAR(a.attn_eff, 0.6 * AMPERE, 1e-15);
        ap_cluster_free(&a);
    }
}

/* No B200 BF16 step is published, so the B200 carries the Hopper factor,
 * within 1% of the Ampere one, and says it was carried: its own kernel
 * figures at 0.7 and 0.6 of peak, times x0.8440. */
static void the_b200_carries_the_hopper_factor_and_says_so(void)
{
    ap_cluster b = preset("b200", 8);
    CHECK(fabs(HOPPER - AMPERE) < 0.01 * HOPPER);
    CHECK(b.calib_scale == HOPPER && b.calib_measured_s == 8.85);
    CHECK_STR_HAS(b.calib_from, "carried from the H100 SXM, not measured on a B200");
    CHECK_NEAR(b.gemm_eff, 0.7 * HOPPER, 1e-15);
    CHECK_NEAR(b.attn_eff, 0.6 * HOPPER, 1e-15);
    CHECK(b.peak_flops[AP_BF16] == 2250e12 && b.hbm_eff == 0.9);
    CHECK(!strcmp(ap_cluster_basis(&b), "preset"));
    ap_cluster_free(&b);
}

/* Every preset prices at a training rate, so that no report states a
 * kernel figure as a step time. */
static void every_preset_has_a_training_rate(void)
{
    const char *names[] = {"a100-80g", "a100-40g", "h100-sxm", "h200", "b200", "h800"};
    for (int i = 0; i < 6; i++) {
        ap_cluster c = preset(names[i], 8);
        CHECK(c.calib_scale > 0.84 && c.calib_scale < 0.86 && c.calib_from[0]);
        ap_cluster_free(&c);
    }
}

/* Taking the factor off gives back the published kernel figures and
 * clears the record; a cluster without one is left as it is. */
static void the_kernel_rate_is_the_published_figures(void)
{
    ap_cluster c = preset("h100-sxm", 8);
    ap_cluster_kernel_rate(&c);
    CHECK_NEAR(c.gemm_eff, 0.75, 1e-15);
    CHECK_NEAR(c.attn_eff, 529 / 989.4, 1e-15);
    CHECK(c.calib_scale == 0 && c.calib_measured_s == 0 && c.calib_from[0] == '\0');
    ap_cluster_kernel_rate(&c);
    CHECK_NEAR(c.gemm_eff, 0.75, 1e-15);
    ap_cluster_free(&c);
}

static double megatron_step(const ap_graph *g, ap_cluster *c, const char *spec)
{
    ap_megatron m;
    ap_plan p;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    if (!g || ap_megatron_parse(spec, &m, err) || ap_megatron_plan(g, c, &m, &p, err)) {
        fprintf(stderr, "%s: %s\n", spec, g ? err : "no model");
        return -1;
    }
    double t = p.step_time;
    ap_plan_free(&p);
    return t;
}

/* The DGX Cloud recipe's 7-layer proxy of Llama 3.1 405B on 32 H100s,
 * BF16 (NeMo 24.09, tp 8, cp 2, 126 sequences of 8192 tokens): 8.85 s. */
static void the_h100_preset_prices_its_median_run_at_the_measured_step(void)
{
    ap_graph *g = ap_test_model("bench/validation/models/llama-3.1-405b-7layers.json", 8192);
    ap_cluster c = preset("h100-sxm", 32);
    double t = megatron_step(g, &c, "tp=8,pp=1,cp=2,mbs=1,gbs=126,sp=1,recompute=none,"
                                    "zero=1,overlap_grad=1,tp_overlap=1,cross_entropy=native");
    CHECK_NEAR(t, 8.85, 0.002 * 8.85);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Narayanan et al.'s GPT 3.6B on 64 A100s (t 2, batch 512; Table 1):
 * 138 TFLOP/s per GPU by their eq. (3),
 * 96 B s l h^2 (1 + s/6h + V/16lh) / (138e12 * 64) = 3.697 s. */
static void the_a100_preset_prices_its_median_run_at_the_measured_step(void)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 2048;
    o.flash = 0;
    o.dropout = 1;
    ap_graph *g = ap_test_model_with("bench/validation/models/megatron-gpt-3.6b.json", &o);
    double B = 512, s = 2048, l = 30, h = 3072, V = 51200;
    double published = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) /
                       (138e12 * 64);
    CHECK_NEAR(published, 3.697, 0.0005);
    ap_cluster c = preset("a100-80g", 64);
    double t = megatron_step(g, &c, "tp=2,pp=1,mbs=1,gbs=512,sp=0,recompute=full,zero=0,"
                                    "overlap_grad=0,tp_sync=1");
    CHECK_NEAR(t, published, 0.002 * published);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* A profile's cluster keeps the preset's peaks, and measures kernels, so
 * it takes the preset's training-step factor off and puts on the one that
 * published H100 steps imply over a measured H100 profile: the median of
 * the 19 BF16 H100 runs of docs/validation.md, each calibrated with
 * examples/clusters/h100-sxm-profile.json: NeMo 24.09's Llama 3.1 405B
 * 7-layer proxy on 32 GPUs, 8.85 s per step, x0.8591. */
static void a_profile_carries_the_rate_steps_run_measured_kernels_at(void)
{
    ap_profile_result r;
    ap_cluster c;
    ap_gemm_sample s = {AP_BF16, 8192, 8192, 8192, 1.5e-3};
    char err[AP_ERR_LEN];
    memset(&r, 0, sizeof r);
    snprintf(r.gpu_name, sizeof r.gpu_name, "NVIDIA H100 80GB HBM3");
    r.nodes = r.gpus_per_node = 1;
    r.gemm = &s;
    r.ngemm = 1;
    REQUIRE_OK(ap_profile_build_cluster(&r, &c, err), err);
    CHECK_NEAR(c.calib_scale, 0.8591, 1e-12);
    CHECK_NEAR(c.gemm_eff, 0.75 * 0.8591, 1e-15);
    CHECK_NEAR(c.calib_measured_s, 8.85, 1e-12);
    CHECK_STR_HAS(c.calib_from, "19 published BF16 runs on H100 SXM priced with a "
                                "measured H100 SXM profile");
    CHECK(!strcmp(ap_cluster_basis(&c), "profile"));
    /* The sample runs at the training rate: its multiply slower by the
     * factor, its output's store (memory-bound, as every such kernel
     * unscaled) not. At the kernel figures 8192^3 multiplies in 63 waves of
     * 64 x 128 tiles over 132 SMs. */
    double multiply = 2 * 8192.0 * 8192 * 8192 / (989.4e12 * 0.75) * 63 * 132 / 8192;
    double store = 2 * 8192.0 * 8192 / (3.35e12 * 0.9);
    CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, 8192, 8192, 8192),
               1.5e-3 * (multiply / 0.8591 + store) / (multiply + store), 1e-12);
    ap_cluster_free(&c);
}

int main(void)
{
    RUN(hopper_presets_run_their_tensor_cores_at_0_8440_of_the_kernel_figures);
    RUN(the_a100s_run_at_0_8519);
    RUN(the_b200_carries_the_hopper_factor_and_says_so);
    RUN(every_preset_has_a_training_rate);
    RUN(the_kernel_rate_is_the_published_figures);
    RUN(the_h100_preset_prices_its_median_run_at_the_measured_step);
    RUN(the_a100_preset_prices_its_median_run_at_the_measured_step);
    RUN(a_profile_carries_the_rate_steps_run_measured_kernels_at);
    return DONE();
}
