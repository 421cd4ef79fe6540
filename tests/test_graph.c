/* test_graph.c -- the builder and ap_graph_finalize() on a hand-built GPT:
 * parameter counts, FLOPs and saved activation bytes against their closed
 * forms (Megatron-LM and Korthikanti et al. 2022), the topological order,
 * layer classes, and the graphs that must be refused (layer tags against
 * the data flow among them). */
#include "model.h"

typedef struct {
    int64_t b, s, h, a, v;
    int layers, flash;
    double dropout;
} gpt_cfg;

static char err[AP_ERR_LEN];

#define ADD_T(g, name, shape, role) \
    ap_graph_add_tensor(g, name, shape, AP_BF16, role, err)

static int add_op(ap_graph *g, const char *name, ap_op_kind kind, int sub,
                  int layer, const char *in0, const char *in1,
                  const char *in2, const char *out)
{
    const char *in[3] = {in0, in1, in2};
    int n = in2 ? 3 : in1 ? 2 : 1;
    return ap_graph_add_op(g, name, kind, sub, layer, in, n, &out, 1, err);
}

static const char *nm(char *buf, int l, const char *what)
{
    snprintf(buf, 64, "l%d.%s", l, what);
    return buf;
}

/* One pre-LN GPT block in Korthikanti et al.'s form: ln1, q/k/v matmuls,
 * attention, out-proj, dropout, add, ln2, fc1, gelu, fc2, dropout, add. */
