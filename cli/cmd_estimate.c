/* cmd_estimate.c -- `autopar estimate`: price a hand-tuned Megatron-LM
 * configuration with the planner's own cost model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "planner/planner.h"

static const char usage_text[] =
    "usage: autopar estimate MODEL --gpus N (--megatron SPEC | --megatron-args \"FLAGS\")\n"
    "       autopar estimate --gpus N --megatron-args \"SCRIPT'S FLAGS\"\n"
    "                        [--gpus-per-node G] [--cluster NAME|FILE] [--global-batch B]\n"
    "                        [--seq N] [--json]\n"
    "                        [--flash-attention on|off] [--dropout on|off] [--mtp-layers N]\n"
    "                        [--emit FORMAT] [-o plan.json]\n"
    "                        [--trace timeline.json]\n"
    "\n"
    "Without MODEL, --megatron-args must state the model, as a Megatron-LM\n"
    "script does (docs/megatron.md, \"A script without MODEL\"); a torchrun\n"
    "line in it gives the GPUs (--nproc-per-node x --nnodes) unless --gpus does.\n"
    "\n"
    "Maps a Megatron-LM configuration onto a plan (tensor-parallel attention and\n"
    "MLP, sequence parallelism, even layer split or first/last stages of their\n"
    "own, 1F1B or interleaved schedule) and predicts its step time, throughput\n"
    "and memory.\n"
    "\n"
    AP_CLI_HELP_GPUS
    "  --cluster NAME|FILE    a preset (a100-80g, a100-40g, h100-sxm, h200, b200,\n"
    "                         h800) or a cluster file from `autopar profile`\n"
    "                         (default h100-sxm)\n"
    "  --megatron SPEC        tp=8,pp=4,dp=4,cp=1,ep=1,etp=1,vpp=2,mbs=1,gbs=512,sp=1,\n"
    "                         recompute=none|selective|full,zero=0..3,\n"
    "                         overlap_grad=0|1,overlap_param=0|1,first=N,last=N,\n"
    "                         fp8=0|1,account_embedding=0|1,account_loss=0|1,\n"
    "                         tp_overlap=0|1,fp8_param_gather=0|1,\n"
    "                         cross_entropy=unfused|native|te,\n"
    "                         recompute_method=uniform|block,recompute_layers=N,\n"
    "                         grad_fp32=0|1,moe_a2a_overlap=0|1,delay_wgrad=0|1,\n"
    "                         cp_comm=p2p|allgather|a2a,\n"
    "                         main_params=fp32|fp16|none|remainder,\n"
    "                         exp_avg=fp32|fp16|bf16|fp8,\n"
    "                         exp_avg_sq=fp32|fp16|bf16|fp8,\n"
    "                         defer_wgrad=0|1,wgrad_deferral_limit=N,ddp_bucket=N,\n"
    "                         no_grad_fusion=0|1,tp_sync=0|1,\n"
    "                         layout=Et*4|t*4|t*4|t*4L,\n"
    "                         recompute_modules=core_attn+mlp+...,\n"
    "                         fp8_recipe=delayed|tensorwise|blockwise|mxfp8,\n"
    "                         bf16_first=N,bf16_last=N,\n"
    "                         cuda_graph=none|local|transformer_engine,\n"
    "                         dispatcher=alltoall|deepep|hybridep|allgather,\n"
    "                         shared_overlap=0|1,capacity_factor=F,pad_capacity=0|1,\n"
    "                         sequential_experts=0|1\n"
    "                         (ep experts' parallelism and etp their tensor\n"
    "                         parallelism, folded over the tp, cp and dp ranks\n"
    "                         as Megatron-Core lays them out, etp defaulting to\n"
    "                         tp; a key given again overrides, as a repeated\n"
    "                         Megatron-LM flag does; dp defaults to\n"
    "                         GPUs/(tp*pp*cp); gbs to 512,\n"
    "                         where --megatron-args without --global-batch-size\n"
    "                         takes Megatron-LM's mbs*dp; zero to 1;\n"
    "                         overlap_grad to 1: the gradient reduction overlaps\n"
    "                         the backward, as --overlap-grad-reduce;\n"
    "                         overlap_param to overlap_grad under zero=1: the\n"
    "                         distributed optimizer's parameter all-gather runs\n"
    "                         in the next forward, its first bucket exposed, as\n"
    "                         --overlap-param-gather (0: all of it exposed after\n"
    "                         the optimizer step; 1 needs zero=1 and\n"
    "                         overlap_grad=1); first and\n"
    "                         last give the first and last stage N layers and\n"
    "                         the other stages split the rest evenly; layout\n"
    "                         places every layer as\n"
    "                         --pipeline-model-parallel-layout does: '|' between\n"
    "                         the pp*vpp virtual stages (stage c*pp+r is rank\n"
    "                         r's chunk c), E the embedding, t a layer, L the\n"
    "                         loss, (..)*n and x*n repeats; it sets vpp itself\n"
    "                         and takes no first, last or account_*; fp8=1 runs\n"
    "                         the transformer layers' linear layers in FP8 as\n"
    "                         Transformer Engine does, as --fp8-format hybrid;\n"
    "                         refused on a GPU without FP8, such as the A100;\n"
    "                         account_embedding=1 and account_loss=1 count the\n"
    "                         embedding and the loss as a layer each in the\n"
    "                         split, so the first and last stage hold a layer\n"
    "                         fewer, as --account-for-embedding-in-pipeline-split\n"
    "                         and --account-for-loss-in-pipeline-split;\n"
    "                         tp_overlap=1 overlaps the sequence-parallel\n"
    "                         all-gathers and reduce-scatters with the linear\n"
    "                         layers' GEMMs as --tp-comm-overlap does (Transformer\n"
    "                         Engine userbuffers); needs sp=1 when tp > 1, and\n"
    "                         changes nothing at tp=1; fp8_param_gather=1 holds\n"
    "                         the FP8 linear layers' weights in FP8 with no bf16\n"
    "                         copy and gathers them in FP8 after the optimizer\n"
    "                         step, as --fp8-param-gather; needs fp8=1 and\n"
    "                         zero >= 1; moe_a2a_overlap=1 runs each steady-state\n"
    "                         forward merged with a backward so that the expert\n"
    "                         all-to-alls of one hide behind the other's compute,\n"
    "                         as --overlap-moe-expert-parallel-comm (needs ep > 1,\n"
    "                         vpp > 1 when pp > 1, no full recomputation);\n"
    "                         delay_wgrad=1 with it delays the experts' weight\n"
    "                         gradients, as --delay-wgrad-compute;\n"
    "                         defer_wgrad=1 runs the output layer's weight\n"
    "                         gradients of the first wgrad_deferral_limit\n"
    "                         micro-batches (0: all) after the last stage's last\n"
    "                         pass, as --defer-embedding-wgrad-compute (pp > 1);\n"
    "                         fp8_recipe=tensorwise scales FP8 tensors by their\n"
    "                         current amax, as --fp8-recipe tensorwise;\n"
    "                         blockwise and mxfp8 scale blocks of them (mxfp8 on\n"
    "                         Blackwell only; blockwise GEMMs priced at the FP8\n"
    "                         rate, with a caveat on Hopper);\n"
    "                         capacity_factor=F drops the experts' tokens beyond F\n"
    "                         times their even share (pad_capacity=1 pads to it),\n"
    "                         as --moe-expert-capacity-factor and\n"
    "                         --moe-pad-expert-input-to-capacity;\n"
    "                         bf16_first=N,bf16_last=M keep the first N and\n"
    "                         last M layers in bf16 under FP8 (not delayed), as\n"
    "                         --first-last-layers-bf16;\n"
    "                         shared_overlap=1 runs the shared experts beside the\n"
    "                         token exchanges, as --moe-shared-expert-overlap;\n"
    "                         sequential_experts=1 runs each GPU's experts one\n"
    "                         after another, as Megatron-Core's SequentialMLP\n"
    "                         (no --moe-grouped-gemm);\n"
    "                         dispatcher=deepep or hybridep prices Megatron-Core's\n"
    "                         flex token dispatcher, each token sent once to each\n"
    "                         node and GPU holding one of its experts;\n"
    "                         cuda_graph prices as without graphs, with a caveat,\n"
    "                         as --cuda-graph-impl;\n"
    "                         recompute_modules (with recompute=selective) names\n"
    "                         the Megatron-Core modules recomputed, joined by\n"
    "                         '+': core_attn (the default), mlp, moe_act,\n"
    "                         layernorm, mla_up_proj, moe, shared_experts, as\n"
    "                         --recompute-modules;\n"
    "                         no_grad_fusion=1 stores each weight gradient and\n"
    "                         adds it into main_grad in a kernel of its own, as\n"
    "                         --no-gradient-accumulation-fusion (Megatron FSDP\n"
    "                         needs it);\n"
    "                         tp_sync=1 waits for a column-parallel layer's\n"
    "                         input-gradient reduction and sequence-parallel\n"
    "                         re-gather, as Megatron-LM did before 2022; by\n"
    "                         default they run beside its GEMMs, as Transformer\n"
    "                         Engine and Megatron-Core run them;\n"
    "                         cross_entropy prices the loss as Megatron-LM's\n"
    "                         default unfused kernels, as\n"
    "                         --cross-entropy-loss-fusion (native, Megatron-Core's\n"
    "                         torch.compile'd steps) or as that with\n"
    "                         --cross-entropy-fusion-impl te (Transformer Engine's\n"
    "                         Triton kernels, which also keep less for backward);\n"
    "                         grad_fp32=1 holds the gradients in fp32 (4 bytes a\n"
    "                         parameter) and reduces them in fp32, as Megatron-LM\n"
    "                         does under --bf16 without --grad-reduce-in-bf16;\n"
    "                         0, the default, 2-byte gradients; main_params,\n"
    "                         exp_avg and exp_avg_sq keep the optimizer's main\n"
    "                         weights and moments in that dtype, as\n"
    "                         --use-precision-aware-optimizer with\n"
    "                         --main-params-dtype, --exp-avg-dtype and\n"
    "                         --exp-avg-sq-dtype (needs zero >= 1; fp32, the\n"
    "                         default, 12 bytes a parameter; none: no main\n"
    "                         weights, apex's optimizer under NeMo's optim dtype\n"
    "                         bf16, which Megatron-LM cannot run))\n"
    "  --megatron-args FLAGS  the real flags, e.g. \"--tensor-model-parallel-size 8\n"
    "                         --pipeline-model-parallel-size 4 --sequence-parallel\n"
    "                         --micro-batch-size 1 --global-batch-size 512\n"
    "                         --use-distributed-optimizer --overlap-grad-reduce\n"
    "                         --overlap-param-gather\n"
    "                         --decoder-first-pipeline-num-layers 7\n"
    "                         --fp8-format hybrid --fp8-param-gather\n"
    "                         --tp-comm-overlap --cross-entropy-loss-fusion\n"
    "                         --cross-entropy-fusion-impl te\"; a flag left out means\n"
    "                         Megatron-LM's default (no distributed optimizer,\n"
    "                         gradient reduction after the backward, parameter\n"
    "                         all-gather after the step, bf16, no TP\n"
    "                         overlap, bf16 weights, unfused loss;\n"
    "                         --cross-entropy-fusion-impl without\n"
    "                         --cross-entropy-loss-fusion changes nothing, as in\n"
    "                         Megatron-LM); --bf16 without --grad-reduce-in-bf16\n"
    "                         (or --main-grads-dtype bf16) is grad_fp32=1, as is\n"
    "                         --accumulate-allreduce-grads-in-fp32 (also under\n"
    "                         --fp16); --tp-comm-overlap's\n"
    "                         tuning flags (--tp-comm-overlap-cfg and the like)\n"
    "                         are read past: TE's default configuration is priced;\n"
    "                         --recompute-activations is selective recomputation;\n"
    "                         --recompute-granularity full takes\n"
    "                         --recompute-method uniform|block and\n"
    "                         --recompute-num-layers N (groups of N, or the\n"
    "                         first N layers of each model chunk);\n"
    "                         the model's flags (--num-layers, --hidden-size,\n"
    "                         --num-attention-heads, --num-query-groups with\n"
    "                         --group-query-attention, --ffn-hidden-size,\n"
    "                         --num-experts) must match MODEL;\n"
    "                         --expert-model-parallel-size and\n"
    "                         --expert-tensor-parallel-size are ep and etp;\n"
    "                         --seq-length\n"
    "                         builds it at that length, --hidden-dropout and\n"
    "                         --attention-dropout above 0 (0.1 where one is\n"
    "                         left out, Megatron-LM's default) build it with\n"
    "                         dropout; --attention-backend unfused or local and\n"
    "                         --transformer-impl local build it without flash\n"
    "                         attention (a built MODEL must agree); MoE is\n"
    "                         priced with --moe-grouped-gemm, which more than\n"
    "                         one expert per rank needs, and the dispatcher\n"
    "                         --moe-token-dispatcher-type says: alltoall, flex\n"
    "                         (DeepEP or HybridEP) or allgather (Megatron-Core's\n"
    "                         default, at tp 1); --use-megatron-fsdp with\n"
    "                         --data-parallel-sharding-strategy no_shard, optim,\n"
    "                         optim_grads or optim_grads_params is zero=0..3,\n"
    "                         --use-torch-fsdp2 zero=3; --cp-comm-type p2p,\n"
    "                         allgather or a2a (cp_comm), --recompute-modules,\n"
    "                         --fp8-recipe (delayed, tensorwise, blockwise,\n"
    "                         mxfp8) and token\n"
    "                         dropping are priced; CUDA graphs are priced as\n"
    "                         without them, with a caveat; flags that change\n"
    "                         the step in ways autopar does not price (CPU\n"
    "                         offloading, another optimizer, ...) are refused\n"
    "                         naming the flag (docs/megatron.md); other flags\n"
    "                         (data, logging) are read past\n"
    "  --global-batch B       sequences per step, where the configuration has no\n"
    "                         gbs (the two must agree where both are given)\n"
    "  --seq N, --flash-attention on|off, --dropout on|off, --mtp-layers N\n"
    "                         how a Hugging Face config is built: tokens per\n"
    "                         sequence (default the config's context length,\n"
    "                         at most 4096), a fused attention kernel (default\n"
    "                         on), dropout after attention and MLP (default off),\n"
    "                         multi-token-prediction modules (default none;\n"
    "                         --megatron-args' --mtp-num-layers sets it);\n"
    "                         --seq and --flash-attention also set a\n"
    "                         project-format model's seq dimension and\n"
    "                         attention ops, whose dropout is its own\n"
    "                         (--dropout is refused)\n"
    "  --json                 print the prediction as JSON (\"fp8\" says the\n"
    "                         linear layers' precision, \"tp_comm_overlap\"\n"
    "                         whether TP communication overlaps GEMMs,\n"
    "                         \"fp8_param_gather\": true FP8 primary weights,\n"
    "                         \"cross_entropy\" the loss's kernels when fused,\n"
    "                         \"grad_reduce_in_fp32\" the gradients' dtype and\n"
    "                         \"gradient_bytes\" theirs per GPU)\n"
    "  --emit FORMAT          what to print: table (default), json (the whole\n"
    "                         plan.json), megatron, torchtitan, deepspeed (of\n"
    "                         --json and --emit, the last given wins)\n"
    "  -o FILE                also write the configuration's plan.json to FILE\n"
    "  --trace FILE           write the simulated step as Chrome Trace Event JSON\n";

int ap_cmd_estimate(int argc, char **argv)
{
    ap_cli_common cm;
    ap_cli_common_default(&cm);
    ap_megatron m;
    ap_megatron_default(&m);
    m.gbs = 0; /* unset: --global-batch decides (ap_cli_settle_batch) */
    int json = 0, have = 0, args = 0, json_last = 0;
    ap_cli_output out;
    ap_cli_output_default(&out);
    char err[AP_ERR_LEN];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = ap_cli_common_output_arg(&cm, &out, "estimate", a, v);
        if (used < 0)
            return 2;
        if (used > 0) {
            json_last &= strcmp(a, "--emit") != 0;
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            json_last = 1;
        } else if ((used = ap_cli_megatron_arg("estimate", a, v, &m, &have)) != 0) {
            if (used < 0)
                return -used;
            args = !strcmp(a, "--megatron-args");
            i++;
        } else if (ap_cli_model_arg(&cm, "estimate", a, usage_text)) {
            return 2;
        }
    }
    /* Of --json and --emit the last wins, as in plan. */
    if (json && !json_last)
        json = 0;
    else if (json)
        out.emit = "table";
    /* Without MODEL, --megatron-args must state the model. */
    if (!have || (!cm.model && !args))
        return ap_cli_usage_error("estimate", !have ? "a configuration (--megatron or "
                                  "--megatron-args) is required" : "a model is required "
                                  "(MODEL, or --megatron-args that state one)", usage_text);
    if (ap_cli_output_check(&out, "estimate"))
        return 2;
    if (ap_cli_settle_batch(&cm, "estimate", args, &m) ||
        ap_cli_megatron_build(&cm, &m, "estimate") ||
        ap_cli_megatron_gpus(&cm, &m, "estimate"))
        return 2;
    ap_graph *g;
    ap_cluster c;
    int rc = ap_cli_setup(&cm, "estimate", &g, &c);
    if (rc)
        return rc;
    ap_plan p;
    rc = ap_megatron_plan(g, &c, &m, &p, err);
    if (rc) {
        fprintf(stderr, "autopar estimate: %s\n", err);
    } else {
        /* --json prints the prediction alone. */
        char *pred = json ? ap_plan_prediction_to_json(&p) : NULL;
        rc = json && !pred ? 1
                           : ap_cli_output_plan(&out, "estimate", g, &p, NULL, pred);
        free(pred);
        if (!rc && p.max_mem_bytes > p.hbm_limit)
            fprintf(stderr, "autopar estimate: this configuration needs %.1f GiB per "
                    "GPU, %.1f GiB more than the %.1f GiB usable\n",
                    p.max_mem_bytes / (1 << 30), (p.max_mem_bytes - p.hbm_limit) / (1 << 30),
                    p.hbm_limit / (1 << 30));
        ap_plan_free(&p);
    }
    ap_graph_free(g);
    ap_cluster_free(&c);
    return rc;
}
