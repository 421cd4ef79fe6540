/* test_moe_folding.c -- Megatron-Core's MoE parallel folding (Liu et al.
 * 2025, arXiv 2504.14960; megatron/core/parallel_state.py): the experts
 * get process groups of their own over the ranks of a pipeline stage, etp
 * consecutive ranks, then ep of those groups, then edp copies, with
 * ep * etp * edp = tp * cp * dp. The alltoall dispatcher sends each rank's
 * own tokens over the EP group and all-gathers them over the expert-tensor
 * group only when etp > 1; the experts' gradients are reduced over EDP
 * (docs/cost-model.md, "Parallel folding"). */
#include "costmodel/costmodel.h"
#include "model.h"
#include "test.h"

static ap_op_cost price(const ap_graph *g, const ap_cluster *c, const ap_plan *p,
                        const char *name)
{
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    ap_strategy s;
    ap_op_cost oc;
    memset(&oc, 0, sizeof oc);
    int op = ap_test_layer_op(g, p, name, &s);
    CHECK(op >= 0);
    if (op >= 0)
        ap_price_op(&x, op, &s, &oc);
    return oc;
}

/* Backward plus forward time of the edge from layer 0's `from` to `to`. */
static double edge(const ap_graph *g, const ap_cluster *c, const ap_plan *p,
                   const char *from, const char *to)
{
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    ap_strategy ps, cs;
    int u = ap_test_layer_op(g, p, from, &ps), v = ap_test_layer_op(g, p, to, &cs);
    CHECK(u >= 0 && v >= 0);
    if (u < 0 || v < 0)
        return -1;
    return ap_price_edge(&x, g->ops[u].outputs[0], u, &ps, v, &cs, NULL);
}

/* Qwen3-30B-A3B (hidden 2048, 128 experts of FFN 768, top 8) on 16 H100s
 * in two nodes, tp=2, dp=8, ep=16, etp=1, one sequence of 1024 tokens per
 * replica: the EP group is all 16 ranks of the stage, across both nodes.
 * Each rank holds its 512-token sequence shard and sends their 8 copies:
 * 512 * 8 * 2048 bf16 = 16 MiB per all-to-all, over 16 ranks on 2 nodes.
 * With etp=1 nothing is gathered over the tensor-parallel pair. */
static void ep_over_tp_and_dp_sends_each_ranks_sequence_shard(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,ep=16,etp=1,sp=1,mbs=1,gbs=64", &c, &p,
                                     err), err);
    const ap_mesh *m = &p.stages[0].mesh;
    CHECK(m->d[0] == 8 && m->d[1] == 2);
    CHECK(m->experts[0] == 16 && m->experts[1] == 1 && m->experts[2] == 1);
    ap_mesh em;
    ap_mesh_expert_mesh(m, c.gpus_per_node, &em);
    CHECK(em.d[0] == 16 && em.d[1] == 1 && em.nodes[0] == 2);
    double bytes = 512.0 * 8 * 2048 * 2;
    double a2a = ap_cost_alltoall(&c, 16, 2, bytes);
    ap_op_cost d = price(g, &c, &p, "l0.dispatch");
    ap_op_cost k = price(g, &c, &p, "l0.combine");
    CHECK_NEAR(d.fwd_comm, a2a, 1e-12);
    CHECK_NEAR(d.bwd_comm, a2a, 1e-12);
    CHECK_NEAR(k.fwd_comm, a2a, 1e-12);
    CHECK_NEAR(k.bwd_comm, a2a, 1e-12);
    CHECK(edge(g, &c, &p, "l0.dispatch", "l0.experts.gate") == 0);
    CHECK(edge(g, &c, &p, "l0.experts.down", "l0.combine") == 0);
    /* The dense side is untouched: the tokens stay where attention left
     * them, so entering and leaving the experts costs nothing. */
    CHECK(edge(g, &c, &p, "l0.ln2", "l0.dispatch") == 0);
    CHECK(edge(g, &c, &p, "l0.combine", "l0.res2") == 0);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* The same with etp = tp = 2 and ep = 8 (no folding: ep = dp): the EP
 * group strides over the tensor-parallel pairs, and the experts' input is
 * all-gathered over each pair, 512 tokens' copies from each, as
 * Megatron's AG(TP) after the all-to-all. */
