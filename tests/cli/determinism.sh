#!/bin/sh
# The same command gives byte-identical plan.json: run twice, and (once the
# planner takes --threads) with one thread and with two.
set -u
. "$(dirname "$0")/lib.sh"

same() { # what, file a, file b
    if cmp -s "$2" "$3"; then
        ok
    else
        bad "$1: plan.json differs:"
        diff "$2" "$3" | head -20 >&2
    fi
}

plan() { # output file, args...
    out=$1
    shift
    "$bin" plan "$@" --quiet -o "$out" >/dev/null 2>"$tmp/err" ||
        bad "plan $*: $(cat "$tmp/err")"
}

tiny="$src/examples/gpt-tiny.json --gpus 4 --global-batch 16"
big="$src/examples/gpt-1.3b.json --gpus 4 --global-batch 16"
# shellcheck disable=SC2086
{
    plan "$tmp/tiny1.json" $tiny
    plan "$tmp/tiny2.json" $tiny
    same "gpt-tiny twice" "$tmp/tiny1.json" "$tmp/tiny2.json"
    plan "$tmp/big1.json" $big
    plan "$tmp/big2.json" $big
    same "gpt-1.3b on 4 GPUs twice" "$tmp/big1.json" "$tmp/big2.json"
    if "$bin" plan --help | grep -q -- "--threads"; then
        plan "$tmp/t1.json" $big --threads 1
        plan "$tmp/t2.json" $big --threads 2
        same "--threads 1 vs --threads 2" "$tmp/t1.json" "$tmp/t2.json"
        same "--threads 1 vs the default" "$tmp/t1.json" "$tmp/big1.json"
    else
        echo "determinism.sh: plan has no --threads yet; only repeated runs checked"
    fi
}

a=$("$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 16 --json --megatron tp=2,pp=2,gbs=256)
b=$("$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 16 --json --megatron tp=2,pp=2,gbs=256)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "estimate --json differs between runs"

# compare's table is the same bytes on every run: the sweep's wall time
# goes to stderr, and no figure on stdout is one.
cargs="$src/examples/gpt-1.3b.json --gpus 16 --megatron tp=2,pp=2,mbs=1,gbs=8,sp=1 --sweep"
# shellcheck disable=SC2086
{
    "$bin" compare $cargs >"$tmp/c1" 2>"$tmp/ce" || bad "compare: $(cat "$tmp/ce")"
    "$bin" compare $cargs >"$tmp/c2" 2>/dev/null || bad "compare again"
    "$bin" compare $cargs --json >"$tmp/j1" 2>/dev/null || bad "compare --json"
    "$bin" compare $cargs --json >"$tmp/j2" 2>/dev/null || bad "compare --json again"
}
grep -q "the sweep priced" "$tmp/c1" && cmp -s "$tmp/c1" "$tmp/c2" && ok ||
    bad "compare --sweep differs between runs: $(diff "$tmp/c1" "$tmp/c2" | head -4)"
grep -Eq ' in [0-9.]+ s' "$tmp/c1" && bad "compare prints a wall time on stdout: $(grep -E ' in [0-9.]+ s' "$tmp/c1")" || ok
grep -q '^autopar compare: the sweep took [0-9.]* s$' "$tmp/ce" && ok ||
    bad "compare says the sweep's wall time on stderr: $(cat "$tmp/ce")"
cmp -s "$tmp/j1" "$tmp/j2" && ok || bad "compare --sweep --json differs between runs"
# shellcheck disable=SC2086
"$bin" compare $cargs --json --threads 1 >"$tmp/j3" 2>/dev/null || bad "compare --threads 1"
cmp -s "$tmp/j1" "$tmp/j3" && ok || bad "compare --threads 1 differs from the default"
# shellcheck disable=SC2086
a=$("$bin" plan $big --quiet) && b=$("$bin" plan $big --quiet --threads 1) &&
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "plan's summary differs between runs"

finish
