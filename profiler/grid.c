/* grid.c -- what a profiling run measures: the GEMM shapes, the collective
 * sizes and the groups of GPUs. The grids are chosen to cover the GEMMs and
 * messages a transformer's training step issues under the parallelism the
 * planner considers, and sized to fit the run's time budget (see
 * ap_profile_estimate_seconds and docs/profiler.md). */
#include <stdio.h>
#include <stdlib.h>

#include "profiler/profiler.h"

/* The order of the grid; FP8 last, as only some GPUs measure it. */
static const ap_dtype gemm_dtypes[] = {AP_BF16, AP_FP16, AP_FP32, AP_FP8};
#define NDTYPES (int)(sizeof gemm_dtypes / sizeof gemm_dtypes[0])

static const long hidden_full[] = {4096, 8192, 12288, 16384};
static const long hidden_quick[] = {4096, 8192, 16384};
static const long tokens_full[] = {2048, 8192, 16384};
static const long tokens_quick[] = {4096};
static const long shards[] = {1, 2, 4, 8};

#define LEN(a) (int)(sizeof a / sizeof a[0])

const char *ap_profile_gemm_dtype_name(ap_dtype dt)
{
    switch (dt) {
    case AP_BF16: return "bf16";
    case AP_FP16: return "fp16";
    case AP_FP32: return "tf32";
    case AP_FP8: return "fp8";
    default: return "?";
    }
}

ap_dtype ap_profile_gemm_result_dtype(ap_dtype dt)
{
    return ap_gemm_out_dtype(dt);
}

double ap_profile_gemm_flops(double m, double n, double k)
{
    return 2.0 * m * n * k;
}

static int dtype_rank(ap_dtype dt)
{
    for (int i = 0; i < NDTYPES; i++)
        if (gemm_dtypes[i] == dt)
            return i;
    return NDTYPES;
}

static int cmp_long(long a, long b)
{
    return (a > b) - (a < b);
}

static int cmp_shape(const void *pa, const void *pb)
{
    const ap_profile_gemm_shape *a = pa, *b = pb;
    int c = dtype_rank(a->dtype) - dtype_rank(b->dtype);
    if (!c) c = cmp_long(a->m, b->m);
    if (!c) c = cmp_long(a->n, b->n);
    if (!c) c = cmp_long(a->k, b->k);
    return c;
}

/* The forward GEMM (m, n, k) of a linear layer Y[m,n] = X[m,k] W[k,n] and
 * its backward pair: dX[m,k] = dY[m,n] W^T (m, k, n) and dW[k,n] = X^T dY
 * (k, n, m). */
static int add_linear(ap_profile_gemm_shape *g, int len, ap_dtype dt, long m,
                      long n, long k)
{
    g[len++] = (ap_profile_gemm_shape){dt, m, n, k};
    g[len++] = (ap_profile_gemm_shape){dt, m, k, n};
    g[len++] = (ap_profile_gemm_shape){dt, k, n, m};
    return len;
}

/* The four linear layers of a transformer block with hidden h, a 4h MLP and
 * tensor parallelism t over m tokens: fused QKV and the MLP up projection
 * are split by columns, the attention output and MLP down projection by rows. */
static int add_block(ap_profile_gemm_shape *g, int len, ap_dtype dt, long m,
                     long h, long t)
{
    len = add_linear(g, len, dt, m, 3 * h / t, h);
    len = add_linear(g, len, dt, m, h, h / t);
    len = add_linear(g, len, dt, m, 4 * h / t, h);
    len = add_linear(g, len, dt, m, h, 4 * h / t);
    return len;
}

int ap_profile_gemm_grid(int quick, unsigned dtypes, ap_profile_gemm_shape **out,
                         int *n, char *err)
{
    const long *hid = quick ? hidden_quick : hidden_full;
    const long *tok = quick ? tokens_quick : tokens_full;
    int nh = quick ? LEN(hidden_quick) : LEN(hidden_full);
    int nt = quick ? LEN(tokens_quick) : LEN(tokens_full);
    int cap = NDTYPES * nh * nt * LEN(shards) * 12;
    ap_profile_gemm_shape *g = malloc((size_t)cap * sizeof *g);
    if (!g) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        return AP_EINTERNAL;
    }
    int len = 0;
    for (int d = 0; d < NDTYPES; d++) {
        if (!(dtypes & AP_PROFILE_DTYPE(gemm_dtypes[d])))
            continue;
        for (int i = 0; i < nh; i++)
            for (int j = 0; j < nt; j++)
                for (int s = 0; s < LEN(shards); s++)
                    len = add_block(g, len, gemm_dtypes[d], tok[j], hid[i],
                                    shards[s]);
    }
    qsort(g, (size_t)len, sizeof *g, cmp_shape);
    int uniq = 0;
    for (int i = 0; i < len; i++)
        if (!uniq || cmp_shape(&g[uniq - 1], &g[i]))
            g[uniq++] = g[i];
    *out = g;
    *n = uniq;
    return AP_OK;
}

int ap_profile_coll_applies(ap_coll op, int nranks)
{
    return op == AP_COLL_SENDRECV ? nranks == 2 : nranks >= 2;
}

int ap_profile_coll_count(int gpus, int nsizes)
{
    int total = 0;
    for (int n = 2; n <= gpus; n *= 2)
        for (int op = 0; op < AP_NCOLL; op++)
            total += ap_profile_coll_applies((ap_coll)op, n) ? nsizes : 0;
    return total;
}

int ap_profile_coll_sizes(int quick, double max_bytes, double **out, int *n,
                          char *err)
{
    double step = quick ? 16.0 : 4.0;
    int cap = 0;
    for (double b = 1024.0; b <= max_bytes; b *= step)
        cap++;
    double *s = malloc((size_t)(cap ? cap : 1) * sizeof *s);
    if (!s) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        return AP_EINTERNAL;
    }
    int len = 0;
    for (double b = 1024.0; len < cap; b *= step)
        s[len++] = b;
    *out = s;
    *n = len;
    return AP_OK;
}

int ap_profile_group_ranks(ap_profile_group g)
{
    return g.nodes * g.per_node;
}

int ap_profile_group_has(ap_profile_group g, int gpus_per_node, int rank)
{
    if (rank < 0 || gpus_per_node < 1)
        return 0;
    return rank / gpus_per_node < g.nodes && rank % gpus_per_node < g.per_node;
}

int ap_profile_groups(int nodes, int gpus_per_node, ap_profile_group **out,
                      int *n, char *err)
{
    if (nodes < 1 || gpus_per_node < 1) {
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: %d nodes of %d GPUs: need at least one of each",
                 nodes, gpus_per_node);
        return AP_EINPUT;
    }
    int cap = 2;
    for (int k = 1; k <= nodes || k <= gpus_per_node; k *= 2)
        cap += 2;
    ap_profile_group *g = malloc((size_t)cap * sizeof *g);
    if (!g) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        return AP_EINTERNAL;
    }
    int len = 0;
    for (int m = 2; m <= gpus_per_node; m *= 2)
        g[len++] = (ap_profile_group){1, m};
    for (int k = 2; k <= nodes; k *= 2) {
        g[len++] = (ap_profile_group){k, 1};
        if (gpus_per_node > 1)
            g[len++] = (ap_profile_group){k, gpus_per_node};
    }
    *out = g;
    *n = len;
    return AP_OK;
}
