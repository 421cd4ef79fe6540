#!/bin/sh
# Every plan in tests/data/bad/plan/*.json must be refused by `autopar export`
# with exit code 2 and a message that names the file and contains the text
# in its .expect sidecar (the JSON path of the mistake and what is wrong).
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/refusal.inc"

for f in "$src"/tests/data/bad/plan/*.json; do
    expect_refusal "$f" "$(cat "${f%.json}.expect")" export "$f" --to megatron
done
missing="$src/tests/data/bad/plan/missing.json"
expect_refusal "$missing" "cannot open" export "$missing" --to torchtitan

# Hand edits of a plan as today's writer gives it. Its GPUs must fill whole
# nodes: 16 on nodes of 5 would launch torchrun with 5 processes a node,
# and of 3 on 5 nodes. And a --model must have the structure the plan
# priced, which its widths alone do not say: Llama 3 8B with tied
# embeddings, or built as Qwen3 (a norm on q and k), has all of them.
plan="$tmp/llama.json"
"$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 16 \
    --megatron tp=4,pp=2,sp=1,mbs=1,gbs=64 -o "$plan" >/dev/null 2>&1 ||
    bad "estimate did not write $plan"
for gpn in 5 3; do
    edited="$tmp/gpus_per_node_$gpn.json"
    sed "s/\"gpus_per_node\":\([[:space:]]*\)8,/\"gpus_per_node\":\1$gpn,/" "$plan" >"$edited"
    grep -q "\"gpus_per_node\":[[:space:]]*$gpn," "$edited" || bad "$edited: not edited"
    for to in megatron torchtitan deepspeed; do
        expect_refusal "$edited" "gpus_per_node: $gpn does not divide the plan's 16 GPUs" \
            export "$edited" --to $to
    done
done
sed 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' \
    "$src/examples/hf/llama-3-8b.json" >"$tmp/tied.json"
sed 's/"model_type": "llama"/"head_dim": 128, "model_type": "qwen3"/' \
    "$src/examples/hf/llama-3-8b.json" >"$tmp/qwen3.json"
expect_refusal "$plan" "model_shape.tied_embeddings is false but the model $tmp/tied.json has true" \
    export "$plan" --to megatron --model "$tmp/tied.json"
expect_refusal "$plan" "model_shape.qk_layernorm is false but the model $tmp/qwen3.json has true" \
    export "$plan" --to megatron --model "$tmp/qwen3.json"
"$bin" export "$plan" --to megatron >/dev/null 2>&1 && ok || bad "$plan: its own model is refused"

[ "$checked" -ge 30 ] || bad "only $checked bad plans checked"
finish
