/* cmd_compare.c -- `autopar compare`: a hand-tuned Megatron-LM configuration
 * beside autopar's plan (and, with --sweep, beside the best configuration a
 * person could have found by hand), all priced by the same cost model. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "planner/planner.h"

static const char usage_text[] =
    "usage: autopar compare MODEL --gpus N (--megatron SPEC | --megatron-args \"FLAGS\")\n"
    "       (MODEL may be left out where --megatron-args states the model, as a\n"
    "       Megatron-LM script does: docs/megatron.md, \"A script without MODEL\")\n"
    "                       [--sweep] [--no-sweep] [--json] [--gpus-per-node G]\n"
    "                       [--cluster NAME|FILE]\n"
    "                       [--global-batch B] [--seq N] [--mtp-layers N]\n"
    "                       [--flash-attention on|off] [--quiet]\n"
    "                       [--dropout on|off] [--max-experts-per-gpu E] [--threads N]\n"
    "\n"
    "Puts your Megatron-LM configuration and autopar's plan side by side under\n"
    "the same cost model: step time, tokens/s, MFU, TFLOP/s and memory per GPU,\n"
    "bubble, communication by kind, and the speedup.\n"
    "\n"
    AP_CLI_HELP_GPUS
    "  --cluster NAME|FILE    a preset (a100-80g, a100-40g, h100-sxm, h200, b200,\n"
    "                         h800) or a cluster file from `autopar profile`\n"
    "                         (default h100-sxm); all columns are priced on it\n"
    "  --megatron SPEC        tp=8,pp=4,dp=4,cp=1,ep=1,vpp=2,mbs=1,gbs=512,sp=1,\n"
    "                         recompute=none|selective|full,zero=0..3,\n"
    "                         overlap_grad=0|1,overlap_param=0|1,first=N,last=N,\n"
    "                         fp8=0|1,\n"
    "                         account_embedding=0|1,account_loss=0|1,\n"
    "                         tp_overlap=0|1,fp8_param_gather=0|1,\n"
    "                         cross_entropy=unfused|native|te,\n"
    "                         recompute_method=uniform|block,recompute_layers=N,\n"
    "                         grad_fp32=0|1\n"
    "                         (see `autopar estimate --help`); fp8_param_gather=1\n"
    "                         and the recompute method price your configuration\n"
    "                         alone; with fp8=1 autopar's plan and\n"
    "                         the sweep are priced in FP8 too, with tp_overlap=1\n"
    "                         with TP communication overlapped with GEMMs (where\n"
    "                         sp is on), and with your cross_entropy's loss and\n"
    "                         your gradients' dtype (grad_fp32, or --bf16 without\n"
    "                         --grad-reduce-in-bf16 in --megatron-args) and\n"
    "                         optimizer states (main_params, exp_avg, exp_avg_sq);\n"
    "                         the sweep\n"
    "                         also with your moe_a2a_overlap and cp_comm wherever\n"
    "                         Megatron-LM runs them (autopar's search prices\n"
    "                         neither; its plan is the faster of the search's and\n"
    "                         the sweep's)\n"
    "  --megatron-args FLAGS  the real flags (see `autopar estimate --help`; flags\n"
    "                         that change the step in ways autopar does not price\n"
    "                         are refused, docs/megatron.md)\n"
    "  --sweep                show the fastest valid Megatron configuration that\n"
    "                         fits in a column of its own\n"
    "  --no-sweep             autopar's plan is its search's alone; without it\n"
    "                         the plan is the faster of the search's and the\n"
    "                         fastest Megatron configuration (`autopar plan\n"
    "                         --help`)\n"
    "  --global-batch B       sequences per step, when the configuration has no gbs\n"
    "                         (without it, --megatron-args with no\n"
    "                         --global-batch-size trains Megatron-LM's mbs*dp)\n"
    "  --seq N, --flash-attention on|off, --dropout on|off, --mtp-layers N\n"
    "                         how a Hugging Face config is built, for every\n"
    "                         column: tokens per sequence (default the config's\n"
    "                         context length, at most 4096), a fused attention\n"
    "                         kernel (default on), dropout after attention and\n"
    "                         MLP (default off), multi-token-prediction modules\n"
    "                         (default none; --megatron-args' --mtp-num-layers\n"
    "                         sets it); --seq and --flash-attention also set a\n"
    "                         project-format model's seq dimension and attention\n"
    "                         ops, whose dropout is its own (--dropout is\n"
    "                         refused)\n"
    "  --json                 print the comparison as JSON\n"
    "  --max-experts-per-gpu E\n"
    "                         autopar's plan and the sweep keep at most E experts\n"
    "                         on a GPU (`autopar plan --help`); yours is priced\n"
    "                         as given\n"
    "  --threads N            worker threads of the search and the sweep (default:\n"
    "                         the machine's cores); the result does not depend on it\n"
    "  --quiet                no progress on stderr\n";

typedef struct {
    const char *title;
    const ap_plan *plan;
    char config[256];
} column;

static double gib(double b) { return b / (1024.0 * 1024 * 1024); }

static void row(FILE *f, const char *name, const column *cols, int n,
                double (*get)(const ap_plan *), const char *fmt)
{
    fprintf(f, "  %-28s", name);
    for (int i = 0; i < n; i++) {
        char cell[64];
        snprintf(cell, sizeof cell, fmt, get(cols[i].plan));
        fprintf(f, "%18s", cell);
    }
    fputc('\n', f);
}

static double step(const ap_plan *p) { return p->step_time; }
static double tokens(const ap_plan *p) { return p->tokens_per_s; }
static double mfu(const ap_plan *p) { return 100 * p->mfu; }
static double tflops(const ap_plan *p) { return p->model_tflops_per_gpu; }
static double memory(const ap_plan *p) { return gib(p->max_mem_bytes); }
static double bubble(const ap_plan *p) { return 100 * p->bubble; }
static double compute(const ap_plan *p) { return p->t_compute; }
static double comm(const ap_plan *p) { return p->t_comm; }
static double tp(const ap_plan *p) { return p->t_kinds.tp; }
static double reshard(const ap_plan *p) { return p->t_kinds.reshard; }
static double expert(const ap_plan *p) { return p->t_kinds.expert; }
static double context(const ap_plan *p) { return p->t_kinds.context; }
static double gather(const ap_plan *p) { return p->t_kinds.param_gather; }
static double greduce(const ap_plan *p) { return p->t_kinds.grad_reduce; }
static double amax(const ap_plan *p) { return p->t_kinds.amax; }
static double p2p(const ap_plan *p) { return p->t_p2p; }
static double sync_exposed(const ap_plan *p) { return p->t_grad_sync; }
static double sync_total(const ap_plan *p) { return p->t_grad_sync_total; }
static double optimizer(const ap_plan *p) { return p->t_optimizer; }
static double experts(const ap_plan *p) { return ap_plan_local_experts(p, NULL); }

static void describe_plan(const ap_graph *g, const ap_plan *p, char *buf, size_t len)
{
    char micro[160];
    ap_plan_format_micro_batches(g, p, micro, sizeof micro);
    int n = snprintf(buf, len, "%d stage%s, mesh", p->nstages, p->nstages > 1 ? "s" : "");
    for (int i = 0; i < p->nstages && n > 0 && (size_t)n < len; i++) {
        const ap_stage *st = &p->stages[i];
        if (i > 0 && st->mesh.d[0] == p->stages[i - 1].mesh.d[0] &&
            st->mesh.d[1] == p->stages[i - 1].mesh.d[1])
            continue;
        n += snprintf(buf + n, len - (size_t)n, " %dx%d", st->mesh.d[0], st->mesh.d[1]);
    }
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", %s, %s, ZeRO-%d",
                 micro, p->schedule == AP_SCHED_INTERLEAVED
                 ? "interleaved 1F1B" : "1F1B", (int)ap_plan_zero_runs(p));
}

static void print_table(const ap_graph *g, const column *cols, int n,
                        const ap_sweep_result *sw, FILE *f)
{
    const ap_plan *p = cols[0].plan;
    fprintf(f, "compare %s on %d GPU%s (%s, %d per node), %.0f sequences x %d tokens per "
            "step\n\n", g->name, p->gpus, p->gpus == 1 ? "" : "s", p->cluster,
            p->gpus_per_node, p->global_batch, p->seq);
    fprintf(f, "  %-28s", "");
    for (int i = 0; i < n; i++)
        fprintf(f, "%18s", cols[i].title);
    fputc('\n', f);
    row(f, "step time (s)", cols, n, step, "%.4f");
    row(f, "tokens/s", cols, n, tokens, "%.0f");
    row(f, "MFU (%)", cols, n, mfu, "%.1f");
    row(f, "TFLOP/s per GPU", cols, n, tflops, "%.1f");
    row(f, "memory per GPU (GiB)", cols, n, memory, "%.1f");
    row(f, "pipeline bubble (%)", cols, n, bubble, "%.1f");
    row(f, "compute (s)", cols, n, compute, "%.4f");
    row(f, "communication (s)", cols, n, comm, "%.4f");
    row(f, "  tensor-parallel", cols, n, tp, "%.4f");
    row(f, "  resharding", cols, n, reshard, "%.4f");
    row(f, "  expert all-to-all", cols, n, expert, "%.4f");
    row(f, "  context-parallel", cols, n, context, "%.4f");
    row(f, "  ZeRO-3 gathers", cols, n, gather, "%.4f");
    row(f, "  ZeRO-2/3 grad reduce", cols, n, greduce, "%.4f");
    row(f, "  FP8 amax all-reduce", cols, n, amax, "%.4f");
    row(f, "pipeline send/recv (s)", cols, n, p2p, "%.4f");
    row(f, "gradient sync, exposed (s)", cols, n, sync_exposed, "%.4f");
    row(f, "gradient sync, total (s)", cols, n, sync_total, "%.4f");
    row(f, "optimizer (s)", cols, n, optimizer, "%.4f");
    if (experts(p) > 0)
        row(f, "experts per GPU", cols, n, experts, "%.0f");
    fprintf(f, "  %-28s", "speedup over yours");
    for (int i = 0; i < n; i++) {
        char cell[32];
        snprintf(cell, sizeof cell, "%.2fx", p->step_time / cols[i].plan->step_time);
        fprintf(f, "%18s", cell);
    }
    fprintf(f, "\n\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "  %s: %s", cols[i].title, cols[i].config);
        if (cols[i].plan->max_mem_bytes > cols[i].plan->hbm_limit)
            fprintf(f, "  (does not fit: %.1f GiB of %.1f GiB usable)",
                    gib(cols[i].plan->max_mem_bytes), gib(cols[i].plan->hbm_limit));
        fputc('\n', f);
    }
    /* The sweep's wall time is on stderr (run): what is printed here is
     * the same bytes every run. */
    if (sw)
        fprintf(f, "  the sweep priced %ld valid Megatron configurations (%ld fit)\n",
                sw->valid, sw->fit);
    ap_plan_print_basis(p, f);
    for (int i = 0; i < n; i++) {
        char caveat[1024];
        for (int k = 0; ap_plan_caveat(cols[i].plan, k, caveat, sizeof caveat); k++)
            fprintf(f, "  caveat (%s): %s\n", cols[i].title, caveat);
    }
}

