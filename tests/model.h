/* model.h -- loading the models the tests read from the source tree, and
 * pricing Megatron-LM configurations of them. */
#ifndef AP_TEST_MODEL_H
#define AP_TEST_MODEL_H

#include "graph/graph.h"
#include "planner/planner.h"
#include "test.h"

/* Loads `rel` (relative to the source root) built with options o (NULL:
 * the defaults); prints the error and returns NULL when it fails. The
 * caller frees the graph. */
static inline ap_graph *ap_test_model_with(const char *rel, const ap_build_opts *o)
{
    char path[512], err[AP_ERR_LEN];
    snprintf(path, sizeof path, "%s/%s", ap_test_src(), rel);
    ap_graph *g = NULL;
    if (ap_graph_load(path, o, &g, err))
        fprintf(stderr, "%s\n", err);
    return g;
}

/* A graph from a Hugging Face config given as text, at its own sizes;
 * NULL, with the reason on stderr, when it does not build. The caller
 * frees it (ap_graph_free). */
static inline ap_graph *ap_test_hf_text(const char *json, const char *source)
{
    char err[AP_ERR_LEN];
    ap_build_opts o;
    ap_build_opts_default(&o);
    ap_graph *g = NULL;
    if (ap_graph_from_hf(json, strlen(json), source, &o, &g, err)) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return g;
}

/* A graph from a Hugging Face config given as text at sequence length
 * `seq` (0: the config's own), named "config.json" in messages; NULL, with
 * the reason in err and on stderr, when it does not build. The caller
 * frees it. */
static inline ap_graph *ap_test_hf_seq(const char *json, int64_t seq, char *err)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = seq;
    ap_graph *g = NULL;
    if (ap_graph_from_hf(json, strlen(json), "config.json", &o, &g, err) != AP_OK) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return g;
}

/* The flags of a Megatron-LM export's MEGATRON_ARGS="..." block into out,
 * starting at the first "--" as a command line does ("" without one). */
static inline void ap_test_megatron_args_of(const char *text, char *out, size_t cap)
{
    const char *p = strstr(text, "MEGATRON_ARGS=\"\n");
    out[0] = 0;
    if (!p)
        return;
    p += strlen("MEGATRON_ARGS=\"\n");
    p += strspn(p, " \n");
    const char *end = strchr(p, '"');
    size_t n = end ? (size_t)(end - p) : 0;
    snprintf(out, cap, "%.*s", (int)n, p);
}

/* The model Megatron-LM flags `args` state alone (a script without MODEL),
 * its vocabulary `vocab`, at `seq` tokens; NULL with err set when they are
 * refused. The caller frees it. */
static inline ap_graph *ap_test_flags_model(const char *args, long vocab, int64_t seq,
                                            char *err)
{
    char line[8192];
    snprintf(line, sizeof line, "%s --tokenizer-type HuggingFaceTokenizer --vocab-size %ld "
             "--make-vocab-size-divisible-by 1", args, vocab);
    ap_megatron m;
    ap_decoder d;
    unsigned char *layers = NULL;
    ap_build_opts o;
    ap_graph *g = NULL;
    ap_megatron_default(&m);
    ap_build_opts_default(&o);
    o.seq = seq;
    if (!ap_megatron_parse_args(line, &m, err) && !ap_megatron_model(&m, &d, &layers, err))
        ap_graph_from_decoder(&d, AP_MEGATRON_SOURCE, &o, &g, err);
    free(layers);
    return g;
}

/* The op of g called `name`, NULL where there is none. */
static inline const ap_op *ap_test_op(const ap_graph *g, const char *name)
{
    int i = ap_graph_find_op(g, name);
    return i >= 0 ? &g->ops[i] : NULL;
}

/* The sliding window of layer i's attention op ("l<i>.attn"): its keys,
 * 0 for none, -1 where the layer has no such op. */
static inline int64_t ap_test_window(const ap_graph *g, int layer)
{
    char name[32];
    snprintf(name, sizeof name, "l%d.attn", layer);
    const ap_op *op = ap_test_op(g, name);
    return op ? op->window : -1;
}

/* The same at sequence length `seq` (0: the model's own). */
static inline ap_graph *ap_test_model(const char *rel, int seq)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = seq;
    return ap_test_model_with(rel, &o);
}

/* Preset `name` at the kernel figures it starts from (datasheet peaks at
 * the published kernel efficiencies), without the training-step scale on
 * its tensor-core rate: the pricing tests check kernels against the
 * benchmarks they were published by, and test_preset_rate checks the
 * scale. `gpus` GPUs in nodes of 8 (a partial node below 8). Presets
 * always load, so there is no error to report; the caller frees it with
 * ap_cluster_free() (presets own no tables, so forgetting is harmless). */
