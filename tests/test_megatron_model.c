/* The model a Megatron-LM script states with no model file: its flags, read
 * with Megatron-LM's defaults (arguments.py) for those it leaves out, and
 * its vocabulary as the tokenizer gives it, padded to a multiple of
 * --make-vocab-size-divisible-by (128) x tp (_vocab_size_with_padding).
 * tests/cli/megatron_script.sh checks that every family's exported flags
 * build the model they came from. */
#include "model.h"

/* The graph a command line's flags build at its --seq-length; NULL, with
 * the message in err, when they are refused. */
static ap_graph *script_graph(const char *args, char *err)
{
    ap_megatron m;
    ap_decoder d;
    unsigned char *layers;
    ap_build_opts o;
    ap_graph *g = NULL;
    ap_megatron_default(&m);
    ap_build_opts_default(&o);
    if (ap_megatron_parse_args(args, &m, err))
        return NULL;
    o.seq = m.shape.seq;
    if (!ap_megatron_model(&m, &d, &layers, err))
        ap_graph_from_decoder(&d, AP_MEGATRON_SOURCE, &o, &g, err);
    free(layers);
    return g;
}

static long long dim(const ap_graph *g, char label)
{
    const ap_dim *d = ap_graph_dim(g, label);
    return d ? (long long)d->size : 0;
}

/* Megatron-LM's GPT with nothing but its sizes (and --fp16, without which
 * it would train in fp32, refused below): learned positions, LayerNorm
 * with biases, a GELU MLP 4 x hidden wide, biases on every linear layer,
 * tied embeddings; pretrain_gpt.py's GPT2BPETokenizer, whose 50,257 tokens
 * are padded to 128 x 8. */
static void a_bare_gpt_script_gets_megatron_defaults(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                               "--seq-length 2048 --max-position-embeddings 2048 "
                               "--tensor-model-parallel-size 8 --fp16", err);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    long long h = 1024, L = 4, V = 51200, P = 2048;
    CHECK(g->dtype == AP_FP16); /* --fp16 trains fp16 weights and activations */
    CHECK(dim(g, 'v') == V);
    CHECK(dim(g, 'f') == 4 * h);
    CHECK(dim(g, 'p') == P);
    /* Per layer: QKV and output 4h^2 + 4h, MLP 8h^2 + 5h, two LayerNorms
     * 4h; then the tied table, the position table and the final norm. */
    CHECK(g->total_params == (double)(L * (12 * h * h + 13 * h) + (V + P) * h + 2 * h));
    ap_graph_free(g);
}

/* Under --swiglu without --ffn-hidden-size, Megatron-LM keeps the MLP's
 * parameters near 8h^2: int(4h x 2/3 / 64) x 64, 10,880 for 4,096. */
static void swiglu_ffn_defaults_to_two_thirds_of_four_h(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 1 --hidden-size 4096 --num-attention-heads 32 "
                               "--seq-length 1024 --position-embedding-type rope --swiglu "
                               "--normalization RMSNorm --disable-bias-linear "
                               "--tokenizer-type NullTokenizer --vocab-size 32000 --bf16", err);
    CHECK(g && dim(g, 'f') == 10880);
    /* NullTokenizer adds an end-of-document token: 32,001 padded to 128. */
    CHECK(g && dim(g, 'v') == 32128);
    CHECK(g && dim(g, 'p') == 0);
    ap_graph_free(g);
}

/* --group-query-attention without --num-query-groups is one group
 * (multi-query attention), Megatron-LM's default. */
static void one_query_group_by_default(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 1 --hidden-size 1024 --num-attention-heads 8 "
                               "--seq-length 1024 --position-embedding-type rope "
                               "--group-query-attention --vocab-size 1000 "
                               "--tokenizer-type TikTokenizer --bf16", err);
    CHECK(g && dim(g, 'g') == 1 && dim(g, 'n') == 8);
    ap_graph_free(g);
}

/* The same model from a script and from its Hugging Face config: Llama 3
 * 8B's two layers at 4,096 tokens, the vocabulary stated with a divisor
 * of 1. */
