/* graph.h -- the operator DAG of one training step.
 *
 * A model declares named dimensions, each a single-character label with a
 * size (b = batch, s = sequence, h = hidden, ...). A tensor's shape is a
 * string of labels ("bsh"); an op's iteration space follows from the labels
 * of its tensors, so sharding strategies are derived from labels alone.
 *
 * A graph is built in memory (ap_graph_new, ap_graph_add_*), then sealed by
 * ap_graph_finalize(), which validates it and computes every derived
 * quantity: forward FLOPs, bytes moved, bytes saved for backward, the
 * topological order and the layer classes. Only a finalized graph may be
 * handed to costmodel/ or planner/.
 *
 * Errors: every function that can fail returns AP_OK (0) or an ap_status and
 * writes a message into the caller's buffer `err` of AP_ERR_LEN bytes. Input
 * errors (AP_EINPUT) name the file and JSON path where one is known.
 *
 * Ownership: the graph owns every string and array inside it; the caller owns
 * the graph and frees it with ap_graph_free(). Pointers into a graph stay valid
 * until the graph is freed, except that ap_graph_add_* may move the arrays
 * until ap_graph_finalize() is called.
 */
#ifndef AP_GRAPH_H
#define AP_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#define AP_ERR_LEN 512
#define AP_MAX_RANK 8  /* labels per tensor */
#define AP_MAX_IO 8    /* inputs or outputs per op */
#define AP_MAX_DIMS 52 /* a-z, A-Z */
#define AP_NAME_LEN 128
#define AP_AUTO_LAYERS 64 /* most layers given to a graph that tags none */
/* Bounds on a model (docs/hardening.md): beyond them no search is sensible,
 * and refusing early keeps loading any file to well under a second. */
#define AP_MAX_TENSORS 1000000
#define AP_MAX_OPS 1000000
#define AP_MAX_FLOPS 1e30 /* forward FLOPs of one step */
#define AP_MAX_SEQ (1 << 24)   /* tokens per sequence a build may ask for */
#define AP_MAX_BATCH (1 << 20) /* sequences a graph may be built at */

/* Status codes double as the process exit codes of the command-line tool. */
typedef enum {
    AP_OK = 0,
    AP_EINTERNAL = 1, /* out of memory, solver failure, a bug */
    AP_EINPUT = 2     /* the user's input is wrong; the message says where */
} ap_status;

typedef enum { AP_BF16, AP_FP16, AP_FP32, AP_FP8, AP_INT32, AP_INT64 } ap_dtype;

typedef enum { AP_TENSOR_INPUT, AP_TENSOR_PARAM, AP_TENSOR_ACT } ap_role;

/* What a dimension means; the planner and the exports need to know which
 * label is the batch (micro-batch size, data parallel), the sequence
 * (sequence and context parallel), the heads (tensor parallel attention) and
 * the experts (expert parallel). */
typedef enum {
    AP_DIM_OTHER,
    AP_DIM_BATCH,
    AP_DIM_SEQ,
    AP_DIM_HIDDEN,
    AP_DIM_FFN,
    AP_DIM_HEADS,
    AP_DIM_KV_HEADS,
    AP_DIM_HEAD_DIM,
    AP_DIM_VOCAB,
    AP_DIM_EXPERTS,
    AP_DIM_CAPACITY /* tokens per expert; scales with the batch */
} ap_dim_kind;

typedef enum {
    AP_OP_MATMUL,    /* einsum over labels, optional bias as third input */
    AP_OP_UNARY,     /* sub: ap_unary */
    AP_OP_BINARY,    /* sub: ap_binary; inputs broadcast by label */
    AP_OP_NORM,      /* sub: ap_norm; inputs x [, weight [, bias]] */
    AP_OP_SOFTMAX,   /* over the last label */
    AP_OP_DROPOUT,   /* attr p */
    AP_OP_ATTENTION, /* q[b,s,n,d] k[b,s,g,d] v[b,s,g,e] -> o[b,s,n,e] */
    AP_OP_EMBEDDING, /* ids[b,s], table[v,h] -> [b,s,h] */
    AP_OP_LOSS,      /* cross entropy: logits[b,s,v], labels[b,s] -> scalar */
    AP_OP_RESHAPE,   /* sub: ap_layout; reshape, transpose, split, concat */
    AP_OP_ROUTER,    /* MoE gate: x[b,s,h], w[h,e] -> probs[b,s,e]; top_k, route_* */
    AP_OP_DISPATCH,  /* x[b,s,h], probs[b,s,e] -> [e,c,h] (tokens to experts) */
    AP_OP_COMBINE    /* y[e,c,h], probs[b,s,e] -> [b,s,h] (weighted sum back) */
} ap_op_kind;

