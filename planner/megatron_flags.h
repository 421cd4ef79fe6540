/* megatron_flags.h -- private to planner/: whether a name is one of Megatron-LM's command-line
 * flags (planner/megatron_flags.c says which versions), and the nearest
 * that is; and a pasted command line made plain words, and what its words
 * that are not flags are (megatron_line.c). */
#ifndef AP_PLANNER_MEGATRON_FLAGS_H
#define AP_PLANNER_MEGATRON_FLAGS_H

#include <stddef.h>

/* Longer names are never near a flag. */
#define AP_FLAG_NAME_LEN 64

/* 1 when `flag` ("--tensor-model-parallel-size") is one, else 0. */
int ap_megatron_flag_known(const char *flag);
/* 1 when `flag` is a switch, an option that takes no value, in every
 * Megatron-LM version that has it (--use-mcore-models, --no-load-optim),
 * else 0: argparse refuses a word after it as an unrecognized argument. */
int ap_megatron_flag_switch(const char *flag);
/* The flag within two edits of `flag`, the closest (the first of those
 * bytewise), or NULL; a static string. */
const char *ap_megatron_flag_nearest(const char *flag);

/* Rewrites a pasted command line in place as the shell would hand it to
 * argparse (megatron_line.c): quotes dropped (a script's arrays quote a
 * flag with its value and expand unquoted, so the shell splits them; no
 * value autopar reads has a blank in it), a word starting with '#'
 * commenting out the rest of its line, a backslash alone (a line
 * continuation) dropped, --flag=value and a YAML key's
 * "--flag: value" (true: the switch alone; false: left out) made
 * "--flag value". The flags comments held go to `note` (cap bytes, ", "
 * between them; "" for none). */
void ap_megatron_shell_words(char *buf, char *note, size_t cap);

/* What a word of the line that is not a Megatron-LM flag (no "--") is to
 * the shell around the flags. */
typedef enum {
    AP_WORD_OTHER,  /* none of the below */
    AP_WORD_LAUNCH, /* the launcher (torchrun, python, deepspeed, srun, mpirun, env,
                       export), the training script (*.py), a shell assignment
                       (NAME=value), a bracket or separator of the shell */
    AP_WORD_LEADS,  /* a one-dash option (python's -m), a pipe, cd, a redirection
                       whose file follows: the words after it are its own */
} ap_word_kind;
ap_word_kind ap_megatron_word_kind(const char *w);
/* 1 when w launches the training script (torchrun, python, srun, ...), 2
 * when it is the script (*.py), else 0. */
int ap_megatron_launch_word(const char *w);
/* Where w is a shell assignment whose value is a Megatron-LM flag
 * (EXTRA=--sequence-parallel, unquoted), that value; else NULL. */
const char *ap_megatron_assigned_flag(const char *w);

/* Where w starts with a run of dashes holding one that is not ASCII '-'
 * (an en or em dash a word processor put for "--"), that dash's name
 * ("an en dash (U+2013)"), with *rest past the run; else NULL. */
const char *ap_megatron_typographic_dash(const char *w, const char **rest);

#endif
