/* ilp.c -- the intra-op ILP, solved with GLPK's branch and cut.
 *
 * GLPK reports internal errors by calling an error hook and then aborting;
 * the hook installed here long-jumps back instead, after which the only safe
 * step is glp_free_env(), which frees this thread's GLPK state. Each solve
 * therefore creates and frees its own problem object and nothing else lives
 * in the thread's environment. */
#include <glpk.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/planner.h"

typedef struct {
    jmp_buf jump;
} guard;

static _Thread_local int inject_fault;
static _Thread_local long solves;
static _Thread_local double solve_seconds;

void ap_ilp_counters(long *n, double *seconds)
{
    *n = solves;
    *seconds = solve_seconds;
}

void ap_ilp_inject_fault(void) { inject_fault = 1; }

void ap_ilp_thread_done(void) { glp_free_env(); }

static void on_glpk_error(void *info)
{
    guard *g = info;
    longjmp(g->jump, 1);
}

static int silence(void *info, const char *s)
{
    (void)info;
    (void)s;
    return 1; /* keep GLPK's terminal output off our stdout */
}

/* Column index of node u's choice i; GLPK numbers from 1. */
static int *node_base(const ap_ilp *p, int *ncols)
{
    int *base = malloc(sizeof *base * (size_t)(p->nnodes + 1));
    if (!base)
        return NULL;
    int n = 1;
    for (int u = 0; u < p->nnodes; u++) {
        base[u] = n;
        n += p->nstrat[u];
    }
    base[p->nnodes] = n;
    *ncols = n - 1;
    return base;
}

typedef struct {
    int n, cap;
    int *ia, *ja;
    double *ar;
} triplets;

static int push(triplets *t, int i, int j, double v)
{
    if (t->n + 1 >= t->cap) {
        int cap = t->cap ? t->cap * 2 : 1024;
        int *ia = realloc(t->ia, sizeof *ia * (size_t)cap);
        if (!ia)
            return -1;
        t->ia = ia;
        int *ja = realloc(t->ja, sizeof *ja * (size_t)cap);
        if (!ja)
            return -1;
        t->ja = ja;
        double *ar = realloc(t->ar, sizeof *ar * (size_t)cap);
        if (!ar)
            return -1;
        t->ar = ar;
        t->cap = cap;
    }
    t->n++;
    t->ia[t->n] = i; /* GLPK's arrays start at index 1 */
    t->ja[t->n] = j;
    t->ar[t->n] = v;
    return 0;
}

static int edge_classes(const ap_ilp *p, const ap_ilp_edge *e, int side)
{
    if (side == 0)
        return e->cu ? e->ncu : p->nstrat[e->u];
    return e->cv ? e->ncv : p->nstrat[e->v];
}

static int class_of(const int *map, int i)
{
    return map ? map[i] : i;
}

/* Rows sum_b y[a][b] = sum of u's choices in class a, and the same for v's
 * classes over a: the marginals of the pair variables are the choices. */
/* Pair (a, b)'s term in the memory row. */
static double edge_mem(const ap_ilp_edge *ed, int nb, int a, int b)
{
    return ed->mem ? ed->mem[a * nb + b] : 0;
}

static int add_edge(glp_prob *lp, const ap_ilp *p, const ap_ilp_edge *ed,
                    const int *base, int col, triplets *t)
{
    int na = edge_classes(p, ed, 0), nb = edge_classes(p, ed, 1);
    int ru = glp_add_rows(lp, na), rv = glp_add_rows(lp, nb);
    for (int a = 0; a < na; a++)
        glp_set_row_bnds(lp, ru + a, GLP_FX, 0, 0);
    for (int b = 0; b < nb; b++)
        glp_set_row_bnds(lp, rv + b, GLP_FX, 0, 0);
    for (int i = 0; i < p->nstrat[ed->u]; i++)
        if (push(t, ru + class_of(ed->cu, i), base[ed->u] + i, -1))
            return -1;
    for (int j = 0; j < p->nstrat[ed->v]; j++)
        if (push(t, rv + class_of(ed->cv, j), base[ed->v] + j, -1))
            return -1;
    for (int a = 0; a < na; a++)
        for (int b = 0; b < nb; b++, col++) {
            glp_set_col_bnds(lp, col, GLP_DB, 0, 1);
            glp_set_obj_coef(lp, col, p->minimise_memory
                                          ? edge_mem(ed, nb, a, b)
                                          : ed->cost[a * nb + b]);
            if (push(t, ru + a, col, 1) || push(t, rv + b, col, 1))
                return -1;
        }
    return 0;
}

