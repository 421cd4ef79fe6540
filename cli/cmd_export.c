/* cmd_export.c -- `autopar export`: plan.json to a launcher's arguments or
 * config; and the --emit of the planning commands, which exports the plan
 * they just made the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "planner/planner.h"

static const char usage_text[] =
    "usage: autopar export PLAN.json --to megatron|torchtitan|deepspeed\n"
    "                      [--model MODEL] [-o FILE]\n"
    "\n"
    "Writes what a training launcher takes to run the plan: Megatron-LM\n"
    "arguments and a torchrun line, torchtitan flags and a torchrun line, or a\n"
    "DeepSpeed config. A plan the launcher cannot express exactly (stages with\n"
    "different meshes, shardings outside its tensor-parallel pattern, ...) is\n"
    "refused with what differs.\n"
    "\n"
    "  --to LAUNCHER   megatron, torchtitan or deepspeed\n"
    "  --model MODEL   the plan's model (default: the plan's model_path)\n"
    "  -o FILE         write to FILE instead of stdout\n";

static int is_launcher(const char *s)
{
    ap_launcher l;
    char err[AP_ERR_LEN];
    return ap_launcher_from_name(s, &l, err) == AP_OK;
}

int ap_cli_check_emit(const char *cmd, const char *emit)
{
    if (!strcmp(emit, "table") || !strcmp(emit, "json") || is_launcher(emit))
        return 0;
    fprintf(stderr, "autopar %s: --emit takes table, json, megatron, torchtitan or "
            "deepspeed, got '%s'\n", cmd, emit);
    return 2;
}

static int export_plan(const char *cmd, const ap_graph *g, const ap_plan_desc *p,
                  const char *to, const char *out)
{
    ap_launcher l;
    char err[AP_ERR_LEN];
    char *text = NULL;
    int rc = ap_launcher_from_name(to, &l, err);
    if (!rc)
        rc = ap_export(g, p, l, &text, err);
    if (rc) {
        fprintf(stderr, "autopar %s: %s\n", cmd, err);
        return rc;
    }
    size_t n = strlen(text);
    if (n && text[n - 1] == '\n')
        text[n - 1] = 0; /* ap_cli_write_file and puts add one */
    if (out) {
        rc = ap_cli_write_out(cmd, out, text);
    } else {
        puts(text);
    }
    free(text);
    return rc;
}

int ap_cli_emit_plan(const char *cmd, const ap_graph *g, const char *plan_json,
                     const char *to)
{
    ap_plan_desc p;
    char err[AP_ERR_LEN];
    int rc = ap_plan_desc_parse(plan_json, strlen(plan_json), "the plan", &p, err);
    if (rc) {
        fprintf(stderr, "autopar %s: %s\n", cmd, err);
        return rc;
    }
    rc = export_plan(cmd, g, &p, to, NULL);
    ap_plan_desc_free(&p);
    return rc;
}

/* The model a plan is exported against: --model, else the plan's
 * model_path, built at the plan's sequence length. */
static int load_model(const ap_plan_desc *p, const char *model, ap_graph **g)
{
    char err[AP_ERR_LEN];
    if (!model && !p->model_path[0]) {
        fprintf(stderr, "autopar export: %s has no model_path (a plan of the model "
                "--megatron-args states has none); name the model with --model: "
                "`autopar graph --megatron-args \"FLAGS\" -o model.json` writes it, or "
                "`estimate ... --emit megatron` exports the plan as it is made\n",
                p->source);
        return 2;
    }
    struct stat a, b;
    if (!model && stat(p->model_path, &a) == 0 && stat(p->source, &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        fprintf(stderr, "autopar export: %s: model_path names this plan itself, not its "
                "model; name the model with --model\n", p->source);
        return 2;
    }
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = p->seq;
    if (p->has_shape) {
        o.flash = p->shape.flash;
        o.dropout = p->shape.hidden_dropout > 0 || p->shape.attention_dropout > 0;
        o.mtp_layers = p->shape.mtp_layers;
        o.bf16_first = p->shape.bf16_first;
        o.bf16_last = p->shape.bf16_last;
    }
    int rc = ap_graph_load(model ? model : p->model_path, &o, g, err);
    /* The loader says a plan names its model in model_path; where that
     * is the path at fault, saying it again reads as a loop. */
    if (rc)
        fprintf(stderr, "autopar export: %s%s\n", err,
                model || strstr(err, "model_path names it") ? ""
                : " (the plan's model_path; pass --model to name it)");
    return rc;
}

int ap_cmd_export(int argc, char **argv)
{
    const char *plan = NULL, *to = NULL, *model = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--to") && v) {
            to = argv[++i];
        } else if (!strcmp(a, "--model") && v) {
            model = argv[++i];
        } else if (!strcmp(a, "-o") && v) {
            out = argv[++i];
        } else if (a[0] == '-' || plan) {
            return ap_cli_unknown_arg("export", a, usage_text);
        } else {
            plan = a;
        }
    }
    if (!plan || !to)
        return ap_cli_usage_error("export", !plan ? "no plan.json given" : "--to is required "
                                  "(megatron, torchtitan or deepspeed)", usage_text);
    if (out && ap_cli_check_writable("export", "-o", out))
        return 2;
    if (!is_launcher(to)) {
        fprintf(stderr, "autopar export: --to takes megatron, torchtitan or deepspeed, "
                "got '%s'\n", to);
        return 2;
    }
    ap_plan_desc p;
    char err[AP_ERR_LEN];
    int rc = ap_plan_read(plan, &p, err);
    if (rc) {
        fprintf(stderr, "autopar export: %s\n", err);
        return rc;
    }
    ap_graph *g = NULL;
    rc = load_model(&p, model, &g);
    if (!rc)
        rc = export_plan("export", g, &p, to, out);
    ap_graph_free(g);
    ap_plan_desc_free(&p);
    return rc;
}
