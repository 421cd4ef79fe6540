#!/bin/sh
# The Megatron-LM flags that change the step's time or memory beyond the
# layout (docs/megatron.md): each is priced as the setting it maps to,
# which is checked here by pricing both, or refused with exit 2 and a
# message that names the flag.
set -u
. "$(dirname "$0")/lib.sh"
llama=$src/examples/hf/llama-3-8b.json
layout="--tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 64"
spec="tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0"

est() { # model gpus args...
    m=$1 n=$2
    shift 2
    "$bin" estimate "$m" --gpus "$n" --json "$@" 2>/dev/null
}
# same WHAT model gpus "flags" "spec-or-flags" [extra estimate args for the second]
same() {
    what=$1 m=$2 n=$3 a=$4 b=$5
    shift 5
    x=$(est "$m" "$n" --megatron-args "$a")
    case $b in
    --*) y=$(est "$m" "$n" "$@" --megatron-args "$b") ;;
    *) y=$(est "$m" "$n" "$@" --megatron "$b") ;;
    esac
    echo "$x" | grep -q '"step_time_s"' && [ "$x" = "$y" ] && ok ||
        bad "$what: '$a' prices as '$b' $*: $x vs $y"
}
# refused WANT model gpus "flags" [extra estimate args]
refused() {
    want=$1 m=$2 n=$3 a=$4
    shift 4
    out=$("$bin" estimate "$m" --gpus "$n" "$@" --megatron-args "$a" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" && ok ||
        bad "'$a' -> rc $rc, '$out' lacks '$want'"
}

# Attention. Megatron's default (auto), flash, fused and --use-flash-attn
# run a fused kernel, as autopar's default graph; unfused, local and the
# local layers keep the s x s matrix: a Hugging Face config is built with
# --flash-attention off.
for f in "--attention-backend auto" "--attention-backend flash" \
    "--attention-backend fused" "--use-flash-attn" "--transformer-impl transformer_engine"; do
    same "attention $f" "$llama" 16 "$layout $f" "$spec"
done
for f in "--attention-backend unfused" "--attention-backend local" "--transformer-impl local"; do
    same "attention $f" "$llama" 16 "$layout $f" "$spec" --flash-attention off
done
a=$(est "$llama" 16 --megatron-args "$layout --attention-backend unfused")
b=$(est "$llama" 16 --megatron-args "$layout")
[ "$a" != "$b" ] && ok || bad "unfused attention changes the price: $a"
refused "--flash-attention on and --megatron-args disagree" "$llama" 16 \
    "$layout --attention-backend unfused" --flash-attention on
refused "--flash-attention off and --megatron-args disagree" "$llama" 16 \
    "$layout --use-flash-attn" --flash-attention off
refused "--attention-backend unfused: contradicts --use-flash-attn" "$llama" 16 \
    "$layout --use-flash-attn --attention-backend unfused"
refused "--transformer-impl local with --attention-backend flash" "$llama" 16 \
    "$layout --transformer-impl local --attention-backend flash"
refused "--transformer-impl local: has no FP8 layers" "$llama" 16 \
    "$layout --transformer-impl local --fp8-format hybrid"
refused "--attention-backend unfused with --context-parallel-size 2" "$llama" 16 \
    "$layout --context-parallel-size 2 --attention-backend unfused"
refused "--attention-backend: bad value \"sdpa\"" "$llama" 16 "$layout --attention-backend sdpa"
# A built graph keeps its kernel: gpt-tiny.json has unfused attention.
tiny=$src/examples/gpt-tiny.json
one="--micro-batch-size 1 --global-batch-size 8"
same "a graph built unfused" "$tiny" 1 "$one --attention-backend unfused" "$one"
refused "its attention flags say a fused kernel (--attention-backend flash, fused or auto, or --use-flash-attn), but $tiny was built with unfused attention" \
    "$tiny" 1 "$one --attention-backend flash"

# Mixture of experts: Megatron-Core's defaults are the allgather dispatcher
# and SequentialMLP; autopar prices the allgather dispatcher at tp 1,
# alltoall and flex, and TE's grouped GEMM or SequentialMLP. Mixtral
# on ep=2 holds 4 experts a rank.
moe=$src/examples/hf/mixtral-8x7b.json
mlay="--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2
 --micro-batch-size 1 --global-batch-size 64 --num-experts 8"
mspec="tp=2,sp=1,ep=2,mbs=1,gbs=64,zero=0,overlap_grad=0"
same "alltoall with grouped GEMM" "$moe" 16 \
    "$mlay --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-router-topk 2 --moe-ffn-hidden-size 14336 --moe-permute-fusion" "$mspec"
# The allgather dispatcher, Megatron-Core's default: priced at tp 1 (every
# token gathered over the EP group, the outputs reduce-scattered back),
# refused above, where it gathers over TP x EP.
refused "dispatcher=allgather (--moe-token-dispatcher-type allgather, Megatron-Core's default) with tp=2" \
    "$moe" 16 "$mlay --moe-grouped-gemm"
refused "dispatcher=allgather" "$moe" 16 \
    "$mlay --moe-grouped-gemm --moe-token-dispatcher-type allgather"
g1="--expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --num-experts 8 --moe-grouped-gemm --moe-router-topk 2"
# Megatron-Core's TransformerConfig runs the all-to-all overlap with the
# alltoall and flex dispatchers only: allgather, named or by default, is
# refused, flags and spec alike.
refused "moe_a2a_overlap: --overlap-moe-expert-parallel-comm with dispatcher=allgather" \
    "$moe" 16 "$g1 --overlap-moe-expert-parallel-comm"
refused "Megatron-Core's TransformerConfig asserts \"overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher\"" \
    "$moe" 16 "$g1 --moe-token-dispatcher-type allgather --overlap-moe-expert-parallel-comm"
out=$("$bin" estimate "$src/examples/hf/qwen3-30b-a3b.json" --gpus 32 --megatron \
    "tp=1,pp=1,mbs=1,gbs=64,ep=8,moe_a2a_overlap=1,dispatcher=allgather" 2>&1 >/dev/null)
[ $? -eq 2 ] && echo "$out" | grep -qF "with dispatcher=allgather" && ok ||
    bad "moe_a2a_overlap=1 with dispatcher=allgather: $out"
est "$moe" 16 --megatron-args "$g1 --moe-token-dispatcher-type alltoall --overlap-moe-expert-parallel-comm" |
    grep -q '"step_time_s"' && ok || bad "the overlap under alltoall is priced"
same "allgather by default" "$moe" 16 "$g1" "ep=8,mbs=1,gbs=64,zero=0,overlap_grad=0,dispatcher=allgather"
same "allgather by name" "$moe" 16 "$g1 --moe-token-dispatcher-type allgather" \
    "ep=8,mbs=1,gbs=64,zero=0,overlap_grad=0,dispatcher=allgather"
a=$(est "$moe" 16 --megatron "ep=8,mbs=1,gbs=64,dispatcher=allgather" | grep '"step_time_s"' | tr -dc '0-9.')
b=$(est "$moe" 16 --megatron "ep=8,mbs=1,gbs=64" | grep '"step_time_s"' | tr -dc '0-9.')
awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > b) }' && ok || bad "allgather is not slower than alltoall at top 2 of 8: $a vs $b"
# The flex dispatcher: DeepEP where no backend is named (or with the older
# --moe-enable-deepep), HybridEP where --moe-flex-dispatcher-backend says.
same "flex with DeepEP" "$moe" 16 \
    "$mlay --moe-grouped-gemm --moe-token-dispatcher-type flex --moe-enable-deepep --moe-router-topk 2" \
    "$mspec,dispatcher=deepep"
