#!/bin/sh
# A Megatron-LM script without MODEL: its model flags state the model, which
# autopar builds with Megatron-LM's defaults and its padded vocabulary
# (docs/megatron.md, "A script without MODEL"). The flags of each Megatron-LM
# export, with the vocabulary stated, price exactly as the model file they
# came from; estimate, compare and calibrate take such a line; a line that
# does not state the model, or its vocabulary, is refused naming the flag
# (tests/test_megatron_model.c has the graphs).
set -u
. "$(dirname "$0")/lib.sh"

# Every family autopar builds, round-tripped at tp 1 (so the vocabulary,
# padded to a multiple of 1 x tp, stays the model's); Phi-3's sliding
# window of 2,047 keys, shorter than the 2,048 tokens, as --window-size
# 2046,0; GPT-OSS's quick-GeGLU experts with biases, its sinks and its
# 128-key window on every other layer; Llama 4 Scout's NoPE layers
# (--no-rope-freq 4) and weightless q and k norms (--qk-l2-norm), its
# chunks of 8,192 tokens no shorter than the 2,048.
for m in examples/hf/llama-3-8b.json examples/hf/mixtral-8x7b.json \
         examples/hf/deepseek-v3.json examples/hf/qwen3-30b-a3b.json \
         examples/hf/gpt3-175b.json bench/validation/models/nemotron-4-15b.json \
         examples/hf/phi-3-mini-4k.json examples/hf/gpt-oss-20b.json \
         examples/hf/llama-4-scout.json; do
    spec="tp=1,pp=1,mbs=1,gbs=8"
    case $m in *deepseek* | *qwen3* | *mixtral* | *gpt-oss* | *llama-4*) spec="$spec,ep=8" ;; esac
    "$bin" estimate "$src/$m" --gpus 8 --seq 2048 --megatron "$spec" --emit megatron \
        >"$tmp/export.sh" 2>/dev/null
    vocab=$(sed -n 's/.*(vocabulary \([0-9]*\)).*/\1/p' "$tmp/export.sh")
    args=$(megatron_args "$tmp/export.sh")
    "$bin" estimate "$src/$m" --gpus 8 --json --megatron-args "$args" >"$tmp/model" 2>/dev/null
    "$bin" estimate --gpus 8 --json --megatron-args "$args --tokenizer-type \
HuggingFaceTokenizer --vocab-size $vocab --make-vocab-size-divisible-by 1" \
        >"$tmp/script" 2>"$tmp/err" || bad "$m without MODEL: $(cat "$tmp/err")"
    [ -s "$tmp/model" ] && cmp -s "$tmp/model" "$tmp/script" && ok ||
        bad "$m: the script's own model prices otherwise: $(diff "$tmp/model" "$tmp/script")"
done

# Llama 3 8B as Megatron-LM's own example script states it, on mock data:
# NullTokenizer's 128,256 tokens and an end-of-document token, padded to a
# multiple of 128 x 8 = 1,024: 129,024 rows.
llama="--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
--num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128 \
--seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope \
--normalization RMSNorm --swiglu --untie-embeddings-and-output-weights --disable-bias-linear \
--tensor-model-parallel-size 8 --sequence-parallel --micro-batch-size 1 \
--global-batch-size 16 --bf16 --use-distributed-optimizer --overlap-grad-reduce \
--overlap-param-gather --tokenizer-type NullTokenizer --vocab-size 128256"
"$bin" estimate --gpus 8 --megatron-args "$llama" --emit json >"$tmp/plan.json" \
    2>"$tmp/err" || bad "estimate without MODEL: $(cat "$tmp/err")"
grep -q '"vocab":[[:space:]]*129024,' "$tmp/plan.json" && ok ||
    bad "padded vocabulary: $(grep '"vocab"' "$tmp/plan.json")"
grep -q '"model_path":[[:space:]]*"",' "$tmp/plan.json" && ok ||
    bad "model_path: $(grep model_path "$tmp/plan.json")"
