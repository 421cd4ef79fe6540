/* test_comm_kinds.c -- communication split by kind matches the closed forms
 * of Megatron's layouts: tensor parallelism's all-reduces (Shoeybi et al.
 * 2019: two per layer forward, two backward, of b*s*h elements), sequence
 * parallelism's reduce-scatter and all-gather pairs (Korthikanti et al.
 * 2022), pipeline sends of one activation per micro-batch each way, and
 * ZeRO-3's weight gathers, with the kinds adding up to the total. The
 * layouts' collectives are priced whole here (tp_sync=1): what a
 * column-parallel layer's GEMMs hide of them is test_tp_overlap.c's. */
#include "model.h"

static ap_graph *gpt13(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    CHECK(g != NULL);
    return g;
}

static double kinds_sum(const ap_comm_kinds *k)
{
    return k->tp + k->reshard + k->expert + k->context + k->param_gather + k->grad_reduce +
           k->amax;
}

/* b * s * h bf16 elements: one layer's activation for one micro-batch. */
static double activation_bytes(int mbs) { return mbs * 2048.0 * 2048 * 2; }

static void megatron_tp_layer_has_two_allreduces_each_way(void)
{
    ap_graph *g = gpt13();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=8,mbs=2,gbs=64,tp_sync=1", &c, &p, err), err);
    const ap_block_point *bp = ap_test_layer(&p);
    double ar = ap_cost_allreduce(&c, 8, 1, activation_bytes(2));
    CHECK(ar > 0);
    CHECK_NEAR(bp->kfwd.tp, 2 * ar, 1e-12);
    CHECK_NEAR(bp->kbwd.tp, 2 * ar, 1e-12);
    CHECK(bp->kfwd.reshard == 0 && bp->kbwd.reshard == 0);
    CHECK(kinds_sum(&bp->kfwd) == bp->kfwd.tp && kinds_sum(&bp->kbwd) == bp->kbwd.tp);
    CHECK_NEAR(bp->comm_fwd + bp->comm_bwd, 4 * ar, 1e-12);
    /* One stage: nothing to send. */
    CHECK(p.t_p2p == 0);
    CHECK_NEAR(kinds_sum(&p.t_kinds), p.t_comm, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Pure data parallelism splits the batch of the loss too: each rank's loss
 * is a mean over its own tokens, and the ranks average one scalar per
 * micro-batch, which NCCL runs with its LL protocol: over 16 GPUs on 2
 * nodes its tree, 27.5 us, where the Simple ring's 30 steps would take
 * 114 us; there is no vocabulary-parallel reduction (three numbers per
 * token), which only a split vocabulary needs. */
static void data_parallel_loss_reduces_one_scalar_per_micro_batch(void)
{
    ap_graph *g = gpt13();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=1,mbs=2,gbs=64", &c, &p, err), err);
    double scalar = ap_cost_allreduce_small(&c, 16, 2, 4);
    CHECK_NEAR(scalar, 27.504e-6, 1e-12);
    CHECK(ap_cost_allreduce(&c, 16, 2, 4) > 4 * scalar);
    CHECK(p.nmicro == 2);
    CHECK_NEAR(p.t_kinds.tp, p.nmicro * scalar, 1e-12);
    CHECK(p.t_kinds.reshard == 0);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void sequence_parallel_trades_allreduce_for_rs_and_ag(void)
{
    ap_graph *g = gpt13();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=8,mbs=2,gbs=64,sp=1,tp_sync=1", &c, &p, err),
               err);
    const ap_block_point *bp = ap_test_layer(&p);
    double b = activation_bytes(2);
    double rs = ap_cost_reducescatter(&c, 8, 1, b);
    double ag = ap_cost_allgather(&c, 8, 1, b);
    /* Forward: the row-parallel outputs reduce-scatter onto the sequence
     * (partial sums: tensor-parallel), and the sequence-split input is
     * gathered for the column-parallel matmuls (a layout conversion:
     * resharding). Backward mirrors both. */
    CHECK_NEAR(bp->kfwd.tp, 2 * rs, 1e-12);
    /* Megatron gathers twice (before the fused QKV and before fc1); the
     * graph has q, k and v as three matmuls and each edge pays its own
     * gather today, so up to four. */
    CHECK(bp->kfwd.reshard >= 2 * ag * (1 - 1e-12));
    CHECK(bp->kfwd.reshard <= 4 * ag * (1 + 1e-12));
    CHECK_NEAR(bp->kbwd.tp, 2 * ag + 2 * rs, 1e-12);
    /* The column-parallel matmuls save the sequence shard, not the gathered
     * input, and gather it again for their weight gradients (Megatron-LM):
     * once per gather of the forward, q, k and v sharing theirs as the
     * forward does. */
    CHECK_NEAR(bp->kbwd.reshard, 2 * ag, 1e-12);
    CHECK_NEAR(kinds_sum(&bp->kfwd), bp->comm_fwd, 1e-12);
    CHECK_NEAR(kinds_sum(&bp->kbwd), bp->comm_bwd, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void pipeline_sends_one_activation_each_way_per_micro_batch(void)
{
    ap_graph *g = gpt13();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    /* Two stages of 8 GPUs: the boundary crosses from node 0 to node 1. */
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,pp=2,mbs=2,gbs=64", &c, &p, err), err);
    double send = ap_cost_sendrecv(&c, 2, activation_bytes(2));
    CHECK_NEAR(p.stages[0].p2p, send, 1e-12);
    CHECK_NEAR(p.t_p2p, 2 * p.nmicro * send, 1e-12);
    CHECK(p.nmicro == 8);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void zero3_gathers_are_their_own_kind(void)
{
    ap_graph *g = gpt13();
    ap_cluster c;
    ap_plan z1, z3;
    char err[AP_ERR_LEN];
    /* With the gradient reduction serial (overlap_grad=0) every collective
     * of ZeRO-3 shows whole; the next test hides them. */
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=2,mbs=2,gbs=64,zero=1,overlap_grad=0", NULL,
                                     &z1, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=2,mbs=2,gbs=64,zero=3,overlap_grad=0", &c,
                                     &z3, err), err);
    /* The same layout: only the weight gathers differ. */
    CHECK(z1.t_kinds.param_gather == 0 && z3.t_kinds.param_gather > 0);
    CHECK_NEAR(z3.t_kinds.tp, z1.t_kinds.tp, 1e-12);
    CHECK_NEAR(z3.t_kinds.reshard, z1.t_kinds.reshard, 1e-12);
    CHECK(z1.t_kinds.grad_reduce == 0 && z3.t_kinds.grad_reduce > 0);
    CHECK_NEAR(z3.t_comm - z1.t_comm,
               z3.t_kinds.param_gather + z3.t_kinds.grad_reduce, 1e-9);
    CHECK_NEAR(kinds_sum(&z3.t_kinds), z3.t_comm, 1e-12);
    /* Forward and backward each gather every weight of the layer over the 4
     * data-parallel ranks: at least the bandwidth term of one all-gather of
     * the layer's bf16 tensor-parallel shard each way. */
    const ap_block_point *bp = ap_test_layer(&z3);
    double params = 12.0 * 2048 * 2048 / 2; /* per TP rank, weights only */
    double ag = ap_cost_allgather(&c, 4, 1, 2 * params);
    CHECK(bp->kfwd.param_gather >= ag * 0.99 && bp->kbwd.param_gather >= ag * 0.99);
    CHECK_NEAR(bp->kfwd.param_gather, bp->kbwd.param_gather, 1e-12);
    /* And every micro-batch's gradients are reduce-scattered over them. */
    double rs = ap_cost_reducescatter(&c, 4, 1, 2 * params);
    CHECK(bp->kbwd.grad_reduce >= rs * 0.99 && bp->kfwd.grad_reduce == 0);
    ap_plan_free(&z1);
    ap_plan_free(&z3);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Megatron FSDP, torch FSDP2 and DeepSpeed's stage 3 gather a module's
 * weights on a stream of their own while the module before it computes,
 * and reduce-scatter its gradients while the backward goes on: with the
 * reduction overlapped, an op shows only what of its collectives its own
 * pass does not cover (the layer before repeats it). GPT 1.3B's fc1 on 8
 * data-parallel H100s, two sequences a micro-batch: its 2048 x 8192 weight
 * and its bias gathered over NVLink take less than its forward GEMM, so
 * nothing shows; serial, all of it. */
static void zero3_collectives_hide_behind_the_compute_beside_them(void)
{
    ap_graph *g = gpt13();
    ap_cluster c;
    ap_plan on, off;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,mbs=2,gbs=64,zero=3", &c, &on, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,mbs=2,gbs=64,zero=3,overlap_grad=0", NULL,
                                     &off, err), err);
    ap_strategy s;
    int op = ap_test_layer_op(g, &on, "l0.fc1", &s);
    CHECK(op >= 0);
    if (op >= 0) {
        ap_price_ctx x = ap_test_stage_ctx(g, &c, &on, 0), xs = x;
        xs.serial_grad = 1;
        ap_op_cost hid, shown;
        ap_price_op(&x, op, &s, &hid);
        ap_price_op(&xs, op, &s, &shown);
        double w = 2048.0 * 8192 * 2, bias = 8192.0 * 2;
        double ag = ap_cost_allgather(&c, 8, 1, w) + ap_cost_allgather(&c, 8, 1, bias);
        double rs = ap_cost_reducescatter(&c, 8, 1, w) + ap_cost_reducescatter(&c, 8, 1, bias);
        CHECK_NEAR(shown.fwd_comm, ag, 1e-12);
        CHECK_NEAR(shown.bwd_comm, ag + rs, 1e-12);
        CHECK(ag < hid.fwd && ag + rs < hid.bwd);
        CHECK(hid.fwd_comm == 0 && hid.bwd_comm == 0);
        /* A micro-batch too short to cover them shows the rest. */
        x.batch = xs.batch = 1.0 / 32;
        ap_price_op(&x, op, &s, &hid);
        ap_price_op(&xs, op, &s, &shown);
        CHECK(shown.fwd_comm > hid.fwd);
        CHECK_NEAR(hid.fwd_comm, shown.fwd_comm - hid.fwd, 1e-12);
        CHECK_NEAR(hid.bwd_comm, shown.bwd_comm - hid.bwd, 1e-12);
    }
    CHECK(on.step_time < off.step_time);
    CHECK(on.t_kinds.param_gather < off.t_kinds.param_gather);
    ap_plan_free(&on);
    ap_plan_free(&off);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void full_recompute_counts_repeated_collectives(void)
{
    ap_graph *g = gpt13();
    ap_cluster c;
    ap_plan none, full;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=8,mbs=2,gbs=64", NULL, &none, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=8,mbs=2,gbs=64,recompute=full", &c, &full, err),
               err);
    /* Backward redoes the forward's two all-reduces per layer. */
    double ar = ap_cost_allreduce(&c, 8, 1, activation_bytes(2));
    double layers = 24, nmicro = 32;
    CHECK(none.nmicro == 32);
    CHECK_NEAR(full.t_kinds.tp - none.t_kinds.tp, nmicro * layers * 2 * ar, 1e-9);
    CHECK_NEAR(kinds_sum(&full.t_kinds), full.t_comm, 1e-12);
    ap_plan_free(&none);
    ap_plan_free(&full);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* With tensor parallelism alone nothing needs a gradient synchronised: the
 * row-parallel bias is added after the all-reduce, so every rank holds its
 * whole gradient. Under sequence parallelism the ranks see different
 * sequence slices and norm weights and biases are all-reduced across them. */
static void tensor_parallelism_alone_syncs_no_gradients(void)
{
    ap_graph *g = gpt13();
    ap_plan tp, sp;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=8,mbs=1,gbs=8", NULL, &tp, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=8,sp=1,mbs=1,gbs=8", NULL, &sp, err), err);
    CHECK(ap_test_layer(&tp)->grad_sync == 0);
    CHECK(ap_test_layer(&sp)->grad_sync > 0);
    ap_plan_free(&tp);
    ap_plan_free(&sp);
    ap_graph_free(g);
}

