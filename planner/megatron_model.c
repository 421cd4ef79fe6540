/* megatron_model.c -- the model a whole Megatron-LM command line trains.
 *
 * A Megatron-LM script states its model by flags (--num-layers,
 * --hidden-size, --swiglu, ...) and no config file. Read with Megatron-LM's
 * own defaults for the flags it leaves out (megatron/training/arguments.py,
 * validate_args and the parser; the vocabulary as build_tokenizer and
 * _vocab_size_with_padding make it), the flags describe one decoder, which
 * graph/ builds as it builds a Hugging Face config. ap_megatron_plan then
 * checks the built graph against the same flags, as for any MODEL. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

/* Megatron-LM's --make-vocab-size-divisible-by default. */
#define VOCAB_DIVISOR 128
/* The GPT-2 BPE vocabulary file's tokens, which GPT2BPETokenizer reads. */
#define GPT2_VOCAB 50257

__attribute__((format(printf, 2, 3))) static int fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, AP_ERR_LEN, fmt, ap);
    va_end(ap);
    return AP_EINPUT;
}

static int states_model(const ap_megatron *m, char *err)
{
    const char *missing = !m->shape.layers ? "--num-layers"
                        : !m->shape.hidden ? "--hidden-size"
                        : !m->shape.heads  ? "--num-attention-heads" : NULL;
    if (!missing)
        return AP_OK;
    return fail(err, "--megatron-args does not state the model: %s is missing (a "
                "Megatron-LM script gives --num-layers, --hidden-size and "
                "--num-attention-heads, which autopar builds the model from); or give "
                "MODEL, a model file or a Hugging Face config.json", missing);
}

/* The tokenizer's vocabulary, as Megatron-LM's build_tokenizer gets it:
 * NullTokenizer counts an end-of-document token past --vocab-size;
 * GPT2BPETokenizer, pretrain_gpt.py's default (its args_defaults), reads
 * the GPT-2 vocabulary file; the others read their files, which autopar
 * does not, so --vocab-size stands for them (TikTokenizer reads it too). */
static int tokenizer_vocab(const ap_megatron *m, long long *v, char *err)
{
    const char *t = m->shape.tokenizer[0] ? m->shape.tokenizer : "GPT2BPETokenizer";
    /* Without --tokenizer-type or the GPT-2 files, a line that names its
     * tokenizer some other way (NeMo's --tokenizer-library, a fork's
     * --patch-tokenizer-type) does not run the default GPT2BPETokenizer:
     * its vocabulary is in files autopar does not read. */
    if (!m->shape.tokenizer[0] && !m->shape.vocab_file && m->shape.other_tokenizer) {
        if (m->shape.vocab) {
            *v = m->shape.vocab;
            return AP_OK;
        }
        return fail(err, "--megatron-args: the tokenizer is named by a flag autopar does "
                    "not read (no --tokenizer-type, no --vocab-file for Megatron-LM's "
                    "default GPT2BPETokenizer), and its vocabulary is in its files: add "
                    "--vocab-size N to the flags, the tokenizer's vocabulary, or give MODEL");
    }
    if (!strcmp(t, "NullTokenizer")) {
        if (!m->shape.vocab)
            return fail(err, "--megatron-args: --tokenizer-type %s needs --vocab-size "
                        "(Megatron-LM asserts it)", t);
        *v = (long long)m->shape.vocab + 1;
    } else if (!strcmp(t, "GPT2BPETokenizer")) {
        *v = GPT2_VOCAB;
    } else if (m->shape.vocab) {
        *v = m->shape.vocab;
    } else {
        return fail(err, "--megatron-args: --tokenizer-type %s keeps its vocabulary in "
                    "its files, which autopar does not read: add --vocab-size N to the flags, the "
                    "tokenizer's vocabulary (Megatron-LM reads past it for this "
                    "tokenizer), or give MODEL", t);
    }
    return AP_OK;
}

