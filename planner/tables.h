/* tables.h -- private to planner/: a block's sharding ILP in index form.
 *
 * Ops that can only follow their producer (elementwise chains, norms,
 * residual adds) merge into it: a group of ops is one ILP node whose
 * choices are the leader's strategies, each follower taking the strategy
 * that fits its producer's layout best. Edges between groups keep one row
 * per producer layout class and one column per consumer class. */
#ifndef AP_PLANNER_TABLES_H
#define AP_PLANNER_TABLES_H

#include "planner/planner.h"

typedef struct {
    int nops, ngroups;
    int *group;            /* per op position: its group (ILP node) */
    int *ns;               /* per group: choices */
    ap_strategy **strat;   /* per op: its strategy under each choice of its group */
    double **cost, **mem;  /* per group and choice */
    int nedges;
    ap_ilp_edge *edges;
    double **ecost;
    double **emem;         /* per edge: memory by class pair, or NULL */
    int **cu, **cv;
} ap_tables;

/* Builds the tables for ops[] (a block, topological order) on x's mesh;
 * act_weight scales activation bytes in the memory row. AP_EINPUT when an
 * op has no valid strategy. Free with ap_tables_free() in every case. */
int ap_tables_build(const ap_price_ctx *x, const int *ops, int nops,
                    double act_weight, ap_tables *t, char *err);
void ap_tables_free(ap_tables *t);
/* The ILP over the groups (no memory row, no limits set). */
ap_ilp ap_tables_ilp(const ap_tables *t);
/* Every op's strategy for the groups' choices. */
void ap_tables_strategies(const ap_tables *t, const int *choice,
                          ap_strategy *out);
/* The least memory any choice reaches into *out. Memory depends on the
 * nodes alone unless an edge has a memory term (a sequence shard saved in
 * place of a gathered input); then it takes an ILP minimising memory, under
 * time_limit_s (<= 0: none). AP_EINTERNAL on a GLPK failure. */
int ap_tables_leanest(const ap_tables *t, double time_limit_s, double *out,
                      char *err);

/* Edges the block's ops read along (u, v block positions; tensor), wrap edges
 * from the layer before included; the caller frees *out. -1 when out of
 * memory. */
typedef struct {
    int u, v;
    int tensor;
} ap_block_edge;
int ap_block_edges(const ap_graph *g, const int *ops, int nops,
                   ap_block_edge **out);

#endif
