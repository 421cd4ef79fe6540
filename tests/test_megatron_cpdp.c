/* test_megatron_cpdp.c -- context parallelism beside data parallelism.
 *
 * cp>1 with dp>1 is priced as dp replicas of the (cp, tp) mesh: every GPU
 * computes and communicates inside its replica as the cp-only run would at
 * its share of the batch, while gradients are reduced, and ZeRO shards,
 * over all dp*cp ranks that hold a weight, on the nodes Megatron's rank
 * order (tp fastest, then cp, then dp) puts them. plan.json carries the
 * replicas and exports them as the data-parallel size. */
#include "model.h"

/* Parameters of the model, each counted once. */
static double param_elems(const ap_graph *g)
{
    double n = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].role == AP_TENSOR_PARAM)
            n += (double)g->tensors[t].elems;
    return n;
}

static int model_parallel_label(const ap_graph *g, char l)
{
    const ap_dim *d = ap_graph_dim(g, l);
    return d && (d->kind == AP_DIM_HEADS || d->kind == AP_DIM_KV_HEADS ||
                 d->kind == AP_DIM_FFN || d->kind == AP_DIM_VOCAB);
}

/* Megatron's gradient all-reduce without the distributed optimizer: every
 * weight's bf16 gradient, split tp ways when the weight has a head, FFN or
 * vocabulary dimension (norm weights are whole on every rank), all-reduced
 * over `ranks` GPUs on `nodes` nodes once per step, once per op using it,
 * in Megatron-Core's buckets of 40M parameters (1M per rank when that is
 * more): each byte pays its share of one bucket's all-reduce. */
static double grad_allreduce(const ap_graph *g, const ap_cluster *c, int tp,
                             int ranks, int nodes)
{
    double bucket = 2.0 * (ranks > 40 ? 1e6 * ranks : 40e6);
    double per_byte = ap_cost_allreduce(c, ranks, nodes, bucket) / bucket;
    double t_sum = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const ap_tensor *tt = &g->tensors[t];
        if (tt->role != AP_TENSOR_PARAM)
            continue;
        int split = 1;
        for (int i = 0; i < tt->rank; i++)
            if (model_parallel_label(g, tt->shape[i]))
                split = tp;
        t_sum += tt->consumers * per_byte * 2.0 * (double)tt->elems / split;
    }
    return t_sum;
}

