/* common.c -- what the planning commands share: model and cluster flags,
 * number parsing with messages that name the flag, loading. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

void ap_cli_common_default(ap_cli_common *c)
{
    memset(c, 0, sizeof *c);
    c->cluster = "h100-sxm";
    c->global_batch = 512;
    ap_build_opts_default(&c->build);
}

int ap_cli_takes_value(const char *flag)
{
    static const char *const flags[] = {
        "--batch", "--bf16-layers", "--cluster", "--cross-entropy", "--dispatcher",
        "--dropout", "--emit", "--flash-attention", "--fp8-recipe", "--global-batch",
        "--gpus", "--gpus-per-node", "--ilp-gap", "--ilp-time-limit",
        "--max-experts-per-gpu", "--max-stages", "--measured-step", "--megatron",
        "--megatron-args", "--model", "--mtp-layers", "--recompute-modules", "--seq",
        "--target", "--threads", "--to", "--trace", "-o"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(flag, flags[i]))
            return 1;
    return 0;
}

int ap_cli_usage_error(const char *cmd, const char *why, const char *usage)
{
    const char *end = strstr(usage, "\n\n");
    if (why)
        fprintf(stderr, "autopar %s: %s\n", cmd, why);
    fprintf(stderr, "%.*s\n(`autopar %s --help` describes every option)\n",
            (int)(end ? end - usage : (long)strlen(usage)), usage, cmd);
    return 2;
}

/* The option in `usage` nearest to `a` (edit distance at most 2), copied
 * into best; 0 when none is that near. With `exact`, only one spelled as a
 * is looked for. */
static int nearest_option(const char *usage, const char *a, int exact, char *best,
                          size_t len)
{
    size_t most = exact ? 0 : 2, found = most + 1;
    for (const char *p = strstr(usage, "--"); p; p = strstr(p + 2, "--")) {
        size_t n = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
        char opt[64];
        if (n < 4 || n >= sizeof opt || (p > usage && !strchr(" [(|\n", p[-1])))
            continue;
        memcpy(opt, p, n);
        opt[n] = 0;
        size_t d = ap_edit_distance(a, opt, found - 1);
        if (d < found) {
            found = d;
            snprintf(best, len, "%s", opt);
        }
    }
    return found <= most;
}

int ap_cli_unknown_arg(const char *cmd, const char *a, const char *usage)
{
    char why[400], near[64], name[64];
    const char *eq = strchr(a, '=');
    if (a[0] != '-') {
        snprintf(why, sizeof why, "unexpected argument '%.256s'", a);
    } else if (eq && (size_t)(eq - a) < sizeof name &&
               (snprintf(name, sizeof name, "%.*s", (int)(eq - a), a),
                nearest_option(usage, name, 1, near, sizeof near))) {
        snprintf(why, sizeof why, "%s takes no value ('%.256s')", name, a);
    } else if (nearest_option(usage, a, 0, near, sizeof near)) {
        snprintf(why, sizeof why, "unknown option '%.256s' (did you mean %s?)", a, near);
    } else {
        snprintf(why, sizeof why, "unknown option '%.256s'", a);
    }
    return ap_cli_usage_error(cmd, why, usage);
}

int ap_cli_check_writable(const char *cmd, const char *flag, const char *path)
{
    struct stat st;
    int err = 0;
    if (!stat(path, &st)) {
        if (S_ISDIR(st.st_mode))
            err = EISDIR;
        else if (access(path, W_OK))
            err = errno;
    } else {
        FILE *f = fopen(path, "w");
        if (!f)
            err = errno;
        else if (fclose(f) || remove(path))
            err = errno;
    }
    if (!err)
        return 0;
    fprintf(stderr, "autopar %s: %s %s: cannot write: %s\n", cmd, flag, path, strerror(err));
    return 2;
}

int ap_cli_int(const char *cmd, const char *flag, const char *s, long lo,
               long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "autopar %s: %s needs an integer from %ld to %ld, got '%s'\n",
                cmd, flag, lo, hi, s);
        return 2;
    }
    *out = (int)v;
    return 0;
}

int ap_cli_double(const char *cmd, const char *flag, const char *s, double lo,
                  double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi)) {
        fprintf(stderr, "autopar %s: %s needs a number from %g to %g, got '%s'\n",
                cmd, flag, lo, hi, s);
        return 2;
    }
    *out = v;
    return 0;
}