same "flex with its default backend" "$moe" 16 \
    "$mlay --moe-grouped-gemm --moe-token-dispatcher-type flex --moe-router-topk 2" \
    "$mspec,dispatcher=deepep"
same "flex with HybridEP" "$moe" 16 \
    "$mlay --moe-grouped-gemm --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-router-topk 2" \
    "$mspec,dispatcher=hybridep"
# DeepSeek-V3 routes within 4 of 8 expert groups: the flex dispatcher's
# traffic depends on it, so the flags must say so; they must never
# contradict the model; the alltoall dispatcher is priced without them.
dsv3=$src/examples/hf/deepseek-v3.json
dlay="--tensor-model-parallel-size 8 --sequence-parallel --pipeline-model-parallel-size 2
 --decoder-first-pipeline-num-layers 30 --expert-model-parallel-size 8
 --expert-tensor-parallel-size 1 --num-experts 256 --moe-router-topk 8 --moe-grouped-gemm
 --micro-batch-size 1 --global-batch-size 16"
refused "no --moe-router-num-groups (Megatron-LM then routes over all experts), but" \
    "$dsv3" 16 "$dlay --moe-token-dispatcher-type flex" --seq 1024
a=$(est "$dsv3" 16 --seq 1024 --megatron-args "$dlay --moe-token-dispatcher-type flex --moe-router-num-groups 8 --moe-router-group-topk 4")
echo "$a" | grep -q '"step_time_s"' && ok || bad "DeepSeek-V3 with its groups: $a"
# A spec has no routing keys: it runs the model's groups, and prices as the
# flags that state them.
b=$(est "$dsv3" 16 --seq 1024 --megatron \
    "tp=8,sp=1,pp=2,first=30,ep=8,etp=1,mbs=1,gbs=16,zero=0,overlap_grad=0,dispatcher=deepep")
