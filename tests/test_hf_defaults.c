/* test_hf_defaults.c -- what a Hugging Face config means where it leaves a
 * field out, and the fields transformers 5 writes: each family's config
 * class fills in its own number of key-value heads and head size (not
 * always the query heads and hidden / heads), Mistral-style models window
 * every layer whatever layer_types says, Qwen2-MoE's qkv_bias and its
 * window of 0, the other name an attribute_map gives the number of
 * experts, Phi-3's attention without biases, and configs whose
 * `architectures` name another head than the language model's. */
#include "model.h"

/* A two-layer config of family `type` with 32 heads on a hidden size of
 * 2,048, without num_key_value_heads or head_dim, plus `extra` (the MoE
 * fields a family requires, or nothing). */
static ap_graph *small(const char *type, const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"%s\",\"num_hidden_layers\":2,\"hidden_size\":2048,"
             "\"num_attention_heads\":32,\"intermediate_size\":512,\"vocab_size\":1000,"
             "\"max_position_embeddings\":512%s}",
             type, extra);
    return ap_test_hf_seq(cfg, 0, err);
}

static int64_t dim_size(const ap_graph *g, char l)
{
    const ap_dim *d = ap_graph_dim(g, l);
    return d ? d->size : -1;
}

static const char *moe_num_experts =
    ",\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":64";

/* The key-value heads a config that leaves num_key_value_heads out gets
 * are its config class's default (transformers 4.5x's __init__ and 5's
 * dataclass fields say the same): MistralConfig's 8, not the 32 query
 * heads LlamaConfig's None gives, Qwen2Config's and Qwen3Config's 32,
 * Qwen2MoeConfig's 16, Qwen3MoeConfig's 4, GemmaConfig's 16, Gemma2Config's
 * 4, Starcoder2Config's 2, and so on. */
static void key_value_heads_left_out_are_the_config_classs(void)
{
    static const struct {
        const char *type, *extra;
        int64_t kv;
    } cases[] = {
        {"llama", "", 32},
        {"phi3", "", 32},
        {"olmo2", "", 32},
        {"nemotron", "", 32},
        {"mistral", "", 8},
        {"mixtral", ",\"num_local_experts\":8,\"num_experts_per_tok\":2", 8},
        {"gpt_oss", ",\"num_local_experts\":8,\"num_experts_per_tok\":2", 8},
        {"llama4_text", ",\"num_local_experts\":8,\"num_experts_per_tok\":1", 8},
        {"glm4_moe", ",\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
                     "\"moe_intermediate_size\":64", 8},
        {"qwen2", "", 32},
        {"qwen3", "", 32},
        {"qwen2_moe", ",\"num_experts\":8,\"num_experts_per_tok\":2,"
                      "\"moe_intermediate_size\":64,\"shared_expert_intermediate_size\":128", 16},
        {"qwen3_moe", ",\"num_experts\":8,\"num_experts_per_tok\":2,"
                      "\"moe_intermediate_size\":64", 4},
        {"olmoe", ",\"num_experts\":8,\"num_experts_per_tok\":2", 32},
        {"gemma", "", 16},
        {"gemma2", "", 4},
        {"starcoder2", "", 2},
    };
    char err[AP_ERR_LEN];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ap_graph *g = small(cases[i].type, cases[i].extra, err);
        CHECK(g != NULL);
        if (!g) {
            fprintf(stderr, "  for %s\n", cases[i].type);
            continue;
        }
        if (dim_size(g, 'g') != cases[i].kv)
            fprintf(stderr, "%s: %lld key-value heads, want %lld\n", cases[i].type,
                    (long long)dim_size(g, 'g'), (long long)cases[i].kv);
        CHECK(dim_size(g, 'g') == cases[i].kv);
        ap_graph_free(g);
    }
}

/* mistralai/Mistral-7B-v0.1's sizes with num_key_value_heads left out:
 * MistralConfig's 8 keep it the published 7,241,732,096 parameters (K and
 * V 4,096 x 1,024); read as Llama's None, 32 heads, it would be
 * 8,047,038,464. An explicit null is the classes' `None`: the query
 * heads. */
