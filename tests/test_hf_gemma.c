/* test_hf_gemma.c -- the Gemma families (Hugging Face model_type "gemma",
 * "gemma2", "gemma3_text") and Phi-3 ("phi3"): each config's parameters
 * against the count its published checkpoint has, the blocks HF's
 * modeling files run (GeGLU, the embedding scaled by sqrt(hidden), Gemma 2
 * and 3's norms after each sublayer, Gemma 2's capped logits, Gemma 3's
 * query and key norms, Phi-3's partial rotary), which layers get a sliding
 * window, and the configs that are refused. */
#include "model.h"

/* google/gemma-7b's config.json. */
static const char *gemma_7b =
    "{\"model_type\":\"gemma\",\"head_dim\":256,\"hidden_act\":\"gelu\","
    "\"hidden_size\":3072,\"intermediate_size\":24576,\"max_position_embeddings\":8192,"
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":16,"
    "\"rms_norm_eps\":1e-06,\"vocab_size\":256000}";

/* google/gemma-2-9b's. */
static const char *gemma2_9b =
    "{\"model_type\":\"gemma2\",\"attn_logit_softcapping\":50.0,"
    "\"final_logit_softcapping\":30.0,\"head_dim\":256,"
    "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":3584,"
    "\"intermediate_size\":14336,\"max_position_embeddings\":8192,"
    "\"num_attention_heads\":16,\"num_hidden_layers\":42,\"num_key_value_heads\":8,"
    "\"query_pre_attn_scalar\":256,\"sliding_window\":4096,\"vocab_size\":256000}";

/* google/gemma-3-1b-pt's. */
static const char *gemma3_1b =
    "{\"model_type\":\"gemma3_text\",\"final_logit_softcapping\":null,\"head_dim\":256,"
    "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":1152,"
    "\"intermediate_size\":6912,\"max_position_embeddings\":32768,"
    "\"num_attention_heads\":4,\"num_hidden_layers\":26,\"num_key_value_heads\":1,"
    "\"sliding_window\":512,\"sliding_window_pattern\":6,\"vocab_size\":262144}";

/* microsoft/Phi-3-mini-4k-instruct's. */
static const char *phi3_mini =
    "{\"model_type\":\"phi3\",\"hidden_act\":\"silu\",\"hidden_size\":3072,"
    "\"intermediate_size\":8192,\"max_position_embeddings\":4096,"
    "\"num_attention_heads\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":32,"
    "\"sliding_window\":2047,\"tie_word_embeddings\":false,\"vocab_size\":32064}";

/* Gemma 7B: per layer Q, K, V, O (3072 x 16 x 256 each), a GeGLU MLP
 * (3 x 3072 x 24576), two RMSNorms; 28 layers of 276,830,208; the tied
 * embedding 256000 x 3072 and the final norm: 8,537,680,896, the count
 * of the released checkpoint. */
