/* finalize.c -- sealing a graph: validation against each op kind's shape
 * rules, the topological order, and the derived quantities (FLOPs, bytes
 * moved, bytes saved for backward, parameter counts, layer classes).
 *
 * Messages name ops and tensors by position (`ops[7].inputs[1]`), which is
 * also their JSON path when the graph came from a model file. */
#include "graph/graph.h"
#include "graph/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Validation of one op: `where` is "" or ".inputs[1]" and so on. */
typedef struct {
    const ap_graph *g;
    const ap_op *op;
    int index;
    char *err;
} check;

static int bad(const check *c, const char *where, const char *fmt, ...)
{
    char msg[AP_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ap_graph_fail(c->g, c->err, "ops[%d]%s: %s \"%s\": %s", c->index, where,
                  ap_op_kind_name(c->op), c->op->name, msg);
    return -1;
}

static const ap_tensor *in(const check *c, int i)
{
    return &c->g->tensors[c->op->inputs[i]];
}

static const ap_tensor *out(const check *c, int i)
{
    return &c->g->tensors[c->op->outputs[i]];
}

static int64_t size_of(const ap_graph *g, char label)
{
    const ap_dim *d = ap_graph_dim(g, label);
    return d ? d->size : 1;
}

/* A set of labels as bits by dimension index. */
static uint64_t labels(const ap_graph *g, const char *shape)
{
    uint64_t m = 0;
    for (; *shape; shape++)
        m |= (uint64_t)1 << ap_graph_dim_index(g, *shape);
    return m;
}

static int is_int(ap_dtype t)
{
    return t == AP_INT32 || t == AP_INT64;
}

static int check_arity(const check *c, int min_in, int max_in, int min_out,
                       int max_out)
{
    const ap_op *op = c->op;
    if (op->ninputs < min_in || op->ninputs > max_in) {
        if (min_in == max_in)
            return bad(c, ".inputs", "takes %d input%s, got %d", min_in,
                       min_in == 1 ? "" : "s", op->ninputs);
        return bad(c, ".inputs", "takes %d to %d inputs, got %d", min_in,
                   max_in, op->ninputs);
    }
    if (op->noutputs < min_out || op->noutputs > max_out) {
        if (min_out == max_out)
            return bad(c, ".outputs", "has %d output%s, got %d", min_out,
                       min_out == 1 ? "" : "s", op->noutputs);
        return bad(c, ".outputs", "has %d to %d outputs, got %d", min_out,
                   max_out, op->noutputs);
    }
    return 0;
}

static int check_rank(const check *c, const ap_tensor *t, const char *where,
                      int rank, const char *what)
{
    if (t->rank != rank)
        return bad(c, where, "%s \"%s\" must have %d labels, has \"%s\"",
                   what, t->name, rank, t->shape);
    return 0;
}

static int check_matmul(const check *c)
{
    const ap_graph *g = c->g;
    if (check_arity(c, 2, 3, 1, 1))
        return -1;
    uint64_t a = labels(g, in(c, 0)->shape), b = labels(g, in(c, 1)->shape);
    uint64_t o = labels(g, out(c, 0)->shape);
    if (o & ~(a | b))
        return bad(c, ".outputs[0]",
                   "output \"%s\" has a label in neither input (\"%s\", "
                   "\"%s\")",
                   out(c, 0)->shape, in(c, 0)->shape, in(c, 1)->shape);
    if (!((a | b) & ~o))
        return bad(c, "", "contracts no label: \"%s,%s->%s\"",
                   in(c, 0)->shape, in(c, 1)->shape, out(c, 0)->shape);
    if (c->op->ninputs == 3 && (labels(g, in(c, 2)->shape) & ~o))
        return bad(c, ".inputs[2]",
                   "bias \"%s\" has a label not in the output \"%s\"",
                   in(c, 2)->shape, out(c, 0)->shape);
    return 0;
}

static int check_elementwise(const check *c)
{
    if (check_arity(c, 1, 1, 1, 1))
        return -1;
    if (in(c, 0)->role != AP_TENSOR_ACT)
        return bad(c, ".inputs[0]", "input \"%s\" must be an activation",
                   in(c, 0)->name);
    if (strcmp(in(c, 0)->shape, out(c, 0)->shape))
        return bad(c, ".outputs[0]",
                   "output shape \"%s\" differs from the input's \"%s\"",
                   out(c, 0)->shape, in(c, 0)->shape);
    if (c->op->kind == AP_OP_DROPOUT &&
        !(c->op->dropout_p >= 0 && c->op->dropout_p < 1))
        return bad(c, ".p", "dropout probability %g is not in [0, 1)",
                   c->op->dropout_p);
    return 0;
}

/* The cos/sin table of a rotary op: its last label is the rotated width r,
 * at most the head's and even (rotate_half pairs element i with i + r/2);
 * its other labels broadcast over x's. */
static int check_rotary_table(const check *c, const ap_tensor *x)
{
    const ap_tensor *t = in(c, 1);
    char d = x->shape[x->rank - 1];
    if (t->role != AP_TENSOR_INPUT)
        return bad(c, ".inputs[1]", "cos/sin table \"%s\" must be an input "
                   "(it has no gradient)", t->name);
    if (t->rank < 1)
        return bad(c, ".inputs[1]", "cos/sin table \"%s\" is a scalar", t->name);
    char r = t->shape[t->rank - 1];
    for (int i = 0; i + 1 < t->rank; i++)
        if (!strchr(x->shape, t->shape[i]) || t->shape[i] == d)
            return bad(c, ".inputs[1]", "cos/sin table \"%s\" has a label "
                       "'%c' that is not one of the input's \"%s\" outside "
                       "its last", t->shape, t->shape[i], x->shape);
    if (r != d && strchr(x->shape, r))
        return bad(c, ".inputs[1]", "the rotated width '%c' of \"%s\" must "
                   "be the input's last label or a label of its own", r, t->shape);
    int64_t rs = size_of(c->g, r), ds = size_of(c->g, d);
    if (rs > ds || rs % 2)
        return bad(c, ".inputs[1]", "rotated width %lld must be even and at "
                   "most the head's %lld", (long long)rs, (long long)ds);
    return 0;
}

static int check_rotary(const check *c)
{
    if (check_arity(c, 1, 2, 1, 1))
        return -1;
    const ap_tensor *x = in(c, 0);
    if (x->role != AP_TENSOR_ACT)
        return bad(c, ".inputs[0]", "input \"%s\" must be an activation", x->name);
    if (x->rank < 1)
        return bad(c, ".inputs[0]", "input \"%s\" is a scalar", x->name);
    if (strcmp(x->shape, out(c, 0)->shape))
        return bad(c, ".outputs[0]",
                   "output shape \"%s\" differs from the input's \"%s\"",
                   out(c, 0)->shape, x->shape);
    if (c->op->ninputs == 2)
        return check_rotary_table(c, x);
    if (size_of(c->g, x->shape[x->rank - 1]) % 2)
        return bad(c, ".inputs[0]", "rotated width %lld must be even",
                   (long long)size_of(c->g, x->shape[x->rank - 1]));
    return 0;
}

static int check_binary(const check *c)
{
    if (check_arity(c, 2, 2, 1, 1))
        return -1;
    uint64_t a = labels(c->g, in(c, 0)->shape);
    uint64_t b = labels(c->g, in(c, 1)->shape);
    uint64_t o = labels(c->g, out(c, 0)->shape);
    for (int i = 0; i < 2; i++)
        if (labels(c->g, in(c, i)->shape) & ~o)
            return bad(c, i ? ".inputs[1]" : ".inputs[0]",
                       "input \"%s\" has a label not in the output \"%s\"",
                       in(c, i)->shape, out(c, 0)->shape);
    if (o & ~(a | b))
        return bad(c, ".outputs[0]",
                   "output \"%s\" has a label in neither input",
                   out(c, 0)->shape);
    return 0;
}

static int check_norm(const check *c)
{
    if (check_arity(c, 1, 3, 1, 1))
        return -1;
    const ap_tensor *x = in(c, 0);
    if (x->rank < 1)
        return bad(c, ".inputs[0]", "input \"%s\" is a scalar", x->name);
    /* The weight names the labels normalised over: the input's last, or a
     * run of its trailing labels (a norm across all heads of a projection,
     * OLMo 2's); a bias has the weight's shape. */
    const char *span = c->op->ninputs > 1 ? in(c, 1)->shape : "";
    size_t n = strlen(span);
    if (c->op->ninputs > 1 &&
        (!n || n > (size_t)x->rank || strcmp(x->shape + x->rank - (int)n, span)))
        return bad(c, ".inputs[1]",
                   "weight \"%s\" must have the input's last label \"%c\" or a run of "
                   "its trailing labels (of \"%s\"), has \"%s\"",
                   in(c, 1)->name, x->shape[x->rank - 1], x->shape, span);
    if (c->op->ninputs > 2 && strcmp(in(c, 2)->shape, span))
        return bad(c, ".inputs[2]", "bias \"%s\" must have the weight's shape \"%s\", "
                   "has \"%s\"", in(c, 2)->name, span, in(c, 2)->shape);
    if (strcmp(x->shape, out(c, 0)->shape))
        return bad(c, ".outputs[0]",
                   "output shape \"%s\" differs from the input's \"%s\"",
                   out(c, 0)->shape, x->shape);
    return 0;
}

static int check_attention(const check *c)
{
    if (check_arity(c, 3, 4, 1, 1))
        return -1;
    const ap_tensor *q = in(c, 0), *k = in(c, 1), *v = in(c, 2),
                    *o = out(c, 0);
    if (check_rank(c, q, ".inputs[0]", 4, "q [b,s,n,d]") ||
        check_rank(c, k, ".inputs[1]", 4, "k [b,s,g,d]") ||
        check_rank(c, v, ".inputs[2]", 4, "v [b,s,g,e]") ||
        check_rank(c, o, ".outputs[0]", 4, "output [b,s,n,e]"))
        return -1;
    const char *Q = q->shape, *K = k->shape, *V = v->shape, *O = o->shape;
    if (K[0] != Q[0] || K[1] != Q[1] || K[3] != Q[3])
        return bad(c, ".inputs[1]",
                   "k \"%s\" must share q's batch, sequence and head-dim "
                   "labels (q is \"%s\")",
                   K, Q);
    if (V[0] != Q[0] || V[1] != Q[1] || V[2] != K[2])
        return bad(c, ".inputs[2]",
                   "v \"%s\" must share q's batch and sequence and k's "
                   "kv-head labels",
                   V);
    if (O[0] != Q[0] || O[1] != Q[1] || O[2] != Q[2] || O[3] != V[3])
        return bad(c, ".outputs[0]",
                   "output \"%s\" must be q's [b,s,n] and v's last label", O);
    if (c->op->ninputs == 4 && (in(c, 3)->rank != 1 || in(c, 3)->shape[0] != Q[2] ||
                                in(c, 3)->role != AP_TENSOR_PARAM))
        return bad(c, ".inputs[3]", "sinks \"%s\" must be a parameter \"%c\" (q's heads)",
                   in(c, 3)->shape, Q[2]);
    if (size_of(c->g, Q[2]) % size_of(c->g, K[2]))
        return bad(c, "", "%lld heads do not divide into %lld kv heads",
                   (long long)size_of(c->g, Q[2]),
                   (long long)size_of(c->g, K[2]));
    if (!(c->op->dropout_p >= 0 && c->op->dropout_p < 1))
        return bad(c, ".dropout", "dropout probability %g is not in [0, 1)",
                   c->op->dropout_p);
    if (c->op->window < 0 || (c->op->window && !c->op->causal))
        return bad(c, ".window", "a sliding window needs causal attention and at "
                   "least one key (window %lld)", (long long)c->op->window);
    if (c->op->chunk < 0 || (c->op->chunk && (!c->op->causal || c->op->window)))
        return bad(c, ".chunk", "chunked attention needs causal attention, no sliding "
                   "window and at least one token a chunk (chunk %lld)",
                   (long long)c->op->chunk);
    return 0;
}

static int check_embedding(const check *c)
{
    if (check_arity(c, 2, 2, 1, 1))
        return -1;
    const ap_tensor *ids = in(c, 0), *table = in(c, 1), *o = out(c, 0);
    if (check_rank(c, ids, ".inputs[0]", 2, "ids [b,s]") ||
        check_rank(c, table, ".inputs[1]", 2, "table [v,h]") ||
        check_rank(c, o, ".outputs[0]", 3, "output [b,s,h]"))
        return -1;
    if (ids->role != AP_TENSOR_INPUT || !is_int(ids->dtype))
        return bad(c, ".inputs[0]",
                   "ids \"%s\" must be an input of an integer dtype",
                   ids->name);
    if (table->role != AP_TENSOR_PARAM)
        return bad(c, ".inputs[1]", "table \"%s\" must be a parameter",
                   table->name);
    if (o->shape[0] != ids->shape[0] || o->shape[1] != ids->shape[1] ||
        o->shape[2] != table->shape[1])
        return bad(c, ".outputs[0]",
                   "output \"%s\" must be \"%c%c%c\" (ids then the table's "
                   "last label)",
                   o->shape, ids->shape[0], ids->shape[1], table->shape[1]);
    return 0;
}

static int check_loss(const check *c)
{
    if (check_arity(c, 2, 2, 1, 1))
        return -1;
    const ap_tensor *x = in(c, 0), *y = in(c, 1);
    if (check_rank(c, x, ".inputs[0]", 3, "logits [b,s,v]") ||
        check_rank(c, y, ".inputs[1]", 2, "labels [b,s]") ||
        check_rank(c, out(c, 0), ".outputs[0]", 0, "loss (a scalar)"))
        return -1;
    if (!is_int(y->dtype) || y->shape[0] != x->shape[0] ||
        y->shape[1] != x->shape[1])
        return bad(c, ".inputs[1]",
                   "labels \"%s\" must be integers shaped \"%c%c\"", y->name,
                   x->shape[0], x->shape[1]);
    return 0;
}

/* How many labels of a kind a tensor has. */
static int count_kind(const ap_graph *g, const ap_tensor *t, ap_dim_kind kind)
{
    int n = 0;
    for (int i = 0; i < t->rank; i++) {
        const ap_dim *d = ap_graph_dim(g, t->shape[i]);
        n += d && d->kind == kind;
    }
    return n;
}

/* The sizes a graph declares are one micro-batch at one sequence length,
 * but the planner prices other micro-batches by scaling the batch and
 * capacity labels, and --batch and --seq rebuild the graph at other sizes.
 * A layout op whose element counts agree only at the declared sizes (a
 * reshape of "bsh" into a "th" whose t is b*s declared as "other") would
 * be priced at sizes where it is wrong, so every tensor of a layout op
 * must carry as many batch, seq and capacity labels as its first input. */
static int check_layout_scaling(const check *c)
{
    static const ap_dim_kind kinds[] = {AP_DIM_BATCH, AP_DIM_SEQ, AP_DIM_CAPACITY};
    const ap_tensor *x = in(c, 0);
    for (int k = 0; k < 3; k++) {
        int want = count_kind(c->g, x, kinds[k]);
        for (int j = 0; j < c->op->ninputs + c->op->noutputs; j++) {
            int is_out = j >= c->op->ninputs, i = is_out ? j - c->op->ninputs : j;
            const ap_tensor *t = is_out ? out(c, i) : in(c, i);
            int have = count_kind(c->g, t, kinds[k]);
            if (have == want)
                continue;
            char where[32];
            snprintf(where, sizeof where, ".%s[%d]", is_out ? "outputs" : "inputs", i);
            return bad(c, where, "%s \"%s\" (\"%s\") has %d label%s of kind %s where the "
                       "input \"%s\" (\"%s\") has %d: their element counts agree at the "
                       "declared sizes only, not at the other batch sizes and sequence "
                       "lengths a plan runs; carry the %s label through",
                       is_out ? "output" : "input", t->name, t->shape, have,
                       have == 1 ? "" : "s", ap_dim_kind_name(kinds[k]), x->name, x->shape,
                       want, ap_dim_kind_name(kinds[k]));
        }
    }
    return 0;
}

static int check_layout(const check *c)
{
    int split = c->op->sub == AP_LAYOUT_SPLIT;
    int concat = c->op->sub == AP_LAYOUT_CONCAT;
    if (check_arity(c, 1, concat ? AP_MAX_IO : 1, 1, split ? AP_MAX_IO : 1))
        return -1;
    if (check_layout_scaling(c))
        return -1;
    int64_t nin = 0, nout = 0;
    for (int i = 0; i < c->op->ninputs; i++)
        nin += in(c, i)->elems;
    for (int i = 0; i < c->op->noutputs; i++) {
        nout += out(c, i)->elems;
        if (out(c, i)->dtype != in(c, 0)->dtype)
            return bad(c, ".outputs", "output \"%s\" changes the dtype",
                       out(c, i)->name);
    }
    if (nin != nout)
        return bad(c, "", "inputs hold %lld elements but outputs %lld",
                   (long long)nin, (long long)nout);
    if (c->op->sub == AP_LAYOUT_TRANSPOSE &&
        (in(c, 0)->rank != out(c, 0)->rank ||
         labels(c->g, in(c, 0)->shape) != labels(c->g, out(c, 0)->shape)))
        return bad(c, ".outputs[0]",
                   "output \"%s\" is not a permutation of \"%s\"",
                   out(c, 0)->shape, in(c, 0)->shape);
    return 0;
}

static int check_top_k(const check *c, char experts)
{
    int64_t e = size_of(c->g, experts);
    const ap_op *op = c->op;
    if (op->top_k < 1 || op->top_k > e)
        return bad(c, ".top_k", "top_k %d is not in 1..%lld (experts)",
                   op->top_k, (long long)e);
    if (!op->groups)
        return 0;
    if (e % op->groups)
        return bad(c, ".groups", "%d groups do not divide the %lld experts", op->groups,
                   (long long)e);
    if (op->group_topk >= op->groups)
        return bad(c, ".group_topk", "group_topk %d limits nothing: it must be below "
                   "groups (%d)", op->group_topk, op->groups);
    if (op->top_k > (int64_t)op->group_topk * (e / op->groups))
        return bad(c, ".top_k", "top_k %d exceeds the %lld experts of group_topk %d "
                   "groups", op->top_k, (long long)op->group_topk * (e / op->groups),
                   op->group_topk);
    return 0;
}

static int check_router(const check *c)
{
    if (check_arity(c, 2, 3, 1, 1))
        return -1;
    const ap_tensor *x = in(c, 0), *w = in(c, 1), *p = out(c, 0);
    if (check_rank(c, x, ".inputs[0]", 3, "x [b,s,h]") ||
        check_rank(c, w, ".inputs[1]", 2, "w [h,e]") ||
        check_rank(c, p, ".outputs[0]", 3, "probs [b,s,e]"))
        return -1;
    if (w->shape[0] != x->shape[2])
        return bad(c, ".inputs[1]", "w \"%s\" must start with x's '%c'",
                   w->shape, x->shape[2]);
    if (p->shape[0] != x->shape[0] || p->shape[1] != x->shape[1] ||
        p->shape[2] != w->shape[1])
        return bad(c, ".outputs[0]", "probs \"%s\" must be \"%c%c%c\"",
                   p->shape, x->shape[0], x->shape[1], w->shape[1]);
    if (c->op->ninputs == 3 && (in(c, 2)->rank != 1 || in(c, 2)->shape[0] != w->shape[1]))
        return bad(c, ".inputs[2]", "bias \"%s\" must be \"%c\" (w's experts)",
                   in(c, 2)->shape, w->shape[1]);
    /* The loader checks these; a graph built in code is held to the same. */
    if (c->op->route_score != AP_ROUTE_SOFTMAX && c->op->route_score != AP_ROUTE_SIGMOID)
        return bad(c, ".score", "score %d is neither softmax nor sigmoid",
                   (int)c->op->route_score);
    if (!(c->op->route_scale > 0 && c->op->route_scale <= 1e6))
        return bad(c, ".scale", "scale %g is not above 0 (and at most 1e6)",
                   c->op->route_scale);
    return check_top_k(c, w->shape[1]);
}

static int is_capacity(const ap_graph *g, char label)
{
    const ap_dim *d = ap_graph_dim(g, label);
    return d && d->kind == AP_DIM_CAPACITY;
}

static int check_dispatch(const check *c)
{
    if (check_arity(c, 2, 2, 1, 1))
        return -1;
    const ap_tensor *x = in(c, 0), *p = in(c, 1), *y = out(c, 0);
    if (check_rank(c, x, ".inputs[0]", 3, "x [b,s,h]") ||
        check_rank(c, p, ".inputs[1]", 3, "probs [b,s,e]") ||
        check_rank(c, y, ".outputs[0]", 3, "output [e,c,h]"))
        return -1;
    if (p->shape[0] != x->shape[0] || p->shape[1] != x->shape[1])
        return bad(c, ".inputs[1]", "probs \"%s\" must start with \"%.2s\"",
                   p->shape, x->shape);
    if (y->shape[0] != p->shape[2] || y->shape[2] != x->shape[2] ||
        !is_capacity(c->g, y->shape[1]))
        return bad(c, ".outputs[0]",
                   "output \"%s\" must be [experts, capacity, hidden] = "
                   "\"%c?%c\" with a capacity dimension in the middle",
                   y->shape, p->shape[2], x->shape[2]);
    return check_top_k(c, p->shape[2]);
}

static int check_combine(const check *c)
{
    if (check_arity(c, 2, 2, 1, 1))
        return -1;
    const ap_tensor *y = in(c, 0), *p = in(c, 1), *o = out(c, 0);
    if (check_rank(c, y, ".inputs[0]", 3, "y [e,c,h]") ||
        check_rank(c, p, ".inputs[1]", 3, "probs [b,s,e]") ||
        check_rank(c, o, ".outputs[0]", 3, "output [b,s,h]"))
        return -1;
    if (y->shape[0] != p->shape[2] || !is_capacity(c->g, y->shape[1]))
        return bad(c, ".inputs[0]",
                   "y \"%s\" must be [experts, capacity, hidden] with the "
                   "experts label '%c' of the probs",
                   y->shape, p->shape[2]);
    if (o->shape[0] != p->shape[0] || o->shape[1] != p->shape[1] ||
        o->shape[2] != y->shape[2])
        return bad(c, ".outputs[0]", "output \"%s\" must be \"%c%c%c\"",
                   o->shape, p->shape[0], p->shape[1], y->shape[2]);
    return check_top_k(c, p->shape[2]);
}

static int check_op(const ap_graph *g, int i, char *err)
{
    check c = {g, &g->ops[i], i, err};
    switch (c.op->kind) {
    case AP_OP_MATMUL: return check_matmul(&c);
    case AP_OP_UNARY:
        if (c.op->sub == AP_UNARY_ROTARY)
            return check_rotary(&c);
        return check_elementwise(&c);
    case AP_OP_SOFTMAX:
    case AP_OP_DROPOUT: return check_elementwise(&c);
    case AP_OP_BINARY: return check_binary(&c);
    case AP_OP_NORM: return check_norm(&c);
    case AP_OP_ATTENTION: return check_attention(&c);
    case AP_OP_EMBEDDING: return check_embedding(&c);
    case AP_OP_LOSS: return check_loss(&c);
    case AP_OP_RESHAPE: return check_layout(&c);
    case AP_OP_ROUTER: return check_router(&c);
    case AP_OP_DISPATCH: return check_dispatch(&c);
    case AP_OP_COMBINE: return check_combine(&c);
    }
    return bad(&c, ".kind", "unknown kind");
}

/* Every activation has a producer and every input or parameter a reader:
 * anything else is a typo in a name or a half-written model. */
static int check_tensors(const ap_graph *g, const int *uses, char *err)
{
    for (int i = 0; i < g->ntensors; i++) {
        const ap_tensor *t = &g->tensors[i];
        if (t->role == AP_TENSOR_ACT && t->producer < 0) {
            ap_graph_fail(g, err, "tensors[%d]: activation \"%s\" is never produced "
                         "by any op", i, t->name);
            return -1;
        }
        if (t->role != AP_TENSOR_ACT && !uses[i]) {
            ap_graph_fail(g, err, "tensors[%d]: %s \"%s\" is never read by any op", i,
                 t->role == AP_TENSOR_PARAM ? "parameter" : "input", t->name);
            return -1;
        }
    }
    return 0;
}

/* A min-heap of op indices, so that Kahn's algorithm breaks ties by index
 * and the order does not depend on anything but the graph. */
typedef struct {
    int *a;
    int n;
} heap;

static void heap_push(heap *h, int v)
{
    int i = h->n++;
    while (i > 0 && h->a[(i - 1) / 2] > v) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = v;
}

static int heap_pop(heap *h)
{
    int top = h->a[0], v = h->a[--h->n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->a[c + 1] < h->a[c])
            c++;
        if (h->a[c] >= v)
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = v;
    return top;
}

/* Names the ops of one cycle among those Kahn's algorithm could not order:
 * walk back along unordered producers until an op repeats. */
static void report_cycle(const ap_graph *g, const int *indeg, char *err)
{
    int start = 0;
    while (start < g->nops && !indeg[start])
        start++;
    int *seen = calloc((size_t)g->nops, sizeof *seen);
    int u = start, step = 1;
    while (seen && !seen[u]) {
        seen[u] = step++;
        const ap_op *op = &g->ops[u];
        for (int i = 0; i < op->ninputs; i++) {
            int p = g->tensors[op->inputs[i]].producer;
            if (p >= 0 && indeg[p]) {
                u = p;
                break;
            }
        }
    }
    char path[AP_ERR_LEN];
    int k0 = snprintf(path, sizeof path, "%s -> ", g->ops[u].name);
    size_t n = k0 > 0 ? (size_t)k0 : 0;
    /* The walk went backwards; print the cycle forwards from u. */
    for (int s = step - 1; seen && s > seen[u] && n < sizeof path; s--)
        for (int v = 0; v < g->nops; v++)
            if (seen[v] == s) {
                int k = snprintf(path + n, sizeof path - n, "%s -> ",
                                 g->ops[v].name);
                n += k > 0 ? (size_t)k : 0;
                break;
            }
    ap_graph_fail(g, err, "ops[%d]: op \"%s\" is on a cycle: %s%s", u,
         g->ops[u].name, path, g->ops[u].name);
    free(seen);
}

static int topo_sort(ap_graph *g, const int *uses, char *err)
{
    int n = g->nops, done = 0;
    int *indeg = calloc((size_t)n + 1, sizeof *indeg);
    int *first = calloc((size_t)g->ntensors + 1, sizeof *first);
    int *readers = malloc(sizeof *readers * ((size_t)n * AP_MAX_IO + 1));
    heap h = {malloc(sizeof(int) * ((size_t)n + 1)), 0};
    g->topo = malloc(sizeof *g->topo * ((size_t)n + 1));
    if (!indeg || !first || !readers || !h.a || !g->topo) {
        ap_graph_fail(g, err, "out of memory");
        free(indeg), free(first), free(readers), free(h.a);
        return AP_EINTERNAL;
    }
    /* readers[first[t] .. first[t+1]) are the ops reading tensor t. */
    for (int t = 0; t < g->ntensors; t++)
        first[t + 1] = first[t] + uses[t];
    int *fill = calloc((size_t)g->ntensors + 1, sizeof *fill);
    if (!fill) {
        ap_graph_fail(g, err, "out of memory");
        free(indeg), free(first), free(readers), free(h.a);
        return AP_EINTERNAL;
    }
    for (int u = 0; u < n; u++)
        for (int i = 0; i < g->ops[u].ninputs; i++) {
            int t = g->ops[u].inputs[i];
            readers[first[t] + fill[t]++] = u;
            indeg[u] += g->tensors[t].producer >= 0;
        }
    for (int u = 0; u < n; u++)
        if (!indeg[u])
            heap_push(&h, u);
    while (h.n) {
        int u = heap_pop(&h);
        g->topo[done++] = u;
        for (int o = 0; o < g->ops[u].noutputs; o++) {
            int t = g->ops[u].outputs[o];
            for (int r = first[t]; r < first[t + 1]; r++)
                if (--indeg[readers[r]] == 0)
                    heap_push(&h, readers[r]);
        }
    }
    int rc = AP_OK;
    if (done < n) {
        report_cycle(g, indeg, err);
        rc = AP_EINPUT;
    }
    free(indeg), free(first), free(readers), free(h.a), free(fill);
    return rc;
}

static int check_layers(ap_graph *g, char *err)
{
    int max = -1;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer > max)
            max = g->ops[i].layer;
    g->nlayers = max + 1;
    char *has = calloc((size_t)g->nlayers + 1, 1);
    if (!has) {
        ap_graph_fail(g, err, "out of memory");
        return AP_EINTERNAL;
    }
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer >= 0)
            has[g->ops[i].layer] = 1;
    for (int l = 0; l < g->nlayers; l++)
        if (!has[l]) {
            ap_graph_fail(g, err, "layer %d has no ops (layers must be numbered 0 to "
                         "%d without gaps)", l, max);
            free(has);
            return AP_EINPUT;
        }
    free(has);
    return AP_OK;
}

