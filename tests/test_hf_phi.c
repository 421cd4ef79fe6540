/* test_hf_phi.c -- Phi-1.5 and Phi-2 (Hugging Face model_type "phi",
 * PhiForCausalLM): one LayerNorm with bias feeds attention and a GELU MLP
 * side by side, x + attn(ln(x)) + mlp(ln(x)); a partial rotary embedding;
 * a bias on every linear layer and on the head; qk_layernorm's per-head
 * LayerNorms. The published models' parameters against the closed form,
 * the one shared norm and what the shape detector makes of it, and the
 * configs that are refused. */
#include <stdlib.h>

#include "model.h"

/* Per layer of Phi-2 (hidden 2,560, 32 heads of 80, ffn 10,240): Q, K, V
 * and dense with their biases, fc1 and fc2 with theirs, and the one
 * LayerNorm's weight and bias: 78,671,360. */
static const double phi2_layer = 4.0 * (2560 * 2560 + 2560) + 2.0 * 2560 * 10240 + 10240 +
                                 2560 + 2 * 2560;

/* microsoft/phi-2 (examples/hf/phi-2.json): 32 layers, the untied
 * embedding and head (51,200 x 2,560 each), the head's bias and the final
 * LayerNorm: 2,779,683,840, the checkpoint's count (5,559,367,680 bytes of
 * fp16 in its safetensors index). */
static void phi_2_has_the_checkpoints_2_779_683_840_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/phi-2.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/phi-2.json did not load");
    CHECK(phi2_layer == 78671360.0);
    CHECK(g->total_params == 32 * phi2_layer + 2 * 51200.0 * 2560 + 51200 + 2 * 2560);
    CHECK(g->total_params == 2779683840.0);
    CHECK(ap_graph_find_tensor(g, "lm_head.b") >= 0);
    ap_graph_free(g);
}

/* microsoft/phi-1_5: Phi-2's config at hidden 2,048, 24 layers, ffn 8,192
 * and half of each 64-wide head rotated: 1,418,270,720 parameters, the
 * published 1.3B model's (1.42B with the untied head). */
static void phi_1_5_has_1_418_270_720_parameters(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(
        "{\"model_type\":\"phi\",\"architectures\":[\"PhiForCausalLM\"],"
        "\"hidden_act\":\"gelu_new\",\"hidden_size\":2048,\"intermediate_size\":8192,"
        "\"max_position_embeddings\":2048,\"num_attention_heads\":32,"
        "\"num_hidden_layers\":24,\"num_key_value_heads\":32,"
        "\"partial_rotary_factor\":0.5,\"qk_layernorm\":false,"
        "\"tie_word_embeddings\":false,\"vocab_size\":51200}", 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    double layer = 4.0 * (2048 * 2048 + 2048) + 2.0 * 2048 * 8192 + 8192 + 2048 + 2 * 2048;
    CHECK(g->total_params == 24 * layer + 2 * 51200.0 * 2048 + 51200 + 2 * 2048);
    CHECK(g->total_params == 1418270720.0);
    CHECK(ap_graph_dim(g, 'r')->size == 32);
    ap_graph_free(g);
}

/* The one norm: ln1's output is read by the query projection and by the
 * MLP's fc1, there is no ln2, and both residual adds come after the MLP
 * (attention's output joins the layer's input, then the MLP's). The shape
 * detector calls that a parallel residual, and sees the LayerNorm with
 * bias, the GELU MLP, the biases and 32 of each 80-wide head rotated. */
static void attention_and_the_mlp_read_one_norm(void)
{
    ap_graph *g = ap_test_model("examples/hf/phi-2.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/phi-2.json did not load");
    const ap_op *ln1 = ap_test_op(g, "l5.ln1"), *q = ap_test_op(g, "l5.q");
    const ap_op *fc1 = ap_test_op(g, "l5.mlp.fc1"), *res1 = ap_test_op(g, "l5.res1");
    const ap_op *res2 = ap_test_op(g, "l5.res2"), *head = ap_test_op(g, "lm_head");
    REQUIRE_OK(ln1 && q && fc1 && res1 && res2 && head ? 0 : 1, "an op is missing");
    CHECK(ap_test_op(g, "l5.ln2") == NULL);
    CHECK(ln1->sub == AP_NORM_LAYER && ln1->ninputs == 3);
    CHECK(q->inputs[0] == ln1->outputs[0] && fc1->inputs[0] == ln1->outputs[0]);
    CHECK(q->ninputs == 3 && fc1->ninputs == 3 && head->ninputs == 3);
    CHECK(res1->inputs[0] == ap_graph_find_tensor(g, "l4.out"));
    CHECK(res2->inputs[1] == ap_graph_find_tensor(g, "l5.mlp.y"));
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.parallel_residual && !s.rmsnorm && !s.gated && s.linear_bias && s.qkv_bias);
    CHECK(s.rotary_percent == 0.4 && !s.tied_embeddings && !s.qk_norm);
    ap_graph_free(g);
}

/* A small Phi of 2 layers; `extra` adds fields. */
static ap_graph *small_phi(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"phi\",\"hidden_size\":256,\"intermediate_size\":1024,"
             "\"max_position_embeddings\":1024,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":2,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* PhiConfig's defaults: half of each head rotated (32 of 64), an untied
 * head; qk_layernorm puts a LayerNorm with weight and bias on each head of
 * q and of k, 4 x 64 parameters a layer, before the rotation. */
static void phi_config_defaults_and_qk_layernorm(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_phi("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'r')->size == 32 && ap_graph_find_tensor(g, "lm_head.w") >= 0);
    double plain = g->total_params;
    ap_graph_free(g);
    g = small_phi(",\"qk_layernorm\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params - plain == 2 * 4 * 64.0);
    const ap_op *qn = ap_test_op(g, "l1.q_norm"), *qr = ap_test_op(g, "l1.q_rot");
    REQUIRE_OK(qn && qr ? 0 : 1, "l1.q_norm or l1.q_rot is missing");
    CHECK(qn->sub == AP_NORM_LAYER && qn->ninputs == 3 && qr->inputs[0] == qn->outputs[0]);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.qk_norm && !s.qk_norm_wide && s.parallel_residual);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_phi(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* Another activation than PhiMLP's GELU, a qk_layernorm that is not a
 * boolean, a rotary share out of [0, 1] or one that rotates an odd width,
 * and attention without PhiAttention's biases are refused, naming the
 * file and the field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"hidden_act\":\"relu\"", "config.json: \"hidden_act\" is \"relu\"; phi is "
            "built with a GELU");
    refused(",\"qk_layernorm\":\"yes\"", "config.json: \"qk_layernorm\" must be true or "
            "false, not a string");
    refused(",\"partial_rotary_factor\":1.5", "\"partial_rotary_factor\" is 1.5; it must be "
            "between 0 and 1");
    refused(",\"partial_rotary_factor\":0.3", "\"partial_rotary_factor\" (0.3) of the head "
            "size 64 rotates an odd number of elements (19)");
    refused(",\"attention_bias\":false", "\"attention_bias\" is false; phi is built with a "
            "bias on Q, K, V and dense");
}

int main(void)
{
    RUN(phi_2_has_the_checkpoints_2_779_683_840_parameters);
    RUN(phi_1_5_has_1_418_270_720_parameters);
    RUN(attention_and_the_mlp_read_one_norm);
    RUN(phi_config_defaults_and_qk_layernorm);
    RUN(what_is_not_built_is_refused);
    return DONE();
}
