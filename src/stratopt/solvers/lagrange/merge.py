"""Solution merging: the best answer and another good one, re-solved together on the true costs.

Two good answers of the search agree on most vertices. Where they differ, each vertex may take
either one's value: toulbar2 solves that restricted problem (every other vertex kept) under
knapsack rows wherever their values could break the limit (few slots, and few vertices in each:
only those whose two values use differently), so the result keeps the limit. toulbar2 starts from
the better answer's cost as its upper bound, so it only looks for answers that cost no more. The
merge combines what each run got right: each run's answer is the best of one weight vector, and no
weight vector is right everywhere. :class:`Elite` keeps the best distinct answers and says which
pair to merge next (the best with the cheapest answer it has not absorbed).

On IOPDDL N (one search's feasible answers, 2 cores): the best answer, 1.019x the best submitted
cost, merged with the next (2,086 vertices differ) gave 1.008x, then with the third (6,574 differ)
0.989x, and after ten such merges 0.986x, each merge in 0.1-0.5 s.

References
----------
C. Blum, P. Pinacho, M. López-Ibáñez, J. A. Lozano, "Construct, Merge, Solve & Adapt: a new
general algorithm for combinatorial optimization", Computers & Operations Research 68 (2016):
the sub-instance made of the solution components that good answers use, solved exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stratopt.solvers.lagrange.model import PenaltyModel
from stratopt.solvers.lagrange.repair import polish, resolve_region
from stratopt.solvers.local_search import LocalEngine

#: Merges whose knapsack rows hold more terms than this are not tried whole. On IOPDDL N (2 cores)
#: the merges' rows held 0.8k-11k terms and each merge took 0.1-0.5 s; on K, whose usage stays near
#: the limit over thousands of slots, most held 400k-600k, and toulbar2 found nothing in 10 s (one
#: with 12.8k terms took 0.2 s). Such a merge is made in windows of time instead (:data:`WINDOWS`).
MERGE_MAX_TERMS = 100_000

#: A merge too large whole is split in two by time (the free vertices ordered by where their live
#: intervals start and end), each half merged in turn from the other's result, at most this many
#: times over (up to 2**WINDOWS windows).
WINDOWS = 4

#: How many distinct answers the elite pool keeps.
ELITE = 8


@dataclass(frozen=True)
class MergeJob:
    """A merge as a worker's job: the answers (one per row, the first the best), toulbar2's
    seconds and seed."""

    answers: np.ndarray
    seconds: float
    seed: int


@dataclass
class Merged:
    """A merge's outcome: the polished result (empty when toulbar2 found none that keeps the
    limit), how many vertices were free, the seconds it took, and the answers it was made from
    (their bytes, as :class:`Elite` knows them)."""

    fixed: list[np.ndarray]
    free: int
    seconds: float
    made_from: list[bytes]


def merge(
    model: PenaltyModel, engine: LocalEngine, answers: np.ndarray, seconds: float, seed: int
) -> np.ndarray | None:
    """The vertices where ``answers`` (integer usages, each within the limit, the first the
    cheapest) differ re-solved by toulbar2 on the true costs, each among the values the answers
    give it, every other vertex as they all have it, with a knapsack row at every slot where
    those values could break the limit: an assignment within the limit that costs no more than
    the first, or None when toulbar2 finds none in ``seconds``. Where the rows would hold more
    than :data:`MERGE_MAX_TERMS` terms, the merge is made in windows of time (:func:`_windowed`)."""
    assert engine.problem.usage_limit is not None
    base = answers[0]
    free = (answers != base).any(axis=0)
    if not free.any():
        return None
    return _windowed(model, engine, base, free, answers, seconds, seed, WINDOWS)


def _windowed(
    model: PenaltyModel,
    engine: LocalEngine,
    base: np.ndarray,
    free: np.ndarray,
    answers: np.ndarray,
    seconds: float,
    seed: int,
    splits: int,
) -> np.ndarray | None:
    """The merge of the ``free`` vertices from ``base``; where its rows hold too many terms and
    ``splits`` is left, the free vertices in two windows of time (their live intervals' starts and
    ends, in order), the earlier merged first and the later from its result, half the seconds each:
    the result of whichever window found one (None where neither did)."""
    limit = engine.problem.usage_limit
    slots = np.arange(len(engine.profile(base)))
    report: dict[str, int] = {}
    zero = np.zeros(engine.n)
    moved = resolve_region(
        model, engine, base, zero, free, seconds, seed, slots, answers, True, MERGE_MAX_TERMS, report
    )
    if moved is not None:
        return moved if engine.profile(moved).max(initial=0) <= limit else None
    if report.get("terms", 0) <= MERGE_MAX_TERMS or splits == 0:
        return None
    verts = np.flatnonzero(free)
    intervals = engine.problem.intervals
    assert intervals is not None
    order = verts[np.lexsort((intervals[verts, 1], intervals[verts, 0]))]
    current, found = base, False
    for half in (order[: len(order) // 2], order[len(order) // 2 :]):
        window = np.zeros_like(free)
        window[half] = True
        got = _windowed(model, engine, current, window, answers, seconds / 2.0, seed, splits - 1)
        if got is not None:
            current, found = got, True
    return current if found else None


def merge_job(model: PenaltyModel, engine: LocalEngine, job: MergeJob, budget: float | None) -> Merged:
    """A merge and the polish of its result (``budget``: seconds for both, from now)."""
    started = time.monotonic()
    deadline = math.inf if budget is None else started + budget
    seconds = min(job.seconds, deadline - started - 1.0)
    free = int((job.answers != job.answers[0]).any(axis=0).sum())
    merged = merge(model, engine, job.answers, seconds, job.seed) if seconds >= 1.0 else None
    fixed = [] if merged is None else [polish(model, engine, merged, lambda: deadline - time.monotonic())]
    return Merged(fixed, free, time.monotonic() - started, [a.tobytes() for a in job.answers])


class Elite:
    """The best distinct answers so far (at most :data:`ELITE`), each marked once the best has
    absorbed it (merged with it, or built from it).

    A merge's result that becomes the best keeps the marks and marks the answers it was made
    from: it holds what they held. An answer of a run that becomes the best clears them: the
    others hold what it lacks, and each is merged with it in turn.
    """

    def __init__(self, size: int = ELITE) -> None:
        self.size = size
        self.members: list[_Member] = []  # by cost, cheapest first

    def offer(self, a: np.ndarray, cost: float, made_from: Sequence[bytes] = ()) -> None:
        """A feasible answer of cost ``cost`` (a merge's result: ``made_from`` the bytes of the
        answers it was made from): kept if it is new and among the best."""
        key = a.tobytes()
        if any(m.key == key for m in self.members):
            return
        if len(self.members) >= self.size and cost >= self.members[-1].cost:
            return
        merged = bool(made_from)
        new_best = not self.members or cost < self.members[0].cost
        for m in self.members:
            if merged and m.key in made_from:
                m.absorbed = True
            elif not merged and new_best:
                m.absorbed = False
        self.members.append(_Member(cost, key, a.copy(), merged))
        self.members.sort(key=lambda m: m.cost)
        del self.members[self.size :]

    def next_pair(self) -> np.ndarray | None:
        """The best answer and the cheapest one it has not absorbed (as rows, the best first),
        that one then marked absorbed; None when there is none."""
        for m in self.members[1:]:
            if not m.absorbed:
                m.absorbed = True
                return np.stack([self.members[0].a, m.a])
        return None


@dataclass
class _Member:
    cost: float
    key: bytes
    a: np.ndarray
    absorbed: bool
