/* estimate.c -- how long a profiling run takes, from the same roofline and
 * alpha-beta model the planner uses, so that the default grids can be checked
 * against their budgets on a machine without GPUs. */
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
            if (op == AP_COLL_SENDRECV && n != 2)
                continue;
            for (int i = 0; i < ns; i++)
                t += (o->warmup + o->iters) *
                     (coll_seconds(c, (ap_coll)op, n, sizes[i]) + SYNC_OVERHEAD);
        }
    }
    free(sizes);
    return t;
}

double ap_profile_estimate_seconds(const ap_profile_options *o,
                                   const ap_cluster *c, int gpus)
{
    double hbm = c->hbm_bw * (c->hbm_eff > 0 ? c->hbm_eff : 0.8);
    double copy = hbm > 0 ? 2 * HBM_BYTES_FULL / hbm : 0;
    return SETUP_PER_GPU * gpus + (o->warmup + o->iters) * copy +
           gemm_total(o, c) + coll_total(o, c, gpus);
}
