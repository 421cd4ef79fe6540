/* plan_read.c -- plan.json (autopar-plan/1) read back for the exporters.
 *
 * The reader checks what the exporters rely on: types, ranges, and that
 * stages cover the layers and ranks in order, each mesh holding its ranks.
 * Every error names the file and the JSON path of the field at fault. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

typedef struct {
    const char *source;
    char *err;
} reader;

static int fail(const reader *r, const char *path, const char *fmt, ...)
{
    int n = snprintf(r->err, AP_ERR_LEN, "%s: %s%s", r->source, path, *path ? ": " : "");
    if (n < 0 || n >= AP_ERR_LEN)
        return AP_EINPUT;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, AP_ERR_LEN - (size_t)n, fmt, ap);
    va_end(ap);
    return AP_EINPUT;
}

static const cJSON *field(const cJSON *o, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

static int get_number(const reader *r, const cJSON *o, const char *name,
                      const char *path, double lo, double hi, double *out)
{
    char at[256];
    snprintf(at, sizeof at, "%s%s%s", path, *path ? "." : "", name);
    const cJSON *v = field(o, name);
    if (!v)
        return fail(r, at, "missing");
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return fail(r, at, "expected a number");
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(r, at, "%g is out of range [%g, %g]", v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return AP_OK;
}

static int get_int(const reader *r, const cJSON *o, const char *name,
                   const char *path, long long lo, long long hi, long long *out)
{
    double d = 0;
    int rc = get_number(r, o, name, path, (double)lo, (double)hi, &d);
    if (rc)
        return rc;
    if (d != floor(d)) {
        char at[256];
        snprintf(at, sizeof at, "%s%s%s", path, *path ? "." : "", name);
        return fail(r, at, "expected an integer, got %g", d);
    }
    *out = (long long)d;
    return AP_OK;
}

static int get_small(const reader *r, const cJSON *o, const char *name,
                     const char *path, int lo, int hi, int *out)
{
    long long v;
    int rc = get_int(r, o, name, path, lo, hi, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

static int get_string(const reader *r, const cJSON *o, const char *name,
                      const char *path, char *out, size_t cap, int required)
{
    char at[256];
    snprintf(at, sizeof at, "%s%s%s", path, *path ? "." : "", name);
    const cJSON *v = field(o, name);
    if (!v && !required) {
        out[0] = 0;
        return AP_OK;
    }
    if (!v)
        return fail(r, at, "missing");
    if (!cJSON_IsString(v))
        return fail(r, at, "expected a string");
    if (strlen(v->valuestring) >= cap)
        return fail(r, at, "longer than %zu characters", cap - 1);
    /* The exports print these into launch scripts, where an escaped
     * newline in "model" ("x\nrm -rf ~") would run as a command. */
    int ch = ap_control_char(v->valuestring);
    if (ch)
        return fail(r, at, "a control character (0x%02x), which a launch script "
                    "would print as it is", ch);
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return AP_OK;
}

static int get_bool(const reader *r, const cJSON *o, const char *name,
                    const char *path, int *out)
{
    char at[256];
    snprintf(at, sizeof at, "%s%s%s", path, *path ? "." : "", name);
    const cJSON *v = field(o, name);
    if (!v)
        return fail(r, at, "missing");
    if (!cJSON_IsBool(v))
        return fail(r, at, "expected true or false");
    *out = cJSON_IsTrue(v);
    return AP_OK;
}

/* Reads a two-integer array such as "mesh": [d0, d1]. */
static int get_pair(const reader *r, const cJSON *o, const char *name,
                    const char *path, const char *shape, long long lo,
                    long long hi, long long out[2])
{
    char at[256];
    snprintf(at, sizeof at, "%s.%s", path, name);
    const cJSON *v = field(o, name);
    if (!v)
        return fail(r, at, "missing");
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return fail(r, at, "expected %s", shape);
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
            e->valuedouble < (double)lo || e->valuedouble > (double)hi)
            return fail(r, at, "expected %s of integers from %lld to %lld", shape, lo, hi);
        out[i] = (long long)e->valuedouble;
    }
    return AP_OK;
}

static int parse_schedule(const reader *r, const cJSON *root, ap_schedule *out)
{
    char s[32];
    int rc = get_string(r, root, "schedule", "", s, sizeof s, 1);
    if (rc)
        return rc;
    if (!strcmp(s, "1f1b"))
        *out = AP_SCHED_1F1B;
    else if (!strcmp(s, "gpipe"))
        *out = AP_SCHED_GPIPE;
    else if (!strcmp(s, "interleaved-1f1b"))
        *out = AP_SCHED_INTERLEAVED;
    else
        return fail(r, "schedule", "\"%s\" is not 1f1b, gpipe or interleaved-1f1b", s);
    return AP_OK;
}

static int parse_recompute(const reader *r, const cJSON *o, const char *path,
                           ap_recompute *out)
{
    char s[32];
    int rc = get_string(r, o, "recompute", path, s, sizeof s, 1);
    if (rc)
        return rc;
    if (!strcmp(s, "none"))
        *out = AP_RECOMPUTE_NONE;
    else if (!strcmp(s, "selective"))
        *out = AP_RECOMPUTE_SELECTIVE;
    else if (!strcmp(s, "full"))
        *out = AP_RECOMPUTE_FULL;
    else {
        char at[256];
        snprintf(at, sizeof at, "%s.recompute", path);
        return fail(r, at, "\"%s\" is not none, selective or full", s);
    }
    return AP_OK;
}

