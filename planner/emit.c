/* emit.c -- launcher degrees written as each launcher takes them: Megatron-LM
 * arguments with a torchrun line, torchtitan flags with a torchrun line, a
 * DeepSpeed config. docs/exports.md explains each mapping. The text is a
 * function of the plan and model alone, so exports can be compared byte for
 * byte. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/emit.h"
#include "planner/layout.h"
#include "planner/recompute.h"

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || (b->len + (size_t)n + 1 > b->cap)) {
        size_t cap = b->cap ? b->cap : 1024;
        while (n >= 0 && cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *nb = n < 0 ? NULL : realloc(b->buf, cap);
        if (!nb) {
            b->oom = 1;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static char *finish(sbuf *b)
{
    if (b->oom) {
        free(b->buf);
        return NULL;
    }
    return b->buf;
}

const char *ap_emit_recompute_name(ap_recompute r)
{
    return r == AP_RECOMPUTE_FULL ? "full" : r == AP_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

const char *ap_emit_schedule_name(ap_schedule s)
{
    return s == AP_SCHED_GPIPE ? "gpipe" : s == AP_SCHED_INTERLEAVED ? "interleaved-1f1b" : "1f1b";
}

static int recompute_layers(const ap_degrees *d)
{
    return ap_recompute_group(d->recompute_method, d->recompute_layers);
}

static int nodes_of(const ap_plan_desc *p)
{
    return p->gpus > p->gpus_per_node ? p->gpus / p->gpus_per_node : 1;
}

static int gpus_per_node(const ap_plan_desc *p)
{
    return p->gpus > p->gpus_per_node ? p->gpus_per_node : p->gpus;
}

static void header(sbuf *b, const char *who, const ap_plan_desc *p, const ap_degrees *d)
{
    put(b, "# %s launch for %s on %d GPUs (%d node%s x %d), from an autopar plan.\n", who,
        p->model, p->gpus, nodes_of(p), nodes_of(p) > 1 ? "s" : "", gpus_per_node(p));
    put(b, "# tp=%d pp=%d dp=%d cp=%d ep=%d sp=%d vpp=%d; %d micro-batch%s of %d per "
           "replica, global batch %.0f; recompute %s; ZeRO-%d\n",
        d->tp, d->pp, d->dp, d->cp, d->ep, d->sp, d->vpp, d->nmicro,
        d->nmicro == 1 ? "" : "es", d->mbs, d->gbs,
        ap_emit_recompute_name(d->recompute), (int)d->zero);
    if (d->recompute == AP_RECOMPUTE_FULL &&
        (d->recompute_method != AP_RECOMPUTE_UNIFORM || recompute_layers(d) != 1))
        put(b, "# Full recomputation: %s, %d layer%s (--recompute-method, "
               "--recompute-num-layers).\n", ap_recompute_method_name(d->recompute_method),
            recompute_layers(d), recompute_layers(d) == 1 ? "" : "s");
    if (d->run.fp8)
        put(b, "# The transformer layers' linear layers run in FP8; embedding, LM head "
               "and attention stay %s.\n", "bf16");
    if (d->run.fp8_param_gather)
        put(b, "# Their weights are held in FP8 with no bf16 copy and gathered in FP8 "
               "(%s).\n", "FP8 primary weights");
    if (d->run.tp_overlap)
        put(b, "# Sequence-parallel all-gathers and reduce-scatters overlap the linear "
               "layers' GEMMs (%s).\n", "Transformer Engine userbuffers");
    else if (p->run.tp_overlap && d->tp > 1)
        put(b, "# TP communication overlap left out: it needs sequence parallelism, "
               "which this plan %s; it was priced without it.\n", "does not use");
    if (d->run.moe_a2a_overlap)
        put(b, "# The expert all-to-alls overlap another micro-batch's compute (%s%s); "
               "Megatron-Core needs CUDA_DEVICE_MAX_CONNECTIONS above 1 for it.\n",
            "combined 1F1B", d->run.delay_wgrad ? ", expert weight gradients delayed" : "");
    if (d->run.cross_entropy != AP_CE_UNFUSED)
        put(b, "# The loss is priced as %s.\n", d->run.cross_entropy == AP_CE_TE
            ? "Transformer Engine's cross entropy (--cross-entropy-fusion-impl te)"
            : "Megatron-Core's fused cross entropy (--cross-entropy-loss-fusion)");
}

static void torchrun(sbuf *b, const ap_plan_desc *p, const char *entry, const char *var)
{
    put(b, "torchrun --nnodes %d --nproc-per-node %d --node-rank \"${NODE_RANK:-0}\" \\\n"
           "    --master-addr \"${MASTER_ADDR:-localhost}\" --master-port \"${MASTER_PORT:-6000}\" \\\n"
           "    %s $%s\n", nodes_of(p), gpus_per_node(p), entry, var);
}

/* The layers of each virtual stage, in a copy the caller frees: the plan's
 * model chunks where it has its own (chunk_layers, in Megatron's order),
 * else its stages. */
static int *virtual_stage_layers(const ap_plan_desc *p, int *n)
{
    *n = p->chunk_layers ? p->nstages * p->vchunks : p->nstages;
    int *layers = malloc(sizeof *layers * (size_t)*n);
    for (int i = 0; layers && i < *n; i++)
        layers[i] = p->chunk_layers ? p->chunk_layers[i] : p->stages[i].nlayers;
    return layers;
}

