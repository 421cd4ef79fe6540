# lib.sh -- sourced by every CLI test script, first thing after `set -u`:
#
#     . "$(dirname "$0")/lib.sh"
#
# CTest runs each script as `sh script.sh /path/to/autopar /path/to/source-root`
# (tests/CMakeLists.txt, which keeps this file out of the tests). A sourced
# file sees the script's arguments, so this names them $bin and $src, makes a
# temporary directory $tmp that is removed however the script exits, and
# keeps the counts: `ok` after a check that held, `bad WHAT` after one that
# did not, and `finish` as the script's last line, whose status is the
# script's verdict.
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass=0

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fail=$((fail + 1)); }

# The flags of a Megatron-LM export (`autopar export --to megatron`): the
# lines of its MEGATRON_ARGS block, on one line, ready for --megatron-args.
megatron_args() {
    sed -n '/^MEGATRON_ARGS="$/,/^"$/p' "$1" | grep '^  --' | tr '\n' ' '
}

finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
