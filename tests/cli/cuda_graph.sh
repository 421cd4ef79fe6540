#!/bin/sh
# CUDA graphs from a Megatron-LM command line: the plan is priced as
# without them and says why in a caveat (text and --json); plan.json keeps
# the implementation, the Megatron-LM export states it and its flags price
# the same again; torchtitan and DeepSpeed refuse it; a bad value in
# plan.json names the field.
set -u
. "$(dirname "$0")/lib.sh"

model=$src/examples/hf/llama-3-8b.json
args="--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 \
--global-batch-size 32 --seq-length 1024 --use-distributed-optimizer --overlap-grad-reduce"

"$bin" estimate "$model" --gpus 8 --seq 1024 --json --megatron-args "$args --cuda-graph-impl local" \
    -o "$tmp/plan.json" >"$tmp/first" 2>"$tmp/err" || bad "estimate: $(cat "$tmp/err")"
grep -q "captured in CUDA graphs (--cuda-graph-impl local)" "$tmp/first" && ok ||
    bad "--json lacks the caveat: $(grep -A2 caveats "$tmp/first")"
grep -q '"cuda_graph_impl":.*"local"' "$tmp/plan.json" && ok || bad "plan.json lacks cuda_graph_impl"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>"$tmp/err" ||
    bad "export: $(cat "$tmp/err")"
grep -qxF "  --cuda-graph-impl local" "$tmp/args.sh" && ok || bad "the export lacks --cuda-graph-impl"
"$bin" estimate "$model" --gpus 8 --seq 1024 --json --megatron-args "$(megatron_args "$tmp/args.sh")" \
    >"$tmp/again" 2>"$tmp/err" || bad "the export's flags: $(cat "$tmp/err")"
cmp -s "$tmp/first" "$tmp/again" && ok || bad "the export prices differently: $(diff "$tmp/first" "$tmp/again")"
"$bin" estimate "$model" --gpus 8 --seq 1024 --json --megatron-args "$args" >"$tmp/plain" 2>&1
a=$(grep '"step_time_s"' "$tmp/first")
b=$(grep '"step_time_s"' "$tmp/plain")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "graphs change the step: $a vs $b"
for to in torchtitan deepspeed; do
    "$bin" export "$tmp/plan.json" --to $to >/dev/null 2>"$tmp/err"
    [ $? -eq 2 ] && grep -q "CUDA graphs\|tensor parallelism" "$tmp/err" && ok ||
        bad "$to takes the graphs: $(cat "$tmp/err")"
done
"$bin" estimate "$model" --gpus 8 --seq 1024 --megatron "tp=2,sp=1,mbs=1,gbs=32,cuda_graph=transformer_engine" \
    >"$tmp/report" 2>&1 && grep -q "caveat: captured in CUDA graphs (--cuda-graph-impl transformer_engine)" \
    "$tmp/report" && ok || bad "the spec's cuda_graph: $(tail -2 "$tmp/report")"
sed 's/"cuda_graph_impl":[ \t]*"local"/"cuda_graph_impl": "eager"/' "$tmp/plan.json" >"$tmp/bad.json"
"$bin" export "$tmp/bad.json" --to megatron >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'cuda_graph_impl: "eager" is not none, local or transformer_engine' "$tmp/err" &&
    ok || bad "a bad cuda_graph_impl: $(cat "$tmp/err")"
finish