static void add_block(ap_graph *g, const gpt_cfg *c, int l, const char *x,
                      char *y)
{
    char t[24][64];
    static const char *acts[][2] = {
        {"ln1.y", "bsh"}, {"q", "bsnd"},  {"k", "bsnd"},   {"v", "bsnd"},
        {"o", "bsnd"},    {"proj", "bsh"}, {"drop1", "bsh"}, {"res1", "bsh"},
        {"ln2.y", "bsh"}, {"fc1", "bsf"}, {"gelu", "bsf"},  {"fc2", "bsh"},
        {"drop2", "bsh"}, {"out", "bsh"}};
    static const char *params[][2] = {
        {"ln1.g", "h"}, {"ln1.b", "h"}, {"wq", "hnd"}, {"bq", "nd"},
        {"wk", "hnd"},  {"bk", "nd"},   {"wv", "hnd"}, {"bv", "nd"},
        {"wo", "ndh"},  {"bo", "h"},    {"ln2.g", "h"}, {"ln2.b", "h"},
        {"w1", "hf"},   {"b1", "f"},    {"w2", "fh"},  {"b2", "h"}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        ADD_T(g, nm(t[0], l, acts[i][0]), acts[i][1], AP_TENSOR_ACT);
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        ADD_T(g, nm(t[0], l, params[i][0]), params[i][1], AP_TENSOR_PARAM);
#define N(i, s) nm(t[i], l, s)
    add_op(g, N(0, "ln1"), AP_OP_NORM, AP_NORM_LAYER, l, x, N(1, "ln1.g"),
           N(2, "ln1.b"), N(3, "ln1.y"));
    add_op(g, N(0, "q"), AP_OP_MATMUL, 0, l, N(1, "ln1.y"), N(2, "wq"),
           N(3, "bq"), N(4, "q"));
    add_op(g, N(0, "k"), AP_OP_MATMUL, 0, l, N(1, "ln1.y"), N(2, "wk"),
           N(3, "bk"), N(4, "k"));
    add_op(g, N(0, "v"), AP_OP_MATMUL, 0, l, N(1, "ln1.y"), N(2, "wv"),
           N(3, "bv"), N(4, "v"));
    int a = add_op(g, N(0, "attn"), AP_OP_ATTENTION, 0, l, N(1, "q"),
                   N(2, "k"), N(3, "v"), N(4, "o"));
    if (a >= 0) {
        g->ops[a].causal = 1;
        g->ops[a].flash = c->flash;
        g->ops[a].dropout_p = c->dropout;
    }
    add_op(g, N(0, "proj"), AP_OP_MATMUL, 0, l, N(1, "o"), N(2, "wo"),
           N(3, "bo"), N(4, "proj"));
    int d = add_op(g, N(0, "drop1"), AP_OP_DROPOUT, 0, l, N(1, "proj"), NULL,
                   NULL, N(2, "drop1"));
    if (d >= 0)
        g->ops[d].dropout_p = c->dropout;
    add_op(g, N(0, "add1"), AP_OP_BINARY, AP_BINARY_ADD, l, x, N(1, "drop1"),
           NULL, N(2, "res1"));
    add_op(g, N(0, "ln2"), AP_OP_NORM, AP_NORM_LAYER, l, N(1, "res1"),
           N(2, "ln2.g"), N(3, "ln2.b"), N(4, "ln2.y"));
    add_op(g, N(0, "fc1"), AP_OP_MATMUL, 0, l, N(1, "ln2.y"), N(2, "w1"),
           N(3, "b1"), N(4, "fc1"));
    add_op(g, N(0, "gelu"), AP_OP_UNARY, AP_UNARY_GELU, l, N(1, "fc1"), NULL,
           NULL, N(2, "gelu"));
    add_op(g, N(0, "fc2"), AP_OP_MATMUL, 0, l, N(1, "gelu"), N(2, "w2"),
           N(3, "b2"), N(4, "fc2"));
    d = add_op(g, N(0, "drop2"), AP_OP_DROPOUT, 0, l, N(1, "fc2"), NULL,
               NULL, N(2, "drop2"));
    if (d >= 0)
        g->ops[d].dropout_p = c->dropout;
    add_op(g, N(0, "add2"), AP_OP_BINARY, AP_BINARY_ADD, l, N(1, "res1"),
           N(2, "drop2"), NULL, N(3, "out"));
#undef N
    nm(y, l, "out");
}

/* Embedding (token + learned position), blocks, final norm, tied head and
 * loss. Returns a finalized graph, or NULL with err set. */
static ap_graph *build_gpt(const gpt_cfg *c)
{
    ap_graph *g = ap_graph_new("gpt-test");
    ap_graph_add_dim(g, 'b', "batch", AP_DIM_BATCH, c->b, err);
    ap_graph_add_dim(g, 's', "seq", AP_DIM_SEQ, c->s, err);
    ap_graph_add_dim(g, 'h', "hidden", AP_DIM_HIDDEN, c->h, err);
    ap_graph_add_dim(g, 'f', "ffn", AP_DIM_FFN, 4 * c->h, err);
    ap_graph_add_dim(g, 'n', "heads", AP_DIM_HEADS, c->a, err);
    ap_graph_add_dim(g, 'd', "head_dim", AP_DIM_HEAD_DIM, c->h / c->a, err);
    ap_graph_add_dim(g, 'v', "vocab", AP_DIM_VOCAB, c->v, err);
    ap_graph_add_tensor(g, "tokens", "bs", AP_INT32, AP_TENSOR_INPUT, err);
    ap_graph_add_tensor(g, "labels", "bs", AP_INT32, AP_TENSOR_INPUT, err);
    ADD_T(g, "wte", "vh", AP_TENSOR_PARAM);
    ADD_T(g, "wpe", "sh", AP_TENSOR_PARAM);
    ADD_T(g, "tok", "bsh", AP_TENSOR_ACT);
    ADD_T(g, "x0", "bsh", AP_TENSOR_ACT);
    add_op(g, "embed", AP_OP_EMBEDDING, 0, -1, "tokens", "wte", NULL, "tok");
    add_op(g, "pos", AP_OP_BINARY, AP_BINARY_ADD, -1, "tok", "wpe", NULL,
           "x0");
    char x[64] = "x0";
    for (int l = 0; l < c->layers; l++)
        add_block(g, c, l, x, x);
    ADD_T(g, "lnf.g", "h", AP_TENSOR_PARAM);
    ADD_T(g, "lnf.b", "h", AP_TENSOR_PARAM);
    ADD_T(g, "lnf.y", "bsh", AP_TENSOR_ACT);
    ADD_T(g, "logits", "bsv", AP_TENSOR_ACT);
    ap_graph_add_tensor(g, "loss", "", AP_FP32, AP_TENSOR_ACT, err);
    add_op(g, "lnf", AP_OP_NORM, AP_NORM_LAYER, -1, x, "lnf.g", "lnf.b",
           "lnf.y");
    add_op(g, "head", AP_OP_MATMUL, 0, -1, "lnf.y", "wte", NULL, "logits");
    add_op(g, "loss", AP_OP_LOSS, 0, -1, "logits", "labels", NULL, "loss");
    if (ap_graph_finalize(g, err) != AP_OK) {
        fprintf(stderr, "finalize: %s\n", err);
        ap_graph_free(g);
        return NULL;
    }
    return g;
}

static const gpt_cfg small = {2, 128, 256, 8, 1000, 2, 0, 0.1};

static double layer_sum(const ap_graph *g, int layer, ap_op_kind kind,
                        size_t field)
{
    double sum = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer == layer && (int)g->ops[i].kind == (int)kind)
            sum += *(const double *)((const char *)&g->ops[i] + field);
    return sum;
}

