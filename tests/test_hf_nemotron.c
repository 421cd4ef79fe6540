/* test_hf_nemotron.c -- the Nemotron family (Hugging Face model_type
 * "nemotron"): Nemotron-4 15B's and 340B's parameters against the closed
 * form and the published counts, the block NVIDIA's modeling_nemotron.py
 * runs (LayerNorm1P with bias, up -> squared ReLU -> down, half of each head
 * rotated, grouped-query attention, no biases, untied head), the squared
 * ReLU's FLOPs, bytes and saved bytes, the project format's round trip, the
 * Megatron-LM export and the configs that are refused. */
#include "model.h"

#include "planner/planner.h"

static ap_graph *from_text(const char *json, const char *source, char *err)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = NULL;
    if (ap_graph_from_hf(json, strlen(json), source, &o, &g, err) != AP_OK)
        return NULL;
    return g;
}

static const ap_tensor *tensor_named(const ap_graph *g, const char *name)
{
    int t = ap_graph_find_tensor(g, name);
    return t >= 0 ? &g->tensors[t] : NULL;
}

/* Per layer: Q and O (h x n d), K and V (h x g d), the MLP's up and down
 * (h x f each, not gated), two LayerNorm1P with weight and bias; then the
 * untied embedding and head (v x h each) and the final LayerNorm1P. */
static double nemotron_params(double L, double h, double n, double g, double d,
                              double f, double v)
{
    return L * (2 * h * n * d + 2 * h * g * d + 2 * h * f + 4 * h) + 2 * v * h + 2 * h;
}

/* Nemotron-4 15B (Parmar et al. 2024, arXiv:2402.16819, Table 1): 32 layers,
 * hidden 6144, 48 heads in 8 query groups, ffn 4h = 24576, vocabulary
 * 256,000. Per layer 2*6144*6144 + 2*6144*1024 + 2*6144*24576 + 4*6144 =
 * 390,094,848; times 32 = 12,483,035,136, plus 2*256000*6144 =
 * 3,145,728,000 for embedding and head and 12,288 for the final norm:
 * 15,628,775,424 in all. The paper states 12.5 billion non-embedding
 * parameters of its 15 billion. */
