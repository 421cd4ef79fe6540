/* graph.c -- building the operator graph, names and lookups, and reading
 * model files. Validation and the derived quantities are in finalize.c.
 *
 * Messages name items by their position (`tensors[3]`, `ops[12].inputs[1]`)
 * because the JSON loader adds items in file order: the same path then points
 * into the user's file. */
#include "graph/graph.h"
#include "graph/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

void ap_graph_fail(const ap_graph *g, char *err, const char *fmt, ...)
{
    if (!err)
        return;
    size_t n = 0;
    if (g && g->source[0]) {
        int k = snprintf(err, AP_ERR_LEN, "%s: ", g->source);
        n = k < 0 ? 0 : (size_t)k;
        if (n >= AP_ERR_LEN)
            return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, AP_ERR_LEN - n, fmt, ap);
    va_end(ap);
}

/* Names. */

static const char *const dtype_names[] = {"bf16", "fp16", "fp32",
                                          "fp8",  "int32", "int64"};
static const size_t dtype_sizes[] = {2, 2, 4, 1, 4, 8};
#define NDTYPES (int)(sizeof dtype_names / sizeof dtype_names[0])

const char *ap_dtype_name(ap_dtype t)
{
    return (int)t >= 0 && (int)t < NDTYPES ? dtype_names[t] : "?";
}

static const char *const rope_scaling_names[] = {"", "llama3", "other"};

const char *ap_rope_scaling_name(int scaling)
{
    return scaling > 0 && scaling <= AP_ROPE_SCALING_OTHER ? rope_scaling_names[scaling] : "";
}

int ap_rope_scaling_from_name(const char *s, int *out)
{
    for (int i = AP_ROPE_SCALING_LLAMA3; s && i <= AP_ROPE_SCALING_OTHER; i++)
        if (!strcmp(s, rope_scaling_names[i])) {
            *out = i;
            return AP_OK;
        }
    return AP_EINPUT;
}

int ap_dtype_from_name(const char *s, ap_dtype *out)
{
    for (int i = 0; s && i < NDTYPES; i++)
        if (!strcmp(s, dtype_names[i])) {
            *out = (ap_dtype)i;
            return AP_OK;
        }
    return AP_EINPUT;
}

size_t ap_dtype_size(ap_dtype t)
{
    return (int)t >= 0 && (int)t < NDTYPES ? dtype_sizes[t] : 0;
}

static const char *const dim_kind_names[] = {
    "other", "batch",    "seq",      "hidden",  "ffn",     "heads",
    "kv_heads", "head_dim", "vocab", "experts", "capacity"};
#define NDIMKINDS (int)(sizeof dim_kind_names / sizeof dim_kind_names[0])

const char *ap_dim_kind_name(ap_dim_kind k)
{
    return (int)k >= 0 && (int)k < NDIMKINDS ? dim_kind_names[k] : "?";
}

int ap_dim_kind_from_name(const char *s, ap_dim_kind *out)
{
    for (int i = 0; s && i < NDIMKINDS; i++)
        if (!strcmp(s, dim_kind_names[i])) {
            *out = (ap_dim_kind)i;
            return AP_OK;
        }
    return AP_EINPUT;
}

