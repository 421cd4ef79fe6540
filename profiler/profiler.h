/* profiler.h -- `autopar profile`: measures the GPUs of a node (or, under
 * MPI, of a cluster) and writes a cluster file (docs/cluster-format.md) whose
 * measured tables the cost model prefers to its presets.
 *
 * The module has two halves. The GPU-free half -- the option parser, the GEMM
 * shape grid, the collective sizes and groups, the statistics, the nccl-tests
 * bandwidth conventions, the fit of link bandwidth and latency, and building
 * the cluster and its file -- is the library ap_profile_core, built in every
 * configuration so that tests can call it. The measuring half,
 * ap_profile_run(), exists only in builds configured with the CUDA toolkit,
 * cuBLAS and NCCL (the target ap_profiler, which defines AP_HAVE_PROFILER).
 *
 * Errors follow graph.h: an ap_status and a message in the caller's buffer of
 * AP_ERR_LEN bytes.
 */
#ifndef AP_PROFILER_H
#define AP_PROFILER_H

#include <stddef.h>

#include "costmodel/costmodel.h"

#define AP_PROFILE_CMD_LEN 1024

typedef struct {
    char out[1024];      /* -o FILE; "cluster.json" by default */
    int quick;           /* --quick: a smaller grid, fewer sizes and iterations */
    int iters, warmup;   /* timed and untimed repetitions of each measurement */
    double max_bytes;    /* --max-bytes: the largest collective buffer */
    int gpus;            /* --gpus N: the first N devices; 0 = every device */
    int mpi;             /* --mpi: one process per GPU under mpirun */
    int help;            /* --help was given; nothing else is meaningful */
    unsigned dtypes;     /* --dtypes: AP_PROFILE_DTYPE bits; 0 = the default */
    char command[AP_PROFILE_CMD_LEN]; /* the command line, for the file */
} ap_profile_options;

/* A set of GEMM dtypes, one bit per ap_dtype. A run measures bf16, fp16
 * and TF32 (AP_FP32), and FP8 where the GPU has FP8 tensor cores, unless
 * --dtypes names fewer. */
#define AP_PROFILE_DTYPE(dt) (1u << (unsigned)(dt))
#define AP_PROFILE_DTYPES_DEFAULT \
    (AP_PROFILE_DTYPE(AP_BF16) | AP_PROFILE_DTYPE(AP_FP16) | AP_PROFILE_DTYPE(AP_FP32))

/* The dtypes a run on a GPU with (has_fp8) or without FP8 tensor cores
 * measures, into *dtypes: --dtypes as given, else the default with FP8
 * where the GPU has it. AP_EINPUT, naming the option, when --dtypes asks
 * for FP8 on a GPU without it. */
int ap_profile_run_dtypes(const ap_profile_options *o, int has_fp8,
                          unsigned *dtypes, char *err);

/* Parses the arguments after `autopar profile` into *o, defaults first.
 * AP_EINPUT with a message for an unknown option or a bad number. */
int ap_profile_parse_args(int argc, char **argv, ap_profile_options *o,
                          char *err);
/* The usage text of `autopar profile`. */
const char *ap_profile_usage(void);

/* The GEMM grid: for every dtype in `dtypes` (AP_PROFILE_DTYPE bits of
 * bf16, fp16, fp32 inputs with TF32 tensor-core compute, recorded as
 * AP_FP32, and FP8), the forward, input-gradient and weight-gradient GEMMs of a
 * transformer layer (fused QKV, attention output, MLP up and down projections
 * with a 4h MLP) for hidden sizes 4096 to 16384, sharded 1, 2, 4 and 8 ways
 * by tensor parallelism, at a few token counts per micro-batch. Every dtype
 * gets the same shapes, each dimension a multiple of 16. Duplicates are
 * removed; the grid is sorted by dtype (bf16, fp16, fp32, fp8), then m, n, k.
 * *out is malloc'ed; the caller frees it. */
typedef struct {
    ap_dtype dtype;
    long m, n, k;
} ap_profile_gemm_shape;

int ap_profile_gemm_grid(int quick, unsigned dtypes, ap_profile_gemm_shape **out,
                         int *n, char *err);
/* 2mnk. */
double ap_profile_gemm_flops(double m, double n, double k);
/* "bf16", "fp16", "tf32" (fp32 inputs, TF32 compute), "fp8", else "?". */
const char *ap_profile_gemm_dtype_name(ap_dtype dt);
/* The dtype a grid GEMM of input dtype dt writes: bf16 for FP8 (as
 * Transformer Engine's FP8 GEMMs do), dt itself otherwise. Its operands
 * are ap_dtype_size(dt) bytes each. */