/* "Et*10|t*12|t*10L": the embedding, each virtual stage's layers, then the
 * loss, as ap_layout_format writes it for Megatron-LM to read back. It is
 * written bare: inside MEGATRON_ARGS's double quotes '|', '*' and the
 * parentheses are plain characters, and quotes of its own would end that
 * string early (running "t*7" as a command after a pipe) or, escaped,
 * reach Megatron-LM as part of the layout. */
static void megatron_layout(sbuf *b, const ap_plan_desc *p)
{
    int n;
    int *layers = virtual_stage_layers(p, &n);
    /* A virtual stage is at most "Et*2147483647L|", well under 24 bytes. */
    size_t len = (size_t)n * 24 + 8;
    char *text = layers ? malloc(len) : NULL;
    if (!text || ap_layout_format(layers, n, p->has_shape ? p->shape.mtp_layers : 0, text,
                                  len) < 0)
        b->oom = 1;
    else
        put(b, "  --pipeline-model-parallel-layout %s\n", text);
    free(layers);
    free(text);
}

int ap_emit_flags_state_chunks(const ap_plan_desc *p, const ap_degrees *d)
{
    if (!p->chunk_layers)
        return 1;
    int e = d->account_embedding, l = d->account_loss, v = d->vpp > 1 ? d->vpp : 1;
    if (!d->even && !d->first && !d->last && !e && !l)
        return 0;
    /* The chunks each stage's layers add up to (plan_read checks it) are
     * the flags' when they are Megatron-LM's split of those layers. */
    size_t n = (size_t)p->nstages * (size_t)v;
    int *stages = malloc(sizeof(int) * (size_t)p->nstages), *want = malloc(sizeof(int) * n);
    int same = stages && want;
    for (int s = 0; same && s < p->nstages; s++)
        stages[s] = p->stages[s].nlayers;
    if (same) {
        ap_layout_megatron_split(stages, p->nstages, v, e, l, want);
        same = !memcmp(want, p->chunk_layers, sizeof(int) * n);
    }
    free(stages);
    free(want);
    return same;
}

/* How the layers split over the pipeline. A plan with model chunks that no
 * split flag places states them in the layout alone: Megatron-LM takes at
 * most one of the layout and the virtual-stage flags and derives vpp from
 * the layout's length over pp, and the layout places every layer, the
 * embedding and the loss, leaving nothing for the decoder first/last or
 * account-for flags to say. */
static void megatron_split(sbuf *b, const ap_plan_desc *p, const ap_degrees *d,
                           const ap_model_shape *s)
{
    if (!ap_emit_flags_state_chunks(p, d)) {
        megatron_layout(b, p);
        return;
    }
    if (d->vpp > 1 && d->even)
        put(b, "  --num-layers-per-virtual-pipeline-stage %d\n", s->layers / (d->pp * d->vpp));
    if (d->vpp > 1 && !d->even)
        put(b, "  --num-virtual-stages-per-pipeline-rank %d\n", d->vpp);
    if (d->first)
        put(b, "  --decoder-first-pipeline-num-layers %d\n", d->first);
    if (d->last)
        put(b, "  --decoder-last-pipeline-num-layers %d\n", d->last);
    if (d->account_embedding)
        put(b, "  --account-for-embedding-in-pipeline-split\n");
    if (d->account_loss)
        put(b, "  --account-for-loss-in-pipeline-split\n");
    if (!d->even && !d->first && !d->last && !d->account_embedding && !d->account_loss)
        megatron_layout(b, p);
}