static void mistral_7b_without_its_key_value_heads_is_still_7_24b(void)
{
    const char *fmt =
        "{\"model_type\":\"mistral\",\"hidden_size\":4096,\"intermediate_size\":14336,"
        "\"max_position_embeddings\":32768,\"num_attention_heads\":32,"
        "\"num_hidden_layers\":32,\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,"
        "\"sliding_window\":4096,\"tie_word_embeddings\":false,\"vocab_size\":32000%s}";
    char cfg[1024], err[AP_ERR_LEN];
    snprintf(cfg, sizeof cfg, fmt, "");
    ap_graph *g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    double h = 4096, layer = 2 * h * h + 2 * h * 1024 + 3 * h * 14336 + 2 * h;
    CHECK(g->total_params == 32 * layer + 2 * 32000 * h + h);
    CHECK(g->total_params == 7241732096.0);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, fmt, ",\"num_key_value_heads\":null");
    g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim_size(g, 'g') == 32);
    CHECK(g->total_params == 8047038464.0);
    ap_graph_free(g);
}

/* A vision wrapper's text config is its own class: Qwen3VLMoeTextConfig
 * defaults to 16 key-value heads where Qwen3MoeConfig has 4, and
 * Qwen3VLTextConfig to Qwen3Config's 32 and head size 128. */
static void a_wrappers_text_config_has_its_own_classs_defaults(void)
{
    const char *fmt =
        "{\"model_type\":\"%s\",\"text_config\":{\"num_hidden_layers\":2,"
        "\"hidden_size\":2048,\"num_attention_heads\":32,\"intermediate_size\":512,"
        "\"vocab_size\":1000,\"max_position_embeddings\":512%s}}";
    char cfg[1024], err[AP_ERR_LEN];
    snprintf(cfg, sizeof cfg, fmt, "qwen3_vl_moe", moe_num_experts);
    ap_graph *g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim_size(g, 'g') == 16 && dim_size(g, 'd') == 64);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, fmt, "qwen3_vl", "");
    g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim_size(g, 'g') == 32 && dim_size(g, 'd') == 128);
    ap_graph_free(g);
}

/* A query-head count the class's default does not divide (Qwen2Config's
 * 32 under 28 heads) cannot be what the config means: refused, saying
 * where the number came from. */
static void a_default_that_does_not_divide_the_heads_is_refused(void)
{
    const char *cfg =
        "{\"model_type\":\"qwen2\",\"num_hidden_layers\":2,\"hidden_size\":3584,"
        "\"num_attention_heads\":28,\"intermediate_size\":512,\"vocab_size\":1000,"
        "\"max_position_embeddings\":512}";
    char err[AP_ERR_LEN];
    ap_graph *g = NULL;
    ap_build_opts o;
    ap_build_opts_default(&o);
    CHECK(ap_graph_from_hf(cfg, strlen(cfg), "config.json", &o, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "config.json: \"num_attention_heads\" (28) is not a multiple of "
                       "\"num_key_value_heads\" (32, the qwen2 config class's default where "
                       "the config leaves it out); state it");
}

/* The head size of a config without head_dim: Qwen3Config's 128,
 * GemmaConfig's and Gemma2Config's 256, GptOssConfig's 64 and Llama4TextConfig's 128, where
 * hidden / heads is 64; Qwen3MoeConfig has no head_dim, so hidden / heads;
 * and a null head_dim is hidden / heads, as the classes' None reads. */
static void head_size_left_out_is_the_config_classs(void)
{
    static const struct {
        const char *type, *extra;
        int64_t d;
    } cases[] = {
        {"qwen3", ",\"num_key_value_heads\":8", 128},
        {"gemma", ",\"num_key_value_heads\":8", 256},
        {"gemma2", ",\"num_key_value_heads\":8", 256},
        {"gpt_oss", ",\"num_key_value_heads\":8,\"num_local_experts\":8,"
                    "\"num_experts_per_tok\":2", 64},
        {"llama4_text", ",\"num_key_value_heads\":8,\"num_local_experts\":8,"
                        "\"num_experts_per_tok\":1", 128},
        {"qwen3_moe", ",\"num_key_value_heads\":8,\"num_experts\":8,"
                      "\"num_experts_per_tok\":2,\"moe_intermediate_size\":64", 64},
        {"llama", ",\"num_key_value_heads\":8", 64},
        {"qwen3", ",\"num_key_value_heads\":8,\"head_dim\":null", 64},
    };
    char err[AP_ERR_LEN];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ap_graph *g = small(cases[i].type, cases[i].extra, err);
        CHECK(g != NULL);
        if (!g)
            continue;
        if (dim_size(g, 'd') != cases[i].d)
            fprintf(stderr, "%s%s: head size %lld, want %lld\n", cases[i].type,
                    cases[i].extra, (long long)dim_size(g, 'd'), (long long)cases[i].d);
        CHECK(dim_size(g, 'd') == cases[i].d);
        ap_graph_free(g);
    }
    /* Qwen3-0.6B's 16 heads of 128 on a hidden size of 1,024, its
     * head_dim left out: q is 2,048 wide. */
    ap_graph *g = ap_test_hf_seq(
        "{\"model_type\":\"qwen3\",\"num_hidden_layers\":28,\"hidden_size\":1024,"
        "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"intermediate_size\":3072,"
        "\"vocab_size\":151936,\"max_position_embeddings\":40960,"
        "\"tie_word_embeddings\":true}",
        0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    double h = 1024, q = 16 * 128, kv = 8 * 128;
    double layer = 2 * h * q + 2 * h * kv + 3 * h * 3072 + 2 * h + 2 * 128;
    CHECK(g->total_params == 28 * layer + 151936 * h + h);
    CHECK(g->total_params == 596049920.0);
    ap_graph_free(g);
}

/* MistralModel (and Mixtral's, Phi-3's, StarCoder2's and Qwen3-MoE's)
 * builds one sliding-window mask for every layer from sliding_window;
 * MistralConfig only warns of a layer_types, which transformers 5 may
 * carry over. So every layer has the window, whatever layer_types says. */
static void mistral_windows_every_layer_whatever_layer_types_says(void)
{
    static const char *types[] = {"mistral", "phi3", "starcoder2"};
    char extra[256], err[AP_ERR_LEN];
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        snprintf(extra, sizeof extra,
                 ",\"num_key_value_heads\":8,\"sliding_window\":128,\"layer_types\":"
                 "[\"full_attention\",\"sliding_attention\"]");
        ap_graph *g = small(types[i], extra, err);
        CHECK(g != NULL);
        if (!g)
            continue;
        CHECK(ap_test_window(g, 0) == 128 && ap_test_window(g, 1) == 128);
        ap_graph_free(g);
    }
}

