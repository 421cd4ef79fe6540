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

finish
