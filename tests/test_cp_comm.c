/* test_cp_comm.c -- context parallelism's other communication types, as
 * Transformer Engine runs them (context_parallel.py): allgather
 * (AttnFuncWithCPAndKVAllGather: K and V all-gathered on the compute
 * stream, exposed; dK, dV reduce-scattered) and a2a
 * (AttnFuncWithCPAndQKVOA2A: Ulysses' all-to-alls of q, k, v and out).
 * Shapes are Llama 3 8B's unless said: 32 query heads, 8 KV heads, head
 * dim 128, bf16, 8192 tokens. */
#include "model.h"

#define HEADS 32.0
#define KV_HEADS 8.0
#define HEAD_DIM 128.0
#define SEQ 8192.0

/* The preset without its length curve, so that kernels price as their
 * FLOPs do. */
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

/* A collective on n ranks moving (n-1)/n of `bytes` over NVLink (360 GB/s,
 * 3.4 us a ring step) or, one rank per node, over one 400 Gb/s rail per
 * GPU (45 GB/s, 9.6 us a step): the preset's figures, as test_cp_ring.c
 * reads them, in NCCL's ring latency model of n - 1 steps. */
static double nvlink(int n, double bytes)
{
    return (n - 1) * 3.4e-6 + (n - 1.0) / n * bytes / 360e9;
}

static double rail(int n, double bytes)
{
    return (n - 1) * 9.6e-6 + (n - 1.0) / n * bytes / 45e9;
}

static double cp_compute(const ap_cluster *c, ap_cp_comm t, double heads, double kv,
                         double s, int causal, int cp, int backward)
{
    return ap_cost_attention_cp_comm(c, t, AP_BF16, heads, kv, s, HEAD_DIM, HEAD_DIM, causal, 0,
                                     cp, backward);
}

static double cp_comm(const ap_cluster *c, ap_cp_comm t, double heads, double kv, double s,
                      int cp, int nodes, int backward)
{
    return ap_cost_cp_comm(c, t, AP_BF16, heads, kv, s, HEAD_DIM, HEAD_DIM, 1, cp, nodes,
                           backward);
}

/* A bottom-right causal block of s queries against t keys keeps
 * s*t - s^2/2 scores a head: s x 3s has the FLOPs of an unmasked s x 2.5s
 * block (compute-bound at this size), and s x s is the causal kernel. */
static void a_bottom_right_block_keeps_st_less_half_s_squared(void)
{
    ap_cluster c = h100_flat(8);
    double s = 2048;
    for (int b = 0; b < 2; b++) {
        double rect = ap_cost_attention_rect(&c, AP_BF16, HEADS, s, 3 * s, HEAD_DIM,
                                             HEAD_DIM, 1, b);
        double flops = 2 * HEADS * (3 * s * s - s * s / 2) * 2 * HEAD_DIM * (b ? 2.5 : 1);
        double eff = b ? c.attn_bwd_eff : c.attn_eff;
        CHECK_NEAR(rect, flops / (c.peak_flops[AP_BF16] * eff), 1e-12);
    }
    CHECK(ap_cost_attention_rect(&c, AP_BF16, HEADS, s, s, HEAD_DIM, HEAD_DIM, 1, 0) ==
          ap_cost_attention(&c, AP_BF16, HEADS, s, s, HEAD_DIM, HEAD_DIM, 1));
    CHECK(ap_cost_attention_rect(&c, AP_BF16, HEADS, s, 3 * s, HEAD_DIM, HEAD_DIM, 0, 1) ==
          ap_cost_attention_backward(&c, AP_BF16, HEADS, s, 3 * s, HEAD_DIM, HEAD_DIM, 0));
    ap_cluster_free(&c);
}

/* allgather, cp = 2 in one node: forward gathers K and V, each 8 heads x
 * 8192 rows x 128 bf16 = 16.8 MB gathered, half of it received; backward
 * gathers both again and reduce-scatters dK and dV of the same size. Across
 * nodes the same collectives run on the rail. */
