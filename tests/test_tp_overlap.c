/* Tensor-parallel communication overlap as Megatron-LM's --tp-comm-overlap
 * runs it (Transformer Engine userbuffers, TE's default configuration):
 * each sequence-parallel collective of a linear layer shows only what its
 * GEMM cannot hide, by TE's method for it; nothing gets slower; tp = 1 and
 * plans without sequence parallelism are untouched; the spec, the flags
 * and plan.json carry the setting. Without it, a column-parallel layer's
 * backward still runs its re-gather beside its data-gradient GEMM and its
 * input gradient's reduction beside its weight-gradient GEMM, on NCCL's
 * stream (Transformer Engine's Linear and LayerNormLinear, Megatron-Core's
 * LinearWithGradAccumulationAndAsyncCommunication), unless tp_sync prices
 * Megatron-LM before 2022, which waited for both. */
#include <cjson/cJSON.h>

#include "model.h"

#include "planner/planner.h"

/* TE's defaults (transformer_engine/pytorch/module/base.py, initialize_ub):
 * pipelined overlaps cut the GEMM in 4, pipelined and bulk ones copy on 16
 * SMs; the H100 SXM has 132. */
#define SPLITS 4.0
#define COMM_SMS 16.0
#define H100_SMS 132.0

static double sm_share(double comm, double gemm)
{
    return fmin(comm, gemm) * COMM_SMS / H100_SMS;
}

/* All-gather into a GEMM by ring exchange: the local chunk first. */
static double ring(double comm, double gemm, double tp)
{
    return fmax(0, comm - gemm * (tp - 1) / tp);
}

/* GEMM then reduce-scatter in 4 chunks: the last chunk's shows. */
static double pipelined(double comm, double gemm)
{
    return fmin(comm, fmax(comm / SPLITS, comm - gemm * (SPLITS - 1) / SPLITS) +
                          sm_share(comm, gemm));
}

/* A collective on NCCL's stream beside a GEMM: what outlasts it. */
static double async(double comm, double gemm)
{
    return fmax(0, comm - gemm);
}

/* A whole collective beside a whole backward GEMM. */
static double bulk(double comm, double gemm)
{
    return fmin(comm, fmax(0, comm - gemm) + sm_share(comm, gemm));
}

static ap_graph *gpt(int seq)
{
    return ap_test_model("bench/validation/models/megatron-gpt-1.7b.json", seq);
}

static void the_h100_has_the_sms_the_figures_assume(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    CHECK(c.sms == (int)H100_SMS);
    ap_cluster_free(&c);
}

/* One GPT-3-style layer (h = 2304, 4h MLP, separate q, k, v) at tp = 4 with
 * sequence parallelism, one 2048-token sequence per micro-batch. */
