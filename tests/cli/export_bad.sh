#!/bin/sh
# Every plan in tests/data/bad/plan/*.json must be refused by `autopar export`
# with exit code 2 and a message that names the file and contains the text
# in its .expect sidecar (the JSON path of the mistake and what is wrong).
set -u
autopar=$1
src=$2
failed=0
checked=0

expect_refusal() { # file, expected substring, launcher
    out=$("$autopar" export "$1" --to "$3" 2>&1 >/dev/null)
    rc=$?
    checked=$((checked + 1))
    if [ "$rc" -ne 2 ]; then
        echo "FAIL $1: exit $rc, expected 2 ($out)"
        failed=$((failed + 1))
        return
    fi
    case "$out" in
    *"$1"*"$2"*) ;;
    *)
        echo "FAIL $1: message does not name the file and contain '$2':"
        echo "  $out"
        failed=$((failed + 1))
        ;;
    esac
}

for f in "$src"/tests/data/bad/plan/*.json; do
    expect_refusal "$f" "$(cat "${f%.json}.expect")" megatron
done
expect_refusal "$src/tests/data/bad/plan/missing.json" "cannot open" torchtitan

if [ "$checked" -lt 30 ]; then
    echo "FAIL: only $checked bad plans checked"
    failed=$((failed + 1))
fi
echo "$checked bad plans checked, $failed failed"
[ "$failed" -eq 0 ]
