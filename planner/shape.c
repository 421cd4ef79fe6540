/* shape.c -- the model's shape as launchers' flags state it, read off the
 * graph: sizes from the dimension kinds, architecture from the op kinds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

static long long size_of(const ap_graph *g, ap_dim_kind k)
{
    char l = ap_graph_label_of(g, k);
    return l ? (long long)ap_graph_dim(g, l)->size : 0;
}

static int is_param(const ap_graph *g, int t)
{
    return g->tensors[t].role == AP_TENSOR_PARAM;
}

/* A position table is a second embedding before the layers, or a
 * parameter added to the token embeddings there. */
static int has_position_table(const ap_graph *g)
{
    int embeddings = 0;
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->layer >= 0) /* past them: the MTP modules embed again */
            break;
        if (op->kind == AP_OP_EMBEDDING && ++embeddings > 1)
            return 1;
        if (op->kind == AP_OP_BINARY && op->sub == AP_BINARY_ADD)
            for (int k = 0; k < op->ninputs; k++)
                if (is_param(g, op->inputs[k]))
                    return 1;
    }
    return 0;
}

/* The share of the rotated input's last dimension that the first rotary op
 * in a layer rotates: its cos/sin table's last label, or all of it without
 * a table. */
static double rotary_percent(const ap_graph *g)
{
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind != AP_OP_UNARY || op->sub != AP_UNARY_ROTARY || op->layer < 0)
            continue;
        const ap_tensor *x = &g->tensors[op->inputs[0]];
        const ap_tensor *t = op->ninputs > 1 ? &g->tensors[op->inputs[1]] : x;
        double d = (double)ap_graph_dim(g, x->shape[x->rank - 1])->size;
        double r = (double)ap_graph_dim(g, t->shape[t->rank - 1])->size;
        return r / d;
    }
    return 0;
}

int ap_model_nope_layers(const ap_graph *g, unsigned char *nope)
{
    int rotates = 0, n = 0;
    memset(nope, 0, (size_t)g->nlayers);
    /* Each layer with attention first, then those that rotate taken off. */
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind == AP_OP_ATTENTION && op->layer >= 0 && op->layer < g->nlayers)
            nope[op->layer] = 1;
    }
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind == AP_OP_UNARY && op->sub == AP_UNARY_ROTARY && op->layer >= 0 &&
            op->layer < g->nlayers) {
            nope[op->layer] = 0;
            rotates = 1;
        }
    }
    for (int i = 0; i < g->nlayers; i++)
        n += nope[i] = rotates && nope[i];
    return n;
}

/* Llama 4's NoPE layers, as Megatron-LM's --no-rope-freq states them. */
static void nope_shape(const ap_graph *g, ap_model_shape *s)
{
    unsigned char *nope = malloc((size_t)(g->nlayers > 0 ? g->nlayers : 1));
    if (!nope)
        return;
    s->nope_layers = ap_model_nope_layers(g, nope);
    if (s->nope_layers && ap_nope_freq_format(nope, g->nlayers, s->nope_freq,
                                              sizeof s->nope_freq))
        snprintf(s->nope_freq, sizeof s->nope_freq, "?");
    free(nope);
}

/* Two norms of one layer read the same tensor, the layer's input, so
 * attention and the MLP run side by side (GPT-NeoX's ln1 and ln2). */
static int norms_share_an_input(const ap_graph *g)
{
    for (int i = 0; i < g->nops; i++) {
        const ap_op *a = &g->ops[i];
        if (a->kind != AP_OP_NORM || a->layer < 0)
            continue;
        for (int j = i + 1; j < g->nops; j++) {
            const ap_op *b = &g->ops[j];
            if (b->kind == AP_OP_NORM && b->layer == a->layer &&
                b->inputs[0] == a->inputs[0])
                return 1;
        }
    }
    return 0;
}

/* Whether an op of a layer's MLP (or MoE block) reads an activation that
 * the layer's attention output does not reach: the MLP then runs beside
 * attention, not after it, as under Phi's and Cohere's one shared norm.
 * A tensor is `late` once it depends on the attention op's output within
 * its layer; the ops are in topological order, so one pass marks them. */
