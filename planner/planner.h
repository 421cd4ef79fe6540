/* planner.h -- sharding strategies, plan pricing, and the two-level search.
 *
 * Intra-op: for one stage (a set of layers on a logical 2-D mesh of its GPUs)
 * every op picks a strategy: which dimension label each mesh axis splits. The
 * communication a strategy implies (partial sums to reduce, layouts to
 * convert between producer and consumer, gradients to synchronise) follows
 * from the labels; an ILP solved with GLPK picks the cheapest set.
 *
 * Inter-op: a dynamic program cuts the layers into pipeline stages, gives each
 * a submesh, and searches micro-batching, recomputation and ZeRO; the chosen
 * schedule is then simulated by costmodel/ for the final prediction.
 *
 * Ownership: ap_plan and everything inside it belongs to the caller, freed by
 * ap_plan_free(). Strings returned by *_to_json are the caller's to free().
 */
#ifndef AP_PLANNER_H
#define AP_PLANNER_H

#include <stdio.h>

#include "costmodel/costmodel.h"
#include "graph/graph.h"

/* A logical mesh over a stage's GPUs, ranks first..first+d0*d1-1 numbered
 * node-major; axis 1 groups are consecutive ranks, axis 0 groups are strided.
 *
 * A stage may hold several data-parallel replicas of the mesh (Megatron's
 * dp beside cp: the batch is split over the replicas, the sequence over
 * axis 0): replica j holds ranks first + j*d0*d1 onwards. d and nodes then
 * describe one replica, the one spanning the most nodes; every op is priced
 * on it with the replica's share of the micro-batch. A gradient is reduced
 * over the replicas too, times the axes that replicate it. */
typedef struct {
    int d[2];
    int first;     /* first global rank */
    int nodes[3];  /* nodes an axis group spans: axis 0, axis 1, both (mask 3) */
    int replicas;  /* copies of the d0 x d1 mesh; 1 (0 reads as 1): none */
    /* Nodes a gradient-synchronisation group spans: the ranks holding the
     * same shard in every replica, along the axes in mask (index 0 to 3:
     * none, axis 0, axis 1, both); the most over all such groups. */
    int sync_nodes[4];
    /* MoE parallel folding (Megatron-Core's expert process groups): the
     * ops of the experts (ap_expert_op) run on a mesh of their own over the
     * same ranks, axis 0 the expert-parallel group (ep), axis 1 the
     * expert-tensor-parallel one (etp), and experts[2] replicas of it (the
     * expert-data-parallel copies, edp), each with its share of the
     * micro-batch: experts = {ep, etp, edp}. All 0 (ap_mesh_init): the
     * expert ops lie on this mesh like every other op. */
    int experts[3];
} ap_mesh;

int ap_mesh_init(ap_mesh *m, int d0, int d1, int first, int gpus_per_node);
/* Gives mesh m an expert mesh (ep, etp) with edp replicas from m->first,
 * etp consecutive ranks, then ep of those groups, then the edp copies:
 * Megatron-Core's expert rank order. AP_EINPUT unless ep*etp*edp is the
 * mesh's GPUs (replicas included). */
int ap_mesh_fold(ap_mesh *m, int ep, int etp, int edp);
/* The expert mesh of m as a mesh of its own (ap_mesh_init_replicated);
 * m itself when m has none. */
void ap_mesh_expert_mesh(const ap_mesh *m, int gpus_per_node, ap_mesh *out);
/* The same for `replicas` copies of the d0 x d1 mesh, r*d0*d1 ranks from
 * `first`; replicas = 1 is ap_mesh_init. */
int ap_mesh_init_replicated(ap_mesh *m, int replicas, int d0, int d1, int first,
                            int gpus_per_node);

/* A strategy: the label each axis splits (0 = none; the same label on both
 * axes splits it d0*d1 ways), and for an axis that splits a contracted label,
 * the output label the partial sum is reduce-scattered onto (0 = all-reduce). */
typedef struct {
    char axis[2];
    char rs[2];
} ap_strategy;

/* How Megatron-Core's MoE layers move tokens to their experts' ranks:
 * the alltoall dispatcher (--moe-token-dispatcher-type alltoall), every
 * routed copy in an NCCL all-to-all; the flex dispatcher with DeepEP or
 * HybridEP (--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend
 * deepep|hybridep), each token once to each node and GPU that holds one of
 * its experts (ap_cost_deepep); or the allgather dispatcher (Megatron-Core's
 * default), every token gathered to every rank of the group and the
 * outputs reduce-scattered back. */
typedef enum {
    AP_DISPATCH_ALLTOALL,
    AP_DISPATCH_DEEPEP,
    AP_DISPATCH_HYBRIDEP,
    AP_DISPATCH_ALLGATHER
} ap_dispatcher;

/* How Transformer Engine scales the FP8 tensors of a run with fp8
 * (--fp8-recipe): delayed scaling takes each tensor's scale from earlier
 * steps' amaxes, the amax found on the way of the cast; tensorwise
 * (current) scaling finds the tensor's amax first, in a pass of its own
 * over it, then casts; blockwise (DeepSeek-V3's: 1 x 128 activation and
 * gradient blocks, 128 x 128 weight blocks) and mxfp8 (32-element blocks,
 * Blackwell) give each block its own scale, found by the cast itself
 * (docs/cost-model.md, FP8). */
typedef enum { AP_FP8_DELAYED, AP_FP8_TENSORWISE, AP_FP8_BLOCKWISE, AP_FP8_MXFP8 } ap_fp8_recipe;

/* "delayed", "tensorwise", "blockwise" or "mxfp8"; a static string. */
const char *ap_fp8_recipe_name(ap_fp8_recipe r);
/* AP_EINPUT unless name is one of those. */
int ap_fp8_recipe_parse(const char *name, ap_fp8_recipe *out);
/* Whether recipe r scales blocks of a tensor (blockwise, mxfp8). */
int ap_fp8_recipe_blocks(ap_fp8_recipe r);

/* How a launcher runs each step, apart from the parallel layout: the
 * precision of the linear layers, the overlaps and kernels it picks, the
 * dtypes of gradients and optimizer states. Every struct that carries them
 * (the pricing context, a plan, the search and sweep options, a Megatron-LM
 * configuration, a plan read back and its launcher degrees) embeds one as
 * `run`, so that a setting is added here once and passed on by one
 * assignment. Zeroed, it is Megatron-LM's defaults. How recomputation
 * checkpoints layers (ap_recompute_method) and whether the gradient
 * reduction overlaps the backward are not here: the first belongs to each
 * stage's recomputation, which the searches choose, and the second depends
 * on the launcher and the ZeRO stage (ap_launcher_overlaps_grad). */
typedef struct {
    int fp8;          /* 1: linear layers run their GEMMs in FP8 (ap_fp8_linear) */
    ap_fp8_recipe fp8_recipe; /* under fp8; delayed, the zero, by default */
    int tp_overlap;   /* 1: sequence-parallel collectives of linear layers
                         overlap their GEMMs (ap_tp_overlap_exposed) */
    int tp_sync;      /* 1: a column-parallel layer's backward waits for
                         its input gradient's reduction and its input's
                         re-gather, as Megatron-LM did before its
                         asynchronous linear layers (2021); 0 runs them
                         beside its GEMMs (ap_tp_async_exposed) */
    int fp8_param_gather; /* 1 (with fp8): an FP8 linear layer's weight is
                         Transformer Engine's FP8 tensor with no bf16 copy,
                         and ZeRO gathers it in FP8 (--fp8-param-gather) */
    ap_ce_impl cross_entropy; /* the loss's kernels; 0 is Megatron's unfused
                         default (ap_cost_cross_entropy_impl) */
    /* 1: gradients are held and reduced in fp32, 4 bytes each: Megatron-LM's
     * main_grad buffer under --bf16 without --grad-reduce-in-bf16
     * (grad_reduce_in_fp32), reduced over the data-parallel group (and
     * between tied copies) in fp32. 0: in the model's 2-byte dtype. */
    int grad_fp32;
    /* Context parallelism's communication type for a flash attention whose
     * sequence is split (--cp-comm-type): 0 is Transformer Engine's p2p
     * ring (ap_cost_attention_cp_comm, ap_cost_cp_comm). */
    ap_cp_comm cp_comm;
    /* The optimizer states' dtypes (Megatron-LM's precision-aware
     * optimizer): their bytes a parameter where held, sharded or not, and
     * the bytes the optimizer step streams. Zeroed: fp32 main weights and
     * moments, 12 bytes a parameter. */
    ap_opt_dtypes opt;
    /* 1: Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm):
     * one warm-up forward more per stage, and each steady-state forward
     * merged with a backward so that each one's all-to-alls run beside the
     * other's compute (ap_stage.a2a_save, ap_pipe_spec.pair_save). Zero,
     * the default, prices them exposed. delay_wgrad (only with it,
     * --delay-wgrad-compute): the experts' weight gradients wait for the
     * backward dispatch to start. Plans price them; a single stage's
     * prices do not read them. */
    int moe_a2a_overlap, delay_wgrad;
    /* 1: Megatron-Core's --defer-embedding-wgrad-compute: the last stage
     * runs the output layer's weight-gradient GEMM of its first
     * wgrad_deferral_limit micro-batches (0: all) after its last pass
     * (ap_pipe_spec.defer; docs/cost-model.md). Only with pp > 1. */
    int defer_wgrad, wgrad_deferral_limit;
    /* --ddp-bucket-size: the parameters a gradient (and, under the
     * distributed optimizer, parameter) bucket holds when the reduction
     * overlaps the backward; 0, the default, Megatron-Core's max(40M,
     * 1M x dp). Without the overlap Megatron-Core ignores it. */
    int ddp_bucket;
    /* 1: --no-gradient-accumulation-fusion: a weight-gradient GEMM writes
     * the gradient in its own dtype and a separate kernel adds it into
     * main_grad. 0, the default: the GEMM accumulates into main_grad. */
    int no_grad_fusion;
    /* Under selective recomputation, the Megatron-Core modules it redoes
     * (--recompute-modules; ap_module bits of graph.h): 0 reads as
     * core_attn alone, Megatron-Core's default (ap_run_rc_modules). */
    unsigned recompute_modules;
    /* CUDA graphs captured over the step's kernels (--cuda-graph-impl):
     * 0 none, else AP_CUDA_GRAPH_LOCAL (Megatron-Core's own capture) or
     * AP_CUDA_GRAPH_TE (Transformer Engine's make_graphed_callables).
     * Priced as without them: autopar prices no host time, so launch
     * savings change no price, and their static buffers are not counted;
     * reports carry a caveat (ap_plan_caveat_cuda_graph). */
    int cuda_graph;
    /* The MoE token dispatcher; alltoall, the zero, by default. */
    ap_dispatcher dispatcher;
    /* 1: Megatron-Core's SequentialMLP, its experts without
     * --moe-grouped-gemm: each local expert's MLP runs after the one
     * before, each GEMM alone on the stream and each activation a kernel of
     * its own. 0, the default: Transformer Engine's GroupedLinear
     * (ap_cost_grouped_gemm). */
    int sequential_experts;
    /* 1: --moe-shared-expert-overlap: the shared experts run on a stream of
     * their own, fc1 and its activation beside the dispatch's exchange and
     * fc2 beside the combine's, forward and backward (ap_block_price). */
    int shared_overlap;
    /* Token dropping (--moe-expert-capacity-factor F, 0 for dropless, the
     * default): each expert takes at most F times its even share of the
     * routed copies, and with pad_capacity (--moe-pad-expert-input-to-
     * capacity) exactly that many, padded. Under the balanced routing
     * autopar prices, the experts' copies, their GEMMs and the exchanges
     * scale by min(F, 1), padded by F (ap_capacity_scale). */
    double capacity_factor;
    int pad_capacity;
} ap_run_settings;