echo "$b" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && ok ||
    bad "a spec with the flex dispatcher does not route as the model: $b"
refused "--moe-router-num-groups 8 --moe-router-group-topk 2, but" "$dsv3" 16 \
    "$dlay --moe-token-dispatcher-type flex --moe-router-num-groups 8 --moe-router-group-topk 2" --seq 1024
a=$(est "$dsv3" 16 --seq 1024 --megatron-args "$dlay --moe-token-dispatcher-type alltoall")
echo "$a" | grep -q '"step_time_s"' && ok || bad "DeepSeek-V3 alltoall without groups: $a"
# The allgather dispatcher (at tp 1) gathers every token whatever its
# groups: priced without the flags too.
agl="--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 30
 --expert-model-parallel-size 8 --num-experts 256 --moe-router-topk 8 --moe-grouped-gemm
 --micro-batch-size 1 --global-batch-size 16 --moe-token-dispatcher-type allgather"
a=$(est "$dsv3" 16 --seq 1024 --megatron-args "$agl")
echo "$a" | grep -q '"step_time_s"' && ok || bad "DeepSeek-V3 allgather without groups: $a"
# Token dropping: a capacity factor prices the experts' copies at min(F, 1)
# of the dropless ones, padded at F; padding needs a factor; the flex
# dispatcher is dropless.
mcap="$mlay --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-router-topk 2"
same "--moe-expert-capacity-factor" "$moe" 16 "$mcap --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity" \
    "$mspec,capacity_factor=1.25,pad_capacity=1"
same "a capacity of 1, unpadded, is dropless" "$moe" 16 "$mcap --moe-expert-capacity-factor 1.0" "$mspec"
refused "pad_capacity (--moe-pad-expert-input-to-capacity) needs capacity_factor" "$moe" 16 \
    "$mcap --moe-pad-expert-input-to-capacity"
refused "capacity_factor (--moe-expert-capacity-factor) with the flex dispatcher (deepep)" "$moe" 16 \
    "$mlay --moe-grouped-gemm --moe-router-topk 2 --moe-token-dispatcher-type flex --moe-expert-capacity-factor 1.0"
refused "--moe-expert-capacity-factor: bad value \"-1\"" "$moe" 16 "$mcap --moe-expert-capacity-factor -1"
# The shared experts beside the token exchanges: DeepSeek-V3's step is
# shorter with --moe-shared-expert-overlap, as the spec's shared_overlap=1.
dspec="tp=8,sp=1,pp=2,first=30,ep=8,etp=1,mbs=1,gbs=16,zero=0,overlap_grad=0"
x=$(est "$dsv3" 16 --seq 1024 --megatron-args \
    "$dlay --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 2048 --moe-shared-expert-overlap")
