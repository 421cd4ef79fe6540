/* strategy.c -- sharding strategies of one op on a 2-D mesh, and their price.
 *
 * Everything follows from labels. An axis that splits a label the op's output
 * lacks leaves a partial sum (reduced in forward); an axis that splits a label
 * an input lacks leaves that input's gradient partial (reduced in backward,
 * on the edge, since the cheapest reduction depends on the producer's
 * layout); for a parameter, that partial gradient is the data-parallel
 * gradient synchronisation, paid once per step. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/planner.h"

int ap_mesh_init(ap_mesh *m, int d0, int d1, int first, int gpus_per_node)
{
    if (d0 < 1 || d1 < 1 || gpus_per_node < 1)
        return AP_EINPUT;
    m->d[0] = d0;
    m->d[1] = d1;
    m->first = first;
    /* Axis 1 groups are d1 consecutive ranks; axis 0 groups take every d1-th. */
    int node_first = first / gpus_per_node;
    m->nodes[1] = (first + d1 - 1) / gpus_per_node - node_first + 1;
    int last0 = first + (d0 - 1) * d1;
    int span = 1, prev = node_first;
    for (int r = first + d1; r <= last0; r += d1) {
        int node = r / gpus_per_node;
        if (node != prev)
            span++;
        prev = node;
    }
    m->nodes[0] = span;
    m->nodes[2] = (first + d0 * d1 - 1) / gpus_per_node - node_first + 1;
    m->replicas = 1;
    m->experts[0] = m->experts[1] = m->experts[2] = 0;
    m->sync_nodes[0] = 1;
    for (int k = 0; k < 3; k++)
        m->sync_nodes[k + 1] = m->nodes[k];
    return AP_OK;
}

/* Nodes spanned by the group of ranks that share coordinate (i0, i1) on the
 * axes outside mask, over every replica; its ranks ascend, so counting the
 * changes of node counts the nodes. */
static int sync_group_nodes(const ap_mesh *m, int mask, int i0, int i1, int G)
{
    int n0 = mask & 1 ? m->d[0] : 1, n1 = mask & 2 ? m->d[1] : 1;
    int nodes = 0, prev = -1;
    for (int j = 0; j < m->replicas; j++)
        for (int a = 0; a < n0; a++)
            for (int b = 0; b < n1; b++) {
                long r = m->first + (long)j * m->d[0] * m->d[1] +
                         (long)(mask & 1 ? a : i0) * m->d[1] + (mask & 2 ? b : i1);
                int node = (int)(r / G);
                nodes += node != prev;
                prev = node;
            }
    return nodes;
}

int ap_mesh_init_replicated(ap_mesh *m, int replicas, int d0, int d1, int first,
                            int gpus_per_node)
{
    if (replicas < 1 || ap_mesh_init(m, d0, d1, first, gpus_per_node))
        return AP_EINPUT;
    if (replicas == 1)
        return AP_OK;
    /* Replicas are alike when they tile nodes evenly; otherwise the one
     * spanning the most nodes sets the pace of every collective. */
    for (int j = 1; j < replicas; j++) {
        ap_mesh r;
        ap_mesh_init(&r, d0, d1, first + j * d0 * d1, gpus_per_node);
        for (int k = 0; k < 3; k++)
            if (r.nodes[k] > m->nodes[k])
                m->nodes[k] = r.nodes[k];
    }
    m->replicas = replicas;
    for (int mask = 0; mask < 4; mask++) {
        m->sync_nodes[mask] = 0;
        for (int i0 = 0; i0 < (mask & 1 ? 1 : d0); i0++)
            for (int i1 = 0; i1 < (mask & 2 ? 1 : d1); i1++) {
                int n = sync_group_nodes(m, mask, i0, i1, gpus_per_node);
                if (n > m->sync_nodes[mask])
                    m->sync_nodes[mask] = n;
            }
    }
    return AP_OK;
}

int ap_mesh_fold(ap_mesh *m, int ep, int etp, int edp)
{
    long ranks = (long)m->d[0] * m->d[1] * (m->replicas > 1 ? m->replicas : 1);
    if (ep < 1 || etp < 1 || edp < 1 || (long)ep * etp * edp != ranks)
        return AP_EINPUT;
    m->experts[0] = ep;
    m->experts[1] = etp;
    m->experts[2] = edp;
    return AP_OK;
}

void ap_mesh_expert_mesh(const ap_mesh *m, int gpus_per_node, ap_mesh *out)
{
    if (!m->experts[0] || ap_mesh_init_replicated(out, m->experts[2], m->experts[0],
                                                  m->experts[1], m->first, gpus_per_node))
        *out = *m;
}

double ap_capacity_scale(const ap_run_settings *r)
{
    if (!(r->capacity_factor > 0))
        return 1;
    return r->pad_capacity ? r->capacity_factor : fmin(r->capacity_factor, 1);
}

double ap_label_size(const ap_price_ctx *x, char label)
{
    const ap_dim *d = ap_graph_dim(x->g, label);
    if (!d)
        return 1;
    if (d->kind == AP_DIM_BATCH || d->kind == AP_DIM_CAPACITY) {
        char b = ap_graph_label_of(x->g, AP_DIM_BATCH);
        double b0 = b ? (double)ap_graph_dim(x->g, b)->size : 1;
        double cap = d->kind == AP_DIM_CAPACITY ? ap_capacity_scale(&x->run) : 1;
        return (double)d->size * x->batch / b0 * cap;
    }
    return (double)d->size;
}

static int has_label(const char *labels, char l)
{
    return l && strchr(labels, l) != NULL;
}

/* Ways a label is split under a strategy. */
static int split_of(const ap_price_ctx *x, const ap_strategy *s, char l)
{
    int k = 1;
    for (int a = 0; a < 2; a++)
        if (s->axis[a] == l)
            k *= x->mesh->d[a];
    return k;
}

/* Ways a tensor with these labels is split (product over its labels). */
static double tensor_split(const ap_price_ctx *x, const ap_strategy *s,
                           const char *labels)
{
    double k = 1;
    for (int a = 0; a < 2; a++)
        if (s->axis[a] && has_label(labels, s->axis[a]))
            k *= x->mesh->d[a];
    return k;
}

/* The label of tensor t that an op's split label l splits: l itself, or for
 * attention's K and V the KV-head label, which moves with the query heads
 * (kv_heads_divide keeps it whole), as Megatron's head-parallel attention
 * keeps each rank's K and V heads local. 0 when t has neither. */
static char label_in(const ap_price_ctx *x, const ap_op *op, int t, char l)
{
    const char *T = x->g->tensors[t].shape;
    if (!l)
        return 0;
    if (has_label(T, l))
        return l;
    if (op->kind == AP_OP_ATTENTION && op->ninputs >= 3 &&
        (t == op->inputs[1] || t == op->inputs[2]) &&
        l == x->g->tensors[op->inputs[0]].shape[2])
        return T[2];
    return 0;
}

/* Ways op's strategy splits its operand t. */
static double operand_split(const ap_price_ctx *x, const ap_op *op,
                            const ap_strategy *s, int t)
{
    double k = 1;
    for (int a = 0; a < 2; a++)
        if (label_in(x, op, t, s->axis[a]))
            k *= x->mesh->d[a];
    return k;
}

static double tensor_bytes(const ap_price_ctx *x, int t)
{
    const ap_tensor *tt = &x->g->tensors[t];
    double n = 1;
    for (int i = 0; i < tt->rank; i++)
        n *= ap_label_size(x, tt->shape[i]);
    return n * (double)ap_dtype_size(tt->dtype);
}

double ap_operand_bytes(const ap_price_ctx *x, int op, const ap_strategy *s, int t)
{
    return tensor_bytes(x, t) / operand_split(x, &x->g->ops[op], s, t);
}

static const char *shape_of(const ap_price_ctx *x, int t)
{
    return x->g->tensors[t].shape;
}

/* Labels an axis of this op kind may split. */
static void shardable(const ap_price_ctx *x, const ap_op *op, char *out)
{
    const ap_graph *g = x->g;
    const char *o = op->noutputs ? shape_of(x, op->outputs[0]) : "";
    size_t n = 0;
    switch (op->kind) {
    case AP_OP_MATMUL:
        /* A split head dimension only forces a gather before attention. */
        for (const char *p = op->iter; *p; p++) {
            const ap_dim *d = ap_graph_dim(g, *p);
            if (!d || d->kind != AP_DIM_HEAD_DIM)
                out[n++] = *p;
        }
        break;
    case AP_OP_ATTENTION: {
        const char *q = shape_of(x, op->inputs[0]);
        out[n++] = q[0]; /* batch */
        /* Context parallel; under a sliding window shorter than the
         * sequence only with the all-gather or the all-to-all (Transformer
         * Engine's ring refuses the window), and never under an attention
         * chunk, which no context parallelism of TE runs. */
        double s = ap_label_size(x, q[1]);
        int window = op->window && (double)op->window < s;
        if ((!window || x->run.cp_comm != AP_CP_P2P) && (!op->chunk || (double)op->chunk >= s))
            out[n++] = q[1];
        out[n++] = q[2]; /* heads */
        break;
    }
    case AP_OP_UNARY:
        if (op->sub != AP_UNARY_ROTARY) {
            strcpy(out, o);
            return;
        }
        /* Rotary pairs element i of a head with i + r/2 (rotate_half), so
         * like a norm's or softmax's reduced label the head dim stays whole;
         * the table's own label is never split either. */
        /* fall through */
    case AP_OP_NORM:
    case AP_OP_SOFTMAX: {
        /* The last label stays whole. A norm spanning more labels (OLMo 2's
         * query norm over all heads) may split the others; its row
         * statistics are then all-reduced (price_norm_stats). */
        size_t r = strlen(o);
        for (size_t i = 0; i + 1 < r; i++)
            out[n++] = o[i];
        break;
    }
    case AP_OP_EMBEDDING: {
        const char *tab = shape_of(x, op->inputs[1]);
        out[n++] = o[0];
        out[n++] = o[1];
        out[n++] = tab[0]; /* vocabulary: partial sums */
        out[n++] = tab[1];
        break;
    }
    case AP_OP_LOSS: {
        const char *lg = shape_of(x, op->inputs[0]);
        for (size_t i = 0; lg[i]; i++)
            out[n++] = lg[i];
        break;
    }
    case AP_OP_ROUTER:
        out[n++] = o[0];
        out[n++] = o[1];
        break;
    case AP_OP_DISPATCH:
    case AP_OP_COMBINE: {
        const char *tok = op->kind == AP_OP_DISPATCH ? shape_of(x, op->inputs[0]) : o;
        char e = ap_graph_label_of(g, AP_DIM_EXPERTS);
        out[n++] = tok[0];
        out[n++] = tok[1];
        out[n++] = tok[2];
        if (e)
            out[n++] = e;
        break;
    }
    case AP_OP_RESHAPE: {
        const char *in = shape_of(x, op->inputs[0]);
        for (size_t i = 0; in[i]; i++) {
            int everywhere = 1;
            for (int k = 0; k < op->noutputs; k++)
                everywhere &= has_label(shape_of(x, op->outputs[k]), in[i]);
            if (everywhere)
                out[n++] = in[i];
        }
        break;
    }
    default:
        strcpy(out, o);
        return;
    }
    out[n] = 0;
}

