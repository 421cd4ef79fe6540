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
        refused "--cluster $src/tests/data/bad/cluster_negative_peak.json: $src/tests/data/bad/cluster_negative_peak.json: gpu.peak_flops" \
            "$bin" $cmd "$tiny" $extra --cluster "$src/tests/data/bad/cluster_negative_peak.json"
        refused "unknown option '--bogus'" "$bin" $cmd "$tiny" $extra --bogus
        refused "/nonexistent/model.json: cannot open" "$bin" $cmd /nonexistent/model.json $extra
    }
done
refused "--max-stages needs an integer" "$bin" plan "$tiny" --max-stages 0
refused "--ilp-time-limit needs a number from 0.001 to 3600, got 'inf'" "$bin" plan "$tiny" --ilp-time-limit inf
refused "--ilp-gap needs a number from 0 to 1, got 'nan'" "$bin" plan "$tiny" --ilp-gap nan
# A flag that needs a value and ends the line, for every command alike.
refused "autopar plan: -o needs a value" "$bin" plan "$tiny" -o
refused "autopar estimate: --megatron needs a value" "$bin" estimate "$tiny" --megatron
# A file the user names that cannot be written is their input: status 2.
refused "/nonexistent/plan.json: cannot write: No such file or directory" \
    "$bin" plan "$tiny" --gpus 2 --no-sweep -o /nonexistent/plan.json
refused "/nonexistent/trace.json: cannot write" "$bin" estimate "$tiny" --gpus 2 \
    --megatron tp=2 --trace /nonexistent/trace.json
refused "/nonexistent/model.json: cannot write" "$bin" graph "$tiny" -o /nonexistent/model.json
refused "usage: autopar estimate" "$bin" estimate "$tiny" --gpus 8
refused "autopar estimate: a configuration (--megatron or --megatron-args) is required" \
    "$bin" estimate "$tiny" --gpus 8
# An unknown flag gets the synopsis, not every option's description.
out=$("$bin" plan "$tiny" --bogus 2>&1)
[ "$(echo "$out" | wc -l)" -lt 20 ] && echo "$out" | grep -q "autopar plan --help" && ok ||
    bad "an unknown flag prints the synopsis and where the rest is: $out"
# The output is checked before the search: nothing is searched for a file
# that cannot be written, and nothing is left behind for one that can.
refused "-o /nonexistent/plan.json: cannot write" "$bin" plan "$tiny" -o /nonexistent/plan.json
refused "-o $tmp: cannot write: Is a directory" "$bin" plan "$tiny" -o "$tmp"
"$bin" plan "$tiny" --gpus 2 --quiet --no-sweep -o "$tmp/p.json" >/dev/null && [ -s "$tmp/p.json" ] &&
    ok || bad "a writable -o is written"
"$bin" plan "$tiny" --quiet --cluster /nonexistent/c.json -o "$tmp/q.json" >/dev/null 2>&1
[ ! -e "$tmp/q.json" ] && ok || bad "a failed plan leaves no -o file behind"
# --flag=value reads as --flag value for autopar's own flags, never inside a value.
[ "$("$bin" plan "$tiny" --gpus=2 --global-batch=64 --quiet --json)" = \
  "$("$bin" plan "$tiny" --gpus 2 --global-batch 64 --quiet --json)" ] && ok ||
    bad "--gpus=2 --global-batch=64 are --gpus 2 --global-batch 64"
[ "$("$bin" estimate "$tiny" --gpus 2 --megatron-args="--tensor-model-parallel-size=2" --json)" = \
  "$("$bin" estimate "$tiny" --gpus 2 --megatron-args "--tensor-model-parallel-size 2" --json)" ] &&
    "$bin" estimate "$tiny" --gpus 2 --megatron-args="--tensor-model-parallel-size=2" | grep -q "mesh 1x2" && ok ||
    bad "--megatron-args=\"--tensor-model-parallel-size=2\" keeps its value whole"

refused "--seq needs an integer from 1 to 16777216, got '0'" "$bin" graph "$tiny" --seq 0
refused "--batch needs an integer from 1 to 1048576, got 'x'" "$bin" graph "$tiny" --batch x
refused "--dropout takes on or off" "$bin" graph "$tiny" --dropout 2
refused "autopar graph: -o needs a value" "$bin" graph "$tiny" -o
refused "unknown option '--gpus'" "$bin" graph "$tiny" --gpus 8
refused "/nonexistent/model.json: cannot open" "$bin" graph /nonexistent/model.json

