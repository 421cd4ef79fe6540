/* test_hf_olmo.c -- the OLMo families (Hugging Face model_type "olmo",
 * "olmo2", "olmo3", "olmoe"): each config's parameters against the closed
 * form and the count its checkpoint is published with, the blocks HF's
 * modeling files run (OLMo 1's norms without weights; norms across all
 * heads of the query and key projections; OLMo 2 and 3's norms after each
 * sublayer and none before it; OLMo 3's sliding windows), how a norm across
 * heads is sharded and what that costs, and what the Megatron-LM export
 * cannot state. */
#include "model.h"

static const char *input_shape(const ap_graph *g, const char *op, int k)
{
    const ap_op *o = ap_test_op(g, op);
    return o && k < o->ninputs ? g->tensors[o->inputs[k]].shape : "";
}

/* allenai/OLMo-2-1124-7B's config.json. */
static const char *olmo2_7b =
    "{\"model_type\":\"olmo2\",\"attention_bias\":false,\"hidden_act\":\"silu\","
    "\"hidden_size\":4096,\"intermediate_size\":11008,\"max_position_embeddings\":4096,"
    "\"num_attention_heads\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":32,"
    "\"rms_norm_eps\":1e-06,\"rope_theta\":500000,\"tie_word_embeddings\":false,"
    "\"vocab_size\":100352}";

/* allenai/OLMo-2-0325-32B's. */
static const char *olmo2_32b =
    "{\"model_type\":\"olmo2\",\"hidden_size\":5120,\"intermediate_size\":27648,"
    "\"max_position_embeddings\":4096,\"num_attention_heads\":40,"
    "\"num_hidden_layers\":64,\"num_key_value_heads\":8,\"vocab_size\":100352}";

/* allenai/OLMoE-1B-7B-0924's. */
static const char *olmoe_1b_7b =
    "{\"model_type\":\"olmoe\",\"clip_qkv\":null,\"hidden_act\":\"silu\","
    "\"hidden_size\":2048,\"intermediate_size\":1024,\"max_position_embeddings\":4096,"
    "\"norm_topk_prob\":false,\"num_attention_heads\":16,\"num_experts\":64,"
    "\"num_experts_per_tok\":8,\"num_hidden_layers\":16,\"num_key_value_heads\":16,"
    "\"tie_word_embeddings\":false,\"vocab_size\":50304}";

/* A small OLMo 3 with Olmo3Config's window rule. */
static const char *olmo3_small =
    "{\"model_type\":\"olmo3\",\"hidden_size\":256,\"intermediate_size\":512,"
    "\"max_position_embeddings\":65536,\"num_attention_heads\":4,"
    "\"num_hidden_layers\":8,\"vocab_size\":1000,\"sliding_window\":128}";

/* OLMo 2 7B: per layer Q, K, V, O (4096 x 4096 each), the SwiGLU MLP
 * (3 x 4096 x 11008), the norms after attention and after the MLP (4096
 * each) and the query and key norms across all 32 heads (4096 each): 32
 * layers of 202,391,552; the untied embedding and head (100352 x 4096
 * each) and the final norm: 7,298,617,344, the 7.3B the checkpoint is
 * published with. */
static void olmo2_7b_has_7_30b_parameters_and_norms_only_after_each_sublayer(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(olmo2_7b, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    double h = 4096, layer = 4 * h * h + 3 * h * 11008 + 4 * h;
    CHECK(g->total_params == 32 * layer + 2 * 100352 * h + h);
    CHECK(g->total_params == 7298617344.0);
    /* No norm before attention or the MLP: the projections read the block
     * input, the MLP the first residual sum. */
    CHECK(ap_test_op(g, "l0.ln1") == NULL && ap_test_op(g, "l0.ln2") == NULL);
    const ap_op *q = ap_test_op(g, "l1.q"), *gate = ap_test_op(g, "l1.mlp.gate");
    CHECK(q && q->inputs[0] == ap_graph_find_tensor(g, "l0.out"));
    CHECK(gate && gate->inputs[0] == ap_graph_find_tensor(g, "l1.res1.y"));
    const ap_op *post = ap_test_op(g, "l1.post_attn_norm");
    CHECK(post && g->tensors[post->inputs[0]].producer == ap_graph_find_op(g, "l1.o"));
    const ap_op *res = ap_test_op(g, "l1.res2");
    CHECK(res && res->inputs[1] == ap_graph_find_tensor(g, "l1.post_mlp_norm.y"));
    /* The query norm spans heads and head dim, and the rotation reads it. */
    CHECK(!strcmp(input_shape(g, "l0.q_norm", 1), "nd"));
    CHECK(ap_norm_span(g, ap_test_op(g, "l0.q_norm")) == 2);
    CHECK(ap_norm_span(g, ap_test_op(g, "l0.post_attn_norm")) == 1);
    const ap_op *rot = ap_test_op(g, "l0.q_rot");
    CHECK(rot && rot->inputs[0] == ap_graph_find_tensor(g, "l0.q_norm.y"));
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.qk_norm && s.qk_norm_wide && s.post_norm && !s.qk_l2);
    CHECK(ap_test_window(g, 0) == 0);
    ap_graph_free(g);
}