/* Qwen3-MoE under use_sliding_window windows every layer: Qwen3MoeAttention
 * takes sliding_window on each (it drops Qwen3's layer_type) and
 * MixtralModel's mask is one for all; Qwen3MoeConfig has no
 * max_window_layers. Dense Qwen3 keeps the window from max_window_layers
 * on. */
static void qwen3_moe_windows_every_layer_qwen3_from_max_window_layers(void)
{
    char extra[512], err[AP_ERR_LEN];
    snprintf(extra, sizeof extra,
             "%s,\"num_key_value_heads\":8,\"use_sliding_window\":true,\"sliding_window\":128,"
             "\"max_window_layers\":1",
             moe_num_experts);
    ap_graph *g = small("qwen3_moe", extra, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 128 && ap_test_window(g, 1) == 128);
    ap_graph_free(g);
    g = small("qwen3", extra, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 0 && ap_test_window(g, 1) == 128);
    ap_graph_free(g);
}

/* Qwen2-MoE as transformers 5 writes it: Qwen2MoeConfig's qkv_bias (true)
 * puts the bias on Q, K and V, and false takes 4 x 64 + 2 x 2 x 64 = 512
 * parameters a layer away; without use_sliding_window the class sets
 * sliding_window to 0, no window. Its number of experts keeps the name
 * num_experts (no attribute_map): num_local_experts alone is not read. */
