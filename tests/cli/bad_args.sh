#!/bin/sh
# Bad command lines for every command exit 2 with a message that names the
# flag (or the file) and what is wrong, and never crash: the Megatron cases
# in tests/data/bad/megatron_args.txt, then bad values of the shared flags.
set -u
. "$(dirname "$0")/lib.sh"
tiny=$src/examples/gpt-tiny.json
llama=$src/examples/hf/llama-3-8b.json

refused() { # expected substring, command...
    want=$1
    shift
    out=$("$@" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -qF -- "$want"; then
        ok
    else
        bad "'$*': exit $rc, wanted 2 and '$want' in: $out"
    fi
}

while IFS='|' read -r opt val want; do
    case "$opt" in '#'* | '') continue ;; esac
    refused "$want" "$bin" estimate "$llama" --gpus 16 "$opt" "$val"
done <"$src/tests/data/bad/megatron_args.txt"

for cmd in plan estimate; do
    extra=""
    [ $cmd = estimate ] && extra="--megatron tp=1"
    # shellcheck disable=SC2086
    {
        refused "--gpus needs an integer from 1 to 1000000, got '-4'" "$bin" $cmd "$tiny" $extra --gpus -4
        refused "--gpus needs an integer from 1 to 1000000, got '0'" "$bin" $cmd "$tiny" $extra --gpus 0
        refused "--gpus needs an integer from 1 to 1000000, got '8x'" "$bin" $cmd "$tiny" $extra --gpus 8x
        refused "--gpus needs a value" "$bin" $cmd "$tiny" $extra --gpus
        refused "--gpus-per-node needs an integer from 1 to 1024, got '0'" "$bin" $cmd "$tiny" $extra --gpus-per-node 0
        refused "--seq needs an integer from 1 to 16777216, got 'abc'" "$bin" $cmd "$tiny" $extra --seq abc
        refused "--global-batch needs an integer from 1 to 65536, got '-1'" "$bin" $cmd "$tiny" $extra --global-batch -1
        refused "--flash-attention takes on or off" "$bin" $cmd "$tiny" $extra --flash-attention maybe
        refused "/nonexistent/cluster.json: cannot open" "$bin" $cmd "$tiny" $extra --cluster /nonexistent/cluster.json
        refused "--cluster $src/tests/data/bad/cluster_negative_peak.json --gpus 8: $src/tests/data/bad/cluster_negative_peak.json: gpu.peak_flops" \
            "$bin" $cmd "$tiny" $extra --cluster "$src/tests/data/bad/cluster_negative_peak.json"
        refused "unexpected argument '--bogus'" "$bin" $cmd "$tiny" $extra --bogus
        refused "/nonexistent/model.json: cannot open" "$bin" $cmd /nonexistent/model.json $extra
    }
done
refused "--max-stages needs an integer" "$bin" plan "$tiny" --max-stages 0
refused "--ilp-time-limit needs a number from 0.001 to 3600, got 'inf'" "$bin" plan "$tiny" --ilp-time-limit inf
refused "--ilp-gap needs a number from 0 to 1, got 'nan'" "$bin" plan "$tiny" --ilp-gap nan
refused "unexpected argument '-o'" "$bin" plan "$tiny" -o
# A file the user names that cannot be written is their input: status 2.
refused "/nonexistent/plan.json: cannot write: No such file or directory" \
    "$bin" plan "$tiny" --gpus 2 --no-sweep -o /nonexistent/plan.json
refused "/nonexistent/trace.json: cannot write" "$bin" estimate "$tiny" --gpus 2 \
    --megatron tp=2 --trace /nonexistent/trace.json
refused "/nonexistent/model.json: cannot write" "$bin" graph "$tiny" -o /nonexistent/model.json
refused "usage: autopar estimate" "$bin" estimate "$tiny" --gpus 8

refused "--seq needs an integer from 1 to 16777216, got '0'" "$bin" graph "$tiny" --seq 0
refused "--batch needs an integer from 1 to 1048576, got 'x'" "$bin" graph "$tiny" --batch x
refused "--dropout takes on or off" "$bin" graph "$tiny" --dropout 2
refused "-o needs a file name" "$bin" graph "$tiny" -o
refused "unknown option '--gpus'" "$bin" graph "$tiny" --gpus 8
refused "/nonexistent/model.json: cannot open" "$bin" graph /nonexistent/model.json

for extra in "--megatron tp=1"; do
    # shellcheck disable=SC2086
    {
        refused "--gpus needs an integer from 1 to 1000000, got '0'" "$bin" compare "$tiny" $extra --gpus 0
        refused "--global-batch needs an integer from 1 to 65536, got '70000'" "$bin" compare "$tiny" $extra --global-batch 70000
        refused "--megatron: gbs: bad value \"0\"" "$bin" compare "$tiny" --megatron gbs=0
        refused "unexpected argument '--bogus'" "$bin" compare "$tiny" $extra --bogus
    }
done
refused "/nonexistent/plan.json: cannot open" "$bin" export /nonexistent/plan.json --to megatron
refused "--to takes megatron, torchtitan or deepspeed, got 'bogus'" "$bin" export "$tiny" --to bogus
refused "unexpected argument '--bogus'" "$bin" export --bogus

refused "unknown option \"--bogus\"" "$bin" profile --bogus
refused "unknown command 'plann'" "$bin" plann "$tiny"

finish
