/* cmd_graph.c -- `autopar graph`: loads a model (project JSON or Hugging Face
 * config), prints what it holds and what it costs, and can write it back in
 * the project format. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "graph/graph.h"

static const char usage_text[] =
    "usage: autopar graph (MODEL | --megatron-args \"FLAGS\") [--json] [--seq N] [--batch N]\n"
    "                     [--flash-attention on|off] [--dropout on|off]\n"
    "                     [--mtp-layers N] [-o OUT.json]\n"
    "\n"
    "Summarises a model's operator graph: dimensions, layers and layer\n"
    "classes, ops by kind, parameters (and, for MoE, those each token\n"
    "touches), activation bytes saved for backward and forward FLOPs.\n"
    "MODEL is a model in the project format\n"
    "(docs/model-format.md) or a Hugging Face config.json; or, with\n"
    "--megatron-args, the model a Megatron-LM script's flags state, built as\n"
    "`autopar estimate` builds it (docs/megatron.md, \"A script without MODEL\").\n"
    "\n"
    "  --megatron-args FLAGS  instead of MODEL: the model a Megatron-LM command\n"
    "                         line's flags state (--num-layers, --hidden-size,\n"
    "                         --num-attention-heads and the rest)\n"
    "  --json                 print the summary as a JSON object\n"
    "  --seq N, --batch N     build at this sequence length and batch; for a\n"
    "                         project-format file they replace the sizes of\n"
    "                         its seq and batch dimensions (capacity scales)\n"
    "  --flash-attention on|off  use (or not) a fused attention kernel, which\n"
    "                         saves no s x s matrix; applies to both formats\n"
    "  --dropout on|off       dropout after attention and MLP (HF configs only)\n"
    "  --mtp-layers N         N multi-token-prediction modules after the head,\n"
    "                         as Megatron-LM's --mtp-num-layers (HF configs;\n"
    "                         default none, whatever the config says)\n"
    "  -o OUT.json            write the graph in the project format\n";

typedef struct {
    const char *model, *out;
    int json, flash_set, dropout_set, mtp_set;
    ap_build_opts build;
    int script; /* --megatron-args states the model */
    ap_megatron m;
} options;

static int parse_count(const char *flag, const char *s, long long max,
                       int64_t *out)
{
    char *end;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || v < 1 || v > max) {
        fprintf(stderr, "autopar graph: %s needs an integer from 1 to %lld, "
                        "got '%s'\n", flag, max, s ? s : "");
        return 2;
    }
    *out = v;
    return 0;
}

static int parse_switch(const char *flag, const char *s, int *out)
{
    if (s && (!strcmp(s, "on") || !strcmp(s, "off"))) {
        *out = !strcmp(s, "on");
        return 0;
    }
    fprintf(stderr, "autopar graph: %s takes on or off, got '%s'\n", flag,
            s ? s : "");
    return 2;
}

/* Returns 0, 2 on a usage error, or -1 when --help was printed. */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    ap_build_opts_default(&o->build);
    ap_megatron_default(&o->m);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        } else if (!strcmp(a, "--seq")) {
            rc = parse_count(a, v, AP_MAX_SEQ, &o->build.seq);
        } else if (!strcmp(a, "--batch")) {
            rc = parse_count(a, v, AP_MAX_BATCH, &o->build.batch);
        } else if (!strcmp(a, "--mtp-layers")) {
            int64_t n = 0;
            rc = v && !strcmp(v, "0") ? 0 : parse_count(a, v, AP_MAX_MTP, &n);
            o->build.mtp_layers = (int)n;
            o->mtp_set = 1;
        } else if (!strcmp(a, "--flash-attention")) {
            rc = parse_switch(a, v, &o->build.flash);
            o->flash_set = 1;
        } else if (!strcmp(a, "--dropout")) {
            rc = parse_switch(a, v, &o->build.dropout);
            o->dropout_set = 1;
        } else if (!strcmp(a, "--megatron-args") && v) {
            int used = ap_cli_megatron_arg("graph", a, v, &o->m, &o->script);
            if (used < 0)
                return -used;
        } else if (!strcmp(a, "-o")) {
            if (!v) {
                fprintf(stderr, "autopar graph: -o needs a file name\n");
                return 2;
            }
            o->out = v;
        } else if (a[0] == '-' && a[1]) {
            return ap_cli_unknown_arg("graph", a, usage_text);
        } else if (o->model) {
            fprintf(stderr, "autopar graph: one model at a time ('%s' and "
                            "'%s')\n", o->model, a);
            return 2;
        } else {
            o->model = a;
            continue;
        }
        if (rc)
            return rc;
        i++; /* the option's value */
    }
    if (!o->model == !o->script)
        return ap_cli_usage_error("graph", o->model ? "MODEL or --megatron-args, not both"
                                  : "no model given", usage_text);
    if (o->out && ap_cli_check_writable("graph", "-o", o->out))
        return 2;
    return 0;
}

