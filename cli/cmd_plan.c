/* cmd_plan.c -- `autopar plan`: search the fastest plan that fits, print it,
 * write plan.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "planner/planner.h"

static const char usage_text[] =
    "usage: autopar plan MODEL --gpus N [--gpus-per-node G] [--cluster NAME|FILE]\n"
    "                    [--global-batch B] [--seq N] [--flash-attention on|off]\n"
    "                    [--dropout on|off] [--mtp-layers N]\n"
    "                    [--no-pipeline] [--max-stages P] [--ilp-time-limit S]\n"
    "                    [--ilp-gap G] [--threads N] [--target megatron|torchtitan|deepspeed]\n"
    "                    [--fp8] [--tp-comm-overlap] [--cross-entropy IMPL]\n"
    "                    [--recompute-modules M,...] [--fp8-recipe R]\n"
    "                    [--bf16-layers FIRST,LAST]\n"
    "                    [--dispatcher alltoall|deepep|hybridep]\n"
    "                    [--grad-fp32] [--max-experts-per-gpu E]\n"
    "                    [--no-sweep] [--json] [--emit FORMAT] [-o plan.json]\n"
    "                    [--trace timeline.json] [--quiet]\n"
    "\n"
    "Searches pipeline stages, submeshes, per-op sharding (ILP) and\n"
    "micro-batching for the fastest training step that fits in memory, and\n"
    "prints the plan with its predicted step time, throughput and memory.\n"
    "\n"
    "  --gpus N             GPUs in all (default: a cluster file's own nodes, else 8)\n"
    "  --gpus-per-node G    GPUs per node (default: the cluster's, 8)\n"
    "  --cluster NAME|FILE  a preset (a100-80g, a100-40g, h100-sxm, h200, b200,\n"
    "                       h800) or a cluster file from `autopar profile`\n"
    "                       (default h100-sxm)\n"
    "  --global-batch B     sequences per step (default 512)\n"
    "  --seq N              sequence length (a project-format model's seq\n"
    "                       dimension too)\n"
    "  --mtp-layers N       N multi-token-prediction modules after the head, run\n"
    "                       on the last stage (Hugging Face configs; default 0)\n"
    "  --flash-attention on|off, --dropout on|off\n"
    "                       a fused attention kernel (default on), dropout\n"
    "                       after attention and MLP (default off): how a\n"
    "                       Hugging Face config is built; --flash-attention\n"
    "                       also sets a project-format model's attention ops,\n"
    "                       whose dropout is its own (--dropout is refused)\n"
    "  --no-pipeline        one stage on all GPUs: intra-op sharding only\n"
    "  --max-stages P       at most P pipeline stages\n"
    "  --no-sweep           the search's plan alone: without it, every valid\n"
    "                       Megatron-LM configuration is priced too and the\n"
    "                       plan is the faster of the search's and theirs\n"
    "                       (docs/planner.md; not under --no-pipeline or\n"
    "                       --max-stages)\n"
    "  --ilp-time-limit S   seconds per ILP solve (default 10); a configuration\n"
    "                       whose ILP finds nothing in time is left out, with\n"
    "                       a warning\n"
    "  --ilp-gap G          relative MIP gap accepted (default 1e-4)\n"
    "  --threads N          worker threads (default: the machine's cores); the\n"
    "                       plan does not depend on it\n"
    "  --target LAUNCHER    only what that launcher runs: the fastest of its\n"
    "                       configurations that fits (docs/compare.md); a note\n"
    "                       says where its flags cannot state the model\n"
    "  --emit FORMAT        what to print: table (the summary, default), json\n"
    "                       (plan.json), or a launcher's input: megatron,\n"
    "                       torchtitan, deepspeed (docs/exports.md)\n"
    "  --json               the same as --emit json\n"
    "  -o FILE              also write plan.json to FILE\n"
    "  --trace FILE         write the simulated step as Chrome Trace Event JSON\n"
    "                       (open it in Perfetto or chrome://tracing)\n"
    "  --fp8                price the transformer layers' linear layers in FP8, as\n"
    "                       Transformer Engine runs them (Megatron-LM's\n"
    "                       --fp8-format hybrid); needs a GPU with FP8 (H100 or\n"
    "                       later); plan.json records it\n"
    "  --tp-comm-overlap    price sequence-parallel all-gathers and reduce-scatters\n"
    "                       overlapped with the linear layers' GEMMs, as\n"
    "                       Megatron-LM's --tp-comm-overlap runs them (Transformer\n"
    "                       Engine userbuffers); all-reduces stay exposed;\n"
    "                       plan.json records it\n"
    "  --fp8-recipe R       with --fp8, Transformer Engine's scaling: delayed (the\n"
    "                       default), tensorwise (current scaling, an amax pass\n"
    "                       before each cast), blockwise (DeepSeek-V3's 128-element\n"
    "                       blocks) or mxfp8 (32-element blocks, Blackwell only;\n"
    "                       docs/cost-model.md, FP8); for torchtitan, whose\n"
    "                       float8 converter has no other, tensorwise only (its\n"
    "                       default there)\n"
    "  --bf16-layers F,L    with --fp8 and a recipe other than delayed, keep the\n"
    "                       first F and last L layers in bf16, as Megatron-LM's\n"
    "                       --first-last-layers-bf16 (1,1 is Megatron-Bridge's\n"
    "                       current-scaling recipe); the export states them\n"
    "  --dispatcher D       MoE models: the token dispatcher the plan runs with:\n"
    "                       alltoall (default), or deepep or hybridep (Megatron-\n"
    "                       Core's flex dispatcher; docs/cost-model.md)\n"
    "  --recompute-modules M,...\n"
    "                       let a stage recompute these Megatron-Core modules\n"
    "                       (selective recomputation, as Megatron-LM's\n"
    "                       --recompute-modules): core_attn, mlp, moe_act,\n"
    "                       layernorm, mla_up_proj, moe, shared_experts; each\n"
    "                       stage then picks none, these modules or full\n"
    "                       recomputation, whichever is fastest and fits\n"
    "                       (default: none or full); auto searches once more\n"
    "                       with each set the model has (mlp; moe_act,layernorm;\n"
    "                       mla_up_proj; all of them) and keeps the fastest plan,\n"
    "                       at that many times the planning time\n"
    "  --cross-entropy IMPL the loss's kernels: unfused (Megatron-LM's default),\n"
    "                       native (--cross-entropy-loss-fusion) or te (with\n"
    "                       --cross-entropy-fusion-impl te); a fused loss is\n"
    "                       Megatron-LM's own, so it does not combine with\n"
    "                       --target torchtitan or deepspeed; plan.json records it\n"
    "  --grad-fp32          keep and reduce the gradients in fp32, as Megatron-LM\n"
    "                       does under --bf16 without --grad-reduce-in-bf16\n"
    "                       (default: bf16 gradients, which the Megatron-LM\n"
    "                       export states with --grad-reduce-in-bf16); Megatron-LM\n"
    "                       only; plan.json records it\n"
    "  --max-experts-per-gpu E\n"
    "                       only plans whose expert GEMMs keep at most E experts\n"
    "                       on a GPU (with --target, only expert-parallel sizes\n"
    "                       that do): the cost model does not price the host time\n"
    "                       of many short expert GEMMs, and plans with many\n"
    "                       experts per GPU carry a caveat (docs/validation.md,\n"
    "                       findings 18 and 36)\n"
    "  --quiet              no progress on stderr\n";

/* --target: the fastest configuration of the launcher that fits, from the
 * sweep, as the plan. */
