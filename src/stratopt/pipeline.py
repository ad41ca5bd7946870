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

The search is a DP over (units placed, devices used) for every candidate bottleneck time T (each
stage and transfer at most T, the sum least), taking the best ``sum + (M - 1) * T``; T runs over the
stage and transfer times in increasing order and stops once ``(M - 1) * T`` alone exceeds the best
answer: exact for this objective over these cuts and group sizes (tested against brute force).

Memory: stage k of S holds its weight state and the activations of ``min(S - k, M)`` micro-batches
(1F1B's in-flight count) within the device's memory. A stage whose fastest strategy does not fit
there takes the cheapest one the Lagrangian memory search finds that does
(:func:`stratopt.plan.under_memory`): exact where the fastest strategies fit, a heuristic (with a
proven bound) for the stages where memory binds.
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
    "microbatch",
    "schedule_order",
    "search",
    "search_microbatches",
    "simulate",
    "stage_graph",
    "transfer_time",
]

_US = 1e6


@dataclass(frozen=True)
class Stage:
    """Operators ``[start, end)`` of the graph on ``devices`` devices: per micro-batch ``time``
    (microseconds, gradient synchronisation counted 1 / M; the intra-operator optimum unless memory
    binds) with ``assignment`` (configuration indices of the stage's own problem, :func:`stage_graph`)."""

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
    """Per micro-batch stage times for every run of units on every group size.

    The whole graph is priced once per group size; a stage is that problem's slice over its
    operators (a tensor from before it arrives as an input, with no edge cost, as in
    :func:`stage_graph`). Gradient synchronisation, which a stage does once per iteration after its
    last backward pass, is counted ``1 / M`` per micro-batch.

    Exactly one tensor crosses each cut, so its producer separates the operators before it from
    those after: a unit's least cost for each choice ``a`` of the producer it receives and ``b`` of
    the one it sends on is a table (:func:`stratopt.solvers.dp.marginal_table`), and a stage's
    optimum is the min-plus product of its units' tables, exact. Alike units (the same operators
    and wiring) share one table. A stage's strategy is recovered from the tables (:meth:`fastest`)
    only when it is needed: the plan's stages and memory checks. Where a unit passes a tensor from
    before it through (:attr:`chainable` False), every slice is solved by the DP instead.
    """

    def __init__(self, graph: Graph, cuts: list[int], machine: Any, microbatches: int, time_limit: float | None):
        from stratopt.cost.costing import signature

        self.graph = graph
        self.cuts = cuts
        self.machine = machine
        self.microbatches = microbatches
        self.time_limit = time_limit
        self.index = graph.index
        self.keys = [hash(signature(op)) for op in graph.operators]
        n = len(graph)
        self.edges = list(graph.edges())
        self.in_edges: list[list[int]] = [[] for _ in range(n)]
        last = [-1] * n
        for e, (u, v, _) in enumerate(self.edges):
            self.in_edges[v].append(e)
            last[u] = max(last[u], v)
        # The producer each unit sends on (the one tensor live across its end cut; the last
        # operator for the last unit) and the one it receives (the previous unit's).
        self.sends = []
        for k in range(len(cuts) - 1):
            end = cuts[k + 1]
            live = [u for u in range(end) if last[u] >= end]
            self.sends.append(live[0] if end < n and len(live) == 1 else n - 1)
        # A unit whose end producer lies before it passes its input through: no chain then.
        self.chainable = all(cuts[k] <= u < cuts[k + 1] for k, u in enumerate(self.sends))
        self._costings: dict[int, Any] = {}
        self._prices: dict[int, tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]] = {}
        self._tables: dict[tuple[Any, ...], tuple[np.ndarray, Any]] = {}
        self._solved: dict[tuple[Any, ...], tuple[float, tuple[int, ...]]] = {}
        self._matrices: dict[tuple[int, int], np.ndarray] = {}
        self._what: dict[tuple[int, bool], tuple[Any, ...]] = {}  # what a unit is (its table's key)
        self._priced: dict[tuple[Any, ...], np.ndarray] = {}  # node costs with memory priced, per price
        self.tables = 0
        self.solves = 0

    def costing(self, g: int) -> Any:
        found = self._costings.get(g)
        if found is None:
            from stratopt.cost import build

            found = self._costings[g] = build(self.graph, g, machine=self.machine, cutoff=1)
        return found

    def prices(self, g: int) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
        """(node costs per micro-batch, every edge's costs flat, activation bytes per choice)."""
        found = self._prices.get(g)
        if found is None:
            from stratopt.cost.common import layout
            from stratopt.problem import float_costs

            costing = self.costing(g)
            share = 1.0 - 1.0 / self.microbatches
            nodes = [np.asarray(c.total, dtype=np.float64) - share * c.phases()[2] for c in costing.vertex_costs]
            dtype = costing.profile.dtype_bytes
            acts = [
                sum(
                    (u.size / np.prod(layout(op, u, costing.configs[v]), axis=1) * dtype for u in op.outputs),
                    np.zeros(1),
                )
                for v, op in enumerate(self.graph.operators)
            ]
            found = self._prices[g] = (nodes, float_costs(costing.problem.edge_flat), acts)
        return found

    def _matrix(self, g: int, e: int) -> np.ndarray:
        found = self._matrices.get((g, e))
        if found is None:
            problem = self.costing(g).problem
            off = problem.edge_offsets
            u, v, _ = self.edges[e]
            k = problem.num_choices
            found = self._matrices[(g, e)] = self.prices(g)[1][off[e] : off[e + 1]].reshape(int(k[u]), int(k[v]))
        return found

    def key(self, start: int, end: int, g: int) -> tuple[Any, ...]:
        """What a slice is: its operators' signatures and wiring (an input from before it is -1)."""
        ops = self.graph.operators
        wiring = tuple(
            self.index[i.source] - start if i.source is not None and start <= self.index[i.source] < end else -1
            for op in ops[start:end]
            for i in op.inputs
        )
        return (tuple(self.keys[start:end]), wiring, g)

    def node(self, g: int, v: int, extra: tuple[float, int] | None) -> np.ndarray:
        """Operator ``v``'s per micro-batch costs on ``g`` devices; with ``extra = (price,
        flight)``, plus ``price`` per byte of its memory with ``flight`` micro-batches in flight."""
        if extra is None:
            return self.prices(g)[0][v]
        key = (g, v, extra)
        found = self._priced.get(key)
        if found is None:
            price, flight = extra
            found = self._priced[key] = self.prices(g)[0][v] + price * self._usage(g, v, flight)
        return found

    def forget_priced(self) -> None:
        """Drop the node costs cached for one memory price (the next price needs its own)."""
        self._priced.clear()

    def table(
        self, k: int, g: int, first: bool, extra: tuple[float, int] | None = None, cache: dict | None = None
    ) -> tuple[np.ndarray, Any]:
        """Unit ``k``'s least cost on ``g`` devices: a matrix over (the choice of the producer it
        receives, the choice of the producer it sends on), or, for a stage's first unit (which
        receives its input with no edge cost), a vector over the latter; with the
        :class:`~stratopt.solvers.dp.Marginal` that recovers the unit's choices (its operators
        first, in order). ``extra`` prices memory (:meth:`node`); such tables go to ``cache``."""
        start, end = self.cuts[k], self.cuts[k + 1]
        source = -1 if first or k == 0 else self.sends[k - 1]
        what = self._what.get((k, first))
        if what is None:
            ops = self.graph.operators
            wiring = tuple(
                -2
                if self.index.get(i.source or "") == source
                else self.index[i.source] - start
                if i.source is not None and start <= self.index[i.source] < end
                else -1
                for op in ops[start:end]
                for i in op.inputs
            )
            what = (tuple(self.keys[start:end]), wiring, self.sends[k] - start, source < 0 or self.keys[source])
            self._what[(k, first)] = what
        key = (*what, g, extra)
        store = self._tables if cache is None else cache
        found = store.get(key)
        if found is not None:
            return found
        local = {v: i for i, v in enumerate(range(start, end))}
        unary = [self.node(g, v, extra) for v in range(start, end)]
        if source >= 0:
            local[source] = len(unary)
            unary.append(np.zeros(self.prices(g)[0][source].shape[0]))
        pairs = []
        for v in range(start, end):
            for e in self.in_edges[v]:
                u = self.edges[e][0]
                if u in local:
                    pairs.append((local[u], local[v], self._matrix(g, e)))
        from stratopt.solvers.dp import marginal_table

        keep = (local[self.sends[k]],) if source < 0 else (local[source], local[self.sends[k]])
        # Dominance pruning costs more than it saves on units this size (measured: GPT, 96 layers).
        found = store[key] = marginal_table(unary, pairs, keep, prune=False)
        self.tables += cache is None
        return found

    def times(self, count: int, sizes: list[int], say: Callable[[str], None]) -> dict[tuple[int, int, int], float]:
        """Every stage ``(i, j, g)``'s optimum: min-plus chains of unit tables (or, when a unit
        passes its input through, the DP on every slice)."""
        out: dict[tuple[int, int, int], float] = {}
        for g in sizes:
            for i in range(count):
                if not self.chainable:
                    for j in range(i + 1, count + 1):
                        out[(i, j, g)] = self.solve(i, j, g)[0]
                    continue
                row = self.table(i, g, True)[0]
                out[(i, i + 1, g)] = float(row.min())
                for j in range(i + 2, count + 1):
                    row = (row[:, None] + self.table(j - 1, g, False)[0]).min(axis=0)
                    out[(i, j, g)] = float(row.min())
            say(
                f"{self.graph.name}: stage times on {g} devices ({self.tables} unit tables, {self.solves} slices solved)"
            )
        return out

    def fastest(
        self, i: int, j: int, g: int, extra: tuple[float, int] | None = None, cache: dict | None = None
    ) -> tuple[float, tuple[int, ...]]:
        """An optimal strategy of units ``[i, j)`` on ``g`` devices (memory priced by ``extra``,
        :meth:`node`): the chain walked back to each boundary producer's choice, each unit's
        choices recovered from its table; its cost recomputed from the node and edge costs (it
        must equal the chain's value)."""
        if not self.chainable:
            if extra is None:
                return self.solve(i, j, g)
            from stratopt.solvers import solve

            priced = self.problem(i, j, g).replace(
                node_costs=[self.node(g, v, extra) for v in range(self.cuts[i], self.cuts[j])]
            )
            result = solve(priced, "dp", time_limit=self.time_limit)
            if result.assignment is None or result.status.value != "optimal":
                raise ModelError(f"{self.graph.name}: no exact strategy for units {i}..{j - 1} on {g} devices")
            return float(result.objective or 0.0), tuple(int(c) for c in result.assignment)
        row, how = self.table(i, g, True, extra, cache)
        steps = []
        for k in range(i + 1, j):
            matrix, unit = self.table(k, g, False, extra, cache)
            total = row[:, None] + matrix
            back = np.argmin(total, axis=0)
            row = total[back, np.arange(total.shape[1])]
            steps.append((back, unit))
        b = int(np.argmin(row))
        value = float(row[b])
        chosen = [b]
        for back, _ in reversed(steps):
            chosen.append(int(back[chosen[-1]]))
        chosen.reverse()  # the producer each unit sends on, units i..j-1
        assignment = how.assignment((chosen[0],))[: self.cuts[i + 1] - self.cuts[i]]
        for k, (_, unit) in zip(range(i + 1, j), steps, strict=True):
            part = unit.assignment((chosen[k - i - 1], chosen[k - i]))
            assignment += part[: self.cuts[k + 1] - self.cuts[k]]
        cost = self.cost_of(i, j, g, assignment, extra)
        if abs(cost - value) > 1e-9 * max(1.0, abs(value)):
            raise RuntimeError(
                f"internal: units {i}..{j} on {g} devices: the recovered strategy costs {cost!r}, the chain {value!r}"
            )
        return value, tuple(assignment)

    def cost_of(
        self, i: int, j: int, g: int, assignment: list[int] | tuple[int, ...], extra: tuple[float, int] | None = None
    ) -> float:
        """Per micro-batch cost of a strategy of units ``[i, j)``: node costs (memory priced by
        ``extra``) and internal edges."""
        start, end = self.cuts[i], self.cuts[j]
        total = sum(float(self.node(g, v, extra)[assignment[v - start]]) for v in range(start, end))
        for v in range(start, end):
            for e in self.in_edges[v]:
                u = self.edges[e][0]
                if u >= start:
                    total += float(self._matrix(g, e)[assignment[u - start], assignment[v - start]])
        return total

    def problem(self, i: int, j: int, g: int) -> Any:
        """The slice of units ``[i, j)`` on ``g`` devices as a problem of its own."""
        from stratopt.problem import StrategyProblem

        start, end = self.cuts[i], self.cuts[j]
        nodes = self.prices(g)[0]
        edges, matrices = [], []
        for v in range(start, end):
            for e in self.in_edges[v]:
                u = self.edges[e][0]
                if u >= start:
                    edges.append((u - start, v - start))
                    matrices.append(self._matrix(g, e))
        return StrategyProblem(nodes[start:end], edges, matrices, name=f"{self.graph.name}[{start}:{end}] p={g}")

    def solve(self, i: int, j: int, g: int) -> tuple[float, tuple[int, ...]]:
        """The exact optimum of units ``[i, j)`` on ``g`` devices and its strategy, by the DP."""
        key = self.key(self.cuts[i], self.cuts[j], g)
        found = self._solved.get(key)
        if found is None:
            from stratopt.solvers import solve

            result = solve(self.problem(i, j, g), "dp", time_limit=self.time_limit)
            if result.assignment is None or result.status.value != "optimal":
                raise ModelError(
                    f"{self.graph.name}: no exact strategy for operators {self.cuts[i]}..{self.cuts[j] - 1} on {g} devices"
                )
            found = self._solved[key] = (float(result.objective or 0.0), tuple(int(c) for c in result.assignment))
            self.solves += 1
        return found

    def usage(self, i: int, j: int, g: int, flight: int) -> list[np.ndarray]:
        """Bytes per device of each operator's choices with ``flight`` micro-batches in flight:
        weight state and kept activations, the activations ``flight`` times."""
        return [self._usage(g, v, flight) for v in range(self.cuts[i], self.cuts[j])]

    def _usage(self, g: int, v: int, flight: int) -> np.ndarray:
        memory = np.asarray(self.costing(g).vertex_costs[v].memory, dtype=np.float64)
        return memory + (flight - 1) * self.prices(g)[2][v]


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


