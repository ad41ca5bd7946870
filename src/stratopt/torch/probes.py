"""The work ``stratopt profile`` times beside the matrix products: fused attention, a
convolution and a transformer block's pointwise work, each built as training runs it, and what the
``default`` profile prices that pointwise work at (:mod:`stratopt.torch.profile` turns their times
into the calibration's efficiencies)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stratopt.cost.costing import build
from stratopt.cost.default import DefaultProfile
from stratopt.importers.pytorch import from_torch
from stratopt.machine import Machine

__all__ = ["attention", "conv", "dispatch_chains", "pointwise_block", "priced_pointwise", "recompute_chains", "shapes"]


def shapes(device: str) -> list[tuple[int, int, int]]:
    """Products measured: squares across sizes, and tall, wide and thin shapes."""
    sizes = (64, 128, 256, 512, 1024, 1536) if device == "cpu" else (256, 512, 1024, 2048, 4096, 8192)
    big = sizes[-2]
    return [(s, s, s) for s in sizes] + [(4 * big, big // 2, big // 2), (big // 2, 4 * big, big // 2), (big, big, 64)]


def attention(torch: Any, dev: Any, dtype: Any, timed: Callable[[Callable[[], Any]], float], device: str) -> dict:
    """Fused causal attention, forward and backward: its seconds and its rate on the causal half of
    its two products, counted as 3.5 forward passes (how the profile prices it)."""
    import torch.nn.functional as F

    b, h, s, d = (2, 8, 512, 64) if device == "cpu" else (8, 16, 2048, 128)
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, s, d, device=dev, dtype=dtype)

    def attend() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    seconds = timed(attend)
    work = 2.0 * (2.0 * b * h * s * s * d) * 0.5  # two products, the causal half
    return {"batch": b, "heads": h, "seq": s, "head_dim": d, "seconds": seconds, "tflops": 3.5 * work / seconds / 1e12}


def conv(torch: Any, dev: Any, dtype: Any, timed: Callable[[Callable[[], Any]], float], device: str) -> dict:
    """A 3 x 3 convolution (padding 1, as a ResNet's), forward and backward (input and weight
    gradients): its seconds and its forward flops."""
    import torch.nn.functional as F

    b, c, side = (8, 64, 32) if device == "cpu" else (32, 256, 56)
    x = torch.randn(b, c, side, side, device=dev, dtype=dtype, requires_grad=True)
    w = torch.randn(c, c, 3, 3, device=dev, dtype=dtype, requires_grad=True)

    def run() -> None:
        F.conv2d(x, w, padding=1).sum().backward()

    return {"batch": b, "channels": c, "side": side, "flops": 2.0 * b * side * side * c * c * 9, "seconds": timed(run)}


def pointwise_block(device: str = "cpu") -> tuple[Any, tuple[Any, ...]]:
    """A transformer block's work besides its products, as a module and its example input (float32):
    a layer norm, the tanh GELU, a gated SiLU, an RMS norm, a softmax and a residual add, over
    4096 rows of 512 (a GPU: 16384 of 4096). ``profile`` times it forward and backward and prices it
    with the ``default`` profile's streams: their ratio is how fast such work streams memory here."""
    import torch
    import torch.nn.functional as F

    rows, width = (4096, 512) if device == "cpu" else (16384, 4096)

    class Pointwise(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(width)
            self.scale = torch.nn.Parameter(torch.ones(width))

        def forward(self, x: Any) -> Any:
            h = F.gelu(self.norm(x), approximate="tanh")
            g = F.silu(h) * x
            r = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6) * self.scale
            return torch.softmax(r, dim=-1) + x

    torch.manual_seed(0)
    return Pointwise(), (torch.randn(rows, width),)


def priced_pointwise(device: str, hbm_gbps: float, dtype_bytes: int) -> float:
    """Seconds the ``default`` profile prices :func:`pointwise_block` at, forward and backward, with
    memory streaming at ``hbm_gbps`` and values of ``dtype_bytes`` (its streams alone: no
    calibration, so no dispatch)."""
    graph = from_torch(*pointwise_block(device), name="pointwise")
    bare = Machine(
        "stream", peak_tflops=1.0, memory_gb=1.0, hbm_gbps=hbm_gbps, devices_per_node=1, intra_gbps=1.0,
        inter_gbps=1.0, dtype_bytes=dtype_bytes,
    )  # fmt: skip
    costing = build(graph, 1, profile=DefaultProfile(bare), machine=bare)
    return sum(float(vc.compute[0]) for vc in costing.vertex_costs) * 1e-6


def dispatch_chains(torch: Any, dev: Any, dtype: Any) -> dict[str, tuple[Any, Any]]:
    """Chains of 32 tiny modules and their input, timed forward and backward for what dispatching
    an operator costs beyond its work: ``weighted`` (linear layers: a product with weights, their
    gradients accumulated), ``kernel`` (tanh: one kernel each way, no weights) and ``view`` (a
    reshape, a view of its input: no kernel)."""

    class Swap(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x.view(x.shape[1], x.shape[0])

    def of(*modules: Any) -> Any:
        return torch.nn.Sequential(*modules).to(device=dev, dtype=dtype)

    tiny = torch.randn(4, 8, device=dev, dtype=dtype, requires_grad=True)
    return {
        "weighted": (of(*(torch.nn.Linear(8, 8) for _ in range(32))), tiny),
        "kernel": (of(*(torch.nn.Tanh() for _ in range(32))), tiny),
        "view": (of(*(Swap() for _ in range(32))), tiny),
    }


def recompute_chains(torch: Any, dev: Any, dtype: Any) -> tuple[Any, Any, Any]:
    """(plain, checkpointed, input): two copies of 4 blocks of 8 tiny modules (linear layers and
    tanh in turn), the second's blocks checkpointed as ``train`` checkpoints a plan's (PyTorch's
    composable ``checkpoint``): what recomputing costs beyond running the forward again."""
    from torch.distributed._composable import checkpoint

    def blocks() -> Any:
        made = (
            torch.nn.Sequential(*(torch.nn.Linear(8, 8) if i % 2 == 0 else torch.nn.Tanh() for i in range(8)))
            for _ in range(4)
        )
        return torch.nn.Sequential(*made).to(device=dev, dtype=dtype)

    plain, again = blocks(), blocks()
    for block in again:
        checkpoint(block, early_stop=False)
    return plain, again, torch.randn(4, 8, device=dev, dtype=dtype, requires_grad=True)