static void etp_equal_to_tp_gathers_over_the_pair(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,ep=8,sp=1,mbs=1,gbs=64", &c, &p, err),
               err);
    CHECK(p.stages[0].mesh.experts[0] == 0);
    ap_op_cost d = price(g, &c, &p, "l0.dispatch");
    CHECK_NEAR(d.fwd_comm, ap_cost_alltoall(&c, 8, 2, 512.0 * 8 * 2048 * 2), 1e-12);
    /* Gathered: both ranks' 512 * 8 copies, and in backward the input's
     * gradient reduce-scattered back; the gate and up projections share
     * the one gather and the one reduce-scatter. */
    double bytes = 1024.0 * 8 * 2048 * 2;
    double ag = ap_cost_allgather(&c, 2, 1, bytes), rs = ap_cost_reducescatter(&c, 2, 1, bytes);
    CHECK_NEAR(edge(g, &c, &p, "l0.dispatch", "l0.experts.gate"), (ag + rs) / 2, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Mixtral (8 experts, top 2, hidden 4096) on one node, cp=2, dp=4,
 * ep=8: the EP group spans the context- and data-parallel ranks. Each
 * rank sends its 1024-token half of a 2048-token sequence, 2 copies each:
 * 1024 * 2 * 4096 bf16 = 16 MiB over 8 ranks of one node. */
static void ep_over_dp_and_cp_sends_each_ranks_sequence_half(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 2048);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,cp=2,ep=8,mbs=1,gbs=32", &c, &p, err),
               err);
    const ap_mesh *m = &p.stages[0].mesh;
    CHECK(m->replicas == 4 && m->d[0] == 2 && m->d[1] == 1);
    CHECK(m->experts[0] == 8 && m->experts[1] == 1 && m->experts[2] == 1);
    double a2a = ap_cost_alltoall(&c, 8, 1, 1024.0 * 2 * 4096 * 2);
    ap_op_cost d = price(g, &c, &p, "l0.dispatch");
    CHECK_NEAR(d.fwd_comm, a2a, 1e-12);
    CHECK_NEAR(d.bwd_comm, a2a, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Per rank, the grouped GEMM of the first expert projection runs its 8
 * local experts (128/16) on what arrives: 16 ranks' 512 tokens, 8 copies
 * each, spread over 128 experts, 512 rows per expert; n = the whole FFN
 * of 768 under etp=1, k = hidden 2048. */
static void expert_gemm_is_local_experts_by_arriving_tokens(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,ep=16,etp=1,sp=1,mbs=1,gbs=64", &c, &p,
                                     err), err);
    ap_op_cost oc = price(g, &c, &p, "l0.experts.gate");
    CHECK_NEAR(oc.fwd, ap_cost_grouped_gemm(&c, AP_BF16, 8, 512, 768, 2048), 1e-12);
    CHECK_NEAR(oc.flops, 2.0 * 8 * 512 * 768 * 2048, 1);
    ap_plan_free(&p);
    /* etp=2 with ep=8: 16 local experts, the same 512 rows each after the
     * pair's gather, half the FFN. */
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,ep=8,etp=2,sp=1,mbs=1,gbs=64", &c, &p,
                                     err), err);
    oc = price(g, &c, &p, "l0.experts.gate");
    CHECK_NEAR(oc.fwd, ap_cost_grouped_gemm(&c, AP_BF16, 16, 512, 384, 2048), 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* tp=2, dp=8, ep=4, etp=1 leaves edp = 16/4 = 4 copies of each expert,
 * ranks 4 apart ({0, 4, 8, 12}: both nodes). Each rank holds 32 experts:
 * a projection's 32 * 2048 * 768 weights keep their states sharded over
 * the 4 EDP ranks and their bf16 gradients reduce-scattered and the
 * weights all-gathered over them once per step, not over the 8 dense DP
 * ranks; attention's weights still sync over the 8. Both in Megatron's
 * buckets of 40M parameters, each byte paying its share of one. */
static void expert_gradients_reduce_over_edp(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,ep=4,etp=1,sp=1,mbs=1,gbs=64,zero=1", &c,
                                     &p, err), err);
    const ap_mesh *m = &p.stages[0].mesh;
    CHECK(m->experts[0] == 4 && m->experts[1] == 1 && m->experts[2] == 4);
    ap_mesh em;
    ap_mesh_expert_mesh(m, c.gpus_per_node, &em);
    CHECK(em.nodes[0] == 1 && em.sync_nodes[0] == 2);
    double elems = 32.0 * 2048 * 768, grad = 2 * elems, bucket = 2 * 40e6;
    ap_op_cost oc = price(g, &c, &p, "l0.experts.gate");
    CHECK_NEAR(oc.grad_sync, (ap_cost_reducescatter(&c, 4, 2, bucket) +
                              ap_cost_allgather(&c, 4, 2, bucket)) * grad / bucket, 1e-12);
    CHECK_NEAR(oc.param_bytes, ap_mem_model_states(elems, 4, AP_ZERO_1).total, 1e-3);
    /* The query projection (2048 x 32 heads x 128, split over tp=2) syncs
     * over the 8 data-parallel ranks. */
    double q = 2048.0 * 32 * 128 / 2 * 2;
    ap_op_cost qc = price(g, &c, &p, "l0.q");
    CHECK_NEAR(qc.grad_sync, (ap_cost_reducescatter(&c, 8, 2, bucket) +
                              ap_cost_allgather(&c, 8, 2, bucket)) * q / bucket, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void refused(const ap_graph *g, int gpus, const char *spec, const char *want)
{
    ap_plan p;
    char err[AP_ERR_LEN] = "";
    CHECK(ap_test_megatron_plan(g, gpus, spec, NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, want);
    ap_plan_free(&p);
}

/* Megatron-Core's checks: world % (etp*ep*pp), that is ep*etp dividing
 * tp*cp*dp; experts % ep; sequence parallelism with MoE beside tp. */
static void refusals_name_the_broken_rule(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    refused(g, 16, "tp=2,ep=16,sp=1",
            "ep*etp = 16*2 = 32 must divide tp*cp*dp = 2*1*8 = 16");
    refused(g, 16, "tp=2,ep=32,etp=1,sp=1",
            "ep*etp = 32*1 = 32 must divide tp*cp*dp = 2*1*8 = 16");
    refused(g, 16, "tp=2,ep=3,etp=1,sp=1", "ep=3 must divide the experts (128)");
    refused(g, 16, "tp=2,ep=16,etp=1,sp=0", "needs sequence parallelism");
    refused(g, 16, "tp=2,ep=16,etp=0", "--megatron: etp: bad value \"0\"");
    refused(g, 16, "--tensor-model-parallel-size 2 --expert-tensor-parallel-size x",
            "--expert-tensor-parallel-size: bad value \"x\"");
    ap_graph_free(g);
}

/* The flag and the spec key price the same; the spec prints etp back only
 * where it differs from tp; the Megatron-LM export states it and reads
 * back to the same step. */
static void flag_spec_and_export_agree(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_plan a, b;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,ep=16,etp=1,sp=1,mbs=1,gbs=64,zero=0,"
                                     "overlap_grad=0", NULL, &a, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "--tensor-model-parallel-size 2 "
                                     "--expert-model-parallel-size 16 "
                                     "--expert-tensor-parallel-size 1 --sequence-parallel "
                                     "--micro-batch-size 1 --global-batch-size 64",
                                     NULL, &b, err), err);
    CHECK(a.step_time == b.step_time && a.max_mem_bytes == b.max_mem_bytes);
    ap_megatron m;
    char buf[256];
    ap_megatron_default(&m);
    m.tp = 2;
    m.ep = 16;
    m.etp = 1;
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",etp=1");
    m.etp = 2;
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK(!strstr(buf, "etp"));

    ap_plan_desc d;
    double step;
    REQUIRE_OK(ap_test_megatron_desc(g, 16, "tp=2,ep=16,etp=1,sp=1,mbs=1,gbs=64", &d, &step),
               "desc");
    CHECK(d.stages[0].expert_mesh[0] == 16 && d.stages[0].expert_mesh[1] == 1 &&
          d.stages[0].expert_replicas == 1);
    char *text = NULL;
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--expert-model-parallel-size 16\n");
    CHECK_STR_HAS(text, "--expert-tensor-parallel-size 1\n");
    free(text);
    ap_plan_desc_free(&d);
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_graph_free(g);
}

