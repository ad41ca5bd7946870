"""The operator-graph JSON format (``stratopt-graph``, version 1): load and save.

::

    {"format": "stratopt-graph", "version": 1, "name": "alexnet", "source": "where it comes from",
     "cutoff": 1,                                            # least block size per split axis (optional)
     "operators": [
       {"name": "conv1", "op": "conv",
        "axes": [["b", 128], ["c", 3], ["h", 55], ...],     # iteration domain, in order
        "locked": ["h", "w"],                                # axes never split (optional)
        "pointwise": 1,                                      # fused pointwise ops (optional)
        "contiguous": false,                                 # reshape-style splits only (optional)
        "attrs": {"batch": [], "m": ["b", "h", "w"], "n": ["n"], "k": ["c", "r", "s"]},
        "inputs": [{"from": null, "shape": [128, 3, 227, 227], "dims": [["b"], ["c"], ["h"], ["w"]]},
                   {"from": null, "param": true, "shape": [96, 3, 11, 11], "dims": [...]}],
        "outputs": [{"shape": [128, 96, 55, 55], "dims": [["b"], ["n"], ["h"], ["w"]]}]},
       {"name": "pool1", ..., "inputs": [{"from": "conv1", "output": 0, "shape": [...], "dims": [...]}]}
     ]}

``dims`` gives, per tensor dimension, the domain axes whose split counts split it. ``from`` names
the producing operator (``null`` for a graph input; ``param: true`` marks weights) and
``output`` which of its outputs (default 0). Operators may appear in any order; a cycle is an
error naming an operator on it. Files may be gzip-compressed.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph, Input, Operator, TensorUse
from stratopt.problem import read_json

__all__ = ["FORMAT", "VERSION", "graph_from_dict", "graph_to_dict", "is_graph_dict", "load_graph", "save_graph"]

FORMAT = "stratopt-graph"
VERSION = 1


def is_graph_dict(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT


def _use_to_dict(use: TensorUse) -> dict[str, Any]:
    return {"shape": list(use.shape), "dims": [list(g) for g in use.dims]}


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    """The JSON-ready form of ``graph``."""
    ops = []
    for op in graph.operators:
        entry: dict[str, Any] = {
            "name": op.name,
            "op": op.op,
            "axes": [[a, s] for a, s in zip(op.axes, op.sizes, strict=True)],
        }
        if op.locked:
            entry["locked"] = [a for a in op.axes if a in op.locked]
        if op.pointwise:
            entry["pointwise"] = op.pointwise
        if op.contiguous:
            entry["contiguous"] = True
        if op.attrs:
            entry["attrs"] = dict(op.attrs)
        inputs = []
        for t in op.inputs:
            item: dict[str, Any] = {"from": t.source}
            if t.source is not None and t.output:
                item["output"] = t.output
            if t.param:
                item["param"] = True
            item.update(_use_to_dict(t.use))
            inputs.append(item)
        entry["inputs"] = inputs
        entry["outputs"] = [_use_to_dict(u) for u in op.outputs]
        ops.append(entry)
    head = {"format": FORMAT, "version": VERSION, "name": graph.name, "source": graph.source}
    if graph.cutoff is not None:
        head["cutoff"] = graph.cutoff
    return {**head, "operators": ops}


def _ints(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise ModelError(f"{where}: expected a list of integers, got {json.dumps(value)[:60]}")
    return tuple(value)


def _use(item: Any, where: str) -> TensorUse:
    if not isinstance(item, dict):
        raise ModelError(f"{where}: expected an object with 'shape' and 'dims'")
    for key in ("shape", "dims"):
        if key not in item:
            raise ModelError(f"{where}: missing {key!r}")
    dims = item["dims"]
    if not isinstance(dims, list) or not all(isinstance(g, list) and all(isinstance(a, str) for a in g) for g in dims):
        raise ModelError(f"{where}: 'dims' must be a list of lists of axis names")
    return TensorUse(_ints(item["shape"], f"{where} shape"), tuple(tuple(g) for g in dims))


def _operator(entry: Any, i: int) -> Operator:
    if not isinstance(entry, dict):
        raise ModelError(f"operators[{i}]: expected an object")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ModelError(f"operators[{i}]: missing or empty 'name'")
    where = f"operator {name!r}"
    op = entry.get("op")
    if not isinstance(op, str):
        raise ModelError(f"{where}: missing 'op'")
    axes = entry.get("axes")
    if not isinstance(axes, list) or not all(
        isinstance(a, list) and len(a) == 2 and isinstance(a[0], str) and isinstance(a[1], int) for a in axes
    ):
        raise ModelError(f"{where}: 'axes' must be a list of [name, size] pairs")
    for key in ("inputs", "outputs"):
        if not isinstance(entry.get(key, []), list):
            raise ModelError(f"{where}: {key!r} must be a list of tensors")
    inputs = []
    for j, item in enumerate(entry.get("inputs", [])):
        if not isinstance(item, dict) or "from" not in item:
            raise ModelError(f"{where}: input {j} needs a 'from' (an operator name, or null for a graph input)")
        source = item["from"]
        if source is not None and not isinstance(source, str):
            raise ModelError(f"{where}: input {j} 'from' must be an operator name or null")
        output = item.get("output", 0)
        if not isinstance(output, int):
            raise ModelError(f"{where}: input {j} 'output' must be an integer")
        inputs.append(Input(source, _use(item, f"{where} input {j}"), output, bool(item.get("param", False))))
    outputs = [_use(item, f"{where} output {j}") for j, item in enumerate(entry.get("outputs", []))]
    locked = entry.get("locked", [])
    if not isinstance(locked, list) or not all(isinstance(a, str) for a in locked):
        raise ModelError(f"{where}: 'locked' must be a list of axis names")
    pointwise = entry.get("pointwise", 0)
    if not isinstance(pointwise, int):
        raise ModelError(f"{where}: 'pointwise' must be an integer")
    attrs = entry.get("attrs", {})
    if not isinstance(attrs, dict):
        raise ModelError(f"{where}: 'attrs' must be an object")
    return Operator(
        name,
        op,
        tuple(a for a, _ in axes),
        tuple(s for _, s in axes),
        tuple(inputs),
        tuple(outputs),
        frozenset(locked),
        pointwise,
        attrs,
        bool(entry.get("contiguous", False)),
    )


def _topological(ops: list[Operator]) -> list[Operator]:
    """Operators in a topological order (file order where possible); a cycle is an error."""
    import networkx as nx

    index: dict[str, int] = {}
    for i, op in enumerate(ops):
        if op.name in index:
            raise ModelError(f"operator {op.name!r} is defined twice")
        index[op.name] = i
    g = nx.DiGraph()
    g.add_nodes_from(index)
    g.add_edges_from((t.source, op.name) for op in ops for t in op.inputs if t.source in index)
    try:
        order = list(nx.lexicographical_topological_sort(g, key=index.__getitem__))
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(g)
        raise ModelError(f"operator {cycle[0][0]!r}: the graph has a cycle through it") from None
    return [ops[index[name]] for name in order]


def graph_from_dict(data: Any, *, source: str = "graph") -> Graph:
    """Read the ``stratopt-graph`` format; :class:`ModelError` names the operator at fault."""
    if not is_graph_dict(data):
        raise ModelError(f'{source}: not a stratopt-graph file (expected "format": "{FORMAT}")')
    version = data.get("version")
    if version != VERSION:
        raise ModelError(f"{source}: stratopt-graph version {version!r} is not supported (this reader knows {VERSION})")
    ops = data.get("operators")
    if not isinstance(ops, list) or not ops:
        raise ModelError(f"{source}: 'operators' must be a non-empty list")
    parsed = [_operator(entry, i) for i, entry in enumerate(ops)]
    cutoff = data.get("cutoff")
    if cutoff is not None and (isinstance(cutoff, bool) or not isinstance(cutoff, int) or cutoff < 1):
        raise ModelError(f"{source}: 'cutoff' must be a positive integer, got {json.dumps(cutoff)}")
    name = str(data.get("name", Path(source).stem))
    return Graph(name, tuple(_topological(parsed)), str(data.get("source", "")), cutoff)


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Load a graph from a ``.json`` or ``.json.gz`` file."""

    return graph_from_dict(read_json(Path(path)), source=os.fspath(path))


def save_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Save a graph as JSON (gzip-compressed when the name ends in ``.gz``), one operator per line."""
    data = graph_to_dict(graph)
    head = {k: v for k, v in data.items() if k != "operators"}
    lines = [json.dumps(op, separators=(",", ":")) for op in data["operators"]]
    text = json.dumps(head)[:-1] + ', "operators": [\n' + ",\n".join(lines) + "\n]}\n"
    target = Path(path)
    try:
        if target.suffix == ".gz":
            with gzip.open(target, "wt", encoding="utf-8") as fh:
                fh.write(text)
        else:
            target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ModelError(f"cannot write {target}: {exc.strerror}") from None