static void allgather_exposes_its_gathers_and_reduce_scatters(void)
{
    ap_cluster c = ap_test_h100(16);
    double s = SEQ / 2, k = 2 * KV_HEADS * SEQ * HEAD_DIM;
    CHECK_NEAR(k, 16777216.0, 1e-15);
    double ag = ap_cost_collective(&c, AP_COLL_ALLGATHER, 2, 1, k);
    double rs = ap_cost_collective(&c, AP_COLL_REDUCESCATTER, 2, 1, k);
    CHECK_NEAR(ag, nvlink(2, k), 0.01);
    CHECK_NEAR(cp_comm(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, s, 2, 1, 0), 2 * ag, 1e-12);
    CHECK_NEAR(cp_comm(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, s, 2, 1, 1), 2 * ag + 2 * rs,
               1e-12);
    /* cp = 16 on 16 nodes (tp = 8 beside it): 16 x 512 rows gathered, 15/16 of
     * them over the rail, four collectives backward. */
    double s16 = SEQ / 16, k16 = 2 * KV_HEADS * SEQ * HEAD_DIM;
    CHECK_NEAR(cp_comm(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, s16, 16, 16, 0),
               2 * rail(16, k16), 0.01);
    CHECK_NEAR(cp_comm(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, s16, 16, 16, 1),
               4 * rail(16, k16), 0.01);
    CHECK(cp_comm(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, SEQ, 1, 1, 1) == 0);
    ap_cluster_free(&c);
}

/* allgather's kernels: rank r's queries are two chunks of s/2 rows, chunk
 * r against keys [0, (r+1) s/2) and chunk 2cp-1-r against [0, (2cp-r) s/2),
 * each causal bottom right: (2cp+1)/2 chunk pairs less two half-squares,
 * cp s^2/2 scores a head, the causal total over cp, on every rank. Around
 * them the gathered K and V reordered (read and written, 2 x 2 bytes x
 * 8 x 8192 x 128 each) and each chunk's output copied into out. */
static void allgather_runs_two_balanced_chunks_per_rank(void)
{
    ap_cluster c = h100_flat(8);
    int cp = 4;
    double s = SEQ / cp, h = s / 2;
    double kv = KV_HEADS * SEQ * HEAD_DIM;
    double worst = 0;
    for (int r = 0; r < cp; r++) {
        double t = 2 * pass(&c, 2 * 2 * kv);
        double flops = 0;
        const int chunks[2] = {r, 2 * cp - 1 - r};
        for (int i = 0; i < 2; i++) {
            double keys = (chunks[i] + 1) * h;
            t += ap_cost_attention_rect(&c, AP_BF16, HEADS, h, keys, HEAD_DIM, HEAD_DIM, 1, 0) +
                 pass(&c, 2 * 2 * HEADS * h * HEAD_DIM);
            flops += h * keys - h * h / 2;
        }
        CHECK_NEAR(flops, cp * s * s / 2, 1e-12);
        worst = fmax(worst, t);
    }
    CHECK_NEAR(cp_compute(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, s, 1, cp, 0), worst, 1e-12);
    /* Without a mask each chunk sees every key: two s/2 x S kernels. */
    double full = 2 * pass(&c, 2 * 2 * kv) +
                  2 * (ap_cost_attention(&c, AP_BF16, HEADS, h, SEQ, HEAD_DIM, HEAD_DIM, 0) +
                       pass(&c, 2 * 2 * HEADS * h * HEAD_DIM));
    CHECK_NEAR(cp_compute(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, s, 0, cp, 0), full, 1e-12);
    ap_cluster_free(&c);
}

/* Backward, without a mask (every rank alike): K and V reordered after the
 * second gather, dK and dV zeroed over all 8192 rows, per chunk its kernel,
 * the dq copy and the adds of dK and dV over the keys it saw, and the sums
 * reordered back before the reduce-scatter. */
static void allgather_backward_accumulates_dkv_over_the_whole_sequence(void)
{
    ap_cluster c = h100_flat(8);
    int cp = 4;
    double s = SEQ / cp, h = s / 2, kv = KV_HEADS * SEQ * HEAD_DIM;
    double t = 4 * pass(&c, 2 * 2 * kv) + 2 * pass(&c, 2 * kv);
    t += 2 * (ap_cost_attention_backward(&c, AP_BF16, HEADS, h, SEQ, HEAD_DIM, HEAD_DIM, 0) +
              pass(&c, 2 * 2 * HEADS * h * HEAD_DIM) + 2 * pass(&c, 3 * 2 * kv));
    CHECK_NEAR(cp_compute(&c, AP_CP_ALLGATHER, HEADS, KV_HEADS, s, 0, cp, 1), t, 1e-12);
    ap_cluster_free(&c);
}