static int is_label(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* The inverse of ap_strategy_format: "replicated" or space-separated
 * "L@A" items, each optionally followed by "->rs:R". */
static int parse_sharding(const reader *r, const char *at, const char *text,
                          ap_strategy *s)
{
    memset(s, 0, sizeof *s);
    if (!strcmp(text, "replicated"))
        return AP_OK;
    const char *p = text;
    int items = 0;
    while (*p) {
        if (!is_label(p[0]) || p[1] != '@' || (p[2] != '0' && p[2] != '1'))
            return fail(r, at, "\"%s\" is not LABEL@AXIS items (axis 0 or 1) or "
                        "\"replicated\"", text);
        int a = p[2] - '0';
        if (s->axis[a])
            return fail(r, at, "\"%s\" splits axis %d twice", text, a);
        s->axis[a] = p[0];
        p += 3;
        if (!strncmp(p, "->rs:", 5)) {
            if (!is_label(p[5]))
                return fail(r, at, "\"%s\": ->rs: needs a label", text);
            s->rs[a] = p[5];
            p += 6;
        }
        if (*p == ' ')
            p++;
        else if (*p)
            return fail(r, at, "\"%s\" is not LABEL@AXIS items (axis 0 or 1) or "
                        "\"replicated\"", text);
        items++;
    }
    return items ? AP_OK : fail(r, at, "empty sharding");
}

static int parse_ops(const reader *r, const cJSON *blocks, const char *path,
                     ap_plan_desc_stage *st)
{
    int n = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, blocks) {
        const cJSON *ops = field(b, "ops");
        n += cJSON_IsArray(ops) ? cJSON_GetArraySize(ops) : 0;
    }
    st->ops = calloc((size_t)(n ? n : 1), sizeof *st->ops);
    if (!st->ops) {
        snprintf(r->err, AP_ERR_LEN, "%s: out of memory", r->source);
        return AP_EINTERNAL;
    }
    int bi = 0;
    cJSON_ArrayForEach(b, blocks) {
        char bat[160];
        snprintf(bat, sizeof bat, "%s.blocks[%d]", path, bi);
        if (!cJSON_IsObject(b))
            return fail(r, bat, "expected an object");
        const cJSON *ops = field(b, "ops");
        if (!cJSON_IsArray(ops)) {
            char at[200];
            snprintf(at, sizeof at, "%s.ops", bat);
            return fail(r, at, ops ? "expected an array" : "missing");
        }
        int oi = 0;
        const cJSON *o;
        cJSON_ArrayForEach(o, ops) {
            char oat[200], sat[220];
            snprintf(oat, sizeof oat, "%s.ops[%d]", bat, oi);
            if (!cJSON_IsObject(o))
                return fail(r, oat, "expected an object");
            ap_plan_desc_op *d = &st->ops[st->nops];
            char spec[64];
            int rc = get_string(r, o, "op", oat, d->op, sizeof d->op, 1);
            if (!rc)
                rc = get_string(r, o, "sharding", oat, spec, sizeof spec, 1);
            snprintf(sat, sizeof sat, "%s.sharding", oat);
            if (!rc)
                rc = parse_sharding(r, sat, spec, &d->s);
            if (rc)
                return rc;
            d->block = bi;
            st->nops++;
            oi++;
        }
        bi++;
    }
    return AP_OK;
}

/* "expert_mesh": [ep, etp] and "expert_replicas" (edp, absent reads as 1)
 * under MoE parallel folding; together they hold the stage's ranks. */
static int parse_expert_mesh(const reader *r, const cJSON *o, const char *path,
                             ap_plan_desc_stage *st)
{
    long long em[2], ranks[2];
    int edp = 1;
    int rc = get_pair(r, o, "expert_mesh", path, "[ep, etp]", 1, 1 << 20, em);
    if (!rc && field(o, "expert_replicas"))
        rc = get_small(r, o, "expert_replicas", path, 1, 1 << 20, &edp);
    if (!rc)
        rc = get_pair(r, o, "ranks", path, "[first, last]", 0, 1 << 20, ranks);
    if (rc)
        return rc;
    if (em[0] * em[1] * edp != ranks[1] - ranks[0] + 1) {
        char at[96];
        snprintf(at, sizeof at, "%s.expert_mesh", path);
        return fail(r, at, "%d replicas of [%lld, %lld] do not hold the %lld ranks "
                    "%lld-%lld", edp, em[0], em[1], ranks[1] - ranks[0] + 1, ranks[0],
                    ranks[1]);
    }
    st->expert_mesh[0] = (int)em[0];
    st->expert_mesh[1] = (int)em[1];
    st->expert_replicas = edp;
    return AP_OK;
}

static int parse_stage(const reader *r, const cJSON *o, int i, ap_plan_desc *p)
{
    char path[64];
    snprintf(path, sizeof path, "stages[%d]", i);
    ap_plan_desc_stage *st = &p->stages[i];
    if (!cJSON_IsObject(o))
        return fail(r, path, "expected an object");
    int index;
    long long layers[2], ranks[2], mesh[2];
    int rc = get_small(r, o, "index", path, 0, 1 << 20, &index);
    if (!rc && index != i)
        rc = fail(r, path, "index is %d, expected %d (stages in pipeline order)", index, i);
    if (!rc)
        rc = get_pair(r, o, "layers", path, "[first, end)", 0, 1 << 20, layers);
    if (!rc)
        rc = get_pair(r, o, "ranks", path, "[first, last]", 0, 1 << 20, ranks);
    if (!rc)
        rc = get_pair(r, o, "mesh", path, "[d0, d1]", 1, 1 << 20, mesh);
    if (!rc)
        rc = get_bool(r, o, "embedding", path, &st->embedding);
    if (!rc)
        rc = get_bool(r, o, "head", path, &st->head);
    if (!rc)
        rc = parse_recompute(r, o, path, &st->recompute);
    st->replicas = 1;
    if (!rc && field(o, "replicas"))
        rc = get_small(r, o, "replicas", path, 1, 1 << 20, &st->replicas);
    if (!rc && field(o, "expert_mesh"))
        rc = parse_expert_mesh(r, o, path, st);
    if (rc)
        return rc;
    char at[96];
    if (layers[1] <= layers[0]) {
        snprintf(at, sizeof at, "%s.layers", path);
        return fail(r, at, "[%lld, %lld) holds no layer", layers[0], layers[1]);
    }
    if (ranks[1] < ranks[0] ||
        mesh[0] * mesh[1] * st->replicas != ranks[1] - ranks[0] + 1) {
        snprintf(at, sizeof at, "%s.mesh", path);
        if (st->replicas > 1)
            return fail(r, at, "%d replicas of [%lld, %lld] do not hold the %lld ranks "
                        "%lld-%lld", st->replicas, mesh[0], mesh[1],
                        ranks[1] - ranks[0] + 1, ranks[0], ranks[1]);
        return fail(r, at, "[%lld, %lld] does not hold the %lld ranks %lld-%lld",
                    mesh[0], mesh[1], ranks[1] - ranks[0] + 1, ranks[0], ranks[1]);
    }
    st->first_layer = (int)layers[0];
    st->nlayers = (int)(layers[1] - layers[0]);
    st->first_rank = (int)ranks[0];
    st->ngpus = (int)(ranks[1] - ranks[0] + 1);
    st->mesh[0] = (int)mesh[0];
    st->mesh[1] = (int)mesh[1];
    const cJSON *blocks = field(o, "blocks");
    if (!cJSON_IsArray(blocks)) {
        snprintf(at, sizeof at, "%s.blocks", path);
        return fail(r, at, blocks ? "expected an array" : "missing");
    }
    return parse_ops(r, blocks, path, st);
}

