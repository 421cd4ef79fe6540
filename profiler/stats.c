/* stats.c -- order statistics of repeated timings. A profile reports medians:
 * one slow iteration (a clock boost ending, another process) moves the mean
 * but not the median. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/profiler.h"

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

double ap_profile_percentile(const double *x, int n, double p)
{
    if (n < 1 || !x || isnan(p))
        return NAN;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s)
        return NAN;
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    p = p < 0 ? 0 : p > 100 ? 100 : p;
    double pos = p / 100.0 * (n - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < n ? lo + 1 : lo;
    double v = s[lo] + (pos - lo) * (s[hi] - s[lo]);
    free(s);
    return v;
}

double ap_profile_median(const double *x, int n)
{
    return ap_profile_percentile(x, n, 50.0);
}