/* AP_UNARY_ROTARY is the rotary position embedding (RoPE) of q or k: inputs
 * x [..., d] and, optionally, its cos/sin table [s, r] (an input, r <= d, even):
 * the first r elements of each head are rotated, the rest copied. Without a
 * table the whole last label is rotated. AP_UNARY_RELU2 is the squared ReLU,
 * relu(x)^2, of Nemotron's MLP: one fused elementwise kernel.
 * AP_UNARY_SOFTCAP is c * tanh(x / c), Gemma 2's cap on its logits.
 * AP_UNARY_QUICK_GELU is x * sigmoid(1.702 x), the gate's activation of
 * Megatron-LM's --quick-geglu MLP (GPT-OSS's). */
typedef enum {
    AP_UNARY_GELU,
    AP_UNARY_SILU,
    AP_UNARY_RELU,
    AP_UNARY_SCALE,
    AP_UNARY_ROTARY,
    AP_UNARY_RELU2,
    AP_UNARY_SOFTCAP,
    AP_UNARY_QUICK_GELU
} ap_unary;
typedef enum { AP_BINARY_ADD, AP_BINARY_MUL } ap_binary;
/* AP_NORM_LAYER1P is LayerNorm with a zero-centred gamma (it scales by
 * weight + 1, Megatron's --apply-layernorm-1p): LayerNorm's cost, a
 * different model. */
typedef enum { AP_NORM_LAYER, AP_NORM_RMS, AP_NORM_LAYER1P } ap_norm;
typedef enum { AP_LAYOUT_RESHAPE, AP_LAYOUT_TRANSPOSE, AP_LAYOUT_SPLIT, AP_LAYOUT_CONCAT } ap_layout;
/* A router's scores: a softmax over all the experts' logits, or a sigmoid
 * of each expert's own (DeepSeek-V3's, Llama 4's). */
typedef enum { AP_ROUTE_SOFTMAX, AP_ROUTE_SIGMOID } ap_route_score;

/* The Megatron-Core modules an op belongs to, by the names Megatron-LM's
 * --recompute-modules gives them, as bits of ap_op.modules: selective
 * recomputation redoes the ops of the modules it names (docs/cost-model.md,
 * "Selective recomputation by module"). An op may be in several (an expert's
 * activation is in moe_act and in moe). core_attn is the attention kernel;
 * layernorm a norm Megatron-Core builds as a module of its own (not fused
 * into the linear layer after it); mlp a dense layer's MLP, its fused norm
 * included; moe_act the experts' activation; mla_up_proj multi-latent
 * attention's up projections and rotary embeddings; moe the whole MoE
 * layer, router to combine, shared experts included; shared_experts those
 * alone. */
typedef enum {
    AP_MODULE_CORE_ATTN = 1 << 0,
    AP_MODULE_MLP = 1 << 1,
    AP_MODULE_MOE_ACT = 1 << 2,
    AP_MODULE_LAYERNORM = 1 << 3,
    AP_MODULE_MLA_UP_PROJ = 1 << 4,
    AP_MODULE_MOE = 1 << 5,
    AP_MODULE_SHARED_EXPERTS = 1 << 6
} ap_module;
#define AP_MODULE_COUNT 7

typedef struct {
    char label; /* the single character used in shapes */
    char name[AP_NAME_LEN];
    ap_dim_kind kind;
    int64_t size;
} ap_dim;