"$bin" export "$tmp/plan.json" --to megatron >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "a plan of the model --megatron-args states has none" "$tmp/err" &&
    grep -q 'autopar graph --megatron-args "FLAGS" -o model.json' "$tmp/err" &&
    ok || bad "export without --model: $(cat "$tmp/err")"
# ... and what it says works: the graph of the flags is the model.
"$bin" graph --megatron-args "$llama" -o "$tmp/flags-model.json" >/dev/null 2>"$tmp/err" &&
    "$bin" export "$tmp/plan.json" --to megatron --model "$tmp/flags-model.json" >/dev/null \
    2>>"$tmp/err" && ok || bad "export with the graph of the flags: $(cat "$tmp/err")"
"$bin" estimate --gpus 8 --megatron-args "$llama" >"$tmp/out" 2>&1 &&
    grep -q "^plan for --megatron-args model (32 layers, hidden 4096) on 8 GPUs" "$tmp/out" && ok ||
    bad "the report's heading: $(head -1 "$tmp/out")"
"$bin" compare --gpus 8 --quiet --megatron-args "$llama" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "megatron (yours)" "$tmp/out" && ok || bad "compare: $(cat "$tmp/err")"
"$bin" calibrate --gpus 8 --megatron-args "$llama" --measured-step 9 -o "$tmp/c.json" \
    >"$tmp/out" 2>"$tmp/err" && grep -q '"the model --megatron-args states on 8 GPUs' \
    "$tmp/c.json" && ok || bad "calibrate: $(cat "$tmp/err") $(grep calib "$tmp/c.json")"

# DeepSeek-V3 as Megatron-MoE-ModelZoo's YAML states it (MLA, 3 dense
# layers, group-limited routing, DeepSeek's divisor 3,232 x tp 2 keeping
# its 129,280 tokens), the vocabulary stated: the same graph and price as
# its Hugging Face config.
dsv3="--tensor-model-parallel-size: 2
  --pipeline-model-parallel-size: 8
  --decoder-first-pipeline-num-layers: 5
  --decoder-last-pipeline-num-layers: 8
  --expert-model-parallel-size: 64
  --use-distributed-optimizer: true
  --sequence-parallel: true
  --disable-bias-linear: true
  --micro-batch-size: 1
  --global-batch-size: 8192
  --seq-length: 4096
  --tokenizer-type: HuggingFaceTokenizer
  --tokenizer-model: unsloth/DeepSeek-V3
  --vocab-size: 129280
  --num-layers: 61
  --hidden-size: 7168
  --ffn-hidden-size: 18432
  --num-attention-heads: 128
  --kv-channels: 128
  --max-position-embeddings: 4096
  --position-embedding-type: rope
  --make-vocab-size-divisible-by: 3232
  --normalization: RMSNorm
  --swiglu: true
  --untie-embeddings-and-output-weights: true
  --multi-latent-attention: true
  --qk-layernorm: true
  --num-experts: 256
  --moe-layer-freq: ([0]*3+[1]*58)
  --moe-ffn-hidden-size: 2048
  --moe-shared-expert-intermediate-size: 2048
  --moe-router-topk: 8
  --moe-grouped-gemm: true
  --moe-router-group-topk: 4
  --moe-router-num-groups: 8
  --moe-token-dispatcher-type: alltoall
  --q-lora-rank: 1536
  --kv-lora-rank: 512
  --finetune: false
  --bf16: true"
"$bin" estimate --gpus 1024 --json --megatron-args "$dsv3" >"$tmp/script" 2>"$tmp/err" ||
    bad "DeepSeek-V3's YAML: $(cat "$tmp/err")"
"$bin" estimate "$src/examples/hf/deepseek-v3.json" --gpus 1024 --json --megatron-args "$dsv3" \
    >"$tmp/model" 2>/dev/null
[ -s "$tmp/script" ] && cmp -s "$tmp/script" "$tmp/model" && ok ||
    bad "DeepSeek-V3's YAML prices otherwise than its config"

