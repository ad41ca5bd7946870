"""Pipeline stages and intra-operator splits in one search.

The operator graph's order is cut into stages; each stage runs on its own group of devices with its
own intra-operator strategy, and micro-batches flow through the stages under a 1F1B schedule. The
search chooses the cuts, the group sizes and (so) the number of stages together, exactly, in the
spirit of Alpa's inter-operator pass:

- **Where a cut may go**: between two operators (in the graph's topological order) where exactly
  one tensor crosses, the residual stream between two blocks, say (:func:`cut_points`). Stages are
  runs of consecutive *units*, the pieces between those cuts.
- **A stage's time** is the exact intra-operator optimum (the DP) of its subgraph on its group of
  devices, per micro-batch: the graph as given is one micro-batch. Identical stages (the same
  operators and shapes at another depth) are solved once.
- **Group sizes** divide the cluster the way it is built: a divisor of the devices in a node, or a
  whole number of nodes. Stages take consecutive devices, so the transfer between two stages
  crosses nodes exactly when the devices before the boundary fill whole nodes.
- **The objective** is 1F1B's iteration time for M micro-batches: every stage (and every transfer
  between stages, counted as a stage of its own) runs each micro-batch once, forward and backward,
  and the slowest one sets the pace: ``sum(times) + (M - 1) * max(times)``.

The search is a DP over (units placed, devices used) for every candidate bottleneck time T (each
stage and transfer at most T, the sum least), taking the best ``sum + (M - 1) * T``; T runs over the
stage and transfer times in increasing order and stops once ``(M - 1) * T`` alone exceeds the best
answer: exact for this objective over these cuts and group sizes (tested against brute force).
Memory: stage k of S keeps the activations of min(S - k, M) micro-batches in flight and must fit the
device with its fastest strategy. Not modelled: each stage's gradient synchronisation is counted per
micro-batch (it happens once per iteration).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph, Input

__all__ = [
    "PipelinePlan",
    "Stage",
    "crossing_bytes",
    "cut_points",
    "describe",
    "schedule_order",
    "search",
    "simulate",
    "stage_graph",
    "transfer_time",
]

_US = 1e6


@dataclass(frozen=True)
class Stage:
    """Operators ``[start, end)`` of the graph on ``devices`` devices: per micro-batch ``time``
    (microseconds, the intra-operator optimum) with ``assignment`` (configuration indices of the
    stage's own problem, :func:`stage_graph`)."""

    start: int
    end: int
    devices: int
    time: float
    assignment: tuple[int, ...]


@dataclass(frozen=True)
class PipelinePlan:
    """Stages in order, the transfers between them (microseconds per micro-batch) and the 1F1B
    iteration time ``estimate`` for ``microbatches`` micro-batches."""

    stages: tuple[Stage, ...]
    transfers: tuple[float, ...]
    microbatches: int
    estimate: float
    devices: int

    @property
    def bottleneck(self) -> float:
        return max([s.time for s in self.stages] + list(self.transfers))


def cut_points(graph: Graph) -> list[int]:
    """Positions ``i`` (a cut between operators ``i - 1`` and ``i``) where exactly one tensor
    crosses: one producer before the cut feeds operators after it. 0 and ``len(graph)`` included.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("chain"); x = g.fc(g.fc(g.fc(g.input((8, 16)), 16), 16), 16)
    >>> cut_points(g.build())
    [0, 1, 2, 3]
    """
    n = len(graph)
    last = [-1] * n
    for u, v, _ in graph.edges():
        last[u] = max(last[u], v)
    live = np.zeros(n + 1, dtype=np.int64)  # producers live across cut i: u < i <= last[u]
    for u in range(n):
        if last[u] > u:
            live[u + 1] += 1
            live[last[u] + 1] -= 1
    live = np.cumsum(live)
    return [0, *[i for i in range(1, n) if live[i] == 1], n]


def stage_graph(graph: Graph, start: int, end: int) -> Graph:
    """Operators ``[start, end)`` as a graph of their own: a tensor from before ``start`` becomes a
    graph input (the stage receives it)."""
    ops = graph.operators[start:end]
    inside = {op.name for op in ops}
    out = []
    for op in ops:
        inputs = tuple(i if i.source is None or i.source in inside else Input(None, i.use, 0, False) for i in op.inputs)
        out.append(dataclasses.replace(op, inputs=inputs))
    return Graph(f"{graph.name}[{start}:{end}]", tuple(out), graph.source, graph.cutoff)


def crossing_bytes(graph: Graph, cut: int) -> float:
    """Bytes of the one tensor crossing ``cut`` (a :func:`cut_points` position), in bf16."""
    index = graph.index
    producers = {index[i.source] for op in graph.operators[cut:] for i in op.inputs if i.source is not None}
    u = max(x for x in producers if x < cut)
    return graph.operators[u].outputs[0].size * 2.0


def transfer_time(nbytes: float, devices_before: int, where: Any) -> float:
    """Microseconds to send a stage boundary's tensor forward and its gradient back, on NVLink
    unless the devices before the boundary fill whole nodes of ``where`` (a
    :class:`~stratopt.plan.Cluster`), then on the network."""
    crosses = devices_before % where.gpus_per_node == 0
    size = np.array(where.devices if crosses else 1)
    bw, lat = where.machine.link(size, size)
    return float(2.0 * (nbytes / bw + lat)) * _US


class _StageCosts:
    """Memoised stage times: the DP's optimum of a stage's subgraph on g devices, keyed by what the
    subgraph is (operator signatures and internal edges), so identical stages are solved once."""

    def __init__(self, graph: Graph, machine: Any, time_limit: float | None) -> None:
        from stratopt.cost.costing import signature

        self.graph = graph
        self.machine = machine
        self.time_limit = time_limit
        self.index = graph.index
        self.keys = [hash(signature(op)) for op in graph.operators]
        self.memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.solves = 0

    def key(self, start: int, end: int, g: int) -> tuple[Any, ...]:
        ops = self.graph.operators
        wiring = tuple(
            self.index[i.source] - start if i.source is not None and start <= self.index[i.source] < end else -1
            for op in ops[start:end]
            for i in op.inputs
        )
        return (tuple(self.keys[start:end]), wiring, g)

    def __call__(self, start: int, end: int, g: int) -> tuple[float, tuple[int, ...]]:
        key = self.key(start, end, g)
        found = self.memo.get(key)
        if found is None:
            from stratopt.cost import build
            from stratopt.solvers import solve

            costing = build(stage_graph(self.graph, start, end), g, machine=self.machine, cutoff=1)
            result = solve(costing.problem, "dp", time_limit=self.time_limit)
            if result.assignment is None or result.status.value != "optimal":
                raise ModelError(
                    f"{self.graph.name}: no exact strategy for operators {start}..{end - 1} on {g} devices"
                )
            assignment = tuple(int(c) for c in result.assignment)
            found = (float(result.objective or 0.0), assignment, *_stage_memory(costing, assignment))
            self.memo[key] = found
            self.solves += 1
        return found[0], found[1]

    def memory(self, start: int, end: int, g: int) -> tuple[float, float]:
        """(bytes per device with one micro-batch's activations, those activations' bytes)."""
        found = self.memo[self.key(start, end, g)]
        return found[2], found[3]


def _stage_memory(costing: Any, assignment: tuple[int, ...]) -> tuple[float, float]:
    """(bytes per device of a stage's strategy: weights, gradients, optimizer state and one
    micro-batch's kept activations; the activations alone)."""
    from stratopt.cost.common import layout

    dtype = costing.profile.dtype_bytes
    total = activations = 0.0
    for v, op in enumerate(costing.graph.operators):
        c = assignment[v]
        total += float(costing.vertex_costs[v].memory[c])
        row = costing.configs[v][c : c + 1]
        activations += sum(float(u.size / np.prod(layout(op, u, row))) * dtype for u in op.outputs)
    return total, activations


def _sizes(nodes: int, per_node: int) -> list[int]:
    """Group sizes: divisors of a node's devices, then whole numbers of nodes."""
    small = [d for d in range(1, per_node + 1) if per_node % d == 0]
    return sorted(set(small) | {k * per_node for k in range(1, nodes + 1)})


def _units(graph: Graph, max_units: int | None) -> list[int]:
    """The cuts stages may use: every :func:`cut_points` cut, or at most ``max_units`` units made by
    keeping every ``step``-th cut, ``step`` a multiple of the graph's period (the number of cuts
    after which the units repeat: 2 for a Transformer block, attention then MLP), so that the units
    stay alike and alike stages are solved once."""
    cuts = cut_points(graph)
    if max_units is None or len(cuts) - 1 <= max_units:
        return cuts
    from stratopt.cost.costing import signature

    keys = [hash(signature(op)) for op in graph.operators]
    content = [tuple(keys[a:b]) for a, b in itertools.pairwise(cuts)]
    period = 1
    for q in range(1, 9):
        middle = range(2, len(content) - q - 2)
        if middle and sum(content[i] == content[i + q] for i in middle) >= 0.9 * len(middle):
            period = q
            break
    step = period * max(1, math.ceil((len(cuts) - 1) / (period * max_units)))
    inner = cuts[1:-1]
    return [0, *inner[::step], len(graph)]


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
    the activations of ``min(S - k, microbatches)`` micro-batches (1F1B keeps that many in flight)
    with its fastest strategy. Devices may be left unused (as the intra-operator policy allows).

    >>> plan = search(__import__("stratopt").load_instance("alexnet"), 1, 4, stages=1)
    >>> len(plan.stages), plan.stages[0].devices <= 4
    (1, True)
    """
    from stratopt.plan import cluster

    if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
        raise ModelError(f"the number of micro-batches must be a positive integer, got {microbatches!r}")
    if stages is not None and (isinstance(stages, bool) or not isinstance(stages, int) or stages < 1):
        raise ModelError(f"the number of stages must be a positive integer or 'auto', got {stages!r}")
    where = cluster(nodes, gpus_per_node, machine)
    say = progress or (lambda _msg: None)
    cuts = _units(graph, max_units)
    units = len(cuts) - 1
    if stages is not None and stages > units:
        raise ModelError(f"{graph.name}: {stages} stages asked, but the graph has only {units} places to cut")
    p = where.devices
    sizes = [g for g in _sizes(nodes, gpus_per_node) if g <= p]
    cost = _StageCosts(graph, where.machine, time_limit)
    time = {}
    for i in range(units):
        for j in range(i + 1, units + 1):
            for g in sizes:
                time[(i, j, g)] = cost(cuts[i], cuts[j], g)[0]
    say(f"{graph.name}: {units} units, group sizes {sizes}: {cost.solves} distinct stage problems solved")
    crossing = {c: crossing_bytes(graph, c) for c in cuts[1:-1]}

    def transfer(c: int, boundary_devices: int) -> float:
        return transfer_time(crossing[c], boundary_devices, where)

    limit = (where.machine.memory_gb if memory_gb is None else float(memory_gb)) * 1e9
    memory = {key: cost.memory(cuts[key[0]], cuts[key[1]], key[2]) for key in time}
    worst = min(units, microbatches)
    # Memory depends on a stage's place (how many stages follow it) only through the in-flight count;
    # when every stage fits even with the most in flight, one DP over any number of stages is exact,
    # else one DP per stage count, each knowing every stage's place.
    binding = any(m + (worst - 1) * a > limit for m, a in memory.values())

    def fits(i: int, j: int, g: int, flight: int) -> bool:
        m, a = memory[(i, j, g)]
        return m + (min(flight, microbatches) - 1) * a <= limit

    candidates = sorted({t for t in time.values()} | {transfer(c, d) for c in crossing for d in range(1, p)})
    if microbatches == 1:  # the objective is the sum alone: no bound on the slowest stage
        candidates = [math.inf]
    counts: list[int | None] = [stages] if stages is not None or not binding else list(range(1, units + 1))
    best: tuple[float, list[tuple[int, int, int]], float] | None = None
    for count in counts:
        check = fits if binding else None
        floor = _least_sum(units, sizes, p, time, cuts, transfer, count, check)
        for bound in candidates:
            if floor == math.inf or (best is not None and (microbatches - 1) * bound + floor >= best[0]):
                break
            found = _least_sum_under(units, sizes, p, time, cuts, transfer, count, bound, count or units, check)
            if found is None:
                continue
            total, layout = found
            value = total + ((microbatches - 1) * bound if microbatches > 1 else 0.0)
            if best is None or value < best[0] - 1e-9:
                best = (value, layout, bound)
    if best is None:
        what = f"{stages} stages" if stages is not None else "stages"
        raise ModelError(f"{graph.name}: no pipeline of {what} on {p} devices fits {limit / 1e9:g} GB per device")
    _, layout, _ = best
    plan_stages = []
    transfers = []
    used = 0
    for k, (i, j, g) in enumerate(layout):
        t, assignment = cost(cuts[i], cuts[j], g)
        plan_stages.append(Stage(cuts[i], cuts[j], g, t, assignment))
        used += g
        if k < len(layout) - 1:
            transfers.append(transfer(cuts[j], used))
    times = [s.time for s in plan_stages] + transfers
    estimate = sum(times) + (microbatches - 1) * max(times)
    return PipelinePlan(tuple(plan_stages), tuple(transfers), microbatches, estimate, used)


def _least_sum(units, sizes, p, time, cuts, transfer, stages, fits) -> float:  # type: ignore[no-untyped-def]
    found = _least_sum_under(units, sizes, p, time, cuts, transfer, stages, math.inf, stages or units, fits)
    return found[0] if found is not None else math.inf


def _least_sum_under(  # type: ignore[no-untyped-def]
    units, sizes, p, time, cuts, transfer, stages, bound, max_stages, fits=None
) -> tuple[float, list[tuple[int, int, int]]] | None:
    """Least sum of stage and transfer times with every one at most ``bound``: a DP over (units
    placed, devices used, stages so far when ``stages`` is fixed). ``fits(i, j, g, in_flight)``
    (with ``stages`` fixed) says whether a stage fits its memory at its place."""
    inf = math.inf
    levels = max_stages if stages is not None else 1
    # f[k][j][d]: least sum placing units [0, j) on d devices in k + 1 stages (k ignored unless fixed).
    f = [[[inf] * (p + 1) for _ in range(units + 1)] for _ in range(levels)]
    back: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}
    for j in range(1, units + 1):
        for g in sizes:
            t = time[(0, j, g)]
            if fits is not None and not fits(0, j, g, stages):
                continue
            if t <= bound and t < f[0][j][g]:
                f[0][j][g] = t
                back[(0, j, g)] = (-1, 0, 0, g)
    for k in range(levels):
        nk = k if stages is None else k + 1
        if nk >= levels:
            break
        for i in range(1, units):
            for d in range(1, p + 1):
                base = f[k][i][d]
                if base == inf:
                    continue
                c = transfer(cuts[i], d)
                if c > bound:
                    continue
                for j in range(i + 1, units + 1):
                    for g in sizes:
                        if d + g > p:
                            break
                        t = time[(i, j, g)]
                        if t > bound or (fits is not None and not fits(i, j, g, stages - nk)):
                            continue
                        value = base + c + t
                        if value < f[nk][j][d + g] - 1e-12:
                            f[nk][j][d + g] = value
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


def _stage_passes(graph: Graph, stage: Stage, machine: Any) -> tuple[float, float]:
    """(forward, backward) microseconds of one micro-batch through a stage, from the operator-level
    simulator on the stage's own devices: forward ends when the last forward task does."""
    from stratopt.cost import build
    from stratopt.sim.engine import simulate_tasks
    from stratopt.sim.taskgraph import StrategyTasks

    costing = build(stage_graph(graph, stage.start, stage.end), stage.devices, machine=machine, cutoff=1)
    timeline = simulate_tasks(StrategyTasks(costing, stage.assignment).graph)
    g = timeline.graph
    forward = max((timeline.end[t] for t in g.tasks() if g.label[t][0] == 0), default=0.0)
    return forward, timeline.makespan - forward


def schedule_order(stage: int, stages: int, microbatches: int, schedule: str) -> list[tuple[str, int]]:
    """The order a stage runs its passes in: ``gpipe`` all forwards then all backwards; ``1f1b``
    ``stages - stage - 1`` warm-up forwards, then one forward and one backward in turn, then the
    remaining backwards (PipeDream-Flush), which keeps at most ``stages - stage`` micro-batches in flight.

    >>> schedule_order(0, 2, 3, "1f1b")
    [('F', 0), ('F', 1), ('B', 0), ('F', 2), ('B', 1), ('B', 2)]
    """
    if schedule == "gpipe":
        return [("F", m) for m in range(microbatches)] + [("B", m) for m in range(microbatches)]
    if schedule != "1f1b":
        raise ModelError(f"unknown pipeline schedule {schedule!r}; use 1f1b or gpipe")
    warm = min(stages - stage - 1, microbatches)
    order = [("F", m) for m in range(warm)]
    for m in range(microbatches):
        if warm + m < microbatches:
            order.append(("F", warm + m))
        order.append(("B", m))
    return order


def simulate(graph: Graph, plan: PipelinePlan, machine: Any, schedule: str = "1f1b") -> tuple[Any, dict[str, Any]]:
    """Simulate one iteration of ``plan``: every micro-batch's forward and backward pass on every
    stage (durations from the operator-level simulator of that stage), the transfers between stages
    on their links, each stage's passes in ``schedule``'s order. Returns the timeline (for
    :func:`stratopt.sim.trace.events`, Chrome traces and Gantt charts) and a summary with
    ``iteration_time`` and the bubble fraction (the share of stage time spent idle)."""
    from stratopt.sim.engine import check_timeline, simulate_tasks
    from stratopt.sim.taskgraph import TaskGraph

    if isinstance(machine, str):
        from stratopt.machine import get_machine

        machine = get_machine(machine)
    count = len(plan.stages)
    m_count = plan.microbatches
    passes = [_stage_passes(graph, s, machine) for s in plan.stages]
    names = [f"stage {k} ({s.devices} dev)" for k, s in enumerate(plan.stages)]
    g = TaskGraph(names)
    task: dict[tuple[str, int, int], int] = {}
    for k in range(count):
        fwd, bwd = passes[k]
        previous = None
        for rank, (kind, m) in enumerate(schedule_order(k, count, m_count, schedule)):
            phase = 0 if kind == "F" else 1
            t = g.add(rank * count + k, k, fwd if kind == "F" else bwd, (phase, 1, f"stage{k}", m, ""))
            task[(kind, k, m)] = t
            if previous is not None:
                g.depend(previous, t)  # the schedule's order on the stage's devices
            previous = t
    for k in range(count):
        for m in range(m_count):
            g.depend(task[("F", k, m)], task[("B", k, m)])
            if k + 1 < count:
                half = plan.transfers[k] / 2.0
                send = g.add(0, g.link(k, k + 1), half, (0, 0, f"stage{k}", m, "activations"))
                g.depend(task[("F", k, m)], send)
                g.depend(send, task[("F", k + 1, m)])
                back = g.add(0, g.link(k + 1, k), half, (1, 0, f"stage{k + 1}", m, "gradients"))
                g.depend(task[("B", k + 1, m)], back)
                g.depend(back, task[("B", k, m)])
    timeline = simulate_tasks(g)
    problems = check_timeline(timeline)
    if problems:
        raise ModelError(f"the pipeline timeline fails its check: {problems[0]}")
    busy = sum(m_count * (f + b) for f, b in passes)
    idle = 1.0 - busy / (count * timeline.makespan) if timeline.makespan > 0 else 0.0
    return timeline, {
        "iteration_time": timeline.makespan,
        "schedule": schedule,
        "stage_passes": [{"forward": f, "backward": b} for f, b in passes],
        "bubble": idle,
    }


def describe(graph: Graph, plan: PipelinePlan, machine: Any) -> list[dict[str, Any]]:
    """Each stage in words: its operators (first and last), device group, time per micro-batch,
    memory per device (weights, gradients, optimizer state, and the activations of every micro-batch
    1F1B keeps in flight there: ``min(stages - k, microbatches)`` on stage k) and strategy
    (:func:`stratopt.plan.describe_layers`)."""
    from stratopt.cost import build
    from stratopt.plan import describe_layers

    out = []
    count = len(plan.stages)
    for k, s in enumerate(plan.stages):
        sub = stage_graph(graph, s.start, s.end)
        costing = build(sub, s.devices, machine=machine, cutoff=1)
        total, activations = _stage_memory(costing, s.assignment)
        in_flight = min(count - k, plan.microbatches)  # 1F1B: forwards waiting for their backward
        out.append(
            {
                "stage": k,
                "operators": [graph.operators[s.start].name, graph.operators[s.end - 1].name],
                "start": s.start,
                "end": s.end,
                "devices": s.devices,
                "time": s.time,
                "in_flight": in_flight,
                "memory": total + (in_flight - 1) * activations,
                "strategy": describe_layers(sub, costing.configs, s.assignment, lambda _v, _c: False),
            }
        )
    return out
