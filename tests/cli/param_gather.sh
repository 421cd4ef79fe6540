#!/bin/sh
# The distributed optimizer's parameter all-gather from the command line:
# the spec key overlap_param and Megatron-LM's --overlap-param-gather price
# the same step; without it the gather is exposed in full; --json, the
# report and plan.json say how much is exposed; plan.json round-trips it
# (a plan without the field reads as its overlap_grad_reduce); the Megatron
# export states the flag; Megatron-LM's assertions are refusals, exit 2.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="tp=2,pp=2,mbs=1,gbs=128,sp=1,zero=1"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1
 --global-batch-size 128 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce"
est() { "$bin" estimate "$model" --gpus 16 --json "$@"; }
est --megatron "$spec" >"$tmp/spec" 2>&1 || bad "spec: $(cat "$tmp/spec")"
est --megatron "$spec,overlap_param=1" >"$tmp/spec1" 2>&1 || bad "spec1: $(cat "$tmp/spec1")"
est --megatron-args "$flags --overlap-param-gather" >"$tmp/flags1" 2>&1 ||
    bad "flags: $(cat "$tmp/flags1")"
cmp -s "$tmp/spec" "$tmp/spec1" && ok || bad "overlap_param does not default to overlap_grad"
cmp -s "$tmp/spec1" "$tmp/flags1" && ok || bad "overlap_param=1 and --overlap-param-gather differ"
est --megatron "$spec,overlap_param=0" >"$tmp/spec0" 2>&1 || bad "spec0: $(cat "$tmp/spec0")"
est --megatron-args "$flags" >"$tmp/flags0" 2>&1 || bad "flags0: $(cat "$tmp/flags0")"
cmp -s "$tmp/spec0" "$tmp/flags0" && ok ||
    bad "overlap_param=0 and flags without --overlap-param-gather differ"
# Exposed in full without the overlap, less with it; the step follows.
t0=$(field param_gather_total_s "$tmp/spec0") e0=$(field param_gather_exposed_s "$tmp/spec0")
e1=$(field param_gather_exposed_s "$tmp/spec1")
[ -n "$t0" ] && [ "$t0" = "$e0" ] && ok || bad "without overlap the gather is all exposed: $t0 vs $e0"
awk -v a="$e1" -v b="$e0" 'BEGIN { exit !(a > 0 && a < b) }' && ok ||
    bad "overlapped gather not less exposed: $e1 vs $e0"
awk -v a="$(field step_time_s "$tmp/spec1")" -v b="$(field step_time_s "$tmp/spec0")" \
    'BEGIN { exit !(a < b) }' && ok || bad "the overlap does not shorten the step"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,overlap_param=0" |
    grep -q "of it the parameter all-gather .* exposed, after the optimizer step" && ok ||
    bad "the report says the exposed gather"

# plan.json: written, read back, exported; an old plan without the field
# reads as its overlap_grad_reduce.
est --megatron "$spec" -o "$tmp/on.json" >/dev/null 2>&1
est --megatron "$spec,overlap_param=0" -o "$tmp/off.json" >/dev/null 2>&1
grep -q '^	"overlap_param_gather":	true' "$tmp/on.json" && ok || bad "plan.json has the overlap"
grep -q '^	"overlap_param_gather":	false' "$tmp/off.json" && ok || bad "plan.json has no overlap"
"$bin" export "$tmp/on.json" --to megatron >"$tmp/on.sh" 2>&1
grep -q -- "^  --overlap-param-gather$" "$tmp/on.sh" && ok || bad "Megatron export: $(cat "$tmp/on.sh")"
"$bin" export "$tmp/off.json" --to megatron >"$tmp/off.sh" 2>&1
grep -q -- "--overlap-grad-reduce" "$tmp/off.sh" && ! grep -q -- "--overlap-param-gather" "$tmp/off.sh" &&
    ok || bad "export without the overlap: $(cat "$tmp/off.sh")"
args=$(megatron_args "$tmp/off.sh")
est --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/spec0" "$tmp/got" && ok || bad "round trip: $(diff "$tmp/spec0" "$tmp/got")"
grep -v '"overlap_param_gather"' "$tmp/on.json" >"$tmp/old.json"
"$bin" export "$tmp/old.json" --to megatron 2>&1 | grep -q -- "--overlap-param-gather" && ok ||
    bad "an old plan with overlap_grad_reduce reads as overlapped"
grep -v '"overlap_param_gather"' "$tmp/off.json" |
    sed 's/"overlap_grad_reduce":	true/"overlap_grad_reduce":	false/' >"$tmp/old0.json"
out=$("$bin" export "$tmp/old0.json" --to megatron 2>&1)
[ $? -eq 0 ] && ! echo "$out" | grep -q -- "--overlap-" && ok ||
    bad "an old plan without overlap_grad_reduce reads as not overlapped: $out"
sed 's/"overlap_param_gather":	true/"overlap_param_gather":	1/' "$tmp/on.json" >"$tmp/bad.json"
out=$("$bin" export "$tmp/bad.json" --to megatron 2>&1)
[ $? -eq 2 ] && case "$out" in *"bad.json: overlap_param_gather"*) true ;; *) false ;; esac &&
    ok || bad "a bad overlap_param_gather is refused: $out"
sed 's/"overlap_grad_reduce":	true/"overlap_grad_reduce":	false/' "$tmp/on.json" >"$tmp/bad2.json"
out=$("$bin" export "$tmp/bad2.json" --to megatron 2>&1)
[ $? -eq 2 ] && case "$out" in *"overlap_param_gather: needs \"overlap_grad_reduce\": true"*) true ;;
    *) false ;; esac && ok || bad "overlap without overlap_grad_reduce is refused: $out"

# Megatron-LM's assertions, exit code 2, naming the key and the flag.
refused() { # what expected-text estimate-arguments...
    what=$1 want=$2
    shift 2
    out=$("$bin" estimate "$model" --gpus 16 "$@" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok ||
        bad "$what: $out"
}
refused "zero=0" "overlap_param: --overlap-param-gather is only supported with the distributed optimizer (zero=1" \
    --megatron "$spec,zero=0,overlap_param=1"
refused "flags without --use-distributed-optimizer" "--overlap-param-gather is only supported" \
    --megatron-args "--tensor-model-parallel-size 2 --global-batch-size 128 --overlap-grad-reduce --overlap-param-gather"
refused "overlap_grad=0" "overlap_param: --overlap-param-gather needs --overlap-grad-reduce (overlap_grad=1)" \
    --megatron "$spec,overlap_grad=0,overlap_param=1"
refused "bad value" "--megatron: overlap_param: bad value \"2\" (0 or 1)" \
    --megatron "$spec,overlap_param=2"
finish
