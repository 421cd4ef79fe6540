/* costmodel.h -- what compute, communication and memory cost on a cluster.
 *
 * A cluster is nodes x GPUs per node with per-GPU peak FLOP/s, HBM capacity
 * and bandwidth, and the bandwidth and latency of the intra-node and
 * inter-node links. It comes from a preset (datasheet numbers and documented
 * achievable efficiencies, each with its source in docs/cluster-format.md) or
 * from a cluster file, which may carry tables measured by `autopar profile`;
 * measured tables override the analytic model wherever they cover a query.
 *
 * Units: seconds, bytes, FLOP/s, bytes/s throughout.
 *
 * Ownership: the caller owns an ap_cluster and releases it with
 * ap_cluster_free(), which frees the measured tables inside it.
 */
#ifndef AP_COSTMODEL_H
#define AP_COSTMODEL_H

#include "graph/graph.h"

#define AP_NDTYPES 6 /* entries of ap_dtype */
#define AP_ATTN_LEN_MAX 16 /* most points of a flash-attention length curve */

/* One measured GEMM: C[m,n] = A[m,k] B[k,n] in dtype, median seconds. */
typedef struct {
    ap_dtype dtype;
    double m, n, k;
    double seconds;
} ap_gemm_sample;

typedef enum {
    AP_COLL_ALLREDUCE,
    AP_COLL_ALLGATHER,
    AP_COLL_REDUCESCATTER,
    AP_COLL_ALLTOALL,
    AP_COLL_SENDRECV,
    AP_NCOLL
} ap_coll;

/* One measured collective: op over `ranks` GPUs that span `nodes` nodes, on a
 * buffer of `bytes` (the nccl-tests "size": the full buffer for all-reduce,
 * the gathered output for all-gather, the input for reduce-scatter), median
 * seconds. */
typedef struct {
    ap_coll op;
    int ranks, nodes;
    double bytes;
    double seconds;
} ap_coll_sample;

typedef struct {
    char name[64];          /* preset name or the detected GPU */
    char source[256];       /* file or "preset"; for messages */
    int nodes, gpus_per_node;

    double peak_flops[AP_NDTYPES]; /* dense tensor-core peak by dtype */
    double gemm_eff;   /* fraction of peak a large GEMM reaches */
    double hbm_bytes;  /* capacity per GPU */
    double hbm_bw;     /* peak bytes/s */
    double hbm_eff;    /* fraction of peak a streaming kernel reaches */
    double kernel_floor; /* seconds; the least time any kernel takes */

    double intra_bw, intra_lat; /* achievable bus bandwidth per GPU, latency */
    double inter_bw, inter_lat; /* per GPU across nodes */

    double mem_reserved; /* bytes per GPU not available to the model
                            (CUDA context, NCCL buffers, allocator slack) */

    int ngemm;
    ap_gemm_sample *gemm; /* measured, may be NULL */
    int ncoll;
    ap_coll_sample *coll; /* measured, may be NULL */

    /* Added after the first draft; zero-filled structs get sane defaults
     * from the functions that read them (sms 0 disables wave quantisation,
     * tile 0 means 128x128, attn_eff 0 means gemm_eff). */
    char gpu_name[128];    /* the GPU's marketing or driver name */
    int sms;               /* streaming multiprocessors, for wave quantisation */
    int tile_m, tile_n;    /* output tile of the large-GEMM kernels */
    double attn_eff;       /* fraction of peak a flash-attention forward reaches */
    double hbm_bw_measured;/* streaming bytes/s measured by the profiler, or 0;
                              replaces hbm_bw * hbm_eff when set */
    int has_measured;      /* the file had a "measured" section */
    char measured_date[64];
    char measured_command[256];
    /* How the GEMM samples were timed, in words ("" for files written
     * before the profiler said): a profile's training-step rate belongs to
     * one way of timing, so a file records its own. */
    char measured_gemm_timing[160];
    /* Added later still: the fraction of peak a flash-attention backward
     * reaches on its 2.5x-forward FLOPs; 0 means attn_eff (the pricing of
     * cluster files written before the field existed). */
    double attn_bwd_eff;
    /* Set by `autopar calibrate` (ap_calibrate_megatron): the factor the
     * tensor-core efficiencies above were scaled by to match a measured
     * step, that step in seconds, and the run it came from; 0 and "" on a
     * cluster that was not calibrated. */
    double calib_scale, calib_measured_s;
    char calib_from[256];
    /* Added later: flash attention's rate by kernel length, as factors on
     * attn_eff (forward, causal or not) and attn_bwd_eff (backward) at
     * attn_len_n increasing lengths; attn_len_n 0 means no curve (every
     * length at the efficiency itself, the pricing of files without one).
     * Fixed arrays, so that a cluster still copies by assignment and owns
     * nothing more to free. ap_attention_length_factor() reads them. */
    int attn_len_n;
    double attn_len[AP_ATTN_LEN_MAX];
    double attn_len_causal[AP_ATTN_LEN_MAX];
    double attn_len_noncausal[AP_ATTN_LEN_MAX];
    double attn_len_bwd[AP_ATTN_LEN_MAX];
    /* Added with FP8 pricing's measured rate: the fraction of the fp8 peak
     * an FP8 GEMM reaches, which is less than gemm_eff's of the bf16 peak;
     * 0 means gemm_eff (files written before the field price as they did).
     * gemm_eff_for() picks it. */
    double gemm_eff_fp8;
} ap_cluster;

