/* test_attention_window.c -- sliding-window attention: each query meets the
 * `window` keys that end at its own position. The graph counts its scores
 * as Megatron-LM counts full attention's (both halves of the causal
 * square), a flash kernel is priced for the band it computes at the rate
 * of its loop length (the window), context parallelism runs under a
 * window only as the all-to-all (whose ranks attend over whole sequences,
 * with the window's kernel), and the project format writes and reads the
 * window. */
#include "costmodel/costmodel.h"
#include "model.h"

static const double bn = 512, d = 128;

static ap_graph *mistral(int64_t window, int64_t seq, char *err)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"mistral\",\"hidden_size\":512,\"intermediate_size\":1024,"
             "\"max_position_embeddings\":65536,\"num_attention_heads\":8,"
             "\"num_hidden_layers\":2,\"num_key_value_heads\":2,\"vocab_size\":1000,"
             "\"sliding_window\":%lld}", (long long)window);
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = seq;
    ap_graph *g = NULL;
    if (ap_graph_from_hf(cfg, strlen(cfg), "mistral.json", &o, &g, err)) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return g;
}

/* Full attention counts s^2 scores a head; a window of w < s counts twice
 * the s*w - w^2/2 of its causal band, so the two meet at w = s. */
static void scores_count_twice_the_causal_band(void)
{
    CHECK(ap_attention_scores(8192, 0) == 8192.0 * 8192);
    CHECK(ap_attention_scores(8192, 8192) == 8192.0 * 8192);
    CHECK(ap_attention_scores(8192, 100000) == 8192.0 * 8192);
    CHECK(ap_attention_scores(8192, 1024) == 15728640.0);
    CHECK(ap_attention_scores(8192, 1) == 16383.0);
}

/* Without length curves the band is the whole difference: 8,192 tokens
 * under a 1,024-key window compute 8192*1024 - 1024^2/2 = 7,864,320 of the
 * causal kernel's 8192^2/2 = 33,554,432 scores, 0.234375 of its time,
 * forward and backward. */
static void a_window_prices_the_band_the_kernel_computes(void)
{
    ap_cluster c = ap_test_h100(8), flat = c;
    flat.attn_len_n = 0;
    for (int bwd = 0; bwd < 2; bwd++) {
        double full = bwd ? ap_cost_attention_backward(&flat, AP_BF16, bn, 8192, 8192, d, d, 1)
                          : ap_cost_attention(&flat, AP_BF16, bn, 8192, 8192, d, d, 1);
        double band = ap_cost_attention_window(&flat, AP_BF16, bn, 8192, 1024, d, d, bwd);
        CHECK_NEAR(band / full, 0.234375, 1e-12);
    }
    ap_cluster_free(&c);
}

/* With the H100's curves the kernel runs at the rate of its loop length,
 * the window's 1,024 keys (forward 410 TFLOP/s, backward 408), not the
 * sequence's 8,192 (529 and 518). */
static void a_window_runs_at_the_rate_of_its_own_length(void)
{
    ap_cluster c = ap_test_h100(8);
    double fwd = ap_cost_attention_window(&c, AP_BF16, bn, 8192, 1024, d, d, 0) /
                 ap_cost_attention(&c, AP_BF16, bn, 8192, 8192, d, d, 1);
    double bwd = ap_cost_attention_window(&c, AP_BF16, bn, 8192, 1024, d, d, 1) /
                 ap_cost_attention_backward(&c, AP_BF16, bn, 8192, 8192, d, d, 1);
    CHECK_NEAR(fwd, 0.234375 * 529.0 / 410.0, 1e-9);
    CHECK_NEAR(bwd, 0.234375 * 518.0 / 408.0, 1e-9);
    ap_cluster_free(&c);
}

/* A window as long as the sequence, or none, is causal attention. */
static void a_window_as_long_as_the_sequence_is_causal_attention(void)
{
    ap_cluster c = ap_test_h100(8);
    for (int bwd = 0; bwd < 2; bwd++) {
        double causal = bwd ? ap_cost_attention_backward(&c, AP_BF16, bn, 4096, 4096, d, d, 1)
                            : ap_cost_attention(&c, AP_BF16, bn, 4096, 4096, d, d, 1);
        CHECK(ap_cost_attention_window(&c, AP_BF16, bn, 4096, 4096, d, d, bwd) == causal);
        CHECK(ap_cost_attention_window(&c, AP_BF16, bn, 4096, 9000, d, d, bwd) == causal);
        CHECK(ap_cost_attention_window(&c, AP_BF16, bn, 4096, 0, d, d, bwd) == causal);
    }
    ap_cluster_free(&c);
}

