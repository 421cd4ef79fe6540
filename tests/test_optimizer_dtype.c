/* The precision-aware optimizer's states (main_params, exp_avg,
 * exp_avg_sq): Megatron-LM's --use-precision-aware-optimizer hands
 * --main-params-dtype, --exp-avg-dtype and --exp-avg-sq-dtype to
 * Transformer Engine's FusedAdam, which keeps each state in that dtype
 * (fp32 4 bytes, fp16 and bf16 2, fp8 1) and steps it through an fp32
 * copy. The states take their widths' sum a parameter, divided by the
 * data-parallel group under the distributed optimizer; fp32 states price
 * byte for byte as before. */
#include "model.h"

/* gpt-1.3b at 512 tokens, tp=1 and pp=1 on 16 H100s: the one stage holds
 * every parameter, replicated over the 16 ranks. */
#define MODEL "examples/gpt-1.3b.json"
#define SPEC "tp=1,pp=1,mbs=1,gbs=32"
#define DP 16

static const char *const names[] = {"fp32", "fp16", "bf16", "fp8", "none"};
static const double widths[] = {4, 2, 2, 1, 0};
/* What main weights can be: fp32, fp16 (FusedAdam's master_weight_dtype),
 * none (apex stepping the model's own weights). */
static const int mains[] = {AP_OPT_FP32, AP_OPT_FP16, AP_OPT_NONE};

static ap_opt_dtypes dtypes(int main_params, int exp_avg, int exp_avg_sq)
{
    ap_opt_dtypes o = {(ap_opt_dtype)main_params, (ap_opt_dtype)exp_avg,
                       (ap_opt_dtype)exp_avg_sq};
    return o;
}

static void names_and_widths_are_fused_adams_dtypes(void)
{
    for (int i = 0; i < 5; i++) {
        ap_opt_dtype t = AP_OPT_FP32;
        CHECK(ap_opt_dtype_parse(names[i], &t) == 0 && (int)t == i);
        CHECK(!strcmp(ap_opt_dtype_name(t), names[i]));
        CHECK(ap_opt_dtype_bytes(t) == widths[i]);
    }
    ap_opt_dtype t = AP_OPT_BF16;
    CHECK(ap_opt_dtype_parse("fp64", &t) == -1 && t == AP_OPT_BF16);
    CHECK(ap_opt_dtype_parse("FP16", &t) == -1);
    ap_opt_dtypes zero;
    memset(&zero, 0, sizeof zero);
    CHECK(ap_opt_dtypes_fp32(&zero) && ap_opt_dtypes_fp32(NULL));
    CHECK(ap_opt_state_bytes(&zero) == 12 && ap_opt_state_bytes(NULL) == 12);
}

/* Every combination Megatron-LM takes (main weights fp32 or fp16, each
 * moment fp32, fp16, bf16 or fp8) and apex's none: bf16 weights and
 * gradients (2 + 2) plus the states, whole under ZeRO-0, divided by d
 * under ZeRO-1. */
