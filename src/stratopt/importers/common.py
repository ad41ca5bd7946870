"""What both importers share: a small neutral node list, pointwise folding, and emission as an
operator :class:`~stratopt.graph.Graph` through :class:`~stratopt.graph.GraphBuilder`.

An importer turns its framework's graph into :class:`Node` records in topological order. Kinds:
``input`` (data), ``param`` (weights and constants), ``view`` (no data movement: dropout at
inference, ``contiguous``, identity), ``unary`` (a pointwise function of one tensor, or of one
tensor and constants), ``add`` (a pointwise function of two tensors), ``fc``, ``conv``, ``matmul``,
``embedding``, ``layernorm``, ``batchnorm``, ``softmax``, ``pool``, ``reduce_mean``, ``reshape``,
``transpose``, ``concat``, ``lstm``, ``einsum``, ``sdpa`` (scaled dot-product attention, grouped-query
included), ``moe`` (a mixture-of-experts layer), ``move`` (known data movement and selection: slicing,
gathers, ``where``, ``topk``, expansion; elementwise-cost work over its output, no warning), and
``other`` (anything unmapped, which becomes an elementwise-cost operator and a warning naming it).

Folding: a ``unary`` node after an operator that can fuse pointwise work (products, convolutions,
pointwise operators) adds one to that operator's ``pointwise`` count instead of becoming a vertex;
a ``view`` is dropped. Both keep the graph the cost models price close to what runs (a ReLU is
fused into its convolution), and make a GELU written as one call or as five ONNX nodes the same.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.graph.layers import GraphBuilder, TensorRef

__all__ = ["Node", "UnmappedOperatorWarning", "emit", "flops"]

_FUSES = {"fc", "conv", "matmul", "einsum", "add", "unary", "other", "move", "sdpa", "moe"}
#: Kinds whose loss would lose dense flops: a warning when the builder refuses one.
_PRODUCTS = {"fc", "conv", "matmul", "einsum", "sdpa", "moe", "embedding", "lstm"}


class UnmappedOperatorWarning(UserWarning):
    """An operator the importer does not know, priced as elementwise work."""


@dataclass
class Node:
    """One tensor-producing node of an imported graph."""

    name: str
    kind: str
    inputs: list[str]
    shape: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


def fused_pieces(
    nodes: dict[str, Node], source: str, shape: tuple[int, ...], pieces: Sequence[tuple[int, ...]]
) -> dict[str, int]:
    """``{"pieces": n, "piece_dim": k}`` where a split or chunk cuts tensor ``source`` (of ``shape``)
    into ``n`` equal ``pieces`` along its last dimension ``k`` and ``source`` is the output of a
    product with weights (``nodes``: the nodes so far by name), through that product's own views
    keeping its last dimension: a fused projection (GPT-2's ``c_attn``, a fused gate and up
    projection), whose weight's output features may be laid out interleaved, each device holding
    its share of every piece. Else nothing."""
    rank = len(shape)
    if not rank or len(pieces) < 2 or len(set(pieces)) != 1:
        return {}
    piece = pieces[0]
    if len(piece) != rank or piece[:-1] != shape[:-1] or piece[-1] * len(pieces) != shape[-1]:
        return {}
    node = nodes.get(source)
    while node is not None and node.kind in ("reshape", "view") and len(node.inputs) == 1:
        node = nodes.get(node.inputs[0])
    if node is None or node.kind not in ("fc", "matmul") or not node.shape or node.shape[-1] != shape[-1]:
        return {}
    if not any(nodes.get(x) is not None and nodes[x].kind == "param" for x in node.inputs):
        return {}
    return {"pieces": len(pieces), "piece_dim": rank - 1}


def emit(name: str, nodes: Sequence[Node], *, source: str = "") -> Graph:
    """Build the operator graph of ``nodes`` (topological order); warns once listing unmapped ops."""
    by_name = {n.name: n for n in nodes}
    alias: dict[str, str] = {}
    pointwise: dict[str, int] = {}

    def real(x: str) -> str:
        while x in alias:
            x = alias[x]
        return x

    for n in nodes:
        if n.kind == "add" and len(n.inputs) == 2 and real(n.inputs[0]) == real(n.inputs[1]):
            n.kind, n.inputs = "unary", n.inputs[:1]  # x * f(x) after folding f: pointwise in x
        if n.kind == "view" and n.inputs:
            alias[n.name] = n.inputs[0]
        elif n.kind == "unary" and n.inputs:
            src = by_name.get(real(n.inputs[0]))
            if src is not None and src.kind in _FUSES and src.shape == n.shape:
                alias[n.name] = src.name
                pointwise[src.name] = pointwise.get(src.name, 0) + 1
        elif n.kind == "transpose" and n.inputs:
            # Two transposes in a row are one (exporters merge them; traced code often does not).
            src = by_name.get(real(n.inputs[0]))
            if src is not None and src.kind == "transpose":
                n.attrs["perm"] = [src.attrs["perm"][p] for p in n.attrs["perm"]]
                n.inputs = [real(src.inputs[0])]
            if list(n.attrs["perm"]) == list(range(len(n.attrs["perm"]))):
                alias[n.name] = n.inputs[0]
    used = {real(x) for n in nodes if n.name not in alias for x in n.inputs}
    last = nodes[-1].name if nodes else ""
    g = GraphBuilder(name, source=source)
    env: dict[str, TensorRef] = {}
    unmapped: dict[str, int] = {}
    empty: set[str] = set()  # tensors with a dimension of size 0: an empty slice or cache, no operator
    for n in nodes:
        if n.name in alias or (n.kind == "transpose" and n.name not in used and n.name != last):
            continue
        if 0 in n.shape:
            empty.add(n.name)
            continue
        n.inputs = [x for x in n.inputs if real(x) not in empty]
        g.scope = str(n.attrs.get("scope") or "")  # the module that ran the node, where the importer knows it
        try:
            out = _emit_one(g, n, [real(x) for x in n.inputs], env, by_name, pointwise.get(n.name, 0))
        except ModelError as exc:
            out = None
            n.attrs.setdefault("op", n.kind)
            n.attrs["why"] = str(exc)
        if out is None:
            if n.kind == "param":
                continue
            if n.kind == "other" or n.kind in _PRODUCTS or "why" in n.attrs:
                label = str(n.attrs.get("op", n.kind))
                unmapped[label] = unmapped.get(label, 0) + 1
            out = _generic(g, n, [real(x) for x in n.inputs], env, pointwise.get(n.name, 0))
        read = [by_name[x] for x in n.inputs if x in by_name]
        bias = _bias_of(n, by_name) if "why" not in n.attrs else None
        made = g.producer(out)
        if bias is not None and made is not None and made.op == "gemm" and bias.shape[-1] == out.shape[-1]:
            g.bias(out)  # a linear layer's (or Conv1D's addmm's) bias: its weights, gradient and state priced
            read = [*read, bias] if bias not in read else read
        _name_params(g, out, read)
        if n.attrs.get("calls") and made is not None:  # a module of several calls, recorded whole
            g.annotate(out, calls=int(n.attrs["calls"]))
        if "inferred" in n.attrs and made is not None and made.op == "reshape" and made.name == _safe(n.name):
            g.annotate(out, inferred=list(n.attrs["inferred"]))
        if n.attrs.get("layer_norm") and made is not None and made.op == "norm":
            g.annotate(out, fused="layer_norm")  # nn.LayerNorm itself: a width split runs it (stratopt.torch.norms)
        env[n.name] = out
    if unmapped:
        listing = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(unmapped.items()))
        warnings.warn(
            f"{name}: priced as elementwise work (not mapped to a stratopt operator): {listing}",
            UnmappedOperatorWarning,
            stacklevel=3,
        )
    return g.build()


def _bias_of(n: Node, nodes: dict[str, Node]) -> Node | None:
    """The bias vector a product adds, where it is a weight: a linear layer's second parameter,
    or the term ``addmm`` adds (Hugging Face's Conv1D)."""
    if n.kind == "fc":
        params = [nodes[x] for x in n.inputs if x in nodes and nodes[x].kind == "param"]
        found = params[1] if len(params) == 2 else None
    elif n.kind == "matmul" and n.attrs.get("bias") in nodes:
        found = nodes[str(n.attrs["bias"])]
    else:
        return None
    return found if found is not None and found.kind == "param" and len(found.shape) == 1 else None


def _name_params(g: GraphBuilder, out: TensorRef, inputs: list[Node]) -> None:
    """Record on the operator that reads weights which parameters they are (``attrs["params"]``,
    qualified names such as ``h.0.attn.c_attn.weight``): how a plan finds its modules again."""
    names = [str(x.attrs["param"]) for x in inputs if x.kind == "param" and x.attrs.get("param")]
    op = g.producer(out) if names else None
    if op is not None and any(i.param for i in op.inputs) and "params" not in op.attrs:
        g.annotate(out, params=list(dict.fromkeys(names)))


def _broadcast_matmul(g: GraphBuilder, a: TensorRef, b: TensorRef, pw: int, name: str) -> TensorRef | None:
    """``a @ b`` whose batch dimensions broadcast (one operand has size 1, or fewer dimensions, where
    the other has a batch): an einsum in which the broadcast operand lacks those letters."""
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    rank = max(len(batch_a), len(batch_b))
    padded_a = (1,) * (rank - len(batch_a)) + batch_a
    padded_b = (1,) * (rank - len(batch_b)) + batch_b
    if any(x != y and 1 not in (x, y) for x, y in zip(padded_a, padded_b, strict=True)):
        return None
    letters = "abcdefgh"[:rank]

    def operand(t: TensorRef, padded: tuple[int, ...], other: tuple[int, ...], tail: str) -> tuple[TensorRef, str]:
        # a batch dimension of size 1 facing a larger one is dropped (a reshape), the rest kept
        skip = rank - (len(t) - 2)  # the leading batch dimensions this operand does not have
        keep = [i for i in range(skip, rank) if padded[i] != 1 or other[i] == 1]
        shape = tuple(padded[i] for i in keep) + t.shape[-2:]
        if shape != t.shape:
            t = g.view(t, shape, name=f"{name}.squeeze")
        return t, "".join(letters[i] for i in keep) + tail

    ta, da = operand(a, padded_a, padded_b, "mk")
    tb, db = operand(b, padded_b, padded_a, "kn")
    out = "".join(x for x in letters if x in da or x in db)
    return g.einsum(f"{da},{db}->{out}mn", ta, tb, pointwise=pw, name=name)


def _emit_one(
    g: GraphBuilder, n: Node, ins: list[str], env: dict[str, TensorRef], nodes: dict[str, Node], pw: int
) -> TensorRef | None:
    kind, a = n.kind, n.attrs
    tensors = [env[x] for x in ins if x in env]
    params = [nodes[x] for x in ins if x not in env and x in nodes and nodes[x].kind == "param"]
    if kind == "input":
        return g.input(n.shape)
    if kind == "param":
        return None
    if kind in ("matmul", "einsum") and len(ins) == 2 and len(tensors) == 1 and all(x in nodes for x in ins):
        # One operand is a constant (a state initialised to zeros, a fixed matrix): a product all
        # the same, the constant entering as a graph input of its recorded shape.
        tensors = [env[x] if x in env else g.input(nodes[x].shape, param=nodes[x].kind == "param") for x in ins]
    if kind == "fc" and len(tensors) == 1:
        return g.fc(tensors[0], n.shape[-1], pointwise=pw, name=_safe(n.name))
    if kind == "fc" and len(tensors) == 2 and len(tensors[1]) == 2:  # F.linear(x, w) with a computed w
        return g.einsum(_linear_equation(len(tensors[0])), tensors[0], tensors[1], pointwise=pw, name=_safe(n.name))
    if kind == "conv" and len(tensors) == 1 and params:
        x, weight, out = tensors[0], params[0].shape, n.shape
        flat = len(weight) == 3 and len(x) == 3 and len(out) == 3  # conv1d: a conv2d of height 1
        if flat:
            x = g.view(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
            weight, out = (weight[0], weight[1], 1, weight[2]), (out[0], out[1], 1, out[2])
        if len(weight) != 4 or _pair(a.get("dilation", 1)) != (1, 1):
            return None
        steps = _pair(a.get("stride", 1))
        pad = _padding(a.get("pad", 0), x.shape, weight, steps, out)
        if flat:  # one-dimensional stride and padding apply to the width
            steps = (1, steps[1])
            pad = None if pad is None else (0, pad[1])
        if pad is None:
            return None
        y = g.conv(x, weight, stride=steps, pad=pad, groups=int(a.get("groups", 1)), pointwise=pw, name=_safe(n.name))
        return g.view(y, n.shape) if flat else y
    if kind == "matmul":
        same_batch = len(tensors) == 2 and len(tensors[0]) == len(tensors[1]) >= 2
        if same_batch and tensors[0].shape[:-2] == tensors[1].shape[:-2]:
            return g.matmul(tensors[0], tensors[1], pointwise=pw, name=_safe(n.name))
        if len(tensors) == 2 and len(tensors[0]) == 2 and len(tensors[1]) > 2:  # W @ x over a batch of x
            batch = "abcdefgh"[: len(tensors[1]) - 2]
            eq = f"mk,{batch}kn->{batch}mn"
            return g.einsum(eq, tensors[0], tensors[1], pointwise=pw, name=_safe(n.name))
        if len(tensors) == 2 and len(tensors[0]) > 2 and len(tensors[1]) == 2:
            eq = _linear_equation(len(tensors[0])).replace(",nk->", ",kn->")
            return g.einsum(eq, tensors[0], tensors[1], pointwise=pw, name=_safe(n.name))
        if len(tensors) == 1 and params and len(params[0].shape) == 2 and ins[0] in env:
            return g.fc(tensors[0], n.shape[-1], pointwise=pw, name=_safe(n.name))
        if len(tensors) == 2 and min(len(tensors[0]), len(tensors[1])) >= 2:
            return _broadcast_matmul(g, tensors[0], tensors[1], pw, _safe(n.name))
        return None
    if kind == "sdpa" and len(tensors) >= 3 and all(x in env for x in ins[:3]):
        q, k, v = (env[x] for x in ins[:3])
        masked = 1 if len(ins) > 3 else 0
        bias = env.get(ins[3]) if masked else None
        return attention(
            g, _safe(n.name), q, k, v, pointwise=pw + masked, causal=bool(a.get("causal")), bias=_per_head(bias, q, k)
        )
    cubes = [p for p in params if len(p.shape) == 3]  # expert weights (not their biases)
    if kind == "moe" and tensors and len(cubes) >= 2:
        up, down = cubes[0].shape, cubes[-1].shape
        x = tensors[0]
        if len(x) != 2 or len(up) != 3 or len(down) != 3:
            return None
        hidden = x.shape[-1]
        width = up[1] if up[2] == hidden else up[2]
        ffn = down[2] if down[1] == hidden else down[1]
        if width not in (ffn, 2 * ffn):
            return None
        gates = tensors[-1] if len(tensors) > 1 and tensors[-1].shape[0] == x.shape[0] else None  # the weights
        moe = g.moe(x, up[0], int(a.get("top_k", 1)), ffn, gated=width == 2 * ffn, gates=gates, name=_safe(n.name))
        for part, cube in (("up", cubes[0]), ("down", cubes[-1])):  # the expert weights each product reads
            if cube.attrs.get("param"):
                g.annotate(f"{_safe(n.name)}.{part}", params=[str(cube.attrs["param"])])
        return moe
    if kind == "einsum" and len(tensors) == 2:
        equation = _no_ellipsis(a["equation"], [len(t) for t in tensors])
        return g.einsum(equation, tensors[0], tensors[1], pointwise=pw, name=_safe(n.name))
    if kind == "embedding" and params and len(params[-1].shape) == 2:
        vocab, dim = params[-1].shape
        if tensors:  # token ids from the input, or computed from it (positions from a padding mask)
            # The lookup is priced on its ids' one-hot form (GraphBuilder.embedding), a graph input;
            # ids computed from the input (integers, cheap to move) enter it as one too.
            ids = tensors[0] if tensors[0].source is None else g.input(tensors[0].shape)
            return g.embedding(ids, vocab, dim, name=_safe(n.name))
        if not tensors and len(n.shape) >= 2:  # constant ids (positions, token types): a lookup all the same
            return g.embedding(g.input(n.shape[:-1]), vocab, dim, name=_safe(n.name))
        return None
    if kind in ("layernorm", "batchnorm", "softmax") and len(tensors) == 1:
        held = min(len(params), 2)  # priced by its weights: RMSNorm's scale, LayerNorm's two, OLMo's none
        if kind == "layernorm":
            return g.layernorm(tensors[0], int(a.get("axis", -1)), name=_safe(n.name), weights=held)
        if kind == "batchnorm":
            # PyTorch's BatchNorm normalises each data-parallel replica's batch on its own: priced
            # per sample (reductions where the last spatial axis splits), a scale and shift per channel
            return g.norm(tensors[0], -1, name=_safe(n.name), kind="batchnorm", weights=held, channel=1)
        return g.softmax(tensors[0], a.get("axis", -1), name=_safe(n.name))
    if kind == "pool" and len(tensors) == 1 and len(tensors[0]) == 4 and len(n.shape) == 4:
        window, stride = a.get("window"), a.get("stride")
        if str(a.get("op", "")).startswith("adaptive") or window is None:  # the window the sizes imply
            (h, w), (oh, ow) = tensors[0].shape[2:], n.shape[2:]
            if h % oh or w % ow:
                return None
            window = stride = (h // oh, w // ow)
        window, stride, pad = _pair(window), _pair(stride or window), _pair(a.get("pad", 0))
        # A window wider than the padded image (a global pooling written as one big window, which
        # ceil_mode lets PyTorch run) pools the whole image: the window it covers.
        sides = [(min(k, size + 2 * q), q) for k, size, q in zip(window, tensors[0].shape[2:], pad, strict=True)]
        if [k for k, _ in sides] != list(window) and n.shape[2:] == (1, 1):
            window = stride = (sides[0][0], sides[1][0])
        return g.pooling(tensors[0], window, stride=stride, pad=pad, name=_safe(n.name))
    if kind == "reduce_mean" and len(tensors) == 1:
        return g.reduce_mean(tensors[0], a.get("axes"), keepdims=a.get("keepdims", False), name=_safe(n.name))
    if kind == "add" and len(tensors) == 2 and tensors[0].shape == tensors[1].shape == n.shape:
        return g.elementwise(tensors[0], tensors[1], pointwise=pw, name=_safe(n.name))
    if kind == "reshape" and len(tensors) == 1:
        if tensors[0].shape == n.shape:
            return tensors[0]
        return g.view(tensors[0], n.shape, name=_safe(n.name))
    if kind == "transpose" and len(tensors) == 1:
        return g.transpose(tensors[0], a["perm"], name=_safe(n.name))
    if kind == "concat" and len(tensors) >= 2:
        return g.concat(tensors, a.get("axis", 0), name=_safe(n.name))
    if kind == "lstm" and len(tensors) == 1 and len(tensors[0]) == 3:
        return g.lstm(tensors[0], n.shape[-1], a.get("layers", 1), name=_safe(n.name))
    return None


def _generic(g: GraphBuilder, n: Node, ins: list[str], env: dict[str, TensorRef], pw: int) -> TensorRef:
    """An elementwise-cost operator over ``n``'s output; inputs align from the right (broadcasting)."""
    axes = [f"d{i}" for i in range(len(n.shape))]
    inputs, extra = [], {}
    for x in ins:
        t = env.get(x)
        if t is None:
            continue
        at = _aligned(tuple(t.shape), tuple(n.shape), stacked=n.attrs.get("op") == "stack")
        k = n.attrs.get("piece_dim")
        if k is not None and len(t.shape) == len(n.shape) and t.shape[k] == n.attrs["pieces"] * n.shape[k]:
            at[k], extra = k, {"pieces": int(n.attrs["pieces"])}  # each device: its share of every piece
        inputs.append((t, [[axes[j]] if j is not None else [] for j in at]))
    shape = n.shape or (1,)
    if not n.shape:
        axes = ["d0"]
    kind = "other" if n.kind in _PRODUCTS or n.kind == "other" or "why" in n.attrs else n.kind
    kind = kind if kind in ("unary", "add", "move", "other") else "move"
    (out,) = g._add(
        kind,
        _safe(n.name),
        "elementwise",
        axes,
        shape,
        inputs,
        [(shape, [[a] for a in axes])],
        pointwise=pw,
        attrs=extra,
    )
    return out


def _aligned(shape: tuple[int, ...], out: tuple[int, ...], *, stacked: bool = False) -> list[int | None]:
    """The output dimension each dimension of an input of ``shape`` runs along (None: broadcast):
    aligned from the right, as broadcasting does; where that leaves a dimension larger than 1
    unmatched and the output only adds dimensions of size 1 (``x[:, :, None]``, ``unsqueeze``), or
    ``stacked`` (``torch.stack`` adds one of any size: the tensors stacked), in order, skipping those.

    >>> _aligned((4, 1, 16), (4, 8, 16))
    [0, None, 2]
    >>> _aligned((4, 2, 32, 16), (4, 2, 1, 32, 16))
    [0, 1, 3, 4]
    >>> _aligned((8, 32, 4), (8, 32, 4, 2), stacked=True), _aligned((8, 4), (8, 2, 4), stacked=True)
    ([0, 1, 2], [0, 2])
    """
    if stacked and len(out) == len(shape) + 1:  # the new dimension wherever the rest is the input's
        for k in range(len(out)):
            if out[:k] + out[k + 1 :] == shape:
                return [i if i < k else i + 1 for i in range(len(shape))]
    offset = len(out) - len(shape)
    right = [
        i + offset if 0 <= i + offset < len(out) and out[i + offset] == size else None for i, size in enumerate(shape)
    ]
    if all(j is not None or size == 1 for j, size in zip(right, shape, strict=True)) or len(shape) > len(out):
        return right
    found: list[int | None] = []
    j = 0
    for size in shape:
        while j < len(out) and out[j] != size and out[j] == 1:
            j += 1
        if j == len(out) or out[j] != size:
            return right
        found.append(j)
        j += 1
    extra = [k for k in range(len(out)) if k not in found]
    return found if all(out[k] == 1 for k in extra) else right


def _padding(
    pad: Any, x: tuple[int, ...], weight: tuple[int, ...], stride: tuple[int, int], out: tuple[int, ...]
) -> tuple[int, int] | None:
    """A convolution's padding as numbers: ``"valid"`` is none; ``"same"`` (and any other string)
    the symmetric padding that gives the recorded output size, None when none does (an even
    kernel's asymmetric "same")."""
    if not isinstance(pad, str):
        return _pair(pad)
    if pad == "valid":
        return (0, 0)
    found = []
    for size, r, s, o in zip(x[-2:], weight[-2:], stride, out[-2:], strict=True):
        p = max(0, ((o - 1) * s + r - size + 1) // 2)
        if (size - r + 2 * p) // s + 1 != o:
            return None
        found.append(p)
    return (found[0], found[1])


def _no_ellipsis(equation: str, ranks: list[int]) -> str:
    """An einsum equation with its ``...`` written as letters of their own (the leading dimensions
    each operand's rank leaves them; the output takes the most).

    >>> _no_ellipsis("...qd,...kd->...qk", [4, 4])
    'ABqd,ABkd->ABqk'
    """
    if "..." not in equation:
        return equation
    inputs, _, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation]
    spans = [rank - len(t.replace("...", "")) for t, rank in zip(terms, ranks, strict=True)]
    widest = max(spans)
    letters = "".join(free[:widest])
    terms = [t.replace("...", letters[widest - k :]) for t, k in zip(terms, spans, strict=True)]
    return ",".join(terms) + "->" + output.replace("...", letters)


def _pair(x: Any) -> tuple[int, int]:
    if isinstance(x, list | tuple):
        return (int(x[0]), int(x[-1]))
    return (int(x), int(x))


def _linear_equation(rank: int) -> str:
    """The einsum of ``x @ w.T`` for an ``rank``-d ``x`` and a 2-d ``w`` (n, k)."""
    lead = "abcdefgh"[: rank - 1]
    return f"{lead}k,nk->{lead}n"


def _per_head(mask: TensorRef | None, q: TensorRef, k: TensorRef) -> TensorRef | None:
    """An attention mask that differs between the heads (T5's and Swin's relative position bias,
    ALiBi): the scores read it along their heads axis, so a split of the heads splits it too (a mask
    shared by the heads, or one that does not add to the scores, is left out: None)."""
    if mask is None or len(mask) != len(q) or q.shape[-3] != k.shape[-3] or q.shape[-3] < 2:
        return None
    if mask.shape[-3] != q.shape[-3]:
        return None
    scores = (*q.shape[:-1], k.shape[-2])
    return mask if all(m in (1, s) for m, s in zip(mask.shape, scores, strict=True)) else None


def attention(
    g: GraphBuilder,
    name: str,
    q: TensorRef,
    k: TensorRef,
    v: TensorRef,
    *,
    pointwise: int = 1,
    fused: bool = True,
    causal: bool = False,
    bias: TensorRef | None = None,
) -> TensorRef:
    """``softmax(q k^T * scale) v`` over ``(..., heads, seq, dim)`` tensors, as what it computes:
    two batched products and a softmax (``<name>.scores``, ``<name>.softmax``, ``<name>``).

    Grouped-query attention (k and v with fewer heads than q, each serving a group of q heads) is
    the same products with the group as an axis of q's side: q is reshaped to (..., kv heads,
    group, seq, dim), so no copy of k or v is priced. ``pointwise`` counts the fused scale (and mask).
    ``fused``: the three run as one kernel, as ``scaled_dot_product_attention`` runs them
    (FlashAttention: the scores neither stored nor streamed; ``causal``: the kernel skips the
    masked half); the operators carry their role in ``fused_attention``. ``bias``: a per-head mask
    (:func:`_per_head`, with ``q``'s heads), read where the kernel adds it, by the softmax.
    """
    if not (len(q) == len(k) == len(v) >= 3) or q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1]:
        raise ModelError(f"attention: shapes {list(q.shape)}, {list(k.shape)}, {list(v.shape)} do not attend")
    if q.shape[-1] != k.shape[-1] or q.shape[-3] % k.shape[-3]:
        raise ModelError(f"attention: q {list(q.shape)} and k {list(k.shape)} do not multiply")
    lead = "ABCDEF"[: len(q) - 3]
    heads, kv_heads = q.shape[-3], k.shape[-3]
    group = heads // kv_heads
    if group == 1:
        s_eq, o_eq = f"{lead}hsd,{lead}htd->{lead}hst", f"{lead}hst,{lead}hte->{lead}hse"
        qq = q
    else:
        s_eq, o_eq = f"{lead}hgsd,{lead}htd->{lead}hgst", f"{lead}hgst,{lead}hte->{lead}hgse"
        qq = g.view(q, (*q.shape[:-3], kv_heads, group, *q.shape[-2:]), name=f"{name}.groups")
    scores = g.einsum(s_eq, qq, k, pointwise=pointwise, name=f"{name}.scores")
    probs = g.softmax(scores, -1, name=f"{name}.softmax", bias=bias)
    out = g.einsum(o_eq, probs, v, name=name if group == 1 else f"{name}.grouped")
    if fused:
        for role, t in (("scores", scores), ("softmax", probs), ("context", out)):
            g.annotate(t, fused_attention=role, causal=causal)
    if group > 1:
        out = g.view(out, (*q.shape[:-1], v.shape[-1]), name=name)
    return out


def inferred_dims(sizes: Sequence[Any]) -> list[int]:
    """The dimensions a ``view`` or ``reshape`` to ``sizes`` leaves PyTorch to work out: ``-1``, or
    a size the model read from a tensor (torch.fx: not a constant). On a tensor split over the
    devices those adapt to the device's share; a constant (the model's head count) does not, so a
    split there makes PyTorch cut another dimension instead (OPT's ``view(bsz, -1, heads, dim)``)."""
    return [i for i, s in enumerate(sizes) if not isinstance(s, int) or s == -1]


def layer_norm_module(mod: Any, nn: Any) -> bool:
    """Whether ``mod`` is PyTorch's ``nn.LayerNorm`` over its last dimension with its own forward (not
    a subclass that normalises otherwise): a norm :mod:`stratopt.torch.norms` can split over its width."""
    layer = nn.LayerNorm
    return isinstance(mod, layer) and type(mod).forward is layer.forward and len(mod.normalized_shape) == 1


def first_line(exc: BaseException) -> str:
    """An exception's message cut to one short line, for one-line errors."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _safe(name: str) -> str:
    return name.replace(" ", "_") or "node"


def flops(graph: Graph) -> float:
    """Forward flops of the dense products (2 per multiply-add of every GEMM, convolution and LSTM
    cell); other operators are memory-bound and not counted. Embedding lookups count 0.

    >>> g = GraphBuilder("mlp"); _ = g.fc(g.input((8, 16)), 4)
    >>> flops(g.build())
    1024.0
    """
    total = 0.0
    for op in graph.operators:
        if op.op in ("gemm", "conv") and not op.attrs.get("lookup"):
            total += 2.0 * math.prod(op.sizes)
        elif op.op == "lstm":  # 4 gates over [x, h]: 2 x 4 x 2 multiply-adds per (layer, t, b, n, k)
            total += 16.0 * math.prod(op.sizes)
    return total


def describe(graph: Graph) -> str:
    """One line: operators by kind, edges and the forward GFLOP of the dense products."""
    kinds: dict[str, int] = {}
    for op in graph.operators:
        kinds[op.op] = kinds.get(op.op, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return (
        f"{graph.name}: {len(graph)} operators ({summary}), {len(graph.edges())} edges, "
        f"{flops(graph) / 1e9:,.3f} GFLOP forward in products"
    )