static void megatron_parallel(sbuf *b, const ap_plan_desc *p, const ap_degrees *d,
                              const ap_model_shape *s)
{
    put(b, "  --tensor-model-parallel-size %d\n", d->tp);
    put(b, "  --pipeline-model-parallel-size %d\n", d->pp);
    if (d->sp)
        put(b, "  --sequence-parallel\n");
    put(b, "  --context-parallel-size %d\n", d->cp);
    if (d->cp > 1 && d->run.cp_comm != AP_CP_P2P)
        put(b, "  --cp-comm-type %s\n", ap_cp_comm_name(d->run.cp_comm));
    if (s->experts) {
        put(b, "  --expert-model-parallel-size %d\n", d->ep);
        put(b, "  --expert-tensor-parallel-size %d\n", d->etp);
    }
    megatron_split(b, p, d, s);
    put(b, "  --micro-batch-size %d\n", d->mbs);
    put(b, "  --global-batch-size %.0f\n", d->gbs);
    if (d->recompute == AP_RECOMPUTE_SELECTIVE)
        put(b, "  --recompute-granularity selective\n");
    if (d->recompute == AP_RECOMPUTE_SELECTIVE && d->run.recompute_modules) {
        char mods[160];
        ap_rc_modules_format(d->run.recompute_modules, " ", mods, sizeof mods);
        put(b, "  --recompute-modules %s\n", mods);
    }
    if (d->recompute == AP_RECOMPUTE_FULL)
        put(b, "  --recompute-granularity full\n  --recompute-method %s\n"
               "  --recompute-num-layers %d\n", ap_recompute_method_name(d->recompute_method),
            recompute_layers(d));
    if (d->zero == AP_ZERO_1)
        put(b, "  --use-distributed-optimizer\n");
    else if (d->zero == AP_ZERO_3)
        put(b, "  --use-torch-fsdp2\n");
    /* FSDP2 overlaps its reduce-scatters itself: --overlap-grad-reduce
     * configures Megatron's own DDP buffers, which its
     * TorchFullyShardedDataParallel replaces. */
    if (d->overlap_grad && d->zero != AP_ZERO_3)
        put(b, "  --overlap-grad-reduce\n");
    if (d->overlap_param)
        put(b, "  --overlap-param-gather\n");
    if (d->run.fp8)
        put(b, "  --fp8-format hybrid\n");
    if (d->run.fp8 && d->run.fp8_recipe != AP_FP8_DELAYED)
        put(b, "  --fp8-recipe %s\n", ap_fp8_recipe_name(d->run.fp8_recipe));
    if (d->run.fp8 && (s->bf16_first || s->bf16_last))
        put(b, "  --first-last-layers-bf16\n  --num-layers-at-start-in-bf16 %d\n"
               "  --num-layers-at-end-in-bf16 %d\n", s->bf16_first, s->bf16_last);
    if (d->run.cuda_graph)
        put(b, "  --cuda-graph-impl %s\n", ap_cuda_graph_name(d->run.cuda_graph));
    if (d->run.shared_overlap)
        put(b, "  --moe-shared-expert-overlap\n");
    if (d->run.capacity_factor > 0)
        put(b, "  --moe-expert-capacity-factor %.17g\n", d->run.capacity_factor);
    if (d->run.pad_capacity)
        put(b, "  --moe-pad-expert-input-to-capacity\n");
    if (d->run.fp8_param_gather)
        put(b, "  --fp8-param-gather\n");
    if (d->run.tp_overlap)
        put(b, "  --tp-comm-overlap\n");
    if (d->run.moe_a2a_overlap)
        put(b, "  --overlap-moe-expert-parallel-comm\n");
    if (d->run.delay_wgrad)
        put(b, "  --delay-wgrad-compute\n");
    if (d->run.defer_wgrad)
        put(b, "  --defer-embedding-wgrad-compute\n");
    if (d->run.defer_wgrad && d->run.wgrad_deferral_limit)
        put(b, "  --wgrad-deferral-limit %d\n", d->run.wgrad_deferral_limit);
    if (d->run.ddp_bucket)
        put(b, "  --ddp-bucket-size %d\n", d->run.ddp_bucket);
    if (d->run.no_grad_fusion)
        put(b, "  --no-gradient-accumulation-fusion\n");
    /* native is the implementation's default, and Megatron-Core before 0.13
     * has no --cross-entropy-fusion-impl to name it with. */
    if (d->run.cross_entropy != AP_CE_UNFUSED)
        put(b, "  --cross-entropy-loss-fusion\n");
    if (d->run.cross_entropy == AP_CE_TE)
        put(b, "  --cross-entropy-fusion-impl te\n");
}

/* The model's dtype, and the gradients' as priced: under --bf16
 * Megatron-LM keeps and reduces fp32 main gradients unless told
 * --grad-reduce-in-bf16, under --fp16 gradients are fp16 unless told
 * --accumulate-allreduce-grads-in-fp32 (validate_args). */
static void megatron_precision(sbuf *b, const ap_degrees *d, const ap_model_shape *s)
{
    if (s->dtype == AP_BF16)
        put(b, "  --bf16\n%s", d->run.grad_fp32 ? "" : "  --grad-reduce-in-bf16\n");
    else if (s->dtype == AP_FP16)
        put(b, "  --fp16\n%s",
            d->run.grad_fp32 ? "  --accumulate-allreduce-grads-in-fp32\n" : "");
}

/* The optimizer states as priced: any dtype other than fp32 needs
 * --use-precision-aware-optimizer (Megatron-Core's OptimizerConfig asserts
 * it); each flag is stated where it differs from fp32, Megatron-LM's
 * default. Remainders are fp32 main weights as that optimizer keeps them
 * by default for a bf16 model without FP8 weights (store_param_remainders);
 * fp32 main weights there are whole only under
 * --no-store-param-remainders. */
static void megatron_optimizer(sbuf *b, const ap_degrees *d, const ap_model_shape *s)
{
    if (ap_opt_dtypes_fp32(&d->run.opt))
        return;
    put(b, "  --use-precision-aware-optimizer\n");
    if (d->run.opt.main_params == AP_OPT_FP32 && s->dtype == AP_BF16 && !d->run.fp8_param_gather)
        put(b, "  --no-store-param-remainders\n");
    else if (d->run.opt.main_params != AP_OPT_FP32 && d->run.opt.main_params != AP_OPT_REMAINDER)
        put(b, "  --main-params-dtype %s\n", ap_opt_dtype_name(d->run.opt.main_params));
    if (d->run.opt.exp_avg != AP_OPT_FP32)
        put(b, "  --exp-avg-dtype %s\n", ap_opt_dtype_name(d->run.opt.exp_avg));
    if (d->run.opt.exp_avg_sq != AP_OPT_FP32)
        put(b, "  --exp-avg-sq-dtype %s\n", ap_opt_dtype_name(d->run.opt.exp_avg_sq));
}

/* Whether the export states a rotary embedding: --position-embedding-type
 * rope, and with it the rotary percent, base and scaling. */
static int states_rotary(const ap_model_shape *s)
{
    return !s->learned_positions && s->rotary_percent > 0;
}

/* The rotary base as --rotary-base states it: Megatron-LM's parser takes
 * an integer, so a config's fractional rope_theta (StarCoder2's
 * 999999.4420358813) is stated at its nearest, which the script's header
 * says. */
static long long rotary_base(const ap_model_shape *s)
{
    long long base = (long long)(s->rope_base + 0.5);
    return base < 1 ? 1 : base;
}

