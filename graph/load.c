/* load.c -- reading a model: the project's JSON format ("autopar-model/1",
 * docs/model-format.md), or a Hugging Face config.json handed to
 * ap_graph_from_hf(). Every message names the file and the JSON path of what
 * is wrong; nothing half-loaded is ever returned. */
#include "graph/graph.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT "autopar-model/1"
#define MAX_EXACT 9007199254740992.0 /* 2^53: larger sizes lose digits */

typedef struct {
    const char *source;
    char *err;
} ctx;

static int fail(const ctx *c, const char *fmt, ...)
{
    int k = snprintf(c->err, AP_ERR_LEN, "%s: ", c->source);
    size_t n = k < 0 ? 0 : (size_t)k;
    if (n < AP_ERR_LEN) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + n, AP_ERR_LEN - n, fmt, ap);
        va_end(ap);
    }
    return AP_EINPUT;
}

/* cJSON reports where parsing stopped; people want a line and a column. */
/* A raw control character (ap_json_control_byte), named by its line and
 * column. */
static int control_byte(const char *text, size_t len, const ctx *c)
{
    size_t at = ap_json_control_byte(text, len);
    if (at == len)
        return 0;
    int line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
        line += text[i] == '\n';
        col = text[i] == '\n' ? 1 : col + 1;
    }
    char what[96];
    fail(c, "line %d, column %d: malformed JSON: %s", line, col,
         ap_json_control_what(text, at, what, sizeof what));
    return 1;
}

