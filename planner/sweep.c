/* sweep.c -- every configuration a launcher can run, each priced as a plan.
 *
 * The sweep is what a person tuning by hand could at best arrive at: it
 * lists the launcher's valid configurations for the model and cluster,
 * prices each with ap_megatron_plan (the same code that prices the
 * planner's own plans), and keeps the fastest that fits. Listing first and
 * pricing second gives the progress line its total and keeps the order, and
 * so the tie-breaking, independent of the pricing. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "planner/planner.h"

void ap_sweep_opts_default(ap_sweep_opts *o)
{
    memset(o, 0, sizeof *o);
    o->launcher = AP_LAUNCHER_MEGATRON;
    o->global_batch = 512;
}

void ap_sweep_opts_of(const ap_plan_opts *o, ap_launcher l, ap_sweep_opts *so)
{
    ap_sweep_opts_default(so);
    so->launcher = l;
    if (o->global_batch > 0)
        so->global_batch = o->global_batch;
    so->threads = o->threads;
    so->progress = o->progress;
    so->run = o->run;
    so->max_local_experts = o->max_local_experts;
}

static const char *recompute_name(ap_recompute r)
{
    return r == AP_RECOMPUTE_FULL ? "full" : r == AP_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

/* Appends to buf as snprintf would at offset *n, once nothing before has
 * failed or filled it. */
static void append(char *buf, size_t len, int *n, const char *fmt, ...)
{
    if (*n < 0 || (size_t)*n >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, len - (size_t)*n, fmt, ap);
    va_end(ap);
    *n = k < 0 ? k : *n + k;
}

void ap_megatron_format(const ap_megatron *m, char *buf, size_t len)
{
    int n = 0;
    append(buf, len, &n, "tp=%d,pp=%d,dp=%d,cp=%d,ep=%d,vpp=%d,mbs=%d,", m->tp, m->pp,
           m->dp, m->cp, m->ep, m->vpp, m->mbs);
    if (m->gbs > 0)
        append(buf, len, &n, "gbs=%.0f,", m->gbs);
    append(buf, len, &n, "sp=%d,recompute=%s,zero=%d", m->sp, recompute_name(m->recompute),
           (int)m->zero);
    if (!m->overlap_grad)
        append(buf, len, &n, ",overlap_grad=0");
    /* overlap_param only where it is not what overlap_grad gives it. */
    ap_megatron dflt = *m;
    dflt.overlap_param = -1;
    int op = ap_megatron_overlap_param(m);
    if (op != ap_megatron_overlap_param(&dflt))
        append(buf, len, &n, ",overlap_param=%d", op);
    if (m->first)
        append(buf, len, &n, ",first=%d", m->first);
    if (m->last)
        append(buf, len, &n, ",last=%d", m->last);
    /* The layout's commas are cosmetic to Megatron-LM and separate keys
     * here, so they are left out. */
    if (m->layout[0]) {
        append(buf, len, &n, ",layout=");
        for (const char *c = m->layout; *c; c++)
            if (*c != ',')
                append(buf, len, &n, "%c", *c);
    }
    if (m->run.fp8)
        append(buf, len, &n, ",fp8=1");
    if (m->run.fp8 && m->run.fp8_recipe != AP_FP8_DELAYED)
        append(buf, len, &n, ",fp8_recipe=%s", ap_fp8_recipe_name(m->run.fp8_recipe));
    if (m->run.fp8 && m->bf16_first)
        append(buf, len, &n, ",bf16_first=%d", m->bf16_first);
    if (m->run.fp8 && m->bf16_last)
        append(buf, len, &n, ",bf16_last=%d", m->bf16_last);
    if (m->account_embedding)
        append(buf, len, &n, ",account_embedding=1");
    if (m->account_loss)
        append(buf, len, &n, ",account_loss=1");
    if (m->run.tp_overlap)
        append(buf, len, &n, ",tp_overlap=1");
    if (m->etp && m->etp != m->tp)
        append(buf, len, &n, ",etp=%d", m->etp);
    if (m->run.fp8_param_gather)
        append(buf, len, &n, ",fp8_param_gather=1");
    if (m->run.moe_a2a_overlap)
        append(buf, len, &n, ",moe_a2a_overlap=1");
    if (m->run.delay_wgrad)
        append(buf, len, &n, ",delay_wgrad=1");
    if (m->run.defer_wgrad)
        append(buf, len, &n, ",defer_wgrad=1");
    if (m->run.defer_wgrad && m->run.wgrad_deferral_limit)
        append(buf, len, &n, ",wgrad_deferral_limit=%d", m->run.wgrad_deferral_limit);
    if (m->run.no_grad_fusion)
        append(buf, len, &n, ",no_grad_fusion=1");
    if (m->run.tp_sync)
        append(buf, len, &n, ",tp_sync=1");
    if (m->run.cuda_graph)
        append(buf, len, &n, ",cuda_graph=%s", ap_cuda_graph_name(m->run.cuda_graph));
    if (m->run.dispatcher != AP_DISPATCH_ALLTOALL)
        append(buf, len, &n, ",dispatcher=%s", ap_dispatcher_name(m->run.dispatcher));
    if (m->run.shared_overlap)
        append(buf, len, &n, ",shared_overlap=1");
    if (m->run.sequential_experts)
        append(buf, len, &n, ",sequential_experts=1");
    if (m->run.capacity_factor > 0)
        append(buf, len, &n, ",capacity_factor=%.17g", m->run.capacity_factor);
    if (m->run.pad_capacity)
        append(buf, len, &n, ",pad_capacity=1");
    if (m->run.cross_entropy != AP_CE_UNFUSED)
        append(buf, len, &n, ",cross_entropy=%s", ap_ce_impl_name(m->run.cross_entropy));
    if (m->recompute_method != AP_RECOMPUTE_UNIFORM)
        append(buf, len, &n, ",recompute_method=%s",
               ap_recompute_method_name(m->recompute_method));
    if (m->recompute_layers != 1)
        append(buf, len, &n, ",recompute_layers=%d", m->recompute_layers);
    if (m->run.recompute_modules) {
        char mods[160];
        ap_rc_modules_format(m->run.recompute_modules, "+", mods, sizeof mods);
        append(buf, len, &n, ",recompute_modules=%s", mods);
    }
    if (m->run.grad_fp32)
        append(buf, len, &n, ",grad_fp32=1");
    if (m->run.cp_comm != AP_CP_P2P)
        append(buf, len, &n, ",cp_comm=%s", ap_cp_comm_name(m->run.cp_comm));
    const char *keys[3] = {"main_params", "exp_avg", "exp_avg_sq"};
    const ap_opt_dtype dt[3] = {m->run.opt.main_params, m->run.opt.exp_avg,
                                m->run.opt.exp_avg_sq};
    for (int i = 0; i < 3; i++)
        if (dt[i] != AP_OPT_FP32)
            append(buf, len, &n, ",%s=%s", keys[i], ap_opt_dtype_name(dt[i]));
}

