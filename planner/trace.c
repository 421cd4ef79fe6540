/* trace.c -- a plan's simulated step as Chrome Trace Event JSON.
 *
 * One process per pipeline stage, with tracks (threads) for its passes,
 * its gradient synchronisation and its sends. The passes are the pipeline
 * simulation's own events, run again (evaluation keeps only the summary);
 * gradient sync and the optimizer step are placed the way the prediction
 * counts them, so that the trace ends exactly at the predicted step time:
 * a stage's gradient reduction overlaps the end of its backward and runs
 * past it by its exposed part (all of it, starting when the backward ends,
 * when the plan does not overlap it), and every stage's optimizer step starts once
 * the slowest reduction is done. Times are microseconds, as the format
 * wants. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

#define TID_COMPUTE 0
#define TID_GRAD 1
#define TID_SEND 2 /* and up: one more per send that would overlap */
#define MAX_LANES 64

typedef struct {
    cJSON *events;
    double lane_end[MAX_LANES];
    int nlanes;
} track_set;

static void add_event(cJSON *events, const char *name, const char *cat, int pid,
                      int tid, double start, double end, cJSON *args)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "cat", cat);
    cJSON_AddStringToObject(e, "ph", "X");
    cJSON_AddNumberToObject(e, "ts", start * 1e6);
    cJSON_AddNumberToObject(e, "dur", (end - start) * 1e6);
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    if (args)
        cJSON_AddItemToObject(e, "args", args);
    cJSON_AddItemToArray(events, e);
}

static void add_name(cJSON *events, const char *what, int pid, int tid,
                     const char *name)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", what);
    cJSON_AddStringToObject(e, "ph", "M");
    cJSON_AddNumberToObject(e, "pid", pid);
    if (tid >= 0)
        cJSON_AddNumberToObject(e, "tid", tid);
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    cJSON_AddStringToObject(a, "name", name);
    cJSON_AddItemToArray(events, e);
}

static cJSON *pass_args(const ap_pipe_event *ev)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "micro_batch", ev->micro);
    cJSON_AddNumberToObject(a, "chunk", ev->chunk);
    return a;
}

/* Sends run beside the passes; two that overlap (a send slower than the
 * pass after it) take separate lanes so that no track overlaps itself. */
static void add_send(track_set *ts, int pid, const char *name, double start,
                     double dur)
{
    int lane = 0;
    while (lane < ts->nlanes && ts->lane_end[lane] > start)
        lane++;
    if (lane == MAX_LANES)
        return; /* a send longer than 64 passes is left out of the picture */
    if (lane == ts->nlanes) {
        char buf[32];
        snprintf(buf, sizeof buf, lane ? "send/recv %d" : "send/recv", lane + 1);
        add_name(ts->events, "thread_name", pid, TID_SEND + lane, buf);
        ts->nlanes++;
    }
    ts->lane_end[lane] = start + dur;
    add_event(ts->events, name, "p2p", pid, TID_SEND + lane, start, start + dur, NULL);
}

/* The send that follows a pass, if any: activations to the next virtual
 * stage after a forward, gradients to the previous after a backward. */
static void pass_send(const ap_plan *p, track_set *ts, const ap_pipe_event *ev,
                      int v)
{
    int i = ev->stage, last = p->nstages - 1;
    double t = 0;
    const char *to = NULL;
    char dest[16];
    if (!ev->backward && (i < last || ev->chunk < v - 1)) {
        t = p->stages[i < last ? i : last].p2p;
        snprintf(dest, sizeof dest, "%d", i < last ? i + 1 : 0);
        to = dest;
    } else if (ev->backward && (i > 0 || ev->chunk > 0)) {
        t = p->stages[i > 0 ? i - 1 : last].p2p;
        snprintf(dest, sizeof dest, "%d", i > 0 ? i - 1 : last);
        to = dest;
    }
    if (!to || t <= 0)
        return;
    char name[64];
    snprintf(name, sizeof name, "send %c mb%d to stage %s", ev->backward ? 'B' : 'F',
             ev->micro, to);
    add_send(ts, i, name, ev->end, t);
}

/* Under chunk_layers, " of 5+7": each model chunk's layers, when they
 * fit in len; else nothing. */
static void chunk_counts(const ap_plan *p, int i, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int c = 0; p->chunk_layers && c < p->vchunks; c++) {
        int w = snprintf(buf + n, len - n, "%s%d", c ? "+" : " of ",
                         p->chunk_layers[c * p->nstages + i]);
        if (w < 0 || (size_t)w >= len - n) {
            buf[0] = 0;
            return;
        }
        n += (size_t)w;
    }
}

