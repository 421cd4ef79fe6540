/* test_graph_load.c -- the JSON model format: the examples load with the
 * parameter counts of their closed forms, a graph survives a round trip
 * through ap_graph_to_json(), its fractional numbers exactly, build options rescale batch and sequence,
 * malformed text is reported with its line and column, and a model needs
 * one batch and one seq dimension, which its reshapes carry through. */
#include <cjson/cJSON.h>

#include "model.h"

static char err[AP_ERR_LEN];

static double dim(const ap_graph *g, char label)
{
    const ap_dim *d = ap_graph_dim(g, label);
    return d ? (double)d->size : 0;
}

/* A GPT with learned positions and a tied head: L blocks of 12h^2 + 13h,
 * token and position tables, and the final norm. */
static double gpt_params(const ap_graph *g)
{
    double h = dim(g, 'h');
    return g->nlayers * (12 * h * h + 13 * h) + dim(g, 'v') * h +
           dim(g, 's') * h + 2 * h;
}

static void gpt_1_3b_has_1_3_billion_parameters_in_24_alike_layers(void)
{
    ap_graph *g = ap_test_model_with("examples/gpt-1.3b.json", NULL);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(g->nlayers == 24 && dim(g, 'h') == 2048 && dim(g, 'n') == 16);
    CHECK_NEAR(g->total_params, gpt_params(g), 1e-12);
    /* GPT-3 XL is "1.3B" (Brown et al. 2020, table 2.1). */
    CHECK(g->total_params > 1.3e9 && g->total_params < 1.33e9);
    for (int l = 0; l < 24; l++)
        CHECK(g->layer_class[l] == 0);
    /* Flash attention: 34sbh plus the fp32 log-sum-exp, 4bas. */
    double s = dim(g, 's'), b = dim(g, 'b'), h = dim(g, 'h'), a = dim(g, 'n');
    CHECK_NEAR(ap_test_layer_saved(g, 7), 34 * s * b * h + 4 * b * a * s, 1e-12);
    ap_graph_free(g);
}

static void gpt_tiny_saves_korthikanti_bytes_per_layer(void)
{
    ap_graph *g = ap_test_model_with("examples/gpt-tiny.json", NULL);
    if (!g)
        return;
    CHECK(g->nlayers == 2);
    CHECK_NEAR(g->total_params, gpt_params(g), 1e-12);
    double s = dim(g, 's'), b = dim(g, 'b'), h = dim(g, 'h'), a = dim(g, 'n');
    CHECK_NEAR(ap_test_layer_saved(g, 1), s * b * h * (34 + 5 * a * s / h), 1e-12);
    ap_graph_free(g);
}

static void a_graph_survives_a_round_trip_through_json(void)
{
    ap_graph *g = ap_test_model_with("examples/gpt-tiny.json", NULL);
    if (!g)
        return;
    char *text = ap_graph_to_json(g);
    CHECK(text != NULL);
    ap_graph *h = NULL;
    CHECK(ap_graph_parse_json(text, strlen(text), "round-trip", &h, err) ==
          AP_OK);
    if (h) {
        CHECK(h->nops == g->nops && h->ntensors == g->ntensors);
        CHECK(h->total_flops == g->total_flops);
        CHECK(h->total_params == g->total_params);
        CHECK(h->total_saved_bytes == g->total_saved_bytes);
        CHECK(h->nlayers == g->nlayers);
        int a = ap_graph_find_op(h, "l1.attn");
        CHECK(a >= 0 && h->ops[a].causal && !h->ops[a].flash &&
              h->ops[a].dropout_p == 0.1);
        char *again = ap_graph_to_json(h);
        CHECK(again && !strcmp(again, text));
        free(again);
    }
    ap_graph_free(h);
    free(text);
    ap_graph_free(g);
}

/* The fractional numbers a model file carries read back as the same
 * doubles, where cJSON's own printing stops at 15 digits whenever they come
 * within a rounding error: 6/7 would come back as 0.857142857142857, and an
 * export compares them with the plan's exactly. */
