/* moe_freq.c -- Megatron-LM's per-layer patterns: --moe-layer-freq (which
 * layers are MoE), --window-attn-skip-freq (which have a sliding window)
 * and --no-rope-freq (which take no rotary embedding).
 *
 * Megatron-LM reads them with moe_freq_type (no_rope_freq_type, the same):
 * an integer N or a Python list expression it evaluates ("[0]*3+[1]*58",
 * "([1]*3+[0])*2"), one 0 or 1 per layer. The integer means something else
 * for each flag: layer i (from 0) is MoE when i % N == 0, but has the
 * window when its 1-based number is not a multiple of N, (i + 1) % N != 0
 * (is_layer_window_attention), one full-attention layer after N - 1
 * windowed ones, and takes no rotary embedding when (i + 1) % N == 0, one
 * NoPE layer after N - 1 rotary ones, an N that must divide the layers
 * (TransformerConfig asserts it). The expressions are read
 * here with Python's grammar (lists of integers, + to concatenate, * by an
 * integer to repeat, parentheses), and the model's own pattern is written
 * in the shortest of the forms Megatron-LM reads back. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

/* More entries than any model has layers: a bound on what an expression
 * may build before it is compared with the model. */
#define MAX_ITEMS (1 << 20)

typedef struct {
    int is_list;
    long long num;
    unsigned char *items;
    int n;
} value;

typedef struct {
    const char *s, *at;
    char *err;
    int failed;
    int depth; /* parentheses open, bounded so that no input runs the stack deep */
    const char *flag; /* for messages */
} reader;

/* What the integer form N says of layer i (from 0), for each flag. */
typedef int (*every_fn)(int i, long long n);

/* One flag's pattern: its name for messages, its integer form, the value
 * that on every layer is its default and is written as "" (-1: none), and
 * whether the integer must divide the layers. */
typedef struct {
    const char *flag;
    every_fn every;
    int blank;
    int divides;
} pattern;

static int moe_every(int i, long long n)
{
    return i % n == 0;
}

static int window_every(int i, long long n)
{
    return (i + 1) % n != 0;
}

static int nope_every(int i, long long n)
{
    return (i + 1) % n == 0;
}

static const pattern moe_pattern = {"--moe-layer-freq", moe_every, 1, 0};
static const pattern window_pattern = {"--window-attn-skip-freq", window_every, 1, 0};
static const pattern nope_pattern = {"--no-rope-freq", nope_every, 0, 1};

static void fail(reader *r, const char *what)
{
    if (!r->failed)
        snprintf(r->err, AP_ERR_LEN, "--megatron-args: %s \"%.64s\": %s at \"%.16s\"",
                 r->flag, r->s, what, *r->at ? r->at : "the end");
    r->failed = 1;
}

static void skip_space(reader *r)
{
    while (isspace((unsigned char)*r->at))
        r->at++;
}

static int eat(reader *r, char c)
{
    skip_space(r);
    if (*r->at != c)
        return 0;
    r->at++;
    return 1;
}

static long long integer(reader *r)
{
    skip_space(r);
    if (!isdigit((unsigned char)*r->at)) {
        fail(r, "expected a number");
        return 0;
    }
    char *end;
    long long v = strtoll(r->at, &end, 10);
    if (v > MAX_ITEMS) {
        fail(r, "a number too large");
        return 0;
    }
    r->at = end;
    return v;
}

static void release(value *v)
{
    free(v->items);
    v->items = NULL;
    v->n = 0;
}

static int grow(reader *r, value *v, long long n)
{
    if (n > MAX_ITEMS) {
        fail(r, "a pattern longer than any model");
        return -1;
    }
    unsigned char *p = realloc(v->items, (size_t)(n ? n : 1));
    if (!p) {
        fail(r, "out of memory");
        return -1;
    }
    v->items = p;
    return 0;
}

static value expr(reader *r);

static value list(reader *r)
{
    value v = {1, 0, NULL, 0};
    if (eat(r, ']'))
        return v;
    do {
        long long x = integer(r);
        if (r->failed || grow(r, &v, v.n + 1))
            break;
        if (x > 1) {
            fail(r, "an entry other than 0 or 1");
            break;
        }
        v.items[v.n++] = (unsigned char)x;
    } while (eat(r, ','));
    if (!r->failed && !eat(r, ']'))
        fail(r, "expected ']'");
    return v;
}

static value factor(reader *r)
{
    if (eat(r, '['))
        return list(r);
    if (eat(r, '(')) {
        if (++r->depth > 32) {
            fail(r, "parentheses nested deeper than 32");
            return (value){0, 1, NULL, 0};
        }
        value v = expr(r);
        r->depth--;
        if (!r->failed && !eat(r, ')'))
            fail(r, "expected ')'");
        return v;
    }
    return (value){0, integer(r), NULL, 0};
}

/* list * int, int * list, or int * int, as Python evaluates them. */
static value repeat(reader *r, value a, value b)
{
    if (a.is_list && b.is_list) {
        fail(r, "a list times a list");
        release(&b);
        return a;
    }
    if (!a.is_list && !b.is_list)
        return (value){0, a.num * b.num > MAX_ITEMS ? MAX_ITEMS + 1 : a.num * b.num, NULL, 0};
    value l = a.is_list ? a : b;
    long long times = a.is_list ? b.num : a.num;
    value out = {1, 0, NULL, 0};
    if (!grow(r, &out, (long long)l.n * times))
        for (long long t = 0; l.n && t < times; t++, out.n += l.n)
            memcpy(out.items + out.n, l.items, (size_t)l.n);
    release(&l);
    return out;
}

