/* tables.c -- a block's sharding ILP: strategies, merged followers, costs
 * and edge tables with layout classes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/tables.h"


static int position_in(const int *ops, int nops, int op)
{
    for (int i = 0; i < nops; i++)
        if (ops[i] == op)
            return i;
    return -1;
}

static int push_edge(ap_block_edge **e, int *n, int *cap, int u, int v, int t)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        ap_block_edge *ne = realloc(*e, sizeof **e * (size_t)nc);
        if (!ne)
            return -1;
        *e = ne;
        *cap = nc;
    }
    (*e)[(*n)++] = (ap_block_edge){u, v, t};
    return 0;
}

/* The layer after the block's, when it is of the same class: its inputs from
 * the block's layer are the wrap edges (the residual stream and whatever
 * else crosses from one layer to the next). */
static int next_same_layer(const ap_graph *g, const int *ops, int nops)
{
    if (!nops)
        return -1;
    int l = g->ops[ops[0]].layer;
    if (g->ops[ops[nops - 1]].layer != l)
        return -1; /* a span of layers has its own edges between them */
    if (l < 0 || l + 1 >= g->nlayers ||
        g->layer_class[l + 1] != g->layer_class[l])
        return -1;
    return l + 1;
}

int ap_block_edges(const ap_graph *g, const int *ops, int nops,
                   ap_block_edge **out)
{
    int n = 0, cap = 0;
    ap_block_edge *e = NULL;
    for (int v = 0; v < nops; v++) {
        const ap_op *op = &g->ops[ops[v]];
        for (int k = 0; k < op->ninputs; k++) {
            int p = g->tensors[op->inputs[k]].producer;
            int u = p < 0 ? -1 : position_in(ops, nops, p);
            if (u >= 0 && push_edge(&e, &n, &cap, u, v, op->inputs[k]))
                goto oom;
        }
    }
    /* The next layer's ops come in the block's order, so its i-th op of the
     * layer stands for block position i. */
    int nx = next_same_layer(g, ops, nops);
    for (int i = 0, v = 0; nx >= 0 && i < g->nops && v < nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->layer != nx)
            continue;
        for (int k = 0; k < op->ninputs; k++) {
            int p = g->tensors[op->inputs[k]].producer;
            int u = p < 0 ? -1 : position_in(ops, nops, p);
            if (u >= 0 && push_edge(&e, &n, &cap, u, v, op->inputs[k]))
                goto oom;
        }
        v++;
    }
    *out = e;
    return n;
oom:
    free(e);
    return -1;
}

void ap_tables_free(ap_tables *t)
{
    for (int i = 0; i < t->nops; i++)
        if (t->strat)
            free(t->strat[i]);
    for (int k = 0; k < t->ngroups; k++) {
        if (t->cost)
            free(t->cost[k]);
        if (t->mem)
            free(t->mem[k]);
    }
    for (int e = 0; e < t->nedges; e++) {
        free(t->ecost[e]);
        free(t->emem[e]);
        free(t->cu[e]);
        free(t->cv[e]);
    }
    free(t->group);
    free(t->ns);
    free(t->strat);
    free(t->cost);
    free(t->mem);
    free(t->edges);
    free(t->ecost);
    free(t->emem);
    free(t->cu);
    free(t->cv);
    memset(t, 0, sizeof *t);
}

/* Elementwise ops, norms and softmax compute where their input lies: they
 * follow the producer of their first input from inside the block. */
static int leader_of(const ap_graph *g, const int *ops, int v)
{
    const ap_op *op = &g->ops[ops[v]];
    if (op->kind != AP_OP_UNARY && op->kind != AP_OP_BINARY &&
        op->kind != AP_OP_NORM && op->kind != AP_OP_SOFTMAX &&
        op->kind != AP_OP_DROPOUT)
        return -1;
    for (int k = 0; k < op->ninputs; k++) {
        const ap_tensor *in = &g->tensors[op->inputs[k]];
        if (in->role != AP_TENSOR_ACT || in->producer < 0)
            continue;
        int u = position_in(ops, v, in->producer);
        if (u >= 0)
            return u;
    }
    return -1;
}

