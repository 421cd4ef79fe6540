/* cp_comm.c -- context-parallel attention under Transformer Engine's other
 * communication types: K and V all-gathered (AttnFuncWithCPAndKVAllGather)
 * and Ulysses' all-to-alls of Q, K, V and O (AttnFuncWithCPAndQKVOA2A), in
 * transformer_engine/pytorch/attention/dot_product_attention/
 * context_parallel.py. The p2p ring is compute.c's. Layouts are sbhd, as
 * Megatron-Core runs them, so that the .contiguous() calls on slices of the
 * first dimension copy nothing; docs/cost-model.md lists what each copy is. */
#include <math.h>
#include <string.h>

#include "costmodel/costmodel.h"

static const char *const names[] = {"p2p", "allgather", "a2a"};

const char *ap_cp_comm_name(ap_cp_comm t)
{
    return (int)t >= 0 && t <= AP_CP_A2A ? names[t] : "p2p";
}

int ap_cp_comm_parse(const char *name, ap_cp_comm *out)
{
    for (int i = 0; i <= AP_CP_A2A; i++)
        if (!strcmp(name, names[i])) {
            *out = (ap_cp_comm)i;
            return 0;
        }
    return -1;
}

typedef struct {
    const ap_cluster *c;
    ap_dtype dt;
    double sz;       /* bytes per element of dt */
    double bn, bkv;  /* query and KV heads, times the batch */
    double s, d, e;  /* the rank's rows per head, head dims of q/k and v */
    int causal, cp;
    double w;        /* a sliding window shorter than the cp*s rows, else 0 */
} cp_shape;

static cp_shape shape_of(const ap_cluster *c, ap_dtype dt, double bn, double bkv,
                         double s, double d, double e, int causal, int cp)
{
    size_t sz = ap_dtype_size(dt);
    cp_shape a = {c, dt, sz ? (double)sz : 2.0, bn, bkv, s, d, e, causal, cp, 0};
    return a;
}

/* One pass that reads and writes `elems` elements: a copy, an index_select
 * or a contiguous() of a permuted view. */
static double copy_of(const cp_shape *a, double elems)
{
    return ap_cost_memop(a->c, 0, 2 * a->sz * elems);
}

/* out[rows].add_(x): both read, one written. */
static double add_of(const cp_shape *a, double elems)
{
    return ap_cost_memop(a->c, elems, 3 * a->sz * elems);
}

/* The gathered K and V (or their gradients) reordered from rank order to
 * sequence order, one index_select each over all cp*s rows. */
static double ag_reorder(const cp_shape *a)
{
    double rows = a->bkv * a->cp * a->s;
    return copy_of(a, rows * a->d) + copy_of(a, rows * a->e);
}

/* The keys chunk c's s/2 queries see: causally the sequence up to the
 * chunk's end (get_kv_seq_info_after_all_gather with window (-1, 0)),
 * under a window of w keys only the last s/2 + w - 1 of those (its window
 * (w - 1, 0)), else all of it. */
static double ag_keys(const cp_shape *a, int chunk)
{
    double h = a->s / 2, end = (chunk + 1) * h;
    if (!a->causal)
        return a->cp * a->s;
    return a->w > 0 ? fmin(end, h + a->w - 1) : end;
}

/* Chunk c's kernel: the causal rectangle of its queries against the keys
 * before them, or under a window its band. */
static double ag_kernel(const cp_shape *a, int chunk, int backward)
{
    double h = a->s / 2;
    if (a->w > 0 && a->causal)
        return ap_cost_attention_band(a->c, a->dt, a->bn, chunk * h, h, a->w, a->d, a->e,
                                      backward);
    return ap_cost_attention_rect(a->c, a->dt, a->bn, h, ag_keys(a, chunk), a->d, a->e,
                                  a->causal, backward);
}

/* Rank r's forward: the reorder, then per local chunk its kernel and the
 * copy of its output into out. */