y=$(est "$dsv3" 16 --seq 1024 --megatron "$dspec,shared_overlap=1")
echo "$x" | grep -q '"step_time_s"' && [ "$x" = "$y" ] && ok ||
    bad "--moe-shared-expert-overlap prices as shared_overlap=1: $x vs $y"
a=$(est "$dsv3" 16 --seq 1024 --megatron "$dspec,shared_overlap=1" | grep '"step_time_s"' | tr -dc '0-9.')
b=$(est "$dsv3" 16 --seq 1024 --megatron "$dspec" | grep '"step_time_s"' | tr -dc '0-9.')
awk -v a="$a" -v b="$b" 'BEGIN { exit !(a < b) }' && ok || bad "the shared-expert overlap saves nothing: $a vs $b"
refused "shared_overlap (--moe-shared-expert-overlap) with moe_a2a_overlap" "$dsv3" 16 \
    "$dlay --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 2048 --moe-shared-expert-overlap --num-virtual-stages-per-pipeline-rank 1 --overlap-moe-expert-parallel-comm" --seq 1024
refused "--moe-flex-dispatcher-backend: bad value \"nccl\"" "$moe" 16 \
    "$mlay --moe-grouped-gemm --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend nccl"
# Without --moe-grouped-gemm, Megatron-Core's SequentialMLP runs the 4
# local experts one after another (refused before session 33).
same "SequentialMLP" "$moe" 16 "$mlay --moe-token-dispatcher-type alltoall --moe-router-topk 2" \
    "$mspec,sequential_experts=1"
"$bin" estimate "$moe" --gpus 16 --megatron \
    "$mspec,sequential_experts=1,recompute=selective,recompute_modules=moe_act" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF "recompute_modules=moe_act with sequential_experts=1" "$tmp/err" && ok ||
    bad "moe_act under SequentialMLP: $(cat "$tmp/err")"
refused "--moe-router-topk 2 (Megatron-LM's default where left out), but" \
    "$src/examples/hf/qwen3-30b-a3b.json" 16 \
    "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 16 --num-experts 128 --moe-token-dispatcher-type alltoall --moe-grouped-gemm" --seq 1024
refused "--moe-router-topk 4, but $moe routes each token to 2 experts" "$moe" 16 \
    "$mlay --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-router-topk 4"
refused "--moe-ffn-hidden-size 4096, but $moe has 14336 expert FFN size" "$moe" 16 \
    "$mlay --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-ffn-hidden-size 4096"

# --moe-layer-recompute (deprecated) is selective recomputation with moe
# added to the modules, core_attn's default included; refused under full.
mok="$mlay --moe-token-dispatcher-type alltoall --moe-grouped-gemm"
same "--moe-layer-recompute" "$moe" 16 "$mok --moe-layer-recompute" \
    "$mspec,recompute=selective,recompute_modules=core_attn+moe"
same "--moe-layer-recompute with a module list" "$moe" 16 \
    "$mok --moe-layer-recompute --recompute-modules moe_act" \
    "$mspec,recompute=selective,recompute_modules=moe_act+moe"
refused "--moe-layer-recompute: with --recompute-granularity full" "$moe" 16 \
    "$mok --moe-layer-recompute --recompute-granularity full --recompute-method uniform"
refused "--recompute-modules moe_act: needs --moe-grouped-gemm" "$moe" 16 \
    "$mlay --moe-token-dispatcher-type alltoall --expert-model-parallel-size 8 --recompute-granularity selective --recompute-modules moe_act"
refused "moe cannot run with the expert all-to-all overlap" "$moe" 16 \
    "$mlay --moe-token-dispatcher-type alltoall --moe-grouped-gemm --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4 --overlap-moe-expert-parallel-comm --recompute-granularity selective --recompute-modules moe"
# A dense command line: the dispatcher flags change nothing.
same "a dispatcher without experts" "$llama" 16 "$layout --moe-token-dispatcher-type allgather" "$spec"

