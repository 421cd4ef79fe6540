/* FP8 primary weights (Megatron-LM's --fp8-param-gather): an FP8 linear
 * layer's weight is Transformer Engine's FP8 tensor with its transpose and
 * no bf16 copy, the distributed optimizer gathers it in one byte an
 * element, every other parameter stays bf16, and the setting is refused
 * without FP8 or without the distributed optimizer, parsed from the spec
 * and the flags, carried by plan.json and the Megatron-LM export. */
#include <cjson/cJSON.h>

#include "model.h"

#include "planner/planner.h"

static ap_graph *llama(void)
{
    return ap_test_model("bench/validation/models/llama-2-7b.json", 4096);
}

static double dim_of(const ap_graph *g, ap_dim_kind k)
{
    return (double)ap_graph_dim(g, ap_graph_label_of(g, k))->size;
}

/* Layer 0's op `name` priced in stage 0's context of plan p, with or
 * without FP8 primary weights. */
static ap_op_cost layer_op(const ap_graph *g, const ap_cluster *c, const ap_plan *p,
                           const char *name, int fp8_params)
{
    ap_op_cost oc;
    memset(&oc, 0, sizeof oc);
    ap_strategy s;
    int op = ap_test_layer_op(g, p, name, &s);
    if (op < 0) {
        fprintf(stderr, "no op %s in the layer\n", name);
        return oc;
    }
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    x.run.fp8_param_gather = fp8_params;
    ap_price_op(&x, op, &s, &oc);
    return oc;
}

static double weight_elems(const ap_graph *g, const char *op)
{
    return (double)g->tensors[g->ops[ap_graph_find_op(g, op)].inputs[1]].elems;
}

/* tp=1 on 8 GPUs: each GPU holds whole weights, the optimizer states
 * sharded 8 ways. Per weight element, bf16 parameter 2, FP8 weight and
 * transpose 2, bf16 gradient 2, fp32 main weight, Adam m and v 12/8; with
 * FP8 primary weights the bf16 parameter goes. */
static void a_tp1_linear_weight_drops_its_bf16_copy(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,gbs=64,zero=1,fp8=1", &c, &p, err), err);
    double w = dim_of(g, AP_DIM_HIDDEN) * dim_of(g, AP_DIM_FFN);
    CHECK_NEAR(weight_elems(g, "l0.mlp.down"), w, 1e-15);
    ap_op_cost before = layer_op(g, &c, &p, "l0.mlp.down", 0);
    ap_op_cost after = layer_op(g, &c, &p, "l0.mlp.down", 1);
    CHECK_NEAR(before.param_bytes, (2 + 2 + 2 + 12.0 / 8) * w, 1e-12);
    CHECK_NEAR(after.param_bytes, (2 + 2 + 12.0 / 8) * w, 1e-12);
    /* The FP8 weight and its transpose, which Hopper's FP8 GEMMs need for
     * the data gradient, are there either way. */
    CHECK_NEAR(before.fp8_weight_bytes, 2 * w, 1e-12);
    CHECK_NEAR(after.fp8_weight_bytes, 2 * w, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Llama-2-7B's linear weights per layer: q, k, v, o (h x h each, no GQA)
 * and gate, up, down (h x f each). */
static void a_stage_saves_two_bytes_per_linear_weight_element(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    ap_plan b, f;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=2,sp=1,gbs=64,zero=1,fp8=1", &c, &b, err),
               err);
    ap_cluster_free(&c);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=2,sp=1,gbs=64,zero=1,fp8=1,"
                                     "fp8_param_gather=1", &c, &f, err), err);
    double h = dim_of(g, AP_DIM_HIDDEN), ff = dim_of(g, AP_DIM_FFN);
    double per_layer = 4 * h * h + 3 * h * ff; /* 202,375,168 */
    CHECK_NEAR(per_layer, 202375168.0, 1e-15);
    /* tp=2 halves each GPU's share of every linear weight. */
    double saved = 2 * per_layer / 2 * g->nlayers;
    CHECK_NEAR(b.stages[0].param_bytes - f.stages[0].param_bytes, saved, 1e-9);
    CHECK_NEAR(b.max_mem_bytes - f.max_mem_bytes, saved, 1e-9);
    CHECK(f.run.fp8_param_gather == 1 && b.run.fp8_param_gather == 0);
    ap_plan_free(&b);
    ap_plan_free(&f);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* ZeRO-1 reduce-scatters the bf16 gradients and all-gathers the updated
 * parameters over the 8 data-parallel GPUs of one node, in Megatron-Core's
 * buckets of 40M elements: the gather moves one byte a weight element
 * instead of two, in buckets of 40 MB instead of 80 MB (Megatron's uint8
 * parameter buffer). */