/* The pair columns' terms in the memory row r; pair columns follow the
 * node columns in edge order, as build() adds them. */
static int add_edge_mem_terms(const ap_ilp *p, int ncols, int r, triplets *t)
{
    int col = ncols + 1;
    for (int e = 0; e < p->nedges; e++) {
        const ap_ilp_edge *ed = &p->edges[e];
        int na = edge_classes(p, ed, 0), nb = edge_classes(p, ed, 1);
        for (int a = 0; a < na; a++)
            for (int b = 0; b < nb; b++, col++)
                if (edge_mem(ed, nb, a, b) != 0 &&
                    push(t, r, col, edge_mem(ed, nb, a, b)))
                    return -1;
    }
    return 0;
}

static int build(glp_prob *lp, const ap_ilp *p, const int *base, int ncols,
                 triplets *t)
{
    int nedgecols = 0;
    for (int e = 0; e < p->nedges; e++)
        nedgecols += edge_classes(p, &p->edges[e], 0) * edge_classes(p, &p->edges[e], 1);
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, ncols + nedgecols);
    for (int u = 0; u < p->nnodes; u++)
        for (int i = 0; i < p->nstrat[u]; i++) {
            int col = base[u] + i;
            glp_set_col_kind(lp, col, GLP_BV);
            glp_set_obj_coef(lp, col, p->minimise_memory && p->mem
                                          ? p->mem[u][i] : p->cost[u][i]);
        }
    int row = glp_add_rows(lp, p->nnodes);
    for (int u = 0; u < p->nnodes; u++) {
        glp_set_row_bnds(lp, row + u, GLP_FX, 1, 1);
        for (int i = 0; i < p->nstrat[u]; i++)
            if (push(t, row + u, base[u] + i, 1))
                return -1;
    }
    int col = ncols + 1;
    for (int e = 0; e < p->nedges; e++) {
        if (add_edge(lp, p, &p->edges[e], base, col, t))
            return -1;
        col += edge_classes(p, &p->edges[e], 0) * edge_classes(p, &p->edges[e], 1);
    }
    if (p->mem_limit > 0) {
        int r = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, r, GLP_UP, 0, p->mem_limit);
        for (int u = 0; u < p->nnodes; u++)
            for (int i = 0; i < p->nstrat[u]; i++)
                if (p->mem[u][i] != 0 && push(t, r, base[u] + i, p->mem[u][i]))
                    return -1;
        if (add_edge_mem_terms(p, ncols, r, t))
            return -1;
    }
    if (inject_fault) {
        inject_fault = 0;
        glp_set_col_kind(lp, ncols + nedgecols + 7, GLP_BV); /* out of range */
    }
    glp_load_matrix(lp, t->n, t->ia, t->ja, t->ar);
    return 0;
}

static void read_choice(glp_prob *lp, const ap_ilp *p, const int *base,
                        int *choice, ap_ilp_result *res)
{
    res->memory = 0;
    for (int u = 0; u < p->nnodes; u++) {
        choice[u] = 0;
        for (int i = 0; i < p->nstrat[u]; i++)
            if (glp_mip_col_val(lp, base[u] + i) > 0.5) {
                choice[u] = i;
                break;
            }
        if (p->mem)
            res->memory += p->mem[u][choice[u]];
    }
    for (int e = 0; e < p->nedges; e++) {
        const ap_ilp_edge *ed = &p->edges[e];
        int nb = edge_classes(p, ed, 1);
        res->memory += edge_mem(ed, nb, class_of(ed->cu, choice[ed->u]),
                                class_of(ed->cv, choice[ed->v]));
    }
    res->objective = glp_mip_obj_val(lp);
}

static int solve(glp_prob *lp, const ap_ilp *p, ap_ilp_result *res, char *err)
{
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    /* Branching on the last fractional variable solves these problems two to
     * three times faster than GLPK's default (Driebeck-Tomlin), whose
     * tableau rows dominate the profile; see docs/benchmarks.md. */
    parm.br_tech = GLP_BR_LFV;
    parm.msg_lev = GLP_MSG_OFF;
    parm.mip_gap = p->gap > 0 ? p->gap : 1e-6;
    if (p->time_limit_s > 0)
        parm.tm_lim = (int)(p->time_limit_s * 1000);
    int rc = glp_intopt(lp, &parm);
    int st = glp_mip_status(lp);
    if (st == GLP_NOFEAS || rc == GLP_ENOPFS) {
        res->status = AP_ILP_INFEASIBLE;
        return AP_OK;
    }
    if (rc == GLP_ETMLIM && st != GLP_OPT && st != GLP_FEAS) {
        res->status = AP_ILP_TIMEOUT;
        return AP_OK;
    }
    if (st != GLP_OPT && st != GLP_FEAS) {
        snprintf(err, AP_ERR_LEN, "GLPK found no solution (glp_intopt returned %d)", rc);
        return AP_EINTERNAL;
    }
    res->status = st == GLP_OPT && rc == 0 ? AP_ILP_OPTIMAL : AP_ILP_FEASIBLE;
    return AP_OK;
}