/* Where op i runs in the pipeline: its layer, or, for an op without one,
 * before the layers (-1) when no op of a layer comes before it in the file
 * and after them (nlayers) otherwise. The planner places the ops outside
 * the layers by the same rule (planner/parts.c: the first stage holds those
 * before the first layer's op, the last stage the rest). */
static int place_of(const ap_graph *g, int i, int first_layered)
{
    int l = g->ops[i].layer;
    if (l >= 0)
        return l;
    return i < first_layered ? -1 : g->nlayers;
}

static const char *place_name(const ap_graph *g, int place, char *buf, size_t cap)
{
    if (place < 0)
        return "has no layer and comes before every layer's op in the file, so it "
               "runs before the layers";
    if (place >= g->nlayers)
        return "has no layer and comes after a layer's op in the file, so it runs "
               "after the layers";
    snprintf(buf, cap, "is in layer %d", place);
    return buf;
}

/* Layers run in order, one pipeline stage after another, so an op may not
 * read a tensor produced at a later place: a later layer's, or that of an
 * op after the layers. Layer tags that contradict the data flow would be
 * planned as a pipeline that sends tensors backwards, which no schedule
 * runs. A graph that tags no layer gets them from its topological order
 * and cannot contradict it. */
static int check_layer_order(const ap_graph *g, char *err)
{
    int first = g->nops;
    for (int i = 0; i < g->nops && first == g->nops; i++)
        if (g->ops[i].layer >= 0)
            first = i;
    if (first == g->nops)
        return AP_OK;
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        int here = place_of(g, i, first);
        for (int k = 0; k < op->ninputs; k++) {
            const ap_tensor *t = &g->tensors[op->inputs[k]];
            if (t->producer < 0 || place_of(g, t->producer, first) <= here)
                continue;
            int p = t->producer, there = place_of(g, p, first);
            char a[32], b[32];
            /* An op after the layers that a layer reads is the one out of
             * place (a layer's op left untagged); otherwise the reader is. */
            if (there >= g->nlayers) {
                if (here < 0)
                    snprintf(b, sizeof b, "before the layers");
                else
                    snprintf(b, sizeof b, "layer %d", here);
                ap_graph_fail(g, err, "ops[%d].layer: op \"%s\" %s, but op \"%s\" "
                              "(%s) reads its output \"%s\"; give it the layer it "
                              "belongs to, or move it before the layers' ops", p, g->ops[p].name,
                              place_name(g, there, a, sizeof a), op->name, b, t->name);
            } else {
                ap_graph_fail(g, err, "ops[%d].layer: op \"%s\" %s, but reads \"%s\" "
                              "from op \"%s\", which %s: an op may not read a tensor "
                              "produced by a later layer", i, op->name,
                              place_name(g, here, a, sizeof a), t->name, g->ops[p].name,
                              place_name(g, there, b, sizeof b));
            }
            return AP_EINPUT;
        }
    }
    return AP_OK;
}