static cJSON *column_json(const column *col, const ap_plan *yours)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "configuration", col->config);
    cJSON_AddNumberToObject(o, "speedup", yours->step_time / col->plan->step_time);
    char *pred = ap_plan_prediction_to_json(col->plan);
    cJSON *pr = pred ? cJSON_Parse(pred) : NULL;
    free(pred);
    if (pr)
        cJSON_AddItemToObject(o, "prediction", pr);
    return o;
}

static char *compare_json(const ap_graph *g, const column *cols, int n,
                          const ap_sweep_result *sw)
{
    static const char *const keys[] = {"yours", "autopar", "sweep"};
    const ap_plan *p = cols[0].plan;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", g->name);
    cJSON_AddStringToObject(o, "cluster", p->cluster);
    cJSON_AddNumberToObject(o, "gpus", p->gpus);
    cJSON_AddNumberToObject(o, "global_batch", p->global_batch);
    cJSON_AddNumberToObject(o, "seq_length", p->seq);
    for (int i = 0; i < n; i++)
        cJSON_AddItemToObject(o, keys[i], column_json(&cols[i], p));
    if (sw) {
        cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "sweep");
        cJSON_AddNumberToObject(s, "candidates", (double)sw->candidates);
        cJSON_AddNumberToObject(s, "valid", (double)sw->valid);
        cJSON_AddNumberToObject(s, "fit", (double)sw->fit);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

typedef struct {
    ap_cli_common cm;
    ap_megatron m;
    int have_megatron, args, sweep, json, quiet, max_local_experts;
    int threads; /* --threads N; 0: the machine's cores */
    int no_plan_sweep; /* --no-sweep: autopar's plan is the search's alone */
} options;

static int parse(int argc, char **argv, options *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = ap_cli_common_arg(&o->cm, "compare", a, v);
        if (used < 0)
            return 2;
        if (used > 0) {
            i += used - 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return -1;
        } else if (!strcmp(a, "--sweep")) {
            o->sweep = 1;
        } else if (!strcmp(a, "--no-sweep")) {
            o->no_plan_sweep = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(a, "--max-experts-per-gpu") && v) {
            if (ap_cli_int("compare", a, v, 1, AP_CLI_MAX_EXPERTS_PER_GPU,
                           &o->max_local_experts))
                return 2;
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (ap_cli_int("compare", a, v, 1, 256, &o->threads))
                return 2;
            i++;
        } else if (!strcmp(a, "--megatron") || !strcmp(a, "--megatron-args")) {
            if (!v) {
                fprintf(stderr, "autopar compare: %s needs a value\n", a);
                return 2;
            }
            int rc = ap_cli_megatron_arg("compare", a, v, &o->m, &o->have_megatron);
            if (rc < 0)
                return -rc;
            o->args = !strcmp(a, "--megatron-args");
            i++;
        } else if (ap_cli_model_arg(&o->cm, "compare", a, usage_text)) {
            return 2;
        }
    }
    if (!o->have_megatron || (!o->cm.model && !o->args)) {
        return ap_cli_usage_error("compare", o->cm.model
                                  ? "a configuration (--megatron or --megatron-args) is required"
                                  : "a model is required", usage_text);
    }
    return 0;
}

