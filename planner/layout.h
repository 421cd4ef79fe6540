/* layout.h -- private to planner/: Megatron-LM's pipeline layout string
 * (--pipeline-model-parallel-layout) and the model chunks of a stage. */
#ifndef AP_PLANNER_LAYOUT_H
#define AP_PLANNER_LAYOUT_H

#include <stddef.h>

#include "planner/planner.h"

/* The most virtual stages a layout may unroll to (its longest string is
 * AP_LAYOUT_LEN, planner.h). */
#define AP_LAYOUT_MAX_STAGES 65536

/* A parsed layout: nstages virtual stages in Megatron-LM's order (virtual
 * stage c*pp + r is model chunk c of pipeline rank r), each with its
 * transformer layers ('t') in layers[], and where the embedding ('E'), the
 * loss ('L') and any multi-token-prediction layers ('m') are. The caller
 * frees layers with ap_layout_free. */
typedef struct {
    int nstages;
    int *layers;
    int total;          /* sum of layers[] */
    int embedding_at;   /* virtual stage of 'E'; -1 if none */
    int loss_at;        /* virtual stage of 'L'; -1 if none */
    int embeddings, losses, mtp; /* how many of each the string holds */
    int embedding_first, loss_last; /* 'E' is the string's first layer
                                       symbol, 'L' its last */
    int mtp_last;       /* the 'm' in the last virtual stage */
    int t_after_m;      /* a 't' comes after an 'm' */
} ap_pipe_layout;

/* Parses s as Megatron-Core's PipelineParallelLayerLayout.parse_str_to_list
 * does: commas dropped, "(...)*n" unrolled (its content without
 * parentheses), then "x*n" for any one character, then '|' between
 * virtual stages. AP_EINPUT naming `who` and the fault on a character it
 * does not know, unbalanced parentheses, a count of 0 or a string that
 * unrolls past AP_LAYOUT_MAX_STAGES virtual stages. */
int ap_layout_parse(const char *s, const char *who, ap_pipe_layout *out, char *err);
void ap_layout_free(ap_pipe_layout *l);

/* Writes the layout of n virtual stages with layers[i] transformer layers
 * each, the embedding on the first and `mtp` MTP layers and the loss on
 * the last, runs of equal stages folded as "(t*4|)*7" where that is
 * shorter: what Megatron-LM reads back. Returns the length written, or -1
 * when it does not fit in len. */
int ap_layout_format(const int *layers, int n, int mtp, char *buf, size_t len);

/* Where layer k (0-based, of st->nlayers) of stage s of plan p sits: its
 * model chunk, its position in that chunk, and its layer in the model. A
 * plan with chunk_layers gives each chunk its own count; otherwise the
 * stage's span is cut into vchunks pieces of ceil(nlayers / vchunks). */
void ap_stage_chunk_of(const ap_plan *p, int s, int k, int *chunk, int *pos, int *layer);

/* For an interleaved plan the search has priced (its chunks even, or
 * chunk_layers): moves layers, one at a time, out of the first and the
 * last virtual stage (which carry the embedding and the head) into the
 * chunk where that shortens the step most, while one does and the plan
 * fits in `limit` bytes per GPU, up to a bound. The moved plan keeps its
 * chunks as chunk_layers (exported as Megatron-LM's layout); an unmoved
 * one stays as it was, priced. Models of one layer class only
 * (planner/balance.c). */
int ap_plan_balance_chunks(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                           double limit, char *err);
/* Gives p the chunks `chunks` (nstages * vchunks, owned by p from now on;
 * may be p's own) and each stage the layers and first layer they make; p
 * is to be priced again. */
void ap_plan_set_chunks(ap_plan *p, int *chunks);
/* Megatron-LM's transformer layers per virtual stage without a layout,
 * pp * v of them into out: each stage's stage_layers[s] cut evenly into
 * its v chunks, or where e or l is 1 (--account-for-embedding/loss-in-
 * pipeline-split) the same slots in every chunk, the embedding's taken
 * from the very first and the loss's from the very last. */
void ap_layout_megatron_split(const int *stage_layers, int pp, int v, int e, int l, int *out);
/* Each stage's first layer and layer count, 2 * nstages ints the caller
 * frees; NULL when out of memory. */
int *ap_plan_spans(const ap_plan *p);
/* p's stages back to those spans, its chunk_layers dropped. */
void ap_plan_restore_spans(ap_plan *p, const int *span);
/* Gives each stage of p vchunks chunks of its own span's layers, the
 * first ones a layer longer where they do not divide (ap_plan_set_chunks):
 * interleaving for stages of uneven layers. -1 when out of memory. */
int ap_plan_split_chunks(ap_plan *p);

#endif