static cJSON *parse(const char *text, size_t len, const ctx *c)
{
    const char *end = NULL;
    if (control_byte(text, len, c))
        return NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t extra = root ? ap_json_trailing(text, len, end) : 0;
    if (root && !extra)
        return root;
    if (root) {
        /* The error below points at the text after the document. */
        end = text + extra;
        cJSON_Delete(root);
    }
    if (ap_json_too_deep(text, len)) {
        fail(c, "malformed JSON: arrays and objects nested deeper than %d levels",
             AP_JSON_MAX_DEPTH);
        return NULL;
    }
    if (!end || end < text || end > text + len)
        end = text + len;
    int line = 1, col = 1;
    for (const char *p = text; p < end; p++) {
        if (*p == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    /* cJSON points at the last byte when the input ran out; a closing
     * bracket there is a real error at that place instead. */
    size_t at = (size_t)(end - text); /* text + len - 1 is UB when len is 0 */
    if (at + 1 >= len && (at == len || (*end != '}' && *end != ']')))
        fail(c, "line %d, column %d: malformed JSON: unexpected end of "
                "input", line, col);
    else
        fail(c, "line %d, column %d: malformed JSON near '%c'", line, col,
             *end >= ' ' && *end < 127 ? *end : '?');
    return NULL;
}

/* Refuses keys that are not in `known` (NULL-terminated) and keys given
 * twice: a misspelt field must not be silently ignored. */
static int check_fields(const ctx *c, const cJSON *obj, const char *path,
                        const char *const *known)
{
    for (const cJSON *f = obj->child; f; f = f->next) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(f->string, known[i]);
        if (!ok)
            return fail(c, "%s%sunknown field \"%s\"", path,
                        path[0] ? ": " : "", f->string);
        for (const cJSON *e = obj->child; e != f; e = e->next)
            if (!strcmp(e->string, f->string))
                return fail(c, "%s%sduplicate field \"%s\"", path,
                            path[0] ? ": " : "", f->string);
    }
    return AP_OK;
}

/* A control character in a name is refused (ap_control_char says why). */
static int check_name(const ctx *c, const char *path, const char *name)
{
    int ch = ap_control_char(name);
    if (!ch)
        return AP_OK;
    return fail(c, "%s: a control character (0x%02x) in a name, which reports and "
                "launch scripts print as it is", path, ch);
}

static const cJSON *field(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int get_string(const ctx *c, const cJSON *obj, const char *path,
                      const char *key, int required, const char **out)
{
    const cJSON *v = field(obj, key);
    if (!v) {
        if (required)
            return fail(c, "%s%smissing field \"%s\"", path,
                        path[0] ? ": " : "", key);
        return AP_OK;
    }
    if (!cJSON_IsString(v))
        return fail(c, "%s%s%s: expected a string", path, path[0] ? "." : "",
                    key);
    *out = v->valuestring;
    return AP_OK;
}

static int get_int(const ctx *c, const cJSON *obj, const char *path,
                   const char *key, double min, double max, int64_t *out)
{
    const cJSON *v = field(obj, key);
    const char *dot = path[0] ? "." : "";
    if (!v)
        return fail(c, "%s%smissing field \"%s\"", path, path[0] ? ": " : "",
                    key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return fail(c, "%s%s%s: expected an integer", path, dot, key);
    if (v->valuedouble < min || v->valuedouble > max)
        return fail(c, "%s%s%s: %.17g is out of range (%.17g to %.17g)", path,
                    dot, key, v->valuedouble, min, max);
    *out = (int64_t)v->valuedouble;
    return AP_OK;
}

static int get_bool(const ctx *c, const cJSON *obj, const char *path,
                    const char *key, int *out)
{
    const cJSON *v = field(obj, key);
    if (!v)
        return AP_OK;
    if (!cJSON_IsBool(v))
        return fail(c, "%s.%s: expected true or false", path, key);
    *out = cJSON_IsTrue(v);
    return AP_OK;
}

static int get_prob(const ctx *c, const cJSON *obj, const char *path,
                    const char *key, double *out)
{
    const cJSON *v = field(obj, key);
    if (!v)
        return AP_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1))
        return fail(c, "%s.%s: expected a probability in [0, 1)", path, key);
    *out = v->valuedouble;
    return AP_OK;
}

/* Sizes of batch and sequence dimensions replaced by the build options;
 * capacity dimensions (tokens per expert) scale with the tokens. */
static int64_t rescaled(const ap_dim *d, const ap_build_opts *opt,
                        double token_ratio)
{
    if (d->kind == AP_DIM_BATCH && opt->batch > 0)
        return opt->batch;
    if (d->kind == AP_DIM_SEQ && opt->seq > 0)
        return opt->seq;
    if (d->kind == AP_DIM_CAPACITY && token_ratio != 1) {
        double s = ceil((double)d->size * token_ratio);
        return s < 1 ? 1 : s > MAX_EXACT ? -1 : (int64_t)s;
    }
    return d->size;
}

static double token_ratio(const ap_dim *dims, int n, const ap_build_opts *opt)
{
    double before = 1, after = 1;
    for (int i = 0; opt && i < n; i++) {
        if (dims[i].kind == AP_DIM_BATCH) {
            before *= (double)dims[i].size;
            after *= (double)(opt->batch > 0 ? opt->batch : dims[i].size);
        } else if (dims[i].kind == AP_DIM_SEQ) {
            before *= (double)dims[i].size;
            after *= (double)(opt->seq > 0 ? opt->seq : dims[i].size);
        }
    }
    return after / before;
}

static int load_dims(const ctx *c, const cJSON *dims, ap_graph *g,
                     const ap_build_opts *opt)
{
    static const char *const known[] = {"name", "kind", "size", NULL};
    ap_dim parsed[AP_MAX_DIMS];
    int n = 0;
    char path[64];
    if (!cJSON_IsObject(dims))
        return fail(c, "dims: expected an object of labels");
    for (const cJSON *d = dims->child; d; d = d->next) {
        const char *key = d->string;
        if (strlen(key) != 1 ||
            !((key[0] >= 'a' && key[0] <= 'z') ||
              (key[0] >= 'A' && key[0] <= 'Z')))
            return fail(c, "dims: label \"%.40s\" is not one letter a-z or "
                           "A-Z", key);
        for (int i = 0; i < n; i++)
            if (parsed[i].label == key[0])
                return fail(c, "dims: duplicate label \"%s\"", key);
        if (n >= AP_MAX_DIMS)
            return fail(c, "dims: more than %d dimensions", AP_MAX_DIMS);
        snprintf(path, sizeof path, "dims.%c", key[0]);
        if (!cJSON_IsObject(d))
            return fail(c, "%s: expected an object", path);
        const char *kind = NULL, *name = NULL;
        ap_dim *p = &parsed[n];
        if (check_fields(c, d, path, known) ||
            get_string(c, d, path, "kind", 1, &kind) ||
            get_string(c, d, path, "name", 0, &name) ||
            get_int(c, d, path, "size", 1, MAX_EXACT, &p->size))
            return AP_EINPUT;
        if (ap_dim_kind_from_name(kind, &p->kind))
            return fail(c, "%s.kind: unknown kind \"%s\" (expected batch, "
                           "seq, hidden, ffn, heads, kv_heads, head_dim, "
                           "vocab, experts, capacity or other)",
                        path, kind);
        if (name && (!name[0] || strlen(name) >= AP_NAME_LEN))
            return fail(c, "%s.name: must have 1 to %d characters", path,
                        AP_NAME_LEN - 1);
        char at[80];
        snprintf(at, sizeof at, "%s.name", path);
        if (name && check_name(c, at, name))
            return AP_EINPUT;
        p->label = key[0];
        snprintf(p->name, sizeof p->name, "%s",
                 name ? name : ap_dim_kind_name(p->kind));
        n++;
    }
    double ratio = token_ratio(parsed, n, opt);
    for (int i = 0; i < n; i++) {
        int64_t size = opt ? rescaled(&parsed[i], opt, ratio) : parsed[i].size;
        if (size < 1)
            return fail(c, "dims.%c.size: too large after rescaling to the "
                           "requested batch and sequence",
                        parsed[i].label);
        if (ap_graph_add_dim(g, parsed[i].label, parsed[i].name,
                             parsed[i].kind, size, c->err) < 0)
            return AP_EINPUT;
    }
    return AP_OK;
}

static int load_role(const ctx *c, const char *path, const char *s,
                     ap_role *out)
{
    static const char *const names[] = {"input", "parameter", "activation"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (ap_role)i;
            return AP_OK;
        }
    return fail(c, "%s.role: unknown role \"%s\" (expected input, parameter "
                   "or activation)", path, s);
}

static int load_tensors(const ctx *c, const cJSON *arr, ap_graph *g)
{
    static const char *const known[] = {"name", "shape", "role", "dtype",
                                        NULL};
    char path[64];
    if (!cJSON_IsArray(arr))
        return fail(c, "tensors: expected an array");
    int count = cJSON_GetArraySize(arr);
    if (count > AP_MAX_TENSORS)
        return fail(c, "tensors: %d tensors, more than the limit of %d",
                    count, AP_MAX_TENSORS);
    int i = 0;
    for (const cJSON *t = arr->child; t; t = t->next, i++) {
        snprintf(path, sizeof path, "tensors[%d]", i);
        const char *name = NULL, *shape = NULL, *role = NULL, *dtype = NULL;
        if (!cJSON_IsObject(t))
            return fail(c, "%s: expected an object", path);
        if (check_fields(c, t, path, known) ||
            get_string(c, t, path, "name", 1, &name) ||
            get_string(c, t, path, "shape", 1, &shape) ||
            get_string(c, t, path, "role", 1, &role) ||
            get_string(c, t, path, "dtype", 0, &dtype))
            return AP_EINPUT;
        ap_role r = AP_TENSOR_ACT;
        ap_dtype dt = g->dtype;
        if (load_role(c, path, role, &r))
            return AP_EINPUT;
        char at[80];
        snprintf(at, sizeof at, "%s.name", path);
        if (check_name(c, at, name))
            return AP_EINPUT;
        if (dtype && ap_dtype_from_name(dtype, &dt))
            return fail(c, "%s.dtype: unknown dtype \"%s\"", path, dtype);
        if (ap_graph_add_tensor(g, name, shape, dt, r, c->err) < 0)
            return AP_EINPUT;
    }
    return AP_OK;
}

/* Reads ops[i].inputs or .outputs as names; the builder resolves them. */
static int load_names(const ctx *c, const cJSON *op, const char *path,
                      const char *key, const char **names, int *n)
{
    const cJSON *arr = field(op, key);
    if (!arr)
        return fail(c, "%s: missing field \"%s\"", path, key);
    if (!cJSON_IsArray(arr))
        return fail(c, "%s.%s: expected an array of tensor names", path, key);
    int k = cJSON_GetArraySize(arr);
    if (k > AP_MAX_IO)
        return fail(c, "%s.%s: %d tensors; at most %d allowed", path, key, k,
                    AP_MAX_IO);
    k = 0;
    for (const cJSON *s = arr->child; s; s = s->next, k++) {
        if (!cJSON_IsString(s))
            return fail(c, "%s.%s[%d]: expected a tensor name", path, key, k);
        names[k] = s->valuestring;
    }
    *n = k;
    return AP_OK;
}

/* A router's "score", "normalize", "expert_bias", "probs_on_input" and
 * "scale" (ap_op's route_*), each optional: where left out, a softmax,
 * renormalised, no bias, weighing the output, not scaled
 * (ap_graph_add_op's). A bad value names the op. */
static int load_router(const ctx *c, const cJSON *o, const char *path, ap_op *op)
{
    const cJSON *v = field(o, "score");
    if (v && (!cJSON_IsString(v) || (strcmp(v->valuestring, "softmax") &&
                                     strcmp(v->valuestring, "sigmoid"))))
        return fail(c, "%s.score: router \"%s\": expected \"softmax\" or \"sigmoid\"",
                    path, op->name);
    if (v)
        op->route_score = strcmp(v->valuestring, "sigmoid") ? AP_ROUTE_SOFTMAX
                                                            : AP_ROUTE_SIGMOID;
    static const char *const flags[] = {"normalize", "expert_bias", "probs_on_input"};
    int *slot[] = {&op->route_norm, &op->route_bias, &op->route_on_input};
    for (int i = 0; i < 3; i++) {
        if (!(v = field(o, flags[i])))
            continue;
        if (!cJSON_IsBool(v))
            return fail(c, "%s.%s: router \"%s\": expected true or false", path, flags[i],
                        op->name);
        *slot[i] = cJSON_IsTrue(v);
    }
    if ((v = field(o, "scale")) &&
        !(cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble <= 1e6))
        return fail(c, "%s.scale: router \"%s\": expected a number above 0 (and at most "
                    "1e6) that the weights are multiplied by", path, op->name);
    if (v)
        op->route_scale = v->valuedouble;
    return AP_OK;
}

/* Attributes are accepted only on the kinds they mean something for. */
static int load_attrs(const ctx *c, const cJSON *o, const char *path,
                      ap_op *op)
{
    static const char *const attention[] = {"causal", "flash", "dropout",
                                            "window", "chunk", NULL};
    static const char *const dropout[] = {"p", NULL};
    static const char *const moe[] = {"top_k", "groups", "group_topk", NULL};
    static const char *const router[] = {"top_k", "groups", "group_topk", "score",
                                         "normalize", "expert_bias", "probs_on_input",
                                         "scale", NULL};
    static const char *const none[] = {NULL};
    static const char *const common[] = {"name", "kind", "layer", "inputs",
                                         "outputs", "modules", NULL};
    const char *const *own = none;
    if (op->kind == AP_OP_ATTENTION)
        own = attention;
    else if (op->kind == AP_OP_DROPOUT)
        own = dropout;
    else if (op->kind == AP_OP_ROUTER)
        own = router;
    else if (op->kind == AP_OP_DISPATCH || op->kind == AP_OP_COMBINE)
        own = moe;
    for (const cJSON *f = o->child; f; f = f->next) {
        int ok = 0;
        for (int i = 0; common[i] && !ok; i++)
            ok = !strcmp(f->string, common[i]);
        for (int i = 0; own[i] && !ok; i++)
            ok = !strcmp(f->string, own[i]);
        if (!ok)
            return fail(c, "%s: unknown field \"%s\" for a %s op", path,
                        f->string, ap_op_kind_name(op));
    }
    int64_t k = 0, groups = 0, group_topk = 0;
    int routed = own == moe || own == router;
    if (routed && (get_int(c, o, path, "top_k", 1, 1 << 20, &k) ||
                    (field(o, "groups") &&
                     get_int(c, o, path, "groups", 2, 1 << 20, &groups)) ||
                    (field(o, "group_topk") &&
                     get_int(c, o, path, "group_topk", 1, 1 << 20, &group_topk))))
        return AP_EINPUT;
    if (!groups != !group_topk)
        return fail(c, "%s: \"groups\" and \"group_topk\" go together", path);
    op->top_k = (int)k;
    op->groups = (int)groups;
    op->group_topk = (int)group_topk;
    if (own == router && load_router(c, o, path, op))
        return AP_EINPUT;
    if (own == attention && field(o, "window") &&
        get_int(c, o, path, "window", 1, INT64_C(1) << 40, &op->window))
        return AP_EINPUT;
    if (own == attention && field(o, "chunk") &&
        get_int(c, o, path, "chunk", 1, INT64_C(1) << 40, &op->chunk))
        return AP_EINPUT;
    return get_bool(c, o, path, "causal", &op->causal) ||
                   get_bool(c, o, path, "flash", &op->flash) ||
                   get_prob(c, o, path, "dropout", &op->dropout_p) ||
                   get_prob(c, o, path, "p", &op->dropout_p)
               ? AP_EINPUT
               : AP_OK;
}

/* "modules": the names of the Megatron-Core modules the op is in
 * (ap_module), each at most once. */
static int load_modules(const ctx *c, const cJSON *o, const char *path, ap_op *op)
{
    const cJSON *arr = field(o, "modules");
    if (!arr)
        return AP_OK;
    if (!cJSON_IsArray(arr))
        return fail(c, "%s.modules: expected an array of module names", path);
    int k = 0;
    for (const cJSON *s = arr->child; s; s = s->next, k++) {
        unsigned bit = cJSON_IsString(s) ? ap_module_from_name(s->valuestring) : 0;
        if (!bit)
            return fail(c, "%s.modules[%d]: expected one of " AP_MODULE_NAMES, path, k);
        if (op->modules & bit)
            return fail(c, "%s.modules[%d]: \"%s\" named twice", path, k, s->valuestring);
        op->modules |= bit;
    }
    return AP_OK;
}

static int load_op(const ctx *c, const cJSON *o, const char *path,
                   ap_graph *g)
{
    static const char *const any[] = {"name",   "kind",  "layer", "inputs",
                                      "outputs", "causal", "flash", "dropout",
                                      "p",      "top_k", "modules", "groups",
                                      "group_topk", "window", "chunk", "score",
                                      "normalize", "expert_bias", "probs_on_input",
                                      "scale", NULL};
    const char *name = NULL, *kind = NULL;
    const char *in[AP_MAX_IO], *out[AP_MAX_IO];
    int nin = 0, nout = 0, sub = 0;
    int64_t layer = -1;
    ap_op_kind k;
    if (!cJSON_IsObject(o))
        return fail(c, "%s: expected an object", path);
    if (check_fields(c, o, path, any) ||
        get_string(c, o, path, "name", 1, &name) ||
        get_string(c, o, path, "kind", 1, &kind))
        return AP_EINPUT;
    if (ap_op_kind_from_name(kind, &k, &sub))
        return fail(c, "%s.kind: unknown op kind \"%s\"", path, kind);
    char at[80];
    snprintf(at, sizeof at, "%s.name", path);
    if (check_name(c, at, name))
        return AP_EINPUT;
    if (field(o, "layer") &&
        get_int(c, o, path, "layer", 0, 1 << 20, &layer))
        return AP_EINPUT;
    if (load_names(c, o, path, "inputs", in, &nin) ||
        load_names(c, o, path, "outputs", out, &nout))
        return AP_EINPUT;
    if (nout == 0)
        return fail(c, "%s.outputs: an op needs at least one output", path);
    int i = ap_graph_add_op(g, name, k, sub, (int)layer, in, nin, out, nout,
                            c->err);
    if (i < 0)
        return AP_EINPUT;
    return load_attrs(c, o, path, &g->ops[i]) || load_modules(c, o, path, &g->ops[i])
               ? AP_EINPUT
               : AP_OK;
}

static int load_ops(const ctx *c, const cJSON *arr, ap_graph *g)
{
    char path[64];
    if (!cJSON_IsArray(arr))
        return fail(c, "ops: expected an array");
    int count = cJSON_GetArraySize(arr);
    if (count > AP_MAX_OPS)
        return fail(c, "ops: %d ops, more than the limit of %d", count,
                    AP_MAX_OPS);
    int i = 0;
    for (const cJSON *o = arr->child; o; o = o->next, i++) {
        snprintf(path, sizeof path, "ops[%d]", i);
        if (load_op(c, o, path, g))
            return AP_EINPUT;
    }
    return AP_OK;
}

static int load_header(const ctx *c, const cJSON *root, const char **name,
                       ap_dtype *dtype)
{
    static const char *const known[] = {"format", "name",    "description",
                                        "dtype",  "dims",    "tensors",
                                        "ops",    "mtp_layers", "rope_base",
                                        "norm_eps", "rope_scaling",
                                        "rope_scaling_factor", "glu_offset",
                                        "glu_clamp", NULL};
    const char *format = NULL, *dt = NULL, *desc = NULL;
    const char *kind = ap_json_kind(root);
    if (kind && strncmp(kind, "a model", 7))
        return fail(c, "this is %s, not a model: give the model file or the Hugging "
                    "Face config.json%s", kind,
                    !strncmp(kind, "a plan", 6) ? " (the plan's model_path names it)" : "");
    if (check_fields(c, root, "", known) ||
        get_string(c, root, "", "format", 1, &format))
        return AP_EINPUT;
    if (strcmp(format, FORMAT))
        return fail(c, "format: \"%.64s\" is not supported (expected \"%s\")",
                    format, FORMAT);
    if (get_string(c, root, "", "name", 1, name) ||
        get_string(c, root, "", "description", 0, &desc) ||
        get_string(c, root, "", "dtype", 0, &dt))
        return AP_EINPUT;
    if (!(*name)[0] || strlen(*name) >= AP_NAME_LEN)
        return fail(c, "name: must have 1 to %d characters", AP_NAME_LEN - 1);
    if (check_name(c, "name", *name))
        return AP_EINPUT;
    if (dt && ap_dtype_from_name(dt, dtype))
        return fail(c, "dtype: unknown dtype \"%s\" (expected bf16, fp16, "
                       "fp32, fp8, int32 or int64)", dt);
    for (const char *const *k = (const char *const[]){"dims", "tensors",
                                                      "ops", NULL};
         *k; k++)
        if (!field(root, *k))
            return fail(c, "missing field \"%s\"", *k);
    return AP_OK;
}

/* "mtp_layers": how many of the ops after the layers are MTP modules
 * (written by `autopar graph -o` from a config built with them); build
 * options can only ask for the count the file has. */
static int load_mtp(const ctx *c, const cJSON *root, ap_graph *g, const ap_build_opts *opt)
{
    int64_t n = 0;
    if (field(root, "mtp_layers") && get_int(c, root, "", "mtp_layers", 0, AP_MAX_MTP, &n))
        return AP_EINPUT;
    g->mtp_layers = (int)n;
    if (opt && opt->mtp_layers && opt->mtp_layers != n)
        return fail(c, "mtp_layers: the model has %d multi-token-prediction modules, "
                    "not the %d asked for (they are built from a Hugging Face "
                    "config.json)", (int)n, opt->mtp_layers);
    return AP_OK;
}

/* A number from `min` up to below `max`, or absent (0). The least is the
 * one a plan's model_shape takes back (plan_read.c), so that a model
 * with a subnormal rope_base is refused here, naming its file, rather
 * than by the plan it would be written into. */
static int get_positive(const ctx *c, const cJSON *obj, const char *key, double min,
                        double max, double *out)
{
    const cJSON *v = field(obj, key);
    *out = 0;
    if (!v)
        return AP_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= min && v->valuedouble < max))
        return fail(c, "%s: expected a number above 0 and below %g, and at least %g",
                    key, max, min);
    *out = v->valuedouble;
    return AP_OK;
}

