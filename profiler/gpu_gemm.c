/* gpu_gemm.c -- GEMM throughput over the shape grid, each shape through
 * cuBLASLt as Transformer Engine runs it (gpu_gemm_lt.c); a half or fp32
 * shape that cuBLASLt has no algorithm for falls back to cublasGemmEx, with
 * a line on stderr. Operands hold random values in [-1, 1): tensor cores
 * draw less power on zeros and would report a clock the real workload never
 * gets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "profiler/gpu.h"

#define FILL_CHUNK (16u << 20) /* bytes of host pattern copied repeatedly */

static unsigned short to_bf16(float f)
{
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return (unsigned short)(u >> 16);
}

/* |f| < 1 and no subnormal half results matter here: values below 2^-14
 * become zero. */
static unsigned short to_fp16(float f)
{
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    unsigned short sign = (unsigned short)((u >> 16) & 0x8000);
    int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    if (exp <= 0)
        return sign;
    return (unsigned short)(sign | (exp << 10) | ((u >> 13) & 0x3ff));
}

static void fill_pattern(void *host, ap_dtype dt)
{
    unsigned int x = 12345u;
    size_t n = FILL_CHUNK / ap_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float f = (float)(x >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
        if (dt == AP_FP32)
            ((float *)host)[i] = f;
        else if (dt == AP_FP8)
            ((unsigned char *)host)[i] = ap_profile_e4m3(f);
        else
            ((unsigned short *)host)[i] = dt == AP_BF16 ? to_bf16(f) : to_fp16(f);
    }
}

static int fill_device(void *dev, size_t bytes, const void *host, char *err)
{
    for (size_t off = 0; off < bytes; off += FILL_CHUNK) {
        size_t n = bytes - off < FILL_CHUNK ? bytes - off : FILL_CHUNK;
        AP_CUDA_TRY(cudaMemcpy((char *)dev + off, host, n, cudaMemcpyHostToDevice));
    }
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

typedef struct {
    cublasHandle_t h;
    ap_prof_lt *lt;
    int gemmex; /* the prepared shape runs through cublasGemmEx */
    cudaStream_t stream;
    cudaEvent_t start, stop;
    void *a, *b, *c;
    size_t cap; /* bytes of each of a, b, c */
    double *times;
} bench;

/* One launch on the operand set `offset` bytes into the buffers
 * (profiler/batch.c). */
static int launch(bench *B, const ap_profile_gemm_shape *s, size_t offset, char *err)
{
    const float one = 1.0f, zero = 0.0f;
    int m = (int)s->m, n = (int)s->n, k = (int)s->k;
    char *a = (char *)B->a + offset, *b = (char *)B->b + offset, *c = (char *)B->c + offset;
    if (!B->gemmex)
        return ap_prof_lt_launch(B->lt, a, b, c, B->stream, err);
    cublasStatus_t st = cublasGemmEx(
        B->h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a,
        ap_prof_cuda_type(s->dtype), m, b, ap_prof_cuda_type(s->dtype), k, &zero, c,
        ap_prof_cuda_type(s->dtype), m, ap_prof_compute_type(s->dtype), CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, AP_ERR_LEN, "autopar profile: cublasGemmEx %s m=%d n=%d k=%d: %s",
                 ap_profile_gemm_dtype_name(s->dtype), m, n, k,
                 cublasGetStatusString(st));
        return AP_EINTERNAL;
    }
    return AP_OK;
}

static size_t operand_bytes(const ap_profile_gemm_shape *g)
{
    size_t e = ap_dtype_size(g->dtype);
    size_t mk = (size_t)g->m * g->k * e, kn = (size_t)g->k * g->n * e;
    size_t mn = (size_t)g->m * g->n * ap_dtype_size(ap_profile_gemm_result_dtype(g->dtype));
    size_t big = mk > kn ? mk : kn;
    return mn > big ? mn : big;
}

/* Seconds per launch of `reps` launches back to back, cycling over the
 * batch's operand sets from *next. */
