/* test_hf_glm.c -- GLM-4.5 (Hugging Face model_type "glm4_moe", Z.ai's
 * GLM-4.5, GLM-4.5-Air and GLM-4.6): Qwen3's grouped-query attention with
 * a bias on Q, K and V, per-head query and key norms under use_qk_norm and
 * rotary on half of each head, and DeepSeek-V3's MoE (dense layers before
 * first_k_dense_replace, a shared expert, group-limited routing). Each
 * published size's parameters, total and active, against the closed form
 * and the published counts, with and without the MTP module; the blocks
 * HF's modeling file runs; the configs that are refused; and Megatron-LM's
 * export, whose flags state the same model. */
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* zai-org/GLM-4.5's config.json (355B-A32B): GLM-4.7's sizes (nvidia's
 * GLM-4.7-NVFP4 transcribes them) at GLM-4.5's 131,072 positions, which
 * slime's glm4.5-355B-A32B.sh states too (3 dense and 89 MoE layers,
 * --qk-layernorm, 160 experts of 1,536, --rotary-percent 0.5). */
static const char *glm45 =
    "{\"architectures\":[\"Glm4MoeForCausalLM\"],\"attention_bias\":true,"
    "\"first_k_dense_replace\":3,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":5120,\"intermediate_size\":12288,\"max_position_embeddings\":131072,"
    "\"model_type\":\"glm4_moe\",\"moe_intermediate_size\":1536,\"n_group\":1,"
    "\"n_routed_experts\":160,\"n_shared_experts\":1,\"norm_topk_prob\":true,"
    "\"num_attention_heads\":96,\"num_experts_per_tok\":8,\"num_hidden_layers\":92,"
    "\"num_key_value_heads\":8,\"num_nextn_predict_layers\":1,"
    "\"partial_rotary_factor\":0.5,\"rms_norm_eps\":1e-05,\"rope_theta\":1000000,"
    "\"routed_scaling_factor\":2.5,\"tie_word_embeddings\":false,\"topk_group\":1,"
    "\"use_qk_norm\":true,\"vocab_size\":151552}";

/* Attention per layer: Q and O (h x 96 x 128 each), K and V (h x 8 x 128
 * each), the biases on Q, K and V (12,288 + 2 x 1,024) and, under
 * use_qk_norm, the two per-head norms (2 x 128). */
static double attention_params(double h, int qk_norm)
{
    double q = 96 * 128, kv = 8 * 128;
    return 2 * h * q + 2 * h * kv + q + 2 * kv + (qk_norm ? 2 * 128 : 0);
}

/* A MoE layer's feed-forward part with `routed` of its E experts counted:
 * the router (h x E), the experts and the one shared expert, each a SwiGLU
 * MLP 3 x h x moe wide. */
static double moe_params(double h, double E, double routed, double moe)
{
    return h * E + (routed + 1) * 3 * h * moe;
}

typedef struct {
    double h, layers, dense, ffn, E, top_k, moe;
    int qk_norm;
} glm_size;

/* The whole model with `routed` experts of each MoE layer counted (E for
 * the total, top_k for the active count): its dense and MoE layers, two
 * RMSNorms each, the untied embedding and head (151,552 x h each) and the
 * final norm. The MTP module is not in it (see below). */
static double model_params(const glm_size *s, double routed)
{
    double attn = attention_params(s->h, s->qk_norm) + 2 * s->h;
    return s->dense * (attn + 3 * s->h * s->ffn) +
           (s->layers - s->dense) * (attn + moe_params(s->h, s->E, routed, s->moe)) +
           2 * 151552 * s->h + s->h;
}

static const glm_size air = {4096, 46, 1, 10944, 128, 8, 1408, 0};
static const glm_size full = {5120, 92, 3, 12288, 160, 8, 1536, 1};

