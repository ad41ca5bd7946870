"""Task graphs: what one training step runs, task by task, on devices and links.

A :class:`TaskGraph` is plain mutable data: every task has a *resource* (a device, or a directed
link between two devices), an execution time, its predecessors and successors, and a *rank*, an
integer consistent with the dependencies (a predecessor's rank is smaller) that breaks ties between
tasks ready at the same time. Ranks are structural (phase, operator, kind, partition, ...), so the
same task gets the same rank however the graph was reached: built at once for a strategy, or edited
one operator at a time. That is what lets the delta simulation reproduce the full one exactly.

:class:`StrategyTasks` builds the graph of a strategy (one configuration per operator of a priced
operator graph) and rebuilds one operator's part when its configuration changes. The model, stated:

- Partition ``j`` of an operator split into ``P`` parts (row-major over its domain axes) runs on
  device ``floor(j p / P)``. A split depends only on the operator's own configuration (so a change
  stays local), consistent splits of the same tensor dimension put the same slice on the same
  device, and a coarser split's partition sits on a device that already holds part of its data:
  the locality a fixed per-operator rule can give.
- Forward: one compute task per partition (the forward part of the profile's compute time,
  :meth:`~stratopt.cost.common.VertexCosts.compute_phases`: a third, one of the three products of
  a GEMM), then, when the profile puts communication on the forward path (the output's
  reduction over a split k), one collective task per partition on the ring link to the next
  partition's device, after all partitions' compute (a collective is a barrier).
- Tensors: for every consumer partition and every producer tile it overlaps, the overlap moves on
  the link between their devices (latency + bytes / bandwidth, intra- or inter-node), unless a copy
  of the tile is already on the consumer's device. A replicated tile is read from the copy on the
  same node first, then the nearest device index after the consumer's.
- Backward: the mirror image. A compute task per partition (the rest of the compute: two thirds,
  and the forward again for a configuration that recomputes its outputs), after its
  forward task and after the gradients of its outputs arrive from every consumer partition that
  read them (to every copy of a replicated tile); then the backward collective, and the
  weight-gradient synchronisation, which nothing waits for but the end of the step.
- An operator on one device has no collectives: its communication time (a local re-layout) joins
  its compute tasks, so a strategy with every operator unsplit simulates to exactly the additive
  model's cost.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from stratopt.errors import ModelError

__all__ = ["KINDS", "StrategyTasks", "TaskGraph", "placement_tasks"]

#: Task kinds by (phase, kind code): phase 0 is forward, 1 backward.
KINDS: dict[tuple[int, int], str] = {
    (0, 0): "transfer",
    (0, 1): "forward",
    (0, 2): "collective",
    (1, 0): "grad-transfer",
    (1, 1): "backward",
    (1, 2): "grad-collective",
    (1, 3): "grad-sync",
}

_XFER, _COMPUTE, _COLL, _SYNC = 0, 1, 2, 3
_SUB_BITS = 60


class TaskGraph:
    """A mutable task graph over devices and links.

    Task ids are list indices; a removed task's id is recycled. ``label[t]`` is
    ``(phase, kind, operator, partition, detail)`` for names and traces.
    """

    def __init__(self, devices: Sequence[str]) -> None:
        self.devices = list(devices)
        self.resource_names: list[str] = list(devices)
        self._links: dict[tuple[int, int], int] = {}
        self.rank: list[int] = []
        self.res: list[int] = []
        self.exe: list[float] = []
        self.preds: list[list[int]] = []
        self.succs: list[list[int]] = []
        self.label: list[tuple[Any, ...]] = []
        self.alive: list[bool] = []
        self._free: list[int] = []
        self.count = 0
        #: When a list, every id :meth:`add` hands out is appended to it (the edit journal).
        self.created: list[int] | None = None

    def link(self, src: int, dst: int) -> int:
        """The resource id of the directed link ``src -> dst`` (created on first use)."""
        key = (src, dst)
        r = self._links.get(key)
        if r is None:
            r = len(self.resource_names)
            self._links[key] = r
            self.resource_names.append(f"{self.devices[src]}->{self.devices[dst]}")
        return r

    @property
    def num_resources(self) -> int:
        return len(self.resource_names)

    def is_link(self, resource: int) -> bool:
        return resource >= len(self.devices)

    def add(self, rank: int, resource: int, exe: float, label: tuple[Any, ...]) -> int:
        if self._free:
            t = self._free.pop()
            self.rank[t], self.res[t], self.exe[t], self.label[t] = rank, resource, float(exe), label
            self.preds[t], self.succs[t], self.alive[t] = [], [], True
        else:
            t = len(self.rank)
            self.rank.append(rank)
            self.res.append(resource)
            self.exe.append(float(exe))
            self.preds.append([])
            self.succs.append([])
            self.label.append(label)
            self.alive.append(True)
        self.count += 1
        if self.created is not None:
            self.created.append(t)
        return t

    def depend(self, before: int, after: int) -> None:
        """``after`` waits for ``before`` to end."""
        self.succs[before].append(after)
        self.preds[after].append(before)

    def remove(self, t: int) -> list[int]:
        """Remove task ``t`` with its dependencies; returns its surviving successors."""
        for p in self.preds[t]:
            self.succs[p].remove(t)
        out = []
        for s in self.succs[t]:
            self.preds[s].remove(t)
            out.append(s)
        self.preds[t], self.succs[t], self.alive[t] = [], [], False
        self._free.append(t)
        self.count -= 1
        return out

    def tasks(self) -> Iterator[int]:
        return (t for t, a in enumerate(self.alive) if a)

    def name(self, t: int) -> str:
        phase, kind, op, part, detail = self.label[t]
        text = f"{KINDS.get((phase, kind), 'task')} {op}"
        if part is not None:
            text += f"[{part}]"
        return text + (f" {detail}" if detail else "")

    def kind(self, t: int) -> str:
        phase, kind = self.label[t][:2]
        return KINDS.get((phase, kind), "task")


def _rank(phase: int, slot: int, kind: int, sub: int, slots: int) -> int:
    return (((phase * slots + slot) * 4 + kind) << _SUB_BITS) | sub


def _sub(*parts: int) -> int:
    """Pack small non-negative integers (< 2**20 each, at most three) into one."""
    out = 0
    for x in parts:
        out = (out << 20) | x
    return out


@functools.lru_cache(maxsize=65536)
def _tiles(dims_splits: tuple[tuple[int, ...], ...], config: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Per partition (row-major over the axes), the tile index along each tensor dimension.

    ``dims_splits[d]`` lists the axis positions that split dimension d (row-major within the group).
    """
    parts = math.prod(config)
    idx = np.array(np.unravel_index(np.arange(parts), config)).T if parts > 1 else np.zeros((1, len(config)), int)
    out = []
    for row in idx.tolist():
        tile = []
        for group in dims_splits:
            t = 0
            for a in group:
                t = t * config[a] + row[a]
            tile.append(t)
        out.append(tuple(tile))
    return tuple(out)


