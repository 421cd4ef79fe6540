/* pipeline.c -- pipeline schedules simulated event by event.
 *
 * Each stage runs a fixed sequence of forward and backward passes (the
 * schedule); a pass starts when its stage is free and its input has
 * arrived: the forward of the previous virtual stage, or the backward of
 * the next, plus the point-to-point transfer between them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel/costmodel.h"

#define MAX_STAGES 1000000
#define MAX_MICRO 1000000
#define MAX_CHUNKS 1024
#define MAX_EVENTS (1L << 22)

/* merged: a forward that runs as one pass with the backward after it in
 * the order (ap_pipe_spec.pair_save). */
typedef struct {
    int chunk, micro, backward, merged;
} pass;

typedef struct {
    const ap_pipe_spec *spec;
    int p, m, v;
    double *fwd_end, *bwd_end; /* [v][p][m], -1 until done */
    double *saved;             /* [p]: ap_pipe_result.saved */
    double *tail;              /* [p]: ap_pipe_result.tail */
    double *free_at;           /* [p]: when the stage's last pass ends */
    double *busy;              /* [p]: its passes' seconds */
} sim;

static int bad(char *err, const char *fmt, long v)
{
    snprintf(err, AP_ERR_LEN, fmt, v);
    return AP_EINPUT;
}

static int check_times(const double *x, long n, const char *what, char *err)
{
    for (long i = 0; i < n; i++)
        if (!(x[i] >= 0) || !isfinite(x[i])) {
            snprintf(err, AP_ERR_LEN,
                     "pipeline: %s[%ld] must be a finite non-negative time", what, i);
            return AP_EINPUT;
        }
    return AP_OK;
}

static int check_spec(const ap_pipe_spec *s, int v, char *err)
{
    if (s->nstages < 1 || s->nstages > MAX_STAGES)
        return bad(err, "pipeline: stages must be between 1 and 1000000, not %ld",
                   s->nstages);
    if (s->nmicro < 1 || s->nmicro > MAX_MICRO)
        return bad(err, "pipeline: micro-batches must be between 1 and 1000000, not %ld",
                   s->nmicro);
    if (v < 1 || v > MAX_CHUNKS)
        return bad(err, "pipeline: chunks per stage must be between 1 and 1024, not %ld",
                   v);
    if (2.0 * s->nmicro * s->nstages * v > MAX_EVENTS)
        return bad(err, "pipeline: more than %ld passes to simulate", MAX_EVENTS);
    if (s->schedule == AP_SCHED_INTERLEAVED && s->nmicro % s->nstages)
        return bad(err, "pipeline: interleaved 1F1B needs micro-batches divisible "
                        "by the %ld stages", s->nstages);
    if (!s->fwd || !s->bwd) {
        snprintf(err, AP_ERR_LEN, "pipeline: forward and backward times are required");
        return AP_EINPUT;
    }
    long n = (long)s->nstages * v;
    int rc;
    if ((rc = check_times(s->fwd, n, "fwd", err)) ||
        (rc = check_times(s->bwd, n, "bwd", err)))
        return rc;
    if (s->p2p && (rc = check_times(s->p2p, s->nstages, "p2p", err)))
        return rc;
    if (s->pair_save && (rc = check_times(s->pair_save, n, "pair_save", err)))
        return rc;
    if (s->defer && (rc = check_times(s->defer, n, "defer", err)))
        return rc;
    if (s->defer && s->defer_limit < 0)
        return bad(err, "pipeline: the deferral limit must be 0 (all) or more, not %ld",
                   s->defer_limit);
    if (s->pair_save && s->schedule == AP_SCHED_GPIPE) {
        snprintf(err, AP_ERR_LEN, "pipeline: GPipe has no steady state whose "
                                  "forward and backward could merge");
        return AP_EINPUT;
    }
    return AP_OK;
}

static int gpipe_order(int m, pass *out)
{
    int n = 0;
    for (int j = 0; j < m; j++)
        out[n++] = (pass){0, j, 0, 0};
    for (int j = 0; j < m; j++)
        out[n++] = (pass){0, j, 1, 0};
    return n;
}

/* Stage i of p runs p-i-1 warm-up forwards (one more when the steady
 * state merges its pairs: merge = 1), then alternates one forward and one
 * backward, then drains the remaining backwards. At p = 1 with merging
 * this is Megatron-Core's combined_1f1b_schedule_for_no_pipelining: the
 * first forward alone, then micro-batch k's backward with k+1's forward. */
static int one_f_one_b_order(int p, int m, int i, int merge, pass *out)
{
    int warm = p - i - 1 + merge < m ? p - i - 1 + merge : m, n = 0;
    for (int j = 0; j < warm; j++)
        out[n++] = (pass){0, j, 0, 0};
    for (int k = 0; k < m - warm; k++) {
        out[n++] = (pass){0, warm + k, 0, merge};
        out[n++] = (pass){0, k, 1, 0};
    }
    for (int k = m - warm; k < m; k++)
        out[n++] = (pass){0, k, 1, 0};
    return n;
}