/* The most GPUs a cluster may have (docs/hardening.md). */
#define AP_MAX_GPUS 1000000

/* Presets: "a100-80g", "a100-40g", "h100-sxm", "h200", "b200", "h800".
 * Fills *c for `gpus` GPUs in nodes of `gpus_per_node` (0 = the preset's
 * default). */
int ap_cluster_preset(const char *name, int gpus, int gpus_per_node,
                      ap_cluster *c, char *err);
/* Resizes a cluster to `gpus` GPUs in nodes of `gpus_per_node`; zero keeps
 * the current value. Fewer GPUs than a node holds make one partial node;
 * more must fill whole nodes, else AP_EINPUT. */
int ap_cluster_set_size(ap_cluster *c, int gpus, int gpus_per_node, char *err);
/* A comma-separated list of the preset names, for messages. */
const char *ap_cluster_preset_names(void);
/* Where the cluster's prices come from, for reports: "preset" (datasheet
 * peaks and published efficiencies, the tensor-core rate scaled to a
 * published training step where the preset has one), "profile" (measured
 * GEMM or collective tables, at the rate calib_scale records when set),
 * "calibrated" (a file without tables scaled to a measured step by
 * `autopar calibrate`) or "file" (a cluster file's own figures). A static
 * string. */
const char *ap_cluster_basis(const ap_cluster *c);
/* The GEMM efficiency of dtype dt: gemm_eff_fp8 for FP8 on a GPU with an
 * fp8 peak (when set), gemm_eff otherwise. */
double ap_cluster_gemm_eff(const ap_cluster *c, ap_dtype dt);
/* Scales the tensor-core rate by f: the GEMM (bf16 and FP8) and flash
 * attention (forward and backward) efficiencies together, as every
 * tensor-core kernel runs at the one clock a measured step reveals. */
void ap_cluster_scale_rate(ap_cluster *c, double f);
/* Undoes a calibration (calib_scale, a preset's included): the tensor-core
 * efficiencies back at the kernel figures they were scaled from, and the
 * calibration record cleared. A profile starts from these, since it
 * measures kernels, not training steps. */
void ap_cluster_kernel_rate(ap_cluster *c);
/* A profile's rate: c back at its kernel figures, then scaled to the
 * training-step rate published runs imply over measured kernels (every
 * BF16 H100 run priced with a measured H100 profile; costmodel/preset.c),
 * recorded as c's calibration. Measured GEMM times scale with it
 * (ap_cost_gemm). `autopar profile` writes its file at this rate. */
void ap_cluster_profile_rate(ap_cluster *c);
/* Loads a cluster file (docs/cluster-format.md). `gpus` and `gpus_per_node`,
 * when non-zero, override the file's counts. */
int ap_cluster_load(const char *path, int gpus, int gpus_per_node,
                    ap_cluster *c, char *err);
/* The same from text in memory; `source` names it in messages. */
int ap_cluster_parse(const char *text, size_t len, const char *source,
                     int gpus, int gpus_per_node, ap_cluster *c, char *err);
/* A preset name or a path: tries the preset first. */
int ap_cluster_resolve(const char *name_or_path, int gpus, int gpus_per_node,
                       ap_cluster *c, char *err);
/* Serialises a cluster, measured tables included; the caller frees it. */
char *ap_cluster_to_json(const ap_cluster *c);
void ap_cluster_free(ap_cluster *c);
int ap_cluster_gpus(const ap_cluster *c);
/* Memory a GPU offers the model: HBM less mem_reserved. */
double ap_cluster_usable_bytes(const ap_cluster *c);
/* Bytes/s a streaming kernel reaches: the measured figure, else
 * hbm_bw * hbm_eff. */
double ap_cluster_hbm_bw(const ap_cluster *c);
/* Parses a collective's name ("all_reduce", ...); -1 when unknown. */
int ap_coll_from_name(const char *s);

/* Compute. A GEMM's time comes from the measured table when it has samples
 * of the dtype (interpolated in log space over FLOPs), else from the
 * roofline with tile-quantisation efficiency, the multiply overlapping the
 * operands' loads and the output's store after it; never below
 * kernel_floor. */
double ap_cost_gemm(const ap_cluster *c, ap_dtype dt, double m, double n,
                    double k);
/* Batched GEMM (attention scores, experts): `batch` independent GEMMs. */
double ap_cost_bgemm(const ap_cluster *c, ap_dtype dt, double batch, double m,
                     double n, double k);
/* The dtype a GEMM of input dtype dt writes: dt, bf16 for FP8. */
ap_dtype ap_gemm_out_dtype(ap_dtype dt);
/* Bytes a GEMM of dtype dt stores per output element: the size of
 * ap_gemm_out_dtype(dt). */
double ap_gemm_out_bytes(ap_dtype dt);
/* ap_cost_bgemm with `out` bytes moved per output element in place of
 * ap_gemm_out_bytes(dt): twice the output's size for a GEMM that
 * accumulates into its output (cuBLAS's beta = 1 reads it and writes it),
 * as a weight gradient into Megatron's main_grad. */
double ap_cost_bgemm_out(const ap_cluster *c, ap_dtype dt, double batch,
                         double m, double n, double k, double out);
