"""Import a PyTorch ``nn.Module`` (optional extra ``torch``): torch.fx symbolic tracing with shape
propagation on example inputs, falling back to running the model under an eager tracer
(:mod:`stratopt.importers.trace`) where fx cannot trace (third-party code, meta-device models)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.importers.common import Node, emit, first_line, fused_pieces, inferred_dims, layer_norm_module
from stratopt.importers.trace import MOVES, trace

__all__ = ["from_torch", "reference_flops"]

_UNARY_FUNCS = {
    "relu", "gelu", "silu", "tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "neg", "abs", "erf",
    "relu_", "leaky_relu", "elu", "hardtanh", "pow", "square", "to", "float", "half", "type_as", "type",
    "bfloat16", "double",
}  # fmt: skip
_BINARY_FUNCS = {"add", "sub", "mul", "truediv", "div", "iadd", "imul", "maximum", "minimum", "add_", "mul_"}
_VIEW_FUNCS = {"dropout", "contiguous", "clone", "detach", "identity", "alpha_dropout"}
#: Calls that copy a tensor, re-typed or not: on a weight, that weight.
_RETYPES = {"to", "type", "float", "half", "bfloat16", "double", "type_as", "contiguous", "clone", "detach"}
_RESHAPE_FUNCS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "view_as", "expand_as"}


def _require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ModelError("importing a PyTorch model needs the 'torch' extra: pip install 'stratopt[torch]'") from None
    return torch


def from_torch(module: Any, example_inputs: Sequence[Any], *, name: str | None = None) -> Graph:
    """The operator graph of ``module`` run on ``example_inputs`` (a tuple of tensors).

    Linear, convolution, matmul/bmm, embedding, layer/batch norm, softmax, pooling, LSTM, pointwise
    functions, reshape/permute/cat map to stratopt operators; view-only nodes fold away, pointwise
    functions fuse into the operator before them, and anything else becomes an elementwise-cost
    operator with an :class:`~stratopt.importers.common.UnmappedOperatorWarning` naming it.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    >>> g = from_torch(net, (torch.randn(32, 16),), name="mlp")
    >>> [(op.name, op.op, op.pointwise) for op in g.operators]
    [('_0', 'gemm', 1), ('_2', 'gemm', 0)]
    """
    torch = _require_torch()
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"expected a torch.nn.Module, got {type(module).__name__}")
    example = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    label = name or type(module).__name__
    module = module.eval()
    config: Any = getattr(module, "config", None)
    cached = getattr(config, "use_cache", None)
    if cached:  # a Hugging Face model: no key/value cache (inference-only state) in the graph
        config.use_cache = False
    try:
        nodes = _from_fx(torch, module, example)
    except ModelError:
        raise
    except Exception as fx_error:  # symbolic tracing fails on data-dependent control flow
        try:
            nodes = trace(torch, module, example)
        except Exception as exc:
            raise ModelError(
                f"{label}: cannot trace the model (torch.fx: {first_line(fx_error)}; running it: {first_line(exc)})"
            ) from None
    finally:
        if cached:
            config.use_cache = cached
    return _mark_tied(emit(label, nodes, source=f"imported from PyTorch ({type(module).__name__})"), module)


def _mark_tied(graph: Graph, module: Any) -> Graph:
    """Operators that read a parameter an earlier operator already read, under another module's name
    (a Hugging Face output projection tied to the embedding), marked ``tied`` with that operator's
    name for it: the weight has one state, one gather and one gradient reduction, the first reader's.
    A module that holds the parameter but is not called (T5's ``shared`` beside the encoder's
    ``embed_tokens``) owns nothing: the operator that reads it pays for it."""
    ids = {name: id(p) for name, p in module.named_parameters(remove_duplicate=False)}
    first: dict[int, str] = {}  # parameter -> the name the first operator reading it gave it
    ops = []
    for op in graph.operators:
        names = [str(n) for n in op.attrs.get("params") or ()]
        shared = [first[ids[n]] for n in names if n in ids and first.get(ids[n], n) != n]
        for n in names:
            if n in ids:
                first.setdefault(ids[n], n)
        ops.append(dataclasses.replace(op, attrs={**op.attrs, "tied": shared[0]}) if shared else op)
    return dataclasses.replace(graph, operators=tuple(ops))


def _shape(node: Any) -> tuple[int, ...] | None:
    meta = node.meta.get("tensor_meta") or node.meta.get("val")
    shape = getattr(meta, "shape", None)
    if shape is None:
        return None
    return tuple(int(s) for s in shape)


def _from_fx(torch: Any, module: Any, example: tuple[Any, ...]) -> list[Node]:
    from torch.fx import symbolic_trace
    from torch.fx.passes.shape_prop import ShapeProp

    gm = symbolic_trace(module)
    ShapeProp(gm).propagate(*example)
    modules = dict(gm.named_modules())
    learned = {name for name, _ in gm.named_parameters()}
    nodes: list[Node] = []
    weights: dict[str, str] = {}  # a weight's node, and every re-typed copy of it: the weight's node
    cuts: dict[str, tuple[str, dict[str, int]]] = {}  # a split's or chunk's pieces: (what it cuts, fused_pieces)
    for node in gm.graph.nodes:
        start = len(nodes)
        shape = _shape(node)
        ins = [weights.get(a.name, a.name) for a in node.all_input_nodes]
        if shape is None and node.op in ("call_function", "call_method") and ins:
            fname = getattr(node.target, "__name__", str(node.target))
            metas = node.meta.get("tensor_meta")
            whole = _shape(node.all_input_nodes[0])
            if fname in ("split", "chunk") and isinstance(metas, tuple | list) and whole is not None:
                shapes = [tuple(int(s) for s in m.shape) for m in metas if hasattr(m, "shape")]
                cuts[node.name] = (ins[0], fused_pieces({n.name: n for n in nodes}, ins[0], whole, shapes))
        if node.op == "output" or shape is None:
            continue
        if (
            node.op == "call_function"
            and getattr(node.target, "__name__", "") == "getitem"
            and ins[:1]
            and ins[0] in cuts
        ):
            source, pieces = cuts[ins[0]]  # a piece of a split: read from what the split cuts
            nodes.append(Node(node.name, "move", [source], shape, {"op": "getitem", **pieces}))
            if _scope(node):
                nodes[-1].attrs["scope"] = _scope(node)
            continue
        if node.op == "get_attr":
            weights[node.name] = node.name
        elif node.op in ("call_method", "call_function") and ins and ins[0] in weights:
            fname = getattr(node.target, "__name__", str(node.target))
            if fname in _RETYPES:  # a router's float32 copy of its weight: still that weight
                weights[node.name] = weights[ins[0]]
                continue
        if node.op == "placeholder":
            nodes.append(Node(node.name, "input", [], shape))
        elif node.op == "get_attr":  # a parameter, or a buffer: a constant (position ids), not a weight
            named = {"param": str(node.target)} if str(node.target) in learned else {}
            nodes.append(Node(node.name, "param", [], shape, named))
        elif node.op == "call_module":
            nodes.extend(_module_node(torch, node, modules[node.target], ins, shape))
        else:
            target = node.target
            fname = getattr(target, "__name__", str(target)) if node.op == "call_function" else str(target)
            fname = fname.strip("_") if fname.startswith("__") else fname
            if fname == "scaled_dot_product_attention":
                nodes.extend(_attention(node, ins, shape))
            else:
                nodes.append(_function_node(node, fname, ins, shape))
        scope = _scope(node)
        for made in nodes[start:] if scope else ():  # the module that made each node (its operators keep it)
            made.attrs["scope"] = scope
    return nodes


def _scope(node: Any) -> str:
    """The innermost module whose forward made ``node`` (qualified name; a leaf module's own node:
    the module; "" at the top), from the module stack torch.fx records as it traces."""
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1]
    return str(path[0] if isinstance(path, tuple) else path)


def _params(module: Any, prefix: str, qualified: str) -> list[Node]:
    return [
        Node(f"{prefix}.{k}", "param", [], tuple(p.shape), {"param": f"{qualified}.{k}"})
        for k, p in module.named_parameters(recurse=False)
    ]


def _module_node(torch: Any, node: Any, mod: Any, ins: list[str], shape: tuple[int, ...]) -> list[Node]:
    nn = torch.nn
    params = _params(mod, node.name, str(node.target))
    names = ins + [p.name for p in params]
    kinds: list[tuple[Any, str]] = [
        (nn.Linear, "fc"),
        (nn.Embedding, "embedding"),
        (nn.LayerNorm, "layernorm"),
        (nn.RMSNorm, "layernorm"),  # a leaf module to torch.fx: its one scale is its weight
        (nn.BatchNorm2d, "batchnorm"),
        (nn.BatchNorm1d, "batchnorm"),
        (nn.Softmax, "softmax"),
        (nn.LSTM, "lstm"),
        (nn.Flatten, "reshape"),
        (nn.Dropout, "view"),
        (nn.Identity, "view"),
    ]
    for cls, kind in kinds:
        if isinstance(mod, cls):
            attrs: dict[str, Any] = {"op": type(mod).__name__}
            if kind == "softmax":
                attrs["axis"] = mod.dim if mod.dim is not None else -1
            if kind == "layernorm":
                attrs["layer_norm"] = layer_norm_module(mod, nn)
            if kind == "lstm":
                if not mod.batch_first or mod.bidirectional or mod.input_size != mod.hidden_size:
                    return [*params, Node(node.name, "other", names, shape, attrs)]
                attrs["layers"] = mod.num_layers
            return [*params, Node(node.name, kind, names, shape, attrs)]
    if isinstance(mod, nn.Conv1d | nn.Conv2d):
        pad = mod.padding if isinstance(mod.padding, str) else tuple(mod.padding)
        attrs = {"op": type(mod).__name__, "stride": tuple(mod.stride), "pad": pad, "groups": mod.groups}
        if any(d != 1 for d in mod.dilation) or mod.padding_mode != "zeros":
            return [*params, Node(node.name, "other", names, shape, attrs)]
        return [*params, Node(node.name, "conv", names, shape, attrs)]
    if isinstance(mod, nn.MaxPool2d | nn.AvgPool2d):
        k, s, p = (_pair(x) for x in (mod.kernel_size, mod.stride or mod.kernel_size, mod.padding))
        return [Node(node.name, "pool", names, shape, {"op": type(mod).__name__, "window": k, "stride": s, "pad": p})]
    if isinstance(mod, nn.AdaptiveAvgPool2d | nn.AdaptiveMaxPool2d):
        return [Node(node.name, "pool", names, shape, _adaptive(node, shape))]
    if isinstance(mod, nn.ZeroPad2d | nn.ConstantPad2d | nn.ReflectionPad2d | nn.ReplicationPad2d):
        return [Node(node.name, "move", names, shape, {"op": type(mod).__name__})]  # data movement
    if isinstance(mod, nn.ReLU | nn.GELU | nn.SiLU | nn.Tanh | nn.Sigmoid | nn.LeakyReLU):
        return [Node(node.name, "unary", names, shape, {"op": type(mod).__name__})]
    return [*params, Node(node.name, "other", names, shape, {"op": type(mod).__name__})]


def _adaptive(node: Any, shape: tuple[int, ...]) -> dict[str, Any]:
    src = _shape(node.all_input_nodes[0]) or shape
    h, w = src[-2], src[-1]
    oh, ow = shape[-2], shape[-1]
    if h % oh or w % ow:
        return {"op": "AdaptivePool (uneven)", "window": (1, 1)}
    return {"op": "AdaptivePool", "window": (h // oh, w // ow), "stride": (h // oh, w // ow)}


def _pair(x: Any) -> tuple[int, int]:
    return (int(x[0]), int(x[1])) if isinstance(x, list | tuple) else (int(x), int(x))


def _function_node(node: Any, fname: str, ins: list[str], shape: tuple[int, ...]) -> Node:
    args = node.args
    attrs: dict[str, Any] = {"op": fname}
    tensor_args = [a for a in args if hasattr(a, "meta") and _shape(a) is not None]
    if fname in ("linear",):
        return Node(node.name, "fc", ins, shape, attrs)
    if fname in ("matmul", "bmm", "mm"):
        return Node(node.name, "matmul", ins, shape, attrs)
    if fname in ("softmax", "log_softmax"):
        dim = node.kwargs.get("dim", args[1] if len(args) > 1 else -1)
        return Node(node.name, "softmax", ins, shape, {**attrs, "axis": int(dim)})
    if fname in ("layer_norm",):
        return Node(node.name, "layernorm", ins, shape, attrs)
    if fname in _VIEW_FUNCS:
        return Node(node.name, "view", ins[:1], shape, attrs)
    if fname in _RESHAPE_FUNCS:
        if fname in ("view", "reshape") and len(args) > 1 and type(args[1]).__name__ != "dtype":  # sizes (nodes: read)
            sizes = args[1] if isinstance(args[1], list | tuple) else args[1:]
            attrs["inferred"] = inferred_dims(sizes)
        return Node(node.name, "reshape", ins[:1], shape, attrs)
    if fname in ("transpose", "permute", "t"):
        src = _shape(args[0]) or shape
        if fname == "permute":
            perm = [int(d) % len(src) for d in (args[1:] if not isinstance(args[1], list | tuple) else args[1])]
        else:
            d0, d1 = (int(args[1]) % len(src), int(args[2]) % len(src)) if fname == "transpose" else (0, 1)
            perm = list(range(len(src)))
            perm[d0], perm[d1] = perm[d1], perm[d0]
        return Node(node.name, "transpose", ins[:1], shape, {**attrs, "perm": perm})
    if fname in ("cat", "concat"):
        dim = node.kwargs.get("dim", args[1] if len(args) > 1 else 0)
        return Node(node.name, "concat", ins, shape, {**attrs, "axis": int(dim)})
    if fname in ("mean",):
        dims = node.kwargs.get("dim", args[1] if len(args) > 1 else None)
        axes = None if dims is None else [int(d) for d in (dims if isinstance(dims, list | tuple) else [dims])]
        keep = bool(node.kwargs.get("keepdim", args[2] if len(args) > 2 else False))
        return Node(node.name, "reduce_mean", ins, shape, {**attrs, "axes": axes, "keepdims": keep})
    if fname in _BINARY_FUNCS:
        return Node(node.name, "add" if len(tensor_args) == 2 else "unary", ins, shape, attrs)
    if fname in _UNARY_FUNCS or fname.endswith("_"):
        return Node(node.name, "unary", ins, shape, attrs)
    if fname in MOVES:  # slicing, selection, constants like the eager tracer's: data movement, no warning
        return Node(node.name, "move", ins, shape, attrs)
    if fname == "einsum" and isinstance(args[0], str) and len(tensor_args) == 2:
        return Node(node.name, "einsum", ins, shape, {**attrs, "equation": args[0]})
    if fname == "embedding":
        return Node(node.name, "embedding", ins, shape, attrs)
    if fname in ("conv1d", "conv2d"):
        # F.conv2d called by the model's own code, or by a subclass of nn.Conv2d that fx traces
        # through (Hugging Face's depthwise convolutions): the same operator as the module.
        def arg(i: int, key: str, default: Any) -> Any:
            return node.kwargs.get(key, args[i] if len(args) > i else default)

        conv = {"stride": arg(3, "stride", 1), "pad": arg(4, "padding", 0), "dilation": arg(5, "dilation", 1)}
        return Node(node.name, "conv", ins, shape, {**attrs, **conv, "groups": int(arg(6, "groups", 1))})
    return Node(node.name, "other", ins, shape, attrs)


def _attention(node: Any, ins: list[str], shape: tuple[int, ...]) -> list[Node]:
    """scaled_dot_product_attention(q, k, v[, mask]) (see :func:`~stratopt.importers.common.attention`)."""
    causal = node.kwargs.get("is_causal", node.args[5] if len(node.args) > 5 else False)
    return [Node(node.name, "sdpa", ins, shape, {"op": "scaled_dot_product_attention", "causal": bool(causal)})]


def reference_flops(module: Any, example_inputs: Sequence[Any]) -> float:
    """PyTorch's own count of ``module``'s forward flops on ``example_inputs``
    (:class:`torch.utils.flop_counter.FlopCounterMode`: products, convolutions and attention).

    On the CPU, scaled dot-product attention runs as
    ``aten._scaled_dot_product_flash_attention_for_cpu``, which the counter has no formula for; it
    is given one here (the same two products as the CUDA kernels' formula), so attention is counted.
    So is ``aten._grouped_mm``, the grouped product ``transformers`` runs mixture-of-experts layers
    with (2 flops per multiply-add of every routed row).

    >>> import torch
    >>> reference_flops(torch.nn.Linear(16, 8), (torch.randn(4, 16),))
    1024.0
    """
    torch = _require_torch()
    from torch.utils import flop_counter

    aten = torch.ops.aten
    mapping: dict[Any, Any] = {}
    cpu_sdpa = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_sdpa is not None:

        def cpu_attention(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            return int(flop_counter.sdpa_flop_count(query, key, value))

        mapping[cpu_sdpa] = cpu_attention
    grouped = getattr(aten, "_grouped_mm", None)
    if grouped is not None:

        def grouped_products(a: Any, b: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            # (rows, k) x (groups, k, n) with each row in one group: 2 flops per multiply-add
            if len(a) == 2 and len(b) == 3:
                return 2 * a[0] * a[1] * b[2]
            return 2 * math.prod(out_shape) * a[-1]

        mapping[grouped] = grouped_products
    example = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    counter = flop_counter.FlopCounterMode(display=False, custom_mapping=mapping)
    with torch.no_grad(), counter:
        module.eval()(*example)
    return float(counter.get_total_flops())