static int target_plan(const ap_graph *g, const ap_cluster *c, ap_launcher l,
                       const ap_plan_opts *o, ap_plan *out, char *line, size_t len)
{
    ap_sweep_opts so;
    ap_sweep_opts_of(o, l, &so);
    ap_sweep_result r;
    char err[AP_ERR_LEN];
    int rc = ap_sweep(g, c, &so, &r, err);
    if (rc) {
        fprintf(stderr, "autopar plan: %s\n", err);
        return rc;
    }
    if (!r.found) {
        if (r.valid)
            fprintf(stderr, "autopar plan: none of the %ld valid %s configurations fits; "
                    "the leanest needs %.1f GiB per GPU (more GPUs, a smaller batch or "
                    "another --target may help)\n", r.valid, ap_launcher_name(l),
                    r.least_memory / (1 << 30));
        else if (r.refused)
            fprintf(stderr, "autopar plan: %s has no valid configuration for this model "
                    "on %d GPUs: the %ld listed were refused, the first because %s\n",
                    ap_launcher_name(l), ap_cluster_gpus(c), r.refused, r.refusal);
        else
            fprintf(stderr, "autopar plan: %s has no valid configuration for this model "
                    "on %d GPUs: no layout of them lists one (the global batch of %g "
                    "sequences must divide into the data-parallel replicas' micro-batches, "
                    "tp divide the heads, and the layers split into the stages %s takes: "
                    "docs/compare.md); --global-batch or another GPU count may help\n",
                    ap_launcher_name(l), ap_cluster_gpus(c), so.global_batch > 0 ? so.global_batch : 512.0,
                    ap_launcher_name(l));
        return AP_EINPUT;
    }
    char spec[256];
    ap_megatron_format(&r.best, spec, sizeof spec);
    snprintf(line, len, "%s configuration %s: the fastest of %ld valid (%ld fit)",
             ap_launcher_name(l), spec, r.valid, r.fit);
    *out = r.plan;
    return AP_OK;
}