/* The GEMMs of `groups` experts, each m x n x k, as Transformer Engine's
 * GroupedLinear runs them: one cuBLAS GEMM per expert over
 * AP_GROUPED_GEMM_STREAMS streams (TE's num_compute_streams), so in rounds
 * of that many concurrent GEMMs, each round ap_cost_bgemm(round, m, n, k):
 * tiles quantised per expert, waves over the round's tiles. One host
 * thread launches the GEMMs one after another, so the whole takes at least
 * groups x kernel_floor however short each GEMM is. groups below 1 is
 * ap_cost_bgemm's. */
#define AP_GROUPED_GEMM_STREAMS 4
double ap_cost_grouped_gemm(const ap_cluster *c, ap_dtype dt, double groups,
                            double m, double n, double k);
/* The same with `out` bytes per output element (ap_cost_bgemm_out). */
double ap_cost_grouped_gemm_out(const ap_cluster *c, ap_dtype dt, double groups,
                                double m, double n, double k, double out);
/* A memory-bound kernel: max(flops / peak_fp32, bytes / (hbm_bw*hbm_eff)). */
double ap_cost_memop(const ap_cluster *c, double flops, double bytes);
/* Megatron-LM's vocabulary-parallel cross entropy over `logits` elements of
 * dtype dt on this rank: the logits upcast to fp32 and a chain of fp32
 * kernels over them (max, subtract, exp, sum, divide), forward; backward,
 * one multiply and the cast back. */
double ap_cost_cross_entropy(const ap_cluster *c, ap_dtype dt, double logits,
                             int backward);
/* Which cross entropy runs the loss (docs/cost-model.md, "The loss"). The
 * zero value is Megatron-LM's default, so a context or plan that does not
 * say prices as before. */
typedef enum {
    AP_CE_UNFUSED, /* vocab_parallel_cross_entropy: one fp32 kernel a step */
    AP_CE_NATIVE,  /* --cross-entropy-loss-fusion: Megatron-Core's
                      torch.compile'd steps (fused_cross_entropy.py) */
    AP_CE_TE       /* --cross-entropy-fusion-impl te: Transformer Engine's
                      Triton kernels, the gradient written into the logits */
} ap_ce_impl;
/* "unfused", "native" or "te"; a static string. */
const char *ap_ce_impl_name(ap_ce_impl impl);
/* The name's value into *out: 0, or -1 (*out untouched) for another name. */
int ap_ce_impl_parse(const char *name, ap_ce_impl *out);
/* HBM bytes one logit of dtype dt costs the loss under impl, forward or
 * backward (unfused bf16: 38 and 14). */
double ap_cost_cross_entropy_bytes(ap_ce_impl impl, ap_dtype dt, int backward);
/* Bytes per logit the loss keeps for backward: the fp32 softmax (4), or
 * under te the gradient in the logits' own dtype. */
double ap_cost_cross_entropy_saved(ap_ce_impl impl, ap_dtype dt);
/* The loss over `logits` elements under impl: ap_cost_memop of its bytes;
 * AP_CE_UNFUSED is ap_cost_cross_entropy. */
double ap_cost_cross_entropy_impl(const ap_cluster *c, ap_ce_impl impl, ap_dtype dt,
                                  double logits, int backward);
/* The curves of a cluster's attention rate by kernel length
 * (gpu.attention_by_length in docs/cluster-format.md). */
typedef enum {
    AP_ATTN_FWD_CAUSAL,    /* forward with a causal mask, s = t */
    AP_ATTN_FWD_NONCAUSAL, /* forward without a mask */
    AP_ATTN_BWD            /* backward (measured without a mask) */
} ap_attn_curve;
/* The factor on attn_eff (forward curves) or attn_bwd_eff (backward) for a
 * kernel whose inner loop runs over `length` tokens: the forward loops over
 * the keys (t), the backward over the queries (s). Linear in log(length)
 * between the curve's points, the end points' factors outside them; 1 when
 * the cluster has no curve or length is not positive. */
double ap_attention_length_factor(const ap_cluster *c, ap_attn_curve curve,
                                  double length);
/* Fused attention forward (flash): b*n heads, s queries, t keys, head dims
 * d (scores) and e (values); causal halves the work. The compute term runs
 * at attn_eff times the length factor for t (capped at the peak). */
double ap_cost_attention(const ap_cluster *c, ap_dtype dt, double bn, double s,
                         double t, double d, double e, int causal);
/* Its backward, arguments as above: 2.5x the forward's FLOPs (five matmuls,
 * the scores recomputed, against the forward's two) at attn_bwd_eff (else
 * attn_eff) times the backward length factor for s (capped at the peak),
 * and the backward's traffic, q, k, v, o and dO in and dQ, dK and dV out:
 * twice the forward's bytes. Never below kernel_floor. */
double ap_cost_attention_backward(const ap_cluster *c, ap_dtype dt, double bn,
                                  double s, double t, double d, double e,
                                  int causal);