static int divides(const ap_price_ctx *x, const ap_strategy *s, char l)
{
    if (!l)
        return 1;
    double size = ap_label_size(x, l);
    int k = split_of(x, s, l);
    double q = size / k;
    return q >= 1 && q == floor(q);
}

/* Attention splits its KV-head label along with its heads. */
static int kv_heads_divide(const ap_price_ctx *x, const ap_op *op,
                           const ap_strategy *s)
{
    if (op->kind != AP_OP_ATTENTION)
        return 1;
    char n = shape_of(x, op->inputs[0])[2];
    char g = shape_of(x, op->inputs[1])[2];
    if (n == g)
        return 1;
    double kv = ap_label_size(x, g);
    int k = split_of(x, s, n);
    return fmod(kv, k) == 0;
}

static void add_rs_variants(const ap_price_ctx *x, const ap_op *op,
                            ap_strategy *out, int *count, int max)
{
    /* A partial sum may be reduce-scattered onto an output label that the
     * other axis does not already split: sequence parallelism and its kin. */
    const ap_strategy base = out[*count - 1];
    const char *o = shape_of(x, op->outputs[0]);
    for (int a = 0; a < 2; a++) {
        if (!base.axis[a] || !has_label(op->contracted, base.axis[a]) ||
            x->mesh->d[a] == 1)
            continue;
        for (size_t i = 0; o[i]; i++) {
            ap_strategy s = base;
            /* Sequence parallelism: the partial sum lands split by tokens. */
            const ap_dim *d = ap_graph_dim(x->g, o[i]);
            if (o[i] == base.axis[1 - a] || !d || d->kind != AP_DIM_SEQ)
                continue;
            s.rs[a] = o[i];
            s.axis[a] = base.axis[a];
            /* The reduce-scattered label must divide like a split one. */
            double size = ap_label_size(x, o[i]);
            double k = x->mesh->d[a] * (base.axis[1 - a] == o[i] ? x->mesh->d[1 - a] : 1);
            if (fmod(size, k) != 0 || *count >= max)
                continue;
            out[(*count)++] = s;
        }
    }
}

int ap_strategies(const ap_price_ctx *x, int opi, ap_strategy *out, int max)
{
    const ap_op *op = &x->g->ops[opi];
    char labels[AP_MAX_DIMS + 2];
    shardable(x, op, labels);
    size_t nl = strlen(labels);
    int count = 0;
    for (size_t i = 0; i <= nl; i++) {
        for (size_t j = 0; j <= nl; j++) {
            ap_strategy s = {{i < nl ? labels[i] : 0, j < nl ? labels[j] : 0}, {0, 0}};
            /* Splitting one label over both axes pays off for the batch
             * (data parallel over the whole mesh), not for model labels. */
            if (s.axis[0] && s.axis[0] == s.axis[1] &&
                ap_graph_dim(x->g, s.axis[0])->kind != AP_DIM_BATCH)
                continue;
            /* An axis of size 1 splits nothing: keep one canonical form. */
            if (x->mesh->d[0] == 1 && s.axis[0])
                continue;
            if (x->mesh->d[1] == 1 && s.axis[1])
                continue;
            if (!divides(x, &s, s.axis[0]) || !divides(x, &s, s.axis[1]) ||
                !kv_heads_divide(x, op, &s))
                continue;
            if (x->max_local_experts > 0 &&
                ap_local_experts(x, opi, &s) > x->max_local_experts)
                continue;
            if (count >= max)
                return count;
            out[count++] = s;
            if (op->kind == AP_OP_MATMUL && op->noutputs)
                add_rs_variants(x, op, out, &count, max);
        }
    }
    return count;
}

void ap_strategy_format(const ap_strategy *s, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int a = 0; a < 2 && n < len; a++) {
        if (!s->axis[a])
            continue;
        n += (size_t)snprintf(buf + n, len - n, "%s%c@%d", n ? " " : "", s->axis[a], a);
        if (s->rs[a] && n < len)
            n += (size_t)snprintf(buf + n, len - n, "->rs:%c", s->rs[a]);
    }
    if (!n)
        snprintf(buf, len, "replicated");
}

/* Collective over the mesh axes in `mask` (1 axis 0, 2 axis 1, 3 both). */
static double coll(const ap_price_ctx *x, ap_coll op, int mask, double bytes)
{
    int ranks = (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1);
    if (ranks <= 1 || bytes <= 0)
        return 0;
    return ap_cost_collective(x->c, op, ranks, x->mesh->nodes[mask - 1], bytes);
}

static int replicas_of(const ap_price_ctx *x)
{
    return x->mesh->replicas > 1 ? x->mesh->replicas : 1;
}

/* A data-parallel group: the mesh axes in `mask` (0 for none) times the
 * mesh's replicas. Returns its ranks and puts in *nodes the nodes such a
 * group spans. */
static int sync_group(const ap_price_ctx *x, int mask, int *nodes)
{
    int r = replicas_of(x);
    if (r == 1)
        *nodes = mask ? x->mesh->nodes[mask - 1] : 1;
    else
        *nodes = x->mesh->sync_nodes[mask];
    return r * (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1);
}

/* Collective over a data-parallel group (sync_group). */
static double sync_coll(const ap_price_ctx *x, ap_coll op, int mask, double bytes)
{
    int nodes, ranks = sync_group(x, mask, &nodes);
    return ap_cost_collective(x->c, op, ranks, nodes, bytes);
}

/* Megatron-Core's DDP reduces gradients, and its distributed optimizer
 * gathers parameters, in buckets of max(40M, 1M x dp) parameters (or
 * --ddp-bucket-size's) when the reduction overlaps the backward (DistributedDataParallelConfig's
 * bucket_size; larger DP groups get larger buckets so that the collectives
 * stay bandwidth-bound). Without overlap it sets no bucket size, and each
 * gradient buffer is reduced as one: priced as a bucket of the whole model,
 * so the stage pays at most that one collective's latency. */
#define GRAD_BUCKET_MIN 40e6
#define GRAD_BUCKET_PER_RANK 1e6

static double grad_bucket(const ap_price_ctx *x, int ranks)
{
    if (x->serial_grad)
        return fmax(x->g->total_params, GRAD_BUCKET_MIN);
    if (x->run.ddp_bucket > 0)
        return x->run.ddp_bucket;
    return fmax(GRAD_BUCKET_MIN, GRAD_BUCKET_PER_RANK * ranks);
}

/* The once-per-step reduction (or gather) of `elems` elements of
 * `elem_bytes` each over the data-parallel group, in the group's buckets:
 * a tensor pays its share of a bucket's latency, not a collective of its
 * own. */
static double step_sync(const ap_price_ctx *x, ap_coll op, int mask, double elems,
                        double elem_bytes)
{
    int nodes, ranks = sync_group(x, mask, &nodes);
    return ap_cost_collective_bucketed(x->c, op, ranks, nodes, elems * elem_bytes,
                                       grad_bucket(x, ranks) * elem_bytes);
}

/* The all-gather of the updated parameters after the optimizer step
 * (ZeRO-1 and 2), part of grad_sync, kept apart in param_sync because the
 * backward cannot hide it: it runs after the step or in the next forward.
 * param_buckets counts the buckets it fills, for the forward pre-hooks'
 * overlap (evaluate.c). */
static void param_gather(const ap_price_ctx *x, int mask, double elems,
                         double pwidth, ap_op_cost *c)
{
    int nodes, ranks = sync_group(x, mask, &nodes);
    double t = step_sync(x, AP_COLL_ALLGATHER, mask, elems, pwidth);
    c->grad_sync += t;
    c->param_sync += t;
    c->param_buckets += elems / grad_bucket(x, ranks);
}

/* The axes (mask) that split label l under s. */
static int axes_of(const ap_strategy *s, char l)
{
    return (s->axis[0] == l && l ? 1 : 0) | (s->axis[1] == l && l ? 2 : 0);
}

int ap_fp8_linear(const ap_graph *g, int opi)
{
    const ap_op *op = &g->ops[opi];
    if (op->kind != AP_OP_MATMUL || op->layer < 0 || op->ninputs < 2 ||
        op->noutputs < 1 || op->keep_bf16)
        return 0;
    /* Activation times weight: QKV, attention output, MLP and expert
     * projections. A product of two activations is attention's own. */
    if (g->tensors[op->inputs[0]].role == AP_TENSOR_PARAM ||
        g->tensors[op->inputs[1]].role != AP_TENSOR_PARAM)
        return 0;
    /* Megatron's fp8 context wraps the transformer layers only, so the
     * LM head stays in bf16 even in a graph whose layers were formed by
     * clustering and may hold it. */
    char v = ap_graph_label_of(g, AP_DIM_VOCAB);
    return !has_label(g->tensors[op->outputs[0]].shape, v);
}

/* Whether the cluster's GPU is a Hopper, by the names NVIDIA's driver and
 * the presets give it (a cluster file records no compute capability). */
static int hopper_gpu(const ap_cluster *c)
{
    static const char *const names[] = {"H100", "H200", "H800", "H20", "GH200"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strstr(c->gpu_name, names[i]))
            return 1;
    return 0;
}

int ap_fp8_check(const ap_cluster *c, ap_fp8_recipe r, char *err)
{
    const char *gpu = c->gpu_name[0] ? c->gpu_name : "GPU of unknown name";
    if (!(c->peak_flops[AP_FP8] > 0)) {
        snprintf(err, AP_ERR_LEN, "fp8: %s (%s) has no FP8 tensor cores (its fp8 peak "
                 "is 0); FP8 training needs Hopper or later, e.g. h100-sxm, h200, b200",
                 c->name, gpu);
        return AP_EINPUT;
    }
    /* Transformer Engine's MXFP8BlockScaling asserts compute capability
     * 10.0 (check_mxfp8_support): Hopper's tensor cores take no block
     * scales, so its block-scaled recipe is blockwise. */
    if (r == AP_FP8_MXFP8 && hopper_gpu(c)) {
        snprintf(err, AP_ERR_LEN, "fp8_recipe=mxfp8: %s (%s) is a Hopper GPU, and "
                 "Transformer Engine runs MXFP8 on Blackwell (compute capability 10.0) "
                 "or later only; Hopper's block-scaled recipe is blockwise", c->name, gpu);
        return AP_EINPUT;
    }
    return AP_OK;
}

