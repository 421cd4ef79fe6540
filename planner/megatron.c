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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/layout.h"
#include "planner/megatron_flags.h"
#include "planner/parts.h"
#include "planner/planner.h"

void ap_megatron_default(ap_megatron *m)
{
    memset(m, 0, sizeof *m);
    m->tp = m->pp = m->cp = m->ep = m->vpp = m->mbs = 1;
    m->gbs = 512;
    m->zero = AP_ZERO_1;
    m->overlap_grad = 1;
    m->overlap_param = -1;
    m->recompute_layers = 1;
}

int ap_megatron_overlap_param(const ap_megatron *m)
{
    if (m->overlap_param >= 0)
        return m->overlap_param;
    return m->overlap_grad && m->zero == AP_ZERO_1;
}

/* The 0-or-1 settings of the spec. */
static int *flag_slot(ap_megatron *m, const char *k)
{
    return !strcmp(k, "overlap_grad") ? &m->overlap_grad
         : !strcmp(k, "overlap_param") ? &m->overlap_param
         : !strcmp(k, "fp8") ? &m->run.fp8
         : !strcmp(k, "account_embedding") ? &m->account_embedding
         : !strcmp(k, "account_loss") ? &m->account_loss
         : !strcmp(k, "tp_overlap") ? &m->run.tp_overlap
         : !strcmp(k, "fp8_param_gather") ? &m->run.fp8_param_gather
         : !strcmp(k, "grad_fp32") ? &m->run.grad_fp32
         : !strcmp(k, "moe_a2a_overlap") ? &m->run.moe_a2a_overlap
         : !strcmp(k, "delay_wgrad") ? &m->run.delay_wgrad
         : !strcmp(k, "defer_wgrad") ? &m->run.defer_wgrad
         : !strcmp(k, "no_grad_fusion") ? &m->run.no_grad_fusion
         : !strcmp(k, "tp_sync") ? &m->run.tp_sync
         : !strcmp(k, "shared_overlap") ? &m->run.shared_overlap
         : !strcmp(k, "sequential_experts") ? &m->run.sequential_experts
         : !strcmp(k, "pad_capacity") ? &m->run.pad_capacity : NULL;
}

/* The spec's recompute_method and recompute_layers: 1 when k was one, 0
 * when not, -1 with err set for a bad value. N = 0 is Megatron-LM's block
 * recomputing nothing; under uniform Megatron-LM would never leave its
 * first group, so check_recompute refuses it there. */
static int recompute_key(ap_megatron *m, const char *k, const char *v,
                         const char *who, char *err)
{
    if (!strcmp(k, "recompute_method")) {
        if (!ap_recompute_method_parse(v, &m->recompute_method))
            return 1;
        snprintf(err, AP_ERR_LEN, "%s: bad value \"%.64s\" (uniform or block)", who, v);
        return -1;
    }
    if (strcmp(k, "recompute_layers"))
        return 0;
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > (1L << 30)) {
        snprintf(err, AP_ERR_LEN, "%s: bad value \"%.64s\" (an integer from 0 to 2^30)",
                 who, v);
        return -1;
    }
    m->recompute_layers = (int)n;
    return 1;
}

/* The spec's main_params, exp_avg and exp_avg_sq: 1 when k was one, 0
 * when not, -1 with err set for a bad value. Main weights are fp32, fp16
 * (FusedAdam's master_weight_dtype), none (apex's DistributedFusedAdam
 * stepping the model's own weights) or remainder (fp32 ones kept as the 16
 * bits the bf16 weights lack, FusedAdam's store_param_remainders); the
 * moments are fp32, fp16, bf16 or fp8. */
static int opt_key(ap_megatron *m, const char *k, const char *v, const char *who,
                   char *err)
{
    ap_opt_dtype *slot = !strcmp(k, "main_params") ? &m->run.opt.main_params
                       : !strcmp(k, "exp_avg") ? &m->run.opt.exp_avg
                       : !strcmp(k, "exp_avg_sq") ? &m->run.opt.exp_avg_sq : NULL;
    if (!slot)
        return 0;
    ap_opt_dtype t;
    int main = slot == &m->run.opt.main_params;
    if (ap_opt_dtype_parse(v, &t) ||
        (main ? t == AP_OPT_FP8 || t == AP_OPT_BF16
              : t == AP_OPT_NONE || t == AP_OPT_REMAINDER)) {
        snprintf(err, AP_ERR_LEN, "%s: bad value \"%.64s\" (%s)", who, v,
                 main ? "fp32, fp16, none or remainder" : "fp32, fp16, bf16 or fp8");
        return -1;
    }
    *slot = t;
    return 1;
}

/* The sizes that may be 0: sp and dp (0: derived), and the deferral
 * limit (0: every micro-batch, Megatron-Core's default). */
static int zero_ok(const char *k)
{
    return !strcmp(k, "sp") || !strcmp(k, "dp") || !strcmp(k, "wgrad_deferral_limit") ||
           !strcmp(k, "bf16_first") || !strcmp(k, "bf16_last");
}

/* v with one pair of quotes round it dropped (a command line pasted whole
 * keeps them), into out; -1 when that leaves it empty or too long. */
static int unquote_into(const char *v, char *out, size_t cap)
{
    size_t n = strlen(v);
    if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
        v++;
        n -= 2;
    }
    if (n == 0 || n >= cap)
        return -1;
    memcpy(out, v, n);
    out[n] = 0;
    return 0;
}

/* The layout string as written, one pair of quotes round it dropped (a
 * command line pasted whole keeps them); its syntax is checked against
 * pp and the model in check(). */
static int layout_key(ap_megatron *m, const char *v, const char *who, char *err)
{
    if (!unquote_into(v, m->layout, sizeof m->layout))
        return AP_OK;
    snprintf(err, AP_ERR_LEN, "%s: %s", who, strlen(v) > 2 ? "longer than the 1023 "
             "characters autopar reads" : "empty; give the virtual stages, e.g. "
             "\"Et*4|t*4|t*4|t*4L\"");
    return AP_EINPUT;
}

/* Sets one size or setting; `who` names it in messages: "--megatron: tp"
 * for the spec, "--megatron-args: --tensor-model-parallel-size" for flags.
 * Sizes stop at 2^30 so that the products of check() fit a long. */
static int set_key(ap_megatron *m, const char *k, const char *v,
                   const char *who, char *err)
{
    char *end;
    int known = recompute_key(m, k, v, who, err);
    if (!known)
        known = opt_key(m, k, v, who, err);
    if (known)
        return known < 0 ? AP_EINPUT : AP_OK;
    if (!strcmp(k, "cross_entropy")) {
        if (ap_ce_impl_parse(v, &m->run.cross_entropy))
            goto bad;
        return AP_OK;
    }
    if (!strcmp(k, "cp_comm")) {
        if (ap_cp_comm_parse(v, &m->run.cp_comm))
            goto bad;
        return AP_OK;
    }
    if (!strcmp(k, "layout"))
        return layout_key(m, v, who, err);
    if (!strcmp(k, "capacity_factor")) {
        double f = strtod(v, &end);
        if (!*v || *end || !(f > 0 && f <= 1e6))
            goto bad;
        m->run.capacity_factor = f;
        return AP_OK;
    }
    if (!strcmp(k, "dispatcher")) {
        if (ap_dispatcher_parse(v, &m->run.dispatcher))
            goto bad;
        return AP_OK;
    }
    if (!strcmp(k, "cuda_graph")) {
        if (ap_cuda_graph_parse(v, &m->run.cuda_graph))
            goto bad;
        return AP_OK;
    }
    if (!strcmp(k, "fp8_recipe")) {
        if (ap_fp8_recipe_parse(v, &m->run.fp8_recipe))
            goto bad;
        return AP_OK;
    }
    if (!strcmp(k, "recompute_modules")) {
        unsigned mods;
        char why[AP_ERR_LEN];
        if (ap_rc_modules_parse(v, "+", &mods, why)) {
            snprintf(err, AP_ERR_LEN, "%s: %.200s (modules joined by '+', as "
                     "core_attn+mlp)", who, why);
            return AP_EINPUT;
        }
        m->run.recompute_modules = ap_rc_modules_setting(mods);
        return AP_OK;
    }
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
    int *slot = !strcmp(k, "tp") ? &m->tp : !strcmp(k, "pp") ? &m->pp
              : !strcmp(k, "dp") ? &m->dp : !strcmp(k, "cp") ? &m->cp
              : !strcmp(k, "ep") ? &m->ep : !strcmp(k, "vpp") ? &m->vpp
              : !strcmp(k, "mbs") ? &m->mbs : !strcmp(k, "sp") ? &m->sp
              : !strcmp(k, "first") ? &m->first : !strcmp(k, "last") ? &m->last
              : !strcmp(k, "etp") ? &m->etp
              : !strcmp(k, "bf16_first") ? &m->bf16_first
              : !strcmp(k, "bf16_last") ? &m->bf16_last
              : !strcmp(k, "wgrad_deferral_limit") ? &m->run.wgrad_deferral_limit
              : !strcmp(k, "ddp_bucket") ? &m->run.ddp_bucket : NULL;
    int *flag = flag_slot(m, k);
    if (!slot && !flag && strcmp(k, "gbs") && strcmp(k, "zero")) {
        snprintf(err, AP_ERR_LEN, "--megatron: unknown key \"%.64s\" (the layout: tp, pp, "
                 "dp, cp, ep, etp, vpp, mbs, gbs, sp, zero, recompute, first, last, layout; "
                 "the launcher's settings: `autopar estimate --help` lists every key)", k);
        return AP_EINPUT;
    }
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > (1L << 30))
        goto bad;
    if (!strcmp(k, "gbs")) {
        if (n < 1)
            goto bad;
        m->gbs = (double)n;
    } else if (!strcmp(k, "zero")) {
        if (n > 3)
            goto bad;
        m->zero = (ap_zero)n;
    } else if (flag) {
        if (n > 1)
            goto bad;
        *flag = (int)n;
    } else {
        if (n < (zero_ok(k) ? 0 : 1) || (!strcmp(k, "sp") && n > 1))
            goto bad;
        *slot = (int)n;
    }
    return AP_OK;
bad:
    snprintf(err, AP_ERR_LEN, "%s: bad value \"%.64s\"%s", who, v,
             !strcmp(k, "recompute") ? " (none, selective or full)"
             : !strcmp(k, "cross_entropy") ? " (unfused, native or te)"
             : !strcmp(k, "cp_comm") ? " (p2p, allgather or a2a)"
             : !strcmp(k, "dispatcher") ? " (alltoall, deepep, hybridep or allgather)"
             : !strcmp(k, "cuda_graph") ? " (none, local or transformer_engine)"
             : !strcmp(k, "fp8_recipe") ? " (delayed, tensorwise, blockwise or mxfp8)"
             : !strcmp(k, "capacity_factor") ? " (a number above 0)"
             : !strcmp(k, "zero") ? " (0 to 3)"
             : flag_slot(m, k) || !strcmp(k, "sp") ? " (0 or 1)"
             : zero_ok(k) ? " (an integer from 0 to 2^30)"
                          : " (an integer from 1 to 2^30)");
    return AP_EINPUT;
}

int ap_megatron_parse(const char *spec, ap_megatron *m, char *err)
{
    char buf[2048], who[80];
    if (strlen(spec) >= sizeof buf) {
        snprintf(err, AP_ERR_LEN, "--megatron: specification too long");
        return AP_EINPUT;
    }
    strcpy(buf, spec);
    /* An empty item is most likely a key lost in editing, which would
     * price its default unseen. */
    size_t n = strlen(buf);
    if (!n || buf[0] == ',' || buf[n - 1] == ',' || strstr(buf, ",,")) {
        snprintf(err, AP_ERR_LEN, "--megatron: \"%.64s\": %s", spec, n ? "an empty item "
                 "between commas" : "empty; give key=value pairs, as tp=8,pp=2");
        return AP_EINPUT;
    }
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(err, AP_ERR_LEN, "--megatron: \"%.64s\" is not key=value", tok);
            return AP_EINPUT;
        }
        *eq = 0;
        snprintf(who, sizeof who, "--megatron: %.64s", tok);
        int rc = set_key(m, tok, eq + 1, who, err);
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
    {"--expert-tensor-parallel-size", "etp"},
    {"--micro-batch-size", "mbs"},
    {"--global-batch-size", "gbs"},
    {"--recompute-granularity", "recompute"},
    {"--decoder-first-pipeline-num-layers", "first"},
    {"--decoder-last-pipeline-num-layers", "last"},
    {"--num-virtual-stages-per-pipeline-rank", "vpp"},
    {"--wgrad-deferral-limit", "wgrad_deferral_limit"},
    {"--ddp-bucket-size", "ddp_bucket"},
    {"--pipeline-model-parallel-layout", "layout"},
};

/* The value after a flag that takes one; NULL with err set when missing. */
static char *flag_value(const char *flag, char **save, char *err)
{
    char *v = strtok_r(NULL, " \t\n", save);
    if (!v)
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s needs a value", flag);
    return v;
}

/* Whether the pasted text assigns the variable that `tok` ("$ARGS",
 * "${ARGS[@]}") expands: then its flags are in the text already. */
static int assigned_here(const char *tok, const char *text)
{
    char name[64];
    const char *p = tok + 1 + (tok[1] == '{');
    size_t n = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
    if (!n || n + 2 > sizeof name)
        return 0;
    snprintf(name, sizeof name, "%.*s=", (int)n, p);
    for (const char *q = text; (q = strstr(q, name)); q++)
        if (q == text || strchr(" \t\n;", q[-1]))
            return 1;
    return 0;
}

/* A word the shell would have expanded where the flags are: "$ARGS" or
 * "${MODEL_ARGS[@]}" (Megatron-LM's example scripts keep their flags in
 * such variables), which would leave those flags out unseen, unless the
 * text assigns it (an exported script does). After a flag autopar does
 * not know it may be that flag's value, read past with it, but not after a
 * switch, which takes none; an array's expansion is always flags. 1 with
 * err set for one. */
static int shell_expansion(const char *tok, const char *prev, const char *text, char *err)
{
    if (tok[0] != '$' || assigned_here(tok, text) ||
        (!strstr(tok, "[@]") && !strstr(tok, "[*]") && prev && !strncmp(prev, "--", 2) &&
         !ap_megatron_flag_switch(prev)))
        return 0;
    snprintf(err, AP_ERR_LEN, "--megatron-args: %.64s: a shell variable where flags go; "
             "autopar reads the flags themselves, so give the command line the script "
             "runs (`bash -x` prints it)", tok);
    return 1;
}

/* A Megatron-LM flag written with one dash: argparse refuses it, and
 * reading past it would price the default in its place. 1 with err set. */
static int one_dash(const char *tok, char *err)
{
    char two[AP_FLAG_NAME_LEN + 2];
    if (tok[0] != '-' || tok[1] == '-' || strlen(tok) < 3 || strlen(tok) > AP_FLAG_NAME_LEN)
        return 0;
    snprintf(two, sizeof two, "-%s", tok);
    if (!ap_megatron_flag_known(two))
        return 0;
    snprintf(err, AP_ERR_LEN, "--megatron-args: %s: one dash; Megatron-LM's flag is %s",
             tok, two);
    return 1;
}

/* A value autopar reads that is a shell variable: a script pasted before
 * the shell expanded it. Returns -1 with err saying so, else 0. */
static int shell_variable(const char *flag, const char *v, char *err)
{
    if (v[0] != '$')
        return 0;
    snprintf(err, AP_ERR_LEN, "--megatron-args: %s %.64s: a shell variable; autopar "
             "reads the values, so give the command line the script runs (`bash -x` "
             "prints it)", flag, v);
    return -1;
}

/* Delayed-scaling settings of FP8 training: they change its numerics, not
 * its speed, so their values are read past and not priced. */
static const char *const fp8_tuning[] = {
    "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin",
};

/* --fp8-format and its tuning flags; 1 when `tok` was one, 0 when not,
 * -1 with err set for a bad or missing value. */
static int fp8_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    int tuning = 0;
    for (size_t i = 0; i < sizeof fp8_tuning / sizeof fp8_tuning[0]; i++)
        tuning |= !strcmp(tok, fp8_tuning[i]);
    int recipe = !strcmp(tok, "--fp8-recipe");
    /* Megatron-LM of 2023 spelled the formats as flags of their own. */
    if (!strcmp(tok, "--fp8-e4m3") || !strcmp(tok, "--fp8-hybrid")) {
        m->run.fp8 = 1;
        return 1;
    }
    if (!tuning && !recipe && strcmp(tok, "--fp8-format"))
        return 0;
    char *v = flag_value(tok, save, err);
    if (!v)
        return -1;
    if (tuning)
        return 1;
    /* Without --fp8-format the recipe is read past, as Megatron-LM reads
     * it; "custom" loads a recipe from a Python factory. */
    if (recipe) {
        if (!ap_fp8_recipe_parse(v, &m->run.fp8_recipe))
            return 1;
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s %.64s: not a recipe autopar "
                 "prices (delayed, tensorwise, blockwise or mxfp8)", tok, v);
        return -1;
    }
    /* hybrid: E4M3 forward, E5M2 gradients; e4m3 everywhere. Both run
     * the same GEMMs at the same FP8 peak. */
    if (strcmp(v, "hybrid") && strcmp(v, "e4m3")) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --fp8-format: bad value \"%.64s\" "
                 "(hybrid or e4m3)", v);
        return -1;
    }
    m->run.fp8 = 1;
    return 1;
}

/* --tp-comm-overlap's tuning flags: they choose which collectives overlap
 * and how (TE's ub_cfgs), which autopar does not model: it prices TE's
 * default configuration. The first two take a value. */
static const char *const tp_overlap_tuning[] = {
    "--tp-comm-overlap-cfg", "--tp-comm-bootstrap-backend",
    "--disable-tp-comm-overlap-ag", "--disable-tp-comm-overlap-rs",
    "--tp-comm-overlap-rs-dgrad", "--disable-tp-comm-bulk-dgrad",
    "--disable-tp-comm-bulk-wgrad", "--disable-tp-comm-split-ag",
    "--disable-tp-comm-split-rs",
};

/* --tp-comm-overlap and its tuning flags; 1 when `tok` was one, 0 when
 * not, -1 with err set for a missing value. */
static int tp_overlap_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    if (!strcmp(tok, "--tp-comm-overlap")) {
        m->run.tp_overlap = 1;
        return 1;
    }
    for (size_t i = 0; i < sizeof tp_overlap_tuning / sizeof tp_overlap_tuning[0]; i++) {
        if (strcmp(tok, tp_overlap_tuning[i]))
            continue;
        if (i < 2 && !flag_value(tok, save, err))
            return -1;
        return 1;
    }
    return 0;
}

/* Megatron-Core's all-to-all overlap across micro-batches, its delayed
 * expert weight gradients (ap_run_settings.moe_a2a_overlap) and its
 * deferred output-layer weight gradients (defer_wgrad): the flags that
 * move backward work in the schedule. 1 when `tok` was one, 0 when not;
 * check_moe_overlap and check_defer_wgrad refuse them where Megatron-Core
 * does. */
static int schedule_flag(const char *tok, ap_megatron *m)
{
    if (!strcmp(tok, "--overlap-moe-expert-parallel-comm"))
        return m->run.moe_a2a_overlap = 1;
    if (!strcmp(tok, "--delay-wgrad-compute"))
        return m->run.delay_wgrad = 1;
    if (!strcmp(tok, "--defer-embedding-wgrad-compute"))
        return m->run.defer_wgrad = 1;
    if (!strcmp(tok, "--no-gradient-accumulation-fusion"))
        return m->run.no_grad_fusion = 1;
    return 0;
}

/* Flags that describe the model, not its layout: kept in m->shape and
 * checked against the model (check_shape). --num-query-groups counts only
 * under --group-query-attention, as in Megatron-LM; its value goes to
 * *groups until the end of the flags says. */
static int *shape_slot(ap_megatron *m, const char *flag, int *groups)
{
    return !strcmp(flag, "--num-layers") ? &m->shape.layers
         : !strcmp(flag, "--hidden-size") ? &m->shape.hidden
         : !strcmp(flag, "--num-attention-heads") ? &m->shape.heads
         : !strcmp(flag, "--num-query-groups") ? groups
         : !strcmp(flag, "--ffn-hidden-size") ? &m->shape.ffn
         : !strcmp(flag, "--seq-length") ? &m->shape.seq
         : !strcmp(flag, "--kv-channels") ? &m->shape.kv_channels
         : !strcmp(flag, "--q-lora-rank") ? &m->shape.q_lora
         : !strcmp(flag, "--kv-lora-rank") ? &m->shape.kv_lora
         : !strcmp(flag, "--qk-head-dim") ? &m->shape.qk_nope_dim
         : !strcmp(flag, "--qk-pos-emb-head-dim") ? &m->shape.qk_rope_dim
         : !strcmp(flag, "--v-head-dim") ? &m->shape.v_head_dim
         : !strcmp(flag, "--vocab-size") ? &m->shape.vocab
         : !strcmp(flag, "--make-vocab-size-divisible-by") ? &m->shape.vocab_divisor
         : !strcmp(flag, "--max-position-embeddings") ? &m->shape.max_pos
         : !strcmp(flag, "--num-experts") ? &m->shape.experts : NULL;
}

/* The model-structure switches (flags without a value), kept in m->shape
 * and checked against the model (check_structure, check_layer_flags,
 * check_mla). */
static int *shape_switch(ap_megatron *m, const char *flag)
{
    return !strcmp(flag, "--multi-latent-attention") ? &m->shape.mla
         : !strcmp(flag, "--disable-bias-linear") ? &m->shape.no_bias
         : !strcmp(flag, "--add-qkv-bias") ? &m->shape.add_qkv_bias
         : !strcmp(flag, "--qk-layernorm") ? &m->shape.qk_norm
         : !strcmp(flag, "--qk-l2-norm") ? &m->shape.qk_l2
         : !strcmp(flag, "--swiglu") ? &m->shape.swiglu
         : !strcmp(flag, "--squared-relu") ? &m->shape.squared_relu
         : !strcmp(flag, "--quick-geglu") ? &m->shape.quick_geglu
         : !strcmp(flag, "--apply-layernorm-1p") ? &m->shape.layernorm_1p
         : !strcmp(flag, "--use-rope-scaling") ? &m->shape.rope_scaling
         : !strcmp(flag, "--untie-embeddings-and-output-weights") ? &m->shape.untie : NULL;
}

/* An integer flag value from lo to 2^30 into *out: 1, or -1 with err set
 * when it is missing or bad. */
static int int_value(const char *flag, char **save, long lo, int *out, char *err)
{
    char *v = flag_value(flag, save, err), *end;
    if (!v || shell_variable(flag, v, err))
        return -1;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < lo || n > (1L << 30)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" "
                 "(an integer from %ld to 2^30)", flag, v, lo);
        return -1;
    }
    *out = (int)n;
    return 1;
}

/* A positive integer flag value (int_value from 1). */
static int count_value(const char *flag, char **save, int *out, char *err)
{
    return int_value(flag, save, 1, out, err);
}

/* --hidden-dropout and --attention-dropout: 1 when `tok` was one (its
 * probability in p[0] or p[1]), 0 when not, -1 with err set for a bad or
 * missing value. */
static int dropout_flag(const char *tok, char **save, double p[2], char *err)
{
    int i = !strcmp(tok, "--hidden-dropout") ? 0 : !strcmp(tok, "--attention-dropout") ? 1 : -1;
    if (i < 0)
        return 0;
    char *v = flag_value(tok, save, err), *end;
    if (!v)
        return -1;
    double x = strtod(v, &end);
    if (!*v || *end || !(x >= 0 && x < 1)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" "
                 "(a probability from 0 to below 1)", tok, v);
        return -1;
    }
    p[i] = x;
    return 1;
}

/* What the recomputation flags of a command line said, for
 * recompute_rules once all are read. */
typedef struct {
    int method, layers; /* given */
    int layers_at;      /* --recompute-num-layers' value, -1 when bad */
} rc_flags;

/* --recompute-activations, --recompute-method and --recompute-num-layers;
 * 1 when `tok` was one, 0 when not, -1 with err set for a bad or missing
 * value. Megatron-LM reads --recompute-activations as selective
 * recomputation; the method and its layers go to m (ap_recompute_method). */
