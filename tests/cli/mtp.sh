#!/bin/sh
# Multi-token prediction from a Megatron-LM command line: --mtp-num-layers
# builds the Hugging Face config with the module, a layout places it as 'm'
# on the last virtual stage, the Megatron-LM export states both and its
# flags price to the same step; torchtitan refuses it (tests/test_mtp.c has
# the graph and the pricing).
set -u
. "$(dirname "$0")/lib.sh"

model=$src/examples/hf/llama-3-8b.json
args="--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 16 \
--seq-length 1024 --mtp-num-layers 1 --pipeline-model-parallel-layout Et*9|t*8|t*8|t*7mL"

"$bin" estimate "$model" --gpus 8 --megatron-args "$args" --json -o "$tmp/plan.json" \
    >"$tmp/first" 2>"$tmp/err" || bad "estimate: $(cat "$tmp/err")"
grep -q '"mtp_layers":.1,' "$tmp/plan.json" && ok || bad "plan.json lacks mtp_layers"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>"$tmp/err" ||
    bad "export: $(cat "$tmp/err")"
grep -qxF "  --mtp-num-layers 1" "$tmp/args.sh" && ok || bad "the export lacks --mtp-num-layers"
grep -qxF "  --pipeline-model-parallel-layout Et*9|t*8|t*8|t*7mL" "$tmp/args.sh" && ok ||
    bad "the export's layout: $(grep layout "$tmp/args.sh")"
"$bin" estimate "$model" --gpus 8 --megatron-args "$(megatron_args "$tmp/args.sh")" --json \
    >"$tmp/again" 2>"$tmp/err" || bad "the export's flags: $(cat "$tmp/err")"
a=$(grep '"step_time_s"' "$tmp/first")
b=$(grep '"step_time_s"' "$tmp/again")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the export prices differently: $a vs $b"
"$bin" export "$tmp/plan.json" --to torchtitan >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "torchtitan's models have no multi-token-prediction module" "$tmp/err" &&
    ok || bad "torchtitan takes MTP: $(cat "$tmp/err")"
"$bin" graph "$model" --mtp-layers 1 --seq 1024 >"$tmp/graph" 2>&1 &&
    grep -q "2 cross_entropy" "$tmp/graph" && ok || bad "graph --mtp-layers: $(cat "$tmp/graph")"
finish
