/* evaluate.c -- the price of a whole plan: stages, pipeline, step.
 *
 * Search and estimate share this code, so a plan the planner finds and a
 * hand-tuned Megatron configuration are priced by the same rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/layout.h"
#include "planner/planner.h"
#include "planner/recompute.h"

static double seq_len(const ap_graph *g)
{
    char s = ap_graph_label_of(g, AP_DIM_SEQ);
    return s ? (double)ap_graph_dim(g, s)->size : 1;
}

static double graph_batch(const ap_graph *g)
{
    char b = ap_graph_label_of(g, AP_DIM_BATCH);
    return b ? (double)ap_graph_dim(g, b)->size : 1;
}

static void add_kinds(ap_comm_kinds *to, const ap_comm_kinds *k, double times)
{
    to->tp += k->tp * times;
    to->reshard += k->reshard * times;
    to->expert += k->expert * times;
    to->context += k->context * times;
    to->param_gather += k->param_gather * times;
    to->grad_reduce += k->grad_reduce * times;
    to->amax += k->amax * times;
}

/* Of a block's `times` layers in a stage under full recomputation: those
 * whose forward is redone, and those whose input is kept in place of their
 * activations (ap_recompute_layer). */
typedef struct {
    double recomputed, kept;
} rc_count;

/* What selective recomputation redoes of one layer of a block: the
 * attention's forward where core_attn is among the run's modules, and the
 * other modules' forward (ap_block_point.rc_fwd). */
double ap_selective_fwd(const ap_run_settings *r, const ap_block_point *bp)
{
    double attn = ap_run_rc_modules(r) & AP_MODULE_CORE_ATTN ? bp->attn_fwd : 0;
    return attn + bp->rc_fwd;
}

/* What recomputation adds to the backward of `times` layers of a block:
 * the forward of those full recomputation redoes, or what selective
 * recomputation redoes. */
static double recompute_bwd(const ap_run_settings *r, const ap_block_point *bp,
                            ap_recompute rc, const rc_count *n, double times)
{
    return rc == AP_RECOMPUTE_FULL ? bp->fwd * n->recomputed
         : rc == AP_RECOMPUTE_SELECTIVE ? ap_selective_fwd(r, bp) * times : 0;
}

/* Adds to *act what `times` layers of a block keep for backward: under full
 * recomputation a group keeps only its first layer's input, and a layer
 * left out of it everything; under selective, everything but what its
 * modules free; otherwise everything. */
static void add_kept(double *act, const ap_block_point *bp, ap_recompute rc,
                     const rc_count *n, double times)
{
    if (rc != AP_RECOMPUTE_FULL) {
        double freed = rc == AP_RECOMPUTE_SELECTIVE ? bp->rc_freed : 0;
        *act += (bp->act_bytes - freed) * times;
        return;
    }
    *act += bp->input_bytes * n->kept;
    if (times > n->recomputed)
        *act += bp->act_bytes * (times - n->recomputed);
}

static void accumulate(ap_stage *st, const ap_run_settings *r, const ap_block_point *bp,
                       double times, ap_recompute rc, const rc_count *n)
{
    st->fwd += bp->fwd * times;
    st->bwd += bp->bwd * times;
    st->comm_fwd += bp->comm_fwd * times;
    st->comm_bwd += bp->comm_bwd * times;
    add_kinds(&st->kinds, &bp->kfwd, times);
    add_kinds(&st->kinds, &bp->kbwd, times);
    st->grad_sync += bp->grad_sync * times;
    st->tied_sync += bp->tied_sync * times;
    st->param_sync += bp->param_sync * times;
    st->param_buckets += bp->param_buckets * times;
    st->param_bytes += bp->param_bytes * times;
    st->fp8_weight_bytes += bp->fp8_weight_bytes * times;
    st->grad_bytes += bp->grad_bytes * times;
    st->opt_bytes += bp->opt_bytes * times;
    st->flops += bp->flops * times;
    /* Backward first redoes the forward of a recomputed layer,
     * collectives included. */
    st->bwd += recompute_bwd(r, bp, rc, n, times);
    add_kept(&st->act_bytes, bp, rc, n, times);
    if (rc == AP_RECOMPUTE_FULL) {
        st->comm_bwd += bp->comm_fwd * n->recomputed;
        add_kinds(&st->kinds, &bp->kfwd, n->recomputed);
        st->recompute_flops += bp->flops * n->recomputed;
        st->recomputed_layers += (int)n->recomputed;
    } else if (rc == AP_RECOMPUTE_SELECTIVE) {
        int attn = (ap_run_rc_modules(r) & AP_MODULE_CORE_ATTN) != 0;
        st->comm_bwd += bp->rc_comm * times;
        add_kinds(&st->kinds, &bp->rc_kinds, times);
        st->recompute_flops += (bp->rc_flops + attn * bp->attn_flops) * times;
    }
}

