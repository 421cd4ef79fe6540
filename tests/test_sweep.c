/* test_sweep.c -- the sweep lists exactly the configurations a launcher can
 * run (counted by hand for a small model), agrees with ap_megatron_plan's
 * own checks, and keeps the fastest that fits, the same on any number of
 * threads. */
#include "planner/planner.h"
#include "model.h"

static ap_graph *load(const char *rel)
{
    ap_graph *g = ap_test_model(rel, 0);
    CHECK(g != NULL);
    return g;
}

static ap_sweep_result sweep_cp(const ap_graph *g, int gpus, double gbs,
                                ap_launcher l, int threads, ap_cp_comm cp_comm)
{
    char err[AP_ERR_LEN];
    ap_cluster c;
    ap_sweep_opts o;
    ap_sweep_result r;
    memset(&r, 0, sizeof r);
    CHECK(ap_cluster_preset("h100-sxm", gpus, 8, &c, err) == AP_OK);
    ap_sweep_opts_default(&o);
    o.run.cp_comm = cp_comm;
    o.launcher = l;
    o.global_batch = gbs;
    o.threads = threads;
    if (g)
        CHECK(ap_sweep(g, &c, &o, &r, err) == AP_OK);
    ap_cluster_free(&c);
    return r;
}

/* The sweep with the context-parallel type's default, p2p. */
static ap_sweep_result sweep(const ap_graph *g, int gpus, double gbs,
                             ap_launcher l, int threads)
{
    return sweep_cp(g, gpus, gbs, l, threads, AP_CP_P2P);
}

/* gpt-tiny: 2 layers, 4 heads, sequence 256; 4 GPUs in one node, 16
 * sequences. (tp, pp) pairs: tp divides the heads and the GPUs, pp the
 * layers and the rest: (1,1) (1,2) (2,1) (2,2) (4,1). Context parallelism
 * is a power of two dividing the rest, the remainder data parallel: cp in
 * {1, 2, 4} with cp*dp = 4/(tp*pp). Micro-batch sizes:
 * the powers of two dividing 16/dp, so 3, 4 or 5 of them for dp 4, 2, 1.
 * vpp is 1 (a stage of one layer cannot interleave). */
static long megatron_by_hand(void)
{
    /* per (tp, pp, cp): mbs choices x sp (2 with tp>1) x recompute 3 x
     * zero (2 with data-parallel or context-parallel replicas) */
    return 3 * 1 * 3 * 2    /* tp1 pp1 cp1 dp4 */
         + 4 * 1 * 3 * 2    /* tp1 pp1 cp2 dp2 */
         + 5 * 1 * 3 * 2    /* tp1 pp1 cp4 dp1 */
         + 4 * 1 * 3 * 2    /* tp1 pp2 cp1 dp2 */
         + 5 * 1 * 3 * 2    /* tp1 pp2 cp2 dp1 */
         + 4 * 2 * 3 * 2    /* tp2 pp1 cp1 dp2 */
         + 5 * 2 * 3 * 2    /* tp2 pp1 cp2 dp1 */
         + 5 * 2 * 3 * 1    /* tp2 pp2 cp1 dp1 */
         + 5 * 2 * 3 * 1;   /* tp4 pp1 cp1 dp1 */
}

static void megatron_space_is_counted_by_hand(void)
{
    ap_graph *g = load("examples/gpt-tiny.json");
    ap_sweep_result r = sweep(g, 4, 16, AP_LAUNCHER_MEGATRON, 0);
    CHECK(megatron_by_hand() == 294);
    CHECK(r.candidates == megatron_by_hand());
    CHECK(r.valid == r.candidates && r.refused == 0);
    CHECK(r.fit == r.valid); /* a tiny model fits anywhere */
    CHECK(r.found);
    ap_sweep_result_free(&r);
    ap_graph_free(g);
}

/* A small model of `layers` layers (4 heads, 4 KV heads, sequence 256):
 * a Llama, or a Mistral with a sliding window of `window` keys on every
 * layer. */