/* Context-parallel flash attention as Transformer Engine runs it for
 * Megatron-Core (AttnFuncWithCPAndKVP2P in transformer_engine/pytorch/
 * attention/dot_product_attention/context_parallel.py, --cp-comm-type p2p,
 * bshd/sbhd, not fp8), forward or, with `backward`, backward, on one of `cp`
 * ranks that each hold s query rows (the whole sequence over cp) of bn query
 * heads and bkv KV heads (both times the batch). Causal, the load-balanced
 * split: cp steps, the first causal over the local rows, the others over
 * half the queries or half the keys; without a mask, cp steps of s x s.
 * Every step is its own ap_cost_attention(_backward) at its block's size,
 * and every correction its own ap_cost_memop at its bytes (docs/cost-model.md
 * lists them): forward, the fp32 log-sum-exp merged and the output
 * rescaled into the activation dtype each step; backward, dQ and dK, dV
 * copied or added into their buffers each step, in the activation dtype.
 * The slowest rank's time; the KV ring's traffic is ap_cost_cp_ring's.
 * cp <= 1 is plain ap_cost_attention(_backward) over s x s. */
double ap_cost_attention_cp(const ap_cluster *c, ap_dtype dt, double bn, double bkv,
                            double s, double d, double e, int causal, int cp,
                            int backward);
/* The KV ring of that attention, arguments as for ap_cost_attention_cp and
 * `nodes` the nodes the cp ranks span (more than 1: some hop crosses nodes
 * and the ring, in lock step, runs at the inter-node send/recv). Each
 * transfer runs beside the work TE queues before waiting for it, so only
 * what outlasts that work is exposed, hop being ap_cost_sendrecv of
 * `blocks` local KV blocks (bkv * s * (d + e) elements of dt):
 *   forward   sum over steps j < cp-1 of
 *               max(0, hop(1) - kernel_j - lse merge_j)
 *   backward  sum over steps i of max(0, hop(b_i) - kernel_i - dq add_i),
 *               b_0 = 1 (KV), b_i = 2 (KV and dKV), b_cp-1 = 1 (the last
 *               dKV hop)
 * per rank; returned is the most over ranks of steps plus ring less the
 * most of the steps alone, so that ap_cost_attention_cp plus this is the
 * slowest rank's time. 0 when cp <= 1. */
double ap_cost_cp_ring(const ap_cluster *c, ap_dtype dt, double bn, double bkv,
                       double s, double d, double e, int causal, int cp, int nodes,
                       int backward);

/* One rank's share of the above: the time of rank `rank`'s steps (what
 * ap_cost_attention_cp takes the most of) and, in *ring, its exposed ring
 * time (with the steps, what ap_cost_cp_ring paces by). For reports and
 * for checking that the slowest rank is found without pricing every one.
 * 0 (and *ring 0) outside 0 <= rank < cp or for cp <= 1. */
double ap_cost_attention_cp_rank(const ap_cluster *c, ap_dtype dt, double bn,
                                 double bkv, double s, double d, double e,
                                 int causal, int cp, int nodes, int rank,
                                 int backward, double *ring);
/* One flash-attention kernel over s queries that are the last s of its t
 * keys (t >= s), forward or backward: causal, the mask aligned to the
 * bottom right, 2*bn*(s*t - s*s/2)*(d + e) FLOPs forward; s == t, or no
 * mask, is ap_cost_attention(_backward). */
double ap_cost_attention_rect(const ap_cluster *c, ap_dtype dt, double bn, double s,
                              double t, double d, double e, int causal, int backward);
/* One causal flash-attention kernel over s tokens under a sliding window
 * of w keys per query (its own included), forward or backward: the
 * kernel skips the blocks outside the band, leaving s*w - w*w/2 scores
 * per head, and each block of queries (forward) or of keys (backward)
 * loops over at most w of the other, so the length curves are read at w.
 * A window of s or more, or 0, is ap_cost_attention(_backward). */
/* The kernel of h queries at positions q0 .. q0 + h - 1 of a causal
 * sequence under a sliding window of w keys (one chunk of Transformer
 * Engine's all-gather context parallelism): each query meets min(p + 1, w)
 * keys, the kernel reads the min(q0 + h, h + w - 1) keys the chunk's
 * queries meet, and its loops run over at most w of them (forward) or
 * min(h, w) queries (backward). w of q0 + h or more, or 0, is the causal
 * rectangle ap_cost_attention_rect(h, q0 + h). */
double ap_cost_attention_band(const ap_cluster *c, ap_dtype dt, double bn, double q0,
                              double h, double w, double d, double e, int backward);
double ap_cost_attention_window(const ap_cluster *c, ap_dtype dt, double bn, double s,
                                double w, double d, double e, int backward);
/* Chunked attention over s tokens in chunks of `chunk` (Llama 4's), forward
 * or backward: Megatron-Core folds the chunks into the batch, so it is the
 * causal kernel over bn * floor(s / chunk) rows of chunk tokens, and one
 * more over what is left. A chunk of s or more, or 0, is causal attention. */
double ap_cost_attention_chunked(const ap_cluster *c, ap_dtype dt, double bn, double s,
                                 double chunk, double d, double e, int backward);

/* Context parallelism's communication type: Megatron-LM's --cp-comm-type,
 * Transformer Engine's cp_comm_type. The zero value is the p2p ring, so a
 * context or plan that does not say prices as before. */
