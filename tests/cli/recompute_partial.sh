#!/bin/sh
# Partial recomputation from the command line: the spec keys
# recompute_method and recompute_layers price as Megatron-LM's
# --recompute-method and --recompute-num-layers; block N is faster and
# heavier than full recomputation of every layer; the report, --json and
# plan.json say the method; plan.json round-trips through the Megatron-LM
# export, and a plan without the fields reads as uniform 1; torchtitan and
# DeepSpeed refuse what they cannot run; bad values exit 2 naming the key,
# flag or field.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/gpt-1.3b.json
field() { sed -n "s/.*\"$1\":[^0-9]*\([0-9.e+-]*\).*/\1/p" "$2"; }
est() { "$bin" estimate "$model" --gpus 4 --json "$@"; }

spec="tp=2,pp=2,vpp=2,mbs=1,gbs=8,zero=0,overlap_grad=0"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
 --num-layers-per-virtual-pipeline-stage 6 --micro-batch-size 1 --global-batch-size 8"
est --megatron "$spec,recompute=full" >"$tmp/full" 2>&1 || bad "full: $(cat "$tmp/full")"
est --megatron "$spec,recompute=full,recompute_method=block,recompute_layers=2" \
    >"$tmp/block" 2>&1 || bad "block: $(cat "$tmp/block")"
est --megatron-args "$flags --recompute-granularity full --recompute-method block
 --recompute-num-layers 2" >"$tmp/bflags" 2>&1
cmp -s "$tmp/block" "$tmp/bflags" && ok || bad "block 2: the spec and the flags differ"
est --megatron "$spec,recompute=full,recompute_method=uniform,recompute_layers=3" \
    >"$tmp/uniform" 2>&1 || bad "uniform: $(cat "$tmp/uniform")"
est --megatron-args "$flags --recompute-granularity full --recompute-method uniform
 --recompute-num-layers 3" >"$tmp/uflags" 2>&1
cmp -s "$tmp/uniform" "$tmp/uflags" && ok || bad "uniform 3: the spec and the flags differ"
grep -q '"recompute_method":.*"block"' "$tmp/block" &&
    grep -q '"recompute_num_layers":.*2' "$tmp/block" &&
    grep -q '"recompute_method":.*"uniform"' "$tmp/full" && ok ||
    bad "--json says the method and its layers"
st() { field step_time_s "$1"; }
mem() { field max_memory_bytes "$1"; }
awk -v b="$(st "$tmp/block")" -v f="$(st "$tmp/full")" -v u="$(st "$tmp/uniform")" \
    'BEGIN { exit !(b < f && u == f) }' && ok ||
    bad "block 2 recomputes less than full; uniform 3 recomputes as much"
awk -v b="$(mem "$tmp/block")" -v f="$(mem "$tmp/full")" 'BEGIN { exit !(b > f) }' && ok ||
    bad "block 2 keeps more than full"
"$bin" estimate "$model" --gpus 4 --megatron "$spec,recompute=full,recompute_method=block,recompute_layers=2" |
    grep -q "recompute full (block 2: 4 of 12 layers)" && ok || bad "the report names the method"

# plan.json -> Megatron flags -> estimate: the same prediction.
est --megatron "$spec,recompute=full,recompute_method=block,recompute_layers=2" \
    -o "$tmp/plan.json" >"$tmp/want" 2>/dev/null
grep -q "^	\"recompute_method\":	\"block\"" "$tmp/plan.json" &&
    grep -q "^	\"recompute_num_layers\":	2" "$tmp/plan.json" && ok ||
    bad "plan.json has the method and its layers"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1 || bad "export: $(cat "$tmp/args.sh")"
grep -q -- "--recompute-method block" "$tmp/args.sh" &&
    grep -q -- "--recompute-num-layers 2" "$tmp/args.sh" && ok || bad "the export states block 2"
args=$(megatron_args "$tmp/args.sh")
est --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/want" "$tmp/got" && ok || bad "round trip of block 2: $(diff "$tmp/want" "$tmp/got")"