static int recompute_flag(const char *tok, char **save, ap_megatron *m,
                          rc_flags *f, char *err)
{
    if (!strcmp(tok, "--recompute-activations")) {
        m->recompute = AP_RECOMPUTE_SELECTIVE;
        return 1;
    }
    int method = !strcmp(tok, "--recompute-method");
    if (!method && strcmp(tok, "--recompute-num-layers"))
        return 0;
    char *v = flag_value(tok, save, err), who[80];
    if (!v)
        return -1;
    snprintf(who, sizeof who, "--megatron-args: %s", tok);
    if (recompute_key(m, method ? "recompute_method" : "recompute_layers", v, who, err) < 0)
        return -1;
    f->method |= method;
    f->layers |= !method;
    return 1;
}

/* Flags of Megatron-LM before 2022 that command lines of its runs carry,
 * read as those versions meant them: v1's --model-parallel-size (tensor
 * parallelism, before pipelines) and --batch-size (the micro-batch, each
 * data-parallel rank's, with no accumulation); v2's --checkpoint-activations
 * (full recomputation, layers checkpointed in chunks of
 * --checkpoint-num-layers) and their successors of late 2021,
 * --activations-checkpoint-method and --activations-checkpoint-num-layers,
 * which --recompute-granularity, --recompute-method and
 * --recompute-num-layers replaced in 2022. Megatron-LM v2 refuses the v1
 * flags and v3 the v2 ones, so a command line never mixes a flag with its
 * successor; the v1 flags also say the backward was v1's (tp_sync). */
typedef struct {
    int mp, batch;          /* --model-parallel-size, --batch-size; 0 if not */
    int checkpoint;         /* --checkpoint-activations */
    const char *method;     /* --activations-checkpoint-method */
    int layers, act_layers; /* --checkpoint-num-layers, --activations-...; 0 if not */
    const char *ddp;        /* --DDP-impl (until 2023) */
    int tp_given, mbs_given;
} legacy_flags;

/* 1 when `tok` was one of them, 0 when not, -1 with err set for a bad or
 * missing value. */
static int legacy_flag(const char *tok, char **save, legacy_flags *f, char *err)
{
    if (!strcmp(tok, "--checkpoint-activations"))
        return f->checkpoint = 1;
    const char **word = !strcmp(tok, "--activations-checkpoint-method") ? &f->method
                      : !strcmp(tok, "--DDP-impl") ? &f->ddp : NULL;
    if (word) {
        *word = flag_value(tok, save, err);
        return *word ? 1 : -1;
    }
    int *slot = !strcmp(tok, "--model-parallel-size") ? &f->mp
              : !strcmp(tok, "--batch-size") ? &f->batch
              : !strcmp(tok, "--checkpoint-num-layers") ? &f->layers
              : !strcmp(tok, "--activations-checkpoint-num-layers") ? &f->act_layers : NULL;
    return slot ? count_value(tok, save, slot, err) : 0;
}

/* Adds `tok` to m->unknown when it is a flag no Megatron-LM has. */
static void note_unknown(ap_megatron *m, const char *tok)
{
    size_t n = strlen(m->unknown);
    if (strncmp(tok, "--", 2) || n + 2 >= sizeof m->unknown || ap_megatron_flag_known(tok))
        return;
    const char *near = ap_megatron_flag_nearest(tok);
    char one[160];
    snprintf(one, sizeof one, "%s%.64s%s%s%s", n ? ", " : "", tok, near ? " (" : "",
             near ? near : "", near ? "?)" : "");
    if (n + strlen(one) < sizeof m->unknown)
        memcpy(m->unknown + n, one, strlen(one) + 1);
}

/* Whether the command line has a flag only Megatron-LM before 2022 took. */
static int legacy_line(const legacy_flags *f)
{
    return f->mp || f->batch || f->checkpoint || f->method;
}

static int legacy_clash(const char *old, const char *now, char *err)
{
    snprintf(err, AP_ERR_LEN, "--megatron-args: %s is Megatron-LM's flag before %s "
             "replaced it, and no version takes both: give one", old, now);
    return AP_EINPUT;
}

/* Applies what the legacy flags said; a legacy recomputation is full with
 * its method named, as recompute_rules wants it (rc). */
static int legacy_rules(ap_megatron *m, const legacy_flags *f, rc_flags *rc, char *err)
{
    int modern_rc = m->recompute != AP_RECOMPUTE_NONE || rc->method || rc->layers;
    if (f->mp && f->tp_given)
        return legacy_clash("--model-parallel-size", "--tensor-model-parallel-size", err);
    if (f->batch && f->mbs_given)
        return legacy_clash("--batch-size", "--micro-batch-size", err);
    if (f->mp)
        m->tp = f->mp;
    if (f->batch)
        m->mbs = f->batch;
    /* v1's column-parallel layers reduced their input gradient after
     * their backward (docs/cost-model.md, "Tensor-parallel communication
     * without userbuffers"). */
    if (f->mp || f->batch)
        m->run.tp_sync = 1;
    if (!f->checkpoint && !f->method)
        return AP_OK;
    if (modern_rc)
        return legacy_clash(f->checkpoint ? "--checkpoint-activations"
                                          : "--activations-checkpoint-method",
                            "--recompute-granularity", err);
    if (recompute_key(m, "recompute_method", f->method ? f->method : "uniform",
                      "--megatron-args: --activations-checkpoint-method", err) < 0)
        return AP_EINPUT;
    m->recompute = AP_RECOMPUTE_FULL;
    m->recompute_layers = f->act_layers ? f->act_layers : f->layers ? f->layers : 1;
    rc->method = rc->layers = 1;
    return AP_OK;
}

/* --DDP-impl torch wraps the model in PyTorch's DistributedDataParallel,
 * which reduces the gradients in buckets during the backward; Megatron-LM
 * holds its reduction back (no_sync) until the last micro-batch only
 * without pipelining, so that is overlap_grad=1 there. It runs neither the
 * distributed optimizer nor fp32 gradients (Megatron-LM asserts its local
 * DDP for both). local, the default, changes nothing. */
static int ddp_rule(const legacy_flags *f, ap_megatron *m, char *err)
{
    if (!f->ddp || !strcmp(f->ddp, "local"))
        return AP_OK;
    if (strcmp(f->ddp, "torch")) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --DDP-impl: bad value \"%.64s\" "
                 "(local or torch)", f->ddp);
        return AP_EINPUT;
    }
    const char *why =
        m->pp > 1 ? "reduces every micro-batch's gradients under pipeline parallelism "
                    "(Megatron-LM's pipeline schedules hold none back with no_sync), "
                    "which is not priced"
        : m->zero != AP_ZERO_NONE ? "cannot run with --use-distributed-optimizer, which "
                                    "Megatron-LM runs on its local DDP only"
        : m->run.grad_fp32 ? "reduces the gradients in their own dtype, where --bf16 or "
                             "--accumulate-allreduce-grads-in-fp32 has Megatron-LM keep "
                             "them in fp32, which it does in its local DDP only"
        : NULL;
    if (why) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --DDP-impl torch %s", why);
        return AP_EINPUT;
    }
    m->overlap_grad = 1;
    return AP_OK;
}

/* Megatron-LM's rules for the recomputation flags (arguments.py and
 * Megatron-Core's TransformerConfig): full recomputation names its method
 * (none is the default, and the config refuses it), selective takes
 * neither a method nor a layer count. Without --recompute-granularity
 * both are read past, as Megatron-LM does. */
static int recompute_rules(const ap_megatron *m, const rc_flags *f, char *err)
{
    if (m->recompute == AP_RECOMPUTE_FULL && !f->method) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --recompute-granularity full needs "
                 "--recompute-method uniform or block (Megatron-LM refuses full "
                 "recomputation without one)");
        return AP_EINPUT;
    }
    if (m->recompute == AP_RECOMPUTE_SELECTIVE && (f->method || f->layers)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s applies to "
                 "--recompute-granularity full only; Megatron-LM refuses it with "
                 "selective recomputation", f->method ? "--recompute-method"
                                                      : "--recompute-num-layers");
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Megatron-LM reads --cross-entropy-fusion-impl (native by default) only
 * under --cross-entropy-loss-fusion; without it the loss is unfused
 * whatever the implementation says. */
typedef struct {
    int fusion;
    ap_ce_impl impl;
} ce_flags;

/* --overlap-param-gather; 1 when `tok` was it, 0 when not. Megatron-LM's
 * --overlap-param-gather-with-optimizer-step is read past: it only hides
 * the first bucket's gather behind the step for the interleaved schedule,
 * which this model does not price apart. */
static int param_gather_flag(const char *tok, ap_megatron *m)
{
    if (strcmp(tok, "--overlap-param-gather"))
        return 0;
    m->overlap_param = 1;
    return 1;
}

/* The two cross-entropy flags; 1 when `tok` was one, 0 when not, -1 with
 * err set for a bad or missing value. */
static int cross_entropy_flag(const char *tok, char **save, ce_flags *ce, char *err)
{
    if (!strcmp(tok, "--cross-entropy-loss-fusion")) {
        ce->fusion = 1;
        return 1;
    }
    if (strcmp(tok, "--cross-entropy-fusion-impl"))
        return 0;
    char *v = flag_value(tok, save, err);
    if (!v)
        return -1;
    if (ap_ce_impl_parse(v, &ce->impl) || ce->impl == AP_CE_UNFUSED) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --cross-entropy-fusion-impl: bad "
                 "value \"%.64s\" (native or te)", v);
        return -1;
    }
    return 1;
}

/* The flags of a Megatron-LM command line that change the step's time or
 * memory beyond the layout (docs/megatron.md): each is priced by
 * mapping it onto a setting autopar prices, or refused naming it, its
 * value and why. audit_flag reads them; settle_audit decides once every
 * flag is read, since Megatron-LM's meaning of one depends on others (the
 * dispatcher matters only with experts, --cp-comm-type only with cp > 1,
 * --recompute-modules only under selective recomputation). Values point
 * into the parser's copy of the command line. */
typedef struct {
    const char *dispatcher;  /* --moe-token-dispatcher-type */
    int grouped_gemm;        /* --moe-grouped-gemm */
    const char *backend;     /* --attention-backend */
    int flash_attn;          /* --use-flash-attn */
    const char *impl;        /* --transformer-impl */
    const char *cp_comm;     /* the first --cp-comm-type value */
    const char *cp_other;    /* the first value that differs from it */
    int torch_fsdp2, megatron_fsdp;
    const char *fsdp_flag;   /* --use-megatron-fsdp or --use-custom-fsdp */
    const char *sharding;    /* --data-parallel-sharding-strategy */
    int modules_given;       /* --recompute-modules */
    int moe_layer_recompute; /* --moe-layer-recompute */
    const char *flex_backend; /* --moe-flex-dispatcher-backend, or deepep for
                                 --moe-enable-deepep */
    int cuda_graph;          /* --cuda-graph-impl (ap_cuda_graph_name) */
    int graph_iteration;     /* --cuda-graph-scope full_iteration */
    unsigned modules;        /* the modules it names (ap_module bits) */
    const char *bad_module;  /* the first value that names none */
    int shared_expert, shared_overlap;
    int topk;                /* --moe-router-topk; 0 where not given */
    int moe_ffn;             /* --moe-ffn-hidden-size; 0 where not given */
    int shared_ffn;          /* --moe-shared-expert-intermediate-size */
    const char *moe_freq;    /* --moe-layer-freq */
    const char *norm;        /* --normalization */
    const char *softmax;     /* --softmax-type */
    int groups, group_topk;  /* --moe-router-num-groups, --moe-router-group-topk */
    const char *score;       /* --moe-router-score-function */
    int pre_softmax;         /* --moe-router-pre-softmax */
    int expert_bias;         /* --moe-router-enable-expert-bias */
    int on_input;            /* --moe-apply-probs-on-input */
    int no_gelu_fusion;      /* --no-bias-gelu-fusion */
    double route_scale;      /* --moe-router-topk-scaling-factor; 0 where not given */
    double capacity;         /* --moe-expert-capacity-factor; 0 where not given */
    int pad;                 /* --moe-pad-expert-input-to-capacity */
    int mb_group;            /* --microbatch-group-size-per-virtual-pipeline-stage */
} audit;

/* The next token when it is a value, not the next flag: for flags that take
 * a list (argparse's nargs '+' and '*'). */
static char *list_value(char **save)
{
    char *p = *save;
    if (!p)
        return NULL;
    p += strspn(p, " \t\n");
    if (!*p || !strncmp(p, "--", 2))
        return NULL;
    return strtok_r(NULL, " \t\n", save);
}

/* Flags refused whatever their value: what they change is not in the
 * graph or the cost model. A value count of -1 is a list (nargs '+'). */
static const struct {
    const char *flag;
    int values;
    const char *why;
} refused[] = {
    {"--cpu-offloading", 0, "moves activations to host memory over PCIe, "
     "which is not priced"},
    {"--optimizer-cpu-offload", 0, "keeps the optimizer states in host memory "
     "and steps them on the CPU, which is not priced"},
    {"--fine-grained-activation-offloading", 0, "moves chosen activations to host "
     "memory over PCIe, which is not priced"},
    {"--moe-latent-size", 1, "runs the experts in a latent space of another width "
     "than the model's, which the graph does not have"},
    {"--moe-paged-stash", 0, "stashes the experts' activations in paged buffers, "
     "which is not priced"},
    {"--fp4-format", 1, "trains the linear layers in FP4, which is not priced"},
    {"--fp8-dot-product-attention", 0, "runs attention in FP8, which is not priced "
     "(autopar's FP8 keeps attention in bf16, Megatron-LM's default)"},
    {"--fp8-multi-head-attention", 0, "runs attention in FP8, which is not priced "
     "(autopar's FP8 keeps attention in bf16, Megatron-LM's default)"},
    {"--no-fp8-wgrad", 0, "runs the weight-gradient GEMMs in bf16 under FP8, which is "
     "not priced (autopar runs them in FP8, Megatron-LM's default)"},
    {"--keep-fp8-transpose-cache", 0, "keeps every layer's FP8 weight transposes "
     "resident under FSDP, which is not priced"},
    {"--fp32-residual-connection", 0, "keeps the residual stream in fp32, which is "
     "not priced"},
    {"--fallback-to-eager-attn", 0, "runs attention eagerly, unfused, which autopar "
     "prices only for a model built with --flash-attention off (and "
     "--attention-backend unfused)"},
    {"--sequence-packing-scheduler", 1, "packs sequences of several lengths per "
     "micro-batch, which is not priced"},
    {"--max-seqlen-per-dp-cp-rank", 1, "balances packed sequences over the ranks, "
     "which is not priced"},
    {"--dynamic-context-parallel", 0, "varies context parallelism per micro-batch, "
     "which is not priced"},
    {"--hybrid-context-parallel", 0, "varies context parallelism per micro-batch, "
     "which is not priced"},
    {"--tensor-parallel-num-weight-shards", 1, "shards the weights beyond the "
     "tensor-parallel group, which is not priced"},
    {"--expert-tensor-parallel-num-weight-shards", 1, "shards the experts' weights "
     "beyond the expert-tensor-parallel group, which is not priced"},
    {"--moe-expert-rank-capacity-factor", 1, "caps the tokens each rank's experts "
     "take, which is not priced"},
    {"--deterministic-mode", 0, "runs deterministic kernels, slower ones, which are "
     "not priced"},
    {"--batch-invariant-mode", 0, "runs batch-invariant kernels, slower ones, which "
     "are not priced"},
    {"--use-mok-megakernel", 0, "runs the MoE layer as one megakernel, which is not "
     "priced"},
    {"--te-precision-config-file", 1, "sets each module's precision from a file, which "
     "autopar cannot see"},
    {"--use-tp-pp-dp-mapping", 0, "orders the ranks tp-cp-ep-pp-dp, which puts the "
     "data- and pipeline-parallel groups on other nodes than autopar prices "
     "(Megatron-LM's default order)"},
    {"--fake-process-group", 0, "skips all communication (a profiling aid)"},
    {"--use-legacy-models", 0, "runs the legacy GPT model; autopar prices "
     "Megatron-Core's"},
    {"--spec", -1, "replaces the layer's modules with a custom spec that "
     "autopar cannot see"},
    {"--no-bias-swiglu-fusion", 0, "runs SwiGLU unfused, which keeps more for "
     "backward than the fused kernel autopar prices"},
    {"--distribute-saved-activations", 0, "splits the recomputation checkpoints "
     "over the tensor-parallel group, which is not priced"},
    {"--distribute-checkpointed-activations", 0, "splits the recomputation checkpoints "
     "over the tensor-parallel group (--distribute-saved-activations before 2022), "
     "which is not priced"},
    {"--moe-use-legacy-grouped-gemm", 0, "runs the experts as the legacy "
     "GroupedMLP; autopar prices Transformer Engine's GroupedLinear "
     "(--moe-grouped-gemm)"},
    {"--torch-fsdp2-no-reshard-after-forward", 0, "keeps FSDP2's gathered "
     "weights from forward to backward, which no ZeRO level prices"},
    {"--hybrid-override-pattern", 1, "builds a hybrid model of Mamba, attention and MLP "
     "layers (pretrain_mamba.py), whose Mamba layers the graph does not have"},
    {"--is-hybrid-model", 0, "builds a hybrid model of Mamba, attention and MLP layers, "
     "whose Mamba layers the graph does not have"},
    {"--heterogeneous-layers-config-path", 1, "gives each layer its own structure "
     "(heterogeneous layers, as Llama-Nemotron's), which the graph does not have"},
    {"--heterogeneous-layers-config-encoded-json", 1, "gives each layer its own structure "
     "(heterogeneous layers, as Llama-Nemotron's), which the graph does not have"},
    {"--standalone-embedding-stage", 0, "gives the embedding a pipeline stage of its own, "
     "which is not priced (--account-for-embedding-in-pipeline-split counts it as a "
     "layer, which is)"},
};

/* Flags refused unless their value is the one given here (Megatron-LM's
 * default, or a value that changes nothing priced). */
static const struct {
    const char *flag, *ok, *why;
} refused_unless[] = {
    {"--optimizer", "adam", "keeps other optimizer states than Adam's, "
     "which autopar prices (12 bytes per parameter)"},
    {"--distributed-backend", "nccl", "runs the collectives over another backend than "
     "NCCL, which is not priced"},
    {"--cpu-offloading-num-layers", "0", "moves those layers' activations to "
     "host memory over PCIe, which is not priced"},
    {"--num-distributed-optimizer-instances", "1", "keeps that many copies of "
     "the distributed optimizer's shards; autopar shards them over the whole "
     "data-parallel group"},
    {"--hybrid-attention-ratio", "0.0", "builds a hybrid model with Mamba layers "
     "(pretrain_mamba.py), which the graph does not have"},
    {"--hybrid-mlp-ratio", "0.0", "builds a hybrid model with Mamba layers "
     "(pretrain_mamba.py), which the graph does not have"},
};

static int refuse(const char *flag, const char *v, const char *why, char *err)
{
    snprintf(err, AP_ERR_LEN, "--megatron-args: %s%s%.64s: %s", flag, v ? " " : "",
             v ? v : "", why);
    return -1;
}

/* A value as the table's: the same text, or the same number ("0" for
 * "0.0"). */
static int same_value(const char *v, const char *ok)
{
    char *e1, *e2;
    double a = strtod(v, &e1), b = strtod(ok, &e2);
    return !strcmp(v, ok) || (e1 != v && !*e1 && e2 != ok && !*e2 && a == b);
}

/* The refused flags of the two tables: 1 when `tok` was one that is fine,
 * 0 when not one, -1 with err set. */
static int refused_flag(const char *tok, char **save, char *err)
{
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (strcmp(tok, refused[i].flag))
            continue;
        char *v = refused[i].values > 0 ? flag_value(tok, save, err) : NULL;
        if (refused[i].values > 0 && !v)
            return -1;
        char list[128] = "";
        for (char *e; refused[i].values < 0 && (e = list_value(save));)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? " " : "",
                     e);
        return refuse(tok, *list ? list : v, refused[i].why, err);
    }
    for (size_t i = 0; i < sizeof refused_unless / sizeof refused_unless[0]; i++) {
        if (strcmp(tok, refused_unless[i].flag))
            continue;
        char *v = flag_value(tok, save, err);
        if (!v)
            return -1;
        return same_value(v, refused_unless[i].ok) ? 1
                                                   : refuse(tok, v, refused_unless[i].why, err);
    }
    return 0;
}

/* --mtp-num-layers N: the model's MTP modules (check_shape), 0 their
 * absence, Megatron-LM's default. */
static int mtp_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    if (strcmp(tok, "--mtp-num-layers"))
        return 0;
    char *v = flag_value(tok, save, err), *end;
    if (!v)
        return -1;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > AP_MAX_MTP) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" (an integer "
                 "from 0 to %d, the most MTP modules autopar builds)", tok, v, AP_MAX_MTP);
        return -1;
    }
    m->shape.mtp = (int)n;
    return 1;
}

/* A flag whose value settle_audit judges: into *slot. */
static int value_into(const char *tok, char **save, const char **slot, char *err)
{
    char *v = flag_value(tok, save, err);
    if (!v)
        return -1;
    *slot = v;
    return 1;
}

/* A value of `flag` that must be one of `choices` (space-separated). */
static int one_of(const char *flag, const char *v, const char *choices, char *err)
{
    size_t n = strlen(v);
    if (shell_variable(flag, v, err))
        return -1;
    for (const char *p = choices; *p; p += strcspn(p, " "), p += *p == ' ')
        if (strcspn(p, " ") == n && !strncmp(p, v, n))
            return 0;
    snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" (%s)", flag, v,
             choices);
    return -1;
}

/* value_into for a flag whose value must be one of `choices`: 1, or -1
 * with err set. */
static int choice_into(const char *tok, char **save, const char **slot,
                       const char *choices, char *err)
{
    if (value_into(tok, save, slot, err) < 0)
        return -1;
    return one_of(tok, *slot, choices, err) ? -1 : 1;
}

/* The flags that decide the gradients' dtype, which grad_rule combines
 * once every flag is read. main_grads points into the parser's copy of
 * the command line; NULL is its default, fp32. */
typedef struct {
    int bf16, fp16;
    int reduce_bf16;     /* --grad-reduce-in-bf16 */
    int accumulate_fp32; /* --accumulate-allreduce-grads-in-fp32 */
    const char *main_grads; /* --main-grads-dtype */
} grad_flags;

/* 1 when `tok` was one of those flags, 0 when not, -1 with err set for a
 * bad or missing value. */
static int grad_flag(const char *tok, char **save, grad_flags *gf, char *err)
{
    int *on = !strcmp(tok, "--bf16") ? &gf->bf16
            : !strcmp(tok, "--fp16") ? &gf->fp16
            : !strcmp(tok, "--grad-reduce-in-bf16") ? &gf->reduce_bf16
            : !strcmp(tok, "--accumulate-allreduce-grads-in-fp32") ? &gf->accumulate_fp32
            : NULL;
    if (on) {
        *on = 1;
        return 1;
    }
    if (strcmp(tok, "--main-grads-dtype"))
        return 0;
    return choice_into(tok, save, &gf->main_grads, "fp32 bf16", err);
}

/* Megatron-LM's validate_args: under --bf16 the gradients are accumulated
 * and reduced in fp32 (accumulate_allreduce_grads_in_fp32, DDP's
 * grad_reduce_in_fp32) unless --grad-reduce-in-bf16 says bf16, or
 * --main-grads-dtype bf16 leaves the flag off; it asserts that
 * --accumulate-allreduce-grads-in-fp32 comes with fp32 main gradients.
 * Under --fp16, or neither, gradients are in the parameters' dtype unless
 * --accumulate-allreduce-grads-in-fp32 asks for fp32. The model's own dtype
 * stays MODEL's: these flags decide the gradients' alone. */
static int grad_rule(const grad_flags *gf, ap_megatron *m, char *err)
{
    int main_fp32 = !gf->main_grads || !strcmp(gf->main_grads, "fp32");
    if (gf->bf16 && gf->fp16) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --bf16 with --fp16: Megatron-LM "
                 "trains in one of them; give one");
        return -1;
    }
    if (gf->bf16 && gf->accumulate_fp32 && !main_fp32) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --accumulate-allreduce-grads-in-fp32 "
                 "with --main-grads-dtype %.64s: Megatron-LM asserts fp32 main "
                 "gradients under it", gf->main_grads);
        return -1;
    }
    if (gf->bf16)
        m->run.grad_fp32 = !gf->reduce_bf16 && (gf->accumulate_fp32 || main_fp32);
    else
        m->run.grad_fp32 = gf->accumulate_fp32;
    return 0;
}

