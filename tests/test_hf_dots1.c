/* test_hf_dots1.c -- dots.llm1 (Hugging Face model_type "dots1", rednote's
 * Dots1ForCausalLM: dots.llm1.base and .inst, one size): Qwen3's attention
 * (per-head query and key RMSNorms before the rotation, attention_bias on
 * Q, K, V and O) and DeepSeek-V3's MoE (dense layers before
 * first_k_dense_replace, n_shared_experts x moe_intermediate_size of
 * shared expert, a sigmoid router with a correction bias, group-limited
 * top-k, norm_topk_prob and routed_scaling_factor). The published size's
 * parameters, total and active, against the closed form and the published
 * counts; the blocks modeling_dots1.py runs; the router; Dots1Config's
 * defaults, its sliding window included; the configs that are refused. */
#include <stdlib.h>

#include "model.h"

/* Attention per layer: Q, K, V and O (4096 x 32 x 128 each: 32 key-value
 * heads), the per-head q and k norms (2 x 128) and the layer's two
 * RMSNorms. */
static const double attn = 4.0 * 4096 * 4096 + 2 * 128 + 2 * 4096;

/* A layer with `routed` of its 128 experts counted: the router (4096 x
 * 128), the experts and the shared expert (3 x 4096 x 1408 each; 3 x 4096
 * x 2816). */
static double moe_layer(double routed)
{
    return attn + 4096.0 * 128 + routed * 3 * 4096 * 1408 + 3.0 * 4096 * 2816;
}

/* The untied tables, 152,064 x 4,096 each. */
static const double tables = 2.0 * 152064 * 4096;

/* dots.llm1 (examples/hf/dots-llm1-inst.json): one dense layer of
 * 201,597,184 (SwiGLU of 10,944), 61 MoE layers of 2,316,837,120, the
 * tables and the final norm: 142,774,373,888, the published "142B".
 * Active, 6 experts of 128: 206,053,632 a MoE layer, 14,016,581,120 with
 * both tables (the input one counted whole, as ap_graph_active_params
 * counts it), the published "14B"; 12,770,872,832 without them. The
 * router's correction bias (128 a layer, a buffer) is left out. */
static void dots_llm1_has_142_8b_parameters_14_0b_active(void)
{
    ap_graph *g = ap_test_model("examples/hf/dots-llm1-inst.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/dots-llm1-inst.json did not load");
    double dense = attn + 3.0 * 4096 * 10944;
    CHECK(dense == 201597184.0 && moe_layer(128) == 2316837120.0);
    CHECK(g->total_params == dense + 61 * moe_layer(128) + tables + 4096);
    CHECK(g->total_params == 142774373888.0);
    double active = ap_graph_active_params(g);
    CHECK(moe_layer(6) == 206053632.0);
    CHECK(active == dense + 61 * moe_layer(6) + tables + 4096);
    CHECK(active == 14016581120.0);
    CHECK(active - tables == 12770872832.0);
    ap_graph_free(g);
}

static const char *input_shape(const ap_graph *g, const char *op, int k)
{
    const ap_op *o = ap_test_op(g, op);
    return o && k < o->ninputs ? g->tensors[o->inputs[k]].shape : "";
}

/* Dots1Attention norms each head of q and k (weight d, "unlike olmo, only
 * on the head dim") before the whole head is rotated; no projection has a
 * bias (attention_bias false). Layer 0 is dense, the others route to 6 of
 * 128 experts beside a shared expert 2 x 1,408 wide. Dots1TopkRouter:
 * sigmoid scores, the correction bias to pick, renormalised under
 * norm_topk_prob (true here), times routed_scaling_factor (2.5); n_group,
 * null in the published config, is one group: no group limit. */
static void qwen3_attention_and_deepseek_experts_behind_a_sigmoid_router(void)
{
    ap_graph *g = ap_test_model("examples/hf/dots-llm1-inst.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/dots-llm1-inst.json did not load");
    CHECK(!strcmp(input_shape(g, "l0.q_norm", 1), "d") && !strcmp(input_shape(g, "l0.k_norm", 1), "d"));
    const ap_op *rot = ap_test_op(g, "l0.q_rot");
    CHECK(rot && rot->inputs[0] == ap_graph_find_tensor(g, "l0.q_norm.y"));
    CHECK(ap_test_op(g, "l0.q")->ninputs == 2 && ap_test_op(g, "l0.o")->ninputs == 2);
    CHECK(ap_test_op(g, "l0.router") == NULL && ap_test_op(g, "l0.mlp.gate") != NULL);
    const ap_op *r = ap_test_op(g, "l61.router");
    CHECK(r && r->top_k == 6 && r->groups == 0);
    CHECK(r && r->route_score == AP_ROUTE_SIGMOID && r->route_bias && r->route_norm);
    CHECK(r && r->route_scale == 2.5 && !r->route_on_input);
    CHECK(ap_graph_dim(g, 'E')->size == 128 && ap_graph_dim(g, 'S')->size == 2816);
    CHECK(ap_test_window(g, 61) == 0);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.qk_norm && !s.qk_norm_wide && !s.qkv_bias && !s.other_bias && s.swiglu);
    CHECK(s.route_sigmoid && s.route_bias && !s.route_unnormalized && s.route_scale == 2.5);
    CHECK(!s.tied_embeddings && s.shared_ffn == 2816);
    ap_graph_free(g);
}

