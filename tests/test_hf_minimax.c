/* test_hf_minimax.c -- MiniMax-M2 (Hugging Face model_type "minimax_m2",
 * MiniMaxM2ForCausalLM: MiniMax-M2, M2.1, M2.5 and M2.7 at one size):
 * grouped-query attention without biases whose query and key norms span
 * all heads of each projection (qk_norm_type "per_layer", OLMo 2's norm),
 * rotary on rotary_dim = 64 of each 128-wide head, and 256 SwiGLU experts
 * on every layer, top 8, behind a sigmoid router with a correction bias
 * and no shared expert. The published size's parameters, total and
 * active, against the closed form and the published counts; the blocks
 * HF's modeling file runs; the router; the configs that are refused; and
 * what the exports say. */
#include <stdlib.h>

#include "model.h"

static const char *input_shape(const ap_graph *g, const char *op, int k)
{
    const ap_op *o = ap_test_op(g, op);
    return o && k < o->ninputs ? g->tensors[o->inputs[k]].shape : "";
}

/* Per layer: Q and O (3072 x 48 x 128 each), K and V (3072 x 8 x 128
 * each), the norms of q and k across all heads (6,144 and 1,024), the two
 * RMSNorms of the block (3,072 each), the router (3072 x 256) and `routed`
 * of the 256 SwiGLU experts (3 x 3072 x 1536 each): 3,668,718,592 with all
 * of them. */
static double layer_params(double routed)
{
    double h = 3072, q = 48 * 128, kv = 8 * 128;
    return 2 * h * q + 2 * h * kv + q + kv + 2 * h + h * 256 + routed * 3 * h * 1536;
}

/* The two untied tables (200,064 x 3,072 each) and the final norm. */
static const double tables = 2.0 * 200064 * 3072, final_norm = 3072;

/* MiniMax-M2 (examples/hf/minimax-m2.json): 62 layers of 3,668,718,592
 * and the tables, 228,689,748,992 parameters: 0.6% under the published
 * "230B". The checkpoint's own count for this size (the safetensors of
 * M2.5 and M2.7, which share it) is 228,703,644,928: the same tensors
 * plus 13,895,936 the graph does not hold, the FP8 checkpoint's block
 * scales (weight_scale_inv, one fp32 per 128 x 128 block: 864 an expert,
 * 2,688 for Q, K, V and O) and the router's correction bias (256 a layer).
 * Active: 8 experts of 256, 158,086,144 a layer, 11,030,537,216 with the
 * input table counted whole as ap_graph_active_params counts it, and
 * 9,801,344,000 without the embedding and the head: the published "10B"
 * (9.8B in MiniMax's M2.7 card) counts neither. */
static void minimax_m2_has_228_7b_parameters_9_8b_active_without_the_tables(void)
{
    ap_graph *g = ap_test_model("examples/hf/minimax-m2.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/minimax-m2.json did not load");
    CHECK(layer_params(256) == 3668718592.0);
    CHECK(g->total_params == 62 * layer_params(256) + tables + final_norm);
    CHECK(g->total_params == 228689748992.0);
    double scales = 256 * 3 * 12 * 24 + 2 * 48 * 24 + 2 * 8 * 24, bias = 256;
    CHECK(g->total_params + 62 * (scales + bias) == 228703644928.0);
    double active = ap_graph_active_params(g);
    CHECK(layer_params(8) == 158086144.0);
    CHECK(active == 62 * layer_params(8) + tables + final_norm);
    CHECK(active == 11030537216.0);
    CHECK(active - tables == 9801344000.0);
    ap_graph_free(g);
}

/* Each layer projects q and k without a bias, norms each projection with
 * one RMSNorm across all its heads (weights nd and gd: 6,144 and 1,024),
 * rotates 64 of each head's 128 elements after the norm and routes every
 * token to 8 of 256 experts; no layer is dense and none has a shared
 * expert. The shape the exports read says the same. */
