/* Gradient accumulation fusion: Megatron-LM's weight-gradient GEMM adds each
 * micro-batch's gradient into main_grad itself (cuBLAS with beta = 1), its
 * default; --no-gradient-accumulation-fusion (no_grad_fusion=1), which
 * Megatron FSDP and torch FSDP2 require, has the GEMM store the gradient in
 * its own dtype and an elementwise kernel add it into main_grad
 * (docs/cost-model.md, "Backward of a matmul"). */
#include <string.h>

#include "model.h"

/* GPT 1.3B's fc1 on one H100, one 2048-token sequence: x [2048, 2048] by
 * w [2048, 8192]; its data gradient is 2048 x 2048 contracting 8192, its
 * weight gradient 2048 x 8192 contracting the 2048 tokens. */
#define TOKENS 2048.0
#define HIDDEN 2048.0
#define FFN 8192.0

static int fc1_backward(const char *spec, double *bwd, ap_cluster *c)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    if (!g || ap_test_megatron_plan(g, 1, spec, c, &p, err)) {
        fprintf(stderr, "%s: %s\n", spec, g ? err : "no model");
        ap_graph_free(g);
        return -1;
    }
    ap_strategy s;
    int op = ap_test_layer_op(g, &p, "l0.fc1", &s);
    if (op >= 0) {
        ap_price_ctx x = ap_test_stage_ctx(g, c, &p, 0);
        ap_op_cost oc;
        ap_price_op(&x, op, &s, &oc);
        *bwd = oc.bwd;
    }
    ap_plan_free(&p);
    ap_graph_free(g);
    return op >= 0 ? 0 : -1;
}

/* Fused, the weight gradient's GEMM reads and writes main_grad: 2 + 2 bytes
 * an element of bf16 gradients, 4 + 4 of fp32 ones. */
static void the_fused_weight_gradient_accumulates_into_main_grad(void)
{
    ap_cluster c;
    double bwd = 0, bwd32 = 0;
    if (fc1_backward("tp=1,mbs=1,gbs=8", &bwd, &c)) {
        CHECK(0);
        return;
    }
    double dgrad = ap_cost_bgemm(&c, AP_BF16, 1, TOKENS, HIDDEN, FFN);
    double wgrad = ap_cost_bgemm_out(&c, AP_BF16, 1, HIDDEN, FFN, TOKENS, 2 * 2);
    CHECK_NEAR(bwd, dgrad + wgrad, 1e-12);
    ap_cluster_free(&c);
    if (fc1_backward("tp=1,mbs=1,gbs=8,grad_fp32=1", &bwd32, &c)) {
        CHECK(0);
        return;
    }
    CHECK_NEAR(bwd32 - bwd, HIDDEN * FFN * (8 - 4) / ap_cluster_hbm_bw(&c), 1e-12);
    ap_cluster_free(&c);
}

/* Unfused, the GEMM stores its bf16 gradient and a kernel reads it and
 * main_grad and writes main_grad back: 2 + 2 + 2 bytes an element more
 * than the store, one kernel more. */
static void without_the_fusion_a_kernel_adds_the_gradient_into_main_grad(void)
{
    ap_cluster c;
    double bwd = 0;
    if (fc1_backward("tp=1,mbs=1,gbs=8,no_grad_fusion=1", &bwd, &c)) {
        CHECK(0);
        return;
    }
    double dgrad = ap_cost_bgemm(&c, AP_BF16, 1, TOKENS, HIDDEN, FFN);
    double wgrad = ap_cost_bgemm(&c, AP_BF16, 1, HIDDEN, FFN, TOKENS);
    double w = HIDDEN * FFN;
    double add = ap_cost_memop(&c, w, w * (2 + 2 * 2));
    CHECK(add > c.kernel_floor);
    CHECK_NEAR(bwd, dgrad + wgrad + add, 1e-12);
    double fused = 0;
    ap_cluster_free(&c);
    if (fc1_backward("tp=1,mbs=1,gbs=8", &fused, &c)) {
        CHECK(0);
        return;
    }
    CHECK(bwd > fused);
    ap_cluster_free(&c);
}

static int fusion_off(const char *flags)
{
    ap_megatron m;
    return ap_test_megatron_args(flags, &m) ? -1 : m.run.no_grad_fusion;
}

/* Megatron-LM's flag and the spec key say the same; the default is fused,
 * and the key is written only when it is off. */
static void the_flag_and_the_spec_key_agree(void)
{
    CHECK(fusion_off("--tensor-model-parallel-size 2") == 0);
    CHECK(fusion_off("--tensor-model-parallel-size 2 --no-gradient-accumulation-fusion") == 1);
    ap_megatron m;
    char err[AP_ERR_LEN], buf[512];
    ap_megatron_default(&m);
    CHECK(m.run.no_grad_fusion == 0);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK(!strstr(buf, "no_grad_fusion"));
    CHECK(ap_megatron_parse("tp=2,no_grad_fusion=1", &m, err) == AP_OK &&
          m.run.no_grad_fusion == 1);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",no_grad_fusion=1");
    CHECK(ap_megatron_parse("no_grad_fusion=2", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron: no_grad_fusion: bad value \"2\" (0 or 1)");
}

int main(void)
{
    RUN(the_fused_weight_gradient_accumulates_into_main_grad);
    RUN(without_the_fusion_a_kernel_adds_the_gradient_into_main_grad);
    RUN(the_flag_and_the_spec_key_agree);
    return DONE();
}