typedef enum {
    AP_CP_P2P,       /* AttnFuncWithCPAndKVP2P: the KV ring (above) */
    AP_CP_ALLGATHER, /* AttnFuncWithCPAndKVAllGather: K, V all-gathered */
    AP_CP_A2A        /* AttnFuncWithCPAndQKVOA2A: Ulysses' all-to-alls */
} ap_cp_comm;
/* "p2p", "allgather" or "a2a"; a static string. */
const char *ap_cp_comm_name(ap_cp_comm t);
/* The name's value into *out: 0, or -1 (*out untouched) for another name. */
int ap_cp_comm_parse(const char *name, ap_cp_comm *out);
/* Context-parallel attention under communication type `type`, arguments as
 * for ap_cost_attention_cp (s the rank's query rows, cp ranks; bshd/sbhd,
 * not fp8), forward or backward: the slowest rank's kernels and the copies
 * between them, without the communication. p2p is ap_cost_attention_cp.
 *   allgather  two kernels, one per local chunk c of s/2 rows (c = r and
 *              2cp-1-r) against keys [0, (c+1)s/2), causal bottom right
 *              (all cp*s keys without a mask), on two streams; forward the
 *              gathered K, V reordered (index_select) and each step's
 *              output copied into out; backward K, V gathered and reordered
 *              again, dK, dV zeroed over cp*s rows, each step's dq copied
 *              and dK, dV added into their rows, the sums reordered.
 *   a2a        one kernel over all cp*s rows for bn/cp heads (bkv/cp KV
 *              heads), and each all-to-all's two copies (the layout change
 *              before it and the chunk reorder after it): q, k, v before
 *              and out after forward; out, dout before and dq, dk, dv after
 *              backward.
 * With a sliding window of `window` keys (0: none) shorter than the cp*s
 * rows: allgather's chunks each run their band (ap_cost_attention_band)
 * against the s/2 + window - 1 keys before them, TE's
 * get_kv_seq_info_after_all_gather; a2a's kernel is the window's
 * (ap_cost_attention_window) over bn/cp heads. p2p takes none: Transformer
 * Engine's ring refuses windows, and the caller refuses context
 * parallelism under one with it.
 * Transformer Engine runs neither allgather nor a2a with MLA (d != e):
 * the caller refuses that, as it refuses heads cp does not divide. */
double ap_cost_attention_cp_comm(const ap_cluster *c, ap_cp_comm type, ap_dtype dt,
                                 double bn, double bkv, double s, double d, double e,
                                 int causal, double window, int cp, int backward);
/* What that attention's communication adds to it on cp ranks spanning
 * `nodes` nodes (ap_cost_collective's bandwidth). p2p is ap_cost_cp_ring.
 *   allgather  exposed whole (gather_along_first_dim on the compute
 *              stream, before the kernels): forward all-gathers of K
 *              (bkv*cp*s*d elements of dt gathered) and of V (e);
 *              backward both again, then reduce-scatters of dK and dV of
 *              the same sizes.
 *   a2a        all_to_all_single of each tensor (its local elements, the
 *              nccl-tests size), queued on NCCL's stream while the next
 *              tensor's layout copy runs and the previous one's reorder
 *              follows on a side stream; the kernel waits for all. What the
 *              chain of copies and all-to-alls takes beyond its copies
 *              alone: forward q, k, v then out (4 per layer), backward
 *              out, dout then dq, dk, dv.
 * 0 when cp <= 1. */
double ap_cost_cp_comm(const ap_cluster *c, ap_cp_comm type, ap_dtype dt, double bn,
                       double bkv, double s, double d, double e, int causal, int cp,
                       int nodes, int backward);

/* Unfused attention (Megatron-LM before flash attention), forward or, with
 * `backward`, backward; arguments as for ap_cost_attention, and `dropout` the
 * attention-dropout probability (0: no dropout kernels). One kernel per step,
 * so the bn*s*t scores go through HBM between them (P = bn*s*t elements of
 * size(dt) bytes; masks are 1 byte):
 *   forward   bgemm(bn, s, t, d)             QK^T, scale fused, writes P
 *           + memop(5P, 2P*size)             scale-mask-softmax
 *           + memop(2P, (2*size + 1)P)       dropout, if any: probs in,
 *                                            dropped probs and mask out
 *           + bgemm(bn, s, e, t)             PV
 *   backward  bgemm(bn, s, t, e) + bgemm(bn, t, e, s)   dP = dO V^T, dV = P^T dO
 *           + memop(2P, (2*size + 1)P)       dropout backward, if any
 *           + memop(5P, 3P*size)             softmax backward: probs and
 *                                            their gradient in, scores' out
 *           + bgemm(bn, s, d, t) + bgemm(bn, t, d, s)   dQ = dS K, dK = dS^T Q
 * Causal masking does not change the cost: the mask is applied to all s*t
 * scores, none is skipped, which is why there is no `causal` argument.
 * Recomputation is the caller's: it adds the forward again. */
double ap_cost_attention_unfused(const ap_cluster *c, ap_dtype dt, double bn,
                                 double s, double t, double d, double e,
                                 double dropout, int backward);

/* Communication, alpha-beta with the nccl-tests bus-bandwidth conventions:
 *   all-reduce       t = alpha + 2(n-1)/n * bytes / busbw
 *   all-gather       t = alpha +  (n-1)/n * bytes / busbw
 *   reduce-scatter   t = alpha +  (n-1)/n * bytes / busbw
 *   all-to-all       t = alpha +  (n-1)/n * bytes / busbw
 *   send/recv        t = alpha +            bytes / busbw
 * where busbw is the intra-node bandwidth when the group lies in one node
 * (nodes == 1) and the inter-node bandwidth otherwise. A measured table for
 * the same op, ranks and nodes is interpolated instead. n == 1 costs 0. */