static int class_index(const ap_plan *p, int layer_class)
{
    for (int k = 0; k < p->nclasses; k++)
        if (p->classes[k] == layer_class)
            return k;
    return -1;
}

/* The stage holding the pieces before the layers (pre) or after them
 * (post): the first and the last under every schedule, interleaved ones
 * too (the first chunk's embedding, the last chunk's head); -1 if none. */
static int stage_with(const ap_plan *p, int post)
{
    for (int i = 0; i < p->nstages; i++)
        if (post ? p->stages[i].has_post : p->stages[i].has_pre)
            return i;
    return -1;
}

int ap_plan_head_apart(const ap_plan *p, const ap_cluster *c, int *embed_group_nodes)
{
    int pre = stage_with(p, 0), post = stage_with(p, 1);
    int G = c->gpus_per_node > 0 ? c->gpus_per_node : 1;
    *embed_group_nodes = 1;
    if (pre < 0 || post < 0 || pre == post)
        return 0;
    if (p->stages[pre].first_rank / G != p->stages[post].first_rank / G)
        *embed_group_nodes = 2;
    return 1;
}

static int stage_index(const ap_plan *p, const ap_stage *st)
{
    return (int)(st - p->stages);
}

/* The model layer of the stage's i-th layer. */
static int layer_of(const ap_plan *p, const ap_stage *st, int i)
{
    int chunk, pos, layer;
    ap_stage_chunk_of(p, stage_index(p, st), i, &chunk, &pos, &layer);
    return layer;
}

/* Layers of layer class k in stage st, and under full recomputation how
 * many of them are recomputed and keep their input. */
static double class_layers(const ap_graph *g, const ap_plan *p, const ap_stage *st,
                           int k, rc_count *n)
{
    double times = 0;
    n->recomputed = n->kept = 0;
    for (int i = 0; i < st->nlayers; i++) {
        if (class_index(p, g->layer_class[layer_of(p, st, i)]) != k)
            continue;
        times++;
        if (st->recompute != AP_RECOMPUTE_FULL)
            continue;
        ap_rc_layer l;
        ap_recompute_layer(p, st, i, &l);
        n->recomputed += l.recomputed;
        n->kept += l.keeps_input;
    }
    return times;
}

/* The activations a recomputation brings back at once: the most any group
 * of layers recomputed together saves, live while its backward runs. */
static double recompute_working_set(const ap_graph *g, const ap_plan *p,
                                    const ap_stage *st)
{
    double most = 0, sum = 0;
    int group = -1;
    for (int i = 0; i < st->nlayers; i++) {
        ap_rc_layer l;
        ap_recompute_layer(p, st, i, &l);
        if (!l.recomputed)
            continue;
        int b = 2 + class_index(p, g->layer_class[layer_of(p, st, i)]);
        const ap_block *blk = &st->blocks[b];
        double act = blk->nops && blk->npoints ? blk->points[st->point[b]].act_bytes : 0;
        sum = l.group == group ? sum + act : act;
        group = l.group;
        most = fmax(most, sum);
    }
    return most;
}

/* What merging the forward of one micro-batch with the backward of
 * another saves on `times` layers of a block (ap_moe_pair_time): the two
 * halves alone less the pair. Selective recomputation redoes attention at
 * the head of the backward's attention node. */
static double pair_save(const ap_price_ctx *x, const ap_plan *p, const ap_block *blk,
                        const ap_block_point *bp, ap_recompute rc, double times)
{
    ap_moe_phases f, b;
    ap_moe_block_phases(x, blk->ops, blk->nops, bp->strat, &f, &b);
    if (rc == AP_RECOMPUTE_SELECTIVE)
        b.attn += ap_selective_fwd(&p->run, bp);
    double alone = f.attn + f.dispatch + f.expert + f.combine + b.attn + b.dispatch +
                   b.expert + b.combine;
    return (alone - ap_moe_pair_time(&f, &b, p->run.delay_wgrad)) * times;
}

