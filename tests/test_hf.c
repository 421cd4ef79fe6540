/* test_hf.c -- graphs built from Hugging Face config.json files: parameter
 * counts against the published totals, FLOPs against 2N + attention,
 * activation memory against Korthikanti et al., the errors for malformed
 * configs, and the activations each family builds or refuses. */
#include "model.h"

#include <cjson/cJSON.h>
#include <dirent.h>

static ap_graph *from_text(const char *json, const ap_build_opts *o)
{
    char err[AP_ERR_LEN];
    ap_graph *g = NULL;
    if (ap_graph_from_hf(json, strlen(json), "inline.json", o, &g, err) != AP_OK) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return g;
}

static int64_t dim_size(const ap_graph *g, char l)
{
    const ap_dim *d = ap_graph_dim(g, l);
    return d ? d->size : -1;
}

static const ap_tensor *tensor_named(const ap_graph *g, const char *name)
{
    int t = ap_graph_find_tensor(g, name);
    return t >= 0 ? &g->tensors[t] : NULL;
}

/* The closed form for a Llama-style dense model: per layer the Q, K, V and
 * O projections, three MLP matrices and two RMSNorm weights; embedding and
 * head untied; one final norm. */
static double llama_params(double L, double h, double n, double g, double d,
                           double f, double v)
{
    return L * (2 * h * n * d + 2 * h * g * d + 3 * h * f + 2 * h) + 2 * v * h + h;
}

static void llama_3_8b_has_8_03b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, 8.03e9, 0.005);
    CHECK_NEAR(g->total_params, llama_params(32, 4096, 32, 8, 128, 14336, 128256), 1e-12);
    CHECK_NEAR(ap_graph_active_params(g), g->total_params, 1e-12);
    ap_graph_free(g);
}

static void llama_3_70b_has_70_6b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-70b.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, 70.6e9, 0.005);
    CHECK_NEAR(g->total_params, llama_params(80, 8192, 64, 8, 128, 28672, 128256), 1e-12);
    ap_graph_free(g);
}

static void llama_3_1_405b_has_405_9b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3.1-405b.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, 405.9e9, 0.005);
    ap_graph_free(g);
}

/* GPT-3 175B as a GPT-2 config: biases everywhere, LayerNorm with bias, a
 * learned position table, and the head tied to the token embedding. */
static void gpt3_counts_biases_positions_and_ties_the_head(void)
{
    double L = 96, h = 12288, v = 50257, p = 2048;
    ap_graph *g = ap_test_model("examples/hf/gpt3-175b.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, L * (12 * h * h + 13 * h) + v * h + p * h + 2 * h, 1e-12);
    CHECK_NEAR(g->total_params, 175e9, 0.005);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") < 0);
    CHECK_STR_HAS(g->tensors[g->ops[ap_graph_find_op(g, "lm_head")].inputs[1]].name, "wte");
    ap_graph_free(g);
}

static void mixtral_has_46_7b_total_and_12_9b_active(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, 46.7e9, 0.005);
    CHECK_NEAR(ap_graph_active_params(g), 12.9e9, 0.005);
    ap_graph_free(g);
}

/* DeepSeek publishes 671B total and "37B activated"; the weights README
 * breaks the activated count down as 36.6B including the 0.9B output head,
 * i.e. without the input embedding table (a lookup touches one row). */
static void deepseek_v3_has_671b_total_and_37b_active(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    double embed = 129280.0 * 7168;
    CHECK_NEAR(g->total_params, 671e9, 0.005);
    CHECK_NEAR(ap_graph_active_params(g) - embed, 36.6e9, 0.005);
    CHECK_NEAR(ap_graph_active_params(g), 37e9, 0.02);
    ap_graph_free(g);
}

/* Kimi K2 runs DeepSeek-V3's architecture under model_type "kimi_k2":
 * 61 layers, 384 experts of 2,048 and one shared expert, 64 heads. Moonshot
 * publishes 1T total and 32B activated; built, 1,026,408,209,408 in all,
 * and the same graph as the config under "deepseek_v3". */