static ap_graph *small_model(int layers, int window)
{
    char json[512];
    snprintf(json, sizeof json,
             "{\"model_type\": \"%s\", \"num_hidden_layers\": %d, "
             "\"hidden_size\": 128, \"num_attention_heads\": 4, "
             "\"num_key_value_heads\": 4, \"intermediate_size\": 512, "
             "\"vocab_size\": 1024, \"max_position_embeddings\": 256, "
             "\"sliding_window\": %d}", window ? "mistral" : "llama", layers, window);
    ap_graph *g = ap_test_hf_text(json, "small");
    CHECK(g != NULL);
    return g;
}

static ap_graph *llama_of(int layers)
{
    return small_model(layers, 0);
}

/* Three layers on 4 GPUs: pp = 2 does not divide them. Megatron-LM splits
 * them 2 + 1 with --decoder-first/last-pipeline-num-layers (the embedding
 * and the loss counted as layers make 5, which 2 does not divide either),
 * so the sweep lists exactly what the 2-layer model lists at pp = 2, one
 * split, no interleaving: the 294 of gpt-tiny, where skipping the uneven
 * split would list 210. */
static void layers_pp_does_not_divide_split_first_and_last(void)
{
    ap_graph *g = llama_of(3);
    if (!g)
        return;
    ap_sweep_result r = sweep(g, 4, 16, AP_LAUNCHER_MEGATRON, 0);
    CHECK(r.candidates == megatron_by_hand());
    CHECK(r.valid == r.candidates && r.refused == 0);
    ap_sweep_result_free(&r);
    ap_graph_free(g);
}

/* Six layers on 4 GPUs. pp = 1 lists gpt-tiny's 210; pp = 2 (three layers
 * a stage) interleaves in 3 chunks where the micro-batches divide by 2:
 * tp1 cp1 dp2 (4 + 3 batchings) x 3 recompute x 2 ZeRO = 42, tp1 cp2 dp1
 * (5 + 4) x 3 x 2 = 54, tp2 (5 + 4) x 2 sp x 3 = 54. pp = 4 (tp 1, one
 * replica) has two splits: the embedding and the loss counted (8 slots, 2
 * a stage, so vpp 2 too where 4 divides the micro-batches: 5 + 3
 * batchings x 3 = 24) and first = last = 1 with 2 in each middle stage (5
 * x 3 = 15). */
static void layers_pp_does_not_divide_count_the_embedding_and_loss(void)
{
    ap_graph *g = llama_of(6);
    if (!g)
        return;
    ap_sweep_result r = sweep(g, 4, 16, AP_LAUNCHER_MEGATRON, 0);
    CHECK(r.candidates == 210 + (42 + 54 + 54) + (24 + 15));
    CHECK(r.valid == r.candidates && r.refused == 0);
    ap_sweep_result_free(&r);
    /* torchtitan and DeepSpeed export no uneven split: pp = 4 is not theirs. */
    r = sweep(g, 4, 16, AP_LAUNCHER_DEEPSPEED, 0);
    CHECK(r.valid == r.candidates && r.refused == 0);
    ap_sweep_result_free(&r);
    ap_graph_free(g);
}

/* A two-layer Mistral at 256 tokens with a sliding window of `window`
 * keys on both layers. */
static ap_graph *mistral_of(int window)
{
    return small_model(2, window);
}

/* Under a window shorter than the sequence Transformer Engine's ring
 * refuses context parallelism (ap_megatron_plan refuses it), so a sweep on
 * the ring lists each of gpt-tiny's 144 configurations with cp 2 or 4 (tp1
 * pp1 cp2 24, cp4 30; tp1 pp2 cp2 30; tp2 pp1 cp2 60) with the all-gather
 * and with the all-to-all instead: 294 + 144, all valid. A sweep with
 * either of those lists the 294 with it. torchtitan runs no context
 * parallelism under a window. A window as long as the sequence changes
 * nothing. */