static void bytes_per_parameter_for_every_dtype_combination(void)
{
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 4; m++)
            for (int v = 0; v < 4; v++) {
                int a = mains[i];
                ap_opt_dtypes o = dtypes(a, m, v);
                double w = widths[a] + widths[m] + widths[v];
                CHECK(ap_opt_state_bytes(&o) == w);
                CHECK(ap_opt_dtypes_fp32(&o) == (a == 0 && m == 0 && v == 0));
                for (int d = 1; d <= 64; d *= 4) {
                    ap_model_states z0 = ap_mem_model_states_opt(1, d, AP_ZERO_NONE, 2, &o);
                    ap_model_states z1 = ap_mem_model_states_opt(1, d, AP_ZERO_1, 2, &o);
                    CHECK_NEAR(z0.total, 4 + w, 1e-15);
                    CHECK_NEAR(z1.total, 4 + w / d, 1e-15);
                    CHECK_NEAR(z1.optimizer, w / d, 1e-15);
                    /* fp32 gradients add 2 bytes, never sharded by ZeRO-1. */
                    CHECK_NEAR(ap_mem_model_states_opt(1, d, AP_ZERO_1, 4, &o).total,
                               6 + w / d, 1e-15);
                }
            }
    /* Named cases: fp16 main weights with bf16 moments, 6 bytes of state,
     * 10 a parameter unsharded; fp8 moments beside fp32 main weights, 6
     * too; everything narrowest, fp16 + fp8 + fp8 = 4, 8 unsharded. */
    ap_opt_dtypes o = dtypes(AP_OPT_FP16, AP_OPT_BF16, AP_OPT_BF16);
    CHECK(ap_mem_model_states_opt(1, 8, AP_ZERO_NONE, 2, &o).total == 10);
    CHECK(ap_mem_model_states_opt(1, 8, AP_ZERO_1, 2, &o).total == 4 + 0.75);
    o = dtypes(AP_OPT_FP32, AP_OPT_FP8, AP_OPT_FP8);
    CHECK(ap_mem_model_states_opt(1, 1, AP_ZERO_NONE, 2, &o).total == 10);
    o = dtypes(AP_OPT_FP16, AP_OPT_FP8, AP_OPT_FP8);
    CHECK(ap_mem_model_states_opt(1, 1, AP_ZERO_NONE, 2, &o).total == 8);
    CHECK(ap_mem_model_states_opt(1, 4, AP_ZERO_1, 2, &o).total == 5);
    /* NeMo's distributed_fused_adam with optim dtype bf16 on a bf16 model:
     * no main weights, bf16 moments, 4 bytes of state. */
    o = dtypes(AP_OPT_NONE, AP_OPT_BF16, AP_OPT_BF16);
    CHECK(ap_mem_model_states_opt(1, 2, AP_ZERO_1, 2, &o).total == 6);
}

static void fp32_states_are_todays_model_states_bit_for_bit(void)
{
    ap_opt_dtypes fp32 = dtypes(0, 0, 0);
    for (ap_zero z = AP_ZERO_NONE; z <= AP_ZERO_3; z++)
        for (double gw = 2; gw <= 4; gw += 2) {
            ap_model_states a = ap_mem_model_states_grad(1.3e9, 16, z, gw);
            ap_model_states b = ap_mem_model_states_opt(1.3e9, 16, z, gw, &fp32);
            ap_model_states c = ap_mem_model_states_opt(1.3e9, 16, z, gw, NULL);
            CHECK(a.params == b.params && a.grads == b.grads &&
                  a.optimizer == b.optimizer && a.total == b.total);
            CHECK(a.total == c.total && a.optimizer == c.optimizer);
        }
}

/* FusedAdam's step per element: 8 bytes for an fp32 state (read, write);
 * a bf16 one 24 (.float() 2 + 4, the kernel 8, .bfloat16() 4 + 2, copy_
 * 2 + 2); fp16 40 (and a scaling multiply each way, 8 + 8, and an amax pass,
 * 4); fp8 22 (dequantize 1 + 4, kernel 8, amax 4, quantize 4 + 1). */
static void the_step_streams_narrow_states_through_an_fp32_copy(void)
{
    double per[] = {8, 40, 24, 22, 0};
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 4; m++)
            for (int v = 0; v < 4; v++) {
                int a = mains[i];
                ap_opt_dtypes o = dtypes(a, m, v);
                CHECK(ap_opt_step_bytes(&o) == per[a] + per[m] + per[v]);
            }
    ap_opt_dtypes fp32 = dtypes(0, 0, 0);
    CHECK(ap_opt_step_bytes(&fp32) == 24 && ap_opt_step_bytes(NULL) == 24);
    CHECK(ap_opt_step_bytes(&fp32) == 2 * ap_opt_state_bytes(&fp32));
    /* Narrower states hold fewer bytes but the step moves more of them. */
    ap_opt_dtypes bf = dtypes(AP_OPT_FP32, AP_OPT_BF16, AP_OPT_BF16);
    CHECK(ap_opt_state_bytes(&bf) == 8 && ap_opt_step_bytes(&bf) == 56);
}

/* The stage holds every parameter once: its model states are the bytes a
 * parameter times the model's parameters, its optimizer states the
 * states' width (over 16 under ZeRO-1). */
