/* moe_overlap.c -- one MoE layer of two micro-batches merged, as
 * Megatron-Core's combined 1F1B runs it (--overlap-moe-expert-parallel-comm).
 *
 * TransformerLayerSchedulePlan.run (megatron/core/models/common/
 * model_chunk_schedule_plan.py) splits a layer into schedule nodes, the
 * all-to-alls on a communication stream and the rest on the compute
 * stream, and issues the forward f of one micro-batch and the backward b of
 * another so that each all-to-all of one runs beside compute of the other:
 *
 *   comm:    combine_b  | dispatch_f | dispatch_b | combine_f
 *   compute: attn_f     | expert_b   | expert_f   | attn_b
 *
 * Each half's nodes wait for their own previous node (one CUDA event per
 * micro-batch's plan) and each stream runs in issue order, so the layer is
 * four phases, each as long as its longer side:
 *
 *   max(attn_f, combine_b) + max(expert_b, dispatch_f)
 *     + max(dispatch_b, expert_f) + max(combine_f, attn_b).
 *
 * The next layer starts when both streams have finished (its attn_f needs
 * combine_f, its combine_b needs attn_b). Under --delay-wgrad-compute the
 * experts' weight-gradient GEMMs (w) leave expert_b: the backward dispatch
 * starts after the data gradient (d = expert_b - w), and w runs on the
 * compute stream before expert_f, so the middle two phases become
 *
 *   max(max(d, dispatch_f) + dispatch_b, max(d + w, dispatch_f) + expert_f).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"
#include "planner/tables.h"

double ap_moe_pair_time(const ap_moe_phases *f, const ap_moe_phases *b, int delay_wgrad)
{
    double first = fmax(f->attn, b->combine), last = fmax(f->combine, b->attn);
    if (!delay_wgrad)
        return first + fmax(b->expert, f->dispatch) + fmax(b->dispatch, f->expert) + last;
    double dgrad = b->expert - b->wgrad;
    double mid = fmax(fmax(dgrad, f->dispatch) + b->dispatch,
                      fmax(b->expert, f->dispatch) + f->expert);
    return first + mid + last;
}

/* Which side of the layer op `op` runs on: the token exchange's
 * all-to-alls are apart; the dispatch's permutation ends the attention
 * node (dispatch preprocess), the combine's unpermutation follows the
 * experts; the experts' ops (expert-tensor-parallel collectives included)
 * are the expert node; everything else the attention node. */
typedef enum { SIDE_ATTN, SIDE_EXPERT } side;

static side side_of(const ap_graph *g, int op)
{
    ap_op_kind k = g->ops[op].kind;
    if (k == AP_OP_DISPATCH)
        return SIDE_ATTN;
    return k == AP_OP_COMBINE || ap_expert_op(g, op) ? SIDE_EXPERT : SIDE_ATTN;
}

static void add_side(ap_moe_phases *p, side s, double t)
{
    if (s == SIDE_EXPERT)
        p->expert += t;
    else
        p->attn += t;
}

static void add_op(const ap_price_ctx *x, int op, const ap_strategy *s,
                   ap_moe_phases *f, ap_moe_phases *b)
{
    ap_op_cost c;
    ap_price_op(x, op, s, &c);
    ap_op_kind k = x->g->ops[op].kind;
    side sd = side_of(x->g, op);
    if (k == AP_OP_DISPATCH || k == AP_OP_COMBINE) {
        double *fc = k == AP_OP_DISPATCH ? &f->dispatch : &f->combine;
        double *bc = k == AP_OP_DISPATCH ? &b->dispatch : &b->combine;
        *fc += c.fwd_comm;
        *bc += c.bwd_comm;
        add_side(f, sd, c.fwd);
        add_side(b, sd, c.bwd);
        return;
    }
    add_side(f, sd, c.fwd + c.fwd_comm);
    add_side(b, sd, c.bwd + c.bwd_comm);
    if (sd == SIDE_EXPERT && x->g->ops[op].kind == AP_OP_MATMUL)
        b->wgrad += c.bwd / 2;
}

void ap_moe_block_phases(const ap_price_ctx *x, const int *ops, int nops,
                         const ap_strategy *strat, ap_moe_phases *f, ap_moe_phases *b)
{
    memset(f, 0, sizeof *f);
    memset(b, 0, sizeof *b);
    for (int i = 0; i < nops; i++)
        add_op(x, ops[i], &strat[i], f, b);
    ap_block_edge *e = NULL;
    int ne = ap_block_edges(x->g, ops, nops, &e);
    for (int k = 0; k < ne; k++) {
        double back;
        double total = ap_price_edge(x, e[k].tensor, ops[e[k].u], &strat[e[k].u],
                                     ops[e[k].v], &strat[e[k].v], &back);
        side sd = side_of(x->g, ops[e[k].v]);
        add_side(f, sd, total - back);
        add_side(b, sd, back);
    }
    free(e);
}