# Context parallelism: one type for all layers or per layer (tests/cli/cp_comm.sh).
same "--cp-comm-type p2p" "$llama" 16 "$layout --context-parallel-size 2 --cp-comm-type p2p p2p" \
    "tp=2,cp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0"
same "--cp-comm-type a2a" "$llama" 16 "$layout --context-parallel-size 2 --cp-comm-type a2a" \
    "tp=2,cp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,cp_comm=a2a"
refused "--cp-comm-type p2p ... a2a+p2p" "$llama" 16 \
    "$layout --context-parallel-size 2 --cp-comm-type p2p a2a+p2p --hierarchical-context-parallel-sizes 2 1"
same "--cp-comm-type at cp=1" "$llama" 16 "$layout --cp-comm-type allgather" "$spec"
refused "--cp-comm-type: bad value \"ring\"" "$llama" 16 "$layout --cp-comm-type ring"

# FSDP: Megatron FSDP's strategies are ZeRO-0 to 3; Megatron-LM's torch FSDP2
# wrapper is not priced.
z=0
for s in no_shard optim optim_grads optim_grads_params; do
    same "Megatron FSDP $s" "$llama" 16 \
        "$layout --use-megatron-fsdp --data-parallel-sharding-strategy $s" \
        "tp=2,mbs=1,gbs=64,sp=0,zero=$z,overlap_grad=0"
    z=$((z + 1))
done
same "--use-custom-fsdp" "$llama" 16 \
    "$layout --use-custom-fsdp --use-distributed-optimizer --data-parallel-sharding-strategy optim_grads" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=2,overlap_grad=0"
same "a sharding strategy without FSDP" "$llama" 16 \
    "$layout --data-parallel-sharding-strategy optim_grads_params" "$spec"
# NVIDIA's Megatron FSDP user guide's required flags, with the overlaps:
# --overlap-param-gather prefetches the per-use gathers there, priced
# beside the compute as zero=3 prices them, not the distributed optimizer's
# gather after the step.
same "Megatron FSDP, the user guide's flags" "$llama" 16 \
    "$layout --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --no-gradient-accumulation-fusion --use-distributed-optimizer --ckpt-format fsdp_dtensor --overlap-grad-reduce --overlap-param-gather" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=3,overlap_grad=1,no_grad_fusion=1"
refused "--megatron-args: --overlap-param-gather needs --overlap-grad-reduce" "$llama" 16 \
    "$layout --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --overlap-param-gather"
# Torch FSDP2 reshards after forward: ZeRO-3, gradients in the parameters'
# bf16, without gradient accumulation fusion, as Megatron-LM asserts.
same "--use-torch-fsdp2" "$llama" 16 "$layout --bf16 --use-torch-fsdp2 --no-gradient-accumulation-fusion" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=3,overlap_grad=1,no_grad_fusion=1"
refused "--use-torch-fsdp2 is not supported with gradient accumulation fusion" \
    "$llama" 16 "$layout --use-torch-fsdp2"
refused "--use-torch-fsdp2 is not supported with MCore's distributed optimizer" \
    "$llama" 16 "$layout --use-torch-fsdp2 --no-gradient-accumulation-fusion --use-distributed-optimizer"
refused "--use-torch-fsdp2 is not supported with pipeline parallelism" \
    "$llama" 16 "$layout --use-torch-fsdp2 --no-gradient-accumulation-fusion --pipeline-model-parallel-size 2"
refused "--use-megatron-fsdp with --use-distributed-optimizer and --data-parallel-sharding-strategy no_shard" \
    "$llama" 16 "$layout --use-megatron-fsdp --use-distributed-optimizer"

# Without gradient accumulation fusion a kernel adds each weight gradient
# into main_grad (Megatron FSDP requires it).
same "--no-gradient-accumulation-fusion" "$llama" 16 \
    "$layout --no-gradient-accumulation-fusion" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,no_grad_fusion=1"

# Megatron-LM (2022 to 2024) could turn off the all-reduce of a
# column-parallel layer's input gradient beside its weight-gradient GEMM;
# under sequence parallelism it changed nothing.
same "--no-async-tensor-model-parallel-allreduce" "$llama" 16 \
    "$layout --no-async-tensor-model-parallel-allreduce" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,tp_sync=1"
