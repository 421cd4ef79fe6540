/* batch.c -- how one GEMM sample is timed. A training step runs its GEMMs
 * back to back, each on operands it has not just read. Timing one launch
 * between two events with the GPU idle before it adds the launch's latency
 * and the queue's start to a short GEMM (measured on an H100, docs/
 * profiler.md: 59 us for a GEMM that takes 37 us back to back), and
 * repeating it on the same operands serves them from L2. So a sample is
 * `reps` launches back to back, cycling over `slots` operand sets placed
 * `stride` bytes apart in the profiler's buffers. */
#include <math.h>

#include "profiler/profiler.h"

#define ALIGN 256

ap_profile_batch ap_profile_gemm_batch(double single_s, size_t operand_bytes, size_t cap)
{
    ap_profile_batch b = {1, 1, 0};
    if (single_s > 0 && single_s < AP_PROFILE_BATCH_S) {
        double r = ceil(AP_PROFILE_BATCH_S / single_s);
        b.reps = r > AP_PROFILE_MAX_REPS ? AP_PROFILE_MAX_REPS : (int)r;
    }
    b.stride = (operand_bytes + ALIGN - 1) / ALIGN * ALIGN;
    if (b.stride > 0 && cap / b.stride > 1) {
        size_t fit = cap / b.stride;
        b.slots = fit < (size_t)b.reps ? (int)fit : b.reps;
    }
    return b;
}
