/* fp32 gradients (grad_fp32): Megatron-LM under --bf16 keeps its main_grad
 * buffer in fp32 unless --grad-reduce-in-bf16 says otherwise
 * (grad_reduce_in_fp32), so each parameter's gradient takes 4 bytes and the
 * data-parallel reduction, and the tied embeddings' all-reduce, move fp32.
 * Megatron-LM's docs/source/api-guide/dist_optimizer.md gives the bytes per
 * parameter for "bf16 param, fp32 grads": 18 without the distributed
 * optimizer, 6 + 12/d with it. Off, everything prices as before. */
#include "model.h"

/* gpt-1.3b at 512 tokens, tp=1 and pp=1 on 16 H100s over two nodes: every
 * parameter is replicated over the 16 ranks and reduced across InfiniBand,
 * in Megatron's buckets of max(40M, 1M x 16) = 40M parameters. */
#define MODEL "examples/gpt-1.3b.json"
#define SPEC "tp=1,pp=1,mbs=1,gbs=32"
#define DP 16
#define BUCKET 40e6

static void model_states_follow_megatrons_distributed_optimizer_table(void)
{
    /* Per parameter: bf16 weight 2, fp32 gradient 4, fp32 main weight and
     * Adam's two moments 12. */
    for (int d = 1; d <= 64; d *= 4) {
        CHECK_NEAR(ap_mem_model_states_grad(1, d, AP_ZERO_NONE, 4).total, 18, 1e-15);
        CHECK_NEAR(ap_mem_model_states_grad(1, d, AP_ZERO_1, 4).total, 6 + 12.0 / d, 1e-15);
        /* ZeRO-2 (Megatron FSDP optim_grads) shards the gradients too,
         * ZeRO-3 (optim_grads_params) the weights as well. */
        CHECK_NEAR(ap_mem_model_states_grad(1, d, AP_ZERO_2, 4).total, 2 + 16.0 / d, 1e-15);
        CHECK_NEAR(ap_mem_model_states_grad(1, d, AP_ZERO_3, 4).total, 18.0 / d, 1e-15);
        CHECK_NEAR(ap_mem_model_states_grad(1, d, AP_ZERO_1, 4).grads, 4, 1e-15);
        CHECK_NEAR(ap_mem_model_states_grad(1, d, AP_ZERO_2, 4).grads, 4.0 / d, 1e-15);
    }
}

static void two_byte_gradients_are_the_old_model_states(void)
{
    for (ap_zero z = AP_ZERO_NONE; z <= AP_ZERO_3; z++) {
        ap_model_states a = ap_mem_model_states(3e9, 8, z);
        ap_model_states b = ap_mem_model_states_grad(3e9, 8, z, 2);
        CHECK(a.params == b.params && a.grads == b.grads && a.optimizer == b.optimizer &&
              a.total == b.total);
    }
}

/* The whole stage holds every parameter once, so its model states are the
 * table's bytes per parameter times the model's parameters, and its
 * gradients 4 bytes each (4/d under ZeRO-2 and 3). */
static void stage_model_states_are_the_tables_bytes_per_parameter(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    const char *zero[] = {"zero=0", "zero=1", "zero=2", "zero=3"};
    double want[] = {18, 6 + 12.0 / DP, 2 + 16.0 / DP, 18.0 / DP};
    double grads[] = {4, 4, 4.0 / DP, 4.0 / DP};
    for (int z = 0; z < 4 && g; z++) {
        char spec[128];
        ap_plan p;
        snprintf(spec, sizeof spec, SPEC ",%s,grad_fp32=1", zero[z]);
        if (ap_test_megatron_plan_ok(g, DP, spec, NULL, &p) == AP_OK) {
            CHECK(p.run.grad_fp32 == 1);
            CHECK_NEAR(p.stages[0].param_bytes, want[z] * g->total_params, 1e-12);
            CHECK_NEAR(p.stages[0].grad_bytes, grads[z] * g->total_params, 1e-12);
        }
        ap_plan_free(&p);
        snprintf(spec, sizeof spec, SPEC ",%s", zero[z]);
        if (ap_test_megatron_plan_ok(g, DP, spec, NULL, &p) == AP_OK)
            CHECK_NEAR(p.stages[0].grad_bytes, grads[z] / 2 * g->total_params, 1e-12);
        ap_plan_free(&p);
    }
    CHECK(g != NULL);
    ap_graph_free(g);
}

/* ZeRO-1: the step's reduce-scatter moves 4-byte gradients in buckets of
 * 40M of them (160 MB); the parameter all-gather stays bf16. */
