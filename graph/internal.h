/* internal.h -- private to graph/: what its files share. */
#ifndef AP_GRAPH_INTERNAL_H
#define AP_GRAPH_INTERNAL_H

#include "graph/graph.h"

/* Writes "source: message" into err (when err is not NULL); the source
 * prefix is left out for graphs built in memory. */
void ap_graph_fail(const ap_graph *g, char *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Gives every op of a graph that tags none a layer (layers.c). */
int ap_graph_cluster_layers(ap_graph *g);

#endif
