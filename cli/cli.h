/* cli.h -- the subcommands of the autopar front end. Each takes the
 * arguments after its name and returns the process exit code: 0 success,
 * 1 internal failure, 2 bad input or usage. */
#ifndef AP_CLI_H
#define AP_CLI_H

int ap_cmd_graph(int argc, char **argv);
int ap_cmd_profile(int argc, char **argv);

int ap_cmd_plan(int argc, char **argv);
int ap_cmd_estimate(int argc, char **argv);
int ap_cmd_export(int argc, char **argv);
int ap_cmd_compare(int argc, char **argv);
int ap_cmd_calibrate(int argc, char **argv);

/* Shared by the planning commands (common.c). */
#include "costmodel/costmodel.h"
#include "graph/graph.h"
#include "planner/planner.h"

/* Bounds on what the planning commands take (docs/hardening.md): past
 * them a search would run for hours, or the answer would mean nothing. */
#define AP_CLI_MAX_GLOBAL_BATCH 65536 /* sequences per step */
#define AP_CLI_MAX_LAYERS 2048
#define AP_CLI_MAX_CLASSES 64 /* distinct layers; each is its own ILP */
#define AP_CLI_MAX_EXPERTS_PER_GPU (1 << 16) /* the most experts a model has */

typedef struct {
    const char *model;     /* NULL: the model is the one `script` states */
    const ap_megatron *script; /* --megatron-args, when it is the model */
    const char *cluster;
    /* 0 until --gpus, a torchrun line or a spec's dp gives them; then
     * ap_cli_setup takes a cluster file's own size, or 8 on a preset, and
     * sets them to the cluster's. */
    int gpus, gpus_per_node;
    int gpus_given; /* --gpus was on the command line */
    double global_batch;
    int batch_given; /* --global-batch was */
    ap_build_opts build;
    int dropout_given; /* --dropout on|off was on the command line */
    int flash_given;   /* --flash-attention on|off was on the command line */
    int mtp_given;     /* --mtp-layers N was */
} ap_cli_common;

void ap_cli_common_default(ap_cli_common *c);
/* Consumes a shared flag: returns how many arguments it used (0 when `a` is
 * not one of them), or -1 after printing an error. */
int ap_cli_common_arg(ap_cli_common *c, const char *cmd, const char *a,
                      const char *v);
/* Takes `a` as the model when it is the first argument that is not a flag;
 * anything else that reached here is refused with the usage. Returns 0, or
 * 2 after printing the error. */
int ap_cli_model_arg(ap_cli_common *c, const char *cmd, const char *a,
                     const char *usage);
/* Reads `--megatron SPEC` or `--megatron-args FLAGS` into *m and sets
 * *given: returns the arguments used (2), 0 when `a` is neither or has no
 * value, or the exit code negated after printing the parser's error, or
 * that a command takes one configuration where *given says one was read
 * already (parsing into the same *m would merge the two). */
int ap_cli_megatron_arg(const char *cmd, const char *a, const char *v,
                        ap_megatron *m, int *given);
/* Builds the model as --megatron-args describes it: at its --seq-length,
 * with dropout when its --hidden-dropout or --attention-dropout say so,
 * without flash attention when its attention flags say unfused; on the
 * GPUs a torchrun line among them launches, where --gpus and
 * --gpus-per-node leave them to it. Without
 * MODEL, the model is the one the flags state (ap_megatron_model), which
 * ap_cli_setup builds. Returns 0, or 2 after printing why (it contradicts
 * --seq, --dropout, --flash-attention, --gpus or --gpus-per-node). */
int ap_cli_megatron_build(ap_cli_common *cm, const ap_megatron *m, const char *cmd);
/* The GPUs a configuration is priced on, after ap_cli_megatron_build:
 * --gpus, else the torchrun line's, else tp x pp x dp x cp where the spec
 * gives dp, else left to the cluster (ap_cli_setup). Returns 0, or 2
 * after printing why (more GPUs than autopar plans for). */
int ap_cli_megatron_gpus(ap_cli_common *cm, const ap_megatron *m, const char *cmd);
/* The graph of the model a Megatron-LM command line states
 * (ap_megatron_model), built with `build`, whose seq it needs. Returns the
 * status, the message in err; the caller frees *g. */
int ap_cli_script_graph(const ap_megatron *m, const ap_build_opts *build, ap_graph **g,
                        char *err);
/* --flash-attention and --dropout on a loaded model: a Hugging Face or
 * --megatron-args model was built with them; a project-format model takes
 * --flash-attention on every attention op, and refuses --dropout, which
 * its ops state. Returns 0, or the exit code after printing why. */
int ap_cli_model_flags(ap_graph *g, const char *cmd, int flash_given, int flash,
                       int dropout_given);
/* The batch both sides of a plan train: the configuration's gbs (0 where
 * unset), else --global-batch (c->global_batch); the two must agree when
 * both are given. A Megatron-LM command line (args) without
 * --global-batch-size trains Megatron-LM's default, one micro-batch per
 * replica, unless --global-batch says otherwise. Returns 0, or 2 after
 * printing the disagreement. */
