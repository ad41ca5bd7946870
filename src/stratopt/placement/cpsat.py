"""Makespan-optimal placement with CP-SAT.

Per node j: start and end; per node and device a presence literal x_ji and an optional interval
of the node's cost on that device (exactly one present); NoOverlap per device. An edge u -> v
makes v wait for u's end, plus the transfer time unless both sit on one device (a literal
``same_uv`` that may be true only when the two presences agree on every device). Device memory, when
given, bounds the sum of the memory of the nodes placed there. Interchangeable devices (same kind,
costs and memory) are used in order of first use, which removes their relabelings without losing
an optimum. The model starts from a full hint: the best list-scheduling plan.

CP-SAT needs integers. When every cost and transfer time is an integer after scaling by a power
of ten (up to 10^6), the model is exact. Otherwise durations are rounded *down* at a scale that
keeps the horizon near 10^7: the model then relaxes the true one, so its bound is still a proven
lower bound, and its schedule is re-timed with the true durations (simulating its device order),
so the reported makespan is always the true one.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.errors import SolverError
from stratopt.placement.instance import PlacementInstance
from stratopt.placement.schedule import Schedule, simulate
from stratopt.solvers.base import Limit, Status

__all__ = ["CpsatPlan", "cpsat_placement", "map_status"]


@dataclass(frozen=True)
class CpsatPlan:
    placement: list[int] | None
    order: list[list[int]] | None
    status: Status
    limit: Limit | None
    bound: float | None
    stats: dict[str, Any]


def map_status(name: str, *, exact: bool = True, has_hint: bool = False) -> tuple[Status, Limit | None]:
    """Our status for a CP-SAT status name (every value of ``cp_model.CpSolverStatus``).

    ``exact``: the model's durations and memory are the instance's own (not scaled and rounded),
    so CP-SAT's OPTIMAL is a proof; ``has_hint``: a feasible hinted schedule is the answer when
    CP-SAT keeps none.
    """
    if name == "OPTIMAL":
        return (Status.OPTIMAL, None) if exact else (Status.FEASIBLE, Limit.PRECISION)
    if name == "FEASIBLE":
        return Status.FEASIBLE, Limit.TIME
    if name == "INFEASIBLE":
        return Status.INFEASIBLE, None
    if name == "UNKNOWN":
        return (Status.FEASIBLE if has_hint else Status.NO_SOLUTION), Limit.TIME
    if name == "MODEL_INVALID":
        return Status.ERROR, None
    raise SolverError(f"unmapped CP-SAT status {name}")


def _integral_scale(values: np.ndarray) -> int | None:
    for k in range(7):
        scaled = values * 10**k
        if (
            np.all(np.abs(scaled - np.round(scaled)) <= 1e-9 * np.maximum(1.0, np.abs(scaled)))
            and scaled.max(initial=0) < 2**40
        ):
            return 10**k
    return None


def cpsat_placement(
    instance: PlacementInstance,
    *,
    hint: tuple[list[int], list[list[int]]] | None = None,
    time_limit: float | None = 30.0,
    num_workers: int | None = None,
    seed: int | None = None,
    memory: bool = True,
) -> CpsatPlan:
    """Solve for the least makespan; see the module docstring. ``hint`` is a placement and device
    order (its makespan also sets the horizon). Without a solution from CP-SAT in the time limit
    the hint comes back as the answer (``stats["answer_from"] = "hint"``)."""
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    n, m = instance.num_nodes, instance.num_devices
    delays = instance.transfer_times()
    values = np.concatenate([instance.cost.ravel(), delays])
    scale = _integral_scale(values)
    exact = scale is not None
    if scale is None:
        horizon_guess = float(instance.cost.max(axis=1).sum() + delays.sum()) or 1.0
        scale = max(1, int(1e7 / horizon_guess))
    dur = np.floor(instance.cost * scale + 1e-9).astype(np.int64)
    lag = np.floor(delays * scale + 1e-9).astype(np.int64)
    horizon = int(dur.max(axis=1).sum() + lag.sum())
    classes = _interchangeable(instance, dur)
    # With free transfers and no binding memory, nodes running at once form an antichain, so a
    # schedule can be recoloured onto `width` devices of each class: drop the rest.
    free = not lag.any()
    need = instance.node_memory
    width = _width(instance) if free else n
    dropped: set[int] = set()
    if free:
        for devices in classes:
            dev = instance.devices[devices[0]]
            if not memory or dev.memory is None or need.sum() <= dev.memory:
                dropped.update(devices[width:])
    hint_schedule: Schedule | None = None
    if hint is not None:
        scaled = PlacementInstance.build(
            devices=list(instance.devices),
            nodes=list(instance.nodes),
            cost=dur.astype(float),
            edges=[
                (instance.nodes[u], instance.nodes[v], float(b))
                for (u, v), b in zip(instance.edges.tolist(), lag.tolist(), strict=False)
            ],
            bandwidth=1.0 if instance.bandwidth is not None else None,
            name=instance.name,
        )
        hint_schedule = simulate(scaled, hint[0], hint[1])
        place = list(hint_schedule.placement)
        if dropped:
            place = _recolour(hint_schedule, classes, width, dropped)
        place = _canonical(place, classes)
        hint_schedule = Schedule(tuple(place), hint_schedule.start, hint_schedule.end)
        horizon = min(horizon, round(hint_schedule.makespan))

    model = cp_model.CpModel()
    start = [model.new_int_var(0, horizon, f"s{j}") for j in range(n)]
    end = [model.new_int_var(0, horizon, f"e{j}") for j in range(n)]
    x = [[model.new_bool_var(f"x{j}_{i}") for i in range(m)] for j in range(n)]
    per_device: list[list[Any]] = [[] for _ in range(m)]
    for j in range(n):
        model.add_exactly_one(x[j])
        for i in range(m):
            d = int(dur[j, i])
            if d > horizon or i in dropped:
                model.add(x[j][i] == 0)
                continue
            per_device[i].append(model.new_optional_interval_var(start[j], d, end[j], x[j][i], f"iv{j}_{i}"))
    for i in range(m):
        model.add_no_overlap(per_device[i])
    memory_exact = True
    if memory:
        for i, dev in enumerate(instance.devices):
            if dev.memory is None or need.sum() <= dev.memory or i in dropped:
                continue
            memory_exact &= bool(np.all(need == np.round(need))) and float(dev.memory).is_integer()
            model.add(sum(math.ceil(need[j]) * x[j][i] for j in range(n) if need[j] > 0) <= math.floor(dev.memory))
    for k, (u, v) in enumerate(instance.edges.tolist()):
        model.add(start[v] >= end[u])
        if lag[k] == 0:
            continue
        same = model.new_bool_var(f"same{k}")
        for i in range(m):
            model.add(x[u][i] == x[v][i]).only_enforce_if(same)
        model.add(start[v] >= end[u] + int(lag[k])).only_enforce_if(same.Not())
    _break_symmetry(model, n, [[i for i in c if i not in dropped] for c in classes], x)
    makespan = model.new_int_var(0, horizon, "makespan")
    model.add_max_equality(makespan, end)
    model.minimize(makespan)
    if hint_schedule is not None:
        for j in range(n):
            model.add_hint(start[j], round(hint_schedule.start[j]))
            model.add_hint(end[j], round(hint_schedule.end[j]))
            for i in range(m):
                model.add_hint(x[j][i], hint_schedule.placement[j] == i)
        model.add_hint(makespan, round(hint_schedule.makespan))

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = num_workers or os.cpu_count() or 1
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = max(0.01, time_limit - (time.perf_counter() - started))
    if seed is not None:
        solver.parameters.random_seed = int(seed)
    code = solver.solve(model)
    name = solver.status_name(code)
    stats: dict[str, Any] = {
        "scale": scale,
        "exact_durations": exact,
        "cpsat_status": name,
        "devices_in_model": m - len(dropped),
        "width": width if free else None,
        "branches": solver.num_branches,
        "conflicts": solver.num_conflicts,
    }
    status, limit = map_status(name, exact=exact and memory_exact, has_hint=hint_schedule is not None)
    bound = None
    if name in ("OPTIMAL", "FEASIBLE") and memory_exact:
        bound = solver.best_objective_bound / scale
    if name in ("OPTIMAL", "FEASIBLE"):
        place = [next(i for i in range(m) if solver.boolean_value(x[j][i])) for j in range(n)]
        starts = [solver.value(start[j]) for j in range(n)]
        order: list[list[int]] = [[] for _ in range(m)]
        for j in sorted(range(n), key=lambda j: (starts[j], solver.value(end[j]), j)):
            order[place[j]].append(j)
        return CpsatPlan(place, order, status, limit, bound, stats)
    if status is Status.FEASIBLE and hint_schedule is not None:
        stats["answer_from"] = "hint"
        return CpsatPlan(list(hint_schedule.placement), hint_schedule.order(m), status, limit, None, stats)
    return CpsatPlan(None, None, status, limit, None, stats)


def _width(instance: PlacementInstance) -> int:
    """The most nodes that can run at once: the largest antichain of the graph (Dilworth: n minus
    a maximum matching between nodes and the nodes they reach)."""
    n = instance.num_nodes
    reach = [0] * n
    for j in reversed(instance.order):
        r = 0
        for v in instance.succs[j]:
            r |= (1 << v) | reach[v]
        reach[j] = r
    reaches = [[k for k in range(n) if reach[j] >> k & 1] for j in range(n)]
    owner = [-1] * n  # right node -> left node matched to it

    def augment(root: int) -> bool:
        # Kuhn's augmenting path, depth first without recursion. via[k]: the left node that
        # reached right node k; came[u]: the right node through which left node u was reached.
        seen = [False] * n
        via: dict[int, int] = {}
        came: dict[int, int] = {}
        stack = [(root, iter(reaches[root]))]
        while stack:
            u, untried = stack[-1]
            for k in untried:
                if seen[k]:
                    continue
                seen[k] = True
                via[k] = u
                if owner[k] < 0:
                    while True:  # flip the path back to the root
                        u = via[k]
                        owner[k] = u
                        if u == root:
                            return True
                        k = came[u]
                came[owner[k]] = k
                stack.append((owner[k], iter(reaches[owner[k]])))
                break
            else:
                stack.pop()
        return False

    matched = sum(augment(j) for j in range(n))
    return n - matched


def _recolour(schedule: Schedule, classes: list[list[int]], width: int, dropped: set[int]) -> list[int]:
    """Move a schedule's nodes within each class onto its first ``width`` devices without
    changing any time (interval colouring: at most ``width`` nodes of a class run at once)."""
    place = list(schedule.placement)
    for devices in classes:
        if not any(i in dropped for i in devices):
            continue
        members = sorted(
            (j for j, d in enumerate(place) if d in devices), key=lambda j: (schedule.start[j], schedule.end[j], j)
        )
        free_at = {i: -math.inf for i in devices[:width]}
        for j in members:
            i = min((i for i in devices[:width] if free_at[i] <= schedule.start[j]), default=None)
            assert i is not None, "more nodes at once than the graph's width"
            place[j] = i
            free_at[i] = schedule.end[j]
    return place


def _interchangeable(instance: PlacementInstance, dur: np.ndarray) -> list[list[int]]:
    """Classes of two or more devices with the same kind, durations and memory."""
    classes: dict[tuple[Any, ...], list[int]] = {}
    for i, dev in enumerate(instance.devices):
        classes.setdefault((dev.kind, dev.memory, dur[:, i].tobytes()), []).append(i)
    return [c for c in classes.values() if len(c) > 1]


def _canonical(place: list[int], classes: list[list[int]]) -> list[int]:
    """Relabel devices within each class in order of first use (by node index), as the symmetry
    breaking demands; interchangeable devices make this keep every time."""
    rename: dict[int, int] = {}
    for devices in classes:
        first = sorted(devices, key=lambda i: (min((j for j, d in enumerate(place) if d == i), default=len(place)), i))
        rename.update(zip(first, devices, strict=False))
    return [rename.get(d, d) for d in place]


def _break_symmetry(model: Any, n: int, classes: list[list[int]], x: list[list[Any]]) -> None:
    """Among interchangeable devices d_0, d_1, ..., d_t may take node j only if d_{t-1} holds
    some node j' < j: devices are used in order of first use."""
    for devices in classes:
        # used[t][j]: device devices[t] holds one of nodes 0..j.
        used = [[model.new_bool_var(f"used{i}_{j}") for j in range(n)] for i in devices[:-1]]
        for t, i in enumerate(devices[:-1]):
            for j in range(n):
                prev = [used[t][j - 1]] if j else []
                model.add_bool_or([*prev, x[j][i]]).only_enforce_if(used[t][j])
                model.add_implication(x[j][i], used[t][j])
                if prev:
                    model.add_implication(prev[0], used[t][j])
        for t, i in enumerate(devices[1:]):
            model.add(x[0][i] == 0)
            for j in range(1, n):
                model.add_implication(x[j][i], used[t][j - 1])