same "--no-async-tensor-model-parallel-allreduce with --sequence-parallel" "$llama" 16 \
    "$layout --sequence-parallel --no-async-tensor-model-parallel-allreduce" \
    "tp=2,mbs=1,gbs=64,sp=1,zero=0,overlap_grad=0"

# Selective recomputation redoes the modules --recompute-modules names,
# core_attn where the flag is left out; an empty list recomputes nothing;
# under full recomputation the list is read past, as Megatron-LM does.
same "--recompute-modules core_attn" "$llama" 16 \
    "$layout --recompute-activations --recompute-modules core_attn" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,recompute=selective"
same "--recompute-modules core_attn mlp" "$llama" 16 \
    "$layout --recompute-granularity selective --recompute-modules core_attn mlp" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,recompute=selective,recompute_modules=mlp+core_attn"
same "--recompute-modules with no module" "$llama" 16 \
    "$layout --recompute-granularity selective --recompute-modules" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,recompute=none"
a=$(est "$llama" 16 --megatron-args "$layout --recompute-granularity selective --recompute-modules mlp")
b=$(est "$llama" 16 --megatron-args "$layout --recompute-granularity selective")
[ -n "$a" ] && [ "$a" != "$b" ] && ok || bad "--recompute-modules mlp prices as core_attn: $a"
# argparse takes full or selective; no recomputation is the flag left
# out, as the spec's recompute=none says it.
refused "--recompute-granularity: bad value \"none\" (full or selective" "$llama" 16 \
    "$layout --recompute-granularity none"
same "no --recompute-granularity" "$llama" 16 "$layout" "$spec,recompute=none"
# validate_args turns sequence parallelism off at tp 1, then asserts it
# for --tp-comm-overlap; --no-position-embedding raises unless rotary.
refused "--tp-comm-overlap at tensor-parallel size 1" "$llama" 16 \
    "--micro-batch-size 1 --global-batch-size 64 --sequence-parallel --tp-comm-overlap"
refused "--no-position-embedding with learned absolute positions" "$llama" 16 \
    "$layout --no-position-embedding"
same "--no-position-embedding under rope" "$llama" 16 \
    "$layout --position-embedding-type rope --no-position-embedding" "$spec"
refused "--recompute-modules bogus: unknown module" "$llama" 16 \
    "$layout --recompute-granularity selective --recompute-modules core_attn bogus"
refused "--recompute-modules mhc: recomputes a layer autopar does not build" "$llama" 16 \
    "$layout --recompute-granularity selective --recompute-modules mhc"
refused "recompute_modules=mla_up_proj (--recompute-modules): mla_up_proj needs multi-latent attention" \
    "$llama" 16 "$layout --recompute-granularity selective --recompute-modules mla_up_proj"
refused "--recompute-modules: with --transformer-impl local" "$llama" 16 \
    "$layout --transformer-impl local --recompute-granularity selective --recompute-modules mlp"
refused "moe_act and layernorm need an FP8 recipe other than delayed scaling" "$llama" 16 \
    "$layout --bf16 --fp8-format hybrid --recompute-granularity selective --recompute-modules layernorm"
same "--recompute-modules under full recomputation" "$llama" 16 \
    "$layout --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --recompute-modules mlp" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,recompute=full"

# Megatron-LM of 2023 spelled the FP8 formats as flags of their own.
same "--fp8-hybrid" "$llama" 16 "$layout --fp8-hybrid" "$spec,fp8=1"
same "--fp8-e4m3" "$llama" 16 "$layout --fp8-e4m3" "$spec,fp8=1"

# The first and last layers in bf16 under FP8 (tensorwise: Megatron-Core
# refuses them with delayed scaling); 1 each where the counts are left out;
# without FP8 they change nothing.
cs="$layout --fp8-format hybrid --fp8-recipe tensorwise"
same "--first-last-layers-bf16" "$llama" 16 "$cs --first-last-layers-bf16" \
    "$spec,fp8=1,fp8_recipe=tensorwise,bf16_first=1,bf16_last=1"