static void block_has_12h2_plus_13h_parameters(void)
{
    ap_graph *g = build_gpt(&small);
    CHECK(g != NULL);
    if (!g)
        return;
    double h = (double)small.h, per = 12 * h * h + 13 * h, params = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer == 1)
            params += g->ops[i].param_count;
    CHECK_NEAR(params, per, 1e-12);
    /* Tied head: wte is counted once, at the embedding. */
    double total = small.layers * per + (double)small.v * h +
                   (double)small.s * h + 2 * h;
    CHECK_NEAR(g->total_params, total, 1e-12);
    CHECK_NEAR(g->total_param_bytes, 2 * total, 1e-12);
    ap_graph_free(g);
}

static void matmul_flops_are_24bsh2_plus_4bs2h(void)
{
    ap_graph *g = build_gpt(&small);
    if (!g)
        return;
    double b = small.b, s = small.s, h = small.h, n = small.a;
    /* Matmuls with bias add one FLOP per output element: 9bsh per block. */
    double mm = layer_sum(g, 0, AP_OP_MATMUL, offsetof(ap_op, flops));
    CHECK_NEAR(mm, 24 * b * s * h * h + 9 * b * s * h, 1e-12);
    double at = layer_sum(g, 0, AP_OP_ATTENTION, offsetof(ap_op, flops));
    CHECK_NEAR(at, 4 * b * s * s * h + 5 * b * n * s * s, 1e-12);
    /* The tied head: 2bshv. */
    const ap_op *head = &g->ops[ap_graph_find_op(g, "head")];
    CHECK_NEAR(head->flops, 2 * b * s * h * small.v, 1e-12);
    CHECK(!strcmp(head->contracted, "h"));
    CHECK(!strcmp(head->iter, "bhsv"));
    ap_graph_free(g);
}

static void saved_bytes_match_korthikanti_without_flash(void)
{
    ap_graph *g = build_gpt(&small);
    if (!g)
        return;
    double s = small.s, b = small.b, h = small.h, a = small.a;
    for (int l = 0; l < small.layers; l++)
        CHECK_NEAR(ap_test_layer_saved(g, l), s * b * h * (34 + 5 * a * s / h),
                   1e-12);
    ap_graph_free(g);
}

