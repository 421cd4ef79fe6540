/* compute.c -- what a kernel costs: GEMMs (measured tables or a roofline
 * with tile and wave quantisation), memory-bound kernels, and attention
 * fused (flash) or unfused. docs/cost-model.md derives each formula. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel/costmodel.h"

#define DEFAULT_TILE 128
#define MMA_GRANULE 16
#define IDW_NEIGHBOURS 4

/* The peak for a dtype; a dtype the GPU has no tensor-core path for (fp8 on
 * A100, integers) runs at the bf16 rate, which is what frameworks fall back
 * to. */
static double peak_for(const ap_cluster *c, ap_dtype dt)
{
    if ((int)dt >= 0 && dt < AP_NDTYPES && c->peak_flops[dt] > 0)
        return c->peak_flops[dt];
    if (c->peak_flops[AP_BF16] > 0)
        return c->peak_flops[AP_BF16];
    return c->peak_flops[AP_FP32] > 0 ? c->peak_flops[AP_FP32] : 1e12;
}

static double dtype_bytes(ap_dtype dt)
{
    size_t s = ap_dtype_size(dt);
    return s ? (double)s : 2.0;
}

/* A dimension smaller than the tile gets a tile shrunk to the next
 * multiple of the MMA granularity, as cuBLAS picks smaller tiles for small
 * problems; without this a matrix-vector product would be priced as a
 * full 128-row tile. */
static double tile_along(double dim, int tile)
{
    double t = tile > 0 ? tile : DEFAULT_TILE;
    double shrunk = ceil(dim / MMA_GRANULE) * MMA_GRANULE;
    return shrunk < t ? shrunk : t;
}

/* Fraction of the tensor cores a GEMM keeps busy with one tile shape: the
 * last row and column of output tiles are partly empty (tile quantisation),
 * and the last wave of tiles over the SMs is partly empty (wave
 * quantisation). */
static double quantisation_with(const ap_cluster *c, double batch, double m,
                                double n, double tm, double tn)
{
    double rows = ceil(m / tm), cols = ceil(n / tn);
    double q = (m * n) / (rows * tm * cols * tn);
    if (c->sms > 0) {
        double tiles = batch * rows * cols;
        double waves = ceil(tiles / c->sms);
        q *= tiles / (waves * c->sms);
    }
    return q;
}

/* cuBLAS's heuristics pick among tile shapes for each problem (NVIDIA's
 * "Matrix Multiplication Background" guide, section on tile and wave
 * quantisation), so a GEMM too small to fill the SMs with the largest tile
 * runs with a smaller one: take the best of the configured tile and its
 * halves. */
static double quantisation(const ap_cluster *c, double batch, double m,
                           double n)
{
    double tm = tile_along(m, c->tile_m), tn = tile_along(n, c->tile_n);
    double best = 0;
    for (int hm = 1; hm <= 2; hm++)
        for (int hn = 1; hn <= 2; hn++) {
            double um = fmax(tile_along(m, (int)(tm / hm)), MMA_GRANULE);
            double un = fmax(tile_along(n, (int)(tn / hn)), MMA_GRANULE);
            best = fmax(best, quantisation_with(c, batch, m, n, um, un));
        }
    return best;
}

/* The dtype a GEMM writes: its own, or bf16 for FP8, whose GEMMs
 * Transformer Engine runs with a bf16 output (and the profiler measures
 * so). */
ap_dtype ap_gemm_out_dtype(ap_dtype dt)
{
    return dt == AP_FP8 ? AP_BF16 : dt;
}

double ap_gemm_out_bytes(ap_dtype dt)
{
    return dtype_bytes(ap_gemm_out_dtype(dt));
}

/* The roofline with the GEMM efficiency times `rate`: 1 for the cluster's
 * own rate, 1 / calib_scale for the kernel figures it was scaled from. The
 * multiply overlaps the loads of its operands, and the output's store
 * follows it: a tile's accumulator is written once its whole k loop is
 * done, so a GEMM whose k is short cannot hide its store behind the
 * multiply (docs/cost-model.md, "GEMMs"). `out` is the bytes moved per
 * output element: the store, or a read and a store when it accumulates. */
static double analytic_at(const ap_cluster *c, ap_dtype dt, double rate,
                          double batch, double m, double n, double k,
                          double out)
{
    double eff = ap_cluster_gemm_eff(c, dt) * rate;
    double flops = 2 * batch * m * n * k;
    double compute = flops / (peak_for(c, dt) * eff * quantisation(c, batch, m, n));
    double bw = ap_cluster_hbm_bw(c);
    double in = dtype_bytes(dt) * batch * (m * k + k * n);
    return fmax(compute, in / bw) + out * batch * m * n / bw;
}

static double shape_distance(const ap_gemm_sample *s, double m, double n,
                             double k)
{
    double dm = log(m / s->m), dn = log(n / s->n), dk = log(k / s->k);
    return sqrt(dm * dm + dn * dn + dk * dk);
}

