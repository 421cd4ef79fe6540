/* dp.c -- Alpa's inter-op dynamic program over contiguous layer spans.
 *
 * For a fixed bound t_max on any stage's time, F[s][i] is the least sum of
 * stage times that puts layers [i, L) on stages s..p-1 with each stage under
 * the bound; the pipeline's time is then F[0][0] + (m - 1) * t_max. The
 * bound is enumerated over the distinct stage costs in ascending order, from
 * the smallest bound that admits any cut, until (m - 1) * t_max alone
 * exceeds the best total. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

typedef struct {
    int L, p;
    double *cost; /* [p][L][L+1]: INFINITY where the span does not fit */
} table;

static double *at(table *t, int s, int i, int j)
{
    return &t->cost[((size_t)s * t->L + i) * (size_t)(t->L + 1) + j];
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Least sum under the bound; fills first[] and returns INFINITY if none. */
static double solve_bound(table *t, double tmax, double *F, int *arg, int *first)
{
    int L = t->L, p = t->p;
    for (int s = p; s >= 0; s--)
        for (int i = 0; i <= L; i++) {
            double *f = &F[(size_t)s * (L + 1) + i];
            if (s == p) {
                *f = i == L ? 0 : INFINITY;
                continue;
            }
            *f = INFINITY;
            /* Leave at least one layer for each later stage. */
            for (int j = i + 1; j <= L - (p - s - 1); j++) {
                double c = *at(t, s, i, j);
                double rest = F[(size_t)(s + 1) * (L + 1) + j];
                if (c <= tmax && c + rest < *f) {
                    *f = c + rest;
                    arg[(size_t)s * (L + 1) + i] = j;
                }
            }
        }
    if (isinf(F[0]))
        return INFINITY;
    int i = 0;
    for (int s = 0; s < p; s++) {
        first[s] = i;
        i = arg[(size_t)s * (L + 1) + i];
    }
    return F[0];
}

double ap_stage_dp(int nlayers, int nstages, int nmicro, ap_stage_cost_fn cost,
                   void *ctx, int *first)
{
    int L = nlayers, p = nstages;
    if (p < 1 || L < p)
        return INFINITY;
    table t = {L, p, malloc(sizeof(double) * (size_t)p * L * (L + 1))};
    double *cand = malloc(sizeof(double) * (size_t)p * L * (L + 1));
    double *F = malloc(sizeof(double) * (size_t)(p + 1) * (L + 1));
    int *arg = calloc((size_t)(p + 1) * (L + 1), sizeof *arg);
    int *cut = malloc(sizeof *cut * (size_t)p);
    double best = INFINITY;
    if (!t.cost || !cand || !F || !arg || !cut)
        goto done;
    size_t nc = 0;
    for (int s = 0; s < p; s++)
        for (int i = 0; i < L; i++)
            for (int j = 0; j <= L; j++) {
                double c = INFINITY;
                if (j > i && i >= s && L - j >= p - s - 1 && !cost(ctx, s, i, j, &c))
                    c = INFINITY;
                *at(&t, s, i, j) = c;
                if (!isinf(c))
                    cand[nc++] = c;
            }
    qsort(cand, nc, sizeof *cand, cmp_double);
    /* Feasibility only grows with the bound: find the least feasible one. */
    size_t lo = 0, hi = nc;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (isinf(solve_bound(&t, cand[mid], F, arg, cut)))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; k < nc; k++) {
        if (k > lo && cand[k] == cand[k - 1])
            continue;
        double tmax = cand[k];
        if ((nmicro - 1) * tmax >= best)
            break;
        double sum = solve_bound(&t, tmax, F, arg, cut);
        if (isinf(sum))
            continue;
        /* The bound may be loose: price the cut by its real maximum. */
        double real_max = 0;
        for (int s = 0; s < p; s++) {
            int end = s + 1 < p ? cut[s + 1] : L;
            real_max = fmax(real_max, *at(&t, s, cut[s], end));
        }
        double total = sum + (nmicro - 1) * real_max;
        if (total < best) {
            best = total;
            memcpy(first, cut, sizeof *cut * (size_t)p);
        }
    }
done:
    free(t.cost);
    free(cand);
    free(F);
    free(arg);
    free(cut);
    return best;
}