/* Megatron-LM's interleaved order: virtual step k works on chunk
 * (k mod pv) / p (reversed for backward) of micro-batch
 * (k / pv) * p + k mod p; stage i warms up with 2(p-i-1) + (v-1)p
 * forwards, one more when the steady state merges its pairs
 * (get_pp_rank_microbatches under overlap_moe_expert_parallel_comm), or
 * runs every forward first when m == p. Every stage walks the same
 * virtual steps (steps: the forward of each, m*v of them), so they are
 * counted out once, without a division per pass. */
static void virtual_steps(int p, int v, long total, pass *steps)
{
    int chunk = 0, lane = 0, group = 0;
    for (long k = 0; k < total; k++) {
        steps[k] = (pass){chunk, group + lane, 0, 0};
        if (++lane < p)
            continue;
        lane = 0;
        if (++chunk < v)
            continue;
        chunk = 0;
        group += p;
    }
}

static pass virtual_pass(const pass *steps, int v, long k, int backward)
{
    pass x = steps[k];
    if (backward) {
        x.chunk = v - 1 - x.chunk;
        x.backward = 1;
    }
    return x;
}

static int interleaved_order(const pass *steps, int p, int m, int v, int i, int merge,
                             pass *out)
{
    long total = (long)m * v;
    long warm = m == p ? total : 2L * (p - i - 1) + (long)(v - 1) * p + merge;
    if (warm > total)
        warm = total;
    int n = 0;
    for (long k = 0; k < warm; k++)
        out[n++] = virtual_pass(steps, v, k, 0);
    for (long k = 0; k < total - warm; k++) {
        out[n] = virtual_pass(steps, v, warm + k, 0);
        out[n++].merged = merge;
        out[n++] = virtual_pass(steps, v, k, 1);
    }
    for (long k = total - warm; k < total; k++)
        out[n++] = virtual_pass(steps, v, k, 1);
    return n;
}

/* steps: virtual_steps' list when the schedule interleaves chunks. */
static int stage_order(const sim *s, const pass *steps, int i, pass *out)
{
    int merge = s->spec->pair_save != NULL;
    switch (s->spec->schedule) {
    case AP_SCHED_GPIPE:
        return gpipe_order(s->m, out);
    case AP_SCHED_INTERLEAVED:
        if (s->v > 1)
            return interleaved_order(steps, s->p, s->m, s->v, i, merge, out);
        return one_f_one_b_order(s->p, s->m, i, merge, out);
    default:
        return one_f_one_b_order(s->p, s->m, i, merge, out);
    }
}

static size_t slot(const sim *s, int chunk, int stage, int micro)
{
    return ((size_t)chunk * s->p + stage) * s->m + micro;
}

/* Every time here is checked finite, so the larger of two needs none of
 * fmax's NaN rules, nor its call: this runs once or more per pass. */
static double later(double a, double b)
{
    return a > b ? a : b;
}

static double p2p(const sim *s, int i)
{
    return s->spec->p2p ? s->spec->p2p[i] : 0;
}

/* When the input of pass x on stage i is ready, or -1 if not yet known. */
static double ready_at(const sim *s, int i, pass x)
{
    int p = s->p, c = x.chunk, j = x.micro;
    double t;
    if (!x.backward) {
        if (i > 0)
            return (t = s->fwd_end[slot(s, c, i - 1, j)]) < 0 ? -1 : t + p2p(s, i - 1);
        if (c > 0)
            return (t = s->fwd_end[slot(s, c - 1, p - 1, j)]) < 0 ? -1 : t + p2p(s, p - 1);
        return 0;
    }
    if (i < p - 1)
        return (t = s->bwd_end[slot(s, c, i + 1, j)]) < 0 ? -1 : t + p2p(s, i);
    if (c < s->v - 1)
        return (t = s->bwd_end[slot(s, c + 1, 0, j)]) < 0 ? -1 : t + p2p(s, p - 1);
    return s->fwd_end[slot(s, c, i, j)];
}

int ap_pipe_deferred_micro(int limit, int nmicro)
{
    return limit == 0 || limit > nmicro ? nmicro : limit;
}

/* Whether micro-batch j's deferrable backward work waits for the end:
 * the output layer buffers its first gradients, and its micro-batches'
 * backwards run in order. */
static int deferred(const sim *s, int j)
{
    return s->spec->defer && j < ap_pipe_deferred_micro(s->spec->defer_limit, s->m);
}

static double duration(const sim *s, int i, pass x)
{
    size_t k = (size_t)x.chunk * s->p + i;
    if (!x.backward)
        return s->spec->fwd[k];
    if (deferred(s, x.micro))
        return later(0, s->spec->bwd[k] - s->spec->defer[k]);
    return s->spec->bwd[k];
}

