/* The overlapped gradient reduction under interleaved 1F1B. Megatron-LM's
 * get_model wraps each model chunk in its own DDP with
 * disable_bucketing=(model_chunk_idx > 0): every chunk after the first
 * reduces its gradients as one bucket, once its last backward has ended,
 * and the backwards the cool-down still runs on the stage (the lower
 * chunks of the last group of micro-batches) hide it. Without
 * interleaving nothing changes: the buckets reduce behind the last
 * micro-batch's backward, max(0, reduce - bwd). */
#include "model.h"

/* One chunk: what the last backward does not hide. */
static void one_chunk_is_reduce_minus_backward(void)
{
    CHECK(ap_pipe_grad_reduce_exposed(10, 4, 1, 4) == 6);
    CHECK(ap_pipe_grad_reduce_exposed(3, 4, 1, 4) == 0);
    CHECK(ap_pipe_grad_reduce_exposed(10, 4, 0, 1) == 6);
}

/* v = 2, group 4, reduce 10 s, a micro-batch's backward 4 s: b = 2, r = 5.
 * Chunk 1's bucket starts when its last backward ends, 4 backwards of
 * chunk 0 (8 s) before the end, and is done at -3; chunk 0's buckets
 * follow behind its last backward, from -2: done at 3. A stage that
 * started its whole reduction at the last micro-batch's backward would
 * show 10 - 4 = 6. */
static void two_chunks_by_hand(void)
{
    CHECK_NEAR(ap_pipe_grad_reduce_exposed(10, 4, 2, 4), 3, 1e-15);
    /* Group 1: chunk 1's bucket is ready one chunk-backward before the
     * end, at -2, ends at 3; chunk 0 then waits for it: 8. */
    CHECK_NEAR(ap_pipe_grad_reduce_exposed(10, 4, 2, 1), 8, 1e-15);
}

/* v = 4, group 4, reduce 8, backward 4: b = 1, r = 2. Chunk 3 ready at -12,
 * done -10; chunk 2 ready -8, done -6; chunk 1 ready -4, done -2; chunk 0
 * from max(-1, -2) = -1, done 1. */
static void four_chunks_by_hand(void)
{
    CHECK_NEAR(ap_pipe_grad_reduce_exposed(8, 4, 4, 4), 1, 1e-15);
}

/* When the reduction outweighs the cool-down the chunks queue on one
 * stream, and everything after chunk v-1's bucket is ready shows:
 * v = 2, group 2, reduce 40, backward 4: 40 - 2·2 = 36. */
static void a_long_reduction_queues_behind_the_first_bucket(void)
{
    CHECK_NEAR(ap_pipe_grad_reduce_exposed(40, 4, 2, 2), 36, 1e-15);
    /* A reduction the cool-down hides shows nothing. */
    CHECK(ap_pipe_grad_reduce_exposed(0.5, 4, 4, 4) == 0);
}

/* gpt-1.3b (24 layers) at 512 tokens on 16 H100s, pp = 2, dp = 8, the
 * distributed optimizer overlapping its reduce-scatter: 4 micro-batches. */
#define MODEL "examples/gpt-1.3b.json"
#define BASE "tp=1,pp=2,mbs=1,gbs=32,zero=1,overlap_grad=1"

static double reduce_of(const ap_stage *st)
{
    return fmax(0, st->grad_sync - st->tied_sync - st->param_sync);
}

static void plans_price_each_stage_so(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_plan one, two;
    char err[AP_ERR_LEN];
    memset(&two, 0, sizeof two);
    if (!g || ap_test_megatron_plan(g, 16, BASE, NULL, &one, err) ||
        ap_test_megatron_plan(g, 16, BASE ",vpp=2", NULL, &two, err)) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
    } else {
        /* Non-interleaved: the last backward hides the buckets, as before. */
        for (int i = 0; i < one.nstages; i++) {
            const ap_stage *st = &one.stages[i];
            CHECK(st->grad_sync_exposed == st->tied_sync + st->param_sync_exposed +
                                               fmax(0, reduce_of(st) - st->bwd));
        }
        CHECK(two.vchunks == 2 && two.nmicro == 4);
        for (int i = 0; i < two.nstages; i++) {
            const ap_stage *st = &two.stages[i];
            double b = st->bwd / 2, r = reduce_of(st) / 2;
            /* Chunk 1 ready 2 (pp) chunk-backwards before the end. */
            double want = fmax(0, fmax(-b, -2 * b + r) + r);
            CHECK(reduce_of(st) > 0);
            double got = st->grad_sync_exposed - st->tied_sync - st->param_sync_exposed;
            CHECK(fabs(got - want) <= 1e-12 * reduce_of(st));
        }
    }
    ap_plan_free(&one);
    ap_plan_free(&two);
    ap_graph_free(g);
}

/* Without --overlap-grad-reduce there are no buckets to disable: the whole
 * reduction waits for the backward, interleaved or not. */
static void serial_reduction_is_exposed_whole(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_plan p;
    char err[AP_ERR_LEN];
    if (!g || ap_test_megatron_plan(g, 16, "tp=1,pp=2,vpp=2,mbs=1,gbs=32,zero=1,"
                                           "overlap_grad=0", NULL, &p, err)) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
    } else {
        for (int i = 0; i < p.nstages; i++) {
            const ap_stage *st = &p.stages[i];
            CHECK(st->grad_sync_exposed ==
                  st->tied_sync + st->param_sync_exposed + reduce_of(st));
        }
    }
    ap_plan_free(&p);
    ap_graph_free(g);
}

int main(void)
{
    RUN(one_chunk_is_reduce_minus_backward);
    RUN(two_chunks_by_hand);
    RUN(four_chunks_by_hand);
    RUN(a_long_reduction_queues_behind_the_first_bucket);
    RUN(plans_price_each_stage_so);
    RUN(serial_reduction_is_exposed_whole);
    return DONE();
}