static void a_short_window_lists_context_parallelism_without_the_ring(void)
{
    ap_graph *g = mistral_of(128), *whole = mistral_of(256);
    if (!g || !whole) {
        ap_graph_free(g);
        ap_graph_free(whole);
        return;
    }
    ap_sweep_result r = sweep(g, 4, 16, AP_LAUNCHER_MEGATRON, 0);
    CHECK(r.candidates == megatron_by_hand() + (24 + 30 + 30 + 60));
    CHECK(r.valid == r.candidates && r.refused == 0);
    CHECK(r.found && (r.best.cp == 1 || r.best.run.cp_comm != AP_CP_P2P));
    ap_sweep_result_free(&r);
    for (int t = 0; t < 2; t++) {
        r = sweep_cp(g, 4, 16, AP_LAUNCHER_MEGATRON, 0, t ? AP_CP_A2A : AP_CP_ALLGATHER);
        CHECK(r.candidates == megatron_by_hand());
        CHECK(r.valid == r.candidates && r.refused == 0);
        ap_sweep_result_free(&r);
    }
    r = sweep(whole, 4, 16, AP_LAUNCHER_MEGATRON, 0);
    CHECK(r.candidates == megatron_by_hand());
    CHECK(r.valid == r.candidates && r.refused == 0);
    ap_sweep_result_free(&r);
    r = sweep(whole, 4, 16, AP_LAUNCHER_TORCHTITAN, 0);
    long titan_whole = r.candidates;
    ap_sweep_result_free(&r);
    r = sweep(g, 4, 16, AP_LAUNCHER_TORCHTITAN, 0);
    CHECK(r.candidates < titan_whole && r.found && r.best.cp == 1);
    ap_sweep_result_free(&r);
    ap_graph_free(g);
    ap_graph_free(whole);
}

static void torchtitan_and_deepspeed_spaces_are_counted_by_hand(void)
{
    ap_graph *g = load("examples/gpt-tiny.json");
    /* torchtitan: sequence parallel whenever tp > 1 (one choice), ZeRO 0
     * (DDP) or 3 (FSDP) when there are replicas, but DDP only where data
     * parallelism is all there is (it raises beside any other mesh axis,
     * and FSDP shards over context-parallel ranks): ZeRO 0 or 3 for tp1
     * pp1 cp1 dp4, FSDP alone (ZeRO-1 under the pipeline) for the other
     * meshes with replicas, in megatron_by_hand's order. */
    long titan = 3 * 3 * 2 + 4 * 3 * 1 + 5 * 3 * 1 + 4 * 3 * 1 + 5 * 3 * 1 +
                 4 * 3 * 1 + 5 * 3 * 1 + 5 * 3 * 1 + 5 * 3 * 1;
    /* DeepSpeed: what its config states: no tensor, context or expert
     * parallelism (Megatron-DeepSpeed's are Megatron-LM's flags), no
     * interleaving; recompute none or full; ZeRO 0-3 without a pipeline,
     * 0-1 with one. */
    long ds = 3 * 2 * 4    /* tp1 pp1 dp4 */
            + 4 * 2 * 2;   /* tp1 pp2 dp2 */
    ap_sweep_result t = sweep(g, 4, 16, AP_LAUNCHER_TORCHTITAN, 0);
    ap_sweep_result d = sweep(g, 4, 16, AP_LAUNCHER_DEEPSPEED, 0);
    CHECK(t.candidates == titan && t.refused == 0);
    CHECK(d.candidates == ds && d.refused == 0);
    CHECK(t.found && (t.best.zero == AP_ZERO_NONE || t.best.zero == AP_ZERO_3));
    CHECK(t.found && t.best.sp == (t.best.tp > 1));
    CHECK(d.found && d.best.tp == 1 && d.best.cp == 1 && d.best.vpp == 1 && !d.best.sp);
    ap_sweep_result_free(&t);
    ap_sweep_result_free(&d);
    ap_graph_free(g);
}