static void flash_attention_drops_the_5as_over_h_term(void)
{
    gpt_cfg c = small;
    c.flash = 1;
    ap_graph *g = build_gpt(&c);
    if (!g)
        return;
    double s = c.s, b = c.b, h = c.h, a = c.a;
    double lse = 4 * b * a * s;
    CHECK_NEAR(ap_test_layer_saved(g, 0), 34 * s * b * h + lse, 1e-12);
    const ap_op *at = &g->ops[ap_graph_find_op(g, "l0.attn")];
    CHECK_NEAR(at->saved_extra, lse, 1e-12);
    CHECK(at->saves_in == 0x7 && at->saves_out == 0x1);
    /* The out-projection reads the attention output, already saved. */
    CHECK(g->ops[ap_graph_find_op(g, "l0.proj")].saves_in == 0);
    ap_graph_free(g);
}

static void no_dropout_keeps_only_the_softmax_probabilities(void)
{
    gpt_cfg c = small;
    c.dropout = 0;
    ap_graph *g = build_gpt(&c);
    if (!g)
        return;
    double s = c.s, b = c.b, h = c.h, a = c.a;
    /* Without dropout the s x s term is 2as^2b; the residual dropout masks
     * (p = 0) are still counted as the op kind says: 2sbh. */
    CHECK_NEAR(ap_test_layer_saved(g, 0), 34 * s * b * h + 2 * a * s * s * b, 1e-12);
    ap_graph_free(g);
}

static void topological_order_is_by_index_among_ready_ops(void)
{
    ap_graph *g = build_gpt(&small);
    if (!g)
        return;
    int pos[512] = {0};
    CHECK(g->nops < 512);
    for (int k = 0; k < g->nops; k++)
        pos[g->topo[k]] = k;
    for (int i = 0; i < g->nops; i++)
        for (int k = 0; k < g->ops[i].ninputs; k++) {
            int p = g->tensors[g->ops[i].inputs[k]].producer;
            CHECK(p < 0 || pos[p] < pos[i]);
        }
    /* q, k and v become ready together and come out in index order. */
    CHECK(pos[ap_graph_find_op(g, "l0.q")] + 1 ==
          pos[ap_graph_find_op(g, "l0.k")]);
    CHECK(g->topo[0] == ap_graph_find_op(g, "embed"));
    CHECK(g->topo[g->nops - 1] == ap_graph_find_op(g, "loss"));
    ap_graph_free(g);
}

static void identical_blocks_share_a_layer_class(void)
{
    gpt_cfg c = small;
    c.layers = 4;
    ap_graph *g = build_gpt(&c);
    if (!g)
        return;
    CHECK(g->nlayers == 4);
    for (int l = 0; l < 4; l++)
        CHECK(g->layer_class[l] == 0);
    CHECK(g->tensors[ap_graph_find_tensor(g, "l2.wq")].layer == 2);
    ap_graph_free(g);
}

static void a_block_with_other_attributes_is_another_class(void)
{
    gpt_cfg c = small;
    c.layers = 3;
    ap_graph *g = build_gpt(&c);
    if (!g)
        return;
    g->ops[ap_graph_find_op(g, "l1.attn")].flash = 1;
    REQUIRE_OK(ap_graph_finalize(g, err), err);
    CHECK(g->layer_class[0] == 0);
    CHECK(g->layer_class[1] == 1);
    CHECK(g->layer_class[2] == 0);
    /* Finalizing again recomputes: flash saves less in layer 1 only. */
    CHECK(ap_test_layer_saved(g, 1) < ap_test_layer_saved(g, 0));
    ap_graph_free(g);
}

static ap_graph *two_op_graph(void)
{
    ap_graph *g = ap_graph_new("tiny");
    ap_graph_add_dim(g, 'b', "batch", AP_DIM_BATCH, 4, err);
    ap_graph_add_dim(g, 'h', "hidden", AP_DIM_HIDDEN, 8, err);
    ADD_T(g, "x", "bh", AP_TENSOR_ACT);
    ADD_T(g, "y", "bh", AP_TENSOR_ACT);
    ADD_T(g, "z", "bh", AP_TENSOR_ACT);
    return g;
}

