/* hf.c -- builds the operator graph of one training step from a Hugging Face
 * config.json (GPT-2, GPT-NeoX, Llama, Mistral, Qwen2/3, Mixtral, Qwen-MoE,
 * DeepSeek-V3, Nemotron, Phi-3, Gemma 1/2/3, GPT-OSS, Llama 4, GLM-4.5,
 * MiniMax-M2, Seed-OSS, SmolLM3, ERNIE 4.5 dense and MoE, dots.llm1, Granite 3,
 * GLM-4-0414, Phi-1.5 and Phi-2, Cohere Command R and R7B).
 *
 * The config is read into an hf_model first, so that every field is checked
 * (present, of the right type, within sane bounds, consistent) before a single
 * op is added; the builder then writes the blocks with small helpers whose
 * tensor lists are strings: "x q.w:hnd" reads the tensor x of the current
 * layer and declares the parameter q.w of shape "hnd". See docs/hf-models.md.
 * A structure stated without a config (ap_decoder, from a Megatron-LM
 * command line) is read into the same hf_model and built by the same code.
 */
#include "graph/graph.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 1024 /* five times the deepest published model */
#define MAX_HIDDEN (1 << 20)
#define MAX_HEADS (1 << 16)
#define MAX_VOCAB (1 << 24)
#define MAX_FFN (1 << 24)
#define MAX_EXPERTS (1 << 16)
#define MAX_SEQ (1 << 24)
#define MAX_BATCH (1 << 20)
#define DEFAULT_SEQ_CAP 4096 /* longer contexts are trained in a late phase */
#define DROPOUT_P 0.1

typedef enum {
    FAM_GPT2,
    FAM_NEOX,
    FAM_LLAMA,
    FAM_MISTRAL,
    FAM_QWEN2,
    FAM_QWEN3,
    FAM_MIXTRAL,
    FAM_QWEN2_MOE,
    FAM_QWEN3_MOE,
    FAM_DEEPSEEK_V3,
    FAM_NEMOTRON,
    FAM_PHI3,
    FAM_GEMMA,
    FAM_GEMMA2,
    FAM_GEMMA3,
    FAM_GPT_OSS,
    FAM_LLAMA4,
    FAM_OLMO2,
    FAM_OLMO3,
    FAM_OLMOE,
    FAM_STARCODER2,
    FAM_OLMO,
    FAM_GLM4_MOE,
    FAM_MINIMAX_M2,
    FAM_SEED_OSS,
    FAM_SMOLLM3,
    FAM_ERNIE4_5,
    FAM_ERNIE4_5_MOE,
    FAM_DOTS1,
    FAM_GRANITE,
    FAM_GLM4,
    FAM_PHI,
    FAM_COHERE,
    FAM_COHERE2,
    FAM_COUNT
} family;

static const char *const family_names[FAM_COUNT] = {
    "gpt2", "gpt_neox", "llama", "mistral", "qwen2", "qwen3",
    "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "nemotron",
    "phi3", "gemma", "gemma2", "gemma3_text", "gpt_oss", "llama4_text",
    "olmo2", "olmo3", "olmoe", "starcoder2", "olmo", "glm4_moe", "minimax_m2",
    "seed_oss", "smollm3", "ernie4_5", "ernie4_5_moe", "dots1", "granite", "glm4",
    "phi", "cohere", "cohere2"};

/* Everything the builder needs, read and checked from the config. */
typedef struct {
    family fam;
    int fp16; /* fp16 weights and activations (a decoder's), else bf16 */
    int64_t layers, hidden, heads, kv_heads, head_dim, v_head_dim, ffn, vocab;
    int64_t positions; /* learned position table rows (GPT-2), else 0 */
    int64_t max_pos;   /* the config's context length, 0 if unknown */
    int64_t rot;       /* rotary embedding width per head, 0 for none */
    int layernorm;     /* LayerNorm with bias, else RMSNorm without */
    int norm_no_bias;  /* LayerNorm with a weight and no bias (Cohere's) */
    int gelu_mlp;      /* fc1 -> gelu -> fc2, else gate/up -> silu * up -> down */
    int relu2_mlp;     /* up -> relu^2 -> down (Nemotron), not gated */
    int layernorm1p;   /* LayerNorm with a zero-centred gamma (Nemotron) */
    int norm_free;     /* LayerNorm without weight or bias (OLMo 1) */
    int qkv_bias, o_bias, mlp_bias;
    int head_bias;      /* a bias on the output layer (ERNIE 4.5 MoE's use_bias) */
    /* No cost: what the exports state (ap_graph.rope_base and the rest). */
    double rope_base, norm_eps, rope_factor;
    int rope_scaling;
    double glu_offset, glu_clamp; /* ap_graph's, for GPT-OSS's experts */
    int parallel_residual;
    int shared_norm;   /* with parallel_residual: one norm feeds attention and
                          the MLP (Phi's, Cohere's), not one each (GPT-NeoX's) */
    int tie;
    int qk_norm;
    int qk_norm_wide;   /* the q and k norms span all heads of the projection,
                           not each head (OLMo 2, 3 and OLMoE) */
    int post_norm;      /* norms after attention and the MLP, none before
                           (OLMo 2 and 3) */
    int geglu;          /* gated MLP with GELU in place of SiLU (Gemma) */
    int quick_geglu;    /* gated MLPs and experts with x * sigmoid(1.702 x)
                           (Megatron-LM's --quick-geglu) */
    int expert_bias;    /* biases on the experts' projections (GPT-OSS) */
    int router_bias;    /* a bias on the router's logits (GPT-OSS) */
    int sinks;          /* a learned softmax offset per head (GPT-OSS's sinks) */
    /* Llama 4: layers where nope[i] is 1 take no rotary embedding (NoPE);
     * the others norm q and k without weights (L2, use_qk_norm) and attend
     * within chunks of `chunk` tokens. NULL, 0: every layer rotates. */
    unsigned char *nope;
    int qk_l2;
    int64_t chunk;
    int sandwich_norm;  /* a norm after attention and after the MLP too (Gemma 2, 3) */
    int embed_scale;    /* embeddings scaled by sqrt(hidden) (Gemma) */
    int logit_softcap;  /* logits capped as c * tanh(x / c) before the loss (Gemma 2) */
    int logit_scale;    /* logits scaled by a constant before the loss (Granite) */
    /* Sliding-window attention: `window` keys per query, its own included,
     * on the layers where swa[i] is 1 (NULL: every layer); 0: none. */
    int64_t window;
    unsigned char *swa;
    /* MoE */
    int64_t experts, top_k, moe_ffn, shared_ffn;
    int64_t groups, group_topk; /* DeepSeek's and GLM's n_group, topk_group; 0: none */
    /* The router (ap_op's route_*): sigmoid scores (else a softmax over
     * all experts), the top_k weights renormalised to sum 1, a per-expert
     * bias on the scores that pick, the factor on the weights, the weight
     * on the expert's input rather than its output (read_router). */
    int route_sigmoid, route_norm, route_bias, route_on_input;
    double route_scale;
    int shared_gate;
    int64_t first_dense, sparse_step, moe_freq;
    unsigned char *dense_only; /* per layer: listed in mlp_only_layers */
    /* DeepSeek multi-head latent attention */
    int mla;
    int64_t q_lora, kv_lora, qk_nope, qk_rope;
} hf_model;

typedef struct {
    const cJSON *root;
    const char *src;
    char *err;
    int bad; /* an error has been written; later reads are no-ops */
    int fam_override; /* root is a text_config: its family + 1; 0 none */
    const cJSON *outer;    /* the vision wrapper whose text_config root is, or NULL */
    const char *outer_src; /* its source, for messages about its own fields */
} hf_cfg;

__attribute__((format(printf, 2, 3))) static void cfg_fail(hf_cfg *c, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (c->bad)
        return;
    c->bad = 1;
    n = snprintf(c->err, AP_ERR_LEN, "%s: ", c->src);
    if (n < 0 || n >= AP_ERR_LEN)
        return;
    va_start(ap, fmt);
    vsnprintf(c->err + n, AP_ERR_LEN - (size_t)n, fmt, ap);
    va_end(ap);
}

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsNull(v))
        return "null";
    return "a number";
}

static const cJSON *cfg_item(const hf_cfg *c, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    return cJSON_IsNull(v) ? NULL : v;
}

/* An integer field in [min, max]; absent or null gives `def` unless required. */
static int64_t cfg_int(hf_cfg *c, const char *key, int required, int64_t def,
                       int64_t min, int64_t max)
{
    const cJSON *v = cfg_item(c, key);
    double x;
    if (c->bad)
        return def;
    if (!v) {
        if (required)
            cfg_fail(c, "\"%s\" is missing", key);
        return def;
    }
    if (!cJSON_IsNumber(v)) {
        cfg_fail(c, "\"%s\" must be an integer, not %s", key, json_type_name(v));
        return def;
    }
    x = v->valuedouble;
    if (x != floor(x)) {
        cfg_fail(c, "\"%s\" must be an integer, not %g", key, x);
        return def;
    }
    if (x < (double)min || x > (double)max) {
        cfg_fail(c, "\"%s\" is %.0f; it must be between %lld and %lld", key, x,
                 (long long)min, (long long)max);
        return def;
    }
    return (int64_t)x;
}

static int cfg_bool(hf_cfg *c, const char *key, int def)
{
    const cJSON *v = cfg_item(c, key);
    if (c->bad || !v)
        return def;
    if (!cJSON_IsBool(v)) {
        cfg_fail(c, "\"%s\" must be true or false, not %s", key, json_type_name(v));
        return def;
    }
    return cJSON_IsTrue(v);
}

/* A number field; absent or null gives `def`, and so does one of another
 * type, refused. *ok is 1 where the field is there and a number, else 0. */
static double cfg_number(hf_cfg *c, const char *key, double def, int *ok)
{
    const cJSON *v = cfg_item(c, key);
    *ok = 0;
    if (c->bad || !v)
        return def;
    if (!cJSON_IsNumber(v)) {
        cfg_fail(c, "\"%s\" must be a number, not %s", key, json_type_name(v));
        return def;
    }
    *ok = 1;
    return v->valuedouble;
}

/* A number field in [0, 1]; absent or null gives `def`. */
static double cfg_fraction(hf_cfg *c, const char *key, double def)
{
    int there;
    double x = cfg_number(c, key, def, &there);
    if (there && !(x >= 0 && x <= 1)) {
        cfg_fail(c, "\"%s\" is %g; it must be between 0 and 1", key, x);
        return def;
    }
    return x;
}

/* An object field of the config (transformers 5's rope_parameters, the
 * rope_scaling of the configs before it), else NULL. */
static const cJSON *rope_object(const hf_cfg *c, const char *key)
{
    const cJSON *v = cfg_item(c, key);
    return cJSON_IsObject(v) ? v : NULL;
}

/* rope_parameters.partial_rotary_factor where the config has one (not
 * null), else NULL. */
static const cJSON *rope_parameters_factor(const hf_cfg *c)
{
    const cJSON *rp = rope_object(c, "rope_parameters");
    const cJSON *v = rp ? cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") : NULL;
    return cJSON_IsNull(v) ? NULL : v;
}

/* The share of each head rotary turns: transformers 5 keeps it in
 * rope_parameters.partial_rotary_factor, which wins over the field `key`
 * its configs had before (GPTNeoXConfig and the base config setdefault it
 * from there); absent from both, `def`. */
static double rotary_fraction(hf_cfg *c, const char *key, double def)
{
    const cJSON *v = rope_parameters_factor(c);
    if (c->bad || !v)
        return cfg_fraction(c, key, def);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1)) {
        cfg_fail(c, "\"rope_parameters\".\"partial_rotary_factor\" must be a number "
                 "between 0 and 1");
        return def;
    }
    return v->valuedouble;
}

/* A number field above 0 and at most 1e6 (a factor); absent or null gives
 * `def`. */
static double cfg_factor(hf_cfg *c, const char *key, double def)
{
    int there;
    double x = cfg_number(c, key, def, &there);
    if (there && !(x > 0 && x <= 1e6)) {
        cfg_fail(c, "\"%s\" is %g; it must be above 0 (and at most 1e6)", key, x);
        return def;
    }
    return x;
}

/* A string field that names a part the family is built with one way
 * (hidden_act, a router's method): it must be `want` (or, with `stem`,
 * begin with it); another value would be another model than the one built,
 * so it is refused, saying what `built` is. Absent, it is the config
 * class's default, which is the one built. */
static void check_choice(hf_cfg *c, const char *key, const char *family, const char *want,
                         int stem, const char *built)
{
    const cJSON *v = cfg_item(c, key);
    if (c->bad || !v)
        return;
    if (!cJSON_IsString(v))
        cfg_fail(c, "\"%s\" must be a string, not %s", key, json_type_name(v));
    else if (stem ? strncmp(v->valuestring, want, strlen(want)) : strcmp(v->valuestring, want))
        cfg_fail(c, "\"%s\" is \"%.64s\"; %s is built with %s only", key, v->valuestring,
                 family, built);
}

static int read_family(hf_cfg *c, family *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, "model_type");
    char list[512] = "";
    int i;
    if (c->fam_override) {
        *out = (family)(c->fam_override - 1);
        return 0;
    }
    if (!v) {
        cfg_fail(c, "\"model_type\" is missing");
        return -1;
    }
    if (!cJSON_IsString(v)) {
        cfg_fail(c, "\"model_type\" must be a string, not %s", json_type_name(v));
        return -1;
    }
    /* Kimi K2 runs DeepSeek-V3's architecture under a name of its own;
     * DeepSeek-V2's differs in its router alone (a softmax, no correction
     * bias: read_router), which costs the same, and its topk_method. */
    if (!strcmp(v->valuestring, "kimi_k2") || !strcmp(v->valuestring, "deepseek_v2")) {
        *out = FAM_DEEPSEEK_V3;
        return 0;
    }
    for (i = 0; i < FAM_COUNT; i++) {
        if (strcmp(v->valuestring, family_names[i]) == 0) {
            *out = (family)i;
            return 0;
        }
        strcat(list, i ? ", " : "");
        strcat(list, family_names[i]);
    }
    cfg_fail(c, "model_type \"%.100s\" is not supported; supported: %s, deepseek_v2 and "
             "kimi_k2 (as deepseek_v3), and gemma3, llama4, mistral3, kimi_k25, glm4v_moe, "
             "qwen3_vl and qwen3_vl_moe (their text_config)", v->valuestring, list);
    return -1;
}

/* Heads must tile the hidden size unless head_dim says otherwise, and query
 * heads must group evenly onto key/value heads. */
static void check_heads(hf_cfg *c, hf_model *m, const char *hkey,
                        const char *nkey, const char *gkey)
{
    if (c->bad)
        return;
    if (m->head_dim == 0) {
        if (m->hidden % m->heads != 0) {
            cfg_fail(c, "\"%s\" (%lld) is not divisible by \"%s\" (%lld)", hkey,
                     (long long)m->hidden, nkey, (long long)m->heads);
            return;
        }
        m->head_dim = m->hidden / m->heads;
    }
    /* A count the config class filled in is named as such: the config
     * meant another, and must state it. */
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c->root, "model_type");
    if (m->heads % m->kv_heads != 0 && !cJSON_GetObjectItemCaseSensitive(c->root, gkey))
        cfg_fail(c, "\"%s\" (%lld) is not a multiple of \"%s\" (%lld, the %.64s config "
                 "class's default where the config leaves it out); state it", nkey,
                 (long long)m->heads, gkey, (long long)m->kv_heads,
                 cJSON_IsString(type) ? type->valuestring : family_names[m->fam]);
    else if (m->heads % m->kv_heads != 0)
        cfg_fail(c, "\"%s\" (%lld) is not a multiple of \"%s\" (%lld)", nkey,
                 (long long)m->heads, gkey, (long long)m->kv_heads);
    if (m->v_head_dim == 0)
        m->v_head_dim = m->head_dim;
}

