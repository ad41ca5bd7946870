"""Sequence parallelism as DTensor runs it, and its twin over the width: norms and the residual
stream split over the tensor-parallel group along one dimension, between the modules that hand
them that split and the ones that gather it back (or read their own slice of it).

A norm whose split beyond the batch is one axis its weights lack (the sequence), ``tp`` ways, runs
as ``SequenceParallel`` (its weights whole on every device of the group, its input and output
DTensors split along that dimension); one whose split is the axis its weights have (the width)
runs with its weights split the same way (``width``: each device normalises its slice of every
token, the statistics all-reduced over the group). Operators without weights may keep such a
split between them (the residual additions) when every tensor they read comes from such an
operator, from a stream norm, or from a module that hands its output on split that way: a
row-parallel product or a vocabulary-split embedding reduce-scatter their partial sums
(``RowwiseParallel`` with ``output_layouts=Shard(d)``), a column-parallel module (an embedding
split over the width, a product over its output features) hands its split of the width on as it
is, a module whose output is whole takes its device's slice. A
module whose first operator is a view without weights (Hugging Face's ``Conv1D`` flattens its
input) reads through it. Every reader must be another of them, a stream norm, a module that reads the
tensor whole, which gathers it (``ColwiseParallel`` with ``input_layouts=Shard(d)``; a whole
module gathers it before it runs), or a row-parallel module that splits its input features the
way the stream splits the width, which reads its own slice as it is. The split tensors travel as
DTensors with the whole shape, so that a model's code that reads sizes from them (attention's
heads, position ids) reads the sizes it was written for. :func:`sequence_layouts` finds them in a
strategy; what does not hold runs whole (:func:`~stratopt.planning.torchplan.as_run`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Operator
from stratopt.planning.batch import batch_axes

__all__ = [
    "STREAM_NORMS",
    "SequenceLayouts",
    "sequence_layouts",
    "sequence_norm",
    "sequenced",
    "stream_norm",
    "width_norm",
]

#: Module styles that read their input whole (and so may gather a sequence split).
_WHOLE_INPUT = ("colwise", "replicate")
#: Module styles that may hand their output on split over the sequence (a reduce-scatter of partial
#: sums, or a slice of a whole output).
_HANDS_ON = ("rowwise", "vocab", "replicate")
#: The styles of norms on a split stream: over the sequence, or over the width their weights share.
STREAM_NORMS = ("sequence", "width")


def sequence_norm(op: Operator, config: dict[str, int], batch: Sequence[str], tp: int) -> bool:
    """Whether norm ``op`` under ``config`` splits one axis its weights lack (beyond ``batch``)
    ``tp`` ways and nothing else beyond the batch: ``SequenceParallel``'s form."""
    if op.op != "norm" or tp == 1:
        return False
    rest, weights = _beyond_batch(op, config, batch)
    return len(rest) == 1 and math.prod(rest.values()) == tp and not set(rest) & weights


def stream_norm(op: Operator, config: dict[str, int], batch: Sequence[str], tp: int) -> str | None:
    """``"sequence"`` or ``"width"`` where norm ``op`` under ``config`` takes that form on a split
    stream (:func:`sequence_norm`, :func:`width_norm`), else None."""
    return (
        "sequence" if sequence_norm(op, config, batch, tp) else "width" if width_norm(op, config, batch, tp) else None
    )


def width_norm(op: Operator, config: dict[str, int], batch: Sequence[str], tp: int) -> bool:
    """Whether norm ``op`` under ``config`` splits one axis its weights have (the width) ``tp``
    ways and nothing else beyond ``batch``, and is either a root-mean-square norm written as
    several calls (:mod:`~stratopt.importers.trace`'s ``calls``: Hugging Face's ``LlamaRMSNorm``
    and its kin, one scale and no bias), whose operators DTensor runs on the split (the statistics
    all-reduced forward, their gradient reduce-scattered backward), or PyTorch's ``nn.LayerNorm``
    (``fused``: DTensor would gather its input), which :mod:`stratopt.torch.norms` runs on the
    split (its two statistics all-reduced forward, two sums backward): the ``width`` form, weights
    split alike. Any other fused norm has no such form."""
    rms = int(op.attrs.get("calls", 1)) > 1 and len(op.attrs.get("params") or ()) <= 1
    if op.op != "norm" or tp == 1 or not (rms or op.attrs.get("fused") == "layer_norm"):
        return False
    rest, weights = _beyond_batch(op, config, batch)
    return len(rest) == 1 and math.prod(rest.values()) == tp and set(rest) <= weights


