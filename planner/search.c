/* search.c -- the outer search: stage count, submesh and logical mesh,
 * micro-batching, and per stage the memory/speed trade-off and
 * recomputation, with the layer cuts from the dynamic program.
 *
 * Stages get equal submeshes (every launcher we export to requires it), so
 * a stage count p fixes the submesh size D/p; each submesh is (1, 2^k) inside
 * a node or whole nodes. Blocks are solved once per (mesh, micro-batch) and
 * shared by every stage and cut that uses them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/parts.h"
#include "planner/planner.h"

void ap_plan_opts_default(ap_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->gpus = 8;
    o->gpus_per_node = 0;
    o->global_batch = 512;
    o->ilp_time_limit = 10;
    o->ilp_gap = 1e-4;
    o->progress = 1;
}

/* Everything priced for one (stage count, mesh, micro-batch). */
typedef struct {
    const ap_graph *g;
    const ap_cluster *c;
    const ap_parts *m;
    ap_mesh mesh;
    int p, nmicro;
    double batch, limit;
    ap_block *blocks; /* [nblocks] */
    int *cnt;         /* [nclasses][L+1] prefix counts of each class */
} config;

typedef struct {
    double t, mem;
    int point;
    ap_recompute rc;
} choice;

static const ap_block_point *point_of(const ap_block *b, int k)
{
    if (!b->npoints)
        return NULL;
    return &b->points[k < b->npoints ? k : b->npoints - 1];
}

/* The fastest (point, recomputation) for layers [i, j) as stage s. */
static int best_choice(const config *cf, int s, int i, int j, choice *out)
{
    double inflight = fmin(cf->p - s, cf->nmicro);
    int maxpts = 1;
    for (int b = 0; b < cf->m->nblocks; b++)
        if (cf->blocks[b].npoints > maxpts)
            maxpts = cf->blocks[b].npoints;
    out->t = INFINITY;
    for (int rc = AP_RECOMPUTE_NONE; rc <= AP_RECOMPUTE_FULL; rc += 2) {
        for (int k = 0; k < maxpts; k++) {
            double t = 0, param = 0, act = 0, work = 0;
            for (int c = 0; c < cf->m->nclasses; c++) {
                double n = cf->cnt[c * (cf->g->nlayers + 1) + j] -
                           cf->cnt[c * (cf->g->nlayers + 1) + i];
                const ap_block_point *bp = point_of(&cf->blocks[2 + c], k);
                if (!n || !bp)
                    continue;
                t += n * (bp->fwd + bp->bwd + (rc ? bp->fwd : 0));
                param += n * bp->param_bytes;
                act += n * (rc ? bp->input_bytes : bp->act_bytes);
                if (rc)
                    work = fmax(work, bp->act_bytes);
            }
            for (int e = 0; e < 2; e++) {
                if ((e == 0 && s != 0) || (e == 1 && s != cf->p - 1))
                    continue;
                const ap_block_point *bp = point_of(&cf->blocks[e], k);
                if (!bp)
                    continue;
                t += bp->fwd + bp->bwd;
                param += bp->param_bytes;
                act += bp->act_bytes;
            }
            double mem = param + inflight * act + work;
            if (mem <= cf->limit && t < out->t) {
                *out = (choice){t, mem, k, (ap_recompute)rc};
            }
        }
    }
    return !isinf(out->t);
}

static int stage_cost(void *ctx, int s, int i, int j, double *t)
{
    choice ch;
    if (!best_choice(ctx, s, i, j, &ch))
        return 0;
    *t = ch.t;
    return 1;
}

static int solve_blocks(config *cf, const ap_plan_opts *o, char *err)
{
    ap_price_ctx x = {cf->g, cf->c, &cf->mesh, cf->batch, cf->nmicro, AP_ZERO_1};
    for (int b = 0; b < cf->m->nblocks; b++) {
        if (!cf->m->nops[b])
            continue;
        int rc = ap_block_solve(&x, cf->m->ops[b], cf->m->nops[b], cf->p,
                                o->ilp_time_limit, o->ilp_gap, &cf->blocks[b], err);
        if (rc)
            return rc;
    }
    return AP_OK;
}

static void config_free(config *cf)
{
    if (cf->blocks)
        for (int b = 0; b < cf->m->nblocks; b++)
            ap_block_free(&cf->blocks[b]);
    free(cf->blocks);
    free(cf->cnt);
}

static int copy_block(const ap_block *src, int k, ap_block *dst)
{
    memset(dst, 0, sizeof *dst);
    if (!src->npoints)
        return 0;
    k = k < src->npoints ? k : src->npoints - 1;
    dst->ops = malloc(sizeof(int) * (size_t)src->nops);
    dst->points = calloc(1, sizeof *dst->points);
    if (!dst->ops || !dst->points)
        return -1;
    memcpy(dst->ops, src->ops, sizeof(int) * (size_t)src->nops);
    dst->nops = src->nops;
    dst->points[0] = src->points[k];
    dst->points[0].strat = malloc(sizeof(ap_strategy) * (size_t)src->nops);
    if (!dst->points[0].strat)
        return -1;
    memcpy(dst->points[0].strat, src->points[k].strat,
           sizeof(ap_strategy) * (size_t)src->nops);
    dst->npoints = 1;
    dst->ilp = src->ilp;
    return 0;
}