static const struct {
    const char *name;
    ap_op_kind kind;
    int sub;
} op_names[] = {
    {"matmul", AP_OP_MATMUL, 0},
    {"gelu", AP_OP_UNARY, AP_UNARY_GELU},
    {"silu", AP_OP_UNARY, AP_UNARY_SILU},
    {"relu", AP_OP_UNARY, AP_UNARY_RELU},
    {"scale", AP_OP_UNARY, AP_UNARY_SCALE},
    {"rotary", AP_OP_UNARY, AP_UNARY_ROTARY},
    {"relu2", AP_OP_UNARY, AP_UNARY_RELU2},
    {"softcap", AP_OP_UNARY, AP_UNARY_SOFTCAP},
    {"quick_gelu", AP_OP_UNARY, AP_UNARY_QUICK_GELU},
    {"add", AP_OP_BINARY, AP_BINARY_ADD},
    {"mul", AP_OP_BINARY, AP_BINARY_MUL},
    {"layernorm", AP_OP_NORM, AP_NORM_LAYER},
    {"rmsnorm", AP_OP_NORM, AP_NORM_RMS},
    {"layernorm1p", AP_OP_NORM, AP_NORM_LAYER1P},
    {"softmax", AP_OP_SOFTMAX, 0},
    {"dropout", AP_OP_DROPOUT, 0},
    {"attention", AP_OP_ATTENTION, 0},
    {"embedding", AP_OP_EMBEDDING, 0},
    {"cross_entropy", AP_OP_LOSS, 0},
    {"reshape", AP_OP_RESHAPE, AP_LAYOUT_RESHAPE},
    {"transpose", AP_OP_RESHAPE, AP_LAYOUT_TRANSPOSE},
    {"split", AP_OP_RESHAPE, AP_LAYOUT_SPLIT},
    {"concat", AP_OP_RESHAPE, AP_LAYOUT_CONCAT},
    {"router", AP_OP_ROUTER, 0},
    {"dispatch", AP_OP_DISPATCH, 0},
    {"combine", AP_OP_COMBINE, 0},
};
#define NOPNAMES (int)(sizeof op_names / sizeof op_names[0])

/* The number of sub-kinds of a kind; 0 for kinds without any. */
static int sub_count(ap_op_kind k)
{
    switch (k) {
    case AP_OP_UNARY: return AP_UNARY_QUICK_GELU + 1;
    case AP_OP_BINARY: return 2;
    case AP_OP_NORM: return 3;
    case AP_OP_RESHAPE: return 4;
    default: return 0;
    }
}

const char *ap_op_kind_name(const ap_op *op)
{
    for (int i = 0; i < NOPNAMES; i++)
        if (op_names[i].kind == op->kind &&
            (!sub_count(op->kind) || op_names[i].sub == op->sub))
            return op_names[i].name;
    return "?";
}

int ap_op_kind_from_name(const char *s, ap_op_kind *kind, int *sub)
{
    for (int i = 0; s && i < NOPNAMES; i++)
        if (!strcmp(s, op_names[i].name)) {
            *kind = op_names[i].kind;
            *sub = op_names[i].sub;
            return AP_OK;
        }
    return AP_EINPUT;
}

static const char *const module_names[AP_MODULE_COUNT] = {
    "core_attn", "mlp", "moe_act", "layernorm", "mla_up_proj", "moe", "shared_experts",
};

const char *ap_module_name(unsigned bit)
{
    for (int i = 0; i < AP_MODULE_COUNT; i++)
        if (bit == 1u << i)
            return module_names[i];
    return NULL;
}

unsigned ap_module_from_name(const char *s)
{
    for (int i = 0; s && i < AP_MODULE_COUNT; i++)
        if (!strcmp(s, module_names[i]))
            return 1u << i;
    return 0;
}

unsigned ap_graph_modules(const ap_graph *g)
{
    unsigned seen = 0;
    for (int i = 0; i < g->nops; i++)
        seen |= g->ops[i].modules;
    return seen;
}

void ap_build_opts_default(ap_build_opts *o)
{
    o->seq = 0;
    o->batch = 0;
    o->flash = 1;
    o->dropout = 0;
    o->mtp_layers = 0;
    o->bf16_first = o->bf16_last = 0;
}

/* Name lookups go through one open-addressing hash table per item kind,
 * grown with the arrays: building a graph of n items stays O(n) where
 * linear scans made a generated or hostile file of a million items take
 * hours. Slots hold index + 1; 0 is empty. */

typedef struct {
    int *slot;
    size_t cap; /* a power of two, at least twice the items */
} name_table;

struct ap_graph_index {
    name_table tensors, ops;
};

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static const char *tensor_name(const ap_graph *g, int i)
{
    return g->tensors[i].name;
}

static const char *op_name(const ap_graph *g, int i)
{
    return g->ops[i].name;
}

typedef const char *(*name_of)(const ap_graph *g, int i);

