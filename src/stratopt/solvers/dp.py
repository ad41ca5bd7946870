"""Exact dynamic programming by vertex elimination (PaSE's recurrence on numeric tables).

Eliminating a vertex ``v`` replaces every cost term that mentions ``v`` by one table over its
current neighbours (its *dependent set*): for each combination of their choices, the cheapest
choice of ``v`` and everything eliminated before it. A back-pointer table remembers that choice,
so the optimum is recovered by walking the order backwards; no strategy columns are carried.
The cost is exponential only in the largest dependent set (the order's *width*).

Before any table is built, an exact pre-pass removes what needs no big table (OptCNN's node and
edge eliminations): parallel edges are summed, single-choice vertices fold into their
neighbours' costs, leaves fold into their neighbour, and a degree-2 vertex becomes one edge
matrix between its two neighbours (a min-plus product). What remains is eliminated in the order
with the smallest estimated total table size among several heuristics, and refused, before any
allocation, if its tables would not fit the memory cap.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.errors import ModelError, UnsupportedProblemError
from stratopt.problem import StrategyProblem, evaluate, float_costs
from stratopt.solvers.base import Limit, Result, Status
from stratopt.solvers.orderings import CHUNK_ENTRIES, ORDERINGS, plan

__all__ = ["ORDERINGS", "DynamicProgramming", "Marginal", "default_memory_cap", "marginal_table", "plan"]

_PRUNE_VISITS = 3  # prune() looks at a vertex at most this often (hubs would requeue endlessly)
_CACHE_ENTRIES = 1 << 16  # min-plus products work on blocks of this many entries (512 KiB)
_MIN_FILL_CORE = 500  # 'auto' simulates min-fill only on cores up to this many vertices
_MEMO_WORK = 1 << 20  # min-plus products of at least this many terms are remembered (repeated layers)


def default_memory_cap() -> int:
    """Half the memory available now, in bytes (4 GiB if it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return 4 << 30


# ---------------------------------------------------------------------------------------------
# The pairwise graph and the exact pre-pass


@dataclass
class _Graph:
    """Unary and pairwise cost tables (+inf = forbidden) with adjacency, reduced in place."""

    k: list[int]
    unary: list[np.ndarray]
    pair: dict[tuple[int, int], np.ndarray]  # key (u, v) with u < v; matrix K_u x K_v
    adj: list[set[int]]
    constant: float = 0.0
    # Eliminations so far: (vertex, dependent set, back-pointer table over it).
    steps: list[tuple[int, tuple[int, ...], np.ndarray]] = field(default_factory=list)
    width: int = 0
    # Original choice index of every kept choice (prune() narrows them).
    kept: list[np.ndarray] = field(default_factory=list)
    # Min-plus products already computed, by the digests of their two operands (repeated layers).
    products: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.kept:
            self.kept = [np.arange(k) for k in self.k]

    @classmethod
    def from_problem(cls, problem: StrategyProblem) -> _Graph:
        n = problem.num_vertices
        k = problem.num_choices.tolist()
        node = float_costs(problem.node_flat)
        off = problem.node_offsets
        unary = [node[off[v] : off[v + 1]].copy() for v in range(n)]
        edge = problem.edge_floats()
        eoff = problem.edge_offsets
        pair: dict[tuple[int, int], np.ndarray] = {}
        adj: list[set[int]] = [set() for _ in range(n)]
        for e, (u, v) in enumerate(problem.edges.tolist()):
            mat = edge[eoff[e] : eoff[e + 1]].reshape(k[u], k[v])
            if u > v:
                u, v, mat = v, u, mat.T
            if (u, v) in pair:
                pair[(u, v)] = pair[(u, v)] + mat  # parallel edges add up
            else:
                pair[(u, v)] = mat  # a view (of the problem's read-only tables or a float copy): never changed in place
            adj[u].add(v)
            adj[v].add(u)
        return cls(k, unary, pair, adj)

    def matrix(self, u: int, v: int) -> np.ndarray:
        """The K_u x K_v matrix between u and v (a view, transposed if stored the other way)."""
        return self.pair[(u, v)] if u < v else self.pair[(v, u)].T

    def _drop_edge(self, u: int, v: int) -> None:
        del self.pair[(min(u, v), max(u, v))]
        self.adj[u].discard(v)
        self.adj[v].discard(u)

    def _add_pair(self, u: int, w: int, mat: np.ndarray) -> None:
        key = (u, w) if u < w else (w, u)
        mat = mat if u < w else mat.T
        self.pair[key] = self.pair[key] + mat if key in self.pair else np.ascontiguousarray(mat)
        self.adj[u].add(w)
        self.adj[w].add(u)

    def eliminate_small(self, v: int) -> None:
        """Eliminate a vertex of degree <= 2 (or with one choice) keeping the graph pairwise."""
        nbrs = sorted(self.adj[v])
        own = self.unary[v]
        if self.k[v] == 1:
            for w in nbrs:
                self.unary[w] = self.unary[w] + self.matrix(v, w)[0]
                self._drop_edge(v, w)
            self.constant += float(own[0])
            self.steps.append((v, (), np.zeros((), dtype=np.int64)))
            return
        if not nbrs:
            c = int(np.argmin(own))
            self.constant += float(own[c])
            self.steps.append((v, (), np.asarray(c)))
            return
        if len(nbrs) == 1:
            (u,) = nbrs
            total = own[:, None] + self.matrix(v, u)  # K_v x K_u
            bp = np.argmin(total, axis=0)
            self.unary[u] = self.unary[u] + total[bp, np.arange(self.k[u])]
            self._drop_edge(v, u)
            self.steps.append((v, (u,), bp))
            self.width = max(self.width, 1)
            return
        u, w = nbrs
        left = self.matrix(u, v) + own[None, :]  # K_u x K_v
        right_t = np.ascontiguousarray(self.matrix(v, w).T)  # K_w x K_v
        best, bp = self._min_plus(left, right_t)
        self._drop_edge(v, u)
        self._drop_edge(v, w)
        self._add_pair(u, w, best)
        self.steps.append((v, (u, w), bp))
        self.width = max(self.width, 2)

    def _min_plus(self, left: np.ndarray, right_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``best[a, b] = min_c left[a, c] + right_t[b, c]`` and its argmin. A model's repeated
        layers ask for the same large products once per layer: those are computed once, found
        again by a 128-bit digest of both operands (read-only results, shared)."""
        k_u, k_v = left.shape
        k_w = right_t.shape[0]
        key = None
        if k_u * k_v * k_w >= _MEMO_WORK:
            key = (left.shape, right_t.shape, _digest(left), _digest(right_t))
            if key in self.products:
                return self.products[key]
        best = np.empty((k_u, k_w))
        bp: np.ndarray = np.empty((k_u, k_w), dtype=_index_dtype(k_v))
        # v's axis last and blocks small enough to stay in cache: reducing over a strided middle
        # axis of one big array was 10-50x slower (Transformer, K = 400).
        rows = max(1, _CACHE_ENTRIES // max(1, k_v * k_w))
        for lo in range(0, k_u, rows):
            joint = left[lo : lo + rows, None, :] + right_t[None, :, :]  # rows x K_w x K_v
            idx = np.argmin(joint, axis=2)
            bp[lo : lo + rows] = idx
            best[lo : lo + rows] = np.take_along_axis(joint, idx[..., None], axis=2)[..., 0]
        if key is not None:
            best.setflags(write=False)
            bp.setflags(write=False)
            self.products[key] = (best, bp)
        return best, bp

    def prune(self, frozen: set[int] | frozenset[int] = frozenset()) -> int:
        """Drop choices that can never beat the best choice's worst case; returns how many.

        For choice c of v, ``lo[c]`` adds its node cost and, per edge, the row minimum (the best
        any neighbour could do for it); ``hi[c]`` the row maxima. A choice whose ``lo`` is
        infinite (forbidden, or forbidden with every choice some neighbour has left) is in no
        strategy. If ``lo[c]`` exceeds the smallest (finite) ``hi``, that choice is at least as
        good as c whatever the neighbours choose, so dropping c keeps an optimum (ties and float
        rounding keep c). Repeated until nothing changes (a pruned vertex requeues its neighbours,
        whose bounds tighten). Runs before any elimination, so recovery only maps kept indices back
        (``self.kept``). ``frozen`` vertices keep every choice.
        """
        dropped = self._drop_forbidden(frozen)
        queue = list(range(len(self.k)))[::-1]
        queued = set(queue)
        visits = [0] * len(self.k)
        while queue:
            v = queue.pop()
            queued.discard(v)
            visits[v] += 1
            if self.k[v] <= 1 or v in frozen:
                continue
            lo = self.unary[v].copy()
            hi = self.unary[v].copy()
            for w in self.adj[v]:
                m = self.matrix(v, w)
                lo += m.min(axis=1)
                hi += m.max(axis=1)
            keep = np.isfinite(lo)  # a forbidden choice, or one every choice of a neighbour forbids
            if not keep.any():
                continue  # no strategy at all: the elimination says so
            best = int(np.argmin(hi))
            if math.isfinite(hi[best]):  # a worst case with a forbidden pair in it dominates nothing
                keep &= lo - hi[best] <= 1e-9 * max(1.0, abs(float(hi[best])))
                keep[best] = True
            if keep.all():
                continue
            idx = np.flatnonzero(keep)
            dropped += self.k[v] - idx.size
            self.k[v] = int(idx.size)
            self.unary[v] = self.unary[v][idx]
            self.kept[v] = self.kept[v][idx]
            for w in self.adj[v]:
                key = (v, w) if v < w else (w, v)
                mat = self.pair[key]
                self.pair[key] = np.ascontiguousarray(mat[idx] if v < w else mat[:, idx])
                if w not in queued and visits[w] < _PRUNE_VISITS:
                    queue.append(w)
                    queued.add(w)
        return dropped

    def _drop_forbidden(self, frozen: set[int] | frozenset[int]) -> int:
        """Drop every forbidden choice (infinite node cost) at once, each table cut once: a mesh's
        restriction forbids most choices, and the bounds below read whole tables."""
        keep = {}
        for v, cost in enumerate(self.unary):
            ok = np.isfinite(cost)
            if v not in frozen and ok.any() and not ok.all():
                keep[v] = np.flatnonzero(ok)
        for (u, w), mat in list(self.pair.items()):
            if u in keep or w in keep:
                rows = keep.get(u, slice(None))
                cols = keep.get(w, slice(None))
                self.pair[(u, w)] = np.ascontiguousarray(mat[rows][:, cols])
        dropped = 0
        for v, idx in keep.items():
            dropped += self.k[v] - idx.size
            self.k[v] = int(idx.size)
            self.unary[v] = self.unary[v][idx]
            self.kept[v] = self.kept[v][idx]
        return dropped

    def _work(self, v: int) -> int:
        """Entries eliminate_small(v) would touch now (its node, its neighbours' choices)."""
        return self.k[v] * math.prod(self.k[w] for w in self.adj[v]) if self.k[v] > 1 else 0

    def prepass(self, alive: set[int]) -> None:
        """Eliminate single-choice vertices, leaves and series vertices until none is left.

        Cheapest first: in a chain, which series vertex goes first decides the sizes of the
        min-plus products that follow. A vertex's work changes only when its neighbours do
        (choice counts are fixed here), so only the eliminated vertex's neighbours requeue.
        """
        queue = [(self._work(v), v) for v in sorted(alive) if len(self.adj[v]) <= 2 or self.k[v] == 1]
        heapq.heapify(queue)
        while queue:
            work, v = heapq.heappop(queue)
            if v not in alive or (len(self.adj[v]) > 2 and self.k[v] > 1):
                continue
            if work != self._work(v):
                heapq.heappush(queue, (self._work(v), v))
                continue
            nbrs = list(self.adj[v])
            self.eliminate_small(v)
            alive.discard(v)
            for w in nbrs:
                if len(self.adj[w]) <= 2 or self.k[w] == 1:
                    heapq.heappush(queue, (self._work(w), w))


def _digest(table: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(table).data, digest_size=16).digest()


def _index_dtype(k: int) -> type:
    return np.uint8 if k <= 256 else np.uint16 if k <= 65536 else np.uint32


# ---------------------------------------------------------------------------------------------
# General elimination on tables


class _OutOfTime(Exception):
    """The time limit passed during the elimination."""


def _eliminate(
    graph: _Graph, order: tuple[int, ...], deadline: float | None = None, keep: tuple[int, ...] = ()
) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """Eliminate ``order`` with tables over dependent sets; records steps on ``graph``. The
    vertices in ``keep`` stay: the tables left over them (their own costs included) are returned.

    Raises :class:`_OutOfTime` when ``deadline`` (a ``perf_counter`` time) passes.
    """
    k = graph.k
    factors: dict[int, tuple[tuple[int, ...], np.ndarray]] = {}
    of_vertex: dict[int, set[int]] = {v: set() for v in (*order, *keep)}
    next_id = 0

    def add(scope: tuple[int, ...], table: np.ndarray) -> None:
        nonlocal next_id
        factors[next_id] = (scope, table)
        for x in scope:
            of_vertex[x].add(next_id)
        next_id += 1

    for v in (*order, *keep):
        add((v,), graph.unary[v])
    for (u, v), mat in graph.pair.items():
        add((u, v), mat)

    for v in order:
        if deadline is not None and time.perf_counter() > deadline:
            raise _OutOfTime
        ids = sorted(of_vertex.pop(v))
        parts = [factors.pop(i) for i in ids]
        for scope, _ in parts:
            for x in scope:
                if x != v:
                    of_vertex[x].difference_update(ids)
        dep = tuple(sorted({x for scope, _ in parts for x in scope} - {v}))
        axes = (*dep, v)
        shape = [k[x] for x in axes]
        best = np.empty(shape[:-1])
        bp: np.ndarray = np.empty(shape[:-1], dtype=_index_dtype(k[v]))
        per_row = math.prod(shape[1:]) if dep else 1
        rows = max(1, CHUNK_ENTRIES // max(1, per_row)) if dep else 1
        lead = shape[0] if dep else 1
        for lo in range(0, lead, rows):
            hi = min(lead, lo + rows)
            sub_shape = [hi - lo, *shape[1:]] if dep else shape
            joint = np.zeros(sub_shape)
            for scope, table in parts:
                joint += _broadcast(scope, table, axes, dep[0] if dep else None, lo, hi)
            idx = np.argmin(joint, axis=-1)
            if dep:
                bp[lo:hi] = idx
                best[lo:hi] = np.take_along_axis(joint, idx[..., None], axis=-1)[..., 0]
            else:
                bp[...] = idx
                best[...] = joint[idx]
        graph.steps.append((v, dep, bp))
        graph.width = max(graph.width, len(dep))
        if dep:
            add(dep, best)
        else:
            graph.constant += float(best)
    return list(factors.values())


class Marginal:
    """What :func:`marginal_table` eliminated, to recover the best choices of every other vertex
    for given choices of the kept ones."""

    def __init__(self, graph: _Graph, keep: tuple[int, ...]) -> None:
        self._graph = graph
        self._keep = keep

    def assignment(self, fixed: tuple[int, ...]) -> list[int]:
        """Every vertex's choice at the optimum with the kept vertices at ``fixed``."""
        graph = self._graph
        choice = [0] * len(graph.k)
        for v, c in zip(self._keep, fixed, strict=True):
            choice[v] = int(c)
        for v, dep, bp in reversed(graph.steps):
            choice[v] = int(bp[tuple(choice[x] for x in dep)]) if dep else int(bp)
        return [int(graph.kept[v][c]) for v, c in enumerate(choice)]


def marginal_table(
    unary: list[np.ndarray], pairs: list[tuple[int, int, np.ndarray]], keep: tuple[int, ...], *, prune: bool = True
) -> tuple[np.ndarray, Marginal]:
    """The least total cost for every joint choice of the ``keep`` vertices, everything else
    chosen at its best: an array with one axis per kept vertex (in ``keep``'s order), and the
    :class:`Marginal` that recovers those best choices.

    ``unary[v]`` are node costs, ``pairs`` ``(u, v, K_u x K_v matrix)`` edge costs (parallel ones
    add up; +inf forbids). The same exact eliminations as :class:`DynamicProgramming` (dominated
    choices of the other vertices dropped unless ``prune`` is False, the pre-pass, then tables in
    the smallest order found),
    stopping short of the kept vertices: the pipeline search chains these tables over the units
    between its cuts.

    >>> m, how = marginal_table([np.zeros(2), np.array([0.0, 5.0]), np.zeros(2)],
    ...     [(0, 1, np.array([[0.0, 9.0], [9.0, 0.0]])), (1, 2, np.array([[0.0, 1.0], [1.0, 0.0]]))], (0, 2))
    >>> m.tolist(), how.assignment((1, 0))
    ([[0.0, 1.0], [6.0, 5.0]], [1, 1, 0])
    """
    n = len(unary)
    k = [int(np.asarray(u).shape[0]) for u in unary]
    pair: dict[tuple[int, int], np.ndarray] = {}
    adj: list[set[int]] = [set() for _ in range(n)]
    for u, v, mat in pairs:
        mat = np.asarray(mat, dtype=np.float64)
        if u > v:
            u, v, mat = v, u, mat.T
        pair[(u, v)] = pair[(u, v)] + mat if (u, v) in pair else np.array(mat, dtype=np.float64)
        adj[u].add(v)
        adj[v].add(u)
    graph = _Graph(k, [np.array(x, dtype=np.float64) for x in unary], pair, adj)
    if prune:
        graph.prune(frozen=set(keep))
    alive = set(range(n)) - set(keep)
    graph.prepass(alive)
    order: tuple[int, ...] = ()
    if alive:
        core = {v: set(graph.adj[v]) for v in sorted(alive | set(keep))}
        found = plan(core, graph.k, "min-size")
        assert found is not None
        order = tuple(v for v in found.order if v not in keep)
    leftovers = _eliminate(graph, order, keep=tuple(keep))
    out = np.full(tuple(graph.k[v] for v in keep), graph.constant)
    for scope, table in leftovers:
        out = out + _broadcast(scope, table, tuple(keep), None, 0, 0)
    return out, Marginal(graph, tuple(keep))


def _broadcast(
    scope: tuple[int, ...], table: np.ndarray, axes: tuple[int, ...], lead: int | None, lo: int, hi: int
) -> np.ndarray:
    """``table`` (axes in ``scope`` order) arranged to broadcast against ``axes``, sliced on ``lead``."""
    if lead is not None and lead in scope:
        pos = scope.index(lead)
        table = np.take(table, np.arange(lo, hi), axis=pos)
    positions = [axes.index(x) for x in scope]
    perm = np.argsort(positions)
    table = np.transpose(table, perm)
    shape = [1] * len(axes)
    for x, size in zip(sorted(positions), table.shape, strict=True):
        shape[x] = size
    return table.reshape(shape)


def _recover(graph: _Graph, n: int) -> list[int]:
    choice = [0] * n
    for v, dep, bp in reversed(graph.steps):
        choice[v] = int(bp[tuple(choice[x] for x in dep)]) if dep else int(bp)
    return [int(graph.kept[v][c]) for v, c in enumerate(choice)]


# ---------------------------------------------------------------------------------------------
# The solver


class DynamicProgramming:
    """Exact vertex elimination; refuses problems whose tables would not fit the memory cap.

    With a usage limit, the DP solves the problem without it: an optimum that meets the limit is
    the optimum (OPTIMAL); otherwise the status is NO_SOLUTION with the DP optimum as a proven
    lower bound. Tables are float64: with integer costs whose sums can pass 2**53
    (:attr:`~stratopt.StrategyProblem.largest_total`) the minimum is FEASIBLE with
    ``Limit.PRECISION`` and a bound lowered by the worst accumulated rounding, never OPTIMAL.
    ``time_limit`` is checked between eliminations: past it the status is NO_SOLUTION with
    ``Limit.TIME``.

    Examples
    --------
    >>> from stratopt import StrategyProblem, solve
    >>> p = StrategyProblem([[3, 1], [0, 2], [1, 1]], [(0, 1), (1, 2)], [[[0, 9], [9, 0]], [[0, 1], [1, 0]]])
    >>> r = solve(p, "dp")
    >>> r.status.value, r.assignment, r.objective, r.stats["width"]
    ('optimal', (0, 0, 0), 4, 1)

    References
    ----------
    V. Elango, "Pase: Parallelization strategies for efficient dnn training", IPDPS 2021
    (seeds 000-002); Z. Jia et al., "Exploring hidden dimensions in parallelizing convolutional
    neural networks" (OptCNN), ICML 2018, for the node and edge eliminations.
    """

    name = "dp"
    exact = True

    def solve(
        self,
        problem: StrategyProblem,
        *,
        time_limit: float | None = None,
        seed: int | None = None,
        ordering: str = "auto",
        memory_cap: int | None = None,
    ) -> Result:
        t0 = time.perf_counter()
        deadline = None if time_limit is None else t0 + time_limit
        cap_bytes = default_memory_cap() if memory_cap is None else int(memory_cap)
        if ordering != "auto" and ordering not in ORDERINGS:
            raise ModelError(f"unknown ordering {ordering!r}; choose from auto, {', '.join(ORDERINGS)}")
        graph = _Graph.from_problem(problem)
        choices_before = sum(graph.k)
        pruned = graph.prune()
        alive = set(range(problem.num_vertices))
        graph.prepass(alive)
        core = {v: set(graph.adj[v]) for v in sorted(alive)}
        stats: dict[str, Any] = {
            "choices_pruned": pruned,
            "choices_before": choices_before,
            "prepass_eliminated": problem.num_vertices - len(core),
            "core_vertices": len(core),
            "prepass_seconds": round(time.perf_counter() - t0, 6),
        }
        candidates = [ordering] if ordering != "auto" else list(ORDERINGS)
        if ordering == "auto" and len(core) > _MIN_FILL_CORE:
            candidates.remove("min-fill")  # its fill counts are quadratic in the degree of hubs
        cap_entries = cap_bytes // 8
        plans = [p for name in candidates if (p := plan(core, graph.k, name, cap_entries=cap_entries)) is not None]
        if not plans:
            probes = [plan(core, graph.k, name) for name in candidates] if len(core) <= 400 else []
            probe = min((p for p in probes if p is not None), key=lambda p: p.total_entries, default=None)
            detail = (
                f"the {probe.ordering} order needs {probe.total_entries:.3g} table entries (largest "
                f"{probe.largest_table:.3g}, width {probe.width})"
                if probe is not None
                else f"every order tried ({', '.join(candidates)}) passes {cap_entries:.3g} table entries"
            )
            raise UnsupportedProblemError(
                f"dp: the tables would not fit the memory cap of {cap_bytes / 2**30:.2f} GiB: {detail} "
                f"on {len(core)} vertices left after the exact pre-pass; use solver 'greedy', or raise memory_cap"
            )
        best = min(plans, key=lambda p: (p.total_entries, ORDERINGS.index(p.ordering)))
        stats.update(
            ordering=best.ordering,
            orderings_tried={p.ordering: p.total_entries for p in plans},
            estimated_bytes=best.bytes_estimate,
        )
        try:
            _eliminate(graph, best.order, deadline)
        except _OutOfTime:
            stats["seconds"] = round(time.perf_counter() - t0, 6)
            return Result(self.name, Status.NO_SOLUTION, limit=Limit.TIME, stats=stats)
        assignment = _recover(graph, problem.num_vertices)
        stats.update(
            width=graph.width,
            largest_table=best.largest_table,
            total_table_entries=best.total_entries,
            seconds=round(time.perf_counter() - t0, 6),
        )
        value = graph.constant
        if not math.isfinite(value):
            stats["proof"] = "every assignment uses a forbidden entry"
            return Result(self.name, Status.INFEASIBLE, stats=stats)
        bound: int | float = round(value) if problem.is_integral and abs(value) < 2**53 else value
        inexact = problem.is_integral and problem.largest_total >= 2**53
        if inexact:
            # Each table entry is a float64 sum of at most one term per vertex and per edge.
            slack = (problem.num_vertices + problem.num_edges) * math.ulp(problem.largest_total)
            bound = math.floor(value - slack)
            stats["precision"] = f"integer sums reach {problem.largest_total:.3g} > 2**53: float64 tables round"
        ev = evaluate(problem, assignment)
        if ev.feasible and inexact:
            return Result(
                self.name, Status.FEASIBLE, tuple(assignment), bound=bound, limit=Limit.PRECISION, stats=stats
            )
        if ev.feasible:
            return Result(self.name, Status.OPTIMAL, assignment=tuple(assignment), stats=stats)
        stats["relaxed_violation"] = ev.violation
        stats["relaxed_assignment"] = assignment
        return Result(self.name, Status.NO_SOLUTION, bound=bound, limit=Limit.OTHER, stats=stats)