static inline ap_cluster ap_test_kernel_preset(const char *name, int gpus)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    ap_cluster_preset(name, gpus, 8, &c, err);
    ap_cluster_kernel_rate(&c);
    return c;
}

/* The h100-sxm preset at its kernel figures (above). */
static inline ap_cluster ap_test_h100(int gpus)
{
    return ap_test_kernel_preset("h100-sxm", gpus);
}

/* What a GEMM of c's table measured at `seconds` costs at its own shape
 * once c runs at a training-step rate (calib_scale): the multiply in it
 * slows by the factor, the output's store, memory-bound, does not
 * (costmodel/compute.c). The two parts are the roofline's at c's kernel
 * figures, without the table. */
static inline double ap_test_sample_at_rate(const ap_cluster *c, ap_dtype dt, double m,
                                            double n, double k, double seconds)
{
    ap_cluster bare = *c;
    bare.gemm = NULL;
    bare.ngemm = 0;
    ap_cluster_kernel_rate(&bare);
    double kernel = ap_cost_gemm(&bare, dt, m, n, k);
    double store = ap_gemm_out_bytes(dt) * m * n / ap_cluster_hbm_bw(c);
    return seconds * ((kernel - store) / c->calib_scale + store) / kernel;
}

/* Bytes the ops of layer `layer` save for backward (ap_op.saved_bytes: a
 * tensor saved by several ops counts once, whole, before any sharding). */
static inline double ap_test_layer_saved(const ap_graph *g, int layer)
{
    double sum = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].layer == layer)
            sum += g->ops[i].saved_bytes;
    return sum;
}

/* Megatron-LM's flags read into *m from its defaults, as --megatron-args
 * reads them; the status of ap_megatron_parse_args. */
static inline int ap_test_megatron_args(const char *flags, ap_megatron *m)
{
    char err[AP_ERR_LEN];
    ap_megatron_default(m);
    return ap_megatron_parse_args(flags, m, err);
}

/* Prices the Megatron-LM configuration `spec` of model g on `gpus` H100 SXM
 * GPUs in nodes of 8, as ap_megatron_plan does. spec is ap_megatron_parse's
 * "tp=8,mbs=2,..." or, when it starts with "--", Megatron-LM's own flags
 * (ap_megatron_parse_args). Fills *p, and *c with the cluster the plan is
 * priced on when c is not NULL (tests take collective times from it).
 * Returns the status, the message in err; a NULL g (a model that did not
 * load) is AP_EINPUT. Whatever it returns, *p and *c can be freed, and the
 * caller frees them (ap_plan_free, ap_cluster_free). */
static inline int ap_test_megatron_plan(const ap_graph *g, int gpus, const char *spec,
                                        ap_cluster *c, ap_plan *p, char *err)
{
    ap_cluster own;
    ap_cluster *cl = c ? c : &own;
    ap_megatron m;
    memset(p, 0, sizeof *p);
    memset(cl, 0, sizeof *cl);
    ap_megatron_default(&m);
    int rc = AP_EINPUT;
    if (!g)
        snprintf(err, AP_ERR_LEN, "%s: no model to price", spec);
    else if (!(rc = ap_cluster_preset("h100-sxm", gpus, 8, cl, err)))
        rc = strncmp(spec, "--", 2) ? ap_megatron_parse(spec, &m, err)
                                    : ap_megatron_parse_args(spec, &m, err);
    if (!rc)
        rc = ap_megatron_plan(g, cl, &m, p, err);
    if (!c)
        ap_cluster_free(&own);
    return rc;
}

/* ap_test_megatron_plan for a spec that must price: on failure it prints
 * the spec and the message, so that the check that fails says why. */
