/* test_cp_attention.c -- context-parallel attention as Transformer Engine
 * runs it for Megatron-Core (AttnFuncWithCPAndKVP2P, transformer_engine/
 * pytorch/attention/dot_product_attention/context_parallel.py): cp steps of
 * a KV ring, one attention kernel per step at that step's block size, and
 * between them the torch.compile'd corrections that merge the partial
 * results, each a pass over HBM.
 *
 * Shapes are Llama 3 8B's: 32 query heads, 8 KV heads, head dim 128, a
 * sequence of S = 8192 split over cp ranks, s = S/cp rows each; bf16. */
#include "model.h"

#define HEADS 32.0
#define KV_HEADS 8.0
#define HEAD_DIM 128.0
#define SEQ 8192.0

/* The preset without its length curve: every kernel at the 8k efficiency,
 * so that kernel times add up as their FLOPs do. The curve prices an
 * s x s/2 block apart from an s/2 x s one (test_attention_len.c). */
static ap_cluster h100_flat(int gpus)
{
    ap_cluster c = ap_test_h100(gpus);
    c.attn_len_n = 0;
    return c;
}

/* A memory-bound pass of `bytes` on H100 SXM: 3.35 TB/s at 90%, never under
 * the 4 us kernel floor. */
static double pass(const ap_cluster *c, double bytes)
{
    return fmax(c->kernel_floor, bytes / (3.35e12 * 0.9));
}

static double fwd(const ap_cluster *c, double sq, double sk, int causal)
{
    return ap_cost_attention(c, AP_BF16, HEADS, sq, sk, HEAD_DIM, HEAD_DIM, causal);
}

static double bwd(const ap_cluster *c, double sq, double sk, int causal)
{
    return ap_cost_attention_backward(c, AP_BF16, HEADS, sq, sk, HEAD_DIM, HEAD_DIM,
                                      causal);
}

/* The forward corrections of a rank whose cp-1 later steps all cover its
 * whole s rows (the last rank, causal; every rank without a mask), R = 32 s
 * rows, lse 4 bytes a row, out 2 bytes an element:
 *   torch.cat of the local K and V into the first
 *   ring buffer (read and written, 8 s (128 + 128))  2*2*8*256s
 *   torch.clone of step 0's lse                       8R
 *   flash_attn_fwd_softmax_lse_correction, per step  12R   (read 2, write 1)
 *   flash_attn_fwd_out_correction_init             2*2*128R + 8R
 *   flash_attn_fwd_out_correction, per step        3*2*128R + 8R
 * out stays bf16 (the init's .to(out_init_step.dtype)), so no final cast. */
static double forward_corrections(const ap_cluster *c, int cp)
{
    double rows = HEADS * SEQ / cp, out = 2 * HEAD_DIM * rows;
    double kv = KV_HEADS * SEQ / cp * 2 * HEAD_DIM;
    double t = pass(c, 2 * 2 * kv) + pass(c, 8 * rows) + pass(c, 2 * out + 8 * rows);
    for (int j = 1; j < cp; j++)
        t += pass(c, 12 * rows) + pass(c, 3 * out + 8 * rows);
    return t;
}

/* Step 0 is causal over the rank's 2 chunks (s x s, half the blocks), each
 * later step s x s/2 without a mask: cp * 32 s^2 (d + e) FLOPs in all,
 * which is 32 s S (d + e), the single causal s x S kernel's. Every block is
 * compute-bound on H100, so the kernels' times add up to that kernel's. */
static void the_steps_do_the_single_kernels_flops(void)
{
    ap_cluster c = h100_flat(8);
    for (int cp = 2; cp <= 4; cp *= 2) {
        double s = SEQ / cp, steps = fwd(&c, s, s, 1), back = bwd(&c, s, s, 1);
        for (int j = 1; j < cp; j++) {
            steps += fwd(&c, s, s / 2, 0);
            back += bwd(&c, s, s / 2, 0);
        }
        CHECK_NEAR(steps, fwd(&c, s, SEQ, 1), 1e-12);
        CHECK_NEAR(back, bwd(&c, s, SEQ, 1), 1e-12);
        CHECK_NEAR(fwd(&c, s, SEQ, 1), HEADS * SEQ * SEQ * 2 * HEAD_DIM / cp / 529e12,
                   1e-12);
    }
    ap_cluster_free(&c);
}

/* Forward: the kernels of the last rank (step 0 causal, the others over the
 * first half of the received KV against all its queries) plus its
 * corrections; its rows all need correcting, so it is the slowest. */
static void forward_is_the_steps_plus_the_corrections(void)
{
    ap_cluster c = ap_test_h100(8);
    for (int cp = 2; cp <= 4; cp *= 2) {
        double s = SEQ / cp;
        double want = fwd(&c, s, s, 1) + (cp - 1) * fwd(&c, s, s / 2, 0) +
                      forward_corrections(&c, cp);
        CHECK_NEAR(ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, s, HEAD_DIM,
                                        HEAD_DIM, 1, cp, 0),
                   want, 1e-12);
    }
    ap_cluster_free(&c);
}

