#!/bin/sh
# Writes a model of n layers, each one op, for the bounds test and the
# scaling benchmark:
#   sh scripts/chain-model.sh N DISTINCT FILE
# A matmul, then a chain of N gelu ops, each its own layer; with DISTINCT=1
# each is a dropout with its own probability, so no two layers share a
# class.
set -eu
[ $# -eq 3 ] || { echo "usage: chain-model.sh N DISTINCT FILE" >&2; exit 2; }
awk -v n="$1" -v distinct="$2" 'BEGIN {
    printf "{\"format\":\"autopar-model/1\",\"name\":\"chain\",\"dims\":{"
    printf "\"b\":{\"kind\":\"batch\",\"size\":2},\"s\":{\"kind\":\"seq\",\"size\":4},"
    printf "\"h\":{\"kind\":\"hidden\",\"size\":8},"
    printf "\"g\":{\"kind\":\"other\",\"size\":8}},"
    printf "\"tensors\":[{\"name\":\"x\",\"shape\":\"bsh\",\"role\":\"input\"},"
    printf "{\"name\":\"w\",\"shape\":\"hg\",\"role\":\"parameter\"}"
    for (i = 0; i <= n; i++)
        printf ",{\"name\":\"t%d\",\"shape\":\"bsg\",\"role\":\"activation\"}", i
    printf "],\"ops\":[{\"name\":\"in\",\"kind\":\"matmul\",\"inputs\":[\"x\",\"w\"],\"outputs\":[\"t0\"]}"
    for (i = 0; i < n; i++)
        if (distinct)
            printf ",{\"name\":\"o%d\",\"kind\":\"dropout\",\"p\":%.9f,\"layer\":%d,\"inputs\":[\"t%d\"],\"outputs\":[\"t%d\"]}", i, i / (2.0 * n), i, i, i + 1
        else
            printf ",{\"name\":\"o%d\",\"kind\":\"gelu\",\"layer\":%d,\"inputs\":[\"t%d\"],\"outputs\":[\"t%d\"]}", i, i, i, i + 1
    printf "]}\n"
}' >"$3"