/* GLM-4.5-Air (examples/hf/glm-4.5-air.json): one dense layer of
 * 243,554,304 and 45 MoE layers of 2,341,492,736 (attention 109,066,240,
 * 128 experts of 1,408 and the shared one), with the tables
 * 106,852,245,504 parameters, the 106B it is published with. Active: 8
 * experts and the shared one, 265,312,256 a MoE layer, 13,424,123,904 with
 * the input table counted whole as ap_graph_active_params counts it,
 * 12,182,609,920 without the embedding and the head: the published 12B
 * counts neither. */
static void glm45_air_has_106_9b_parameters_12_2b_active_without_the_tables(void)
{
    ap_graph *g = ap_test_model("examples/hf/glm-4.5-air.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(g->total_params == model_params(&air, air.E));
    CHECK(g->total_params == 106852245504.0);
    double active = ap_graph_active_params(g);
    CHECK(active == model_params(&air, air.top_k));
    CHECK(active == 13424123904.0);
    CHECK(active - 2 * 151552 * air.h == 12182609920.0);
    ap_graph_free(g);
}

/* GLM-4.5: three dense layers of 325,083,392 and 89 MoE layers of
 * 3,935,625,472 (160 experts of 1,536, the shared one, the per-head q and
 * k norms), with the tables 352,797,814,784: 0.6% under the published
 * 355B. Active 33,632,251,904; without the embedding and the head
 * 32,080,359,424, the published 32B. */
static void glm45_has_352_8b_parameters_32_1b_active_without_the_tables(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(glm45, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(g->total_params == model_params(&full, full.E));
    CHECK(g->total_params == 352797814784.0);
    double active = ap_graph_active_params(g);
    CHECK(active == model_params(&full, full.top_k));
    CHECK(active == 33632251904.0);
    CHECK(active - 2 * 151552 * full.h == 32080359424.0);
    ap_graph_free(g);
}

/* num_nextn_predict_layers (1 in both configs) builds nothing, as for
 * DeepSeek-V3: the checkpoint's MTP layer is not in HF's modeling file,
 * and Megatron-LM trains without it unless asked. --mtp-layers 1 adds one
 * MoE layer like the last, the 2h x h projection and three norms:
 * 2,375,059,456 for the Air (109,227,304,960 in all) and 3,988,069,632
 * for GLM-4.5 (356,785,884,416). */
static void the_mtp_module_is_built_on_request_only(void)
{
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.mtp_layers = 1;
    ap_graph *a = ap_test_model_with("examples/hf/glm-4.5-air.json", &o);
    ap_graph *g = NULL;
    CHECK(ap_graph_from_hf(glm45, strlen(glm45), "config.json", &o, &g, err) == AP_OK);
    CHECK(a && g);
    if (a && g) {
        double h = air.h;
        double layer = attention_params(h, 0) + 2 * h + moe_params(h, air.E, air.E, air.moe);
        CHECK(a->total_params - 106852245504.0 == layer + 2 * h * h + 3 * h);
        CHECK(a->total_params == 109227304960.0);
        CHECK(g->total_params == 356785884416.0);
        CHECK(ap_test_op(a, "mtp0.router") != NULL);
    }
    ap_graph_free(a);
    ap_graph_free(g);
}

static const char *input_shape(const ap_graph *g, const char *op, int k)
{
    const ap_op *o = ap_test_op(g, op);
    return o && k < o->ninputs ? g->tensors[o->inputs[k]].shape : "";
}

/* The Air's block: Q, K and V with biases, O without; no q or k norm; a
 * rotary table of 64 of each head's 128 elements; layer 0 dense, the
 * others routed to 128 experts (top 8, no group limit) plus a shared
 * expert of 1,408. GLM-4.5 norms each head of q and k (weight d, as
 * Qwen3) before the rotation and keeps three dense layers. */
static void the_blocks_are_qwen3_attention_and_deepseek_experts(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_model("examples/hf/glm-4.5-air.json", 0);
    REQUIRE_OK(g ? 0 : 1, "see above");
    CHECK(ap_test_op(g, "l0.q")->ninputs == 3 && ap_test_op(g, "l0.k")->ninputs == 3);
    CHECK(ap_test_op(g, "l0.v")->ninputs == 3 && ap_test_op(g, "l0.o")->ninputs == 2);
    CHECK(ap_test_op(g, "l0.q_norm") == NULL);
    const ap_op *rot = ap_test_op(g, "l0.q_rot");
    CHECK(rot && rot->inputs[0] == ap_graph_find_tensor(g, "l0.q.y"));
    CHECK(!strcmp(input_shape(g, "l0.q_rot", 1), "sr"));
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 64);
    CHECK(ap_test_op(g, "l0.mlp.gate") != NULL && ap_test_op(g, "l0.router") == NULL);
    const ap_op *router = ap_test_op(g, "l45.router");
    CHECK(router && router->top_k == 8 && router->groups == 0);
    CHECK(ap_graph_dim(g, 'E')->size == 128 && ap_graph_dim(g, 'S')->size == 1408);
    CHECK(ap_test_op(g, "l1.shared.gate") != NULL && ap_test_op(g, "l1.moe_add") != NULL);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.qkv_bias && !s.other_bias && !s.qk_norm && s.rmsnorm && s.swiglu);
    CHECK(s.rotary_percent == 0.5 && !s.tied_embeddings && s.shared_ffn == 1408);
    ap_graph_free(g);
    g = ap_test_hf_seq(glm45, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(!strcmp(input_shape(g, "l0.q_norm", 1), "d"));
    rot = ap_test_op(g, "l0.q_rot");
    CHECK(rot && rot->inputs[0] == ap_graph_find_tensor(g, "l0.q_norm.y"));
    CHECK(ap_test_op(g, "l2.router") == NULL && ap_test_op(g, "l3.router") != NULL);
    ap_model_shape_of(g, &s);
    CHECK(s.qk_norm && !s.qk_norm_wide);
    ap_graph_free(g);
}

/* A small GLM with Glm4MoeConfig's defaults for what it leaves out: one
 * shared expert, one dense layer, half of each head rotated; `extra` adds
 * fields. */
static ap_graph *small_glm(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"glm4_moe\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"max_position_embeddings\":512,\"moe_intermediate_size\":128,"
             "\"n_routed_experts\":8,\"num_attention_heads\":4,\"num_experts_per_tok\":2,"
             "\"num_hidden_layers\":3,\"num_key_value_heads\":2,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* Group-limited routing is DeepSeek-V3's: each token's experts come from
 * its topk_group best of n_group groups, kept on the router. */
static void defaults_and_group_limited_routing(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_glm("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.router") == NULL && ap_test_op(g, "l1.router") != NULL);
    CHECK(ap_graph_dim(g, 'S') && ap_graph_dim(g, 'S')->size == 128);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 32);
    CHECK(ap_test_op(g, "l0.q")->ninputs == 2);
    ap_graph_free(g);
    g = small_glm(",\"n_group\":4,\"topk_group\":2,\"topk_method\":\"noaux_tc\","
                  "\"scoring_func\":\"sigmoid\"", err);
    REQUIRE_OK(g ? 0 : 1, err);
    const ap_op *router = ap_test_op(g, "l2.router");
    CHECK(router && router->groups == 4 && router->group_topk == 2);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_glm(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* Glm4MoeMoE runs one router, sigmoid scores and group-limited top-k, and
 * Glm4MoeMLP a SwiGLU: a config naming another describes a model HF does
 * not build. Each message names the file and the field. */
static void another_router_or_activation_is_refused(void)
{
    refused(",\"topk_method\":\"greedy\"", "config.json: \"topk_method\" is \"greedy\"; "
            "glm4_moe is built with \"noaux_tc\"");
    refused(",\"scoring_func\":\"softmax\"", "config.json: \"scoring_func\" is \"softmax\"; "
            "glm4_moe is built with \"sigmoid\"");
    refused(",\"hidden_act\":\"gelu\"", "config.json: \"hidden_act\" is \"gelu\"; glm4_moe "
            "is built with \"silu\"");
    refused(",\"use_qk_norm\":\"yes\"", "\"use_qk_norm\" must be true or false, not a string");
    refused(",\"partial_rotary_factor\":1.5", "\"partial_rotary_factor\" is 1.5; it must be "
            "between 0 and 1");
    refused(",\"n_group\":3,\"topk_group\":1",
            "\"n_group\" (3) does not divide \"n_routed_experts\" (8)");
    refused(",\"first_k_dense_replace\":-1", "\"first_k_dense_replace\" is -1");
}

/* Megatron-LM states the model with its own flags: --add-qkv-bias,
 * --qk-layernorm, --rotary-percent 0.5, the shared expert and the dense
 * first layer; those flags price the plan's step, and alone they build
 * its parameters and FLOPs. */
static void megatron_export_states_the_same_model(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_glm(",\"attention_bias\":true,\"use_qk_norm\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    char *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,sp=0", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --add-qkv-bias\n");
    CHECK_STR_HAS(text, "  --qk-layernorm\n");
    CHECK_STR_HAS(text, "  --rotary-percent 0.5\n");
    CHECK_STR_HAS(text, "  --moe-shared-expert-intermediate-size 128\n");
    CHECK_STR_HAS(text, "  --moe-layer-freq ");
    ap_test_flags_state_the_model(g, 8, &d, text, 1000, 512);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* GLM-4.5V ("glm4v_moe") is GLM-4.5-Air's language model under a vision
 * tower: its text_config ("glm4v_moe_text", Glm4vMoeTextConfig) builds
 * what the same fields build as a glm4_moe config, the vision tower left
 * out; another text model_type is refused. */
static void glm_4_5v_builds_its_air_language_model(void)
{
    const char *fields =
        "\"attention_bias\":true,\"first_k_dense_replace\":1,\"head_dim\":128,"
        "\"hidden_size\":4096,\"intermediate_size\":10944,\"max_position_embeddings\":65536,"
        "\"moe_intermediate_size\":1408,\"n_group\":1,\"n_routed_experts\":128,"
        "\"n_shared_experts\":1,\"norm_topk_prob\":true,\"num_attention_heads\":96,"
        "\"num_experts_per_tok\":8,\"num_hidden_layers\":46,\"num_key_value_heads\":8,"
        "\"partial_rotary_factor\":0.5,\"routed_scaling_factor\":1.0,\"topk_group\":1,"
        "\"vocab_size\":151552";
    char text[2048], wrapped[2400];
    snprintf(text, sizeof text, "{\"model_type\":\"glm4_moe\",%s}", fields);
    snprintf(wrapped, sizeof wrapped,
             "{\"model_type\":\"glm4v_moe\",\"vision_config\":{\"hidden_size\":1536},"
             "\"text_config\":{\"model_type\":\"glm4v_moe_text\",%s}}", fields);
    ap_graph *alone = ap_test_hf_text(text, "text.json");
    ap_graph *g = ap_test_hf_text(wrapped, "config.json");
    CHECK(alone && g);
    if (alone && g)
        CHECK(g->total_params == alone->total_params && g->total_flops == alone->total_flops &&
              g->nops == alone->nops);
    if (g)
        CHECK(g->total_params == 106852245504.0);
    ap_graph_free(alone);
    ap_graph_free(g);
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    const char *bad = "{\"model_type\":\"glm4v_moe\",\"text_config\":{\"model_type\":\"glm4_moe\"}}";
    g = NULL;
    CHECK(ap_graph_from_hf(bad, strlen(bad), "config.json", &o, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "\"text_config\".\"model_type\" must be \"glm4v_moe_text\"");
}

int main(void)
{
    RUN(glm45_air_has_106_9b_parameters_12_2b_active_without_the_tables);
    RUN(glm45_has_352_8b_parameters_32_1b_active_without_the_tables);
    RUN(the_mtp_module_is_built_on_request_only);
    RUN(the_blocks_are_qwen3_attention_and_deepseek_experts);
    RUN(defaults_and_group_limited_routing);
    RUN(another_router_or_activation_is_refused);
    RUN(megatron_export_states_the_same_model);
    RUN(glm_4_5v_builds_its_air_language_model);
    return DONE();
}
