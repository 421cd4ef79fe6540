/* The sharding ILP: GLPK's answer is the true optimum of the quadratic
 * assignment it encodes, memory rows bind, and GLPK errors come back as
 * errors. */
#include "test.h"

#include "planner/planner.h"

#define MAXN 8
#define MAXS 4

typedef struct {
    int n, ns[MAXN];
    double cost[MAXN][MAXS], mem[MAXN][MAXS];
    int ne;
    ap_ilp_edge edges[MAXN * 2];
    double ecost[MAXN * 2][MAXS * MAXS];
    int cu[MAXN * 2][MAXS], cv[MAXN * 2][MAXS];
    double ccost[MAXN * 2][MAXS * MAXS];
} problem;

static unsigned rng = 12345;
static double uniform(void)
{
    rng = rng * 1103515245u + 12345u;
    return ((rng >> 8) & 0xffff) / 65536.0;
}

static void random_problem(problem *p)
{
    memset(p, 0, sizeof *p);
    p->n = 2 + (int)(uniform() * (MAXN - 1));
    for (int u = 0; u < p->n; u++) {
        p->ns[u] = 1 + (int)(uniform() * MAXS);
        for (int i = 0; i < p->ns[u]; i++) {
            p->cost[u][i] = uniform() * 10;
            p->mem[u][i] = uniform() * 5;
        }
    }
    /* A DAG: each node after the first reads one or two earlier nodes. */
    for (int v = 1; v < p->n; v++) {
        int reads = 1 + (uniform() < 0.4);
        for (int r = 0; r < reads; r++) {
            int u = (int)(uniform() * v);
            ap_ilp_edge *e = &p->edges[p->ne];
            for (int k = 0; k < p->ns[u] * p->ns[v]; k++)
                p->ecost[p->ne][k] = uniform() < 0.3 ? 0 : uniform() * 8;
            e->u = u;
            e->v = v;
            e->cost = p->ecost[p->ne];
            p->ne++;
        }
    }
}

/* Gives every edge class maps: its cost then depends on the class of each
 * end's choice alone, and the full matrix is expanded from the class one. */
static void group_into_classes(problem *p)
{
    for (int e = 0; e < p->ne; e++) {
        ap_ilp_edge *ed = &p->edges[e];
        int nu = p->ns[ed->u], nv = p->ns[ed->v];
        ed->ncu = 1 + (int)(uniform() * nu);
        ed->ncv = 1 + (int)(uniform() * nv);
        for (int i = 0; i < nu; i++)
            p->cu[e][i] = i < ed->ncu ? i : (int)(uniform() * ed->ncu);
        for (int j = 0; j < nv; j++)
            p->cv[e][j] = j < ed->ncv ? j : (int)(uniform() * ed->ncv);
        for (int k = 0; k < ed->ncu * ed->ncv; k++)
            p->ccost[e][k] = uniform() < 0.3 ? 0 : uniform() * 8;
        for (int i = 0; i < nu; i++)
            for (int j = 0; j < nv; j++)
                p->ecost[e][i * nv + j] =
                    p->ccost[e][p->cu[e][i] * ed->ncv + p->cv[e][j]];
        ed->cu = p->cu[e];
        ed->cv = p->cv[e];
        ed->cost = p->ccost[e];
    }
}

static double evaluate(const problem *p, const int *c, double *mem)
{
    double t = 0;
    *mem = 0;
    for (int u = 0; u < p->n; u++) {
        t += p->cost[u][c[u]];
        *mem += p->mem[u][c[u]];
    }
    for (int e = 0; e < p->ne; e++)
        t += p->edges[e].cost[c[p->edges[e].u] * p->ns[p->edges[e].v] + c[p->edges[e].v]];
    return t;
}

/* Enumerates every assignment; returns the best objective within the limit,
 * or INFINITY when none fits. */
static double brute_force(const problem *p, double limit)
{
    int c[MAXN] = {0};
    double best = INFINITY;
    for (;;) {
        double mem, t = evaluate(p, c, &mem);
        if ((limit <= 0 || mem <= limit + 1e-9) && t < best)
            best = t;
        int u = 0;
        while (u < p->n && ++c[u] == p->ns[u])
            c[u++] = 0;
        if (u == p->n)
            return best;
    }
}

static void fill(const problem *p, ap_ilp *ilp, const double **cost,
                 const double **mem, double limit)
{
    for (int u = 0; u < p->n; u++) {
        cost[u] = p->cost[u];
        mem[u] = p->mem[u];
    }
    *ilp = (ap_ilp){.nnodes = p->n, .nstrat = p->ns, .cost = cost, .mem = mem,
                    .nedges = p->ne, .edges = p->edges, .mem_limit = limit,
                    .gap = 1e-9};
}

