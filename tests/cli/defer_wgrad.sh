#!/bin/sh
# Megatron-Core's deferred output-layer weight gradients from the command
# line: the spec keys and --defer-embedding-wgrad-compute --wgrad-deferral-limit
# price the same step, shorter than without on a pipeline whose last stage
# carries the head; plan.json and the Megatron export carry both through a
# round trip; without pipeline parallelism it is refused with exit code 2,
# naming the flag, as Megatron-Core refuses it.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="tp=2,pp=4,mbs=1,gbs=64,sp=1"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --sequence-parallel
 --micro-batch-size 1 --global-batch-size 64 --use-distributed-optimizer
 --overlap-grad-reduce --overlap-param-gather"
"$bin" estimate "$model" --gpus 8 --json --megatron "$spec" >"$tmp/off" 2>&1 ||
    bad "estimate: $(cat "$tmp/off")"
"$bin" estimate "$model" --gpus 8 --json --megatron "$spec,defer_wgrad=1,wgrad_deferral_limit=8" \
    >"$tmp/on" 2>&1 || bad "defer_wgrad estimate: $(cat "$tmp/on")"
"$bin" estimate "$model" --gpus 8 --json --megatron-args \
    "$flags --defer-embedding-wgrad-compute --wgrad-deferral-limit 8" >"$tmp/flags" 2>&1 ||
    bad "--defer-embedding-wgrad-compute estimate: $(cat "$tmp/flags")"
cmp -s "$tmp/on" "$tmp/flags" && ok || bad "the spec keys and the flags differ"
awk -v a="$(field step_time_s "$tmp/on")" -v b="$(field step_time_s "$tmp/off")" \
    'BEGIN { exit !(a < b) }' && ok || bad "deferring does not shorten the step"

# plan.json -> Megatron flags -> estimate: the same prediction.
"$bin" estimate "$model" --gpus 8 --json --megatron "$spec,defer_wgrad=1,wgrad_deferral_limit=8" \
    -o "$tmp/plan.json" >"$tmp/want" 2>/dev/null
grep -q '^	"defer_embedding_wgrad_compute":	true' "$tmp/plan.json" &&
    grep -q '^	"wgrad_deferral_limit":	8' "$tmp/plan.json" && ok || bad "plan.json has both fields"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "^  --defer-embedding-wgrad-compute$" "$tmp/args.sh" &&
    grep -q -- "^  --wgrad-deferral-limit 8$" "$tmp/args.sh" && ok ||
    bad "Megatron export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
"$bin" estimate "$model" --gpus 8 --json --megatron-args "$args" >"$tmp/got" 2>"$tmp/err"
cmp -s "$tmp/want" "$tmp/got" && ok || bad "round trip: $(cat "$tmp/err"; diff "$tmp/want" "$tmp/got")"
out=$("$bin" export "$tmp/plan.json" --to torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"--defer-embedding-wgrad-compute"*) true ;; *) false ;; esac &&
    ok || bad "torchtitan export refuses the deferral: $out"
sed '/"defer_embedding_wgrad_compute":/d' "$tmp/plan.json" >"$tmp/bad.json"
out=$("$bin" export "$tmp/bad.json" --to megatron 2>&1)
[ $? -eq 2 ] && case "$out" in *'wgrad_deferral_limit: needs "defer_embedding_wgrad_compute": true'*) true ;; *) false ;; esac &&
    ok || bad "plan.json with wgrad_deferral_limit alone: $out"

out=$("$bin" estimate "$model" --gpus 8 --megatron "tp=2,pp=1,mbs=1,gbs=64,defer_wgrad=1" 2>&1)
[ $? -eq 2 ] && case "$out" in *"--defer-embedding-wgrad-compute needs pipeline parallelism"*) true ;; *) false ;; esac &&
    ok || bad "pp=1 refused: $out"
out=$("$bin" estimate "$model" --gpus 8 --megatron "$spec,wgrad_deferral_limit=-1" 2>&1)
[ $? -eq 2 ] && case "$out" in *"wgrad_deferral_limit: bad value"*) true ;; *) false ;; esac &&
    ok || bad "a negative limit refused: $out"
finish