/* The numbers that change no cost but that the exports state (ap_graph's
 * rope_base and the rest), each optional: "rope_scaling" is "llama3" (with
 * "rope_scaling_factor") or "other". */
static int load_numerics(const ctx *c, const cJSON *root, ap_graph *g)
{
    const char *scaling = NULL;
    if (get_positive(c, root, "rope_base", 1e-9, 1e12, &g->rope_base) ||
        get_positive(c, root, "norm_eps", 1e-30, 1, &g->norm_eps) ||
        get_positive(c, root, "rope_scaling_factor", 1e-9, 1e6, &g->rope_scaling_factor) ||
        get_positive(c, root, "glu_offset", 1e-9, 2e6, &g->glu_offset) ||
        get_positive(c, root, "glu_clamp", 1e-9, 2e6, &g->glu_clamp) ||
        get_string(c, root, "", "rope_scaling", 0, &scaling))
        return AP_EINPUT;
    if (!scaling) {
        if (g->rope_scaling_factor > 0)
            return fail(c, "rope_scaling_factor: given without \"rope_scaling\"");
        return AP_OK;
    }
    if (ap_rope_scaling_from_name(scaling, &g->rope_scaling))
        return fail(c, "rope_scaling: \"%.64s\" is not \"llama3\" or \"other\"", scaling);
    if ((g->rope_scaling == AP_ROPE_SCALING_LLAMA3) != (g->rope_scaling_factor > 0))
        return fail(c, "rope_scaling_factor: %s", g->rope_scaling_factor > 0
                    ? "only \"llama3\" scaling takes a factor"
                    : "\"llama3\" scaling needs its factor");
    return AP_OK;
}

