#!/bin/sh
# The loss's kernels from the command line: the spec key and Megatron-LM's
# flags price the same step; fused losses are faster (te also lighter);
# the report, --json, plan.json and the Megatron export carry the setting
# through a round trip; torchtitan refuses it; bad values exit 2 naming
# the key or flag.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }

spec="tp=2,pp=1,mbs=1,gbs=64,sp=1,zero=1"
flags="--tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 64
 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
est() { "$bin" estimate "$model" --gpus 8 --json "$@"; }
est --megatron "$spec" >"$tmp/unfused" 2>&1 || bad "unfused: $(cat "$tmp/unfused")"
est --megatron "$spec,cross_entropy=native" >"$tmp/native" 2>&1 || bad "native: $(cat "$tmp/native")"
est --megatron "$spec,cross_entropy=te" >"$tmp/te" 2>&1 || bad "te: $(cat "$tmp/te")"
est --megatron-args "$flags --cross-entropy-loss-fusion" >"$tmp/nflags" 2>&1
cmp -s "$tmp/native" "$tmp/nflags" && ok || bad "cross_entropy=native and --cross-entropy-loss-fusion differ"
est --megatron-args "$flags --cross-entropy-loss-fusion --cross-entropy-fusion-impl te" \
    >"$tmp/tflags" 2>&1
cmp -s "$tmp/te" "$tmp/tflags" && ok || bad "cross_entropy=te and the te flags differ"
est --megatron-args "$flags --cross-entropy-fusion-impl te" >"$tmp/uflags" 2>&1
cmp -s "$tmp/unfused" "$tmp/uflags" && ok ||
    bad "--cross-entropy-fusion-impl without --cross-entropy-loss-fusion is not unfused"
grep -q '"cross_entropy":.*"te"' "$tmp/te" && ! grep -q cross_entropy "$tmp/unfused" && ok ||
    bad "--json says cross_entropy only when fused"
st() { field step_time_s "$1"; }
awk -v u="$(st "$tmp/unfused")" -v n="$(st "$tmp/native")" -v t="$(st "$tmp/te")" \
    'BEGIN { exit !(t < n && n < u) }' && ok || bad "te < native < unfused step time"
awk -v a="$(field max_memory_bytes "$tmp/te")" -v b="$(field max_memory_bytes "$tmp/unfused")" \
    'BEGIN { exit !(a < b) }' && ok || bad "te keeps less for backward"
"$bin" estimate "$model" --gpus 8 --megatron "$spec,cross_entropy=te" |
    grep -q "loss: Transformer Engine's cross entropy" && ok || bad "the report names the loss"

# plan.json -> Megatron flags -> estimate: the same prediction.
for ce in native te; do
    est --megatron "$spec,cross_entropy=$ce" -o "$tmp/plan.json" >"$tmp/want" 2>/dev/null
    grep -q "^	\"cross_entropy\":	\"$ce\"" "$tmp/plan.json" && ok || bad "plan.json has cross_entropy $ce"
    "$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
    grep -q -- "^  --cross-entropy-loss-fusion$" "$tmp/args.sh" && ok ||
        bad "Megatron export: $(cat "$tmp/args.sh")"
    args=$(megatron_args "$tmp/args.sh")
    est --megatron-args "$args" >"$tmp/got" 2>&1
    cmp -s "$tmp/want" "$tmp/got" && ok || bad "$ce round trip: $(diff "$tmp/want" "$tmp/got")"
done
grep -q -- "^  --cross-entropy-fusion-impl te$" "$tmp/args.sh" && ok || bad "te export names te"
out=$("$bin" export "$tmp/plan.json" --to torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"own cross entropy"*) true ;; *) false ;; esac && ok ||
    bad "torchtitan export of a fused loss: $out"

# The planner's own plans and compare's autopar column: the same setting.
pl() { "$bin" plan "$model" --gpus 8 --global-batch 64 --quiet --json "$@"; }
pl >"$tmp/pu" 2>&1 || bad "plan: $(cat "$tmp/pu")"
pl --cross-entropy te >"$tmp/pt" 2>&1 || bad "plan --cross-entropy te: $(cat "$tmp/pt")"
grep -q '"cross_entropy":.*"te"' "$tmp/pt" && ! grep -q cross_entropy "$tmp/pu" && ok ||
    bad "plan --cross-entropy te records it in plan.json"
awk -v u="$(st "$tmp/pu")" -v t="$(st "$tmp/pt")" 'BEGIN { exit !(t < u) }' && ok ||
    bad "plan --cross-entropy te plans a faster step"
out=$(pl --cross-entropy te --target torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"own cross entropy"*) true ;; *) false ;; esac && ok ||
    bad "plan --target torchtitan with a fused loss: $out"
out=$(pl --cross-entropy fast 2>&1)
[ $? -eq 2 ] && case "$out" in *'--cross-entropy: bad value "fast"'*) true ;; *) false ;; esac &&
    ok || bad "plan --cross-entropy fast: $out"
"$bin" compare "$model" --gpus 8 --quiet --json --megatron "$spec,cross_entropy=te" \
    >"$tmp/cmp" 2>&1 || bad "compare: $(cat "$tmp/cmp")"
# The second prediction is the autopar column's ("yours" comes first).
ours=$(grep -o '"step_time_s":[^,]*' "$tmp/cmp" | sed -n '2s/[^0-9]*\([0-9.e+-]*\).*/\1/p')
awk -v c="$ours" -v t="$(st "$tmp/pt")" 'BEGIN { exit !(c != "" && c == t) }' && ok ||
    bad "compare's autopar column is planned with the configuration's loss ($ours vs $(st "$tmp/pt"))"

# Refusals: exit code 2 and the key or flag named.
refused() { # what expected-text estimate-arguments...
    what=$1 want=$2
    shift 2
    out=$("$bin" estimate "$model" --gpus 8 "$@" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok ||
        bad "$what: $out"
}
refused "a bad spec value" "--megatron: cross_entropy: bad value \"liger\" (unfused, native or te)" \
    --megatron "$spec,cross_entropy=liger"
refused "a bad impl" "--megatron-args: --cross-entropy-fusion-impl: bad value \"apex\" (native or te)" \
    --megatron-args "$flags --cross-entropy-loss-fusion --cross-entropy-fusion-impl apex"
refused "a missing impl" "--cross-entropy-fusion-impl needs a value" \
    --megatron-args "$flags --cross-entropy-fusion-impl"
sed 's/"cross_entropy":	"te"/"cross_entropy":	"fused"/' "$tmp/plan.json" >"$tmp/bad.json"
out=$("$bin" export "$tmp/bad.json" --to megatron 2>&1)
[ $? -eq 2 ] && case "$out" in *'cross_entropy: "fused" is not unfused, native or te'*) true ;; *) false ;; esac &&
    ok || bad "plan.json with a bad cross_entropy: $out"

finish
