"""Norms split over their width on the tensor-parallel group (the plan's ``width`` style): each
device holds a slice of every token's features and the matching slice of the norm's weights.

A root-mean-square norm written as several calls (Hugging Face's ``LlamaRMSNorm`` and kin) runs as
it is: its input is a DTensor split over its last dimension and DTensor's own operators all-reduce
the statistic each device sums over its slice. A fused ``nn.LayerNorm`` has no such form (DTensor
gathers its input for ``layer_norm``), so it runs :func:`width_layer_norm` instead: the two sums of
every token (its values and their squares) all-reduced in one collective forward, the two sums
its input gradient needs in one backward, what the cost model prices for a norm split over its
axis. The variance is the mean square less the squared mean, accumulated in float32 at least (as
PyTorch's kernels accumulate half-precision norms), so a token whose features share a mean large
beside their spread (more than a thousand times its standard deviation) loses precision that the
fused kernel keeps.
"""

from __future__ import annotations

from types import MethodType
from typing import Any

from stratopt.errors import ModelError
from stratopt.importers.common import layer_norm_module

__all__ = ["split_width", "width_layer_norm"]


def split_width(torch: Any, module: Any, mesh: Any) -> None:
    """Split norm ``module`` over its width on the 1-D ``mesh``: its weights ``Shard(0)`` (their
    one dimension, as its input splits its last), and an ``nn.LayerNorm`` (exactly, not a subclass
    with a forward of its own) run as :func:`width_layer_norm`."""
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

    def shard(_name: str, mod: Any, mesh: Any) -> None:
        for pname, param in list(mod.named_parameters(recurse=False)):
            split = torch.nn.Parameter(distribute_tensor(param.data, mesh, [Shard(0)]), param.requires_grad)
            mod.register_parameter(pname, split)

    distribute_module(module, mesh, shard)
    if layer_norm_module(module, torch.nn):
        module.forward = MethodType(width_layer_norm, module)


def width_layer_norm(module: Any, x: Any) -> Any:
    """``module``'s forward (an ``nn.LayerNorm`` whose weights are split over the width) on ``x``, a
    DTensor split over its last dimension: the same split of the normalised tensor."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(x, DTensor) or tuple(x.placements) != (Shard(x.ndim - 1),):
        got = getattr(x, "placements", type(x).__name__)
        raise ModelError(f"a norm split over its width reads a DTensor split over its last dimension, not {got}")
    mesh = x.device_mesh
    weight, bias = (None if p is None else p.to_local() for p in (module.weight, module.bias))
    y = _WidthLayerNorm.apply(
        x.to_local(), weight, bias, float(module.eps), int(module.normalized_shape[0]), mesh.get_group()
    )
    return DTensor.from_local(y, mesh, [Shard(x.ndim - 1)], run_check=False, shape=x.shape, stride=x.stride())


def _autograd() -> Any:
    import torch
    import torch.distributed as dist

    class Function(torch.autograd.Function):
        """Layer normalisation of each device's slice of every token, the statistics summed over
        ``group``: forward the sums of the values and of their squares, backward the sums of the
        scaled output gradient and of its product with the normalised input."""

        @staticmethod
        def forward(ctx: Any, x: Any, weight: Any, bias: Any, eps: float, width: int, group: Any) -> Any:
            wide = x.to(torch.promote_types(x.dtype, torch.float32))
            sums = torch.stack([wide.sum(-1), (wide * wide).sum(-1)])
            if group is not None:  # (None: the whole width on one device)
                dist.all_reduce(sums, group=group)
            mean = sums[0] / width
            rstd = torch.rsqrt((sums[1] / width - mean * mean).clamp_min(0.0) + eps)
            normed = (wide - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
            ctx.save_for_backward(x, mean, rstd, weight)
            ctx.width, ctx.group, ctx.bias = width, group, None if bias is None else bias.dtype
            y = normed if weight is None else normed * weight
            return (y if bias is None else y + bias).to(x.dtype)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            x, mean, rstd, weight = ctx.saved_tensors
            wide = x.to(mean.dtype)
            normed = (wide - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
            g = grad.to(mean.dtype)
            scaled = g if weight is None else g * weight
            sums = torch.stack([scaled.sum(-1), (scaled * normed).sum(-1)])
            if ctx.group is not None:
                dist.all_reduce(sums, group=ctx.group)
            mean_g, mean_gn = (s.unsqueeze(-1) / ctx.width for s in sums)
            grad_x = (rstd.unsqueeze(-1) * (scaled - mean_g - normed * mean_gn)).to(x.dtype)
            rows = tuple(range(g.ndim - 1))
            grad_w = None if weight is None else (g * normed).sum(rows).to(weight.dtype)
            grad_b = None if ctx.bias is None else g.sum(rows).to(ctx.bias)
            return grad_x, grad_w, grad_b, None, None, None

    return Function


class _WidthLayerNorm:
    """The autograd function, made on first use (torch is imported only where a plan runs):
    ``apply(x, weight, bias, eps, width, group)`` with local tensors, ``width`` the whole width,
    ``group`` the devices that hold the rest of it (None: none)."""

    _made: Any = None

    @classmethod
    def apply(cls, *args: Any) -> Any:
        if cls._made is None:
            cls._made = _autograd()
        return cls._made.apply(*args)