static void kimi_k2_is_deepseek_v3_with_1t_total_and_32b_active(void)
{
    ap_graph *g = ap_test_model("examples/hf/kimi-k2.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(g->total_params == 1026408209408.0);
    CHECK_NEAR(ap_graph_active_params(g), 32e9, 0.05);
    char path[512], *text = NULL, err[AP_ERR_LEN];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/examples/hf/kimi-k2.json", ap_test_src());
    REQUIRE_OK(ap_read_file(path, &text, &len, err), err);
    char *at = strstr(text, "\"kimi_k2\"");
    CHECK(at != NULL);
    if (at) {
        char renamed[4096];
        snprintf(renamed, sizeof renamed, "%.*s\"deepseek_v3\"%s", (int)(at - text), text,
                 at + strlen("\"kimi_k2\""));
        ap_graph *v3 = ap_test_hf_text(renamed, "v3.json");
        CHECK(v3 && v3->total_params == g->total_params &&
              v3->total_flops == g->total_flops && v3->nops == g->nops);
        ap_graph_free(v3);
    }
    free(text);
    ap_graph_free(g);
}

/* DeepSeek-V2 is V3's architecture with a softmax gate: V2-Lite (27
 * layers, 64 experts of 1,408, top 6, no query compression) publishes
 * 15.7B total and 2.4B activated (2.45B built without the input
 * embedding), V2 (60 layers, 160 experts of 1,536) 236B and 21B (20.85B).
 * The gate limits each token to its best groups under topk_method
 * "group_limited_greedy" (V2's 3 of 8), not under "greedy" whatever
 * n_group says. */
static const char *deepseek_v2 =
    "{\"model_type\":\"deepseek_v2\",\"vocab_size\":102400,\"hidden_size\":5120,"
    "\"intermediate_size\":12288,\"moe_intermediate_size\":1536,\"num_hidden_layers\":60,"
    "\"num_attention_heads\":128,\"num_key_value_heads\":128,\"n_shared_experts\":2,"
    "\"n_routed_experts\":160,\"num_experts_per_tok\":6,\"first_k_dense_replace\":1,"
    "\"kv_lora_rank\":512,\"q_lora_rank\":1536,\"qk_nope_head_dim\":128,"
    "\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"max_position_embeddings\":163840,"
    "\"n_group\":8,\"topk_group\":3,\"topk_method\":\"%s\"}";

static void deepseek_v2_is_v3_with_its_own_gate(void)
{
    char json[1024], err[AP_ERR_LEN];
    ap_graph *lite = ap_test_hf_text(
        "{\"model_type\":\"deepseek_v2\",\"vocab_size\":102400,\"hidden_size\":2048,"
        "\"intermediate_size\":10944,\"moe_intermediate_size\":1408,\"num_hidden_layers\":27,"
        "\"num_attention_heads\":16,\"num_key_value_heads\":16,\"n_shared_experts\":2,"
        "\"n_routed_experts\":64,\"num_experts_per_tok\":6,\"first_k_dense_replace\":1,"
        "\"kv_lora_rank\":512,\"q_lora_rank\":null,\"qk_nope_head_dim\":128,"
        "\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"max_position_embeddings\":163840,"
        "\"n_group\":1,\"topk_group\":1,\"topk_method\":\"greedy\"}", "lite.json");
    CHECK(lite != NULL);
    if (lite) {
        CHECK(lite->total_params == 15706484224.0);
        CHECK_NEAR(ap_graph_active_params(lite) - 102400.0 * 2048, 2.4e9, 0.03);
        ap_graph_free(lite);
    }
    snprintf(json, sizeof json, deepseek_v2, "group_limited_greedy");
    ap_graph *g = ap_test_hf_text(json, "v2.json");
    CHECK(g != NULL);
    if (g) {
        CHECK(g->total_params == 235741434880.0);
        CHECK_NEAR(ap_graph_active_params(g) - 102400.0 * 5120, 21e9, 0.01);
        int r = ap_graph_find_op(g, "l1.router");
        CHECK(r >= 0 && g->ops[r].groups == 8 && g->ops[r].group_topk == 3);
        ap_graph_free(g);
    }
    snprintf(json, sizeof json, deepseek_v2, "greedy");
    g = ap_test_hf_text(json, "v2.json");
    CHECK(g != NULL);
    if (g) {
        int r = ap_graph_find_op(g, "l1.router");
        CHECK(r >= 0 && g->ops[r].groups == 0);
        ap_graph_free(g);
    }
    snprintf(json, sizeof json, deepseek_v2, "top2");
    ap_build_opts o;
    ap_build_opts_default(&o);
    CHECK(ap_graph_from_hf(json, strlen(json), "v2.json", &o, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "v2.json: \"topk_method\" is \"top2\"; \"greedy\", "
                       "\"group_limited_greedy\" and \"noaux_tc\" are built");
}

/* Vision-language wrappers build their text_config's language model:
 * Mistral Small 3.1 ("mistral3", a "mistral" text_config; 40 layers,
 * 23,572,403,200 parameters without its vision tower), Kimi K2.5
 * ("kimi_k25", a "kimi_k2" one) and Qwen3-VL dense and MoE ("qwen3_vl",
 * "qwen3_vl_moe", text_configs of their own types read as Qwen3's and
 * Qwen3-MoE's) give what the text_config gives alone as that family. */
static void vision_wrappers_build_their_language_model(void)
{
    const char *text[4] = {
        "{\"head_dim\":128,\"hidden_size\":5120,\"intermediate_size\":32768,"
        "\"max_position_embeddings\":131072,\"model_type\":\"mistral\","
        "\"num_attention_heads\":32,\"num_hidden_layers\":40,\"num_key_value_heads\":8,"
        "\"sliding_window\":null,\"vocab_size\":131072}",
        "{\"model_type\":\"kimi_k2\",\"vocab_size\":1000,\"hidden_size\":256,"
        "\"intermediate_size\":512,\"moe_intermediate_size\":64,\"num_hidden_layers\":3,"
        "\"num_attention_heads\":4,\"n_shared_experts\":1,\"n_routed_experts\":8,"
        "\"num_experts_per_tok\":2,\"first_k_dense_replace\":1,\"kv_lora_rank\":64,"
        "\"q_lora_rank\":96,\"qk_nope_head_dim\":32,\"qk_rope_head_dim\":16,"
        "\"v_head_dim\":32,\"max_position_embeddings\":512}",
        "{\"model_type\":\"qwen3_vl_text\",\"hidden_size\":256,\"intermediate_size\":512,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":64,"
        "\"num_hidden_layers\":2,\"vocab_size\":1000,\"max_position_embeddings\":512}",
        "{\"model_type\":\"qwen3_vl_moe_text\",\"hidden_size\":256,\"intermediate_size\":512,"
        "\"moe_intermediate_size\":64,\"num_experts\":8,\"num_experts_per_tok\":2,"
        "\"norm_topk_prob\":true,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":64,\"num_hidden_layers\":2,\"vocab_size\":1000,"
        "\"max_position_embeddings\":512}"};
    const char *wrapper[4] = {"mistral3", "kimi_k25", "qwen3_vl", "qwen3_vl_moe"};
    /* The text_configs alone, as the families the wrappers read them as. */
    const char *as[4] = {"mistral", "kimi_k2", "qwen3", "qwen3_moe"};
    for (int i = 0; i < 4; i++) {
        char json[2048];
        snprintf(json, sizeof json,
                 "{\"model_type\":\"%s\",\"vision_config\":{\"hidden_size\":1024},"
                 "\"text_config\":%s}", wrapper[i], text[i]);
        char own[2048];
        const char *type = strstr(text[i], "\"model_type\":\"") + 14;
        snprintf(own, sizeof own, "%.*s%s%s", (int)(type - text[i]), text[i], as[i],
                 strchr(type, '"'));
        ap_graph *alone = ap_test_hf_text(own, "text.json");
        ap_graph *g = ap_test_hf_text(json, "config.json");
        CHECK(alone && g);
        if (alone && g)
            CHECK(g->total_params == alone->total_params &&
                  g->total_flops == alone->total_flops && g->nops == alone->nops);
        if (g && i == 0)
            CHECK(g->total_params == 23572403200.0);
        ap_graph_free(alone);
        ap_graph_free(g);
    }
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = NULL;
    const char *bad = "{\"model_type\":\"mistral3\",\"text_config\":{\"model_type\":\"llama\"}}";
    CHECK(ap_graph_from_hf(bad, strlen(bad), "config.json", &o, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "config.json: \"text_config\".\"model_type\" must be \"mistral\"");
}

/* Qwen publishes 30.5B total and 3.3B activated (rounded to 0.1B). */
static void qwen3_30b_a3b_has_30_5b_total_and_3_3b_active(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, 30.5e9, 0.005);
    CHECK_NEAR(ap_graph_active_params(g), 3.3e9, 0.02);
    CHECK_NEAR(dim_size(g, 'c'), 4096 * 8 / 128, 0);
    ap_graph_free(g);
}

/* Qwen3-VL-235B-A22B's config as transformers 5.7.0 writes it: Qwen3MoeConfig
 * and Qwen3VLMoeTextConfig keep the experts under num_local_experts (their
 * attribute_map sends num_experts there), so that is the key it saves; and
 * it ties the head by the wrapper's tie_word_embeddings (false), writing
 * the text class's default (true) into text_config. The checkpoint holds
 * lm_head apart from the embedding: 235,670,022,896 numbers, of which the
 * language model is Qwen3-235B-A22B's 235,093,634,560 (22,190,763,520
 * active) and the vision tower the rest. */
static const char *qwen3_vl_235b_saved_by_5 =
    "{\"architectures\":[\"Qwen3VLMoeForConditionalGeneration\"],\"image_token_id\":151655,"
    "\"model_type\":\"qwen3_vl_moe\",\"text_config\":{\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"bos_token_id\":151643,\"decoder_sparse_step\":1,"
    "\"dtype\":\"bfloat16\",\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":12288,"
    "\"max_position_embeddings\":262144,\"mlp_only_layers\":[],"
    "\"model_type\":\"qwen3_vl_moe_text\",\"moe_intermediate_size\":1536,"
    "\"norm_topk_prob\":true,\"num_attention_heads\":64,\"num_experts_per_tok\":8,"
    "\"num_hidden_layers\":94,\"num_key_value_heads\":4,\"num_local_experts\":128,"
    "\"pad_token_id\":null,\"rms_norm_eps\":1e-06,\"rope_parameters\":{"
    "\"mrope_interleaved\":true,\"mrope_section\":[24,20,20],\"rope_theta\":5000000,"
    "\"rope_type\":\"default\"},\"router_aux_loss_coef\":0.001,\"sliding_window\":null,"
    "\"tie_word_embeddings\":true,\"use_cache\":true,\"vocab_size\":151936},"
    "\"tie_word_embeddings\":false,\"transformers_version\":\"5.7.0\","
    "\"video_token_id\":151656,\"vision_config\":{\"depth\":27,\"hidden_size\":1152,"
    "\"model_type\":\"qwen3_vl_moe_vision\",\"out_hidden_size\":4096}}";

static void configs_saved_by_transformers_5_read_as_it_builds_them(void)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = from_text(qwen3_vl_235b_saved_by_5, &o);
    REQUIRE_OK(g ? 0 : 1, "Qwen3-VL-235B-A22B's config did not load");
    CHECK(g->total_params == 235093634560.0);
    CHECK(ap_graph_active_params(g) == 22190763520.0);
    CHECK(dim_size(g, 'E') == 128 && tensor_named(g, "lm_head.w") != NULL);
    ap_graph_free(g);
    /* A Qwen3-MoE config of either age; one that gives both keys must
     * have them agree. */
    const char *base =
        "{\"model_type\":\"qwen3_moe\",\"num_hidden_layers\":2,\"hidden_size\":256,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":64,"
        "\"intermediate_size\":512,\"moe_intermediate_size\":64,\"num_experts_per_tok\":2,"
        "\"vocab_size\":1000,\"max_position_embeddings\":512,%s}";
    char cfg[1024], err[AP_ERR_LEN];
    snprintf(cfg, sizeof cfg, base, "\"num_local_experts\":8");
    g = from_text(cfg, &o);
    REQUIRE_OK(g ? 0 : 1, "the Qwen3-MoE config did not load");
    CHECK(dim_size(g, 'E') == 8);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, base, "\"num_experts\":8,\"num_local_experts\":16");
    g = NULL;
    CHECK(ap_graph_from_hf(cfg, strlen(cfg), "config.json", &o, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "config.json: \"num_experts\" (8) and \"num_local_experts\" (16) "
                       "disagree");
    /* A wrapper that leaves its own tie_word_embeddings out is read by
     * text_config's, as transformers 4 read every wrapper. */
    char vl[4096];
    const char *in = strstr(qwen3_vl_235b_saved_by_5, "\"tie_word_embeddings\":false,");
    snprintf(vl, sizeof vl, "%.*s%s", (int)(in - qwen3_vl_235b_saved_by_5),
             qwen3_vl_235b_saved_by_5, in + strlen("\"tie_word_embeddings\":false,"));
    g = from_text(vl, &o);
    REQUIRE_OK(g ? 0 : 1, "the wrapper without its own tie_word_embeddings did not load");
    CHECK(g->total_params == 235093634560.0 - 151936.0 * 4096);
    ap_graph_free(g);
}

/* GPT-NeoX's configs before transformers 5 (Pythia's, GPT-NeoX-20B's) give
 * the rotary base as rotary_emb_base, which GPTNeoXConfig reads into
 * rope_parameters' rope_theta; the exports state it. */
static void gpt_neox_reads_its_rotary_base_from_rotary_emb_base(void)
{
    const char *cfg =
        "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"intermediate_size\": 1024, \"vocab_size\": 1000,"
        " \"max_position_embeddings\": 128, \"rotary_pct\": 0.25,"
        " \"rotary_emb_base\": 1000000}";
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = from_text(cfg, &o);
    REQUIRE_OK(g ? 0 : 1, "the GPT-NeoX config did not load");
    CHECK(g->rope_base == 1000000.0);
    ap_graph_free(g);
}

/* MistralConfig's sliding window where a config leaves it out: 4,096 keys
 * on every layer, as HF builds it; null is none (Mistral Nemo's, Mistral
 * Small's). MixtralConfig has no window of its own. */
static void mistral_fills_in_its_config_classes_window(void)
{
    const char *base =
        "{\"model_type\":\"%s\",\"num_hidden_layers\":2,\"hidden_size\":512,"
        "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"intermediate_size\":1024,"
        "\"vocab_size\":1000,\"num_local_experts\":4,\"num_experts_per_tok\":2,"
        "\"max_position_embeddings\":32768%s}";
    char cfg[1024];
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 8192;
    snprintf(cfg, sizeof cfg, base, "mistral", "");
    ap_graph *g = from_text(cfg, &o);
    REQUIRE_OK(g ? 0 : 1, "the Mistral config did not load");
    CHECK(ap_test_op(g, "l0.attn")->window == 4096 && ap_test_op(g, "l1.attn")->window == 4096);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, base, "mistral", ",\"sliding_window\":null");
    g = from_text(cfg, &o);
    REQUIRE_OK(g ? 0 : 1, "the Mistral config with a null window did not load");
    CHECK(ap_test_op(g, "l1.attn")->window == 0);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, base, "mixtral", "");
    g = from_text(cfg, &o);
    REQUIRE_OK(g ? 0 : 1, "the Mixtral config did not load");
    CHECK(ap_test_op(g, "l1.attn")->window == 0);
    ap_graph_free(g);
}

