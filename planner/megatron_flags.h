/* megatron_flags.h -- private to planner/: whether a name is one of Megatron-LM's command-line
 * flags (planner/megatron_flags.c says which versions), and the nearest
 * that is. */
#ifndef AP_PLANNER_MEGATRON_FLAGS_H
#define AP_PLANNER_MEGATRON_FLAGS_H

/* Longer names are never near a flag. */
#define AP_FLAG_NAME_LEN 64

/* 1 when `flag` ("--tensor-model-parallel-size") is one, else 0. */
int ap_megatron_flag_known(const char *flag);
/* The flag within two edits of `flag`, the closest (the first of those
 * bytewise), or NULL; a static string. */
const char *ap_megatron_flag_nearest(const char *flag);

#endif
