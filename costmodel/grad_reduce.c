/* grad_reduce.c -- how much of the once-per-step gradient reduction the
 * last backward passes of a pipeline stage hide, with Megatron-LM's
 * buckets: the first model chunk's, and one bucket a chunk after it. */
#include <math.h>

#include "costmodel/costmodel.h"

double ap_pipe_grad_reduce_exposed(double reduce, double bwd, int vchunks, int group)
{
    if (vchunks <= 1)
        return fmax(0, reduce - bwd);
    double b = bwd / vchunks, r = reduce / vchunks;
    double g = group > 1 ? group : 1;
    double end = -INFINITY;
    /* Chunk c's single bucket waits for its last backward and for the
     * reductions of the chunks before it on the data-parallel stream. */
    for (int c = vchunks - 1; c >= 1; c--)
        end = fmax(-c * g * b, end) + r;
    return fmax(0, fmax(-b, end) + r);
}