static void a_llama_script_builds_the_llama_graph(void)
{
    char err[AP_ERR_LEN];
    ap_graph *s = script_graph("--num-layers 2 --hidden-size 4096 --num-attention-heads 32 "
                               "--group-query-attention --num-query-groups 8 "
                               "--ffn-hidden-size 14336 --seq-length 4096 "
                               "--position-embedding-type rope --swiglu "
                               "--normalization RMSNorm --disable-bias-linear "
                               "--untie-embeddings-and-output-weights "
                               "--tokenizer-type HuggingFaceTokenizer --vocab-size 128256 "
                               "--make-vocab-size-divisible-by 1 --bf16", err);
    ap_graph *h = ap_test_hf_text(
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 4096,"
        " \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
        " \"intermediate_size\": 14336, \"vocab_size\": 128256,"
        " \"max_position_embeddings\": 4096}", "llama");
    CHECK(s && h);
    if (s && h) {
        CHECK(s->nops == h->nops && s->ntensors == h->ntensors);
        CHECK(s->total_params == h->total_params);
        CHECK(s->total_flops == h->total_flops);
        CHECK(s->total_saved_bytes == h->total_saved_bytes);
    }
    ap_graph_free(s);
    ap_graph_free(h);
}

/* --moe-layer-freq keeps the first layer dense: its MLP is --ffn-hidden-size
 * wide, the others route to experts --moe-ffn-hidden-size wide, top 8. */
static void moe_layer_freq_makes_the_dense_layers(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
                               "--seq-length 1024 --position-embedding-type rope --swiglu "
                               "--normalization RMSNorm --disable-bias-linear "
                               "--ffn-hidden-size 4096 --num-experts 16 --moe-router-topk 8 "
                               "--moe-ffn-hidden-size 512 --moe-layer-freq [0]+[1]*3 "
                               "--moe-grouped-gemm --tokenizer-type TikTokenizer "
                               "--vocab-size 1000 --bf16", err);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    unsigned char moe[4];
    ap_model_moe_layers(g, moe);
    CHECK(!moe[0] && moe[1] && moe[2] && moe[3]);
    CHECK(dim(g, 'f') == 4096 && dim(g, 'm') == 512 && dim(g, 'E') == 16);
    /* TikTokenizer's 1,000 tokens as --vocab-size says them, padded to 128. */
    CHECK(dim(g, 'v') == 1024);
    ap_graph_free(g);
}

/* Expert groups that all stay in (Moonlight's --moe-router-num-groups 1
 * --moe-router-group-topk 1, or 4 of 4) limit nothing: Megatron-Core
 * routes over all the experts, and so does the model built. 2 of 4 is a
 * limit the router keeps. */
static void expert_groups_that_all_stay_in_limit_nothing(void)
{
    const char *base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 8 "
                       "--seq-length 1024 --position-embedding-type rope --swiglu "
                       "--normalization RMSNorm --disable-bias-linear --num-experts 16 "
                       "--moe-router-topk 2 --moe-ffn-hidden-size 512 --moe-grouped-gemm "
                       "--tokenizer-type TikTokenizer --vocab-size 1000 --bf16 ";
    const char *groups[3] = {"--moe-router-num-groups 1 --moe-router-group-topk 1",
                             "--moe-router-num-groups 4 --moe-router-group-topk 4",
                             "--moe-router-num-groups 4 --moe-router-group-topk 2"};
    for (int i = 0; i < 3; i++) {
        char line[1024], err[AP_ERR_LEN];
        snprintf(line, sizeof line, "%s%s", base, groups[i]);
        ap_graph *g = script_graph(line, err);
        REQUIRE_OK(g ? 0 : 1, err);
        int r = ap_graph_find_op(g, "l0.router");
        CHECK(r >= 0 && g->ops[r].groups == (i == 2 ? 4 : 0) &&
              g->ops[r].group_topk == (i == 2 ? 2 : 0));
        ap_graph_free(g);
    }
}

/* Eight small layers at 8,192 tokens, Megatron-LM's flags for them. */
#define SMALL "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 " \
              "--seq-length 8192 --position-embedding-type rope --swiglu " \
              "--normalization RMSNorm --disable-bias-linear " \
              "--untie-embeddings-and-output-weights --tokenizer-type NullTokenizer " \
              "--vocab-size 32000 --bf16 "

/* Each layer's attention window (0: none), from its attention op; the
 * count of attention ops. */
static int layer_windows(const ap_graph *g, long long *w)
{
    int n = 0;
    for (int i = 0; i < g->nlayers; i++)
        w[i] = -1;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].kind == AP_OP_ATTENTION && g->ops[i].layer >= 0) {
            w[g->ops[i].layer] = g->ops[i].window;
            n++;
        }
    return n;
}

