#!/bin/sh
# autopar plan: a plan for the tiny model, its JSON, and clean refusals.
set -u
. "$(dirname "$0")/lib.sh"

"$bin" plan "$src/examples/gpt-tiny.json" --gpus 4 --global-batch 16 --quiet \
    -o "$tmp/plan.json" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "plan exits 0: $(cat "$tmp/err")"
grep -q "predicted step" "$tmp/out" && ok || bad "summary names the predicted step"
# A step well under a millisecond still shows its digits, not 0.000 s.
grep -Eq "predicted step 0\.000[1-9][0-9]{2} s" "$tmp/out" && ok ||
    bad "a short step in three significant digits: $(grep 'predicted step' "$tmp/out")"
# So do the breakdown's parts, and memory under 0.05 GiB reads in MiB, the
# tiny model's few megabytes never as 0.0 GiB.
grep -Eq "breakdown: compute 0\.000[1-9][0-9]{2} s" "$tmp/out" && ok ||
    bad "the breakdown in the step's digits: $(grep 'breakdown' "$tmp/out")"
grep -Eq "memory per GPU [1-9][0-9]*\.[0-9] MiB of [0-9.]+ GiB usable \(gradients [0-9]\.[0-9] MiB" "$tmp/out" &&
    ! grep -q "0\.0 GiB" "$tmp/out" && ok ||
    bad "small memory in MiB: $(grep 'memory' "$tmp/out")"
grep -q '"format":.*"autopar-plan/1"' "$tmp/plan.json" && ok || bad "plan.json has its format"
grep -q '"step_time_s":' "$tmp/plan.json" && ok || bad "plan.json has the prediction"

"$bin" plan "$src/examples/gpt-tiny.json" --gpus 4 --global-batch 16 --quiet \
    --json >"$tmp/again.json" 2>/dev/null
cmp -s "$tmp/plan.json" "$tmp/again.json" && ok || bad "same input, same bytes"

# Threads share the candidates out; the winner must not depend on how.
for t in 1 2 3; do
    "$bin" plan "$src/examples/gpt-1.3b.json" --gpus 16 --global-batch 64 --quiet \
        --threads $t --json >"$tmp/threads$t.json" 2>"$tmp/err" ||
        bad "plan with --threads $t: $(cat "$tmp/err")"
done
cmp -s "$tmp/threads1.json" "$tmp/threads2.json" &&
    cmp -s "$tmp/threads1.json" "$tmp/threads3.json" && ok ||
    bad "--threads 1, 2 and 3 give the same bytes"

"$bin" plan "$src/examples/gpt-tiny.json" --gpus 0 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--gpus" "$tmp/err" && ok || bad "--gpus 0 is refused naming the flag"

"$bin" plan "$src/tests/data/bad/model_cycle.json" --gpus 4 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "model_cycle.json" "$tmp/err" && ok || bad "a bad model is refused naming the file"

"$bin" plan "$src/examples/gpt-tiny.json" --gpus 4 --cluster nosuch >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && ok || bad "an unknown cluster is refused"

"$bin" plan "$src/examples/hf/llama-3-70b.json" --gpus 1 --global-batch 8 --quiet \
    >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "does not fit" "$tmp/err" && grep -q "GiB" "$tmp/err" && ok ||
    bad "a model that cannot fit says by how much: $(cat "$tmp/err")"

# DeepSeek-V3's 671 B parameters at 16 bytes each are 9,999 GiB of model
# states: 156 GiB a GPU even over all 64, so no plan can fit, and the
# planner says so before searching, with the least GPU count that could.
"$bin" plan "$src/examples/hf/deepseek-v3.json" --gpus 64 --quiet >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] &&
    grep -q "autopar plan: deepseek-v3.json does not fit on 64 GPUs: its 6.71e+11 parameters hold 9999.1 GiB of weights, gradients and optimizer states (16 bytes each), sharded over all 64 GPUs, 156.2 GiB per GPU, more than the 74.7 GiB usable; it needs at least 134 GPUs" "$tmp/err" &&
    ok || bad "model states alone over HBM: $(cat "$tmp/err")"

