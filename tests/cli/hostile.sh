#!/bin/sh
# Inputs a hostile or careless user feeds every command (docs/hardening.md,
# "A hostile QA pass"): each must exit 2 with a message that names the file
# and the field, never crash, hang or print a plan from nonsense. The files
# that need no generating are in tests/data/bad/ and are run by
# graph_bad.sh, export_bad.sh and test_cost_cluster; these are the ones
# made here, or run through the command that went wrong.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/refusal.inc"

tiny="$src/examples/gpt-tiny.json"
llama="$src/examples/hf/llama-3-8b.json"
bad="$src/tests/data/bad"

# An attention length factor of 1e-320 priced attention at infinity, and
# `plan` crashed in the ILP tables (SEGV under AddressSanitizer).
curve="$bad/cluster_attention_factor_subnormal.json"
expect_refusal "$curve" "gpu.attention_by_length.backward[0]: 9.99989e-321 x \
gpu.attention_efficiency 0.6 is 6e-321 of peak" plan "$llama" --gpus 16 --cluster "$curve"

# A measured GEMM of 1024^3 in 1e29 s planned "fine" at years a step.
slow="$bad/cluster_gemm_too_slow.json"
expect_refusal "$slow" "measured.gemm[0].seconds: 1024 x 1024 x 1024 bf16 in 1e+29 s" \
    estimate "$llama" --gpus 16 --megatron tp=2,pp=2,mbs=1,gbs=64 --cluster "$slow"

# A model named "tiny\nrm -rf ~ #" (a newline escaped, as JSON allows): the
# launch script's third line was `rm -rf ~ # on 4 GPUs ...`.
named="$bad/model_name-newline.json"
expect_refusal "$named" "name: a control character (0x0a) in a name" \
    estimate "$named" --gpus 4 --megatron tp=1,pp=1,mbs=1,gbs=8 --emit megatron

# A plan edited by hand the same way, and one with a second document pasted
# after it, which the reader used to stop before.
plan="$tmp/plan.json"
"$bin" plan "$tiny" --gpus 4 --target megatron -o "$plan" >/dev/null 2>&1 || bad "plan did not write $plan"
"$bin" export "$plan" --to megatron >/dev/null 2>&1 && ok || bad "$plan: its own plan is refused"
sed 's/"model":\([[:space:]]*\)"gpt-tiny"/"model":\1"gpt-tiny\\nrm -rf ~ #"/' "$plan" \
    >"$tmp/injected.json"
grep -q 'rm -rf' "$tmp/injected.json" || bad "$tmp/injected.json: not edited"
expect_refusal "$tmp/injected.json" "model: a control character (0x0a)" \
    export "$tmp/injected.json" --to megatron
# A plan edited so that it lists the layer's norm twice and its query
# projection not at all: the export read its degrees off the ops listed
# and checked the query's sharding nowhere.
sed 's/"op":\([[:space:]]*\)"l0.q"/"op":\1"l0.ln1"/' "$plan" >"$tmp/op_twice.json"
expect_refusal "$tmp/op_twice.json" "op \"l0.ln1\" is listed twice" \
    export "$tmp/op_twice.json" --to megatron
cat "$plan" "$plan" >"$tmp/twice.json"
expect_refusal "$tmp/twice.json" "text after the closing '}'" \
    export "$tmp/twice.json" --to torchtitan

# A cluster file with a second document pasted after it: the first was
# read and the rest ignored.
cluster="$src/examples/clusters/synthetic-measured.json"
{ cat "$cluster"; echo '{"gpu": {"hbm_bandwidth": 1}}'; } >"$tmp/cluster_twice.json"
expect_refusal "$tmp/cluster_twice.json" "text after the closing '}'" \
    compare "$tiny" --gpus 4 --megatron tp=1,pp=1,mbs=1,gbs=8 --cluster "$tmp/cluster_twice.json"

# A model that declares more tokens a sequence than --seq may ask for.
seq="$bad/model_seq-over-limit.json"
expect_refusal "$seq" "dims.s.size: 16777217 tokens is over the limit of 16777216" \
    plan "$seq" --gpus 1