/* Stages follow each other: layers and ranks continue where the previous
 * stage ended, the first starts at 0, and the last ends at the GPU count.
 * Under chunk_layers the stages' layers are their chunks', which
 * check_chunks checks instead. */
static int check_cover(const reader *r, const ap_plan_desc *p)
{
    char at[64];
    for (int i = 0; i < p->nstages; i++) {
        const ap_plan_desc_stage *st = &p->stages[i], *prev = i ? st - 1 : NULL;
        int want_layer = prev ? prev->first_layer + prev->nlayers : 0;
        int want_rank = prev ? prev->first_rank + prev->ngpus : 0;
        if (!p->chunk_layers && st->first_layer != want_layer) {
            snprintf(at, sizeof at, "stages[%d].layers", i);
            return fail(r, at, "starts at layer %d, expected %d", st->first_layer, want_layer);
        }
        if (st->first_rank != want_rank) {
            snprintf(at, sizeof at, "stages[%d].ranks", i);
            return fail(r, at, "starts at rank %d, expected %d", st->first_rank, want_rank);
        }
    }
    const ap_plan_desc_stage *last = &p->stages[p->nstages - 1];
    if (last->first_rank + last->ngpus != p->gpus) {
        snprintf(at, sizeof at, "stages[%d].ranks", p->nstages - 1);
        return fail(r, at, "ends at rank %d, but the plan has %d GPUs",
                    last->first_rank + last->ngpus - 1, p->gpus);
    }
    return AP_OK;
}

/* rotary_percent and parallel_residual came after the first plans: a
 * rotary plan without the share reads as -1 (unknown, not checked), and
 * so does one without parallel_residual (the writer states it either way
 * since). */
static int parse_rotary(const reader *r, const cJSON *o, int rotary, ap_model_shape *s)
{
    int rc = AP_OK;
    s->rotary_percent = rotary ? -1 : 0;
    if (field(o, "rotary_percent")) {
        if (!rotary)
            return fail(r, "model_shape.rotary_percent", "given, but positions are "
                        "not rotary");
        rc = get_number(r, o, "rotary_percent", "model_shape", 1e-9, 1,
                        &s->rotary_percent);
    }
    s->parallel_residual = -1;
    if (!rc && field(o, "parallel_residual"))
        rc = get_bool(r, o, "parallel_residual", "model_shape", &s->parallel_residual);
    /* Absent without MTP modules, as plans before them. */
    if (!rc && field(o, "mtp_layers"))
        rc = get_small(r, o, "mtp_layers", "model_shape", 0, AP_MAX_MTP, &s->mtp_layers);
    /* Absent where no layer is kept in bf16 under FP8. */
    if (!rc && field(o, "bf16_first_layers"))
        rc = get_small(r, o, "bf16_first_layers", "model_shape", 0, 1 << 20, &s->bf16_first);
    if (!rc && field(o, "bf16_last_layers"))
        rc = get_small(r, o, "bf16_last_layers", "model_shape", 0, 1 << 20, &s->bf16_last);
    return rc;
}

/* The dropout probabilities came later still: a plan without them reads as
 * -1 (unknown). Exports state the dropout of the model they reload. */
static int parse_dropout(const reader *r, const cJSON *o, ap_model_shape *s)
{
    const char *names[] = {"hidden_dropout", "attention_dropout"};
    double *p[] = {&s->hidden_dropout, &s->attention_dropout};
    int rc = AP_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        *p[i] = -1;
        if (field(o, names[i]))
            rc = get_number(r, o, names[i], "model_shape", 0, 0.999999, p[i]);
    }
    return rc;
}

/* The numbers that change no cost (written since session 31; absent: 0,
 * unknown). The export checks them against the model it reloads. */
static int parse_numerics(const reader *r, const cJSON *o, ap_model_shape *s)
{
    const char *at = "model_shape";
    int rc = AP_OK;
    if (field(o, "rope_base"))
        rc = get_number(r, o, "rope_base", at, 1e-9, 1e12, &s->rope_base);
    if (!rc && field(o, "norm_eps"))
        rc = get_number(r, o, "norm_eps", at, 1e-30, 0.999999, &s->norm_eps);
    if (!rc && field(o, "rope_scaling_factor"))
        rc = get_number(r, o, "rope_scaling_factor", at, 1e-9, 1e6, &s->rope_factor);
    if (!rc && field(o, "rope_scaling")) {
        char v[16];
        rc = get_string(r, o, "rope_scaling", at, v, sizeof v, 1);
        if (!rc && ap_rope_scaling_from_name(v, &s->rope_scaling))
            return fail(r, "model_shape.rope_scaling", "\"%s\" is not llama3 or other", v);
    }
    return rc;
}

/* Multi-latent attention's dimensions and attention sinks, written only
 * where the model has them, so that a plan without them (every plan from
 * before them too) reads as a model without either. The dimensions go with
 * multi_latent_attention and are 0 where the model does not name them
 * (q_lora_rank 0: the queries are not compressed). */
static int parse_attention(const reader *r, const cJSON *o, ap_model_shape *s)
{
    const char *at = "model_shape";
    const char *names[] = {"q_lora_rank", "kv_lora_rank", "qk_head_dim",
                           "qk_pos_emb_head_dim", "v_head_dim"};
    long long *dims[] = {&s->q_lora, &s->kv_lora, &s->qk_nope_dim, &s->qk_rope_dim,
                         &s->v_head_dim};
    int rc = AP_OK;
    if (field(o, "multi_latent_attention"))
        rc = get_bool(r, o, "multi_latent_attention", at, &s->mla);
    for (int i = 0; i < 5 && !rc; i++) {
        if (s->mla) {
            rc = get_int(r, o, names[i], at, 0, 1LL << 40, dims[i]);
        } else if (field(o, names[i])) {
            char path[64];
            snprintf(path, sizeof path, "model_shape.%s", names[i]);
            rc = fail(r, path, "given, but multi_latent_attention is not true");
        }
    }
    if (!rc && field(o, "attention_sinks"))
        rc = get_bool(r, o, "attention_sinks", at, &s->sinks);
    return rc;
}

/* How the first router scores and weighs the experts, each field written
 * only where it is not Megatron-Core's default (a softmax over the top-k
 * logits, renormalised, no bias, no factor, the weight on the expert's
 * output), so an absent one reads as that default. */
