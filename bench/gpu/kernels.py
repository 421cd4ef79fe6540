"""The kernels behind three open questions of the cost model, measured on
one GPU, for `bench/kernel_prices` to set beside autopar's prices of the
same kernels (docs/validation.md, "Kernels measured on an H100").

  sustained  The tensor-core work of one Llama 3.1 8B layer (tp 1, 8,192
             tokens: the twelve GEMMs of forward, dgrad and wgrad and causal
             flash attention forward and backward) replayed from a CUDA graph
             for SECONDS, its rate per window, with nvidia-smi's clocks and
             power: how far a GPU held busy falls from the same kernels
             measured one at a time (the training-step rate, finding 17).
  experts    The expert GEMMs of Qwen3-30B-A3B on 16 H100s (Megatron-Bridge
             25.11: 16 local experts, 4,096 routed tokens each, hidden
             2,048, FFN 768) and of Qwen3-235B-A22B (4 local experts), in
             bf16 and FP8, each expert on its own operands, over one
             stream and over four as TE's GroupedLinear issues them.
  eager      The same experts' forward and backward as a PyTorch loop
             over the experts: its wall time, its GPU time and the host's
             time to issue it (finding 18).
  ksweep     A GEMM's time as its inner dimension k shrinks (m 4,096).
  attention  The flash-attention kernels of Meta's 131,072-token row
             (context parallel 16 by all-gather, tp 8: 16 query heads,
             4,096-query chunks against up to 131,072 keys, the mask at
             the bottom right): forward and backward, cuDNN and
             FlashAttention-2 (that row is -21.9%).

    python3 bench/gpu/kernels.py [--seconds 90] [--only PART...]

Prints one line per measurement (`name value unit`); `bench/kernel_prices`
prints autopar's price under the same names and bench/gpu/compare_kernels.sh
sets the two side by side. The expert and sweep GEMMs are timed from
CUDA-graph replays: one launch after a synchronisation adds the launch to
a short kernel (docs/validation.md, finding 38). The attention and the
one-at-a-time figures of `sustained` are timed per call, which is fine for
kernels of a millisecond and more but reads short ones slow.
"""
import argparse
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from crosscheck import median_seconds

BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn


def rand(*shape, dtype=BF16):
    return (torch.rand(*shape, device="cuda", dtype=torch.float32) * 2 - 1).to(dtype)


def report(name, value, unit):
    print(f"{name} {value:.4f} {unit}", flush=True)


def layer_gemms(tokens, hidden, qkv, ffn2, ffn):
    """(m, n, k) of a transformer layer's GEMMs: forward, dgrad, wgrad."""
    fwd = [(tokens, qkv, hidden), (tokens, hidden, hidden),
           (tokens, ffn2, hidden), (tokens, hidden, ffn)]
    dgrad = [(m, k, n) for m, n, k in fwd]
    wgrad = [(k, n, m) for m, n, k in fwd]
    return fwd + dgrad + wgrad