/* The planner divides the batch label among the data-parallel ranks and
 * scales it to each micro-batch it tries, and reads the tokens of a
 * sequence from the seq label (for FLOPs per token, context parallelism
 * and the exports). A model without one of them, or with two to choose
 * from, would be planned at sizes it does not have: a step of one token
 * a sequence, or utilisation above 100%. So a model file needs exactly
 * one dimension of each kind, on at least one tensor. */
static int check_batch_seq(const ctx *c, const ap_graph *g)
{
    static const ap_dim_kind kinds[] = {AP_DIM_BATCH, AP_DIM_SEQ};
    for (int k = 0; k < 2; k++) {
        const char *name = ap_dim_kind_name(kinds[k]);
        char labels[AP_MAX_DIMS + 1];
        int n = 0;
        for (int i = 0; i < g->ndims; i++)
            if (g->dims[i].kind == kinds[k])
                labels[n++] = g->dims[i].label;
        labels[n] = '\0';
        if (n == 0)
            return fail(c, "dims: no dimension is of kind \"%s\"; a model needs one "
                        "dimension of kind \"batch\" and one of kind \"seq\" (the "
                        "sequences of a micro-batch and the tokens of a sequence, which "
                        "the planner scales and divides)", name);
        if (n > 1)
            return fail(c, "dims: %d dimensions (\"%s\") are of kind \"%s\"; a model "
                        "needs exactly one dimension of kind \"batch\" and one of kind "
                        "\"seq\"", n, labels, name);
        /* The bounds --seq and --batch have: a file that declares more
         * would be planned where the command line is refused. */
        int64_t most = kinds[k] == AP_DIM_BATCH ? AP_MAX_BATCH : AP_MAX_SEQ;
        const ap_dim *d = ap_graph_dim(g, labels[0]);
        if (d && d->size > most)
            return fail(c, "dims.%c.size: %lld %s is over the limit of %lld (the most "
                        "--%s takes)", labels[0], (long long)d->size,
                        kinds[k] == AP_DIM_BATCH ? "sequences" : "tokens", (long long)most,
                        kinds[k] == AP_DIM_BATCH ? "batch" : "seq");
        int used = 0;
        for (int t = 0; t < g->ntensors && !used; t++)
            used = strchr(g->tensors[t].shape, labels[0]) != NULL;
        if (!used)
            return fail(c, "dims.%c: the %s dimension is on no tensor; the tokens the "
                        "model reads must be shaped by it", labels[0], name);
    }
    return AP_OK;
}

