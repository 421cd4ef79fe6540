#!/bin/sh
# Builds the libFuzzer harnesses with clang (ASan + UBSan) and runs each for
# SECONDS (default 60) from its committed corpus in fuzz/corpus/<target>/.
# New inputs the fuzzer finds go to a scratch corpus, never into the tree;
# a crash, leak, sanitizer report or slow input stops the run and leaves the
# input in $AP_FUZZ_DIR (default build-fuzz/findings) to turn into a test.
#
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: model hf cluster megatron plan)
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-model hf cluster megatron plan}
build=${AP_FUZZ_BUILD:-build-fuzz}
out=${AP_FUZZ_DIR:-$build/findings}

command -v clang >/dev/null || { echo "fuzz.sh: clang is needed" >&2; exit 2; }
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DAP_FUZZ=ON -DAP_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
for t in $targets; do
    cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target "fuzz_$t" >/dev/null
done

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$out"
status=0
for t in $targets; do
    scratch="$build/corpus-$t"
    mkdir -p "$scratch"
    echo "fuzz.sh: fuzz_$t for ${secs}s"
    # -timeout: one input may take at most 5 s (loading is bounded);
    # -rss_limit_mb: nor more than 2 GiB.
    if ! "$build/fuzz/fuzz_$t" "$scratch" "fuzz/corpus/$t" \
        -dict="fuzz/$t.dict" -max_total_time="$secs" -timeout=5 \
        -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
        -artifact_prefix="$out/$t-" 2>"$out/$t.log"; then
        echo "fuzz.sh: fuzz_$t FAILED; see $out/$t.log and $out/$t-*" >&2
        tail -40 "$out/$t.log" >&2
        status=1
    else
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/$t.log" |
            sed "s/^/fuzz.sh: fuzz_$t /"
    fi
done
exit $status