same "--num-layers-at-end-in-bf16" "$llama" 16 "$cs --first-last-layers-bf16 \
--num-layers-at-start-in-bf16 0 --num-layers-at-end-in-bf16 3" \
    "$spec,fp8=1,fp8_recipe=tensorwise,bf16_last=3"
same "the counts alone" "$llama" 16 "$cs --num-layers-at-end-in-bf16 3" \
    "$spec,fp8=1,fp8_recipe=tensorwise"
same "--first-last-layers-bf16 without FP8" "$llama" 16 "$layout --first-last-layers-bf16" \
    "$spec"
refused "--first-last-layers-bf16 with delayed scaling, which Megatron-Core refuses" \
    "$llama" 16 "$layout --fp8-format hybrid --first-last-layers-bf16"

# Flags refused whatever their value.
for f in "--cpu-offloading" "--optimizer-cpu-offload" "--use-legacy-models" \
    "--fine-grained-activation-offloading" "--moe-latent-size 1024" "--moe-paged-stash" \
    "--fp4-format nvfp4" "--fp8-dot-product-attention" "--fp8-multi-head-attention" \
    "--no-fp8-wgrad" "--keep-fp8-transpose-cache" \
    "--fp32-residual-connection" "--no-bias-gelu-fusion" \
    "--fallback-to-eager-attn" "--sequence-packing-scheduler dp_balanced" \
    "--max-seqlen-per-dp-cp-rank 8192" "--dynamic-context-parallel" "--hybrid-context-parallel" \
    "--tensor-parallel-num-weight-shards 4" "--expert-tensor-parallel-num-weight-shards 2" \
    "--moe-expert-rank-capacity-factor 1.5" "--deterministic-mode" "--batch-invariant-mode" \
    "--use-mok-megakernel" "--te-precision-config-file p.yaml" "--use-tp-pp-dp-mapping" \
    "--fake-process-group" \
    "--spec local" \
    "--no-bias-swiglu-fusion" \
    "--distribute-saved-activations" \
    "--moe-use-legacy-grouped-gemm" \
    "--torch-fsdp2-no-reshard-after-forward" \
    "--hybrid-override-pattern M-M*-" "--is-hybrid-model" \
    "--heterogeneous-layers-config-path layers.json" \
    "--heterogeneous-layers-config-encoded-json {}" "--standalone-embedding-stage"; do
    refused "--megatron-args: $f:" "$llama" 16 "$layout $f"
done
# Megatron-LM turns the bias-GELU fusion off itself without biases, so the
# flag changes nothing there.
a=$(est "$llama" 16 --megatron-args "$layout --disable-bias-linear --no-bias-gelu-fusion")
b=$(est "$llama" 16 --megatron-args "$layout --disable-bias-linear")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "--no-bias-gelu-fusion without biases: $a"
# CUDA graphs price as without them (autopar prices no host time) and the
# report says so; Megatron-Core's rule on full recomputation is kept.
for f in "--cuda-graph-impl local" "--enable-cuda-graph" "--cuda-graph-impl transformer_engine" \
    "--external-cuda-graph --cuda-graph-scope attn mlp --cuda-graph-warmup-steps 3"; do
    a=$(est "$llama" 16 --megatron-args "$layout $f" | grep -v '"caveats"\|captured in CUDA graphs')
    b=$(est "$llama" 16 --megatron-args "$layout" | grep -v '"caveats"')
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "$f changes the price: $a"
    est "$llama" 16 --megatron-args "$layout $f" | grep -q "captured in CUDA graphs (--cuda-graph-impl" &&
        ok || bad "$f: no caveat"
done
refused "--cuda-graph-impl local: with --recompute-granularity full" "$llama" 16 \
    "$layout --cuda-graph-impl local --recompute-granularity full --recompute-method uniform"
est "$llama" 16 --megatron-args "$layout --cuda-graph-impl local --cuda-graph-scope full_iteration --recompute-granularity full --recompute-method uniform" |
    grep -q '"step_time_s"' && ok || bad "full_iteration graphs with full recomputation are refused"
