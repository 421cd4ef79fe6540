/* test_hf_cohere2.c -- Cohere's Command R7B (Hugging Face model_type
 * "cohere2", Cohere2ForCausalLM): Command R's layer (one LayerNorm without
 * bias before attention and the MLP side by side, the logits scaled) with a
 * sliding window on three layers of every four and no rotary embedding on
 * the fourth, the full-attention layer. The published 8B's parameters
 * against the closed form, which layers have the window and which rotate,
 * Cohere2Config's rules, and the configs that are refused. */
#include <stdlib.h>

#include "model.h"

/* Per layer of Command R7B (hidden 4,096, 32 heads of 128, 8 key-value
 * heads, ffn 14,336): Q and O, K and V, the SwiGLU MLP and the one norm's
 * weight: 218,107,904. */
static const double layer = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024 + 3.0 * 4096 * 14336 + 4096;

/* CohereForAI/c4ai-command-r7b-12-2024
 * (examples/hf/c4ai-command-r7b-12-2024.json): 32 layers, the one tied
 * table (256,000 x 4,096) and the final norm: 8,028,033,024, the published
 * model's 8.03B (its safetensors hold no lm_head.weight). */
static void command_r7b_has_8_028_033_024_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/c4ai-command-r7b-12-2024.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/c4ai-command-r7b-12-2024.json did not load");
    CHECK(layer == 218107904.0);
    CHECK(g->total_params == 32 * layer + 256000.0 * 4096 + 4096);
    CHECK(g->total_params == 8028033024.0);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") < 0 && ap_test_op(g, "logit_scale"));
    ap_graph_free(g);
}

/* sliding_window_pattern 4: layers 0, 1 and 2 of every four attend within
 * 4,096 keys and rotate q and k; layer 3, 7, ... attends to the whole
 * sequence and takes no rotary embedding (Cohere2Attention rotates only
 * where its sliding_window is set). At 8,192 tokens the window is shorter
 * than the sequence. The shape detector sees 8 NoPE layers, the window on
 * the others, and the one shared norm. */
static void three_layers_of_four_slide_and_rotate_and_the_fourth_does_neither(void)
{
    ap_graph *g = ap_test_model("examples/hf/c4ai-command-r7b-12-2024.json", 8192);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/c4ai-command-r7b-12-2024.json did not load");
    CHECK(ap_test_window(g, 0) == 4096 && ap_test_window(g, 2) == 4096);
    CHECK(ap_test_window(g, 3) == 0 && ap_test_window(g, 31) == 0);
    CHECK(ap_test_window(g, 28) == 4096);
    CHECK(ap_test_op(g, "l2.q_rot") != NULL && ap_test_op(g, "l3.q_rot") == NULL);
    CHECK(ap_test_op(g, "l31.k_rot") == NULL && ap_test_op(g, "l30.k_rot") != NULL);
    const ap_op *ln1 = ap_test_op(g, "l3.ln1"), *gate = ap_test_op(g, "l3.mlp.gate");
    REQUIRE_OK(ln1 && gate ? 0 : 1, "l3.ln1 or l3.mlp.gate is missing");
    CHECK(gate->inputs[0] == ln1->outputs[0] && ln1->ninputs == 2);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.parallel_residual && s.nope_layers == 8 && s.window == 4096);
    CHECK(s.scaled_logits && s.tied_embeddings && !s.qk_norm);
    ap_graph_free(g);
}

/* A small Command R7B of 4 layers; `extra` adds fields. */
static ap_graph *small_cohere2(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"cohere2\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"max_position_embeddings\":4096,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"num_hidden_layers\":4,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 2048, err);
}

/* Cohere2Config's rules: the window 4,096 and the pattern 4 where left
 * out; layer_types over the pattern; a null window leaves every layer
 * without a window and so without rotary (no angle table at all); head_dim
 * is hidden / heads whatever the file says, as Cohere2Config sets it. */
static void cohere2_config_rules(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_cohere2("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 4096 && ap_test_window(g, 3) == 0);
    ap_graph_free(g);
    g = small_cohere2(",\"sliding_window\":512,\"layer_types\":[\"full_attention\","
                      "\"sliding_attention\",\"full_attention\",\"sliding_attention\"]", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 0 && ap_test_window(g, 1) == 512);
    CHECK(ap_test_op(g, "l0.q_rot") == NULL && ap_test_op(g, "l1.q_rot") != NULL);
    ap_graph_free(g);
    g = small_cohere2(",\"sliding_window_pattern\":2,\"sliding_window\":512", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 512 && ap_test_window(g, 1) == 0);
    ap_graph_free(g);
    g = small_cohere2(",\"sliding_window\":null", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 0 && ap_test_op(g, "l0.q_rot") == NULL);
    CHECK(ap_graph_find_tensor(g, "rope.freqs") < 0);
    ap_graph_free(g);
    g = small_cohere2(",\"head_dim\":32", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'd')->size == 64);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_cohere2(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* A sliding_window_pattern below 1, a layer_types that is not one known
 * type a layer, q and k norms Cohere2Attention does not have, and a
 * logit_scale below 0 are refused, naming the file and the field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"sliding_window_pattern\":0", "config.json: \"sliding_window_pattern\" is 0; "
            "it must be between 1 and");
    refused(",\"layer_types\":[\"sliding_attention\"]", "\"layer_types\" must be an array of "
            "4 strings, one per layer");
    refused(",\"use_qk_norm\":true", "\"use_qk_norm\" is true; cohere2 is built with no "
            "query and key norms");
    refused(",\"logit_scale\":-0.25", "\"logit_scale\" is -0.25; it must be above 0");
}

int main(void)
{
    RUN(command_r7b_has_8_028_033_024_parameters);
    RUN(three_layers_of_four_slide_and_rotate_and_the_fourth_does_neither);
    RUN(cohere2_config_rules);
    RUN(what_is_not_built_is_refused);
    return DONE();
}
