"""Micro-batches: the model's batch followed through the graph and cut, and the pipeline search over
how many micro-batches the batch is cut into."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.planning.batch import batch_size, follow_batch
from stratopt.planning.pipeline import search
from stratopt.planning.stages import PipelinePlan


def microbatch(graph: Graph, parts: int) -> Graph:
    """``graph`` with its batch cut into ``parts``: one micro-batch.

    The batch is followed through the graph (:func:`~stratopt.planning.batch.follow_batch`); each
    operator's batch axes are cut into ``parts``, with every dimension of its tensors that they
    index. Raises :class:`ModelError` when the batch does not divide, or cannot be followed.

    Examples
    --------
    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("mlp"); _ = g.fc(g.fc(g.input((64, 32)), 16), 8)
    >>> [op.outputs[0].shape for op in microbatch(g.build(), 4)]
    [(16, 16), (16, 8)]
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ModelError(f"the number of micro-batches must be a positive integer, got {parts!r}")
    if parts == 1:
        return graph
    batch = batch_size(graph)
    if batch is None:
        raise ModelError(f"{graph.name}: no data input to take the batch from")
    if batch % parts:
        raise ModelError(f"{graph.name}: a batch of {batch} does not split into {parts} micro-batches")
    followed = follow_batch(graph)
    out = []
    for op in graph.operators:
        scaled = set(followed[op.name])
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
        out.append(dataclasses.replace(op, sizes=tuple(sizes), inputs=inputs, outputs=outputs))
    try:
        return Graph(f"{graph.name}/{parts}", tuple(out), graph.source, graph.cutoff)
    except ModelError as e:
        raise ModelError(f"{graph.name}: cannot cut the batch into {parts} micro-batches: {e}") from None


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
        batch = batch_size(graph) or 1
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