static int table_find(const ap_graph *g, const name_table *t, name_of nm,
                      const char *name)
{
    if (!t->cap)
        return -1;
    for (size_t h = hash_name(name) & (t->cap - 1);; h = (h + 1) & (t->cap - 1)) {
        int v = t->slot[h];
        if (!v)
            return -1;
        if (!strcmp(nm(g, v - 1), name))
            return v - 1;
    }
}

static void table_put(const ap_graph *g, name_table *t, name_of nm, int i)
{
    size_t h = hash_name(nm(g, i)) & (t->cap - 1);
    while (t->slot[h])
        h = (h + 1) & (t->cap - 1);
    t->slot[h] = i + 1;
}

/* Makes room for item n (0-based) and records it; -1 when out of memory. */
static int table_add(const ap_graph *g, name_table *t, name_of nm, int n)
{
    if ((size_t)(n + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 128;
        int *slot = calloc(cap, sizeof *slot);
        if (!slot)
            return -1;
        free(t->slot);
        t->slot = slot;
        t->cap = cap;
        for (int i = 0; i < n; i++)
            table_put(g, t, nm, i);
    }
    table_put(g, t, nm, n);
    return 0;
}

static struct ap_graph_index *graph_index(ap_graph *g)
{
    if (!g->index)
        g->index = calloc(1, sizeof *g->index);
    return g->index;
}

/* Other lookups are linear: a model has at most 52 dimensions. */

int ap_graph_dim_index(const ap_graph *g, char label)
{
    for (int i = 0; i < g->ndims; i++)
        if (g->dims[i].label == label)
            return i;
    return -1;
}

const ap_dim *ap_graph_dim(const ap_graph *g, char label)
{
    int i = ap_graph_dim_index(g, label);
    return i < 0 ? NULL : &g->dims[i];
}

int ap_graph_find_tensor(const ap_graph *g, const char *name)
{
    if (!name || !g->index)
        return -1;
    return table_find(g, &g->index->tensors, tensor_name, name);
}

int ap_graph_find_op(const ap_graph *g, const char *name)
{
    if (!name || !g->index)
        return -1;
    return table_find(g, &g->index->ops, op_name, name);
}

double ap_attention_scores(double s, int64_t window)
{
    double w = (double)window;
    if (window <= 0 || w >= s)
        return s * s;
    return 2 * s * w - w * w;
}

double ap_attention_chunk_scores(double s, int64_t c)
{
    double w = (double)c;
    if (c <= 0 || w >= s)
        return s * s;
    double k = floor(s / w), r = s - k * w;
    return k * w * w + r * r;
}

int ap_glu_activation(const ap_graph *g, const ap_op *op, int i)
{
    if (op->kind != AP_OP_BINARY || op->sub != AP_BINARY_MUL || i < 0 || i >= op->ninputs)
        return -1;
    int p = g->tensors[op->inputs[i]].producer;
    if (p < 0 || g->ops[p].kind != AP_OP_UNARY)
        return -1;
    int a = g->ops[p].sub;
    return a == AP_UNARY_GELU || a == AP_UNARY_SILU || a == AP_UNARY_RELU ||
           a == AP_UNARY_RELU2 || a == AP_UNARY_QUICK_GELU ? a : -1;
}

int ap_norm_span(const ap_graph *g, const ap_op *op)
{
    if (op->kind != AP_OP_NORM)
        return 0;
    return op->ninputs > 1 ? g->tensors[op->inputs[1]].rank : 1;
}

char ap_graph_label_of(const ap_graph *g, ap_dim_kind kind)
{
    for (int i = 0; i < g->ndims; i++)
        if (g->dims[i].kind == kind)
            return g->dims[i].label;
    return 0;
}

/* Construction. */

ap_graph *ap_graph_new(const char *name)
{
    ap_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    snprintf(g->name, sizeof g->name, "%s", name ? name : "");
    g->dtype = AP_BF16;
    return g;
}

void ap_graph_free(ap_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->ntensors; i++)
        free(g->tensors[i].name);
    for (int i = 0; i < g->nops; i++)
        free(g->ops[i].name);
    if (g->index) {
        free(g->index->tensors.slot);
        free(g->index->ops.slot);
        free(g->index);
    }
    free(g->tensors);
    free(g->ops);
    free(g->topo);
    free(g->layer_class);
    free(g);
}