/* The precision-aware optimizer's flags, which opt_rule judges once every
 * flag is read (it needs --use-distributed-optimizer's). The values point
 * into the parser's copy of the command line; NULL is fp32, the default. */
typedef struct {
    int aware; /* --use-precision-aware-optimizer */
    int no_remainders; /* --no-store-param-remainders, the last of the pair given */
    const char *v[3]; /* --main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype */
} opt_flags;

static const char *const opt_flag_names[3] = {"--main-params-dtype", "--exp-avg-dtype",
                                              "--exp-avg-sq-dtype"};

/* 1 when `tok` was one of those flags, 0 when not, -1 with err set for a
 * bad or missing value. Transformer Engine's FusedAdam keeps its master
 * weights in fp32 or fp16 and its moments in fp32, fp16, bf16 or fp8
 * (fused_adam.py raises on any other), the choices Megatron-LM passes on. */
static int opt_flag(const char *tok, char **save, opt_flags *of, char *err)
{
    if (!strcmp(tok, "--use-precision-aware-optimizer")) {
        of->aware = 1;
        return 1;
    }
    if (!strcmp(tok, "--no-store-param-remainders") ||
        !strcmp(tok, "--store-param-remainders")) {
        of->no_remainders = tok[2] == 'n';
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        if (strcmp(tok, opt_flag_names[i]))
            continue;
        if (value_into(tok, save, &of->v[i], err) < 0)
            return -1;
        if (i == 0 && !strcmp(of->v[i], "bf16")) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: --main-params-dtype bf16: "
                     "Transformer Engine's FusedAdam keeps fp32 or fp16 main weights "
                     "(master_weight_dtype), so Megatron-LM cannot run it");
            return -1;
        }
        return one_of(tok, of->v[i], i ? "fp32 fp16 bf16 fp8" : "fp32 fp16", err) ? -1 : 1;
    }
    return 0;
}

/* Whether Transformer Engine's FusedAdam keeps the fp32 main weights as
 * remainders. Megatron-Core hands it store_param_remainders (its
 * OptimizerConfig field, True by default; --no-store-param-remainders
 * clears it) with master_weights under --use-precision-aware-optimizer
 * when the main weights are fp32 and FP8 scaling is delayed or off
 * (use_precision_aware_optimizer_no_fp8_or_ds_fp8; optimizer/__init__.py
 * at 0044db1f, optimizer_config.py at 0075637c), not under tensorwise
 * scaling; FusedAdam then keeps only the low 16 bits of each main weight
 * whose parameter is bf16, which is --bf16's params_dtype and not FP8
 * primary weights (fused_adam.py at 04912bf0: "Works only when param type
 * is BF16 and master weight type is FP32, no effect otherwise"). TE before
 * 2.1 has no such option (Megatron-Core then clears it): a command line is
 * priced as run with TE 2.1 or later. */
static int keeps_remainders(const opt_flags *of, const ap_megatron *m, int bf16)
{
    int delayed_or_off = !m->run.fp8 || m->run.fp8_recipe == AP_FP8_DELAYED;
    return of->aware && !of->no_remainders && bf16 && !m->run.fp8_param_gather &&
           delayed_or_off && m->run.opt.main_params == AP_OPT_FP32;
}

/* Megatron-Core's OptimizerConfig.__post_init__: a dtype other than fp32
 * only under --use-precision-aware-optimizer ("exp_avg_dtype can only be
 * fp32 when not using precision-aware optimizer"), and that only with the
 * distributed optimizer ("--use-precision-aware-optimizer only supported
 * with distributed optimizer"). fp32 main weights of a bf16 model become
 * remainders there (keeps_remainders); the flag with all-fp32 states and
 * no remainders keeps the bytes priced. */
static int opt_rule(const opt_flags *of, ap_megatron *m, int bf16, char *err)
{
    ap_opt_dtype *slot[3] = {&m->run.opt.main_params, &m->run.opt.exp_avg,
                             &m->run.opt.exp_avg_sq};
    for (int i = 0; i < 3; i++) {
        if (!of->v[i])
            continue;
        ap_opt_dtype_parse(of->v[i], slot[i]);
        if (*slot[i] != AP_OPT_FP32 && !of->aware) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s %.16s: Megatron-Core's "
                     "OptimizerConfig asserts fp32 without --use-precision-aware-optimizer",
                     opt_flag_names[i], of->v[i]);
            return -1;
        }
    }
    if (of->aware && m->zero == AP_ZERO_NONE) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --use-precision-aware-optimizer: "
                 "Megatron-Core's OptimizerConfig asserts it is only supported with the "
                 "distributed optimizer (--use-distributed-optimizer)");
        return -1;
    }
    if (keeps_remainders(of, m, bf16))
        m->run.opt.main_params = AP_OPT_REMAINDER;
    return 0;
}

/* The lists: --cp-comm-type (one type for all layers or one per layer),
 * --recompute-modules and --cuda-graph-scope (whether the whole iteration
 * is captured); --hierarchical-context-parallel-sizes read past. */
static int list_flag(const char *tok, char **save, audit *a, char *err)
{
    char *v;
    if (!strcmp(tok, "--cp-comm-type")) {
        int n = 0;
        while ((v = list_value(save))) {
            if (one_of(tok, v, "p2p a2a allgather a2a+p2p", err))
                return -1;
            if (!a->cp_comm)
                a->cp_comm = v;
            else if (!a->cp_other && strcmp(v, a->cp_comm))
                a->cp_other = v;
            n++;
        }
        if (!n)
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s needs a value", tok);
        return n ? 1 : -1;
    }
    if (!strcmp(tok, "--recompute-modules")) {
        a->modules_given = 1;
        a->modules = 0;
        a->bad_module = NULL;
        while ((v = list_value(save))) {
            unsigned bit = ap_module_from_name(v);
            if (!bit && !a->bad_module)
                a->bad_module = v;
            a->modules |= bit;
        }
        return 1;
    }
    if (!strcmp(tok, "--hierarchical-context-parallel-sizes")) {
        while (list_value(save))
            ;
        return 1;
    }
    if (!strcmp(tok, "--cuda-graph-scope")) {
        while ((v = list_value(save)))
            a->graph_iteration |= !strcmp(v, "full_iteration");
        return 1;
    }
    return 0;
}

/* The router's flags, how it scores and weighs the experts (settle_audit
 * keeps them under --num-experts): 1 when `tok` was one, 0 when not, -1
 * with err set for a bad or missing value. Megatron-Core's sqrtsoftplus
 * scores are not built. */
static int router_flag(const char *tok, char **save, audit *a, char *err)
{
    if (!strcmp(tok, "--moe-router-score-function")) {
        if (value_into(tok, save, &a->score, err) < 0)
            return -1;
        if (!strcmp(a->score, "sqrtsoftplus"))
            return refuse(tok, a->score, "scores the experts by sqrt(softplus(x)), which "
                          "autopar's graphs do not build (softmax and sigmoid)", err);
        return one_of(tok, a->score, "softmax sigmoid", err) ? -1 : 1;
    }
    if (!strcmp(tok, "--moe-router-pre-softmax")) {
        a->pre_softmax = 1;
        return 1;
    }
    if (!strcmp(tok, "--moe-router-enable-expert-bias")) {
        a->expert_bias = 1;
        return 1;
    }
    if (!strcmp(tok, "--moe-apply-probs-on-input")) {
        a->on_input = 1;
        return 1;
    }
    if (strcmp(tok, "--moe-router-topk-scaling-factor"))
        return 0;
    char *v = flag_value(tok, save, err), *end;
    if (!v || shell_variable(tok, v, err))
        return -1;
    a->route_scale = strtod(v, &end);
    if (end == v || *end || !(a->route_scale > 0 && a->route_scale <= 1e6)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" (a number "
                 "above 0, at most 1e6)", tok, v);
        return -1;
    }
    return 1;
}

/* The flags settle_audit judges; 1 when `tok` was one, 0 when not, -1
 * with err set for a bad or missing value. */
static int audit_flag(const char *tok, char **save, audit *a, char *err)
{
    if (!strcmp(tok, "--no-bias-gelu-fusion")) {
        a->no_gelu_fusion = 1;
        return 1;
    }
    int rc = refused_flag(tok, save, err);
    if (rc || (rc = list_flag(tok, save, a, err)))
        return rc;
    if (!strcmp(tok, "--moe-token-dispatcher-type"))
        return choice_into(tok, save, &a->dispatcher, "allgather alltoall flex", err);
    if (!strcmp(tok, "--moe-flex-dispatcher-backend"))
        return choice_into(tok, save, &a->flex_backend, "deepep hybridep", err);
    if (!strcmp(tok, "--moe-enable-deepep")) {
        a->flex_backend = "deepep";
        return 1;
    }
    if (!strcmp(tok, "--attention-backend"))
        return choice_into(tok, save, &a->backend, "flash fused unfused local auto", err);
    if (!strcmp(tok, "--transformer-impl"))
        return choice_into(tok, save, &a->impl, "local transformer_engine", err);
    if (!strcmp(tok, "--data-parallel-sharding-strategy"))
        return choice_into(tok, save, &a->sharding,
                           "no_shard optim optim_grads optim_grads_params", err);
    if (!strcmp(tok, "--moe-router-topk"))
        return count_value(tok, save, &a->topk, err);
    if (!strcmp(tok, "--moe-ffn-hidden-size"))
        return count_value(tok, save, &a->moe_ffn, err);
    if (!strcmp(tok, "--moe-router-num-groups"))
        return count_value(tok, save, &a->groups, err);
    if (!strcmp(tok, "--moe-expert-capacity-factor")) {
        char *v = flag_value(tok, save, err), *end;
        if (!v)
            return -1;
        a->capacity = strtod(v, &end);
        if (*end || !(a->capacity > 0 && a->capacity <= 1e6)) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" (a number "
                     "above 0)", tok, v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(tok, "--moe-router-group-topk"))
        return count_value(tok, save, &a->group_topk, err);
    if ((rc = router_flag(tok, save, a, err)))
        return rc;
    if (!strcmp(tok, "--microbatch-group-size-per-virtual-pipeline-stage"))
        return count_value(tok, save, &a->mb_group, err);
    if (!strcmp(tok, "--moe-shared-expert-intermediate-size")) {
        a->shared_expert = 1;
        return count_value(tok, save, &a->shared_ffn, err);
    }
    if (!strcmp(tok, "--moe-layer-freq"))
        return value_into(tok, save, &a->moe_freq, err) < 0 ? -1 : 1;
    if (!strcmp(tok, "--normalization"))
        return choice_into(tok, save, &a->norm, "LayerNorm RMSNorm", err);
    if (!strcmp(tok, "--softmax-type"))
        return choice_into(tok, save, &a->softmax, "vanilla learnable off-by-one", err);
    if (!strcmp(tok, "--cuda-graph-impl")) {
        char *v = flag_value(tok, save, err);
        if (!v)
            return -1;
        if (!ap_cuda_graph_parse(v, &a->cuda_graph))
            return 1;
        snprintf(err, AP_ERR_LEN, "--megatron-args: --cuda-graph-impl: bad value "
                 "\"%.64s\" (none, local or transformer_engine)", v);
        return -1;
    }
    /* The older flags: Megatron-Core's own graphs, and Transformer
     * Engine's captured outside it. */
    if (!strcmp(tok, "--enable-cuda-graph") || !strcmp(tok, "--external-cuda-graph")) {
        a->cuda_graph = strcmp(tok, "--enable-cuda-graph") ? AP_CUDA_GRAPH_TE
                                                           : AP_CUDA_GRAPH_LOCAL;
        return 1;
    }
    int *on = !strcmp(tok, "--moe-grouped-gemm") ? &a->grouped_gemm
            : !strcmp(tok, "--use-flash-attn") ? &a->flash_attn
            : !strcmp(tok, "--use-torch-fsdp2") ? &a->torch_fsdp2
            : !strcmp(tok, "--moe-shared-expert-overlap") ? &a->shared_overlap
            : !strcmp(tok, "--moe-layer-recompute") ? &a->moe_layer_recompute
            : !strcmp(tok, "--moe-pad-expert-input-to-capacity") ? &a->pad
            : !strcmp(tok, "--use-megatron-fsdp") || !strcmp(tok, "--use-custom-fsdp")
                ? &a->megatron_fsdp : NULL;
    if (!on)
        return 0;
    if (on == &a->megatron_fsdp)
        a->fsdp_flag = tok;
    *on = 1;
    return 1;
}

/* The MoE flags: Megatron-Core's default dispatcher is allgather and its
 * default experts SequentialMLP (one expert's GEMMs after another), which
 * --moe-grouped-gemm makes TE's GroupedLinear; with one expert a rank the
 * two run the same GEMM. */
static int settle_moe(const audit *a, ap_megatron *m, char *err)
{
    if (!m->shape.experts)
        return 0;
    /* The allgather dispatcher is Megatron-Core's default; flex runs DeepEP
     * unless its backend says HybridEP. */
    const char *d = a->dispatcher ? a->dispatcher : "allgather";
    if (!strcmp(d, "flex"))
        d = a->flex_backend ? a->flex_backend : "deepep";
    if (ap_dispatcher_parse(d, &m->run.dispatcher)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: the token dispatcher \"%.64s\" is not "
                 "one autopar prices (alltoall, allgather, deepep, hybridep)", d);
        return -1;
    }
    m->run.sequential_experts = !a->grouped_gemm && m->shape.experts > m->ep;
    m->run.shared_overlap = a->shared_expert && a->shared_overlap;
    m->run.capacity_factor = a->capacity;
    m->run.pad_capacity = a->pad;
    return 0;
}

/* The attention kernel the flags say, into m->shape.flash: TE picks flash
 * or cuDNN's fused kernel under flash, fused and auto (the default), both
 * priced as a fused kernel; unfused, and Megatron's own local attention
 * (--transformer-impl local), keep the s x s matrix. */
static int settle_attention(const audit *a, ap_megatron *m, char *err)
{
    int local = a->impl && !strcmp(a->impl, "local");
    int fused = a->backend ? strcmp(a->backend, "unfused") && strcmp(a->backend, "local")
                           : -1;
    if (local && (fused == 1 || a->flash_attn)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --transformer-impl local with %s%s: "
                 "the local layers' attention does not run Transformer Engine's "
                 "kernels, so which attention runs is not clear; give one",
                 a->backend ? "--attention-backend " : "--use-flash-attn",
                 a->backend ? a->backend : "");
        return -1;
    }
    if (a->flash_attn && fused == 0)
        return refuse("--attention-backend", a->backend, "contradicts --use-flash-attn; "
                      "give one", err);
    if (local && (m->run.fp8 || m->run.tp_overlap))
        return refuse("--transformer-impl", "local", m->run.fp8
                      ? "has no FP8 layers (Transformer Engine's); drop --fp8-format"
                      : "has no TP communication overlap (Transformer Engine's "
                        "userbuffers); drop --tp-comm-overlap", err);
    m->shape.flash = local || fused == 0 ? -1 : fused == 1 || a->flash_attn ? 1 : 0;
    if (m->shape.flash < 0 && m->cp > 1) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s %s with --context-parallel-size "
                 "%d: Transformer Engine's context parallelism runs flash or fused "
                 "attention only", local ? "--transformer-impl" : "--attention-backend",
                 local ? "local" : a->backend, m->cp);
        return -1;
    }
    return 0;
}

/* FSDP onto ZeRO: Megatron FSDP's sharding strategies shard what ZeRO-0
 * to 3 shard, with the same collectives (docs/megatron.md); torch
 * FSDP2 runs only without gradient accumulation fusion, which is not
 * priced. */
/* --use-torch-fsdp2: Megatron-Core's TorchFullyShardedDataParallel calls
 * PyTorch's fully_shard on every transformer layer, the embedding and the
 * output layer over the data- and context-parallel group, resharding after
 * forward: each layer's weights are gathered before its forward and again
 * before its backward, and its gradients reduce-scattered in every
 * micro-batch's backward, which is what zero=3 prices (docs/cost-model.md,
 * "Communication"). It passes no mixed-precision policy, so the
 * gradients are reduced in the parameters' dtype (bf16 under --bf16), not
 * the fp32 main_grad buffer of Megatron's own DDP; PyTorch overlaps the
 * reductions with the backward. Megatron-LM asserts pp 1, ep 1, no
 * distributed optimizer and no gradient accumulation fusion, and turns
 * --fp8-param-gather off with a warning. */
static int settle_torch_fsdp2(ap_megatron *m, char *err)
{
    const char *why = m->pp > 1 ? "is not supported with pipeline parallelism"
                    : m->ep > 1 ? "is not supported with expert parallelism"
                    : m->zero == AP_ZERO_1 ? "is not supported with MCore's distributed "
                                             "optimizer (--use-distributed-optimizer)"
                    : !m->run.no_grad_fusion ? "is not supported with gradient "
                                               "accumulation fusion (give "
                                               "--no-gradient-accumulation-fusion)"
                                             : NULL;
    if (why) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --use-torch-fsdp2 %s, as Megatron-LM "
                 "asserts", why);
        return -1;
    }
    m->zero = AP_ZERO_3;
    m->overlap_grad = 1;
    m->overlap_param = 0;
    m->run.grad_fp32 = 0;
    m->run.fp8_param_gather = 0;
    return 0;
}

static int settle_fsdp(const audit *a, ap_megatron *m, char *err)
{
    static const char *const levels[] = {"no_shard", "optim", "optim_grads",
                                         "optim_grads_params"};
    if (a->torch_fsdp2)
        return settle_torch_fsdp2(m, err);
    if (!a->megatron_fsdp)
        return 0;
    const char *s = a->sharding ? a->sharding : "no_shard";
    if (m->zero == AP_ZERO_1 && !strcmp(s, "no_shard")) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s with --use-distributed-optimizer "
                 "and --data-parallel-sharding-strategy no_shard (its default): which "
                 "of them shards the optimizer is not clear; give the strategy "
                 "(optim for ZeRO-1)", a->fsdp_flag);
        return -1;
    }
    for (int z = 0; z < 4; z++)
        if (!strcmp(s, levels[z]))
            m->zero = (ap_zero)z;
    /* Under Megatron FSDP's sharded strategies --overlap-param-gather
     * prefetches the per-use gathers, which zero=2 and 3 price beside the
     * compute whenever the gradient reduction overlaps (Megatron-LM asserts
     * --overlap-grad-reduce with it); it is not the distributed optimizer's
     * gather after the step that overlap_param prices. */
    if (m->zero >= AP_ZERO_2 && m->overlap_param == 1) {
        if (!m->overlap_grad) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: --overlap-param-gather needs "
                     "--overlap-grad-reduce, as Megatron-LM asserts");
            return -1;
        }
        m->overlap_param = 0;
    }
    return 0;
}

/* --cp-comm-type as the spec's cp_comm: one type for every layer, a list
 * of one value or of the same value per layer. At cp 1 Megatron-LM builds
 * no context-parallel group and the flag changes nothing. A list mixing
 * types would price layers differently, and a2a+p2p (Transformer Engine's
 * hierarchical path: all-to-all inside each group of
 * --hierarchical-context-parallel-sizes' first size, the ring across
 * them) is not priced; both stay refused. */
static int settle_cp_comm(const audit *a, ap_megatron *m, char *err)
{
    if (!a->cp_comm || m->cp <= 1)
        return 0;
    if (a->cp_other) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --cp-comm-type %.32s ... %.32s: "
                 "autopar prices one communication type for every layer; a list "
                 "mixing types is not priced", a->cp_comm, a->cp_other);
        return -1;
    }
    if (ap_cp_comm_parse(a->cp_comm, &m->run.cp_comm))
        return refuse("--cp-comm-type", a->cp_comm, "Transformer Engine's hierarchical "
                      "context parallelism (all-to-all inside the groups of "
                      "--hierarchical-context-parallel-sizes, the p2p ring across them) "
                      "is not priced; p2p, allgather and a2a are", err);
    return 0;
}

/* Module names Megatron-Core accepts for layers autopar does not build:
 * hyper-connections (mhc) and gated delta nets (gdn, gdn_norm_out). */
static int foreign_module(const char *v)
{
    return !strcmp(v, "mhc") || !strcmp(v, "gdn") || !strcmp(v, "gdn_norm_out");
}

/* --recompute-modules and --moe-layer-recompute, as Megatron-Core's
 * TransformerConfig reads them: the list (core_attn where left out) under
 * selective recomputation, ignored under full or none; an empty list
 * recomputes nothing, which prices as no recomputation;
 * --moe-layer-recompute (deprecated) makes the recomputation selective and
 * adds moe, and is refused under full. */
static int settle_modules(const audit *a, ap_megatron *m, char *err)
{
    if (a->moe_layer_recompute) {
        if (m->recompute == AP_RECOMPUTE_FULL)
            return refuse("--moe-layer-recompute", NULL, "with --recompute-granularity "
                          "full: Megatron-Core refuses the two together", err);
        m->recompute = AP_RECOMPUTE_SELECTIVE;
    }
    if (m->recompute != AP_RECOMPUTE_SELECTIVE)
        return 0;
    if (a->bad_module) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --recompute-modules %.64s: %s",
                 a->bad_module, foreign_module(a->bad_module)
                 ? "recomputes a layer autopar does not build (hyper-connections, "
                   "gated delta nets)"
                 : "unknown module (" AP_MODULE_NAMES "), which Megatron-Core refuses");
        return -1;
    }
    unsigned mods = a->modules_given ? a->modules : AP_MODULE_CORE_ATTN;
    if (a->moe_layer_recompute)
        mods |= AP_MODULE_MOE;
    if (!mods) {
        m->recompute = AP_RECOMPUTE_NONE;
        return 0;
    }
    if ((mods & AP_MODULE_MOE_ACT) && !a->grouped_gemm)
        return refuse("--recompute-modules", "moe_act", "needs --moe-grouped-gemm, as "
                      "Megatron-Core asserts", err);
    if ((mods & ~(unsigned)AP_MODULE_CORE_ATTN) && a->impl && !strcmp(a->impl, "local"))
        return refuse("--recompute-modules", NULL, "with --transformer-impl local: "
                      "autopar places the norms in modules as Transformer Engine's "
                      "layers build them", err);
    m->run.recompute_modules = ap_rc_modules_setting(mods);
    return 0;
}

static int settle_audit(const audit *a, ap_megatron *m, char *err)
{
    if (settle_moe(a, m, err) || settle_attention(a, m, err) || settle_fsdp(a, m, err))
        return -1;
    /* Megatron-LM's interleaved schedule runs pp micro-batches per virtual
     * stage in a row where the flag is left out, as priced. */
    if (a->mb_group && a->mb_group != m->pp) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: "
                 "--microbatch-group-size-per-virtual-pipeline-stage %d: autopar prices "
                 "the interleaved schedule with groups of pp=%d micro-batches (the "
                 "default)", a->mb_group, m->pp);
        return -1;
    }
    if (settle_cp_comm(a, m, err))
        return -1;
    if (settle_modules(a, m, err))
        return -1;
    /* Megatron-LM reads --fp8-recipe only under --fp8-format. */
    if (!m->run.fp8)
        m->run.fp8_recipe = AP_FP8_DELAYED;
    if (a->cuda_graph && m->recompute == AP_RECOMPUTE_FULL && !a->graph_iteration)
        return refuse("--cuda-graph-impl", ap_cuda_graph_name(a->cuda_graph), "with "
                      "--recompute-granularity full: Megatron-Core allows full "
                      "recomputation under CUDA graphs only with --cuda-graph-scope "
                      "full_iteration", err);
    m->run.cuda_graph = a->cuda_graph;
    if (m->shape.experts)
        m->shape.top_k = a->topk ? a->topk : 2;
    m->shape.moe_ffn = a->moe_ffn;
    m->shape.shared_ffn = a->shared_ffn;
    m->shape.norm = !a->norm ? 0 : !strcmp(a->norm, "RMSNorm") ? 2 : 1;
    /* learnable adds a parameter per head (GPT-OSS's sinks); off-by-one a
     * fixed offset, which costs nothing priced. */
    m->shape.sinks = !a->softmax ? 0 : !strcmp(a->softmax, "learnable") ? 1 : -1;
    if (a->moe_freq && unquote_into(a->moe_freq, m->shape.moe_freq, sizeof m->shape.moe_freq))
        return refuse("--moe-layer-freq", a->moe_freq, "is empty or longer than autopar "
                      "reads (255 characters)", err);
    if (m->shape.experts) {
        m->shape.route_groups = a->groups;
        m->shape.route_group_topk = a->group_topk;
    }
    /* Megatron-LM's validate_args turns the bias-GELU fusion off itself
     * under --disable-bias-linear, so the flag changes nothing there; with
     * biases it runs bias and GELU unfused. */
    if (a->no_gelu_fusion && !m->shape.no_bias)
        return refuse("--no-bias-gelu-fusion", NULL, "runs bias and GELU unfused, which "
                      "keeps more for backward than the fused kernel priced", err);
    /* TransformerConfig raises at an expert bias without sigmoid scores,
     * whether or not the model has experts. */
    if (a->expert_bias && !(a->score && !strcmp(a->score, "sigmoid")))
        return refuse("--moe-router-enable-expert-bias", NULL, "needs "
                      "--moe-router-score-function sigmoid, as Megatron-Core raises without "
                      "it (its expert bias goes with sigmoid scores only)", err);
    if (m->shape.experts) {
        m->shape.route_score = !a->score ? 0 : !strcmp(a->score, "sigmoid") ? 2 : 1;
        m->shape.route_pre_softmax = a->pre_softmax;
        m->shape.route_bias = a->expert_bias;
        m->shape.route_scale = a->route_scale;
        m->shape.route_on_input = a->on_input;
    }
    /* Megatron-Core's expert MLPs assert top-k 1 under it: one expert's
     * input carries the weight whole. */
    if (a->on_input && m->shape.experts && m->shape.top_k != 1)
        return refuse("--moe-apply-probs-on-input", NULL, "needs --moe-router-topk 1, as "
                      "Megatron-Core's expert MLPs assert (one expert takes the weighted "
                      "input)", err);
    return 0;
}

