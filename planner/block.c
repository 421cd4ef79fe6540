/* block.c -- the strategies of one block by ILP, and the block's price.
 *
 * A block is the ops of one layer (all layers of a class share its answer)
 * or the ops before or after the layers. Edges inside the block and wrap
 * edges from the previous layer of the same class enter the objective; so
 * the answer is the cheapest steady state of a stack of identical layers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"
#include "planner/tables.h"

/* The fastest point, the leanest and two budgets between: on the benchmark
 * models six points chose the same plans as four, at 1.8x the time. */
#define MAX_POINTS 4

static int position_in(const int *ops, int nops, int op)
{
    for (int i = 0; i < nops; i++)
        if (ops[i] == op)
            return i;
    return -1;
}

static double block_input_bytes(const ap_price_ctx *x, const int *ops, int nops,
                                const ap_strategy *strat)
{
    /* The activation entering the block from outside it, at the layout its
     * first consumer keeps: the residual stream of a transformer layer. */
    const ap_graph *g = x->g;
    for (int v = 0; v < nops; v++) {
        const ap_op *op = &g->ops[ops[v]];
        for (int k = 0; k < op->ninputs; k++) {
            int t = op->inputs[k];
            if (g->tensors[t].role != AP_TENSOR_ACT ||
                position_in(ops, nops, g->tensors[t].producer) >= 0)
                continue;
            const ap_tensor *tt = &g->tensors[t];
            double bytes = (double)ap_dtype_size(tt->dtype);
            for (int i = 0; i < tt->rank; i++) {
                double size = ap_label_size(x, tt->shape[i]);
                for (int a = 0; a < 2; a++)
                    if (strat[v].axis[a] == tt->shape[i])
                        size /= x->mesh->d[a];
                bytes *= size;
            }
            return bytes;
        }
    }
    return 0;
}

/* The op's own communication by kind. Under ZeRO-3 the op is priced again
 * at ZeRO-2, which differs only by the parameter all-gathers. */
static void split_op_comm(const ap_price_ctx *x, int op, const ap_strategy *s,
                          const ap_op_cost *c, ap_block_point *out)
{
    double fwd = c->fwd_comm, bwd = c->bwd_comm;
    if (x->zero >= AP_ZERO_2) {
        /* What ZeRO-1 would not pay: ZeRO-3's weight gathers beyond
         * ZeRO-2, and ZeRO-2's per-micro-batch gradient reductions. */
        ap_price_ctx z = *x;
        ap_op_cost c1, c2;
        z.zero = AP_ZERO_1;
        ap_price_op(&z, op, s, &c1);
        z.zero = AP_ZERO_2;
        ap_price_op(&z, op, s, &c2);
        out->kfwd.param_gather += fwd - c2.fwd_comm;
        out->kbwd.param_gather += bwd - c2.bwd_comm;
        out->kbwd.grad_reduce += c2.bwd_comm - c1.bwd_comm;
        fwd = c1.fwd_comm;
        bwd = c1.bwd_comm;
    }
    ap_op_kind k = x->g->ops[op].kind;
    if (k == AP_OP_DISPATCH || k == AP_OP_COMBINE) {
        out->kfwd.expert += fwd;
        out->kbwd.expert += bwd;
    } else if (k == AP_OP_ATTENTION) {
        out->kfwd.context += fwd;
        out->kbwd.context += bwd;
    } else {
        out->kfwd.tp += fwd;
        out->kbwd.tp += bwd;
    }
}

static void add_comm_kinds(ap_comm_kinds *to, const ap_comm_kinds *k)
{
    to->tp += k->tp;
    to->reshard += k->reshard;
    to->expert += k->expert;
    to->context += k->context;
    to->param_gather += k->param_gather;
    to->grad_reduce += k->grad_reduce;
}

/* An edge's communication by kind (total and back: ap_price_edge's, its
 * FP8 casts taken out): pricing it again with the consumer's axes that
 * split a label the tensor lacks cleared leaves the layout conversion
 * alone; the difference is the partial gradient's reduction, less the
 * second all-gather of a saved sequence shard (regather), which repeats the
 * forward's gather and is resharding like it. */