/* A small dots1 of 4 layers; `extra` adds fields. */
static ap_graph *small_dots(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"dots1\",\"hidden_size\":512,\"intermediate_size\":1024,"
             "\"max_position_embeddings\":8192,\"moe_intermediate_size\":128,"
             "\"n_routed_experts\":8,\"n_shared_experts\":1,\"num_attention_heads\":32,"
             "\"num_experts_per_tok\":2,\"num_hidden_layers\":4,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* Left out, the fields are Dots1Config's: 32 key-value heads, no dense
 * layer, the top k as scored (norm_topk_prob false) and not scaled (1.0),
 * one group, untied tables, and a window of 4096 on the layers from
 * max_window_layers (62) on, which a 4-layer model does not reach. */
static void defaults_are_dots1_configs(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_dots("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'g')->size == 32 && ap_test_op(g, "l0.router") != NULL);
    const ap_op *r = ap_test_op(g, "l0.router");
    CHECK(r && !r->route_norm && r->route_scale == 1 && r->route_bias && r->groups == 0);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") >= 0 && ap_test_window(g, 3) == 0);
    ap_graph_free(g);
    g = small_dots(",\"n_group\":4,\"topk_group\":2,\"topk_method\":\"noaux_tc\","
                   "\"scoring_func\":\"sigmoid\",\"first_k_dense_replace\":2",
                   err);
    REQUIRE_OK(g ? 0 : 1, err);
    r = ap_test_op(g, "l3.router");
    CHECK(r && r->groups == 4 && r->group_topk == 2);
    CHECK(ap_test_op(g, "l1.router") == NULL && ap_test_op(g, "l2.router") != NULL);
    ap_graph_free(g);
}

/* Dots1Attention takes the window where layer_types says
 * "sliding_attention"; without layer_types, Dots1Config's rule puts it on
 * the layers from max_window_layers on, sliding_window (4096) keys wide,
 * with no use_sliding_window to read; a null sliding_window is none. */
static void the_window_follows_max_window_layers_or_layer_types(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_dots(",\"max_window_layers\":2", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 1) == 0 && ap_test_window(g, 2) == 4096 && ap_test_window(g, 3) == 4096);
    ap_graph_free(g);
    g = small_dots(",\"max_window_layers\":2,\"sliding_window\":null", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 2) == 0);
    ap_graph_free(g);
    g = small_dots(",\"sliding_window\":1024,\"layer_types\":[\"sliding_attention\","
                   "\"full_attention\",\"sliding_attention\",\"full_attention\"]",
                   err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 1024 && ap_test_window(g, 1) == 0 && ap_test_window(g, 2) == 1024);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_dots(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* Dots1TopkRouter runs one router whatever topk_method and scoring_func
 * say, and Dots1MLP one activation: a config naming another describes a
 * model HF does not build. Each message names the file and the field. */
static void another_router_or_activation_is_refused(void)
{
    refused(",\"scoring_func\":\"softmax\"", "config.json: \"scoring_func\" is \"softmax\"; "
            "dots1 is built with \"sigmoid\" (Dots1TopkRouter's) only");
    refused(",\"topk_method\":\"greedy\"", "config.json: \"topk_method\" is \"greedy\"; dots1 "
            "is built with \"noaux_tc\"");
    refused(",\"hidden_act\":\"gelu\"", "\"hidden_act\" is \"gelu\"; dots1 is built with "
            "\"silu\"");
    refused(",\"n_group\":3,\"topk_group\":1",
            "\"n_group\" (3) does not divide \"n_routed_experts\" (8)");
    refused(",\"routed_scaling_factor\":0", "\"routed_scaling_factor\" is 0; it must be above 0");
    /* Dots1Config has no number of shared experts of its own (None). */
    char err[AP_ERR_LEN] = "";
    const char *none = "{\"model_type\":\"dots1\",\"hidden_size\":512,\"intermediate_size\":1024,"
                       "\"moe_intermediate_size\":128,\"n_routed_experts\":8,"
                       "\"num_attention_heads\":32,\"num_experts_per_tok\":2,"
                       "\"num_hidden_layers\":4,\"vocab_size\":1000}";
    ap_graph *g = ap_test_hf_seq(none, 512, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "config.json: \"n_shared_experts\" is missing");
    ap_graph_free(g);
}

int main(void)
{
    RUN(dots_llm1_has_142_8b_parameters_14_0b_active);
    RUN(qwen3_attention_and_deepseek_experts_behind_a_sigmoid_router);
    RUN(defaults_are_dots1_configs);
    RUN(the_window_follows_max_window_layers_or_layer_types);
    RUN(another_router_or_activation_is_refused);
    return DONE();
}