static int parse_router(const reader *r, const cJSON *o, ap_model_shape *s)
{
    const char *at = "model_shape";
    int rc = AP_OK, normalize = 1;
    if (field(o, "router_score")) {
        char v[16];
        rc = get_string(r, o, "router_score", at, v, sizeof v, 1);
        if (!rc && strcmp(v, "sigmoid") && strcmp(v, "softmax"))
            return fail(r, "model_shape.router_score", "\"%s\" is not sigmoid or softmax", v);
        s->route_sigmoid = !rc && !strcmp(v, "sigmoid");
    }
    if (!rc && field(o, "router_normalize"))
        rc = get_bool(r, o, "router_normalize", at, &normalize);
    s->route_unnormalized = !normalize;
    if (!rc && field(o, "router_expert_bias"))
        rc = get_bool(r, o, "router_expert_bias", at, &s->route_bias);
    if (!rc && field(o, "router_probs_on_input"))
        rc = get_bool(r, o, "router_probs_on_input", at, &s->route_on_input);
    if (!rc && field(o, "router_scale"))
        rc = get_number(r, o, "router_scale", at, 1e-9, 1e6, &s->route_scale);
    return rc;
}

static int parse_shape(const reader *r, const cJSON *o, ap_model_shape *s)
{
    const char *at = "model_shape";
    if (!cJSON_IsObject(o))
        return fail(r, at, "expected an object");
    memset(s, 0, sizeof *s);
    const long long big = 1LL << 40;
    int rc = get_small(r, o, "layers", at, 0, 1 << 20, &s->layers);
    if (!rc)
        rc = get_int(r, o, "hidden", at, 1, big, &s->hidden);
    if (!rc)
        rc = get_int(r, o, "heads", at, 0, big, &s->heads);
    if (!rc)
        rc = get_int(r, o, "kv_heads", at, 0, big, &s->kv_heads);
    if (!rc)
        rc = get_int(r, o, "head_dim", at, 0, big, &s->head_dim);
    if (!rc)
        rc = get_int(r, o, "ffn", at, 0, big, &s->ffn);
    if (!rc)
        rc = get_int(r, o, "vocab", at, 0, big, &s->vocab);
    if (!rc)
        rc = get_int(r, o, "seq", at, 1, big, &s->seq);
    if (!rc)
        rc = get_int(r, o, "experts", at, 0, big, &s->experts);
    if (!rc)
        rc = get_small(r, o, "top_k", at, 0, 1 << 20, &s->top_k);
    if (!rc && field(o, "moe_ffn"))
        rc = get_int(r, o, "moe_ffn", at, 0, big, &s->moe_ffn);
    if (!rc && field(o, "shared_expert_ffn"))
        rc = get_int(r, o, "shared_expert_ffn", at, 0, big, &s->shared_ffn);
    if (!rc && field(o, "moe_layer_freq"))
        rc = get_string(r, o, "moe_layer_freq", at, s->moe_freq, sizeof s->moe_freq, 1);
    /* A plan without a window was priced without one, whenever written. */
    if (!rc && field(o, "attention_window"))
        rc = get_int(r, o, "attention_window", at, -1, big, &s->window);
    if (!rc && !s->window && field(o, "attention_window"))
        rc = fail(r, "model_shape.attention_window", "is 0; a plan without a sliding "
                  "window leaves it out");
    if (!rc && field(o, "window_attn_skip_freq"))
        rc = get_string(r, o, "window_attn_skip_freq", at, s->window_freq,
                        sizeof s->window_freq, 1);
    if (!rc && field(o, "route_groups"))
        rc = get_small(r, o, "route_groups", at, 2, 1 << 20, &s->route_groups);
    if (!rc && field(o, "route_group_topk"))
        rc = get_small(r, o, "route_group_topk", at, 1, 1 << 20, &s->route_group_topk);
    char dt[16], norm[16], act[16], pos[16];
    if (!rc)
        rc = get_string(r, o, "dtype", at, dt, sizeof dt, 1);
    if (!rc && ap_dtype_from_name(dt, &s->dtype))
        rc = fail(r, "model_shape.dtype", "unknown dtype \"%s\"", dt);
    if (!rc)
        rc = get_string(r, o, "norm", at, norm, sizeof norm, 1);
    if (!rc)
        rc = get_string(r, o, "mlp", at, act, sizeof act, 1);
    if (!rc)
        rc = get_string(r, o, "positions", at, pos, sizeof pos, 1);
    if (!rc)
        rc = get_bool(r, o, "tied_embeddings", at, &s->tied_embeddings);
    if (!rc)
        rc = get_bool(r, o, "linear_bias", at, &s->linear_bias);
    if (!rc)
        rc = get_bool(r, o, "flash_attention", at, &s->flash);
    /* Written either way since they came; a plan from before them reads
     * as -1, unknown, which the export does not check. */
    s->qkv_bias = s->qk_norm = -1;
    if (!rc && field(o, "qkv_bias"))
        rc = get_bool(r, o, "qkv_bias", at, &s->qkv_bias);
    if (!rc && field(o, "qk_layernorm"))
        rc = get_bool(r, o, "qk_layernorm", at, &s->qk_norm);
    if (!rc && field(o, "qk_norm_across_heads"))
        rc = get_bool(r, o, "qk_norm_across_heads", at, &s->qk_norm_wide);
    if (!rc && field(o, "qk_l2_norm"))
        rc = get_bool(r, o, "qk_l2_norm", at, &s->qk_l2);
    if (!rc && field(o, "post_norms"))
        rc = get_bool(r, o, "post_norms", at, &s->post_norm);
    if (!rc && field(o, "weightless_norms"))
        rc = get_bool(r, o, "weightless_norms", at, &s->norm_free);
    if (!rc && field(o, "nope_layer_freq")) {
        rc = get_string(r, o, "nope_layer_freq", at, s->nope_freq, sizeof s->nope_freq, 1);
        s->nope_layers = !rc;
    }
    if (!rc)
        rc = parse_router(r, o, s);
    if (!rc)
        rc = parse_attention(r, o, s);
    if (rc)
        return rc;
    if (strcmp(norm, "rmsnorm") && strcmp(norm, "layernorm") && strcmp(norm, "layernorm1p"))
        return fail(r, "model_shape.norm", "\"%s\" is not rmsnorm, layernorm or "
                    "layernorm1p", norm);
    if (strcmp(act, "swiglu") && strcmp(act, "quick_geglu") && strcmp(act, "gated") &&
        strcmp(act, "relu2") && strcmp(act, "relu") && strcmp(act, "plain"))
        return fail(r, "model_shape.mlp", "\"%s\" is not swiglu, quick_geglu, gated, relu2, "
                    "relu or plain", act);
    if (strcmp(pos, "learned") && strcmp(pos, "rotary") && strcmp(pos, "none"))
        return fail(r, "model_shape.positions", "\"%s\" is not learned, rotary or none",
                    pos);
    s->rmsnorm = !strcmp(norm, "rmsnorm");
    s->layernorm_1p = !strcmp(norm, "layernorm1p");
    s->swiglu = !strcmp(act, "swiglu");
    s->quick_geglu = !strcmp(act, "quick_geglu");
    s->gated = s->swiglu || s->quick_geglu || !strcmp(act, "gated");
    s->squared_relu = !strcmp(act, "relu2");
    s->relu = !strcmp(act, "relu");
    s->learned_positions = !strcmp(pos, "learned");
    rc = parse_rotary(r, o, !strcmp(pos, "rotary"), s);
    if (!rc)
        rc = parse_dropout(r, o, s);
    return rc ? rc : parse_numerics(r, o, s);
}