/* One listed configuration: what the listing varies. The rest of its
 * ap_megatron, a few kilobytes, is the sweep's template (make_config), so a
 * sweep over many GPUs lists 10^5 configurations in a few megabytes. */
typedef struct {
    int tp, pp, dp, cp, ep, vpp, mbs, first, last;
    unsigned char sp, recompute, zero, overlap_grad, account_embedding, account_loss,
        cp_comm;
} entry;

/* A growing list of candidate configurations. */
typedef struct {
    entry *v;
    long n, cap;
    int oom;
} list;

static void push(list *l, const ap_megatron *m)
{
    if (l->oom)
        return;
    if (l->n == l->cap) {
        long cap = l->cap ? 2 * l->cap : 256;
        entry *v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) {
            l->oom = 1;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (entry){m->tp, m->pp, m->dp, m->cp, m->ep, m->vpp, m->mbs, m->first,
                           m->last, (unsigned char)m->sp, (unsigned char)m->recompute,
                           (unsigned char)m->zero, (unsigned char)m->overlap_grad,
                           (unsigned char)m->account_embedding,
                           (unsigned char)m->account_loss, (unsigned char)m->run.cp_comm};
}

/* The configuration an entry lists: the template with the entry's choices,
 * less what Megatron-LM refuses beside them (TP overlap without sequence
 * parallelism, say), which the configuration then runs without. */
static void make_config(const ap_graph *g, const ap_megatron *tmpl, const entry *e,
                        ap_megatron *m)
{
    *m = *tmpl;
    m->tp = e->tp;
    m->pp = e->pp;
    m->dp = e->dp;
    m->cp = e->cp;
    m->ep = e->ep;
    m->vpp = e->vpp;
    m->mbs = e->mbs;
    m->first = e->first;
    m->last = e->last;
    m->sp = e->sp;
    m->recompute = (ap_recompute)e->recompute;
    m->zero = (ap_zero)e->zero;
    m->overlap_grad = e->overlap_grad;
    m->account_embedding = e->account_embedding;
    m->account_loss = e->account_loss;
    m->run.cp_comm = (ap_cp_comm)e->cp_comm;
    ap_megatron_drop_unsupported(g, m);
}

static long dim_size(const ap_graph *g, ap_dim_kind k)
{
    char l = ap_graph_label_of(g, k);
    return l ? (long)ap_graph_dim(g, l)->size : 0;
}

/* What the model and cluster fix for every configuration. */
typedef struct {
    const ap_graph *g;
    ap_launcher launcher;
    int gpus, max_tp, layers;
    long heads, kv_heads, seq, experts;
    double gbs;
    int max_local_experts;
    ap_cp_comm cp_comm;   /* the run's context-parallel type */
    /* The shortest attention chunk and sliding window shorter than the
     * sequence (ap_model_short_chunk, ap_model_short_window), 0 for none. */
    long long chunk, window;
} space;

/* DeepSpeed's config states no tensor (or expert) parallelism of its own:
 * Megatron-DeepSpeed takes them as Megatron-LM's flags, which the Megatron
 * target lists. */
static int tp_ok(const space *s, int tp)
{
    if (tp > 1 && s->launcher == AP_LAUNCHER_DEEPSPEED)
        return 0;
    return tp <= s->max_tp && (!s->heads || s->heads % tp == 0) &&
           (!s->kv_heads || s->kv_heads % tp == 0);
}

/* The last choices: recomputation, ZeRO and sequence parallelism, as the
 * launcher offers them. Duplicates are left out: sequence parallelism
 * needs tp > 1 and ZeRO needs data-parallel replicas to shard over. */
static void add_variants(const space *s, ap_megatron m, list *out)
{
    static const ap_zero megatron_zero[] = {AP_ZERO_NONE, AP_ZERO_1};
    static const ap_zero titan_zero[] = {AP_ZERO_NONE, AP_ZERO_3};
    static const ap_zero ds_zero[] = {AP_ZERO_NONE, AP_ZERO_1, AP_ZERO_2, AP_ZERO_3};
    const ap_zero *zeros = megatron_zero;
    int nzero = 2, sp_lo = 0, sp_hi = m.tp > 1, rc_step = 1;
    if (s->launcher == AP_LAUNCHER_TORCHTITAN) {
        /* DDP (replicate) or FSDP (shard); TP always with sequence-parallel
         * norms. Under a pipeline FSDP keeps a stage's weights gathered and
         * its gradients unsharded through the step (export.c), which is
         * ZeRO-1's memory and collectives. */
        zeros = m.pp > 1 ? megatron_zero : titan_zero;
        sp_lo = sp_hi;
    } else if (s->launcher == AP_LAUNCHER_DEEPSPEED) {
        /* DeepSpeed's pipeline engine runs ZeRO-1 at most; its activation
         * checkpointing is whole layers; it has no tensor parallelism
         * (tp_ok), so no sequence parallelism either. */
        zeros = ds_zero;
        nzero = m.pp > 1 ? 2 : 4;
        sp_hi = 0;
        rc_step = 2;
    }
    if (m.dp * m.cp == 1)
        nzero = 1;
    /* torchtitan's expert parallelism borrows FSDP's shard ranks, which
     * DDP has none of (export.c, titan_experts); its DDP runs on a mesh of
     * data-parallel ranks alone, and it shards the weights over
     * context-parallel ranks with FSDP whatever the shard degree
     * (export.c, check_launcher). */
    int zlo = s->launcher == AP_LAUNCHER_TORCHTITAN && nzero > 1 &&
              (m.ep > 1 || m.cp > 1 || m.tp > 1 || m.pp > 1);
    /* Megatron-Core asserts sequence parallelism for MoE beside tensor
     * parallelism: each rank dispatches its own sequence shard. */
    if (m.ep > 1 && m.tp > 1)
        sp_lo = sp_hi;
    for (int sp = sp_lo; sp <= sp_hi; sp++)
        for (int rc = AP_RECOMPUTE_NONE; rc <= AP_RECOMPUTE_FULL; rc += rc_step)
            for (int z = zlo; z < nzero; z++) {
                m.sp = sp;
                m.recompute = (ap_recompute)rc;
                m.zero = zeros[z];
                m.overlap_grad = ap_launcher_overlaps_grad(s->launcher, m.zero);
                push(out, &m);
            }
}

/* Micro-batch sizes (powers of two dividing the per-replica batch) and
 * interleaving (v chunks a stage, with at least two stages and a
 * micro-batch count divisible by them). `unit` is what every stage's layer
 * count is a multiple of (its slots, where the embedding and the loss count
 * as layers), so v divides it. DeepSpeed does not interleave. */
static void add_batching(const space *s, ap_megatron m, int unit, list *out)
{
    if (fmod(s->gbs, m.dp) != 0)
        return;
    long per_replica = (long)(s->gbs / m.dp);
    int max_v = s->launcher == AP_LAUNCHER_DEEPSPEED || m.pp < 2 ? 1 : unit;
    for (long mbs = 1; mbs <= per_replica; mbs *= 2) {
        if (per_replica % mbs)
            break;
        long nmicro = per_replica / mbs;
        for (int v = 1; v <= max_v; v++) {
            if (unit % v || (v > 1 && nmicro % m.pp))
                continue;
            m.mbs = (int)mbs;
            m.vpp = v;
            add_variants(s, m, out);
        }
    }
}

/* Context parallelism: cp a power of two dividing the sequence and what tp
 * and pp leave, the rest data parallel (the stage is then dp replicas of a
 * (cp, tp) mesh), plus cp taking all of it when that is not a power of two.
 * Expert parallelism goes with cp = 1 only: experts split over
 * context-parallel ranks are not modelled. Nor is context parallelism
 * under an attention chunk shorter than the sequence, which no launcher
 * runs, or, but for Megatron-LM's (Transformer Engine's), under such a
 * sliding window. */
static int cp_ok(const space *s, int rest, int cp)
{
    if (cp == 1)
        return 1;
    return rest % cp == 0 && s->seq && s->seq % cp == 0 && !s->chunk &&
           (!s->window || s->launcher == AP_LAUNCHER_MEGATRON) &&
           s->launcher != AP_LAUNCHER_DEEPSPEED;
}

static void add_ep(const space *s, ap_megatron m, int unit, list *out);

/* Under a window Transformer Engine's ring (p2p) refuses context
 * parallelism; its all-gather and all-to-all take it, so a run on the ring
 * lists both of those instead (check_window_cp). */
static void add_cp(const space *s, ap_megatron m, int rest, int cp, int unit,
                   list *out)
{
    if (!cp_ok(s, rest, cp))
        return;
    m.cp = cp;
    m.dp = rest / cp;
    if (cp == 1 || !s->window || s->cp_comm != AP_CP_P2P) {
        add_ep(s, m, unit, out);
        return;
    }
    const ap_cp_comm types[2] = {AP_CP_ALLGATHER, AP_CP_A2A};
    for (int i = 0; i < 2; i++) {
        m.run.cp_comm = types[i];
        add_ep(s, m, unit, out);
    }
}

static void add_ep(const space *s, ap_megatron m, int unit, list *out)
{
    int cp = m.cp;
    for (int ep = 1; ep <= (cp > 1 ? 1 : m.dp); ep++) {
        if (ep > 1 && (!s->experts || s->experts % ep || m.dp % ep))
            continue;
        /* DeepSpeed's config states no expert parallelism (tp_ok). */
        if (ep > 1 && s->launcher == AP_LAUNCHER_DEEPSPEED)
            continue;
        if (s->max_local_experts > 0 && s->experts / ep > s->max_local_experts)
            continue;
        m.ep = ep;
        add_batching(s, m, unit, out);
    }
}

static void add_cp_ep(const space *s, ap_megatron m, int unit, list *out)
{
    int rest = s->gpus / (m.tp * m.pp);
    for (int cp = 1; cp <= rest / 2; cp *= 2)
        add_cp(s, m, rest, cp, unit, out);
    add_cp(s, m, rest, rest, unit, out);
}

static int gcd(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Layers that pp does not divide, split as Megatron-LM can: the embedding
 * and the loss counted as a layer each (--account-for-embedding/loss-in-
 * pipeline-split), where that makes the count divide; and the middle
 * stages at the larger share with the first and last stage holding what
 * is left, the last (beside the output layer and the loss) no more than
 * the first (--decoder-first/last-pipeline-num-layers). Those are the two
 * splits Megatron-LM's recipes use for Llama 3.1 405B's 126 layers; a
 * layout can place layers otherwise, which the sweep does not try. */
static void add_uneven(const space *s, ap_megatron m, list *out)
{
    int L = s->layers, pp = m.pp;
    if (pp < 2 || s->launcher != AP_LAUNCHER_MEGATRON)
        return;
    if ((L + 2) % pp == 0 && (L + 2) / pp >= 2) {
        ap_megatron a = m;
        a.account_embedding = a.account_loss = 1;
        add_cp_ep(s, a, (L + 2) / pp, out);
    }
    int share = (L + pp - 1) / pp, left = L - share * (pp - 2);
    if (left < 2 || left > 2 * share)
        return;
    m.first = (left + 1) / 2;
    m.last = left / 2;
    add_cp_ep(s, m, pp == 2 ? gcd(m.first, m.last) : gcd(gcd(m.first, m.last), share), out);
}

static int enumerate(const space *s, list *out)
{
    ap_megatron m;
    ap_megatron_default(&m);
    m.gbs = s->gbs;
    m.run.cp_comm = s->cp_comm;
    for (int tp = 1; tp <= s->gpus; tp++) {
        if (s->gpus % tp || !tp_ok(s, tp))
            continue;
        for (int pp = 1; pp <= s->gpus / tp && pp <= s->layers; pp++) {
            if ((s->gpus / tp) % pp)
                continue;
            m.tp = tp;
            m.pp = pp;
            if (s->layers % pp == 0)
                add_cp_ep(s, m, s->layers / pp, out);
            else
                add_uneven(s, m, out);
        }
    }
    return out->oom ? AP_EINTERNAL : AP_OK;
}

/* What every pass over the list shares: the model, the cluster, the list,
 * the template its entries fill and the model's shape. */
typedef struct {
    const ap_graph *g;
    const ap_cluster *c;
    const list *l;
    const ap_megatron *tmpl;
    const ap_model_shape *shape;
    int progress;
    double t0;
    int bounded; /* stop where a lower bound reaches the thread's best */
} pass;

/* Configurations a thread takes at a time. The threads take runs of the
 * list in turn rather than every n-th configuration: neighbours in the
 * list differ in ZeRO first, so on two threads a fixed stride gave one
 * thread the configurations without the distributed optimizer, most of
 * them over the memory by their states alone and not priced, and left
 * the other pricing alone, and unheard from, for most of a long sweep. */
#define RUN_LEN 16

/* The threads' common state: the next run to hand out, the count priced,
 * and the progress, which whichever thread takes a run writes when due. */
typedef struct {
    pthread_mutex_t lock;
    long next, done;
    int stop;            /* a thread failed: the others take no more */
    double interval;     /* seconds between log lines */
    double next_line;    /* seconds in */
    int shown;           /* the progress line is on the terminal */
    long logged;         /* the count the last log line gave, -1: none */
} queue;

/* A thread's part of the list. Each keeps its own best, the lowest index
 * among equal times (it takes its runs in the list's order), so that the
 * merged answer is the one a single thread would give. */
typedef struct {
    const pass *ps;
    queue *q;
    double usable;      /* bytes per GPU a plan may hold; 0: price all */
    long valid, refused, fit, best;
    long priced, skipped; /* skipped: over the memory by their states alone */
    ap_plan plan;
    double least_memory;
    int rc;
    char err[AP_ERR_LEN];
    long refused_at;    /* the first configuration refused, -1: none */
    char refusal[AP_ERR_LEN]; /* why */
} worker;

/* The least a configuration's GPUs hold: their share of the weights,
 * gradients and optimizer states. The fullest stage holds at least 1/pp of
 * the parameters, and tensor and expert parallelism split a parameter at
 * most tp*ep ways; the distributed optimizer shards its states at most
 * over the dp*cp replicas. Activations and buffers only add. */
static double states_floor(const ap_graph *g, const ap_megatron *t, const entry *e)
{
    double params = g->total_params / ((double)e->pp * e->tp * e->ep);
    int shards = e->zero >= AP_ZERO_1 ? e->dp * e->cp : 1;
    return ap_mem_model_states_opt(params, shards, (ap_zero)e->zero,
                                   ap_run_grad_bytes(&t->run), &t->run.opt).total;
}

/* The progress, called under the queue's lock: a line rewritten in place
 * on a terminal from a second on, or a line of its own every interval in
 * a log (ap_plan_opts.progress). The count is of the configurations
 * priced, whichever thread priced them. */
static void show_progress(const pass *ps, queue *q)
{
    double t = ap_progress_now() - ps->t0;
    if (!ps->progress || t < q->next_line)
        return;
    if (ps->progress == AP_PROGRESS_LOG) {
        q->next_line = t + q->interval;
        q->logged = q->done;
        fprintf(stderr, "sweep: %ld of %ld configurations priced (%.0f s)\n", q->done,
                ps->l->n, t);
        return;
    }
    /* A tenth of a second apart: more is a blur, and each is a write. */
    q->next_line = t + 0.1;
    q->shown = 1;
    fprintf(stderr, "\rsweep: %ld of %ld configurations priced", q->done, ps->l->n);
}

/* Counts the `priced` configurations of w's last run and hands w the next
 * run, [*lo, *hi); 0 when none is left. */
static int take(worker *w, long priced, long *lo, long *hi)
{
    queue *q = w->q;
    long n = w->ps->l->n;
    pthread_mutex_lock(&q->lock);
    q->done += priced;
    if (w->rc)
        q->stop = 1;
    int more = !q->stop && q->next < n;
    if (more) {
        *lo = q->next;
        *hi = n - q->next < RUN_LEN ? n : q->next + RUN_LEN;
        q->next = *hi;
    }
    show_progress(w->ps, q);
    pthread_mutex_unlock(&q->lock);
    return more;
}

/* Prices configuration i into w's counts and best. */
static int price_one(worker *w, long i)
{
    const pass *ps = w->ps;
    /* A configuration whose model states alone are over the memory does
     * not fit whatever its price: counted, not priced. */
    if (w->usable > 0 && states_floor(ps->g, ps->tmpl, &ps->l->v[i]) > w->usable) {
        w->valid++;
        w->skipped++;
        return AP_OK;
    }
    ap_plan p;
    ap_megatron m;
    make_config(ps->g, ps->tmpl, &ps->l->v[i], &m);
    /* Only a step shorter than this thread's best can change it. */
    double bound = ps->bounded && w->best >= 0 ? w->plan.step_time : 0;
    int rc = ap_megatron_plan_shaped(ps->g, ps->c, &m, ps->shape, bound, &p, w->err);
    if (rc == AP_EINPUT) {
        w->refused++; /* a rule of ap_megatron_plan the list missed */
        if (w->refused_at < 0) {
            w->refused_at = i;
            memcpy(w->refusal, w->err, AP_ERR_LEN);
        }
        return AP_OK;
    }
    if (rc)
        return rc;
    if (w->priced++ == 0 || p.max_mem_bytes < w->least_memory)
        w->least_memory = p.max_mem_bytes;
    w->valid++;
    int fits = p.max_mem_bytes <= p.hbm_limit;
    w->fit += fits;
    if (fits && (w->best < 0 || p.step_time < w->plan.step_time)) {
        if (w->best >= 0)
            ap_plan_free(&w->plan);
        w->plan = p;
        w->best = i;
    } else {
        ap_plan_free(&p);
    }
    return AP_OK;
}

static void *price_share(void *arg)
{
    worker *w = arg;
    long lo, hi, priced = 0;
    while (take(w, priced, &lo, &hi)) {
        for (priced = 0; lo + priced < hi; priced++)
            if ((w->rc = price_one(w, lo + priced)))
                break;
    }
    return NULL;
}

static int better(const worker *a, const worker *b)
{
    if (a->best < 0)
        return 0;
    if (b->best < 0)
        return 1;
    return a->plan.step_time < b->plan.step_time ||
           (a->plan.step_time == b->plan.step_time && a->best < b->best);
}

static int merge(worker *w, int n, const pass *ps, ap_sweep_result *out, char *err)
{
    int rc = AP_OK, win = -1;
    long first = -1;
    for (int t = 0; t < n; t++) {
        out->valid += w[t].valid;
        out->refused += w[t].refused;
        if (w[t].refused_at >= 0 && (first < 0 || w[t].refused_at < first)) {
            first = w[t].refused_at;
            snprintf(out->refusal, sizeof out->refusal, "%s", w[t].refusal);
        }
        out->fit += w[t].fit;
        out->skipped += w[t].skipped;
        if (w[t].priced && (out->least_memory == 0 || w[t].least_memory < out->least_memory))
            out->least_memory = w[t].least_memory;
        if (w[t].rc && !rc) {
            rc = w[t].rc;
            memcpy(err, w[t].err, AP_ERR_LEN);
        }
        if (win < 0 ? w[t].best >= 0 : better(&w[t], &w[win]))
            win = t;
    }
    for (int t = 0; t < n; t++)
        if (w[t].best >= 0 && (t != win || rc))
            ap_plan_free(&w[t].plan);
    if (!rc && win >= 0) {
        out->found = 1;
        out->plan = w[win].plan;
        make_config(ps->g, ps->tmpl, &ps->l->v[w[win].best], &out->best);
    }
    return rc;
}

/* Prices the list on n threads (w: n workers), leaving unpriced the
 * configurations whose model states alone exceed `usable` bytes (0: none).
 * A log that had progress lines gets one for the end too. */
static int price_all(const pass *ps, worker *w, int n, double usable,
                     ap_sweep_result *out, char *err)
{
    queue q = {.interval = ap_progress_log_interval(), .logged = -1};
    q.next_line = ps->progress == AP_PROGRESS_LOG ? q.interval : 1;
    pthread_mutex_init(&q.lock, NULL);
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    int *started = calloc((size_t)n, sizeof *started);
    for (int t = 0; t < n; t++) {
        w[t] = (worker){.ps = ps, .q = &q, .usable = usable, .best = -1, .refused_at = -1};
        /* Thread 0 is this one; what a thread that cannot start would
         * have priced, the others take. */
        if (t > 0 && tid && started)
            started[t] = !pthread_create(&tid[t], NULL, price_share, &w[t]);
    }
    price_share(&w[0]);
    for (int t = 1; t < n; t++)
        if (started && started[t])
            pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&q.lock);
    if (q.shown)
        fprintf(stderr, "\r%60s\r", "");
    if (q.logged >= 0 && q.logged < q.done)
        fprintf(stderr, "sweep: %ld of %ld configurations priced (%.0f s)\n", q.done,
                ps->l->n, ap_progress_now() - ps->t0);
    free(tid);
    free(started);
    return merge(w, n, ps, out, err);
}

static int thread_count(int asked, long work)
{
    long n = asked > 0 ? asked : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 64)
        n = 64;
    return (int)(n < work ? n : work > 0 ? work : 1);
}