/* A matmul of the ops after the layers that reads a parameter: the output
 * layer, whose weight gradient --defer-embedding-wgrad-compute defers. */
static int is_output_layer(const ap_graph *g, int op)
{
    const ap_op *o = &g->ops[op];
    if (o->kind != AP_OP_MATMUL || o->layer >= 0)
        return 0;
    for (int i = 0; i < o->ninputs; i++)
        if (g->tensors[o->inputs[i]].role == AP_TENSOR_PARAM)
            return 1;
    return 0;
}

/* The output layer's weight-gradient GEMM: its FLOPs are its forward
 * GEMM's, so its forward compute time under the same sharding. While it
 * waits, ColumnParallelLinear keeps the layer's input and the gradient of
 * its output for it (embedding_activation_buffer, grad_output_buffer):
 * *bytes per micro-batch. */
static double output_wgrad(const ap_price_ctx *x, const ap_block *blk,
                           const ap_block_point *bp, double *bytes)
{
    double t = 0;
    *bytes = 0;
    for (int i = 0; i < blk->nops; i++) {
        int op = blk->ops[i];
        if (!is_output_layer(x->g, op))
            continue;
        ap_op_cost oc;
        ap_price_op(x, op, &bp->strat[i], &oc);
        t += oc.fwd;
        const ap_op *o = &x->g->ops[op];
        *bytes += ap_operand_bytes(x, op, &bp->strat[i], o->inputs[0]) +
                  ap_operand_bytes(x, op, &bp->strat[i], o->outputs[0]);
    }
    return t;
}

/* For the reports' host-time caveat: how many experts a GPU runs in a
 * grouped GEMM, and how short the GEMM of one of them is. */
static void note_experts(const ap_price_ctx *x, int op, const ap_strategy *s,
                         ap_stage *st)
{
    double n = ap_local_experts(x, op, s);
    if (n <= 0)
        return;
    ap_op_cost oc;
    ap_price_op(x, op, s, &oc);
    double each = oc.fwd / n;
    if (st->local_experts == 0 || each < st->expert_gemm_s)
        st->expert_gemm_s = each;
    st->local_experts = fmax(st->local_experts, n);
}

/* The block point a stage prices block b with, or NULL where it has none. */
static const ap_block_point *point_of(const ap_stage *st, int b)
{
    const ap_block *blk = &st->blocks[b];
    return blk->nops && blk->npoints ? &blk->points[st->point[b]] : NULL;
}

/* The recomputation block b of a stage runs under: the stage's for its
 * layers; for the pieces before and after them selective recomputation
 * alone, which reaches the layers of multi-token-prediction modules (full
 * recomputation checkpoints the decoder's layers only). */
static ap_recompute block_recompute(const ap_stage *st, int b)
{
    return b >= 2 || st->recompute == AP_RECOMPUTE_SELECTIVE ? st->recompute
                                                             : AP_RECOMPUTE_NONE;
}

/* One layer's share of its chunk: what accumulate() adds for it. */
static void add_layer(const ap_price_ctx *x, const ap_plan *p, const ap_stage *st, int i,
                      int b, int c, double *act)
{
    const ap_block_point *bp = point_of(st, b);
    if (!bp)
        return;
    rc_count n = {0, 0};
    if (st->recompute == AP_RECOMPUTE_FULL) {
        ap_rc_layer l;
        ap_recompute_layer(p, st, i, &l);
        n.recomputed = l.recomputed;
        n.kept = l.keeps_input;
    }
    st->chunk_fwd[c] += bp->fwd;
    st->chunk_bwd[c] += bp->bwd;
    st->chunk_bwd[c] += recompute_bwd(&p->run, bp, st->recompute, &n, 1);
    add_kept(&act[c], bp, st->recompute, &n, 1);
    if (p->run.moe_a2a_overlap)
        st->chunk_save[c] += pair_save(x, p, &st->blocks[b], bp, st->recompute, 1);
}

static void free_chunks(ap_stage *st)
{
    double **a[] = {&st->chunk_fwd, &st->chunk_bwd, &st->chunk_save, &st->chunk_act};
    for (int i = 0; i < 4; i++) {
        free(*a[i]);
        *a[i] = NULL;
    }
}

