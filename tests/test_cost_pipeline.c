/* test_cost_pipeline.c -- pipeline schedules against their closed forms. */
#include "costmodel/costmodel.h"
#include "test.h"

#define MAXPV 64

typedef struct {
    double fwd[MAXPV], bwd[MAXPV], p2p[MAXPV];
    ap_pipe_spec spec;
} setup;

static void uniform(setup *s, ap_schedule sched, int p, int m, int v, double f,
                    double b)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < p * v; i++) {
        s->fwd[i] = f / v;
        s->bwd[i] = b / v;
    }
    s->spec = (ap_pipe_spec){.schedule = sched, .nstages = p, .nmicro = m, .vchunks = v,
                             .fwd = s->fwd, .bwd = s->bwd};
}

static ap_pipe_result simulate(const setup *s)
{
    ap_pipe_result r;
    char err[AP_ERR_LEN];
    int rc = ap_pipe_simulate(&s->spec, &r, err);
    CHECK(rc == AP_OK);
    if (rc != AP_OK)
        fprintf(stderr, "%s\n", err);
    return r;
}

/* Uniform stages without p2p: (m + p - 1)(f + b), idle (p-1)/(m+p-1). */
static void one_f_one_b_makespan_and_bubble(void)
{
    setup s;
    uniform(&s, AP_SCHED_1F1B, 4, 8, 1, 1.0, 2.0);
    ap_pipe_result r = simulate(&s);
    CHECK_NEAR(r.step, (8 + 4 - 1) * 3.0, 1e-12);
    CHECK_NEAR(r.bubble, 3.0 / 11, 1e-12);
    /* Equivalently idle / compute = (p-1)/m. */
    CHECK_NEAR(r.bubble / (1 - r.bubble), 3.0 / 8, 1e-12);
    CHECK(r.nevents == 4 * 8 * 2);
    ap_pipe_result_free(&r);
}

static void gpipe_has_the_same_makespan_but_holds_every_micro_batch(void)
{
    setup s;
    uniform(&s, AP_SCHED_GPIPE, 4, 8, 1, 1.0, 2.0);
    ap_pipe_result g = simulate(&s);
    uniform(&s, AP_SCHED_1F1B, 4, 8, 1, 1.0, 2.0);
    ap_pipe_result o = simulate(&s);
    CHECK_NEAR(g.step, 11 * 3.0, 1e-12);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(g.inflight[i], 8, 1e-12);
        CHECK_NEAR(o.inflight[i], 4 - i, 1e-12);
    }
    ap_pipe_result_free(&g);
    ap_pipe_result_free(&o);
}

static void events_are_ordered_by_stage_then_time(void)
{
    setup s;
    uniform(&s, AP_SCHED_1F1B, 3, 5, 1, 1.0, 2.0);
    ap_pipe_result r = simulate(&s);
    int ordered = 1;
    for (int k = 1; k < r.nevents; k++) {
        const ap_pipe_event *a = &r.events[k - 1], *b = &r.events[k];
        if (a->stage > b->stage || (a->stage == b->stage && a->end > b->start + 1e-12))
            ordered = 0;
    }
    CHECK(ordered);
    /* The last stage starts after the two forwards upstream of it. */
    CHECK_NEAR(r.events[2 * 10].start, 0 + 2 * 1.0, 1e-12);
    ap_pipe_result_free(&r);
}

/* Megatron's interleaving cuts the bubble by about v. */
static void interleaving_shrinks_the_bubble_by_about_v(void)
{
    setup s;
    uniform(&s, AP_SCHED_1F1B, 4, 8, 1, 1.0, 2.0);
    ap_pipe_result plain = simulate(&s);
    uniform(&s, AP_SCHED_INTERLEAVED, 4, 8, 2, 1.0, 2.0);
    ap_pipe_result inter = simulate(&s);
    double idle_plain = plain.step - 8 * 3.0, idle_inter = inter.step - 8 * 3.0;
    CHECK_NEAR(idle_plain, 3 * 3.0, 1e-12);
    /* (p-1)(f+b)/v exactly for uniform chunks. */
    CHECK_NEAR(idle_inter, 3 * 3.0 / 2, 1e-12);
    CHECK(inter.bubble < plain.bubble);
    ap_pipe_result_free(&plain);
    ap_pipe_result_free(&inter);
}

