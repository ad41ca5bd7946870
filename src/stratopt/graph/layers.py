"""Layer builders: turn familiar layers into operators with iteration domains.

:class:`GraphBuilder` records operators in the order they are built (a topological order) and
returns :class:`TensorRef` handles to their outputs. The shapes, domains and layouts follow PaSE
(``nn_ops.py``) so that the ``pase`` cost profile reproduces its optima; where PaSE is vague or
odd, the method's docstring says what we do.

Examples
--------
>>> g = GraphBuilder("mlp")
>>> x = g.input((64, 512))
>>> h = g.fc(x, 1024, pointwise=1)
>>> y = g.softmax_xent(g.fc(h, 10))
>>> graph = g.build()
>>> [op.name for op in graph], len(graph.edges())
(['fc1', 'fc2', 'softmax_xent1'], 2)
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from stratopt.errors import ModelError
from stratopt.graph.builder import Builder, TensorRef
from stratopt.graph.ir import axes_groups

__all__ = ["GraphBuilder", "TensorRef", "conv_output_size"]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    a, b = v
    return int(a), int(b)


def conv_output_size(
    h: int, w: int, r: int, s: int, stride: int | Sequence[int], pad: int | Sequence[int]
) -> tuple[int, int]:
    """Output height and width of a convolution or pooling window.

    >>> conv_output_size(227, 227, 11, 11, 4, 0)
    (55, 55)
    """
    sr, ss = _pair(stride)
    pr, ps = _pair(pad)
    return (h - r + 2 * pr) // sr + 1, (w - s + 2 * ps) // ss + 1


class GraphBuilder(Builder):
    """Builds a :class:`~stratopt.graph.Graph` layer by layer.

    Every layer method takes input :class:`TensorRef` handles and returns the output handle
    (methods with several outputs return a tuple). ``name`` defaults to the layer type and a
    counter (``conv1``, ``conv2``, ...). The layout layers and the plumbing come from
    :class:`~stratopt.graph.builder.Builder`.
    """

    # -- compute layers --------------------------------------------------------------------------

    def fc(self, x: TensorRef, units: int, *, pointwise: int = 0, name: str | None = None) -> TensorRef:
        """Fully connected layer ``y = x W`` over the last dimension; leading dimensions fold into m."""
        if len(x) < 2:
            raise ModelError("fc: the input needs at least 2 dimensions (batch, features)")
        lead = [f"b{i}" if i else "b" for i in range(len(x) - 1)]
        axes = [*lead, "n", "k"]
        sizes = [*x.shape[:-1], units, x.shape[-1]]
        w = self.input((x.shape[-1], units), param=True)
        return self._add(
            "fc",
            name,
            "gemm",
            axes,
            sizes,
            [(x, axes_groups([*lead, "k"])), (w, axes_groups(["k", "n"]))],
            [((*x.shape[:-1], units), axes_groups([*lead, "n"]))],
            pointwise=pointwise,
            attrs={"batch": [], "m": lead, "n": ["n"], "k": ["k"]},
        )[0]

    def einsum(
        self,
        equation: str,
        a: TensorRef,
        b: TensorRef,
        *,
        pointwise: int = 0,
        name: str | None = None,
        pase_layout: bool = False,
        kind: str = "einsum",
        lookup: bool = False,
    ) -> TensorRef:
        """A two-operand einsum as a batched GEMM: shared kept letters are batch, shared dropped ones
        are reduced, the rest are m (from ``a``) and n (from ``b``).

        The domain is the output letters then the reduced ones. ``pase_layout=True`` reproduces how
        PaSE indexes that domain: it looks axes up in order of first appearance in the operands,
        not in domain order, so when the two orders differ the operands' dimensions and the
        GEMM's m/n/k groups are tied to the wrong axes (a ``'ble,ef->blf'`` layer splits its
        input's e by f's split count, and prices the fused pointwise ops on m x e). The model zoo
        uses it for PaSE's own networks so that their optima match PaSE's.
        """
        where = f"einsum {equation!r}"
        try:
            lhs, out = equation.replace(" ", "").split("->")
            in1, in2 = lhs.split(",")
        except ValueError:
            raise ModelError(f"{where}: expected 'ab,bc->ac' form") from None
        for dims, t in ((in1, a), (in2, b)):
            if len(dims) != len(t):
                raise ModelError(f"{where}: {dims!r} has {len(dims)} letters but the tensor is {len(t)}-d")
            if len(set(dims)) != len(dims) or not set(dims) <= set(string.ascii_letters):
                raise ModelError(f"{where}: operand letters must be distinct ASCII letters")
        sizes: dict[str, int] = {}
        for dims, t in ((in1, a), (in2, b)):
            for d, s in zip(dims, t.shape, strict=True):
                if sizes.setdefault(d, s) != s:
                    raise ModelError(f"{where}: letter {d!r} has sizes {sizes[d]} and {s}")
        if len(set(out)) != len(out) or not set(out) <= set(sizes):
            raise ModelError(f"{where}: output letters must be distinct and appear in an operand")
        common = set(in1) & set(in2)
        batch = [d for d in out if d in common]
        reduced = [d for d in sizes if d in common and d not in out]
        m = [d for d in in1 if d not in common]
        n = [d for d in in2 if d not in common]
        if any(d not in out for d in m + n):
            raise ModelError(f"{where}: a letter of only one operand must appear in the output")
        domain = list(out) + reduced
        if pase_layout:
            first_seen = list(sizes)
            rename = {d: domain[first_seen.index(d)] for d in domain}
        else:
            rename = {d: d for d in domain}

        def groups(letters: Sequence[str]) -> list[list[str]]:
            return [[rename[d]] for d in letters]

        return self._add(
            kind,
            name,
            "gemm",
            domain,
            [sizes[d] for d in domain],
            [(a, groups(in1)), (b, groups(in2))],
            [(tuple(sizes[d] for d in out), groups(out))],
            pointwise=pointwise,
            attrs={
                "batch": [rename[d] for d in batch],
                "m": [rename[d] for d in m],
                "n": [rename[d] for d in n],
                "k": [rename[d] for d in reduced],
                "equation": equation,
                **({"lookup": True} if lookup else {}),
            },
        )[0]

    def matmul(self, a: TensorRef, b: TensorRef, *, pointwise: int = 0, name: str | None = None) -> TensorRef:
        """Batched matrix product over the last two dimensions (leading dimensions must match)."""
        if len(a) != len(b) or len(a) < 2 or a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
            raise ModelError(f"matmul: shapes {list(a.shape)} and {list(b.shape)} do not multiply")
        letters = string.ascii_lowercase[: len(a) + 1]
        lead, mm, nn, kk = letters[:-3], letters[-3], letters[-2], letters[-1]
        eq = f"{lead}{mm}{kk},{lead}{kk}{nn}->{lead}{mm}{nn}"
        return self.einsum(eq, a, b, pointwise=pointwise, name=name, kind="matmul")

    def embedding(
        self, ids: TensorRef, vocab: int, dim: int, *, name: str | None = None, pase_layout: bool = False
    ) -> TensorRef:
        """Embedding lookup, priced as PaSE does: a one-hot ``(..., vocab)`` input times a
        ``(vocab, dim)`` table (so splitting the vocabulary costs a reduction)."""
        if ids.source is not None:
            raise ModelError("embedding: the ids must be a graph input")
        onehot = self.input((*ids.shape, vocab))
        table = self.input((vocab, dim), param=True)
        letters = string.ascii_lowercase[: len(ids) + 2]
        eq = f"{letters[:-1]},{letters[-2:]}->{letters[:-2]}{letters[-1]}"
        # Marked as a lookup so that profiles other than PaSE's can price a gather instead of a product.
        return self.einsum(eq, onehot, table, name=name, pase_layout=pase_layout, kind="embedding", lookup=True)

    def conv(
        self,
        x: TensorRef,
        filters: Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        pad: int | Sequence[int] = 0,
        groups: int = 1,
        pointwise: int = 0,
        name: str | None = None,
    ) -> TensorRef:
        """2-D convolution ``(b, c, h, w) * (n, c / groups, r, s)``, an im2col GEMM with m = b h w,
        n = n, k = c r s. Spatial axes are locked (as PaSE: no halo exchange for convolutions).

        A grouped convolution (``groups > 1``; depthwise when groups = channels) is a batched GEMM
        with the group as its batch axis ``g``: the channels are (g, c) and the filters (g, n).
        """
        if len(x) != 4 or len(filters) != 4:
            raise ModelError("conv: expected a (b, c, h, w) image and (n, c, r, s) filters")
        bb, c, h, w = x.shape
        nf, cf, r, s = (int(v) for v in filters)
        if groups < 1 or c % groups or nf % groups:
            raise ModelError(f"conv: {groups} groups do not divide {c} channels and {nf} filters")
        if cf * groups != c:
            raise ModelError(f"conv: the image has {c} channels but the filters expect {cf * groups}")
        ho, wo = conv_output_size(h, w, r, s, stride, pad)
        if ho < 1 or wo < 1:
            raise ModelError(f"conv: a {r}x{s} filter does not fit a {h}x{w} image")
        weights = self.input((nf, cf, r, s), param=True)
        if groups == 1:
            return self._add(
                "conv",
                name,
                "conv",
                ["b", "c", "h", "w", "r", "s", "n"],
                [bb, c, ho, wo, r, s, nf],
                [(x, axes_groups("bchw")), (weights, axes_groups("ncrs"))],
                [((bb, nf, ho, wo), axes_groups("bnhw"))],
                locked=["h", "w"],
                pointwise=pointwise,
                attrs={"batch": [], "m": ["b", "h", "w"], "n": ["n"], "k": ["c", "r", "s"]},
            )[0]
        return self._add(
            "conv",
            name,
            "conv",
            ["b", "g", "c", "h", "w", "r", "s", "n"],
            [bb, groups, cf, ho, wo, r, s, nf // groups],
            [(x, [["b"], ["g", "c"], ["h"], ["w"]]), (weights, [["g", "n"], ["c"], ["r"], ["s"]])],
            [((bb, nf, ho, wo), [["b"], ["g", "n"], ["h"], ["w"]])],
            locked=["h", "w"],
            pointwise=pointwise,
            attrs={"batch": ["g"], "m": ["b", "h", "w"], "n": ["n"], "k": ["c", "r", "s"], "groups": groups},
        )[0]

    def moe(
        self,
        x: TensorRef,
        experts: int,
        top_k: int,
        ffn: int,
        *,
        gated: bool = True,
        gates: TensorRef | None = None,
        name: str | None = None,
    ) -> TensorRef:
        """A mixture-of-experts feed-forward layer over ``(tokens, hidden)``: each token goes to
        ``top_k`` of ``experts`` expert MLPs (hidden -> ``ffn`` -> hidden; ``gated``: SwiGLU, two
        up projections). Four operators, named ``<name>.dispatch``, ``.up``, ``.down``, ``.combine``:

        - dispatch: the tokens into per-expert slots, a ``(e, c, h)`` tensor with c =
          ceil(tokens x top_k / experts) slots per expert. Its input's token axis is the slot axis
          ``c``, so with the tokens split and the slots split the same way it moves nothing.
        - up and down: the experts' products, batched GEMMs with the expert axis ``e`` as batch;
          splitting ``e`` is expert parallelism (each device holds its experts' weights).
        - combine: the slots back to the tokens, weighted by the router's ``gates``.

        Between a token-split dispatch and an expert-split product the slots change layout from c
        to e: the all-to-all of expert parallelism, priced as any other re-layout. Where the tokens
        are whole on the devices the experts split over (expert parallelism inside a
        tensor-parallel group), dispatch and combine split over the experts too: each device runs
        its experts on every token routed to them, combine all-reduces the tokens' partial sums and
        dispatch the tokens' gradient (both marked ``attrs["moe"]``, which the cost model prices).
        """
        if len(x) != 2:
            raise ModelError(f"moe: expected a (tokens, hidden) input, got {list(x.shape)}")
        if experts < 1 or not 1 <= top_k <= experts or ffn < 1:
            raise ModelError(f"moe: need 1 <= top_k ({top_k}) <= experts ({experts}) and ffn >= 1")
        base = self._name("moe", name)
        tokens, hidden = x.shape
        slots = -(-tokens * top_k // experts)
        (routed,) = self._add(
            "dispatch",
            f"{base}.dispatch",
            "elementwise",
            ["c", "e", "h"],
            [slots, experts, hidden],
            [(x, [["c"], ["h"]])],
            [((experts, slots, hidden), [["e"], ["c"], ["h"]])],
            attrs={"moe": "dispatch", "units": ["e"]},
        )
        width = 2 * ffn if gated else ffn
        up = self.einsum(
            "ech,ehf->ecf", routed, self.input((experts, hidden, width), param=True), name=f"{base}.up", pointwise=1
        )
        self.annotate(up, units=["e"])
        if gated:  # act(gate) * up: a pointwise product of the two halves
            (up,) = self._add(
                "glu",
                f"{base}.glu",
                "elementwise",
                ["e", "c", "f"],
                [experts, slots, ffn],
                [(up, [["e"], ["c"], ["f"]])],
                [((experts, slots, ffn), [["e"], ["c"], ["f"]])],
                pointwise=1,
                attrs={"units": ["e"]},
            )
        down = self.einsum("ecf,efh->ech", up, self.input((experts, ffn, hidden), param=True), name=f"{base}.down")
        self.annotate(down, units=["e"])
        # The domain is as large as the work (tokens x top_k x hidden): every slot of a token's row
        # is read. Split over the experts, each device sums its experts' part of every token's row
        # and the parts are all-reduced (the cost model prices it; the output has no expert axis).
        inputs: list[tuple[TensorRef, Sequence[Sequence[str]]]] = [(down, [["e"], ["c"], ["h"]])]
        if gates is not None and len(gates) == 2 and gates.shape[0] == tokens:
            inputs.append((gates, [["c"], []]))
        return self._add(
            "combine",
            f"{base}.combine",
            "elementwise",
            ["c", "e", "h"],
            [slots, experts, hidden],
            inputs,
            [((tokens, hidden), [["c"], ["h"]])],
            pointwise=1,
            attrs={"moe": "combine", "units": ["e"]},
        )[0]

    def lstm(self, x: TensorRef, units: int, layers: int = 1, *, name: str | None = None) -> TensorRef:
        """A stack of ``layers`` LSTM layers over a ``(batch, seq, units)`` input, as PaSE models it:
        domain (layer, seq, b, n, k) with the 4 gates along n and [x, h] along k; the sequence
        axis is locked, splitting layers is wavefront (pipeline) parallelism."""
        if len(x) != 3 or x.shape[-1] != units:
            raise ModelError(f"lstm: expected a (batch, seq, {units}) input, got {list(x.shape)}")
        bb, seq, _ = x.shape
        weights = self.input((layers, 2 * units, 4 * units), param=True)
        return self._add(
            "lstm",
            name,
            "lstm",
            ["layer", "seq", "b", "n", "k"],
            [layers, seq, bb, units, units],
            [(x, axes_groups(["b", "seq", "k"])), (weights, [["layer"], ["k"], ["n"]])],
            [((bb, seq, units), axes_groups(["b", "seq", "n"]))],
            locked=["seq"],
            pointwise=3,
            attrs={"layer": "layer", "seq": "seq", "batch": "b", "n": "n", "k": "k"},
        )[0]

    def pooling(
        self,
        x: TensorRef,
        window: Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        pad: int | Sequence[int] = 0,
        name: str | None = None,
    ) -> TensorRef:
        """Max or average pooling over ``(b, c, h, w)``; splitting h or w exchanges halos."""
        if len(x) != 4:
            raise ModelError("pooling: expected a (b, c, h, w) image")
        r, s = _pair(window)
        bb, c, h, w = x.shape
        ho, wo = conv_output_size(h, w, r, s, stride, pad)
        if ho < 1 or wo < 1:
            raise ModelError(f"pooling: a {r}x{s} window does not fit a {h}x{w} image")
        return self._add(
            "pool",
            name,
            "pool",
            ["b", "c", "h", "w"],
            [bb, c, ho, wo],
            [(x, axes_groups("bchw"))],
            [((bb, c, ho, wo), axes_groups("bchw"))],
            attrs={"window": [r, s], "image": ["b", "c", "h", "w"]},
        )[0]

    def elementwise(self, a: TensorRef, b: TensorRef, *, pointwise: int = 0, name: str | None = None) -> TensorRef:
        """A binary pointwise operation (add, multiply) on two same-shaped tensors."""
        if a.shape != b.shape:
            raise ModelError(f"elementwise: shapes {list(a.shape)} and {list(b.shape)} differ")
        return self._over(
            "add", name, "elementwise", a, [(b, axes_groups([f"d{i}" for i in range(len(b))]))], pointwise=pointwise
        )

    def norm(
        self,
        x: TensorRef,
        axis: int = -1,
        *,
        name: str | None = None,
        kind: str = "norm",
        weights: int = 2,
        channel: int | None = None,
    ) -> TensorRef:
        """Normalisation over ``axis``'s statistics: ``axis=0`` is batch norm, the feature axis layer
        norm; ``weights`` vectors (2: a scale and a shift; 1: a scale, as RMSNorm; 0: none, as
        OLMo's layer norm) along ``channel`` (default ``axis``: PaSE's batch norm holds them over
        the batch axis, as it prices them; a real one holds one per channel, axis 1)."""
        if len(x) < 2:
            raise ModelError("norm: the input needs at least 2 dimensions")
        if weights not in (0, 1, 2):
            raise ModelError(f"norm: 0, 1 or 2 weight vectors, got {weights!r}")
        ax = self._axis(x, axis, "norm")
        along = ax if channel is None else self._axis(x, channel, "norm")
        held = [(self.input((weights, x.shape[along]), param=True), [[], [f"d{along}"]])] if weights else []
        return self._over(kind, name, "norm", x, held, attrs={"axis": f"d{ax}"})

    def batchnorm(self, x: TensorRef, *, name: str | None = None, weights: int = 2) -> TensorRef:
        """Batch normalisation as PaSE's ``BatchNorm`` prices it: statistics and weights over the
        batch axis (the importers' batch norms: :meth:`norm` with ``channel=1``)."""
        return self.norm(x, 0, name=name, kind="batchnorm", weights=weights)

    def layernorm(self, x: TensorRef, axis: int = -1, *, name: str | None = None, weights: int = 2) -> TensorRef:
        """Layer normalisation over ``axis`` (default: the last)."""
        return self.norm(x, axis, name=name, kind="layernorm", weights=weights)

    def softmax(
        self, x: TensorRef, axis: int = -1, *, name: str | None = None, bias: TensorRef | None = None
    ) -> TensorRef:
        """Softmax along ``axis``; ``bias``: a tensor added first (attention's per-head position
        bias), of ``x``'s rank, each dimension ``x``'s or 1 (broadcast: read by no axis)."""
        ax = self._axis(x, axis, "softmax")
        extra: list[tuple[TensorRef, list[list[str]]]] = []
        if bias is not None:
            if len(bias) != len(x) or any(b not in (1, s) for b, s in zip(bias.shape, x.shape, strict=True)):
                raise ModelError(f"softmax: a bias of shape {list(bias.shape)} does not add to {list(x.shape)}")
            pairs = enumerate(zip(bias.shape, x.shape, strict=True))
            dims = [[] if b == 1 and s != 1 else [f"d{i}"] for i, (b, s) in pairs]
            extra.append((bias, dims))
        return self._over("softmax", name, "softmax", x, extra, attrs={"axis": f"d{ax}"})

    def softmax_xent(self, x: TensorRef, *, name: str | None = None) -> TensorRef:
        """Softmax over the last axis followed by the cross-entropy loss."""
        if len(x) < 2:
            raise ModelError("softmax_xent: the input needs at least 2 dimensions (batch, classes)")
        return self._over("softmax_xent", name, "softmax_xent", x, attrs={"axis": f"d{len(x) - 1}"})

    def reduce_mean(
        self, x: TensorRef, axes: Sequence[int] | None = None, *, keepdims: bool = False, name: str | None = None
    ) -> TensorRef:
        """Mean over ``axes`` (default: all)."""
        names = [f"d{i}" for i in range(len(x))]
        reduced = sorted({self._axis(x, a, "reduce_mean") for a in (range(len(x)) if axes is None else axes)})
        out_shape: list[int] = []
        out_dims: list[list[str]] = []
        for i, size in enumerate(x.shape):
            if i not in reduced:
                out_shape.append(size)
                out_dims.append([names[i]])
            elif keepdims:
                out_shape.append(1)
                out_dims.append([])
        if not out_shape:
            out_shape, out_dims = [1], [[]]
        return self._add(
            "reduce_mean",
            name,
            "reduce_mean",
            names,
            x.shape,
            [(x, axes_groups(names))],
            [(out_shape, out_dims)],
            attrs={"axes": [names[i] for i in reduced]},
        )[0]