/* Fresh zeroed arrays for v chunks: the search prices one plan again at
 * other chunk counts (search.c), so earlier ones are not reused. */
static int alloc_chunks(ap_stage *st, int v)
{
    free_chunks(st);
    st->chunk_fwd = calloc((size_t)v, sizeof(double));
    st->chunk_bwd = calloc((size_t)v, sizeof(double));
    st->chunk_save = calloc((size_t)v, sizeof(double));
    st->chunk_act = calloc((size_t)v, sizeof(double));
    return st->chunk_fwd && st->chunk_bwd && st->chunk_save && st->chunk_act ? 0 : -1;
}

/* Under interleaving, each model chunk's forward and backward with its own
 * layers (ap_stage_chunk_of: a layout's, or the stage's span cut into
 * pieces), the embedding on the first chunk and the head on the last, as
 * Megatron-Core builds them; its share of the stage's activations (the
 * pipeline's act_share); and under moe_a2a_overlap what its merged pairs
 * save. They add up to the stage's fwd, bwd and a2a_save. */
static int price_chunks(const ap_price_ctx *x, const ap_plan *p, ap_stage *st,
                        const double amax[2], char *err)
{
    int v = p->vchunks, s = stage_index(p, st);
    if (alloc_chunks(st, v)) {
        snprintf(err, AP_ERR_LEN, "out of memory pricing the model chunks");
        return AP_EINTERNAL;
    }
    double *share = st->chunk_act;
    for (int b = 0; b < 2; b++) {
        const ap_block_point *bp = point_of(st, b);
        int c = b == 0 ? 0 : v - 1;
        if (!bp || !(b == 0 ? st->has_pre : st->has_post))
            continue;
        rc_count n = {0, 0};
        st->chunk_fwd[c] += bp->fwd;
        st->chunk_bwd[c] += bp->bwd + recompute_bwd(&p->run, bp, block_recompute(st, b), &n, 1);
        add_kept(&share[c], bp, block_recompute(st, b), &n, 1);
    }
    for (int i = 0; i < st->nlayers; i++) {
        int chunk, pos, layer;
        ap_stage_chunk_of(p, s, i, &chunk, &pos, &layer);
        add_layer(x, p, st, i, 2 + class_index(p, x->g->layer_class[layer]), chunk, share);
    }
    for (int c = 0; c < v; c++) {
        st->chunk_fwd[c] += amax[0];
        st->chunk_bwd[c] += amax[1];
    }
    double total = 0;
    for (int c = 0; c < v; c++)
        total += share[c];
    for (int c = 0; c < v; c++)
        share[c] = total > 0 ? share[c] / total : 1.0 / v;
    return AP_OK;
}

/* Under delayed scaling every exit from fp8_autocast all-reduces the amaxes
 * of the region's FP8 tensors, one message synchronous with the GPU's work,
 * over Megatron-Core's amax group: the stage's tensor-, data- and
 * context-parallel ranks. The backward of the region's first module does the
 * same for the gradients' (TE's reduce_and_update_fp8_tensors). Megatron-Core
 * enters the autocast once per model chunk, so each chunk pays one each way
 * per micro-batch: amax[0] forward, amax[1] backward. The message holds an
 * fp32 per tensor: input, weight and output of each FP8 GEMM forward, the
 * two gradients backward. */
static void amax_reduce(const ap_cluster *c, const ap_plan *p, const ap_stage *st,
                        double fp8_gemms, double amax[2])
{
    amax[0] = amax[1] = 0;
    if (!p->run.fp8 || p->run.fp8_recipe != AP_FP8_DELAYED || !(fp8_gemms > 0))
        return;
    /* The nodes the stage's mesh spans, its replicas included. */
    int nodes = st->mesh.replicas > 1 ? st->mesh.sync_nodes[3] : st->mesh.nodes[2];
    double v = p->vchunks > 1 ? p->vchunks : 1;
    amax[0] = ap_cost_allreduce_small(c, st->ngpus, nodes, 3 * 4 * fp8_gemms / v);
    amax[1] = ap_cost_allreduce_small(c, st->ngpus, nodes, 2 * 4 * fp8_gemms / v);
}

static double fp8_gemms_of(const ap_graph *g, const ap_block *blk)
{
    double n = 0;
    for (int i = 0; i < blk->nops; i++)
        n += ap_fp8_linear(g, blk->ops[i]);
    return n;
}

