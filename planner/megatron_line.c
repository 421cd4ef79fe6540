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
 * a value of true is the switch alone and false leaves the flag out, in
 * each spelling YAML reads as a boolean (true, True, TRUE).
 * `word` is the flag, `end` one past it. */
static void yaml_flag(char *word, char *end)
{
    if (end - word < 4 || end[-1] != ':')
        return;
    end[-1] = ' ';
    char *v = end + strspn(end, " \t\n");
    size_t n = strcspn(v, " \t\n");
    if (n == 4 && (!strncmp(v, "true", 4) || !strncmp(v, "True", 4) ||
                   !strncmp(v, "TRUE", 4))) {
        memset(v, ' ', n);
    } else if (n == 5 && (!strncmp(v, "false", 5) || !strncmp(v, "False", 5) ||
                          !strncmp(v, "FALSE", 5))) {
        memset(v, ' ', n);
        memset(word, ' ', (size_t)(end - word));
    }
}

/* A script's array written on one line, ARGS=(--flag value --switch):
 * the brackets cling to its first and last flags, which would be read as
 * an assignment and an unknown flag. They go, as the shell takes them.
 * `word` is the word, `end` one past it. */
static void array_brackets(char *word, char *end)
{
    size_t n = strspn(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                            "0123456789_");
    char *open = word + n + (word[n] == '+');
    if (n && open[0] == '=' && open[1] == '(')
        open[1] = ' ';
    else if (end - word > 3 && word[0] == '-' && word[1] == '-' && end[-1] == ')' &&
             !memchr(word, '(', (size_t)(end - word)))
        end[-1] = ' ';
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
        /* A backslash alone is a line continuation, whether the paste kept
         * its newline or joined the lines. */
        if (p[0] == '\\' && (!p[1] || strchr(" \t\n", p[1])))
            *p = ' ';
        int flag = p[0] == '-' && p[1] == '-';
        if (flag)
            yaml_flag(word, word + strcspn(word, " \t\n"));
        array_brackets(word, word + strcspn(word, " \t\n"));
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

/* The dashes that editors, word processors and chat apps put where "--"
 * was typed, in UTF-8. */
static const struct {
    const char *bytes, *name;
} dashes[] = {
    {"\xe2\x80\x90", "a hyphen (U+2010)"},
    {"\xe2\x80\x91", "a non-breaking hyphen (U+2011)"},
    {"\xe2\x80\x92", "a figure dash (U+2012)"},
    {"\xe2\x80\x93", "an en dash (U+2013)"},
    {"\xe2\x80\x94", "an em dash (U+2014)"},
    {"\xe2\x80\x95", "a horizontal bar (U+2015)"},
    {"\xe2\x88\x92", "a minus sign (U+2212)"},
};

/* The dash at p, or -1 where p holds none of them. */
static int dash_at(const char *p)
{
    for (size_t i = 0; i < sizeof dashes / sizeof dashes[0]; i++)
        if (!strncmp(p, dashes[i].bytes, 3))
            return (int)i;
    return -1;
}

const char *ap_megatron_typographic_dash(const char *w, const char **rest)
{
    const char *name = NULL;
    int d;
    for (;; w += d < 0 ? 1 : 3) {
        d = dash_at(w);
        if (d >= 0 && !name)
            name = dashes[d].name;
        if (d < 0 && *w != '-')
            break;
    }
    *rest = w;
    return name;
}

/* Whether w is NAME=value or NAME+=value, NAME a shell variable's name:
 * an assignment, to the shell. */
static int assignment(const char *w)
{
    size_t n = strspn(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                         "0123456789_");
    if (!n || (w[0] >= '0' && w[0] <= '9'))
        return 0;
    return w[n] == '=' || (w[n] == '+' && w[n + 1] == '=');
}

int ap_megatron_launch_word(const char *w)
{
    static const char *const names[] = {"torchrun", "deepspeed", "srun", "mpirun",
                                        "env", "export", "exec", "nohup"};
    const char *base = strrchr(w, '/');
    size_t n = strlen(w);
    base = base ? base + 1 : w;
    if (n > 3 && !strcmp(w + n - 3, ".py"))
        return 2;
    if (!strncmp(base, "python", 6) && !base[6 + strspn(base + 6, "0123456789.")])
        return 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(base, names[i]))
            return 1;
    return 0;
}

/* Only a flag Megatron-LM has counts: other tools take flags in variables
 * of their own (XLA_FLAGS=--xla_...), which are the environment's. */
const char *ap_megatron_assigned_flag(const char *w)
{
    char flag[AP_FLAG_NAME_LEN + 1];
    if (!assignment(w))
        return NULL;
    const char *v = strchr(w, '=') + 1;
    size_t n = strcspn(v, "=");
    if (strncmp(v, "--", 2) || n > AP_FLAG_NAME_LEN)
        return NULL;
    memcpy(flag, v, n);
    flag[n] = 0;
    return ap_megatron_flag_known(flag) ? v : NULL;
}

/* A redirection ("2>&1", ">", ">>log"): 1 when its file is in the word or
 * needs none, 2 when the next word is its file. */
static int redirection(const char *w)
{
    w += strspn(w, "0123456789");
    if (*w == '&' && w[1] == '>')
        w++;
    if (*w != '>' && *w != '<')
        return 0;
    w += 1 + (w[1] == w[0]);
    return *w ? 1 : 2;
}

ap_word_kind ap_megatron_word_kind(const char *w)
{
    static const char *const syntax[] = {"(", ")", "{", "}", ";", "&", "&&", "||"};
    for (size_t i = 0; i < sizeof syntax / sizeof syntax[0]; i++)
        if (!strcmp(w, syntax[i]))
            return AP_WORD_LAUNCH;
    if (!strcmp(w, "|") || !strcmp(w, "|&") || !strcmp(w, "cd") || redirection(w) == 2)
        return AP_WORD_LEADS;
    if (redirection(w) || assignment(w) || ap_megatron_launch_word(w))
        return AP_WORD_LAUNCH;
    /* A one-dash option that is not a number: python's -m, -u and the
     * like; what follows may be its value (-m torch.distributed.run). */
    if (w[0] == '-' && w[1] && w[1] != '-' && !strchr("0123456789.", w[1]))
        return AP_WORD_LEADS;
    return AP_WORD_OTHER;
}