/* --position-embedding-type and --rotary-percent into m->shape: 1 when
 * `tok` was one, 0 when not, -1 with err set for a bad value. Megatron-LM's
 * mrope and relative embeddings are not built by autopar. */
static int position_flag(const char *tok, char **save, ap_megatron *m, int *legacy_rope,
                         char *err)
{
    if (!strcmp(tok, "--use-rotary-position-embeddings")) {
        *legacy_rope = 1;
        return 1;
    }
    if (!strcmp(tok, "--position-embedding-type")) {
        const char *v;
        if (choice_into(tok, save, &v, "learned_absolute rope mrope relative none", err) < 0)
            return -1;
        if (!strcmp(v, "mrope") || !strcmp(v, "relative"))
            return refuse(tok, v, "builds position embeddings autopar does not (it builds "
                          "learned_absolute, rope and none)", err);
        m->shape.positions = !strcmp(v, "learned_absolute") ? 1 : !strcmp(v, "rope") ? 2 : 3;
        return 1;
    }
    if (strcmp(tok, "--rotary-percent"))
        return 0;
    char *v = flag_value(tok, save, err), *end;
    if (!v)
        return -1;
    double f = strtod(v, &end);
    if (*end || !(f > 0 && f <= 1)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" (a share of "
                 "each head above 0, at most 1)", tok, v);
        return -1;
    }
    m->shape.rotary_percent = f;
    return 1;
}

/* torchrun's own flags, which a pasted launch line carries before the
 * training script (torch.distributed.run; both spellings it takes). */
static const char *const torchrun_flags[] = {
    "--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank",
    "--master-addr", "--master_addr", "--master-port", "--master_port",
    "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
    "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf", "--max-restarts",
    "--max_restarts", "--monitor-interval", "--monitor_interval", "--start-method",
    "--start_method", "--log-dir", "--log_dir", "--redirects", "--tee", "--local-addr",
    "--local_addr", "--role"};

/* torchrun's --nproc-per-node words that count the devices it finds:
 * they say nothing of the GPUs here, which --gpus then gives. */
static int launcher_word(const char *v)
{
    return !strcmp(v, "auto") || !strcmp(v, "gpu") || !strcmp(v, "cpu") ||
           !strcmp(v, "xpu");
}

/* A launcher's count of processes or nodes, `v` of its flag `tok`, into
 * *slot: 1, or -1 with err set for a shell variable or a value that is no
 * count (`bad` says what it should be). */
static int launch_count(const char *who, const char *tok, const char *v, const char *bad,
                        int *slot, char *err)
{
    char flag[80], *end;
    snprintf(flag, sizeof flag, "%s %s", who, tok);
    if (shell_variable(flag, v, err))
        return -1;
    long x = strtol(v, &end, 10);
    if (*end || x < 1 || x > AP_MAX_GPUS) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s %.64s: %s", flag, v, bad);
        return -1;
    }
    *slot = (int)x;
    return 1;
}

/* A torchrun flag: its value read past, but for --nproc-per-node and
 * --nnodes, which say how many GPUs the line launches (a range of nodes,
 * elastic, says nothing). 1 when `tok` was one, 0 when not, -1 with err set
 * for a missing value. */
static int launcher_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    if (!strcmp(tok, "--standalone"))
        return 1;
    size_t i = 0, n = sizeof torchrun_flags / sizeof torchrun_flags[0];
    while (i < n && strcmp(tok, torchrun_flags[i]))
        i++;
    if (i == n)
        return 0;
    char *v = flag_value(tok, save, err);
    if (!v)
        return -1;
    int *slot = i < 2 ? &m->launcher.nproc : i == 2 ? &m->launcher.nnodes : NULL;
    if (!slot || (i < 2 && launcher_word(v)) || (i == 2 && strchr(v, ':')))
        return 1;
    return launch_count("torchrun", tok, v,
                        i < 2 ? "not a count of processes (1 or more, or auto, gpu, cpu)"
                              : "not a count of nodes (1 or more, or a range MIN:MAX)",
                        slot, err);
}

/* The deepspeed runner's own flags (deepspeed/launcher/runner.py; its
 * argparse spells them with underscores only): --num_gpus (its alias
 * --num_accelerators) processes per node and --num_nodes nodes are the
 * GPUs where both are given; a node count left out is the hostfile's,
 * which the line does not hold, so then neither says anything. The others
 * are read past, those of the first list with their value. Returns 1 when
 * `tok` was one, 0 when not, -1 with err set. */
static int deepspeed_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    static const char *const valued[] = {
        "--num_gpus", "--num_accelerators", "--num_nodes", "--hostfile", "--include",
        "--exclude", "--min_elastic_nodes", "--max_elastic_nodes", "--launcher",
        "--launcher_args", "--enable_each_rank_log", "--autotuning", "--comment",
        "--account", "--bind_core_list", "--ssh_port"};
    static const char *const switches[] = {
        "--module", "--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check",
        "--force_multi", "--save_pid", "--elastic_training", "--bind_cores_to_rank"};
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++)
        if (!strcmp(tok, switches[i]))
            return 1;
    size_t i = 0, n = sizeof valued / sizeof valued[0];
    while (i < n && strcmp(tok, valued[i]))
        i++;
    if (i == n)
        return 0;
    char *v = flag_value(tok, save, err);
    if (!v)
        return -1;
    int *slot = i < 2 ? &m->launcher.ds_gpus : i == 2 ? &m->launcher.ds_nodes : NULL;
    if (!slot)
        return 1;
    return launch_count("deepspeed", tok, v,
                        i < 2 ? "not a count of GPUs per node (1 or more)"
                              : "not a count of nodes (1 or more)",
                        slot, err);
}

/* A deepspeed line's GPUs, once the line is read: its --num_gpus x
 * --num_nodes, where both are given and no torchrun flag said otherwise. */
static void deepspeed_gpus(ap_megatron *m)
{
    if (!m->launcher.ds_gpus || !m->launcher.ds_nodes || m->launcher.nproc)
        return;
    m->launcher.nproc = m->launcher.ds_gpus;
    m->launcher.nnodes = m->launcher.ds_nodes;
    m->launcher.deepspeed = 1;
}

/* A torchrun line's training script, where it is one of Megatron-LM's
 * that trains another model than the GPT decoder the flags build here
 * (pretrain_gpt.py's; forks' own scripts, pretrain_llama.py and the like,
 * pass): BERT and T5 are bidirectional with heads of their own, the
 * vision-language, vision, retrieval and Mamba scripts add or replace
 * parts the graph does not have. 1 with err set for such a script. */
static int other_entry_point(const char *tok, char *err)
{
    static const char *const scripts[] = {
        "pretrain_bert.py", "pretrain_t5.py", "pretrain_vlm.py", "pretrain_retro.py",
        "pretrain_ict.py", "pretrain_mamba.py", "pretrain_vision_classify.py",
        "pretrain_vision_dino.py", "pretrain_vision_inpaint.py"};
    const char *base = strrchr(tok, '/');
    base = base ? base + 1 : tok;
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++)
        if (!strcmp(base, scripts[i])) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s trains another model than the "
                     "GPT decoder (pretrain_gpt.py's) that autopar builds from the flags "
                     "and prices", base);
            return 1;
        }
    return 0;
}

/* --first-last-layers-bf16 and the counts --num-layers-at-start-in-bf16
 * and --num-layers-at-end-in-bf16 (Megatron-LM's defaults, 1 each, where
 * left out; read only under the switch, as Megatron-Core's get_fp8_context
 * does). edge[0] is the switch, edge[1], edge[2] the counts, -1 where not
 * given. 1 when `tok` was one, 0 when not, -1 with err set for a bad value. */
static int bf16_edge_flag(const char *tok, char **save, int edge[3], char *err)
{
    if (!strcmp(tok, "--first-last-layers-bf16"))
        return edge[0] = 1;
    int k = !strcmp(tok, "--num-layers-at-start-in-bf16") ? 1
          : !strcmp(tok, "--num-layers-at-end-in-bf16") ? 2 : 0;
    return k ? int_value(tok, save, 0, &edge[k], err) : 0;
}

/* --tokenizer-type, kept for the vocabulary of a model the command line
 * states (ap_megatron_model), and whether --vocab-file is given, which the
 * default GPT2BPETokenizer needs: 1 when `tok` was one, 0 when not, -1
 * with err set for a missing or overlong value. */
static int tokenizer_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    if (!strcmp(tok, "--vocab-file")) {
        m->shape.vocab_file = 1;
        return flag_value(tok, save, err) ? 1 : -1;
    }
    /* Noted, and left to the flags read past. */
    if (strstr(tok, "tokenizer") && strcmp(tok, "--tokenizer-type"))
        m->shape.other_tokenizer = 1;
    if (strcmp(tok, "--tokenizer-type"))
        return 0;
    char *v = flag_value(tok, save, err);
    if (!v || shell_variable(tok, v, err))
        return -1;
    if (strlen(v) >= sizeof m->shape.tokenizer) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: \"%.64s...\" is no tokenizer "
                 "type", tok, v);
        return -1;
    }
    strcpy(m->shape.tokenizer, v);
    return 1;
}

/* --window-size L,R as Megatron-LM's tuple_type reads it ("L,R", or
 * "(L,R)" with the parentheses stripped): Transformer Engine's window, query
 * i meeting keys i - L to i + R, L = -1 unbounded. Into m->shape.window as
 * L + 1 keys, -1 for L = -1. Only a causal window is built: R above 0
 * would let a query meet keys after it. */
static int window_size(const char *tok, const char *v, ap_megatron *m, char *err)
{
    char buf[64], *p = buf, *end;
    if (unquote_into(v, buf, sizeof buf))
        buf[0] = 0;
    p += strspn(p, "()");
    size_t n = strlen(p);
    while (n && (p[n - 1] == '(' || p[n - 1] == ')'))
        p[--n] = 0;
    long l = strtol(p, &end, 10), r = 0;
    int ok = end != p && *end == ',';
    if (ok) {
        p = end + 1;
        r = strtol(p, &end, 10);
        ok = end != p && !*end && l >= -1 && l < (1L << 30) && r >= -1;
    }
    if (!ok) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" (L,R: the keys "
                 "before and after each query, L from -1, unbounded, to 2^30; \"4095,0\" for "
                 "4,096 keys)", tok, v);
        return -1;
    }
    if (r != 0) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s %.64s: R = %ld%s lets each query "
                 "meet keys after it, which causal attention does not; autopar builds causal "
                 "sliding windows only (R = 0, as Transformer Engine takes them under GPT's "
                 "causal mask): give --window-size %ld,0", tok, v, r, r < 0 ? " (unbounded)"
                 : "", l);
        return -1;
    }
    m->shape.window = l < 0 ? -1 : (int)l + 1;
    return 1;
}

/* --window-size and --window-attn-skip-freq into m->shape: 1 when `tok`
 * was one, 0 when not, -1 with err set for a missing or bad value. The
 * skip frequency's layers are read against the model's (check_windows,
 * ap_megatron_model). */
static int window_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    int size = !strcmp(tok, "--window-size");
    if (!size && strcmp(tok, "--window-attn-skip-freq"))
        return 0;
    char *v = flag_value(tok, save, err);
    if (!v || shell_variable(tok, v, err))
        return -1;
    if (size)
        return window_size(tok, v, m, err);
    if (unquote_into(v, m->shape.window_freq, sizeof m->shape.window_freq))
        return refuse(tok, v, "is empty or longer than autopar reads (255 characters)", err);
    return 1;
}

/* --no-rope-freq into m->shape.nope_freq, read against the model's layers
 * later (check_nope, ap_megatron_model): 1 when `tok` was it, 0 when not,
 * -1 with err set for a missing or bad value. */
static int nope_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    if (strcmp(tok, "--no-rope-freq"))
        return 0;
    char *v = flag_value(tok, save, err);
    if (!v || shell_variable(tok, v, err))
        return -1;
    if (unquote_into(v, m->shape.nope_freq, sizeof m->shape.nope_freq))
        return refuse(tok, v, "is empty or longer than autopar reads (255 characters)", err);
    return 1;
}

/* --rotary-base, --norm-epsilon (--layernorm-epsilon before Megatron-LM
 * renamed it), --rope-scaling-factor, --glu-linear-offset and
 * --activation-func-clamp-value into m->shape: 1 when `tok` was one, 0
 * when not, -1 with err set for a bad value. They change no cost; the
 * exports of the script's own model state them. Megatron-LM's parser
 * takes the base as an integer; an offset of 0 is its default, stated. */
static int numerics_flag(const char *tok, char **save, ap_megatron *m, char *err)
{
    static const struct {
        const char *flag, *range;
        double lo, hi;
        int integer;
    } flags[] = {{"--rotary-base", "an integer from 1 to 10^12", 0, 1e12, 1},
                 {"--norm-epsilon", "a number above 0, at most 1", 0, 1, 0},
                 {"--layernorm-epsilon", "a number above 0, at most 1", 0, 1, 0},
                 {"--rope-scaling-factor", "a number above 0, at most 10^6", 0, 1e6, 0},
                 {"--glu-linear-offset", "a number from 0 to 10^6", -1e-300, 1e6, 0},
                 {"--activation-func-clamp-value", "a number above 0, at most 10^6", 0,
                  1e6, 0}};
    double *slot[] = {&m->shape.rope_base, &m->shape.norm_eps, &m->shape.norm_eps,
                      &m->shape.rope_factor, &m->shape.glu_offset, &m->shape.glu_clamp};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (strcmp(tok, flags[i].flag))
            continue;
        char *v = flag_value(tok, save, err), *end;
        if (!v || shell_variable(tok, v, err))
            return -1;
        double f = flags[i].integer ? (double)strtoll(v, &end, 10) : strtod(v, &end);
        if (!*v || *end || !(f > flags[i].lo && f <= flags[i].hi)) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" (%s)", tok,
                     v, flags[i].range);
            return -1;
        }
        *slot[i] = f;
        m->shape.glu_given |= i == 4 ? 1 : i == 5 ? 2 : 0;
        return 1;
    }
    return 0;
}

/* What validate_args asserts of the interleaved schedule's flags: one of
 * the two ways to ask for it, a pipeline to interleave, more than two
 * stages where the sends do not overlap (two ranks would exchange several
 * sends in one batch), and a parameter gather beside the optimizer step
 * only under it. */
static int interleaving_asserts(const ap_megatron *m, long layers_per_chunk, int vpp_flag,
                                int no_p2p_overlap, int gather_with_step, char *err)
{
    int interleaved = layers_per_chunk || (vpp_flag && m->vpp > 1) || m->layout[0];
    const char *why = NULL;
    if (layers_per_chunk && vpp_flag)
        why = "--num-layers-per-virtual-pipeline-stage with "
              "--num-virtual-stages-per-pipeline-rank: Megatron-LM takes no more than one";
    else if (interleaved && !m->layout[0] && m->pp == 1)
        why = "interleaving (virtual pipeline stages) with --pipeline-model-parallel-size 1: "
              "Megatron-LM's interleaved schedule needs pp > 1";
    else if (interleaved && no_p2p_overlap && m->pp == 2)
        why = "--no-overlap-p2p-communication with interleaving over 2 pipeline stages: "
              "Megatron-LM asserts pp > 2 there";
    else if (gather_with_step && !interleaved)
        why = "--overlap-param-gather-with-optimizer-step without interleaving: "
              "Megatron-LM supports it only with the interleaved schedule";
    if (!why)
        return AP_OK;
    snprintf(err, AP_ERR_LEN, "--megatron-args: %s (validate_args asserts it)", why);
    return AP_EINPUT;
}

/* The positions a line builds, as the messages name them. */
static const char *position_source(const ap_megatron *m)
{
    switch (m->shape.positions) {
    case 1: return "learned absolute positions (--position-embedding-type learned_absolute)";
    case 2: return "rotary positions (--position-embedding-type rope)";
    case 3: return "no positions (--position-embedding-type none)";
    default: return "learned absolute positions (no --position-embedding-type, "
                    "Megatron-LM's default)";
    }
}

/* validate_args lists --max-position-embeddings in required_args and
 * asserts max_position_embeddings >= seq_length, whatever the position
 * type (arguments.py at 000c4ac2, 97d9a508 and 00129014 alike), though
 * only learned positions build a table from it. Checked for a model the
 * flags state and build (g->source AP_MEGATRON_SOURCE), whose learned
 * positions ap_megatron_model has checked already; with MODEL the flag is
 * read past (docs/megatron.md). */
static int position_table_asserts(const ap_graph *g, const ap_megatron *m, char *err)
{
    if (strcmp(g->source, AP_MEGATRON_SOURCE) || !ap_megatron_states_model(m))
        return AP_OK;
    if (!m->shape.max_pos) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s need --max-position-embeddings "
                 "(Megatron-LM's validate_args requires it whatever the position type)",
                 position_source(m));
        return AP_EINPUT;
    }
    if (m->shape.seq > m->shape.max_pos) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --seq-length is longer than "
                 "--max-position-embeddings (%d > %d), which Megatron-LM's validate_args "
                 "asserts against whatever the position type; give "
                 "--max-position-embeddings %d or more", m->shape.seq, m->shape.max_pos,
                 m->shape.seq);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Asserts of validate_args (arguments.py at 000c4ac2) on the flags as
 * the line gives them: at tensor-parallel size 1 it turns sequence
 * parallelism off and then asserts it for --tp-comm-overlap, so the run
 * stops whatever else is given (Megatron-LM of early 2024 asserted before
 * turning it off; autopar follows the audited order); --no-position-embedding
 * raises unless the positions are rotary (after --use-rotary-position-embeddings
 * has made them so), as in 97d9a508. */
static int validate_asserts(const ap_megatron *m, int no_position_embedding, char *err)
{
    if (m->run.tp_overlap && m->tp == 1) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --tp-comm-overlap at tensor-parallel "
                 "size 1: Megatron-LM's validate_args turns sequence parallelism off at tp 1 "
                 "and then asserts it (\"Tensor parallel communication/GEMM overlap can "
                 "happen only when sequence parallelism is enabled\"); leave "
                 "--tp-comm-overlap out, or give --tensor-model-parallel-size above 1 with "
                 "--sequence-parallel");
        return AP_EINPUT;
    }
    if (no_position_embedding && m->shape.positions != 2) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --no-position-embedding with %s: "
                 "Megatron-LM's validate_args raises \"--no-position-embedding is "
                 "deprecated, use --position-embedding-type\" unless the positions are "
                 "rotary; give --position-embedding-type none for none",
                 position_source(m));
        return AP_EINPUT;
    }
    return AP_OK;
}

/* --recompute-granularity as argparse takes it: choices=['full',
 * 'selective'] (arguments.py at 000c4ac2); no recomputation is the flag
 * left out. The spec's recompute also takes none. 1 with err set for
 * another value. */
static int granularity_choice(const char *v, char *err)
{
    if (!strcmp(v, "full") || !strcmp(v, "selective"))
        return 0;
    snprintf(err, AP_ERR_LEN, "--megatron-args: --recompute-granularity: bad value "
             "\"%.64s\" (full or selective, Megatron-LM's argparse choices; leave the flag "
             "out for no recomputation)", v);
    return 1;
}

/* What came before a word of the line that is not a flag: whether
 * argparse could take the word as a value. */
enum { AFTER_LAUNCH, AFTER_LOOSE, AFTER_SWITCH, AFTER_VALUE };

/* Where in its shell command a word stands: before any launcher, among
 * the launcher's own options, or after the training script, in the
 * argument list Megatron-LM's argparse reads. */
enum { IN_COMMAND, IN_LAUNCHER, IN_ARGV };

typedef struct {
    int after;        /* one of the above */
    int where;        /* IN_COMMAND, IN_LAUNCHER or IN_ARGV */
    const char *flag; /* the switch, or the flag whose value was read */
    int words, flags; /* words read, and flags ("--") among them */
    int first;        /* the word starts a shell command: the text's first, or
                         the first after a newline that ends one */
} line_state;

/* Notes the flag just read: read with or without the value it took, or
 * read past. A flag read past takes its values unread, unless it is a
 * switch in every Megatron-LM (megatron_flags.c): then a word after it is
 * one argparse refuses. Between a launcher and the script the flags are
 * the launcher's (srun's --profile takes a value), so none is a switch. */
static void after_flag(line_state *ls, const char *flag, int read_past, int took_value)
{
    int loose = read_past && (ls->where == IN_LAUNCHER || !ap_megatron_flag_switch(flag));
    ls->after = took_value ? AFTER_VALUE : loose ? AFTER_LOOSE : AFTER_SWITCH;
    ls->flag = flag;
}

/* Where the comment on the line ending at `nl` in the pasted text starts
 * (its '#'), or (size_t)-1 where the line holds none. `buf` is the text as
 * ap_megatron_shell_words left it, with every comment blanked: a '#' there
 * blanked is a comment's, one kept is inside a word (--data-path a#b). */
static size_t comment_on_line(const char *args, const char *buf, size_t nl)
{
    size_t start = nl;
    while (start > 0 && args[start - 1] != '\n')
        start--;
    for (size_t q = start; q < nl; q++)
        if (args[q] == '#' && buf[q] != '#')
            return q;
    return (size_t)-1;
}

/* The first newline between the word before, ending at `from`, and the
 * word at `to` that ends a shell command: one that no backslash continues.
 * A backslash inside a comment continues nothing, since bash reads a
 * comment to the end of its line and the newline after it ends the
 * command. `to` where none does. */
static size_t command_end(const char *args, const char *buf, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (args[i] != '\n')
            continue;
        size_t j = i;
        while (j > from && strchr(" \t\r", args[j - 1]))
            j--;
        if (j == from || args[j - 1] != '\\' || comment_on_line(args, buf, i) < j - 1)
            return i;
    }
    return to;
}

/* Whether a new shell command starts at the word `tok`, at `to` in the
 * text: a newline ended one before it (command_end's `end` lies before
 * `to`), or tok is a word that separates commands. */
static int new_command(size_t end, size_t to, const char *tok)
{
    static const char *const separators[] = {";", "&", "&&", "||", "|", "|&"};
    for (size_t i = 0; i < sizeof separators / sizeof separators[0]; i++)
        if (!strcmp(tok, separators[i]))
            return 1;
    return end < to;
}

/* A comment inside a backslash-continued launch: bash reads it to the end
 * of its line, backslash and all, and the newline after it ends the
 * command, so the flags on the lines after it never reach Megatron-LM
 * (bash runs the first of them as a command, which fails). A comment line
 * without a backslash ends it the same way. Refused where the command
 * ended held the training script and a flag follows; a bare list of
 * flags, or a script's array (which bash lets hold comments), has no
 * launch to cut. `nl` is the newline that ended the command. 1 with err
 * set. */
