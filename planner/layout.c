/* layout.c -- Megatron-LM's pipeline layout string and the layers of a
 * stage's model chunks.
 *
 * --pipeline-model-parallel-layout lists the virtual stages in layer order,
 * '|' between them: pipeline rank r's model chunk c is virtual stage
 * c * pp + r (Megatron-Core's PipelineParallelLayerLayout). The string is
 * read as its parse_str_to_list reads it, so that a layout Megatron-LM
 * accepts is priced with the same layers in the same places. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/layout.h"

/* A growing character buffer; the unrolled string can be far longer than
 * the written one ("t*4096"), so it is bounded by the symbols it may hold. */
typedef struct {
    char *s;
    size_t n, cap;
} buf;

#define AP_LAYOUT_MAX_SYMBOLS (1u << 22)

static int put(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > AP_LAYOUT_MAX_SYMBOLS)
        return -1;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t)
            return -1;
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

/* The count after a '*' at s, its digits; *end past them. -1 without
 * digits, TOO_MANY past what the string may unroll to. */
#define TOO_MANY (-2)

static long repeat_count(const char *s, const char **end)
{
    long n = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++)
        if (n <= AP_LAYOUT_MAX_SYMBOLS)
            n = n * 10 + (*p - '0');
    *end = p;
    return p == s ? -1 : n > AP_LAYOUT_MAX_SYMBOLS ? TOO_MANY : n;
}

static int fail(char *err, const char *who, const char *s, const char *what)
{
    snprintf(err, AP_ERR_LEN, "%s \"%.64s\": %s", who, s, what);
    return AP_EINPUT;
}

/* Pass one: "(...)*n" groups unrolled, their content copied as written. */
static int unroll_groups(const char *s, const char *who, buf *out, char *err)
{
    const char *p = s;
    while (*p) {
        if (*p == ')')
            return fail(err, who, s, "')' without its '('");
        if (*p != '(') {
            if (*p != ',' && put(out, p, 1))
                return fail(err, who, s, "unrolls to too many layers");
            p++;
            continue;
        }
        const char *close = strchr(p + 1, ')');
        const char *open = strchr(p + 1, '(');
        if (!close)
            return fail(err, who, s, "'(' without its ')'");
        if (open && open < close)
            return fail(err, who, s, "nested parentheses, which Megatron-LM does not "
                        "unroll");
        const char *end;
        long n = close[1] == '*' ? repeat_count(close + 2, &end) : -1;
        if (n == TOO_MANY)
            return fail(err, who, s, "unrolls to too many layers");
        if (n < 1 || close == p + 1)
            return fail(err, who, s, "a group needs content and a count: \"(tt|)*4\"");
        for (long i = 0; i < n; i++)
            for (const char *q = p + 1; q < close; q++)
                if (*q != ',' && put(out, q, 1))
                    return fail(err, who, s, "unrolls to too many layers");
        p = end;
    }
    return AP_OK;
}

/* Pass two: "x*n" unrolled for any one character x. */
static int unroll_symbols(const char *s, const char *who, const char *in, buf *out,
                          char *err)
{
    for (const char *p = in; *p;) {
        const char *end;
        long n = 1;
        if (p[1] == '*') {
            n = repeat_count(p + 2, &end);
            if (n == TOO_MANY)
                return fail(err, who, s, "unrolls to too many layers");
            if (n < 1)
                return fail(err, who, s, "'*' needs a count of 1 or more after it");
        } else {
            end = p + 1;
        }
        for (long i = 0; i < n; i++)
            if (put(out, p, 1))
                return fail(err, who, s, "unrolls to too many layers");
        p = end;
    }
    return AP_OK;
}

static int count_stages(const char *s, const char *who, const char *u, ap_pipe_layout *out,
                        char *err)
{
    int n = 1;
    for (const char *p = u; *p; p++) {
        if (!strchr("ELtm|", *p)) {
            char what[160];
            snprintf(what, sizeof what, "unknown layer '%c' (E embedding, t a "
                     "transformer layer, m an MTP layer, L the loss, | between stages)", *p);
            return fail(err, who, s, what);
        }
        if (*p == '|' && ++n > AP_LAYOUT_MAX_STAGES)
            return fail(err, who, s, "more virtual stages than autopar reads (65536)");
    }
    out->layers = calloc((size_t)n, sizeof *out->layers);
    if (!out->layers) {
        snprintf(err, AP_ERR_LEN, "out of memory reading %s", who);
        return AP_EINTERNAL;
    }
    out->nstages = n;
    out->embedding_at = out->loss_at = -1;
    int stage = 0;
    char first = 0, last = 0;
    for (const char *p = u; *p; p++) {
        if (*p == '|') {
            stage++;
            continue;
        }
        if (!first)
            first = *p;
        last = *p;
        if (*p == 't') {
            if (out->total == INT_MAX)
                return fail(err, who, s, "unrolls to too many layers");
            out->layers[stage]++;
            out->total++;
        } else if (*p == 'E') {
            out->embeddings++;
            out->embedding_at = stage;
        } else if (*p == 'L') {
            out->losses++;
            out->loss_at = stage;
        } else {
            out->mtp++;
            out->mtp_last += stage == n - 1;
        }
        out->t_after_m |= *p == 't' && out->mtp > 0;
    }
    out->embedding_first = first == 'E';
    out->loss_last = last == 'L';
    return AP_OK;
}