int ap_cli_common_arg(ap_cli_common *c, const char *cmd, const char *a,
                      const char *v)
{
    int n;
    if (!strcmp(a, "--gpus") || !strcmp(a, "--gpus-per-node") ||
        !strcmp(a, "--cluster") || !strcmp(a, "--global-batch") ||
        !strcmp(a, "--seq") || !strcmp(a, "--flash-attention") ||
        !strcmp(a, "--dropout") || !strcmp(a, "--mtp-layers")) {
        if (!v) {
            fprintf(stderr, "autopar %s: %s needs a value\n", cmd, a);
            return -1;
        }
    }
    if (!strcmp(a, "--gpus")) {
        c->gpus_given = 1;
        return ap_cli_int(cmd, a, v, 1, AP_MAX_GPUS, &c->gpus) ? -1 : 2;
    }
    if (!strcmp(a, "--gpus-per-node"))
        return ap_cli_int(cmd, a, v, 1, 1024, &c->gpus_per_node) ? -1 : 2;
    if (!strcmp(a, "--global-batch")) {
        if (ap_cli_int(cmd, a, v, 1, AP_CLI_MAX_GLOBAL_BATCH, &n))
            return -1;
        c->global_batch = n;
        c->batch_given = 1;
        return 2;
    }
    if (!strcmp(a, "--seq")) {
        if (ap_cli_int(cmd, a, v, 1, AP_MAX_SEQ, &n))
            return -1;
        c->build.seq = n;
        return 2;
    }
    if (!strcmp(a, "--mtp-layers")) {
        if (ap_cli_int(cmd, a, v, 0, AP_MAX_MTP, &c->build.mtp_layers))
            return -1;
        c->mtp_given = 1;
        return 2;
    }
    /* An empty name (an unset shell variable) would price the default
     * preset without saying so. */
    if (!strcmp(a, "--cluster")) {
        if (!*v) {
            fprintf(stderr, "autopar %s: --cluster needs a preset (%s) or a cluster "
                    "file, got an empty string\n", cmd, ap_cluster_preset_names());
            return -1;
        }
        c->cluster = v;
        return 2;
    }
    if (!strcmp(a, "--dropout")) {
        if (strcmp(v, "on") && strcmp(v, "off")) {
            fprintf(stderr, "autopar %s: --dropout takes on or off\n", cmd);
            return -1;
        }
        c->build.dropout = !strcmp(v, "on");
        c->dropout_given = 1;
        return 2;
    }
    if (!strcmp(a, "--flash-attention")) {
        if (strcmp(v, "on") && strcmp(v, "off")) {
            fprintf(stderr, "autopar %s: --flash-attention takes on or off\n", cmd);
            return -1;
        }
        c->build.flash = !strcmp(v, "on");
        c->flash_given = 1;
        return 2;
    }
    return 0;
}

int ap_cli_settle_batch(const ap_cli_common *c, const char *cmd, int args,
                        ap_megatron *m)
{
    if (m->gbs == 0) {
        if (!args || c->batch_given)
            m->gbs = c->global_batch;
    } else if (c->batch_given && m->gbs != c->global_batch) {
        fprintf(stderr, "autopar %s: --global-batch %.0f and the configuration's "
                "gbs=%.0f differ; give the batch once\n", cmd, c->global_batch, m->gbs);
        return 2;
    }
    return 0;
}

int ap_cli_model_flags(ap_graph *g, const char *cmd, int flash_given, int flash,
                       int dropout_given)
{
    char err[AP_ERR_LEN];
    if (g->built)
        return 0;
    if (dropout_given) {
        fprintf(stderr, "autopar %s: %s: --dropout builds a Hugging Face config or a "
                "--megatron-args model; a model in the project format has the dropout "
                "its ops state (docs/model-format.md)\n", cmd, g->source);
        return 2;
    }
    if (flash_given && ap_graph_set_flash(g, flash, err)) {
        fprintf(stderr, "autopar %s: %s\n", cmd, err);
        return 2;
    }
    return 0;
}