double ap_cost_collective(const ap_cluster *c, ap_coll op, int ranks, int nodes,
                          double bytes);
/* `bytes` moved by collective `op` in buckets of `bucket` bytes, as a
 * framework moves gradients it has gathered into buckets: each byte pays its
 * share of one bucket's collective, latency included, so the many small
 * tensors of one bucket pay its latency once between them. A tensor larger
 * than a bucket spans several. bucket <= 0 prices `bytes` as one collective
 * of its own (ap_cost_collective). */
double ap_cost_collective_bucketed(const ap_cluster *c, ap_coll op, int ranks, int nodes,
                                   double bytes, double bucket);
double ap_cost_allreduce(const ap_cluster *c, int ranks, int nodes, double bytes);
/* An all-reduce of a few bytes to a few kilobytes (FP8 amaxes, a loss), as
 * NCCL runs it: with its LL protocol, on the ring or the tree, whichever its
 * tuning model finds faster; latency only. A measured table for the group
 * is read at `bytes` instead (a profile measures this size's real time). */
double ap_cost_allreduce_small(const ap_cluster *c, int ranks, int nodes, double bytes);
double ap_cost_allgather(const ap_cluster *c, int ranks, int nodes, double bytes);
double ap_cost_reducescatter(const ap_cluster *c, int ranks, int nodes, double bytes);
double ap_cost_alltoall(const ap_cluster *c, int ranks, int nodes, double bytes);
double ap_cost_sendrecv(const ap_cluster *c, int nodes, double bytes);
/* How a MoE layer routes its tokens: `top_k` distinct experts of
 * `experts`, chosen uniformly; under group-limited routing (DeepSeek-V3's
 * n_group, topk_group; groups > 1 and group_topk < groups) from the experts
 * of group_topk of `groups` equal groups of consecutive experts, the groups
 * chosen uniformly. */
typedef struct {
    double experts;
    int top_k, groups, group_topk;
} ap_routing;

/* One dispatch (or combine: the same traffic back) of DeepEP's normal
 * kernels, as Megatron-Core's flex token dispatcher runs them (HybridEP
 * moves the same traffic the same way): over an expert-parallel group of
 * `ranks` GPUs on `nodes` nodes holding the experts evenly in order, each
 * of a rank's tokens (`token_bytes` of them in all, one copy each) routed
 * as r says. A token crosses to each other node that holds one of its
 * experts once, over RDMA to the GPU of its own rail there, and reaches
 * each GPU that holds one over NVLink once, from its own rank or forwarded
 * by that node's receiver: per rank, token_bytes * (nodes - 1) * P(a node
 * is hit) over the NIC, and token_bytes * (ranks/nodes - 1) * P(a GPU is
 * hit) * nodes over NVLink, the two at once, after the all-to-all's
 * latency. The alltoall dispatcher instead sends all top_k copies
 * (ap_cost_alltoall). */
double ap_cost_deepep(const ap_cluster *c, int ranks, int nodes, const ap_routing *r,
                      double token_bytes);
/* The chance that a token routed to `top_k` of `experts` experts chosen
 * uniformly without repeats picks at least one of a given `held` of them:
 * 1 - C(experts - held, top_k) / C(experts, top_k). */
double ap_route_hit(double experts, double held, int top_k);
/* The same under group-limited routing, for `held` consecutive experts
 * that lie within one group, or that are whole groups: within one group,
 * the group is among the token's group_topk (group_topk/groups) and its
 * top_k within their experts hit the set; whole groups, summed over how
 * many of them the token's groups include. Without a limit (groups <= 1
 * or group_topk >= groups), ap_route_hit. */
double ap_route_hit_groups(double experts, double held, int top_k, int groups, int group_topk);
const char *ap_coll_name(ap_coll op);
/* nccl-tests' busbw / algbw factor for `ranks` GPUs: 2(n-1)/n for
 * all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for
 * send/recv; 0 when ranks <= 1. */
double ap_coll_bus_factor(ap_coll op, int ranks);

/* Model states per GPU in bytes for `params` parameters of one replica held by
 * this GPU, under mixed-precision Adam (bf16 params and grads, fp32 master,
 * m and v: 16 bytes per parameter unsharded) and a ZeRO stage over `dp`
 * data-parallel ranks: 0 none, 1 optimizer states (Megatron's distributed
 * optimizer), 2 + gradients, 3 + parameters. */
typedef enum { AP_ZERO_NONE, AP_ZERO_1, AP_ZERO_2, AP_ZERO_3 } ap_zero;
typedef struct {
    double params, grads, optimizer, total;
} ap_model_states;
ap_model_states ap_mem_model_states(double params, int dp, ap_zero zero);
/* The same with `grad_bytes` bytes per gradient element: 2 is
 * ap_mem_model_states; 4 is Megatron-LM's fp32 main-gradient buffer
 * (--bf16 without --grad-reduce-in-bf16), whose shard the distributed
 * optimizer steps from directly, so that bf16 parameters with fp32
 * gradients hold 18 bytes per parameter unsharded and 6 + 12/dp under
 * ZeRO-1 (Megatron-LM's docs/source/api-guide/dist_optimizer.md), 2 + 16/dp
 * under ZeRO-2 and 18/dp under ZeRO-3. */