static double attention_flops(const ap_graph *g, int layer)
{
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].kind == AP_OP_ATTENTION && g->ops[i].layer == layer)
            return g->ops[i].flops;
    return 0;
}

/* Transformer Engine's (L, 0) lets each query meet itself and the L keys
 * before it: --window-size 4095,0 is a window of 4,096 keys, on every layer
 * without --window-attn-skip-freq. At 8,192 tokens it leaves 2sw - w^2 of
 * the s^2 scores, three quarters (4,095 would leave less). L = -1 is no
 * window, and so is a skip frequency without --window-size, which
 * Megatron-LM reads only with it. */
static void window_size_gives_every_layer_l_plus_one_keys(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph(SMALL "--window-size 4095,0", err);
    ap_graph *full = script_graph(SMALL, err);
    CHECK(g && full);
    if (!g || !full) {
        fprintf(stderr, "%s\n", err);
        ap_graph_free(g);
        ap_graph_free(full);
        return;
    }
    long long w[8];
    CHECK(layer_windows(g, w) == 8);
    for (int i = 0; i < 8; i++)
        CHECK(w[i] == 4096);
    CHECK(attention_flops(g, 0) == 0.75 * attention_flops(full, 0));
    ap_graph_free(g);
    ap_graph_free(full);
    const char *none[] = {SMALL "--window-size -1,0", SMALL "--window-attn-skip-freq 4"};
    for (int k = 0; k < 2; k++) {
        g = script_graph(none[k], err);
        CHECK(g != NULL);
        if (!g)
            continue;
        CHECK(layer_windows(g, w) == 8);
        for (int i = 0; i < 8; i++)
            CHECK(w[i] == 0);
        ap_graph_free(g);
    }
}

/* --window-attn-skip-freq N windows every layer whose 1-based number N does
 * not divide (is_layer_window_attention): one full-attention layer after
 * three windowed ones, layers 3 and 7 of 8 full, where --moe-layer-freq 4
 * would pick layers 0 and 4. The list form says the same per layer, 1 for
 * windowed. */
static void skip_freq_leaves_every_nth_layer_full(void)
{
    const char *lines[] = {SMALL "--window-size 1023,0 --window-attn-skip-freq 4",
                           SMALL "--window-size 1023,0 --window-attn-skip-freq [1,1,1,0]*2",
                           SMALL "--window-size 1023,0 --window-attn-skip-freq '([1]*3+[0])*2'"};
    const long long want[8] = {1024, 1024, 1024, 0, 1024, 1024, 1024, 0};
    for (int k = 0; k < 3; k++) {
        char err[AP_ERR_LEN];
        ap_graph *g = script_graph(lines[k], err);
        CHECK(g != NULL);
        if (!g) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        long long w[8];
        layer_windows(g, w);
        for (int i = 0; i < 8; i++)
            CHECK(w[i] == want[i]);
        ap_graph_free(g);
    }
    /* The first three layers full, as Qwen's max_window_layers 3 leaves them. */
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph(SMALL "--window-size 1023,0 --window-attn-skip-freq [0]*3+[1]*5",
                               err);
    CHECK(g != NULL);
    if (g) {
        long long w[8];
        layer_windows(g, w);
        CHECK(w[0] == 0 && w[2] == 0 && w[3] == 1024 && w[7] == 1024);
        ap_graph_free(g);
    }
}

/* What a window the graph cannot have, or a pattern of another length,
 * is refused naming the flag and its value. */
static void bad_windows_are_refused(void)
{
    char err[AP_ERR_LEN];
    CHECK(!script_graph(SMALL "--window-size 4095,64", err));
    CHECK_STR_HAS(err, "--window-size 4095,64: R = 64 lets each query meet keys after it");
    CHECK_STR_HAS(err, "give --window-size 4095,0");
    CHECK(!script_graph(SMALL "--window-size -1,-1", err));
    CHECK_STR_HAS(err, "R = -1 (unbounded)");
    const char *bad[] = {"4095", "a,0", "4095,0,0", "-2,0", "4095,-2"};
    for (int i = 0; i < 5; i++) {
        char line[512];
        snprintf(line, sizeof line, SMALL "--window-size '%s'", bad[i]);
        CHECK(!script_graph(line, err));
        CHECK_STR_HAS(err, "--window-size: bad value");
    }
    CHECK(!script_graph(SMALL "--window-size 1023,0 --window-attn-skip-freq [1,0]*3", err));
    CHECK_STR_HAS(err, "--window-attn-skip-freq \"[1,0]*3\" has 6 entries, but the model "
                       "has 8 layers");
    CHECK(!script_graph(SMALL "--window-size 1023,0 --window-attn-skip-freq 0", err));
    CHECK_STR_HAS(err, "--window-attn-skip-freq \"0\": a frequency below 1");
}

