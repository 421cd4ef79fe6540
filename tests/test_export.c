/* Exports: a Megatron-LM configuration priced as a plan, written to
 * plan.json and read back, classifies to exactly its degrees; its exported
 * flags price to the same step time; plans a launcher cannot state are
 * refused naming the stage and op; each emitter states the numbers the
 * launcher needs. */
#include "model.h"

#include <cjson/cJSON.h>

#include "planner/planner.h"

static ap_graph *load(const char *rel)
{
    return ap_test_model(rel, 0);
}

static void megatron_plan_classifies_back_to_its_degrees(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    ap_degrees k;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=2,sp=1,vpp=2,mbs=1,gbs=64", &d, NULL), "see above");
    REQUIRE_OK(ap_plan_classify(g, &d, AP_LAUNCHER_MEGATRON, &k, err), err);
    CHECK(k.tp == 2 && k.pp == 2 && k.dp == 4 && k.sp == 1 && k.vpp == 2);
    CHECK(k.cp == 1 && k.ep == 1 && k.mbs == 1 && k.gbs == 64 && k.nmicro == 16);
    CHECK(k.zero == AP_ZERO_1 && k.recompute == AP_RECOMPUTE_NONE && k.even);
    ap_plan_desc_free(&d);

    /* Without sequence parallelism, with 2 sequences per replica, full
     * recomputation and no distributed optimizer. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=4,pp=1,mbs=2,gbs=64,recompute=full,zero=0", &d, NULL), "see above");
    REQUIRE_OK(ap_plan_classify(g, &d, AP_LAUNCHER_MEGATRON, &k, err), err);
    CHECK(k.tp == 4 && k.pp == 1 && k.dp == 4 && k.sp == 0 && k.vpp == 1 && k.mbs == 2);
    CHECK(k.zero == AP_ZERO_NONE && k.recompute == AP_RECOMPUTE_FULL);
    ap_plan_desc_free(&d);

    /* Pure data parallelism: the [16, 1] mesh is one group of 16. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=1,pp=1,mbs=1,gbs=64", &d, NULL), "see above");
    REQUIRE_OK(ap_plan_classify(g, &d, AP_LAUNCHER_MEGATRON, &k, err), err);
    CHECK(k.tp == 1 && k.dp == 16 && k.pp == 1);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* The Megatron-LM flags of export `text` priced on `gpus` H100s into *p,
 * which the caller frees whatever it returns; the status, the message in
 * err. */
static int price_exported(const ap_graph *g, const char *text, int gpus, ap_plan *p,
                          char *err)
{
    char args[4096];
    ap_megatron m;
    ap_cluster c;
    memset(p, 0, sizeof *p);
    ap_test_megatron_args_of(text ? text : "", args, sizeof args);
    ap_megatron_default(&m);
    int rc = ap_megatron_parse_args(args, &m, err);
    if (!rc && !(rc = ap_cluster_preset("h100-sxm", gpus, 0, &c, err))) {
        rc = ap_megatron_plan(g, &c, &m, p, err);
        ap_cluster_free(&c);
    }
    return rc;
}

static void exported_megatron_flags_price_to_the_same_step(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    const char *specs[] = {"tp=2,pp=2,sp=1,vpp=2,mbs=1,gbs=64",
                           "tp=4,pp=1,mbs=2,gbs=64,recompute=full,zero=0",
                           "tp=8,pp=2,sp=1,mbs=1,gbs=32,recompute=selective",
                           "tp=4,pp=1,mbs=2,gbs=64,overlap_grad=0",
                           "tp=2,pp=4,sp=1,mbs=1,gbs=64,first=4,last=4",
                           "tp=2,pp=4,sp=1,vpp=2,mbs=1,gbs=64,first=4,last=4,overlap_grad=0",
                           "tp=2,pp=2,mbs=1,gbs=64,first=10"};
    for (int i = 0; i < 7; i++) {
        ap_plan_desc d;
        double step = 0;
        char err[AP_ERR_LEN], *text = NULL;
        REQUIRE_OK(ap_test_megatron_desc(g, 16, specs[i], &d, &step), "see above");
        REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
        CHECK_STR_HAS(text, "--tensor-model-parallel-size");
        ap_plan p;
        REQUIRE_OK(price_exported(g, text, 16, &p, err), err);
        CHECK_NEAR(p.step_time, step, 1e-12);
        CHECK_NEAR(p.step_time, d.step_time, 1e-12);
        ap_plan_free(&p);
        free(text);
        ap_plan_desc_free(&d);
    }
    ap_graph_free(g);
}

static void megatron_flags_state_the_model_shape(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=4,pp=2,sp=1,mbs=1,gbs=256", &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--num-layers 32\n");
    CHECK_STR_HAS(text, "--hidden-size 4096\n");
    CHECK_STR_HAS(text, "--num-attention-heads 32\n");
    CHECK_STR_HAS(text, "--group-query-attention\n  --num-query-groups 8\n");
    CHECK_STR_HAS(text, "--ffn-hidden-size 14336\n");
    CHECK_STR_HAS(text, "--seq-length 4096\n");
    CHECK_STR_HAS(text, "--swiglu\n");
    CHECK_STR_HAS(text, "--normalization RMSNorm\n");
    CHECK_STR_HAS(text, "--position-embedding-type rope\n");
    CHECK_STR_HAS(text, "--untie-embeddings-and-output-weights\n");
    CHECK_STR_HAS(text, "torchrun --nnodes 2 --nproc-per-node 8");
    CHECK(text && !strstr(text, "--kv-channels")); /* 32 x 128 = 4096 */
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

static ap_graph *neox(const char *extra)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, \"hidden_size\": 256,"
             " \"num_attention_heads\": 4, \"intermediate_size\": 1024, \"vocab_size\": 1024,"
             " \"max_position_embeddings\": 128%s}", extra);
    return ap_test_hf_text(cfg, "neox.json");
}

/* GPT-NeoX rotates rotary_pct of each 64-wide head (16 of 64 here):
 * Megatron-LM trains that model only with --rotary-percent, and plan.json
 * records the share so that an export checks it against the model. */
static void partial_rotary_is_stated_as_rotary_percent(void)
{
    ap_graph *g = neox(", \"rotary_pct\": 0.25, \"use_parallel_residual\": false");
    REQUIRE_OK(g ? 0 : 1, "neox.json did not load");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=2,pp=1,sp=1,mbs=1,gbs=64", &d, NULL), "see above");
    CHECK_NEAR(d.shape.rotary_percent, 0.25, 0);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--position-embedding-type rope\n  --rotary-percent 0.25\n");
    free(text);
    d.shape.rotary_percent = 0.5;
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "model_shape.rotary_percent is 0.5 but the model neox.json rotates 0.25");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* A small config of `type` with `extra` fields, for the bias cases. */
static ap_graph *tiny_hf(const char *type, const char *extra)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, \"hidden_size\": 256,"
             " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
             " \"intermediate_size\": 512, \"vocab_size\": 1024,"
             " \"max_position_embeddings\": 128%s}", type, extra);
    return ap_test_hf_text(cfg, "tiny.json");
}

/* Megatron-LM has a bias on every linear layer by default, none with
 * --disable-bias-linear, and with --add-qkv-bias on Q, K and V too: Qwen2's
 * layout. Qwen3's norms on queries and keys are --qk-layernorm. A model
 * with biases on Q, K, V and the output projection but not its MLP (Llama's
 * attention_bias) has no flag and is refused. */
