#!/bin/sh
# fp32 gradients from the command line: the spec key grad_fp32=1 and
# Megatron-LM's flags price the same step, by Megatron-LM's rule (--bf16
# without --grad-reduce-in-bf16 is fp32, --grad-reduce-in-bf16 clears it,
# --accumulate-allreduce-grads-in-fp32 sets it, --fp16 keeps fp16); the
# report, --json and plan.json say it and plan.json reads back; the
# Megatron-LM export states --grad-reduce-in-bf16 only for bf16 gradients,
# and round-trips; torchtitan refuses an fp32-gradient plan; the planner's
# own plans keep bf16 gradients unless --grad-fp32 asks, and compare
# prices its autopar column with the configuration's gradients.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="tp=2,pp=2,mbs=1,gbs=64,sp=1,zero=1"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1
 --global-batch-size 64 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce
 --overlap-param-gather"
est() { "$bin" estimate "$model" --gpus 16 --json "$@"; }
est --megatron "$spec" >"$tmp/bf16" 2>&1 || bad "bf16: $(cat "$tmp/bf16")"
est --megatron "$spec,grad_fp32=1" >"$tmp/fp32" 2>&1 || bad "fp32: $(cat "$tmp/fp32")"

same() { # what file flags...
    what=$1 want=$2
    shift 2
    est --megatron-args "$flags $*" >"$tmp/got" 2>&1
    cmp -s "$want" "$tmp/got" && ok || bad "$what: $(diff "$want" "$tmp/got")"
}
same "--bf16 is grad_fp32=1" "$tmp/fp32" --bf16
same "--bf16 --grad-reduce-in-bf16 is grad_fp32=0" "$tmp/bf16" --bf16 --grad-reduce-in-bf16
same "--bf16 --main-grads-dtype bf16 is grad_fp32=0" "$tmp/bf16" --bf16 --main-grads-dtype bf16
same "--accumulate-allreduce-grads-in-fp32 is grad_fp32=1" "$tmp/fp32" \
    --accumulate-allreduce-grads-in-fp32
same "--grad-reduce-in-bf16 wins over --accumulate-allreduce-grads-in-fp32" "$tmp/bf16" \
    --bf16 --accumulate-allreduce-grads-in-fp32 --grad-reduce-in-bf16
same "--fp16 keeps 2-byte gradients" "$tmp/bf16" --fp16
same "--fp16 --accumulate-allreduce-grads-in-fp32 is grad_fp32=1" "$tmp/fp32" \
    --fp16 --accumulate-allreduce-grads-in-fp32
same "no precision flag keeps 2-byte gradients" "$tmp/bf16"

refused() { # message flags...
    want=$1
    shift
    out=$(est --megatron-args "$flags $*" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok ||
        bad "$*: $out"
}
refused "--megatron-args: --bf16 with --fp16" --bf16 --fp16
refused "--megatron-args: --accumulate-allreduce-grads-in-fp32 with --main-grads-dtype bf16" \
    --bf16 --accumulate-allreduce-grads-in-fp32 --main-grads-dtype bf16
refused "--megatron-args: --main-grads-dtype: bad value \"fp16\" (fp32 bf16)" \
    --bf16 --main-grads-dtype fp16
out=$(est --megatron "$spec,grad_fp32=2" 2>&1)
[ $? -eq 2 ] && case "$out" in *"grad_fp32: bad value \"2\" (0 or 1)"*) true ;; *) false ;; esac &&
    ok || bad "grad_fp32=2: $out"

# --json says it; the gradients take twice the bytes, the step is slower.
grep -q '"grad_reduce_in_fp32":.true' "$tmp/fp32" &&
    grep -q '"grad_reduce_in_fp32":.false' "$tmp/bf16" && ok || bad "--json grad_reduce_in_fp32"
awk -v a="$(field gradient_bytes "$tmp/fp32")" -v b="$(field gradient_bytes "$tmp/bf16")" \
    'BEGIN { exit !(b > 0 && a == 2 * b) }' && ok || bad "gradient_bytes doubles"
awk -v a="$(field step_time_s "$tmp/fp32")" -v b="$(field step_time_s "$tmp/bf16")" \
    'BEGIN { exit !(a > b) }' && ok || bad "fp32 gradients are slower"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,grad_fp32=1" |
    grep -q "(gradients [0-9.]* GiB, fp32, reduced in fp32)" && ok || bad "the report's gradients"

