"""The lower bound: the Lagrangian dual over slot prices.

For prices ``lam_t >= 0`` on the time slots, any assignment that keeps the limit costs at least
``min_x [cost(x) + sum_t lam_t (load_t(x) - limit)]``. A run whose vertex weights are covered by
the prices (``sum over the slots of v's interval >= w_v``) bounds that minimum from below through
toulbar2's dual bound on the penalised problem (:meth:`PenaltyModel.dual_value`). The bound runs'
prices move by a proximal level method (:class:`Level`), or, until an answer keeps the limit, by
projected subgradient ascent (:class:`Ascent`: Polyak steps towards the best cost known, the step
factor halved after two runs without progress).

The level method keeps a bundle of cuts: every assignment ``a`` the search evaluates (each run's
answer, each repair) bounds the dual function from above, ``L(lam) <= cost(a) + lam . (E(a) -
room)`` (``E``: the penalised usage per slot), so their least is a concave piecewise-linear model of
``L`` that no run can be above. Its maximum ``f_up`` over ``lam >= 0`` (a linear programme; bounded
once some answer keeps the limit, whose cut falls in every price) caps what the dual can prove, the
best run's value ``f_low`` is proven; the next prices are the projection of the best run's prices
(the centre) onto the level set ``{model >= f_low + 0.71 (f_up - f_low)}`` (Lemarechal, Nemirovskii
and Nesterov's level; a small quadratic programme, solved through its dual over the cuts). Steps
therefore go as far as the model allows and no further, where Polyak's creep (IOPDDL V: 65 bound
runs, still rising). Every bound stays a run's own proven value: the method only picks where to
look.

The runs are inexact oracles: toulbar2 may stop before its optimum, proving less than its answer
costs at those prices. Then the answer's cut need not cut the run's prices off the level set, and
the projection sends the next run back to the same prices: on IOPDDL M the same bound run came four
times in a row. Where the cuts' model at the run's prices still reaches the next level (an exact
run's cut there is its own value, below it), the next prices come from Polyak's step along that
answer's overflow instead (``scripts/bench_level_stall.py``).
"""

from __future__ import annotations

import math

import numpy as np

from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers.lagrange.model import PenaltyModel, interval_sum
from stratopt.solvers.local_search import LocalEngine

#: The level's place between the best run's value (0) and the model's maximum (1).
LEVEL = 0.71
#: Cuts kept at most: past it, the loosest at the centre is dropped (never the cheapest answer that keeps the limit).
BUNDLE = 64


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

    def next_prices(self) -> np.ndarray:
        """The prices the next bound run evaluates the Lagrangian at."""
        return self.prices.copy()

    def floor(self, value: float) -> None:
        """A run proved ``value`` (with its own weights): nothing to learn for Polyak's steps."""

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


