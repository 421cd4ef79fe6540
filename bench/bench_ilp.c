/* bench_ilp.c -- size and solve time of one transformer block's sharding
 * ILP on the logical meshes the planner tries.
 *
 *   bench_ilp [MODEL] [--batch B] [--repeat N]
 *
 * Default model: examples/hf/llama-3-70b.json. Each row prints the mesh, the
 * ILP's rows and columns, the number of solves of the memory sweep, and the
 * median time of the fastest-point solve and of the whole sweep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/parts.h"
#include "planner/planner.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench_mesh(const ap_graph *g, const ap_cluster *c, const ap_parts *m,
                      int d0, int d1, double batch, int repeat)
{
    ap_mesh mesh;
    ap_mesh_init(&mesh, d0, d1, 0, c->gpus_per_node);
    ap_price_ctx x = {.g = g, .c = c, .mesh = &mesh, .batch = batch, .nmicro = 8,
                      .zero = AP_ZERO_1};
    const int *ops = m->ops[2];
    int nops = m->nops[2];
    double sweep[64];
    ap_block b;
    char err[AP_ERR_LEN];
    ap_ilp_result r = {0};
    int points = 0;
    long solves0, solves1;
    double secs0, secs1;
    ap_ilp_counters(&solves0, &secs0);
    for (int k = 0; k < repeat && k < 64; k++) {
        double t0 = now();
        if (ap_block_solve(&x, ops, nops, 1, 10, 1e-4, &b, err)) {
            fprintf(stderr, "bench_ilp: %s\n", err);
            return 1;
        }
        sweep[k] = now() - t0;
        r = b.ilp;
        points = b.npoints;
        ap_block_free(&b);
    }
    ap_ilp_counters(&solves1, &secs1);
    long nsolve = solves1 - solves0;
    int n = repeat < 64 ? repeat : 64;
    qsort(sweep, (size_t)n, sizeof *sweep, cmp_double);
    printf("%2dx%-2d  %3d ops  %6d rows  %7d cols  %ld solves, %d points  "
           "%8.1f ms per solve  %8.1f ms per block\n",
           d0, d1, nops, r.rows, r.cols, nsolve / n, points,
           (secs1 - secs0) / (double)nsolve * 1e3, sweep[n / 2] * 1e3);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = "examples/hf/llama-3-70b.json";
    double batch = 8;
    int repeat = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else
            model = argv[i];
    }
    if (repeat < 1)
        repeat = 1;
    char err[AP_ERR_LEN];
    ap_graph *g;
    ap_build_opts bo;
    ap_build_opts_default(&bo);
    if (ap_graph_load(model, &bo, &g, err)) {
        fprintf(stderr, "bench_ilp: %s\n", err);
        return 2;
    }
    ap_cluster c;
    if (ap_cluster_resolve("h100-sxm", 64, 8, &c, err)) {
        fprintf(stderr, "bench_ilp: %s\n", err);
        return 2;
    }
    ap_parts m;
    if (ap_parts_build(g, &m, err)) {
        fprintf(stderr, "bench_ilp: %s\n", err);
        return 2;
    }
    printf("%s, one layer block, micro-batch %g sequences\n", g->name, batch);
    static const int meshes[][2] = {{1, 8}, {2, 4}, {4, 2}, {8, 1}, {8, 8}, {2, 8}, {4, 4}};
    int rc = 0;
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0] && !rc; i++)
        rc = bench_mesh(g, &c, &m, meshes[i][0], meshes[i][1], batch, repeat);
    ap_parts_free(&m);
    ap_cluster_free(&c);
    ap_graph_free(g);
    return rc;
}
