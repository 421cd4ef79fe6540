/* Megatron-LM settings beyond the parallel sizes: whether the data-parallel
 * gradient reduction overlaps the backward (--overlap-grad-reduce), first
 * and last pipeline stages with their own layer counts
 * (--decoder-first/last-pipeline-num-layers), and the split that counts the
 * embedding and the loss as layers
 * (--account-for-embedding/loss-in-pipeline-split). */
#include <cjson/cJSON.h>

#include "model.h"

#include "planner/planner.h"

/* gpt-1.3b at 512 tokens on 16 GPUs over two nodes, one sequence per
 * replica: the gradient all-reduce crosses InfiniBand and outlasts a
 * micro-batch's backward, so both rules give a non-zero exposed part that
 * differs. */
static void gradient_sync_is_all_exposed_without_overlap(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_plan on, off;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=1,pp=1,mbs=1,gbs=32", NULL, &on, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=1,pp=1,mbs=1,gbs=32,overlap_grad=0", NULL,
                                     &off, err), err);
    const ap_stage *a = &on.stages[0], *b = &off.stages[0];
    CHECK(b->grad_sync > a->bwd && a->bwd > 0);
    /* The parameter all-gather is no backward's to hide (test_param_gather.c). */
    CHECK_NEAR(a->grad_sync_exposed,
               a->grad_sync - a->param_sync - a->bwd + a->param_sync_exposed, 1e-15);
    CHECK_NEAR(b->grad_sync_exposed, b->grad_sync, 1e-15);
    CHECK_NEAR(off.t_grad_sync, b->grad_sync, 1e-15);
    /* The pipeline is the same; only the exposed sync differs. */
    CHECK_NEAR(off.step_time - on.step_time, b->grad_sync - a->grad_sync_exposed, 1e-12);
    CHECK(!on.serial_grad_sync && off.serial_grad_sync);
    ap_plan_free(&on);
    ap_plan_free(&off);
    ap_graph_free(g);
}

/* Megatron-Core reduces gradients in buckets: of 40M parameters when the
 * reduction overlaps the backward (1M per data-parallel rank when that is
 * more), and the whole buffer as one when it does not. Every gradient byte
 * pays its share of its bucket's collective, so the many small tensors of
 * a layer pay one latency between them, not one each. With zero=0 both are
 * all-reduces of the same bytes, and they differ only in the bucket: */
static void gradients_are_reduced_in_megatron_buckets(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 512);
    ap_cluster c;
    ap_plan on, off;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=1,pp=1,mbs=1,gbs=32,zero=0", &c, &on, err),
               err);
    ap_cluster_free(&c);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=1,pp=1,mbs=1,gbs=32,zero=0,overlap_grad=0",
                                     &c, &off, err), err);
    double bucket = 40e6 * 2, whole = g->total_params * 2;
    double per_byte_on = ap_cost_allreduce(&c, 16, 2, bucket) / bucket;
    double per_byte_off = ap_cost_allreduce(&c, 16, 2, whole) / whole;
    CHECK_NEAR(on.stages[0].grad_sync / off.stages[0].grad_sync, per_byte_on / per_byte_off,
               1e-9);
    /* The overlapped reduction pays a latency per bucket, about 35 of
     * them, where a collective per tensor would pay one for each of the
     * model's 388 parameter tensors. */
    double bytes = off.stages[0].grad_sync / per_byte_off;
    CHECK(on.stages[0].grad_sync - off.stages[0].grad_sync <
          ap_cost_allreduce(&c, 16, 2, 1) * (bytes / bucket + 1));
    ap_plan_free(&on);
    ap_plan_free(&off);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* With the whole sync exposed a pipeline's step grows by the slowest
 * stage's sync, and plan.json records the setting. */
