/* test_hf_seed_oss.c -- Seed-OSS (Hugging Face model_type "seed_oss",
 * ByteDance's SeedOssForCausalLM: Seed-OSS-36B Base, Base-woSyn and
 * Instruct, one size): Llama's block with grouped-query attention whose
 * heads are head_dim wide (80 x 128 = 10,240, twice the hidden size), a
 * bias on Q, K and V under attention_bias and on O only under
 * attention_out_bias, and mlp_bias on the SwiGLU MLP. The published size's
 * parameters against the closed form and the checkpoint's own count; the
 * blocks modeling_seed_oss.py runs; SeedOssConfig's defaults; the configs
 * that are refused; and Megatron-LM's export, whose flags state the same
 * model. */
#include <stdlib.h>

#include "model.h"

/* Per layer: Q and O (5120 x 80 x 128 each), K and V (5120 x 8 x 128
 * each), the biases on Q (10,240), K and V (1,024 each), the SwiGLU MLP
 * (3 x 5120 x 27648) and the two RMSNorms: 540,039,168. */
static double layer_params(void)
{
    double h = 5120, q = 80 * 128, kv = 8 * 128;
    return 2 * h * q + 2 * h * kv + q + 2 * kv + 3 * h * 27648 + 2 * h;
}

/* Seed-OSS-36B (examples/hf/seed-oss-36b.json): 64 layers, the untied
 * embedding and head (155,136 x 5,120 each) and the final norm:
 * 36,151,104,512 parameters. The published checkpoints' own count, from
 * their model.safetensors.index.json as a stored survey of the Base and
 * Instruct repositories lists it, is the same 36,151,104,512 (bf16 and
 * untied: every tensor is a parameter built here), the published "36B"
 * to the last parameter. */
static void seed_oss_36b_has_the_checkpoints_36_15b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/seed-oss-36b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/seed-oss-36b.json did not load");
    CHECK(layer_params() == 540039168.0);
    CHECK(g->total_params == 64 * layer_params() + 2.0 * 155136 * 5120 + 5120);
    CHECK(g->total_params == 36151104512.0);
    CHECK(ap_graph_active_params(g) == g->total_params);
    ap_graph_free(g);
}

/* SeedOssAttention: Q, K and V with a bias (attention_bias true), O
 * without (attention_out_bias false), rotary on the whole 128-wide head
 * after no norm; the MLP without biases (mlp_bias false); 80 query heads
 * on 8 key-value heads. */
static void q_k_and_v_carry_a_bias_and_o_does_not(void)
{
    ap_graph *g = ap_test_model("examples/hf/seed-oss-36b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/seed-oss-36b.json did not load");
    CHECK(ap_test_op(g, "l0.q")->ninputs == 3 && ap_test_op(g, "l0.k")->ninputs == 3);
    CHECK(ap_test_op(g, "l0.v")->ninputs == 3 && ap_test_op(g, "l0.o")->ninputs == 2);
    CHECK(ap_test_op(g, "l0.mlp.gate")->ninputs == 2 && ap_test_op(g, "l0.mlp.down")->ninputs == 2);
    CHECK(ap_test_op(g, "l0.q_norm") == NULL && ap_test_op(g, "l63.q_rot") != NULL);
    CHECK(ap_graph_dim(g, 'd')->size == 128 && ap_graph_dim(g, 'n')->size == 80);
    CHECK(ap_graph_dim(g, 'g')->size == 8 && ap_graph_dim(g, 'r') == NULL);
    CHECK(ap_test_window(g, 0) == 0);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.qkv_bias && !s.other_bias && !s.qk_norm && s.rmsnorm && s.swiglu);
    CHECK(s.rotary_percent == 1 && !s.tied_embeddings);
    ap_graph_free(g);
}

/* A small Seed-OSS; `extra` adds fields. */
static ap_graph *small_seed(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"seed_oss\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"max_position_embeddings\":512,\"num_attention_heads\":16,"
             "\"num_hidden_layers\":2,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* Left out, the fields are SeedOssConfig's: heads of 128 (not hidden /
 * heads, 16), 8 key-value heads, a bias on Q, K and V and none on O or the
 * MLP, untied tables. attention_out_bias and mlp_bias add theirs. */
static void defaults_are_seed_oss_configs(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_seed("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'd')->size == 128 && ap_graph_dim(g, 'g')->size == 8);
    CHECK(ap_test_op(g, "l0.q")->ninputs == 3 && ap_test_op(g, "l0.o")->ninputs == 2);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") >= 0);
    double base = g->total_params;
    ap_graph_free(g);
    g = small_seed(",\"attention_out_bias\":true,\"mlp_bias\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l1.o")->ninputs == 3 && ap_test_op(g, "l1.mlp.up")->ninputs == 3);
    CHECK(g->total_params - base == 2 * (256 + 2 * 512 + 256));
    ap_graph_free(g);
    g = small_seed(",\"attention_bias\":false", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.q")->ninputs == 2 && ap_test_op(g, "l0.k")->ninputs == 2);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_seed(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* SeedOssMLP gates with ACT2FN[hidden_act]: another activation would be
 * another MLP than the SwiGLU built. Each message names the file and the
 * field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"hidden_act\":\"gelu\"", "config.json: \"hidden_act\" is \"gelu\"; seed_oss is "
            "built with \"silu\"");
    refused(",\"attention_out_bias\":\"no\"", "config.json: \"attention_out_bias\" must be "
            "true or false, not a string");
    refused(",\"num_key_value_heads\":5", "\"num_attention_heads\" (16) is not a multiple of "
            "\"num_key_value_heads\" (5)");
    refused(",\"head_dim\":0", "\"head_dim\" is 0; it must be between 1 and");
}

/* Megatron-LM states the model with --add-qkv-bias (Q, K and V only, as
 * attention_out_bias false has it) and --kv-channels 128; those flags
 * alone build its parameters and FLOPs. */
static void megatron_export_states_the_same_model(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_seed("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    char *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=2,pp=1,mbs=1,gbs=8,sp=0", &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --add-qkv-bias\n");
    CHECK_STR_HAS(text, "  --kv-channels 128\n");
    ap_test_flags_state_the_model(g, 8, &d, text, 1000, 512);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

int main(void)
{
    RUN(seed_oss_36b_has_the_checkpoints_36_15b_parameters);
    RUN(q_k_and_v_carry_a_bias_and_o_does_not);
    RUN(defaults_are_seed_oss_configs);
    RUN(what_is_not_built_is_refused);
    RUN(megatron_export_states_the_same_model);
    return DONE();
}