/* The factor token dropping puts on the experts' copies under r: 1
 * dropless, else min(F, 1), or F when padded to the capacity. */
double ap_capacity_scale(const ap_run_settings *r);

enum { AP_CUDA_GRAPH_LOCAL = 1, AP_CUDA_GRAPH_TE = 2 };

/* "alltoall", "deepep", "hybridep" or "allgather"; a static string. */
const char *ap_dispatcher_name(ap_dispatcher d);
/* AP_EINPUT unless name is one of those. */
int ap_dispatcher_parse(const char *name, ap_dispatcher *out);
/* "none", "local" or "transformer_engine", as --cuda-graph-impl spells
 * them; a static string. */
const char *ap_cuda_graph_name(int impl);
/* AP_EINPUT unless name is one of those. */
int ap_cuda_graph_parse(const char *name, int *out);

/* The modules selective recomputation redoes under r: its
 * recompute_modules, or core_attn alone where that is 0. */
unsigned ap_run_rc_modules(const ap_run_settings *r);
/* The recompute_modules setting for a set of modules: 0 for core_attn
 * alone, the default, so that a plan states only other sets. */
unsigned ap_rc_modules_setting(unsigned modules);
/* Reads module names separated by any of `seps` ("core_attn+mlp") into
 * *out; AP_EINPUT with err ("unknown module ...", "names no module") for
 * a name that is none or a list without one. */
int ap_rc_modules_parse(const char *list, const char *seps, unsigned *out, char *err);
/* Megatron-Core's TransformerConfig refusals of r's recompute_modules
 * that depend on the model and the run: moe_act and layernorm discard a
 * tensor an FP8 layer would otherwise keep its own copy of, which
 * Transformer Engine allows only outside delayed scaling; mla_up_proj
 * needs multi-latent attention; moe cannot run under the all-to-all
 * overlap. AP_EINPUT with err naming the rule. */
int ap_rc_modules_check(const ap_graph *g, const ap_run_settings *r, char *err);
/* Writes the names of `modules` into buf, in Megatron-Core's order, `sep`
 * between them. */
void ap_rc_modules_format(unsigned modules, const char *sep, char *buf, size_t len);

/* Bytes of one gradient element under r: 4 with grad_fp32, else 2. */
double ap_run_grad_bytes(const ap_run_settings *r);

/* The context every price is taken in. */
typedef struct {
    const ap_graph *g;
    const ap_cluster *c;
    const ap_mesh *mesh;
    double batch;     /* samples in one micro-batch on the mesh (all its
                         data-parallel ways together; a stage with mesh
                         replicas gives each replica its share) */
    int nmicro;       /* micro-batches per step, for amortising gradient sync */
    ap_zero zero;
    ap_run_settings run; /* how the launcher runs the step */
    int serial_grad;  /* 1: the gradient reduction waits for the backward
                         (no --overlap-grad-reduce), in one bucket */
    /* 1: the ops after the layers run on another stage than those before
     * them (pp > 1), so a parameter both read (tied word embeddings) is
     * two copies, as Megatron-LM keeps them: the last stage holds its own
     * (model states and data-parallel reduction), and the two stages
     * all-reduce its gradient once per step (tied_sync). 0: one copy,
     * stored and reduced once, at its first consumer. */
    int head_apart;
    /* Under head_apart, the nodes the embedding group (a rank of the
     * stage with the ops before the layers and its counterpart on the stage
     * with those after) spans: 2 when the two stages' first ranks are on
     * different nodes, else 1 (0 reads as 1). */
    int embed_group_nodes;
    /* The search's --max-experts-per-gpu: ap_strategies leaves out the
     * strategies of an expert GEMM that keep more experts on a GPU; 0:
     * any. */
    int max_local_experts;
} ap_price_ctx;

/* Megatron-Core's overlap of the MoE all-to-alls across micro-batches
 * (--overlap-moe-expert-parallel-comm; docs/cost-model.md, "Mixture of
 * experts"). One layer of one micro-batch, split as the combined 1F1B
 * splits it into schedule nodes (TransformerLayerSchedulePlan): the
 * compute before the dispatch (attention, norms, router, permutation),
 * the dispatch all-to-all, the experts' compute, the combine all-to-all.
 * Forward in that order; backward the reverse, with wgrad the experts'
 * weight-gradient GEMMs, part of `expert` (half each expert GEMM's
 * backward: the wgrad GEMM has the forward's FLOPs). */
typedef struct {
    double attn, dispatch, expert, combine, wgrad;
} ap_moe_phases;

/* Seconds one layer takes in a merged pair: the forward f of one
 * micro-batch and the backward b of another, each all-to-all on the
 * communication stream beside the other's compute. With delay_wgrad
 * (--delay-wgrad-compute) the experts' wgrad runs after the backward
 * dispatch starts, beside it. Never less than either half's compute,
 * never more than both run one after the other. */
double ap_moe_pair_time(const ap_moe_phases *f, const ap_moe_phases *b, int delay_wgrad);
/* The phases of a block (one layer) under strategies strat, per
 * micro-batch; edges go with their consumer's side. Dense layers have no
 * all-to-all, and ap_moe_pair_time gives them the two halves' sum. */
void ap_moe_block_phases(const ap_price_ctx *x, const int *ops, int nops,
                         const ap_strategy *strat, ap_moe_phases *f, ap_moe_phases *b);

/* Whether op `op` belongs to the experts of a MoE layer, the ops an
 * expert mesh runs: an op over the experts label other than the router
 * (whose weight is a dense parameter of every rank). Under folding, an
 * expert op is priced on the expert mesh; an edge between an expert op and
 * another op costs nothing, as the dispatcher reads each rank's own tokens
 * where attention left them and its all-to-all is the dispatch's own. */
int ap_expert_op(const ap_graph *g, int op);

/* FP8 training as Transformer Engine runs it under Megatron-LM's
 * --fp8-format (docs/cost-model.md, "FP8"): whether op `op` is a linear
 * layer whose GEMMs run at the FP8 peak, that is a matmul of an activation
 * by a parameter inside a transformer layer, not the LM head (an output
 * with a vocabulary label), not attention, and not in a layer kept in bf16
 * (ap_op.keep_bf16, --first-last-layers-bf16). */
int ap_fp8_linear(const ap_graph *g, int op);
/* AP_EINPUT, naming the cluster's GPU, when it has no FP8 tensor cores
 * (peak_flops[AP_FP8] is 0, as on the A100), or when recipe r is mxfp8 and
 * the GPU is a Hopper, which Transformer Engine refuses it on. */
int ap_fp8_check(const ap_cluster *c, ap_fp8_recipe r, char *err);

/* Tensor-parallel communication overlap as Transformer Engine's userbuffers
 * run it under Megatron-LM's --tp-comm-overlap (docs/cost-model.md,
 * "Tensor-parallel communication overlap"), by the method TE's default
 * configuration gives each collective. */
typedef enum {
    AP_UB_RING,     /* all-gather into a GEMM by ring exchange, tp chunks */
    AP_UB_PIPELINE, /* GEMM then reduce-scatter, in AP_UB_SPLITS chunks */
    AP_UB_BULK      /* a whole collective beside a whole backward GEMM */
} ap_ub_method;

#define AP_UB_SPLITS 4 /* TE's num_splits of a pipelined overlap */
#define AP_UB_NUM_SM 16 /* TE's num_sm of a pipelined or bulk overlap */

/* Exposed seconds of a collective of `comm` seconds overlapped by method m
 * with a GEMM of `gemm` seconds on a tp-way group, the GEMM's slowdown from
 * the SMs the communication kernel holds included; never more than comm. */
/* Without userbuffers, a column-parallel linear layer's backward
 * (Transformer Engine's Linear and LayerNormLinear, Megatron-Core's
 * LinearWithGradAccumulationAndAsyncCommunication) starts the re-gather of
 * its sequence-parallel input before its data-gradient GEMM and the
 * reduction of its input gradient before its weight-gradient GEMM, each on
 * NCCL's stream: the exposed part of such a collective of `comm` seconds
 * beside a GEMM of `gemm` (docs/cost-model.md, "Tensor-parallel
 * communication without userbuffers"). */
double ap_tp_async_exposed(double comm, double gemm);
double ap_tp_overlap_exposed(const ap_cluster *c, ap_ub_method m, double comm,
                             double gemm, int tp);

/* Size of a label at the context's batch (batch and capacity labels scale). */
double ap_label_size(const ap_price_ctx *x, char label);

/* The most strategies one op has: 7 choices per axis (none or one of up to
 * six labels), reduce-scatter variants included, stay below it. */
#define AP_MAX_STRATEGIES 96

/* All valid strategies of op `i` on the mesh: labels that divide, by kind.
 * Fills out[] (at most max) and returns the count. */
int ap_strategies(const ap_price_ctx *x, int op, ap_strategy *out, int max);

/* The price of one op under one strategy, per micro-batch unless said. */
typedef struct {
    double fwd, bwd;       /* compute seconds */
    double fwd_comm, bwd_comm; /* the op's own collectives (partial sums) */
    double grad_sync;      /* per step: gradient reduction over replicas */
    double tied_sync;      /* of grad_sync: the all-reduce of a tied
                              parameter's gradient between the first and
                              last stage (head_apart), which waits for the
                              data-parallel reduction and is never hidden
                              behind the backward */
    double param_sync;     /* of grad_sync: the all-gather of the updated
                              parameters after ZeRO-1/2's optimizer step,
                              which no backward hides (ap_plan's
                              serial_param_gather says what does) */
    double param_buckets;  /* the buckets param_sync's elements fill: the
                              tensor's share of the group's bucket size */
    double param_bytes;    /* model states per GPU (params+grads+optimizer) */
    double grad_bytes;     /* of param_bytes: the gradients */
    double opt_bytes;      /* of param_bytes: the optimizer's states */
    double act_bytes;      /* saved for backward, per GPU, per micro-batch */
    double flops;          /* forward FLOPs per GPU (for reports) */
    double fp8_weight_bytes; /* of param_bytes: FP8 weights and their
                                transposes, which the optimizer does not
                                update (under fp8_param_gather the weight
                                itself: it is rewritten from the fp32 main
                                weights, not updated in place) */
} ap_op_cost;

void ap_price_op(const ap_price_ctx *x, int op, const ap_strategy *s,
                 ap_op_cost *out);
/* The experts one GPU holds of expert matmul `op` under strategy s (the
 * groups of its grouped GEMM); 0 when op is not an expert matmul. */
double ap_local_experts(const ap_price_ctx *x, int op, const ap_strategy *s);
/* Forward plus backward resharding time on the edge from the producer of
 * tensor `t` (under strategy ps) to consumer op `cons` (under cs); the
 * backward part alone goes to *bwd when it is not NULL. It includes what
 * the edge changes in an FP8 consumer's input cast (ap_price_edge_cast). */