static void read_gpt2(hf_cfg *c, hf_model *m)
{
    m->layers = cfg_int(c, "n_layer", 1, 0, 1, MAX_LAYERS);
    m->hidden = cfg_int(c, "n_embd", 1, 0, 1, MAX_HIDDEN);
    m->heads = cfg_int(c, "n_head", 1, 0, 1, MAX_HEADS);
    m->vocab = cfg_int(c, "vocab_size", 1, 0, 1, MAX_VOCAB);
    m->positions = cfg_int(c, "n_positions", 1, 0, 1, MAX_SEQ);
    m->ffn = cfg_int(c, "n_inner", 0, 4 * m->hidden, 1, MAX_FFN);
    m->tie = cfg_bool(c, "tie_word_embeddings", 1);
    m->max_pos = m->positions;
    m->kv_heads = m->heads;
    m->layernorm = m->gelu_mlp = 1;
    m->qkv_bias = m->o_bias = m->mlp_bias = 1;
    check_heads(c, m, "n_embd", "n_head", "n_head");
}

static void read_neox(hf_cfg *c, hf_model *m)
{
    m->layers = cfg_int(c, "num_hidden_layers", 1, 0, 1, MAX_LAYERS);
    m->hidden = cfg_int(c, "hidden_size", 1, 0, 1, MAX_HIDDEN);
    m->heads = cfg_int(c, "num_attention_heads", 1, 0, 1, MAX_HEADS);
    m->vocab = cfg_int(c, "vocab_size", 1, 0, 1, MAX_VOCAB);
    m->ffn = cfg_int(c, "intermediate_size", 1, 0, 1, MAX_FFN);
    m->max_pos = cfg_int(c, "max_position_embeddings", 0, 0, 1, MAX_SEQ);
    m->parallel_residual = cfg_bool(c, "use_parallel_residual", 1);
    m->tie = cfg_bool(c, "tie_word_embeddings", 0);
    m->qkv_bias = m->o_bias = cfg_bool(c, "attention_bias", 1);
    double pct = rotary_fraction(c, "rotary_pct", 0.25); /* GPTNeoXConfig's default */
    m->kv_heads = m->heads;
    m->layernorm = m->gelu_mlp = m->mlp_bias = 1;
    check_heads(c, m, "hidden_size", "num_attention_heads", "num_attention_heads");
    /* HF's rotary_ndims = int(head_size * rotary_pct) */
    m->rot = (int64_t)((double)m->head_dim * pct);
    if (!c->bad && m->rot % 2)
        cfg_fail(c, "\"rotary_pct\" (%g) of the head size %lld rotates an odd "
                 "number of elements (%lld); rotary pairs them", pct,
                 (long long)m->head_dim, (long long)m->rot);
}

/* Entry i of the layer list `key`: a layer's index, or -1 after failing. */
static int64_t layer_index(hf_cfg *c, const char *key, int i, const cJSON *e,
                           const hf_model *m)
{
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
        e->valuedouble < 0 || e->valuedouble >= (double)m->layers) {
        cfg_fail(c, "\"%s\"[%d] must be a layer index below %lld", key, i,
                 (long long)m->layers);
        return -1;
    }
    return (int64_t)e->valuedouble;
}

/* mlp_only_layers: layer indices that keep a dense MLP in a Qwen-MoE model. */
static void read_dense_only(hf_cfg *c, hf_model *m)
{
    const cJSON *v = cfg_item(c, "mlp_only_layers"), *e;
    int i = 0;
    if (c->bad || !v)
        return;
    if (!cJSON_IsArray(v)) {
        cfg_fail(c, "\"mlp_only_layers\" must be an array, not %s", json_type_name(v));
        return;
    }
    cJSON_ArrayForEach(e, v) {
        int64_t l = layer_index(c, "mlp_only_layers", i++, e, m);
        if (l < 0)
            return;
        m->dense_only[l] = 1;
    }
}

/* Llama 4's moe_layers: the indices of the layers that route, the others
 * dense. Llama4TextConfig takes the list as given where there is one (an
 * empty list: no layer routes) and derives it from
 * interleave_moe_layer_step only where it is absent or null, and
 * Llama4TextDecoderLayer routes a layer when its index is in it. An index
 * past the layers or given twice cannot be what the config means, so it is
 * refused. */
static void read_moe_layers(hf_cfg *c, hf_model *m)
{
    const cJSON *v = cfg_item(c, "moe_layers"), *e;
    int i = 0;
    if (c->bad || !v)
        return;
    if (!cJSON_IsArray(v)) {
        cfg_fail(c, "\"moe_layers\" must be an array of layer indices, not %s",
                 json_type_name(v));
        return;
    }
    for (int64_t l = 0; l < m->layers; l++)
        m->dense_only[l] = 1;
    cJSON_ArrayForEach(e, v) {
        int64_t l = layer_index(c, "moe_layers", i, e, m);
        if (l < 0)
            return;
        if (!m->dense_only[l]) {
            cfg_fail(c, "\"moe_layers\"[%d] names layer %lld a second time", i, (long long)l);
            return;
        }
        m->dense_only[l] = 0;
        i++;
    }
    /* The list says which layers route; the step no longer does. */
    m->sparse_step = 1;
}

/* Whether the config is DeepSeek-V2's (model_type "deepseek_v2"), which
 * is read as DeepSeek-V3's but for its router. */
static int deepseek_v2(const hf_cfg *c)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c->root, "model_type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, "deepseek_v2");
}

/* DeepSeek's group-limited routing: a token's top_k experts come from the
 * experts of its topk_group best groups of n_group. A config that limits
 * nothing (topk_group = n_group, or one group) has none. Left out, the
 * fields are the config class's: DeepseekV3Config's 8 groups and 4 picked
 * (Kimi K2's too), DeepseekV2Config's "greedy" gate over all experts,
 * Glm4MoeConfig's one group. */
static void read_groups(hf_cfg *c, hf_model *m)
{
    int v3 = m->fam == FAM_DEEPSEEK_V3 && !deepseek_v2(c);
    int64_t g = cfg_int(c, "n_group", 0, v3 ? 8 : 1, 1, MAX_EXPERTS);
    int64_t k = cfg_int(c, "topk_group", 0, v3 ? 4 : g, 1, MAX_EXPERTS);
    /* DeepSeek-V2's gate picks from all experts under "greedy" whatever
     * n_group says, from the best groups under "group_limited_greedy";
     * V3's "noaux_tc" always limits to groups. */
    const cJSON *t = cfg_item(c, "topk_method");
    if (c->bad)
        return;
    if (t && !cJSON_IsString(t)) {
        cfg_fail(c, "\"topk_method\" must be a string, not %s", json_type_name(t));
        return;
    }
    if (t && strcmp(t->valuestring, "greedy") && strcmp(t->valuestring, "group_limited_greedy") &&
        strcmp(t->valuestring, "noaux_tc")) {
        cfg_fail(c, "\"topk_method\" is \"%.64s\"; \"greedy\", \"group_limited_greedy\" "
                 "and \"noaux_tc\" are built", t->valuestring);
        return;
    }
    /* HF's gate takes the topk_group best of n_group group scores, which
     * fails for more groups than there are; a config asking for them states
     * no routing, so it is refused rather than read as none. A topk_group
     * left out is the config class's 4, which a config stating fewer groups
     * did not ask for: that reads as no limit. */
    if (k > g && cfg_item(c, "topk_group")) {
        cfg_fail(c, "\"topk_group\" (%lld) exceeds \"n_group\" (%lld): a token picks its "
                 "experts from topk_group of the n_group groups", (long long)k, (long long)g);
        return;
    }
    int greedy = t ? !strcmp(t->valuestring, "greedy") : deepseek_v2(c);
    if (g <= 1 || k >= g || greedy)
        return;
    if (m->experts % g)
        cfg_fail(c, "\"n_group\" (%lld) does not divide \"n_routed_experts\" (%lld)",
                 (long long)g, (long long)m->experts);
    else if (m->top_k > k * (m->experts / g))
        cfg_fail(c, "\"num_experts_per_tok\" (%lld) exceeds the experts of \"topk_group\" "
                 "(%lld) groups", (long long)m->top_k, (long long)k);
    m->groups = g;
    m->group_topk = k;
}

/* GLM-4.5's and dots.llm1's MoE layers are DeepSeek-V3's (HF's Glm4MoeMoE
 * and Dots1MoE): n_routed_experts, shared experts n_shared_experts x
 * moe_intermediate_size wide, dense layers before first_k_dense_replace,
 * group-limited routing. */
static int deepseek_moe(family f)
{
    return f == FAM_DEEPSEEK_V3 || f == FAM_GLM4_MOE || f == FAM_DOTS1;
}

/* Glm4MoeMoE and Dots1TopkRouter (`block`) score experts with a sigmoid
 * plus a correction bias and pick them from the best groups, DeepSeek-V3's
 * "noaux_tc", whatever topk_method and scoring_func say. A config that
 * names another router describes one HF does not run, so it is refused;
 * this runs before read_groups, whose list of methods is DeepSeek's and
 * would accept "greedy". */
static void check_noaux_router(hf_cfg *c, const char *family, const char *block)
{
    char built[96];
    snprintf(built, sizeof built, "\"noaux_tc\" (%s's group-limited top-k)", block);
    check_choice(c, "topk_method", family, "noaux_tc", 0, built);
    snprintf(built, sizeof built, "\"sigmoid\" (%s's)", block);
    check_choice(c, "scoring_func", family, "sigmoid", 0, built);
}


/* How the family's router scores and weighs the experts, as transformers'
 * modeling files run it, with the config class's defaults
 * (docs/hf-models.md, "Routers"). Mixtral and GPT-OSS: a softmax over the
 * top-k logits (Megatron-Core's default). Qwen2-MoE, Qwen3-MoE and OLMoE:
 * a softmax over all experts, its top k renormalised under norm_topk_prob
 * (false by default). DeepSeek-V2: a softmax over all experts, its top k
 * times routed_scaling_factor (1.0), never renormalised (DeepseekV2Moe
 * does not read norm_topk_prob). DeepSeek-V3 and Kimi K2: sigmoid scores
 * plus e_score_correction_bias to pick, renormalised under norm_topk_prob
 * (true), times routed_scaling_factor (2.5); GLM-4.5 the same with 1.0.
 * Llama 4: a sigmoid of its top-k logits, as they are. MiniMax-M2
 * (MiniMaxM2TopKRouter): sigmoid scores plus e_score_correction_bias to
 * pick (use_routing_bias, true in every published config), the top k
 * always renormalised and never scaled: it reads neither norm_topk_prob
 * nor a scaling factor. dots.llm1 (Dots1TopkRouter): DeepSeek-V3's, with
 * Dots1Config's norm_topk_prob false and routed_scaling_factor 1.0.
 * ERNIE 4.5 (Ernie4_5_MoeSparseMoeBlock): a softmax over all experts,
 * moe_statics' e_score_correction_bias added to pick, the picked
 * probabilities always renormalised and never scaled. */
static void read_router(hf_cfg *c, hf_model *m)
{
    m->route_norm = 1;
    m->route_scale = 1;
    if (m->fam == FAM_QWEN2_MOE || m->fam == FAM_QWEN3_MOE || m->fam == FAM_OLMOE) {
        m->route_norm = cfg_bool(c, "norm_topk_prob", 0);
    } else if (m->fam == FAM_LLAMA4) {
        /* Llama4TextMoe multiplies the tokens routed in by their score
         * (routed_in * router_scores) and adds the experts' outputs as
         * they come. */
        m->route_sigmoid = m->route_on_input = 1;
        m->route_norm = 0;
    } else if (m->fam == FAM_DEEPSEEK_V3 && deepseek_v2(c)) {
        m->route_norm = 0;
        m->route_scale = cfg_factor(c, "routed_scaling_factor", 1.0);
    } else if (m->fam == FAM_MINIMAX_M2) {
        m->route_sigmoid = 1;
        m->route_bias = cfg_bool(c, "use_routing_bias", 1);
    } else if (m->fam == FAM_ERNIE4_5_MOE) {
        m->route_bias = 1;
    } else if (deepseek_moe(m->fam)) {
        m->route_sigmoid = m->route_bias = 1;
        m->route_norm = cfg_bool(c, "norm_topk_prob", m->fam != FAM_DOTS1);
        m->route_scale = cfg_factor(c, "routed_scaling_factor",
                                    m->fam == FAM_DEEPSEEK_V3 ? 2.5 : 1.0);
    }
}

/* ERNIE 4.5's MoE layers (Ernie4_5_MoeDecoderLayer): layer i routes where
 * (i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <=
 * moe_layer_end_index (-1: the last layer), the others are dense; each
 * has moe_num_shared_experts x moe_intermediate_size of shared expert.
 * Ernie4_5_MoeConfig's defaults: 2 shared, from layer 1 to the last,
 * every layer. use_bias puts a bias on every expert projection too. */
static void read_ernie_moe(hf_cfg *c, hf_model *m)
{
    int64_t shared = cfg_int(c, "moe_num_shared_experts", 0, 2, 0, MAX_EXPERTS);
    int64_t first = cfg_int(c, "moe_layer_start_index", 0, 1, 0, MAX_LAYERS);
    int64_t last = cfg_int(c, "moe_layer_end_index", 0, -1, -1, MAX_LAYERS);
    int64_t every = cfg_int(c, "moe_layer_interval", 0, 1, 1, MAX_LAYERS);
    if (c->bad)
        return;
    if (last == -1)
        last = m->layers - 1;
    m->shared_ffn = shared * m->moe_ffn;
    m->expert_bias = m->mlp_bias;
    for (int64_t i = 0; i < m->layers; i++)
        m->dense_only[i] = !((i + 1) % every == 0 && i >= first && i <= last);
}

/* The key a config states the number of experts under. Where the config
 * class's attribute_map sends one name to another, transformers reads
 * either into one attribute: Mixtral's, GPT-OSS's, Qwen3-MoE's and
 * Qwen3-VL-MoE's text config send num_experts to num_local_experts (so
 * transformers 5 saves Qwen3-MoE's under the latter, where the configs
 * before it say num_experts), OLMoE's num_local_experts to num_experts,
 * GLM-4.5's and GLM-4.5V's text config num_local_experts to
 * n_routed_experts. `key` is the name read where the config gives neither
 * or one (it is then required); a config that gives both must have them
 * agree, since they set one attribute. Qwen2MoeConfig has no such map, in
 * transformers 5 either, so a Qwen2-MoE config is read by num_experts
 * alone. */
static const char *experts_key(hf_cfg *c, const char *key, const char *alias)
{
    if (!alias || !cfg_item(c, alias))
        return key;
    if (!cfg_item(c, key))
        return alias;
    int64_t a = cfg_int(c, key, 1, 0, 1, MAX_EXPERTS);
    int64_t b = cfg_int(c, alias, 1, 0, 1, MAX_EXPERTS);
    if (!c->bad && a != b)
        cfg_fail(c, "\"%s\" (%lld) and \"%s\" (%lld) disagree; they name one number "
                 "(the config class's attribute_map reads one as the other)", key,
                 (long long)a, alias, (long long)b);
    return key;
}

/* The name the family's config class saves its number of experts under,
 * and the other name its attribute_map reads as it (NULL: none). */
static const char *experts_names(family f, const char **alias)
{
    *alias = NULL;
    switch (f) {
    case FAM_MIXTRAL: case FAM_GPT_OSS:
        *alias = "num_experts";
        return "num_local_experts";
    case FAM_LLAMA4: case FAM_MINIMAX_M2:
        return "num_local_experts";
    case FAM_QWEN3_MOE:
        *alias = "num_local_experts";
        return "num_experts";
    case FAM_OLMOE:
        *alias = "num_local_experts";
        return "num_experts";
    case FAM_GLM4_MOE:
        *alias = "num_local_experts";
        return "n_routed_experts";
    case FAM_DEEPSEEK_V3: case FAM_DOTS1:
        return "n_routed_experts";
    case FAM_ERNIE4_5_MOE:
        return "moe_num_experts";
    default:
        return "num_experts";
    }
}