/* "fp8_recipe" (absent: delayed) scales the tensors of an FP8 plan.
 * "fp8_param_gather": true holds FP8 weights that only FP8 linear layers
 * have, and updates them from the distributed optimizer's fp32 main
 * weights, as Megatron-LM requires. Read after "fp8" and "zero". */
static int parse_fp8_params(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    if (field(root, "fp8_recipe")) {
        char s[32];
        int rc = get_string(r, root, "fp8_recipe", "", s, sizeof s, 1);
        if (rc)
            return rc;
        if (ap_fp8_recipe_parse(s, &p->run.fp8_recipe))
            return fail(r, "fp8_recipe", "\"%s\" is not delayed, tensorwise, blockwise "
                        "or mxfp8", s);
        if (!p->run.fp8)
            return fail(r, "fp8_recipe", "scales FP8 tensors, which needs \"fp8\": true");
    }
    if (!field(root, "fp8_param_gather"))
        return AP_OK;
    int rc = get_bool(r, root, "fp8_param_gather", "", &p->run.fp8_param_gather);
    if (rc || !p->run.fp8_param_gather)
        return rc;
    if (!p->run.fp8)
        return fail(r, "fp8_param_gather", "FP8 weights need \"fp8\": true");
    if (p->zero == AP_ZERO_NONE)
        return fail(r, "fp8_param_gather", "needs \"zero\" 1 or more: Megatron-LM "
                    "supports --fp8-param-gather only with the distributed optimizer "
                    "or FSDP");
    return AP_OK;
}

/* "moe_a2a_overlap" and "delay_wgrad_compute": Megatron-Core's combined
 * 1F1B and its delayed expert weight gradients; the second only with the
 * first, as Megatron-Core asserts. */
static int parse_moe_overlap(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    int rc;
    if (field(root, "moe_a2a_overlap") &&
        (rc = get_bool(r, root, "moe_a2a_overlap", "", &p->run.moe_a2a_overlap)))
        return rc;
    if (field(root, "delay_wgrad_compute") &&
        (rc = get_bool(r, root, "delay_wgrad_compute", "", &p->run.delay_wgrad)))
        return rc;
    if (p->run.delay_wgrad && !p->run.moe_a2a_overlap)
        return fail(r, "delay_wgrad_compute", "needs \"moe_a2a_overlap\": true: "
                    "Megatron-Core delays the weight gradients only for the overlap");
    return AP_OK;
}

/* "defer_embedding_wgrad_compute" and "wgrad_deferral_limit" (0: every
 * micro-batch); absent reads as off, as plans were before the fields. */
static int parse_defer_wgrad(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    int rc;
    if (field(root, "defer_embedding_wgrad_compute") &&
        (rc = get_bool(r, root, "defer_embedding_wgrad_compute", "", &p->run.defer_wgrad)))
        return rc;
    if (!field(root, "wgrad_deferral_limit"))
        return AP_OK;
    if (!p->run.defer_wgrad)
        return fail(r, "wgrad_deferral_limit", "needs \"defer_embedding_wgrad_compute\": "
                    "true");
    long long n;
    if ((rc = get_int(r, root, "wgrad_deferral_limit", "", 0, 1 << 30, &n)))
        return rc;
    p->run.wgrad_deferral_limit = (int)n;
    return AP_OK;
}

/* "ddp_bucket_size": the parameters of a gradient bucket as
 * --ddp-bucket-size sets them; absent, Megatron-Core's default. */
static int parse_ddp_bucket(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    long long n;
    int rc;
    if (!field(root, "ddp_bucket_size"))
        return AP_OK;
    if ((rc = get_int(r, root, "ddp_bucket_size", "", 1, 1 << 30, &n)))
        return rc;
    p->run.ddp_bucket = (int)n;
    return AP_OK;
}

/* "gradient_accumulation_fusion" and "async_tensor_parallel_backward";
 * absent read as on, Megatron-LM's defaults, as plans were before the
 * fields. "moe_dispatcher": deepep or
 * hybridep; absent, alltoall. "moe_shared_expert_overlap" and
 * "moe_sequential_experts"; absent, off.
 * "moe_expert_capacity_factor" and "moe_pad_expert_input_to_capacity";
 * absent, dropless.
 * "cuda_graph_impl": local or
 * transformer_engine; absent, none. */
