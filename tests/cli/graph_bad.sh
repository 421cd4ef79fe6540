#!/bin/sh
# Every model in tests/data/bad/model_*.json must be refused with exit code 2
# and a message that names the file and contains the text in its .expect
# sidecar (the JSON path of the mistake). A file over the size limit is made
# here rather than committed.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/refusal.inc"

for f in "$src"/tests/data/bad/model_*.json; do
    expect_refusal "$f" "$(cat "${f%.json}.expect")" graph "$f"
done

# One byte over AP_MAX_FILE_BYTES (64 MiB), as a sparse file.
dd if=/dev/null of="$tmp/huge.json" bs=1 seek=67108865 2>/dev/null
expect_refusal "$tmp/huge.json" "over the limit of 64 MiB" graph "$tmp/huge.json"
expect_refusal "$tmp/missing.json" "cannot open" graph "$tmp/missing.json"
expect_refusal "$tmp" "not a regular file" graph "$tmp"

[ "$checked" -ge 40 ] || bad "only $checked bad models checked"
finish