static void read_moe(hf_cfg *c, hf_model *m)
{
    int ernie = m->fam == FAM_ERNIE4_5_MOE;
    const char *alias, *ekey = experts_names(m->fam, &alias);
    const char *kkey = ernie ? "moe_k" : "num_experts_per_tok";
    ekey = experts_key(c, ekey, alias);
    m->experts = cfg_int(c, ekey, 1, 0, 1, MAX_EXPERTS);
    m->top_k = cfg_int(c, kkey, 1, 0, 1, MAX_EXPERTS);
    if (!c->bad && m->top_k > m->experts)
        cfg_fail(c, "\"%s\" (%lld) exceeds \"%s\" (%lld)", kkey,
                 (long long)m->top_k, ekey, (long long)m->experts);
    m->sparse_step = 1;
    m->moe_freq = 1;
    read_router(c, m);
    if (m->fam == FAM_MIXTRAL || m->fam == FAM_GPT_OSS || m->fam == FAM_OLMOE ||
        m->fam == FAM_MINIMAX_M2) {
        m->moe_ffn = m->ffn;
        return;
    }
    /* Llama 4: experts and the one shared expert intermediate_size wide,
     * dense layers intermediate_size_mlp; every interleave_moe_layer_step-th
     * layer routes (HF's moe_layers). */
    if (m->fam == FAM_LLAMA4) {
        m->moe_ffn = m->shared_ffn = m->ffn;
        m->ffn = cfg_int(c, "intermediate_size_mlp", 0, 16384, 1, MAX_FFN);
        m->sparse_step = cfg_int(c, "interleave_moe_layer_step", 0, 1, 1, MAX_LAYERS);
        read_moe_layers(c, m);
        return;
    }
    m->moe_ffn = cfg_int(c, "moe_intermediate_size", 1, 0, 1, MAX_FFN);
    if (ernie)
        read_ernie_moe(c, m);
    if (m->fam == FAM_QWEN2_MOE) {
        m->shared_ffn = cfg_int(c, "shared_expert_intermediate_size", 1, 0, 0, MAX_FFN);
        m->shared_gate = m->shared_ffn > 0;
    }
    if (m->fam == FAM_QWEN2_MOE || m->fam == FAM_QWEN3_MOE) {
        m->sparse_step = cfg_int(c, "decoder_sparse_step", 0, 1, 1, MAX_LAYERS);
        read_dense_only(c, m);
    }
    if (deepseek_moe(m->fam)) {
        /* Glm4MoeConfig defaults to one shared expert and one dense layer;
         * its decoder layer, and Dots1's, routes every layer from
         * first_k_dense_replace on, with no moe_layer_freq. */
        int glm = m->fam == FAM_GLM4_MOE, dots = m->fam == FAM_DOTS1, v2 = deepseek_v2(c);
        /* The config classes' defaults: DeepseekV3Config's one shared
         * expert and three dense layers, DeepseekV2Config's two and none,
         * Dots1Config's none dense; Dots1Config has no number of shared
         * experts (None, which Dots1MoE cannot build), so dots1 needs it. */
        int64_t shared = cfg_int(c, "n_shared_experts", dots, glm ? 1 : v2 ? 2 : 1, 0,
                                 MAX_EXPERTS);
        m->shared_ffn = shared * m->moe_ffn;
        m->first_dense = cfg_int(c, "first_k_dense_replace", 0,
                                 glm ? 1 : v2 || dots ? 0 : 3, 0, MAX_LAYERS);
        if (glm || dots)
            check_noaux_router(c, family_names[m->fam], glm ? "Glm4MoeMoE" : "Dots1TopkRouter");
        else
            m->moe_freq = cfg_int(c, "moe_layer_freq", 0, 1, 1, MAX_LAYERS);
        read_groups(c, m);
    }
}

static void read_mla(hf_cfg *c, hf_model *m)
{
    m->mla = 1;
    m->q_lora = cfg_int(c, "q_lora_rank", 0, 0, 1, MAX_HIDDEN);
    m->kv_lora = cfg_int(c, "kv_lora_rank", 1, 0, 1, MAX_HIDDEN);
    m->qk_nope = cfg_int(c, "qk_nope_head_dim", 1, 0, 1, MAX_HIDDEN);
    m->qk_rope = cfg_int(c, "qk_rope_head_dim", 1, 0, 1, MAX_HIDDEN);
    m->v_head_dim = cfg_int(c, "v_head_dim", 1, 0, 1, MAX_HIDDEN);
    m->head_dim = m->qk_nope + m->qk_rope;
}

/* Nemotron, Phi, Phi-3, GLM-4.5, GLM-4-0414 and SmolLM3 rotate
 * int(head_dim * partial_rotary_factor) elements of each head, as HF's
 * default rope init does (SmolLM3RotaryEmbedding's own reads the factor,
 * 1.0 where absent); `def` is the config class's default (NemotronConfig's,
 * PhiConfig's, Glm4MoeConfig's and Glm4Config's 0.5, Phi3Config's and
 * SmolLM3's 1). */
static int64_t partial_rotary(hf_cfg *c, const hf_model *m, double def)
{
    double f = rotary_fraction(c, "partial_rotary_factor", def);
    int64_t r = (int64_t)((double)m->head_dim * f);
    if (!c->bad && r % 2)
        cfg_fail(c, "\"partial_rotary_factor\" (%g) of the head size %lld rotates "
                 "an odd number of elements (%lld); rotary pairs them", f,
                 (long long)m->head_dim, (long long)r);
    return r;
}

static int is_gemma(family f)
{
    return f == FAM_GEMMA || f == FAM_GEMMA2 || f == FAM_GEMMA3;
}

/* OLMo 2, 3 and OLMoE norm q and k across all heads. */
static int is_olmo(family f)
{
    return f == FAM_OLMO2 || f == FAM_OLMO3 || f == FAM_OLMOE;
}

/* A boolean field that names a part the family is built with one way
 * (HF's modeling file builds it whatever the config says): it must be
 * `want`; the other value describes a model HF does not build, so it is
 * refused, saying what `built` is. Absent, it is the part built. */
static void check_flag(hf_cfg *c, const char *key, const char *family, int want,
                       const char *built)
{
    const cJSON *v = cfg_item(c, key);
    if (c->bad || !v)
        return;
    if (!cJSON_IsBool(v))
        cfg_fail(c, "\"%s\" must be true or false, not %s", key, json_type_name(v));
    else if (cJSON_IsTrue(v) != want)
        cfg_fail(c, "\"%s\" is %s; %s is built with %s only", key,
                 want ? "false" : "true", family, built);
}

/* MiniMax-M2 rotates rotary_dim elements of each head: MiniMax's configs
 * state the width, and MiniMaxM2Config (3e108993) turns it into
 * partial_rotary_factor = rotary_dim / head_dim, head_dim / 2 where it is
 * absent. A config without rotary_dim is read by its factor
 * (rope_parameters' or the top-level field, 0.5 where neither is); one
 * with both must have them agree, as the published configs that carry both
 * do (64 of 128 and 0.5). */
static int64_t minimax_rotary(hf_cfg *c, const hf_model *m)
{
    int factor = rope_parameters_factor(c) || cfg_item(c, "partial_rotary_factor");
    if (!cfg_item(c, "rotary_dim"))
        return partial_rotary(c, m, 0.5);
    int64_t r = cfg_int(c, "rotary_dim", 0, m->head_dim / 2, 0, m->head_dim);
    if (c->bad)
        return 0;
    if (factor) {
        double f = rotary_fraction(c, "partial_rotary_factor", 0.5);
        int64_t rf = (int64_t)((double)m->head_dim * f);
        if (!c->bad && rf != r)
            cfg_fail(c, "\"rotary_dim\" (%lld) and \"partial_rotary_factor\" (%g of the "
                     "head size %lld: %lld) disagree; say the rotated width once",
                     (long long)r, f, (long long)m->head_dim, (long long)rf);
    }
    if (!c->bad && r % 2)
        cfg_fail(c, "\"rotary_dim\" (%lld) is odd; rotary pairs the elements it rotates",
                 (long long)r);
    return r;
}

/* The model_type of the vision wrapper whose text_config c reads, or "". */
static const char *wrapper_type(const hf_cfg *c)
{
    const cJSON *t = c->outer ? cJSON_GetObjectItemCaseSensitive(c->outer, "model_type") : NULL;
    return cJSON_IsString(t) ? t->valuestring : "";
}

/* The key-value heads of a config that leaves them out: the default of
 * its config class's num_key_value_heads, which transformers fills in for
 * a key the file does not have (transformers 4.5x's __init__ defaults and
 * 5's dataclass fields agree): StarCoder2's, Ernie4_5Config's and
 * Glm4Config's 2; Gemma
 * 2's, Gemma 3's, SmolLM3's, Ernie4_5_MoeConfig's and Qwen3MoeConfig's 4;
 * MistralConfig's, MixtralConfig's, GptOssConfig's, Llama4TextConfig's,
 * Glm4MoeConfig's (and GLM-4.5V's text config's), MiniMaxM2Config's and
 * SeedOssConfig's 8; GemmaConfig's, Qwen2MoeConfig's and
 * Qwen3VLMoeTextConfig's 16; Qwen2Config's, Qwen3Config's (and
 * Qwen3VLTextConfig's) and Dots1Config's 32. LlamaConfig, Phi3Config,
 * NemotronConfig, GraniteConfig and OLMo's default to None, which they read as the query
 * heads, as DeepSeek's latent attention needs no number. */
static int64_t class_kv_heads(const hf_cfg *c, family f, int64_t heads)
{
    switch (f) {
    case FAM_STARCODER2: case FAM_ERNIE4_5: case FAM_GLM4: return 2;
    case FAM_GEMMA2: case FAM_GEMMA3: case FAM_SMOLLM3: case FAM_ERNIE4_5_MOE: return 4;
    case FAM_QWEN3_MOE: return strcmp(wrapper_type(c), "qwen3_vl_moe") ? 4 : 16;
    case FAM_MISTRAL: case FAM_MIXTRAL: case FAM_GPT_OSS: case FAM_LLAMA4:
    case FAM_GLM4_MOE: case FAM_MINIMAX_M2: case FAM_SEED_OSS: return 8;
    case FAM_GEMMA: case FAM_QWEN2_MOE: return 16;
    case FAM_QWEN2: case FAM_QWEN3: case FAM_DOTS1: return 32;
    default: return heads;
    }
}

/* The head size of a config that leaves head_dim out: its config class's
 * (GemmaConfig's, Gemma2Config's and Gemma3TextConfig's 256; Qwen3Config's (and
 * Qwen3VLTextConfig's), Llama4TextConfig's, MiniMaxM2Config's,
 * SeedOssConfig's, Ernie4_5Config's and Glm4Config's 128: ERNIE-4.5-0.3B's
 * 16 heads of 128 are twice its hidden size; GptOssConfig's 64), else 0, hidden /
 * heads, as the classes without a number of their own read it. */
static int64_t class_head_dim(family f)
{
    switch (f) {
    case FAM_GEMMA: case FAM_GEMMA2: case FAM_GEMMA3: return 256;
    case FAM_QWEN3: case FAM_LLAMA4: case FAM_MINIMAX_M2: case FAM_SEED_OSS:
    case FAM_ERNIE4_5: case FAM_GLM4: return 128;
    case FAM_GPT_OSS: return 64;
    default: return 0;
    }
}

/* num_key_value_heads or head_dim, at most `max`: absent, `absent`, the
 * config class's default; null, `null`, what the classes' `is None` branch
 * makes of it (the query heads, or hidden_size / num_attention_heads,
 * which 0 stands for here). */
static int64_t heads_field(hf_cfg *c, const char *key, int64_t absent, int64_t null,
                           int64_t max)
{
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c->root, key)))
        return null;
    return cfg_int(c, key, 0, absent, 1, max);
}

/* Whether the head reads the embedding table (`def`: the config class's
 * default). A vision wrapper's head is tied by the wrapper's own
 * tie_word_embeddings where it states one: transformers 5 ties by the
 * config of the class that holds both tables and writes the text class's
 * default into text_config, which can say the opposite (Qwen3-VL-235B-A22B
 * saved by 5.7.0 says true there and false outside, and its checkpoint
 * holds lm_head apart). Where the wrapper states none, text_config's is
 * read, as transformers 4 read it for every wrapper. */
static int read_tie(hf_cfg *c, int def)
{
    const cJSON *own = c->outer ? cJSON_GetObjectItemCaseSensitive(c->outer, "tie_word_embeddings")
                                : NULL;
    if (!own || cJSON_IsNull(own))
        return cfg_bool(c, "tie_word_embeddings", def);
    const cJSON *root = c->root;
    const char *src = c->src;
    c->root = c->outer;
    c->src = c->outer_src;
    int tie = cfg_bool(c, "tie_word_embeddings", def);
    c->root = root;
    c->src = src;
    return tie;
}

/* A zeroed flag a layer (m's swa, nope, dense_only), or NULL with c
 * failed for want of memory. */
static unsigned char *layer_flags(hf_cfg *c, const hf_model *m)
{
    unsigned char *f = calloc((size_t)m->layers, 1);
    if (!f)
        cfg_fail(c, "out of memory");
    return f;
}