/* Derived quantities. */

static double dsize(const ap_graph *g, char label)
{
    return (double)size_of(g, label);
}

static void derive_labels(const ap_graph *g, ap_op *op)
{
    char set[128] = {0}, outs[128] = {0};
    if (op->kind == AP_OP_ATTENTION) {
        for (const char *p = g->tensors[op->inputs[0]].shape; *p; p++)
            set[(int)*p] = 1;
        set[(int)g->tensors[op->inputs[1]].shape[2]] = 1;
    } else {
        for (int i = 0; i < op->ninputs; i++)
            for (const char *p = g->tensors[op->inputs[i]].shape; *p; p++)
                set[(int)*p] = 1;
        for (int i = 0; i < op->noutputs; i++)
            for (const char *p = g->tensors[op->outputs[i]].shape; *p; p++)
                set[(int)*p] = 1;
    }
    for (int i = 0; i < op->noutputs; i++)
        for (const char *p = g->tensors[op->outputs[i]].shape; *p; p++)
            outs[(int)*p] = 1;
    int n = 0, m = 0;
    for (int ch = 0; ch < 128; ch++) {
        if (set[ch])
            op->iter[n++] = (char)ch;
        if (set[ch] && !outs[ch])
            op->contracted[m++] = (char)ch;
    }
    op->iter[n] = op->contracted[m] = '\0';
}