static int mlp_reads_before_attention(const ap_graph *g)
{
    unsigned char *late = calloc((size_t)(g->ntensors > 0 ? g->ntensors : 1), 1);
    int layer = -1, found = 0;
    if (!late)
        return 0;
    for (int i = 0; i < g->nops && !found; i++) {
        const ap_op *op = &g->ops[i];
        if (op->layer < 0)
            continue;
        if (op->kind == AP_OP_ATTENTION)
            layer = op->layer;
        if (op->layer != layer)
            continue;
        int reads_late = op->kind == AP_OP_ATTENTION, reads_early = 0;
        for (int k = 0; k < op->ninputs; k++) {
            const ap_tensor *t = &g->tensors[op->inputs[k]];
            if (t->role != AP_TENSOR_ACT || t->producer < 0)
                continue;
            reads_late |= late[op->inputs[k]];
            reads_early |= !late[op->inputs[k]];
        }
        found = reads_early && (op->modules & (AP_MODULE_MLP | AP_MODULE_MOE));
        for (int k = 0; k < op->noutputs && reads_late; k++)
            late[op->outputs[k]] = 1;
    }
    free(late);
    return found;
}

/* Parallel residual: attention and the MLP both read the layer's input,
 * through a norm each (GPT-NeoX) or through one norm they share (Phi,
 * Cohere), rather than the MLP reading attention's residual sum. */
static int has_parallel_residual(const ap_graph *g)
{
    return norms_share_an_input(g) || mlp_reads_before_attention(g);
}

/* An elementwise op outside the layers on what an embedding or the head
 * (a matmul outside the layers) produced: a scale on the embeddings, a
 * scale or cap on the logits. Megatron-LM's GPT model has neither. */
static void outer_scales(const ap_graph *g, ap_model_shape *s)
{
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind != AP_OP_UNARY || op->layer >= 0 || op->ninputs < 1 ||
            (op->sub != AP_UNARY_SCALE && op->sub != AP_UNARY_SOFTCAP))
            continue;
        int p = g->tensors[op->inputs[0]].producer;
        if (p < 0 || g->ops[p].layer >= 0)
            continue;
        s->scaled_embedding |= g->ops[p].kind == AP_OP_EMBEDDING;
        s->scaled_logits |= g->ops[p].kind == AP_OP_MATMUL ||
                            (g->ops[p].kind == AP_OP_UNARY && g->ops[p].sub == AP_UNARY_SCALE);
    }
}

/* Tied: a matmul outside the layers reads the table an embedding reads. */
static int head_is_tied(const ap_graph *g)
{
    for (int i = 0; i < g->nops; i++) {
        const ap_op *e = &g->ops[i];
        if (e->kind != AP_OP_EMBEDDING || e->ninputs < 2)
            continue;
        for (int j = 0; j < g->nops; j++) {
            const ap_op *m = &g->ops[j];
            if (m->kind == AP_OP_MATMUL && m->layer < 0 && m->ninputs >= 2 &&
                m->inputs[1] == e->inputs[1])
                return 1;
        }
    }
    return 0;
}

/* The size of the dimension named `name`, 0 where the graph has none. */
static long long named(const ap_graph *g, const char *name)
{
    for (int i = 0; i < g->ndims; i++)
        if (!strcmp(g->dims[i].name, name))
            return g->dims[i].size;
    return 0;
}

static void mla_shape(const ap_graph *g, ap_model_shape *s)
{
    s->mla = (ap_graph_modules(g) & AP_MODULE_MLA_UP_PROJ) != 0;
    if (!s->mla)
        return;
    s->q_lora = named(g, "q_lora_rank");
    s->kv_lora = named(g, "kv_lora_rank");
    s->qk_nope_dim = named(g, "qk_nope_head_dim");
    s->qk_rope_dim = named(g, "qk_rope_head_dim");
    s->v_head_dim = named(g, "v_head_dim");
}

/* The FFN width of a matmul's weight (input 1): the size of its label
 * that is neither the hidden size nor the experts. */
static long long ffn_width(const ap_graph *g, const ap_op *op)
{
    if (op->ninputs < 2 || !is_param(g, op->inputs[1]))
        return 0;
    const ap_tensor *w = &g->tensors[op->inputs[1]];
    for (int i = 0; i < w->rank; i++) {
        const ap_dim *d = ap_graph_dim(g, w->shape[i]);
        if (d && d->kind != AP_DIM_HIDDEN && d->kind != AP_DIM_EXPERTS)
            return d->size;
    }
    return 0;
}

int ap_model_moe_layers(const ap_graph *g, unsigned char *moe)
{
    int n = 0;
    memset(moe, 0, (size_t)g->nlayers);
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind == AP_OP_ROUTER && op->layer >= 0 && op->layer < g->nlayers &&
            !moe[op->layer]) {
            moe[op->layer] = 1;
            n++;
        }
    }
    return n;
}

long long ap_model_window_layers(const ap_graph *g, unsigned char *window)
{
    long long w = 0;
    memset(window, 0, (size_t)g->nlayers);
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind != AP_OP_ATTENTION || !op->window || op->layer < 0 ||
            op->layer >= g->nlayers)
            continue;
        window[op->layer] = 1;
        if (w && w != op->window)
            w = -1;
        else if (!w)
            w = op->window;
    }
    return w;
}

