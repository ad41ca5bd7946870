"""Fused projections split column-parallel: a product whose output the model cuts into equal pieces
along its last dimension (GPT-2's ``c_attn``: query, key and value in one weight; a fused gate and
up projection), each device holding its share of every piece.

The weight's output features (and the bias) are laid out interleaved, as DTensor's
``_StridedShard`` says (as if cut into the pieces first, each piece then split over the
tensor-parallel group), so the full tensors, their gradients and a saved state read as the model's
own; the product then makes each device's share of every piece with no collective, and the
model's own ``split``, written for the whole width, cuts each device's output at its pieces' local
width (:func:`pieces_class`). With FSDP over the data-parallel groups a weight shards over the
dimension the interleaving leaves alone (:func:`beside_pieces`), and a vector that has only that
one (the bias) stays out of FSDP, its gradient all-reduced over the groups instead
(:func:`strided_vectors`)."""

from __future__ import annotations

import functools
from functools import partial
from typing import Any

from stratopt.errors import ModelError

__all__ = ["beside_pieces", "fused_colwise", "pieces_class", "strided_vectors"]


def _strided(param: Any) -> Any:
    """The ``_StridedShard`` placement of a DTensor parameter, else None."""
    from torch.distributed.tensor.placement_types import _StridedShard

    for place in getattr(param, "placements", ()):
        if isinstance(place, _StridedShard):
            return place
    return None


def fused_colwise(name: str, module: Any, pieces: int, into: Any) -> Any:
    """ColwiseParallel for ``module`` (``nn.Linear`` or Hugging Face's ``Conv1D``, whose weight is
    stored ``[in, out]``), whose output the model cuts into ``pieces`` equal pieces: its weight and
    bias interleaved over the group, its input laid out as ``into`` says (then made whole), and its
    local output handed on as a :func:`pieces_class` tensor."""
    import torch
    from torch.distributed.tensor import DTensor, distribute_module, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel
    from torch.distributed.tensor.placement_types import _StridedShard

    conv1d = type(module).__name__ == "Conv1D"

    def features(pname: str) -> int:  # the dimension of a parameter that runs along the output features
        return 1 if conv1d and pname == "weight" else 0

    class FusedColwise(ColwiseParallel):
        def _apply(self, module: Any, device_mesh: Any) -> Any:
            ways = device_mesh.size()
            for pname, param in module.named_parameters(recurse=False):
                if param.shape[features(pname)] % (pieces * ways):
                    raise ModelError(
                        f"module {name!r}: its {pname}'s {pieces} pieces of {param.shape[features(pname)] // pieces} "
                        f"do not split over {ways} devices"
                    )

            def partition(_name: str, mod: Any, mesh: Any) -> None:
                for pname, param in list(mod.named_parameters(recurse=False)):
                    dt = distribute_tensor(param, mesh, [_StridedShard(features(pname), split_factor=pieces)])
                    mod.register_parameter(pname, torch.nn.Parameter(dt, requires_grad=param.requires_grad))

            def output(_mod: Any, outputs: Any, _mesh: Any) -> Any:
                want = (_StridedShard(outputs.dim() - 1, split_factor=pieces),)
                if not isinstance(outputs, DTensor) or outputs.placements != want:
                    got = outputs.placements if isinstance(outputs, DTensor) else type(outputs).__name__
                    raise ModelError(f"module {name!r}: DTensor laid its output out as {got}, not interleaved")
                local = outputs.to_local().as_subclass(pieces_class())
                local.ways = ways
                return local

            return distribute_module(
                module,
                device_mesh,
                partition,
                partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                output,
            )

    return FusedColwise(input_layouts=into)


@functools.cache
def pieces_class() -> Any:
    """The type of a fused projection's local output: a tensor whose ``split`` along its last
    dimension cuts each size the model wrote for the whole width into this device's share
    (``ways``: the devices sharing each piece); whatever is made from it is a plain tensor."""
    import torch

    class Pieces(torch.Tensor):
        ways = 1

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = dict(kwargs or {})
            if func in (torch.split, torch.Tensor.split) and args and isinstance(args[0], cls):
                whole, ways = args[0], args[0].ways
                size = kwargs.pop(
                    "split_size_or_sections", kwargs.pop("split_size", args[1] if len(args) > 1 else None)
                )
                dim = kwargs.pop("dim", args[2] if len(args) > 2 else 0)
                if dim % whole.dim() == whole.dim() - 1:
                    size = size // ways if isinstance(size, int) else [s // ways for s in size]
                args = (whole, size, dim)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)

    return Pieces


def beside_pieces(param: Any) -> Any:
    """FSDP's placement for ``param`` over the data-parallel groups (``shard_placement_fn``): a
    matrix interleaved over its first dimension (a fused ``nn.Linear``'s weight) shards over its
    second; anything else as FSDP does by default (None)."""
    from torch.distributed.tensor import Shard

    place = _strided(param)
    return Shard(1) if place is not None and place.dim == 0 and param.dim() == 2 else None


def strided_vectors(module: Any) -> list[Any]:
    """``module``'s parameters interleaved over their only dimension (a fused projection's bias):
    FSDP has no placement that composes with that, so they stay whole over the data-parallel
    groups, their gradients all-reduced there."""
    return [p for p in module.parameters(recurse=False) if p.dim() == 1 and _strided(p) is not None]