double ap_price_edge(const ap_price_ctx *x, int t, int prod,
                     const ap_strategy *ps, int cons, const ap_strategy *cs,
                     double *bwd);
/* The compute part of ap_price_edge: an FP8 linear layer prices its input's
 * cast as if the input arrived whole; an edge that gathers it from sequence
 * shards makes TE quantize the shard and transpose the gathered FP8 tensor
 * in the backward instead. Returns the forward change (0 or negative) and
 * puts the backward's (0 or positive) in *bwd. */
double ap_price_edge_cast(const ap_price_ctx *x, int t, int prod, const ap_strategy *ps,
                          int cons, const ap_strategy *cs, double *bwd);
/* What the edge changes in its consumer's saved activations, bytes per GPU
 * per micro-batch (0 or negative). A column-parallel matmul fed by an
 * all-gather of a sequence-parallel tensor saves the producer's sequence
 * shard, not the gathered input, and gathers it again in backward, as
 * Megatron-LM does: the delta is shard minus gathered copy. *regather, when
 * not NULL, receives that backward all-gather's seconds, which are already
 * part of ap_price_edge's backward time. */
double ap_price_edge_saved(const ap_price_ctx *x, int t, int prod,
                           const ap_strategy *ps, int cons,
                           const ap_strategy *cs, double *regather);
/* Selective recomputation by module (docs/cost-model.md, "Selective
 * recomputation by module"), core_attn aside, which the attention's
 * forward prices (ap_block_point.attn_fwd): the modules of the context's
 * run that op is in and that are recomputed (0 for op < 0); whether the
 * tensor op `prod` makes stops being saved where op `saver` saves it (a
 * recomputed module keeps its inputs and drops what it made, and under
 * Megatron-Core's CheckpointWithoutOutput, for layernorm, moe_act and
 * mla_up_proj, its outputs too); and the bytes of op's saved activations
 * (ap_op_cost.act_bytes) that are so dropped, core_attn's included: an
 * attention op's own statistics, or its probabilities without flash. */
unsigned ap_op_rc_modules(const ap_price_ctx *x, int op);
int ap_rc_frees(const ap_price_ctx *x, int prod, int saver);
double ap_price_op_freed(const ap_price_ctx *x, int op, const ap_strategy *s);
/* Bytes per GPU of op's operand (input or output) tensor t under strategy
 * s: the tensor at the context's batch over the ways s splits it. */
double ap_operand_bytes(const ap_price_ctx *x, int op, const ap_strategy *s, int t);
/* Writes "b@0 f@1 rs:s" style text for a strategy, for plans and reports. */
void ap_strategy_format(const ap_strategy *s, char *buf, size_t len);

/* The intra-op ILP in index form: node u picks one of nstrat[u] choices at
 * cost[u][i] and memory mem[u][i]; an edge (u, v) adds a cost (and, where it
 * has one, a memory term) that depends on u's choice i and v's choice j. Minimise the total subject to the memory
 * row (when mem_limit > 0). The quadratic edge term is linearised with one
 * continuous variable per pair and marginal constraints, which are exact
 * once the node choices are integral and keep the LP relaxation tight.
 *
 * An edge's cost usually depends on less than the whole choice: on the
 * layout the producer leaves and the layout the consumer needs. With class
 * maps (cu[i] in [0, ncu) for u's choice i, cv[j] in [0, ncv) for v's) the
 * cost is cost[cu[i] * ncv + cv[j]] and the pair variables range over
 * classes, which shrinks the ILP without changing its optimum. With cu and
 * cv NULL the classes are the choices themselves: cost[i * nstrat[v] + j]. */
typedef struct {
    int u, v;
    const double *cost;
    int ncu, ncv;
    const int *cu, *cv;
    /* NULL, or memory by class pair like cost: what the pair adds to the
     * memory row (a consumer saving a sequence shard instead of its
     * gathered input: see ap_price_edge_saved). */
    const double *mem;
} ap_ilp_edge;

typedef struct {
    int nnodes;
    const int *nstrat;
    const double *const *cost;
    const double *const *mem;
    int nedges;
    const ap_ilp_edge *edges;
    double mem_limit;
    double time_limit_s; /* <= 0: none */
    double gap;          /* relative MIP gap accepted, e.g. 1e-4 */
    int minimise_memory; /* 1: the objective is the memory row's terms,
                            not the costs (the leanest choice) */
} ap_ilp;

/* TIMEOUT: the time limit passed before any solution was found, which says
 * nothing about feasibility. */
typedef enum {
    AP_ILP_OPTIMAL,
    AP_ILP_FEASIBLE,
    AP_ILP_INFEASIBLE,
    AP_ILP_TIMEOUT
} ap_ilp_status;

typedef struct {
    ap_ilp_status status;
    double objective;
    double gap;   /* relative gap of a feasible (not proven optimal) answer */
    double memory;
    int rows, cols;
} ap_ilp_result;

/* Solves with GLPK; choice[u] receives node u's pick. A GLPK error becomes
 * AP_EINTERNAL with its message, never an abort. Thread-safe: each call keeps
 * its GLPK state to itself (Debian's GLPK environment is thread-local). */
int ap_ilp_solve(const ap_ilp *p, int *choice, ap_ilp_result *res, char *err);
/* Solves so far in this thread and the seconds they took (benchmarks). */
void ap_ilp_counters(long *solves, double *seconds);
/* Frees this thread's GLPK state; a thread that solved ILPs calls it before
 * it ends. */
void ap_ilp_thread_done(void);
/* For tests: make the next ap_ilp_solve in this thread hit a GLPK error. */
void ap_ilp_inject_fault(void);

/* Communication by kind. Tensor-parallel: partial sums reduced (all-reduce,
 * or reduce-scatter and its backward all-gather), forward by the ops
 * themselves, backward on the edges where a consumer's sharding leaves its
 * input's gradient partial (Megatron's f and g operators). Resharding:
 * layout conversions on edges between ops (all-gather, all-to-all). Expert:
 * the dispatch and combine all-to-all. Context: K and V exchanged by
 * context-parallel attention. Parameter gather: ZeRO-3 all-gathers of
 * weights before forward and backward. Gradient reduce: ZeRO-2/3 keep only
 * their shard of the gradients, so each micro-batch's are reduce-scattered
 * in its backward. FP8 amax: delayed scaling's all-reduce of the amaxes at
 * each exit from fp8_autocast, over the stage's ranks. */
typedef struct {
    double tp, reshard, expert, context, param_gather, grad_reduce, amax;
} ap_comm_kinds;

/* One solution of a block (the ops of one layer, or the pieces before and
 * after the layers) on a mesh, priced per GPU. */
typedef struct {
    ap_strategy *strat;   /* per op of the block */
    double fwd, bwd;      /* per micro-batch: compute plus communication */
    double comm_fwd, comm_bwd; /* the communication part of fwd and bwd */
    double attn_fwd;      /* forward time of attention cores (selective
                             recomputation redoes it) */
    double attn_flops;    /* their forward FLOPs */
    /* Selective recomputation of the run's modules beyond core_attn
     * (ap_op_rc_modules): the forward the backward redoes, collectives
     * included (rc_comm of it, by kind in rc_kinds), and its FLOPs, zero
     * without such modules; and the saved bytes selective recomputation
     * frees (of act_bytes), core_attn's too (ap_price_op_freed). */
    double rc_fwd, rc_comm, rc_flops, rc_freed;
    ap_comm_kinds rc_kinds;
    double grad_sync;     /* per step */
    double tied_sync;     /* of grad_sync: tied parameters' all-reduce
                             between the first and last stage */
    double param_sync;    /* of grad_sync: the parameter all-gather */
    double param_buckets; /* the buckets it fills */
    double param_bytes;   /* model states */
    double grad_bytes;    /* of param_bytes: the gradients */
    double opt_bytes;     /* of param_bytes: the optimizer's states */
    double fp8_weight_bytes; /* of param_bytes: FP8 weight copies */
    double act_bytes;     /* saved per micro-batch */
    double input_bytes;   /* the block's input activation: what full
                             recomputation keeps */
    double flops;         /* forward FLOPs per GPU per micro-batch */
    ap_comm_kinds kfwd, kbwd; /* comm_fwd and comm_bwd by kind */
} ap_block_point;

typedef struct {
    int nops;
    int *ops;             /* graph op indices, topological order */
    int npoints;
    ap_block_point *points; /* fastest first, each later one smaller */
    ap_ilp_result ilp;    /* of the fastest point */
} ap_block;

/* What selective recomputation under r redoes of one layer of block point
 * bp: the attention's forward where core_attn is among r's modules, and
 * the other modules' (rc_fwd). */
double ap_selective_fwd(const ap_run_settings *r, const ap_block_point *bp);

/* Solves the block's ILP with no memory row, then again under tighter memory
 * budgets (param_bytes + act_weight * act_bytes) to trace the trade-off
 * between speed and memory. Edges from the previous layer of the same class
 * are included as if the block repeats (wrap edges). When the first solve
 * finds nothing within ilp_time_limit, it returns AP_OK with no points and
 * out->ilp.status AP_ILP_TIMEOUT. */
int ap_block_solve(const ap_price_ctx *x, const int *ops, int nops,
                   double act_weight, double ilp_time_limit, double ilp_gap,
                   ap_block *out, char *err);
/* The same with at most max_points points: 1 solves for the fastest alone. */
int ap_block_solve_points(const ap_price_ctx *x, const int *ops, int nops,
                          double act_weight, double ilp_time_limit,
                          double ilp_gap, int max_points, ap_block *out,
                          char *err);
/* Prices a block under given strategies (one per op). */
void ap_block_price(const ap_price_ctx *x, const int *ops, int nops,
                    const ap_strategy *strat, ap_block_point *out);
void ap_block_free(ap_block *b);

/* How full recomputation checkpoints the layers of each model chunk (a
 * stage, or each of its virtual stages under interleaving), as Megatron-LM's
 * --recompute-method and --recompute-num-layers say (Megatron-Core's
 * TransformerBlock._checkpointed_forward). Uniform N: the chunk's layers in
 * consecutive groups of N, each group keeping only its input and
 * recomputing its whole forward in backward, so N layers' activations are
 * live at once. Block N: the chunk's first N layers are recomputed one by
 * one, each keeping its input; the others keep all their activations and
 * recompute nothing. Uniform 1 is every layer recomputed one at a time. */
typedef enum { AP_RECOMPUTE_UNIFORM, AP_RECOMPUTE_BLOCK } ap_recompute_method;

/* "uniform" or "block". */
const char *ap_recompute_method_name(ap_recompute_method m);
/* AP_EINPUT unless s is one of those names. */
int ap_recompute_method_parse(const char *s, ap_recompute_method *out);

/* A pipeline stage of a plan. Layers [first_layer, first_layer + nlayers),
 * or under the plan's chunk_layers those of its model chunks, first_layer
 * the first chunk's first (ap_stage_chunk_of in planner/layout.h); the
 * pieces before the layers (embedding) ride on the first stage and those
 * after (final norm, head, loss) on the last. */
