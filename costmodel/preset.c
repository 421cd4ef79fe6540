/* preset.c -- the built-in clusters: datasheet peaks and documented
 * achievable efficiencies. Every number here has its source in
 * docs/cluster-format.md; change both together. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "costmodel/costmodel.h"

/* Flash attention's TFLOP/s by length, and the rates the efficiencies were
 * taken at, which the curve is divided by: its factors are relative to
 * attn_eff and attn_bwd_eff, so that calibration, which scales those two,
 * scales the whole curve. */
typedef struct {
    int n;
    double len[AP_ATTN_LEN_MAX];
    double causal[AP_ATTN_LEN_MAX], noncausal[AP_ATTN_LEN_MAX], bwd[AP_ATTN_LEN_MAX];
    double fwd_ref, bwd_ref;
} attn_rates;

/* The share of the kernel figures below that a training step sustains,
 * derived by `autopar calibrate` from one published step of a fully
 * described run (docs/cluster-format.md, "The tensor-core rate in
 * training"): the step, in seconds, and the run. */
typedef struct {
    double scale, step_s;
    const char *from;
} training_rate;

typedef struct {
    const char *name;
    const char *gpu_name;
    int sms, tile_m, tile_n;
    double hbm_bytes, hbm_bw, hbm_eff;
    double gemm_eff, attn_eff, attn_bwd_eff, kernel_floor;
    double bf16, fp16, tf32, fp8;
    double intra_bw, inter_bw;
    const attn_rates *attn_len; /* NULL: one efficiency at every length */
    double gemm_eff_fp8;        /* 0: gemm_eff */
    const training_rate *rate;  /* NULL: the kernel figures as they are */
} preset;

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Per-hop latencies of NCCL's own ring model (src/graph/tuning.cc, hwLat for
 * Ring/Simple: 3.4 us over NVLink, 9.6 us over the network). */
#define NVLINK_HOP_S 3.4e-6
#define NET_HOP_S 9.6e-6

/* Achievable per-GPU rail bandwidth: 90% of the NIC line rate. */
#define NDR_400G (0.9 * 50e9)
#define HDR_200G (0.9 * 25e9)

/* Flash attention, bf16, head dim 128, as fractions of the dense bf16 peak.
 * Hopper: cuDNN's fused attention (what Transformer Engine runs under
 * Megatron-LM and NeMo) in the FlashAttention-3 paper (Shah et al. 2024,
 * H100 SXM5) at 8k tokens: 529 TFLOP/s causal forward, 518 TFLOP/s
 * backward (the paper's backward chart is without a causal mask). Ampere:
 * the FlashAttention-2 paper (Dao 2023, A100): forward 50-73% of peak, taken
 * at 0.6, and the backward lower in the ratio of the two passes' best cases,
 * 63% to 73%. The benchmarks count FLOPs as autopar does (a causal mask
 * halves them, the backward is 2.5x the forward). */
#define H100_ATTN_FWD (529e12 / 989.4e12)
#define H100_ATTN_BWD (518e12 / 989.4e12)
/* The same paper's charts by sequence length (512 ... 16k tokens, head dim
 * 128, bf16, H100 SXM5), cuDNN: forward with the causal mask, forward
 * without it, and backward (charted without the mask only). The benchmark
 * keeps 16k tokens in all, so every length runs the same 2048 blocks of
 * 128 queries and the curve measures how long each block's loop over the
 * keys is, not how well the blocks fill the GPU (docs/cost-model.md). */
static const attn_rates fa3_cudnn_h100 = {
    6,
    {512, 1024, 2048, 4096, 8192, 16384},
    {315, 410, 484, 518, 529, 539},
    {497, 574, 617, 609, 600, 595},
    {305, 408, 465, 499, 518, 516},
    529, 518,
};

/* FP8 GEMMs reach a smaller fraction of their twice-as-high peak than bf16
 * GEMMs of theirs: the best measured on an H100 SXM by the same benchmark
 * and software (ml-engineering's maximum achievable matmul FLOPS table,
 * torch 2.7.0+cu126) is 1402.6 TFLOP/s in FP8 e4m3 at 1024 x 9216 x 14336,
 * 70.9% of 1979, against 794.5 in bf16 at 2048 x 2048 x 13312, 80.3% of
 * 989. Those times include the output's store (bf16 in both), which
 * autopar prices after the multiply: taken out, with the 97.0% of the SMs
 * each shape's best tiles keep busy, the multiplies ran at 75.54% and
 * 84.48% of their peaks. The preset keeps that ratio to its own bf16
 * efficiency. */
#define H100_FP8_GEMM (0.75 * 75.54 / 84.48)

/* Isolated kernels run faster than a training step sustains them: clocks
 * under a long run's power and heat, HBM and NVLink busy beside the tensor
 * cores, kernels back to back. No datasheet or kernel benchmark gives that
 * rate; published steps do. Every BF16 run of the validation table (and
 * every FP16 one: the peaks are the same) implies
 * a factor (`autopar calibrate` on its published step), and the preset
 * takes their median, the lower one when their number is even, so that the
 * rate is one run's own and no single run's peculiarities (an unfused
 * kernel the cost model prices too fast, an older container) decide it.
 * The validation prices each of those runs at the median of the others,
 * held out (bench/validate.sh, docs/validation.md). The Hopper factor
 * carries to the H200 and H800, which have the H100's GH100 compute die,
 * clocks and 700 W limit; the one published BF16 H200 run with a stated
 * configuration (Megatron-LM's examples) counts towards it. */
