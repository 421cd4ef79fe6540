/* test_recompute_modules.c -- selective recomputation by Megatron-Core's
 * modules (--recompute-modules; docs/cost-model.md, "Selective
 * recomputation by module"). A recomputed module keeps its inputs, drops
 * what it made, and redoes its forward in the backward; layernorm, moe_act
 * and mla_up_proj drop their outputs too (CheckpointWithoutOutput). The
 * Hugging Face builder places each op in the modules Transformer Engine's
 * layer specs give it. */
#include "costmodel/costmodel.h"
#include "model.h"
#include "test.h"

/* A condition the rest of a test needs. */
#define REQUIRE(cond) REQUIRE_OK(!(cond), #cond)

#define SEQ 2048
#define HIDDEN 12288.0

static ap_graph *gpt3(void)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = SEQ;
    o.dropout = 1;
    return ap_test_model_with("examples/hf/gpt3-175b.json", &o);
}

static double sbh(void) { return SEQ * 1.0 * HIDDEN; }

/* Flash attention's fp32 log-sum-exp per row and head (96 heads) over t. */
static double lse(int t) { return 4 * 96.0 * SEQ / t; }

/* The builder's modules: the attention kernel is core_attn; a dense layer's
 * MLP is mlp with the norm before it, which Transformer Engine fuses into
 * fc1; a MoE layer's norm is a module of its own, its experts' activation
 * is moe_act inside moe, and its shared experts are shared_experts inside
 * moe; MLA's norm before the attention is a module, its up projections
 * and rotary embeddings mla_up_proj. */
static void the_builder_places_ops_in_megatron_modules(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 256);
    REQUIRE(g != NULL);
    CHECK(g->ops[ap_graph_find_op(g, "l0.attn")].modules == AP_MODULE_CORE_ATTN);
    CHECK(g->ops[ap_graph_find_op(g, "l0.ln1")].modules == 0);
    CHECK(g->ops[ap_graph_find_op(g, "l0.q")].modules == 0);
    CHECK(g->ops[ap_graph_find_op(g, "l0.ln2")].modules == AP_MODULE_MLP);
    CHECK(g->ops[ap_graph_find_op(g, "l0.mlp.down")].modules == AP_MODULE_MLP);
    CHECK(g->ops[ap_graph_find_op(g, "l0.res2")].modules == 0);
    ap_graph_free(g);

    g = ap_test_model("examples/hf/deepseek-v3.json", 256);
    REQUIRE(g != NULL);
    CHECK(g->ops[ap_graph_find_op(g, "l0.ln1")].modules == AP_MODULE_LAYERNORM);
    CHECK(g->ops[ap_graph_find_op(g, "l0.q_a")].modules == 0);
    CHECK(g->ops[ap_graph_find_op(g, "l0.kv_a")].modules == 0);
    CHECK(g->ops[ap_graph_find_op(g, "l0.q_b")].modules == AP_MODULE_MLA_UP_PROJ);
    CHECK(g->ops[ap_graph_find_op(g, "l0.kv_a_norm")].modules == AP_MODULE_MLA_UP_PROJ);
    CHECK(g->ops[ap_graph_find_op(g, "l0.k_cat")].modules == AP_MODULE_MLA_UP_PROJ);
    CHECK(g->ops[ap_graph_find_op(g, "l0.ln2")].modules == AP_MODULE_MLP);
    CHECK(g->ops[ap_graph_find_op(g, "l3.ln2")].modules == AP_MODULE_LAYERNORM);
    CHECK(g->ops[ap_graph_find_op(g, "l3.router")].modules == AP_MODULE_MOE);
    CHECK(g->ops[ap_graph_find_op(g, "l3.experts.mul")].modules ==
          (AP_MODULE_MOE | AP_MODULE_MOE_ACT));
    CHECK(g->ops[ap_graph_find_op(g, "l3.experts.up")].modules == AP_MODULE_MOE);
    CHECK(g->ops[ap_graph_find_op(g, "l3.shared.down")].modules ==
          (AP_MODULE_MOE | AP_MODULE_SHARED_EXPERTS));
    ap_graph_free(g);
}

