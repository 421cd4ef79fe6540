#!/bin/sh
# autopar export: golden exports of Megatron-LM configurations of the
# examples, the same bytes from `--emit`, the round trip of the exported
# Megatron flags through `estimate --megatron-args`, and refusals.
#
# To regenerate the goldens after an intended change of the output:
#   AP_REGEN=1 sh tests/cli/export.sh build/autopar .
# and review the diff of tests/data/golden/ before committing it.
set -u
. "$(dirname "$0")/lib.sh"

# name|model|gpus|Megatron spec|launcher (DeepSpeed overlaps no ZeRO-1 reduction)
cases="gpt-tiny|examples/gpt-tiny.json|4|tp=2,pp=2,sp=1,mbs=1,gbs=8|megatron
gpt-tiny|examples/gpt-tiny.json|4|tp=1,pp=2,mbs=2,gbs=16,overlap_grad=0|deepspeed
gpt-1.3b|examples/gpt-1.3b.json|16|tp=2,pp=2,vpp=2,sp=1,mbs=1,gbs=64|megatron
gpt-1.3b|examples/gpt-1.3b.json|16|tp=2,pp=2,vpp=2,sp=1,mbs=1,gbs=64|torchtitan
gpt-1.3b|examples/gpt-1.3b.json|16|tp=1,pp=2,mbs=2,gbs=64,recompute=full,overlap_grad=0|deepspeed
llama-3-8b|examples/hf/llama-3-8b.json|16|tp=4,pp=2,sp=1,mbs=1,gbs=256,recompute=full|megatron
llama-3-8b|examples/hf/llama-3-8b.json|16|tp=4,pp=2,sp=1,mbs=1,gbs=256,recompute=full|torchtitan
mixtral-8x7b|examples/hf/mixtral-8x7b.json|64|tp=2,pp=4,ep=8,sp=1,mbs=1,gbs=256,recompute=selective|megatron
deepseek-v3|examples/hf/deepseek-v3.json|256|tp=1,pp=8,ep=32,mbs=1,gbs=256,first=5,last=8|megatron"

echo "$cases" >"$tmp/cases"
while IFS='|' read -r name model gpus spec to; do
    golden=$src/tests/data/golden/$name.$to.txt
    "$bin" estimate "$src/$model" --gpus "$gpus" --megatron "$spec" \
        -o "$tmp/plan.json" --emit "$to" >"$tmp/emitted" 2>"$tmp/err" ||
        { bad "$name $to: estimate --emit: $(cat "$tmp/err")"; continue; }
    "$bin" export "$tmp/plan.json" --to "$to" >"$tmp/exported" 2>"$tmp/err" ||
        { bad "$name $to: export: $(cat "$tmp/err")"; continue; }
    cmp -s "$tmp/emitted" "$tmp/exported" && ok || bad "$name $to: --emit and export differ"
    if [ "${AP_REGEN:-0}" = 1 ]; then
        cp "$tmp/exported" "$golden"
    fi
    diff -u "$golden" "$tmp/exported" >"$tmp/diff" && ok ||
        bad "$name $to: differs from $golden:$(cat "$tmp/diff")"
done <"$tmp/cases"