static void gemma_7b_has_8_54b_parameters_and_a_geglu_mlp(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(gemma_7b, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    double h = 3072, nd = 16 * 256, f = 24576, v = 256000;
    double layer = 4 * h * nd + 3 * h * f + 2 * h;
    CHECK_NEAR(g->total_params, 28 * layer + v * h + h, 1e-15);
    CHECK_NEAR(g->total_params, 8537680896.0, 1e-15);
    const ap_op *act = ap_test_op(g, "l0.mlp.gelu");
    CHECK(act && act->kind == AP_OP_UNARY && act->sub == AP_UNARY_GELU);
    CHECK(ap_test_op(g, "l0.mlp.silu") == NULL);
    const ap_op *mul = ap_test_op(g, "l0.mlp.mul");
    CHECK(mul && ap_glu_activation(g, mul, 0) == AP_UNARY_GELU);
    /* The embedding is scaled by sqrt(hidden) before the first layer. */
    const ap_op *scale = ap_test_op(g, "embed_scale");
    CHECK(scale && scale->sub == AP_UNARY_SCALE);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") < 0); /* tied */
    CHECK(ap_test_window(g, 0) == 0);
    CHECK(ap_test_op(g, "l0.post_attn_norm") == NULL);
    ap_graph_free(g);
}

/* Gemma 2 9B: four norms a layer (before and after attention and the MLP),
 * 42 layers of 198,174,208 (Q and O 3584 x 4096, K and V 3584 x 2048, the
 * MLP 3 x 3584 x 14336, 4 x 3584), the tied embedding and the final norm:
 * 9,241,705,984, the released count. */
static void gemma2_9b_has_9_24b_parameters_and_norms_after_each_sublayer(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(gemma2_9b, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    double h = 3584, layer = 2 * h * 4096 + 2 * h * 2048 + 3 * h * 14336 + 4 * h;
    CHECK_NEAR(g->total_params, 42 * layer + 256000 * h + h, 1e-15);
    CHECK_NEAR(g->total_params, 9241705984.0, 1e-15);
    const ap_op *post = ap_test_op(g, "l0.post_attn_norm");
    CHECK(post && post->kind == AP_OP_NORM);
    CHECK(post && g->tensors[post->inputs[0]].producer == ap_graph_find_op(g, "l0.o"));
    const ap_op *res = ap_test_op(g, "l0.res1");
    CHECK(res && res->inputs[1] == ap_graph_find_tensor(g, "l0.post_attn_norm.y"));
    CHECK(ap_test_op(g, "l0.post_mlp_norm") != NULL);
    /* Norms on the hidden-wide outputs are no QK layernorm (Megatron-LM's
     * --qk-layernorm); Gemma 3's on the heads are (below). */
    ap_model_shape shape;
    ap_model_shape_of(g, &shape);
    CHECK(!shape.qk_norm);
    /* The logits are capped before the loss. */
    const ap_op *cap = ap_test_op(g, "softcap");
    CHECK(cap && cap->sub == AP_UNARY_SOFTCAP);
    const ap_op *loss = ap_test_op(g, "loss");
    CHECK(loss && g->tensors[loss->inputs[0]].producer == ap_graph_find_op(g, "softcap"));
    ap_graph_free(g);
}

/* Gemma 2 windows every other layer from the first. At the default 4,096
 * tokens the 4,096-key window changes nothing; at 8,192 a windowed layer
 * counts 2*8192*4096 - 4096^2 = 50,331,648 scores per head where a full
 * one counts 8192^2 = 67,108,864, which is the FLOPs' difference:
 * (2 (d + e) + 5) x 16 heads x 16,777,216. */
static void gemma2_windows_every_other_layer(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(gemma2_9b, 8192, err);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(ap_test_window(g, 0) == 4096);
    CHECK(ap_test_window(g, 1) == 0);
    CHECK(ap_test_window(g, 40) == 4096);
    CHECK(ap_test_window(g, 41) == 0);
    CHECK(g->layer_class[2] == 0 && g->layer_class[3] == 1);
    const ap_op *w = ap_test_op(g, "l0.attn"), *full = ap_test_op(g, "l1.attn");
    CHECK(w && full);
    if (w && full) {
        CHECK_NEAR(ap_attention_scores(8192, 4096), 50331648.0, 1e-15);
        CHECK_NEAR(full->flops - w->flops, (2.0 * (256 + 256) + 5) * 16 * 16777216.0, 1e-12);
    }
    ap_graph_free(g);
}

/* Gemma 3 1B: 26 layers, all but every sixth windowed at 512 keys (layers
 * 5, 11, 17 and 23 attend to everything), norms on queries and keys, no
 * logit cap; 999,885,952 parameters, the released count. */
static void gemma3_1b_windows_five_layers_of_six(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(gemma3_1b, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, 999885952.0, 1e-15);
    int windowed = 0;
    for (int i = 0; i < 26; i++)
        windowed += ap_test_window(g, i) == 512;
    CHECK(windowed == 22);
    CHECK(ap_test_window(g, 5) == 0 && ap_test_window(g, 23) == 0 && ap_test_window(g, 4) == 512);
    CHECK(ap_test_op(g, "l0.q_norm") != NULL && ap_test_op(g, "l0.k_norm") != NULL);
    ap_model_shape shape;
    ap_model_shape_of(g, &shape);
    CHECK(shape.qk_norm);
    CHECK(ap_test_op(g, "softcap") == NULL);
    ap_graph_free(g);
}

/* "layer_types", where a config lists them, decide over the pattern. */
static void layer_types_decide_which_layers_are_windowed(void)
{
    char err[AP_ERR_LEN];
    const char *cfg =
        "{\"model_type\":\"gemma3_text\",\"head_dim\":64,\"hidden_size\":256,"
        "\"intermediate_size\":512,\"max_position_embeddings\":1024,"
        "\"num_attention_heads\":4,\"num_hidden_layers\":3,\"num_key_value_heads\":1,"
        "\"sliding_window\":128,\"vocab_size\":1000,\"layer_types\":"
        "[\"full_attention\",\"sliding_attention\",\"full_attention\"]}";
    ap_graph *g = ap_test_hf_seq(cfg, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(ap_test_window(g, 0) == 0 && ap_test_window(g, 1) == 128 && ap_test_window(g, 2) == 0);
    ap_graph_free(g);
}

/* Qwen2 windows the layers from max_window_layers on, and only under
 * use_sliding_window. */
static void qwen2_windows_only_under_use_sliding_window(void)
{
    char err[AP_ERR_LEN];
    char cfg[1024];
    const char *fmt =
        "{\"model_type\":\"qwen2\",\"hidden_size\":256,\"intermediate_size\":512,"
        "\"max_position_embeddings\":2048,\"num_attention_heads\":4,"
        "\"num_hidden_layers\":4,\"num_key_value_heads\":2,\"vocab_size\":1000,"
        "\"sliding_window\":512,\"max_window_layers\":2,\"use_sliding_window\":%s}";
    snprintf(cfg, sizeof cfg, fmt, "true");
    ap_graph *g = ap_test_hf_seq(cfg, 0, err);
    CHECK(g != NULL);
    if (g) {
        CHECK(ap_test_window(g, 0) == 0 && ap_test_window(g, 1) == 0);
        CHECK(ap_test_window(g, 2) == 512 && ap_test_window(g, 3) == 512);
        ap_graph_free(g);
    }
    snprintf(cfg, sizeof cfg, fmt, "false");
    g = ap_test_hf_seq(cfg, 0, err);
    CHECK(g != NULL);
    if (g) {
        for (int i = 0; i < 4; i++)
            CHECK(ap_test_window(g, i) == 0);
        ap_graph_free(g);
    }
}

/* Phi-3 mini: Llama's block with every layer windowed at 2,047 keys;
 * 3,821,079,552 parameters, the released count. partial_rotary_factor
 * rotates that share of each head (Phi-4 mini's 0.75: 72 of 96). */
static void phi3_mini_has_3_82b_parameters_and_a_window_on_every_layer(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(phi3_mini, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK_NEAR(g->total_params, 3821079552.0, 1e-15);
    CHECK(ap_test_window(g, 0) == 2047 && ap_test_window(g, 31) == 2047);
    CHECK(g->layer_class[31] == 0);
    CHECK(ap_graph_label_of(g, AP_DIM_OTHER) == 0); /* the whole head rotates */
    ap_graph_free(g);

    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%.*s,\"partial_rotary_factor\":0.75}",
             (int)strlen(phi3_mini) - 1, phi3_mini);
    g = ap_test_hf_seq(cfg, 0, err);
    CHECK(g != NULL);
    if (g) {
        const ap_dim *r = ap_graph_dim(g, 'r');
        CHECK(r && r->size == 72);
        ap_graph_free(g);
    }
}

static void refused(const char *cfg, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = NULL;
    CHECK(ap_graph_from_hf(cfg, strlen(cfg), "config.json", &o, &g, err) == AP_EINPUT);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "config.json: ");
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

static void bad_windows_are_refused_with_the_field_named(void)
{
    const char *head =
        "{\"model_type\":\"gemma2\",\"head_dim\":64,\"hidden_size\":256,"
        "\"intermediate_size\":512,\"max_position_embeddings\":1024,"
        "\"num_attention_heads\":4,\"num_hidden_layers\":2,\"num_key_value_heads\":1,"
        "\"vocab_size\":1000,";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s\"sliding_window\":\"4k\"}", head);
    refused(cfg, "\"sliding_window\" must be an integer");
    snprintf(cfg, sizeof cfg, "%s\"sliding_window\":0}", head);
    refused(cfg, "\"sliding_window\" is 0");
    snprintf(cfg, sizeof cfg, "%s\"layer_types\":[\"full_attention\"]}", head);
    refused(cfg, "\"layer_types\" must be an array of 2 strings");
    snprintf(cfg, sizeof cfg,
             "%s\"layer_types\":[\"full_attention\",\"chunked_attention\"]}", head);
    refused(cfg, "\"layer_types\"[1] must be \"sliding_attention\" or \"full_attention\"");
    snprintf(cfg, sizeof cfg, "%s\"final_logit_softcapping\":\"30\"}", head);
    refused(cfg, "\"final_logit_softcapping\" must be a number");
}

/* google/gemma-3-4b-it's config.json is Gemma 3 with vision
 * ("gemma3"): its language model is the text_config, whose fields left
 * out take Gemma3TextConfig's defaults (8 heads, 4 KV heads, head dim 256,
 * 262,208 tokens). Per layer Q and O (2560 x 2048), K and V (2560 x 1024),
 * the GeGLU MLP (3 x 2560 x 10240), four norms and the two head norms of
 * 256; 34 layers and the tied table: 3,880,263,168. */
static void a_gemma3_vision_config_builds_its_language_model(void)
{
    char err[AP_ERR_LEN];
    const char *cfg =
        "{\"model_type\":\"gemma3\",\"text_config\":{\"hidden_size\":2560,"
        "\"intermediate_size\":10240,\"model_type\":\"gemma3_text\",\"num_hidden_layers\":34,"
        "\"sliding_window\":1024},\"vision_config\":{\"hidden_size\":1152}}";
    ap_graph *g = ap_test_hf_seq(cfg, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    double h = 2560, layer = 2 * h * 2048 + 2 * h * 1024 + 3 * h * 10240 + 4 * h + 2 * 256;
    CHECK(g->total_params == 34 * layer + 262208 * h + h);
    CHECK(g->total_params == 3880263168.0);
    CHECK(ap_graph_dim(g, 'n')->size == 8 && ap_graph_dim(g, 'g')->size == 4);
    CHECK(ap_test_window(g, 0) == 1024 && ap_test_window(g, 5) == 0);
    /* The graph's source is the file, which a plan records to load again;
     * messages while reading it name its text_config (below). */
    CHECK(!strcmp(g->source, "config.json") && !strcmp(g->name, "config.json"));
    ap_graph_free(g);
    refused("{\"model_type\":\"gemma3\",\"vision_config\":{}}",
            "model_type \"gemma3\" (Gemma 3 with vision) needs a \"text_config\" object");
    refused("{\"model_type\":\"gemma3\",\"text_config\":{\"hidden_size\":2560}}",
            "config.json: text_config: \"num_hidden_layers\" is missing");
}

int main(void)
{
    RUN(gemma_7b_has_8_54b_parameters_and_a_geglu_mlp);
    RUN(gemma2_9b_has_9_24b_parameters_and_norms_after_each_sublayer);
    RUN(gemma2_windows_every_other_layer);
    RUN(gemma3_1b_windows_five_layers_of_six);
    RUN(layer_types_decide_which_layers_are_windowed);
    RUN(qwen2_windows_only_under_use_sliding_window);
    RUN(phi3_mini_has_3_82b_parameters_and_a_window_on_every_layer);
    RUN(bad_windows_are_refused_with_the_field_named);
    RUN(a_gemma3_vision_config_builds_its_language_model);
    return DONE();
}