static void a_gpt_layer_at_tp4_shows_what_its_gemms_cannot_hide(void)
{
    ap_graph *g = gpt(2048);
    ap_cluster c, c1;
    ap_cluster c2;
    ap_plan off, on, sync;
    char err[AP_ERR_LEN];
    if (!g) {
        CHECK(0);
        return;
    }
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,sp=1,mbs=1,gbs=8,tp_sync=1", &c2, &sync, err),
               err);
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,sp=1,mbs=1,gbs=8", &c, &off, err), err);
    if (ap_test_megatron_plan(g, 4, "tp=4,sp=1,mbs=1,gbs=8,tp_overlap=1", &c1, &on, err)) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
        ap_plan_free(&off);
        ap_plan_free(&sync);
        ap_cluster_free(&c);
        ap_cluster_free(&c2);
        ap_graph_free(g);
        return;
    }
    double s = 2048, h = 2304, t = 4;
    double ag = ap_cost_allgather(&c, 4, 1, s * h * 2);
    double rs = ap_cost_reducescatter(&c, 4, 1, s * h * 2);
    /* The GEMM shards: q, k and v each [s, h] x [h, h/t], fused by
     * Megatron into one of three times the work; the projection
     * [s, h/t] x [h/t, h]; fc1 [s, h] x [h, 4h/t]; fc2 [s, 4h/t] x [4h/t, h]. */
    double qkv = 3 * ap_cost_gemm(&c, AP_BF16, s, h / t, h);
    double proj = ap_cost_gemm(&c, AP_BF16, s, h, h / t);
    double fc1 = ap_cost_gemm(&c, AP_BF16, s, 4 * h / t, h);
    double fc2 = ap_cost_gemm(&c, AP_BF16, s, h, 4 * h / t);
    /* The data gradients of the row-parallel layers, each at its own
     * shape: [s, h] x [h, h/t] and [s, h] x [h, 4h/t]. */
    double proj_dgrad = ap_cost_gemm(&c, AP_BF16, s, h / t, h);
    double fc2_dgrad = ap_cost_gemm(&c, AP_BF16, s, 4 * h / t, h);
    CHECK(ag > 0 && rs > 0 && qkv > 0);

    /* Synchronous: two gathers and two reduce-scatters forward; in
     * backward the row-parallel layers' gathers, the saved shards'
     * re-gathers and the column-parallel layers' reduce-scatters. */
    const ap_block_point *z = ap_test_layer(&sync);
    CHECK_NEAR(z->comm_fwd, 2 * ag + 2 * rs, 1e-12);
    CHECK_NEAR(z->comm_bwd, 4 * ag + 2 * rs, 1e-12);

    /* Without userbuffers: the forward's collectives and the output
     * gradients' gathers wait; the re-gathers run beside the data-gradient
     * GEMMs and the reduce-scatters beside the weight-gradient GEMMs,
     * each as large as the forward's. */
    const ap_block_point *a = ap_test_layer(&off);
    CHECK_NEAR(a->comm_fwd, 2 * ag + 2 * rs, 1e-12);
    CHECK_NEAR(a->comm_bwd, 2 * ag + async(ag, qkv) + async(ag, fc1) + async(rs, qkv) +
                                async(rs, fc1), 1e-12);
    CHECK(a->comm_bwd < z->comm_bwd);
    CHECK_NEAR(a->fwd - a->comm_fwd, z->fwd - z->comm_fwd, 1e-12);
    CHECK_NEAR(a->bwd - a->comm_bwd, z->bwd - z->comm_bwd, 1e-12);

    const ap_block_point *b = ap_test_layer(&on);
    double fwd = ring(ag, qkv, t) + pipelined(rs, proj) + ring(ag, fc1, t) +
                 pipelined(rs, fc2);
    double bwd = ring(ag, proj_dgrad, t) + ring(ag, fc2_dgrad, t) + /* output gradients */
                 bulk(ag, qkv) + bulk(ag, fc1) +         /* re-gathers, dgrad */
                 bulk(rs, qkv) + bulk(rs, fc1);          /* dgrad RS, wgrad */
    CHECK_NEAR(b->comm_fwd, fwd, 1e-9);
    CHECK_NEAR(b->comm_bwd, bwd, 1e-9);
    CHECK(b->comm_fwd < a->comm_fwd && b->comm_bwd < a->comm_bwd);
    /* The GEMMs themselves are priced as before. */
    CHECK_NEAR(b->fwd - b->comm_fwd, a->fwd - a->comm_fwd, 1e-12);
    CHECK_NEAR(b->bwd - b->comm_bwd, a->bwd - a->comm_bwd, 1e-12);
    CHECK(on.step_time < off.step_time);
    ap_plan_free(&off);
    ap_plan_free(&on);
    ap_plan_free(&sync);
    ap_cluster_free(&c);
    ap_cluster_free(&c1);
    ap_cluster_free(&c2);
    ap_graph_free(g);
}

static void a_collective_much_shorter_than_its_gemm_shows_its_last_chunk(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    double C = 1e-4, G = 1e3 * C;
    /* Pipelined: the last of 4 chunks, plus the SMs its copies take from
     * the GEMM while they run. */
    CHECK_NEAR(ap_tp_overlap_exposed(&c, AP_UB_PIPELINE, C, G, 8),
               C / 4 + C * 16 / 132, 1e-12);
    CHECK_NEAR(ap_tp_overlap_exposed(&c, AP_UB_BULK, C, G, 8), C * 16 / 132, 1e-12);
    /* Ring exchange starts on the local chunk and copies on copy engines. */
    CHECK(ap_tp_overlap_exposed(&c, AP_UB_RING, C, G, 8) == 0);
    /* A GPU of unknown SM count: the contention is not priced. */
    c.sms = 0;
    CHECK_NEAR(ap_tp_overlap_exposed(&c, AP_UB_PIPELINE, C, G, 8), C / 4, 1e-12);
    CHECK(ap_tp_overlap_exposed(&c, AP_UB_BULK, C, G, 8) == 0);
    ap_cluster_free(&c);
}