/* Forward FLOPs per token: 2 per matmul parameter (the head included, the
 * embedding lookup not) plus attention's 2*s*n*(d+e) per layer. */
static void dense_forward_flops_are_2n_plus_attention(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    CHECK(g != NULL);
    if (g) {
        double L = 32, h = 4096, n = 32, kv = 8, d = 128, f = 14336, v = 128256;
        double s = (double)dim_size(g, 's');
        double mm = L * (2 * h * n * d + 2 * h * kv * d + 3 * h * f) + v * h;
        CHECK_NEAR(g->total_flops / s, 2 * mm + L * 2 * s * n * (d + d), 0.02);
        ap_graph_free(g);
    }
    g = ap_test_model("examples/hf/gpt3-175b.json", 0);
    CHECK(g != NULL);
    if (g) {
        double L = 96, h = 12288, v = 50257, s = 2048;
        double mm = L * 12 * h * h + v * h;
        CHECK_NEAR(g->total_flops / s, 2 * mm + L * 2 * s * h * 2, 0.02);
        ap_graph_free(g);
    }
}

static const char *gpt2_medium =
    "{\"model_type\": \"gpt2\", \"n_layer\": 4, \"n_embd\": 1024, \"n_head\": 16,"
    " \"vocab_size\": 50257, \"n_positions\": 1024}";