/* Llama and its descendants share the field names. */
static void read_llama_like(hf_cfg *c, hf_model *m)
{
    family f = m->fam;
    int moe = f == FAM_MIXTRAL || f == FAM_QWEN2_MOE || f == FAM_QWEN3_MOE ||
              deepseek_moe(f) || f == FAM_GPT_OSS || f == FAM_LLAMA4 || f == FAM_OLMOE ||
              f == FAM_MINIMAX_M2 || f == FAM_ERNIE4_5_MOE;
    int ernie = f == FAM_ERNIE4_5 || f == FAM_ERNIE4_5_MOE;
    /* Gemma 3's multimodal configs leave Gemma3TextConfig's defaults out of
     * their text_config (the 4B's heads, its vocabulary); the sizes every
     * published config states stay required. */
    int g3 = f == FAM_GEMMA3;
    m->layers = cfg_int(c, "num_hidden_layers", 1, 0, 1, MAX_LAYERS);
    m->hidden = cfg_int(c, "hidden_size", 1, 0, 1, MAX_HIDDEN);
    m->heads = cfg_int(c, "num_attention_heads", !g3, 8, 1, MAX_HEADS);
    m->kv_heads = heads_field(c, "num_key_value_heads", class_kv_heads(c, f, m->heads),
                              m->heads, MAX_HEADS);
    m->vocab = cfg_int(c, "vocab_size", !g3, 262208, 1, MAX_VOCAB);
    m->ffn = cfg_int(c, "intermediate_size", 1, 0, 1, MAX_FFN);
    m->max_pos = cfg_int(c, "max_position_embeddings", 0, g3 ? 131072 : 0, 1,
                         INT64_C(1) << 40);
    /* GemmaConfig and its successors, Starcoder2Config, SmolLM3Config,
     * ERNIE 4.5's and Cohere's config classes tie by default. */
    m->tie = read_tie(c, is_gemma(f) || f == FAM_STARCODER2 || f == FAM_SMOLLM3 || ernie ||
                             f == FAM_COHERE || f == FAM_COHERE2);
    /* Cohere2Config sets head_dim to hidden_size / num_attention_heads
     * whatever the file says, and Cohere2Attention reads that. */
    if (f != FAM_DEEPSEEK_V3 && f != FAM_COHERE2)
        m->head_dim = heads_field(c, "head_dim", class_head_dim(f), 0, MAX_HIDDEN);
    /* Qwen2 always has a bias on Q, K and V; Qwen2-MoE has one under
     * qkv_bias (true), a field of Qwen2MoeConfig in transformers 5, which
     * Qwen2MoeAttention reads (never on o_proj). The others follow
     * attention_bias (which also covers o_proj). */
    if (f == FAM_QWEN2) {
        m->qkv_bias = 1;
    } else if (f == FAM_QWEN2_MOE) {
        m->qkv_bias = cfg_bool(c, "qkv_bias", 1);
    } else if (f == FAM_PHI3) {
        /* Phi3Config has no attention_bias, and Phi3Attention builds
         * qkv_proj and o_proj with bias=False whatever a config says. */
        check_flag(c, "attention_bias", "phi3", 0,
                   "no bias on qkv_proj and o_proj (Phi3Attention's bias=False)");
    } else if (f == FAM_PHI) {
        /* PhiAttention builds q_proj, k_proj, v_proj and dense with
         * bias=True, PhiMLP's fc1 and fc2 and PhiForCausalLM's lm_head
         * have one too; PhiConfig has no field for any of them. */
        check_flag(c, "attention_bias", "phi", 1,
                   "a bias on Q, K, V and dense (PhiAttention's bias=True)");
        m->qkv_bias = m->o_bias = m->mlp_bias = m->head_bias = 1;
    } else if (f == FAM_STARCODER2) {
        /* use_bias covers every linear layer. */
        m->qkv_bias = m->o_bias = m->mlp_bias = cfg_bool(c, "use_bias", 1);
    } else if (f == FAM_GLM4_MOE || f == FAM_GLM4) {
        /* Glm4MoeAttention's and GlmAttention's (GLM-4-0414's) attention_bias
         * is on Q, K and V; o_proj has none. Glm4Config defaults it to
         * true, Glm4MoeConfig to false. */
        m->qkv_bias = cfg_bool(c, "attention_bias", f == FAM_GLM4);
    } else if (f == FAM_MINIMAX_M2) {
        /* MiniMaxM2Attention's projections have no bias (bias=False). */
        check_flag(c, "attention_bias", "minimax_m2", 0,
                   "no bias on Q, K, V and O (MiniMaxM2Attention's)");
    } else if (ernie) {
        /* use_bias covers Q, K, V, O and every MLP, the experts' and the
         * shared expert's too; Ernie4_5_MoeForCausalLM's lm_head has one
         * with it, Ernie4_5ForCausalLM's none. */
        m->qkv_bias = m->o_bias = m->mlp_bias = cfg_bool(c, "use_bias", 0);
        m->head_bias = f == FAM_ERNIE4_5_MOE && m->mlp_bias;
    } else if (f == FAM_SEED_OSS) {
        /* SeedOssAttention: attention_bias on Q, K and V (true by default),
         * attention_out_bias on O (false). */
        m->qkv_bias = cfg_bool(c, "attention_bias", 1);
        m->o_bias = cfg_bool(c, "attention_out_bias", 0);
    } else if (f != FAM_MISTRAL && f != FAM_MIXTRAL) {
        /* GptOssConfig's default is a bias on every projection. */
        m->qkv_bias = m->o_bias = cfg_bool(c, "attention_bias", f == FAM_GPT_OSS);
    }
    if (f == FAM_LLAMA || f == FAM_NEMOTRON || f == FAM_SEED_OSS || f == FAM_SMOLLM3 ||
        f == FAM_GRANITE)
        m->mlp_bias = cfg_bool(c, "mlp_bias", 0);
    /* dots.llm1's Dots1Attention norms each head of q and k, Qwen3's. */
    m->qk_norm = f == FAM_QWEN3 || f == FAM_QWEN3_MOE || f == FAM_GEMMA3 || is_olmo(f) ||
                 f == FAM_DOTS1;
    /* GLM-4.5 norms each head of q and k (Qwen3's norms) under use_qk_norm;
     * GLM-4.5-Air does not. */
    if (f == FAM_GLM4_MOE)
        m->qk_norm = cfg_bool(c, "use_qk_norm", 0);
    /* MiniMax-M2 norms each projection across all its heads too
     * (qk_norm_type "per_layer"; read_minimax_m2). */
    if (f == FAM_MINIMAX_M2)
        m->qk_norm = 1;
    m->qk_norm_wide = is_olmo(f) || f == FAM_MINIMAX_M2;
    m->post_norm = f == FAM_OLMO2 || f == FAM_OLMO3;
    if (moe && !c->bad) {
        if (!(m->dense_only = layer_flags(c, m)))
            return;
        read_moe(c, m);
    }
    if (f == FAM_DEEPSEEK_V3)
        read_mla(c, m);
    check_heads(c, m, "hidden_size", "num_attention_heads", "num_key_value_heads");
    /* Latent attention decompresses a key and a value for every query head,
     * whatever num_key_value_heads says. */
    if (m->mla)
        m->kv_heads = m->heads;
    if (m->mla)
        m->rot = m->qk_rope;
    else if (!c->bad && f == FAM_MINIMAX_M2)
        m->rot = minimax_rotary(c, m);
    else if (c->bad || (f != FAM_NEMOTRON && f != FAM_PHI3 && f != FAM_GLM4_MOE &&
                        f != FAM_SMOLLM3 && f != FAM_GLM4 && f != FAM_PHI))
        m->rot = m->head_dim;
    else
        m->rot = partial_rotary(c, m, f == FAM_PHI3 || f == FAM_SMOLLM3 ? 1.0 : 0.5);
    if (!c->bad && m->rot % 2)
        cfg_fail(c, "the rotary part of the head (%lld) must be even: rotary "
                 "pairs its elements", (long long)m->rot);
}

static int is_moe_layer(const hf_model *m, int64_t i)
{
    if (m->experts == 0 || m->dense_only[i])
        return 0;
    if (deepseek_moe(m->fam))
        return i >= m->first_dense && i % m->moe_freq == 0;
    return (i + 1) % m->sparse_step == 0;
}

static int64_t layer_window(const hf_model *m, int64_t i)
{
    return m->window && (!m->swa || m->swa[i]) ? m->window : 0;
}

static int any_dense_layer(const hf_model *m)
{
    int64_t i;
    for (i = 0; i < m->layers; i++)
        if (!is_moe_layer(m, i))
            return 1;
    return 0;
}

static int any_moe_layer(const hf_model *m)
{
    int64_t i;
    for (i = 0; i < m->layers; i++)
        if (is_moe_layer(m, i))
            return 1;
    return 0;
}

/* ---- the builder ---- */

typedef struct {
    ap_graph *g;
    char *err;
    int status;
    int layer;                /* -1 outside the blocks */
    char scope[16];           /* prefix of local names: "l3.", "mtp0.", "" */
    char in[AP_NAME_LEN];     /* the residual stream entering this block */
    unsigned modules;         /* ap_module bits of the ops added now */
    int64_t window;           /* the current block's sliding window, 0: none */
    int nope;                 /* the current block takes no rotary embedding */
} bld;

/* Resolves a tensor token: "^" is the block input, "=name" a global name,
 * anything else is local to the current layer ("l3.q.y"). */
static void full_name(const bld *b, const char *tok, size_t len, char *out)
{
    if (len == 1 && tok[0] == '^')
        snprintf(out, AP_NAME_LEN, "%s", b->in);
    else if (tok[0] == '=')
        snprintf(out, AP_NAME_LEN, "%.*s", (int)len - 1, tok + 1);
    else if (b->scope[0])
        snprintf(out, AP_NAME_LEN, "%s%.*s", b->scope, (int)len, tok);
    else
        snprintf(out, AP_NAME_LEN, "%.*s", (int)len, tok);
}

static void build_fail(bld *b)
{
    if (!b->status)
        b->status = AP_EINTERNAL;
}

static void tensor(bld *b, const char *name, const char *shape, ap_dtype t, ap_role role)
{
    if (!b->status && ap_graph_add_tensor(b->g, name, shape, t, role, b->err) < 0)
        build_fail(b);
}

/* Splits a space-separated list of tokens into full names, declaring the
 * tensors written "name:shape" with the role given. */
static int names(bld *b, const char *list, ap_role role,
                 char buf[AP_MAX_IO][AP_NAME_LEN], const char **out)
{
    int n = 0;
    while (*list && !b->status) {
        size_t len = strcspn(list, " ");
        const char *colon = memchr(list, ':', len);
        char shape[AP_MAX_RANK + 1];
        if (n == AP_MAX_IO) {
            snprintf(b->err, AP_ERR_LEN, "hf: too many tensors in \"%s\"", list);
            build_fail(b);
            return -1;
        }
        full_name(b, list, colon ? (size_t)(colon - list) : len, buf[n]);
        if (colon) {
            snprintf(shape, sizeof shape, "%.*s", (int)(len - (size_t)(colon - list) - 1),
                     colon + 1);
            tensor(b, buf[n], shape, b->g->dtype, role);
        }
        out[n] = buf[n];
        n++;
        list += len;
        while (*list == ' ')
            list++;
    }
    return b->status ? -1 : n;
}

/* Adds an op of the current layer; returns its index, or -1 after an error
 * (which later calls then skip, so a block is written without checks). */
static int op(bld *b, const char *name, ap_op_kind kind, int sub,
              const char *ins, const char *outs)
{
    char inbuf[AP_MAX_IO][AP_NAME_LEN], outbuf[AP_MAX_IO][AP_NAME_LEN];
    char opname[AP_NAME_LEN];
    const char *inp[AP_MAX_IO], *outp[AP_MAX_IO];
    int nin, nout, i;
    if (b->status)
        return -1;
    nin = names(b, ins, AP_TENSOR_PARAM, inbuf, inp);
    nout = names(b, outs, AP_TENSOR_ACT, outbuf, outp);
    if (nin < 0 || nout < 0)
        return -1;
    full_name(b, name, strlen(name), opname);
    i = ap_graph_add_op(b->g, opname, kind, sub, b->layer, inp, nin, outp, nout, b->err);
    if (i < 0)
        build_fail(b);
    else
        b->g->ops[i].modules = b->modules;
    return i;
}

/* y = x W (+ bias): `w` and `bias` are the shapes of the weight and bias
 * (bias NULL for none); `y` is "name:shape". */
static void linear(bld *b, const char *name, const char *x, const char *w,
                   const char *bias, const char *y)
{
    char ins[3 * AP_NAME_LEN];
    if (bias)
        snprintf(ins, sizeof ins, "%s %s.w:%s %s.b:%s", x, name, w, name, bias);
    else
        snprintf(ins, sizeof ins, "%s %s.w:%s", x, name, w);
    op(b, name, AP_OP_MATMUL, 0, ins, y);
}

/* Normalises x over its last label `l`; LayerNorm also has a bias but
 * Cohere's, OLMo 1's neither a bias nor a weight. */
static void norm(bld *b, const hf_model *m, const char *name, const char *x,
                 char l, const char *y)
{
    char ins[3 * AP_NAME_LEN];
    if (m->norm_free)
        snprintf(ins, sizeof ins, "%s", x);
    else if (m->layernorm && !m->norm_no_bias)
        snprintf(ins, sizeof ins, "%s %s.w:%c %s.b:%c", x, name, l, name, l);
    else
        snprintf(ins, sizeof ins, "%s %s.w:%c", x, name, l);
    op(b, name, AP_OP_NORM,
       m->layernorm1p ? AP_NORM_LAYER1P : m->layernorm ? AP_NORM_LAYER : AP_NORM_RMS, ins, y);
}

static void dropout(bld *b, const char *name, const char *x, const char *y)
{
    int i = op(b, name, AP_OP_DROPOUT, 0, x, y);
    if (i >= 0)
        b->g->ops[i].dropout_p = DROPOUT_P;
}

static void attention(bld *b, const hf_model *m, const ap_build_opts *opt, const char *q,
                      const char *k, const char *v, const char *o)
{
    char ins[4 * AP_NAME_LEN];
    int i;
    /* GPT-OSS's sinks: one learned logit per head that joins each row's
     * softmax (its denominator only), kept beside the flash kernel. */
    snprintf(ins, sizeof ins, "%s %s %s%s", q, k, v, m->sinks ? " sinks:n" : "");
    i = op(b, "attn", AP_OP_ATTENTION, 0, ins, o);
    if (i >= 0) {
        b->g->ops[i].modules |= AP_MODULE_CORE_ATTN;
        b->g->ops[i].causal = 1;
        b->g->ops[i].flash = opt->flash;
        b->g->ops[i].dropout_p = opt->dropout ? DROPOUT_P : 0.0;
        b->g->ops[i].window = b->window;
        b->g->ops[i].chunk = m->chunk && !b->nope ? m->chunk : 0;
    }
}

/* The rotary position embedding of x, writing y: one fused kernel (as
 * Megatron-Core's --apply-rope-fusion) that reads x and the fp32 angle
 * table "rope.freqs" [s, r] and writes y, rotating r of each head's
 * elements and copying the rest. */
static void rotary(bld *b, const char *name, const char *x, const char *y)
{
    char ins[2 * AP_NAME_LEN];
    snprintf(ins, sizeof ins, "%s =rope.freqs", x);
    op(b, name, AP_OP_UNARY, AP_UNARY_ROTARY, ins, y);
}

/* Q, K and V each projected straight into heads ("bsh,hnd->bsnd"), so that
 * splitting the n and g labels is head-parallel attention. Q and K are
 * rotated after their norms (Qwen3's order) and before attention. */
static void self_attention(bld *b, const hf_model *m, const ap_build_opts *opt,
                           const char *x)
{
    const char *bias = m->qkv_bias ? "nd" : NULL, *kvb = m->qkv_bias ? "gd" : NULL;
    const char *q = "q.y", *k = "k.y";
    linear(b, "q", x, "hnd", bias, "q.y:bsnd");
    linear(b, "k", x, "hgd", kvb, "k.y:bsgd");
    linear(b, "v", x, "hgd", kvb, "v.y:bsgd");
    if (m->qk_norm_wide) {
        op(b, "q_norm", AP_OP_NORM, AP_NORM_RMS, "q.y q_norm.w:nd", "q_norm.y:bsnd");
        op(b, "k_norm", AP_OP_NORM, AP_NORM_RMS, "k.y k_norm.w:gd", "k_norm.y:bsgd");
        q = "q_norm.y";
        k = "k_norm.y";
    } else if (m->qk_norm) {
        norm(b, m, "q_norm", "q.y", 'd', "q_norm.y:bsnd");
        norm(b, m, "k_norm", "k.y", 'd', "k_norm.y:bsgd");
        q = "q_norm.y";
        k = "k_norm.y";
    }
    /* Llama 4's rotary layers norm q and k to unit length, without a
     * weight (its L2Norm; after the rotation there, which costs the same). */
    if (m->qk_l2 && !b->nope) {
        op(b, "q_norm", AP_OP_NORM, AP_NORM_RMS, q, "q_norm.y:bsnd");
        op(b, "k_norm", AP_OP_NORM, AP_NORM_RMS, k, "k_norm.y:bsgd");
        q = "q_norm.y";
        k = "k_norm.y";
    }
    if (m->rot && !b->nope) {
        rotary(b, "q_rot", q, "q_rot.y:bsnd");
        rotary(b, "k_rot", k, "k_rot.y:bsgd");
        q = "q_rot.y";
        k = "k_rot.y";
    }
    attention(b, m, opt, q, k, "v.y", "attn.y:bsnd");
    linear(b, "o", "attn.y", "ndh", m->o_bias ? "h" : NULL, "o.y:bsh");
}

/* DeepSeek's multi-head latent attention. Queries and keys have a part
 * without rotary embedding (D, per head) and a rotary part (r); the rotary
 * key is one per token, rotated, then broadcast over the heads by adding it
 * to the [g] input "heads.ones" (the format has no broadcasting view), then
 * concatenated with the per-head part. The query's rotary op reads and
 * writes all d = D + r of each head and rotates r of them: Megatron-Core
 * rotates the split-off part and concatenates, which moves at least that. */