static void a_collective_longer_than_its_gemm_shows_the_excess(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    c.sms = 0;
    double C = 1e-3, G = 2e-4;
    CHECK_NEAR(ap_tp_overlap_exposed(&c, AP_UB_RING, C, G, 8), C - G * 7 / 8, 1e-12);
    CHECK_NEAR(ap_tp_overlap_exposed(&c, AP_UB_PIPELINE, C, G, 8), C - G * 3 / 4, 1e-12);
    CHECK_NEAR(ap_tp_overlap_exposed(&c, AP_UB_BULK, C, G, 8), C - G, 1e-12);
    /* Nothing to overlap on one GPU, and never more than the collective. */
    CHECK(ap_tp_overlap_exposed(&c, AP_UB_RING, C, G, 1) == C);
    c.sms = 20; /* more SMs copying than the GPU would spare */
    CHECK(ap_tp_overlap_exposed(&c, AP_UB_BULK, C, C, 8) <= C);
    ap_cluster_free(&c);
}

static void overlap_never_makes_a_configuration_slower(void)
{
    const char *specs[] = {
        "tp=2,sp=1,mbs=1,gbs=16",       "tp=4,sp=1,mbs=4,gbs=16",
        "tp=8,sp=1,mbs=1,gbs=16",       "tp=8,sp=1,mbs=2,gbs=16,recompute=full",
        "tp=4,pp=2,sp=1,mbs=1,gbs=16",  "tp=2,cp=2,sp=1,mbs=1,gbs=16",
    };
    int seqs[] = {512, 2048};
    for (int k = 0; k < 2; k++) {
        ap_graph *g = gpt(seqs[k]);
        if (!g) {
            CHECK(0);
            continue;
        }
        for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
            char spec[128], err[AP_ERR_LEN];
            ap_cluster c, c1;
            ap_plan off, on;
            if (ap_test_megatron_plan(g, 8, specs[i], &c, &off, err)) {
                fprintf(stderr, "%s: %s\n", specs[i], err);
                CHECK(0);
                continue;
            }
            snprintf(spec, sizeof spec, "%s,tp_overlap=1", specs[i]);
            if (ap_test_megatron_plan(g, 8, spec, &c1, &on, err) == AP_OK) {
                CHECK(on.run.tp_overlap == 1);
                CHECK(on.step_time <= off.step_time);
                CHECK(on.t_comm < off.t_comm);
                CHECK_NEAR(on.t_compute, off.t_compute, 1e-9);
                ap_plan_free(&on);
                ap_cluster_free(&c1);
            } else {
                fprintf(stderr, "%s: %s\n", spec, err);
                CHECK(0);
            }
            ap_plan_free(&off);
            ap_cluster_free(&c);
        }
        ap_graph_free(g);
    }
}