static int runs_fp8(const ap_price_ctx *x, const ap_op *op)
{
    return x->run.fp8 && ap_fp8_linear(x->g, (int)(op - x->g->ops));
}

/* GEMM dimensions of a matmul shard: m from A only, n from B only, k
 * contracted, batch shared by all three. */
typedef struct {
    double batch, m, n, k;
} gemm_dims;

static gemm_dims dims_of(const ap_price_ctx *x, const ap_op *op,
                         const ap_strategy *s)
{
    const char *A = shape_of(x, op->inputs[0]);
    const char *B = shape_of(x, op->inputs[1]);
    const char *O = shape_of(x, op->outputs[0]);
    gemm_dims d = {1, 1, 1, 1};
    for (const char *p = op->iter; *p; p++) {
        double size = ap_label_size(x, *p) / split_of(x, s, *p);
        int inA = has_label(A, *p), inB = has_label(B, *p), inO = has_label(O, *p);
        if (!inO)
            d.k *= size;
        else if (inA && inB)
            d.batch *= size;
        else if (inA)
            d.m *= size;
        else
            d.n *= size;
    }
    return d;
}

/* A matmul batched over the experts: every expert's weight times its own
 * tokens, which Megatron-Core runs as a grouped GEMM. */
static int expert_gemm(const ap_price_ctx *x, const ap_op *op)
{
    char e = ap_graph_label_of(x->g, AP_DIM_EXPERTS);
    return e && op->ninputs >= 2 && has_label(shape_of(x, op->inputs[0]), e) &&
           has_label(shape_of(x, op->inputs[1]), e);
}

/* Megatron-LM's main_grad buffer is fp32 under grad_reduce_in_fp32
 * (DistributedDataParallel's grad_dtype), and every reduction of it moves
 * fp32; else bf16. */
double ap_run_grad_bytes(const ap_run_settings *r)
{
    return r->grad_fp32 ? 4 : 2;
}

static double grad_width(const ap_price_ctx *x)
{
    return ap_run_grad_bytes(&x->run);
}

static ap_dtype matmul_dtype(const ap_price_ctx *x, const ap_op *op)
{
    return runs_fp8(x, op) ? AP_FP8 : x->g->tensors[op->outputs[0]].dtype;
}

/* One GEMM of a matmul op, batch x m x n x k, `out` bytes per output
 * element: the experts' as a grouped GEMM, or under SequentialMLP one
 * expert's after another, each alone on the GPU; any other batched. */
static double op_gemm(const ap_price_ctx *x, const ap_op *op, gemm_dims d,
                      double out)
{
    ap_dtype dt = matmul_dtype(x, op);
    if (expert_gemm(x, op) && x->run.sequential_experts)
        return d.batch * ap_cost_bgemm_out(x->c, dt, 1, d.m, d.n, d.k, out);
    if (expert_gemm(x, op))
        return ap_cost_grouped_gemm_out(x->c, dt, d.batch, d.m, d.n, d.k, out);
    return ap_cost_bgemm_out(x->c, dt, d.batch, d.m, d.n, d.k, out);
}

static double matmul_time(const ap_price_ctx *x, const ap_op *op,
                          const ap_strategy *s)
{
    return op_gemm(x, op, dims_of(x, op, s), ap_gemm_out_bytes(matmul_dtype(x, op)));
}

/* The backward of C = A.B is two GEMMs of their own shapes: dA = dC.B^T
 * (m x k, contracting n) and dB = A^T.dC (k x n, contracting the tokens
 * in m). A weight's gradient accumulates into Megatron's main_grad
 * (gradient accumulation fusion: cuBLAS with beta = 1 reads and writes it
 * in the gradient's width), every micro-batch; without the fusion the GEMM
 * stores it in its own dtype and an elementwise kernel adds it into
 * main_grad (reads both, writes main_grad). */
static double dgrad_of(const ap_price_ctx *x, const ap_op *op, gemm_dims d)
{
    gemm_dims da = {d.batch, d.m, d.k, d.n};
    return op_gemm(x, op, da, ap_gemm_out_bytes(matmul_dtype(x, op)));
}

static double matmul_dgrad_time(const ap_price_ctx *x, const ap_op *op,
                                const ap_strategy *s)
{
    return dgrad_of(x, op, dims_of(x, op, s));
}

static double matmul_backward_time(const ap_price_ctx *x, const ap_op *op,
                                   const ap_strategy *s)
{
    gemm_dims d = dims_of(x, op, s), db = {d.batch, d.k, d.n, d.m};
    int weight = x->g->tensors[op->inputs[1]].role == AP_TENSOR_PARAM;
    double store = ap_gemm_out_bytes(matmul_dtype(x, op));
    double t = dgrad_of(x, op, d);
    if (!weight)
        return t + op_gemm(x, op, db, store);
    if (!x->run.no_grad_fusion)
        return t + op_gemm(x, op, db, 2 * grad_width(x));
    double elems = d.batch * d.k * d.n;
    return t + op_gemm(x, op, db, store) +
           ap_cost_memop(x->c, elems, elems * (store + 2 * grad_width(x)));
}

double ap_tp_overlap_exposed(const ap_cluster *c, ap_ub_method m, double comm,
                             double gemm, int tp)
{
    if (comm <= 0 || tp < 2)
        return comm > 0 ? comm : 0;
    double e;
    if (m == AP_UB_RING) {
        /* tp GEMM chunks, the first on the local shard, each beside the
         * send and receive of the next shard: only what outlasts the
         * other tp - 1 chunks shows. */
        e = fmax(0, comm - gemm * (tp - 1) / tp);
    } else if (m == AP_UB_PIPELINE) {
        /* Each of the n chunks is reduce-scattered beside the next one's
         * GEMM; the last chunk's has no GEMM left to hide behind. */
        double n = AP_UB_SPLITS;
        e = fmax(comm / n, comm - gemm * (n - 1) / n);
    } else {
        e = fmax(0, comm - gemm);
    }
    /* Pipelined and bulk overlaps run their copies on num_sm SMs, which the
     * GEMM lacks while they run. Ring exchange uses the copy engines. */
    if (m != AP_UB_RING && c->sms > 2 * AP_UB_NUM_SM)
        e += fmin(comm, gemm) * AP_UB_NUM_SM / c->sms;
    return fmin(e, comm);
}

/* A collective NCCL runs on its own stream while the compute stream runs
 * a GEMM shows only where it outlasts the GEMM. The SMs NCCL's kernel
 * holds meanwhile (one per channel) are not taken from the GEMM: how many
 * channels NCCL picks is its own tuning, not a documented constant. */
double ap_tp_async_exposed(double comm, double gemm)
{
    return comm > 0 ? fmax(0, comm - gemm) : 0;
}

/* Whether op is a linear layer whose sequence-parallel collectives TE's
 * userbuffers overlap: the transformer layers' linear layers, the ones TE
 * also runs in FP8 (the LM head and attention's own products are not TE
 * linear layers). */
static int ub_linear(const ap_price_ctx *x, int op)
{
    return x->run.tp_overlap && ap_fp8_linear(x->g, op);
}

/* Whether op's backward runs its tensor-parallel collectives beside its
 * GEMMs without userbuffers: a linear layer with a trained weight, as
 * Transformer Engine's Linear and LayerNormLinear and Megatron-Core's
 * LinearWithGradAccumulationAndAsyncCommunication run it (ap_tp_async_exposed). */
static int async_linear(const ap_price_ctx *x, int op)
{
    const ap_op *o = &x->g->ops[op];
    return !x->run.tp_sync && !ub_linear(x, op) && o->kind == AP_OP_MATMUL &&
           o->ninputs > 1 && x->g->tensors[o->inputs[1]].role == AP_TENSOR_PARAM &&
           !expert_gemm(x, o);
}

/* The GEMM a collective on the edge into `cons` overlaps. Megatron fuses
 * the projections that read one gathered tensor (Q, K and V into
 * linear_qkv, a gated MLP's gate and up into linear_fc1), so the collective
 * runs beside all of their GEMMs: the consumer's GEMM scaled by the FLOPs
 * of the tensor's linear-layer consumers over its own. */
static double fused_gemm(const ap_price_ctx *x, int t, int cons,
                         const ap_strategy *cs)
{
    const ap_graph *g = x->g;
    const ap_tensor *tt = &g->tensors[t];
    double own = g->ops[cons].flops, all = 0;
    int seen = 0;
    for (int i = tt->first_consumer; i >= 0 && i < g->nops && seen < tt->consumers; i++)
        for (int k = 0; k < g->ops[i].ninputs; k++)
            if (g->ops[i].inputs[k] == t) {
                seen++;
                if (ap_fp8_linear(g, i))
                    all += g->ops[i].flops;
            }
    double gemm = matmul_time(x, &g->ops[cons], cs);
    return own > 0 && all > own ? gemm * all / own : gemm;
}

/* The scales a block-scaled recipe writes beside each FP8 copy of a tensor
 * of `elems` elements, rowwise and columnwise: one fp32 per 128 elements
 * (blockwise's 1 x 128 blocks; its 128 x 128 weight blocks write fewer) or
 * one E8M0 byte per 32 (mxfp8), 1/32 of a byte an element either way.
 * Tensor-scaled recipes keep one scale per tensor. */
static double block_scales(const ap_price_ctx *x, double elems)
{
    return ap_fp8_recipe_blocks(x->run.fp8_recipe) ? 2 * elems / 32 : 0;
}

/* Transformer Engine's cast of a bf16 tensor to FP8 with its transpose
 * (fp8_cast_transpose_fused): one pass reads 2 bytes per element and writes
 * 1 byte each for the tensor and its transpose, taking the amax (one
 * comparison per element) on the way. */
static double fp8_cast(const ap_price_ctx *x, double elems)
{
    return ap_cost_memop(x->c, elems, 4 * elems + block_scales(x, elems));
}

/* Under tensorwise scaling the scale must be known before the cast, so the
 * tensor's amax is found first: by the kernel that made it where that is
 * the norm Transformer Engine runs inside the linear layer (LayerNormLinear
 * under current scaling writes the high-precision output and its amax
 * together), else by a kernel of its own that reads it (nvte_compute_amax
 * before nvte_quantize): after a norm that is a module of its own (before
 * MLA and MoE layers), after Megatron-Core's own activation kernels
 * (bias_swiglu_impl; fc2 quantizes their bf16 output), after attention,
 * for the weights and for the output gradients. */
static double fp8_amax(const ap_price_ctx *x, double elems, int fused)
{
    if (x->run.fp8_recipe != AP_FP8_TENSORWISE || fused)
        return 0;
    return ap_cost_memop(x->c, elems, 2 * elems);
}

