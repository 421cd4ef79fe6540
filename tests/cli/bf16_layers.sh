#!/bin/sh
# The first and last layers in bf16 under FP8 from the command line: the
# flags and the spec price alike, the report says so, plan.json records the
# layers, the Megatron-LM export states them and its flags price the same
# step; compare's sweep keeps them; torchtitan and DeepSpeed exports refuse
# them (tests/test_bf16_layers.c has the pricing).
set -u
. "$(dirname "$0")/lib.sh"

model=$src/examples/hf/llama-3-8b.json
flags="--micro-batch-size 1 --global-batch-size 64 --seq-length 2048 --fp8-format hybrid
 --fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-end-in-bf16 2
 --use-distributed-optimizer --fp8-param-gather"
"$bin" estimate "$model" --gpus 8 --megatron-args "$flags" -o "$tmp/plan.json" \
    >"$tmp/report" 2>"$tmp/err" || bad "estimate: $(cat "$tmp/err")"
grep -qF "the first 1 and last 2 layers in bf16 throughout (--first-last-layers-bf16)" \
    "$tmp/report" && ok || bad "the report: $(sed -n 3,4p "$tmp/report")"
grep -q '"bf16_first_layers":[[:space:]]*1,' "$tmp/plan.json" &&
    grep -q '"bf16_last_layers":[[:space:]]*2,' "$tmp/plan.json" && ok ||
    bad "plan.json lacks the layers"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/export.sh" 2>"$tmp/err" ||
    bad "export: $(cat "$tmp/err")"
grep -qxF "  --num-layers-at-end-in-bf16 2" "$tmp/export.sh" &&
    grep -qxF "  --first-last-layers-bf16" "$tmp/export.sh" && ok ||
    bad "the export lacks the flags"
a=$("$bin" estimate "$model" --gpus 8 --json --megatron-args "$flags" | grep step_time_s)
b=$("$bin" estimate "$model" --gpus 8 --json --megatron-args "$(megatron_args "$tmp/export.sh")" |
    grep step_time_s)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the export prices otherwise: $a vs $b"
# plan --bf16-layers searches with them and its export states them; it
# needs FP8 with tensorwise scaling.
"$bin" plan "$model" --gpus 8 --seq 2048 --global-batch 64 --fp8 --fp8-recipe tensorwise \
    --bf16-layers 1,1 --target megatron --quiet -o "$tmp/searched.json" >"$tmp/report" \
    2>"$tmp/err" || bad "plan --bf16-layers: $(cat "$tmp/err")"
"$bin" export "$tmp/searched.json" --to megatron 2>&1 |
    grep -qxF "  --num-layers-at-start-in-bf16 1" && ok || bad "the searched plan's export"
"$bin" plan "$model" --gpus 8 --fp8 --bf16-layers 1,1 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "give --fp8 and --fp8-recipe tensorwise, blockwise or mxfp8" "$tmp/err" && ok ||
    bad "plan --bf16-layers with delayed scaling: $(cat "$tmp/err")"

# compare's sweep keeps the graph's bf16 layers in every configuration.
"$bin" compare "$model" --gpus 8 --seq 2048 --quiet --sweep --megatron \
    "tp=1,mbs=1,gbs=64,fp8=1,fp8_recipe=tensorwise,bf16_first=1,bf16_last=1" \
    >"$tmp/compare" 2>"$tmp/err" &&
    grep -q "megatron (sweep): .*bf16_first=1,bf16_last=1" "$tmp/compare" && ok ||
    bad "compare --sweep: $(cat "$tmp/err") $(grep sweep "$tmp/compare")"
for to in torchtitan deepspeed; do
    "$bin" export "$tmp/plan.json" --to $to >/dev/null 2>"$tmp/err"
    [ $? -eq 2 ] && grep -q "no switch that keeps the first and last layers in bf16" \
        "$tmp/err" && ok || bad "$to took them: $(cat "$tmp/err")"
done
finish
