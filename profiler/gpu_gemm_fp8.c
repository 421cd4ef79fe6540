/* gpu_gemm_fp8.c -- FP8 GEMMs through cuBLASLt, as Transformer Engine runs
 * the linear layers of Megatron-LM and NeMo on Hopper: A and B in E4M3, D in
 * bf16, fp32 accumulation and scales, per-tensor scale factors passed by
 * device pointer, a 32 MiB workspace, and the first algorithm cuBLASLt's
 * heuristic offers. cublasGemmEx has no FP8 path; cublasLtMatmul does, and
 * only in the "TN" layout (A transposed, B not, column-major) with every
 * dimension a multiple of 16 (cuBLAS documentation, cublasLtMatmul, FP8
 * requirements). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>

#include "profiler/gpu.h"

/* Transformer Engine's cuBLAS workspace on Hopper. */
#define WORKSPACE_BYTES ((uint64_t)32 << 20)
#define FP8_DIM_MULTIPLE 16

struct ap_prof_fp8 {
    cublasLtHandle_t lt;
    void *workspace;
    /* On the device, both 1: the scales of A and B, each in its own
     * allocation, since cuBLASLt refuses a scale pointer that is not
     * 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED at the launch, seen on
     * an H100 with cuBLAS 13.1 when B's followed A's by 4 bytes). */
    float *scale_a, *scale_b;
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulPreference_t pref;
    cublasLtMatrixLayout_t a, b, d; /* of the prepared shape */
    cublasLtMatmulAlgo_t algo;
    ap_profile_gemm_shape shape;
};

/* The message names the call that failed and, once there is one, the shape,
 * so that a single run on a GPU tells what went wrong. */
static void lt_report(cublasStatus_t st, const char *call,
                      const ap_profile_gemm_shape *s, char *err)
{
    if (s)
        snprintf(err, AP_ERR_LEN, "autopar profile: %s fp8 m=%ld n=%ld k=%ld: %s",
                 call, s->m, s->n, s->k, cublasGetStatusString(st));
    else
        snprintf(err, AP_ERR_LEN, "autopar profile: %s: %s", call,
                 cublasGetStatusString(st));
}

#define LT_TRY(fn, args, shape)                                              \
    do {                                                                     \
        cublasStatus_t ap_s_ = fn args;                                      \
        if (ap_s_ != CUBLAS_STATUS_SUCCESS) {                                \
            lt_report(ap_s_, #fn, shape, err);                               \
            goto fail;                                                       \
        }                                                                    \
    } while (0)

static int set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                    const void *value, size_t size, const char *name, char *err)
{
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(desc, attr, value, size);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: cublasLtMatmulDescSetAttribute(%s): %s", name,
                 cublasGetStatusString(st));
        return AP_EINTERNAL;
    }
    return AP_OK;
}

/* The descriptor every shape shares: TN, fp32 compute and scale type, and
 * the operands' scale factors, which Transformer Engine always passes (its
 * scale_inv of each tensor). */
