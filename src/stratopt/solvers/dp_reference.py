"""PaSE's earlier table algorithm (seeds 001 and 002), written as the seeds state it.

It is slow on purpose, plain Python over explicit sub-strategies, so that it shares no code
with :mod:`stratopt.solvers.dp` and can cross-check it on small graphs:

1. every vertex gets a table of all sub-strategies of itself and its neighbours;
2. repeatedly take the unprocessed vertex with the fewest unprocessed neighbours, partition its
   table by its neighbours' configurations, keep the cheapest entry of each part, and restrict
   each neighbour's table to entries that agree with a kept entry on their common vertices;
3. join all tables into the valid strategies (ValidStrategies) and return the cheapest.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

from stratopt.errors import UnsupportedProblemError
from stratopt.problem import FORBIDDEN, StrategyProblem, evaluate
from stratopt.solvers.base import Limit, Result, Status

__all__ = ["ReferenceDP"]

#: Refuse a problem if a vertex's initial table would have more entries than this.
MAX_TABLE = 100_000

_UNSET = -1


class ReferenceDP:
    """Seeds 001/002's FindOptStrategy; for small graphs only (tables of at most MAX_TABLE entries).

    References
    ----------
    V. Elango, PaSE (IPDPS 2021), earlier version of the algorithm (seeds 001 and 002).

    Examples
    --------
    >>> from stratopt import StrategyProblem, solve
    >>> p = StrategyProblem([[3, 1], [0, 5], [1, 1]], [(0, 1), (1, 2)], [[[0, 9], [9, 0]], [[0, 1], [1, 0]]])
    >>> r = solve(p, "dp-reference")
    >>> r.status.value, r.assignment, r.objective
    ('optimal', (0, 0, 0), 4)
    """

    name = "dp-reference"
    exact = True

    def solve(self, problem: StrategyProblem, *, time_limit: float | None = None, seed: int | None = None) -> Result:
        deadline = None if time_limit is None else time.perf_counter() + time_limit
        n = problem.num_vertices
        k = problem.num_choices.tolist()
        node = [[_cost(x) for x in problem.node_cost(v).tolist()] for v in range(n)]
        edges = problem.edges.tolist()
        edge = [[_cost(x) for x in problem.edge_cost(e).ravel().tolist()] for e in range(len(edges))]
        nbrs: list[set[int]] = [set() for _ in range(n)]
        for u, v in edges:
            nbrs[u].add(v)
            nbrs[v].add(u)

        def cost(s: tuple[int, ...]) -> float:
            """Cost(G, s) of a sub-strategy: its vertices' costs and the edges inside it."""
            total = sum(node[v][c] for v, c in enumerate(s) if c != _UNSET)
            for e, (u, v) in enumerate(edges):
                if s[u] != _UNSET and s[v] != _UNSET:
                    total += edge[e][s[u] * k[v] + s[v]]
            return total

        # Line 12: v.tbl = all combinations of the configurations of {v} and its neighbours.
        tables: list[list[tuple[int, ...]]] = []
        for v in range(n):
            scope = sorted(nbrs[v] | {v})
            size = math.prod(k[x] for x in scope)
            if size > MAX_TABLE:
                raise UnsupportedProblemError(
                    f"dp-reference: vertex {problem.vertex_label(v)} would start with a table of {size} "
                    f"sub-strategies (more than {MAX_TABLE}); it is a cross-check for small graphs, use 'dp'"
                )
            tables.append([_partial(n, scope, combo) for combo in itertools.product(*(range(k[x]) for x in scope))])

        unprocessed_nbrs = [set(nb) for nb in nbrs]
        remaining = set(range(n))
        while remaining:
            if deadline is not None and time.perf_counter() > deadline:
                return Result(self.name, Status.NO_SOLUTION, limit=Limit.TIME)
            # Line 17: least unprocessed neighbours first; ties to the lowest index.
            vmin = min(remaining, key=lambda v: (len(unprocessed_nbrs[v]), v))
            around = sorted(nbrs[vmin])
            # Lines 19-25: partition by the neighbours' configurations (IsCompatible on
            # v_min.neighbors) and keep the cheapest entry of each part (the first on ties).
            best: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {}
            for entry in tables[vmin]:
                key = tuple(entry[x] for x in around)
                c = cost(entry)
                if key not in best or c < best[key][0]:
                    best[key] = (c, entry)
            tables[vmin] = [entry for _, entry in best.values()]
            # Lines 26-31: restrict each neighbour's table to entries that agree with a kept
            # entry of v_min on common = (N(v_min) & N(v)) | {v_min, v}.
            for v in around:
                common = sorted((nbrs[vmin] & nbrs[v]) | {vmin, v})
                kept = {tuple(entry[x] for x in common) for entry in tables[vmin]}
                tables[v] = [entry for entry in tables[v] if tuple(entry[x] for x in common) in kept]
                unprocessed_nbrs[v].discard(vmin)
            remaining.discard(vmin)

        strategies = _valid_strategies(tables, n)
        if not strategies:
            return Result(self.name, Status.INFEASIBLE, stats={"valid_strategies": 0})
        value, assignment = min((cost(s), s) for s in strategies)
        stats: dict[str, Any] = {"valid_strategies": len(strategies)}
        if not math.isfinite(value):
            stats["proof"] = "every valid strategy uses a forbidden entry"
            return Result(self.name, Status.INFEASIBLE, stats=stats)
        if evaluate(problem, assignment).feasible:
            return Result(self.name, Status.OPTIMAL, assignment=assignment, stats=stats)
        bound = round(value) if problem.is_integral else value
        return Result(self.name, Status.NO_SOLUTION, bound=bound, limit=Limit.OTHER, stats=stats)


def _cost(x: float) -> float:
    return math.inf if x >= FORBIDDEN else x


def _partial(n: int, scope: list[int], combo: tuple[int, ...]) -> tuple[int, ...]:
    s = [_UNSET] * n
    for x, c in zip(scope, combo, strict=True):
        s[x] = c
    return tuple(s)


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Seeds' IsValid / IsCompatible: no vertex set in both with different configurations.

    Seed 002 prints ``return false`` on both branches of IsValid, which would reject every pair;
    we read the final return as ``true``, as seed 001's IsCompatible has it.
    """
    return all(x in (y, _UNSET) or y == _UNSET for x, y in zip(a, b, strict=True))


def _valid_strategies(tables: list[list[tuple[int, ...]]], n: int) -> list[tuple[int, ...]]:
    """Seed 001's ValidStrategies: join every vertex's table, keeping compatible unions."""
    joined: list[tuple[int, ...]] = [tuple([_UNSET] * n)]
    for table in tables:
        merged = {
            tuple(x if x != _UNSET else y for x, y in zip(s, t, strict=True))
            for s in joined
            for t in table
            if _compatible(s, t)
        }
        joined = sorted(merged)
    return joined