static void megatron_model(sbuf *b, const ap_model_shape *s, const ap_run_settings *run)
{
    ap_dispatcher disp = run->dispatcher;
    put(b, "  --num-layers %d\n  --hidden-size %lld\n  --num-attention-heads %lld\n",
        s->layers, s->hidden, s->heads);
    if (s->kv_heads != s->heads)
        put(b, "  --group-query-attention\n  --num-query-groups %lld\n", s->kv_heads);
    if (s->mla) {
        put(b, "  --multi-latent-attention\n");
        if (s->q_lora)
            put(b, "  --q-lora-rank %lld\n", s->q_lora);
        put(b, "  --kv-lora-rank %lld\n  --qk-head-dim %lld\n  --qk-pos-emb-head-dim %lld\n"
               "  --v-head-dim %lld\n", s->kv_lora, s->qk_nope_dim, s->qk_rope_dim,
            s->v_head_dim);
    } else if (s->head_dim && s->head_dim * s->heads != s->hidden) {
        put(b, "  --kv-channels %lld\n", s->head_dim);
    }
    /* A norm on the queries and keys (Qwen3, OLMo 2), or under MLA on its
     * latent ones. */
    if (s->qk_norm)
        put(b, "  --qk-layernorm\n");
    /* Llama 4's q and k normed without a weight, which Megatron-LM applies
     * on the rotary layers, as the model has them. */
    if (s->qk_l2)
        put(b, "  --qk-l2-norm\n");
    put(b, "  --ffn-hidden-size %lld\n", s->ffn);
    /* The experts as priced: the plan's dispatcher, stated even where it
     * is Megatron-Core's default (allgather), and TE's GroupedLinear unless
     * the plan runs the default SequentialMLP. */
    if (s->experts)
        put(b, "  --num-experts %lld\n  --moe-router-topk %d\n  --moe-ffn-hidden-size %lld\n",
            s->experts, s->top_k, s->moe_ffn ? s->moe_ffn : s->ffn);
    if (s->experts && s->shared_ffn)
        put(b, "  --moe-shared-expert-intermediate-size %lld\n", s->shared_ffn);
    /* Written bare, as the layout is (megatron_layout). */
    if (s->experts && s->moe_freq[0])
        put(b, "  --moe-layer-freq %s\n", s->moe_freq);
    if (s->experts && (disp == AP_DISPATCH_ALLTOALL || disp == AP_DISPATCH_ALLGATHER))
        put(b, "  --moe-token-dispatcher-type %s\n", ap_dispatcher_name(disp));
    else if (s->experts)
        put(b, "  --moe-token-dispatcher-type flex\n  --moe-flex-dispatcher-backend %s\n",
            ap_dispatcher_name(disp));
    if (s->experts && !run->sequential_experts)
        put(b, "  --moe-grouped-gemm\n");
    if (s->experts && s->route_groups)
        put(b, "  --moe-router-num-groups %d\n  --moe-router-group-topk %d\n",
            s->route_groups, s->route_group_topk);
    /* How the router scores and weighs the experts, where it is not
     * Megatron-Core's default softmax over the top-k logits
     * (topk_routing_with_score_function): sigmoid scores (renormalised
     * above top-k 1, as they are at top-k 1), a softmax over all experts
     * whose top k are not renormalised, an expert bias on the scores that
     * pick, a factor on the weights. check_architecture refuses what no
     * flag states. */
    char num[32];
    if (s->experts && s->route_sigmoid)
        put(b, "  --moe-router-score-function sigmoid\n");
    else if (s->experts && s->route_unnormalized)
        put(b, "  --moe-router-pre-softmax\n");
    if (s->experts && s->route_bias)
        put(b, "  --moe-router-enable-expert-bias\n");
    if (s->experts && s->route_on_input)
        put(b, "  --moe-apply-probs-on-input\n");
    if (s->experts && s->route_scale > 0 && s->route_scale != 1)
        put(b, "  --moe-router-topk-scaling-factor %s\n",
            ap_number_exact(s->route_scale, num, sizeof num));
    if (s->mtp_layers)
        put(b, "  --mtp-num-layers %d\n", s->mtp_layers);
    put(b, "  --seq-length %lld\n  --max-position-embeddings %lld\n", s->seq, s->seq);
    put(b, "  --position-embedding-type %s\n", s->learned_positions ? "learned_absolute"
        : s->rotary_percent > 0 ? "rope" : "none");
    /* Under MLA the rotated part of each head is --qk-pos-emb-head-dim, and
     * Megatron-Core applies --rotary-percent within it. */
    int rotary = states_rotary(s);
    if (rotary && s->rotary_percent < 1 && !s->mla)
        put(b, "  --rotary-percent %.17g\n", s->rotary_percent);
    /* No cost, but Megatron-LM's defaults (base 10,000, no scaling) train
     * another model than the config's. */
    if (rotary && s->rope_base > 0)
        put(b, "  --rotary-base %lld\n", rotary_base(s));
    if (rotary && s->rope_scaling == AP_ROPE_SCALING_LLAMA3)
        put(b, "  --use-rope-scaling\n  --rope-scaling-factor %s\n",
            ap_number_exact(s->rope_factor, num, sizeof num));
    /* The layers without it (Llama 4's NoPE), written bare as
     * --moe-layer-freq is. */
    if (s->nope_layers && s->nope_freq[0])
        put(b, "  --no-rope-freq %s\n", s->nope_freq);
    if (s->rmsnorm)
        put(b, "  --normalization RMSNorm\n");
    else if (s->layernorm_1p)
        put(b, "  --normalization LayerNorm\n  --apply-layernorm-1p\n");
    if (s->norm_eps > 0)
        put(b, "  --norm-epsilon %s\n", ap_number_exact(s->norm_eps, num, sizeof num));
    /* Megatron-LM's default attention (auto) runs a fused kernel. */
    if (!s->flash)
        put(b, "  --attention-backend unfused\n");
    /* Transformer Engine's (L, 0): each query meets itself and the L keys
     * before it; the skip frequency, written bare as --moe-layer-freq is,
     * where not every layer has the window. */
    if (s->window > 0)
        put(b, "  --window-size %lld,0\n", s->window - 1);
    if (s->window > 0 && s->window_freq[0])
        put(b, "  --window-attn-skip-freq %s\n", s->window_freq);
    if (s->sinks)
        put(b, "  --softmax-type learnable\n");
    if (s->swiglu)
        put(b, "  --swiglu\n");
    else if (s->quick_geglu)
        put(b, "  --quick-geglu\n");
    else if (s->squared_relu)
        put(b, "  --squared-relu\n");
    /* GPT-OSS's experts: Megatron-Core's GLU adds --glu-linear-offset to
     * the linear half and clamps both halves at --activation-func-clamp-value,
     * each only where given (0.0 and None by default in arguments.py at
     * 000c4ac2; TEGroupedMLP.bias_act_func), so --quick-geglu alone would
     * train gate * sigmoid(1.702 gate) * up, unclamped. */
    if (s->glu_offset != 0)
        put(b, "  --glu-linear-offset %s\n", ap_number_exact(s->glu_offset, num, sizeof num));
    if (s->glu_clamp > 0)
        put(b, "  --activation-func-clamp-value %s\n",
            ap_number_exact(s->glu_clamp, num, sizeof num));
    if (!s->tied_embeddings)
        put(b, "  --untie-embeddings-and-output-weights\n");
    /* Megatron-LM's biases: on every linear layer, or with
     * --disable-bias-linear on none but, with --add-qkv-bias, Q, K and V's
     * (Qwen2); check_architecture refuses the mixes no flag states. */
    if (!s->other_bias)
        put(b, "  --disable-bias-linear\n");
    if (!s->other_bias && s->qkv_bias)
        put(b, "  --add-qkv-bias\n");
    /* Megatron-LM's default is 0.1 for both: say what the plan priced. */
    put(b, "  --hidden-dropout %g\n  --attention-dropout %g\n", s->hidden_dropout,
        s->attention_dropout);
}

/* Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor or context
 * parallelism on GPUs before Blackwell, but only warns under FSDP2, which
 * asserts that it is not 1 whatever the layout (validate_args at
 * 000c4ac2): a ZeRO-3 plan unsets it, and says that FSDP2 overlaps a
 * reduction the plan may have priced after the backward. */
static void megatron_connections(sbuf *b, const ap_degrees *d)
{
    if (d->zero == AP_ZERO_3 && d->dp > 1 && !d->overlap_grad)
        put(b, "# The plan was priced with the gradient reduction after the backward; "
               "FSDP2 always overlaps it, so expect a faster step.\n");
    if (d->zero == AP_ZERO_3)
        put(b, "# --use-torch-fsdp2 asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1.\n"
               "unset CUDA_DEVICE_MAX_CONNECTIONS\n");
    else if (d->tp > 1 || d->cp > 1)
        put(b, "export CUDA_DEVICE_MAX_CONNECTIONS=1\n");
}

char *ap_emit_megatron(const ap_plan_desc *p, const ap_degrees *d, const ap_model_shape *s)
{
    sbuf b = {0};
    put(&b, "#!/bin/sh\n");
    header(&b, "Megatron-LM", p, d);
    put(&b, "# Add your data, tokenizer (vocabulary %lld), optimizer and checkpoint "
            "arguments.\n", s->vocab);
    /* What the model does not say of its arithmetic, or says in a way no
     * flag below states: Megatron-LM's defaults for it are not the
     * config's. */
    int rotary = states_rotary(s);
    char unknown[256] = "";
    if (!(s->norm_eps > 0))
        strcat(unknown, ", its norm epsilon (--norm-epsilon)");
    if (rotary && !(s->rope_base > 0))
        strcat(unknown, ", its rotary base (--rotary-base)");
    if (rotary && s->rope_scaling == AP_ROPE_SCALING_OTHER)
        strcat(unknown, ", its rope scaling (YaRN or another than Llama 3.1's; MLA's "
                        "--rotary-scaling-factor and --mscale for YaRN)");
    if (unknown[0])
        put(&b, "# Not stated, as the model does not say or no flag here states it%s: "
                "add them as its config sets them, since Megatron-LM's defaults train "
                "another model.\n", unknown);
    if (rotary && s->rope_base > 0 && (double)rotary_base(s) != s->rope_base)
        put(&b, "# --rotary-base %lld is the model's rotary base %.17g to the nearest "
                "integer, which Megatron-LM's parser takes.\n", rotary_base(s), s->rope_base);
    megatron_connections(&b, d);
    put(&b, "MEGATRON_ARGS=\"\n");
    megatron_parallel(&b, p, d, s);
    megatron_model(&b, s, &d->run);
    megatron_precision(&b, d, s);
    megatron_optimizer(&b, d, s);
    put(&b, "\"\n");
    /* The list patterns written bare ([0]*3+[1]*58, the layout) are globs
     * to the shell that splits $MEGATRON_ARGS: a file in the working
     * directory named as one matches would replace it. */
    put(&b, "# Split $MEGATRON_ARGS into words without reading its list patterns as "
            "file names.\nset -f\n");
    torchrun(&b, p, "pretrain_gpt.py", "MEGATRON_ARGS");
    return finish(&b);
}