/* Interleaving sends each chunk's output from the last stage back to the
 * first; plain 1F1B's last stage sends nothing on. */
static void interleaving_pays_the_wrap_around_send(void)
{
    ap_graph *g = gpt13();
    ap_plan plain, inter;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=8,pp=2,mbs=1,gbs=16", NULL, &plain, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=8,pp=2,vpp=2,mbs=1,gbs=16", NULL, &inter, err),
               err);
    CHECK(plain.stages[1].p2p == 0);
    CHECK(inter.stages[1].p2p > 0);
    CHECK_NEAR(inter.stages[1].p2p, inter.stages[0].p2p, 1e-12);
    ap_plan_free(&plain);
    ap_plan_free(&inter);
    ap_graph_free(g);
}

int main(void)
{
    RUN(megatron_tp_layer_has_two_allreduces_each_way);
    RUN(data_parallel_loss_reduces_one_scalar_per_micro_batch);
    RUN(sequence_parallel_trades_allreduce_for_rs_and_ag);
    RUN(pipeline_sends_one_activation_each_way_per_micro_batch);
    RUN(zero3_gathers_are_their_own_kind);
    RUN(zero3_collectives_hide_behind_the_compute_beside_them);
    RUN(full_recompute_counts_repeated_collectives);
    RUN(tensor_parallelism_alone_syncs_no_gradients);
    RUN(interleaving_pays_the_wrap_around_send);
    return DONE();
}
