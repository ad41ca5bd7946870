"""The integer-programming formulation shared by CP-SAT and the MIP solvers.

One-hot variables ``x[v, c]`` with an exactly-one row per vertex; one variable ``y[e, a, b]`` per
*allowed* pair of an edge, tied to the ``x`` by the tight marginal equalities
``sum_b y[e, a, b] = x[u, a]`` and ``sum_a y[e, a, b] = x[v, b]``; usage rows only at the maximal
cliques of the live intervals. Building it imports no solver: :func:`build` returns plain arrays
whose sizes tests can count, and each back-end turns them into its own model.

The exact presolve before building: parallel edges are summed; forbidden choices and forbidden
pairs get no variable; a vertex left with one allowed choice is fixed and its edges become node
costs of its neighbours (removing the neighbours' choices it forbids), repeatedly; an edge whose
allowed entries all cost the same and that forbids nothing becomes a constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stratopt.problem import FORBIDDEN, StrategyProblem, float_costs

__all__ = ["Formulation", "build"]


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


def build(problem: StrategyProblem) -> Formulation:
    """The presolved formulation of a problem (no solver is imported)."""
    n = problem.num_vertices
    node = [problem.node_cost(v).astype(np.float64) for v in range(n)]
    allowed = [problem.node_cost(v) < FORBIDDEN for v in range(n)]
    merged: dict[tuple[int, int], np.ndarray] = {}
    for e, (u, v) in enumerate(problem.edges.tolist()):
        mat = float_costs(problem.edge_cost(e))
        if u > v:
            u, v, mat = v, u, mat.T
        merged[(u, v)] = merged[(u, v)] + mat if (u, v) in merged else mat
    stats = {"parallel_edges_merged": problem.num_edges - len(merged)}
    constant = 0.0
    for v in range(n):
        if not allowed[v].any():
            return _infeasible(problem, v)

    # Fold vertices with a single allowed choice, until none is left to fold.
    fixed: dict[int, int] = {}
    adj: dict[int, set[int]] = {v: set() for v in range(n)}
    for u, v in merged:
        adj[u].add(v)
        adj[v].add(u)
    queue = [v for v in range(n) if allowed[v].sum() == 1]
    while queue:
        v = queue.pop()
        if v in fixed:
            continue
        if not allowed[v].any():
            return _infeasible(problem, v)
        c = int(np.flatnonzero(allowed[v])[0])
        fixed[v] = c
        constant += node[v][c]
        for w in sorted(adj[v]):
            key = (min(v, w), max(v, w))
            mat = merged.pop(key)
            row = mat[c] if v < w else mat[:, c]
            node[w] = node[w] + np.where(np.isfinite(row), row, 0.0)
            allowed[w] &= np.isfinite(row)
            adj[w].discard(v)
            if not allowed[w].any():
                return _infeasible(problem, w)
            if allowed[w].sum() == 1:
                queue.append(w)
        adj[v].clear()
    stats["vertices_fixed"] = len(fixed)

    choices = [np.flatnonzero(allowed[v]) if v not in fixed else np.zeros(0, dtype=np.int64) for v in range(n)]
    costs = [node[v][choices[v]] for v in range(n)]
    edges = []
    constant_edges = 0
    for (u, v), mat in sorted(merged.items()):
        sub = mat[np.ix_(allowed[u], allowed[v])]
        finite = np.isfinite(sub)
        if finite.all() and (sub == sub.flat[0]).all():
            constant += float(sub.flat[0])
            constant_edges += 1
            continue
        a, b = np.nonzero(finite)
        pairs = np.stack([choices[u][a], choices[v][b]], axis=1)
        edges.append((u, v, pairs, sub[a, b]))
    stats["constant_edges"] = constant_edges

    usage_rows: list[tuple[np.ndarray, float]] = []
    usages = None
    if problem.usage_flat is not None and problem.intervals is not None and problem.usage_limit is not None:
        usages = [problem.usage(v)[choices[v]] for v in range(n)]
        fixed_use = {v: float(problem.usage(v)[c]) for v, c in fixed.items()}
        for members in _maximal_cliques(problem.intervals):
            free = np.array([v for v in members if v not in fixed], dtype=np.int64)
            room = problem.usage_limit - sum(fixed_use.get(v, 0.0) for v in members)
            if len(free) and room >= sum(float(usages[v].max()) for v in free):
                continue  # the row can never bind
            if room < 0 or (len(free) and room < sum(float(usages[v].min()) for v in free)):
                return _infeasible_usage(problem)
            if len(free):
                usage_rows.append((free, room))
    stats["usage_rows"] = len(usage_rows)
    return Formulation(choices, costs, edges, usage_rows, usages, constant, None, stats, fixed)


def _infeasible(problem: StrategyProblem, v: int) -> Formulation:
    return Formulation([], [], [], [], None, 0.0, f"vertex {problem.vertex_label(v)} has no allowed choice left")


def _infeasible_usage(problem: StrategyProblem) -> Formulation:
    return Formulation([], [], [], [], None, 0.0, "the least usage of the live vertices exceeds the limit")


def _maximal_cliques(intervals: np.ndarray) -> list[list[int]]:
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
        members = idx[(start <= slot) & (end > slot)]
        cliques.append(members.tolist())
    return cliques