/* a2a: with copies free (an unbounded HBM, no kernel floor) what the
 * all-to-alls add is the four of them forward, q, k, v and out, each the
 * rank's local tensor (32 or 8 heads x s rows x 128 bf16), and five
 * backward (out and dout before, dq, dk, dv after); in one node, or with
 * one cp rank a node. */
static void a2a_moves_q_k_v_and_out_four_times_a_layer_forward(void)
{
    ap_cluster c = ap_test_h100(16);
    c.hbm_bw_measured = 1e30;
    c.kernel_floor = 0;
    int cp = 4;
    double s = SEQ / cp;
    double q = 2 * HEADS * s * HEAD_DIM, k = 2 * KV_HEADS * s * HEAD_DIM;
    for (int nodes = 1; nodes <= cp; nodes += cp - 1) {
        double fwd = 2 * ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, nodes, q) +
                     2 * ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, nodes, k);
        double bwd = 3 * ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, nodes, q) +
                     2 * ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, nodes, k);
        CHECK_NEAR(cp_comm(&c, AP_CP_A2A, HEADS, KV_HEADS, s, cp, nodes, 0), fwd, 1e-12);
        CHECK_NEAR(cp_comm(&c, AP_CP_A2A, HEADS, KV_HEADS, s, cp, nodes, 1), bwd, 1e-12);
    }
    CHECK_NEAR(ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, 1, q), nvlink(cp, q), 0.01);
    CHECK_NEAR(ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, cp, q), rail(cp, q), 0.01);
    ap_cluster_free(&c);
}

/* With copies priced, each all-to-all's copy of the next tensor and the
 * reorder of the previous one run beside it: the exposed time is less than
 * the all-to-alls', and never below what the last one alone adds. */
static void a2a_copies_hide_part_of_the_all_to_alls(void)
{
    ap_cluster c = ap_test_h100(16);
    int cp = 4;
    double s = SEQ / cp, o = 2 * HEADS * s * HEAD_DIM, k = 2 * KV_HEADS * s * HEAD_DIM;
    double whole = 2 * ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, 2, o) +
                   2 * ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, 2, k);
    double got = cp_comm(&c, AP_CP_A2A, HEADS, KV_HEADS, s, cp, 2, 0);
    CHECK(got < whole);
    CHECK(got > ap_cost_collective(&c, AP_COLL_ALLTOALL, cp, 2, o));
    ap_cluster_free(&c);
}

/* a2a's kernel runs all 8192 rows for 32/cp heads: the causal total over cp,
 * no load balancing to price; around it two copies of each tensor moved. */
static void a2a_runs_the_whole_sequence_for_a_share_of_the_heads(void)
{
    ap_cluster c = h100_flat(8);
    int cp = 4;
    double s = SEQ / cp, q = HEADS * s * HEAD_DIM, k = KV_HEADS * s * HEAD_DIM;
    double fwd = ap_cost_attention(&c, AP_BF16, HEADS / cp, SEQ, SEQ, HEAD_DIM, HEAD_DIM, 1) +
                 2 * (2 * pass(&c, 2 * 2 * q) + 2 * pass(&c, 2 * 2 * k));
    double bwd = ap_cost_attention_backward(&c, AP_BF16, HEADS / cp, SEQ, SEQ, HEAD_DIM,
                                            HEAD_DIM, 1) +
                 2 * (3 * pass(&c, 2 * 2 * q) + 2 * pass(&c, 2 * 2 * k));
    CHECK_NEAR(cp_compute(&c, AP_CP_A2A, HEADS, KV_HEADS, s, 1, cp, 0), fwd, 1e-12);
    CHECK_NEAR(cp_compute(&c, AP_CP_A2A, HEADS, KV_HEADS, s, 1, cp, 1), bwd, 1e-12);
    ap_cluster_free(&c);
}