static void biases_and_qk_norms_are_stated_as_megatron_builds_them(void)
{
    const char *types[] = {"qwen2", "qwen3", "llama"};
    const char *want[] = {"  --disable-bias-linear\n  --add-qkv-bias\n",
                          "  --qk-layernorm\n", NULL};
    for (int i = 0; i < 3; i++) {
        ap_graph *g = tiny_hf(types[i], i == 2 ? ", \"attention_bias\": true" : "");
        ap_plan_desc d;
        char err[AP_ERR_LEN], *text = NULL;
        if (!g || ap_test_megatron_desc(g, 2, "tp=2,pp=1,sp=1,mbs=1,gbs=8", &d, NULL)) {
            CHECK(0);
            ap_graph_free(g);
            continue;
        }
        int rc = ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err);
        if (want[i]) {
            CHECK(rc == AP_OK);
            CHECK_STR_HAS(text ? text : "", want[i]);
        } else {
            CHECK(rc == AP_EINPUT);
            CHECK_STR_HAS(err, "the model has biases on some others, which no Megatron-LM "
                               "flag states");
        }
        free(text);
        ap_plan_desc_free(&d);
        ap_graph_free(g);
    }
}

/* Whole-head rotary, as Llama's, is Megatron-LM's default: no flag. */
static void whole_head_rotary_needs_no_rotary_percent(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=8,pp=1,sp=1,mbs=1,gbs=64", &d, NULL), "see above");
    CHECK_NEAR(d.shape.rotary_percent, 1, 0);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK(text && !strstr(text, "--rotary-percent"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* GPT-NeoX's parallel residual (attention and MLP both on the layer's
 * input) has no Megatron-LM flag: exporting it would train another model.
 * DeepSpeed runs the user's own model code, so its config is written. */
static void parallel_residual_is_refused_by_megatron_only(void)
{
    ap_graph *g = neox(", \"rotary_pct\": 0.25");
    REQUIRE_OK(g ? 0 : 1, "neox.json did not load");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=64,zero=0,overlap_grad=0", &d, NULL),
               "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK(text == NULL);
    CHECK_STR_HAS(err, "plan.json: Megatron-LM's transformer layer runs attention and then "
                       "the MLP; the model runs them side by side");
    CHECK_STR_HAS(err, "parallel residual");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err), err);
    free(text);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "# Its layers must run attention and the MLP side by side");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Granite scales its embeddings (embedding_multiplier) and its logits
 * (logits_scaling) in passes of their own; Megatron-LM's GPT model does
 * neither and no flag asks for it, so its export would train another
 * model: refused. torchtitan runs the user's model code, told to keep
 * both. Llama has neither. */
static void scaled_embeddings_and_logits_are_refused_by_megatron_only(void)
{
    ap_graph *g = load("examples/hf/granite-3.3-8b-instruct.json");
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.scaled_embedding && s.scaled_logits);
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=1,sp=1,mbs=1,gbs=64", &d, NULL),
               "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK(text == NULL);
    CHECK_STR_HAS(err, "Megatron-LM's GPT model feeds the embeddings to the first layer "
                       "as they are; the model scales them first");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "# Its embeddings must be scaled before the first layer");
    CHECK_STR_HAS(text, "# Its logits must be scaled or capped before the loss");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
    g = load("examples/hf/llama-3-8b.json");
    ap_model_shape_of(g, &s);
    CHECK(!s.scaled_embedding && !s.scaled_logits);
    ap_graph_free(g);
}

/* gpt-tiny with each occurrence of `from` in its file replaced by to[i]
 * in turn (i counting occurrences, modulo nto), loaded as `name`. */
static ap_graph *tiny_replaced(const char *from, const char *const *to, int nto,
                               const char *name)
{
    char path[512], err[AP_ERR_LEN];
    snprintf(path, sizeof path, "%s/examples/gpt-tiny.json", ap_test_src());
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[1 << 16], out[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f), o = 0;
    fclose(f);
    buf[n] = 0;
    const char *p = buf;
    int i = 0;
    for (const char *q; (q = strstr(p, from)); p = q + strlen(from))
        o += (size_t)snprintf(out + o, sizeof out - o, "%.*s%s", (int)(q - p), p,
                              to[i++ % nto]);
    snprintf(out + o, sizeof out - o, "%s", p);
    ap_graph *g = NULL;
    if (ap_graph_parse_json(out, strlen(out), name, &g, err) != AP_OK)
        fprintf(stderr, "%s\n", err);
    return g;
}

/* gpt-tiny with its MLP's gelu replaced by another unary activation. */
static ap_graph *tiny_with_activation(const char *kind)
{
    char to[64];
    const char *list[1] = {to};
    snprintf(to, sizeof to, "\"kind\": \"%s\"", kind);
    return tiny_replaced("\"kind\": \"gelu\"", list, 1, "relu.json");
}

/* Megatron-LM's MLP is gelu unless a flag says --swiglu, --squared-relu or
 * --quick-geglu: a plain ReLU MLP (OPT's) would be exported as gelu, another
 * model. torchtitan runs the user's own model code, so it is written; the
 * plan names the activation. */
static void relu_mlp_is_refused_by_megatron_only(void)
{
    ap_graph *g = tiny_with_activation("relu");
    REQUIRE_OK(g ? 0 : 1, "the relu model did not load");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=64", &d, NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK(text == NULL);
    CHECK_STR_HAS(err, "Megatron-LM's MLP activations are gelu, --swiglu, --squared-relu "
                       "and --quick-geglu; the model's MLP is a plain ReLU");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    free(text);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.relu && !s.gated && !s.swiglu && !s.squared_relu);
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    g = tiny_with_activation("relu2");
    REQUIRE_OK(g ? 0 : 1, "the relu2 model did not load");
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=64", &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--squared-relu\n");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* A four-layer Qwen2 at 128 tokens whose layers from the second on have a
 * sliding window of 64 keys (max_window_layers 1). */
static ap_graph *qwen_windowed(void)
{
    return ap_test_hf_text(
        "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 4, \"hidden_size\": 256,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
        " \"intermediate_size\": 1024, \"vocab_size\": 1024,"
        " \"max_position_embeddings\": 128, \"use_sliding_window\": true,"
        " \"sliding_window\": 64, \"max_window_layers\": 1}", "qwen.json");
}

/* Megatron-LM states the window as Transformer Engine's (L, 0), L = 63 for
 * 64 keys, and the windowed layers with --window-attn-skip-freq (the first
 * layer full: no integer says it, a list does), and the flags price as the
 * plan. torchtitan and DeepSpeed run the user's own model code: torchtitan's
 * export says the window the plan was priced with, as it says a MoE
 * flavour. */
static void sliding_windows_are_stated_as_megatron_builds_them(void)
{
    ap_graph *g = qwen_windowed();
    REQUIRE_OK(g ? 0 : 1, "qwen.json did not load");
    ap_plan_desc d;
    double step = 0;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=2,pp=1,sp=1,mbs=1,gbs=64", &d, &step),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --window-size 63,0\n  --window-attn-skip-freq [0]+[1]*3\n");
    ap_plan p;
    REQUIRE_OK(price_exported(g, text, 8, &p, err), err);
    CHECK_NEAR(p.step_time, step, 1e-12);
    ap_plan_free(&p);
    free(text);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "64 keys per query, on the layers --window-attn-skip-freq "
                        "\"[0]+[1]*3\" marks");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* gpt-tiny with windows of w0 and w1 keys on its two layers' attention. */
static ap_graph *tiny_with_windows(int w0, int w1)
{
    char a[64], b[64];
    const char *list[2] = {a, b};
    snprintf(a, sizeof a, "\"causal\": true, \"window\": %d,", w0);
    snprintf(b, sizeof b, "\"causal\": true, \"window\": %d,", w1);
    return tiny_replaced("\"causal\": true,", list, 2, "windows.json");
}

/* One --window-size cannot state windows of two lengths: Megatron-LM's
 * export refuses them, and so does a command line against that model. */