# `autopar graph --megatron-args` shows that model and writes it as a model
# file, which prices as the line does.
"$bin" graph --megatron-args "$llama" -o "$tmp/llama.json" >"$tmp/summary" 2>"$tmp/err" &&
    grep -q "v=129024 (vocab)" "$tmp/summary" && grep -q "^params    8.04 B params" \
    "$tmp/summary" && ok || bad "graph --megatron-args: $(cat "$tmp/err") $(head -3 "$tmp/summary")"
a=$("$bin" estimate --gpus 8 --json --megatron-args "$llama" | grep step_time_s)
b=$("$bin" estimate "$tmp/llama.json" --gpus 8 --json --megatron-args "$llama" 2>/dev/null |
    grep step_time_s)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the written model prices otherwise: $a vs $b"
"$bin" graph "$src/examples/gpt-tiny.json" --megatron-args "$llama" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "MODEL or --megatron-args, not both" "$tmp/err" && ok ||
    bad "graph with both: $(cat "$tmp/err")"

# A pasted torchrun line launches its --nproc-per-node x --nnodes GPUs,
# unless --gpus says otherwise, which is refused.
"$bin" estimate --megatron-args "torchrun --nproc-per-node 8 --nnodes 2 --node-rank 0 \
--master-addr localhost --master-port 6000 pretrain_gpt.py $llama" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "^plan for --megatron-args model (32 layers, hidden 4096) on 16 GPUs (h100-sxm, 8 per node)" "$tmp/out" &&
    ! grep -q "warning" "$tmp/err" && ok || bad "torchrun line: $(head -1 "$tmp/out") $(cat "$tmp/err")"
"$bin" estimate --gpus 8 --megatron-args "torchrun --nproc_per_node 8 --nnodes 2 \
pretrain_gpt.py $llama" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "torchrun line launches 16 GPUs (--nproc-per-node 8 x --nnodes 2)" \
    "$tmp/err" && ok || bad "--gpus 8 against a 16-GPU torchrun line: $(cat "$tmp/err")"
# A deepspeed line (Megatron-DeepSpeed's launcher) launches --num_gpus x
# --num_nodes GPUs where both are given; its own flags are read past without
# a warning, and a node count left out is the hostfile's, which says nothing.
"$bin" estimate --megatron-args "deepspeed --num_gpus 8 --num_nodes 2 --hostfile hosts \
--no_local_rank --master_port 6000 pretrain_gpt.py $llama" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "^plan for --megatron-args model (32 layers, hidden 4096) on 16 GPUs (h100-sxm, 8 per node)" "$tmp/out" &&
    ! grep -q "warning" "$tmp/err" && ok || bad "deepspeed line: $(head -1 "$tmp/out") $(cat "$tmp/err")"
"$bin" estimate --gpus 32 --megatron-args "deepspeed --num_gpus 8 --hostfile hosts \
pretrain_gpt.py $llama" >"$tmp/out" 2>"$tmp/err" &&
    grep -q " on 32 GPUs " "$tmp/out" && ok || bad "deepspeed without --num_nodes: $(cat "$tmp/err")"
"$bin" estimate --gpus 8 --megatron-args "deepspeed --num_gpus 8 --num_nodes 2 \
pretrain_gpt.py $llama" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "deepspeed line launches 16 GPUs (--num_gpus 8 x --num_nodes 2)" \
    "$tmp/err" && ok || bad "--gpus 8 against a 16-GPU deepspeed line: $(cat "$tmp/err")"

# Refusals, each naming the flag (exit 2).
refused() {
    "$bin" estimate --gpus 8 --megatron-args "$1" >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$2" "$tmp/err" && ok ||
        bad "'$1': exit $rc, $(cat "$tmp/err")"
}
refused "--hidden-size 1024 --num-attention-heads 16 --seq-length 1024" \
    "--megatron-args does not state the model: --num-layers is missing"
gpt="--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024"
refused "$gpt --max-position-embeddings 1024 --tokenizer-type HuggingFaceTokenizer" \
    "--tokenizer-type HuggingFaceTokenizer keeps its vocabulary in its files"