static double unary_flops_per_elem(int sub)
{
    switch (sub) {
    case AP_UNARY_GELU: return 8;
    case AP_UNARY_SILU: return 4;
    case AP_UNARY_QUICK_GELU: return 5; /* silu's and a multiply by 1.702 */
    /* RoPE is x cos + rotate_half(x) sin per rotated element: two multiplies
     * and an add (rotate_half itself only moves and negates). */
    case AP_UNARY_ROTARY: return 3;
    case AP_UNARY_RELU2: return 2; /* a max and a multiply */
    case AP_UNARY_SOFTCAP: return 10; /* two multiplies around a tanh, counted as gelu's 8 */
    default: return 1; /* relu, scale */
    }
}

/* Elements a unary op computes on: a rotary op with a table rotates r of
 * each head's d elements and only copies the rest. */
static double unary_elems(const ap_graph *g, const ap_op *op)
{
    const ap_tensor *x = &g->tensors[op->inputs[0]];
    double e = (double)x->elems;
    if (op->sub != AP_UNARY_ROTARY || op->ninputs < 2)
        return e;
    const ap_tensor *t = &g->tensors[op->inputs[1]];
    return e / dsize(g, x->shape[x->rank - 1]) * dsize(g, t->shape[t->rank - 1]);
}

static double op_flops(const ap_graph *g, const ap_op *op)
{
    const ap_tensor *x = &g->tensors[op->inputs[0]];
    const ap_tensor *y = &g->tensors[op->outputs[0]];
    double oe = (double)y->elems;
    switch (op->kind) {
    case AP_OP_MATMUL: {
        double f = 2;
        for (const char *p = op->iter; *p; p++)
            f *= dsize(g, *p);
        return f + (op->ninputs == 3 ? oe : 0);
    }
    case AP_OP_ATTENTION: {
        const char *q = x->shape, *v = g->tensors[op->inputs[2]].shape;
        double b = dsize(g, q[0]), s = dsize(g, q[1]), n = dsize(g, q[2]);
        double ss = b * n * (op->chunk ? ap_attention_chunk_scores(s, op->chunk)
                                       : ap_attention_scores(s, op->window));
        return 2 * ss * (dsize(g, q[3]) + dsize(g, v[3])) + 5 * ss;
    }
    case AP_OP_ROUTER: {
        double e = dsize(g, g->tensors[op->inputs[1]].shape[1]);
        return 2 * (double)x->elems * e + (op->ninputs == 3 ? 6 : 5) * oe;
    }
    case AP_OP_UNARY: return unary_flops_per_elem(op->sub) * unary_elems(g, op);
    case AP_OP_BINARY: return oe;
    case AP_OP_NORM: return (op->sub == AP_NORM_RMS ? 4 : 7) * oe;
    case AP_OP_SOFTMAX: return 5 * oe;
    case AP_OP_DROPOUT: return 2 * oe;
    case AP_OP_LOSS: return 5 * (double)x->elems;
    case AP_OP_COMBINE: return 2 * oe * op->top_k;
    case AP_OP_EMBEDDING:
    case AP_OP_RESHAPE:
    case AP_OP_DISPATCH: return 0;
    }
    return 0;
}