/* Megatron-LM pads the vocabulary so that each tensor-parallel rank's
 * share of the embedding and output layer is a multiple of the divisor. */
static long long padded_vocab(const ap_megatron *m, long long v)
{
    long long mult = (long long)(m->shape.vocab_divisor ? m->shape.vocab_divisor
                                                        : VOCAB_DIVISOR) * m->tp;
    return (v + mult - 1) / mult * mult;
}

static int attention_of(const ap_megatron *m, ap_decoder *d, char *err)
{
    d->heads = m->shape.heads;
    d->kv_heads = m->shape.groups ? m->shape.groups : m->shape.heads;
    if (m->shape.kv_channels) {
        d->head_dim = m->shape.kv_channels;
    } else if (m->shape.hidden % m->shape.heads) {
        return fail(err, "--megatron-args: --hidden-size is not divisible by "
                    "--num-attention-heads (Megatron-LM asserts it without "
                    "--kv-channels)");
    } else {
        d->head_dim = m->shape.hidden / m->shape.heads;
    }
    if (d->heads % d->kv_heads)
        return fail(err, "--megatron-args: --num-attention-heads is not a multiple of "
                    "--num-query-groups");
    d->qk_norm = m->shape.qk_norm;
    if (!m->shape.mla)
        return AP_OK;
    /* Megatron-Core's MLATransformerConfig defaults. */
    d->mla = 1;
    d->q_lora = m->shape.q_lora;
    d->kv_lora = m->shape.kv_lora ? m->shape.kv_lora : 32;
    d->qk_nope = m->shape.qk_nope_dim ? m->shape.qk_nope_dim : 128;
    d->qk_rope = m->shape.qk_rope_dim ? m->shape.qk_rope_dim : 64;
    d->v_head_dim = m->shape.v_head_dim ? m->shape.v_head_dim : 128;
    if (m->shape.positions != 2)
        return fail(err, "--megatron-args: --multi-latent-attention without "
                    "--position-embedding-type rope: autopar builds latent attention "
                    "with its rotary part");
    return AP_OK;
}

/* Positions: a learned table over --max-position-embeddings (Megatron-LM's
 * default type), rotary over --rotary-percent of each head, or none. */
static int positions_of(const ap_megatron *m, ap_decoder *d, char *err)
{
    int type = m->shape.positions ? m->shape.positions : 1;
    if (type == 2)
        d->rotary_percent = m->shape.rotary_percent > 0 ? m->shape.rotary_percent : 1;
    if (type != 1)
        return AP_OK;
    if (!m->shape.max_pos)
        return fail(err, "--megatron-args: learned absolute positions (%s) need "
                    "--max-position-embeddings (Megatron-LM asserts it)", m->shape.positions
                    ? "--position-embedding-type learned_absolute"
                    : "no --position-embedding-type, Megatron-LM's default");
    d->positions = m->shape.max_pos;
    if (m->shape.seq > m->shape.max_pos)
        return fail(err, "--megatron-args: --seq-length is longer than "
                    "--max-position-embeddings, the learned position table");
    return AP_OK;
}

static void mlp_of(const ap_megatron *m, ap_decoder *d)
{
    d->act = m->shape.swiglu ? AP_MLP_SWIGLU
           : m->shape.quick_geglu ? AP_MLP_QUICK_GEGLU
           : m->shape.squared_relu ? AP_MLP_SQUARED_RELU : AP_MLP_GELU;
    if (m->shape.ffn)
        d->ffn = m->shape.ffn;
    else if (m->shape.swiglu)
        d->ffn = (long long)(4.0 * m->shape.hidden * 2 / 3 / 64) * 64;
    else
        d->ffn = 4LL * m->shape.hidden;
    d->rmsnorm = m->shape.norm == 2;
    d->layernorm_1p = m->shape.layernorm_1p;
    d->qkv_bias = !m->shape.no_bias || m->shape.add_qkv_bias;
    d->o_bias = d->mlp_bias = !m->shape.no_bias;
    d->tied = !m->shape.untie;
    d->sinks = m->shape.sinks > 0;
}