# Out of ILP time is the user's limit, not a crash: the configurations left
# unsolved are counted, and with none solved the message says what to raise.
# The warning stands where Megatron-LM's fastest configuration is the plan.
"$bin" plan "$src/examples/gpt-tiny.json" --gpus 4 --global-batch 16 --quiet \
    --ilp-time-limit 0.001 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "raise --ilp-time-limit" "$tmp/err" && ok ||
    bad "no ILP solved in time: exit 2 saying to raise the limit: $(cat "$tmp/err")"
"$bin" plan "$src/examples/gpt-1.3b.json" --gpus 8 --global-batch 64 --quiet \
    --ilp-time-limit 0.001 -o "$tmp/partial.json" >/dev/null 2>"$tmp/err"
[ $? -eq 0 ] && grep -q "configurations were left out" "$tmp/err" &&
    grep -q '"timeouts":' "$tmp/partial.json" && ok ||
    bad "some ILPs out of time: a plan, a warning and solver.timeouts: $(cat "$tmp/err")"

# The plan is the faster of the search's and the fastest Megatron-LM
# configuration. gpt-1.3b on 16 GPUs at 8 sequences: tp 2 over 8
# data-parallel replicas, a mesh the search has not; its first line says
# so, its plan.json is that configuration's own (estimate's, byte for
# byte), and --no-sweep gives the search's slower plan.
"$bin" plan "$src/examples/gpt-1.3b.json" --gpus 16 --global-batch 8 --quiet \
    -o "$tmp/best.json" >"$tmp/best.txt" 2>"$tmp/err" || bad "plan: $(cat "$tmp/err")"
spec=$(sed -n '1s/^Megatron-LM configuration \([^:]*\): the fastest of .* faster than the search.s plan .*/\1/p' "$tmp/best.txt")
case "$spec" in tp=2,pp=1,dp=8,*) ok ;; *) bad "the sweep's configuration heads the plan: $(head -1 "$tmp/best.txt")" ;; esac
"$bin" estimate "$src/examples/gpt-1.3b.json" --gpus 16 --megatron "$spec" \
    -o "$tmp/est.json" >/dev/null 2>"$tmp/err" || bad "estimate $spec: $(cat "$tmp/err")"
cmp -s "$tmp/best.json" "$tmp/est.json" && ok || bad "the plan is not the configuration's own"
"$bin" plan "$src/examples/gpt-1.3b.json" --gpus 16 --global-batch 8 --quiet --no-sweep \
    -o "$tmp/search.json" >"$tmp/search.txt" 2>&1 || bad "plan --no-sweep: $(cat "$tmp/search.txt")"
step() { sed -n 's/.*"step_time_s":[[:space:]]*\([0-9.e+-]*\).*/\1/p' "$1" | head -1; }
awk -v a="$(step "$tmp/best.json")" -v b="$(step "$tmp/search.json")" 'BEGIN { exit !(a < b) }' &&
    ! grep -q "Megatron-LM configuration" "$tmp/search.txt" && ok ||
    bad "--no-sweep: the search's plan, slower: $(step "$tmp/best.json") against $(step "$tmp/search.json")"


# A layer class whose attention has a sliding window says so (Gemma 2 at
# 8,192 tokens: every other layer at 4,096 keys).
"$bin" plan "$src/examples/hf/gemma-2-9b.json" --gpus 8 --seq 8192 >"$tmp/g2.txt" 2>&1 &&
    grep -q "layer class 0 (21 layers like layer 0, window 4096):" "$tmp/g2.txt" &&
    grep -q "layer class 1 (21 layers like layer 1):" "$tmp/g2.txt" && ok ||
    bad "Gemma 2's classes: $(grep 'layer class' "$tmp/g2.txt")"

# A plan for a launcher whose flags cannot state the model (Gemma 2's
# post-norms under Megatron-LM) says so at once; one they state does not.
"$bin" plan "$src/examples/hf/gemma-2-9b.json" --gpus 16 --target megatron --quiet \
    >/dev/null 2>"$tmp/err" && grep -q "note: \`autopar export --to megatron\` will refuse \
it: this plan: Megatron-LM's layers norm the inputs" "$tmp/err" && ok ||
    bad "a Gemma 2 plan for Megatron-LM warns of its export: $(cat "$tmp/err")"
