/* cmd_profile.c -- `autopar profile`: measure this node's GPUs and write a
 * cluster file. The measuring code exists only in builds configured with the
 * CUDA toolkit, cuBLAS and NCCL; other builds say so and fail with 2. */
#include <stdio.h>

#include "cli/cli.h"
#include "profiler/profiler.h"

#ifdef AP_HAVE_PROFILER

int ap_cmd_profile(int argc, char **argv)
{
    ap_profile_options o;
    char err[AP_ERR_LEN];
    if (ap_profile_parse_args(argc, argv, &o, err) != AP_OK) {
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

#else

int ap_cmd_profile(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "autopar profile: this build has no GPU support (the CUDA toolkit, "
                    "cuBLAS and NCCL were not found when it was configured)\n");
    return AP_EINPUT;
}

#endif
