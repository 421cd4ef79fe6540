/* search.c -- the outer search: stage count, submesh and logical mesh, and
 * micro-batch, each candidate solved by candidate.c.
 *
 * Stages get equal submeshes (every launcher we export to requires it), so
 * a stage count p fixes the submesh size D/p; each submesh is (1, 2^k) inside
 * a node or whole nodes. Candidates are visited in order of a lower bound on
 * their step time, and the search stops once the bound passes the best plan
 * found: no plan it skips could have won. Worker threads take candidates in
 * that order; the winner is the fastest plan, ties to the first enumerated,
 * so the answer does not depend on the number of threads. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner/candidate.h"
#include "planner/layout.h"

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

/* Logical meshes tried for a submesh of n GPUs: 1-D (1, n), and 2-D shapes
 * whose inner axis stays inside a node: (n/G, G) and (2n/G, G/2) across
 * nodes, (2, n/2) and (4, n/4) inside one. Other shapes only permute these
 * or put a node boundary inside the inner axis; inside a node both axes
 * ride the same links, so (a, b) and (b, a) price alike and only a <= b is
 * tried. */
static int mesh_wanted(int n, int d1, int G)
{
    if (d1 == n)
        return 1;
    if (n > G)
        return d1 == G || d1 == G / 2;
    int d0 = n / d1;
    return d0 <= d1 && (d0 == 2 || d0 == 4);
}

/* Micro-batches of every power of two that divides the global batch, with
 * at least p of them; the bounds rule out the hopeless ones cheaply. Large
 * micro-batches run GEMMs nearer peak and leave one long backward to hide
 * the gradient synchronisation behind. */
static int batch_wanted(double mb, double gbs, int p)
{
    if (fmod(gbs, mb) != 0)
        return 0;
    return p == 1 || gbs / mb >= p;
}

static int valid_submesh(int n, int G)
{
    if (n <= G)
        return G % n == 0;
    return n % G == 0;
}

static int stage_count_wanted(const ap_plan_opts *o, int p, int L, int G)
{
    int D = o->gpus;
    return p <= L && D % p == 0 && valid_submesh(D / p, G) &&
           !(o->no_pipeline && p > 1) && !(o->max_stages && p > o->max_stages);
}

/* Every (stage count, logical mesh, micro-batch) the search considers, in a
 * fixed order; returns the count, or -1 when out of memory. */
static int enumerate(const ap_plan_opts *o, int L, int G, ap_candidate **out)
{
    int n = 0, cap = 64, D = o->gpus;
    ap_candidate *k = malloc(sizeof *k * (size_t)cap);
    if (!k)
        return -1;
    for (int p = 1; p <= D && p <= L; p++) {
        if (!stage_count_wanted(o, p, L, G))
            continue;
        int per = D / p;
        for (int d1 = 1; d1 <= per; d1++) {
            if (per % d1 || !mesh_wanted(per, d1, G))
                continue;
            for (double mb = 1; mb <= o->global_batch; mb *= 2) {
                if (!batch_wanted(mb, o->global_batch, p))
                    continue;
                if (n == cap) {
                    cap *= 2;
                    ap_candidate *nk = realloc(k, sizeof *k * (size_t)cap);
                    if (!nk) {
                        free(k);
                        return -1;
                    }
                    k = nk;
                }
                k[n] = (ap_candidate){p, per / d1, d1, mb, n, 0};
                n++;
            }
        }
    }
    *out = k;
    return n;
}

static int by_bound(const void *a, const void *b)
{
    const ap_candidate *x = a, *y = b;
    if (x->bound != y->bound)
        return x->bound < y->bound ? -1 : 1;
    return x->index - y->index;
}