static int price_stage(const ap_graph *g, const ap_cluster *c, const ap_plan *p,
                       ap_stage *st, char *err)
{
    /* Each data-parallel replica of the mesh runs its share of the
     * micro-batch; one replica's price is every GPU's. */
    double replicas = st->mesh.replicas > 1 ? st->mesh.replicas : 1;
    ap_price_ctx x = {.g = g, .c = c, .mesh = &st->mesh, .batch = p->micro_batch / replicas,
                      .nmicro = p->nmicro, .zero = p->zero, .run = p->run,
                      .serial_grad = p->serial_grad_sync};
    x.head_apart = ap_plan_head_apart(p, c, &x.embed_group_nodes);
    st->fwd = st->bwd = st->comm_fwd = st->comm_bwd = st->grad_sync = st->tied_sync = 0;
    st->param_sync = st->param_buckets = 0;
    st->param_bytes = st->act_bytes = st->flops = st->fp8_weight_bytes = 0;
    st->grad_bytes = st->opt_bytes = 0;
    st->recompute_flops = 0;
    st->recomputed_layers = 0;
    st->a2a_save = st->defer_wgrad = st->defer_bytes = 0;
    st->local_experts = st->expert_gemm_s = 0;
    memset(&st->kinds, 0, sizeof st->kinds);
    double fp8_gemms = 0, amax[2];
    for (int b = 0; b < 2 + p->nclasses; b++) {
        ap_block *blk = &st->blocks[b];
        if (!blk->nops || !blk->npoints)
            continue;
        rc_count n = {0, 0};
        double times = b == 0 ? st->has_pre : b == 1 ? st->has_post
                                                     : class_layers(g, p, st, b - 2, &n);
        if (times == 0)
            continue;
        if (p->run.fp8)
            fp8_gemms += fp8_gemms_of(g, blk) * times;
        ap_block_point *bp = &blk->points[st->point[b]];
        ap_strategy *strat = bp->strat;
        ap_block_price(&x, blk->ops, blk->nops, strat, bp);
        bp->strat = strat;
        accumulate(st, &p->run, bp, times, block_recompute(st, b), &n);
        if (p->run.moe_a2a_overlap && b >= 2)
            st->a2a_save += pair_save(&x, p, blk, bp, st->recompute, times);
        if (b == 1 && p->run.defer_wgrad && p->nstages > 1)
            st->defer_wgrad = output_wgrad(&x, blk, bp, &st->defer_bytes);
        for (int i = 0; i < blk->nops; i++)
            note_experts(&x, blk->ops[i], &strat[i], st);
    }
    /* One group's activations are live while it is recomputed; the memory
     * of a stage counts act_bytes per micro-batch in flight, so the working
     * set, held once, is spread over them. */
    if (st->recompute == AP_RECOMPUTE_FULL)
        st->act_bytes += recompute_working_set(g, p, st) / fmax(st->inflight, 1);
    amax_reduce(c, p, st, fp8_gemms, amax);
    double v = p->vchunks > 1 ? p->vchunks : 1;
    st->fwd += v * amax[0];
    st->bwd += v * amax[1];
    st->comm_fwd += v * amax[0];
    st->comm_bwd += v * amax[1];
    st->kinds.amax += v * (amax[0] + amax[1]);
    if (p->vchunks > 1)
        return price_chunks(&x, p, st, amax, err);
    free_chunks(st);
    return AP_OK;
}

/* Bytes a stage sends to the next: its last layer's output, which is the next
 * layer's input at the layout the next stage's first op keeps. */
static double boundary_bytes(const ap_plan *p, const ap_stage *st)
{
    for (int b = 2; b < 2 + p->nclasses; b++)
        if (st->blocks[b].npoints)
            return st->blocks[b].points[st->point[b]].input_bytes;
    return 0;
}

/* Stage i sends to stage i + 1; under interleaving the last stage also
 * sends each chunk's output back to the first stage's next chunk. */