/* The deferred work of stage i, run after its last pass. */
static double deferred_tail(const sim *s, int i)
{
    int n = ap_pipe_deferred_micro(s->spec->defer_limit, s->m);
    double t = 0;
    for (int c = 0; c < s->v; c++) {
        size_t k = (size_t)c * s->p + i;
        t += n * fmin(s->spec->defer[k], s->spec->bwd[k]);
    }
    return t;
}

/* e: where the event goes, or NULL under summary_only. */
static void place(sim *s, int i, pass x, double start, double end, ap_pipe_event *e)
{
    if (e)
        *e = (ap_pipe_event){i, x.chunk, x.micro, x.backward, start, end};
    double *done = x.backward ? s->bwd_end : s->fwd_end;
    done[slot(s, x.chunk, i, x.micro)] = end;
    s->busy[i] += end - start;
}

/* Places forward f merged with backward b on stage i, from `start` when
 * both inputs are in: one pass of both durations less the forward
 * chunk's pair_save (never below the longer half). The trace shows the
 * forward's share first; both outputs leave at the end, as the merged
 * node finishes its last layer of each then. Returns the end. */
static double place_pair(sim *s, int i, pass f, pass b, double start,
                         ap_pipe_event *ev)
{
    double df = duration(s, i, f), db = duration(s, i, b);
    double save = s->spec->pair_save[(size_t)f.chunk * s->p + i];
    double d = later(later(df, db), df + db - save);
    double mid = df + db > 0 ? start + d * df / (df + db) : start;
    place(s, i, f, start, mid, ev);
    place(s, i, b, mid, start + d, ev ? ev + 1 : NULL);
    s->fwd_end[slot(s, f.chunk, i, f.micro)] = start + d;
    s->saved[i] += df + db - d;
    return start + d;
}

/* Runs every stage as far as its inputs allow, round after round, until
 * all passes are placed; ev is NULL under summary_only. */
static int run(sim *s, const pass *order, int per_stage, ap_pipe_event *ev,
               char *err)
{
    int p = s->p;
    int *next = calloc((size_t)p, sizeof *next);
    if (!next) {
        snprintf(err, AP_ERR_LEN, "pipeline: out of memory");
        return AP_EINTERNAL;
    }
    double *free_at = s->free_at;
    long left = (long)per_stage * p;
    int rc = AP_OK;
    while (left > 0) {
        long placed = 0;
        for (int i = 0; i < p; i++) {
            while (next[i] < per_stage) {
                size_t k = (size_t)i * per_stage + next[i];
                pass x = order[k];
                double r = ready_at(s, i, x);
                if (r < 0)
                    break;
                if (x.merged) {
                    double rb = ready_at(s, i, order[k + 1]);
                    if (rb < 0)
                        break;
                    free_at[i] = place_pair(s, i, x, order[k + 1],
                                            later(free_at[i], later(r, rb)),
                                            ev ? &ev[k] : NULL);
                    next[i] += 2;
                    placed += 2;
                    continue;
                }
                double start = later(free_at[i], r);
                free_at[i] = start + duration(s, i, x);
                place(s, i, x, start, free_at[i], ev ? &ev[k] : NULL);
                next[i]++;
                placed++;
            }
        }
        if (!placed) {
            snprintf(err, AP_ERR_LEN, "pipeline: schedule deadlocked (a bug)");
            rc = AP_EINTERNAL;
            break;
        }
        left -= placed;
    }
    free(next);
    return rc;
}

/* The most micro-batches whose activations stage i holds: forwards done
 * minus backwards done, a chunk's micro-batch counting its share of the
 * stage's activations (1/v unless the spec says). */
static double max_inflight(const sim *s, const pass *order, int n, int i)
{
    double cur = 0, best = 0;
    const double *share = s->spec->act_share;
    for (int k = 0; k < n; k++) {
        double w = share ? share[order[k].chunk * s->p + i] : 1.0 / s->v;
        cur += order[k].backward ? -w : w;
        best = later(best, cur);
    }
    return best;
}

/* A stage's passes run one after another, so its last ends last; the
 * stage ends after its deferred work. */
static void summarise(const sim *s, const pass *order, int per_stage,
                      ap_pipe_result *out)
{
    double busy = 0, step = 0;
    for (int i = 0; i < s->p; i++) {
        double tail = s->tail ? (s->tail[i] = deferred_tail(s, i)) : 0;
        busy += s->busy[i] + tail;
        step = fmax(step, s->free_at[i] + tail);
    }
    out->step = step;
    out->bubble = step > 0 ? 1 - busy / (s->p * step) : 0;
    for (int i = 0; i < s->p; i++)
        out->inflight[i] = max_inflight(s, order + (size_t)i * per_stage, per_stage, i);
}

