#!/bin/sh
# Calibration from the command line: a measured step writes a cluster file
# that prices the same configuration at that step, says what it scaled,
# and is refused when the step is out of reach or the arguments incomplete.
set -u
. "$(dirname "$0")/lib.sh"
model=$src/examples/gpt-1.3b.json
step() { sed -n 's/.*"step_time_s":[^0-9]*\([0-9.e+-]*\).*/\1/p' "$1"; }
spec="tp=2,pp=2,mbs=1,gbs=32,sp=1"

"$bin" estimate "$model" --gpus 8 --megatron "$spec" --json >"$tmp/preset" 2>&1 ||
    bad "estimate at the preset: $(cat "$tmp/preset")"
measured=$(awk -v t="$(step "$tmp/preset")" 'BEGIN { printf "%.6f", 1.25 * t }')
"$bin" calibrate "$model" --gpus 8 --megatron "$spec" --measured-step "$measured" \
    -o "$tmp/cal.json" >"$tmp/out" 2>&1 || bad "calibrate: $(cat "$tmp/out")"
# The preset's GEMM efficiency is 0.75 (published kernels) at x0.8440 (the
# median of its published training steps): 0.6330.
grep -q "tensor-core rate x0\.[0-9]*: GEMM efficiency 0.6330 -> 0\.[0-9]*" "$tmp/out" &&
    ok || bad "the report names the factor and the GEMM efficiency: $(cat "$tmp/out")"
grep -q "wrote $tmp/cal.json: use it with --cluster $tmp/cal.json" "$tmp/out" &&
    ok || bad "the report says where the cluster went"
grep -q '"calibration"' "$tmp/cal.json" && grep -q '"measured_step_s":' "$tmp/cal.json" &&
    ok || bad "the cluster file records the calibration"
# ... and the configuration the step ran, as read, dp resolved.
grep -q '"from":[[:space:]]*".*gpt-1.3b.json on 8 GPUs, --megatron tp=2,pp=2,dp=2,cp=1,ep=1,vpp=1,mbs=1,gbs=32,sp=1,' \
    "$tmp/cal.json" && ok || bad "the file names the run: $(grep '"from"' "$tmp/cal.json")"
# A run's batch from --global-batch, as estimate takes it: the factor is
# the one of gbs=32 in the spec.
"$bin" calibrate "$model" --gpus 8 --megatron "tp=2,pp=2,mbs=1,sp=1" --global-batch 32 \
    --measured-step "$measured" -o "$tmp/cal_b.json" >"$tmp/out_b" 2>&1 &&
    [ "$(grep 'tensor-core rate' "$tmp/out_b")" = "$(grep 'tensor-core rate' "$tmp/out")" ] &&
    ok || bad "--global-batch 32 calibrates as gbs=32: $(cat "$tmp/out_b")"
"$bin" estimate "$model" --gpus 8 --megatron "$spec" --cluster "$tmp/cal.json" --json \
    >"$tmp/cal" 2>&1 || bad "estimate on the calibrated cluster: $(cat "$tmp/cal")"
awk -v a="$(step "$tmp/cal")" -v b="$measured" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-5 * b) }' &&
    ok || bad "the calibrated cluster prices the run at $measured s, not $(step "$tmp/cal")"
# Every prediction says what its prices rest on: a preset's datasheet rates
# and the published steps its tensor-core rate was scaled to (or, without
# one, the warning that measured steps ran slower), or the calibration.
grep -q '"cluster_basis":[[:space:]]*"calibrated"' "$tmp/cal" &&
    grep -q '"cluster_basis":[[:space:]]*"preset"' \
    "$tmp/preset" && ok || bad "the JSON names the basis: $(grep basis "$tmp/cal" "$tmp/preset")"
"$bin" estimate "$model" --gpus 8 --megatron "$spec" --cluster "$tmp/cal.json" 2>&1 |
    grep -q "prices: h100-sxm calibrated, tensor-core rates scaled to a measured step" &&
    ok || bad "the report names the calibrated cluster"
grep -q '"cluster_rate_scale":[[:space:]]*0.844,' "$tmp/preset" &&
    grep -q '"cluster_rate_from":[[:space:]]*"the median of 20 published BF16 runs on H100 SXM and H200' "$tmp/preset" &&
    ok || bad "the JSON names the preset's published step: $(grep rate "$tmp/preset")"
"$bin" estimate "$model" --gpus 8 --megatron "$spec" 2>&1 |
    grep -q "prices: the h100-sxm preset (datasheet peaks at published kernel efficiencies, the tensor-core rate x0.844 that published training steps imply, the median of 20 published BF16 runs on H100 SXM and H200 (docs/validation.md): NeMo 24.09 Llama 3.1 405B (7-layer proxy)" &&
    ok || bad "the report names the step the preset's rate came from"
"$bin" estimate "$model" --gpus 8 --cluster b200 --megatron "$spec" 2>&1 |
    grep -q "prices: the b200 preset (.*rate x0.844 that published training steps imply, carried from the H100 SXM, not measured on a B200" &&
    ok || bad "the report says the b200's rate was carried from the H100"
"$bin" estimate "$model" --gpus 8 --megatron "$spec" \
    --cluster "$src/examples/clusters/synthetic-measured.json" 2>&1 |
    grep -q "prices: .*, from measured GEMM and collective tables" && ok ||
    bad "the report names a profile"