# plan.json carries it, reads back, and exports as Megatron-LM runs it.
est --megatron "$spec,grad_fp32=1" -o "$tmp/plan.json" >/dev/null 2>&1
grep -q '^	"grad_reduce_in_fp32":	true' "$tmp/plan.json" && ok || bad "plan.json field"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "^  --bf16$" "$tmp/args.sh" && ! grep -q -- "--grad-reduce-in-bf16" "$tmp/args.sh" &&
    ok || bad "fp32 export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
est --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/fp32" "$tmp/got" && ok || bad "fp32 round trip: $(diff "$tmp/fp32" "$tmp/got")"
out=$("$bin" export "$tmp/plan.json" --to torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"fp32 main gradients"*) true ;; *) false ;; esac && ok ||
    bad "torchtitan export of fp32 gradients: $out"

est --megatron "$spec" -o "$tmp/plan0.json" >/dev/null 2>&1
! grep -q '^	"grad_reduce_in_fp32"' "$tmp/plan0.json" && ok || bad "plan.json says nothing when off"
"$bin" export "$tmp/plan0.json" --to megatron >"$tmp/args0.sh" 2>&1
grep -q -- "^  --grad-reduce-in-bf16$" "$tmp/args0.sh" && ok || bad "bf16 export: $(cat "$tmp/args0.sh")"
args=$(megatron_args "$tmp/args0.sh")
est --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/bf16" "$tmp/got" && ok || bad "bf16 round trip: $(diff "$tmp/bf16" "$tmp/got")"

# A plan.json with the field false, or a bad value.
sed 's/^	"grad_reduce_in_fp32":	true/	"grad_reduce_in_fp32":	false/' "$tmp/plan.json" \
    >"$tmp/off.json"
"$bin" export "$tmp/off.json" --to megatron 2>&1 | grep -q -- "^  --grad-reduce-in-bf16$" &&
    ok || bad "plan.json false reads as bf16 gradients"
sed 's/^	"grad_reduce_in_fp32":	true/	"grad_reduce_in_fp32":	1/' "$tmp/plan.json" \
    >"$tmp/bad.json"
out=$("$bin" export "$tmp/bad.json" --to megatron 2>&1)
[ $? -eq 2 ] && case "$out" in *grad_reduce_in_fp32*) true ;; *) false ;; esac && ok ||
    bad "plan.json grad_reduce_in_fp32 1: $out"

# The planner's own plans keep bf16 gradients, and export them as such.
"$bin" plan "$model" --gpus 8 --global-batch 64 --quiet --target megatron -o "$tmp/own.json" >/dev/null 2>&1 ||
    bad "plan"
! grep -q '^	"grad_reduce_in_fp32"' "$tmp/own.json" &&
    "$bin" export "$tmp/own.json" --to megatron 2>/dev/null | grep -q -- "^  --grad-reduce-in-bf16$" &&
    ok || bad "the planner's plan exports --grad-reduce-in-bf16"
# Unless asked: --grad-fp32 plans (and sweeps) with fp32 gradients, which
# the export then leaves to Megatron-LM's default; other launchers refuse.
"$bin" plan "$model" --gpus 8 --global-batch 64 --quiet --target megatron --grad-fp32 \
    -o "$tmp/own32.json" >/dev/null 2>&1 || bad "plan --grad-fp32"
grep -q '^	"grad_reduce_in_fp32":	true' "$tmp/own32.json" &&
    ! "$bin" export "$tmp/own32.json" --to megatron 2>/dev/null | grep -q -- "--grad-reduce-in-bf16" &&
    ok || bad "plan --grad-fp32: plan.json and export"
[ "$(field gradient_bytes "$tmp/own32.json")" != "$(field gradient_bytes "$tmp/own.json")" ] &&
    ok || bad "plan --grad-fp32 holds more gradient bytes"
out=$("$bin" plan "$model" --gpus 8 --global-batch 64 --quiet --target torchtitan --grad-fp32 2>&1)
[ $? -eq 2 ] && case "$out" in *"grad_fp32=1: torchtitan"*) true ;; *) false ;; esac && ok ||
    bad "plan --grad-fp32 --target torchtitan: $out"
# compare prices autopar's column with your gradients' dtype.
"$bin" compare "$model" --gpus 8 --megatron-args "$flags --bf16" \
    --json --quiet >"$tmp/cmp.json" 2>&1 || bad "compare: $(cat "$tmp/cmp.json")"
[ "$(grep -c '"grad_reduce_in_fp32":[[:space:]]*true' "$tmp/cmp.json")" -eq 2 ] && ok ||
    bad "compare: both columns with fp32 gradients: $(grep grad_reduce "$tmp/cmp.json")"

finish
