#!/bin/sh
# The flex token dispatcher from a Megatron-LM command line
# (tests/test_deepep.c has the pricing): DeepEP is faster than the
# all-to-all across nodes, plan.json keeps the backend, the Megatron-LM
# export states it and its flags price the same again, torchtitan refuses
# it, and a bad value in plan.json names the field. The shared-expert
# overlap reaches the export as well.
set -u
. "$(dirname "$0")/lib.sh"

model=$src/examples/hf/qwen3-30b-a3b.json
base="--expert-model-parallel-size 16 --num-experts 128 --moe-router-topk 8 --moe-grouped-gemm \
--micro-batch-size 1 --global-batch-size 16 --seq-length 1024"
step() { grep '"step_time_s"' "$1" | head -1 | tr -dc '0-9.e+-'; }

"$bin" estimate "$model" --gpus 16 --seq 1024 --json --megatron-args \
    "$base --moe-token-dispatcher-type alltoall" >"$tmp/a2a" 2>"$tmp/err" || bad "alltoall: $(cat "$tmp/err")"
"$bin" estimate "$model" --gpus 16 --seq 1024 --json --megatron-args \
    "$base --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep" \
    -o "$tmp/plan.json" >"$tmp/flex" 2>"$tmp/err" || bad "flex: $(cat "$tmp/err")"
awk -v a="$(step "$tmp/flex")" -v b="$(step "$tmp/a2a")" 'BEGIN { exit !(a < b) }' && ok ||
    bad "DeepEP is not faster across two nodes: $(step "$tmp/flex") vs $(step "$tmp/a2a")"
grep -q '"moe_dispatcher":.*"deepep"' "$tmp/plan.json" && ok || bad "plan.json lacks moe_dispatcher"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>"$tmp/err" ||
    bad "export: $(cat "$tmp/err")"
grep -qxF "  --moe-token-dispatcher-type flex" "$tmp/args.sh" &&
    grep -qxF "  --moe-flex-dispatcher-backend deepep" "$tmp/args.sh" && ok ||
    bad "the export's dispatcher: $(grep dispatcher "$tmp/args.sh")"
"$bin" estimate "$model" --gpus 16 --seq 1024 --json --megatron-args "$(megatron_args "$tmp/args.sh")" \
    >"$tmp/again" 2>"$tmp/err" || bad "the export's flags: $(cat "$tmp/err")"
[ "$(step "$tmp/flex")" = "$(step "$tmp/again")" ] && ok ||
    bad "the export prices differently: $(step "$tmp/flex") vs $(step "$tmp/again")"
# torchtitan's expert parallelism needs FSDP's shard ranks, which the
# distributed optimizer maps to; the dispatcher is then what it lacks.
"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron-args "$base --use-distributed-optimizer \
--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep" -o "$tmp/zero1.json" \
    >/dev/null 2>"$tmp/err" || bad "flex with ZeRO-1: $(cat "$tmp/err")"
"$bin" export "$tmp/zero1.json" --to torchtitan >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "token dispatchers" "$tmp/err" && ok || bad "torchtitan: $(cat "$tmp/err")"
"$bin" export "$tmp/plan.json" --to torchtitan >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "borrows FSDP's shard ranks" "$tmp/err" && ok ||
    bad "torchtitan without sharding: $(cat "$tmp/err")"
sed 's/"moe_dispatcher":[ \t]*"deepep"/"moe_dispatcher": "nccl"/' "$tmp/plan.json" >"$tmp/bad.json"
"$bin" export "$tmp/bad.json" --to megatron >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'moe_dispatcher: "nccl" is not alltoall, deepep, hybridep or allgather' "$tmp/err" &&
    ok || bad "a bad moe_dispatcher: $(cat "$tmp/err")"
# The shared-expert overlap travels the same way.
"$bin" estimate "$src/examples/hf/deepseek-v3.json" --gpus 16 --seq 1024 --megatron \
    "tp=8,sp=1,pp=2,first=30,ep=8,etp=1,mbs=1,gbs=16,shared_overlap=1" -o "$tmp/ds.json" \
    >/dev/null 2>"$tmp/err" || bad "DeepSeek-V3 estimate: $(cat "$tmp/err")"
grep -q '"moe_shared_expert_overlap":.*true' "$tmp/ds.json" && ok ||
    bad "plan.json lacks moe_shared_expert_overlap"
"$bin" export "$tmp/ds.json" --to megatron 2>"$tmp/err" | grep -qxF "  --moe-shared-expert-overlap" &&
    ok || bad "the export lacks --moe-shared-expert-overlap: $(cat "$tmp/err")"
# autopar plan runs with the dispatcher asked for, where the model has
# experts; the allgather dispatcher is estimate's alone.
"$bin" plan "$model" --gpus 16 --seq 1024 --global-batch 64 --dispatcher hybridep --quiet \
    -o "$tmp/p.json" >/dev/null 2>"$tmp/err" || bad "plan --dispatcher: $(cat "$tmp/err")"
grep -q '"moe_dispatcher":.*"hybridep"' "$tmp/p.json" && ok || bad "the plan lacks its dispatcher"
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --global-batch 8 --dispatcher deepep --quiet \
    -o "$tmp/d.json" >/dev/null 2>"$tmp/err" || bad "dense plan --dispatcher: $(cat "$tmp/err")"
grep -q '"moe_dispatcher"' "$tmp/d.json" && bad "a dense plan names a dispatcher" || ok
grep -q "warning: gpt-tiny has no experts: --dispatcher deepep changes nothing" "$tmp/err" &&
    ok || bad "a dense model's --dispatcher is said to change nothing: $(cat "$tmp/err")"
"$bin" plan "$model" --gpus 16 --dispatcher allgather >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'dispatcher: bad value "allgather"' "$tmp/err" && ok ||
    bad "plan takes allgather: $(cat "$tmp/err")"

# Token dropping too: the capacity factor and its padding reach plan.json and
# the export, whose flags price the same.
"$bin" estimate "$src/examples/hf/mixtral-8x7b.json" --gpus 8 --seq 1024 --json --megatron \
    "ep=8,mbs=1,gbs=8,capacity_factor=1.25,pad_capacity=1" -o "$tmp/cap.json" >"$tmp/cap" \
    2>"$tmp/err" || bad "capacity estimate: $(cat "$tmp/err")"
grep -q '"moe_expert_capacity_factor":.*1.25' "$tmp/cap.json" &&
    grep -q '"moe_pad_expert_input_to_capacity":.*true' "$tmp/cap.json" && ok ||
    bad "plan.json lacks the capacity"
"$bin" export "$tmp/cap.json" --to megatron >"$tmp/cap.sh" 2>"$tmp/err" || bad "export: $(cat "$tmp/err")"
grep -qxF "  --moe-expert-capacity-factor 1.25" "$tmp/cap.sh" &&
    grep -qxF "  --moe-pad-expert-input-to-capacity" "$tmp/cap.sh" && ok ||
    bad "the export's capacity: $(grep capacity "$tmp/cap.sh")"
"$bin" estimate "$src/examples/hf/mixtral-8x7b.json" --gpus 8 --seq 1024 --json \
    --megatron-args "$(megatron_args "$tmp/cap.sh")" >"$tmp/cap2" 2>"$tmp/err" ||
    bad "the capacity export's flags: $(cat "$tmp/err")"
[ "$(step "$tmp/cap")" = "$(step "$tmp/cap2")" ] && ok ||
    bad "the capacity export prices differently: $(step "$tmp/cap") vs $(step "$tmp/cap2")"
finish
