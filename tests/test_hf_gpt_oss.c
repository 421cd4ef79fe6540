/* test_hf_gpt_oss.c -- GPT-OSS (Hugging Face model_type "gpt_oss"): the
 * parameters of gpt-oss-120b and gpt-oss-20b against the released counts,
 * and the block HF's modeling_gpt_oss.py runs: a bias on every attention
 * projection, a learned sink per head beside the softmax, a 128-key window
 * on every other layer, a router with a bias, and experts with biases whose
 * gate runs x * sigmoid(1.702 x) (Megatron-LM's --quick-geglu), the up
 * projection offset by 1 and both clamped at swiglu_limit. */
#include "model.h"

/* openai/gpt-oss-120b's config.json, its 36 layer_types left to the
 * config class's rule (sliding on even layers) that they spell out. */
static const char *gpt_oss_120b =
    "{\"model_type\":\"gpt_oss\",\"attention_bias\":true,\"experts_per_token\":4,"
    "\"head_dim\":64,\"hidden_size\":2880,\"intermediate_size\":2880,"
    "\"max_position_embeddings\":131072,\"num_attention_heads\":64,"
    "\"num_experts_per_tok\":4,\"num_hidden_layers\":36,\"num_key_value_heads\":8,"
    "\"num_local_experts\":128,\"sliding_window\":128,\"swiglu_limit\":7.0,"
    "\"tie_word_embeddings\":false,\"vocab_size\":201088}";

/* Per layer: Q and O (2880 x 4096 each, with biases of 4096 and 2880), K
 * and V (2880 x 512, biases 512), 64 sinks, two RMSNorms, the router
 * (2880 x 128 and a bias of 128), and 128 experts of gate and up (2880 x
 * 2880 each, biases 2880) and down (2880 x 2880, bias 2880); then the
 * untied embedding and head (201,088 x 2,880 each) and the final norm:
 * 116,829,156,672, the released count. Active: every expert parameter at
 * 4 of 128, the rest whole; without the input embedding, the 5.13 B the
 * model card states. */
static void gpt_oss_120b_has_116_83b_parameters_5_13b_active(void)
{
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = NULL;
    REQUIRE_OK(ap_graph_from_hf(gpt_oss_120b, strlen(gpt_oss_120b), "gpt-oss-120b.json",
                                &o, &g, err), err);
    double h = 2880, q = 64 * 64, kv = 8 * 64, v = 201088, E = 128;
    double attn = 2 * (h * q) + q + h + 2 * (h * kv + kv) + 64;
    double experts = E * (3 * h * h + 3 * h);
    double layer = attn + 2 * h + (h * E + E) + experts;
    CHECK_NEAR(g->total_params, 36 * layer + 2 * v * h + h, 1e-15);
    CHECK(g->total_params == 116829156672.0);
    double active = g->total_params - 36 * experts * (1 - 4 / E);
    CHECK_NEAR(ap_graph_active_params(g), active, 1e-15);
    CHECK(ap_graph_active_params(g) - v * h == 5132849472.0);
    ap_graph_free(g);
}

/* gpt-oss-20b: 24 layers of 32 experts; 20,914,757,184 parameters. */
static void gpt_oss_20b_has_20_91b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/gpt-oss-20b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/gpt-oss-20b.json did not load");
    CHECK(g->total_params == 20914757184.0);
    ap_graph_free(g);
}

static void gpt_oss_blocks_are_built_as_hf_runs_them(void)
{
    ap_graph *g = ap_test_model("examples/hf/gpt-oss-20b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/gpt-oss-20b.json did not load");
    const ap_op *attn = ap_test_op(g, "l0.attn"), *full = ap_test_op(g, "l1.attn");
    CHECK(attn && attn->ninputs == 4 && attn->window == 128);
    CHECK(full && full->ninputs == 4 && full->window == 0);
    if (attn) {
        const ap_tensor *sinks = &g->tensors[attn->inputs[3]];
        CHECK(sinks->role == AP_TENSOR_PARAM && !strcmp(sinks->shape, "n"));
    }
    CHECK(ap_test_op(g, "l0.q") && ap_test_op(g, "l0.q")->ninputs == 3);
    CHECK(ap_test_op(g, "l0.o") && ap_test_op(g, "l0.o")->ninputs == 3);
    CHECK(ap_test_op(g, "l0.router") && ap_test_op(g, "l0.router")->ninputs == 3);
    const ap_op *act = ap_test_op(g, "l0.experts.quick_gelu");
    CHECK(act && act->sub == AP_UNARY_QUICK_GELU);
    CHECK(ap_test_op(g, "l0.experts.down") && ap_test_op(g, "l0.experts.down")->ninputs == 3);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.quick_geglu && s.sinks && s.window == 128 && !strcmp(s.window_freq, "2"));
    CHECK(s.other_bias == 1 && s.qkv_bias && !s.qk_norm);
    ap_graph_free(g);
}

/* GptOssExperts clamps the gate above and the up projection both ways at
 * the limit and adds 1 to the up projection: no cost, kept on the graph for
 * the export (--glu-linear-offset, --activation-func-clamp-value). The
 * limit is the config's swiglu_limit, GptOssConfig's 7.0 where left out;
 * one that clamps nothing or everything is refused naming the field. */
static void gpt_oss_experts_keep_their_offset_and_clamp(void)
{
    ap_graph *g = ap_test_model("examples/hf/gpt-oss-20b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/gpt-oss-20b.json did not load");
    CHECK(g->glu_offset == 1 && g->glu_clamp == 7);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.glu_offset == 1 && s.glu_clamp == 7);
    /* The project format carries both (glu_offset, glu_clamp), so a model
     * saved with `autopar graph -o` exports the same flags. */
    char *json = ap_graph_to_json(g);
    ap_graph *back = NULL;
    char why[AP_ERR_LEN];
    CHECK(json && ap_graph_parse_json(json, strlen(json), "saved.json", &back, why) == AP_OK);
    CHECK(back && back->glu_offset == 1 && back->glu_clamp == 7);
    ap_graph_free(back);
    free(json);
    ap_graph_free(g);

    char cfg[1024], err[AP_ERR_LEN];
    const char *limits[] = {"", "\"swiglu_limit\":10.5,", "\"swiglu_limit\":0,",
                            "\"swiglu_limit\":-7,", "\"swiglu_limit\":\"7\","};
    const double want[] = {7, 10.5, 0, 0, 0};
    for (int i = 0; i < 5; i++) {
        snprintf(cfg, sizeof cfg,
                 "{\"model_type\":\"gpt_oss\",%s\"hidden_size\":256,"
                 "\"intermediate_size\":256,\"num_attention_heads\":4,"
                 "\"num_key_value_heads\":2,\"head_dim\":64,\"num_hidden_layers\":2,"
                 "\"num_local_experts\":4,\"num_experts_per_tok\":2,"
                 "\"vocab_size\":512,\"max_position_embeddings\":128}", limits[i]);
        g = ap_test_hf_seq(cfg, 128, err);
        if (want[i] > 0) {
            CHECK(g && g->glu_offset == 1 && g->glu_clamp == want[i]);
        } else {
            CHECK(g == NULL);
            CHECK_STR_HAS(err, "\"swiglu_limit\"");
        }
        ap_graph_free(g);
    }
}

int main(void)
{
    RUN(gpt_oss_120b_has_116_83b_parameters_5_13b_active);
    RUN(gpt_oss_20b_has_20_91b_parameters);
    RUN(gpt_oss_blocks_are_built_as_hf_runs_them);
    RUN(gpt_oss_experts_keep_their_offset_and_clamp);
    return DONE();
}