# The Megatron flags exported for a configuration, fed back through
# --megatron-args, price to the same prediction.
roundtrip() { # model gpus spec
    "$bin" estimate "$src/$1" --gpus "$2" --megatron "$3" -o "$tmp/rt.json" --json \
        >"$tmp/want" 2>/dev/null
    "$bin" export "$tmp/rt.json" --to megatron >"$tmp/args.sh"
    args=$(megatron_args "$tmp/args.sh")
    "$bin" estimate "$src/$1" --gpus "$2" --megatron-args "$args" --json >"$tmp/got" 2>"$tmp/err"
    grep -q '"step_time_s"' "$tmp/want" && cmp -s "$tmp/want" "$tmp/got" && ok ||
        bad "round trip of $3: $(cat "$tmp/err") $(diff "$tmp/want" "$tmp/got")"
}
roundtrip examples/gpt-1.3b.json 16 "tp=2,pp=2,vpp=2,sp=1,mbs=1,gbs=64"
roundtrip examples/hf/llama-3-8b.json 16 "tp=4,pp=2,sp=1,mbs=1,gbs=256,recompute=full"
roundtrip examples/hf/llama-3-8b.json 16 "tp=2,pp=1,mbs=2,gbs=128,recompute=selective,zero=0"
roundtrip examples/hf/llama-3-8b.json 16 "tp=2,pp=2,sp=1,mbs=1,gbs=128,overlap_grad=0"
roundtrip examples/gpt-1.3b.json 16 "tp=2,pp=4,sp=1,vpp=2,mbs=1,gbs=64,first=4,last=4"
roundtrip examples/hf/llama-3.1-405b.json 128 "tp=8,pp=16,sp=1,mbs=1,gbs=64,first=7,last=7"
grep -q -- "--decoder-first-pipeline-num-layers 7" "$tmp/args.sh" &&
    grep -q -- "--decoder-last-pipeline-num-layers 7" "$tmp/args.sh" &&
    grep -q -- "--overlap-grad-reduce" "$tmp/args.sh" && ok ||
    bad "first=7,last=7 exports the decoder first/last flags: $(cat "$tmp/args.sh")"
# Under vpp=8 the first and last stage's 7 layers do not divide into the
# chunks; the split counting the embedding and the loss as layers states it.
roundtrip examples/hf/llama-3.1-405b.json 128 \
    "tp=8,pp=16,sp=1,vpp=8,mbs=1,gbs=64,account_embedding=1,account_loss=1"
grep -q -- "--account-for-embedding-in-pipeline-split" "$tmp/args.sh" &&
    grep -q -- "--account-for-loss-in-pipeline-split" "$tmp/args.sh" &&
    grep -q -- "--num-virtual-stages-per-pipeline-rank 8" "$tmp/args.sh" &&
    ! grep -q -- "--decoder-first-pipeline-num-layers" "$tmp/args.sh" && ok ||
    bad "the counted split exports its Megatron flags: $(cat "$tmp/args.sh")"

# plan --emit: a searched plan exported directly; json is --json.
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 1 --global-batch 8 --quiet \
    --emit deepspeed >"$tmp/ds" 2>"$tmp/err"
[ $? -eq 0 ] && grep -q '"train_batch_size":.8,' "$tmp/ds" && ok ||
    bad "plan --emit deepspeed: $(cat "$tmp/err")"
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 1 --global-batch 8 --quiet \
    --emit json >"$tmp/a" 2>/dev/null
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 1 --global-batch 8 --quiet \
    --json >"$tmp/b" 2>/dev/null
grep -q autopar-plan/1 "$tmp/a" && cmp -s "$tmp/a" "$tmp/b" && ok || bad "--emit json is --json"
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 1 --emit yaml >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--emit takes" "$tmp/err" && ok || bad "--emit yaml is refused"

# Refusals: a sharding outside the pattern, the wrong model, a launcher
# that cannot express the plan.
"$bin" estimate "$src/examples/gpt-tiny.json" --gpus 4 --megatron "tp=2,pp=2,sp=1,mbs=1,gbs=8" \
    -o "$tmp/tiny.json" >/dev/null 2>&1
sed '0,/"sharding":\t"n@1"/s//"sharding":\t"d@1"/' "$tmp/tiny.json" >"$tmp/odd.json"
"$bin" export "$tmp/odd.json" --to megatron >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "odd.json: stage 0, op \"l0.q\"" "$tmp/err" &&
    grep -q "outside Megatron-LM's tensor-parallel pattern" "$tmp/err" && ok ||
    bad "an op outside the pattern is refused naming it: $(cat "$tmp/err")"
"$bin" export "$tmp/tiny.json" --to megatron --model "$src/examples/gpt-1.3b.json" \
    >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "model_shape.layers is 2 but the model" "$tmp/err" && ok ||
    bad "the wrong model is refused: $(cat "$tmp/err")"