static int parse_grad_fusion(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    int fused = 1, rc;
    if (field(root, "gradient_accumulation_fusion") &&
        (rc = get_bool(r, root, "gradient_accumulation_fusion", "", &fused)))
        return rc;
    p->run.no_grad_fusion = !fused;
    int async = 1;
    if (field(root, "async_tensor_parallel_backward") &&
        (rc = get_bool(r, root, "async_tensor_parallel_backward", "", &async)))
        return rc;
    p->run.tp_sync = !async;
    char s[32];
    if (field(root, "moe_dispatcher")) {
        if ((rc = get_string(r, root, "moe_dispatcher", "", s, sizeof s, 1)))
            return rc;
        if (ap_dispatcher_parse(s, &p->run.dispatcher))
            return fail(r, "moe_dispatcher", "\"%s\" is not alltoall, deepep, hybridep or "
                        "allgather", s);
    }
    if (field(root, "moe_shared_expert_overlap") &&
        (rc = get_bool(r, root, "moe_shared_expert_overlap", "", &p->run.shared_overlap)))
        return rc;
    if (field(root, "moe_sequential_experts") &&
        (rc = get_bool(r, root, "moe_sequential_experts", "", &p->run.sequential_experts)))
        return rc;
    if (field(root, "moe_expert_capacity_factor") &&
        (rc = get_number(r, root, "moe_expert_capacity_factor", "", 1e-9, 1e6,
                         &p->run.capacity_factor)))
        return rc;
    if (field(root, "moe_pad_expert_input_to_capacity") &&
        (rc = get_bool(r, root, "moe_pad_expert_input_to_capacity", "", &p->run.pad_capacity)))
        return rc;
    if (p->run.pad_capacity && !(p->run.capacity_factor > 0))
        return fail(r, "moe_pad_expert_input_to_capacity", "needs "
                    "\"moe_expert_capacity_factor\"");
    if (!field(root, "cuda_graph_impl"))
        return AP_OK;
    if ((rc = get_string(r, root, "cuda_graph_impl", "", s, sizeof s, 1)))
        return rc;
    if (ap_cuda_graph_parse(s, &p->run.cuda_graph))
        return fail(r, "cuda_graph_impl", "\"%s\" is not none, local or "
                    "transformer_engine", s);
    return AP_OK;
}

/* "overlap_param_gather": the distributed optimizer's parameter all-gather
 * in the next forward's pre-hooks. Absent reads as "overlap_grad_reduce",
 * which priced both overlaps together before the field existed. true
 * needs what Megatron-LM asserts for --overlap-param-gather: the
 * distributed optimizer and the gradient reduction overlapped. Read after
 * "zero" and "overlap_grad_reduce". */
static int parse_param_gather(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    p->serial_param_gather = p->serial_grad_sync;
    if (!field(root, "overlap_param_gather"))
        return AP_OK;
    int overlap, rc = get_bool(r, root, "overlap_param_gather", "", &overlap);
    if (rc)
        return rc;
    p->serial_param_gather = !overlap;
    if (!overlap)
        return AP_OK;
    if (p->zero != AP_ZERO_1)
        return fail(r, "overlap_param_gather", "needs \"zero\": 1: Megatron-LM "
                    "supports --overlap-param-gather only with the distributed optimizer");
    if (p->serial_grad_sync)
        return fail(r, "overlap_param_gather", "needs \"overlap_grad_reduce\": true, "
                    "as Megatron-LM asserts for --overlap-param-gather");
    return AP_OK;
}

/* "cross_entropy": the loss's kernels; absent is Megatron-LM's unfused
 * default, which plans written before the field ran. */
static int parse_cross_entropy(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    char s[32];
    if (!field(root, "cross_entropy"))
        return AP_OK;
    int rc = get_string(r, root, "cross_entropy", "", s, sizeof s, 1);
    if (rc)
        return rc;
    if (ap_ce_impl_parse(s, &p->run.cross_entropy))
        return fail(r, "cross_entropy", "\"%s\" is not unfused, native or te", s);
    return AP_OK;
}

/* "cp_comm_type": context parallelism's communication type; absent is the
 * p2p ring, which plans written before the field priced. */
static int parse_cp_comm(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    char s[32];
    if (!field(root, "cp_comm_type"))
        return AP_OK;
    int rc = get_string(r, root, "cp_comm_type", "", s, sizeof s, 1);
    if (rc)
        return rc;
    if (ap_cp_comm_parse(s, &p->run.cp_comm))
        return fail(r, "cp_comm_type", "\"%s\" is not p2p, allgather or a2a", s);
    return AP_OK;
}

/* "main_params_dtype", "exp_avg_dtype" and "exp_avg_sq_dtype": the
 * optimizer states' dtypes; each absent is fp32, which plans written before
 * the fields priced. */
static int parse_opt_dtypes(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    const char *names[3] = {"main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"};
    ap_opt_dtype *slot[3] = {&p->run.opt.main_params, &p->run.opt.exp_avg,
                             &p->run.opt.exp_avg_sq};
    for (int i = 0; i < 3; i++) {
        char s[32];
        if (!field(root, names[i]))
            continue;
        int rc = get_string(r, root, names[i], "", s, sizeof s, 1);
        if (rc)
            return rc;
        ap_opt_dtype t;
        if (ap_opt_dtype_parse(s, &t) ||
            (i ? t == AP_OPT_NONE || t == AP_OPT_REMAINDER
               : t == AP_OPT_FP8 || t == AP_OPT_BF16))
            return fail(r, names[i], "\"%s\" is not %s", s,
                        i ? "fp32, fp16, bf16 or fp8" : "fp32, fp16, none or remainder");
        *slot[i] = t;
    }
    return AP_OK;
}

/* "grad_reduce_in_fp32": true, fp32 gradients; absent is 2-byte ones,
 * which plans written before the field priced. */
static int parse_grad_fp32(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    if (!field(root, "grad_reduce_in_fp32"))
        return AP_OK;
    return get_bool(r, root, "grad_reduce_in_fp32", "", &p->run.grad_fp32);
}

/* "recompute_method" and "recompute_num_layers" (ap_recompute_method);
 * absent is uniform 1, which plans written before the fields ran. */
static int parse_recompute_method(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    char s[32];
    int rc;
    p->recompute_method = AP_RECOMPUTE_UNIFORM;
    p->recompute_layers = 1;
    if (field(root, "recompute_method")) {
        if ((rc = get_string(r, root, "recompute_method", "", s, sizeof s, 1)))
            return rc;
        if (ap_recompute_method_parse(s, &p->recompute_method))
            return fail(r, "recompute_method", "\"%s\" is not uniform or block", s);
    }
    if (field(root, "recompute_num_layers") &&
        (rc = get_small(r, root, "recompute_num_layers", "", 0, 1 << 30, &p->recompute_layers)))
        return rc;
    if (p->recompute_method == AP_RECOMPUTE_UNIFORM && p->recompute_layers < 1)
        return fail(r, "recompute_num_layers", "0 under \"uniform\": a group holds 1 "
                    "layer or more");
    return AP_OK;
}

/* "recompute_modules": the modules selective recomputation redoes
 * (ap_module names, at least one); absent is core_attn alone. */