typedef struct {
    const ap_search_ctx *ctx;
    ap_candidate *cand;
    int ncand;
    pthread_mutex_t lock;
    int next, solved, skipped, timeouts;
    double best_step;
    int best_index, have;
    ap_plan best;
    ap_shortfall least;     /* the candidate closest to fitting */
    int least_index;
    double least_mb;        /* its micro-batch, in sequences */
    int rc;
    char err[AP_ERR_LEN];
    double started;
    int shown;           /* the progress line is on the terminal */
    int logged;          /* the count the last log line gave, -1: none */
    double interval;     /* seconds between log lines */
    double next_line;    /* seconds in, for AP_PROGRESS_LOG */
} search;

double ap_progress_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double ap_progress_log_interval(void)
{
    const char *v = getenv("AP_PROGRESS_INTERVAL_S");
    char *end;
    double s = v ? strtod(v, &end) : 0;
    return v && end != v && !*end && s > 0 && s <= 3600 ? s : AP_PROGRESS_LOG_S;
}

static void log_line(search *s, double t)
{
    fprintf(stderr, "autopar: searching: %d of %d configurations solved, %d ruled "
            "out by bound (%.0f s)\n", s->solved, s->ncand, s->skipped, t);
}

/* The progress, called under the lock by whichever thread has just
 * solved a candidate. */
static void show_progress(search *s)
{
    double t = ap_progress_now() - s->started;
    if (!s->ctx->o->progress || t < s->next_line)
        return;
    if (s->ctx->o->progress == AP_PROGRESS_LOG) {
        s->next_line = t + s->interval;
        s->logged = s->solved + s->skipped;
        log_line(s, t);
        return;
    }
    s->shown = 1;
    fprintf(stderr, "\rautopar: searching: %d of %d configurations solved, "
            "%d ruled out by bound", s->solved, s->ncand, s->skipped);
}

/* Keeps the faster plan, the first enumerated on a tie. */
static void offer(search *s, const ap_candidate *k, ap_plan *plan)
{
    if (!s->have || plan->step_time < s->best_step ||
        (plan->step_time == s->best_step && k->index < s->best_index)) {
        if (s->have)
            ap_plan_free(&s->best);
        s->best = *plan;
        s->best_step = plan->step_time;
        s->best_index = k->index;
        s->have = 1;
    } else {
        ap_plan_free(plan);
    }
}

/* The next candidate worth solving, or NULL; called under the lock. */
static const ap_candidate *take(search *s)
{
    if (s->rc || s->next >= s->ncand)
        return NULL;
    const ap_candidate *k = &s->cand[s->next];
    if (s->have && k->bound > s->best_step) {
        s->skipped += s->ncand - s->next;
        s->next = s->ncand;
        return NULL;
    }
    s->next++;
    return k;
}

static void *worker(void *arg)
{
    search *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        const ap_candidate *k = take(s);
        double beat = s->have ? s->best_step : INFINITY;
        pthread_mutex_unlock(&s->lock);
        if (!k)
            break;
        ap_plan plan;
        int have;
        ap_shortfall sf;
        char err[AP_ERR_LEN];
        int rc = ap_candidate_solve(s->ctx, k, beat, &plan, &have, &sf, err);
        pthread_mutex_lock(&s->lock);
        s->solved++;
        if (rc && !s->rc) {
            s->rc = rc;
            memcpy(s->err, err, sizeof err);
        }
        if (rc == AP_OK && have)
            offer(s, k, &plan);
        if (rc == AP_OK && sf.timed_out)
            s->timeouts++;
        if (rc == AP_OK && !have && sf.bytes > 0 && !isinf(sf.bytes) &&
            (sf.bytes < s->least.bytes ||
             (sf.bytes == s->least.bytes && k->index < s->least_index))) {
            s->least = sf;
            s->least_index = k->index;
            s->least_mb = k->mb;
        }
        show_progress(s);
        pthread_mutex_unlock(&s->lock);
    }
    ap_ilp_thread_done();
    return NULL;
}

static int thread_count(const ap_plan_opts *o, int ncand)
{
    long n = o->threads > 0 ? o->threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (n > ncand)
        n = ncand;
    if (n > 256)
        n = 256;
    return n < 1 ? 1 : (int)n;
}

