#!/bin/sh
# More GPUs than the batch and the model's widths divide among: gpt-tiny's
# batch of 512 on 1,000 GPUs leaves a mesh axis of 125 splitting nothing,
# so those GPUs repeat one another's work. The plan is still the fastest
# found, and the report says so with a caveat naming the axis and the GPUs
# a plan needs for the same step, which a plan on that many prices exactly
# the same. A plan that uses its GPUs carries no such caveat. An axis that
# splits only the embedding (a batch of 8 on 64 GPUs: 16 GPUs along it)
# still repeats every layer, and is told as such.
set -u
. "$(dirname "$0")/lib.sh"
tiny=$src/examples/gpt-tiny.json
step() { grep '"step_time_s"' "$1" | head -1 | sed 's/.*"step_time_s": *//' | tr -dc '0-9.e+-'; }

"$bin" plan "$tiny" --gpus 1000 --no-sweep >"$tmp/report" 2>&1 || bad "plan on 1000: $(cat "$tmp/report")"
grep -q "caveat: stage 0's mesh axis 0 (125 GPUs) splits none of its ops" "$tmp/report" &&
    grep -q "a plan on 8 GPUs prices no slower (autopar plan --gpus 8)" "$tmp/report" && ok ||
    bad "no idle-axis caveat: $(grep caveat "$tmp/report")"
"$bin" plan "$tiny" --gpus 1000 --no-sweep --json >"$tmp/1000.json" 2>&1 || bad "--json on 1000"
grep -q '"caveats":.*mesh axis 0 (125 GPUs)' "$tmp/1000.json" && ok || bad "--json lacks the caveat"
"$bin" plan "$tiny" --gpus 8 --no-sweep --json >"$tmp/8.json" 2>&1 || bad "--json on 8"
[ "$(step "$tmp/1000.json")" = "$(step "$tmp/8.json")" ] && ok ||
    bad "8 GPUs price $(step "$tmp/8.json") s, 1000 price $(step "$tmp/1000.json") s"
grep -q "splits none of its ops" "$tmp/8.json" && bad "8 GPUs carry the caveat" || ok

"$bin" plan "$tiny" --gpus 64 --global-batch 8 --json >"$tmp/64.json" 2>&1 || bad "plan on 64"
grep -q "mesh axis 0 (16 GPUs) splits none of its layers' ops, only some before or after them" "$tmp/64.json" &&
    grep -q "a plan on 4 GPUs prices nearly the same (autopar plan --gpus 4)" "$tmp/64.json" && ok ||
    bad "no caveat for the axis splitting the embedding alone: $(grep -o '"caveats".*' "$tmp/64.json")"
"$bin" plan "$tiny" --gpus 4 --global-batch 8 --json >"$tmp/4.json" 2>&1 || bad "plan on 4"
grep -q "splits none of its" "$tmp/4.json" && bad "4 GPUs carry the caveat" || ok
awk -v a="$(step "$tmp/4.json")" -v b="$(step "$tmp/64.json")" \
    'BEGIN { exit !(a < 1.05 * b && b < 1.05 * a) }' && ok ||
    bad "4 GPUs price $(step "$tmp/4.json") s, 64 price $(step "$tmp/64.json") s"
finish
