/* gpu_device.c -- finds the GPUs and records what the driver says of them. */
#include <stdio.h>
#include <string.h>

#include "profiler/gpu.h"

int ap_prof_detect(const ap_profile_options *o, ap_profile_result *r,
                   int *ndev, char *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        snprintf(err, AP_ERR_LEN, "autopar profile: no CUDA device found: %s",
                 e != cudaSuccess ? cudaGetErrorString(e)
                                  : "cudaGetDeviceCount reported 0 devices");
        return AP_EINPUT;
    }
    if (o->gpus > count) {
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: --gpus %d: only %d CUDA device%s found",
                 o->gpus, count, count == 1 ? "" : "s");
        return AP_EINPUT;
    }
    *ndev = o->gpus ? o->gpus : count;

    struct cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess) {
        snprintf(err, AP_ERR_LEN, "autopar profile: no CUDA device found: %s",
                 cudaGetErrorString(e));
        return AP_EINPUT;
    }
    snprintf(r->gpu_name, sizeof r->gpu_name, "%s", p.name);
    r->hbm_bytes = (double)p.totalGlobalMem;
    r->sm_count = p.multiProcessorCount;
    r->cc_major = p.major;
    r->cc_minor = p.minor;
    /* --dtypes fp8 on a GPU without FP8 tensor cores is refused before
     * anything is measured. */
    unsigned dtypes;
    if (ap_profile_run_dtypes(o, ap_profile_has_fp8(p.major, p.minor), &dtypes, err))
        return AP_EINPUT;

    /* A node of mixed GPUs is profiled as if every GPU were the first; the
     * planner assumes identical GPUs. Say so rather than hide it. */
    for (int d = 1; d < *ndev; d++) {
        struct cudaDeviceProp q;
        if (cudaGetDeviceProperties(&q, d) == cudaSuccess && strcmp(q.name, p.name))
            fprintf(stderr, "autopar profile: warning: device %d is a %s, device 0 a %s; "
                    "the file describes device 0\n", d, q.name, p.name);
    }
    return AP_OK;
}