/* Backward on the last rank, the slowest with 8 KV heads to 32 query heads
 * (dQ, whole on every step, outweighs dK and dV). Q = 32*s*128 elements of
 * dQ, K = 8*s*128 of dK and of dV, 2 bytes each:
 *   p2p_comm_buffers[0][0].copy_(kv)              2*2*2K
 *   step i = 0 (forward step cp-1, s x s/2): dq.copy_(dq_)  2*2Q;
 *     dk[0].copy_(dk_), dv[0].copy_(dv_)          2*2*K/2 each
 *   steps 0 < i < cp-1 (s x s/2): dq.add_(dq_)    3*2Q;
 *     dk[0].add_(dk_), dv[0].add_(dv_)            3*2*K/2 each
 *   step cp-1 (forward step 0, causal s x s): dq.add_ 3*2Q;
 *     dk.add_(dk_), dv.add_(dv_)                  3*2*K each */
static void backward_is_the_steps_plus_the_accumulations(void)
{
    /* Flat: with the length curve rank 0's s/2 x s blocks, whose backward
     * loops over only s/2 queries, are slower and it paces the backward. */
    ap_cluster c = h100_flat(8);
    for (int cp = 2; cp <= 4; cp *= 2) {
        double s = SEQ / cp, q = HEADS * s * HEAD_DIM, k = KV_HEADS * s * HEAD_DIM;
        double want = pass(&c, 2 * 2 * 2 * k);
        want += bwd(&c, s, s / 2, 0) + pass(&c, 2 * 2 * q) + 2 * pass(&c, 2 * 2 * k / 2);
        for (int i = 1; i < cp - 1; i++)
            want += bwd(&c, s, s / 2, 0) + pass(&c, 3 * 2 * q) +
                    2 * pass(&c, 3 * 2 * k / 2);
        want += bwd(&c, s, s, 1) + pass(&c, 3 * 2 * q) + 2 * pass(&c, 3 * 2 * k);
        CHECK_NEAR(ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, s, HEAD_DIM,
                                        HEAD_DIM, 1, cp, 1),
                   want, 1e-12);
    }
    ap_cluster_free(&c);
}

/* With as many KV heads as query heads, dK and dV weigh as much as dQ, and
 * rank 0, whose later steps accumulate whole dK and dV (the second half of
 * its queries against all the received KV), is the slowest backward at
 * cp = 4: its accumulations are 7.5cp - 2.5 = 27.5 passes of dQ's size
 * against the last rank's 6cp + 1 = 25. */
static void without_gqa_rank_zero_paces_the_backward(void)
{
    ap_cluster c = ap_test_h100(8);
    int cp = 4;
    double s = SEQ / cp, q = HEADS * s * HEAD_DIM, rows = HEADS * s;
    /* Rank 0: its lse's second half made contiguous and the KV copied;
     * then steps i = 0..2 (s/2 x s): dq[1].copy_ then dq[1].add_, dk and dv
     * copied whole then added whole; the causal step: dq[0].copy_ and
     * dq[1].add_, dk[0].add_ and dk[1].copy_ (dv likewise). */
    double want = pass(&c, 4 * rows) + pass(&c, 2 * 2 * 2 * q);
    want += bwd(&c, s / 2, s, 0) + pass(&c, 2 * q) + 2 * pass(&c, 2 * 2 * q);
    for (int i = 1; i < cp - 1; i++)
        want += bwd(&c, s / 2, s, 0) + pass(&c, 3 * q) + 2 * pass(&c, 3 * 2 * q);
    want += bwd(&c, s, s, 1) + pass(&c, 2 * q) + pass(&c, 3 * q) +
            2 * (pass(&c, 3 * q) + pass(&c, 2 * q));
    CHECK_NEAR(ap_cost_attention_cp(&c, AP_BF16, HEADS, HEADS, s, HEAD_DIM, HEAD_DIM, 1,
                                    cp, 1),
               want, 1e-12);
    ap_cluster_free(&c);
}

/* Without a mask the queries are not split in halves: cp steps of s x s,
 * every correction over all rows, dQ, dK and dV copied then added whole. */
static void bidirectional_attention_runs_whole_blocks(void)
{
    ap_cluster c = ap_test_h100(8);
    int cp = 2;
    double s = SEQ / cp, q = HEADS * s * HEAD_DIM, k = KV_HEADS * s * HEAD_DIM;
    CHECK_NEAR(ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, s, HEAD_DIM, HEAD_DIM,
                                    0, cp, 0),
               2 * fwd(&c, s, s, 0) + forward_corrections(&c, cp), 1e-12);
    double back = pass(&c, 2 * 2 * 2 * k) + 2 * bwd(&c, s, s, 0) + pass(&c, 2 * 2 * q) +
                  pass(&c, 3 * 2 * q) + 2 * (pass(&c, 2 * 2 * k) + pass(&c, 3 * 2 * k));
    CHECK_NEAR(ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, s, HEAD_DIM, HEAD_DIM,
                                    0, cp, 1),
               back, 1e-12);
    ap_cluster_free(&c);
}