# Files that are no JSON document at all, in each reader's place.
: >"$tmp/empty.json"
expect_refusal "$tmp/empty.json" "unexpected end of input" graph "$tmp/empty.json"
expect_refusal "$tmp/empty.json" "not valid JSON" plan "$tiny" --gpus 2 --cluster "$tmp/empty.json"
expect_refusal "$tmp/empty.json" "unexpected end of input" export "$tmp/empty.json" --to megatron
expect_refusal /dev/null "not a regular file" plan "$tiny" --gpus 2 --cluster /dev/null
expect_refusal /dev/null "not a regular file" export /dev/null --to deepspeed
expect_refusal "$tmp" "not a regular file" estimate "$tiny" --gpus 2 \
    --megatron tp=1,pp=1,mbs=1,gbs=8 --cluster "$tmp"

# A FIFO (a named pipe) in a file's place: opening one waits for a writer,
# and every reader hung there; it is refused as not a regular file, as a
# cluster name that is neither a preset nor a path is.
# fifo_refused NAME ARGS...: exit 2 within 10 s, naming NAME.
fifo_refused() {
    name=$1
    shift
    out=$(abs=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin") &&
          cd "$tmp" && timeout 10 "$abs" "$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF "$name: not a regular file" && ok ||
        bad "a FIFO as $*: exit $rc (124: it hung), '$out'"
}
if mkfifo "$tmp/pipe.json" "$tmp/pipe" 2>/dev/null; then
    fifo_refused pipe.json graph pipe.json
    fifo_refused pipe.json export pipe.json --to megatron
    fifo_refused pipe plan "$(cd "$(dirname "$tiny")" && pwd)/gpt-tiny.json" --gpus 2 \
        --cluster pipe
fi

# A Hugging Face config whose file name holds a newline: the model takes
# its name from the file, and the launch script printed that name on a
# line of its own. The name keeps a '?' for it, and the plan's model_path
# (the path itself) is refused by the export.
nl="$tmp/ll
rm -rf ~ #.json"
cp "$llama" "$nl"
"$bin" plan "$nl" --gpus 8 --no-sweep >"$tmp/nl.out" 2>&1
grep -q "^plan for ll?rm -rf ~ #.json on 8 GPUs" "$tmp/nl.out" && ok ||
    bad "a newline in a config's file name: $(head -3 "$tmp/nl.out")"
"$bin" estimate "$nl" --gpus 8 --megatron tp=2,pp=1,mbs=1,gbs=64 --emit megatron \
    >"$tmp/nl.sh" 2>"$tmp/nl.err"
rc=$?
[ $rc -eq 2 ] && ! grep -q "^rm -rf" "$tmp/nl.sh" &&
    grep -q "model_path: a control character (0x0a)" "$tmp/nl.err" && ok ||
    bad "--emit megatron of a config named with a newline: exit $rc: $(cat "$tmp/nl.err")"
# calibrate names the model's path in the cluster file it writes, whose
# reader refuses control characters: the path keeps a '?' there.
"$bin" calibrate "$nl" --gpus 8 --megatron tp=2,pp=1,mbs=1,gbs=64 --measured-step 9 \
    -o "$tmp/nl_cluster.json" >/dev/null 2>&1 &&
    grep -q '"from":.*ll?rm -rf ~ #.json on 8 GPUs' "$tmp/nl_cluster.json" &&
    "$bin" estimate "$llama" --gpus 8 --megatron tp=2,pp=1,mbs=1,gbs=64 \
        --cluster "$tmp/nl_cluster.json" >/dev/null 2>&1 && ok ||
    bad "calibrate of a config named with a newline: $(grep '"from"' "$tmp/nl_cluster.json")"

# The bounds above refuse no real measurement: the profiles and the
# calibrated cluster in examples/ still load and price.
for c in "$src"/examples/clusters/*.json; do
    "$bin" estimate "$llama" --gpus 16 --gpus-per-node 8 --megatron tp=2,pp=2,mbs=1,gbs=64 \
        --cluster "$c" >/dev/null 2>&1 && ok || bad "$c: refused"
done

[ "$checked" -ge 13 ] || bad "only $checked hostile inputs checked"
finish
