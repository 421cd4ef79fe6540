/* test_defer_wgrad.c -- Megatron-Core's --defer-embedding-wgrad-compute:
 * the last stage's output-layer weight gradients wait for the end of the
 * schedule and run while the stages before it drain their backwards. */
#include "costmodel/costmodel.h"
#include "model.h"
#include "test.h"

/* Two stages, two micro-batches, no transfers. Stage 0 takes 1 forward and
 * 2 backward; stage 1, which holds the head, 1 forward and 3 backward, of
 * which 1 is the output layer's weight gradient. */
static ap_pipe_result two_stages(const double *defer, int limit)
{
    static const double fwd[2] = {1, 1}, bwd[2] = {2, 3};
    ap_pipe_spec spec = {.schedule = AP_SCHED_1F1B, .nstages = 2, .nmicro = 2, .vchunks = 1,
                         .fwd = fwd, .bwd = bwd, .defer = defer, .defer_limit = limit};
    ap_pipe_result r;
    char err[AP_ERR_LEN];
    int rc = ap_pipe_simulate(&spec, &r, err);
    CHECK(rc == AP_OK);
    if (rc != AP_OK)
        fprintf(stderr, "%s\n", err);
    return r;
}

/* By hand: stage 1 runs F0 [1,2] B0 [2,5] F1 [5,6] B1 [6,9]; stage 0 runs
 * F0 F1 [0,2], B0 [5,7], B1 [9,11]. */
static void without_deferral_the_heavy_last_stage_sets_the_pace(void)
{
    ap_pipe_result r = two_stages(NULL, 0);
    CHECK_NEAR(r.step, 11, 1e-12);
    CHECK(r.tail == NULL);
    CHECK_NEAR(r.bubble, 1 - 14.0 / 22, 1e-12);
    ap_pipe_result_free(&r);
}

/* Both weight gradients wait: stage 1 runs B0 [2,4] F1 [4,5] B1 [5,7] and
 * then the two deferred GEMMs [7,9]; stage 0's backwards start 1 earlier
 * each, B0 [4,6] and B1 [7,9]. The deferred work fills what would have been
 * stage 1's idle drain. */
static void deferring_every_micro_batch_moves_the_gemms_into_the_drain(void)
{
    static const double defer[2] = {0, 1};
    ap_pipe_result r = two_stages(defer, 0);
    CHECK_NEAR(r.step, 9, 1e-12);
    CHECK(r.tail != NULL);
    if (r.tail) {
        CHECK_NEAR(r.tail[0], 0, 1e-12);
        CHECK_NEAR(r.tail[1], 2, 1e-12);
    }
    CHECK_NEAR(r.bubble, 1 - 14.0 / 18, 1e-12);
    ap_pipe_result_free(&r);
}

/* --wgrad-deferral-limit 1: only micro-batch 0's waits; B1 runs whole
 * [5,8], the one deferred GEMM [8,9], and stage 0's B1 [8,10]. */
static void a_deferral_limit_defers_only_the_first_micro_batches(void)
{
    static const double defer[2] = {0, 1};
    ap_pipe_result r = two_stages(defer, 1);
    CHECK_NEAR(r.step, 10, 1e-12);
    if (r.tail)
        CHECK_NEAR(r.tail[1], 1, 1e-12);
    ap_pipe_result_free(&r);
}

static void a_negative_limit_or_time_is_refused(void)
{
    static const double fwd[2] = {1, 1}, bwd[2] = {2, 3}, defer[2] = {0, 1},
                        bad[2] = {0, -1};
    ap_pipe_result r;
    char err[AP_ERR_LEN];
    ap_pipe_spec spec = {.schedule = AP_SCHED_1F1B, .nstages = 2, .nmicro = 2, .vchunks = 1,
                         .fwd = fwd, .bwd = bwd, .defer = defer, .defer_limit = -1};
    CHECK(ap_pipe_simulate(&spec, &r, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "deferral limit");
    spec.defer = bad;
    spec.defer_limit = 0;
    CHECK(ap_pipe_simulate(&spec, &r, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "defer[1]");
}

/* Llama 3 8B at tp 2, pp 4, sequence 1024, 64 micro-batches of 1: the last
 * stage keeps, for each of the 8 deferred micro-batches, the output
 * layer's input (1024 x 4096, bf16, whole: the head is column-parallel) and
 * its logits' gradient (1024 x 128256/2, bf16), and the step gets shorter:
 * the wait moves work off the busiest stage into the drain. */
static void a_plan_keeps_the_deferred_buffers_and_runs_faster(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 1024);
    const char *spec = "tp=2,pp=4,mbs=1,gbs=64,sp=1";
    char with[128];
    snprintf(with, sizeof with, "%s,defer_wgrad=1,wgrad_deferral_limit=8", spec);
    ap_plan off, on;
    if (!g || ap_test_megatron_plan_ok(g, 8, spec, NULL, &off) ||
        ap_test_megatron_plan_ok(g, 8, with, NULL, &on)) {
        CHECK(0);
    } else {
        double per_micro = 1024.0 * 4096 * 2 + 1024.0 * 128256 / 2 * 2;
        CHECK_NEAR(on.stages[3].mem_bytes - off.stages[3].mem_bytes, 8 * per_micro, 1e-9);
        CHECK_NEAR(on.stages[0].mem_bytes, off.stages[0].mem_bytes, 1e-12);
        CHECK(on.stages[3].defer_wgrad > 0 && on.stages[0].defer_wgrad == 0);
        CHECK(on.step_time < off.step_time);
    }
    ap_plan_free(&off);
    ap_plan_free(&on);
    ap_graph_free(g);
}

int main(void)
{
    RUN(without_deferral_the_heavy_last_stage_sets_the_pace);
    RUN(deferring_every_micro_batch_moves_the_gemms_into_the_drain);
    RUN(a_deferral_limit_defers_only_the_first_micro_batches);
    RUN(a_negative_limit_or_time_is_refused);
    RUN(a_plan_keeps_the_deferred_buffers_and_runs_faster);
    return DONE();
}
