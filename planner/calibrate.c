/* calibrate.c -- the tensor-core rate of a cluster derived from one
 * training step someone measured on it.
 *
 * A preset prices GEMMs and attention at the best rates published for the
 * GPU; a real cluster sustains less (power limits, clocks, the library
 * versions it runs). One measured step of a known configuration pins the
 * difference down: every tensor-core kernel runs at the same clock, so one
 * factor scales the GEMM and attention efficiencies together, and the step
 * time falls as that factor grows. Bisection finds the factor at which the
 * configuration prices at the measured time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/planner.h"

/* Bisection on the log of the factor: 60 halvings of [1/16, 1/max_eff]
 * pin it far below the precision a measured step carries. */
#define CALIBRATE_ITERS 60
#define CALIBRATE_MIN_SCALE (1.0 / 16)

static void scale_efficiencies(const ap_cluster *base, double f, ap_cluster *c)
{
    c->gemm_eff = base->gemm_eff * f;
    c->attn_eff = base->attn_eff * f;
    c->attn_bwd_eff = base->attn_bwd_eff * f;
}

static double largest_efficiency(const ap_cluster *c)
{
    return fmax(c->gemm_eff, fmax(c->attn_eff, c->attn_bwd_eff));
}

/* Prices m at factor f and returns its step time, or a negative status. */
static double priced(const ap_graph *g, const ap_cluster *base, ap_cluster *c,
                     const ap_megatron *m, double f, ap_calibration *out,
                     char *err)
{
    ap_plan p;
    scale_efficiencies(base, f, c);
    if (ap_megatron_plan(g, c, m, &p, err))
        return -1;
    double t = p.step_time;
    if (out) {
        out->compute_share = p.step_time > 0 ? p.t_compute / p.step_time : 0;
        out->predicted_s = t;
    }
    ap_plan_free(&p);
    return t;
}

static int check_inputs(const ap_cluster *c, double measured, char *err)
{
    if (!(measured > 0) || !isfinite(measured)) {
        snprintf(err, AP_ERR_LEN, "measured step time must be a positive number of seconds");
        return AP_EINPUT;
    }
    if (c->ngemm > 0) {
        snprintf(err, AP_ERR_LEN,
                 "cluster %s carries measured GEMM times (a profile): they set the "
                 "GEMM rate already; calibrate a preset or a cluster file without "
                 "\"gemm\" samples", c->name);
        return AP_EINPUT;
    }
    if (!(c->gemm_eff > 0)) {
        snprintf(err, AP_ERR_LEN, "cluster %s has no GEMM efficiency to scale", c->name);
        return AP_EINPUT;
    }
    return AP_OK;
}

int ap_calibrate_megatron(const ap_graph *g, ap_cluster *c, const ap_megatron *m,
                          double measured, ap_calibration *out, char *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_inputs(c, measured, err);
    if (rc)
        return rc;
    ap_cluster base = *c;
    double lo = CALIBRATE_MIN_SCALE, hi = 1 / largest_efficiency(&base);
    double preset = priced(g, &base, c, m, 1, out, err);
    double fastest = preset < 0 ? -1 : priced(g, &base, c, m, hi, NULL, err);
    double slowest = fastest < 0 ? -1 : priced(g, &base, c, m, lo, NULL, err);
    if (slowest < 0) {
        scale_efficiencies(&base, 1, c);
        return AP_EINPUT;
    }
    out->preset_s = preset;
    if (measured < fastest || measured > slowest) {
        scale_efficiencies(&base, 1, c);
        snprintf(err, AP_ERR_LEN,
                 "a measured step of %.4g s is out of reach: this configuration "
                 "prices at %.4g s with every tensor-core kernel at peak and %.4g s "
                 "at 1/16 of the cluster's rates (%.4g s as given); check that it is "
                 "the configuration the run used",
                 measured, fastest, slowest, preset);
        return AP_EINPUT;
    }
    for (int i = 0; i < CALIBRATE_ITERS; i++) {
        double mid = sqrt(lo * hi);
        double t = priced(g, &base, c, m, mid, NULL, err);
        if (t < 0)
            return AP_EINTERNAL;
        if (t > measured)
            lo = mid;
        else
            hi = mid;
    }
    out->scale = sqrt(lo * hi);
    if (priced(g, &base, c, m, out->scale, out, err) < 0)
        return AP_EINTERNAL;
    scale_efficiencies(&base, out->scale, c);
    c->calib_scale = (base.calib_scale > 0 ? base.calib_scale : 1) * out->scale;
    c->calib_measured_s = measured;
    return AP_OK;
}
