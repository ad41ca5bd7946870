"""The integer-programming formulation shared by CP-SAT and the MIP solvers.

One-hot variables ``x[v, c]`` with an exactly-one row per vertex; one variable ``y[e, a, b]`` per
*allowed* pair of an edge, tied to the ``x`` by the tight marginal equalities
``sum_b y[e, a, b] = x[u, a]`` and ``sum_a y[e, a, b] = x[v, b]``; usage rows only at the maximal
cliques of the live intervals. Building it imports no solver: :func:`build` returns plain arrays
whose sizes tests can count, and each back-end turns them into its own model.

The exact presolve before building: parallel edges are summed; forbidden choices and forbidden
pairs get no variable; a vertex left with one allowed choice is fixed and its edges become node
costs of its neighbours (removing the neighbours' choices it forbids), repeatedly; choices that
another choice of the same vertex dominates (never worse whatever the neighbours do, never more
memory) are dropped; an edge that forbids nothing and whose cost splits as ``f(a) + g(b)``
(separable, constants included) becomes node costs of its two ends.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from stratopt.problem import FORBIDDEN, StrategyProblem, float_costs

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
    fixed: dict[int, int] = field(default_factory=dict)  # vertex -> choice set by the presolve

    def assignment(self, picked: dict[int, int]) -> list[int]:
        """A full assignment from the choices picked for the free vertices."""
        return [self.fixed[v] if v in self.fixed else picked[v] for v in range(len(self.choices))]

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


def build(problem: StrategyProblem, *, dominance: bool = True) -> Formulation:
    """The presolved formulation of a problem (no solver is imported).

    ``dominance=False`` skips the dominated-choice reduction (to measure what it buys).
    """
    pre = _Presolve(problem)
    if pre.infeasible is None:
        pre.fold()
    if dominance:
        # Infeasibility first: a fold that empties a domain leaves nothing to test dominance on.
        while pre.infeasible is None and pre.drop_dominated():
            pre.fold()
    if pre.infeasible is not None:
        return Formulation([], [], [], [], None, 0.0, pre.infeasible)
    return pre.formulation()


class _Presolve:
    """The exact reductions, each keeping at least one optimal assignment of the original problem.

    ``node[v]`` holds full-length cost rows (folded edges added in), ``allowed[v]`` the choices
    still open, ``merged[(u, v)]`` (u < v) one float matrix per vertex pair with +inf for
    forbidden pairs, ``fixed`` the vertices folded away and ``constant`` their cost.
    """

    def __init__(self, problem: StrategyProblem) -> None:
        self.problem = problem
        n = problem.num_vertices
        self.node = [problem.node_cost(v).astype(np.float64) for v in range(n)]
        self.allowed = [problem.node_cost(v) < FORBIDDEN for v in range(n)]
        self.merged: dict[tuple[int, int], np.ndarray] = {}
        for e, (u, v) in enumerate(problem.edges.tolist()):
            mat = float_costs(problem.edge_cost(e))
            if u > v:
                u, v, mat = v, u, mat.T
            self.merged[(u, v)] = self.merged[(u, v)] + mat if (u, v) in self.merged else mat
        self.adj: dict[int, set[int]] = {v: set() for v in range(n)}
        for u, v in self.merged:
            self.adj[u].add(v)
            self.adj[v].add(u)
        self.fixed: dict[int, int] = {}
        self.constant = 0.0
        self.stats = {"parallel_edges_merged": problem.num_edges - len(self.merged), "choices_dominated": 0}
        self.usage = None
        if problem.usage_flat is not None and problem.usage_limit is not None:
            self.usage = [problem.usage(v).astype(np.float64) for v in range(n)]
        self.infeasible: str | None = None
        self.pending = [v for v in range(n) if self.allowed[v].sum() <= 1]

    def _no_choice(self, v: int) -> None:
        self.infeasible = f"vertex {self.problem.vertex_label(v)} has no allowed choice left"

    def fold(self) -> None:
        """Fix every vertex left with one allowed choice; its edges become its neighbours' node
        costs (removing the neighbours' choices it forbids), until none is left to fold."""
        queue, self.pending = self.pending, []
        while queue:
            v = queue.pop()
            if v in self.fixed:
                continue
            if not self.allowed[v].any():
                return self._no_choice(v)
            if self.allowed[v].sum() > 1:
                continue
            c = int(np.flatnonzero(self.allowed[v])[0])
            self.fixed[v] = c
            self.constant += self.node[v][c]
            for w in sorted(self.adj[v]):
                key = (min(v, w), max(v, w))
                mat = self.merged.pop(key)
                row = mat[c] if v < w else mat[:, c]
                self.node[w] = self.node[w] + np.where(np.isfinite(row), row, 0.0)
                self.allowed[w] &= np.isfinite(row)
                self.adj[w].discard(v)
                if not self.allowed[w].any():
                    return self._no_choice(w)
                if self.allowed[w].sum() == 1:
                    queue.append(w)
            self.adj[v].clear()

    def drop_dominated(self) -> bool:
        """Remove choices that another choice of the same vertex dominates; True if any went.

        Choice ``d`` dominates ``a`` when switching any assignment from ``a`` to ``d`` can neither
        raise the cost nor break a constraint, whatever the neighbours pick: ``d`` is allowed
        with every neighbour choice ``a`` is allowed with, uses no more memory (same live
        interval), and ``node[d] - node[a] + sum over edges of max_b (M[d, b] - M[a, b]) <= 0``
        (the max over the neighbour's open choices ``b`` that ``a`` allows). Dominance is
        transitive, so removing dominated choices one at a time, each against those still open,
        always keeps an optimal assignment. Vertices whose test would exceed ``_DOMINANCE_WORK``
        entries are skipped.
        """
        removed = 0
        for v in range(len(self.node)):
            if v in self.fixed:
                continue
            open_ = np.flatnonzero(self.allowed[v])
            k = len(open_)
            if k < 2:
                continue
            mats = []
            for w in self.adj[v]:
                mat = self.merged[(v, w)] if v < w else self.merged[(w, v)].T
                mats.append(mat[np.ix_(open_, self.allowed[w])])
            if k * k * sum(m.shape[1] for m in mats) > _DOMINANCE_WORK:
                continue
            # excess[d, a]: the most switching a -> d can add; +inf when d is not always allowed.
            cost = self.node[v][open_]
            excess = cost[:, None] - cost[None, :]
            for m in mats:
                allowed_a = np.isfinite(m)  # (k, K_w)
                diff = m[:, None, :] - np.where(allowed_a, m, 0.0)[None, :, :]  # (d, a, b)
                diff = np.where(allowed_a[None, :, :], diff, -np.inf)
                worst = diff.max(axis=2)
                worst = np.where(np.isnan(worst), np.inf, worst)
                excess = excess + np.where(allowed_a.any(axis=1)[None, :], worst, 0.0)
            ok = excess <= _tolerance(cost, mats)
            if self.usage is not None:
                use = self.usage[v][open_]
                ok &= use[:, None] <= use[None, :]
            np.fill_diagonal(ok, False)
            alive = np.ones(k, dtype=bool)
            for a in np.argsort(cost, kind="stable").tolist():
                if (ok[:, a] & alive).any():
                    alive[a] = False
            if not alive.all():
                self.allowed[v][open_[~alive]] = False
                removed += int((~alive).sum())
                if alive.sum() == 1:
                    self.pending.append(v)
        self.stats["choices_dominated"] += removed
        return removed > 0

    def formulation(self) -> Formulation:
        """The model over what is left: separable edges become node costs first."""
        problem, allowed, node = self.problem, self.allowed, self.node
        n = problem.num_vertices
        stats = dict(self.stats, vertices_fixed=len(self.fixed))
        choices = [np.flatnonzero(allowed[v]) if v not in self.fixed else np.zeros(0, dtype=np.int64) for v in range(n)]
        constant = self.constant
        edges = []
        separable = 0
        for (u, v), mat in sorted(self.merged.items()):
            sub = mat[np.ix_(allowed[u], allowed[v])]
            finite = np.isfinite(sub)
            if finite.all():
                row, col = sub[:, 0] - sub[0, 0], sub[0, :]
                if np.abs(sub - row[:, None] - col[None, :]).max() <= _tolerance(sub):
                    # sub[a, b] = row[a] + col[b]: the edge is a cost on each end.
                    node[u][choices[u]] += row
                    node[v][choices[v]] += col
                    separable += 1
                    continue
            a, b = np.nonzero(finite)
            pairs = np.stack([choices[u][a], choices[v][b]], axis=1)
            edges.append((u, v, pairs, sub[a, b]))
        stats["separable_edges"] = separable
        costs = [node[v][choices[v]] for v in range(n)]

        usage_rows: list[tuple[np.ndarray, float]] = []
        usages = None
        if self.usage is not None and problem.intervals is not None and problem.usage_limit is not None:
            usages = [self.usage[v][choices[v]] for v in range(n)]
            is_free = np.ones(n, dtype=bool)
            fixed_use = np.zeros(n)
            for v, c in self.fixed.items():
                is_free[v] = False
                fixed_use[v] = self.usage[v][c]
            most = np.array([u.max() if len(u) else 0.0 for u in usages])
            least = np.array([u.min() if len(u) else 0.0 for u in usages])
            for members in _maximal_cliques(problem.intervals):
                free = members[is_free[members]]
                room = problem.usage_limit - float(fixed_use[members].sum())
                if len(free) and room >= float(most[free].sum()):
                    continue  # the row can never bind
                if room < 0 or (len(free) and room < float(least[free].sum())):
                    return _infeasible_usage(problem)
                if len(free):
                    usage_rows.append((free, room))
        stats["usage_rows"] = len(usage_rows)
        return Formulation(choices, costs, edges, usage_rows, usages, constant, None, stats, self.fixed)


#: Largest dominance test (choices^2 x neighbour choices, summed over edges) run for one vertex.
_DOMINANCE_WORK = 4_000_000


def _tolerance(*arrays: np.ndarray | list[np.ndarray]) -> float:
    """Zero for integer-valued data; for fractional data, a relative 1e-12 of the largest finite
    magnitude (so float round-off cannot make a reduction drop the better choice)."""
    flat = [np.ravel(a) for x in arrays for a in (x if isinstance(x, list) else [x])]
    values = np.concatenate(flat) if flat else np.zeros(0)
    values = values[np.isfinite(values)]
    if values.size == 0 or (values == np.round(values)).all():
        return 0.0
    return 1e-12 * float(np.abs(values).max())


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
