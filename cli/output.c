/* output.c -- what the commands that produce a plan (plan, estimate) write:
 * plan.json to -o, the timeline to --trace, and on stdout what --emit asks
 * for; and the flags that say so, read with the shared ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

void ap_cli_output_default(ap_cli_output *o)
{
    o->emit = "table";
    o->out = NULL;
    o->trace = NULL;
}

int ap_cli_output_arg(ap_cli_output *o, const char *cmd, const char *a,
                      const char *v)
{
    if (!v)
        return 0;
    if (!strcmp(a, "--emit")) {
        if (ap_cli_check_emit(cmd, v))
            return -1;
        o->emit = v;
    } else if (!strcmp(a, "-o")) {
        o->out = v;
    } else if (!strcmp(a, "--trace")) {
        o->trace = v;
    } else {
        return 0;
    }
    return 2;
}

int ap_cli_output_check(const ap_cli_output *o, const char *cmd)
{
    if (o->out && ap_cli_check_writable(cmd, "-o", o->out))
        return 2;
    if (o->trace && ap_cli_check_writable(cmd, "--trace", o->trace))
        return 2;
    return 0;
}

int ap_cli_common_output_arg(ap_cli_common *c, ap_cli_output *o,
                             const char *cmd, const char *a, const char *v)
{
    int used = ap_cli_common_arg(c, cmd, a, v);
    return used ? used : ap_cli_output_arg(o, cmd, a, v);
}

int ap_cli_output_plan(const ap_cli_output *o, const char *cmd,
                       const ap_graph *g, const ap_plan *p, const char *header,
                       const char *instead)
{
    char *text = ap_plan_to_json(g, p);
    int rc = 0;
    if (!text) {
        rc = 1;
    } else if (o->out && (rc = ap_cli_write_out(cmd, o->out, text))) {
        ;
    } else if (o->trace && (rc = ap_cli_write_trace(cmd, p, o->trace))) {
        ;
    } else if (instead) {
        printf("%s\n", instead);
    } else if (!strcmp(o->emit, "json")) {
        printf("%s\n", text);
    } else if (!strcmp(o->emit, "table")) {
        if (header && *header)
            printf("%s\n", header);
        ap_plan_print(g, p, stdout);
    } else {
        rc = ap_cli_emit_plan(cmd, g, text, o->emit);
    }
    free(text);
    return rc;
}