static void distributed_optimizer_reduce_scatters_fp32_gradients(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_cluster c;
    ap_plan bf, fp;
    if (!g || ap_test_megatron_plan_ok(g, DP, SPEC, &c, &bf) ||
        ap_test_megatron_plan_ok(g, DP, SPEC ",grad_fp32=1", NULL, &fp)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    double n = g->total_params / BUCKET;
    double rs4 = ap_cost_collective(&c, AP_COLL_REDUCESCATTER, DP, 2, 4 * BUCKET) * n;
    double rs2 = ap_cost_collective(&c, AP_COLL_REDUCESCATTER, DP, 2, 2 * BUCKET) * n;
    const ap_stage *a = &bf.stages[0], *b = &fp.stages[0];
    CHECK_NEAR(b->grad_sync - b->param_sync, rs4, 1e-9);
    CHECK_NEAR(a->grad_sync - a->param_sync, rs2, 1e-9);
    /* Twice the bytes over the same ring: twice the bandwidth term, one
     * latency per bucket as before (1.78x here, across InfiniBand). */
    CHECK(rs4 > 1.5 * rs2 && rs4 < 2 * rs2);
    CHECK_NEAR(b->grad_sync - b->param_sync - (a->grad_sync - a->param_sync), rs4 - rs2, 1e-9);
    CHECK(b->param_sync == a->param_sync);
    CHECK(fp.t_grad_sync_total > bf.t_grad_sync_total);
    ap_plan_free(&bf);
    ap_plan_free(&fp);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* ZeRO-0: one all-reduce of the fp32 gradients. */
static void plain_data_parallel_all_reduces_fp32_gradients(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_cluster c;
    ap_plan p;
    if (!g || ap_test_megatron_plan_ok(g, DP, SPEC ",zero=0,grad_fp32=1", &c, &p)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    double ar = ap_cost_collective(&c, AP_COLL_ALLREDUCE, DP, 2, 4 * BUCKET) *
                g->total_params / BUCKET;
    CHECK_NEAR(p.stages[0].grad_sync, ar, 1e-9);
    CHECK(p.stages[0].param_sync == 0);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* ZeRO-2 and 3 reduce-scatter each micro-batch's gradients in its
 * backward, tensor by tensor: every parameter tensor once per layer it
 * belongs to, 4 bytes an element over the 16 ranks (serial, so that none of
 * it hides behind the backward). */
static void sharded_gradients_reduce_scatter_fp32_every_micro_batch(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_cluster c;
    ap_plan p2, p3;
    if (!g || ap_test_megatron_plan_ok(g, DP, SPEC ",zero=2,grad_fp32=1,overlap_grad=0", &c,
                                       &p2) ||
        ap_test_megatron_plan_ok(g, DP, SPEC ",zero=3,grad_fp32=1,overlap_grad=0", NULL, &p3)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    double want = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].role == AP_TENSOR_PARAM)
            want += ap_cost_collective(&c, AP_COLL_REDUCESCATTER, DP, 2,
                                       4 * (double)g->tensors[t].elems);
    CHECK_NEAR(p2.stages[0].kinds.grad_reduce, want, 1e-9);
    CHECK_NEAR(p3.stages[0].kinds.grad_reduce, want, 1e-9);
    ap_plan_free(&p2);
    ap_plan_free(&p3);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Tied embeddings across two stages: each rank's shard of the table,
 * V x h / tp elements, all-reduced with its counterpart in fp32. */
static void tied_embeddings_all_reduce_their_fp32_gradient(void)
{
    const char *cfg = "{\"model_type\": \"gpt2\", \"n_layer\": 4, \"n_embd\": 256, "
                      "\"n_head\": 4, \"vocab_size\": 2048, \"n_positions\": 1024, "
                      "\"tie_word_embeddings\": true}";
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 1024;
    ap_graph *g = NULL;
    ap_cluster c;
    ap_plan p;
    if (ap_graph_from_hf(cfg, strlen(cfg), "gpt2.json", &o, &g, err) ||
        ap_test_megatron_plan_ok(g, DP, "tp=2,pp=2,mbs=1,gbs=64,sp=1,grad_fp32=1", &c, &p)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    double ar = ap_cost_collective(&c, AP_COLL_ALLREDUCE, 2, 2, 2048.0 * 256 / 2 * 4);
    CHECK_NEAR(p.stages[0].tied_sync, ar, 1e-12);
    CHECK_NEAR(p.stages[1].tied_sync, ar, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* grad_fp32=0 is the spec without the key: the same plan, byte for byte. */
static void off_prices_as_before(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    const char *specs[][2] = {
        {SPEC, SPEC ",grad_fp32=0"},
        {SPEC ",zero=0,overlap_grad=0", SPEC ",zero=0,overlap_grad=0,grad_fp32=0"},
        {"tp=2,pp=2,sp=1,mbs=1,gbs=32,zero=3", "tp=2,pp=2,sp=1,mbs=1,gbs=32,zero=3,grad_fp32=0"},
    };
    for (size_t i = 0; g && i < sizeof specs / sizeof specs[0]; i++) {
        ap_plan a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        if (ap_test_megatron_plan_ok(g, DP, specs[i][0], NULL, &a) == AP_OK &&
            ap_test_megatron_plan_ok(g, DP, specs[i][1], NULL, &b) == AP_OK) {
            char *ja = ap_plan_to_json(g, &a), *jb = ap_plan_to_json(g, &b);
            CHECK(ja && jb && !strcmp(ja, jb));
            CHECK(a.step_time == b.step_time && a.max_mem_bytes == b.max_mem_bytes);
            /* 16 bytes a parameter, as before the key existed. */
            if (i == 1)
                CHECK_NEAR(a.stages[0].param_bytes, 16 * g->total_params, 1e-12);
            free(ja);
            free(jb);
        }
        ap_plan_free(&a);
        ap_plan_free(&b);
    }
    CHECK(g != NULL);
    ap_graph_free(g);
}

/* The step pays the larger reduction and the larger optimizer pass: it
 * can only be slower, and memory grows by 2 bytes a parameter (ZeRO-0). */
static void fp32_gradients_cost_memory_and_time(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_plan a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (g && ap_test_megatron_plan_ok(g, DP, SPEC ",zero=0,overlap_grad=0", NULL, &a) == AP_OK &&
        ap_test_megatron_plan_ok(g, DP, SPEC ",zero=0,overlap_grad=0,grad_fp32=1", NULL,
                                 &b) == AP_OK) {
        CHECK_NEAR(b.max_mem_bytes - a.max_mem_bytes, 2 * g->total_params, 1e-9);
        CHECK(b.step_time > a.step_time);
        CHECK(b.t_optimizer > a.t_optimizer);
    } else {
        CHECK(0);
    }
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_graph_free(g);
}

/* Megatron-LM's validate_args, as ap_megatron_parse_args reads the flags. */
static int grads_of(const char *flags)
{
    ap_megatron m;
    return ap_test_megatron_args(flags, &m) ? -1 : m.run.grad_fp32;
}

static void flags_follow_megatrons_rule(void)
{
    CHECK(grads_of("--bf16") == 1);
    CHECK(grads_of("--bf16 --grad-reduce-in-bf16") == 0);
    CHECK(grads_of("--grad-reduce-in-bf16 --bf16") == 0);
    CHECK(grads_of("--bf16 --accumulate-allreduce-grads-in-fp32") == 1);
    /* --grad-reduce-in-bf16 wins over the fp32 flag under --bf16. */
    CHECK(grads_of("--bf16 --accumulate-allreduce-grads-in-fp32 --grad-reduce-in-bf16") == 0);
    CHECK(grads_of("--bf16 --main-grads-dtype bf16") == 0);
    CHECK(grads_of("--bf16 --main-grads-dtype fp32") == 1);
    /* fp16 keeps fp16 gradients unless asked; without a precision flag
     * the gradients are the parameters' dtype. */
    CHECK(grads_of("--fp16") == 0);
    CHECK(grads_of("--fp16 --grad-reduce-in-bf16") == 0);
    CHECK(grads_of("--fp16 --accumulate-allreduce-grads-in-fp32") == 1);
    CHECK(grads_of("--accumulate-allreduce-grads-in-fp32") == 1);
    CHECK(grads_of("--tensor-model-parallel-size 1") == 0);
    /* Megatron-LM refuses these. */
    CHECK(grads_of("--bf16 --fp16") == -1);
    CHECK(grads_of("--bf16 --accumulate-allreduce-grads-in-fp32 --main-grads-dtype bf16") == -1);
    CHECK(grads_of("--bf16 --main-grads-dtype fp8") == -1);
    CHECK(grads_of("--bf16 --main-grads-dtype") == -1);
}

static void spec_key_reads_and_formats(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN], buf[512];
    ap_megatron_default(&m);
    CHECK(m.run.grad_fp32 == 0);
    CHECK(ap_megatron_parse("tp=2,grad_fp32=1", &m, err) == AP_OK && m.run.grad_fp32 == 1);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",grad_fp32=1");
    CHECK(ap_megatron_parse("grad_fp32=2", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron: grad_fp32: bad value \"2\" (0 or 1)");
    ap_megatron_default(&m);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK(!strstr(buf, "grad_fp32"));
}

int main(void)
{
    RUN(model_states_follow_megatrons_distributed_optimizer_table);
    RUN(two_byte_gradients_are_the_old_model_states);
    RUN(stage_model_states_are_the_tables_bytes_per_parameter);
    RUN(distributed_optimizer_reduce_scatters_fp32_gradients);
    RUN(plain_data_parallel_all_reduces_fp32_gradients);
    RUN(sharded_gradients_reduce_scatter_fp32_every_micro_batch);
    RUN(tied_embeddings_all_reduce_their_fp32_gradient);
    RUN(off_prices_as_before);
    RUN(fp32_gradients_cost_memory_and_time);
    RUN(flags_follow_megatrons_rule);
    RUN(spec_key_reads_and_formats);
    return DONE();
}
