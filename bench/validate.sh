#!/bin/sh
# Compares `autopar estimate` with published step times of real training
# runs (bench/validation/runs.json, docs/validation.md).
#
#   sh bench/validate.sh build/autopar [runs.json]
#
# Every run is priced with the preset of its GPU and the Megatron-LM
# configuration it used: a model file and a --megatron spec, or the command
# line of the run's script (megatron_args), whose flags state the model. Each preset's tensor-core rate is the median of the
# rates the GPU's published BF16 runs imply (costmodel/preset.c): every BF16
# run is calibrated on its published step (`autopar calibrate`), and the
# lower median of those factors is the preset's. So that no run is priced
# with a rate it helped make, each BF16 run is priced at the median of the
# OTHER BF16 runs of its GPU (leave one out); FP8 runs and GPUs without BF16
# runs are priced at the preset. FP16 runs (Megatron-LM before 2021) count as
# BF16 ones: the presets' FP16 and BF16 peaks are equal. Presets that carry
# one training rate (the A100 80GB and 40GB; the H100, H200 and H800) share
# one median; a rate's lone run (the H200's, when --profile prices the
# H100's with a profile) is priced at its preset's or profile's own rate. --calibrated
# prices the FP8 runs at the median derived here instead of the preset's,
# to show what a stale preset changes. A run measured in FP8 carries
# fp8=1 in its configuration (linear layers in FP8 as Transformer Engine runs
# them). A run that autopar refuses is printed with its error and left out of
# the statistics, as is a run whose precision its configuration does not
# price (marked *).
#
# The comparison is of step times. Each published figure is turned into the
# step time it implies, using the source's own FLOP count where the figure is
# a FLOP rate:
#   megatron-2021  Narayanan et al. 2021, eq. (3):
#                  F = 96 B s l h^2 (1 + s/6h + V/16lh) per step, which counts
#                  the recomputed forward pass; step = F / (X n)
#   tokens         step = gbs * seq / (tokens per second per GPU * n)
#   step           the source publishes the step time itself (seconds per step)
#   model          the source counts model FLOPs without recomputation and
#                  does not give its formula; autopar's model FLOPs per step
#                  (3 x the forward FLOPs of its graph) stand in for it, so
#                  step = model FLOPs / (X n)
# The predicted figure is the predicted step time put through the same
# conversion backwards, so the two columns are in the published unit.
# Error = (predicted step - published step) / published step: negative means
# autopar predicts a faster step than was measured.
set -u