static void stage_holds_the_states_at_their_widths(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    const char *keys = "main_params=fp16,exp_avg=bf16,exp_avg_sq=fp8";
    double w = 2 + 2 + 1;
    ap_plan p;
    memset(&p, 0, sizeof p);
    char spec[160];
    snprintf(spec, sizeof spec, SPEC ",zero=1,%s", keys);
    if (g && ap_test_megatron_plan_ok(g, DP, spec, NULL, &p) == AP_OK) {
        CHECK(p.run.opt.main_params == AP_OPT_FP16 && p.run.opt.exp_avg == AP_OPT_BF16 &&
              p.run.opt.exp_avg_sq == AP_OPT_FP8);
        CHECK_NEAR(p.stages[0].param_bytes, (4 + w / DP) * g->total_params, 1e-12);
        CHECK_NEAR(p.stages[0].opt_bytes, w / DP * g->total_params, 1e-12);
    } else {
        CHECK(0);
    }
    ap_plan_free(&p);
    /* The spec takes the dtypes at zero=0 too; Megatron-LM's flags do not
     * (below), and neither does the spec's check. */
    snprintf(spec, sizeof spec, SPEC ",zero=0,%s", keys);
    char err[AP_ERR_LEN];
    CHECK(ap_test_megatron_plan(g, DP, spec, NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "only with the distributed optimizer (zero=1");
    ap_plan_free(&p);
    /* ZeRO-3 (Megatron FSDP) shards everything. */
    snprintf(spec, sizeof spec, SPEC ",zero=3,%s", keys);
    if (g && ap_test_megatron_plan_ok(g, DP, spec, NULL, &p) == AP_OK)
        CHECK_NEAR(p.stages[0].param_bytes, (4 + w) / DP * g->total_params, 1e-12);
    else
        CHECK(0);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* The step: ap_cost_memop over every model state read and written, plus
 * the fp32 copy's extra bytes on each of the P/16 optimizer elements. */
static void optimizer_step_time_is_the_closed_form(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_cluster c;
    ap_plan p;
    if (!g ||
        ap_test_megatron_plan_ok(g, DP, SPEC ",zero=1,exp_avg=bf16,exp_avg_sq=bf16", &c, &p)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    double P = g->total_params, w = 4 + 2 + 2;
    double states = (4 + w / DP) * P, elems = P / DP;
    double want = ap_cost_memop(&c, states, 2 * states + elems * (56 - 2 * w));
    CHECK_NEAR(p.stages[0].optimizer, want, 1e-12);
    CHECK_NEAR(p.t_optimizer, want, 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Stating fp32 changes nothing: every number of the plan is the plan
 * without the keys. */
static void fp32_keys_price_byte_for_byte_as_before(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    const char *zero[] = {"zero=0", "zero=1", "zero=2", "zero=3"};
    for (int z = 0; z < 4 && g; z++) {
        char a[128], b[200];
        ap_plan pa, pb;
        snprintf(a, sizeof a, SPEC ",%s", zero[z]);
        snprintf(b, sizeof b, SPEC ",%s,main_params=fp32,exp_avg=fp32,exp_avg_sq=fp32",
                 zero[z]);
        if (!ap_test_megatron_plan_ok(g, DP, a, NULL, &pa) &&
            !ap_test_megatron_plan_ok(g, DP, b, NULL, &pb)) {
            CHECK(pa.step_time == pb.step_time && pa.max_mem_bytes == pb.max_mem_bytes);
            CHECK(pa.stages[0].param_bytes == pb.stages[0].param_bytes);
            CHECK(pa.stages[0].optimizer == pb.stages[0].optimizer);
            /* The optimizer's share is the old 12 bytes a parameter. */
            CHECK_NEAR(pa.stages[0].opt_bytes, 12 * g->total_params / (z ? DP : 1), 1e-12);
        } else {
            CHECK(0);
        }
        ap_plan_free(&pa);
        ap_plan_free(&pb);
    }
    CHECK(g != NULL);
    ap_graph_free(g);
}

static void narrow_states_save_memory_and_cost_step_time(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_plan a, b;
    if (!g || ap_test_megatron_plan_ok(g, DP, SPEC ",zero=0", NULL, &a) ||
        ap_test_megatron_plan_ok(g, DP, SPEC ",zero=1,exp_avg=bf16,exp_avg_sq=bf16", NULL, &b)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    ap_plan c;
    if (ap_test_megatron_plan_ok(g, DP, SPEC ",zero=1", NULL, &c) == AP_OK) {
        CHECK_NEAR(c.max_mem_bytes - b.max_mem_bytes, 4.0 / DP * g->total_params, 1e-9);
        CHECK(b.t_optimizer > c.t_optimizer);
    } else {
        CHECK(0);
    }
    CHECK(b.max_mem_bytes < a.max_mem_bytes);
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_plan_free(&c);
    ap_graph_free(g);
}

/* Megatron-Core's OptimizerConfig: another dtype than fp32 needs
 * --use-precision-aware-optimizer, which needs the distributed optimizer;
 * FusedAdam keeps no bf16 main weights. */
static void flags_follow_megatron_cores_rules(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN], buf[512];
    const char *dist = "--use-distributed-optimizer --use-precision-aware-optimizer ";
    char args[256];
    snprintf(args, sizeof args, "%s--main-params-dtype fp16 --exp-avg-dtype bf16 "
             "--exp-avg-sq-dtype fp8", dist);
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args(args, &m, err) == AP_OK);
    CHECK(m.run.opt.main_params == AP_OPT_FP16 && m.run.opt.exp_avg == AP_OPT_BF16 &&
          m.run.opt.exp_avg_sq == AP_OPT_FP8);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",main_params=fp16,exp_avg=bf16,exp_avg_sq=fp8");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args(dist, &m, err) == AP_OK);
    CHECK(ap_opt_dtypes_fp32(&m.run.opt));
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK(!strstr(buf, "exp_avg") && !strstr(buf, "main_params"));
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--use-distributed-optimizer --exp-avg-dtype bf16", &m,
                                 err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--exp-avg-dtype bf16: Megatron-Core's OptimizerConfig asserts fp32 "
                       "without --use-precision-aware-optimizer");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--use-precision-aware-optimizer --exp-avg-sq-dtype fp16",
                                 &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--use-precision-aware-optimizer: Megatron-Core's OptimizerConfig "
                       "asserts it is only supported with the distributed optimizer");
    ap_megatron_default(&m);
    snprintf(args, sizeof args, "%s--main-params-dtype bf16", dist);
    CHECK(ap_megatron_parse_args(args, &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--main-params-dtype bf16: Transformer Engine's FusedAdam keeps "
                       "fp32 or fp16 main weights");
    ap_megatron_default(&m);
    snprintf(args, sizeof args, "%s--exp-avg-dtype fp64", dist);
    CHECK(ap_megatron_parse_args(args, &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--exp-avg-dtype: bad value \"fp64\"");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse("main_params=fp8", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "main_params: bad value \"fp8\" (fp32, fp16, none or remainder)");
    CHECK(ap_megatron_parse("main_params=bf16", &m, err) == AP_EINPUT);
    CHECK(ap_megatron_parse("exp_avg=none", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "exp_avg: bad value \"none\" (fp32, fp16, bf16 or fp8)");
    CHECK(ap_megatron_parse("exp_avg_sq=int8", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "exp_avg_sq: bad value \"int8\" (fp32, fp16, bf16 or fp8)");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse("main_params=none,exp_avg=bf16,exp_avg_sq=bf16", &m, err) ==
          AP_OK);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",main_params=none,exp_avg=bf16,exp_avg_sq=bf16");
}

int main(void)
{
    RUN(names_and_widths_are_fused_adams_dtypes);
    RUN(bytes_per_parameter_for_every_dtype_combination);
    RUN(fp32_states_are_todays_model_states_bit_for_bit);
    RUN(the_step_streams_narrow_states_through_an_fp32_copy);
    RUN(stage_holds_the_states_at_their_widths);
    RUN(optimizer_step_time_is_the_closed_form);
    RUN(fp32_keys_price_byte_for_byte_as_before);
    RUN(narrow_states_save_memory_and_cost_step_time);
    RUN(flags_follow_megatron_cores_rules);
    return DONE();
}
