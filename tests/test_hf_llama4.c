/* test_hf_llama4.c -- Llama 4 (Hugging Face model_type "llama4_text", and
 * "llama4", whose text_config it is): Llama-4-Scout's language model
 * against the closed form, and the block HF's modeling_llama4.py runs:
 * every fourth layer without rotary embedding (NoPE), the others' q and
 * k normed without weights, a routed expert and a shared one, Maverick's
 * dense layers between MoE ones (or where moe_layers lists them), and the
 * rotary layers' chunked attention (each query within its chunk of 8,192
 * tokens). */
#include "costmodel/costmodel.h"
#include "model.h"

static ap_graph *from_text(const char *json, int64_t seq, char *err)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = seq;
    ap_graph *g = NULL;
    if (ap_graph_from_hf(json, strlen(json), "llama4.json", &o, &g, err) != AP_OK)
        return NULL;
    return g;
}

/* Scout: 48 layers, each Q and O 5120 x 5120, K and V 5120 x 1024, two
 * norms, the router (5120 x 16), 16 experts and one shared expert of
 * 3 x 5120 x 8192; the untied embedding and head (202,048 x 5,120) and
 * the final norm: 107,769,861,120. Active: one expert of 16 a token,
 * 17.17 B (the name's 17B). */
static void llama4_scout_has_107_77b_parameters_17b_active(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    double h = 5120, mlp = 3 * h * 8192, v = 202048;
    double layer = 2 * h * h + 2 * h * 1024 + 2 * h + h * 16 + 16 * mlp + mlp;
    CHECK(g->total_params == 48 * layer + 2 * v * h + h);
    CHECK(g->total_params == 107769861120.0);
    CHECK_NEAR(ap_graph_active_params(g), g->total_params - 48 * 15 * mlp, 1e-15);
    CHECK_NEAR(ap_graph_active_params(g), 17.17e9, 0.001);
    ap_graph_free(g);
}

/* Layers 3, 7, ... (no_rope_layers 0) take no rotary embedding and no
 * norm on q and k; the others rotate and norm them without a weight. */
static void every_fourth_layer_takes_no_rotary(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    CHECK(ap_test_op(g, "l3.q_rot") == NULL && ap_test_op(g, "l3.q_norm") == NULL);
    CHECK(ap_test_op(g, "l47.k_rot") == NULL);
    const ap_op *norm = ap_test_op(g, "l0.q_norm");
    CHECK(norm && norm->ninputs == 1 && ap_test_op(g, "l0.q_rot") != NULL);
    CHECK(g->layer_class[3] == 3 && g->layer_class[7] == 3 && g->layer_class[4] == 0);
    CHECK(ap_test_op(g, "l0.shared.down") != NULL && ap_test_op(g, "l0.experts.down") != NULL);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.nope_layers == 12);
    ap_graph_free(g);
}

/* Llama4TextConfig reads an empty no_rope_layers as none given and fills
 * it in from no_rope_layer_interval ("no_rope_layers == [] is invalid as
 * we cannot have 0 layers"), as unsloth's published Llama-4-Scout-17B-16E
 * text_config states it: the same model as the list Meta's config spells
 * out, 12 NoPE layers and 107,769,861,120 parameters. */
static void an_empty_no_rope_layers_list_is_the_interval_rule(void)
{
    char err[AP_ERR_LEN];
    const char *cfg =
        "{\"architectures\":[\"Llama4ForConditionalGeneration\"],\"model_type\":\"llama4\","
        "\"text_config\":{\"attention_bias\":false,\"attention_chunk_size\":8192,"
        "\"head_dim\":128,\"hidden_size\":5120,\"intermediate_size\":8192,"
        "\"intermediate_size_mlp\":16384,\"max_position_embeddings\":262144,"
        "\"no_rope_layers\":[],\"num_attention_heads\":40,\"num_experts_per_tok\":1,"
        "\"num_hidden_layers\":48,\"num_key_value_heads\":8,\"num_local_experts\":16,"
        "\"rms_norm_eps\":1e-5,\"rope_scaling\":{\"factor\":8.0,\"high_freq_factor\":4.0,"
        "\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,"
        "\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,\"torch_dtype\":\"bfloat16\","
        "\"use_qk_norm\":true,\"vocab_size\":202048,\"interleave_moe_layer_step\":1,"
        "\"tie_word_embeddings\":false}}";
    ap_graph *g = from_text(cfg, 4096, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params == 107769861120.0);
    CHECK(ap_test_op(g, "l3.q_rot") == NULL && ap_test_op(g, "l2.q_rot") != NULL);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.nope_layers == 12);
    ap_graph_free(g);
}