typedef struct {
    char *name;
    char shape[AP_MAX_RANK + 1]; /* labels, NUL-terminated; "" for a scalar */
    int rank;
    ap_dtype dtype;
    ap_role role;
    int producer;  /* op index, or -1 for inputs and parameters */
    int layer;     /* layer of the producer (activations) or first consumer */
    int64_t elems; /* product of the label sizes */
    int64_t bytes;
    int consumers; /* inputs of ops that name it (derived) */
    int first_consumer; /* lowest index of an op reading it, -1 if none */
} ap_tensor;

typedef struct {
    char *name;
    ap_op_kind kind;
    int sub; /* ap_unary, ap_binary, ap_norm or ap_layout by kind, else 0 */
    int layer; /* transformer block index, or -1 (embedding, head, loss) */
    int ninputs, noutputs;
    int inputs[AP_MAX_IO];  /* tensor indices */
    int outputs[AP_MAX_IO]; /* tensor indices */

    /* Attributes; meaningful only for the kinds named. */
    int causal;       /* attention */
    int flash;        /* attention: fused kernel that saves no s x s matrix */
    /* Attention: a sliding window, each query meeting the `window` keys
     * ending at its own position (causal only); 0 for none. A window as
     * long as the sequence or longer changes nothing. */
    int64_t window;
    /* Attention: chunked attention, each query meeting the keys of its own
     * chunk of `chunk` tokens up to itself (Llama 4's; causal only); 0 for
     * none. A chunk as long as the sequence changes nothing. */
    int64_t chunk;
    double dropout_p; /* dropout, and attention's internal dropout */
    int top_k;        /* router, dispatch, combine */
    /* Router, dispatch, combine: group-limited routing (DeepSeek-V3's
     * n_group, topk_group): a token's top_k experts come from the experts
     * of group_topk of the `groups` equal groups (experts in index order).
     * 0, 0: any experts. */
    int groups, group_topk;
    /* Router: how it scores and weighs the experts (docs/model-format.md).
     * A token's top_k experts are those of the best scores (route_score),
     * each score plus a per-expert bias where route_bias (updated to balance
     * the load; it picks the experts, not their weights: DeepSeek-V3's
     * e_score_correction_bias); their weights are the scores, divided by
     * their sum where route_norm, times route_scale. ap_graph_add_op sets
     * softmax, route_norm 1, no bias, route_scale 1: softmax over the top_k
     * logits, Megatron-Core's default router. route_on_input: the weight
     * multiplies the expert's input rather than its output (Llama 4's;
     * Megatron-LM's --moe-apply-probs-on-input, top_k 1 only). Costs do not
     * depend on them; the exports state them. */
    ap_route_score route_score;
    int route_norm, route_bias, route_on_input;
    double route_scale;
    unsigned modules; /* ap_module bits; 0 for an op in none */
    int keep_bf16;    /* in a layer kept in bf16 under FP8 (ap_graph_keep_bf16) */

    /* Derived by ap_graph_finalize(), at the batch size the graph declares. */
    char iter[AP_MAX_DIMS + 1]; /* labels of the iteration space, sorted */
    char contracted[AP_MAX_DIMS + 1]; /* iteration labels in no output */
    double flops;       /* forward FLOPs; matmul-like work counts 2 per MAC */
    double bytes_moved; /* forward bytes read plus written (views move none) */
    double saved_bytes; /* bytes this op adds to what backward keeps; a tensor
                           saved by several ops is counted at the first */
    double param_count; /* elements of the parameters this op owns (first use) */
    unsigned saves_in;  /* bit i: inputs[i] is saved here (first saver only) */
    unsigned saves_out; /* bit i: outputs[i] is saved here (first saver only) */
    double saved_extra; /* saved bytes that are no tensor of the graph: dropout
                           masks, softmax statistics, s x s matrices */
} ap_op;