static int is_label(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Adding to a sealed graph would silently leave the derived fields stale. */
static int check_open(const ap_graph *g, char *err)
{
    if (g->finalized) {
        ap_graph_fail(g, err, "graph \"%s\" is finalized; nothing can be added",
             g->name);
        return -1;
    }
    return 0;
}

int ap_graph_add_dim(ap_graph *g, char label, const char *name,
                     ap_dim_kind kind, int64_t size, char *err)
{
    if (check_open(g, err))
        return -1;
    if (!is_label(label)) {
        ap_graph_fail(g, err, "dims: label '%c' is not a letter a-z or A-Z",
             label ? label : '?');
        return -1;
    }
    if (ap_graph_dim_index(g, label) >= 0) {
        ap_graph_fail(g, err, "dims.%c: duplicate label", label);
        return -1;
    }
    if (g->ndims >= AP_MAX_DIMS) {
        ap_graph_fail(g, err, "dims.%c: more than %d dimensions", label, AP_MAX_DIMS);
        return -1;
    }
    if (!name || !name[0] || strlen(name) >= AP_NAME_LEN) {
        ap_graph_fail(g, err, "dims.%c.name: must have 1 to %d characters", label,
             AP_NAME_LEN - 1);
        return -1;
    }
    if ((int)kind < 0 || (int)kind >= NDIMKINDS) {
        ap_graph_fail(g, err, "dims.%c.kind: unknown kind %d", label, (int)kind);
        return -1;
    }
    if (size < 1) {
        ap_graph_fail(g, err, "dims.%c.size: must be >= 1, got %lld", label,
             (long long)size);
        return -1;
    }
    ap_dim *d = &g->dims[g->ndims];
    d->label = label;
    snprintf(d->name, sizeof d->name, "%s", name);
    d->kind = kind;
    d->size = size;
    return g->ndims++;
}

static int grow(void **arr, int *cap, int n, size_t item)
{
    if (n < *cap)
        return 0;
    int ncap = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, (size_t)ncap * item);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Checks a shape's labels and computes its element count; -1 on error with
 * err naming `what` (a path such as "tensors[3].shape"). */
static int shape_elems(const ap_graph *g, const char *shape, const char *what,
                       int64_t *elems, char *err)
{
    size_t rank = strlen(shape);
    if (rank > AP_MAX_RANK) {
        ap_graph_fail(g, err, "%s: \"%s\" has %zu labels, more than %d", what, shape,
             rank, AP_MAX_RANK);
        return -1;
    }
    int64_t n = 1;
    for (size_t i = 0; i < rank; i++) {
        const ap_dim *d = ap_graph_dim(g, shape[i]);
        if (!d) {
            ap_graph_fail(g, err, "%s: unknown label '%c' in \"%s\"", what,
                 is_label(shape[i]) ? shape[i] : '?', shape);
            return -1;
        }
        if (memchr(shape, shape[i], i)) {
            ap_graph_fail(g, err, "%s: label '%c' appears twice in \"%s\"", what,
                 shape[i], shape);
            return -1;
        }
        if (n > INT64_MAX / d->size) {
            ap_graph_fail(g, err, "%s: \"%s\" has more than 2^63 elements", what,
                 shape);
            return -1;
        }
        n *= d->size;
    }
    *elems = n;
    return 0;
}

int ap_graph_add_tensor(ap_graph *g, const char *name, const char *shape,
                        ap_dtype dtype, ap_role role, char *err)
{
    int idx = g->ntensors;
    char what[64];
    if (check_open(g, err))
        return -1;
    if (!name || !name[0]) {
        ap_graph_fail(g, err, "tensors[%d].name: must not be empty", idx);
        return -1;
    }
    int dup = ap_graph_find_tensor(g, name);
    if (dup >= 0) {
        ap_graph_fail(g, err, "tensors[%d].name: \"%s\" is already tensors[%d]", idx,
             name, dup);
        return -1;
    }
    if (idx >= AP_MAX_TENSORS) {
        ap_graph_fail(g, err, "tensors: more than %d tensors", AP_MAX_TENSORS);
        return -1;
    }
    if ((int)dtype < 0 || (int)dtype >= NDTYPES) {
        ap_graph_fail(g, err, "tensors[%d].dtype: unknown dtype %d", idx, (int)dtype);
        return -1;
    }
    if ((int)role < AP_TENSOR_INPUT || (int)role > AP_TENSOR_ACT) {
        ap_graph_fail(g, err, "tensors[%d].role: unknown role %d", idx, (int)role);
        return -1;
    }
    if (!shape)
        shape = "";
    int64_t elems;
    snprintf(what, sizeof what, "tensors[%d].shape", idx);
    if (shape_elems(g, shape, what, &elems, err))
        return -1;
    int64_t size = (int64_t)ap_dtype_size(dtype);
    if (elems > INT64_MAX / size) {
        ap_graph_fail(g, err, "%s: \"%s\" has more than 2^63 bytes", what, shape);
        return -1;
    }
    if (grow((void **)&g->tensors, &g->cap_tensors, g->ntensors,
             sizeof *g->tensors)) {
        ap_graph_fail(g, err, "out of memory");
        return -1;
    }
    ap_tensor *t = &g->tensors[idx];
    memset(t, 0, sizeof *t);
    if (!(t->name = dupstr(name)) || !graph_index(g) ||
        table_add(g, &g->index->tensors, tensor_name, idx)) {
        free(t->name);
        ap_graph_fail(g, err, "out of memory");
        return -1;
    }
    memcpy(t->shape, shape, strlen(shape) + 1);
    t->rank = (int)strlen(shape);
    t->dtype = dtype;
    t->role = role;
    t->producer = -1;
    t->layer = -1;
    t->elems = elems;
    t->bytes = elems * size;
    return g->ntensors++;
}

/* Resolves an op's tensor names; the op does not exist yet, so messages use
 * the index it would get. */
static int resolve(const ap_graph *g, const char *field,
                   const char *const *names, int n, int *out, char *err)
{
    for (int i = 0; i < n; i++) {
        int t = ap_graph_find_tensor(g, names ? names[i] : NULL);
        if (t < 0) {
            ap_graph_fail(g, err, "ops[%d].%s[%d]: unknown tensor \"%s\"", g->nops,
                 field, i, names && names[i] ? names[i] : "(null)");
            return -1;
        }
        out[i] = t;
    }
    return 0;
}

/* An op may only write activations, each at most once in the whole graph. */
static int check_outputs(const ap_graph *g, const int *out, int n, char *err)
{
    for (int i = 0; i < n; i++) {
        const ap_tensor *t = &g->tensors[out[i]];
        if (t->role != AP_TENSOR_ACT) {
            ap_graph_fail(g, err,
                 "ops[%d].outputs[%d]: tensor \"%s\" is a%s, which no op "
                 "can produce",
                 g->nops, i, t->name,
                 t->role == AP_TENSOR_INPUT ? "n input" : " parameter");
            return -1;
        }
        int twice = 0;
        for (int j = 0; j < i; j++)
            twice |= out[j] == out[i];
        if (t->producer >= 0 || twice) {
            ap_graph_fail(g, err,
                 "ops[%d].outputs[%d]: tensor \"%s\" is already produced by "
                 "op \"%s\"",
                 g->nops, i, t->name,
                 twice ? "(this op)" : g->ops[t->producer].name);
            return -1;
        }
    }
    return 0;
}

int ap_graph_add_op(ap_graph *g, const char *name, ap_op_kind kind, int sub,
                    int layer, const char *const *inputs, int ninputs,
                    const char *const *outputs, int noutputs, char *err)
{
    int idx = g->nops;
    int in[AP_MAX_IO], out[AP_MAX_IO];
    if (check_open(g, err))
        return -1;
    if (!name || !name[0]) {
        ap_graph_fail(g, err, "ops[%d].name: must not be empty", idx);
        return -1;
    }
    int dup = ap_graph_find_op(g, name);
    if (dup >= 0) {
        ap_graph_fail(g, err, "ops[%d].name: \"%s\" is already ops[%d]", idx, name,
             dup);
        return -1;
    }
    if ((int)kind < AP_OP_MATMUL || (int)kind > AP_OP_COMBINE ||
        sub < 0 || sub >= (sub_count(kind) ? sub_count(kind) : 1)) {
        ap_graph_fail(g, err, "ops[%d].kind: unknown kind %d (sub %d)", idx,
             (int)kind, sub);
        return -1;
    }
    if (idx >= AP_MAX_OPS) {
        ap_graph_fail(g, err, "ops: more than %d ops", AP_MAX_OPS);
        return -1;
    }
    if (layer < -1) {
        ap_graph_fail(g, err, "ops[%d].layer: must be >= 0, got %d", idx, layer);
        return -1;
    }
    if (ninputs < 0 || ninputs > AP_MAX_IO) {
        ap_graph_fail(g, err, "ops[%d].inputs: %d tensors; at most %d allowed", idx,
             ninputs, AP_MAX_IO);
        return -1;
    }
    if (noutputs < 1 || noutputs > AP_MAX_IO) {
        ap_graph_fail(g, err, "ops[%d].outputs: %d tensors; 1 to %d allowed", idx,
             noutputs, AP_MAX_IO);
        return -1;
    }
    if (resolve(g, "inputs", inputs, ninputs, in, err) ||
        resolve(g, "outputs", outputs, noutputs, out, err) ||
        check_outputs(g, out, noutputs, err))
        return -1;
    if (grow((void **)&g->ops, &g->cap_ops, g->nops, sizeof *g->ops)) {
        ap_graph_fail(g, err, "out of memory");
        return -1;
    }
    ap_op *op = &g->ops[idx];
    memset(op, 0, sizeof *op);
    if (!(op->name = dupstr(name)) || !graph_index(g) ||
        table_add(g, &g->index->ops, op_name, idx)) {
        free(op->name);
        ap_graph_fail(g, err, "out of memory");
        return -1;
    }
    op->kind = kind;
    op->sub = sub_count(kind) ? sub : 0;
    op->layer = layer;
    op->ninputs = ninputs;
    op->noutputs = noutputs;
    /* Megatron-Core's default router: softmax over the top_k logits. */
    op->route_norm = 1;
    op->route_scale = 1;
    memcpy(op->inputs, in, sizeof(int) * (size_t)ninputs);
    memcpy(op->outputs, out, sizeof(int) * (size_t)noutputs);
    for (int i = 0; i < noutputs; i++)
        g->tensors[out[i]].producer = idx;
    return g->nops++;
}

/* Files. */

/* Whether text[i..] is the escape \u0000 (any case of its hex digits). */
static int escaped_nul(const char *text, size_t len, size_t i)
{
    if (i + 6 > len || text[i + 1] != 'u')
        return 0;
    for (size_t k = 2; k < 6; k++)
        if (text[i + k] != '0')
            return 0;
    return 1;
}

size_t ap_json_control_byte(const char *text, size_t len)
{
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)text[i];
        if (b < 0x20 && b != '\t' && b != '\n' && b != '\r')
            return i;
        if (b == '"') {
            in_string = !in_string;
        } else if (in_string && b == '\\') {
            if (escaped_nul(text, len, i))
                return i;
            i++; /* the escaped character, a quote or a backslash among them */
        }
    }
    return len;
}

