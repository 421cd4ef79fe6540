/* megatron.c -- a Megatron-LM configuration as a plan.
 *
 * Megatron's layout follows from dimension kinds: on the tensor-parallel
 * axis a matmul whose output has a head, FFN or vocabulary label splits it
 * (column parallel), one that contracts such a label splits that (row
 * parallel, all-reduce, or reduce-scatter onto the sequence under sequence
 * parallelism); attention splits heads; the ops between follow their
 * labels, or the sequence under sequence parallelism. The data-parallel axis
 * splits the batch (experts, for expert ops under expert parallelism). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/parts.h"
#include "planner/planner.h"

void ap_megatron_default(ap_megatron *m)
{
    memset(m, 0, sizeof *m);
    m->tp = m->pp = m->cp = m->ep = m->vpp = m->mbs = 1;
    m->gbs = 512;
    m->zero = AP_ZERO_1;
}

static int set_key(ap_megatron *m, const char *k, const char *v, char *err)
{
    char *end;
    if (!strcmp(k, "recompute")) {
        if (!strcmp(v, "none"))
            m->recompute = AP_RECOMPUTE_NONE;
        else if (!strcmp(v, "selective"))
            m->recompute = AP_RECOMPUTE_SELECTIVE;
        else if (!strcmp(v, "full"))
            m->recompute = AP_RECOMPUTE_FULL;
        else
            goto bad;
        return AP_OK;
    }
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > (1L << 30))
        goto bad;
    int *slot = !strcmp(k, "tp") ? &m->tp : !strcmp(k, "pp") ? &m->pp
              : !strcmp(k, "dp") ? &m->dp : !strcmp(k, "cp") ? &m->cp
              : !strcmp(k, "ep") ? &m->ep : !strcmp(k, "vpp") ? &m->vpp
              : !strcmp(k, "mbs") ? &m->mbs : !strcmp(k, "sp") ? &m->sp : NULL;
    if (!strcmp(k, "gbs")) {
        m->gbs = (double)n;
        return n > 0 ? AP_OK : AP_EINPUT;
    }
    if (!strcmp(k, "zero")) {
        if (n > 3)
            goto bad;
        m->zero = (ap_zero)n;
        return AP_OK;
    }
    if (!slot) {
        snprintf(err, AP_ERR_LEN, "--megatron: unknown key \"%s\" (known: tp, pp, "
                 "dp, cp, ep, vpp, mbs, gbs, sp, recompute, zero)", k);
        return AP_EINPUT;
    }
    if (n < (slot == &m->sp || slot == &m->dp ? 0 : 1))
        goto bad;
    *slot = (int)n;
    return AP_OK;
bad:
    snprintf(err, AP_ERR_LEN, "--megatron: bad value \"%s\" for %s", v, k);
    return AP_EINPUT;
}

int ap_megatron_parse(const char *spec, ap_megatron *m, char *err)
{
    char buf[1024];
    if (strlen(spec) >= sizeof buf) {
        snprintf(err, AP_ERR_LEN, "--megatron: specification too long");
        return AP_EINPUT;
    }
    strcpy(buf, spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(err, AP_ERR_LEN, "--megatron: \"%s\" is not key=value", tok);
            return AP_EINPUT;
        }
        *eq = 0;
        int rc = set_key(m, tok, eq + 1, err);
        if (rc)
            return rc;
    }
    return AP_OK;
}

static const struct {
    const char *flag, *key;
} flags[] = {
    {"--tensor-model-parallel-size", "tp"},
    {"--pipeline-model-parallel-size", "pp"},
    {"--context-parallel-size", "cp"},
    {"--expert-model-parallel-size", "ep"},
    {"--micro-batch-size", "mbs"},
    {"--global-batch-size", "gbs"},
};

int ap_megatron_parse_args(const char *args, ap_megatron *m, char *err)
{
    char buf[4096];
    if (strlen(args) >= sizeof buf) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: too long");
        return AP_EINPUT;
    }
    strcpy(buf, args);
    m->zero = AP_ZERO_NONE; /* Megatron's default without the flag */
    int layers_per_chunk = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t\n", &save); tok;
         tok = strtok_r(NULL, " \t\n", &save)) {
        int known = 0;
        for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
            if (strcmp(tok, flags[i].flag))
                continue;
            char *v = strtok_r(NULL, " \t\n", &save);
            if (!v) {
                snprintf(err, AP_ERR_LEN, "--megatron-args: %s needs a value", tok);
                return AP_EINPUT;
            }
            int rc = set_key(m, flags[i].key, v, err);
            if (rc)
                return rc;
            known = 1;
        }
        if (known)
            continue;
        if (!strcmp(tok, "--sequence-parallel")) {
            m->sp = 1;
        } else if (!strcmp(tok, "--use-distributed-optimizer")) {
            m->zero = AP_ZERO_1;
        } else if (!strcmp(tok, "--recompute-granularity")) {
            char *v = strtok_r(NULL, " \t\n", &save);
            int rc = set_key(m, "recompute", v ? v : "", err);
            if (rc)
                return rc;
        } else if (!strcmp(tok, "--num-layers-per-virtual-pipeline-stage")) {
            char *v = strtok_r(NULL, " \t\n", &save);
            layers_per_chunk = v ? atoi(v) : 0;
            if (layers_per_chunk < 1) {
                snprintf(err, AP_ERR_LEN, "--megatron-args: %s needs a positive count", tok);
                return AP_EINPUT;
            }
        }
        /* Other flags (model shape, optimizer, logging) do not change the
         * parallel layout and are ignored. */
    }
    m->vpp = -layers_per_chunk; /* resolved against the layer count later */
    return AP_OK;
}