def _beyond_batch(op: Operator, config: dict[str, int], batch: Sequence[str]) -> tuple[dict[str, int], set[str]]:
    """(the axes ``config`` splits beyond ``batch``, with their ways; the axes of ``op``'s weights)."""
    weights = {a for i in op.inputs if i.param for group in i.use.dims for a in group}
    return {a: c for a, c in config.items() if a not in batch and c > 1}, weights


@dataclass
class SequenceLayouts:
    """A strategy's sequence-parallel parts: ``members`` the operators that keep the split (free
    operators and sequence norms) with the dimension of their output it splits, ``made`` the
    modules that hand one on (their output dimension), ``taken`` the modules that gather one or
    read their slice of it (their input's dimension)."""

    members: dict[int, int] = field(default_factory=dict)
    made: dict[int, int] = field(default_factory=dict)
    taken: dict[int, int] = field(default_factory=dict)


def _split_dim(op: Operator, use: Any, config: dict[str, int], batch: Sequence[str]) -> int | None:
    """The one dimension of tensor ``use`` that ``op`` splits beyond its batch (None: none, or more),
    -1 where it is the last (the width: so counted in a module's output that a view inside it, such
    as the one ``Conv1D`` flattens its input with, gives another rank)."""
    dims = [i for i, group in enumerate(use.dims) if any(config.get(a, 1) > 1 and a not in batch for a in group)]
    return None if len(dims) != 1 else -1 if dims[0] == len(use.dims) - 1 else dims[0]


def sequence_layouts(
    costing: Any, assignment: Sequence[int], laid: tuple[Any, ...], config: Any, tp: int
) -> SequenceLayouts:
    """The operators of ``assignment`` that run sequence-parallel (see the module's docstring):
    ``laid`` what :func:`~stratopt.planning.torchplan._laid_out` found (each operator's DTensor
    style, its outgoing and incoming edges, the column-parallel regions, split along the features
    and not the sequence, and the modules whose region stays split), ``config(v)`` an operator's
    split as a dict."""
    styles, out_edges, in_edges, regions, shard_out = laid
    inside = set().union(*(regions[v] for v in shard_out)) if shard_out else set()
    batches = batch_axes(costing.graph)
    ops, edges, problem = costing.graph.operators, costing.edges, costing.problem

    def cost(e: int) -> float:
        u, w, _ = edges[e]
        return float(problem.edge_cost(e)[assignment[u], assignment[w]])

    def dim_in(w: int, e: int) -> int | None:
        return _split_dim(ops[w], ops[w].inputs[edges[e][2]].use, config(w), batches[ops[w].name])

    candidates: dict[int, int] = {}
    for v, op in enumerate(ops):
        if v in inside or not out_edges.get(v):
            continue
        if styles[v] in STREAM_NORMS or (
            styles[v] == "free"
            and math.prod(c for a, c in config(v).items() if a not in batches[op.name]) == tp
            and tp > 1
        ):
            d = _split_dim(op, op.outputs[0], config(v), batches[op.name]) if op.outputs else None
            if d is not None:
                candidates[v] = d

    def style(v: int) -> str:  # a stream norm dropped runs whole (as_run), as a whole module
        return "replicate" if styles[v] in STREAM_NORMS and v not in candidates else styles[v]

    entry = _entries(ops, styles)

    def hands_on(u: int, d: int | None) -> bool:
        """Whether module ``u`` may hand its output on split along ``d``: reduce-scattered or sliced,
        or, split over its output features (an embedding over its width), as it is."""
        width = styles[u] == "colwise" and d == -1
        return d is not None and (style(u) in _HANDS_ON or width)

    def whole_module(w: int, e: int, d: int | None, source: int) -> bool:
        """Whether ``w`` is a module (or an operator without weights at a module's entry, such as
        the view Hugging Face's ``Conv1D`` flattens its input with) that reads the tensor of edge
        ``e`` whole (and may gather it), or a row-parallel one that reads its slice of a width
        norm's output split along ``d``."""
        m = entry.get(w, w)
        if style(m) == "rowwise":
            return style(source) == "width" and d is not None and dim_in(w, e) == d
        return style(m) in _WHOLE_INPUT and (styles[m] in STREAM_NORMS or dim_in(w, e) is None)

    # a tensor no edge brings (the model's or a pipeline stage's input) arrives whole, as a plain tensor
    for v in [v for v in candidates if any(i.source is None and not i.param for i in ops[v].inputs)]:
        del candidates[v]
    while True:  # drop what does not hold until everything left does
        bad = set()
        for v in candidates:
            for u, e in in_edges.get(v, []):
                if u in candidates:
                    if cost(e) > 0.0:
                        bad.add(v)
                elif not hands_on(u, dim_in(v, e)):
                    bad.add(v)  # (the edge from a module may cost: a slice's gradient is gathered back)
                elif any(
                    w not in candidates and not whole_module(w, f, dim_in(v, e), u) for w, f in out_edges.get(u, [])
                ):
                    bad.add(v)  # a module hands its output on split to every reader: a module gathers it
            for w, e in out_edges.get(v, []):
                if w not in candidates and not whole_module(w, e, candidates[v], v):
                    bad.add(v)
        if not bad:
            break
        for v in bad:
            del candidates[v]
    out = SequenceLayouts(members=dict(candidates))
    for v in candidates:
        for u, e in in_edges.get(v, []):
            if u not in candidates:
                out.made[u] = int(dim_in(v, e) or 0)  # (not None: checked above)
                for w, _ in out_edges.get(u, []):  # its other readers, modules, gather it
                    if w not in candidates:
                        out.taken[entry.get(w, w)] = out.made[u]
        for w, _ in out_edges.get(v, []):
            if w not in candidates:
                out.taken[entry.get(w, w)] = candidates[v]
    return out


