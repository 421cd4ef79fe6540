/* test_sp_memory.c -- activations saved for backward under tensor and
 * sequence parallelism, as Megatron-LM saves them (Korthikanti et al. 2022,
 * "Reducing Activation Recomputation in Large Transformer Models", Table 2):
 * per layer s*b*h*34/t bytes with tensor and sequence parallelism,
 * s*b*h*(10 + 24/t) with tensor parallelism alone, 34*s*b*h unsplit, once
 * flash attention or selective recomputation has dropped the 5as/h term.
 * The coefficient 34 counts the two 1-byte dropout masks after attention and
 * MLP; a graph without dropout saves 32 (and 8 + 24/t). */
#include "model.h"
#include "planner/tables.h"

#define SEQ 2048
#define HIDDEN 12288.0
#define HEADS 96.0

static ap_graph *gpt3_attention(int dropout, int flash)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = SEQ;
    o.dropout = dropout;
    o.flash = flash;
    return ap_test_model_with("examples/hf/gpt3-175b.json", &o);
}

static ap_graph *gpt3(int dropout) { return gpt3_attention(dropout, 1); }

/* s*b*h at micro-batch 1: the formulas' unit, in bytes per coefficient. */
static double sbh(void) { return SEQ * 1.0 * HIDDEN; }

/* Flash attention keeps one fp32 log-sum-exp per query row and head, which
 * the formula (without its 5as/h term) leaves out: 4*a*s*b bytes over t. */
static double lse(int t) { return 4 * HEADS * SEQ / t; }

/* The layer's saved bytes, and what the same layer saves per op alone (no
 * edge terms): the figure before sequence shards were priced on the edge. */
static double per_op_saved(const ap_graph *g, const ap_cluster *c,
                           const ap_plan *p)
{
    const ap_block *b = &p->stages[0].blocks[2];
    ap_price_ctx x = ap_test_stage_ctx(g, c, p, 0);
    double sum = 0;
    for (int i = 0; i < b->nops; i++) {
        ap_op_cost oc;
        ap_price_op(&x, b->ops[i], &ap_test_layer(p)->strat[i], &oc);
        sum += oc.act_bytes;
    }
    return sum;
}

static void tensor_and_sequence_parallel_layer_saves_34sbh_over_t(void)
{
    ap_graph *g = gpt3(1);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,mbs=1,gbs=1,sp=1,recompute=selective", &c,
                                     &p, err), err);
    const ap_block_point *layer = ap_test_layer(&p);
    CHECK_NEAR(layer->act_bytes, 34 * sbh() / 4, 0.01);
    CHECK_NEAR(layer->act_bytes, 34 * sbh() / 4 + lse(4), 1e-9);
    /* Each of the two column-parallel inputs (QKV's, fc1's) is saved
     * as its sequence shard, 2sbh/t, not gathered, 2sbh. */
    CHECK_NEAR(per_op_saved(g, &c, &p) - layer->act_bytes,
               2 * (2 * sbh() - 2 * sbh() / 4), 1e-9);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void without_dropout_the_layer_saves_32sbh_over_t(void)
{
    ap_graph *g = gpt3(0);
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,mbs=1,gbs=1,sp=1,recompute=selective", NULL,
                                     &p, err), err);
    const ap_block_point *layer = ap_test_layer(&p);
    /* 201 MB per layer and sequence for GPT-3 175B at t = 4. */
    CHECK_NEAR(layer->act_bytes, 32 * sbh() / 4 + lse(4), 1e-9);
    CHECK(layer->act_bytes < 202e6 && layer->act_bytes > 201e6);
    ap_plan_free(&p);
    ap_graph_free(g);
}

