/* Multi-token prediction (Megatron-LM's --mtp-num-layers, DeepSeek-V3's
 * next-token module): built after the head of a Hugging Face config on
 * request, priced with the head on the last pipeline stage, placed by a
 * pipeline layout's 'm', and exported back. */
#include <stdlib.h>

#include "model.h"

#include "planner/layout.h"
#include "planner/planner.h"

static ap_graph *with_mtp(const char *rel, int mtp, int seq)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.mtp_layers = mtp;
    o.seq = seq;
    return ap_test_model_with(rel, &o);
}

static double params_of_layer(const ap_graph *g, int layer)
{
    double n = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer == layer)
            n += g->ops[i].param_count;
    return n;
}

/* A module adds one layer like the model's last (DeepSeek-V3's is MoE:
 * 256 experts), the projection of the two normed inputs from 2h to h and
 * three RMSNorm weights; the embedding table and the output layer are the
 * model's own, read again, not copied. */
static void a_module_adds_a_layer_a_projection_and_three_norms(void)
{
    ap_graph *plain = with_mtp("examples/hf/deepseek-v3.json", 0, 0);
    ap_graph *mtp = with_mtp("examples/hf/deepseek-v3.json", 1, 0);
    CHECK(plain && mtp);
    if (!plain || !mtp)
        goto done;
    double h = 7168;
    CHECK(plain->mtp_layers == 0 && mtp->mtp_layers == 1);
    CHECK(mtp->nlayers == 61);
    CHECK_NEAR(mtp->total_params - plain->total_params,
               params_of_layer(plain, 60) + 2 * h * h + 3 * h, 1e-12);
    int embeds = 0, losses = 0, outside = 1;
    for (int i = 0; i < mtp->nops; i++) {
        const ap_op *op = &mtp->ops[i];
        embeds += op->kind == AP_OP_EMBEDDING;
        losses += op->kind == AP_OP_LOSS;
        if (!strncmp(op->name, "mtp0.", 5))
            outside &= op->layer == -1;
    }
    CHECK(embeds == 2 && losses == 2 && outside);
done:
    ap_graph_free(plain);
    ap_graph_free(mtp);
}

/* The count survives `autopar graph -o`, and a model file cannot be asked
 * for another. */
static void the_project_format_keeps_the_modules(void)
{
    ap_graph *g = with_mtp("examples/hf/llama-3-8b.json", 2, 1024), *back = NULL;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    if (!g)
        return;
    char *text = ap_graph_to_json(g);
    REQUIRE_OK(ap_graph_parse_json(text, strlen(text), "m.json", &back, err), err);
    CHECK(back->mtp_layers == 2 && back->nops == g->nops);
    CHECK_NEAR(back->total_flops, g->total_flops, 1e-12);
    ap_graph_free(back);
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.mtp_layers = 1;
    CHECK(ap_graph_load_buffer(text, strlen(text), "m.json", &o, &back, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "m.json: mtp_layers: the model has 2 multi-token-prediction modules, "
                       "not the 1 asked for");
    o.mtp_layers = AP_MAX_MTP + 1;
    ap_graph *hf = ap_test_model_with("examples/hf/llama-3-8b.json", &o);
    CHECK(hf == NULL);
    ap_graph_free(hf);
    free(text);
    ap_graph_free(g);
}

/* Megatron-Core runs the MTP modules after the last stage's layers, beside
 * the head: on gpt-1.3b-like Llama 3 8B over pp 2, the last stage grows by
 * the module's forward, the first does not, and a layout must hold the
 * module as 'm' on its last virtual stage. */
static void the_last_stage_runs_the_modules(void)
{
    ap_graph *plain = with_mtp("examples/hf/llama-3-8b.json", 0, 1024);
    ap_graph *mtp = with_mtp("examples/hf/llama-3-8b.json", 1, 1024);
    ap_plan a, b, c;
    char err[AP_ERR_LEN];
    CHECK(plain && mtp);
    if (!plain || !mtp)
        goto done;
    REQUIRE_OK(ap_test_megatron_plan_ok(plain, 8, "tp=1,pp=2,mbs=1,gbs=16", NULL, &a), "a");
    REQUIRE_OK(ap_test_megatron_plan_ok(mtp, 8, "tp=1,pp=2,mbs=1,gbs=16", NULL, &b), "b");
    CHECK(a.stages[0].fwd == b.stages[0].fwd);
    /* At least a transformer layer and an output layer more. */
    CHECK(b.stages[1].fwd - a.stages[1].fwd > ap_test_layer(&a)->fwd);
    CHECK(b.stages[1].param_bytes > a.stages[1].param_bytes);
    REQUIRE_OK(ap_test_megatron_plan_ok(mtp, 8, "tp=1,pp=2,mbs=1,gbs=16,"
                                        "layout=Et*8|t*8|t*8|t*8mL", NULL, &c), "layout");
    CHECK(c.vchunks == 2);
    /* The module rides on the last chunk of the last stage. */
    CHECK(c.stages[1].chunk_fwd[1] - c.stages[1].chunk_fwd[0] > ap_test_layer(&c)->fwd);
    ap_plan_free(&c);
    const struct {
        const ap_graph *g;
        const char *spec, *want;
    } bad[] = {
        {mtp, "tp=1,pp=2,mbs=1,gbs=16,layout=Et*16|t*16L",
         "places 0 multi-token-prediction layers ('m'); the model has 1"},
        {plain, "tp=1,pp=2,mbs=1,gbs=16,layout=Et*16|t*16mL",
         "places 1 multi-token-prediction layers ('m'); the model has 0"},
        {mtp, "tp=1,pp=2,mbs=1,gbs=16,layout=Et*16|t*16|m|L",
         "puts MTP layers ('m') before the last virtual stage"},
        {mtp, "tp=1,pp=2,mbs=1,gbs=16,layout=Et*16|t*15mtL",
         "places a transformer layer after an MTP layer ('m')"},
        {plain, "--pipeline-model-parallel-size 2 --global-batch-size 16 --mtp-num-layers 1",
         "llama-3-8b.json has no multi-token-prediction modules"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ap_test_megatron_plan(bad[i].g, 8, bad[i].spec, NULL, &c, err) == AP_EINPUT);
        CHECK_STR_HAS(err, bad[i].want);
        ap_plan_free(&c);
    }
    ap_plan_free(&a);
    ap_plan_free(&b);
done:
    ap_graph_free(plain);
    ap_graph_free(mtp);
}

/* The writer puts the modules before the loss, as Megatron-LM reads them
 * (a run of two equal stages is no shorter folded). */
static void a_written_layout_holds_the_modules(void)
{
    const int layers[] = {3, 4, 4, 2};
    char buf[64];
    CHECK(ap_layout_format(layers, 4, 1, buf, sizeof buf) > 0 && !strcmp(buf, "Et*3|t*4|t*4|t*2mL"));
    CHECK(ap_layout_format(layers, 4, 2, buf, sizeof buf) > 0 && !strcmp(buf, "Et*3|t*4|t*4|t*2m*2L"));
}

int main(void)
{
    RUN(a_module_adds_a_layer_a_projection_and_three_norms);
    RUN(the_project_format_keeps_the_modules);
    RUN(the_last_stage_runs_the_modules);
    RUN(a_written_layout_holds_the_modules);
    return DONE();
}