typedef struct {
    int first_layer, nlayers;
    int has_pre, has_post;
    int first_rank, ngpus;
    ap_mesh mesh;
    ap_recompute recompute;
    /* Strategies: blocks[0] is the pre piece, blocks[1] the post piece,
     * blocks[2 + k] the k-th layer class of the plan; point[i] is the
     * solution of block i in use. A block with no ops is absent. */
    ap_block *blocks;
    int *point;
    /* Prices, per micro-batch unless said. */
    double fwd, bwd, comm_fwd, comm_bwd;
    double p2p;        /* sending the stage's output to the next stage */
    double grad_sync;  /* per step */
    double tied_sync;  /* of grad_sync: the embedding group's all-reduce
                          (ap_op_cost.tied_sync), exposed in full */
    double param_sync; /* of grad_sync: the distributed optimizer's
                          all-gather of updated parameters (ap_op_cost) */
    double param_buckets; /* the buckets param_sync gathers, fractional */
    double param_bytes, act_bytes, inflight, mem_bytes;
    double fp8_weight_bytes; /* of param_bytes: FP8 weight copies */
    double grad_bytes; /* of param_bytes: the gradients */
    double opt_bytes;  /* of param_bytes: the optimizer's states */
    double flops;      /* forward FLOPs per GPU per micro-batch */
    double recompute_flops; /* of flops: the layers' forward FLOPs that full
                          recomputation redoes (all of them but under block) */
    int recomputed_layers; /* layers full recomputation recomputes */
    ap_comm_kinds kinds;  /* comm_fwd + comm_bwd by kind, and under full
                             recomputation the forward's again */
    double grad_sync_exposed; /* per step: what backward does not hide */
    double param_sync_exposed; /* of grad_sync_exposed: the parameter
                                  all-gather's exposed part (in full, or
                                  under serial_param_gather = 0 what the
                                  first micro-batch's forward does not hide;
                                  docs/cost-model.md) */
    double optimizer;  /* per step */
    /* Under moe_a2a_overlap: of fwd + bwd, what one merged pair (this
     * stage's forward of one micro-batch with its backward of another)
     * saves, the all-to-all hidden layer by layer (ap_moe_pair_time);
     * else 0. */
    double a2a_save;
    /* Under run.defer_wgrad with pp > 1, on the stage with the ops after
     * the layers: of bwd, the output layer's weight-gradient GEMM (its
     * forward GEMM's time), which waits for the end of the schedule
     * (ap_pipe_spec.defer); else 0. defer_bytes: what the layer keeps
     * for it per deferred micro-batch (its input and its output's
     * gradient), held until the end of the step. */
    double defer_wgrad, defer_bytes;
    /* The most experts a GPU of the stage holds in one expert matmul (a
     * grouped GEMM's groups), and the shortest forward time of one
     * expert's GEMM in such a matmul (its time over its groups); 0
     * without experts. */
    double local_experts, expert_gemm_s;
    /* Under interleaving (vchunks > 1), once evaluated: the forward and
     * backward of one micro-batch on each of the stage's model chunks
     * (ap_stage_chunk_of's layers; the embedding on the first stage's
     * first chunk, the head on the last stage's last), under
     * moe_a2a_overlap what a merged pair saves on each, and each chunk's
     * share of the stage's activations (adding up to 1); NULL without
     * interleaving. Owned by the plan. */
    double *chunk_fwd, *chunk_bwd, *chunk_save, *chunk_act;
} ap_stage;

typedef struct {
    char model[AP_NAME_LEN];
    char cluster[64];
    char cluster_basis[16]; /* ap_cluster_basis of the cluster it was priced on */
    double rate_scale;      /* its calib_scale: the factor on the kernel
                               figures' tensor-core rate, 0 for none */
    char rate_from[256];    /* the measured step that factor came from */
    int measured_coll;      /* 1: the cluster has measured collective tables */
    int gpus, gpus_per_node;
    double global_batch;   /* sequences per step */
    double micro_batch;    /* sequences per micro-batch, all replicas */
    int nmicro;
    int seq;
    ap_schedule schedule;
    int vchunks;
    /* Under a Megatron-LM pipeline layout with interleaving
     * (--pipeline-model-parallel-layout): the transformer layers of each
     * model chunk, nstages * vchunks of them in Megatron's order (chunk c
     * of stage s at c * nstages + s; the model's layers run through them
     * in that order, and a chunk may hold none). NULL: each stage's layers
     * are its span cut into vchunks even pieces. Owned by the plan. */
    int *chunk_layers;
    ap_zero zero;
    /* 1: the gradient synchronisation starts after the last backward, all
     * of it exposed (Megatron-LM without --overlap-grad-reduce); 0: it
     * overlaps the last micro-batch's backward. Zero, the default of a
     * zeroed plan, is what searched plans use. */
    int serial_grad_sync;
    /* 1: ZeRO-1's all-gather of the updated parameters follows the
     * optimizer step, all of it exposed (Megatron-LM without
     * --overlap-param-gather); 0: each bucket's all-gather is dispatched
     * in the next forward's pre-hooks, the first exposed and the rest
     * behind the first micro-batch's forward. Zero, the default of a
     * zeroed plan, is what searched plans use. ZeRO-2's all-gather
     * (DeepSpeed's, after its step) is exposed in full either way. */
    int serial_param_gather;
    /* How the launcher runs each step. Zeroed (bf16 GEMMs, no overlaps,
     * the unfused loss, 2-byte gradients, p2p, fp32 optimizer states) is
     * what searched plans use unless ap_plan_opts.run asks otherwise;
     * fp8_param_gather only with fp8 and ZeRO >= 1. */
    ap_run_settings run;
    /* How stages under full recomputation checkpoint their layers, and N
     * (ap_recompute_method); a zeroed plan is uniform 1, each layer on its
     * own, as under uniform a count of 0 reads as 1. */
    ap_recompute_method recompute_method;
    int recompute_layers;
    int nstages;
    ap_stage *stages;
    int nclasses;
    int *classes;          /* layer-class representatives, ascending */
    ap_ilp_status ilp_status; /* worst over the ILPs behind the plan */
    double ilp_gap;
    int ilp_timeouts;      /* configurations left unpriced: an ILP found
                              nothing within the time limit */
    /* Prediction. */
    double step_time, tokens_per_s, model_tflops_per_gpu, hw_tflops_per_gpu,
        mfu, max_mem_bytes, bubble;
    double t_compute, t_comm, t_bubble, t_grad_sync, t_optimizer;
    double hbm_limit;
    /* t_comm is the exposed communication. Communication per step by kind,
     * of the stage t_comm is taken from (their sum less t_a2a_hidden is
     * t_comm); the pipeline's send/recv on its busiest
     * boundary, activations forward and gradients back (its exposed part
     * is inside the bubble); and the gradient synchronisation in full,
     * before overlap with backward (t_grad_sync is the exposed part). */
    ap_comm_kinds t_kinds;
    double t_p2p, t_grad_sync_total;
    /* Of t_grad_sync (and t_grad_sync_total): the embedding group's
     * all-reduce of tied weights (ap_stage.tied_sync) of the stage
     * t_grad_sync is taken from; 0 without one. */
    double t_tied_sync;
    /* Of t_grad_sync: the parameter all-gather's exposed part
     * (ap_stage.param_sync_exposed) of the stage t_grad_sync is taken
     * from, and of t_grad_sync_total: that stage's whole all-gather. */
    double t_param_sync, t_param_sync_total;
    /* Under moe_a2a_overlap: the seconds per step the merged passes of the
     * slowest stage (t_comm's) hid, of t_kinds.expert; else 0. */
    double t_a2a_hidden;
    /* 1: step_time is a lower bound only (ap_plan_evaluate_within), the
     * other prediction fields not a plan's; memory is exact. */
    int bounded;
} ap_plan;

/* Progress written to a log rather than a terminal: a line of its own from
 * AP_PROGRESS_LOG_S seconds on, and every as many seconds after. */
#define AP_PROGRESS_LOG 2
#define AP_PROGRESS_LOG_S 30

/* The Levenshtein distance of a and b, or most + 1 where it is more than
 * `most` or either is longer than 64 characters: for the nearest flag
 * or option to a misspelt one. */
size_t ap_edit_distance(const char *a, const char *b, size_t most);

/* Seconds between progress lines in a log: AP_PROGRESS_LOG_S, or what the
 * environment's AP_PROGRESS_INTERVAL_S says (above 0, at most 3600), so
 * that a test need not wait half a minute to see one (docs/planner.md). */
double ap_progress_log_interval(void);
/* A monotonic clock in seconds, for progress and timings. */
double ap_progress_now(void);

typedef struct {
    int gpus, gpus_per_node;
    double global_batch;  /* 0: 512 sequences */
    int threads;          /* 0: the machine's cores */
    int no_pipeline;      /* one stage on all GPUs */
    int max_stages;       /* 0: no limit beyond layers and GPUs */
    double ilp_time_limit;/* seconds per ILP solve, 0: no limit */
    double ilp_gap;       /* 0: 1e-4 */
    int progress;         /* progress on stderr when slow: 0 none, 1 a line
                             rewritten in place (a terminal), AP_PROGRESS_LOG
                             a line every AP_PROGRESS_LOG_S seconds, for a log */
    int max_local_experts;/* at most this many experts per GPU, 0: any */
    int no_sweep;         /* ap_plan_best: the search's plan alone */
    /* 1: search the recompute modules too (ap_plan_search), the
     * run's recompute_modules ignored. */
    int auto_modules;
    /* The settings to plan with: fp8 (--fp8), tp_overlap
     * (--tp-comm-overlap), cross_entropy (--cross-entropy), grad_fp32
     * (--grad-fp32; 0: bf16, which the Megatron-LM export states with
     * --grad-reduce-in-bf16) and opt. The search does not price the others
     * (fp8_param_gather, cp_comm, moe_a2a_overlap, delay_wgrad): its plans
     * run without them whatever they say here. */
    ap_run_settings run;
} ap_plan_opts;

void ap_plan_opts_default(ap_plan_opts *o);

/* The inter-op dynamic program (Alpa's recurrence) over contiguous layer
 * spans: cut `nlayers` layers into `nstages` non-empty stages minimising
 * sum(t_s) + (nmicro - 1) * max(t_s), where cost(ctx, s, first, end, &t)
 * prices layers [first, end) as stage s and returns 0 when they do not fit.
 * Enumerates t_max over the distinct stage costs in ascending order, and
 * stops once (nmicro - 1) * t_max alone exceeds the best total. Fills
 * first[s] and returns the objective, or INFINITY when nothing fits. */
typedef int (*ap_stage_cost_fn)(void *ctx, int stage, int first, int end,
                                double *t);
double ap_stage_dp(int nlayers, int nstages, int nmicro, ap_stage_cost_fn cost,
                   void *ctx, int *first);
/* The module sets --recompute-modules auto tries, in order, for graph g
 * under run r (ap_module bits, at most AP_AUTO_MODULE_SETS): the model's
 * dense MLPs (mlp), its experts' activation and MoE norms
 * (moe_act+layernorm, where the FP8 recipe allows them), its MLA up
 * projections (mla_up_proj), and all of those together, each only where
 * the model has such ops. Returns how many. */
#define AP_AUTO_MODULE_SETS 4
int ap_auto_module_sets(const ap_graph *g, const ap_run_settings *r, unsigned *sets);
/* Searches for the fastest plan that fits. On AP_EINPUT for a model that
 * cannot fit, err says the smallest shortfall and what would help. Under
 * o->auto_modules, searches once without recompute modules and once with
 * each set ap_auto_module_sets gives, and keeps the fastest (the first of
 * equals). */