static int run_workers(search *s, int nthreads)
{
    pthread_t tid[256];
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&tid[started], NULL, worker, s))
            break;
    if (started == 0)
        worker(s);
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    return AP_OK;
}

/* What would lower the leanest candidate's memory. Stage s of a p-stage
 * pipeline keeps min(p - s, micro-batches) in flight, and the search makes
 * p-stage candidates only with at least p micro-batches, so a smaller
 * global batch never shortens that count; it can only shrink the
 * micro-batch, and only where the leanest one is above a sequence. More
 * GPUs shard the states and activations further, and a shorter sequence
 * shortens every activation. */
static void no_fit_advice(const search *s, double gbs, char *buf, size_t len)
{
    const ap_shortfall *f = &s->least;
    double inflight = fmin(f->nstages - f->stage, gbs / s->least_mb);
    if (s->least_mb > 1)
        snprintf(buf, len, "; it runs micro-batches of %g sequences there: try more GPUs, "
                 "a smaller --global-batch or a shorter --seq", s->least_mb);
    else
        snprintf(buf, len, "; it runs micro-batches of one sequence there (%g in flight), "
                 "which a smaller --global-batch does not change: try more GPUs or a "
                 "shorter --seq", inflight);
}

static void explain_no_fit(const ap_graph *g, const search *s, const ap_plan_opts *o,
                           double limit, char *err)
{
    const ap_shortfall *f = &s->least;
    double gib = 1 << 30;
    int D = o->gpus;
    if (isinf(f->bytes)) {
        snprintf(err, AP_ERR_LEN,
                 "%s does not fit on %d GPUs of %.1f GiB usable: no stage "
                 "split, mesh or micro-batch admits a sharding; try more GPUs",
                 g->name, D, limit / gib);
    } else {
        snprintf(err, AP_ERR_LEN,
                 "%s does not fit on %d GPU%s: even at its leanest (full "
                 "recomputation, the most sharded ops), stage %d of %d (layers "
                 "%d-%d on %d GPU%s) needs %.1f GiB per GPU, %.1f GiB more than "
                 "the %.1f GiB usable", g->name, D, D == 1 ? "" : "s", f->stage,
                 f->nstages, f->first_layer, f->end_layer - 1, f->ngpus,
                 f->ngpus == 1 ? "" : "s", f->need / gib,
                 f->bytes / gib, limit / gib);
        size_t n = strlen(err);
        no_fit_advice(s, o->global_batch, err + n, AP_ERR_LEN - n);
    }
    if (o->max_local_experts > 0) {
        size_t n = strlen(err);
        snprintf(err + n, AP_ERR_LEN - n, " (searched with at most %d experts per GPU, "
                 "--max-experts-per-gpu)", o->max_local_experts);
    }
}

/* Whether every stage's layers split into v equal chunks. */
static int chunks_divide(const ap_plan *p, int v)
{
    for (int i = 0; i < p->nstages; i++)
        if (p->stages[i].nlayers % v)
            return 0;
    return p->nmicro % p->nstages == 0;
}

/* Interleaved 1F1B on the chosen cuts: each stage runs v chunks of its
 * layers, which shrinks the bubble by v at the price of v times the sends
 * and more micro-batches in flight; the simulation prices both. Each v is
 * tried with its chunks even (or as even as a stage's layers allow) and
 * then with layers moved off the chunks that carry the embedding and the
 * head (ap_plan_balance_chunks). Kept only when it is faster and fits. */