static void serial_sync_is_recorded_and_read_back(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    ap_plan_desc d;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,pp=2,sp=1,mbs=1,gbs=64,overlap_grad=0", NULL,
                                     &p, err), err);
    double most = 0;
    for (int i = 0; i < p.nstages; i++)
        most = fmax(most, p.stages[i].grad_sync);
    CHECK(most > 0);
    CHECK_NEAR(p.t_grad_sync, most, 1e-15);
    char *json = ap_plan_to_json(g, &p);
    CHECK_STR_HAS(json, "\"overlap_grad_reduce\":\tfalse");
    REQUIRE_OK(ap_plan_desc_parse(json, strlen(json), "plan.json", &d, err), err);
    CHECK(d.serial_grad_sync == 1);
    ap_plan_desc_free(&d);
    /* A plan file from before the field reads as overlapped. */
    char *at = strstr(json, "\t\"overlap_grad_reduce\":\tfalse,\n");
    CHECK(at != NULL);
    if (at)
        memmove(at, at + strlen("\t\"overlap_grad_reduce\":\tfalse,\n"),
                strlen(at + strlen("\t\"overlap_grad_reduce\":\tfalse,\n")) + 1);
    REQUIRE_OK(ap_plan_desc_parse(json, strlen(json), "plan.json", &d, err), err);
    CHECK(d.serial_grad_sync == 0);
    ap_plan_desc_free(&d);
    free(json);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* The trace puts a sync that is not overlapped right after the stage's last
 * pass (its first gradient-sync event: the tied embeddings' all-reduce of
 * the first and last stage follows it), and still spans exactly the
 * predicted step. */
static void trace_puts_serial_sync_after_the_backward(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,mbs=2,gbs=32,sp=1,overlap_grad=0", NULL,
                                     &p, err), err);
    char *text = ap_plan_trace_json(&p, err);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    CHECK(o != NULL);
    double last[4] = {0}, sync[4] = {1e30, 1e30, 1e30, 1e30}, lo = 1e30, hi = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(o, "traceEvents")) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        if (!ph || strcmp(ph, "X"))
            continue;
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
        int pid = cJSON_GetObjectItem(e, "pid")->valueint;
        double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
        double end = ts + cJSON_GetObjectItem(e, "dur")->valuedouble;
        lo = fmin(lo, ts);
        hi = fmax(hi, end);
        if (pid < 0 || pid > 3)
            continue;
        if (!strcmp(cat, "forward") || !strcmp(cat, "backward"))
            last[pid] = fmax(last[pid], end);
        if (!strcmp(cat, "grad_sync"))
            sync[pid] = fmin(sync[pid], ts);
    }
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(sync[i], last[i], 1e-6);
    CHECK_NEAR((hi - lo) / 1e6, p.step_time, 1e-9);
    cJSON_Delete(o);
    free(text);
    ap_plan_free(&p);
    ap_graph_free(g);
}

static void flags_default_to_megatron_and_spec_to_overlap(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    CHECK(m.overlap_grad == 1 && m.first == 0 && m.last == 0);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-parallel-size 2", &m, err), err);
    CHECK(m.overlap_grad == 0);
    REQUIRE_OK(ap_megatron_parse_args("--overlap-grad-reduce --decoder-first-pipeline-num-layers 7 "
                                      "--decoder-last-pipeline-num-layers 6", &m, err), err);
    CHECK(m.overlap_grad == 1 && m.first == 7 && m.last == 6);
    char buf[256];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse("pp=16,first=7,last=7,overlap_grad=0", &m, err), err);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",overlap_grad=0,first=7,last=7");
}

/* Llama 3.1 405B's 126 layers on pp=16: Meta's split gives the first and
 * last stage 7 and the 14 others (126 - 14) / 14 = 8. */
static void first_and_last_stages_take_their_own_layers(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3.1-405b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL && g->nlayers == 126);
    CHECK(ap_test_megatron_plan(g, 128, "tp=8,pp=16,mbs=1,gbs=64,sp=1", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "pp*vpp = 16 does not divide the 126 layers");
    REQUIRE_OK(ap_test_megatron_plan(g, 128, "tp=8,pp=16,mbs=1,gbs=64,sp=1,first=7,last=7", NULL,
                                     &p, err), err);
    CHECK(p.nstages == 16);
    int next = 0;
    for (int i = 0; i < p.nstages; i++) {
        CHECK(p.stages[i].first_layer == next);
        CHECK(p.stages[i].nlayers == (i == 0 || i == 15 ? 7 : 8));
        next += p.stages[i].nlayers;
    }
    CHECK(next == 126);
    /* The first stage also runs the embedding and the last the head, so the
     * stage with the most work is a middle one. */
    CHECK(p.stages[1].fwd > p.stages[0].fwd);
    ap_plan_free(&p);
    REQUIRE_OK(ap_test_megatron_plan(g, 128, "--tensor-model-parallel-size 8 "
                                     "--pipeline-model-parallel-size 16 "
                                     "--sequence-parallel --global-batch-size 64 "
                                     "--decoder-first-pipeline-num-layers 6 "
                                     "--decoder-last-pipeline-num-layers 8", NULL, &p, err), err);
    CHECK(p.stages[0].nlayers == 6 && p.stages[15].nlayers == 8 && p.stages[7].nlayers == 8);
    ap_plan_free(&p);
    ap_graph_free(g);
}

