#!/bin/sh
# What produced examples/clusters/*-profile.json on a lent GPU machine
# (docs/profiler.md, "Run on real GPUs"): the profiler's failure paths, a
# --quick and a full profile, PyTorch's cross-check of the GEMM and copy
# figures and of flash attention, and compute-sanitizer over a short run.
#
#   sh bench/gpu/profile.sh path/to/autopar-profile OUTDIR [NAME]
#
# NAME (default: gpu) prefixes the files written to OUTDIR: NAME-profile.json
# (the full profile), NAME-quick.json, and the logs. Steps that need what the
# machine may lack (python3 with torch, compute-sanitizer) are skipped with a
# line saying so.
set -u
if [ $# -lt 2 ]; then
    echo "usage: sh bench/gpu/profile.sh path/to/autopar-profile OUTDIR [NAME]" >&2
    exit 2
fi
prof=$1 out=$2 name=${3:-gpu}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" || exit 2

nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm,driver_version --format=csv
echo "== no device visible (expect exit 2)"
CUDA_VISIBLE_DEVICES= "$prof" --quick -o "$out/none.json"; echo "exit $?"
echo "== more GPUs than there are (expect exit 2)"
"$prof" --gpus 4096 -o "$out/none.json"; echo "exit $?"
echo "== --quick"
/usr/bin/time -f "%e s wall, %M KiB peak" "$prof" --quick -o "$out/$name-quick.json" \
    2>"$out/$name-quick.log"; echo "exit $?"; tail -3 "$out/$name-quick.log"
echo "== full"
/usr/bin/time -f "%e s wall, %M KiB peak" "$prof" -o "$out/$name-profile.json" \
    2>"$out/$name-full.log"; echo "exit $?"; tail -3 "$out/$name-full.log"
if python3 -c "import torch" 2>/dev/null; then
    echo "== PyTorch cross-check"
    python3 "$here/crosscheck.py"
    python3 "$here/attention.py"
else
    echo "== PyTorch cross-check skipped: no python3 with torch"
fi
if command -v compute-sanitizer >/dev/null 2>&1; then
    echo "== compute-sanitizer memcheck over --quick in bf16 and fp8, one iteration"
    timeout 240 compute-sanitizer --tool memcheck --leak-check full "$prof" --quick \
        --dtypes bf16,fp8 --iters 1 --warmup 0 \
        -o "$out/sanitized.json" >"$out/$name-sanitizer.log" 2>&1; echo "exit $?"
    grep -E "ERROR SUMMARY|LEAK SUMMARY" "$out/$name-sanitizer.log"
    rm -f "$out/sanitized.json"
else
    echo "== compute-sanitizer skipped: not on PATH"
fi
rm -f "$out/none.json"