refused "$gpt --max-position-embeddings 1024 --tokenizer-type NullTokenizer" \
    "--tokenizer-type NullTokenizer needs --vocab-size"
refused "$gpt --tokenizer-type GPT2BPETokenizer" "need --max-position-embeddings"
refused "$gpt --tokenizer-type GPT2BPETokenizer --max-position-embeddings 512" \
    "--seq-length is longer than --max-position-embeddings"
# Megatron-LM requires --max-position-embeddings and asserts it is at
# least --seq-length whatever the position type (validate_args), though
# only learned positions build a table from it.
refused "$gpt --position-embedding-type rope --tokenizer-type GPT2BPETokenizer --fp16" \
    "rotary positions (--position-embedding-type rope) need --max-position-embeddings"
refused "$gpt --position-embedding-type none --tokenizer-type GPT2BPETokenizer --fp16" \
    "no positions (--position-embedding-type none) need --max-position-embeddings"
refused "$gpt --use-rotary-position-embeddings --max-position-embeddings 512 \
--tokenizer-type GPT2BPETokenizer --fp16" "--seq-length is longer than --max-position-embeddings \
(1024 > 512), which Megatron-LM's validate_args asserts against whatever the position type; \
give --max-position-embeddings 1024 or more"
"$bin" estimate --gpus 8 --megatron-args "$gpt --position-embedding-type rope \
--max-position-embeddings 1024 --tokenizer-type GPT2BPETokenizer --fp16" >/dev/null 2>"$tmp/err" &&
    ok || bad "rope with --max-position-embeddings as long as the sequence: $(cat "$tmp/err")"
refused "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 \
--max-position-embeddings 1024 --tokenizer-type GPT2BPETokenizer" "--seq-length is missing"
refused "$gpt --max-position-embeddings 1024 --tokenizer-type GPT2BPETokenizer \
--num-experts 8 --moe-grouped-gemm" "--num-experts without --swiglu"
refused '--num-layers $NUM_LAYERS --hidden-size 4096' \
    '--num-layers $NUM_LAYERS: a shell variable; autopar reads the values'
"$bin" estimate --gpus 8 --megatron "tp=8" >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "--megatron without MODEL was taken"

# A sliding window the flags state: --window-size 4095,0 is 4,096 keys, on
# the layers --window-attn-skip-freq 4 leaves windowed (one full-attention
# layer in four: 6 layers in class 0, layers 3 and 7 in class 3). The model
# it writes prices as the line does, and less than without the window; it
# plans, and its export states the flags back; context parallelism under
# the window, and flags that contradict the model, are refused.
plain="--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 8192 \
--max-position-embeddings 8192 --position-embedding-type rope --swiglu --normalization RMSNorm --disable-bias-linear \
--untie-embeddings-and-output-weights --tokenizer-type NullTokenizer --vocab-size 32000 --bf16"
swa="$plain --window-size 4095,0 --window-attn-skip-freq 4"
"$bin" graph --megatron-args "$swa" -o "$tmp/swa.json" >"$tmp/summary" 2>"$tmp/err" &&
    grep -q "^  class 0 *6 layers .*window 4096$" "$tmp/summary" &&
    grep -q "^  class 3 *2 layers .*GFLOP$" "$tmp/summary" && ok ||
    bad "graph of a windowed line: $(cat "$tmp/err" "$tmp/summary")"
a=$("$bin" estimate --gpus 8 --json --megatron-args "$swa" | grep step_time_s)
b=$("$bin" estimate "$tmp/swa.json" --gpus 8 --json --megatron-args "$swa" 2>/dev/null |
    grep step_time_s)