int ap_layout_parse(const char *s, const char *who, ap_pipe_layout *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (strlen(s) >= AP_LAYOUT_LEN)
        return fail(err, who, s, "longer than the 1023 characters autopar reads");
    buf groups = {0}, flat = {0};
    int rc = unroll_groups(s, who, &groups, err);
    if (!rc)
        rc = unroll_symbols(s, who, groups.s ? groups.s : "", &flat, err);
    if (!rc)
        rc = count_stages(s, who, flat.s ? flat.s : "", out, err);
    free(groups.s);
    free(flat.s);
    if (rc)
        ap_layout_free(out);
    return rc;
}

void ap_layout_free(ap_pipe_layout *l)
{
    free(l->layers);
    memset(l, 0, sizeof *l);
}

/* One virtual stage: "E" on the first, its layers as "t" or "t*n", and on
 * the last the MTP layers and "L". */
static int stage_text(const int *layers, int n, int mtp, int i, char *out, size_t len)
{
    char t[32] = "", m[32] = "";
    if (layers[i] == 1)
        snprintf(t, sizeof t, "t");
    else if (layers[i] > 1)
        snprintf(t, sizeof t, "t*%d", layers[i]);
    if (i == n - 1 && mtp == 1)
        snprintf(m, sizeof m, "m");
    else if (i == n - 1 && mtp > 1)
        snprintf(m, sizeof m, "m*%d", mtp);
    return snprintf(out, len, "%s%s%s%s", i == 0 ? "E" : "", t, m, i == n - 1 ? "L" : "");
}

static int append(char *buf, size_t len, size_t *at, const char *s)
{
    size_t n = strlen(s);
    if (*at + n + 1 > len)
        return -1;
    memcpy(buf + *at, s, n + 1);
    *at += n;
    return 0;
}

int ap_layout_format(const int *layers, int n, int mtp, char *out, size_t len)
{
    size_t at = 0;
    if (len == 0)
        return -1;
    out[0] = 0;
    for (int i = 0; i < n;) {
        char one[64];
        stage_text(layers, n, mtp, i, one, sizeof one);
        /* A run of equal middle stages, each followed by '|', folds into
         * "(t*4|)*k" when that is shorter than writing them out. */
        int j = i;
        while (j + 1 < n - 1 && i > 0 && layers[j + 1] == layers[i])
            j++;
        int run = j - i + 1;
        char folded[96];
        snprintf(folded, sizeof folded, "(%s|)*%d", one, run);
        if (run > 1 && strlen(folded) < (strlen(one) + 1) * (size_t)run) {
            if (append(out, len, &at, folded))
                return -1;
            i = j + 1;
            continue;
        }
        if (append(out, len, &at, one) || (i < n - 1 && append(out, len, &at, "|")))
            return -1;
        i++;
    }
    return (int)at;
}

/* Stage s's layers and first layer from the plan's chunk_layers. */
static void set_stages(ap_plan *p)
{
    int v = p->vchunks;
    for (int s = 0; s < p->nstages; s++) {
        ap_stage *st = &p->stages[s];
        st->nlayers = 0;
        st->first_layer = 0;
        for (int c = 0; c < v; c++)
            st->nlayers += p->chunk_layers[c * p->nstages + s];
        for (int i = 0; i < s; i++)
            st->first_layer += p->chunk_layers[i];
    }
}


void ap_plan_set_chunks(ap_plan *p, int *chunks)
{
    if (p->chunk_layers != chunks)
        free(p->chunk_layers);
    p->chunk_layers = chunks;
    set_stages(p);
}

void ap_layout_megatron_split(const int *stage_layers, int pp, int v, int e, int l, int *out)
{
    int n = pp * v;
    long total = e + l;
    for (int s = 0; s < pp; s++)
        total += stage_layers[s];
    for (int i = 0; i < n; i++)
        out[i] = e || l ? (int)(total / n) - (i == 0 ? e : 0) - (i == n - 1 ? l : 0)
                        : stage_layers[i % pp] / v;
}

int *ap_plan_spans(const ap_plan *p)
{
    int *span = malloc(sizeof(int) * 2 * (size_t)p->nstages);
    for (int s = 0; span && s < p->nstages; s++) {
        span[2 * s] = p->stages[s].first_layer;
        span[2 * s + 1] = p->stages[s].nlayers;
    }
    return span;
}

void ap_plan_restore_spans(ap_plan *p, const int *span)
{
    free(p->chunk_layers);
    p->chunk_layers = NULL;
    for (int s = 0; s < p->nstages; s++) {
        p->stages[s].first_layer = span[2 * s];
        p->stages[s].nlayers = span[2 * s + 1];
    }
}

void ap_stage_chunk_of(const ap_plan *p, int s, int k, int *chunk, int *pos, int *layer)
{
    const ap_stage *st = &p->stages[s];
    int v = p->vchunks > 1 ? p->vchunks : 1;
    if (!p->chunk_layers || v == 1) {
        int cs = (st->nlayers + v - 1) / v;
        *chunk = cs ? k / cs : 0;
        *pos = cs ? k % cs : k;
        *layer = st->first_layer + k;
        return;
    }
    /* The layers before chunk c of stage s: every virtual stage before it
     * in Megatron's order. */
    int before = 0;
    for (int c = 0; c < v; c++) {
        int n = p->chunk_layers[c * p->nstages + s];
        if (k < n) {
            for (int i = 0; i < c * p->nstages + s; i++)
                before += p->chunk_layers[i];
            *chunk = c;
            *pos = k;
            *layer = before + k;
            return;
        }
        k -= n;
    }
    *chunk = v - 1;
    *pos = k;
    *layer = st->first_layer + k;
}