for extra in "--megatron tp=1"; do
    # shellcheck disable=SC2086
    {
        refused "--gpus needs an integer from 1 to 1000000, got '0'" "$bin" compare "$tiny" $extra --gpus 0
        refused "--global-batch needs an integer from 1 to 65536, got '70000'" "$bin" compare "$tiny" $extra --global-batch 70000
        refused "--megatron: gbs: bad value \"0\"" "$bin" compare "$tiny" --megatron gbs=0
        refused "unknown option '--bogus'" "$bin" compare "$tiny" $extra --bogus
    }
done
refused "/nonexistent/plan.json: cannot open" "$bin" export /nonexistent/plan.json --to megatron
refused "--to takes megatron, torchtitan or deepspeed, got 'bogus'" "$bin" export "$tiny" --to bogus
refused "unknown option '--bogus'" "$bin" export --bogus

# autopar-profile reads its own flags; a build without CUDA says it has none.
if "$bin" profile --help | grep -q "this build has no GPU support"; then
    refused "this build has no GPU support" "$bin" profile --bogus
else
    refused "unknown option \"--bogus\"" "$bin" profile --bogus
fi
refused "unknown command 'plann'" "$bin" plann "$tiny"
# A misspelt option is met with the nearest one the command has, and a
# switch given a value is told it takes none.
refused "unknown option '--gpu' (did you mean --gpus?)" "$bin" plan "$tiny" --gpu 16
refused "unknown option '--too' (did you mean --to?)" "$bin" export "$tiny" --too megatron
refused "unknown option '--jsn' (did you mean --json?)" "$bin" graph "$tiny" --jsn
refused "--fp8 takes no value ('--fp8=on')" "$bin" plan "$tiny" --fp8=on
refused "unexpected argument 'extra'" "$bin" plan "$tiny" extra

# A file of another kind says what it is, not the first field it lacks.
"$bin" plan "$tiny" --gpus 2 --quiet --target megatron -o "$tmp/kind.json" >/dev/null
refused "kind.json: this is a plan (\"format\": \"autopar-plan/1\"), not a model" \
    "$bin" plan "$tmp/kind.json" --gpus 8
refused "gpt-tiny.json: this is a model (\"format\": \"autopar-model/1\"), not a cluster file" \
    "$bin" estimate "$tiny" --megatron tp=1 --cluster "$tiny"
refused "llama-3-8b.json: this is a Hugging Face config (it has \"model_type\"), not a cluster file" \
    "$bin" plan "$tiny" --cluster "$llama"
refused "h100-2node.json: this is a cluster file (\"format\": \"autopar-cluster/1\"), not a plan" \
    "$bin" export "$src/examples/clusters/h100-2node.json" --to megatron

# Standard output that cannot be written (a full disk) is an error, not a
# launch script cut short with exit status 0.
full() { # command...
    out=$("$@" 2>&1 >/dev/full)
    rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -qF "cannot write standard output"; then
        ok
    else
        bad "'$*' >/dev/full: exit $rc, wanted 2 and 'cannot write standard output' in: $out"
    fi
}
if [ -w /dev/full ]; then
    "$bin" plan "$tiny" --gpus 2 --quiet --target megatron -o "$tmp/full.json" >/dev/null
    full "$bin" export "$tmp/full.json" --to megatron
    full "$bin" graph "$tiny" --json
    full "$bin" estimate "$tiny" --gpus 2 --megatron tp=1
    full "$bin" --help
fi


# A bad option points at `autopar CMD --help`, which must then describe
# every option the synopsis names: each appears at the head of an option's
# description (a line starting "  -", up to its first run of spaces).
for cmd in plan estimate compare calibrate graph export profile; do
    "$bin" $cmd --help >"$tmp/help" 2>&1
    named=$(sed '/^$/q' "$tmp/help" | grep -o -- '--[a-z0-9-]*' | sort -u)
    heads=$(awk 'body && /^  -/ { h = substr($0, 3); sub(/   .*/, "", h); print h } /^$/ { body = 1 }' \
        "$tmp/help" | grep -o -- '--[a-z0-9-]*' | sort -u)
    missing=""
    for opt in $named; do
        echo "$heads" | grep -qx -- "$opt" || missing="$missing $opt"
    done
    [ -z "$missing" ] && [ -n "$named" ] && ok || bad "autopar $cmd --help does not describe:$missing"
done

finish