static const char *titan_schedule(ap_schedule s)
{
    return s == AP_SCHED_GPIPE ? "GPipe" : s == AP_SCHED_INTERLEAVED ? "Interleaved1F1B" : "1F1B";
}

/* torchtitan shards data-parallel replicas with FSDP (ZeRO-3) or
 * replicates them (DDP); ZeRO-1 and ZeRO-2 go to FSDP that keeps the
 * parameters gathered between forward and backward, the nearest it has. */
int ap_emit_titan_shard(const ap_degrees *d)
{
    return d->zero == AP_ZERO_NONE ? 1 : d->dp;
}

/* The ranks torchtitan's FSDP shards over: the shard degree times every
 * context-parallel rank, which ParallelDims folds into FSDP's mesh
 * (dp_shard_cp) even at shard degree 1. */
static int titan_fsdp_ranks(const ap_degrees *d)
{
    return ap_emit_titan_shard(d) * d->cp;
}

static void titan_data(sbuf *b, const ap_degrees *d)
{
    int shard = ap_emit_titan_shard(d);
    put(b, "  --parallelism.data_parallel_replicate_degree %d\n", d->dp / shard);
    put(b, "  --parallelism.data_parallel_shard_degree %d\n", shard);
    if (titan_fsdp_ranks(d) > 1 && d->zero != AP_ZERO_3)
        put(b, "  --parallelism.fsdp_reshard_after_forward never\n");
}

/* torchao's FP8 all-gather is FSDP's: torchtitan's Float8LinearConverter
 * turns it on only where data_parallel_shard_degree is above 1
 * (dp_shard_enabled), which titan_data gives ZeRO-1 and above at dp > 1;
 * context-parallel ranks alone do not. */
static int titan_fp8_gather(const ap_degrees *d)
{
    return d->run.fp8_param_gather && d->zero != AP_ZERO_NONE && d->dp > 1;
}

int ap_emit_titan_split(const ap_plan_desc *p, int *n, int *first_less, int *last_less)
{
    int S = p->nstages, a = p->stages[0].nlayers, z = p->stages[S - 1].nlayers;
    *n = S > 2 ? p->stages[1].nlayers : a > z ? a : z;
    for (int i = 1; i < S - 1; i++)
        if (p->stages[i].nlayers != *n)
            return AP_EINPUT;
    if (a > *n || z > *n)
        return AP_EINPUT;
    *first_less = *n - a;
    *last_less = *n - z;
    return AP_OK;
}

static void titan_pipeline(sbuf *b, const ap_plan_desc *p, const ap_degrees *d,
                           const ap_model_shape *s)
{
    put(b, "  --parallelism.pipeline_parallel_degree %d\n", d->pp);
    if (d->pp == 1)
        return;
    put(b, "  --parallelism.pipeline_parallel_schedule %s\n", titan_schedule(d->schedule));
    /* ap_plan_classify refused a split the flags cannot state, so the
     * split below always fills these; zeros keep the compiler sure of it. */
    int n = 0, first_less = 0, last_less = 0;
    if (d->even) {
        n = s->layers / (d->pp * d->vpp);
        first_less = last_less = 0;
    } else {
        ap_emit_titan_split(p, &n, &first_less, &last_less);
    }
    put(b, "  --parallelism.pipeline_parallel_layers_per_stage %d\n", n);
    put(b, "  --parallelism.pipeline_parallel_first_stage_less_layers %d\n", first_less);
    put(b, "  --parallelism.pipeline_parallel_last_stage_less_layers %d\n", last_less);
    put(b, "  --parallelism.pipeline_parallel_microbatch_size %d\n", d->mbs);
}

