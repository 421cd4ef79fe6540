/* test_rotary.c -- the rotary position embedding (RoPE) as an op: which
 * Hugging Face families get one on q and k, how much of each head it
 * rotates, what it saves for backward, what it costs, how the planner may
 * split it, and that the model format round-trips it. */
#include "model.h"

static ap_graph *from_hf(const char *json, int64_t batch, int64_t seq, char *err)
{
    ap_build_opts o;
    ap_graph *g = NULL;
    ap_build_opts_default(&o);
    o.batch = batch;
    o.seq = seq;
    if (ap_graph_from_hf(json, strlen(json), "inline.json", &o, &g, err) != AP_OK)
        return NULL;
    return g;
}

static int rotary_ops(const ap_graph *g)
{
    int n = 0;
    for (int i = 0; i < g->nops; i++)
        n += g->ops[i].kind == AP_OP_UNARY && g->ops[i].sub == AP_UNARY_ROTARY;
    return n;
}

static const ap_tensor *input_of(const ap_graph *g, const ap_op *op, int i)
{
    return &g->tensors[op->inputs[i]];
}

static const ap_tensor *output_of(const ap_graph *g, const ap_op *op)
{
    return &g->tensors[op->outputs[0]];
}

/* Llama-style GQA: 8 query heads of 32 over 2 key/value heads. */
static const char *llama =
    "{\"model_type\": \"llama\", \"num_hidden_layers\": 3, \"hidden_size\": 256,"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 2,"
    " \"intermediate_size\": 512, \"vocab_size\": 1000,"
    " \"max_position_embeddings\": 512}";

static void llama_rotates_q_and_k_of_every_layer(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = from_hf(llama, 2, 128, err);
    REQUIRE_OK(g ? 0 : 1, err);
    double b = 2, s = 128, n = 8, gk = 2, d = 32;
    CHECK(rotary_ops(g) == 2 * 3);
    const ap_op *q = ap_test_op(g, "l1.q_rot"), *k = ap_test_op(g, "l1.k_rot");
    const ap_op *attn = ap_test_op(g, "l1.attn");
    CHECK(q && k && attn);
    if (!q || !k || !attn) {
        ap_graph_free(g);
        return;
    }
    CHECK(strcmp(ap_op_kind_name(q), "rotary") == 0);
    CHECK(strcmp(input_of(g, q, 0)->name, "l1.q.y") == 0);
    CHECK(strcmp(input_of(g, k, 0)->name, "l1.k.y") == 0);
    CHECK((double)output_of(g, q)->elems == b * s * n * d);
    CHECK((double)output_of(g, k)->elems == b * s * gk * d);
    /* Attention reads the rotated tensors. */
    CHECK(attn->inputs[0] == q->outputs[0]);
    CHECK(attn->inputs[1] == k->outputs[0]);
    /* The whole head is rotated: the angle table is [s, d] in fp32. */
    const ap_tensor *tab = input_of(g, q, 1);
    CHECK(strcmp(tab->name, "rope.freqs") == 0);
    CHECK(strcmp(tab->shape, "sd") == 0 && tab->dtype == AP_FP32);
    CHECK(tab->role == AP_TENSOR_INPUT);
    /* 3 FLOPs per element; bf16 x read and y written, plus the table. */
    CHECK_NEAR(q->flops, 3 * b * s * n * d, 1e-15);
    CHECK_NEAR(k->flops, 3 * b * s * gk * d, 1e-15);
    CHECK_NEAR(q->bytes_moved, 2 * 2 * b * s * n * d + 4 * s * d, 1e-15);
    CHECK_NEAR(k->bytes_moved, 2 * 2 * b * s * gk * d + 4 * s * d, 1e-15);
    ap_graph_free(g);
}

