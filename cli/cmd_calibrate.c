/* cmd_calibrate.c -- `autopar calibrate`: a cluster file whose tensor-core
 * rate comes from one training step the user measured. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "planner/planner.h"

static const char usage_text[] =
    "usage: autopar calibrate MODEL --gpus N (--megatron SPEC | --megatron-args \"FLAGS\")\n"
    "       (MODEL may be left out where --megatron-args states the model, as a\n"
    "       Megatron-LM script does: docs/megatron.md, \"A script without MODEL\")\n"
    "                         --measured-step SECONDS -o cluster.json\n"
    "                         [--gpus-per-node G] [--cluster NAME|FILE] [--seq N]\n"
    "                         [--global-batch B]\n"
    "                         [--flash-attention on|off] [--dropout on|off] [--mtp-layers N]\n"
    "\n"
    "Derives your cluster's sustained tensor-core rate from one training run you\n"
    "measured: the GEMM and attention efficiencies of the cluster (a preset or a\n"
    "file) are scaled by the one factor at which the run's configuration prices\n"
    "at the measured step time, and the result is written as a cluster file.\n"
    "Plans and estimates with --cluster cluster.json then price every\n"
    "configuration at that rate. Prefer a run whose step is mostly compute (one\n"
    "node, no pipeline); the report says how much of the step the factor moves.\n"
    "A profile (`autopar profile`) calibrates too: its measured GEMMs are kernel\n"
    "times, and the factor scales them with the other tensor-core kernels.\n"
    "\n"
    "  --gpus N               GPUs in all. Without it: a torchrun line's in\n"
    "                         --megatron-args, else tp x pp x dp x cp where the\n"
    "                         spec gives dp, else a cluster file's own nodes,\n"
    "                         else 8 on a preset. They must be the run's, or the\n"
    "                         factor is another configuration's\n"
    "  --gpus-per-node G      GPUs per node (default: a torchrun line's\n"
    "                         --nproc-per-node in --megatron-args, else the\n"
    "                         cluster's, 8 on a preset)\n"
    "  --cluster NAME|FILE    the cluster whose rate is scaled: a preset\n"
    "                         (a100-80g, a100-40g, h100-sxm, h200, b200, h800)\n"
    "                         or a cluster file (default h100-sxm)\n"
    "  --seq N, --flash-attention on|off, --dropout on|off, --mtp-layers N\n"
    "                         how a Hugging Face config is built, as the run\n"
    "                         ran it (as for `autopar plan --help`)\n"

    "  --megatron SPEC, --megatron-args FLAGS\n"
    "                         the configuration the run used, as for `autopar\n"
    "                         estimate` (see `autopar estimate --help`)\n"
    "  --measured-step S      its measured seconds per training step (the mean\n"
    "                         of steady-state steps, e.g. Megatron-LM's\n"
    "                         \"elapsed time per iteration\" / 1000)\n"
    "  --global-batch B       the run's sequences per step, where the configuration\n"
    "                         has no gbs (the two must agree where both are given)\n"
    "  -o FILE                where to write the calibrated cluster file\n";

typedef struct {
    ap_cli_common cm;
    ap_megatron m;
    const char *spec;
    int args; /* spec is --megatron-args, which may state the model */
    double measured;
    const char *out;
} calib_args;

/* Returns -1 when the arguments are complete, else the exit code. */
static int parse_args(int argc, char **argv, calib_args *a)
{
    int given = 0;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = ap_cli_common_arg(&a->cm, "calibrate", s, v);
        if (used < 0)
            return 2;
        if (used > 0) {
            i += used - 1;
        } else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if ((used = ap_cli_megatron_arg("calibrate", s, v, &a->m, &given)) != 0) {
            if (used < 0)
                return -used;
            a->spec = v;
            a->args = !strcmp(s, "--megatron-args");
            i++;
        } else if (!strcmp(s, "--measured-step") && v) {
            if (ap_cli_double("calibrate", s, v, 1e-6, 1e7, &a->measured))
                return 2;
            i++;
        } else if (!strcmp(s, "-o") && v) {
            a->out = v;
            i++;
        } else if (ap_cli_model_arg(&a->cm, "calibrate", s, usage_text)) {
            return 2;
        }
    }
    if ((a->cm.model || a->args) && a->spec && a->measured > 0 && a->out)
        return ap_cli_check_writable("calibrate", "-o", a->out) ? 2 : -1;
    /* Name what is missing first, then the whole list. */
    const char *missing = !a->spec ? "--megatron or --megatron-args"
                        : !(a->cm.model || a->args) ? "MODEL"
                        : !(a->measured > 0) ? "--measured-step SECONDS"
                                             : "-o cluster.json";
    fprintf(stderr, "autopar calibrate: %s is missing\n", missing);
    return ap_cli_usage_error("calibrate", "needs MODEL, --megatron or --megatron-args, "
                              "--measured-step and -o (MODEL may be left out where "
                              "--megatron-args states the model)", usage_text);
}

