/* The loss's three implementations (docs/cost-model.md, "The loss"):
 * Megatron-LM's unfused default, Megatron-Core's torch.compile'd fusion
 * (--cross-entropy-loss-fusion, "native") and Transformer Engine's Triton
 * kernels (--cross-entropy-fusion-impl te), each a memory-bound pass count
 * over the logits; what each keeps for backward; the spec key and flags
 * that choose one; plan.json and the exports that carry it. */
#include <cjson/cJSON.h>

#include "model.h"

#include "planner/planner.h"

#define H100_BW (3.35e12 * 0.9) /* the preset's HBM bandwidth x efficiency */

/* Native, bf16 logits. Forward: the cast and max in one kernel (read 2,
 * write 4), subtract-exp-sum into a fresh buffer and back (4 + 4 + 4 + 4),
 * divide in place (8): 30 bytes. Backward: the scatter's copy of the
 * softmax (8), the multiply written back (8) and the bf16 gradient (2): 18. */
static void native_bf16_moves_30_bytes_forward_and_18_backward(void)
{
    ap_cluster c = ap_test_h100(8);
    double logits = 8192.0 * 128256;
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_NATIVE, AP_BF16, logits, 0),
               30 * logits / H100_BW, 1e-12);
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_NATIVE, AP_BF16, logits, 1),
               18 * logits / H100_BW, 1e-12);
    ap_cluster_free(&c);
}

/* Fp32 logits: no copy forward (max only reads 4: 28 bytes); backward the
 * hard-coded bf16 gradient is cast back to fp32 by autograd (2 + 4): 24. */
static void native_fp32_skips_the_copy_but_pays_the_bf16_round_trip(void)
{
    ap_cluster c = ap_test_h100(8);
    double logits = 2048.0 * 50257;
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_NATIVE, AP_FP32, logits, 0),
               28 * logits / H100_BW, 1e-12);
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_NATIVE, AP_FP32, logits, 1),
               24 * logits / H100_BW, 1e-12);
    ap_cluster_free(&c);
}

/* TE reads the logits twice and writes the gradient over them once, in
 * their own dtype: 3 x 2 bytes forward for bf16, 3 x 4 for fp32; backward
 * scales the gradient in place: 2 x 2 and 2 x 4. */
static void te_moves_three_passes_forward_and_two_backward_in_the_logits_dtype(void)
{
    ap_cluster c = ap_test_h100(8);
    double logits = 8192.0 * 128256;
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_TE, AP_BF16, logits, 0),
               6 * logits / H100_BW, 1e-12);
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_TE, AP_BF16, logits, 1),
               4 * logits / H100_BW, 1e-12);
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_TE, AP_FP32, logits, 0),
               12 * logits / H100_BW, 1e-12);
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_TE, AP_FP32, logits, 1),
               8 * logits / H100_BW, 1e-12);
    ap_cluster_free(&c);
}

/* Unfused through the new entry point is the old one: 38 and 14 bytes. */
static void unfused_is_the_default_and_ap_cost_cross_entropy(void)
{
    ap_cluster c = ap_test_h100(8);
    double logits = 4096.0 * 32000;
    CHECK_NEAR(ap_cost_cross_entropy_impl(&c, AP_CE_UNFUSED, AP_BF16, logits, 0),
               38 * logits / H100_BW, 1e-12);
    CHECK(ap_cost_cross_entropy_impl(&c, AP_CE_UNFUSED, AP_BF16, logits, 1) ==
          ap_cost_cross_entropy(&c, AP_BF16, logits, 1));
    CHECK(ap_cost_cross_entropy_bytes(AP_CE_UNFUSED, AP_BF16, 1) == 14);
    CHECK(ap_cost_cross_entropy_impl(&c, AP_CE_TE, AP_BF16, 0, 0) == 0);
    CHECK(ap_cost_cross_entropy_impl(&c, AP_CE_TE, AP_BF16, 10, 1) == c.kernel_floor);
    ap_cluster_free(&c);
}

/* Unfused and native keep the fp32 softmax (4 bytes a logit); TE keeps the
 * gradient it wrote into the bf16 logits (2). */
static void te_keeps_half_the_bytes_for_backward(void)
{
    CHECK(ap_cost_cross_entropy_saved(AP_CE_UNFUSED, AP_BF16) == 4);
    CHECK(ap_cost_cross_entropy_saved(AP_CE_NATIVE, AP_BF16) == 4);
    CHECK(ap_cost_cross_entropy_saved(AP_CE_TE, AP_BF16) == 2);
    CHECK(ap_cost_cross_entropy_saved(AP_CE_TE, AP_FP32) == 4);
}