/* p2p is the ring, call for call. */
static void p2p_is_the_ring(void)
{
    ap_cluster c = ap_test_h100(16);
    for (int cp = 2; cp <= 8; cp *= 2)
        for (int b = 0; b < 2; b++) {
            double s = SEQ / cp;
            CHECK(cp_compute(&c, AP_CP_P2P, HEADS, KV_HEADS, s, 1, cp, b) ==
                  ap_cost_attention_cp(&c, AP_BF16, HEADS, KV_HEADS, s, HEAD_DIM, HEAD_DIM, 1,
                                       cp, b));
            CHECK(cp_comm(&c, AP_CP_P2P, HEADS, KV_HEADS, s, cp, 2, b) ==
                  ap_cost_cp_ring(&c, AP_BF16, HEADS, KV_HEADS, s, HEAD_DIM, HEAD_DIM, 1, cp,
                                  2, b));
        }
    ap_cluster_free(&c);
}

static double step_of(const ap_graph *g, int gpus, const char *spec)
{
    ap_plan p;
    char err[AP_ERR_LEN];
    double step = -1;
    if (ap_test_megatron_plan(g, gpus, spec, NULL, &p, err) == AP_OK)
        step = p.step_time;
    else
        fprintf(stderr, "%s: %s\n", spec, err);
    ap_plan_free(&p);
    return step;
}

#define SPEC "tp=1,pp=1,cp=2,mbs=1,gbs=16,sp=0,recompute=none,zero=1"

/* cp_comm=p2p, and cp_comm of any type at cp = 1, is the spec without the
 * key: the same step, to the bit. */
static void p2p_and_cp_one_price_as_before(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 8192);
    CHECK(g != NULL);
    if (!g)
        return;
    CHECK(step_of(g, 8, SPEC) == step_of(g, 8, SPEC ",cp_comm=p2p"));
    const char *one = "tp=1,pp=1,cp=1,mbs=1,gbs=16,sp=0,recompute=none,zero=1";
    CHECK(step_of(g, 8, one) == step_of(g, 8, "tp=1,pp=1,cp=1,mbs=1,gbs=16,sp=0,"
                                              "recompute=none,zero=1,cp_comm=a2a"));
    CHECK(step_of(g, 8, SPEC ",cp_comm=allgather") != step_of(g, 8, SPEC));
    ap_graph_free(g);
}

/* The attention op of a plan's first layer. */
static void layer_attention(const ap_graph *g, const ap_cluster *c, const ap_plan *p,
                            ap_op_cost *oc)
{
    ap_strategy s;
    int op = ap_test_layer_op(g, p, "l0.attn", &s);
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    memset(oc, 0, sizeof *oc);
    if (op >= 0)
        ap_price_op(&x, op, &s, oc);
}

/* In a plan the types price the attention op through the same functions,
 * and allgather keeps one more output shard for backward (out_per_step
 * beside out): 32 heads x 4096 rows x 128 bf16 = 33.5 MB a layer. */
static void a_plan_prices_the_type_it_was_given(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 8192);
    ap_cluster c[3];
    ap_plan p[3];
    char err[AP_ERR_LEN];
    const char *types[] = {"p2p", "allgather", "a2a"};
    int ok = g != NULL;
    for (int i = 0; i < 3; i++) {
        char spec[160];
        snprintf(spec, sizeof spec, SPEC ",cp_comm=%s", types[i]);
        if (ap_test_megatron_plan(g, 8, spec, &c[i], &p[i], err)) {
            fprintf(stderr, "%s\n", err);
            ok = 0;
        }
    }
    CHECK(ok);
    if (ok) {
        ap_op_cost oc[3];
        for (int i = 0; i < 3; i++)
            layer_attention(g, &c[i], &p[i], &oc[i]);
        double s = SEQ / 2;
        CHECK(p[1].run.cp_comm == AP_CP_ALLGATHER && p[2].run.cp_comm == AP_CP_A2A);
        CHECK_NEAR(oc[1].fwd, cp_compute(&c[1], AP_CP_ALLGATHER, HEADS, KV_HEADS, s, 1, 2, 0),
                   1e-12);
        CHECK_NEAR(oc[2].bwd, cp_compute(&c[2], AP_CP_A2A, HEADS, KV_HEADS, s, 1, 2, 1), 1e-12);
        CHECK_NEAR(oc[1].fwd_comm, cp_comm(&c[1], AP_CP_ALLGATHER, HEADS, KV_HEADS, s, 2, 1, 0),
                   1e-12);
        CHECK_NEAR(oc[1].act_bytes - oc[0].act_bytes, 2 * HEADS * s * HEAD_DIM, 1e-12);
        CHECK(oc[2].act_bytes == oc[0].act_bytes);
    }
    for (int i = 0; i < 3; i++) {
        ap_plan_free(&p[i]);
        ap_cluster_free(&c[i]);
    }
    ap_graph_free(g);
}

