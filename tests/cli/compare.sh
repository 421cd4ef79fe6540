#!/bin/sh
# autopar compare: a Megatron configuration beside autopar's plan (and the
# sweep's best), exit codes and errors that name what is wrong; --target and
# --trace on autopar plan.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/gpt-tiny.json

"$bin" compare "$model" --gpus 4 --global-batch 16 --quiet \
    --megatron "tp=2,pp=2,mbs=1,sp=1" --sweep >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "compare exits 0: $(cat "$tmp/err")"
for want in "megatron (yours)" "autopar" "megatron (sweep)" "step time" "tokens/s" \
    "MFU" "TFLOP/s per GPU" "memory per GPU" "pipeline bubble" "tensor-parallel" \
    "resharding" "pipeline send/recv" "gradient sync, exposed" "speedup over yours" \
    "tp=2,pp=2,dp=1,cp=1,ep=1,vpp=1,mbs=1,gbs=16,sp=1" "valid Megatron configurations" \
    "prices: the h100-sxm preset"; do
    grep -qF "$want" "$tmp/out" && ok || bad "the table shows '$want'"
done

"$bin" compare "$model" --gpus 4 --global-batch 16 --quiet --json \
    --megatron-args "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel" \
    >"$tmp/json" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "compare --json exits 0: $(cat "$tmp/err")"
for want in '"yours":' '"autopar":' '"configuration":' '"speedup":' '"step_time_s":' \
    '"communication_by_kind":' '"tensor_parallel_s":' '"pipeline_send_recv_s":' \
    '"grad_sync_total_s":' '"global_batch":	16'; do
    grep -qF "$want" "$tmp/json" && ok || bad "the JSON has $want"
done
grep -q '"sweep":' "$tmp/json" && bad "no sweep without --sweep" || ok
# Your column is what estimate prices for the same flags.
"$bin" estimate "$model" --gpus 4 --json --megatron-args \
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --global-batch-size 16" \
    >"$tmp/est" 2>/dev/null
a=$(grep -m1 '"step_time_s"' "$tmp/est" | tr -d ' \t,')
b=$(grep -m1 '"step_time_s"' "$tmp/json" | tr -d ' \t,')
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "your column is estimate's price: $a vs $b"

# Without --global-batch-size and --global-batch, Megatron-LM's own global
# batch: one micro-batch of 2 on each of the 2 data-parallel replicas.
"$bin" compare "$model" --gpus 4 --quiet --json \
    --megatron-args "--tensor-model-parallel-size 2 --micro-batch-size 2" >"$tmp/gbs" 2>"$tmp/err"
[ $? -eq 0 ] && grep -qF '"global_batch":	4' "$tmp/gbs" && ok ||
    bad "a command line without a global batch trains mbs*dp: $(grep -m1 global_batch "$tmp/gbs") $(cat "$tmp/err")"

expect() {
    want=$1
    shift
    out=$("$bin" compare "$model" --gpus 4 --quiet "$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" && ok ||
        bad "compare $* -> rc $rc, '$out' lacks '$want'"
}
expect "not the 4 GPUs" --megatron "tp=2,pp=2,dp=2"
expect "does not divide the 4 heads" --megatron "tp=8,dp=1" --gpus 8
expect "unknown key" --megatron "tq=2"
expect "bad value" --megatron "tp=x"
expect "is not key=value" --megatron "tp"
expect "a configuration (--megatron or --megatron-args) is required"
expect "--global-batch 32 and the configuration's gbs=16 differ" \
    --megatron "gbs=16" --global-batch 32
expect "give one --megatron or --megatron-args" --megatron "tp=2" --megatron "tp=1"
expect "unknown option '--frobnicate'" --megatron "tp=2" --frobnicate

"$bin" plan "$model" --gpus 4 --global-batch 16 --quiet --target torchtitan \
    --trace "$tmp/trace.json" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && ok || bad "plan --target torchtitan exits 0: $(cat "$tmp/err")"
grep -q "^torchtitan configuration tp=" "$tmp/out" && ok || bad "the target's configuration is shown"
grep -q '"traceEvents":\[' "$tmp/trace.json" && grep -q '"ph":"X"' "$tmp/trace.json" &&
    ok || bad "--trace writes Chrome trace events"
"$bin" plan "$model" --gpus 4 --target slurm >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "megatron, torchtitan, deepspeed" "$tmp/err" && ok ||
    bad "an unknown --target is refused with the choices"
"$bin" plan "$model" --gpus 4 --target megatron --no-pipeline >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "does not combine" "$tmp/err" && ok || bad "--target with --no-pipeline is refused"
"$bin" plan "$model" --gpus 4 --global-batch 16 --quiet --target megatron --trace /nonexistent/dir/t.json \
    >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "cannot write" "$tmp/err" && ok || bad "an unwritable --trace fails"

# autopar's column is the faster of the search's plan and the fastest
# Megatron-LM configuration, and one sweep serves it and --sweep's column:
# gpt-1.3b on 16 GPUs at 8 sequences, where tp 2 over 8 replicas wins.
# --no-sweep shows the search's plan, slower.
"$bin" compare "$src/examples/gpt-1.3b.json" --gpus 16 --megatron "tp=2,pp=2,mbs=1,gbs=8,sp=1" \
    --sweep --quiet >"$tmp/best.txt" 2>"$tmp/err" || bad "compare: $(cat "$tmp/err")"
auto=$(sed -n 's/^  autopar: //p' "$tmp/best.txt")
swept=$(sed -n 's/^  megatron (sweep): //p' "$tmp/best.txt")
case "$auto" in tp=2,pp=1,dp=8,*) ok ;; *) bad "autopar's column is the sweep's configuration: $auto" ;; esac
[ "$auto" = "$swept" ] && ok || bad "autopar's and the sweep's configurations differ: $auto / $swept"
[ "$(grep -c "the sweep priced" "$tmp/best.txt")" = 1 ] && ok || bad "one sweep line"
"$bin" compare "$src/examples/gpt-1.3b.json" --gpus 16 --megatron "tp=2,pp=2,mbs=1,gbs=8,sp=1" \
    --no-sweep --json --quiet >"$tmp/search.json" 2>"$tmp/err" || bad "compare --no-sweep: $(cat "$tmp/err")"
