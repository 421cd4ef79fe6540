#!/bin/sh
# TP communication overlap from the command line: the spec and Megatron's
# --tp-comm-overlap (tuning flags read past) price the same faster step,
# the report and --json say it, tensor parallelism without sequence
# parallelism refuses it, plan.json and the Megatron export carry it through
# a round trip, torchtitan gets async TP with compile, DeepSpeed refuses it;
# a searched plan keeps it only where its layers are split tensor-parallel.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
step() { sed -n 's/.*"step_time_s":[^0-9]*\([0-9.e+-]*\).*/\1/p' "$1"; }

spec="tp=4,pp=2,mbs=1,gbs=128,sp=1,zero=1"
flags="--tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --micro-batch-size 1
 --global-batch-size 128 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec" >"$tmp/off" 2>&1 || bad "estimate"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,tp_overlap=1" >"$tmp/on" 2>&1 ||
    bad "tp_overlap=1 estimate: $(cat "$tmp/on")"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$flags --tp-comm-overlap
 --tp-comm-overlap-cfg ub.yaml --disable-tp-comm-bulk-dgrad" >"$tmp/flags" 2>&1 ||
    bad "--tp-comm-overlap flags: $(cat "$tmp/flags")"
cmp -s "$tmp/on" "$tmp/flags" && ok || bad "tp_overlap=1 and --tp-comm-overlap differ"
grep -q '"tp_comm_overlap":.true' "$tmp/on" && grep -q '"tp_comm_overlap":.false' "$tmp/off" &&
    ok || bad "--json says whether TP communication overlaps"
awk -v a="$(step "$tmp/on")" -v b="$(step "$tmp/off")" 'BEGIN { exit !(a < b) }' && ok ||
    bad "overlap is not faster: $(step "$tmp/on") vs $(step "$tmp/off")"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,tp_overlap=1" |
    grep -q "communication: tensor-parallel .*overlapped with GEMMs" && ok ||
    bad "the report says the TP time is the exposed part"

out=$("$bin" estimate "$model" --gpus 16 --megatron "tp=4,pp=2,mbs=1,gbs=128,tp_overlap=1" 2>&1)
[ $? -eq 2 ] && case "$out" in *tp-comm-overlap*sequence\ parallelism*) true ;; *) false ;; esac &&
    ok || bad "tp > 1 without sp refuses the overlap: $out"
out=$("$bin" estimate "$model" --gpus 16 --megatron-args "--tensor-model-parallel-size 4
 --tp-comm-overlap" 2>&1)
[ $? -eq 2 ] && ok || bad "--tp-comm-overlap without --sequence-parallel is refused: $out"
"$bin" estimate "$model" --gpus 16 --json --megatron "tp=1,pp=2,mbs=1,gbs=128" >"$tmp/t1" 2>&1
"$bin" estimate "$model" --gpus 16 --json --megatron "tp=1,pp=2,mbs=1,gbs=128,tp_overlap=1" \
    >"$tmp/t1on" 2>&1
cmp -s "$tmp/t1" "$tmp/t1on" && ok || bad "tp=1: the setting changes nothing"

# plan.json -> Megatron flags -> estimate: the same prediction.
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,tp_overlap=1" -o "$tmp/plan.json" \
    >"$tmp/want" 2>/dev/null
grep -q '^	"tp_comm_overlap":	true' "$tmp/plan.json" && ok || bad "plan.json has tp_comm_overlap"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec" -o "$tmp/plain.json" >/dev/null 2>&1
grep -q '^	"tp_comm_overlap"' "$tmp/plain.json" && bad "plan.json without overlap names it" || ok
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "--tp-comm-overlap" "$tmp/args.sh" && ok || bad "Megatron export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/want" "$tmp/got" && ok || bad "round trip: $(diff "$tmp/want" "$tmp/got")"
"$bin" export "$tmp/plan.json" --to torchtitan >"$tmp/titan.sh" 2>&1
grep -q -- "--parallelism.enable_async_tensor_parallel" "$tmp/titan.sh" &&
    grep -q -- "--compile.enable" "$tmp/titan.sh" && ok ||
    bad "torchtitan export has async TP and compile: $(cat "$tmp/titan.sh")"
out=$("$bin" export "$tmp/plan.json" --to deepspeed 2>&1)
[ $? -eq 2 ] && case "$out" in *communication\ overlap*) true ;; *) false ;; esac && ok ||
    bad "DeepSpeed refuses the overlap: $out"

# A searched plan records it when its layers are split tensor-parallel:
# gpt-1.3b on 2 GPUs at a global batch of 8 splits the heads and the MLP
# (n@1, f@1) with sequence parallelism between them. (The search's plan:
# Megatron-LM's fastest configuration there is plain data parallelism.)
layers() { awk '/"block":/ { layer = /layer class/ } layer && /"sharding":/' "$1"; }
"$bin" plan "$src/examples/gpt-1.3b.json" --gpus 2 --global-batch 8 --quiet --tp-comm-overlap \
    --no-sweep \
    -o "$tmp/p.json" >"$tmp/report" 2>&1 && grep -q '^	"tp_comm_overlap":	true' "$tmp/p.json" && ok ||
    bad "plan --tp-comm-overlap writes tp_comm_overlap into plan.json"
layers "$tmp/p.json" | grep -q '"f@1"' && layers "$tmp/p.json" | grep -q '"s@1"' && ok ||
    bad "gpt-1.3b on 2 GPUs: the layers are not split tensor-parallel: $(layers "$tmp/p.json")"
grep -q "overlapped with GEMMs" "$tmp/report" && ok || bad "the report says the overlap: $(cat "$tmp/report")"

# Where plain data parallelism wins (gpt-1.3b on 4 GPUs at a global batch of
# 64: the layers split the batch and nothing else), there is nothing to
# overlap: plan.json says false, the plan is the one searched without the
# setting, byte for byte, and the report says it was left out.
"$bin" plan "$src/examples/gpt-1.3b.json" --gpus 4 --global-batch 64 --quiet --tp-comm-overlap \
    -o "$tmp/dp.json" >"$tmp/report" 2>&1 || bad "plan at tp = 1: $(cat "$tmp/report")"
[ -n "$(layers "$tmp/dp.json")" ] && ! layers "$tmp/dp.json" | grep -qv '"b@1"' && ok ||
    bad "gpt-1.3b on 4 GPUs: the layers split more than the batch: $(layers "$tmp/dp.json")"
grep -q '^		"tp_comm_overlap":	false' "$tmp/dp.json" &&
    ! grep -q '^	"tp_comm_overlap"' "$tmp/dp.json" && ok ||
    bad "plan.json at tp = 1 keeps tp_comm_overlap"
"$bin" plan "$src/examples/gpt-1.3b.json" --gpus 4 --global-batch 64 --quiet \
    -o "$tmp/plain.json" >/dev/null 2>&1
cmp -s "$tmp/dp.json" "$tmp/plain.json" && ok || bad "at tp = 1 the setting changed the plan"
grep -q "^--tp-comm-overlap left out: " "$tmp/report" && ! grep -q "overlapped with GEMMs" "$tmp/report" &&
    ok || bad "the report says the setting was left out: $(cat "$tmp/report")"

finish