static int comment_cut(const char *args, const char *buf, size_t nl, const char *tok,
                       const line_state *ls, char *err)
{
    size_t q = comment_on_line(args, buf, nl), start = nl, end = nl;
    if (ls->where != IN_ARGV || strncmp(tok, "--", 2) || q == (size_t)-1)
        return 0;
    while (start > 0 && args[start - 1] != '\n')
        start--;
    while (end > q && strchr(" \t\r", args[end - 1]))
        end--;
    /* A comment after the line's flags, with no backslash, ends the
     * command as the line would without it: the comment is not the cause. */
    if (q > start + strspn(args + start, " \t") && args[end - 1] != '\\')
        return 0;
    int line = 1;
    for (size_t i = 0; i < q; i++)
        line += args[i] == '\n';
    snprintf(err, AP_ERR_LEN, "--megatron-args: line %d, \"%.*s\": a comment inside a "
             "continued command ends it (bash reads a comment to the end of its line, a "
             "backslash there included, and the newline after it ends the command), so "
             "%.64s and the flags after it never reach Megatron-LM; move the comment out "
             "of the command or delete the line",
             line, (int)(end - q < 120 ? end - q : 120), args + q, tok);
    return 1;
}

/* NAME=--flag as one word (a line pasted from a script, the quotes
 * lost): the flag never reaches Megatron-LM as written. Before the
 * training script the shell takes the word as an assignment, the flag as
 * the variable's value, and autopar does not expand variables; after it
 * the word is an argument, which argparse refuses. 1 with err set. */
static int assigned_flag_word(const char *tok, const line_state *ls, char *err)
{
    const char *flag = ap_megatron_assigned_flag(tok);
    if (!flag)
        return 0;
    if (ls->where == IN_ARGV)
        snprintf(err, AP_ERR_LEN, "--megatron-args: %.64s: after the training script this is "
                 "one argument, not an assignment, and Megatron-LM's argparse rejects it "
                 "(unrecognized arguments); write %.64s", tok, flag);
    else
        snprintf(err, AP_ERR_LEN, "--megatron-args: %.64s: a shell assignment; %.64s is the "
                 "variable's value, not an argument, so it would not reach Megatron-LM as "
                 "written (autopar does not expand variables); write %.64s among the flags",
                 tok, flag, flag);
    return 1;
}

/* Whether `k` is a key of the --megatron spec: set_key refuses any other
 * as unknown. */
static int spec_key(const char *k)
{
    ap_megatron scratch;
    char why[AP_ERR_LEN] = "";
    ap_megatron_default(&scratch);
    return set_key(&scratch, k, "", "", why) == AP_OK || !strstr(why, "unknown key");
}

/* The --megatron spec pasted here ("tp=4", "tp=4,pp=2"): to the shell an
 * assignment, but no script names a variable as the spec names its keys,
 * and reading past it would price Megatron-LM's defaults in its place.
 * 1 with err set for one. */
static int spec_word(const char *tok, char *err)
{
    char key[32];
    size_t n = strspn(tok, "abcdefghijklmnopqrstuvwxyz0123456789_");
    if (!n || n >= sizeof key || tok[n] != '=')
        return 0;
    memcpy(key, tok, n);
    key[n] = 0;
    if (!spec_key(key))
        return 0;
    const char *flag = NULL;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strcmp(flags[i].key, key))
            flag = flags[i].flag;
    int one = flag && !strchr(tok, ',') && tok[n + 1];
    snprintf(err, AP_ERR_LEN, "--megatron-args: %.64s: looks like a --megatron spec; use "
             "--megatron \"%.64s\"%s%s%s%.64s", tok, tok,
             one ? ", or Megatron-LM's flag here: " : " (--megatron-args takes Megatron-LM's "
             "flags)", one ? flag : "", one ? " " : "", one ? tok + n + 1 : "");
    return 1;
}

/* A flag typed with an en or em dash for "--" (a word processor's or a
 * chat app's doing), or a number with a minus sign for '-': argparse takes
 * the flag for a value and refuses it, and reading past it would price the
 * default in its place. 1 with err set. */
static int dash_word(const char *tok, char *err)
{
    const char *rest, *dash = ap_megatron_typographic_dash(tok, &rest);
    if (!dash || !*rest)
        return 0;
    int number = strchr("0123456789.", *rest) != NULL;
    snprintf(err, AP_ERR_LEN, "--megatron-args: %.64s: starts with %s, not ASCII \"%s\"; "
             "write %s%.64s", tok, dash, number ? "-" : "--", number ? "-" : "--", rest);
    return 1;
}

/* A word that is no flag, no flag's value and no part of the launch:
 * argparse refuses it, so it cannot be read past. Sets err, returns 1. */
static int stray_word(const char *tok, const line_state *ls, char *err)
{
    char two[AP_FLAG_NAME_LEN + 3];
    snprintf(two, sizeof two, "--%s", tok);
    if (strlen(tok) <= AP_FLAG_NAME_LEN && ap_megatron_flag_known(two))
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: Megatron-LM's flag without its "
                 "dashes; write %s", tok, two);
    else if (ls->after == AFTER_SWITCH)
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s %.64s: %s is a switch and takes no "
                 "value; Megatron-LM's argparse rejects '%.64s' (unrecognized arguments): "
                 "give %s alone to turn it on, or leave it out", ls->flag, tok, ls->flag,
                 tok, ls->flag);
    else if (ls->after == AFTER_VALUE)
        snprintf(err, AP_ERR_LEN, "--megatron-args: %.64s: not a flag, and %s before it "
                 "takes one value, already read; Megatron-LM's argparse rejects it "
                 "(unrecognized arguments)", tok, ls->flag);
    else
        snprintf(err, AP_ERR_LEN, "--megatron-args: %.64s: not a Megatron-LM flag, nor a "
                 "flag's value, nor a word of the launch (torchrun, python, deepspeed and "
                 "their options, the .py script, NAME=value); give the command line itself "
                 "(`bash -x` prints the one a script runs)", tok);
    return 1;
}

/* A word that does not start with "--": the value of a flag read past
 * (whose values autopar does not count: --data-path takes many), a shell
 * variable shell_expansion let through, a word of the launch around the
 * flags, or refused. 1 with err set when refused. */
static int plain_word(const char *tok, line_state *ls, char *err)
{
    /* At the start of a command: the prefix `bash -x` prints before each
     * command it runs ("+", "++" a level down), part of the launch; and
     * the builtin set (a script's set -e, an export's set -f), whose words
     * are its own options. Anywhere else argparse would take either word
     * for an argument. */
    if (ls->first && (!tok[strspn(tok, "+")] || !strcmp(tok, "set"))) {
        ls->after = tok[0] == '+' ? AFTER_LAUNCH : AFTER_LOOSE;
        return 0;
    }
    if (dash_word(tok, err) || spec_word(tok, err) || assigned_flag_word(tok, ls, err))
        return 1;
    /* The words after the training script (2) are Megatron-LM's; those
     * between a launcher (1) and it are the launcher's. */
    int launch = ap_megatron_launch_word(tok);
    if (launch == 2)
        ls->where = IN_ARGV;
    else if (launch && ls->where == IN_COMMAND)
        ls->where = IN_LAUNCHER;
    if (tok[0] == '$' || ls->after == AFTER_LOOSE) {
        ls->after = AFTER_LOOSE;
        return 0;
    }
    /* A one-dash option is the launcher's (python -m), not one after
     * Megatron-LM's flags, which argparse would refuse. */
    ap_word_kind k = ap_megatron_word_kind(tok);
    if (k == AP_WORD_OTHER || (tok[0] == '-' && ls->after != AFTER_LAUNCH))
        return stray_word(tok, ls, err);
    ls->after = k == AP_WORD_LEADS ? AFTER_LOOSE : AFTER_LAUNCH;
    return 0;
}

/* A line that states nothing would price Megatron-LM's defaults unasked,
 * as a key-less --megatron spec would. AP_EINPUT with err set for one. */
static int empty_line(const line_state *ls, const char *args, const char *commented,
                      char *err)
{
    if (ls->flags)
        return AP_OK;
    if (!ls->words && commented[0])
        snprintf(err, AP_ERR_LEN, "--megatron-args: every flag is in a shell comment "
                 "('#' to the end of its line): %.400s", commented);
    else if (ls->words)
        snprintf(err, AP_ERR_LEN, "--megatron-args: \"%.64s\": no flag; give Megatron-LM's "
                 "flags, as --tensor-model-parallel-size 8", args + strspn(args, " \t\n"));
    else
        snprintf(err, AP_ERR_LEN, "--megatron-args: empty; give Megatron-LM's flags, as "
                 "--tensor-model-parallel-size 8");
    return AP_EINPUT;
}