/* Korthikanti et al.: a GPT layer keeps sbh(34 + 5as/h) bytes for backward;
 * flash attention drops the 5as/h term. */
static void gpt_block_saves_34sbh_plus_5as2b(void)
{
    ap_build_opts o;
    double s = 1024, b = 2, h = 1024, a = 16;
    ap_build_opts_default(&o);
    o.batch = 2;
    o.dropout = 1;
    o.flash = 0;
    ap_graph *g = from_text(gpt2_medium, &o);
    CHECK(g != NULL);
    if (g) {
        CHECK_NEAR(ap_test_layer_saved(g, 0), s * b * h * (34 + 5 * a * s / h), 0.05);
        CHECK_NEAR(ap_test_layer_saved(g, 2), s * b * h * (34 + 5 * a * s / h), 0.05);
        ap_graph_free(g);
    }
    o.flash = 1;
    g = from_text(gpt2_medium, &o);
    CHECK(g != NULL);
    if (g) {
        CHECK_NEAR(ap_test_layer_saved(g, 1), 34 * s * b * h, 0.05);
        ap_graph_free(g);
    }
}

static void dropout_ops_follow_the_option(void)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = from_text(gpt2_medium, &o);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(ap_graph_find_op(g, "l0.attn_drop") < 0);
    CHECK(g->ops[ap_graph_find_op(g, "l0.attn")].dropout_p == 0);
    CHECK(g->ops[ap_graph_find_op(g, "l0.attn")].flash == 1);
    CHECK(g->ops[ap_graph_find_op(g, "l0.attn")].causal == 1);
    ap_graph_free(g);
    o.dropout = 1;
    g = from_text(gpt2_medium, &o);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(ap_graph_find_op(g, "l3.attn_drop") >= 0);
    CHECK(ap_graph_find_op(g, "l3.mlp_drop") >= 0);
    CHECK_NEAR(g->ops[ap_graph_find_op(g, "l3.attn")].dropout_p, 0.1, 1e-12);
    ap_graph_free(g);
}

