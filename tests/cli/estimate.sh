#!/bin/sh
# autopar estimate: Megatron configurations priced; invalid ones refused
# with the reason; the spec and the real flags give the same prediction.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json

a=$("$bin" estimate "$model" --gpus 16 --json \
    --megatron "tp=2,pp=2,mbs=1,gbs=256,sp=1,zero=1" 2>&1)
[ $? -eq 0 ] && ok || bad "a valid configuration is priced: $a"
echo "$a" | grep -q '"step_time_s"' && ok || bad "JSON has step_time_s"
b=$("$bin" estimate "$model" --gpus 16 --json --megatron-args \
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 256 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --num-layers 32" 2>&1)
[ "$a" = "$b" ] && ok || bad "spec and flags agree: $a vs $b"
# Without --gpus: a spec with dp is priced on tp x pp x dp x cp GPUs, one
# without it on a preset's 8, and a cluster file keeps its own nodes
# (examples/clusters/h100-2node.json: 2 of 8).
"$bin" estimate "$model" --megatron "tp=4,pp=4,dp=4" 2>&1 | grep -q "on 64 GPUs" &&
    ok || bad "tp=4,pp=4,dp=4 without --gpus is 64 GPUs"
"$bin" estimate "$model" --megatron "tp=2" 2>&1 | grep -q "on 8 GPUs (h100-sxm" &&
    ok || bad "a spec without dp on a preset is 8 GPUs"
"$bin" estimate "$model" --megatron "tp=8" --cluster "$src/examples/clusters/h100-2node.json" \
    2>&1 | grep -q "on 16 GPUs" && ok || bad "a cluster file of 2 nodes of 8 is 16 GPUs"
"$bin" estimate "$model" --megatron "tp=4,pp=4,dp=4" --gpus 16 2>&1 |
    grep -qF "tp*pp*dp*cp = 4*4*4*1 = 64, not the 16 GPUs" &&
    ok || bad "--gpus still checks the spec's degrees"
# Without --overlap-grad-reduce Megatron-LM reduces after the backward, as
# overlap_grad=0 says in the spec.
a=$("$bin" estimate "$model" --gpus 16 --json \
    --megatron "tp=2,pp=2,mbs=1,gbs=256,sp=1,zero=1,overlap_grad=0" 2>&1)
b=$("$bin" estimate "$model" --gpus 16 --json --megatron-args \
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 256 --sequence-parallel --use-distributed-optimizer" 2>&1)
[ "$a" = "$b" ] && ok || bad "flags without --overlap-grad-reduce are overlap_grad=0: $a vs $b"
# Context parallelism beside data parallelism (NeMo's Llama 3 8B layout):
# dp replicas of the (cp, tp) mesh, from the spec or the flags alike.
a=$("$bin" estimate "$model" --gpus 16 --json \
    --megatron "tp=2,pp=1,cp=2,dp=4,mbs=1,gbs=256,zero=1" 2>&1)
b=$("$bin" estimate "$model" --gpus 16 --json --megatron-args \
    "--tensor-model-parallel-size 2 --context-parallel-size 2 --micro-batch-size 1 --global-batch-size 256 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather" 2>&1)
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && ok || bad "cp=2 with dp=4 is priced: $a vs $b"
"$bin" estimate "$model" --gpus 16 --megatron "tp=2,cp=2,dp=4,gbs=256" 2>&1 |
    grep -q "mesh 2x2 x4 replicas" && ok || bad "the plan shows 4 replicas of a 2x2 mesh"
grep -rq "needs a 3-D mesh" "$src/planner" "$src/cli" && bad "the cp-with-dp refusal is gone" || ok

# The report gives the micro-batch per data-parallel replica, as Megatron's
# --micro-batch-size does: gbs / (mbs * dp) micro-batches. The cp axis splits
# the sequence, not the batch, so it adds no replica; nor does tp.
micro() { # spec, expected text
    out=$("$bin" estimate "$model" --gpus 16 --megatron "$1" 2>&1)
    case "$out" in *"; $2; "*) ok ;; *) bad "$1: no '$2' in: $(echo "$out" | head -2)" ;; esac
}
micro "tp=2,pp=2,mbs=1,gbs=128" \
    "32 micro-batches of 1 per replica (4 across the 4 data-parallel replicas)"
micro "tp=2,cp=2,dp=4,gbs=256" \
    "64 micro-batches of 1 per replica (4 across the 4 data-parallel replicas)"
micro "tp=1,pp=2,mbs=2,gbs=128" \
    "8 micro-batches of 2 per replica (16 across the 8 data-parallel replicas)"
micro "tp=8,pp=2,mbs=2,gbs=128" "64 micro-batches of 2"

