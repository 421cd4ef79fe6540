/* cuda_graph.c -- the names of Megatron-LM's CUDA graph implementations
 * (--cuda-graph-impl). A plan captured in graphs is priced as one without
 * them, with a caveat (ap_plan_caveat_cuda_graph in output.c). */
#include <string.h>

#include "planner/planner.h"

static const char *const names[] = {"none", "local", "transformer_engine"};

const char *ap_cuda_graph_name(int impl)
{
    return impl >= 0 && impl <= AP_CUDA_GRAPH_TE ? names[impl] : "none";
}

int ap_cuda_graph_parse(const char *name, int *out)
{
    for (int i = 0; i <= AP_CUDA_GRAPH_TE; i++)
        if (!strcmp(name, names[i])) {
            *out = i;
            return AP_OK;
        }
    return AP_EINPUT;
}
