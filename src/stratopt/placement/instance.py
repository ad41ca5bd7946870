"""Placement instances: a job graph whose operators run whole on one device of a heterogeneous set.

The file format (DESIGN section 5)::

    {"format": "stratopt-placement", "version": 1, "capacity": 100,
     "bandwidth": 1e9,                          # optional: bytes per time unit between devices
     "devices": [{"name": "cpu1", "kind": "cpu", "memory": 8e9}, ...],
     "nodes": [{"name": "n1", "op": "conv", "cost": {"cpu": 4, "gpu": 2}, "memory": 1e6}, ...],
     "edges": [{"src": "n1", "dst": "n2", "bytes": 4096}, ...]}

A node's ``cost`` is keyed by device name or by device kind (a name wins over a kind). Without
``bandwidth`` transfers are free, seed 004's assumption; with it, an edge whose ends sit on different
devices delays its consumer by ``bytes / bandwidth``. Device ``memory`` and node ``memory`` are
optional and only the memory-aware algorithms (``etf``, ``cpsat``) honour them. ``capacity`` is seed
004's i_cap; left out, it is the sum over nodes of their largest cost, the least value that keeps
every benefit b_ij >= 1 as the paper's proof requires.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.problem import read_json

__all__ = [
    "FORMAT",
    "Device",
    "PlacementInstance",
    "is_placement_dict",
    "placement_from_dict",
    "read_placement",
    "read_placement_map",
]

FORMAT = "stratopt-placement"


@dataclass(frozen=True)
class Device:
    """One device: a unique name, a kind (``cpu``, ``gpu``, ...) and optional memory."""

    name: str
    kind: str
    memory: float | None = None


@dataclass(frozen=True, eq=False)
class PlacementInstance:
    """A job graph and a device set. Immutable; arrays are read-only.

    Attributes
    ----------
    cost
        ``(n, m)`` float array: time of node ``j`` on device ``i`` is ``cost[j, i]``.
    edges
        ``(E, 2)`` int array of ``(src, dst)`` node indices; ``edge_bytes`` the data each carries.
    order
        A topological order of the nodes (Kahn's algorithm, lowest index first).

    Examples
    --------
    >>> inst = PlacementInstance.build(
    ...     devices=[Device("cpu", "cpu"), Device("gpu", "gpu")],
    ...     nodes=["a", "b"], cost=[[4, 2], [1, 3]], edges=[("a", "b", 0)])
    >>> inst.num_nodes, inst.num_devices, inst.capacity
    (2, 2, 7.0)
    """

    name: str
    devices: tuple[Device, ...]
    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    cost: np.ndarray
    node_memory: np.ndarray
    edges: np.ndarray
    edge_bytes: np.ndarray
    capacity: float
    bandwidth: float | None
    order: tuple[int, ...]
    preds: tuple[tuple[int, ...], ...] = field(repr=False)
    succs: tuple[tuple[int, ...], ...] = field(repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        *,
        devices: Sequence[Device],
        nodes: Sequence[str],
        cost: Any,
        edges: Sequence[tuple[str, str, float]] = (),
        ops: Sequence[str] | None = None,
        node_memory: Any = None,
        capacity: float | None = None,
        bandwidth: float | None = None,
        name: str = "placement",
    ) -> PlacementInstance:
        """Check and freeze the parts; raises :class:`ModelError` naming the bad item."""
        if not devices:
            raise ModelError(f"{name}: no devices")
        if not nodes:
            raise ModelError(f"{name}: no nodes")
        _unique([d.name for d in devices], f"{name}: device")
        _unique(list(nodes), f"{name}: node")
        n, m = len(nodes), len(devices)
        c = np.array(cost, dtype=float)
        if c.shape != (n, m):
            raise ModelError(f"{name}: cost table is {c.shape}, expected ({n}, {m}) (nodes x devices)")
        bad = ~np.isfinite(c) | (c < 0)
        if bad.any():
            j, i = map(int, np.argwhere(bad)[0])
            raise ModelError(
                f"{name}: node {nodes[j]!r} on device {devices[i].name!r}: cost {c[j, i]!r} is not a finite number >= 0"
            )
        mem = np.zeros(n) if node_memory is None else np.array(node_memory, dtype=float)
        if mem.shape != (n,) or (~np.isfinite(mem) | (mem < 0)).any():
            raise ModelError(f"{name}: node memory must be {n} finite numbers >= 0")
        for d in devices:
            if d.memory is not None and not (math.isfinite(d.memory) and d.memory >= 0):
                raise ModelError(f"{name}: device {d.name!r}: memory {d.memory!r} is not a finite number >= 0")
        if bandwidth is not None and not (math.isfinite(bandwidth) and bandwidth > 0):
            raise ModelError(f"{name}: bandwidth {bandwidth!r} must be a finite number > 0")
        index = {v: j for j, v in enumerate(nodes)}
        pairs, sizes = [], []
        for k, (src, dst, size) in enumerate(edges):
            where = f"{name}: edge {k} ({src} -> {dst})"
            if src not in index or dst not in index:
                missing = src if src not in index else dst
                raise ModelError(f"{where}: unknown node {missing!r}")
            if src == dst:
                raise ModelError(f"{where}: a node cannot feed itself")
            if not (isinstance(size, (int, float)) and math.isfinite(size) and size >= 0):
                raise ModelError(f"{where}: bytes {size!r} is not a finite number >= 0")
            pairs.append((index[src], index[dst]))
            sizes.append(float(size))
        e = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        preds: list[list[int]] = [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        for u, v in e.tolist():
            if v not in succs[u]:
                succs[u].append(v)
                preds[v].append(u)
        order = _topological(n, succs, nodes, name)
        if capacity is None:
            capacity = float(c.max(axis=1).sum()) or 1.0
        elif not (isinstance(capacity, (int, float)) and math.isfinite(capacity) and capacity > 0):
            raise ModelError(f"{name}: capacity {capacity!r} must be a finite number > 0")
        op_names = tuple(ops) if ops is not None else tuple("op" for _ in nodes)
        for arr in (c, mem, e):
            arr.setflags(write=False)
        sz = np.array(sizes, dtype=float)
        sz.setflags(write=False)
        return cls(
            name=name,
            devices=tuple(devices),
            nodes=tuple(nodes),
            ops=op_names,
            cost=c,
            node_memory=mem,
            edges=e,
            edge_bytes=sz,
            capacity=float(capacity),
            bandwidth=None if bandwidth is None else float(bandwidth),
            order=tuple(order),
            preds=tuple(tuple(sorted(p)) for p in preds),
            succs=tuple(tuple(sorted(s)) for s in succs),
        )

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def describe(self) -> str:
        """``name: N nodes, E edges, D devices``: the instance in one line."""
        return f"{self.name}: {self.num_nodes} nodes, {len(self.edges)} edges, {self.num_devices} devices"

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def transfer_time(self, edge: int) -> float:
        """Time an edge's data takes between two different devices (0 without a bandwidth)."""
        if self.bandwidth is None:
            return 0.0
        return float(self.edge_bytes[edge]) / self.bandwidth

    def transfer_times(self) -> np.ndarray:
        """``transfer_time`` of every edge, as an array."""
        if self.bandwidth is None:
            return np.zeros(len(self.edges))
        return self.edge_bytes / self.bandwidth

    def in_edges(self) -> list[list[tuple[int, float]]]:
        """Per node, ``(src, transfer time)`` for each incoming edge (parallel edges add up)."""
        acc: list[dict[int, float]] = [{} for _ in self.nodes]
        for (u, v), t in zip(self.edges.tolist(), self.transfer_times().tolist(), strict=False):
            acc[v][u] = acc[v].get(u, 0.0) + t
        return [sorted(d.items()) for d in acc]

    def device_index(self, name: str) -> int:
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        raise ModelError(f"{self.name}: no device named {name!r} (devices: {', '.join(self.device_names)})")

    def _cost_dict(self, j: int) -> dict[str, float | int]:
        """Node j's costs keyed by device kind where every device of a kind agrees, else by name."""
        by_kind: dict[str, set[float]] = {}
        for d, x in zip(self.devices, self.cost[j].tolist(), strict=True):
            by_kind.setdefault(d.kind, set()).add(x)
        if all(len(v) == 1 for v in by_kind.values()):
            return {kind: _num(next(iter(v))) for kind, v in by_kind.items()}
        return {d.name: _num(x) for d, x in zip(self.devices, self.cost[j].tolist(), strict=True)}

    def to_dict(self) -> dict[str, Any]:
        """The JSON object :func:`placement_from_dict` reads back (costs by device kind where the
        kind's devices agree, else by device name)."""
        devices = []
        for d in self.devices:
            item: dict[str, Any] = {"name": d.name, "kind": d.kind}
            if d.memory is not None:
                item["memory"] = d.memory
            devices.append(item)
        nodes = []
        for j, v in enumerate(self.nodes):
            node: dict[str, Any] = {
                "name": v,
                "op": self.ops[j],
                "cost": self._cost_dict(j),
            }
            if self.node_memory[j]:
                node["memory"] = _num(self.node_memory[j])
            nodes.append(node)
        out: dict[str, Any] = {"format": FORMAT, "version": 1, "name": self.name, "capacity": _num(self.capacity)}
        if self.bandwidth is not None:
            out["bandwidth"] = _num(self.bandwidth)
        out["devices"] = devices
        out["nodes"] = nodes
        out["edges"] = [
            {"src": self.nodes[u], "dst": self.nodes[v], "bytes": _num(b)}
            for (u, v), b in zip(self.edges.tolist(), self.edge_bytes, strict=False)
        ]
        return out


def _num(x: float) -> float | int:
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for v in names:
        if not isinstance(v, str) or not v:
            raise ModelError(f"{what} name {v!r} must be a non-empty string")
        if v in seen:
            raise ModelError(f"{what} name {v!r} appears twice")
        seen.add(v)


def _topological(n: int, succs: list[list[int]], nodes: Sequence[str], name: str) -> list[int]:
    """Nodes in topological order, the lowest index first among those ready; a cycle is an error
    naming a node on it."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from((u, v) for u in range(n) for v in succs[u])
    try:
        return list(nx.lexicographical_topological_sort(g))
    except nx.NetworkXUnfeasible:
        on_cycle = min(u for u, _ in nx.find_cycle(g))
        raise ModelError(
            f"{name}: the edges form a cycle through node {nodes[on_cycle]!r}; a job graph must be acyclic"
        ) from None


# ---------------------------------------------------------------------------------- JSON


def is_placement_dict(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{where}: {value!r} is not a number")
    return float(value)


def placement_from_dict(data: Any, *, source: str = "placement") -> PlacementInstance:
    """Read the JSON object of DESIGN section 5; :class:`ModelError` names the bad field."""
    if not is_placement_dict(data):
        raise ModelError(f'{source}: not a placement instance (expected "format": "{FORMAT}")')
    if data.get("version", 1) != 1:
        raise ModelError(f"{source}: version {data.get('version')!r} is not supported (this reader knows version 1)")
    for key in ("devices", "nodes"):
        if not isinstance(data.get(key), list):
            raise ModelError(f"{source}: field {key!r} must be a list")
    edges_in = data.get("edges", [])
    if not isinstance(edges_in, list):
        raise ModelError(f"{source}: field 'edges' must be a list")
    devices = []
    for i, d in enumerate(data["devices"]):
        where = f"{source}: devices[{i}]"
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise ModelError(f"{where}: needs a string 'name'")
        kind = d.get("kind", d["name"])
        if not isinstance(kind, str):
            raise ModelError(f"{where} ({d['name']}): 'kind' must be a string")
        memory = None if d.get("memory") is None else _number(d["memory"], f"{where} ({d['name']}): memory")
        devices.append(Device(d["name"], kind, memory))
    names, ops, rows, mems = [], [], [], []
    for j, v in enumerate(data["nodes"]):
        where = f"{source}: nodes[{j}]"
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            raise ModelError(f"{where}: needs a string 'name'")
        where = f"{source}: node {v['name']!r}"
        cost = v.get("cost")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            cost = {d.kind: cost for d in devices}
        if not isinstance(cost, dict):
            raise ModelError(f"{where}: 'cost' must map device names or kinds to times")
        known = {d.name for d in devices} | {d.kind for d in devices}
        for key in cost:
            if key not in known:
                raise ModelError(f"{where}: cost for {key!r}, which is neither a device nor a device kind")
        row = []
        for d in devices:
            if d.name in cost:
                row.append(_number(cost[d.name], f"{where}: cost on {d.name}"))
            elif d.kind in cost:
                row.append(_number(cost[d.kind], f"{where}: cost on {d.kind}"))
            else:
                raise ModelError(f"{where}: no cost for device {d.name!r} (kind {d.kind!r})")
        names.append(v["name"])
        ops.append(str(v.get("op", "op")))
        rows.append(row)
        mems.append(_number(v.get("memory", 0), f"{where}: memory"))
    edges = []
    for k, e in enumerate(edges_in):
        if not isinstance(e, dict) or not isinstance(e.get("src"), str) or not isinstance(e.get("dst"), str):
            raise ModelError(f"{source}: edges[{k}]: needs string 'src' and 'dst'")
        edges.append((e["src"], e["dst"], _number(e.get("bytes", 0), f"{source}: edges[{k}] bytes")))
    capacity = None if data.get("capacity") is None else _number(data["capacity"], f"{source}: capacity")
    bandwidth = None if data.get("bandwidth") is None else _number(data["bandwidth"], f"{source}: bandwidth")
    return PlacementInstance.build(
        devices=devices,
        nodes=names,
        cost=np.array(rows, dtype=float).reshape(len(names), len(devices)),
        edges=edges,
        ops=ops,
        node_memory=mems,
        capacity=capacity,
        bandwidth=bandwidth,
        name=str(data.get("name", source)),
    )


def read_placement(path: str | os.PathLike[str]) -> PlacementInstance:
    """Read a placement instance file (``.json`` or ``.json.gz``)."""

    p = Path(path)
    return placement_from_dict(read_json(p), source=os.fspath(path))


def read_placement_map(inst: PlacementInstance, text: str) -> tuple[list[int], list[list[int]] | None]:
    """A placement as users write it: a node -> device-name map, from a JSON file or string; a
    ``place --json`` object works too (its device order is then returned as well). Returns
    (device index per node, device order or None); a one-line :class:`ModelError` for bad input."""
    try:
        # Inline JSON first: a long object is no file name (and would fail as one).
        raw = text if text.lstrip().startswith("{") else Path(text).read_text(encoding="utf-8")
        data = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"{text}: not a readable JSON file or object ({exc})") from None
    order_in = None
    if isinstance(data, dict) and isinstance(data.get("placement"), dict):
        order_in = data.get("order")
        data = data["placement"]
    if not isinstance(data, dict):
        raise ModelError(f"{text}: expected a JSON object mapping node name to device name")
    index = {v: j for j, v in enumerate(inst.nodes)}
    for v in data:
        if v not in index:
            raise ModelError(f"{text}: node {v!r} is not in {inst.name}")
    missing = [v for v in inst.nodes if v not in data]
    if missing:
        raise ModelError(
            f"{text}: no device for node {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
        )
    placement = []
    for v in inst.nodes:
        if not isinstance(data[v], str):
            raise ModelError(f"{text}: node {v!r}: device {data[v]!r} is not a device name")
        placement.append(inst.device_index(data[v]))
    order: list[list[int]] | None = None
    if isinstance(order_in, dict):
        order = [[] for _ in inst.devices]
        for dev, nodes in order_in.items():
            if not isinstance(nodes, list) or not all(isinstance(v, str) and v in index for v in nodes):
                raise ModelError(f"{text}: order of {dev!r} must list node names of {inst.name}")
            order[inst.device_index(dev)] = [index[v] for v in nodes]
    return placement, order