static void fractional_numbers_survive_the_round_trip_exactly(void)
{
    ap_graph *g = ap_test_model_with("examples/gpt-tiny.json", NULL);
    if (!g)
        return;
    g->rope_base = 999999.4420358813;
    g->norm_eps = 1.0 / 3e5;
    int a = ap_graph_find_op(g, "l1.attn");
    CHECK(a >= 0);
    if (a >= 0)
        g->ops[a].dropout_p = 6.0 / 7;
    char *text = ap_graph_to_json(g);
    CHECK_STR_HAS(text, "\"rope_base\":\t999999.4420358813");
    CHECK_STR_HAS(text, "\"dropout\":\t0.8571428571428571");
    ap_graph *h = NULL;
    CHECK(text && ap_graph_parse_json(text, strlen(text), "round-trip", &h, err) == AP_OK);
    CHECK(h && h->rope_base == g->rope_base && h->norm_eps == g->norm_eps);
    CHECK(h && a >= 0 && h->ops[a].dropout_p == 6.0 / 7);
    char buf[32];
    CHECK(!strcmp(ap_number_exact(0.1, buf, sizeof buf), "0.1"));
    CHECK(!strcmp(ap_number_exact(6.0 / 7, buf, sizeof buf), "0.8571428571428571"));
    CHECK(!strcmp(ap_number_exact(0.1 + 0.2, buf, sizeof buf), "0.30000000000000004"));
    ap_graph_free(h);
    free(text);
    ap_graph_free(g);
}

static void build_options_rescale_batch_and_sequence(void)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.batch = 4;
    o.seq = 128;
    ap_graph *base = ap_test_model_with("examples/gpt-tiny.json", NULL);
    ap_graph *g = ap_test_model_with("examples/gpt-tiny.json", &o);
    CHECK(g && base);
    if (!g || !base) {
        ap_graph_free(base);
        ap_graph_free(g);
        return;
    }
    CHECK(dim(g, 'b') == 4 && dim(g, 's') == 128);
    /* The learned position table follows the sequence length. */
    CHECK_NEAR(g->total_params, gpt_params(g), 1e-12);
    double h = dim(g, 'h');
    CHECK_NEAR(base->total_params - g->total_params, (256 - 128) * h, 1e-12);
    /* fc1 is 2 * b*s*h*4h (+ bias): twice the tokens, twice the FLOPs. */
    int i = ap_graph_find_op(g, "l0.fc1");
    CHECK_NEAR(g->ops[i].flops, 2 * base->ops[i].flops, 1e-12);
    ap_graph_free(base);
    ap_graph_free(g);
}

static void malformed_json_is_reported_by_line_and_column(void)
{
    const char *text = "{\n  \"format\": \"autopar-model/1\",\n  \"name\" \"x\"\n}";
    ap_graph *g = (ap_graph *)1;
    CHECK(ap_graph_parse_json(text, strlen(text), "m.json", &g, err) ==
          AP_EINPUT);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "m.json: line 3, column 10: malformed JSON");
}

