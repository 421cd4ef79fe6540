/* model.h -- loading the models the tests read from the source tree. */
#ifndef AP_TEST_MODEL_H
#define AP_TEST_MODEL_H

#include "graph/graph.h"
#include "test.h"

/* Loads `rel` (relative to the source root) at sequence length `seq` (0:
 * the model's own); prints the error and returns NULL when it fails. The
 * caller frees the graph. */
static inline ap_graph *ap_test_model(const char *rel, int seq)
{
    char path[512], err[AP_ERR_LEN];
    snprintf(path, sizeof path, "%s/%s", ap_test_src(), rel);
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = seq;
    ap_graph *g = NULL;
    if (ap_graph_load(path, &o, &g, err))
        fprintf(stderr, "%s\n", err);
    return g;
}

#endif