static void latent_attention(bld *b, const hf_model *m, const ap_build_opts *opt,
                             const char *x)
{
    int bias = m->o_bias; /* attention_bias covers q_a, kv_a and o */
    /* Megatron-Core's up projections, the norms fused into them, and the
     * rotary embeddings and concatenation after them are one module
     * (mla_up_proj); without a query LoRA rank the query's projection
     * from the hidden state takes the place of its up projection. */
    if (m->q_lora) {
        linear(b, "q_a", x, "hq", bias ? "q" : NULL, "q_a.y:bsq");
        b->modules = AP_MODULE_MLA_UP_PROJ;
        norm(b, m, "q_a_norm", "q_a.y", 'q', "q_a_norm.y:bsq");
        linear(b, "q_b", "q_a_norm.y", "qnd", NULL, "q.y:bsnd");
    } else {
        b->modules = AP_MODULE_MLA_UP_PROJ;
        linear(b, "q", x, "hnd", NULL, "q.y:bsnd");
    }
    b->modules = 0;
    linear(b, "kv_a", x, "hk", bias ? "k" : NULL, "kv_a.y:bsk");
    linear(b, "k_rope", x, "hr", bias ? "r" : NULL, "k_rope.y:bsr");
    b->modules = AP_MODULE_MLA_UP_PROJ;
    norm(b, m, "kv_a_norm", "kv_a.y", 'k', "kv_a_norm.y:bsk");
    linear(b, "k_b", "kv_a_norm.y", "kgD", NULL, "k_nope.y:bsgD");
    linear(b, "v_b", "kv_a_norm.y", "kge", NULL, "v.y:bsge");
    rotary(b, "q_rot", "q.y", "q_rot.y:bsnd");
    rotary(b, "k_rot", "k_rope.y", "k_rot.y:bsr");
    op(b, "k_rope_heads", AP_OP_BINARY, AP_BINARY_ADD, "k_rot.y =heads.ones",
       "k_rope_heads.y:bsgr");
    op(b, "k_cat", AP_OP_RESHAPE, AP_LAYOUT_CONCAT, "k_nope.y k_rope_heads.y",
       "k.y:bsgd");
    b->modules = 0;
    attention(b, m, opt, "q_rot.y", "k.y", "v.y", "attn.y:bsne");
    linear(b, "o", "attn.y", "neh", m->o_bias ? "h" : NULL, "o.y:bsh");
}

/* The gate's activation of a gated MLP: SwiGLU's silu, GeGLU's gelu, or
 * --quick-geglu's quick_gelu; the experts' too. */
static int glu_act(const hf_model *m)
{
    return m->quick_geglu ? AP_UNARY_QUICK_GELU : m->geglu ? AP_UNARY_GELU : AP_UNARY_SILU;
}

/* Its op's name in a block: mlp.silu, experts.quick_gelu, ... */
static const char *glu_name(const hf_model *m)
{
    return m->quick_geglu ? "quick_gelu" : m->geglu ? "gelu" : "silu";
}

/* A dense MLP named `name` over the ffn label `f`, writing name.y:bsh. */
static void dense_mlp(bld *b, const hf_model *m, const char *name, const char *x, char f)
{
    char n[64], w[8], bias[8], y[80], in2[160];
    const char *fb = NULL;
    snprintf(bias, sizeof bias, "%c", f);
    if (m->mlp_bias)
        fb = bias;
    if (m->gelu_mlp || m->relu2_mlp) {
        /* Not gated: GPT's fc1 -> gelu, Nemotron's up -> relu2. */
        const char *in = m->gelu_mlp ? "fc1" : "up", *act = m->gelu_mlp ? "gelu" : "relu2";
        snprintf(n, sizeof n, "%s.%s", name, in);
        snprintf(w, sizeof w, "h%c", f);
        snprintf(y, sizeof y, "%s.%s.y:bs%c", name, in, f);
        linear(b, n, x, w, fb, y);
        snprintf(n, sizeof n, "%s.%s", name, act);
        snprintf(in2, sizeof in2, "%s.%s.y", name, in);
        snprintf(y, sizeof y, "%s.act.y:bs%c", name, f);
        op(b, n, AP_OP_UNARY, m->gelu_mlp ? AP_UNARY_GELU : AP_UNARY_RELU2, in2, y);
    } else {
        snprintf(w, sizeof w, "h%c", f);
        snprintf(n, sizeof n, "%s.gate", name);
        snprintf(y, sizeof y, "%s.gate.y:bs%c", name, f);
        linear(b, n, x, w, fb, y);
        snprintf(n, sizeof n, "%s.up", name);
        snprintf(y, sizeof y, "%s.up.y:bs%c", name, f);
        linear(b, n, x, w, fb, y);
        const char *act = glu_name(m);
        snprintf(n, sizeof n, "%s.%s", name, act);
        snprintf(in2, sizeof in2, "%s.gate.y", name);
        snprintf(y, sizeof y, "%s.%s.y:bs%c", name, act, f);
        op(b, n, AP_OP_UNARY, glu_act(m), in2, y);
        snprintf(n, sizeof n, "%s.mul", name);
        snprintf(in2, sizeof in2, "%s.%s.y %s.up.y", name, act, name);
        snprintf(y, sizeof y, "%s.act.y:bs%c", name, f);
        op(b, n, AP_OP_BINARY, AP_BINARY_MUL, in2, y);
    }
    snprintf(n, sizeof n, "%s.%s", name, m->gelu_mlp ? "fc2" : "down");
    snprintf(w, sizeof w, "%ch", f);
    snprintf(in2, sizeof in2, "%s.act.y", name);
    snprintf(y, sizeof y, "%s.y:bsh", name);
    linear(b, n, in2, w, m->mlp_bias ? "h" : NULL, y);
}

static void set_top_k(bld *b, const hf_model *m, int i)
{
    if (i < 0)
        return;
    ap_op *op = &b->g->ops[i];
    op->top_k = (int)m->top_k;
    op->groups = (int)m->groups;
    op->group_topk = (int)m->group_topk;
    if (op->kind != AP_OP_ROUTER)
        return;
    op->route_score = m->route_sigmoid ? AP_ROUTE_SIGMOID : AP_ROUTE_SOFTMAX;
    op->route_norm = m->route_norm;
    op->route_bias = m->route_bias;
    op->route_on_input = m->route_on_input;
    op->route_scale = m->route_scale;
}

/* Routed experts (E experts, c tokens each, ffn m) plus the shared experts,
 * writing mlp.y:bsh. */
static void moe_mlp(bld *b, const hf_model *m, const char *x)
{
    char ins[2 * AP_NAME_LEN];
    const char *routed = m->shared_ffn ? "moe.y:bsh" : "mlp.y:bsh";
    b->modules = AP_MODULE_MOE;
    snprintf(ins, sizeof ins, "%s router.w:hE%s", x, m->router_bias ? " router.b:E" : "");
    set_top_k(b, m, op(b, "router", AP_OP_ROUTER, 0, ins, "router.p:bsE"));
    snprintf(ins, sizeof ins, "%s router.p", x);
    set_top_k(b, m, op(b, "dispatch", AP_OP_DISPATCH, 0, ins, "experts.x:Ech"));
    int eb = m->expert_bias;
    op(b, "experts.gate", AP_OP_MATMUL, 0,
       eb ? "experts.x experts.gate.w:Ehm experts.gate.b:Em" : "experts.x experts.gate.w:Ehm",
       "experts.gate.y:Ecm");
    op(b, "experts.up", AP_OP_MATMUL, 0,
       eb ? "experts.x experts.up.w:Ehm experts.up.b:Em" : "experts.x experts.up.w:Ehm",
       "experts.up.y:Ecm");
    b->modules = AP_MODULE_MOE | AP_MODULE_MOE_ACT;
    const char *act = glu_name(m);
    char name[32], y[48];
    snprintf(name, sizeof name, "experts.%s", act);
    snprintf(y, sizeof y, "experts.%s.y:Ecm", act);
    op(b, name, AP_OP_UNARY, glu_act(m), "experts.gate.y", y);
    snprintf(ins, sizeof ins, "experts.%s.y experts.up.y", act);
    op(b, "experts.mul", AP_OP_BINARY, AP_BINARY_MUL, ins, "experts.act.y:Ecm");
    b->modules = AP_MODULE_MOE;
    op(b, "experts.down", AP_OP_MATMUL, 0,
       eb ? "experts.act.y experts.down.w:Emh experts.down.b:Eh"
          : "experts.act.y experts.down.w:Emh",
       "experts.y:Ech");
    set_top_k(b, m, op(b, "combine", AP_OP_COMBINE, 0, "experts.y router.p", routed));
    if (!m->shared_ffn)
        return;
    b->modules = AP_MODULE_MOE | AP_MODULE_SHARED_EXPERTS;
    dense_mlp(b, m, "shared", x, 'S');
    if (m->shared_gate) {
        /* Qwen2-MoE scales the shared expert by sigmoid(x w), w of [h, 1];
         * the sigmoid (b*s elements) is left out: the format has no kind
         * for it and its cost is negligible. */
        snprintf(ins, sizeof ins, "%s shared_gate.w:h", x);
        op(b, "shared_gate", AP_OP_MATMUL, 0, ins, "shared_gate.y:bs");
        op(b, "shared_scale", AP_OP_BINARY, AP_BINARY_MUL, "shared.y shared_gate.y",
           "shared.g:bsh");
        b->modules = AP_MODULE_MOE;
        op(b, "moe_add", AP_OP_BINARY, AP_BINARY_ADD, "moe.y shared.g", "mlp.y:bsh");
    } else {
        b->modules = AP_MODULE_MOE;
        op(b, "moe_add", AP_OP_BINARY, AP_BINARY_ADD, "moe.y shared.y", "mlp.y:bsh");
    }
}

/* The feed-forward part of block i on x, writing "mlp.y" (dense: "mlp.y"
 * comes from dense_mlp named "mlp"). */
static void feed_forward(bld *b, const hf_model *m, int i, const char *x)
{
    if (m->experts && is_moe_layer(m, i)) {
        moe_mlp(b, m, x);
    } else {
        b->modules = AP_MODULE_MLP;
        dense_mlp(b, m, "mlp", x, 'f');
    }
    b->modules = 0;
}

/* res1.y = block input + x */
static void residual1(bld *b, const char *x)
{
    char ins[2 * AP_NAME_LEN];
    snprintf(ins, sizeof ins, "^ %s", x);
    op(b, "res1", AP_OP_BINARY, AP_BINARY_ADD, ins, "res1.y:bsh");
}

/* The block output: out = res1.y + x */
static void residual2(bld *b, const char *x)
{
    char ins[2 * AP_NAME_LEN];
    snprintf(ins, sizeof ins, "res1.y %s", x);
    op(b, "res2", AP_OP_BINARY, AP_BINARY_ADD, ins, "out:bsh");
}

/* The sublayers of block i in the current scope: attention and
 * feed-forward, each with an optional dropout and a residual add, writing
 * "out". GPT-NeoX's parallel residual computes x + attn(ln1(x)) +
 * mlp(ln2(x)) instead, and Phi's and Cohere's x + attn(ln1(x)) +
 * mlp(ln1(x)) with their one norm; OLMo 2 norms each sublayer's output and
 * not its input, x + norm(attn(x)). */
static void sublayers(bld *b, const hf_model *m, const ap_build_opts *opt, int i)
{
    int post = m->sandwich_norm || m->post_norm;
    int one_norm = m->parallel_residual && m->shared_norm;
    const char *ao = post ? "post_attn_norm.y" : "o.y";
    const char *fo = post ? "post_mlp_norm.y" : "mlp.y";
    const char *a = opt->dropout ? "attn_drop.y" : ao;
    const char *f = opt->dropout ? "mlp_drop.y" : fo;
    b->window = layer_window(m, i);
    b->nope = m->nope && m->nope[i];
    /* Megatron-Core's Transformer Engine layers fuse a norm into the
     * linear layer after it, unless more than one module reads it: MLA's
     * two down projections, a MoE layer's router and experts, the one norm
     * attention and the MLP share. The MLP's fused norm is part of the MLP
     * module. */
    b->modules = m->mla || one_norm ? AP_MODULE_LAYERNORM : 0;
    if (!m->post_norm)
        norm(b, m, "ln1", "^", 'h', "ln1.y:bsh");
    b->modules = 0;
    if (m->mla)
        latent_attention(b, m, opt, "ln1.y");
    else
        self_attention(b, m, opt, m->post_norm ? "^" : "ln1.y");
    b->window = 0;
    b->nope = 0;
    /* Gemma 2 and 3 and OLMo 2 norm each sublayer's output before its
     * residual add; nothing fuses it into a linear layer. */
    b->modules = AP_MODULE_LAYERNORM;
    if (post)
        norm(b, m, "post_attn_norm", "o.y", 'h', "post_attn_norm.y:bsh");
    b->modules = 0;
    if (opt->dropout)
        dropout(b, "attn_drop", ao, "attn_drop.y:bsh");
    if (!m->parallel_residual)
        residual1(b, a);
    b->modules = m->experts && is_moe_layer(m, i) ? AP_MODULE_LAYERNORM : AP_MODULE_MLP;
    if (!m->post_norm && !one_norm)
        norm(b, m, "ln2", m->parallel_residual ? "^" : "res1.y", 'h', "ln2.y:bsh");
    feed_forward(b, m, i, m->post_norm ? "res1.y" : one_norm ? "ln1.y" : "ln2.y");
    b->modules = AP_MODULE_LAYERNORM;
    if (post)
        norm(b, m, "post_mlp_norm", "mlp.y", 'h', "post_mlp_norm.y:bsh");
    b->modules = 0;
    if (opt->dropout)
        dropout(b, "mlp_drop", fo, "mlp_drop.y:bsh");
    if (m->parallel_residual)
        residual1(b, a);
    residual2(b, f);
}

static void block(bld *b, const hf_model *m, const ap_build_opts *opt, int i)
{
    b->layer = i;
    snprintf(b->scope, sizeof b->scope, "l%d.", i);
    sublayers(b, m, opt, i);
    snprintf(b->in, sizeof b->in, "l%d.out", i);
    b->layer = -1;
    b->scope[0] = 0;
}

/* The angle table: per position, one fp32 angle per rotated element (as
 * Megatron-Core's rotary_pos_emb, which its fused kernel reads); its last
 * label is the rotated width: the head dim when all of it is rotated. */
static const char *rotary_shape(const hf_model *m)
{
    return m->rot == m->head_dim ? "sd" : "sr";
}

static void embedding(bld *b, const hf_model *m)
{
    tensor(b, "tokens", "bs", AP_INT32, AP_TENSOR_INPUT);
    tensor(b, "labels", "bs", AP_INT32, AP_TENSOR_INPUT);
    op(b, "embed", AP_OP_EMBEDDING, 0, "tokens wte:vh", "embed.y:bsh");
    snprintf(b->in, sizeof b->in, "embed.y");
    if (m->embed_scale) {
        op(b, "embed_scale", AP_OP_UNARY, AP_UNARY_SCALE, "embed.y", "embed_scale.y:bsh");
        snprintf(b->in, sizeof b->in, "embed_scale.y");
    }
    if (m->positions) {
        tensor(b, "positions", "bs", AP_INT32, AP_TENSOR_INPUT);
        op(b, "pos_embed", AP_OP_EMBEDDING, 0, "positions wpe:ph", "pos_embed.y:bsh");
        op(b, "embed_add", AP_OP_BINARY, AP_BINARY_ADD, "embed.y pos_embed.y",
           "embed_add.y:bsh");
        snprintf(b->in, sizeof b->in, "embed_add.y");
    }
    if (m->mla)
        tensor(b, "heads.ones", "g", b->g->dtype, AP_TENSOR_INPUT);
    if (m->rot)
        tensor(b, "rope.freqs", rotary_shape(m), AP_FP32, AP_TENSOR_INPUT);
}

/* The output layer and the loss; Granite's logits_scaling divides the
 * logits and Gemma 2 caps them, each an elementwise pass over the logits
 * before the loss, as HF runs them. */
