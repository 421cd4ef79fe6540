/* gpu_mpi.c -- `mpirun -np N autopar profile --mpi`: one process per GPU
 * across nodes. Rank 0 measures GEMMs and HBM on its GPU; every group of
 * ap_profile_groups() is split off one world communicator (ncclCommSplit),
 * its members time each collective with CUDA events, the slowest member's
 * time counts (an MPI max-reduction), and rank 0 writes the file. Ranks must
 * be placed node by node (rank = node * gpus_per_node + local rank), which is
 * mpirun's default mapping by slot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "profiler/gpu.h"

typedef struct {
    int rank, size, local, per_node, nodes;
    ncclComm_t world;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    float *send, *recv;
    double *times;
    int agreed; /* every rank knows of the failure: no need to abort */
} ctx;

/* Shares rank 0's status with every rank; the others learn why from rank
 * 0's message. */
static int share_status(ctx *x, int st, char *err)
{
    MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (st != AP_OK) {
        x->agreed = 1;
        if (x->rank != 0)
            snprintf(err, AP_ERR_LEN, "autopar profile: rank %d stopped: rank 0 failed", x->rank);
    }
    return st;
}

static int layout(ctx *x, char *err)
{
    MPI_Comm node;
    MPI_Comm_rank(MPI_COMM_WORLD, &x->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &x->size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, x->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &x->local);
    MPI_Comm_size(node, &x->per_node);
    MPI_Comm_free(&node);
    int lo, hi, bad = x->rank % x->per_node != x->local, anybad;
    MPI_Allreduce(&x->per_node, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&x->per_node, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi || anybad) {
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: --mpi: every node needs the same number of ranks, "
                 "placed node by node (mpirun --map-by slot)");
        return AP_EINPUT;
    }
    x->nodes = x->size / x->per_node;
    return AP_OK;
}

