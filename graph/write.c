/* write.c -- a finalized graph in the project's JSON format, the inverse of
 * ap_graph_parse_json(): loading the output gives the same graph. Attributes
 * are written only for the kinds that have them, so the output loads under
 * the strict field checks. */
#include "graph/graph.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *role_name(ap_role r)
{
    return r == AP_TENSOR_INPUT ? "input"
           : r == AP_TENSOR_PARAM ? "parameter"
                                  : "activation";
}

static cJSON *dims_json(const ap_graph *g)
{
    cJSON *dims = cJSON_CreateObject();
    for (int i = 0; dims && i < g->ndims; i++) {
        const ap_dim *d = &g->dims[i];
        char label[2] = {d->label, 0};
        cJSON *o = cJSON_AddObjectToObject(dims, label);
        if (!o || !cJSON_AddStringToObject(o, "name", d->name) ||
            !cJSON_AddStringToObject(o, "kind", ap_dim_kind_name(d->kind)) ||
            !cJSON_AddNumberToObject(o, "size", (double)d->size)) {
            cJSON_Delete(dims);
            return NULL;
        }
    }
    return dims;
}

static cJSON *tensor_json(const ap_graph *g, const ap_tensor *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "name", t->name) ||
        !cJSON_AddStringToObject(o, "shape", t->shape) ||
        !cJSON_AddStringToObject(o, "role", role_name(t->role)) ||
        (t->dtype != g->dtype &&
         !cJSON_AddStringToObject(o, "dtype", ap_dtype_name(t->dtype)))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Adds key: [tensor names] to o; the array belongs to o at once. */
static int add_names(cJSON *o, const char *key, const ap_graph *g,
                     const int *idx, int n)
{
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    for (int i = 0; arr && i < n; i++) {
        cJSON *s = cJSON_CreateString(g->tensors[idx[i]].name);
        if (!s || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            return 0;
        }
    }
    return arr != NULL;
}

const char *ap_number_exact(double x, char *buf, size_t len)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

/* o[name] = x, written to read back exactly (ap_number_exact); null where
 * x is not finite, as cJSON writes such a number. */
cJSON *ap_json_add_exact(cJSON *o, const char *name, double x)
{
    char buf[32];
    if (!isfinite(x))
        return cJSON_AddNullToObject(o, name);
    return cJSON_AddRawToObject(o, name, ap_number_exact(x, buf, sizeof buf));
}

/* A router's scoring, each field only where it is not the default
 * (softmax, renormalised, no bias, scale 1), as load.c reads it. */
static int router_json(cJSON *o, const ap_op *op)
{
    return (op->route_score != AP_ROUTE_SIGMOID ||
            cJSON_AddStringToObject(o, "score", "sigmoid")) &&
           (op->route_norm || cJSON_AddBoolToObject(o, "normalize", 0)) &&
           (!op->route_bias || cJSON_AddBoolToObject(o, "expert_bias", 1)) &&
           (!op->route_on_input || cJSON_AddBoolToObject(o, "probs_on_input", 1)) &&
           (op->route_scale == 1 || ap_json_add_exact(o, "scale", op->route_scale));
}

static int attrs_json(cJSON *o, const ap_op *op)
{
    switch (op->kind) {
    case AP_OP_ATTENTION:
        return cJSON_AddBoolToObject(o, "causal", op->causal) &&
               cJSON_AddBoolToObject(o, "flash", op->flash) &&
               ap_json_add_exact(o, "dropout", op->dropout_p) &&
               (!op->window || cJSON_AddNumberToObject(o, "window", (double)op->window)) &&
               (!op->chunk || cJSON_AddNumberToObject(o, "chunk", (double)op->chunk));
    case AP_OP_DROPOUT:
        return ap_json_add_exact(o, "p", op->dropout_p) != NULL;
    case AP_OP_ROUTER:
    case AP_OP_DISPATCH:
    case AP_OP_COMBINE:
        return cJSON_AddNumberToObject(o, "top_k", op->top_k) &&
               (!op->groups || (cJSON_AddNumberToObject(o, "groups", op->groups) &&
                                cJSON_AddNumberToObject(o, "group_topk", op->group_topk))) &&
               (op->kind != AP_OP_ROUTER || router_json(o, op));
    default:
        return 1;
    }
}

static int modules_json(cJSON *o, const ap_op *op)
{
    if (!op->modules)
        return 1;
    cJSON *arr = cJSON_AddArrayToObject(o, "modules");
    for (int i = 0; arr && i < AP_MODULE_COUNT; i++) {
        if (!(op->modules & 1u << i))
            continue;
        cJSON *s = cJSON_CreateString(ap_module_name(1u << i));
        if (!s || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            return 0;
        }
    }
    return arr != NULL;
}

static cJSON *op_json(const ap_graph *g, const ap_op *op)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "name", op->name) ||
        !cJSON_AddStringToObject(o, "kind", ap_op_kind_name(op)) ||
        (op->layer >= 0 && !cJSON_AddNumberToObject(o, "layer", op->layer)) ||
        !add_names(o, "inputs", g, op->inputs, op->ninputs) ||
        !add_names(o, "outputs", g, op->outputs, op->noutputs) ||
        !attrs_json(o, op) || !modules_json(o, op)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int add_items(cJSON *root, const char *key, const ap_graph *g,
                     int tensors)
{
    cJSON *arr = cJSON_AddArrayToObject(root, key);
    int n = tensors ? g->ntensors : g->nops;
    for (int i = 0; arr && i < n; i++) {
        cJSON *item = tensors ? tensor_json(g, &g->tensors[i])
                              : op_json(g, &g->ops[i]);
        if (!item || !cJSON_AddItemToArray(arr, item)) {
            cJSON_Delete(item);
            return 0;
        }
    }
    return arr != NULL;
}

/* The numbers the exports state that change no cost, where known. */
static int add_numerics(cJSON *root, const ap_graph *g)
{
    return (!(g->rope_base > 0) || ap_json_add_exact(root, "rope_base", g->rope_base)) &&
           (!(g->norm_eps > 0) || ap_json_add_exact(root, "norm_eps", g->norm_eps)) &&
           (!g->rope_scaling ||
            cJSON_AddStringToObject(root, "rope_scaling", ap_rope_scaling_name(g->rope_scaling))) &&
           (!(g->rope_scaling_factor > 0) ||
            ap_json_add_exact(root, "rope_scaling_factor", g->rope_scaling_factor)) &&
           (!(g->glu_offset > 0) || ap_json_add_exact(root, "glu_offset", g->glu_offset)) &&
           (!(g->glu_clamp > 0) || ap_json_add_exact(root, "glu_clamp", g->glu_clamp));
}

char *ap_graph_to_json(const ap_graph *g)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *dims = dims_json(g);
    char *text = NULL;
    if (root && dims &&
        cJSON_AddStringToObject(root, "format", "autopar-model/1") &&
        cJSON_AddStringToObject(root, "name", g->name) &&
        cJSON_AddStringToObject(root, "dtype", ap_dtype_name(g->dtype)) &&
        cJSON_AddItemToObject(root, "dims", dims)) {
        dims = NULL;
        if ((!g->mtp_layers || cJSON_AddNumberToObject(root, "mtp_layers", g->mtp_layers)) &&
            add_numerics(root, g) &&
            add_items(root, "tensors", g, 1) && add_items(root, "ops", g, 0))
            text = cJSON_Print(root);
    }
    cJSON_Delete(dims);
    cJSON_Delete(root);
    return text;
}