int ap_plan_search(const ap_graph *g, const ap_cluster *c,
                   const ap_plan_opts *o, ap_plan *out, char *err);
/* Whether the plan's pieces after the layers run on another stage than
 * those before them (ap_price_ctx.head_apart), and in *embed_group_nodes
 * the nodes the embedding group spans on cluster c: 2 when the two
 * stages' first ranks are on different nodes, else 1. */
int ap_plan_head_apart(const ap_plan *p, const ap_cluster *c, int *embed_group_nodes);
/* Whether p's parameter all-gather is priced in the next forward's
 * pre-hooks (--overlap-param-gather): only ZeRO-1's, and only where the plan
 * overlaps it; otherwise it follows the optimizer step. */
int ap_plan_param_gather_overlapped(const ap_plan *p);
/* Prices a plan whose stages, meshes and block strategies are set: fills
 * every price and the prediction. */
int ap_plan_evaluate(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                     char *err);
/* ap_plan_evaluate for a caller that wants p only if its step is shorter
 * than `bound` seconds (0: no bound): where a lower bound of the step
 * already reaches it, the schedule is not simulated and p->bounded is 1,
 * its step_time that lower bound and its memory exact. */
int ap_plan_evaluate_within(const ap_graph *g, const ap_cluster *c, ap_plan *p,
                            double bound, char *err);
void ap_plan_free(ap_plan *p);
/* Simulates an evaluated plan's pipeline schedule again, for its events
 * (ap_plan_evaluate keeps only the summary); the caller frees *r with
 * ap_pipe_result_free(). */
int ap_plan_simulate(const ap_plan *p, ap_pipe_result *r, char *err);
/* The longest --pipeline-model-parallel-layout string read. */
#define AP_LAYOUT_LEN 1024

/* A hand-tuned Megatron-LM configuration, priced as a plan with the
 * planner's own code. dp 0 means GPUs / (tp * pp * cp); gbs 0, mbs * dp
 * (Megatron-LM's default, which ap_megatron_parse_args leaves where
 * --global-batch-size is not given). first and last,
 * when not 0, are the layers of the first and last pipeline stage
 * (--decoder-first/last-pipeline-num-layers); the other stages split the
 * rest evenly. overlap_grad: the data-parallel gradient reduction overlaps
 * the backward (--overlap-grad-reduce). overlap_param: ZeRO-1's parameter
 * all-gather overlaps the next forward (--overlap-param-gather); -1 (the
 * spec's default) follows overlap_grad under zero=1 and is 0 otherwise
 * (ap_megatron_overlap_param). account_embedding and account_loss
 * count the input embedding and the loss as one layer each when the layers
 * are split over the pp*vpp chunks (--account-for-embedding-in-pipeline-split,
 * --account-for-loss-in-pipeline-split), so the first and last stage hold a
 * layer fewer. */
typedef struct {
    int tp, pp, dp, cp, ep, vpp, mbs, sp;
    double gbs;
    ap_recompute recompute;
    ap_zero zero;
    int overlap_grad;
    int overlap_param; /* --overlap-param-gather; -1: follows overlap_grad */
    int first, last;
    int account_embedding, account_loss;
    int etp;          /* --expert-tensor-parallel-size; 0 reads as tp */
    /* Under FP8, the transformer layers at the start and the end kept in
     * bf16 (--first-last-layers-bf16 with --num-layers-at-start-in-bf16 and
     * --num-layers-at-end-in-bf16, 1 each by default; the spec's bf16_first,
     * bf16_last). The graph must be built with them (ap_build_opts). */
    int bf16_first, bf16_last;
    /* --pipeline-model-parallel-layout (the spec's layout=), as written;
     * "" for none. It places every layer, the embedding and the loss on a
     * virtual stage of its own choosing, and sets vpp to its virtual
     * stages over pp (planner/layout.h). */
    char layout[AP_LAYOUT_LEN];
    /* The flags ap_megatron_parse_args read past that no Megatron-LM
     * version it knows has (planner/megatron_flags.c), each with the
     * nearest flag where one is within two edits ("--tensor-model-paralel-size
     * (--tensor-model-parallel-size?)"), separated by ", "; "" for none. A
     * typo of a layout flag would otherwise price the layout without it. */
    char unknown[AP_ERR_LEN];
    /* The flags a shell comment held ('#' starting a word, to the end of its
     * line, as the shell reads it), which were not read: a script pasted
     * with its comments keeps commented-out flags out, and a line flattened
     * after a comment loses what followed, which the note says. "" for none. */
    char commented[AP_ERR_LEN];
    /* The launcher settings, each the spec's key of the same name (opt's:
     * main_params, exp_avg and exp_avg_sq), off, unfused, p2p or fp32 by
     * default. fp8: --fp8-format hybrid or e4m3, linear layers in FP8.
     * tp_overlap: --tp-comm-overlap, which needs sp when tp > 1.
     * fp8_param_gather: --fp8-param-gather, which needs fp8 and zero >= 1.
     * moe_a2a_overlap and delay_wgrad: --overlap-moe-expert-parallel-comm
     * and --delay-wgrad-compute, refused where Megatron-Core asserts.
     * cross_entropy: --cross-entropy-loss-fusion with
     * --cross-entropy-fusion-impl native (its default) or te. grad_fp32:
     * fp32 main gradients, reduced in fp32: --bf16 without
     * --grad-reduce-in-bf16, or --accumulate-allreduce-grads-in-fp32
     * (Megatron-LM's validate_args). cp_comm: --cp-comm-type, one for every
     * layer. opt: --use-precision-aware-optimizer's --main-params-dtype
     * (fp32 or fp16), --exp-avg-dtype and --exp-avg-sq-dtype (fp32, fp16,
     * bf16 or fp8); the spec also takes main_params=none, no main weights:
     * apex's DistributedFusedAdam under NeMo's optim dtype bf16 steps the
     * model's bf16 weights, which Megatron-LM cannot run: its export
     * refuses it; and main_params=remainder, the 16 bits bf16 weights lack
     * (store_param_remainders, Megatron-Core's default under the
     * precision-aware optimizer with fp32 main weights of a bf16 model).
     * defer_wgrad and wgrad_deferral_limit: --defer-embedding-wgrad-compute
     * and --wgrad-deferral-limit, refused without pp > 1. */
    ap_run_settings run;
    /* Under recompute full: --recompute-method and --recompute-num-layers
     * (ap_recompute_method); the spec's recompute_method and
     * recompute_layers, uniform 1 by default. */
    ap_recompute_method recompute_method;
    int recompute_layers;
    /* The model as --megatron-args describes it (--num-layers,
     * --hidden-size, --num-attention-heads, --num-query-groups under
     * --group-query-attention, --ffn-hidden-size, --seq-length,
     * --num-experts); 0 where not given. ap_megatron_plan refuses a model
     * they contradict, so that a command line is never priced for another
     * model than the one it trains. */
    struct {
        int layers, hidden, heads, groups, ffn, seq, experts;
        int dropout; /* 1: --hidden-dropout or --attention-dropout (0.1
                        where left out, Megatron-LM's default) is above
                        0; -1: both are 0; 0: neither given */
        int flash;   /* 1: the attention flags say a fused kernel
                        (--attention-backend flash, fused or auto,
                        --use-flash-attn); -1: unfused (--attention-backend
                        unfused or local, --transformer-impl local); -2:
                        unfused, the line being Megatron-LM's before 2022
                        (--checkpoint-activations and the like), which
                        had no fused attention; 0: none given */
        int top_k;   /* --moe-router-topk under --num-experts (2,
                        Megatron-LM's default, where left out); else 0 */
        int moe_ffn; /* --moe-ffn-hidden-size; 0 where not given */
        int mtp;     /* --mtp-num-layers above 0; 0 where not given or 0 */
        /* --moe-router-num-groups and --moe-router-group-topk under
         * --num-experts (group-limited routing); 0 where not given */
        int route_groups, route_group_topk;
        /* The router's flags under --num-experts, 0 where not given:
         * --moe-router-score-function (1 softmax, 2 sigmoid),
         * --moe-router-pre-softmax and --moe-router-enable-expert-bias (1),
         * --moe-router-topk-scaling-factor (its value),
         * --moe-apply-probs-on-input (1). */
        int route_score, route_pre_softmax, route_bias, route_on_input;
        double route_scale;
        int kv_channels; /* --kv-channels; 0 where not given */
        int mla;         /* 1 where --multi-latent-attention is given */
        int q_lora, kv_lora, qk_nope_dim, qk_rope_dim, v_head_dim; /* its flags */
        /* 1 where --swiglu, --squared-relu, --quick-geglu and
         * --untie-embeddings-and-output-weights are given */
        int swiglu, squared_relu, quick_geglu, untie;
        int norm;            /* --normalization: 1 LayerNorm, 2 RMSNorm; 0 not given */
        int no_bias;         /* 1 where --disable-bias-linear is given */
        int add_qkv_bias;    /* 1 where --add-qkv-bias is given */
        int qk_norm;         /* 1 where --qk-layernorm is given */
        int sinks;           /* --softmax-type: 1 learnable, -1 another; 0 not given */
        int positions;       /* --position-embedding-type: 1 learned_absolute,
                                2 rope, 3 none; 0 not given; 2 under the
                                legacy --use-rotary-position-embeddings,
                                which Megatron-LM lets win */
        double rotary_percent; /* --rotary-percent; 0 not given */
        int shared_ffn;      /* --moe-shared-expert-intermediate-size; 0 not given */
        char moe_freq[256];  /* --moe-layer-freq as given; "" not given */
        /* --window-size L,0: L + 1, the keys each query meets; -1 for
         * L = -1 (no window, stated); 0 not given. */
        int window;
        char window_freq[256]; /* --window-attn-skip-freq as given; "" not given */
        char nope_freq[256];   /* --no-rope-freq as given; "" not given */
        int qk_l2;             /* 1 where --qk-l2-norm is given */
        /* The arithmetic that changes no cost, for the exports of a
         * script's own model (ap_megatron_numerics): --rotary-base,
         * --norm-epsilon (or the older --layernorm-epsilon) and
         * --rope-scaling-factor as given, 0 not given; rope_scaling 1
         * where --use-rope-scaling is given. */
        double rope_base, norm_eps, rope_factor;
        int rope_scaling;
        /* --glu-linear-offset and --activation-func-clamp-value as given
         * (GPT-OSS's 1 and 7), glu_given's bits 1 and 2 saying which were:
         * no cost, checked against MODEL's (check_numerics) or built into
         * the script's own model for its exports. */
        double glu_offset, glu_clamp;
        int glu_given;
        /* Read only where the command line is the model (ap_megatron_model):
         * --vocab-size, --make-vocab-size-divisible-by,
         * --max-position-embeddings and --tokenizer-type as given (0 and "":
         * not given), and 1 where --apply-layernorm-1p is. */
        int vocab, vocab_divisor, max_pos;
        char tokenizer[48];
        int vocab_file; /* --vocab-file was given (GPT2BPETokenizer reads it) */
        /* A flag naming the tokenizer otherwise was given (NeMo's
         * --tokenizer-library, --tokenizer-model, a fork's
         * --patch-tokenizer-type): any flag with "tokenizer" in its name
         * but --tokenizer-type. */
        int other_tokenizer;
        int layernorm_1p;
        int half; /* --bf16 or --fp16 was given */
        int fp16; /* --fp16 was given */
    } shape;
    /* A torchrun line pasted with the flags: its --nproc-per-node and
     * --nnodes (0: not given, or a range of nodes), which the commands
     * check --gpus and --gpus-per-node against; or a deepspeed line's
     * --num_gpus and --num_nodes (ds_gpus, ds_nodes), which set them where
     * both are given (deepspeed 1). */
    struct {
        int nproc, nnodes;
        int ds_gpus, ds_nodes, deepspeed;
    } launcher;
    /* 1 when Megatron-LM's flags set it (ap_megatron_parse_args): a flag
     * left out then means Megatron-LM's default, where a spec's key left
     * out means the model's own (its routing groups, say). */
    int from_args;
} ap_megatron;