/* The two measured factors and the Hopper median run, named once because
 * the B200 carries the first and quotes the second. */
#define HOPPER_SCALE 0.8440
#define HOPPER_STEP_S 8.85
#define HOPPER_RUN "NeMo 24.09 Llama 3.1 405B (7-layer proxy) on 32 H100 SXM"
#define AMPERE_SCALE 0.8519
#define STR(x) #x
#define XSTR(x) STR(x)

static const training_rate hopper_rate = {
    HOPPER_SCALE, HOPPER_STEP_S,
    "the median of 20 published BF16 runs on H100 SXM and H200 (docs/validation.md): "
    HOPPER_RUN ", tp 8 cp 2 "
    "(DGX Cloud benchmarking recipe), " XSTR(HOPPER_STEP_S) " s per step",
};
static const training_rate ampere_rate = {
    AMPERE_SCALE, 3.697,
    "the median of 24 published BF16 and FP16 runs on A100 (docs/validation.md): "
    "Megatron-LM GPT 3.6B on 64 A100 80GB, tp 2, full recomputation "
    "(Narayanan et al. 2021, Table 1), 138 TFLOP/s per GPU, 3.697 s per step",
};

/* No BF16 step on B200 with a stated configuration has been published.
 * The factor is not one GPU's: the A100's 24 runs and the H100's 19, two
 * generations, clocks, memories and software stacks years apart, give
 * x0.8519 and x0.8440, within 1%. Pricing a B200 at its kernel figures
 * would claim that a training step loses nothing on it, which no measured
 * GPU does, so it carries the H100's, the nearest generation measured and
 * the one whose runs used the B200's software (NeMo, Megatron-Core,
 * Transformer Engine), and says that it was carried, not measured. */
static const training_rate blackwell_rate = {
    HOPPER_SCALE, HOPPER_STEP_S,
    "carried from the H100 SXM, not measured on a B200 (no BF16 B200 step with "
    "a stated configuration is published; the A100's runs give x" XSTR(AMPERE_SCALE) "): "
    HOPPER_RUN ", " XSTR(HOPPER_STEP_S) " s per step",
};

/* A profile measures the kernels themselves, one at a time, and a step
 * runs them slower for the same reasons, so a profile carries a rate too:
 * the factor published steps imply over measured kernels. Every BF16 H100
 * run of the validation table priced with the profile of one H100 SXM
 * (examples/clusters/h100-sxm-profile.json), calibrated on its published
 * step, lower median, as above (bench/validate.sh --profile). It is above
 * the presets' factor because the measured GEMMs are already slower than
 * the kernel figures' 75% of peak. No other GPU has been profiled against
 * published runs, so every profile carries the H100's. */
#define PROFILE_SCALE 0.8591
#define PROFILE_STEP_S HOPPER_STEP_S

static const training_rate profile_rate = {
    PROFILE_SCALE, PROFILE_STEP_S,
    "the median of 19 published BF16 runs on H100 SXM priced with a measured "
    "H100 SXM profile (docs/validation.md): " HOPPER_RUN ", tp 8 cp 2 "
    "(DGX Cloud benchmarking recipe), " XSTR(PROFILE_STEP_S) " s per step",
};

#define A100_ATTN_FWD 0.6
#define A100_ATTN_BWD (0.6 * 63.0 / 73.0)

static const preset presets[] = {
    {"a100-80g", "NVIDIA A100-SXM4-80GB", 108, 128, 128,
     85899345920.0, 2.039e12, 0.9,
     0.85, A100_ATTN_FWD, A100_ATTN_BWD, 4e-6,
     312e12, 312e12, 156e12, 0,
     230e9, HDR_200G, NULL, 0, &ampere_rate},
    /* The A100 SXM4 40GB, the DGX A100 of 2020, differs from the 80GB only
     * in memory: 42,505,273,344 bytes of HBM2 as CUDA's device query
     * reports it (nvidia-smi rounds it to 40536 MiB), at 1,555 GB/s (A100
     * datasheet). It has the same GA100 die, clocks, 400 W limit and
     * NVLink3, so it carries the Ampere rate. */
    {"a100-40g", "NVIDIA A100-SXM4-40GB", 108, 128, 128,
     42505273344.0, 1.555e12, 0.9,
     0.85, A100_ATTN_FWD, A100_ATTN_BWD, 4e-6,
     312e12, 312e12, 156e12, 0,
     230e9, HDR_200G, NULL, 0, &ampere_rate},
    {"h100-sxm", "NVIDIA H100 80GB HBM3", 132, 128, 256,
     85520809984.0, 3.35e12, 0.9,
     0.75, H100_ATTN_FWD, H100_ATTN_BWD, 4e-6,
     989.4e12, 989.4e12, 494.7e12, 1978.9e12,
     360e9, NDR_400G, &fa3_cudnn_h100, H100_FP8_GEMM, &hopper_rate},
    {"h200", "NVIDIA H200", 132, 128, 256,
     150754820096.0, 4.8e12, 0.9,
     0.75, H100_ATTN_FWD, H100_ATTN_BWD, 4e-6,
     989.4e12, 989.4e12, 494.7e12, 1978.9e12,
     360e9, NDR_400G, &fa3_cudnn_h100, H100_FP8_GEMM, &hopper_rate},
    {"b200", "NVIDIA B200", 148, 128, 256,
     180e9, 8e12, 0.9,
     0.7, 0.6, 0, 4e-6,
     2250e12, 2250e12, 1125e12, 4500e12,
     720e9, NDR_400G, NULL, 0, &blackwell_rate},
    {"h800", "NVIDIA H800", 132, 128, 256,
     85520809984.0, 3.35e12, 0.9,
     0.75, H100_ATTN_FWD, H100_ATTN_BWD, 4e-6,
     989.4e12, 989.4e12, 494.7e12, 1978.9e12,
     160e9, NDR_400G, &fa3_cudnn_h100, H100_FP8_GEMM, &hopper_rate},
};