c=$("$bin" estimate --gpus 8 --json --megatron-args "$plain" | grep step_time_s)
[ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$c" ] && [ "$a" != "$c" ] && ok ||
    bad "the windowed model prices otherwise: $a, $b (without the window $c)"
"$bin" plan "$tmp/swa.json" --gpus 8 --target megatron -o "$tmp/swa-plan.json" \
    >"$tmp/out" 2>"$tmp/err" && ok || bad "plan of a windowed model: $(cat "$tmp/err")"
"$bin" export "$tmp/swa-plan.json" --to megatron --model "$tmp/swa.json" >"$tmp/export.sh" \
    2>"$tmp/err" && grep -q "^  --window-size 4095,0$" "$tmp/export.sh" &&
    grep -q "^  --window-attn-skip-freq 4$" "$tmp/export.sh" &&
    grep -q "^  --context-parallel-size 1$" "$tmp/export.sh" && ok ||
    bad "export of a windowed plan: $(cat "$tmp/err")"
"$bin" estimate "$tmp/swa.json" --gpus 8 --megatron-args "$(megatron_args "$tmp/export.sh")" \
    >/dev/null 2>"$tmp/err" && ok || bad "the export's flags: $(cat "$tmp/err")"
refused "$swa --context-parallel-size 2" "cp=2 (--context-parallel-size 2) with cp_comm=p2p: \
Transformer Engine's ring refuses a sliding window (here 4096 keys, shorter than the sequence 8192)"
# The all-gather and the all-to-all take the window, and are priced with it.
for t in allgather a2a; do
    "$bin" estimate "$tmp/swa.json" --gpus 8 --megatron-args \
        "$swa --context-parallel-size 2 --cp-comm-type $t" >/dev/null 2>"$tmp/err" && ok ||
        bad "a window under cp_comm=$t: $(cat "$tmp/err")"
done
refused "$plain --window-size 4095,128" "--window-size 4095,128: R = 128 lets each query"
"$bin" estimate "$tmp/swa.json" --gpus 8 --megatron-args "$swa --window-attn-skip-freq 2" \
    >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF "makes layer 1 attend over the whole sequence, but in \
$tmp/swa.json it has a sliding window: give --window-size 4095,0 --window-attn-skip-freq 4" \
    "$tmp/err" && ok || bad "a skip frequency the model does not have: $(cat "$tmp/err")"

# GPT-OSS's shape: experts gated by quick GeGLU (--quick-geglu), a 128-key
# window on every other layer. The flags build it, the model it writes
# prices as the line does, and the Megatron-LM export states --quick-geglu
# and the window back, pricing the same.
oss="--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --group-query-attention \
--num-query-groups 4 --kv-channels 64 --seq-length 4096 --max-position-embeddings 4096 \
--position-embedding-type rope --quick-geglu --normalization RMSNorm --disable-bias-linear --num-experts 16 \
--moe-router-topk 4 --moe-ffn-hidden-size 1024 --moe-grouped-gemm --window-size 127,0 \
--window-attn-skip-freq 2 --untie-embeddings-and-output-weights \
--tokenizer-type NullTokenizer --vocab-size 32000 --bf16 --expert-model-parallel-size 8"
"$bin" graph --megatron-args "$oss" -o "$tmp/oss.json" >"$tmp/summary" 2>"$tmp/err" &&
    grep -q "4 quick_gelu" "$tmp/summary" && ok ||
    bad "graph of a quick-GeGLU line: $(cat "$tmp/err" "$tmp/summary")"
a=$("$bin" estimate --gpus 8 --json --megatron-args "$oss" | grep step_time_s)
b=$("$bin" estimate "$tmp/oss.json" --gpus 8 --json --megatron-args "$oss" 2>/dev/null |
    grep step_time_s)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the quick-GeGLU model prices otherwise: $a, $b"
"$bin" estimate "$tmp/oss.json" --gpus 8 --megatron "ep=8,mbs=1,gbs=64" -o "$tmp/oss-plan.json" \
    >/dev/null 2>"$tmp/err" || bad "estimate -o of the quick-GeGLU model: $(cat "$tmp/err")"
"$bin" export "$tmp/oss-plan.json" --to megatron --model "$tmp/oss.json" >"$tmp/export.sh" \
    2>"$tmp/err" && grep -q "^  --quick-geglu$" "$tmp/export.sh" &&
    grep -q "^  --window-size 127,0$" "$tmp/export.sh" && ok ||
    bad "export of a quick-GeGLU plan: $(cat "$tmp/err")"
c=$("$bin" estimate "$tmp/oss.json" --gpus 8 --json \
    --megatron-args "$(megatron_args "$tmp/export.sh")" 2>"$tmp/err" | grep step_time_s)
d=$("$bin" estimate "$tmp/oss.json" --gpus 8 --json --megatron "ep=8,mbs=1,gbs=64" |
    grep step_time_s)
[ -n "$c" ] && [ "$c" = "$d" ] && ok || bad "the export's flags price otherwise: $c, $d $(cat "$tmp/err")"
# A pasted script as it is: Windows line ends, a data path in a variable
# (a flag's value, read past), the exported script whole (its torchrun
# line expands the MEGATRON_ARGS it assigns).
llama=$src/examples/hf/llama-3-8b.json
a=$("$bin" estimate "$llama" --gpus 16 --json --megatron-args "$(printf -- '--tensor-model-parallel-size 2\r\n--sequence-parallel\r\n--data-path $DATA_PATH\r\n')" 2>&1)
b=$("$bin" estimate "$llama" --gpus 16 --json --megatron-args "--tensor-model-parallel-size 2 --sequence-parallel" 2>&1)
echo "$a" | grep -q step_time_s && [ "$a" = "$b" ] && ok || bad "CRLF and \$DATA_PATH: $a"
"$bin" estimate "$llama" --gpus 16 --megatron tp=2,sp=1,gbs=64 --emit megatron >"$tmp/l8.sh" 2>&1
a=$("$bin" estimate "$llama" --gpus 16 --json --megatron-args "$(cat "$tmp/l8.sh")" 2>&1 | grep step_time_s)
b=$("$bin" estimate "$llama" --gpus 16 --json --megatron tp=2,sp=1,gbs=64 | grep step_time_s)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the exported script pasted whole prices the same: $a vs $b"
# The script's numerics, which change no cost, are its model's: the export
# of a plan of the line states its --rotary-base, --norm-epsilon and Llama
# 3.1's rope scaling, and Megatron-LM's defaults (10000, 1e-5) where the
# line leaves them out, rather than the note that they are unknown.
rope="--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 \
--max-position-embeddings 1024 --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear \
--tokenizer-type NullTokenizer --vocab-size 32000 --bf16"
"$bin" graph --megatron-args "$rope --rotary-base 500000 --use-rope-scaling \
--rope-scaling-factor 32 --layernorm-epsilon 1e-6" -o "$tmp/rope.json" >/dev/null 2>"$tmp/err" &&
    "$bin" estimate "$tmp/rope.json" --gpus 8 --megatron tp=8 --emit megatron >"$tmp/export.sh" \
    2>>"$tmp/err" && grep -q "^  --rotary-base 500000$" "$tmp/export.sh" &&
    grep -q "^  --use-rope-scaling$" "$tmp/export.sh" &&
    grep -q "^  --rope-scaling-factor 32$" "$tmp/export.sh" &&
    grep -q "^  --norm-epsilon 1e-06$" "$tmp/export.sh" && ! grep -q "Not stated" "$tmp/export.sh" &&
    ok || bad "the line's numerics in its export: $(cat "$tmp/err" "$tmp/export.sh")"
"$bin" graph --megatron-args "$rope" -o "$tmp/rope.json" >/dev/null 2>"$tmp/err" &&
    "$bin" estimate "$tmp/rope.json" --gpus 8 --megatron tp=8 --emit megatron >"$tmp/export.sh" \
    2>>"$tmp/err" && grep -q "^  --rotary-base 10000$" "$tmp/export.sh" &&
    grep -q "^  --norm-epsilon 1e-05$" "$tmp/export.sh" &&
    ! grep -q "rope-scaling" "$tmp/export.sh" && ok ||
    bad "Megatron-LM's default numerics in the export: $(cat "$tmp/err" "$tmp/export.sh")"
refused "$rope --rotary-base 5e5" "--rotary-base: bad value \"5e5\" (an integer from 1 to 10^12)"
refused "$rope --norm-epsilon 0" "--norm-epsilon: bad value \"0\" (a number above 0, at most 1)"
# With MODEL, a value the line states must be the model's (Llama 3's
# rope_theta 500,000 and rms_norm_eps 1e-5, no rope scaling); left out, it
# is not checked.
with_model() {
    "$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 8 --megatron-args \
        "--tensor-model-parallel-size 8 $1" >/dev/null 2>"$tmp/err"
    rc=$?
    if [ -z "$2" ]; then
        [ $rc -eq 0 ] && ok || bad "'$1' with MODEL: exit $rc, $(cat "$tmp/err")"
    else
        [ $rc -eq 2 ] && grep -qF -- "$2" "$tmp/err" && ok ||
            bad "'$1' with MODEL: exit $rc, $(cat "$tmp/err")"
    fi
}
with_model "--rotary-base 500000 --norm-epsilon 1e-5" ""
with_model "--rotary-base 10000" "--rotary-base 10000, but $src/examples/hf/llama-3-8b.json \
has a rotary base of 500000: give --rotary-base 500000 or leave it out"
with_model "--layernorm-epsilon 1e-6" "--norm-epsilon 1e-06, but"
with_model "--use-rope-scaling" "--use-rope-scaling (Llama 3.1's), but \
$src/examples/hf/llama-3-8b.json has no rotary scaling"
# A word that is no flag, no flag's value and no part of the launch would be
# read past and the line priced without it (these used to price tp 1 and
# pp 1, exit 0): each is refused, naming the word and what to write.
stray() {
    "$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 16 --megatron-args "$1" \
        >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$2" "$tmp/err" && ok ||
        bad "'$1': exit $rc, $(cat "$tmp/err")"
}
stray "tp=4" "--megatron-args: tp=4: looks like a --megatron spec; use --megatron \"tp=4\", \
or Megatron-LM's flag here: --tensor-model-parallel-size 4"
stray "pp=2" "pp=2: looks like a --megatron spec; use --megatron \"pp=2\", or Megatron-LM's \
flag here: --pipeline-model-parallel-size 2"
stray "--tensor-model-parallel-size 4 –-pipeline-model-parallel-size 2" \
    "–-pipeline-model-parallel-size: starts with an en dash (U+2013), not ASCII \"--\"; \
write --pipeline-model-parallel-size"
stray "—pipeline-model-parallel-size 2" "starts with an em dash (U+2014), not ASCII \"--\""
stray "tensor-model-parallel-size 4" "tensor-model-parallel-size: Megatron-LM's flag without \
its dashes; write --tensor-model-parallel-size"
stray "--sequence-parallel true" "--sequence-parallel true: --sequence-parallel is a switch \
and takes no value; Megatron-LM's argparse rejects 'true' (unrecognized arguments)"
stray "torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py --num-layers 32 ... --bf16" \
    "...: not a flag, and --num-layers before it takes one value, already read"
stray "" "--megatron-args: empty; give Megatron-LM's flags"
stray "TP=4" "--megatron-args: \"TP=4\": no flag"
# ... while the launch around the flags is read past: the environment,
# python's own options, the script, a one-line array, a pipe to tee.
a=$("$bin" estimate "$src/examples/hf/llama-3-8b.json" --json --megatron-args \
    "CUDA_DEVICE_MAX_CONNECTIONS=1 python3 -m torch.distributed.run --nproc_per_node 8 \
--nnodes 2 pretrain_gpt.py \${ARGS[@]} 2>&1 | tee train.log
ARGS=(--tensor-model-parallel-size 4 --sequence-parallel)" 2>"$tmp/err" | grep step_time_s)
b=$("$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 16 --json --megatron-args \
    "--tensor-model-parallel-size 4 --sequence-parallel" | grep step_time_s)
[ -n "$a" ] && [ "$a" = "$b" ] && ! grep -q warning "$tmp/err" && ok ||
    bad "the launch around the flags: $a vs $b $(cat "$tmp/err")"
finish
