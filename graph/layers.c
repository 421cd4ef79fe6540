/* layers.c -- layers for graphs that tag none, as Alpa clusters operators:
 * the topological order cut into contiguous runs of about equal FLOPs, so
 * that the planner's stage cuts have pieces of even weight to move. */
#include <stdlib.h>

#include "graph/internal.h"

/* As many layers as the graph has matmuls and attentions (the ops that carry
 * the FLOPs), at most AP_AUTO_LAYERS: more pieces only slow the search. */
static int layer_count(const ap_graph *g)
{
    int heavy = 0;
    for (int i = 0; i < g->nops; i++)
        heavy += g->ops[i].kind == AP_OP_MATMUL || g->ops[i].kind == AP_OP_ATTENTION;
    if (heavy < 1)
        heavy = 1;
    return heavy < AP_AUTO_LAYERS ? heavy : AP_AUTO_LAYERS;
}

int ap_graph_cluster_layers(ap_graph *g)
{
    int K = layer_count(g);
    double total = 0;
    for (int i = 0; i < g->nops; i++)
        total += g->ops[i].flops;
    /* Op at topological position k joins layer floor(K * prefix / total),
     * where prefix counts the FLOPs before it and half its own; positions
     * never go back, and every layer gets at least one op. */
    double prefix = 0;
    int layer = 0;
    for (int k = 0; k < g->nops; k++) {
        ap_op *op = &g->ops[g->topo[k]];
        int want = total > 0 ? (int)(K * (prefix + 0.5 * op->flops) / total)
                             : (int)((long)K * k / g->nops);
        int left = g->nops - k; /* ops still to place, this one included */
        /* The first op opens layer 0 whatever its share: a heavy first op
         * would otherwise leave layer 0 empty. */
        if (k > 0 && want > layer && layer + 1 < K)
            layer++;
        if (K - layer > left)
            layer = K - left; /* leave one op for each later layer */
        op->layer = layer < K ? layer : K - 1;
        prefix += op->flops;
    }
    int max = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer > max)
            max = g->ops[i].layer;
    g->nlayers = max + 1;
    g->auto_layers = 1;
    return AP_OK;
}