/* Measured over analytic time, interpolated in (log m, log n, log k) by
 * inverse squared distance over the nearest samples of the dtype. Scaling
 * the analytic time by this ratio returns a sample exactly at its own
 * shape and keeps the roofline's shape effects between and beyond them.
 * A sample is a kernel figure, so the ratio is taken against the roofline
 * at the kernel figures: on a cluster whose tensor-core rate is scaled to
 * training steps (calib_scale), a measured GEMM runs at that rate too.
 * Returns 0 when the table has no sample of the dtype. */
static double measured_ratio(const ap_cluster *c, ap_dtype dt, double m,
                             double n, double k)
{
    int near[IDW_NEIGHBOURS];
    double dist[IDW_NEIGHBOURS];
    int found = 0;
    for (int i = 0; i < c->ngemm; i++) {
        const ap_gemm_sample *s = &c->gemm[i];
        if (s->dtype != dt)
            continue;
        double d = shape_distance(s, m, n, k);
        int pos = found < IDW_NEIGHBOURS ? found++ : IDW_NEIGHBOURS;
        while (pos > 0 && dist[pos - 1] > d) {
            if (pos < IDW_NEIGHBOURS) {
                near[pos] = near[pos - 1];
                dist[pos] = dist[pos - 1];
            }
            pos--;
        }
        if (pos < IDW_NEIGHBOURS) {
            near[pos] = i;
            dist[pos] = d;
        }
    }
    if (!found)
        return 0;
    double kernel = c->calib_scale > 0 ? 1 / c->calib_scale : 1;
    double wsum = 0, lsum = 0;
    for (int j = 0; j < found; j++) {
        const ap_gemm_sample *s = &c->gemm[near[j]];
        double r = s->seconds / analytic_at(c, dt, kernel, 1, s->m, s->n, s->k,
                                               ap_gemm_out_bytes(dt));
        if (dist[j] < 1e-9)
            return r;
        double w = 1 / (dist[j] * dist[j]);
        wsum += w;
        lsum += w * log(r);
    }
    return exp(lsum / wsum);
}

double ap_cost_bgemm_out(const ap_cluster *c, ap_dtype dt, double batch,
                         double m, double n, double k, double out)
{
    if (!(batch > 0 && m > 0 && n > 0 && k > 0) ||
        !isfinite(batch * m * n * k))
        return 0;
    double t = analytic_at(c, dt, 1, batch, m, n, k, out);
    double r = c->ngemm ? measured_ratio(c, dt, m, n, k) : 0;
    if (r > 0)
        t *= r;
    return fmax(t, c->kernel_floor);
}

double ap_cost_bgemm(const ap_cluster *c, ap_dtype dt, double batch, double m,
                     double n, double k)
{
    return ap_cost_bgemm_out(c, dt, batch, m, n, k, ap_gemm_out_bytes(dt));
}

double ap_cost_gemm(const ap_cluster *c, ap_dtype dt, double m, double n,
                    double k)
{
    return ap_cost_bgemm(c, dt, 1, m, n, k);
}

/* Transformer Engine's GroupedLinear, what Megatron-Core's TEGroupedMLP runs
 * the experts with, issues one cuBLAS GEMM per expert (te_general_grouped_gemm
 * -> nvte_multi_stream_cublas_gemm), round robin on its compute streams, so
 * that up to that many GEMMs run at once and share the SMs: a round of them
 * has its tiles quantised per GEMM and its waves over the round's tiles
 * together, which ap_cost_bgemm of the round's size is. The rounds follow
 * each other; the last may be partial. The streams overlap the GEMMs on the
 * GPU, not their launches: the host issues each cuBLAS call in turn, and a
 * launch costs the host at least what the kernel floor allows for (5-20 us
 * of CPU per launch in PyTorch traces, by HolisticTraceAnalysis's
 * documentation), so tiny experts cost the floor each, not per round. */
double ap_cost_grouped_gemm_out(const ap_cluster *c, ap_dtype dt, double groups,
                                double m, double n, double k, double out)
{
    if (!(groups >= 1) || !isfinite(groups))
        return ap_cost_bgemm_out(c, dt, groups, m, n, k, out);
    double s = AP_GROUPED_GEMM_STREAMS;
    double full = floor(groups / s), rest = groups - full * s;
    double t = full > 0 ? full * ap_cost_bgemm_out(c, dt, s, m, n, k, out) : 0;
    t += rest > 0 ? ap_cost_bgemm_out(c, dt, rest, m, n, k, out) : 0;
    return fmax(t, groups * c->kernel_floor);
}

double ap_cost_grouped_gemm(const ap_cluster *c, ap_dtype dt, double groups,
                            double m, double n, double k)
{
    return ap_cost_grouped_gemm_out(c, dt, groups, m, n, k, ap_gemm_out_bytes(dt));
}