int ap_megatron_parse_args(const char *args, ap_megatron *m, char *err)
{
    char buf[32768], who[80];
    if (strlen(args) >= sizeof buf) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: too long");
        return AP_EINPUT;
    }
    strcpy(buf, args);
    ap_megatron_shell_words(buf, m->commented, sizeof m->commented);
    m->from_args = 1;
    /* Megatron's defaults without the flags */
    m->zero = AP_ZERO_NONE;
    m->overlap_grad = 0;
    m->overlap_param = 0;
    long layers_per_chunk = 0;
    int groups = 0, gqa = 0, vpp_flag = 0, legacy_rope = 0, no_async = 0, *shape;
    int no_p2p_overlap = 0, gather_with_step = 0, num_buckets = 0, no_position_embedding = 0;
    rc_flags rcf = {0, 0, 0};
    legacy_flags lg = {0};
    int gbs_given = 0, edge[3] = {0, -1, -1};
    double drop[2] = {-1, -1}; /* hidden, attention; -1: not given */
    ce_flags ce = {0, AP_CE_NATIVE};
    grad_flags gf = {0, 0, 0, 0, NULL};
    opt_flags of = {0, 0, {NULL, NULL, NULL}};
    audit au = {0};
    line_state ls = {AFTER_LAUNCH, IN_COMMAND, NULL, 0, 0, 1};
    char *save = NULL;
    const char *prev = NULL;
    for (char *tok = strtok_r(buf, " \t\n", &save); tok;
         prev = tok, tok = strtok_r(NULL, " \t\n", &save)) {
        int known = 0, read_past = 0;
        const char *mark = save;
        if (shell_expansion(tok, prev, args, err) || one_dash(tok, err))
            return AP_EINPUT;
        /* Read past below, but validate_args checks them against the
         * schedule (interleaving_asserts). */
        no_p2p_overlap |= !strcmp(tok, "--no-overlap-p2p-communication");
        gather_with_step |= !strcmp(tok, "--overlap-param-gather-with-optimizer-step");
        num_buckets |= !strcmp(tok, "--ddp-num-buckets");
        if (other_entry_point(tok, err))
            return AP_EINPUT;
        size_t to = (size_t)(tok - buf);
        size_t end = command_end(args, buf, prev ? (size_t)(prev - buf) + strlen(prev) : 0, to);
        if (end < to && comment_cut(args, buf, end, tok, &ls, err))
            return AP_EINPUT;
        ls.first = !prev || end < to;
        if (new_command(end, to, tok))
            ls.where = IN_COMMAND;
        ls.words++;
        if (strncmp(tok, "--", 2)) {
            if (plain_word(tok, &ls, err))
                return AP_EINPUT;
            continue;
        }
        ls.flags++;
        for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
            if (strcmp(tok, flags[i].flag))
                continue;
            char *v = flag_value(tok, &save, err);
            if (!v || shell_variable(tok, v, err) ||
                (!strcmp(flags[i].key, "recompute") && granularity_choice(v, err)))
                return AP_EINPUT;
            snprintf(who, sizeof who, "--megatron-args: %s", tok);
            int rc = set_key(m, flags[i].key, v, who, err);
            if (rc)
                return rc;
            vpp_flag |= !strcmp(flags[i].key, "vpp");
            lg.tp_given |= !strcmp(flags[i].key, "tp");
            lg.mbs_given |= !strcmp(flags[i].key, "mbs");
            gbs_given |= !strcmp(flags[i].key, "gbs");
            known = 1;
        }
        if (!known && (known = fp8_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known)
            known = param_gather_flag(tok, m);
        if (!known)
            known = schedule_flag(tok, m);
        if (!known && (known = tp_overlap_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = recompute_flag(tok, &save, m, &rcf, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = legacy_flag(tok, &save, &lg, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = dropout_flag(tok, &save, drop, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = cross_entropy_flag(tok, &save, &ce, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = grad_flag(tok, &save, &gf, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = opt_flag(tok, &save, &of, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = audit_flag(tok, &save, &au, err)) < 0)
            return AP_EINPUT;
        if (!known && (shape = shape_slot(m, tok, &groups)) &&
            (known = count_value(tok, &save, shape, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = mtp_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = position_flag(tok, &save, m, &legacy_rope, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = tokenizer_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = launcher_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = deepspeed_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = bf16_edge_flag(tok, &save, edge, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = window_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = nope_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (!known && (known = numerics_flag(tok, &save, m, err)) < 0)
            return AP_EINPUT;
        if (known) {
            after_flag(&ls, tok, 0, save != mark);
            continue;
        }
        if ((shape = shape_switch(m, tok))) {
            *shape = 1;
        } else if (!strcmp(tok, "--sequence-parallel")) {
            m->sp = 1;
        } else if (!strcmp(tok, "--use-distributed-optimizer")) {
            m->zero = AP_ZERO_1;
        } else if (!strcmp(tok, "--fp8-param-gather")) {
            m->run.fp8_param_gather = 1;
        } else if (!strcmp(tok, "--overlap-grad-reduce")) {
            m->overlap_grad = 1;
        } else if (!strcmp(tok, "--group-query-attention")) {
            gqa = 1;
        } else if (!strcmp(tok, "--no-async-tensor-model-parallel-allreduce")) {
            no_async = 1;
        } else if (!strcmp(tok, "--no-position-embedding")) {
            no_position_embedding = 1;
        } else if (!strcmp(tok, "--account-for-embedding-in-pipeline-split")) {
            m->account_embedding = 1;
        } else if (!strcmp(tok, "--account-for-loss-in-pipeline-split")) {
            m->account_loss = 1;
        } else if (!strcmp(tok, "--num-layers-per-virtual-pipeline-stage")) {
            char *v = flag_value(tok, &save, err), *end;
            if (!v)
                return AP_EINPUT;
            layers_per_chunk = strtol(v, &end, 10);
            if (*end || layers_per_chunk < 1 || layers_per_chunk > (1L << 30)) {
                snprintf(err, AP_ERR_LEN, "--megatron-args: %s: bad value \"%.64s\" "
                         "(an integer from 1 to 2^30)", tok, v);
                return AP_EINPUT;
            }
        } else {
            /* Other flags (optimizer, data, logging, the model's
             * structure: --swiglu, --normalization) change neither the
             * layout, the shapes checked nor the price (docs/megatron.md),
             * and are read past; one that no Megatron-LM has is noted. */
            note_unknown(m, tok);
            read_past = 1;
        }
        after_flag(&ls, tok, read_past, save != mark);
    }
    if (empty_line(&ls, args, m->commented, err))
        return AP_EINPUT;
    deepspeed_gpus(m);
    /* --num-query-groups defaults to 1 (multi-query attention) under
     * --group-query-attention, as in Megatron-LM's parser. */
    m->shape.groups = gqa ? (groups ? groups : 1) : 0;
    /* Megatron-LM (2022 to 2024) turned the asynchronous all-reduce off
     * with it; under sequence parallelism the reduce-scatter and re-gather
     * stayed asynchronous, so the flag changed nothing there. */
    if (no_async && !m->sp)
        m->run.tp_sync = 1;
    if (legacy_rope)
        m->shape.positions = 2;
    /* A dropout flag given says the command line is Megatron-LM's whole
     * one, so the other is Megatron-LM's default, 0.1; so does a flag of
     * Megatron-LM before 2022, and a line that states the model as a whole
     * script does (ap_megatron_states_model), whose run has both at 0.1
     * where it leaves them out. */
    if (drop[0] >= 0 || drop[1] >= 0 || legacy_line(&lg) || ap_megatron_states_model(m))
        m->shape.dropout = (drop[0] < 0 ? 0.1 : drop[0]) > 0 ||
                           (drop[1] < 0 ? 0.1 : drop[1]) > 0 ? 1 : -1;
    if (legacy_rules(m, &lg, &rcf, err) || recompute_rules(m, &rcf, err) ||
        validate_asserts(m, no_position_embedding, err))
        return AP_EINPUT;
    /* Without --global-batch-size Megatron-LM trains mbs * dp sequences a
     * step (one micro-batch per replica), which check_config sets once dp
     * is known. */
    if (!gbs_given)
        m->gbs = 0;
    /* Megatron-LM asserts this in validate_args: the layout says how many
     * virtual stages there are. */
    if (m->layout[0] && (layers_per_chunk || vpp_flag)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --pipeline-model-parallel-layout "
                 "with %s: Megatron-LM takes no more than one of them (the layout "
                 "gives the virtual stages)", layers_per_chunk
                 ? "--num-layers-per-virtual-pipeline-stage"
                 : "--num-virtual-stages-per-pipeline-rank");
        return AP_EINPUT;
    }
    if (interleaving_asserts(m, layers_per_chunk, vpp_flag, no_p2p_overlap,
                             gather_with_step, err))
        return AP_EINPUT;
    /* Megatron-LM's get_model asserts it: --ddp-num-buckets sets the bucket
     * size itself, the rank's parameters over N. */
    if (num_buckets && m->run.ddp_bucket) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --ddp-num-buckets with --ddp-bucket-size: "
                 "Megatron-LM asserts \"Cannot specify both --ddp-num-buckets and "
                 "--ddp-bucket-size\"; give one");
        return AP_EINPUT;
    }
    /* Megatron-LM asserts this in validate_args; it counts the embedding
     * and the loss as layers there when told to. */
    if (layers_per_chunk && (m->first || m->last)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --num-layers-per-virtual-pipeline-stage "
                 "assumes even stages; with %s give --num-virtual-stages-per-pipeline-rank",
                 "--decoder-first/last-pipeline-num-layers");
        return AP_EINPUT;
    }
    /* Each sets the MLP's activation in Megatron-LM's
     * core_transformer_config_from_args, which builds one: two would price
     * a model it does not build. */
    if (m->shape.swiglu + m->shape.quick_geglu + m->shape.squared_relu > 1) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s: each sets the MLP's activation; "
                 "give one", m->shape.squared_relu && m->shape.swiglu ? "--swiglu with "
                 "--squared-relu" : m->shape.squared_relu ? "--quick-geglu with "
                 "--squared-relu" : "--swiglu with --quick-geglu");
        return AP_EINPUT;
    }
    /* Each norms the queries and keys: both would price two norms where
     * a model has one. */
    if (m->shape.qk_l2 && m->shape.qk_norm) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --qk-l2-norm with --qk-layernorm: each "
                 "norms the queries and keys (--qk-l2-norm without a weight, as Llama 4; "
                 "--qk-layernorm with one, as Qwen3); give one");
        return AP_EINPUT;
    }
    if (ce.fusion)
        m->run.cross_entropy = ce.impl;
    m->shape.half = gf.bf16 || gf.fp16;
    m->shape.fp16 = gf.fp16;
    if (edge[0]) {
        m->bf16_first = edge[1] < 0 ? 1 : edge[1];
        m->bf16_last = edge[2] < 0 ? 1 : edge[2];
    }
    if (grad_rule(&gf, m, err) || opt_rule(&of, m, gf.bf16, err) || ddp_rule(&lg, m, err))
        return AP_EINPUT;
    if (layers_per_chunk) /* resolved against the layer count later */
        m->vpp = (int)-layers_per_chunk;
    if (settle_audit(&au, m, err))
        return AP_EINPUT;
    /* Megatron-LM had no fused attention before 2023: its attention kept
     * the s x s scores (flash-attn came with --use-flash-attn). */
    if (legacy_line(&lg) && !m->shape.flash)
        m->shape.flash = -2;
    return AP_OK;
}

/* tp*pp*cp (and dp) checked against the GPUs one factor at a time, so that
 * no product of sizes up to 2^30 overflows. */
static int fits_gpus(const ap_megatron *m, int gpus, int with_dp)
{
    long p = 1;
    const int f[] = {m->tp, m->pp, m->cp, with_dp ? m->dp : 1};
    for (int i = 0; i < 4; i++) {
        p *= f[i];
        if (p > gpus)
            return 0;
    }
    return 1;
}

/* The layers of the stages between the first and the last: what first and
 * last leave, split evenly. */
static int middle_stages(const ap_megatron *m)
{
    return m->pp - (m->first > 0) - (m->last > 0);
}

static int middle_layers(const ap_megatron *m, int L)
{
    int n = middle_stages(m);
    return n > 0 ? (L - m->first - m->last) / n : 0;
}

/* Megatron-LM's rules for --decoder-first/last-pipeline-num-layers: two
 * stages at least, the middle stages split what is left evenly, and under
 * interleaving each stage's layers divide into its virtual stages. */
static int check_uneven(const ap_megatron *m, int L, char *err)
{
    char who[96];
    snprintf(who, sizeof who, "first=%d,last=%d (--decoder-first/last-pipeline-num-layers)",
             m->first, m->last);
    if (m->pp < 2) {
        snprintf(err, AP_ERR_LEN, "%s: uneven stages need pp >= 2, not pp=%d", who, m->pp);
        return AP_EINPUT;
    }
    long rest = (long)L - m->first - m->last;
    int mid = middle_stages(m);
    if (mid == 0 && rest != 0) {
        snprintf(err, AP_ERR_LEN, "%s: with pp=2 first and last must add up to the %d "
                 "layers", who, L);
        return AP_EINPUT;
    }
    if (mid > 0 && (rest < mid || rest % mid)) {
        if (rest < mid)
            snprintf(err, AP_ERR_LEN, "%s: the %d layers leave fewer than one for each of "
                     "the %d middle stages", who, L, mid);
        else
            snprintf(err, AP_ERR_LEN, "%s: the %ld layers left do not split evenly over "
                     "the %d middle stages of pp=%d", who, rest, mid, m->pp);
        return AP_EINPUT;
    }
    const int n[] = {m->first, m->last, middle_layers(m, L)};
    const char *what[] = {"first stage's", "last stage's", "middle stages'"};
    for (int i = 0; i < 3; i++)
        if (n[i] && n[i] % m->vpp) {
            snprintf(err, AP_ERR_LEN, "%s: the %s %d layers do not divide into vpp=%d "
                     "virtual stages", who, what[i], n[i], m->vpp);
            return AP_EINPUT;
        }
    return AP_OK;
}

/* Megatron-LM's split counting the embedding and the loss as layers: the
 * L + e + l slots divide evenly over the pp*vpp chunks, and the first and
 * the last stage give one slot each to the embedding and the loss. A stage
 * left with the embedding alone is not modelled (the plan's stages hold
 * layers). */
static int check_accounted(const ap_megatron *m, int L, char *err)
{
    const char *who = "account_embedding/account_loss (--account-for-embedding/"
                      "loss-in-pipeline-split)";
    if (m->first || m->last) {
        snprintf(err, AP_ERR_LEN, "%s: cannot be combined with first=N,last=N "
                 "(--decoder-first/last-pipeline-num-layers)", who);
        return AP_EINPUT;
    }
    long slots = (long)L + m->account_embedding + m->account_loss;
    long chunks = (long)m->pp * m->vpp;
    if (slots % chunks) {
        snprintf(err, AP_ERR_LEN, "%s: pp*vpp = %ld does not divide the %d layers "
                 "plus the %s counted as layers (%ld)", who, chunks, L,
                 m->account_embedding && m->account_loss ? "embedding and the loss"
                 : m->account_embedding ? "embedding" : "loss", slots);
        return AP_EINPUT;
    }
    if (m->pp > 1 && slots / m->pp < 2) {
        snprintf(err, AP_ERR_LEN, "%s: one slot per stage leaves the first or last "
                 "stage without a layer, which is not modelled", who);
        return AP_EINPUT;
    }
    return AP_OK;
}

static int accounted(const ap_megatron *m)
{
    return m->pp > 1 && (m->account_embedding || m->account_loss);
}

static int check_split(const ap_megatron *m, int L, char *err)
{
    if (m->layout[0]) /* check_layout's */
        return AP_OK;
    if (m->vpp > 1 && m->pp == 1) {
        snprintf(err, AP_ERR_LEN, "vpp=%d with pp=1: the interleaved schedule needs a "
                 "pipeline (pp > 1), as Megatron-LM asserts", m->vpp);
        return AP_EINPUT;
    }
    if (accounted(m))
        return check_accounted(m, L, err);
    if (m->first || m->last)
        return check_uneven(m, L, err);
    long chunks = (long)m->pp * m->vpp;
    if (L % chunks) {
        snprintf(err, AP_ERR_LEN, "pp*vpp = %ld does not divide the %d layers%s",
                 chunks, L, m->pp > 1 ? " (first=N,last=N, or Megatron-LM's "
                 "--decoder-first-pipeline-num-layers and "
                 "--decoder-last-pipeline-num-layers, give the first and last stage "
                 "their own count)" : "");
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Layers of stage s under a checked configuration. */
static int stage_layers(const ap_megatron *m, int L, int s)
{
    if (accounted(m)) {
        int per = (L + m->account_embedding + m->account_loss) / m->pp;
        return per - (s == 0 ? m->account_embedding : 0) -
               (s == m->pp - 1 ? m->account_loss : 0);
    }
    if (s == 0 && m->first)
        return m->first;
    if (s == m->pp - 1 && m->last)
        return m->last;
    return m->first || m->last ? middle_layers(m, L) : L / m->pp;
}

#define LAYOUT_WHO "layout (--pipeline-model-parallel-layout)"

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int layout_fault(char *err, const ap_megatron *m, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, AP_ERR_LEN, "%s \"%.64s\": %s", LAYOUT_WHO, m->layout, msg);
    return AP_EINPUT;
}

/* What Megatron-Core's validate_layer_layout asserts (the embedding first
 * and the loss last, once each; the model's layer count), and what autopar
 * models: the embedding on the first virtual stage and the loss on the
 * last (a plan's first stage carries the embedding's ops, its last the
 * head's), a layer or more on every pipeline rank, no MTP layer. */
static int check_layout_places(const ap_megatron *m, const ap_pipe_layout *lay, int L,
                               int mtp, char *err)
{
    if (lay->embeddings != 1)
        return layout_fault(err, m, "needs the embedding 'E' exactly once, not %d times",
                            lay->embeddings);
    if (lay->losses != 1)
        return layout_fault(err, m, "needs the loss 'L' exactly once, not %d times",
                            lay->losses);
    if (!lay->embedding_first)
        return layout_fault(err, m, "its first layer must be the embedding 'E'");
    if (!lay->loss_last)
        return layout_fault(err, m, "its last layer must be the loss 'L'");
    if (lay->mtp != mtp)
        return layout_fault(err, m, "places %d multi-token-prediction layers ('m'); "
                            "the model has %d (--mtp-num-layers or --mtp-layers builds "
                            "them)", lay->mtp, mtp);
    if (lay->t_after_m)
        return layout_fault(err, m, "places a transformer layer after an MTP layer "
                            "('m'), which Megatron-LM refuses");
    if (lay->mtp_last != lay->mtp)
        return layout_fault(err, m, "puts MTP layers ('m') before the last virtual "
                            "stage; autopar runs them with the head, on the last "
                            "stage's last chunk");
    if (lay->total != L)
        return layout_fault(err, m, "places %d transformer layers ('t'); the model "
                            "has %d", lay->total, L);
    if (lay->embedding_at != 0)
        return layout_fault(err, m, "puts the embedding on virtual stage %d, after "
                            "empty ones; autopar prices it on the first stage's first "
                            "chunk", lay->embedding_at);
    if (lay->loss_at != lay->nstages - 1)
        return layout_fault(err, m, "puts the loss on virtual stage %d of %d, before "
                            "empty ones; autopar prices it on the last stage's last chunk",
                            lay->loss_at, lay->nstages);
    return AP_OK;
}

/* m's layout, parsed and checked for pp and the model's L layers; on
 * AP_OK the caller frees *lay (ap_layout_free). */
static int pipeline_layout(const ap_megatron *m, int L, int mtp, ap_pipe_layout *lay,
                           char *err)
{
    int rc = ap_layout_parse(m->layout, LAYOUT_WHO, lay, err);
    if (rc)
        return rc;
    if (lay->nstages % m->pp)
        rc = layout_fault(err, m, "its %d virtual stages do not divide over pp=%d",
                          lay->nstages, m->pp);
    if (!rc)
        rc = check_layout_places(m, lay, L, mtp, err);
    for (int r = 0; !rc && r < m->pp; r++) {
        long n = 0;
        for (int i = r; i < lay->nstages; i += m->pp)
            n += lay->layers[i];
        if (!n)
            rc = layout_fault(err, m, "pipeline rank %d holds no transformer layer, "
                              "which autopar does not model", r);
    }
    if (rc)
        ap_layout_free(lay);
    return rc;
}

/* The layout against the other ways of splitting the layers, which
 * Megatron-LM refuses beside it, and vpp: from the layout, m->vpp set; the
 * parsed layout into *lay, which the caller frees. */
static int check_layout(ap_megatron *m, int L, int mtp, ap_pipe_layout *lay, char *err)
{
    if (m->first || m->last || m->account_embedding || m->account_loss) {
        snprintf(err, AP_ERR_LEN, "%s: cannot be combined with %s; the layout places "
                 "every layer itself", LAYOUT_WHO, m->first || m->last
                 ? "first=N,last=N (--decoder-first/last-pipeline-num-layers)"
                 : "account_embedding/account_loss (--account-for-embedding/"
                   "loss-in-pipeline-split)");
        return AP_EINPUT;
    }
    int rc = pipeline_layout(m, L, mtp, lay, err);
    if (rc)
        return rc;
    int v = lay->nstages / m->pp;
    if (m->vpp < 0 || (m->vpp > 1 && m->vpp != v)) {
        if (m->vpp < 0)
            snprintf(err, AP_ERR_LEN, "%s: cannot be combined with "
                     "--num-layers-per-virtual-pipeline-stage", LAYOUT_WHO);
        else
            snprintf(err, AP_ERR_LEN, "%s: vpp=%d contradicts the layout's %d virtual "
                     "stages per pipeline rank", LAYOUT_WHO, m->vpp, v);
        return AP_EINPUT;
    }
    m->vpp = v;
    return AP_OK;
}

/* Whether the experts need a mesh of their own (MoE parallel folding):
 * the stage's mesh holds them when they split over its data-parallel axis
 * alone (ep = dp, cp = 1) and their tensor parallelism is the layers'. */
static int etp_of(const ap_megatron *m)
{
    return m->etp ? m->etp : m->tp;
}

static int folded(const ap_graph *g, const ap_megatron *m)
{
    return ap_graph_label_of(g, AP_DIM_EXPERTS) &&
           (etp_of(m) != m->tp || (m->ep > 1 && (m->cp > 1 || m->ep != m->dp)));
}

/* Megatron-Core's rules for the expert groups (parallel_state.py
 * initialize_model_parallel, TransformerConfig): ep divides the experts;
 * the expert groups fold into the ranks of a pipeline stage, so the world
 * size divides by etp*ep*pp, that is ep*etp divides tp*cp*dp; MoE beside
 * tensor parallelism needs sequence parallelism. */
static int check_experts(const ap_graph *g, ap_megatron *m, char *err)
{
    char e = ap_graph_label_of(g, AP_DIM_EXPERTS);
    long long experts = e ? (long long)ap_graph_dim(g, e)->size : 0;
    if (!m->etp)
        m->etp = m->tp;
    if (m->ep > 1 && !e) {
        snprintf(err, AP_ERR_LEN, "ep=%d: %s has no experts to split (expert parallelism "
                 "needs an MoE model)", m->ep, g->name);
        return AP_EINPUT;
    }
    if (m->ep > 1 && experts % m->ep) {
        snprintf(err, AP_ERR_LEN, "ep=%d must divide the experts (%lld)", m->ep, experts);
        return AP_EINPUT;
    }
    long ranks = (long)m->tp * m->cp * m->dp, group = (long)m->ep * m->etp;
    if (ranks % group) {
        snprintf(err, AP_ERR_LEN, "ep*etp = %d*%d = %ld must divide tp*cp*dp = "
                 "%d*%d*%d = %ld: Megatron-Core folds the expert-parallel and "
                 "expert-tensor-parallel groups into the ranks of a pipeline stage",
                 m->ep, m->etp, group, m->tp, m->cp, m->dp, ranks);
        return AP_EINPUT;
    }
    if (m->run.sequential_experts && !e) {
        snprintf(err, AP_ERR_LEN, "sequential_experts=1: %s has no experts to run one "
                 "after another (SequentialMLP needs an MoE model)", g->name);
        return AP_EINPUT;
    }
    if (m->run.sequential_experts && (ap_run_rc_modules(&m->run) & AP_MODULE_MOE_ACT)) {
        snprintf(err, AP_ERR_LEN, "recompute_modules=moe_act with sequential_experts=1 "
                 "(no --moe-grouped-gemm): Megatron-Core recomputes the experts' "
                 "activation only in its grouped MLP, as it asserts");
        return AP_EINPUT;
    }
    if (m->ep > 1 && m->tp > 1 && !m->sp) {
        snprintf(err, AP_ERR_LEN, "sp: MoE with tp=%d > 1 needs sequence parallelism "
                 "(sp=1, --sequence-parallel), as Megatron-Core asserts; each rank "
                 "dispatches its own sequence shard", m->tp);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* FP8 primary weights need FP8 linear layers to hold, and an optimizer
 * that keeps fp32 main weights to update them from: Megatron-LM asserts
 * "--fp8-param-gather only supported with distributed optimizer, torch
 * fsdp2, megatron fsdp, or inference mode" (megatron/training/arguments.py). */
static int check_fp8_params(const ap_megatron *m, char *err)
{
    if (m->run.fp8_recipe != AP_FP8_DELAYED && !m->run.fp8) {
        snprintf(err, AP_ERR_LEN, "fp8_recipe=%s scales FP8 tensors, which needs FP8 "
                 "training (fp8=1)", ap_fp8_recipe_name(m->run.fp8_recipe));
        return AP_EINPUT;
    }
    if (!m->run.fp8_param_gather)
        return AP_OK;
    if (!m->run.fp8) {
        snprintf(err, AP_ERR_LEN, "fp8_param_gather: --fp8-param-gather keeps the "
                 "linear layers' weights in FP8, which needs FP8 training (fp8=1, "
                 "--fp8-format hybrid)");
        return AP_EINPUT;
    }
    if (m->zero == AP_ZERO_NONE) {
        snprintf(err, AP_ERR_LEN, "fp8_param_gather: --fp8-param-gather is only "
                 "supported with the distributed optimizer (zero=1, "
                 "--use-distributed-optimizer) or FSDP, as Megatron-LM asserts; "
                 "the configuration has zero=0");
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Layers kept in bf16 under FP8: Megatron-Core asserts that delayed
 * scaling does not take them (its amax reduction assumes one FP8 context
 * over the whole block), and the graph must have been built with them, so
 * that they are layer classes of their own. Without FP8 they change
 * nothing, as get_fp8_context returns a null context for every layer. */
static int check_bf16_layers(const ap_graph *g, const ap_megatron *m, char *err)
{
    if (!m->run.fp8 || (!m->bf16_first && !m->bf16_last && !g->bf16_first &&
                        !g->bf16_last))
        return AP_OK;
    if (m->run.fp8_recipe == AP_FP8_DELAYED && (m->bf16_first || m->bf16_last)) {
        snprintf(err, AP_ERR_LEN, "bf16_first=%d,bf16_last=%d: --first-last-layers-bf16 "
                 "with delayed scaling, which Megatron-Core refuses (\"Delayed scaling "
                 "does not support first / last layer in BF16\"); give --fp8-recipe "
                 "tensorwise", m->bf16_first, m->bf16_last);
        return AP_EINPUT;
    }
    if (g->bf16_first == m->bf16_first && g->bf16_last == m->bf16_last)
        return AP_OK;
    snprintf(err, AP_ERR_LEN, "bf16_first=%d,bf16_last=%d: %s keeps %d first and %d last "
             "layers in bf16; build it with the configuration's (`autopar estimate` "
             "does from --megatron or --megatron-args)", m->bf16_first, m->bf16_last,
             g->source, g->bf16_first, g->bf16_last);
    return AP_EINPUT;
}

/* The optimizer states in another dtype than fp32 are the distributed
 * optimizer's (Megatron-Core's OptimizerConfig asserts
 * use_distributed_optimizer under use_precision_aware_optimizer; apex's
 * DistributedFusedAdam is ZeRO-1 itself). */
static int check_opt_dtypes(const ap_megatron *m, char *err)
{
    if (m->run.opt.main_params == AP_OPT_REMAINDER && m->run.fp8_param_gather) {
        snprintf(err, AP_ERR_LEN, "main_params=remainder: Transformer Engine's FusedAdam "
                 "keeps remainders only of bf16 weights, and fp8_param_gather=1 makes "
                 "them FP8 (--fp8-param-gather); give main_params=fp32");
        return AP_EINPUT;
    }
    if (ap_opt_dtypes_fp32(&m->run.opt) || m->zero != AP_ZERO_NONE)
        return AP_OK;
    snprintf(err, AP_ERR_LEN, "main_params, exp_avg, exp_avg_sq: optimizer states in "
             "%s, %s and %s need --use-precision-aware-optimizer, which Megatron-Core "
             "supports only with the distributed optimizer (zero=1, "
             "--use-distributed-optimizer); the configuration has zero=0",
             ap_opt_dtype_name(m->run.opt.main_params), ap_opt_dtype_name(m->run.opt.exp_avg),
             ap_opt_dtype_name(m->run.opt.exp_avg_sq));
    return AP_EINPUT;
}

/* Megatron-Core's ModelParallelConfig refuses to defer the output layer's
 * weight gradients without pipeline parallelism (and without gradient
 * accumulation fusion, whose flag --megatron-args refuses anyway). */
static int check_defer_wgrad(const ap_megatron *m, char *err)
{
    if (!m->run.defer_wgrad || m->pp > 1)
        return AP_OK;
    snprintf(err, AP_ERR_LEN, "defer_wgrad: --defer-embedding-wgrad-compute needs "
             "pipeline parallelism (pp > 1), as Megatron-Core refuses it: \"Cannot "
             "defer embedding wgrad compute when pipeline model parallel is not "
             "used\"; the configuration has pp=%d", m->pp);
    return AP_EINPUT;
}

/* Megatron-Core's assertions on overlap_moe_expert_parallel_comm and
 * delay_wgrad_compute (TransformerConfig.__post_init__): expert
 * parallelism, a virtual pipeline when pp > 1 (the combined 1F1B exists
 * for no pipelining and for the interleaved schedule only), no full
 * recomputation (a checkpointed layer has no schedule nodes to merge), a
 * bf16 or fp16 model, the alltoall or flex token dispatcher ("is supported
 * with alltoall/flex token dispatcher": allgather has no schedule nodes to
 * split the exchange into); the delayed weight gradients only with the
 * overlap. */
static int check_moe_overlap(const ap_graph *g, const ap_megatron *m, char *err)
{
    const char *flag = "moe_a2a_overlap: --overlap-moe-expert-parallel-comm";
    if (m->run.delay_wgrad && !m->run.moe_a2a_overlap) {
        snprintf(err, AP_ERR_LEN, "delay_wgrad: --delay-wgrad-compute needs "
                 "--overlap-moe-expert-parallel-comm (moe_a2a_overlap=1), as "
                 "Megatron-Core asserts");
        return AP_EINPUT;
    }
    if (m->run.shared_overlap && m->run.moe_a2a_overlap) {
        snprintf(err, AP_ERR_LEN, "shared_overlap (--moe-shared-expert-overlap) with %s: "
                 "the combined 1F1B schedules the shared experts in nodes of its own, "
                 "which autopar does not price together with the shared overlap", flag);
        return AP_EINPUT;
    }
    if (!m->run.moe_a2a_overlap)
        return AP_OK;
    if (m->ep < 2) {
        snprintf(err, AP_ERR_LEN, "%s is only supported with expert parallelism "
                 "(ep > 1), as Megatron-Core asserts; the configuration has ep=%d",
                 flag, m->ep);
        return AP_EINPUT;
    }
    if (m->run.dispatcher == AP_DISPATCH_ALLGATHER) {
        snprintf(err, AP_ERR_LEN, "%s with dispatcher=allgather (--moe-token-dispatcher-type "
                 "allgather, Megatron-Core's default): Megatron-Core's TransformerConfig "
                 "asserts \"overlap_moe_expert_parallel_comm is supported with alltoall/flex "
                 "token dispatcher\"; give dispatcher=alltoall (--moe-token-dispatcher-type "
                 "alltoall) or flex", flag);
        return AP_EINPUT;
    }
    if (m->pp > 1 && m->vpp < 2) {
        snprintf(err, AP_ERR_LEN, "%s with pp=%d needs a virtual pipeline (vpp > 1, "
                 "--num-virtual-stages-per-pipeline-rank), as Megatron-Core asserts: "
                 "its combined 1F1B runs without pipelining or interleaved", flag, m->pp);
        return AP_EINPUT;
    }
    if (m->recompute == AP_RECOMPUTE_FULL) {
        snprintf(err, AP_ERR_LEN, "%s excludes full recomputation (recompute=full, "
                 "--recompute-granularity full), as Megatron-Core asserts: a "
                 "checkpointed layer has no schedule nodes to merge", flag);
        return AP_EINPUT;
    }
    if (g->dtype != AP_BF16 && g->dtype != AP_FP16) {
        snprintf(err, AP_ERR_LEN, "%s is only supported with a bf16 or fp16 model, "
                 "as Megatron-Core asserts; the model is %s", flag,
                 ap_dtype_name(g->dtype));
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Megatron-LM's assertions on --overlap-param-gather (arguments.py): the
 * pre-hooks gather the distributed optimizer's buckets, and they are
 * dispatched only once the gradient reduction has been overlapped. */
static int check_param_gather(const ap_megatron *m, char *err)
{
    if (!ap_megatron_overlap_param(m))
        return AP_OK;
    if (m->zero != AP_ZERO_1) {
        snprintf(err, AP_ERR_LEN, "overlap_param: --overlap-param-gather is only "
                 "supported with the distributed optimizer (zero=1, "
                 "--use-distributed-optimizer), as Megatron-LM asserts; the "
                 "configuration has zero=%d", (int)m->zero);
        return AP_EINPUT;
    }
    if (!m->overlap_grad) {
        snprintf(err, AP_ERR_LEN, "overlap_param: --overlap-param-gather needs "
                 "--overlap-grad-reduce (overlap_grad=1), as Megatron-LM asserts");
        return AP_EINPUT;
    }
    return AP_OK;
}

int ap_megatron_states_model(const ap_megatron *m)
{
    return m->shape.layers > 0 && m->shape.hidden > 0 && m->shape.heads > 0;
}

/* The model flags of --megatron-args against the model's shape as the
 * exports state it (ap_model_shape_of): a flag given must agree. The FFN is
 * compared where the model has dense layers, whose FFN is Megatron's
 * --ffn-hidden-size; a model whose every layer is MoE builds none with it. */
static int check_shape(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                       char *err)
{
    const struct {
        const char *flag, *what, *hint;
        int given;
        long long model;
    } f[] = {
        {"--num-layers", "layers", "", m->shape.layers, s->layers},
        {"--hidden-size", "hidden size", "", m->shape.hidden, s->hidden},
        {"--num-attention-heads", "attention heads", "", m->shape.heads, s->heads},
        {"--num-query-groups", "KV heads", "", m->shape.groups, s->kv_heads},
        {"--ffn-hidden-size", "FFN size", "", s->experts && !s->moe_freq[0] ? 0 : m->shape.ffn,
         s->ffn},
        {"--seq-length", "tokens per sequence",
         " (a graph is built at one length: --seq, or `autopar graph --seq`)",
         m->shape.seq, s->seq},
        {"--num-experts", "experts", "", m->shape.experts, s->experts},
        {"--mtp-num-layers", "multi-token-prediction modules",
         " (a Hugging Face config is built with them: --mtp-layers, or "
         "--megatron-args itself)", m->shape.mtp, s->mtp_layers},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].given || f[i].given == f[i].model)
            continue;
        if (f[i].model)
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s %d, but %s has %lld %s%s",
                     f[i].flag, f[i].given, g->source, f[i].model, f[i].what, f[i].hint);
        else
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s %d, but %s has no %s",
                     f[i].flag, f[i].given, g->source, f[i].what);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* Transformer Engine's all-gather and all-to-all attention assert what the
 * ring does not (AttnFuncWithCPAndQKVOA2A, attn_forward_func_with_cp):
 * no MLA (a value head dim other than the query's), and under a2a the
 * heads and KV heads of a tensor-parallel rank divisible by cp, as each cp
 * rank runs cp-th of them over the whole sequence. */
static int check_cp_comm(const ap_graph *g, const ap_megatron *m, char *err)
{
    if (m->cp <= 1 || m->run.cp_comm == AP_CP_P2P)
        return AP_OK;
    const char *name = ap_cp_comm_name(m->run.cp_comm);
    for (int i = 0; i < g->nops; i++) {
        const ap_op *op = &g->ops[i];
        if (op->kind != AP_OP_ATTENTION || op->ninputs < 3)
            continue;
        const ap_dim *d = ap_graph_dim(g, g->tensors[op->inputs[0]].shape[3]);
        const ap_dim *e = ap_graph_dim(g, g->tensors[op->inputs[2]].shape[3]);
        if (d && e && d->size != e->size) {
            snprintf(err, AP_ERR_LEN, "cp_comm=%s (--cp-comm-type %s): Transformer Engine "
                     "runs MLA (head dims %lld and %lld) only with p2p", name, name,
                     (long long)d->size, (long long)e->size);
            return AP_EINPUT;
        }
    }
    if (m->run.cp_comm != AP_CP_A2A)
        return AP_OK;
    const char *kinds[] = {"heads", "KV heads"};
    ap_dim_kind dk[] = {AP_DIM_HEADS, AP_DIM_KV_HEADS};
    for (int i = 0; i < 2; i++) {
        char l = ap_graph_label_of(g, dk[i]);
        long long n = l ? ap_graph_dim(g, l)->size : 0;
        if (l && (n / m->tp) % m->cp) {
            snprintf(err, AP_ERR_LEN, "cp_comm=a2a (--cp-comm-type a2a): cp=%d does not "
                     "divide the %lld/%d = %lld %s of a tensor-parallel rank (Transformer "
                     "Engine's all-to-all gives each cp rank cp-th of them)", m->cp, n,
                     m->tp, n / m->tp, kinds[i]);
            return AP_EINPUT;
        }
    }
    return AP_OK;
}

/* Context parallelism under a sliding window shorter than the sequence:
 * Transformer Engine's p2p ring refuses the window; its all-gather (each
 * chunk's band) and all-to-all (whole sequences of fewer heads) take it.
 * No type runs an attention chunk (Llama 4's), which has no Megatron-LM
 * flag either. A window as long as the sequence changes nothing and is
 * priced. */
static int check_window_cp(const ap_graph *g, const ap_megatron *m, char *err)
{
    long long seq = 0, c = m->cp > 1 ? ap_model_short_chunk(g, &seq) : 0;
    if (c) {
        snprintf(err, AP_ERR_LEN, "cp=%d (--context-parallel-size %d): context parallelism "
                 "with attention chunks of %lld tokens shorter than the sequence %lld is not "
                 "priced (Transformer Engine runs no chunked attention under it): give cp=1",
                 m->cp, m->cp, c, seq);
        return AP_EINPUT;
    }
    long long w = m->cp > 1 && m->run.cp_comm == AP_CP_P2P ? ap_model_short_window(g, &seq) : 0;
    if (!w)
        return AP_OK;
    snprintf(err, AP_ERR_LEN, "cp=%d (--context-parallel-size %d) with cp_comm=p2p: "
             "Transformer Engine's ring refuses a sliding window (here %lld keys, shorter "
             "than the sequence %lld): give cp_comm=allgather or a2a (--cp-comm-type "
             "allgather or a2a), which take it, or cp=1", m->cp, m->cp, w, seq);
    return AP_EINPUT;
}

/* What Megatron-LM asserts of the sequence length: validate_args that it
 * is a multiple of 2 * cp (each context-parallel rank takes two chunks, one
 * from each end, for causal balance), and Megatron-Core's sequence-parallel
 * scatter (_split_along_first_dim, _reduce_scatter_along_first_dim) that
 * tp divides each rank's share of it. */
static int check_seq(const ap_graph *g, const ap_megatron *m, char *err)
{
    char l = ap_graph_label_of(g, AP_DIM_SEQ);
    long long seq = l ? ap_graph_dim(g, l)->size : 0;
    if (!seq)
        return AP_OK;
    if (m->cp > 1 && seq % (2LL * m->cp)) {
        snprintf(err, AP_ERR_LEN, "cp=%d (--context-parallel-size %d): the sequence of "
                 "%lld tokens is not a multiple of 2 * cp = %d, which Megatron-LM asserts "
                 "(each rank takes two chunks of it)", m->cp, m->cp, seq, 2 * m->cp);
        return AP_EINPUT;
    }
    if (m->sp && m->tp > 1 && (seq / m->cp) % m->tp) {
        snprintf(err, AP_ERR_LEN, "sp=1 (--sequence-parallel) with tp=%d: the %lld tokens "
                 "%s do not split over the %d tensor-parallel ranks, which Megatron-Core "
                 "asserts when it scatters the sequence", m->tp, seq / m->cp,
                 m->cp > 1 ? "of a context-parallel rank" : "of the sequence", m->tp);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* An fp16 MoE model: Megatron-LM asserts bf16 for the grouped GEMM ("Currently
 * GroupedGEMM for MoE only supports bf16 dtype"), which autopar prices the
 * experts with and the export states, and refuses expert parallelism under
 * fp16 ("Expert parallelism is not supported with fp16 training"). A
 * weight-gradient deferral needs gradient-accumulation fusion: Megatron-Core
 * raises without it. */
static int check_runtime_asserts(const ap_megatron *m, const ap_model_shape *s, char *err)
{
    if (s->experts && s->dtype == AP_FP16) {
        snprintf(err, AP_ERR_LEN, "an fp16 MoE model: Megatron-LM runs its grouped GEMM in "
                 "bf16 only and refuses expert parallelism under fp16 (--fp16); build it "
                 "in bf16");
        return AP_EINPUT;
    }
    if (m->run.defer_wgrad && m->run.no_grad_fusion) {
        snprintf(err, AP_ERR_LEN, "defer_wgrad=1 with no_grad_fusion=1: Megatron-Core cannot "
                 "defer the embedding's weight gradients without gradient-accumulation "
                 "fusion (--defer-embedding-wgrad-compute with "
                 "--no-gradient-accumulation-fusion raises)");
        return AP_EINPUT;
    }
    return AP_OK;
}

/* The method and its layers under a checked split. Megatron-LM's uniform
 * groups run past a chunk's last layer when N does not divide the chunk's
 * layers (an IndexError), and N = 0 never leaves the first group. The spec
 * states them with recompute=full only, as Megatron-LM reads them. */
static int check_recompute(const ap_megatron *m, int L, const ap_pipe_layout *lay,
                           char *err)
{
    if (m->run.recompute_modules && m->recompute != AP_RECOMPUTE_SELECTIVE) {
        snprintf(err, AP_ERR_LEN, "recompute_modules (--recompute-modules) applies to "
                 "recompute=selective only");
        return AP_EINPUT;
    }
    if (m->recompute != AP_RECOMPUTE_FULL) {
        if (m->recompute_method == AP_RECOMPUTE_UNIFORM && m->recompute_layers == 1)
            return AP_OK;
        snprintf(err, AP_ERR_LEN, "recompute_method=%s,recompute_layers=%d "
                 "(--recompute-method, --recompute-num-layers) apply to recompute=full "
                 "only", ap_recompute_method_name(m->recompute_method),
                 m->recompute_layers);
        return AP_EINPUT;
    }
    if (m->recompute_method != AP_RECOMPUTE_UNIFORM)
        return AP_OK;
    int n = m->recompute_layers;
    /* Every model chunk, or under a layout every virtual stage with layers. */
    int chunks = lay->layers ? lay->nstages : m->pp;
    for (int i = 0; i < chunks; i++) {
        int s = i % m->pp;
        int chunk = lay->layers ? lay->layers[i] : stage_layers(m, L, s) / m->vpp;
        if ((n >= 1 && chunk % n == 0) || (lay->layers && chunk == 0))
            continue;
        if (n < 1)
            snprintf(err, AP_ERR_LEN, "recompute_layers=0 (--recompute-num-layers) with "
                     "recompute_method=uniform: Megatron-LM's groups of no layers never "
                     "end; give 1 or more, or recompute_method=block");
        else
            snprintf(err, AP_ERR_LEN, "recompute_layers=%d (--recompute-num-layers) with "
                     "recompute_method=uniform must divide the %d layers of stage %d's "
                     "%s: Megatron-LM's last group would run past them", n, chunk, s,
                     m->vpp > 1 ? "virtual stages" : "model chunk");
        return AP_EINPUT;
    }
    return AP_OK;
}

/* What the audited flags say of the model (settle_audit) against it: the
 * attention kernel, and the experts' top-k and FFN. */
/* Group-limited routing on the command line against the model's: flags
 * that contradict it are refused; where they are left out (Megatron-LM
 * then routes over all experts) the flex dispatcher, whose traffic depends
 * on it, is refused too, and the alltoall dispatcher, whose does not, is
 * priced. A group_topk not below the groups limits nothing. A spec has no
 * such keys: it runs the model's routing. */
static int check_groups(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                        char *err)
{
    int groups = s->route_groups, topk = s->route_group_topk;
    int fg = m->shape.route_groups, ft = m->shape.route_group_topk;
    int given = fg || ft;
    if (fg > 1 && (!ft || ft >= fg)) /* no limit */
        fg = ft = 0;
    /* Only the flex dispatcher's traffic depends on the groups: the
     * alltoall and allgather dispatchers move every routed copy, or every
     * token, wherever its experts are. */
    int flex = m->run.dispatcher == AP_DISPATCH_DEEPEP ||
               m->run.dispatcher == AP_DISPATCH_HYBRIDEP;
    if (given ? fg == groups && ft == topk : !groups || !flex || !m->from_args)
        return AP_OK;
    if (given) {
        char routes[48] = "over all experts";
        if (groups)
            snprintf(routes, sizeof routes, "within %d of %d expert groups", topk, groups);
        if (!m->shape.route_groups)
            snprintf(err, AP_ERR_LEN, "--megatron-args: --moe-router-group-topk %d without "
                     "--moe-router-num-groups limits nothing (Megatron-LM routes over all "
                     "experts), but %s routes %s", m->shape.route_group_topk, g->source,
                     routes);
        else
            snprintf(err, AP_ERR_LEN, "--megatron-args: --moe-router-num-groups %d "
                     "--moe-router-group-topk %d, but %s routes %s", m->shape.route_groups,
                     m->shape.route_group_topk, g->source, routes);
    } else {
        snprintf(err, AP_ERR_LEN, "--megatron-args: no --moe-router-num-groups (Megatron-LM "
                 "then routes over all experts), but %s routes each token within %d of %d "
                 "expert groups, which the flex dispatcher's traffic depends on: give "
                 "--moe-router-num-groups %d --moe-router-group-topk %d", g->source, topk,
                 groups, groups, topk);
    }
    return AP_EINPUT;
}

/* A router in words, for messages: its scores, its top-k weights, its
 * expert bias and the factor on its weights. */
static void router_words(int sigmoid, int unnormalized, int bias, double scale,
                         int on_input, char *buf, size_t len)
{
    char factor[40] = "";
    if (scale > 0 && scale != 1)
        snprintf(factor, sizeof factor, ", scaled by %g", scale);
    snprintf(buf, len, "%s%s%s%s", sigmoid && unnormalized ? "sigmoid, the top k as scored"
             : sigmoid ? "sigmoid, the top k renormalised"
             : unnormalized ? "softmax over all experts, the top k as scored"
                            : "softmax over the top-k logits",
             bias ? ", an expert bias" : "", factor,
             on_input ? ", weighing the experts' input" : "");
}

/* The router's flags against the model's router (ap_model_shape_of), where
 * any is given: the router they state, Megatron-LM's defaults for those
 * left out (topk_routing_with_score_function: a softmax over the top-k
 * logits, or over all experts under --moe-router-pre-softmax, its top k
 * then as they are; sigmoid scores renormalised above top-k 1), must be
 * the model's. Left out, the router prices the same whatever it is, as
 * the groups do outside the flex dispatcher (check_groups). */
static int check_router_flags(const ap_graph *g, const ap_megatron *m,
                              const ap_model_shape *s, char *err)
{
    int sigmoid = m->shape.route_score == 2;
    int unnormalized = sigmoid ? s->top_k == 1 : m->shape.route_pre_softmax;
    double scale = m->shape.route_scale > 0 ? m->shape.route_scale : 1;
    double model_scale = s->route_scale > 0 ? s->route_scale : 1;
    if (!m->shape.route_score && !m->shape.route_pre_softmax && !m->shape.route_bias &&
        !(m->shape.route_scale > 0) && !m->shape.route_on_input)
        return AP_OK;
    if (sigmoid == s->route_sigmoid && unnormalized == s->route_unnormalized &&
        m->shape.route_bias == s->route_bias && scale == model_scale &&
        m->shape.route_on_input == s->route_on_input)
        return AP_OK;
    char flags[160] = "", want[96], have[96];
    if (m->shape.route_score)
        snprintf(flags, sizeof flags, " --moe-router-score-function %s",
                 sigmoid ? "sigmoid" : "softmax");
    if (m->shape.route_pre_softmax)
        strcat(flags, " --moe-router-pre-softmax");
    if (m->shape.route_bias)
        strcat(flags, " --moe-router-enable-expert-bias");
    if (m->shape.route_scale > 0)
        snprintf(flags + strlen(flags), sizeof flags - strlen(flags),
                 " --moe-router-topk-scaling-factor %g", m->shape.route_scale);
    if (m->shape.route_on_input)
        strcat(flags, " --moe-apply-probs-on-input");
    router_words(sigmoid, unnormalized, m->shape.route_bias, scale, m->shape.route_on_input,
                 want, sizeof want);
    router_words(s->route_sigmoid, s->route_unnormalized, s->route_bias, model_scale,
                 s->route_on_input, have, sizeof have);
    snprintf(err, AP_ERR_LEN, "--megatron-args: the router%.140s (%.95s), but %.128s routes "
             "with %.95s", flags, want, g->source, have);
    return AP_EINPUT;
}

/* The layers a per-layer flag states, a byte a layer into *want: its
 * text read by parse where given (text non-empty), else every layer
 * `fill`; *have gets a buffer as long for the model's. The caller frees
 * both, whatever this returns. */
static int flag_layers(int layers, const char *flag, const char *text,
                       int (*parse)(const char *, int, unsigned char *, char *), int fill,
                       unsigned char **want, unsigned char **have, char *err)
{
    *want = malloc((size_t)layers + 1);
    *have = malloc((size_t)layers + 1);
    if (!*want || !*have) {
        snprintf(err, AP_ERR_LEN, "out of memory reading %s", flag);
        return AP_EINTERNAL;
    }
    if (text[0])
        return parse(text, layers, *want, err);
    memset(*want, fill, (size_t)layers);
    return AP_OK;
}

/* The MoE layers' structure against the model's: the shared experts'
 * width and which layers are MoE, each given or, in a whole script, left to
 * Megatron-LM's default (no shared experts; every layer MoE). */
static int check_moe_layers(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                            char *err)
{
    int whole = ap_megatron_states_model(m);
    if ((m->shape.shared_ffn || whole) && m->shape.shared_ffn != s->shared_ffn) {
        if (m->shape.shared_ffn && s->shared_ffn)
            snprintf(err, AP_ERR_LEN, "--megatron-args: --moe-shared-expert-intermediate-size "
                     "%d, but %s has shared experts %lld wide", m->shape.shared_ffn,
                     g->source, s->shared_ffn);
        else if (m->shape.shared_ffn)
            snprintf(err, AP_ERR_LEN, "--megatron-args: --moe-shared-expert-intermediate-size "
                     "%d, but %s has no shared experts", m->shape.shared_ffn, g->source);
        else
            snprintf(err, AP_ERR_LEN, "--megatron-args: no "
                     "--moe-shared-expert-intermediate-size (no shared experts, "
                     "Megatron-LM's default), but %s has shared experts %lld wide: give "
                     "--moe-shared-expert-intermediate-size %lld", g->source, s->shared_ffn,
                     s->shared_ffn);
        return AP_EINPUT;
    }
    if (!m->shape.moe_freq[0] && !(whole && s->moe_freq[0]))
        return AP_OK;
    unsigned char *want, *have;
    int rc = flag_layers(s->layers, "--moe-layer-freq", m->shape.moe_freq, ap_moe_freq_parse,
                         1, &want, &have, err);
    if (!rc) {
        ap_model_moe_layers(g, have);
        int i = 0;
        while (i < s->layers && want[i] == have[i])
            i++;
        if (i < s->layers) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s%.64s%s makes layer %d %s, but in "
                     "%.128s it is %s: give --moe-layer-freq %.64s", m->shape.moe_freq[0]
                     ? "--moe-layer-freq " : "no --moe-layer-freq",
                     m->shape.moe_freq, m->shape.moe_freq[0] ? "" : " (every layer MoE, "
                     "Megatron-LM's default)", i, want[i] ? "MoE" : "dense", g->source,
                     have[i] ? "MoE" : "dense", s->moe_freq[0] ? s->moe_freq : "1");
            rc = AP_EINPUT;
        }
    }
    free(want);
    free(have);
    return rc;
}

/* The structure flags against the model: a flag given must describe it,
 * and where the command line states the model as a whole script does
 * (--num-layers, --hidden-size and --num-attention-heads), Megatron-LM's
 * default where a flag is left out must too: a GELU MLP without --swiglu
 * or --squared-relu, LayerNorm without --normalization, tied embeddings without
 * --untie-embeddings-and-output-weights, hidden/heads per head without
 * --kv-channels (which multi-latent attention does not read). */
static int check_structure(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                           char *err)
{
    int whole = ap_megatron_states_model(m);
    long long kv = s->mla ? 0
                 : m->shape.kv_channels ? m->shape.kv_channels
                 : whole && s->heads ? s->hidden / s->heads : 0;
    const char *what = NULL;
    char flag[96];
    if (kv && s->head_dim && kv != s->head_dim) {
        snprintf(flag, sizeof flag, "--kv-channels %lld%s", kv,
                 m->shape.kv_channels ? "" : " (hidden / heads, where left out)");
        what = "per attention head";
    } else if ((m->shape.swiglu || whole) && m->shape.swiglu != s->swiglu) {
        snprintf(flag, sizeof flag, "%s", m->shape.swiglu ? "--swiglu" : "no --swiglu");
        what = s->swiglu ? "a SwiGLU MLP" : "no SwiGLU MLP";
    } else if ((m->shape.quick_geglu || whole) && m->shape.quick_geglu != s->quick_geglu) {
        snprintf(flag, sizeof flag, "%s", m->shape.quick_geglu ? "--quick-geglu"
                                                               : "no --quick-geglu");
        what = s->quick_geglu ? "a quick-GeGLU MLP" : "no quick-GeGLU MLP";
    } else if ((m->shape.sinks || whole) && (m->shape.sinks > 0) != s->sinks) {
        snprintf(flag, sizeof flag, "%s", m->shape.sinks > 0 ? "--softmax-type learnable"
                 : m->shape.sinks ? "no learnable --softmax-type"
                                  : "no --softmax-type (vanilla, Megatron-LM's default)");
        what = s->sinks ? "attention sinks (a learned softmax offset per head)"
                        : "no attention sinks";
    } else if ((m->shape.squared_relu || whole) && m->shape.squared_relu != s->squared_relu) {
        snprintf(flag, sizeof flag, "%s", m->shape.squared_relu ? "--squared-relu"
                                                                : "no --squared-relu");
        what = s->squared_relu ? "a squared-ReLU MLP" : "no squared-ReLU MLP";
    } else if ((m->shape.untie || whole) && m->shape.untie == s->tied_embeddings) {
        snprintf(flag, sizeof flag, "%s", m->shape.untie
                 ? "--untie-embeddings-and-output-weights"
                 : "no --untie-embeddings-and-output-weights (tied, Megatron-LM's default)");
        what = s->tied_embeddings ? "tied embeddings" : "an output layer of its own";
    } else if ((m->shape.norm || whole) && (m->shape.norm == 2) != s->rmsnorm) {
        snprintf(flag, sizeof flag, "%s", m->shape.norm == 2 ? "--normalization RMSNorm"
                 : m->shape.norm ? "--normalization LayerNorm"
                                 : "no --normalization (LayerNorm, Megatron-LM's default)");
        what = s->rmsnorm ? "RMSNorm" : "LayerNorm";
    }
    if (!what)
        return AP_OK;
    if (kv && s->head_dim && kv != s->head_dim)
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s has %lld %s", flag,
                 g->source, s->head_dim, what);
    else
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s has %s", flag, g->source,
                 what);
    return AP_EINPUT;
}

/* What the command line's biases, QK norms and position embeddings build
 * (Megatron-LM's defaults: a bias on every linear layer, no QK norm,
 * learned absolute positions, rope over the whole head), as
 * check_structure checks its flags; where a flag is not given and the
 * script is not whole, what the model has. Positions are numbered as
 * m->shape.positions: 1 learned_absolute, 2 rope, 3 none. */
typedef struct {
    int other_bias, qkv_bias, positions;
    double rotary;
} layer_flags;

static const char *const position_types[] = {"", "learned_absolute", "rope", "none"};
static const char *const position_words[] = {"", "learned absolute positions",
                                             "rotary embeddings", "no position embedding"};

static int model_positions(const ap_model_shape *s)
{
    return s->learned_positions ? 1 : s->rotary_percent > 0 ? 2 : 3;
}

static layer_flags layer_flags_built(const ap_megatron *m, int whole, const ap_model_shape *s)
{
    int bias_flags = m->shape.no_bias || m->shape.add_qkv_bias || whole;
    layer_flags f;
    f.other_bias = bias_flags ? !m->shape.no_bias : s->other_bias;
    f.qkv_bias = bias_flags ? !m->shape.no_bias || m->shape.add_qkv_bias : s->qkv_bias;
    f.positions = m->shape.positions ? m->shape.positions : whole ? 1 : model_positions(s);
    f.rotary = m->shape.rotary_percent ? m->shape.rotary_percent : whole ? 1 : s->rotary_percent;
    return f;
}

static int check_layer_flags(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                             char *err)
{
    int whole = ap_megatron_states_model(m);
    layer_flags want = layer_flags_built(m, whole, s);
    int have_pos = model_positions(s);
    const char *flags = m->shape.no_bias && m->shape.add_qkv_bias
                        ? "--disable-bias-linear --add-qkv-bias"
                      : m->shape.no_bias ? "--disable-bias-linear"
                      : m->shape.add_qkv_bias ? "--add-qkv-bias (with the default biases)"
                                             : "no --disable-bias-linear (biases on every "
                                               "linear layer, Megatron-LM's default)";
    if (want.other_bias != s->other_bias || want.qkv_bias != s->qkv_bias) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s has %s on its query, key "
                 "and value projections and %s on its other linear layers", flags, g->source,
                 s->qkv_bias ? "biases" : "no biases", s->other_bias == 1 ? "biases"
                 : s->other_bias ? "biases on some" : "none");
    } else if ((m->shape.qk_norm || whole) && m->shape.qk_norm != s->qk_norm) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s has %s",
                 m->shape.qk_norm ? "--qk-layernorm" : "no --qk-layernorm", g->source,
                 s->qk_norm ? (s->mla ? "norms on its query and key-value latents"
                                      : "a norm on its queries and keys")
                            : "no norm on its queries and keys");
    } else if ((m->shape.qk_l2 || whole) && m->shape.qk_l2 != s->qk_l2) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s has %s",
                 m->shape.qk_l2 ? "--qk-l2-norm" : "no --qk-l2-norm", g->source,
                 s->qk_l2 ? "a norm without a weight on its queries and keys (Llama 4's L2 "
                            "norm: give --qk-l2-norm)"
                          : "no norm without a weight on its queries and keys");
    } else if (want.positions != have_pos) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s%s, but %s has %s",
                 m->shape.positions ? "--position-embedding-type " : "no "
                 "--position-embedding-type (learned_absolute, Megatron-LM's default)",
                 m->shape.positions ? position_types[want.positions] : "", g->source,
                 position_words[have_pos]);
    } else if (want.positions == 2 && !s->mla && want.rotary != s->rotary_percent) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --rotary-percent %g%s, but %s rotates "
                 "%g of each head", want.rotary, m->shape.rotary_percent ? ""
                 : " (Megatron-LM's default)", g->source, s->rotary_percent);
    } else {
        return AP_OK;
    }
    return AP_EINPUT;
}