expect() {
    want=$1
    shift
    out=$("$bin" estimate "$model" --gpus 16 "$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" && ok ||
        bad "$* -> rc $rc, '$out' lacks '$want'"
}
expect "not the 16 GPUs" --megatron "tp=2,pp=2,dp=2"
expect "does not divide the 8 KV heads" --megatron "tp=16"
expect "pp*vpp = 6 does not divide the 32 layers" --megatron "tp=8,pp=2,vpp=3"
expect "not a multiple of mbs*dp" --megatron "tp=2,mbs=3,gbs=512"
expect "ep=2: llama-3-8b.json has no experts to split" --megatron "ep=2"
# dp left out takes what tp*pp*cp leave of the GPUs, which they must divide.
expect "tp*pp*cp = 3*1*1 = 3 does not divide the 16 GPUs" --megatron "tp=3"
expect "unknown key" --megatron "tq=2"
expect "--megatron: overlap_grad: bad value \"2\" (0 or 1)" --megatron "overlap_grad=2"
expect "the 25 layers left do not split evenly over the 2 middle stages of pp=4" \
    --megatron "tp=2,pp=4,dp=2,first=3,last=4"
expect "(--decoder-first/last-pipeline-num-layers): uneven stages need pp >= 2" \
    --megatron "tp=2,first=3"
expect "--megatron-args: --decoder-last-pipeline-num-layers: bad value \"x\"" \
    --megatron-args "--pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers x"
expect "--megatron-args: --decoder-first-pipeline-num-layers needs a value" \
    --megatron-args "--decoder-first-pipeline-num-layers"
# What Megatron-LM asserts at run time is refused before pricing: a sequence
# not a multiple of 2 * cp, a sequence-parallel shard tp does not divide,
# a weight-gradient deferral without gradient-accumulation fusion.
expect "the sequence of 4100 tokens is not a multiple of 2 * cp = 8" --seq 4100 \
    --megatron "tp=2,pp=2,cp=4,sp=1"
expect "the 2050 tokens of a context-parallel rank do not split over the 4 tensor-parallel" \
    --seq 4100 --megatron "tp=4,pp=2,cp=2,sp=1"
"$bin" estimate "$model" --gpus 16 --seq 4100 --megatron "tp=4,pp=2,cp=2,sp=0" >/dev/null &&
    ok || bad "the same layout without sequence parallelism is priced"
expect "without gradient-accumulation fusion" --megatron "tp=1,pp=2,defer_wgrad=1,no_grad_fusion=1"
# validate_args' rules for the interleaved schedule's flags.
expect "vpp=2 with pp=1: the interleaved schedule needs a pipeline" --megatron "tp=2,pp=1,vpp=2"
expect "Megatron-LM's interleaved schedule needs pp > 1" --megatron-args \
    "--pipeline-model-parallel-size 1 --num-virtual-stages-per-pipeline-rank 2"
expect "Megatron-LM takes no more than one" --megatron-args "--pipeline-model-parallel-size 2 \
 --num-layers-per-virtual-pipeline-stage 2 --num-virtual-stages-per-pipeline-rank 4"
expect "--no-overlap-p2p-communication with interleaving over 2 pipeline stages" \
    --megatron-args "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4 \
 --no-overlap-p2p-communication"
"$bin" estimate "$model" --gpus 16 --megatron-args "--pipeline-model-parallel-size 4 --global-batch-size 64 \
 --num-layers-per-virtual-pipeline-stage 4 --no-overlap-p2p-communication" >/dev/null &&
    ok || bad "--no-overlap-p2p-communication over 4 stages is priced"
expect "--overlap-param-gather-with-optimizer-step without interleaving" --megatron-args \
    "--pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce \
 --overlap-param-gather --overlap-param-gather-with-optimizer-step"
# One configuration a command: the spec or the flags, not both.
expect "give one --megatron or --megatron-args" --megatron "tp=2,sp=1" \
    --megatron-args "--tensor-model-parallel-size 4"
"$bin" graph --megatron-args "--num-layers 2 --hidden-size 512 --num-attention-heads 8 \
 --seq-length 256 --max-position-embeddings 256 --tokenizer-type NullTokenizer --vocab-size 1024 \
 --swiglu --num-experts 8 --moe-grouped-gemm --disable-bias-linear --normalization RMSNorm \
 --untie-embeddings-and-output-weights --position-embedding-type rope --fp16" -o "$tmp/moe16.json" \
    >/dev/null 2>&1 || bad "the fp16 MoE graph"
out=$("$bin" estimate "$tmp/moe16.json" --gpus 8 --megatron "ep=8,mbs=1,gbs=8" 2>&1)
[ $? -eq 2 ] && case "$out" in *"an fp16 MoE model"*) true ;; *) false ;; esac && ok ||
    bad "an fp16 MoE model is priced: $out"