refused "--cuda-graph-impl: bad value \"eager\"" "$llama" 16 "$layout --cuda-graph-impl eager"
# ... and unless they are Megatron-LM's default, which prices as before.
for f in "--optimizer sgd" "--cpu-offloading-num-layers 2" \
    "--num-distributed-optimizer-instances 2" "--fp8-recipe custom" "--distributed-backend gloo" \
    "--hybrid-attention-ratio 0.25" "--hybrid-mlp-ratio 0.5"; do
    refused "--megatron-args: $f:" "$llama" 16 "$layout $f"
done
same "the defaults" "$llama" 16 "$layout --optimizer adam --cpu-offloading-num-layers 0 \
--num-distributed-optimizer-instances 1 --cuda-graph-impl none --mtp-num-layers 0 \
--hybrid-attention-ratio 0 --hybrid-mlp-ratio 0.0 \
--fp8-recipe delayed --main-params-dtype fp32 --exp-avg-dtype fp32 --exp-avg-sq-dtype fp32 \
--main-grads-dtype bf16" "$spec"
refused "--microbatch-group-size-per-virtual-pipeline-stage 2: autopar prices the interleaved schedule with groups of pp=4" \
    "$llama" 16 "$layout --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 --microbatch-group-size-per-virtual-pipeline-stage 2"
same "groups of pp micro-batches" "$llama" 16 \
    "$layout --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 --microbatch-group-size-per-virtual-pipeline-stage 4" \
    "tp=2,pp=4,vpp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0"
refused "--megatron-args: --pipeline-model-parallel-layout needs a value" "$llama" 16 \
    "$layout --pipeline-model-parallel-layout"
# A layout places the layers itself (tests/test_megatron_layout.c): with
# pp=2 and 16 layers a stage each, it is the even split, and with four
# virtual stages the interleaved schedule it states.
# --mtp-num-layers builds the config with its MTP modules, as --mtp-layers
# does (tests/test_mtp.c).
same "--mtp-num-layers" "$llama" 16 "$layout --mtp-num-layers 1" "$spec" --mtp-layers 1
refused "--mtp-layers 2 and --megatron-args --mtp-num-layers 1 disagree" "$llama" 16 \
    "$layout --mtp-num-layers 1" --mtp-layers 2
same "a layout of even stages" "$llama" 16 \
    "$layout --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*16|t*16L" \
    "tp=2,pp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0"
same "a layout of even chunks" "$llama" 16 \
    "$layout --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*8|(t*8|)*2t*8L" \
    "tp=2,pp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,layout=Et*8|t*8|t*8|t*8L"
refused "layout (--pipeline-model-parallel-layout) \"Et*16|t*15L\": places 31 transformer layers" \
    "$llama" 16 "$layout --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*16|t*15L"


# --ddp-bucket-size sets the gradient buckets' parameters when the
# reduction overlaps the backward (ddp_bucket in the spec): Megatron-Core's
# default, max(40M, 1M x dp), prices as stating it; a smaller bucket pays
# more collectives; without --overlap-grad-reduce Megatron-Core ignores it.
ov="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
same "--ddp-bucket-size" "$llama" 16 "$layout $ov --ddp-bucket-size 5000000" \
    "tp=2,mbs=1,gbs=64,sp=0,zero=1,ddp_bucket=5000000"
step() { # gpus flags
    est "$llama" "$1" --megatron-args "$2" | grep step_time_s
}
a=$(step 16 "$layout $ov --ddp-bucket-size 40000000") b=$(step 16 "$layout $ov")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the default bucket stated prices otherwise: $a, $b"
a=$(step 16 "$layout $ov --ddp-bucket-size 1000000")
[ -n "$a" ] && [ "$a" != "$b" ] && ok || bad "a 1M bucket prices as the default: $a"
a=$(step 16 "$layout --ddp-bucket-size 1000000") b=$(step 16 "$layout")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "a bucket without the overlap changes the price: $a, $b"
refused "--megatron-args: --ddp-bucket-size" "$llama" 16 "$layout --ddp-bucket-size 0"

finish