/* Maverick's shape: interleave_moe_layer_step 2 routes layers 1, 3, ...,
 * and the others are dense MLPs intermediate_size_mlp wide. */
static void interleaved_moe_layers_leave_dense_ones_between(void)
{
    char err[AP_ERR_LEN];
    const char *cfg =
        "{\"model_type\":\"llama4_text\",\"hidden_size\":256,\"intermediate_size\":128,"
        "\"intermediate_size_mlp\":512,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":64,\"num_hidden_layers\":4,\"num_local_experts\":8,"
        "\"num_experts_per_tok\":1,\"interleave_moe_layer_step\":2,\"vocab_size\":1000,"
        "\"max_position_embeddings\":4096}";
    ap_graph *g = from_text(cfg, 1024, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.mlp.down") != NULL && ap_test_op(g, "l0.router") == NULL);
    CHECK(ap_test_op(g, "l1.router") != NULL && ap_test_op(g, "l3.router") != NULL);
    CHECK(ap_graph_dim(g, 'f')->size == 512 && ap_graph_dim(g, 'm')->size == 128);
    ap_graph_free(g);
}

/* The rotary layers attend within chunks of 8,192 tokens, the NoPE layers
 * over the whole sequence. At 20,480 tokens a chunked layer counts the
 * squares of its chunks, 2 x 8192^2 + 4096^2 scores a head, and its kernel
 * is the causal one over the chunks folded into the batch; context
 * parallelism is kept off it. */
static void rotary_layers_attend_within_chunks(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 20480);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    const ap_op *chunked = ap_test_op(g, "l0.attn"), *global = ap_test_op(g, "l3.attn");
    CHECK(chunked && chunked->chunk == 8192 && global && global->chunk == 0);
    double scores = 2 * 8192.0 * 8192 + 4096.0 * 4096;
    CHECK(ap_attention_chunk_scores(20480, 8192) == scores);
    if (chunked && global)
        CHECK_NEAR(global->flops - chunked->flops,
                   (2.0 * (128 + 128) + 5) * 40 * (20480.0 * 20480 - scores), 1e-12);
    ap_cluster c = ap_test_h100(8);
    CHECK(ap_cost_attention_chunked(&c, AP_BF16, 40, 20480, 8192, 128, 128, 0) ==
          ap_cost_attention(&c, AP_BF16, 80, 8192, 8192, 128, 128, 1) +
              ap_cost_attention(&c, AP_BF16, 40, 4096, 4096, 128, 128, 1));
    CHECK(ap_cost_attention_chunked(&c, AP_BF16, 40, 8192, 8192, 128, 128, 1) ==
          ap_cost_attention_backward(&c, AP_BF16, 40, 8192, 8192, 128, 128, 1));
    CHECK(ap_model_short_window(g, NULL) == 8192);
    /* The project format keeps the chunks. */
    char err[AP_ERR_LEN], *json = ap_graph_to_json(g);
    ap_graph *back = NULL;
    CHECK_STR_HAS(json, "\"chunk\":\t8192");
    CHECK(ap_graph_parse_json(json, strlen(json), "l4.json", &back, err) == AP_OK);
    CHECK(back && back->total_flops == g->total_flops);
    free(json);
    ap_graph_free(back);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Megatron-LM's export states the NoPE layers (--no-rope-freq 4, one after
 * three rotary ones) and the weightless q and k norms (--qk-l2-norm, not
 * --qk-layernorm); at 4,096 tokens the chunks of 8,192 split nothing, so
 * the flags state the whole model: checked against it they price the
 * plan's step, and alone they build its parameters and FLOPs. */
static void megatron_export_states_nope_and_qk_l2_norm(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    ap_plan_desc d;
    char *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 64, "tp=4,sp=1,ep=16,mbs=1,gbs=64", &d, NULL), "see above");
    /* plan.json states both for its reader too. */
    CHECK(d.shape.qk_l2 && d.shape.nope_layers && !strcmp(d.shape.nope_freq, "4"));
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --no-rope-freq 4\n");
    CHECK_STR_HAS(text, "  --qk-l2-norm\n");
    CHECK(text && !strstr(text, "--qk-layernorm"));
    ap_test_flags_state_the_model(g, 64, &d, text, 202048, 4096);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* At 16,384 tokens the rotary layers attend within two chunks each, which
 * no Megatron-LM flag states: the export is refused, saying so. */