static int setup(ctx *x, const ap_profile_options *o, char *err)
{
    ncclUniqueId id;
    AP_CUDA_TRY(cudaSetDevice(x->local));
    if (x->rank == 0)
        AP_NCCL_TRY(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    AP_NCCL_TRY(ncclCommInitRank(&x->world, x->size, id, x->rank));
    AP_CUDA_TRY(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking));
    AP_CUDA_TRY(cudaEventCreate(&x->start));
    AP_CUDA_TRY(cudaEventCreate(&x->stop));
    AP_CUDA_TRY(cudaMalloc((void **)&x->send, (size_t)o->max_bytes));
    AP_CUDA_TRY(cudaMalloc((void **)&x->recv, (size_t)o->max_bytes));
    AP_CUDA_TRY(cudaMemset(x->send, 0, (size_t)o->max_bytes));
    x->times = calloc((size_t)o->iters, sizeof *x->times);
    if (!x->times) {
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
        return AP_EINTERNAL;
    }
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

/* Times one collective on a member of the group; non-members contribute
 * zeros to the max-reduction that every rank joins. */
static int time_op(ctx *x, const ap_profile_options *o, ncclComm_t sub,
                   int subrank, int nranks, ap_coll op,
                   const ap_profile_coll_shape *s, double *median, char *err)
{
    memset(x->times, 0, (size_t)o->iters * sizeof *x->times);
    for (int it = 0; sub && it < o->warmup + o->iters; it++) {
        AP_CUDA_TRY(cudaEventRecord(x->start, x->stream));
        AP_NCCL_TRY(ncclGroupStart());
        ncclResult_t e = ap_prof_launch(op, s, x->send, x->recv, subrank, nranks,
                                        sub, x->stream);
        AP_NCCL_TRY(ncclGroupEnd());
        AP_NCCL_TRY(e);
        AP_CUDA_TRY(cudaEventRecord(x->stop, x->stream));
        AP_CUDA_TRY(cudaEventSynchronize(x->stop));
        float ms;
        AP_CUDA_TRY(cudaEventElapsedTime(&ms, x->start, x->stop));
        if (it >= o->warmup)
            x->times[it - o->warmup] = ms * 1e-3;
    }
    MPI_Allreduce(MPI_IN_PLACE, x->times, o->iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *median = ap_profile_median(x->times, o->iters);
    return AP_OK;
fail:
    return AP_EINTERNAL;
}

static int measure_group(ctx *x, const ap_profile_options *o, ap_profile_group g,
                         const double *sizes, int ns, ap_profile_result *r, char *err)
{
    int member = ap_profile_group_has(g, x->per_node, x->rank);
    int nranks = ap_profile_group_ranks(g);
    ncclComm_t sub = NULL;
    int subrank = 0, st = AP_OK;
    AP_NCCL_TRY(ncclCommSplit(x->world, member ? 0 : NCCL_SPLIT_NOCOLOR, x->rank, &sub, NULL));
    if (sub)
        AP_NCCL_TRY(ncclCommUserRank(sub, &subrank));
    for (int op = 0; op < AP_NCOLL && st == AP_OK; op++) {
        if (!ap_profile_coll_applies((ap_coll)op, nranks))
            continue;
        for (int i = 0; i < ns && st == AP_OK; i++) {
            ap_profile_coll_shape sh;
            double sec;
            if (!ap_profile_coll_shape_of((ap_coll)op, nranks, sizes[i], sizeof(float), &sh))
                continue;
            st = time_op(x, o, sub, subrank, nranks, (ap_coll)op, &sh, &sec, err);
            ap_coll_sample s = {(ap_coll)op, nranks, g.nodes, sh.bytes, sec};
            if (st == AP_OK && x->rank == 0) {
                st = ap_prof_add_coll(r, s, err);
                ap_prof_report_coll(r->ncoll, 0, &s);
            }
        }
    }
    if (sub)
        ncclCommDestroy(sub);
    return st;
fail:
    return AP_EINTERNAL;
}

static int run(ctx *x, const ap_profile_options *o, ap_profile_result *r, char *err)
{
    int st = layout(x, err);
    if (st != AP_OK) {
        x->agreed = 1; /* every rank checked the layout itself */
        return st;
    }
    if (x->rank == 0) {
        int ndev;
        st = ap_prof_detect(o, r, &ndev, err);
        if (st == AP_OK && ndev < x->per_node) {
            snprintf(err, AP_ERR_LEN, "autopar profile: --mpi: %d ranks per node but %d GPUs",
                     x->per_node, ndev);
            st = AP_EINPUT;
        }
    }
    if ((st = share_status(x, st, err)) != AP_OK)
        return st;
    if ((st = setup(x, o, err)) != AP_OK)
        return st;
    r->nodes = x->nodes;
    r->gpus_per_node = x->per_node;
    ap_prof_stamp(r, o);
    if (x->rank == 0 && (st = ap_prof_hbm(o, r, err)) == AP_OK)
        st = ap_prof_gemm(o, r, err);
    if ((st = share_status(x, st, err)) != AP_OK)
        return st;

    ap_profile_group *groups = NULL;
    double *sizes = NULL;
    int ng = 0, ns = 0;
    st = ap_profile_groups(x->nodes, x->per_node, &groups, &ng, err);
    if (st == AP_OK)
        st = ap_profile_coll_sizes(o->quick, o->max_bytes, &sizes, &ns, err);
    for (int i = 0; i < ng && st == AP_OK; i++)
        st = measure_group(x, o, groups[i], sizes, ns, r, err);
    free(groups);
    free(sizes);
    if (st == AP_OK && x->rank == 0)
        st = ap_prof_write(o, r, err);
    return st;
}

int ap_prof_run_mpi(const ap_profile_options *o, char *err)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init(NULL, NULL);
    ctx x = {0};
    err[0] = '\0';
    ap_profile_result r = {0};
    int st = run(&x, o, &r, err);
    /* A rank that failed alone would leave the others waiting in a
     * collective forever; take the whole job down with it. */
    if (st != AP_OK && !x.agreed && x.size > 1) {
        fprintf(stderr, "%s (rank %d)\n", err, x.rank);
        MPI_Abort(MPI_COMM_WORLD, st);
    }
    if (x.world)
        ncclCommDestroy(x.world);
    cudaFree(x.send);
    cudaFree(x.recv);
    free(x.times);
    ap_profile_result_free(&r);
    MPI_Finalize();
    return st;
}
