/* Calibration from a measured step: one factor on the tensor-core
 * efficiencies makes the configuration price at the measured time; the
 * factor is recorded in the cluster file and read back; a profile's
 * measured GEMMs scale with it; steps out of reach are refused with the
 * cluster left as it was. */
#include <math.h>
#include <stdlib.h>

#include "model.h"

#include "planner/planner.h"

#define SPEC "tp=2,pp=2,mbs=1,gbs=32,sp=1"

static ap_graph *gpt(void)
{
    return ap_test_model("examples/gpt-1.3b.json", 0);
}

static int spec(ap_megatron *m)
{
    char err[AP_ERR_LEN];
    ap_megatron_default(m);
    return ap_megatron_parse(SPEC, m, err);
}

static double step_on(const ap_graph *g, const ap_cluster *c)
{
    ap_megatron m;
    ap_plan p;
    char err[AP_ERR_LEN];
    if (spec(&m) || ap_megatron_plan(g, c, &m, &p, err))
        return -1;
    double t = p.step_time;
    ap_plan_free(&p);
    return t;
}

/* The model, a preset cluster of 8 GPUs and SPEC, every test's start. */
typedef struct {
    ap_graph *g;
    ap_cluster c;
    ap_megatron m;
} fixture;

static int setup(fixture *f, const char *preset)
{
    char err[AP_ERR_LEN];
    memset(f, 0, sizeof *f);
    f->g = gpt();
    if (f->g && !ap_cluster_preset(preset, 8, 8, &f->c, err) && !spec(&f->m))
        return 0;
    CHECK(0);
    ap_graph_free(f->g);
    return -1;
}

static void teardown(fixture *f)
{
    ap_cluster_free(&f->c);
    ap_graph_free(f->g);
}

/* A run measured 20% slower than the preset predicts: the calibrated
 * cluster prices it at the measured step, with every tensor-core
 * efficiency scaled by the same factor, below 1/1.2: the tensor-core
 * kernels must slow by more than 20% since memory-bound kernels and
 * communication, the rest of the step, do not scale. */
static void a_slower_run_scales_the_tensor_core_rates_down_by_one_factor(void)
{
    fixture f;
    ap_cluster before;
    ap_calibration k;
    char err[AP_ERR_LEN];
    if (setup(&f, "h100-sxm"))
        return;
    before = f.c;
    double preset = step_on(f.g, &f.c);
    REQUIRE_OK(ap_calibrate_megatron(f.g, &f.c, &f.m, 1.2 * preset, &k, err), err);
    CHECK_NEAR(step_on(f.g, &f.c) / (1.2 * preset), 1, 1e-9);
    CHECK_NEAR(k.predicted_s, 1.2 * preset, 1e-9 * preset);
    CHECK_NEAR(k.preset_s, preset, 1e-12);
    CHECK(k.scale < 1 / 1.2 && k.scale > 0.5);
    CHECK_NEAR(f.c.gemm_eff, before.gemm_eff * k.scale, 1e-15);
    CHECK_NEAR(f.c.attn_eff, before.attn_eff * k.scale, 1e-15);
    CHECK_NEAR(f.c.attn_bwd_eff, before.attn_bwd_eff * k.scale, 1e-15);
    CHECK(before.gemm_eff_fp8 > 0); /* FP8 GEMMs share the clock too */
    CHECK_NEAR(f.c.gemm_eff_fp8, before.gemm_eff_fp8 * k.scale, 1e-15);
    CHECK(f.c.hbm_eff == before.hbm_eff && f.c.intra_bw == before.intra_bw);
    /* The preset's own scale, from a published step, multiplies into it. */
    CHECK(before.calib_scale > 0);
    CHECK(f.c.calib_scale == before.calib_scale * k.scale);
    CHECK(f.c.calib_measured_s == 1.2 * preset);
    CHECK(k.compute_share > 0.5 && k.compute_share < 1);
    teardown(&f);
}

/* The measured step of the preset's own prediction calibrates to 1. */
static void the_presets_own_prediction_calibrates_to_one(void)
{
    fixture f;
    ap_calibration k;
    char err[AP_ERR_LEN];
    if (setup(&f, "a100-80g"))
        return;
    REQUIRE_OK(ap_calibrate_megatron(f.g, &f.c, &f.m, step_on(f.g, &f.c), &k, err), err);
    CHECK_NEAR(k.scale, 1, 1e-9);
    teardown(&f);
}

/* Faster than every kernel at peak, or slower than 1/16 of the rates:
 * refused, naming both bounds, and the cluster keeps its efficiencies. */