static int check(const ap_graph *g, const ap_cluster *c, ap_megatron *m,
                 char *err)
{
    int gpus = ap_cluster_gpus(c), L = g->nlayers;
    if (m->vpp < 0) /* layers per virtual stage, from --megatron-args */
        m->vpp = L % (m->pp * -m->vpp) ? 0 : L / (m->pp * -m->vpp);
    if (m->vpp == 0)
        m->vpp = 1;
    if (!m->dp)
        m->dp = gpus / (m->tp * m->pp * m->cp);
    if ((long)m->tp * m->pp * m->dp * m->cp != gpus) {
        snprintf(err, AP_ERR_LEN, "tp*pp*dp*cp = %d*%d*%d*%d = %ld, not the %d GPUs",
                 m->tp, m->pp, m->dp, m->cp, (long)m->tp * m->pp * m->dp * m->cp, gpus);
        return AP_EINPUT;
    }
    const char *kinds[] = {"heads", "KV heads"};
    ap_dim_kind dk[] = {AP_DIM_HEADS, AP_DIM_KV_HEADS};
    for (int i = 0; i < 2; i++) {
        char l = ap_graph_label_of(g, dk[i]);
        if (l && ap_graph_dim(g, l)->size % m->tp) {
            snprintf(err, AP_ERR_LEN, "tp=%d does not divide the %lld %s", m->tp,
                     (long long)ap_graph_dim(g, l)->size, kinds[i]);
            return AP_EINPUT;
        }
    }
    if (L % (m->pp * m->vpp)) {
        snprintf(err, AP_ERR_LEN, "pp*vpp = %d does not divide the %d layers",
                 m->pp * m->vpp, L);
        return AP_EINPUT;
    }
    if (fmod(m->gbs, (double)m->mbs * m->dp)) {
        snprintf(err, AP_ERR_LEN, "gbs=%.0f is not a multiple of mbs*dp = %d",
                 m->gbs, m->mbs * m->dp);
        return AP_EINPUT;
    }
    char e = ap_graph_label_of(g, AP_DIM_EXPERTS);
    if (m->ep > 1 && (!e || ap_graph_dim(g, e)->size % m->ep || m->dp % m->ep)) {
        snprintf(err, AP_ERR_LEN, "ep=%d must divide the experts (%lld) and dp=%d",
                 m->ep, e ? (long long)ap_graph_dim(g, e)->size : 0LL, m->dp);
        return AP_EINPUT;
    }
    if (m->cp > 1 && m->dp > 1) {
        snprintf(err, AP_ERR_LEN, "cp>1 with dp>1 needs a 3-D mesh, which is not "
                 "priced yet; use cp with dp=1");
        return AP_EINPUT;
    }
    if (m->vpp > 1 && (long)(m->gbs / (m->mbs * m->dp)) % m->pp) {
        snprintf(err, AP_ERR_LEN, "interleaving needs the micro-batch count "
                 "gbs/(mbs*dp) to be a multiple of pp=%d", m->pp);
        return AP_EINPUT;
    }
    return AP_OK;
}

static int kind_of(const ap_graph *g, char l)
{
    const ap_dim *d = ap_graph_dim(g, l);
    return d ? (int)d->kind : -1;
}

static int model_parallel(int k)
{
    return k == AP_DIM_HEADS || k == AP_DIM_KV_HEADS || k == AP_DIM_FFN ||
           k == AP_DIM_VOCAB;
}

static char first_of(const ap_graph *g, const char *labels, int (*want)(int))
{
    for (const char *p = labels; *p; p++)
        if (want(kind_of(g, *p)))
            return *p;
    return 0;
}

static int is_batch(int k) { return k == AP_DIM_BATCH; }
static int is_experts(int k) { return k == AP_DIM_EXPERTS; }