static double ag_forward(const cp_shape *a, int r)
{
    const int chunks[2] = {r, 2 * a->cp - 1 - r};
    double h = a->s / 2, t = ag_reorder(a);
    for (int i = 0; i < 2; i++)
        t += ag_kernel(a, chunks[i], 0) + copy_of(a, a->bn * h * a->e);
    return t;
}

/* Rank r's backward: K and V reordered again, dK and dV zeroed over all
 * rows (torch.zeros), per chunk its kernel, the dq copy and the adds of
 * dK and dV into the rows it saw, then the sums reordered back. */
static double ag_backward(const cp_shape *a, int r)
{
    const int chunks[2] = {r, 2 * a->cp - 1 - r};
    double h = a->s / 2, rows = a->bkv * a->cp * a->s;
    double t = 2 * ag_reorder(a) + ap_cost_memop(a->c, 0, a->sz * rows * a->d) +
               ap_cost_memop(a->c, 0, a->sz * rows * a->e);
    for (int i = 0; i < 2; i++) {
        double keys = ag_keys(a, chunks[i]);
        t += ag_kernel(a, chunks[i], 1) + copy_of(a, a->bn * h * a->d) +
             add_of(a, a->bkv * keys * a->d) +
             add_of(a, a->bkv * keys * a->e);
    }
    return t;
}

/* Every rank computes the same FLOPs (chunks r and 2cp-1-r see 2cp+1 half
 * chunks of keys between them), but the kernels' lengths differ, so their
 * floors and length factors do: the slowest rank, as the collectives that
 * follow wait for it. */
static double ag_compute(const cp_shape *a, int backward)
{
    double worst = 0;
    for (int r = 0; r < a->cp; r++)
        worst = fmax(worst, backward ? ag_backward(a, r) : ag_forward(a, r));
    return worst;
}

/* all_to_all_single of `elems` local elements, and the copies around it:
 * before attention the layout change [s, b, cp, h/cp, d] -> [cp, s, b, ...]
 * and the chunk reorder (index_select) after; after attention the reorder
 * first and the layout change back. Either way two copies of the tensor. */
typedef struct {
    double pre, comm, post;
} a2a_leg;

static a2a_leg a2a_of(const cp_shape *a, double elems, int nodes)
{
    a2a_leg l = {copy_of(a, elems), 0, copy_of(a, elems)};
    l.comm = ap_cost_collective(a->c, AP_COLL_ALLTOALL, a->cp, nodes, a->sz * elems);
    return l;
}

/* flash_attn_a2a_communicate over n tensors: tensor i's copy runs on the
 * compute stream after its all-to-all is queued for tensor i-1; each
 * all-to-all runs on NCCL's stream once its copy is done and the previous
 * one is; each reorder on the side stream once its all-to-all is done;
 * the compute stream then waits for the side stream. with_comm 0 gives
 * the copies' own chain. */
static double a2a_chain(const a2a_leg *l, int n, int with_comm)
{
    double main = 0, nccl = 0, side = 0;
    for (int i = 0; i < n; i++) {
        main += l[i].pre;
        nccl = fmax(nccl, main) + (with_comm ? l[i].comm : 0);
        side = fmax(side, nccl) + l[i].post;
    }
    return fmax(main, side);
}

/* The tensors of each call, in TE's order: forward q, k, v before the
 * kernel and out after; backward out, dout before and dq, dk, dv after.
 * Returns how many, *split of them before the kernel. */
static int a2a_legs(const cp_shape *a, int nodes, int backward, a2a_leg *l, int *split)
{
    double q = a->bn * a->s * a->d, k = a->bkv * a->s * a->d;
    double v = a->bkv * a->s * a->e, o = a->bn * a->s * a->e;
    const double fwd[] = {q, k, v, o}, bwd[] = {o, o, q, k, v};
    const double *x = backward ? bwd : fwd;
    int n = backward ? 5 : 4;
    *split = backward ? 2 : 3;
    for (int i = 0; i < n; i++)
        l[i] = a2a_of(a, x[i], nodes);
    return n;
}