static double op_bytes_moved(const ap_graph *g, const ap_op *op)
{
    if (op->kind == AP_OP_RESHAPE && (op->sub == AP_LAYOUT_RESHAPE ||
                                      op->sub == AP_LAYOUT_TRANSPOSE))
        return 0;
    double b = 0;
    for (int i = 0; i < op->ninputs; i++)
        b += (double)g->tensors[op->inputs[i]].bytes;
    for (int i = 0; i < op->noutputs; i++)
        b += (double)g->tensors[op->outputs[i]].bytes;
    return b;
}

static int is_view(const ap_op *op)
{
    return op->kind == AP_OP_RESHAPE && (op->sub == AP_LAYOUT_RESHAPE ||
                                         op->sub == AP_LAYOUT_TRANSPOSE);
}

/* Which inputs (bits 0..7) and outputs (bits 8..15) an op's backward needs,
 * before deduplication. */
static unsigned wanted(const ap_op *op)
{
    switch (op->kind) {
    case AP_OP_MATMUL: return 0x3;
    /* Rotation by fixed angles is undone by rotating the gradient by the
     * opposite ones: rotary's backward needs only its cos/sin table, so the
     * rotated q and k that attention keeps are all that stays. */
    case AP_OP_UNARY:
        return op->sub == AP_UNARY_SCALE || op->sub == AP_UNARY_ROTARY ? 0 : 0x1;
    case AP_OP_BINARY: return op->sub == AP_BINARY_MUL ? 0x3 : 0;
    case AP_OP_NORM: return 0x1;
    case AP_OP_SOFTMAX: return 0x100;
    case AP_OP_ATTENTION: return 0x107;
    case AP_OP_ROUTER: return 0x101;
    case AP_OP_COMBINE: return 0x3;
    default: return 0;
    }
}

