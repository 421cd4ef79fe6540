#!/bin/sh
# FP8 from the command line: the spec and Megatron's --fp8-format price the
# same faster step, an A100 refuses it, plan.json and the Megatron export
# carry it through a round trip, and DeepSpeed refuses to export it.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json
step() { sed -n 's/.*"step_time_s":[^0-9]*\([0-9.e+-]*\).*/\1/p' "$1"; }

spec="tp=2,pp=2,mbs=1,gbs=128,sp=1,zero=1"
flags="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1
 --global-batch-size 128 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec" >"$tmp/bf16" 2>&1 || bad "bf16 estimate"
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,fp8=1" >"$tmp/fp8" 2>&1 || bad "fp8 estimate"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$flags --fp8-format hybrid
 --fp8-amax-history-len 1024 --fp8-amax-compute-algo max" >"$tmp/flags" 2>&1 || bad "fp8 flags"
cmp -s "$tmp/fp8" "$tmp/flags" && ok || bad "fp8=1 and --fp8-format hybrid differ"
grep -q '"fp8":.true' "$tmp/fp8" && grep -q '"fp8":.false' "$tmp/bf16" && ok ||
    bad "--json says the precision"
awk -v a="$(step "$tmp/fp8")" -v b="$(step "$tmp/bf16")" 'BEGIN { exit !(a < b) }' && ok ||
    bad "fp8 is not faster: $(step "$tmp/fp8") vs $(step "$tmp/bf16")"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,fp8=1" | grep -q "precision: linear layers' GEMMs in FP8" &&
    ok || bad "the report says the precision"

out=$("$bin" estimate "$model" --gpus 16 --cluster a100-80g --megatron "$spec,fp8=1" 2>&1)
[ $? -eq 2 ] && case "$out" in *fp8*a100-80g*A100*) true ;; *) false ;; esac && ok ||
    bad "an A100 refuses fp8: $out"
out=$("$bin" estimate "$model" --gpus 16 --megatron-args "$flags --fp8-format e5m2" 2>&1)
[ $? -eq 2 ] && case "$out" in *--fp8-format*e5m2*) true ;; *) false ;; esac && ok ||
    bad "a bad --fp8-format is refused: $out"

# plan.json -> Megatron flags -> estimate: the same prediction.
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,fp8=1" -o "$tmp/plan.json" >"$tmp/want" 2>/dev/null
grep -q '^	"fp8":	true' "$tmp/plan.json" && ok || bad "plan.json has fp8"
"$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
grep -q -- "--fp8-format hybrid" "$tmp/args.sh" && ok || bad "Megatron export: $(cat "$tmp/args.sh")"
args=$(megatron_args "$tmp/args.sh")
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$args" >"$tmp/got" 2>&1
cmp -s "$tmp/want" "$tmp/got" && ok || bad "round trip: $(diff "$tmp/want" "$tmp/got")"
# torchtitan's float8 converter is torchao's dynamic scaling, per tensor or
# per row: the delayed-scaling plan is refused, a tensorwise one exports,
# in torchtitan v0.2.2's names: the converter registered as
# quantize.linear.float8, its options under [quantize.linear.float8] and
# torch.compile under [compile]; v0.1's float8, [float8] and
# training.compile are gone there.
out=$("$bin" export "$tmp/plan.json" --to torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"with no delayed scaling"*) true ;; *) false ;; esac &&
    ok || bad "torchtitan takes delayed scaling: $out"
"$bin" estimate "$model" --gpus 16 --megatron "$spec,fp8=1,fp8_recipe=tensorwise" \
    -o "$tmp/tw.json" >/dev/null 2>&1
"$bin" export "$tmp/tw.json" --to torchtitan >"$tmp/titan.sh" 2>&1
grep -q -- "^  --model.converters quantize.linear.float8$" "$tmp/titan.sh" &&
    grep -q -- "^  --quantize.linear.float8.filter_fqns output$" "$tmp/titan.sh" &&
    grep -q -- "^  --compile.enable$" "$tmp/titan.sh" &&
    ! grep -q -- "--float8\.\|--training.compile\|converters float8" "$tmp/titan.sh" &&
    ok || bad "torchtitan export has the float8 converter: $(cat "$tmp/titan.sh")"
# Its float8 converter swaps nn.Linear, which MoE experts are not: their
# grouped GEMMs, priced in FP8, would run in bf16.
"$bin" estimate "$src/examples/hf/mixtral-8x7b.json" --gpus 64 \
    --megatron "tp=2,pp=4,ep=8,sp=1,mbs=1,gbs=256,fp8=1" -o "$tmp/moe.json" >/dev/null 2>&1
out=$("$bin" export "$tmp/moe.json" --to torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"swaps nn.Linear only"*"grouped GEMMs"*) true ;; *) false ;; esac &&
    ok || bad "torchtitan refuses FP8 experts: $out"
out=$("$bin" plan "$src/examples/hf/mixtral-8x7b.json" --gpus 64 --fp8 --target torchtitan \
    --quiet 2>&1)
[ $? -eq 2 ] && case "$out" in *"fp8: torchtitan"*"grouped GEMMs"*) true ;; *) false ;; esac &&
    ok || bad "plan --fp8 --target torchtitan of an MoE model: $out"
"$bin" estimate "$model" --gpus 16 --megatron "tp=1,pp=2,mbs=1,gbs=128,fp8=1,overlap_grad=0" \
    -o "$tmp/ds.json" >/dev/null 2>&1
out=$("$bin" export "$tmp/ds.json" --to deepspeed 2>&1)
[ $? -eq 2 ] && case "$out" in *FP8*) true ;; *) false ;; esac && ok ||
    bad "DeepSpeed refuses fp8: $out"

