/* calibrate.c -- the tensor-core rate of a cluster derived from one
 * training step someone measured on it.
 *
 * A preset prices GEMMs and attention at the best rates published for the
 * GPU; a real cluster sustains less (power limits, clocks, the library
 * versions it runs). One measured step of a known configuration pins the
 * difference down: every tensor-core kernel runs at the same clock, so one
 * factor scales the GEMM and attention efficiencies together, and the step
 * time falls as that factor grows. Bisection finds the factor at which the
 * configuration prices at the measured time. A profile's measured GEMMs
 * are kernels too and scale with it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/planner.h"

/* Bisection on the log of the factor: 60 halvings of [1/16, 1/max_eff]
 * pin it far below the precision a measured step carries. */
#define CALIBRATE_ITERS 60
#define CALIBRATE_MIN_SCALE (1.0 / 16)

/* calib_scale moves with the efficiencies, since measured GEMM times
 * (a profile's) are kernel figures that run at calib_scale of their rate
 * (costmodel/compute.c). */
static void scale_efficiencies(const ap_cluster *base, double f, ap_cluster *c)
{
    c->gemm_eff = base->gemm_eff;
    c->gemm_eff_fp8 = base->gemm_eff_fp8;
    c->attn_eff = base->attn_eff;
    c->attn_bwd_eff = base->attn_bwd_eff;
    ap_cluster_scale_rate(c, f);
    c->calib_scale = (base->calib_scale > 0 ? base->calib_scale : 1) * f;
}

static double largest_efficiency(const ap_cluster *c)
{
    return fmax(fmax(c->gemm_eff, c->gemm_eff_fp8), fmax(c->attn_eff, c->attn_bwd_eff));
}

/* Prices m at factor f into *t (and into out, when given). */
static int priced(const ap_graph *g, const ap_cluster *base, ap_cluster *c,
                  const ap_megatron *m, double f, double *t, ap_calibration *out,
                  char *err)
{
    ap_plan p;
    scale_efficiencies(base, f, c);
    int rc = ap_megatron_plan(g, c, m, &p, err);
    *t = p.step_time;
    if (!rc && out) {
        out->compute_share = p.step_time > 0 ? p.t_compute / p.step_time : 0;
        out->predicted_s = p.step_time;
    }
    ap_plan_free(&p);
    return rc;
}

static int check_inputs(const ap_cluster *c, double measured, char *err)
{
    if (!(measured > 0) || !isfinite(measured)) {
        snprintf(err, AP_ERR_LEN, "measured step time must be a positive number of seconds");
        return AP_EINPUT;
    }
    if (!(c->gemm_eff > 0)) {
        snprintf(err, AP_ERR_LEN, "cluster %s has no GEMM efficiency to scale", c->name);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* The factor in [1/16, 1/max_eff] at which m prices at `measured`,
 * found by bisection on its log, into out; c is left scaled anyhow. */
static int solve(const ap_graph *g, const ap_cluster *base, ap_cluster *c,
                 const ap_megatron *m, double measured, ap_calibration *out,
                 char *err)
{
    double lo = CALIBRATE_MIN_SCALE, hi = 1 / largest_efficiency(base);
    double preset, fastest, slowest, t;
    int rc;
    if ((rc = priced(g, base, c, m, 1, &preset, out, err)) ||
        (rc = priced(g, base, c, m, hi, &fastest, NULL, err)) ||
        (rc = priced(g, base, c, m, lo, &slowest, NULL, err)))
        return rc;
    out->preset_s = preset;
    if (measured < fastest || measured > slowest) {
        /* Megatron-LM logs "elapsed time per iteration (ms)": a step in
         * milliseconds given as seconds is the likeliest slip. */
        int ms = measured > slowest && measured / 1000 >= fastest &&
                 measured / 1000 <= slowest;
        snprintf(err, AP_ERR_LEN,
                 "a measured step of %.4g s is out of reach: this configuration "
                 "prices at %.4g s with every tensor-core kernel at peak and %.4g s "
                 "at 1/16 of the cluster's rates (%.4g s as given); check that it is "
                 "the configuration the run used%s",
                 measured, fastest, slowest, preset,
                 ms ? " (milliseconds? Megatron-LM logs the elapsed time per iteration "
                      "in ms: --measured-step takes seconds)" : "");
        return AP_EINPUT;
    }
    for (int i = 0; i < CALIBRATE_ITERS; i++) {
        double mid = sqrt(lo * hi);
        if ((rc = priced(g, base, c, m, mid, &t, NULL, err)))
            return rc;
        if (t > measured)
            lo = mid;
        else
            hi = mid;
    }
    out->scale = sqrt(lo * hi);
    return priced(g, base, c, m, out->scale, &t, out, err);
}

int ap_calibrate_megatron(const ap_graph *g, ap_cluster *c, const ap_megatron *m,
                          double measured, ap_calibration *out, char *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_inputs(c, measured, err);
    if (rc)
        return rc;
    ap_cluster base = *c;
    rc = solve(g, &base, c, m, measured, out, err);
    scale_efficiencies(&base, rc ? 1 : out->scale, c);
    if (rc) {
        c->calib_scale = base.calib_scale;
        return rc;
    }
    c->calib_measured_s = measured;
    return AP_OK;
}