/* OLMo 2 32B groups 40 query heads onto 8 key/value heads, so the key
 * norm spans 8 x 128 = 1,024: 64 layers of 487,604,224 (Q and O 5120 x
 * 5120, K and V 5120 x 1024, the MLP 3 x 5120 x 27648, norms 3 x 5120 +
 * 1024) and 1,027,609,600 outside them: 32,234,279,936, the 32.2B it is
 * published with. */
static void olmo2_32b_norms_its_keys_across_the_key_value_heads(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(olmo2_32b, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    double h = 5120, kv = 1024;
    double layer = 2 * h * h + 2 * h * kv + 3 * h * 27648 + 3 * h + kv;
    CHECK(g->total_params == 64 * layer + 2 * 100352 * h + h);
    CHECK(g->total_params == 32234279936.0);
    CHECK(!strcmp(input_shape(g, "l0.k_norm", 1), "gd"));
    ap_graph_free(g);
}

/* OLMoE 1B-7B: pre-norm layers like Llama's, every layer routed to 64
 * experts of FFN 1,024 (top 8), the query and key norms across all heads:
 * 16 layers of 419,569,664 and 206,047,232 outside them, 6,919,161,856,
 * the 6.9B it is published with. */
static void olmoe_has_6_92b_parameters_64_experts_and_norms_across_heads(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(olmoe_1b_7b, 0, err);
    CHECK(g != NULL);
    if (!g)
        return;
    double h = 2048, layer = 4 * h * h + h * 64 + 64 * 3 * h * 1024 + 4 * h;
    CHECK(g->total_params == 16 * layer + 2 * 50304 * h + h);
    CHECK(g->total_params == 6919161856.0);
    /* Active: attention, the router, 8 experts and the norms, 67,248,128 a
     * layer: 1,282,017,280, the 1.3B it is published with. */
    double active = 4 * h * h + h * 64 + 8 * 3 * h * 1024 + 4 * h;
    CHECK(ap_graph_active_params(g) == 16 * active + 2 * 50304 * h + h);
    CHECK(ap_graph_active_params(g) == 1282017280.0);
    CHECK(ap_test_op(g, "l0.ln1") != NULL && ap_test_op(g, "l0.post_attn_norm") == NULL);
    const ap_op *router = ap_test_op(g, "l15.router");
    CHECK(router && router->top_k == 8);
    CHECK(ap_graph_dim(g, 'E') && ap_graph_dim(g, 'E')->size == 64);
    CHECK(!strcmp(input_shape(g, "l0.q_norm", 1), "nd"));
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.qk_norm_wide && !s.post_norm);
    ap_graph_free(g);
}

/* OLMo 3 windows three layers of four (Olmo3Config: full attention where
 * (i + 1) % 4 == 0); layer_types decide where given, and a null window is
 * none, as the attention module reads it. */
static void olmo3_windows_three_layers_of_four(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(olmo3_small, 1024, err);
    CHECK(g != NULL);
    if (!g)
        return;
    for (int i = 0; i < 8; i++)
        CHECK(ap_test_window(g, i) == ((i + 1) % 4 ? 128 : 0));
    CHECK(ap_test_op(g, "l0.ln1") == NULL && ap_test_op(g, "l0.post_mlp_norm") != NULL);
    ap_graph_free(g);
    const char *listed =
        "{\"model_type\":\"olmo3\",\"hidden_size\":256,\"intermediate_size\":512,"
        "\"max_position_embeddings\":1024,\"num_attention_heads\":4,"
        "\"num_hidden_layers\":2,\"vocab_size\":1000,\"layer_types\":"
        "[\"full_attention\",\"sliding_attention\"]}";
    g = ap_test_hf_seq(listed, 0, err);
    CHECK(g != NULL);
    if (g)
        CHECK(ap_test_window(g, 0) == 0 && ap_test_window(g, 1) == 4096);
    ap_graph_free(g);
    const char *none =
        "{\"model_type\":\"olmo3\",\"hidden_size\":256,\"intermediate_size\":512,"
        "\"max_position_embeddings\":8192,\"num_attention_heads\":4,"
        "\"num_hidden_layers\":2,\"vocab_size\":1000,\"sliding_window\":null}";
    g = ap_test_hf_seq(none, 8192, err);
    CHECK(g != NULL);
    if (g)
        CHECK(ap_test_window(g, 0) == 0);
    ap_graph_free(g);
}

