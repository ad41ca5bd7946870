"""The lower bound: the Lagrangian dual over slot prices.

For prices ``lam_t >= 0`` on the time slots, any assignment that keeps the limit costs at least
``min_x [cost(x) + sum_t lam_t (load_t(x) - limit)]``. A run whose vertex weights are covered by
the prices (``sum over the slots of v's interval >= w_v``) bounds that minimum from below through
toulbar2's dual bound on the penalised problem (:meth:`PenaltyModel.dual_value`). The bound runs'
prices move by projected subgradient ascent (:class:`Ascent`: Polyak steps towards the best cost
known, the step factor halved after two runs without progress).
"""

from __future__ import annotations

import math

import numpy as np

from stratopt.problem import StrategyProblem
from stratopt.solvers.lagrange.model import PenaltyModel
from stratopt.solvers.local_search import LocalEngine


class Ascent:
    """Slot prices for the bound runs, moved by projected subgradient steps on the Lagrangian dual."""

    def __init__(self, model: PenaltyModel, engine: LocalEngine) -> None:
        problem = engine.problem
        self.model = model
        self.engine = engine
        self.limit = float(problem.usage_limit or 0)
        self.prices = np.zeros(len(model.room))
        if engine.has_limit:
            self.start, self.end = problem.time_slots[1], problem.time_slots[2]
        else:
            self.start, self.end = model.k, model.k
        self.theta = 1.0
        self.best = -math.inf
        self.stalls = 0
        self.runs = 0

    def start_from(self, prices: np.ndarray) -> None:
        """Move the prices to ``prices`` (the relaxation's, which its usage rows' duals give) with
        a fresh step factor: the next bound run evaluates the Lagrangian there."""
        self.prices = np.asarray(prices, dtype=np.float64).copy()
        self.theta, self.stalls = 1.0, 0

    def weights(self, prices: np.ndarray) -> np.ndarray:
        """The vertex weights those prices cover exactly (:meth:`PenaltyModel.weights_of`)."""
        return self.model.weights_of(prices, self.start, self.end)

    def learn(self, lam: np.ndarray, a: np.ndarray, run_bound: float, best_cost: float) -> None:
        """A bound run at prices ``lam`` answered ``a`` with Lagrangian value ``run_bound``: step
        the prices along the subgradient (each slot's load less the limit) towards ``best_cost``."""
        self.runs += 1
        if run_bound > self.best:
            self.best, self.stalls = run_bound, 0
        else:
            self.stalls += 1
            if self.stalls >= 2:
                self.theta, self.stalls = self.theta / 2, 0
        g = self.engine.profile(a).astype(np.float64) - self.limit
        move = (lam > 0) | (g > 0)
        norm = float(g[move] @ g[move])
        if norm > 0 and math.isfinite(best_cost):
            self.prices = np.maximum(0.0, lam + self.theta * (best_cost - run_bound) / norm * g)


def round_down(problem: StrategyProblem, bound: float) -> float | int:
    """The bound less a margin for float error. With integer costs the optimum is an integer at
    least the true bound, hence at least its ceiling: that is the bound integer problems get."""
    safe = bound - 1e-9 * max(1.0, abs(bound))
    return math.ceil(safe) if problem.is_integral else safe
