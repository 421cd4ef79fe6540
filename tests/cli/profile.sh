#!/bin/sh
# `autopar profile` on a machine without a usable GPU: it must say why and
# exit 2, whether the build has the profiler (CUDA, cuBLAS and NCCL found) or
# not, and never crash or write a file.
# usage: sh profile.sh /path/to/autopar /path/to/source-root
set -u
. "$(dirname "$0")/lib.sh"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    echo "profile.sh: a GPU is present; the GPU-less behaviour cannot be checked here"
    exit 0
fi

"$bin" profile -o "$tmp/cluster.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] && ok || bad "expected exit 2, got $rc: $(cat "$tmp/err")"
[ ! -e "$tmp/cluster.json" ] && ok || bad "wrote a file without measuring anything"
if grep -q "this build has no GPU support" "$tmp/err"; then
    grep -q "CUDA toolkit, cuBLAS and NCCL were not found" "$tmp/err" && ok ||
        bad "the message does not say what was missing: $(cat "$tmp/err")"
else
    grep -q "^autopar profile: no CUDA device found: ." "$tmp/err" && ok ||
        bad "unexpected message: $(cat "$tmp/err")"
    # Usage errors are reported before any device is touched.
    "$bin" profile --iters 0 >/dev/null 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 2 ] && ok || bad "--iters 0: expected exit 2, got $rc"
    grep -q -- "--iters" "$tmp/err" && ok || bad "--iters 0: message does not name the option"
    "$bin" profile --help >"$tmp/out" 2>&1 && ok || bad "--help failed"
    grep -q -- "--max-bytes" "$tmp/out" && ok || bad "--help does not list --max-bytes"
fi
finish
