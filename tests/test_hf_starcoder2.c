/* test_hf_starcoder2.c -- StarCoder2 (Hugging Face model_type
 * "starcoder2"): Llama's attention with LayerNorm and GPT's GELU MLP,
 * biases on every linear layer under use_bias, a tied embedding by
 * default and a sliding window on every layer. Each published size's
 * parameters against the closed form and the released count, the blocks
 * HF's modeling file runs, the configs that are refused, and Megatron-LM's
 * export, whose flags state the same model. */
#include "model.h"

/* bigcode/starcoder2-3b's config.json (its dropouts, which --dropout
 * decides, and token ids left out). */
static const char *starcoder2_3b =
    "{\"model_type\":\"starcoder2\",\"hidden_act\":\"gelu_pytorch_tanh\","
    "\"hidden_size\":3072,\"intermediate_size\":12288,\"max_position_embeddings\":16384,"
    "\"norm_epsilon\":1e-05,\"num_attention_heads\":24,\"num_hidden_layers\":30,"
    "\"num_key_value_heads\":2,\"rope_theta\":999999.4420358813,\"sliding_window\":4096,"
    "\"use_bias\":true,\"vocab_size\":49152}";

/* The 7B's and the untied 15B's sizes. */
static const char *starcoder2_7b =
    "{\"model_type\":\"starcoder2\",\"hidden_size\":4608,\"intermediate_size\":18432,"
    "\"max_position_embeddings\":16384,\"num_attention_heads\":36,"
    "\"num_hidden_layers\":32,\"num_key_value_heads\":4,\"sliding_window\":4096,"
    "\"vocab_size\":49152}";
static const char *starcoder2_15b =
    "{\"model_type\":\"starcoder2\",\"hidden_size\":6144,\"intermediate_size\":24576,"
    "\"max_position_embeddings\":16384,\"num_attention_heads\":48,"
    "\"num_hidden_layers\":40,\"num_key_value_heads\":4,\"sliding_window\":4096,"
    "\"tie_word_embeddings\":false,\"vocab_size\":49152}";

/* Per layer: Q and O (h x h) and K and V (h x 128g), each with a bias; the
 * MLP h x f and f x h with biases; two LayerNorms with biases (4h). */
static double layer_params(double h, double g, double f)
{
    double kv = 128 * g;
    return 2 * (h * h + h) + 2 * (h * kv + kv) + 2 * h * f + f + h + 4 * h;
}

/* 3B: 30 layers of 95,979,008, the tied table 49,152 x 3,072 and the final
 * LayerNorm: 3,030,371,328; the 7B 7,173,923,840; the 15B, untied,
 * 15,957,889,024: the released counts. */
static void each_size_has_its_released_parameter_count(void)
{
    char err[AP_ERR_LEN];
    const char *cfg[3] = {starcoder2_3b, starcoder2_7b, starcoder2_15b};
    const double h[3] = {3072, 4608, 6144}, g[3] = {2, 4, 4}, f[3] = {12288, 18432, 24576};
    const double layers[3] = {30, 32, 40}, tables[3] = {1, 1, 2};
    const double released[3] = {3030371328.0, 7173923840.0, 15957889024.0};
    for (int i = 0; i < 3; i++) {
        ap_graph *gr = ap_test_hf_seq(cfg[i], 0, err);
        CHECK(gr != NULL);
        if (!gr)
            continue;
        double want = layers[i] * layer_params(h[i], g[i], f[i]) +
                      tables[i] * 49152 * h[i] + 2 * h[i];
        CHECK(gr->total_params == want);
        CHECK(gr->total_params == released[i]);
        ap_graph_free(gr);
    }
}

/* LayerNorm with a bias before attention and the MLP; the MLP is fc1, a
 * GELU and fc2, biases on both; every projection has a bias; every layer
 * attends within 4,096 keys; the LM head reads the embedding table. */
