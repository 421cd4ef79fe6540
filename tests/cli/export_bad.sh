#!/bin/sh
# Every plan in tests/data/bad/plan/*.json must be refused by `autopar export`
# with exit code 2 and a message that names the file and contains the text
# in its .expect sidecar (the JSON path of the mistake and what is wrong).
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/refusal.inc"

for f in "$src"/tests/data/bad/plan/*.json; do
    expect_refusal "$f" "$(cat "${f%.json}.expect")" export "$f" --to megatron
done
missing="$src/tests/data/bad/plan/missing.json"
expect_refusal "$missing" "cannot open" export "$missing" --to torchtitan

[ "$checked" -ge 30 ] || bad "only $checked bad plans checked"
finish