/* The messages that list the modules name each once, in bit order. */
static void the_listed_names_are_the_modules(void)
{
    char list[256] = "";
    for (int i = 0; i < AP_MODULE_COUNT; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 ap_module_name(1u << i));
    CHECK(!strcmp(list, AP_MODULE_NAMES));
    CHECK(ap_module_name(1u << AP_MODULE_COUNT) == NULL);
}

/* The project format keeps them: written and read back, the same ops are
 * in the same modules, and a name that is no module is refused. */
static void the_project_format_keeps_the_modules(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 256), *back = NULL;
    REQUIRE(g != NULL);
    char *text = ap_graph_to_json(g), err[AP_ERR_LEN];
    REQUIRE(text != NULL);
    CHECK_STR_HAS(text, "\"modules\":");
    REQUIRE_OK(ap_graph_load_buffer(text, strlen(text), "qwen3.json", NULL, &back, err), err);
    for (int i = 0; i < g->nops; i++)
        CHECK(back->ops[i].modules == g->ops[i].modules);
    free(text);
    ap_graph_free(back);
    ap_graph_free(g);

    const char *bad =
        "{\"format\": \"autopar-model/1\", \"name\": \"m\", "
        "\"dims\": {\"b\": {\"name\": \"batch\", \"kind\": \"batch\", \"size\": 1}, "
        "\"h\": {\"name\": \"hidden\", \"kind\": \"hidden\", \"size\": 8}}, "
        "\"tensors\": [{\"name\": \"x\", \"shape\": \"bh\", \"role\": \"input\"}, "
        "{\"name\": \"y\", \"shape\": \"bh\", \"role\": \"activation\"}], "
        "\"ops\": [{\"name\": \"a\", \"kind\": \"silu\", \"inputs\": [\"x\"], "
        "\"outputs\": [\"y\"], \"modules\": [\"mlp\", \"attention\"]}]}";
    CHECK(ap_graph_load_buffer(bad, strlen(bad), "bad.json", NULL, &back, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "ops[0].modules[1]");
}

/* Korthikanti et al.'s GPT-3 layer under tensor and sequence parallelism
 * saves 34sbh/t (and flash attention's statistics, which recomputing
 * core_attn frees). Recomputing the MLP drops what it made: fc1's input as
 * a sequence shard (2sbh/t), GeLU's input (8sbh/t) and fc2's input
 * (8sbh/t); the norm's input is the module's own input, which the
 * checkpoint keeps, and the dropout mask after fc2 is outside it. 16sbh/t
 * stay. */
static void recomputing_the_mlp_keeps_16sbh_over_t(void)
{
    ap_graph *g = gpt3();
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(
                   g, 4, "tp=4,mbs=1,gbs=1,sp=1,recompute=selective,"
                         "recompute_modules=core_attn+mlp", NULL, &p), "plan");
    const ap_block_point *layer = ap_test_layer(&p);
    CHECK_NEAR(layer->act_bytes, 34 * sbh() / 4 + lse(4), 1e-9);
    CHECK_NEAR(layer->rc_freed, 18 * sbh() / 4 + lse(4), 1e-9);
    CHECK_NEAR(p.stages[0].act_bytes,
               96 * (16 * sbh() / 4) + p.stages[0].blocks[0].points[0].act_bytes +
                   p.stages[0].blocks[1].points[0].act_bytes, 1e-6);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* On one GPU the recomputed forward is the MLP's ops again, norm included,
 * nothing else: each layer's backward grows by exactly that, and the
 * hardware FLOPs by their FLOPs. */