static double op_cost(const ap_price_ctx *x, int op, const ap_strategy *s,
                      double act_weight, double *mem)
{
    ap_op_cost c;
    ap_price_op(x, op, s, &c);
    *mem = c.param_bytes + act_weight * c.act_bytes;
    double amortise = x->nmicro > 0 ? 1.0 / x->nmicro : 1;
    return c.fwd + c.bwd + c.fwd_comm + c.bwd_comm + c.grad_sync * amortise;
}

static int alloc_groups(ap_tables *t, int nops)
{
    t->nops = nops;
    t->group = calloc((size_t)nops, sizeof *t->group);
    t->ns = calloc((size_t)nops, sizeof *t->ns);
    t->strat = calloc((size_t)nops, sizeof *t->strat);
    t->cost = calloc((size_t)nops, sizeof *t->cost);
    t->mem = calloc((size_t)nops, sizeof *t->mem);
    return t->group && t->ns && t->strat && t->cost && t->mem ? 0 : -1;
}

/* A leader's choices are its own strategies. */
static int add_leader(const ap_price_ctx *x, const int *ops, int v,
                      ap_tables *t, char *err)
{
    int gi = t->ngroups++;
    t->group[v] = gi;
    t->strat[v] = malloc(sizeof **t->strat * AP_MAX_STRATEGIES);
    if (!t->strat[v])
        return AP_EINTERNAL;
    t->ns[gi] = ap_strategies(x, ops[v], t->strat[v], AP_MAX_STRATEGIES);
    if (t->ns[gi] == 0) {
        snprintf(err, AP_ERR_LEN, "op \"%s\" has no valid strategy on a %dx%d mesh",
                 x->g->ops[ops[v]].name, x->mesh->d[0], x->mesh->d[1]);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* For each choice of the group, the follower's strategy that costs least
 * together with the edge from its leader; the first such on ties. */
static int add_follower(const ap_price_ctx *x, const int *ops, int v, int u,
                        const ap_block_edge *lead, double act_weight,
                        ap_tables *t)
{
    ap_strategy own[AP_MAX_STRATEGIES];
    double cost[AP_MAX_STRATEGIES], mem;
    int n = ap_strategies(x, ops[v], own, AP_MAX_STRATEGIES);
    if (n == 0)
        return -1;
    for (int j = 0; j < n; j++)
        cost[j] = op_cost(x, ops[v], &own[j], act_weight, &mem);
    int gi = t->group[u];
    t->group[v] = gi;
    t->strat[v] = malloc(sizeof **t->strat * (size_t)t->ns[gi]);
    if (!t->strat[v])
        return AP_EINTERNAL;
    for (int k = 0; k < t->ns[gi]; k++) {
        double best = INFINITY;
        for (int j = 0; j < n; j++) {
            double c = cost[j] + ap_price_edge(x, lead->tensor, ops[u],
                                               &t->strat[u][k], ops[v],
                                               &own[j], NULL);
            if (c < best) {
                best = c;
                t->strat[v][k] = own[j];
            }
        }
    }
    return AP_OK;
}

static int find_groups(const ap_price_ctx *x, const int *ops, int nops,
                       const ap_block_edge *e, int ne, double act_weight,
                       ap_tables *t, char *err)
{
    for (int v = 0; v < nops; v++) {
        int u = leader_of(x->g, ops, v);
        const ap_block_edge *lead = NULL;
        for (int k = 0; k < ne && u >= 0 && !lead; k++)
            if (e[k].u == u && e[k].v == v)
                lead = &e[k];
        int rc = lead ? add_follower(x, ops, v, u, lead, act_weight, t)
                      : add_leader(x, ops, v, t, err);
        if (rc < 0)
            rc = add_leader(x, ops, v, t, err); /* no strategy to follow with */
        if (rc)
            return rc;
    }
    return AP_OK;
}

/* A group's cost for each choice: its ops' own costs and the edges between
 * them. */
static int group_costs(const ap_price_ctx *x, const int *ops, int nops,
                       const ap_block_edge *e, int ne, double act_weight,
                       ap_tables *t)
{
    for (int gi = 0; gi < t->ngroups; gi++) {
        t->cost[gi] = calloc((size_t)t->ns[gi], sizeof **t->cost);
        t->mem[gi] = calloc((size_t)t->ns[gi], sizeof **t->mem);
        if (!t->cost[gi] || !t->mem[gi])
            return -1;
    }
    for (int v = 0; v < nops; v++) {
        int gi = t->group[v];
        for (int k = 0; k < t->ns[gi]; k++) {
            double mem;
            t->cost[gi][k] += op_cost(x, ops[v], &t->strat[v][k], act_weight, &mem);
            t->mem[gi][k] += mem;
        }
    }
    for (int i = 0; i < ne; i++) {
        int gi = t->group[e[i].u];
        if (gi != t->group[e[i].v])
            continue;
        for (int k = 0; k < t->ns[gi]; k++) {
            const ap_strategy *ps = &t->strat[e[i].u][k];
            const ap_strategy *cs = &t->strat[e[i].v][k];
            t->cost[gi][k] += ap_price_edge(x, e[i].tensor, ops[e[i].u], ps,
                                            ops[e[i].v], cs, NULL);
            t->mem[gi][k] += act_weight *
                             ap_price_edge_saved(x, e[i].tensor, ops[e[i].u],
                                                 ps, ops[e[i].v], cs, NULL);
        }
    }
    return 0;
}

/* Choices of one end that price every pairing alike, in time and in memory
 * (mem may be NULL), form one class: row i joins the class of the first
 * earlier row equal to it. */
static int classes_of_rows(const double *m, const double *mem, int rows,
                           int cols, int stride_r, int stride_c, int *cls)
{
    int n = 0;
    for (int i = 0; i < rows; i++) {
        cls[i] = -1;
        for (int k = 0; k < i && cls[i] < 0; k++) {
            int same = 1;
            for (int j = 0; j < cols && same; j++) {
                int a = i * stride_r + j * stride_c, b = k * stride_r + j * stride_c;
                same = m[a] == m[b] && (!mem || mem[a] == mem[b]);
            }
            if (same)
                cls[i] = cls[k];
        }
        if (cls[i] < 0)
            cls[i] = n++;
    }
    return n;
}

/* Prices every pairing of the two groups' choices on one edge, in time and
 * in memory (kept only where some pairing has a memory term); the full
 * matrices stand in ecost and emem until compress_edge() replaces them. */
static int price_edge_matrix(const ap_price_ctx *x, const int *ops,
                             const ap_block_edge *be, double act_weight,
                             ap_tables *t)
{
    int e = t->nedges;
    int gu = t->group[be->u], gv = t->group[be->v];
    int nu = t->ns[gu], nv = t->ns[gv];
    double *full = malloc(sizeof *full * (size_t)(nu * nv));
    double *mem = malloc(sizeof *mem * (size_t)(nu * nv));
    if (!full || !mem) {
        free(full);
        free(mem);
        return -1;
    }
    t->nedges++;
    int any = 0;
    for (int i = 0; i < nu; i++)
        for (int j = 0; j < nv; j++) {
            const ap_strategy *ps = &t->strat[be->u][i];
            const ap_strategy *cs = &t->strat[be->v][j];
            full[i * nv + j] = ap_price_edge(x, be->tensor, ops[be->u], ps,
                                             ops[be->v], cs, NULL);
            mem[i * nv + j] = act_weight *
                              ap_price_edge_saved(x, be->tensor, ops[be->u],
                                                  ps, ops[be->v], cs, NULL);
            any |= mem[i * nv + j] != 0;
        }
    if (!any) {
        free(mem);
        mem = NULL;
    }
    t->ecost[e] = full;
    t->emem[e] = mem;
    t->edges[e] = (ap_ilp_edge){gu, gv, full, 0, 0, NULL, NULL, mem};
    return 0;
}

/* Whether choice a of group g is no worse than choice b in everything the
 * ILP sees: its own time and memory, and every edge against every choice
 * of the other end. */
static int no_worse(const ap_tables *t, int g, int a, int b)
{
    if (t->cost[g][a] > t->cost[g][b] || t->mem[g][a] > t->mem[g][b])
        return 0;
    for (int e = 0; e < t->nedges; e++) {
        const ap_ilp_edge *ed = &t->edges[e];
        int nu = t->ns[ed->u], nv = t->ns[ed->v];
        const double *m = ed->mem;
        if (ed->u == g)
            for (int j = 0; j < nv; j++)
                if (ed->cost[a * nv + j] > ed->cost[b * nv + j] ||
                    (m && m[a * nv + j] > m[b * nv + j]))
                    return 0;
        if (ed->v == g)
            for (int i = 0; i < nu; i++)
                if (ed->cost[i * nv + a] > ed->cost[i * nv + b] ||
                    (m && m[i * nv + a] > m[i * nv + b]))
                    return 0;
    }
    return 1;
}

/* Choices another choice dominates never help the ILP: it could swap them
 * for the dominating one at no cost in time or memory. Of identical
 * choices the first stays. */
static void find_dominated(const ap_tables *t, int g, char *keep)
{
    int n = t->ns[g];
    for (int i = 0; i < n; i++)
        keep[i] = 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n && keep[i]; j++)
            if (j != i && keep[j] && no_worse(t, g, j, i) &&
                (j < i || !no_worse(t, g, i, j)))
                keep[i] = 0;
}

/* Drops the choices keep[] rules out from group g and from the edge
 * matrices at its ends. */
static void compact_group(ap_tables *t, int g, const char *keep)
{
    int n = t->ns[g], m = 0;
    for (int e = 0; e < t->nedges; e++) {
        ap_ilp_edge *ed = &t->edges[e];
        if (ed->u != g && ed->v != g)
            continue;
        int nu = t->ns[ed->u], nv = t->ns[ed->v], k = 0;
        double *c = t->ecost[e], *m = t->emem[e];
        for (int i = 0; i < nu; i++)
            for (int j = 0; j < nv; j++)
                if ((ed->u != g || keep[i]) && (ed->v != g || keep[j])) {
                    if (m)
                        m[k] = m[i * nv + j];
                    c[k++] = c[i * nv + j];
                }
    }
    for (int i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        t->cost[g][m] = t->cost[g][i];
        t->mem[g][m] = t->mem[g][i];
        for (int v = 0; v < t->nops; v++)
            if (t->group[v] == g)
                t->strat[v][m] = t->strat[v][i];
        m++;
    }
    t->ns[g] = m;
}

static void prune_dominated(ap_tables *t)
{
    char keep[AP_MAX_STRATEGIES];
    for (int g = 0; g < t->ngroups; g++) {
        find_dominated(t, g, keep);
        compact_group(t, g, keep);
    }
}

/* Keeps one row per producer class and one column per consumer class: the
 * cost depends on the producer's output layout and the consumer's input
 * layout, far fewer than the choices. */
static int compress_edge(ap_tables *t, int e)
{
    ap_ilp_edge *ed = &t->edges[e];
    int nu = t->ns[ed->u], nv = t->ns[ed->v];
    double *full = t->ecost[e], *fmem = t->emem[e];
    t->cu[e] = malloc(sizeof(int) * (size_t)nu);
    t->cv[e] = malloc(sizeof(int) * (size_t)nv);
    if (!t->cu[e] || !t->cv[e])
        return -1;
    int na = classes_of_rows(full, fmem, nu, nv, nv, 1, t->cu[e]);
    int nb = classes_of_rows(full, fmem, nv, nu, 1, nv, t->cv[e]);
    double *m = malloc(sizeof *m * (size_t)(na * nb));
    double *mm = fmem ? malloc(sizeof *mm * (size_t)(na * nb)) : NULL;
    if (!m || (fmem && !mm)) {
        free(m);
        return -1;
    }
    for (int i = 0; i < nu; i++)
        for (int j = 0; j < nv; j++) {
            int k = t->cu[e][i] * nb + t->cv[e][j];
            m[k] = full[i * nv + j];
            if (mm)
                mm[k] = fmem[i * nv + j];
        }
    free(full);
    free(fmem);
    t->ecost[e] = m;
    t->emem[e] = mm;
    *ed = (ap_ilp_edge){ed->u, ed->v, m, na, nb, t->cu[e], t->cv[e], mm};
    return 0;
}

static int edge_tables(const ap_price_ctx *x, const int *ops,
                       const ap_block_edge *e, int ne, double act_weight,
                       ap_tables *t)
{
    size_t n = (size_t)(ne ? ne : 1);
    t->edges = calloc(n, sizeof *t->edges);
    t->ecost = calloc(n, sizeof *t->ecost);
    t->emem = calloc(n, sizeof *t->emem);
    t->cu = calloc(n, sizeof *t->cu);
    t->cv = calloc(n, sizeof *t->cv);
    if (!t->edges || !t->ecost || !t->emem || !t->cu || !t->cv)
        return -1;
    for (int i = 0; i < ne; i++)
        if (t->group[e[i].u] != t->group[e[i].v] &&
            price_edge_matrix(x, ops, &e[i], act_weight, t))
            return -1;
    prune_dominated(t);
    for (int i = 0; i < t->nedges; i++)
        if (compress_edge(t, i))
            return -1;
    return 0;
}

int ap_tables_build(const ap_price_ctx *x, const int *ops, int nops,
                    double act_weight, ap_tables *t, char *err)
{
    memset(t, 0, sizeof *t);
    ap_block_edge *e = NULL;
    int ne = ap_block_edges(x->g, ops, nops, &e);
    int rc = AP_EINTERNAL;
    if (ne < 0 || alloc_groups(t, nops))
        goto oom;
    rc = find_groups(x, ops, nops, e, ne, act_weight, t, err);
    if (rc == AP_EINTERNAL)
        goto oom;
    if (rc)
        goto done;
    if (group_costs(x, ops, nops, e, ne, act_weight, t) ||
        edge_tables(x, ops, e, ne, act_weight, t))
        goto oom;
    rc = AP_OK;
    goto done;
oom:
    snprintf(err, AP_ERR_LEN, "out of memory building the sharding ILP");
done:
    free(e);
    return rc;
}

ap_ilp ap_tables_ilp(const ap_tables *t)
{
    return (ap_ilp){.nnodes = t->ngroups, .nstrat = t->ns,
                    .cost = (const double *const *)t->cost,
                    .mem = (const double *const *)t->mem,
                    .nedges = t->nedges, .edges = t->edges};
}

void ap_tables_strategies(const ap_tables *t, const int *choice,
                          ap_strategy *out)
{
    for (int v = 0; v < t->nops; v++)
        out[v] = t->strat[v][choice[t->group[v]]];
}

int ap_tables_leanest(const ap_tables *t, double time_limit_s, double *out,
                      char *err)
{
    int edge_memory = 0;
    for (int e = 0; e < t->nedges; e++)
        edge_memory |= t->emem[e] != NULL;
    double sum = 0;
    for (int gi = 0; gi < t->ngroups; gi++) {
        double least = t->mem[gi][0];
        for (int k = 1; k < t->ns[gi]; k++)
            least = fmin(least, t->mem[gi][k]);
        sum += least;
    }
    *out = sum;
    if (!edge_memory)
        return AP_OK;
    /* The node minima and the edge minima may not go together: ask the
     * ILP for the least memory it can actually reach. */
    ap_ilp ilp = ap_tables_ilp(t);
    ilp.minimise_memory = 1;
    ilp.time_limit_s = time_limit_s;
    ilp.gap = 1e-3; /* a budget to aim at, not a figure to report */
    int *choice = malloc(sizeof *choice * (size_t)(t->ngroups ? t->ngroups : 1));
    if (!choice) {
        snprintf(err, AP_ERR_LEN, "out of memory solving a block");
        return AP_EINTERNAL;
    }
    ap_ilp_result r;
    int rc = ap_ilp_solve(&ilp, choice, &r, err);
    if (rc == AP_OK && r.status <= AP_ILP_FEASIBLE)
        *out = r.memory;
    free(choice);
    return rc;
}