/* Memory-bound kernels run on the CUDA cores; the fp32 peak stands in for
 * their arithmetic limit, which they almost never reach. */
double ap_cost_memop(const ap_cluster *c, double flops, double bytes)
{
    if (!(flops > 0) && !(bytes > 0))
        return 0;
    double compute = flops > 0 ? flops / peak_for(c, AP_FP32) : 0;
    double memory = bytes > 0 ? bytes / ap_cluster_hbm_bw(c) : 0;
    return fmax(fmax(compute, memory), c->kernel_floor);
}

/* Megatron-LM's _VocabParallelCrossEntropy (megatron/core/tensor_parallel/
 * cross_entropy.py, unfused, the default without --cross-entropy-loss-fusion)
 * runs each step as its own kernel over the whole logits tensor, in fp32:
 * .float() reads the logits and writes an fp32 copy, max reads it, the
 * in-place subtract, exp and divide each read and write it, and the sum
 * reads it: 32 bytes per logit after the cast. Backward multiplies the saved
 * softmax by the loss gradient in place (8 bytes) and autograd casts the
 * gradient back to the logits' dtype. Gathering the target logits and the
 * per-token statistics touch one number per token, which is nothing beside
 * the vocabulary. Logits already in fp32 skip both casts. */
static double unfused_bytes(ap_dtype dt, int backward)
{
    double cast = dt == AP_FP32 ? 0 : dtype_bytes(dt) + 4;
    return (backward ? 8 : 32) + cast;
}

/* Megatron-Core's fused_cross_entropy.py as 0.8 and 0.9 shipped it compiles
 * each step with torch.compile. Forward: calculate_logits_max writes the
 * fp32 copy and takes its max in one kernel (read the logits, write 4; fp32
 * logits are only read); calculate_predicted_logits subtracts, exponentiates
 * and sums in place, and because the graph both mutates its input and
 * reduces over it Inductor computes into a fresh buffer and copies it back
 * (4 + 4, then 4 + 4); calculate_cross_entropy_loss divides in place (8).
 * Backward, calculate_gradients scatters into the saved softmax, so it too
 * gets a fresh copy (8), then multiplies by the loss gradient, writing the
 * fp32 result back into the softmax (4 + 4) and the gradient in bf16, a
 * cast the code hard-codes (2); autograd casts that to other logits'
 * dtypes. */
static double native_bytes(ap_dtype dt, int backward)
{
    if (backward)
        return 8 + 8 + 2 + (dt == AP_BF16 ? 0 : 2 + dtype_bytes(dt));
    double max = dt == AP_FP32 ? 4 : dtype_bytes(dt) + 4;
    return max + 16 + 8;
}

/* Transformer Engine's parallel_cross_entropy (transformer_engine/pytorch/
 * triton/cross_entropy.py) works in the logits' own dtype, upcasting in
 * registers: online_softmax_kernel reads each row once for its max and sum,
 * cross_entropy_kernel reads it again and writes the gradient over it, so
 * forward is three passes of the logits' bytes. Backward, element_mul_kernel
 * scales that gradient in place by the loss gradient: two passes. */
static double te_bytes(ap_dtype dt, int backward)
{
    return (backward ? 2 : 3) * dtype_bytes(dt);
}

double ap_cost_cross_entropy_bytes(ap_ce_impl impl, ap_dtype dt, int backward)
{
    return impl == AP_CE_TE ? te_bytes(dt, backward)
         : impl == AP_CE_NATIVE ? native_bytes(dt, backward)
                                : unfused_bytes(dt, backward);
}

/* The fp32 softmax backward starts from, or under TE the gradient already
 * written into the logits buffer. */
double ap_cost_cross_entropy_saved(ap_ce_impl impl, ap_dtype dt)
{
    return impl == AP_CE_TE ? dtype_bytes(dt) : 4;
}

/* FLOPs per logit: max, subtract, exp, sum and divide forward, one multiply
 * backward; TE's two forward passes each exponentiate. */
static double ce_flops(ap_ce_impl impl, int backward)
{
    if (backward)
        return 1;
    return impl == AP_CE_TE ? 7 : 5;
}

double ap_cost_cross_entropy_impl(const ap_cluster *c, ap_ce_impl impl, ap_dtype dt,
                                  double logits, int backward)
{
    if (!(logits > 0))
        return 0;
    return ap_cost_memop(c, ce_flops(impl, backward) * logits,
                         ap_cost_cross_entropy_bytes(impl, dt, backward) * logits);
}

double ap_cost_cross_entropy(const ap_cluster *c, ap_dtype dt, double logits,
                             int backward)
{
    return ap_cost_cross_entropy_impl(c, AP_CE_UNFUSED, dt, logits, backward);
}

static const char *const ce_names[] = {"unfused", "native", "te"};
#define CE_IMPLS ((int)(sizeof ce_names / sizeof ce_names[0]))