/* Megatron-LM reads a windowed model's pattern back in its shortest form:
 * "4" for one full layer in four (not --moe-layer-freq's "4", layers 0
 * and 4), runs where no integer says it, nothing where every layer has it. */
static void window_patterns_are_written_as_megatron_reads_them(void)
{
    const unsigned char every4[8] = {1, 1, 1, 0, 1, 1, 1, 0};
    const unsigned char qwen[8] = {0, 0, 0, 1, 1, 1, 1, 1};
    const unsigned char all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    char buf[64], err[AP_ERR_LEN];
    unsigned char back[8];
    CHECK(!ap_window_freq_format(every4, 8, buf, sizeof buf) && !strcmp(buf, "4"));
    CHECK(!ap_moe_freq_format(every4, 8, buf, sizeof buf) && strcmp(buf, "4"));
    CHECK(!ap_window_freq_format(qwen, 8, buf, sizeof buf) && !strcmp(buf, "[0]*3+[1]*5"));
    CHECK(!ap_window_freq_parse(buf, 8, back, err) && !memcmp(back, qwen, 8));
    CHECK(!ap_window_freq_format(all, 8, buf, sizeof buf) && !strcmp(buf, ""));
}

/* A Mistral-like config, every layer windowed to 4,096 keys of 8,192. */
static const char mistral[] =
    "{\"model_type\": \"mistral\", \"num_hidden_layers\": 8, \"hidden_size\": 1024,"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 8,"
    " \"intermediate_size\": 2816, \"vocab_size\": 32000,"
    " \"max_position_embeddings\": 8192, \"sliding_window\": 4096}";

/* ap_megatron_plan of the flags `args` on g over 8 H100s: its return, err
 * filled. */
static int plan_args(const ap_graph *g, const char *args, char *err)
{
    ap_plan p;
    int rc = ap_test_megatron_plan(g, 8, args, NULL, &p, err);
    if (!rc)
        ap_plan_free(&p);
    return rc;
}

/* Transformer Engine's p2p ring refuses a window shorter than the
 * sequence; its all-gather and all-to-all take it: cp 2 is refused with
 * 4,096 keys of 8,192 under p2p and priced under the others, and priced
 * under p2p with all 8,192, which changes nothing. */
static void context_parallelism_under_a_short_window_needs_allgather_or_a2a(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph(SMALL "--window-size 4095,0", err);
    ap_graph *whole = script_graph(SMALL "--window-size 8191,0", err);
    CHECK(g && whole);
    if (g && whole) {
        CHECK(plan_args(g, "--context-parallel-size 2", err) == AP_EINPUT);
        CHECK_STR_HAS(err, "cp=2 (--context-parallel-size 2) with cp_comm=p2p: Transformer "
                           "Engine's ring refuses a sliding window (here 4096 keys, shorter "
                           "than the sequence 8192)");
        CHECK(plan_args(g, "--context-parallel-size 2 --cp-comm-type allgather", err) == AP_OK);
        CHECK(plan_args(g, "--context-parallel-size 2 --cp-comm-type a2a", err) == AP_OK);
        CHECK(plan_args(g, "--context-parallel-size 1", err) == AP_OK);
        CHECK(plan_args(whole, "--context-parallel-size 2", err) == AP_OK);
    }
    ap_graph_free(g);
    ap_graph_free(whole);
}

/* With a model, the window flags must state its window and its layers, as
 * --moe-layer-freq its MoE layers: the message says what the model has and
 * the flag to give. A line that states only the layout takes the model's. */
