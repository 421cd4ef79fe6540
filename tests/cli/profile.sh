#!/bin/sh
# `autopar profile` on a machine without a usable GPU: it must say why and
# exit 2, whether the build has the profiler (CUDA, cuBLAS and NCCL found) or
# not, and never crash or write a file.
# usage: sh profile.sh /path/to/autopar /path/to/source-root
set -u
bin=$1
tmp=${TMPDIR:-/tmp}/ap_cli_profile.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "profile.sh: $*" >&2; exit 1; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    echo "profile.sh: a GPU is present; the GPU-less behaviour cannot be checked here"
    exit 0
fi

"$bin" profile -o "$tmp/cluster.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "expected exit 2, got $rc: $(cat "$tmp/err")"
[ ! -e "$tmp/cluster.json" ] || fail "wrote a file without measuring anything"
if grep -q "this build has no GPU support" "$tmp/err"; then
    grep -q "CUDA toolkit, cuBLAS and NCCL were not found" "$tmp/err" ||
        fail "the message does not say what was missing: $(cat "$tmp/err")"
    exit 0
fi
grep -q "^autopar profile: no CUDA device found: ." "$tmp/err" ||
    fail "unexpected message: $(cat "$tmp/err")"

# Usage errors are reported before any device is touched.
"$bin" profile --iters 0 >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "--iters 0: expected exit 2, got $rc"
grep -q -- "--iters" "$tmp/err" || fail "--iters 0: message does not name the option"
"$bin" profile --help >"$tmp/out" 2>&1 || fail "--help failed"
grep -q -- "--max-bytes" "$tmp/out" || fail "--help does not list --max-bytes"
exit 0