/* Turns the cuts of a configuration into a plan and prices it. */
static int make_plan(const config *cf, const int *first, const ap_plan_opts *o,
                     ap_plan *p, char *err)
{
    memset(p, 0, sizeof *p);
    const ap_graph *g = cf->g;
    snprintf(p->model, sizeof p->model, "%s", g->name);
    snprintf(p->cluster, sizeof p->cluster, "%s", cf->c->name);
    p->gpus = o->gpus;
    p->gpus_per_node = cf->c->gpus_per_node;
    p->global_batch = o->global_batch;
    p->micro_batch = cf->batch;
    p->nmicro = cf->nmicro;
    p->schedule = AP_SCHED_1F1B;
    p->vchunks = 1;
    p->zero = AP_ZERO_1;
    p->nstages = cf->p;
    p->nclasses = cf->m->nclasses;
    p->stages = calloc((size_t)cf->p, sizeof *p->stages);
    p->classes = malloc(sizeof(int) * (size_t)p->nclasses);
    if (!p->stages || !p->classes)
        goto oom;
    memcpy(p->classes, cf->m->classes, sizeof(int) * (size_t)p->nclasses);
    int per = o->gpus / cf->p;
    for (int s = 0; s < cf->p; s++) {
        ap_stage *st = &p->stages[s];
        int end = s + 1 < cf->p ? first[s + 1] : g->nlayers;
        choice ch;
        best_choice(cf, s, first[s], end, &ch);
        st->first_layer = first[s];
        st->nlayers = end - first[s];
        st->has_pre = s == 0;
        st->has_post = s == cf->p - 1;
        st->first_rank = s * per;
        st->ngpus = per;
        ap_mesh_init(&st->mesh, cf->mesh.d[0], cf->mesh.d[1], st->first_rank,
                     cf->c->gpus_per_node);
        st->recompute = ch.rc;
        st->blocks = calloc((size_t)cf->m->nblocks, sizeof *st->blocks);
        st->point = calloc((size_t)cf->m->nblocks, sizeof *st->point);
        if (!st->blocks || !st->point)
            goto oom;
        for (int b = 0; b < cf->m->nblocks; b++) {
            if (copy_block(&cf->blocks[b], ch.point, &st->blocks[b]))
                goto oom;
            if (st->blocks[b].npoints) {
                if (st->blocks[b].ilp.status > p->ilp_status)
                    p->ilp_status = st->blocks[b].ilp.status;
                p->ilp_gap = fmax(p->ilp_gap, st->blocks[b].ilp.gap);
            }
        }
    }
    return ap_plan_evaluate(g, cf->c, p, err);
oom:
    ap_plan_free(p);
    snprintf(err, AP_ERR_LEN, "out of memory building a plan");
    return AP_EINTERNAL;
}

/* Logical meshes tried for a submesh of n GPUs: 1-D (1, n), and 2-D shapes
 * whose inner axis stays inside a node: (n/G, G) and (2n/G, G/2) across
 * nodes, (2, n/2) and (4, n/4) inside one. Other shapes only permute these
 * or put a node boundary inside the inner axis. */
static int mesh_wanted(int n, int d1, int G)
{
    if (d1 == n)
        return 1;
    if (n > G)
        return d1 == G || d1 == G / 2;
    return d1 * 2 == n || (d1 * 4 == n && n >= 8);
}

/* Micro-batches of 1 .. 2n sequences (n GPUs per stage): beyond that the
 * activations grow with no gain in efficiency; and at least p of them. */
static int batch_wanted(double mb, double gbs, int n, int p)
{
    if (fmod(gbs, mb) != 0 || mb > 2.0 * n)
        return 0;
    return p == 1 || gbs / mb >= p;
}

static int valid_submesh(int n, int G)
{
    if (n <= G)
        return G % n == 0;
    return n % G == 0;
}

typedef struct {
    double best_step;
    ap_plan best;
    int have;
    double least_shortfall; /* bytes over the limit of the smallest plan */
    int tried, total;
    time_t started;
} search_state;

static void progress(search_state *st, const ap_plan_opts *o)
{
    if (!o->progress)
        return;
    if (time(NULL) - st->started >= 1)
        fprintf(stderr, "\rautopar: searching %d/%d configurations%s",
                st->tried, st->total, st->tried == st->total ? "\n" : "");
}