/* Rotary keeps nothing: its backward is the rotation by the opposite
 * angles, which needs only the table. Attention keeps the rotated q and k,
 * which are the size of the unrotated ones, so a layer keeps what it kept
 * before rotary was an op: with flash attention, per layer
 *   ln1 input, ln1 output (read by q, k, v), res1 (ln2's input), ln2 output
 *   (gate and up): 4 * 2bsh;  q, k, v, attention output: 2bs(nd + gd + gd + nd);
 *   log-sum-exp: 4bns;  gate (silu), up (mul), act (down): 3 * 2bsf. The
 *   silu output is not kept: the fused SwiGLU recomputes it from the gate. */
static void rotary_saves_nothing_and_attention_keeps_the_rotated_q_and_k(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = from_hf(llama, 2, 128, err);
    REQUIRE_OK(g ? 0 : 1, err);
    double b = 2, s = 128, h = 256, n = 8, gk = 2, d = 32, f = 512;
    const ap_op *q = ap_test_op(g, "l1.q_rot"), *attn = ap_test_op(g, "l1.attn");
    CHECK(q && attn);
    if (q && attn) {
        CHECK(q->saved_bytes == 0 && q->saves_in == 0 && q->saves_out == 0);
        CHECK(attn->saves_in == 0x7 && attn->saves_out == 0x1);
    }
    double expect = 4 * 2 * b * s * h + 2 * b * s * (2 * n * d + 2 * gk * d) +
                    4 * b * n * s + 3 * 2 * b * s * f;
    CHECK_NEAR(ap_test_layer_saved(g, 1), expect, 1e-15);
    ap_graph_free(g);
}

static const char *neox_fmt =
    "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, \"hidden_size\": 256,"
    " \"num_attention_heads\": 4, \"intermediate_size\": 1024, \"vocab_size\": 1000,"
    " \"max_position_embeddings\": 128%s}";

static ap_graph *neox(const char *extra, char *err)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg, neox_fmt, extra);
    return from_hf(cfg, 1, 128, err);
}

/* rotary_pct 0.25 of a 64-wide head rotates 16 elements: a quarter of the
 * FLOPs; the fused kernel still reads and writes whole heads (it copies the
 * part it does not rotate) and reads a [s, 16] table. */
static void neox_rotary_pct_prices_the_rotated_fraction(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = neox(", \"rotary_pct\": 0.25", err);
    REQUIRE_OK(g ? 0 : 1, err);
    double s = 128, n = 4, d = 64, r = 16;
    CHECK(rotary_ops(g) == 2 * 2);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 16);
    const ap_op *q = ap_test_op(g, "l0.q_rot");
    CHECK(q != NULL);
    if (q) {
        CHECK(strcmp(input_of(g, q, 1)->shape, "sr") == 0);
        CHECK_NEAR(q->flops, 3 * s * n * d / 4, 1e-15);
        CHECK_NEAR(q->flops, 3 * s * n * r, 1e-15);
        CHECK_NEAR(q->bytes_moved, 2 * 2 * s * n * d + 4 * s * r, 1e-15);
    }
    ap_graph_free(g);
}

