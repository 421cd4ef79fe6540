/* candidate.h -- private to planner/: one configuration of the outer search
 * (stage count, logical mesh, micro-batch), solved into a plan. */
#ifndef AP_PLANNER_CANDIDATE_H
#define AP_PLANNER_CANDIDATE_H

#include "planner/parts.h"
#include "planner/planner.h"

typedef struct {
    int p;          /* stages, each on gpus / p GPUs */
    int d0, d1;     /* the stages' logical mesh */
    double mb;      /* sequences per micro-batch, all replicas */
    int index;      /* enumeration order: ties go to the lower */
    double bound;   /* no plan of the candidate is faster */
} ap_candidate;

/* What every candidate of one search shares. */
typedef struct {
    const ap_graph *g;
    const ap_cluster *c;
    const ap_parts *m;
    const ap_plan_opts *o;
    int *cnt;       /* [nclasses][nlayers + 1]: layers of each class before l */
    double limit;   /* usable bytes per GPU */
} ap_search_ctx;

int ap_search_ctx_init(ap_search_ctx *s, const ap_graph *g, const ap_cluster *c,
                       const ap_parts *m, const ap_plan_opts *o);
void ap_search_ctx_free(ap_search_ctx *s);

/* Fills k->bound from prices alone (no ILP). */
void ap_candidate_bound(const ap_search_ctx *s, ap_candidate *k);

/* Why a candidate has no plan that fits: the stage of an even split that
 * misses the memory limit by most at its leanest. */
typedef struct {
    double bytes;   /* over the limit; INFINITY: the mesh admits no strategy;
                       negative: given up, it cannot beat the best plan */
    double need;    /* bytes per GPU that stage needs */
    int stage, nstages, first_layer, end_layer, ngpus;
    int timed_out;  /* an ILP found nothing within the time limit: unpriced */
} ap_shortfall;

/* Solves the candidate. When a plan fits, *have = 1 and *plan is the
 * caller's to free; otherwise *sf says why not. Candidates that provably
 * cannot be faster than `beat` seconds are given up early. */
int ap_candidate_solve(const ap_search_ctx *s, const ap_candidate *k,
                       double beat, ap_plan *plan, int *have, ap_shortfall *sf,
                       char *err);

#endif