/* Whether --megatron-args states the model whole, as a Megatron-LM script
 * does (--num-layers, --hidden-size and --num-attention-heads), so that a
 * flag left out means Megatron-LM's default. */
int ap_megatron_states_model(const ap_megatron *m);
/* The model such a command line trains, as Megatron-LM builds it: its
 * defaults where a flag is left out (a GELU MLP 4 x hidden wide, or under
 * --swiglu int(8 x hidden / 3 / 64) x 64; LayerNorm; learned absolute
 * positions over --max-position-embeddings; a bias on every linear layer;
 * tied embeddings; hidden / heads a head), and its vocabulary padded to a
 * multiple of --make-vocab-size-divisible-by (128) x tp. The vocabulary is
 * the tokenizer's: NullTokenizer's --vocab-size + 1, GPT2BPETokenizer's
 * 50,257 (also without --tokenizer-type, pretrain_gpt.py's default),
 * another's --vocab-size. A sliding window of L + 1 keys under
 * --window-size L,0, on the layers --window-attn-skip-freq windows (every
 * layer without it). Rotary embedding off the layers --no-rope-freq makes
 * NoPE, and under --qk-l2-norm the rotary layers' q and k normed without a
 * weight (Llama 4). Fills *d; *layers, the one allocation d->moe_layer,
 * d->window_layer and d->nope_layer point into (a byte a layer each), is
 * the caller's to free, NULL where no pattern is given (every layer MoE or
 * none is; every layer windowed or none is; every layer rotates). Returns AP_OK, or AP_EINPUT with err
 * naming the flag that is missing or that autopar cannot build from. */
int ap_megatron_model(const ap_megatron *m, ap_decoder *d, unsigned char **layers, char *err);
/* Sets g's rotary base, norm epsilon and rotary scaling to what the
 * command line trains, Megatron-LM's defaults where a flag is left out
 * (--rotary-base 10000 under rotary embeddings, --norm-epsilon 1e-5, and
 * under --use-rope-scaling Llama 3.1's scaling by --rope-scaling-factor,
 * 8): g is the graph of ap_megatron_model's decoder, so that its exports
 * state the script's numerics, not the launcher's note that they are
 * unknown. */
void ap_megatron_numerics(const ap_megatron *m, ap_graph *g);
/* The source name of a graph built from ap_megatron_model: messages say it,
 * and a plan of it has no model file to name (plan.json's model_path is
 * ""). */
#define AP_MEGATRON_SOURCE "--megatron-args"

/* The spec's defaults: tp, pp, cp, ep, vpp, mbs 1, gbs 512, ZeRO-1 (the
 * distributed optimizer), gradient reduction overlapped, the parameter
 * all-gather overlapped where the gradient reduction is, even stages. */
void ap_megatron_default(ap_megatron *m);
/* Whether m overlaps the parameter all-gather with the forward: its
 * overlap_param, or where that is -1 (not given in a spec) overlap_grad
 * under the distributed optimizer (zero=1), so that a spec that says
 * nothing keeps the meaning it had before the key existed. */
int ap_megatron_overlap_param(const ap_megatron *m);
/* "tp=8,pp=4,dp=4,cp=1,ep=1,vpp=2,mbs=1,gbs=512,sp=1,recompute=selective,
 * zero=1,overlap_grad=1,overlap_param=1,first=7,last=7,fp8=1,tp_overlap=1,
 * etp=1,fp8_param_gather=1,cross_entropy=te,recompute_method=block,
 * recompute_layers=2,grad_fp32=1,moe_a2a_overlap=1,delay_wgrad=1,cp_comm=a2a,
 * main_params=fp16,exp_avg=bf16,exp_avg_sq=fp8,defer_wgrad=1,
 * wgrad_deferral_limit=22"
 * (cross_entropy: unfused, native or te; cp_comm: p2p, allgather or a2a;
 * main_params: fp32, fp16, none or remainder; exp_avg, exp_avg_sq: fp32,
 * fp16, bf16 or fp8; wgrad_deferral_limit: 0 (all) to 2^30;
 * recompute_method: uniform or block, with recompute_layers N, 0 to 2^30,
 * at least 1 under uniform) */
int ap_megatron_parse(const char *spec, ap_megatron *m, char *err);
/* The real flags: "--tensor-model-parallel-size 8 --sequence-parallel ...".
 * What a flag's absence means is Megatron-LM's default: no distributed
 * optimizer, no --overlap-grad-reduce. */
int ap_megatron_parse_args(const char *args, ap_megatron *m, char *err);
/* Checks the configuration against the model and cluster (tp*pp*dp*cp =
 * GPUs, heads and KV heads divisible by tp, layers by pp*vpp, gbs by
 * mbs*dp, experts by ep, ep*etp dividing tp*cp*dp, fp8_param_gather only
 * with fp8 and the distributed optimizer) and builds and prices
 * its plan: Megatron's column- then row-parallel layers, sequence
 * parallelism, even layer split and schedule. Expert parallelism other
 * than ep = dp with etp = tp and cp = 1 is MoE parallel folding: the
 * stages carry an expert mesh (ep, etp) with tp*cp*dp/(ep*etp) replicas,
 * ranks in Megatron-Core's expert order (etp, then ep, then edp). */
int ap_megatron_plan(const ap_graph *g, const ap_cluster *c,
                     const ap_megatron *m, ap_plan *out, char *err);

/* What ap_calibrate_megatron found: the factor on the tensor-core
 * efficiencies, the configuration's step at the cluster as given and at
 * the factor, and the share of that step the factor scales (compute). */
typedef struct {
    double scale, preset_s, predicted_s, compute_share;
} ap_calibration;

/* Derives the cluster's sustained tensor-core rate from one measured step:
 * scales c's GEMM and attention efficiencies (gemm_eff, attn_eff,
 * attn_bwd_eff) by the one factor at which configuration m of g prices at
 * `measured` seconds, and leaves c scaled (planner/calibrate.c); measured
 * GEMM times (a profile's) scale with it. AP_EINPUT, with c as given, when
 * no factor between 1/16 and peak reaches the measurement. */
int ap_calibrate_megatron(const ap_graph *g, ap_cluster *c, const ap_megatron *m,
                          double measured, ap_calibration *out, char *err);

/* The strategy Megatron-LM's layout gives op `op` under configuration m
 * (every degree resolved: dp set, vpp >= 1). The exporter compares a plan's
 * shardings with it. */
ap_strategy ap_megatron_layout(const ap_graph *g, const ap_megatron *m, int op);

/* The plan's simulated step as Chrome Trace Event JSON (Perfetto,
 * chrome://tracing; docs/compare.md): a process per stage with tracks for
 * the forward and backward passes ("F mb3 chunk0", "B mb3") and the
 * optimizer step, gradient sync, and sends; "X" events in microseconds
 * spanning exactly the predicted step. The plan must be evaluated. Returns
 * a string the caller frees, or NULL with err set. */
char *ap_plan_trace_json(const ap_plan *p, char *err);

/* "tp=8,pp=4,dp=4,cp=1,ep=1,vpp=2,mbs=1,gbs=512,sp=1,recompute=none,zero=1":
 * every field, in the form ap_megatron_parse reads back (gbs where set: a
 * command line without --global-batch-size leaves it to be settled when
 * planned); overlap_grad=0,
 * overlap_param (where it differs from what overlap_grad gives it), first,
 * last, fp8=1, tp_overlap=1, etp, fp8_param_gather=1, cross_entropy,
 * recompute_method, recompute_layers, grad_fp32=1, moe_a2a_overlap=1,
 * delay_wgrad=1, cp_comm, main_params, exp_avg and exp_avg_sq only where
 * they differ from the spec's defaults. */
void ap_megatron_format(const ap_megatron *m, char *buf, size_t len);

/* Turns off in `m` the overlaps and communication types Megatron-LM would
 * refuse for this layout, so that a sweep can run every configuration with
 * them where they apply: TP overlap without sequence parallelism (or at
 * tp = 1), the expert all-to-all overlap where Megatron-Core asserts
 * (ap_megatron_plan's check), and context parallelism's allgather or a2a
 * where Transformer Engine does (then the p2p ring), optimizer states
 * other than fp32 without the distributed optimizer, and recompute modules
 * where the recomputation is not selective (moe under the all-to-all
 * overlap). */
void ap_megatron_drop_unsupported(const ap_graph *g, ap_megatron *m);

typedef enum { AP_LAUNCHER_MEGATRON, AP_LAUNCHER_TORCHTITAN, AP_LAUNCHER_DEEPSPEED } ap_launcher;

/* The sweep over a launcher's configuration space (docs/compare.md):
 * Megatron-LM; torchtitan (DDP or FSDP, TP with sequence-parallel norms, PP,
 * CP, EP over all the data-parallel ranks); DeepSpeed as its config states
 * it (ZeRO 0-3, ZeRO-1 at most with PP, no TP, CP or EP). Each lists what
 * its export states, so a --target plan always exports. */
typedef struct {
    ap_launcher launcher;
    double global_batch; /* sequences per step; 0: 512 */
    int max_tp;          /* 0: GPUs per node (TP stays inside a node) */
    int threads;         /* 0: the machine's cores */
    int progress;        /* a progress line on stderr once a second has
                            passed, as ap_plan_opts.progress says (0, 1 or
                            AP_PROGRESS_LOG); the caller decides */
    int max_local_experts; /* only ep with at most this many experts per
                              GPU; 0: any */
    int price_all;       /* price even the configurations whose weights,
                            gradients and optimizer states alone are over
                            the memory (counts them in skipped otherwise),
                            and simulate the schedule of those whose
                            lower bound cannot beat the best so far
                            (ap_plan_evaluate_within); the answer is the
                            same */
    /* Every configuration runs with these settings, where it can: TP
     * overlap leaves out configurations with tp > 1 and no sp; a fused loss
     * and fp32 gradients only for Megatron-LM; the expert all-to-all
     * overlap for every configuration Megatron-Core runs it for; cp_comm
     * for every one with cp > 1 that Transformer Engine runs it for, the
     * others with p2p; opt for every one with the distributed optimizer.
     * The sweep does not try FP8 primary weights: fp8_param_gather is left
     * off. */
    ap_run_settings run;
} ap_sweep_opts;

void ap_sweep_opts_default(ap_sweep_opts *o);
/* The sweep of launcher l over what o plans: its global batch (512 where
 * 0), threads, progress, settings and expert limit. */
