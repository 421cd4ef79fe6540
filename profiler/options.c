/* options.c -- the command line of `autopar profile`. Parsing lives here,
 * not in cli/, so that it is tested in builds without CUDA as well. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/profiler.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

const char *ap_profile_usage(void)
{
    return "usage: autopar profile [-o FILE] [--quick] [--iters N] [--warmup N]\n"
           "                       [--max-bytes N[K|M|G]] [--gpus N] [--dtypes LIST]\n"
           "                       [--mpi]\n"
           "\n"
           "Measures GEMM throughput (cuBLASLt), HBM bandwidth and NCCL collectives\n"
           "on this node's GPUs and writes a cluster file for `autopar plan`.\n"
           "\n"
           "  -o FILE          where to write the cluster file (cluster.json)\n"
           "  --quick          smaller grids: about 2 minutes on an 8-GPU node\n"
           "  --iters N        timed repetitions per measurement (20; quick 10)\n"
           "  --warmup N       untimed repetitions first (5; quick 3)\n"
           "  --max-bytes N    largest collective buffer (1G)\n"
           "  --dtypes LIST    GEMM dtypes, comma-separated: bf16, fp16, tf32 (or\n"
           "                   fp32), fp8 (bf16,fp16,tf32, and fp8 where the GPU\n"
           "                   has FP8 tensor cores)\n"
           "  --gpus N         use the first N devices (all)\n"
           "  --mpi            under `mpirun -np N`: one process per GPU, groups\n"
           "                   spanning nodes; rank 0 writes the file\n";
}

/* A whole number in [lo, hi]; the option's name goes into the message. */
static int parse_int(const char *opt, const char *s, long lo, long hi,
                     int *out, char *err)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || errno || *end || v < lo || v > hi) {
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: %s: expected a whole number from %ld to %ld, got \"%s\"",
                 opt, lo, hi, s ? s : "");
        return AP_EINPUT;
    }
    *out = (int)v;
    return AP_OK;
}

/* Bytes with an optional binary suffix K, M or G; at least 1 KiB, since the
 * smallest size measured is 1 KiB, and at most 64 GiB. */
static int parse_bytes(const char *s, double *out, char *err)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (s && *s && !errno && end != s) {
        double scale = 1;
        if (*end == 'K' || *end == 'k') scale = 1024.0, end++;
        else if (*end == 'M' || *end == 'm') scale = 1024.0 * 1024.0, end++;
        else if (*end == 'G' || *end == 'g') scale = GIB, end++;
        v *= scale;
        if (!*end && v >= 1024.0 && v <= 64 * GIB) {
            *out = v;
            return AP_OK;
        }
    }
    snprintf(err, AP_ERR_LEN,
             "autopar profile: --max-bytes: expected a size from 1K to 64G, got \"%s\"",
             s ? s : "");
    return AP_EINPUT;
}

/* bf16, fp16, tf32 (fp32 too, the inputs' type) and fp8, comma-separated,
 * each at most once. */
static int parse_dtypes(const char *s, unsigned *out, char *err)
{
    static const struct { const char *name; ap_dtype dt; } names[] = {
        {"bf16", AP_BF16}, {"fp16", AP_FP16}, {"tf32", AP_FP32},
        {"fp32", AP_FP32}, {"fp8", AP_FP8},
    };
    char buf[128];
    unsigned set = 0;
    if (!s || !*s || strlen(s) >= sizeof buf) {
        snprintf(err, AP_ERR_LEN, "autopar profile: --dtypes: expected a comma-separated "
                 "list of bf16, fp16, tf32, fp8, got \"%.64s\"", s ? s : "");
        return AP_EINPUT;
    }
    snprintf(buf, sizeof buf, "%s", s);
    for (char *p = buf, *next; p; p = next) {
        next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && strcmp(p, names[i].name))
            i++;
        if (i == sizeof names / sizeof names[0]) {
            snprintf(err, AP_ERR_LEN, "autopar profile: --dtypes: unknown dtype \"%.32s\" "
                     "(bf16, fp16, tf32, fp8)", p);
            return AP_EINPUT;
        }
        set |= AP_PROFILE_DTYPE(names[i].dt);
    }
    *out = set;
    return AP_OK;
}

int ap_profile_run_dtypes(const ap_profile_options *o, int has_fp8,
                          unsigned *dtypes, char *err)
{
    if (!o->dtypes) {
        *dtypes = AP_PROFILE_DTYPES_DEFAULT | (has_fp8 ? AP_PROFILE_DTYPE(AP_FP8) : 0);
        return AP_OK;
    }
    if ((o->dtypes & AP_PROFILE_DTYPE(AP_FP8)) && !has_fp8) {
        snprintf(err, AP_ERR_LEN, "autopar profile: --dtypes fp8: this GPU has no FP8 "
                 "tensor cores (compute capability 8.9 or later: Ada, Hopper, Blackwell)");
        return AP_EINPUT;
    }
    *dtypes = o->dtypes;
    return AP_OK;
}

static void record_command(int argc, char **argv, ap_profile_options *o)
{
    size_t len = (size_t)snprintf(o->command, sizeof o->command, "autopar profile");
    for (int i = 0; i < argc && len < sizeof o->command; i++)
        len += (size_t)snprintf(o->command + len, sizeof o->command - len,
                                " %s", argv[i]);
    /* The cluster reader refuses control characters in its strings. */
    ap_mask_control_chars(o->command);
}

int ap_profile_parse_args(int argc, char **argv, ap_profile_options *o,
                          char *err)
{
    memset(o, 0, sizeof *o);
    snprintf(o->out, sizeof o->out, "cluster.json");
    o->max_bytes = GIB;
    o->iters = o->warmup = -1;
    record_command(argc, argv, o);

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int st = AP_OK;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = 1;
            return AP_OK;
        } else if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--mpi")) {
            o->mpi = 1;
        } else if (!strcmp(a, "-o")) {
            if (!v || !*v) {
                snprintf(err, AP_ERR_LEN, "autopar profile: -o: expected a file name");
                return AP_EINPUT;
            }
            snprintf(o->out, sizeof o->out, "%s", v);
            i++;
        } else if (!strcmp(a, "--iters")) {
            st = parse_int(a, v, 1, 100000, &o->iters, err);
            i++;
        } else if (!strcmp(a, "--warmup")) {
            st = parse_int(a, v, 0, 100000, &o->warmup, err);
            i++;
        } else if (!strcmp(a, "--gpus")) {
            st = parse_int(a, v, 1, 1 << 20, &o->gpus, err);
            i++;
        } else if (!strcmp(a, "--max-bytes")) {
            st = parse_bytes(v, &o->max_bytes, err);
            i++;
        } else if (!strcmp(a, "--dtypes")) {
            st = parse_dtypes(v, &o->dtypes, err);
            i++;
        } else {
            snprintf(err, AP_ERR_LEN, "autopar profile: unknown option \"%s\" (see --help)", a);
            return AP_EINPUT;
        }
        if (st != AP_OK)
            return st;
    }
    if (o->iters < 0)
        o->iters = o->quick ? 10 : 20;
    if (o->warmup < 0)
        o->warmup = o->quick ? 3 : 5;
    return AP_OK;
}
