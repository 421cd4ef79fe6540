/* gpu.h -- private to the measuring half of the profiler (profiler/gpu_*.c,
 * the ap_profiler target). Not part of the module's public contract. */
#ifndef AP_PROFILER_GPU_H
#define AP_PROFILER_GPU_H

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "profiler/profiler.h"

/* Reports a failed CUDA or NCCL call into err and jumps to `fail`. */
#define AP_CUDA_TRY(call)                                                    \
    do {                                                                     \
        cudaError_t ap_e_ = (call);                                          \
        if (ap_e_ != cudaSuccess) {                                          \
            snprintf(err, AP_ERR_LEN, "autopar profile: %s: %s", #call,     \
                     cudaGetErrorString(ap_e_));                             \
            goto fail;                                                       \
        }                                                                    \
    } while (0)

#define AP_NCCL_TRY(call)                                                    \
    do {                                                                     \
        ncclResult_t ap_r_ = (call);                                         \
        if (ap_r_ != ncclSuccess) {                                          \
            snprintf(err, AP_ERR_LEN, "autopar profile: %s: %s", #call,     \
                     ncclGetErrorString(ap_r_));                             \
            goto fail;                                                       \
        }                                                                    \
    } while (0)

/* Finds the devices: fills the GPU fields of r from device 0 and sets *ndev to
 * the number to use (o->gpus, or all). AP_EINPUT when there is none. */
int ap_prof_detect(const ap_profile_options *o, ap_profile_result *r,
                   int *ndev, char *err);

/* Measures the GEMM grid and copy bandwidth on the current device. */
int ap_prof_gemm(const ap_profile_options *o, ap_profile_result *r, char *err);
int ap_prof_hbm(const ap_profile_options *o, ap_profile_result *r, char *err);

/* GEMMs through cuBLASLt as Transformer Engine runs them (gpu_gemm_lt.c),
 * for ap_prof_gemm's timing loop: create once per device, prepare once per
 * shape (descriptors and the heuristic's algorithm, outside the timed
 * region), then launch D = A^T B on the stream with A (k x m) and B (k x n)
 * in the shape's dtype and D (m x n) in its result dtype (bf16 for FP8),
 * column-major. */
typedef struct ap_prof_lt ap_prof_lt;
/* The CUDA type of a GEMM operand of dt (E4M3 for FP8) and the compute type
 * its products accumulate in: TF32 tensor cores for fp32 inputs, as
 * frameworks run them when TF32 is allowed, fp32 for every other type. */
cudaDataType_t ap_prof_cuda_type(ap_dtype dt);
cublasComputeType_t ap_prof_compute_type(ap_dtype dt);
int ap_prof_lt_create(ap_prof_lt **f, char *err);
int ap_prof_lt_prepare(ap_prof_lt *f, const ap_profile_gemm_shape *s, char *err);
int ap_prof_lt_launch(ap_prof_lt *f, const void *a, const void *b, void *d,
                      cudaStream_t stream, char *err);
void ap_prof_lt_destroy(ap_prof_lt *f);

/* Enqueues one collective of shape s for the rank `rank` of `nranks` on comm
 * (float elements; all-to-all as ncclSend/ncclRecv pairs, send/recv to the
 * next rank and from the previous one, as nccl-tests does). The caller
 * brackets the ranks it drives with ncclGroupStart/End. */
ncclResult_t ap_prof_launch(ap_coll op, const ap_profile_coll_shape *s,
                            const float *send, float *recv, int rank,
                            int nranks, ncclComm_t comm, cudaStream_t stream);

/* Appends a sample to r's table; AP_EINTERNAL when out of memory. */
int ap_prof_add_coll(ap_profile_result *r, ap_coll_sample s, char *err);
int ap_prof_add_gemm(ap_profile_result *r, ap_gemm_sample s, char *err);

/* One progress line on stderr for a measured collective; total 0 when the
 * count is not known in advance. */
void ap_prof_report_coll(int i, int total, const ap_coll_sample *s);

/* Measures every group of up to ndev GPUs of this node in one process. */
int ap_prof_coll_local(const ap_profile_options *o, int ndev,
                       ap_profile_result *r, char *err);

/* Records the date (UTC) and the command line in r. */
void ap_prof_stamp(ap_profile_result *r, const ap_profile_options *o);
/* Builds the cluster r describes and writes it to o->out. */
int ap_prof_write(const ap_profile_options *o, const ap_profile_result *r,
                  char *err);

/* The whole run under MPI (gpu_mpi.c, built only when MPI is found). */
int ap_prof_run_mpi(const ap_profile_options *o, char *err);

#endif
