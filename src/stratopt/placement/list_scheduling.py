"""List-scheduling placements: TensorFlow's greedy heuristic, HEFT and memory-aware ETF.

Each returns a placement and the device order it planned; simulating that order
(:func:`stratopt.placement.schedule.simulate`) reproduces the planned schedule.
"""

from __future__ import annotations

import bisect

import numpy as np

from stratopt.errors import ModelError
from stratopt.placement.instance import PlacementInstance

__all__ = ["etf", "heft", "tf_greedy", "upward_rank"]

Plan = tuple[list[int], list[list[int]]]


def _arrival(
    instance: PlacementInstance, inputs: list[tuple[int, float]], device: int, place: list[int], end: list[float]
) -> float:
    t = 0.0
    for u, delay in inputs:
        t = max(t, end[u] + (delay if place[u] != device else 0.0))
    return t


def tf_greedy(instance: PlacementInstance) -> Plan:
    """TensorFlow whitepaper's placement heuristic: visit nodes in topological order and put each
    on the device where it would finish earliest, given the devices' queues so far and the
    transfers its inputs need; ties to the lower device index.

    References
    ----------
    M. Abadi et al., "TensorFlow: Large-Scale Machine Learning on Heterogeneous Distributed
    Systems", 2015, section 3.2.1; seed 004's Heuristic-G.
    """
    n, m = instance.num_nodes, instance.num_devices
    inputs = instance.in_edges()
    cost = instance.cost
    place, end = [-1] * n, [0.0] * n
    free = [0.0] * m
    order: list[list[int]] = [[] for _ in range(m)]
    for j in instance.order:
        best_i, best_end = 0, float("inf")
        for i in range(m):
            finish = max(free[i], _arrival(instance, inputs[j], i, place, end)) + float(cost[j, i])
            if finish < best_end:
                best_i, best_end = i, finish
        place[j], end[j] = best_i, best_end
        free[best_i] = best_end
        order[best_i].append(j)
    return place, order


def upward_rank(instance: PlacementInstance) -> list[float]:
    """HEFT's upward rank: mean cost over devices plus the longest (mean cost + transfer) path to
    an exit node. The transfer counts in full, as if every edge crossed devices."""
    mean = instance.cost.mean(axis=1).tolist()
    delay: dict[tuple[int, int], float] = {}
    for (u, v), t in zip(instance.edges.tolist(), instance.transfer_times().tolist(), strict=False):
        delay[(u, v)] = delay.get((u, v), 0.0) + t
    rank = [0.0] * instance.num_nodes
    for j in reversed(instance.order):
        rank[j] = mean[j] + max((delay[(j, v)] + rank[v] for v in instance.succs[j]), default=0.0)
    return rank


def heft(instance: PlacementInstance) -> Plan:
    """Heterogeneous Earliest Finish Time: nodes by decreasing upward rank (ties by topological
    position), each on the device giving the earliest finish, allowed to fill an idle gap
    between tasks already there (insertion); ties to the lower device index.

    References
    ----------
    H. Topcuoglu, S. Hariri, M.-Y. Wu, "Performance-effective and low-complexity task scheduling
    for heterogeneous computing", IEEE TPDS 13(3), 2002.
    """
    n, m = instance.num_nodes, instance.num_devices
    rank = upward_rank(instance)
    position = {j: k for k, j in enumerate(instance.order)}
    inputs = instance.in_edges()
    cost = instance.cost
    place, end = [-1] * n, [0.0] * n
    # Per device: its (start, end, node) slots by start time.
    slots: list[list[tuple[float, float, int]]] = [[] for _ in range(m)]
    for j in sorted(range(n), key=lambda j: (-rank[j], position[j])):
        best = (float("inf"), 0, 0.0, 0)  # finish, device, start, slot index
        for i in range(m):
            ready = _arrival(instance, inputs[j], i, place, end)
            length = float(cost[j, i])
            s, k = _earliest_gap(slots[i], ready, length)
            if s + length < best[0]:
                best = (s + length, i, s, k)
        finish, i, s, k = best
        place[j], end[j] = i, finish
        slots[i].insert(k, (s, finish, j))
    return place, [[j for _, _, j in device] for device in slots]


def _earliest_gap(slots: list[tuple[float, float, int]], ready: float, length: float) -> tuple[float, int]:
    """Earliest start >= ready where ``length`` fits between the device's tasks, and the index
    the new slot takes."""
    prev_end = 0.0
    for k, (s, e, _) in enumerate(slots):
        start = max(ready, prev_end)
        if start + length <= s:
            return start, k
        prev_end = max(prev_end, e)
    return max(ready, prev_end), len(slots)


def etf(instance: PlacementInstance, *, memory: bool = True) -> Plan:
    """Earliest Task First with device memory (Baechi's m-ETF): repeatedly schedule, among the
    nodes whose inputs are all scheduled and the devices with room for the node's memory, the
    pair that can start earliest; ties to the node of higher upward rank, then (on heterogeneous
    devices, where equal starts hide unequal costs) to the device where it finishes first, then
    the lower node and device index. Devices without a memory size have unlimited room.

    Raises :class:`ModelError` when some node fits on no device.

    References
    ----------
    J.-J. Hwang, Y.-C. Chow, F. D. Anger, C.-Y. Lee, "Scheduling precedence graphs in systems with
    interprocessor communication times", SIAM J. Comput. 18(2), 1989; B. Jeon et al., "Baechi:
    fast device placement of machine learning graphs", SoCC 2020 (m-ETF).
    """
    n, m = instance.num_nodes, instance.num_devices
    rank = upward_rank(instance)
    inputs = instance.in_edges()
    cost = instance.cost
    room = [d.memory if (memory and d.memory is not None) else float("inf") for d in instance.devices]
    need = instance.node_memory.tolist()
    place, end = [-1] * n, [0.0] * n
    free = [0.0] * m
    order: list[list[int]] = [[] for _ in range(m)]
    missing = [len(p) for p in instance.preds]
    ready = sorted(j for j in range(n) if missing[j] == 0)
    while ready:
        best: tuple[float, float, float, int, int] | None = None
        for j in ready:
            for i in range(m):
                if need[j] > room[i]:
                    continue
                s = max(free[i], _arrival(instance, inputs[j], i, place, end))
                key = (s, -rank[j], s + float(cost[j, i]), j, i)
                if best is None or key < best:
                    best = key
        if best is None:
            j = ready[0]
            raise ModelError(
                f"{instance.name}: etf: node {instance.nodes[j]!r} needs {need[j]:g} bytes and no device has that much memory left "
                f"(most free: {max(room):g})"
            )
        s, _, _, j, i = best
        place[j], end[j] = i, s + float(cost[j, i])
        free[i] = end[j]
        room[i] -= need[j]
        order[i].append(j)
        ready.remove(j)
        for v in instance.succs[j]:
            missing[v] -= 1
            if missing[v] == 0:
                bisect.insort(ready, v)
    return place, order


def memory_use(instance: PlacementInstance, placement: list[int] | tuple[int, ...]) -> np.ndarray:
    """Memory each device holds: the sum of its nodes' memory."""
    use = np.zeros(instance.num_devices)
    np.add.at(use, np.asarray(placement, dtype=np.int64), instance.node_memory)
    return use
