#!/bin/sh
# `autopar graph`: the summary of the examples, --json, -o round trip,
# rescaling, --flash-attention, usage errors.
set -u
. "$(dirname "$0")/lib.sh"

has() { # text, substring, what
    case "$1" in *"$2"*) ok ;; *) bad "$3: no '$2' in: $1" ;; esac
}

out=$("$bin" graph "$src/examples/gpt-1.3b.json") || bad "gpt-1.3b exit $?"
has "$out" "gpt-1.3b" "name"
has "$out" "24 in 1 class" "layers"
# 24(12h^2 + 13h) + vh + sh + 2h at h = 2048, v = 50257, s = 2048.
has "$out" "1.32 B params (2.63 GB at bf16)" "params"
has "$out" "24 attention" "ops by kind"

json=$("$bin" graph "$src/examples/gpt-1.3b.json" --json) || bad "--json exit $?"
has "$json" '"params":	1315723264' "--json params"
has "$json" '"layers":	24' "--json layers"

# -o writes the project format; reloading it gives the same summary.
"$bin" graph "$src/examples/gpt-tiny.json" -o "$tmp/tiny.json" >"$tmp/a.txt" ||
    bad "-o exit $?"
"$bin" graph "$tmp/tiny.json" --json >"$tmp/b.json" || bad "reload exit $?"
"$bin" graph "$src/examples/gpt-tiny.json" --json >"$tmp/a.json"
grep -v '"source"' "$tmp/a.json" >"$tmp/a2.json"
grep -v '"source"' "$tmp/b.json" >"$tmp/b2.json"
cmp -s "$tmp/a2.json" "$tmp/b2.json" && ok || bad "round trip changed the summary"

# --seq and --batch rescale a project file: 4 x 128 tokens.
out=$("$bin" graph "$src/examples/gpt-tiny.json" --batch 4 --seq 128 --json)
has "$out" '"tokens":	512' "rescaled tokens"

# Flash attention on the tiny model (written without) saves less.
off=$("$bin" graph "$src/examples/gpt-tiny.json" --json | grep '"saved_bytes"' | tail -1)
on=$("$bin" graph "$src/examples/gpt-tiny.json" --flash-attention on --json |
    grep '"saved_bytes"' | tail -1)
[ "$off" != "$on" ] && ok || bad "--flash-attention on changed nothing ($on)"

"$bin" graph --help | grep -q "usage: autopar graph" && ok || bad "--help"
for args in "" "--seq" "--seq 0 x.json" "--flash-attention maybe x.json" \
    "--bogus x.json" "a.json b.json"; do
    # shellcheck disable=SC2086
    "$bin" graph $args >/dev/null 2>&1
    rc=$?
    [ "$rc" -eq 2 ] && ok || bad "'graph $args' exit $rc, expected 2"
done

# Gemma 2's windows: every other layer at 4,096 keys. At 8,192 tokens the
# windowed class does fewer FLOPs than the full one and the summary says
# which class has the window; 9,241,705,984 parameters, the released count.
out=$("$bin" graph "$src/examples/hf/gemma-2-9b.json" --seq 8192) || bad "gemma-2 exit $?"
has "$out" "42 in 2 classes" "gemma-2 classes"
has "$out" "21 layers  198 M params  saved 1.26 GB  forward 4.08 TFLOP  window 4096" "gemma-2 window"
has "$out" "1 softcap" "gemma-2 logit cap"
json=$("$bin" graph "$src/examples/hf/gemma-2-9b.json" --json) || bad "gemma-2 --json exit $?"
has "$json" '"params":	9241705984' "gemma-2 params"
has "$json" '"window":	4096' "gemma-2 --json window"

# A MoE model's summary says what each token touches: OLMoE's 1.28 B of its
# 6.92 B (8 of 64 experts); a dense model's touches all, and says nothing.
out=$("$bin" graph "$src/examples/hf/olmoe-1b-7b.json") || bad "olmoe exit $?"
has "$out" "6.92 B params (13.8 GB at bf16), 1.28 B active per token" "olmoe active"
json=$("$bin" graph "$src/examples/hf/olmoe-1b-7b.json" --json) || bad "olmoe --json exit $?"
has "$json" '"active_params":	1282017280' "olmoe --json active"
out=$("$bin" graph "$src/examples/gpt-1.3b.json") || bad "gpt exit $?"
case "$out" in *"active per token"*) bad "a dense model reports no active share" ;; *) ok ;; esac

# The numbers that change no cost travel with the model: a model file
# written from Llama 3.1's config keeps its rotary base, scaling and norm
# epsilon, and a configuration priced on that file exports them.
"$bin" graph "$src/examples/hf/llama-3.1-405b.json" -o "$tmp/l405.json" >/dev/null ||
    bad "llama 3.1 -o"
grep -q '"rope_scaling":	"llama3"' "$tmp/l405.json" && grep -q '"rope_base":	500000' \
    "$tmp/l405.json" && grep -q '"norm_eps":	1e-05' "$tmp/l405.json" && ok ||
    bad "the model file lacks Llama 3.1's rope and norm numbers"
"$bin" estimate "$tmp/l405.json" --gpus 72 --megatron "tp=8,pp=9,sp=1,mbs=1,gbs=63" \
    -o "$tmp/l405-plan.json" >/dev/null 2>&1
"$bin" export "$tmp/l405-plan.json" --to megatron | grep -q -- "--rope-scaling-factor 8" &&
    ok || bad "the model file's rope scaling does not reach the export"

# One configuration a command: a second --megatron-args would merge into the first.
"$bin" graph --megatron-args "--num-layers 2" --megatron-args "--num-layers 4" \
    >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "give one --megatron or --megatron-args" "$tmp/err" && ok ||
    bad "graph takes two --megatron-args: $(cat "$tmp/err")"

finish