grep -q '"configuration":[[:space:]]*"[0-9]* stage' "$tmp/search.json" &&
    ! grep -q '"sweep"' "$tmp/search.json" && ok ||
    bad "--no-sweep: the search's plan, no sweep column: $(head -c 400 "$tmp/search.json")"

# Progress written to a log (stderr a file): a line every
# AP_PROGRESS_INTERVAL_S seconds (30 by default; set near 0 here, so every
# run of configurations a thread takes gets one), written by whichever
# thread takes the next run and counting what all threads have priced, up
# to the end of the list. gpt-tiny on 4 GPUs lists 294 Megatron-LM
# configurations (tests/test_sweep.c) and 14 search candidates.
AP_PROGRESS_INTERVAL_S=0.000001 "$bin" plan "$model" --gpus 4 --global-batch 16 --threads 2 \
    >"$tmp/loud" 2>"$tmp/progress" || bad "plan with progress: $(cat "$tmp/progress")"
"$bin" plan "$model" --gpus 4 --global-batch 16 --threads 2 --quiet >"$tmp/quiet" 2>&1
cmp -s "$tmp/loud" "$tmp/quiet" && ok || bad "progress changes what plan prints on stdout"
grep '^sweep: ' "$tmp/progress" | awk '
    $3 != "of" || $4 != 294 || $2 < last { bad = 1 }
    { last = $2 }
    END { exit bad || NR < 10 || last != 294 }' && ok ||
    bad "sweep progress counts up to 294 of 294: $(grep -c '^sweep: ' "$tmp/progress") lines, $(grep '^sweep: ' "$tmp/progress" | tail -1)"
tail -1 "$tmp/progress" | grep -qx 'sweep: 294 of 294 configurations priced ([0-9]* s)' && ok ||
    bad "the log ends with the sweep's last configuration: $(tail -1 "$tmp/progress")"
grep '^autopar: searching: ' "$tmp/progress" | tail -1 |
    awk '{ n = $3 + $8; total = $5 } END { exit n != 14 || total != 14 }' && ok ||
    bad "the search's last line accounts for its 14 candidates: $(grep '^autopar: searching' "$tmp/progress" | tail -1)"
# A value that is not a number of seconds leaves the 30 s: no line in a
# run of a second.
AP_PROGRESS_INTERVAL_S=soon "$bin" plan "$model" --gpus 4 --global-batch 16 \
    >/dev/null 2>"$tmp/progress" && [ ! -s "$tmp/progress" ] && ok ||
    bad "AP_PROGRESS_INTERVAL_S=soon: $(head -3 "$tmp/progress")"


# autopar's column on one GPU runs ZeRO-0, whatever level its plan carries:
# there are no data-parallel replicas to shard over; "1 GPU" in the header.
"$bin" compare "$src/examples/gpt-1.3b.json" --gpus 1 --megatron "tp=1,mbs=8,gbs=512" \
    --no-sweep --quiet >"$tmp/one" 2>&1
grep -q "^compare gpt-1.3b on 1 GPU (h100-sxm, 1 per node)" "$tmp/one" &&
    grep -q "^  autopar: 1 stage, mesh 1x1, 64 micro-batches of 8, 1F1B, ZeRO-0$" "$tmp/one" &&
    ok || bad "compare on one GPU: $(grep -E "^compare|^  autopar:" "$tmp/one")"

finish