static int from_json(const cJSON *root, const char *source,
                     const ap_build_opts *opt, ap_graph **out, char *err)
{
    ctx c = {source, err};
    const char *name = NULL;
    ap_dtype dtype = AP_BF16;
    *out = NULL;
    if (!cJSON_IsObject(root))
        return fail(&c, "expected a JSON object at the top level");
    if (load_header(&c, root, &name, &dtype))
        return AP_EINPUT;
    ap_graph *g = ap_graph_new(name);
    if (!g) {
        snprintf(err, AP_ERR_LEN, "%s: out of memory", source);
        return AP_EINTERNAL;
    }
    g->dtype = dtype;
    snprintf(g->source, sizeof g->source, "%s", source);
    int rc = load_dims(&c, field(root, "dims"), g, opt);
    if (!rc)
        rc = load_tensors(&c, field(root, "tensors"), g);
    if (!rc)
        rc = load_ops(&c, field(root, "ops"), g);
    if (!rc)
        rc = load_mtp(&c, root, g, opt);
    if (!rc)
        rc = load_numerics(&c, root, g);
    if (!rc)
        rc = ap_graph_finalize(g, err);
    if (!rc)
        rc = check_batch_seq(&c, g);
    if (rc) {
        ap_graph_free(g);
        return rc;
    }
    *out = g;
    return AP_OK;
}

