/* The loss as Megatron-LM computes it (megatron/core/tensor_parallel/
 * cross_entropy.py, unfused): the logits upcast to fp32 and walked by one
 * kernel per step, forward and backward; the fp32 softmax kept for backward;
 * a vocabulary split giving each rank its share of both. */
#include "model.h"

#include "planner/planner.h"

/* Forward, per logit: .float() reads 2 bytes and writes 4; max reads 4;
 * subtract, exp and divide read and write 4 each (24); sum reads 4. That is
 * 38 bytes. Backward: the in-place multiply by the loss gradient (8) and
 * the cast of the gradient back to bf16 (4 + 2): 14 bytes. */
static void bf16_logits_cross_hbm_38_bytes_forward_and_14_backward(void)
{
    ap_cluster c = ap_test_h100(8);
    double logits = 8192.0 * 128256; /* one Llama 3 sequence */
    double bw = 3.35e12 * 0.9;
    CHECK_NEAR(ap_cost_cross_entropy(&c, AP_BF16, logits, 0), 38 * logits / bw, 1e-12);
    CHECK_NEAR(ap_cost_cross_entropy(&c, AP_BF16, logits, 1), 14 * logits / bw, 1e-12);
    ap_cluster_free(&c);
}

/* .float() on fp32 logits returns them as they are: no cast either way. */
static void fp32_logits_skip_both_casts(void)
{
    ap_cluster c = ap_test_h100(8);
    double logits = 2048.0 * 50257;
    double bw = 3.35e12 * 0.9;
    CHECK_NEAR(ap_cost_cross_entropy(&c, AP_FP32, logits, 0), 32 * logits / bw, 1e-12);
    CHECK_NEAR(ap_cost_cross_entropy(&c, AP_FP32, logits, 1), 8 * logits / bw, 1e-12);
    ap_cluster_free(&c);
}

static void no_logits_cost_nothing_and_a_few_the_kernel_floor(void)
{
    ap_cluster c = ap_test_h100(8);
    CHECK(ap_cost_cross_entropy(&c, AP_BF16, 0, 0) == 0);
    CHECK(ap_cost_cross_entropy(&c, AP_BF16, 10, 1) == c.kernel_floor);
    ap_cluster_free(&c);
}

/* gpt-1.3b (vocabulary 50,257, sequence 2048) on a mesh of 8 with the
 * vocabulary split 8 ways, two sequences per micro-batch: each rank walks
 * 2 * 2048 * 50257 / 8 logits and keeps their fp32 softmax, 4 bytes each. */
static void a_vocabulary_split_gives_each_rank_its_share(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_cluster c = ap_test_h100(8);
    ap_mesh mesh;
    ap_mesh_init(&mesh, 8, 1, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &mesh, .batch = 2, .nmicro = 4,
                      .zero = AP_ZERO_1};
    char v = ap_graph_label_of(g, AP_DIM_VOCAB);
    ap_strategy s = {{v, 0}, {0, 0}};
    ap_op_cost oc;
    ap_price_op(&x, ap_graph_find_op(g, "loss"), &s, &oc);
    double share = 2 * 2048.0 * 50257 / 8;
    CHECK_NEAR(oc.fwd, ap_cost_cross_entropy(&c, AP_BF16, share, 0), 1e-12);
    CHECK_NEAR(oc.bwd, ap_cost_cross_entropy(&c, AP_BF16, share, 1), 1e-12);
    CHECK_NEAR(oc.act_bytes, 4 * share, 1e-3);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* The graph itself records the softmax as what the loss keeps: 4 bytes per
 * logit of the graph's batch, and the bf16 logits are not kept. */
static void the_graph_counts_the_fp32_softmax_as_saved(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    if (!g) {
        CHECK(0);
        return;
    }
    const ap_op *loss = &g->ops[ap_graph_find_op(g, "loss")];
    const ap_tensor *lg = &g->tensors[loss->inputs[0]];
    CHECK(lg->dtype == AP_BF16);
    CHECK_NEAR(loss->saved_bytes, 4 * (double)lg->elems, 1e-3);
    CHECK(loss->saves_in == 0);
    ap_graph_free(g);
}

int main(void)
{
    RUN(bf16_logits_cross_hbm_38_bytes_forward_and_14_backward);
    RUN(fp32_logits_skip_both_casts);
    RUN(no_logits_cost_nothing_and_a_few_the_kernel_floor);
    RUN(a_vocabulary_split_gives_each_rank_its_share);
    RUN(the_graph_counts_the_fp32_softmax_as_saved);
    return DONE();
}