typedef struct {
    char name[AP_NAME_LEN];
    char source[AP_NAME_LEN * 2]; /* file it came from, for messages */
    int built;                    /* 1: built from a Hugging Face config or
                                     Megatron-LM flags with ap_build_opts;
                                     0: read from the project format */
    ap_dtype dtype;               /* default for tensors without their own */

    int ndims;
    ap_dim dims[AP_MAX_DIMS];
    int ntensors, cap_tensors;
    ap_tensor *tensors;
    int nops, cap_ops;
    ap_op *ops;

    /* Derived by ap_graph_finalize(). */
    int finalized;
    int *topo;       /* op indices in a topological order (stable: by index) */
    int nlayers;     /* 1 + the largest layer index */
    int auto_layers; /* the model tagged no layers: ap_graph_finalize cut the
                        topological order into runs of even FLOPs */
    int *layer_class;/* per layer: the smallest layer index with an identical
                        block (same kinds, shapes, attributes and wiring) */
    double total_flops, total_params, total_param_bytes, total_saved_bytes;
    /* Multi-token-prediction modules (Megatron-Core's MTP, DeepSeek-V3's
     * next-n predictors) after the head: ops outside the layers, named
     * "mtp<k>.", each a norm of the hidden state and of the next token's
     * embedding, a projection of the two, a transformer layer, a norm, the
     * output layer and a loss. 0 without (docs/hf-models.md). */
    int mtp_layers;
    /* Layers at the start and the end whose ops keep_bf16: under FP8 their
     * linear layers run in bf16 (Megatron-LM's --first-last-layers-bf16,
     * --num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16), as given:
     * counts past the model's layers keep every layer. 0: none. */
    int bf16_first, bf16_last;
    /* The model's arithmetic that changes no cost, kept so that the exports
     * state it: the rotary base (rope_theta) and the norms' epsilon, 0 where
     * the model does not say; the rotary scaling, AP_ROPE_SCALING_LLAMA3
     * (Llama 3.1's, which Megatron-LM's --use-rope-scaling runs, with
     * rope_scaling_factor) or AP_ROPE_SCALING_OTHER (YaRN and the rest,
     * which no export states). */
    double rope_base, norm_eps, rope_scaling_factor;
    int rope_scaling;
    /* The gated MLPs' arithmetic beside the activation, no cost either:
     * the offset added to the linear half (GPT-OSS's up + 1) and the clamp
     * on both halves' inputs (its swiglu_limit: the gate clamped above,
     * the linear half both ways), which Megatron-LM states as
     * --glu-linear-offset and --activation-func-clamp-value; 0 for none. */
    double glu_offset, glu_clamp;

    struct ap_graph_index *index; /* private to graph.c: names to indices */
} ap_graph;

enum { AP_ROPE_SCALING_NONE, AP_ROPE_SCALING_LLAMA3, AP_ROPE_SCALING_OTHER };

/* Construction. Each add returns the new item's index (>= 0), or -1 with `err`
 * filled when the name is a duplicate, a label is unknown or a size is bad. */
ap_graph *ap_graph_new(const char *name);
void ap_graph_free(ap_graph *g);
int ap_graph_add_dim(ap_graph *g, char label, const char *name, ap_dim_kind kind,
                     int64_t size, char *err);
int ap_graph_add_tensor(ap_graph *g, const char *name, const char *shape,
                        ap_dtype dtype, ap_role role, char *err);
/* Adds an op reading and writing tensors by name. Attributes are set on the
 * returned op afterwards (g->ops[i].causal = 1, ...) before finalizing. */
int ap_graph_add_op(ap_graph *g, const char *name, ap_op_kind kind, int sub,
                    int layer, const char *const *inputs, int ninputs,
                    const char *const *outputs, int noutputs, char *err);

/* Validates shapes against each op's kind (layout ops keep their batch, seq
 * and capacity labels, so that their element counts agree at any size),
 * single producers, no cycles, no unused or undefined activations, and layer
 * tags that agree with the data flow (no op reads a later layer's tensor;
 * an op without a layer runs before the layers when it precedes every
 * layer's op by index, else after them); then computes the derived fields.
 * Returns AP_EINPUT with the offending op or tensor named in `err`. */
int ap_graph_finalize(ap_graph *g, char *err);
/* Sets every attention op's flash (1: a fused kernel, 0: unfused) and
 * finalizes again: --flash-attention for a model in the project format. */
int ap_graph_set_flash(ap_graph *g, int flash, char *err);

