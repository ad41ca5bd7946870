"""Large-neighbourhood search: re-solve a window of vertices exactly with the DP.

Everything outside the window keeps its choice; the window becomes a small StrategyProblem
whose node costs include the edges to the fixed outside, and the exact DP solves it. A result
that lowers the true cost and keeps the usage limit replaces the window's choices, so the
search never gets worse. Windows are breadth-first balls around a random vertex; their size
adapts: it shrinks when the DP refuses a window (too wide) and grows while nothing improves.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stratopt.errors import UnsupportedProblemError
from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers.base import Status
from stratopt.solvers.dp import DynamicProgramming
from stratopt.solvers.local_search import LocalEngine

__all__ = ["WindowSearch"]

_WINDOW_MEMORY = 64 << 20  # bytes the DP may use for one window


class WindowSearch:
    """Exact window moves over an assignment of ``engine.problem``."""

    def __init__(self, engine: LocalEngine, rng: np.random.Generator, size: int = 24, max_size: int = 400) -> None:
        self.engine = engine
        self.rng = rng
        self.size = size
        self.max_size = max_size
        problem = engine.problem
        self.incident: list[list[tuple[int, int, bool]]] = [[] for _ in range(engine.n)]
        for e, (u, v) in enumerate(problem.edges.tolist()):
            self.incident[u].append((e, v, True))
            self.incident[v].append((e, u, False))
        self.dp = DynamicProgramming()
        self.tried = self.improved = self.refused = 0

    def _window(self) -> list[int]:
        start = int(self.rng.integers(self.engine.n))
        seen = {start}
        frontier = [start]
        while frontier and len(seen) < self.size:
            nxt = []
            for v in frontier:
                others = [w for _, w, _ in self.incident[v] if w not in seen]
                self.rng.shuffle(others)
                for w in others:
                    if len(seen) >= self.size:
                        break
                    if w not in seen:
                        seen.add(w)
                        nxt.append(w)
            frontier = nxt
        return sorted(seen)

    def step(
        self,
        a: np.ndarray,
        cost: float,
        limit_check: Callable[[np.ndarray], bool],
        penalty: np.ndarray | None = None,
    ) -> tuple[np.ndarray, float]:
        """One window move; returns the (possibly unchanged) assignment and its cost."""
        eng = self.engine
        k = eng.k
        problem = eng.problem
        eoff = problem.edge_offsets
        fwd = eng.edge[: len(eng.edge) // 2]
        window = self._window()
        index = {v: i for i, v in enumerate(window)}
        unary = []
        pairs, mats = [], []
        for v in window:
            row = eng.node[eng.off[v] : eng.off[v + 1]].copy()
            if penalty is not None:
                row += penalty[v] * eng.usage[eng.off[v] : eng.off[v + 1]]
            for e, w, v_is_u in self.incident[v]:
                block = fwd[eoff[e] : eoff[e + 1]]
                if w in index:
                    if v_is_u:
                        pairs.append((index[v], index[w]))
                        mats.append(block.reshape(k[v], k[w]))
                    continue
                row += block.reshape(k[v], k[w])[:, a[w]] if v_is_u else block.reshape(k[w], k[v])[a[w]]
            unary.append(row)
        self.tried += 1
        sub = StrategyProblem(unary, pairs, mats)
        try:
            res = self.dp.solve(sub, memory_cap=_WINDOW_MEMORY)
        except UnsupportedProblemError:
            self.refused += 1
            self.size = max(4, int(self.size * 0.8))
            return a, cost
        if res.status is not Status.OPTIMAL or res.assignment is None:
            return a, cost
        old_local = a[window]
        if evaluate(sub, res.assignment).objective >= evaluate(sub, old_local).objective:
            self.size = min(self.max_size, self.size + 1)
            return a, cost
        candidate = a.copy()
        candidate[window] = res.assignment
        new_cost = eng.total_cost(candidate)
        if new_cost < cost and limit_check(candidate):
            self.improved += 1
            return candidate, new_cost
        self.size = min(self.max_size, self.size + 1)
        return a, cost
