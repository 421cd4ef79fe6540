/* balance.c -- moving layers off the model chunks that carry the embedding
 * and the head.
 *
 * Under interleaved 1F1B the first virtual stage runs the embedding besides
 * its layers and the last runs the output layer and the loss, whose GEMM
 * over the vocabulary can cost several layers. Megatron-LM's
 * --account-for-*-in-pipeline-split takes a layer from each of the two for
 * that reason; its --pipeline-model-parallel-layout states any split. The
 * search's stages are cut by the stage DP, which prices a stage as a whole,
 * so for each chunk count the search tries this pass moves a layer at a
 * time out of those two chunks into another, and keeps each move that
 * shortens the priced step and fits. It also cuts stages whose layers do
 * not divide into the chunks (ap_plan_split_chunks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/layout.h"

/* Moves tried in all, so that planning time stays bounded. */
#define MAX_MOVES 4

/* The step of the plan with chunks `counts`, or INFINITY when it does not
 * fit in `limit`; p is left priced with them. */
static double price_with(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                         const int *counts, double limit, int *rc, char *err)
{
    int n = p->nstages * p->vchunks;
    memcpy(p->chunk_layers, counts, sizeof(int) * (size_t)n);
    ap_plan_set_chunks(p, p->chunk_layers);
    *rc = ap_plan_evaluate(g, c, p, err);
    if (*rc)
        return INFINITY;
    return p->max_mem_bytes <= limit ? p->step_time : INFINITY;
}

/* Whether moving a layer from virtual stage `from` to `to` leaves every
 * pipeline rank a layer (a stage of no layers is not a plan's). */
static int movable(const ap_plan *p, const int *counts, int from, int to)
{
    if (from == to || counts[from] == 0)
        return 0;
    int s = from % p->nstages, left = 0;
    if (s == to % p->nstages)
        return 1;
    for (int c = 0; c < p->vchunks; c++)
        left += counts[c * p->nstages + s];
    return left > 1;
}

/* The chunks a layer may move to: any of its own stage's, and the first
 * and last chunk of every other stage, so that a move costs 2p + v
 * pricings rather than p*v. */
static int destination(const ap_plan *p, int from, int to)
{
    int c = to / p->nstages;
    return to % p->nstages == from % p->nstages || c == 0 || c == p->vchunks - 1;
}

/* The best single move out of the first and the last virtual stage, into
 * `best` (a copy of `counts` moved); its step, or `step` when none is
 * faster. */
static double best_move(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                        const int *counts, double step, double limit, int *best,
                        int *trial, int *rc, char *err)
{
    int n = p->nstages * p->vchunks;
    const int from[2] = {n - 1, 0};
    for (int f = 0; f < 2; f++)
        for (int to = 0; to < n; to++) {
            if (!movable(p, counts, from[f], to) || !destination(p, from[f], to))
                continue;
            memcpy(trial, counts, sizeof(int) * (size_t)n);
            trial[from[f]]--;
            trial[to]++;
            double t = price_with(g, c, p, trial, limit, rc, err);
            if (*rc)
                return step;
            if (t < step * (1 - 1e-9)) {
                step = t;
                memcpy(best, trial, sizeof(int) * (size_t)n);
            }
        }
    return step;
}

/* Back to the plan's own stage spans and even chunks, priced. */
static int restore(const ap_graph *g, const ap_cluster *c, ap_plan *p, const int *span,
                   char *err)
{
    ap_plan_restore_spans(p, span);
    return ap_plan_evaluate(g, c, p, err);
}

int ap_plan_split_chunks(ap_plan *p)
{
    int v = p->vchunks, n = p->nstages * v;
    int *chunks = malloc(sizeof(int) * (size_t)n);
    if (!chunks)
        return -1;
    /* Each stage's span cut into v pieces, the first ones a layer longer
     * where it does not divide; the moves can shift them further. */
    for (int s = 0; s < p->nstages; s++) {
        int layers = p->stages[s].nlayers;
        for (int c = 0; c < v; c++)
            chunks[c * p->nstages + s] = layers / v + (c < layers % v);
    }
    ap_plan_set_chunks(p, chunks);
    return 0;
}

int ap_plan_balance_chunks(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                           double limit, char *err)
{
    /* Layers of several classes would land on stages whose blocks were
     * solved without them. */
    if (p->vchunks <= 1 || p->nstages < 2 || p->nclasses != 1)
        return AP_OK;
    int v = p->vchunks, n = p->nstages * v, rc = AP_OK, had = p->chunk_layers != NULL;
    int *counts = malloc(sizeof(int) * (size_t)n);
    int *best = malloc(sizeof(int) * (size_t)n);
    int *trial = malloc(sizeof(int) * (size_t)n);
    int *span = ap_plan_spans(p);
    if (!had)
        p->chunk_layers = malloc(sizeof(int) * (size_t)n);
    if (!counts || !best || !trial || !span || !p->chunk_layers) {
        if (!had) {
            free(p->chunk_layers);
            p->chunk_layers = NULL;
        }
        rc = AP_EINTERNAL;
        snprintf(err, AP_ERR_LEN, "out of memory balancing the model chunks");
        goto done;
    }
    for (int i = 0; i < n; i++)
        counts[i] = had ? p->chunk_layers[i] : p->stages[i % p->nstages].nlayers / v;
    double start = p->step_time, step = start;
    for (int moves = 0; moves < MAX_MOVES; moves++) {
        double t = best_move(g, c, p, counts, step, limit, best, trial, &rc, err);
        if (rc || !(t < step))
            break;
        step = t;
        memcpy(counts, best, sizeof(int) * (size_t)n);
    }
    if (rc)
        goto done;
    /* A plan that came with even chunks keeps a layout only where a move
     * paid; else its own spans and even chunks, which need none. */
    if (step < start || had)
        price_with(g, c, p, counts, limit, &rc, err);
    else
        rc = restore(g, c, p, span, err);
done:
    free(counts);
    free(best);
    free(trial);
    free(span);
    return rc;
}
