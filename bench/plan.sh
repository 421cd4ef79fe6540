#!/bin/sh
# Planning time and peak memory for the models of docs/benchmarks.md.
#   sh bench/plan.sh [path/to/autopar] [--threads N]
# Prints one row per model: wall seconds, peak resident memory, the plan.
set -u
bin=${1:-build/autopar}
shift 2>/dev/null || true
src=$(cd "$(dirname "$0")/.." && pwd)
row() {
    name=$1
    shift
    out=$( { /usr/bin/time -f "TIME %e %M" "$bin" plan "$@" --quiet >/dev/null; } 2>&1 )
    t=$(echo "$out" | awk '/^TIME/ {print $2}')
    m=$(echo "$out" | awk '/^TIME/ {printf "%.0f", $3 / 1024}')
    printf '%-32s %8s s %6s MiB\n' "$name" "$t" "$m"
}
echo "model / GPUs                      wall        peak RSS"
row "Llama-3-8B on 16" "$src/examples/hf/llama-3-8b.json" --gpus 16 "$@"
row "Llama-3-70B on 64" "$src/examples/hf/llama-3-70b.json" --gpus 64 "$@"
row "GPT-3 175B on 1024" "$src/examples/hf/gpt3-175b.json" --gpus 1024 "$@"
row "Mixtral-8x7B on 64" "$src/examples/hf/mixtral-8x7b.json" --gpus 64 "$@"
# Meta trained 405B with batches of 16M tokens: 4096 sequences of 4096.
row "Llama-3.1-405B on 16384" "$src/examples/hf/llama-3.1-405b.json" --gpus 16384 \
    --global-batch 4096 "$@"