static int experts_of(const ap_megatron *m, ap_decoder *d, unsigned char *moe_layer,
                      char *err)
{
    if (!m->shape.experts)
        return AP_OK;
    if (!m->shape.swiglu && !m->shape.quick_geglu)
        return fail(err, "--megatron-args: --num-experts without --swiglu or --quick-geglu: "
                    "autopar builds gated experts only");
    /* Megatron-Core views the scores as groups of equal size. */
    if (m->shape.route_groups > 1 && m->shape.experts % m->shape.route_groups)
        return fail(err, "--megatron-args: --moe-router-num-groups %d does not divide the "
                    "%d experts (--num-experts)", m->shape.route_groups, m->shape.experts);
    d->experts = m->shape.experts;
    d->top_k = m->shape.top_k;
    d->moe_ffn = m->shape.moe_ffn ? m->shape.moe_ffn : d->ffn;
    d->shared_ffn = m->shape.shared_ffn;
    /* Groups that all stay in (a group top-k of at least the groups, as
     * Moonlight's 1 of 1) limit nothing, and Megatron-Core routes over
     * all the experts, as check_groups reads them against a model. */
    if (m->shape.route_groups > 1 && m->shape.route_group_topk &&
        m->shape.route_group_topk < m->shape.route_groups) {
        d->route_groups = m->shape.route_groups;
        d->route_group_topk = m->shape.route_group_topk;
    }
    /* The router as Megatron-Core's topk_routing_with_score_function runs
     * it: a softmax over the top-k logits, or under --moe-router-pre-softmax
     * over all experts with the top k as they are; sigmoid scores
     * renormalised above top-k 1, as they are at top-k 1. */
    d->route_sigmoid = m->shape.route_score == 2;
    d->route_unnormalized = d->route_sigmoid ? d->top_k == 1 : m->shape.route_pre_softmax;
    d->route_bias = m->shape.route_bias;
    d->route_on_input = m->shape.route_on_input;
    d->route_scale = m->shape.route_scale;
    if (!m->shape.moe_freq[0])
        return AP_OK;
    d->moe_layer = moe_layer;
    return ap_moe_freq_parse(m->shape.moe_freq, m->shape.layers, moe_layer, err);
}

/* The sliding window where --window-size gives one (L of 0 or more): L + 1
 * keys, on the layers --window-attn-skip-freq windows, every layer where
 * it is left out. */
static int window_of(const ap_megatron *m, ap_decoder *d, unsigned char *window_layer,
                     char *err)
{
    if (m->shape.window <= 0)
        return AP_OK;
    d->window = m->shape.window;
    if (!m->shape.window_freq[0])
        return AP_OK;
    d->window_layer = window_layer;
    return ap_window_freq_parse(m->shape.window_freq, m->shape.layers, window_layer, err);
}

/* The layers --no-rope-freq leaves without rotary embedding, and
 * --qk-l2-norm's weightless q and k norms on the others, as Megatron-LM
 * applies both: to rotary attention, which autopar builds NoPE into for
 * standard attention alone (MLA's rotary part is its own heads). */
static int nope_of(const ap_megatron *m, ap_decoder *d, unsigned char *nope_layer, char *err)
{
    if ((m->shape.nope_freq[0] || m->shape.qk_l2) && m->shape.mla)
        return fail(err, "--megatron-args: %s with --multi-latent-attention: autopar "
                    "builds it for standard attention only", m->shape.nope_freq[0]
                    ? "--no-rope-freq" : "--qk-l2-norm");
    d->qk_l2 = m->shape.qk_l2;
    if (!m->shape.nope_freq[0] || d->rotary_percent <= 0)
        return AP_OK;
    d->nope_layer = nope_layer;
    return ap_nope_freq_parse(m->shape.nope_freq, m->shape.layers, nope_layer, err);
}

