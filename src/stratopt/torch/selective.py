"""Selective activation checkpointing as a plan keeps it (:mod:`stratopt.planning.recompute`).

A block checkpointed selectively runs under PyTorch's ``create_selective_checkpoint_contexts``
with a policy that saves the products of the modules the plan keeps (the matrix product a module's
forward issues while it is the innermost module running) and the fused attention kernel where the
plan keeps it; every other operation of the block runs again when the backward pass reaches it.
:func:`is_product` and :func:`is_attention` say which operations those are (``stratopt check-plan``
counts them per module and pass with the same tests).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial
from typing import Any

__all__ = ["PRODUCTS", "is_attention", "is_product", "selective_context"]

#: The operations a kept module's products run as (ATen's names).
PRODUCTS = frozenset({"mm", "addmm", "bmm", "baddbmm", "convolution", "_grouped_mm"})


def _aten_name(func: Any) -> str | None:
    packet = getattr(func, "_overloadpacket", func)
    qualified = getattr(packet, "_qualified_op_name", "")
    if not qualified.startswith("aten::"):
        return None
    return qualified.split("::", 1)[1]


def is_product(func: Any) -> bool:
    """Whether ``func`` (an ATen operation) is a matrix product or convolution."""
    return _aten_name(func) in PRODUCTS


def is_attention(func: Any) -> bool:
    """Whether ``func`` is a fused attention kernel (``scaled_dot_product_attention``'s, any backend)."""
    name = _aten_name(func)
    return name is not None and "scaled_dot_product" in name and "backward" not in name


def selective_context(block: str, module: Any, keep: Collection[str], attention: bool) -> Callable[[], Any]:
    """The ``context_fn`` that checkpoints ``module`` (the block named ``block``) keeping the products
    of its submodules named in ``keep`` (qualified names) and, where ``attention``, its attention
    kernel's outputs. Hooks on the block's submodules follow which one runs (in the forward pass and
    in its recomputation alike)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    running: list[str] = []
    kept = frozenset(keep)
    for name, sub in module.named_modules(prefix=block):
        if sub is module:
            continue
        sub.register_forward_pre_hook(lambda _m, _a, name=name: running.append(name))
        sub.register_forward_hook(lambda _m, _a, _o, name=name: _pop(running, name))

    def policy(_ctx: Any, func: Any, *_args: Any, **_kwargs: Any) -> Any:
        if is_attention(func):
            return CheckpointPolicy.MUST_SAVE if attention else CheckpointPolicy.PREFER_RECOMPUTE
        if running and running[-1] in kept and is_product(func):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return partial(create_selective_checkpoint_contexts, policy)


def _pop(running: list[str], name: str) -> None:
    if running and running[-1] == name:
        running.pop()