/* gpt-1.3b's loss with the vocabulary split 8 ways, two sequences a
 * micro-batch: each rank's 2 * 2048 * 50257 / 8 logits priced under the
 * context's implementation, and kept at its bytes per logit. */
static void the_price_context_chooses_the_loss_kernels(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_cluster c = ap_test_h100(8);
    ap_mesh mesh;
    ap_mesh_init(&mesh, 8, 1, 0, 8);
    char v = ap_graph_label_of(g, AP_DIM_VOCAB);
    ap_strategy s = {{v, 0}, {0, 0}};
    double share = 2 * 2048.0 * 50257 / 8;
    const double fwd[] = {38, 30, 6}, bwd[] = {14, 18, 4}, kept[] = {4, 4, 2};
    for (int i = 0; i < 3; i++) {
        ap_price_ctx x = {.g = g, .c = &c, .mesh = &mesh, .batch = 2, .nmicro = 4,
                          .zero = AP_ZERO_1, .run.cross_entropy = (ap_ce_impl)i};
        ap_op_cost oc;
        ap_price_op(&x, ap_graph_find_op(g, "loss"), &s, &oc);
        CHECK_NEAR(oc.fwd, fwd[i] * share / H100_BW, 1e-12);
        CHECK_NEAR(oc.bwd, bwd[i] * share / H100_BW, 1e-12);
        CHECK_NEAR(oc.act_bytes, kept[i] * share, 1e-9);
    }
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* The spec key takes the three names; the flags follow Megatron-LM: the
 * implementation (native by default) counts only under the fusion flag. */
static void the_spec_key_and_the_flags_choose_the_same_kernels(void)
{
    char err[AP_ERR_LEN], spec[256];
    ap_megatron m;
    ap_megatron_default(&m);
    CHECK(m.run.cross_entropy == AP_CE_UNFUSED);
    REQUIRE_OK(ap_megatron_parse("tp=2,cross_entropy=te", &m, err), err);
    CHECK(m.run.cross_entropy == AP_CE_TE);
    ap_megatron_format(&m, spec, sizeof spec);
    CHECK_STR_HAS(spec, ",cross_entropy=te");
    REQUIRE_OK(ap_megatron_parse("cross_entropy=native", &m, err), err);
    CHECK(m.run.cross_entropy == AP_CE_NATIVE);
    REQUIRE_OK(ap_megatron_parse("cross_entropy=unfused", &m, err), err);
    ap_megatron_format(&m, spec, sizeof spec);
    CHECK(strstr(spec, "cross_entropy") == NULL);
    CHECK(ap_megatron_parse("cross_entropy=fused", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron: cross_entropy: bad value \"fused\" (unfused, native or te)");

    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--cross-entropy-loss-fusion", &m, err), err);
    CHECK(m.run.cross_entropy == AP_CE_NATIVE);
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--cross-entropy-fusion-impl te "
                                      "--cross-entropy-loss-fusion", &m, err), err);
    CHECK(m.run.cross_entropy == AP_CE_TE);
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--cross-entropy-fusion-impl te", &m, err), err);
    CHECK(m.run.cross_entropy == AP_CE_UNFUSED);
    CHECK(ap_megatron_parse_args("--cross-entropy-loss-fusion --cross-entropy-fusion-impl "
                                 "unfused", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--cross-entropy-fusion-impl: bad value \"unfused\" (native or te)");
    CHECK(ap_megatron_parse_args("--cross-entropy-fusion-impl", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--cross-entropy-fusion-impl needs a value");
}

/* A Llama 3 8B step on 8 H100s (cp=2, dp=4) gains the difference of the
 * loss's bytes, fwd + bwd, per logit of every micro-batch: 52 - 10 = 42
 * bytes under TE, 52 - 48 = 4 under native, and TE keeps 2 bytes a logit
 * fewer. */
static void a_step_gains_exactly_the_bytes_the_loss_saves(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3-8b.json", 8192);
    ap_plan u, n, t;
    char err[AP_ERR_LEN];
    const char *base = "tp=1,pp=1,cp=2,mbs=1,gbs=128,sp=0,zero=1";
    char spec[160];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, base, NULL, &u, err), err);
    snprintf(spec, sizeof spec, "%s,cross_entropy=native", base);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, spec, NULL, &n, err), err);
    snprintf(spec, sizeof spec, "%s,cross_entropy=te", base);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, spec, NULL, &t, err), err);
    /* Each of the 32 micro-batches of a replica walks its cp share of the
     * sequence's logits: 4096 x 128256. */
    double logits = 4096.0 * 128256, per_step = logits * u.nmicro;
    CHECK(u.nmicro == 32);
    CHECK_NEAR(u.step_time - t.step_time, 42 * per_step / H100_BW, 1e-6);
    CHECK_NEAR(u.step_time - n.step_time, 4 * per_step / H100_BW, 1e-6);
    CHECK(u.max_mem_bytes - t.max_mem_bytes >= 2 * logits);
    CHECK(n.max_mem_bytes == u.max_mem_bytes);
    ap_plan_free(&u);
    ap_plan_free(&n);
    ap_plan_free(&t);
    ap_graph_free(g);
}