static void windows_of_two_lengths_are_refused_by_megatron(void)
{
    ap_graph *g = tiny_with_windows(64, 32);
    REQUIRE_OK(g ? 0 : 1, "the windowed model did not load");
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.window == -1);
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1,gbs=64,zero=0,overlap_grad=0", &d,
                                     NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "Megatron-LM states one sliding window (--window-size); the model's "
                       "layers have windows of different lengths");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err), err);
    free(text);
    ap_plan_desc_free(&d);
    ap_plan p;
    CHECK(ap_test_megatron_plan(g, 8, "--window-size 63,0", NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "windows.json has sliding windows of different lengths on its layers");
    ap_graph_free(g);
    g = tiny_with_windows(64, 64);
    REQUIRE_OK(g ? 0 : 1, "the windowed model did not load");
    ap_model_shape_of(g, &s);
    CHECK(s.window == 64 && !strcmp(s.window_freq, ""));
    ap_graph_free(g);
}

/* A model with neither a position table nor rotary ops (gpt-tiny without
 * its position add) is stated as Megatron-LM's "none", not as RoPE. */
static void model_without_positions_is_stated_as_none(void)
{
    char path[512], err[AP_ERR_LEN], *text = NULL;
    snprintf(path, sizeof path, "%s/examples/gpt-tiny.json", ap_test_src());
    FILE *f = fopen(path, "rb");
    REQUIRE_OK(f ? 0 : 1, path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *m = cJSON_Parse(buf);
    REQUIRE_OK(m ? 0 : 1, "gpt-tiny.json does not parse");
    cJSON *ops = cJSON_GetObjectItem(m, "ops"), *tensors = cJSON_GetObjectItem(m, "tensors");
    for (int i = cJSON_GetArraySize(ops) - 1; i >= 0; i--) {
        cJSON *op = cJSON_GetArrayItem(ops, i);
        const char *name = cJSON_GetObjectItem(op, "name")->valuestring;
        if (!strcmp(name, "pos"))
            cJSON_DeleteItemFromArray(ops, i);
        else if (!strcmp(name, "embed"))
            cJSON_ReplaceItemInArray(cJSON_GetObjectItem(op, "outputs"), 0,
                                     cJSON_CreateString("x0"));
    }
    for (int i = cJSON_GetArraySize(tensors) - 1; i >= 0; i--) {
        const char *name = cJSON_GetObjectItem(cJSON_GetArrayItem(tensors, i), "name")->valuestring;
        if (!strcmp(name, "wpe") || !strcmp(name, "tok"))
            cJSON_DeleteItemFromArray(tensors, i);
    }
    char *json = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    ap_graph *g = NULL;
    int rc = ap_graph_parse_json(json, strlen(json), "nopos.json", &g, err);
    free(json);
    REQUIRE_OK(rc, err);
    ap_plan_desc d;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,mbs=1", &d, NULL), "see above");
    CHECK_NEAR(d.shape.rotary_percent, 0, 0);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--position-embedding-type none\n");
    CHECK(text && !strstr(text, "--rotary-percent"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

static void op_outside_the_pattern_is_refused_naming_stage_and_op(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    ap_degrees k;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=2,sp=1,mbs=1,gbs=64", &d, NULL), "see above");
    /* Shard stage 1's first op on the hidden dimension instead. */
    ap_plan_desc_op *op = &d.stages[1].ops[0];
    char name[AP_NAME_LEN + 8];
    snprintf(name, sizeof name, "op \"%s\"", op->op);
    op->s.axis[1] = 'h';
    op->s.rs[1] = 0;
    CHECK(ap_plan_classify(g, &d, AP_LAUNCHER_MEGATRON, &k, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stage 1, ");
    CHECK_STR_HAS(err, name);
    CHECK_STR_HAS(err, "outside Megatron-LM's tensor-parallel pattern");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

static void stages_with_different_meshes_or_recompute_are_refused(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    ap_degrees k;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=2,sp=1,mbs=1,gbs=64", &d, NULL), "see above");
    d.stages[1].mesh[0] = 2;
    d.stages[1].mesh[1] = 4;
    CHECK(ap_plan_classify(g, &d, AP_LAUNCHER_TORCHTITAN, &k, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "stage 1 has mesh [2, 4] on 8 GPUs but stage 0 has [4, 2]");
    d.stages[1].mesh[0] = 4;
    d.stages[1].mesh[1] = 2;
    d.stages[1].recompute = AP_RECOMPUTE_FULL;
    CHECK(ap_plan_classify(g, &d, AP_LAUNCHER_MEGATRON, &k, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "stage 1 recomputes full but stage 0 none");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

static void uneven_stages_need_a_layout_flag(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=2,sp=1,mbs=1,gbs=64", &d, NULL), "see above");
    d.stages[0].nlayers = 10; /* 10 + 14 of the 24 layers */
    d.stages[1].first_layer = 10;
    d.stages[1].nlayers = 14;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--decoder-first-pipeline-num-layers 10\n"
                        "  --decoder-last-pipeline-num-layers 14\n");
    CHECK(text && !strstr(text, "--pipeline-model-parallel-layout"));
    free(text);
    /* torchtitan's pipeline_llm states it as 14 layers a stage, the first
     * stage 4 fewer: (24 + 4 + 0) / 14 = 2 stages. */
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "--parallelism.pipeline_parallel_layers_per_stage 14\n"
                        "  --parallelism.pipeline_parallel_first_stage_less_layers 4\n"
                        "  --parallelism.pipeline_parallel_last_stage_less_layers 0\n");
    free(text);
    ap_plan_desc_free(&d);
    /* Middle stages that differ are a split those flags cannot state. */
    REQUIRE_OK(ap_test_megatron_desc(g, 32, "tp=2,pp=4,sp=1,mbs=1,gbs=64", &d, NULL),
               "see above");
    int counts[4] = {6, 5, 7, 6};
    for (int i = 0, first = 0; i < 4; first += counts[i++]) {
        d.stages[i].first_layer = first;
        d.stages[i].nlayers = counts[i];
    }
    text = NULL;
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT && !text);
    CHECK_STR_HAS(err, "uneven in the middle");
    ap_plan_desc_free(&d);
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=1,pp=2,mbs=1,gbs=64", &d, NULL), "see above");
    d.stages[0].nlayers = 10;
    d.stages[1].first_layer = 10;
    d.stages[1].nlayers = 14;
    CHECK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "uneven");
    ap_plan_desc_free(&d);
    /* Middle stages that differ from each other need the layout string:
     * 5 + 6 + 7 + 6 of the 24 layers. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=4,sp=1,mbs=1,gbs=64", &d, NULL), "see above");
    d.stages[0].nlayers = 5;
    d.stages[1].first_layer = 5;
    d.stages[2].first_layer = 11;
    d.stages[2].nlayers = 7;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    /* Bare: inside MEGATRON_ARGS's double quotes, quotes of its own would
     * end the string at the layout and run "t*6" after a pipe. */
    CHECK_STR_HAS(text, "--pipeline-model-parallel-layout Et*5|t*6|t*7|t*6L\n");
    CHECK(text && !strstr(text, "--decoder-first-pipeline-num-layers"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

static void deepspeed_config_states_batch_and_zero(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    /* dp = 16 / 2 = 8; 64 = 2 per GPU x 4 accumulation steps x 8 replicas. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=1,pp=2,mbs=2,gbs=64,overlap_grad=0", &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err), err);
    CHECK_STR_HAS(text, "\"train_batch_size\":\t64,");
    CHECK_STR_HAS(text, "\"train_micro_batch_size_per_gpu\":\t2,");
    CHECK_STR_HAS(text, "\"gradient_accumulation_steps\":\t4,");
    CHECK_STR_HAS(text, "\"stage\":\t1");
    CHECK_STR_HAS(text, "\"bf16\":\t{\n\t\t\"enabled\":\ttrue");
    CHECK_STR_HAS(text, "\"stages\":\t2,");
    free(text);
    ap_plan_desc_free(&d);
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=2,mbs=1,gbs=64", &d, NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "DeepSpeed has no tensor parallelism");
    ap_plan_desc_free(&d);
    /* Priced with the gradient reduction hidden behind the backward, which
     * DeepSpeed's ZeRO-1 does not do: the export would promise too much. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=1,pp=2,mbs=2,gbs=64", &d, NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "only under ZeRO-2 and 3; the plan uses ZeRO-1");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

static void torchtitan_batch_flags_follow_the_pipeline(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    /* pp=2, dp=4: a step is 64 / 4 = 16 local sequences in micro-batches of 1. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=2,sp=1,mbs=1,gbs=64,zero=1", &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "--parallelism.data_parallel_replicate_degree 1\n");
    CHECK_STR_HAS(text, "--parallelism.data_parallel_shard_degree 4\n");
    CHECK_STR_HAS(text, "--training.local_batch_size 16\n");
    CHECK_STR_HAS(text, "--parallelism.pipeline_parallel_microbatch_size 1\n");
    CHECK_STR_HAS(text, "--parallelism.pipeline_parallel_layers_per_stage 12\n");
    free(text);
    ap_plan_desc_free(&d);
    /* No pipeline: local batches of mbs, accumulated up to the global batch. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=1,sp=1,mbs=2,gbs=64", &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "--parallelism.data_parallel_shard_degree 8\n");
    CHECK_STR_HAS(text, "--training.local_batch_size 2\n");
    CHECK_STR_HAS(text, "--training.global_batch_size 64\n");
    free(text);
    ap_plan_desc_free(&d);
    /* torchtitan's tensor parallelism always shards the norms on the sequence. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=1,mbs=2,gbs=64", &d, NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "sequence parallelism");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* torchtitan's DDP runs on a mesh of data-parallel ranks alone (its
 * parallelize functions raise "DDP has not supported > 1D parallelism"),
 * and its FSDP shards over every context-parallel rank (dp_shard_cp) at
 * any shard degree: ZeRO-0 exports only as pure data parallelism, and
 * context-parallel ranks alone count as FSDP's for the ZeRO stages. */
static void torchtitan_replicates_only_pure_data_parallelism(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=1,pp=1,mbs=1,gbs=64,zero=0", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "--parallelism.data_parallel_replicate_degree 16\n");
    CHECK_STR_HAS(text, "--parallelism.data_parallel_shard_degree 1\n");
    free(text);
    ap_plan_desc_free(&d);
    const char *ddp[] = {"tp=2,pp=1,sp=1,mbs=1,gbs=64,zero=0", "tp=1,pp=2,mbs=1,gbs=64,zero=0",
                         "tp=1,pp=1,cp=2,mbs=1,gbs=64,zero=0",
                         "tp=8,pp=1,cp=2,sp=1,mbs=1,gbs=64,zero=0"};
    const char *beside[] = {"beside tensor parallelism", "beside pipeline parallelism",
                            "beside context parallelism", "beside context parallelism"};
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK(ap_test_megatron_desc(g, 16, ddp[i], &d, NULL), "see above");
        CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "torchtitan replicates with DDP only where data parallelism is all");
        CHECK_STR_HAS(err, beside[i]);
        ap_plan_desc_free(&d);
    }
    /* One data-parallel replica of a (cp 2, tp 8) mesh: FSDP over the two
     * context-parallel ranks, kept gathered as ZeRO-1 is. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=8,pp=1,cp=2,sp=1,mbs=1,gbs=64,zero=1", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "--parallelism.data_parallel_shard_degree 1\n"
                        "  --parallelism.fsdp_reshard_after_forward never\n");
    CHECK_STR_HAS(text, "# ZeRO-1 has no torchtitan equivalent");
    free(text);
    ap_plan_desc_free(&d);
    /* Under a pipeline that FSDP keeps the stage gathered: ZeRO-3 is refused. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=4,pp=2,cp=2,sp=1,mbs=1,gbs=64,zero=3", &d, NULL),
               "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "the plan uses ZeRO-3, sharded every micro-batch");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* The float8 and compile flags as torchtitan v0.2.2 names them, the last
 * release that reads a .toml: v0.1's --model.converters float8, [float8]
 * and --training.compile are not there. */
static void torchtitan_flags_are_those_of_v0_2_2(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=1,sp=1,mbs=1,gbs=64,zero=1,fp8=1,"
                                            "fp8_recipe=tensorwise,fp8_param_gather=1,"
                                            "tp_overlap=1", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "# For torchtitan v0.2.2, the last release that takes a .toml");
    CHECK_STR_HAS(text, "\n  --model.converters quantize.linear.float8\n"
                        "  --quantize.linear.float8.filter_fqns output\n");
    CHECK_STR_HAS(text, "\n  --quantize.linear.float8.enable_fsdp_float8_all_gather\n"
                        "  --quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp\n");
    CHECK_STR_HAS(text, "\n  --parallelism.enable_async_tensor_parallel\n  --compile.enable\n");
    CHECK(text && !strstr(text, "--float8.") && !strstr(text, "--training.compile") &&
          !strstr(text, "converters float8"));
    free(text);
    ap_plan_desc_free(&d);

    /* torchao's float8 training scales dynamically, per tensor or per row:
     * Transformer Engine's delayed scaling, --fp8's default, is refused. */
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=1,sp=1,mbs=1,gbs=64,zero=1,fp8=1", &d,
                                     NULL), "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "torchtitan's float8 converter scales dynamically, per tensor or per "
                       "row (torchao), with no delayed scaling; the plan was priced with "
                       "Transformer Engine's delayed scaling (fp8_recipe delayed): plan "
                       "with --fp8-recipe tensorwise");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    /* Its float8 converter swaps nn.Linear, which the MoE experts are not. */
    g = load("examples/hf/mixtral-8x7b.json");
    REQUIRE_OK(ap_test_megatron_desc(g, 64, "tp=2,pp=4,ep=8,sp=1,mbs=1,gbs=256,fp8=1", &d, NULL),
               "see above");
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "torchtitan's float8 converter swaps nn.Linear only, leaving the "
                       "experts' grouped GEMMs in bf16");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

static void reader_names_the_field_at_fault(void)
{
    ap_plan_desc d;
    char err[AP_ERR_LEN];
    const char *bad = "{\"format\": \"autopar-plan/2\"}";
    CHECK(ap_plan_desc_parse(bad, strlen(bad), "p.json", &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "p.json: format: ");
    const char *trunc = "{\"format\": ";
    CHECK(ap_plan_desc_parse(trunc, strlen(trunc), "p.json", &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "p.json: not valid JSON");
    CHECK(ap_plan_read("/nonexistent/plan.json", &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "/nonexistent/plan.json");
}

/* Sets d's model chunks to `layers` (pp * vpp of them, chunk c of stage s
 * at c * pp + s) and each stage's layers to its chunks', first_layer its
 * first chunk's first layer, as plan.json states them. */
static void set_chunks(ap_plan_desc *d, const int *layers)
{
    int n = d->nstages * d->vchunks;
    free(d->chunk_layers);
    d->chunk_layers = malloc(sizeof *layers * (size_t)n);
    memcpy(d->chunk_layers, layers, sizeof *layers * (size_t)n);
    for (int s = 0; s < d->nstages; s++) {
        d->stages[s].first_layer = d->stages[s].nlayers = 0;
        for (int i = 0; i < s; i++)
            d->stages[s].first_layer += layers[i];
        for (int c = 0; c < d->vchunks; c++)
            d->stages[s].nlayers += layers[c * d->nstages + s];
    }
}

static const char *const vpp_flags[] = {
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"};

static void check_no_vpp_flags(const char *text)
{
    for (int i = 0; i < 6; i++)
        if (text && strstr(text, vpp_flags[i])) {
            CHECK(!"a chunked plan's export states vpp beside its layout");
            fprintf(stderr, "  it has %s\n", vpp_flags[i]);
        }
}

/* Model chunks of their own (chunk_layers) export as Megatron-LM's layout
 * string of the virtual stages in Megatron's order, and nothing else about
 * the split: Megatron-LM takes at most one of the layout and the vpp
 * flags. pp 4, vpp 2: rank 0 holds virtual stages 0 and 4 (2 + 3 layers),
 * rank 3 stages 3 and 7 (1 + 3), a 1-layer chunk written "t". */
static void chunked_plan_exports_its_layout_alone(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    ap_degrees k;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=4,sp=1,vpp=2,mbs=1,gbs=64", &d, NULL),
               "see above");
    const int layers[] = {2, 4, 5, 1, 3, 4, 2, 3};
    set_chunks(&d, layers);
    CHECK(d.stages[1].first_layer == 2 && d.stages[1].nlayers == 8);
    CHECK(d.stages[3].first_layer == 11 && d.stages[3].nlayers == 4);
    REQUIRE_OK(ap_plan_classify(g, &d, AP_LAUNCHER_MEGATRON, &k, err), err);
    CHECK(k.pp == 4 && k.vpp == 2 && !k.even && !k.first && !k.last);
    CHECK(!k.account_embedding && !k.account_loss);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --pipeline-model-parallel-size 4\n");
    CHECK_STR_HAS(text, "\n  --pipeline-model-parallel-layout Et*2|t*4|t*5|t|t*3|t*4|t*2|t*3L\n");
    check_no_vpp_flags(text);
    free(text);
    /* The launchers that cut the layers into stages in order cannot. */
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: torchtitan cuts the layers into pipeline stages in order");
    CHECK_STR_HAS(err, "uneven layer counts (chunk_layers");
    /* A chunk split that no even vpp, first/last or counted split states,
     * which the unchunked check refuses, passes under chunk_layers. */
    const int lopsided[] = {1, 1, 1, 1, 5, 5, 5, 5};
    set_chunks(&d, lopsided);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--pipeline-model-parallel-layout Et|t|t|t|(t*5|)*3t*5L\n");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* A layout priced by estimate (layout=) is written with its chunks, read
 * back, exported as the same layout, and the exported flags price to the
 * same step. */
static void estimated_layout_round_trips_through_the_export(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    double step = 0;
    char err[AP_ERR_LEN], *text = NULL;
    const char *spec = "tp=1,pp=2,mbs=1,gbs=64,layout=Et*5|t*7|t*7|t*5L";
    REQUIRE_OK(ap_test_megatron_desc(g, 16, spec, &d, &step), "see above");
    CHECK(d.vchunks == 2 && d.chunk_layers);
    if (!d.chunk_layers) {
        ap_plan_desc_free(&d);
        ap_graph_free(g);
        return;
    }
    CHECK(d.chunk_layers[0] == 5 && d.chunk_layers[1] == 7 && d.chunk_layers[2] == 7 &&
          d.chunk_layers[3] == 5);
    /* Stage 1 holds layers 5-11 and 19-23: its first chunk's first layer
     * and its 12 layers, though stage 0 ends at 12. */
    CHECK(d.stages[0].first_layer == 0 && d.stages[0].nlayers == 12);
    CHECK(d.stages[1].first_layer == 5 && d.stages[1].nlayers == 12);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--pipeline-model-parallel-layout Et*5|t*7|t*7|t*5L\n");
    check_no_vpp_flags(text);
    ap_plan p;
    REQUIRE_OK(price_exported(g, text, 16, &p, err), err);
    CHECK(p.vchunks == 2);
    CHECK_NEAR(p.step_time, step, 1e-12);
    ap_plan_free(&p);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Chunks where the split flags put them are stated with those flags, as
 * for a plan without chunk_layers: even chunks as layers per virtual stage
 * (to torchtitan too), each stage's layers cut evenly under the decoder
 * first/last flags. */
static void chunks_the_flags_place_export_as_before(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=4,sp=1,vpp=2,mbs=1,gbs=64", &d, NULL),
               "see above");
    const int even[] = {3, 3, 3, 3, 3, 3, 3, 3};
    set_chunks(&d, even);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "--parallelism.pipeline_parallel_layers_per_stage 3\n");
    free(text);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--num-layers-per-virtual-pipeline-stage 3\n");
    CHECK(text && !strstr(text, "--pipeline-model-parallel-layout"));
    free(text);
    /* 4 + 8 + 8 + 4 layers, each stage's cut in two. */
    const int first_last[] = {2, 4, 4, 2, 2, 4, 4, 2};
    set_chunks(&d, first_last);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--num-virtual-stages-per-pipeline-rank 2\n"
                        "  --decoder-first-pipeline-num-layers 4\n"
                        "  --decoder-last-pipeline-num-layers 4\n");
    CHECK(text && !strstr(text, "--pipeline-model-parallel-layout"));
    free(text);
    /* The same stages with stage 0's chunks 1 + 3: only the layout. */
    const int skewed[] = {1, 4, 4, 2, 3, 4, 4, 2};
    set_chunks(&d, skewed);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--pipeline-model-parallel-layout Et|t*4|t*4|t*2|t*3|t*4|t*4|t*2L\n");
    check_no_vpp_flags(text);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Megatron-LM's uniform recomputation groups must divide each chunk. */
static void uniform_groups_must_divide_each_chunk(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,pp=2,sp=1,vpp=2,mbs=1,gbs=64,"
                                     "recompute=full", &d, NULL), "see above");
    const int layers[] = {4, 8, 6, 6};
    set_chunks(&d, layers);
    d.recompute_layers = 2;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    free(text);
    d.recompute_layers = 4;
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stage 0's model chunk 1 holds 6 layers, which "
                       "Megatron-LM's uniform groups of 4 do not divide");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* plan.json of the estimate above, its "chunk_layers" and stages[s].layers
 * replaced, read back; returns the reader's status, its message in err. */
static int read_with_chunks(const ap_graph *g, const char *spec, const char *chunks,
                            const int *layers1, char *err)
{
    ap_plan p;
    if (ap_test_megatron_plan_ok(g, 16, spec, NULL, &p))
        return -1;
    char *json = ap_plan_to_json(g, &p);
    ap_plan_free(&p);
    cJSON *o = cJSON_Parse(json);
    free(json);
    if (chunks && cJSON_GetObjectItem(o, "chunk_layers"))
        cJSON_ReplaceItemInObject(o, "chunk_layers", cJSON_Parse(chunks));
    else if (chunks)
        cJSON_AddItemToObject(o, "chunk_layers", cJSON_Parse(chunks));
    cJSON *st1 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "stages"), 1);
    if (layers1)
        cJSON_ReplaceItemInObject(st1, "layers", cJSON_CreateIntArray(layers1, 2));
    json = cJSON_Print(o);
    cJSON_Delete(o);
    ap_plan_desc d;
    int rc = ap_plan_desc_parse(json, strlen(json), "plan.json", &d, err);
    free(json);
    if (!rc)
        ap_plan_desc_free(&d);
    return rc;
}

/* The reader takes chunk_layers only as nstages * virtual_stages counts
 * that hold each stage's layers and start each stage at its first layer,
 * and says which field is wrong. */
static void reader_checks_chunk_layers(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    char err[AP_ERR_LEN];
    const char *spec = "tp=1,pp=2,mbs=1,gbs=64,layout=Et*5|t*7|t*7|t*5L";
    /* As written: stage 1 starts at 5, inside stage 0's [0, 12). */
    CHECK(read_with_chunks(g, spec, NULL, NULL, err) == AP_OK);
    CHECK(read_with_chunks(g, spec, "[5, 7, 7]", NULL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: chunk_layers: expected an array of 4 layer counts "
                       "(2 stages x 2 virtual_stages)");
    CHECK(read_with_chunks(g, spec, "[5, 7, 7, 6]", NULL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stages[1].layers: holds 12 layers, but its chunks in "
                       "chunk_layers hold 13");
    const int wide[2] = {5, 18};
    CHECK(read_with_chunks(g, spec, "[5, 7, 7, 6]", wide, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: chunk_layers: holds 25 layers, but model_shape.layers "
                       "is 24");
    CHECK(read_with_chunks(g, spec, "[6, 6, 6, 6]", NULL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stages[1].layers: starts at layer 5, but its first "
                       "model chunk (chunk_layers[1]) starts at layer 6");
    CHECK(read_with_chunks(g, spec, "[5, 7, -7, 5]", NULL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: chunk_layers[2]: expected an integer from 0 to");
    CHECK(read_with_chunks(g, spec, "{\"a\": 1}", NULL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: chunk_layers: expected an array of 4");
    /* Without interleaving there are no chunks to give layers to. */
    CHECK(read_with_chunks(g, "tp=1,pp=2,mbs=1,gbs=64", "[12, 12]", NULL, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: chunk_layers: given with virtual_stages 1");
    /* Without chunk_layers the stages must still follow each other. */
    const int overlap[2] = {11, 23};
    CHECK(read_with_chunks(g, "tp=1,pp=2,mbs=1,gbs=64", NULL, overlap, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stages[1].layers: starts at layer 11, expected 12");
    ap_graph_free(g);
}

/* What changes no cost but makes the model the config's: Llama 3.1 405B's
 * rope_theta 500,000, its llama3 rope scaling by 8 and its RMSNorm epsilon
 * 1e-5 reach Megatron-LM's flags (whose defaults are 10,000, none and
 * 1e-5); DeepSeek-V3's YaRN, which no flag here states, is named in a
 * comment instead. */
static void the_export_states_the_rotary_base_scaling_and_norm_epsilon(void)
{
    ap_graph *g = load("examples/hf/llama-3.1-405b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 72, "tp=8,pp=9,sp=1,mbs=1,gbs=63", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --rotary-base 500000\n  --use-rope-scaling\n"
                        "  --rope-scaling-factor 8\n");
    CHECK_STR_HAS(text, "  --normalization RMSNorm\n  --norm-epsilon 1e-05\n");
    CHECK(text && !strstr(text, "# Not stated"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
    g = load("examples/hf/deepseek-v3.json");
    REQUIRE_OK(ap_test_megatron_desc(g, 256, "tp=2,pp=8,ep=32,etp=1,sp=1,mbs=1,gbs=512,"
                                     "first=7,last=6", &d, NULL), "see above");
    text = NULL;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --rotary-base 10000\n");
    CHECK_STR_HAS(text, "  --norm-epsilon 1e-06\n");
    CHECK_STR_HAS(text, "its rope scaling (YaRN");
    CHECK(text && !strstr(text, "--use-rope-scaling"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* plan.json of the estimate of `spec` on `gpus` H100s as a cJSON object,
 * for a test to edit; NULL, with the reason on stderr, when it does not
 * price. The caller deletes it. */
static cJSON *plan_object(const ap_graph *g, int gpus, const char *spec)
{
    ap_plan p;
    if (ap_test_megatron_plan_ok(g, gpus, spec, NULL, &p))
        return NULL;
    char *json = ap_plan_to_json(g, &p);
    ap_plan_free(&p);
    cJSON *o = cJSON_Parse(json);
    free(json);
    return o;
}

/* Reads plan object o back as "plan.json" into d, deleting o; the
 * reader's status, its message in err. */
static int read_object(cJSON *o, ap_plan_desc *d, char *err)
{
    char *json = cJSON_Print(o);
    cJSON_Delete(o);
    int rc = ap_plan_desc_parse(json, strlen(json), "plan.json", d, err);
    free(json);
    return rc;
}

/* o's field `key` (in model_shape where shape is set) replaced by the JSON
 * `value`, or removed where value is NULL. */
static void set_field(cJSON *o, int shape, const char *key, const char *value)
{
    cJSON *at = shape ? cJSON_GetObjectItem(o, "model_shape") : o;
    cJSON_DeleteItemFromObject(at, key);
    if (value)
        cJSON_AddItemToObject(at, key, cJSON_Parse(value));
}

/* The launchers start gpus / gpus_per_node nodes of gpus_per_node
 * processes, so a plan's GPUs fill whole nodes, or are one node's, as the
 * planner's own clusters are: 16 GPUs on nodes of 5 would start 15. The
 * reader refuses any other shape, naming gpus_per_node; 16 on nodes of 4
 * export as 4 nodes, and a node larger than the plan as one node of 16. */
static void reader_refuses_gpus_that_do_not_fill_whole_nodes(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    const char *spec = "tp=2,pp=2,sp=1,mbs=1,gbs=64";
    const struct {
        const char *gpn, *expect;
    } cases[] = {
        {"5", "plan.json: gpus_per_node: 5 does not divide the plan's 16 GPUs into whole "
              "nodes"},
        {"3", "plan.json: gpus_per_node: 3 does not divide the plan's 16 GPUs"},
        {"4", "torchrun --nnodes 4 --nproc-per-node 4 "},
        {"32", "torchrun --nnodes 1 --nproc-per-node 16 "},
    };
    for (int i = 0; i < 4; i++) {
        ap_plan_desc d;
        char err[AP_ERR_LEN], *text = NULL;
        cJSON *o = plan_object(g, 16, spec);
        set_field(o, 0, "gpus_per_node", cases[i].gpn);
        int rc = read_object(o, &d, err);
        if (i < 2) {
            CHECK(rc == AP_EINPUT);
            CHECK_STR_HAS(err, cases[i].expect);
            continue;
        }
        REQUIRE_OK(rc, err);
        REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
        CHECK_STR_HAS(text, cases[i].expect);
        free(text);
        ap_plan_desc_free(&d);
    }
    /* The shape's flags state the plan's sequence length. */
    ap_plan_desc d;
    char err[AP_ERR_LEN];
    cJSON *o = plan_object(g, 16, spec);
    set_field(o, 1, "seq", "4096");
    CHECK(read_object(o, &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: model_shape.seq: is 4096, but seq_length is 2048");
    ap_graph_free(g);
}

/* The config `rel` with `from` replaced by `to`, built at `seq` tokens;
 * NULL, with the reason on stderr, when it does not build. */
static ap_graph *model_variant(const char *rel, const char *from, const char *to,
                               int64_t seq)
{
    char path[512], err[AP_ERR_LEN], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", ap_test_src(), rel);
    if (ap_read_file(path, &text, &len, err)) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    char *at = strstr(text, from), cfg[8192];
    snprintf(cfg, sizeof cfg, "%.*s%s%s", at ? (int)(at - text) : (int)len, text, to,
             at ? at + strlen(from) : "");
    free(text);
    return ap_test_hf_seq(cfg, seq, err);
}

static ap_graph *llama_variant(const char *from, const char *to, int64_t seq)
{
    return model_variant("examples/hf/llama-3-8b.json", from, to, seq);
}

/* An export states the structure of the model it reloads, and --model
 * names any: that model must be the one the plan priced, or the launcher
 * would train another under the plan's layout. Llama 3 8B with tied
 * embeddings, as Qwen3 (a norm on q and k) or with biases has every width
 * of the plan, and each is refused naming the field that differs, by every
 * launcher. */
static void export_refuses_a_model_of_another_structure(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=4,pp=2,sp=1,mbs=1,gbs=64", &d, NULL),
               "see above");
    const struct {
        const char *from, *to, *expect;
    } cases[] = {
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true",
         "model_shape.tied_embeddings is false but the model config.json has true"},
        {"\"model_type\": \"llama\"", "\"head_dim\": 128, \"model_type\": \"qwen3\"",
         "model_shape.qk_layernorm is false but the model config.json has true"},
        {"\"attention_bias\": false", "\"attention_bias\": true",
         "model_shape.linear_bias is false but the model config.json has true"},
    };
    for (int i = 0; i < 3; i++) {
        ap_graph *other = llama_variant(cases[i].from, cases[i].to, d.seq);
        CHECK(other != NULL);
        if (!other)
            continue;
        for (int to = 0; to < 3; to++) {
            CHECK(ap_export(other, &d, (ap_launcher)to, &text, err) == AP_EINPUT);
            CHECK_STR_HAS(err, "plan.json: ");
            CHECK_STR_HAS(err, cases[i].expect);
            CHECK(text == NULL);
        }
        ap_graph_free(other);
    }
    ap_plan_desc_free(&d);

    /* A plan written before qk_layernorm came does not say, and is not
     * checked for it. */
    ap_graph *qwen = llama_variant("\"model_type\": \"llama\"",
                                   "\"head_dim\": 128, \"model_type\": \"qwen3\"", d.seq);
    ap_plan_desc_free(&d);
    CHECK(qwen != NULL);
    if (!qwen) {
        ap_graph_free(g);
        return;
    }
    cJSON *o = plan_object(qwen, 16, "tp=4,pp=2,sp=1,mbs=1,gbs=64");
    set_field(o, 1, "qk_layernorm", NULL);
    REQUIRE_OK(read_object(o, &d, err), err);
    CHECK(d.shape.qk_norm == -1);
    REQUIRE_OK(ap_export(qwen, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--qk-layernorm\n");
    free(text);
    ap_graph_free(qwen);
    ap_plan_desc_free(&d);

    /* The router's fields read as the model format names them. */
    o = plan_object(g, 16, "tp=4,pp=2,sp=1,mbs=1,gbs=64");
    set_field(o, 1, "router_score", "\"tanh\"");
    CHECK(read_object(o, &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: model_shape.router_score: \"tanh\" is not sigmoid or "
                       "softmax");
    ap_graph_free(g);
}

/* A MoE plan's router is the model's: Mixtral's softmax router read back
 * from a plan that says sigmoid scores is another router. */
static void export_refuses_a_model_that_routes_otherwise(void)
{
    ap_graph *g = load("examples/hf/mixtral-8x7b.json");
    if (!g)
        return;
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    cJSON *o = plan_object(g, 16, "tp=2,pp=2,ep=4,sp=1,mbs=1,gbs=64");
    REQUIRE_OK(o ? 0 : -1, "see above");
    set_field(o, 1, "router_score", "\"sigmoid\"");
    REQUIRE_OK(read_object(o, &d, err), err);
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: model_shape.router_score is \"sigmoid\" but the model ");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* GPT-OSS's experts clamp the gate above and the up projection both ways
 * at swiglu_limit and add 1 to the up projection (GptOssExperts);
 * Megatron-Core's GLU does neither unless told (--glu-linear-offset 0.0
 * and --activation-func-clamp-value None by default), so the export states
 * both, the clamp from the config, and they price nothing. */
static void gpt_oss_experts_export_their_offset_and_clamp(void)
{
    ap_graph *g = load("examples/hf/gpt-oss-20b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=64", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --quick-geglu\n  --glu-linear-offset 1\n"
                        "  --activation-func-clamp-value 7\n");
    ap_plan p;
    REQUIRE_OK(price_exported(g, text, 8, &p, err), err);
    CHECK_NEAR(p.step_time, d.step_time, 1e-12);
    ap_plan_free(&p);
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    g = model_variant("examples/hf/gpt-oss-20b.json", "\"swiglu_limit\": 7.0",
                      "\"swiglu_limit\": 5.5", 4096);
    REQUIRE_OK(g ? 0 : -1, "see above");
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=64", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --activation-func-clamp-value 5.5\n");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    /* A gated MLP without them (Llama's SwiGLU) states neither. */
    g = load("examples/hf/llama-3-8b.json");
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=4,pp=2,sp=1,mbs=1,gbs=64", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK(text && !strstr(text, "--glu-linear-offset") &&
          !strstr(text, "--activation-func-clamp-value"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Megatron-LM's ZeRO-3 is --use-torch-fsdp2 (Megatron-Core's
 * TorchFullyShardedDataParallel), which validate_args allows without the
 * distributed optimizer and gradient accumulation fusion and asserts
 * CUDA_DEVICE_MAX_CONNECTIONS is not 1: the export states it so, and its
 * flags price the same step. */
static void zero3_exports_as_torch_fsdp2(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    const char *specs[] = {"tp=1,pp=1,mbs=1,gbs=64,zero=3,no_grad_fusion=1",
                           "tp=2,pp=1,sp=1,mbs=1,gbs=64,zero=3,no_grad_fusion=1"};
    for (int i = 0; i < 2; i++) {
        ap_plan_desc d;
        char err[AP_ERR_LEN], *text = NULL;
        REQUIRE_OK(ap_test_megatron_desc(g, 16, specs[i], &d, NULL), "see above");
        REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
        CHECK_STR_HAS(text, "\n  --use-torch-fsdp2\n");
        CHECK_STR_HAS(text, "\n  --no-gradient-accumulation-fusion\n");
        CHECK_STR_HAS(text, "\nunset CUDA_DEVICE_MAX_CONNECTIONS\nMEGATRON_ARGS=");
        CHECK(text && !strstr(text, "--use-distributed-optimizer") &&
              !strstr(text, "--overlap-grad-reduce") && !strstr(text, "--overlap-param-gather") &&
              !strstr(text, "CUDA_DEVICE_MAX_CONNECTIONS=1"));
        ap_plan p;
        REQUIRE_OK(price_exported(g, text, 16, &p, err), err);
        CHECK_NEAR(p.step_time, d.step_time, 1e-12);
        ap_plan_free(&p);
        free(text);
        ap_plan_desc_free(&d);
    }
    ap_graph_free(g);
}

/* The ZeRO plans Megatron-LM cannot run, each refused with the assert of
 * validate_args (arguments.py at 000c4ac2) that stops it, or the reason no
 * flag states it. */
static void zero_plans_megatron_cannot_run_are_refused_with_the_reason(void)
{
    const struct {
        const char *model, *spec, *expect;
        int gpus;
    } cases[] = {
        {"examples/hf/llama-3-8b.json", "tp=1,pp=1,mbs=1,gbs=64,zero=2",
         "the plan uses ZeRO-2, which only Megatron FSDP's --data-parallel-sharding-strategy "
         "optim_grads states and this export does not write", 16},
        {"examples/hf/llama-3-8b.json", "tp=1,pp=2,mbs=1,gbs=64,zero=3,no_grad_fusion=1",
         "Megatron-LM runs ZeRO-3 as PyTorch's FSDP2 (--use-torch-fsdp2), which it asserts "
         "\"is not supported with pipeline parallelism\"; the plan uses pp=2", 16},
        {"examples/hf/mixtral-8x7b.json", "tp=1,pp=1,ep=8,mbs=1,gbs=64,zero=3,no_grad_fusion=1",
         "\"is not supported with expert parallelism\"; the plan uses ep=8", 64},
        {"examples/hf/llama-3-8b.json", "tp=1,pp=1,mbs=1,gbs=64,zero=3",
         "\"is not supported with gradient accumulation fusion\"; the plan was priced with "
         "it: estimate with no_grad_fusion=1", 16},
        {"examples/hf/smollm3-3b-base.json", "tp=1,pp=1,mbs=1,gbs=64,zero=3,no_grad_fusion=1",
         "\"requires --untie-embeddings-and-output-weights\"; the model ties", 16},
        {"examples/hf/llama-3-8b.json",
         "tp=1,pp=1,mbs=1,gbs=64,zero=3,no_grad_fusion=1,grad_fp32=1",
         "reduces gradients in the parameters' dtype (fully_shard without a mixed-precision "
         "policy); the plan has fp32 gradients", 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ap_graph *g = load(cases[i].model);
        ap_plan_desc d;
        char err[AP_ERR_LEN], *text = NULL;
        CHECK(g != NULL);
        if (!g)
            continue;
        if (ap_test_megatron_desc(g, cases[i].gpus, cases[i].spec, &d, NULL)) {
            CHECK(!"the spec prices");
            ap_graph_free(g);
            continue;
        }
        CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
        CHECK_STR_HAS(err, cases[i].expect);
        CHECK(text == NULL);
        ap_plan_desc_free(&d);
        ap_graph_free(g);
    }
}

/* torchtitan takes the router from the model's MoEArgs, which no flag
 * states: the comment names DeepSeek-V3's group-limited routing (8 groups,
 * 4 picked) as num_expert_groups and num_limited_groups, and leaves them
 * out, MoEArgs' None, for a router without groups. */
static void torchtitan_flavor_names_the_expert_groups(void)
{
    ap_graph *g = load("examples/hf/deepseek-v3.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 256, "tp=1,pp=8,ep=32,mbs=1,gbs=256,first=5,last=8",
                                     &d, NULL), "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "256 experts of FFN 2048, top 8, from 4 of 8 expert groups "
                        "(num_limited_groups 4, num_expert_groups 8), on the layers");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    g = load("examples/hf/mixtral-8x7b.json");
    REQUIRE_OK(ap_test_megatron_desc(g, 64, "tp=2,pp=4,ep=8,sp=1,mbs=1,gbs=256", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "8 experts of FFN 14336, top 2, on every layer,");
    CHECK(text && !strstr(text, "num_expert_groups"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* $MEGATRON_ARGS is split unquoted, and its list patterns ([0]*3+[1]*58,
 * the pipeline layout) are globs: the script turns globbing off before
 * the torchrun line that splits it. */
static void megatron_script_splits_its_args_without_globbing(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=4,pp=2,sp=1,mbs=1,gbs=64", &d, NULL),
               "see above");
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "\"\n# Split $MEGATRON_ARGS into words without reading its list "
                        "patterns as file names.\nset -f\ntorchrun --nnodes 2 ");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* The blocks of stage s of plan object o: its layer class's is the last. */
static cJSON *stage_blocks(cJSON *o, int s)
{
    return cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "stages"), s),
                               "blocks");
}

/* The launcher's degrees are read off the ops' shardings, so each stage
 * must list every op of the blocks it runs, once, and nothing else: a plan
 * with its blocks emptied exported tp=1 from its [2, 4] mesh, one without
 * its layer block left the layers unchecked, and an op listed twice was
 * checked in one of its shardings. */
static void every_op_of_a_stage_is_listed_once(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    const char *spec = "tp=4,pp=2,sp=1,mbs=1,gbs=64";
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;

    cJSON *o = plan_object(g, 16, spec);
    cJSON *blocks = stage_blocks(o, 1);
    cJSON_DeleteItemFromArray(blocks, cJSON_GetArraySize(blocks) - 1);
    REQUIRE_OK(read_object(o, &d, err), err);
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stages[1].blocks: no sharding for op \"l0.ln1\" (its "
                       "layer class's representative); every op of the stage's blocks "
                       "needs one");
    CHECK(text == NULL);
    ap_plan_desc_free(&d);

    o = plan_object(g, 16, spec);
    cJSON *ops = cJSON_GetObjectItem(cJSON_GetArrayItem(stage_blocks(o, 0), 1), "ops");
    cJSON_AddItemToArray(ops, cJSON_Duplicate(cJSON_GetArrayItem(ops, 2), 1));
    REQUIRE_OK(read_object(o, &d, err), err);
    CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stages[0].blocks[1]: op \"l0.k\" is listed twice");
    ap_plan_desc_free(&d);

    /* The embedding is the first stage's, not the last's. */
    o = plan_object(g, 16, spec);
    cJSON *embed = cJSON_Duplicate(cJSON_GetArrayItem(stage_blocks(o, 0), 0), 1);
    cJSON_AddItemToArray(stage_blocks(o, 1), embed);
    REQUIRE_OK(read_object(o, &d, err), err);
    CHECK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &text, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: stages[1].blocks[2]: op \"embed\" is not in the layers, "
                       "embedding or head of this stage");
    ap_plan_desc_free(&d);

    /* Untouched, the same plan exports. */
    REQUIRE_OK(read_object(plan_object(g, 16, spec), &d, err), err);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--tensor-model-parallel-size 4");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

int main(void)
{
    RUN(the_export_states_the_rotary_base_scaling_and_norm_epsilon);
    RUN(megatron_plan_classifies_back_to_its_degrees);
    RUN(exported_megatron_flags_price_to_the_same_step);
    RUN(megatron_flags_state_the_model_shape);
    RUN(op_outside_the_pattern_is_refused_naming_stage_and_op);
    RUN(stages_with_different_meshes_or_recompute_are_refused);
    RUN(uneven_stages_need_a_layout_flag);
    RUN(deepspeed_config_states_batch_and_zero);
    RUN(torchtitan_batch_flags_follow_the_pipeline);
    RUN(torchtitan_replicates_only_pure_data_parallelism);
    RUN(torchtitan_flags_are_those_of_v0_2_2);
    RUN(reader_names_the_field_at_fault);
    RUN(partial_rotary_is_stated_as_rotary_percent);
    RUN(whole_head_rotary_needs_no_rotary_percent);
    RUN(biases_and_qk_norms_are_stated_as_megatron_builds_them);
    RUN(parallel_residual_is_refused_by_megatron_only);
    RUN(scaled_embeddings_and_logits_are_refused_by_megatron_only);
    RUN(relu_mlp_is_refused_by_megatron_only);
    RUN(model_without_positions_is_stated_as_none);
    RUN(sliding_windows_are_stated_as_megatron_builds_them);
    RUN(windows_of_two_lengths_are_refused_by_megatron);
    RUN(chunked_plan_exports_its_layout_alone);
    RUN(estimated_layout_round_trips_through_the_export);
    RUN(chunks_the_flags_place_export_as_before);
    RUN(uniform_groups_must_divide_each_chunk);
    RUN(reader_checks_chunk_layers);
    RUN(reader_refuses_gpus_that_do_not_fill_whole_nodes);
    RUN(export_refuses_a_model_of_another_structure);
    RUN(export_refuses_a_model_that_routes_otherwise);
    RUN(every_op_of_a_stage_is_listed_once);
    RUN(gpt_oss_experts_export_their_offset_and_clamp);
    RUN(zero3_exports_as_torch_fsdp2);
    RUN(zero_plans_megatron_cannot_run_are_refused_with_the_reason);
    RUN(torchtitan_flavor_names_the_expert_groups);
    RUN(megatron_script_splits_its_args_without_globbing);
    return DONE();
}