/* Sequence: the option, else the config's context capped at 4096. */
static void sequence_defaults_to_context_capped_at_4096(void)
{
    ap_build_opts o;
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    CHECK(g != NULL);
    if (g) {
        CHECK(dim_size(g, 's') == 4096);
        CHECK(dim_size(g, 'b') == 1);
        ap_graph_free(g);
    }
    g = ap_test_model("examples/hf/gpt3-175b.json", 0);
    CHECK(g != NULL);
    if (g) {
        CHECK(dim_size(g, 's') == 2048);
        ap_graph_free(g);
    }
    ap_build_opts_default(&o);
    o.seq = 1000;
    o.batch = 3;
    g = ap_test_model_with("examples/hf/mixtral-8x7b.json", &o);
    CHECK(g != NULL);
    if (g) {
        CHECK(dim_size(g, 's') == 1000);
        CHECK(dim_size(g, 'b') == 3);
        CHECK(dim_size(g, 'c') == 750); /* ceil(3 * 1000 * 2 / 8) */
        ap_graph_free(g);
    }
}

/* Heads are labels the planner can split: q over n, k and v over g. */
static void grouped_query_attention_labels_kv_heads(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-70b.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(ap_graph_dim(g, 'n')->kind == AP_DIM_HEADS);
    CHECK(ap_graph_dim(g, 'g')->kind == AP_DIM_KV_HEADS);
    CHECK(dim_size(g, 'n') == 64 && dim_size(g, 'g') == 8 && dim_size(g, 'd') == 128);
    CHECK(strcmp(tensor_named(g, "l5.q.y")->shape, "bsnd") == 0);
    CHECK(strcmp(tensor_named(g, "l5.k.y")->shape, "bsgd") == 0);
    CHECK(strcmp(tensor_named(g, "l5.o.w")->shape, "ndh") == 0);
    CHECK(g->nlayers == 80);
    int same = 1;
    for (int l = 0; l < g->nlayers; l++)
        same &= g->layer_class[l] == 0;
    CHECK(same);
    ap_graph_free(g);
}