/* Whether an FP8 linear layer's input comes from a norm that Transformer
 * Engine fuses into it (ap_module: a norm not in the layernorm module). */
static int amax_fused(const ap_price_ctx *x, const ap_op *op)
{
    int p = x->g->tensors[op->inputs[0]].producer;
    return p >= 0 && x->g->ops[p].kind == AP_OP_NORM &&
           !(x->g->ops[p].modules & AP_MODULE_LAYERNORM);
}

/* TE's transpose of an FP8 tensor (fp8_transpose, or the columnwise copy a
 * quantized tensor makes of itself): read 1 byte an element, write 1. */
static double fp8_transpose(const ap_price_ctx *x, double elems)
{
    return ap_cost_memop(x->c, 0, 2 * elems);
}

/* TE's rowwise-only quantization of a sequence shard before it is gathered
 * (gather_along_first_dim with a quantizer; cast_to_fp8 in TE 1.x): read 2
 * bytes an element, write 1, with its amax pass under tensorwise scaling.
 * The gathered tensor is transposed in the backward, for wgrad. A
 * block-scaled recipe cannot make the columnwise copy by transposing (its
 * blocks run along the other dimension), so the shard is quantized both
 * ways at once, as fp8_cast does, and the backward gathers the columnwise
 * shard instead of transposing (sp_transpose). */
static double shard_cast(const ap_price_ctx *x, double shard, int fused)
{
    if (ap_fp8_recipe_blocks(x->run.fp8_recipe))
        return fp8_cast(x, shard);
    return ap_cost_memop(x->c, shard, 3 * shard) + fp8_amax(x, shard, fused);
}

/* The backward's transpose of a tensor gathered in FP8 for wgrad: none
 * under a block-scaled recipe, whose columnwise copy was quantized on the
 * shard and is gathered itself (shard_cast). */
static double sp_transpose(const ap_price_ctx *x, double elems)
{
    return ap_fp8_recipe_blocks(x->run.fp8_recipe) ? 0 : fp8_transpose(x, elems);
}

/* The cast of an FP8 linear layer's input of `in` elements (gathered), fwd
 * and bwd: arriving whole (k = 1), or as a sequence shard of 1/k that the
 * layer gathers in FP8 (k > 1). Under delayed scaling the norm TE fuses into
 * the layer (LayerNormLinear) writes FP8 itself (layernorm_fwd_fp8, the
 * FULLY_FUSED norm), leaving only the transpose: made in the forward when
 * nothing is gathered (TE 2.x; TE 1.x made it in the backward). Under the
 * block-scaled recipes TE's norm writes bf16 and quantizes after (its
 * UNFUSED path: MXFP8 is fused only with the cuDNN norm that
 * NVTE_NORM_FWD_USE_CUDNN selects, blockwise never). */
static void input_cast(const ap_price_ctx *x, const ap_op *op, double in, double k,
                       double *fwd, double *bwd)
{
    int fused = amax_fused(x, op);
    int norm_writes_fp8 = fused && x->run.fp8_recipe == AP_FP8_DELAYED;
    if (k > 1) {
        *fwd = norm_writes_fp8 ? 0 : shard_cast(x, in / k, fused);
        *bwd = sp_transpose(x, in);
    } else {
        *fwd = norm_writes_fp8 ? fp8_transpose(x, in) : fp8_cast(x, in) + fp8_amax(x, in, fused);
        *bwd = 0;
    }
}

/* The product of the mesh axes on which a row-parallel op reduce-scatters
 * its output onto sequence shards (1 when it does not): the backward then
 * gathers the output gradient, which TE quantizes on the shard first. */
static double rs_ways(const ap_price_ctx *x, const ap_strategy *s)
{
    double k = 1;
    for (int a = 0; a < 2; a++)
        if (s->rs[a] && x->mesh->d[a] > 1)
            k *= x->mesh->d[a];
    return k;
}

/* The FP8 linear layers that read tensor t. Megatron fuses the projections
 * of one input into one TE module (linear_qkv, a gated MLP's linear_fc1, the
 * experts' grouped fc1), which quantizes that input once for all of them. */
static int fp8_readers(const ap_graph *g, int t)
{
    const ap_tensor *tt = &g->tensors[t];
    int seen = 0, n = 0;
    for (int i = tt->first_consumer; i >= 0 && i < g->nops && seen < tt->consumers; i++)
        for (int k = 0; k < g->ops[i].ninputs; k++)
            if (g->ops[i].inputs[k] == t) {
                seen++;
                n += ap_fp8_linear(g, i);
            }
    return n > 1 ? n : 1;
}

/* The casts around an FP8 linear layer's GEMMs. Forward: its input, every
 * micro-batch, shared with the other projections of its fused module
 * (fp8_readers), and its weight, once per step: Megatron marks the first
 * micro-batch (set_is_first_microbatch) and TE reuses the cached FP8 weight
 * and transpose for the others. Backward: the output gradient. Each with
 * its amax pass under tensorwise scaling (fp8_amax). */
static void fp8_casts(const ap_price_ctx *x, const ap_op *op,
                      const ap_strategy *s, double *fwd, double *bwd)
{
    gemm_dims d = dims_of(x, op, s);
    double micro = x->nmicro > 1 ? x->nmicro : 1;
    double in = d.batch * d.m * d.k, w = d.batch * d.k * d.n, out = d.batch * d.m * d.n;
    double share = fp8_readers(x->g, op->inputs[0]), in_f, in_b;
    input_cast(x, op, in, 1, &in_f, &in_b);
    *fwd = in_f / share + (fp8_cast(x, w) + fp8_amax(x, w, 0)) / micro;
    *bwd = in_b / share;
    double k = rs_ways(x, s);
    if (k > 1)
        *bwd += shard_cast(x, out / k, 0) + sp_transpose(x, out);
    else
        *bwd += fp8_cast(x, out) + fp8_amax(x, out, 0);
}

static const char *const recipe_names[] = {"delayed", "tensorwise", "blockwise", "mxfp8"};

const char *ap_fp8_recipe_name(ap_fp8_recipe r)
{
    return recipe_names[r];
}

int ap_fp8_recipe_parse(const char *name, ap_fp8_recipe *out)
{
    for (size_t i = 0; i < sizeof recipe_names / sizeof recipe_names[0]; i++)
        if (!strcmp(name, recipe_names[i])) {
            *out = (ap_fp8_recipe)i;
            return AP_OK;
        }
    return AP_EINPUT;
}

int ap_fp8_recipe_blocks(ap_fp8_recipe r)
{
    return r == AP_FP8_BLOCKWISE || r == AP_FP8_MXFP8;
}

/* What one element of input i a linear layer saves for its backward costs,
 * relative to its dtype: TE keeps the FP8 transpose of the activation. */
static double saved_input_scale(const ap_price_ctx *x, const ap_op *op, int i)
{
    if (i != 0 || !runs_fp8(x, op))
        return 1;
    return 1.0 / (double)ap_dtype_size(x->g->tensors[op->inputs[0]].dtype);
}

/* Whether input i of op is a weight held in FP8 as the parameter itself
 * (--fp8-param-gather): TE's Float8Tensor replaces the bf16 parameter of
 * the FP8 linear layers only; biases, norms, the embedding, the LM head
 * and the router stay bf16. */
static int fp8_primary(const ap_price_ctx *x, const ap_op *op, int i)
{
    return x->run.fp8_param_gather && i == 1 && runs_fp8(x, op);
}

/* TE keeps the FP8 weight and its transpose between micro-batches, 1 + 1
 * bytes per element of the GPU's shard: beside the bf16 parameter, or
 * under fp8_param_gather as the parameter itself (Float8Tensor's data and
 * the transpose Hopper's FP8 GEMMs need for the data gradient). */
static void price_fp8_weights(const ap_price_ctx *x, const ap_op *op,
                              const ap_strategy *s, ap_op_cost *c)
{
    if (!runs_fp8(x, op))
        return;
    const ap_tensor *w = &x->g->tensors[op->inputs[1]];
    if (w->first_consumer == op - x->g->ops) {
        c->fp8_weight_bytes = 2 * (double)w->elems / tensor_split(x, s, w->shape);
        c->param_bytes += c->fp8_weight_bytes;
    }
}

static double shard_factor(const ap_price_ctx *x, const ap_strategy *s)
{
    double k = 1;
    for (int a = 0; a < 2; a++)
        if (s->axis[a])
            k *= x->mesh->d[a];
    return k;
}

static double batch_scale(const ap_price_ctx *x)
{
    char b = ap_graph_label_of(x->g, AP_DIM_BATCH);
    double b0 = b ? (double)ap_graph_dim(x->g, b)->size : 1;
    return x->batch / b0;
}

/* Bytes a rotary op moves on one GPU: its shard of x and y, and of the
 * angle table only what its labels split (a head split reads all of it). */
static double rotary_bytes(const ap_price_ctx *x, const ap_op *op,
                           const ap_strategy *s)
{
    double b = 0;
    for (int i = 0; i < op->ninputs; i++)
        b += tensor_bytes(x, op->inputs[i]) / operand_split(x, op, s, op->inputs[i]);
    return b + tensor_bytes(x, op->outputs[0]) / operand_split(x, op, s, op->outputs[0]);
}

/* What one GPU's attention sees under strategy s: bn query heads and bkv
 * KV heads (both times the batch), sq of the t query rows, head dims d of
 * q/k and e of v, and the cp ways its sequence is split. */
typedef struct {
    ap_dtype dt;
    double bn, bkv, sq, t, d, e;
    int cp;
} attn_shard;

static void attention_shard(const ap_price_ctx *x, const ap_op *op,
                            const ap_strategy *s, attn_shard *a)
{
    const char *q = shape_of(x, op->inputs[0]);
    const char *v = shape_of(x, op->inputs[2]);
    a->dt = x->g->tensors[op->inputs[0]].dtype;
    a->bn = ap_label_size(x, q[0]) / split_of(x, s, q[0]) *
            ap_label_size(x, q[2]) / split_of(x, s, q[2]);
    a->bkv = a->bn * ap_label_size(x, shape_of(x, op->inputs[1])[2]) /
             ap_label_size(x, q[2]);
    a->cp = split_of(x, s, q[1]);
    a->t = ap_label_size(x, q[1]);
    a->sq = a->t / a->cp;
    a->d = ap_label_size(x, q[3]);
    a->e = ap_label_size(x, v[3]);
}

/* Under SequentialMLP each local expert's elementwise op (its activation)
 * is a kernel of its own, forward and backward: the op takes at least one
 * kernel's floor per expert, where the grouped MLP runs one kernel over
 * all the experts' tokens. */