ap_model_states ap_mem_model_states_grad(double params, int dp, ap_zero zero,
                                         double grad_bytes);
/* The dtypes the precision-aware optimizer keeps its states in: Megatron-LM's
 * --use-precision-aware-optimizer with --main-params-dtype, --exp-avg-dtype
 * and --exp-avg-sq-dtype (OptimizerConfig's main_params_dtype, exp_avg_dtype,
 * exp_avg_sq_dtype, handed to Transformer Engine's FusedAdam). FP8 is
 * FusedAdam's uint8 state: E4M3 with one fp32 scale per tensor, whose bytes
 * are not counted. NONE, for main weights only, is no copy at all: the
 * optimizer updates the model's own weights, as apex's
 * DistributedFusedAdam does when its state dtype is the model's (NeMo's
 * optim dtype bf16 with a bf16 model: store_params false). REMAINDER, for
 * main weights only, is fp32 main weights of bf16 weights kept as their 16
 * low bits, an int16 beside the bf16 weight that holds the other 16
 * (Transformer Engine's FusedAdam under store_param_remainders, on by
 * default in Megatron-Core's OptimizerConfig under the precision-aware
 * optimizer with TE 2.1 or later): 2 bytes. The zero value is fp32, so
 * that a zeroed struct keeps the 4 + 4 + 4 bytes a parameter priced
 * before. */
typedef enum {
    AP_OPT_FP32, AP_OPT_FP16, AP_OPT_BF16, AP_OPT_FP8, AP_OPT_NONE, AP_OPT_REMAINDER
} ap_opt_dtype;
typedef struct {
    ap_opt_dtype main_params, exp_avg, exp_avg_sq;
} ap_opt_dtypes;
/* "fp32", "fp16", "bf16", "fp8", "none" or "remainder"; a static string. */
const char *ap_opt_dtype_name(ap_opt_dtype t);
/* The name's value into *out: 0, or -1 (*out untouched) for another name. */
int ap_opt_dtype_parse(const char *name, ap_opt_dtype *out);
/* Bytes of one element: 4, 2, 2, 1, 0 or 2. */
double ap_opt_dtype_bytes(ap_opt_dtype t);
/* Whether all three states are fp32 (a zeroed struct is). */
int ap_opt_dtypes_fp32(const ap_opt_dtypes *o);
/* Bytes of optimizer state a parameter: main weights + exp_avg +
 * exp_avg_sq, 12 for fp32 states. */
double ap_opt_state_bytes(const ap_opt_dtypes *o);
/* HBM bytes FusedAdam's step moves for the three states of one element,
 * read and written: 24 for fp32 states, which the kernel updates in place.
 * A state in another dtype is first copied into an fp32 buffer, the kernel
 * updates that, and the result is cast back (fused_adam.py, step,
 * get_unscaled_state, _apply_scale): bf16 24 bytes, fp16 40 (unscaled and
 * rescaled by a multiply each way, plus an amax pass), fp8 22 (an amax
 * pass and a quantizing copy), against 8 for an fp32 state; no main
 * weights, 0; remainders 4, the int16 read and written in place by
 * multi_tensor_adam_param_remainder, which rebuilds each fp32 main weight
 * from the bf16 weight and its remainder. */
double ap_opt_step_bytes(const ap_opt_dtypes *o);
/* ap_mem_model_states_grad with the optimizer's states in the dtypes of
 * `o` (NULL is fp32): ap_opt_state_bytes(o) bytes a parameter, sharded
 * over dp from ZeRO-1 on. With o fp32 it is ap_mem_model_states_grad,
 * bit for bit. */
ap_model_states ap_mem_model_states_opt(double params, int dp, ap_zero zero,
                                        double grad_bytes, const ap_opt_dtypes *o);
/* The same partitioning counted in elements, as in the ZeRO paper's table
 * (parameters P, gradients P, optimizer 2P: DDP 4P ... ZeRO-3 4P/dp). */
ap_model_states ap_mem_model_state_elems(double params, int dp, ap_zero zero);

/* Korthikanti et al. (2022) activation bytes per transformer layer, the
 * reference the graph-derived numbers are tested against:
 *   none      sbh(34 + 5as/h)
 *   tp        sbh(10 + 24/t + 5as/(ht))
 *   tp + sp   sbh(34/t + 5as/(ht))
 *   selective recomputation or flash attention drops the 5as/h term;
 *   full recomputation keeps only the layer input, 2sbh (/t with sp). */
typedef enum { AP_RECOMPUTE_NONE, AP_RECOMPUTE_SELECTIVE, AP_RECOMPUTE_FULL } ap_recompute;
double ap_mem_activation_ref(double s, double b, double h, double a, int t,
                             int sp, ap_recompute rc);

/* Pipeline schedules, simulated event by event. */
typedef enum { AP_SCHED_GPIPE, AP_SCHED_1F1B, AP_SCHED_INTERLEAVED } ap_schedule;

typedef struct {
    int stage;    /* physical stage */
    int chunk;    /* model chunk (interleaved), 0 otherwise */
    int micro;    /* micro-batch */
    int backward; /* 0 forward, 1 backward */
    double start, end;
} ap_pipe_event;