/* OLMo 1 (allenai/OLMo-7B-hf, OLMo-1B-hf): Llama's blocks with LayerNorms
 * that have neither weight nor bias, so a layer is its projections alone:
 * 7B, 32 layers of 4 x 4096^2 + 3 x 4096 x 11008 and an untied table each
 * way, 6,888,095,744; 1B, 16 layers of 4 x 2048^2 + 3 x 2048 x 8192 and a
 * tied table, 1,176,764,416: the released counts. Megatron-LM has no flag
 * for such norms; torchtitan's export says the model code must have them. */
static void olmo1_norms_have_no_weights(void)
{
    char err[AP_ERR_LEN];
    const char *fmt =
        "{\"model_type\":\"olmo\",\"hidden_size\":%d,\"intermediate_size\":%d,"
        "\"max_position_embeddings\":2048,\"num_attention_heads\":%d,"
        "\"num_hidden_layers\":%d,\"tie_word_embeddings\":%s,\"vocab_size\":50304}";
    char cfg[512];
    snprintf(cfg, sizeof cfg, fmt, 4096, 11008, 32, 32, "false");
    ap_graph *g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    double h = 4096;
    CHECK(g->total_params == 32 * (4 * h * h + 3 * h * 11008) + 2 * 50304 * h);
    CHECK(g->total_params == 6888095744.0);
    const ap_op *ln = ap_test_op(g, "l0.ln1");
    CHECK(ln && ln->kind == AP_OP_NORM && ln->sub == AP_NORM_LAYER && ln->ninputs == 1);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.norm_free && !s.qk_l2 && !s.qk_norm && !s.rmsnorm);
    ap_plan_desc d;
    double step = 0;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=8,sp=0,zero=0", &d, &step),
               "see above");
    CHECK(d.shape.norm_free);
    char *out = NULL;
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &out, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "the model's have neither (OLMo 1's non-parametric LayerNorm)");
    free(out);
    out = NULL;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &out, err), err);
    CHECK_STR_HAS(out, "# Its norms have neither weight nor bias (OLMo 1's)");
    free(out);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
    snprintf(cfg, sizeof cfg, fmt, 2048, 8192, 16, 16, "true");
    g = ap_test_hf_seq(cfg, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    h = 2048;
    CHECK(g->total_params == 16 * (4 * h * h + 3 * h * 8192) + 50304 * h);
    CHECK(g->total_params == 1176764416.0);
    ap_graph_free(g);
}

/* A small OLMo 2: 4 heads of 64, sequence 512. */
static ap_graph *small_olmo2(char *err)
{
    return ap_test_hf_seq("{\"model_type\":\"olmo2\",\"hidden_size\":256,"
                     "\"intermediate_size\":512,\"max_position_embeddings\":512,"
                     "\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                     "\"vocab_size\":1000}", 0, err);
}

static int splits(const ap_strategy *st, int n, char l)
{
    for (int i = 0; i < n; i++)
        if (st[i].axis[0] == l || st[i].axis[1] == l)
            return 1;
    return 0;
}

/* A norm across heads may split the heads, never the head dim (the last
 * label, as every norm keeps). Each rank then sums the squares of its part
 * of every row, and those sums are all-reduced, one fp32 a row, in the
 * forward and again in the backward: for 2 sequences of 512 tokens split
 * 4 ways by head, 4,096 bytes over the 4 ranks each way; with the batch
 * split 2 ways on the other axis, half of that. */