int ap_sweep(const ap_graph *g, const ap_cluster *c, const ap_sweep_opts *o,
             ap_sweep_result *out, char *err)
{
    memset(out, 0, sizeof *out);
    double t0 = ap_progress_now();
    int gpn = c->gpus_per_node, gpus = ap_cluster_gpus(c);
    space s = {g, o->launcher, gpus,
               o->max_tp > 0 ? o->max_tp : gpn < gpus ? gpn : gpus,
               g->nlayers > 0 ? g->nlayers : 1, dim_size(g, AP_DIM_HEADS),
               dim_size(g, AP_DIM_KV_HEADS), dim_size(g, AP_DIM_SEQ),
               dim_size(g, AP_DIM_EXPERTS), o->global_batch > 0 ? o->global_batch : 512,
               o->max_local_experts, o->run.cp_comm, ap_model_short_chunk(g, NULL),
               ap_model_short_window(g, NULL)};
    if (s.gbs != floor(s.gbs) || s.gbs > 1e9) {
        snprintf(err, AP_ERR_LEN, "sweep: the global batch must be a whole number "
                 "of sequences, not %g", s.gbs);
        return AP_EINPUT;
    }
    if (o->run.fp8 && o->launcher == AP_LAUNCHER_DEEPSPEED) {
        snprintf(err, AP_ERR_LEN, "sweep: fp8: DeepSpeed's config has no FP8 training "
                 "of its own (Megatron-LM and torchtitan do)");
        return AP_EINPUT;
    }
    if (o->run.fp8 && o->launcher == AP_LAUNCHER_TORCHTITAN && s.experts > 0) {
        snprintf(err, AP_ERR_LEN, "sweep: fp8: torchtitan's float8 converter swaps "
                 "nn.Linear only, leaving the experts' grouped GEMMs in bf16 (Megatron-LM "
                 "runs them in FP8)");
        return AP_EINPUT;
    }
    if (o->run.fp8 && ap_fp8_check(c, o->run.fp8_recipe, err))
        return AP_EINPUT;
    if (o->run.cross_entropy != AP_CE_UNFUSED && o->launcher != AP_LAUNCHER_MEGATRON) {
        snprintf(err, AP_ERR_LEN, "sweep: cross_entropy=%s: %s computes the loss with "
                 "the training script's own cross entropy, not Megatron-Core's fused "
                 "kernels", ap_ce_impl_name(o->run.cross_entropy),
                 ap_launcher_name(o->launcher));
        return AP_EINPUT;
    }
    if (o->run.grad_fp32 && o->launcher != AP_LAUNCHER_MEGATRON) {
        snprintf(err, AP_ERR_LEN, "sweep: grad_fp32=1: %s keeps its own gradient "
                 "buffers, not Megatron-LM's fp32 main gradients",
                 ap_launcher_name(o->launcher));
        return AP_EINPUT;
    }
    if (o->run.fp8 && (g->bf16_first || g->bf16_last) &&
        o->launcher != AP_LAUNCHER_MEGATRON) {
        snprintf(err, AP_ERR_LEN, "sweep: %s has no switch that keeps the first and last "
                 "layers in bf16 under FP8 (--first-last-layers-bf16)",
                 ap_launcher_name(o->launcher));
        return AP_EINPUT;
    }
    if ((o->run.moe_a2a_overlap || o->run.cp_comm != AP_CP_P2P ||
         !ap_opt_dtypes_fp32(&o->run.opt)) && o->launcher != AP_LAUNCHER_MEGATRON) {
        snprintf(err, AP_ERR_LEN, "sweep: %s: %s runs neither Megatron-Core's expert "
                 "all-to-all overlap, Transformer Engine's context-parallel types nor "
                 "the precision-aware optimizer", o->run.moe_a2a_overlap ? "moe_a2a_overlap=1"
                 : o->run.cp_comm != AP_CP_P2P ? "cp_comm" : "main_params, exp_avg, exp_avg_sq",
                 ap_launcher_name(o->launcher));
        return AP_EINPUT;
    }
    list l = {0};
    int n = 0, rc = enumerate(&s, &l);
    ap_megatron *tmpl = malloc(sizeof *tmpl);
    ap_model_shape shape;
    ap_model_shape_of(g, &shape);
    if (!tmpl)
        rc = AP_EINTERNAL;
    worker *w = NULL;
    if (!rc) {
        n = thread_count(o->threads, l.n);
        w = calloc((size_t)n, sizeof *w);
        rc = w ? AP_OK : AP_EINTERNAL;
    }
    if (rc) {
        free(l.v);
        free(tmpl);
        snprintf(err, AP_ERR_LEN, "out of memory listing configurations");
        return AP_EINTERNAL;
    }
    out->candidates = l.n;
    /* What every configuration shares: the run's settings but the FP8
     * weights' gather (not swept, ap_sweep_opts) and the graph's layers
     * kept in bf16. */
    ap_megatron_default(tmpl);
    tmpl->gbs = s.gbs;
    tmpl->run = o->run;
    tmpl->run.fp8_param_gather = 0;
    tmpl->bf16_first = g->bf16_first;
    tmpl->bf16_last = g->bf16_last;
    pass ps = {g, c, &l, tmpl, &shape, o->progress, t0, !o->price_all};
    rc = price_all(&ps, w, n, o->price_all ? 0 : ap_cluster_usable_bytes(c), out, err);
    /* Nothing fits: the leanest configuration's memory is the answer, so
     * the ones left unpriced are priced too. */
    if (!rc && !out->found && out->skipped) {
        memset(out, 0, sizeof *out);
        out->candidates = l.n;
        rc = price_all(&ps, w, n, 0, out, err);
    }
    free(w);
    free(l.v);
    free(tmpl);
    out->seconds = ap_progress_now() - t0;
    return rc;
}

void ap_sweep_result_free(ap_sweep_result *r)
{
    if (r->found)
        ap_plan_free(&r->plan);
    r->found = 0;
}
