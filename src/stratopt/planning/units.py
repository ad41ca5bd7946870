"""Stage times from unit tables: the whole graph priced once per group size, each unit reduced to a
table over the producers it receives and sends on, every stage a min-plus chain of its units' tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.cost.common import layout
from stratopt.cost.costing import signature
from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.planning.cluster import price
from stratopt.problem import StrategyProblem, float_costs
from stratopt.solvers import solve
from stratopt.solvers.dp import marginal_table


class StageCosts:
    """Per micro-batch stage times for every run of units on every group size.

    The whole graph is priced once per group size; a stage is that problem's slice over its
    operators (a tensor from before it arrives as an input, with no edge cost, as in
    :func:`stage_graph`). Gradient synchronisation, which a stage does once per iteration after its
    last backward pass, and the optimizer's step are counted ``1 / M`` per micro-batch.

    Exactly one tensor crosses each cut, so its producer separates the operators before it from
    those after: a unit's least cost for each choice ``a`` of the producer it receives and ``b`` of
    the one it sends on is a table (:func:`stratopt.solvers.dp.marginal_table`), and a stage's
    optimum is the min-plus product of its units' tables, exact. Alike units (the same operators
    and wiring) share one table. A stage's strategy is recovered from the tables (:meth:`fastest`)
    only when it is needed: the plan's stages and memory checks. Where a unit passes a tensor from
    before it through (:attr:`chainable` False), every slice is solved by the DP instead.
    """

    def __init__(self, graph: Graph, cuts: list[int], machine: Any, microbatches: int, time_limit: float | None):

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
            found = self._costings[g] = price(self.graph, g, self.machine)
        return found

    def prices(self, g: int) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
        """(node costs per micro-batch, every edge's costs flat, activation bytes per choice)."""
        found = self._prices.get(g)
        if found is None:
            costing = self.costing(g)
            share = 1.0 - 1.0 / self.microbatches
            o = costing.overlap
            nodes = [  # the gradient reduction and the optimizer's step: once an iteration
                n - share * (c.exposed_sync(o) + (0.0 if c.per_step is None else c.per_step))
                for n, c in zip(costing.node_costs(), costing.vertex_costs, strict=True)
            ]
            dtype = costing.profile.dtype_bytes
            acts = [
                sum(
                    (u.size / np.prod(layout(op, u, costing.configs[v]), axis=1) * dtype for u in op.outputs),
                    np.zeros(1),
                )
                for v, op in enumerate(self.graph.operators)
            ]
            if costing.recomputed:  # a recomputed output is not held between the passes: nothing in flight
                acts = [
                    np.where(np.asarray(r, dtype=bool), 0.0, a) for r, a in zip(costing.recomputed, acts, strict=True)
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