const char *ap_ce_impl_name(ap_ce_impl impl)
{
    return (int)impl >= 0 && (int)impl < CE_IMPLS ? ce_names[impl] : "unfused";
}

int ap_ce_impl_parse(const char *name, ap_ce_impl *out)
{
    for (int i = 0; i < CE_IMPLS; i++)
        if (!strcmp(name, ce_names[i])) {
            *out = (ap_ce_impl)i;
            return 0;
        }
    return -1;
}

/* Flash attention never writes the s x t scores to HBM: it reads q, k, v
 * and writes o once, and spends 2*s*t*d FLOPs on scores plus 2*s*t*e on
 * the weighted sum per head; a causal mask lets it skip half the blocks.
 * These are the FLOPs FlashAttention's benchmark script counts, so the
 * published TFLOP/s divided by peak are the efficiencies used here. */
static double attention_flops(double bn, double s, double t, double d,
                              double e, int causal)
{
    return 2 * bn * s * t * (d + e) * (causal ? 0.5 : 1.0);
}

static double attention_bytes(ap_dtype dt, double bn, double s, double t,
                              double d, double e)
{
    return dtype_bytes(dt) * bn * (s * d + t * d + t * e + s * e);
}

static double forward_eff(const ap_cluster *c)
{
    return c->attn_eff > 0 ? c->attn_eff : (c->gemm_eff > 0 ? c->gemm_eff : 1);
}

static const double *curve_factors(const ap_cluster *c, ap_attn_curve curve)
{
    if (curve == AP_ATTN_FWD_CAUSAL)
        return c->attn_len_causal;
    return curve == AP_ATTN_FWD_NONCAUSAL ? c->attn_len_noncausal : c->attn_len_bwd;
}

/* Published curves (FlashAttention-3's charts) sample lengths in powers of
 * two and the rate changes by about the same amount per doubling, hence
 * linear in log(length); outside the table the nearest point holds, as no
 * chart says how the rate goes on. */
double ap_attention_length_factor(const ap_cluster *c, ap_attn_curve curve,
                                  double length)
{
    int n = c->attn_len_n;
    if (n <= 0 || n > AP_ATTN_LEN_MAX || !(length > 0))
        return 1;
    const double *x = c->attn_len, *f = curve_factors(c, curve);
    if (length <= x[0])
        return f[0];
    if (length >= x[n - 1])
        return f[n - 1];
    int i = 1;
    while (x[i] < length)
        i++;
    double w = log(length / x[i - 1]) / log(x[i] / x[i - 1]);
    return f[i - 1] + w * (f[i] - f[i - 1]);
}

/* An efficiency times a length factor may claim more than the peak (a
 * calibrated file, a fast curve); no kernel runs above it. */
static double attention_eff(double eff, double factor)
{
    return fmin(eff * factor, 1.0);
}

static double attention_time(const ap_cluster *c, ap_dtype dt, double flops,
                             double bytes, double eff)
{
    double compute = flops / (peak_for(c, dt) * eff);
    double memory = bytes / ap_cluster_hbm_bw(c);
    return fmax(fmax(compute, memory), c->kernel_floor);
}

/* A forward kernel gives each block of queries to one thread block, which
 * loops over the keys: its per-block setup (loading Q, the last rescale,
 * writing O) is spread over t/block iterations, so the rate follows t. */
double ap_cost_attention(const ap_cluster *c, ap_dtype dt, double bn, double s,
                         double t, double d, double e, int causal)
{
    if (!(bn > 0 && s > 0 && t > 0 && d > 0 && e > 0))
        return 0;
    ap_attn_curve curve = causal ? AP_ATTN_FWD_CAUSAL : AP_ATTN_FWD_NONCAUSAL;
    double eff = attention_eff(forward_eff(c), ap_attention_length_factor(c, curve, t));
    return attention_time(c, dt, attention_flops(bn, s, t, d, e, causal),
                          attention_bytes(dt, bn, s, t, d, e), eff);
}

/* The backward recomputes the scores and runs five matmuls to the forward's
 * two, hence 2.5x the FLOPs; it reads q, k, v, o and dO and writes dQ, dK
 * and dV, twice the forward's traffic (the fp32 row statistics are a
 * vanishing s per head). Its published efficiency is lower than the
 * forward's, so it has its own, falling back to the forward's for cluster
 * files that predate it. It gives each block of keys to one thread block
 * (dK and dV stay in registers) and loops over the queries, so its rate
 * follows s. */
double ap_cost_attention_backward(const ap_cluster *c, ap_dtype dt, double bn,
                                  double s, double t, double d, double e,
                                  int causal)
{
    if (!(bn > 0 && s > 0 && t > 0 && d > 0 && e > 0))
        return 0;
    double base = c->attn_bwd_eff > 0 ? c->attn_bwd_eff : forward_eff(c);
    double eff = attention_eff(base, ap_attention_length_factor(c, AP_ATTN_BWD, s));
    return attention_time(c, dt, 2.5 * attention_flops(bn, s, t, d, e, causal),
                          2 * attention_bytes(dt, bn, s, t, d, e), eff);
}