static value term(reader *r)
{
    value v = factor(r);
    while (!r->failed && eat(r, '*'))
        v = repeat(r, v, factor(r));
    return v;
}

static value expr(reader *r)
{
    value v = term(r);
    while (!r->failed && eat(r, '+')) {
        value w = term(r);
        if (r->failed) {
            release(&w);
            break;
        }
        if (!v.is_list || !w.is_list) {
            fail(r, "a list plus a number");
            release(&w);
            break;
        }
        if (w.n && !grow(r, &v, (long long)v.n + w.n)) {
            memcpy(v.items + v.n, w.items, (size_t)w.n);
            v.n += w.n;
        }
        release(&w);
    }
    return v;
}

static int parse_pattern(const pattern *k, const char *text, int layers, unsigned char *out,
                         char *err)
{
    reader r = {text, text, err, 0, 0, k->flag};
    value v = strchr(text, '[') ? expr(&r) : (value){0, integer(&r), NULL, 0};
    skip_space(&r);
    if (!r.failed && *r.at)
        fail(&r, "unexpected text");
    if (!r.failed && !v.is_list && v.num < 1)
        fail(&r, "a frequency below 1");
    if (!r.failed && v.is_list && v.n != layers) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s \"%.64s\" has %d entries, but the "
                 "model has %d layers", k->flag, text, v.n, layers);
        r.failed = 1;
    }
    if (!r.failed && !v.is_list && k->divides && layers % v.num) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s %lld does not divide the model's %d "
                 "layers (Megatron-LM asserts it): give a list, one entry a layer",
                 k->flag, v.num, layers);
        r.failed = 1;
    }
    for (int i = 0; !r.failed && i < layers; i++)
        out[i] = v.is_list ? v.items[i] : (unsigned char)k->every(i, v.num);
    release(&v);
    return r.failed ? AP_EINPUT : AP_OK;
}

int ap_moe_freq_parse(const char *text, int layers, unsigned char *moe, char *err)
{
    return parse_pattern(&moe_pattern, text, layers, moe, err);
}

int ap_window_freq_parse(const char *text, int layers, unsigned char *window, char *err)
{
    return parse_pattern(&window_pattern, text, layers, window, err);
}

int ap_nope_freq_parse(const char *text, int layers, unsigned char *nope, char *err)
{
    return parse_pattern(&nope_pattern, text, layers, nope, err);
}

/* Appends "[v]*n" (or "[v]" for one) to buf at *at; -1 when it does not fit. */
static int put_run(char *buf, size_t len, size_t *at, int v, int n)
{
    int w = n > 1 ? snprintf(buf + *at, len - *at, "%s[%d]*%d", *at ? "+" : "", v, n)
                  : snprintf(buf + *at, len - *at, "%s[%d]", *at ? "+" : "", v);
    if (w < 0 || (size_t)w >= len - *at)
        return -1;
    *at += (size_t)w;
    return 0;
}

/* The pattern as runs of equal entries: "[0]*3+[1]*58". */
static int runs(const unsigned char *v, int layers, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < layers;) {
        int j = i;
        while (j < layers && v[j] == v[i])
            j++;
        if (put_run(buf, len, &at, v[i], j - i))
            return -1;
        i = j;
    }
    return 0;
}

/* The shortest period p of the pattern that divides it: "([0]+[1])*24". */
static int periodic(const unsigned char *v, int layers, char *buf, size_t len)
{
    for (int p = 1; p < layers; p++) {
        if (layers % p)
            continue;
        int same = 1;
        for (int i = p; i < layers && same; i++)
            same = v[i] == v[i - p];
        if (!same)
            continue;
        char inner[128];
        if (runs(v, p, inner, sizeof inner))
            return -1;
        int w = snprintf(buf, len, "(%s)*%d", inner, layers / p);
        return w < 0 || (size_t)w >= len ? -1 : 0;
    }
    return -1;
}

static int format_pattern(const pattern *k, const unsigned char *v, int layers, char *buf,
                          size_t len)
{
    int all = 1;
    for (int i = 0; i < layers; i++)
        all &= v[i] == k->blank;
    if (!len)
        return -1;
    buf[0] = '\0';
    if (all)
        return 0;
    /* Megatron-LM's integer form, where it says the same. */
    for (int n = 1; n <= layers; n++) {
        int same = !k->divides || layers % n == 0;
        for (int i = 0; i < layers && same; i++)
            same = v[i] == k->every(i, n);
        if (same) {
            int w = snprintf(buf, len, "%d", n);
            return w < 0 || (size_t)w >= len ? -1 : 0;
        }
    }
    char a[512], b[512];
    int ra = runs(v, layers, a, sizeof a), rb = periodic(v, layers, b, sizeof b);
    const char *best = ra ? (rb ? NULL : b) : rb ? a : strlen(b) < strlen(a) ? b : a;
    if (!best)
        return -1;
    int w = snprintf(buf, len, "%s", best);
    return w < 0 || (size_t)w >= len ? -1 : 0;
}

int ap_moe_freq_format(const unsigned char *moe, int layers, char *buf, size_t len)
{
    return format_pattern(&moe_pattern, moe, layers, buf, len);
}

int ap_window_freq_format(const unsigned char *window, int layers, char *buf, size_t len)
{
    return format_pattern(&window_pattern, window, layers, buf, len);
}

int ap_nope_freq_format(const unsigned char *nope, int layers, char *buf, size_t len)
{
    return format_pattern(&nope_pattern, nope, layers, buf, len);
}