static void tensor_parallel_alone_saves_10_plus_24_over_t(void)
{
    ap_graph *g = gpt3(1);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,mbs=1,gbs=1,sp=0,recompute=selective", &c,
                                     &p, err), err);
    const ap_block_point *layer = ap_test_layer(&p);
    CHECK_NEAR(layer->act_bytes, sbh() * (10 + 24.0 / 4), 0.01);
    CHECK_NEAR(layer->act_bytes, sbh() * (10 + 24.0 / 4) + lse(4), 1e-9);
    /* No gather on any edge: nothing saved as a shard. */
    CHECK(per_op_saved(g, &c, &p) == layer->act_bytes);
    CHECK(layer->kbwd.reshard == 0);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void unsplit_layer_saves_34sbh(void)
{
    ap_graph *g = gpt3(1);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 1, "tp=1,mbs=1,gbs=1,recompute=selective", &c,
                                     &p, err), err);
    const ap_block_point *layer = ap_test_layer(&p);
    CHECK_NEAR(layer->act_bytes, 34 * sbh() + lse(1), 1e-9);
    CHECK(per_op_saved(g, &c, &p) == layer->act_bytes);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Without flash attention the kernel keeps its softmax probabilities
 * (2 bytes), their dropout mask (1) and the dropped probabilities (2):
 * Korthikanti et al.'s 5as^2b/t, 5.6 times the rest of the layer here.
 * Selective recomputation runs the kernel under a checkpoint that keeps
 * its inputs, and so frees exactly that term, as the paper's selective
 * row (34sbh/t) says. */
static void selective_recomputation_frees_5as2b_over_t_without_flash(void)
{
    ap_graph *g = gpt3_attention(1, 0);
    double scores = 5 * HEADS * SEQ * (double)SEQ / 4;
    ap_plan p, none;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,mbs=1,gbs=1,sp=1,recompute=selective", NULL,
                                     &p, err), err);
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,mbs=1,gbs=1,sp=1,recompute=none", NULL,
                                     &none, err), err);
    const ap_block_point *layer = ap_test_layer(&p);
    CHECK_NEAR(layer->act_bytes, 34 * sbh() / 4 + scores, 1e-9);
    CHECK_NEAR(layer->rc_freed, scores, 1e-9);
    CHECK_NEAR(none.stages[0].act_bytes - p.stages[0].act_bytes, 96 * scores, 1e-9);
    ap_plan_free(&p);
    ap_plan_free(&none);
    ap_graph_free(g);
}

/* The saved shard is gathered again for the weight gradients: one more
 * all-gather of s*b*h bf16 over the tensor-parallel group per forward
 * gather (before QKV, before fc1), priced like the forward's; whole here
 * (tp_sync=1), where by default the data-gradient GEMM hides it. */
static void backward_gathers_the_saved_shards_again(void)
{
    ap_graph *g = gpt3(1);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,mbs=1,gbs=1,sp=1,recompute=selective,"
                                        "tp_sync=1", &c, &p, err), err);
    const ap_block_point *bp = ap_test_layer(&p);
    double ag = ap_cost_allgather(&c, 4, 1, 2 * sbh());
    CHECK(ag > 0);
    CHECK_NEAR(bp->kfwd.reshard, 2 * ag, 1e-12);
    CHECK_NEAR(bp->kbwd.reshard, 2 * ag, 1e-12);
    /* The edge's own view: the QKV input's edges carry a third each. */
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &p, 0);
    const ap_block *b = &p.stages[0].blocks[2];
    double regather_sum = 0, saved_sum = 0;
    ap_block_edge *e = NULL;
    int ne = ap_block_edges(g, b->ops, b->nops, &e);
    CHECK(ne > 0);
    for (int k = 0; k < ne; k++) {
        double regather, back;
        saved_sum += ap_price_edge_saved(&x, e[k].tensor, b->ops[e[k].u],
                                         &bp->strat[e[k].u], b->ops[e[k].v],
                                         &bp->strat[e[k].v], &regather);
        double total = ap_price_edge(&x, e[k].tensor, b->ops[e[k].u],
                                     &bp->strat[e[k].u], b->ops[e[k].v],
                                     &bp->strat[e[k].v], &back);
        CHECK(regather <= back * (1 + 1e-12) && back <= total);
        regather_sum += regather;
    }
    free(e);
    CHECK_NEAR(regather_sum, 2 * ag, 1e-12);
    CHECK_NEAR(saved_sum, -2 * (2 * sbh() - 2 * sbh() / 4), 1e-12);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

/* Two nodes of two choices whose pair (1, 1) saves memory on the edge: only
 * with that term does a budget below both nodes' second choices admit it. */