/* A causal kernel that skips the blocks its mask leaves empty: `flops`
 * and `bytes` are its forward's (the backward does 2.5x the FLOPs and
 * twice the traffic), and each thread block loops `fwd_len` keys forward
 * and `bwd_len` queries backward, where the length curves are read. */
static double masked_kernel(const ap_cluster *c, ap_dtype dt, double flops, double bytes,
                            double fwd_len, double bwd_len, int backward)
{
    if (backward) {
        double base = c->attn_bwd_eff > 0 ? c->attn_bwd_eff : forward_eff(c);
        double eff = attention_eff(base, ap_attention_length_factor(c, AP_ATTN_BWD, bwd_len));
        return attention_time(c, dt, 2.5 * flops, 2 * bytes, eff);
    }
    double eff = attention_eff(forward_eff(c),
                               ap_attention_length_factor(c, AP_ATTN_FWD_CAUSAL, fwd_len));
    return attention_time(c, dt, flops, bytes, eff);
}

/* A kernel whose s queries are the last s of its t >= s keys: a causal
 * mask aligned to the bottom right (cuDNN's causal_bottom_right, which TE
 * asks for when the lengths differ) leaves s*t - s*s/2 scores of every
 * head, which is ap_cost_attention's half at s == t. The causal curve's
 * rate, at the kernel's own loop length as there. */
double ap_cost_attention_rect(const ap_cluster *c, ap_dtype dt, double bn, double s,
                              double t, double d, double e, int causal, int backward)
{
    if (!(bn > 0 && s > 0 && t > 0 && d > 0 && e > 0))
        return 0;
    if (!causal || t <= s)
        return backward ? ap_cost_attention_backward(c, dt, bn, s, t, d, e, causal)
                        : ap_cost_attention(c, dt, bn, s, t, d, e, causal);
    return masked_kernel(c, dt, 2 * bn * (s * t - s * s / 2) * (d + e),
                         attention_bytes(dt, bn, s, t, d, e), t, s, backward);
}

double ap_cost_attention_window(const ap_cluster *c, ap_dtype dt, double bn, double s,
                                double w, double d, double e, int backward)
{
    if (!(bn > 0 && s > 0 && d > 0 && e > 0))
        return 0;
    if (!(w > 0 && w < s))
        return backward ? ap_cost_attention_backward(c, dt, bn, s, s, d, e, 1)
                        : ap_cost_attention(c, dt, bn, s, s, d, e, 1);
    return masked_kernel(c, dt, 2 * bn * (s * w - w * w / 2) * (d + e),
                         attention_bytes(dt, bn, s, s, d, e), w, w, backward);
}

/* Queries at positions q0 .. q0 + h - 1, each meeting min(p + 1, w) keys:
 * the first m of them (positions below w) their whole prefix, the rest w. */
static double band_scores(double q0, double h, double w)
{
    double a = q0 + 1, m = fmin(fmax(w - a + 1, 0), h);
    return m * a + m * (m - 1) / 2 + (h - m) * w;
}

double ap_cost_attention_band(const ap_cluster *c, ap_dtype dt, double bn, double q0,
                              double h, double w, double d, double e, int backward)
{
    if (!(bn > 0 && h > 0 && d > 0 && e > 0 && q0 >= 0))
        return 0;
    if (!(w > 0 && w < q0 + h))
        return ap_cost_attention_rect(c, dt, bn, h, q0 + h, d, e, 1, backward);
    double t = fmin(q0 + h, h + w - 1);
    return masked_kernel(c, dt, 2 * bn * band_scores(q0, h, w) * (d + e),
                         attention_bytes(dt, bn, h, t, d, e), fmin(t, w), fmin(h, w),
                         backward);
}

double ap_cost_attention_chunked(const ap_cluster *c, ap_dtype dt, double bn, double s,
                                 double chunk, double d, double e, int backward)
{
    double k = chunk > 0 && chunk < s ? floor(s / chunk) : 0;
    double len = k > 0 ? chunk : s, rows = k > 0 ? bn * k : bn, left = s - k * chunk;
    double t = backward ? ap_cost_attention_backward(c, dt, rows, len, len, d, e, 1)
                        : ap_cost_attention(c, dt, rows, len, len, d, e, 1);
    if (k > 0 && left > 0)
        t += backward ? ap_cost_attention_backward(c, dt, bn, left, left, d, e, 1)
                      : ap_cost_attention(c, dt, bn, left, left, d, e, 1);
    return t;
}