static int try_interleaving(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                            double limit, char *err)
{
    if (p->nstages < 2)
        return AP_OK;
    double best = p->step_time;
    int best_v = 1, most = p->stages[0].nlayers, rc = AP_OK;
    int *span = ap_plan_spans(p), *best_chunks = NULL;
    if (!span) {
        snprintf(err, AP_ERR_LEN, "out of memory trying interleaving");
        return AP_EINTERNAL;
    }
    for (int i = 1; i < p->nstages; i++)
        if (p->stages[i].nlayers < most)
            most = p->stages[i].nlayers;
    for (int v = 2; v <= most && !rc; v++) {
        /* Stages whose layers do not divide into v get chunks of their
         * own sizes, which a layout states; only for one layer class,
         * whose block every stage has solved. */
        int even = chunks_divide(p, v);
        if (!even && (p->nclasses != 1 || p->nmicro % p->nstages))
            continue;
        p->schedule = AP_SCHED_INTERLEAVED;
        p->vchunks = v;
        if (!even && ap_plan_split_chunks(p)) {
            rc = AP_EINTERNAL;
            snprintf(err, AP_ERR_LEN, "out of memory trying interleaving");
            break;
        }
        rc = ap_plan_evaluate(g, c, p, err);
        if (!rc)
            rc = ap_plan_balance_chunks(g, c, p, limit, err);
        if (!rc && p->max_mem_bytes <= limit && p->step_time < best) {
            best = p->step_time;
            best_v = v;
            free(best_chunks);
            best_chunks = p->chunk_layers;
            p->chunk_layers = NULL;
        }
        ap_plan_restore_spans(p, span);
    }
    free(span);
    if (rc) {
        free(best_chunks);
        return rc;
    }
    p->schedule = best_v > 1 ? AP_SCHED_INTERLEAVED : AP_SCHED_1F1B;
    p->vchunks = best_v;
    if (best_chunks)
        ap_plan_set_chunks(p, best_chunks);
    return ap_plan_evaluate(g, c, p, err);
}

/* Whether the plan's layers split a label other than the batch and the
 * sequence on a mesh axis of more than one GPU: tensor parallelism. Only
 * there can --tp-comm-overlap change a price, so a plan without it drops
 * the setting, as its exports do at tp = 1. Every stage holds every layer
 * class's block; those a stage does not run are looked at too, which can
 * only keep a setting that changes nothing. */
static int tensor_parallel(const ap_graph *g, const ap_plan *p)
{
    char batch = ap_graph_label_of(g, AP_DIM_BATCH);
    char seq = ap_graph_label_of(g, AP_DIM_SEQ);
    for (int i = 0; i < p->nstages; i++) {
        const ap_stage *st = &p->stages[i];
        for (int b = 2; b < 2 + p->nclasses; b++) {
            const ap_block *blk = &st->blocks[b];
            const ap_strategy *s = blk->npoints ? blk->points[st->point[b]].strat : NULL;
            for (int k = 0; s && k < blk->nops; k++)
                for (int a = 0; a < 2; a++)
                    if (st->mesh.d[a] > 1 && s[k].axis[a] && s[k].axis[a] != batch &&
                        s[k].axis[a] != seq)
                        return 1;
        }
    }
    return 0;
}

/* More GPUs than one node's come in whole nodes (ap_cluster_set_size
 * refuses any other count), so a bound past a node is also given as the
 * whole nodes that hold it, the count --gpus takes. */
static void whole_nodes(double least, int per_node, char *buf, size_t len)
{
    double nodes = per_node > 0 ? ceil(least / per_node) : 0;
    if (per_node > 0 && least > per_node && nodes * per_node > least)
        snprintf(buf, len, ", %.0f in whole nodes of %d", nodes * per_node, per_node);
    else if (len)
        buf[0] = '\0';
}

/* The model states of every parameter, sharded over every GPU, are the
 * least any plan holds per GPU (each of weights, gradients and optimizer
 * states at its fewest bytes). Past the limit no candidate can fit, and
 * the search would price them all, minutes on a large model, to say so. */