static void errors_in_ops_name_the_json_path(void)
{
    const char *text =
        "{\"format\": \"autopar-model/1\", \"name\": \"m\","
        " \"dims\": {\"b\": {\"kind\": \"batch\", \"size\": 2}},"
        " \"tensors\": [{\"name\": \"x\", \"shape\": \"b\", \"role\": \"input\"},"
        "               {\"name\": \"y\", \"shape\": \"b\", \"role\": \"activation\"}],"
        " \"ops\": [{\"name\": \"s\", \"kind\": \"scale\", \"inputs\": [\"x\"],"
        "           \"outputs\": [\"y\"]},"
        "          {\"name\": \"t\", \"kind\": \"scale\", \"inputs\": [\"y\", \"q\"],"
        "           \"outputs\": [\"z\"]}]}";
    ap_graph *g = NULL;
    CHECK(ap_graph_parse_json(text, strlen(text), "m.json", &g, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "m.json: ops[1].inputs[1]: unknown tensor \"q\"");
    CHECK(g == NULL);
}

static void a_hugging_face_config_goes_to_the_hf_builder(void)
{
    ap_graph *g = ap_test_model_with("examples/hf/llama-3-8b.json", NULL);
    CHECK(g != NULL);
    if (g) {
        CHECK(g->finalized && g->nlayers == 32);
        CHECK(g->total_params > 7.9e9 && g->total_params < 8.1e9);
    }
    ap_graph_free(g);
}

static const char *moe_text =
        "{\"format\": \"autopar-model/1\", \"name\": \"moe\",\n"
        " \"dims\": {\"b\": {\"kind\": \"batch\", \"size\": 2}, \"s\": {\"kind\": \"seq\", \"size\": 8}, \"h\": {\"kind\": \"hidden\", \"size\": 4},\n"
        "          \"e\": {\"kind\": \"experts\", \"size\": 4}, \"c\": {\"kind\": \"capacity\", \"size\": 8}, \"f\": {\"kind\": \"ffn\", \"size\": 16}},\n"
        " \"tensors\": [{\"name\": \"x\", \"shape\": \"bsh\", \"role\": \"input\"}, {\"name\": \"wg\", \"shape\": \"he\", \"role\": \"parameter\"},\n"
        "   {\"name\": \"p\", \"shape\": \"bse\", \"role\": \"activation\"}, {\"name\": \"xe\", \"shape\": \"ech\", \"role\": \"activation\"},\n"
        "   {\"name\": \"w1\", \"shape\": \"ehf\", \"role\": \"parameter\"}, {\"name\": \"h1\", \"shape\": \"ecf\", \"role\": \"activation\"},\n"
        "   {\"name\": \"a1\", \"shape\": \"ecf\", \"role\": \"activation\"}, {\"name\": \"w2\", \"shape\": \"efh\", \"role\": \"parameter\"},\n"
        "   {\"name\": \"ye\", \"shape\": \"ech\", \"role\": \"activation\"}, {\"name\": \"y\", \"shape\": \"bsh\", \"role\": \"activation\"},\n"
        "   {\"name\": \"yr\", \"shape\": \"hbs\", \"role\": \"activation\"}],\n"
        " \"ops\": [{\"name\": \"gate\", \"kind\": \"router\", \"layer\": 0, \"inputs\": [\"x\", \"wg\"], \"outputs\": [\"p\"], \"top_k\": 2},\n"
        "   {\"name\": \"disp\", \"kind\": \"dispatch\", \"layer\": 0, \"inputs\": [\"x\", \"p\"], \"outputs\": [\"xe\"], \"top_k\": 2},\n"
        "   {\"name\": \"fc1\", \"kind\": \"matmul\", \"layer\": 0, \"inputs\": [\"xe\", \"w1\"], \"outputs\": [\"h1\"]},\n"
        "   {\"name\": \"act\", \"kind\": \"silu\", \"layer\": 0, \"inputs\": [\"h1\"], \"outputs\": [\"a1\"]},\n"
        "   {\"name\": \"fc2\", \"kind\": \"matmul\", \"layer\": 0, \"inputs\": [\"a1\", \"w2\"], \"outputs\": [\"ye\"]},\n"
        "   {\"name\": \"comb\", \"kind\": \"combine\", \"layer\": 0, \"inputs\": [\"ye\", \"p\"], \"outputs\": [\"y\"], \"top_k\": 2},\n"
        "   {\"name\": \"t\", \"kind\": \"transpose\", \"layer\": 0, \"inputs\": [\"y\"], \"outputs\": [\"yr\"]}]}\n";

static void moe_ops_count_router_experts_and_combine(void)
{
    ap_graph *g = NULL;
    CHECK(ap_graph_parse_json(moe_text, strlen(moe_text), "moe.json", &g,
                              err) == AP_OK);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    double b = 2, s = 8, h = 4, e = 4, c = 8, f = 16, k = 2;
    CHECK_NEAR(g->ops[0].flops, 2 * b * s * h * e + 5 * b * s * e, 1e-12);
    CHECK_NEAR(g->ops[2].flops, 2 * e * c * h * f, 1e-12);
    CHECK_NEAR(g->ops[5].flops, 2 * b * s * h * k, 1e-12);
    CHECK(g->ops[1].flops == 0 && g->ops[6].bytes_moved == 0);
    CHECK(!strcmp(g->ops[2].iter, "cefh"));
    CHECK(!strcmp(g->ops[2].contracted, "h"));
    CHECK_NEAR(g->total_params, h * e + 2 * e * h * f, 1e-12);
    /* Saved: probs (router; x is data), the expert inputs of fc1, silu and
     * fc2, and combine's expert outputs; probs only once. */
    CHECK_NEAR(g->total_saved_bytes,
               2 * (b * s * e + e * c * h + 2 * e * c * f + e * c * h), 1e-12);
    ap_graph_free(g);
}

/* Group-limited routing on the MoE ops: DeepSeek-V3's Hugging Face config
 * gives its router, dispatch and combine 8 groups and 4 a token; in the
 * project format the two go together and must limit something the top_k
 * fits in, each error naming its op. */
static void group_limited_routing_is_kept_and_checked(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 256);
    CHECK(g != NULL);
    for (int i = 0; g && i < g->nops; i++)
        if (g->ops[i].kind == AP_OP_ROUTER || g->ops[i].kind == AP_OP_COMBINE)
            CHECK(g->ops[i].groups == 8 && g->ops[i].group_topk == 4);
    ap_graph_free(g);
    const struct {
        const char *from, *to, *want;
    } bad[] = {
        {"\"top_k\": 2},\n   {\"name\": \"disp\"", "\"top_k\": 2, \"groups\": 2},\n   {\"name\": \"disp\"",
         "ops[0]: \"groups\" and \"group_topk\" go together"},
        {"\"top_k\": 2},\n   {\"name\": \"disp\"",
         "\"top_k\": 2, \"groups\": 3, \"group_topk\": 1},\n   {\"name\": \"disp\"",
         "3 groups do not divide the 4 experts"},
        {"\"top_k\": 2},\n   {\"name\": \"disp\"",
         "\"top_k\": 2, \"groups\": 2, \"group_topk\": 2},\n   {\"name\": \"disp\"",
         "group_topk 2 limits nothing"},
        {"\"top_k\": 2},\n   {\"name\": \"disp\"",
         "\"top_k\": 2, \"groups\": 4, \"group_topk\": 1},\n   {\"name\": \"disp\"",
         "top_k 2 exceeds the 1 experts of group_topk 1 groups"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[8192];
        const char *at = strstr(moe_text, bad[i].from);
        CHECK(at != NULL);
        if (!at)
            continue;
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - moe_text), moe_text, bad[i].to,
                 at + strlen(bad[i].from));
        ap_graph *b = NULL;
        CHECK(ap_graph_parse_json(text, strlen(text), "moe.json", &b, err) == AP_EINPUT);
        CHECK_STR_HAS(err, bad[i].want);
        ap_graph_free(b);
    }
}