/* Context-parallel attention as Transformer Engine's AttnFuncWithCPAndKVP2P
 * runs it (transformer_engine/pytorch/attention/dot_product_attention/
 * context_parallel.py; Megatron-Core's --cp-comm-type p2p), bshd or sbhd,
 * flash or cuDNN fused attention, bf16 or fp16. Rank r of cp holds the
 * sequence chunks r and 2cp-1-r (load balancing), s query rows in all per
 * head, and meets every rank's K and V over cp steps of a ring. Each step's
 * attention is its own kernel, and each torch.compile'd correction
 * (jit_fuser) its own pass over HBM. Rows are b*n*s query rows; the fp32
 * log-sum-exp (lse) is 4 bytes a row. */
typedef struct {
    const ap_cluster *c;
    ap_dtype dt;
    double bn, bkv;  /* query heads and KV heads, times the batch */
    double s, d, e;  /* local rows per head, head dims of q/k and v */
    int causal, cp;
} cp_attn;

/* Step j of rank r causally: j == 0 is the diagonal block, causal over the
 * two local chunks; 0 < j <= r the first half of the KV received (chunk
 * r-j) against all local queries; j > r all the KV received against the
 * second local chunk. Without a mask every step sees everything. */
static int cp_whole_queries(const cp_attn *a, int r, int j)
{
    return !a->causal || j <= r;
}

/* One kernel over a step's block, forward or backward. */
static double cp_block(const cp_attn *a, int r, int j, int backward)
{
    double s = a->s, sq = s, sk = s;
    int causal = a->causal && j == 0;
    if (a->causal && j > 0) {
        if (j <= r)
            sk = s / 2;
        else
            sq = s / 2;
    }
    return backward ? ap_cost_attention_backward(a->c, a->dt, a->bn, sq, sk, a->d, a->e, causal)
                    : ap_cost_attention(a->c, a->dt, a->bn, sq, sk, a->d, a->e, causal);
}

/* flash_attn_fwd_softmax_lse_correction (or its second-half variant over
 * half the rows): max, min, exp, log1p and add per row, reading both lse
 * and writing the running one back. */
#define CP_LSE_FLOPS 6.0

static double cp_lse_correction(const cp_attn *a, double rows)
{
    return ap_cost_memop(a->c, CP_LSE_FLOPS * rows, 3 * 4 * rows);
}

/* flash_attn_fwd_out_correction (second-half variant over half the rows):
 * out += out_per_step * exp(lse_per_step - lse), out in the activation
 * dtype: out read and written, out_per_step and both lse read. The first
 * step's (init) writes out without reading it: two passes, not three. */
static double cp_out_correction(const cp_attn *a, double rows, int init)
{
    double sz = dtype_bytes(a->dt), el = rows * a->e;
    return ap_cost_memop(a->c, 2 * el + 2 * rows, (init ? 2 : 3) * sz * el + 2 * 4 * rows);
}

/* The log-sum-exp work after step j's kernel: step 0's lse cloned into the
 * running lse, every later step's merged into it over the rows it saw. */
static double cp_lse_step(const cp_attn *a, int r, int j)
{
    double rows = a->bn * a->s;
    if (j == 0)
        return ap_cost_memop(a->c, 0, 2 * 4 * rows);
    return cp_lse_correction(a, cp_whole_queries(a, r, j) ? rows : rows / 2);
}

/* flash_attn_fwd_out_correction_init scales step 0's output into out, cast
 * back to the output's dtype (no fp32 accumulator, so no final cast); each
 * later step is added in over the rows it saw. */
static double cp_out_step(const cp_attn *a, int r, int j)
{
    double rows = a->bn * a->s;
    return cp_out_correction(a, cp_whole_queries(a, r, j) ? rows : rows / 2, j == 0);
}

/* The rank's own K and V copied into the first ring buffer: torch.cat
 * forward, copy_ backward, one read and one write of each. */
static double cp_kv_copy(const cp_attn *a)
{
    return ap_cost_memop(a->c, 0, 2 * dtype_bytes(a->dt) * a->bkv * a->s * (a->d + a->e));
}

/* The KV ring as TE overlaps it. flash_attn_p2p_communicate posts, on
 * every rank at once, a send to one neighbour and a receive from the other
 * (batched isend/irecv), so a hop moves `blocks` of this rank's KV blocks
 * (its K and V, bkv * s * (d + e) elements) over the slowest link of the
 * ring, which crosses nodes when any of its hops does. */
static double cp_hop(const cp_attn *a, int nodes, double blocks)
{
    double kv = dtype_bytes(a->dt) * a->bkv * a->s * (a->d + a->e);
    return ap_cost_sendrecv(a->c, nodes, blocks * kv);
}

/* Forward, rank r: its steps' time, and in *ring (when not NULL) what its
 * KV transfers leave exposed. Step j waits for its KV, posts the transfer
 * of step j+1's and runs its kernel, the lse merge following on the same
 * stream; step j+1's kernel waits for the transfer. The last step posts
 * nothing. */