static void at_tp1_the_setting_changes_nothing_and_is_dropped(void)
{
    ap_graph *g = gpt(2048);
    ap_cluster c, c1;
    ap_plan off, on;
    char err[AP_ERR_LEN];
    if (!g) {
        CHECK(0);
        return;
    }
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,mbs=1,gbs=16", &c, &off, err), err);
    if (ap_test_megatron_plan(g, 8, "tp=1,mbs=1,gbs=16,tp_overlap=1", &c1, &on, err) == AP_OK) {
        CHECK(on.run.tp_overlap == 0);
        CHECK(on.step_time == off.step_time);
        char *a = ap_plan_to_json(g, &off), *b = ap_plan_to_json(g, &on);
        CHECK(a && b && !strcmp(a, b));
        free(a);
        free(b);
        ap_plan_free(&on);
        ap_cluster_free(&c1);
    } else {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
    }
    ap_plan_free(&off);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void refused_at_tp_above_1_without_sequence_parallelism(void)
{
    ap_graph *g = gpt(2048);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN] = "";
    if (!g) {
        CHECK(0);
        return;
    }
    int rc = ap_test_megatron_plan(g, 8, "tp=4,sp=0,mbs=1,gbs=16,tp_overlap=1", &c, &p, err);
    CHECK(rc == AP_EINPUT);
    CHECK_STR_HAS(err, "needs sequence parallelism");
    CHECK_STR_HAS(err, "tp=4");
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void megatron_flags_and_spec_set_it_alike(void)
{
    ap_megatron a, b;
    char err[AP_ERR_LEN];
    ap_megatron_default(&a);
    ap_megatron_default(&b);
    REQUIRE_OK(ap_megatron_parse("tp=4,sp=1,tp_overlap=1", &a, err), err);
    REQUIRE_OK(ap_megatron_parse_args(
                   "--tensor-model-parallel-size 4 --sequence-parallel --tp-comm-overlap "
                   "--tp-comm-overlap-cfg ub.yaml --disable-tp-comm-bulk-wgrad "
                   "--tp-comm-overlap-rs-dgrad --tp-comm-bootstrap-backend nccl",
                   &b, err),
               err);
    CHECK(a.run.tp_overlap == 1 && b.run.tp_overlap == 1 && b.tp == 4 && b.sp == 1);
    /* The tuning flags' values are read past, not taken for flags. */
    ap_megatron_default(&b);
    CHECK(ap_megatron_parse_args("--tp-comm-overlap-cfg --tp-comm-overlap", &b, err) ==
          AP_OK);
    CHECK(b.run.tp_overlap == 0);
    CHECK(ap_megatron_parse_args("--tp-comm-overlap-cfg", &b, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--tp-comm-overlap-cfg needs a value");
    CHECK(ap_megatron_parse("tp_overlap=2", &a, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "(0 or 1)");
    char buf[256];
    ap_megatron_default(&a);
    a.tp = 4;
    a.sp = 1;
    a.run.tp_overlap = 1;
    ap_megatron_format(&a, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",tp_overlap=1");
    CHECK(ap_megatron_parse(buf, &b, err) == AP_OK && b.run.tp_overlap == 1);
}

static void plan_json_carries_it_only_when_on(void)
{
    ap_graph *g = gpt(2048);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    if (!g) {
        CHECK(0);
        return;
    }
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=4,sp=1,mbs=1,gbs=16,tp_overlap=1", &c, &p, err), err);
    char *text = ap_plan_to_json(g, &p);
    CHECK_STR_HAS(text, "\"tp_comm_overlap\":\ttrue");
    ap_plan_desc d;
    if (text && ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == AP_OK) {
        CHECK(d.run.tp_overlap == 1);
        ap_plan_desc_free(&d);
    } else {
        CHECK(0);
    }
    /* Not a boolean: refused, naming the field. */
    char *at = text ? strstr(text, "\"tp_comm_overlap\":\ttrue") : NULL;
    if (at) {
        memcpy(at + strlen("\"tp_comm_overlap\":\t"), "1   ", 4);
        CHECK(ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "plan.json: tp_comm_overlap");
    }
    free(text);
    p.run.tp_overlap = 0;
    text = ap_plan_to_json(g, &p);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(root && !cJSON_GetObjectItemCaseSensitive(root, "tp_comm_overlap"));
    cJSON_Delete(root);
    if (text && ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == AP_OK) {
        CHECK(d.run.tp_overlap == 0);
        ap_plan_desc_free(&d);
    }
    free(text);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(the_h100_has_the_sms_the_figures_assume);
    RUN(a_gpt_layer_at_tp4_shows_what_its_gemms_cannot_hide);
    RUN(a_collective_much_shorter_than_its_gemm_shows_its_last_chunk);
    RUN(a_collective_longer_than_its_gemm_shows_the_excess);
    RUN(overlap_never_makes_a_configuration_slower);
    RUN(at_tp1_the_setting_changes_nothing_and_is_dropped);
    RUN(refused_at_tp_above_1_without_sequence_parallelism);
    RUN(megatron_flags_and_spec_set_it_alike);
    RUN(plan_json_carries_it_only_when_on);
    return DONE();
}