/* A --target plan is the launcher's own configuration, but the launcher's
 * flags may still not state the model (Gemma 2's post-norms under
 * Megatron-LM): say so now rather than at the export. */
static void note_unexportable(const ap_graph *g, const ap_plan *p, ap_launcher l)
{
    char err[AP_ERR_LEN], *out = NULL, *text = ap_plan_to_json(g, p);
    ap_plan_desc d;
    if (text && !ap_plan_desc_parse(text, strlen(text), "this plan", &d, err)) {
        if (ap_export(g, &d, l, &out, err))
            fprintf(stderr, "autopar plan: note: `autopar export --to %s` will refuse it: "
                    "%s\n", ap_launcher_key(l), err);
        free(out);
        ap_plan_desc_free(&d);
    }
    free(text);
}

/* The search's plan may shard an op as no launcher does (an embedding
 * split on its hidden size, for a step a fraction of a percent shorter):
 * say so with the plan, and what --target gives, rather than only at the
 * export. */
static void note_no_launcher(const ap_graph *g, const ap_plan *p,
                             const ap_plan_origin *origin, char *line, size_t len)
{
    static const ap_launcher all[] = {AP_LAUNCHER_MEGATRON, AP_LAUNCHER_TORCHTITAN,
                                      AP_LAUNCHER_DEEPSPEED};
    char err[AP_ERR_LEN], first[AP_ERR_LEN] = "", *out = NULL, *text = ap_plan_to_json(g, p);
    ap_plan_desc d;
    if (!text || ap_plan_desc_parse(text, strlen(text), "this plan", &d, err)) {
        free(text);
        return;
    }
    int runs = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && !runs; i++) {
        runs = !ap_export(g, &d, all[i], &out, err);
        if (!runs && !first[0])
            memcpy(first, err, sizeof first);
        free(out);
        out = NULL;
    }
    ap_plan_desc_free(&d);
    free(text);
    if (runs)
        return;
    /* The export's own advice is what the note ends with. */
    char *why = strncmp(first, "this plan: ", 11) ? first : first + 11;
    char *advice = strstr(why, " (plan with --target");
    if (advice)
        *advice = '\0';
    size_t n = strlen(line);
    n += snprintf(line + n, len - n, "%snote: no launcher runs this plan as it stands "
                  "(Megatron-LM: %s)", n ? "\n" : "", why);
    if (origin->sweep_step > 0 && n < len)
        snprintf(line + n, len - n, "; `--target megatron` plans the fastest configuration "
                 "it runs, %.4g s here (%+.2f%%)", origin->sweep_step,
                 100 * (origin->sweep_step / p->step_time - 1));
}

/* torchtitan's float8 converter is torchao's dynamic scaling, per tensor
 * by default (Float8Linear's recipe_name unset, job_config.py at v0.2.2)
 * or per row: it has no delayed scaling, Transformer Engine's default and
 * --fp8's. A plan for it is priced with tensorwise scaling, the recipe
 * its converter runs, and another recipe asked for is refused rather than
 * planned and then refused by the export. */
static int titan_fp8_recipe(ap_run_settings *run, int recipe_given)
{
    if (!run->fp8 || run->fp8_recipe == AP_FP8_TENSORWISE)
        return 0;
    if (!recipe_given) {
        run->fp8_recipe = AP_FP8_TENSORWISE;
        return 0;
    }
    fprintf(stderr, "autopar plan: --fp8-recipe %s: torchtitan's float8 converter "
            "(torchao) scales tensors dynamically, per tensor or per row, with neither "
            "delayed nor block scaling; give --fp8-recipe tensorwise (the default for "
            "--target torchtitan), or plan for Megatron-LM\n",
            ap_fp8_recipe_name(run->fp8_recipe));
    return 2;
}

/* Settings for experts change nothing on a model without them: accepted,
 * as Megatron-LM reads its MoE flags past on a dense model, but said. */
static void warn_dense(const ap_graph *g, const ap_plan_opts *o)
{
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].kind == AP_OP_DISPATCH)
            return;
    if (o->run.dispatcher != AP_DISPATCH_ALLTOALL)
        fprintf(stderr, "autopar plan: warning: %s has no experts: --dispatcher %s "
                "changes nothing\n", g->name, ap_dispatcher_name(o->run.dispatcher));
    if (o->max_local_experts)
        fprintf(stderr, "autopar plan: warning: %s has no experts: "
                "--max-experts-per-gpu changes nothing\n", g->name);
}

