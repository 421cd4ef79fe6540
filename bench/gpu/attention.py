"""Flash attention's rate by sequence length on this GPU, set up as the
FlashAttention-3 paper's Fig. 5 and 6 (Shah et al. 2024) whose cuDNN
figures the Hopper presets carry (docs/cluster-format.md): head dim 128,
16 heads, 16k tokens in all (batch 16384 / length), bf16; FLOPs
4 * s * s * d per head forward, halved under the causal mask, and the
backward 2.5 times the forward. Runs PyTorch's scaled_dot_product_attention
on its cuDNN backend (Transformer Engine's fused attention is cuDNN's) and
on its flash backend (FlashAttention-2). The backward is timed as forward
plus backward less the forward. At short lengths the Python launch
overhead shows, so those points read low.

    python3 bench/gpu/attention.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from crosscheck import median_seconds

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
HEADS, DIM, TOKENS = 16, 128, 16384


def measure(backend, causal, length):
    batch = TOKENS // length
    q, k, v = (torch.randn(batch, HEADS, length, DIM, device="cuda",
                           dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    with sdpa_kernel([backend]):
        grad = torch.randn_like(F.scaled_dot_product_attention(q, k, v, is_causal=causal))

        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def both():
            torch.autograd.grad(forward(), (q, k, v), grad)

        fwd = median_seconds(forward)
        bwd = median_seconds(both) - fwd
    flops = 4 * batch * HEADS * length * length * DIM * (0.5 if causal else 1)
    return flops / fwd / 1e12, 2.5 * flops / bwd / 1e12


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "torch", torch.__version__,
          "cudnn", torch.backends.cudnn.version())
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        for causal in (True, False):
            for length in LENGTHS:
                f, b = measure(backend, causal, length)
                print(f"{backend.name:16s} causal={causal!s:5s} L={length:5d} "
                      f"fwd {f:6.1f} TFLOP/s  bwd {b:6.1f} TFLOP/s", flush=True)