/* Transformer Engine asserts the heads and KV heads of a tensor-parallel
 * rank divisible by cp under a2a: Llama 3 8B at tp = 8 leaves 4 heads and 1
 * KV head a rank, which cp = 2 cannot split; at tp = 4, 2 KV heads can. */
static void a2a_refuses_heads_cp_does_not_divide(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 8192);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(ap_test_megatron_plan(g, 16, "tp=8,pp=1,cp=2,mbs=1,gbs=8,sp=1,cp_comm=a2a", NULL,
                                &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "cp_comm=a2a (--cp-comm-type a2a): cp=2 does not divide the 8/8 = 1 "
                       "KV heads");
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(g, 8, "tp=4,pp=1,cp=2,mbs=1,gbs=8,sp=1,cp_comm=a2a", NULL,
                                &p, err) == AP_OK);
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(g, 16, "tp=8,pp=1,cp=2,mbs=1,gbs=8,sp=1,cp_comm=allgather",
                                NULL, &p, err) == AP_OK);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* Transformer Engine runs MLA (value head dim other than the query's,
 * DeepSeek-V3's 192 and 128) only with p2p. */
static void mla_runs_only_the_ring(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 4096);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    int rc = ap_test_megatron_plan(g, 2048, "tp=8,pp=16,cp=2,ep=64,mbs=1,gbs=64,sp=1,"
                                   "cp_comm=allgather", NULL, &p, err);
    CHECK(rc == AP_EINPUT);
    CHECK_STR_HAS(err, "cp_comm=allgather (--cp-comm-type allgather): Transformer Engine "
                       "runs MLA");
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* The flag: one type for every layer (one value, or the same per layer) is
 * the spec key; a list mixing types and a2a+p2p are refused at cp > 1 and
 * read past at cp = 1; the spec writes the key back where it is not p2p. */
static void the_flag_is_the_spec_key(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN], buf[512];
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--context-parallel-size 2 --cp-comm-type allgather", &m,
                                 err) == AP_OK);
    CHECK(m.run.cp_comm == AP_CP_ALLGATHER);
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--context-parallel-size 2 --cp-comm-type a2a a2a a2a", &m,
                                 err) == AP_OK);
    CHECK(m.run.cp_comm == AP_CP_A2A);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",cp_comm=a2a");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--context-parallel-size 2 --cp-comm-type p2p a2a", &m,
                                 err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--cp-comm-type p2p ... a2a: autopar prices one communication type");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--context-parallel-size 4 --cp-comm-type a2a+p2p "
                                 "--hierarchical-context-parallel-sizes 2 2", &m,
                                 err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--cp-comm-type a2a+p2p: Transformer Engine's hierarchical");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--cp-comm-type a2a+p2p", &m, err) == AP_OK);
    CHECK(m.run.cp_comm == AP_CP_P2P);
    CHECK(ap_megatron_parse("cp=2,cp_comm=ring", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "cp_comm: bad value \"ring\" (p2p, allgather or a2a)");
    ap_megatron_default(&m);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK(!strstr(buf, "cp_comm"));
}

int main(void)
{
    RUN(a_bottom_right_block_keeps_st_less_half_s_squared);
    RUN(allgather_exposes_its_gathers_and_reduce_scatters);
    RUN(allgather_runs_two_balanced_chunks_per_rank);
    RUN(allgather_backward_accumulates_dkv_over_the_whole_sequence);
    RUN(a2a_moves_q_k_v_and_out_four_times_a_layer_forward);
    RUN(a2a_copies_hide_part_of_the_all_to_alls);
    RUN(a2a_runs_the_whole_sequence_for_a_share_of_the_heads);
    RUN(p2p_is_the_ring);
    RUN(p2p_and_cp_one_price_as_before);
    RUN(a_plan_prices_the_type_it_was_given);
    RUN(a2a_refuses_heads_cp_does_not_divide);
    RUN(mla_runs_only_the_ring);
    RUN(the_flag_is_the_spec_key);
    return DONE();
}
