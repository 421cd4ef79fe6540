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

# What the Megatron-LM export states from the reloaded model beside its
# widths: Llama 3 8B's rope_theta 500,000 and rms_norm_eps 1e-5,
# DeepSeek-V2-Lite's 512-wide MLA latent, GPT-OSS's attention sinks. A plan
# edited to other values, or without the sinks (as plans written before
# the field), is another model, and is refused naming the field.
llama="$src/examples/hf/llama-3-8b.json"
sed 's/"rope_base":\([[:space:]]*\)500000,/"rope_base":\110000,/' "$plan" >"$tmp/rope_base.json"
expect_refusal "$tmp/rope_base.json" "model_shape.rope_base is 10000 but the model $llama has \
500000; pass the plan's model with --model" export "$tmp/rope_base.json" --to megatron
sed 's/"norm_eps":\([[:space:]]*\)1e-05/"norm_eps":\11e-06/' "$plan" >"$tmp/norm_eps.json"
expect_refusal "$tmp/norm_eps.json" "model_shape.norm_eps is 1e-06 but the model $llama has \
1e-05; pass the plan's model with --model" export "$tmp/norm_eps.json" --to torchtitan
dsv2="$src/examples/hf/deepseek-v2-lite.json"
"$bin" estimate "$dsv2" --gpus 8 --megatron tp=1,pp=1,ep=8,mbs=1,gbs=64 \
    -o "$tmp/dsv2.json" >/dev/null 2>&1 || bad "estimate did not write $tmp/dsv2.json"
sed 's/"kv_lora_rank":\([[:space:]]*\)512,/"kv_lora_rank":\1256,/' "$tmp/dsv2.json" \
    >"$tmp/kv_lora.json"
expect_refusal "$tmp/kv_lora.json" "model_shape.kv_lora_rank is 256 but the model $dsv2 has \
512; pass the plan's model with --model" export "$tmp/kv_lora.json" --to megatron
"$bin" export "$tmp/dsv2.json" --to megatron | grep -q -- "--kv-lora-rank 512$" && ok ||
    bad "$tmp/dsv2.json: its own model is refused, or its latent not stated"
oss="$src/examples/hf/gpt-oss-20b.json"
"$bin" estimate "$oss" --gpus 8 --megatron tp=1,pp=1,ep=8,mbs=1,gbs=64 \
    -o "$tmp/oss.json" >/dev/null 2>&1 || bad "estimate did not write $tmp/oss.json"
sed '/"attention_sinks"/d' "$tmp/oss.json" >"$tmp/no_sinks.json"
expect_refusal "$tmp/no_sinks.json" "model_shape.attention_sinks is false but the model $oss \
has true; pass the plan's model with --model" export "$tmp/no_sinks.json" --to megatron

# A plan whose model_path names the plan itself (a copy-paste slip): the
# model reader would say a plan names its model in model_path, which is
# the field at fault; the export says so once.
sed "s|\"model_path\":\([[:space:]]*\)\"[^\"]*\"|\"model_path\":\1\"$tmp/self.json\"|" \
    "$tmp/dsv2.json" >"$tmp/self.json"
expect_refusal "$tmp/self.json" "model_path names this plan itself, not its model; name the \
model with --model" export "$tmp/self.json" --to megatron

[ "$checked" -ge 30 ] || bad "only $checked bad plans checked"
finish