static void sequential_kernels(const ap_price_ctx *x, const ap_op *op,
                               const ap_strategy *s, ap_op_cost *c)
{
    char e = ap_graph_label_of(x->g, AP_DIM_EXPERTS);
    if (!x->run.sequential_experts || !e || (op->kind != AP_OP_UNARY && op->kind != AP_OP_BINARY) ||
        !ap_expert_op(x->g, (int)(op - x->g->ops)))
        return;
    double floor = ap_label_size(x, e) / split_of(x, s, e) * x->c->kernel_floor;
    c->fwd = fmax(c->fwd, floor);
    c->bwd = fmax(c->bwd, floor);
}

static void price_compute(const ap_price_ctx *x, const ap_op *op,
                          const ap_strategy *s, ap_op_cost *c)
{
    double shard = shard_factor(x, s);
    double scale = batch_scale(x);
    /* An op over the experts' capacity does what token dropping leaves. */
    char cap = ap_graph_label_of(x->g, AP_DIM_CAPACITY);
    if (cap && strchr(op->iter, cap))
        scale *= ap_capacity_scale(&x->run);
    c->flops = op->flops * scale / shard;
    if (op->kind == AP_OP_MATMUL) {
        c->fwd = matmul_time(x, op, s);
        c->bwd = matmul_backward_time(x, op, s);
        if (runs_fp8(x, op)) {
            double cf, cb;
            fp8_casts(x, op, s, &cf, &cb);
            c->fwd += cf;
            c->bwd += cb;
        }
    } else if (op->kind == AP_OP_ATTENTION) {
        attn_shard a;
        attention_shard(x, op, s, &a);
        if (op->flash && a.cp > 1) {
            /* Context parallel: Transformer Engine's ring runs one kernel
             * per step and corrects the partial results between them; the
             * other communication types run their own kernels. */
            double w = (double)op->window;
            c->fwd = ap_cost_attention_cp_comm(x->c, x->run.cp_comm, a.dt, a.bn, a.bkv, a.sq,
                                               a.d, a.e, op->causal, w, a.cp, 0);
            c->bwd = ap_cost_attention_cp_comm(x->c, x->run.cp_comm, a.dt, a.bn, a.bkv, a.sq,
                                               a.d, a.e, op->causal, w, a.cp, 1);
        } else if (op->flash && op->chunk) {
            c->fwd = ap_cost_attention_chunked(x->c, a.dt, a.bn, a.t, (double)op->chunk,
                                               a.d, a.e, 0);
            c->bwd = ap_cost_attention_chunked(x->c, a.dt, a.bn, a.t, (double)op->chunk,
                                               a.d, a.e, 1);
        } else if (op->flash && op->window) {
            c->fwd = ap_cost_attention_window(x->c, a.dt, a.bn, a.t, (double)op->window,
                                              a.d, a.e, 0);
            c->bwd = ap_cost_attention_window(x->c, a.dt, a.bn, a.t, (double)op->window,
                                              a.d, a.e, 1);
        } else if (op->flash) {
            c->fwd = ap_cost_attention(x->c, a.dt, a.bn, a.sq, a.t, a.d, a.e, op->causal);
            c->bwd = ap_cost_attention_backward(x->c, a.dt, a.bn, a.sq, a.t, a.d, a.e,
                                                op->causal);
        } else {
            c->fwd = ap_cost_attention_unfused(x->c, a.dt, a.bn, a.sq, a.t, a.d, a.e,
                                               op->dropout_p, 0);
            c->bwd = ap_cost_attention_unfused(x->c, a.dt, a.bn, a.sq, a.t, a.d, a.e,
                                               op->dropout_p, 1);
        }
    } else if (op->kind == AP_OP_LOSS) {
        const ap_tensor *lg = &x->g->tensors[op->inputs[0]];
        double logits = (double)lg->elems * scale / shard;
        c->fwd = ap_cost_cross_entropy_impl(x->c, x->run.cross_entropy, lg->dtype, logits, 0);
        c->bwd = ap_cost_cross_entropy_impl(x->c, x->run.cross_entropy, lg->dtype, logits, 1);
    } else if (op->kind == AP_OP_UNARY && op->sub == AP_UNARY_ROTARY) {
        /* The backward rotates the gradient back: the same traffic. */
        c->fwd = ap_cost_memop(x->c, c->flops, rotary_bytes(x, op, s));
        c->bwd = c->fwd;
    } else {
        c->fwd = ap_cost_memop(x->c, c->flops, op->bytes_moved * scale / shard);
        c->bwd = op->kind == AP_OP_RESHAPE ? 0 : 2 * c->fwd;
        if (op->kind == AP_OP_RESHAPE)
            c->fwd = 0;
        else
            sequential_kernels(x, op, s, c);
    }
}

/* Context parallel: every rank meets every K and V shard. A flash
 * attention runs Transformer Engine's ring, whose send/recv hides behind
 * the step kernels (ap_cost_cp_ring: only what outlasts them is priced),
 * or under cp_comm its exposed all-gathers or all-to-alls
 * (ap_cost_cp_comm).
 * Unfused attention has no ring: it is priced as gathering K and V
 * forward, and gathering them and reduce-scattering dK, dV backward, each
 * unhidden. */
static void price_kv_exchange(const ap_price_ctx *x, const ap_op *op,
                              const ap_strategy *s, ap_op_cost *c)
{
    const char *q = shape_of(x, op->inputs[0]);
    int mask = axes_of(s, q[1]);
    if (!mask)
        return;
    attn_shard a;
    attention_shard(x, op, s, &a);
    if (op->flash) {
        int nodes = x->mesh->nodes[mask - 1];
        c->fwd_comm += ap_cost_cp_comm(x->c, x->run.cp_comm, a.dt, a.bn, a.bkv, a.sq, a.d, a.e,
                                       op->causal, a.cp, nodes, 0);
        c->bwd_comm += ap_cost_cp_comm(x->c, x->run.cp_comm, a.dt, a.bn, a.bkv, a.sq, a.d, a.e,
                                       op->causal, a.cp, nodes, 1);
        return;
    }
    double kv = 0;
    for (int i = 1; i < 3; i++)
        kv += tensor_bytes(x, op->inputs[i]) / operand_split(x, op, s, op->inputs[i]) *
              a.cp;
    c->fwd_comm += coll(x, AP_COLL_ALLGATHER, mask, kv);
    c->bwd_comm += coll(x, AP_COLL_ALLGATHER, mask, kv) +
                   coll(x, AP_COLL_REDUCESCATTER, mask, kv);
}

/* Expert parallelism as Megatron-Core's alltoall token dispatcher runs it
 * (the flex dispatcher: the exchange is flex_exchange's, the memory passes
 * the same),
 * dropless (MoEAlltoAllTokenDispatcher, megatron/core/transformer/moe/
 * token_dispatcher.py). Dispatch: permutation 1 copies each token once per
 * chosen expert, grouped by expert (the op's own memory pass), the
 * all-to-all sends every copy to its expert's rank, and with more than one
 * local expert permutation 2 (sort_chunks_by_idxs) regroups what arrived,
 * by source rank, into one run per local expert. Combine undoes them in
 * reverse: the unsort, the all-to-all back, the weighted unpermutation.
 * A rank sends and receives its tokens' top_k copies, tokens * top_k *
 * hidden elements (the [experts, capacity, hidden] slots on this rank), not
 * deduplicated per destination rank (over the tensor-parallel ranks when
 * sequence parallelism splits the tokens). Each is priced whole here;
 * what moe_a2a_overlap (Megatron-Core's combined 1F1B, off by default)
 * hides behind another micro-batch's compute is taken off per merged pair
 * of passes (planner/moe_overlap.c, evaluate.c). Backward runs each again
 * on the gradients. */
/* The flex dispatcher's exchange of a rank's `slots` bytes of routed
 * copies (its tokens times top_k): DeepEP's or HybridEP's kernels move each
 * token once to each node and GPU that holds one of its experts
 * (ap_cost_deepep), over the expert-parallel group of `mask`, as the op's
 * routing (group-limited or not) picks them. */
static double flex_exchange(const ap_price_ctx *x, const ap_op *op, int mask, double slots)
{
    int ranks = (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1);
    ap_routing r = {ap_label_size(x, ap_graph_label_of(x->g, AP_DIM_EXPERTS)),
                    op->top_k > 0 ? op->top_k : 1, op->groups, op->group_topk};
    return ap_cost_deepep(x->c, ranks, x->mesh->nodes[mask - 1], &r, slots / r.top_k);
}

/* The allgather dispatcher's exchange (MoEAllGatherTokenDispatcher): a
 * rank's tokens (its `slots` bytes of copies over top_k, before token
 * dropping) all-gathered to
 * every rank of the expert-parallel group of `mask` for dispatch, the
 * outputs reduce-scattered back for combine, the same volume; the
 * backward runs the other one. */
static double gather_exchange(const ap_price_ctx *x, const ap_op *op, int mask, double slots)
{
    int ranks = (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1);
    double tokens = slots / (op->top_k > 0 ? op->top_k : 1) / ap_capacity_scale(&x->run);
    return coll(x, op->kind == AP_OP_DISPATCH ? AP_COLL_ALLGATHER : AP_COLL_REDUCESCATTER,
                mask, tokens * ranks);
}

static void price_token_exchange(const ap_price_ctx *x, const ap_op *op,
                                 const ap_strategy *s, ap_op_cost *c)
{
    char e = ap_graph_label_of(x->g, AP_DIM_EXPERTS);
    int mask = axes_of(s, e);
    int slots = op->kind == AP_OP_DISPATCH ? op->outputs[0] : op->inputs[0];
    if (!e || !mask || !has_label(shape_of(x, slots), e))
        return;
    double bytes = tensor_bytes(x, slots) / tensor_split(x, s, shape_of(x, slots));
    /* Tokens split over the other axis as well (sequence parallel) are sent
     * from their shard, and gathered over that axis after dispatch, or
     * reduce-scattered before combine, on the edges. */
    int tok = op->kind == AP_OP_DISPATCH ? op->inputs[0] : op->outputs[0];
    double shard = 1;
    for (int a = 0; a < 2; a++)
        if (!(mask & (1 << a)) && label_in(x, op, tok, s->axis[a]) &&
            !has_label(shape_of(x, slots), s->axis[a]))
            shard *= x->mesh->d[a];
    double a2a = x->run.dispatcher == AP_DISPATCH_ALLTOALL
                     ? coll(x, AP_COLL_ALLTOALL, mask, bytes / shard)
                 : x->run.dispatcher == AP_DISPATCH_ALLGATHER
                     ? gather_exchange(x, op, mask, bytes / shard)
                     : flex_exchange(x, op, mask, bytes / shard);
    c->fwd_comm += a2a;
    c->bwd_comm += a2a;
    if (ap_label_size(x, e) / split_of(x, s, e) > 1) {
        double sort = ap_cost_memop(x->c, 0, 2 * bytes);
        c->fwd += sort;
        c->bwd += sort;
    }
}