static void the_backward_redoes_the_module_forward(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 1024);
    ap_cluster c;
    ap_plan none, mlp;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 1, "mbs=1,gbs=1,recompute=none", &c, &none),
               "none");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 1, "mbs=1,gbs=1,recompute=selective,"
                                              "recompute_modules=mlp", NULL, &mlp), "mlp");
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &mlp, 0);
    const ap_block *b = &mlp.stages[0].blocks[2];
    double fwd = 0, flops = 0;
    int n = 0;
    for (int i = 0; i < b->nops; i++) {
        if (!(g->ops[b->ops[i]].modules & AP_MODULE_MLP))
            continue;
        ap_op_cost oc;
        ap_price_op(&x, b->ops[i], &ap_test_layer(&mlp)->strat[i], &oc);
        fwd += oc.fwd + oc.fwd_comm;
        flops += oc.flops;
        n++;
    }
    CHECK(n == 6); /* ln2, gate, up, silu, mul, down */
    CHECK(fwd > 0 && fwd < ap_test_layer(&mlp)->fwd);
    CHECK_NEAR(ap_test_layer(&mlp)->rc_fwd, fwd, 1e-12);
    CHECK_NEAR(mlp.stages[0].bwd - none.stages[0].bwd, 32 * fwd, 1e-9);
    CHECK_NEAR(mlp.stages[0].recompute_flops, 32 * flops, 1e-6);
    /* Without core_attn among the modules, attention is not redone. */
    CHECK(mlp.stages[0].recompute_flops < 32 * (flops + ap_test_layer(&mlp)->attn_flops));
    ap_plan_free(&none);
    ap_plan_free(&mlp);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Mixtral 8x7B (hidden 4096, experts of FFN 14336, top 2) at 512 tokens
 * on one GPU. moe_act drops only the activation's output that fc2 reads,
 * 2 bytes for each of the tokens' k routed copies and FFN elements;
 * layernorm the norm's output the router saves, 2sbh; moe everything the
 * MoE layer made, leaving what the attention half saves and the MoE
 * layer's input. */
static ap_plan mixtral_plan(const ap_graph *g, ap_cluster *c, const char *mods)
{
    char spec[160];
    ap_plan p;
    snprintf(spec, sizeof spec, "mbs=1,gbs=1,recompute=selective,recompute_modules=%s",
             mods);
    if (ap_test_megatron_plan_ok(g, 1, spec, c, &p))
        memset(&p, 0, sizeof p);
    return p;
}

static void moe_modules_drop_what_they_make(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 512);
    REQUIRE(g != NULL);
    ap_cluster c;
    ap_plan act = mixtral_plan(g, &c, "moe_act");
    ap_plan norm = mixtral_plan(g, NULL, "layernorm");
    ap_plan moe = mixtral_plan(g, NULL, "moe");
    REQUIRE(act.nstages && norm.nstages && moe.nstages);
    CHECK_NEAR(ap_test_layer(&act)->rc_freed, 2.0 * 512 * 2 * 14336, 1e-9);
    CHECK_NEAR(ap_test_layer(&norm)->rc_freed, 2.0 * 512 * 4096, 1e-9);
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &moe, 0);
    const ap_block *b = &moe.stages[0].blocks[2];
    double outside = 0;
    for (int i = 0; i < b->nops; i++) {
        if (g->ops[b->ops[i]].modules & AP_MODULE_MOE)
            continue;
        ap_op_cost oc;
        ap_price_op(&x, b->ops[i], &ap_test_layer(&moe)->strat[i], &oc);
        outside += oc.act_bytes;
    }
    /* The router still saves the MoE layer's input, the norm's output,
     * as the checkpoint keeps it. */
    const ap_block_point *m = ap_test_layer(&moe);
    CHECK_NEAR(m->act_bytes - m->rc_freed, outside + 2.0 * 512 * 4096, 1e-9);
    CHECK(m->rc_freed > ap_test_layer(&act)->rc_freed);
    ap_plan_free(&act);
    ap_plan_free(&norm);
    ap_plan_free(&moe);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Recomputing the whole MoE layer redoes its dispatch and combine
 * all-to-alls: on two GPUs with ep = 2 the backward's expert
 * communication grows by the forward's. */
