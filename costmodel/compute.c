/* compute.c -- what a kernel costs: GEMMs (measured tables or a roofline
 * with tile and wave quantisation), memory-bound kernels, and attention
 * fused (flash) or unfused. docs/cost-model.md derives each formula. */
#include <math.h>
#include <stdlib.h>

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

static double analytic_bgemm(const ap_cluster *c, ap_dtype dt, double batch,
                             double m, double n, double k)
{
    double eff = c->gemm_eff > 0 ? c->gemm_eff : 1;
    double flops = 2 * batch * m * n * k;
    double compute = flops / (peak_for(c, dt) * eff * quantisation(c, batch, m, n));
    double bytes = dtype_bytes(dt) * batch * (m * k + k * n + m * n);
    double memory = bytes / ap_cluster_hbm_bw(c);
    return fmax(compute, memory);
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
    double wsum = 0, lsum = 0;
    for (int j = 0; j < found; j++) {
        const ap_gemm_sample *s = &c->gemm[near[j]];
        double r = s->seconds / analytic_bgemm(c, dt, 1, s->m, s->n, s->k);
        if (dist[j] < 1e-9)
            return r;
        double w = 1 / (dist[j] * dist[j]);
        wsum += w;
        lsum += w * log(r);
    }
    return exp(lsum / wsum);
}

double ap_cost_bgemm(const ap_cluster *c, ap_dtype dt, double batch, double m,
                     double n, double k)
{
    if (!(batch > 0 && m > 0 && n > 0 && k > 0) ||
        !isfinite(batch * m * n * k))
        return 0;
    double t = analytic_bgemm(c, dt, batch, m, n, k);
    double r = c->ngemm ? measured_ratio(c, dt, m, n, k) : 0;
    if (r > 0)
        t *= r;
    return fmax(t, c->kernel_floor);
}

double ap_cost_gemm(const ap_cluster *c, ap_dtype dt, double m, double n,
                    double k)
{
    return ap_cost_bgemm(c, dt, 1, m, n, k);
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
#define CE_FP32_PASSES_FWD 32.0
#define CE_FP32_PASSES_BWD 8.0
#define CE_FLOPS_FWD 5.0
#define CE_FLOPS_BWD 1.0

double ap_cost_cross_entropy(const ap_cluster *c, ap_dtype dt, double logits,
                             int backward)
{
    if (!(logits > 0))
        return 0;
    double cast = dt == AP_FP32 ? 0 : dtype_bytes(dt) + 4;
    double bytes = (backward ? CE_FP32_PASSES_BWD : CE_FP32_PASSES_FWD) + cast;
    double flops = backward ? CE_FLOPS_BWD : CE_FLOPS_FWD;
    return ap_cost_memop(c, flops * logits, bytes * logits);
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

static double attention_time(const ap_cluster *c, ap_dtype dt, double flops,
                             double bytes, double eff)
{
    double compute = flops / (peak_for(c, dt) * eff);
    double memory = bytes / ap_cluster_hbm_bw(c);
    return fmax(fmax(compute, memory), c->kernel_floor);
}

double ap_cost_attention(const ap_cluster *c, ap_dtype dt, double bn, double s,
                         double t, double d, double e, int causal)
{
    if (!(bn > 0 && s > 0 && t > 0 && d > 0 && e > 0))
        return 0;
    return attention_time(c, dt, attention_flops(bn, s, t, d, e, causal),
                          attention_bytes(dt, bn, s, t, d, e), forward_eff(c));
}

/* The backward recomputes the scores and runs five matmuls to the forward's
 * two, hence 2.5x the FLOPs; it reads q, k, v, o and dO and writes dQ, dK
 * and dV, twice the forward's traffic (the fp32 row statistics are a
 * vanishing s per head). Its published efficiency is lower than the
 * forward's, so it has its own, falling back to the forward's for cluster
 * files that predate it. */
double ap_cost_attention_backward(const ap_cluster *c, ap_dtype dt, double bn,
                                  double s, double t, double d, double e,
                                  int causal)
{
    if (!(bn > 0 && s > 0 && t > 0 && d > 0 && e > 0))
        return 0;
    double eff = c->attn_bwd_eff > 0 ? c->attn_bwd_eff : forward_eff(c);
    return attention_time(c, dt, 2.5 * attention_flops(bn, s, t, d, e, causal),
                          2 * attention_bytes(dt, bn, s, t, d, e), eff);
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
