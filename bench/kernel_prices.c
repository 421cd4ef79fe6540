/* kernel_prices.c -- autopar's price of each kernel bench/gpu/kernels.py
 * measures, under the same names, so that the two can be set side by side
 * (docs/validation.md, "Kernels measured on an H100").
 *
 *   kernel_prices [CLUSTER]
 *
 * CLUSTER is a preset or a cluster file (default h100-sxm). Each line is
 * `name kernel step unit`: the price at the cluster's kernel figures
 * (ap_cluster_kernel_rate, what isolated kernels measure) and at the rate
 * it prices training steps with (a preset's published-step rate, a
 * profile's PROFILE_SCALE). */
#include <stdio.h>
#include <string.h>

#include "costmodel/costmodel.h"

typedef struct {
    double m, n, k;
} shape;

/* A transformer layer's GEMMs as kernels.py lists them: forward, then the
 * data gradients, then the weight gradients. */
static int layer_gemms(shape *out, double tokens, double hidden, double qkv,
                       double ffn2, double ffn)
{
    shape fwd[4] = {{tokens, qkv, hidden}, {tokens, hidden, hidden},
                    {tokens, ffn2, hidden}, {tokens, hidden, ffn}};
    for (int i = 0; i < 4; i++) {
        out[i] = fwd[i];
        out[4 + i] = (shape){fwd[i].m, fwd[i].k, fwd[i].n};
        out[8 + i] = (shape){fwd[i].k, fwd[i].n, fwd[i].m};
    }
    return 12;
}

static void sustained(const ap_cluster *c, double *gemm_rate, double *attn_rate,
                      double *layer_rate)
{
    shape g[12];
    int n = layer_gemms(g, 8192, 4096, (32 + 2 * 8) * 128, 2 * 14336, 14336);
    double flops = 0, t = 0;
    for (int i = 0; i < n; i++) {
        flops += 2 * g[i].m * g[i].n * g[i].k;
        t += ap_cost_gemm(c, AP_BF16, g[i].m, g[i].n, g[i].k);
    }
    double aflops = 4.0 * 32 * 8192 * 8192 * 128 * 0.5 * 3.5;
    double at = ap_cost_attention(c, AP_BF16, 32, 8192, 8192, 128, 128, 1) +
                ap_cost_attention_backward(c, AP_BF16, 32, 8192, 8192, 128, 128, 1);
    *gemm_rate = flops / t / 1e12;
    *attn_rate = aflops / at / 1e12;
    *layer_rate = (flops + aflops) / (t + at) / 1e12;
}

/* One expert's GEMM as the grouped GEMM of `experts` prices it. */
static double expert_gemm(const ap_cluster *c, ap_dtype dt, double experts,
                          shape s)
{
    return ap_cost_grouped_gemm(c, dt, experts, s.m, s.n, s.k) / experts;
}

static void print_row(const char *name, double kernel, double step, const char *unit)
{
    printf("%s %.4f %.4f %s\n", name, kernel, step, unit);
}

static void experts(const ap_cluster *kc, const ap_cluster *sc, const char *tag,
                    double nexp, double tokens, double hidden, double ffn)
{
    static const char *names[] = {"fc1.fwd", "fc2.fwd", "fc1.dgrad",
                                  "fc2.dgrad", "fc1.wgrad", "fc2.wgrad"};
    shape s[6] = {{tokens, 2 * ffn, hidden}, {tokens, hidden, ffn},
                  {tokens, hidden, 2 * ffn}, {tokens, ffn, hidden},
                  {hidden, 2 * ffn, tokens}, {ffn, hidden, tokens}};
    static const ap_dtype dts[] = {AP_BF16, AP_FP8};
    static const char *dtn[] = {"bf16", "fp8"};
    for (int i = 0; i < 6; i++)
        for (int d = 0; d < 2; d++) {
            char name[96];
            snprintf(name, sizeof name, "experts.%s.%s.%s", tag, names[i], dtn[d]);
            print_row(name, expert_gemm(kc, dts[d], nexp, s[i]) * 1e6,
                      expert_gemm(sc, dts[d], nexp, s[i]) * 1e6, "us");
        }
}

/* A GEMM's rate as its inner dimension shrinks: m 4,096, n 2,048 and 1,536. */
static void ksweep(const ap_cluster *kc, const ap_cluster *sc)
{
    static const double ks[] = {256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192};
    static const double ns[] = {2048, 1536};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 9; j++)
            for (int d = 0; d < 2; d++) {
                ap_dtype dt = d ? AP_FP8 : AP_BF16;
                char name[96];
                snprintf(name, sizeof name, "ksweep.m4096.n%.0f.k%.0f.%s", ns[i], ks[j],
                         d ? "fp8" : "bf16");
                print_row(name, ap_cost_gemm(kc, dt, 4096, ns[i], ks[j]) * 1e6,
                          ap_cost_gemm(sc, dt, 4096, ns[i], ks[j]) * 1e6, "us");
            }
}

static void attention(const ap_cluster *kc, const ap_cluster *sc)
{
    static const double keys[] = {4096, 16384, 65536, 131072};
    for (int i = 0; i < 4; i++)
        for (int bwd = 0; bwd < 2; bwd++) {
            char name[96];
            snprintf(name, sizeof name, "attention.keys%.0f.%s", keys[i],
                     bwd ? "bwd" : "fwd");
            print_row(name,
                      ap_cost_attention_rect(kc, AP_BF16, 16, 4096, keys[i], 128,
                                             128, 1, bwd) * 1e3,
                      ap_cost_attention_rect(sc, AP_BF16, 16, 4096, keys[i], 128,
                                             128, 1, bwd) * 1e3, "ms");
        }
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "h100-sxm";
    char err[AP_ERR_LEN];
    ap_cluster kc, sc;
    if (ap_cluster_resolve(name, 1, 1, &sc, err) != 0 ||
        ap_cluster_resolve(name, 1, 1, &kc, err) != 0) {
        fprintf(stderr, "kernel_prices: %s\n", err);
        return 2;
    }
    ap_cluster_kernel_rate(&kc);
    printf("cluster %s (%s)\n", name, ap_cluster_basis(&sc));
    double k[3], s[3];
    sustained(&kc, &k[0], &k[1], &k[2]);
    sustained(&sc, &s[0], &s[1], &s[2]);
    print_row("sustained.gemms_one_at_a_time", k[0], s[0], "TFLOP/s");
    print_row("sustained.attention_one_at_a_time", k[1], s[1], "TFLOP/s");
    print_row("sustained.layer_one_at_a_time", k[2], s[2], "TFLOP/s");
    experts(&kc, &sc, "qwen3_30b", 16, 4096, 2048, 768);
    experts(&kc, &sc, "qwen3_235b", 4, 4096, 4096, 1536);
    ksweep(&kc, &sc);
    attention(&kc, &sc);
    ap_cluster_free(&kc);
    ap_cluster_free(&sc);
    return 0;
}