"$bin" export "$tmp/tiny.json" --to deepspeed >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "DeepSpeed has no tensor parallelism" "$tmp/err" && ok ||
    bad "DeepSpeed refuses tensor parallelism: $(cat "$tmp/err")"
"$bin" export "$tmp/tiny.json" --to slurm >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "megatron, torchtitan or deepspeed" "$tmp/err" && ok ||
    bad "an unknown launcher is refused"

# DeepSeek-V3's experts (2,048 wide, not the dense layers' 18,432), its
# shared expert and its 3 dense layers, stated and read back.
roundtrip examples/hf/deepseek-v3.json 256 "tp=1,pp=8,ep=32,mbs=1,gbs=256,first=5,last=8"
grep -q -- "--moe-ffn-hidden-size 2048$" "$tmp/args.sh" &&
    grep -q -- "--moe-shared-expert-intermediate-size 2048$" "$tmp/args.sh" &&
    grep -qF -- "--moe-layer-freq [0]*3+[1]*58" "$tmp/args.sh" &&
    ! grep -q -- "--rotary-percent" "$tmp/args.sh" && ok ||
    bad "DeepSeek-V3's MoE layers in the export: $(grep moe "$tmp/args.sh")"

# The script splits $MEGATRON_ARGS unquoted, with globbing off: a file
# named 03+158 in the working directory, which the pattern [0]*3+[1]*58
# matches, leaves --moe-layer-freq as written (a torchrun of our own prints
# the words it is given).
mkdir "$tmp/run" "$tmp/path"
printf '#!/bin/sh\nprintf "%%s\\n" "$@"\n' >"$tmp/path/torchrun"
chmod +x "$tmp/path/torchrun"
: >"$tmp/run/03+158"
(cd "$tmp/run" && PATH="$tmp/path:$PATH" sh "$tmp/args.sh") >"$tmp/argv" 2>&1
grep -qxF -- "[0]*3+[1]*58" "$tmp/argv" && ! grep -qxF -- "03+158" "$tmp/argv" && ok ||
    bad "--moe-layer-freq survives a file its pattern matches: $(grep -A1 moe-layer-freq "$tmp/argv")"

# GPT-OSS's experts: quick GeGLU with the up projection offset by 1 and both
# halves clamped at swiglu_limit (7), which Megatron-Core's GLU runs only
# when told; the flags price the same step.
"$bin" plan "$src/examples/hf/gpt-oss-20b.json" --gpus 64 --target megatron --quiet \
    --emit megatron >"$tmp/oss.sh" 2>"$tmp/err"
grep -A2 -x -- "  --quick-geglu" "$tmp/oss.sh" | tr '\n' ' ' |
    grep -qxF -- "  --quick-geglu   --glu-linear-offset 1   --activation-func-clamp-value 7 " &&
    ok || bad "GPT-OSS's MLP flags: $(cat "$tmp/err") $(grep -e glu -e clamp "$tmp/oss.sh")"
"$bin" plan "$src/examples/hf/gpt-oss-20b.json" --gpus 64 --target megatron --quiet \
    --json >"$tmp/oss.want" 2>/dev/null
"$bin" estimate "$src/examples/hf/gpt-oss-20b.json" --gpus 64 \
    --megatron-args "$(megatron_args "$tmp/oss.sh")" --json >"$tmp/oss.got" 2>"$tmp/err"
step() { sed -n 's/.*"step_time_s":[^0-9]*\([0-9.e+-]*\).*/\1/p' "$1" | head -1; }
[ -n "$(step "$tmp/oss.want")" ] && [ "$(step "$tmp/oss.want")" = "$(step "$tmp/oss.got")" ] &&
    ok ||
    bad "GPT-OSS's exported flags price another step: $(cat "$tmp/err")"