def sustained(seconds):
    tokens, hidden, heads, kv_heads, dim, ffn = 8192, 4096, 32, 8, 128, 14336
    gemms = layer_gemms(tokens, hidden, (heads + 2 * kv_heads) * dim, 2 * ffn, ffn)
    ops = [(rand(m, k), rand(k, n)) for m, n, k in gemms]
    flops = sum(2 * m * n * k for m, n, k in gemms)
    q, k, v = (rand(1, heads, tokens, dim).requires_grad_() for _ in range(3))
    attn_flops = 4 * heads * tokens * tokens * dim * 0.5 * (1 + 2.5)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        grad = torch.randn_like(F.scaled_dot_product_attention(q, k, v, is_causal=True))

        def attention():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(out, (q, k, v), grad)

        gemm_alone = sum(median_seconds(lambda a=a, b=b: a @ b) for a, b in ops)
        attn_alone = median_seconds(attention)
        report("sustained.gemms_one_at_a_time", flops / gemm_alone / 1e12, "TFLOP/s")
        report("sustained.attention_one_at_a_time", attn_flops / attn_alone / 1e12,
               "TFLOP/s")
        total = flops + attn_flops
        report("sustained.layer_one_at_a_time", total / (gemm_alone + attn_alone) / 1e12,
               "TFLOP/s")

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                for a, b in ops:
                    a @ b
                attention()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for a, b in ops:
                a @ b
            attention()

    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
         "--format=csv,noheader", "-lms", "1000"],
        stdout=subprocess.PIPE, text=True)
    windows, window = [], 2.0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reps = 0
        begin.record()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < window:
            for _ in range(8):
                graph.replay()
            reps += 8
            end.record()
            end.synchronize()
        windows.append(total * reps / (begin.elapsed_time(end) / 1e3) / 1e12)
    smi.terminate()
    samples = smi.communicate()[0].strip().splitlines()
    for i, rate in enumerate(windows):
        report(f"sustained.window{i:02d}", rate, "TFLOP/s")
    steady = sorted(windows[len(windows) // 2:])[len(windows[len(windows) // 2:]) // 2]
    report("sustained.first_window", windows[0], "TFLOP/s")
    report("sustained.steady_median", steady, "TFLOP/s")
    report("sustained.steady_over_one_at_a_time",
           steady / (total / (gemm_alone + attn_alone) / 1e12), "ratio")
    for line in samples:
        print("smi", line.replace(" ", ""), flush=True)


def gemm_op(m, n, k, fp8):
    """A GEMM of one operand set, in bf16 or as Transformer Engine's FP8
    GEMMs run (cuBLASLt, E4M3 operands, one fp32 scale each, bf16 out)."""
    if not fp8:
        a, b = rand(m, k), rand(k, n)
        return lambda: a @ b
    a, b = rand(m, k).to(E4M3), rand(n, k).to(E4M3).t()
    one = torch.ones((), device="cuda")
    return lambda: torch._scaled_mm(a, b, one, one, out_dtype=BF16)


def graphed_seconds(fns, streams=1):
    """GPU time of one call of each of fns, issued round robin over
    `streams` streams (as TE's grouped GEMM spreads its experts), from a
    CUDA graph's replays: no host time between the kernels."""
    main = torch.cuda.current_stream()
    side = [torch.cuda.Stream() for _ in range(streams)]

    def issue():
        for s in side:
            s.wait_stream(torch.cuda.current_stream())
        for i, fn in enumerate(fns):
            with torch.cuda.stream(side[i % streams]):
                fn()
        for s in side:
            torch.cuda.current_stream().wait_stream(s)

    warm = torch.cuda.Stream()
    warm.wait_stream(main)
    with torch.cuda.stream(warm):
        for _ in range(3):
            issue()
    main.wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        issue()
    return median_seconds(graph.replay, 20, 5)


def expert_gemms(tag, experts, tokens, hidden, ffn):
    """Each expert GEMM's time within a grouped GEMM of `experts` operand
    sets (distinct, as the experts' are), one stream and four."""
    shapes = {"fc1.fwd": (tokens, 2 * ffn, hidden), "fc2.fwd": (tokens, hidden, ffn),
              "fc1.dgrad": (tokens, hidden, 2 * ffn), "fc2.dgrad": (tokens, ffn, hidden),
              "fc1.wgrad": (hidden, 2 * ffn, tokens), "fc2.wgrad": (ffn, hidden, tokens)}
    for name, (m, n, k) in shapes.items():
        for fp8, dt in ((False, "bf16"), (True, "fp8")):
            fns = [gemm_op(m, n, k, fp8) for _ in range(experts)]
            one = graphed_seconds(fns) / experts
            four = graphed_seconds(fns, 4) / experts
            report(f"experts.{tag}.{name}.{dt}", one * 1e6, "us")
            report(f"experts.{tag}.{name}.{dt}.streams4", four * 1e6, "us")
            report(f"experts.{tag}.{name}.{dt}.rate", 2 * m * n * k / one / 1e12, "TFLOP/s")


def ksweep():
    """How a GEMM's rate falls with a short inner dimension: m = 4,096
    tokens, n = 2,048 and 1,536, k from 256 to 8,192, eight operand sets
    in a graph."""
    for n in (2048, 1536):
        for k in (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192):
            for fp8, dt in ((False, "bf16"), (True, "fp8")):
                t = graphed_seconds([gemm_op(4096, n, k, fp8) for _ in range(8)]) / 8
                report(f"ksweep.m4096.n{n}.k{k}.{dt}", t * 1e6, "us")
                report(f"ksweep.m4096.n{n}.k{k}.{dt}.rate", 2 * 4096 * n * k / t / 1e12,
                       "TFLOP/s")


def eager_experts(tag, experts, tokens, hidden, ffn):
    """The experts' forward and backward as a loop over experts in bf16:
    wall time per pass against the GPU time of its kernels (a CUDA graph
    of the same pass replayed), and the host's time to issue it."""
    w1 = [rand(hidden, 2 * ffn).requires_grad_() for _ in range(experts)]
    w2 = [rand(ffn, hidden).requires_grad_() for _ in range(experts)]
    x = rand(experts * tokens, hidden).requires_grad_()
    dy = rand(experts * tokens, hidden)

    def step():
        outs = []
        for e, xe in enumerate(x.split(tokens)):
            gate, up = (xe @ w1[e]).chunk(2, dim=-1)
            outs.append((F.silu(gate) * up) @ w2[e])
        torch.autograd.backward(torch.cat(outs), dy)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    walls = []
    for _ in range(20):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    wall = sorted(walls)[10]

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    gpu = median_seconds(graph.replay, 20, 5)

    # The host's issue time, measured with the GPU's queue kept full by a
    # long kernel first so that nothing the host does waits for the GPU.
    big = rand(16384, 16384)
    issues = []
    for _ in range(10):
        for _ in range(6):
            big @ big
        t0 = time.perf_counter()
        step()
        issues.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    issue = sorted(issues)[5]
    report(f"experts.{tag}.eager_wall", wall * 1e3, "ms")
    report(f"experts.{tag}.eager_gpu", gpu * 1e3, "ms")
    report(f"experts.{tag}.eager_host_issue", issue * 1e3, "ms")


def experts(eager):
    configs = (("qwen3_30b", 16, 4096, 2048, 768), ("qwen3_235b", 4, 4096, 4096, 1536))
    for config in configs:
        expert_gemms(*config)
    for config in configs if eager else ():
        eager_experts(*config)


def attention():
    heads, dim, chunk = 16, 128, 4096
    q = rand(1, heads, chunk, dim).requires_grad_()
    for keys in (4096, 16384, 65536, 131072):
        k, v = (rand(1, heads, keys, dim).requires_grad_() for _ in range(2))
        flops = 4 * heads * dim * (chunk * keys - chunk * chunk / 2)
        for backend, label in ((SDPBackend.CUDNN_ATTENTION, "cudnn"),
                               (SDPBackend.FLASH_ATTENTION, "flash")):
            with sdpa_kernel([backend]):
                mask = causal_lower_right(chunk, keys)
                if backend == SDPBackend.CUDNN_ATTENTION:
                    def forward():
                        return masked_by_parts(q, k, v, chunk, keys)
                else:
                    def forward():
                        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                try:
                    grad = torch.randn_like(forward())
                    fwd = median_seconds(forward)
                    both = median_seconds(
                        lambda: torch.autograd.grad(forward(), (q, k, v), grad))
                except RuntimeError as err:
                    print(f"attention.{label}.keys{keys} skipped: {err}".splitlines()[0])
                    continue
            report(f"attention.{label}.keys{keys}.fwd", fwd * 1e3, "ms")
            report(f"attention.{label}.keys{keys}.bwd", (both - fwd) * 1e3, "ms")
            report(f"attention.{label}.keys{keys}.fwd_rate", flops / fwd / 1e12, "TFLOP/s")
            report(f"attention.{label}.keys{keys}.bwd_rate",
                   2.5 * flops / (both - fwd) / 1e12, "TFLOP/s")


def masked_by_parts(q, k, v, chunk, keys):
    """Bottom-right causal attention's kernels from cuDNN's two masks: the
    keys before the chunk unmasked, the chunk's own causally. Only their
    time is wanted: the sum stands in for the log-sum-exp merge TE's
    context parallelism does, one elementwise pass like it."""
    if keys == chunk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    own = F.scaled_dot_product_attention(q, k[:, :, -chunk:], v[:, :, -chunk:],
                                         is_causal=True)
    past = F.scaled_dot_product_attention(q, k[:, :, :-chunk], v[:, :, :-chunk])
    return own + past


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--only", nargs="+",
                        choices=("sustained", "experts", "eager", "ksweep", "attention"))
    args = parser.parse_args()
    print("device", torch.cuda.get_device_name().replace(" ", "_"), "torch", torch.__version__)
    parts = args.only or ("sustained", "experts", "eager", "ksweep", "attention")
    if "sustained" in parts:
        sustained(args.seconds)
    if "experts" in parts or "eager" in parts:
        experts("eager" in parts)
    if "ksweep" in parts:
        ksweep()
    if "attention" in parts:
        attention()