static double cp_forward(const cp_attn *a, int r, int nodes, double *ring)
{
    double t = cp_kv_copy(a), hop = ring ? cp_hop(a, nodes, 1) : 0;
    for (int j = 0; j < a->cp; j++) {
        double block = cp_block(a, r, j, 0), lse = cp_lse_step(a, r, j);
        t += block + lse + cp_out_step(a, r, j);
        if (ring && j + 1 < a->cp)
            *ring += fmax(0, hop - block - lse);
    }
    return t;
}

/* copy_ (2 passes of the dtype) or add_ (3) of a gradient slice into the
 * buffer it accumulates in; dq and dk, dv are all in the activation dtype. */
static double cp_accumulate(const cp_attn *a, double elems, int add)
{
    double sz = dtype_bytes(a->dt);
    return ap_cost_memop(a->c, add ? elems : 0, (add ? 3 : 2) * sz * elems);
}

/* dq at backward step i (forward step cp-1-i), sbhd: steps over the second
 * half of the queries touch dq[1] only; rank r's step over the diagonal
 * after them (i == cp-1-r) copies dq[0] and adds dq[1], or copies all of dq
 * on the last rank, whose first step it is. */
static double cp_dq(const cp_attn *a, int r, int i)
{
    double all = a->bn * a->s * a->d;
    int first = a->cp - r - 1;
    if (!a->causal || i > first)
        return cp_accumulate(a, all, i > 0);
    if (i == first)
        return r == a->cp - 1 ? cp_accumulate(a, all, 0)
                              : cp_accumulate(a, all / 2, 0) + cp_accumulate(a, all / 2, 1);
    return cp_accumulate(a, all / 2, i > 0);
}

/* dK or dV (w = d or e) at backward step i, accumulated into the buffer that
 * travels the ring with it: the diagonal step adds all of it (rank 0, whose
 * first chunk no earlier step touched, adds the first half and copies the
 * second); steps over the first half of the KV add into dkv[0]; the others
 * copy (first step) or add the whole. */
static double cp_dkv(const cp_attn *a, int r, int i, double w)
{
    double all = a->bkv * a->s * w;
    if (!a->causal)
        return cp_accumulate(a, all, i > 0);
    if (i == a->cp - 1)
        return r == 0 ? cp_accumulate(a, all / 2, 1) + cp_accumulate(a, all / 2, 0)
                      : cp_accumulate(a, all, 1);
    if (i >= a->cp - r - 1)
        return cp_accumulate(a, all / 2, i > 0);
    return cp_accumulate(a, all, i > 0);
}

/* Backward step i's kernel (over forward step cp-1-i's block) and its dq
 * accumulation: the work queued between posting that step's transfer and
 * waiting for it. */
static double cp_backward_step(const cp_attn *a, int r, int i)
{
    return cp_block(a, r, a->cp - 1 - i, 1) + cp_dq(a, r, i);
}

/* Backward, rank r, likewise. Step i posts its transfer, runs its kernel
 * and dq accumulation, and waits for the transfer before adding its dK, dV
 * into the dKV partial sum that came with it. Step 0 sends the KV alone (no
 * partial sum yet), the middle steps KV and dKV, the last step the dKV
 * alone: the final hop, which hands every rank the sum for its own
 * chunks. */
static double cp_backward(const cp_attn *a, int r, int nodes, double *ring)
{
    double rows = a->bn * a->s;
    /* The saved KV copied into the first ring buffer, and (causal, every
     * rank but the last) the second half of the lse made contiguous. */
    double t = cp_kv_copy(a);
    if (a->causal && r < a->cp - 1)
        t += ap_cost_memop(a->c, 0, 2 * 4 * rows / 2);
    for (int i = 0; i < a->cp; i++) {
        double step = cp_backward_step(a, r, i);
        t += step + cp_dkv(a, r, i, a->d) + cp_dkv(a, r, i, a->e);
        if (ring) {
            double blocks = i == 0 || i == a->cp - 1 ? 1 : 2;
            *ring += fmax(0, cp_hop(a, nodes, blocks) - step);
        }
    }
    return t;
}

/* Rank r's steps, and its exposed ring in *ring when not NULL. */
static double cp_rank(const cp_attn *a, int r, int nodes, int backward, double *ring)
{
    if (ring)
        *ring = 0;
    return backward ? cp_backward(a, r, nodes, ring) : cp_forward(a, r, nodes, ring);
}

/* The ranks whose time can be the slowest. A rank's steps fall into a few
 * kinds (the diagonal, first-half KV, second-half queries, and their
 * corrections and accumulations), and between the first two and the last
 * two ranks the number of steps of each kind moves by one per rank, so a
 * rank's time (steps, and steps with the ring) is linear in r there and
 * largest at an end. Ranks 0 and cp-1 have kinds of their own. Pricing
 * these four instead of every rank keeps a call O(cp), not O(cp^2), which
 * the planner's search needs when it splits a long sequence many ways. */
