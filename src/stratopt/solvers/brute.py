"""Exhaustive enumeration: the reference every other solver is checked against."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from stratopt.errors import UnsupportedProblemError
from stratopt.problem import FORBIDDEN, StrategyProblem
from stratopt.solvers.base import Limit, Result, Status

__all__ = ["DEFAULT_MAX_STRATEGIES", "SMALL_SPACE", "BruteForce"]

#: Refuse problems with more complete assignments than this unless told otherwise.
DEFAULT_MAX_STRATEGIES = 2_000_000

#: Problems with at most this many assignments are small enough that ``auto`` proves them by
#: enumeration and ``compare`` adds brute force to its default solvers (a second or two here).
SMALL_SPACE = 100_000

_CHUNK = 1 << 15


class BruteForce:
    """Enumerate every assignment in lexicographic order and keep the first cheapest feasible one.

    Ties go to the lexicographically smallest assignment. Forbidden entries (cost >= 1e17 or
    +inf) exclude an assignment; so does exceeding the usage limit at any time.

    Examples
    --------
    >>> from stratopt import StrategyProblem, load_problem, solve
    >>> r = solve(load_problem("example"), "brute")
    >>> r.status.value, r.assignment, r.objective
    ('optimal', (0, 0, 2, 1, 0), 445)
    """

    name = "brute"
    exact = True

    def solve(
        self,
        problem: StrategyProblem,
        *,
        time_limit: float | None = None,
        seed: int | None = None,
        max_strategies: int = DEFAULT_MAX_STRATEGIES,
    ) -> Result:
        total = problem.search_space_size
        if total > max_strategies:
            raise UnsupportedProblemError(
                f"brute force would enumerate {total:.3g} assignments, more than max_strategies="
                f"{max_strategies}; use another solver (for example 'greedy') or raise max_strategies"
            )
        deadline = None if time_limit is None else time.perf_counter() + time_limit
        k = problem.num_choices.tolist()
        n = len(k)
        strides = [1] * n
        for v in range(n - 2, -1, -1):
            strides[v] = strides[v + 1] * k[v + 1]

        exact_ints = problem.is_integral and _fits_int64(problem)
        dtype = np.int64 if exact_ints else np.float64
        node_tabs = [_split(problem.node_cost(v), dtype) for v in range(n)]
        edge_tabs = [_split(problem.edge_cost(e).ravel(), dtype) for e in range(problem.num_edges)]
        edges = problem.edges.tolist()
        usage_rows = _usage_rows(problem)

        best_cost: Any = None
        best_index = -1
        enumerated = 0
        for lo in range(0, total, _CHUNK):
            if deadline is not None and time.perf_counter() > deadline:
                break
            idx = np.arange(lo, min(total, lo + _CHUNK), dtype=np.int64)
            digits = [(idx // strides[v]) % k[v] for v in range(n)]
            cost = np.zeros(len(idx), dtype=dtype)
            ok = np.ones(len(idx), dtype=bool)
            for v in range(n):
                values, allowed = node_tabs[v]
                cost += values[digits[v]]
                ok &= allowed[digits[v]]
            for e, (u, w) in enumerate(edges):
                values, allowed = edge_tabs[e]
                flat = digits[u] * k[w] + digits[w]
                cost += values[flat]
                ok &= allowed[flat]
            for members, usage, limit in usage_rows:
                total_use = np.zeros(len(idx), dtype=usage[0].dtype)
                for v, use in zip(members, usage, strict=True):
                    total_use += use[digits[v]]
                ok &= total_use <= limit
            enumerated += len(idx)
            if ok.any():
                masked = np.where(ok, cost, np.iinfo(np.int64).max if exact_ints else np.inf)
                i = int(np.argmin(masked))
                if best_cost is None or masked[i] < best_cost:
                    best_cost, best_index = masked[i], lo + i

        stats = {"enumerated": enumerated, "search_space": total}
        finished = enumerated == total
        if best_index < 0:
            if finished:
                return Result(self.name, Status.INFEASIBLE, stats=stats)
            return Result(self.name, Status.NO_SOLUTION, limit=Limit.TIME, stats=stats)
        assignment = tuple((best_index // strides[v]) % k[v] for v in range(n))
        if finished:
            return Result(self.name, Status.OPTIMAL, assignment=assignment, stats=stats)
        return Result(self.name, Status.FEASIBLE, assignment=assignment, limit=Limit.TIME, stats=stats)


def _fits_int64(problem: StrategyProblem) -> bool:
    """Whether the sum of all allowed costs cannot overflow int64."""
    total = 0
    for flat in (problem.node_flat, problem.edge_flat):
        allowed = flat[flat < FORBIDDEN]
        if allowed.size:
            total += int(np.abs(allowed).max()) * allowed.size
    return total < 2**62


def _split(values: np.ndarray, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """(costs with forbidden entries zeroed, allowed mask)."""
    allowed = values < FORBIDDEN
    return np.where(allowed, values, 0).astype(dtype), allowed


def _usage_rows(problem: StrategyProblem) -> list[tuple[list[int], list[np.ndarray], Any]]:
    """One row per time slot whose live set is not contained in a neighbouring slot's."""
    if not problem.has_usage or problem.usage_limit is None:
        return []
    _, start, end = problem.time_slots
    rows = []
    live_sets: list[frozenset[int]] = []
    for slot in range(int(end.max(initial=0))):
        live_sets.append(frozenset(np.flatnonzero((start <= slot) & (end > slot)).tolist()))
    # A live set contained in another one gives a weaker row; keep only the maximal ones.
    maximal = [s for s in set(live_sets) if s and not any(s < t for t in live_sets)]
    for members in sorted(maximal, key=sorted):
        order = sorted(members)
        rows.append((order, [problem.usage(v) for v in order], problem.usage_limit))
    return rows
