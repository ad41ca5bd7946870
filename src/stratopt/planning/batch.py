"""The batch, followed through the graph: which axes of each operator index the samples.

The batch is the first dimension of the graph's data inputs (those of the first one's size; weights
are not data). An operator's axes that index a batch-carrying dimension of an input are its batch
axes (the first of a dimension's axes where several index it: ``b`` of a merged ``b * s``), and the
output dimensions they index carry the batch on. Data parallelism splits these axes; micro-batches
cut them (:func:`~stratopt.planning.microbatch.microbatch`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph, Operator

__all__ = ["batch_axes", "batch_size", "follow_batch", "shared"]


def batch_size(graph: Graph) -> int | None:
    """The batch: the first dimension of the graph's first data input (None without one)."""
    return next(
        (
            i.use.shape[0]
            for op in graph.operators
            for i in op.inputs
            if i.source is None and not i.param and i.use.shape
        ),
        None,
    )


def follow_batch(graph: Graph) -> dict[str, tuple[str, ...]]:
    """Each operator's batch axes, followed from the data inputs (an empty tuple where no batch
    reaches it). A :class:`ModelError` when there is no data input, or an operator reads the batch
    along no axis of its own.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("t"); x = g.input((8, 4, 16))  # the batch of 8 moves to the second dimension
    >>> _ = g.fc(g.transpose(x, (1, 0, 2)), 32)
    >>> follow_batch(g.build())
    {'transpose1': ('d0',), 'fc1': ('b1',)}
    """
    batch = batch_size(graph)
    if batch is None:
        raise ModelError(f"{graph.name}: no data input to take the batch from")
    carried: dict[tuple[str, int], frozenset[int]] = {}  # (operator, output) -> batch-carrying dims
    out: dict[str, tuple[str, ...]] = {}
    for op in graph.operators:
        found: dict[str, None] = {}  # ordered, without repeats
        for i in op.inputs:
            if i.source is None:
                dims = frozenset({0}) if not i.param and i.use.shape and i.use.shape[0] == batch else frozenset()
            else:
                dims = carried[(i.source, i.output)]
            for d in dims:
                group = i.use.dims[d]
                if not group:
                    raise ModelError(f"{graph.name}: operator {op.name!r} reads the batch along no axis of its own")
                found[group[0]] = None
        out[op.name] = tuple(found)
        for k, u in enumerate(op.outputs):
            carried[(op.name, k)] = frozenset(d for d, group in enumerate(u.dims) if any(a in found for a in group))
    return out


def batch_axes(graph: Graph) -> dict[str, list[str]]:
    """Each operator's batch axes for data parallelism: those :func:`follow_batch` finds (none for
    an operator no batch reaches: T5's position bias, which every sample shares, :func:`shared`),
    or, in a graph whose batch cannot be followed, each operator's first output dimension's axes."""
    first = {
        op.name: list(op.outputs[0].dims[0]) if op.outputs and op.outputs[0].dims else [] for op in graph.operators
    }
    try:
        followed = follow_batch(graph)
    except ModelError:
        return first
    return {name: list(followed.get(name, ())) for name in first}


def shared(op: Operator, batch: Sequence[str]) -> bool:
    """Whether the samples share ``op`` (its ``batch`` axes, :func:`batch_axes`, are none or of size
    1: a lookup of the positions, a relative position bias): it runs whole on every data-parallel
    device, its batch split 1."""
    return not batch or math.prod(op.size_of(a) for a in batch) == 1
