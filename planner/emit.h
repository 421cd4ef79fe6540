/* emit.h -- private to planner/: the launchers' writers behind ap_export().
 * Each returns a malloc'd text the caller frees, or NULL when out of
 * memory. */
#ifndef AP_PLANNER_EMIT_H
#define AP_PLANNER_EMIT_H

#include "planner/planner.h"

char *ap_emit_megatron(const ap_plan_desc *p, const ap_degrees *d, const ap_model_shape *s);
char *ap_emit_torchtitan(const ap_plan_desc *p, const ap_degrees *d, const ap_model_shape *s);
char *ap_emit_deepspeed(const ap_plan_desc *p, const ap_degrees *d, const ap_model_shape *s);

/* Whether a plan's model chunks (chunk_layers) are where the split flags in
 * d put them: even chunks, each stage's layers cut evenly over its chunks
 * under the decoder first/last flags, or the split counting the embedding
 * and the loss as layers. Then the export states those flags, as for a
 * plan without chunk_layers; otherwise only Megatron-LM's layout string
 * states the chunks. 1 for a plan without chunk_layers. */
int ap_emit_flags_state_chunks(const ap_plan_desc *p, const ap_degrees *d);

/* torchtitan's FSDP shard degree for d (data_parallel_shard_degree): all
 * the data-parallel ranks under any ZeRO stage, which FSDP stands in for,
 * and 1 without ZeRO, where DDP replicates. */
int ap_emit_titan_shard(const ap_degrees *d);

/* How torchtitan's pipeline_llm states a split without interleaving: n
 * layers a stage, the first stage first_less fewer and the last last_less
 * fewer (pipeline_parallel_layers_per_stage and its first and last
 * stage_less_layers, which count the embedding and the output layer as
 * that many layers). AP_EINPUT where the middle stages differ or an end
 * stage holds more than they do: a split those flags cannot state. */
int ap_emit_titan_split(const ap_plan_desc *p, int *n, int *first_less, int *last_less);

/* The names plan.json uses. */
const char *ap_emit_recompute_name(ap_recompute r);
const char *ap_emit_schedule_name(ap_schedule s);

#endif