static void optimum_equals_brute_force_on_random_graphs(void)
{
    for (int trial = 0; trial < 200; trial++) {
        problem p;
        random_problem(&p);
        double limit = trial % 2 ? 0 : p.n * 2.5;
        const double *cost[MAXN], *mem[MAXN];
        ap_ilp ilp;
        fill(&p, &ilp, cost, mem, limit);
        int choice[MAXN];
        ap_ilp_result r;
        char err[AP_ERR_LEN];
        REQUIRE_OK(ap_ilp_solve(&ilp, choice, &r, err), err);
        double best = brute_force(&p, limit);
        if (isinf(best)) {
            CHECK(r.status == AP_ILP_INFEASIBLE);
            continue;
        }
        CHECK(r.status == AP_ILP_OPTIMAL);
        double m, got = evaluate(&p, choice, &m);
        CHECK_NEAR(got, best, 1e-7);
        CHECK_NEAR(r.objective, best, 1e-7);
        if (limit > 0)
            CHECK(m <= limit + 1e-9);
    }
}

static void edge_classes_keep_the_optimum(void)
{
    for (int trial = 0; trial < 200; trial++) {
        problem p;
        random_problem(&p);
        group_into_classes(&p);
        double limit = trial % 2 ? 0 : p.n * 2.5;
        const double *cost[MAXN], *mem[MAXN];
        ap_ilp ilp;
        fill(&p, &ilp, cost, mem, limit);
        int choice[MAXN];
        ap_ilp_result r;
        char err[AP_ERR_LEN];
        REQUIRE_OK(ap_ilp_solve(&ilp, choice, &r, err), err);
        /* The brute force prices the expanded matrices. */
        problem full = p;
        for (int e = 0; e < full.ne; e++) {
            full.edges[e].cu = full.edges[e].cv = NULL;
            full.edges[e].cost = full.ecost[e];
        }
        double best = brute_force(&full, limit);
        if (isinf(best)) {
            CHECK(r.status == AP_ILP_INFEASIBLE);
            continue;
        }
        CHECK(r.status == AP_ILP_OPTIMAL);
        double m, got = evaluate(&full, choice, &m);
        CHECK_NEAR(got, best, 1e-7);
        CHECK_NEAR(r.objective, best, 1e-7);
        if (trial == 0 || trial == 1) {
            int cols = 0;
            for (int u = 0; u < p.n; u++)
                cols += p.ns[u];
            for (int e = 0; e < p.ne; e++)
                cols += p.edges[e].ncu * p.edges[e].ncv;
            CHECK(r.cols == cols);
        }
    }
}

static void memory_row_forces_the_smaller_choice(void)
{
    problem p = {.n = 1, .ns = {2}, .cost = {{1, 5}}, .mem = {{10, 2}}};
    const double *cost[MAXN], *mem[MAXN];
    ap_ilp ilp;
    int choice[1];
    ap_ilp_result r;
    char err[AP_ERR_LEN];
    fill(&p, &ilp, cost, mem, 0);
    CHECK(ap_ilp_solve(&ilp, choice, &r, err) == AP_OK && choice[0] == 0);
    fill(&p, &ilp, cost, mem, 4);
    CHECK(ap_ilp_solve(&ilp, choice, &r, err) == AP_OK && choice[0] == 1);
    CHECK_NEAR(r.memory, 2, 1e-12);
    fill(&p, &ilp, cost, mem, 1);
    REQUIRE_OK(ap_ilp_solve(&ilp, choice, &r, err), err);
    CHECK(r.status == AP_ILP_INFEASIBLE);
}

static void glpk_failure_is_an_error_not_an_abort(void)
{
    problem p = {.n = 1, .ns = {2}, .cost = {{1, 5}}, .mem = {{1, 1}}};
    const double *cost[MAXN], *mem[MAXN];
    ap_ilp ilp;
    int choice[1];
    ap_ilp_result r;
    char err[AP_ERR_LEN] = "";
    fill(&p, &ilp, cost, mem, 0);
    ap_ilp_inject_fault();
    CHECK(ap_ilp_solve(&ilp, choice, &r, err) == AP_EINTERNAL);
    CHECK_STR_HAS(err, "GLPK");
    /* And the next solve in the same thread works again. */
    CHECK(ap_ilp_solve(&ilp, choice, &r, err) == AP_OK && choice[0] == 0);
}

/* An infinite price (a cluster figure at zero) is an error naming the
 * node, not a problem handed to GLPK, which answered "infeasible" with no
 * choice to read, and the planner indexed past its strategies. */
static void infinite_price_is_an_error(void)
{
    problem p = {.n = 2, .ns = {2, 2}, .cost = {{1, 5}, {2, INFINITY}}, .mem = {{1, 1}, {1, 1}}};
    const double *cost[MAXN], *mem[MAXN];
    ap_ilp ilp;
    int choice[2];
    ap_ilp_result r;
    char err[AP_ERR_LEN] = "";
    fill(&p, &ilp, cost, mem, 0);
    CHECK(ap_ilp_solve(&ilp, choice, &r, err) == AP_EINTERNAL);
    CHECK_STR_HAS(err, "node 1, strategy 1, is priced inf s");
}

int main(void)
{
    RUN(optimum_equals_brute_force_on_random_graphs);
    RUN(edge_classes_keep_the_optimum);
    RUN(memory_row_forces_the_smaller_choice);
    RUN(glpk_failure_is_an_error_not_an_abort);
    RUN(infinite_price_is_an_error);
    return DONE();
}