static void recomputing_moe_repeats_its_all_to_alls(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 512);
    ap_plan plain, moe;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 2, "ep=2,mbs=1,gbs=2,recompute=selective", NULL,
                                        &plain), "plain");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 2, "ep=2,mbs=1,gbs=2,recompute=selective,"
                                              "recompute_modules=core_attn+moe", NULL, &moe),
               "moe");
    const ap_block_point *bp = ap_test_layer(&moe);
    CHECK(bp->kfwd.expert > 0);
    CHECK_NEAR(bp->rc_kinds.expert, bp->kfwd.expert, 1e-12);
    CHECK_NEAR(moe.stages[0].kinds.expert - plain.stages[0].kinds.expert,
               32 * bp->kfwd.expert, 1e-9);
    ap_plan_free(&plain);
    ap_plan_free(&moe);
    ap_graph_free(g);
}

/* DeepSeek-V3's mla_up_proj (q_lora 1536, kv_lora 512, 128 heads of 192
 * for queries and keys and of 128 for values) drops, per token, the
 * normed latents its up projections read (1536 + 512) and the queries,
 * keys and values the attention reads (128 * 192 * 2 + 128 * 128), 2
 * bytes each: the attention's inputs are freed for it too. */
static void mla_up_proj_frees_the_attention_inputs(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 256);
    REQUIRE(g != NULL);
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 1, "mbs=1,gbs=1,recompute=selective,"
                                              "recompute_modules=mla_up_proj", NULL, &p),
               "mla_up_proj");
    double per_token = 2.0 * (1536 + 512 + 128 * 192 * 2 + 128 * 128);
    CHECK_NEAR(ap_test_layer(&p)->rc_freed, 256 * per_token, 1e-9);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* The planner may let a stage recompute the modules it is given: on 16
 * H100s, Mixtral 8x7B's fastest plan that fits recomputes its experts'
 * activation and its MoE norm on the first stage and is faster than the
 * best plan with none or full recomputation alone. (A plan whose stages
 * recompute no modules does not keep them: tests/cli/recompute_modules.sh.) */