static void each_layer_norms_q_and_k_across_all_heads_and_rotates_half_of_each(void)
{
    ap_graph *g = ap_test_model("examples/hf/minimax-m2.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/minimax-m2.json did not load");
    CHECK(ap_test_op(g, "l0.q")->ninputs == 2 && ap_test_op(g, "l0.k")->ninputs == 2);
    CHECK(ap_test_op(g, "l0.v")->ninputs == 2 && ap_test_op(g, "l0.o")->ninputs == 2);
    CHECK(!strcmp(input_shape(g, "l0.q_norm", 1), "nd"));
    CHECK(!strcmp(input_shape(g, "l0.k_norm", 1), "gd"));
    CHECK(ap_norm_span(g, ap_test_op(g, "l0.q_norm")) == 2);
    CHECK(ap_norm_span(g, ap_test_op(g, "l0.k_norm")) == 2);
    const ap_op *rot = ap_test_op(g, "l0.q_rot");
    CHECK(rot && rot->inputs[0] == ap_graph_find_tensor(g, "l0.q_norm.y"));
    CHECK(!strcmp(input_shape(g, "l0.q_rot", 1), "sr"));
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 64);
    CHECK(ap_graph_dim(g, 'd')->size == 128 && ap_graph_dim(g, 'g')->size == 8);
    CHECK(ap_test_op(g, "l0.router") != NULL && ap_test_op(g, "l61.router") != NULL);
    CHECK(ap_test_op(g, "l0.mlp.gate") == NULL && ap_test_op(g, "l0.shared.gate") == NULL);
    CHECK(ap_graph_dim(g, 'f') == NULL && ap_graph_dim(g, 'S') == NULL);
    CHECK(ap_graph_dim(g, 'E')->size == 256 && ap_graph_dim(g, 'm')->size == 1536);
    CHECK(ap_test_window(g, 0) == 0);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.qk_norm && s.qk_norm_wide && !s.post_norm && !s.qk_l2);
    CHECK(!s.qkv_bias && !s.other_bias && s.rmsnorm && s.swiglu);
    CHECK(s.rotary_percent == 0.5 && !s.tied_embeddings && s.shared_ffn == 0);
    ap_graph_free(g);
}

/* A small MiniMax-M2; `extra` adds fields. Without head_dim and
 * num_key_value_heads it has MiniMaxM2Config's 128 and 8. */
