/* test_router.c -- how a MoE router scores and weighs its experts (ap_op's
 * route_*): each Hugging Face family's router as transformers' modeling
 * files run it, the model format's "score", "normalize", "expert_bias" and
 * "scale" written and read back, plan.json's model_shape, the Megatron-LM
 * export's router flags (Megatron-Core's topk_routing_with_score_function),
 * those flags read back into the same router, and what no flag states
 * (docs/model-format.md, docs/hf-models.md "Routers", docs/exports.md). */
#include "model.h"

/* The router of layer `layer`; NULL, with a failed check, where none. */
static const ap_op *router(const ap_graph *g, int layer)
{
    char name[32];
    snprintf(name, sizeof name, "l%d.router", layer);
    const ap_op *op = g ? ap_test_op(g, name) : NULL;
    CHECK(op != NULL);
    return op;
}

/* Whether op scores with `score`, renormalises where `norm`, adds an
 * expert bias where `bias` and scales by `scale`. */
static int routes(const ap_op *op, ap_route_score score, int norm, int bias, double scale)
{
    return op && op->route_score == score && op->route_norm == norm && op->route_bias == bias &&
           op->route_scale == scale;
}

/* Whether the example model at `path` routes layer `layer` as routes()
 * says. */
static int example_routes(const char *path, int layer, ap_route_score score, int norm,
                          int bias, double scale)
{
    ap_graph *g = ap_test_model(path, 0);
    CHECK(g != NULL);
    int ok = g && routes(router(g, layer), score, norm, bias, scale);
    ap_graph_free(g);
    return ok;
}

/* A small DeepSeek-V3 (MLA, 8 experts, top 2, one shared expert), its
 * router fields given as `router` (JSON members, leading comma). */
static ap_graph *small_deepseek(const char *router, char *err)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"deepseek_v3\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"moe_intermediate_size\":64,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":2,\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
             "\"n_shared_experts\":1,\"first_k_dense_replace\":0,\"kv_lora_rank\":64,"
             "\"q_lora_rank\":null,\"qk_nope_head_dim\":32,\"qk_rope_head_dim\":16,"
             "\"v_head_dim\":32,\"vocab_size\":1000,\"max_position_embeddings\":512%s}",
             router);
    return ap_test_hf_seq(cfg, 0, err);
}

/* A small Qwen2-MoE (8 experts, top 2, a gated shared expert), its
 * norm_topk_prob given as `norm` ("" for the config class's default). */
static ap_graph *small_qwen2_moe(const char *norm, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"qwen2_moe\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"moe_intermediate_size\":64,\"shared_expert_intermediate_size\":128,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"num_hidden_layers\":2,"
             "\"num_experts\":8,\"num_experts_per_tok\":2,\"vocab_size\":1000,"
             "\"max_position_embeddings\":512%s}", norm);
    return ap_test_hf_seq(cfg, 0, err);
}

/* DeepSeek-V3 (DeepseekV3TopkRouter): sigmoid scores, the correction bias
 * added to pick, the top 8 renormalised (norm_topk_prob) and scaled by
 * routed_scaling_factor 2.5; the dense first layers have no router. Kimi
 * K2 is the same router at 2.827. */
static void deepseek_v3_routes_by_sigmoid_with_an_expert_bias_renormalised_and_scaled_2_5(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/deepseek-v3.json did not load");
    CHECK(ap_test_op(g, "l0.router") == NULL);
    CHECK(routes(router(g, 3), AP_ROUTE_SIGMOID, 1, 1, 2.5));
    CHECK(routes(router(g, 60), AP_ROUTE_SIGMOID, 1, 1, 2.5));
    /* The attributes are the router's: dispatch and combine keep defaults. */
    const ap_op *d = ap_test_op(g, "l3.dispatch");
    CHECK(d && d->route_score == AP_ROUTE_SOFTMAX && !d->route_bias);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.route_sigmoid && !s.route_unnormalized && s.route_bias && s.route_scale == 2.5);
    ap_graph_free(g);
    CHECK(example_routes("examples/hf/kimi-k2.json", 1, AP_ROUTE_SIGMOID, 1, 1, 2.827));
    /* DeepseekV3Config's defaults: norm_topk_prob true, 2.5. */
    char err[AP_ERR_LEN];
    g = small_deepseek("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(routes(router(g, 0), AP_ROUTE_SIGMOID, 1, 1, 2.5));
    ap_graph_free(g);
}