static void split_edge_comm(const ap_price_ctx *x, int t, int prod,
                            const ap_strategy *ps, int cons,
                            const ap_strategy *cs, double total, double back,
                            double regather, ap_block_point *out)
{
    ap_strategy conv = *cs;
    const ap_op_kind k = x->g->ops[cons].kind;
    for (int a = 0; a < 2; a++)
        if (conv.axis[a] && !strchr(x->g->tensors[t].shape, conv.axis[a]) &&
            k != AP_OP_DISPATCH && k != AP_OP_COMBINE)
            conv.axis[a] = 0;
    double conv_back;
    ap_price_edge(x, t, prod, ps, cons, &conv, &conv_back);
    out->kfwd.reshard += total - back;
    out->kbwd.reshard += conv_back + regather;
    out->kbwd.tp += back - conv_back - regather;
}

/* What selective recomputation by module adds for op (ap_op_rc_modules):
 * its forward again, and the saved bytes it frees (ap_price_op_freed),
 * which an op outside the modules has too when it saves a tensor one of
 * them made. */
static void add_rc_op(const ap_price_ctx *x, int op, const ap_strategy *s,
                      const ap_op_cost *c, ap_block_point *out)
{
    out->rc_freed += ap_price_op_freed(x, op, s);
    if (!ap_op_rc_modules(x, op))
        return;
    ap_block_point k;
    memset(&k, 0, sizeof k);
    split_op_comm(x, op, s, c, &k);
    out->rc_fwd += c->fwd + c->fwd_comm;
    out->rc_comm += c->fwd_comm;
    out->rc_flops += c->flops;
    add_comm_kinds(&out->rc_kinds, &k.kfwd);
}

/* The same for an edge: its forward again (fwd, casts included;
 * communication comm and comm_back as split_edge_comm takes them) when both
 * ends are in one recomputed module, and its saved-bytes term where the
 * tensor is freed. */
static void add_rc_edge(const ap_price_ctx *x, int t, int u, const ap_strategy *ps, int v,
                        const ap_strategy *cs, double fwd, double comm, double comm_back,
                        double saved, ap_block_point *out)
{
    if (ap_rc_frees(x, u, v))
        out->rc_freed += saved;
    if (!(ap_op_rc_modules(x, u) & ap_op_rc_modules(x, v)))
        return;
    ap_block_point k;
    memset(&k, 0, sizeof k);
    split_edge_comm(x, t, u, ps, v, cs, comm, comm_back, 0, &k);
    out->rc_fwd += fwd;
    out->rc_comm += comm - comm_back;
    add_comm_kinds(&out->rc_kinds, &k.kfwd);
}

/* The shared experts' two halves and the token exchanges they run beside
 * under --moe-shared-expert-overlap, forward and backward: fc1 and its
 * activation, and fc2 with what follows it in the module (the down
 * projection, which contracts the shared FFN, and a gate's scaling). */
typedef struct {
    double fc1[2], fc2[2], dispatch[2], combine[2];
} shared_parts;

static void add_shared_part(const ap_price_ctx *x, int op, const ap_op_cost *c, int fc2,
                            shared_parts *sp)
{
    const ap_op *o = &x->g->ops[op];
    if (o->kind == AP_OP_DISPATCH || o->kind == AP_OP_COMBINE) {
        double *t = o->kind == AP_OP_DISPATCH ? sp->dispatch : sp->combine;
        t[0] += c->fwd_comm;
        t[1] += c->bwd_comm;
        return;
    }
    if (!(o->modules & AP_MODULE_SHARED_EXPERTS))
        return;
    double *t = fc2 ? sp->fc2 : sp->fc1;
    t[0] += c->fwd + c->fwd_comm;
    t[1] += c->bwd + c->bwd_comm;
}

/* Marks the shared experts' fc2 side among the block's ops (fc2[i] for
 * ops[i]): a matmul that contracts the shared FFN label, and every shared
 * op fed by one. */