# Tensorwise (current) scaling: the flag and the spec price the same step,
# slower than delayed scaling by the amax passes; plan.json and the
# Megatron export carry it; block scaling is refused; without --fp8-format
# the recipe is read past, and the spec refuses it without fp8=1.
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,fp8=1,fp8_recipe=tensorwise" \
    -o "$tmp/cs.json" >"$tmp/cs" 2>&1 || bad "tensorwise estimate: $(cat "$tmp/cs")"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$flags --fp8-format hybrid
 --fp8-recipe tensorwise" >"$tmp/csflags" 2>&1 || bad "tensorwise flags"
cmp -s "$tmp/cs" "$tmp/csflags" && ok || bad "fp8_recipe=tensorwise and --fp8-recipe tensorwise differ"
awk -v a="$(step "$tmp/cs")" -v b="$(step "$tmp/fp8")" 'BEGIN { exit !(a > b) }' && ok ||
    bad "tensorwise is not slower than delayed: $(step "$tmp/cs") vs $(step "$tmp/fp8")"
grep -q '"fp8_recipe":.*"tensorwise"' "$tmp/cs.json" && ok || bad "plan.json lacks fp8_recipe"
"$bin" export "$tmp/cs.json" --to megatron >"$tmp/csargs.sh" 2>&1
grep -qxF "  --fp8-recipe tensorwise" "$tmp/csargs.sh" && ok || bad "the export lacks --fp8-recipe"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$(megatron_args "$tmp/csargs.sh")" \
    >"$tmp/csgot" 2>&1
cmp -s "$tmp/cs" "$tmp/csgot" && ok || bad "tensorwise round trip: $(diff "$tmp/cs" "$tmp/csgot")"
# Blockwise scaling: the flags and the spec price alike, the report carries
# the caveat on its GEMM rate, the Megatron-LM export states it and reads
# back the same, torchtitan's refuses it; mxfp8 is refused on a Hopper and
# priced on a B200; a recipe autopar does not price is refused by name.
"$bin" estimate "$model" --gpus 16 --json --megatron "$spec,fp8=1,fp8_recipe=blockwise" \
    -o "$tmp/bw.json" >"$tmp/bw" 2>&1 || bad "blockwise estimate: $(cat "$tmp/bw")"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$flags --fp8-format e4m3
 --fp8-recipe blockwise" >"$tmp/bwflags" 2>&1 || bad "blockwise flags"
cmp -s "$tmp/bw" "$tmp/bwflags" && ok || bad "fp8_recipe=blockwise and --fp8-recipe blockwise differ"
grep -q "GEMMs are priced at the FP8 GEMM rate of one scale per tensor" "$tmp/bw" && ok ||
    bad "blockwise has no caveat: $(cat "$tmp/bw")"
"$bin" export "$tmp/bw.json" --to megatron >"$tmp/bwargs.sh" 2>&1
grep -qxF "  --fp8-recipe blockwise" "$tmp/bwargs.sh" && ok || bad "the export lacks blockwise"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$(megatron_args "$tmp/bwargs.sh")" \
    >"$tmp/bwgot" 2>&1
cmp -s "$tmp/bw" "$tmp/bwgot" && ok || bad "blockwise round trip: $(diff "$tmp/bw" "$tmp/bwgot")"
out=$("$bin" export "$tmp/bw.json" --to torchtitan 2>&1)
[ $? -eq 2 ] && case "$out" in *"blockwise FP8 (fp8_recipe blockwise)"*) true ;; *) false ;; esac &&
    ok || bad "torchtitan takes blockwise: $out"
out=$("$bin" estimate "$model" --gpus 16 --megatron "$spec,fp8=1,fp8_recipe=mxfp8" 2>&1)
[ $? -eq 2 ] && case "$out" in *"is a Hopper GPU"*"Blackwell"*) true ;; *) false ;; esac &&
    ok || bad "mxfp8 on an H100: $out"
"$bin" estimate "$model" --cluster b200 --gpus 16 --megatron-args "$flags --fp8-format e4m3
 --fp8-recipe mxfp8" >"$tmp/mx" 2>&1 && grep -q "mxfp8 scaling" "$tmp/mx" && ok ||
    bad "mxfp8 on a B200: $(cat "$tmp/mx")"
out=$("$bin" estimate "$model" --gpus 16 --megatron-args "$flags --fp8-format hybrid --fp8-recipe custom" 2>&1)
[ $? -eq 2 ] && case "$out" in *"--fp8-recipe custom: not a recipe autopar prices"*) true ;; *) false ;; esac &&
    ok || bad "custom is refused: $out"
"$bin" estimate "$model" --gpus 16 --json --megatron-args "$flags --fp8-recipe tensorwise" \
    >"$tmp/csbf16" 2>&1 && cmp -s "$tmp/csbf16" "$tmp/bf16" && ok ||
    bad "--fp8-recipe without --fp8-format changes the price"
out=$("$bin" estimate "$model" --gpus 16 --megatron "$spec,fp8_recipe=tensorwise" 2>&1)
[ $? -eq 2 ] && case "$out" in *"needs FP8 training (fp8=1)"*) true ;; *) false ;; esac &&
    ok || bad "fp8_recipe without fp8: $out"

out=$("$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --fp8-recipe tensorwise 2>&1)
[ $? -eq 2 ] && case "$out" in *"give --fp8 too"*) true ;; *) false ;; esac && ok ||
    bad "plan --fp8-recipe without --fp8: $out"

# A searched plan in FP8 records it.
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 2 --global-batch 8 --quiet --fp8 \
    -o "$tmp/p.json" >/dev/null 2>&1 && grep -q '^	"fp8":	true' "$tmp/p.json" && ok ||
    bad "plan --fp8 writes fp8 into plan.json"

finish