# ZeRO-3 is Megatron-LM's --use-torch-fsdp2: the flags estimate prices as
# ZeRO-3 export as themselves, without the distributed optimizer (FSDP2
# asserts its absence, and CUDA_DEVICE_MAX_CONNECTIONS not 1), and price
# the same step back.
fsdp="--micro-batch-size 1 --global-batch-size 64 --use-torch-fsdp2 \
--no-gradient-accumulation-fusion --bf16 --seq-length 4096"
llama=$src/examples/hf/llama-3-8b.json
"$bin" estimate "$llama" --gpus 16 --megatron-args "$fsdp" --emit megatron >"$tmp/fsdp.sh" \
    2>"$tmp/err" && grep -qx -- "  --use-torch-fsdp2" "$tmp/fsdp.sh" &&
    grep -qx -- "  --no-gradient-accumulation-fusion" "$tmp/fsdp.sh" &&
    grep -qx "unset CUDA_DEVICE_MAX_CONNECTIONS" "$tmp/fsdp.sh" &&
    ! grep -q -e "--use-distributed-optimizer" -e "--overlap-" "$tmp/fsdp.sh" && ok ||
    bad "ZeRO-3 exports as --use-torch-fsdp2: $(cat "$tmp/err")"
"$bin" estimate "$llama" --gpus 16 --megatron-args "$fsdp" --json >"$tmp/want" 2>/dev/null
"$bin" estimate "$llama" --gpus 16 --megatron-args "$(megatron_args "$tmp/fsdp.sh")" --json \
    >"$tmp/got" 2>"$tmp/err"
grep -q '"step_time_s"' "$tmp/got" && cmp -s "$tmp/want" "$tmp/got" && ok ||
    bad "the FSDP2 flags round trip: $(cat "$tmp/err") $(diff "$tmp/want" "$tmp/got")"
# A pipeline is refused with the assert that stops Megatron-LM.
"$bin" estimate "$llama" --gpus 16 --megatron "tp=1,pp=2,mbs=1,gbs=64,zero=3,no_grad_fusion=1" \
    --emit megatron >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF '(--use-torch-fsdp2), which it asserts "is not supported with pipeline parallelism"; the plan uses pp=2' "$tmp/err" &&
    ok || bad "FSDP2 under a pipeline: $(cat "$tmp/err")"

# Mixtral at tp 2: each expert split over the two tensor-parallel ranks,
# as priced (Megatron-Core's expert tensor parallelism defaults to tp), so
# torchtitan is told its expert tensor parallel degree, whose default is 1.
"$bin" estimate "$src/examples/hf/mixtral-8x7b.json" --gpus 64 \
    --megatron "tp=2,pp=4,ep=8,sp=1,mbs=1,gbs=256" -o "$tmp/mx.json" >/dev/null 2>&1
"$bin" export "$tmp/mx.json" --to torchtitan >"$tmp/mx.sh" 2>"$tmp/err" &&
    grep -q -- "--parallelism.expert_parallel_degree 8$" "$tmp/mx.sh" &&
    grep -q -- "--parallelism.expert_tensor_parallel_degree 2$" "$tmp/mx.sh" && ok ||
    bad "Mixtral's torchtitan experts: $(cat "$tmp/err") $(grep expert "$tmp/mx.sh")"
# torchtitan takes the MoE structure from its flavor: the script says what
# to check it against, dense layers, shared experts and the router included
# (Mixtral's softmax over the top-k logits is MoEArgs' softmax renormalised;
# DeepSeek-V3 picks its 8 experts from 4 of 8 groups, MoEArgs'
# num_limited_groups and num_expert_groups).
grep -qF "# Its MoE flavor must match what the plan was priced with: 8 experts of FFN 14336, top 2, on every layer, no shared experts, router score_func \"softmax\", route_norm True, route_scale 1, score_before_experts False, no expert bias (load_balance_coeff None)." "$tmp/mx.sh" &&
    ok || bad "Mixtral's MoE flavor in the torchtitan export: $(grep flavor "$tmp/mx.sh")"
"$bin" estimate "$src/examples/hf/deepseek-v3.json" --gpus 256 \
    --megatron "tp=1,pp=8,ep=32,mbs=1,gbs=256,first=5,last=8" -o "$tmp/dsv3.json" >/dev/null 2>&1
