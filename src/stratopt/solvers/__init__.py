"""Solvers of the core problem and the one entry point, :func:`solve`."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from stratopt.errors import ModelError
from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers import registry
from stratopt.solvers.base import Limit, Result, Solver, Status

__all__ = ["Limit", "Result", "Solver", "Status", "choose_solver", "solve"]

#: ``solver="auto"`` uses brute force up to this many complete assignments.
AUTO_BRUTE_LIMIT = 100_000


def choose_solver(problem: StrategyProblem) -> str:
    """The solver ``solve(problem)`` uses by default: the best exact one that applies.

    Today that is ``brute`` for problems with at most ``AUTO_BRUTE_LIMIT`` assignments and
    ``greedy`` (no proof) beyond; exact solvers for larger problems take precedence as they land.
    """
    if problem.search_space_size <= AUTO_BRUTE_LIMIT:
        return "brute"
    return "greedy"


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
        A registered name (see :func:`stratopt.solvers.registry.names`), ``"auto"`` for the best
        exact solver that applies, or any object meeting the :class:`Solver` protocol.
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
                raise TypeError(f"solver options {sorted(options)} need a named solver, not 'auto'")
            solver = choose_solver(problem)
        impl = registry.get(solver)
    elif isinstance(solver, Solver):
        impl = solver
    else:
        raise TypeError(f"solver must be a registered name or a Solver, got {type(solver).__name__}")

    start = time.perf_counter()
    result = impl.solve(problem, time_limit=time_limit, seed=seed, **options)
    wall = time.perf_counter() - start
    return _checked(problem, impl, result, wall)


def _checked(problem: StrategyProblem, impl: Solver, result: Result, wall: float) -> Result:
    """Recompute the objective and demote answers that do not check out to ERROR."""
    stats = dict(result.stats)
    changes: dict[str, Any] = {"solver": impl.name, "wall_time": wall, "stats": stats}
    if result.assignment is None:
        return dataclasses.replace(result, objective=None, **changes)
    assignment = tuple(int(x) for x in result.assignment)
    ev = evaluate(problem, assignment)
    changes.update(assignment=assignment, objective=ev.objective)
    status, bound = result.status, result.bound
    error = None
    if status in (Status.OPTIMAL, Status.FEASIBLE) and not ev.feasible:
        error = f"solver returned an infeasible assignment: {ev.violation}"
    elif status is Status.OPTIMAL:
        if not impl.exact:
            error = "a heuristic solver claimed optimality"
        elif bound is None:
            bound = ev.objective
        elif bound > ev.objective:
            error = f"reported bound {bound} exceeds the recomputed objective {ev.objective}"
    if error is not None:
        stats["error"] = error
        return dataclasses.replace(result, status=Status.ERROR, limit=None, bound=None, **changes)
    return dataclasses.replace(result, bound=bound, **changes)