def _splits(dims_splits: tuple[tuple[int, ...], ...], config: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(config[a] for a in group) for group in dims_splits)


@functools.lru_cache(maxsize=65536)
def _overlap(size: int, su: int, sv: int) -> tuple[tuple[float, ...], ...]:
    """Overlap length of producer slice i (of su) and consumer slice j (of sv) along a dimension."""
    out = []
    for i in range(su):
        row = []
        for j in range(sv):
            lo = max(i * size * sv, j * size * su)
            hi = min((i + 1) * size * sv, (j + 1) * size * su)
            row.append(max(0, hi - lo) / (su * sv))
        out.append(tuple(row))
    return tuple(out)


class StrategyTasks:
    """The task graph of a strategy on a priced operator graph, editable one operator at a time.

    Parameters
    ----------
    costing
        A :class:`~stratopt.cost.Costing` (operator graph, configurations, costs per configuration);
        its profile must offer ``message(words, same_node)`` (both built-in profiles do).
    assignment
        Configuration index per operator.
    plans
        A dict to keep the transfer plans of edges in (per pair of configurations); pass the same
        one to several graphs of one costing to share the work.
    """

    def __init__(self, costing: Any, assignment: Sequence[int], *, plans: dict[Any, Any] | None = None) -> None:
        self.costing = costing
        graph = costing.graph
        self.ops = graph.operators
        self.n = len(self.ops)
        self.procs = int(costing.policy.procs)
        profile = costing.profile
        if not hasattr(profile, "message"):
            raise ModelError(
                f"cost profile {getattr(profile, 'name', profile)!r} cannot price messages for the simulator"
            )
        self.profile = profile
        machine = getattr(profile, "machine", None)
        self.per_node = int(getattr(machine, "devices_per_node", self.procs)) if machine is not None else self.procs
        self.edges = costing.edges
        self.in_edges: list[list[int]] = [[] for _ in range(self.n)]
        self.out_edges: list[list[int]] = [[] for _ in range(self.n)]
        for e, (u, v, _) in enumerate(self.edges):
            self.out_edges[u].append(e)
            self.in_edges[v].append(e)
        # Axis positions splitting each dimension of every tensor use, per edge end.
        self._prod_dims: list[tuple[tuple[int, ...], ...]] = []
        self._cons_dims: list[tuple[tuple[int, ...], ...]] = []
        self._shapes: list[tuple[int, ...]] = []
        for u, v, i in self.edges:
            consumed = self.ops[v].inputs[i]
            produced = self.ops[u].outputs[consumed.output]
            self._prod_dims.append(tuple(tuple(self.ops[u].axis_index(a) for a in g) for g in produced.dims))
            self._cons_dims.append(tuple(tuple(self.ops[v].axis_index(a) for a in g) for g in consumed.use.dims))
            self._shapes.append(produced.shape)
        self._phases = [vc.phases() for vc in costing.vertex_costs]
        self._compute = [vc.compute_phases() for vc in costing.vertex_costs]
        self.graph = TaskGraph([f"dev{d}" for d in range(self.procs)])
        self.assignment = [int(c) for c in assignment]
        if len(self.assignment) != self.n:
            raise ModelError(f"the strategy has {len(self.assignment)} choices but the graph has {self.n} operators")
        for v, c in enumerate(self.assignment):
            k = costing.configs[v].shape[0]
            if not 0 <= c < k:
                raise ModelError(f"operator {self.ops[v].name!r}: choice {c} is out of range (it has {k})")
        self._op_tasks: list[dict[str, list[int]]] = [{} for _ in range(self.n)]
        self._edge_tasks: list[list[int]] = [[] for _ in self.edges]
        self._plans: dict[Any, Any] = {} if plans is None else plans
        for v in range(self.n):
            self._build_op(v)
        for e in range(len(self.edges)):
            self._build_edge(e)

    # -- layout ----------------------------------------------------------------------------------

    def config(self, v: int, c: int | None = None) -> tuple[int, ...]:
        row = self.costing.configs[v][self.assignment[v] if c is None else c]
        return tuple(int(x) for x in row)

    def devices_of(self, parts: int) -> tuple[int, ...]:
        return tuple(j * self.procs // parts for j in range(parts))

    # -- building ----------------------------------------------------------------------------------

    def _build_op(self, v: int) -> None:
        c = self.assignment[v]
        parts = math.prod(self.config(v))
        devs = self.devices_of(parts)
        ahead, behind = (float(x[c]) for x in self._compute[v])
        fwd, bwd, sync = (float(x[c]) for x in self._phases[v])
        g, slots, name = self.graph, self.n, self.ops[v].name
        back = self.n - 1 - v
        tasks: dict[str, list[int]] = {"F": [], "C": [], "B": [], "CB": [], "G": []}
        if parts == 1:  # no collective on one device: its communication is local work
            tasks["F"].append(g.add(_rank(0, v, _COMPUTE, 0, slots), devs[0], ahead + fwd, (0, 1, name, 0, "")))
            t = g.add(_rank(1, back, _COMPUTE, 0, slots), devs[0], behind + bwd + sync, (1, 1, name, 0, ""))
            tasks["B"].append(t)
            g.depend(tasks["F"][0], t)
            self._op_tasks[v] = tasks
            return
        for j, d in enumerate(devs):
            tasks["F"].append(g.add(_rank(0, v, _COMPUTE, j, slots), d, ahead, (0, 1, name, j, "")))
            tasks["B"].append(g.add(_rank(1, back, _COMPUTE, j, slots), d, behind, (1, 1, name, j, "")))
            g.depend(tasks["F"][j], tasks["B"][j])
        for key, phase, kind, exe, after in (
            ("C", 0, _COLL, fwd, "F"),
            ("CB", 1, _COLL, bwd, "B"),
            ("G", 1, _SYNC, sync, "B"),
        ):
            if exe <= 0.0:
                continue
            slot = v if phase == 0 else back
            for j, d in enumerate(devs):
                link = g.link(d, devs[(j + 1) % parts])
                t = g.add(_rank(phase, slot, kind, j, slots), link, exe, (phase, kind, name, j, ""))
                tasks[key].append(t)
                for a in tasks[after]:
                    g.depend(a, t)
        self._op_tasks[v] = tasks

    def _ready_fwd(self, u: int, a: int) -> int:
        t = self._op_tasks[u]
        return t["C"][a] if t["C"] else t["F"][a]

    def _ready_bwd(self, v: int, q: int) -> int:
        t = self._op_tasks[v]
        return t["CB"][q] if t["CB"] else t["B"][q]

    def _plan(self, e: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Forward moves ``(q, a, words)`` and backward moves ``(q, a, words)`` of edge ``e``
        (``words`` 0: same device, a plain dependency). Cached per pair of configurations."""
        u, v, _ = self.edges[e]
        key = (e, self.assignment[u], self.assignment[v])
        plan = self._plans.get(key)
        if plan is not None:
            return plan  # type: ignore[no-any-return]
        cu, cv = self.config(u), self.config(v)
        pd, cd, shape = self._prod_dims[e], self._cons_dims[e], self._shapes[e]
        tiles_u, tiles_v = _tiles(pd, cu), _tiles(cd, cv)
        su, sv = _splits(pd, cu), _splits(cd, cv)
        devs_u, devs_v = self.devices_of(len(tiles_u)), self.devices_of(len(tiles_v))
        copies: dict[tuple[int, ...], list[int]] = {}
        for a, tile in enumerate(tiles_u):
            copies.setdefault(tile, []).append(a)
        overlaps = [_overlap(size, s1, s2) for size, s1, s2 in zip(shape, su, sv, strict=True)]
        fwd, bwd = [], []
        p, per_node = self.procs, self.per_node
        for q, tv in enumerate(tiles_v):
            dq = devs_v[q]
            for tile, owners in copies.items():
                words = 1.0
                for d, ov in enumerate(overlaps):
                    words *= ov[tile[d]][tv[d]]
                    if words == 0.0:
                        break
                if words == 0.0:
                    continue
                local = [a for a in owners if devs_u[a] == dq]
                if local:
                    fwd.append((q, local[0], 0.0))
                else:
                    a = min(owners, key=lambda a: (devs_u[a] // per_node != dq // per_node, (devs_u[a] - dq) % p))
                    fwd.append((q, a, words))
                for a in owners:
                    bwd.append((q, a, 0.0 if devs_u[a] == dq else words))
        plan = (tuple(fwd), tuple(bwd))
        self._plans[key] = plan
        return plan

    def _build_edge(self, e: int) -> None:
        u, v, i = self.edges[e]
        fwd, bwd = self._plan(e)
        g, slots = self.graph, self.n
        parts_u = len(self._op_tasks[u]["F"])
        parts_v = len(self._op_tasks[v]["F"])
        devs_u, devs_v = self.devices_of(parts_u), self.devices_of(parts_v)
        name = f"{self.ops[u].name}->{self.ops[v].name}"
        made: list[int] = []
        forward = [(self._ready_fwd(u, a), self._op_tasks[v]["F"][q], devs_u[a], devs_v[q], _sub(i, q, a), words, a, q)
                   for q, a, words in fwd]  # fmt: skip
        backward = [(self._ready_bwd(v, q), self._op_tasks[u]["B"][a], devs_v[q], devs_u[a], _sub(e, q, a), words, q, a)
                    for q, a, words in bwd]  # fmt: skip
        for phase, slot, moves in ((0, v, forward), (1, self.n - 1 - u, backward)):
            for src, dst, d_from, d_to, sub, words, x, y in moves:
                if words == 0.0:  # the data is on the consumer's device already
                    g.depend(src, dst)
                    continue
                exe = self.profile.message(words, d_from // self.per_node == d_to // self.per_node)
                t = g.add(
                    _rank(phase, slot, _XFER, sub, slots),
                    g.link(d_from, d_to),
                    exe,
                    (phase, 0, name, None, f"{x}->{y}"),
                )
                g.depend(src, t)
                g.depend(t, dst)
                made.append(t)
        self._edge_tasks[e] = made

    def doomed(self, v: int) -> list[int]:
        """The tasks a configuration change of operator ``v`` removes: its own and its edges'."""
        out: list[int] = []
        for e in self.in_edges[v] + self.out_edges[v]:
            out.extend(self._edge_tasks[e])
        for ids in self._op_tasks[v].values():
            out.extend(ids)
        return out

    def change(self, v: int, c: int) -> tuple[list[int], list[int]]:
        """Give operator ``v`` configuration ``c``: rebuild its tasks and those of its edges.

        Returns ``(new tasks, surviving tasks whose predecessors changed)``. The removed tasks are
        :meth:`doomed`'s; their ids may be recycled by the new tasks, so a caller keeping per-task
        state must retire them before it calls this.
        """
        k = self.costing.configs[v].shape[0]
        if not 0 <= c < k:
            raise ModelError(f"operator {self.ops[v].name!r}: choice {c} is out of range (it has {k})")
        g = self.graph
        doomed = self.doomed(v)
        for e in self.in_edges[v] + self.out_edges[v]:
            self._edge_tasks[e] = []
        doomed_set = set(doomed)
        touched: set[int] = set()
        for t in doomed:
            for s in g.remove(t):
                if s not in doomed_set:
                    touched.add(s)
        self.assignment[v] = int(c)
        new: list[int] = []
        g.created = new
        try:
            self._build_op(v)
            for e in self.in_edges[v] + self.out_edges[v]:
                self._build_edge(e)
        finally:
            g.created = None
        new_set = set(new)
        # Surviving neighbours that gained predecessors: consumers' forward and producers' backward tasks.
        for t in new:
            for s in g.succs[t]:
                if s not in new_set:
                    touched.add(s)
        touched -= new_set
        return new, sorted(touched)


def placement_tasks(instance: Any, placement: Sequence[int]) -> TaskGraph:
    """The task graph of a device placement: one task per node on its device, and a transfer on
    the link between two devices for every edge that crosses them (when the instance has a
    bandwidth; free transfers are plain dependencies)."""
    if len(placement) != instance.num_nodes:
        raise ModelError(
            f"the placement has {len(placement)} devices but {instance.name} has {instance.num_nodes} nodes"
        )
    g = TaskGraph(list(instance.device_names))
    slots = instance.num_nodes
    position = {j: i for i, j in enumerate(instance.order)}
    ids = []
    for j in range(instance.num_nodes):
        d = int(placement[j])
        if not 0 <= d < instance.num_devices:
            raise ModelError(f"node {instance.nodes[j]!r}: device {d} is out of range")
        ids.append(
            g.add(
                _rank(0, position[j], _COMPUTE, 0, slots),
                d,
                float(instance.cost[j, d]),
                (0, 1, instance.nodes[j], None, ""),
            )
        )
    times = instance.transfer_times()
    for e, (a, b) in enumerate(instance.edges.tolist()):
        da, db = int(placement[a]), int(placement[b])
        if da == db or times[e] <= 0.0:
            g.depend(ids[a], ids[b])
            continue
        t = g.add(
            _rank(0, position[b], _XFER, e, slots),
            g.link(da, db),
            float(times[e]),
            (0, 0, f"{instance.nodes[a]}->{instance.nodes[b]}", None, ""),
        )
        g.depend(ids[a], t)
        g.depend(t, ids[b])
    return g
