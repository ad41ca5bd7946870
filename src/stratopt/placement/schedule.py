"""Schedules of a placement: simulation, an independent validity check, and seed 004's JCT.

A placement puts every node on one device. Running it needs an order per device; two policies:

- *with an order* (``order[i]`` lists device i's nodes): each node starts as soon as its device has
  finished the node before it and every input has arrived (a semi-active schedule). HEFT, ETF, the
  TensorFlow heuristic and CP-SAT produce such orders, and simulating their order reproduces (or,
  for CP-SAT, left-shifts) the schedule they planned.
- *without one* (what ``stratopt simulate`` does with a bare node -> device map): the rule the
  strategy simulator follows too (FlexFlow's Algorithm 1): each device serves its nodes in the
  order they became ready, that is when their last input arrived (ties: lower node index), the way
  a runtime dispatches operators as their inputs arrive. Such a schedule can be longer than the
  best order for the same placement.

An input produced on another device arrives ``bytes / bandwidth`` after its producer ends (free
without a bandwidth, seed 004's assumption); on the same device it is there at once.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stratopt.errors import ModelError
from stratopt.placement.instance import PlacementInstance

__all__ = ["Schedule", "check_placement", "check_schedule", "jct", "parallel_groups", "simulate"]

#: Absolute slack for comparing times in :func:`check_schedule`, relative to the largest time.
TIME_TOL = 1e-9


@dataclass(frozen=True)
class Schedule:
    """Start and end time of every node, its device, and each device's order."""

    placement: tuple[int, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]

    @property
    def makespan(self) -> float:
        return max(self.end) if self.end else 0.0

    def order(self, num_devices: int) -> list[list[int]]:
        """Each device's nodes by start time (then end time, then index)."""
        out: list[list[int]] = [[] for _ in range(num_devices)]
        for j in sorted(range(len(self.start)), key=lambda j: (self.start[j], self.end[j], j)):
            out[self.placement[j]].append(j)
        return out


def check_placement(instance: PlacementInstance, placement: Sequence[int]) -> tuple[int, ...]:
    """The placement as a tuple of device indices; :class:`ModelError` if it is not one."""
    n, m = instance.num_nodes, instance.num_devices
    if len(placement) != n:
        raise ModelError(f"{instance.name}: a placement needs one device per node: got {len(placement)}, expected {n}")
    out = []
    for j, d in enumerate(placement):
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= int(d) < m:
            raise ModelError(f"{instance.name}: node {instance.nodes[j]!r}: device {d!r} is not an index in 0..{m - 1}")
        out.append(int(d))
    return tuple(out)


def simulate(
    instance: PlacementInstance, placement: Sequence[int], order: Sequence[Sequence[int]] | None = None
) -> Schedule:
    """Run a placement (see the module docstring for the two policies).

    Examples
    --------
    >>> from stratopt.placement.jobs import appendix
    >>> inst = appendix()
    >>> simulate(inst, [1, 1, 0, 2, 0]).makespan
    17.0
    """
    place = check_placement(instance, placement)
    n, m = instance.num_nodes, instance.num_devices
    inputs = instance.in_edges()
    cost = instance.cost
    start = [0.0] * n
    end = [0.0] * n
    done = [False] * n
    free = [0.0] * m

    def ready_at(j: int) -> float:
        d = place[j]
        t = 0.0
        for u, delay in inputs[j]:
            t = max(t, end[u] + (delay if place[u] != d else 0.0))
        return t

    if order is not None:
        queues = _check_order(instance, place, order)
        head = [0] * m
        remaining = n
        while remaining:
            progressed = False
            for i in range(m):
                while head[i] < len(queues[i]):
                    j = queues[i][head[i]]
                    if not all(done[u] for u, _ in inputs[j]):
                        break
                    s = max(free[i], ready_at(j))
                    start[j], end[j] = s, s + float(cost[j, i])
                    free[i] = end[j]
                    done[j] = True
                    head[i] += 1
                    remaining -= 1
                    progressed = True
            if not progressed:
                stuck = [instance.nodes[queues[i][head[i]]] for i in range(m) if head[i] < len(queues[i])]
                raise ModelError(
                    f"{instance.name}: the device order contradicts the edges (waiting forever at {', '.join(stuck)})"
                )
        return Schedule(place, tuple(start), tuple(end))

    # FlexFlow's Algorithm 1, as the strategy simulator runs it: a node is ready when its last
    # input arrives; nodes start in order of readiness (ties: lower index), each at the later of
    # its readiness and the end of what its device ran before.
    missing = [len(p) for p in instance.preds]
    heap = [(0.0, j) for j in range(n) if missing[j] == 0]
    heapq.heapify(heap)
    while heap:
        ready, j = heapq.heappop(heap)
        i = place[j]
        start[j] = max(free[i], ready)
        end[j] = start[j] + float(cost[j, i])
        free[i] = end[j]
        for v in instance.succs[j]:
            missing[v] -= 1
            if missing[v] == 0:
                heapq.heappush(heap, (ready_at(v), v))
    return Schedule(place, tuple(start), tuple(end))