static void head(bld *b, const hf_model *m)
{
    char ins[64];
    norm(b, m, "final_norm", "^", 'h', "final_norm.y:bsh");
    snprintf(ins, sizeof ins, "final_norm.y %s%s", m->tie ? "wte" : "lm_head.w:vh",
             m->head_bias ? " lm_head.b:v" : "");
    int after = m->logit_scale || m->logit_softcap;
    op(b, "lm_head", AP_OP_MATMUL, 0, ins, after ? "lm_head.y:bsv" : "logits:bsv");
    if (m->logit_scale)
        op(b, "logit_scale", AP_OP_UNARY, AP_UNARY_SCALE, "lm_head.y",
           m->logit_softcap ? "logit_scale.y:bsv" : "logits:bsv");
    if (m->logit_softcap)
        op(b, "softcap", AP_OP_UNARY, AP_UNARY_SOFTCAP,
           m->logit_scale ? "logit_scale.y" : "lm_head.y", "logits:bsv");
    op(b, "loss", AP_OP_LOSS, 0, "logits labels", "loss:");
}

/* Multi-token-prediction module k, as Megatron-Core's
 * MultiTokenPredictionLayer runs it after the head: the next token's
 * embedding (the input table, shared) and the hidden state each normed,
 * projected together from 2h back to h (eh_proj over their concatenation),
 * one transformer layer like the model's last, its own final norm, the
 * output layer (shared) and a loss. Its ops are outside the layers, so a
 * plan runs them with the head; the hidden state is the decoder's output
 * for the first module and the previous module's after. */
static void mtp_module(bld *b, const hf_model *m, const ap_build_opts *opt, int k)
{
    char ins[2 * AP_NAME_LEN + 2];
    snprintf(b->scope, sizeof b->scope, "mtp%d.", k);
    op(b, "embed", AP_OP_EMBEDDING, 0, "=tokens =wte", "embed.y:bsh");
    norm(b, m, "enorm", "embed.y", 'h', "enorm.y:bsh");
    norm(b, m, "hnorm", "^", 'h', "hnorm.y:bsh");
    op(b, "cat", AP_OP_RESHAPE, AP_LAYOUT_CONCAT, "enorm.y hnorm.y", "cat.y:bsH");
    linear(b, "eh_proj", "cat.y", "Hh", NULL, "eh_proj.y:bsh");
    snprintf(b->in, sizeof b->in, "mtp%d.eh_proj.y", k);
    sublayers(b, m, opt, (int)m->layers - 1);
    snprintf(b->in, sizeof b->in, "mtp%d.out", k);
    norm(b, m, "final_norm", "^", 'h', "final_norm.y:bsh");
    snprintf(ins, sizeof ins, "final_norm.y %s", m->tie ? "=wte" : "=lm_head.w");
    op(b, "lm_head", AP_OP_MATMUL, 0, ins, "logits:bsv");
    op(b, "loss", AP_OP_LOSS, 0, "logits =labels", "loss:");
    b->scope[0] = 0;
}

static void dim(bld *b, char label, const char *name, ap_dim_kind kind, int64_t size)
{
    if (!b->status && ap_graph_add_dim(b->g, label, name, kind, size, b->err) < 0)
        build_fail(b);
}

static void dims(bld *b, const hf_model *m, int64_t batch, int64_t seq, int mtp)
{
    dim(b, 'b', "batch", AP_DIM_BATCH, batch);
    dim(b, 's', "seq", AP_DIM_SEQ, seq);
    dim(b, 'h', "hidden", AP_DIM_HIDDEN, m->hidden);
    dim(b, 'n', "heads", AP_DIM_HEADS, m->heads);
    dim(b, 'g', "kv_heads", AP_DIM_KV_HEADS, m->kv_heads);
    dim(b, 'd', "head_dim", AP_DIM_HEAD_DIM, m->head_dim);
    if (m->mla) {
        dim(b, 'e', "v_head_dim", AP_DIM_HEAD_DIM, m->v_head_dim);
        dim(b, 'D', "qk_nope_head_dim", AP_DIM_HEAD_DIM, m->qk_nope);
        dim(b, 'r', "qk_rope_head_dim", AP_DIM_OTHER, m->qk_rope);
        dim(b, 'k', "kv_lora_rank", AP_DIM_OTHER, m->kv_lora);
        if (m->q_lora)
            dim(b, 'q', "q_lora_rank", AP_DIM_OTHER, m->q_lora);
    }
    dim(b, 'v', "vocab", AP_DIM_VOCAB, m->vocab);
    if (mtp)
        dim(b, 'H', "mtp_concat", AP_DIM_OTHER, 2 * m->hidden);
    if (m->positions)
        dim(b, 'p', "positions", AP_DIM_OTHER, m->positions);
    if (m->rot && m->rot != m->head_dim && !m->mla)
        dim(b, 'r', "rotary_dim", AP_DIM_OTHER, m->rot);
    if (any_dense_layer(m))
        dim(b, 'f', "ffn", AP_DIM_FFN, m->ffn);
    if (any_moe_layer(m)) {
        int64_t tokens = batch * seq * m->top_k;
        dim(b, 'E', "experts", AP_DIM_EXPERTS, m->experts);
        dim(b, 'c', "capacity", AP_DIM_CAPACITY, (tokens + m->experts - 1) / m->experts);
        dim(b, 'm', "moe_ffn", AP_DIM_FFN, m->moe_ffn);
        if (m->shared_ffn)
            dim(b, 'S', "shared_ffn", AP_DIM_FFN, m->shared_ffn);
    }
}

/* Whether the window is on every layer whatever layer_types says: the
 * models that build one attention mask from sliding_window for all layers
 * (MistralModel's `create_sliding_window_causal_mask` wherever
 * sliding_window is set; MistralConfig only warns of a layer_types), and
 * whose attention passes the same sliding_window on every layer: Mistral,
 * Mixtral, Phi-3, StarCoder2, and Qwen3-MoE (MixtralModel's mask;
 * Qwen3MoeAttention drops Qwen3's layer_type, and Qwen3MoeConfig has
 * neither layer_types nor max_window_layers). */
static int window_on_every_layer(family f)
{
    return f == FAM_MISTRAL || f == FAM_MIXTRAL || f == FAM_PHI3 || f == FAM_STARCODER2 ||
           f == FAM_QWEN3_MOE;
}

/* Which layers have the window: "layer_types" where the config lists them
 * (HF's configs since 4.53), else the rule of the family's config class:
 * Qwen2's, Qwen2-MoE's and Qwen3's layers from max_window_layers on, Gemma
 * 2's and GPT-OSS's every other layer from the first, Gemma 3's and
 * Cohere2's all but every sliding_window_pattern-th (6 and 4). */
static void read_window_layers(hf_cfg *c, hf_model *m)
{
    const cJSON *types = cfg_item(c, "layer_types"), *e;
    family f = m->fam;
    int64_t i = 0, first = 0, pattern = 0;
    if (types) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != m->layers) {
            cfg_fail(c, "\"layer_types\" must be an array of %lld strings, one per layer",
                     (long long)m->layers);
            return;
        }
        cJSON_ArrayForEach(e, types) {
            int swa = cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
            if (!swa && !(cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention"))) {
                cfg_fail(c, "\"layer_types\"[%lld] must be \"sliding_attention\" or "
                         "\"full_attention\" (other attention is not built)", (long long)i);
                return;
            }
            m->swa[i++] = (unsigned char)swa;
        }
        return;
    }
    if (f == FAM_QWEN2 || f == FAM_QWEN2_MOE || f == FAM_QWEN3)
        first = cfg_int(c, "max_window_layers", 0, 28, 0, MAX_LAYERS);
    if (f == FAM_DOTS1)
        first = cfg_int(c, "max_window_layers", 0, 62, 0, MAX_LAYERS);
    if (f == FAM_GEMMA3)
        pattern = cfg_int(c, "sliding_window_pattern", 0, 6, 1, MAX_LAYERS);
    if (f == FAM_COHERE2)
        pattern = cfg_int(c, "sliding_window_pattern", 0, 4, 1, MAX_LAYERS);
    if (f == FAM_OLMO3)
        pattern = 4; /* Olmo3Config's rule: full attention on every fourth layer */
    /* SmolLM3Config's rule: the window on the NoPE layers. */
    for (i = 0; i < m->layers; i++)
        m->swa[i] = (unsigned char)(f == FAM_GEMMA2 || f == FAM_GPT_OSS ? i % 2 == 0
                                    : f == FAM_SMOLLM3 ? m->nope[i]
                                    : pattern      ? (i + 1) % pattern != 0
                                                   : i >= first);
}

/* Sliding-window attention, where the family has it: sliding_window keys
 * per query (HF masks keys more than sliding_window - 1 behind the query),
 * for Qwen and SmolLM3 only under use_sliding_window. Mistral, Gemma 2 and
 * 3, OLMo 3, dots.llm1 and Cohere2 default to the config classes' 4096,
 * GPT-OSS to 128; a null sliding_window is none, as the attention modules
 * read it. */
static void read_window(hf_cfg *c, hf_model *m)
{
    family f = m->fam;
    /* Qwen's and SmolLM3's attention reads the window under use_sliding_window. */
    int gated = f == FAM_QWEN2 || f == FAM_QWEN2_MOE || f == FAM_QWEN3 || f == FAM_QWEN3_MOE ||
                f == FAM_SMOLLM3;
    if (c->bad || !(gated || f == FAM_MISTRAL || f == FAM_MIXTRAL || f == FAM_PHI3 ||
                    f == FAM_GEMMA2 || f == FAM_GEMMA3 || f == FAM_GPT_OSS || f == FAM_OLMO3 ||
                    f == FAM_STARCODER2 || f == FAM_DOTS1 || f == FAM_COHERE2))
        return;
    /* Without use_sliding_window their config classes drop the window
     * (Qwen2Config makes it None, Qwen2MoeConfig 0, which transformers 5
     * then writes out), so it is not read at all. */
    if (gated && !cfg_bool(c, "use_sliding_window", 0))
        return;
    int null = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(c->root, "sliding_window"));
    int64_t def = null ? 0
                  : f == FAM_GEMMA2 || f == FAM_GEMMA3 || f == FAM_OLMO3 || f == FAM_DOTS1 ||
                    f == FAM_MISTRAL || f == FAM_COHERE2 ? 4096
                  : f == FAM_GPT_OSS ? 128 : 0;
    int64_t w = cfg_int(c, "sliding_window", 0, def, 1, INT64_C(1) << 40);
    if (c->bad || !w)
        return;
    m->window = w;
    if (window_on_every_layer(f))
        return;
    if (!(m->swa = layer_flags(c, m)))
        return;
    read_window_layers(c, m);
}

/* The layers that take no rotary embedding (NoPE): no_rope_layers (1
 * where a layer rotates), else the config class's rule, NoPE on every
 * no_rope_layer_interval-th (4). Llama 4's list is one entry a layer;
 * SmolLM3's, `longer`, at least one (SmolLM3Attention reads entry i for
 * layer i and nothing after the last layer's). */
static void read_nope(hf_cfg *c, hf_model *m, int longer)
{
    const cJSON *v = cfg_item(c, "no_rope_layers"), *e;
    int64_t i = 0, every = cfg_int(c, "no_rope_layer_interval", 0, 4, 1, MAX_LAYERS);
    if (c->bad)
        return;
    if (!(m->nope = layer_flags(c, m)))
        return;
    /* Llama4TextConfig reads an empty list as none given ("no_rope_layers
     * == [] is invalid as we cannot have 0 layers"), as unsloth's
     * published Llama-4-Scout config states it; SmolLM3Config keeps it,
     * and SmolLM3Attention then finds no entry for its layer. */
    if (!v || (!longer && cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0)) {
        for (i = 0; i < m->layers; i++)
            m->nope[i] = (i + 1) % every == 0;
        return;
    }
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n < m->layers || (!longer && n != m->layers)) {
        cfg_fail(c, "\"no_rope_layers\" must be an array of %s%lld 0s and 1s, one per layer",
                 longer ? "at least " : "", (long long)m->layers);
        return;
    }
    cJSON_ArrayForEach(e, v) {
        if (i == m->layers)
            break;
        if (!cJSON_IsNumber(e) || (e->valuedouble != 0 && e->valuedouble != 1)) {
            cfg_fail(c, "\"no_rope_layers\"[%lld] must be 0 (no rotary) or 1", (long long)i);
            return;
        }
        m->nope[i++] = e->valuedouble == 0;
    }
}

/* Llama 4's rotary layers norm q and k without a weight and attend within
 * chunks; its NoPE layers are read_nope's. */
static void read_llama4(hf_cfg *c, hf_model *m)
{
    m->qk_l2 = cfg_bool(c, "use_qk_norm", 1);
    m->chunk = cfg_int(c, "attention_chunk_size", 0, 8192, 1, INT64_C(1) << 40);
    read_nope(c, m, 0);
}

/* Gemma: a GeGLU MLP (a GELU, as check_activation holds the config to),
 * embeddings scaled by sqrt(hidden); Gemma 2 and 3 norm each sublayer's
 * output too, and Gemma 2 caps its logits. */
static void read_gemma(hf_cfg *c, hf_model *m)
{
    const cJSON *cap = cfg_item(c, "final_logit_softcapping");
    if (c->bad)
        return;
    if (cap && !cJSON_IsNumber(cap))
        cfg_fail(c, "\"final_logit_softcapping\" must be a number, not %s",
                 json_type_name(cap));
    m->geglu = m->embed_scale = 1;
    m->sandwich_norm = m->fam != FAM_GEMMA;
    m->logit_softcap = cap && cJSON_IsNumber(cap) && cap->valuedouble > 0;
}

/* Granite 3 (GraniteForCausalLM) is Llama's block with four muP
 * multipliers. embedding_multiplier scales the embeddings (inputs_embeds *
 * embedding_multiplier) and logits_scaling divides the logits, each an
 * elementwise pass HF runs on its own, built as Gemma's embedding scale
 * and as a scale on the logits; residual_multiplier scales each
 * sublayer's output inside its residual add (torch.add's alpha, as
 * fused trainers run it), and attention_multiplier is the softmax scale
 * in place of 1/sqrt(head_dim): neither moves a byte more. Each must be a
 * number above 0 (GraniteConfig's 1.0 where left out). */