/* Bytes kept that are no tensor of the graph. */
static double saved_extra(const ap_graph *g, const ap_op *op)
{
    if (op->kind == AP_OP_DROPOUT)
        return (double)g->tensors[op->outputs[0]].elems; /* 1-byte mask */
    if (op->kind == AP_OP_LOSS) /* the fp32 softmax, not the logits */
        return 4 * (double)g->tensors[op->inputs[0]].elems;
    if (op->kind != AP_OP_ATTENTION)
        return 0;
    const char *q = g->tensors[op->inputs[0]].shape;
    double bns = dsize(g, q[0]) * dsize(g, q[2]) * dsize(g, q[1]);
    if (op->flash)
        return 4 * bns; /* fp32 log-sum-exp per row */
    /* Softmax probabilities (2 bytes), and with dropout its 1-byte mask and
     * the 2-byte dropped probabilities: Korthikanti et al.'s 5as^2b. */
    return bns * dsize(g, q[1]) * (2 + (op->dropout_p > 0 ? 3 : 0));
}

typedef struct {
    int *root;  /* the tensor a view aliases, followed to the end */
    char *kept; /* per root: already counted as saved */
    char *read; /* per parameter: already counted */
    char *placed; /* per input or parameter: layer set by its first reader */
} derive_state;

/* Counts tensor t as saved unless it (or what it views) already is. */
static double save(const ap_graph *g, derive_state *st, int t)
{
    if (g->tensors[t].role != AP_TENSOR_ACT || st->kept[st->root[t]])
        return -1;
    st->kept[st->root[t]] = 1;
    return (double)g->tensors[st->root[t]].bytes;
}