static int cp_candidate_ranks(int cp, int *r)
{
    int n = 0;
    const int want[4] = {0, 1, cp - 2, cp - 1};
    for (int k = 0; k < 4; k++)
        if (want[k] >= 0 && want[k] < cp && (n == 0 || want[k] > r[n - 1]))
            r[n++] = want[k];
    return n;
}

/* The most over ranks of the steps alone (*steps) and, with_ring, of the
 * steps with each rank's exposed ring (*paced; else *paced = *steps). */
static void cp_slowest(const cp_attn *a, int nodes, int backward, int with_ring,
                       double *steps, double *paced)
{
    int ranks[4], n = cp_candidate_ranks(a->cp, ranks);
    *steps = *paced = 0;
    for (int k = 0; k < n; k++) {
        double ring = 0;
        double t = cp_rank(a, ranks[k], nodes, backward, with_ring ? &ring : NULL);
        *steps = fmax(*steps, t);
        *paced = fmax(*paced, t + ring);
    }
}

/* The ring moves in lock step, so the slowest rank sets the pace: the last
 * rank forward (its later steps correct all of its rows), rank 0 backward
 * for cp > 2 (its steps accumulate whole dK and dV). */
double ap_cost_attention_cp(const ap_cluster *c, ap_dtype dt, double bn, double bkv,
                            double s, double d, double e, int causal, int cp,
                            int backward)
{
    if (!(bn > 0 && bkv > 0 && s > 0 && d > 0 && e > 0))
        return 0;
    if (cp <= 1)
        return backward ? ap_cost_attention_backward(c, dt, bn, s, s, d, e, causal)
                        : ap_cost_attention(c, dt, bn, s, s, d, e, causal);
    cp_attn a = {c, dt, bn, bkv, s, d, e, causal, cp};
    double steps, paced;
    cp_slowest(&a, 0, backward, 0, &steps, &paced);
    return steps;
}

double ap_cost_attention_cp_rank(const ap_cluster *c, ap_dtype dt, double bn,
                                 double bkv, double s, double d, double e,
                                 int causal, int cp, int nodes, int rank,
                                 int backward, double *ring)
{
    *ring = 0;
    if (!(bn > 0 && bkv > 0 && s > 0 && d > 0 && e > 0) || cp <= 1 || rank < 0 ||
        rank >= cp)
        return 0;
    cp_attn a = {c, dt, bn, bkv, s, d, e, causal, cp};
    return cp_rank(&a, rank, nodes, backward, ring);
}

/* What the ring adds to the slowest rank: each rank's steps plus its
 * exposed transfers, the most over ranks, less the most of the steps alone
 * (ap_cost_attention_cp), so that the two add up to the slowest rank's
 * attention with its ring. */
double ap_cost_cp_ring(const ap_cluster *c, ap_dtype dt, double bn, double bkv,
                       double s, double d, double e, int causal, int cp, int nodes,
                       int backward)
{
    if (!(bn > 0 && bkv > 0 && s > 0 && d > 0 && e > 0) || cp <= 1)
        return 0;
    cp_attn a = {c, dt, bn, bkv, s, d, e, causal, cp};
    double steps, paced;
    cp_slowest(&a, nodes, backward, 1, &steps, &paced);
    return paced - steps;
}

/* FLOPs per score of the memory-bound kernels between the two GEMMs: the
 * graph's own counts for a softmax and a dropout (graph/finalize.c), used
 * for their backward passes too; their bytes dominate either way. */
#define SOFTMAX_FLOPS 5.0
#define DROPOUT_FLOPS 2.0
#define MASK_BYTES 1.0

/* Unfused attention runs each step as its own kernel, so the bn*s*t scores
 * cross HBM between them: written by one, read by the next. */
double ap_cost_attention_unfused(const ap_cluster *c, ap_dtype dt, double bn,
                                 double s, double t, double d, double e,
                                 double dropout, int backward)
{
    if (!(bn > 0 && s > 0 && t > 0 && d > 0 && e > 0))
        return 0;
    double sz = dtype_bytes(dt), scores = bn * s * t;
    double drop = dropout > 0 ? ap_cost_memop(c, DROPOUT_FLOPS * scores,
                                              (2 * sz + MASK_BYTES) * scores)
                              : 0;
    if (!backward)
        return ap_cost_bgemm(c, dt, bn, s, t, d) +
               ap_cost_memop(c, SOFTMAX_FLOPS * scores, 2 * sz * scores) +
               drop + ap_cost_bgemm(c, dt, bn, s, e, t);
    return ap_cost_bgemm(c, dt, bn, s, t, e) + ap_cost_bgemm(c, dt, bn, t, e, s) +
           drop + ap_cost_memop(c, SOFTMAX_FLOPS * scores, 3 * sz * scores) +
           ap_cost_bgemm(c, dt, bn, s, d, t) + ap_cost_bgemm(c, dt, bn, t, d, s);
}
