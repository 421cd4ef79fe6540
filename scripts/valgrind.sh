#!/bin/sh
# Valgrind memcheck over the unit tests and the end-to-end CLI commands
# (graph, estimate, plan on small models). Any leak, invalid access or use
# of uninitialised memory fails the run. A plain build (no sanitizers, which
# do not mix with valgrind) goes to $AP_VALGRIND_BUILD (build-valgrind),
# without the CUDA profiler: the CUDA, NCCL and MPI libraries it links
# report errors of their own at load time (dlopen inside ld.so), and no
# command checked here uses them.
#
# usage: scripts/valgrind.sh
set -eu
cd "$(dirname "$0")/.."
build=${AP_VALGRIND_BUILD:-build-valgrind}
command -v valgrind >/dev/null || {
    echo "valgrind.sh: valgrind is needed (apt-get install valgrind)" >&2
    exit 2
}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAP_WERROR=ON \
    -DAP_PROFILER=OFF >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" >/dev/null

log=$build/valgrind.log
: >"$log"
failed=0
vg() { # command...
    # --errors-for-leak-kinds=definite,indirect,possible: a leak fails; memory
    # still reachable at exit (glibc, GLPK's environment) does not.
    if valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible \
        --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
        --track-origins=yes "$@" >>"$log" 2>&1; then
        echo "valgrind.sh: clean: $*"
    else
        rc=$?
        # 99 is a memcheck error; other codes are the command's own, which
        # the refusals below expect (2).
        if [ $rc -eq 99 ]; then
            echo "valgrind.sh: ERRORS: $*" >&2
            failed=$((failed + 1))
        else
            echo "valgrind.sh: clean (exit $rc): $*"
        fi
    fi
}

export AP_SRC="$PWD"
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *test_profiler) continue ;; esac # needs a GPU to do anything
    vg "$t"
done

bin=$build/autopar
vg "$bin" graph examples/gpt-tiny.json
vg "$bin" graph examples/gpt-1.3b.json --json
vg "$bin" graph examples/hf/llama-3-8b.json
vg "$bin" graph examples/hf/mixtral-8x7b.json --seq 1024
vg "$bin" graph examples/gpt-tiny.json -o "$build/vg-tiny.json"
vg "$bin" estimate examples/hf/llama-3-8b.json --gpus 16 --megatron tp=2,pp=2,gbs=256
vg "$bin" estimate examples/gpt-1.3b.json --gpus 8 --json --megatron-args \
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 6 --global-batch-size 64"
vg "$bin" plan examples/gpt-tiny.json --gpus 4 --global-batch 16 --quiet -o "$build/vg-plan.json"
vg "$bin" plan examples/gpt-1.3b.json --gpus 8 --global-batch 64 --cluster examples/clusters/synthetic-measured.json --quiet
vg "$bin" plan tests/data/bad/model_cycle.json --gpus 4
vg "$bin" plan examples/hf/llama-3-70b.json --gpus 1 --global-batch 8 --quiet
vg "$bin" estimate examples/hf/llama-3-8b.json --gpus 16 --megatron tp=3
# A script without MODEL (its model built from the flags; a comment, a
# YAML key and a torchrun prefix as users paste them), with bf16 edges.
vg "$bin" estimate --megatron-args "torchrun --nproc-per-node 4 pretrain_gpt.py
    --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024
    --max-position-embeddings 1024 --swiglu: true # --pipeline-model-parallel-size 2
    --tensor-model-parallel-size=2 --sequence-parallel --micro-batch-size 1
    --global-batch-size 8 --bf16 --fp8-format hybrid --fp8-recipe tensorwise
    --first-last-layers-bf16 --use-distributed-optimizer"

if [ $failed -ne 0 ]; then
    echo "valgrind.sh: $failed command(s) with memcheck errors; see $log" >&2
    exit 1
fi
echo "valgrind.sh: all clean"