static void mark_fc2(const ap_graph *g, const int *ops, int nops, char *fc2)
{
    char ffn = 0;
    for (int i = 0; i < nops && !ffn; i++) {
        const ap_op *o = &g->ops[ops[i]];
        if (!(o->modules & AP_MODULE_SHARED_EXPERTS) || o->kind != AP_OP_MATMUL)
            continue;
        for (const char *l = o->contracted; *l && !ffn; l++)
            if (ap_graph_dim(g, *l)->kind == AP_DIM_FFN)
                ffn = *l;
    }
    for (int i = 0; i < nops; i++) {
        const ap_op *o = &g->ops[ops[i]];
        if (!(o->modules & AP_MODULE_SHARED_EXPERTS))
            continue;
        int mark = ffn && o->kind == AP_OP_MATMUL && strchr(o->contracted, ffn);
        for (int k = 0; k < o->ninputs && !mark; k++) {
            int p = position_in(ops, nops, g->tensors[o->inputs[k]].producer);
            mark = p >= 0 && fc2[p];
        }
        fc2[i] = (char)mark;
    }
}

/* What the overlap hides: each half of the shared experts beside its
 * exchange, the shorter of the two, in each pass; taken off the expert
 * communication (the exposed part stays). */
static void hide_shared(const shared_parts *sp, ap_block_point *out)
{
    for (int b = 0; b < 2; b++) {
        double hidden = fmin(sp->fc1[b], sp->dispatch[b]) + fmin(sp->fc2[b], sp->combine[b]);
        if (b == 0) {
            out->fwd -= hidden;
            out->comm_fwd -= hidden;
            out->kfwd.expert -= hidden;
        } else {
            out->bwd -= hidden;
            out->comm_bwd -= hidden;
            out->kbwd.expert -= hidden;
        }
    }
}

void ap_block_price(const ap_price_ctx *x, const int *ops, int nops,
                    const ap_strategy *strat, ap_block_point *out)
{
    shared_parts sp;
    memset(&sp, 0, sizeof sp);
    char *fc2 = x->run.shared_overlap && nops > 0 ? calloc((size_t)nops, 1) : NULL;
    if (fc2)
        mark_fc2(x->g, ops, nops, fc2);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < nops; i++) {
        ap_op_cost c;
        ap_price_op(x, ops[i], &strat[i], &c);
        out->fwd += c.fwd + c.fwd_comm;
        out->bwd += c.bwd + c.bwd_comm;
        out->comm_fwd += c.fwd_comm;
        out->comm_bwd += c.bwd_comm;
        out->grad_sync += c.grad_sync;
        out->tied_sync += c.tied_sync;
        out->param_sync += c.param_sync;
        out->param_buckets += c.param_buckets;
        out->param_bytes += c.param_bytes;
        out->fp8_weight_bytes += c.fp8_weight_bytes;
        out->grad_bytes += c.grad_bytes;
        out->opt_bytes += c.opt_bytes;
        out->act_bytes += c.act_bytes;
        out->flops += c.flops;
        if (x->g->ops[ops[i]].kind == AP_OP_ATTENTION) {
            out->attn_fwd += c.fwd;
            out->attn_flops += c.flops;
        }
        split_op_comm(x, ops[i], &strat[i], &c, out);
        add_rc_op(x, ops[i], &strat[i], &c, out);
        if (fc2)
            add_shared_part(x, ops[i], &c, fc2[i], &sp);
    }
    if (fc2)
        hide_shared(&sp, out);
    free(fc2);
    ap_block_edge *e = NULL;
    int ne = ap_block_edges(x->g, ops, nops, &e);
    for (int k = 0; k < ne; k++) {
        const ap_strategy *ps = &strat[e[k].u], *cs = &strat[e[k].v];
        int u = ops[e[k].u], v = ops[e[k].v];
        double back, regather;
        double total = ap_price_edge(x, e[k].tensor, u, ps, v, cs, &back);
        double saved = ap_price_edge_saved(x, e[k].tensor, u, ps, v, cs, &regather);
        out->act_bytes += saved;
        /* Its FP8 casts are compute; the rest is communication. */
        double cast_back, cast = ap_price_edge_cast(x, e[k].tensor, u, ps, v, cs, &cast_back);
        double comm = total - cast - cast_back, comm_back = back - cast_back;
        out->fwd += total - back;
        out->bwd += back;
        out->comm_fwd += comm - comm_back;
        out->comm_bwd += comm_back;
        split_edge_comm(x, e[k].tensor, u, ps, v, cs, comm, comm_back, regather, out);
        add_rc_edge(x, e[k].tensor, u, ps, v, cs, total - back, comm, comm_back, saved, out);
    }
    free(e);
    out->input_bytes = block_input_bytes(x, ops, nops, strat);
}