/* MLA: q and k have d = nope + rope = 192, v has e = 128; three dense
 * layers, then MoE layers that form a class of their own. */
static void deepseek_v3_uses_latent_attention_and_dense_first_layers(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(dim_size(g, 'd') == 192 && dim_size(g, 'e') == 128);
    CHECK(dim_size(g, 'g') == 128);
    CHECK(strcmp(tensor_named(g, "l0.v.y")->shape, "bsge") == 0);
    CHECK(strcmp(tensor_named(g, "l0.attn.y")->shape, "bsne") == 0);
    CHECK(ap_graph_find_op(g, "l2.router") < 0);
    CHECK(ap_graph_find_op(g, "l3.router") >= 0);
    CHECK(g->ops[ap_graph_find_op(g, "l3.router")].top_k == 8);
    CHECK(ap_graph_find_tensor(g, "l3.shared.down.w") >= 0);
    CHECK(g->layer_class[2] == 0);
    CHECK(g->layer_class[3] == 3 && g->layer_class[60] == 3);
    CHECK(ap_graph_dim(g, 'E')->kind == AP_DIM_EXPERTS);
    CHECK(ap_graph_dim(g, 'c')->kind == AP_DIM_CAPACITY);
    ap_graph_free(g);
}

/* Qwen2-MoE: decoder_sparse_step 2 makes layers 1, 3, 5 sparse;
 * mlp_only_layers turns layer 3 dense again; the shared expert has a [h]
 * gate; the router weights count whole among the active parameters. */
static void qwen2_moe_places_sparse_layers_and_gates_the_shared_expert(void)
{
    const char *cfg =
        "{\"model_type\": \"qwen2_moe\", \"num_hidden_layers\": 6, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 512,"
        " \"moe_intermediate_size\": 64, \"shared_expert_intermediate_size\": 128,"
        " \"num_experts\": 8, \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 2,"
        " \"mlp_only_layers\": [3], \"vocab_size\": 1000, \"max_position_embeddings\": 128}";
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = from_text(cfg, &o);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(ap_graph_find_op(g, "l0.router") < 0);
    CHECK(ap_graph_find_op(g, "l1.router") >= 0);
    CHECK(ap_graph_find_op(g, "l2.router") < 0);
    CHECK(ap_graph_find_op(g, "l3.router") < 0);
    CHECK(ap_graph_find_op(g, "l5.router") >= 0);
    CHECK(strcmp(tensor_named(g, "l1.shared_gate.w")->shape, "h") == 0);
    double h = 256, attn = h * 256 + 2 * h * 128 + 256 + 2 * 128 + 256 * h;
    double dense = 3 * h * 512, moe = h * 8 + 8 * 3 * h * 64 + 3 * h * 128 + h;
    double expect = 6 * (attn + 2 * h) + 4 * dense + 2 * moe + 2 * 1000 * h + h;
    CHECK_NEAR(g->total_params, expect, 1e-12);
    CHECK_NEAR(ap_graph_active_params(g), expect - 2 * 8 * 3 * h * 64 * (1 - 2.0 / 8), 1e-12);
    ap_graph_free(g);
}

/* GPT-NeoX's parallel residual: both sublayers read the block input. */
static void gpt_neox_parallel_residual_feeds_both_norms_from_the_input(void)
{
    const char *cfg =
        "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"intermediate_size\": 1024, \"vocab_size\": 1000,"
        " \"max_position_embeddings\": 128, \"rotary_pct\": 0.25}";
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = from_text(cfg, &o);
    CHECK(g != NULL);
    if (!g)
        return;
    const ap_op *ln1 = &g->ops[ap_graph_find_op(g, "l1.ln1")];
    const ap_op *ln2 = &g->ops[ap_graph_find_op(g, "l1.ln2")];
    CHECK(ln1->inputs[0] == ln2->inputs[0]);
    CHECK(ln2->sub == AP_NORM_LAYER);
    double h = 256, f = 1024;
    CHECK_NEAR(g->total_params,
               2 * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h) + 2 * 1000 * h + 2 * h,
               1e-12);
    ap_graph_free(g);
}