static void price_p2p(const ap_cluster *c, const ap_plan *p)
{
    int G = c->gpus_per_node;
    for (int i = 0; i < p->nstages; i++) {
        ap_stage *st = &p->stages[i];
        st->p2p = 0;
        if (i + 1 == p->nstages && !(p->vchunks > 1 && p->nstages > 1))
            continue;
        const ap_stage *nx = &p->stages[(i + 1) % p->nstages];
        int nodes = (st->first_rank + st->ngpus - 1) / G == nx->first_rank / G &&
                    st->first_rank / G == (nx->first_rank + nx->ngpus - 1) / G ? 1 : 2;
        st->p2p = ap_cost_sendrecv(c, nodes, boundary_bytes(p, st));
    }
}

/* how: 0 every event, 1 the summary (summary_only), 2 a lower bound of
 * the schedule (bound_only). */
static int simulate(const ap_plan *p, int how, ap_pipe_result *r, char *err)
{
    /* Under interleaving each stage runs the chunks price_chunks priced:
     * its span cut into v pieces, or a layout's chunk_layers. */
    int v = p->vchunks > 1 ? p->vchunks : 1;
    if (v > 1 && p->nstages > 0 && !p->stages[0].chunk_fwd) {
        snprintf(err, AP_ERR_LEN, "pipeline: the plan's chunks are not priced (a bug)");
        return AP_EINTERNAL;
    }
    size_t n = p->nstages > 0 ? (size_t)p->nstages * (size_t)v : 1;
    double *fwd = calloc(n, sizeof *fwd);
    double *bwd = calloc(n, sizeof *bwd);
    double *p2p = calloc(n, sizeof *p2p);
    double *save = p->run.moe_a2a_overlap ? calloc(n, sizeof *save) : NULL;
    int deferring = p->run.defer_wgrad && p->nstages > 1;
    double *defer = deferring ? calloc(n, sizeof *defer) : NULL;
    int chunked = v > 1;
    double *share = chunked ? calloc(n, sizeof *share) : NULL;
    if (!fwd || !bwd || !p2p || (p->run.moe_a2a_overlap && !save) || (deferring && !defer) ||
        (chunked && !share)) {
        free(fwd);
        free(bwd);
        free(p2p);
        free(save);
        free(defer);
        free(share);
        snprintf(err, AP_ERR_LEN, "out of memory simulating the pipeline");
        return AP_EINTERNAL;
    }
    for (int c = 0; c < v; c++)
        for (int i = 0; i < p->nstages; i++) {
            const ap_stage *st = &p->stages[i];
            size_t k = (size_t)c * p->nstages + i;
            fwd[k] = chunked ? st->chunk_fwd[c] : st->fwd;
            bwd[k] = chunked ? st->chunk_bwd[c] : st->bwd;
            p2p[i] = st->p2p;
            if (save)
                save[k] = chunked ? st->chunk_save[c] : st->a2a_save;
            if (share)
                share[k] = st->chunk_act[c];
            /* The output layer's deferred weight gradient is the head's,
             * on the last chunk. */
            if (defer)
                defer[k] = c == v - 1 ? st->defer_wgrad : 0;
        }
    ap_pipe_spec spec = {.schedule = p->schedule, .nstages = p->nstages, .nmicro = p->nmicro,
                         .vchunks = v, .fwd = fwd, .bwd = bwd, .p2p = p2p, .pair_save = save,
                         .defer = defer, .defer_limit = p->run.wgrad_deferral_limit,
                         .act_share = share, .summary_only = how == 1,
                         .bound_only = how == 2};
    int rc = ap_pipe_simulate(&spec, r, err);
    free(fwd);
    free(bwd);
    free(p2p);
    free(save);
    free(defer);
    free(share);
    return rc;
}

int ap_plan_simulate(const ap_plan *p, ap_pipe_result *r, char *err)
{
    return simulate(p, 0, r, err);
}

/* Adam's update streams every model state of the GPU's shard through HBM
 * once for reading and once for writing; FP8 weight copies are no state of
 * its own (the first micro-batch's cast refreshes them). Optimizer states
 * kept in a narrower dtype than fp32 are streamed through an fp32 copy
 * (ap_opt_step_bytes): their elements, opt_bytes over their width, each
 * move that much more than read and write of the state alone. */
static double optimizer_time(const ap_cluster *c, const ap_plan *p, const ap_stage *st)
{
    double states = st->param_bytes - st->fp8_weight_bytes;
    double extra = 0;
    if (!ap_opt_dtypes_fp32(&p->run.opt)) {
        double width = ap_opt_state_bytes(&p->run.opt);
        extra = st->opt_bytes / width * (ap_opt_step_bytes(&p->run.opt) - 2 * width);
    }
    return ap_cost_memop(c, states, 2 * states + extra);
}

