/* optim_dtype.c -- the precision-aware optimizer's state dtypes: their
 * bytes a parameter, held and streamed by the step. */
#include <string.h>

#include "costmodel/costmodel.h"

static const char *const names[] = {"fp32", "fp16", "bf16", "fp8", "none", "remainder"};
#define NAMES ((int)(sizeof names / sizeof names[0]))

const char *ap_opt_dtype_name(ap_opt_dtype t)
{
    return (int)t >= 0 && (int)t < NAMES ? names[t] : "?";
}

int ap_opt_dtype_parse(const char *name, ap_opt_dtype *out)
{
    for (int i = 0; i < NAMES; i++)
        if (!strcmp(name, names[i])) {
            *out = (ap_opt_dtype)i;
            return 0;
        }
    return -1;
}

double ap_opt_dtype_bytes(ap_opt_dtype t)
{
    /* FP16, BF16 and the remainders' int16 are 2 bytes. */
    return t == AP_OPT_NONE ? 0 : t == AP_OPT_FP8 ? 1 : t == AP_OPT_FP32 ? 4 : 2;
}

int ap_opt_dtypes_fp32(const ap_opt_dtypes *o)
{
    return !o || (o->main_params == AP_OPT_FP32 && o->exp_avg == AP_OPT_FP32 &&
                  o->exp_avg_sq == AP_OPT_FP32);
}

double ap_opt_state_bytes(const ap_opt_dtypes *o)
{
    if (!o)
        return 12;
    return ap_opt_dtype_bytes(o->main_params) + ap_opt_dtype_bytes(o->exp_avg) +
           ap_opt_dtype_bytes(o->exp_avg_sq);
}

/* One state's bytes through FusedAdam's step, per element. fp32: the kernel
 * reads and writes it (8). Otherwise get_unscaled_state's .float() reads
 * the state and writes an fp32 copy (w + 4), the kernel reads and writes
 * the copy (8), and _apply_scale casts it back: bf16 by .bfloat16() and
 * copy_ (4 + 2, 2 + 2); fp16 multiplies the copy by its scale on the way
 * in (4 + 4) and by the inverse on the way out (4 + 4), after an amax pass
 * (4), then copies (4 + 2); fp8 quantizes after the amax pass (4, 4 + 1).
 * Remainders are int16 state the remainder kernel reads and writes in
 * place (2 + 2); the bf16 weight it also reads is the model's own, counted
 * with the parameters. */
static double state_step_bytes(ap_opt_dtype t)
{
    switch (t) {
    case AP_OPT_BF16:
        return (2 + 4) + 8 + (4 + 2) + (2 + 2);
    case AP_OPT_FP16:
        return (2 + 4) + (4 + 4) + 8 + 4 + (4 + 4) + (4 + 2);
    case AP_OPT_FP8:
        return (1 + 4) + 8 + 4 + (4 + 1);
    case AP_OPT_NONE:
        return 0;
    case AP_OPT_REMAINDER:
        return 2 + 2;
    default:
        return 8;
    }
}

double ap_opt_step_bytes(const ap_opt_dtypes *o)
{
    if (!o)
        return 24;
    return state_step_bytes(o->main_params) + state_step_bytes(o->exp_avg) +
           state_step_bytes(o->exp_avg_sq);
}
