/* candidate.c -- one configuration of the outer search solved into a plan:
 * the blocks' ILPs on the candidate's mesh, the stage cuts by dynamic
 * programming, per stage the memory/speed point and recomputation.
 *
 * The fastest ILP point of every block comes first; the sweep of leaner
 * points runs only when memory binds, that is when the cuts found under the
 * memory limit are slower than those found without one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/candidate.h"

#define ALL_POINTS 64

/* Everything priced for one (stage count, mesh, micro-batch). */
typedef struct {
    const ap_graph *g;
    const ap_cluster *c;
    const ap_parts *m;
    ap_mesh mesh;
    int p, nmicro;
    double batch, limit;
    ap_block *blocks; /* [nblocks] */
    const int *cnt;   /* [nclasses][L+1] prefix counts of each class */
    ap_zero zero;     /* the optimizer-state sharding the points are priced at */
    ap_run_settings run; /* ap_plan_opts.run, less what the search does not
                            price (run_settings_of) */
    int max_local_experts; /* ap_plan_opts.max_local_experts */
} config;

typedef struct {
    double t, mem;
    int point;
    ap_recompute rc;
} choice;

/* Nodes the embedding group spans when the stages are cut: stage s starts
 * at rank s * GPUs / p (make_plan), so the first and last stage's first
 * ranks are 0 and (p - 1) * GPUs / p. */
static int embed_group_nodes(const config *cf)
{
    int per = cf->mesh.d[0] * cf->mesh.d[1];
    return (cf->p - 1) * per / cf->c->gpus_per_node > 0 ? 2 : 1;
}

static const ap_block_point *point_of(const ap_block *b, int k)
{
    if (!b->npoints)
        return NULL;
    return &b->points[k < b->npoints ? k : b->npoints - 1];
}

/* What recomputation rc costs a layer of block point bp and what the layer
 * then keeps: under full recomputation its forward again and its input;
 * under selective recomputation of the run's modules their forward again
 * (the attention's too where core_attn is one of them) and its activations
 * less what they free; otherwise nothing and its activations. */
static void layer_under(const config *cf, const ap_block_point *bp, ap_recompute rc,
                        double *t, double *act)
{
    *t = bp->fwd + bp->bwd + (rc == AP_RECOMPUTE_FULL        ? bp->fwd
                              : rc == AP_RECOMPUTE_SELECTIVE ? ap_selective_fwd(&cf->run, bp)
                                                             : 0);
    *act = rc == AP_RECOMPUTE_FULL        ? bp->input_bytes
         : rc == AP_RECOMPUTE_SELECTIVE ? bp->act_bytes - bp->rc_freed
                                          : bp->act_bytes;
}

/* The fastest (point, recomputation) for layers [i, j) as stage s. The
 * search tries no recomputation and full; selective too where the run
 * names modules beyond core_attn (with flash attention, core_attn alone
 * frees nothing worth its time). */
