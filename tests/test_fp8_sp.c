/* FP8 under tensor and sequence parallelism, as Transformer Engine runs it:
 * a column-parallel layer's input is quantized on its sequence shard and
 * gathered in FP8, forward and again in the backward, and the gathered
 * tensor transposed for wgrad; a row-parallel layer's output gradient the
 * same in the backward; under tensorwise scaling each such shard's amax is
 * all-reduced over the tensor-parallel group first; under delayed scaling
 * every exit from fp8_autocast all-reduces the amaxes over the stage. */
#include "model.h"

#include "planner/planner.h"
#include "planner/tables.h"

#define SEQ 4096.0
#define HIDDEN 4096.0

static ap_graph *llama(void)
{
    return ap_test_model("bench/validation/models/llama-2-7b.json", 4096);
}

/* s * h elements: one layer's hidden activation for one sequence. */
static double sh(void) { return SEQ * HIDDEN; }

static double cast(const ap_cluster *c, double elems)
{
    return ap_cost_memop(c, elems, 4 * elems);
}

static double transpose(const ap_cluster *c, double elems)
{
    return ap_cost_memop(c, 0, 2 * elems);
}

/* Rowwise-only quantization of a shard: read 2 bytes, write 1. */
static double shard_cast(const ap_cluster *c, double elems)
{
    return ap_cost_memop(c, elems, 3 * elems);
}

/* The layer's edges' cast changes, summed: forward and backward. */
static void edge_casts(const ap_graph *g, const ap_cluster *c, const ap_plan *p,
                       double *fwd, double *bwd)
{
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    const ap_block *b = &p->stages[0].blocks[2];
    const ap_block_point *bp = ap_test_layer(p);
    ap_block_edge *e = NULL;
    int ne = ap_block_edges(g, b->ops, b->nops, &e);
    *fwd = *bwd = 0;
    for (int k = 0; k < ne; k++) {
        double back;
        *fwd += ap_price_edge_cast(&x, e[k].tensor, b->ops[e[k].u], &bp->strat[e[k].u],
                                   b->ops[e[k].v], &bp->strat[e[k].v], &back);
        *bwd += back;
    }
    free(e);
}

static double kinds_sum(const ap_comm_kinds *k)
{
    return k->tp + k->reshard + k->expert + k->context + k->param_gather + k->grad_reduce +
           k->amax;
}

/* The two gathers before QKV and fc1 move s*h bytes, not 2*s*h, each way;
 * bf16 moves twice that (priced whole, tp_sync=1). */
static void sequence_parallel_gathers_into_fp8_layers_move_one_byte(void)
{
    ap_graph *g = llama();
    ap_cluster c, cb;
    ap_plan p, b;
    CHECK(ap_test_megatron_plan_ok(g, 4, "tp=4,mbs=1,gbs=8,sp=1,fp8=1,tp_sync=1", &c, &p) ==
          0);
    CHECK(ap_test_megatron_plan_ok(g, 4, "tp=4,mbs=1,gbs=8,sp=1,tp_sync=1", &cb, &b) == 0);
    if (g && p.nstages && b.nstages) {
        const ap_block_point *f8 = ap_test_layer(&p), *bf = ap_test_layer(&b);
        double ag = ap_cost_allgather(&c, 4, 1, sh());
        CHECK_NEAR(f8->kfwd.reshard, 2 * ag, 1e-12);
        CHECK_NEAR(f8->kbwd.reshard, 2 * ag, 1e-12);
        CHECK_NEAR(bf->kfwd.reshard, 2 * ap_cost_allgather(&c, 4, 1, 2 * sh()), 1e-12);
        /* The output projection reduce-scatters its bf16 output and gathers
         * its output gradient in FP8. */
        double fwd, bwd;
        ap_test_op_comm(g, &c, &p, "l0.o", &fwd, &bwd);
        CHECK_NEAR(fwd, ap_cost_reducescatter(&c, 4, 1, 2 * sh()), 1e-12);
        CHECK_NEAR(bwd, ag, 1e-12);
        /* The casts the edges move are compute, not communication. */
        CHECK_NEAR(kinds_sum(&f8->kfwd), f8->comm_fwd, 1e-12);
        CHECK_NEAR(kinds_sum(&f8->kbwd), f8->comm_bwd, 1e-12);
    }
    ap_plan_free(&p);
    ap_plan_free(&b);
    ap_cluster_free(&c);
    ap_cluster_free(&cb);
    ap_graph_free(g);
}

/* Llama 2 7B on 4 GPUs, tp 4 with sequence parallelism, in FP8 under
 * delayed scaling (d) and tensorwise scaling (t). */
typedef struct {
    ap_graph *g;
    ap_cluster c;
    ap_plan d, t;
} recipes;

