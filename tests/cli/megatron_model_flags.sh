#!/bin/sh
# autopar estimate --megatron-args: a whole Megatron-LM command line is
# read as Megatron-LM reads it. The flags that describe the model must
# describe the model given (a command line is never priced for another
# model), --seq-length builds it at that length, --recompute-activations is
# selective recomputation, the dropout flags build it with or without
# dropout, the structure flags (--swiglu, --squared-relu, --kv-channels,
# --untie-embeddings-and-output-weights, --normalization; for MoE models
# --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size and
# --moe-layer-freq) must describe it, and
# recomputation flags Megatron-LM refuses are refused with the reason
# (tests/cli/recompute_partial.sh has the rest).
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
layout="--tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 64"
shape="--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336"

estimate() { "$bin" estimate "$model" --gpus 16 --json "$@" 2>&1; }

# The model's own shape, with the flags a real script carries beside it
# (optimizer, data, model structure, Llama's dropout of 0), prices as the
# layout alone does.
a=$(estimate --megatron-args "$layout")
b=$(estimate --megatron-args "$layout $shape --swiglu --normalization RMSNorm --disable-bias-linear --position-embedding-type rope --rotary-percent 1.0 --lr 3e-4 --bf16 --grad-reduce-in-bf16 --use-mcore-models --untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && ok ||
    bad "the model's own shape flags change nothing: $a vs $b"

# --seq-length builds the model at that length: the same as --seq.
a=$(estimate --seq 8192 --megatron-args "$layout")
b=$(estimate --megatron-args "$layout --seq-length 8192")
c=$(estimate --seq 8192 --megatron-args "$layout --seq-length 8192")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok ||
    bad "--seq-length 8192 prices as --seq 8192: $a vs $b vs $c"
# 64 sequences of 8192 tokens a step: tokens/s times the step is 524,288.
field() { echo "$1" | sed -n "s/.*\"$2\":[[:space:]]*\([0-9.e+-]*\).*/\1/p"; }
echo "$(field "$b" tokens_per_s) $(field "$b" step_time_s)" |
    awk '{ d = $1 * $2 - 524288; exit !(d < 1 && d > -1) }' && ok ||
    bad "a step of --seq-length 8192 carries 64 x 8192 tokens: $b"

# --recompute-activations is Megatron-LM's selective recomputation.
a=$(estimate --megatron "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,recompute=selective")
b=$(estimate --megatron-args "$layout --recompute-activations")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && ok ||
    bad "--recompute-activations is recompute=selective: $a vs $b"
# Full recomputation one layer at a time, as uniform with groups of one.
a=$(estimate --megatron "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,recompute=full")
b=$(estimate --megatron-args "$layout --recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && ok ||
    bad "uniform recomputation of one layer per group is recompute=full: $a vs $b"

expect() {
    want=$1
    shift
    out=$("$bin" estimate "$model" --gpus 16 "$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" && ok ||
        bad "$* -> rc $rc, '$out' lacks '$want'"
}
expect "--megatron-args: --num-layers 40, but $model has 32 layers" \
    --megatron-args "$layout --num-layers 40"
expect "--megatron-args: --hidden-size 5120, but $model has 4096 hidden size" \
    --megatron-args "$layout --hidden-size 5120"
expect "--megatron-args: --num-attention-heads 40, but $model has 32 attention heads" \
    --megatron-args "$layout --num-attention-heads 40"
expect "--megatron-args: --num-query-groups 4, but $model has 8 KV heads" \
    --megatron-args "$layout --group-query-attention --num-query-groups 4"
expect "--megatron-args: --ffn-hidden-size 11008, but $model has 14336 FFN size" \
    --megatron-args "$layout --ffn-hidden-size 11008"
expect "--megatron-args: --num-experts 8, but $model has no experts" \
    --megatron-args "$layout --num-experts 8 --moe-token-dispatcher-type alltoall --moe-grouped-gemm"
# The structure flags: one given must describe the model; a whole script
# (layers, hidden size and heads stated) that leaves one out describes
# Megatron-LM's default: a GELU MLP, tied embeddings, hidden/heads a head.
whole="$layout --num-layers 32 --hidden-size 4096 --num-attention-heads 32"
expect "--megatron-args: no --swiglu, but $model has a SwiGLU MLP" \
    --megatron-args "$whole --untie-embeddings-and-output-weights"
expect "--megatron-args: no --untie-embeddings-and-output-weights (tied, Megatron-LM's default), but $model has an output layer of its own" \
    --megatron-args "$whole --swiglu"
expect "--megatron-args: no --normalization (LayerNorm, Megatron-LM's default), but $model has RMSNorm" \
    --megatron-args "$whole --swiglu --untie-embeddings-and-output-weights"
expect "--megatron-args: no --disable-bias-linear (biases on every linear layer, Megatron-LM's default), but $model has no biases on its query, key and value projections and none on its other linear layers" \
    --megatron-args "$whole --swiglu --untie-embeddings-and-output-weights --normalization RMSNorm"
expect "--megatron-args: --add-qkv-bias (with the default biases), but $model has no biases" \
    --megatron-args "$layout --add-qkv-bias"
expect "--megatron-args: --qk-layernorm, but $model has no norm on its queries and keys" \
    --megatron-args "$layout --qk-layernorm"
expect "--megatron-args: no --position-embedding-type (learned_absolute, Megatron-LM's default), but $model has rotary embeddings" \
    --megatron-args "$whole --swiglu --untie-embeddings-and-output-weights --normalization RMSNorm --disable-bias-linear"
expect "--megatron-args: --position-embedding-type learned_absolute, but $model has rotary embeddings" \
    --megatron-args "$layout --position-embedding-type learned_absolute"
# The legacy --use-rotary-position-embeddings is rope, whatever the type
# says, as Megatron-LM's validate_args makes it.
a=$(estimate --megatron-args "$whole --swiglu --untie-embeddings-and-output-weights --normalization RMSNorm --disable-bias-linear --use-rotary-position-embeddings --hidden-dropout 0 --attention-dropout 0")
b=$(estimate --megatron-args "$whole --swiglu --untie-embeddings-and-output-weights --normalization RMSNorm --disable-bias-linear --position-embedding-type learned_absolute --use-rotary-position-embeddings --hidden-dropout 0 --attention-dropout 0")
c=$(estimate --megatron-args "$layout")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok ||
    bad "--use-rotary-position-embeddings is rope: $a vs $b vs $c"
expect "--megatron-args: --rotary-percent 0.5, but $model rotates 1 of each head" \
    --megatron-args "$layout --rotary-percent 0.5"
expect "--megatron-args: --rotary-percent: bad value \"1.5\"" \
    --megatron-args "$layout --rotary-percent 1.5"
expect "--megatron-args: --position-embedding-type mrope: builds position embeddings autopar does not" \
    --megatron-args "$layout --position-embedding-type mrope"
expect "--megatron-args: --normalization LayerNorm, but $model has RMSNorm" \
    --megatron-args "$layout --normalization LayerNorm"
expect "--megatron-args: --normalization: bad value \"rms\"" \
    --megatron-args "$layout --normalization rms"
expect "--megatron-args: --squared-relu, but $model has no squared-ReLU MLP" \
    --megatron-args "$layout --squared-relu"
expect "--megatron-args: --kv-channels 64, but $model has 128 per attention head" \
    --megatron-args "$layout --kv-channels 64"
expect "--megatron-args: --multi-latent-attention, but $model has no multi-latent attention" \
    --megatron-args "$layout --multi-latent-attention"
a=$(estimate --megatron-args "$layout --swiglu --kv-channels 128")
b=$(estimate --megatron-args "$layout")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && ok ||
    bad "structure flags that describe the model change nothing: $a"
expect "--seq 4096 and --megatron-args --seq-length 8192 disagree" \
    --seq 4096 --megatron-args "$layout --seq-length 8192"
expect "--megatron-args: --seq-length: bad value \"0\" (an integer from 1 to 2^30)" \
    --megatron-args "$layout --seq-length 0"
expect "--megatron-args: --num-layers needs a value" --megatron-args "--num-layers"
expect "--megatron-args: --recompute-method: bad value \"lazy\" (uniform or block)" \
    --megatron-args "$layout --recompute-method lazy"
expect "--megatron-args: --recompute-granularity full needs --recompute-method uniform or block" \
    --megatron-args "$layout --recompute-granularity full"

# Without --group-query-attention Megatron-LM ignores --num-query-groups.
a=$(estimate --megatron-args "$layout --num-query-groups 4")
b=$(estimate --megatron-args "$layout")
[ "$a" = "$b" ] && ok || bad "--num-query-groups without --group-query-attention is read past"

# Dropout: --hidden-dropout and --attention-dropout build the model with
# dropout when either is above 0, the one left out being Megatron-LM's
# default 0.1; as --dropout on does. Both 0 is --dropout off.
a=$(estimate --dropout on --megatron-args "$layout")
b=$(estimate --megatron-args "$layout --hidden-dropout 0.1 --attention-dropout 0.1")
c=$(estimate --megatron-args "$layout --hidden-dropout 0.0")
d=$(estimate --megatron-args "$layout")
e=$(estimate --megatron-args "$layout --hidden-dropout 0 --attention-dropout 0.0")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok ||
    bad "dropout flags build the model with dropout: $a vs $b vs $c"
[ "$a" != "$d" ] && [ "$d" = "$e" ] && ok ||
    bad "dropout changes the price, and both 0 is none: $a vs $d vs $e"
# A whole script (layers, hidden size and heads stated) that leaves both
# out runs Megatron-LM's 0.1 for both, as its argparse defaults them; a
# line of the layout alone says nothing of the model and keeps MODEL's.
script="$layout $shape --swiglu --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope"
f=$(estimate --megatron-args "$script")
g=$(estimate --megatron-args "$script --hidden-dropout 0.1 --attention-dropout 0.1")
echo "$f" | grep -q '"step_time_s"' && [ "$f" = "$g" ] && [ "$f" = "$a" ] && ok ||
    bad "a whole script without dropout flags runs 0.1: $f vs $g vs $a"
expect "--dropout off and --megatron-args disagree" --dropout off --megatron-args "$script"
expect "--dropout off and --megatron-args disagree" \
    --dropout off --megatron-args "$layout --attention-dropout 0.1"
expect "--megatron-args: --hidden-dropout: bad value \"1\" (a probability from 0 to below 1)" \
    --megatron-args "$layout --hidden-dropout 1"
expect "--dropout takes on or off" --dropout maybe --megatron-args "$layout"

# A MoE model: --num-experts is checked, --ffn-hidden-size (the dense FFN
# Megatron keeps beside --moe-ffn-hidden-size) is not.
moe=$src/examples/hf/mixtral-8x7b.json
out=$("$bin" estimate "$moe" --gpus 16 --json --megatron-args \
    "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 8 --global-batch-size 64 --num-experts 8 --ffn-hidden-size 1 --moe-token-dispatcher-type alltoall" 2>&1)
echo "$out" | grep -q '"step_time_s"' && ok || bad "Mixtral with its 8 experts is priced: $out"
out=$("$bin" estimate "$moe" --gpus 16 --megatron-args \
    "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 8 --num-experts 16 --moe-token-dispatcher-type alltoall --moe-grouped-gemm" 2>&1 >/dev/null)
echo "$out" | grep -qF -- "--num-experts 16, but $moe has 8 experts" && ok ||
    bad "Mixtral refuses 16 experts: $out"

# DeepSeek-V3: 3 dense layers, then 58 MoE layers of 256 experts 2,048 wide
# beside one shared expert 2,048 wide. Megatron-LM's --moe-layer-freq is
# an integer N (every Nth layer) or a Python list expression; each form
# that says the model's layers is priced alike, and one that says other
# layers, or a whole script that leaves a flag to Megatron-LM's default
# (every layer MoE, no shared experts), is refused naming the first layer
# that differs and the flag to give.
ds=$src/examples/hf/deepseek-v3.json
dsl="--tensor-model-parallel-size 8 --sequence-parallel --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 30 --expert-model-parallel-size 8 --expert-tensor-parallel-size 1 --num-experts 256 --moe-router-topk 8 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --micro-batch-size 1 --global-batch-size 16 --moe-router-num-groups 8 --moe-router-group-topk 4"
dse() { "$bin" estimate "$ds" --gpus 16 --seq 1024 --json "$@" 2>&1; }
a=$(dse --megatron-args "$dsl")
b=$(dse --megatron-args "$dsl --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 --moe-layer-freq [0]*3+[1]*58")
c=$(dse --megatron-args "$dsl --moe-layer-freq \"([0]*3+[1]*58)\"")
d=$(dse --megatron-args "$dsl --moe-layer-freq [0,0,0]+[1]*29*2")
echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && [ "$a" = "$c" ] && [ "$a" = "$d" ] && ok ||
    bad "DeepSeek-V3's MoE flags, each form: $a vs $b vs $c vs $d"
dsexpect() {
    want=$1
    shift
    out=$("$bin" estimate "$ds" --gpus 16 --seq 1024 "$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" && ok || bad "want \"$want\" (exit 2), got $rc: $out"
}
dsexpect "--moe-ffn-hidden-size 18432, but $ds has 2048 expert FFN size" \
    --megatron-args "$dsl --moe-ffn-hidden-size 18432"
dsexpect "--ffn-hidden-size 2048, but $ds has 18432 FFN size" \
    --megatron-args "$dsl --ffn-hidden-size 2048"
dsexpect "--moe-shared-expert-intermediate-size 4096, but $ds has shared experts 2048 wide" \
    --megatron-args "$dsl --moe-shared-expert-intermediate-size 4096"
dsexpect "--moe-layer-freq 1 makes layer 0 MoE, but in $ds it is dense: give --moe-layer-freq [0]*3+[1]*58" \
    --megatron-args "$dsl --moe-layer-freq 1"
dsexpect "--moe-layer-freq [0]*2+[1]*59 makes layer 2 MoE, but in $ds it is dense" \
    --megatron-args "$dsl --moe-layer-freq [0]*2+[1]*59"
dsexpect "--moe-layer-freq \"[0]*3+[1]*57\" has 60 entries, but the model has 61 layers" \
    --megatron-args "$dsl --moe-layer-freq [0]*3+[1]*57"
dsexpect "--moe-layer-freq \"[0]*3+[2]*58\": an entry other than 0 or 1" \
    --megatron-args "$dsl --moe-layer-freq [0]*3+[2]*58"
dsexpect "--moe-layer-freq \"[0]*3+[1]*\": expected a number at \"the end\"" \
    --megatron-args "$dsl --moe-layer-freq [0]*3+[1]*"
dsexpect "--moe-layer-freq \"0\": a frequency below 1" \
    --megatron-args "$dsl --moe-layer-freq 0"
whole="--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --swiglu --untie-embeddings-and-output-weights --normalization RMSNorm --disable-bias-linear --position-embedding-type rope --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-layernorm"
dsexpect "no --moe-shared-expert-intermediate-size (no shared experts, Megatron-LM's default), but $ds has shared experts 2048 wide: give --moe-shared-expert-intermediate-size 2048" \
    --megatron-args "$dsl $whole"
dsexpect "no --moe-layer-freq (every layer MoE, Megatron-LM's default) makes layer 0 MoE, but in $ds it is dense: give --moe-layer-freq [0]*3+[1]*58" \
    --megatron-args "$dsl $whole --moe-shared-expert-intermediate-size 2048"

# GPT-OSS's gated MLP adds 1 to its linear half and clamps at 7
# (--glu-linear-offset, --activation-func-clamp-value): no cost, but a
# whole script must state them, as Megatron-Core applies each only where
# given; a value given must be the model's.
oss=$src/examples/hf/gpt-oss-20b.json
ossargs="--num-layers 24 --hidden-size 2880 --num-attention-heads 64 --kv-channels 64 --group-query-attention --num-query-groups 8 --ffn-hidden-size 2880 --num-experts 32 --moe-router-topk 4 --moe-ffn-hidden-size 2880 --quick-geglu --position-embedding-type rope --normalization RMSNorm --untie-embeddings-and-output-weights --add-qkv-bias --softmax-type learnable --window-size 127,0 --window-attn-skip-freq 2 --expert-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --hidden-dropout 0 --attention-dropout 0"
oss_estimate() { "$bin" estimate "$oss" --gpus 16 --megatron-args "$ossargs $*" 2>&1; }
oss_estimate --glu-linear-offset 1 --activation-func-clamp-value 7 | grep -q "predicted step" && ok ||
    bad "GPT-OSS's own offset and clamp: $(oss_estimate --glu-linear-offset 1 --activation-func-clamp-value 7 | tail -2)"
oss_estimate | grep -qF "no --glu-linear-offset (Megatron-LM's default: none), but $oss's gated MLP has 1: give --glu-linear-offset 1" && ok ||
    bad "a GPT-OSS script without the offset: $(oss_estimate | tail -1)"
oss_estimate --glu-linear-offset 1 --activation-func-clamp-value 7.5 | grep -qF -- "--activation-func-clamp-value 7.5, but $oss's gated MLP has 7" && ok ||
    bad "a GPT-OSS script with another clamp: $(oss_estimate --glu-linear-offset 1 --activation-func-clamp-value 7.5 | tail -1)"
"$bin" estimate "$model" --gpus 16 --megatron-args "$layout --glu-linear-offset 1" 2>&1 |
    grep -qF -- "--glu-linear-offset 1, but $model's MLP has none: leave --glu-linear-offset out" && ok ||
    bad "an offset given for Llama's MLP"
# Without MODEL the script's own gated MLP carries them into its export.
"$bin" estimate --gpus 16 --megatron-args "$ossargs --glu-linear-offset 1 --activation-func-clamp-value 7 --max-position-embeddings 4096 --seq-length 4096 --vocab-size 201088 --tokenizer-type NullTokenizer --bf16" --emit megatron 2>/dev/null |
    grep -q -- "--activation-func-clamp-value 7" && ok || bad "a script's own clamp is not exported"

finish
