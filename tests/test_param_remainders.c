/* Main-weight remainders (main_params=remainder): Transformer Engine's
 * FusedAdam under store_param_remainders keeps each fp32 main weight of a
 * bf16 weight as the 16 low bits the bf16 weight lacks, an int16 beside
 * it, and rebuilds the fp32 value in the kernel. Megatron-Core passes the
 * option, True by default, under --use-precision-aware-optimizer with fp32
 * main weights; --no-store-param-remainders keeps them whole. Main weights
 * take 2 bytes instead of 4, sharded as the other states. */
#include "model.h"

/* gpt-1.3b at 512 tokens, tp=1 and pp=1 on 16 H100s: the one stage holds
 * every parameter, its optimizer states sharded 16 ways under zero=1. */
#define MODEL "examples/gpt-1.3b.json"
#define SPEC "tp=1,pp=1,mbs=1,gbs=32,zero=1"
#define DP 16
#define AWARE "--bf16 --use-distributed-optimizer --use-precision-aware-optimizer"

static ap_opt_dtypes remainders(void)
{
    ap_opt_dtypes o = {AP_OPT_REMAINDER, AP_OPT_FP32, AP_OPT_FP32};
    return o;
}

static void remainder_is_a_two_byte_main_weight_dtype(void)
{
    ap_opt_dtype t = AP_OPT_FP32;
    CHECK(ap_opt_dtype_parse("remainder", &t) == 0 && t == AP_OPT_REMAINDER);
    CHECK(!strcmp(ap_opt_dtype_name(AP_OPT_REMAINDER), "remainder"));
    CHECK(ap_opt_dtype_bytes(AP_OPT_REMAINDER) == 2);
    ap_opt_dtypes o = remainders();
    CHECK(!ap_opt_dtypes_fp32(&o));
    CHECK(ap_opt_state_bytes(&o) == 2 + 4 + 4);
    /* The int16 is read and written in place (2 + 2), the fp32 moments as
     * always (8 each): nothing beyond reading and writing the states. */
    CHECK(ap_opt_step_bytes(&o) == 4 + 8 + 8);
    CHECK(ap_opt_step_bytes(&o) == 2 * ap_opt_state_bytes(&o));
}

/* Bytes a parameter under the distributed optimizer: bf16 weight 2 and
 * gradient 2, then main weight + m + v over d: 4 + 12/d with whole fp32
 * main weights, 4 + 10/d with remainders; fp32 gradients add 2. At d = 8,
 * 5.5 against 5.25. */
static void zero1_bytes_per_parameter_with_and_without_remainders(void)
{
    ap_opt_dtypes o = remainders();
    for (int d = 1; d <= 256; d *= 2) {
        ap_model_states whole = ap_mem_model_states_opt(1, d, AP_ZERO_1, 2, NULL);
        ap_model_states rem = ap_mem_model_states_opt(1, d, AP_ZERO_1, 2, &o);
        CHECK_NEAR(whole.total, 4 + 12.0 / d, 1e-15);
        CHECK_NEAR(rem.total, 4 + 10.0 / d, 1e-15);
        CHECK_NEAR(whole.total - rem.total, 2.0 / d, 1e-12);
        CHECK_NEAR(ap_mem_model_states_opt(1, d, AP_ZERO_1, 4, &o).total, 6 + 10.0 / d,
                   1e-15);
    }
    CHECK(ap_mem_model_states_opt(1, 8, AP_ZERO_1, 2, NULL).total == 5.5);
    CHECK(ap_mem_model_states_opt(1, 8, AP_ZERO_1, 2, &o).total == 5.25);
}

/* The stage's model states are (4 + 10/16) bytes a parameter, 2/16 less
 * than with whole main weights, and the step streams them once each way. */
static void stage_holds_two_byte_main_weights(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_cluster c;
    ap_plan whole, rem;
    memset(&whole, 0, sizeof whole);
    memset(&c, 0, sizeof c);
    if (g && !ap_test_megatron_plan_ok(g, DP, SPEC, NULL, &whole) &&
        !ap_test_megatron_plan_ok(g, DP, SPEC ",main_params=remainder", &c, &rem)) {
        double P = g->total_params;
        CHECK(rem.run.opt.main_params == AP_OPT_REMAINDER);
        CHECK_NEAR(rem.stages[0].param_bytes, (4 + 10.0 / DP) * P, 1e-12);
        CHECK_NEAR(rem.stages[0].opt_bytes, 10.0 / DP * P, 1e-12);
        CHECK_NEAR(whole.max_mem_bytes - rem.max_mem_bytes, 2.0 / DP * P, 1e-9);
        double states = (4 + 10.0 / DP) * P;
        CHECK_NEAR(rem.t_optimizer, ap_cost_memop(&c, states, 2 * states), 1e-12);
        CHECK(rem.t_optimizer < whole.t_optimizer);
        /* Nothing but the states changes: the same step before the optimizer. */
        CHECK(rem.t_grad_sync == whole.t_grad_sync && rem.t_compute == whole.t_compute);
        ap_plan_free(&rem);
    } else {
        CHECK(0);
    }
    ap_plan_free(&whole);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static ap_opt_dtype main_of(const char *args)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    if (ap_megatron_parse_args(args, &m, err)) {
        fprintf(stderr, "%s: %s\n", args, err);
        return (ap_opt_dtype)-1;
    }
    return m.run.opt.main_params;
}

