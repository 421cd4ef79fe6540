#!/bin/sh
# MoE parallel folding from the command line: etp= and Megatron's
# --expert-tensor-parallel-size price the same step, the report names the
# experts' own mesh and the data-parallel replicas' micro-batches,
# plan.json records the mesh and the Megatron export states
# ep and etp from it; a fold that does not divide the ranks is refused.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/qwen3-30b-a3b.json

spec="tp=2,ep=16,etp=1,sp=1,mbs=1,gbs=64,zero=1"
flags="--tensor-model-parallel-size 2 --expert-model-parallel-size 16
 --expert-tensor-parallel-size 1 --sequence-parallel --micro-batch-size 1
 --global-batch-size 64 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
"$bin" estimate "$model" --gpus 16 --seq 1024 --json --megatron "$spec" >"$tmp/spec" 2>&1 ||
    bad "estimate etp=1"
"$bin" estimate "$model" --gpus 16 --seq 1024 --json --megatron-args "$flags" \
    >"$tmp/flags" 2>&1 || bad "estimate --expert-tensor-parallel-size 1"
cmp -s "$tmp/spec" "$tmp/flags" && ok || bad "etp=1 and --expert-tensor-parallel-size 1 differ"

"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron "$spec" -o "$tmp/plan.json" \
    >"$tmp/report" 2>&1 || bad "estimate -o plan.json"
grep -q "mesh 8x2, experts 16x1 (ep x etp)" "$tmp/report" && ok ||
    bad "the report lacks the expert mesh: $(grep stage "$tmp/report" | head -1)"
grep -q '"expert_mesh":' "$tmp/plan.json" && ok || bad "plan.json lacks expert_mesh"
# The token exchanges split experts over the replicas' ranks; the batch is
# still split over the 8 data-parallel replicas, a micro-batch of 1 each.
grep -q "8 micro-batches of 1 per replica (8 across the 8 data-parallel replicas)" \
    "$tmp/report" && ok || bad "the micro-batches: $(sed -n 2p "$tmp/report")"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/export" 2>&1 || bad "export: $(cat "$tmp/export")"
grep -q -- "--expert-model-parallel-size 16" "$tmp/export" &&
    grep -q -- "--expert-tensor-parallel-size 1" "$tmp/export" && ok ||
    bad "the export lacks ep=16 etp=1"

out=$("$bin" estimate "$model" --gpus 16 --seq 1024 --megatron "tp=2,ep=16,sp=1" 2>&1 >/dev/null)
[ $? -eq 2 ] && echo "$out" | grep -qF "ep*etp = 16*2 = 32 must divide tp*cp*dp = 2*1*8 = 16" &&
    ok || bad "ep*etp refusal: '$out'"
# MoE beside tensor parallelism needs sequence parallelism, folded or not:
# Megatron-Core raises for ep > 1 and tp > 1 without it (here ep = dp).
out=$("$bin" estimate "$model" --gpus 16 --seq 1024 --megatron "tp=2,ep=8,sp=0" 2>&1 >/dev/null)
[ $? -eq 2 ] && echo "$out" | grep -qF "MoE with tp=2 > 1 needs sequence parallelism" &&
    ok || bad "ep = dp with tp and no sp: '$out'"
finish
