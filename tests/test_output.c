/* test_output.c -- what the reports say about a plan (planner/output.c):
 * the host-time caveat of a plan with many experts per GPU names the
 * evidence of the token dispatcher it prices, a plan with experts names
 * that dispatcher in its text report and its prediction, and a plan whose
 * stages are one GPU each reports the ZeRO that runs there (ZeRO-0) and
 * its GPU as "GPU 0" (docs/plan-format.md, docs/planner.md). */
#include "model.h"
#include "test.h"

/* A plan of one stage that holds `experts` experts per GPU, the shortest
 * forward GEMM of one 20 us, priced with dispatcher d: all the host-time
 * caveat reads. */
static ap_plan expert_plan(ap_stage *st, double experts, ap_dispatcher d)
{
    ap_plan p;
    memset(&p, 0, sizeof p);
    memset(st, 0, sizeof *st);
    st->local_experts = experts;
    st->expert_gemm_s = 20e-6;
    p.nstages = 1;
    p.stages = st;
    p.run.dispatcher = d;
    return p;
}

/* The alltoall dispatcher waits for the host before every dispatch, and
 * the published runs the caveat cites ran it: it says both. */
static void the_alltoall_caveat_names_its_host_wait(void)
{
    ap_stage st;
    ap_plan p = expert_plan(&st, 16, AP_DISPATCH_ALLTOALL);
    char buf[1024];
    CHECK(ap_plan_caveat_moe_host(&p, buf, sizeof buf) == 1);
    CHECK_STR_HAS(buf, "16 experts per GPU in each grouped GEMM, the shortest forward "
                       "GEMM of one 20 us: host (CPU) time is not priced");
    CHECK_STR_HAS(buf, "Published runs on the alltoall dispatcher priced here, which "
                       "waits for the host once per layer, with 16 and 4 experts per GPU");
    CHECK_STR_HAS(buf, "took 3x and 1.3x the predicted step, one with 2 of 0.7 ms was "
                       "within 2% (docs/validation.md, findings 18 and 36)");
}

/* DeepEP and HybridEP are not the alltoall dispatcher: the caveat gives
 * the runs on them (1.05x to 1.8x, findings 18 and 47) and does not say
 * the plan waits for the host as the alltoall dispatcher does. */
static void the_flex_caveat_gives_the_flex_runs(void)
{
    ap_dispatcher flex[] = {AP_DISPATCH_DEEPEP, AP_DISPATCH_HYBRIDEP};
    for (int i = 0; i < 2; i++) {
        ap_stage st;
        ap_plan p = expert_plan(&st, 16, flex[i]);
        char buf[1024];
        CHECK(ap_plan_caveat_moe_host(&p, buf, sizeof buf) == 1);
        CHECK_STR_HAS(buf, "Published runs on DeepEP or HybridEP took 1.05x to 1.8x the "
                           "predicted step (1.8x with 16 experts per GPU)");
        CHECK_STR_HAS(buf, "findings 18 and 47");
        CHECK(!strstr(buf, "priced here, which waits"));
        CHECK_STR_HAS(buf, "read this step as a lower bound");
    }
}

/* No published run used the allgather dispatcher: the caveat says that
 * the runs it cites are the alltoall dispatcher's. */
static void the_allgather_caveat_says_no_run_used_it(void)
{
    ap_stage st;
    ap_plan p = expert_plan(&st, 4, AP_DISPATCH_ALLGATHER);
    char buf[1024];
    CHECK(ap_plan_caveat_moe_host(&p, buf, sizeof buf) == 1);
    CHECK_STR_HAS(buf, "4 experts per GPU");
    CHECK_STR_HAS(buf, "all on the alltoall dispatcher (which waits for the host once per "
                       "layer; none on the allgather one priced here)");
}

/* One expert per GPU has no caveat, whatever the dispatcher. */
static void one_expert_per_gpu_has_no_host_caveat(void)
{
    ap_stage st;
    ap_plan p = expert_plan(&st, 1, AP_DISPATCH_DEEPEP);
    char buf[1024] = "";
    CHECK(ap_plan_caveat_moe_host(&p, buf, sizeof buf) == 0);
}

/* What ap_plan_print writes for plan p of model g; the caller frees it. */
static char *report_of(const ap_graph *g, const ap_plan *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    ap_plan_print(g, p, f);
    fclose(f);
    return text;
}

/* The GPT-tiny example on one GPU with the distributed optimizer asked
 * for (zero=1): there are no data-parallel replicas to shard over, so the
 * report says ZeRO-0 runs, naming the level the plan carries, and its one
 * GPU as "GPU 0". */