/* One byte a layer for each pattern the flags give (--moe-layer-freq
 * under --num-experts, --window-attn-skip-freq under a window,
 * --no-rope-freq), in one allocation: *layers, NULL where none is given. */
static int layer_patterns(const ap_megatron *m, unsigned char **layers, char *err)
{
    size_t moe = m->shape.experts && m->shape.moe_freq[0];
    size_t window = m->shape.window > 0 && m->shape.window_freq[0];
    size_t nope = m->shape.nope_freq[0] != 0;
    if (!moe && !window && !nope)
        return AP_OK;
    *layers = malloc((moe + window + nope) * (size_t)m->shape.layers);
    if (*layers)
        return AP_OK;
    snprintf(err, AP_ERR_LEN, "out of memory reading --moe-layer-freq, "
             "--window-attn-skip-freq and --no-rope-freq");
    return AP_EINTERNAL;
}

int ap_megatron_model(const ap_megatron *m, ap_decoder *d, unsigned char **layers, char *err)
{
    long long vocab = 0;
    memset(d, 0, sizeof *d);
    *layers = NULL;
    int rc = states_model(m, err);
    if (!rc)
        rc = layer_patterns(m, layers, err);
    if (!rc)
        rc = tokenizer_vocab(m, &vocab, err);
    if (!rc)
        rc = attention_of(m, d, err);
    if (!rc)
        rc = positions_of(m, d, err);
    if (!rc) {
        d->layers = m->shape.layers;
        d->hidden = m->shape.hidden;
        d->fp16 = m->shape.fp16;
        d->vocab = padded_vocab(m, vocab);
        mlp_of(m, d);
        /* The MoE pattern first in *layers, the window's after it, the
         * NoPE layers' last. */
        size_t moe = m->shape.experts && m->shape.moe_freq[0] ? (size_t)d->layers : 0;
        size_t window = m->shape.window > 0 && m->shape.window_freq[0] ? (size_t)d->layers : 0;
        rc = experts_of(m, d, *layers, err);
        if (!rc)
            rc = window_of(m, d, *layers ? *layers + moe : NULL, err);
        if (!rc)
            rc = nope_of(m, d, *layers ? *layers + moe + window : NULL, err);
    }
    /* Without either flag Megatron-LM keeps and computes everything in
     * fp32, which autopar's graphs, in 16-bit, would price as half. */
    if (!rc && !m->shape.half)
        rc = fail(err, "--megatron-args: no --bf16 or --fp16, so Megatron-LM trains in "
                  "fp32, which autopar does not build: add --bf16, or give MODEL");
    if (rc) {
        free(*layers);
        *layers = NULL;
        d->moe_layer = d->window_layer = d->nope_layer = NULL;
    }
    return rc;
}

/* Megatron-LM's defaults: --rotary-base, --norm-epsilon (TransformerConfig's
 * layernorm_epsilon) and --rope-scaling-factor. */
#define ROTARY_BASE 10000
#define NORM_EPS 1e-5
#define ROPE_FACTOR 8

void ap_megatron_numerics(const ap_megatron *m, ap_graph *g)
{
    int rotary = m->shape.positions == 2;
    g->rope_base = !rotary ? 0 : m->shape.rope_base > 0 ? m->shape.rope_base : ROTARY_BASE;
    g->norm_eps = m->shape.norm_eps > 0 ? m->shape.norm_eps : NORM_EPS;
    g->rope_scaling = rotary && m->shape.rope_scaling ? AP_ROPE_SCALING_LLAMA3 : 0;
    g->rope_scaling_factor = !g->rope_scaling ? 0
                           : m->shape.rope_factor > 0 ? m->shape.rope_factor : ROPE_FACTOR;
    /* Megatron-Core's GLU reads both only in a gated MLP. */
    int gated = m->shape.swiglu || m->shape.quick_geglu;
    g->glu_offset = gated ? m->shape.glu_offset : 0;
    g->glu_clamp = gated ? m->shape.glu_clamp : 0;
}