/* A gated unit y = act(g) * u as Megatron-Core runs it fused
 * (bias_swiglu_impl): backward keeps g and u and recomputes act(g), so
 * act's output is not kept. A product of two plain tensors keeps both. */
static void a_gated_unit_keeps_the_gate_not_its_activation(void)
{
    static const int subs[] = {AP_UNARY_SILU, AP_UNARY_GELU, AP_UNARY_RELU};
    for (int k = 0; k < 3; k++) {
        ap_graph *g = ap_graph_new("glu");
        ap_graph_add_dim(g, 'b', "batch", AP_DIM_BATCH, 4, err);
        ap_graph_add_dim(g, 's', "seq", AP_DIM_SEQ, 2, err);
        ap_graph_add_dim(g, 'h', "hidden", AP_DIM_HIDDEN, 8, err);
        ap_graph_add_dim(g, 'v', "vocab", AP_DIM_VOCAB, 16, err);
        ap_graph_add_tensor(g, "tokens", "bs", AP_INT32, AP_TENSOR_INPUT, err);
        ADD_T(g, "wg", "vh", AP_TENSOR_PARAM);
        ADD_T(g, "wu", "vh", AP_TENSOR_PARAM);
        static const char *acts[] = {"x", "u", "y", "z"};
        for (int i = 0; i < 4; i++)
            ADD_T(g, acts[i], "bsh", AP_TENSOR_ACT);
        add_op(g, "gate", AP_OP_EMBEDDING, 0, -1, "tokens", "wg", 0, "x");
        add_op(g, "up", AP_OP_EMBEDDING, 0, -1, "tokens", "wu", 0, "u");
        add_op(g, "act", AP_OP_UNARY, subs[k], -1, "x", 0, 0, "y");
        add_op(g, "mul", AP_OP_BINARY, AP_BINARY_MUL, -1, "y", "u", 0, "z");
        REQUIRE_OK(ap_graph_finalize(g, err), err);
        const ap_op *act = &g->ops[2], *mul = &g->ops[3];
        double t = 4 * 2 * 8 * 2; /* one bf16 b x s x h tensor */
        CHECK_NEAR(act->saved_bytes, t, 1e-15);
        /* silu and gelu are fused with the product; relu is not a GLU
         * activation Megatron fuses, so its output stays. */
        CHECK_NEAR(mul->saved_bytes, k < 2 ? t : 2 * t, 1e-15);
        CHECK(mul->saves_in == (k < 2 ? 0x2u : 0x3u));
        CHECK(ap_glu_activation(g, mul, 0) == subs[k]);
        CHECK(ap_glu_activation(g, mul, 1) == -1 && ap_glu_activation(g, act, 0) == -1);
        ap_graph_free(g);
    }
}