static int recipes_init(recipes *r)
{
    r->g = llama();
    int a = ap_test_megatron_plan_ok(r->g, 4, "tp=4,mbs=1,gbs=8,sp=1,fp8=1", &r->c, &r->d);
    int b = ap_test_megatron_plan_ok(r->g, 4, "tp=4,mbs=1,gbs=8,sp=1,fp8=1,fp8_recipe=tensorwise",
                                     NULL, &r->t);
    return a || b ? -1 : 0;
}

static void recipes_free(recipes *r)
{
    ap_plan_free(&r->d);
    ap_plan_free(&r->t);
    ap_cluster_free(&r->c);
    ap_graph_free(r->g);
}

/* Delayed scaling: the norm fused into linear_qkv and linear_fc1 writes its
 * shard in FP8, so the gathered input's transpose, which the layer made in
 * the forward from a whole input, moves to the backward. Tensorwise: the
 * shard is quantized after its amax (found by the norm), a quarter of the
 * whole tensor's cast, and the transpose follows in the backward. */
static void the_gathered_input_is_quantized_on_its_shard(void)
{
    recipes r;
    if (recipes_init(&r) == 0) {
        double fwd, bwd, in = sh();
        edge_casts(r.g, &r.c, &r.d, &fwd, &bwd);
        CHECK_NEAR(fwd, -2 * transpose(&r.c, in), 1e-12);
        CHECK_NEAR(bwd, 2 * transpose(&r.c, in), 1e-12);
        edge_casts(r.g, &r.c, &r.t, &fwd, &bwd);
        CHECK_NEAR(fwd, 2 * (shard_cast(&r.c, in / 4) - cast(&r.c, in)), 1e-12);
        CHECK_NEAR(bwd, 2 * transpose(&r.c, in), 1e-12);
        CHECK(fwd + bwd < 0);
    } else {
        CHECK(0);
    }
    recipes_free(&r);
}

/* The output projection's output gradient arrives as a sequence shard: TE
 * quantizes the shard and transposes the gathered FP8 tensor, where
 * without sequence parallelism it casts the whole gradient with its
 * transpose in one pass. */