/* DeepSeek-V2 (DeepseekV2Moe): a softmax over all experts, its top k times
 * routed_scaling_factor and never renormalised, whatever norm_topk_prob
 * says; V2-Lite's factor is 1. */
static void deepseek_v2_weighs_its_softmax_over_all_experts_scaled(void)
{
    CHECK(example_routes("examples/hf/deepseek-v2-lite.json", 1, AP_ROUTE_SOFTMAX, 0, 0, 1));
    char err[AP_ERR_LEN], cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"deepseek_v2\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"moe_intermediate_size\":64,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":2,\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
             "\"n_shared_experts\":2,\"kv_lora_rank\":64,\"q_lora_rank\":null,"
             "\"qk_nope_head_dim\":32,\"qk_rope_head_dim\":16,\"v_head_dim\":32,"
             "\"vocab_size\":1000,\"max_position_embeddings\":512,\"topk_method\":\"greedy\","
             "\"norm_topk_prob\":true,\"routed_scaling_factor\":16.0}");
    ap_graph *g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(routes(router(g, 0), AP_ROUTE_SOFTMAX, 0, 0, 16));
    ap_graph_free(g);
}

/* Qwen2-MoE, Qwen3-MoE and OLMoE: a softmax over all experts, its top k
 * renormalised only under norm_topk_prob, false in each config class. */
