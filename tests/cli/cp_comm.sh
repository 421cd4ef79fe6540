#!/bin/sh
# Context parallelism's communication type from the command line: the spec
# key cp_comm and --cp-comm-type price the same step; a2a with heads cp
# does not divide, a list mixing types and a2a+p2p exit 2 naming the flag;
# plan.json carries cp_comm_type (only where not p2p), reads back, and
# exports to Megatron-LM as --cp-comm-type, whose flags price the same step
# again; torchtitan refuses it, and runs a p2p plan with its alltoall
# rotate method.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/hf/llama-3-8b.json

spec="tp=2,pp=1,cp=2,mbs=1,gbs=16,sp=1,zero=1"
flags="--tensor-model-parallel-size 2 --context-parallel-size 2 --micro-batch-size 1
 --global-batch-size 16 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce
 --overlap-param-gather"
est() { "$bin" estimate "$model" --gpus 8 --seq 8192 --json "$@"; }

for t in allgather a2a; do
    est --megatron "$spec,cp_comm=$t" >"$tmp/spec" 2>&1 || bad "$t: $(cat "$tmp/spec")"
    est --megatron-args "$flags --cp-comm-type $t" >"$tmp/flag" 2>&1
    cmp -s "$tmp/spec" "$tmp/flag" && ok || bad "--cp-comm-type $t: $(diff "$tmp/spec" "$tmp/flag")"
    est --megatron-args "$flags --cp-comm-type $t $t $t" >"$tmp/flag" 2>&1
    cmp -s "$tmp/spec" "$tmp/flag" && ok || bad "--cp-comm-type $t per layer"
done
est --megatron "$spec" >"$tmp/p2p" 2>&1 || bad "p2p: $(cat "$tmp/p2p")"
est --megatron "$spec,cp_comm=p2p" >"$tmp/got" 2>&1
cmp -s "$tmp/p2p" "$tmp/got" && ok || bad "cp_comm=p2p is the default"

refused() { # message how...
    want=$1
    shift
    out=$("$@" 2>&1)
    [ $? -eq 2 ] && case "$out" in *"$want"*) true ;; *) false ;; esac && ok || bad "$*: $out"
}
refused "cp_comm=a2a (--cp-comm-type a2a): cp=2 does not divide the 8/8 = 1 KV heads" \
    "$bin" estimate "$model" --gpus 16 --seq 8192 --megatron "tp=8,cp=2,mbs=1,gbs=8,sp=1,cp_comm=a2a"
refused "cp_comm=a2a (--cp-comm-type a2a): cp=2 does not divide" \
    "$bin" estimate "$model" --gpus 16 --seq 8192 --megatron-args \
    "--tensor-model-parallel-size 8 --context-parallel-size 2 --sequence-parallel --cp-comm-type a2a"
refused "--cp-comm-type p2p ... allgather: autopar prices one communication type" \
    est --megatron-args "$flags --cp-comm-type p2p allgather"
refused "--cp-comm-type a2a+p2p: Transformer Engine's hierarchical" \
    est --megatron-args "$flags --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 1"
refused "cp_comm: bad value \"ring\" (p2p, allgather or a2a)" est --megatron "$spec,cp_comm=ring"

# plan.json: the field only where not p2p; the Megatron export states it and
# its flags price the plan's step again.
est --megatron "$spec" -o "$tmp/plan0.json" >/dev/null 2>&1
grep -q cp_comm_type "$tmp/plan0.json" && bad "p2p plan.json has cp_comm_type" || ok
for t in allgather a2a; do
    est --megatron "$spec,cp_comm=$t" -o "$tmp/plan.json" >"$tmp/want" 2>&1
    grep -q "^	\"cp_comm_type\":	\"$t\"" "$tmp/plan.json" && ok || bad "$t: plan.json field"
    "$bin" export "$tmp/plan.json" --to megatron >"$tmp/args.sh" 2>&1
    grep -q -- "^  --cp-comm-type $t$" "$tmp/args.sh" && ok || bad "$t export: $(cat "$tmp/args.sh")"
    args=$(megatron_args "$tmp/args.sh")
    est --megatron-args "$args" >"$tmp/got" 2>&1
    cmp -s "$tmp/want" "$tmp/got" && ok || bad "$t round trip: $(diff "$tmp/want" "$tmp/got")"
    refused "cp_comm=p2p" "$bin" export "$tmp/plan.json" --to torchtitan
done
"$bin" export "$tmp/plan0.json" --to megatron | grep -q -- "--cp-comm-type" &&
    bad "p2p export states --cp-comm-type" || ok
# torchtitan runs the p2p ring as its alltoall rotate method (its default,
# allgather, gathers every shard at once), so a cp plan asks for it.
"$bin" export "$tmp/plan0.json" --to torchtitan >"$tmp/titan.sh" 2>&1
grep -q -- "^  --parallelism.context_parallel_rotate_method alltoall$" "$tmp/titan.sh" && ok ||
    bad "torchtitan export names the ring's rotate method: $(cat "$tmp/titan.sh")"
finish