def _check_order(
    instance: PlacementInstance, place: tuple[int, ...], order: Sequence[Sequence[int]]
) -> list[list[int]]:
    m = instance.num_devices
    if len(order) != m:
        raise ModelError(f"{instance.name}: an order needs one list per device: got {len(order)}, expected {m}")
    seen = [False] * instance.num_nodes
    queues = []
    for i, items in enumerate(order):
        queue = []
        for j in items:
            j = int(j)
            if not 0 <= j < instance.num_nodes or seen[j]:
                raise ModelError(
                    f"{instance.name}: device {instance.devices[i].name!r}: order lists node {j} twice or out of range"
                )
            if place[j] != i:
                raise ModelError(
                    f"{instance.name}: node {instance.nodes[j]!r} is ordered on {instance.devices[i].name!r} but placed elsewhere"
                )
            seen[j] = True
            queue.append(j)
        queues.append(queue)
    if not all(seen):
        j = seen.index(False)
        raise ModelError(f"{instance.name}: node {instance.nodes[j]!r} is missing from the device order")
    return queues


def check_schedule(instance: PlacementInstance, schedule: Schedule) -> list[str]:
    """Every way ``schedule`` breaks the rules, as readable lines (empty when it is valid).

    Checked from scratch, sharing nothing with :func:`simulate`: each node runs for exactly its
    cost on its device, starts no earlier than 0 and than each input's arrival (its producer's end,
    plus the transfer time when the two devices differ), and no two nodes of positive length
    overlap on one device.
    """
    problems = []
    n = instance.num_nodes
    place, start, end = schedule.placement, schedule.start, schedule.end
    if not (len(place) == len(start) == len(end) == n):
        return [f"schedule covers {len(start)} nodes, the instance has {n}"]
    scale = max([1.0, *map(abs, end)])
    tol = TIME_TOL * scale
    for j in range(n):
        want = float(instance.cost[j, place[j]])
        if start[j] < -tol:
            problems.append(f"{instance.nodes[j]} starts at {start[j]} < 0")
        if abs(end[j] - start[j] - want) > tol:
            problems.append(
                f"{instance.nodes[j]} runs {end[j] - start[j]}, its cost on {instance.devices[place[j]].name} is {want}"
            )
    delays = instance.transfer_times()
    for (u, v), t in zip(instance.edges.tolist(), delays.tolist(), strict=False):
        arrive = end[u] + (t if place[u] != place[v] else 0.0)
        if start[v] < arrive - tol:
            problems.append(
                f"{instance.nodes[v]} starts at {start[v]} before its input from {instance.nodes[u]} arrives at {arrive}"
            )
    by_device: dict[int, list[int]] = {}
    for j in range(n):
        if end[j] - start[j] > tol:
            by_device.setdefault(place[j], []).append(j)
    for i, items in by_device.items():
        items.sort(key=lambda j: start[j])
        for a, b in itertools.pairwise(items):
            if start[b] < end[a] - tol:
                problems.append(f"{instance.nodes[a]} and {instance.nodes[b]} overlap on {instance.devices[i].name}")
    return problems


def parallel_groups(instance: PlacementInstance) -> list[list[int]]:
    """Nodes grouped by identical predecessor sets (seed 004's "parallel" relation), in order of
    each group's first node."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for j in range(instance.num_nodes):
        groups.setdefault(instance.preds[j], []).append(j)
    return sorted(groups.values(), key=lambda g: g[0])


def jct(instance: PlacementInstance, placement: Sequence[int]) -> float:
    """Seed 004's job completion time: "sum all values; if nodes j and j' are parallel, only add
    the max".

    Reading (the paper gives only the sentence and the appendix's 4 + 6 + 2 + 5 = 17): nodes are
    parallel when they have the same predecessor set; parallel nodes on *different* devices overlap,
    those on one device run one after the other. So each group of parallel nodes contributes the
    largest per-device sum of its costs, and the JCT is the sum over groups. It ignores transfers
    and the overlap of non-sibling branches, which the simulated makespan captures.

    Examples
    --------
    >>> from stratopt.placement.jobs import appendix
    >>> jct(appendix(), [1, 1, 0, 2, 0])
    17.0
    """
    place = check_placement(instance, placement)
    total = 0.0
    for group in parallel_groups(instance):
        per_device: dict[int, float] = {}
        for j in group:
            per_device[place[j]] = per_device.get(place[j], 0.0) + float(instance.cost[j, place[j]])
        total += max(per_device.values())
    return total