/* After the all-to-all each rank holds the whole sequence of its heads,
 * so a sliding window of w keys is the same kernel as without context
 * parallelism (ap_cost_attention_window), over bn/cp heads. */
static double a2a_compute(const cp_shape *a, int backward)
{
    a2a_leg l[5];
    int split, n = a2a_legs(a, 1, backward, l, &split);
    double bn = a->bn / a->cp, t = a->cp * a->s;
    double kernel =
        a->w > 0 ? ap_cost_attention_window(a->c, a->dt, bn, t, a->w, a->d, a->e, backward)
        : backward ? ap_cost_attention_backward(a->c, a->dt, bn, t, t, a->d, a->e, a->causal)
                   : ap_cost_attention(a->c, a->dt, bn, t, t, a->d, a->e, a->causal);
    for (int i = 0; i < n; i++)
        kernel += l[i].pre + l[i].post;
    return kernel;
}

/* The copies are memory-bound kernels sharing HBM, priced one after the
 * other as compute; what the all-to-alls add is the chain's time beyond
 * the copies' own chain. */
static double a2a_comm(const cp_shape *a, int nodes, int backward)
{
    a2a_leg l[5];
    int split, n = a2a_legs(a, nodes, backward, l, &split);
    double before = a2a_chain(l, split, 1) - a2a_chain(l, split, 0);
    double after = a2a_chain(l + split, n - split, 1) - a2a_chain(l + split, n - split, 0);
    return fmax(0, before) + fmax(0, after);
}

/* Forward gathers K and V; backward gathers them again and
 * reduce-scatters dK and dV, every collective its own. */
static double ag_comm(const cp_shape *a, int nodes, int backward)
{
    double rows = a->bkv * a->cp * a->s;
    double k = a->sz * rows * a->d, v = a->sz * rows * a->e;
    double t = ap_cost_collective(a->c, AP_COLL_ALLGATHER, a->cp, nodes, k) +
               ap_cost_collective(a->c, AP_COLL_ALLGATHER, a->cp, nodes, v);
    if (backward)
        t += ap_cost_collective(a->c, AP_COLL_REDUCESCATTER, a->cp, nodes, k) +
             ap_cost_collective(a->c, AP_COLL_REDUCESCATTER, a->cp, nodes, v);
    return t;
}

double ap_cost_attention_cp_comm(const ap_cluster *c, ap_cp_comm type, ap_dtype dt,
                                 double bn, double bkv, double s, double d, double e,
                                 int causal, double window, int cp, int backward)
{
    if (type == AP_CP_P2P || cp <= 1)
        return ap_cost_attention_cp(c, dt, bn, bkv, s, d, e, causal, cp, backward);
    if (!(bn > 0 && bkv > 0 && s > 0 && d > 0 && e > 0))
        return 0;
    cp_shape a = shape_of(c, dt, bn, bkv, s, d, e, causal, cp);
    a.w = window > 0 && window < cp * s ? window : 0;
    return type == AP_CP_ALLGATHER ? ag_compute(&a, backward) : a2a_compute(&a, backward);
}

double ap_cost_cp_comm(const ap_cluster *c, ap_cp_comm type, ap_dtype dt, double bn,
                       double bkv, double s, double d, double e, int causal, int cp,
                       int nodes, int backward)
{
    if (type == AP_CP_P2P)
        return ap_cost_cp_ring(c, dt, bn, bkv, s, d, e, causal, cp, nodes, backward);
    if (!(bn > 0 && bkv > 0 && s > 0 && d > 0 && e > 0) || cp <= 1)
        return 0;
    cp_shape a = shape_of(c, dt, bn, bkv, s, d, e, causal, cp);
    return type == AP_CP_ALLGATHER ? ag_comm(&a, nodes, backward) : a2a_comm(&a, nodes, backward);
}