/* A gated linear unit's activation (silu for SwiGLU, gelu for GeGLU,
 * quick_gelu for --quick-geglu) runs fused with its product in Megatron-Core
 * (bias_swiglu_impl, bias_geglu_impl, default on; TE's GroupedMLP the same): the kernel saves the activation's
 * input and recomputes the activation in backward, so the product keeps the
 * other factor only. torch.compile's partitioner recomputes it the same way. */
static int is_fused_glu_factor(const ap_graph *g, const ap_op *op, int i)
{
    int a = ap_glu_activation(g, op, i);
    return a == AP_UNARY_SILU || a == AP_UNARY_GELU || a == AP_UNARY_QUICK_GELU;
}

static void derive_op(ap_graph *g, derive_state *st, ap_op *op)
{
    derive_labels(g, op);
    op->flops = op_flops(g, op);
    op->bytes_moved = op_bytes_moved(g, op);
    op->saves_in = op->saves_out = 0;
    op->saved_extra = saved_extra(g, op);
    op->saved_bytes = op->saved_extra;
    unsigned want = wanted(op);
    for (int i = 0; i < op->ninputs; i++) {
        int keep = (want >> i) & 1 && !is_fused_glu_factor(g, op, i);
        double b = keep ? save(g, st, op->inputs[i]) : -1;
        if (b >= 0) {
            op->saves_in |= 1u << i;
            op->saved_bytes += b;
        }
    }
    for (int i = 0; i < op->noutputs; i++) {
        double b = (want >> (8 + i)) & 1 ? save(g, st, op->outputs[i]) : -1;
        if (b >= 0) {
            op->saves_out |= 1u << i;
            op->saved_bytes += b;
        }
    }
    op->param_count = 0;
    for (int i = 0; i < op->ninputs; i++) {
        int t = op->inputs[i];
        if (g->tensors[t].role == AP_TENSOR_PARAM && !st->read[t]) {
            st->read[t] = 1;
            op->param_count += (double)g->tensors[t].elems;
            g->total_param_bytes += (double)g->tensors[t].bytes;
        }
    }
    for (int i = 0; i < op->noutputs; i++) {
        st->root[op->outputs[i]] =
            is_view(op) ? st->root[op->inputs[0]] : op->outputs[i];
        g->tensors[op->outputs[i]].layer = op->layer;
    }
    for (int i = 0; i < op->ninputs; i++) {
        int t = op->inputs[i];
        if (g->tensors[t].producer < 0 && !st->placed[t]) {
            st->placed[t] = 1;
            g->tensors[t].layer = op->layer;
        }
    }
}

static int derive(ap_graph *g, char *err)
{
    derive_state st;
    size_t n = (size_t)g->ntensors + 1;
    st.root = malloc(n * sizeof *st.root);
    st.kept = calloc(n, 1);
    st.read = calloc(n, 1);
    st.placed = calloc(n, 1);
    if (!st.root || !st.kept || !st.read || !st.placed) {
        free(st.root), free(st.kept), free(st.read), free(st.placed);
        ap_graph_fail(g, err, "out of memory");
        return AP_EINTERNAL;
    }
    for (int t = 0; t < g->ntensors; t++) {
        st.root[t] = t;
        g->tensors[t].layer = -1;
        g->tensors[t].consumers = 0;
        g->tensors[t].first_consumer = -1;
    }
    for (int k = 0; k < g->nops; k++)
        for (int i = 0; i < g->ops[k].ninputs; i++) {
            ap_tensor *in = &g->tensors[g->ops[k].inputs[i]];
            if (in->consumers++ == 0)
                in->first_consumer = k;
        }
    g->total_flops = g->total_params = g->total_param_bytes = 0;
    g->total_saved_bytes = 0;
    int rc = AP_OK;
    for (int k = 0; k < g->nops; k++) {
        ap_op *op = &g->ops[g->topo[k]];
        derive_op(g, &st, op);
        g->total_flops += op->flops;
        g->total_params += op->param_count;
        g->total_saved_bytes += op->saved_bytes;
        /* Sizes up to 2^53 per label keep each tensor under 2^63 elements,
         * but an op's iteration space multiplies those of its tensors. */
        if (!rc && !(g->total_flops <= AP_MAX_FLOPS)) {
            ap_graph_fail(g, err, "ops[%d]: op \"%s\" brings the forward pass to "
                          "%.3g FLOPs, over the limit of %.0e", g->topo[k],
                          op->name, g->total_flops, AP_MAX_FLOPS);
            rc = AP_EINPUT;
        }
    }
    free(st.root), free(st.kept), free(st.read), free(st.placed);
    if (rc)
        return rc;
    return AP_OK;
}

/* Layer classes. A layer's signature lists, op by op in index order, the
 * kind, attributes and every tensor's shape, dtype and role, with each input
 * named relative to the layer: the position of its producer inside the layer,
 * or else the order in which the layer first reads that outside tensor. Two
 * layers are the same class when their signatures are equal. */
typedef struct {
    int64_t *v;
    size_t n, cap;
} sig;

static int sig_push(sig *s, int64_t x)
{
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 256;
        int64_t *p = realloc(s->v, ncap * sizeof *p);
        if (!p)
            return -1;
        s->v = p;
        s->cap = ncap;
    }
    s->v[s->n++] = x;
    return 0;
}

static int sig_tensor(sig *s, const ap_tensor *t)
{
    int64_t shape = 0;
    memcpy(&shape, t->shape, (size_t)t->rank);
    return sig_push(s, shape) || sig_push(s, t->dtype) ||
           sig_push(s, t->role);
}

static int sig_op(const ap_graph *g, int layer, const ap_op *op,
                  const int *pos, int *ext, int *next_ext, sig *s)
{
    int64_t p, scale;
    memcpy(&p, &op->dropout_p, sizeof p);
    memcpy(&scale, &op->route_scale, sizeof scale);
    int rc = sig_push(s, op->kind) || sig_push(s, op->sub) ||
             sig_push(s, op->causal) || sig_push(s, op->flash) ||
             sig_push(s, op->window) || sig_push(s, op->chunk) ||
             sig_push(s, p) || sig_push(s, op->top_k) || sig_push(s, op->modules) ||
             sig_push(s, op->groups) || sig_push(s, op->group_topk) ||
             sig_push(s, op->route_score) || sig_push(s, op->route_norm) ||
             sig_push(s, op->route_bias) || sig_push(s, op->route_on_input) ||
             sig_push(s, scale) ||
             sig_push(s, op->keep_bf16) ||
             sig_push(s, op->ninputs) || sig_push(s, op->noutputs);
    for (int i = 0; !rc && i < op->ninputs; i++) {
        int t = op->inputs[i], pr = g->tensors[t].producer;
        if (pr >= 0 && g->ops[pr].layer == layer) {
            int slot = 0;
            while (g->ops[pr].outputs[slot] != t)
                slot++;
            rc = sig_push(s, 1) || sig_push(s, pos[pr]) || sig_push(s, slot);
        } else {
            if (ext[t] < 0)
                ext[t] = (*next_ext)++;
            rc = sig_push(s, 2) || sig_push(s, ext[t]);
        }
        rc = rc || sig_tensor(s, &g->tensors[t]);
    }
    for (int i = 0; !rc && i < op->noutputs; i++)
        rc = sig_tensor(s, &g->tensors[op->outputs[i]]);
    return rc;
}

