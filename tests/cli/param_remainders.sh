#!/bin/sh
# Main-weight remainders from the command line: Megatron-LM's
# --use-precision-aware-optimizer with fp32 main weights of a bf16 model
# keeps them as 16-bit remainders (Megatron-Core's store_param_remainders,
# True by default) and prices as the spec key main_params=remainder;
# --no-store-param-remainders keeps them whole. Refusals exit 2 naming the
# key or flag; plan.json states the dtype, reads back, and exports to
# flags that price the same again.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="tp=2,pp=2,mbs=1,gbs=64,sp=1,zero=1,overlap_grad=1"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1
 --global-batch-size 64 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce
 --overlap-param-gather --bf16 --grad-reduce-in-bf16"
est() { "$bin" estimate "$model" --gpus 16 --json "$@"; }
est --megatron "$spec" >"$tmp/fp32" 2>&1 || bad "fp32: $(cat "$tmp/fp32")"
est --megatron "$spec,main_params=remainder" >"$tmp/rem" 2>&1 || bad "rem: $(cat "$tmp/rem")"

same() { # what file flags...
    what=$1 want=$2
    shift 2
    est --megatron-args "$flags $*" >"$tmp/got" 2>&1
    cmp -s "$want" "$tmp/got" && ok || bad "$what: $(diff "$want" "$tmp/got")"
}
same "Megatron-Core's default is the spec's remainder" "$tmp/rem" \
    --use-precision-aware-optimizer
same "--store-param-remainders states the default" "$tmp/rem" \
    --use-precision-aware-optimizer --store-param-remainders
same "--no-store-param-remainders keeps fp32 main weights" "$tmp/fp32" \
    --use-precision-aware-optimizer --no-store-param-remainders
same "no precision-aware optimizer, no remainders" "$tmp/fp32"
est --megatron "$spec,fp8=1,fp8_param_gather=1" >"$tmp/fp8" 2>&1 || bad "fp8: $(cat "$tmp/fp8")"
same "no remainders of FP8 weights" "$tmp/fp8" \
    --use-precision-aware-optimizer --fp8-format hybrid --fp8-param-gather
# Megatron-Core hands FusedAdam remainders under delayed FP8 scaling, not
# under tensorwise.
est --megatron "$spec,fp8=1,main_params=remainder" >"$tmp/fp8rem" 2>&1 || bad "fp8 rem"
same "remainders under delayed scaling" "$tmp/fp8rem" \
    --use-precision-aware-optimizer --fp8-format hybrid
est --megatron "$spec,fp8=1,fp8_recipe=tensorwise" >"$tmp/fp8cs" 2>&1 || bad "fp8 cs"
same "no remainders under tensorwise scaling" "$tmp/fp8cs" \
    --use-precision-aware-optimizer --fp8-format hybrid --fp8-recipe tensorwise

# Remainders hold 2 bytes of the 4 of each main weight, over dp = 4.
awk -v a="$(field max_memory_bytes "$tmp/rem")" -v b="$(field max_memory_bytes "$tmp/fp32")" \
    'BEGIN { exit !(a < b) }' && ok || bad "remainders hold less"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,main_params=remainder" |
    grep -q "optimizer states [0-9.]* GiB: main weights remainder, exp_avg fp32, exp_avg_sq fp32)" &&
    ok || bad "the report's optimizer states"

refused() { # message how...
    want=$1
    shift
    out=$("$@" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok ||
        bad "$*: $out"
}
refused "main_params, exp_avg, exp_avg_sq: optimizer states in remainder, fp32 and fp32 need --use-precision-aware-optimizer" \
    est --megatron "tp=2,pp=2,mbs=1,gbs=64,sp=1,zero=0,main_params=remainder"
refused "main_params=remainder: Transformer Engine's FusedAdam keeps remainders only of bf16 weights" \
    est --megatron "$spec,fp8=1,fp8_param_gather=1,main_params=remainder"
refused "--megatron: exp_avg: bad value \"remainder\" (fp32, fp16, bf16 or fp8)" \
    est --megatron "$spec,exp_avg=remainder"
refused "--megatron-args: --main-params-dtype: bad value \"remainder\" (fp32 fp16)" \
    est --megatron-args "$flags --use-precision-aware-optimizer --main-params-dtype remainder"

# plan.json carries the dtype and exports as Megatron-LM runs it: the
# precision-aware optimizer alone, whose default the remainders are.
est --megatron "$spec,main_params=remainder" -o "$tmp/plan.json" >/dev/null 2>&1
grep -q '^	"main_params_dtype":	"remainder"' "$tmp/plan.json" && ok || bad "plan.json field"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "^  --use-precision-aware-optimizer$" "$tmp/args.sh" &&
    ! grep -q -- "param-remainders\|--main-params-dtype" "$tmp/args.sh" && ok ||
    bad "export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
est --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/rem" "$tmp/got" && ok || bad "round trip: $(diff "$tmp/rem" "$tmp/got")"
for to in torchtitan deepspeed; do
    refused "keeps fp32 optimizer states, not the remainder, fp32 and fp32 the plan was priced with" \
        "$bin" export "$tmp/plan.json" --to $to
done

# fp32 main weights beside narrower moments: the export turns the default
# remainders off, and the round trip prices the same.
est --megatron "$spec,exp_avg=bf16,exp_avg_sq=bf16" -o "$tmp/bf.json" >"$tmp/bf" 2>&1
"$bin" export "$tmp/bf.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "^  --no-store-param-remainders$" "$tmp/args.sh" && ok ||
    bad "export of fp32 main weights: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
est --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/bf" "$tmp/got" && ok || bad "round trip of fp32 main: $(diff "$tmp/bf" "$tmp/got")"

# A plan.json whose moments say remainder.
sed 's/^	"main_params_dtype":	"remainder"/	"exp_avg_dtype":	"remainder"/' "$tmp/plan.json" \
    >"$tmp/bad.json"
refused "exp_avg_dtype: \"remainder\" is not fp32, fp16, bf16 or fp8" \
    "$bin" export "$tmp/bad.json" --to megatron
finish