/* The model --megatron-args states, at its --seq-length and with the
 * dropout, attention kernel and MTP modules its flags say, as the planning
 * commands build it (ap_cli_megatron_build). */
static int script_graph(options *o, ap_graph **g, char *err)
{
    ap_cli_common cm;
    ap_cli_common_default(&cm);
    cm.build = o->build;
    cm.flash_given = o->flash_set;
    cm.dropout_given = o->dropout_set;
    cm.mtp_given = o->mtp_set;
    if (ap_cli_megatron_build(&cm, &o->m, "graph"))
        return AP_EINPUT;
    o->build = cm.build;
    o->flash_set = 0; /* applied in the build */
    return ap_cli_script_graph(&o->m, &o->build, g, err);
}

/* What the summary reports per layer class and for the ops outside layers. */
typedef struct {
    int first, count;
    double flops, saved, params;
    int64_t window; /* the layer's attention's sliding window, 0: none */
    int64_t chunk;  /* its attention chunks (Llama 4's), 0: none */
} span;

/* Totals of every layer in one pass: sums[l + 1] for layer l, sums[0] for
 * the ops outside layers; the count of a class is kept at its
 * representative. A generated model may have a hundred thousand classes,
 * so nothing here loops over the ops once per class. NULL when out of
 * memory. */
static span *layer_sums(const ap_graph *g)
{
    span *s = calloc((size_t)g->nlayers + 1, sizeof *s);
    if (!s)
        return NULL;
    for (int i = 0; i < g->nops; i++) {
        span *t = &s[g->ops[i].layer + 1];
        t->flops += g->ops[i].flops;
        t->saved += g->ops[i].saved_bytes;
        t->params += g->ops[i].param_count;
        if (g->ops[i].kind == AP_OP_ATTENTION) {
            t->window = g->ops[i].window;
            t->chunk = g->ops[i].chunk;
        }
    }
    for (int l = 0; l < g->nlayers; l++)
        s[g->layer_class[l] + 1].count++;
    return s;
}

static double tokens(const ap_graph *g)
{
    double t = 1;
    for (int i = 0; i < g->ndims; i++)
        if (g->dims[i].kind == AP_DIM_BATCH || g->dims[i].kind == AP_DIM_SEQ)
            t *= (double)g->dims[i].size;
    return t;
}

/* "1.32 B", "2.63 GB": three significant digits and a decimal prefix. */
static const char *human(char *buf, size_t n, double x, const char *const *p)
{
    int k = 0;
    while (x >= 999.5 && p[k + 1]) {
        x /= 1000;
        k++;
    }
    snprintf(buf, n, "%.3g%s%s", x, p[k][0] ? " " : "", p[k]);
    return buf;
}

static const char *const count_units[] = {"", "K", "M", "B", "T", NULL};
static const char *const byte_units[] = {"B",  "KB", "MB", "GB",
                                         "TB", "PB", NULL};
static const char *const flop_units[] = {"FLOP",  "KFLOP", "MFLOP", "GFLOP",
                                         "TFLOP", "PFLOP", "EFLOP", NULL};

