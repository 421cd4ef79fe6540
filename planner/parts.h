/* parts.h -- private to planner/: the model split into blocks. */
#ifndef AP_PLANNER_PARTS_H
#define AP_PLANNER_PARTS_H

#include "graph/graph.h"

/* Block 0 holds the ops before the layers, block 1 those after, block
 * 2 + k the ops of the k-th layer class's representative layer. */
typedef struct {
    int nblocks; /* 2 + nclasses */
    int nclasses;
    int *classes;     /* layer-class representatives, ascending */
    int **ops;        /* per block: graph op indices, ascending */
    int *nops;
    int *layer_block; /* per layer: its block */
} ap_parts;

int ap_parts_build(const ap_graph *g, ap_parts *m, char *err);
void ap_parts_free(ap_parts *m);

#endif
