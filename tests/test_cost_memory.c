/* test_cost_memory.c -- ZeRO model states (seed 001 §3) and Korthikanti
 * et al.'s activation rows (seed 001 §7.5). */
#include "costmodel/costmodel.h"
#include "test.h"

/* Seed 001 §3.1, in elements: DDP 4P, ZeRO-1 2P + 2P/X, ZeRO-2 P + 3P/X,
 * ZeRO-3 4P/X. */
static void zero_element_table_matches_the_seed(void)
{
    double P = 1e9, X = 8;
    CHECK_NEAR(ap_mem_model_state_elems(P, 8, AP_ZERO_NONE).total, 4 * P, 1e-12);
    CHECK_NEAR(ap_mem_model_state_elems(P, 8, AP_ZERO_1).total, 2 * P + 2 * P / X, 1e-12);
    CHECK_NEAR(ap_mem_model_state_elems(P, 8, AP_ZERO_2).total, P + 3 * P / X, 1e-12);
    CHECK_NEAR(ap_mem_model_state_elems(P, 8, AP_ZERO_3).total, 4 * P / X, 1e-12);
    CHECK_NEAR(ap_mem_model_state_elems(P, 8, AP_ZERO_2).grads, P / X, 1e-12);
}

/* In bytes with bf16 params and grads and fp32 master, m, v: 16P
 * unsharded; ZeRO-1 shards the 12P of optimizer state, ZeRO-2 also the 2P
 * of grads, ZeRO-3 also the 2P of params. */
static void zero_byte_table_is_16_bytes_per_param(void)
{
    double P = 7e9;
    ap_model_states s = ap_mem_model_states(P, 64, AP_ZERO_NONE);
    CHECK_NEAR(s.total, 16 * P, 1e-12);
    CHECK_NEAR(s.optimizer, 12 * P, 1e-12);
    CHECK_NEAR(ap_mem_model_states(P, 64, AP_ZERO_1).total, 4 * P + 12 * P / 64, 1e-12);
    CHECK_NEAR(ap_mem_model_states(P, 64, AP_ZERO_2).total, 2 * P + 14 * P / 64, 1e-12);
    CHECK_NEAR(ap_mem_model_states(P, 64, AP_ZERO_3).total, 16 * P / 64, 1e-12);
    /* No data parallelism: nothing to shard over. */
    CHECK_NEAR(ap_mem_model_states(P, 1, AP_ZERO_3).total, 16 * P, 1e-12);
}

/* GPT-3 175B in Korthikanti et al.: s = 2048, h = 12288, a = 96, b = 1,
 * t = 8. */
static void korthikanti_rows_for_gpt3(void)
{
    double s = 2048, b = 1, h = 12288, a = 96, t = 8, sbh = s * b * h;
    double q = 5 * a * s / h; /* 80 */
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 1, 0, AP_RECOMPUTE_NONE), sbh * (34 + q), 1e-12);
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 8, 0, AP_RECOMPUTE_NONE),
               sbh * (10 + 24 / t + q / t), 1e-12);
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 8, 1, AP_RECOMPUTE_NONE), sbh * (34 / t + q / t), 1e-12);
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 8, 0, AP_RECOMPUTE_SELECTIVE), sbh * (10 + 24 / t), 1e-12);
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 8, 1, AP_RECOMPUTE_SELECTIVE), sbh * 34 / t, 1e-12);
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 8, 1, AP_RECOMPUTE_FULL), 2 * sbh / t, 1e-12);
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 8, 0, AP_RECOMPUTE_FULL), 2 * sbh, 1e-12);
    /* The 34 + 80 = 114 sbh row is 5.74 GB per layer. */
    CHECK_NEAR(ap_mem_activation_ref(s, b, h, a, 1, 0, AP_RECOMPUTE_NONE), 114 * 2048.0 * 12288, 1e-12);
}

int main(void)
{
    RUN(zero_element_table_matches_the_seed);
    RUN(zero_byte_table_is_16_bytes_per_param);
    RUN(korthikanti_rows_for_gpt3);
    return DONE();
}