usage="usage: sh bench/validate.sh path/to/autopar [--calibrated] [--profile GPU=FILE] [runs.json]"
if [ $# -lt 1 ]; then
    echo "$usage" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$1
shift
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
mode=preset
profiles=
runs=$root/bench/validation/runs.json
while [ $# -gt 0 ]; do
    case $1 in
    --calibrated) mode=calibrated ;;
    --profile)
        case ${2:-} in
        ?*=?*) ;;
        *) echo "validate.sh: --profile needs GPU=FILE, e.g. h100-sxm=examples/clusters/h100-sxm-profile.json" >&2
           exit 2 ;;
        esac
        file=${2#*=}
        case $file in /*) ;; *) file=$(pwd)/$file ;; esac
        if [ ! -r "$file" ]; then
            echo "validate.sh: --profile: cannot read $file" >&2
            exit 2
        fi
        profiles="$profiles ${2%%=*}=$file"
        shift ;;
    -*) echo "$usage" >&2
        exit 2 ;;
    *) runs=$1 ;;
    esac
    shift
done
if [ ! -x "$bin" ]; then
    echo "validate.sh: $bin is not an executable autopar" >&2
    exit 2
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "validate.sh: needs python3 to read $runs" >&2
    exit 2
fi

cd "$root" && exec python3 - "$bin" "$runs" "$mode" $profiles <<'EOF'
import json, os, shutil, subprocess, sys, tempfile

autopar, runs_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
# --profile GPU=FILE: that GPU's runs priced with a measured profile in
# place of its preset, its rate derived from them the same way.
profiles = dict(a.split("=", 1) for a in sys.argv[4:])


def base_cluster(run):
    return profiles.get(run["gpu"], run["gpu"])


def spec_value(spec, key):
    for part in spec.split(","):
        k, _, v = part.partition("=")
        if k.strip() == key:
            return float(v)
    raise ValueError(f"--megatron spec has no {key}")


def megatron_2021_flops(run):
    """Narayanan et al. 2021, eq. (3): FLOPs of one step with full recomputation."""
    with open(run["model"]) as f:
        cfg = json.load(f)
    l, h, V = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]
    B, s = spec_value(run["megatron"], "gbs"), run["seq"]
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def model_of(run, tmp):
    """The model file to price: the run's own, or with graph_options (e.g.
    attention without flash for a 2021 run) converted by `autopar graph`
    into a project-format model. Returns (path, None) or (None, error); a
    run that is a script's command line has no model file ("", None): its
    flags state the model."""
    if "megatron_args" in run:
        return "", None
    model = run["model"]
    if run.get("graph_options"):
        model = os.path.join(tmp, "model.json")
        g = subprocess.run([autopar, "graph", run["model"], "--seq", str(run["seq"])] +
                           run["graph_options"] + ["-o", model],
                           capture_output=True, text=True, timeout=300)
        if g.returncode != 0:
            return None, (g.stderr.strip().splitlines() or ["graph failed"])[-1]
    return model, None


def run_args(run, model, cluster):
    config = ["--megatron-args", run["megatron_args"]] if "megatron_args" in run \
        else ["--megatron", run["megatron"]]
    return ([model] if model else []) + \
        ["--gpus", str(run["gpus"]), "--gpus-per-node", str(run["gpus_per_node"]),
         "--cluster", cluster, "--seq", str(run["seq"])] + config


def estimate(run, tmp, cluster=None):
    """autopar's prediction as a dict, or None and the error it printed.
    cluster: a cluster file to price with instead of the run's preset."""
    model, err = model_of(run, tmp)
    if err:
        return None, err
    cmd = [autopar, "estimate"] + run_args(run, model, cluster or base_cluster(run)) + ["--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        msg = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        return None, msg.replace("autopar estimate: ", "")
    return json.loads(p.stdout), None


def steps(run, pred):
    """(published step, published figure, predicted figure) in the source's unit."""
    pub = run["published"]
    X, n, conv = pub["value"], run["gpus"], run["flops"]
    t = pred["step_time_s"]
    if pub["metric"] == "tflops_per_gpu" and conv == "megatron-2021":
        F = megatron_2021_flops(run)
        return F / (X * 1e12 * n), X, F / (t * n * 1e12)
    if pub["metric"] == "tflops_per_gpu" and conv == "model":
        F = pred["model_tflops_per_gpu"] * 1e12 * n * t
        return F / (X * 1e12 * n), X, pred["model_tflops_per_gpu"]
    if pub["metric"] == "mfu" and conv == "model":
        return pred["mfu"] * t / X, X, pred["mfu"]
    if pub["metric"] == "step_time_s":
        return X, X, t
    if pub["metric"] in ("tokens_per_s", "tokens_per_s_per_gpu") and conv == "tokens":
        per = n if pub["metric"] == "tokens_per_s_per_gpu" else 1
        tokens = spec_value(run["megatron"], "gbs") * run["seq"]
        return tokens / (X * per), X, tokens / (t * per)
    raise ValueError(f"no conversion for metric {pub['metric']} with flops {conv}")


def fmt(x):
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}" if x < 1 else f"{x:.1f}"


def price(run, cluster=None):
    """(prediction, published step, published figure, predicted figure), or
    (None, error)."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pred, err = estimate(run, tmp, cluster)
        if pred is None:
            return None, err
        return (pred,) + steps(run, pred), None
    except (OSError, KeyError, subprocess.SubprocessError, ValueError) as e:
        return None, str(e)


def is_fp8(run):
    if "megatron_args" in run:
        return "--fp8-format" in run["megatron_args"].split()
    return "fp8=1" in run["megatron"].split(",")


def calibrate(run, pub_t, out):
    """`autopar calibrate` on run at its published step; None or the error."""
    with tempfile.TemporaryDirectory() as tmp:
        model, err = model_of(run, tmp)
        if err:
            return err
        cmd = [autopar, "calibrate"] + run_args(run, model, base_cluster(run)) + \
              ["--measured-step", repr(pub_t), "-o", out]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    return None


# Measured in 16 bits: BF16, or FP16 (Megatron-LM before 2021), whose
# tensor-core peak is BF16's on every preset, as are its 2-byte gradients.
SIXTEEN_BIT = ("bf16", "fp16")


def rate_runs(runs, priced):
    """The BF16/FP16 runs whose published steps each tensor-core rate is
    derived from, as {the GPUs' presets: run indices}: every priced run
    measured in 16 bits, grouped by the training rate its preset carries,
    so that presets sharing one (the A100 80GB and 40GB) share its median."""
    by_rate = {}
    for i, run in enumerate(runs):
        if priced[i] is None or is_fp8(run) or run.get("precision", "bf16") not in SIXTEEN_BIT:
            continue
        by_rate.setdefault(priced[i][0].get("cluster_rate_from") or run["gpu"], []).append(i)
    return {", ".join(dict.fromkeys(runs[i]["gpu"] for i in idx)): idx
            for idx in by_rate.values()}


def median_low(xs):
    """The lower median, so that the rate is one run's own."""
    xs = sorted(xs)
    return xs[(len(xs) - 1) // 2]


def cluster_at(template, factor, out):
    """The calibrated cluster file `template` with its tensor-core rate set
    to `factor` times the kernel figures instead of its own."""
    with open(template) as f:
        d = json.load(f)
    own = d["calibration"]["scale"]
    for k in ("gemm_efficiency", "gemm_efficiency_fp8", "attention_efficiency",
              "attention_backward_efficiency"):
        if k in d["gpu"]:
            d["gpu"][k] = d["gpu"][k] / own * factor
    d["calibration"]["scale"] = factor
    with open(out, "w") as f:
        json.dump(d, f)
    return out


with open(runs_path) as f:
    runs = json.load(f)

priced, errors = [], []
for run in runs:
    r, err = price(run)
    priced.append(r)
    errors.append(err)

# The runs the presets' tensor-core rates were derived from
# (costmodel/preset.c): priced like the others, left out of the statistics.
# Each BF16 run calibrated on its own published step: the factor it implies.
groups = rate_runs(runs, priced)
caldir = tempfile.mkdtemp(prefix="autopar-validate-")
factor, calfile = {}, {}
for gpu, idx in sorted(groups.items()):
    for i in idx:
        out = os.path.join(caldir, f"run{i}.json")
        err = calibrate(runs[i], priced[i][1], out)
        if err:
            print(f"calibrate on {runs[i]['name']}: {err}", file=sys.stderr)
            shutil.rmtree(caldir)
            sys.exit(1)
        with open(out) as f:
            factor[i] = json.load(f)["calibration"]["scale"]
        calfile[i] = out
held_out = {}
for gpu, idx in sorted(groups.items()):
    # One run alone (a GPU whose runs share the preset's rate with a GPU
    # that --profile prices with a profile instead) has no others to be
    # held out against: it stays at its preset and derives nothing.
    if len(idx) == 1:
        what = "the profile" if runs[idx[0]]["gpu"] in profiles else "the preset"
        print(f"{gpu}: 1 BF16/FP16 run, held out against no other: priced at {what}'s own rate")
        continue
    rate = median_low([factor[i] for i in idx])
    mid = min(idx, key=lambda i: (abs(factor[i] - rate), i))
    preset = priced[idx[0]][0].get("cluster_rate_scale", 0)
    profiled = any(runs[i]["gpu"] in profiles for i in idx)
    what, source = ("the profile", "profile_rate_source") if profiled else \
                   ("the preset", "preset_rate_source")
    print(f"{gpu}: {len(idx)} BF16/FP16 runs imply x{min(factor[i] for i in idx):.4f} to "
          f"x{max(factor[i] for i in idx):.4f} of the "
          f"{'measured kernels' if profiled else 'kernel figures'}; median "
          f"x{rate:.4f} ({runs[mid]['name']}); {what} has x{preset:.4f}")
    if abs(rate - preset) > 5e-5 or not runs[mid].get(source):
        print(f"{gpu}: {what} is stale: set its rate to x{rate:.4f} from "
              f"{runs[mid]['name']} (costmodel/preset.c"
              f"{', and the profile file' if profiled else ''}) and mark that run "
              f"{source}", file=sys.stderr)
    # Each BF16 run at the median of the others'; FP8 runs at the preset,
    # or with --calibrated at the median derived here.
    for i in idx:
        f = median_low([factor[j] for j in idx if j != i])
        held_out[i] = f
        priced[i], errors[i] = price(runs[i], cluster_at(calfile[i], f,
                                                        os.path.join(caldir, f"held{i}.json")))
    if mode == "calibrated":
        at = cluster_at(calfile[mid], rate, os.path.join(caldir, f"rate{mid}.json"))
        gpus = {runs[j]["gpu"] for j in idx}
        for i, run in enumerate(runs):
            if run["gpu"] in gpus and i not in held_out:
                priced[i], errors[i] = price(run, at)
print()
shutil.rmtree(caldir)

rows, stats = [], {}
for i, run in enumerate(runs):
    unit = run["published"]["metric"]
    if priced[i] is None:
        rows.append([run["name"], run["gpu"], fmt(run["published"]["value"]) + " " + unit,
                     "error: " + errors[i]])
        continue
    pred, pub_t, pub_x, pred_x = priced[i]
    t = pred["step_time_s"]
    e = 100 * (t - pub_t) / pub_t
    b = pred["breakdown"]
    fp8 = is_fp8(run)
    counted = run.get("precision", "bf16") in (("fp8",) if fp8 else SIXTEEN_BIT)
    caveat = pred.get("caveats") or []
    if counted:
        stats.setdefault(run["gpu"], []).append((e, run["name"], bool(caveat)))
    rows.append([run["name"], run["gpu"], f"{fmt(pub_x)} {unit}", f"{fmt(pred_x)}",
                 f"{pub_t:.3f}", f"{t:.3f}",
                 f"{e:+.1f}%" + (" h" if i in held_out else "") +
                 ("" if counted else " *") +
                 (" fp8" if fp8 else ""),
                 f"{100 * b['compute_s'] / t:.0f}/{100 * b['communication_s'] / t:.0f}"
                 f"/{100 * b['bubble_s'] / t:.0f}",
                 ", ".join(([] if pred.get("fits", True) else ["over HBM"]) +
                           ([f"caveat: {pred['local_experts']:.0f} experts per GPU"]
                            if caveat else []))])

head = ["run", "gpu", "published", "predicted", "step pub (s)", "step pred (s)", "error",
        "comp/comm/bubble %", ""]
widths = [max([len(head[i])] + [len(r[i]) for r in rows if len(r) > 4]) for i in range(len(head))]
print("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
for r in rows:
    if len(r) == 4:
        print("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    else:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
print()
print("error = (predicted step - published step) / published step; negative: autopar is optimistic")
print("fp8: measured in FP8 and priced with fp8=1 (docs/cost-model.md, FP8)")
print("h: a BF16 or FP16 run, priced at the median rate of its GPU's other such runs (held out);")
print("   the others at the preset's rate (the median of all of them; the b200,"
      " with no BF16 run, carries the h100-sxm's)"
      + (", or with --calibrated at the median derived above" if mode == "calibrated" else ""))
if any(r[6].endswith("*") or " * " in r[6] for r in rows if len(r) > 4):
    print("* measured in another precision than priced: shown, not in the statistics")
allrows = []
for gpu in sorted(stats):
    errs = stats[gpu]
    allrows += errs
    mae = sum(abs(e) for e, _, _ in errs) / len(errs)
    mean = sum(e for e, _, _ in errs) / len(errs)
    worst = max(errs, key=lambda x: abs(x[0]))
    within = sum(1 for e, _, _ in errs if abs(e) <= 10)
    print(f"{gpu}: {len(errs)} runs, mean |error| {mae:.1f}%, mean error {mean:+.1f}%, "
          f"within 10%: {within}, worst {worst[0]:+.1f}% ({worst[1]})")
if allrows:
    mae = sum(abs(e) for e, _, _ in allrows) / len(allrows)
    worst = max(allrows, key=lambda x: abs(x[0]))
    within = sum(1 for e, _, _ in allrows if abs(e) <= 10)
    print(f"all: {len(allrows)} runs, mean |error| {mae:.1f}%, within 10%: {within}, "
          f"worst {worst[0]:+.1f}% ({worst[1]})")
    # What a user is told to trust: the runs whose reports carry no caveat.
    plain = [r for r in allrows if not r[2]]
    if plain and len(plain) < len(allrows):
        mae = sum(abs(e) for e, _, _ in plain) / len(plain)
        worst = max(plain, key=lambda x: abs(x[0]))
        within = sum(1 for e, _, _ in plain if abs(e) <= 10)
        print(f"without a caveat: {len(plain)} runs, mean |error| {mae:.1f}%, "
              f"within 10%: {within}, worst {worst[0]:+.1f}% ({worst[1]})")
EOF