static int best_choice(const config *cf, int s, int i, int j, choice *out)
{
    double inflight = fmin(cf->p - s, cf->nmicro);
    int maxpts = 1;
    for (int b = 0; b < cf->m->nblocks; b++)
        if (cf->blocks[b].npoints > maxpts)
            maxpts = cf->blocks[b].npoints;
    ap_recompute rcs[3] = {AP_RECOMPUTE_NONE, AP_RECOMPUTE_FULL, AP_RECOMPUTE_SELECTIVE};
    int nrc = ap_run_rc_modules(&cf->run) & ~(unsigned)AP_MODULE_CORE_ATTN ? 3 : 2;
    out->t = INFINITY;
    for (int r = 0; r < nrc; r++) {
        ap_recompute rc = rcs[r];
        for (int k = 0; k < maxpts; k++) {
            double t = 0, param = 0, act = 0, work = 0;
            for (int c = 0; c < cf->m->nclasses; c++) {
                double n = cf->cnt[c * (cf->g->nlayers + 1) + j] -
                           cf->cnt[c * (cf->g->nlayers + 1) + i];
                const ap_block_point *bp = point_of(&cf->blocks[2 + c], k);
                if (!n || !bp)
                    continue;
                double lt, la;
                layer_under(cf, bp, rc, &lt, &la);
                t += n * lt;
                param += n * bp->param_bytes;
                act += n * la;
                if (rc == AP_RECOMPUTE_FULL)
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
                *out = (choice){t, mem, k, rc};
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

/* How a configuration's blocks are priced, at ZeRO level `zero`: the
 * search's own settings, the p2p ring for context parallelism. */
static ap_price_ctx price_ctx_of(const config *cf, ap_zero zero)
{
    ap_price_ctx x = {.g = cf->g, .c = cf->c, .mesh = &cf->mesh, .batch = cf->batch,
                      .nmicro = cf->nmicro, .zero = zero, .run = cf->run,
                      .head_apart = cf->p > 1,
                      .embed_group_nodes = embed_group_nodes(cf),
                      .max_local_experts = cf->max_local_experts};
    return x;
}

/* Solves every block; *timed_out says that one found no solution within
 * the ILP time limit, and then the configuration cannot be priced. The
 * planner's plans keep bf16 gradients unless asked
 * (ap_plan_opts.run.grad_fp32), which their Megatron-LM exports state with
 * --grad-reduce-in-bf16, and fp32 optimizer states unless asked
 * (ap_plan_opts.run.opt). */
static int solve_blocks(config *cf, const ap_plan_opts *o, int points,
                        int *timed_out, char *err)
{
    ap_price_ctx x = price_ctx_of(cf, AP_ZERO_1);
    for (int b = 0; b < cf->m->nblocks; b++) {
        if (!cf->m->nops[b])
            continue;
        ap_block_free(&cf->blocks[b]);
        int rc = ap_block_solve_points(&x, cf->m->ops[b], cf->m->nops[b], cf->p,
                                       o->ilp_time_limit, o->ilp_gap, points,
                                       &cf->blocks[b], err);
        if (rc)
            return rc;
        if (cf->blocks[b].ilp.status == AP_ILP_TIMEOUT) {
            *timed_out = 1;
            return AP_OK;
        }
    }
    return AP_OK;
}

/* A floor under any plan of the configuration. Under 1F1B stage s starts
 * only after micro-batch 0 has passed the stages before it, works m * t_s,
 * and its last backward must still pass back through them, so the step is
 * at least max_s (sum_{i<s} t_i + m * t_s). Each stage holds a whole number
 * of layers, each taking at least `layer` seconds, and the first and last
 * stage carry the pieces before and after the layers: the floor is the least
 * such maximum over all ways to cut the layers. */
typedef struct {
    int L, p;
    double m, layer, pre, post;
} floor_problem;

/* Whether every term can stay within C: stages take as many layers as they
 * can, which leaves the most room to the later ones when m >= 1. */
static int cuts_within(const floor_problem *f, double C)
{
    double used = 0; /* layers before stage s */
    for (int s = 0; s < f->p; s++) {
        double prefix = used * f->layer + (s > 0 ? f->pre : 0);
        double own = (s == 0 ? f->pre : 0) + (s == f->p - 1 ? f->post : 0);
        double room = (C - prefix) / f->m - own;
        double n = f->layer > 0 ? floor(room / f->layer * (1 + 1e-12)) : f->L;
        if (room < 0 || n < 1)
            return 0;
        used += n;
        if (used >= f->L)
            return s + 1 <= f->p;
    }
    return used >= f->L;
}

static double pipeline_floor(const floor_problem *f)
{
    double lo = 0, hi = f->m * (f->L * f->layer + f->pre + f->post) + 1e-12;
    while (!cuts_within(f, hi))
        hi *= 2;
    for (int i = 0; i < 64 && hi - lo > 1e-12 * hi; i++) {
        double mid = 0.5 * (lo + hi);
        if (cuts_within(f, mid))
            hi = mid;
        else
            lo = mid;
    }
    return lo;
}

/* The least time each op of block b can take (edges free), and the most
 * gradient synchronisation it can cost, summed over the block's ops. */
static void block_floor(const config *cf, const ap_price_ctx *x, int b,
                        double *least_sum, double *sync_most)
{
    *least_sum = *sync_most = 0;
    for (int i = 0; i < cf->m->nops[b]; i++) {
        ap_strategy st[AP_MAX_STRATEGIES];
        int n = ap_strategies(x, cf->m->ops[b][i], st, AP_MAX_STRATEGIES);
        double least = n ? INFINITY : 0, most = 0;
        for (int k = 0; k < n; k++) {
            ap_op_cost c;
            ap_price_op(x, cf->m->ops[b][i], &st[k], &c);
            least = fmin(least, c.fwd + c.bwd + c.fwd_comm + c.bwd_comm);
            most = fmax(most, c.grad_sync);
        }
        *least_sum += least;
        *sync_most += most;
    }
}

/* Floors per block from prices alone or, once the blocks are solved, from
 * the fastest points too: the fastest point minimises time plus
 * synchronisation per micro-batch, so any other point takes at least its
 * objective (less the solver's gap) less the most synchronisation the block
 * can cost; recomputation only adds. */
static double lower_bound_of(const config *cf, const ap_plan_opts *o, int solved)
{
    ap_price_ctx x = price_ctx_of(cf, AP_ZERO_1);
    floor_problem f = {cf->g->nlayers, cf->p, cf->nmicro, INFINITY, 0, 0};
    for (int b = 0; b < cf->m->nblocks; b++) {
        if (!cf->m->nops[b])
            continue;
        double least, sync;
        block_floor(cf, &x, b, &least, &sync);
        if (solved && cf->blocks[b].npoints) {
            const ap_ilp_result *r = &cf->blocks[b].ilp;
            double gap = fmax(r->gap, o->ilp_gap);
            least = fmax(least, r->objective * (1 - gap) - sync / cf->nmicro);
        }
        if (b == 0)
            f.pre = least;
        else if (b == 1)
            f.post = least;
        else
            f.layer = fmin(f.layer, least);
    }
    if (isinf(f.layer))
        f.layer = 0;
    return pipeline_floor(&f);
}

static void config_free(config *cf)
{
    if (cf->blocks)
        for (int b = 0; b < cf->m->nblocks; b++)
            ap_block_free(&cf->blocks[b]);
    free(cf->blocks);
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
    p->gpus = o->gpus;
    p->gpus_per_node = cf->c->gpus_per_node;
    p->global_batch = o->global_batch;
    p->micro_batch = cf->batch;
    p->nmicro = cf->nmicro;
    p->schedule = AP_SCHED_1F1B;
    p->vchunks = 1;
    p->zero = cf->zero;
    p->run = cf->run;
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


int ap_search_ctx_init(ap_search_ctx *s, const ap_graph *g, const ap_cluster *c,
                       const ap_parts *m, const ap_plan_opts *o)
{
    int L = g->nlayers;
    *s = (ap_search_ctx){g, c, m, o, NULL, ap_cluster_usable_bytes(c)};
    s->cnt = calloc((size_t)m->nclasses * (size_t)(L + 1), sizeof *s->cnt);
    if (!s->cnt)
        return -1;
    for (int k = 0; k < m->nclasses; k++)
        for (int l = 0; l < L; l++)
            s->cnt[k * (L + 1) + l + 1] = s->cnt[k * (L + 1) + l] +
                                          (m->layer_block[l] == 2 + k);
    return 0;
}

void ap_search_ctx_free(ap_search_ctx *s)
{
    free(s->cnt);
    s->cnt = NULL;
}

/* The settings the search prices its plans with: the options' FP8, TP
 * overlap, loss kernels, gradient and optimizer-state dtypes. It prices no
 * FP8 primary weights, context parallelism's p2p ring alone, no expert
 * all-to-all overlap and no deferred output-layer weight gradients, so
 * those stay at their zeroed defaults. */
static ap_run_settings run_settings_of(const ap_plan_opts *o)
{
    ap_run_settings r = o->run;
    r.fp8_param_gather = 0;
    r.cp_comm = AP_CP_P2P;
    r.moe_a2a_overlap = r.delay_wgrad = 0;
    r.defer_wgrad = r.wgrad_deferral_limit = 0;
    return r;
}

static void config_init(config *cf, const ap_search_ctx *s, const ap_candidate *k)
{
    memset(cf, 0, sizeof *cf);
    cf->g = s->g;
    cf->c = s->c;
    cf->m = s->m;
    cf->p = k->p;
    cf->nmicro = (int)(s->o->global_batch / k->mb);
    cf->batch = k->mb;
    cf->limit = s->limit;
    cf->run = run_settings_of(s->o);
    cf->max_local_experts = s->o->max_local_experts;
    cf->cnt = s->cnt;
    cf->zero = AP_ZERO_1;
    ap_mesh_init(&cf->mesh, k->d0, k->d1, 0, s->c->gpus_per_node);
}

void ap_candidate_bound(const ap_search_ctx *s, ap_candidate *k)
{
    config cf;
    config_init(&cf, s, k);
    k->bound = lower_bound_of(&cf, s->o, 0);
}

static const ap_block_point *leanest(const ap_block *b)
{
    return b->npoints ? &b->points[b->npoints - 1] : NULL;
}

/* What stage s of an even split needs at the leanest points with full
 * recomputation: each layer keeps only its input, for each of the p - s
 * micro-batches in flight, plus one layer's activations being redone. */
static double stage_need(const config *cf, int s, int i, int j)
{
    int L = cf->g->nlayers;
    double inflight = fmin(cf->p - s, cf->nmicro), need = 0, work = 0;
    for (int k = 0; k < cf->m->nclasses; k++) {
        double n = cf->cnt[k * (L + 1) + j] - cf->cnt[k * (L + 1) + i];
        const ap_block_point *bp = leanest(&cf->blocks[2 + k]);
        if (!n || !bp)
            continue;
        need += n * (bp->param_bytes + inflight * bp->input_bytes);
        work = fmax(work, bp->act_bytes);
    }
    for (int e = 0; e < 2; e++) {
        const ap_block_point *bp = leanest(&cf->blocks[e]);
        if (bp && ((e == 0 && s == 0) || (e == 1 && s == cf->p - 1)))
            need += bp->param_bytes + inflight * bp->act_bytes;
    }
    return need + work;
}

static void shortfall_of(const config *cf, ap_shortfall *sf)
{
    int L = cf->g->nlayers;
    sf->bytes = -INFINITY;
    for (int s = 0; s < cf->p; s++) {
        int i = (int)((long)L * s / cf->p), j = (int)((long)L * (s + 1) / cf->p);
        double need = stage_need(cf, s, i, j);
        if (need - cf->limit > sf->bytes)
            *sf = (ap_shortfall){need - cf->limit, need, s, cf->p, i, j,
                                 cf->mesh.d[0] * cf->mesh.d[1], 0};
    }
}

static double cuts(config *cf, double limit, int *first)
{
    double keep = cf->limit;
    cf->limit = limit;
    double obj = ap_stage_dp(cf->g->nlayers, cf->p, cf->nmicro, stage_cost, cf,
                             first);
    cf->limit = keep;
    return obj;
}

/* Prices every point of every block again under another ZeRO level; the
 * strategies stay. */
static void reprice(config *cf, ap_zero zero)
{
    ap_price_ctx x = price_ctx_of(cf, zero);
    cf->zero = zero;
    for (int b = 0; b < cf->m->nblocks; b++) {
        ap_block *blk = &cf->blocks[b];
        for (int i = 0; i < blk->npoints; i++) {
            ap_strategy *strat = blk->points[i].strat;
            ap_block_price(&x, blk->ops, blk->nops, strat, &blk->points[i]);
            blk->points[i].strat = strat;
        }
    }
}

/* When memory binds under ZeRO-1, sharding gradients (ZeRO-2) or weights
 * too (ZeRO-3) frees memory for faster points at the price of more
 * communication: the cuts are found again at each level and the fastest
 * level kept. Without memory pressure they can only be slower. */
static double try_zero_levels(config *cf, double obj, int *first)
{
    ap_zero best = AP_ZERO_1;
    for (ap_zero z = AP_ZERO_2; z <= AP_ZERO_3; z++) {
        reprice(cf, z);
        double o = cuts(cf, cf->limit, first);
        if (o < obj) {
            obj = o;
            best = z;
        }
    }
    reprice(cf, best);
    return cuts(cf, cf->limit, first);
}

int ap_candidate_solve(const ap_search_ctx *s, const ap_candidate *k,
                       double beat, ap_plan *plan, int *have, ap_shortfall *sf,
                       char *err)
{
    config cf;
    config_init(&cf, s, k);
    *have = 0;
    memset(sf, 0, sizeof *sf);
    sf->bytes = INFINITY;
    cf.blocks = calloc((size_t)cf.m->nblocks, sizeof *cf.blocks);
    int *first = malloc(sizeof(int) * (size_t)cf.p);
    int rc = AP_EINTERNAL;
    if (!cf.blocks || !first) {
        snprintf(err, AP_ERR_LEN, "out of memory");
        goto done;
    }
    rc = solve_blocks(&cf, s->o, 1, &sf->timed_out, err);
    if (rc || sf->timed_out)
        goto done;
    double free_obj = cuts(&cf, INFINITY, first);
    double obj = cuts(&cf, cf.limit, first);
    if (!(obj <= free_obj * (1 + 1e-12)) && lower_bound_of(&cf, s->o, 1) > beat) {
        sf->bytes = -1; /* memory binds, and no plan here could win */
        goto done;
    }
    if (!(obj <= free_obj * (1 + 1e-12))) {
        /* Memory binds: trade speed for memory with the leaner points. */
        rc = solve_blocks(&cf, s->o, ALL_POINTS, &sf->timed_out, err);
        if (rc || sf->timed_out)
            goto done;
        obj = try_zero_levels(&cf, cuts(&cf, cf.limit, first), first);
    }
    if (isinf(obj)) {
        shortfall_of(&cf, sf);
        goto done;
    }
    rc = make_plan(&cf, first, s->o, plan, err);
    if (rc == AP_OK && plan->max_mem_bytes <= cf.limit)
        *have = 1;
    else if (rc == AP_OK)
        ap_plan_free(plan);
done:
    if (rc == AP_EINPUT)
        rc = AP_OK; /* no strategy on this mesh: not a candidate */
    free(first);
    config_free(&cf);
    return rc;
}