"$bin" export "$tmp/dsv3.json" --to torchtitan >"$tmp/dsv3.sh" 2>"$tmp/err"
grep -qF '256 experts of FFN 2048, top 8, from 4 of 8 expert groups (num_limited_groups 4, num_expert_groups 8), on the layers --moe-layer-freq "[0]*3+[1]*58" marks, shared experts of FFN 2048 in all, router score_func "sigmoid", route_norm True, route_scale 2.5, score_before_experts False, with an expert bias (load_balance_coeff set).' "$tmp/dsv3.sh" &&
    ok || bad "DeepSeek-V3's MoE flavor in the torchtitan export: $(cat "$tmp/err") $(grep flavor "$tmp/dsv3.sh")"

# Qwen3's norms on queries and keys: --qk-layernorm, read back.
roundtrip examples/hf/qwen3-30b-a3b.json 16 "tp=1,pp=2,ep=8,mbs=1,gbs=64"
grep -q -- "--qk-layernorm$" "$tmp/args.sh" && ok ||
    bad "Qwen3's QK norms in the export: $(grep -c qk "$tmp/args.sh")"

# A plan says which dropout it was priced with, and the Megatron-LM export
# says it too (Megatron's default is 0.1); a plan.json from before the
# field is read, and exports the dropout of the model it reloads.
"$bin" plan "$src/examples/hf/llama-3-8b.json" --gpus 8 --target megatron --dropout on \
    -o "$tmp/drop.json" --quiet >/dev/null 2>&1
"$bin" export "$tmp/drop.json" --to megatron | grep -q -- "--hidden-dropout 0.1" && ok ||
    bad "a plan priced with dropout exports --hidden-dropout 0.1"
"$bin" plan "$src/examples/hf/llama-3-8b.json" --gpus 8 --target megatron \
    -o "$tmp/none.json" --quiet >/dev/null 2>&1
"$bin" export "$tmp/none.json" --to megatron | grep -q -- "--hidden-dropout 0$" && ok ||
    bad "a plan priced without dropout exports --hidden-dropout 0"
sed -e '/"hidden_dropout"/d' -e '/"attention_dropout"/d' -e '/"rope_/d' -e '/"norm_eps"/d' \
    -e 's/\("flash_attention":.*\),$/\1/' "$tmp/none.json" >"$tmp/old.json"
out=$("$bin" export "$tmp/old.json" --to megatron 2>&1)
echo "$out" | grep -q -- "--hidden-dropout 0$" && ok ||
    bad "a plan without the dropout fields exports the model's: $out"

# A plan records the sliding window it was priced with (Phi-3 mini: 2,047
# keys on every layer); exported against a model with another window it is
# refused, and against its own it states --window-size 2046,0.
"$bin" plan "$src/examples/hf/phi-3-mini-4k.json" --gpus 8 --target megatron \
    -o "$tmp/phi3.json" --quiet >/dev/null 2>&1
grep -q '"attention_window":	2047' "$tmp/phi3.json" && ok ||
    bad "plan.json records Phi-3's window"
"$bin" export "$tmp/phi3.json" --to megatron | grep -q -- "--window-size 2046,0" && ok ||
    bad "Phi-3's export states --window-size 2046,0"
sed 's/"sliding_window": 2047/"sliding_window": 1024/' \
    "$src/examples/hf/phi-3-mini-4k.json" >"$tmp/phi3-1k.json"
out=$("$bin" export "$tmp/phi3.json" --to megatron --model "$tmp/phi3-1k.json" 2>&1)
case "$out" in *"sliding window is 2047 keys"*"has 1024"*) ok ;;
    *) bad "a plan exported against another window is refused: $out" ;; esac

# A vision config's plan records the file, not its text_config, so the
# export loads the model again (Llama 4 Scout's language model).
"$bin" estimate "$src/examples/hf/llama-4-scout.json" --gpus 64 \
    --megatron "tp=4,sp=1,ep=16,mbs=1,gbs=64,recompute=full" -o "$tmp/scout.json" >/dev/null 2>&1
