#!/bin/sh
# The precision-aware optimizer's states from the command line: the spec
# keys main_params, exp_avg and exp_avg_sq price what Megatron-LM's
# --use-precision-aware-optimizer with --main-params-dtype, --exp-avg-dtype
# and --exp-avg-sq-dtype prices; the flags Megatron-Core refuses exit 2
# naming the flag and the rule; the report and plan.json say the dtypes,
# plan.json reads back and exports to the same flags, torchtitan and
# DeepSpeed refuse such a plan, and fp32 says nothing anywhere; compare
# plans its autopar column with the configuration's states.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="tp=2,pp=2,mbs=1,gbs=64,sp=1,zero=1"
keys="main_params=fp16,exp_avg=bf16,exp_avg_sq=fp8"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1
 --global-batch-size 64 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce
 --overlap-param-gather"
est() { "$bin" estimate "$model" --gpus 16 --json "$@"; }
est --megatron "$spec" >"$tmp/fp32" 2>&1 || bad "fp32: $(cat "$tmp/fp32")"
est --megatron "$spec,$keys" >"$tmp/low" 2>&1 || bad "low: $(cat "$tmp/low")"

same() { # what file flags...
    what=$1 want=$2
    shift 2
    est --megatron-args "$flags $*" >"$tmp/got" 2>&1
    cmp -s "$want" "$tmp/got" && ok || bad "$what: $(diff "$want" "$tmp/got")"
}
same "the flags are the spec keys" "$tmp/low" --use-precision-aware-optimizer \
    --main-params-dtype fp16 --exp-avg-dtype bf16 --exp-avg-sq-dtype fp8
same "fp32 flags under the precision-aware optimizer price as before" "$tmp/fp32" \
    --use-precision-aware-optimizer --main-params-dtype fp32 --exp-avg-dtype fp32 \
    --exp-avg-sq-dtype fp32
same "the precision-aware optimizer alone prices as before" "$tmp/fp32" \
    --use-precision-aware-optimizer
est --megatron "$spec,exp_avg=bf16,exp_avg_sq=bf16" >"$tmp/bf16" 2>&1
same "the moments alone" "$tmp/bf16" --use-precision-aware-optimizer \
    --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16

