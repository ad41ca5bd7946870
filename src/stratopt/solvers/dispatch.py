"""The entry points :func:`solve` (one solver, its answer re-checked) and :func:`solve_auto`."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any

from stratopt.errors import ModelError, UnsupportedProblemError
from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers import registry
from stratopt.solvers.base import Limit, Result, Solver, Status
from stratopt.solvers.brute import SMALL_SPACE
from stratopt.solvers.driver import check
from stratopt.solvers.lagrange import as_child
from stratopt.solvers.registry import greedy_hint

__all__ = ["mip_fits", "solve", "solve_auto", "solve_named"]


#: ``"auto"`` gives the exact formulations problems up to these sizes (vertices, edge-matrix
#: entries). Measured on IOPDDL (2 cores): toulbar2 (``wcsp``) proves B (236k entries) and G (213k)
#: optimal in 1.9 and 3.2 s and takes V (1.6M entries) to 1618308 in 300 s, 0.08% above its
#: proven optimum; HiGHS needs about 7 s for B and G and ends V at 1757478 (+8.7%); CP-SAT needs
#: 34-99 s for B and G and ends V at 4.43x.
AUTO_MIP_VERTICES = 5_000
AUTO_MIP_EDGE_ENTRIES = 2_000_000


#: With a time limit, a usage limit and a spare core, ``"auto"`` runs ``lagrange`` in a child
#: process beside ``wcsp`` (which runs in this one): toulbar2 with the usage rows as knapsacks
#: proves small instances but its own bound stays weak where it does not (IOPDDL V: 633348 against
#: the optimum 1617084); the Lagrangian ascent's bound and answer join its result when it ends.
BESIDE_MIN_SECONDS = 10.0

#: Beside an exact run, ``lagrange`` is there for its bound (the exact run's answer is the one that
#: stands: V 1617188 against lagrange's 1713177), so its linear relaxation may take this share of
#: the time where the caller names none: on V (795k columns, about 220 s on one core) that lifts
#: the bound from the ascent's 948558 to the relaxation's.
BESIDE_BOUND_SHARE = 0.85

#: The run beside ends this share of its time (at least a second) before the exact run's deadline,
#: so that its result is in before the exact run stops waiting for it (a second past the deadline):
#: its last toulbar2 call can pass its own limit by a second or more. (One IOPDDL V search of five on
#: 2026-11-29 got no result from it in time, with 1 s; the cause was not traced.)
BESIDE_MARGIN_SHARE = 0.03


def mip_fits(problem: StrategyProblem) -> bool:
    """Whether ``"auto"`` hands this problem to an exact formulation rather than the heuristic."""
    return problem.num_vertices <= AUTO_MIP_VERTICES and problem.edge_flat.size <= AUTO_MIP_EDGE_ENTRIES


def solve_auto(
    problem: StrategyProblem,
    *,
    time_limit: float | None = None,
    seed: int | None = None,
    progress: Callable[[str], None] | None = None,
    incumbent: Callable[[tuple[int, ...]], None] | None = None,
    bound_share: float | None = None,
) -> Result:
    """What ``solve(problem, "auto")`` does: the best exact answer that applies, else a heuristic.

    1. ``dp``, with half the time limit: exact; its answer stands when optimal or infeasible (or
       feasible with ``Limit.PRECISION``, sums no solver here holds exactly).
    2. If the DP refuses, runs out of its time or its optimum breaks the usage limit: ``brute`` (exact under the limit)
       for at most :data:`~stratopt.solvers.brute.SMALL_SPACE` assignments; else, where :func:`mip_fits`, ``wcsp``
       (toulbar2, exact under the limit, greedy's cost as its first upper bound; ``mip-highs``
       where usages are fractional or toulbar2 is missing, then ``cpsat``), with ``lagrange`` in a
       child process beside it when a core is spare (see :data:`BESIDE_MIN_SECONDS`): where the
       exact run ends without a proof, the better answer and the higher bound of the two stand,
       and OPTIMAL when they meet (``stats["beside"]``); else ``lagrange`` (``greedy`` without
       toulbar2).
    A FEASIBLE answer carries the DP's optimum as its lower bound when that is the better bound.
    ``stats["auto"]`` says why the answer came from a later step. ``progress`` receives greedy's
    progress lines; ``incumbent`` each feasible assignment greedy holds as it improves (so a caller
    stopped early still has an answer). ``bound_share``: lagrange's share of the time for its linear
    relaxation, where lagrange runs (None: its default, or :data:`BESIDE_BOUND_SHARE` beside an
    exact run).
    """
    start = time.perf_counter()
    share: dict[str, Any] = {} if bound_share is None else {"bound_share": bound_share}
    say = progress or (lambda _msg: None)
    bound = None
    try:
        # The DP gets half the budget: past it, the later steps still have their share.
        exact = solve(problem, "dp", time_limit=None if time_limit is None else time_limit / 2, seed=seed)
    except UnsupportedProblemError as exc:
        note = f"dp refused: {exc}"
    else:
        if exact.status in (Status.OPTIMAL, Status.INFEASIBLE, Status.FEASIBLE):
            return exact  # FEASIBLE: sums past 2**53, which no later step holds exactly either
        bound = exact.bound
        if exact.limit is Limit.TIME:
            note = "dp stopped at half the time limit"
        else:
            note = f"the dp optimum breaks the usage limit ({exact.stats.get('relaxed_violation')})"
    say(note)

    def left() -> float | None:
        return None if time_limit is None else max(1e-3, time_limit - (time.perf_counter() - start))

    if problem.search_space_size <= SMALL_SPACE:
        result = solve(problem, "brute", time_limit=left(), seed=seed)
    elif mip_fits(problem) and (exact_name := _first_available("wcsp", "mip-highs", "cpsat")):
        say(f"{exact_name}: solving the presolved model (greedy gives the start)")
        hinted: dict[str, Any] = {}  # the solver's own default hint unless the caller holds answers
        if incumbent is not None:  # a caller that may be stopped early holds greedy's start first
            first = greedy_hint(problem)
            hinted["hint"] = first
            if first is not None and evaluate(problem, first).feasible:
                incumbent(tuple(int(c) for c in first))
        beside = _start_beside(problem, left(), seed, share or {"bound_share": BESIDE_BOUND_SHARE})
        if beside is not None:
            say("lagrange beside it on a second core (its bound and answer join the result)")
        try:
            try:
                result = solve(problem, exact_name, time_limit=left(), seed=seed, **hinted)
            except UnsupportedProblemError as exc:  # wcsp: fractional usages
                say(f"{exc}; mip-highs instead")
                result = solve(
                    problem, _first_available("mip-highs", "cpsat") or "greedy", time_limit=left(), seed=seed
                )
            if beside is not None and result.status in (Status.FEASIBLE, Status.NO_SOLUTION):
                result = _join(problem, result, beside.collect(wait=(left() or 0.0) + 1.0))
        finally:
            if beside is not None:
                beside.stop()
    else:
        heuristic = _first_available("lagrange") or "greedy"
        say(f"{heuristic}: too large for the exact formulations")
        extra = share if heuristic == "lagrange" else {}
        result = solve(
            problem, heuristic, time_limit=left(), seed=seed, progress=progress, incumbent=incumbent, **extra
        )
    stats = {**result.stats, "auto": note}
    changes: dict[str, Any] = {"stats": stats, "wall_time": time.perf_counter() - start}
    if bound is not None and result.status is Status.FEASIBLE:
        stats["dp_bound"] = bound
        if result.bound is None or bound > result.bound:
            changes["bound"] = bound
            stats["bound_method"] = "dp: the optimum without the usage limit"
    return dataclasses.replace(result, **changes)


class _Beside:
    """``lagrange`` (one process, toulbar2 in it) running in a child process beside an exact run
    in this one; :meth:`collect` returns its checked Result, :meth:`stop` ends it."""

    def __init__(self, problem: StrategyProblem, seconds: float, seed: int | None, options: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_beside_main, args=(send, problem, seconds, seed, options), daemon=True)
        self._proc.start()
        send.close()

    def collect(self, wait: float) -> Result | str:
        """Its Result, or why there is none (its error, a death, no answer in time)."""
        try:
            if self._recv.poll(max(0.0, wait)):
                got = self._recv.recv()
                return got if isinstance(got, (Result, str)) else f"unexpected {type(got).__name__}"
            return "no result in time"
        except (EOFError, OSError):  # the child died (memory, a crash in toulbar2): no help from it
            return f"the child process ended without a result (exit code {self._proc.exitcode})"

    def stop(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join(timeout=5)
        self._recv.close()


def _beside_main(
    send: Any, problem: StrategyProblem, seconds: float, seed: int | None, options: dict[str, Any]
) -> None:

    as_child()
    try:
        result: Result | str = solve(problem, "lagrange", time_limit=seconds, seed=seed, workers=0, **options)
    except Exception as exc:  # reported to the parent as nothing found; its own run stands
        result = f"{type(exc).__name__}: {exc}"
    send.send(result)
    send.close()


def _join(problem: StrategyProblem, result: Result, other: Result | str) -> Result:
    """The exact run's result with the answer and bound of the run beside it where they are
    better; OPTIMAL when the joint bound meets the answer's cost. ``other`` a string: why the run
    beside gave nothing (kept in ``stats["beside"]["error"]``)."""
    if isinstance(other, str):
        return dataclasses.replace(result, stats={**result.stats, "beside": {"solver": "lagrange", "error": other}})
    stats = {
        **result.stats,
        "beside": {
            "solver": other.solver,
            "status": other.status.value,
            "objective": other.objective,
            "bound": other.bound,
            "runs": other.stats.get("runs"),
            **({"lp": other.stats["lp"]} if "lp" in other.stats else {}),
        },
    }
    changes: dict[str, Any] = {"stats": stats}
    bound = result.bound
    if other.bound is not None and (bound is None or other.bound > bound):
        bound = changes["bound"] = other.bound
        stats["bound_method"] = f"{other.bound_method} (run beside {result.solver})"
    # Its answer was checked in the child; checked again here, where it is used.
    if other.assignment is not None and other.status is Status.FEASIBLE:
        own = evaluate(problem, other.assignment)
        if own.feasible and (result.objective is None or own.objective < result.objective):
            changes.update(assignment=other.assignment, objective=own.objective)
            stats["answer_from"] = other.solver
            if result.status is Status.NO_SOLUTION:
                changes.update(status=Status.FEASIBLE)  # its limit (why the exact run stopped) stays
    objective = changes.get("objective", result.objective)
    if objective is not None and bound is not None and bound >= objective:
        changes.update(status=Status.OPTIMAL, limit=None, bound=objective)
        stats["bound_method"] = f"the answer meets the bound of {stats.get('bound_method') or result.bound_method}"
    return dataclasses.replace(result, **changes)


def _start_beside(
    problem: StrategyProblem, seconds: float | None, seed: int | None, options: dict[str, Any]
) -> _Beside | None:
    """The ``lagrange`` run beside an exact one, where it can help: a time limit of at least
    :data:`BESIDE_MIN_SECONDS`, a usage limit, toulbar2, a second core and forked processes."""
    if seconds is None or seconds < BESIDE_MIN_SECONDS or problem.usage_limit is None:
        return None
    if (os.cpu_count() or 1) < 2 or not registry.available("lagrange"):
        return None
    try:
        return _Beside(problem, seconds - max(1.0, BESIDE_MARGIN_SHARE * seconds), seed, options)
    except (ValueError, OSError):  # no fork on this platform, or no process to be had
        return None


def _first_available(*names: str) -> str | None:
    return next((name for name in names if registry.available(name)), None)


def solve(
    problem: StrategyProblem,
    solver: str | Solver = "auto",
    *,
    time_limit: float | None = None,
    seed: int | None = None,
    **options: Any,
) -> Result:
    """Solve a problem with one solver and check its answer.

    Parameters
    ----------
    problem
        The problem to solve.
    solver
        A registered name (see :func:`stratopt.solvers.registry.names`), ``"auto"`` (see
        :func:`solve_auto`), or any object meeting the :class:`Solver` protocol.
    time_limit
        Seconds the solver may use (None: no limit).
    seed
        Seed for randomised solvers.
    **options
        Solver-specific options; refused unless a solver is named.

    Returns
    -------
    Result
        Its objective is recomputed by :func:`stratopt.evaluate`. An assignment that a solver
        called optimal or feasible but that violates the problem turns the status into ERROR.

    Examples
    --------
    >>> from stratopt import StrategyProblem
    >>> p = StrategyProblem([[3, 1], [0, 2]], [(0, 1)], [[[0, 9], [9, 0]]])
    >>> r = solve(p, "brute")
    >>> r.status.value, r.assignment, r.objective
    ('optimal', (0, 0), 3)
    """
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
            raise ModelError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
        if math.isinf(time_limit):
            time_limit = None
    if isinstance(solver, str):
        if solver == "auto":
            if options:
                raise ModelError(f"solver options {sorted(options)} need a named solver, not 'auto'")
            return solve_auto(problem, time_limit=time_limit, seed=seed)
        impl = registry.get(solver)
    elif isinstance(solver, Solver):
        impl = solver
    else:
        raise ModelError(f"solver must be a registered name or a Solver, got {type(solver).__name__}")

    start = time.perf_counter()
    result = impl.solve(problem, time_limit=time_limit, seed=seed, **options)
    wall = time.perf_counter() - start
    return check(problem, impl, result, wall)


def solve_named(
    problem: StrategyProblem,
    name: str,
    *,
    time_limit: float | None = None,
    seed: int | None = None,
    ray: bool = False,
    bound_share: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """What ``stratopt solve --solver NAME`` runs: ``auto`` (:func:`solve_auto`, which says on
    ``progress`` which solver it picked) or a registered solver by name, with ``progress`` for the
    solvers that report it, ``ray`` for lagrange's Ray executor and ``bound_share`` for lagrange's
    relaxation (alone or picked by auto). An unknown name, or ``ray`` or ``bound_share`` for
    another solver, is a :class:`ModelError`."""
    if name != "auto" and name not in registry.names():
        raise ModelError(f"unknown solver {name!r}; choose from: auto, {', '.join(registry.names())}")
    if ray and name != "lagrange":
        raise ModelError(f"--ray applies to --solver lagrange, not {name!r}")
    if bound_share is not None and name not in ("auto", "lagrange"):
        raise ModelError(f"--bound-share applies to --solver lagrange or auto, not {name!r}")
    if name == "auto":
        result = solve_auto(problem, time_limit=time_limit, seed=seed, progress=progress, bound_share=bound_share)
        if progress is not None:
            progress(f"solver: {result.solver} (picked by 'auto')")
        return result
    extra: dict[str, Any] = {"progress": progress} if name in ("greedy", "lagrange") and progress else {}
    if ray:
        extra["executor"] = "ray"
    if bound_share is not None:
        extra["bound_share"] = bound_share
    return solve(problem, name, time_limit=time_limit, seed=seed, **extra)
