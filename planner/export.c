/* export.c -- a plan classified into launcher degrees.
 *
 * A launcher states a layout with a handful of degrees; a plan states one
 * sharding per op. The plan is exportable when the degrees read off its
 * meshes and shardings reproduce every op's sharding through Megatron's
 * tensor-parallel pattern (ap_megatron_layout), which torchtitan and
 * DeepSpeed share where they have tensor parallelism at all. Checking op by
 * op is what keeps an export from flattening a plan into something else. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/emit.h"
#include "planner/parts.h"
#include "planner/planner.h"

/* Messages name files and ops, so they are cut at AP_ERR_LEN rather than
 * checked for length at every call. */
static int errf(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, AP_ERR_LEN, fmt, ap);
    va_end(ap);
    return AP_EINPUT;
}

static const char *const launcher_names[] = {"Megatron-LM", "torchtitan", "DeepSpeed"};
static const char *const launcher_keys[] = {"megatron", "torchtitan", "deepspeed"};

const char *ap_launcher_name(ap_launcher l)
{
    return (unsigned)l < 3 ? launcher_names[l] : "?";
}

int ap_launcher_overlaps_grad(ap_launcher l, ap_zero zero)
{
    return l != AP_LAUNCHER_DEEPSPEED || zero >= AP_ZERO_2;
}

const char *ap_launcher_key(ap_launcher l)
{
    return launcher_keys[l];
}

int ap_launcher_from_name(const char *s, ap_launcher *out, char *err)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, launcher_keys[i])) {
            *out = (ap_launcher)i;
            return AP_OK;
        }
    errf(err, "unknown launcher \"%s\" (megatron, torchtitan, deepspeed)", s);
    return AP_EINPUT;
}

static int model_parallel_kind(const ap_graph *g, char l)
{
    const ap_dim *d = l ? ap_graph_dim(g, l) : NULL;
    return d && (d->kind == AP_DIM_HEADS || d->kind == AP_DIM_KV_HEADS ||
                 d->kind == AP_DIM_FFN || d->kind == AP_DIM_VOCAB);
}

static int same_strategy(const ap_strategy *a, const ap_strategy *b)
{
    return a->axis[0] == b->axis[0] && a->axis[1] == b->axis[1] &&
           a->rs[0] == b->rs[0] && a->rs[1] == b->rs[1];
}

/* The mesh as a launcher sees it: [outer, inner], inner the consecutive
 * ranks. A [d0, 1] mesh has consecutive ranks on axis 0, so it is read as
 * [1, d0] with the axes of every sharding swapped. */
typedef struct {
    int d0, d1, swap;
} frame;

static ap_strategy in_frame(const frame *f, ap_strategy s)
{
    if (f->swap) {
        char a = s.axis[0], r = s.rs[0];
        s.axis[0] = s.axis[1];
        s.rs[0] = s.rs[1];
        s.axis[1] = a;
        s.rs[1] = r;
    }
    return s;
}

/* Without tensor parallelism the whole mesh is one data-parallel group:
 * a label split on both axes (or on the only axis of size > 1) is split
 * over all of it, which Megatron states as that label on axis 0. */
static ap_strategy collapse(const frame *f, ap_strategy s)
{
    if (f->d0 == 1 && !s.axis[0]) {
        s.axis[0] = s.axis[1];
        s.rs[0] = s.rs[1];
        s.axis[1] = s.rs[1] = 0;
    } else if (s.axis[0] && s.axis[0] == s.axis[1] && s.rs[0] == s.rs[1]) {
        s.axis[1] = s.rs[1] = 0;
    }
    return s;
}

static int find_op(const ap_graph *g, const ap_plan_desc *p, int st, int i,
                   char *err)
{
    const char *name = p->stages[st].ops[i].op;
    int k = ap_graph_find_op(g, name);
    if (k < 0)
        errf(err, "%s: stages[%d].blocks[%d]: op \"%s\" is not in "
                 "the model %s; is that the model this plan was made for?",
                 p->source, st, p->stages[st].ops[i].block, name, g->source);
    return k;
}

/* plan.json's names for a shape's norm, MLP and positions, as the plan's
 * writer gives them (planner/output.c), so that a shape read back and one
 * of a reloaded model compare as the plan states them. */
static const char *norm_name(const ap_model_shape *s)
{
    return s->rmsnorm ? "rmsnorm" : s->layernorm_1p ? "layernorm1p" : "layernorm";
}

static const char *mlp_name(const ap_model_shape *s)
{
    return s->swiglu ? "swiglu" : s->quick_geglu ? "quick_geglu" : s->gated ? "gated"
         : s->squared_relu ? "relu2" : s->relu ? "relu" : "plain";
}

static const char *positions_name(const ap_model_shape *s)
{
    return s->learned_positions ? "learned" : s->rotary_percent != 0 ? "rotary" : "none";
}

static int shape_differs(const ap_graph *g, const ap_plan_desc *p, const char *field,
                         const char *want, const char *have, char *err)
{
    return errf(err, "%s: model_shape.%s is %s but the model %s has %s; pass the plan's "
                "model with --model", p->source, field, want, g->source, have);
}

/* Megatron-LM's --multi-latent-attention and its dimensions, and
 * --softmax-type learnable, which the export states from the reloaded
 * model: a plan without them (every plan from before them) is a model
 * without MLA or sinks, so it is planned again to export a model that has
 * them. */
static int check_attention(const ap_graph *g, const ap_model_shape *m,
                           const ap_plan_desc *p, char *err)
{
    const ap_model_shape *w = &p->shape;
    char a[32], b[32];
    if (!w->mla != !m->mla)
        return shape_differs(g, p, "multi_latent_attention", w->mla ? "true" : "false",
                             m->mla ? "true" : "false", err);
    const char *names[] = {"q_lora_rank", "kv_lora_rank", "qk_head_dim",
                           "qk_pos_emb_head_dim", "v_head_dim"};
    long long want[] = {w->q_lora, w->kv_lora, w->qk_nope_dim, w->qk_rope_dim, w->v_head_dim};
    long long have[] = {m->q_lora, m->kv_lora, m->qk_nope_dim, m->qk_rope_dim, m->v_head_dim};
    for (int i = 0; m->mla && i < 5; i++)
        if (want[i] != have[i]) {
            snprintf(a, sizeof a, "%lld", want[i]);
            snprintf(b, sizeof b, "%lld", have[i]);
            return shape_differs(g, p, names[i], a, b, err);
        }
    if (!w->sinks != !m->sinks)
        return shape_differs(g, p, "attention_sinks", w->sinks ? "true" : "false",
                             m->sinks ? "true" : "false", err);
    return AP_OK;
}

/* What the exports state of the model's structure from the reloaded model
 * (Megatron-LM's flags, torchtitan's and DeepSpeed's notes) must be what
 * the plan was priced with, or an export of another model (--model) would
 * state that model's structure under this plan's layout: tied embeddings
 * without --untie-embeddings-and-output-weights, a QK norm the plan never
 * priced. Fields written either way compare whenever the plan has them
 * (qkv_bias, qk_layernorm and parallel_residual read as -1 in plans from
 * before them); those written only where the model has them
 * (qk_norm_across_heads, ..., the router's) are false when absent, so a
 * plan from before one of them needs planning again to export a model
 * that has it. */