#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))
#define DEFAULT_GPUS_PER_NODE 8

const char *ap_cluster_preset_names(void)
{
    return "a100-80g, a100-40g, h100-sxm, h200, b200, h800";
}

/* Memory the training process cannot use: about 1 GiB of CUDA context and
 * NCCL buffers, plus 5% of HBM lost to caching-allocator fragmentation. */
static double reserved_bytes(double hbm)
{
    return floor(1.0 * GIB + 0.05 * hbm);
}

static const preset *find_preset(const char *name)
{
    for (int i = 0; i < NPRESETS; i++)
        if (!strcmp(presets[i].name, name))
            return &presets[i];
    return NULL;
}

static void fill_attn_len(const attn_rates *r, ap_cluster *c)
{
    c->attn_len_n = r->n;
    for (int i = 0; i < r->n; i++) {
        c->attn_len[i] = r->len[i];
        c->attn_len_causal[i] = r->causal[i] / r->fwd_ref;
        c->attn_len_noncausal[i] = r->noncausal[i] / r->fwd_ref;
        c->attn_len_bwd[i] = r->bwd[i] / r->bwd_ref;
    }
}

/* Recorded as a calibration, so that `autopar calibrate` on a preset
 * multiplies into it and a profile can take it off again. */
static void apply_training_rate(const training_rate *r, ap_cluster *c)
{
    ap_cluster_scale_rate(c, r->scale);
    c->calib_scale = r->scale;
    c->calib_measured_s = r->step_s;
    snprintf(c->calib_from, sizeof c->calib_from, "%s", r->from);
}

void ap_cluster_profile_rate(ap_cluster *c)
{
    ap_cluster_kernel_rate(c);
    apply_training_rate(&profile_rate, c);
}

static void fill_from_preset(const preset *p, ap_cluster *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", p->name);
    snprintf(c->source, sizeof c->source, "preset");
    snprintf(c->gpu_name, sizeof c->gpu_name, "%s", p->gpu_name);
    c->sms = p->sms;
    c->tile_m = p->tile_m;
    c->tile_n = p->tile_n;
    c->hbm_bytes = p->hbm_bytes;
    c->hbm_bw = p->hbm_bw;
    c->hbm_eff = p->hbm_eff;
    c->gemm_eff = p->gemm_eff;
    c->gemm_eff_fp8 = p->gemm_eff_fp8;
    c->attn_eff = p->attn_eff;
    c->attn_bwd_eff = p->attn_bwd_eff;
    c->kernel_floor = p->kernel_floor;
    c->peak_flops[AP_BF16] = p->bf16;
    c->peak_flops[AP_FP16] = p->fp16;
    c->peak_flops[AP_FP32] = p->tf32;
    c->peak_flops[AP_FP8] = p->fp8;
    c->intra_bw = p->intra_bw;
    c->intra_lat = NVLINK_HOP_S;
    c->inter_bw = p->inter_bw;
    c->inter_lat = NET_HOP_S;
    c->mem_reserved = reserved_bytes(p->hbm_bytes);
    if (p->attn_len)
        fill_attn_len(p->attn_len, c);
    if (p->rate)
        apply_training_rate(p->rate, c);
}

int ap_cluster_preset(const char *name, int gpus, int gpus_per_node,
                      ap_cluster *c, char *err)
{
    const preset *p = name ? find_preset(name) : NULL;
    if (!p) {
        snprintf(err, AP_ERR_LEN, "unknown cluster preset \"%s\" (presets: %s)",
                 name ? name : "", ap_cluster_preset_names());
        return AP_EINPUT;
    }
    fill_from_preset(p, c);
    c->nodes = 1;
    c->gpus_per_node = DEFAULT_GPUS_PER_NODE;
    return ap_cluster_set_size(c, gpus, gpus_per_node, err);
}
