#!/bin/sh
# Every plan in tests/data/bad/plan/*.json must be refused by `autopar export`
# with exit code 2 and a message that names the file and contains the text
# in its .expect sidecar (the JSON path of the mistake and what is wrong).
set -u
autopar=$1
src=$2
. "$src/tests/cli/refusal.inc"

for f in "$src"/tests/data/bad/plan/*.json; do
    expect_refusal "$f" "$(cat "${f%.json}.expect")" export "$f" --to megatron
done
missing="$src/tests/data/bad/plan/missing.json"
expect_refusal "$missing" "cannot open" export "$missing" --to torchtitan

if [ "$checked" -lt 30 ]; then
    echo "FAIL: only $checked bad plans checked"
    failed=$((failed + 1))
fi
echo "$checked bad plans checked, $failed failed"
[ "$failed" -eq 0 ]