static int check_structure(const ap_graph *g, const ap_model_shape *m,
                           const ap_plan_desc *p, char *err)
{
    const ap_model_shape *w = &p->shape;
    const char *names[] = {"head_dim", "seq", "top_k", "route_groups", "route_group_topk"};
    long long want[] = {w->head_dim, w->seq, w->top_k, w->route_groups, w->route_group_topk};
    long long have[] = {m->head_dim, m->seq, m->top_k, m->route_groups, m->route_group_topk};
    char a[32], b[32];
    for (int i = 0; i < 5; i++)
        if (want[i] != have[i]) {
            snprintf(a, sizeof a, "%lld", want[i]);
            snprintf(b, sizeof b, "%lld", have[i]);
            return shape_differs(g, p, names[i], a, b, err);
        }
    const struct {
        const char *name, *want, *have;
    } text[] = {
        {"dtype", ap_dtype_name(w->dtype), ap_dtype_name(m->dtype)},
        {"norm", norm_name(w), norm_name(m)},
        {"mlp", mlp_name(w), mlp_name(m)},
        {"positions", positions_name(w), positions_name(m)},
        {"router_score", w->route_sigmoid ? "sigmoid" : "softmax",
         m->route_sigmoid ? "sigmoid" : "softmax"},
        {"nope_layer_freq", w->nope_layers ? w->nope_freq : "(none)",
         m->nope_layers ? m->nope_freq : "(none)"},
    };
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++)
        if (strcmp(text[i].want, text[i].have)) {
            char qa[300], qb[300];
            /* Quoted as plan.json writes them; "(none)" is no value. */
            snprintf(qa, sizeof qa, *text[i].want == '(' ? "%s" : "\"%s\"", text[i].want);
            snprintf(qb, sizeof qb, *text[i].have == '(' ? "%s" : "\"%s\"", text[i].have);
            return shape_differs(g, p, text[i].name, qa, qb, err);
        }
    const struct {
        const char *name;
        int want, have;
    } flag[] = {
        {"tied_embeddings", w->tied_embeddings, m->tied_embeddings},
        {"linear_bias", w->linear_bias, m->linear_bias},
        {"flash_attention", w->flash, m->flash},
        {"parallel_residual", w->parallel_residual, m->parallel_residual},
        {"qkv_bias", w->qkv_bias, m->qkv_bias},
        {"qk_layernorm", w->qk_norm, m->qk_norm},
        {"qk_norm_across_heads", w->qk_norm_wide, m->qk_norm_wide},
        {"qk_l2_norm", w->qk_l2, m->qk_l2},
        {"post_norms", w->post_norm, m->post_norm},
        {"weightless_norms", w->norm_free, m->norm_free},
        {"router_normalize", !w->route_unnormalized, !m->route_unnormalized},
        {"router_expert_bias", w->route_bias, m->route_bias},
        {"router_probs_on_input", w->route_on_input, m->route_on_input},
    };
    for (size_t i = 0; i < sizeof flag / sizeof flag[0]; i++)
        if (flag[i].want >= 0 && !flag[i].want != !flag[i].have)
            return shape_differs(g, p, flag[i].name, flag[i].want ? "true" : "false",
                                 flag[i].have ? "true" : "false", err);
    /* No factor on the weights is a factor of 1. */
    double ws = w->route_scale > 0 ? w->route_scale : 1;
    double ms = m->route_scale > 0 ? m->route_scale : 1;
    if (ws != ms)
        return shape_differs(g, p, "router_scale", ap_number_exact(ws, a, sizeof a),
                             ap_number_exact(ms, b, sizeof b), err);
    return check_attention(g, m, p, err);
}

static int check_shape(const ap_graph *g, const ap_model_shape *m,
                       const ap_plan_desc *p, char *err)
{
    if (p->seq != m->seq) {
        errf(err, "%s: seq_length is %d but the model %s has %lld",
                 p->source, p->seq, g->source, m->seq);
        return AP_EINPUT;
    }
    if (!p->has_shape)
        return AP_OK;
    const char *names[] = {"layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "experts",
                           "mtp_layers", "bf16_first_layers", "bf16_last_layers"};
    long long want[] = {p->shape.layers, p->shape.hidden, p->shape.heads,
                        p->shape.kv_heads, p->shape.ffn, p->shape.vocab, p->shape.experts,
                        p->shape.mtp_layers, p->shape.bf16_first, p->shape.bf16_last};
    long long have[] = {m->layers, m->hidden, m->heads, m->kv_heads, m->ffn, m->vocab, m->experts,
                        m->mtp_layers, m->bf16_first, m->bf16_last};
    for (int i = 0; i < 10; i++)
        if (want[i] != have[i]) {
            errf(err, "%s: model_shape.%s is %lld but the model %s "
                     "has %lld; pass the plan's model with --model", p->source,
                     names[i], want[i], g->source, have[i]);
            return AP_EINPUT;
        }
    /* Plans written before these fields existed have neither. */
    if (p->shape.moe_ffn &&
        (p->shape.moe_ffn != m->moe_ffn || p->shape.shared_ffn != m->shared_ffn)) {
        errf(err, "%s: model_shape's experts are %lld wide with %lld of shared experts, "
                 "but the model %s has %lld and %lld; pass the plan's model with --model",
                 p->source, p->shape.moe_ffn, p->shape.shared_ffn, g->source, m->moe_ffn,
                 m->shared_ffn);
        return AP_EINPUT;
    }
    if (p->shape.moe_ffn && strcmp(p->shape.moe_freq, m->moe_freq)) {
        errf(err, "%s: model_shape.moe_layer_freq is \"%s\" but the model %s has \"%s\" "
                 "(\"\" is every layer); pass the plan's model with --model", p->source,
                 p->shape.moe_freq, g->source, m->moe_freq);
        return AP_EINPUT;
    }
    if (p->shape.window != m->window || strcmp(p->shape.window_freq, m->window_freq)) {
        errf(err, "%s: model_shape's sliding window is %lld keys on \"%s\" but the model %s "
                 "has %lld on \"%s\" (0: none; \"\": every layer); pass the plan's model "
                 "with --model", p->source, p->shape.window, p->shape.window_freq, g->source,
                 m->window, m->window_freq);
        return AP_EINPUT;
    }
    /* What the exports state of the reloaded model beside its shape, where
     * the plan says it: the dropout (-1 in a plan from before those fields)
     * and the numbers of its arithmetic (0 in one from before session 31,
     * or where the model does not say), compared exactly, since the plan
     * writes them so that they read back exactly. */
    const struct {
        const char *name;
        double want, have;
        int said;
    } num[] = {
        {"hidden_dropout", p->shape.hidden_dropout, m->hidden_dropout,
         p->shape.hidden_dropout >= 0},
        {"attention_dropout", p->shape.attention_dropout, m->attention_dropout,
         p->shape.attention_dropout >= 0},
        {"rope_base", p->shape.rope_base, m->rope_base, p->shape.rope_base > 0},
        {"norm_eps", p->shape.norm_eps, m->norm_eps, p->shape.norm_eps > 0},
        {"rope_scaling_factor", p->shape.rope_factor, m->rope_factor, p->shape.rope_factor > 0},
    };
    char a[32], b[32];
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
        if (num[i].said && num[i].want != num[i].have)
            return shape_differs(g, p, num[i].name, ap_number_exact(num[i].want, a, sizeof a),
                                 ap_number_exact(num[i].have, b, sizeof b), err);
    if (p->shape.rope_scaling && p->shape.rope_scaling != m->rope_scaling) {
        snprintf(a, sizeof a, "\"%s\"", ap_rope_scaling_name(p->shape.rope_scaling));
        snprintf(b, sizeof b, m->rope_scaling ? "\"%s\"" : "(none)",
                 ap_rope_scaling_name(m->rope_scaling));
        return shape_differs(g, p, "rope_scaling", a, b, err);
    }
    if (p->shape.rotary_percent >= 0 && p->shape.rotary_percent != m->rotary_percent) {
        errf(err, "%s: model_shape.rotary_percent is %s but the model %s rotates "
                 "%s of each head; pass the plan's model with --model", p->source,
                 ap_number_exact(p->shape.rotary_percent, a, sizeof a), g->source,
                 ap_number_exact(m->rotary_percent, b, sizeof b));
        return AP_EINPUT;
    }
    return check_structure(g, m, p, err);
}

/* "[2, 8]", or "[2, 8] x4 replicas" for data-parallel copies of it. */
static void mesh_text(const ap_plan_desc_stage *st, char *buf, size_t len)
{
    if (st->replicas > 1)
        snprintf(buf, len, "[%d, %d] x%d replicas", st->mesh[0], st->mesh[1], st->replicas);
    else
        snprintf(buf, len, "[%d, %d]", st->mesh[0], st->mesh[1]);
}

/* The layers of a chunked plan's model chunks, all of them. */
static long long chunk_total(const ap_plan_desc *p)
{
    long long n = 0;
    for (long long i = 0; i < (long long)p->nstages * p->vchunks; i++)
        n += p->chunk_layers[i];
    return n;
}

/* Layers of model chunk c of stage s: the plan's own counts, or the
 * stage's layers cut into vpp pieces (rounded up). */
static int chunk_size(const ap_plan_desc *p, int v, int s, int c)
{
    if (p->chunk_layers)
        return p->chunk_layers[(long long)c * p->nstages + s];
    return (p->stages[s].nlayers + v - 1) / v;
}

