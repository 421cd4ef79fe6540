#!/bin/sh
# A plan made for a launcher (`plan --target L`) exports to it, for every
# example model on 16 GPUs and every launcher: each launcher's space lists
# only the parallelism its export states. Where the launcher's flags cannot
# state the model itself (Megatron-LM and Gemma 2's post-norms, say), the
# plan said so in a `note:` with the reason the export then gives.
set -u
. "$(dirname "$0")/lib.sh"

for m in "$src"/examples/hf/*.json "$src"/examples/gpt-1.3b.json; do
    name=$(basename "$m")
    for t in megatron torchtitan deepspeed; do
        # Models over 16 GPUs' memory are refused with exit status 2.
        "$bin" plan "$m" --gpus 16 --target "$t" -o "$tmp/p.json" --quiet \
            >/dev/null 2>"$tmp/plan.err"
        rc=$?
        if [ $rc -eq 2 ]; then
            grep -q "fits\|does not fit" "$tmp/plan.err" && ok ||
                bad "$name --target $t: $(cat "$tmp/plan.err")"
            continue
        fi
        [ $rc -eq 0 ] || { bad "$name --target $t: exit $rc: $(cat "$tmp/plan.err")"; continue; }
        if "$bin" export "$tmp/p.json" --to "$t" >/dev/null 2>"$tmp/export.err"; then
            ! grep -q "note:" "$tmp/plan.err" && ok ||
                bad "$name --target $t: a note for a plan that exports: $(cat "$tmp/plan.err")"
        else
            reason=$(sed 's/^autopar export: [^:]*: //' "$tmp/export.err")
            grep -qF "$reason" "$tmp/plan.err" && ok ||
                bad "$name --target $t: the export refused what the plan did not note: $reason"
        fi
    done
done

finish