static void one_rank_is_plain_flash_attention(void)
{
    ap_cluster c = ap_test_h100(8);
    CHECK(ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, SEQ, HEAD_DIM, HEAD_DIM, 1,
                               1, 0) == fwd(&c, SEQ, SEQ, 1));
    CHECK(ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, SEQ, HEAD_DIM, HEAD_DIM, 1,
                               1, 1) == bwd(&c, SEQ, SEQ, 1));
    CHECK(ap_cost_attention_cp(&c, AP_BF16, 0, KV_HEADS, SEQ, HEAD_DIM, HEAD_DIM, 1, 2,
                               0) == 0);
    ap_cluster_free(&c);
}

/* The attention op of a priced plan's first layer, forward and backward. */
static void price_layer_attention(const ap_graph *g, const ap_cluster *c,
                                  const ap_plan *p, ap_op_cost *oc)
{
    const ap_block *b = &p->stages[0].blocks[2];
    const ap_block_point *bp = ap_test_layer(p);
    int op = ap_graph_find_op(g, "l0.attn");
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    memset(oc, 0, sizeof *oc);
    for (int k = 0; k < b->nops; k++)
        if (b->ops[k] == op)
            ap_price_op(&x, op, &bp->strat[k], oc);
}

/* Llama 3 8B at 8192 tokens on 8 H100s, tp1 cp2 dp4, one sequence per
 * micro-batch: each rank's attention is priced as TE's two steps plus the
 * forward corrections, and backward the accumulations; without cp it is the
 * single kernel, as before. */
static void megatron_cp2_prices_the_ring_of_kernels(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 8192);
    ap_cluster c, c1;
    ap_plan p, p1;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    int rc = ap_test_megatron_plan(g, 8, "tp=1,pp=1,cp=2,mbs=1,gbs=128,sp=0,"
                                   "recompute=none,zero=1", &c, &p, err);
    int rc1 = ap_test_megatron_plan(g, 8, "tp=1,pp=1,cp=1,mbs=1,gbs=128,sp=0,"
                                    "recompute=none,zero=1", &c1, &p1, err);
    if (rc || rc1)
        fprintf(stderr, "%s\n", err);
    CHECK(rc == 0 && rc1 == 0);
    if (g && !rc && !rc1) {
        ap_op_cost oc, oc1;
        price_layer_attention(g, &c, &p, &oc);
        price_layer_attention(g, &c1, &p1, &oc1);
        double s = SEQ / 2, old = fwd(&c, s, SEQ, 1);
        /* The steps' FLOPs add up to the single kernel's, but on the length
         * curve each step runs at its own rate (the causal 4k one, the
         * unmasked 2k one, faster than the causal 8k kernel's): the steps,
         * not that kernel, plus the corrections. */
        double steps = fwd(&c, s, s, 1) + fwd(&c, s, s / 2, 0);
        CHECK_NEAR(oc.fwd, steps + forward_corrections(&c, 2), 1e-12);
        CHECK(steps < old);
        CHECK_NEAR(ap_test_layer(&p)->attn_fwd, oc.fwd, 1e-12);
        CHECK_NEAR(oc.bwd, ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, s, HEAD_DIM,
                                                HEAD_DIM, 1, 2, 1),
                   1e-12);
        CHECK(oc.bwd > bwd(&c, s, SEQ, 1));
        CHECK(oc1.fwd == fwd(&c1, SEQ, SEQ, 1));
        CHECK(oc1.bwd == bwd(&c1, SEQ, SEQ, 1));
        /* TE keeps q, the last KV received (as large as the local K and V),
         * out and the merged fp32 lse: half of what one rank keeps
         * without cp. */
        CHECK_NEAR(oc.act_bytes, oc1.act_bytes / 2, 1e-12);
    }
    ap_plan_free(&p);
    ap_plan_free(&p1);
    ap_cluster_free(&c);
    ap_cluster_free(&c1);
    ap_graph_free(g);
}

int main(void)
{
    RUN(the_steps_do_the_single_kernels_flops);
    RUN(forward_is_the_steps_plus_the_corrections);
    RUN(backward_is_the_steps_plus_the_accumulations);
    RUN(without_gqa_rank_zero_paces_the_backward);
    RUN(bidirectional_attention_runs_whole_blocks);
    RUN(one_rank_is_plain_flash_attention);
    RUN(megatron_cp2_prices_the_ring_of_kernels);
    return DONE();
}