static int op_kind_count(const ap_graph *g, const char *kind)
{
    int n = 0;
    for (int i = 0; i < g->nops; i++)
        n += !strcmp(ap_op_kind_name(&g->ops[i]), kind);
    return n;
}

/* Kind names in first-appearance order, so the listing follows the model. */
static int distinct_kinds(const ap_graph *g, const char **kinds)
{
    int n = 0;
    for (int i = 0; i < g->nops; i++) {
        const char *k = ap_op_kind_name(&g->ops[i]);
        int seen = 0;
        for (int j = 0; j < n && !seen; j++)
            seen = !strcmp(kinds[j], k);
        if (!seen)
            kinds[n++] = k;
    }
    return n;
}

static int print_text(const ap_graph *g)
{
    char b1[32], b2[32], b3[32];
    printf("model     %s (%s, %s)\n", g->name, g->source,
           ap_dtype_name(g->dtype));
    printf("dims     ");
    for (int i = 0; i < g->ndims; i++)
        printf(" %c=%lld (%s)", g->dims[i].label,
               (long long)g->dims[i].size, g->dims[i].name);
    int nclasses = 0;
    for (int l = 0; l < g->nlayers; l++)
        nclasses += g->layer_class[l] == l;
    printf("\nlayers    %d in %d class%s\n", g->nlayers, nclasses,
           nclasses == 1 ? "" : "es");
    const char *kinds[32];
    int nk = distinct_kinds(g, kinds);
    printf("ops       %d:", g->nops);
    for (int k = 0; k < nk; k++)
        printf("%s %d %s", k ? "," : "", op_kind_count(g, kinds[k]),
               kinds[k]);
    printf("\nparams    %s params (%s at %s)",
           human(b1, sizeof b1, g->total_params, count_units),
           human(b2, sizeof b2, g->total_param_bytes, byte_units),
           ap_dtype_name(g->dtype));
    /* A MoE model's tokens each touch a fraction of it. */
    double active = ap_graph_active_params(g);
    if (active < g->total_params)
        printf(", %s active per token", human(b1, sizeof b1, active, count_units));
    printf("\n");
    printf("per layer class (one layer each):\n");
    span *sums = layer_sums(g);
    if (!sums)
        return 1;
    for (int l = 0; l < g->nlayers; l++) {
        if (g->layer_class[l] != l)
            continue;
        const span *s = &sums[l + 1];
        printf("  class %-3d %3d layer%s  %s params  saved %s  forward %s",
               l, s->count, s->count == 1 ? " " : "s",
               human(b1, sizeof b1, s->params, count_units),
               human(b2, sizeof b2, s->saved, byte_units),
               human(b3, sizeof b3, s->flops, flop_units));
        if (s->window)
            printf("  window %lld", (long long)s->window);
        if (s->chunk)
            printf("  chunks of %lld", (long long)s->chunk);
        printf("\n");
    }
    span out = sums[0];
    free(sums);
    printf("  outside layers  %s params  saved %s  forward %s\n",
           human(b1, sizeof b1, out.params, count_units),
           human(b2, sizeof b2, out.saved, byte_units),
           human(b3, sizeof b3, out.flops, flop_units));
    printf("saved     %s for backward per step (batch %.0f tokens)\n",
           human(b1, sizeof b1, g->total_saved_bytes, byte_units), tokens(g));
    printf("forward   %s total, %s per token\n",
           human(b1, sizeof b1, g->total_flops, flop_units),
           human(b2, sizeof b2, g->total_flops / tokens(g), flop_units));
    return 0;
}

