#!/bin/sh
# FP8 primary weights from the command line: the spec key and Megatron-LM's
# --fp8-param-gather price the same step, with less memory than FP8 with
# bf16 weights; the report, --json, plan.json and the Megatron export carry
# it through a round trip; without FP8 or the distributed optimizer it is
# refused with exit code 2.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="tp=2,pp=2,mbs=1,gbs=128,sp=1,zero=1,fp8=1"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1
 --global-batch-size 128 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
 --fp8-format hybrid"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec" >"$tmp/fp8" 2>&1 ||
    bad "fp8 estimate: $(cat "$tmp/fp8")"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,fp8_param_gather=1" \
    >"$tmp/params" 2>&1 || bad "fp8_param_gather estimate: $(cat "$tmp/params")"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$flags --fp8-param-gather" \
    >"$tmp/flags" 2>&1 || bad "--fp8-param-gather estimate: $(cat "$tmp/flags")"
cmp -s "$tmp/params" "$tmp/flags" && ok || bad "fp8_param_gather=1 and --fp8-param-gather differ"
grep -q '"fp8_param_gather":.true' "$tmp/params" && ! grep -q fp8_param_gather "$tmp/fp8" &&
    ok || bad "--json says fp8_param_gather only when on"
awk -v a="$(field max_memory_bytes "$tmp/params")" -v b="$(field max_memory_bytes "$tmp/fp8")" \
    'BEGIN { exit !(a < b) }' && ok || bad "FP8 primary weights do not save memory"
awk -v a="$(field grad_sync_total_s "$tmp/params")" -v b="$(field grad_sync_total_s "$tmp/fp8")" \
    'BEGIN { exit !(a < b) }' && ok || bad "the parameter gather is not cheaper in FP8"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,fp8_param_gather=1" |
    grep -q "precision: linear layers' GEMMs in FP8.*held and gathered in FP8" && ok ||
    bad "the report says FP8 primary weights"

# plan.json -> Megatron flags -> estimate: the same prediction.
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,fp8_param_gather=1" \
    -o "$tmp/plan.json" >"$tmp/want" 2>/dev/null
grep -q '^	"fp8_param_gather":	true' "$tmp/plan.json" && ok || bad "plan.json has fp8_param_gather"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "^  --fp8-param-gather$" "$tmp/args.sh" && ok || bad "Megatron export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/want" "$tmp/got" && ok || bad "round trip: $(diff "$tmp/want" "$tmp/got")"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,fp8_param_gather=1" --emit megatron |
    grep -q -- "--fp8-param-gather" && ok || bad "--emit megatron has --fp8-param-gather"
# torchtitan's float8 converter has no delayed scaling: its export is of
# the tensorwise plan.
"$bin" estimate "$model" --gpus 16 --megatron "$spec,fp8_recipe=tensorwise,fp8_param_gather=1" \
    -o "$tmp/tw.json" >/dev/null 2>&1
"$bin" export "$tmp/tw.json" --to torchtitan 2>&1 |
    grep -q -- "--quantize.linear.float8.enable_fsdp_float8_all_gather" && ok ||
    bad "torchtitan export gathers its float8 weights in FP8"

# Refusals: exit code 2 and what is missing.
refused() { # what expected-text estimate-arguments...
    what=$1 want=$2
    shift 2
    out=$("$bin" estimate "$model" --gpus 16 "$@" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok ||
        bad "$what: $out"
}
refused "without fp8" "fp8_param_gather: --fp8-param-gather keeps the linear layers' weights in FP8, which needs FP8 training (fp8=1" \
    --megatron "tp=2,pp=2,gbs=128,sp=1,fp8_param_gather=1"
refused "with zero=0" "fp8_param_gather: --fp8-param-gather is only supported with the distributed optimizer" \
    --megatron "$spec,zero=0,fp8_param_gather=1"
refused "flags without --use-distributed-optimizer" "(zero=1, --use-distributed-optimizer)" \
    --megatron-args "--tensor-model-parallel-size 2 --global-batch-size 128 --fp8-format hybrid --fp8-param-gather"
refused "a value other than 0 or 1" "--megatron: fp8_param_gather: bad value \"yes\" (0 or 1)" \
    --megatron "$spec,fp8_param_gather=yes"
sed 's/"fp8":	true/"fp8":	false/' "$tmp/plan.json" >"$tmp/bad.json"
out=$("$bin" export "$tmp/bad.json" --to megatron 2>&1)
[ $? -eq 2 ] && case "$out" in *'fp8_param_gather: FP8 weights need "fp8": true'*) true ;; *) false ;; esac &&
    ok || bad "plan.json with fp8_param_gather and no fp8: $out"

finish