/* The exposed part of the stage's parameter all-gather. Without
 * --overlap-param-gather Megatron-LM's distributed optimizer gathers every
 * bucket right after the step, synchronously: all of it. With it, the next
 * iteration's forward pre-hooks do it: the first module to run finds its
 * bucket not dispatched, dispatches it and waits (exposed), and each wait
 * dispatches the next bucket, whose gather then runs beside the forward of
 * the layers in the bucket before it (param_and_grad_buffer.py,
 * finish_param_sync). With A the gather, n its buckets and F the stage's
 * forward of the first micro-batch, spread evenly over the buckets, each of
 * the n - 1 later buckets waits max(0, A/n - F/n):
 *   exposed = A/n + max(0, (n - 1)/n * (A - F)).
 * Later micro-batches find their parameters gathered. */
int ap_plan_param_gather_overlapped(const ap_plan *p)
{
    return !p->serial_param_gather && p->zero == AP_ZERO_1;
}

static double param_gather_exposed(const ap_plan *p, const ap_stage *st)
{
    double a = st->param_sync;
    if (a <= 0 || !ap_plan_param_gather_overlapped(p))
        return a;
    double n = fmax(1, ceil(st->param_buckets - 1e-9));
    return a / n + fmax(0, (n - 1) / n * (a - st->fwd));
}

/* The exposed part of the overlapped data-parallel reduction `dp`: behind
 * the last micro-batch's backward, and under interleaving chunk by chunk,
 * each chunk after the first as one bucket (ap_pipe_grad_reduce_exposed). */
static double reduce_exposed(const ap_plan *p, const ap_stage *st, double dp)
{
    int v = p->vchunks > 1 && p->nstages > 1 ? p->vchunks : 1;
    int group = p->nmicro < p->nstages ? p->nmicro : p->nstages;
    return ap_pipe_grad_reduce_exposed(dp, st->bwd, v, group);
}

static void predict(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                    const ap_pipe_result *r)
{
    double sync = 0, opt = 0, mem = 0, p2p = 0, sync_total = 0, tied = 0;
    double gather = 0, gather_total = 0;
    int slow = 0;
    for (int i = 0; i < p->nstages; i++) {
        ap_stage *st = &p->stages[i];
        /* Gradient reduction overlaps the last micro-batch's backward, or
         * waits for it to end (Megatron-LM without --overlap-grad-reduce).
         * The embedding group's all-reduce of tied weights follows it
         * (finalize_model_grads), hidden behind nothing. The parameter
         * all-gather comes after the step (param_gather_exposed). */
        double dp = fmax(0, st->grad_sync - st->tied_sync - st->param_sync);
        st->param_sync_exposed = param_gather_exposed(p, st);
        st->grad_sync_exposed = st->tied_sync + st->param_sync_exposed +
                                (p->serial_grad_sync ? dp : reduce_exposed(p, st, dp));
        st->optimizer = optimizer_time(c, p, st);
        if (st->grad_sync_exposed > sync) {
            tied = st->tied_sync;
            gather = st->param_sync_exposed;
            gather_total = st->param_sync;
        }
        sync = fmax(sync, st->grad_sync_exposed);
        sync_total = fmax(sync_total, st->grad_sync);
        opt = fmax(opt, st->optimizer);
        mem = fmax(mem, st->mem_bytes);
        p2p = fmax(p2p, 2 * p->nmicro * st->p2p);
        if (st->fwd + st->bwd > p->stages[slow].fwd + p->stages[slow].bwd)
            slow = i;
    }
    const ap_stage *b = &p->stages[slow];
    p->step_time = r->step + sync + opt;
    p->bubble = r->bubble;
    p->t_a2a_hidden = r->saved ? r->saved[slow] : 0;
    p->t_compute = p->nmicro * (b->fwd + b->bwd - b->comm_fwd - b->comm_bwd);
    /* Exposed: the all-to-all the merged passes hid is off the step, so
     * that compute, communication, bubble, sync and optimizer add up to it. */
    p->t_comm = p->nmicro * (b->comm_fwd + b->comm_bwd) - p->t_a2a_hidden;
    p->t_bubble = fmax(0, r->step - (p->nmicro * (b->fwd + b->bwd) - p->t_a2a_hidden));
    p->t_grad_sync = sync;
    p->t_grad_sync_total = sync_total;
    p->t_tied_sync = tied;
    p->t_param_sync = gather;
    p->t_param_sync_total = gather_total;
    p->t_p2p = p2p;
    memset(&p->t_kinds, 0, sizeof p->t_kinds);
    add_kinds(&p->t_kinds, &b->kinds, p->nmicro);
    p->t_optimizer = opt;
    p->max_mem_bytes = mem;
    double seq = seq_len(g);
    p->seq = (int)seq;
    p->tokens_per_s = p->global_batch * seq / p->step_time;
    double model_flops = 3 * g->total_flops * p->global_batch / graph_batch(g);
    double hw = model_flops;
    /* Full recomputation redoes the forward of the layers it recomputes,
     * not that of the embedding or the head. */
    for (int i = 0; i < p->nstages; i++)
        hw += p->stages[i].recompute_flops * p->stages[i].ngpus * p->nmicro;
    p->model_tflops_per_gpu = model_flops / p->step_time / p->gpus / 1e12;
    p->hw_tflops_per_gpu = hw / p->step_time / p->gpus / 1e12;
    p->mfu = p->model_tflops_per_gpu * 1e12 / c->peak_flops[g->dtype];
}