/* Under tensorwise scaling a sequence shard quantized before its gather
 * needs the whole tensor's amax: TE all-reduces the shard's over the
 * tensor-parallel group first (with_amax_reduction, one fp32, synchronous),
 * for a column-parallel layer's input and a row-parallel one's output
 * gradient. Delayed scaling takes the scale from earlier steps. */
static double tp_amax(const ap_price_ctx *x, int mask)
{
    if (x->run.fp8_recipe != AP_FP8_TENSORWISE)
        return 0;
    int ranks = (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1);
    return ap_cost_allreduce_small(x->c, ranks, x->mesh->nodes[mask - 1], 4);
}

/* Forward partial sums: a split label the output lacks. */
static void price_partials(const ap_price_ctx *x, const ap_op *op,
                           const ap_strategy *s, ap_op_cost *c)
{
    if (!op->noutputs)
        return;
    int out = op->outputs[0];
    const char *O = shape_of(x, out);
    for (int a = 0; a < 2; a++) {
        char l = s->axis[a];
        if (!l || has_label(O, l) || x->mesh->d[a] == 1)
            continue;
        /* A token label split leaves each rank its own tokens and their
         * slots; the experts label split is price_token_exchange's. */
        if (op->kind == AP_OP_DISPATCH || op->kind == AP_OP_COMBINE)
            continue;
        if (op->kind == AP_OP_LOSS) {
            const char *lg = shape_of(x, op->inputs[0]);
            if (l != lg[2]) {
                /* Batch or sequence split: each rank's loss is a mean over
                 * its own tokens, averaged across ranks as one scalar (as
                 * Megatron-LM reports it every micro-batch), over every
                 * data-parallel replica: a message NCCL runs with its LL
                 * protocol (ap_cost_allreduce_small). */
                int nodes, ranks = sync_group(x, 1 << a, &nodes);
                c->fwd_comm += ap_cost_allreduce_small(x->c, ranks, nodes, 4);
                continue;
            }
            /* Vocabulary-parallel cross entropy reduces three fp32 numbers
             * per token (max, sum of exponentials, target logit). */
            double tok = ap_label_size(x, lg[0]) * ap_label_size(x, lg[1]) /
                         tensor_split(x, s, lg) * x->mesh->d[a];
            c->fwd_comm += 3 * coll(x, AP_COLL_ALLREDUCE, 1 << a, 4 * tok);
            continue;
        }
        if (op->kind == AP_OP_ATTENTION) {
            continue;
        }
        double bytes = tensor_bytes(x, out) / tensor_split(x, s, O);
        double rs = coll(x, AP_COLL_REDUCESCATTER, 1 << a, bytes);
        /* An FP8 layer's output gradient is gathered in FP8 (fp8_casts). */
        double ag = coll(x, AP_COLL_ALLGATHER, 1 << a,
                         runs_fp8(x, op) ? bytes / ap_dtype_size(x->g->tensors[out].dtype)
                                         : bytes);
        if (s->rs[a] && ub_linear(x, (int)(op - x->g->ops))) {
            /* Row-parallel under --tp-comm-overlap: the reduce-scatter is
             * pipelined with the forward GEMM (proj_fprop, fc2_fprop), the
             * backward's all-gather of the output gradient ring-exchanged
             * into the data-gradient GEMM (proj_dgrad, fc2_dgrad). */
            c->fwd_comm += ap_tp_overlap_exposed(x->c, AP_UB_PIPELINE, rs,
                                                 matmul_time(x, op, s), x->mesh->d[a]);
            c->bwd_comm += ap_tp_overlap_exposed(x->c, AP_UB_RING, ag,
                                                 matmul_dgrad_time(x, op, s), x->mesh->d[a]);
        } else if (s->rs[a]) {
            c->fwd_comm += rs;
            c->bwd_comm += ag;
        } else {
            c->fwd_comm += coll(x, AP_COLL_ALLREDUCE, 1 << a, bytes);
        }
        if (s->rs[a] && runs_fp8(x, op))
            c->bwd_comm += tp_amax(x, 1 << a);
    }
    if (op->kind == AP_OP_ATTENTION)
        price_kv_exchange(x, op, s, c);
    if (op->kind == AP_OP_DISPATCH || op->kind == AP_OP_COMBINE)
        price_token_exchange(x, op, s, c);
}

/* A norm whose span (the labels it normalises over) an axis splits: each
 * rank sums its part of every row, and the sums are all-reduced over that
 * axis before the rows are scaled, as an SPMD partitioner lowers a
 * reduction over a split dimension. RMSNorm reduces one fp32 sum a row
 * (of squares), LayerNorm two (and the sum); the backward reduces as many
 * again (of the output gradient times the input, for each). */
static void price_norm_stats(const ap_price_ctx *x, const ap_op *op,
                             const ap_strategy *s, ap_op_cost *c)
{
    int span = ap_norm_span(x->g, op);
    if (span < 2)
        return;
    const char *O = shape_of(x, op->outputs[0]);
    const char *spanned = O + strlen(O) - span;
    double rows = 1;
    for (const char *p = O; p < spanned; p++)
        rows *= ap_label_size(x, *p);
    rows /= tensor_split(x, s, O) / tensor_split(x, s, spanned);
    double bytes = rows * 4 * (op->sub == AP_NORM_RMS ? 1 : 2);
    for (int a = 0; a < 2; a++) {
        if (!s->axis[a] || !has_label(spanned, s->axis[a]))
            continue;
        double t = coll(x, AP_COLL_ALLREDUCE, 1 << a, bytes);
        c->fwd_comm += t;
        c->bwd_comm += t;
    }
}

static int is_param(const ap_price_ctx *x, int t)
{
    return x->g->tensors[t].role == AP_TENSOR_PARAM;
}

/* A matmul's bias is added after the partial sums are all-reduced, so on
 * an axis that splits a contracted label without reduce-scattering, every
 * rank sees the whole output gradient and computes the whole bias gradient:
 * nothing to synchronise there (Megatron's row-parallel bias). */
static int whole_after_reduce(const ap_op *op, const ap_strategy *s,
                              int input, int a)
{
    return op->kind == AP_OP_MATMUL && input == 2 && !s->rs[a] &&
           has_label(op->contracted, s->axis[a]);
}

/* Whether op i runs after the layers (the head and the loss): outside
 * them, with a layer's op before it. */
static int after_layers(const ap_graph *g, int i)
{
    if (g->ops[i].layer >= 0)
        return 0;
    for (int k = 0; k < i; k++)
        if (g->ops[k].layer >= 0)
            return 1;
    return 0;
}

/* Whether parameter t is read after the layers by another op than its
 * first consumer: a tied word embedding, which the LM head reads. */
static int read_after_layers(const ap_graph *g, int t)
{
    for (int i = g->tensors[t].first_consumer + 1; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        for (int k = 0; k < op->ninputs; k++)
            if (op->inputs[k] == t && after_layers(g, i))
                return 1;
    }
    return 0;
}

/* How an op holds a parameter another op reads too (tied embeddings). With
 * the head on the embedding's stage (pp = 1) it is one Megatron Parameter:
 * both uses accumulate into one gradient, stored and reduced once, at the
 * first consumer (OWN), the other reader (SHARED) adds nothing. With the
 * head apart (pp > 1) Megatron-LM gives the last stage a copy of its own
 * (language_module.py, setup_embeddings_and_output_layer): the head's read
 * is a parameter of that stage (COPY), and both copies' gradients are
 * all-reduced over the embedding group once per step (TIED). */
typedef enum { PARAM_OWN, PARAM_SHARED, PARAM_COPY, PARAM_TIED } param_use;

static param_use param_use_of(const ap_price_ctx *x, const ap_op *op, int t)
{
    const ap_tensor *tt = &x->g->tensors[t];
    int i = (int)(op - x->g->ops);
    if (tt->first_consumer != i)
        return x->head_apart && !after_layers(x->g, tt->first_consumer) &&
                       after_layers(x->g, i) ? PARAM_COPY : PARAM_SHARED;
    if (x->head_apart && tt->consumers > 1 && op->layer < 0 &&
        !after_layers(x->g, i) && read_after_layers(x->g, t))
        return PARAM_TIED;
    return PARAM_OWN;
}


/* Megatron-LM's _allreduce_word_embedding_grads (finalize_model_grads.py):
 * the gradient of each rank's shard (its main_grad, in the gradient
 * buffer's dtype) all-reduced with its counterpart on the other stage,
 * after the data-parallel reduction. */
static double tied_allreduce(const ap_price_ctx *x, double elems)
{
    int nodes = x->embed_group_nodes > 1 ? 2 : 1;
    return ap_cost_collective(x->c, AP_COLL_ALLREDUCE, 2, nodes, elems * grad_width(x));
}

/* ZeRO-2/3's per-micro-batch collectives run beside the compute: Megatron
 * FSDP, torch FSDP2 and DeepSpeed's stage 3 gather a module's weights on a
 * stream of their own while the module before it computes (prefetching),
 * and reduce-scatter its gradients while the backward goes on to the next
 * one. Priced op by op against the op's own pass: the layers of a stack
 * repeat, so the op before this one in the schedule is this one's twin
 * in the previous layer. Without overlapping gradient reduction
 * (serial_grad) the reduce-scatters wait, and so does everything here. */
static double zero_exposed(const ap_price_ctx *x, double comm, double compute)
{
    if (x->serial_grad)
        return comm;
    return fmax(0, comm - compute);
}

/* Parameters: their shard's model states, and their gradient reduction over
 * the axes that split a label the parameter lacks (data parallel). */