class Level(Ascent):
    """Slot prices for the bound runs from a proximal level method over the cuts of every answer
    seen (see the module's docstring); Polyak steps (:class:`Ascent`) until some answer keeps the
    limit and bounds the model."""

    def __init__(self, model: PenaltyModel, engine: LocalEngine) -> None:
        super().__init__(model, engine)
        self.slots = len(model.room)
        self.constants: list[float] = []
        self.slopes: list[np.ndarray] = []
        self.centre = self.prices.copy()
        self.ceiling = math.inf  # the model's maximum at the last step: the dual cannot exceed it
        self.levels = 0
        self.low = -math.inf  # the best value any run proved
        self.fresh = False  # cuts came in since the prices were last chosen
        self.hold = False  # the prices are a Polyak step out of a stall: kept until the next run
        self.stalled = 0  # bound runs whose answer's cut left their prices on the level set

    def start_from(self, prices: np.ndarray) -> None:
        super().start_from(prices)
        self.centre = self.prices.copy()

    def cut(self, a: np.ndarray, cost: float | None = None) -> None:
        """Add assignment ``a``'s cut: its cost (``cost``, where known) plus the prices times its
        penalised usage per slot less the room there."""
        model = self.model
        if not self.engine.has_limit or not model.relevant.any():
            return
        flat = self.model.node_off[:-1] + np.asarray(a, dtype=np.int64)
        excess = model.excess[flat]  # zero for the vertices never penalised
        used = interval_sum(excess, self.start, self.end, self.slots)
        if cost is None:
            cost = float(evaluate(self.engine.problem, tuple(int(x) for x in a)).objective)
        self.fresh = True
        self.constants.append(float(cost))
        self.slopes.append(used - model.room)
        if len(self.constants) > BUNDLE:
            at = np.asarray([c + float(g @ self.centre) for c, g in zip(self.constants, self.slopes, strict=True)])
            keeps = np.asarray([not (g > 0).any() for g in self.slopes])  # answers that keep the limit
            cheapest = int(np.argmin(np.where(keeps, self.constants, np.inf))) if keeps.any() else -1
            at[cheapest] = -np.inf  # the cheapest of those bounds the model: never dropped
            drop = int(np.argmax(at))  # else the loosest at the centre
            del self.constants[drop], self.slopes[drop]

    def floor(self, value: float) -> None:
        self.low = max(self.low, value)

    def next_prices(self) -> np.ndarray:
        """The level step from the cuts as they are now (answer runs and repairs add cuts between
        the bound runs), or the last prices where nothing new came in or the model is unbounded."""
        if self.fresh and not self.hold:
            step = self._level_step(max(self.best, self.low))
            self.fresh = False
            if step is not None:
                self.prices = step
        return self.prices.copy()

    def learn(self, lam: np.ndarray, a: np.ndarray, run_bound: float, best_cost: float) -> None:
        improved = run_bound > self.best
        self.cut(a)
        if improved:
            self.centre = np.asarray(lam, dtype=np.float64).copy()
        self.low = max(self.low, run_bound)
        low = max(self.best, run_bound, self.low)
        step = self._level_step(low)
        self.hold = False
        if step is not None and self._on_level(lam, low):
            # An inexact run: toulbar2 proved less than its answer's penalised cost, so that
            # answer's cut leaves ``lam`` on the level set and the projection would send the next
            # run back to the same prices (IOPDDL M: the same bound run four times). Polyak's step
            # along the answer's overflow leaves it instead.
            self.stalled += 1
            step = None
            self.hold = True
        if step is None:  # the model is not bounded yet, or stalled: Polyak's step
            super().learn(lam, a, run_bound, best_cost)
            return
        self.runs += 1
        self.best = max(self.best, run_bound)
        self.prices = step
        self.fresh = False

    def _on_level(self, lam: np.ndarray, low: float) -> bool:
        """Whether the cuts' model at ``lam`` still reaches the level of the next step, so that the
        projection would return ``lam`` itself (with an exact run it cannot: the run's own cut at
        ``lam`` is the value it proved, at most the best proven, below the level)."""
        if not math.isfinite(self.ceiling) or self.ceiling - low <= 1e-9 * max(1.0, abs(self.ceiling)):
            return False
        at = min(k + float(g @ lam) for k, g in zip(self.constants, self.slopes, strict=True))
        level = LEVEL * self.ceiling + (1 - LEVEL) * low
        return at >= level - 1e-9 * max(1.0, abs(level))

    def _level_step(self, low: float) -> np.ndarray | None:
        """The centre projected onto the level set of the cuts' model, or None where the model's
        maximum is unbounded (no answer keeping the limit yet) or cannot be found."""
        if not self.constants or not math.isfinite(low):
            return None
        k = np.asarray(self.constants)
        g = np.vstack(self.slopes)
        # A slot that no cut's answer overloads (every slope there at most 0) and where the centre
        # has no price keeps the price 0 in both problems below (raising it lowers every cut, and
        # the projection's prices there are max(0, 0 + a sum of those slopes)): both are solved
        # over the other slots alone (IOPDDL D: about 36k slots, two steps of 1-3 s each in the
        # search's own process, past its deadline at the end).
        live = (g > 0).any(axis=0) | (self.centre > 0)
        g = g[:, live]
        # Slots whose slopes are the same in every cut act as one in the model's maximum (its
        # value depends on their prices' sum alone): one column each (D: 22k columns, 9k distinct).
        top = _model_maximum(k, np.unique(g, axis=1))
        if top is None:
            return None
        value, _ = top
        self.ceiling = value
        if value - low <= 1e-9 * max(1.0, abs(value)):
            return self.centre.copy()
        self.levels += 1
        step = np.zeros_like(self.centre)
        step[live] = _project(self.centre[live], g, LEVEL * value + (1 - LEVEL) * low - k)
        return step


def _model_maximum(k: np.ndarray, g: np.ndarray) -> tuple[float, np.ndarray] | None:
    """``max over lam >= 0 of min_i k_i + g_i . lam`` and a maximiser (a linear programme), or None
    where it is unbounded or the solver fails."""
    from scipy.optimize import linprog

    m, s = g.shape
    # variables (lam, t): maximise t subject to t - g_i . lam <= k_i
    a_ub = np.hstack([-g, np.ones((m, 1))])
    cost = np.zeros(s + 1)
    cost[-1] = -1.0
    bounds = [(0, None)] * s + [(None, None)]
    out = linprog(cost, A_ub=a_ub, b_ub=k, bounds=bounds, method="highs")
    if out.status != 0 or out.x is None:
        return None
    return float(-out.fun), np.asarray(out.x[:s])


def _project(centre: np.ndarray, g: np.ndarray, need: np.ndarray) -> np.ndarray:
    """The point nearest ``centre`` with ``lam >= 0`` and ``g_i . lam >= need_i`` for every cut
    ``i``: through the dual over the cuts' multipliers ``mu >= 0``, whose best ``lam`` is
    ``max(0, centre + g^T mu)`` (a smooth concave function of ``mu``, maximised by L-BFGS-B)."""
    from scipy.optimize import minimize

    scale = max(1.0, float(np.abs(g).max(initial=0.0)))
    gs, need_s = g / scale, need / scale  # the same constraints, better conditioned

    def negated(mu: np.ndarray) -> tuple[float, np.ndarray]:
        lam = np.maximum(0.0, centre + gs.T @ mu)
        d = lam - centre
        value = 0.5 * float(d @ d) - float(mu @ (gs @ lam - need_s))
        return -value, -(need_s - gs @ lam)

    m = g.shape[0]
    out = minimize(negated, np.zeros(m), jac=True, method="L-BFGS-B", bounds=[(0, None)] * m)
    return np.maximum(0.0, centre + gs.T @ out.x)


def round_down(problem: StrategyProblem, bound: float) -> float | int:
    """The bound less a margin for float error. With integer costs the optimum is an integer at
    least the true bound, hence at least its ceiling: that is the bound integer problems get."""
    safe = bound - 1e-9 * max(1.0, abs(bound))
    return math.ceil(safe) if problem.is_integral else safe