static int run(const options *o, const ap_graph *g, const ap_cluster *c)
{
    char err[AP_ERR_LEN];
    int progress = o->quiet ? 0 : isatty(2) ? 1 : AP_PROGRESS_LOG;
    column cols[3] = {{"megatron (yours)", NULL, ""}, {"autopar", NULL, ""},
                      {"megatron (sweep)", NULL, ""}};
    ap_plan yours, ours;
    ap_sweep_result sw = {0};
    int rc = ap_megatron_plan(g, c, &o->m, &yours, err);
    if (rc) {
        fprintf(stderr, "autopar compare: your configuration: %s\n", err);
        return rc;
    }
    ap_megatron shown = o->m;
    if (!shown.dp)
        shown.dp = yours.gpus / (shown.tp * shown.pp * shown.cp);
    shown.vpp = yours.vchunks;
    shown.gbs = yours.global_batch;
    ap_megatron_format(&shown, cols[0].config, sizeof cols[0].config);
    ap_plan_opts po;
    ap_plan_opts_default(&po);
    po.gpus = ap_cluster_gpus(c);
    po.gpus_per_node = c->gpus_per_node;
    po.global_batch = yours.global_batch;
    po.progress = progress;
    po.run = o->m.run; /* all sides in the configuration's precision */
    po.max_local_experts = o->max_local_experts;
    po.threads = o->threads;
    /* One sweep serves both: autopar's plan is the faster of the search's
     * and the sweep's (ap_plan_best), and --sweep shows the sweep's own.
     * Under --no-sweep the plan is the search's, and --sweep's column
     * still gets its sweep. */
    ap_plan_origin origin = {0};
    if (!o->no_plan_sweep) {
        rc = ap_plan_best(g, c, &po, &ours, &origin, &sw, err);
    } else if (!(rc = ap_plan_search(g, c, &po, &ours, err)) && o->sweep) {
        ap_sweep_opts so;
        ap_sweep_opts_of(&po, AP_LAUNCHER_MEGATRON, &so);
        if ((rc = ap_sweep(g, c, &so, &sw, err)))
            ap_plan_free(&ours);
    }
    if (rc) {
        fprintf(stderr, "autopar compare: autopar's plan: %s\n", err);
        ap_sweep_result_free(&sw);
        ap_plan_free(&yours);
        return rc;
    }
    ap_cli_warn_timeouts("compare", &ours, po.ilp_time_limit);
    if (origin.from_sweep)
        ap_megatron_format(&origin.best, cols[1].config, sizeof cols[1].config);
    else
        describe_plan(g, &ours, cols[1].config, sizeof cols[1].config);
    cols[0].plan = &yours;
    cols[1].plan = &ours;
    int n = 2;
    if (o->sweep) {
        if (!sw.found)
            fprintf(stderr, "autopar compare: no Megatron configuration fits; the leanest "
                    "needs %.1f GiB per GPU\n", gib(sw.least_memory));
        else {
            ap_megatron_format(&sw.best, cols[2].config, sizeof cols[2].config);
            cols[2].plan = &sw.plan;
            n = 3;
        }
    }
    if (o->sweep && sw.found && progress)
        fprintf(stderr, "autopar compare: the sweep took %.2f s\n", sw.seconds);
    if (!rc) {
        if (o->json) {
            char *text = compare_json(g, cols, n, o->sweep && sw.found ? &sw : NULL);
            if (text)
                printf("%s\n", text);
            rc = text ? 0 : 1;
            free(text);
        } else {
            print_table(g, cols, n, o->sweep && sw.found ? &sw : NULL, stdout);
        }
    }
    ap_sweep_result_free(&sw);
    ap_plan_free(&ours);
    ap_plan_free(&yours);
    return rc;
}

int ap_cmd_compare(int argc, char **argv)
{
    options o;
    memset(&o, 0, sizeof o);
    ap_cli_common_default(&o.cm);
    ap_megatron_default(&o.m);
    o.m.gbs = 0; /* unset: --global-batch decides */
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = ap_cli_settle_batch(&o.cm, "compare", o.args, &o.m)) ||
        (rc = ap_cli_megatron_build(&o.cm, &o.m, "compare")) ||
        (rc = ap_cli_megatron_gpus(&o.cm, &o.m, "compare")))
        return rc;
    ap_graph *g;
    ap_cluster c;
    if ((rc = ap_cli_setup(&o.cm, "compare", &g, &c)))
        return rc;
    rc = run(&o, g, &c);
    ap_graph_free(g);
    ap_cluster_free(&c);
    return rc;
}