/* Loads a model: the project's JSON format, or a Hugging Face config.json
 * (recognised by "model_type") built with `opt`. A model in the project
 * format needs exactly one dimension of kind batch and one of kind seq.
 * The caller owns *out. */
typedef struct {
    int64_t seq;        /* sequence length; 0 = the config's default */
    int64_t batch;      /* batch size the graph is built at; 0 = 1 */
    int flash;          /* 1 (default) or 0 */
    int dropout;        /* 1: dropout after attention and MLP (p = 0.1) */
    int mtp_layers;     /* Hugging Face configs: that many MTP modules after
                           the head (--mtp-num-layers); 0 (default) none. A
                           model file states its own ("mtp_layers"), which
                           this must then match or leave 0. */
    int bf16_first, bf16_last; /* layers kept in bf16 under FP8 at the start
                                  and end (ap_graph_keep_bf16); 0 (default) */
} ap_build_opts;

/* The most MTP modules a model may have. */
#define AP_MAX_MTP 16
void ap_build_opts_default(ap_build_opts *o);
int ap_graph_load(const char *path, const ap_build_opts *opt, ap_graph **out,
                  char *err);
/* The same from text already in memory (a file's contents, a fuzzer's
 * input); `source` names it in messages. */
int ap_graph_load_buffer(const char *text, size_t len, const char *source,
                         const ap_build_opts *opt, ap_graph **out, char *err);
int ap_graph_parse_json(const char *text, size_t len, const char *source,
                        ap_graph **out, char *err);
int ap_graph_from_hf(const char *text, size_t len, const char *source,
                     const ap_build_opts *opt, ap_graph **out, char *err);

/* A decoder-only transformer stated by its structure instead of a file: what
 * a Megatron-LM command line says (the planner's ap_megatron_model fills
 * it). ap_graph_from_decoder builds the graph ap_graph_from_hf builds for a
 * Hugging Face config of the same structure, at opt->seq tokens (which it
 * needs). Sizes are checked against the Hugging Face bounds and `source`
 * names the description in messages. */
typedef enum { AP_MLP_GELU, AP_MLP_SWIGLU, AP_MLP_SQUARED_RELU, AP_MLP_QUICK_GEGLU } ap_mlp_act;
typedef struct {
    int64_t layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
    int64_t positions;     /* rows of a learned position table; 0: none */
    double rotary_percent; /* share of each head rotary rotates; 0: none */
    int rmsnorm;           /* else LayerNorm with a bias */
    int layernorm_1p;      /* LayerNorm with a zero-centred gamma */
    ap_mlp_act act;        /* the dense MLP's; experts SwiGLU, or quick GeGLU
                              under AP_MLP_QUICK_GEGLU */
    int qkv_bias, o_bias, mlp_bias;
    int tied;    /* the output layer reads the embedding table */
    int sinks;   /* a learned softmax offset per head (attention sinks) */
    int qk_norm; /* norms on queries and keys (on MLA's latents) */
    /* Experts (0: dense), each moe_ffn wide, top_k per token (with biases
     * under mlp_bias, as Megatron-LM's --add-bias-linear), shared_ffn
     * wide shared experts in all (0: none); moe_layer[i] 1 where layer i
     * routes (NULL: every layer); group-limited routing (0, 0: none). */
    int64_t experts, top_k, moe_ffn, shared_ffn;
    const unsigned char *moe_layer;
    int64_t route_groups, route_group_topk;
    /* The router (ap_op's route_*), zero for Megatron-Core's default, a
     * softmax over the top_k logits: route_sigmoid scores each expert with
     * a sigmoid; route_unnormalized leaves the top_k weights as scored
     * rather than renormalised to sum 1 (a softmax over all experts,
     * Megatron-LM's --moe-router-pre-softmax; a sigmoid at top_k 1);
     * route_bias adds a per-expert bias to the scores that pick; the
     * weights are multiplied by route_scale (0 or 1: not scaled);
     * route_on_input weighs the expert's input, not its output. */
    int route_sigmoid, route_unnormalized, route_bias, route_on_input;
    double route_scale;
    /* Multi-latent attention: its LoRA ranks (q_lora 0: none) and head
     * dimensions; rotary then turns qk_rope of each head. */
    int mla;
    int64_t q_lora, kv_lora, qk_nope, qk_rope, v_head_dim;
    /* A sliding window of `window` keys per query, its own included (0:
     * none), on the layers where window_layer[i] is 1 (NULL: every layer);
     * the others attend to the whole sequence. */
    int64_t window;
    const unsigned char *window_layer;
    /* Layers where nope_layer[i] is 1 take no rotary embedding (NoPE;
     * NULL: every layer rotates where rotary_percent or MLA gives one). */
    const unsigned char *nope_layer;
    /* The rotary layers' q and k normed to unit length without a weight
     * (Llama 4's L2 norm; Megatron-LM's --qk-l2-norm). */
    int qk_l2;
    /* The weights and activations in fp16 (Megatron-LM's --fp16); else
     * bf16. */
    int fp16;
} ap_decoder;