int ap_cmd_plan(int argc, char **argv)
{
    ap_cli_common cm;
    ap_cli_common_default(&cm);
    ap_plan_opts o;
    ap_plan_opts_default(&o);
    ap_cli_output out;
    ap_cli_output_default(&out);
    int targeted = 0, recipe_given = 0;
    ap_launcher target = AP_LAUNCHER_MEGATRON;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = ap_cli_common_output_arg(&cm, &out, "plan", a, v);
        if (used < 0)
            return 2;
        if (used > 0) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--no-pipeline")) {
            o.no_pipeline = 1;
        } else if (!strcmp(a, "--no-sweep")) {
            o.no_sweep = 1;
        } else if (!strcmp(a, "--json")) {
            out.emit = "json";
        } else if (!strcmp(a, "--quiet")) {
            o.progress = 0;
        } else if (!strcmp(a, "--fp8")) {
            o.run.fp8 = 1;
        } else if (!strcmp(a, "--tp-comm-overlap")) {
            o.run.tp_overlap = 1;
        } else if (!strcmp(a, "--grad-fp32")) {
            o.run.grad_fp32 = 1;
        } else if (!strcmp(a, "--bf16-layers") && v) {
            char tail;
            if (sscanf(v, "%d,%d%c", &cm.build.bf16_first, &cm.build.bf16_last, &tail) != 2 ||
                cm.build.bf16_first < 0 || cm.build.bf16_last < 0) {
                fprintf(stderr, "autopar plan: --bf16-layers: bad value \"%.64s\" (FIRST,LAST: "
                        "layer counts, e.g. 1,1)\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--fp8-recipe") && v) {
            if (ap_fp8_recipe_parse(v, &o.run.fp8_recipe)) {
                fprintf(stderr, "autopar plan: --fp8-recipe: bad value \"%.64s\" (delayed, "
                        "tensorwise, blockwise or mxfp8)\n", v);
                return 2;
            }
            recipe_given = 1;
            i++;
        } else if (!strcmp(a, "--dispatcher") && v) {
            if (ap_dispatcher_parse(v, &o.run.dispatcher) ||
                o.run.dispatcher == AP_DISPATCH_ALLGATHER) {
                fprintf(stderr, "autopar plan: --dispatcher: bad value \"%.64s\" (alltoall, "
                        "deepep or hybridep; the allgather dispatcher is priced for a "
                        "Megatron-LM configuration at tp 1, `autopar estimate`)\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--recompute-modules") && v && !strcmp(v, "auto")) {
            o.auto_modules = 1;
            i++;
        } else if (!strcmp(a, "--recompute-modules") && v) {
            unsigned mods;
            char err[AP_ERR_LEN];
            if (ap_rc_modules_parse(v, ",", &mods, err)) {
                fprintf(stderr, "autopar plan: --recompute-modules: %s (names joined by "
                        "',', as mlp,moe_act)\n", err);
                return 2;
            }
            o.run.recompute_modules = ap_rc_modules_setting(mods);
            i++;
        } else if (!strcmp(a, "--cross-entropy") && v) {
            if (ap_ce_impl_parse(v, &o.run.cross_entropy)) {
                fprintf(stderr, "autopar plan: --cross-entropy: bad value \"%.64s\" "
                        "(unfused, native or te)\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--target") && v) {
            char err[AP_ERR_LEN];
            if (ap_launcher_from_name(v, &target, err)) {
                fprintf(stderr, "autopar plan: --target: %s\n", err);
                return 2;
            }
            targeted = 1;
            i++;
        } else if (!strcmp(a, "--max-stages") && v) {
            if (ap_cli_int("plan", a, v, 1, 1 << 20, &o.max_stages))
                return 2;
            i++;
        } else if (!strcmp(a, "--max-experts-per-gpu") && v) {
            if (ap_cli_int("plan", a, v, 1, AP_CLI_MAX_EXPERTS_PER_GPU, &o.max_local_experts))
                return 2;
            i++;
        } else if (!strcmp(a, "--ilp-time-limit") && v) {
            if (ap_cli_double("plan", a, v, 1e-3, 3600, &o.ilp_time_limit))
                return 2;
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (ap_cli_int("plan", a, v, 1, 256, &o.threads))
                return 2;
            i++;
        } else if (!strcmp(a, "--ilp-gap") && v) {
            if (ap_cli_double("plan", a, v, 0, 1, &o.ilp_gap))
                return 2;
            i++;
        } else if (ap_cli_model_arg(&cm, "plan", a, usage_text)) {
            return 2;
        }
    }
    if (!cm.model)
        return ap_cli_usage_error("plan", "no model given", usage_text);
    if (ap_cli_output_check(&out, "plan"))
        return 2;
    if (o.run.fp8_recipe != AP_FP8_DELAYED && !o.run.fp8) {
        fprintf(stderr, "autopar plan: --fp8-recipe %s scales FP8 tensors: give --fp8 too\n",
                ap_fp8_recipe_name(o.run.fp8_recipe));
        return 2;
    }
    /* Megatron-Core keeps layers in bf16 only under FP8, and refuses them
     * with delayed scaling. */
    if ((cm.build.bf16_first || cm.build.bf16_last) &&
        (!o.run.fp8 || o.run.fp8_recipe == AP_FP8_DELAYED)) {
        fprintf(stderr, "autopar plan: --bf16-layers keeps layers out of FP8: give --fp8 "
                "and --fp8-recipe tensorwise, blockwise or mxfp8 (Megatron-Core refuses "
                "them with delayed scaling)\n");
        return 2;
    }
    ap_graph *g;
    ap_cluster c;
    int rc = ap_cli_setup(&cm, "plan", &g, &c);
    if (rc)
        return rc;
    warn_dense(g, &o);
    o.gpus = cm.gpus;
    o.gpus_per_node = c.gpus_per_node;
    o.global_batch = cm.global_batch;
    o.progress = !o.progress ? 0 : isatty(2) ? 1 : AP_PROGRESS_LOG;
    ap_plan plan;
    char err[AP_ERR_LEN], line[1536] = "";
    /* --emit LAUNCHER asks for a plan that launcher runs. */
    int emitted = !targeted && strcmp(out.emit, "table") && strcmp(out.emit, "json") &&
                  !ap_launcher_from_name(out.emit, &target, err);
    targeted |= emitted;
    int titan_fp8 = targeted && target == AP_LAUNCHER_TORCHTITAN && o.run.fp8;
    if (titan_fp8 && titan_fp8_recipe(&o.run, recipe_given)) {
        ap_graph_free(g);
        ap_cluster_free(&c);
        return 2;
    }
    /* What the launcher's flags cannot state refuses every plan: say so
     * before the search rather than after it. */
    if (emitted && ap_launcher_check_model(g, target, &o.run, g->name, err)) {
        fprintf(stderr, "autopar plan: --emit %s: %s\n", out.emit, err);
        ap_graph_free(g);
        ap_cluster_free(&c);
        return 2;
    }
    if (emitted && o.progress == 1)
        fprintf(stderr, "autopar plan: --emit %s: planning the configurations %s "
                "runs (as --target %s)\n", out.emit, ap_launcher_name(target), out.emit);
    if (targeted && (o.no_pipeline || o.max_stages)) {
        fprintf(stderr, "autopar plan: --target searches the launcher's own "
                "configurations; it does not combine with --no-pipeline or --max-stages\n");
        rc = 2;
    } else if (targeted) {
        rc = target_plan(g, &c, target, &o, &plan, line, sizeof line);
    } else {
        ap_plan_origin origin;
        if ((rc = ap_plan_best(g, &c, &o, &plan, &origin, NULL, err))) {
            fprintf(stderr, "autopar plan: %s\n", err);
        } else {
            ap_plan_origin_line(&origin, line, sizeof line);
            if (!origin.from_sweep)
                note_no_launcher(g, &plan, &origin, line, sizeof line);
        }
    }
    if (rc) {
        ap_graph_free(g);
        ap_cluster_free(&c);
        return rc;
    }
    ap_cli_warn_timeouts("plan", &plan, o.ilp_time_limit);
    if (titan_fp8 && !recipe_given)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", *line ? "\n" : "",
                 "FP8 with tensorwise scaling (--fp8-recipe tensorwise): torchtitan's "
                 "float8 converter has no delayed scaling");
    if (o.run.tp_overlap && !plan.run.tp_overlap)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%s%s", *line ? "\n" : "",
                 "--tp-comm-overlap left out: this plan has no sequence-parallel "
                 "collectives of tensor-parallel layers to overlap");
    rc = ap_cli_output_plan(&out, "plan", g, &plan, line, NULL);
    if (!rc && targeted && (!strcmp(out.emit, "table") || !strcmp(out.emit, "json")))
        note_unexportable(g, &plan, target);
    ap_plan_free(&plan);
    ap_graph_free(g);
    ap_cluster_free(&c);
    return rc;
}