static void chunks_shorter_than_the_sequence_are_refused_by_megatron(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 16384);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    ap_plan_desc d;
    char *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 64, "tp=4,sp=1,ep=16,mbs=1,gbs=64", &d, NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "Megatron-LM has no flag for chunked attention; the model attends "
                       "within chunks of 8192 tokens, shorter than the plan's 16384-token "
                       "sequence");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* torchtitan runs the user's model code, so its export says in a comment
 * which layers take no rotary embedding and that the others norm q and k
 * without a weight, as the plan was priced. */
static void torchtitan_export_states_nope_in_a_comment(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    ap_plan_desc d;
    char *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 64, "tp=4,ep=16,mbs=1,gbs=64,sp=1,recompute=full", &d,
                                     NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "# Its attention must take no rotary embedding on the layers "
                        "--no-rope-freq \"4\" marks (NoPE), and norm queries and keys "
                        "without a weight on the others");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* text_config.moe_layers, where a config has it, lists the layers that
 * route (Llama4TextConfig takes it over interleave_moe_layer_step, which
 * only fills it in where it is absent or null): [0, 3] routes layers 0
 * and 3 although the step of 2 would route 1 and 3, an empty list routes
 * none (every layer a dense MLP intermediate_size_mlp wide, no experts
 * dimension), and an index past the layers, one given twice or a list
 * that is no array is refused, naming the field. */
static void moe_layers_name_the_layers_that_route(void)
{
    char err[AP_ERR_LEN], cfg[1024];
    const char *base =
        "{\"model_type\":\"llama4_text\",\"hidden_size\":256,\"intermediate_size\":128,"
        "\"intermediate_size_mlp\":512,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":64,\"num_hidden_layers\":4,\"num_local_experts\":8,"
        "\"num_experts_per_tok\":1,\"interleave_moe_layer_step\":2,\"vocab_size\":1000,"
        "\"max_position_embeddings\":4096%s}";
    snprintf(cfg, sizeof cfg, base, ",\"moe_layers\":[0,3]");
    ap_graph *g = from_text(cfg, 1024, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.router") != NULL && ap_test_op(g, "l3.router") != NULL);
    CHECK(ap_test_op(g, "l1.router") == NULL && ap_test_op(g, "l1.mlp.down") != NULL);
    CHECK(ap_test_op(g, "l2.router") == NULL);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, base, ",\"moe_layers\":null");
    g = from_text(cfg, 1024, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.router") == NULL && ap_test_op(g, "l1.router") != NULL);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, base, ",\"moe_layers\":[]");
    g = from_text(cfg, 1024, err);
    REQUIRE_OK(g ? 0 : 1, err);
    for (int i = 0; i < g->nops; i++)
        CHECK(g->ops[i].kind != AP_OP_ROUTER);
    CHECK(ap_graph_label_of(g, AP_DIM_EXPERTS) == 0 && ap_graph_dim(g, 'f')->size == 512);
    CHECK(ap_graph_active_params(g) == g->total_params);
    ap_graph_free(g);
    const struct {
        const char *field, *want;
    } bad[] = {
        {",\"moe_layers\":[1,4]", "llama4.json: \"moe_layers\"[1] must be a layer index below 4"},
        {",\"moe_layers\":[1,-1]", "\"moe_layers\"[1] must be a layer index below 4"},
        {",\"moe_layers\":[1,2.5]", "\"moe_layers\"[1] must be a layer index below 4"},
        {",\"moe_layers\":[3,1,3]", "\"moe_layers\"[2] names layer 3 a second time"},
        {",\"moe_layers\":1", "\"moe_layers\" must be an array of layer indices, not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cfg, sizeof cfg, base, bad[i].field);
        g = NULL;
        ap_build_opts o;
        ap_build_opts_default(&o);
        CHECK(ap_graph_from_hf(cfg, strlen(cfg), "llama4.json", &o, &g, err) == AP_EINPUT);
        CHECK(g == NULL);
        CHECK_STR_HAS(err, bad[i].want);
    }
}

int main(void)
{
    RUN(llama4_scout_has_107_77b_parameters_17b_active);
    RUN(every_fourth_layer_takes_no_rotary);
    RUN(an_empty_no_rope_layers_list_is_the_interval_rule);
    RUN(interleaved_moe_layers_leave_dense_ones_between);
    RUN(moe_layers_name_the_layers_that_route);
    RUN(rotary_layers_attend_within_chunks);
    RUN(megatron_export_states_nope_and_qk_l2_norm);
    RUN(chunks_shorter_than_the_sequence_are_refused_by_megatron);
    RUN(torchtitan_export_states_nope_in_a_comment);
    return DONE();
}