/* What the plan's prices rest on, for its reports. */
static void record_cluster(const ap_cluster *c, ap_plan *p)
{
    snprintf(p->cluster, sizeof p->cluster, "%s", c->name);
    snprintf(p->cluster_basis, sizeof p->cluster_basis, "%s", ap_cluster_basis(c));
    p->rate_scale = c->calib_scale;
    snprintf(p->rate_from, sizeof p->rate_from, "%s", c->calib_from);
    p->measured_coll = c->ncoll > 0;
}

/* The plan's memory and prediction from the schedule's summary r. */
static void conclude(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                     const ap_pipe_result *r)
{
    for (int i = 0; i < p->nstages; i++) {
        ap_stage *st = &p->stages[i];
        st->inflight = r->inflight[i];
        st->mem_bytes = st->param_bytes + st->inflight * st->act_bytes +
                        ap_pipe_deferred_micro(p->run.wgrad_deferral_limit, p->nmicro) *
                            st->defer_bytes;
    }
    p->hbm_limit = ap_cluster_usable_bytes(c);
    predict(g, c, p, r);
}

/* A bounded evaluation first prices the schedule's lower bound, which
 * costs a pass over the schedule's order where the simulation costs
 * several; most configurations of a sweep stop there. */
int ap_plan_evaluate_within(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                            double bound, char *err)
{
    record_cluster(c, p);
    p->bounded = 0;
    if (p->run.fp8 && ap_fp8_check(c, p->run.fp8_recipe, err))
        return AP_EINPUT;
    for (int i = 0; i < p->nstages; i++) {
        ap_stage *st = &p->stages[i];
        /* Under 1F1B stage i of p keeps p - i micro-batches in flight; the
         * simulation below confirms it. */
        st->inflight = fmin(p->nstages - i, p->nmicro);
        int rc = price_stage(g, c, p, st, err);
        if (rc)
            return rc;
    }
    price_p2p(c, p);
    ap_pipe_result r;
    int rc;
    if (bound > 0) {
        if ((rc = simulate(p, 2, &r, err)))
            return rc;
        conclude(g, c, p, &r);
        ap_pipe_result_free(&r);
        if (p->step_time >= bound) {
            p->bounded = 1;
            return AP_OK;
        }
    }
    if ((rc = simulate(p, 1, &r, err)))
        return rc;
    conclude(g, c, p, &r);
    ap_pipe_result_free(&r);
    return AP_OK;
}

int ap_plan_evaluate(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                     char *err)
{
    return ap_plan_evaluate_within(g, c, p, 0, err);
}

void ap_plan_free(ap_plan *p)
{
    for (int i = 0; i < p->nstages; i++) {
        ap_stage *st = &p->stages[i];
        if (st->blocks)
            for (int b = 0; b < 2 + p->nclasses; b++)
                ap_block_free(&st->blocks[b]);
        free(st->blocks);
        free(st->point);
        free_chunks(st);
    }
    free(p->stages);
    free(p->classes);
    free(p->chunk_layers);
    memset(p, 0, sizeof *p);
}
