#!/bin/sh
# Loading and summarising a model is linear in its layers: `autopar graph
# --json` on chains of 25,000 to 200,000 distinct layers
# (scripts/chain-model.sh), each its own layer class.
#   sh bench/graph_scale.sh [path/to/autopar]
# Prints one row per size: wall seconds, peak resident memory, and seconds
# per 100,000 layers, which stays flat when nothing is quadratic.
set -u
bin=${1:-build/autopar}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "layers      wall      peak RSS   s per 100k layers"
for n in 25000 50000 100000 200000; do
    sh "$src/scripts/chain-model.sh" "$n" 1 "$tmp/chain.json"
    out=$( { /usr/bin/time -f "TIME %e %M" "$bin" graph "$tmp/chain.json" --json >/dev/null; } 2>&1 )
    t=$(echo "$out" | awk '/^TIME/ {print $2}')
    m=$(echo "$out" | awk '/^TIME/ {printf "%.0f", $3 / 1024}')
    printf '%-8s %7s s %7s MiB %10.2f\n' "$n" "$t" "$m" "$(echo "$t $n" | awk '{print $1 * 100000 / $2}')"
done