static void price_params(const ap_price_ctx *x, const ap_op *op,
                         const ap_strategy *s, ap_op_cost *c)
{
    double zero_fwd = 0, zero_bwd = 0;
    for (int i = 0; i < op->ninputs; i++) {
        int t = op->inputs[i];
        if (!is_param(x, t))
            continue;
        param_use use = param_use_of(x, op, t);
        if (use == PARAM_SHARED)
            continue;
        const ap_tensor *tt = &x->g->tensors[t];
        int primary = fp8_primary(x, op, i);
        double elems = (double)tt->elems / tensor_split(x, s, tt->shape);
        int mask = 0;
        for (int a = 0; a < 2; a++)
            if (s->axis[a] && !has_label(tt->shape, s->axis[a]) && x->mesh->d[a] > 1 &&
                !whole_after_reduce(op, s, i, a))
                mask |= 1 << a;
        /* The mesh's replicas each hold the whole shard too. */
        int replicas = (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1) *
                       replicas_of(x);
        double gw = grad_width(x);
        ap_model_states ms = ap_mem_model_states_opt(elems, replicas, x->zero, gw, &x->run.opt);
        /* An FP8 primary weight has no bf16 copy; price_fp8_weights adds
         * its FP8 bytes. */
        c->param_bytes += primary ? ms.total - ms.params : ms.total;
        c->grad_bytes += ms.grads;
        c->opt_bytes += ms.optimizer;
        if (use == PARAM_COPY || use == PARAM_TIED) {
            double tied = tied_allreduce(x, elems);
            c->tied_sync += tied;
            c->grad_sync += tied;
        }
        if (replicas == 1)
            continue;
        double gbytes = elems * gw;
        /* Parameters are gathered in their own dtype: bf16, or one byte
         * for an FP8 primary weight (Megatron's uint8 parameter buffer). */
        double pwidth = primary ? 1 : 2, pbytes = elems * pwidth;
        if (x->zero == AP_ZERO_NONE) {
            c->grad_sync += step_sync(x, AP_COLL_ALLREDUCE, mask, elems, gw);
        } else if (x->zero == AP_ZERO_1) {
            /* Reduce-scatter the accumulated gradients once per step, then
             * all-gather the updated parameters. */
            c->grad_sync += step_sync(x, AP_COLL_REDUCESCATTER, mask, elems, gw);
            param_gather(x, mask, elems, pwidth, c);
        } else {
            /* ZeRO-2/3 keep only their shard of the gradients, so every
             * micro-batch's are reduce-scattered in its backward (DeepSpeed
             * and FSDP both do); ZeRO-2 then all-gathers the updated
             * parameters, ZeRO-3 gathers them at each use instead. */
            zero_bwd += sync_coll(x, AP_COLL_REDUCESCATTER, mask, gbytes);
            if (x->zero == AP_ZERO_2)
                param_gather(x, mask, elems, pwidth, c);
        }
        if (x->zero == AP_ZERO_3) {
            /* Parameters are gathered before forward and again before
             * backward, for every micro-batch. */
            zero_fwd += sync_coll(x, AP_COLL_ALLGATHER, mask, pbytes);
            zero_bwd += sync_coll(x, AP_COLL_ALLGATHER, mask, pbytes);
        }
    }
    c->fwd_comm += zero_exposed(x, zero_fwd, c->fwd);
    c->bwd_comm += zero_exposed(x, zero_bwd, c->bwd);
}

/* The graph counts the fp32 softmax the loss keeps; Transformer Engine's
 * loss keeps the gradient in the logits' dtype instead. */
static double loss_saved_scale(const ap_price_ctx *x, const ap_op *op)
{
    if (op->kind != AP_OP_LOSS)
        return 1;
    ap_dtype dt = x->g->tensors[op->inputs[0]].dtype;
    return ap_cost_cross_entropy_saved(x->run.cross_entropy, dt) /
           ap_cost_cross_entropy_saved(AP_CE_UNFUSED, dt);
}

/* Transformer Engine's all-gather attention keeps each step's output
 * (out_per_step) for its backward beside the out it copied them into and
 * returned, which the graph counts: one more output shard. The ring keeps
 * out itself, and the all-to-all the out it returns. */
static double allgather_saved_out(const ap_price_ctx *x, const ap_op *op,
                                  const ap_strategy *s)
{
    if (op->kind != AP_OP_ATTENTION || !op->flash || x->run.cp_comm != AP_CP_ALLGATHER ||
        !axes_of(s, shape_of(x, op->inputs[0])[1]))
        return 0;
    return tensor_bytes(x, op->outputs[0]) / tensor_split(x, s, shape_of(x, op->outputs[0]));
}

/* What op keeps for its backward that is no tensor of the graph (masks,
 * statistics, attention's probabilities without flash), at the size of the
 * op's output shard, or of the op's own shard where they have its inputs'
 * shape (attention's statistics, the loss's fp32 softmax); and the copy the
 * all-gather context parallelism keeps. */
static double extra_bytes(const ap_price_ctx *x, const ap_op *op, const ap_strategy *s)
{
    double bytes = 0;
    if (op->saved_extra > 0) {
        double k = op->kind == AP_OP_ATTENTION || op->kind == AP_OP_LOSS
                       ? shard_factor(x, s)
                 : op->noutputs ? tensor_split(x, s, shape_of(x, op->outputs[0])) : 1;
        bytes += op->saved_extra * loss_saved_scale(x, op) * batch_scale(x) / k;
    }
    return bytes + allgather_saved_out(x, op, s);
}

/* Saved activations: each saved tensor at its own shard size, and the
 * op's extras (extra_bytes). With `freed`, only what selective
 * recomputation by module frees (ap_rc_frees): the op's saved inputs made
 * inside a recomputed module, and its own outputs and extras when it is in
 * one. */
static double saved_bytes(const ap_price_ctx *x, int opi, const ap_strategy *s, int freed)
{
    const ap_op *op = &x->g->ops[opi];
    int inside = freed && ap_op_rc_modules(x, opi);
    double bytes = 0;
    for (int i = 0; i < op->ninputs; i++)
        if ((op->saves_in & (1u << i)) &&
            (!freed || ap_rc_frees(x, x->g->tensors[op->inputs[i]].producer, opi)))
            bytes += tensor_bytes(x, op->inputs[i]) * saved_input_scale(x, op, i) /
                     operand_split(x, op, s, op->inputs[i]);
    if (freed && !inside)
        return bytes;
    for (int i = 0; i < op->noutputs; i++)
        if (op->saves_out & (1u << i)) {
            const char *O = shape_of(x, op->outputs[i]);
            double k = tensor_split(x, s, O);
            for (int a = 0; a < 2; a++)
                if (s->rs[a])
                    k *= x->mesh->d[a];
            bytes += tensor_bytes(x, op->outputs[i]) / k;
        }
    return bytes + extra_bytes(x, op, s);
}

static void price_saved(const ap_price_ctx *x, const ap_op *op,
                        const ap_strategy *s, ap_op_cost *c)
{
    c->act_bytes = saved_bytes(x, (int)(op - x->g->ops), s, 0);
}

/* Recomputation frees what a module made (internal tensors; its outputs
 * too where Megatron-Core checkpoints it without its output) but not its
 * inputs, which the checkpoint keeps. */
#define AP_RC_WITHOUT_OUTPUT \
    (AP_MODULE_LAYERNORM | AP_MODULE_MOE_ACT | AP_MODULE_MLA_UP_PROJ)

unsigned ap_op_rc_modules(const ap_price_ctx *x, int op)
{
    if (op < 0)
        return 0;
    return x->g->ops[op].modules & ap_run_rc_modules(&x->run) & ~(unsigned)AP_MODULE_CORE_ATTN;
}

int ap_rc_frees(const ap_price_ctx *x, int prod, int saver)
{
    unsigned m = ap_op_rc_modules(x, prod);
    return m && ((m & AP_RC_WITHOUT_OUTPUT) || (m & ap_op_rc_modules(x, saver)));
}

int ap_expert_op(const ap_graph *g, int opi)
{
    const ap_op *op = &g->ops[opi];
    return op->kind != AP_OP_ROUTER &&
           has_label(op->iter, ap_graph_label_of(g, AP_DIM_EXPERTS));
}

/* The context an op is priced in: under MoE parallel folding an expert op
 * runs on the expert mesh, whose replicas (the expert-data-parallel
 * copies) share the stage's micro-batch as the dense mesh's share it. */
typedef struct {
    ap_price_ctx x;
    ap_mesh mesh;
} expert_ctx;

static const ap_price_ctx *expert_view(const ap_price_ctx *x, int op, expert_ctx *buf)
{
    if (!x->mesh->experts[0] || !ap_expert_op(x->g, op))
        return x;
    ap_mesh_expert_mesh(x->mesh, x->c->gpus_per_node, &buf->mesh);
    buf->x = *x;
    buf->x.mesh = &buf->mesh;
    buf->x.batch = x->batch * replicas_of(x) / replicas_of(&buf->x);
    return &buf->x;
}

double ap_local_experts(const ap_price_ctx *x, int opi, const ap_strategy *s)
{
    expert_ctx view;
    x = expert_view(x, opi, &view);
    const ap_op *op = &x->g->ops[opi];
    if (op->kind != AP_OP_MATMUL || !expert_gemm(x, op))
        return 0;
    char e = ap_graph_label_of(x->g, AP_DIM_EXPERTS);
    return ap_label_size(x, e) / split_of(x, s, e);
}

/* An edge from a dense op to an expert op or back under folding: the
 * tokens stay where they are (the dispatch and combine move them). */
static int folding_boundary(const ap_price_ctx *x, int prod, int cons)
{
    return x->mesh->experts[0] && ap_expert_op(x->g, prod) != ap_expert_op(x->g, cons);
}

void ap_price_op(const ap_price_ctx *x, int opi, const ap_strategy *s,
                 ap_op_cost *c)
{
    expert_ctx view;
    x = expert_view(x, opi, &view);
    const ap_op *op = &x->g->ops[opi];
    memset(c, 0, sizeof *c);
    price_compute(x, op, s, c);
    price_partials(x, op, s, c);
    price_norm_stats(x, op, s, c);
    price_params(x, op, s, c);
    price_saved(x, op, s, c);
    price_fp8_weights(x, op, s, c);
}

/* The layout a producer leaves its output in, per axis: the split label, or 0
 * for replicated. */
static char out_layout(const ap_price_ctx *x, int prod, const ap_strategy *ps,
                       int t, int a)
{
    const ap_op *op = &x->g->ops[prod];
    const char *T = shape_of(x, t);
    char l = ps->axis[a];
    if (!l || x->mesh->d[a] == 1)
        return 0;
    if (has_label(T, l))
        return l;
    if (ps->rs[a])
        return ps->rs[a];
    if (op->kind == AP_OP_DISPATCH || op->kind == AP_OP_COMBINE) {
        /* Dispatch splits tokens into capacity slots; combine gathers expert
         * outputs back to the token layout: the token label stays split. */
        for (const char *p = T; *p; p++) {
            const ap_dim *d = ap_graph_dim(x->g, *p);
            if (d && (d->kind == AP_DIM_CAPACITY || d->kind == AP_DIM_BATCH))
                return *p;
        }
    }
    return 0;
}

/* The layout a consumer needs its input in, per axis. */
static char in_layout(const ap_price_ctx *x, int cons, const ap_strategy *cs,
                      int t, int a)
{
    const ap_op *op = &x->g->ops[cons];
    const char *T = shape_of(x, t);
    char l = cs->axis[a];
    if (!l || x->mesh->d[a] == 1)
        return 0;
    if (label_in(x, op, t, l))
        return label_in(x, op, t, l);
    if (op->kind == AP_OP_DISPATCH || op->kind == AP_OP_COMBINE) {
        for (const char *p = T; *p; p++) {
            const ap_dim *d = ap_graph_dim(x->g, *p);
            if (d && (d->kind == AP_DIM_BATCH || d->kind == AP_DIM_CAPACITY))
                return *p;
        }
    }
    return 0;
}

