/* gpu_hbm.c -- the bandwidth HBM sustains for a streaming copy, which the
 * cost model uses for memory-bound kernels. Plain cudaMemcpyAsync: no kernel
 * of our own, so no nvcc. */
#include <stdio.h>
#include <stdlib.h>

#include "profiler/gpu.h"

/* Device-to-device copies read and write every byte: bandwidth counts both,
 * as STREAM's copy kernel does. */
int ap_prof_hbm(const ap_profile_options *o, ap_profile_result *r, char *err)
{
    size_t bytes = (o->quick ? 256u : 1024u) << 20;
    void *src = NULL, *dst = NULL;
    cudaEvent_t start = NULL, stop = NULL;
    double *t = malloc((size_t)o->iters * sizeof *t);
    int st = AP_EINTERNAL;
    if (!t) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        return AP_EINTERNAL;
    }
    AP_CUDA_TRY(cudaMalloc(&src, bytes));
    AP_CUDA_TRY(cudaMalloc(&dst, bytes));
    AP_CUDA_TRY(cudaMemset(src, 1, bytes));
    AP_CUDA_TRY(cudaEventCreate(&start));
    AP_CUDA_TRY(cudaEventCreate(&stop));
    for (int it = 0; it < o->warmup + o->iters; it++) {
        AP_CUDA_TRY(cudaEventRecord(start, 0));
        AP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
        AP_CUDA_TRY(cudaEventRecord(stop, 0));
        AP_CUDA_TRY(cudaEventSynchronize(stop));
        float ms;
        AP_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
        if (it >= o->warmup)
            t[it - o->warmup] = ms * 1e-3;
    }
    r->hbm_bw = 2.0 * (double)bytes / ap_profile_median(t, o->iters);
    fprintf(stderr, "[hbm] copy %zu MiB: %.0f GB/s (read + write)\n", bytes >> 20,
            r->hbm_bw / 1e9);
    st = AP_OK;
fail:
    cudaFree(src);
    cudaFree(dst);
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    free(t);
    return st;
}