# --global-batch is the batch where the configuration has none, as in
# compare; where both say one they must agree.
gpt=$src/examples/gpt-1.3b.json
out=$("$bin" estimate "$gpt" --gpus 16 --megatron tp=2 --global-batch 256 2>&1)
case "$out" in *"batch 256 sequences"*) ok ;; *) bad "--global-batch 256 is the batch: $out" ;; esac
out=$("$bin" estimate "$gpt" --gpus 16 --megatron tp=2,gbs=512 --global-batch 256 2>&1)
[ $? -eq 2 ] && case "$out" in *"--global-batch 256 and the configuration's gbs=512 differ"*) true ;; *) false ;; esac &&
    ok || bad "two batches are refused: $out"
out=$("$bin" estimate "$gpt" --gpus 16 --megatron-args "--tensor-model-parallel-size 2 --micro-batch-size 2" --global-batch 64 2>&1)
case "$out" in *"batch 64 sequences"*) ok ;; *) bad "--global-batch under --megatron-args: $out" ;; esac
out=$("$bin" estimate "$gpt" --gpus 16 --megatron-args "--tensor-model-parallel-size 2 --micro-batch-size 2" 2>&1)
case "$out" in *"batch 16 sequences"*) ok ;; *) bad "flags alone train mbs*dp = 16: $out" ;; esac

# --flash-attention sets a project-format model's attention ops (gpt-1.3b's
# are flash): off keeps the s x s scores, so the step is slower; --dropout
# is the model's own there and is refused rather than read past.
on=$("$bin" estimate "$gpt" --gpus 8 --megatron tp=1,gbs=64 --json 2>&1 | sed -n 's/.*"step_time_s":[^0-9]*\([0-9.e+-]*\).*/\1/p')
off=$("$bin" estimate "$gpt" --gpus 8 --megatron tp=1,gbs=64 --json --flash-attention off 2>&1 | sed -n 's/.*"step_time_s":[^0-9]*\([0-9.e+-]*\).*/\1/p')
awk -v a="$on" -v b="$off" 'BEGIN { exit !(a > 0 && b > a * 1.05) }' && ok ||
    bad "--flash-attention off prices unfused attention: $on vs $off"
out=$("$bin" estimate "$gpt" --gpus 8 --megatron tp=1,gbs=64 --dropout on 2>&1)
[ $? -eq 2 ] && case "$out" in *"gpt-1.3b.json: --dropout builds a Hugging Face config"*) true ;; *) false ;; esac &&
    ok || bad "--dropout on a project file is refused: $out"


# An MoE configuration's report names the token dispatcher it priced, in
# Megatron-LM's flags, and --json says it as "moe_dispatcher": DeepEP's
# flex dispatcher here, whose host-time caveat gives the runs on DeepEP and
# HybridEP, not the alltoall dispatcher's wait as this plan's.
qwen=$src/examples/hf/qwen3-30b-a3b.json
qspec="tp=1,pp=1,mbs=1,gbs=64,ep=8"
"$bin" estimate "$qwen" --gpus 32 --megatron "$qspec,dispatcher=deepep" >"$tmp/deepep" 2>&1
grep -qxF "  MoE token dispatcher: flex with DeepEP (--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep)" \
    "$tmp/deepep" && ok || bad "the DeepEP report's dispatcher: $(grep -i dispatcher "$tmp/deepep")"
grep -q "^  caveat: 16 experts per GPU.* Published runs on DeepEP or HybridEP took 1.05x to 1.8x" "$tmp/deepep" &&
    ! grep -q "alltoall dispatcher priced here" "$tmp/deepep" && ok ||
    bad "the DeepEP caveat: $(grep caveat "$tmp/deepep")"
"$bin" estimate "$qwen" --gpus 32 --megatron "$qspec,dispatcher=deepep" --json >"$tmp/deepep.json" 2>&1
grep -q '"moe_dispatcher":[[:space:]]*"deepep",' "$tmp/deepep.json" && ok ||
    bad "--json names DeepEP: $(grep dispatcher "$tmp/deepep.json")"
"$bin" estimate "$qwen" --gpus 32 --megatron "$qspec,dispatcher=alltoall" >"$tmp/a2a" 2>&1
grep -qxF "  MoE token dispatcher: alltoall (--moe-token-dispatcher-type alltoall)" "$tmp/a2a" &&
    grep -q "^  caveat: 16 experts per GPU.* Published runs on the alltoall dispatcher priced here, which waits for the host once per layer" "$tmp/a2a" &&
    ok || bad "the alltoall report: $(grep -iE "dispatcher|caveat" "$tmp/a2a")"
"$bin" estimate "$model" --gpus 8 --megatron "tp=1,mbs=1,gbs=64" >"$tmp/dense" 2>&1
! grep -qi dispatcher "$tmp/dense" && ok || bad "a dense model names no dispatcher"

finish