static inline int ap_test_megatron_plan_ok(const ap_graph *g, int gpus, const char *spec,
                                           ap_cluster *c, ap_plan *p)
{
    char err[AP_ERR_LEN];
    int rc = ap_test_megatron_plan(g, gpus, spec, c, p, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", spec, err);
    return rc;
}

/* The context stage s of plan p was priced in (ap_plan_evaluate): each mesh
 * replica's share of the micro-batch, and the plan's ZeRO stage, precision,
 * TP overlap, gradient-sync mode, FP8 weights, loss kernels and whether
 * the head runs apart from the embedding, as price_stage sets them.
 * Designated fields, so that a field added later stays 0. */
static inline ap_price_ctx ap_test_stage_ctx(const ap_graph *g, const ap_cluster *c,
                                             const ap_plan *p, int s)
{
    const ap_mesh *mesh = &p->stages[s].mesh;
    double replicas = mesh->replicas > 1 ? mesh->replicas : 1;
    ap_price_ctx x = {.g = g, .c = c, .mesh = mesh,
                      .batch = p->micro_batch / replicas, .nmicro = p->nmicro,
                      .zero = p->zero, .run = p->run,
                      .serial_grad = p->serial_grad_sync};
    x.head_apart = ap_plan_head_apart(p, c, &x.embed_group_nodes);
    return x;
}

/* The point in use of the first stage's first transformer layer class: its
 * block is blocks[2], after the pieces before and after the layers. */
static inline const ap_block_point *ap_test_layer(const ap_plan *p)
{
    const ap_stage *st = &p->stages[0];
    return &st->blocks[2].points[st->point[2]];
}

/* The op of that layer class named `name` (its index in the graph) and, in
 * *s, the strategy the plan gives it; -1 when the layer has none. */
static inline int ap_test_layer_op(const ap_graph *g, const ap_plan *p, const char *name,
                                   ap_strategy *s)
{
    const ap_block *b = &p->stages[0].blocks[2];
    const ap_block_point *pt = ap_test_layer(p);
    for (int i = 0; i < b->nops; i++)
        if (!strcmp(g->ops[b->ops[i]].name, name)) {
            *s = pt->strat[i];
            return b->ops[i];
        }
    return -1;
}

/* The communication of layer 0's op `name` as stage 0 of plan p prices
 * it, forward into *fwd and backward into *bwd; -1 in both when the layer
 * has no such op. */
static inline void ap_test_op_comm(const ap_graph *g, const ap_cluster *c, const ap_plan *p,
                                   const char *name, double *fwd, double *bwd)
{
    ap_strategy s;
    int op = ap_test_layer_op(g, p, name, &s);
    *fwd = *bwd = -1;
    if (op < 0)
        return;
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    ap_op_cost oc;
    ap_price_op(&x, op, &s, &oc);
    *fwd = oc.fwd_comm;
    *bwd = oc.bwd_comm;
}

/* Search options for tests of ap_plan_search: `gpus` GPUs, `global_batch`
 * sequences, no progress line and no ILP time limit, so that the plan
 * asserted never depends on how busy the machine is (valgrind runs every
 * thread on one core, fifty times slower). */
static inline ap_plan_opts ap_test_search_opts(int gpus, double global_batch)
{
    ap_plan_opts o;
    ap_plan_opts_default(&o);
    o.gpus = gpus;
    o.global_batch = global_batch;
    o.progress = 0;
    o.ilp_time_limit = 0;
    return o;
}

/* Prices spec on `gpus` H100s (ap_test_megatron_plan) and reads its
 * plan.json back into *d, which the caller frees (ap_plan_desc_free); the
 * step time into *step when step is not NULL. Prints the error and returns
 * non-zero when either fails. */
static inline int ap_test_megatron_desc(const ap_graph *g, int gpus, const char *spec,
                                        ap_plan_desc *d, double *step)
{
    char err[AP_ERR_LEN];
    ap_plan p;
    if (ap_test_megatron_plan(g, gpus, spec, NULL, &p, err)) {
        fprintf(stderr, "%s: %s\n", spec, err);
        return -1;
    }
    char *json = ap_plan_to_json(g, &p);
    int rc = ap_plan_desc_parse(json, strlen(json), "plan.json", d, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    if (step)
        *step = p.step_time;
    free(json);
    ap_plan_free(&p);
    return rc;
}

/* A Megatron-LM export `text` of plan d of g on `gpus` H100s states g: its
 * flags price d's step, and alone (a script without MODEL, vocabulary
 * `vocab`, `seq` tokens) build g's parameters and FLOPs. */
static inline void ap_test_flags_state_the_model(const ap_graph *g, int gpus,
                                                 const ap_plan_desc *d, const char *text,
                                                 long vocab, int64_t seq)
{
    char err[AP_ERR_LEN], args[8192];
    ap_test_megatron_args_of(text ? text : "", args, sizeof args);
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan(g, gpus, args, NULL, &p, err), err);
    CHECK_NEAR(p.step_time, d->step_time, 1e-12);
    ap_plan_free(&p);
    ap_graph *alone = ap_test_flags_model(args, vocab, seq, err);
    CHECK(alone != NULL);
    if (alone) {
        CHECK(alone->total_params == g->total_params);
        CHECK(alone->total_flops == g->total_flops);
        ap_graph_free(alone);
    }
}

#endif