void ap_sweep_opts_of(const ap_plan_opts *o, ap_launcher l, ap_sweep_opts *so);

typedef struct {
    long candidates;     /* configurations listed */
    long valid;          /* priced: ap_megatron_plan accepted them */
    long refused;        /* listed but refused by ap_megatron_plan (0 unless
                            the list and the checks disagree) */
    long fit;            /* valid and within the usable memory */
    long skipped;        /* valid, not priced: their weights, gradients and
                            optimizer states alone are over the memory */
    int found;           /* some configuration fits */
    ap_megatron best;    /* the fastest that fits; ties keep the first listed
                            (smaller tp, then pp, cp, ep, mbs, vpp; sp off,
                            less recomputation, lower ZeRO first) */
    ap_plan plan;        /* best's plan, when found */
    double least_memory; /* the smallest memory per GPU of any valid one */
    double seconds;
    char refusal[AP_ERR_LEN]; /* why the first refused one was, "" if none */
} ap_sweep_result;

/* Lists every configuration of the launcher for the model and cluster,
 * prices each with ap_megatron_plan and keeps the fastest that fits. No
 * configuration fitting is not an error: found is 0. The caller frees the
 * result with ap_sweep_result_free(). */
int ap_sweep(const ap_graph *g, const ap_cluster *c, const ap_sweep_opts *o,
             ap_sweep_result *out, char *err);
void ap_sweep_result_free(ap_sweep_result *r);

/* What ap_plan_best found beside its plan. */
typedef struct {
    int swept;          /* the sweep ran */
    int from_sweep;     /* the plan is the sweep's, faster than the search's */
    double search_step; /* the search's plan's step; 0: it found none */
    double sweep_step;  /* the sweep's fastest that fits; 0: none fits */
    long valid, fit;    /* the sweep's counts */
    ap_megatron best;   /* the sweep's fastest, where sweep_step > 0 */
} ap_plan_origin;

/* The planner's answer: the search's plan (ap_plan_search) or, where it is
 * faster, the fastest Megatron-LM configuration that fits (ap_sweep with
 * o's batch, threads, settings and expert limit). The search's stages are
 * 2-D meshes and it interleaves only the cuts 1F1B chose; Megatron-LM's
 * stages of data- and context-parallel replicas of a tensor-parallel
 * group, and interleaving on any split, are the sweep's. Ties keep the
 * search's plan. The sweep is not run under o->no_sweep, o->no_pipeline or
 * o->max_stages (its space has no such bound), nor where the search
 * fails: its error (a model that cannot fit, settings the model refuses)
 * stands. On success
 * *out is the caller's to free (ap_plan_free). *sweep, when not NULL, gets
 * the sweep's result (found 0 where it did not run), which the caller
 * frees with ap_sweep_result_free whatever the return. */
int ap_plan_best(const ap_graph *g, const ap_cluster *c, const ap_plan_opts *o,
                 ap_plan *out, ap_plan_origin *origin, ap_sweep_result *sweep,
                 char *err);
/* A sentence on where the plan came from (empty when the sweep did not
 * run), for the summary's first line. */
void ap_plan_origin_line(const ap_plan_origin *o, char *buf, size_t len);

/* plan.json (docs/plan-format.md) and the summary a person reads. */
char *ap_plan_to_json(const ap_graph *g, const ap_plan *p);
/* The prediction object of plan.json alone (what `estimate --json` prints). */
char *ap_plan_prediction_to_json(const ap_plan *p);
void ap_plan_print(const ap_graph *g, const ap_plan *p, FILE *f);
/* The report's "prices:" line: where the cluster's rates came from (a
 * preset, scaled to a published step or not, a profile, a calibration). */
void ap_plan_print_basis(const ap_plan *p, FILE *f);
/* The most experts a GPU holds in one expert matmul, over the stages; 0
 * for a model without experts. *gemm_s, when gemm_s is not NULL, gets the
 * shortest forward GEMM of one expert in seconds (ap_stage.expert_gemm_s). */
double ap_plan_local_experts(const ap_plan *p, double *gemm_s);
/* The ZeRO level p runs: its own, or ZeRO-0 where every stage is one GPU,
 * which has no data-parallel replicas to shard the model states over
 * (Megatron-LM's distributed optimizer over one rank). */
ap_zero ap_plan_zero_runs(const ap_plan *p);
/* 1, with the caveat's sentence in buf, when the plan holds more than one
 * expert per GPU, where host time the model does not price has made
 * published steps slower than predicted; else 0. */
int ap_plan_caveat_moe_host(const ap_plan *p, char *buf, size_t len);
/* 1, with the caveat's sentence in buf, when the plan is captured in CUDA
 * graphs (run.cuda_graph), whose launch savings and static buffers are not
 * priced; else 0. */
int ap_plan_caveat_cuda_graph(const ap_plan *p, char *buf, size_t len);
/* 1, with the caveat's sentence in buf, when the plan hides expert
 * all-to-alls behind another micro-batch's compute (run.moe_a2a_overlap),
 * which the one published with-and-without pair showed priced too
 * generously; else 0. */
int ap_plan_caveat_moe_overlap(const ap_plan *p, char *buf, size_t len);
/* 1, with the caveat's sentence in buf, when a mesh axis of some stage
 * splits none of its ops, so that its GPUs repeat one another's work (more
 * GPUs than the batch and the model's widths can use); else 0. */
int ap_plan_caveat_idle_axis(const ap_plan *p, char *buf, size_t len);
/* 1, with the caveat's sentence in buf, when the plan runs blockwise FP8,
 * whose GEMMs are priced at the tensor-scaled FP8 rate although Hopper
 * emulates their block scales in software; else 0. */
int ap_plan_caveat_fp8_blockwise(const ap_plan *p, char *buf, size_t len);
/* 1, with the i-th of the plan's caveats (counting from 0, in the order the
 * reports print them) in buf; 0 when it has no more. */
int ap_plan_caveat(const ap_plan *p, int i, char *buf, size_t len);
/* The data-parallel replicas (Megatron's dp) the micro-batch is split over:
 * a stage's mesh replicas times each mesh axis that splits the batch label
 * in every op of its layers that has one. 0 when the stages differ. */
int ap_plan_data_parallel(const ap_graph *g, const ap_plan *p);
/* The micro-batching as a Megatron user reads it, per data-parallel
 * replica: "32 micro-batches of 1 per replica (4 across the 4 data-parallel
 * replicas)"; "32 micro-batches of 4" without data parallelism. */
void ap_plan_format_micro_batches(const ap_graph *g, const ap_plan *p,
                                  char *buf, size_t len);

/* Exports (docs/exports.md): plan.json read back, classified into the
 * degrees a training launcher takes, and written as that launcher's
 * arguments or config. */

/* What launchers' model flags need, derived from a graph; plan.json carries
 * it as "model_shape". kv_heads equals heads without grouped-query
 * attention; experts and top_k are 0 for a dense model. */
typedef struct {
    int layers;
    long long hidden, heads, kv_heads, head_dim, ffn, vocab, seq, experts;
    /* With experts: each expert's FFN width, the shared experts' FFN width
     * in all (0: none), and which layers are MoE as Megatron-LM's
     * --moe-layer-freq reads it ("": every layer; ap_moe_freq_format). */
    long long moe_ffn, shared_ffn;
    char moe_freq[256];
    int top_k;
    int route_groups, route_group_topk; /* group-limited routing; 0, 0: none */
    /* The first router's scoring (ap_op's route_*), zero for Megatron-Core's
     * default (a softmax over the top_k logits), so that a dense model and a
     * plan read back without them have it: sigmoid scores, the top_k
     * weights left as scored rather than renormalised, a per-expert bias
     * on the scores that pick, the factor on the weights (0 or 1: none),
     * the weight on the expert's input rather than its output.
     * routers_differ: 1 where a later router routes otherwise (top_k, its
     * groups or its scoring), which no launcher's model-wide flags state. */
    int route_sigmoid, route_unnormalized, route_bias, route_on_input;
    int routers_differ;
    double route_scale;
    /* Multi-latent attention (ops in the mla_up_proj module): the query and
     * key-value LoRA ranks (q_lora 0: none), the query and key head
     * dimension without and with rotary embedding, and the value head
     * dimension, from a Hugging Face config's dimension names; 0 where the
     * model has no MLA or names them otherwise. */
    int mla;
    long long q_lora, kv_lora, qk_nope_dim, qk_rope_dim, v_head_dim;
    ap_dtype dtype;
    int rmsnorm;           /* else LayerNorm */
    int swiglu;            /* gated SiLU MLP; else the model's activation */
    int squared_relu;      /* relu(x)^2 in the layers' MLP (Nemotron) */
    int quick_geglu;       /* gated by x * sigmoid(1.702 x) (--quick-geglu) */
    int relu;              /* plain ReLU in the layers' MLP (OPT) */
    int gated;             /* gated MLP: an activation times a projection;
                              with silu, swiglu; with gelu, GeGLU */
    int layernorm_1p;      /* LayerNorm with a zero-centred gamma (Nemotron) */
    int learned_positions; /* a position table before the layers */
    double rotary_percent; /* of each head's width that rotary ops on q and k
                              rotate: 1, less for a partial rotary embedding
                              (GPT-NeoX's rotary_pct), 0 without rotary ops;
                              -1 in a plan read back that does not say */
    int parallel_residual; /* attention and MLP both read the layer's input
                              (GPT-NeoX's use_parallel_residual) */
    int tied_embeddings;   /* the LM head reads the embedding table */
    int mtp_layers;        /* multi-token-prediction modules after the head
                              (ap_graph.mtp_layers; --mtp-num-layers) */
    int bf16_first, bf16_last; /* layers kept in bf16 under FP8 at the start
                                  and end (ap_graph.bf16_first, bf16_last) */
    /* ap_graph's rope_base, norm_eps, rope_scaling and rope_scaling_factor:
     * no cost, stated by the Megatron-LM export; 0 where unknown. */
    double rope_base, norm_eps, rope_factor;
    int rope_scaling;
    double glu_offset, glu_clamp; /* ap_graph's: 0 for none */
    int linear_bias;       /* matmuls carry biases */
    int qkv_bias;          /* the query, key and value projections (a layer's
                              matmuls whose output has a heads label) do */
    int other_bias;        /* the layers' other matmuls: 0 none has one,
                              1 all, 2 some (no Megatron-LM flag says so) */
    int qk_norm;           /* a norm with a weight on a projection's output
                              (QK layernorm; MLA's norms on its latent ones) */
    int qk_l2;             /* a norm without one there (Llama 4's L2 norm of
                              q and k; --qk-l2-norm) */
    int qk_norm_wide;      /* that norm spans all heads of the projection, not
                              each head (OLMo 2's q_norm and k_norm) */
    int post_norm;         /* norms on attention's and the MLP's outputs
                              before the residual adds (Gemma 2, OLMo 2) */
    int norm_free;         /* the layers' norms have no weight (OLMo 1's
                              non-parametric LayerNorm) */
    int scaled_embedding;  /* an elementwise scale on the embeddings before
                              the layers (Gemma's sqrt(hidden), Granite's
                              embedding_multiplier) */
    int scaled_logits;     /* an elementwise pass on the logits before the
                              loss (Granite's logits_scaling, Gemma 2's cap) */
    int flash;             /* fused attention */
    int sinks;             /* a learned softmax offset per head (attention sinks) */
    int nope_layers;       /* layers without rotary where others have it (NoPE) */
    /* Those layers as Megatron-LM's --no-rope-freq reads them ("": none;
     * ap_nope_freq_format; "?" where no form fits). */
    char nope_freq[256];
    /* The shortest attention chunk (Llama 4's chunked attention) shorter
     * than the sequence it attends over; 0 where none is. */
    long long chunk;
    /* Sliding-window attention: the keys each query of a windowed layer
     * meets (0: no layer has a window; -1: layers with windows of different
     * lengths), and which layers have it as Megatron-LM's
     * --window-attn-skip-freq reads it ("": every layer;
     * ap_window_freq_format; "?" where no form fits). */
    long long window;
    char window_freq[256];
    double hidden_dropout;    /* dropout after attention and MLP, and */
    double attention_dropout; /* inside attention: probabilities, -1 in a
                                 plan read back that does not say */
} ap_model_shape;