static void a_cycle_is_rejected_and_named(void)
{
    ap_graph *g = two_op_graph();
    CHECK(add_op(g, "f", AP_OP_UNARY, AP_UNARY_GELU, -1, "y", 0, 0, "x") ==
          0);
    CHECK(add_op(g, "g", AP_OP_UNARY, AP_UNARY_RELU, -1, "x", 0, 0, "y") ==
          1);
    CHECK(add_op(g, "h", AP_OP_UNARY, AP_UNARY_RELU, -1, "y", 0, 0, "z") ==
          2);
    CHECK(ap_graph_finalize(g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "cycle");
    CHECK_STR_HAS(err, "f -> g -> f");
    CHECK(!g->finalized && g->topo == NULL);
    ap_graph_free(g);
}

static void a_second_producer_is_rejected(void)
{
    ap_graph *g = two_op_graph();
    ADD_T(g, "w", "bh", AP_TENSOR_ACT);
    CHECK(add_op(g, "f", AP_OP_UNARY, AP_UNARY_GELU, -1, "x", 0, 0, "y") ==
          0);
    CHECK(add_op(g, "g", AP_OP_UNARY, AP_UNARY_GELU, -1, "z", 0, 0, "y") ==
          -1);
    CHECK_STR_HAS(err, "ops[1].outputs[0]: tensor \"y\" is already produced "
                       "by op \"f\"");
    ap_graph_free(g);
}

static void bad_shapes_and_names_are_rejected(void)
{
    ap_graph *g = two_op_graph();
    CHECK(ADD_T(g, "x", "bh", AP_TENSOR_ACT) == -1);
    CHECK_STR_HAS(err, "tensors[3].name: \"x\" is already tensors[0]");
    CHECK(ADD_T(g, "q", "bq", AP_TENSOR_ACT) == -1);
    CHECK_STR_HAS(err, "unknown label 'q'");
    CHECK(ap_graph_add_dim(g, 'c', "c", AP_DIM_OTHER, 0, err) == -1);
    CHECK_STR_HAS(err, "dims.c.size");
    CHECK(ap_graph_add_dim(g, 'H', "huge", AP_DIM_OTHER, INT64_MAX / 2,
                           err) >= 0);
    CHECK(ADD_T(g, "big", "bH", AP_TENSOR_ACT) == -1);
    CHECK_STR_HAS(err, "more than 2^63");
    CHECK(add_op(g, "f", AP_OP_UNARY, AP_UNARY_GELU, -1, "nope", 0, 0, "y") ==
          -1);
    CHECK_STR_HAS(err, "ops[0].inputs[0]: unknown tensor \"nope\"");
    /* A softmax that changes the shape passes the builder, not finalize. */
    ADD_T(g, "t", "hb", AP_TENSOR_ACT);
    CHECK(add_op(g, "sm", AP_OP_SOFTMAX, 0, -1, "x", 0, 0, "t") == 0);
    CHECK(ap_graph_finalize(g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "ops[0].outputs[0]");
    ap_graph_free(g);
}

static void a_matmul_must_contract_a_label(void)
{
    ap_graph *g = two_op_graph();
    ADD_T(g, "w", "h", AP_TENSOR_PARAM);
    CHECK(add_op(g, "mm", AP_OP_MATMUL, 0, -1, "x", "w", 0, "y") == 0);
    CHECK(ap_graph_finalize(g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "contracts no label");
    ap_graph_free(g);
}

/* A model that tags no layers is cut, in topological order, into runs of
 * about equal FLOPs: contiguous, none empty, none heavier than its share
 * plus the heaviest single op. */
static void untagged_model_gets_layers_of_even_flops(void)
{
    ap_graph *g = ap_test_model("tests/data/gpt-tiny-untagged.json", 0);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(g->auto_layers == 1);
    int heavy = 0;
    double total = 0, biggest = 0, per[AP_AUTO_LAYERS] = {0};
    for (int i = 0; i < g->nops; i++) {
        heavy += g->ops[i].kind == AP_OP_MATMUL || g->ops[i].kind == AP_OP_ATTENTION;
        total += g->ops[i].flops;
        if (g->ops[i].flops > biggest)
            biggest = g->ops[i].flops;
    }
    CHECK(g->nlayers == heavy); /* 13 matmuls and 2 attentions */
    CHECK(g->nlayers == 15);
    int last = 0;
    for (int k = 0; k < g->nops; k++) {
        const ap_op *op = &g->ops[g->topo[k]];
        CHECK(op->layer == last || op->layer == last + 1);
        last = op->layer;
        per[op->layer] += op->flops;
    }
    CHECK(last == g->nlayers - 1);
    for (int l = 0; l < g->nlayers; l++)
        CHECK(per[l] <= total / g->nlayers + biggest);
    ap_graph_free(g);
}

/* A first op heavier than its layer's share still opens layer 0 (a 3-matmul
 * chain whose first matmul has 85% of the FLOPs once left layer 0 empty,
 * which the project format then refused to read back). */
static void a_heavy_first_op_opens_layer_zero(void)
{
    const char *text =
        "{\"format\": \"autopar-model/1\", \"name\": \"chain\","
        " \"dims\": {\"b\": {\"kind\": \"batch\", \"size\": 2},"
        "  \"s\": {\"kind\": \"seq\", \"size\": 64}, \"h\": {\"kind\": \"hidden\", \"size\": 64},"
        "  \"n\": {\"kind\": \"heads\", \"size\": 5}, \"d\": {\"kind\": \"head_dim\", \"size\": 16},"
        "  \"r\": {\"kind\": \"other\", \"size\": 7}},"
        " \"tensors\": [{\"name\": \"x\", \"shape\": \"bsh\", \"role\": \"input\"},"
        "  {\"name\": \"w\", \"shape\": \"hnd\", \"role\": \"parameter\"},"
        "  {\"name\": \"f\", \"shape\": \"sr\", \"role\": \"input\"},"
        "  {\"name\": \"q\", \"shape\": \"bsnd\", \"role\": \"activation\"},"
        "  {\"name\": \"y\", \"shape\": \"bsn\", \"role\": \"activation\"},"
        "  {\"name\": \"w2\", \"shape\": \"h\", \"role\": \"parameter\"},"
        "  {\"name\": \"o\", \"shape\": \"bsh\", \"role\": \"activation\"}],"
        " \"ops\": [{\"name\": \"a\", \"kind\": \"matmul\", \"inputs\": [\"x\", \"w\"], \"outputs\": [\"q\"]},"
        "  {\"name\": \"b\", \"kind\": \"matmul\", \"inputs\": [\"q\", \"f\"], \"outputs\": [\"y\"]},"
        "  {\"name\": \"c\", \"kind\": \"matmul\", \"inputs\": [\"y\", \"w2\"], \"outputs\": [\"o\"]}]}";
    ap_graph *g = NULL, *back = NULL;
    REQUIRE_OK(ap_graph_parse_json(text, strlen(text), "chain.json", &g, err), err);
    CHECK(g->ops[0].flops > 0.8 * g->total_flops);
    CHECK(g->nlayers == 3);
    CHECK(g->ops[0].layer == 0 && g->ops[1].layer == 1 && g->ops[2].layer == 2);
    char *json = ap_graph_to_json(g);
    CHECK(ap_graph_parse_json(json, strlen(json), "back.json", &back, err) == AP_OK);
    CHECK(back && back->nlayers == 3);
    free(json);
    ap_graph_free(back);
    ap_graph_free(g);
}

/* Layers run in order, one pipeline stage after another, so layer tags
 * must agree with the data flow: an op may not read what a later layer
 * produces, and an op without a layer runs where the planner puts it,
 * before the layers when it comes before every layer's op in the file and
 * after them otherwise, so one after them may not feed a layer. Each
 * refusal names the op and its layer field; a graph put right finalizes. */
static void layer_tags_must_follow_the_data_flow(void)
{
    ap_graph *g = build_gpt(&small);
    REQUIRE_OK(g ? 0 : 1, err);
    char want[AP_ERR_LEN];
    int q = ap_graph_find_op(g, "l1.q"), add = ap_graph_find_op(g, "l0.add2");
    int lnf = ap_graph_find_op(g, "lnf");
    g->ops[q].layer = 0;
    CHECK(ap_graph_finalize(g, err) == AP_EINPUT);
    snprintf(want, sizeof want, "ops[%d].layer: op \"l1.q\" is in layer 0, but reads "
             "\"l1.ln1.y\" from op \"l1.ln1\", which is in layer 1: an op may not read a "
             "tensor produced by a later layer", q);
    CHECK_STR_HAS(err, want);
    g->ops[q].layer = 1;
    g->ops[add].layer = -1;
    CHECK(ap_graph_finalize(g, err) == AP_EINPUT);
    snprintf(want, sizeof want, "ops[%d].layer: op \"l0.add2\" has no layer and comes after "
             "a layer's op in the file, so it runs after the layers, but op \"l1.ln1\" "
             "(layer 1) reads its output \"l0.out\"", add);
    CHECK_STR_HAS(err, want);
    g->ops[add].layer = 0;
    /* The final norm tagged with the first layer reads the last one's
     * output. */
    g->ops[lnf].layer = 0;
    CHECK(ap_graph_finalize(g, err) == AP_EINPUT);
    snprintf(want, sizeof want, "ops[%d].layer: op \"lnf\" is in layer 0, but reads "
             "\"l1.out\" from op \"l1.add2\", which is in layer 1", lnf);
    CHECK_STR_HAS(err, want);
    /* In the last layer, or outside the layers after them, it is where it
     * runs. */
    g->ops[lnf].layer = 1;
    REQUIRE_OK(ap_graph_finalize(g, err), err);
    g->ops[lnf].layer = -1;
    REQUIRE_OK(ap_graph_finalize(g, err), err);
    CHECK(g->nlayers == 2);
    ap_graph_free(g);
}

/* An op without a layer that comes before every layer's op in the file
 * runs before the layers, so it may not read a layer's tensor: the head
 * written first is refused, naming it. */
static void an_op_before_the_layers_may_not_read_them(void)
{
    const char *text =
        "{\"format\": \"autopar-model/1\", \"name\": \"m\","
        " \"dims\": {\"b\": {\"kind\": \"batch\", \"size\": 2}, \"s\": {\"kind\": \"seq\", \"size\": 4},"
        "  \"h\": {\"kind\": \"hidden\", \"size\": 8}, \"v\": {\"kind\": \"vocab\", \"size\": 16}},"
        " \"tensors\": [{\"name\": \"x\", \"shape\": \"bsh\", \"role\": \"input\"},"
        "  {\"name\": \"w\", \"shape\": \"hv\", \"role\": \"parameter\"},"
        "  {\"name\": \"wo\", \"shape\": \"vh\", \"role\": \"parameter\"},"
        "  {\"name\": \"y\", \"shape\": \"bsv\", \"role\": \"activation\"},"
        "  {\"name\": \"logits\", \"shape\": \"bsh\", \"role\": \"activation\"}],"
        " \"ops\": [{\"name\": \"head\", \"kind\": \"matmul\", \"inputs\": [\"y\", \"wo\"], \"outputs\": [\"logits\"]},"
        "  {\"name\": \"fc\", \"kind\": \"matmul\", \"layer\": 0, \"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\"]}]}";
    ap_graph *g = NULL;
    CHECK(ap_graph_parse_json(text, strlen(text), "m.json", &g, err) == AP_EINPUT);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "m.json: ops[0].layer: op \"head\" has no layer and comes before every "
                       "layer's op in the file, so it runs before the layers, but reads \"y\" "
                       "from op \"fc\", which is in layer 0");
}

int main(void)
{
    RUN(block_has_12h2_plus_13h_parameters);
    RUN(a_heavy_first_op_opens_layer_zero);
    RUN(matmul_flops_are_24bsh2_plus_4bs2h);
    RUN(saved_bytes_match_korthikanti_without_flash);
    RUN(flash_attention_drops_the_5as_over_h_term);
    RUN(no_dropout_keeps_only_the_softmax_probabilities);
    RUN(topological_order_is_by_index_among_ready_ops);
    RUN(identical_blocks_share_a_layer_class);
    RUN(a_block_with_other_attributes_is_another_class);
    RUN(a_gated_unit_keeps_the_gate_not_its_activation);
    RUN(a_cycle_is_rejected_and_named);
    RUN(a_second_producer_is_rejected);
    RUN(bad_shapes_and_names_are_rejected);
    RUN(a_matmul_must_contract_a_label);
    RUN(untagged_model_gets_layers_of_even_flops);
    RUN(layer_tags_must_follow_the_data_flow);
    RUN(an_op_before_the_layers_may_not_read_them);
    return DONE();
}
