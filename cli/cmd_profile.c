/* cmd_profile.c -- `autopar profile`: runs the autopar-profile executable
 * installed beside this one, which measures this node's GPUs and writes a
 * cluster file. Builds configured without the CUDA toolkit, cuBLAS and NCCL
 * have no such executable and say so, failing with 2. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

#ifdef AP_PROFILE_TOOL

/* The directory of the running executable, from /proc/self/exe. */
static int tool_path(char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = 0;
    return snprintf(out, len, "%s/autopar-profile", self) < (int)len ? 0 : -1;
}

int ap_cmd_profile(int argc, char **argv)
{
    char path[PATH_MAX];
    if (tool_path(path, sizeof path)) {
        fprintf(stderr, "autopar profile: cannot find this executable's directory\n");
        return 2;
    }
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args)
        return 1;
    args[0] = path;
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    execv(path, args);
    fprintf(stderr, "autopar profile: cannot run %s: %s\n", path, strerror(errno));
    free(args);
    return 2;
}

#else

int ap_cmd_profile(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "autopar profile: this build has no GPU support (the CUDA toolkit, "
                    "cuBLAS and NCCL were not found when it was configured)\n");
    return 2;
}

#endif
