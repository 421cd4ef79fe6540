/* main.c -- dispatches `autopar COMMAND ...` to the command's function. */
#include <stdio.h>
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

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("autopar 0.1.0\n");
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "autopar: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
