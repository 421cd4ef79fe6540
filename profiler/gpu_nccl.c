/* gpu_nccl.c -- NCCL collectives on the GPUs of one node, driven from one
 * process: a communicator per group (ncclCommInitAll on the first n devices),
 * every device's call inside one ncclGroupStart/End, CUDA events around each
 * iteration on every device, and the slowest device's time as the
 * iteration's time, as nccl-tests reports it. */
#include <stdio.h>
#include <stdlib.h>

#include "profiler/gpu.h"

#define ELEM sizeof(float)

static ncclResult_t alltoall(const ap_profile_coll_shape *s, const float *send,
                             float *recv, int nranks, ncclComm_t comm,
                             cudaStream_t stream)
{
    for (int p = 0; p < nranks; p++) {
        size_t off = (size_t)p * s->peer_count;
        ncclResult_t e = ncclSend(send + off, s->peer_count, ncclFloat, p, comm, stream);
        if (e == ncclSuccess)
            e = ncclRecv(recv + off, s->peer_count, ncclFloat, p, comm, stream);
        if (e != ncclSuccess)
            return e;
    }
    return ncclSuccess;
}

ncclResult_t ap_prof_launch(ap_coll op, const ap_profile_coll_shape *s,
                            const float *send, float *recv, int rank,
                            int nranks, ncclComm_t comm, cudaStream_t stream)
{
    ncclResult_t e;
    switch (op) {
    case AP_COLL_ALLREDUCE:
        return ncclAllReduce(send, recv, s->send_count, ncclFloat, ncclSum, comm, stream);
    case AP_COLL_ALLGATHER:
        return ncclAllGather(send, recv, s->send_count, ncclFloat, comm, stream);
    case AP_COLL_REDUCESCATTER:
        return ncclReduceScatter(send, recv, s->recv_count, ncclFloat, ncclSum, comm, stream);
    case AP_COLL_ALLTOALL:
        return alltoall(s, send, recv, nranks, comm, stream);
    case AP_COLL_SENDRECV:
        e = ncclSend(send, s->send_count, ncclFloat, (rank + 1) % nranks, comm, stream);
        if (e == ncclSuccess)
            e = ncclRecv(recv, s->recv_count, ncclFloat, (rank + nranks - 1) % nranks,
                         comm, stream);
        return e;
    default:
        return ncclInvalidArgument;
    }
}

static int grow(void **p, int n, size_t elem, char *err)
{
    /* Tables grow by doubling; n is the count before the append. */
    if (n & (n - 1))
        return AP_OK;
    void *q = realloc(*p, (size_t)(n ? 2 * n : 1) * elem);
    if (!q) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        return AP_EINTERNAL;
    }
    *p = q;
    return AP_OK;
}

int ap_prof_add_coll(ap_profile_result *r, ap_coll_sample s, char *err)
{
    if (grow((void **)&r->coll, r->ncoll, sizeof s, err))
        return AP_EINTERNAL;
    r->coll[r->ncoll++] = s;
    return AP_OK;
}

int ap_prof_add_gemm(ap_profile_result *r, ap_gemm_sample s, char *err)
{
    if (grow((void **)&r->gemm, r->ngemm, sizeof s, err))
        return AP_EINTERNAL;
    r->gemm[r->ngemm++] = s;
    return AP_OK;
}

void ap_prof_report_coll(int i, int total, const ap_coll_sample *s)
{
    char pos[32];
    if (total > 0)
        snprintf(pos, sizeof pos, "%d/%d", i, total);
    else
        snprintf(pos, sizeof pos, "%d", i);
    fprintf(stderr, "[coll %s] %s ranks=%d nodes=%d bytes=%.0f %.1f us busbw %.2f GB/s\n",
            pos, ap_coll_name(s->op), s->ranks, s->nodes, s->bytes,
            s->seconds * 1e6, ap_profile_busbw(s->op, s->ranks, s->bytes, s->seconds) / 1e9);
}

typedef struct {
    int n;
    ncclComm_t *comm;
    cudaStream_t *stream;
    cudaEvent_t *start, *stop;
    float **send, **recv;
    double *times;
} group;

static void group_free(group *g)
{
    for (int d = 0; d < g->n; d++) {
        cudaSetDevice(d);
        if (g->comm && g->comm[d])
            ncclCommDestroy(g->comm[d]);
        if (g->send)
            cudaFree(g->send[d]);
        if (g->recv)
            cudaFree(g->recv[d]);
        if (g->start && g->start[d])
            cudaEventDestroy(g->start[d]);
        if (g->stop && g->stop[d])
            cudaEventDestroy(g->stop[d]);
        if (g->stream && g->stream[d])
            cudaStreamDestroy(g->stream[d]);
    }
    free(g->comm);
    free(g->stream);
    free(g->start);
    free(g->stop);
    free(g->send);
    free(g->recv);
    free(g->times);
}