static void cp2_dp4_is_four_replicas_of_cp2(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    ap_cluster c8, c2;
    ap_plan a, b;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    if (!g)
        return;
    /* 8 GPUs: tp1 pp1 cp2 dp4, against 2 GPUs at cp2 with a quarter of the
     * batch: the same micro-batch on each pair of GPUs. */
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,cp=2,dp=4,mbs=1,gbs=32,zero=1", &c8,
                                     &a, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 2, "tp=1,pp=1,cp=2,dp=1,mbs=1,gbs=8,zero=1", &c2,
                                     &b, err), err);
    const ap_stage *sa = &a.stages[0], *sb = &b.stages[0];
    CHECK(sa->mesh.replicas == 4 && sa->mesh.d[0] == 2 && sa->mesh.d[1] == 1);
    CHECK(sb->mesh.replicas == 1 && sb->mesh.d[0] == 2);
    CHECK(a.nmicro == b.nmicro && a.micro_batch == 4 * b.micro_batch);

    /* Memory: bf16 weights and gradients (4 bytes per parameter) whole on
     * every GPU, the 12 bytes of fp32 master weights and Adam moments
     * sharded over dp*cp = 8 against 2; activations identical. */
    double P = param_elems(g);
    CHECK_NEAR(sa->param_bytes, P * (4 + 12.0 / 8), 1e-9);
    CHECK_NEAR(sb->param_bytes, P * (4 + 12.0 / 2), 1e-9);
    CHECK_NEAR(sa->act_bytes, sb->act_bytes, 1e-12);
    CHECK_NEAR(sb->mem_bytes - sa->mem_bytes, 12 * P * (1.0 / 2 - 1.0 / 8), 1e-9);

    /* Compute per micro-batch and the K/V ring of context parallelism are
     * one replica's, the same as the cp-only run's. The ring hides behind
     * the step kernels there (a 17 MB hop, 50 us over NVLink, beside
     * kernels of 260 us and more: test_cp_ring.c), so neither exposes any;
     * the equality of exposed rings is test_cp_ring.c's cross-node case. */
    CHECK(sa->fwd - sa->comm_fwd > 0);
    CHECK_NEAR(sa->fwd - sa->comm_fwd, sb->fwd - sb->comm_fwd, 1e-12);
    CHECK_NEAR(sa->bwd - sa->comm_bwd, sb->bwd - sb->comm_bwd, 1e-12);
    CHECK(sa->kinds.context == 0 && sb->kinds.context == 0);
    CHECK_NEAR(sa->flops, sb->flops, 1e-12);
    CHECK_NEAR(a.t_compute, b.t_compute, 1e-12);
    ap_plan_free(&a);
    ap_plan_free(&b);

    /* Without the distributed optimizer the gradients are all-reduced over
     * the 8 ranks of dp*cp on one node, against 2 without replicas. */
    ap_cluster_free(&c8);
    ap_cluster_free(&c2);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,pp=1,cp=2,dp=4,mbs=1,gbs=32,zero=0", &c8,
                                     &a, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 2, "tp=1,pp=1,cp=2,dp=1,mbs=1,gbs=8,zero=0", &c2,
                                     &b, err), err);
    CHECK(a.stages[0].mesh.sync_nodes[1] == 1);
    CHECK_NEAR(a.stages[0].grad_sync, grad_allreduce(g, &c8, 1, 8, 1), 1e-9);
    CHECK_NEAR(b.stages[0].grad_sync, grad_allreduce(g, &c2, 1, 2, 1), 1e-9);
    CHECK(a.stages[0].grad_sync > b.stages[0].grad_sync);
    CHECK_NEAR(a.stages[0].param_bytes, P * 16, 1e-9);
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_cluster_free(&c8);
    ap_cluster_free(&c2);
    ap_graph_free(g);
}

/* The K/V ring of context parallelism moves each rank's K and V at their
 * tensor-parallel shard: with tp beside cp every rank holds kv_heads/tp of
 * them (and heads/tp query heads). Per attention op, forward and backward,
 * what ap_cost_cp_ring exposes for a rank's seq/cp rows of b sequences at
 * those heads, the cp ranks inside one node. */
static double kv_ring(const ap_graph *g, const ap_cluster *c, int tp, int cp,
                      double micro_batch)
{
    char bl = ap_graph_label_of(g, AP_DIM_BATCH);
    double b = micro_batch / (double)ap_graph_dim(g, bl)->size, t_sum = 0;
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind != AP_OP_ATTENTION)
            continue;
        const char *q = g->tensors[op->inputs[0]].shape;
        const char *k = g->tensors[op->inputs[1]].shape;
        double bn = b * (double)ap_graph_dim(g, q[0])->size *
                    (double)ap_graph_dim(g, q[2])->size / tp;
        double bkv = b * (double)ap_graph_dim(g, k[0])->size *
                     (double)ap_graph_dim(g, k[2])->size / tp;
        double s = (double)ap_graph_dim(g, q[1])->size / cp;
        double d = (double)ap_graph_dim(g, q[3])->size;
        for (int bwd = 0; bwd < 2; bwd++)
            t_sum += ap_cost_cp_ring(c, AP_BF16, bn, bkv, s, d, d, 1, cp, 1, bwd);
    }
    return t_sum;
}

/* On H100's NVLink this ring hides behind the step kernels (a 8 MB hop,
 * 27 us, beside kernels of 65 us and more), so it is priced on H100s
 * joined by a 10 GB/s link (PCIe-class), where its hops outlast them. */
static int slow_link_plan(const ap_graph *g, int gpus, const char *spec, ap_cluster *c,
                          ap_plan *p, char *err)
{
    ap_megatron m;
    memset(p, 0, sizeof *p);
    memset(c, 0, sizeof *c);
    ap_megatron_default(&m);
    int rc = ap_cluster_preset("h100-sxm", gpus, 8, c, err);
    if (!rc)
        rc = ap_megatron_parse(spec, &m, err);
    c->intra_bw = 10e9;
    return rc ? rc : ap_megatron_plan(g, c, &m, p, err);
}

