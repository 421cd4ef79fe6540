/* fuzz_plan.c -- libFuzzer harness for `autopar export`: the plan.json
 * reader, and for a plan it accepts the export to each launcher against
 * examples/gpt-tiny.json (the model most corpus plans were made for, so
 * mutations reach the checks of stages, ops and degrees). Any input
 * either exports or is refused with a message, and frees cleanly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "planner/planner.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ap_graph *tiny;

/* scripts/fuzz.sh runs the fuzzers from the project's root; elsewhere the
 * reader alone is fuzzed. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    if (ap_graph_load("examples/gpt-tiny.json", &o, &tiny, err))
        fprintf(stderr, "fuzz_plan: %s; fuzzing the reader alone\n", err);
    return 0;
}

static void export_all(const ap_plan_desc *d)
{
    for (int to = 0; to < 3; to++) {
        char err[AP_ERR_LEN], *text = NULL;
        err[0] = 0;
        if (ap_export(tiny, d, (ap_launcher)to, &text, err) == AP_OK)
            free(text);
        else if (!err[0])
            abort(); /* a refusal must say why */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 20)
        return 0;
    ap_plan_desc d;
    char err[AP_ERR_LEN];
    err[0] = 0;
    int rc = ap_plan_desc_parse((const char *)data, size, "plan.json", &d, err);
    if (rc == AP_OK) {
        if (tiny)
            export_all(&d);
        ap_plan_desc_free(&d);
    } else if (!err[0]) {
        abort(); /* a refusal must say why */
    }
    return 0;
}