char *ap_emit_torchtitan(const ap_plan_desc *p, const ap_degrees *d, const ap_model_shape *s)
{
    sbuf b = {0};
    put(&b, "#!/bin/sh\n");
    header(&b, "torchtitan", p, d);
    /* torchtitan v0.2.2 is the last release that reads a .toml: from PR
     * #2386 (February 2026) on, a run is a Python config named by --module
     * and --config, and later changes dropped the float8 all-gather (#3032)
     * and expert tensor parallelism (#3167) that these flags state. */
    put(&b, "# For torchtitan v0.2.2, the last release that takes a .toml "
            "(--job.config_file): later ones name a Python config with --module "
            "and --config.\n");
    put(&b, "# CONFIG_FILE is the model's torchtitan .toml (%d layers, hidden %lld); these "
            "flags override its parallelism and batch.\n", s->layers, s->hidden);
    put(&b, "# They turn on what the plan was priced with and nothing more: leave off "
            "what else the .toml turns on ([model] converters, [compile], "
            "enable_async_tensor_parallel), which runs another step.\n");
    /* torchtitan takes a MoE model's structure from its flavor, which no
     * flag states: say what the plan was priced with, to check it by. */
    if (s->experts) {
        put(&b, "# Its MoE flavor must match what the plan was priced with: %lld experts of "
                "FFN %lld, top %d, ", s->experts, s->moe_ffn, s->top_k);
        /* Group-limited routing, MoEArgs' num_expert_groups groups of which
         * a token's experts come from num_limited_groups (TokenChoiceTopK-
         * Router); left out, MoEArgs' default None, where there is none. */
        if (s->route_groups)
            put(&b, "from %d of %d expert groups (num_limited_groups %d, "
                    "num_expert_groups %d), ", s->route_group_topk, s->route_groups,
                s->route_group_topk, s->route_groups);
        if (s->moe_freq[0])
            put(&b, "on the layers --moe-layer-freq \"%s\" marks, ", s->moe_freq);
        else
            put(&b, "on every layer, ");
        if (s->shared_ffn)
            put(&b, "shared experts of FFN %lld in all, ", s->shared_ffn);
        else
            put(&b, "no shared experts, ");
        /* MoEArgs' router (TokenChoiceTopKRouter): score_func over all
         * experts, route_norm, route_scale, score_before_experts (the
         * weight on the experts' input), and an expert bias where
         * load_balance_coeff is set (its default, 1e-3, has one). A
         * softmax over the top-k logits is a softmax over all experts
         * renormalised. */
        char num[32];
        put(&b, "router score_func \"%s\", route_norm %s, route_scale %s, "
                "score_before_experts %s, %s.\n",
            s->route_sigmoid ? "sigmoid" : "softmax",
            s->route_unnormalized ? "False" : "True",
            ap_number_exact(s->route_scale > 0 ? s->route_scale : 1, num, sizeof num),
            s->route_on_input ? "True" : "False",
            s->route_bias ? "with an expert bias (load_balance_coeff set)"
                          : "no expert bias (load_balance_coeff None)");
    }
    /* Nor does a flag state a sliding window. */
    if (s->window > 0 && s->window_freq[0])
        put(&b, "# Its attention must have the sliding window the plan was priced with: "
                "%lld keys per query, on the layers --window-attn-skip-freq \"%s\" "
                "marks.\n", s->window, s->window_freq);
    else if (s->window > 0)
        put(&b, "# Its attention must have the sliding window the plan was priced with: "
                "%lld keys per query, on every layer.\n", s->window);
    /* Nor the norms and rotary embeddings outside Llama's pattern. */
    if (s->nope_layers)
        put(&b, "# Its attention must take no rotary embedding on the layers "
                "--no-rope-freq \"%s\" marks (NoPE)%s, as the plan was priced.\n",
            s->nope_freq, s->qk_l2 ? ", and norm queries and keys without a weight on "
                                     "the others (Llama 4's L2 norm)" : "");
    else if (s->qk_l2)
        put(&b, "# Its attention must norm queries and keys without a weight (Llama 4's "
                "L2 norm), as the plan was priced.\n");
    if (s->qk_norm_wide)
        put(&b, "# Its query and key norms must span all heads of their projections "
                "(OLMo 2's, MiniMax-M2's), as the plan was priced.\n");
    if (s->parallel_residual)
        put(&b, "# Its layers must run attention and the MLP side by side on the layer's "
                "input (a parallel residual: GPT-NeoX's, Phi's, Cohere's), as the plan was "
                "priced.\n");
    if (s->post_norm)
        put(&b, "# Its layers must norm attention's and the MLP's outputs before the "
                "residual adds (post-norms), as the plan was priced.\n");
    if (s->norm_free)
        put(&b, "# Its norms have neither weight nor bias (OLMo 1's), as the plan was "
                "priced.\n");
    if (s->scaled_embedding)
        put(&b, "# Its embeddings must be scaled before the first layer (Gemma's "
                "sqrt(hidden_size), Granite's embedding_multiplier), as the plan was "
                "priced.\n");
    if (s->scaled_logits)
        put(&b, "# Its logits must be scaled or capped before the loss (Granite's "
                "logits_scaling, Gemma 2's softcap), as the plan was priced.\n");
    if (titan_fsdp_ranks(d) > 1 && d->pp > 1 && d->zero == AP_ZERO_1)
        put(&b, "# ZeRO-1 under a pipeline is torchtitan's FSDP: it keeps each stage's "
                "weights gathered and its gradients unsharded until the last "
                "micro-batch, then reduce-scatters them, as priced.\n");
    else if (titan_fsdp_ranks(d) > 1 && (d->zero == AP_ZERO_1 || d->zero == AP_ZERO_2))
        put(&b, "# ZeRO-%d has no torchtitan equivalent: FSDP without resharding after "
                "forward is the nearest, and also shards parameters.\n", (int)d->zero);
    if (d->dp > 1 && !d->overlap_grad)
        put(&b, "# The plan was priced with the gradient reduction after the backward; "
                "torchtitan's DDP and FSDP always overlap it, so expect a faster step.\n");
    if (d->run.tp_overlap)
        put(&b, "# TP communication overlap was priced as Transformer Engine's userbuffers "
                "run it; torchtitan's async tensor parallelism (micro-pipelined by "
                "torch.compile) is its nearest equivalent.\n");
    if (d->run.fp8)
        put(&b, "# FP8 was priced as Transformer Engine's tensorwise (current) scaling runs "
                "it, weights cast once per step; torchao's Float8Linear, tensorwise "
                "without a recipe_name, casts them every micro-batch, and needs "
                "--compile.enable to fuse its casts.\n");
    if (s->hidden_dropout > 0 || s->attention_dropout > 0)
        put(&b, "# The plan was priced with dropout; torchtitan's models have none, so "
                "expect a slightly faster step.\n");
    if (d->run.fp8_param_gather)
        put(&b, "# FP8 weights were priced as Megatron-LM's --fp8-param-gather holds "
                "them, with no bf16 copy; torchao keeps the high-precision weights and "
                "%s, so expect more memory than predicted.\n", titan_fp8_gather(d)
                ? "casts them to FP8 before FSDP's all-gather (priced the same)"
                : "has no FP8 gather without FSDP sharding");
    put(&b, "TORCHTITAN_ARGS=\"\n");
    titan_data(&b, d);
    put(&b, "  --parallelism.tensor_parallel_degree %d\n", d->tp);
    titan_pipeline(&b, p, d, s);
    put(&b, "  --parallelism.context_parallel_degree %d\n", d->cp);
    /* torchtitan's default, allgather, gathers every K/V shard after the
     * first chunk; alltoall passes the shards round the ring, one hop
     * beside each chunk's attention, which is the p2p ring the plan was
     * priced with. */
    if (d->cp > 1)
        put(&b, "  --parallelism.context_parallel_rotate_method alltoall\n");
    put(&b, "  --parallelism.expert_parallel_degree %d\n", d->ep);
    /* The experts split by the tensor-parallel ranks too, as Megatron-Core's
     * --expert-tensor-parallel-size defaults to tp (torchtitan's default is
     * 1, the experts whole on each rank). */
    if (s->experts && d->etp > 1)
        put(&b, "  --parallelism.expert_tensor_parallel_degree %d\n", d->etp);
    /* With a pipeline a step is one local batch cut into micro-batches;
     * without one, torchtitan accumulates gradients over local batches
     * until the global batch is reached. */
    put(&b, "  --training.local_batch_size %.0f\n",
        d->pp > 1 ? d->gbs / d->dp : (double)d->mbs);
    put(&b, "  --training.global_batch_size %.0f\n", d->gbs);
    put(&b, "  --training.seq_len %lld\n", s->seq);
    put(&b, "  --activation_checkpoint.mode %s\n", ap_emit_recompute_name(d->recompute));
    if (d->recompute == AP_RECOMPUTE_SELECTIVE)
        put(&b, "  --activation_checkpoint.selective_ac_option op\n");
    /* The converter and its options as torchtitan v0.2.2 names them
     * (register_model_converter(Float8LinearConverter,
     * "quantize.linear.float8"); JobConfig.quantize.linear.float8); the
     * v0.1 names, "float8" and [float8], are gone there. Its filter_fqns
     * defaults to none, so the LM head ("output") is named to stay in
     * bf16, as under Megatron. */
    if (d->run.fp8)
        put(&b, "  --model.converters quantize.linear.float8\n"
                "  --quantize.linear.float8.filter_fqns output\n");
    if (titan_fp8_gather(d))
        put(&b, "  --quantize.linear.float8.enable_fsdp_float8_all_gather\n"
                "  --quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp\n");
    /* Async tensor parallelism, torchtitan's overlap of the sequence-parallel
     * collectives with their matmuls, is a compiler pass. */
    if (d->run.tp_overlap)
        put(&b, "  --parallelism.enable_async_tensor_parallel\n");
    /* torch.compile is the [compile] section's enable since torchtitan
     * moved it out of [training] (August 2025). */
    if (d->run.fp8 || d->run.tp_overlap)
        put(&b, "  --compile.enable\n");
    put(&b, "\"\n");
    torchrun(&b, p, "-m torchtitan.train --job.config_file \"${CONFIG_FILE:?the model's "
                    "torchtitan .toml}\"", "TORCHTITAN_ARGS");
    return finish(&b);
}

