"""Import an ONNX model file (optional extra ``onnx``): ONNX shape inference, then the same node
mapping as the PyTorch importer (:mod:`stratopt.importers.common`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.importers.common import Node, emit, first_line

__all__ = ["from_onnx"]

_UNARY = {
    "Relu", "Gelu", "Erf", "Tanh", "Sigmoid", "Sqrt", "Exp", "Log", "Neg", "Abs", "Cast", "LeakyRelu",
    "Elu", "Selu", "Softplus", "HardSigmoid", "Reciprocal", "Clip", "Mish", "HardSwish",
}  # fmt: skip
_BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"}
_VIEW = {"Identity", "Dropout"}
_RESHAPE = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _require_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ModelError("importing an ONNX file needs the 'onnx' extra: pip install 'stratopt[onnx]'") from None
    return onnx


def from_onnx(path: str | os.PathLike[str], *, name: str | None = None) -> Graph:
    """The operator graph of an ONNX model file, its tensor shapes from ONNX shape inference.

    Raises :class:`ModelError` with one line for an unreadable or malformed file, or a tensor whose
    shape is not static (export with fixed input shapes).
    """
    onnx = _require_onnx()
    where = os.fspath(path)
    try:
        model = onnx.load(where)
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:
        raise ModelError(f"{where}: not a readable ONNX model ({first_line(exc)})") from None
    graph = model.graph
    if not graph.node:
        raise ModelError(f"{where}: the ONNX graph has no nodes")
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, int] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        t = info.type.tensor_type
        types[info.name] = t.elem_type
        if t.HasField("shape"):
            shapes[info.name] = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
    init = {t.name: tuple(int(d) for d in t.dims) for t in graph.initializer}
    consts: dict[str, Any] = {t.name: t for t in graph.initializer}
    nodes: list[Node] = []
    for info in graph.input:
        if info.name in init:
            continue
        nodes.append(Node(info.name, "input", [], _static(shapes.get(info.name), info.name, where)))
    for tname, dims in init.items():
        nodes.append(Node(tname, "param", [], dims or (1,)))
    for i, node in enumerate(graph.node):
        out = node.output[0] if node.output else f"node{i}"
        for extra in node.output[1:]:
            nodes.append(Node(extra, "param", [], (1,)))
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    consts[out] = attr.t
            nodes.append(Node(out, "param", [], (1,)))
            continue
        ins = [x for x in node.input if x]
        if all(x in consts for x in ins):  # computed from weights and constants only: a weight itself
            consts[out] = None
            nodes.append(Node(out, "param", [], _static(shapes.get(out), out, where) if out in shapes else (1,)))
            continue
        if out not in shapes or (types.get(out, 1) not in _FLOAT_TYPES and node.op_type != "Gather"):
            nodes.append(Node(out, "param", [], (1,)))  # shape arithmetic, masks: no data to place
            continue
        shape = _static(shapes[out], out, where)
        nodes.append(_map(onnx, node, out, ins, shape, shapes, init, consts))
    label = name or Path(where).stem
    return emit(label, nodes, source=f"imported from ONNX ({Path(where).name})")


def _static(shape: tuple[int, ...] | None, tensor: str, where: str) -> tuple[int, ...]:
    if shape is None or any(d < 1 for d in shape):
        raise ModelError(f"{where}: tensor {tensor!r} has no static shape; export the model with fixed input shapes")
    return shape


def _attrs(onnx: Any, node: Any) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _map(
    onnx: Any,
    node: Any,
    out: str,
    ins: list[str],
    shape: tuple[int, ...],
    shapes: dict[str, tuple[int, ...]],
    init: dict[str, tuple[int, ...]],
    consts: dict[str, Any],
) -> Node:
    op = node.op_type
    a = _attrs(onnx, node)
    attrs: dict[str, Any] = {"op": op}
    data = [x for x in ins if x not in consts]
    if op in ("Gemm", "MatMul"):
        if len(data) == 2:
            return Node(out, "matmul", ins, shape, attrs)
        return Node(out, "fc", ins, shape, attrs)
    if op == "Conv":
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4 or pads[:2] != pads[2:] or list(a.get("dilations", [1, 1])) != [1, 1]:
            return Node(out, "other", ins, shape, attrs)
        attrs.update(stride=tuple(a.get("strides", [1, 1])), pad=tuple(pads[:2]), groups=int(a.get("group", 1)))
        return Node(out, "conv", ins, shape, attrs)
    if op == "Einsum" and len(data) == 2:
        equation = a["equation"].decode() if isinstance(a["equation"], bytes) else a["equation"]
        return Node(out, "einsum", data, shape, {**attrs, "equation": equation})
    if op == "BatchNormalization":
        return Node(out, "batchnorm", ins[:1], shape, attrs)
    if op == "LayerNormalization":
        return Node(out, "layernorm", ins[:1], shape, attrs)
    if op in ("Softmax", "LogSoftmax"):
        return Node(out, "softmax", ins, shape, {**attrs, "axis": int(a.get("axis", -1))})
    if op in ("MaxPool", "AveragePool"):
        pads = list(a.get("pads", [0, 0, 0, 0]))
        k = tuple(a["kernel_shape"])
        attrs.update(window=k, stride=tuple(a.get("strides", [1, 1])), pad=tuple(pads[:2]))
        return Node(out, "pool", ins, shape, attrs)
    src = shapes.get(ins[0], ()) if ins else ()
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return Node(out, "pool", ins, shape, {**attrs, "window": tuple(src[2:4]), "stride": tuple(src[2:4])})
    if op == "ReduceMean":
        axes = a.get("axes")
        if axes is None and len(ins) > 1 and ins[1] in consts:
            axes = onnx.numpy_helper.to_array(consts[ins[1]]).tolist()
        axes = sorted(int(x) % len(src) for x in axes) if axes is not None and src else axes
        keep = bool(a.get("keepdims", 1))
        if len(src) == 4 and axes == [2, 3] and keep:  # a global average pool, as PyTorch's adaptive pooling
            return Node(out, "pool", ins[:1], shape, {**attrs, "window": tuple(src[2:4]), "stride": tuple(src[2:4])})
        return Node(out, "reduce_mean", ins[:1], shape, {**attrs, "axes": axes, "keepdims": keep})
    if op in _VIEW:
        return Node(out, "view", ins[:1], shape, attrs)
    if op in _RESHAPE:
        return Node(out, "reshape", ins[:1], shape, attrs)
    if op == "Transpose":
        perm = list(a.get("perm", range(len(src) - 1, -1, -1)))
        return Node(out, "transpose", ins, shape, {**attrs, "perm": perm})
    if op == "Concat":
        return Node(out, "concat", data, shape, {**attrs, "axis": int(a.get("axis", 0))})
    if op == "Gather" and ins and ins[0] in consts and len(shapes.get(ins[0], init.get(ins[0], ()))) == 2:
        return Node(out, "embedding", [ins[1], ins[0]], shape, attrs)
    if op in _BINARY:
        return Node(out, "add" if len(data) == 2 else "unary", data, shape, attrs)
    if op in _UNARY:
        return Node(out, "unary", data[:1], shape, attrs)
    return Node(out, "other", data, shape, attrs)