int ap_cli_model_arg(ap_cli_common *c, const char *cmd, const char *a,
                     const char *usage)
{
    if (a[0] == '-' || c->model)
        return ap_cli_unknown_arg(cmd, a, usage);
    c->model = a;
    return 0;
}

int ap_cli_megatron_arg(const char *cmd, const char *a, const char *v,
                        ap_megatron *m, int *given)
{
    char err[AP_ERR_LEN];
    int spec = !strcmp(a, "--megatron");
    if (!v || (!spec && strcmp(a, "--megatron-args")))
        return 0;
    if (*given) {
        fprintf(stderr, "autopar %s: give one --megatron or --megatron-args\n", cmd);
        return -2;
    }
    *given = 1;
    int rc = spec ? ap_megatron_parse(v, m, err) : ap_megatron_parse_args(v, m, err);
    if (rc) {
        fprintf(stderr, "autopar %s: %s\n", cmd, err);
        return -rc;
    }
    if (m->commented[0])
        fprintf(stderr, "autopar %s: warning: --megatron-args: not read: %s, in a shell "
                "comment ('#' to the end of its line)\n", cmd, m->commented);
    if (m->unknown[0])
        fprintf(stderr, "autopar %s: warning: --megatron-args: read past %s: no "
                "Megatron-LM autopar knows has %s (docs/megatron.md)\n", cmd, m->unknown,
                strchr(m->unknown, ',') ? "them" : "it");
    return 2;
}

static int megatron_dropout(ap_cli_common *cm, const ap_megatron *m, const char *cmd)
{
    int on = m->shape.dropout > 0;
    if (!m->shape.dropout)
        return 0;
    if (cm->dropout_given && cm->build.dropout != on) {
        fprintf(stderr, "autopar %s: --dropout %s and --megatron-args disagree: its "
                "--hidden-dropout and --attention-dropout (0.1 where left out, as in "
                "Megatron-LM) say %s\n", cmd, cm->build.dropout ? "on" : "off",
                on ? "on" : "off");
        return 2;
    }
    cm->build.dropout = on;
    return 0;
}

/* The attention kernel the flags say (a fused one, or unfused) builds a
 * Hugging Face config with or without flash attention; a built graph is
 * checked against it by ap_megatron_plan. */
static int megatron_flash(ap_cli_common *cm, const ap_megatron *m, const char *cmd)
{
    int on = m->shape.flash > 0;
    if (!m->shape.flash)
        return 0;
    if (cm->flash_given && cm->build.flash != on) {
        fprintf(stderr, "autopar %s: --flash-attention %s and --megatron-args disagree: "
                "its %s say %s attention\n", cmd, cm->build.flash ? "on" : "off",
                on ? "--attention-backend or --use-flash-attn"
                : m->shape.flash == -2 ? "flags of Megatron-LM before 2022"
                : "--attention-backend or --transformer-impl", on ? "fused" : "unfused");
        return 2;
    }
    cm->build.flash = on;
    return 0;
}

/* --mtp-num-layers builds a Hugging Face config with that many MTP modules
 * (a model file must have them already: ap_graph_load checks). */
static int megatron_mtp(ap_cli_common *cm, const ap_megatron *m, const char *cmd)
{
    if (!m->shape.mtp)
        return 0;
    if (cm->mtp_given && cm->build.mtp_layers != m->shape.mtp) {
        fprintf(stderr, "autopar %s: --mtp-layers %d and --megatron-args "
                "--mtp-num-layers %d disagree\n", cmd, cm->build.mtp_layers, m->shape.mtp);
        return 2;
    }
    cm->build.mtp_layers = m->shape.mtp;
    return 0;
}

/* A torchrun line's --nproc-per-node x --nnodes (1 where left out, as
 * torchrun takes it) are the GPUs, where --gpus and --gpus-per-node do not
 * say otherwise. */