def microbatch(graph: Graph, parts: int) -> Graph:
    """``graph`` with its batch cut into ``parts``: one micro-batch.

    The batch is the first dimension of the graph's data inputs (those of the first one's size;
    weights are not data). It is followed through the graph: an operator's axes that index a
    batch-carrying dimension of an input are its batch axes (the first of a dimension's axes, where
    several index it: ``b`` of a merged ``b * s``); each is cut into ``parts``, with every dimension
    of the operator's tensors that it indexes, and the output dimensions it indexes carry the batch
    on. Raises :class:`ModelError` when the batch does not divide, or cannot be followed.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("mlp"); _ = g.fc(g.fc(g.input((64, 32)), 16), 8)
    >>> [op.outputs[0].shape for op in microbatch(g.build(), 4)]
    [(16, 16), (16, 8)]
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ModelError(f"the number of micro-batches must be a positive integer, got {parts!r}")
    if parts == 1:
        return graph
    batch = _batch(graph)
    if batch is None:
        raise ModelError(f"{graph.name}: no data input to take the batch from")
    if batch % parts:
        raise ModelError(f"{graph.name}: a batch of {batch} does not split into {parts} micro-batches")
    carried: dict[tuple[str, int], frozenset[int]] = {}  # (operator, output) -> batch-carrying dims
    out = []
    for op in graph.operators:
        scaled: set[str] = set()
        for i in op.inputs:
            if i.source is None:
                dims = frozenset({0}) if not i.param and i.use.shape and i.use.shape[0] == batch else frozenset()
            else:
                dims = carried[(i.source, i.output)]
            for d in dims:
                group = i.use.dims[d]
                if not group:
                    raise ModelError(f"{graph.name}: operator {op.name!r} reads the batch along no axis of its own")
                scaled.add(group[0])
        sizes = list(op.sizes)
        for a in scaled:
            k = op.axes.index(a)
            if sizes[k] % parts:
                raise ModelError(
                    f"{graph.name}: operator {op.name!r}: its batch axis {a!r} of size {sizes[k]} does not split into {parts}"
                )
            sizes[k] //= parts

        inputs = tuple(dataclasses.replace(i, use=_cut(i.use, scaled, parts, op.name)) for i in op.inputs)
        outputs = tuple(_cut(u, scaled, parts, op.name) for u in op.outputs)
        for k, u in enumerate(op.outputs):
            carried[(op.name, k)] = frozenset(d for d, group in enumerate(u.dims) if any(a in scaled for a in group))
        out.append(dataclasses.replace(op, sizes=tuple(sizes), inputs=inputs, outputs=outputs))
    try:
        return Graph(f"{graph.name}/{parts}", tuple(out), graph.source, graph.cutoff)
    except ModelError as e:
        raise ModelError(f"{graph.name}: cannot cut the batch into {parts} micro-batches: {e}") from None


def _batch(graph: Graph) -> int | None:
    """The batch: the first dimension of the graph's first data input (None without one)."""
    return next(
        (
            i.use.shape[0]
            for op in graph.operators
            for i in op.inputs
            if i.source is None and not i.param and i.use.shape
        ),
        None,
    )


