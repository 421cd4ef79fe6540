/* main.c -- dispatches `autopar COMMAND ...` to the command's function. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"graph", ap_cmd_graph, "summarise a model's operator graph"},
    {"plan", ap_cmd_plan, "search the fastest training plan that fits"},
    {"estimate", ap_cmd_estimate, "price a hand-tuned Megatron-LM configuration"},
    {"export", ap_cmd_export, "write a plan as Megatron-LM, torchtitan or DeepSpeed input"},
    {"compare", ap_cmd_compare, "a Megatron-LM configuration beside autopar's plan"},
    {"profile", ap_cmd_profile, "measure this node's GPUs and write a cluster file"},
    {"calibrate", ap_cmd_calibrate, "derive the cluster's GEMM rate from a step you measured"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: autopar COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`autopar COMMAND --help` describes a command.\n");
}

/* autopar's own flags also come as --flag=value, which the commands read
 * as two arguments; a value (--megatron-args "--x=1 ...") is never split.
 * A flag that needs a value and ends the line is refused here, for every
 * command alike. Returns the new argc, or -1 after printing the error; the
 * caller frees *out and *keep, which holds the flags' names split off (the
 * other strings are argv's). */
static int split_values(const char *cmd, int argc, char **argv, char ***out, char **keep)
{
    char **v = calloc((size_t)argc * 2 + 1, sizeof *v);
    size_t room = 1;
    for (int i = 0; i < argc; i++)
        room += strlen(argv[i]) + 1;
    char *buf = malloc(room);
    if (!v || !buf) {
        free(v);
        free(buf);
        fprintf(stderr, "autopar: out of memory\n");
        return -1;
    }
    int n = 0;
    char *at = buf;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : 0;
        if (eq && a[0] == '-' && len < 64) {
            memcpy(at, a, len);
            at[len] = 0;
            if (ap_cli_takes_value(at)) {
                v[n++] = at;
                v[n++] = (char *)eq + 1;
                at += len + 1;
                continue;
            }
        }
        v[n++] = argv[i];
        if (ap_cli_takes_value(a)) {
            if (i + 1 == argc) {
                fprintf(stderr, "autopar %s: %s needs a value\n", cmd, a);
                free(v);
                free(buf);
                return -1;
            }
            v[n++] = argv[++i];
        }
    }
    *out = v;
    *keep = buf;
    return n;
}

/* What went to stdout must all have been written: a plan or a launch
 * script cut short by a full disk, with exit status 0, would be run as
 * if whole. Returns the command's exit code, or 2 (the place the user sent
 * the output to cannot take it, as with -o) when stdout failed. cmd may be
 * NULL (autopar's own --help and --version). */
static int flush_stdout(const char *cmd, int rc)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    fprintf(stderr, "autopar%s%s: cannot write standard output: %s\n", cmd ? " " : "",
            cmd ? cmd : "", errno ? strerror(errno) : "write error");
    return rc ? rc : 2;
}

static int run(const command *c, int argc, char **argv)
{
    /* autopar-profile reads its own arguments. */
    if (c->run == ap_cmd_profile)
        return flush_stdout(c->name, c->run(argc, argv));
    char **v, *keep;
    int n = split_values(c->name, argc, argv, &v, &keep);
    if (n < 0)
        return 2;
    int rc = c->run(n, v);
    free(v);
    free(keep);
    return flush_stdout(c->name, rc);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return flush_stdout(NULL, 0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("autopar 0.1.0\n");
        return flush_stdout(NULL, 0);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return run(&commands[i], argc - 2, argv + 2);
    fprintf(stderr, "autopar: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
