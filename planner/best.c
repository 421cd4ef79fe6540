/* best.c -- the planner's answer: the search's plan, or the fastest
 * Megatron-LM configuration where the sweep finds a faster one.
 *
 * The search (search.c) cuts stages on 2-D logical meshes and interleaves
 * only the cuts 1F1B chose; Megatron-LM runs stages that are data- and
 * context-parallel replicas of a tensor-parallel group, and interleaves
 * any split. The sweep prices those with the same code, so taking the
 * faster of the two answers is the search's space and Megatron-LM's
 * together, never slower than the fastest configuration a person tuning
 * Megatron-LM by hand could reach. */
#include <stdio.h>
#include <string.h>

#include "planner/planner.h"

static int sweep_applies(const ap_plan_opts *o)
{
    return !o->no_sweep && !o->no_pipeline && !o->max_stages;
}

int ap_plan_best(const ap_graph *g, const ap_cluster *c, const ap_plan_opts *o,
                 ap_plan *out, ap_plan_origin *origin, ap_sweep_result *sweep,
                 char *err)
{
    memset(origin, 0, sizeof *origin);
    ap_sweep_result sw;
    memset(&sw, 0, sizeof sw);
    int rc = ap_plan_search(g, c, o, out, err);
    if (!rc)
        origin->search_step = out->step_time;
    if (rc || !sweep_applies(o))
        goto done;
    ap_sweep_opts so;
    ap_sweep_opts_of(o, AP_LAUNCHER_MEGATRON, &so);
    if ((rc = ap_sweep(g, c, &so, &sw, err))) {
        ap_plan_free(out);
        goto done;
    }
    origin->swept = 1;
    origin->valid = sw.valid;
    origin->fit = sw.fit;
    if (sw.found) {
        origin->sweep_step = sw.plan.step_time;
        origin->best = sw.best;
    }
    if (!sw.found || sw.plan.step_time >= out->step_time)
        goto done;
    /* The winner priced again, so that the sweep's result stays whole for
     * the caller: the same configuration gives the same plan. */
    int timeouts = out->ilp_timeouts;
    ap_plan_free(out);
    rc = ap_megatron_plan(g, c, &sw.best, out, err);
    origin->from_sweep = !rc;
    /* The search's unsolved configurations still say that a larger ILP
     * time limit may find a faster plan. */
    if (!rc)
        out->ilp_timeouts = timeouts;
done:
    if (sweep)
        *sweep = sw;
    else
        ap_sweep_result_free(&sw);
    return rc;
}

void ap_plan_origin_line(const ap_plan_origin *o, char *buf, size_t len)
{
    char spec[256];
    *buf = 0;
    if (!o->swept)
        return;
    ap_megatron_format(&o->best, spec, sizeof spec);
    if (o->from_sweep)
        snprintf(buf, len, "Megatron-LM configuration %s: the fastest of %ld valid (%ld fit), "
                 "faster than the search's plan (%.4g s)", spec, o->valid, o->fit,
                 o->search_step);
    else if (o->sweep_step > 0)
        snprintf(buf, len, "the search's plan: no slower than the fastest of %ld valid "
                 "Megatron-LM configurations (%s, %.4g s)", o->valid, spec, o->sweep_step);
    else
        snprintf(buf, len, "the search's plan: none of %ld valid Megatron-LM "
                 "configurations fits", o->valid);
}