refused() { # message how...
    want=$1
    shift
    out=$("$@" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok ||
        bad "$*: $out"
}
refused "--megatron-args: --exp-avg-dtype bf16: Megatron-Core's OptimizerConfig asserts fp32 without --use-precision-aware-optimizer" \
    est --megatron-args "$flags --exp-avg-dtype bf16"
refused "--megatron-args: --main-params-dtype fp16: Megatron-Core's OptimizerConfig asserts fp32" \
    est --megatron-args "$flags --main-params-dtype fp16"
refused "--megatron-args: --use-precision-aware-optimizer: Megatron-Core's OptimizerConfig asserts it is only supported with the distributed optimizer" \
    est --megatron-args "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 --micro-batch-size 1 --global-batch-size 64 --use-precision-aware-optimizer --exp-avg-dtype fp16"
refused "--megatron-args: --main-params-dtype bf16: Transformer Engine's FusedAdam keeps fp32 or fp16 main weights" \
    est --megatron-args "$flags --use-precision-aware-optimizer --main-params-dtype bf16"
refused "--megatron-args: --exp-avg-sq-dtype: bad value \"int8\" (fp32 fp16 bf16 fp8)" \
    est --megatron-args "$flags --use-precision-aware-optimizer --exp-avg-sq-dtype int8"
refused "--megatron-args: --main-params-dtype: bad value \"fp8\" (fp32 fp16)" \
    est --megatron-args "$flags --use-precision-aware-optimizer --main-params-dtype fp8"
refused "main_params, exp_avg, exp_avg_sq: optimizer states in fp32, bf16 and fp32 need --use-precision-aware-optimizer" \
    est --megatron "tp=2,pp=2,mbs=1,gbs=64,sp=1,zero=0,exp_avg=bf16"
refused "--megatron: exp_avg: bad value \"fp64\" (fp32, fp16, bf16 or fp8)" \
    est --megatron "$spec,exp_avg=fp64"

# Fewer bytes held (fp16 + bf16 + fp8 = 5 of the 12), a longer step.
awk -v a="$(field max_memory_bytes "$tmp/low")" -v b="$(field max_memory_bytes "$tmp/fp32")" \
    'BEGIN { exit !(a < b) }' && ok || bad "narrow states hold less"
awk -v a="$(field optimizer_s "$tmp/low")" -v b="$(field optimizer_s "$tmp/fp32")" \
    'BEGIN { exit !(a > b) }' && ok || bad "narrow states step through an fp32 copy"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,$keys" |
    grep -q "optimizer states [0-9.]* GiB: main weights fp16, exp_avg bf16, exp_avg_sq fp8)" &&
    ok || bad "the report's optimizer states"
! "$bin" estimate "$model" --gpus 16 --megatron "$spec" | grep -q "optimizer states" &&
    ok || bad "the report says nothing of fp32 states"

# plan.json carries them, reads back, and exports as Megatron-LM runs it.
est --megatron "$spec,$keys" -o "$tmp/plan.json" >/dev/null 2>&1
grep -q '^	"main_params_dtype":	"fp16"' "$tmp/plan.json" &&
    grep -q '^	"exp_avg_dtype":	"bf16"' "$tmp/plan.json" &&
    grep -q '^	"exp_avg_sq_dtype":	"fp8"' "$tmp/plan.json" && ok || bad "plan.json fields"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "^  --use-precision-aware-optimizer$" "$tmp/args.sh" &&
    grep -q -- "^  --main-params-dtype fp16$" "$tmp/args.sh" &&
    grep -q -- "^  --exp-avg-dtype bf16$" "$tmp/args.sh" &&
    grep -q -- "^  --exp-avg-sq-dtype fp8$" "$tmp/args.sh" && ok ||
    bad "export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
est --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/low" "$tmp/got" && ok || bad "round trip: $(diff "$tmp/low" "$tmp/got")"
for to in torchtitan deepspeed; do
    refused "keeps fp32 optimizer states, not the fp16, bf16 and fp8 the plan was priced with" \
        "$bin" export "$tmp/plan.json" --to $to
done

# fp32 states: nothing in plan.json, nothing in the export.
est --megatron "$spec" -o "$tmp/plan0.json" >/dev/null 2>&1
! grep -q '_dtype"' "$tmp/plan0.json" && ok || bad "plan.json says nothing of fp32 states"
! "$bin" export "$tmp/plan0.json" --to megatron 2>&1 | grep -q -- "precision-aware" &&
    ok || bad "the export says nothing of fp32 states"

# apex's bf16 states without main weights (NeMo's optim dtype bf16) price,
# but Megatron-LM's distributed optimizer always keeps main weights.
est --megatron "$spec,main_params=none,exp_avg=bf16,exp_avg_sq=bf16" -o "$tmp/apex.json" \
    >/dev/null 2>&1 || bad "main_params=none"
grep -q '^	"main_params_dtype":	"none"' "$tmp/apex.json" && ok || bad "plan.json none"
refused "distributed optimizer keeps main weights (fp32, or fp16 under --main-params-dtype); the plan's none, bf16 and bf16 has none" \
    "$bin" export "$tmp/apex.json" --to megatron

# A plan.json with a bad value, or fp8 main weights.
sed 's/^	"exp_avg_dtype":	"bf16"/	"exp_avg_dtype":	"e5m2"/' "$tmp/plan.json" >"$tmp/bad.json"
refused "exp_avg_dtype: \"e5m2\" is not fp32, fp16, bf16 or fp8" \
    "$bin" export "$tmp/bad.json" --to megatron
sed 's/^	"main_params_dtype":	"fp16"/	"main_params_dtype":	"fp8"/' "$tmp/plan.json" \
    >"$tmp/bad8.json"
refused "main_params_dtype: \"fp8\" is not fp32, fp16, none or remainder" \
    "$bin" export "$tmp/bad8.json" --to megatron

# compare plans its autopar column and sweep with the configuration's
# optimizer states, so their memory drops with them too.
cmp_mem() { # spec -> the autopar column's max_memory_bytes
    "$bin" compare "$model" --gpus 16 --megatron "$1" --json --quiet >"$tmp/cmp.json" 2>&1 ||
        bad "compare $1: $(cat "$tmp/cmp.json")"
    sed -n '/"autopar"/,$p' "$tmp/cmp.json" | tr ',' '\n' |
        sed -n 's/.*"max_memory_bytes":[^0-9]*\([0-9.e+]*\).*/\1/p' | head -1
}
hi=$(cmp_mem "$spec")
lo=$(cmp_mem "$spec,$keys")
awk -v a="$hi" -v b="$lo" 'BEGIN { exit !(b > 0 && b < a) }' && ok ||
    bad "compare: autopar's column with the configuration's states ($lo) under fp32's ($hi)"
finish