/* The shortest attention span (chunk, or unless chunks_only a sliding
 * window) shorter than the sequence it limits; *seq gets that sequence. */
static long long shortest_span(const ap_graph *g, int chunks_only, long long *seq)
{
    long long w = 0, s = 0;
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        long long span = op->kind != AP_OP_ATTENTION ? 0
                       : op->chunk                   ? op->chunk
                       : chunks_only                 ? 0
                                                     : op->window;
        if (!span || op->ninputs < 1)
            continue;
        const ap_dim *d = ap_graph_dim(g, g->tensors[op->inputs[0]].shape[1]);
        if (d && span < d->size && (!w || span < w)) {
            w = span;
            s = d->size;
        }
    }
    if (seq)
        *seq = s;
    return w;
}

long long ap_model_short_window(const ap_graph *g, long long *seq)
{
    return shortest_span(g, 0, seq);
}

long long ap_model_short_chunk(const ap_graph *g, long long *seq)
{
    return shortest_span(g, 1, seq);
}

/* The sliding window and its layers, as Megatron-LM's --window-size and
 * --window-attn-skip-freq state them. */
static void window_shape(const ap_graph *g, ap_model_shape *s)
{
    unsigned char *window = malloc((size_t)(g->nlayers > 0 ? g->nlayers : 1));
    if (!window)
        return;
    s->window = ap_model_window_layers(g, window);
    if (s->window && ap_window_freq_format(window, g->nlayers, s->window_freq,
                                           sizeof s->window_freq))
        snprintf(s->window_freq, sizeof s->window_freq, "?");
    free(window);
}

/* Whether op's output has an attention-heads label: Q, K and V. */
static int heads_output(const ap_graph *g, const ap_op *op)
{
    const char *T = g->tensors[op->outputs[0]].shape;
    char n = ap_graph_label_of(g, AP_DIM_HEADS), kv = ap_graph_label_of(g, AP_DIM_KV_HEADS);
    return (n && strchr(T, n)) || (kv && strchr(T, kv));
}

/* Which of the layers' matmuls carry a bias, as Megatron-LM's flags say it
 * (--disable-bias-linear, --add-qkv-bias), and whether a norm follows a
 * projection (--qk-layernorm). */
static void bias_shape(const ap_graph *g, ap_model_shape *s)
{
    int others = 0, biased = 0;
    char hidden = ap_graph_label_of(g, AP_DIM_HIDDEN);
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        /* A norm on a projection into heads or a latent, not on the
         * hidden-wide output of one (Gemma 2's norms after attention and
         * the MLP). */
        if (op->kind == AP_OP_NORM && op->ninputs > 0) {
            const ap_tensor *x = &g->tensors[op->inputs[0]];
            int p = x->producer;
            int on_projection = op->layer >= 0 && p >= 0 && g->ops[p].kind == AP_OP_MATMUL &&
                                x->shape[x->rank - 1] != hidden;
            /* With a weight (QK layernorm) or, as Llama 4's L2 norm,
             * without one. */
            s->qk_norm |= on_projection && op->ninputs > 1;
            s->qk_l2 |= on_projection && op->ninputs == 1;
            s->qk_norm_wide |= on_projection && ap_norm_span(g, op) > 1;
            s->post_norm |= op->layer >= 0 && p >= 0 && g->ops[p].kind == AP_OP_MATMUL &&
                            x->shape[x->rank - 1] == hidden;
            s->norm_free |= op->layer >= 0 && !on_projection && op->ninputs == 1;
        }
        if (op->kind != AP_OP_MATMUL || op->layer < 0 || op->noutputs < 1 ||
            op->ninputs < 2 || !is_param(g, op->inputs[1]))
            continue;
        int bias = op->ninputs == 3;
        if (heads_output(g, op)) {
            s->qkv_bias |= bias;
        } else {
            others++;
            biased += bias;
        }
    }
    s->other_bias = !biased ? 0 : biased == others ? 1 : 2;
}

/* Each expert's FFN width (its weights' FFN label), the shared experts'
 * (the ops of the shared_experts module), and the MoE layers' pattern. */
static void moe_shape(const ap_graph *g, ap_model_shape *s)
{
    if (!s->experts)
        return;
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind != AP_OP_MATMUL || op->layer < 0 || op->ninputs < 2)
            continue;
        if (!s->moe_ffn && ap_expert_op(g, i))
            s->moe_ffn = ffn_width(g, op);
        if (!s->shared_ffn && (op->modules & AP_MODULE_SHARED_EXPERTS))
            s->shared_ffn = ffn_width(g, op);
    }
    unsigned char *moe = malloc((size_t)(g->nlayers > 0 ? g->nlayers : 1));
    if (moe && ap_model_moe_layers(g, moe) > 0 &&
        ap_moe_freq_format(moe, g->nlayers, s->moe_freq, sizeof s->moe_freq))
        snprintf(s->moe_freq, sizeof s->moe_freq, "?");
    free(moe);
}