static ap_strategy layout_of(const ap_graph *g, const ap_megatron *m, int opi)
{
    const ap_op *op = &g->ops[opi];
    const char *out = op->noutputs ? g->tensors[op->outputs[0]].shape : "";
    char seq = ap_graph_label_of(g, AP_DIM_SEQ);
    ap_strategy s = {{0, 0}, {0, 0}};
    int expert_op = m->ep > 1 && first_of(g, op->iter, is_experts);
    if (m->dp > 1)
        s.axis[0] = expert_op ? first_of(g, op->iter, is_experts)
                              : first_of(g, op->iter, is_batch);
    if (m->cp > 1)
        s.axis[0] = strchr(op->iter, seq) ? seq : 0;
    if (m->tp == 1)
        return s;
    char col = first_of(g, out, model_parallel);
    char row = first_of(g, op->contracted, model_parallel);
    switch (op->kind) {
    case AP_OP_MATMUL:
        if (col) {
            s.axis[1] = col;
        } else if (row) {
            s.axis[1] = row;
            s.rs[1] = m->sp && strchr(out, seq) ? seq : 0;
        }
        break;
    case AP_OP_ATTENTION:
        s.axis[1] = g->tensors[op->inputs[0]].shape[2];
        break;
    case AP_OP_EMBEDDING:
        s.axis[1] = g->tensors[op->inputs[1]].shape[0]; /* vocabulary */
        break;
    case AP_OP_LOSS:
        s.axis[1] = first_of(g, g->tensors[op->inputs[0]].shape, model_parallel);
        break;
    default:
        if (col)
            s.axis[1] = col;
        else if (m->sp && seq && strchr(out, seq))
            s.axis[1] = seq;
    }
    return s;
}

ap_strategy ap_megatron_layout(const ap_graph *g, const ap_megatron *m, int op)
{
    return layout_of(g, m, op);
}

static int fill_block(const ap_graph *g, const ap_megatron *m, const ap_parts *pt,
                      int b, ap_block *blk)
{
    memset(blk, 0, sizeof *blk);
    if (!pt->nops[b])
        return 0;
    blk->nops = pt->nops[b];
    blk->ops = malloc(sizeof(int) * (size_t)blk->nops);
    blk->points = calloc(1, sizeof *blk->points);
    if (!blk->ops || !blk->points)
        return -1;
    blk->points[0].strat = malloc(sizeof(ap_strategy) * (size_t)blk->nops);
    if (!blk->points[0].strat)
        return -1;
    blk->npoints = 1;
    blk->ilp.status = AP_ILP_OPTIMAL;
    for (int i = 0; i < blk->nops; i++) {
        blk->ops[i] = pt->ops[b][i];
        blk->points[0].strat[i] = layout_of(g, m, blk->ops[i]);
    }
    return 0;
}

int ap_megatron_plan(const ap_graph *g, const ap_cluster *c,
                     const ap_megatron *cfg, ap_plan *p, char *err)
{
    ap_megatron m = *cfg;
    memset(p, 0, sizeof *p);
    int rc = check(g, c, &m, err);
    if (rc)
        return rc;
    ap_parts pt;
    if ((rc = ap_parts_build(g, &pt, err)))
        return rc;
    snprintf(p->model, sizeof p->model, "%s", g->name);
    snprintf(p->cluster, sizeof p->cluster, "%s", c->name);
    p->gpus = ap_cluster_gpus(c);
    p->gpus_per_node = c->gpus_per_node;
    p->global_batch = m.gbs;
    p->micro_batch = (double)m.mbs * m.dp;
    p->nmicro = (int)(m.gbs / p->micro_batch);
    p->schedule = m.vpp > 1 ? AP_SCHED_INTERLEAVED : AP_SCHED_1F1B;
    p->vchunks = m.vpp;
    p->zero = m.zero;
    p->nstages = m.pp;
    p->nclasses = pt.nclasses;
    p->stages = calloc((size_t)m.pp, sizeof *p->stages);
    p->classes = malloc(sizeof(int) * (size_t)pt.nclasses);
    if (!p->stages || !p->classes)
        goto oom;
    memcpy(p->classes, pt.classes, sizeof(int) * (size_t)pt.nclasses);
    int per = p->gpus / m.pp, span = g->nlayers / m.pp;
    for (int s = 0; s < m.pp; s++) {
        ap_stage *st = &p->stages[s];
        st->first_layer = s * span;
        st->nlayers = span;
        st->has_pre = s == 0;
        st->has_post = s == m.pp - 1;
        st->first_rank = s * per;
        st->ngpus = per;
        st->recompute = m.recompute;
        ap_mesh_init(&st->mesh, m.dp * m.cp, m.tp, st->first_rank, c->gpus_per_node);
        st->blocks = calloc((size_t)pt.nblocks, sizeof *st->blocks);
        st->point = calloc((size_t)pt.nblocks, sizeof *st->point);
        if (!st->blocks || !st->point)
            goto oom;
        for (int b = 0; b < pt.nblocks; b++)
            if (fill_block(g, &m, &pt, b, &st->blocks[b]))
                goto oom;
    }
    ap_parts_free(&pt);
    rc = ap_plan_evaluate(g, c, p, err);
    if (rc)
        ap_plan_free(p);
    return rc;
oom:
    ap_parts_free(&pt);
    ap_plan_free(p);
    snprintf(err, AP_ERR_LEN, "out of memory building the Megatron plan");
    return AP_EINTERNAL;
}