static void stage_names(const ap_plan *p, cJSON *events, int i)
{
    const ap_stage *st = &p->stages[i];
    char buf[192], counts[64];
    chunk_counts(p, i, counts, sizeof counts);
    if (p->vchunks > 1) /* a stage's chunks are not contiguous layers */
        snprintf(buf, sizeof buf, "stage %d: GPUs %d-%d, %d layers in %d chunks%s", i,
                 st->first_rank, st->first_rank + st->ngpus - 1, st->nlayers,
                 p->vchunks, counts);
    else
        snprintf(buf, sizeof buf, "stage %d: GPUs %d-%d, layers %d-%d", i,
                 st->first_rank, st->first_rank + st->ngpus - 1, st->first_layer,
                 st->first_layer + st->nlayers - 1);
    add_name(events, "process_name", i, -1, buf);
    add_name(events, "thread_name", i, TID_COMPUTE, "forward / backward / optimizer");
    add_name(events, "thread_name", i, TID_GRAD, "gradient sync");
}

/* Gradient sync and the optimizer step of stage i, whose last pass ended at
 * `last`; the optimizer steps start together at `opt_start`. */
static void step_end(const ap_plan *p, cJSON *events, int i, double last,
                     double opt_start)
{
    const ap_stage *st = &p->stages[i];
    /* The data-parallel reduction, then the embedding group's all-reduce
     * of tied weights, which waits for it. */
    double reduce = st->grad_sync - st->tied_sync - st->param_sync;
    double hidden = reduce + st->tied_sync + st->param_sync_exposed -
                    st->grad_sync_exposed;
    double dp_end = last - hidden + reduce, tied_end = dp_end + st->tied_sync;
    if (reduce > 0)
        add_event(events, "gradient sync", "grad_sync", i, TID_GRAD, last - hidden,
                  dp_end, NULL);
    if (st->tied_sync > 0)
        add_event(events, "embedding gradient all-reduce", "grad_sync", i, TID_GRAD,
                  dp_end, tied_end, NULL);
    /* The parameter all-gather's exposed part, drawn before the step that
     * the prediction adds it to (it runs after the step, or in the next
     * forward). */
    if (st->param_sync_exposed > 0)
        add_event(events, "parameter all-gather (exposed)", "grad_sync", i, TID_GRAD,
                  tied_end, tied_end + st->param_sync_exposed, NULL);
    add_event(events, "optimizer step", "optimizer", i, TID_COMPUTE, opt_start,
              opt_start + st->optimizer, NULL);
}

static cJSON *trace_object(const ap_plan *p, const ap_pipe_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *events = cJSON_AddArrayToObject(o, "traceEvents");
    int v = p->vchunks > 1 ? p->vchunks : 1;
    double opt_start = r->step + p->t_grad_sync;
    int k = 0;
    for (int i = 0; i < p->nstages; i++) {
        track_set ts = {events, {0}, 0};
        stage_names(p, events, i);
        double last = 0;
        for (; k < r->nevents && r->events[k].stage == i; k++) {
            const ap_pipe_event *ev = &r->events[k];
            char name[64];
            if (v > 1)
                snprintf(name, sizeof name, "%c mb%d chunk%d", ev->backward ? 'B' : 'F',
                         ev->micro, ev->chunk);
            else
                snprintf(name, sizeof name, "%c mb%d", ev->backward ? 'B' : 'F', ev->micro);
            add_event(events, name, ev->backward ? "backward" : "forward", i,
                      TID_COMPUTE, ev->start, ev->end, pass_args(ev));
            pass_send(p, &ts, ev, v);
            last = ev->end > last ? ev->end : last;
        }
        step_end(p, events, i, last, opt_start);
    }
    cJSON_AddStringToObject(o, "displayTimeUnit", "ms");
    cJSON *meta = cJSON_AddObjectToObject(o, "otherData");
    cJSON_AddStringToObject(meta, "model", p->model);
    cJSON_AddStringToObject(meta, "cluster", p->cluster);
    cJSON_AddNumberToObject(meta, "gpus", p->gpus);
    cJSON_AddNumberToObject(meta, "step_time_s", p->step_time);
    return o;
}

char *ap_plan_trace_json(const ap_plan *p, char *err)
{
    ap_pipe_result r;
    int rc = ap_plan_simulate(p, &r, err);
    if (rc)
        return NULL;
    cJSON *o = trace_object(p, &r);
    ap_pipe_result_free(&r);
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s)
        snprintf(err, AP_ERR_LEN, "out of memory writing the trace");
    return s;
}
