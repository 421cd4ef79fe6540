/* planner.h -- sharding strategies, plan pricing, and the two-level search.
 *
 * Intra-op: for one stage (a set of layers on a logical 2-D mesh of its GPUs)
 * every op picks a strategy: which dimension label each mesh axis splits. The
 * communication a strategy implies (partial sums to reduce, layouts to
 * convert between producer and consumer, gradients to synchronise) follows
 * from the labels; an ILP solved with GLPK picks the cheapest set.
 *
 * Inter-op: a dynamic program cuts the layers into pipeline stages, gives each
 * a submesh, and searches micro-batching, recomputation and ZeRO; the chosen
 * schedule is then simulated by costmodel/ for the final prediction.
 *
 * Ownership: ap_plan and everything inside it belongs to the caller, freed by
 * ap_plan_free(). Strings returned by *_to_json are the caller's to free().
 */
#ifndef AP_PLANNER_H
#define AP_PLANNER_H

#include "costmodel/costmodel.h"
#include "graph/graph.h"

/* A logical mesh over a stage's GPUs, ranks first..first+d0*d1-1 numbered
 * node-major; axis 1 groups are consecutive ranks, axis 0 groups are strided. */
typedef struct {
    int d[2];
    int first;     /* first global rank */
    int nodes[3];  /* nodes an axis group spans: axis 0, axis 1, both (mask 3) */
} ap_mesh;

int ap_mesh_init(ap_mesh *m, int d0, int d1, int first, int gpus_per_node);

/* A strategy: the label each axis splits (0 = none; the same label on both
 * axes splits it d0*d1 ways), and for an axis that splits a contracted label,
 * the output label the partial sum is reduce-scattered onto (0 = all-reduce). */
typedef struct {
    char axis[2];
    char rs[2];
} ap_strategy;

/* The context every price is taken in. */
typedef struct {
    const ap_graph *g;
    const ap_cluster *c;
    const ap_mesh *mesh;
    double batch;     /* samples in one micro-batch of the whole stage (all
                         data-parallel replicas together) */
    int nmicro;       /* micro-batches per step, for amortising gradient sync */
    ap_zero zero;
} ap_price_ctx;

/* Size of a label at the context's batch (batch and capacity labels scale). */
double ap_label_size(const ap_price_ctx *x, char label);

/* All valid strategies of op `i` on the mesh: labels that divide, by kind.
 * Fills out[] (at most max) and returns the count. */
int ap_strategies(const ap_price_ctx *x, int op, ap_strategy *out, int max);

/* The price of one op under one strategy, per micro-batch unless said. */
typedef struct {
    double fwd, bwd;       /* compute seconds */
    double fwd_comm, bwd_comm; /* the op's own collectives (partial sums) */
    double grad_sync;      /* per step: gradient reduction over replicas */
    double param_bytes;    /* model states per GPU (params+grads+optimizer) */
    double act_bytes;      /* saved for backward, per GPU, per micro-batch */
    double flops;          /* forward FLOPs per GPU (for reports) */
} ap_op_cost;

void ap_price_op(const ap_price_ctx *x, int op, const ap_strategy *s,
                 ap_op_cost *out);
/* Forward plus backward resharding time on the edge from the producer of
 * tensor `t` (under strategy ps) to consumer op `cons` (under cs). */
double ap_price_edge(const ap_price_ctx *x, int t, int prod,
                     const ap_strategy *ps, int cons, const ap_strategy *cs);
/* Writes "b@0 f@1 rs:s" style text for a strategy, for plans and reports. */
void ap_strategy_format(const ap_strategy *s, char *buf, size_t len);

/* The intra-op ILP in index form: node u picks one of nstrat[u] choices at
 * cost[u][i] and memory mem[u][i]; an edge (u, v) adds cost[i*nstrat[v] + j]
 * when u picks i and v picks j. Minimise the total subject to the memory row
 * (when mem_limit > 0). The quadratic edge term is linearised with one
 * continuous variable per pair and marginal constraints, which are exact
 * once the node choices are integral and keep the LP relaxation tight. */
typedef struct {
    int u, v;
    const double *cost;
} ap_ilp_edge;

typedef struct {
    int nnodes;
    const int *nstrat;
    const double *const *cost;
    const double *const *mem;
    int nedges;
    const ap_ilp_edge *edges;
    double mem_limit;
    double time_limit_s; /* <= 0: none */
    double gap;          /* relative MIP gap accepted, e.g. 1e-4 */
} ap_ilp;

typedef enum { AP_ILP_OPTIMAL, AP_ILP_FEASIBLE, AP_ILP_INFEASIBLE } ap_ilp_status;

typedef struct {
    ap_ilp_status status;
    double objective;
    double gap;   /* relative gap of a feasible (not proven optimal) answer */
    double memory;
    int rows, cols;
} ap_ilp_result;

/* Solves with GLPK; choice[u] receives node u's pick. A GLPK error becomes
 * AP_EINTERNAL with its message, never an abort. Thread-safe: each call keeps
 * its GLPK state to itself (Debian's GLPK environment is thread-local). */
int ap_ilp_solve(const ap_ilp *p, int *choice, ap_ilp_result *res, char *err);
/* For tests: make the next ap_ilp_solve in this thread hit a GLPK error. */
void ap_ilp_inject_fault(void);

#endif