static int add_point(const ap_price_ctx *x, const int *ops, int nops,
                     const ap_tables *t, const int *choice, ap_block *out)
{
    ap_block_point *p = &out->points[out->npoints];
    ap_strategy *s = malloc(sizeof *s * (size_t)nops);
    if (!s)
        return -1;
    ap_tables_strategies(t, choice, s);
    ap_block_price(x, ops, nops, s, p);
    p->strat = s;
    out->npoints++;
    return 0;
}

int ap_block_solve(const ap_price_ctx *x, const int *ops, int nops,
                   double act_weight, double ilp_time_limit, double ilp_gap,
                   ap_block *out, char *err)
{
    return ap_block_solve_points(x, ops, nops, act_weight, ilp_time_limit,
                                 ilp_gap, MAX_POINTS, out, err);
}

int ap_block_solve_points(const ap_price_ctx *x, const int *ops, int nops,
                          double act_weight, double ilp_time_limit,
                          double ilp_gap, int max_points, ap_block *out,
                          char *err)
{
    memset(out, 0, sizeof *out);
    ap_tables t;
    int rc = ap_tables_build(x, ops, nops, act_weight, &t, err);
    int *choice = malloc(sizeof *choice * (size_t)(nops ? nops : 1));
    out->ops = malloc(sizeof *out->ops * (size_t)(nops ? nops : 1));
    out->points = calloc(MAX_POINTS, sizeof *out->points);
    if (rc == AP_OK && (!choice || !out->ops || !out->points)) {
        snprintf(err, AP_ERR_LEN, "out of memory solving a block");
        rc = AP_EINTERNAL;
    }
    if (rc == AP_OK) {
        memcpy(out->ops, ops, sizeof *ops * (size_t)nops);
        out->nops = nops;
    }
    ap_ilp ilp = ap_tables_ilp(&t);
    ilp.time_limit_s = ilp_time_limit;
    ilp.gap = ilp_gap;
    /* The fastest answer, then the leanest one, then answers under budgets
     * spaced geometrically between the two. */
    double fast_mem = 0, lean_mem = 0, last_mem = 0;
    ap_ilp_result r;
    if (rc == AP_OK)
        rc = ap_ilp_solve(&ilp, choice, &r, err);
    /* Without a memory limit every choice is feasible; an answer of none
     * left `choice` unread, so it is an error, not a point. */
    if (rc == AP_OK && r.status == AP_ILP_INFEASIBLE) {
        snprintf(err, AP_ERR_LEN, "the sharding ILP of a block of %d ops found no "
                 "solution without a memory limit", nops);
        rc = AP_EINTERNAL;
    }
    if (rc == AP_OK && r.status == AP_ILP_TIMEOUT) {
        out->ilp = r; /* no points: the caller drops the configuration */
        free(choice);
        ap_tables_free(&t);
        return AP_OK;
    }
    if (rc == AP_OK) {
        out->ilp = r;
        fast_mem = last_mem = r.memory;
        if (add_point(x, ops, nops, &t, choice, out))
            rc = AP_EINTERNAL;
    }
    if (rc == AP_OK)
        rc = ap_tables_leanest(&t, ilp_time_limit, &lean_mem, err);
    if (rc == AP_OK) {
        if (lean_mem < fast_mem * 0.95)
            for (int k = 1; k < MAX_POINTS && k < max_points && rc == AP_OK; k++) {
                double f = (double)k / (MAX_POINTS - 1);
                ilp.mem_limit = fast_mem * pow(lean_mem / fast_mem, f) * (1 + 1e-9);
                rc = ap_ilp_solve(&ilp, choice, &r, err);
                if (rc != AP_OK || r.status > AP_ILP_FEASIBLE)
                    continue;
                if (r.memory >= last_mem * 0.99)
                    continue;
                last_mem = r.memory;
                if (add_point(x, ops, nops, &t, choice, out))
                    rc = AP_EINTERNAL;
            }
    }
    free(choice);
    ap_tables_free(&t);
    if (rc != AP_OK)
        ap_block_free(out);
    return rc;
}

void ap_block_free(ap_block *b)
{
    for (int i = 0; i < b->npoints; i++)
        free(b->points[i].strat);
    free(b->points);
    free(b->ops);
    memset(b, 0, sizeof *b);
}