/* A stage's passes back to back, merged pairs as place_pair runs them,
 * into s->busy (and s->saved): what run() gives them, without the waits. */
static void busy_only(sim *s, const pass *order, int per_stage)
{
    for (int i = 0; i < s->p; i++) {
        const pass *o = order + (size_t)i * per_stage;
        for (int k = 0; k < per_stage; k++) {
            double d = duration(s, i, o[k]);
            if (o[k].merged) {
                double db = duration(s, i, o[k + 1]);
                double save = s->spec->pair_save[(size_t)o[k].chunk * s->p + i];
                double both = later(later(d, db), d + db - save);
                s->saved[i] += d + db - both;
                d = both;
                k++;
            }
            s->busy[i] += d;
        }
    }
}

/* Stage i's first pass, the first micro-batch's forward of chunk 0, waits
 * for that forward on every stage before it and each send between; then
 * its passes and its deferred work take their time at least. */
static void bound(sim *s, const pass *order, int per_stage, ap_pipe_result *out)
{
    busy_only(s, order, per_stage);
    double head = 0, step = 0;
    for (int i = 0; i < s->p; i++) {
        double tail = s->tail ? (s->tail[i] = deferred_tail(s, i)) : 0;
        step = later(step, head + s->busy[i] + tail);
        head += s->spec->fwd[i] + p2p(s, i);
    }
    out->step = step;
    out->bubble = 0;
    out->bounded = 1;
    for (int i = 0; i < s->p; i++)
        out->inflight[i] = max_inflight(s, order + (size_t)i * per_stage, per_stage, i);
}

int ap_pipe_simulate(const ap_pipe_spec *spec, ap_pipe_result *out, char *err)
{
    memset(out, 0, sizeof *out);
    int v = spec->schedule == AP_SCHED_INTERLEAVED ? spec->vchunks : 1;
    int rc = check_spec(spec, v, err);
    if (rc != AP_OK)
        return rc;
    sim s = {.spec = spec, .p = spec->nstages, .m = spec->nmicro, .v = v};
    int per_stage = 2 * s.m * v;
    size_t cells = (size_t)v * s.p * s.m, total = (size_t)per_stage * s.p;
    pass *order = malloc(total * sizeof *order), *steps = NULL;
    s.fwd_end = malloc(cells * sizeof *s.fwd_end);
    s.bwd_end = malloc(cells * sizeof *s.bwd_end);
    s.free_at = calloc((size_t)s.p, sizeof *s.free_at);
    s.busy = calloc((size_t)s.p, sizeof *s.busy);
    int events = !spec->summary_only && !spec->bound_only;
    if (events)
        out->events = calloc(total, sizeof *out->events);
    out->inflight = calloc((size_t)s.p, sizeof *out->inflight);
    if (spec->pair_save)
        s.saved = out->saved = calloc((size_t)s.p, sizeof *out->saved);
    if (spec->defer)
        s.tail = out->tail = calloc((size_t)s.p, sizeof *out->tail);
    if (!order || !s.fwd_end || !s.bwd_end || !s.free_at || !s.busy ||
        (events && !out->events) || !out->inflight ||
        (spec->pair_save && !out->saved) || (spec->defer && !out->tail)) {
        snprintf(err, AP_ERR_LEN, "pipeline: out of memory");
        rc = AP_EINTERNAL;
        goto done;
    }
    for (size_t k = 0; k < cells; k++)
        s.fwd_end[k] = s.bwd_end[k] = -1;
    if (v > 1 && !(steps = malloc(cells / s.p * sizeof *steps))) {
        snprintf(err, AP_ERR_LEN, "pipeline: out of memory");
        rc = AP_EINTERNAL;
        goto done;
    }
    if (steps)
        virtual_steps(s.p, v, (long)s.m * v, steps);
    for (int i = 0; i < s.p; i++)
        stage_order(&s, steps, i, order + (size_t)i * per_stage);
    out->nevents = spec->summary_only || spec->bound_only ? 0 : (int)total;
    if (spec->bound_only)
        bound(&s, order, per_stage, out);
    else if ((rc = run(&s, order, per_stage, out->events, err)) == AP_OK)
        summarise(&s, order, per_stage, out);
done:
    free(order);
    free(steps);
    free(s.fwd_end);
    free(s.bwd_end);
    free(s.free_at);
    free(s.busy);
    if (rc != AP_OK)
        ap_pipe_result_free(out);
    return rc;
}

void ap_pipe_result_free(ap_pipe_result *r)
{
    if (!r)
        return;
    free(r->inflight);
    free(r->events);
    free(r->saved);
    free(r->tail);
    r->inflight = NULL;
    r->events = NULL;
    r->saved = NULL;
    r->tail = NULL;
    r->nevents = 0;
}
