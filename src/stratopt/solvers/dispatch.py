"""The entry points :func:`solve` (one solver, its answer re-checked) and :func:`solve_auto`."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

from stratopt.errors import ModelError, UnsupportedProblemError
from stratopt.problem import StrategyProblem
from stratopt.solvers import registry
from stratopt.solvers.base import Limit, Result, Solver, Status
from stratopt.solvers.brute import SMALL_SPACE
from stratopt.solvers.driver import check

__all__ = ["mip_fits", "solve", "solve_auto"]


#: ``"auto"`` gives the exact formulations problems up to these sizes (vertices, edge-matrix
#: entries). Measured on IOPDDL (2 cores): toulbar2 (``wcsp``) proves B (236k entries) and G (213k)
#: optimal in 1.9 and 3.2 s and takes V (1.6M entries) to 1618308 in 300 s, 0.08% above its
#: proven optimum; HiGHS needs about 7 s for B and G and ends V at 1757478 (+8.7%); CP-SAT needs
#: 34-99 s for B and G and ends V at 4.43x.
AUTO_MIP_VERTICES = 5_000
AUTO_MIP_EDGE_ENTRIES = 2_000_000


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
) -> Result:
    """What ``solve(problem, "auto")`` does: the best exact answer that applies, else a heuristic.

    1. ``dp``, with half the time limit: exact; its answer stands when optimal or infeasible (or
       feasible with ``Limit.PRECISION``, sums no solver here holds exactly).
    2. If the DP refuses, runs out of its time or its optimum breaks the usage limit: ``brute`` (exact under the limit)
       for at most :data:`~stratopt.solvers.brute.SMALL_SPACE` assignments; else, where :func:`mip_fits`, ``wcsp``
       (toulbar2, exact under the limit, greedy's cost as its first upper bound; ``mip-highs``
       where usages are fractional or toulbar2 is missing, then ``cpsat``); else ``greedy``.
    A FEASIBLE answer carries the DP's optimum as its lower bound when that is the better bound.
    ``stats["auto"]`` says why the answer came from a later step. ``progress`` receives greedy's
    progress lines; ``incumbent`` each feasible assignment greedy holds as it improves (so a caller
    stopped early still has an answer).
    """
    start = time.perf_counter()
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
        try:
            result = solve(problem, exact_name, time_limit=left(), seed=seed)
        except UnsupportedProblemError as exc:  # wcsp: fractional usages
            say(f"{exc}; mip-highs instead")
            result = solve(problem, _first_available("mip-highs", "cpsat") or "greedy", time_limit=left(), seed=seed)
    else:
        heuristic = _first_available("lagrange") or "greedy"
        say(f"{heuristic}: too large for the exact formulations")
        result = solve(problem, heuristic, time_limit=left(), seed=seed, progress=progress, incumbent=incumbent)
    stats = {**result.stats, "auto": note}
    changes: dict[str, Any] = {"stats": stats, "wall_time": time.perf_counter() - start}
    if bound is not None and result.status is Status.FEASIBLE:
        stats["dp_bound"] = bound
        if result.bound is None or bound > result.bound:
            changes["bound"] = bound
    return dataclasses.replace(result, **changes)


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