void ap_model_shape_of(const ap_graph *g, ap_model_shape *out);
/* ap_megatron_plan with g's shape already found (ap_model_shape_of), for a
 * caller that prices many configurations of one model: the sweep. NULL
 * finds it, as ap_megatron_plan does. bound: as ap_plan_evaluate_within's
 * (0: none). */
int ap_megatron_plan_shaped(const ap_graph *g, const ap_cluster *c,
                            const ap_megatron *m, const ap_model_shape *shape,
                            double bound, ap_plan *out, char *err);
/* Puts 1 in moe[i] for each of g's layers i that routes to experts, 0 for
 * the others (g->nlayers entries); returns how many are MoE. */
int ap_model_moe_layers(const ap_graph *g, unsigned char *moe);
/* Megatron-LM's --moe-layer-freq (an integer N: every Nth layer from the
 * first; or a list expression such as "[0]*3+[1]*58") into moe[0..layers):
 * AP_EINPUT, naming the flag and what is wrong, for text Megatron-LM would
 * not read or a list of another length. */
int ap_moe_freq_parse(const char *text, int layers, unsigned char *moe, char *err);
/* The pattern moe[0..layers) as Megatron-LM reads it back, the shortest of
 * its forms: "" where every layer is MoE (its default), "N", runs
 * ("[0]*3+[1]*58") or a period ("([0]+[1])*24"). -1 when none fits len. */
int ap_moe_freq_format(const unsigned char *moe, int layers, char *buf, size_t len);
/* Puts 1 in window[i] for each of g's layers i whose attention has a
 * sliding window, 0 for the others (g->nlayers entries); returns the
 * window in keys, 0 where no layer has one, -1 where layers have windows
 * of different lengths. */
long long ap_model_window_layers(const ap_graph *g, unsigned char *window);
/* The shortest sliding window (or attention chunk) of g's attention that
 * is shorter than the sequence its op attends over (*seq gets that
 * sequence, where seq is not NULL); 0 where no window is: context
 * parallelism is priced under such a window with the all-to-all alone
 * (cp_comm a2a), under such a chunk not at all (ap_model_short_chunk, the
 * same for chunks alone). */
long long ap_model_short_window(const ap_graph *g, long long *seq);
long long ap_model_short_chunk(const ap_graph *g, long long *seq);
/* Megatron-LM's --window-attn-skip-freq into window[0..layers), 1 where the
 * layer has the window: an integer N windows layer i (from 0) when
 * (i + 1) % N != 0 (one full-attention layer after N - 1 windowed ones,
 * not --moe-layer-freq's i % N == 0), or a list expression as
 * ap_moe_freq_parse reads it, 1 for a windowed layer. AP_EINPUT, naming
 * the flag, as ap_moe_freq_parse. */
int ap_window_freq_parse(const char *text, int layers, unsigned char *window, char *err);
/* The windowed layers window[0..layers) as that flag reads them back, the
 * shortest of its forms: "" where every layer has the window (Megatron-LM's
 * default), "N", or a list expression. -1 when none fits len. */
int ap_window_freq_format(const unsigned char *window, int layers, char *buf, size_t len);
/* Puts 1 in nope[i] for each of g's layers i whose attention takes no
 * rotary embedding while another layer's does (NoPE), 0 for the others
 * (g->nlayers entries); returns how many are NoPE, 0 where every layer or
 * none rotates. */
int ap_model_nope_layers(const ap_graph *g, unsigned char *nope);
/* Megatron-LM's --no-rope-freq into nope[0..layers), 1 where the layer
 * takes no rotary embedding: an integer N, which must divide the layers,
 * makes layer i (from 0) NoPE when (i + 1) % N == 0 (one NoPE layer after
 * N - 1 rotary ones, Llama 4's 4), or a list expression as
 * ap_moe_freq_parse reads it, 1 for NoPE. AP_EINPUT, naming the flag. */
int ap_nope_freq_parse(const char *text, int layers, unsigned char *nope, char *err);
/* The NoPE layers nope[0..layers) as that flag reads them back, the
 * shortest of its forms: "" where every layer rotates (Megatron-LM's
 * default), "N", or a list expression. -1 when none fits len. */
int ap_nope_freq_format(const unsigned char *nope, int layers, char *buf, size_t len);

/* plan.json as read back: the layout the exporter needs, no prices beyond
 * the predicted step time. Each stage lists every op of its blocks with
 * the op's parsed sharding. */
typedef struct {
    char op[AP_NAME_LEN];
    ap_strategy s;
    int block; /* index in the stage's "blocks" array, for messages */
} ap_plan_desc_op;

typedef struct {
    int first_layer, nlayers;
    int embedding, head;
    int first_rank, ngpus;
    int mesh[2];
    ap_recompute recompute;
    int nops;
    ap_plan_desc_op *ops;
    int replicas; /* data-parallel copies of the mesh; absent reads as 1 */
    /* "expert_mesh": [ep, etp] and "expert_replicas" under MoE parallel
     * folding (the experts' shardings are on it); 0 when absent. */
    int expert_mesh[2];
    int expert_replicas;
} ap_plan_desc_stage;

typedef struct {
    char source[AP_NAME_LEN * 2]; /* the plan file, for messages */
    char model[AP_NAME_LEN];
    char model_path[AP_NAME_LEN * 2]; /* "" when the plan has none */
    char cluster[64];
    int gpus, gpus_per_node;
    double global_batch, micro_batch;
    int nmicro, seq;
    ap_schedule schedule;
    int vchunks;
    /* "chunk_layers": each model chunk's layers, nstages * vchunks of them
     * in ap_plan.chunk_layers' order; NULL when absent (even chunks). */
    int *chunk_layers;
    ap_zero zero;
    int serial_grad_sync; /* "overlap_grad_reduce": false; absent reads as
                             overlapped (plans written before the field) */
    int serial_param_gather; /* "overlap_param_gather": false; absent reads
                             as the plan's overlap_grad_reduce */
    /* "fp8", "tp_comm_overlap", "fp8_param_gather", "moe_a2a_overlap",
     * "delay_wgrad_compute" and "grad_reduce_in_fp32" (true: on),
     * "cross_entropy", "cp_comm_type", and "main_params_dtype",
     * "exp_avg_dtype", "exp_avg_sq_dtype"; each absent reads as its zeroed
     * default: off, unfused, p2p, fp32 (2-byte gradients). */
    ap_run_settings run;
    int has_shape;
    ap_model_shape shape;
    /* "recompute_method" and "recompute_num_layers"; absent reads as
     * uniform 1 (plans written before the fields) */
    ap_recompute_method recompute_method;
    int recompute_layers;
    int nstages;
    ap_plan_desc_stage *stages;
    double step_time;
} ap_plan_desc;

/* Parses autopar-plan/1 text; errors name `source` and the JSON path
 * ("plan.json: stages[1].mesh: expected [d0, d1]"). On success the caller
 * frees *out with ap_plan_desc_free(); on failure nothing is left to free. */
int ap_plan_desc_parse(const char *text, size_t len, const char *source,
                       ap_plan_desc *out, char *err);
int ap_plan_read(const char *path, ap_plan_desc *out, char *err);
void ap_plan_desc_free(ap_plan_desc *d);

const char *ap_launcher_name(ap_launcher l); /* "Megatron-LM", ... */
/* "megatron", "torchtitan" or "deepspeed"; AP_EINPUT naming the choices. */
int ap_launcher_from_name(const char *s, ap_launcher *out, char *err);
/* The name ap_launcher_from_name reads: "megatron", ... */
const char *ap_launcher_key(ap_launcher l);
/* Whether the launcher overlaps the data-parallel gradient reduction with
 * the backward at this ZeRO level: DeepSpeed only under ZeRO-2 and 3
 * (overlap_comm; ZeRO-0 and 1 reduce after the backward whatever the config
 * says), Megatron-LM and torchtitan at every level. */
int ap_launcher_overlaps_grad(ap_launcher l, ap_zero zero);

/* A plan as launcher degrees. mbs is per data-parallel replica. */
typedef struct {
    int tp, pp, dp, cp, ep, etp, vpp, sp, mbs;
    double gbs;
    int nmicro;
    ap_recompute recompute;
    ap_zero zero;
    ap_schedule schedule;
    int even; /* every stage holds the same number of layers */
    int overlap_grad; /* gradient reduction overlapped with backward */
    int overlap_param; /* ZeRO-1's parameter all-gather overlapped with the
                          next forward (--overlap-param-gather) */
    int first, last;  /* when not even and only the first and last stage
                         differ from the others: their layers (else 0) */
    int account_embedding, account_loss; /* the first and last stage hold a
                         layer fewer, as Megatron's split counting the
                         embedding and the loss as layers gives them
                         (used where first and last cannot state it) */
    ap_run_settings run; /* the plan's; tp_overlap only with tp > 1 and sp */
    ap_recompute_method recompute_method; /* under full recomputation, with */
    int recompute_layers;                 /* its N (uniform reads 0 as 1) */
} ap_degrees;

/* Derives the degrees from the stages' meshes and every op's sharding, and
 * checks that launcher `to` runs exactly this plan: the same mesh on every
 * stage, each op sharded as Megatron's tensor-parallel pattern shards it,
 * one recomputation policy, a schedule and stage split the launcher can
 * state. Anything else is AP_EINPUT saying what differs (stage, op,
 * sharding, what the launcher would need). `g` is the plan's model. */
int ap_plan_classify(const ap_graph *g, const ap_plan_desc *p, ap_launcher to,
                     ap_degrees *out, char *err);
/* Whether launcher `to` can state the model of `g` under the run settings
 * at all, whatever the plan: the architecture checks of ap_plan_classify
 * alone (post-norms, a parallel residual, biases no flag states, ...),
 * which a plan that must be exported can be refused by before it is
 * searched for. AP_EINPUT with err naming `source` where it cannot. */
int ap_launcher_check_model(const ap_graph *g, ap_launcher to, const ap_run_settings *run,
                            const char *source, char *err);
/* Classifies and writes the launcher's input: a shell snippet with the
 * Megatron-LM arguments and a torchrun line, the torchtitan flags and a
 * torchrun line, or a DeepSpeed config JSON. The caller frees *text. */
int ap_export(const ap_graph *g, const ap_plan_desc *p, ap_launcher to,
              char **text, char *err);

#endif