static void one_gpu_runs_no_zero(void)
{
    ap_graph *g = ap_test_model("examples/gpt-tiny.json", 0);
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 1, "tp=1,mbs=1,gbs=8,zero=1", NULL, &p), "");
    char *text = report_of(g, &p);
    CHECK_STR_HAS(text, " on 1 GPU (h100-sxm, 1 per node)\n");
    CHECK_STR_HAS(text, "; 1f1b; ZeRO-0 (each stage on one GPU: no data-parallel replicas "
                        "for ZeRO-1 to shard over)\n");
    CHECK_STR_HAS(text, "  GPU 0  mesh 1x1  ");
    CHECK(text && !strstr(text, "GPUs 0-0"));
    free(text);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* Two stages of one GPU each (pp=2) are the same: ZeRO-0, "GPU 1" for the
 * second. With two data-parallel replicas ZeRO-1 shards, and says so. */
static void zero_is_named_where_it_shards(void)
{
    ap_graph *g = ap_test_model("examples/gpt-tiny.json", 0);
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 2, "tp=1,pp=2,mbs=1,gbs=8,zero=1", NULL, &p), "");
    char *text = report_of(g, &p);
    CHECK_STR_HAS(text, "ZeRO-0 (each stage on one GPU");
    CHECK_STR_HAS(text, "  GPU 1  mesh 1x1  ");
    free(text);
    ap_plan_free(&p);
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 2, "tp=1,pp=1,mbs=1,gbs=8,zero=1", NULL, &p), "");
    text = report_of(g, &p);
    CHECK_STR_HAS(text, "; 1f1b; ZeRO-1\n");
    CHECK_STR_HAS(text, "  GPUs 0-1  mesh ");
    free(text);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* A small Mixtral: 8 experts, top 2, on 4 GPUs. */
static ap_graph *small_moe(char *err)
{
    return ap_test_hf_seq("{\"model_type\":\"mixtral\",\"hidden_size\":256,"
                          "\"intermediate_size\":512,\"num_attention_heads\":4,"
                          "\"num_key_value_heads\":4,\"num_hidden_layers\":2,"
                          "\"num_local_experts\":8,\"num_experts_per_tok\":2,"
                          "\"vocab_size\":1000,\"max_position_embeddings\":512}",
                          512, err);
}

/* A plan with experts names the dispatcher it was priced with: a line of
 * the text report in Megatron-LM's flags, and "moe_dispatcher" in the
 * prediction (alltoall included, which the top-level field leaves out). */
static void an_moe_plan_names_its_dispatcher(void)
{
    static const struct {
        const char *spec, *line, *json;
    } cases[] = {
        {"tp=1,ep=4,mbs=1,gbs=8,dispatcher=deepep",
         "  MoE token dispatcher: flex with DeepEP (--moe-token-dispatcher-type flex "
         "--moe-flex-dispatcher-backend deepep)\n", "\"moe_dispatcher\":\t\"deepep\""},
        {"tp=1,ep=4,mbs=1,gbs=8,dispatcher=hybridep",
         "  MoE token dispatcher: flex with HybridEP", "\"moe_dispatcher\":\t\"hybridep\""},
        {"tp=1,ep=4,mbs=1,gbs=8,dispatcher=alltoall",
         "  MoE token dispatcher: alltoall (--moe-token-dispatcher-type alltoall)\n",
         "\"moe_dispatcher\":\t\"alltoall\""},
    };
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_moe(err);
    REQUIRE_OK(g ? 0 : 1, err);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ap_plan p;
        if (ap_test_megatron_plan_ok(g, 4, cases[i].spec, NULL, &p)) {
            CHECK(0);
            ap_plan_free(&p);
            continue;
        }
        char *text = report_of(g, &p);
        char *pred = ap_plan_prediction_to_json(&p);
        CHECK_STR_HAS(text, cases[i].line);
        CHECK_STR_HAS(pred, cases[i].json);
        free(text);
        free(pred);
        ap_plan_free(&p);
    }
    ap_graph_free(g);
}

/* A dense model has no dispatcher to name. */
static void a_dense_plan_names_no_dispatcher(void)
{
    ap_graph *g = ap_test_model("examples/gpt-tiny.json", 0);
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 2, "tp=2,mbs=1,gbs=8", NULL, &p), "");
    char *text = report_of(g, &p);
    char *pred = ap_plan_prediction_to_json(&p);
    CHECK(text && !strstr(text, "dispatcher"));
    CHECK(pred && !strstr(pred, "moe_dispatcher"));
    free(text);
    free(pred);
    ap_plan_free(&p);
    ap_graph_free(g);
}

int main(void)
{
    RUN(the_alltoall_caveat_names_its_host_wait);
    RUN(the_flex_caveat_gives_the_flex_runs);
    RUN(the_allgather_caveat_says_no_run_used_it);
    RUN(one_expert_per_gpu_has_no_host_caveat);
    RUN(one_gpu_runs_no_zero);
    RUN(zero_is_named_where_it_shards);
    RUN(an_moe_plan_names_its_dispatcher);
    RUN(a_dense_plan_names_no_dispatcher);
    return DONE();
}
