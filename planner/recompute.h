/* recompute.h -- private to planner/: the layers full recomputation redoes
 * under a plan's recompute method (ap_recompute_method). */
#ifndef AP_PLANNER_RECOMPUTE_H
#define AP_PLANNER_RECOMPUTE_H

#include "planner/planner.h"

/* N of a recompute method: under uniform at least 1 (a zeroed plan's 0 is
 * 1), under block the layers recomputed at the head of each chunk. */
int ap_recompute_group(ap_recompute_method m, int layers);

/* What full recomputation does with one layer of a stage. */
typedef struct {
    int recomputed;  /* its forward is redone in backward */
    int keeps_input; /* its input is what is kept of it: the first of a
                        group; else all its activations when it is not
                        recomputed, nothing when it is */
    int group;       /* layers recomputed together share it (the stage's
                        offset of the group's first layer) */
} ap_rc_layer;

/* Layer k (0-based, of st->nlayers) of stage st under p's method. */
void ap_recompute_layer(const ap_plan *p, const ap_stage *st, int k, ap_rc_layer *out);

#endif
