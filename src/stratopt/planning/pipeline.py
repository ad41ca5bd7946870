"""Pipeline stages and intra-operator splits in one search.

The operator graph's order is cut into stages; each stage runs on its own group of devices with its
own intra-operator strategy, and micro-batches flow through the stages under a 1F1B schedule. The
search chooses the cuts, the group sizes and (so) the number of stages together, exactly, in the
spirit of Alpa's inter-operator pass:

- **Where a cut may go**: between two operators (in the graph's topological order) where exactly
  one tensor crosses, the residual stream between two blocks, say (:func:`cut_points`). Stages are
  runs of consecutive *units*, the pieces between those cuts.
- **A stage's time** is the exact intra-operator optimum of its subgraph on its group of devices,
  per micro-batch (the graph as given is one micro-batch), with the weight-gradient
  synchronisation counted once per iteration (``1 / M`` of it per micro-batch). The whole graph is
  priced once per group size; since one tensor crosses each cut, its producer separates the units,
  each unit reduces to a table over the choices of the producer it receives and the one it sends on
  (the DP's eliminations stopped short of those two), and every stage's optimum is a min-plus chain
  of its units' tables: exact, and alike units share one table.
- **Group sizes** divide the cluster the way it is built: a divisor of the devices in a node, or a
  whole number of nodes. Stages take consecutive devices, so the transfer between two stages
  crosses nodes exactly when the devices before the boundary fill whole nodes.
- **The objective** is 1F1B's iteration time for M micro-batches: every stage (and every transfer
  between stages, counted as a stage of its own) runs each micro-batch once, forward and backward,
  and the slowest one sets the pace: ``sum(times) + (M - 1) * max(times)``.

The tables' times are additive (communication hidden operator by operator, which the DP needs);
the stages the search picks are priced again by the one model of a step that ``plan`` prices every
strategy with (:meth:`~stratopt.cost.Costing.stage_time`), and the plan's ``estimate`` is 1F1B's
formula over those, its ``objective`` the search's own value.

The search is a DP over (units placed, devices used) for every candidate bottleneck time T (each
stage and transfer at most T, the sum least), taking the best ``sum + (M - 1) * T``; T runs over the
stage and transfer times in increasing order and stops once ``(M - 1) * T`` alone exceeds the best
answer: exact for this objective over these cuts and group sizes (tested against brute force).

Memory: stage k of S holds its weight state and the activations of ``min(S - k, M)`` micro-batches
(1F1B's in-flight count) within the device's memory. A stage whose fastest strategy does not fit
there takes the cheapest one the Lagrangian memory search finds that does
(:func:`stratopt.planning.memory.under_memory`): exact where the fastest strategies fit, a heuristic (with a
proven bound) for the stages where memory binds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.planning.cluster import cluster
from stratopt.planning.memory import under_memory
from stratopt.planning.stages import (
    PipelinePlan,
    Stage,
    crossing_bytes,
    group_sizes,
    one_f_one_b,
    stage_costing,
    transfer_time,
    unit_cuts,
)
from stratopt.planning.units import StageCosts
from stratopt.problem import evaluate


def search(
    graph: Graph,
    nodes: int,
    gpus_per_node: int,
    *,
    machine: str | Any = "h100",
    microbatches: int = 1,
    stages: int | None = None,
    max_units: int | None = 12,
    memory_gb: float | None = None,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> PipelinePlan:
    """The best pipeline for ``graph`` (one micro-batch) on ``nodes`` x ``gpus_per_node`` devices.

    ``stages``: exactly that many stages (None: any number, the search chooses). ``max_units``:
    at most that many units between candidate cuts (see :func:`cut_points`; None keeps every cut).
    ``memory_gb``: per device (default: the machine's); stage k of S must hold its weight state and
    the activations of ``min(S - k, microbatches)`` micro-batches (1F1B keeps that many in flight),
    with its fastest strategy where that fits, else with the cheapest fitting one the Lagrangian
    memory search finds. Devices may be left unused (as the intra-operator policy allows).
    ``progress`` receives a line per group size priced and per stage fitted under memory.

    >>> plan = search(__import__("stratopt").load_instance("alexnet"), 1, 4, stages=1)
    >>> len(plan.stages), plan.stages[0].devices <= 4
    (1, True)
    """
    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise ModelError(f"the number of micro-batches must be a positive integer, got {microbatches!r}")
    if stages is not None and (isinstance(stages, bool) or not isinstance(stages, int) or stages < 1):
        raise ModelError(f"the number of stages must be a positive integer or 'auto', got {stages!r}")
    where = cluster(nodes, gpus_per_node, machine)
    say = progress or (lambda _msg: None)
    cuts = unit_cuts(graph, max_units)
    units = len(cuts) - 1
    if stages is not None and stages > units:
        raise ModelError(f"{graph.name}: {stages} stages asked, but the graph has only {units} places to cut")
    p = where.devices
    sizes = [g for g in group_sizes(nodes, gpus_per_node) if g <= p]
    cost = StageCosts(graph, cuts, where.machine, microbatches, time_limit)
    time = cost.times(units, sizes, say)
    say(f"{graph.name}: {units} units, group sizes {sizes}: {cost.tables} unit tables, {cost.solves} slices solved")
    crossing = {c: crossing_bytes(graph, c) for c in cuts[1:-1]}

    def transfer(c: int, boundary_devices: int) -> float:
        return transfer_time(crossing[c], boundary_devices, where)

    limit = (where.machine.memory_gb if memory_gb is None else float(memory_gb)) * 1e9
    fitted = _Fitted(cost, time, limit, say)

    def most(j: int) -> int:  # the most micro-batches in flight on a stage ending at unit j
        return min(microbatches, units - j + 1)

    # Memory depends on a stage's place (how many stages follow it) only through the in-flight
    # count; when every stage's fastest strategy fits even with the most it can have in flight,
    # one DP over any number of stages is exact, else one DP per stage count, each knowing every
    # stage's place, with each stage's best strategy that fits there.
    binding = any(fitted(i, j, g, most(j)) > t for (i, j, g), t in time.items())
    if binding:
        say(f"{graph.name}: the memory limit of {limit / 1e9:g} GB binds: stages fitted per in-flight count")

    # Stage times as nested lists [i][j][size index], per in-flight count when memory binds (0: the
    # fastest strategies), and transfers [unit][devices before]: the DP below reads them millions of times.
    def cell(i: int, j: int, g: int, f: int) -> float:
        if f == 0:
            return time[(i, j, g)]
        return fitted(i, j, g, f) if f <= most(j) else math.inf  # past its most, never asked for

    flights = range(1, microbatches + 1) if binding else range(0, 1)
    tables = {
        f: [[[cell(i, j, g, f) for g in sizes] if j > i else [] for j in range(units + 1)] for i in range(units)]
        for f in flights
    }
    moves = [[transfer(cuts[i], d) if 0 < i < units and d > 0 else 0.0 for d in range(p + 1)] for i in range(units)]

    def table(left: int | None) -> list[list[list[float]]]:
        return tables[0] if left is None or not binding else tables[min(left, microbatches)]

    values = {t for tab in tables.values() for row in tab for sized in row for t in sized}
    candidates = sorted(
        {t for t in values if t < math.inf} | {moves[i][d] for i in range(1, units) for d in range(1, p)}
    )
    if microbatches == 1:  # the objective is the sum alone: no bound on the slowest stage
        candidates = [math.inf]
    counts: list[int | None] = [stages] if stages is not None or not binding else list(range(1, units + 1))
    best: tuple[float, list[tuple[int, int, int]]] | None = None
    for count in counts:
        floor = _least_sum_under(units, sizes, p, table, moves, count, math.inf)
        floor_value = math.inf if floor is None else floor[0]
        for bound in candidates:
            if floor_value == math.inf or (best is not None and (microbatches - 1) * bound + floor_value >= best[0]):
                break
            found = _least_sum_under(units, sizes, p, table, moves, count, bound)
            if found is None:
                continue
            total, layout = found
            value = total + ((microbatches - 1) * bound if microbatches > 1 else 0.0)
            if best is None or value < best[0] - 1e-9:
                best = (value, layout)
    if best is None:
        what = f"{stages} stages" if stages is not None else "stages"
        raise ModelError(f"{graph.name}: no pipeline of {what} on {p} devices fits {limit / 1e9:g} GB per device")
    _, layout = best
    plan_stages = []
    transfers: list[float] = []
    searched: list[float] = []  # the stages' additive times, as the search priced them
    used = 0
    for k, (i, j, g) in enumerate(layout):
        flight = min(len(layout) - k, microbatches)
        if binding:
            additive, assignment = fitted.strategy(i, j, g, flight)
        else:
            additive, assignment = time[(i, j, g)], fitted.fastest(i, j, g)
        searched.append(additive)
        # Found by the tables' additive times; priced, as plan prices every strategy, by the step model.
        stage = Stage(cuts[i], cuts[j], g, 0.0, assignment)
        per_micro = stage_costing(graph, stage, where.machine).stage_time(assignment, microbatches)
        plan_stages.append(dataclasses.replace(stage, time=per_micro))
        used += g
        if k < len(layout) - 1:
            transfers.append(transfer(cuts[j], used))
    return PipelinePlan(
        tuple(plan_stages), tuple(transfers), microbatches, used, one_f_one_b(searched + transfers, microbatches)
    )


class _Fitted:
    """A stage's least time among strategies that fit ``limit`` bytes per device with ``flight``
    micro-batches in flight (+inf when none does): its fastest strategy's time when that fits (or
    when every strategy does), else the least-cost strategy the Lagrangian memory search of
    :func:`stratopt.planning.memory.under_memory` finds (a heuristic there, with a proven bound)."""

    def __init__(
        self, cost: StageCosts, time: dict[tuple[int, int, int], float], limit: float, say: Callable[[str], None]
    ):
        self.cost = cost
        self.time = time
        self.limit = limit
        self.say = say
        self.memo: dict[tuple[int, int, int, int], tuple[float, tuple[int, ...] | None]] = {}
        self.alike: dict[tuple[Any, ...], tuple[float, tuple[int, ...] | None]] = {}
        self._bounds: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._fastest: dict[tuple[int, int, int], tuple[int, ...]] = {}

    def bounds(self, i: int, j: int, g: int, flight: int) -> tuple[float, float]:
        """The least and the most memory any strategy of the stage can take."""
        found = self._bounds.get((g, flight))
        if found is None:
            use = self.cost.usage(0, len(self.cost.cuts) - 1, g, flight)
            low = np.concatenate([[0.0], np.cumsum([float(u.min()) for u in use])])
            high = np.concatenate([[0.0], np.cumsum([float(u.max()) for u in use])])
            found = self._bounds[(g, flight)] = (low, high)
        a, b = self.cost.cuts[i], self.cost.cuts[j]
        return float(found[0][b] - found[0][a]), float(found[1][b] - found[1][a])

    def fastest(self, i: int, j: int, g: int) -> tuple[int, ...]:
        key = (i, j, g)
        found = self._fastest.get(key)
        if found is None:
            found = self._fastest[key] = self.cost.fastest(i, j, g)[1]
        return found

    def __call__(self, i: int, j: int, g: int, flight: int) -> float:
        return self.strategy(i, j, g, flight, need=False)[0]

    def strategy(self, i: int, j: int, g: int, flight: int, need: bool = True) -> tuple[float, tuple[int, ...]]:
        key = (i, j, g, flight)
        found = self.memo.get(key)
        if found is None:
            low, high = self.bounds(i, j, g, flight)
            if high <= self.limit:
                found = (self.time[(i, j, g)], None)
            elif low > self.limit:
                found = (math.inf, None)
            else:
                found = self._fit(i, j, g, flight)
            self.memo[key] = found
        t, assignment = found
        if assignment is None and need and t < math.inf:
            assignment = self.fastest(i, j, g)
        return t, assignment or ()

    def _fit(self, i: int, j: int, g: int, flight: int) -> tuple[float, tuple[int, ...] | None]:
        fastest = self.fastest(i, j, g)
        use = self.cost.usage(i, j, g, flight)
        if sum(float(u[c]) for u, c in zip(use, fastest, strict=True)) <= self.limit:
            return self.time[(i, j, g)], None
        key = (*self.cost.key(self.cost.cuts[i], self.cost.cuts[j], g), flight)
        found = self.alike.get(key)
        if found is None:
            problem = self.cost.problem(i, j, g)
            self.say(f"stage {i}..{j} on {g} devices, {flight} in flight: fitting {self.limit / 1e9:g} GB")
            base = [np.asarray(c, dtype=np.float64) for c in problem.node_costs]
            tables: dict = {}

            def oracle(price: float) -> tuple[tuple[int, ...], float]:
                """The exact optimum with memory at ``price`` per byte, by the chain of unit tables."""
                if price == 0.0:
                    return fastest, self.time[(i, j, g)]
                tables.clear()  # alike units share tables within one price, not across prices
                self.cost.forget_priced()
                value, assignment = self.cost.fastest(i, j, g, (price, flight), tables)
                return assignment, value

            assignment, _, _ = under_memory(
                problem, base, use, self.limit, self.cost.time_limit, lambda _m: None, oracle=oracle
            )
            found = (
                (math.inf, None) if assignment is None else (float(evaluate(problem, assignment).objective), assignment)
            )
            self.alike[key] = found
        return found


def _least_sum_under(
    units: int,
    sizes: list[int],
    p: int,
    table: Callable[[int | None], list[list[list[float]]]],
    moves: list[list[float]],
    stages: int | None,
    bound: float,
) -> tuple[float, list[tuple[int, int, int]]] | None:
    """Least sum of stage and transfer times with every one at most ``bound``: a DP over (units
    placed, devices used, stages so far when ``stages`` is fixed). ``table(left)[i][j][s]`` is the
    time of units ``[i, j)`` on ``sizes[s]`` devices with ``left`` stages from it to the end (None:
    the count is not fixed), +inf where it does not fit; ``moves[i][d]`` the transfer at unit
    ``i``'s cut with ``d`` devices before it."""
    inf = math.inf
    levels = stages if stages is not None else 1
    # f[k][j][d]: least sum placing units [0, j) on d devices in k + 1 stages (k ignored unless fixed).
    f = [[[inf] * (p + 1) for _ in range(units + 1)] for _ in range(levels)]
    back: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}
    first = table(stages)
    for j in range(1, units + 1):
        if stages is not None and stages > units - j + 1:
            continue
        for s, g in enumerate(sizes):
            t = first[0][j][s]
            if t <= bound and t < f[0][j][g]:
                f[0][j][g] = t
                back[(0, j, g)] = (-1, 0, 0, g)
    for k in range(levels):
        nk = k if stages is None else k + 1
        if nk >= levels:
            break
        left = None if stages is None else stages - nk
        here = table(left)
        last_j = units if left is None else units - left + 1  # leave a unit for every stage after
        for i in range(1, units):
            row = f[k][i]
            move = moves[i]
            times = here[i]
            for d in range(1, p + 1):
                base = row[d]
                if base == inf:
                    continue
                c = move[d]
                if c > bound:
                    continue
                base += c
                for j in range(i + 1, last_j + 1):
                    target = f[nk][j]
                    cells = times[j]
                    for s, g in enumerate(sizes):
                        if d + g > p:
                            break
                        t = cells[s]
                        if t > bound:
                            continue
                        value = base + t
                        if value < target[d + g] - 1e-12:
                            target[d + g] = value
                            back[(nk, j, d + g)] = (k, i, d, g)
    last = (stages - 1) if stages is not None else 0
    row = f[last][units]
    d_best = min(range(1, p + 1), key=lambda d: row[d])
    if row[d_best] == inf:
        return None
    layout = []
    k, j, d = last, units, d_best
    while True:
        pk, i, pd, g = back[(k, j, d)]
        layout.append((0 if pk == -1 else i, j, g))
        if pk == -1:
            break
        k, j, d = pk, i, pd
    return row[d_best], layout[::-1]


# -- simulation -------------------------------------------------------------------------------------