static int make_desc(ap_prof_fp8 *f, char *err)
{
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const float *sa = f->scale_a, *sb = f->scale_b;
    LT_TRY(cublasLtMatmulDescCreate, (&f->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), NULL);
    if (set_desc(f->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, "TRANSA", err) ||
        set_desc(f->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, "TRANSB", err) ||
        set_desc(f->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa,
                 "A_SCALE_POINTER", err) ||
        set_desc(f->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb,
                 "B_SCALE_POINTER", err))
        return AP_EINTERNAL;
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

static int make_preference(ap_prof_fp8 *f, char *err)
{
    const uint64_t ws = WORKSPACE_BYTES;
    LT_TRY(cublasLtMatmulPreferenceCreate, (&f->pref), NULL);
    LT_TRY(cublasLtMatmulPreferenceSetAttribute,
           (f->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), NULL);
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

int ap_prof_fp8_create(ap_prof_fp8 **out, char *err)
{
    const float one = 1.0f;
    ap_prof_fp8 *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        return AP_EINTERNAL;
    }
    LT_TRY(cublasLtCreate, (&f->lt), NULL);
    AP_CUDA_TRY(cudaMalloc(&f->workspace, WORKSPACE_BYTES));
    AP_CUDA_TRY(cudaMalloc((void **)&f->scale_a, sizeof one));
    AP_CUDA_TRY(cudaMalloc((void **)&f->scale_b, sizeof one));
    AP_CUDA_TRY(cudaMemcpy(f->scale_a, &one, sizeof one, cudaMemcpyHostToDevice));
    AP_CUDA_TRY(cudaMemcpy(f->scale_b, &one, sizeof one, cudaMemcpyHostToDevice));
    if (make_desc(f, err) || make_preference(f, err))
        goto fail;
    *out = f;
    return AP_OK;
fail:
    ap_prof_fp8_destroy(f);
    return AP_EINTERNAL;
}

static void drop_layouts(ap_prof_fp8 *f)
{
    if (f->a)
        cublasLtMatrixLayoutDestroy(f->a);
    if (f->b)
        cublasLtMatrixLayoutDestroy(f->b);
    if (f->d)
        cublasLtMatrixLayoutDestroy(f->d);
    f->a = f->b = f->d = NULL;
}

static int dims_fit(const ap_profile_gemm_shape *s, char *err)
{
    if (s->m > 0 && s->n > 0 && s->k > 0 && s->m % FP8_DIM_MULTIPLE == 0 &&
        s->n % FP8_DIM_MULTIPLE == 0 && s->k % FP8_DIM_MULTIPLE == 0)
        return AP_OK;
    snprintf(err, AP_ERR_LEN,
             "autopar profile: fp8 m=%ld n=%ld k=%ld: cuBLASLt's FP8 GEMMs need "
             "every dimension a positive multiple of %d",
             s->m, s->n, s->k, FP8_DIM_MULTIPLE);
    return AP_EINTERNAL;
}

/* C[m,n] = A[m,k] B[k,n] in the TN layout: A is stored k x m and read
 * transposed, B is stored k x n, D is m x n; the leading dimensions are the
 * row counts, k, k and m. C is D (beta is 0, as in training). */
int ap_prof_fp8_prepare(ap_prof_fp8 *f, const ap_profile_gemm_shape *s, char *err)
{
    if (dims_fit(s, err))
        return AP_EINTERNAL;
    drop_layouts(f);
    uint64_t m = (uint64_t)s->m, n = (uint64_t)s->n, k = (uint64_t)s->k;
    LT_TRY(cublasLtMatrixLayoutCreate, (&f->a, CUDA_R_8F_E4M3, k, m, (int64_t)k), s);
    LT_TRY(cublasLtMatrixLayoutCreate, (&f->b, CUDA_R_8F_E4M3, k, n, (int64_t)k), s);
    LT_TRY(cublasLtMatrixLayoutCreate, (&f->d, CUDA_R_16BF, m, n, (int64_t)m), s);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic,
           (f->lt, f->desc, f->a, f->b, f->d, f->d, f->pref, 1, &h, &found), s);
    if (found < 1) {
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: cublasLtMatmulAlgoGetHeuristic fp8 m=%ld n=%ld k=%ld: "
                 "no algorithm for E4M3 x E4M3 -> bf16, TN, fp32 compute, %d MiB workspace",
                 s->m, s->n, s->k, (int)(WORKSPACE_BYTES >> 20));
        goto fail;
    }
    f->algo = h.algo;
    f->shape = *s;
    return AP_OK;
fail:
    drop_layouts(f);
    return AP_EINTERNAL;
}

int ap_prof_fp8_launch(ap_prof_fp8 *f, const void *a, const void *b, void *d,
                       cudaStream_t stream, char *err)
{
    const float one = 1.0f, zero = 0.0f;
    if (!f->d) {
        snprintf(err, AP_ERR_LEN, "autopar profile: fp8 GEMM launched before a shape was prepared");
        return AP_EINTERNAL;
    }
    cublasStatus_t st = cublasLtMatmul(f->lt, f->desc, &one, a, f->a, b, f->b, &zero,
                                       d, f->d, d, f->d, &f->algo, f->workspace,
                                       WORKSPACE_BYTES, stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        lt_report(st, "cublasLtMatmul", &f->shape, err);
        return AP_EINTERNAL;
    }
    return AP_OK;
}

void ap_prof_fp8_destroy(ap_prof_fp8 *f)
{
    if (!f)
        return;
    drop_layouts(f);
    if (f->pref)
        cublasLtMatmulPreferenceDestroy(f->pref);
    if (f->desc)
        cublasLtMatmulDescDestroy(f->desc);
    cudaFree(f->scale_a);
    cudaFree(f->scale_b);
    cudaFree(f->workspace);
    if (f->lt)
        cublasLtDestroy(f->lt);
    free(f);
}