static int megatron_launcher(ap_cli_common *cm, const ap_megatron *m, const char *cmd)
{
    int nproc = m->launcher.nproc, nodes = m->launcher.nnodes ? m->launcher.nnodes : 1;
    if (!nproc)
        return 0;
    long long gpus = (long long)nproc * nodes;
    /* The launcher's own names for the counts, as the line gave them. */
    int ds = m->launcher.deepspeed;
    const char *who = ds ? "deepspeed" : "torchrun";
    const char *per = ds ? "--num_gpus" : "--nproc-per-node";
    const char *many = ds ? "--num_nodes" : "--nnodes";
    if (cm->gpus_per_node && cm->gpus_per_node != nproc) {
        fprintf(stderr, "autopar %s: --gpus-per-node %d and --megatron-args' %s %s %d "
                "disagree\n", cmd, cm->gpus_per_node, who, per, nproc);
        return 2;
    }
    if ((cm->gpus_given && cm->gpus != gpus) || gpus > AP_MAX_GPUS) {
        fprintf(stderr, "autopar %s: --megatron-args' %s line launches %lld GPUs "
                "(%s %d x %s %d)%s\n", cmd, who, gpus, per, nproc, many, nodes,
                gpus > AP_MAX_GPUS ? ", more than autopar plans for" : "");
        if (gpus <= AP_MAX_GPUS)
            fprintf(stderr, "  but --gpus says %d: give one of them\n", cm->gpus);
        return 2;
    }
    cm->gpus = (int)gpus;
    cm->gpus_per_node = nproc;
    return 0;
}

int ap_cli_megatron_gpus(ap_cli_common *cm, const ap_megatron *m, const char *cmd)
{
    long long gpus = (long long)m->tp * m->pp * m->dp * m->cp;
    if (cm->gpus || !m->dp)
        return 0;
    if (gpus > AP_MAX_GPUS) {
        fprintf(stderr, "autopar %s: tp x pp x dp x cp is %lld GPUs, more than autopar "
                "plans for (%d)\n", cmd, gpus, AP_MAX_GPUS);
        return 2;
    }
    cm->gpus = (int)gpus;
    return 0;
}

int ap_cli_megatron_build(ap_cli_common *cm, const ap_megatron *m, const char *cmd)
{
    int seq = m->shape.seq;
    if (!cm->model)
        cm->script = m;
    if (megatron_dropout(cm, m, cmd) || megatron_flash(cm, m, cmd) ||
        megatron_mtp(cm, m, cmd) || megatron_launcher(cm, m, cmd))
        return 2;
    /* Layers kept in bf16 are layer classes of their own, built so; without
     * FP8 they are no different (ap_megatron_plan checks the graph). */
    if (m->run.fp8) {
        cm->build.bf16_first = m->bf16_first;
        cm->build.bf16_last = m->bf16_last;
    }
    if (!seq)
        return 0;
    if (cm->build.seq > 0 && cm->build.seq != seq) {
        fprintf(stderr, "autopar %s: --seq %lld and --megatron-args --seq-length %d "
                "disagree\n", cmd, (long long)cm->build.seq, seq);
        return 2;
    }
    if (seq > AP_MAX_SEQ) {
        fprintf(stderr, "autopar %s: --megatron-args --seq-length %d: more than %d "
                "tokens\n", cmd, seq, AP_MAX_SEQ);
        return 2;
    }
    cm->build.seq = seq;
    return 0;
}

static int plannable(const ap_graph *g, const char *cmd)
{
    int classes = 0;
    for (int l = 0; l < g->nlayers; l++)
        classes += g->layer_class[l] == l;
    if (g->nlayers > AP_CLI_MAX_LAYERS) {
        fprintf(stderr, "autopar %s: %s: %d layers; plans are searched for "
                "at most %d\n", cmd, g->source, g->nlayers, AP_CLI_MAX_LAYERS);
        return 0;
    }
    if (classes > AP_CLI_MAX_CLASSES) {
        fprintf(stderr, "autopar %s: %s: %d distinct layers (layer classes); "
                "plans are searched for at most %d\n", cmd, g->source, classes,
                AP_CLI_MAX_CLASSES);
        return 0;
    }
    return 1;
}

/* `autopar profile` describes the machine it ran on, which may be one GPU
 * of a node; sized to more GPUs without --gpus-per-node, such a file makes
 * every GPU a node of its own and every group cross the inter-node links,
 * a plan the reader did not ask for. */
static void warn_node_size(const ap_cli_common *cm, const char *cmd,
                           const ap_cluster *c)
{
    if (cm->gpus_per_node || c->gpus_per_node != 1 || c->nodes < 2)
        return;
    fprintf(stderr, "autopar %s: warning: %s describes nodes of 1 GPU, so the "
            "%d GPUs are priced as %d nodes, every collective over the "
            "inter-node links; if a node holds more, give --gpus-per-node\n",
            cmd, cm->cluster, c->nodes, c->nodes);
}