static void context_ring_carries_the_tensor_parallel_shard(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 4096);
    ap_cluster c1, c2;
    ap_plan a, b;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    if (!g)
        return;
    REQUIRE_OK(slow_link_plan(g, 2, "tp=1,pp=1,cp=2,mbs=1,gbs=8,sp=0", &c1, &a, err), err);
    REQUIRE_OK(slow_link_plan(g, 4, "tp=2,pp=1,cp=2,mbs=1,gbs=8,sp=1", &c2, &b, err), err);
    CHECK(a.stages[0].kinds.context > 0);
    CHECK_NEAR(a.stages[0].kinds.context, kv_ring(g, &c1, 1, 2, a.micro_batch), 1e-9);
    CHECK_NEAR(b.stages[0].kinds.context, kv_ring(g, &c2, 2, 2, b.micro_batch), 1e-9);
    CHECK(b.stages[0].kinds.context < 0.6 * a.stages[0].kinds.context);
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_cluster_free(&c1);
    ap_cluster_free(&c2);
    ap_graph_free(g);
}

static void cross_node_groups_follow_megatron_rank_order(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    if (!g)
        return;
    /* tp=8 fills a node: a replica (cp=2 x tp=8) is two nodes, the cp ring
     * of one tp rank joins ranks r and r+8 on two nodes, and the gradient
     * group of a tp rank (stride 8, dp*cp = 4 members) spans four. */
    REQUIRE_OK(ap_test_megatron_plan(g, 32, "tp=8,pp=1,cp=2,dp=2,mbs=1,gbs=16,zero=0", &c,
                                     &p, err), err);
    const ap_mesh *m = &p.stages[0].mesh;
    CHECK(m->replicas == 2 && m->d[0] == 2 && m->d[1] == 8);
    CHECK(m->nodes[0] == 2); /* the cp ring crosses nodes */
    CHECK(m->nodes[1] == 1); /* tensor parallelism stays in a node */
    CHECK(m->nodes[2] == 2); /* one replica */
    CHECK(m->sync_nodes[1] == 4); /* dp*cp group of a tp rank */
    CHECK(m->sync_nodes[0] == 2); /* the replicas alone: ranks r, r+16 */
    CHECK(m->sync_nodes[3] == 4); /* the whole stage */
    CHECK_NEAR(p.stages[0].grad_sync, grad_allreduce(g, &c, 8, 4, 4), 1e-9);
    ap_plan_free(&p);
    ap_cluster_free(&c);

    /* Two replicas on one node each way: cp=2 x tp=4 is a node, the
     * gradient group of a tp rank (4 ranks at stride 4) spans two nodes. */
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=4,pp=1,cp=2,dp=2,mbs=1,gbs=16,zero=0", &c,
                                     &p, err), err);
    m = &p.stages[0].mesh;
    CHECK(m->nodes[0] == 1 && m->sync_nodes[1] == 2);
    CHECK_NEAR(p.stages[0].grad_sync, grad_allreduce(g, &c, 4, 4, 2), 1e-9);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void cp_with_dp_is_accepted(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    if (!g)
        return;
    /* --megatron-args with --context-parallel-size and dp = 16/(2*2) = 4. */
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "--tensor-model-parallel-size 2 "
                                     "--context-parallel-size 2 --micro-batch-size 1 "
                                     "--global-batch-size 64 --use-distributed-optimizer",
                                     NULL, &p, err), err);
    CHECK(p.stages[0].mesh.replicas == 4 && p.stages[0].mesh.d[0] == 2 &&
          p.stages[0].mesh.d[1] == 2);
    CHECK(p.micro_batch == 4 && p.nmicro == 16);
    ap_plan_free(&p);
    REQUIRE_OK(ap_test_megatron_plan(g, 16, "tp=2,pp=2,cp=2,dp=2,mbs=1,gbs=64", NULL, &p, err),
               err);
    CHECK(p.nstages == 2 && p.stages[1].first_rank == 8 &&
          p.stages[1].mesh.first == 8 && p.stages[1].mesh.replicas == 2);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* Prices spec on 8 GPUs per node and reads its plan.json back. */
