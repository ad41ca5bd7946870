"""The operator-graph IR: operators over named iteration domains, tensors between them.

An :class:`Operator` owns an iteration domain: named axes with sizes (a GEMM has ``m, n, k``).
Each tensor it reads or writes is described by a :class:`TensorUse`: the tensor's shape and, per
tensor dimension, the domain axes whose split counts split that dimension (several axes multiply,
as a flattened reshape does; none means the dimension is never split). A configuration of the
operator (one split count per axis) therefore fixes the layout of every tensor it touches, which
is all the cost models need. An :class:`Input` names the operator that produced the tensor (or
``None`` for a graph input such as data or weights); several inputs may come from the same
producer, and every one of them is an edge.

The graph is plain data: build it with :class:`stratopt.graph.GraphBuilder`, or load it from the
versioned JSON format (:mod:`stratopt.graph.io`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratopt.errors import ModelError

__all__ = ["OPS", "Graph", "Input", "Operator", "TensorUse"]

#: Operator types the cost profiles understand, with what each one's ``attrs`` hold.
OPS: dict[str, str] = {
    "gemm": "batch, m, n, k: axis lists of a (batched) matrix product; FC, MatMul, Einsum, Embedding",
    "conv": "batch, m, n, k as for gemm (im2col: m = b h w, n = out channels, k = c r s)",
    "lstm": "layer, seq, batch, n, k: axis names of a stacked LSTM (4 gates along n, [x, h] along k)",
    "pool": "window: [r, s]; image: [b, c, h, w] axis names (halo exchange when h or w splits)",
    "elementwise": "(none): pointwise over the whole domain; `pointwise` extra fused ops",
    "norm": "axis: the normalised axis (0 for batch norm, the feature axis for layer norm)",
    "softmax": "axis: the softmax axis",
    "softmax_xent": "axis: the class axis (softmax + cross-entropy loss)",
    "reduce_mean": "axes: the reduced axes",
    "concat": "axis: the concatenation axis (never split)",
    "split": "axis: the split axis (never split)",
    "stack": "axis: the new axis (never split)",
    "unstack": "axis: the removed axis (never split)",
    "transpose": "perm: the permutation",
    "reshape": "(none): only contiguous splits of the domain are allowed",
    "variable": "(none): a weight tensor as its own vertex",
}

#: Operator types that move data but compute nothing (cost 0 in the PaSE profile).
LAYOUT_OPS = frozenset({"concat", "split", "stack", "unstack", "transpose", "reshape", "variable"})


@dataclass(frozen=True)
class TensorUse:
    """A tensor as one operator sees it: its shape and which domain axes split each dimension."""

    shape: tuple[int, ...]
    dims: tuple[tuple[str, ...], ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Input:
    """One input tensor of an operator: where it comes from and how this operator lays it out.

    ``source`` is the producing operator's name, or ``None`` for a graph input; ``output`` is the
    index among the producer's outputs. ``param`` marks trainable weights (graph inputs only).
    """

    source: str | None
    use: TensorUse
    output: int = 0
    param: bool = False


@dataclass(frozen=True)
class Operator:
    """One vertex of the operator graph.

    Parameters
    ----------
    name
        Unique within the graph.
    op
        One of :data:`OPS`.
    axes, sizes
        The iteration domain: axis names and their sizes.
    inputs, outputs
        Tensors read (with their producers) and written.
    locked
        Axes that may not be split.
    pointwise
        Fused pointwise operations (a ReLU after a GEMM is 1).
    attrs
        Type-specific parameters (see :data:`OPS`).
    contiguous
        Only configurations that split the domain contiguously (in axis order) are allowed, as a
        reshape needs.
    """

    name: str
    op: str
    axes: tuple[str, ...]
    sizes: tuple[int, ...]
    inputs: tuple[Input, ...] = ()
    outputs: tuple[TensorUse, ...] = ()
    locked: frozenset[str] = frozenset()
    pointwise: int = 0
    attrs: Mapping[str, Any] = field(default_factory=dict)
    contiguous: bool = False

    def size_of(self, axis: str) -> int:
        return self.sizes[self.axes.index(axis)]

    def axis_index(self, axis: str) -> int:
        return self.axes.index(axis)

    def validate(self) -> None:
        """Check the operator on its own; raise :class:`ModelError` naming it."""
        where = f"operator {self.name!r}"
        if not self.name:
            raise ModelError("an operator has an empty name")
        if self.op not in OPS:
            raise ModelError(f"{where}: unknown op {self.op!r} (known: {', '.join(sorted(OPS))})")
        if len(self.axes) != len(self.sizes):
            raise ModelError(f"{where}: {len(self.axes)} axis names but {len(self.sizes)} sizes")
        if len(set(self.axes)) != len(self.axes):
            raise ModelError(f"{where}: repeated axis name in {list(self.axes)}")
        for a, s in zip(self.axes, self.sizes, strict=True):
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise ModelError(f"{where}: axis {a!r} has size {s!r}; sizes must be positive integers")
        known = set(self.axes)
        for a in self.locked:
            if a not in known:
                raise ModelError(f"{where}: locked axis {a!r} is not one of its axes {list(self.axes)}")
        if self.pointwise < 0:
            raise ModelError(f"{where}: pointwise count {self.pointwise} is negative")
        if not self.outputs:
            raise ModelError(f"{where}: has no output tensor")
        uses = [(f"input {i}", t.use) for i, t in enumerate(self.inputs)]
        uses += [(f"output {i}", t) for i, t in enumerate(self.outputs)]
        for what, use in uses:
            if len(use.shape) != len(use.dims):
                raise ModelError(f"{where}: {what} has {len(use.shape)} dimensions but {len(use.dims)} axis groups")
            for s in use.shape:
                if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                    raise ModelError(f"{where}: {what} has shape {list(use.shape)}; sizes must be positive integers")
            for group in use.dims:
                for a in group:
                    if a not in known:
                        raise ModelError(f"{where}: {what} refers to unknown axis {a!r} (axes: {list(self.axes)})")
        for i, t in enumerate(self.inputs):
            if t.param and t.source is not None:
                raise ModelError(f"{where}: input {i} is marked as a weight but comes from {t.source!r}")
        self._check_attrs(where, known)

    def _check_attrs(self, where: str, known: set[str]) -> None:
        def axis_list(key: str) -> list[str]:
            value = self.attrs.get(key)
            if not isinstance(value, list | tuple) or not all(isinstance(a, str) for a in value):
                raise ModelError(f"{where}: attribute {key!r} must be a list of axis names")
            for a in value:
                if a not in known:
                    raise ModelError(f"{where}: attribute {key!r} names unknown axis {a!r}")
            return list(value)

        def axis_name(key: str) -> None:
            value = self.attrs.get(key)
            if not isinstance(value, str) or value not in known:
                raise ModelError(f"{where}: attribute {key!r} must name one of the axes {sorted(known)}")

        if self.op in ("gemm", "conv"):
            groups = [axis_list(k) for k in ("batch", "m", "n", "k")]
            flat = [a for g in groups for a in g]
            if len(set(flat)) != len(flat):
                raise ModelError(f"{where}: an axis appears in two of batch/m/n/k")
        elif self.op == "lstm":
            for key in ("layer", "seq", "batch", "n", "k"):
                axis_name(key)
        elif self.op == "pool":
            window = self.attrs.get("window")
            if not (isinstance(window, list | tuple) and len(window) == 2 and all(isinstance(w, int) for w in window)):
                raise ModelError(f"{where}: attribute 'window' must be two integers [r, s]")
            if len(axis_list("image")) != 4:
                raise ModelError(f"{where}: attribute 'image' must name the 4 axes b, c, h, w")
            if not self.inputs or len(self.inputs[0].use.shape) != 4:
                raise ModelError(f"{where}: pooling needs a 4-d input image")
        elif self.op in ("norm", "softmax", "softmax_xent"):
            axis_name("axis")
        elif self.op == "reduce_mean":
            axis_list("axes")


@dataclass(frozen=True)
class Graph:
    """An operator graph: operators in topological order, tensors on edges.

    Built by :class:`~stratopt.graph.GraphBuilder` or loaded from JSON; :meth:`validate` runs on
    construction and names the operator at fault.
    """

    name: str
    operators: tuple[Operator, ...]
    source: str = ""
    #: The least block size per split axis its author asks configurations to keep (PaSE's
    #: ``SetCutoff``); None: the pricing's own default (:func:`stratopt.cost.build`).
    cutoff: int | None = None

    def __post_init__(self) -> None:
        if self.cutoff is not None and (
            isinstance(self.cutoff, bool) or not isinstance(self.cutoff, int) or self.cutoff < 1
        ):
            raise ModelError(f"{self.name}: cutoff must be a positive integer, got {self.cutoff!r}")
        self.validate()

    def __len__(self) -> int:
        return len(self.operators)

    def __iter__(self) -> Iterator[Operator]:
        return iter(self.operators)

    @property
    def index(self) -> dict[str, int]:
        return {op.name: i for i, op in enumerate(self.operators)}

    def edges(self) -> list[tuple[int, int, int]]:
        """``(producer, consumer, input index)`` per tensor edge, in consumer order."""
        index = self.index
        out = []
        for v, op in enumerate(self.operators):
            for i, t in enumerate(op.inputs):
                if t.source is not None:
                    out.append((index[t.source], v, i))
        return out

    def validate(self) -> None:
        if not self.operators:
            raise ModelError(f"graph {self.name!r} has no operators")
        seen: dict[str, Operator] = {}
        for op in self.operators:
            if op.name in seen:
                raise ModelError(f"operator {op.name!r} is defined twice")
            op.validate()
            for i, t in enumerate(op.inputs):
                if t.source is None:
                    continue
                producer = seen.get(t.source)
                if producer is None:
                    later = any(o.name == t.source for o in self.operators)
                    if later:
                        raise ModelError(
                            f"operator {op.name!r}: input {i} comes from {t.source!r}, which is defined later "
                            "(the graph has a cycle or is not in topological order)"
                        )
                    raise ModelError(f"operator {op.name!r}: input {i} comes from unknown operator {t.source!r}")
                if not 0 <= t.output < len(producer.outputs):
                    raise ModelError(
                        f"operator {op.name!r}: input {i} reads output {t.output} of {t.source!r}, "
                        f"which has {len(producer.outputs)} output(s)"
                    )
                made = producer.outputs[t.output].shape
                if made != t.use.shape:
                    raise ModelError(
                        f"operator {op.name!r}: input {i} expects shape {list(t.use.shape)} but "
                        f"{t.source!r} output {t.output} has shape {list(made)}"
                    )
            seen[op.name] = op

    def summary(self) -> dict[str, int]:
        return {"operators": len(self.operators), "edges": len(self.edges())}


def axes_groups(names: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """One single-axis group per name: the common case of a tensor indexed axis by axis."""
    return tuple((a,) for a in names)