size_t ap_json_trailing(const char *text, size_t len, const char *end)
{
    if (!end || end < text || end > text + len)
        return 0;
    for (size_t i = (size_t)(end - text); i < len; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r' && text[i] != '\n')
            return i;
    return 0;
}

int ap_json_too_deep(const char *text, size_t len)
{
    int depth = 0, in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char b = text[i];
        if (in_string) {
            if (b == '\\')
                i++;
            else if (b == '"')
                in_string = 0;
        } else if (b == '"') {
            in_string = 1;
        } else if (b == '[' || b == '{') {
            if (++depth > AP_JSON_MAX_DEPTH)
                return 1;
        } else if (b == ']' || b == '}') {
            depth--;
        }
    }
    return 0;
}

const char *ap_json_control_what(const char *text, size_t at, char *buf, size_t cap)
{
    if (text[at] == '\\')
        snprintf(buf, cap, "an escaped NUL (\\u0000), which would end the string "
                 "early");
    else
        snprintf(buf, cap, "a raw control character (0x%02x), which JSON allows only "
                 "escaped", (unsigned char)text[at]);
    return buf;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key of object o given twice, or NULL. Small objects (every file's
 * objects but a hostile one) compare each key with those before it; a
 * large one sorts its keys, so that a million keys cost no hang. */
static const char *object_duplicate(const cJSON *o)
{
    int n = 0;
    for (const cJSON *f = o->child; f; f = f->next)
        n++;
    if (n <= 64) {
        for (const cJSON *f = o->child; f; f = f->next)
            for (const cJSON *e = o->child; e != f; e = e->next)
                if (!strcmp(e->string, f->string))
                    return f->string;
        return NULL;
    }
    const char **keys = malloc(sizeof *keys * (size_t)n);
    if (!keys)
        return NULL;
    int i = 0;
    for (const cJSON *f = o->child; f; f = f->next)
        keys[i++] = f->string;
    qsort(keys, (size_t)n, sizeof *keys, key_cmp);
    const char *d = NULL;
    for (i = 1; i < n && !d; i++)
        if (!strcmp(keys[i - 1], keys[i]))
            d = keys[i];
    free(keys);
    return d;
}

/* Depth first, the path of the element being walked kept in path[0..at). */
static const char *duplicate_in(const cJSON *o, char *path, size_t cap, size_t at)
{
    if (cJSON_IsObject(o)) {
        const char *d = object_duplicate(o);
        if (d) {
            snprintf(path + at, cap - at, "%s%s", at ? "." : "", d);
            return d;
        }
    }
    int i = 0;
    for (const cJSON *f = o->child; f; f = f->next, i++) {
        if (!f->child)
            continue;
        int n = cJSON_IsObject(o) ? snprintf(path + at, cap - at, "%s%s", at ? "." : "",
                                             f->string)
                                  : snprintf(path + at, cap - at, "[%d]", i);
        size_t next = n < 0 || at + (size_t)n >= cap ? cap - 1 : at + (size_t)n;
        const char *d = duplicate_in(f, path, cap, next);
        if (d)
            return d;
        path[at] = 0;
    }
    return NULL;
}

const char *ap_json_duplicate(const struct cJSON *root, char *path, size_t cap)
{
    if (cap == 0)
        return NULL;
    path[0] = 0;
    return root && root->child ? duplicate_in(root, path, cap, 0) : NULL;
}

int ap_control_char(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return (unsigned char)*s;
    return 0;
}

void ap_mask_control_chars(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

int ap_read_file(const char *path, char **text, size_t *len, char *err)
{
    *text = NULL;
    *len = 0;
    /* Opened without blocking, so that a FIFO (or a device) is refused as
     * not a regular file rather than waited on for a writer forever. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, AP_ERR_LEN, "%s: cannot open: %s", path,
                 strerror(errno));
        return AP_EINPUT;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, AP_ERR_LEN, "%s: not a regular file", path);
        close(fd);
        return AP_EINPUT;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(err, AP_ERR_LEN, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return AP_EINPUT;
    }
    /* Read one byte past the limit so that a file that grew after the stat,
     * or a size the stat did not know, is still refused. */
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            size_t ncap = cap * 2 > (size_t)AP_MAX_FILE_BYTES + 1
                              ? (size_t)AP_MAX_FILE_BYTES + 1
                              : cap * 2;
            char *p = realloc(buf, ncap + 1);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
            cap = ncap;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0 || n > AP_MAX_FILE_BYTES)
            break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (n > AP_MAX_FILE_BYTES) {
        snprintf(err, AP_ERR_LEN, "%s: file is over the limit of %u MiB",
                 path, AP_MAX_FILE_BYTES >> 20);
        free(buf);
        return AP_EINPUT;
    }
    if (!buf || rerr) {
        snprintf(err, AP_ERR_LEN, "%s: %s", path,
                 buf ? "read error" : "out of memory");
        free(buf);
        return buf ? AP_EINPUT : AP_EINTERNAL;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return AP_OK;
}