static void ilp_memory_row_counts_edge_terms(void)
{
    double c0[] = {2, 1}, c1[] = {2, 1};
    double m0[] = {10, 12}, m1[] = {10, 12};
    const double *cost[] = {c0, c1}, *mem[] = {m0, m1};
    int ns[] = {2, 2};
    double ecost[] = {0, 0, 0, 0}, emem[] = {0, 0, 0, -5};
    ap_ilp_edge ed = {0, 1, ecost, 0, 0, NULL, NULL, emem};
    ap_ilp ilp = {.nnodes = 2, .nstrat = ns, .cost = cost, .mem = mem,
                  .nedges = 1, .edges = &ed, .mem_limit = 20};
    int choice[2];
    ap_ilp_result r;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_ilp_solve(&ilp, choice, &r, err), err);
    CHECK(r.status == AP_ILP_OPTIMAL);
    CHECK(choice[0] == 1 && choice[1] == 1);
    CHECK_NEAR(r.memory, 19, 1e-12);
    CHECK_NEAR(r.objective, 2, 1e-9);
    /* Without the edge term the same budget admits only the slow pair. */
    ed.mem = NULL;
    REQUIRE_OK(ap_ilp_solve(&ilp, choice, &r, err), err);
    CHECK(choice[0] == 0 && choice[1] == 0);
    CHECK_NEAR(r.memory, 20, 1e-12);
    CHECK_NEAR(r.objective, 4, 1e-9);
    /* The leanest, memory as the objective, is the pair the edge term
     * favours, not the nodes' own leanest choices (10 + 10). */
    ed.mem = emem;
    ilp.mem_limit = 0;
    ilp.minimise_memory = 1;
    REQUIRE_OK(ap_ilp_solve(&ilp, choice, &r, err), err);
    CHECK(choice[0] == 1 && choice[1] == 1);
    CHECK_NEAR(r.memory, 19, 1e-12);
}

/* The block ILP under a budget of the Megatron layout's memory (model states
 * and saved activations, sequence shards priced on the edges): it fits, the
 * ILP's memory of its answer is what pricing the answer gives, and without
 * the edge terms the same answer would be over the budget. */
static void block_ilp_fits_a_budget_only_the_saved_shards_meet(void)
{
    ap_graph *g = gpt3(0);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan(g, 4, "tp=4,mbs=1,gbs=1,sp=1,recompute=selective", &c,
                                     &p, err), err);
    const ap_block *b = &p.stages[0].blocks[2];
    ap_price_ctx x = ap_test_stage_ctx(g, &c, &p, 0);
    double budget = ap_test_layer(&p)->param_bytes + ap_test_layer(&p)->act_bytes;
    ap_tables t;
    int rc = ap_tables_build(&x, b->ops, b->nops, 1, &t, err);
    CHECK(rc == AP_OK);
    int *choice = calloc((size_t)b->nops, sizeof *choice);
    ap_strategy *s = calloc((size_t)b->nops, sizeof *s);
    ap_ilp ilp = ap_tables_ilp(&t);
    ilp.mem_limit = budget * (1 + 1e-9);
    ap_ilp_result r;
    if (rc == AP_OK && ap_ilp_solve(&ilp, choice, &r, err) == AP_OK &&
        r.status <= AP_ILP_FEASIBLE) {
        ap_tables_strategies(&t, choice, s);
        ap_block_point bp;
        ap_block_price(&x, b->ops, b->nops, s, &bp);
        CHECK_NEAR(r.memory, bp.param_bytes + bp.act_bytes, 1e-9);
        CHECK(r.memory <= ilp.mem_limit);
        double nodes = 0;
        for (int k = 0; k < t.ngroups; k++)
            nodes += t.mem[k][choice[k]];
        CHECK(nodes > ilp.mem_limit);
        /* The leanest the ILP reaches is no more than the budget. */
        double lean = INFINITY;
        CHECK(ap_tables_leanest(&t, 0, &lean, err) == AP_OK);
        CHECK(lean <= r.memory * (1 + 1e-9));
    } else {
        CHECK(0);
    }
    free(choice);
    free(s);
    ap_tables_free(&t);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(tensor_and_sequence_parallel_layer_saves_34sbh_over_t);
    RUN(without_dropout_the_layer_saves_32sbh_over_t);
    RUN(tensor_parallel_alone_saves_10_plus_24_over_t);
    RUN(unsplit_layer_saves_34sbh);
    RUN(selective_recomputation_frees_5as2b_over_t_without_flash);
    RUN(backward_gathers_the_saved_shards_again);
    RUN(ilp_memory_row_counts_edge_terms);
    RUN(block_ilp_fits_a_budget_only_the_saved_shards_meet);
    return DONE();
}