static uint64_t sig_hash(const sig *s)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < s->n; i++)
        h = (h ^ (uint64_t)s->v[i]) * 1099511628211u;
    return h;
}

static int sig_equal(const sig *a, const sig *b)
{
    return a->n == b->n && !memcmp(a->v, b->v, a->n * sizeof *a->v);
}

/* Gives each layer the smallest layer index with an equal signature, through
 * a hash table of the representatives found so far: linear in the layers
 * even when no two are alike. */
static int match_classes(ap_graph *g, const sig *sigs)
{
    int L = g->nlayers;
    size_t cap = 16;
    while (cap < (size_t)L * 2)
        cap *= 2;
    int *slot = calloc(cap, sizeof *slot); /* layer + 1; 0 is empty */
    if (!slot)
        return AP_EINTERNAL;
    for (int l = 0; l < L; l++) {
        size_t h = sig_hash(&sigs[l]) & (cap - 1);
        while (slot[h] && !sig_equal(&sigs[slot[h] - 1], &sigs[l]))
            h = (h + 1) & (cap - 1);
        if (!slot[h])
            slot[h] = l + 1;
        g->layer_class[l] = slot[h] - 1;
    }
    free(slot);
    return AP_OK;
}

/* The ops of each layer in index order: by_layer[start[l] .. start[l+1]). */
static int group_by_layer(const ap_graph *g, int **by_layer, int **start)
{
    int L = g->nlayers;
    *start = calloc((size_t)L + 2, sizeof **start);
    *by_layer = malloc(((size_t)g->nops + 1) * sizeof **by_layer);
    if (!*start || !*by_layer)
        return AP_EINTERNAL;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer >= 0)
            (*start)[g->ops[i].layer + 2]++;
    for (int l = 0; l < L; l++)
        (*start)[l + 2] += (*start)[l + 1];
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer >= 0)
            (*by_layer)[(*start)[g->ops[i].layer + 1]++] = i;
    return AP_OK;
}

static int classify(ap_graph *g, char *err)
{
    int L = g->nlayers, rc = AP_OK;
    int *by_layer = NULL, *start = NULL;
    sig *sigs = calloc((size_t)L + 1, sizeof *sigs);
    int *pos = malloc(((size_t)g->nops + 1) * sizeof *pos);
    int *ext = malloc(((size_t)g->ntensors + 1) * sizeof *ext);
    g->layer_class = malloc(((size_t)L + 1) * sizeof *g->layer_class);
    if (!sigs || !pos || !ext || !g->layer_class ||
        group_by_layer(g, &by_layer, &start))
        rc = AP_EINTERNAL;
    for (int l = 0; !rc && l < L; l++)
        for (int k = start[l]; k < start[l + 1]; k++)
            pos[by_layer[k]] = k - start[l];
    for (int t = 0; !rc && t < g->ntensors; t++)
        ext[t] = -1;
    /* Outside tensors are numbered per layer; a tensor read by two layers
     * gets a number in each, so ext[] is reset after each layer. */
    for (int l = 0; !rc && l < L; l++) {
        int next = 0;
        for (int k = start[l]; !rc && k < start[l + 1]; k++)
            if (sig_op(g, l, &g->ops[by_layer[k]], pos, ext, &next, &sigs[l]))
                rc = AP_EINTERNAL;
        for (int k = start[l]; k < start[l + 1]; k++) {
            const ap_op *op = &g->ops[by_layer[k]];
            for (int i = 0; i < op->ninputs; i++)
                ext[op->inputs[i]] = -1;
        }
    }
    if (!rc)
        rc = match_classes(g, sigs);
    if (rc)
        ap_graph_fail(g, err, "out of memory");
    for (int l = 0; sigs && l < L; l++)
        free(sigs[l].v);
    free(sigs), free(pos), free(ext), free(by_layer), free(start);
    return rc;
}

static void unseal(ap_graph *g)
{
    free(g->topo);
    free(g->layer_class);
    g->topo = NULL;
    g->layer_class = NULL;
    g->finalized = 0;
}

static int validate(const ap_graph *g, int *uses, char *err)
{
    if (g->nops == 0) {
        ap_graph_fail(g, err, "ops: the model has no ops");
        return AP_EINPUT;
    }
    for (int i = 0; i < g->nops; i++)
        for (int k = 0; k < g->ops[i].ninputs; k++)
            uses[g->ops[i].inputs[k]]++;
    for (int i = 0; i < g->nops; i++)
        if (check_op(g, i, err))
            return AP_EINPUT;
    return check_tensors(g, uses, err) ? AP_EINPUT : AP_OK;
}

int ap_graph_finalize(ap_graph *g, char *err)
{
    unseal(g);
    int *uses = calloc((size_t)g->ntensors + 1, sizeof *uses);
    if (!uses) {
        ap_graph_fail(g, err, "out of memory");
        return AP_EINTERNAL;
    }
    int rc = validate(g, uses, err);
    if (!rc)
        rc = topo_sort(g, uses, err);
    free(uses);
    if (!rc)
        rc = check_layers(g, err);
    if (!rc)
        rc = check_layer_order(g, err);
    if (!rc)
        rc = derive(g, err);
    if (!rc && g->nlayers == 0 && g->nops > 0)
        rc = ap_graph_cluster_layers(g);
    if (!rc)
        rc = classify(g, err);
    if (rc)
        unseal(g);
    else
        g->finalized = 1;
    return rc;
}

int ap_graph_keep_bf16(ap_graph *g, int first, int last, char *err)
{
    int L = g->nlayers;
    if (first < 0 || last < 0) {
        ap_graph_fail(g, err, "layers kept in bf16: %d first and %d last, not counts",
                      first, last);
        return AP_EINPUT;
    }
    for (int i = 0; i < g->nops; i++) {
        int l = g->ops[i].layer;
        g->ops[i].keep_bf16 = l >= 0 && (l < first || l >= L - last);
    }
    g->bf16_first = first;
    g->bf16_last = last;
    return ap_graph_finalize(g, err);
}

int ap_graph_set_flash(ap_graph *g, int flash, char *err)
{
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].kind == AP_OP_ATTENTION)
            g->ops[i].flash = flash;
    return ap_graph_finalize(g, err);
}