typedef struct {
    ap_schedule schedule;
    int nstages;      /* p */
    int nmicro;       /* m */
    int vchunks;      /* v: chunks per stage (interleaved), else 1 */
    const double *fwd;  /* [p*v] forward time of one micro-batch per chunk,
                           chunk c of stage i at index c*p + i */
    const double *bwd;  /* [p*v] backward time likewise */
    const double *p2p;  /* [p] activation send time from stage i to i+1,
                           and back for the gradient; the last entry is the
                           wrap from stage p-1 to stage 0 between chunks
                           (interleaved only); may be NULL for none */
    /* [p*v] indexed as fwd, or NULL: Megatron-Core's combined 1F1B
     * (--overlap-moe-expert-parallel-comm). Each stage warms up with one
     * forward more, and every steady-state forward runs merged with the
     * backward that follows it in the order, layer by layer, as one pass:
     * it starts once both inputs are there and takes fwd + bwd - pair_save
     * (the expert all-to-all the other half's compute hides), and both
     * outputs leave at its end. Warm-up and cool-down passes run alone. */
    const double *pair_save;
    /* [p*v] indexed as fwd, or NULL: Megatron-Core's
     * --defer-embedding-wgrad-compute. Seconds of a chunk's backward (the
     * output layer's weight-gradient GEMM) that wait for the end of the
     * schedule for the first defer_limit micro-batches (0: all of them),
     * as LinearWithGradAccumulationAndAsyncCommunication buffers them; the
     * stage runs them after its last pass (finish_embedding_wgrad_compute),
     * while the stages before it drain their backwards. */
    const double *defer;
    int defer_limit;
    /* [p*v] indexed as fwd, or NULL: the share of a stage's activations
     * per micro-batch that each of its chunks keeps (a stage's shares add
     * up to 1), for chunks of unequal layers; NULL is 1/v each. */
    const double *act_share;
    /* 1: leave events NULL (nevents 0). Pricing needs only the summary,
     * and a sweep simulates many schedules of thousands of passes. */
    int summary_only;
    /* 1: do not run the schedule; step is a lower bound of its makespan
     * (ap_pipe_result.bounded) and bubble 0, the rest exact. For a caller
     * that drops schedules that cannot beat one it has. */
    int bound_only;
} ap_pipe_spec;

typedef struct {
    double step;          /* makespan of the schedule */
    double bubble;        /* fraction of stage-time idle: 1 - busy/(p*step) */
    double *inflight;     /* [p] most micro-batches whose activations a stage
                             holds at once; under interleaving a chunk's
                             micro-batch counts its act_share (1/v) */
    int nevents;
    ap_pipe_event *events; /* ordered by stage, then start time; NULL
                              under summary_only */
    double *saved;        /* [p] under pair_save, the seconds a stage's
                             merged passes took less than run alone; else
                             NULL */
    double *tail;         /* [p] under defer, the seconds a stage works after
                             its last pass (the deferred weight gradients);
                             else NULL. step and bubble count them */
    int bounded;          /* step is only a lower bound (bound_only): no
                             stage ends before its first input can arrive
                             through the stages before it, plus its passes
                             and deferred work back to back */
} ap_pipe_result;

/* The exposed seconds of a stage's once-per-step data-parallel gradient
 * reduction `reduce` (seconds of collectives) that overlaps the backward
 * (--overlap-grad-reduce), where `bwd` is the stage's backward of one
 * micro-batch over all its `vchunks` model chunks and `group` the
 * micro-batches of a chunk the interleaved schedule runs back to back
 * (microbatch_group_size_per_vp_stage: min(pp, m)).
 *
 * One chunk (vchunks <= 1): the buckets reduce while the last
 * micro-batch's backward runs, max(0, reduce - bwd).
 *
 * Interleaved: Megatron-LM's get_model wraps each model chunk in a DDP of
 * its own with disable_bucketing=(model_chunk_idx > 0) (training.py), so
 * every chunk after the first reduces its gradients as one bucket, which
 * starts only when the chunk's last backward has ended. The cool-down runs
 * the last group of micro-batches chunk by chunk, v-1 down to 0, so after
 * chunk c's last backward the stage still computes c·group backwards of
 * b = bwd/v each. The reductions, r = reduce/v a chunk, share one stream
 * in that order; chunk 0's buckets reduce behind its own last backward.
 * With t = 0 the end of the stage's last backward:
 *   e = -inf; for c = v-1 .. 1: e = max(-c·group·b, e) + r;
 *   exposed = max(0, max(-b, e) + r).
 * Idle time of the cool-down hides more; it is not counted. */
double ap_pipe_grad_reduce_exposed(double reduce, double bwd, int vchunks, int group);

/* How many of nmicro micro-batches a deferral limit defers: the first
 * `limit`, 0 meaning all of them (Megatron-Core's wgrad_deferral_limit). */
int ap_pipe_deferred_micro(int limit, int nmicro);

/* Simulates the schedule; the caller frees with ap_pipe_result_free().
 * AP_EINPUT for absurd specs (p or m over 1e6, too many events, negative or
 * non-finite times) and for interleaving with m not a multiple of p. */
int ap_pipe_simulate(const ap_pipe_spec *spec, ap_pipe_result *out, char *err);
void ap_pipe_result_free(ap_pipe_result *r);

#endif