static int parse_recompute_modules(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    const cJSON *arr = field(root, "recompute_modules");
    if (!arr)
        return AP_OK;
    if (!cJSON_IsArray(arr) || !cJSON_GetArraySize(arr))
        return fail(r, "recompute_modules", "expected an array of module names ("
                    AP_MODULE_NAMES ")");
    unsigned mods = 0;
    int k = 0;
    for (const cJSON *s = arr->child; s; s = s->next, k++) {
        unsigned bit = cJSON_IsString(s) ? ap_module_from_name(s->valuestring) : 0;
        if (!bit) {
            char at[64];
            snprintf(at, sizeof at, "recompute_modules[%d]", k);
            return fail(r, at, "not a module name (" AP_MODULE_NAMES ")");
        }
        mods |= bit;
    }
    p->run.recompute_modules = ap_rc_modules_setting(mods);
    return AP_OK;
}

/* The launchers start gpus / gpus_per_node nodes of gpus_per_node
 * processes each (torchrun's --nnodes and --nproc-per-node), so the GPUs
 * must fill whole nodes, or be one node's, as the planner's own clusters
 * are (ap_cluster_set_size refuses any other shape): with 8 GPUs on nodes
 * of 5 an export would start 5 processes, or with 16 on nodes of 3, 15. */
static int check_nodes(const reader *r, const ap_plan_desc *p)
{
    if (p->gpus <= p->gpus_per_node || p->gpus % p->gpus_per_node == 0)
        return AP_OK;
    return fail(r, "gpus_per_node", "%d does not divide the plan's %d GPUs into whole "
                "nodes; a plan's GPUs fill whole nodes of gpus_per_node, or one node",
                p->gpus_per_node, p->gpus);
}

static int parse_top(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    char format[32];
    const char *kind = ap_json_kind(root);
    if (kind && strncmp(kind, "a plan", 6))
        return fail(r, "", "this is %s, not a plan (\"format\": \"autopar-plan/1\"): "
                    "export reads what `autopar plan -o plan.json` or `autopar estimate "
                    "-o plan.json` writes", kind);
    int rc = get_string(r, root, "format", "", format, sizeof format, 1);
    if (rc)
        return rc;
    if (strcmp(format, "autopar-plan/1"))
        return fail(r, "format", "\"%s\" is not \"autopar-plan/1\"", format);
    int zero;
    if ((rc = get_string(r, root, "model", "", p->model, sizeof p->model, 1)) ||
        (rc = get_string(r, root, "model_path", "", p->model_path, sizeof p->model_path, 0)) ||
        (rc = get_string(r, root, "cluster", "", p->cluster, sizeof p->cluster, 1)) ||
        (rc = get_small(r, root, "gpus", "", 1, 1 << 20, &p->gpus)) ||
        (rc = get_small(r, root, "gpus_per_node", "", 1, 1024, &p->gpus_per_node)) ||
        (rc = get_number(r, root, "global_batch", "", 1, 1e12, &p->global_batch)) ||
        (rc = get_number(r, root, "micro_batch", "", 1e-9, 1e12, &p->micro_batch)) ||
        (rc = get_small(r, root, "num_micro_batches", "", 1, 1 << 30, &p->nmicro)) ||
        (rc = get_small(r, root, "seq_length", "", 1, 1 << 30, &p->seq)) ||
        (rc = parse_schedule(r, root, &p->schedule)) ||
        (rc = get_small(r, root, "virtual_stages", "", 1, 1 << 20, &p->vchunks)) ||
        (rc = get_small(r, root, "zero", "", 0, 3, &zero)))
        return rc;
    p->zero = (ap_zero)zero;
    if ((rc = check_nodes(r, p)))
        return rc;
    if (field(root, "overlap_grad_reduce")) {
        int overlap;
        if ((rc = get_bool(r, root, "overlap_grad_reduce", "", &overlap)))
            return rc;
        p->serial_grad_sync = !overlap;
    }
    if (field(root, "fp8") && (rc = get_bool(r, root, "fp8", "", &p->run.fp8)))
        return rc;
    if (field(root, "tp_comm_overlap") &&
        (rc = get_bool(r, root, "tp_comm_overlap", "", &p->run.tp_overlap)))
        return rc;
    if ((rc = parse_fp8_params(r, root, p)) || (rc = parse_cross_entropy(r, root, p)) ||
        (rc = parse_grad_fp32(r, root, p)) || (rc = parse_cp_comm(r, root, p)) ||
        (rc = parse_opt_dtypes(r, root, p)) ||
        (rc = parse_moe_overlap(r, root, p)) || (rc = parse_defer_wgrad(r, root, p)) ||
        (rc = parse_ddp_bucket(r, root, p)) ||
        (rc = parse_grad_fusion(r, root, p)) ||
        (rc = parse_param_gather(r, root, p)) ||
        (rc = parse_recompute_method(r, root, p)) ||
        (rc = parse_recompute_modules(r, root, p)))
        return rc;
    const cJSON *shape = field(root, "model_shape");
    if (shape) {
        if ((rc = parse_shape(r, shape, &p->shape)))
            return rc;
        p->has_shape = 1;
        /* The model is rebuilt at seq_length for the export, and the
         * shape is the one its flags state: both are the plan's length. */
        if (p->shape.seq != p->seq)
            return fail(r, "model_shape.seq", "is %lld, but seq_length is %d",
                        p->shape.seq, p->seq);
    }
    const cJSON *pred = field(root, "prediction");
    if (!cJSON_IsObject(pred))
        return fail(r, "prediction", pred ? "expected an object" : "missing");
    return get_number(r, pred, "step_time_s", "prediction", 0, 1e30, &p->step_time);
}

/* "chunk_layers": nstages * virtual_stages layer counts, chunk c of stage
 * s at c * nstages + s, read once the stage count is known. A chunk may
 * hold no layer; a stage holds at least one (parse_stage). */
static int parse_chunk_layers(const reader *r, const cJSON *root, int nstages,
                              ap_plan_desc *p)
{
    const cJSON *v = field(root, "chunk_layers");
    if (!v)
        return AP_OK;
    if (p->vchunks < 2)
        return fail(r, "chunk_layers", "given with virtual_stages %d; model chunks "
                    "of their own need virtual_stages 2 or more", p->vchunks);
    long long want = (long long)nstages * p->vchunks;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != want)
        return fail(r, "chunk_layers", "expected an array of %lld layer counts "
                    "(%d stages x %d virtual_stages)", want, nstages, p->vchunks);
    p->chunk_layers = calloc((size_t)want, sizeof *p->chunk_layers);
    if (!p->chunk_layers) {
        snprintf(r->err, AP_ERR_LEN, "%s: out of memory", r->source);
        return AP_EINTERNAL;
    }
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
            e->valuedouble < 0 || e->valuedouble > 1 << 20) {
            char at[48];
            snprintf(at, sizeof at, "chunk_layers[%d]", i);
            return fail(r, at, "expected an integer from 0 to %d", 1 << 20);
        }
        p->chunk_layers[i++] = (int)e->valuedouble;
    }
    return AP_OK;
}