/* Exports `spec` on 16 GPUs to torchtitan: its text, or NULL with err. */
static char *titan_export(const ap_graph *g, const char *spec, char *err)
{
    ap_plan_desc d;
    double step;
    char *text = NULL;
    if (ap_test_megatron_desc(g, 16, spec, &d, &step) != AP_OK) {
        snprintf(err, AP_ERR_LEN, "estimate %s failed", spec);
        return NULL;
    }
    if (ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err) != AP_OK)
        text = NULL;
    ap_plan_desc_free(&d);
    return text;
}

/* torchtitan builds the folded expert mesh from FSDP's shard ranks
 * (ParallelDims._validate): ep = dp_shard_in_ep x cp with the experts
 * split by the tensor-parallel ranks (etp = tp), or x tp with them whole
 * (etp = 1), in Megatron-Core's rank order. So its export states ep < dp
 * over the shard ranks, and refuses what it cannot build: no shard ranks
 * (ZeRO-0 is DDP), an etp between 1 and tp. */
static void torchtitan_states_the_folds_it_builds(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    char err[AP_ERR_LEN];
    char *text = titan_export(g, "tp=2,ep=16,etp=1,sp=1,mbs=1,gbs=64", err);
    REQUIRE_OK(text ? AP_OK : AP_EINPUT, err);
    CHECK_STR_HAS(text, "--parallelism.data_parallel_shard_degree 8\n");
    CHECK_STR_HAS(text, "--parallelism.expert_parallel_degree 16\n");
    CHECK(!strstr(text, "expert_tensor_parallel_degree")); /* 1, its default */
    free(text);
    text = titan_export(g, "tp=2,ep=4,sp=1,mbs=1,gbs=64,zero=3", err);
    REQUIRE_OK(text ? AP_OK : AP_EINPUT, err);
    CHECK_STR_HAS(text, "--parallelism.expert_parallel_degree 4\n");
    CHECK_STR_HAS(text, "--parallelism.expert_tensor_parallel_degree 2\n");
    free(text);
    CHECK(!titan_export(g, "tp=2,ep=4,sp=1,mbs=1,gbs=64,zero=0,overlap_grad=0", err));
    CHECK_STR_HAS(err, "borrows FSDP's shard ranks");
    CHECK_STR_HAS(err, "ZeRO-0 (DDP) with expert parallelism");
    CHECK(!titan_export(g, "tp=4,ep=2,etp=2,sp=1,mbs=1,gbs=64", err));
    CHECK_STR_HAS(err, "etp=2 with tp=4");
    CHECK(!titan_export(g, "tp=4,ep=2,etp=1,sp=1,mbs=1,gbs=64", err));
    CHECK_STR_HAS(err, "ep=2 with cp=1 and the experts whole");
    ap_graph_free(g);
}

int main(void)
{
    RUN(ep_over_tp_and_dp_sends_each_ranks_sequence_shard);
    RUN(etp_equal_to_tp_gathers_over_the_pair);
    RUN(ep_over_dp_and_cp_sends_each_ranks_sequence_half);
    RUN(expert_gemm_is_local_experts_by_arriving_tokens);
    RUN(expert_gradients_reduce_over_edp);
    RUN(refusals_name_the_broken_rule);
    RUN(flag_spec_and_export_agree);
    RUN(torchtitan_states_the_folds_it_builds);
    return DONE();
}