/* The planner prices a windowed attention op with the window's kernel:
 * batch 4 of 8 heads is 32 head rows of 64-wide heads. */
static void the_planner_prices_a_windowed_op_by_its_band(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = mistral(512, 4096, err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_cluster c;
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    ap_mesh one;
    ap_mesh_init(&one, 1, 1, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &one, .batch = 4, .nmicro = 1,
                      .zero = AP_ZERO_1};
    ap_strategy none = {{0, 0}, {0, 0}};
    ap_op_cost oc;
    ap_price_op(&x, ap_graph_find_op(g, "l0.attn"), &none, &oc);
    CHECK_NEAR(oc.fwd, ap_cost_attention_window(&c, AP_BF16, 32, 4096, 512, 64, 64, 0), 1e-12);
    CHECK_NEAR(oc.bwd, ap_cost_attention_window(&c, AP_BF16, 32, 4096, 512, 64, 64, 1), 1e-12);
    CHECK(oc.fwd < ap_cost_attention(&c, AP_BF16, 32, 4096, 4096, 64, 64, 1));
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static int splits_sequence(const ap_graph *g, const ap_cluster *c, const ap_mesh *m,
                           ap_cp_comm type)
{
    ap_price_ctx x = {.g = g, .c = c, .mesh = m, .batch = 8, .nmicro = 1,
                      .zero = AP_ZERO_1};
    x.run.cp_comm = type;
    ap_strategy st[AP_MAX_STRATEGIES];
    int n = ap_strategies(&x, ap_graph_find_op(g, "l0.attn"), st, AP_MAX_STRATEGIES);
    int seq = 0, heads = 0;
    for (int i = 0; i < n; i++)
        for (int a = 0; a < 2; a++) {
            seq += st[i].axis[a] == 's';
            heads += st[i].axis[a] == 'n';
        }
    CHECK(heads > 0);
    return seq > 0;
}

/* Transformer Engine's ring refuses a window: under it the search splits a
 * windowed attention's heads and batch, never its sequence, unless the
 * window spans it; under the all-gather or the all-to-all it may. */
static void the_ring_never_splits_a_windowed_sequence(void)
{
    char err[AP_ERR_LEN];
    ap_cluster c;
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    ap_mesh m;
    ap_mesh_init(&m, 2, 2, 0, 8);
    ap_graph *g = mistral(256, 1024, err);
    CHECK(g != NULL);
    if (g) {
        CHECK(!splits_sequence(g, &c, &m, AP_CP_P2P));
        CHECK(splits_sequence(g, &c, &m, AP_CP_ALLGATHER));
        CHECK(splits_sequence(g, &c, &m, AP_CP_A2A));
    }
    ap_graph_free(g);
    g = mistral(1024, 1024, err);
    CHECK(g != NULL);
    if (g)
        CHECK(splits_sequence(g, &c, &m, AP_CP_P2P));
    ap_graph_free(g);
    ap_cluster_free(&c);
}

/* A band of h queries from position q0 meets min(p + 1, w) keys each.
 * Without length curves its time is the causal rectangle's times the
 * ratio of scores: 4,096 queries from 4,096 under a 1,024-key window meet
 * 4,096 x 1,024 = 4,194,304 scores against the rectangle's 4096 x 8192 -
 * 4096^2 / 2 = 25,165,824; the first chunk, from 0, 1,024 x 1,025 / 2 +
 * 3,072 x 1,024 = 3,670,528 against 4096^2 / 2 = 8,388,608. A window that
 * spans the chunk's keys is the rectangle. */
static void a_band_counts_what_each_query_meets(void)
{
    ap_cluster c = ap_test_h100(8), flat = c;
    flat.attn_len_n = 0;
    for (int bwd = 0; bwd < 2; bwd++) {
        double rect = ap_cost_attention_rect(&flat, AP_BF16, bn, 4096, 8192, d, d, 1, bwd);
        double band = ap_cost_attention_band(&flat, AP_BF16, bn, 4096, 4096, 1024, d, d, bwd);
        CHECK_NEAR(band / rect, 4194304.0 / 25165824.0, 1e-12);
        double first = ap_cost_attention_rect(&flat, AP_BF16, bn, 4096, 4096, d, d, 1, bwd);
        band = ap_cost_attention_band(&flat, AP_BF16, bn, 0, 4096, 1024, d, d, bwd);
        CHECK_NEAR(band / first, 3670528.0 / 8388608.0, 1e-12);
        CHECK(ap_cost_attention_band(&c, AP_BF16, bn, 4096, 4096, 8192, d, d, bwd) ==
              ap_cost_attention_rect(&c, AP_BF16, bn, 4096, 8192, d, d, 1, bwd));
    }
    ap_cluster_free(&c);
}

/* Under the all-gather rank 0 of cp = 2 holds chunks 0 and 3 of 1,024
 * tokens each (2,048 rows), rank 1 chunks 1 and 2; each chunk's kernel is
 * its band. Under a window no longer than a chunk rank 1 is the slowest
 * (chunk 0's queries meet fewer keys), so between windows of 512 and 256
 * keys the forward differs by exactly its two bands' difference, from
 * positions 1,024 and 2,048. Both are below the causal rectangles', and
 * the gathers do not change. */
static void the_all_gather_runs_each_chunks_band(void)
{
    ap_cluster c = ap_test_h100(8);
    double want = 0;
    const double q0[2] = {1024, 2048};
    for (int i = 0; i < 2; i++)
        want += ap_cost_attention_band(&c, AP_BF16, bn, q0[i], 1024, 512, d, d, 0) -
                ap_cost_attention_band(&c, AP_BF16, bn, q0[i], 1024, 256, d, d, 0);
    double w512 = ap_cost_attention_cp_comm(&c, AP_CP_ALLGATHER, AP_BF16, bn, bn, 2048, d, d,
                                            1, 512, 2, 0);
    double w256 = ap_cost_attention_cp_comm(&c, AP_CP_ALLGATHER, AP_BF16, bn, bn, 2048, d, d,
                                            1, 256, 2, 0);
    CHECK(want > 0);
    CHECK_NEAR(w512 - w256, want, 1e-9);
    for (int bwd = 0; bwd < 2; bwd++) {
        double full = ap_cost_attention_cp_comm(&c, AP_CP_ALLGATHER, AP_BF16, bn, bn, 2048, d,
                                                d, 1, 0, 2, bwd);
        double band = ap_cost_attention_cp_comm(&c, AP_CP_ALLGATHER, AP_BF16, bn, bn, 2048, d,
                                                d, 1, 512, 2, bwd);
        CHECK(band < full);
        /* A window as long as the whole sequence is none. */
        CHECK(ap_cost_attention_cp_comm(&c, AP_CP_ALLGATHER, AP_BF16, bn, bn, 2048, d, d, 1,
                                        4096, 2, bwd) == full);
    }
    ap_cluster_free(&c);
}

/* Under the all-to-all each of cp = 2 ranks holds whole sequences of half
 * the heads, so the window's kernel over 4,096 rows of 256 head rows
 * replaces the causal one; the copies around the all-to-alls and the
 * exchange itself are the same with or without the window. */
static void the_all_to_all_runs_the_window_kernel_on_whole_sequences(void)
{
    ap_cluster c = ap_test_h100(8);
    for (int bwd = 0; bwd < 2; bwd++) {
        double full = ap_cost_attention_cp_comm(&c, AP_CP_A2A, AP_BF16, bn, bn, 2048, d, d, 1,
                                                0, 2, bwd);
        double band = ap_cost_attention_cp_comm(&c, AP_CP_A2A, AP_BF16, bn, bn, 2048, d, d, 1,
                                                1024, 2, bwd);
        double causal = bwd ? ap_cost_attention_backward(&c, AP_BF16, bn / 2, 4096, 4096, d, d, 1)
                            : ap_cost_attention(&c, AP_BF16, bn / 2, 4096, 4096, d, d, 1);
        double window = ap_cost_attention_window(&c, AP_BF16, bn / 2, 4096, 1024, d, d, bwd);
        CHECK(window < causal);
        CHECK_NEAR(full - band, causal - window, 1e-12);
        /* A window as long as the whole sequence is none. */
        CHECK(ap_cost_attention_cp_comm(&c, AP_CP_A2A, AP_BF16, bn, bn, 2048, d, d, 1, 4096,
                                        2, bwd) == full);
    }
    ap_cluster_free(&c);
}

/* The project format writes the window and reads it back. */
static void the_model_format_keeps_the_window(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = mistral(300, 1024, err), *back = NULL;
    REQUIRE_OK(g ? 0 : 1, err);
    char *json = ap_graph_to_json(g);
    CHECK_STR_HAS(json, "\"window\":\t300");
    REQUIRE_OK(ap_graph_parse_json(json, strlen(json), "round.json", &back, err), err);
    int i = ap_graph_find_op(back, "l1.attn");
    CHECK(i >= 0 && back->ops[i].window == 300);
    CHECK_NEAR(back->total_flops, g->total_flops, 1e-15);
    free(json);
    ap_graph_free(back);
    ap_graph_free(g);
}

static const char *model_fmt =
    "{\"format\": \"autopar-model/1\", \"name\": \"w\","
    " \"dims\": {\"b\": {\"kind\": \"batch\", \"size\": 1},"
    "  \"s\": {\"kind\": \"seq\", \"size\": 64}, \"n\": {\"kind\": \"heads\", \"size\": 2},"
    "  \"d\": {\"kind\": \"head_dim\", \"size\": 16}},"
    " \"tensors\": [{\"name\": \"q\", \"shape\": \"bsnd\", \"role\": \"input\"},"
    "  {\"name\": \"k\", \"shape\": \"bsnd\", \"role\": \"input\"},"
    "  {\"name\": \"v\", \"shape\": \"bsnd\", \"role\": \"input\"},"
    "  {\"name\": \"o\", \"shape\": \"bsnd\", \"role\": \"activation\"}],"
    " \"ops\": [{\"name\": \"attn\", \"kind\": \"attention\", \"inputs\": [\"q\", \"k\", \"v\"],"
    "  \"outputs\": [\"o\"], \"causal\": %s, \"window\": %s}]}";

static void refused(const char *causal, const char *window, const char *needle)
{
    char text[2048], err[AP_ERR_LEN] = "";
    snprintf(text, sizeof text, model_fmt, causal, window);
    ap_graph *g = NULL;
    CHECK(ap_graph_parse_json(text, strlen(text), "w.json", &g, err) == AP_EINPUT);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* A window needs a causal mask and at least one key; elsewhere it is an
 * unknown field. */
static void bad_windows_in_a_model_file_are_refused(void)
{
    char text[2048], err[AP_ERR_LEN];
    snprintf(text, sizeof text, model_fmt, "true", "16");
    ap_graph *g = NULL;
    REQUIRE_OK(ap_graph_parse_json(text, strlen(text), "w.json", &g, err), err);
    CHECK(g->ops[0].window == 16);
    /* 2 heads x (2*64*16 - 16^2) scores x (2 x (16 + 16) + 5). */
    CHECK_NEAR(g->ops[0].flops, 2.0 * (2 * 64 * 16 - 256) * 69, 1e-15);
    ap_graph_free(g);
    refused("false", "16", "a sliding window needs causal attention");
    refused("true", "0", "window");
    refused("true", "\"16\"", "window");
}

int main(void)
{
    RUN(scores_count_twice_the_causal_band);
    RUN(a_window_prices_the_band_the_kernel_computes);
    RUN(a_window_runs_at_the_rate_of_its_own_length);
    RUN(a_window_as_long_as_the_sequence_is_causal_attention);
    RUN(the_planner_prices_a_windowed_op_by_its_band);
    RUN(the_ring_never_splits_a_windowed_sequence);
    RUN(a_band_counts_what_each_query_meets);
    RUN(the_all_gather_runs_each_chunks_band);
    RUN(the_all_to_all_runs_the_window_kernel_on_whole_sequences);
    RUN(the_model_format_keeps_the_window);
    RUN(bad_windows_in_a_model_file_are_refused);
    return DONE();
}
