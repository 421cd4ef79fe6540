/* The planner: the stage DP is exact over its search space, the block ILP
 * rediscovers Megatron's tensor-parallel layout and sequence parallelism,
 * and plans cover every layer and GPU once, byte for byte the same each run. */
#include "model.h"

#include "planner/planner.h"

typedef struct {
    int L, p;
    double c[4][6][7];
} costs;

static int lookup(void *ctx, int s, int i, int j, double *t)
{
    costs *k = ctx;
    if (s < 0 || s >= 4 || i < 0 || i >= 6 || j < 0 || j >= 7)
        return 0;
    *t = k->c[s][i][j];
    return *t < 50; /* larger costs stand for spans that do not fit */
}

static unsigned rng = 777;
static double uniform(void)
{
    rng = rng * 1103515245u + 12345u;
    return ((rng >> 8) & 0xffff) / 65536.0;
}

static double brute(costs *k, int m, int s, int i, double sum, double mx)
{
    if (s == k->p)
        return i == k->L ? sum + (m - 1) * mx : INFINITY;
    double best = INFINITY;
    for (int j = i + 1; j <= k->L; j++) {
        double t;
        if (!lookup(k, s, i, j, &t))
            continue;
        double v = brute(k, m, s + 1, j, sum + t, fmax(mx, t));
        best = fmin(best, v);
    }
    return best;
}

static void stage_dp_equals_brute_force(void)
{
    for (int trial = 0; trial < 300; trial++) {
        costs k;
        k.L = 1 + (int)(uniform() * 6);
        k.p = 1 + (int)(uniform() * (k.L < 4 ? k.L : 4));
        for (int s = 0; s < 4; s++)
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 7; j++)
                    k.c[s][i][j] = uniform() < 0.1 ? 99 : (j - i) * (1 + uniform());
        int m = 1 + (int)(uniform() * 8);
        int first[4];
        double dp = ap_stage_dp(k.L, k.p, m, lookup, &k, first);
        double bf = brute(&k, m, 0, 0, 0, 0);
        if (isinf(bf)) {
            CHECK(isinf(dp));
            continue;
        }
        CHECK_NEAR(dp, bf, 1e-12);
        CHECK(first[0] == 0);
        for (int s = 1; s < k.p; s++)
            CHECK(first[s] > first[s - 1]);
    }
}


static int layer_ops(const ap_graph *g, int layer, int *ops)
{
    int n = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer == layer)
            ops[n++] = i;
    return n;
}

static const ap_strategy *strategy_of(const ap_graph *g, const ap_block *b,
                                      int point, const char *name)
{
    for (int i = 0; i < b->nops; i++)
        if (!strcmp(g->ops[b->ops[i]].name, name))
            return &b->points[point].strat[i];
    return NULL;
}

static char kind_label(const ap_graph *g, ap_dim_kind k)
{
    return ap_graph_label_of(g, k);
}

/* One sequence whose length no mesh axis divides: tensor parallelism is
 * the only way to split the block over 1x8. With the backward's
 * collectives synchronous (tp_sync, Megatron-LM 2020's), Megatron's
 * layout is the cheapest; asynchronous, a column-parallel output
 * projection whose gradient reduction its GEMM hides costs about as much. */
