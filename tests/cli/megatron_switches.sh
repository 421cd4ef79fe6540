#!/bin/sh
# Megatron-LM's switches take no value in any version autopar knows
# (planner/megatron_flags.c), so a word after one that autopar reads past
# is refused as argparse refuses it, and a flag glued to a shell
# assignment (EXTRA=--sequence-parallel) is refused as one that would not
# reach Megatron-LM. Real command lines, whose read-past flags take many
# values or none, still price, and as their priced flags alone do.
set -u
. "$(dirname "$0")/lib.sh"
llama=$src/examples/hf/llama-3-8b.json

# refused WANT "flags"
refused() {
    out=$("$bin" estimate "$llama" --gpus 8 --megatron-args "$2" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$1" && ok ||
        bad "'$2' -> rc $rc, '$out' lacks '$1'"
}

refused "--megatron-args: --use-mcore-models true: --use-mcore-models is a switch and \
takes no value; Megatron-LM's argparse rejects 'true' (unrecognized arguments): give \
--use-mcore-models alone to turn it on, or leave it out" \
    "--tensor-model-parallel-size 2 --use-mcore-models true --bf16"
refused "--no-load-optim 1: --no-load-optim is a switch" \
    "--tensor-model-parallel-size 2 --no-load-optim 1"
refused "--log-throughput true: --log-throughput is a switch" \
    "--tensor-model-parallel-size 2 --log-throughput=true"
refused "--no-rl-partial-rollouts False: --no-rl-partial-rollouts is a switch" \
    "--tensor-model-parallel-size 2 --no-rl-partial-rollouts False"
refused "--megatron-args: EXTRA=--sequence-parallel: a shell assignment; \
--sequence-parallel is the variable's value, not an argument, so it would not reach \
Megatron-LM as written (autopar does not expand variables); write --sequence-parallel \
among the flags" \
    "EXTRA=--sequence-parallel torchrun --nproc-per-node 8 pretrain_gpt.py \
--tensor-model-parallel-size 2 \$EXTRA"
refused "--megatron-args: SP=--sequence-parallel: after the training script this is one \
argument, not an assignment, and Megatron-LM's argparse rejects it (unrecognized \
arguments); write --sequence-parallel" \
    "torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 \
SP=--sequence-parallel"

# A Llama 3 8B script as Megatron-LM's examples write one, flattened: the
# switches read past (--use-mcore-models, the logging, --no-load-optim,
# --finetune, --eod-mask-loss) stand before other flags, before the
# launch's words (2>&1 | tee), and --data-path, --rampup-batch-size and
# --onnx-safe keep their values.
priced="--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
--num-attention-heads 32 --group-query-attention --num-query-groups 8 \
--seq-length 4096 --max-position-embeddings 8192 --position-embedding-type rope \
--rotary-base 500000 --normalization RMSNorm --swiglu \
--untie-embeddings-and-output-weights --disable-bias-linear \
--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer \
--overlap-grad-reduce --overlap-param-gather --micro-batch-size 1 \
--global-batch-size 64 --bf16"
script="CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc-per-node 8 --nnodes 1 \
--node-rank 0 --master-addr localhost --master-port 6000 pretrain_gpt.py \
--use-mcore-models $priced --train-iters 1000 --lr 3e-4 --min-lr 3e-5 \
--lr-decay-style cosine --lr-warmup-iters 100 --weight-decay 0.1 --adam-beta1 0.9 \
--adam-beta2 0.95 --clip-grad 1.0 --init-method-std 0.02 \
--data-path 0.5 /data/a_text_document 0.5 /data/b_text_document --split 99,1,0 \
--rampup-batch-size 16 16 5859375 --onnx-safe True \
--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B \
--no-mmap-bin-files --reset-position-ids --eod-mask-loss --log-interval 10 \
--log-throughput --log-params-norm --log-num-zeros-in-grad --log-timers-to-tensorboard \
--log-memory-to-tensorboard --tensorboard-dir /tb --save /ckpt --load /ckpt \
--save-interval 500 --eval-interval 100 --eval-iters 10 --no-load-optim --no-load-rng \
--finetune --exit-on-missing-checkpoint --ckpt-format torch_dist --async-save \
--manual-gc --manual-gc-interval 100 --rl-partial-rollouts --no-rl-partial-rollouts \
--distributed-timeout-minutes 60 --use-mcore-models 2>&1 | tee train.log"
yaml="--use-mcore-models: true
--log-throughput: True
--eod-mask-loss: false
$(echo "$priced" | sed 's/--/\n--/g')"
a=$("$bin" estimate "$llama" --gpus 8 --json --megatron-args "$priced" 2>/dev/null)
for line in "$script" "$yaml"; do
    b=$("$bin" estimate "$llama" --gpus 8 --json --megatron-args "$line" 2>/dev/null)
    rc=$?
    [ $rc -eq 0 ] && echo "$a" | grep -q '"step_time_s"' && [ "$a" = "$b" ] && ok ||
        bad "rc $rc: '$line' does not price as its priced flags: $b vs $a"
done

# The command lines README.md and docs/megatron.md show run as shown.
for doc in README.md docs/megatron.md; do
    awk '/^```/ { inb = !inb; next }
         inb && /^autopar .*--megatron-args "/ { cmd = 1 }
         cmd { print; if (/"$/) { cmd = 0; print "" } }' "$src/$doc" |
        awk -v RS= '{ print > ("'"$tmp"'/cmd" NR) }'
    for f in "$tmp"/cmd*; do
        [ -f "$f" ] || { bad "$doc: no autopar --megatron-args example"; continue; }
        sed "s|^autopar |\"\$bin\" |" "$f" >"$f.sh"
        out=$(bin=$bin sh "$f.sh" 2>&1 >/dev/null)
        [ $? -eq 0 ] && ok || bad "$doc example: $(cat "$f"): $out"
        rm -f "$f" "$f.sh"
    done
done
finish