static void report(const calib_args *a, const ap_cluster *before,
                   const ap_cluster *after, const ap_calibration *k)
{
    printf("calibrated %s on %d GPUs against a measured step of %.4g s\n",
           before->name, ap_cluster_gpus(after), a->measured);
    printf("  tensor-core rate x%.4f: GEMM efficiency %.4f -> %.4f", k->scale,
           before->gemm_eff, after->gemm_eff);
    if (before->attn_eff > 0)
        printf(", attention %.4f -> %.4f", before->attn_eff, after->attn_eff);
    if (before->attn_bwd_eff > 0)
        printf(", attention backward %.4f -> %.4f", before->attn_bwd_eff,
               after->attn_bwd_eff);
    printf("\n  predicted step %.4f s as given, %.4f s calibrated; compute is %.0f%% "
           "of it\n", k->preset_s, k->predicted_s, 100 * k->compute_share);
    if (k->compute_share < 0.5)
        printf("  warning: most of this step is communication, bubble or optimizer, "
               "which the factor does not scale; a run with more compute (one node, "
               "no pipeline) pins the rate down better\n");
    printf("  wrote %s: use it with --cluster %s\n", a->out, a->out);
}

/* Reports name the cluster, so plans priced on the file say where their
 * rates came from. */
static void mark_name(ap_cluster *c)
{
    static const char tag[] = " calibrated";
    size_t n = strlen(c->name), t = sizeof tag - 1;
    if ((n < t || strcmp(c->name + n - t, tag)) && n + t < sizeof c->name)
        memcpy(c->name + n, tag, t + 1);
}

static int write_cluster(const calib_args *a, ap_cluster *c)
{
    mark_name(c);
    /* The configuration as it was read (a --megatron-args line is long and
     * says the same), cut with an ellipsis where the field ends. */
    char spec[512];
    ap_megatron m = a->m;
    int gpus = ap_cluster_gpus(c);
    if (!m.dp && m.tp * m.pp * m.cp > 0)
        m.dp = gpus / (m.tp * m.pp * m.cp);
    if (!m.gbs)
        m.gbs = (double)m.mbs * m.dp;
    ap_megatron_format(&m, spec, sizeof spec);
    size_t room = sizeof c->calib_from;
    if ((size_t)snprintf(c->calib_from, room, "%.80s on %d GPUs, --megatron %s",
                         a->cm.model ? a->cm.model : "the model --megatron-args states",
                         gpus, spec) >= room)
        memcpy(c->calib_from + room - 4, "...", 4);
    ap_mask_control_chars(c->calib_from); /* from the model's path */
    char *text = ap_cluster_to_json(c);
    if (!text) {
        fprintf(stderr, "autopar calibrate: out of memory\n");
        return 1;
    }
    /* The file must load as it is written: a step so fast that the factor
     * puts a measured kernel past the GPU's peak is refused here, not by
     * every later --cluster. */
    ap_cluster back;
    char err[AP_ERR_LEN];
    int rc = ap_cluster_parse(text, strlen(text), a->out, gpus, c->gpus_per_node, &back, err);
    if (rc) {
        fprintf(stderr, "autopar calibrate: a measured step of %.4g s scales the cluster's "
                "rates past what its GPUs can run, so the file would not load (%s); "
                "check the step and the configuration the run used\n", a->measured, err);
        free(text);
        return 2;
    }
    ap_cluster_free(&back);
    rc = ap_cli_write_out("calibrate", a->out, text);
    free(text);
    return rc;
}

int ap_cmd_calibrate(int argc, char **argv)
{
    calib_args a = {0};
    ap_cli_common_default(&a.cm);
    ap_megatron_default(&a.m);
    a.m.gbs = 0; /* unset: --global-batch decides (ap_cli_settle_batch) */
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    if ((rc = ap_cli_settle_batch(&a.cm, "calibrate", a.args, &a.m)) ||
        (rc = ap_cli_megatron_build(&a.cm, &a.m, "calibrate")) ||
        (rc = ap_cli_megatron_gpus(&a.cm, &a.m, "calibrate")))
        return rc;
    ap_graph *g;
    ap_cluster c;
    if ((rc = ap_cli_setup(&a.cm, "calibrate", &g, &c)))
        return rc;
    ap_cluster before = c;
    ap_calibration k;
    char err[AP_ERR_LEN];
    rc = ap_calibrate_megatron(g, &c, &a.m, a.measured, &k, err);
    if (rc)
        fprintf(stderr, "autopar calibrate: %s\n", err);
    else if (!(rc = write_cluster(&a, &c)))
        report(&a, &before, &c, &k);
    ap_graph_free(g);
    ap_cluster_free(&c);
    return rc ? (rc == AP_EINPUT ? 2 : 1) : 0;
}