int ap_graph_parse_json(const char *text, size_t len, const char *source,
                        ap_graph **out, char *err)
{
    ctx c = {source ? source : "(model)", err};
    *out = NULL;
    cJSON *root = parse(text, len, &c);
    if (!root)
        return AP_EINPUT;
    int rc = from_json(root, c.source, NULL, out, err);
    cJSON_Delete(root);
    return rc;
}

/* A Hugging Face config that lost its model_type: an object without the
 * project's "ops" that has a field every such config has. */
static int hf_without_type(const cJSON *root)
{
    static const char *const hf[] = {"architectures", "num_hidden_layers", "hidden_size",
                                     "n_layer", "n_embd", "vocab_size", NULL};
    if (!cJSON_IsObject(root) || field(root, "ops"))
        return 0;
    for (int i = 0; hf[i]; i++)
        if (field(root, hf[i]))
            return 1;
    return 0;
}

int ap_graph_load_buffer(const char *text, size_t len, const char *source,
                         const ap_build_opts *opt, ap_graph **out, char *err)
{
    ap_build_opts defaults;
    ctx c = {source ? source : "(model)", err};
    *out = NULL;
    if (!opt) {
        ap_build_opts_default(&defaults);
        opt = &defaults;
    }
    if (opt->seq < 0 || opt->batch < 0 || opt->seq > AP_MAX_SEQ ||
        opt->batch > AP_MAX_BATCH) {
        fail(&c, "sequence length must be from 1 to %d and batch from 1 to "
                 "%d", AP_MAX_SEQ, AP_MAX_BATCH);
        return AP_EINPUT;
    }
    if (len > AP_MAX_FILE_BYTES) {
        fail(&c, "over the limit of %u MiB", AP_MAX_FILE_BYTES >> 20);
        return AP_EINPUT;
    }
    cJSON *root = parse(text, len, &c);
    if (!root)
        return AP_EINPUT;
    int rc;
    if (cJSON_IsObject(root) && field(root, "model_type")) {
        cJSON_Delete(root);
        rc = ap_graph_from_hf(text, len, c.source, opt, out, err);
    } else if (hf_without_type(root)) {
        cJSON_Delete(root);
        return fail(&c, "no \"model_type\": a Hugging Face config.json names its "
                        "family there (docs/hf-models.md lists them); the project's own "
                        "format has \"ops\" (docs/model-format.md)");
    } else {
        rc = from_json(root, c.source, opt, out, err);
        cJSON_Delete(root);
        if (!rc && (opt->bf16_first || opt->bf16_last))
            rc = ap_graph_keep_bf16(*out, opt->bf16_first, opt->bf16_last, err);
        if (rc) {
            ap_graph_free(*out);
            *out = NULL;
        }
    }
    return rc;
}

int ap_graph_load(const char *path, const ap_build_opts *opt, ap_graph **out,
                  char *err)
{
    char *text;
    size_t len;
    *out = NULL;
    int rc = ap_read_file(path, &text, &len, err);
    if (rc)
        return rc;
    rc = ap_graph_load_buffer(text, len, path, opt, out, err);
    free(text);
    return rc;
}
