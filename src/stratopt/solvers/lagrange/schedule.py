"""The weight schedule: which weight vector each run gets and for how long.

Answer runs narrow each vertex's weight between the highest that broke the limit in its interval and
the lowest that kept it (:class:`Weights`), spread along the golden-ratio sequence; every
:data:`EXPLOIT`-th answer run shakes the best answer's weights instead. After every
``BOUND_EVERY - 1`` answer runs comes a run for the bound, at the slot prices of the ascent
(:class:`~stratopt.solvers.lagrange.bound.Level`); once a relaxation's prices have come, the next
run and every :data:`PRICED_EVERY`-th after it (by default every run).
"""

from __future__ import annotations

import math

import numpy as np

from stratopt.solvers.lagrange.bound import Level
from stratopt.solvers.lagrange.model import PenaltyModel

#: Every this many runs, the weights of the best answer so far run again, each multiplied by
#: exp(N(0, SHAKE)), with a new toulbar2 seed. On IOPDDL S, with the reduced network, the same
#: weights with another seed changed the answer by up to 5%: every 2nd run ended S at 1.016x and
#: 1.007x the best submitted cost (two seeds), every 4th at 1.035x.
EXPLOIT = 2
SHAKE = 0.15

#: One run in this many is a run for the bound (slot prices), after BOUND_EVERY - 1 answer runs.
#: Where toulbar2 does not prove its runs' optima, a step of the ascent only needs toulbar2's root
#: bound and a first answer, so these runs get 1 / BOUND_FRACTION of the time (doubled after one
#: that found nothing). On IOPDDL S, 19 such 6 s runs in a row raise the bound from the floor
#: (2,738) to 1.29e9 (84% of the best submitted cost).
BOUND_EVERY = 4
BOUND_FRACTION = 3

#: Once a relaxation's slot prices have come (:meth:`Schedule.priced`), one run in this many is a
#: bound run, the first of them the next run. At those prices toulbar2's answers, repaired and
#: merged, were the searches' best: on the seed-17 copy of IOPDDL K (contest limit, 2 cores) the
#: message bound's prices came at 91 s and the two bound runs after them found 2.52e9 and 2.27e9
#: against 2.54-2.97e9 from every answer run; on U's copy they came at 143 s and the first bound
#: run at them started 100 s later (four 20 s runs apart). One search each on the copies, from one
#: bound run in 4 to the next run and one in 2 (the answer runs between them shaken from the best
#: answer's weights) and to every run: K ended at 0.999x, 0.971x and 0.956x the best submitted
#: cost, U at 0.938x, 0.890x and 0.899x; R at 1.011x with one in 2 (its shaken answer runs broke
#: the limit at 9-10k vertices, the bound runs at 3-7k) and 0.964x with every run.
PRICED_EVERY = 1

#: A bound run gets at least this many times the first run's seconds to its first backtrack
#: (within the length by size): a shorter one ends before toulbar2's first answer (U's copy:
#: 6.7 s bound runs, 7.7 s to the first backtrack, and its first bound run at the message bound's
#: prices found nothing).
FIRST_ANSWER_FACTOR = 1.5


class Weights:
    """Per-vertex bisection in log space between the highest weight whose run broke the limit
    in the vertex's interval (``low``) and the lowest whose run kept it there (``high``)."""

    def __init__(self, model: PenaltyModel, unit: float) -> None:
        self.model = model
        self.unit = unit
        self.low = np.zeros(model.n)
        self.high = np.full(model.n, np.inf)

    def propose(self, f: float) -> np.ndarray:
        """Weights for a run; ``f`` in (0, 1) places them between the bounds (or, where a bound is
        missing, how far to step beyond the other)."""
        low, high = self.low, self.high
        both = (low > 0) & np.isfinite(high)
        w = np.where(both, low ** (1 - f) * np.where(both, high, 1.0) ** f, 0.0)
        only_low = (low > 0) & ~np.isfinite(high)
        w = np.where(only_low, low * 10.0 ** (0.5 + f), w)
        only_high = (low == 0) & np.isfinite(high)
        w = np.where(only_high, high / 10.0 ** (0.5 + f), w)
        none = (low == 0) & ~np.isfinite(high)
        w = np.where(none, self.unit * 10.0 ** (4 * f - 2), w)
        w = np.minimum(w, self.model.weight_cap)
        return np.where(self.model.relevant, w, 0.0)

    def learn(self, weights: np.ndarray, broken: np.ndarray) -> None:
        rel = self.model.relevant
        up = rel & broken
        self.low[up] = np.maximum(self.low[up], weights[up])
        down = rel & ~broken
        self.high[down] = np.minimum(self.high[down], weights[down])
        # Runs are heuristic: a weight that broke may lie above one that kept. Trust the newest,
        # and keep a narrow bracket around it (a factor of two) rather than forgetting the other side.
        clash = rel & (self.low >= self.high)
        self.low[clash & up] = weights[clash & up]
        self.high[clash & up] = 2.0 * weights[clash & up]
        self.high[clash & down] = weights[clash & down]
        self.low[clash & down] = 0.5 * weights[clash & down]