typedef struct {
    const ap_ilp *p;
    int *choice;
    ap_ilp_result *res;
    char *err;
    int *base;
    int ncols;
    triplets t;
} job;

/* Builds and solves; every GLPK call happens here, under the error hook. */
static int run(job *j)
{
    int status;
    glp_prob *lp = glp_create_prob();
    if (build(lp, j->p, j->base, j->ncols, &j->t)) {
        snprintf(j->err, AP_ERR_LEN, "out of memory building the ILP");
        status = AP_EINTERNAL;
    } else {
        j->res->rows = glp_get_num_rows(lp);
        j->res->cols = glp_get_num_cols(lp);
        status = solve(lp, j->p, j->res, j->err);
        if (status == AP_OK && j->res->status <= AP_ILP_FEASIBLE) {
            read_choice(lp, j->p, j->base, j->choice, j->res);
            double bound = glp_get_obj_val(lp);
            ap_ilp_result *r = j->res;
            r->gap = r->status == AP_ILP_OPTIMAL || r->objective == 0
                         ? 0
                         : (r->objective - bound) / r->objective;
            if (r->gap < 0)
                r->gap = 0;
        }
    }
    glp_delete_prob(lp);
    return status;
}

/* Runs the job with GLPK's error hook long-jumping back here. */
static int guarded(job *j)
{
    guard g;
    glp_term_hook(silence, NULL);
    glp_error_hook(on_glpk_error, &g);
    int status;
    if (setjmp(g.jump)) {
        /* GLPK's state is unusable after an error: drop all of it. */
        glp_free_env();
        snprintf(j->err, AP_ERR_LEN, "GLPK failed while solving the sharding ILP");
        return AP_EINTERNAL;
    }
    status = run(j);
    glp_error_hook(NULL, NULL);
    glp_term_hook(NULL, NULL);
    return status;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether every coefficient is a number: an infinite price (a cluster
 * figure at zero) makes GLPK report the problem infeasible or fail, and
 * no choice would be read. Returns 1 with err naming the first. */
static int not_finite(const ap_ilp *p, char *err)
{
    for (int u = 0; u < p->nnodes; u++)
        for (int i = 0; i < p->nstrat[u]; i++)
            if (!isfinite(p->cost[u][i]) || (p->mem && !isfinite(p->mem[u][i]))) {
                snprintf(err, AP_ERR_LEN, "the sharding ILP's node %d, strategy %d, is "
                         "priced %g s and %g bytes: not a finite number (a cluster "
                         "figure out of range?)", u, i, p->cost[u][i],
                         p->mem ? p->mem[u][i] : 0.0);
                return 1;
            }
    for (int e = 0; e < p->nedges; e++) {
        const ap_ilp_edge *ed = &p->edges[e];
        int n = edge_classes(p, ed, 0) * edge_classes(p, ed, 1);
        for (int k = 0; k < n; k++)
            if (!isfinite(ed->cost[k]) || (ed->mem && !isfinite(ed->mem[k]))) {
                snprintf(err, AP_ERR_LEN, "the sharding ILP's edge %d (%d to %d) is priced "
                         "%g s: not a finite number (a cluster figure out of range?)", e,
                         ed->u, ed->v, ed->cost[k]);
                return 1;
            }
    }
    return 0;
}

int ap_ilp_solve(const ap_ilp *p, int *choice, ap_ilp_result *res, char *err)
{
    double started = seconds_now();
    memset(res, 0, sizeof *res);
    if (not_finite(p, err))
        return AP_EINTERNAL;
    job j = {p, choice, res, err, NULL, 0, {0}};
    j.base = node_base(p, &j.ncols);
    if (!j.base) {
        snprintf(err, AP_ERR_LEN, "out of memory building the ILP");
        return AP_EINTERNAL;
    }
    int status = guarded(&j);
    free(j.base);
    free(j.t.ia);
    free(j.t.ja);
    free(j.t.ar);
    solves++;
    solve_seconds += seconds_now() - started;
    return status;
}