/* Multi-latent attention on the command line against the model's: the
 * flag, and under it each dimension given, or in a whole script left out
 * to Megatron-Core's default (no query LoRA, a key-value LoRA rank of 32,
 * heads of 128 + 64 for queries and keys and 128 for values). */
static int check_mla(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                     char *err)
{
    int whole = ap_megatron_states_model(m);
    if (m->shape.mla != s->mla && (m->shape.mla || whole)) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s has %s", m->shape.mla
                 ? "--multi-latent-attention" : "no --multi-latent-attention", g->source,
                 s->mla ? "multi-latent attention" : "no multi-latent attention");
        return AP_EINPUT;
    }
    if (!m->shape.mla || !s->mla)
        return AP_OK;
    const char *flags[] = {"--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
                           "--qk-pos-emb-head-dim", "--v-head-dim"};
    const int given[] = {m->shape.q_lora, m->shape.kv_lora, m->shape.qk_nope_dim,
                         m->shape.qk_rope_dim, m->shape.v_head_dim};
    const int deflt[] = {0, 32, 128, 64, 128};
    const long long have[] = {s->q_lora, s->kv_lora, s->qk_nope_dim, s->qk_rope_dim,
                              s->v_head_dim};
    for (int i = 0; i < 5; i++) {
        long long want = given[i] ? given[i] : whole ? deflt[i] : have[i];
        if ((have[i] || given[i]) && want != have[i]) {
            snprintf(err, AP_ERR_LEN, "--megatron-args: %s %lld%s, but %s has %lld",
                     flags[i], want, given[i] ? "" : " (Megatron-Core's default)",
                     g->source, have[i]);
            return AP_EINPUT;
        }
    }
    return AP_OK;
}

/* --window-size as given, for messages: "4095,0" or "-1,0". */
static void window_text(const ap_megatron *m, char *buf, size_t len)
{
    snprintf(buf, len, "%d,0", m->shape.window > 0 ? m->shape.window - 1 : -1);
}

/* The first layer where the windows the flags build (want, each of
 * `keys` keys) and the model's (have) differ, said as the flag to give. */
static int window_differs(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                          long long keys, const unsigned char *want,
                          const unsigned char *have, char *err)
{
    char size[32], flags[144], give[136];
    window_text(m, size, sizeof size);
    int i = 0;
    while (i < s->layers && want[i] == have[i])
        i++;
    if (i == s->layers && (!keys || !s->window || keys == s->window))
        return AP_OK;
    if (!strcmp(s->window_freq, "?"))
        snprintf(give, sizeof give, "a pattern no --window-attn-skip-freq of 255 characters "
                 "states");
    else
        snprintf(give, sizeof give, "--window-size %lld,0%s%.64s", s->window - 1,
                 s->window_freq[0] ? " --window-attn-skip-freq " : "", s->window_freq);
    if (m->shape.window > 0 && m->shape.window_freq[0])
        snprintf(flags, sizeof flags, "--window-size %s --window-attn-skip-freq %.64s", size,
                 m->shape.window_freq);
    else if (m->shape.window > 0)
        snprintf(flags, sizeof flags, "--window-size %s without --window-attn-skip-freq "
                 "(every layer windowed)", size);
    else
        snprintf(flags, sizeof flags, "%s%s", m->shape.window ? "--window-size " : "no "
                 "--window-size (no sliding window, Megatron-LM's default)",
                 m->shape.window ? size : "");
    if (keys && s->window && keys != s->window)
        snprintf(err, AP_ERR_LEN, "--megatron-args: --window-size %s gives each query %lld "
                 "keys, but %.128s's sliding window is %lld keys: give --window-size %lld,0",
                 size, keys, g->source, s->window, s->window - 1);
    else if (!s->window)
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s gives layer %d a sliding window of "
                 "%lld keys, but %.128s has no sliding window: give no --window-size", flags,
                 i, keys, g->source);
    else
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s makes layer %d %s, but in %.96s it "
                 "%s: give %s", flags, i, want[i] ? "windowed" : "attend over the whole "
                 "sequence", g->source, have[i] ? "has a sliding window"
                 : "attends over the whole sequence", give);
    return AP_EINPUT;
}

/* The sliding window on the command line against the model's: its length
 * (--window-size L,0 is L + 1 keys) and which layers have it
 * (--window-attn-skip-freq, every layer where left out), as stated even
 * where the window is no shorter than the sequence. Without --window-size
 * a whole script states no window (Megatron-LM's default) and another line
 * takes the model's; Megatron-LM reads the skip frequency only under
 * --window-size (is_layer_window_attention), and so does autopar. */