def _cut(use: Any, scaled: set[str], parts: int, where: str) -> Any:
    """A tensor use with every dimension indexed by a ``scaled`` axis cut into ``parts``."""
    shape = list(use.shape)
    for d, group in enumerate(use.dims):
        hits = sum(a in scaled for a in group)
        if hits:
            if shape[d] % parts**hits:
                raise ModelError(f"operator {where!r}: a dimension of size {shape[d]} does not split into {parts}")
            shape[d] //= parts**hits
    return dataclasses.replace(use, shape=tuple(shape))


def search_microbatches(
    graph: Graph,
    nodes: int,
    gpus_per_node: int,
    *,
    choices: list[int] | None = None,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> tuple[PipelinePlan, Graph, list[tuple[int, float]]]:
    """The best pipeline for ``graph``'s whole batch cut into M micro-batches, M chosen too: for
    every M in ``choices`` (default: the powers of two that divide the batch, up to 64) the stage
    search (:func:`search`, ``options`` passed on) on one micro-batch (:func:`microbatch`). Returns
    the best plan, its micro-batch graph and every (M, estimate) tried (+inf where nothing fits).
    Smaller micro-batches shrink the pipeline's bubble and its activations in flight, and run each
    operator less efficiently: the trade-off is measured, not assumed.
    """
    say = progress or (lambda _msg: None)
    if choices is None:
        batch = _batch(graph) or 1
        choices = [m for m in (1, 2, 4, 8, 16, 32, 64) if batch % m == 0]
    tried: list[tuple[int, float]] = []
    best: tuple[PipelinePlan, Graph] | None = None
    for m in choices:
        try:
            micro = microbatch(graph, m)
            found = search(micro, nodes, gpus_per_node, microbatches=m, progress=None, **options)
        except ModelError as e:
            if "fits" not in str(e):
                raise
            tried.append((m, math.inf))
            say(f"{graph.name}: {m} micro-batches: nothing fits")
            continue
        tried.append((m, found.estimate))
        say(
            f"{graph.name}: {m} micro-batches: {len(found.stages)} stages, {found.estimate / 1e3:,.2f} ms per iteration"
        )
        if best is None or found.estimate < best[0].estimate:
            best = (found, micro)
    if best is None:
        raise ModelError(f"{graph.name}: no pipeline fits with any of {choices} micro-batches")
    return best[0], best[1], tried


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
    cost = _StageCosts(graph, cuts, where.machine, microbatches, time_limit)
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
    transfers = []
    used = 0
    for k, (i, j, g) in enumerate(layout):
        flight = min(len(layout) - k, microbatches)
        if binding:
            t, assignment = fitted.strategy(i, j, g, flight)
        else:
            t, assignment = time[(i, j, g)], fitted.fastest(i, j, g)
        plan_stages.append(Stage(cuts[i], cuts[j], g, t, assignment))
        used += g
        if k < len(layout) - 1:
            transfers.append(transfer(cuts[j], used))
    times = [s.time for s in plan_stages] + transfers
    estimate = sum(times) + (microbatches - 1) * max(times)
    return PipelinePlan(tuple(plan_stages), tuple(transfers), microbatches, estimate, used)


class _Fitted:
    """A stage's least time among strategies that fit ``limit`` bytes per device with ``flight``
    micro-batches in flight (+inf when none does): its fastest strategy's time when that fits (or
    when every strategy does), else the least-cost strategy the Lagrangian memory search of
    :func:`stratopt.plan.under_memory` finds (a heuristic there, with a proven bound)."""

    def __init__(
        self, cost: _StageCosts, time: dict[tuple[int, int, int], float], limit: float, say: Callable[[str], None]
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
            from stratopt.plan import under_memory
            from stratopt.problem import evaluate

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


def _stage_passes(graph: Graph, stage: Stage, machine: Any) -> tuple[float, float, float]:
    """(forward, backward, gradient sync) microseconds of one micro-batch through a stage, from the
    operator-level simulator on the stage's own devices: the passes simulated without the
    weight-gradient synchronisation (forward ends when the last forward task does), and the sync's
    share is what it adds to the whole step's makespan (it overlaps the backward pass; a pipeline
    runs it once per iteration, after the stage's last backward)."""
    from stratopt.cost import build
    from stratopt.sim.engine import simulate_tasks
    from stratopt.sim.taskgraph import KINDS, StrategyTasks

    costing = build(stage_graph(graph, stage.start, stage.end), stage.devices, machine=machine, cutoff=1)
    tasks = StrategyTasks(costing, stage.assignment).graph
    whole = simulate_tasks(tasks).makespan
    for t in tasks.tasks():  # the same step without the sync (it no longer competes for the links)
        if KINDS.get(tasks.label[t][:2]) == "grad-sync":
            tasks.exe[t] = 0.0
    timeline = simulate_tasks(tasks)
    forward = max((timeline.end[t] for t in tasks.tasks() if tasks.label[t][0] == 0), default=0.0)
    return forward, timeline.makespan - forward, max(0.0, whole - timeline.makespan)


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
        fwd, bwd, sync = passes[k]
        previous = None
        order = schedule_order(k, count, m_count, schedule)
        for rank, (kind, m) in enumerate(order):
            phase = 0 if kind == "F" else 1
            t = g.add(rank * count + k, k, fwd if kind == "F" else bwd, (phase, 1, f"stage{k}", m, ""))
            task[(kind, k, m)] = t
            if previous is not None:
                g.depend(previous, t)  # the schedule's order on the stage's devices
            previous = t
        if sync > 0.0 and previous is not None:  # accumulated weight gradients, synchronised once
            t = g.add(len(order) * count + k, k, sync, (1, 3, f"stage{k}", m_count - 1, "gradients of the iteration"))
            g.depend(previous, t)
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
    busy = sum(m_count * (f + b) + sync for f, b, sync in passes)
    idle = 1.0 - busy / (count * timeline.makespan) if timeline.makespan > 0 else 0.0
    return timeline, {
        "iteration_time": timeline.makespan,
        "schedule": schedule,
        "stage_passes": [{"forward": f, "backward": b, "grad_sync": sync} for f, b, sync in passes],
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
