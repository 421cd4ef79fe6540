/* estimate.c -- how long a profiling run takes, from the same roofline and
 * alpha-beta model the planner uses, so that the default grids can be checked
 * against their budgets on a machine without GPUs, and so that a run can say
 * before it starts what it will measure and for about how long. */
#include <stdio.h>
#include <stdlib.h>

#include "profiler/profiler.h"

/* Assumed, not measured here (no GPU was at hand): creating a CUDA context
 * and a cuBLAS handle takes about a second per device, building an NCCL
 * communicator for a group a few seconds, and each timed iteration pays a
 * host round trip (event synchronisation) of some tens of microseconds. */
#define SETUP_PER_GPU 1.0
#define COMM_INIT 3.0
#define SYNC_OVERHEAD 50e-6
#define HBM_BYTES_FULL (1024.0 * 1024.0 * 1024.0)

/* The cost model's own price of the shape (ap_cost_gemm: the roofline
 * with quantisation and the output's store, in the dtype the grid's GEMM
 * writes), at the rate c has; a dtype c has no peak for is not timed long. */
static double gemm_seconds(const ap_cluster *c, const ap_profile_gemm_shape *s)
{
    if (!(c->peak_flops[s->dtype] > 0))
        return c->kernel_floor;
    return ap_cost_gemm(c, s->dtype, (double)s->m, (double)s->n, (double)s->k);
}

/* The grid a run on c's GPUs measures: FP8 too when they have an FP8 peak.
 * Each shape is launched a few times alone, then timed in batches (batch.c). */
static double gemm_total(const ap_profile_options *o, const ap_cluster *c)
{
    ap_profile_gemm_shape *g;
    int n;
    char err[AP_ERR_LEN];
    unsigned dtypes;
    if (ap_profile_run_dtypes(o, c->peak_flops[AP_FP8] > 0, &dtypes, err) != AP_OK ||
        ap_profile_gemm_grid(o->quick, dtypes, &g, &n, err) != AP_OK)
        return 0;
    double t = 0;
    for (int i = 0; i < n; i++) {
        double one = gemm_seconds(c, &g[i]);
        int reps = ap_profile_gemm_batch(one, 0, 0).reps;
        t += AP_PROFILE_SIZING_LAUNCHES * (one + SYNC_OVERHEAD) +
             (o->warmup + o->iters) * (reps * one + SYNC_OVERHEAD);
    }
    free(g);
    return t;
}

static double coll_seconds(const ap_cluster *c, ap_coll op, int ranks,
                           double bytes)
{
    double bw = c->intra_bw > 0 ? c->intra_bw : 1e11;
    return c->intra_lat + ap_profile_busbw_factor(op, ranks) * bytes / bw;
}

static double coll_total(const ap_profile_options *o, const ap_cluster *c,
                         int gpus)
{
    double *sizes;
    int ns;
    char err[AP_ERR_LEN];
    if (ap_profile_coll_sizes(o->quick, o->max_bytes, &sizes, &ns, err) != AP_OK)
        return 0;
    double t = 0;
    for (int n = 2; n <= gpus; n *= 2) {
        t += COMM_INIT;
        for (int op = 0; op < AP_NCOLL; op++) {
            if (!ap_profile_coll_applies((ap_coll)op, n))
                continue;
            for (int i = 0; i < ns; i++)
                t += (o->warmup + o->iters) *
                     (coll_seconds(c, (ap_coll)op, n, sizes[i]) + SYNC_OVERHEAD);
        }
    }
    free(sizes);
    return t;
}

/* "bf16, fp16, tf32, fp8": the dtypes of grid g, which is sorted by
 * dtype, in its order. */
static void dtype_list(const ap_profile_gemm_shape *g, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++)
        if (i == 0 || g[i].dtype != g[i - 1].dtype)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
                                     ap_profile_gemm_dtype_name(g[i].dtype));
}

/* The run's collective measurements (ap_profile_coll_count). */
static int coll_count(const ap_profile_options *o, int gpus)
{
    double *sizes;
    int ns;
    char err[AP_ERR_LEN];
    if (ap_profile_coll_sizes(o->quick, o->max_bytes, &sizes, &ns, err) != AP_OK)
        return 0;
    free(sizes);
    return ap_profile_coll_count(gpus, ns);
}

int ap_profile_describe(const ap_profile_options *o, const char *gpu_name,
                        int has_fp8, int gpus, char *buf, size_t len, char *err)
{
    unsigned dtypes;
    ap_profile_gemm_shape *g;
    int n;
    if (ap_profile_run_dtypes(o, has_fp8, &dtypes, err) ||
        ap_profile_gemm_grid(o->quick, dtypes, &g, &n, err))
        return AP_EINPUT;
    char list[64];
    dtype_list(g, n, list, sizeof list);
    free(g);
    const char *name = ap_profile_preset_for_gpu(gpu_name);
    ap_cluster c;
    if (ap_cluster_preset(name ? name : "h100-sxm", gpus, gpus, &c, err))
        return AP_EINTERNAL;
    if (!has_fp8)
        c.peak_flops[AP_FP8] = 0;
    double t = ap_profile_estimate_seconds(o, &c, gpus);
    ap_cluster_free(&c);
    snprintf(buf, len, "%d GEMMs (%s) and %d collectives; about %.0f s by the %s "
             "preset's figures", n, list, coll_count(o, gpus), t,
             name ? name : "h100-sxm");
    return AP_OK;
}

double ap_profile_estimate_seconds(const ap_profile_options *o,
                                   const ap_cluster *c, int gpus)
{
    double hbm = c->hbm_bw * (c->hbm_eff > 0 ? c->hbm_eff : 0.8);
    double copy = hbm > 0 ? 2 * HBM_BYTES_FULL / hbm : 0;
    return SETUP_PER_GPU * gpus + (o->warmup + o->iters) * copy +
           gemm_total(o, c) + coll_total(o, c, gpus);
}