static char *plan_json(const ap_graph *g, int gpus, const char *spec, double *step)
{
    char err[AP_ERR_LEN], *json = NULL;
    ap_plan p;
    if (ap_test_megatron_plan(g, gpus, spec, NULL, &p, err) == AP_OK) {
        json = ap_plan_to_json(g, &p);
        *step = p.step_time;
    } else {
        fprintf(stderr, "%s: %s\n", spec, err);
    }
    ap_plan_free(&p);
    return json;
}

static void plan_json_carries_replicas_and_exports_dp(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 0);
    char err[AP_ERR_LEN], *text = NULL;
    double step = 0;
    CHECK(g != NULL);
    if (!g)
        return;
    char *json = plan_json(g, 8, "tp=1,pp=1,cp=2,dp=4,mbs=1,gbs=32", &step);
    CHECK_STR_HAS(json, "\"replicas\":\t4");
    ap_plan_desc d;
    REQUIRE_OK(ap_plan_desc_parse(json ? json : "", json ? strlen(json) : 0,
                                  "plan.json", &d, err), err);
    CHECK(d.stages[0].replicas == 4 && d.stages[0].mesh[0] == 2 &&
          d.stages[0].mesh[1] == 1 && d.stages[0].ngpus == 8);
    ap_degrees k;
    REQUIRE_OK(ap_plan_classify(g, &d, AP_LAUNCHER_MEGATRON, &k, err), err);
    CHECK(k.tp == 1 && k.cp == 2 && k.dp == 4 && k.pp == 1 && k.mbs == 1);

    /* Megatron states cp and leaves dp implicit: 8 / (tp*pp*cp). */
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "--context-parallel-size 2\n");
    CHECK_STR_HAS(text, "--tensor-model-parallel-size 1\n");
    CHECK_STR_HAS(text, "# tp=1 pp=1 dp=4 cp=2 ");
    CHECK(text && !strstr(text, "--data-parallel"));

    /* The exported arguments price to the plan's step: the script from its
     * MEGATRON_ARGS, which the torchrun line expands. */
    const char *a = text ? strstr(text, "MEGATRON_ARGS=\"") : NULL;
    ap_megatron m;
    ap_cluster c;
    ap_plan p;
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args(a ? a : "", &m, err), err);
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    REQUIRE_OK(ap_megatron_plan(g, &c, &m, &p, err), err);
    CHECK(p.stages[0].mesh.replicas == 4);
    CHECK_NEAR(p.step_time, step, 1e-12);
    CHECK_NEAR(d.step_time, step, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    free(text);

    /* torchtitan: FSDP over dp (its mesh folds cp in), cp stated. */
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &text, err), err);
    CHECK_STR_HAS(text, "--parallelism.context_parallel_degree 2\n");
    CHECK_STR_HAS(text, "--parallelism.data_parallel_shard_degree 4\n");
    free(text);
    ap_plan_desc_free(&d);

    /* Replicas that do not cover the ranks are refused by path. */
    char *r = json ? strstr(json, "\"replicas\":\t4") : NULL;
    if (r) {
        r[strlen("\"replicas\":\t")] = '2';
        CHECK(ap_plan_desc_parse(json, strlen(json), "plan.json", &d, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "plan.json: stages[0].mesh: 2 replicas of [2, 1] do not "
                           "hold the 8 ranks 0-7");
    }
    free(json);

    /* Without replicas the field is left out, as before. */
    json = plan_json(g, 8, "tp=2,pp=1,cp=1,mbs=1,gbs=32", &step);
    CHECK(json && !strstr(json, "replicas"));
    free(json);
    ap_graph_free(g);
}

int main(void)
{
    RUN(cp2_dp4_is_four_replicas_of_cp2);
    RUN(context_ring_carries_the_tensor_parallel_shard);
    RUN(cross_node_groups_follow_megatron_rank_order);
    RUN(cp_with_dp_is_accepted);
    RUN(plan_json_carries_replicas_and_exports_dp);
    return DONE();
}