static void neox_rotary_pct_defaults_to_a_quarter_and_one_rotates_all(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = neox("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    const ap_op *q = ap_test_op(g, "l0.q_rot");
    CHECK(q && q->flops == 3.0 * 128 * 4 * 16);
    ap_graph_free(g);
    g = neox(", \"rotary_pct\": 1.0", err);
    REQUIRE_OK(g ? 0 : 1, err);
    q = ap_test_op(g, "l0.q_rot");
    CHECK(q && q->flops == 3.0 * 128 * 4 * 64);
    CHECK(q && strcmp(input_of(g, q, 1)->shape, "sd") == 0);
    CHECK(ap_graph_dim(g, 'r') == NULL);
    ap_graph_free(g);
    g = neox(", \"rotary_pct\": 0", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(rotary_ops(g) == 0 && ap_graph_find_tensor(g, "rope.freqs") < 0);
    ap_graph_free(g);
}

/* transformers 5 saves the share in rope_parameters.partial_rotary_factor,
 * which wins over a top-level rotary_pct (GPTNeoXConfig setdefaults the
 * latter into it), and a Phi-3 config's partial_rotary_factor moves there
 * the same way. */
static void rope_parameters_partial_rotary_factor_is_the_share(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = neox(", \"rope_parameters\": {\"rope_theta\": 10000, "
                       "\"partial_rotary_factor\": 0.5}, \"rotary_pct\": 0.25", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 32);
    ap_graph_free(g);
    const char *phi3 =
        "{\"model_type\": \"phi3\", \"num_hidden_layers\": 1, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
        " \"intermediate_size\": 512, \"vocab_size\": 1000, \"max_position_embeddings\": 128,"
        " \"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.75}}";
    g = from_hf(phi3, 1, 128, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'r') && ap_graph_dim(g, 'r')->size == 48);
    ap_graph_free(g);
    CHECK(neox(", \"rope_parameters\": {\"partial_rotary_factor\": \"half\"}", err) == NULL);
    CHECK_STR_HAS(err, "\"rope_parameters\".\"partial_rotary_factor\" must be a number");
}

/* 0.11 * 64 = 7.04: HF's int() gives 7, which rotate_half cannot pair. */
static void neox_rotary_pct_out_of_range_or_odd_is_refused(void)
{
    char err[AP_ERR_LEN];
    CHECK(neox(", \"rotary_pct\": 1.5", err) == NULL);
    CHECK_STR_HAS(err, "inline.json: \"rotary_pct\" is 1.5; it must be between 0 and 1");
    CHECK(neox(", \"rotary_pct\": 0.11", err) == NULL);
    CHECK_STR_HAS(err, "odd number of elements (7)");
}

static void gpt2_has_learned_positions_and_no_rotary(void)
{
    const char *cfg =
        "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 128, \"n_head\": 4,"
        " \"vocab_size\": 1000, \"n_positions\": 256}";
    char err[AP_ERR_LEN];
    ap_graph *g = from_hf(cfg, 1, 128, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(rotary_ops(g) == 0);
    CHECK(ap_graph_find_tensor(g, "rope.freqs") < 0);
    const ap_op *attn = ap_test_op(g, "l0.attn");
    CHECK(attn && strcmp(input_of(g, attn, 0)->name, "l0.q.y") == 0);
    ap_graph_free(g);
}

/* MLA rotates only the qk_rope_head_dim part: r = 16 of q's d = 48 per
 * head, and the one rotary key per token ([b, s, r]) before it is
 * broadcast over the heads. */
static void deepseek_rotates_only_the_rope_part_of_q_and_k(void)
{
    const char *cfg =
        "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 1, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"intermediate_size\": 512, \"vocab_size\": 1000,"
        " \"max_position_embeddings\": 128, \"n_routed_experts\": 4,"
        " \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64,"
        " \"kv_lora_rank\": 64, \"q_lora_rank\": 96, \"qk_nope_head_dim\": 32,"
        " \"qk_rope_head_dim\": 16, \"v_head_dim\": 32, \"first_k_dense_replace\": 1,"
        " \"n_group\": 1}";
    char err[AP_ERR_LEN];
    ap_graph *g = from_hf(cfg, 1, 128, err);
    REQUIRE_OK(g ? 0 : 1, err);
    double s = 128, n = 4, d = 48, r = 16;
    CHECK(rotary_ops(g) == 2);
    const ap_op *q = ap_test_op(g, "l0.q_rot"), *k = ap_test_op(g, "l0.k_rot");
    const ap_op *attn = ap_test_op(g, "l0.attn"), *bc = ap_test_op(g, "l0.k_rope_heads");
    CHECK(q && k && attn && bc);
    if (q && k && attn && bc) {
        CHECK(strcmp(input_of(g, q, 1)->shape, "sr") == 0);
        CHECK_NEAR(q->flops, 3 * s * n * r, 1e-15);
        CHECK_NEAR(q->bytes_moved, 2 * 2 * s * n * d + 4 * s * r, 1e-15);
        CHECK(strcmp(output_of(g, k)->shape, "bsr") == 0);
        CHECK_NEAR(k->flops, 3 * s * r, 1e-15);
        CHECK(attn->inputs[0] == q->outputs[0]);
        CHECK(bc->inputs[0] == k->outputs[0]);
    }
    ap_graph_free(g);
}

/* Llama-3-8B's q at one 4096-token sequence on one H100 SXM: memory-bound,
 * so forward = bytes / (hbm_bw * hbm_eff) = (2 * 2 * 4096 * 32 * 128 + 4 *
 * 4096 * 128) / (3.35e12 * 0.9) = 69,206,016 / 3.015e12 = 22.95 us; the
 * backward moves the same bytes again. Split 8 ways by heads (at 4
 * sequences, to stay above the 4 us kernel floor), each GPU moves an eighth
 * of q but the whole table. */
static void rotary_time_is_its_bytes_over_hbm_bandwidth(void)
{
    const char *cfg =
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"hidden_size\": 4096,"
        " \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
        " \"intermediate_size\": 14336, \"vocab_size\": 128256,"
        " \"max_position_embeddings\": 8192}";
    char err[AP_ERR_LEN];
    ap_graph *g = from_hf(cfg, 1, 4096, err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_cluster c;
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    double bw = 3.35e12 * 0.9, q = 4096.0 * 32 * 128, tab = 4.0 * 4096 * 128;
    CHECK_NEAR(ap_cluster_hbm_bw(&c), bw, 1e-12);
    ap_mesh one, tp;
    ap_mesh_init(&one, 1, 1, 0, 8);
    ap_mesh_init(&tp, 1, 8, 0, 8);
    int op = ap_graph_find_op(g, "l0.q_rot");
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &one, .batch = 1, .nmicro = 1,
                      .zero = AP_ZERO_1};
    ap_strategy none = {{0, 0}, {0, 0}}, heads = {{0, 'n'}, {0, 0}};
    ap_op_cost oc;
    ap_price_op(&x, op, &none, &oc);
    CHECK_NEAR(oc.fwd, (2 * 2 * q + tab) / bw, 1e-12);
    CHECK_NEAR(oc.fwd, 22.954e-6, 1e-4);
    CHECK_NEAR(oc.bwd, oc.fwd, 1e-15);
    CHECK(oc.act_bytes == 0);
    x.mesh = &tp;
    x.batch = 4;
    ap_price_op(&x, op, &heads, &oc);
    CHECK_NEAR(oc.fwd, (2 * 2 * 4 * q / 8 + tab) / bw, 1e-12);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* rotate_half pairs element i of a head with i + d/2: no strategy splits
 * the head dim (nor a table's rotated width), while heads, batch and
 * sequence may be split. */
static void rotary_is_never_split_along_the_head_dim(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = from_hf(llama, 8, 128, err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_cluster c;
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    ap_mesh m;
    ap_mesh_init(&m, 2, 2, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &m, .batch = 8, .nmicro = 1,
                      .zero = AP_ZERO_1};
    ap_strategy st[AP_MAX_STRATEGIES];
    int n = ap_strategies(&x, ap_graph_find_op(g, "l0.q_rot"), st, AP_MAX_STRATEGIES);
    int heads = 0, dsplit = 0;
    for (int i = 0; i < n; i++)
        for (int a = 0; a < 2; a++) {
            heads += st[i].axis[a] == 'n';
            dsplit += st[i].axis[a] == 'd';
        }
    CHECK(n > 1 && heads > 0 && dsplit == 0);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static const char *model_fmt =
    "{\"format\": \"autopar-model/1\", \"name\": \"rope\","
    " \"dims\": {\"b\": {\"kind\": \"batch\", \"size\": 2},"
    "  \"s\": {\"kind\": \"seq\", \"size\": 64}, \"h\": {\"kind\": \"hidden\", \"size\": 64},"
    "  \"n\": {\"kind\": \"heads\", \"size\": 4}, \"d\": {\"kind\": \"head_dim\", \"size\": 16},"
    "  \"r\": {\"kind\": \"other\", \"size\": %d}},"
    " \"tensors\": [{\"name\": \"x\", \"shape\": \"bsh\", \"role\": \"input\"},"
    "  {\"name\": \"w\", \"shape\": \"hnd\", \"role\": \"parameter\"},"
    "  {\"name\": \"freqs\", \"shape\": \"sr\", \"role\": \"%s\", \"dtype\": \"fp32\"},"
    "  {\"name\": \"q\", \"shape\": \"bsnd\", \"role\": \"activation\"},"
    "  {\"name\": \"y\", \"shape\": \"bsnd\", \"role\": \"activation\"},"
    "  {\"name\": \"w2\", \"shape\": \"ndh\", \"role\": \"parameter\"},"
    "  {\"name\": \"o\", \"shape\": \"bsh\", \"role\": \"activation\"}],"
    " \"ops\": [{\"name\": \"proj\", \"kind\": \"matmul\", \"inputs\": [\"x\", \"w\"], \"outputs\": [\"q\"]},"
    "  {\"name\": \"rope\", \"kind\": \"rotary\", \"inputs\": [\"q\", \"freqs\"], \"outputs\": [\"y\"]},"
    "  {\"name\": \"out\", \"kind\": \"matmul\", \"inputs\": [\"y\", \"w2\"], \"outputs\": [\"o\"]}]}";

static int parse_model(int r, const char *role, ap_graph **g, char *err)
{
    char text[4096];
    snprintf(text, sizeof text, model_fmt, r, role);
    return ap_graph_parse_json(text, strlen(text), "m.json", g, err);
}

static void model_format_round_trips_a_rotary_op(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = NULL, *h = NULL;
    REQUIRE_OK(parse_model(8, "input", &g, err), err);
    const ap_op *op = ap_test_op(g, "rope");
    CHECK(op && op->kind == AP_OP_UNARY && op->sub == AP_UNARY_ROTARY);
    /* 8 of each head's 16 elements are rotated. */
    CHECK(op && op->flops == 3.0 * 2 * 64 * 4 * 8);
    char *text = ap_graph_to_json(g);
    CHECK_STR_HAS(text, "\"rotary\"");
    CHECK(text && ap_graph_parse_json(text, strlen(text), "again.json", &h, err) == AP_OK);
    const ap_op *back = h ? ap_test_op(h, "rope") : NULL;
    CHECK(back && back->sub == AP_UNARY_ROTARY && back->ninputs == 2);
    CHECK(back && op && back->flops == op->flops && back->bytes_moved == op->bytes_moved);
    free(text);
    ap_graph_free(h);
    ap_graph_free(g);
}

static void model_format_refuses_a_bad_rotary_table(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = NULL;
    CHECK(parse_model(8, "parameter", &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "m.json: ops[1].inputs[1]: rotary \"rope\": cos/sin table "
                       "\"freqs\" must be an input");
    CHECK(parse_model(7, "input", &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "rotated width 7 must be even and at most the head's 16");
    CHECK(parse_model(32, "input", &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "rotated width 32 must be even");
    CHECK(g == NULL);
}

int main(void)
{
    RUN(llama_rotates_q_and_k_of_every_layer);
    RUN(rotary_saves_nothing_and_attention_keeps_the_rotated_q_and_k);
    RUN(neox_rotary_pct_prices_the_rotated_fraction);
    RUN(neox_rotary_pct_defaults_to_a_quarter_and_one_rotates_all);
    RUN(neox_rotary_pct_out_of_range_or_odd_is_refused);
    RUN(rope_parameters_partial_rotary_factor_is_the_share);
    RUN(gpt2_has_learned_positions_and_no_rotary);
    RUN(deepseek_rotates_only_the_rope_part_of_q_and_k);
    RUN(rotary_time_is_its_bytes_over_hbm_bandwidth);
    RUN(rotary_is_never_split_along_the_head_dim);
    RUN(model_format_round_trips_a_rotary_op);
    RUN(model_format_refuses_a_bad_rotary_table);
    return DONE();
}