int ap_cli_settle_batch(const ap_cli_common *c, const char *cmd, int args,
                        ap_megatron *m);
/* Whether `flag` is one of autopar's own that takes a value (--gpus N),
 * whatever the command. */
int ap_cli_takes_value(const char *flag);
/* A usage error: `why` (may be NULL), the usage's synopsis (its lines up to
 * the first blank one) and where the rest is, on stderr; returns 2. */
int ap_cli_usage_error(const char *cmd, const char *why, const char *usage);
/* -o FILE and --trace FILE are checked before the work that fills them: a
 * path that cannot be written is refused naming the flag and the system's
 * reason, and nothing is left behind. Returns 0, or 2 after printing. */
int ap_cli_check_writable(const char *cmd, const char *flag, const char *path);
/* An argument the command does not take: for one starting with '-', an
 * unknown option, with the nearest option in `usage` as a suggestion (or
 * that the option takes no value, for --switch=value); else an unexpected
 * argument. Prints it and the usage, and returns 2. */
int ap_cli_unknown_arg(const char *cmd, const char *a, const char *usage);
int ap_cli_int(const char *cmd, const char *flag, const char *s, long lo,
               long hi, int *out);
int ap_cli_double(const char *cmd, const char *flag, const char *s, double lo,
                  double hi, double *out);
/* Loads the model and resolves the cluster; prints errors; returns the exit
 * code. Refuses models past the layer and class bounds. Without GPUs given
 * (cm->gpus 0) a cluster file keeps its own nodes and a preset is 8 GPUs;
 * either way cm->gpus is then the cluster's. On success the caller frees
 * *g and *c. */
int ap_cli_setup(ap_cli_common *cm, const char *cmd, ap_graph **g, ap_cluster *c);
int ap_cli_write_file(const char *path, const char *text);
/* Writes text and a newline to the -o (or --trace) file the user named;
 * one that cannot be written is the user's input, so it prints the path
 * and the system's reason and returns the input error's exit code, 2;
 * else 0. */
int ap_cli_write_out(const char *cmd, const char *path, const char *text);
/* Warns on stderr when the search left configurations out because their
 * ILP found nothing within the time limit. */
void ap_cli_warn_timeouts(const char *cmd, const ap_plan *p, double limit);
/* --trace FILE: the plan's timeline (ap_plan_trace_json); prints errors and
 * returns 0 or the exit code (2 for a file that cannot be written). */
int ap_cli_write_trace(const char *cmd, const ap_plan *p, const char *path);

/* --emit (cmd_export.c): checks the value (table, json or a launcher),
 * printing the error; and exports plan.json text to launcher `to` on
 * stdout. Both return the exit code. */
int ap_cli_check_emit(const char *cmd, const char *emit);
int ap_cli_emit_plan(const char *cmd, const ap_graph *g, const char *plan_json,
                     const char *to);

/* --emit FORMAT, -o FILE and --trace FILE, shared by plan and estimate
 * (output.c). ap_cli_output_arg consumes one like ap_cli_common_arg. */
typedef struct {
    const char *emit;  /* table, json or a launcher */
    const char *out;   /* plan.json path, or NULL */
    const char *trace; /* timeline path, or NULL */
} ap_cli_output;

void ap_cli_output_default(ap_cli_output *o);
int ap_cli_output_arg(ap_cli_output *o, const char *cmd, const char *a,
                      const char *v);
/* ap_cli_check_writable on -o and --trace; returns 0 or 2. */
int ap_cli_output_check(const ap_cli_output *o, const char *cmd);
/* The head of plan's and estimate's argument loops: a shared flag, else an
 * output flag; returns what those return (the arguments used, 0 when `a` is
 * neither, -1 after printing an error). */
int ap_cli_common_output_arg(ap_cli_common *c, ap_cli_output *o,
                             const char *cmd, const char *a, const char *v);
/* Writes -o and --trace, then prints what --emit asks for: the summary
 * (after `header` when it is not empty), plan.json, or a launcher's input;
 * `instead`, when not NULL, is printed in place of all that. Prints errors
 * and returns the exit code. */
int ap_cli_output_plan(const ap_cli_output *o, const char *cmd,
                       const ap_graph *g, const ap_plan *p, const char *header,
                       const char *instead);

/* --gpus and --gpus-per-node as estimate and compare read them
 * (ap_cli_common_arg), for their --help. */
#define AP_CLI_HELP_GPUS                                                          \
    "  --gpus N               GPUs in all. Without it: a torchrun line's in\n"     \
    "                         --megatron-args, else tp x pp x dp x cp where the\n" \
    "                         spec gives dp, else a cluster file's own nodes,\n"   \
    "                         else 8 on a preset; the report's first line says\n"  \
    "                         how many\n"                                           \
    "  --gpus-per-node G      GPUs per node (default: a torchrun line's\n"          \
    "                         --nproc-per-node or a deepspeed line's --num_gpus\n"  \
    "                         in --megatron-args, else the cluster's, 8 on a\n"     \
    "                         preset); more GPUs than a node's fill whole nodes\n"

#endif
