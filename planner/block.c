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

#define MAX_STRATEGIES 96
#define MAX_POINTS 6

typedef struct {
    int u, v;   /* block positions */
    int tensor; /* graph tensor index */
} block_edge;

static int position_in(const int *ops, int nops, int op)
{
    for (int i = 0; i < nops; i++)
        if (ops[i] == op)
            return i;
    return -1;
}

/* The op at the same offset within its layer as `op` is within layer-1. */
static int counterpart(const ap_graph *g, int nops, int op)
{
    int layer = g->ops[op].layer, offset = 0;
    for (int i = 0; i < op; i++)
        if (g->ops[i].layer == layer)
            offset++;
    return offset < nops ? offset : -1;
}

static int collect_edges(const ap_graph *g, const int *ops, int nops,
                         block_edge **out)
{
    int n = 0, cap = 16;
    block_edge *e = malloc(sizeof *e * (size_t)cap);
    if (!e)
        return -1;
    for (int v = 0; v < nops; v++) {
        const ap_op *op = &g->ops[ops[v]];
        for (int k = 0; k < op->ninputs; k++) {
            int t = op->inputs[k];
            int p = g->tensors[t].producer;
            if (p < 0)
                continue;
            int u = position_in(ops, nops, p);
            if (u < 0 && op->layer >= 1 && g->ops[p].layer == op->layer - 1 &&
                g->layer_class[op->layer] == g->layer_class[op->layer - 1])
                u = counterpart(g, nops, p);
            if (u < 0)
                continue;
            if (n == cap) {
                cap *= 2;
                block_edge *ne = realloc(e, sizeof *e * (size_t)cap);
                if (!ne) {
                    free(e);
                    return -1;
                }
                e = ne;
            }
            e[n++] = (block_edge){u, v, t};
        }
    }
    *out = e;
    return n;
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

void ap_block_price(const ap_price_ctx *x, const int *ops, int nops,
                    const ap_strategy *strat, ap_block_point *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < nops; i++) {
        ap_op_cost c;
        ap_price_op(x, ops[i], &strat[i], &c);
        out->fwd += c.fwd + c.fwd_comm;
        out->bwd += c.bwd + c.bwd_comm;
        out->comm_fwd += c.fwd_comm;
        out->comm_bwd += c.bwd_comm;
        out->grad_sync += c.grad_sync;
        out->param_bytes += c.param_bytes;
        out->act_bytes += c.act_bytes;
        out->flops += c.flops;
        if (x->g->ops[ops[i]].kind == AP_OP_ATTENTION)
            out->attn_fwd += c.fwd;
    }
    block_edge *e = NULL;
    int ne = collect_edges(x->g, ops, nops, &e);
    for (int k = 0; k < ne; k++) {
        double back;
        double total = ap_price_edge(x, e[k].tensor, ops[e[k].u], &strat[e[k].u],
                                     ops[e[k].v], &strat[e[k].v], &back);
        out->fwd += total - back;
        out->bwd += back;
        out->comm_fwd += total - back;
        out->comm_bwd += back;
    }
    free(e);
    out->input_bytes = block_input_bytes(x, ops, nops, strat);
}

typedef struct {
    int nops;
    int *ns;
    ap_strategy **strat;
    double **cost, **mem;
    int nedges;
    ap_ilp_edge *edges;
    double **ecost;
} tables;

static void tables_free(tables *t)
{
    for (int i = 0; i < t->nops; i++) {
        if (t->strat)
            free(t->strat[i]);
        if (t->cost)
            free(t->cost[i]);
        if (t->mem)
            free(t->mem[i]);
    }
    for (int e = 0; e < t->nedges; e++)
        if (t->ecost)
            free(t->ecost[e]);
    free(t->ns);
    free(t->strat);
    free(t->cost);
    free(t->mem);
    free(t->edges);
    free(t->ecost);
}