static void nemotron_4_15b_has_15_63b_parameters(void)
{
    ap_graph *g = ap_test_model("bench/validation/models/nemotron-4-15b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "nemotron-4-15b.json did not load");
    CHECK_NEAR(g->total_params, 15628775424.0, 0);
    CHECK_NEAR(g->total_params, nemotron_params(32, 6144, 48, 8, 128, 24576, 256000), 0);
    CHECK_NEAR(g->total_params - 2 * 256000.0 * 6144, 12.5e9, 0.002);
    CHECK_NEAR(ap_graph_active_params(g), g->total_params, 0);
    ap_graph_free(g);
}

/* Nemotron-4 340B (NVIDIA 2024, arXiv:2406.11704, Section 2): 96 layers,
 * hidden 18432, 96 heads in 8 query groups, ffn 73728; "9.4 billion
 * embedding parameters and 331.6 billion non-embedding parameters". The
 * closed form gives 9,437,184,000 and 331,592,011,776 (341,029,195,776 in
 * all). */
static void nemotron_4_340b_has_9_4b_embedding_and_331_6b_other_parameters(void)
{
    ap_graph *g = ap_test_model("bench/validation/models/nemotron-4-340b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "nemotron-4-340b.json did not load");
    double emb = 2 * 256000.0 * 18432;
    CHECK_NEAR(g->total_params, nemotron_params(96, 18432, 96, 8, 192, 73728, 256000), 0);
    CHECK_NEAR(g->total_params, 341029195776.0, 0);
    CHECK_NEAR(emb, 9.4e9, 0.005);
    CHECK_NEAR(g->total_params - emb, 331.6e9, 0.0005);
    ap_graph_free(g);
}

/* LayerNorm1P keeps LayerNorm's weight and bias; the MLP is up -> relu2 ->
 * down with no gate; no matmul has a bias; the head has its own weight. */
static void nemotron_block_is_layernorm1p_and_squared_relu_without_biases(void)
{
    ap_graph *g = ap_test_model("bench/validation/models/nemotron-4-15b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "nemotron-4-15b.json did not load");
    const ap_op *ln1 = ap_test_op(g, "l0.ln1"), *fin = ap_test_op(g, "final_norm");
    CHECK(ln1 && ln1->kind == AP_OP_NORM && ln1->sub == AP_NORM_LAYER1P && ln1->ninputs == 3);
    CHECK(ln1 && !strcmp(ap_op_kind_name(ln1), "layernorm1p"));
    CHECK(fin && fin->sub == AP_NORM_LAYER1P);
    CHECK(ap_test_op(g, "l0.mlp.gate") == NULL);
    const ap_op *act = ap_test_op(g, "l0.mlp.relu2");
    CHECK(act && act->kind == AP_OP_UNARY && act->sub == AP_UNARY_RELU2);
    CHECK(act && !strcmp(ap_op_kind_name(act), "relu2"));
    CHECK(!strcmp(tensor_named(g, "l0.mlp.up.w")->shape, "hf"));
    CHECK(!strcmp(tensor_named(g, "l0.mlp.down.w")->shape, "fh"));
    CHECK(act && act->inputs[0] == ap_graph_find_tensor(g, "l0.mlp.up.y"));
    int biased = 0, silu = 0, rms = 0;
    for (int i = 0; i < g->nops; i++) {
        biased += g->ops[i].kind == AP_OP_MATMUL && g->ops[i].ninputs == 3;
        silu += g->ops[i].kind == AP_OP_UNARY && g->ops[i].sub == AP_UNARY_SILU;
        rms += g->ops[i].kind == AP_OP_NORM && g->ops[i].sub == AP_NORM_RMS;
    }
    CHECK(biased == 0 && silu == 0 && rms == 0);
    CHECK(tensor_named(g, "lm_head.w") != NULL);
    ap_graph_free(g);
}

/* partial_rotary_factor 0.5 of a 128-wide head: the angle table is [s, 64]
 * and q and k keep their 8 query groups. */
static void nemotron_rotates_half_of_each_head(void)
{
    ap_graph *g = ap_test_model("bench/validation/models/nemotron-4-15b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "nemotron-4-15b.json did not load");
    CHECK(!strcmp(tensor_named(g, "rope.freqs")->shape, "sr"));
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 64);
    CHECK(ap_graph_dim(g, 'g') && ap_graph_dim(g, 'g')->size == 8);
    CHECK(!strcmp(tensor_named(g, "l0.k_rot.y")->shape, "bsgd"));
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK_NEAR(s.rotary_percent, 0.5, 0);
    CHECK(s.squared_relu && s.layernorm_1p && !s.swiglu && !s.rmsnorm && !s.linear_bias);
    ap_graph_free(g);
}

/* relu(x)^2 is one fused elementwise kernel over the b x s x f output of
 * up: it reads that tensor and writes one as large (bf16), computes a max
 * and a multiply per element, and keeps its input for the backward (the
 * gradient is 2 relu(x) dy). At s = 4096, f = 24576: 100,663,296 elements. */
static void squared_relu_reads_and_writes_bsf_and_saves_its_input(void)
{
    ap_graph *g = ap_test_model("bench/validation/models/nemotron-4-15b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "nemotron-4-15b.json did not load");
    const ap_op *act = ap_test_op(g, "l5.mlp.relu2");
    REQUIRE_OK(act ? 0 : 1, "no l5.mlp.relu2");
    double elems = 4096.0 * 24576;
    CHECK_NEAR(act->flops, 2 * elems, 0);
    CHECK_NEAR(act->bytes_moved, 2 * 2 * elems, 0);
    CHECK_NEAR(act->saved_bytes, 2 * elems, 0);
    CHECK(act->saves_in == 0x1 && act->saves_out == 0);
    ap_graph_free(g);
}

/* The project format states both new kinds by name and reads them back to
 * the same graph. */
static void nemotron_graph_round_trips_through_the_project_format(void)
{
    const char *cfg =
        "{\"model_type\": \"nemotron\", \"num_hidden_layers\": 2, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 1024,"
        " \"vocab_size\": 1000, \"max_position_embeddings\": 128}";
    char err[AP_ERR_LEN];
    ap_graph *g = from_text(cfg, "tiny.json", err), *back = NULL;
    REQUIRE_OK(g ? 0 : 1, err);
    char *json = ap_graph_to_json(g);
    REQUIRE_OK(json ? 0 : 1, "ap_graph_to_json failed");
    CHECK_STR_HAS(json, "\"relu2\"");
    CHECK_STR_HAS(json, "\"layernorm1p\"");
    int rc = ap_graph_parse_json(json, strlen(json), "tiny-model.json", &back, err);
    free(json);
    REQUIRE_OK(rc, err);
    CHECK_NEAR(back->total_params, g->total_params, 0);
    CHECK_NEAR(back->total_flops, g->total_flops, 0);
    CHECK_NEAR(back->total_saved_bytes, g->total_saved_bytes, 0);
    CHECK(ap_test_op(back, "l1.ln2")->sub == AP_NORM_LAYER1P);
    CHECK(ap_test_op(back, "l1.mlp.relu2")->sub == AP_UNARY_RELU2);
    ap_graph_free(back);
    ap_graph_free(g);
}

/* attention_bias and mlp_bias add the biases HF's Linear layers get: n d, g d
 * twice and h on the attention side, f and h on the MLP's. */
static void nemotron_biases_follow_attention_bias_and_mlp_bias(void)
{
    const char *cfg =
        "{\"model_type\": \"nemotron\", \"num_hidden_layers\": 1, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 1024,"
        " \"vocab_size\": 1000, \"max_position_embeddings\": 128,"
        " \"attention_bias\": true, \"mlp_bias\": true}";
    char err[AP_ERR_LEN];
    ap_graph *g = from_text(cfg, "biased.json", err);
    REQUIRE_OK(g ? 0 : 1, err);
    double h = 256, f = 1024;
    CHECK_NEAR(g->total_params,
               nemotron_params(1, h, 4, 2, 64, f, 1000) + 256 + 2 * 128 + h + f + h, 0);
    CHECK(tensor_named(g, "l0.mlp.up.b") && tensor_named(g, "l0.o.b"));
    ap_graph_free(g);
}

/* partial_rotary_factor 0 rotates nothing (HF's rotary dim is 0): no
 * rotary ops, and Megatron-LM's position embedding is "none". */
static void zero_rotary_factor_builds_no_rotary_ops(void)
{
    const char *cfg =
        "{\"model_type\": \"nemotron\", \"num_hidden_layers\": 1, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"intermediate_size\": 1024, \"vocab_size\": 1000,"
        " \"max_position_embeddings\": 128, \"partial_rotary_factor\": 0}";
    char err[AP_ERR_LEN];
    ap_graph *g = from_text(cfg, "norope.json", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.q_rot") == NULL && tensor_named(g, "rope.freqs") == NULL);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK_NEAR(s.rotary_percent, 0, 0);
    ap_graph_free(g);
}

/* NeMo's Nemotron-4 recipes run Megatron-Core with squared ReLU,
 * LayerNorm1p, half-rotary RoPE, 8 query groups, no linear biases and an
 * untied head; the export states each, and its flags price back to the
 * plan's step. */
static void nemotron_exports_squared_relu_and_layernorm_1p_to_megatron(void)
{
    ap_graph *g = ap_test_model("bench/validation/models/nemotron-4-15b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "nemotron-4-15b.json did not load");
    ap_plan_desc d;
    double step = 0;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=4,pp=1,sp=1,mbs=4,gbs=64", &d, &step), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--position-embedding-type rope\n  --rotary-percent 0.5\n");
    CHECK_STR_HAS(text, "--normalization LayerNorm\n  --apply-layernorm-1p\n");
    CHECK_STR_HAS(text, "--squared-relu\n");
    CHECK_STR_HAS(text, "--group-query-attention\n  --num-query-groups 8\n");
    CHECK_STR_HAS(text, "--ffn-hidden-size 24576\n");
    CHECK_STR_HAS(text, "--untie-embeddings-and-output-weights\n");
    CHECK_STR_HAS(text, "--disable-bias-linear\n");
    CHECK(text && !strstr(text, "--swiglu") && !strstr(text, "RMSNorm") &&
          !strstr(text, "--kv-channels"));
    const char *args = text ? strstr(text, "MEGATRON_ARGS=\"\n") : NULL;
    ap_megatron m;
    ap_cluster c;
    ap_plan p;
    ap_megatron_default(&m);
    REQUIRE_OK(args ? 0 : 1, "no MEGATRON_ARGS");
    REQUIRE_OK(ap_megatron_parse_args(args, &m, err), err);
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 16, 0, &c, err), err);
    REQUIRE_OK(ap_megatron_plan(g, &c, &m, &p, err), err);
    CHECK_NEAR(p.step_time, step, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* The flags are Nemotron's alone: Llama keeps SwiGLU and RMSNorm. */
static void llama_export_states_neither_squared_relu_nor_layernorm_1p(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "llama-3-8b.json did not load");
    ap_plan_desc d;
    double step = 0;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=8,pp=1,sp=1,mbs=1,gbs=64", &d, &step), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK(text && !strstr(text, "--squared-relu") && !strstr(text, "--apply-layernorm-1p") &&
          !strstr(text, "--normalization LayerNorm"));
    CHECK_STR_HAS(text, "--swiglu\n");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Mistakes name the file and the field; an activation other than relu2
 * would be another MLP and is refused rather than built as this one. */
static void malformed_nemotron_configs_name_file_and_field(void)
{
    char err[AP_ERR_LEN];
    CHECK(from_text("{\"model_type\": \"nemotron\", \"num_hidden_layers\": 2,"
                    " \"hidden_size\": 256, \"num_attention_heads\": 4, \"vocab_size\": 1000,"
                    " \"max_position_embeddings\": 128}", "nemo.json", err) == NULL);
    CHECK_STR_HAS(err, "nemo.json: \"intermediate_size\" is missing");
    CHECK(from_text("{\"model_type\": \"nemotron\", \"num_hidden_layers\": 2,"
                    " \"hidden_size\": 256, \"num_attention_heads\": 4, \"vocab_size\": 1000,"
                    " \"intermediate_size\": 1024, \"max_position_embeddings\": 128,"
                    " \"hidden_act\": \"gelu\"}", "nemo.json", err) == NULL);
    CHECK_STR_HAS(err, "nemo.json: \"hidden_act\" is \"gelu\"");
    CHECK(from_text("{\"model_type\": \"nemotron\", \"num_hidden_layers\": 2,"
                    " \"hidden_size\": 256, \"num_attention_heads\": 4, \"vocab_size\": 1000,"
                    " \"intermediate_size\": 1024, \"max_position_embeddings\": 128,"
                    " \"partial_rotary_factor\": \"half\"}", "nemo.json", err) == NULL);
    CHECK_STR_HAS(err, "nemo.json: \"partial_rotary_factor\" must be a number, not a string");
    CHECK(from_text("{\"model_type\": \"nemotron\", \"num_hidden_layers\": 2,"
                    " \"hidden_size\": 256, \"num_attention_heads\": 4, \"vocab_size\": 1000,"
                    " \"intermediate_size\": 1024, \"max_position_embeddings\": 128,"
                    " \"mlp_bias\": 1}", "nemo.json", err) == NULL);
    CHECK_STR_HAS(err, "nemo.json: \"mlp_bias\" must be true or false, not a number");
}

int main(void)
{
    RUN(nemotron_4_15b_has_15_63b_parameters);
    RUN(nemotron_4_340b_has_9_4b_embedding_and_331_6b_other_parameters);
    RUN(nemotron_block_is_layernorm1p_and_squared_relu_without_biases);
    RUN(nemotron_rotates_half_of_each_head);
    RUN(squared_relu_reads_and_writes_bsf_and_saves_its_input);
    RUN(nemotron_graph_round_trips_through_the_project_format);
    RUN(nemotron_biases_follow_attention_bias_and_mlp_bias);
    RUN(zero_rotary_factor_builds_no_rotary_ops);
    RUN(nemotron_exports_squared_relu_and_layernorm_1p_to_megatron);
    RUN(llama_export_states_neither_squared_relu_nor_layernorm_1p);
    RUN(malformed_nemotron_configs_name_file_and_field);
    return DONE();
}