static void the_distributed_optimizer_gathers_fp8_weights_in_one_byte(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,gbs=64,zero=1,fp8=1", &c, &p, err), err);
    const char *ops[] = {"l0.q", "l0.k", "l0.v", "l0.o", "l0.mlp.gate", "l0.mlp.up",
                         "l0.mlp.down"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        double w = weight_elems(g, ops[i]);
        ap_op_cost before = layer_op(g, &c, &p, ops[i], 0);
        ap_op_cost after = layer_op(g, &c, &p, ops[i], 1);
        double bucket = 40e6;
        double rs = ap_cost_collective_bucketed(&c, AP_COLL_REDUCESCATTER, 8, 1, 2 * w,
                                                2 * bucket);
        CHECK_NEAR(before.grad_sync, rs + ap_cost_collective_bucketed(
                       &c, AP_COLL_ALLGATHER, 8, 1, 2 * w, 2 * bucket), 1e-12);
        CHECK_NEAR(after.grad_sync, rs + ap_cost_collective_bucketed(
                       &c, AP_COLL_ALLGATHER, 8, 1, w, bucket), 1e-12);
        /* Half the bytes; each element still pays its share of one
         * bucket's latency, so a little over half the gather. */
        double ratio = (after.grad_sync - rs) / (before.grad_sync - rs);
        CHECK(ratio > 0.5 && ratio < 0.6);
    }
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Every parameter other than an FP8 linear layer's weight keeps its bf16
 * parameter and bf16 gather: the norms, the embedding, the LM head and a
 * MoE router. Mixtral's experts are FP8 linear layers too. */
static void norms_embedding_head_and_router_stay_bf16(void)
{
    ap_graph *g = ap_test_model("examples/hf/mixtral-8x7b.json", 1024);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=1,ep=8,gbs=64,zero=1,fp8=1", &c, &p, err),
               err);
    const ap_block *blk = &p.stages[0].blocks[2];
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &p, 0);
    int fp8_ops = 0, bf16_ops = 0, routers = 0;
    for (int i = 0; i < blk->nops; i++) {
        int op = blk->ops[i];
        const ap_strategy *s = &ap_test_layer(&p)->strat[i];
        ap_op_cost before, after;
        x.run.fp8_param_gather = 0;
        ap_price_op(&x, op, s, &before);
        x.run.fp8_param_gather = 1;
        ap_price_op(&x, op, s, &after);
        if (before.param_bytes == 0)
            continue;
        if (ap_fp8_linear(g, op)) {
            fp8_ops++;
            CHECK(after.param_bytes < before.param_bytes);
            /* ep = dp leaves each expert on one GPU: nothing to gather. */
            if (ap_expert_op(g, op))
                CHECK(before.grad_sync == 0 && after.grad_sync == 0);
            else
                CHECK(after.grad_sync < before.grad_sync);
        } else {
            bf16_ops++;
            routers += g->ops[op].kind == AP_OP_ROUTER;
            CHECK(after.param_bytes == before.param_bytes);
            CHECK(after.grad_sync == before.grad_sync);
        }
    }
    CHECK(fp8_ops >= 5 && bf16_ops >= 3 && routers == 1);
    /* The embedding and the LM head ride on the stage's pieces. */
    for (int b = 0; b < 2; b++) {
        const ap_block *piece = &p.stages[0].blocks[b];
        const ap_block_point *bp = &piece->points[p.stages[0].point[b]];
        for (int i = 0; i < piece->nops; i++) {
            ap_op_cost before, after;
            x.run.fp8_param_gather = 0;
            ap_price_op(&x, piece->ops[i], &bp->strat[i], &before);
            x.run.fp8_param_gather = 1;
            ap_price_op(&x, piece->ops[i], &bp->strat[i], &after);
            CHECK(after.param_bytes == before.param_bytes);
            CHECK(after.grad_sync == before.grad_sync);
        }
    }
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void fp8_params_without_fp8_or_the_distributed_optimizer_are_refused(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN] = "";
    CHECK(ap_test_megatron_plan(g, 8, "gbs=64,fp8_param_gather=1", &c, &p, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "fp8_param_gather");
    CHECK_STR_HAS(err, "fp8=1");
    ap_cluster_free(&c);
    CHECK(ap_test_megatron_plan(g, 8, "gbs=64,fp8=1,zero=0,fp8_param_gather=1", &c, &p,
                                err) == AP_EINPUT);
    CHECK_STR_HAS(err, "fp8_param_gather");
    CHECK_STR_HAS(err, "distributed optimizer");
    ap_cluster_free(&c);
    /* Megatron-LM's own default is no distributed optimizer. */
    CHECK(ap_test_megatron_plan(g, 8, "--global-batch-size 64 --fp8-format hybrid "
                                "--fp8-param-gather", &c, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--use-distributed-optimizer");
    ap_cluster_free(&c);
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "--global-batch-size 64 --fp8-format hybrid "
                                     "--fp8-param-gather --use-distributed-optimizer",
                                     &c, &p, err), err);
    CHECK(p.run.fp8_param_gather == 1);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void the_spec_key_parses_formats_and_rejects_other_values(void)
{
    char err[AP_ERR_LEN], spec[256];
    ap_megatron m;
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse("fp8=1,fp8_param_gather=1", &m, err), err);
    CHECK(m.run.fp8_param_gather == 1);
    ap_megatron_format(&m, spec, sizeof spec);
    CHECK_STR_HAS(spec, ",fp8=1");
    CHECK_STR_HAS(spec, ",fp8_param_gather=1");
    CHECK(ap_megatron_parse("fp8_param_gather=2", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "fp8_param_gather: bad value \"2\" (0 or 1)");
    ap_megatron_default(&m);
    ap_megatron_format(&m, spec, sizeof spec);
    CHECK(strstr(spec, "fp8_param_gather") == NULL);
}

/* plan.json says "fp8_param_gather": true only when on, reads it back,
 * and refuses it where Megatron-LM would. */
static void plan_json_carries_it_and_refuses_it_without_fp8_or_zero(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=2,sp=1,gbs=64,fp8=1,fp8_param_gather=1",
                                     &c, &p, err), err);
    char *text = ap_plan_to_json(g, &p);
    ap_plan_desc d;
    if (ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == 0) {
        CHECK(d.run.fp8_param_gather == 1 && d.run.fp8 == 1);
        char *args = NULL;
        if (ap_export(g, &d, AP_LAUNCHER_MEGATRON, &args, err) == 0) {
            CHECK_STR_HAS(args, "  --fp8-param-gather\n");
            CHECK_STR_HAS(args, "  --use-distributed-optimizer\n");
        } else {
            CHECK(0);
        }
        free(args);
        ap_plan_desc_free(&d);
    } else {
        CHECK(0);
    }
    cJSON *root = cJSON_Parse(text);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "fp8_param_gather")));
    cJSON_ReplaceItemInObject(root, "zero", cJSON_CreateNumber(0));
    char *bad = cJSON_Print(root);
    CHECK(ap_plan_desc_parse(bad, strlen(bad), "plan.json", &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: fp8_param_gather: needs \"zero\" 1 or more");
    free(bad);
    cJSON_ReplaceItemInObject(root, "zero", cJSON_CreateNumber(1));
    cJSON_DeleteItemFromObject(root, "fp8");
    bad = cJSON_Print(root);
    CHECK(ap_plan_desc_parse(bad, strlen(bad), "plan.json", &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "plan.json: fp8_param_gather: FP8 weights need \"fp8\": true");
    free(bad);
    cJSON_ReplaceItemInObject(root, "fp8_param_gather", cJSON_CreateString("yes"));
    cJSON_AddTrueToObject(root, "fp8");
    bad = cJSON_Print(root);
    CHECK(ap_plan_desc_parse(bad, strlen(bad), "plan.json", &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "fp8_param_gather");
    free(bad);
    cJSON_Delete(root);
    free(text);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    /* Off, the field is not written. */
    REQUIRE_OK(ap_test_megatron_plan(g, 8, "tp=2,sp=1,gbs=64,fp8=1", &c, &p, err), err);
    text = ap_plan_to_json(g, &p);
    CHECK(strstr(text, "fp8_param_gather") == NULL);
    free(text);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(a_tp1_linear_weight_drops_its_bf16_copy);
    RUN(a_stage_saves_two_bytes_per_linear_weight_element);
    RUN(the_distributed_optimizer_gathers_fp8_weights_in_one_byte);
    RUN(norms_embedding_head_and_router_stay_bf16);
    RUN(fp8_params_without_fp8_or_the_distributed_optimizer_are_refused);
    RUN(the_spec_key_parses_formats_and_rejects_other_values);
    RUN(plan_json_carries_it_and_refuses_it_without_fp8_or_zero);
    return DONE();
}