/* Qwen3 normalises q and k per head: a [d] RMSNorm weight each. */
static void qwen3_adds_per_head_qk_norms(void)
{
    const char *cfg =
        "{\"model_type\": \"qwen3\", \"num_hidden_layers\": 1, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 128,"
        " \"intermediate_size\": 512, \"vocab_size\": 1000, \"max_position_embeddings\": 64,"
        " \"tie_word_embeddings\": true}";
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = from_text(cfg, &o);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(strcmp(tensor_named(g, "l0.q_norm.w")->shape, "d") == 0);
    double h = 256, nd = 512, gd = 256;
    CHECK_NEAR(g->total_params,
               2 * h * nd + 2 * h * gd + 3 * h * 512 + 2 * h + 2 * 128 + 1000 * h + h, 1e-12);
    ap_graph_free(g);
}

static char *read_expect(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (!f)
        return buf;
    if (!fgets(buf, (int)n, f))
        buf[0] = 0;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

/* Every tests/data/bad/hf_*.json fails with status 2 and a message naming
 * the file and holding its .expect sidecar. */
static void malformed_configs_are_input_errors_naming_file_and_field(void)
{
    char dir[1024];
    int n = 0;
    snprintf(dir, sizeof dir, "%s/tests/data/bad", ap_test_src());
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        char path[1400], exp_path[1400], want[512], err[AP_ERR_LEN];
        ap_graph *g = NULL;
        ap_build_opts o;
        if (strncmp(e->d_name, "hf_", 3) != 0 || len < 6 ||
            strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(exp_path, sizeof exp_path, "%s/%.*sexpect", dir, (int)(len - 4), e->d_name);
        read_expect(exp_path, want, sizeof want);
        ap_build_opts_default(&o);
        CHECK(want[0] != 0);
        CHECK(ap_graph_load(path, &o, &g, err) == AP_EINPUT);
        CHECK(g == NULL);
        CHECK_STR_HAS(err, e->d_name);
        CHECK_STR_HAS(err, want);
        n++;
    }
    closedir(d);
    CHECK(n >= 30); /* ten families, three kinds of mistake each */
}

static void sequence_beyond_learned_positions_is_refused(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = NULL;
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 4096;
    CHECK(ap_graph_from_hf(gpt2_medium, strlen(gpt2_medium), "medium.json", &o, &g, err) ==
          AP_EINPUT);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "medium.json: sequence length 4096 exceeds \"n_positions\" (1024)");
    CHECK(ap_graph_from_hf("[1]", 3, "arr.json", &o, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "arr.json");
}

/* Config text of examples/hf/`name` with the fields keys[0..n) of the
 * language model's object (the text_config where there is one) set to
 * values[0..n) (NULL: left out), which it takes; the caller frees the
 * text. NULL where the file does not parse. */
static char *with_items(const char *name, const char *const *keys, cJSON **values, int n)
{
    char path[1024], err[AP_ERR_LEN], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/examples/hf/%s", ap_test_src(), name);
    cJSON *root = NULL;
    if (!ap_read_file(path, &text, &len, err))
        root = cJSON_ParseWithLength(text, len);
    free(text);
    cJSON *lm = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_IsObject(lm))
        lm = root;
    for (int i = 0; i < n; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(lm, keys[i]);
        if (lm && values[i])
            cJSON_AddItemToObject(lm, keys[i], values[i]);
        else
            cJSON_Delete(values[i]);
    }
    char *out = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return out;
}

static char *with_field(const char *name, const char *key, const char *value)
{
    cJSON *v = cJSON_CreateString(value);
    return with_items(name, &key, &v, 1);
}

/* HF's MLPs take their activation from the config (ACT2FN[hidden_act];
 * GPT-2's activation_function), so a Llama 3 config naming "relu" is a
 * ReLU MLP, not the SwiGLU that was built and priced. Every family of the
 * examples refuses an activation it does not build, naming the field,
 * except GPT-OSS, whose experts hard-code their quick GeGLU and read no
 * activation; Gemma 2 reads hidden_activation, which must be a GELU too,
 * in its tanh form or the exact one. */