static int group_init(group *g, int n, size_t bytes, int iters, char *err)
{
    int *devs = malloc((size_t)n * sizeof *devs);
    g->n = n;
    g->comm = calloc((size_t)n, sizeof *g->comm);
    g->stream = calloc((size_t)n, sizeof *g->stream);
    g->start = calloc((size_t)n, sizeof *g->start);
    g->stop = calloc((size_t)n, sizeof *g->stop);
    g->send = calloc((size_t)n, sizeof *g->send);
    g->recv = calloc((size_t)n, sizeof *g->recv);
    g->times = calloc((size_t)iters, sizeof *g->times);
    if (!devs || !g->comm || !g->stream || !g->start || !g->stop || !g->send ||
        !g->recv || !g->times) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        free(devs);
        return AP_EINTERNAL;
    }
    for (int d = 0; d < n; d++)
        devs[d] = d;
    AP_NCCL_TRY(ncclCommInitAll(g->comm, n, devs));
    for (int d = 0; d < n; d++) {
        AP_CUDA_TRY(cudaSetDevice(d));
        AP_CUDA_TRY(cudaStreamCreateWithFlags(&g->stream[d], cudaStreamNonBlocking));
        AP_CUDA_TRY(cudaEventCreate(&g->start[d]));
        AP_CUDA_TRY(cudaEventCreate(&g->stop[d]));
        AP_CUDA_TRY(cudaMalloc((void **)&g->send[d], bytes));
        AP_CUDA_TRY(cudaMalloc((void **)&g->recv[d], bytes));
        AP_CUDA_TRY(cudaMemset(g->send[d], 0, bytes));
    }
    free(devs);
    return AP_OK;
fail:
    free(devs);
    return AP_EINTERNAL;
}

/* One iteration on every device; *sec is the slowest device's time. */
static int iterate(group *g, ap_coll op, const ap_profile_coll_shape *s,
                   double *sec, char *err)
{
    for (int d = 0; d < g->n; d++) {
        AP_CUDA_TRY(cudaSetDevice(d));
        AP_CUDA_TRY(cudaEventRecord(g->start[d], g->stream[d]));
    }
    AP_NCCL_TRY(ncclGroupStart());
    for (int d = 0; d < g->n; d++) {
        ncclResult_t e = ap_prof_launch(op, s, g->send[d], g->recv[d], d, g->n,
                                        g->comm[d], g->stream[d]);
        if (e != ncclSuccess) {
            ncclGroupEnd();
            snprintf(err, AP_ERR_LEN, "autopar profile: %s on %d GPUs: %s",
                     ap_coll_name(op), g->n, ncclGetErrorString(e));
            return AP_EINTERNAL;
        }
    }
    AP_NCCL_TRY(ncclGroupEnd());
    *sec = 0;
    for (int d = 0; d < g->n; d++) {
        AP_CUDA_TRY(cudaSetDevice(d));
        AP_CUDA_TRY(cudaEventRecord(g->stop[d], g->stream[d]));
    }
    for (int d = 0; d < g->n; d++) {
        float ms;
        AP_CUDA_TRY(cudaEventSynchronize(g->stop[d]));
        AP_CUDA_TRY(cudaEventElapsedTime(&ms, g->start[d], g->stop[d]));
        if (ms * 1e-3 > *sec)
            *sec = ms * 1e-3;
    }
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

static int measure(group *g, const ap_profile_options *o, ap_coll op,
                   const ap_profile_coll_shape *s, ap_coll_sample *out, char *err)
{
    for (int it = 0; it < o->warmup + o->iters; it++) {
        double sec;
        if (iterate(g, op, s, &sec, err))
            return AP_EINTERNAL;
        if (it >= o->warmup)
            g->times[it - o->warmup] = sec;
    }
    *out = (ap_coll_sample){op, g->n, 1, s->bytes, ap_profile_median(g->times, o->iters)};
    return AP_OK;
}

int ap_prof_coll_local(const ap_profile_options *o, int ndev,
                       ap_profile_result *r, char *err)
{
    double *sizes = NULL;
    int ns = 0, done = 0;
    int st = ap_profile_coll_sizes(o->quick, o->max_bytes, &sizes, &ns, err);
    if (st != AP_OK)
        return st;
    int total = ap_profile_coll_count(ndev, ns);
    for (int n = 2; n <= ndev && st == AP_OK; n *= 2) {
        group g = {0};
        fprintf(stderr, "[coll] creating a communicator on %d GPUs\n", n);
        st = group_init(&g, n, (size_t)o->max_bytes, o->iters, err);
        for (int op = 0; op < AP_NCOLL && st == AP_OK; op++) {
            if (!ap_profile_coll_applies((ap_coll)op, n))
                continue;
            for (int i = 0; i < ns && st == AP_OK; i++) {
                ap_profile_coll_shape sh;
                ap_coll_sample s;
                done++;
                if (!ap_profile_coll_shape_of((ap_coll)op, n, sizes[i], ELEM, &sh))
                    continue;
                st = measure(&g, o, (ap_coll)op, &sh, &s, err);
                if (st == AP_OK)
                    st = ap_prof_add_coll(r, s, err);
                if (st == AP_OK)
                    ap_prof_report_coll(done, total, &s);
            }
        }
        group_free(&g);
    }
    free(sizes);
    return st;
}