ap_dtype ap_profile_gemm_result_dtype(ap_dtype dt);

/* FP8 GEMMs (AP_FP8) are measured as Transformer Engine runs them on Hopper:
 * E4M3 operands, a bf16 result, fp32 accumulation (docs/profiler.md). They
 * need FP8 tensor cores: compute capability 8.9 (Ada) or later. */
int ap_profile_has_fp8(int cc_major, int cc_minor);
/* The E4M3 byte (sign, 4 exponent bits with bias 7, 3 mantissa bits; no
 * infinities) nearest to f, ties to even: 1.0 -> 0x38, -0.5 -> 0xB0.
 * Magnitudes below the smallest subnormal 2^-9 become a signed zero, those
 * of 448 (the largest finite) and above saturate to +-448 (0x7E, 0xFE), as
 * Transformer Engine's casts do, and NaN becomes 0: the result is never one
 * of the NaN bytes 0x7F and 0xFF. */
unsigned char ap_profile_e4m3(float f);

/* Collective buffer sizes in bytes: 1 KiB up to max_bytes in steps of 4
 * (quick: steps of 16), ascending. *out is malloc'ed; the caller frees it. */
int ap_profile_coll_sizes(int quick, double max_bytes, double **out, int *n,
                          char *err);
/* The collectives measured on a group of n ranks: every op but send/recv,
 * which runs between pairs. */
int ap_profile_coll_applies(ap_coll op, int nranks);
/* The collective measurements of a run on one node of `gpus` GPUs: each of
 * nsizes sizes of every op that applies, for each power-of-two group from 2
 * to gpus. */
int ap_profile_coll_count(int gpus, int nsizes);

/* A group of GPUs a collective runs on: the first `per_node` GPUs of each of
 * the first `nodes` nodes; with G GPUs per node its members are the ranks
 * node*G + local for node < nodes, local < per_node. */
typedef struct {
    int nodes, per_node;
} ap_profile_group;

/* The groups measured on `nodes` nodes of `gpus_per_node` GPUs: within a node
 * every power of two from 2 to gpus_per_node; across nodes, for every power of
 * two k from 2 to `nodes`, k whole nodes and one GPU on each of k nodes.
 * Ordered by nodes, then per_node; no duplicates. *out is malloc'ed. */
int ap_profile_groups(int nodes, int gpus_per_node, ap_profile_group **out,
                      int *n, char *err);
int ap_profile_group_ranks(ap_profile_group g);
/* Whether global rank `rank` belongs to group g. */
int ap_profile_group_has(ap_profile_group g, int gpus_per_node, int rank);

/* How a GEMM sample is timed (profiler/batch.c): `reps` launches back to
 * back between two events, the time per launch their mean, cycling over
 * `slots` operand sets `stride` bytes apart, so that the GPU's queue never
 * empties between them and small operands are not read from L2. `single_s`
 * is the fastest of AP_PROFILE_SIZING_LAUNCHES launches alone (the first
 * use of a shape pays cuBLAS's heuristics), `operand_bytes` the GEMM's
 * largest operand and `cap` the bytes of each buffer. A sample lasts about
 * AP_PROFILE_BATCH_S, with at most AP_PROFILE_MAX_REPS launches; a launch
 * that long or longer is timed alone. */
#define AP_PROFILE_SIZING_LAUNCHES 3
#define AP_PROFILE_BATCH_S 1e-3
#define AP_PROFILE_MAX_REPS 64
typedef struct {
    int reps, slots;
    size_t stride;
} ap_profile_batch;
ap_profile_batch ap_profile_gemm_batch(double single_s, size_t operand_bytes, size_t cap);
/* What a cluster file's measured.gemm_timing says about the above and the
 * cuBLASLt call each launch makes (gpu_gemm_lt.c). */
#define AP_PROFILE_GEMM_TIMING                                                 \
    "batches of launches back to back over operand sets beyond L2, median of " \
    "the batches; cuBLASLt TN, 32 MiB workspace, the heuristic's first algorithm"

/* Statistics over n samples (the input is not modified). The percentile p in
 * [0, 100] interpolates linearly between order statistics (numpy's default);
 * the median is the 50th percentile. NAN when n < 1. */
double ap_profile_percentile(const double *x, int n, double p);
double ap_profile_median(const double *x, int n);

/* nccl-tests bandwidths (doc/PERFORMANCE.md): algbw = size / time, where size
 * is the nccl-tests "size" column (see ap_coll_sample), and busbw = algbw times
 *   all_reduce 2(n-1)/n;  all_gather, reduce_scatter, all_to_all (n-1)/n;
 *   send_recv 1. */