int ap_graph_from_decoder(const ap_decoder *d, const char *source,
                          const ap_build_opts *opt, ap_graph **out, char *err);
/* Marks the ops of the first `first` and the last `last` layers keep_bf16 and
 * finalizes g again, so that those layers are classes of their own: under
 * FP8 Megatron-LM runs them in bf16 (--first-last-layers-bf16). Layers
 * counted twice are kept once. Returns AP_OK, or the finalize's status. */
int ap_graph_keep_bf16(ap_graph *g, int first, int last, char *err);
/* Parameters one token touches: every parameter, except that those with an
 * experts label count top_k/E of their elements (top_k from the router that
 * produces that label). Equals total_params for a dense model. */
double ap_graph_active_params(const ap_graph *g);
/* Writes a finalized graph in the project's JSON format. The caller frees the
 * returned string with free(). */
char *ap_graph_to_json(const ap_graph *g);
/* Writes x into buf (32 bytes are enough) in the fewest digits, 15 to 17,
 * that read back as x, and returns buf. cJSON prints 15 digits whenever
 * they come within a rounding error of x, so 6/7 would read back as
 * another double; the model and plan files write their fractional numbers
 * this way, since an export compares them exactly. */
const char *ap_number_exact(double x, char *buf, size_t len);
/* Adds x to the cJSON object o under name as ap_number_exact writes it
 * (null where x is not finite, as cJSON would); returns the new item, or
 * NULL when out of memory. */
struct cJSON;
struct cJSON *ap_json_add_exact(struct cJSON *o, const char *name, double x);
/* What kind of autopar input a parsed JSON document is, for a message
 * ("a plan (\"format\": \"autopar-plan/1\")", "a Hugging Face config
 * ..."), by its "format" or a Hugging Face config's "model_type"; NULL
 * where it is none of them. The string is static. */
const char *ap_json_kind(const struct cJSON *root);

/* Lookups; -1 when absent. */
int ap_graph_dim_index(const ap_graph *g, char label);
const ap_dim *ap_graph_dim(const ap_graph *g, char label);
int ap_graph_find_tensor(const ap_graph *g, const char *name);
int ap_graph_find_op(const ap_graph *g, const char *name);
/* A gated unit's activation: the ap_unary of the op producing input i of a
 * product (AP_BINARY_MUL) when that op is an activation (gelu, silu, relu,
 * relu2, quick_gelu), else -1. */
int ap_glu_activation(const ap_graph *g, const ap_op *op, int i);
/* How many trailing labels of its input a norm normalises over: its
 * weight's (OLMo 2's query norm spans heads and head dim, "nd"), else the
 * last label alone; 0 for an op that is no norm. */
int ap_norm_span(const ap_graph *g, const ap_op *op);
/* The scores per head that attention over s tokens counts in its FLOPs:
 * s * s for full attention (Megatron-LM's convention, which counts the half
 * a causal mask skips too), and under a sliding window of w < s keys twice
 * the w*s - w*w/2 scores the window leaves, 2*s*w - w*w, so that the two
 * agree at w = s. window 0 is none. */
double ap_attention_scores(double s, int64_t window);
/* The same under chunked attention of chunks of c < s tokens: each chunk's
 * own square, c * c for each whole chunk and r * r for the r left over. */