class Schedule:
    """The runs in order: each one's weights (and, for a bound run, its slot prices) and seconds.

    Answer runs (narrowing and exploiting) count on their own: the bound runs come between them,
    so the answer runs' sequence is the same with or without them.
    """

    def __init__(
        self,
        model: PenaltyModel,
        weights: Weights,
        ascent: Level,
        rng: np.random.Generator,
        seconds: float,
        has_limit: bool,
    ) -> None:
        self.model = model
        self.weights = weights
        self.ascent = ascent
        self.rng = rng
        self.seconds = seconds
        self.has_limit = has_limit
        self.answers = 0
        self.since_bound = 0
        self.every = BOUND_EVERY  # one run in this many is a bound run
        # Seconds of the bound runs where toulbar2 does not prove its runs (see BOUND_FRACTION),
        # from the run length by size: shorter answer runs (time_runs) leave them as they are.
        self.by_size = seconds
        self.short = max(2.0, seconds / BOUND_FRACTION)

    def next(self, best_weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """The next run's weights, and its slot prices when it is a bound run (else None)."""
        model = self.model
        if not self.has_limit:
            return np.zeros(model.n), None
        # After every BOUND_EVERY - 1 answer runs, a run of the slot prices of the bound's
        # ascent: weights that a price per slot covers exactly, so that its Lagrangian value
        # is as high as those prices allow (capped weights stay covered: a lower weight only
        # lowers the bound). In place of an answer run instead, they ended IOPDDL S at
        # 1.028-1.035x three times (1.007-1.023x without them).
        if best_weights is not None and self.since_bound >= self.every - 1:
            self.since_bound = 0
            lam = self.ascent.next_prices()
            return np.minimum(self.ascent.weights(lam), model.weight_cap), lam
        i = self.answers
        self.answers += 1
        self.since_bound += 1
        # Every EXPLOIT-th run tries the weights of the best answer so far, each shaken by a
        # random factor, with a new toulbar2 seed.
        if best_weights is not None and i % EXPLOIT == EXPLOIT - 1:
            return np.minimum(best_weights * np.exp(self.rng.normal(0.0, SHAKE, model.n)), model.weight_cap), None
        # Spread the runs: the golden-ratio sequence fills (0, 1) evenly whatever the count.
        f = (0.5 + i * 0.6180339887) % 1.0 if i else 0.5
        return self.weights.propose(min(max(f, 0.05), 0.95)), None

    def run_seconds(self, lam: np.ndarray | None, proving: bool, left: float, timed: bool) -> int:
        """toulbar2's whole seconds for a run: a bound run gets the short time unless the runs
        prove their optima; without a usage limit and with a deadline the one run gets all of it
        (less a second to answer)."""
        own = self.seconds if lam is None or proving else self.short
        return max(1, int(min(own if self.has_limit or not timed else math.inf, left - 1.0)))

    def time_runs(self, seconds: float) -> None:
        """Every later answer run gets ``seconds``. The bound runs keep theirs: their value is
        toulbar2's dual bound, which TRW-S raises with time (IOPDDL M's gap went from 3.4% to
        10-13% when they shrank with the answer runs)."""
        self.seconds = seconds

    def priced(self) -> None:
        """A relaxation's slot prices have come (the ascent starts from them): the next run is a
        bound run at them, and from here on one in :data:`PRICED_EVERY`."""
        self.every = min(self.every, PRICED_EVERY)
        self.since_bound = max(self.since_bound, self.every - 1)

    def first_answer(self, seconds: float) -> None:
        """The first run reached its first backtrack in ``seconds``: the bound runs get at least
        :data:`FIRST_ANSWER_FACTOR` times that (within the length by size)."""
        self.short = max(self.short, min(self.by_size, FIRST_ANSWER_FACTOR * seconds))

    def found_nothing(self) -> None:
        """A bound run too short to find the answer the ascent steps from: the next ones get twice as long."""
        self.short = min(self.by_size, 2 * self.short)
