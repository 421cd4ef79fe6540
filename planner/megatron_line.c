/* megatron_line.c -- a Megatron-LM command line as the shell hands it to
 * argparse. Users paste what their script runs: comments, quoted array
 * entries, --flag=value, a torchrun prefix, or ModelZoo's YAML keys. The
 * text is rewritten in place into plain "--flag value" words, so that the
 * parser in megatron.c reads one form. */
#include <stdio.h>
#include <string.h>

#include "planner/megatron_flags.h"

/* Adds the flag at p (to the next blank) to the note of commented flags. */
static void note_commented(const char *p, char *note, size_t cap)
{
    size_t n = strlen(note), len = strcspn(p, " \t\n");
    len -= len > 2 && p[len - 1] == ':'; /* a YAML key */
    if (n + len + 3 < cap)
        snprintf(note + n, cap - n, "%s%.*s", n ? ", " : "", (int)len, p);
}

/* Blanks a shell comment from p, a word starting with '#', to the end of
 * its line, noting the flags in it; returns where the line ends. */
static char *blank_comment(char *p, char *note, size_t cap)
{
    int word = 1;
    for (; *p && *p != '\n'; p++) {
        if (word && p[0] == '-' && p[1] == '-')
            note_commented(p, note, cap);
        word = *p == ' ' || *p == '\t';
        *p = ' ';
    }
    return p;
}

/* A flag written as a YAML key, "--flag: value" (Megatron-MoE-ModelZoo's
 * MODEL_ARGS, which its runner turns into a command line): the colon goes,
 * a value of true is the switch alone and false leaves the flag out.
 * `word` is the flag, `end` one past it. */
static void yaml_flag(char *word, char *end)
{
    if (end - word < 4 || end[-1] != ':')
        return;
    end[-1] = ' ';
    char *v = end + strspn(end, " \t\n");
    size_t n = strcspn(v, " \t\n");
    if (n == 4 && !strncmp(v, "true", 4)) {
        memset(v, ' ', n);
    } else if (n == 5 && !strncmp(v, "false", 5)) {
        memset(v, ' ', n);
        memset(word, ' ', (size_t)(end - word));
    }
}

void ap_megatron_shell_words(char *buf, char *note, size_t cap)
{
    note[0] = 0;
    /* A script saved with Windows line ends ends each line in a carriage
     * return, which would cling to its last word. */
    for (char *q = buf; (q = strpbrk(q, "\"'\r"));)
        *q = ' ';
    for (char *p = buf; *p;) {
        if (*p == '#')
            p = blank_comment(p, note, cap);
        char *word = p;
        int flag = p[0] == '-' && p[1] == '-';
        if (flag)
            yaml_flag(word, word + strcspn(word, " \t\n"));
        while (*p && !strchr(" \t\n", *p)) {
            if (flag && *p == '=') {
                *p = ' ';
                flag = 0;
            }
            p++;
        }
        while (*p && strchr(" \t\n", *p))
            p++;
    }
}