static void the_block_is_llama_attention_with_gpt_norms_and_mlp(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(starcoder2_3b, 8192, err);
    REQUIRE_OK(g ? 0 : 1, err);
    const ap_op *ln = ap_test_op(g, "l0.ln1");
    CHECK(ln && ln->kind == AP_OP_NORM && ln->sub == AP_NORM_LAYER && ln->ninputs == 3);
    const ap_op *act = ap_test_op(g, "l0.mlp.gelu");
    CHECK(act && act->kind == AP_OP_UNARY && act->sub == AP_UNARY_GELU);
    CHECK(ap_test_op(g, "l0.mlp.gate") == NULL);
    const char *biased[] = {"l0.q", "l0.k", "l0.v", "l0.o", "l0.mlp.fc1", "l0.mlp.fc2"};
    for (int i = 0; i < 6; i++) {
        const ap_op *op = ap_test_op(g, biased[i]);
        CHECK(op && op->ninputs == 3);
    }
    for (int i = 0; i < 30; i++)
        CHECK(ap_test_window(g, i) == 4096);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") < 0);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(!s.rmsnorm && !s.gated && s.linear_bias && s.qkv_bias && s.tied_embeddings);
    CHECK(s.window == 4096 && !s.window_freq[0]);
    ap_graph_free(g);
    /* Without use_bias no linear layer has one; a null window is none. */
    g = ap_test_hf_seq("{\"model_type\":\"starcoder2\",\"hidden_size\":256,"
                       "\"intermediate_size\":1024,\"max_position_embeddings\":8192,"
                       "\"num_attention_heads\":2,\"num_hidden_layers\":2,"
                       "\"num_key_value_heads\":1,\"sliding_window\":null,"
                       "\"use_bias\":false,\"vocab_size\":1000}", 8192, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.q")->ninputs == 2 && ap_test_op(g, "l0.mlp.fc2")->ninputs == 2);
    CHECK(ap_test_window(g, 0) == 0);
    ap_graph_free(g);
}

static void refused(const char *json, const char *needle)
{
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = NULL;
    CHECK(ap_graph_from_hf(json, strlen(json), "config.json", &o, &g, err) == AP_EINPUT);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
}

static void another_activation_is_refused(void)
{
    refused("{\"model_type\":\"starcoder2\",\"hidden_act\":\"silu\",\"hidden_size\":256,"
            "\"intermediate_size\":1024,\"max_position_embeddings\":512,"
            "\"num_attention_heads\":2,\"num_hidden_layers\":2,\"vocab_size\":1000}",
            "config.json: \"hidden_act\" is \"silu\"; starcoder2 is built with a GELU");
    refused("{\"model_type\":\"starcoder2\",\"hidden_size\":256,\"intermediate_size\":1024,"
            "\"max_position_embeddings\":512,\"num_attention_heads\":2,"
            "\"num_hidden_layers\":2,\"vocab_size\":1000,\"use_bias\":1}",
            "\"use_bias\" must be true or false, not a number");
}

/* Megatron-LM's defaults are StarCoder2's block (LayerNorm, GELU, biases,
 * a tied embedding), so its export adds the window and grouped-query
 * attention alone, and its rotary base rounded; those flags price the plan's step, and alone they build
 * its parameters and FLOPs. */
static void megatron_export_states_the_same_model(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(starcoder2_3b, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    char *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=2,mbs=1,gbs=64,sp=1", &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --window-size 4095,0\n");
    CHECK_STR_HAS(text, "  --num-query-groups 2\n");
    /* Megatron-LM's parser takes the base as an integer. */
    CHECK_STR_HAS(text, "  --rotary-base 999999\n");
    CHECK_STR_HAS(text, "# --rotary-base 999999 is the model's rotary base "
                        "999999.44203588134 to the nearest integer");
    CHECK(text && !strstr(text, "--swiglu") && !strstr(text, "--normalization") &&
          !strstr(text, "--disable-bias-linear") && !strstr(text, "--untie"));
    ap_test_flags_state_the_model(g, 8, &d, text, 49152, 4096);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

int main(void)
{
    RUN(each_size_has_its_released_parameter_count);
    RUN(the_block_is_llama_attention_with_gpt_norms_and_mlp);
    RUN(another_activation_is_refused);
    RUN(megatron_export_states_the_same_model);
    return DONE();
}