# The profile measured on an H100 (examples/clusters) prices at the rate
# published steps imply over measured kernels, x0.8591, and says so; a
# step of one's own recalibrates it, its measured GEMMs included, and the
# file stays a profile.
prof=$src/examples/clusters/h100-sxm-profile.json
"$bin" estimate "$model" --gpus 8 --gpus-per-node 8 --megatron "$spec" --cluster "$prof" \
    >"$tmp/prof" 2>&1 &&
    grep -q "prices: NVIDIA H100 80GB HBM3, from measured GEMM tables (no collectives measured: the file's link figures price them), the tensor-core kernels at x0.859 of their measured rate: the median of 19 published BF16 runs on H100 SXM priced with a measured H100 SXM profile" "$tmp/prof" &&
    ok || bad "the report names the profile's rate: $(tail -1 "$tmp/prof")"
"$bin" estimate "$model" --gpus 8 --gpus-per-node 8 --megatron "$spec" --cluster "$prof" \
    --json >"$tmp/profj" 2>&1 || bad "estimate on the profile: $(cat "$tmp/profj")"
grep -q '"cluster_collectives_measured":[[:space:]]*false' "$tmp/profj" && ok ||
    bad "the JSON says the one-GPU profile measured no collectives"
! grep -q "warning" "$tmp/prof" && ok || bad "a warning with --gpus-per-node: $(cat "$tmp/prof")"

# The profile describes the one GPU it measured. Sized to 16 GPUs without
# --gpus-per-node it makes 16 nodes of one, and says so, naming the flag;
# the plan is still made, as asked.
"$bin" estimate "$model" --gpus 16 --megatron "tp=2,pp=1,dp=8,mbs=1,gbs=64" \
    --cluster "$prof" >"$tmp/nodes" 2>&1 &&
    grep -q "autopar estimate: warning: $prof describes nodes of 1 GPU, so the 16 GPUs are priced as 16 nodes, every collective over the inter-node links; if a node holds more, give --gpus-per-node" "$tmp/nodes" &&
    grep -q "on 16 GPUs (NVIDIA H100 80GB HBM3, 1 per node)" "$tmp/nodes" &&
    ok || bad "a one-GPU profile sized to 16 GPUs warns: $(head -3 "$tmp/nodes")"
pmeasured=$(awk -v t="$(step "$tmp/profj")" 'BEGIN { printf "%.6f", 1.25 * t }')
"$bin" calibrate "$model" --gpus 8 --gpus-per-node 8 --megatron "$spec" --cluster "$prof" \
    --measured-step "$pmeasured" -o "$tmp/pcal.json" >"$tmp/pout" 2>&1 &&
    "$bin" estimate "$model" --gpus 8 --gpus-per-node 8 --megatron "$spec" \
    --cluster "$tmp/pcal.json" --json >"$tmp/pcal" 2>&1 &&
    awk -v a="$(step "$tmp/pcal")" -v b="$pmeasured" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-5 * b) }' &&
    grep -q '"cluster_basis":[[:space:]]*"profile"' "$tmp/pcal" &&
    ok || bad "a calibrated profile prices the run at $pmeasured s: $(cat "$tmp/pout")"

"$bin" calibrate "$model" --gpus 8 --megatron "$spec" --measured-step 0.001 \
    -o "$tmp/no.json" >"$tmp/fast" 2>&1
[ $? -eq 2 ] && grep -q "autopar calibrate: a measured step of 0.001 s is out of reach" "$tmp/fast" &&
    [ ! -e "$tmp/no.json" ] && ok || bad "a step faster than peak: $(cat "$tmp/fast")"
"$bin" calibrate "$model" --gpus 8 --megatron "$spec" --measured-step "$measured" \
    >"$tmp/noout" 2>&1
[ $? -eq 2 ] && grep -q "needs MODEL, --megatron or --megatron-args, --measured-step and -o" \
    "$tmp/noout" && grep -q "autopar calibrate: -o cluster.json is missing" "$tmp/noout" &&
    ok || bad "calibrate without -o: $(cat "$tmp/noout")"
# A step in milliseconds, as Megatron-LM logs it, is named as the likely slip.
ms=$(awk -v s="$measured" 'BEGIN { print s * 1000 }')
"$bin" calibrate "$model" --gpus 8 --megatron "$spec" --measured-step "$ms" \
    -o "$tmp/no.json" >"$tmp/ms" 2>&1
[ $? -eq 2 ] && grep -q "(milliseconds? Megatron-LM logs" "$tmp/ms" && [ ! -e "$tmp/no.json" ] &&
    ok || bad "a step in milliseconds: $(cat "$tmp/ms")"
"$bin" calibrate "$model" --gpus 8 --megatron "$spec" --measured-step soon \
    -o "$tmp/no.json" >"$tmp/nan" 2>&1
[ $? -eq 2 ] && grep -q "\-\-measured-step needs a number" "$tmp/nan" && ok ||
    bad "a measured step that is no number: $(cat "$tmp/nan")"
"$bin" calibrate --help | grep -q "usage: autopar calibrate MODEL" && ok || bad "--help"

finish