static void qwen2_moe_weighs_its_top_k_softmax_over_all_experts_as_it_is(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_qwen2_moe("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(routes(router(g, 0), AP_ROUTE_SOFTMAX, 0, 0, 1));
    ap_graph_free(g);
    g = small_qwen2_moe(",\"norm_topk_prob\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(routes(router(g, 1), AP_ROUTE_SOFTMAX, 1, 0, 1));
    ap_graph_free(g);
    CHECK(example_routes("examples/hf/qwen3-30b-a3b.json", 0, AP_ROUTE_SOFTMAX, 1, 0, 1));
    CHECK(example_routes("examples/hf/olmoe-1b-7b.json", 0, AP_ROUTE_SOFTMAX, 0, 0, 1));
}

/* Mixtral's softmax over all experts renormalised over its top 2 is a
 * softmax over the top-2 logits, Megatron-Core's default; GPT-OSS runs
 * that softmax itself. */
static void mixtral_and_gpt_oss_route_as_megatron_cores_default(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/mixtral-8x7b.json did not load");
    CHECK(routes(router(g, 0), AP_ROUTE_SOFTMAX, 1, 0, 1));
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(!s.route_sigmoid && !s.route_unnormalized && !s.route_bias && s.route_scale == 1);
    ap_graph_free(g);
    CHECK(example_routes("examples/hf/gpt-oss-20b.json", 0, AP_ROUTE_SOFTMAX, 1, 0, 1));
}

/* Llama 4 (Llama4Router, Llama4TextMoe): a sigmoid of its top-1 logit,
 * the weight as it is, multiplying the tokens routed in (routed_in *
 * router_scores) rather than the expert's output; no other family does. */
static void llama_4_weighs_its_one_experts_input_by_a_sigmoid_as_it_is(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    const ap_op *r = router(g, 0);
    CHECK(r && r->top_k == 1);
    CHECK(routes(r, AP_ROUTE_SIGMOID, 0, 0, 1));
    CHECK(r && r->route_on_input == 1);
    ap_graph_free(g);
    g = ap_test_model("examples/hf/mixtral-8x7b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/mixtral-8x7b.json did not load");
    r = router(g, 0);
    CHECK(r && r->route_on_input == 0);
    ap_graph_free(g);
}

/* GLM-4.5-Air (Glm4MoeMoE): DeepSeek-V3's router at Glm4MoeConfig's
 * routed_scaling_factor, 1.0. */
static void glm_4_5_air_routes_by_sigmoid_with_an_expert_bias_unscaled(void)
{
    ap_graph *g = ap_test_model("examples/hf/glm-4.5-air.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/glm-4.5-air.json did not load");
    CHECK(ap_test_op(g, "l0.router") == NULL);
    CHECK(routes(router(g, 1), AP_ROUTE_SIGMOID, 1, 1, 1));
    ap_graph_free(g);
}

/* The model format writes what is not the default and reads it back: the
 * same router, the same layer classes, the same text written again. */
static void the_model_format_keeps_the_router(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_deepseek(",\"routed_scaling_factor\":2.827", err), *back = NULL;
    REQUIRE_OK(g ? 0 : 1, err);
    char *json = ap_graph_to_json(g);
    CHECK_STR_HAS(json, "\"score\":\t\"sigmoid\"");
    CHECK_STR_HAS(json, "\"expert_bias\":\ttrue");
    CHECK_STR_HAS(json, "\"scale\":\t2.827");
    CHECK(!strstr(json, "\"normalize\""));
    REQUIRE_OK(ap_graph_parse_json(json, strlen(json), "round.json", &back, err), err);
    CHECK(routes(router(back, 1), AP_ROUTE_SIGMOID, 1, 1, 2.827));
    CHECK(back->layer_class[1] == g->layer_class[1]);
    char *again = ap_graph_to_json(back);
    CHECK(again && !strcmp(again, json));
    free(again);
    free(json);
    ap_graph_free(back);
    ap_graph_free(g);
    /* A softmax not renormalised writes "normalize": false alone. */
    g = small_qwen2_moe("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    json = ap_graph_to_json(g);
    CHECK_STR_HAS(json, "\"normalize\":\tfalse");
    CHECK(!strstr(json, "\"score\"") && !strstr(json, "\"scale\""));
    back = NULL;
    REQUIRE_OK(ap_graph_parse_json(json, strlen(json), "round.json", &back, err), err);
    CHECK(routes(router(back, 0), AP_ROUTE_SOFTMAX, 0, 0, 1));
    free(json);
    ap_graph_free(back);
    ap_graph_free(g);
}

/* Two layers whose routers differ only in their scoring are layer classes
 * of their own. */
static void routers_that_weigh_differently_are_different_layer_classes(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_deepseek("", err), *back = NULL;
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->layer_class[1] == 0);
    char *json = ap_graph_to_json(g);
    /* The second router's scale changed in the text. */
    char *second = strstr(json, "\"l1.router\"");
    char *scale = second ? strstr(second, "\"scale\":\t2.5") : NULL;
    REQUIRE_OK(scale ? 0 : 1, "no scale on l1.router");
    memcpy(scale + strlen("\"scale\":\t"), "3.5", 3);
    REQUIRE_OK(ap_graph_parse_json(json, strlen(json), "two.json", &back, err), err);
    CHECK(back->layer_class[1] == 1);
    free(json);
    ap_graph_free(back);
    ap_graph_free(g);
}

/* plan.json's model_shape says the router where it is not the default. */
static void plan_json_states_the_router_where_it_is_not_the_default(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_deepseek("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8", NULL, &p, err), err);
    char *json = ap_plan_to_json(g, &p);
    CHECK_STR_HAS(json, "\"router_score\":\t\"sigmoid\"");
    CHECK_STR_HAS(json, "\"router_expert_bias\":\ttrue");
    CHECK_STR_HAS(json, "\"router_scale\":\t2.5");
    CHECK(!strstr(json, "\"router_normalize\""));
    free(json);
    ap_plan_free(&p);
    ap_graph_free(g);
    g = ap_test_model("examples/hf/mixtral-8x7b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/mixtral-8x7b.json did not load");
    REQUIRE_OK(ap_test_megatron_plan(g, 64, "tp=2,pp=4,ep=8,sp=1,mbs=1,gbs=256", NULL, &p, err),
               err);
    json = ap_plan_to_json(g, &p);
    CHECK(json && !strstr(json, "\"router_"));
    free(json);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* The Megatron-LM export of plan spec of g on gpus H100s into *text
 * (NULL with a failed check where it does not export), d filled. */
static char *megatron_export(const ap_graph *g, int gpus, const char *spec, ap_plan_desc *d)
{
    char err[AP_ERR_LEN];
    char *text = NULL;
    if (ap_test_megatron_desc(g, gpus, spec, d, NULL)) {
        CHECK(!"the plan did not price");
        return NULL;
    }
    if (ap_export(g, d, AP_LAUNCHER_MEGATRON, &text, err)) {
        fprintf(stderr, "%s\n", err);
        CHECK(!"the Megatron-LM export was refused");
        return NULL;
    }
    return text;
}

/* DeepSeek-V3's export states its router: sigmoid scores, the expert
 * bias and the factor 2.5, after the group-limited routing. */
static void deepseek_v3_exports_sigmoid_expert_bias_and_its_scaling_factor(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/deepseek-v3.json did not load");
    ap_plan_desc d;
    char *text = megatron_export(g, 256, "tp=1,pp=8,ep=32,mbs=1,gbs=256,first=5,last=8", &d);
    CHECK_STR_HAS(text, "  --moe-router-group-topk 4\n"
                        "  --moe-router-score-function sigmoid\n"
                        "  --moe-router-enable-expert-bias\n"
                        "  --moe-router-topk-scaling-factor 2.5\n");
    CHECK(text && !strstr(text, "--moe-router-pre-softmax"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* A Qwen2-MoE without norm_topk_prob weighs its top k of a softmax over
 * all experts as they are: --moe-router-pre-softmax; with it, Megatron-
 * Core's default, no router flag. */
static void qwen2_moe_exports_pre_softmax_unless_it_renormalises(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_qwen2_moe("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    char *text = megatron_export(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8", &d);
    CHECK_STR_HAS(text, "  --moe-router-pre-softmax\n");
    CHECK(text && !strstr(text, "--moe-router-score-function") &&
          !strstr(text, "--moe-router-enable-expert-bias") &&
          !strstr(text, "--moe-router-topk-scaling-factor"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
    g = small_qwen2_moe(",\"norm_topk_prob\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    text = megatron_export(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8", &d);
    CHECK(text && !strstr(text, "--moe-router-pre-softmax") &&
          !strstr(text, "--moe-router-score-function"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Llama 4's sigmoid at top-1 is Megatron-Core's sigmoid router, which
 * renormalises nothing at top-k 1, with the weight on the expert's input
 * (--moe-apply-probs-on-input). */
static void llama_4_exports_a_sigmoid_router(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(
        "{\"model_type\":\"llama4_text\",\"hidden_size\":256,\"intermediate_size\":128,"
        "\"intermediate_size_mlp\":512,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":64,\"num_hidden_layers\":4,\"num_local_experts\":8,"
        "\"num_experts_per_tok\":1,\"vocab_size\":1000,\"max_position_embeddings\":4096}",
        1024, err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    char *text = megatron_export(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8", &d);
    CHECK_STR_HAS(text, "  --moe-router-topk 1\n");
    CHECK_STR_HAS(text, "  --moe-router-score-function sigmoid\n");
    CHECK_STR_HAS(text, "  --moe-apply-probs-on-input\n");
    CHECK(text && !strstr(text, "--moe-router-pre-softmax"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* The exported flags read back build the same router: alone (a script
 * without MODEL) as the model's, and checked against the model they price
 * the plan's step; a line that drops the expert bias states another router
 * and is refused. */
static void an_exported_command_line_reads_back_into_the_same_router(void)
{
    const char *names[] = {"deepseek", "qwen2_moe"};
    for (int k = 0; k < 2; k++) {
        char err[AP_ERR_LEN], args[8192];
        ap_graph *g = k ? small_qwen2_moe("", err)
                        : small_deepseek(",\"routed_scaling_factor\":2.827", err);
        REQUIRE_OK(g ? 0 : 1, err);
        ap_plan_desc d;
        char *text = megatron_export(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8", &d);
        ap_test_megatron_args_of(text ? text : "", args, sizeof args);
        ap_graph *alone = ap_test_flags_model(args, 1000, 512, err);
        if (!alone)
            fprintf(stderr, "%s: %s\n", names[k], err);
        CHECK(alone != NULL);
        const ap_op *want = router(g, 1), *got = router(alone, 1);
        CHECK(want && got &&
              routes(got, want->route_score, want->route_norm, want->route_bias,
                     want->route_scale));
        ap_plan p;
        CHECK(ap_test_megatron_plan(g, 8, args, NULL, &p, err) == AP_OK);
        CHECK_NEAR(p.step_time, d.step_time, 1e-12);
        ap_plan_free(&p);
        ap_graph_free(alone);
        free(text);
        ap_plan_desc_free(&d);
        if (k == 0) {
            /* The expert bias dropped: another router than the model's. */
            char *bias = strstr(args, " --moe-router-enable-expert-bias");
            REQUIRE_OK(bias ? 0 : 1, "no expert bias in the export");
            memmove(bias, bias + strlen(" --moe-router-enable-expert-bias"),
                    strlen(bias + strlen(" --moe-router-enable-expert-bias")) + 1);
            CHECK(ap_test_megatron_plan(g, 8, args, NULL, &p, err) == AP_EINPUT);
            CHECK_STR_HAS(err, "the router --moe-router-score-function sigmoid "
                               "--moe-router-topk-scaling-factor 2.827 (sigmoid, the top k "
                               "renormalised, scaled by 2.827), but");
            CHECK_STR_HAS(err, "routes with sigmoid, the top k renormalised, an expert bias, "
                               "scaled by 2.827");
            ap_plan_free(&p);
        }
        ap_graph_free(g);
    }
}

/* Megatron-Core raises at an expert bias without sigmoid scores, and has
 * no sqrtsoftplus router to build. */
static void megatron_args_refuse_a_router_megatron_core_does_not_run(void)
{
    char err[AP_ERR_LEN];
    ap_megatron m;
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--num-experts 8 --moe-grouped-gemm "
                                 "--moe-router-enable-expert-bias", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--moe-router-enable-expert-bias: needs --moe-router-score-function "
                       "sigmoid");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--num-experts 8 --moe-router-score-function sqrtsoftplus",
                                 &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "sqrt(softplus(x))");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--num-experts 8 --moe-router-topk-scaling-factor 0", &m,
                                 err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--moe-router-topk-scaling-factor: bad value \"0\"");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--num-experts 8 --moe-grouped-gemm --moe-router-topk 2 "
                                 "--moe-apply-probs-on-input", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--moe-apply-probs-on-input: needs --moe-router-topk 1");
}

/* What Megatron-LM's router cannot state is refused: a DeepSeek-V3 whose
 * sigmoid weights are not renormalised (norm_topk_prob false), which
 * Megatron-Core renormalises above top-k 1. torchtitan's flavor states it
 * (route_norm False), so its export goes through and says so. */
static void the_megatron_export_refuses_sigmoid_weights_left_as_scored(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_deepseek(",\"norm_topk_prob\":false", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(routes(router(g, 0), AP_ROUTE_SIGMOID, 0, 1, 2.5));
    ap_plan_desc d;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,zero=1", &d, NULL),
               "see above");
    char *text = NULL;
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK(text == NULL);
    CHECK_STR_HAS(err, "Megatron-LM renormalises the top-k weights of sigmoid scores to sum 1 "
                       "(--moe-router-score-function sigmoid); the model's router leaves them "
                       "as scored, which no Megatron-LM flag states");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "router score_func \"sigmoid\", route_norm False, route_scale 2.5, "
                        "score_before_experts False, with an expert bias "
                        "(load_balance_coeff set).");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Group-limited routing left out of a config is its config class's:
 * DeepseekV3Config picks from the 4 best of 8 groups, DeepseekV2Config's
 * gate is "greedy" over all experts whatever n_group says, unless
 * topk_method names the groups. */
static void group_routing_left_out_is_the_config_classs(void)
{
    char err[AP_ERR_LEN], cfg[1024];
    ap_graph *g = small_deepseek("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    const ap_op *r = router(g, 0);
    CHECK(r && r->groups == 8 && r->group_topk == 4);
    ap_graph_free(g);
    const char *v2 = "{\"model_type\":\"deepseek_v2\",\"hidden_size\":256,"
                     "\"intermediate_size\":512,\"moe_intermediate_size\":64,"
                     "\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                     "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"kv_lora_rank\":64,"
                     "\"q_lora_rank\":null,\"qk_nope_head_dim\":32,\"qk_rope_head_dim\":16,"
                     "\"v_head_dim\":32,\"vocab_size\":1000,\"max_position_embeddings\":512,"
                     "\"n_group\":4,\"topk_group\":2%s}";
    snprintf(cfg, sizeof cfg, v2, "");
    g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    r = router(g, 0);
    CHECK(r && r->groups == 0 && r->group_topk == 0);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, v2, ",\"topk_method\":\"group_limited_greedy\"");
    g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    r = router(g, 0);
    CHECK(r && r->groups == 4 && r->group_topk == 2);
    ap_graph_free(g);
}

/* Megatron-LM's router flags hold for every MoE layer, so a model whose
 * layers route differently (here layer 1 scales its weights by 3, layer 0
 * by 2.827) is refused rather than exported with the first layer's. */
static void layers_that_route_differently_are_refused_by_megatron(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_deepseek(",\"routed_scaling_factor\":2.827", err), *mixed = NULL;
    REQUIRE_OK(g ? 0 : 1, err);
    char *json = ap_graph_to_json(g);
    char *last = json ? strstr(strstr(json, "\"scale\":\t2.827") + 1, "\"scale\":\t2.827") : NULL;
    CHECK(last != NULL);
    if (last)
        memcpy(last, "\"scale\":\t3.000", 14);
    REQUIRE_OK(ap_graph_parse_json(json, strlen(json), "mixed.json", &mixed, err), err);
    ap_plan_desc d;
    REQUIRE_OK(ap_test_megatron_desc(mixed, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8", &d, NULL),
               "the plan did not price");
    char *text = NULL;
    CHECK(ap_export(mixed, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "the model's layers route differently");
    free(text);
    ap_plan_desc_free(&d);
    free(json);
    ap_graph_free(mixed);
    ap_graph_free(g);
}

int main(void)
{
    RUN(deepseek_v3_routes_by_sigmoid_with_an_expert_bias_renormalised_and_scaled_2_5);
    RUN(deepseek_v2_weighs_its_softmax_over_all_experts_scaled);
    RUN(qwen2_moe_weighs_its_top_k_softmax_over_all_experts_as_it_is);
    RUN(mixtral_and_gpt_oss_route_as_megatron_cores_default);
    RUN(llama_4_weighs_its_one_experts_input_by_a_sigmoid_as_it_is);
    RUN(glm_4_5_air_routes_by_sigmoid_with_an_expert_bias_unscaled);
    RUN(the_model_format_keeps_the_router);
    RUN(routers_that_weigh_differently_are_different_layer_classes);
    RUN(plan_json_states_the_router_where_it_is_not_the_default);
    RUN(deepseek_v3_exports_sigmoid_expert_bias_and_its_scaling_factor);
    RUN(qwen2_moe_exports_pre_softmax_unless_it_renormalises);
    RUN(llama_4_exports_a_sigmoid_router);
    RUN(an_exported_command_line_reads_back_into_the_same_router);
    RUN(megatron_args_refuse_a_router_megatron_core_does_not_run);
    RUN(the_megatron_export_refuses_sigmoid_weights_left_as_scored);
    RUN(group_routing_left_out_is_the_config_classs);
    RUN(layers_that_route_differently_are_refused_by_megatron);
    return DONE();
}