static int check_windows(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                         char *err)
{
    if (!m->shape.window && !(ap_megatron_states_model(m) && s->window))
        return AP_OK;
    if (s->window < 0) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: %.128s has sliding windows of different "
                 "lengths on its layers, which Megatron-LM's one --window-size does not "
                 "state", g->source);
        return AP_EINPUT;
    }
    long long keys = m->shape.window > 0 ? m->shape.window : 0;
    unsigned char *want, *have;
    int rc = flag_layers(s->layers, "--window-attn-skip-freq", keys ? m->shape.window_freq : "",
                         ap_window_freq_parse, keys > 0, &want, &have, err);
    if (!rc) {
        int any = 0;
        for (int i = 0; i < s->layers; i++)
            any |= want[i];
        ap_model_window_layers(g, have);
        rc = window_differs(g, m, s, any ? keys : 0, want, have, err);
    }
    free(want);
    free(have);
    return rc;
}

/* The NoPE layers on the command line (--no-rope-freq; in a whole script
 * none without it, Megatron-LM's default) against the model's, where the
 * model rotates any (the positions flags are checked on their own). */
static int check_nope(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                      char *err)
{
    if (!s->rotary_percent || (!m->shape.nope_freq[0] && !ap_megatron_states_model(m)))
        return AP_OK;
    unsigned char *want, *have;
    int i = 0, rc = flag_layers(s->layers, "--no-rope-freq", m->shape.nope_freq,
                                ap_nope_freq_parse, 0, &want, &have, err);
    if (!rc) {
        ap_model_nope_layers(g, have);
        while (i < s->layers && want[i] == have[i])
            i++;
    }
    if (!rc && i < s->layers) {
        char given[96], give[96];
        snprintf(given, sizeof given, m->shape.nope_freq[0] ? "--no-rope-freq %.64s"
                 : "no --no-rope-freq (every layer rotary, Megatron-LM's default)",
                 m->shape.nope_freq);
        if (!strcmp(s->nope_freq, "?"))
            snprintf(give, sizeof give, "a pattern no --no-rope-freq of 255 characters states");
        else
            snprintf(give, sizeof give, s->nope_freq[0] ? "--no-rope-freq %.64s"
                     : "no --no-rope-freq", s->nope_freq);
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s makes layer %d %s, but in %.96s it "
                 "%s: give %s", given, i, want[i] ? "take no rotary embedding" : "rotary",
                 g->source, have[i] ? "takes none (NoPE)" : "is rotary", give);
        rc = AP_EINPUT;
    }
    free(want);
    free(have);
    return rc;
}

/* The gated MLP's offset and clamp (GPT-OSS's up + 1, swiglu_limit 7):
 * Megatron-Core applies each only where given, so a flag given must be
 * the model's, and a whole script that leaves one out trains without it,
 * another MLP than the model's (check_structure's rule). No cost. */
static int check_glu(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                     char *err)
{
    int whole = ap_megatron_states_model(m);
    const char *flag = "--glu-linear-offset";
    double have = s->glu_offset, want = m->shape.glu_offset;
    int given = m->shape.glu_given & 1;
    if (!(given || whole) || want == have) {
        flag = "--activation-func-clamp-value";
        have = s->glu_clamp;
        want = m->shape.glu_clamp;
        given = m->shape.glu_given & 2;
        if (!(given || whole) || want == have)
            return AP_OK;
    }
    char said[64];
    if (given)
        snprintf(said, sizeof said, "%s %g", flag, want);
    else
        snprintf(said, sizeof said, "no %s (Megatron-LM's default: none)", flag);
    if (have > 0)
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s's gated MLP has %g: give %s "
                 "%g", said, g->source, have, flag, have);
    else
        snprintf(err, AP_ERR_LEN, "--megatron-args: %s, but %s's MLP has none: leave %s "
                 "out", said, g->source, flag);
    return AP_EINPUT;
}

/* The numerics a line states against the model's, where both say them: no
 * cost, but a line whose --rotary-base or --norm-epsilon is not its
 * model's trains another model than the one priced and exported. Left
 * out, they are not checked, since recipes rarely restate them. The base
 * is compared as the export states it, to the nearest integer. */
static int check_numerics(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                          char *err)
{
    double base = floor(s->rope_base + 0.5);
    if (m->shape.rope_base > 0 && s->rope_base > 0 && m->shape.rope_base != base) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --rotary-base %.0f, but %s has a rotary "
                 "base of %.17g: give --rotary-base %.0f or leave it out", m->shape.rope_base,
                 g->source, s->rope_base, base);
    } else if (m->shape.norm_eps > 0 && s->norm_eps > 0 &&
               fabs(m->shape.norm_eps - s->norm_eps) > 1e-9 * s->norm_eps) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --norm-epsilon %g, but %s has a norm "
                 "epsilon of %g: give --norm-epsilon %g or leave it out", m->shape.norm_eps,
                 g->source, s->norm_eps, s->norm_eps);
    } else if (m->shape.rope_scaling && s->rope_scaling != AP_ROPE_SCALING_LLAMA3) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --use-rope-scaling (Llama 3.1's), but "
                 "%s %s", g->source, s->rope_scaling ? "scales its rotary embedding otherwise"
                 : "has no rotary scaling");
    } else if (m->shape.rope_scaling && m->shape.rope_factor > 0 &&
               m->shape.rope_factor != s->rope_factor) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --rope-scaling-factor %g, but %s scales "
                 "by %g", m->shape.rope_factor, g->source, s->rope_factor);
    } else {
        return check_glu(g, m, s, err);
    }
    return AP_EINPUT;
}

static int check_audited(const ap_graph *g, const ap_megatron *m, const ap_model_shape *s,
                         char *err)
{
    if (check_structure(g, m, s, err) || check_layer_flags(g, m, s, err) ||
        check_mla(g, m, s, err) || check_numerics(g, m, s, err))
        return AP_EINPUT;
    int rc = check_windows(g, m, s, err);
    if (!rc)
        rc = check_nope(g, m, s, err);
    if (rc)
        return rc;
    int attention = 0;
    for (int i = 0; i < g->nops; i++)
        attention |= g->ops[i].kind == AP_OP_ATTENTION;
    if (attention && m->shape.flash && (m->shape.flash > 0) != s->flash) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: its attention flags say %s, but %.160s "
                 "was built with %s (a graph is built with one: --flash-attention, or "
                 "`autopar graph --flash-attention`)", m->shape.flash > 0
                 ? "a fused kernel (--attention-backend flash, fused or auto, or "
                   "--use-flash-attn)"
                 : m->shape.flash == -2
                 ? "unfused attention (its flags are Megatron-LM's before 2022, "
                   "which had no fused attention)"
                 : "unfused attention (--attention-backend unfused or local, or "
                   "--transformer-impl local)", g->source,
                 s->flash ? "a fused kernel (flash)" : "unfused attention");
        return AP_EINPUT;
    }
    if (!s->experts)
        return AP_OK;
    if (m->shape.top_k && m->shape.top_k != s->top_k) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --moe-router-topk %d%s, but %s "
                 "routes each token to %d experts", m->shape.top_k, m->shape.top_k == 2
                 ? " (Megatron-LM's default where left out)" : "", g->source, s->top_k);
        return AP_EINPUT;
    }
    long long expert_ffn = s->moe_ffn ? s->moe_ffn : s->ffn;
    if (m->shape.moe_ffn && m->shape.moe_ffn != expert_ffn) {
        snprintf(err, AP_ERR_LEN, "--megatron-args: --moe-ffn-hidden-size %d, but %s "
                 "has %lld expert FFN size", m->shape.moe_ffn, g->source, expert_ffn);
        return AP_EINPUT;
    }
    rc = check_moe_layers(g, m, s, err);
    if (!rc)
        rc = check_groups(g, m, s, err);
    return rc ? rc : check_router_flags(g, m, s, err);
}

/* Token dropping: padding needs a capacity (Megatron-Core asserts it);
 * the flex dispatcher's kernels are dropless, so it is refused there. */
static int check_capacity(const ap_megatron *m, char *err)
{
    if (m->run.pad_capacity && !(m->run.capacity_factor > 0)) {
        snprintf(err, AP_ERR_LEN, "pad_capacity (--moe-pad-expert-input-to-capacity) needs "
                 "capacity_factor (--moe-expert-capacity-factor), as Megatron-Core asserts");
        return AP_EINPUT;
    }
    if (m->run.capacity_factor > 0 && (m->run.dispatcher == AP_DISPATCH_DEEPEP ||
                                       m->run.dispatcher == AP_DISPATCH_HYBRIDEP)) {
        snprintf(err, AP_ERR_LEN, "capacity_factor (--moe-expert-capacity-factor) with the "
                 "flex dispatcher (%s): its kernels route dropless; token dropping is "
                 "priced with the alltoall and allgather dispatchers",
                 ap_dispatcher_name(m->run.dispatcher));
        return AP_EINPUT;
    }
    return AP_OK;
}

static int check_config(const ap_graph *g, const ap_cluster *c, ap_megatron *m,
                        const ap_model_shape *known, ap_pipe_layout *lay, char *err)
{
    int gpus = ap_cluster_gpus(c), L = g->nlayers;
    ap_model_shape shape;
    if (known)
        shape = *known;
    else
        ap_model_shape_of(g, &shape);
    int rc = check_shape(g, m, &shape, err);
    if (rc || (rc = check_audited(g, m, &shape, err)) ||
        (rc = position_table_asserts(g, m, err)))
        return rc;
    if (!fits_gpus(m, gpus, m->dp > 0)) {
        double p = (double)m->tp * m->pp * m->cp;
        if (m->dp > 0)
            snprintf(err, AP_ERR_LEN, "tp*pp*dp*cp = %d*%d*%d*%d = %.0f, not the %d GPUs",
                     m->tp, m->pp, m->dp, m->cp, p * m->dp, gpus);
        else
            snprintf(err, AP_ERR_LEN, "tp*pp*cp = %d*%d*%d = %.0f, more than the %d GPUs",
                     m->tp, m->pp, m->cp, p, gpus);
        return AP_EINPUT;
    }
    if (m->layout[0] && (rc = check_layout(m, L, g->mtp_layers, lay, err)))
        return rc;
    if (m->vpp < 0) { /* layers per virtual stage, from --megatron-args */
        /* validate_args counts the embedding's and the loss's slots under
         * --account-for-*-in-pipeline-split, and asserts the division. */
        long per = -m->vpp, slots = L + m->account_embedding + m->account_loss;
        if (slots % m->pp || (slots / m->pp) % per) {
            if (slots % m->pp)
                snprintf(err, AP_ERR_LEN, "--megatron-args: with "
                         "--num-layers-per-virtual-pipeline-stage, the %ld layers%s do not "
                         "divide into the %d pipeline stages (Megatron-LM asserts it)",
                         slots, slots > L ? " and accounted slots" : "", m->pp);
            else
                snprintf(err, AP_ERR_LEN, "--megatron-args: "
                         "--num-layers-per-virtual-pipeline-stage %ld does not divide the %ld "
                         "layers%s of a pipeline stage (Megatron-LM asserts it)", per,
                         slots / m->pp, slots > L ? " and accounted slots" : "");
            return AP_EINPUT;
        }
        m->vpp = (int)(slots / m->pp / per);
    }
    if (m->vpp == 0)
        m->vpp = 1;
    /* dp left out is what the GPUs leave, which tp*pp*cp must divide. */
    if (!m->dp && gpus % (m->tp * m->pp * m->cp)) {
        snprintf(err, AP_ERR_LEN, "tp*pp*cp = %d*%d*%d = %d does not divide the %d GPUs "
                 "(data parallelism, dp, takes what they leave)", m->tp, m->pp, m->cp,
                 m->tp * m->pp * m->cp, gpus);
        return AP_EINPUT;
    }
    if (!m->dp)
        m->dp = gpus / (m->tp * m->pp * m->cp);
    if (m->gbs <= 0)
        m->gbs = (double)m->mbs * m->dp;
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
    /* Megatron-LM asserts this: userbuffers replace sequence parallelism's
     * all-gathers and reduce-scatters, not the all-reduce. */
    if (m->run.tp_overlap && m->tp > 1 && !m->sp) {
        snprintf(err, AP_ERR_LEN, "tp_overlap: --tp-comm-overlap needs sequence "
                 "parallelism (sp=1, --sequence-parallel) when tp=%d > 1", m->tp);
        return AP_EINPUT;
    }
    rc = check_fp8_params(m, err);
    if (!rc)
        rc = check_bf16_layers(g, m, err);
    if (rc || (rc = check_opt_dtypes(m, err)) || (rc = check_cp_comm(g, m, err)) ||
        (rc = check_window_cp(g, m, err)) || (rc = check_seq(g, m, err)) ||
        (rc = check_runtime_asserts(m, &shape, err)) || (rc = check_param_gather(m, err)) ||
        (rc = check_split(m, L, err)))
        return rc;
    if ((rc = check_recompute(m, L, lay, err)) || (rc = ap_rc_modules_check(g, &m->run, err)))
        return rc;
    if ((rc = check_capacity(m, err)))
        return rc;
    /* Megatron-Core's allgather dispatcher gathers over the TP x EP group,
     * tokens and all; the TP part is priced only as the alltoall
     * dispatcher's gather of the experts' copies. */
    if (m->run.dispatcher == AP_DISPATCH_ALLGATHER && m->tp > 1 && ap_graph_label_of(g, AP_DIM_EXPERTS)) {
        snprintf(err, AP_ERR_LEN, "dispatcher=allgather (--moe-token-dispatcher-type "
                 "allgather, Megatron-Core's default) with tp=%d gathers the tokens over "
                 "the TP x EP group, which autopar prices over the EP group only; "
                 "alltoall and flex are priced at any tp", m->tp);
        return AP_EINPUT;
    }
    double micro = (double)m->mbs * m->dp;
    if (fmod(m->gbs, micro)) {
        snprintf(err, AP_ERR_LEN, "gbs=%.0f is not a multiple of mbs*dp = %.0f",
                 m->gbs, micro);
        return AP_EINPUT;
    }
    if ((rc = check_experts(g, m, err)) || (rc = check_moe_overlap(g, m, err)) ||
        (rc = check_defer_wgrad(m, err)))
        return rc;
    if (m->vpp > 1 && fmod(m->gbs / micro, m->pp)) {
        snprintf(err, AP_ERR_LEN, "interleaving needs the micro-batch count "
                 "gbs/(mbs*dp) to be a multiple of pp=%d", m->pp);
        return AP_EINPUT;
    }
    return AP_OK;
}

/* The configuration checked, m resolved (dp, vpp), and its layout parsed
 * into *lay (zeroed by the caller, freed by it on success). */
static int check(const ap_graph *g, const ap_cluster *c, ap_megatron *m,
                 const ap_model_shape *shape, ap_pipe_layout *lay, char *err)
{
    int rc = check_config(g, c, m, shape, lay, err);
    if (rc)
        ap_layout_free(lay);
    return rc;
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

/* Axis 1's tensor-parallel split of op (tp > 1): column- or row-parallel
 * matmuls, head-parallel attention, vocabulary-parallel embedding and loss,
 * the sequence under sequence parallelism. */
static ap_strategy tensor_parallel(const ap_graph *g, const ap_megatron *m, int opi,
                                   ap_strategy s);

/* An expert op under MoE parallel folding, on the expert mesh: axis 0 the
 * ep ranks split the experts, axis 1 the etp ranks split each expert's FFN
 * as tensor parallelism splits a dense MLP's. */
static ap_strategy expert_layout(const ap_graph *g, const ap_megatron *m, int opi)
{
    ap_strategy s = {{0, 0}, {0, 0}};
    if (m->ep > 1)
        s.axis[0] = ap_graph_label_of(g, AP_DIM_EXPERTS);
    return etp_of(m) > 1 ? tensor_parallel(g, m, opi, s) : s;
}

static ap_strategy layout_of(const ap_graph *g, const ap_megatron *m, int opi)
{
    const ap_op *op = &g->ops[opi];
    char seq = ap_graph_label_of(g, AP_DIM_SEQ);
    ap_strategy s = {{0, 0}, {0, 0}};
    int fold = folded(g, m);
    if (fold && ap_expert_op(g, opi))
        return expert_layout(g, m, opi);
    /* The router is no expert op: each rank routes its own tokens over all
     * the experts, and the dispatch sends them on. */
    int expert_op = !fold && m->ep > 1 && ap_expert_op(g, opi);
    if (m->dp > 1)
        s.axis[0] = expert_op ? first_of(g, op->iter, is_experts)
                              : first_of(g, op->iter, is_batch);
    if (m->cp > 1)
        s.axis[0] = strchr(op->iter, seq) ? seq : 0;
    if (m->tp == 1)
        return s;
    return tensor_parallel(g, m, opi, s);
}

static ap_strategy tensor_parallel(const ap_graph *g, const ap_megatron *m, int opi,
                                   ap_strategy s)
{
    const ap_op *op = &g->ops[opi];
    const char *out = op->noutputs ? g->tensors[op->outputs[0]].shape : "";
    char seq = ap_graph_label_of(g, AP_DIM_SEQ);
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
        else if (m->sp && seq && (strchr(out, seq) ||
                                  (op->kind == AP_OP_DISPATCH && strchr(op->iter, seq))))
            s.axis[1] = seq; /* a dispatch sends its sequence shard */
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

void ap_megatron_drop_unsupported(const ap_graph *g, ap_megatron *m)
{
    char err[AP_ERR_LEN];
    m->run.tp_overlap = m->run.tp_overlap && m->tp > 1 && m->sp;
    if (m->run.moe_a2a_overlap && check_moe_overlap(g, m, err))
        m->run.moe_a2a_overlap = m->run.delay_wgrad = 0;
    if (m->pp < 2)
        m->run.defer_wgrad = 0;
    if (m->cp <= 1 || check_cp_comm(g, m, err))
        m->run.cp_comm = AP_CP_P2P;
    if (check_opt_dtypes(m, err))
        memset(&m->run.opt, 0, sizeof m->run.opt);
    /* The modules are selective recomputation's: a configuration that
     * recomputes nothing or everything has none; under the all-to-all
     * overlap Megatron-Core refuses moe. */
    if (m->recompute != AP_RECOMPUTE_SELECTIVE)
        m->run.recompute_modules = 0;
    if (m->run.moe_a2a_overlap)
        m->run.recompute_modules =
            ap_rc_modules_setting(ap_run_rc_modules(&m->run) & ~(unsigned)AP_MODULE_MOE);
}

/* Megatron-LM's chunks without a layout: each stage's layers split evenly
 * over its vpp chunks, or under the split that counts the embedding and
 * the loss as layers, every chunk the same slots, the embedding's taken
 * from the first and the loss's from the last
 * (get_transformer_layer_offset with account_for_*_in_pipeline_split). */
static int megatron_chunks(const ap_megatron *m, int L, ap_pipe_layout *lay)
{
    int n = m->pp * m->vpp, *stages = malloc(sizeof(int) * (size_t)m->pp);
    lay->layers = calloc((size_t)n, sizeof(int));
    if (!lay->layers || !stages) {
        free(stages);
        return -1;
    }
    lay->nstages = n;
    for (int s = 0; s < m->pp; s++)
        stages[s] = stage_layers(m, L, s);
    int e = accounted(m) && m->account_embedding, l = accounted(m) && m->account_loss;
    ap_layout_megatron_split(stages, m->pp, m->vpp, e, l, lay->layers);
    free(stages);
    return 0;
}

int ap_megatron_plan(const ap_graph *g, const ap_cluster *c,
                     const ap_megatron *cfg, ap_plan *p, char *err)
{
    return ap_megatron_plan_shaped(g, c, cfg, NULL, 0, p, err);
}

int ap_megatron_plan_shaped(const ap_graph *g, const ap_cluster *c,
                            const ap_megatron *cfg, const ap_model_shape *shape,
                            double bound, ap_plan *p, char *err)
{
    ap_megatron m = *cfg;
    memset(p, 0, sizeof *p);
    ap_pipe_layout lay = {0};
    int rc = check(g, c, &m, shape, &lay, err);
    if (rc)
        return rc;
    ap_parts pt;
    if ((rc = ap_parts_build(g, &pt, err))) {
        ap_layout_free(&lay);
        return rc;
    }
    snprintf(p->model, sizeof p->model, "%s", g->name);
    p->gpus = ap_cluster_gpus(c);
    p->gpus_per_node = c->gpus_per_node;
    p->global_batch = m.gbs;
    p->micro_batch = (double)m.mbs * m.dp;
    p->nmicro = (int)(m.gbs / p->micro_batch);
    p->schedule = m.vpp > 1 ? AP_SCHED_INTERLEAVED : AP_SCHED_1F1B;
    p->vchunks = m.vpp;
    p->zero = m.zero;
    p->serial_grad_sync = !m.overlap_grad;
    p->serial_param_gather = !ap_megatron_overlap_param(&m);
    p->run = m.run;
    p->run.cp_comm = m.cp > 1 ? m.run.cp_comm : AP_CP_P2P;
    p->recompute_method = m.recompute_method;
    p->recompute_layers = m.recompute_layers;
    /* With tp = 1 there is nothing to overlap: the setting is dropped, and
     * the plan and its exports run without it (Megatron-LM turns sequence
     * parallelism off at tp = 1 and would then refuse the flag). */
    p->run.tp_overlap = m.run.tp_overlap && m.tp > 1;
    p->nstages = m.pp;
    p->nclasses = pt.nclasses;
    p->stages = calloc((size_t)m.pp, sizeof *p->stages);
    p->classes = malloc(sizeof(int) * (size_t)pt.nclasses);
    if (!p->stages || !p->classes)
        goto oom;
    memcpy(p->classes, pt.classes, sizeof(int) * (size_t)pt.nclasses);
    /* Under interleaving every chunk is the plan's, a layout's or
     * Megatron-LM's own split, so that each is priced with its layers, the
     * embedding on the first and the head on the last. Without it a stage
     * is one chunk and its layers one span, as any uneven stage. */
    if (!lay.layers && m.vpp > 1 && megatron_chunks(&m, g->nlayers, &lay))
        goto oom;
    int per = p->gpus / m.pp, next = 0;
    for (int s = 0; s < m.pp; s++) {
        ap_stage *st = &p->stages[s];
        st->first_layer = next;
        st->nlayers = lay.layers ? lay.layers[s] : stage_layers(&m, g->nlayers, s);
        next += st->nlayers;
        st->has_pre = s == 0;
        st->has_post = s == m.pp - 1;
        st->first_rank = s * per;
        st->ngpus = per;
        st->recompute = m.recompute;
        /* Axis 0 splits the batch (dp) or the sequence (cp); with both,
         * the stage is dp replicas of a (cp, tp) mesh, replica j at ranks
         * first + j*cp*tp as in Megatron's order (tp, then cp, then dp). */
        if (m.cp > 1 && m.dp > 1)
            ap_mesh_init_replicated(&st->mesh, m.dp, m.cp, m.tp, st->first_rank,
                                    c->gpus_per_node);
        else
            ap_mesh_init(&st->mesh, m.dp * m.cp, m.tp, st->first_rank, c->gpus_per_node);
        /* Megatron-Core's expert ranks within a stage: etp consecutive,
         * then ep of those groups, then the edp copies. */
        if (folded(g, &m))
            ap_mesh_fold(&st->mesh, m.ep, m.etp, per / (m.ep * m.etp));
        st->blocks = calloc((size_t)pt.nblocks, sizeof *st->blocks);
        st->point = calloc((size_t)pt.nblocks, sizeof *st->point);
        if (!st->blocks || !st->point)
            goto oom;
        for (int b = 0; b < pt.nblocks; b++)
            if (fill_block(g, &m, &pt, b, &st->blocks[b]))
                goto oom;
    }
    /* The chunks give each stage its layers and first layer. */
    if (lay.layers && m.vpp > 1) {
        ap_plan_set_chunks(p, lay.layers);
        lay.layers = NULL;
    }
    ap_parts_free(&pt);
    ap_layout_free(&lay);
    rc = ap_plan_evaluate_within(g, c, p, bound, err);
    if (rc)
        ap_plan_free(p);
    return rc;
oom:
    ap_parts_free(&pt);
    ap_layout_free(&lay);
    ap_plan_free(p);
    snprintf(err, AP_ERR_LEN, "out of memory building the Megatron plan");
    return AP_EINTERNAL;
}