/* Whether router op routes as the first router, which s holds: the shape
 * states one router for the model, as the launchers' flags do. */
static int same_router(const ap_model_shape *s, const ap_op *op)
{
    return op->top_k == s->top_k && op->groups == s->route_groups &&
           op->group_topk == s->route_group_topk &&
           (op->route_score == AP_ROUTE_SIGMOID) == s->route_sigmoid &&
           (!op->route_norm) == s->route_unnormalized && op->route_bias == s->route_bias &&
           op->route_on_input == s->route_on_input && op->route_scale == s->route_scale;
}

void ap_model_shape_of(const ap_graph *g, ap_model_shape *s)
{
    memset(s, 0, sizeof *s);
    s->layers = g->nlayers;
    s->hidden = size_of(g, AP_DIM_HIDDEN);
    s->heads = size_of(g, AP_DIM_HEADS);
    s->kv_heads = size_of(g, AP_DIM_KV_HEADS);
    if (!s->kv_heads)
        s->kv_heads = s->heads;
    s->head_dim = size_of(g, AP_DIM_HEAD_DIM);
    s->ffn = size_of(g, AP_DIM_FFN);
    s->vocab = size_of(g, AP_DIM_VOCAB);
    s->seq = size_of(g, AP_DIM_SEQ);
    s->experts = size_of(g, AP_DIM_EXPERTS);
    s->dtype = g->dtype;
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind == AP_OP_NORM && op->sub == AP_NORM_RMS)
            s->rmsnorm = 1;
        if (op->kind == AP_OP_NORM && op->sub == AP_NORM_LAYER1P)
            s->layernorm_1p = 1;
        if (op->kind == AP_OP_UNARY && op->sub == AP_UNARY_RELU2 && op->layer >= 0)
            s->squared_relu = 1;
        if (op->kind == AP_OP_UNARY && op->sub == AP_UNARY_RELU && op->layer >= 0)
            s->relu = 1;
        for (int k = 0; op->layer >= 0 && k < op->ninputs; k++) {
            int a = ap_glu_activation(g, op, k);
            s->gated |= a >= 0;
            s->swiglu |= a == AP_UNARY_SILU;
            s->quick_geglu |= a == AP_UNARY_QUICK_GELU;
        }
        if (op->kind == AP_OP_MATMUL && op->ninputs == 3)
            s->linear_bias = 1;
        if (op->kind == AP_OP_ATTENTION && op->flash)
            s->flash = 1;
        if (op->kind == AP_OP_ATTENTION && op->ninputs == 4)
            s->sinks = 1;
        if (op->kind == AP_OP_ROUTER && s->top_k && !same_router(s, op))
            s->routers_differ = 1;
        if (op->kind == AP_OP_ROUTER && !s->top_k) {
            s->top_k = op->top_k;
            s->route_groups = op->groups;
            s->route_group_topk = op->group_topk;
            s->route_sigmoid = op->route_score == AP_ROUTE_SIGMOID;
            s->route_unnormalized = !op->route_norm;
            s->route_bias = op->route_bias;
            s->route_on_input = op->route_on_input;
            s->route_scale = op->route_scale;
        }
        if (op->kind == AP_OP_DROPOUT && op->layer >= 0)
            s->hidden_dropout = fmax(s->hidden_dropout, op->dropout_p);
        if (op->kind == AP_OP_ATTENTION)
            s->attention_dropout = fmax(s->attention_dropout, op->dropout_p);
    }
    mla_shape(g, s);
    moe_shape(g, s);
    window_shape(g, s);
    bias_shape(g, s);
    s->learned_positions = has_position_table(g);
    s->rotary_percent = rotary_percent(g);
    nope_shape(g, s);
    s->chunk = ap_model_short_chunk(g, NULL);
    s->parallel_residual = has_parallel_residual(g);
    s->tied_embeddings = head_is_tied(g);
    outer_scales(g, s);
    s->mtp_layers = g->mtp_layers;
    s->bf16_first = g->bf16_first;
    s->bf16_last = g->bf16_last;
    s->rope_base = g->rope_base;
    s->norm_eps = g->norm_eps;
    s->rope_scaling = g->rope_scaling;
    s->rope_factor = g->rope_scaling_factor;
    s->glu_offset = g->glu_offset;
    s->glu_clamp = g->glu_clamp;
}
