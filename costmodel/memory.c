/* memory.c -- reference memory formulas: ZeRO model states and Korthikanti
 * et al.'s activation bytes per transformer layer. */
#include "costmodel/costmodel.h"

/* Splits per-parameter counts of params, grads and optimizer state over dp
 * as the ZeRO stage says. */
static ap_model_states partition(double params, int dp, ap_zero zero,
                                 double p_unit, double g_unit, double o_unit)
{
    double x = dp > 1 ? dp : 1;
    ap_model_states s;
    s.params = params * p_unit / (zero >= AP_ZERO_3 ? x : 1);
    s.grads = params * g_unit / (zero >= AP_ZERO_2 ? x : 1);
    s.optimizer = params * o_unit / (zero >= AP_ZERO_1 ? x : 1);
    s.total = s.params + s.grads + s.optimizer;
    return s;
}

/* bf16 parameters and gradients (2 + 2 bytes), fp32 master weights, Adam m
 * and v (4 + 4 + 4 bytes): 16 bytes per parameter. */
ap_model_states ap_mem_model_states(double params, int dp, ap_zero zero)
{
    return partition(params, dp, zero, 2, 2, 12);
}

ap_model_states ap_mem_model_states_grad(double params, int dp, ap_zero zero,
                                         double grad_bytes)
{
    return partition(params, dp, zero, 2, grad_bytes, 12);
}

ap_model_states ap_mem_model_states_opt(double params, int dp, ap_zero zero,
                                        double grad_bytes, const ap_opt_dtypes *o)
{
    return partition(params, dp, zero, 2, grad_bytes, ap_opt_state_bytes(o));
}

ap_model_states ap_mem_model_state_elems(double params, int dp, ap_zero zero)
{
    return partition(params, dp, zero, 1, 1, 2);
}

double ap_mem_activation_ref(double s, double b, double h, double a, int t,
                             int sp, ap_recompute rc)
{
    double tp = t > 1 ? t : 1;
    double sbh = s * b * h;
    if (rc == AP_RECOMPUTE_FULL)
        return 2 * sbh / (sp ? tp : 1);
    double quadratic = rc == AP_RECOMPUTE_SELECTIVE ? 0 : 5 * a * s / (h * tp);
    if (sp)
        return sbh * (34 / tp + quadratic);
    return sbh * (10 + 24 / tp + quadratic);
}
