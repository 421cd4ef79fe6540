/* test_hf_cohere.c -- Cohere's Command R (Hugging Face model_type
 * "cohere", CohereForCausalLM): one LayerNorm with a weight and no bias
 * feeds attention and the SwiGLU MLP side by side, x + attn(ln(x)) +
 * mlp(ln(x)), and logit_scale multiplies the logits before the loss. The
 * published 35B's parameters against the closed form, the one shared norm
 * and the scale, what the shape detector and the Megatron-LM export make of
 * them, and the configs that are refused. */
#include <stdlib.h>

#include "model.h"

/* Per layer of Command R (hidden 8,192, 64 heads of 128 and as many
 * key-value heads, ffn 22,528): Q, K, V and O, the SwiGLU MLP and the one
 * norm's weight, no bias anywhere: 822,091,776. */
static const double layer = 4.0 * 8192 * 8192 + 3.0 * 8192 * 22528 + 8192;

/* CohereForAI/c4ai-command-r-v01 (examples/hf/c4ai-command-r-v01.json): 40
 * layers, the one tied table (256,000 x 8,192) and the final norm:
 * 34,980,831,232, the published 35B model's count (69,961,662,464 bytes of
 * fp16 in its safetensors index; no lm_head.weight). */
static void command_r_v01_has_34_980_831_232_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/c4ai-command-r-v01.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/c4ai-command-r-v01.json did not load");
    CHECK(layer == 822091776.0);
    CHECK(g->total_params == 40 * layer + 256000.0 * 8192 + 8192);
    CHECK(g->total_params == 34980831232.0);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") < 0);
    ap_graph_free(g);
}

/* The one norm (CohereLayerNorm: a weight, no bias) is read by the query
 * projection and by the MLP's gate and up projections; there is no second
 * norm; the logits are scaled between the head and the loss. The shape
 * detector sees the parallel residual, a LayerNorm, SwiGLU, the scaled
 * logits and the tied table. */
static void attention_and_the_mlp_read_one_norm_and_the_logits_are_scaled(void)
{
    ap_graph *g = ap_test_model("examples/hf/c4ai-command-r-v01.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/c4ai-command-r-v01.json did not load");
    const ap_op *ln1 = ap_test_op(g, "l7.ln1"), *q = ap_test_op(g, "l7.q");
    const ap_op *gate = ap_test_op(g, "l7.mlp.gate"), *up = ap_test_op(g, "l7.mlp.up");
    const ap_op *ls = ap_test_op(g, "logit_scale"), *loss = ap_test_op(g, "loss");
    const ap_op *fin = ap_test_op(g, "final_norm");
    REQUIRE_OK(ln1 && q && gate && up && ls && loss && fin ? 0 : 1, "an op is missing");
    CHECK(ap_test_op(g, "l7.ln2") == NULL);
    CHECK(ln1->sub == AP_NORM_LAYER && ln1->ninputs == 2);
    CHECK(fin->sub == AP_NORM_LAYER && fin->ninputs == 2);
    CHECK(q->inputs[0] == ln1->outputs[0] && gate->inputs[0] == ln1->outputs[0] &&
          up->inputs[0] == ln1->outputs[0]);
    CHECK(ls->sub == AP_UNARY_SCALE && ls->inputs[0] == ap_graph_find_tensor(g, "lm_head.y"));
    CHECK(loss->inputs[0] == ls->outputs[0]);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.parallel_residual && !s.rmsnorm && s.swiglu && s.scaled_logits);
    CHECK(s.tied_embeddings && !s.scaled_embedding && !s.linear_bias && !s.qk_norm);
    CHECK(s.rotary_percent == 1);
    ap_graph_free(g);
}

/* The one-norm rule reads data flow (an MLP op reading what attention's
 * output does not reach): the families whose MLP follows attention, dense,
 * MoE, latent attention, sandwich and post norms, are not flagged. */