/* Megatron-Core keeps remainders under the precision-aware optimizer when
 * the main weights are fp32 and the weights bf16 (--bf16, no FP8 primary
 * weights), unless --no-store-param-remainders; the last of the pair
 * counts, as argparse's store_true and store_false on one dest do. */
static void megatron_args_follow_megatron_cores_default(void)
{
    CHECK(main_of(AWARE) == AP_OPT_REMAINDER);
    CHECK(main_of(AWARE " --main-params-dtype fp32") == AP_OPT_REMAINDER);
    CHECK(main_of(AWARE " --store-param-remainders") == AP_OPT_REMAINDER);
    CHECK(main_of(AWARE " --no-store-param-remainders") == AP_OPT_FP32);
    CHECK(main_of(AWARE " --no-store-param-remainders --store-param-remainders") ==
          AP_OPT_REMAINDER);
    CHECK(main_of(AWARE " --store-param-remainders --no-store-param-remainders") ==
          AP_OPT_FP32);
    /* fp16 main weights are FusedAdam's own dtype, not remainders. */
    CHECK(main_of(AWARE " --main-params-dtype fp16") == AP_OPT_FP16);
    /* No precision-aware optimizer: Megatron-Core keeps its own fp32 main
     * weights and hands FusedAdam no store_param_remainders. */
    CHECK(main_of("--bf16 --use-distributed-optimizer") == AP_OPT_FP32);
    CHECK(main_of("--bf16 --use-distributed-optimizer --store-param-remainders") ==
          AP_OPT_FP32);
    /* Weights that are not bf16: fp16, fp32 (neither flag), FP8. */
    CHECK(main_of("--fp16 --use-distributed-optimizer --use-precision-aware-optimizer") ==
          AP_OPT_FP32);
    CHECK(main_of("--use-distributed-optimizer --use-precision-aware-optimizer") ==
          AP_OPT_FP32);
    CHECK(main_of(AWARE " --fp8-format hybrid --fp8-param-gather") == AP_OPT_FP32);
    CHECK(main_of(AWARE " --fp8-format hybrid") == AP_OPT_REMAINDER);
}

/* The command line prices exactly as the spec that states it. */
static void flags_price_as_the_spec(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    const char *layout = " --tensor-model-parallel-size 1 --micro-batch-size 1 "
                         "--global-batch-size 32";
    char args[512];
    ap_plan a, b;
    snprintf(args, sizeof args, "%s%s --grad-reduce-in-bf16", AWARE, layout);
    if (g && !ap_test_megatron_plan_ok(g, DP, args, NULL, &a) &&
        !ap_test_megatron_plan_ok(g, DP, SPEC ",overlap_grad=0,main_params=remainder", NULL, &b)) {
        CHECK(a.run.opt.main_params == AP_OPT_REMAINDER);
        CHECK(a.max_mem_bytes == b.max_mem_bytes && a.step_time == b.step_time);
        ap_plan_free(&b);
    } else {
        CHECK(0);
    }
    ap_plan_free(&a);
    ap_graph_free(g);
}

static void refusals_name_the_key(void)
{
    ap_graph *g = ap_test_model(MODEL, 512);
    ap_plan p;
    char err[AP_ERR_LEN];
    /* Remainders are the precision-aware optimizer's, the distributed one's. */
    CHECK(ap_test_megatron_plan(g, DP, "tp=1,pp=1,mbs=1,gbs=32,zero=0,main_params=remainder",
                                NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "optimizer states in remainder, fp32 and fp32 need "
                       "--use-precision-aware-optimizer");
    ap_plan_free(&p);
    /* FP8 primary weights have no bf16 bits to complete. */
    CHECK(ap_test_megatron_plan(g, DP, SPEC ",fp8=1,fp8_param_gather=1,main_params=remainder",
                                NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "main_params=remainder: Transformer Engine's FusedAdam keeps "
                       "remainders only of bf16 weights");
    ap_plan_free(&p);
    ap_graph_free(g);
    ap_megatron m;
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse("exp_avg=remainder", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "exp_avg: bad value \"remainder\" (fp32, fp16, bf16 or fp8)");
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args(AWARE " --main-params-dtype remainder", &m, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "--main-params-dtype");
    char buf[512];
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse("main_params=remainder", &m, err) == AP_OK);
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",main_params=remainder");
}

int main(void)
{
    RUN(remainder_is_a_two_byte_main_weight_dtype);
    RUN(zero1_bytes_per_parameter_with_and_without_remainders);
    RUN(stage_holds_two_byte_main_weights);
    RUN(megatron_args_follow_megatron_cores_default);
    RUN(flags_price_as_the_spec);
    RUN(refusals_name_the_key);
    return DONE();
}