def _entries(ops: Sequence[Operator], styles: dict[int, str]) -> dict[int, int]:
    """Each operator without weights inside a module that holds some (named after it, as the
    importers name a module's inner calls) with the module's weight-holding operator: where the
    module reads a tensor through it, the module reads it."""
    modules: dict[str, int] = {}
    for v, op in enumerate(ops):
        params = op.attrs.get("params") or ()
        if styles.get(v, "free") != "free" and params:
            modules.setdefault(str(params[0]).rpartition(".")[0], v)
    out = {}
    for w, op in enumerate(ops):
        owner = modules.get(op.name.rpartition(".")[0])
        if styles.get(w) == "free" and owner is not None and not op.attrs.get("params"):
            out[w] = owner
    return out


def sequenced(placement: Any, taken: int | None, made: int | None, *, fused: bool = False) -> Any:
    """A placement that reads (``taken``) or hands on (``made``) a tensor split over the stream's
    dimension (:mod:`~stratopt.planning.sequence`; the dimension split), with its collectives as
    DTensor runs them: a gathering module all-gathers its input forward and reduce-scatters its
    input's gradient (a column-parallel one's all-reduce), a row-parallel module reading its slice
    of the width issues nothing for it (not the gather of its input's gradient a whole input needs),
    a row-parallel module or vocabulary-split embedding reduce-scatters its partial sums (its
    all-reduce) and gathers their gradient, an embedding split over the width hands its split on
    as it is (not the gather of its output), a whole module slices its output (and gathers the
    gradient back), a sequence norm all-reduces its weights' gradient over the group (each device's
    tokens add their part), a width norm its statistics forward (each device holds a slice of
    every token) and reduce-scatters their gradient backward (a ``fused`` layer norm all-reduces two
    sums backward instead). ``placement``: a :class:`~stratopt.planning.torchplan.ModulePlacement`."""
    if placement.tp in STREAM_NORMS and made is None:
        raise ModelError(f"module {placement.module}: a norm split over the {placement.tp} with no split stream")
    if taken is None and made is None:
        return placement
    forward = dict(placement.collectives.get("forward", {}))
    backward = dict(placement.collectives.get("backward", {}))

    def add(counts: dict[str, int], kind: str, n: int) -> None:
        counts[kind] = counts.get(kind, 0) + n

    if placement.tp == "sequence":
        add(backward, "all_reduce", 1)
    elif placement.tp == "width":
        add(forward, "all_reduce", 1)
        add(backward, "all_reduce" if fused else "reduce_scatter", 1)
    else:
        if taken is not None and placement.tp == "rowwise":
            if placement.input == "replicate" and backward.get("all_gather", 0) > int(placement.fsdp):
                add(backward, "all_gather", -1)  # its slice read as it is: no gradient gathered back
        elif taken is not None:
            add(forward, "all_gather", 1)
            if placement.tp == "colwise":
                add(backward, "all_reduce", -1)
                add(backward, "reduce_scatter", 1)
        if made is not None:
            if placement.tp in ("rowwise", "vocab"):
                add(forward, "all_reduce", -1)
                add(forward, "reduce_scatter", 1)
            if placement.tp == "colwise":  # a column-parallel module hands its split of the width on as it is
                add(forward, "all_gather", -1)
            else:
                add(backward, "all_gather", 1)
    dim = made if made is not None else taken
    return dataclasses.replace(
        placement,
        input="sequence" if taken is not None or placement.tp in STREAM_NORMS else placement.input,
        output="sequence" if made is not None else placement.output,
        collectives={**placement.collectives, "forward": _nonzero(forward), "backward": _nonzero(backward)},
        sequence_dim=int(dim if dim is not None else -1),
    )


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: n for k, n in counts.items() if n}