static void no_sequential_family_is_called_parallel(void)
{
    static const char *const models[] = {
        "examples/hf/llama-3-8b.json", "examples/hf/qwen3-30b-a3b.json",
        "examples/hf/deepseek-v2-lite.json", "examples/hf/gemma-2-9b.json",
        "examples/hf/olmo-2-7b.json", "examples/hf/granite-3.3-8b-instruct.json"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        ap_graph *g = ap_test_model(models[i], 1024);
        REQUIRE_OK(g ? 0 : 1, models[i]);
        ap_model_shape s;
        ap_model_shape_of(g, &s);
        CHECK(!s.parallel_residual);
        ap_graph_free(g);
    }
}

/* Megatron-LM's layer runs attention, then the MLP on its residual sum:
 * its export refuses the model for the parallel residual (checked before
 * the scaled logits), while DeepSpeed, which runs the user's model code,
 * writes its config. */
static void megatron_refuses_the_parallel_residual(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(
        "{\"model_type\":\"cohere\",\"hidden_size\":1024,\"intermediate_size\":2816,"
        "\"max_position_embeddings\":2048,\"num_attention_heads\":8,"
        "\"num_hidden_layers\":4,\"vocab_size\":32000}", 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    char *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=64,zero=0,overlap_grad=0", &d,
                                     NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK(text == NULL);
    CHECK_STR_HAS(err, "Megatron-LM's transformer layer runs attention and then the MLP; "
                       "the model runs them side by side");
    CHECK_STR_HAS(err, "parallel residual");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err), err);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* A small Command R of 2 layers; `extra` adds fields. */
static ap_graph *small_cohere(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"cohere\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"max_position_embeddings\":1024,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":2,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* CohereConfig's defaults: a tied table, as many key-value heads as query
 * heads, no bias; attention_bias puts one on Q, K, V and O. use_qk_norm
 * norms each head of q and of k with a weight and no bias before the
 * rotation, built with one head's weight (64 a norm; CohereLayerNorm holds
 * one a head, 4 x 64 for q here). */
static void cohere_config_defaults_bias_and_qk_norm(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_cohere("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'g')->size == 4 && ap_graph_find_tensor(g, "lm_head.w") < 0);
    double plain = g->total_params;
    ap_graph_free(g);
    g = small_cohere(",\"attention_bias\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params - plain == 2 * 4.0 * 256);
    ap_graph_free(g);
    g = small_cohere(",\"use_qk_norm\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params - plain == 2 * 2 * 64.0);
    const ap_op *kn = ap_test_op(g, "l0.k_norm"), *kr = ap_test_op(g, "l0.k_rot");
    REQUIRE_OK(kn && kr ? 0 : 1, "l0.k_norm or l0.k_rot is missing");
    CHECK(kn->sub == AP_NORM_LAYER && kn->ninputs == 2 && kr->inputs[0] == kn->outputs[0]);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_cohere(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* A logit_scale that is not a number above 0, another activation than
 * CohereMLP's SiLU and a use_qk_norm that is not a boolean are refused,
 * naming the file and the field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"logit_scale\":\"0.0625\"", "config.json: \"logit_scale\" must be a number, "
            "not a string");
    refused(",\"logit_scale\":0", "config.json: \"logit_scale\" is 0; it must be above 0");
    refused(",\"hidden_act\":\"gelu\"", "\"hidden_act\" is \"gelu\"; cohere is built with "
            "\"silu\"");
    refused(",\"use_qk_norm\":1", "\"use_qk_norm\" must be true or false, not a number");
}

int main(void)
{
    RUN(command_r_v01_has_34_980_831_232_parameters);
    RUN(attention_and_the_mlp_read_one_norm_and_the_logits_are_scaled);
    RUN(no_sequential_family_is_called_parallel);
    RUN(megatron_refuses_the_parallel_residual);
    RUN(cohere_config_defaults_bias_and_qk_norm);
    RUN(what_is_not_built_is_refused);
    return DONE();
}