static void interleaving_needs_micro_batches_divisible_by_stages(void)
{
    setup s;
    uniform(&s, AP_SCHED_INTERLEAVED, 4, 6, 2, 1.0, 2.0);
    ap_pipe_result r;
    char err[AP_ERR_LEN];
    CHECK(ap_pipe_simulate(&s.spec, &r, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "divisible");
}

/* With one slow stage the steady state runs at its pace: the makespan is
 * about m times its f + b plus the others' fill and drain. */
static void slowest_stage_dominates(void)
{
    setup s;
    uniform(&s, AP_SCHED_1F1B, 4, 32, 1, 1.0, 2.0);
    s.fwd[2] = 3.0;
    s.bwd[2] = 6.0;
    ap_pipe_result r = simulate(&s);
    CHECK(r.step >= 32 * 9.0);
    CHECK(r.step <= 32 * 9.0 + 3 * 3.0 + 1e-9);
    ap_pipe_result_free(&r);
}

static void p2p_delays_every_hop(void)
{
    setup s;
    uniform(&s, AP_SCHED_1F1B, 4, 1, 1, 1.0, 2.0);
    for (int i = 0; i < 4; i++)
        s.p2p[i] = 0.5;
    s.spec.p2p = s.p2p;
    ap_pipe_result r = simulate(&s);
    /* One micro-batch: 4 forwards, 4 backwards, 3 hops each way. */
    CHECK_NEAR(r.step, 4 * 3.0 + 6 * 0.5, 1e-12);
    ap_pipe_result_free(&r);
}

static void absurd_specs_are_input_errors(void)
{
    setup s;
    ap_pipe_result r;
    char err[AP_ERR_LEN];
    uniform(&s, AP_SCHED_1F1B, 4, 8, 1, 1.0, 2.0);
    s.spec.nmicro = 2000000;
    CHECK(ap_pipe_simulate(&s.spec, &r, err) == AP_EINPUT);
    s.spec.nmicro = 0;
    CHECK(ap_pipe_simulate(&s.spec, &r, err) == AP_EINPUT);
    s.spec.nmicro = 8;
    s.fwd[1] = -1;
    CHECK(ap_pipe_simulate(&s.spec, &r, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "fwd[1]");
    s.fwd[1] = NAN;
    CHECK(ap_pipe_simulate(&s.spec, &r, err) == AP_EINPUT);
    s.fwd[1] = 1;
    s.spec.nstages = 2000000;
    CHECK(ap_pipe_simulate(&s.spec, &r, err) == AP_EINPUT);
}

/* A sweep prices the summary alone: no events, the same step, bubble and
 * micro-batches in flight, interleaved and merged schedules included. */
static void the_summary_alone_is_the_full_simulation_without_events(void)
{
    setup s;
    uniform(&s, AP_SCHED_INTERLEAVED, 4, 8, 2, 1.0, 2.0);
    s.fwd[5] = 0.9;
    s.bwd[2] = 1.3;
    double save[MAXPV] = {0.2, 0.1, 0.3, 0.2, 0.1, 0.2, 0.4, 0.1};
    s.spec.pair_save = save;
    ap_pipe_result full = simulate(&s);
    s.spec.summary_only = 1;
    ap_pipe_result sum = simulate(&s);
    CHECK(sum.events == NULL && sum.nevents == 0);
    CHECK_NEAR(sum.step, full.step, 1e-12);
    CHECK_NEAR(sum.bubble, full.bubble, 1e-12);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(sum.inflight[i], full.inflight[i], 1e-12);
        CHECK_NEAR(sum.saved[i], full.saved[i], 1e-12);
    }
    ap_pipe_result_free(&full);
    ap_pipe_result_free(&sum);
}

/* The bound a sweep drops configurations by: the last stage cannot start
 * before the p - 1 forwards upstream of it, then runs its m forwards and
 * backwards back to back; (p - 1) f + m (f + b) where the schedule takes
 * (m + p - 1)(f + b). */
static void the_lower_bound_is_the_fill_plus_the_busiest_stage(void)
{
    setup s;
    uniform(&s, AP_SCHED_1F1B, 4, 8, 1, 1.0, 2.0);
    s.spec.bound_only = 1;
    ap_pipe_result b = simulate(&s);
    CHECK(b.bounded);
    CHECK(b.events == NULL);
    CHECK_NEAR(b.step, 3 * 1.0 + 8 * 3.0, 1e-12);
    CHECK(b.step <= (8 + 4 - 1) * 3.0);
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(b.inflight[i], 4 - i, 1e-12);
    ap_pipe_result_free(&b);

    /* Never above the simulated step, whatever the stages and sends. */
    uniform(&s, AP_SCHED_INTERLEAVED, 4, 8, 2, 1.0, 2.0);
    for (int i = 0; i < 8; i++) {
        s.fwd[i] = 0.3 + 0.1 * (i % 3);
        s.bwd[i] = 0.7 + 0.2 * (i % 4);
    }
    for (int i = 0; i < 4; i++)
        s.p2p[i] = 0.05 * (i + 1);
    s.spec.p2p = s.p2p;
    ap_pipe_result run = simulate(&s);
    s.spec.bound_only = 1;
    b = simulate(&s);
    CHECK(b.step <= run.step + 1e-12);
    CHECK(b.step > 0.8 * run.step);
    CHECK(!run.bounded);
    ap_pipe_result_free(&run);
    ap_pipe_result_free(&b);
}

int main(void)
{
    RUN(one_f_one_b_makespan_and_bubble);
    RUN(gpipe_has_the_same_makespan_but_holds_every_micro_batch);
    RUN(events_are_ordered_by_stage_then_time);
    RUN(interleaving_shrinks_the_bubble_by_about_v);
    RUN(interleaving_needs_micro_batches_divisible_by_stages);
    RUN(slowest_stage_dominates);
    RUN(p2p_delays_every_hop);
    RUN(absurd_specs_are_input_errors);
    RUN(the_summary_alone_is_the_full_simulation_without_events);
    RUN(the_lower_bound_is_the_fill_plus_the_busiest_stage);
    return DONE();
}