static int tables_build(const ap_price_ctx *x, const int *ops, int nops,
                        double act_weight, tables *t, char *err)
{
    memset(t, 0, sizeof *t);
    t->nops = nops;
    t->ns = calloc((size_t)nops, sizeof *t->ns);
    t->strat = calloc((size_t)nops, sizeof *t->strat);
    t->cost = calloc((size_t)nops, sizeof *t->cost);
    t->mem = calloc((size_t)nops, sizeof *t->mem);
    if (!t->ns || !t->strat || !t->cost || !t->mem)
        goto oom;
    double amortise = x->nmicro > 0 ? 1.0 / x->nmicro : 1;
    for (int i = 0; i < nops; i++) {
        t->strat[i] = malloc(sizeof **t->strat * MAX_STRATEGIES);
        t->cost[i] = malloc(sizeof **t->cost * MAX_STRATEGIES);
        t->mem[i] = malloc(sizeof **t->mem * MAX_STRATEGIES);
        if (!t->strat[i] || !t->cost[i] || !t->mem[i])
            goto oom;
        t->ns[i] = ap_strategies(x, ops[i], t->strat[i], MAX_STRATEGIES);
        if (t->ns[i] == 0) {
            snprintf(err, AP_ERR_LEN, "op \"%s\" has no valid strategy on a %dx%d mesh",
                     x->g->ops[ops[i]].name, x->mesh->d[0], x->mesh->d[1]);
            return AP_EINPUT;
        }
        for (int k = 0; k < t->ns[i]; k++) {
            ap_op_cost c;
            ap_price_op(x, ops[i], &t->strat[i][k], &c);
            t->cost[i][k] = c.fwd + c.bwd + c.fwd_comm + c.bwd_comm +
                            c.grad_sync * amortise;
            t->mem[i][k] = c.param_bytes + act_weight * c.act_bytes;
        }
    }
    block_edge *be = NULL;
    int ne = collect_edges(x->g, ops, nops, &be);
    if (ne < 0)
        goto oom;
    t->edges = calloc((size_t)(ne ? ne : 1), sizeof *t->edges);
    t->ecost = calloc((size_t)(ne ? ne : 1), sizeof *t->ecost);
    if (!t->edges || !t->ecost) {
        free(be);
        goto oom;
    }
    for (int e = 0; e < ne; e++) {
        int u = be[e].u, v = be[e].v;
        double *m = malloc(sizeof *m * (size_t)(t->ns[u] * t->ns[v]));
        if (!m) {
            free(be);
            goto oom;
        }
        t->ecost[e] = m;
        t->nedges = e + 1;
        for (int i = 0; i < t->ns[u]; i++)
            for (int j = 0; j < t->ns[v]; j++)
                m[i * t->ns[v] + j] = ap_price_edge(x, be[e].tensor, ops[u],
                                                    &t->strat[u][i], ops[v],
                                                    &t->strat[v][j], NULL);
        t->edges[e] = (ap_ilp_edge){u, v, m};
    }
    free(be);
    return AP_OK;
oom:
    snprintf(err, AP_ERR_LEN, "out of memory building the sharding ILP");
    return AP_EINTERNAL;
}

/* Memory depends on the nodes alone, so the least is each op's least. */
static double leanest_memory(const tables *t)
{
    double sum = 0;
    for (int i = 0; i < t->nops; i++) {
        double least = t->mem[i][0];
        for (int k = 1; k < t->ns[i]; k++)
            least = fmin(least, t->mem[i][k]);
        sum += least;
    }
    return sum;
}

static int add_point(const ap_price_ctx *x, const int *ops, int nops,
                     const tables *t, const int *choice, ap_block *out)
{
    ap_block_point *p = &out->points[out->npoints];
    ap_strategy *s = malloc(sizeof *s * (size_t)nops);
    if (!s)
        return -1;
    for (int i = 0; i < nops; i++)
        s[i] = t->strat[i][choice[i]];
    ap_block_price(x, ops, nops, s, p);
    p->strat = s;
    out->npoints++;
    return 0;
}

int ap_block_solve(const ap_price_ctx *x, const int *ops, int nops,
                   double act_weight, double ilp_time_limit, double ilp_gap,
                   ap_block *out, char *err)
{
    memset(out, 0, sizeof *out);
    tables t;
    int rc = tables_build(x, ops, nops, act_weight, &t, err);
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
    ap_ilp ilp = {.nnodes = nops, .nstrat = t.ns,
                  .cost = (const double *const *)t.cost,
                  .mem = (const double *const *)t.mem, .nedges = t.nedges,
                  .edges = t.edges, .time_limit_s = ilp_time_limit, .gap = ilp_gap};
    /* The fastest answer, then the leanest one, then answers under budgets
     * spaced geometrically between the two. */
    double fast_mem = 0, lean_mem = 0, last_mem = 0;
    ap_ilp_result r;
    if (rc == AP_OK)
        rc = ap_ilp_solve(&ilp, choice, &r, err);
    if (rc == AP_OK) {
        out->ilp = r;
        fast_mem = last_mem = r.memory;
        if (add_point(x, ops, nops, &t, choice, out))
            rc = AP_EINTERNAL;
    }
    if (rc == AP_OK) {
        lean_mem = leanest_memory(&t);
        if (lean_mem < fast_mem * 0.95)
            for (int k = 1; k < MAX_POINTS && rc == AP_OK; k++) {
                double f = (double)k / (MAX_POINTS - 1);
                ilp.mem_limit = fast_mem * pow(lean_mem / fast_mem, f) * (1 + 1e-9);
                rc = ap_ilp_solve(&ilp, choice, &r, err);
                if (rc != AP_OK || r.status == AP_ILP_INFEASIBLE)
                    continue;
                if (r.memory >= last_mem * 0.99)
                    continue;
                last_mem = r.memory;
                if (add_point(x, ops, nops, &t, choice, out))
                    rc = AP_EINTERNAL;
            }
    }
    free(choice);
    tables_free(&t);
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
