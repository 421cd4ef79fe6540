#!/bin/sh
# Megatron-Core's expert all-to-all overlap from the command line: the spec
# keys and --overlap-moe-expert-parallel-comm --delay-wgrad-compute price
# the same step, shorter than with the all-to-alls exposed; the report says
# how much was hidden; plan.json and the Megatron export carry both flags
# through a round trip; where Megatron-Core asserts it is refused with exit
# code 2, naming the flag; compare's sweep runs with it where it applies.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/qwen3-30b-a3b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="pp=2,vpp=2,ep=8,mbs=1,gbs=64"
flags="--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
 --expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64
 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec" >"$tmp/off" 2>&1 ||
    bad "estimate: $(cat "$tmp/off")"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,moe_a2a_overlap=1,delay_wgrad=1" \
    >"$tmp/on" 2>&1 || bad "moe_a2a_overlap estimate: $(cat "$tmp/on")"
"$bin" estimate "$model" --gpus 16 --json --megatron-args \
    "$flags --overlap-moe-expert-parallel-comm --delay-wgrad-compute" >"$tmp/flags" 2>&1 ||
    bad "--overlap-moe-expert-parallel-comm estimate: $(cat "$tmp/flags")"
cmp -s "$tmp/on" "$tmp/flags" && ok || bad "the spec keys and the flags differ"
awk -v a="$(field step_time_s "$tmp/on")" -v b="$(field step_time_s "$tmp/off")" \
    'BEGIN { exit !(a < b) }' && ok || bad "the overlap does not shorten the step"
awk -v h="$(field expert_all_to_all_hidden_s "$tmp/on")" -v e="$(field expert_all_to_all_s "$tmp/on")" \
    'BEGIN { exit !(h > 0 && h <= e) }' && ok || bad "hidden all-to-all not in (0, all of it]"
! grep -q "moe_a2a_overlap\|hidden" "$tmp/off" && ok || bad "--json says the overlap only when on"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,moe_a2a_overlap=1" |
    grep -q "expert all-to-all [0-9.]* s ([0-9.]* s of it hidden behind another micro-batch's compute" &&
    ok || bad "the report says how much all-to-all was hidden"

# plan.json -> Megatron flags -> estimate: the same prediction.
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,moe_a2a_overlap=1,delay_wgrad=1" \
    -o "$tmp/plan.json" >"$tmp/want" 2>/dev/null
grep -q '^	"moe_a2a_overlap":	true' "$tmp/plan.json" &&
    grep -q '^	"delay_wgrad_compute":	true' "$tmp/plan.json" && ok || bad "plan.json has both fields"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "^  --overlap-moe-expert-parallel-comm$" "$tmp/args.sh" &&
    grep -q -- "^  --delay-wgrad-compute$" "$tmp/args.sh" && ok ||
    bad "Megatron export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$args" >"$tmp/got" 2>"$tmp/err"
cmp -s "$tmp/want" "$tmp/got" && ok || bad "round trip: $(cat "$tmp/err"; diff "$tmp/want" "$tmp/got")"
out=$("$bin" export "$tmp/plan.json" --to torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"--overlap-moe-expert-parallel-comm"*) true ;; *) false ;; esac &&
    ok || bad "torchtitan export refuses the overlap: $out"
sed '/"moe_a2a_overlap":/d' "$tmp/plan.json" >"$tmp/bad.json"
out=$("$bin" export "$tmp/bad.json" --to megatron 2>&1)
[ $? -eq 2 ] && case "$out" in *'delay_wgrad_compute: needs "moe_a2a_overlap": true'*) true ;; *) false ;; esac &&
    ok || bad "plan.json with delay_wgrad_compute alone: $out"
sed '/"moe_a2a_overlap":/d; /"delay_wgrad_compute":/d' "$tmp/plan.json" >"$tmp/old.json"
"$bin" export "$tmp/old.json" --to megatron 2>&1 | grep -q -- "--overlap-moe-expert-parallel-comm" &&
    bad "a plan without the field exports the overlap" || ok

refused() { # what expected-text estimate-arguments...
    what=$1 want=$2
    shift 2
    out=$("$bin" estimate "$model" --gpus 16 "$@" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok ||
        bad "$what: $out"
}
refused "without expert parallelism" "--overlap-moe-expert-parallel-comm is only supported with expert parallelism" \
    --megatron "ep=1,gbs=64,moe_a2a_overlap=1"
refused "pp > 1 without vpp" "--overlap-moe-expert-parallel-comm with pp=2 needs a virtual pipeline" \
    --megatron-args "--pipeline-model-parallel-size 2 --expert-model-parallel-size 8 --global-batch-size 64 --overlap-moe-expert-parallel-comm"
refused "full recomputation" "--overlap-moe-expert-parallel-comm excludes full recomputation" \
    --megatron "ep=8,gbs=64,recompute=full,moe_a2a_overlap=1"
refused "delay without overlap" "delay_wgrad: --delay-wgrad-compute needs --overlap-moe-expert-parallel-comm" \
    --megatron-args "--expert-model-parallel-size 8 --global-batch-size 64 --delay-wgrad-compute"
refused "a value other than 0 or 1" "--megatron: moe_a2a_overlap: bad value \"2\" (0 or 1)" \
    --megatron "$spec,moe_a2a_overlap=2"

# compare's sweep runs every configuration Megatron-Core accepts it for
# with the overlap, as the configuration compared runs.
"$bin" compare "$model" --gpus 16 --megatron "$spec,moe_a2a_overlap=1,delay_wgrad=1" \
    --sweep --quiet >"$tmp/cmp" 2>&1 || bad "compare --sweep: $(cat "$tmp/cmp")"
grep -q "^  megatron (sweep): .*moe_a2a_overlap=1,delay_wgrad=1" "$tmp/cmp" && ok ||
    bad "the sweep's best carries the overlap: $(grep sweep "$tmp/cmp")"

finish