# A plan written before the fields: uniform 1.
est --megatron "$spec,recompute=full" -o "$tmp/full.json" >/dev/null 2>&1
grep -v '"recompute_method"\|"recompute_num_layers"' "$tmp/full.json" >"$tmp/old.json"
"$bin" export "$tmp/old.json" --to megatron >"$tmp/old.sh" 2>&1 &&
    grep -q -- "--recompute-method uniform" "$tmp/old.sh" &&
    grep -q -- "--recompute-num-layers 1" "$tmp/old.sh" && ok ||
    bad "a plan without the fields is uniform 1: $(cat "$tmp/old.sh")"

# DeepSpeed checkpoints groups of activation_checkpoint_interval layers.
dspec="tp=1,pp=2,mbs=2,gbs=16,zero=0,overlap_grad=0,recompute=full"
est --megatron "$dspec,recompute_layers=3" -o "$tmp/ds.json" >/dev/null 2>&1
"$bin" export "$tmp/ds.json" --to deepspeed 2>&1 |
    grep -q '"activation_checkpoint_interval":.*3' && ok || bad "DeepSpeed's interval is uniform N"
est --megatron "$dspec,recompute_method=block,recompute_layers=3" -o "$tmp/dsb.json" >/dev/null 2>&1
est --megatron "tp=2,pp=2,sp=1,mbs=1,gbs=8,recompute=full,recompute_method=block,recompute_layers=3" \
    -o "$tmp/tt.json" >/dev/null 2>&1

refused() { # launcher plan what
    out=$("$bin" export "$2" --to "$1" 2>&1)
    [ $? -eq 2 ] && echo "$out" | grep -qF -- "$3" && ok || bad "$1 export: $out"
}
refused torchtitan "$tmp/tt.json" "selective_ac_option N every N-th layer; the plan uses recompute_method \"block\" with recompute_num_layers 3"
refused deepspeed "$tmp/dsb.json" "has no block method"

expect() {
    want=$1
    shift
    out=$("$bin" estimate "$model" --gpus 4 "$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" && ok ||
        bad "$* -> rc $rc, '$out' lacks '$want'"
}
expect "--megatron: recompute_method: bad value \"lazy\" (uniform or block)" \
    --megatron "$spec,recompute=full,recompute_method=lazy"
expect "--megatron: recompute_layers: bad value \"x\" (an integer from 0 to 2^30)" \
    --megatron "$spec,recompute=full,recompute_layers=x"
expect "recompute_method=block,recompute_layers=2 (--recompute-method, --recompute-num-layers) apply to recompute=full only" \
    --megatron "$spec,recompute=selective,recompute_method=block,recompute_layers=2"
expect "recompute_layers=4 (--recompute-num-layers) with recompute_method=uniform must divide the 6 layers of stage 0's virtual stages" \
    --megatron "$spec,recompute=full,recompute_layers=4"
expect "--megatron-args: --recompute-num-layers needs a value" \
    --megatron-args "$flags --recompute-num-layers"
expect "--megatron-args: --recompute-granularity full needs --recompute-method uniform or block" \
    --megatron-args "$flags --recompute-granularity full --recompute-num-layers 2"

# plan.json's fields, bad.
sed 's/"recompute_method":	"block"/"recompute_method":	"lazy"/' "$tmp/plan.json" >"$tmp/bad1.json"
out=$("$bin" export "$tmp/bad1.json" --to megatron 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -qF "recompute_method: \"lazy\" is not uniform or block" && ok ||
    bad "bad recompute_method: $out"
sed -e 's/"recompute_method":	"block"/"recompute_method":	"uniform"/' \
    -e 's/"recompute_num_layers":	2/"recompute_num_layers":	0/' "$tmp/plan.json" >"$tmp/bad2.json"
out=$("$bin" export "$tmp/bad2.json" --to megatron 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -qF "recompute_num_layers: 0 under \"uniform\"" && ok ||
    bad "uniform 0: $out"
finish