static int check_stages(const ap_graph *g, const ap_plan_desc *p,
                        const char *who, char *err)
{
    const ap_plan_desc_stage *s0 = &p->stages[0];
    for (int i = 1; i < p->nstages; i++) {
        const ap_plan_desc_stage *st = &p->stages[i];
        if (st->mesh[0] != s0->mesh[0] || st->mesh[1] != s0->mesh[1] ||
            st->replicas != s0->replicas || st->expert_mesh[0] != s0->expert_mesh[0] ||
            st->expert_mesh[1] != s0->expert_mesh[1]) {
            char a[48], b[48];
            mesh_text(st, a, sizeof a);
            mesh_text(s0, b, sizeof b);
            errf(err, "%s: stage %d has mesh %s on %d GPUs but stage 0 has %s on %d; "
                     "%s gives every pipeline stage the same tensor x data layout",
                     p->source, i, a, st->ngpus, b, s0->ngpus, who);
            return AP_EINPUT;
        }
        if (st->recompute != s0->recompute) {
            errf(err, "%s: stage %d recomputes %s but stage 0 %s; %s "
                     "applies one recomputation policy to every stage", p->source, i,
                     ap_emit_recompute_name(st->recompute), ap_emit_recompute_name(s0->recompute), who);
            return AP_EINPUT;
        }
    }
    for (int i = 0; i < p->nstages; i++) {
        const ap_plan_desc_stage *st = &p->stages[i];
        if (st->embedding != (i == 0) || st->head != (i == p->nstages - 1)) {
            errf(err, "%s: stage %d %s the embedding and %s the head; "
                     "%s puts the embedding on the first stage and the head on the last",
                     p->source, i, st->embedding ? "has" : "lacks",
                     st->head ? "has" : "lacks", who);
            return AP_EINPUT;
        }
    }
    const ap_plan_desc_stage *last = &p->stages[p->nstages - 1];
    long long held = p->chunk_layers ? chunk_total(p) : last->first_layer + last->nlayers;
    if (held != g->nlayers) {
        errf(err, "%s: the stages hold %lld layers but the model %s has %d",
                 p->source, held, g->source, g->nlayers);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Layer k of stage s as the plan's writer counts it (ap_stage_chunk_of):
 * from the stage's first layer, or under chunk_layers from its chunks in
 * Megatron's virtual-stage order. */
static int stage_layer(const ap_plan_desc *p, int s, int k)
{
    int v = p->vchunks > 1 ? p->vchunks : 1;
    if (!p->chunk_layers || v == 1)
        return p->stages[s].first_layer + k;
    long long before = 0;
    for (int c = 0; c < v; c++) {
        int n = p->chunk_layers[(long long)c * p->nstages + s];
        if (k < n) {
            for (long long i = 0; i < (long long)c * p->nstages + s; i++)
                before += p->chunk_layers[i];
            return (int)(before + k);
        }
        k -= n;
    }
    return p->stages[s].first_layer + k;
}

static void mark_block(const ap_parts *m, int b, unsigned char *want)
{
    for (int i = 0; i < m->nops[b]; i++)
        want[m->ops[b][i]] = 1;
}

/* The ops stage s must list: those of the blocks it runs (the embedding's,
 * the head's, one representative layer per layer class it holds), marked
 * 1 in want[g->nops]. A class's block is marked once per layer of it, which
 * marks the same ops again and needs no set of the blocks seen. */
static void wanted_ops(const ap_graph *g, const ap_parts *m, const ap_plan_desc *p, int s,
                       unsigned char *want)
{
    const ap_plan_desc_stage *st = &p->stages[s];
    memset(want, 0, (size_t)g->nops);
    if (st->embedding)
        mark_block(m, 0, want);
    if (st->head)
        mark_block(m, 1, want);
    for (int k = 0; k < st->nlayers; k++) {
        int l = stage_layer(p, s, k);
        if (l >= 0 && l < g->nlayers)
            mark_block(m, m->layer_block[l], want);
    }
}

/* Each stage lists every op of the blocks it runs, once, and no other.
 * The launcher's degrees are read off these shardings (infer_degrees), so
 * a plan edited to drop a block, or to give an op two shardings, would
 * export another layout than the one priced. */
static int check_stage_ops(const ap_graph *g, const ap_parts *m, const ap_plan_desc *p,
                           unsigned char *want, char *err)
{
    for (int s = 0; s < p->nstages; s++) {
        const ap_plan_desc_stage *st = &p->stages[s];
        wanted_ops(g, m, p, s, want);
        for (int i = 0; i < st->nops; i++) {
            int k = find_op(g, p, s, i, err);
            if (k < 0)
                return AP_EINPUT;
            if (want[k] != 1)
                return errf(err, "%s: stages[%d].blocks[%d]: op \"%s\" %s", p->source, s,
                            st->ops[i].block, st->ops[i].op,
                            want[k] ? "is listed twice; give each op one sharding"
                                    : "is not in the layers, embedding or head of this "
                                      "stage");
            want[k] = 2;
        }
        for (int k = 0; k < g->nops; k++)
            if (want[k] == 1)
                return errf(err, "%s: stages[%d].blocks: no sharding for op \"%s\"%s; "
                            "every op of the stage's blocks needs one (is the plan cut "
                            "short or edited?)", p->source, s, g->ops[k].name,
                            g->ops[k].layer >= 0 ? " (its layer class's representative)"
                                                 : "");
    }
    return AP_OK;
}

static int check_coverage(const ap_graph *g, const ap_plan_desc *p, char *err)
{
    ap_parts m;
    int rc = ap_parts_build(g, &m, err);
    if (rc)
        return rc;
    unsigned char *want = malloc((size_t)(g->nops ? g->nops : 1));
    if (!want) {
        ap_parts_free(&m);
        snprintf(err, AP_ERR_LEN, "out of memory checking the plan's ops");
        return AP_EINTERNAL;
    }
    rc = check_stage_ops(g, &m, p, want, err);
    free(want);
    ap_parts_free(&m);
    return rc;
}

/* Reads tp, dp, cp, ep and sp off the shardings (in the launcher frame);
 * the mesh's data-parallel replicas multiply dp. */
static void infer_degrees(const ap_graph *g, const ap_plan_desc *p, const frame *f,
                          ap_degrees *d)
{
    char seq = ap_graph_label_of(g, AP_DIM_SEQ), batch = ap_graph_label_of(g, AP_DIM_BATCH);
    char experts = ap_graph_label_of(g, AP_DIM_EXPERTS);
    d->tp = 1;
    for (int st = 0; st < p->nstages && f->d1 > 1; st++)
        for (int i = 0; i < p->stages[st].nops; i++)
            if (model_parallel_kind(g, in_frame(f, p->stages[st].ops[i].s).axis[1]))
                d->tp = f->d1;
    int outer = d->tp > 1 ? f->d0 : f->d0 * f->d1;
    int on_batch = 0, on_seq = 0, on_experts = 0;
    for (int st = 0; st < p->nstages; st++)
        for (int i = 0; i < p->stages[st].nops; i++) {
            ap_strategy s = in_frame(f, p->stages[st].ops[i].s);
            if (d->tp == 1)
                s = collapse(f, s);
            on_batch |= batch && s.axis[0] == batch;
            on_seq |= seq && s.axis[0] == seq;
            on_experts |= experts && s.axis[0] == experts;
            d->sp |= d->tp > 1 && seq && (s.axis[1] == seq || s.rs[1] == seq);
        }
    d->cp = outer > 1 && on_seq && !on_batch ? outer : 1;
    d->dp = outer / d->cp * (p->stages[0].replicas > 1 ? p->stages[0].replicas : 1);
    d->ep = on_experts ? d->dp : 1;
    d->etp = experts ? d->tp : 1;
    /* MoE parallel folding: the experts' own mesh states ep and etp. */
    if (experts && p->stages[0].expert_mesh[0]) {
        d->ep = p->stages[0].expert_mesh[0];
        d->etp = p->stages[0].expert_mesh[1];
    }
}

static void to_megatron(const ap_degrees *d, ap_megatron *m)
{
    ap_megatron_default(m);
    m->tp = d->tp;
    m->pp = d->pp;
    m->dp = d->dp;
    m->cp = d->cp;
    m->ep = d->ep;
    m->vpp = d->vpp;
    m->mbs = d->mbs;
    m->sp = d->sp;
    m->gbs = d->gbs;
    m->recompute = d->recompute;
    m->zero = d->zero;
    m->overlap_grad = d->overlap_grad;
    m->overlap_param = d->overlap_param;
    m->first = d->first;
    m->last = d->last;
    m->account_embedding = d->account_embedding;
    m->account_loss = d->account_loss;
    m->etp = d->etp;
    m->run = d->run;
    m->recompute_method = d->recompute_method;
    m->recompute_layers = d->recompute_layers;
}

/* Every op's sharding must be the one Megatron's pattern gives it. */
static int check_ops(const ap_graph *g, const ap_plan_desc *p, const frame *f,
                     const ap_degrees *d, ap_launcher to, char *err)
{
    const char *who = ap_launcher_name(to);
    ap_megatron m;
    to_megatron(d, &m);
    for (int st = 0; st < p->nstages; st++)
        for (int i = 0; i < p->stages[st].nops; i++) {
            int k = find_op(g, p, st, i, err);
            if (k < 0)
                return AP_EINPUT;
            ap_strategy have = in_frame(f, p->stages[st].ops[i].s);
            if (d->tp == 1)
                have = collapse(f, have);
            /* Under folding an expert op's sharding is on the expert mesh,
             * as ap_megatron_layout gives it. */
            if (p->stages[st].expert_mesh[0] && ap_expert_op(g, k))
                have = p->stages[st].ops[i].s;
            ap_strategy want = ap_megatron_layout(g, &m, k);
            if (same_strategy(&have, &want))
                continue;
            char hs[64], ws[64];
            ap_strategy_format(&p->stages[st].ops[i].s, hs, sizeof hs);
            ap_strategy_format(&want, ws, sizeof ws);
            errf(err, "%s: stage %d, op \"%s\" (blocks[%d]) is sharded "
                     "\"%s\" on mesh [%d, %d]; %s with tp=%d dp=%d cp=%d sp=%d would "
                     "shard it \"%s\" on mesh [%d, %d]: this plan is outside %s's "
                     "tensor-parallel pattern (plan with --target %s to stay inside it)",
                     p->source, st, p->stages[st].ops[i].op,
                     p->stages[st].ops[i].block, hs, p->stages[st].mesh[0],
                     p->stages[st].mesh[1], who, d->tp, d->dp, d->cp, d->sp, ws,
                     d->cp > 1 && d->dp > 1 ? d->cp : d->dp * d->cp, d->tp, who,
                     to == AP_LAUNCHER_MEGATRON ? "megatron"
                     : to == AP_LAUNCHER_TORCHTITAN ? "torchtitan" : "deepspeed");
            return AP_EINPUT;
        }
    return AP_OK;
}

static int batch_degrees(const ap_plan_desc *p, ap_degrees *d, char *err)
{
    double mbs = p->micro_batch / d->dp;
    if (mbs < 1 || mbs != floor(mbs) || mbs > 1e9) {
        errf(err, "%s: micro_batch %g is not a whole number of "
                 "sequences per data-parallel replica (dp=%d)", p->source,
                 p->micro_batch, d->dp);
        return AP_EINPUT;
    }
    d->mbs = (int)mbs;
    d->gbs = p->global_batch;
    d->nmicro = p->nmicro;
    if (fabs(p->nmicro * p->micro_batch - p->global_batch) > 1e-9 * p->global_batch) {
        errf(err, "%s: num_micro_batches %d x micro_batch %g is not "
                 "global_batch %g", p->source, p->nmicro, p->micro_batch, p->global_batch);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Uneven stages that Megatron-LM's --decoder-first/last-pipeline-num-layers
 * state: every stage but the first and the last holds the same count. */
static void first_last(const ap_plan_desc *p, ap_degrees *d)
{
    int n = p->nstages, mid = n > 2 ? p->stages[1].nlayers : 0;
    for (int i = 1; i < n - 1; i++)
        if (p->stages[i].nlayers != mid)
            return;
    d->first = n == 2 || p->stages[0].nlayers != mid ? p->stages[0].nlayers : 0;
    d->last = n == 2 || p->stages[n - 1].nlayers != mid ? p->stages[n - 1].nlayers : 0;
}

/* Stages as Megatron-LM's split gives them when it counts the embedding
 * (e = 1) and the loss (l = 1) as layers: the L + e + l slots over pp*vpp
 * even chunks, the first and last stage a layer fewer. Interleaved uneven
 * stages that first and last cannot state (their layers do not divide
 * into the chunks) may be this layout; sets d's flags when they are. */
static int accounted_split(const ap_graph *g, const ap_plan_desc *p, ap_degrees *d)
{
    int n = p->nstages;
    for (int e = 1; e >= 0; e--)
        for (int l = 1; l >= 0; l--) {
            long slots = (long)g->nlayers + e + l;
            if (!(e || l) || n < 2 || slots % ((long)n * d->vpp))
                continue;
            int per = (int)(slots / n), ok = 1;
            for (int i = 0; i < n; i++)
                ok &= p->stages[i].nlayers ==
                      per - (i == 0 ? e : 0) - (i == n - 1 ? l : 0);
            if (!ok)
                continue;
            d->account_embedding = e;
            d->account_loss = l;
            d->first = d->last = 0;
            return 1;
        }
    return 0;
}

/* Interleaving needs every stage's layers to divide into the chunks. */
static int chunks_divide(const ap_graph *g, const ap_plan_desc *p, const ap_degrees *d)
{
    if (d->even)
        return g->nlayers % (d->pp * d->vpp) == 0;
    if (!d->first && !d->last)
        return 0;
    for (int i = 0; i < p->nstages; i++)
        if (p->stages[i].nlayers % d->vpp)
            return 0;
    return 1;
}

static int check_pipeline(const ap_graph *g, const ap_plan_desc *p, ap_degrees *d,
                          char *err)
{
    d->pp = p->nstages;
    d->vpp = p->vchunks;
    d->schedule = p->schedule;
    d->overlap_grad = !p->serial_grad_sync;
    d->overlap_param = !p->serial_param_gather && p->zero == AP_ZERO_1 && d->overlap_grad;
    d->run = p->run;
    d->even = g->nlayers % d->pp == 0;
    for (int i = 0; i < p->nstages; i++)
        d->even &= p->stages[i].nlayers == g->nlayers / d->pp;
    if ((d->vpp > 1) != (d->schedule == AP_SCHED_INTERLEAVED)) {
        errf(err, "%s: virtual_stages %d does not match the %s schedule",
                 p->source, d->vpp, ap_emit_schedule_name(d->schedule));
        return AP_EINPUT;
    }
    if (!d->even)
        first_last(p, d);
    int stated = d->vpp == 1 || chunks_divide(g, p, d) || accounted_split(g, p, d);
    /* Model chunks that no split flag places are Megatron-LM's layout
     * string, which states any split and takes no flag beside it. */
    if (p->chunk_layers && !(stated && ap_emit_flags_state_chunks(p, d))) {
        d->even = d->first = d->last = d->account_embedding = d->account_loss = 0;
        return AP_OK;
    }
    if (!stated) {
        errf(err, "%s: %d virtual stages per stage need the %d layers "
                 "split evenly into pp*vpp = %d chunks", p->source, d->vpp,
                 g->nlayers, d->pp * d->vpp);
        return AP_EINPUT;
    }
    return AP_OK;
}

static int refuse(const ap_plan_desc *p, char *err, const char *fmt, const char *who,
                  const char *what)
{
    char msg[AP_ERR_LEN];
    errf(msg, fmt, who, what);
    return errf(err, "%s: %s", p->source, msg);
}

/* torchtitan's expert parallelism (ParallelDims._validate and build_mesh)
 * borrows its ranks from FSDP's shard dimension and the context-parallel
 * ranks, with the tensor-parallel ranks too when the experts are not split
 * by them (etp 1): ep = dp_shard_in_ep x cp (x tp), contiguous inside the
 * shard ranks, which is Megatron-Core's order for the folded expert mesh.
 * A plan without sharding (ZeRO-0: DDP, no shard dimension) has no ranks
 * to borrow, and other splits have no torchtitan mesh. */
static int titan_experts(const ap_plan_desc *p, const ap_degrees *d, const char *who,
                         char *err)
{
    char what[96];
    if (d->ep <= 1)
        return AP_OK;
    int borrowed = d->cp * (d->etp == 1 ? d->tp : 1);
    if (d->etp != d->tp && d->etp != 1) {
        snprintf(what, sizeof what, "etp=%d with tp=%d", d->etp, d->tp);
        return refuse(p, err, "%s splits experts by all of the tensor-parallel ranks or "
                      "none (expert_tensor_parallel_degree tp or 1); the plan uses %s: "
                      "export it to Megatron-LM", who, what);
    }
    if (d->ep % borrowed) {
        snprintf(what, sizeof what, "ep=%d with cp=%d%s", d->ep, d->cp,
                 d->etp == 1 ? " and the experts whole on each tensor-parallel rank" : "");
        return refuse(p, err, "%s's expert parallelism spans every context-parallel rank "
                      "(and every tensor-parallel one under expert_tensor_parallel_degree "
                      "1); the plan uses %s: export it to Megatron-LM", who, what);
    }
    if ((ap_emit_titan_shard(d) * borrowed) % d->ep)
        return refuse(p, err, "%s's expert parallelism borrows FSDP's shard ranks "
                      "(data_parallel_shard_degree), which a plan without sharding has "
                      "none of; the plan uses %s: plan with --target torchtitan, which "
                      "prices FSDP for it", who, "ZeRO-0 (DDP) with expert parallelism");
    return AP_OK;
}

/* Megatron-LM's ZeRO-3 is PyTorch's FSDP2 (--use-torch-fsdp2), which
 * validate_args (arguments.py at 000c4ac2) allows only without pipeline
 * parallelism, expert parallelism, the distributed optimizer and gradient
 * accumulation fusion, with untied embeddings, and not under --fp16; it
 * turns --fp8-param-gather off (Transformer Engine 2.0 on), and Megatron-
 * Core's TorchFullyShardedDataParallel gives fully_shard no mixed-precision
 * policy, so gradients are reduced in the parameters' dtype. ZeRO-2 it
 * states only as Megatron FSDP's optim_grads strategy, which the export
 * does not write. */
static int check_megatron_zero(const ap_plan_desc *p, const ap_degrees *d,
                               const ap_model_shape *s, const char *who, char *err)
{
    static const char fsdp2[] = "%s runs ZeRO-3 as PyTorch's FSDP2 (--use-torch-fsdp2), "
                                "which it asserts %s";
    char what[192];
    if (d->zero == AP_ZERO_2)
        return refuse(p, err, "%s's distributed optimizer shards optimizer states only "
                      "(ZeRO-1) and --use-torch-fsdp2 weights and gradients too (ZeRO-3); "
                      "the plan uses %s, which only Megatron FSDP's "
                      "--data-parallel-sharding-strategy optim_grads states and this "
                      "export does not write: estimate with zero=1 or zero=3", who,
                      "ZeRO-2");
    if (d->zero != AP_ZERO_3)
        return AP_OK;
    if (d->pp > 1 || d->ep > 1) {
        snprintf(what, sizeof what, "\"is not supported with %s parallelism\"; the plan "
                 "uses %s=%d", d->pp > 1 ? "pipeline" : "expert", d->pp > 1 ? "pp" : "ep",
                 d->pp > 1 ? d->pp : d->ep);
        return refuse(p, err, fsdp2, who, what);
    }
    if (!d->run.no_grad_fusion)
        return refuse(p, err, fsdp2, who, "\"is not supported with gradient accumulation "
                      "fusion\"; the plan was priced with it: estimate with "
                      "no_grad_fusion=1 (--no-gradient-accumulation-fusion)");
    if (s->tied_embeddings)
        return refuse(p, err, fsdp2, who, "\"requires --untie-embeddings-and-output-"
                      "weights\"; the model ties its embedding and output layer");
    if (s->dtype == AP_FP16)
        return refuse(p, err, fsdp2, who, "\"not supported with fp16 yet\"; the model "
                      "is fp16");
    if (d->run.fp8_param_gather)
        return refuse(p, err, "%s turns --fp8-param-gather off under --use-torch-fsdp2 "
                      "(Transformer Engine 2.0 and later), gathering %s: estimate with "
                      "fp8_param_gather=0", who, "bf16 weights where the plan priced FP8 ones");
    if (d->run.grad_fp32)
        return refuse(p, err, "%s's --use-torch-fsdp2 reduces gradients in the "
                      "parameters' dtype (fully_shard without a mixed-precision policy); "
                      "%s: estimate with grad_fp32=0", who, "the plan has fp32 gradients "
                      "(grad_reduce_in_fp32)");
    return AP_OK;
}

/* What each launcher cannot state, beyond the shared checks. */
static int check_launcher(const ap_plan_desc *p, const ap_degrees *d,
                          const ap_model_shape *s, ap_launcher to, char *err)
{
    const char *who = ap_launcher_name(to);
    /* A synchronous tensor-parallel backward is Megatron-LM of 2021 and
     * earlier, which the exports do not target. */
    if (d->run.tp_sync && d->tp > 1)
        return refuse(p, err, "%s's command line cannot state %s the plan was priced "
                      "with: estimate without tp_sync to export it", who,
                      "the synchronous tensor-parallel backward of Megatron-LM before "
                      "2022 (tp_sync=1)");
    /* torchtitan and DeepSpeed run the user's own loss, not Megatron-Core's
     * kernels, so a plan priced with them would promise what the launcher
     * does not run. */
    if (to != AP_LAUNCHER_MEGATRON && d->run.cross_entropy != AP_CE_UNFUSED)
        return refuse(p, err, "%s computes the loss with the training script's own "
                      "cross entropy, not %s the plan was priced with: export it to "
                      "Megatron-LM, or estimate with cross_entropy=unfused", who,
                      d->run.cross_entropy == AP_CE_TE
                          ? "Transformer Engine's (--cross-entropy-fusion-impl te)"
                          : "Megatron-Core's fused one (--cross-entropy-loss-fusion)");
    /* Their gradient buffers are their own (torchtitan's FSDP reduces in
     * its mixed_precision_reduce, DeepSpeed in its own dtypes), not the fp32
     * main gradients Megatron-LM keeps. */
    if (to != AP_LAUNCHER_MEGATRON && d->run.grad_fp32)
        return refuse(p, err, "%s keeps its own gradient buffers, not %s the plan was "
                      "priced with: export it to Megatron-LM, or estimate with "
                      "grad_fp32=0", who, "Megatron-LM's fp32 main gradients "
                      "(grad_reduce_in_fp32)");
    /* torchtitan's context_parallel has rotate methods named allgather and
     * alltoall, but neither runs Transformer Engine's kernels: allgather
     * gathers K and V once and then runs a kernel and a merge per chunk
     * as the ring does, alltoall passes K and V round the ring with
     * all-to-alls (torch.distributed.tensor.experimental's
     * _AllGatherRotater and _AllToAllRotater), not Ulysses' exchange of
     * heads. DeepSpeed's exports state no context parallelism. */
    if (to != AP_LAUNCHER_MEGATRON && d->run.cp_comm != AP_CP_P2P)
        return refuse(p, err, "%s does not run %s the plan was priced with: export it "
                      "to Megatron-LM, or estimate with cp_comm=p2p (cp=1 under a sliding "
                      "window, which the ring refuses)", who,
                      d->run.cp_comm == AP_CP_A2A
                          ? "Transformer Engine's all-to-all context parallelism "
                            "(cp_comm_type a2a)"
                          : "Transformer Engine's all-gather context parallelism "
                            "(cp_comm_type allgather)");
    if (to != AP_LAUNCHER_MEGATRON && d->run.moe_a2a_overlap)
        return refuse(p, err, "%s has no %s the plan was priced with: export it to "
                      "Megatron-LM, or estimate with moe_a2a_overlap=0", who,
                      "overlap of the expert all-to-alls across micro-batches "
                      "(Megatron-Core's --overlap-moe-expert-parallel-comm)");
    if (to != AP_LAUNCHER_MEGATRON && d->run.defer_wgrad)
        return refuse(p, err, "%s does not defer %s the plan was priced with: export it "
                      "to Megatron-LM, or estimate with defer_wgrad=0", who,
                      "the output layer's weight gradients to the pipeline flush "
                      "(Megatron-Core's --defer-embedding-wgrad-compute)");
    /* torchtitan steps torch.optim's AdamW, whose moments follow the
     * parameters' fp32 dtype under FSDP's mixed precision, and DeepSpeed
     * keeps its fp32 optimizer states: neither runs Transformer Engine's
     * FusedAdam with narrower states. */
    char states[96];
    snprintf(states, sizeof states, "%s, %s and %s", ap_opt_dtype_name(d->run.opt.main_params),
             ap_opt_dtype_name(d->run.opt.exp_avg), ap_opt_dtype_name(d->run.opt.exp_avg_sq));
    if (to != AP_LAUNCHER_MEGATRON && !ap_opt_dtypes_fp32(&d->run.opt))
        return refuse(p, err, "%s keeps fp32 optimizer states, not the %s the plan was "
                      "priced with (Megatron-LM's precision-aware optimizer): export it "
                      "to Megatron-LM, or estimate with "
                      "main_params=fp32,exp_avg=fp32,exp_avg_sq=fp32", who, states);
    if (to == AP_LAUNCHER_MEGATRON) {
        if (d->run.opt.main_params == AP_OPT_NONE)
            return refuse(p, err, "%s's distributed optimizer keeps main weights (fp32, "
                          "or fp16 under --main-params-dtype); the plan's %s has none, "
                          "as apex's DistributedFusedAdam under NeMo's optim dtype bf16 "
                          "steps the model's own weights", who, states);
        if (d->run.opt.main_params == AP_OPT_REMAINDER &&
            (d->run.fp8_param_gather || (p->has_shape && p->shape.dtype != AP_BF16)))
            return refuse(p, err, "%s keeps main-weight remainders (Transformer Engine's "
                          "store_param_remainders) only of bf16 weights; the plan has "
                          "%s ones", who, d->run.fp8_param_gather ? "FP8" : "non-bf16");
        if (!ap_opt_dtypes_fp32(&d->run.opt) && d->zero != AP_ZERO_1)
            return refuse(p, err, "%s runs --use-precision-aware-optimizer only with "
                          "the distributed optimizer (ZeRO-1); the plan has optimizer "
                          "states in %s without it", who, states);
        if (d->schedule == AP_SCHED_GPIPE)
            return refuse(p, err, "%s runs 1F1B or interleaved 1F1B, not the plan's %s schedule",
                          who, "GPipe");
        return check_megatron_zero(p, d, s, who, err);
    }
    /* Only Megatron-LM's --pipeline-model-parallel-layout gives each model
     * chunk its own layers; torchtitan's split points and DeepSpeed's
     * uniform partition cut the layers into stages in order. */
    if (!ap_emit_flags_state_chunks(p, d))
        return refuse(p, err, "%s cuts the layers into pipeline stages in order and "
                      "has no layout for interleaved chunks of their own; the plan's "
                      "model chunks hold %s: export it to Megatron-LM", who,
                      "uneven layer counts (chunk_layers, Megatron-LM's "
                      "--pipeline-model-parallel-layout)");
    if (to == AP_LAUNCHER_TORCHTITAN) {
        char what[96];
        int rc = titan_experts(p, d, who, err);
        if (rc)
            return rc;
        /* torchtitan's float8 converter is torchao's dynamic scaling, per
         * tensor (its default, without a recipe_name) or per row
         * (Float8Linear.recipe_name in job_config.py): no delayed scaling's
         * amax history, and its MX converter is torchao's own kernels, not
         * Transformer Engine's block-scaled casts and GEMMs priced. */
        if (d->run.fp8 && d->run.fp8_recipe == AP_FP8_DELAYED)
            return refuse(p, err, "%s's float8 converter scales dynamically, per tensor "
                          "or per row (torchao), with no delayed scaling; the plan was "
                          "priced with %s: plan with --fp8-recipe tensorwise (estimate "
                          "with fp8_recipe=tensorwise), or export it to Megatron-LM", who,
                          "Transformer Engine's delayed scaling (fp8_recipe delayed)");
        if (d->run.fp8 && ap_fp8_recipe_blocks(d->run.fp8_recipe))
            return refuse(p, err, "%s's float8 converter scales whole tensors (torchao); "
                          "the plan was priced with %s: export it to Megatron-LM", who,
                          d->run.fp8_recipe == AP_FP8_MXFP8
                          ? "Transformer Engine's MXFP8 (fp8_recipe mxfp8)"
                          : "Transformer Engine's blockwise FP8 (fp8_recipe blockwise)");
        if (d->tp > 1 && !d->sp)
            return refuse(p, err, "%s's tensor parallelism always shards norms on the "
                          "sequence (sequence parallelism); the plan uses %s",
                          who, "tensor parallelism without it (Megatron-LM runs it)");
        if (d->vpp > 1 && !d->even)
            return refuse(p, err, "%s's pipeline cuts the layers into pp*vpp even "
                          "chunks here; the plan interleaves %s", who, "uneven stages");
        int n, fl, ll;
        if (d->pp > 1 && !d->even && ap_emit_titan_split(p, &n, &fl, &ll))
            return refuse(p, err, "%s states a pipeline split as layers per stage, the "
                          "first and last stage fewer (pipeline_parallel_layers_per_stage, "
                          "..._first_stage_less_layers, ..._last_stage_less_layers); the "
                          "plan's stages are %s: export it to Megatron-LM", who,
                          "uneven in the middle, or larger at an end");
        /* Under a pipeline torchtitan's FSDP keeps a stage's weights
         * gathered from the first micro-batch's forward and its gradients
         * unsharded until the last one's backward (reshard_after_forward
         * off, the pipelining stage's no-sync backward): ZeRO-1's memory
         * and collectives, not ZeRO-2's or 3's per micro-batch. */
        if (d->pp > 1 && d->dp * d->cp > 1 &&
            (d->zero == AP_ZERO_2 || d->zero == AP_ZERO_3))
            return refuse(p, err, "%s's FSDP under a pipeline keeps each stage's weights "
                          "and gradients unsharded through the step (ZeRO-1 as autopar "
                          "prices it); the plan uses %s, sharded every micro-batch: plan "
                          "with --target torchtitan", who,
                          d->zero == AP_ZERO_2 ? "ZeRO-2" : "ZeRO-3");
        /* torchtitan replicates with DDP only on a mesh of data-parallel
         * ranks alone (its parallelize functions raise "DDP has not
         * supported > 1D parallelism"), and ParallelDims folds every
         * context-parallel rank into FSDP's mesh (dp_shard_cp), sharding
         * the weights there at any shard degree: a plan without ZeRO runs
         * as priced only without tensor, pipeline and context parallelism. */
        if (d->zero == AP_ZERO_NONE &&
            (d->cp > 1 || (d->dp > 1 && (d->tp > 1 || d->pp > 1)))) {
            snprintf(what, sizeof what, "ZeRO-0 with dp=%d beside %s", d->dp,
                     d->cp > 1 ? "context parallelism" : d->tp > 1 ? "tensor parallelism"
                                                                  : "pipeline parallelism");
            return refuse(p, err, "%s replicates with DDP only where data parallelism is "
                          "all there is, and shards the weights over context-parallel "
                          "ranks with FSDP; the plan uses %s: plan with --target "
                          "torchtitan, or estimate with zero=3 (zero=1 under a pipeline)",
                          who, what);
        }
        return AP_OK;
    }
    if (d->run.tp_overlap)
        return refuse(p, err, "%s has no %s (Megatron-DeepSpeed runs Megatron's): "
                      "export this plan to Megatron-LM or torchtitan", who,
                      "tensor-parallel communication overlap");
    if (d->run.fp8)
        return refuse(p, err, "%s's config has no %s (Megatron-DeepSpeed runs "
                      "Megatron's Transformer Engine layers): export this plan to "
                      "Megatron-LM or torchtitan", who, "FP8 training");
    if (d->tp > 1 || d->cp > 1 || d->ep > 1)
        return refuse(p, err, "%s has no %s of its own (Megatron-DeepSpeed does): "
                      "export this plan to Megatron-LM", who, d->tp > 1
                      ? "tensor parallelism" : d->cp > 1 ? "context parallelism"
                      : "expert parallelism in its config");
    if (d->pp > 1 && d->schedule != AP_SCHED_1F1B)
        return refuse(p, err, "%s's pipeline engine runs 1F1B only; the plan uses %s",
                      who, ap_emit_schedule_name(d->schedule));
    if (d->pp > 1 && !d->even)
        return refuse(p, err, "%s's config partitions layers evenly (\"uniform\"); "
                      "the plan's stages are %s", who, "uneven");
    if (d->pp > 1 && d->zero > AP_ZERO_1)
        return refuse(p, err, "%s's pipeline engine supports ZeRO-1 at most; the plan "
                      "uses %s", who, d->zero == AP_ZERO_2 ? "ZeRO-2" : "ZeRO-3");
    if (d->recompute == AP_RECOMPUTE_SELECTIVE)
        return refuse(p, err, "%s's config has no %s; only full recomputation",
                      who, "selective recomputation");
    /* A plan priced with the reduction hidden would run slower than
     * predicted. */
    if (d->overlap_grad && d->dp > 1 && !ap_launcher_overlaps_grad(to, d->zero))
        return refuse(p, err, "%s overlaps the gradient reduction with the "
                      "backward only under ZeRO-2 and 3; the plan uses %s and was "
                      "priced with the reduction overlapped (plan with --target "
                      "deepspeed, or estimate with overlap_grad=0)", who,
                      d->zero == AP_ZERO_1 ? "ZeRO-1" : "no ZeRO");
    return AP_OK;
}

/* The routers Megatron-Core's flags state (topk_routing_with_score_function
 * and TransformerConfig's checks): a softmax over the top-k logits (its
 * default), or over all experts with the top k left as scored
 * (--moe-router-pre-softmax, which it asserts at top-k 1); sigmoid scores
 * (--moe-router-score-function sigmoid), renormalised above top-k 1 and
 * left as scored at top-k 1; an expert bias (--moe-router-enable-expert-bias)
 * with sigmoid scores only, which it raises otherwise; any factor on the
 * weights (--moe-router-topk-scaling-factor). */
static int check_router(const ap_model_shape *s, const ap_plan_desc *p, char *err)
{
    const char *who = ap_launcher_name(AP_LAUNCHER_MEGATRON);
    if (!s->experts)
        return AP_OK;
    if (s->routers_differ)
        return refuse(p, err, "%s's router flags state one router for every MoE layer; %s",
                      who, "the model's layers route differently (their top_k, groups or "
                      "scoring), which no Megatron-LM flag states");
    if (s->route_on_input && s->top_k > 1)
        return refuse(p, err, "%s weighs the experts' input (--moe-apply-probs-on-input) "
                      "at top-k 1 only, as its expert MLPs assert; %s", who,
                      "the model's router weighs the input of several experts a token");
    if (s->route_bias && !s->route_sigmoid)
        return refuse(p, err, "%s's expert bias (--moe-router-enable-expert-bias) goes with "
                      "sigmoid scores only, as Megatron-Core raises otherwise; %s", who,
                      "the model's router adds one to softmax scores");
    if (s->route_sigmoid && s->top_k > 1 && s->route_unnormalized)
        return refuse(p, err, "%s renormalises the top-k weights of sigmoid scores to sum 1 "
                      "(--moe-router-score-function sigmoid); %s, which no Megatron-LM flag "
                      "states", who, "the model's router leaves them as scored");
    if (s->route_sigmoid && s->top_k == 1 && !s->route_unnormalized)
        return refuse(p, err, "%s weighs a token's one expert by its sigmoid score at top-k 1 "
                      "(--moe-router-score-function sigmoid); %s, which no Megatron-LM flag "
                      "states", who, "the model's router renormalises it to 1");
    if (!s->route_sigmoid && s->top_k == 1 && !s->route_unnormalized)
        return refuse(p, err, "%s runs a softmax router at top-k 1 only with "
                      "--moe-router-pre-softmax, which weighs a token's one expert by its "
                      "softmax over all experts (Megatron-Core raises otherwise); %s", who,
                      "the model's router renormalises that weight to 1");
    return AP_OK;
}

/* What a launcher's model flags cannot state. Only Megatron-LM's export
 * states the architecture; the others run the user's own model code. */
static int check_architecture(const ap_model_shape *s, const ap_plan_desc *p,
                              ap_launcher to, char *err)
{
    if (to == AP_LAUNCHER_MEGATRON && s->parallel_residual)
        return refuse(p, err, "%s's transformer layer runs attention and then the MLP; "
                      "the model runs them side by side on the layer's input (%s), "
                      "which no Megatron-LM flag states", ap_launcher_name(to),
                      "a parallel residual: GPT-NeoX's use_parallel_residual, Phi's and "
                      "Cohere's one norm before both");
    /* Without a flag Megatron-LM builds gelu; its others are --swiglu,
     * --squared-relu and --quick-geglu (x*sigmoid(1.702x) gated, not GeGLU). */
    /* Megatron-LM states MLA by its dimensions, which a Hugging Face config
     * names (the project format may not). */
    if (to == AP_LAUNCHER_MEGATRON && s->mla &&
        !(s->kv_lora && s->qk_nope_dim && s->qk_rope_dim && s->v_head_dim))
        return refuse(p, err, "%s states multi-latent attention by its dimensions; %s",
                      ap_launcher_name(to), "the model does not name them as a Hugging "
                      "Face config does (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, "
                      "v_head_dim)");
    if (to == AP_LAUNCHER_MEGATRON && (s->other_bias == 2 || (s->other_bias && !s->qkv_bias)))
        return refuse(p, err, "%s's linear layers have a bias on all of them, on none, or "
                      "on the query, key and value projections alone (--add-qkv-bias); %s",
                      ap_launcher_name(to), "the model has biases on some others, which no "
                      "Megatron-LM flag states");
    if (to == AP_LAUNCHER_MEGATRON && s->experts && !strcmp(s->moe_freq, "?"))
        return refuse(p, err, "%s states which layers are MoE with --moe-layer-freq; %s",
                      ap_launcher_name(to), "the model's MoE layers follow no pattern it can "
                      "state in 255 characters");
    if (to == AP_LAUNCHER_MEGATRON && s->nope_layers && !strcmp(s->nope_freq, "?"))
        return refuse(p, err, "%s states which layers take no rotary embedding with "
                      "--no-rope-freq; %s", ap_launcher_name(to), "the model's NoPE layers "
                      "follow no pattern it can state in 255 characters");
    /* Megatron-LM's attention meets every earlier key of the sequence;
     * chunks no shorter than the sequence change nothing. */
    if (to == AP_LAUNCHER_MEGATRON && s->chunk)
        return errf(err, "%s: %s has no flag for chunked attention; the model attends "
                    "within chunks of %lld tokens, shorter than the plan's %lld-token "
                    "sequence (Llama 4's attention_chunk_size): plan at %lld tokens or "
                    "fewer to export it", p->source, ap_launcher_name(to), s->chunk, s->seq,
                    s->chunk);
    /* Megatron-LM states one window, on the layers of one pattern. */
    if (to == AP_LAUNCHER_MEGATRON && s->window < 0)
        return refuse(p, err, "%s states one sliding window (--window-size); %s",
                      ap_launcher_name(to), "the model's layers have windows of different "
                      "lengths");
    if (to == AP_LAUNCHER_MEGATRON && s->window > 0 && !strcmp(s->window_freq, "?"))
        return refuse(p, err, "%s states which layers have the sliding window with "
                      "--window-attn-skip-freq; %s", ap_launcher_name(to), "the model's "
                      "windowed layers follow no pattern it can state in 255 characters");
    if (to == AP_LAUNCHER_MEGATRON && s->post_norm)
        return refuse(p, err, "%s's layers norm the inputs of attention and the MLP; %s, "
                      "which no Megatron-LM flag states", ap_launcher_name(to),
                      "the model norms their outputs before the residual adds (Gemma 2's "
                      "and OLMo 2's post-norms)");
    /* torchtitan's and DeepSpeed's FP8 has no such switch. */
    if (to != AP_LAUNCHER_MEGATRON && (s->bf16_first || s->bf16_last))
        return refuse(p, err, "%s has no switch that keeps %s in bf16 under FP8; export "
                      "the plan to Megatron-LM (--first-last-layers-bf16)",
                      ap_launcher_name(to), "the first and last layers");
    /* torchtitan's float8 converter (quantize.linear.float8) swaps
     * nn.Linear, which its MoE experts are not: their grouped GEMMs would
     * run in bf16, where the plan prices them in FP8, and its grouped-GEMM
     * converter is a row-scaled prototype that refuses pipelines and
     * context parallelism. */
    if (to == AP_LAUNCHER_TORCHTITAN && s->experts && p->run.fp8)
        return refuse(p, err, "%s's float8 converter swaps nn.Linear only, leaving %s in "
                      "bf16 where the plan prices them in FP8: export it to Megatron-LM, "
                      "or plan without --fp8", ap_launcher_name(to),
                      "the experts' grouped GEMMs");
    /* torchtitan's and DeepSpeed's models have no MTP module. */
    if (to != AP_LAUNCHER_MEGATRON && s->mtp_layers)
        return refuse(p, err, "%s's models have no %s; export the plan to Megatron-LM "
                      "(--mtp-num-layers)", ap_launcher_name(to),
                      "multi-token-prediction module");
    if (to == AP_LAUNCHER_MEGATRON && s->scaled_embedding)
        return refuse(p, err, "%s's GPT model feeds the embeddings to the first layer "
                      "as they are; %s, which no Megatron-LM flag states",
                      ap_launcher_name(to), "the model scales them first (Gemma's "
                      "sqrt(hidden_size), Granite's embedding_multiplier)");
    if (to == AP_LAUNCHER_MEGATRON && s->scaled_logits)
        return refuse(p, err, "%s's GPT model takes the loss of the output layer's "
                      "logits as they are; %s, which no Megatron-LM flag states",
                      ap_launcher_name(to), "the model scales or caps them first "
                      "(Granite's logits_scaling, Gemma 2's final_logit_softcapping)");
    if (to == AP_LAUNCHER_MEGATRON && s->norm_free)
        return refuse(p, err, "%s's norms have a weight (and LayerNorm a bias); %s, which "
                      "no Megatron-LM flag states", ap_launcher_name(to), "the model's "
                      "have neither (OLMo 1's non-parametric LayerNorm)");
    if (to == AP_LAUNCHER_MEGATRON && s->qk_norm_wide)
        return refuse(p, err, "%s's --qk-layernorm norms each head of the queries and keys; "
                      "%s, which no Megatron-LM flag states", ap_launcher_name(to),
                      "the model norms them across all heads (OLMo 2's and MiniMax-M2's q_norm "
                      "and k_norm)");
    if (to == AP_LAUNCHER_MEGATRON && !s->swiglu && !s->quick_geglu && (s->relu || s->gated))
        return refuse(p, err, "%s's MLP activations are gelu, --swiglu, --squared-relu "
                      "and --quick-geglu; the model's MLP is %s, which no Megatron-LM "
                      "flag states", ap_launcher_name(to),
                      s->gated ? "gated by another activation than silu" : "a plain ReLU");
    return to == AP_LAUNCHER_MEGATRON ? check_router(s, p, err) : AP_OK;
}

/* Whether full recomputation under the plan's method redoes every layer
 * one at a time, as uniform 1 does: so does block N when no chunk has more
 * than N layers. */
static int recomputes_each_layer(const ap_plan_desc *p, const ap_degrees *d)
{
    if (d->recompute_method == AP_RECOMPUTE_UNIFORM)
        return d->recompute_layers <= 1;
    int v = d->vpp > 1 ? d->vpp : 1;
    for (int i = 0; i < p->nstages; i++)
        for (int c = 0; c < v; c++)
            if (chunk_size(p, v, i, c) > d->recompute_layers)
                return 0;
    return 1;
}

/* Megatron-LM's uniform groups of N must divide every model chunk's
 * layers: its last group would otherwise run past the chunk. */
static int check_uniform_groups(const ap_plan_desc *p, const ap_degrees *d,
                                const char *who, char *err)
{
    int v = d->vpp > 1 ? d->vpp : 1, n = d->recompute_layers;
    for (int i = 0; i < p->nstages; i++) {
        if (!p->chunk_layers && (p->stages[i].nlayers % v || p->stages[i].nlayers / v % n))
            return errf(err, "%s: stage %d's model chunks hold %d layers, which %s's "
                        "uniform groups of %d do not divide (its last group would run "
                        "past them)", p->source, i, p->stages[i].nlayers / v, who, n);
        for (int c = 0; p->chunk_layers && c < v; c++)
            if (chunk_size(p, v, i, c) % n)
                return errf(err, "%s: stage %d's model chunk %d holds %d layers, which "
                            "%s's uniform groups of %d do not divide (its last group "
                            "would run past them)", p->source, i, c,
                            chunk_size(p, v, i, c), who, n);
    }
    return AP_OK;
}

/* The recomputation each launcher runs. Selective recomputation by
 * modules other than core_attn is Megatron-Core's own. Megatron-LM runs both
 * full methods, but its
 * uniform groups must divide each model chunk's layers (the last would run
 * past them); DeepSpeed's pipeline checkpoints groups of
 * activation_checkpoint_interval layers, uniform N, and has no block;
 * torchtitan's full mode checkpoints each layer on its own, and its
 * selective_ac_option N every N-th layer, neither of which is uniform N > 1
 * or block. */
static int check_recompute_method(const ap_plan_desc *p, const ap_degrees *d,
                                  ap_launcher to, char *err)
{
    const char *who = ap_launcher_name(to);
    if (d->run.dispatcher != AP_DISPATCH_ALLTOALL && to != AP_LAUNCHER_MEGATRON)
        return refuse(p, err, "%s has no flag for Megatron-Core's token dispatchers; "
                      "the plan's experts exchange tokens with its %s dispatcher (export "
                      "it to Megatron-LM)", who, ap_dispatcher_name(d->run.dispatcher));
    if (d->run.capacity_factor > 0 && to != AP_LAUNCHER_MEGATRON)
        return refuse(p, err, "%s has no flag for Megatron-Core's token dropping; the "
                      "plan drops the experts' tokens to a capacity (%s)", who,
                      "export it to Megatron-LM");
    if (d->run.sequential_experts && to != AP_LAUNCHER_MEGATRON)
        return refuse(p, err, "%s has no flag for Megatron-Core's SequentialMLP; the "
                      "plan runs each GPU's experts one after another (%s)", who,
                      "export it to Megatron-LM");
    if (d->run.shared_overlap && to != AP_LAUNCHER_MEGATRON)
        return refuse(p, err, "%s has no flag for Megatron-Core's shared-expert overlap; "
                      "the plan runs the shared experts beside the token exchanges "
                      "(%s)", who, "export it to Megatron-LM");
    if (d->run.cuda_graph && to != AP_LAUNCHER_MEGATRON)
        return refuse(p, err, "%s has no flag for Megatron-Core's CUDA graphs; the plan "
                      "captures them (--cuda-graph-impl %s; export it to Megatron-LM)",
                      who, ap_cuda_graph_name(d->run.cuda_graph));
    if (d->recompute == AP_RECOMPUTE_SELECTIVE && d->run.recompute_modules &&
        to != AP_LAUNCHER_MEGATRON) {
        char mods[160];
        ap_rc_modules_format(d->run.recompute_modules, ", ", mods, sizeof mods);
        return refuse(p, err, "%s has no selective recomputation by Megatron-Core's "
                      "modules; the plan recomputes %s (export it to Megatron-LM)", who,
                      mods);
    }
    if (d->recompute != AP_RECOMPUTE_FULL || recomputes_each_layer(p, d))
        return AP_OK;
    char what[96];
    snprintf(what, sizeof what, "recompute_method \"%s\" with recompute_num_layers %d",
             ap_recompute_method_name(d->recompute_method), d->recompute_layers);
    if (to == AP_LAUNCHER_TORCHTITAN)
        return refuse(p, err, "%s's full activation checkpointing recomputes every layer "
                      "on its own, and selective_ac_option N every N-th layer; the plan "
                      "uses %s (export it to Megatron-LM)", who, what);
    if (to == AP_LAUNCHER_DEEPSPEED && d->recompute_method == AP_RECOMPUTE_BLOCK)
        return refuse(p, err, "%s's pipeline checkpoints groups of "
                      "activation_checkpoint_interval layers (uniform) and has no block "
                      "method; the plan uses %s (export it to Megatron-LM)", who, what);
    if (to != AP_LAUNCHER_MEGATRON || d->recompute_method != AP_RECOMPUTE_UNIFORM)
        return AP_OK;
    return check_uniform_groups(p, d, who, err);
}

int ap_launcher_check_model(const ap_graph *g, ap_launcher to, const ap_run_settings *run,
                            const char *source, char *err)
{
    static const ap_plan_desc zero;
    ap_plan_desc p = zero;
    snprintf(p.source, sizeof p.source, "%s", source);
    p.run = *run;
    ap_model_shape shape;
    ap_model_shape_of(g, &shape);
    return check_architecture(&shape, &p, to, err);
}

int ap_plan_classify(const ap_graph *g, const ap_plan_desc *p, ap_launcher to,
                     ap_degrees *d, char *err)
{
    const char *who = ap_launcher_name(to);
    memset(d, 0, sizeof *d);
    int rc;
    ap_model_shape shape;
    ap_model_shape_of(g, &shape);
    if ((rc = check_shape(g, &shape, p, err)) ||
        (rc = check_architecture(&shape, p, to, err)) || (rc = check_stages(g, p, who, err)) ||
        (rc = check_coverage(g, p, err)) || (rc = check_pipeline(g, p, d, err)))
        return rc;
    const ap_plan_desc_stage *s0 = &p->stages[0];
    frame f = {s0->mesh[0], s0->mesh[1], 0};
    if (f.d1 == 1 && f.d0 > 1) {
        f.d1 = f.d0;
        f.d0 = 1;
        f.swap = 1;
    }
    infer_degrees(g, p, &f, d);
    /* Only sequence-parallel collectives are priced overlapped, so a plan
     * without them, or with tp = 1, ran the same without the setting: it is
     * dropped rather than handed to a launcher that refuses it. */
    d->run.tp_overlap = p->run.tp_overlap && d->tp > 1 && d->sp;
    d->recompute = s0->recompute;
    d->recompute_method = p->recompute_method;
    d->recompute_layers = p->recompute_layers;
    d->zero = p->zero;
    if ((rc = batch_degrees(p, d, err)) || (rc = check_ops(g, p, &f, d, to, err)) ||
        (rc = check_launcher(p, d, &shape, to, err)))
        return rc;
    return check_recompute_method(p, d, to, err);
}

int ap_export(const ap_graph *g, const ap_plan_desc *p, ap_launcher to,
              char **text, char *err)
{
    ap_degrees d;
    *text = NULL;
    int rc = ap_plan_classify(g, p, to, &d, err);
    if (rc)
        return rc;
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    *text = to == AP_LAUNCHER_MEGATRON ? ap_emit_megatron(p, &d, &s)
          : to == AP_LAUNCHER_TORCHTITAN ? ap_emit_torchtitan(p, &d, &s)
          : ap_emit_deepspeed(p, &d, &s);
    if (!*text) {
        errf(err, "out of memory writing the %s export", ap_launcher_name(to));
        return AP_EINTERNAL;
    }
    return AP_OK;
}