static double price(const ap_graph *g, int gpus, const char *spec, int *fits)
{
    char err[AP_ERR_LEN];
    ap_plan p;
    int rc = ap_test_megatron_plan(g, gpus, spec, NULL, &p, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", spec, err);
    CHECK(rc == AP_OK);
    double t = rc ? NAN : p.step_time;
    *fits = !rc && p.max_mem_bytes <= p.hbm_limit;
    ap_plan_free(&p);
    return t;
}

static void best_is_no_slower_than_hand_picked_configurations(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    if (!g)
        return;
    ap_sweep_result r = sweep(g, 16, 128, AP_LAUNCHER_MEGATRON, 0);
    CHECK(r.found && r.refused == 0 && r.fit <= r.valid);
    const char *picks[] = {
        "tp=8,pp=2,mbs=1,gbs=128,sp=1",
        "tp=2,pp=2,mbs=1,gbs=128,sp=1,recompute=selective",
        "tp=4,pp=1,mbs=2,gbs=128,sp=1",
        "tp=1,pp=4,vpp=2,mbs=1,gbs=128",
        "tp=1,pp=1,mbs=4,gbs=128,zero=1",
        "tp=2,pp=1,cp=8,dp=1,mbs=1,gbs=128,sp=1",
    };
    for (size_t i = 0; i < sizeof picks / sizeof picks[0]; i++) {
        int fits;
        double t = price(g, 16, picks[i], &fits);
        CHECK(!fits || r.plan.step_time <= t);
    }
    /* The kept plan is the best configuration's own price. */
    char spec[256];
    int fits;
    ap_megatron_format(&r.best, spec, sizeof spec);
    CHECK(price(g, 16, spec, &fits) == r.plan.step_time && fits);
    ap_sweep_result_free(&r);
    ap_graph_free(g);
}

/* Configurations whose weights, gradients and optimizer states alone are
 * over the memory are counted without being priced: the answer, the counts
 * and, where nothing fits, the leanest memory are those of pricing all. */
static void states_over_memory_are_not_priced(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = load("examples/hf/llama-3-70b.json");
    if (!g)
        return;
    const int gpus[] = {16, 4};
    for (int k = 0; k < 2; k++) {
        ap_cluster c;
        REQUIRE_OK(ap_cluster_preset("h100-sxm", gpus[k], 8, &c, err), err);
        ap_sweep_opts o;
        ap_sweep_opts_default(&o);
        o.global_batch = 16;
        ap_sweep_result a, b;
        REQUIRE_OK(ap_sweep(g, &c, &o, &a, err), err);
        o.price_all = 1;
        REQUIRE_OK(ap_sweep(g, &c, &o, &b, err), err);
        /* 70B's 16 bytes a parameter are 1.1 TB: on 16 GPUs tp*pp of 4 or
         * less leaves over 70 GiB a GPU. */
        CHECK(k == 1 || a.skipped > 0);
        CHECK(b.skipped == 0);
        CHECK(a.candidates == b.candidates && a.valid == b.valid && a.fit == b.fit);
        CHECK(a.found == (k == 0) && b.found == a.found);
        CHECK(!a.found || a.plan.step_time == b.plan.step_time);
        CHECK(a.found || a.least_memory == b.least_memory);
        ap_sweep_result_free(&a);
        ap_sweep_result_free(&b);
        ap_cluster_free(&c);
    }
    ap_graph_free(g);
}

/* The threads take the list in runs of 16 and each keeps its own best:
 * the answer and every count are a single thread's, on 2 threads, on 3
 * and on 64, the most the sweep starts. */
static void answer_does_not_depend_on_threads(void)
{
    ap_graph *g = load("examples/gpt-1.3b.json");
    if (!g)
        return;
    ap_sweep_result a = sweep(g, 8, 64, AP_LAUNCHER_MEGATRON, 1);
    char sa[256], sb[256];
    ap_megatron_format(&a.best, sa, sizeof sa);
    CHECK(a.found);
    const int threads[] = {2, 3, 64};
    for (int k = 0; k < 3; k++) {
        ap_sweep_result b = sweep(g, 8, 64, AP_LAUNCHER_MEGATRON, threads[k]);
        ap_megatron_format(&b.best, sb, sizeof sb);
        CHECK(b.found && !strcmp(sa, sb));
        CHECK(a.candidates == b.candidates && a.valid == b.valid && a.fit == b.fit);
        CHECK(a.skipped == b.skipped && a.refused == b.refused);
        CHECK(a.plan.step_time == b.plan.step_time);
        ap_sweep_result_free(&b);
    }
    ap_sweep_result_free(&a);
    ap_graph_free(g);
}

static void moe_sweep_includes_expert_parallelism(void)
{
    ap_graph *g = load("examples/hf/mixtral-8x7b.json");
    if (!g)
        return;
    ap_sweep_result r = sweep(g, 16, 64, AP_LAUNCHER_MEGATRON, 0);
    CHECK(r.valid == r.candidates && r.refused == 0 && r.valid > 0);
    /* Every listed expert-parallel degree passes the checks; the best fits. */
    CHECK(!r.found || r.plan.max_mem_bytes <= r.plan.hbm_limit);
    ap_sweep_result_free(&r);
    ap_graph_free(g);
}

/* The configuration's overlaps and CP type go to every configuration
 * Megatron-LM runs them for: the expert all-to-all overlap needs ep > 1
 * and, with a pipeline, a virtual one; a2a context parallelism needs cp to
 * divide each tensor-parallel rank's heads and KV heads (Llama 3 8B: 32
 * and 8), else the ring. */
static ap_megatron layout(int tp, int pp, int vpp, int cp, int ep)
{
    ap_megatron m;
    ap_megatron_default(&m);
    m.tp = tp;
    m.pp = pp;
    m.vpp = vpp;
    m.cp = cp;
    m.ep = ep;
    m.sp = tp > 1;
    m.run.tp_overlap = m.run.moe_a2a_overlap = m.run.delay_wgrad = 1;
    m.run.cp_comm = AP_CP_A2A;
    return m;
}

static void unsupported_settings_drop_per_configuration(void)
{
    ap_graph *moe = load("examples/hf/qwen3-30b-a3b.json"),
             *dense = load("examples/hf/llama-3-8b.json");
    if (!moe || !dense)
        return;
    ap_megatron a = layout(1, 2, 24, 1, 8), b = layout(1, 2, 1, 1, 8),
                c = layout(1, 1, 1, 1, 1), d = layout(2, 1, 1, 4, 1),
                e = layout(2, 1, 1, 8, 1);
    ap_megatron_drop_unsupported(moe, &a);
    ap_megatron_drop_unsupported(moe, &b);
    ap_megatron_drop_unsupported(moe, &c);
    CHECK(a.run.moe_a2a_overlap && a.run.delay_wgrad);
    CHECK(!b.run.moe_a2a_overlap && !b.run.delay_wgrad); /* pp 2 without vpp */
    CHECK(!c.run.moe_a2a_overlap && !c.run.delay_wgrad); /* ep 1 */
    CHECK(!a.run.tp_overlap && a.run.cp_comm == AP_CP_P2P); /* tp 1, cp 1 */
    ap_megatron_drop_unsupported(dense, &d);
    ap_megatron_drop_unsupported(dense, &e);
    CHECK(d.run.cp_comm == AP_CP_A2A && d.run.tp_overlap); /* 16 and 4 heads per rank, cp 4 */
    CHECK(e.run.cp_comm == AP_CP_P2P);                  /* 4 KV heads per rank, cp 8 */
    /* Other optimizer states need the distributed optimizer. */
    d.run.opt.exp_avg = e.run.opt.exp_avg = AP_OPT_BF16;
    e.zero = AP_ZERO_NONE;
    ap_megatron_drop_unsupported(dense, &d);
    ap_megatron_drop_unsupported(dense, &e);
    CHECK(d.run.opt.exp_avg == AP_OPT_BF16 && ap_opt_dtypes_fp32(&e.run.opt));
    ap_graph_free(moe);
    ap_graph_free(dense);
}

static void format_reads_back(void)
{
    ap_megatron m, back;
    char buf[256], err[AP_ERR_LEN];
    ap_megatron_default(&m);
    m.tp = 4;
    m.pp = 2;
    m.dp = 8;
    m.vpp = 3;
    m.mbs = 2;
    m.gbs = 1024;
    m.sp = 1;
    m.recompute = AP_RECOMPUTE_SELECTIVE;
    m.zero = AP_ZERO_NONE;
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, "tp=4,pp=2,dp=8,cp=1,ep=1,vpp=3,mbs=2,gbs=1024,sp=1,"
                       "recompute=selective,zero=0");
    ap_megatron_default(&back);
    REQUIRE_OK(ap_megatron_parse(buf, &back, err), err);
    CHECK(!memcmp(&m, &back, sizeof m));
}

int main(void)
{
    RUN(megatron_space_is_counted_by_hand);
    RUN(layers_pp_does_not_divide_split_first_and_last);
    RUN(layers_pp_does_not_divide_count_the_embedding_and_loss);
    RUN(a_short_window_lists_context_parallelism_without_the_ring);
    RUN(torchtitan_and_deepspeed_spaces_are_counted_by_hand);
    RUN(best_is_no_slower_than_hand_picked_configurations);
    RUN(states_over_memory_are_not_priced);
    RUN(answer_does_not_depend_on_threads);
    RUN(moe_sweep_includes_expert_parallelism);
    RUN(unsupported_settings_drop_per_configuration);
    RUN(format_reads_back);
    return DONE();
}