static void a_norm_across_heads_split_by_head_all_reduces_its_row_sums(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_olmo2(err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_cluster c;
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    ap_mesh m, m2;
    ap_mesh_init(&m, 1, 4, 0, 8);
    ap_mesh_init(&m2, 2, 4, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &m, .batch = 2, .nmicro = 1,
                      .zero = AP_ZERO_1};
    int qn = ap_graph_find_op(g, "l0.q_norm");
    ap_strategy st[AP_MAX_STRATEGIES];
    int n = ap_strategies(&x, qn, st, AP_MAX_STRATEGIES);
    CHECK(splits(st, n, 'n') && splits(st, n, 's') && !splits(st, n, 'd'));
    ap_strategy heads = {{0, 'n'}, {0, 0}};
    ap_op_cost oc;
    ap_price_op(&x, qn, &heads, &oc);
    double want = ap_cost_collective(&c, AP_COLL_ALLREDUCE, 4, 1, 2 * 512 * 4);
    CHECK(want > 0);
    CHECK_NEAR(oc.fwd_comm, want, 1e-12);
    CHECK_NEAR(oc.bwd_comm, want, 1e-12);
    ap_strategy seq = {{0, 's'}, {0, 0}};
    ap_price_op(&x, qn, &seq, &oc);
    CHECK(oc.fwd_comm == 0 && oc.bwd_comm == 0);
    x.mesh = &m2;
    ap_strategy both = {{'b', 'n'}, {0, 0}};
    ap_price_op(&x, qn, &both, &oc);
    CHECK_NEAR(oc.fwd_comm, ap_cost_collective(&c, AP_COLL_ALLREDUCE, 4, 1, 512 * 4), 1e-12);
    /* A norm within each head (Qwen3's) splits heads for nothing. */
    ap_graph *q3 = ap_test_hf_seq("{\"model_type\":\"qwen3\",\"hidden_size\":256,"
                             "\"intermediate_size\":512,\"max_position_embeddings\":512,"
                             "\"num_attention_heads\":4,\"num_key_value_heads\":4,"
                             "\"num_hidden_layers\":2,\"vocab_size\":1000}", 0, err);
    REQUIRE_OK(q3 ? 0 : 1, err);
    x.g = q3;
    x.mesh = &m;
    ap_price_op(&x, ap_graph_find_op(q3, "l0.q_norm"), &heads, &oc);
    CHECK(oc.fwd_comm == 0 && oc.bwd_comm == 0);
    ap_graph_free(q3);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Megatron-LM's tensor parallelism splits the query norm by head, as
 * it splits the projection before it: an estimate prices that with the
 * row sums all-reduced, so tp = 2 pays for them and tp = 1 does not. */
static void a_megatron_estimate_splits_the_norm_by_head(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_olmo2(err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_megatron m;
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse("tp=2,pp=1,mbs=1,gbs=8,sp=1", &m, err), err);
    ap_strategy s = ap_megatron_layout(g, &m, ap_graph_find_op(g, "l0.q_norm"));
    CHECK(s.axis[1] == 'n');
    ap_graph_free(g);
}

/* Megatron-LM's export refuses what no flag of it states: norms across
 * heads and norms after the sublayers; torchtitan's states them in
 * comments for the model code it runs. */
static void the_megatron_export_refuses_what_it_cannot_state(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_olmo2(err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    double step = 0;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=8,sp=0", &d, &step),
               "see above");
    /* plan.json states both for its reader. */
    CHECK(d.has_shape && d.shape.post_norm && d.shape.qk_norm_wide && !d.shape.qk_l2);
    char *out = NULL;
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &out, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "post-norms");
    free(out);
    ap_plan_desc_free(&d);
    /* torchtitan runs the user's model code: its export says what that
     * code must do. */
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=8,sp=0,zero=0", &d, &step),
               "see above");
    out = NULL;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &out, err), err);
    CHECK_STR_HAS(out, "# Its query and key norms must span all heads of their projections");
    CHECK_STR_HAS(out, "# Its layers must norm attention's and the MLP's outputs before the "
                       "residual adds (post-norms)");
    free(out);
    ap_plan_desc_free(&d);
    /* OLMoE norms before its sublayers, as Megatron-LM does; its norms
     * across heads are what the export cannot state. */
    ap_graph *moe = ap_test_hf_seq("{\"model_type\":\"olmoe\",\"hidden_size\":256,"
                              "\"intermediate_size\":128,\"max_position_embeddings\":512,"
                              "\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                              "\"num_experts\":8,\"num_experts_per_tok\":2,"
                              "\"vocab_size\":1000}", 0, err);
    REQUIRE_OK(moe ? 0 : 1, err);
    REQUIRE_OK(ap_test_megatron_desc(moe, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,sp=0", &d, &step),
               "see above");
    CHECK(d.shape.qk_norm_wide && !d.shape.post_norm);
    out = NULL;
    CHECK(ap_export(moe, &d, AP_LAUNCHER_MEGATRON, &out, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "across all heads");
    free(out);
    ap_plan_desc_free(&d);
    ap_graph_free(moe);
    ap_graph_free(g);
}

int main(void)
{
    RUN(olmo1_norms_have_no_weights);
    RUN(olmo2_7b_has_7_30b_parameters_and_norms_only_after_each_sublayer);
    RUN(olmo2_32b_norms_its_keys_across_the_key_value_heads);
    RUN(olmoe_has_6_92b_parameters_64_experts_and_norms_across_heads);
    RUN(olmo3_windows_three_layers_of_four);
    RUN(a_norm_across_heads_split_by_head_all_reduces_its_row_sums);
    RUN(a_megatron_estimate_splits_the_norm_by_head);
    RUN(the_megatron_export_refuses_what_it_cannot_state);
    return DONE();
}
