/* run_names.c -- the names of the launcher settings spelled as Megatron-LM
 * spells them: its CUDA graph implementations (--cuda-graph-impl; a plan
 * captured in graphs is priced as one without them, with a caveat,
 * ap_plan_caveat_cuda_graph in output.c) and its MoE token dispatchers
 * (--moe-token-dispatcher-type, --moe-flex-dispatcher-backend). */
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

static const char *const dispatchers[] = {"alltoall", "deepep", "hybridep", "allgather"};

const char *ap_dispatcher_name(ap_dispatcher d)
{
    return (int)d >= 0 && d <= AP_DISPATCH_ALLGATHER ? dispatchers[d] : "alltoall";
}

int ap_dispatcher_parse(const char *name, ap_dispatcher *out)
{
    for (int i = 0; i <= AP_DISPATCH_ALLGATHER; i++)
        if (!strcmp(name, dispatchers[i])) {
            *out = (ap_dispatcher)i;
            return AP_OK;
        }
    return AP_EINPUT;
}
