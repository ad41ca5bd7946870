"""The builder's plumbing and its layout layers: operators recorded in order, named, validated, and the
layers that move data without computing (concat, split, stack, unstack, transpose, reshape,
variables). :class:`~stratopt.graph.layers.GraphBuilder` adds the compute layers."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph, Input, Operator, TensorUse, axes_groups

__all__ = ["Builder", "TensorRef"]


@dataclass(frozen=True)
class TensorRef:
    """A tensor handle: produced by operator ``source`` (output ``output``), or a graph input."""

    shape: tuple[int, ...]
    source: str | None = None
    output: int = 0
    param: bool = False

    def __len__(self) -> int:
        return len(self.shape)


class Builder:
    """Records operators as they are built (a topological order): naming, validation, graph inputs
    and the layout layers; :class:`~stratopt.graph.layers.GraphBuilder` is what users build with."""

    def __init__(self, name: str, *, source: str = "", cutoff: int | None = None) -> None:
        self.name = name
        self.source = source
        self.cutoff = cutoff
        self._ops: list[Operator] = []
        self._names: set[str] = set()
        self._counts: dict[str, int] = {}
        #: Recorded on every operator added while set (``attrs["scope"]``): the module that runs it.
        self.scope = ""

    # -- plumbing --------------------------------------------------------------------------------

    def input(self, shape: Sequence[int], *, param: bool = False) -> TensorRef:
        """A graph input (data, or a weight tensor with ``param=True``)."""
        shape = tuple(int(s) for s in shape)
        if not shape or any(s < 1 for s in shape):
            raise ModelError(f"graph input shape {list(shape)}: sizes must be positive integers")
        return TensorRef(shape, None, 0, param)

    def _name(self, kind: str, name: str | None) -> str:
        if name is None:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            name = f"{kind}{self._counts[kind]}"
        if name in self._names:
            raise ModelError(f"operator name {name!r} is used twice")
        self._names.add(name)
        return name

    def _add(
        self,
        kind: str,
        name: str | None,
        op: str,
        axes: Sequence[str],
        sizes: Sequence[int],
        inputs: Sequence[tuple[TensorRef, Sequence[Sequence[str]]]],
        outputs: Sequence[tuple[Sequence[int], Sequence[Sequence[str]]]],
        *,
        locked: Sequence[str] = (),
        pointwise: int = 0,
        attrs: dict[str, Any] | None = None,
        contiguous: bool = False,
    ) -> tuple[TensorRef, ...]:
        full = self._name(kind, name)
        ins = tuple(
            Input(t.source, TensorUse(t.shape, tuple(tuple(g) for g in dims)), t.output, t.param) for t, dims in inputs
        )
        outs = tuple(TensorUse(tuple(int(s) for s in shape), tuple(tuple(g) for g in dims)) for shape, dims in outputs)
        operator = Operator(
            full,
            op,
            tuple(axes),
            tuple(int(s) for s in sizes),
            ins,
            outs,
            frozenset(locked),
            int(pointwise),
            {**(attrs or {}), **({"scope": self.scope} if self.scope else {})},
            contiguous,
        )
        operator.validate()
        self._ops.append(operator)
        return tuple(TensorRef(o.shape, full, i) for i, o in enumerate(outs))

    def _over(
        self,
        kind: str,
        name: str | None,
        op: str,
        x: TensorRef,
        extra: Sequence[tuple[TensorRef, Sequence[Sequence[str]]]] = (),
        **options: Any,
    ) -> TensorRef:
        """An operator whose domain is ``x``'s dimensions (``d0, d1, ..``), reading ``x`` (and
        ``extra`` inputs laid out on those axes) and writing one tensor of ``x``'s shape."""
        groups = axes_groups([f"d{i}" for i in range(len(x))])
        inputs = [(x, groups), *extra]
        return self._add(kind, name, op, [g[0] for g in groups], x.shape, inputs, [(x.shape, groups)], **options)[0]

    def annotate(self, t: TensorRef | str, **attrs: Any) -> None:
        """Add ``attrs`` to the attributes of the operator that produced ``t`` (or is named ``t``):
        how a profile should price it (``fused_attention``, ``causal``, ``tied``), which module's
        ``params`` it reads."""
        name = t if isinstance(t, str) else str(t.source)
        self._replace(name, "annotate", lambda op: dataclasses.replace(op, attrs={**op.attrs, **attrs}))

    def bias(self, t: TensorRef) -> None:
        """Give the operator that produced ``t`` a bias: a weight vector over ``t``'s last
        dimension, laid out as that dimension (split where the output's features are)."""

        def biased(op: Operator) -> Operator:
            use = op.outputs[t.output]
            vector = self.input((use.shape[-1],), param=True)
            held = Input(vector.source, TensorUse(vector.shape, (use.dims[-1],)), vector.output, True)
            changed = dataclasses.replace(op, inputs=(*op.inputs, held))
            changed.validate()
            return changed

        self._replace(str(t.source), "bias", biased)

    def _replace(self, name: str, what: str, change: Any) -> None:
        """The operator named ``name`` replaced by ``change(operator)``; ``what`` names the caller in
        the error where there is none."""
        for i in range(len(self._ops) - 1, -1, -1):  # the newest first: usually the one just added
            if self._ops[i].name == name:
                self._ops[i] = change(self._ops[i])
                return
        raise ModelError(f"{what}: {name!r} is not an operator of this graph")

    def producer(self, t: TensorRef) -> Operator | None:
        """The operator that produced ``t`` (None for a graph input)."""
        return next((op for op in reversed(self._ops) if op.name == t.source), None)

    def build(self) -> Graph:
        """The graph built so far (validated)."""
        return Graph(self.name, tuple(self._ops), self.source, self.cutoff)

    @staticmethod
    def _axis(t: TensorRef, axis: int, what: str) -> int:
        if not -len(t) <= axis < len(t):
            raise ModelError(f"{what}: axis {axis} is out of range for a {len(t)}-d tensor")
        return axis % len(t)

    # -- layout layers (no computation) ------------------------------------------------------------

    def _along(
        self,
        kind: str,
        name: str | None,
        axes: Sequence[str],
        sizes: Sequence[int],
        inputs: Sequence[tuple[TensorRef, Sequence[Sequence[str]]]],
        outputs: Sequence[tuple[Sequence[int], Sequence[Sequence[str]]]],
        axis: str,
    ) -> tuple[TensorRef, ...]:
        """A layout operator that joins or parts tensors along ``axis``, which is never split."""
        return self._add(kind, name, kind, axes, sizes, inputs, outputs, locked=[axis], attrs={"axis": axis})

    def concat(self, xs: Sequence[TensorRef], axis: int, *, name: str | None = None) -> TensorRef:
        """Concatenate along ``axis`` (which is never split)."""
        if len(xs) < 2:
            raise ModelError("concat: needs at least two tensors")
        first = xs[0]
        ax = self._axis(first, axis, "concat")
        for t in xs[1:]:
            if len(t) != len(first) or any(t.shape[i] != first.shape[i] for i in range(len(first)) if i != ax):
                raise ModelError(f"concat: shapes {list(first.shape)} and {list(t.shape)} differ off axis {axis}")
        names = [f"d{i}" for i in range(len(first))]
        out = list(first.shape)
        out[ax] = sum(t.shape[ax] for t in xs)
        sizes = list(first.shape)
        sizes[ax] = out[ax]
        return self._along(
            "concat", name, names, sizes, [(t, axes_groups(names)) for t in xs], [(out, axes_groups(names))], names[ax]
        )[0]

    def split(self, x: TensorRef, parts: int, axis: int, *, name: str | None = None) -> tuple[TensorRef, ...]:
        """Split into ``parts`` equal pieces along ``axis`` (which is never split over devices)."""
        ax = self._axis(x, axis, "split")
        if parts < 1 or x.shape[ax] % parts:
            raise ModelError(f"split: axis {axis} of size {x.shape[ax]} does not divide into {parts} parts")
        names = [f"d{i}" for i in range(len(x))]
        piece = list(x.shape)
        piece[ax] //= parts
        return self._along(
            "split", name, names, x.shape, [(x, axes_groups(names))], [(piece, axes_groups(names))] * parts, names[ax]
        )

    def stack(self, xs: Sequence[TensorRef], axis: int = 0, *, name: str | None = None) -> TensorRef:
        """Stack same-shaped tensors along a new axis (which is never split)."""
        first = xs[0]
        if any(t.shape != first.shape for t in xs):
            raise ModelError("stack: all tensors must have the same shape")
        ax = axis % (len(first) + 1)
        names = [f"d{i}" for i in range(len(first))]
        axes = [*names[:ax], "s", *names[ax:]]
        sizes = [*first.shape[:ax], len(xs), *first.shape[ax:]]
        return self._along(
            "stack", name, axes, sizes, [(t, axes_groups(names)) for t in xs], [(sizes, axes_groups(axes))], "s"
        )[0]

    def unstack(self, x: TensorRef, axis: int = 0, *, name: str | None = None) -> tuple[TensorRef, ...]:
        """Split along ``axis`` into its slices, dropping the axis."""
        ax = self._axis(x, axis, "unstack")
        names = [f"d{i}" for i in range(len(x))]
        kept = [a for i, a in enumerate(names) if i != ax]
        piece = [s for i, s in enumerate(x.shape) if i != ax]
        return self._along(
            "unstack",
            name,
            names,
            x.shape,
            [(x, axes_groups(names))],
            [(piece, axes_groups(kept))] * x.shape[ax],
            names[ax],
        )

    def transpose(self, x: TensorRef, perm: Sequence[int], *, name: str | None = None) -> TensorRef:
        """Permute dimensions (the output's dimension i is the input's ``perm[i]``)."""
        if sorted(perm) != list(range(len(x))):
            raise ModelError(f"transpose: {list(perm)} is not a permutation of {len(x)} dimensions")
        names = [f"d{i}" for i in range(len(x))]
        return self._add(
            "transpose",
            name,
            "transpose",
            names,
            x.shape,
            [(x, axes_groups(names))],
            [([x.shape[p] for p in perm], [[names[p]] for p in perm])],
            attrs={"perm": list(perm)},
        )[0]

    def reshape(self, x: TensorRef, shape: Sequence[int], *, name: str | None = None) -> TensorRef:
        """Reshape, as PaSE does it: flatten (``<name>.ravel``) then unflatten (``<name>.unravel``),
        each allowing only contiguous splits, so that no data moves inside either."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != math.prod(x.shape):
            raise ModelError(f"reshape: cannot reshape {list(x.shape)} into {list(shape)}")
        base = self._name("reshape", name)
        flat = (math.prod(x.shape),)
        names = [f"d{i}" for i in range(len(x))]
        (mid,) = self._add(
            "ravel",
            f"{base}.ravel",
            "reshape",
            names,
            x.shape,
            [(x, axes_groups(names))],
            [(flat, [names])],
            contiguous=True,
        )
        out_names = [f"d{i}" for i in range(len(shape))]
        return self._add(
            "unravel",
            f"{base}.unravel",
            "reshape",
            out_names,
            shape,
            [(mid, [out_names])],
            [(shape, axes_groups(out_names))],
            contiguous=True,
        )[0]

    def view(self, x: TensorRef, shape: Sequence[int], *, name: str | None = None) -> TensorRef:
        """A reshape that only splits dimensions into several or merges neighbours (a view: ``(b, s,
        h)`` to ``(b, s, heads, d)`` and back), as one operator whose axes are the finer side's
        dimensions, so a split passes through it as PyTorch's view passes it: a dimension split into
        several is indexed by their axes, of which only the outermost may split (the devices keep
        contiguous runs of it; heads over the devices, each head's width whole). Any other reshape is
        :meth:`reshape`'s flatten and unflatten."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != math.prod(x.shape):
            raise ModelError(f"reshape: cannot reshape {list(x.shape)} into {list(shape)}")
        pieces = _pieces(x.shape, shape)
        if pieces is None:
            return self.reshape(x, shape, name=name)
        axes: list[str] = []
        sizes: list[int] = []
        locked: list[str] = []
        before: list[list[str]] = [[] for _ in x.shape]
        after: list[list[str]] = [[] for _ in shape]
        for ins, outs in pieces:
            fine, coarse, side = (outs, ins, after) if len(outs) >= len(ins) else (ins, outs, before)
            dims = shape if side is after else x.shape
            names = []
            for d in fine:
                if dims[d] == 1:
                    continue
                names.append(f"d{len(axes)}")
                axes.append(names[-1])
                sizes.append(dims[d])
                side[d] = [names[-1]]
            locked += names[1:]
            for d in coarse:
                (before if side is after else after)[d] = list(names)
        return self._add(
            "reshape",
            name,
            "reshape",
            axes,
            sizes,
            [(x, before)],
            [(shape, after)],
            locked=locked,
        )[0]

    def variable(self, shape: Sequence[int], *, name: str | None = None) -> TensorRef:
        """A weight tensor as its own vertex (PaSE's ``Variable``), so several layers can share it."""
        w = self.input(shape, param=True)
        names = [f"d{i}" for i in range(len(w))]
        return self._add(
            "variable", name, "variable", names, w.shape, [(w, axes_groups(names))], [(w.shape, axes_groups(names))]
        )[0]


def _pieces(before: tuple[int, ...], after: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """The runs of dimensions a reshape maps onto each other, ``(dims before, dims after)`` with equal
    products, where each run is one dimension on at least one side (a split or a merge; size-1
    dimensions ride along); None where some run is several on both sides."""
    out: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(before) or j < len(after):
        ins: list[int] = []
        outs: list[int] = []
        a = b = 1
        while True:
            if a == b and (ins or outs) and (a > 1 or (i == len(before) and j == len(after))):
                break
            if a <= b and i < len(before):
                a, i = a * before[i], i + 1
                ins.append(i - 1)
            elif j < len(after):
                b, j = b * after[j], j + 1
                outs.append(j - 1)
            else:
                return None
        while i < len(before) and before[i] == 1 and (j == len(after) or after[j] != 1):
            ins.append(i)
            i += 1
        while j < len(after) and after[j] == 1 and (i == len(before) or before[i] != 1):
            outs.append(j)
            j += 1
        if len([d for d in ins if before[d] > 1]) > 1 and len([d for d in outs if after[d] > 1]) > 1:
            return None
        out.append((ins, outs))
    return out