"$bin" plan "$src/examples/hf/phi-3-mini-4k.json" --gpus 8 --target megatron --quiet \
    >/dev/null 2>"$tmp/err" && ! grep -q "note:" "$tmp/err" && ok ||
    bad "a Phi-3 plan for Megatron-LM exports: $(cat "$tmp/err")"


# A plan on one GPU has no data-parallel replicas, so ZeRO shards nothing:
# the report says ZeRO-0 runs, as its first line's Megatron-LM
# configuration (zero=0) and the Megatron-LM export say, and names its GPU
# as GPU 0.
"$bin" plan "$src/examples/gpt-1.3b.json" --gpus 1 --quiet >"$tmp/one" 2>&1
grep -q "^plan for gpt-1.3b on 1 GPU (h100-sxm, 1 per node)$" "$tmp/one" &&
    grep -q "; 1f1b; ZeRO-0 (each stage on one GPU: no data-parallel replicas for ZeRO-1 to shard over)$" "$tmp/one" &&
    grep -q "^  stage 0: layers 0-23 +embedding +head  GPU 0  mesh 1x1  " "$tmp/one" &&
    ! grep -q "GPUs 0-0" "$tmp/one" && ok || bad "a 1-GPU plan's report: $(head -5 "$tmp/one")"

# Llama 3 70B's model states (1051.3 GiB) need 15 H100s before any
# activation, and 15 GPUs do not fill nodes of 8: the bound names the 16
# that --gpus takes, and 15 is refused naming 8 and 16.
"$bin" plan "$src/examples/hf/llama-3-70b.json" --gpus 8 --quiet >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "it needs at least 15 GPUs before activations are counted, 16 in whole nodes of 8$" "$tmp/err" &&
    ok || bad "the lower bound in whole nodes: $(cat "$tmp/err")"
"$bin" plan "$src/examples/hf/llama-3-70b.json" --gpus 15 --quiet >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "15 GPUs do not fill whole nodes of 8 GPUs: use 8 or 16 GPUs, or give the size of your nodes (--gpus-per-node)$" "$tmp/err" &&
    ok || bad "15 GPUs on nodes of 8: $(cat "$tmp/err")"
# On nodes of 4 the same bound is 16 too. Llama 3 8B's states (119.7 GiB)
# need 2 GPUs, a count --gpus takes as it is: nothing is added.
"$bin" plan "$src/examples/hf/llama-3-70b.json" --gpus 8 --gpus-per-node 4 --quiet >/dev/null 2>"$tmp/err"
grep -q "15 GPUs before activations are counted, 16 in whole nodes of 4$" "$tmp/err" && ok ||
    bad "the bound on nodes of 4: $(cat "$tmp/err")"
"$bin" plan "$src/examples/hf/llama-3-8b.json" --gpus 1 --quiet >/dev/null 2>"$tmp/err"
grep -q "it needs at least 2 GPUs before activations are counted$" "$tmp/err" && ok ||
    bad "a bound that needs no whole nodes: $(cat "$tmp/err")"

# Llama 3 70B at 131,072 tokens on 16 GPUs needs 82.0 GiB at its leanest,
# a micro-batch of one sequence on one stage: a smaller --global-batch
# changes nothing (16 and 1 need the same), and the message says so rather
# than suggesting it.
for gb in 16 1; do
    "$bin" plan "$src/examples/hf/llama-3-70b.json" --gpus 16 --seq 131072 --global-batch $gb \
        --quiet >/dev/null 2>"$tmp/err$gb"
done
grep -q "stage 0 of 1 (layers 0-79 on 16 GPUs) needs 82.0 GiB per GPU, 7.3 GiB more than the 74.7 GiB usable; it runs micro-batches of one sequence there (1 in flight), which a smaller --global-batch does not change: try more GPUs or a shorter --seq$" "$tmp/err16" &&
    ! grep -q "try more GPUs, a smaller --global-batch" "$tmp/err16" &&
    [ "$(sed 's/--global-batch [0-9]*//' "$tmp/err16")" = "$(sed 's/--global-batch [0-9]*//' "$tmp/err1")" ] &&
    ok || bad "no smaller --global-batch where it changes nothing: $(cat "$tmp/err16")"

finish