/* Each stage's chunks hold its layers, its first chunk starts at its first
 * layer, and all of them hold the model's layers where the plan says how
 * many that is. The model's layers run through the chunks in index order,
 * so stage s's first chunk starts after the entries before index s. */
static int check_chunks(const reader *r, const ap_plan_desc *p)
{
    char at[64];
    int n = p->nstages;
    long long first = 0, total = 0;
    for (int s = 0; s < n; s++) {
        const ap_plan_desc_stage *st = &p->stages[s];
        long long held = 0;
        for (int c = 0; c < p->vchunks; c++)
            held += p->chunk_layers[(long long)c * n + s];
        snprintf(at, sizeof at, "stages[%d].layers", s);
        if (held != st->nlayers)
            return fail(r, at, "holds %d layer%s, but its chunks in chunk_layers hold "
                        "%lld", st->nlayers, st->nlayers == 1 ? "" : "s", held);
        if (st->first_layer != first)
            return fail(r, at, "starts at layer %d, but its first model chunk "
                        "(chunk_layers[%d]) starts at layer %lld", st->first_layer, s,
                        first);
        first += p->chunk_layers[s];
    }
    for (long long i = 0; i < (long long)n * p->vchunks; i++)
        total += p->chunk_layers[i];
    if (p->has_shape && total != p->shape.layers)
        return fail(r, "chunk_layers", "holds %lld layers, but model_shape.layers is %d",
                    total, p->shape.layers);
    return AP_OK;
}

/* "recompute_modules" names what selective recomputation redoes, so a
 * plan with them has a stage that runs it. */
static int check_modules_stage(const reader *r, const ap_plan_desc *p)
{
    if (!p->run.recompute_modules)
        return AP_OK;
    for (int i = 0; i < p->nstages; i++)
        if (p->stages[i].recompute == AP_RECOMPUTE_SELECTIVE)
            return AP_OK;
    return fail(r, "recompute_modules", "given, but no stage's \"recompute\" is "
                "\"selective\"");
}

static int parse_root(const reader *r, const cJSON *root, ap_plan_desc *p)
{
    if (!cJSON_IsObject(root))
        return fail(r, "", "not a JSON object");
    int rc = parse_top(r, root, p);
    if (rc)
        return rc;
    const cJSON *stages = field(root, "stages");
    if (!cJSON_IsArray(stages) || !cJSON_GetArraySize(stages))
        return fail(r, "stages", stages ? "expected a non-empty array" : "missing");
    int n = cJSON_GetArraySize(stages);
    p->stages = calloc((size_t)n, sizeof *p->stages);
    if (!p->stages) {
        snprintf(r->err, AP_ERR_LEN, "%s: out of memory", r->source);
        return AP_EINTERNAL;
    }
    p->nstages = n;
    if ((rc = parse_chunk_layers(r, root, n, p)))
        return rc;
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, stages) {
        if ((rc = parse_stage(r, s, i++, p)))
            return rc;
    }
    if ((rc = check_cover(r, p)) || (rc = check_modules_stage(r, p)))
        return rc;
    return p->chunk_layers ? check_chunks(r, p) : AP_OK;
}

void ap_plan_desc_free(ap_plan_desc *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->nstages; i++)
        free(d->stages[i].ops);
    free(d->stages);
    free(d->chunk_layers);
    d->stages = NULL;
    d->chunk_layers = NULL;
    d->nstages = 0;
}

/* Line and column of byte `at`, for JSON syntax errors. */
static void locate(const char *text, size_t at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

int ap_plan_desc_parse(const char *text, size_t len, const char *source,
                       ap_plan_desc *out, char *err)
{
    reader r = {source ? source : "(plan)", err};
    memset(out, 0, sizeof *out);
    snprintf(out->source, sizeof out->source, "%s", r.source);
    const char *end = NULL;
    size_t bad = ap_json_control_byte(text, len);
    if (bad < len) {
        int line, col;
        locate(text, bad, &line, &col);
        char what[96];
        snprintf(err, AP_ERR_LEN, "%s: not valid JSON at line %d, column %d: %s", r.source,
                 line, col, ap_json_control_what(text, bad, what, sizeof what));
        return AP_EINPUT;
    }
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root && ap_json_too_deep(text, len)) {
        snprintf(err, AP_ERR_LEN, "%s: not valid JSON: arrays and objects nested deeper "
                 "than %d levels", r.source, AP_JSON_MAX_DEPTH);
        return AP_EINPUT;
    }
    size_t extra = root ? ap_json_trailing(text, len, end) : 0;
    if (extra) {
        int line, col;
        locate(text, extra, &line, &col);
        snprintf(err, AP_ERR_LEN, "%s: not valid JSON at line %d, column %d: text after "
                 "the closing '}'", r.source, line, col);
        cJSON_Delete(root);
        return AP_EINPUT;
    }
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
        int line, col;
        locate(text, at, &line, &col);
        size_t rest = at;
        while (rest < len && strchr(" \t\r\n", text[rest]))
            rest++;
        if (rest >= len)
            snprintf(err, AP_ERR_LEN, "%s: not valid JSON: unexpected end of input", r.source);
        else
            snprintf(err, AP_ERR_LEN, "%s: not valid JSON at line %d, column %d",
                     r.source, line, col);
        return AP_EINPUT;
    }
    char dup_path[256];
    if (ap_json_duplicate(root, dup_path, sizeof dup_path)) {
        snprintf(err, AP_ERR_LEN, "%s: %s: given twice; say it once", r.source, dup_path);
        cJSON_Delete(root);
        return AP_EINPUT;
    }
    int rc = parse_root(&r, root, out);
    cJSON_Delete(root);
    if (rc)
        ap_plan_desc_free(out);
    return rc;
}

int ap_plan_read(const char *path, ap_plan_desc *out, char *err)
{
    char *text;
    size_t len;
    memset(out, 0, sizeof *out);
    int rc = ap_read_file(path, &text, &len, err);
    if (rc)
        return rc;
    rc = ap_plan_desc_parse(text, len, path, out, err);
    free(text);
    return rc;
}
