"""What check-plan, train and the pipeline stages share: the model built from its entry point, the
loss every model has, and a gradient or parameter as a whole tensor or this rank's part."""

from __future__ import annotations

import functools
import math
from typing import Any

from stratopt.errors import ModelError
from stratopt.instances.entry_points import call_entry_point

#: A gradient smaller than this share of its expected size is rounding noise (see errors_of).
FLOOR = 1e-3

__all__ = ["FLOOR", "build_model", "errors_of", "full", "local_part", "loss_of", "loss_weights", "tensors_of"]


def build_model(entry: str, seed: int, dtype: str = "float32") -> tuple[Any, tuple[Any, ...]]:
    """The model and inputs of a ``module:function`` entry point, its weights drawn from ``seed``."""
    import torch

    torch.manual_seed(seed)
    made = call_entry_point(entry, device="cpu")
    if not (isinstance(made, tuple) and len(made) == 2):
        raise ModelError(f"{entry}: expected (model, example_inputs) from the entry point")
    model, inputs = made
    inputs = tuple(inputs) if isinstance(inputs, list | tuple) else (inputs,)
    cast = getattr(torch, dtype)
    inputs = tuple(t.to(cast) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)
    return model.to(cast).eval(), inputs


def loss_of(out: Any, part: int = 0, parts: int = 1) -> Any:
    """The sum, over the model's floating-point outputs that keep the batch (the first one's size
    along their first dimension), of each output's mean times a fixed random tensor of the whole
    batch's shape (this rank's ``part`` of ``parts`` along the batch): a loss every model has,
    which a final normalisation does not make constant, and which every operator the graph prices
    reaches (BERT's pooler, an output of its own beside the hidden states)."""
    import torch

    outputs = [t for t in tensors_of(out, torch) if t.is_floating_point() and t.dim() > 0]
    if not outputs:
        raise ModelError("the model returns no floating-point tensor to take a loss of")
    batch = outputs[0].shape[0]
    total = None
    for t in outputs:
        if t.shape[0] != batch:
            continue
        whole = (t.shape[0] * parts, *t.shape[1:])
        term = (t * loss_weights(whole, parts, part, t.dtype, t.device)).mean()
        total = term if total is None else total + term
    return total


def tensors_of(obj: Any, torch: Any) -> list[Any]:
    """The tensors in a model's input or output (a tensor, a tuple or list, a dict or a Hugging Face
    ``ModelOutput``), in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for x in obj for t in tensors_of(x, torch)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in tensors_of(x, torch)]
    values = getattr(obj, "values", None)  # a Hugging Face ModelOutput
    return [t for x in values() for t in tensors_of(x, torch)] if callable(values) else []


@functools.lru_cache(maxsize=8)
def loss_weights(whole: tuple[int, ...], parts: int, part: int, dtype: Any, device: Any) -> Any:
    """The loss's fixed random tensor (drawn once per shape: a step does not pay for drawing it)."""
    import torch

    weights = torch.randn(whole, generator=torch.Generator().manual_seed(1234), dtype=torch.float64)
    return weights.chunk(parts, dim=0)[part].to(dtype=dtype, device=device)


def full(t: Any) -> Any:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def local_part(t: Any) -> Any:
    return t.to_local() if hasattr(t, "to_local") else t


def _relative(a: Any, b: Any, floor: float = 0.0) -> float:
    """``||a - b|| / max(||b||, floor)`` (Frobenius; 0 for two zero tensors)."""
    scale = max(float(b.double().norm()), floor)
    diff = float((a.double() - b.double()).norm())
    return diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)


def errors_of(grads: dict[str, Any], reference: dict[str, Any]) -> dict[str, float]:
    """Each gradient's relative error against one process. A gradient that is zero in exact
    arithmetic (a key projection's bias under softmax, which shifts every score of a query alike) is
    rounding noise in both runs; it is measured against :data:`FLOOR` times the size a gradient of
    its size has in this model (the whole gradient's norm, in proportion to its share of the
    elements), not against its own noise."""
    total = math.sqrt(sum(float(g.double().norm()) ** 2 for g in reference.values()))
    elements = sum(g.numel() for g in reference.values()) or 1
    return {
        n: _relative(grads[n], g, FLOOR * total * math.sqrt(g.numel() / elements)) if n in grads else math.inf
        for n, g in reference.items()
    }
