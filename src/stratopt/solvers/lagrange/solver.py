"""The method's outline: :class:`Lagrange` builds the penalty model, runs weight vectors through
toulbar2 (in this process, worker processes or Ray tasks), folds every outcome into the best answer
and the best bound, and reports both."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers.base import Limit, Result, Status
from stratopt.solvers.lagrange.bound import Level, round_down
from stratopt.solvers.lagrange.branch import ROOT_RATE, BranchJob
from stratopt.solvers.lagrange.jobs import bound_job, relaxation_job
from stratopt.solvers.lagrange.kept import KEPT_METHOD, KeptJob
from stratopt.solvers.lagrange.merge import Elite, Merged, MergeJob, merge_job
from stratopt.solvers.lagrange.messages import MESSAGE_METHOD
from stratopt.solvers.lagrange.model import PenaltyModel
from stratopt.solvers.lagrange.relaxation import BOUND_SHARE, LP_METHOD, LpBound, LpJob
from stratopt.solvers.lagrange.runs import TRWS_ACCURACY, Attempt, Run, attempt
from stratopt.solvers.lagrange.schedule import Schedule, Weights
from stratopt.solvers.lagrange.workers import ProcessPool, RayPool
from stratopt.solvers.local_search import LocalEngine

__all__ = ["Lagrange"]


class Lagrange:
    """The usage limit as per-vertex penalties, each penalised problem solved by toulbar2.

    Weight vectors run in worker processes (one per core by default), each for ``seconds`` of
    toulbar2; every answer is repaired to the limit where it breaks it, polished, and offered to
    ``incumbent`` when it is the best so far; the weights then narrow per vertex. Without a time
    limit it stops after ``runs`` runs. The status is FEASIBLE (never a proof of optimality; the
    Lagrangian dual value is the bound) or NO_SOLUTION; INFEASIBLE only when the least usage of
    every vertex already breaks the limit somewhere (a proof).

    References
    ----------
    "Soft Constraints, Strong Solutions: Optimizing Intra-Operator Parallelism for Distributed Deep
    Learning" (the IOPDDL contest's winning entry): usage penalties per vertex, toulbar2, scales in
    parallel, per-vertex narrowing.

    Examples
    --------
    >>> from stratopt import load_problem, solve
    >>> r = solve(load_problem("example"), "lagrange", workers=0)
    >>> r.status.value, r.objective, r.bound <= 445
    ('feasible', 445, True)
    """

    name = "lagrange"
    exact = False

    def solve(
        self,
        problem: StrategyProblem,
        *,
        time_limit: float | None = None,
        seed: int | None = None,
        workers: int | None = None,
        executor: str = "process",
        seconds: float | None = None,
        runs: int = 8,
        unit: float = 1.0,
        trws: float | None = TRWS_ACCURACY,
        bound_share: float = BOUND_SHARE,
        branch: bool = True,
        progress: Callable[[str], None] | None = None,
        incumbent: Callable[[tuple[int, ...]], None] | None = None,
    ) -> Result:
        """``workers``: processes (None: one per core; 0: toulbar2 in this process). ``executor``:
        ``"process"`` (forked worker processes) or ``"ray"`` (Ray tasks on the cluster
        ``ray.init()`` connects to; ``workers`` None: one per CPU of the cluster). ``seconds``:
        toulbar2 time per run (default: :func:`run_seconds`, by the network's size, and
        with a time limit shortened by how long the first run takes to its first backtrack:
        :func:`timed_seconds`).
        ``runs``: how many runs without a time limit. ``unit``: the weight (cost per unit of usage)
        the first runs spread around, from a hundredth to a hundred times it. ``trws``: each run's
        TRW-S accuracy (:data:`TRWS_ACCURACY`; None: toulbar2's search alone). ``bound_share``:
        the share of the time limit the linear relaxation may take in one worker, after the first
        answer run (:data:`~stratopt.solvers.lagrange.relaxation.BOUND_SHARE`; 0: no relaxation);
        it runs only where its size at :data:`~stratopt.solvers.lagrange.relaxation.LP_RATE`
        columns per second fits in that share, and its slot prices start the ascent; under a time
        limit, where the usage rows are few, the bound with them kept takes the share instead
        (:mod:`.kept`), and where the prices of the relaxation's dual are quick to find and the
        relaxation would not fit :data:`~stratopt.solvers.lagrange.jobs.LP_SAFE` of the share, its dual by message passing takes
        the share until it stalls (:mod:`.messages`). ``branch``: where
        the relaxation ran and its network is small enough, branch and cut on it in one worker for
        the rest of the time (:mod:`.branch`), the search's best answer its start."""
        if not (isinstance(bound_share, (int, float)) and 0 <= bound_share <= 1):
            raise ModelError(f"lagrange: bound_share must be a share of the time limit in [0, 1], got {bound_share!r}")
        if trws is not None and not (isinstance(trws, (int, float)) and 0 < trws < 1):
            raise ModelError(f"lagrange: trws must be an accuracy in (0, 1) or None, got {trws!r}")
        if executor not in ("process", "ray"):
            raise ModelError(f"lagrange: unknown executor {executor!r}; choose 'process' or 'ray'")
        clock = _Clock(time_limit, progress)
        # 1. The penalty model and the reduced network, built once; a limit that even the least
        #    usages break is a proof of infeasibility.
        model = PenaltyModel.build(problem)
        engine = LocalEngine(problem)
        stats: dict[str, Any] = {"relevant_vertices": int(model.relevant.sum()), "scale": model.scale}
        if model.network is not None:
            stats["reductions"] = model.network.stats  # what the network toulbar2 gets lost, per reduction
        if engine.has_limit and len(model.room) and model.room.min() < 0:
            stats["proof"] = "every vertex at its least usage still exceeds the limit"
            return Result(self.name, Status.INFEASIBLE, stats=stats)
        # The first run times toulbar2 where the caller leaves the run length to the search.
        timing = seconds is None and time_limit is not None and engine.has_limit
        if seconds is None:
            seconds = run_seconds(model, time_limit)
        if workers is None and executor == "process":
            workers = os.cpu_count() or 1
        # 2. The weight schedule (narrowing, exploiting, bound runs) and the search's state.
        rng = np.random.default_rng(0 if seed is None else seed)
        ascent = Level(model, engine)
        schedule = Schedule(model, Weights(model, unit), ascent, rng, seconds, engine.has_limit)
        search = _Search(problem, model, engine, schedule, incumbent, clock.say)
        lp_job: LpJob | BranchJob | KeptJob | None = relaxation_job(model, engine, bound_share, time_limit, stats)
        if "skipped" in stats.get("lp", {}):
            instead = "; its dual by message passing instead" if lp_job is not None else ""
            clock.say(f"linear relaxation skipped: {stats['lp']['skipped']}{instead}")
        how = "Ray tasks" if executor == "ray" else f"{workers or 1} worker(s)"
        clock.say(
            f"{problem.num_vertices} vertices, {int(model.relevant.sum())} penalised; {how}, {seconds:.0f} s per run"
            f"{' (the first run times toulbar2 and may shorten them)' if timing else ''}"
            f"{'' if trws is None else f', TRW-S to {trws:g}'}"
        )

        def more(started: int) -> bool:
            if search.closed():  # the bound has met the best answer: nothing left to find
                return False
            return started < runs if clock.deadline is None else clock.left() > LAST_START

        def next_run() -> tuple[np.ndarray, np.ndarray | None, Run]:
            w, lam = schedule.next(search.best_weights)
            toulbar_seconds = schedule.run_seconds(lam, search.proving(), clock.left(), clock.deadline is not None)
            first = timing and started == 0  # the run that times toulbar2
            return w, lam, Run(w, toulbar_seconds, int(rng.integers(1, 2**31)), lam, trws, first)

        def took(w: np.ndarray, outcome: Attempt, lam: np.ndarray | None, first: bool) -> None:
            if first and outcome.raw is not None:
                schedule.time_runs(timed_seconds(outcome.seconds, seconds))
                schedule.first_answer(outcome.seconds)
                stats["first_run_seconds"] = round(outcome.seconds, 2)
                clock.say(
                    f"first run to its first backtrack in {outcome.seconds:.1f} s: {schedule.seconds:.1f} s per run"
                )
            # Past the last run's start the ascent's next prices go unused: not computed (IOPDDL
            # D: a level step of 1-3 s in this process, after the deadline).
            search.take(w, outcome, lam, learn=clock.left() > LAST_START)
            if first:  # its time is not a full run's: proving() leaves it out
                search.history[-1]["first_run"] = True

        # 3. Runs: each penalised problem solved by toulbar2, its answer repaired and polished, in
        #    this process or in workers; every outcome teaches the schedule and may raise the bound.
        started = 0
        if workers == 0:
            while more(started):
                w, lam, run = next_run()
                started += 1
                budget = None if clock.deadline is None else clock.left()
                took(w, attempt(model, engine, run, budget), lam, run.first)
                job = search.merge_job() if more(started) else None
                if job is not None:
                    search.take_merge(merge_job(model, engine, job, None if clock.deadline is None else clock.left()))
                if lp_job is not None:  # after the first answer, before the other runs
                    _, start, end = problem.time_slots
                    bounded = bound_job(lp_job, model, start, end)
                    search.take_lp(bounded)
                    lp_job = _branch_job(search, bounded, lp_job, clock) if branch else None
                if not engine.has_limit:
                    break
        else:
            pool = RayPool(model, engine, workers) if executor == "ray" else ProcessPool(model, engine, workers or 1)
            stats["executor"] = executor
            merging = False  # one merge at a time, in one worker
            try:
                while True:
                    while pool.free() and more(started) and (engine.has_limit or started == 0):
                        if lp_job is not None and started > 0:  # one worker, after the first run
                            pool.submit(lp_job, lp_job, None)
                            lp_job = None
                            continue
                        job = None if merging else search.merge_job()
                        if job is not None:
                            pool.submit("merge", job, clock.left() if clock.deadline is not None else None)
                            merging = True
                            continue
                        w, lam, run = next_run()
                        started += 1
                        budget = None if clock.deadline is None else clock.left()
                        pool.submit((w, lam, run.first), run, budget)
                    if not pool.busy():
                        break
                    wait = None if clock.deadline is None else max(0.0, clock.left()) + OVERRUN_GRACE
                    got = pool.next_done(wait)
                    if got is None:  # runs still going past the deadline (toulbar2 overran its limit)
                        stats["stopped_at_deadline"] = "a run still going past the time limit was stopped"
                        clock.say("a run is still going past the time limit: stopping it, with the best so far")
                        break
                    key, outcome = got
                    if isinstance(outcome, BaseException):  # a worker died (toulbar2 crashed, memory)
                        stats["worker_error"] = f"{type(outcome).__name__}: {outcome}"
                        clock.say(f"a worker failed ({stats['worker_error']}); stopping with the best so far")
                        break
                    if isinstance(outcome, LpBound):
                        search.take_lp(outcome)
                        lp_job = _branch_job(search, outcome, key, clock) if branch else None
                    elif isinstance(outcome, Merged):
                        search.take_merge(outcome)
                        merging = False
                    else:
                        took(key[0], outcome, key[1], key[2])
            finally:
                pool.close()
        # 4. The best answer and the best Lagrangian bound.
        stats.update(
            runs=len(search.history),
            history=search.history,
            lagrangian_bound=search.lagrangian,
            bound_runs=ascent.runs,
            level_steps=ascent.levels,
            level_stalls=ascent.stalled,
            dual_ceiling=ascent.ceiling if math.isfinite(ascent.ceiling) else None,
            cuts=len(ascent.constants),
            seconds_per_run=schedule.seconds,
            merges=search.merges,
        )
        if search.lp is not None:
            stats["lp"] = {**stats.get("lp", {}), **search.lp}
        if search.branch is not None:
            stats["branch"] = search.branch
        methods = {"lp": LP_METHOD, "messages": MESSAGE_METHOD, "kept": KEPT_METHOD}
        if search.bound_from in methods:
            stats["bound_method"] = methods[search.bound_from]
        lower = round_down(problem, search.bound)
        out_of_time = clock.deadline is not None and clock.left() <= 0 and not search.closed()
        if search.best is None:
            limit = Limit.TIME if out_of_time else Limit.ITERATION
            return Result(self.name, Status.NO_SOLUTION, limit=limit, bound=lower, stats=stats)
        limit = Limit.TIME if out_of_time else Limit.HEURISTIC
        assignment = tuple(search.best.tolist())
        return Result(self.name, Status.FEASIBLE, assignment=assignment, bound=lower, limit=limit, stats=stats)


#: No run starts with fewer seconds than this left before the deadline.
LAST_START = 2.0

#: How long past the deadline the search waits for runs still going before it stops them (each
#: run's toulbar2 limit, repair and polish end before the deadline; this catches a run that overruns).
OVERRUN_GRACE = 0.5

#: toulbar2's seconds per run grow with the penalised network's pair entries (TRW-S passes and
#: the search's propagation are linear in them): this many seconds per million entries, between
#: RUN_SECONDS_MIN and RUN_SECONDS_MAX and at most a quarter of the time limit. Measured on
#: IOPDDL (2 cores, whole searches): K (1.6M entries) ended at 0.993x the best submitted cost with
#: 10 s runs and 1.073x with 20 s runs (35 runs against 19 in the limit: its weights need many
#: steps of narrowing); S (2.9M) at 1.013x with 10 s runs and 0.999-1.010x with 20 s runs.
RUN_SECONDS_PER_MILLION = 7.0
RUN_SECONDS_MIN = 5.0
RUN_SECONDS_MAX = 20.0

#: Where the caller leaves ``seconds`` to the search and there is a time limit, the first run
#: times toulbar2 instead: it stops at the search's first backtrack (TRW-S, then the first
#: descent's answers), and every later run gets this many times its seconds, within
#: [RUN_SECONDS_MIN, the size rule above]. A run that takes long to its first answers needs long
#: runs, and one that answers early gains little from them while the weights need many runs.
#: Measured on IOPDDL (2 cores, whole searches; the first run's seconds at unit weights): N (2.8 s)
#: ended at 1.029x, 1.031x and 1.036x the best submitted cost with 20 s runs (7x), 1.014x and
#: 1.003x with 10 s, 1.018x with 9.4 s, 0.994x with 7 s, 1.012x with 5 s; K (2.1 s) at
#: 0.993-1.014x with 9-11 s runs, 1.039x with 3 times its first run and 1.060-1.073x with 20 s;
#: S (8.8 s) at 0.996-1.025x with 20 s runs and 1.013x and 1.020x with 10 s and 12.6 s. At fixed
#: weights, N's penalised cost improved 1.1% from its first answer to 7 s and 0.2% from 7 s to 20 s.
FIRST_RUN_FACTOR = 4.0


def run_seconds(model: PenaltyModel, time_limit: float | None) -> float:
    """toulbar2's seconds per run by size: :data:`RUN_SECONDS_PER_MILLION` per million pair
    entries of the penalised network, within [:data:`RUN_SECONDS_MIN`, :data:`RUN_SECONDS_MAX`],
    at most a quarter of ``time_limit`` (and at least one); 10 without a time limit. The first
    run's time may shorten it (:func:`timed_seconds`)."""
    if time_limit is None:
        return 10.0
    entries = 0 if model.network is None else len(model.network.edge)
    own = min(RUN_SECONDS_MAX, max(RUN_SECONDS_MIN, RUN_SECONDS_PER_MILLION * entries / 1e6))
    return max(1.0, min(own, time_limit / 4))


def timed_seconds(first_run: float, by_size: float) -> float:
    """toulbar2's seconds per run after a first run that took ``first_run`` seconds to its first
    backtrack: :data:`FIRST_RUN_FACTOR` times that, at least :data:`RUN_SECONDS_MIN` (or
    ``by_size`` where that is less) and at most ``by_size`` (:func:`run_seconds`)."""
    return min(by_size, max(min(RUN_SECONDS_MIN, by_size), FIRST_RUN_FACTOR * first_run))


def _branch_job(search: _Search, outcome: LpBound, job: Any, clock: _Clock) -> BranchJob | None:
    """Branch and cut after the relaxation (``outcome`` of ``job``), where its duals came and left
    a gap, in one worker for the rest of the time limit (it answers as well as bounds: HiGHS's
    heuristics and the search's best answer as its start), under a time limit only. With an
    answer to start from, the columns its reduced costs rule out are fixed first and it runs
    wherever BRANCH_MIN_SECONDS are left; without one, where the root fits half the time left at
    :data:`~stratopt.solvers.lagrange.branch.ROOT_RATE`."""
    if not isinstance(job, LpJob) or job.messages or clock.deadline is None:
        return None
    if outcome.method != "lp" or outcome.bound is None or search.closed():
        return None
    assert clock.deadline is not None
    seconds = clock.left() - max(BRANCH_MARGIN, BRANCH_MARGIN_SHARE * (clock.deadline - clock.t0))
    if search.best is not None and outcome.reduced is not None:
        if seconds < BRANCH_MIN_SECONDS:
            if search.lp is not None:
                search.lp["branch"] = f"not run: {seconds:.0f} s left"
            return None
        return BranchJob(seconds, search.best.copy(), outcome.reduced, outcome.bound, search.best_cost)
    if outcome.columns > ROOT_RATE * seconds / 2:
        if search.lp is not None:
            search.lp["branch"] = (
                f"not run: {outcome.columns} columns at {ROOT_RATE:.0f}/s need more than half the {seconds:.0f} s left"
            )
        return None
    known = None if search.best is None else search.best.copy()
    return BranchJob(seconds, known)


#: The least time left (seconds) for branch and cut on the model its reduced costs leave: on IOPDDL
#: A, C and P it closes in 7-55 s where the relaxation leaves a gap of 0.5-3% (2 cores).
BRANCH_MIN_SECONDS = 5.0

#: Seconds before the time limit at which branch and cut stops, for the search to take its answer.
BRANCH_MARGIN = 3.0

#: ... and at least this share of the time limit: HiGHS can pass its own limit by a second or two
#: inside a long LP, and its worker, large by then, takes time to stop (IOPDDL A, with 3 s: the
#: command ended at 60.2 s of its 60).
BRANCH_MARGIN_SHARE = 0.1


class _Clock:
    """The search's deadline and its progress lines (seconds since the start)."""

    def __init__(self, time_limit: float | None, progress: Callable[[str], None] | None) -> None:
        self.t0 = time.perf_counter()
        self.deadline = None if time_limit is None else self.t0 + time_limit
        self.progress = progress

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.perf_counter()

    def say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(f"[lagrange {time.perf_counter() - self.t0:6.1f}s] {msg}")


class _Search:
    """What the runs have found: the best answer, its cost and weights, the best bound, and one
    history entry per run; :meth:`take` folds in a run's outcome."""

    def __init__(
        self,
        problem: StrategyProblem,
        model: PenaltyModel,
        engine: LocalEngine,
        schedule: Schedule,
        incumbent: Callable[[tuple[int, ...]], None] | None,
        say: Callable[[str], None],
    ) -> None:
        self.problem, self.model, self.engine, self.schedule = problem, model, engine, schedule
        self.incumbent, self.say = incumbent, say
        self.best: np.ndarray | None = None
        self.best_weights: np.ndarray | None = None
        self.best_cost = math.inf
        # Every function at its least allowed entry (weights zero, penalised bound zero): the
        # floor every Lagrangian value from the runs must beat to be worth reporting.
        self.bound = model.dual_value(np.zeros(model.n), 0.0)
        self.lagrangian = self.bound  # the best Lagrangian value alone
        self.bound_from = "lagrange"  # which of the two gave self.bound
        self.lp: dict[str, Any] | None = None
        self.branch: dict[str, Any] | None = None  # what branch and cut gave (:mod:`.branch`)
        self.history: list[dict[str, Any]] = []
        # Merges of good answers (see :mod:`.merge`): where the limit's knapsack rows can be
        # written (integer usages).
        self.elite = Elite()
        usage = problem.usage_flat
        self.can_merge = engine.has_limit and usage is not None and usage.dtype.kind in "iu"
        self.merges: list[dict[str, Any]] = []

    def proving(self) -> bool:
        """Whether toulbar2 proves its answer runs' optima (their median time is under half a run)."""
        took = [h["seconds"] for h in self.history if not h.get("bound_run") and not h.get("first_run")]
        return bool(took) and float(np.median(took)) < self.schedule.seconds / 2

    def closed(self) -> bool:
        """Whether the bound has reached the best answer's cost (nothing left to find)."""
        return self.best is not None and round_down(self.problem, self.bound) >= self.best_cost

    def _offer(self, assignment: np.ndarray | None) -> float:
        """An assignment from a bound worker: its exact cost (inf where it breaks the limit or is
        None), a cut for the level method, and the best answer where it is cheaper."""
        final = None if assignment is None else evaluate(self.problem, assignment)
        if assignment is None or final is None or not final.feasible:
            return math.inf
        cost = float(final.objective)
        self.schedule.ascent.cut(assignment, cost)
        self.elite.offer(assignment, cost)
        if cost < self.best_cost:
            self.best, self.best_cost = assignment, cost
            if self.incumbent is not None:
                self.incumbent(tuple(assignment.tolist()))
        return cost

    def take_branch(self, outcome: LpBound) -> None:
        """Branch and cut ended: its answer where cheaper. Its bound is HiGHS's claim, kept in the
        stats but never taken (see :mod:`.branch`)."""
        cost = self._offer(outcome.assignment)
        self.branch = {
            "status": outcome.status,
            "highs_bound": outcome.bound,
            "cost": cost if math.isfinite(cost) else None,
            "seconds": round(outcome.seconds, 2),
            "columns": outcome.columns,
            "fixed": outcome.fixed,
        }
        found = "no answer" if not math.isfinite(cost) else f"answer {cost:.6g}"
        claim = "" if outcome.bound is None else f" (HiGHS's bound {outcome.bound:.6g}, not taken)"
        self.say(
            f"branch and cut ({outcome.columns} columns, {outcome.fixed} fixed by reduced cost): "
            f"{outcome.status}, {found}{claim} in {outcome.seconds:.1f} s; best {self.best_cost:.6g}"
        )

    def take_lp(self, outcome: LpBound) -> None:
        """The linear relaxation ended: its bound where higher, and its slot prices for the ascent."""
        if outcome.method == "mip":
            self.take_branch(outcome)
            return
        self.lp = {
            "status": outcome.status,
            "bound": outcome.bound,
            "seconds": round(outcome.seconds, 2),
            "columns": outcome.columns,
            "rows": outcome.rows,
        }
        if outcome.method != "lp":
            self.lp["method"] = outcome.method
        if outcome.bound is not None and outcome.bound > self.bound:
            self.bound, self.bound_from = outcome.bound, outcome.method
        if outcome.prices is not None:
            self.schedule.ascent.start_from(outcome.prices)
            self.schedule.priced()
        cost = self._offer(outcome.assignment)
        if math.isfinite(cost):
            self.lp["cost"] = cost
        shown = "no bound" if outcome.bound is None else f"bound {outcome.bound:.6g}"
        what = {"lp": "linear relaxation", "kept": "usage rows kept"}.get(outcome.method, "message passing, prices")
        self.say(
            f"{what} ({outcome.columns} columns, {outcome.rows} rows): {outcome.status}, {shown} "
            f"in {outcome.seconds:.1f} s; best bound {self.bound:.6g}"
        )

    def merge_job(self) -> MergeJob | None:
        """The next merge to make (the best answer and the cheapest not yet merged with it), or None."""
        pair = self.elite.next_pair() if self.can_merge else None
        if pair is None:
            return None
        return MergeJob(pair, self.schedule.seconds, len(self.merges) + 1)

    def take_merge(self, outcome: Merged) -> None:
        """A merge ended: its result joins the elite, and becomes the answer where it is the best."""
        cost = math.inf
        for fixed in outcome.fixed:
            final = evaluate(self.problem, fixed)
            if final.feasible:
                self.schedule.ascent.cut(fixed, float(final.objective))
                cost = min(cost, float(final.objective))
                if float(final.objective) < self.best_cost:
                    self.elite.offer(fixed, float(final.objective), outcome.made_from)
                    self.best, self.best_cost = fixed, float(final.objective)
                    if self.incumbent is not None:
                        self.incumbent(tuple(fixed.tolist()))
        self.merges.append({"free": outcome.free, "seconds": round(outcome.seconds, 2), "cost": cost})
        shown = "no answer (rows too large, or none found in time)" if not math.isfinite(cost) else f"{cost:.6g}"
        self.say(
            f"merge {len(self.merges)} ({outcome.free} vertices differ): {shown} in {outcome.seconds:.1f} s; "
            f"best {self.best_cost:.6g}"
        )

    def take(self, w: np.ndarray, outcome: Attempt, lam: np.ndarray | None = None, learn: bool = True) -> None:
        """A run with weights ``w`` (a bound run at prices ``lam``) ended with ``outcome``;
        ``learn``: the ascent takes its next prices from it (False where no run follows)."""
        problem, model, engine = self.problem, self.model, self.engine
        a, took = outcome.raw, outcome.seconds
        self.lagrangian = max(self.lagrangian, outcome.bound)
        self.schedule.ascent.floor(outcome.bound)  # every run's value is proven: the level starts there
        if outcome.bound > self.bound:
            self.bound, self.bound_from = outcome.bound, "lagrange"
        if a is None:
            self.history.append({"seconds": round(took, 2), "found": False, "bound_run": lam is not None})
            if lam is not None:  # too short to find the answer the ascent steps from
                self.schedule.found_nothing()
            return
        ascent = self.schedule.ascent
        if lam is not None and learn:
            ascent.learn(lam, a, outcome.bound, self.best_cost)
        ev = evaluate(problem, a)
        if lam is None:  # an answer run's answer bounds the dual from above too
            ascent.cut(a, float(ev.objective))
        broken = np.zeros(model.n, dtype=bool)
        peak = ev.peak_usage
        if engine.has_limit:
            profile = engine.profile(a)
            broken = engine.range_max(profile, engine.start, engine.end) > problem.usage_limit
            # A bound run's weights follow the slot prices, not the narrowing: it teaches the
            # narrowing only where its run is exact (short heuristic runs at such weights
            # dragged every vertex's upper bracket down on IOPDDL S: 1.035x against 1.007-1.023x).
            if lam is None or self.proving():
                self.schedule.weights.learn(w, broken)
        cost = math.inf
        for fixed in outcome.fixed:
            final = evaluate(problem, fixed)
            if final.feasible:
                ascent.cut(fixed, float(final.objective))
            if final.feasible and float(final.objective) < cost:
                cost = float(final.objective)
                chosen = fixed
                if cost < self.best_cost:
                    self.best, self.best_cost, self.best_weights = fixed, cost, w
                    if self.incumbent is not None:
                        self.incumbent(tuple(fixed.tolist()))
        if math.isfinite(cost):  # the run's answer (its cheapest repair) as a merge's partner
            self.elite.offer(chosen, cost)
        self.history.append(
            {
                "seconds": round(took, 2),
                "raw_cost": float(ev.objective),
                "peak": peak,
                "cost": cost,
                "broken": int(broken.sum()),
                "bound_run": lam is not None,
            }
        )
        median = np.median(w[model.relevant]) if model.relevant.any() else 0
        kept = "kept " if ev.feasible else "repaired " if math.isfinite(cost) else "unrepaired "
        self.say(
            f"{'bound ' if lam is not None else ''}run {len(self.history)}: weights ~{median:.3g}, "
            f"cost {float(ev.objective):.6g}, peak {peak} ({int(broken.sum())} vertices broken) -> "
            f"{kept}{cost:.6g}; best {self.best_cost:.6g}, bound {self.bound:.6g}"
        )