/* A key given twice anywhere in a file is found with its path, however
 * deep: JSON leaves duplicates to the reader, and cJSON and Python keep
 * different copies. */
static void a_duplicate_key_is_found_with_its_path(void)
{
    char path[64];
    cJSON *ok = cJSON_Parse("{\"a\": {\"b\": [{\"c\": 1}, {\"c\": 2}]}, \"c\": 3}");
    cJSON *dup = cJSON_Parse("{\"a\": {\"b\": [{\"c\": 1}, {\"d\": 2, \"d\": 4}]}}");
    CHECK(ap_json_duplicate(ok, path, sizeof path) == NULL && path[0] == 0);
    const char *key = ap_json_duplicate(dup, path, sizeof path);
    CHECK(key && !strcmp(key, "d"));
    CHECK_STR_HAS(path, "a.b[1].d");
    CHECK(!strcmp(path, "a.b[1].d"));
    cJSON_Delete(ok);
    cJSON_Delete(dup);
}

/* The file's text with the first `from` replaced by `to` into out (cap
 * bytes); 0 when `from` is not in it. */
static int replaced(const char *text, const char *from, const char *to, char *out,
                    size_t cap)
{
    const char *at = strstr(text, from);
    if (!at)
        return 0;
    snprintf(out, cap, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return 1;
}

/* The planner scales the batch label to each micro-batch it tries and
 * reads the tokens of a sequence from the seq label: a model whose batch
 * or sequence is declared "other" was planned at 237% of the GPUs' peak,
 * or as steps of one token a sequence. So a model file has exactly one
 * dimension of each kind, and the refusal names dims. */
static void a_model_needs_one_batch_and_one_seq_dimension(void)
{
    char path[512], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/examples/gpt-tiny.json", ap_test_src());
    REQUIRE_OK(ap_read_file(path, &text, &len, err), err);
    const struct {
        const char *from, *to, *want;
    } bad[] = {
        {"\"kind\": \"batch\"", "\"kind\": \"other\"",
         "tiny.json: dims: no dimension is of kind \"batch\"; a model needs one dimension "
         "of kind \"batch\" and one of kind \"seq\""},
        {"\"kind\": \"seq\"", "\"kind\": \"other\"",
         "tiny.json: dims: no dimension is of kind \"seq\""},
        {"\"kind\": \"hidden\"", "\"kind\": \"seq\"",
         "tiny.json: dims: 2 dimensions (\"sh\") are of kind \"seq\"; a model needs exactly "
         "one"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static char edited[1 << 16];
        CHECK(replaced(text, bad[i].from, bad[i].to, edited, sizeof edited));
        ap_graph *g = NULL;
        CHECK(ap_graph_load_buffer(edited, strlen(edited), "tiny.json", NULL, &g, err) ==
              AP_EINPUT);
        CHECK(g == NULL);
        CHECK_STR_HAS(err, bad[i].want);
    }
    free(text);
}

static const char *reshape_text =
    "{\"format\": \"autopar-model/1\", \"name\": \"flat\",\n"
    " \"dims\": {\"b\": {\"kind\": \"batch\", \"size\": 1}, \"s\": {\"kind\": \"seq\", \"size\": 8},\n"
    "          \"h\": {\"kind\": \"hidden\", \"size\": 4}, \"f\": {\"kind\": \"ffn\", \"size\": 16},\n"
    "          \"n\": {\"kind\": \"heads\", \"size\": 2}, \"d\": {\"kind\": \"head_dim\", \"size\": 8},\n"
    "          \"t\": {\"kind\": \"other\", \"size\": 8}},\n"
    " \"tensors\": [{\"name\": \"x\", \"shape\": \"bsh\", \"role\": \"input\"},\n"
    "   {\"name\": \"w\", \"shape\": \"hf\", \"role\": \"parameter\"},\n"
    "   {\"name\": \"y\", \"shape\": \"bsf\", \"role\": \"activation\"},\n"
    "   {\"name\": \"z\", \"shape\": \"bsnd\", \"role\": \"activation\"}],\n"
    " \"ops\": [{\"name\": \"mm\", \"kind\": \"matmul\", \"layer\": 0, \"inputs\": [\"x\", \"w\"], \"outputs\": [\"y\"]},\n"
    "   {\"name\": \"r\", \"kind\": \"reshape\", \"layer\": 0, \"inputs\": [\"y\"], \"outputs\": [\"z\"]}]}\n";

/* A reshape keeps its element count at every size a plan runs, not only
 * at the declared ones: the planner prices other micro-batches by scaling
 * the batch label, so a reshape of "bsf" into "tf", whose t happens to be
 * b*s at batch 1, was refused by `graph --batch 8` and planned by `plan
 * --global-batch 8`. Now both refuse it, naming the op and the tensor,
 * and a reshape that carries b and s through ("bsf" into "bsnd") loads at
 * any batch. */
static void a_reshape_carries_the_batch_and_seq_labels_through(void)
{
    ap_graph *g = NULL;
    ap_build_opts at8;
    ap_build_opts_default(&at8);
    at8.batch = 8;
    REQUIRE_OK(ap_graph_load_buffer(reshape_text, strlen(reshape_text), "flat.json", NULL, &g,
                                    err), err);
    ap_graph_free(g);
    REQUIRE_OK(ap_graph_load_buffer(reshape_text, strlen(reshape_text), "flat.json", &at8, &g,
                                    err), err);
    CHECK(ap_graph_dim(g, 'b')->size == 8);
    ap_graph_free(g);
    const struct {
        const char *from, *to, *want;
    } bad[] = {
        {"\"z\", \"shape\": \"bsnd\"", "\"z\", \"shape\": \"tf\"",
         "flat.json: ops[1].outputs[0]: reshape \"r\": output \"z\" (\"tf\") has 0 labels of "
         "kind batch where the input \"y\" (\"bsf\") has 1"},
        {"\"z\", \"shape\": \"bsnd\"", "\"z\", \"shape\": \"btnd\"",
         "flat.json: ops[1].outputs[0]: reshape \"r\": output \"z\" (\"btnd\") has 0 labels of "
         "kind seq where the input \"y\" (\"bsf\") has 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[4096];
        CHECK(replaced(reshape_text, bad[i].from, bad[i].to, text, sizeof text));
        for (int k = 0; k < 2; k++) {
            g = NULL;
            CHECK(ap_graph_load_buffer(text, strlen(text), "flat.json", k ? &at8 : NULL, &g,
                                       err) == AP_EINPUT);
            CHECK(g == NULL);
            CHECK_STR_HAS(err, bad[i].want);
        }
    }
}

int main(void)
{
    RUN(gpt_1_3b_has_1_3_billion_parameters_in_24_alike_layers);
    RUN(a_duplicate_key_is_found_with_its_path);
    RUN(gpt_tiny_saves_korthikanti_bytes_per_layer);
    RUN(a_graph_survives_a_round_trip_through_json);
    RUN(fractional_numbers_survive_the_round_trip_exactly);
    RUN(build_options_rescale_batch_and_sequence);
    RUN(malformed_json_is_reported_by_line_and_column);
    RUN(errors_in_ops_name_the_json_path);
    RUN(a_hugging_face_config_goes_to_the_hf_builder);
    RUN(moe_ops_count_router_experts_and_combine);
    RUN(group_limited_routing_is_kept_and_checked);
    RUN(a_model_needs_one_batch_and_one_seq_dimension);
    RUN(a_reshape_carries_the_batch_and_seq_labels_through);
    return DONE();
}