static void every_family_builds_its_activation_or_refuses_another(void)
{
    char dir[1024], err[AP_ERR_LEN];
    int refused = 0;
    snprintf(dir, sizeof dir, "%s/examples/hf", ap_test_src());
    DIR *d = opendir(dir);
    REQUIRE_OK(d ? 0 : 1, dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        int gpt2 = !strcmp(e->d_name, "gpt3-175b.json");
        int oss = !strncmp(e->d_name, "gpt-oss", 7);
        const char *key = gpt2 ? "activation_function" : "hidden_act";
        char *text = with_field(e->d_name, key, "relu"), want[128];
        CHECK(text != NULL);
        if (!text)
            continue;
        ap_graph *g = NULL;
        int rc = ap_graph_load_buffer(text, strlen(text), e->d_name, NULL, &g, err);
        if (oss) {
            CHECK(rc == AP_OK);
        } else {
            snprintf(want, sizeof want, "\"%s\" is \"relu\"; ", key);
            CHECK(rc == AP_EINPUT);
            CHECK_STR_HAS(err, e->d_name);
            CHECK_STR_HAS(err, want);
            refused += rc == AP_EINPUT;
        }
        ap_graph_free(g);
        free(text);
    }
    closedir(d);
    CHECK(refused >= 20);
    const struct {
        const char *value;
        int ok;
    } gemma[] = {{"gelu", 1}, {"gelu_pytorch_tanh", 1}, {"relu", 0}, {"silu", 0}};
    for (size_t i = 0; i < sizeof gemma / sizeof gemma[0]; i++) {
        char *text = with_field("gemma-2-9b.json", "hidden_activation", gemma[i].value);
        ap_graph *g = NULL;
        int rc = text ? ap_graph_load_buffer(text, strlen(text), "gemma2.json", NULL, &g, err)
                      : AP_EINTERNAL;
        CHECK(rc == (gemma[i].ok ? AP_OK : AP_EINPUT));
        if (!gemma[i].ok)
            CHECK_STR_HAS(err, "gemma2.json: \"hidden_activation\" is \"");
        ap_graph_free(g);
        free(text);
    }
}

/* DeepSeek's gate takes the topk_group best of n_group groups, so a
 * config stating more groups a token picks from than there are (9 of 8)
 * describes no routing: it is refused, naming topk_group, where it was
 * read as routing without groups. topk_group equal to n_group limits
 * nothing, and a topk_group left out under one group is the config
 * class's default, which that config did not ask for: both build without
 * groups. */
static void topk_group_above_n_group_is_refused(void)
{
    char err[AP_ERR_LEN];
    const struct {
        int topk_group; /* -1: left out */
        int n_group;
        int ok;
    } cases[] = {{9, 8, 0}, {8, 8, 1}, {4, 8, 1}, {-1, 1, 1}, {2, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static const char *const keys[] = {"n_group", "topk_group"};
        cJSON *values[] = {cJSON_CreateNumber(cases[i].n_group),
                           cases[i].topk_group < 0 ? NULL
                                                   : cJSON_CreateNumber(cases[i].topk_group)};
        char *text = with_items("deepseek-v3.json", keys, values, 2);
        CHECK(text != NULL);
        if (!text)
            continue;
        ap_graph *g = NULL;
        int rc = ap_graph_load_buffer(text, strlen(text), "ds.json", NULL, &g, err);
        CHECK(rc == (cases[i].ok ? AP_OK : AP_EINPUT));
        if (cases[i].ok && g) {
            int r = ap_graph_find_op(g, "l3.router");
            CHECK(r >= 0 && g->ops[r].groups == (cases[i].topk_group == 4 ? 8 : 0));
        } else if (!cases[i].ok) {
            char want[96];
            snprintf(want, sizeof want, "ds.json: \"topk_group\" (%d) exceeds \"n_group\" (%d)",
                     cases[i].topk_group, cases[i].n_group);
            CHECK_STR_HAS(err, want);
        }
        ap_graph_free(g);
        free(text);
    }
}

int main(void)
{
    RUN(llama_3_8b_has_8_03b_parameters);
    RUN(llama_3_70b_has_70_6b_parameters);
    RUN(llama_3_1_405b_has_405_9b_parameters);
    RUN(gpt3_counts_biases_positions_and_ties_the_head);
    RUN(mixtral_has_46_7b_total_and_12_9b_active);
    RUN(deepseek_v3_has_671b_total_and_37b_active);
    RUN(kimi_k2_is_deepseek_v3_with_1t_total_and_32b_active);
    RUN(deepseek_v2_is_v3_with_its_own_gate);
    RUN(vision_wrappers_build_their_language_model);
    RUN(qwen3_30b_a3b_has_30_5b_total_and_3_3b_active);
    RUN(configs_saved_by_transformers_5_read_as_it_builds_them);
    RUN(gpt_neox_reads_its_rotary_base_from_rotary_emb_base);
    RUN(mistral_fills_in_its_config_classes_window);
    RUN(dense_forward_flops_are_2n_plus_attention);
    RUN(gpt_block_saves_34sbh_plus_5as2b);
    RUN(dropout_ops_follow_the_option);
    RUN(sequence_defaults_to_context_capped_at_4096);
    RUN(grouped_query_attention_labels_kv_heads);
    RUN(deepseek_v3_uses_latent_attention_and_dense_first_layers);
    RUN(qwen2_moe_places_sparse_layers_and_gates_the_shared_expert);
    RUN(gpt_neox_parallel_residual_feeds_both_norms_from_the_input);
    RUN(qwen3_adds_per_head_qk_norms);
    RUN(malformed_configs_are_input_errors_naming_file_and_field);
    RUN(every_family_builds_its_activation_or_refuses_another);
    RUN(topk_group_above_n_group_is_refused);
    RUN(sequence_beyond_learned_positions_is_refused);
    return DONE();
}
