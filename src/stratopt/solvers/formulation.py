"""The integer-programming formulation shared by CP-SAT and the MIP solvers.

One-hot variables ``x[v, c]`` with an exactly-one row per vertex; one variable ``y[e, a, b]`` per
*allowed* pair of an edge, tied to the ``x`` by the tight marginal equalities
``sum_b y[e, a, b] = x[u, a]`` and ``sum_a y[e, a, b] = x[v, b]``; usage rows only at the maximal
cliques of the live intervals. Building it imports no solver: :func:`build` returns plain arrays
whose sizes tests can count, and each back-end turns them into its own model.

The exact presolve before building (:mod:`stratopt.solvers.reductions`): parallel edges are
summed; forbidden choices and pairs get no variable, nor do choices no neighbour supports; a
vertex left with one allowed choice is fixed; a vertex that an edge makes a function of its
neighbour joins that neighbour; dominated choices are dropped; separable edges become node
costs; usage rows over the same free vertices are kept once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from stratopt.problem import StrategyProblem
from stratopt.solvers.reductions import Reducer

__all__ = ["Formulation", "Key", "build", "integer_scale"]

#: A variable of the model: ``(v, c)`` for ``x[v, c]``; ``(e, a, b)`` for the pair variable of
#: ``edges[e]`` with choices ``a`` and ``b`` at its two ends.
Key = tuple[int, ...]


@dataclass
class Formulation:
    """Variables and rows of the model, in back-end-neutral arrays.

    ``choices[v]`` lists the allowed choice indices of vertex v (one x variable each) and
    ``costs[v]`` their costs. ``edges`` lists ``(u, v, pairs, costs)`` with ``pairs`` an (P, 2)
    array of allowed (a, b) choice-index pairs. ``usage_rows`` lists ``(vertices, limit)`` for
    each maximal clique of live intervals. ``constant`` is the cost fixed by the presolve.
    ``infeasible`` is set when the presolve already proves that nothing is allowed.
    """

    choices: list[np.ndarray]
    costs: list[np.ndarray]
    edges: list[tuple[int, int, np.ndarray, np.ndarray]]
    usage_rows: list[tuple[np.ndarray, float]]
    usages: list[np.ndarray] | None
    constant: float = 0.0
    infeasible: str | None = None
    stats: dict[str, int] = field(default_factory=dict)
    reducer: Reducer | None = None  # what the presolve did, to lift the free vertices' choices

    @property
    def fixed(self) -> dict[int, int]:
        """Vertex -> choice, for the vertices the presolve fixed."""
        return {} if self.reducer is None else self.reducer.fixed

    def assignment(self, picked: dict[int, int]) -> list[int]:
        """A full assignment from the choices picked for the free vertices (the presolve's
        followers pick what their leaders imply)."""
        assert self.reducer is not None
        return self.reducer.lift(picked)

    def variables(self) -> Iterator[tuple[Key, float]]:
        """Every variable with its objective coefficient: the x of each free vertex, then the
        pair variables of each edge."""
        for v, (cs, cost) in enumerate(zip(self.choices, self.costs, strict=True)):
            for c, w in zip(cs.tolist(), cost.tolist(), strict=True):
                yield (v, c), w
        for e, (_, _, pairs, cost) in enumerate(self.edges):
            for (a, b), w in zip(pairs.tolist(), cost.tolist(), strict=True):
                yield (e, a, b), w

    def rows(self) -> Iterator[tuple[str, str, list[tuple[Key, float]], float]]:
        """Every row as ``(name, kind, terms, rhs)``: kind ``"one"`` (sum of terms == 1, one per
        free vertex), ``"marginal"`` (== 0: the pair variables with choice ``a`` at one end minus
        that end's ``x``) or ``"usage"`` (<= rhs)."""
        for v, cs in enumerate(self.choices):
            if len(cs):
                yield f"one{v}", "one", [((v, c), 1.0) for c in cs.tolist()], 1.0
        for e, (u, v, pairs, _) in enumerate(self.edges):
            rows: dict[int, list[tuple[Key, float]]] = {}
            cols: dict[int, list[tuple[Key, float]]] = {}
            for a, b in pairs.tolist():
                rows.setdefault(a, []).append(((e, a, b), 1.0))
                cols.setdefault(b, []).append(((e, a, b), 1.0))
            for a in self.choices[u].tolist():
                yield f"r{e}_{a}", "marginal", [*rows.get(a, []), ((u, a), -1.0)], 0.0
            for b in self.choices[v].tolist():
                yield f"c{e}_{b}", "marginal", [*cols.get(b, []), ((v, b), -1.0)], 0.0
        if self.usages is not None:
            for i, (members, room) in enumerate(self.usage_rows):
                terms: list[tuple[Key, float]] = [
                    ((v, c), use)
                    for v in members.tolist()
                    for c, use in zip(self.choices[v].tolist(), self.usages[v].tolist(), strict=True)
                    if use
                ]
                yield f"use{i}", "usage", terms, room

    def values(self, assignment: np.ndarray) -> Iterator[tuple[Key, int]]:
        """The 0/1 value of every variable under a full assignment (a solver's hint)."""
        for key, _ in self.variables():
            if len(key) == 2:
                yield key, int(assignment[key[0]] == key[1])
            else:
                u, v, _, _ = self.edges[key[0]]
                yield key, int(assignment[u] == key[1] and assignment[v] == key[2])

    @property
    def num_x(self) -> int:
        return sum(len(c) for c in self.choices)

    @property
    def num_y(self) -> int:
        return sum(len(p) for _, _, p, _ in self.edges)

    @property
    def num_rows(self) -> int:
        """Exactly-one rows (free vertices), marginal equalities (one per allowed choice of each
        end of each edge) and usage rows."""
        free = [c for c in self.choices if len(c)]
        n_marg = sum(len(self.choices[u]) + len(self.choices[v]) for u, v, _, _ in self.edges)
        return len(free) + n_marg + len(self.usage_rows)


def build(problem: StrategyProblem, *, dominance: bool = True, followers: bool = True) -> Formulation:
    """The presolved formulation of a problem (no solver is imported).

    ``dominance=False`` skips the dominated-choice reduction and ``followers=False`` the follower
    merging (to measure what each buys); the reductions are in :mod:`stratopt.solvers.reductions`.
    """
    pre = Reducer(problem)
    pre.run(dominance=dominance, followers=followers)
    if pre.infeasible is not None:
        return Formulation([], [], [], [], None, 0.0, pre.infeasible)
    return _formulation(pre)


def _formulation(pre: Reducer) -> Formulation:
    """The model over what the reductions left: separable edges become node costs first."""
    problem, allowed, node = pre.problem, pre.allowed, pre.node
    n = problem.num_vertices
    pre.separate()
    stats = dict(pre.stats)
    choices = [np.flatnonzero(allowed[v]) if not pre.removed[v] else np.zeros(0, dtype=np.int64) for v in range(n)]
    edges = []
    for (u, v), mat in sorted(pre.merged.items()):
        sub = mat[np.ix_(allowed[u], allowed[v])]
        a, b = np.nonzero(np.isfinite(sub))
        pairs = np.stack([choices[u][a], choices[v][b]], axis=1)
        edges.append((u, v, pairs, sub[a, b]))
    costs = [node[v][choices[v]] for v in range(n)]

    usage_rows: list[tuple[np.ndarray, float]] = []
    usages = None
    duplicates = 0
    if pre.usage is not None and problem.intervals is not None and problem.usage_limit is not None:
        usages = [pre.usage[v][choices[v]] for v in range(n)]
        is_free = ~pre.removed
        most = np.array([u.max() if len(u) else 0.0 for u in usages])
        least = np.array([u.min() if len(u) else 0.0 for u in usages])
        rows: dict[bytes, int] = {}
        for members in _maximal_cliques(problem.intervals):
            free = members[is_free[members]]
            room = problem.usage_limit - float(pre.load[members].sum())
            if len(free) and room >= float(most[free].sum()):
                continue  # the row can never bind
            if room < 0 or (len(free) and room < float(least[free].sum())):
                return _infeasible_usage(problem)
            if len(free):
                key = free.tobytes()
                if key in rows:  # the same free vertices: one row with the least room
                    duplicates += 1
                    i = rows[key]
                    usage_rows[i] = (free, min(room, usage_rows[i][1]))
                else:
                    rows[key] = len(usage_rows)
                    usage_rows.append((free, room))
    stats["usage_rows"] = len(usage_rows)
    stats["usage_rows_duplicate"] = duplicates
    return Formulation(choices, costs, edges, usage_rows, usages, pre.constant, None, stats, pre)


def _infeasible_usage(problem: StrategyProblem) -> Formulation:
    return Formulation([], [], [], [], None, 0.0, "the least usage of the live vertices exceeds the limit")


def _maximal_cliques(intervals: np.ndarray) -> list[np.ndarray]:
    """Live sets of the intervals that no other live set contains (one per maximal clique)."""
    live = intervals[:, 1] > intervals[:, 0]
    idx = np.flatnonzero(live)
    if idx.size == 0:
        return []
    times = np.unique(intervals[idx])
    start = np.searchsorted(times, intervals[idx, 0])
    end = np.searchsorted(times, intervals[idx, 1])
    # Slots are [times[i], times[i+1]); every boundary is an endpoint of a non-empty interval,
    # so neighbouring slots differ. Slot i is maximal iff an interval starts at i (it is not
    # inside slot i-1) and one ends at i+1 (it is not inside slot i+1).
    starts_here = np.zeros(len(times), dtype=bool)
    ends_next = np.zeros(len(times), dtype=bool)
    starts_here[start] = True
    ends_next[end - 1] = True
    cliques = []
    for slot in np.flatnonzero(starts_here & ends_next).tolist():
        cliques.append(idx[(start <= slot) & (end > slot)])
    return cliques


#: Largest cost after :func:`integer_scale`.
_MAX_COEFFICIENT = 1e9


def integer_scale(problem: StrategyProblem, form: Formulation) -> tuple[float, float]:
    """(scale, worst total rounding error in the problem's units) for back-ends that need
    integer costs (CP-SAT, toulbar2): 1 for integer costs; else the power of two that brings the
    largest cost to about 1e9, so dyadic costs such as 0.25 stay exact.

    The error is exact: each vertex contributes the largest rounding error among its choices, each
    edge the largest among its allowed pairs (one of each is in every assignment's total).
    """
    if problem.is_integral:
        return 1.0, 0.0
    terms = [c for c in form.costs if len(c)] + [c for *_, c in form.edges if len(c)]
    peak = max([float(np.abs(c).max()) for c in terms] + [1.0])
    scale = 2.0 ** math.floor(math.log2(_MAX_COEFFICIENT / peak))
    error = sum(float(np.abs(c * scale - np.round(c * scale)).max()) for c in terms)
    return scale, error / scale