static int check_model_states(const ap_search_ctx *ctx, char *err)
{
    const ap_plan_opts *o = ctx->o;
    double params = ctx->g->total_params;
    ap_model_states one = ap_mem_model_states_opt(params, 1, AP_ZERO_3,
                                                  ap_run_grad_bytes(&o->run), &o->run.opt);
    double each = one.total / o->gpus, gib = 1 << 30;
    if (each <= ctx->limit)
        return AP_OK;
    double least = ceil(one.total / ctx->limit);
    char where[96];
    if (o->gpus == 1)
        snprintf(where, sizeof where, "on one GPU");
    else
        snprintf(where, sizeof where, "sharded over all %d GPUs, %.1f GiB per GPU",
                 o->gpus, each / gib);
    snprintf(err, AP_ERR_LEN,
             "%s does not fit on %d GPU%s: its %.3g parameters hold %.1f GiB of "
             "weights, gradients and optimizer states (%.0f bytes each), %s, more "
             "than the %.1f GiB usable; it needs at least %.0f GPUs before "
             "activations are counted", ctx->g->name, o->gpus, o->gpus == 1 ? "" : "s",
             params, one.total / gib, one.total / params, where, ctx->limit / gib, least);
    size_t n = strlen(err);
    whole_nodes(least, ctx->c->gpus_per_node, err + n, AP_ERR_LEN - n);
    return AP_EINPUT;
}

/* Under --max-experts-per-gpu: the ILP splits the experts over one mesh
 * axis, whose size divides their number and is at most the GPUs, so the
 * fewest experts a GPU can keep is their number over the largest such
 * divisor. A limit below that admits no plan: say so before searching. */
static int check_expert_limit(const ap_search_ctx *ctx, char *err)
{
    int limit = ctx->o->max_local_experts;
    char e = ap_graph_label_of(ctx->g, AP_DIM_EXPERTS);
    if (limit <= 0 || !e)
        return AP_OK;
    long experts = (long)ap_graph_dim(ctx->g, e)->size, split = 1;
    for (long d = 1; d <= experts && d <= ctx->o->gpus; d++)
        if (experts % d == 0)
            split = d;
    if (experts / split <= limit)
        return AP_OK;
    long need = 1;
    while (experts % need || experts / need > limit)
        need++;
    snprintf(err, AP_ERR_LEN,
             "--max-experts-per-gpu %d: %s has %ld experts, which split at most %ld "
             "ways on %d GPUs, leaving %ld on each GPU; allow %ld or plan on at least "
             "%ld GPUs", limit, ctx->g->name, experts, split, ctx->o->gpus,
             experts / split, experts / split, need);
    return AP_EINPUT;
}

static int any_selective(const ap_plan *p)
{
    for (int i = 0; i < p->nstages; i++)
        if (p->stages[i].recompute == AP_RECOMPUTE_SELECTIVE)
            return 1;
    return 0;
}

static int search_run(const ap_search_ctx *ctx, ap_plan *out, char *err)
{
    int rc = check_model_states(ctx, err);
    if (!rc)
        rc = check_expert_limit(ctx, err);
    if (rc)
        return rc;
    search s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx;
    s.least.bytes = INFINITY;
    s.started = ap_progress_now();
    s.interval = ap_progress_log_interval();
    s.logged = -1;
    s.next_line = ctx->o->progress == AP_PROGRESS_LOG ? s.interval : 1;
    s.ncand = enumerate(ctx->o, ctx->g->nlayers, ctx->c->gpus_per_node, &s.cand);
    if (s.ncand < 0) {
        snprintf(err, AP_ERR_LEN, "out of memory");
        return AP_EINTERNAL;
    }
    for (int i = 0; i < s.ncand; i++)
        ap_candidate_bound(ctx, &s.cand[i]);
    qsort(s.cand, (size_t)s.ncand, sizeof *s.cand, by_bound);
    pthread_mutex_init(&s.lock, NULL);
    run_workers(&s, thread_count(ctx->o, s.ncand));
    pthread_mutex_destroy(&s.lock);
    if (s.shown)
        fprintf(stderr, "\n");
    /* A log that had progress lines gets one for the end too. */
    if (s.logged >= 0 && s.logged < s.solved + s.skipped)
        log_line(&s, ap_progress_now() - s.started);
    free(s.cand);
    if (s.rc) {
        if (s.have)
            ap_plan_free(&s.best);
        memcpy(err, s.err, AP_ERR_LEN);
        return s.rc;
    }
    if (!s.have && s.timeouts) {
        snprintf(err, AP_ERR_LEN,
                 "%s: no plan found: the sharding ILP found no solution within "
                 "--ilp-time-limit %g s for %d of the %d configurations tried%s; "
                 "raise --ilp-time-limit", ctx->g->name, ctx->o->ilp_time_limit,
                 s.timeouts, s.solved,
                 s.timeouts < s.solved ? ", and none of the others fits" : "");
        return AP_EINPUT;
    }
    if (!s.have) {
        explain_no_fit(ctx->g, &s, ctx->o, ctx->limit, err);
        return AP_EINPUT;
    }
    s.best.ilp_timeouts = s.timeouts;
    rc = try_interleaving(ctx->g, ctx->c, &s.best, ctx->limit, err);
    if (!rc && s.best.run.tp_overlap && !tensor_parallel(ctx->g, &s.best)) {
        s.best.run.tp_overlap = 0;
        rc = ap_plan_evaluate(ctx->g, ctx->c, &s.best, err);
    }
    /* Modules a plan does not recompute anywhere are not the plan's, nor
     * a dispatcher a model without experts has no use for. */
    if (!rc && !any_selective(&s.best))
        s.best.run.recompute_modules = 0;
    if (!rc && !ap_graph_label_of(ctx->g, AP_DIM_EXPERTS))
        s.best.run.dispatcher = AP_DISPATCH_ALLTOALL;
    if (rc) {
        ap_plan_free(&s.best);
        return rc;
    }
    *out = s.best;
    return AP_OK;
}