static void tensor_only_mesh_gives_megatron_layout(void)
{
    ap_graph *g = ap_test_model("examples/hf/gpt3-175b.json", 1001);
    CHECK(g != NULL);
    if (!g)
        return;
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    ap_mesh m;
    ap_mesh_init(&m, 1, 8, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &m, .batch = 1, .nmicro = 8, .zero = AP_ZERO_1,
                      .run = {.tp_sync = 1}};
    int ops[256], n = layer_ops(g, 0, ops);
    ap_block b;
    REQUIRE_OK(ap_block_solve(&x, ops, n, 1, 10, 1e-6, &b, err), err);
    CHECK(b.ilp.status == AP_ILP_OPTIMAL);
    char heads = kind_label(g, AP_DIM_HEADS), ffn = kind_label(g, AP_DIM_FFN);
    /* Column-parallel projections into heads, attention by heads, row-parallel
     * output projection; column-parallel fc1, row-parallel fc2. */
    CHECK(strategy_of(g, &b, 0, "l0.q")->axis[1] == heads);
    CHECK(strategy_of(g, &b, 0, "l0.attn")->axis[1] == heads);
    CHECK(strategy_of(g, &b, 0, "l0.o")->axis[1] == heads);
    CHECK(strategy_of(g, &b, 0, "l0.mlp.fc1")->axis[1] == ffn);
    CHECK(strategy_of(g, &b, 0, "l0.mlp.fc2")->axis[1] == ffn);
    /* Exactly one all-reduce in forward per attention and per MLP. */
    int reducing = 0;
    for (int i = 0; i < n; i++) {
        ap_op_cost oc;
        ap_price_op(&x, ops[i], &b.points[0].strat[i], &oc);
        reducing += oc.fwd_comm > 0;
    }
    CHECK(reducing == 2);
    ap_block_free(&b);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* With memory tight, partial sums are reduce-scattered onto the sequence:
 * sequence parallelism keeps norms and residuals split too. The leanest
 * point of GPT-3's layer on 8 GPUs is that, whether or not a faster,
 * larger one is kept beside it. */
static void tight_memory_chooses_sequence_parallelism(void)
{
    ap_graph *g = ap_test_model("examples/hf/gpt3-175b.json", 2048);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_cluster c;
    char err[AP_ERR_LEN];
    ap_cluster_preset("h100-sxm", 8, 8, &c, err);
    ap_mesh m;
    ap_mesh_init(&m, 1, 8, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &m, .batch = 1, .nmicro = 8, .zero = AP_ZERO_1};
    int ops[256], n = layer_ops(g, 0, ops);
    ap_block b;
    REQUIRE_OK(ap_block_solve(&x, ops, n, 8, 10, 1e-6, &b, err), err);
    CHECK(b.npoints >= 1);
    const ap_block_point *lean = &b.points[b.npoints - 1];
    for (int i = 0; i + 1 < b.npoints; i++)
        CHECK(lean->act_bytes < b.points[i].act_bytes ||
              lean->param_bytes < b.points[i].param_bytes);
    char seq = kind_label(g, AP_DIM_SEQ);
    int scattered = 0;
    for (int i = 0; i < n; i++)
        scattered += lean->strat[i].rs[1] == seq;
    CHECK(scattered >= 1);
    CHECK(strategy_of(g, &b, b.npoints - 1, "l0.ln1")->axis[1] == seq);
    ap_block_free(&b);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* The ILP over four whole layers, each free to differ, finds nothing better
 * than the one-layer answer repeated: solving one block per layer class
 * loses no speed. Prices compare per micro-batch, synchronisation
 * amortised, as the ILP's objective counts them. */
static double block_objective(const ap_price_ctx *x, const int *ops, int n,
                              const ap_strategy *s)
{
    ap_block_point bp;
    ap_block_price(x, ops, n, s, &bp);
    return bp.fwd + bp.bwd + bp.grad_sync / x->nmicro;
}

static void shared_layer_strategy_equals_unshared_ilp(void)
{
    ap_graph *g = ap_test_model("tests/data/llama-4layer.json", 2048);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_cluster c;
    char err[AP_ERR_LEN];
    ap_cluster_preset("h100-sxm", 8, 8, &c, err);
    static const int meshes[][2] = {{1, 8}, {2, 4}, {1, 2}};
    for (int k = 0; k < 3; k++) {
        ap_mesh m;
        ap_mesh_init(&m, meshes[k][0], meshes[k][1], 0, 8);
        ap_price_ctx x = {.g = g, .c = &c, .mesh = &m, .batch = 8, .nmicro = 4, .zero = AP_ZERO_1};
        int all[512], n = 0;
        for (int l = 0; l < 4; l++)
            n += layer_ops(g, l, all + n);
        int per = n / 4;
        ap_block one, four;
        REQUIRE_OK(ap_block_solve_points(&x, all, per, 1, 10, 1e-9, 1, &one, err), err);
        REQUIRE_OK(ap_block_solve_points(&x, all, n, 1, 10, 1e-9, 1, &four, err), err);
        ap_strategy repeated[512];
        for (int i = 0; i < n; i++)
            repeated[i] = one.points[0].strat[i % per];
        double shared = block_objective(&x, all, n, repeated);
        double unshared = block_objective(&x, all, n, four.points[0].strat);
        CHECK(four.ilp.status == AP_ILP_OPTIMAL);
        CHECK_NEAR(unshared, four.ilp.objective, 1e-9 * unshared);
        CHECK_NEAR(shared, unshared, 1e-6 * unshared);
        ap_block_free(&one);
        ap_block_free(&four);
    }
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static int op_named(const ap_graph *g, const char *name)
{
    for (int i = 0; i < g->nops; i++)
        if (!strcmp(g->ops[i].name, name))
            return i;
    return -1;
}

/* GPT-3 XL's attention (16 heads of 128, 2048 tokens, dropout 0.1), heads
 * split over 8 GPUs, two sequences a micro-batch: each GPU runs 2 x 16 / 8
 * = 4 heads. Without flash it is priced as unfused attention, forward and
 * backward each by its own kernels, and the causal mask saves nothing; with
 * flash it is the fused kernel, which skips the masked half, and backward
 * is the fused backward kernel (ap_cost_attention_backward). */
static void attention_is_priced_unfused_unless_flash(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    int i = g ? op_named(g, "l0.attn") : -1;
    CHECK(i >= 0);
    if (i < 0) {
        ap_graph_free(g);
        return;
    }
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    ap_mesh m;
    ap_mesh_init(&m, 1, 8, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &m, .batch = 2, .nmicro = 8, .zero = AP_ZERO_1};
    ap_strategy heads = {{0, kind_label(g, AP_DIM_HEADS)}, {0, 0}};
    ap_op *op = &g->ops[i];
    ap_op_cost oc;

    op->flash = 0;
    ap_price_op(&x, i, &heads, &oc);
    CHECK_NEAR(oc.fwd, ap_cost_attention_unfused(&c, AP_BF16, 4, 2048, 2048, 128, 128, 0.1, 0), 1e-12);
    CHECK_NEAR(oc.bwd, ap_cost_attention_unfused(&c, AP_BF16, 4, 2048, 2048, 128, 128, 0.1, 1), 1e-12);
    double causal_fwd = oc.fwd, causal_bwd = oc.bwd;
    op->causal = 0;
    ap_price_op(&x, i, &heads, &oc);
    CHECK(oc.fwd == causal_fwd && oc.bwd == causal_bwd);

    op->flash = 1;
    ap_price_op(&x, i, &heads, &oc);
    double full = oc.fwd;
    op->causal = 1;
    ap_price_op(&x, i, &heads, &oc);
    CHECK_NEAR(oc.fwd, ap_cost_attention(&c, AP_BF16, 4, 2048, 2048, 128, 128, 1), 1e-12);
    /* Half the FLOPs of the unmasked kernel, at the causal 2k rate (484
     * TFLOP/s against 617 without the mask, h100-sxm's length curve). */
    CHECK_NEAR(oc.fwd, full / 2 * 617.0 / 484.0, 1e-9);
    CHECK_NEAR(oc.bwd, ap_cost_attention_backward(&c, AP_BF16, 4, 2048, 2048, 128, 128, 1), 1e-12);
    /* Unfused, the 2k x 2k scores cross HBM five times over: several
     * times the fused kernel's time (4.8x at the preset's rate). */
    CHECK(causal_fwd + causal_bwd > 4 * (oc.fwd + oc.bwd));
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Solves layer 0 of the 4-layer Llama on a 2x4 mesh of H100s with 64
 * sequences in 8 micro-batches; *batch is the graph's batch label. */
static int llama_layer_on_2x4(double time_limit, int max_points, ap_block *b,
                              char *batch, char *err)
{
    ap_graph *g = ap_test_model("tests/data/llama-4layer.json", 2048);
    if (!g) {
        snprintf(err, AP_ERR_LEN, "tests/data/llama-4layer.json does not load");
        return AP_EINPUT;
    }
    ap_cluster c;
    ap_cluster_preset("h100-sxm", 8, 8, &c, err);
    ap_mesh m;
    ap_mesh_init(&m, 2, 4, 0, 8);
    ap_price_ctx x = {.g = g, .c = &c, .mesh = &m, .batch = 64, .nmicro = 8, .zero = AP_ZERO_1};
    int ops[256], n = layer_ops(g, 0, ops);
    *batch = kind_label(g, AP_DIM_BATCH);
    int rc = ap_block_solve_points(&x, ops, n, 1, time_limit, 1e-6, max_points,
                                   b, err);
    ap_cluster_free(&c);
    ap_graph_free(g);
    return rc;
}

/* A 2-D mesh, memory to spare and many sequences per micro-batch: one axis
 * (at least) carries data parallelism, and every matmul splits the batch on
 * it. */
static void ample_memory_and_batch_put_data_parallelism_on_an_axis(void)
{
    ap_block b;
    char batch, err[AP_ERR_LEN];
    REQUIRE_OK(llama_layer_on_2x4(10, 1, &b, &batch, err), err);
    int dp_axis = -1;
    for (int a = 0; a < 2 && dp_axis < 0; a++) {
        int all = 1;
        for (int i = 0; i < b.nops; i++)
            all = all && b.points[0].strat[i].axis[a] == batch;
        if (all)
            dp_axis = a;
    }
    CHECK(dp_axis >= 0);
    ap_block_free(&b);
}

/* A solve that runs out of time before GLPK finds any sharding says nothing
 * about the mesh: the block comes back with no points and status TIMEOUT
 * (the search then leaves that configuration out and says so), never an
 * error that stops the whole search. GLPK checks its limit (less one
 * millisecond) before it solves each subproblem, the root included, so a
 * limit of 1 ms stops it before any solution wherever presolve alone does
 * not settle the problem, as it cannot for a 2x4 block. */
static void an_ilp_out_of_time_leaves_the_block_unsolved(void)
{
    ap_block b;
    char batch, err[AP_ERR_LEN];
    REQUIRE_OK(llama_layer_on_2x4(1e-3, 4, &b, &batch, err), err);
    CHECK(b.npoints == 0);
    CHECK(b.ilp.status == AP_ILP_TIMEOUT);
    ap_block_free(&b);
    REQUIRE_OK(llama_layer_on_2x4(0, 4, &b, &batch, err), err);
    CHECK(b.npoints >= 1);
    CHECK(b.ilp.status == AP_ILP_OPTIMAL);
    ap_block_free(&b);
}

static void plans_cover_every_layer_and_gpu_once_and_repeat_exactly(void)
{
    ap_graph *g = ap_test_model("examples/gpt-tiny.json", 0);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_cluster c;
    char err[AP_ERR_LEN];
    ap_cluster_preset("h100-sxm", 4, 4, &c, err);
    for (int stages = 1; stages <= 2; stages++) {
        ap_plan_opts o = ap_test_search_opts(4, 16);
        o.max_stages = stages;
        ap_plan p, q;
        REQUIRE_OK(ap_plan_search(g, &c, &o, &p, err), err);
        REQUIRE_OK(ap_plan_search(g, &c, &o, &q, err), err);
        int layer = 0, rank = 0;
        for (int s = 0; s < p.nstages; s++) {
            CHECK(p.stages[s].first_layer == layer);
            CHECK(p.stages[s].first_rank == rank);
            layer += p.stages[s].nlayers;
            rank += p.stages[s].ngpus;
        }
        CHECK(layer == g->nlayers);
        CHECK(rank == 4);
        CHECK(p.step_time > 0 && p.max_mem_bytes <= p.hbm_limit);
        char *a = ap_plan_to_json(g, &p), *b = ap_plan_to_json(g, &q);
        CHECK(a && b && !strcmp(a, b));
        free(a);
        free(b);
        ap_plan_free(&p);
        ap_plan_free(&q);
    }
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* A deep pipeline with one-sequence micro-batches: splitting each stage into
 * chunks (interleaved 1F1B) shrinks the bubble, and the planner keeps it
 * only because the simulation says it is faster than plain 1F1B. */
static void deep_pipelines_interleave_when_it_pays(void)
{
    ap_graph *g = ap_test_model("examples/hf/gpt3-175b.json", 2048);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_cluster c;
    char err[AP_ERR_LEN];
    ap_cluster_preset("h100-sxm", 128, 8, &c, err);
    ap_plan_opts o = ap_test_search_opts(128, 64);
    ap_plan p;
    REQUIRE_OK(ap_plan_search(g, &c, &o, &p, err), err);
    CHECK(p.nstages > 1);
    CHECK(p.schedule == AP_SCHED_INTERLEAVED && p.vchunks > 1);
    double interleaved = p.step_time;
    p.schedule = AP_SCHED_1F1B;
    p.vchunks = 1;
    REQUIRE_OK(ap_plan_evaluate(g, &c, &p, err), err);
    CHECK(p.step_time > interleaved);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Four GPUs of 6.3 GiB in one stage cannot hold gpt-1.3b's fastest layout
 * with whole gradients per replica: the search shards them (ZeRO-2 or 3),
 * and the same plan with ZeRO-1 would not fit. (With pipeline stages the
 * search now fits ZeRO-1 plans: column-parallel matmuls save sequence
 * shards, not gathered inputs. The budget was 6 GiB until the loss kept
 * its fp32 softmax, 4 bytes per logit, for backward, then 6.5 GiB until
 * the preset's tensor-core rate came from a training step: at that rate a
 * ZeRO-1 layout of 6.36 GiB without recomputation is the faster one.) */
static void tight_memory_searches_zero_levels(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_cluster c;
    char err[AP_ERR_LEN];
    ap_cluster_preset("h100-sxm", 4, 8, &c, err);
    c.hbm_bytes = 6.3 * (1 << 30);
    c.mem_reserved = 0;
    ap_plan_opts o = ap_test_search_opts(4, 32);
    o.no_pipeline = 1;
    ap_plan p;
    REQUIRE_OK(ap_plan_search(g, &c, &o, &p, err), err);
    CHECK(p.zero >= AP_ZERO_2);
    CHECK(p.max_mem_bytes <= c.hbm_bytes);
    p.zero = AP_ZERO_1;
    REQUIRE_OK(ap_plan_evaluate(g, &c, &p, err), err);
    CHECK(p.max_mem_bytes > c.hbm_bytes);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(stage_dp_equals_brute_force);
    RUN(tensor_only_mesh_gives_megatron_layout);
    RUN(tight_memory_chooses_sequence_parallelism);
    RUN(shared_layer_strategy_equals_unshared_ilp);
    RUN(attention_is_priced_unfused_unless_flash);
    RUN(ample_memory_and_batch_put_data_parallelism_on_an_axis);
    RUN(plans_cover_every_layer_and_gpu_once_and_repeat_exactly);
    RUN(deep_pipelines_interleave_when_it_pays);
    RUN(tight_memory_searches_zero_levels);
    RUN(an_ilp_out_of_time_leaves_the_block_unsolved);
    return DONE();
}
