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

/* What --help says where the measuring executable cannot answer it. */
static const char brief_help[] =
    "usage: autopar profile [-o cluster.json] [--quick] [--mpi]\n"
    "\n"
    "Measures this node's GPUs (cuBLAS and cuBLASLt GEMMs, HBM bandwidth, NCCL\n"
    "collectives; across nodes under MPI) and writes a cluster file for\n"
    "--cluster (docs/profiler.md). It runs autopar-profile, an executable the\n"
    "build makes beside autopar where CMake finds the CUDA toolkit, cuBLAS and\n"
    "NCCL; `autopar-profile --help` lists its options.\n";

static int asks_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
    return 0;
}

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
    int missing = errno == ENOENT;
    free(args);
    if (missing && asks_help(argc, argv)) {
        fputs(brief_help, stdout);
        printf("\n%s is not there: copy autopar-profile beside autopar.\n", path);
        return 0;
    }
    fprintf(stderr, "autopar profile: cannot run %s: %s%s\n", path, strerror(errno),
            missing ? " (the build makes autopar-profile beside autopar where it finds "
                      "CUDA, cuBLAS and NCCL; copy it with autopar)" : "");
    return 2;
}

#else

int ap_cmd_profile(int argc, char **argv)
{
    static const char no_gpu[] = "this build has no GPU support (the CUDA toolkit, "
                                 "cuBLAS and NCCL were not found when it was configured)";
    if (asks_help(argc, argv)) {
        printf("%s\nNote: %s.\n", brief_help, no_gpu);
        return 0;
    }
    fprintf(stderr, "autopar profile: %s\n", no_gpu);
    return 2;
}

#endif
