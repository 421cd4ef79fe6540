#!/bin/sh
# Sets what bench/gpu/kernels.py measured beside autopar's price of the same
# kernels (bench/kernel_prices), name by name:
#
#   sh bench/gpu/compare_kernels.sh build/bench/kernel_prices LOG... [-- CLUSTER]
#
# Columns: the measurement, autopar's price at the kernel figures and at
# the training-step rate, and measured / kernel price (for rates, the
# inverse, so that above 1 always means the kernel took longer than priced).
set -u
if [ $# -lt 2 ]; then
    echo "usage: sh bench/gpu/compare_kernels.sh path/to/kernel_prices LOG... [-- CLUSTER]" >&2
    exit 2
fi
prices=$1
shift
logs=""
cluster=h100-sxm
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then
        cluster=${2:-h100-sxm}
        break
    fi
    logs="$logs $1"
    shift
done
tmp=$(mktemp) || exit 2
"$prices" "$cluster" >"$tmp" || { rm -f "$tmp"; exit 2; }
# shellcheck disable=SC2086
cat $logs | awk -v P="$tmp" '
    BEGIN {
        while ((getline line < P) > 0) {
            split(line, f, " ")
            kernel[f[1]] = f[2]; step[f[1]] = f[3]
        }
        printf "%-44s %10s %10s %10s %7s %s\n", "kernel", "measured", "kernel", "step", "ratio", "unit"
    }
    {
        name = $1
        sub(/^attention\.cudnn\./, "attention.", name)
        if (!(name in kernel) || $2 + 0 <= 0) next
        r = ($3 == "TFLOP/s") ? kernel[name] / $2 : $2 / kernel[name]
        printf "%-44s %10.2f %10.2f %10.2f %7.2f %s\n", $1, $2, kernel[name], step[name], r, $3
    }'
rc=$?
rm -f "$tmp"
exit $rc