static void uneven_stages_under_interleaving(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    /* 24 layers: 4 + 8 + 8 + 4, each split into two virtual stages. */
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,sp=1,vpp=2,mbs=1,gbs=64,first=4,last=4",
                                     NULL, &p, err), err);
    CHECK(p.vchunks == 2 && p.stages[0].nlayers == 4 && p.stages[1].nlayers == 8);
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,vpp=2,gbs=64,first=3,last=5", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "the first stage's 3 layers do not divide into vpp=2");
    CHECK(ap_test_megatron_plan(g, 16, "--pipeline-model-parallel-size 4 "
                                "--num-layers-per-virtual-pipeline-stage 2 "
                                "--decoder-first-pipeline-num-layers 4", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "--num-virtual-stages-per-pipeline-rank");
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "--tensor-model-parallel-size 2 "
                                     "--pipeline-model-parallel-size 4 --global-batch-size 64 "
                                     "--num-virtual-stages-per-pipeline-rank 2 "
                                     "--decoder-first-pipeline-num-layers 4 "
                                     "--decoder-last-pipeline-num-layers 4", NULL, &p, err), err);
    CHECK(p.vchunks == 2 && p.stages[3].nlayers == 4);
    ap_plan_free(&p);
    ap_graph_free(g);
}

static void bad_first_and_last_are_refused(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    CHECK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,first=0", NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron: first: bad value \"0\" (an integer from 1 to 2^30)");
    CHECK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,first=10,last=9", NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "first=10,last=9 (--decoder-first/last-pipeline-num-layers): "
                       "the 5 layers left do not split evenly over the 2 middle stages");
    CHECK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,first=20,last=20", NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "the 24 layers leave fewer than one for each of the 2 middle stages");
    CHECK(ap_test_megatron_plan(g, 16, "tp=8,pp=2,first=10,last=10", NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "with pp=2 first and last must add up to the 24 layers");
    CHECK(ap_test_megatron_plan(g, 16, "tp=8,pp=2,first=20,last=20", NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "with pp=2 first and last must add up to the 24 layers");
    CHECK(ap_test_megatron_plan(g, 16, "tp=8,pp=2,first=1073741824", NULL, &p, err) == AP_EINPUT);
    CHECK(ap_test_megatron_plan(g, 16, "--pipeline-model-parallel-size 2 "
                                "--decoder-first-pipeline-num-layers -1", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron-args: --decoder-first-pipeline-num-layers: bad value \"-1\"");
    ap_graph_free(g);
}

/* Llama 3.1 405B's 126 layers with the embedding and the loss counted as
 * layers: 128 slots over pp=16 are 8 per stage, the first and last stage
 * keep 7 layers; under vpp=8 each chunk is one slot, which first=7,last=7
 * cannot state (7 does not divide into 8 chunks). */
static void embedding_and_loss_counted_as_layers(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3.1-405b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    CHECK(ap_test_megatron_plan(g, 128, "tp=8,pp=16,vpp=8,gbs=64,sp=1,first=7,last=7", NULL, &p,
                                err) == AP_EINPUT);
    CHECK_STR_HAS(err, "the first stage's 7 layers do not divide into vpp=8");
    REQUIRE_OK(ap_test_megatron_plan(g, 128, "tp=8,pp=16,vpp=8,gbs=64,sp=1,account_embedding=1,"
                                     "account_loss=1", NULL, &p, err), err);
    CHECK(p.vchunks == 8 && p.nstages == 16);
    int next = 0;
    for (int i = 0; i < p.nstages; i++) {
        CHECK(p.stages[i].nlayers == (i == 0 || i == 15 ? 7 : 8));
        next += p.stages[i].nlayers;
    }
    CHECK(next == 126);
    /* Each of the 128 chunks is one slot: the first chunk of all holds the
     * embedding alone and the last the loss alone, so the layers run from
     * stage 1's first chunk: stage i's first chunk starts at layer i - 1. */
    CHECK(p.chunk_layers != NULL);
    int ones = 0;
    for (int k = 1; p.chunk_layers && k < 127; k++)
        ones += p.chunk_layers[k] == 1;
    CHECK(p.chunk_layers && p.chunk_layers[0] == 0 && p.chunk_layers[127] == 0 && ones == 126);
    for (int i = 0; i < p.nstages; i++)
        CHECK(p.stages[i].first_layer == (i ? i - 1 : 0));
    /* 8 micro-batches over 16 stages of 8 chunks: the interleaved bubble is
     * well below plain 1F1B's (p - 1) / m. */
    CHECK(p.bubble < 15.0 / 8 / (1 + 15.0 / 8));
    ap_plan_free(&p);
    /* Only the embedding counted: 127 slots do not divide over 16 stages. */
    CHECK(ap_test_megatron_plan(g, 128, "tp=8,pp=16,gbs=64,sp=1,account_embedding=1", NULL, &p,
                                err) == AP_EINPUT);
    CHECK_STR_HAS(err, "pp*vpp = 16 does not divide the 126 layers plus the embedding "
                       "counted as layers (127)");
    /* The two ways of saying vpp 8 price the same: eight virtual stages a
     * rank, or --num-layers-per-virtual-pipeline-stage 1, which counts the
     * two slots too, as validate_args does ((126 + 2) / 16 = 8 a stage). */
    const char *vpp[2] = {"--num-virtual-stages-per-pipeline-rank 8",
                          "--num-layers-per-virtual-pipeline-stage 1"};
    double step[2];
    for (int i = 0; i < 2; i++) {
        char line[512];
        snprintf(line, sizeof line, "--tensor-model-parallel-size 8 "
                 "--pipeline-model-parallel-size 16 --sequence-parallel "
                 "--global-batch-size 64 %s --account-for-embedding-in-pipeline-split "
                 "--account-for-loss-in-pipeline-split", vpp[i]);
        REQUIRE_OK(ap_test_megatron_plan(g, 128, line, NULL, &p, err), err);
        CHECK(p.vchunks == 8 && p.stages[0].nlayers == 7 && p.stages[8].nlayers == 8 &&
              p.stages[15].nlayers == 7);
        step[i] = p.step_time;
        ap_plan_free(&p);
    }
    CHECK(step[0] == step[1]);
    ap_graph_free(g);
}

static void counted_split_refuses_what_megatron_refuses(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    CHECK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,first=5,last=5,account_loss=1", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "cannot be combined with first=N,last=N");
    CHECK(ap_test_megatron_plan(g, 16, "tp=2,pp=4,account_loss=2", NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron: account_loss: bad value \"2\" (0 or 1)");
    /* gpt-tiny's 2 layers and the two counted slots over 4 stages: one
     * slot each leaves the first stage the embedding alone. */
    ap_graph *tiny = ap_test_model("examples/gpt-tiny.json", 0);
    CHECK(tiny != NULL);
    CHECK(ap_test_megatron_plan(tiny, 8, "tp=2,pp=4,account_embedding=1,account_loss=1", NULL,
                                &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "one slot per stage leaves the first or last stage without a layer");
    ap_graph_free(tiny);
    CHECK(ap_test_megatron_plan(g, 16, "--pipeline-model-parallel-size 4 "
                                "--num-layers-per-virtual-pipeline-stage 2 "
                                "--account-for-loss-in-pipeline-split", NULL, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "the 25 layers and accounted slots do not divide into the 4 "
                       "pipeline stages (Megatron-LM asserts it)");
    ap_graph_free(g);
}

int main(void)
{
    RUN(gradient_sync_is_all_exposed_without_overlap);
    RUN(gradients_are_reduced_in_megatron_buckets);
    RUN(serial_sync_is_recorded_and_read_back);
    RUN(trace_puts_serial_sync_after_the_backward);
    RUN(flags_default_to_megatron_and_spec_to_overlap);
    RUN(first_and_last_stages_take_their_own_layers);
    RUN(uneven_stages_under_interleaving);
    RUN(bad_first_and_last_are_refused);
    RUN(embedding_and_loss_counted_as_layers);
    RUN(counted_split_refuses_what_megatron_refuses);
    return DONE();
}