static void the_planner_chooses_modules_per_stage(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 0);
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 16, 8, &c, err), err);
    ap_plan_opts o = ap_test_search_opts(16, 512);
    o.gpus_per_node = 8;
    o.max_stages = 2;
    ap_plan plain, mods;
    REQUIRE_OK(ap_plan_search(g, &c, &o, &plain, err), err);
    o.run.recompute_modules = AP_MODULE_MOE_ACT | AP_MODULE_LAYERNORM;
    REQUIRE_OK(ap_plan_search(g, &c, &o, &mods, err), err);
    int selective = 0;
    for (int i = 0; i < mods.nstages; i++)
        selective += mods.stages[i].recompute == AP_RECOMPUTE_SELECTIVE;
    CHECK(selective > 0);
    CHECK(mods.run.recompute_modules == o.run.recompute_modules);
    CHECK(mods.step_time < plain.step_time);
    CHECK(mods.max_mem_bytes <= mods.hbm_limit);
    for (int i = 0; i < plain.nstages; i++)
        CHECK(plain.stages[i].recompute != AP_RECOMPUTE_SELECTIVE);
    ap_plan_free(&plain);
    ap_plan_free(&mods);
    o.run.recompute_modules = AP_MODULE_MLA_UP_PROJ;
    CHECK(ap_plan_search(g, &c, &o, &mods, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "mla_up_proj needs multi-latent attention");
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* --recompute-modules auto tries the sets the model has: Llama's dense
 * MLPs; Mixtral's experts' activation and MoE norms; DeepSeek-V3's dense
 * MLPs, MoE pieces, MLA up projections and all three together, less the
 * MoE pieces under delayed FP8 scaling, which refuses them. */
static void auto_tries_the_sets_the_model_has(void)
{
    const char *models[] = {"examples/hf/llama-3-8b.json", "examples/hf/mixtral-8x7b.json",
                            "examples/hf/deepseek-v3.json"};
    const unsigned moe = AP_MODULE_MOE_ACT | AP_MODULE_LAYERNORM;
    ap_run_settings r;
    memset(&r, 0, sizeof r);
    unsigned sets[AP_AUTO_MODULE_SETS];
    for (int i = 0; i < 3; i++) {
        ap_graph *g = ap_test_model(models[i], 256);
        REQUIRE(g != NULL);
        r.fp8 = 0;
        int n = ap_auto_module_sets(g, &r, sets);
        if (i == 0)
            CHECK(n == 1 && sets[0] == AP_MODULE_MLP);
        if (i == 1)
            CHECK(n == 1 && sets[0] == moe);
        if (i == 2)
            CHECK(n == 4 && sets[0] == AP_MODULE_MLP && sets[1] == moe &&
                  sets[2] == AP_MODULE_MLA_UP_PROJ &&
                  sets[3] == (AP_MODULE_MLP | moe | AP_MODULE_MLA_UP_PROJ));
        r.fp8 = 1;
        n = ap_auto_module_sets(g, &r, sets);
        if (i == 2)
            CHECK(n == 3 && sets[1] == AP_MODULE_MLA_UP_PROJ);
        if (i == 1)
            CHECK(n == 0);
        ap_graph_free(g);
    }
}

/* Megatron-Core's refusals that depend on the model or the run. */
static void refusals_name_the_rule(void)
{
    ap_graph *g[2] = {ap_test_model("examples/hf/llama-3-8b.json", 256),
                      ap_test_model("examples/hf/mixtral-8x7b.json", 256)};
    const struct {
        int model, gpus;
        const char *spec, *want;
    } cases[] = {
        {0, 1, "mbs=1,gbs=1,recompute=selective,recompute_modules=mla_up_proj",
         "mla_up_proj needs multi-latent attention"},
        {0, 1, "mbs=1,gbs=1,recompute=selective,fp8=1,recompute_modules=layernorm",
         "other than delayed scaling"},
        {0, 1, "mbs=1,gbs=1,recompute=full,recompute_modules=mlp",
         "applies to recompute=selective only"},
        {0, 1, "mbs=1,gbs=1,recompute=selective,recompute_modules=mlp+attn",
         "unknown module \"attn\""},
        {1, 16, "pp=2,vpp=2,ep=8,mbs=1,gbs=16,recompute=selective,moe_a2a_overlap=1,"
                "recompute_modules=moe",
         "moe cannot run with the expert all-to-all overlap"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ap_plan p;
        char err[AP_ERR_LEN] = "";
        CHECK(ap_test_megatron_plan(g[cases[i].model], cases[i].gpus, cases[i].spec, NULL,
                                    &p, err) == AP_EINPUT);
        CHECK_STR_HAS(err, cases[i].want);
    }
    /* Under tensorwise scaling Transformer Engine keeps no FP8 copy of a
     * discarded output, so Megatron-Core allows layernorm. */
    ap_plan p;
    CHECK(ap_test_megatron_plan_ok(g[1], 1, "mbs=1,gbs=1,recompute=selective,fp8=1,"
                                            "fp8_recipe=tensorwise,recompute_modules=layernorm",
                                   NULL, &p) == AP_OK);
    ap_plan_free(&p);
    ap_graph_free(g[0]);
    ap_graph_free(g[1]);
}

int main(void)
{
    RUN(the_builder_places_ops_in_megatron_modules);
    RUN(the_listed_names_are_the_modules);
    RUN(the_project_format_keeps_the_modules);
    RUN(recomputing_the_mlp_keeps_16sbh_over_t);
    RUN(the_backward_redoes_the_module_forward);
    RUN(moe_modules_drop_what_they_make);
    RUN(recomputing_moe_repeats_its_all_to_alls);
    RUN(mla_up_proj_frees_the_attention_inputs);
    RUN(the_planner_chooses_modules_per_stage);
    RUN(auto_tries_the_sets_the_model_has);
    RUN(refusals_name_the_rule);
    return DONE();
}