static void steps_out_of_reach_are_refused_and_leave_the_cluster_alone(void)
{
    fixture f;
    ap_calibration k;
    char err[AP_ERR_LEN];
    if (setup(&f, "h100-sxm"))
        return;
    double eff = f.c.gemm_eff, scale = f.c.calib_scale, preset = step_on(f.g, &f.c);
    CHECK(ap_calibrate_megatron(f.g, &f.c, &f.m, 0.5 * preset, &k, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "is out of reach: this configuration prices at");
    CHECK_STR_HAS(err, "with every tensor-core kernel at peak");
    CHECK(f.c.gemm_eff == eff && f.c.calib_scale == scale);
    CHECK(ap_calibrate_megatron(f.g, &f.c, &f.m, 100 * preset, &k, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "at 1/16 of the cluster's rates");
    CHECK(f.c.gemm_eff == eff);
    CHECK(ap_calibrate_megatron(f.g, &f.c, &f.m, -1, &k, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "positive number of seconds");
    teardown(&f);
}

/* A profile's GEMMs were measured as kernels, and a training step runs
 * them at the calibrated rate like every other tensor-core kernel: the
 * calibrated profile prices the step at the measured time, and a GEMM of a
 * sample's own shape at the sample's time with its multiply over the
 * factor. */
static void a_profiles_measured_gemms_scale_with_the_calibration(void)
{
    fixture f;
    ap_calibration k;
    char err[AP_ERR_LEN];
    ap_gemm_sample s = {AP_BF16, 4096, 4096, 4096, 2e-4}; /* 687 TFLOP/s */
    if (setup(&f, "h100-sxm"))
        return;
    ap_cluster_kernel_rate(&f.c); /* where a profile starts */
    f.c.gemm = &s;
    f.c.ngemm = 1;
    CHECK_NEAR(ap_cost_gemm(&f.c, AP_BF16, 4096, 4096, 4096), 2e-4, 1e-12);
    double t = step_on(f.g, &f.c);
    REQUIRE_OK(ap_calibrate_megatron(f.g, &f.c, &f.m, 1.25 * t, &k, err), err);
    CHECK_NEAR(step_on(f.g, &f.c) / (1.25 * t), 1, 1e-9);
    CHECK(k.scale < 1 / 1.25 && k.scale > 0.5);
    CHECK_NEAR(f.c.calib_scale, k.scale, 1e-15);
    double at_rate = ap_test_sample_at_rate(&f.c, AP_BF16, 4096, 4096, 4096, 2e-4);
    CHECK(at_rate > 2e-4 / k.scale * 0.97 && at_rate < 2e-4 / k.scale);
    CHECK_NEAR(ap_cost_gemm(&f.c, AP_BF16, 4096, 4096, 4096), at_rate, 1e-12);
    f.c.gemm = NULL;
    f.c.ngemm = 0;
    teardown(&f);
}

/* The cluster file keeps what was calibrated, and a whole record is
 * required when the section is there. */
static void the_calibration_round_trips_through_the_cluster_file(void)
{
    ap_cluster c, back;
    char err[AP_ERR_LEN];
    ap_cluster_preset("h100-sxm", 8, 8, &c, err);
    c.gemm_eff *= 0.875;
    c.calib_scale = 0.875;
    c.calib_measured_s = 12.91;
    snprintf(c.calib_from, sizeof c.calib_from, "llama.json on 8 GPUs, --megatron tp=1");
    char *text = ap_cluster_to_json(&c);
    REQUIRE_OK(ap_cluster_parse(text, strlen(text), "cal.json", 0, 0, &back, err), err);
    CHECK(back.calib_scale == 0.875 && back.calib_measured_s == 12.91);
    CHECK(!strcmp(back.calib_from, c.calib_from));
    CHECK(back.gemm_eff == c.gemm_eff);
    ap_cluster_free(&back);
    free(text);
    ap_cluster_free(&c);

    ap_cluster_preset("h100-sxm", 8, 8, &c, err);
    ap_cluster_kernel_rate(&c);
    text = ap_cluster_to_json(&c);
    CHECK(!strstr(text, "calibration"));
    char *cut = strrchr(text, '}');
    const char *partial = ",\"calibration\": {\"scale\": 0.9, \"from\": \"x\"}}";
    char *bad = malloc(strlen(text) + strlen(partial) + 1);
    memcpy(bad, text, (size_t)(cut - text));
    strcpy(bad + (cut - text), partial);
    CHECK(ap_cluster_parse(bad, strlen(bad), "cal.json", 0, 0, &back, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "cal.json: calibration.measured_step_s: required field is missing");
    free(bad);
    free(text);
    ap_cluster_free(&c);
}

int main(void)
{
    RUN(a_slower_run_scales_the_tensor_core_rates_down_by_one_factor);
    RUN(the_presets_own_prediction_calibrates_to_one);
    RUN(steps_out_of_reach_are_refused_and_leave_the_cluster_alone);
    RUN(a_profiles_measured_gemms_scale_with_the_calibration);
    RUN(the_calibration_round_trips_through_the_cluster_file);
    return DONE();
}
