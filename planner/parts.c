/* parts.c -- the model split into blocks: before the layers, after them,
 * and one representative layer per layer class. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/parts.h"

void ap_parts_free(ap_parts *m)
{
    for (int b = 0; b < m->nblocks && m->ops; b++)
        free(m->ops[b]);
    free(m->ops);
    free(m->nops);
    free(m->classes);
    free(m->layer_block);
    memset(m, 0, sizeof *m);
}

static void find_classes(const ap_graph *g, ap_parts *m)
{
    for (int l = 0; l < g->nlayers; l++) {
        int k = 0;
        while (k < m->nclasses && m->classes[k] != g->layer_class[l])
            k++;
        if (k == m->nclasses)
            m->classes[m->nclasses++] = g->layer_class[l];
        m->layer_block[l] = 2 + k;
    }
}

int ap_parts_build(const ap_graph *g, ap_parts *m, char *err)
{
    memset(m, 0, sizeof *m);
    int L = g->nlayers;
    if (L == 0) {
        snprintf(err, AP_ERR_LEN,
                 "%s: no op carries a layer index; the planner needs \"layer\" "
                 "tags to form pipeline stages", g->source);
        return AP_EINPUT;
    }
    m->classes = malloc(sizeof(int) * (size_t)L);
    m->layer_block = malloc(sizeof(int) * (size_t)L);
    if (!m->classes || !m->layer_block)
        goto oom;
    find_classes(g, m);
    m->nblocks = 2 + m->nclasses;
    m->ops = calloc((size_t)m->nblocks, sizeof *m->ops);
    m->nops = calloc((size_t)m->nblocks, sizeof *m->nops);
    if (!m->ops || !m->nops)
        goto oom;
    for (int b = 0; b < m->nblocks; b++)
        if (!(m->ops[b] = malloc(sizeof(int) * (size_t)g->nops)))
            goto oom;
    int seen_layer = 0;
    for (int i = 0; i < g->nops; i++) {
        int l = g->ops[i].layer, b;
        if (l >= 0) {
            seen_layer = 1;
            if (g->layer_class[l] != l)
                continue; /* solved through its class representative */
            b = m->layer_block[l];
        } else {
            b = seen_layer ? 1 : 0;
        }
        m->ops[b][m->nops[b]++] = i;
    }
    return AP_OK;
oom:
    ap_parts_free(m);
    snprintf(err, AP_ERR_LEN, "out of memory splitting the model into blocks");
    return AP_EINTERNAL;
}