/* Consumers of a tensor sum their gradient contributions locally before one
 * reduction (autograd accumulates, then the all-reduce runs once), so each
 * consumer edge carries its share of that reduction. */
static int activation_consumers(const ap_graph *g, int t)
{
    int n = g->tensors[t].consumers;
    return n ? n : 1;
}

/* Axes (a mask) on which the edge all-gathers a sequence-parallel tensor
 * into a column-parallel matmul: the producer leaves t split by a sequence
 * label, the consumer needs it whole and splits a label t lacks. Megatron-LM
 * saves the sequence shard there, not the gathered input, and gathers it
 * again in backward for the weight gradient (Korthikanti et al. 2022,
 * section 4.2.2; LinearWithGradAccumulationAndAsyncCommunication). */
static int regather_axes(const ap_price_ctx *x, int t, int prod,
                         const ap_strategy *ps, int cons, const ap_strategy *cs)
{
    if (x->g->ops[cons].kind != AP_OP_MATMUL)
        return 0;
    int mask = 0;
    for (int a = 0; a < 2; a++) {
        char p = out_layout(x, prod, ps, t, a);
        const ap_dim *d = p ? ap_graph_dim(x->g, p) : NULL;
        char l = cs->axis[a];
        if (d && d->kind == AP_DIM_SEQ && !in_layout(x, cons, cs, t, a) &&
            l && !has_label(shape_of(x, t), l))
            mask |= 1 << a;
    }
    return mask;
}

/* Bytes of t on one rank of the producer's layout, split only by the axis
 * other than a: what an all-gather along a moves. */
static double gather_bytes(const ap_price_ctx *x, int t, int prod,
                           const ap_strategy *ps, int a)
{
    char other = out_layout(x, prod, ps, t, 1 - a);
    return tensor_bytes(x, t) /
           (other && x->mesh->d[1 - a] > 1 ? x->mesh->d[1 - a] : 1);
}

/* What a sequence-parallel gather into cons moves per byte of t: an FP8
 * linear layer's input is quantized on its shard and gathered in FP8, in the
 * forward and again in the backward (TE saves the FP8 shard). */
static double gather_scale(const ap_price_ctx *x, int t, int cons)
{
    const ap_op *op = &x->g->ops[cons];
    if (!runs_fp8(x, op) || op->inputs[0] != t)
        return 1;
    return 1.0 / ap_dtype_size(x->g->tensors[t].dtype);
}

/* How an FP8 linear layer's input cast changes when the edge gathers that
 * input from sequence shards: the op priced it arriving whole (fp8_casts);
 * the shard's cast and the gathered tensor's transpose replace that, shared
 * with the fused module's other projections. Negative in the forward,
 * positive in the backward, less in all. */
static double sp_cast(const ap_price_ctx *x, int t, int cons, const ap_strategy *cs,
                      int mask, double *bwd)
{
    const ap_op *op = &x->g->ops[cons];
    *bwd = 0;
    if (!mask || !runs_fp8(x, op) || op->inputs[0] != t)
        return 0;
    double k = (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1);
    gemm_dims d = dims_of(x, op, cs);
    double in = d.batch * d.m * d.k, share = fp8_readers(x->g, t);
    double whole_f, whole_b, shard_f, shard_b;
    input_cast(x, op, in, 1, &whole_f, &whole_b);
    input_cast(x, op, in, k, &shard_f, &shard_b);
    *bwd = (shard_b - whole_b) / share;
    return (shard_f - whole_f) / share;
}

double ap_price_edge_cast(const ap_price_ctx *x, int t, int prod, const ap_strategy *ps,
                          int cons, const ap_strategy *cs, double *bwd)
{
    expert_ctx view;
    *bwd = 0;
    if (folding_boundary(x, prod, cons))
        return 0;
    x = expert_view(x, cons, &view);
    return sp_cast(x, t, cons, cs, regather_axes(x, t, prod, ps, cons, cs), bwd);
}

/* The backward's second all-gather of a saved sequence shard, on the axes
 * in mask (regather_axes); like the forward gather, one serves every
 * consumer, each edge carries its share. Under --tp-comm-overlap, into a
 * linear layer TE overlaps, it runs beside a GEMM. */
static double regather_time(const ap_price_ctx *x, int t, int prod,
                            const ap_strategy *ps, int cons,
                            const ap_strategy *cs, int mask)
{
    int ub = ub_linear(x, cons) ? mask : 0, async = async_linear(x, cons);
    double gemm = ub || async ? fused_gemm(x, t, cons, cs) : 0;
    double time = 0;
    for (int a = 0; a < 2; a++) {
        if (!(mask & (1 << a)))
            continue;
        double ag = coll(x, AP_COLL_ALLGATHER, 1 << a,
                         gather_bytes(x, t, prod, ps, a) * gather_scale(x, t, cons));
        /* Under --tp-comm-overlap it runs beside the data-gradient GEMM
         * (TE's bulk qkv_dgrad, fc1_dgrad), which needs no gathered input. */
        if (ub & (1 << a))
            ag = ap_tp_overlap_exposed(x->c, AP_UB_BULK, ag, gemm, x->mesh->d[a]);
        else if (async)
            ag = ap_tp_async_exposed(ag, gemm);
        time += ag / activation_consumers(x->g, t);
    }
    return time;
}

double ap_price_edge_saved(const ap_price_ctx *x, int t, int prod,
                           const ap_strategy *ps, int cons,
                           const ap_strategy *cs, double *regather)
{
    expert_ctx view;
    if (folding_boundary(x, prod, cons)) {
        if (regather)
            *regather = 0;
        return 0;
    }
    x = expert_view(x, cons, &view);
    int mask = regather_axes(x, t, prod, ps, cons, cs);
    if (regather)
        *regather = regather_time(x, t, prod, ps, cons, cs, mask);
    const ap_op *op = &x->g->ops[cons];
    int saver = -1;
    for (int i = 0; i < op->ninputs; i++)
        if (op->inputs[i] == t && (op->saves_in & (1u << i)))
            saver = i;
    if (!mask || saver < 0)
        return 0;
    double saved = tensor_bytes(x, t) * saved_input_scale(x, op, saver) /
                   operand_split(x, op, cs, t);
    double k = (mask & 1 ? x->mesh->d[0] : 1) * (mask & 2 ? x->mesh->d[1] : 1);
    return saved / k - saved;
}

double ap_price_edge(const ap_price_ctx *x, int t, int prod,
                     const ap_strategy *ps, int cons, const ap_strategy *cs,
                     double *bwd)
{
    expert_ctx view;
    if (folding_boundary(x, prod, cons)) {
        if (bwd)
            *bwd = 0;
        return 0;
    }
    x = expert_view(x, cons, &view);
    const char *T = shape_of(x, t);
    double full = tensor_bytes(x, t);
    double cost = 0, back = 0;
    int sp = regather_axes(x, t, prod, ps, cons, cs);
    /* The sequence-parallel collectives TE overlaps with the GEMMs. */
    int ub = ub_linear(x, cons) ? sp : 0, async = async_linear(x, cons);
    double gemm = ub || async ? fused_gemm(x, t, cons, cs) : 0;
    for (int a = 0; a < 2; a++) {
        if (x->mesh->d[a] == 1)
            continue;
        char p = out_layout(x, prod, ps, t, a);
        char q = in_layout(x, cons, cs, t, a);
        /* Bytes of the tensor on one rank, split only by the other axis. */
        char other = out_layout(x, prod, ps, t, 1 - a);
        double bytes = full / (other && x->mesh->d[1 - a] > 1 ? x->mesh->d[1 - a] : 1);
        int mask = 1 << a;
        if (p && !q) {
            /* One gathered copy serves every consumer that needs it, as
             * Megatron gathers a sequence-parallel norm's output once for
             * q, k and v; each edge carries its share. Under
             * --tp-comm-overlap the gather is ring-exchanged into the
             * forward GEMM (qkv_fprop, fc1_fprop). */
            double scale = sp & mask ? gather_scale(x, t, cons) : 1;
            double ag = coll(x, AP_COLL_ALLGATHER, mask, bytes * scale);
            if (ub & mask)
                ag = ap_tp_overlap_exposed(x->c, AP_UB_RING, ag, gemm, x->mesh->d[a]);
            if (scale < 1)
                ag += tp_amax(x, mask);
            cost += ag / activation_consumers(x->g, t);
        } else if (!p && q) {
            back += coll(x, AP_COLL_ALLGATHER, mask, bytes);
        } else if (p && q && p != q) {
            double a2a = coll(x, AP_COLL_ALLTOALL, mask, bytes / x->mesh->d[a]);
            cost += a2a;
            back += a2a;
        }
        /* The consumer splits a label this tensor lacks: the tensor's
         * gradient is a partial sum, reduced to the producer's layout. */
        char l = cs->axis[a];
        int dispatchy = x->g->ops[cons].kind == AP_OP_DISPATCH ||
                        x->g->ops[cons].kind == AP_OP_COMBINE;
        if (l && !has_label(T, l) && !q && !dispatchy) {
            double red = coll(x, p ? AP_COLL_REDUCESCATTER : AP_COLL_ALLREDUCE, mask,
                              bytes);
            /* The data gradient's reduce-scatter runs beside the weight
             * gradient's GEMM (TE's bulk qkv_wgrad, fc1_wgrad). */
            if (ub & mask)
                red = ap_tp_overlap_exposed(x->c, AP_UB_BULK, red, gemm, x->mesh->d[a]);
            else if (async)
                red = ap_tp_async_exposed(red, gemm);
            back += red / activation_consumers(x->g, t);
        }
    }
    back += regather_time(x, t, prod, ps, cons, cs, sp);
    double cast_back, cast = sp_cast(x, t, cons, cs, sp, &cast_back);
    cost += cast;
    back += cast_back;
    if (bwd)
        *bwd = back;
    return cost + back;
}

double ap_price_op_freed(const ap_price_ctx *x, int op, const ap_strategy *s)
{
    expert_ctx view;
    x = expert_view(x, op, &view);
    unsigned mods = ap_run_rc_modules(&x->run);
    double freed = mods & ~(unsigned)AP_MODULE_CORE_ATTN ? saved_bytes(x, op, s, 1) : 0;
    /* Recomputing core_attn runs the attention kernel under a checkpoint
     * that keeps its inputs and returns its output (which the output
     * projection saves): what the kernel kept for itself, its statistics
     * or, without flash, its probabilities and dropout mask, is gone
     * (Korthikanti et al.'s 5as^2b). */
    if ((mods & AP_MODULE_CORE_ATTN) && x->g->ops[op].kind == AP_OP_ATTENTION &&
        !ap_op_rc_modules(x, op))
        freed += extra_bytes(x, &x->g->ops[op], s);
    return freed;
}