static void read_granite(hf_cfg *c, hf_model *m)
{
    static const char *const keys[] = {"embedding_multiplier", "logits_scaling",
                                       "residual_multiplier", "attention_multiplier"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cfg_factor(c, keys[i], 1.0);
    m->embed_scale = m->logit_scale = 1;
}

/* GPT-OSS's experts (GptOssExperts in HF's modeling_gpt_oss.py): a bias
 * on every projection, gate clamped above at the limit and up clamped to
 * [-limit, limit], then gate * sigmoid(1.702 gate) * (up + 1). That is
 * Megatron-Core's quick GeGLU only with --glu-linear-offset 1 and
 * --activation-func-clamp-value at the limit: its glu computes
 * quick_gelu(x_glu) * (x_linear + glu_linear_offset), clamping the two
 * halves so only when the clamp is given (TEGroupedMLP.bias_act_func), and
 * both default to none (0.0 and None in arguments.py at 000c4ac2). The
 * limit is the config's swiglu_limit, GptOssConfig's 7.0 where left out
 * (the modeling file hard-codes 7.0 too; its MXFP4 kernels read the
 * field). Neither moves a byte, so the price is quick GeGLU's. */
static void read_gpt_oss(hf_cfg *c, hf_model *m)
{
    m->quick_geglu = m->expert_bias = m->router_bias = m->sinks = 1;
    m->glu_offset = 1;
    m->glu_clamp = cfg_factor(c, "swiglu_limit", 7.0);
}

/* Phi-1.5 and Phi-2 (PhiForCausalLM): one LayerNorm with bias feeds
 * attention and the MLP side by side (PhiDecoderLayer's attn_outputs +
 * feed_forward_hidden_states + residual), the MLP is CLIP's fc1 -> gelu ->
 * fc2, and qk_layernorm puts a LayerNorm with bias on each head of q and
 * k. hidden_act names the GELU (PhiConfig's "gelu_new"; tanh or exact,
 * the same cost). */
static void read_phi(hf_cfg *c, hf_model *m)
{
    check_choice(c, "hidden_act", "phi", "gelu", 1,
                 "a GELU (\"gelu_new\", \"gelu_pytorch_tanh\", \"gelu\")");
    m->qk_norm = cfg_bool(c, "qk_layernorm", 0);
    m->layernorm = m->gelu_mlp = 1;
    m->parallel_residual = m->shared_norm = 1;
}

/* Cohere's Command R (CohereForCausalLM) and Command R7B (Cohere2): one
 * LayerNorm with a weight and no bias (CohereLayerNorm) feeds attention
 * and the SwiGLU MLP side by side, and logit_scale multiplies the logits,
 * a pass of its own before the loss (logits * self.logit_scale), built as
 * Granite's; it must be a number above 0 (CohereConfig's 0.0625 where
 * left out). CohereAttention norms each head of q and k under use_qk_norm
 * with a CohereLayerNorm holding a weight per head, built here as one
 * per-head norm whose weight is one head's (the format's weight names the
 * labels it normalises over). Cohere2Attention has no such norms. */
static void read_cohere(hf_cfg *c, hf_model *m)
{
    cfg_factor(c, "logit_scale", 0.0625);
    if (m->fam == FAM_COHERE)
        m->qk_norm = cfg_bool(c, "use_qk_norm", 0);
    else
        check_flag(c, "use_qk_norm", "cohere2", 0,
                   "no query and key norms (Cohere2Attention has none)");
    m->layernorm = m->norm_no_bias = 1;
    m->parallel_residual = m->shared_norm = 1;
    m->logit_scale = 1;
}

/* Cohere2Attention rotates q and k only on its sliding-window layers
 * (apply_rotary_pos_emb under `self.sliding_window is not None`): the
 * full-attention layers, and every layer where sliding_window is null,
 * take no rotary embedding. Read after read_window. */
static void read_cohere2_rotary(hf_cfg *c, hf_model *m)
{
    int64_t i, rotating = 0;
    if (c->bad)
        return;
    if (!(m->nope = layer_flags(c, m)))
        return;
    for (i = 0; i < m->layers; i++) {
        m->nope[i] = layer_window(m, i) == 0;
        rotating += !m->nope[i];
    }
    if (!rotating)
        m->rot = 0;
}

/* Nemotron is a Llama-like config with LayerNorm1P (with bias) and a
 * squared-ReLU MLP that is not gated, which hidden_act names in HF's
 * ACT2FN. */
static void read_nemotron(hf_cfg *c, hf_model *m)
{
    check_choice(c, "hidden_act", "nemotron", "relu2", 0, "\"relu2\" (squared ReLU)");
    m->layernorm = m->layernorm1p = m->relu2_mlp = 1;
}

/* StarCoder2 is Llama's attention with LayerNorm (with bias) and GPT's
 * MLP, c_fc -> gelu -> c_proj; hidden_act names that GELU (tanh or exact,
 * the same cost). */
static void read_starcoder2(hf_cfg *c, hf_model *m)
{
    check_choice(c, "hidden_act", "starcoder2", "gelu", 1,
                 "a GELU (\"gelu_pytorch_tanh\", \"gelu\")");
    m->layernorm = m->gelu_mlp = 1;
}

/* MiniMax-M2 (HF's MiniMaxM2ForCausalLM) builds one model whatever the
 * config's MiniMax fields say: full attention on every layer, the query
 * and key norms across all heads, a sigmoid router, SwiGLU experts and no
 * shared expert. A config naming another describes a model HF does not
 * build, so it is refused; its MTP fields (use_mtp, num_mtp_modules,
 * mtp_transformer_layers) build nothing, as DeepSeek's do not. */
static void read_minimax_m2(hf_cfg *c, hf_model *m)
{
    const cJSON *types = cfg_item(c, "attn_type_list"), *e;
    int64_t i = 0;
    check_choice(c, "hidden_act", "minimax_m2", "silu", 0, "\"silu\" (SwiGLU experts)");
    check_choice(c, "scoring_func", "minimax_m2", "sigmoid", 0,
                 "\"sigmoid\" (MiniMaxM2TopKRouter's)");
    check_choice(c, "qk_norm_type", "minimax_m2", "per_layer", 0,
                 "\"per_layer\" (one RMSNorm across all heads of q and of k)");
    check_flag(c, "use_qk_norm", "minimax_m2", 1,
               "the query and key norms (MiniMaxM2Attention always has them)");
    int64_t shared = cfg_int(c, "shared_intermediate_size", 0, 0, 0, MAX_FFN);
    if (!c->bad && shared > 0)
        cfg_fail(c, "\"shared_intermediate_size\" is %lld; minimax_m2 is built without a "
                 "shared expert (MiniMaxM2SparseMoeBlock has none)", (long long)shared);
    if (c->bad || !types)
        return;
    /* MiniMax-Text-01's list: 0 lightning (linear) attention, 1 softmax
     * attention; MiniMax-M2's has 1 on every layer, all HF runs. */
    if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != m->layers) {
        cfg_fail(c, "\"attn_type_list\" must be an array of %lld 1s, one per layer",
                 (long long)m->layers);
        return;
    }
    cJSON_ArrayForEach(e, types) {
        if (!cJSON_IsNumber(e) || e->valuedouble != 1) {
            if (cJSON_IsNumber(e))
                cfg_fail(c, "\"attn_type_list\"[%lld] is %g; minimax_m2 is built with full "
                         "attention (1) on every layer, as MiniMaxM2Attention runs it",
                         (long long)i, e->valuedouble);
            else
                cfg_fail(c, "\"attn_type_list\"[%lld] must be 1 (full attention), not %s",
                         (long long)i, json_type_name(e));
            return;
        }
        i++;
    }
}

static double rope_number(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* The rotary scaling: none ("default", or none given), Llama 3.1's as
 * Megatron-LM's --use-rope-scaling runs it (rope_type "llama3" with its
 * low and high frequency factors 1 and 4 over 8,192 original positions,
 * which Megatron-Core fixes), or another (YaRN, linear, dynamic, llama3
 * with other constants), which the exports name but cannot state. */
static void read_rope_scaling(hf_cfg *c, hf_model *m)
{
    const cJSON *rp = rope_object(c, "rope_parameters");
    const cJSON *rs = rope_object(c, "rope_scaling");
    const cJSON *o = rs ? rs : rp;
    const cJSON *t = o ? cJSON_GetObjectItemCaseSensitive(o, "rope_type") : NULL;
    if (!cJSON_IsString(t) && o)
        t = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsString(t) || !strcmp(t->valuestring, "default"))
        return;
    double f = rope_number(o, "factor");
    if (!strcmp(t->valuestring, "llama3") && f > 0 && f <= 1e6 &&
        rope_number(o, "low_freq_factor") == 1 && rope_number(o, "high_freq_factor") == 4 &&
        rope_number(o, "original_max_position_embeddings") == 8192) {
        m->rope_scaling = AP_ROPE_SCALING_LLAMA3;
        m->rope_factor = f;
    } else {
        m->rope_scaling = AP_ROPE_SCALING_OTHER;
    }
}

/* The numbers the exports state beside the structure: rope_theta (top
 * level, or rope_parameters' in transformers 5) and the norms' epsilon
 * under the names the families use; 0 where the config gives none, since
 * the config classes' defaults differ and the export then says so. */
static void read_numerics(hf_cfg *c, hf_model *m)
{
    static const char *const eps_keys[] = {"rms_norm_eps", "layer_norm_eps",
                                           "layer_norm_epsilon", "norm_eps", "norm_epsilon"};
    double base = rope_number(rope_object(c, "rope_parameters"), "rope_theta");
    const cJSON *t = cfg_item(c, "rope_theta");
    if (cJSON_IsNumber(t))
        base = t->valuedouble;
    /* GPT-NeoX's configs before transformers 5 (Pythia's, GPT-NeoX-20B's)
     * name it rotary_emb_base, which GPTNeoXConfig takes where
     * rope_parameters gives no rope_theta. */
    t = cfg_item(c, "rotary_emb_base");
    if (m->fam == FAM_NEOX && !(base > 0) && cJSON_IsNumber(t))
        base = t->valuedouble;
    m->rope_base = base > 0 && base <= 1e12 ? base : 0;
    for (size_t i = 0; i < sizeof eps_keys / sizeof eps_keys[0] && !m->norm_eps; i++) {
        const cJSON *v = cfg_item(c, eps_keys[i]);
        if (cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1)
            m->norm_eps = v->valuedouble;
    }
    read_rope_scaling(c, m);
}

/* The MLPs' activation. HF's modeling files take it from the config
 * (ACT2FN[hidden_act]; GPT-2's activation_function, Gemma 2's and 3's
 * hidden_activation), and each family is built with one: the gated
 * families' (Llama's and its descendants', their experts' and shared
 * experts' too) SwiGLU, GPT-2's, GPT-NeoX's and Gemma's GELU, whose tanh
 * and exact forms cost the same. A config naming another describes an MLP
 * whose cost is not the one built, so it is refused. Gemma 1 reads
 * hidden_act and Gemma 2 and 3 hidden_activation; a config may state both,
 * and both must then be a GELU. Nemotron's, StarCoder2's, MiniMax-M2's and
 * Phi's are checked with the rest of their fields; GPT-OSS's experts hard-code
 * their clamped quick GeGLU and read no activation (GptOssExperts), and it
 * has no other MLP. */
static void check_activation(hf_cfg *c, const hf_model *m)
{
    static const char *const gelu = "a GELU (\"gelu_pytorch_tanh\", \"gelu_new\", \"gelu\")";
    const char *fam = family_names[m->fam];
    switch (m->fam) {
    case FAM_GPT2:
        check_choice(c, "activation_function", fam, "gelu", 1, gelu);
        break;
    case FAM_NEOX:
        check_choice(c, "hidden_act", fam, "gelu", 1, gelu);
        break;
    case FAM_GEMMA:
    case FAM_GEMMA2:
    case FAM_GEMMA3:
        check_choice(c, "hidden_act", fam, "gelu", 1, gelu);
        check_choice(c, "hidden_activation", fam, "gelu", 1, gelu);
        break;
    case FAM_NEMOTRON:
    case FAM_STARCODER2:
    case FAM_MINIMAX_M2:
    case FAM_GPT_OSS:
    case FAM_PHI:
        break;
    default:
        check_choice(c, "hidden_act", fam, "silu", 0, "\"silu\" (SwiGLU)");
        break;
    }
}

static int read_model(hf_cfg *c, hf_model *m)
{
    if (read_family(c, &m->fam) < 0)
        return AP_EINPUT;
    if (m->fam == FAM_GPT2)
        read_gpt2(c, m);
    else if (m->fam == FAM_NEOX)
        read_neox(c, m);
    else
        read_llama_like(c, m);
    if (m->fam != FAM_GPT2 && m->fam != FAM_NEOX)
        m->layernorm = m->gelu_mlp = 0;
    if (m->fam == FAM_STARCODER2)
        read_starcoder2(c, m);
    /* OLMo 1's OlmoLayerNorm: F.layer_norm with neither weight nor bias. */
    if (m->fam == FAM_OLMO)
        m->layernorm = m->norm_free = 1;
    if (m->fam == FAM_NEMOTRON)
        read_nemotron(c, m);
    if (m->fam == FAM_PHI)
        read_phi(c, m);
    if (m->fam == FAM_COHERE || m->fam == FAM_COHERE2)
        read_cohere(c, m);
    check_activation(c, m);
    if (m->fam == FAM_MINIMAX_M2)
        read_minimax_m2(c, m);
    if (is_gemma(m->fam))
        read_gemma(c, m);
    if (m->fam == FAM_GRANITE)
        read_granite(c, m);
    /* GLM-4-0414's Glm4DecoderLayer norms each sublayer's output too
     * (post_self_attn_layernorm, post_mlp_layernorm), Gemma 2's sandwich. */
    if (m->fam == FAM_GLM4)
        m->sandwich_norm = 1;
    if (m->fam == FAM_GPT_OSS)
        read_gpt_oss(c, m);
    if (m->fam == FAM_LLAMA4)
        read_llama4(c, m);
    /* SmolLM3 leaves out the rotary embedding on its NoPE layers, as Llama
     * 4 does, with neither its q and k norms nor its chunks. */
    if (m->fam == FAM_SMOLLM3)
        read_nope(c, m, 1);
    read_window(c, m);
    if (m->fam == FAM_COHERE2)
        read_cohere2_rotary(c, m);
    read_numerics(c, m);
    return c->bad ? AP_EINPUT : AP_OK;
}

/* The sequence length: the caller's, else the config's context capped at
 * DEFAULT_SEQ_CAP, because planning a 128k-token step by default would
 * describe long-context extension, not pre-training. */