double ap_attention_chunk_scores(double s, int64_t c);
/* The label of the first dimension of a kind, or 0 if the model has none. */
char ap_graph_label_of(const ap_graph *g, ap_dim_kind kind);

/* Names, for messages and JSON. */
const char *ap_dtype_name(ap_dtype t);
int ap_dtype_from_name(const char *s, ap_dtype *out);
/* "llama3" or "other" for an AP_ROPE_SCALING_ value ("" for none), and the
 * inverse of the two names; AP_EINPUT for another. */
const char *ap_rope_scaling_name(int scaling);
int ap_rope_scaling_from_name(const char *s, int *out);
size_t ap_dtype_size(ap_dtype t);
const char *ap_op_kind_name(const ap_op *op); /* "matmul", "gelu", "rmsnorm" ... */
/* The inverse: a JSON kind name to kind and sub; AP_EINPUT if unknown. */
int ap_op_kind_from_name(const char *s, ap_op_kind *kind, int *sub);
/* "core_attn", "mlp", ... for one ap_module bit; NULL for anything else. */
const char *ap_module_name(unsigned bit);
/* Every module's name in bit order, for messages that list them
 * (tests/test_recompute_modules.c checks it against ap_module_name). */
#define AP_MODULE_NAMES "core_attn, mlp, moe_act, layernorm, mla_up_proj, moe, shared_experts"
/* The bit named s, or 0 when s names no module. */
unsigned ap_module_from_name(const char *s);
/* The ap_module bits of any op of g: the modules the model has. */
unsigned ap_graph_modules(const ap_graph *g);
const char *ap_dim_kind_name(ap_dim_kind k);
int ap_dim_kind_from_name(const char *s, ap_dim_kind *out);

/* The offset of the first raw control character in text (a byte below
 * 0x20 but tab, newline and return), which JSON allows only escaped and
 * cJSON would take inside a string (a NUL cutting it short), or of an
 * escaped NUL (\u0000) inside a string, which cJSON decodes into one; len
 * where there is none. Every JSON reader refuses such text, saying which
 * with ap_json_control_what (into buf, cap bytes; returns buf). */
size_t ap_json_control_byte(const char *text, size_t len);
const char *ap_json_control_what(const char *text, size_t at, char *buf, size_t cap);
/* 1 when text nests arrays and objects deeper than cJSON parses
 * (CJSON_NESTING_LIMIT, 1000): the reason a parse failed where the text
 * is otherwise well formed. */
#define AP_JSON_MAX_DEPTH 1000
int ap_json_too_deep(const char *text, size_t len);
/* cJSON stops at the end of the first value (`end`, as
 * cJSON_ParseWithLengthOpts returns it); anything but blanks after it is a
 * second document pasted on or a hand edit gone wrong, which every reader
 * refuses. Returns the offset where it starts, or 0 when there is none. */
size_t ap_json_trailing(const char *text, size_t len, const char *end);

/* The first key given twice in one object of the tree under root, with
 * its path ("text_config.num_hidden_layers", "stages[2].ops") written
 * into path (cap bytes); NULL when every key is unique. JSON leaves
 * duplicates to the reader (cJSON keeps the first, Python's json the
 * last), so a file with one means two models: every reader refuses it. */
struct cJSON;
const char *ap_json_duplicate(const struct cJSON *root, char *path, size_t cap);

/* The first control character (below 0x20, or DEL) in s, or 0. Names and
 * other strings go into reports, plan files and the launch scripts the
 * exports write, where an escaped newline ("tiny\nrm -rf ~") would start a
 * shell command of its own; JSON allows control characters escaped, so
 * the readers refuse them there. */
int ap_control_char(const char *s);
/* s with each such character made '?', in place: for text autopar writes
 * from a file name or a command line into a file its readers refuse
 * control characters in. */
void ap_mask_control_chars(char *s);

/* Reads a whole file, refusing files over AP_MAX_FILE_BYTES. The caller frees
 * *text. */
#define AP_MAX_FILE_BYTES (64u << 20)
int ap_read_file(const char *path, char **text, size_t *len, char *err);

#endif