static void window_flags_must_describe_the_model(void)
{
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 8192;
    ap_graph *g = NULL;
    REQUIRE_OK(ap_graph_from_hf(mistral, sizeof mistral - 1, "mistral", &o, &g, err), err);
    CHECK(plan_args(g, SMALL "--window-size 4095,0", err) == AP_OK);
    CHECK(plan_args(g, "--tensor-model-parallel-size 2", err) == AP_OK);
    CHECK(plan_args(g, SMALL "--window-size 2047,0", err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--window-size 2047,0 gives each query 2048 keys, but mistral's "
                       "sliding window is 4096 keys: give --window-size 4095,0");
    CHECK(plan_args(g, SMALL "--window-size 4095,0 --window-attn-skip-freq 4", err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "--window-attn-skip-freq 4 makes layer 3 attend over the whole "
                       "sequence, but in mistral it has a sliding window: give "
                       "--window-size 4095,0");
    /* A whole script without the flag states Megatron-LM's default: none. */
    CHECK(plan_args(g, SMALL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "no --window-size (no sliding window, Megatron-LM's default)");
    CHECK_STR_HAS(err, "give --window-size 4095,0");
    ap_graph_free(g);
    /* And a window the model does not have. */
    g = script_graph(SMALL, err);
    CHECK(g != NULL);
    if (g) {
        CHECK(plan_args(g, "--window-size 4095,0", err) == AP_EINPUT);
        CHECK_STR_HAS(err, "gives layer 0 a sliding window of 4096 keys, but --megatron-args "
                           "has no sliding window: give no --window-size");
        ap_graph_free(g);
    }
}

/* --no-rope-freq N leaves layer i without rotary embedding when N divides
 * i + 1 (one NoPE layer after N - 1 rotary ones, Llama 4's 4), as the list
 * [0,0,0,1]*2 says; --qk-l2-norm norms the rotary layers' q and k without
 * a weight (one input), and the NoPE layers' not at all. */
static void no_rope_freq_leaves_every_nth_layer_without_rotary(void)
{
    char err[AP_ERR_LEN];
    const char *lines[] = {SMALL "--no-rope-freq 4 --qk-l2-norm",
                           SMALL "--no-rope-freq [0,0,0,1]*2 --qk-l2-norm",
                           SMALL "--no-rope-freq '([0]*3+[1])*2' --qk-l2-norm"};
    for (int k = 0; k < 3; k++) {
        ap_graph *g = script_graph(lines[k], err);
        CHECK(g != NULL);
        if (!g)
            continue;
        for (int i = 0; i < 8; i++) {
            char name[32];
            int nope = i == 3 || i == 7;
            snprintf(name, sizeof name, "l%d.q_rot", i);
            CHECK((ap_graph_find_op(g, name) < 0) == nope);
            snprintf(name, sizeof name, "l%d.k_norm", i);
            int op = ap_graph_find_op(g, name);
            CHECK(nope ? op < 0 : op >= 0 && g->ops[op].ninputs == 1);
        }
        ap_model_shape s;
        ap_model_shape_of(g, &s);
        CHECK(s.nope_layers == 2 && !strcmp(s.nope_freq, "4"));
        CHECK(s.qk_l2 && !s.qk_norm);
        ap_graph_free(g);
    }
    /* Without it every layer rotates. */
    ap_graph *g = script_graph(SMALL, err);
    CHECK(g && ap_graph_find_op(g, "l7.q_rot") >= 0 && ap_graph_find_op(g, "l0.q_norm") < 0);
    ap_graph_free(g);
}

/* Two norms on q and k, an integer that does not divide the layers
 * (Megatron-LM asserts it) and a list of another length are refused. */
static void bad_nope_and_qk_norm_flags_are_refused(void)
{
    char err[AP_ERR_LEN];
    CHECK(!script_graph(SMALL "--qk-l2-norm --qk-layernorm", err));
    CHECK_STR_HAS(err, "--qk-l2-norm with --qk-layernorm: each norms the queries and keys");
    CHECK(!script_graph(SMALL "--no-rope-freq 3", err));
    CHECK_STR_HAS(err, "--no-rope-freq 3 does not divide the model's 8 layers");
    CHECK(!script_graph(SMALL "--no-rope-freq [0,1]*3", err));
    CHECK_STR_HAS(err, "--no-rope-freq \"[0,1]*3\" has 6 entries, but the model has 8");
    unsigned char llama4[8] = {0, 0, 0, 1, 0, 0, 0, 1}, first[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    unsigned char none[8] = {0}, back[8];
    char buf[256];
    CHECK(!ap_nope_freq_format(llama4, 8, buf, sizeof buf) && !strcmp(buf, "4"));
    CHECK(!ap_nope_freq_format(first, 8, buf, sizeof buf) && !strcmp(buf, "[1]+[0]*7"));
    CHECK(!ap_nope_freq_parse(buf, 8, back, err) && !memcmp(back, first, 8));
    CHECK(!ap_nope_freq_format(none, 8, buf, sizeof buf) && !strcmp(buf, ""));
}

/* With Llama 4 Scout's file, the flags must state its NoPE layers and its
 * weightless q and k norms: the message names the first layer that
 * differs and the flag to give. */
static void nope_flags_must_describe_the_model(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_model("examples/hf/llama-4-scout.json", 4096);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/llama-4-scout.json did not load");
    const char *ep = "--expert-model-parallel-size 8 ";
    char line[256];
    snprintf(line, sizeof line, "%s--no-rope-freq 4 --qk-l2-norm", ep);
    CHECK(plan_args(g, line, err) == AP_OK);
    snprintf(line, sizeof line, "%s--no-rope-freq 2", ep);
    CHECK(plan_args(g, line, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--no-rope-freq 2 makes layer 1 take no rotary embedding, but in ");
    CHECK_STR_HAS(err, "llama-4-scout.json it is rotary: give --no-rope-freq 4");
    snprintf(line, sizeof line, "%s--qk-layernorm", ep);
    CHECK(plan_args(g, line, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--qk-layernorm, but");
    ap_graph_free(g);
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 8192;
    REQUIRE_OK(ap_graph_from_hf(mistral, sizeof mistral - 1, "mistral", &o, &g, err), err);
    CHECK(plan_args(g, "--qk-l2-norm", err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--qk-l2-norm, but mistral has no norm without a weight on its "
                       "queries and keys");
    CHECK(plan_args(g, "--no-rope-freq 4", err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--no-rope-freq 4 makes layer 3 take no rotary embedding, but in "
                       "mistral it is rotary: give no --no-rope-freq");
    ap_graph_free(g);
}

/* What the flags do not say is refused, naming the flag. */
static void what_the_script_leaves_unknown_is_refused(void)
{
    char err[AP_ERR_LEN];
    const char *gpt = "--num-layers 2 --hidden-size 1000 --num-attention-heads 16 "
                      "--seq-length 1024 --max-position-embeddings 1024 ";
    char line[512];
    CHECK(!script_graph("--hidden-size 1024 --num-attention-heads 16", err));
    CHECK_STR_HAS(err, "--num-layers is missing");
    snprintf(line, sizeof line, "%s--tokenizer-type GPT2BPETokenizer", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--hidden-size is not divisible by --num-attention-heads");
    snprintf(line, sizeof line, "%s--kv-channels 64 --tokenizer-type SentencePieceTokenizer",
             gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--tokenizer-type SentencePieceTokenizer keeps its vocabulary");
    /* Experts under Megatron-LM's default --add-bias-linear carry biases
     * (GPT-OSS's), as its grouped experts do. */
    snprintf(line, sizeof line, "%s--kv-channels 64 --vocab-size 100 --num-experts 4 "
             "--swiglu --moe-grouped-gemm --bf16", gpt);
    ap_graph *g = script_graph(line, err);
    CHECK(g != NULL);
    if (g) {
        int op = ap_graph_find_op(g, "l0.experts.down");
        CHECK(op >= 0 && g->ops[op].ninputs == 3);
        ap_graph_free(g);
    }
    snprintf(line, sizeof line, "%s--kv-channels 64 --vocab-size 100 "
             "--multi-latent-attention", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--multi-latent-attention without --position-embedding-type rope");
    /* Neither --bf16 nor --fp16: Megatron-LM's fp32 training. */
    snprintf(line, sizeof line, "%s--kv-channels 64", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "no --bf16 or --fp16, so Megatron-LM trains in fp32");
}

/* --quick-geglu (GPT-OSS's MLP) is gated: the gate through
 * x * sigmoid(1.702 x) times the up projection, so the MLP holds three
 * h x f matrices, as SwiGLU's, where a plain GELU MLP holds two. Unlike
 * --swiglu it keeps Megatron-LM's default ffn of 4h. Experts are built
 * with it too. */
static void quick_geglu_is_a_gated_mlp(void)
{
    char err[AP_ERR_LEN];
    const char *base = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 "
                       "--seq-length 1024 --position-embedding-type rope "
                       "--normalization RMSNorm --disable-bias-linear "
                       "--tokenizer-type NullTokenizer --vocab-size 1023 --bf16 ";
    char line[768];
    snprintf(line, sizeof line, "%s--quick-geglu", base);
    ap_graph *q = script_graph(line, err);
    snprintf(line, sizeof line, "%s", base);
    ap_graph *plain = script_graph(line, err);
    CHECK(q && plain);
    if (q && plain) {
        long long h = 1024, f = 4 * h;
        CHECK(dim(q, 'f') == f);
        CHECK(q->total_params - plain->total_params == (double)(2 * h * f));
        int op = ap_graph_find_op(q, "l0.mlp.quick_gelu");
        CHECK(op >= 0 && q->ops[op].sub == AP_UNARY_QUICK_GELU);
        op = ap_graph_find_op(q, "l0.mlp.mul");
        CHECK(op >= 0 && ap_glu_activation(q, &q->ops[op], 0) == AP_UNARY_QUICK_GELU);
        ap_model_shape s;
        ap_model_shape_of(q, &s);
        CHECK(s.quick_geglu && s.gated && !s.swiglu);
    }
    ap_graph_free(q);
    ap_graph_free(plain);
    snprintf(line, sizeof line, "%s--quick-geglu --num-experts 8 --moe-router-topk 2 "
             "--moe-grouped-gemm", base);
    q = script_graph(line, err);
    CHECK(q != NULL);
    if (q) {
        int op = ap_graph_find_op(q, "l0.experts.quick_gelu");
        CHECK(op >= 0 && q->ops[op].sub == AP_UNARY_QUICK_GELU);
        ap_graph_free(q);
    }
    snprintf(line, sizeof line, "%s--quick-geglu --swiglu", base);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--swiglu with --quick-geglu: each sets the MLP's activation");
}

/* A line without --tokenizer-type or the GPT-2 files that names its
 * tokenizer another way (NeMo's --tokenizer-library, a fork's
 * --patch-tokenizer-type) does not run GPT2BPETokenizer: it needs
 * --vocab-size, which then is the vocabulary (256,000 padded to 128 x 8
 * is 256,000). With --vocab-file it is GPT-2's 50,257 again. */
static void a_tokenizer_named_otherwise_needs_its_vocabulary(void)
{
    char err[AP_ERR_LEN];
    const char *gpt = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 "
                      "--seq-length 2048 --max-position-embeddings 2048 "
                      "--tensor-model-parallel-size 8 --bf16 ";
    char line[1024];
    snprintf(line, sizeof line, "%s--tokenizer-library sentencepiece "
             "--tokenizer-model /data/nemotron_2_256k.model", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "the tokenizer is named by a flag autopar does not read");
    snprintf(line, sizeof line, "%s--patch-tokenizer-type LLama3Tokenizer --vocab-size 256000",
             gpt);
    ap_graph *g = script_graph(line, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim(g, 'v') == 256000);
    ap_graph_free(g);
    snprintf(line, sizeof line, "%s--tokenizer-model x --vocab-file gpt2-vocab.json "
             "--merge-file gpt2-merges.txt", gpt);
    g = script_graph(line, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(dim(g, 'v') == 51200);
    ap_graph_free(g);
}

int main(void)
{
    RUN(a_bare_gpt_script_gets_megatron_defaults);
    RUN(swiglu_ffn_defaults_to_two_thirds_of_four_h);
    RUN(one_query_group_by_default);
    RUN(a_llama_script_builds_the_llama_graph);
    RUN(moe_layer_freq_makes_the_dense_layers);
    RUN(what_the_script_leaves_unknown_is_refused);
    RUN(a_tokenizer_named_otherwise_needs_its_vocabulary);
    RUN(expert_groups_that_all_stay_in_limit_nothing);
    RUN(window_size_gives_every_layer_l_plus_one_keys);
    RUN(skip_freq_leaves_every_nth_layer_full);
    RUN(bad_windows_are_refused);
    RUN(window_patterns_are_written_as_megatron_reads_them);
    RUN(context_parallelism_under_a_short_window_needs_allgather_or_a2a);
    RUN(window_flags_must_describe_the_model);
    RUN(quick_geglu_is_a_gated_mlp);
    RUN(no_rope_freq_leaves_every_nth_layer_without_rotary);
    RUN(bad_nope_and_qk_norm_flags_are_refused);
    RUN(nope_flags_must_describe_the_model);
    return DONE();
}
