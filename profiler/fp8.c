/* fp8.c -- what the FP8 GEMMs need that can be settled without a GPU: which
 * GPUs have FP8 tensor cores, and the E4M3 bytes their operands hold. */
#include <math.h>

#include "profiler/profiler.h"

/* FP8 tensor cores arrived with Ada (8.9) and Hopper (9.0); every later
 * architecture keeps them. Ampere (8.0, 8.6, 8.7) has none. */
int ap_profile_has_fp8(int cc_major, int cc_minor)
{
    return cc_major > 8 || (cc_major == 8 && cc_minor >= 9);
}

#define E4M3_MAX 448.0f       /* 1.75 x 2^8: 0x7E; 0x7F is NaN */
#define E4M3_MIN_EXP (-6)     /* the smallest normal is 2^-6 */
#define E4M3_BIAS 7
#define E4M3_MANT 3

/* The magnitude is written as q x 2^(e - 3) with q an integer: 8..15 for a
 * normal (the leading one and three mantissa bits), 0..7 for a subnormal at
 * e = -6. Rounding q can carry into the next binade (q = 16), which is the
 * normal 8 x 2^(e - 2). */
unsigned char ap_profile_e4m3(float f)
{
    if (isnan(f))
        return 0;
    unsigned char sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= E4M3_MAX)
        return sign | 0x7E;
    if (a < ldexpf(1.0f, E4M3_MIN_EXP - E4M3_MANT))
        return sign;
    int e;
    frexpf(a, &e);
    e = e - 1 < E4M3_MIN_EXP ? E4M3_MIN_EXP : e - 1;
    long q = lrintf(ldexpf(a, E4M3_MANT - e));
    if (q == 16) {
        q = 8;
        e++;
    }
    if (q < 8)
        return sign | (unsigned char)q;
    return sign | (unsigned char)((e + E4M3_BIAS) << E4M3_MANT) |
           (unsigned char)(q - 8);
}
