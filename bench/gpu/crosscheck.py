"""An independent check of `autopar profile`'s numbers with PyTorch: bf16
and fp16 GEMMs (torch.matmul, cuBLAS underneath) and a 1 GiB device copy,
timed the way the profiler times them (CUDA events, median of 20 after 5
warm-ups, operands uniform in [-1, 1)).

    python3 bench/gpu/crosscheck.py
"""
import torch


def median_seconds(fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return sorted(times)[iters // 2]


def gemms():
    torch.manual_seed(0)
    for dt in (torch.bfloat16, torch.float16):
        for m, n, k in ((8192, 8192, 8192), (4096, 16384, 4096), (16384, 4096, 16384)):
            a = torch.rand(m, k, device="cuda", dtype=dt) * 2 - 1
            b = torch.rand(k, n, device="cuda", dtype=dt) * 2 - 1
            t = median_seconds(lambda: a @ b)
            print(f"torch {dt} m={m} n={n} k={k} {t * 1e3:.3f} ms "
                  f"{2 * m * n * k / t / 1e12:.1f} TFLOP/s")


def short_gemms():
    """Grid shapes of tens of microseconds, timed as the profiler times them
    since session 20: launches back to back over operand sets that do not
    fit in L2, here 64 of them replayed from a CUDA graph over 8 sets, so
    neither the host nor an idle queue is in the figure."""
    torch.manual_seed(0)
    for m, n, k in ((2048, 1536, 4096), (2048, 4096, 512), (2048, 2048, 4096),
                    (2048, 4096, 2048), (8192, 1536, 4096), (8192, 4096, 512)):
        sets = [(torch.rand(m, k, device="cuda", dtype=torch.bfloat16) * 2 - 1,
                 torch.rand(k, n, device="cuda", dtype=torch.bfloat16) * 2 - 1,
                 torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
                for _ in range(8)]
        reps = 64
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for a, b, c in sets:
                torch.matmul(a, b, out=c)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(reps):
                a, b, c = sets[i % len(sets)]
                torch.matmul(a, b, out=c)
        t = median_seconds(g.replay) / reps
        print(f"torch back-to-back bf16 m={m} n={n} k={k} {t * 1e6:.1f} us "
              f"{2 * m * n * k / t / 1e12:.1f} TFLOP/s")


def copy():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = median_seconds(lambda: y.copy_(x))
    print(f"torch copy 1 GiB: {2 * (1 << 30) / t / 1e9:.0f} GB/s (read + write)")


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    gemms()
    short_gemms()
    copy()