int ap_cli_script_graph(const ap_megatron *m, const ap_build_opts *build, ap_graph **g,
                        char *err)
{
    ap_decoder d;
    unsigned char *layers;
    *g = NULL;
    if (!build->seq) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --seq-length is missing (Megatron-LM "
                 "needs it), and no --seq");
        return AP_EINPUT;
    }
    int rc = ap_megatron_model(m, &d, &layers, err);
    if (!rc)
        rc = ap_graph_from_decoder(&d, AP_MEGATRON_SOURCE, build, g, err);
    if (!rc) {
        /* Named for what the flags state, which the reports and exports
         * print as the model's name ("plan for ... on 16 GPUs"). */
        const ap_dim *h = ap_graph_dim(*g, 'h');
        snprintf((*g)->name, sizeof (*g)->name, "--megatron-args model (%d layers, hidden %lld)",
                 (*g)->nlayers, h ? (long long)h->size : 0LL);
        ap_megatron_numerics(m, *g);
    }
    free(layers);
    return rc;
}

/* A preset is 8 GPUs where nothing gave their number, as the commands'
 * help says. */
#define PRESET_GPUS 8

int ap_cli_setup(ap_cli_common *cm, const char *cmd, ap_graph **g, ap_cluster *c)
{
    char err[AP_ERR_LEN];
    int rc = cm->model ? ap_graph_load(cm->model, &cm->build, g, err)
                       : ap_cli_script_graph(cm->script, &cm->build, g, err);
    if (rc) {
        fprintf(stderr, "autopar %s: %s\n", cmd, err);
        return rc;
    }
    if (!plannable(*g, cmd) ||
        ap_cli_model_flags(*g, cmd, cm->flash_given, cm->build.flash, cm->dropout_given)) {
        ap_graph_free(*g);
        return AP_EINPUT;
    }
    rc = ap_cluster_resolve(cm->cluster, cm->gpus, cm->gpus_per_node, c, err);
    if (!rc && !cm->gpus && !strcmp(ap_cluster_basis(c), "preset"))
        rc = ap_cluster_set_size(c, PRESET_GPUS, cm->gpus_per_node, err);
    if (rc) {
        /* The cluster's own message names its file or preset; the flags
         * that sized it may be what is wrong. */
        fprintf(stderr, "autopar %s: --cluster %s", cmd, cm->cluster);
        if (cm->gpus)
            fprintf(stderr, " --gpus %d", cm->gpus);
        if (cm->gpus_per_node)
            fprintf(stderr, " --gpus-per-node %d", cm->gpus_per_node);
        fprintf(stderr, ": %s\n", err);
        ap_graph_free(*g);
        return rc;
    }
    cm->gpus = ap_cluster_gpus(c);
    warn_node_size(cm, cmd, c);
    return AP_OK;
}

int ap_cli_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF;
    return fclose(f) || bad ? -1 : 0;
}

int ap_cli_write_out(const char *cmd, const char *path, const char *text)
{
    errno = 0;
    if (!ap_cli_write_file(path, text))
        return 0;
    fprintf(stderr, "autopar %s: %s: cannot write%s%s\n", cmd, path, errno ? ": " : "",
            errno ? strerror(errno) : "");
    return 2;
}

void ap_cli_warn_timeouts(const char *cmd, const ap_plan *p, double limit)
{
    if (p->ilp_timeouts)
        fprintf(stderr, "autopar %s: warning: %d configuration%s left out: the "
                "sharding ILP found no solution within %g s (--ilp-time-limit); "
                "a larger limit may find a faster plan\n", cmd, p->ilp_timeouts,
                p->ilp_timeouts == 1 ? " was" : "s were", limit);
}

int ap_cli_write_trace(const char *cmd, const ap_plan *p, const char *path)
{
    char err[AP_ERR_LEN];
    char *text = ap_plan_trace_json(p, err);
    if (!text) {
        fprintf(stderr, "autopar %s: %s\n", cmd, err);
        return 1;
    }
    int rc = ap_cli_write_out(cmd, path, text);
    free(text);
    return rc;
}
