/* gpu_gemm_lt.c -- GEMMs through cuBLASLt, as Transformer Engine runs the
 * linear layers of Megatron-LM and NeMo (transformer_engine/common/gemm/
 * cublaslt_gemm.cu): the "TN" layout of a forward GEMM (A transposed, B not,
 * column-major), fp32 accumulation and scales, a 32 MiB workspace, and the
 * first algorithm cuBLASLt's heuristic offers for it. cublasGemmEx, which
 * the profiler used for the half types before, picks its own algorithm
 * without that workspace and ran large bf16 GEMMs 10-20% slower than
 * PyTorch on an H100 (docs/profiler.md). FP8 has no cublasGemmEx path at
 * all: A and B in E4M3, D in bf16, per-tensor scale factors passed by
 * device pointer, every dimension a multiple of 16 (cuBLAS documentation,
 * cublasLtMatmul, FP8 requirements). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>

#include "profiler/gpu.h"

/* Transformer Engine's cuBLAS workspace on Hopper. */
#define WORKSPACE_BYTES ((uint64_t)32 << 20)
#define FP8_DIM_MULTIPLE 16

struct ap_prof_lt {
    cublasLtHandle_t lt;
    void *workspace;
    /* On the device, both 1: the scales of A and B, each in its own
     * allocation, since cuBLASLt refuses a scale pointer that is not
     * 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED at the launch, seen on
     * an H100 with cuBLAS 13.1 when B's followed A's by 4 bytes). */
    float *scale_a, *scale_b;
    cublasLtMatmulDesc_t desc; /* of desc_dtype; 0 until the first shape */
    ap_dtype desc_dtype;
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
        snprintf(err, AP_ERR_LEN, "autopar profile: %s %s m=%ld n=%ld k=%ld: %s",
                 call, ap_profile_gemm_dtype_name(s->dtype), s->m, s->n, s->k,
                 cublasGetStatusString(st));
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

cudaDataType_t ap_prof_cuda_type(ap_dtype dt)
{
    switch (dt) {
    case AP_FP8: return CUDA_R_8F_E4M3;
    case AP_BF16: return CUDA_R_16BF;
    case AP_FP16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

/* FP8 GEMMs write bf16, as Transformer Engine's linear layers do; the
 * others write their input type (ap_profile_gemm_result_dtype). */
static cudaDataType_t output_type(ap_dtype dt)
{
    return dt == AP_FP8 ? CUDA_R_16BF : ap_prof_cuda_type(dt);
}

cublasComputeType_t ap_prof_compute_type(ap_dtype dt)
{
    return dt == AP_FP32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* The descriptor every shape of a dtype shares: TN, fp32 scale type, and
 * for FP8 the operands' scale factors, which Transformer Engine always
 * passes (its scale_inv of each tensor). */
static int make_desc(ap_prof_lt *f, ap_dtype dt, char *err)
{
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const float *sa = f->scale_a, *sb = f->scale_b;
    if (f->desc && f->desc_dtype == dt)
        return AP_OK;
    if (f->desc)
        cublasLtMatmulDescDestroy(f->desc);
    f->desc = NULL;
    LT_TRY(cublasLtMatmulDescCreate, (&f->desc, ap_prof_compute_type(dt), CUDA_R_32F), NULL);
    f->desc_dtype = dt;
    if (set_desc(f->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, "TRANSA", err) ||
        set_desc(f->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, "TRANSB", err))
        return AP_EINTERNAL;
    if (dt == AP_FP8 &&
        (set_desc(f->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa,
                  "A_SCALE_POINTER", err) ||
         set_desc(f->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb,
                  "B_SCALE_POINTER", err)))
        return AP_EINTERNAL;
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

static int make_preference(ap_prof_lt *f, char *err)
{
    const uint64_t ws = WORKSPACE_BYTES;
    LT_TRY(cublasLtMatmulPreferenceCreate, (&f->pref), NULL);
    LT_TRY(cublasLtMatmulPreferenceSetAttribute,
           (f->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), NULL);
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

int ap_prof_lt_create(ap_prof_lt **out, char *err)
{
    const float one = 1.0f;
    ap_prof_lt *f = calloc(1, sizeof *f);
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
    if (make_preference(f, err))
        goto fail;
    *out = f;
    return AP_OK;
fail:
    ap_prof_lt_destroy(f);
    return AP_EINTERNAL;
}

static void drop_layouts(ap_prof_lt *f)
{
    if (f->a)
        cublasLtMatrixLayoutDestroy(f->a);
    if (f->b)
        cublasLtMatrixLayoutDestroy(f->b);
    if (f->d)
        cublasLtMatrixLayoutDestroy(f->d);
    f->a = f->b = f->d = NULL;
}

/* Every dimension positive, and for FP8 a multiple of 16. */
static int dims_fit(const ap_profile_gemm_shape *s, char *err)
{
    int multiple = s->dtype == AP_FP8 ? FP8_DIM_MULTIPLE : 1;
    if (s->m > 0 && s->n > 0 && s->k > 0 && s->m % multiple == 0 &&
        s->n % multiple == 0 && s->k % multiple == 0)
        return AP_OK;
    if (multiple == 1)
        snprintf(err, AP_ERR_LEN, "autopar profile: %s m=%ld n=%ld k=%ld: every "
                 "dimension must be positive", ap_profile_gemm_dtype_name(s->dtype),
                 s->m, s->n, s->k);
    else
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: fp8 m=%ld n=%ld k=%ld: cuBLASLt's FP8 GEMMs need "
                 "every dimension a positive multiple of %d",
                 s->m, s->n, s->k, FP8_DIM_MULTIPLE);
    return AP_EINTERNAL;
}

/* C[m,n] = A[m,k] B[k,n] in the TN layout: A is stored k x m and read
 * transposed, B is stored k x n, D is m x n; the leading dimensions are the
 * row counts, k, k and m. C is D (beta is 0, as in training). */
int ap_prof_lt_prepare(ap_prof_lt *f, const ap_profile_gemm_shape *s, char *err)
{
    if (dims_fit(s, err) || make_desc(f, s->dtype, err))
        return AP_EINTERNAL;
    drop_layouts(f);
    uint64_t m = (uint64_t)s->m, n = (uint64_t)s->n, k = (uint64_t)s->k;
    cudaDataType_t in = ap_prof_cuda_type(s->dtype), out = output_type(s->dtype);
    LT_TRY(cublasLtMatrixLayoutCreate, (&f->a, in, k, m, (int64_t)k), s);
    LT_TRY(cublasLtMatrixLayoutCreate, (&f->b, in, k, n, (int64_t)k), s);
    LT_TRY(cublasLtMatrixLayoutCreate, (&f->d, out, m, n, (int64_t)m), s);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic,
           (f->lt, f->desc, f->a, f->b, f->d, f->d, f->pref, 1, &h, &found), s);
    if (found < 1) {
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: cublasLtMatmulAlgoGetHeuristic %s m=%ld n=%ld k=%ld: "
                 "no algorithm for the TN layout with a %d MiB workspace",
                 ap_profile_gemm_dtype_name(s->dtype), s->m, s->n, s->k,
                 (int)(WORKSPACE_BYTES >> 20));
        goto fail;
    }
    f->algo = h.algo;
    f->shape = *s;
    return AP_OK;
fail:
    drop_layouts(f);
    return AP_EINTERNAL;
}

int ap_prof_lt_launch(ap_prof_lt *f, const void *a, const void *b, void *d,
                      cudaStream_t stream, char *err)
{
    const float one = 1.0f, zero = 0.0f;
    if (!f->d) {
        snprintf(err, AP_ERR_LEN, "autopar profile: GEMM launched before a shape was prepared");
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

void ap_prof_lt_destroy(ap_prof_lt *f)
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
