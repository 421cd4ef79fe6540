#!/bin/sh
# Selective recomputation by module from a Megatron-LM command line:
# --recompute-modules is priced (tests/test_recompute_modules.c), plan.json
# keeps the list, the Megatron-LM export states it and its flags price to
# the same step; torchtitan and DeepSpeed refuse it; a plan.json whose list
# is bad, or that has no selective stage for it, is refused naming the
# field.
set -u
. "$(dirname "$0")/lib.sh"

model=$src/examples/hf/deepseek-v3.json
args="--tensor-model-parallel-size 8 --sequence-parallel --pipeline-model-parallel-size 2 \
--decoder-first-pipeline-num-layers 30 --expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --num-experts 256 --moe-router-topk 8 --moe-grouped-gemm \
--moe-token-dispatcher-type alltoall --micro-batch-size 1 --global-batch-size 16 \
--seq-length 1024 --num-layers 61 --recompute-granularity selective \
--recompute-modules mla_up_proj mlp moe_act layernorm"

"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron-args "$args" --json \
    -o "$tmp/plan.json" >"$tmp/first" 2>"$tmp/err" || bad "estimate: $(cat "$tmp/err")"
tr -d ' \t\n' <"$tmp/plan.json" | grep -q '"recompute_modules":\["mlp","moe_act","layernorm","mla_up_proj"\]' &&
    ok || bad "plan.json's modules: $(grep -A5 recompute_modules "$tmp/plan.json" | head -6)"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>"$tmp/err" ||
    bad "export: $(cat "$tmp/err")"
grep -qxF "  --multi-latent-attention" "$tmp/args.sh" && grep -qxF "  --q-lora-rank 1536" "$tmp/args.sh" &&
    grep -qxF "  --kv-lora-rank 512" "$tmp/args.sh" && grep -qxF "  --qk-pos-emb-head-dim 64" "$tmp/args.sh" &&
    ok || bad "the export does not state MLA: $(grep -i lora "$tmp/args.sh")"
whole="--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --swiglu --untie-embeddings-and-output-weights --normalization RMSNorm --disable-bias-linear --position-embedding-type rope --qk-layernorm --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 --moe-layer-freq ([0]*3+[1]*58)"
"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron-args "$args $whole" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "no --multi-latent-attention, but" "$tmp/err" && ok ||
    bad "a whole script without MLA: $(cat "$tmp/err")"
"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron-args \
    "$args $whole --multi-latent-attention --q-lora-rank 1536" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--kv-lora-rank 32 (Megatron-Core's default), but" "$tmp/err" && ok ||
    bad "MLA dimensions left to Megatron-Core's defaults: $(cat "$tmp/err")"
grep -qxF "  --recompute-modules mlp moe_act layernorm mla_up_proj" "$tmp/args.sh" && ok ||
    bad "the export's modules: $(grep recompute "$tmp/args.sh")"
"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron-args "$(megatron_args "$tmp/args.sh")" \
    --json >"$tmp/again" 2>"$tmp/err" || bad "the export's flags: $(cat "$tmp/err")"
a=$(grep '"step_time_s"' "$tmp/first")
b=$(grep '"step_time_s"' "$tmp/again")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the export prices differently: $a vs $b"
"$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 8 --seq 1024 --megatron \
    "mbs=1,gbs=16,recompute=selective,recompute_modules=mlp" -o "$tmp/dense.json" \
    >/dev/null 2>"$tmp/err" || bad "dense estimate: $(cat "$tmp/err")"
"$bin" export "$tmp/dense.json" --to torchtitan >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "no selective recomputation by Megatron-Core's modules; the plan recomputes mlp" \
    "$tmp/err" && ok || bad "torchtitan takes the modules: $(cat "$tmp/err")"
"$bin" export "$tmp/dense.json" --to deepspeed >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "selective recomputation" "$tmp/err" && ok ||
    bad "DeepSpeed takes the modules: $(cat "$tmp/err")"

# The text report names the modules; without them the step is shorter and
# needs more memory.
"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron-args "$args" >"$tmp/report" 2>&1 &&
    grep -q "recompute selective (mlp moe_act layernorm mla_up_proj)" "$tmp/report" && ok ||
    bad "the report: $(grep recompute "$tmp/report" | head -2)"
plain=$(echo "$args" | sed 's/--recompute-modules.*//')
"$bin" estimate "$model" --gpus 16 --seq 1024 --megatron-args "$plain" --json >"$tmp/plain" 2>&1 ||
    bad "without modules: $(cat "$tmp/plain")"
num() { grep "\"$1\"" "$2" | head -1 | tr -dc '0-9.e+-'; }
awk -v a="$(num step_time_s "$tmp/first")" -v b="$(num step_time_s "$tmp/plain")" \
    -v m="$(num max_memory_bytes "$tmp/first")" -v n="$(num max_memory_bytes "$tmp/plain")" \
    'BEGIN { exit !(a > b && m < n) }' && ok || bad "modules neither slow the step nor save memory"

# Bad lists in a plan.json name the field.
sed 's/"mla_up_proj"\]/"mla_up"]/' "$tmp/plan.json" >"$tmp/bad1.json"
"$bin" export "$tmp/bad1.json" --to megatron >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'recompute_modules\[3\]: not a module name' "$tmp/err" && ok ||
    bad "a bad module name: $(cat "$tmp/err")"
sed 's/"recompute":[ \t]*"selective"/"recompute": "none"/' "$tmp/plan.json" >"$tmp/bad2.json"
"$bin" export "$tmp/bad2.json" --to megatron >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'recompute_modules: given, but no stage' "$tmp/err" && ok ||
    bad "modules without a selective stage: $(cat "$tmp/err")"
# autopar plan takes the modules a stage may recompute; a plan that fits
# without recomputing them does not name them; bad names are refused.
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --global-batch 8 --quiet \
    --recompute-modules mlp,core_attn -o "$tmp/tiny.json" >/dev/null 2>"$tmp/err" ||
    bad "plan --recompute-modules: $(cat "$tmp/err")"
grep -q '"recompute_modules"' "$tmp/tiny.json" && bad "a plan recomputing none names modules" || ok
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --recompute-modules mlp,attn >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'recompute-modules: unknown module "attn"' "$tmp/err" && ok ||
    bad "plan takes a bad module: $(cat "$tmp/err")"
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --recompute-modules mla_up_proj >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'mla_up_proj needs multi-latent attention' "$tmp/err" && ok ||
    bad "plan takes mla_up_proj without MLA: $(cat "$tmp/err")"
# --recompute-modules auto searches with the model's sets too: gpt-tiny
# fits without recomputation, so its plan names none and is the default's.
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --global-batch 8 --quiet --json \
    --recompute-modules auto >"$tmp/auto" 2>"$tmp/err" || bad "plan auto: $(cat "$tmp/err")"
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --global-batch 8 --quiet --json \
    >"$tmp/default" 2>&1
cmp -s "$tmp/auto" "$tmp/default" && ok || bad "auto differs on a model that fits: $(diff "$tmp/auto" "$tmp/default")"
finish