static void a_row_parallel_layer_quantizes_its_gradient_shard(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    ap_plan sp, nosp;
    CHECK(ap_test_megatron_plan_ok(g, 4, "tp=4,mbs=1,gbs=8,sp=1,fp8=1", &c, &sp) == 0);
    CHECK(ap_test_megatron_plan_ok(g, 4, "tp=4,mbs=1,gbs=8,sp=0,fp8=1", NULL, &nosp) == 0);
    ap_strategy s1, s0;
    int o1 = g ? ap_test_layer_op(g, &sp, "l0.o", &s1) : -1;
    int o0 = g ? ap_test_layer_op(g, &nosp, "l0.o", &s0) : -1;
    CHECK(o1 >= 0 && o1 == o0);
    if (o1 >= 0 && o1 == o0) {
        ap_price_ctx x1 = ap_test_stage_ctx(g, &c, &sp, 0);
        ap_price_ctx x0 = ap_test_stage_ctx(g, &c, &nosp, 0);
        ap_op_cost a, b;
        ap_price_op(&x1, o1, &s1, &a);
        ap_price_op(&x0, o0, &s0, &b);
        double out = sh();
        CHECK_NEAR(a.bwd - b.bwd, shard_cast(&c, out / 4) + transpose(&c, out) - cast(&c, out),
                   1e-12);
        CHECK(a.fwd == b.fwd);
    }
    ap_plan_free(&sp);
    ap_plan_free(&nosp);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Tensorwise scaling all-reduces each quantized shard's amax over the four
 * tensor-parallel ranks: before QKV's and fc1's gathers and before the
 * output gradients' of the output projection and fc2. NCCL's LL ring on one
 * node: 3.6 us + 6 hops of 0.47 us. */
static void tensorwise_reduces_each_shards_amax_over_the_tp_group(void)
{
    recipes r;
    if (recipes_init(&r) == 0) {
        const ap_block_point *a = ap_test_layer(&r.d), *b = ap_test_layer(&r.t);
        double amax = 3.6e-6 + 6 * 0.47e-6;
        CHECK_NEAR(ap_cost_allreduce_small(&r.c, 4, 1, 4), amax, 1e-15);
        CHECK_NEAR(b->kfwd.reshard - a->kfwd.reshard, 2 * amax, 1e-12);
        CHECK_NEAR(b->kbwd.tp - a->kbwd.tp, 2 * amax, 1e-12);
        CHECK(r.d.t_kinds.amax > 0 && r.t.t_kinds.amax == 0);
    } else {
        CHECK(0);
    }
    recipes_free(&r);
}

/* A block-scaled cast writes the rowwise and columnwise copies with a
 * scale per 32 elements of each: 1/16 of a byte an element more. */
static double block_cast(const ap_cluster *c, double elems)
{
    return ap_cost_memop(c, elems, 4 * elems + elems / 16);
}

/* Blockwise scaling (DeepSeek-V3's recipe): TE's norm writes bf16 and the
 * input is quantized after it; under sequence parallelism the shard is
 * quantized both ways at once (a 1-D block's columnwise copy cannot be a
 * transpose of its rowwise one) and the backward gathers the columnwise
 * shard, so nothing is transposed. Each block's scale is its own: no amax
 * is all-reduced, over the tensor-parallel group or at the autocast's
 * exits. */
static void blockwise_quantizes_shards_both_ways_and_reduces_no_amax(void)
{
    recipes r;
    ap_plan b;
    int ok = recipes_init(&r) == 0;
    ok = ap_test_megatron_plan_ok(r.g, 4, "tp=4,mbs=1,gbs=8,sp=1,fp8=1,fp8_recipe=blockwise",
                                  NULL, &b) == 0 && ok;
    CHECK(ok);
    if (ok) {
        double fwd, bwd, in = sh();
        edge_casts(r.g, &r.c, &b, &fwd, &bwd);
        CHECK_NEAR(fwd, 2 * (block_cast(&r.c, in / 4) - block_cast(&r.c, in)), 1e-12);
        CHECK(bwd == 0);
        const ap_block_point *d = ap_test_layer(&r.d), *k = ap_test_layer(&b);
        CHECK_NEAR(k->kfwd.reshard, d->kfwd.reshard, 1e-15);
        CHECK_NEAR(k->kbwd.tp, d->kbwd.tp, 1e-15);
        CHECK(r.d.t_kinds.amax > 0 && b.t_kinds.amax == 0);
    }
    ap_plan_free(&b);
    recipes_free(&r);
}

/* The casts on the edges are compute, also where the MLP module is
 * recomputed (its norm and fc1 redone, the shard's cast with them): the
 * communication by kind still adds up to the communication. */
static void recomputed_casts_stay_compute(void)
{
    ap_graph *g = llama();
    ap_plan p;
    CHECK(ap_test_megatron_plan_ok(g, 4, "tp=4,mbs=1,gbs=8,sp=1,fp8=1,recompute=selective,"
                                   "recompute_modules=mlp", NULL, &p) == 0);
    if (g && p.nstages) {
        CHECK(ap_test_layer(&p)->rc_fwd > 0);
        CHECK_NEAR(kinds_sum(&p.t_kinds), p.t_comm, 1e-12);
    }
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* Delayed scaling: one all-reduce of the amaxes at each exit from the
 * autocast, forward and backward, per micro-batch and model chunk, over
 * the stage's 16 ranks on 2 nodes: NCCL's LL tree, 4.4 us + 2 (7 hops of
 * 0.52 x 1.8 us + one network level of 5.0 us) = 27.5 us. A bf16 step has
 * none. */
static void delayed_scaling_reduces_the_amaxes_at_each_autocast_exit(void)
{
    ap_graph *g = llama();
    ap_plan one, two, bf;
    CHECK(ap_test_megatron_plan_ok(g, 16, "tp=8,dp=2,mbs=1,gbs=16,sp=1,fp8=1", NULL, &one) ==
          0);
    CHECK(ap_test_megatron_plan_ok(g, 32, "tp=8,pp=2,dp=2,vpp=2,mbs=1,gbs=16,sp=1,fp8=1",
                                   NULL, &two) == 0);
    CHECK(ap_test_megatron_plan_ok(g, 16, "tp=8,dp=2,mbs=1,gbs=16,sp=1", NULL, &bf) == 0);
    if (g && one.nstages && two.nstages && bf.nstages) {
        double each = 27.504e-6;
        CHECK(one.nmicro == 8);
        CHECK_NEAR(one.t_kinds.amax, 8 * 2 * each, 1e-12);
        CHECK_NEAR(one.stages[0].kinds.amax, 2 * each, 1e-12);
        /* Two model chunks per stage: two exits each way. */
        CHECK_NEAR(two.stages[0].kinds.amax, 2 * 2 * each, 1e-12);
        CHECK_NEAR(two.stages[0].chunk_fwd[0] + two.stages[0].chunk_fwd[1],
                   two.stages[0].fwd, 1e-12);
        CHECK(bf.t_kinds.amax == 0);
    }
    ap_plan_free(&one);
    ap_plan_free(&two);
    ap_plan_free(&bf);
    ap_graph_free(g);
}

int main(void)
{
    RUN(sequence_parallel_gathers_into_fp8_layers_move_one_byte);
    RUN(the_gathered_input_is_quantized_on_its_shard);
    RUN(a_row_parallel_layer_quantizes_its_gradient_shard);
    RUN(tensorwise_reduces_each_shards_amax_over_the_tp_group);
    RUN(blockwise_quantizes_shards_both_ways_and_reduces_no_amax);
    RUN(recomputed_casts_stay_compute);
    RUN(delayed_scaling_reduces_the_amaxes_at_each_autocast_exit);
    return DONE();
}