static int pick_seq(hf_cfg *c, const hf_model *m, const ap_build_opts *opt, int64_t *seq)
{
    if (opt->seq > 0) {
        *seq = opt->seq;
    } else if (m->max_pos > 0) {
        *seq = m->max_pos < DEFAULT_SEQ_CAP ? m->max_pos : DEFAULT_SEQ_CAP;
    } else {
        cfg_fail(c, "\"max_position_embeddings\" is missing (or pass a sequence length)");
        return AP_EINPUT;
    }
    if (*seq > MAX_SEQ) {
        cfg_fail(c, "sequence length %lld is above the limit %d", (long long)*seq, MAX_SEQ);
        return AP_EINPUT;
    }
    if (m->positions && *seq > m->positions) {
        cfg_fail(c, "sequence length %lld exceeds \"n_positions\" (%lld)",
                 (long long)*seq, (long long)m->positions);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* g's source is `source` and its name the file name in it, a control
 * character there made '?': the name goes into reports and launch
 * scripts, where a newline in a file name would start a line of its own
 * (the project format refuses one in a name outright). */
static void name_graph(ap_graph *g, const char *source)
{
    const char *base = strrchr(source, '/');
    snprintf(g->name, sizeof g->name, "%s", base ? base + 1 : source);
    ap_mask_control_chars(g->name);
    snprintf(g->source, sizeof g->source, "%s", source);
}

static int build(const hf_model *m, const ap_build_opts *opt, const char *source,
                 int64_t batch, int64_t seq, ap_graph **out, char *err)
{
    bld b = {0};
    int64_t i;
    int rc;
    b.g = ap_graph_new("");
    if (!b.g) {
        snprintf(err, AP_ERR_LEN, "%s: out of memory", source);
        return AP_EINTERNAL;
    }
    name_graph(b.g, source);
    b.g->dtype = m->fp16 ? AP_FP16 : AP_BF16;
    b.err = err;
    b.layer = -1;
    dims(&b, m, batch, seq, opt->mtp_layers);
    embedding(&b, m);
    for (i = 0; i < m->layers && !b.status; i++)
        block(&b, m, opt, (int)i);
    head(&b, m);
    for (i = 0; i < opt->mtp_layers && !b.status; i++)
        mtp_module(&b, m, opt, (int)i);
    b.g->mtp_layers = opt->mtp_layers;
    rc = b.status ? b.status : ap_graph_finalize(b.g, err);
    if (rc != AP_OK) {
        ap_graph_free(b.g);
        return rc;
    }
    *out = b.g;
    return AP_OK;
}

/* The build options (NULL: the defaults) checked against the model (the
 * sequence length, the batch, the MTP modules), then the build. */
static int build_checked(hf_cfg *c, const hf_model *m, const ap_build_opts *opt,
                         ap_graph **out)
{
    ap_build_opts defaults;
    if (!opt) {
        ap_build_opts_default(&defaults);
        opt = &defaults;
    }
    int64_t seq = 0, batch = opt->batch > 0 ? opt->batch : 1;
    int rc = pick_seq(c, m, opt, &seq);
    if (rc == AP_OK && batch > MAX_BATCH) {
        cfg_fail(c, "batch size %lld is above the limit %d", (long long)batch, MAX_BATCH);
        rc = AP_EINPUT;
    }
    if (rc == AP_OK && (opt->mtp_layers < 0 || opt->mtp_layers > AP_MAX_MTP)) {
        cfg_fail(c, "%d multi-token-prediction modules asked for; 0 to %d are built",
                 opt->mtp_layers, AP_MAX_MTP);
        rc = AP_EINPUT;
    }
    if (rc == AP_OK)
        rc = build(m, opt, c->src, batch, seq, out, c->err);
    if (rc == AP_OK) {
        (*out)->built = 1;
        (*out)->rope_base = m->rope_base;
        (*out)->norm_eps = m->norm_eps;
        (*out)->rope_scaling = m->rope_scaling;
        (*out)->rope_scaling_factor = m->rope_factor;
        (*out)->glu_offset = m->glu_offset;
        (*out)->glu_clamp = m->glu_clamp;
    }
    if (rc == AP_OK && (opt->bf16_first || opt->bf16_last) &&
        (rc = ap_graph_keep_bf16(*out, opt->bf16_first, opt->bf16_last, c->err))) {
        ap_graph_free(*out);
        *out = NULL;
    }
    return rc;
}

/* The heads transformers puts on a decoder in place of the language-model
 * head: the class-name suffix `architectures` names it by, and what it is. */
static const struct {
    const char *suffix, *head;
} task_heads[] = {
    {"ForSequenceClassification", "a sequence-classification head (num_labels scores "
                                  "from the last token)"},
    {"ForTokenClassification", "a token-classification head (num_labels scores a token)"},
    {"ForQuestionAnswering", "a question-answering head (a start and an end score a token)"},
};

/* A config whose `architectures` names a class with another head (a
 * fine-tuned Qwen2ForSequenceClassification's, with num_labels outputs in
 * place of lm_head and another loss) describes a model autopar does not
 * build: the graph and the planner's prices are those of causal-LM
 * training, the *ForCausalLM class. It is refused rather than built with
 * the wrong head; a vision wrapper's names are its own. */
static void check_architectures(hf_cfg *c)
{
    const cJSON *a = cfg_item(c, "architectures"), *e;
    if (!cJSON_IsArray(a))
        return;
    cJSON_ArrayForEach(e, a) {
        size_t n = cJSON_IsString(e) ? strlen(e->valuestring) : 0;
        for (size_t k = 0; k < sizeof task_heads / sizeof task_heads[0] && !c->bad; k++) {
            size_t m = strlen(task_heads[k].suffix);
            if (n < m || strcmp(e->valuestring + n - m, task_heads[k].suffix))
                continue;
            cfg_fail(c, "\"architectures\" names \"%.80s\", %s in place of the "
                     "language-model head; autopar builds and prices causal-LM training "
                     "only (%.*sForCausalLM)", e->valuestring, task_heads[k].head,
                     (int)(n - m > 80 ? 80 : n - m), e->valuestring);
        }
    }
}

/* Vision-language configs whose language model is one of the families:
 * the wrapper's model_type, its text_config's, the family built, and the
 * model's name for messages. */
static const struct {
    const char *type, *text;
    family fam;
    const char *name;
} wrappers[] = {
    {"gemma3", "gemma3_text", FAM_GEMMA3, "Gemma 3"},
    {"llama4", "llama4_text", FAM_LLAMA4, "Llama 4"},
    {"mistral3", "mistral", FAM_MISTRAL, "Mistral 3"},
    {"kimi_k25", "kimi_k2", FAM_DEEPSEEK_V3, "Kimi K2.5"},
    /* Glm4vMoeTextConfig is Glm4MoeConfig without use_qk_norm; its
     * multimodal rotary turns the same partial_rotary_factor of a head. */
    {"glm4v_moe", "glm4v_moe_text", FAM_GLM4_MOE, "GLM-4.5V"},
    /* Qwen3VLTextConfig and Qwen3VLMoeTextConfig are Qwen3's and
     * Qwen3-MoE's fields; their interleaved multimodal rotary turns whole
     * heads, and the visual features added to early layers come with
     * images only. */
    {"qwen3_vl", "qwen3_vl_text", FAM_QWEN3, "Qwen3-VL"},
    {"qwen3_vl_moe", "qwen3_vl_moe_text", FAM_QWEN3_MOE, "Qwen3-VL MoE"},
};

/* Such a config (Gemma3ForConditionalGeneration, Mistral Small 3.1, ...)
 * is read as its text_config: the model trained is the language model
 * (the vision tower, a few percent of it, is not built). Messages then
 * name text_config. */
static int text_config(hf_cfg *c, const char *source, char *src, size_t len)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c->root, "model_type");
    size_t w = 0, n = sizeof wrappers / sizeof wrappers[0];
    while (w < n && !(cJSON_IsString(t) && !strcmp(t->valuestring, wrappers[w].type)))
        w++;
    if (w == n)
        return AP_OK;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(c->root, "text_config");
    if (!cJSON_IsObject(tc)) {
        cfg_fail(c, "model_type \"%s\" (%s with vision) needs a \"text_config\" object: "
                 "the language model that is built", t->valuestring, wrappers[w].name);
        return AP_EINPUT;
    }
    const cJSON *tt = cJSON_GetObjectItemCaseSensitive(tc, "model_type");
    if (tt && (!cJSON_IsString(tt) || strcmp(tt->valuestring, wrappers[w].text))) {
        cfg_fail(c, "\"text_config\".\"model_type\" must be \"%s\"", wrappers[w].text);
        return AP_EINPUT;
    }
    snprintf(src, len, "%s: text_config", source);
    c->outer = c->root;
    c->outer_src = source;
    c->src = src;
    c->root = tc;
    c->fam_override = (int)wrappers[w].fam + 1;
    return AP_OK;
}

int ap_graph_from_hf(const char *text, size_t len, const char *source,
                     const ap_build_opts *opt, ap_graph **out, char *err)
{
    hf_model m = {0};
    hf_cfg c = {0};
    char src[AP_NAME_LEN * 2];
    int rc;
    *out = NULL;
    c.src = source;
    c.err = err;
    cJSON *whole = cJSON_ParseWithLength(text, len);
    if (!whole || !cJSON_IsObject(whole)) {
        snprintf(err, AP_ERR_LEN, "%s: not a JSON object", source);
        cJSON_Delete(whole);
        return AP_EINPUT;
    }
    c.root = whole;
    char dup_path[256];
    if (ap_json_duplicate(whole, dup_path, sizeof dup_path)) {
        snprintf(err, AP_ERR_LEN, "%s: \"%s\" is given twice; JSON readers keep "
                 "different copies (transformers the last), so say it once", source,
                 dup_path);
        cJSON_Delete(whole);
        return AP_EINPUT;
    }
    check_architectures(&c);
    rc = c.bad ? AP_EINPUT : text_config(&c, source, src, sizeof src);
    if (rc == AP_OK)
        rc = read_model(&c, &m);
    if (rc == AP_OK)
        rc = build_checked(&c, &m, opt, out);
    /* Messages name the text_config; the graph's source and name are the
     * file's, which a plan records to load the model again. */
    if (rc == AP_OK && c.src != source)
        name_graph(*out, source);
    cJSON_Delete(whole);
    free(m.dense_only);
    free(m.swa);
    free(m.nope);
    return rc;
}

/* A size of a decoder description within [lo, hi]; fails with its name. */
static int decoder_size(hf_cfg *c, const char *what, int64_t v, int64_t lo, int64_t hi)
{
    if (!c->bad && (v < lo || v > hi))
        cfg_fail(c, "%s is %lld; from %lld to %lld are built", what, (long long)v,
                 (long long)lo, (long long)hi);
    return !c->bad;
}

static void decoder_sizes(hf_cfg *c, const ap_decoder *d)
{
    decoder_size(c, "the layers", d->layers, 1, MAX_LAYERS);
    decoder_size(c, "the hidden size", d->hidden, 1, MAX_HIDDEN);
    decoder_size(c, "the attention heads", d->heads, 1, MAX_HEADS);
    decoder_size(c, "the key-value heads", d->kv_heads, 1, d->heads);
    decoder_size(c, "the head size", d->head_dim, 1, MAX_HIDDEN);
    decoder_size(c, "the vocabulary", d->vocab, 1, MAX_VOCAB);
    decoder_size(c, "the FFN size", d->ffn, 1, MAX_FFN);
    decoder_size(c, "the position table", d->positions, 0, MAX_SEQ);
    if (d->experts) {
        decoder_size(c, "the experts", d->experts, 1, MAX_EXPERTS);
        decoder_size(c, "the experts per token", d->top_k, 1, d->experts);
        decoder_size(c, "the experts' FFN size", d->moe_ffn, 1, MAX_FFN);
        decoder_size(c, "the shared experts' FFN size", d->shared_ffn, 0, MAX_FFN);
        if (!c->bad && !(d->route_scale >= 0 && d->route_scale <= 1e6))
            cfg_fail(c, "the router's scaling factor is %g; above 0 to 1e6 are built "
                     "(0: not scaled)", d->route_scale);
    }
    if (d->mla) {
        decoder_size(c, "the query LoRA rank", d->q_lora, 0, MAX_HIDDEN);
        decoder_size(c, "the key-value LoRA rank", d->kv_lora, 1, MAX_HIDDEN);
        decoder_size(c, "the query and key head size without rotary", d->qk_nope, 1,
                     MAX_HIDDEN);
        decoder_size(c, "the rotary part of the query and key heads", d->qk_rope, 1,
                     MAX_HIDDEN);
        decoder_size(c, "the value head size", d->v_head_dim, 1, MAX_HIDDEN);
    }
    if (!c->bad && d->heads % d->kv_heads)
        cfg_fail(c, "the attention heads (%lld) are not a multiple of the key-value "
                 "heads (%lld)", (long long)d->heads, (long long)d->kv_heads);
    if (!c->bad && !(d->rotary_percent >= 0 && d->rotary_percent <= 1))
        cfg_fail(c, "the rotary share of each head (%g) is not from 0 to 1",
                 d->rotary_percent);
}

/* A description's byte a layer copied for the model (*out stays NULL for
 * a NULL one: every layer alike). */
static void copy_layers(hf_cfg *c, const unsigned char *from, int64_t layers,
                        unsigned char **out)
{
    if (!from)
        return;
    *out = malloc((size_t)layers);
    if (!*out) {
        cfg_fail(c, "out of memory");
        return;
    }
    memcpy(*out, from, (size_t)layers);
}

/* The description's sliding window, its layers copied (NULL: every layer). */
static void decoder_window(hf_cfg *c, const ap_decoder *d, hf_model *m)
{
    if (c->bad || !d->window)
        return;
    if (!decoder_size(c, "the sliding window", d->window, 1, INT64_C(1) << 40))
        return;
    m->window = d->window;
    copy_layers(c, d->window_layer, m->layers, &m->swa);
}

/* The description's NoPE layers, copied (NULL: every layer rotates), and
 * the rotary layers' weightless q and k norms. */
static void decoder_nope(hf_cfg *c, const ap_decoder *d, hf_model *m)
{
    if (c->bad)
        return;
    m->qk_l2 = d->qk_l2;
    copy_layers(c, d->nope_layer, m->layers, &m->nope);
}

/* The hf_model the description states. Which layers route to experts is
 * kept as the layers that do not (dense_only), as Qwen-MoE's
 * mlp_only_layers, so is_moe_layer reads it unchanged. */
static void decoder_model(hf_cfg *c, const ap_decoder *d, hf_model *m)
{
    decoder_sizes(c, d);
    if (c->bad)
        return;
    m->fam = d->experts ? FAM_QWEN3_MOE : FAM_LLAMA;
    m->fp16 = d->fp16;
    m->layers = d->layers;
    m->hidden = d->hidden;
    m->heads = d->heads;
    m->kv_heads = d->mla ? d->heads : d->kv_heads;
    m->head_dim = d->mla ? d->qk_nope + d->qk_rope : d->head_dim;
    m->v_head_dim = d->mla ? d->v_head_dim : m->head_dim;
    m->ffn = d->ffn;
    m->vocab = d->vocab;
    m->positions = m->max_pos = d->positions;
    m->layernorm = !d->rmsnorm;
    m->layernorm1p = !d->rmsnorm && d->layernorm_1p;
    m->gelu_mlp = d->act == AP_MLP_GELU;
    m->relu2_mlp = d->act == AP_MLP_SQUARED_RELU;
    m->quick_geglu = d->act == AP_MLP_QUICK_GEGLU;
    m->sinks = d->sinks;
    m->qkv_bias = d->qkv_bias;
    m->o_bias = d->o_bias;
    m->mlp_bias = d->mlp_bias;
    m->tie = d->tied;
    m->qk_norm = d->qk_norm;
    m->mla = d->mla;
    m->q_lora = d->q_lora;
    m->kv_lora = d->kv_lora;
    m->qk_nope = d->qk_nope;
    m->qk_rope = d->qk_rope;
    m->rot = d->mla ? d->qk_rope : (int64_t)((double)m->head_dim * d->rotary_percent);
    if (m->rot % 2)
        cfg_fail(c, "the rotary part of the head (%lld) must be even: rotary pairs its "
                 "elements", (long long)m->rot);
    decoder_window(c, d, m);
    decoder_nope(c, d, m);
    if (!d->experts || c->bad)
        return;
    m->experts = d->experts;
    m->top_k = d->top_k;
    m->moe_ffn = d->moe_ffn;
    m->shared_ffn = d->shared_ffn;
    /* Under --add-bias-linear the experts carry biases, and the router is
     * given one with them, GPT-OSS's shape (E parameters a layer). */
    m->expert_bias = m->router_bias = d->mlp_bias;
    m->groups = d->route_groups;
    m->group_topk = d->route_group_topk;
    m->route_sigmoid = d->route_sigmoid;
    m->route_norm = !d->route_unnormalized;
    m->route_bias = d->route_bias;
    m->route_on_input = d->route_on_input;
    m->route_scale = d->route_scale > 0 ? d->route_scale : 1;
    m->sparse_step = m->moe_freq = 1;
    if (!(m->dense_only = layer_flags(c, m)))
        return;
    for (int64_t i = 0; d->moe_layer && i < m->layers; i++)
        m->dense_only[i] = !d->moe_layer[i];
}

int ap_graph_from_decoder(const ap_decoder *d, const char *source,
                          const ap_build_opts *opt, ap_graph **out, char *err)
{
    hf_model m = {0};
    hf_cfg c = {0};
    int rc;
    *out = NULL;
    c.src = source;
    c.err = err;
    decoder_model(&c, d, &m);
    if (!c.bad && (!opt || opt->seq <= 0))
        cfg_fail(&c, "no sequence length");
    rc = c.bad ? AP_EINPUT : build_checked(&c, &m, opt, out);
    free(m.dense_only);
    free(m.swa);
    free(m.nope);
    return rc;
}

/* The router that produces the experts label l: its top_k says how many of
 * the experts a token visits. */
static const ap_op *router_of(const ap_graph *g, char l)
{
    for (int i = 0; i < g->nops; i++) {
        const ap_op *o = &g->ops[i];
        if (o->kind == AP_OP_ROUTER && o->noutputs == 1 &&
            strchr(g->tensors[o->outputs[0]].shape, l))
            return o;
    }
    return NULL;
}

/* A router's own weight has the experts label too, but every token reads
 * all of it. */
static int is_router_input(const ap_graph *g, int t)
{
    for (int i = 0; i < g->nops; i++) {
        const ap_op *o = &g->ops[i];
        for (int k = 0; o->kind == AP_OP_ROUTER && k < o->ninputs; k++)
            if (o->inputs[k] == t)
                return 1;
    }
    return 0;
}

/* Expert parameters count top_k/E of their size; all others count whole. */
double ap_graph_active_params(const ap_graph *g)
{
    double total = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const ap_tensor *x = &g->tensors[t];
        double scale = 1;
        if (x->role != AP_TENSOR_PARAM)
            continue;
        for (int k = 0; k < x->rank; k++) {
            const ap_dim *d = ap_graph_dim(g, x->shape[k]);
            const ap_op *r = d && d->kind == AP_DIM_EXPERTS ? router_of(g, d->label) : NULL;
            if (r && !is_router_input(g, t))
                scale = (double)r->top_k / (double)d->size;
        }
        total += (double)x->elems * scale;
    }
    return total;
}