double ap_profile_busbw_factor(ap_coll op, int ranks);
double ap_profile_algbw(double bytes, double seconds);
double ap_profile_busbw(ap_coll op, int ranks, double bytes, double seconds);

/* The per-rank buffers of one collective of nominal size `bytes` over `ranks`
 * ranks with elements of `elem` bytes, as nccl-tests lays them out: element
 * counts sent and received per rank, the count exchanged with each peer
 * (all-to-all), and the size actually moved in the nccl-tests sense (the
 * nominal size rounded down to whole elements per rank). Returns 0 when the
 * size is too small to give every rank one element, else 1. */
typedef struct {
    size_t send_count, recv_count, peer_count;
    double bytes;
} ap_profile_coll_shape;

int ap_profile_coll_shape_of(ap_coll op, int ranks, double bytes, size_t elem,
                             ap_profile_coll_shape *s);

/* Fits t = alpha + f * bytes / busbw to the measured all-reduce samples of
 * the largest group that lies in one node (inter = 0) or spans nodes
 * (inter = 1): busbw from the slope between its smallest and largest message,
 * alpha from the smallest, so that the line passes through both. Returns 0
 * (and leaves *fit alone) when no such group has two sizes measured. */
typedef struct {
    int ranks, nodes;  /* the group fitted */
    double busbw, alpha;
} ap_profile_link_fit;

int ap_profile_fit_link(const ap_coll_sample *s, int n, int inter,
                        ap_profile_link_fit *fit);

/* What a profiling run found and measured. */
typedef struct {
    char gpu_name[256];
    double hbm_bytes;      /* totalGlobalMem */
    int sm_count;
    int cc_major, cc_minor;
    int nodes, gpus_per_node;
    double hbm_bw;         /* measured copy bandwidth (read + write), 0 if none */
    int ngemm;
    ap_gemm_sample *gemm;  /* owned by the result */
    int ncoll;
    ap_coll_sample *coll;  /* owned by the result */
    char date[32];         /* ISO 8601, UTC */
    char command[AP_PROFILE_CMD_LEN];
} ap_profile_result;

void ap_profile_result_free(ap_profile_result *r);

/* The preset whose peak numbers fit a GPU named by the CUDA driver
 * ("NVIDIA H100 80GB HBM3" -> "h100-sxm"), or NULL for an unknown GPU. */
const char *ap_profile_preset_for_gpu(const char *gpu_name);

/* Builds the cluster a profile describes: the matching preset's peaks (for an
 * unknown GPU, the h100-sxm preset scaled to the measured bf16 GEMM peak),
 * the detected name, SM count and memory, the measured HBM bandwidth, date
 * and command, links fitted to the measured collectives (so that the
 * analytic model agrees with the measurement where the tables do not
 * reach), and copies of the measured tables.
 * The caller frees *c with ap_cluster_free(). */
int ap_profile_build_cluster(const ap_profile_result *r, ap_cluster *c,
                             char *err);
/* The cluster file text of a profile, with its measured tables, date,
 * command and HBM bandwidth and each sample's tflops, algbw and busbw
 * (written by ap_cluster_to_json). The caller frees it. */
char *ap_profile_cluster_json(const ap_cluster *c, char *err);
/* Writes text to path (atomically: a temporary file renamed into place). */
int ap_profile_write_file(const char *path, const char *text, char *err);

/* The estimated wall time of a run with options o on `gpus` GPUs of cluster c
 * (roofline GEMMs, the FP8 ones too when c has an FP8 peak, alpha-beta
 * collectives, communicator set-up), used to keep the default grids inside
 * their budgets: --quick under 2 minutes and a full
 * run under 15 on an 8-GPU node. */
double ap_profile_estimate_seconds(const ap_profile_options *o,
                                   const ap_cluster *c, int gpus);
/* One line, into buf, of what a run with options o on `gpus` GPUs named
 * gpu_name (with FP8 tensor cores or not) measures and about how long it
 * takes by ap_profile_estimate_seconds with the GPU's preset (h100-sxm's
 * figures for a GPU no preset names), for the run to print before it
 * starts. AP_EINPUT, with err set, when o asks for FP8 on a GPU without it. */
int ap_profile_describe(const ap_profile_options *o, const char *gpu_name,
                        int has_fp8, int gpus, char *buf, size_t len, char *err);

/* Measures and writes o->out. Exists only when AP_HAVE_PROFILER is defined.
 * Progress goes to stderr. Returns AP_EINPUT when no usable CUDA device is
 * found (the message says why), AP_EINTERNAL when a CUDA, cuBLAS, NCCL or MPI
 * call fails. */
int ap_profile_run(const ap_profile_options *o, char *err);

#endif