static ap_graph *small_m2(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"minimax_m2\",\"hidden_size\":256,\"intermediate_size\":128,"
             "\"max_position_embeddings\":512,\"num_attention_heads\":16,"
             "\"num_experts_per_tok\":2,\"num_hidden_layers\":2,\"num_local_experts\":8,"
             "\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* MiniMaxM2TopKRouter: sigmoid scores, e_score_correction_bias added to
 * pick (not to weigh), the top k always renormalised, never scaled;
 * norm_topk_prob and routed_scaling_factor are not read. Without
 * use_routing_bias the bias is not there. */
static void the_router_is_a_sigmoid_with_a_correction_bias_renormalised_unscaled(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_model("examples/hf/minimax-m2.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/minimax-m2.json did not load");
    const ap_op *r = ap_test_op(g, "l30.router");
    CHECK(r && r->top_k == 8 && r->groups == 0);
    CHECK(r && r->route_score == AP_ROUTE_SIGMOID && r->route_bias && r->route_norm);
    CHECK(r && r->route_scale == 1 && !r->route_on_input);
    ap_graph_free(g);
    g = small_m2(",\"norm_topk_prob\":false,\"routed_scaling_factor\":2.5", err);
    REQUIRE_OK(g ? 0 : 1, err);
    r = ap_test_op(g, "l1.router");
    CHECK(r && r->route_norm && r->route_scale == 1 && r->route_bias);
    ap_graph_free(g);
    g = small_m2(",\"use_routing_bias\":false", err);
    REQUIRE_OK(g ? 0 : 1, err);
    r = ap_test_op(g, "l0.router");
    CHECK(r && r->route_score == AP_ROUTE_SIGMOID && !r->route_bias);
    ap_graph_free(g);
}

/* The rotated width: rotary_dim where the config states it, else the
 * factor (rope_parameters' as transformers 5 saves it, or the top-level
 * field), else half of each head, as MiniMaxM2Config sets it. The heads
 * default to MiniMaxM2Config's 128 wide, 8 key-value heads. */
static void the_rotated_width_is_rotary_dim_or_the_factor_and_half_by_default(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_m2("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'd')->size == 128 && ap_graph_dim(g, 'g')->size == 8);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 64);
    ap_graph_free(g);
    g = small_m2(",\"head_dim\":64,\"rotary_dim\":16", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 16);
    ap_graph_free(g);
    g = small_m2(",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":5000000,"
                 "\"partial_rotary_factor\":0.25}", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 32);
    ap_graph_free(g);
    g = small_m2(",\"rotary_dim\":64,\"partial_rotary_factor\":0.5", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 64);
    ap_graph_free(g);
    /* The whole head: the angle table is sd and there is no r label. */
    g = small_m2(",\"rotary_dim\":128", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'r') == NULL && !strcmp(input_shape(g, "l0.q_rot", 1), "sd"));
    ap_graph_free(g);
}

/* The MTP modules of the config (num_mtp_modules 3) build nothing, as
 * DeepSeek-V3's do not; --mtp-layers 1 adds one layer like the last (a
 * MoE layer, 3,668,718,592), the 2h x h projection and three norms:
 * 3,687,602,176 a module. */
static void the_mtp_modules_are_built_on_request_only(void)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.mtp_layers = 1;
    ap_graph *g = ap_test_model_with("examples/hf/minimax-m2.json", &o);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/minimax-m2.json did not load");
    double h = 3072;
    CHECK(g->total_params - 228689748992.0 == layer_params(256) + 2 * h * h + 3 * h);
    CHECK(ap_test_op(g, "mtp0.router") != NULL && ap_test_op(g, "mtp1.router") == NULL);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_m2(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* MiniMaxM2ForCausalLM builds one model whatever the config's MiniMax
 * fields say: a config naming another (MiniMax-Text-01's lightning
 * attention, per-head norms, a softmax router, a shared expert, biases)
 * describes a model HF does not build. Each message names the file and
 * the field. */
static void what_hf_does_not_build_is_refused(void)
{
    refused(",\"qk_norm_type\":\"per_head\"", "config.json: \"qk_norm_type\" is \"per_head\"; "
            "minimax_m2 is built with \"per_layer\"");
    refused(",\"use_qk_norm\":false", "config.json: \"use_qk_norm\" is false; minimax_m2 is "
            "built with the query and key norms");
    refused(",\"scoring_func\":\"softmax\"", "config.json: \"scoring_func\" is \"softmax\"; "
            "minimax_m2 is built with \"sigmoid\"");
    refused(",\"hidden_act\":\"gelu\"", "\"hidden_act\" is \"gelu\"; minimax_m2 is built with "
            "\"silu\"");
    refused(",\"attn_type_list\":[1,0]", "config.json: \"attn_type_list\"[1] is 0; minimax_m2 "
            "is built with full attention (1) on every layer");
    refused(",\"attn_type_list\":[1]", "\"attn_type_list\" must be an array of 2 1s");
    refused(",\"shared_intermediate_size\":512", "\"shared_intermediate_size\" is 512; "
            "minimax_m2 is built without a shared expert");
    refused(",\"attention_bias\":true", "\"attention_bias\" is true; minimax_m2 is built with "
            "no bias");
    refused(",\"use_routing_bias\":1", "\"use_routing_bias\" must be true or false, not a "
            "number");
    refused(",\"rotary_dim\":64,\"partial_rotary_factor\":0.25",
            "\"rotary_dim\" (64) and \"partial_rotary_factor\" (0.25 of the head size 128: "
            "32) disagree");
    refused(",\"rotary_dim\":63", "\"rotary_dim\" (63) is odd");
    refused(",\"rotary_dim\":256", "\"rotary_dim\" is 256; it must be between 0 and 128");
}

/* Megatron-LM's --qk-layernorm norms each head: its export refuses the
 * model and says why (the plan made for it says so first, in a note);
 * torchtitan's states the norms and the router for the model code it runs. */
static void the_exports_say_what_the_model_needs(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_m2("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    double step = 0;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,sp=0,zero=3", &d, &step),
               "see above");
    CHECK(d.has_shape && d.shape.qk_norm_wide);
    char *out = NULL;
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &out, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "across all heads");
    free(out);
    out = NULL;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &out, err), err);
    CHECK_STR_HAS(out, "# Its query and key norms must span all heads of their projections");
    CHECK_STR_HAS(out, "router score_func \"sigmoid\", route_norm True, route_scale 1");
    CHECK_STR_HAS(out, "with an expert bias");
    free(out);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

int main(void)
{
    RUN(minimax_m2_has_228_7b_parameters_9_8b_active_without_the_tables);
    RUN(each_layer_norms_q_and_k_across_all_heads_and_rotates_half_of_each);
    RUN(the_router_is_a_sigmoid_with_a_correction_bias_renormalised_unscaled);
    RUN(the_rotated_width_is_rotary_dim_or_the_factor_and_half_by_default);
    RUN(the_mtp_modules_are_built_on_request_only);
    RUN(what_hf_does_not_build_is_refused);
    RUN(the_exports_say_what_the_model_needs);
    return DONE();
}
