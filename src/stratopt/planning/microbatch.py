"""Micro-batches: the model's batch followed through the graph and cut, and the pipeline search over
how many micro-batches the batch is cut into."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.planning.pipeline import search
from stratopt.planning.stages import PipelinePlan


def microbatch(graph: Graph, parts: int) -> Graph:
    """``graph`` with its batch cut into ``parts``: one micro-batch.

    The batch is the first dimension of the graph's data inputs (those of the first one's size;
    weights are not data). It is followed through the graph: an operator's axes that index a
    batch-carrying dimension of an input are its batch axes (the first of a dimension's axes, where
    several index it: ``b`` of a merged ``b * s``); each is cut into ``parts``, with every dimension
    of the operator's tensors that it indexes, and the output dimensions it indexes carry the batch
    on. Raises :class:`ModelError` when the batch does not divide, or cannot be followed.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("mlp"); _ = g.fc(g.fc(g.input((64, 32)), 16), 8)
    >>> [op.outputs[0].shape for op in microbatch(g.build(), 4)]
    [(16, 16), (16, 8)]
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ModelError(f"the number of micro-batches must be a positive integer, got {parts!r}")
    if parts == 1:
        return graph
    batch = _batch(graph)
    if batch is None:
        raise ModelError(f"{graph.name}: no data input to take the batch from")
    if batch % parts:
        raise ModelError(f"{graph.name}: a batch of {batch} does not split into {parts} micro-batches")
    carried: dict[tuple[str, int], frozenset[int]] = {}  # (operator, output) -> batch-carrying dims
    out = []
    for op in graph.operators:
        scaled: set[str] = set()
        for i in op.inputs:
            if i.source is None:
                dims = frozenset({0}) if not i.param and i.use.shape and i.use.shape[0] == batch else frozenset()
            else:
                dims = carried[(i.source, i.output)]
            for d in dims:
                group = i.use.dims[d]
                if not group:
                    raise ModelError(f"{graph.name}: operator {op.name!r} reads the batch along no axis of its own")
                scaled.add(group[0])
        sizes = list(op.sizes)
        for a in scaled:
            k = op.axes.index(a)
            if sizes[k] % parts:
                raise ModelError(
                    f"{graph.name}: operator {op.name!r}: its batch axis {a!r} of size {sizes[k]} does not split into {parts}"
                )
            sizes[k] //= parts

        inputs = tuple(dataclasses.replace(i, use=_cut(i.use, scaled, parts, op.name)) for i in op.inputs)
        outputs = tuple(_cut(u, scaled, parts, op.name) for u in op.outputs)
        for k, u in enumerate(op.outputs):
            carried[(op.name, k)] = frozenset(d for d, group in enumerate(u.dims) if any(a in scaled for a in group))
        out.append(dataclasses.replace(op, sizes=tuple(sizes), inputs=inputs, outputs=outputs))
    try:
        return Graph(f"{graph.name}/{parts}", tuple(out), graph.source, graph.cutoff)
    except ModelError as e:
        raise ModelError(f"{graph.name}: cannot cut the batch into {parts} micro-batches: {e}") from None


def _batch(graph: Graph) -> int | None:
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


def _cut(use: Any, scaled: set[str], parts: int, where: str) -> Any:
    """A tensor use with every dimension indexed by a ``scaled`` axis cut into ``parts``."""
    shape = list(use.shape)
    for d, group in enumerate(use.dims):
        hits = sum(a in scaled for a in group)
        if hits:
            if shape[d] % parts**hits:
                raise ModelError(f"operator {where!r}: a dimension of size {shape[d]} does not split into {parts}")
            shape[d] //= parts**hits
    return dataclasses.replace(use, shape=tuple(shape))


def search_microbatches(
    graph: Graph,
    nodes: int,
    gpus_per_node: int,
    *,
    choices: list[int] | None = None,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> tuple[PipelinePlan, Graph, list[tuple[int, float]]]:
    """The best pipeline for ``graph``'s whole batch cut into M micro-batches, M chosen too: for
    every M in ``choices`` (default: the powers of two that divide the batch, up to 64) the stage
    search (:func:`search`, ``options`` passed on) on one micro-batch (:func:`microbatch`). Returns
    the best plan, its micro-batch graph and every (M, estimate) tried (+inf where nothing fits).
    Smaller micro-batches shrink the pipeline's bubble and its activations in flight, and run each
    operator less efficiently: the trade-off is measured, not assumed.
    """
    say = progress or (lambda _msg: None)
    if choices is None:
        batch = _batch(graph) or 1
        choices = [m for m in (1, 2, 4, 8, 16, 32, 64) if batch % m == 0]
    tried: list[tuple[int, float]] = []
    best: tuple[PipelinePlan, Graph] | None = None
    for m in choices:
        try:
            micro = microbatch(graph, m)
            found = search(micro, nodes, gpus_per_node, microbatches=m, progress=None, **options)
        except ModelError as e:
            if "fits" not in str(e):
                raise
            tried.append((m, math.inf))
            say(f"{graph.name}: {m} micro-batches: nothing fits")
            continue
        tried.append((m, found.estimate))
        say(
            f"{graph.name}: {m} micro-batches: {len(found.stages)} stages, {found.estimate / 1e3:,.2f} ms per iteration"
        )
        if best is None or found.estimate < best[0].estimate:
            best = (found, micro)
    if best is None:
        raise ModelError(f"{graph.name}: no pipeline fits with any of {choices} micro-batches")
    return best[0], best[1], tried