static void qwen2_moe_reads_qkv_bias_and_a_window_of_0(void)
{
    const char *fmt =
        "{\"model_type\":\"qwen2_moe\",\"num_hidden_layers\":2,\"hidden_size\":256,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":512,"
        "\"moe_intermediate_size\":64,\"shared_expert_intermediate_size\":128,"
        "\"num_experts_per_tok\":2,\"vocab_size\":1000,\"max_position_embeddings\":512%s}";
    char cfg[1024], err[AP_ERR_LEN];
    snprintf(cfg, sizeof cfg, fmt, ",\"num_experts\":8");
    ap_graph *with = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(with ? 0 : 1, err);
    snprintf(cfg, sizeof cfg, fmt,
             ",\"num_experts\":8,\"qkv_bias\":false,\"sliding_window\":0,"
             "\"use_sliding_window\":false");
    ap_graph *without = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(without ? 0 : 1, err);
    CHECK(with->total_params - without->total_params == 2 * (256 + 2 * 128));
    CHECK(ap_test_window(without, 0) == 0 && ap_test_window(without, 1) == 0);
    ap_graph_free(with);
    ap_graph_free(without);
    snprintf(cfg, sizeof cfg, fmt, ",\"num_local_experts\":8");
    ap_graph *g = NULL;
    ap_build_opts o;
    ap_build_opts_default(&o);
    CHECK(ap_graph_from_hf(cfg, strlen(cfg), "config.json", &o, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "config.json: \"num_experts\" is missing");
}

/* Where a config class's attribute_map reads one name as another, either
 * name states the experts: num_experts for Mixtral (num_local_experts),
 * num_local_experts for OLMoE (num_experts) and for GLM-4.5
 * (n_routed_experts); two that disagree are refused. */
static void the_other_name_an_attribute_map_gives_is_read(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small("mixtral", ",\"num_experts\":4,\"num_experts_per_tok\":2", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim_size(g, 'E') == 4);
    ap_graph_free(g);
    g = small("olmoe", ",\"num_local_experts\":4,\"num_experts_per_tok\":2", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim_size(g, 'E') == 4);
    ap_graph_free(g);
    g = small("glm4_moe", ",\"num_local_experts\":4,\"num_experts_per_tok\":2,"
                          "\"moe_intermediate_size\":64", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim_size(g, 'E') == 4);
    ap_graph_free(g);
    g = small("mixtral", ",\"num_local_experts\":8,\"num_experts\":4,\"num_experts_per_tok\":2",
              err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "config.json: \"num_local_experts\" (8) and \"num_experts\" (4) "
                       "disagree");
    ap_graph_free(g);
}

/* Phi3Attention builds qkv_proj and o_proj with bias=False, and
 * Phi3Config has no attention_bias: a config saying true describes another
 * model and is refused; false builds what the config without it builds. */
static void phi3_attention_has_no_bias_whatever_attention_bias_says(void)
{
    char err[AP_ERR_LEN];
    ap_graph *plain = small("phi3", "", err);
    REQUIRE_OK(plain ? 0 : 1, err);
    ap_graph *off = small("phi3", ",\"attention_bias\":false", err);
    REQUIRE_OK(off ? 0 : 1, err);
    double h = 2048;
    CHECK(plain->total_params == 2 * (4 * h * h + 3 * h * 512 + 2 * h) + 2 * 1000 * h + h);
    CHECK(off->total_params == plain->total_params);
    ap_graph_free(plain);
    ap_graph_free(off);
    ap_graph *on = small("phi3", ",\"attention_bias\":true", err);
    CHECK(on == NULL);
    CHECK_STR_HAS(err, "config.json: \"attention_bias\" is true; phi3 is built with no bias "
                       "on qkv_proj and o_proj (Phi3Attention's bias=False) only");
    ap_graph_free(on);
}

/* A config whose architectures names a class with another head than the
 * language model's (a fine-tuned classifier's num_labels scores) is
 * refused, naming the field and the class autopar prices; a causal LM's,
 * and a vision wrapper's, build. */
static void another_head_than_the_language_models_is_refused(void)
{
    static const struct {
        const char *arch, *want;
    } cases[] = {
        {"Qwen2ForSequenceClassification",
         "config.json: \"architectures\" names \"Qwen2ForSequenceClassification\", a "
         "sequence-classification head (num_labels scores from the last token) in place of "
         "the language-model head; autopar builds and prices causal-LM training only "
         "(Qwen2ForCausalLM)"},
        {"MistralForTokenClassification", "a token-classification head"},
        {"LlamaForQuestionAnswering", "(LlamaForCausalLM)"},
    };
    char extra[256], err[AP_ERR_LEN];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(extra, sizeof extra, ",\"num_key_value_heads\":8,\"architectures\":[\"%s\"]",
                 cases[i].arch);
        ap_graph *g = small("qwen2", extra, err);
        CHECK(g == NULL);
        CHECK_STR_HAS(err, cases[i].want);
        ap_graph_free(g);
    }
    ap_graph *g = small("qwen2", ",\"num_key_value_heads\":8,"
                                 "\"architectures\":[\"Qwen2ForCausalLM\"]", err);
    CHECK(g != NULL);
    ap_graph_free(g);
}

int main(void)
{
    RUN(key_value_heads_left_out_are_the_config_classs);
    RUN(mistral_7b_without_its_key_value_heads_is_still_7_24b);
    RUN(a_wrappers_text_config_has_its_own_classs_defaults);
    RUN(a_default_that_does_not_divide_the_heads_is_refused);
    RUN(head_size_left_out_is_the_config_classs);
    RUN(mistral_windows_every_layer_whatever_layer_types_says);
    RUN(qwen3_moe_windows_every_layer_qwen3_from_max_window_layers);
    RUN(qwen2_moe_reads_qkv_bias_and_a_window_of_0);
    RUN(the_other_name_an_attribute_map_gives_is_read);
    RUN(phi3_attention_has_no_bias_whatever_attention_bias_says);
    RUN(another_head_than_the_language_models_is_refused);
    return DONE();
}
