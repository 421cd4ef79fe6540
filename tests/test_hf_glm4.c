/* test_hf_glm4.c -- GLM-4-0414 (Hugging Face model_type "glm4",
 * Glm4ForCausalLM: GLM-4-9B-0414, GLM-4-32B-0414 and their Z1 reasoning
 * models): GLM's attention (a bias on Q, K and V, none on O; half of each
 * head rotated) with Gemma 2's sandwich of norms, a norm before and after
 * attention and the MLP, and the SwiGLU MLP whose gate and up projections
 * HF fuses (the same GEMMs). The published 9B's parameters against the
 * closed form and the checkpoint's count; the four norms; Glm4Config's
 * defaults; the configs that are refused. */
#include <stdlib.h>

#include "model.h"

/* Per layer of the 9B: Q (4096 x 4096 and a bias of 4,096), K and V (4096
 * x 2 x 128 and a bias of 256 each), O (4096 x 4096, no bias), the SwiGLU
 * MLP (3 x 4096 x 13696) and four RMSNorms: 203,969,024. */
static const double layer = 4096.0 * 4096 + 4096 + 2 * (4096.0 * 256 + 256) + 4096.0 * 4096 +
                            3.0 * 4096 * 13696 + 4 * 4096;

/* GLM-4-9B-0414 (examples/hf/glm-4-9b-0414.json): 40 layers, the untied
 * embedding and head (151,552 x 4,096 each) and the final norm:
 * 9,400,279,040, the official safetensors' count as stored notes on the
 * checkpoint give it (and llama.cpp's n_params for its GGUF). */
static void glm4_9b_0414_has_the_checkpoints_9_4b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/glm-4-9b-0414.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/glm-4-9b-0414.json did not load");
    CHECK(layer == 203969024.0);
    CHECK(g->total_params == 40 * layer + 2 * 151552.0 * 4096 + 4096);
    CHECK(g->total_params == 9400279040.0);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") >= 0);
    ap_graph_free(g);
}

/* Glm4DecoderLayer: input_layernorm before attention,
 * post_self_attn_layernorm on its output before the residual add,
 * post_attention_layernorm before the MLP and post_mlp_layernorm on its
 * output. Q, K and V have a bias and O none; rotary turns 64 of each
 * 128-wide head. Megatron-LM's layers have no norm on a sublayer's output,
 * which the shape says. */
static void each_sublayer_is_normed_before_and_after(void)
{
    ap_graph *g = ap_test_model("examples/hf/glm-4-9b-0414.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/glm-4-9b-0414.json did not load");
    const ap_op *pa = ap_test_op(g, "l5.post_attn_norm"), *pm = ap_test_op(g, "l5.post_mlp_norm");
    const ap_op *res1 = ap_test_op(g, "l5.res1"), *res2 = ap_test_op(g, "l5.res2");
    const ap_op *ln2 = ap_test_op(g, "l5.ln2");
    REQUIRE_OK(pa && pm && res1 && res2 && ln2 ? 0 : 1, "a norm or an add is missing");
    CHECK(pa->inputs[0] == ap_graph_find_tensor(g, "l5.o.y") && res1->inputs[1] == pa->outputs[0]);
    CHECK(ln2->inputs[0] == res1->outputs[0]);
    CHECK(pm->inputs[0] == ap_graph_find_tensor(g, "l5.mlp.y") && res2->inputs[1] == pm->outputs[0]);
    CHECK(ap_test_op(g, "l5.q")->ninputs == 3 && ap_test_op(g, "l5.o")->ninputs == 2);
    CHECK(ap_graph_dim(g, 'r')->size == 64);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.post_norm && s.qkv_bias && !s.other_bias && s.rotary_percent == 0.5);
    CHECK(s.rmsnorm && s.swiglu && !s.tied_embeddings && !s.qk_norm);
    ap_graph_free(g);
}

/* A small GLM-4 of 2 layers; `extra` adds fields. */
static ap_graph *small_glm4(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"glm4\",\"hidden_size\":512,\"intermediate_size\":1024,"
             "\"max_position_embeddings\":1024,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":2,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* Glm4Config's defaults where the config leaves them out: 2 key-value
 * heads of head_dim 128 (not hidden / heads), a bias on Q, K and V, half
 * of each head rotated, an untied head. */
static void glm4_config_defaults(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_glm4("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'g')->size == 2 && ap_graph_dim(g, 'd')->size == 128);
    CHECK(ap_graph_dim(g, 'r')->size == 64 && ap_graph_find_tensor(g, "lm_head.w") >= 0);
    double biased = g->total_params;
    ap_graph_free(g);
    g = small_glm4(",\"attention_bias\":false", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(biased - g->total_params == 2 * (4 * 128.0 + 2 * 2 * 128));
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_glm4(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* A rotary share that leaves an odd width, a bias flag of another type,
 * another activation than Glm4MLP's SiLU, or query heads that do not group
 * onto Glm4Config's 2 key-value heads are refused, naming the file and the
 * field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"partial_rotary_factor\":0.29", "config.json: \"partial_rotary_factor\" (0.29) "
            "of the head size 128 rotates an odd number of elements (37)");
    refused(",\"attention_bias\":1", "\"attention_bias\" must be true or false, not a number");
    refused(",\"hidden_act\":\"gelu\"", "\"hidden_act\" is \"gelu\"; glm4 is built with "
            "\"silu\"");
    char err[AP_ERR_LEN] = "";
    ap_graph *g = ap_test_hf_seq("{\"model_type\":\"glm4\",\"hidden_size\":384,"
                                 "\"intermediate_size\":1024,\"max_position_embeddings\":1024,"
                                 "\"num_attention_heads\":3,\"num_hidden_layers\":2,"
                                 "\"vocab_size\":1000}", 0, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "\"num_attention_heads\" (3) is not a multiple of "
                  "\"num_key_value_heads\" (2, the glm4 config class's default");
    ap_graph_free(g);
}

int main(void)
{
    RUN(glm4_9b_0414_has_the_checkpoints_9_4b_parameters);
    RUN(each_sublayer_is_normed_before_and_after);
    RUN(glm4_config_defaults);
    RUN(what_is_not_built_is_refused);
    return DONE();
}