static int try_config(config *cf, const ap_plan_opts *o, search_state *ss,
                      char *err)
{
    cf->blocks = calloc((size_t)cf->m->nblocks, sizeof *cf->blocks);
    int L = cf->g->nlayers;
    cf->cnt = calloc((size_t)cf->m->nclasses * (L + 1), sizeof *cf->cnt);
    if (!cf->blocks || !cf->cnt) {
        snprintf(err, AP_ERR_LEN, "out of memory");
        return AP_EINTERNAL;
    }
    for (int c = 0; c < cf->m->nclasses; c++)
        for (int l = 0; l < L; l++)
            cf->cnt[c * (L + 1) + l + 1] = cf->cnt[c * (L + 1) + l] +
                                           (cf->m->layer_block[l] == 2 + c);
    int rc = solve_blocks(cf, o, err);
    if (rc == AP_EINPUT)
        return AP_OK; /* no strategy on this mesh: not a candidate */
    if (rc)
        return rc;
    int *first = malloc(sizeof(int) * (size_t)cf->p);
    if (!first)
        return AP_EINTERNAL;
    double obj = ap_stage_dp(L, cf->p, cf->nmicro, stage_cost, cf, first);
    if (isinf(obj)) {
        /* Record how far the leanest stage is from fitting. */
        double lean = 0;
        for (int b = 0; b < cf->m->nblocks; b++) {
            const ap_block *blk = &cf->blocks[b];
            if (!blk->npoints)
                continue;
            const ap_block_point *bp = &blk->points[blk->npoints - 1];
            double n = b >= 2 ? (double)L / cf->p : 1;
            lean += n * (bp->param_bytes + bp->input_bytes * cf->p);
        }
        double short_by = lean - cf->limit;
        if (short_by > 0 && short_by < ss->least_shortfall)
            ss->least_shortfall = short_by;
        free(first);
        return AP_OK;
    }
    ap_plan plan;
    rc = make_plan(cf, first, o, &plan, err);
    free(first);
    if (rc)
        return rc;
    if (plan.max_mem_bytes <= cf->limit && plan.step_time < ss->best_step) {
        if (ss->have)
            ap_plan_free(&ss->best);
        ss->best = plan;
        ss->best_step = plan.step_time;
        ss->have = 1;
    } else {
        ap_plan_free(&plan);
    }
    return AP_OK;
}

static int count_configs(const ap_plan_opts *o, int L, int G)
{
    int n = 0, D = o->gpus;
    for (int p = 1; p <= D && p <= L; p++) {
        if (D % p || !valid_submesh(D / p, G) || (o->no_pipeline && p > 1) ||
            (o->max_stages && p > o->max_stages))
            continue;
        for (int d1 = 1; d1 <= D / p; d1++)
            if ((D / p) % d1 == 0 && mesh_wanted(D / p, d1, G))
                for (double mb = 1; mb <= o->global_batch; mb *= 2)
                    n += batch_wanted(mb, o->global_batch, D / p, p);
    }
    return n;
}

int ap_plan_search(const ap_graph *g, const ap_cluster *c,
                   const ap_plan_opts *o, ap_plan *out, char *err)
{
    int D = o->gpus, G = c->gpus_per_node;
    ap_parts m;
    int rc = ap_parts_build(g, &m, err);
    if (rc)
        return rc;
    search_state ss;
    memset(&ss, 0, sizeof ss);
    ss.best_step = ss.least_shortfall = INFINITY;
    ss.started = time(NULL);
    ss.total = count_configs(o, g->nlayers, G);
    double limit = ap_cluster_usable_bytes(c);
    for (int p = 1; p <= D && p <= g->nlayers && rc == AP_OK; p++) {
        if (D % p || !valid_submesh(D / p, G) || (o->no_pipeline && p > 1) ||
            (o->max_stages && p > o->max_stages))
            continue;
        int n = D / p;
        for (int d1 = 1; d1 <= n && rc == AP_OK; d1++) {
            if (n % d1 || !mesh_wanted(n, d1, G))
                continue;
            for (double mb = 1; mb <= o->global_batch && rc == AP_OK; mb *= 2) {
                if (!batch_wanted(mb, o->global_batch, n, p))
                    continue;
                ss.tried++;
                config cf;
                memset(&cf, 0, sizeof cf);
                cf.g = g;
                cf.c = c;
                cf.m = &m;
                cf.p = p;
                cf.nmicro = (int)(o->global_batch / mb);
                cf.batch = mb;
                cf.limit = limit;
                ap_mesh_init(&cf.mesh, n / d1, d1, 0, G);
                rc = try_config(&cf, o, &ss, err);
                config_free(&cf);
                progress(&ss, o);
            }
        }
    }
    ap_parts_free(&m);
    if (rc) {
        if (ss.have)
            ap_plan_free(&ss.best);
        return rc;
    }
    if (!ss.have) {
        if (isinf(ss.least_shortfall))
            snprintf(err, AP_ERR_LEN,
                     "%s does not fit on %d GPUs of %.0f GiB: no stage split, "
                     "mesh or micro-batch fits; try more GPUs", g->name, D,
                     limit / (1 << 30));
        else
            snprintf(err, AP_ERR_LEN,
                     "%s does not fit on %d GPUs: the leanest plan needs %.1f GiB "
                     "more per GPU than the %.1f GiB usable; try more GPUs, a "
                     "smaller --global-batch or a shorter --seq", g->name, D,
                     ss.least_shortfall / (1 << 30), limit / (1 << 30));
        return AP_EINPUT;
    }
    *out = ss.best;
    return AP_OK;
}