static int time_batch(bench *B, const ap_profile_gemm_shape *s, ap_profile_batch bt,
                      int *next, double *seconds, char *err)
{
    AP_CUDA_TRY(cudaEventRecord(B->start, B->stream));
    for (int r = 0; r < bt.reps; r++) {
        if (launch(B, s, (size_t)*next * bt.stride, err))
            return AP_EINTERNAL;
        *next = (*next + 1) % bt.slots;
    }
    AP_CUDA_TRY(cudaEventRecord(B->stop, B->stream));
    AP_CUDA_TRY(cudaEventSynchronize(B->stop));
    float ms;
    AP_CUDA_TRY(cudaEventElapsedTime(&ms, B->start, B->stop));
    *seconds = ms * 1e-3 / bt.reps;
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

/* The shape's cuBLASLt descriptors and algorithm, outside the timed
 * launches; a half or fp32 shape without a cuBLASLt algorithm falls back to
 * cublasGemmEx and says so. */
static int prepare(bench *B, const ap_profile_gemm_shape *s, char *err)
{
    B->gemmex = 0;
    if (ap_prof_lt_prepare(B->lt, s, err) == AP_OK)
        return AP_OK;
    if (s->dtype == AP_FP8)
        return AP_EINTERNAL;
    fprintf(stderr, "%s; timing it with cublasGemmEx instead\n", err);
    B->gemmex = 1;
    return AP_OK;
}

/* A few launches alone size the batch, by the fastest of them: the first
 * use of a shape pays cuBLAS's heuristics and would make a short GEMM look
 * long enough to time alone. Then warm-up and timed batches. */
static int run_one(bench *B, const ap_profile_gemm_shape *s,
                   const ap_profile_options *o, double *median, char *err)
{
    if (prepare(B, s, err))
        return AP_EINTERNAL;
    ap_profile_batch one = {1, 1, 0};
    int next = 0;
    double single = 0;
    for (int i = 0; i < AP_PROFILE_SIZING_LAUNCHES; i++) {
        double t;
        if (time_batch(B, s, one, &next, &t, err))
            return AP_EINTERNAL;
        single = i == 0 || t < single ? t : single;
    }
    ap_profile_batch bt = ap_profile_gemm_batch(single, operand_bytes(s), B->cap);
    for (int it = 0; it < o->warmup + o->iters; it++) {
        double t;
        if (time_batch(B, s, bt, &next, &t, err))
            return AP_EINTERNAL;
        if (it >= o->warmup)
            B->times[it - o->warmup] = t;
    }
    *median = ap_profile_median(B->times, o->iters);
    return AP_OK;
}

/* One buffer size fits every operand of the grid: the largest of them. */
static size_t largest_operand(const ap_profile_gemm_shape *g, int n)
{
    size_t big = 0;
    for (int i = 0; i < n; i++) {
        size_t e = operand_bytes(&g[i]);
        big = e > big ? e : big;
    }
    return big;
}

static int refill(bench *B, ap_dtype dt, void *host, char *err)
{
    fill_pattern(host, dt);
    if (fill_device(B->a, B->cap, host, err) || fill_device(B->b, B->cap, host, err))
        return AP_EINTERNAL;
    return AP_OK;
}

/* The dtypes to measure. By default FP8 is measured where the GPU has FP8
 * tensor cores, and elsewhere one line says why it is not. */
static int run_dtypes(const ap_profile_options *o, const ap_profile_result *r,
                      unsigned *dtypes, char *err)
{
    int fp8 = ap_profile_has_fp8(r->cc_major, r->cc_minor);
    if (!fp8 && !o->dtypes)
        fprintf(stderr, "autopar profile: skipping FP8 GEMMs: %s is compute capability "
                "%d.%d; FP8 tensor cores need 8.9 (Ada, Hopper, Blackwell) or later\n",
                r->gpu_name, r->cc_major, r->cc_minor);
    return ap_profile_run_dtypes(o, fp8, dtypes, err);
}

int ap_prof_gemm(const ap_profile_options *o, ap_profile_result *r, char *err)
{
    ap_profile_gemm_shape *g = NULL;
    int n = 0;
    unsigned dtypes;
    int st = run_dtypes(o, r, &dtypes, err);
    if (st == AP_OK)
        st = ap_profile_gemm_grid(o->quick, dtypes, &g, &n, err);
    if (st != AP_OK)
        return st;
    bench B = {0};
    void *host = malloc(FILL_CHUNK);
    B.times = malloc((size_t)o->iters * sizeof *B.times);
    B.cap = largest_operand(g, n);
    st = AP_EINTERNAL;
    if (!host || !B.times) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        goto fail;
    }
    if (cublasCreate(&B.h) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, AP_ERR_LEN, "autopar profile: cublasCreate failed");
        goto fail;
    }
    AP_CUDA_TRY(cudaStreamCreate(&B.stream));
    cublasSetStream(B.h, B.stream);
    if (ap_prof_lt_create(&B.lt, err))
        goto fail;
    AP_CUDA_TRY(cudaEventCreate(&B.start));
    AP_CUDA_TRY(cudaEventCreate(&B.stop));
    AP_CUDA_TRY(cudaMalloc(&B.a, B.cap));
    AP_CUDA_TRY(cudaMalloc(&B.b, B.cap));
    AP_CUDA_TRY(cudaMalloc(&B.c, B.cap));
    for (int i = 0; i < n; i++) {
        if ((i == 0 || g[i].dtype != g[i - 1].dtype) && refill(&B, g[i].dtype, host, err))
            goto fail;
        double sec;
        if (run_one(&B, &g[i], o, &sec, err))
            goto fail;
        ap_gemm_sample s = {g[i].dtype, (double)g[i].m, (double)g[i].n, (double)g[i].k, sec};
        if (ap_prof_add_gemm(r, s, err))
            goto fail;
        fprintf(stderr, "[gemm %d/%d] %s m=%ld n=%ld k=%ld %.3f ms %.1f TFLOP/s\n",
                i + 1, n, ap_profile_gemm_dtype_name(g[i].dtype), g[i].m, g[i].n,
                g[i].k, sec * 1e3, ap_profile_gemm_flops(s.m, s.n, s.k) / sec / 1e12);
    }
    st = AP_OK;
fail:
    if (B.h)
        cublasDestroy(B.h);
    ap_prof_lt_destroy(B.lt);
    cudaFree(B.a);
    cudaFree(B.b);
    cudaFree(B.c);
    if (B.start)
        cudaEventDestroy(B.start);
    if (B.stop)
        cudaEventDestroy(B.stop);
    if (B.stream)
        cudaStreamDestroy(B.stream);
    free(B.times);
    free(host);
    free(g);
    return st;
}