grep -q "\"model_path\":	\"$src/examples/hf/llama-4-scout.json\"" "$tmp/scout.json" && ok ||
    bad "plan.json records the vision config's file"
"$bin" export "$tmp/scout.json" --to megatron | grep -q -- "--no-rope-freq 4" && ok ||
    bad "a vision config's plan exports"

# A plan made for torchtitan exports to it: its sweep lists expert
# parallelism over all the data-parallel ranks only, as the export states
# it (Llama 4 Scout on 64 GPUs had picked ep = 2 of dp = 64, an expert mesh
# of its own the export refuses).
"$bin" plan "$src/examples/hf/llama-4-scout.json" --gpus 64 --target torchtitan \
    -o "$tmp/scout-titan.json" --quiet >/dev/null 2>&1 &&
    "$bin" export "$tmp/scout-titan.json" --to torchtitan >/dev/null 2>"$tmp/err" && ok ||
    bad "a plan for torchtitan exports to it: $(cat "$tmp/err")"

# Under a pipeline torchtitan's FSDP keeps the stage's weights and
# gradients unsharded through the step: ZeRO-3 with pp > 1 is refused, and
# its sweep prices ZeRO-1 there (Llama 3 70B on 64 GPUs had been priced at
# 59 GiB a GPU with ZeRO-3's per-micro-batch gathers).
"$bin" estimate "$src/examples/hf/llama-3-8b.json" --gpus 16 \
    --megatron "tp=4,pp=2,sp=1,mbs=1,gbs=256,zero=3,recompute=full" -o "$tmp/z3.json" >/dev/null 2>&1
"$bin" export "$tmp/z3.json" --to torchtitan >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "under a pipeline keeps each stage's weights and gradients unsharded" \
    "$tmp/err" && ok || bad "torchtitan takes ZeRO-3 under a pipeline: $(cat "$tmp/err")"
"$bin" plan "$src/examples/hf/llama-3-70b.json" --gpus 64 --target torchtitan \
    -o "$tmp/tt70.json" --quiet >/dev/null 2>&1 &&
    "$bin" export "$tmp/tt70.json" --to torchtitan >"$tmp/tt70.sh" 2>"$tmp/err" &&
    grep -q "pipeline_parallel_degree 2" "$tmp/tt70.sh" && grep -q "ZeRO-1 under a pipeline" \
    "$tmp/tt70.sh" && ok || bad "torchtitan's pipelined plan: $(cat "$tmp/err")"

# A launcher with no configuration says which rules leave none: 512
# sequences divide among no data-parallel size of 24 GPUs torchtitan takes.
"$bin" plan "$src/examples/hf/llama-3-8b.json" --gpus 24 --target torchtitan >/dev/null \
    2>"$tmp/err"
[ $? -eq 2 ] && grep -q "the global batch of 512 sequences must divide" "$tmp/err" && ok ||
    bad "no torchtitan configuration on 24 GPUs: $(cat "$tmp/err")"

# So does a plan made for DeepSpeed, whose config states no tensor
# parallelism (Llama 3 70B on 64 GPUs had picked tp = 2 with ZeRO-3).
"$bin" plan "$src/examples/hf/llama-3-70b.json" --gpus 64 --target deepspeed \
    -o "$tmp/ds70.json" --quiet >/dev/null 2>&1 &&
    "$bin" export "$tmp/ds70.json" --to deepspeed >"$tmp/ds70.cfg" 2>"$tmp/err" && ok ||
    bad "a plan for DeepSpeed exports to it: $(cat "$tmp/err")"
# Its ZeRO-3 plan has no pipeline: no pipeline section, which only a
# PipelineModule reads and whose engine refuses ZeRO-2 and 3.
grep -q '"stage":	3' "$tmp/ds70.cfg" && ! grep -q '"pipeline"' "$tmp/ds70.cfg" && ok ||
    bad "DeepSpeed's ZeRO-3 config without a pipeline: $(cat "$tmp/ds70.cfg")"

finish