char *ap_emit_deepspeed(const ap_plan_desc *p, const ap_degrees *d, const ap_model_shape *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "train_batch_size", d->gbs);
    cJSON_AddNumberToObject(o, "train_micro_batch_size_per_gpu", d->mbs);
    cJSON_AddNumberToObject(o, "gradient_accumulation_steps", d->nmicro);
    cJSON *z = cJSON_AddObjectToObject(o, "zero_optimization");
    cJSON_AddNumberToObject(z, "stage", d->zero);
    /* DeepSpeed overlaps the reduction only under ZeRO-2 and 3; ZeRO-0 and 1
     * ignore the key and reduce after the backward. */
    cJSON_AddBoolToObject(z, "overlap_comm", d->overlap_grad);
    if (s->dtype == AP_BF16 || s->dtype == AP_FP16)
        cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, s->dtype == AP_BF16 ? "bf16" : "fp16"),
                              "enabled", 1);
    /* Only a PipelineModule reads the pipeline section, and DeepSpeed's
     * pipeline engine refuses ZeRO-2 and 3: without a pipeline the
     * training script checkpoints its own layers. "uniform" would split
     * every layer spec evenly, the embedding's and the head's included;
     * "type:transformer" balances the layers whose class names match
     * (Megatron-DeepSpeed's ParallelTransformerLayerPipe), the priced
     * split. */
    if (d->pp > 1) {
        cJSON *pipe = cJSON_AddObjectToObject(o, "pipeline");
        cJSON_AddNumberToObject(pipe, "stages", d->pp);
        cJSON_AddStringToObject(pipe, "partition", "type:transformer");
        /* Groups of this many layers each keep their input (uniform N);
         * classify refuses block unless it recomputes every layer alone. */
        cJSON_AddNumberToObject(pipe, "activation_checkpoint_interval",
                                d->recompute != AP_RECOMPUTE_FULL ? 0
                                : d->recompute_method == AP_RECOMPUTE_UNIFORM
                                    ? recompute_layers(d) : 1);
    }
    (void)p;
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}
