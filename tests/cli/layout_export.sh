#!/bin/sh
# A Megatron-LM pipeline layout (--megatron's layout=) of uneven model
# chunks: plan.json carries them as chunk_layers, the report names each
# stage's chunks, the Megatron-LM export states the layout alone as a word
# the shell hands Megatron-LM intact, and its flags price to the same
# prediction; torchtitan and DeepSpeed refuse it, and a plan whose
# chunk_layers disagree with its stages is refused naming the field.
set -u
. "$(dirname "$0")/lib.sh"

model=$src/examples/gpt-1.3b.json
layout='Et*5|t*7|t*7|t*5L'
spec="tp=1,pp=2,mbs=1,gbs=64,layout=$layout"

"$bin" estimate "$model" --gpus 8 --megatron "$spec" -o "$tmp/plan.json" \
    >"$tmp/report" 2>"$tmp/err" || bad "estimate $spec: $(cat "$tmp/err")"
# Virtual stage c*pp + s is chunk c of stage s: stage 0 holds 0-4 and 12-18.
grep -q '"chunk_layers":.\[5, 7, 7, 5\],' "$tmp/plan.json" && ok ||
    bad "plan.json lacks chunk_layers [5, 7, 7, 5]"
grep -q 'stage 0: layers 0-4,12-18 +embedding' "$tmp/report" &&
    grep -q 'stage 1: layers 5-11,19-23 +head' "$tmp/report" && ok ||
    bad "the report names each stage's chunks: $(grep 'stage ' "$tmp/report")"

"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>"$tmp/err" ||
    bad "export: $(cat "$tmp/err")"
grep -qxF "  --pipeline-model-parallel-layout $layout" "$tmp/args.sh" && ok ||
    bad "the export states the layout: $(cat "$tmp/args.sh")"
for flag in --num-layers-per-virtual-pipeline-stage --num-virtual-stages-per-pipeline-rank \
    --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers \
    --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split; do
    grep -q -- "$flag" "$tmp/args.sh" && bad "the layout's export also states $flag" || ok
done
"$bin" estimate "$model" --gpus 8 --megatron "$spec" --emit megatron >"$tmp/emitted" 2>/dev/null
cmp -s "$tmp/emitted" "$tmp/args.sh" && ok || bad "--emit megatron and export differ"

# The script's MEGATRON_ARGS, expanded as its torchrun line expands it,
# hands Megatron-LM the layout as one word: no quotes of its own, and no
# '|' that the shell reads as a pipe.
sed -n '/^MEGATRON_ARGS="$/,/^"$/p' "$tmp/args.sh" >"$tmp/words.sh"
echo 'for w in $MEGATRON_ARGS; do printf "%s\n" "$w"; done' >>"$tmp/words.sh"
(cd "$tmp" && sh words.sh) >"$tmp/words" 2>"$tmp/err"
grep -qxF -- "$layout" "$tmp/words" && [ ! -s "$tmp/err" ] && ok ||
    bad "the layout does not reach Megatron-LM as one word: $(cat "$tmp/err" "$tmp/words")"

# Fed back through --megatron-args, the flags price to the same prediction.
"$bin" estimate "$model" --gpus 8 --megatron "$spec" --json >"$tmp/want" 2>/dev/null
args=$(megatron_args "$tmp/args.sh")
"$bin" estimate "$model" --gpus 8 --megatron-args "$args" --json >"$tmp/got" 2>"$tmp/err"
grep -q '"step_time_s"' "$tmp/want" && cmp -s "$tmp/want" "$tmp/got" && ok ||
    bad "round trip of $spec: $(cat "$tmp/err") $(diff "$tmp/want" "$tmp/got")"

for to in torchtitan deepspeed; do
    "$bin" export "$tmp/plan.json" --to "$to" >/dev/null 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 2 ] && grep -q "uneven layer counts (chunk_layers" "$tmp/err" && ok ||
        bad "$to: exit $rc, expected 2 refusing uneven chunks: $(cat "$tmp/err")"
done

# chunk_layers that do not hold stage 1's 12 layers.
sed 's/"chunk_layers":\t\[5, 7, 7, 5\]/"chunk_layers":\t[5, 7, 7, 6]/' "$tmp/plan.json" \
    >"$tmp/bad.json"
"$bin" export "$tmp/bad.json" --to megatron >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] && grep -q "bad.json: stages\[1\].layers: holds 12 layers, but its chunks in chunk_layers hold 13" "$tmp/err" && ok ||
    bad "wrong chunk sum: exit $rc: $(cat "$tmp/err")"

# The trace names each stage's chunks.
"$bin" estimate "$model" --gpus 8 --megatron "$spec" --trace "$tmp/trace.json" >/dev/null 2>&1
grep -q '"stage 0: GPUs 0-3, 12 layers in 2 chunks of 5+7"' "$tmp/trace.json" && ok ||
    bad "the trace's stage 0 names its chunks"
finish
