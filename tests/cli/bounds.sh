#!/bin/sh
# Inputs whose search would be absurd are refused at once, with exit code 2
# and a message naming the flag or the file and field (docs/hardening.md):
# a million GPUs, huge batches and sequences, models past the op, tensor,
# layer and layer-class caps. Models are generated here, not committed.
set -u
. "$(dirname "$0")/lib.sh"
tiny=$src/examples/gpt-tiny.json

refused() { # what, expected substring, command...
    what=$1
    want=$2
    shift 2
    out=$(timeout 60 "$@" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want"; then
        ok
    else
        bad "$what: exit $rc, wanted 2 and '$want' in: $out"
    fi
}

refused "a million and more GPUs" "--gpus needs an integer from 1 to 1000000" \
    "$bin" plan "$tiny" --gpus 1048576
refused "global batch past the cap" "--global-batch needs an integer from 1 to 65536" \
    "$bin" plan "$tiny" --global-batch 1000000
refused "fractional global batch" "--global-batch" "$bin" plan "$tiny" --global-batch 1.5
refused "sequence past the cap" "--seq needs an integer from 1 to 16777216" \
    "$bin" plan "$tiny" --seq 16777217
refused "graph --seq past the cap" "--seq needs an integer from 1 to 16777216" \
    "$bin" graph "$tiny" --seq 1099511627776
refused "graph --batch past the cap" "--batch needs an integer from 1 to 1048576" \
    "$bin" graph "$tiny" --batch 1048577
refused "GPUs that fill no whole node" "--gpus 12 --gpus-per-node 8: preset: 12 GPUs" \
    "$bin" plan "$tiny" --gpus 12 --gpus-per-node 8

# A chain of n layers (scripts/chain-model.sh); with distinct=1 no two
# layers share a class.
chain() { # n, distinct, file
    sh "$src/scripts/chain-model.sh" "$@"
}

chain 3000 0 "$tmp/deep.json"
refused "more layers than a plan is searched for" "deep.json: 3000 layers; plans are searched for at most 2048" \
    "$bin" plan "$tmp/deep.json" --gpus 8
chain 100 1 "$tmp/distinct.json"
refused "more layer classes than a plan is searched for" \
    "distinct.json: 100 distinct layers (layer classes); plans are searched for at most 64" "$bin" estimate "$tmp/distinct.json" \
    --megatron tp=1
# 100,000 distinct layers still load and summarise (bench/graph_scale.sh
# times it: nothing there is quadratic; a timed check does not belong here).
chain 100000 1 "$tmp/wide.json"
if "$bin" graph "$tmp/wide.json" --json >"$tmp/wide.out" 2>&1 &&
    grep -q '"layers":	100000' "$tmp/wide.out"; then
    ok
else
    bad "100,000 distinct layers: $(head -c 300 "$tmp/wide.out")"
fi

# One tensor past AP_MAX_TENSORS (1,000,000) is refused before any is built.
awk 'BEGIN {
    printf "{\"format\":\"autopar-model/1\",\"name\":\"wide\",\"dims\":{\"h\":{\"kind\":\"hidden\",\"size\":8}},\"ops\":[],\"tensors\":["
    for (i = 0; i <= 1000000; i++)
        printf "%s{\"name\":\"%d\",\"shape\":\"h\",\"role\":\"input\"}", i ? "," : "", i
    printf "]}\n"
}' >"$tmp/tensors.json"
refused "more tensors than the cap" "tensors.json: tensors: 1000001 tensors, more than the limit of 1000000" \
    "$bin" graph "$tmp/tensors.json"

finish