static cJSON *summary_json(const ap_graph *g)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", g->name);
    cJSON_AddStringToObject(o, "source", g->source);
    cJSON_AddStringToObject(o, "dtype", ap_dtype_name(g->dtype));
    cJSON *dims = cJSON_AddObjectToObject(o, "dims");
    for (int i = 0; i < g->ndims; i++) {
        char label[2] = {g->dims[i].label, 0};
        cJSON *d = cJSON_AddObjectToObject(dims, label);
        cJSON_AddStringToObject(d, "name", g->dims[i].name);
        cJSON_AddStringToObject(d, "kind", ap_dim_kind_name(g->dims[i].kind));
        cJSON_AddNumberToObject(d, "size", (double)g->dims[i].size);
    }
    cJSON_AddNumberToObject(o, "layers", g->nlayers);
    cJSON *lc = cJSON_AddArrayToObject(o, "layer_class");
    for (int l = 0; l < g->nlayers; l++)
        cJSON_AddItemToArray(lc, cJSON_CreateNumber(g->layer_class[l]));
    cJSON *classes = cJSON_AddArrayToObject(o, "classes");
    span *sums = layer_sums(g);
    if (!sums) {
        cJSON_Delete(o);
        return NULL;
    }
    for (int l = -1; l < g->nlayers; l++) {
        if (l >= 0 && g->layer_class[l] != l)
            continue;
        span s = sums[l + 1];
        cJSON *c = l < 0 ? cJSON_AddObjectToObject(o, "outside_layers")
                         : cJSON_CreateObject();
        if (l >= 0) {
            cJSON_AddItemToArray(classes, c);
            cJSON_AddNumberToObject(c, "class", l);
            cJSON_AddNumberToObject(c, "count", s.count);
            if (s.window)
                cJSON_AddNumberToObject(c, "window", (double)s.window);
            if (s.chunk)
                cJSON_AddNumberToObject(c, "chunk", (double)s.chunk);
        }
        cJSON_AddNumberToObject(c, "params", s.params);
        cJSON_AddNumberToObject(c, "saved_bytes", s.saved);
        cJSON_AddNumberToObject(c, "flops", s.flops);
    }
    free(sums);
    const char *kinds[32];
    int nk = distinct_kinds(g, kinds);
    cJSON *ops = cJSON_AddObjectToObject(o, "ops_by_kind");
    for (int k = 0; k < nk; k++)
        cJSON_AddNumberToObject(ops, kinds[k], op_kind_count(g, kinds[k]));
    cJSON_AddNumberToObject(o, "ops", g->nops);
    cJSON_AddNumberToObject(o, "params", g->total_params);
    cJSON_AddNumberToObject(o, "active_params", ap_graph_active_params(g));
    cJSON_AddNumberToObject(o, "param_bytes", g->total_param_bytes);
    cJSON_AddNumberToObject(o, "saved_bytes", g->total_saved_bytes);
    cJSON_AddNumberToObject(o, "flops", g->total_flops);
    cJSON_AddNumberToObject(o, "tokens", tokens(g));
    cJSON_AddNumberToObject(o, "flops_per_token",
                            g->total_flops / tokens(g));
    return o;
}

static int print_json(const ap_graph *g)
{
    cJSON *o = summary_json(g);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) {
        fprintf(stderr, "autopar graph: out of memory\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

static int write_model(const ap_graph *g, const char *path)
{
    char *text = ap_graph_to_json(g);
    if (!text) {
        fprintf(stderr, "autopar graph: out of memory\n");
        return 1;
    }
    int rc = ap_cli_write_out("graph", path, text);
    free(text);
    return rc;
}

int ap_cmd_graph(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    char err[AP_ERR_LEN] = "";
    ap_graph *g = NULL;
    if (o.script) {
        rc = script_graph(&o, &g, err);
        if (rc && !g && !err[0]) /* ap_cli_megatron_build printed why */
            return rc;
    } else {
        rc = ap_graph_load(o.model, &o.build, &g, err);
    }
    if (rc) {
        fprintf(stderr, "autopar graph: %s\n", err);
        ap_graph_free(g);
        return rc;
    }
    /* --flash-attention given explicitly overrides what a file says. */
    if ((rc = ap_cli_model_flags(g, "graph", o.flash_set, o.build.flash, o.dropout_set))) {
        ap_graph_free(g);
        return rc;
    }
    if (o.out)
        rc = write_model(g, o.out);
    if (!rc && o.json)
        rc = print_json(g);
    else if (!rc && print_text(g)) {
        fprintf(stderr, "autopar graph: out of memory\n");
        rc = 1;
    }
    ap_graph_free(g);
    return rc;
}