/* plan.json says "cross_entropy" only when fused, reads it back (absent
 * is unfused), refuses other names, and the Megatron-LM export states it;
 * torchtitan and DeepSpeed, which run their own loss, refuse it. */
static void plan_json_and_the_exports_carry_it(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,gbs=64,zero=1,cross_entropy=te", NULL,
                                     &p, err), err);
    char *text = ap_plan_to_json(g, &p);
    ap_plan_desc d;
    if (ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == 0) {
        CHECK(d.run.cross_entropy == AP_CE_TE);
        char *args = NULL;
        if (ap_export(g, &d, AP_LAUNCHER_MEGATRON, &args, err) == 0) {
            CHECK_STR_HAS(args, "  --cross-entropy-loss-fusion\n");
            CHECK_STR_HAS(args, "  --cross-entropy-fusion-impl te\n");
        } else {
            CHECK(0);
        }
        free(args);
        CHECK(ap_export(g, &d, AP_LAUNCHER_TORCHTITAN, &args, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "torchtitan computes the loss with the training script's own");
        CHECK(ap_export(g, &d, AP_LAUNCHER_DEEPSPEED, &args, err) == AP_EINPUT);
        ap_plan_desc_free(&d);
    } else {
        CHECK(0);
    }
    cJSON *root = cJSON_Parse(text);
    cJSON *pred = cJSON_GetObjectItemCaseSensitive(root, "prediction");
    CHECK_STR_HAS(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pred,
                                                                      "cross_entropy")), "te");
    cJSON_ReplaceItemInObject(root, "cross_entropy", cJSON_CreateString("liger"));
    char *bad = cJSON_Print(root);
    CHECK(ap_plan_desc_parse(bad, strlen(bad), "plan.json", &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: cross_entropy: \"liger\" is not unfused, native or te");
    free(bad);
    cJSON_ReplaceItemInObject(root, "cross_entropy", cJSON_CreateString("native"));
    bad = cJSON_Print(root);
    if (ap_plan_desc_parse(bad, strlen(bad), "plan.json", &d, err) == 0) {
        char *args = NULL;
        CHECK(d.run.cross_entropy == AP_CE_NATIVE);
        if (ap_export(g, &d, AP_LAUNCHER_MEGATRON, &args, err) == 0) {
            CHECK_STR_HAS(args, "  --cross-entropy-loss-fusion\n");
            CHECK(strstr(args, "--cross-entropy-fusion-impl") == NULL);
        } else {
            CHECK(0);
        }
        free(args);
        ap_plan_desc_free(&d);
    } else {
        CHECK(0);
    }
    free(bad);
    cJSON_DeleteItemFromObject(root, "cross_entropy");
    bad = cJSON_Print(root);
    if (ap_plan_desc_parse(bad, strlen(bad), "plan.json", &d, err) == 0) {
        CHECK(d.run.cross_entropy == AP_CE_UNFUSED);
        ap_plan_desc_free(&d);
    } else {
        CHECK(0);
    }
    free(bad);
    cJSON_Delete(root);
    free(text);
    ap_plan_free(&p);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,gbs=64,zero=1", NULL, &p, err), err);
    text = ap_plan_to_json(g, &p);
    CHECK(strstr(text, "cross_entropy") == NULL);
    free(text);
    ap_plan_free(&p);
    ap_graph_free(g);
}

int main(void)
{
    RUN(native_bf16_moves_30_bytes_forward_and_18_backward);
    RUN(native_fp32_skips_the_copy_but_pays_the_bf16_round_trip);
    RUN(te_moves_three_passes_forward_and_two_backward_in_the_logits_dtype);
    RUN(unfused_is_the_default_and_ap_cost_cross_entropy);
    RUN(te_keeps_half_the_bytes_for_backward);
    RUN(the_price_context_chooses_the_loss_kernels);
    RUN(the_spec_key_and_the_flags_choose_the_same_kernels);
    RUN(a_step_gains_exactly_the_bytes_the_loss_saves);
    RUN(plan_json_and_the_exports_carry_it);
    return DONE();
}
