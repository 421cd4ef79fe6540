/* test_trace.c -- the timeline trace: Chrome Trace Event JSON whose events
 * are ordered and never overlap on a track, whose span is the predicted step
 * time, and whose passes are the schedule's: every micro-batch forward and
 * backward once per stage and chunk. */
#include <cjson/cJSON.h>

#include "planner/planner.h"
#include "model.h"

static ap_graph *load(const char *rel)
{
    ap_graph *g = ap_test_model(rel, 0);
    CHECK(g != NULL);
    return g;
}

static cJSON *trace_of(const ap_graph *g, int gpus, const char *spec, ap_plan *p)
{
    char err[AP_ERR_LEN];
    int rc = ap_test_megatron_plan(g, gpus, spec, NULL, p, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", spec, err);
    CHECK(rc == AP_OK);
    if (rc)
        return NULL;
    char *s = ap_plan_trace_json(p, err);
    CHECK(s != NULL);
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    free(s);
    CHECK(o != NULL);
    return o;
}

static double num(const cJSON *e, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *e, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Per (pid, tid) track: events in start order, each starting no earlier
 * than the previous one ends. Returns the span of all "X" events. */
static double check_tracks(const cJSON *trace, int *nx)
{
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(trace, "traceEvents");
    CHECK(cJSON_IsArray(events));
    *nx = 0;
    if (!events)
        return NAN;
    double lo = INFINITY, hi = -INFINITY;
    double last_end[64][16];
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 16; j++)
            last_end[i][j] = -INFINITY;
    int bad_order = 0, n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) {
        if (strcmp(str(e, "ph"), "X"))
            continue;
        int pid = (int)num(e, "pid"), tid = (int)num(e, "tid");
        double ts = num(e, "ts"), dur = num(e, "dur");
        CHECK(pid >= 0 && pid < 64 && tid >= 0 && tid < 16 && dur >= 0);
        if (pid < 0 || pid >= 64 || tid < 0 || tid >= 16)
            continue;
        /* 1e-9 s in microseconds: rounding, not overlap. */
        if (ts < last_end[pid][tid] - 1e-3)
            bad_order++;
        last_end[pid][tid] = ts + dur;
        lo = fmin(lo, ts);
        hi = fmax(hi, ts + dur);
        n++;
    }
    CHECK(bad_order == 0);
    *nx = n;
    return (hi - lo) / 1e6;
}

static int count_named(const cJSON *trace, const char *prefix, int pid)
{
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(trace, "traceEvents"))
        n += !strcmp(str(e, "ph"), "X") && (int)num(e, "pid") == pid &&
             !strncmp(str(e, "name"), prefix, strlen(prefix));
    return n;
}

static void one_f_one_b_trace_spans_the_predicted_step(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan p;
    cJSON *t = trace_of(g, 16, "tp=2,pp=4,mbs=1,gbs=64,sp=1", &p);
    int n = 0;
    CHECK_NEAR(check_tracks(t, &n), p.step_time, 1e-9);
    /* 4 stages x 32 micro-batches x (F + B), one optimizer step each,
     * sends between the stages and gradient sync on each. */
    CHECK(count_named(t, "F mb", 0) == 32 && count_named(t, "B mb", 3) == 32);
    CHECK(count_named(t, "F mb31", 2) == 1 && count_named(t, "B mb0", 1) == 1);
    CHECK(count_named(t, "optimizer step", 3) == 1);
    CHECK(count_named(t, "gradient sync", 0) == 1);
    /* The model ties its embeddings (the head reads wte): the first and
     * last stage then all-reduce the copies' gradients, the middle ones
     * have nothing to do with it. */
    CHECK(count_named(t, "embedding gradient all-reduce", 0) == 1 &&
          count_named(t, "embedding gradient all-reduce", 3) == 1);
    CHECK(count_named(t, "embedding gradient all-reduce", 1) == 0 &&
          count_named(t, "embedding gradient all-reduce", 2) == 0);
    /* Stage 0 sends activations forward 32 times; the last stage sends
     * gradients back 32 times and nothing forward. */
    CHECK(count_named(t, "send F", 0) == 32 && count_named(t, "send B", 0) == 0);
    CHECK(count_named(t, "send B", 3) == 32 && count_named(t, "send F", 3) == 0);
    /* ZeRO-1's parameter all-gather: its exposed first bucket on each. */
    CHECK(count_named(t, "parameter all-gather", 2) == 1);
    CHECK(n == 4 * 64 + 4 + 4 + 2 + 4 + 3 * 64);
    cJSON_Delete(t);
    ap_plan_free(&p);
    ap_graph_free(g);
}

static void interleaved_trace_names_chunks_and_spans_the_step(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan p;
    cJSON *t = trace_of(g, 16, "tp=4,pp=2,vpp=3,mbs=2,gbs=32,sp=1,recompute=full", &p);
    int n = 0;
    CHECK_NEAR(check_tracks(t, &n), p.step_time, 1e-9);
    CHECK(p.vchunks == 3);
    /* Each stage runs 8 micro-batches through each of its 3 chunks. */
    CHECK(count_named(t, "F mb7 chunk2", 1) == 1 && count_named(t, "B mb0 chunk0", 0) == 1);
    CHECK(count_named(t, "F mb", 0) == 24 && count_named(t, "B mb", 1) == 24);
    cJSON_Delete(t);
    ap_plan_free(&p);
    ap_graph_free(g);
}

static void single_stage_trace_ends_with_sync_then_optimizer(void)
{
    ap_graph *g = load("examples/gpt-tiny.json");
    ap_plan p;
    cJSON *t = trace_of(g, 4, "tp=1,pp=1,mbs=2,gbs=16,zero=0", &p);
    int n = 0;
    CHECK_NEAR(check_tracks(t, &n), p.step_time, 1e-9);
    /* 2 micro-batches per replica: F, B, F, B, then the optimizer. */
    CHECK(n == 4 + 1 + 1);
    const cJSON *e, *opt = NULL, *sync = NULL;
    double last_pass_end = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(t, "traceEvents")) {
        if (!strcmp(str(e, "name"), "optimizer step"))
            opt = e;
        else if (!strcmp(str(e, "name"), "gradient sync"))
            sync = e;
        else if (!strcmp(str(e, "ph"), "X"))
            last_pass_end = fmax(last_pass_end, num(e, "ts") + num(e, "dur"));
    }
    CHECK(opt && sync);
    if (opt && sync) {
        /* The optimizer starts when the exposed part of the sync is over. */
        CHECK_NEAR(num(opt, "ts"), num(sync, "ts") + num(sync, "dur"), 1e-9);
        CHECK_NEAR(num(opt, "dur"), p.t_optimizer * 1e6, 1e-9);
        CHECK_NEAR(num(sync, "dur"), p.t_grad_sync_total * 1e6, 1e-9);
        CHECK(num(sync, "ts") < last_pass_end); /* overlaps the last backward */
    }
    cJSON_Delete(t);
    ap_plan_free(&p);
    ap_graph_free(g);
}

int main(void)
{
    RUN(one_f_one_b_trace_spans_the_predicted_step);
    RUN(interleaved_trace_names_chunks_and_spans_the_step);
    RUN(single_stage_trace_ends_with_sync_then_optimizer);
    return DONE();
}
