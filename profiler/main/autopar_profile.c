/* autopar_profile.c -- the `autopar-profile` executable behind
 * `autopar profile`. It is separate so that only it links the CUDA
 * runtime, cuBLAS, NCCL and MPI: the planner starts in milliseconds and
 * a few megabytes, and runs on machines where those libraries are absent. */
#include <stdio.h>

#include "profiler/profiler.h"

int main(int argc, char **argv)
{
    ap_profile_options o;
    char err[AP_ERR_LEN];
    if (ap_profile_parse_args(argc - 1, argv + 1, &o, err) != AP_OK) {
        fprintf(stderr, "%s\n", err);
        return AP_EINPUT;
    }
    if (o.help) {
        fputs(ap_profile_usage(), stdout);
        return AP_OK;
    }
    int st = ap_profile_run(&o, err);
    if (st != AP_OK)
        fprintf(stderr, "%s\n", err);
    return st;
}