static int search_once(const ap_graph *g, const ap_cluster *c, const ap_plan_opts *o,
                       ap_plan *out, char *err)
{
    if ((o->run.fp8 && ap_fp8_check(c, o->run.fp8_recipe, err)) || ap_rc_modules_check(g, &o->run, err))
        return AP_EINPUT;
    ap_parts m;
    int rc = ap_parts_build(g, &m, err);
    if (rc)
        return rc;
    ap_search_ctx ctx;
    if (ap_search_ctx_init(&ctx, g, c, &m, o)) {
        ap_parts_free(&m);
        snprintf(err, AP_ERR_LEN, "out of memory");
        return AP_EINTERNAL;
    }
    rc = search_run(&ctx, out, err);
    ap_search_ctx_free(&ctx);
    ap_parts_free(&m);
    return rc;
}

/* --recompute-modules auto: the search without modules, then with each
 * set, the fastest kept. A set under which nothing fits leaves the others
 * standing; the error kept is the first search's. */
static int search_modules(const ap_graph *g, const ap_cluster *c, const ap_plan_opts *o,
                          ap_plan *out, char *err)
{
    unsigned sets[AP_AUTO_MODULE_SETS];
    int n = ap_auto_module_sets(g, &o->run, sets);
    ap_plan_opts each = *o;
    each.auto_modules = 0;
    each.run.recompute_modules = 0;
    int rc = search_once(g, c, &each, out, err), have = rc == AP_OK;
    if (rc && rc != AP_EINPUT)
        return rc;
    for (int i = 0; i < n; i++) {
        ap_plan p;
        char e[AP_ERR_LEN];
        each.run.recompute_modules = ap_rc_modules_setting(sets[i]);
        int r = search_once(g, c, &each, &p, e);
        if (r && r != AP_EINPUT) {
            if (have)
                ap_plan_free(out);
            memcpy(err, e, AP_ERR_LEN);
            return r;
        }
        if (r)
            continue;
        if (!have || p.step_time < out->step_time) {
            if (have)
                ap_plan_free(out);
            *out = p;
            have = 1;
        } else {
            ap_plan_free(&p);
        }
    }
    return have ? AP_OK : rc;
}

int ap_plan_search(const ap_graph *g, const ap_cluster *c,
                   const ap_plan_opts *o, ap_plan *out, char *err)
{
    return o->auto_modules ? search_modules(g, c, o, out, err)
                           : search_once(g, c, o, out, err);
}
