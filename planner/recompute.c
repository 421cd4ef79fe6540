/* recompute.c -- which layers of a stage full recomputation redoes, and
 * which inputs it keeps, under Megatron-LM's two methods.
 *
 * Megatron-Core checkpoints inside each TransformerBlock, which is one
 * model chunk: a stage, or each of its virtual stages under interleaving.
 * A plan holds a stage's layers as one span, so its chunks are taken as
 * that span cut into vchunks consecutive pieces, or as the plan's
 * chunk_layers say under a pipeline layout (ap_stage_chunk_of); for a
 * model whose layers are all alike this is exact, and with several layer
 * classes each layer is decided by its position within its piece. */
#include <string.h>

#include "planner/layout.h"
#include "planner/planner.h"
#include "planner/recompute.h"

const char *ap_recompute_method_name(ap_recompute_method m)
{
    return m == AP_RECOMPUTE_BLOCK ? "block" : "uniform";
}

int ap_recompute_method_parse(const char *s, ap_recompute_method *out)
{
    if (!strcmp(s, "uniform"))
        *out = AP_RECOMPUTE_UNIFORM;
    else if (!strcmp(s, "block"))
        *out = AP_RECOMPUTE_BLOCK;
    else
        return AP_EINPUT;
    return AP_OK;
}

int ap_recompute_group(ap_recompute_method m, int layers)
{
    if (m == AP_RECOMPUTE_BLOCK)
        return layers > 0 ? layers : 0;
    return layers > 1 ? layers : 1;
}

void ap_recompute_layer(const ap_plan *p, const ap_stage *st, int k, ap_rc_layer *out)
{
    int n = ap_recompute_group(p->recompute_method, p->recompute_layers);
    int chunk, pos, layer;
    ap_stage_chunk_of(p, (int)(st - p->stages), k, &chunk, &pos, &layer);
    if (p->recompute_method == AP_RECOMPUTE_BLOCK) {
        out->recomputed = out->keeps_input = pos < n;
        out->group = k; /* each recomputed alone */
        return;
    }
    out->recomputed = 1;
    out->keeps_input = pos % n == 0;
    out->group = k - pos + pos / n * n; /* the group's first layer */
}
