"""CP-SAT (OR-Tools) on the shared formulation."""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers.base import Limit, Result, Status
from stratopt.solvers.formulation import Formulation, Key, build
from stratopt.solvers.greedy import greedy_start

__all__ = ["CpSat", "map_status"]

#: Largest objective coefficient after scaling float costs.
_MAX_COEFFICIENT = 1e9


def map_status(name: str) -> tuple[Status, Limit | None]:
    """Our status for a CP-SAT status name (every value of ``cp_model.CpSolverStatus``)."""
    table = {
        "OPTIMAL": (Status.OPTIMAL, None),
        "FEASIBLE": (Status.FEASIBLE, Limit.TIME),
        "INFEASIBLE": (Status.INFEASIBLE, None),
        "UNKNOWN": (Status.NO_SOLUTION, Limit.TIME),
        "MODEL_INVALID": (Status.ERROR, None),
    }
    return table[name]


class CpSat:
    """One-hot CP-SAT model: exactly-one per vertex, marginal-linearised edges, clique usage rows.

    Integer costs are used as they are; float costs are scaled so that the largest coefficient is
    about 1e9 and rounded, and the worst total rounding error is reported in ``stats``. The
    model gets a full hint from the greedy heuristic. ``num_workers`` defaults to the machine's
    core count.
    """

    name = "cpsat"
    exact = True

    def solve(
        self,
        problem: StrategyProblem,
        *,
        time_limit: float | None = None,
        seed: int | None = None,
        num_workers: int | None = None,
        presolve: bool = False,
        hint: bool = True,
        log: bool = False,
    ) -> Result:
        from ortools.sat.python import cp_model

        started = time.perf_counter()
        form = build(problem)
        stats: dict[str, Any] = dict(form.stats)
        if form.infeasible:
            stats["proof"] = form.infeasible
            return Result(self.name, Status.INFEASIBLE, stats=stats)
        scale, error = _scale(problem, form)
        stats.update(x_vars=form.num_x, y_vars=form.num_y, rows=form.num_rows, scale=scale, rounding_error=error)

        model = cp_model.CpModel()
        lits: dict[Key, Any] = {}
        objective = []
        for key, w in form.variables():
            lits[key] = model.new_bool_var(("x{}_{}" if len(key) == 2 else "y{}_{}_{}").format(*key))
            objective.append((lits[key], round(w * scale)))
        for _, kind, terms, rhs in form.rows():
            if kind == "one":
                model.add_exactly_one([lits[k] for k, _ in terms])
            elif kind == "marginal":
                model.add(sum(int(coef) * lits[k] for k, coef in terms) == 0)
            else:
                model.add(sum(int(coef) * lits[k] for k, coef in terms) <= math.floor(rhs))
        model.minimize(sum(coef * lit for lit, coef in objective if coef))

        start = None
        if hint:
            start = greedy_start(problem)
            if start is not None:
                stats["hint_objective"] = evaluate(problem, start).objective
                for key, value in form.values(start):
                    model.add_hint(lits[key], bool(value))

        solver = cp_model.CpSolver()
        solver.parameters.num_workers = num_workers or os.cpu_count() or 1
        if time_limit is not None:
            # The limit covers building the model and the hint too.
            solver.parameters.max_time_in_seconds = max(0.01, time_limit - (time.perf_counter() - started))
        if seed is not None:
            solver.parameters.random_seed = int(seed)
        solver.parameters.cp_model_presolve = presolve
        solver.parameters.log_search_progress = log
        code = solver.solve(model)
        status, limit = map_status(solver.status_name(code))
        stats["cpsat_status"] = solver.status_name(code)
        if status in (Status.OPTIMAL, Status.FEASIBLE):
            picked = {key[0]: key[1] for key, lit in lits.items() if len(key) == 2 and solver.boolean_value(lit)}
            assignment = tuple(form.assignment(picked))
            bound = None
            if status is Status.FEASIBLE:
                bound = _bound(problem, form, solver.best_objective_bound, scale, error)
            return Result(self.name, status, assignment=assignment, bound=bound, limit=limit, stats=stats)
        if status is Status.NO_SOLUTION and start is not None:
            # CP-SAT found nothing in time; the heuristic's feasible hint is still an answer.
            stats["answer_from"] = "hint"
            bound = _bound(problem, form, solver.best_objective_bound, scale, error)
            return Result(
                self.name, Status.FEASIBLE, assignment=tuple(start.tolist()), bound=bound, limit=limit, stats=stats
            )
        return Result(self.name, status, limit=limit, stats=stats)


def _scale(problem: StrategyProblem, form: Formulation) -> tuple[float, float]:
    """(scale, worst total rounding error in the problem's units)."""
    if problem.is_integral:
        return 1.0, 0.0
    peak = max(
        [float(np.abs(c).max()) for c in form.costs if len(c)]
        + [float(np.abs(c).max()) for *_, c in form.edges if len(c)]
        + [1.0]
    )
    scale = _MAX_COEFFICIENT / peak
    terms = sum(1 for c in form.costs if len(c)) + len(form.edges)
    return scale, 0.5 * terms / scale


def _bound(problem: StrategyProblem, form: Formulation, raw: float, scale: float, error: float) -> float | int:
    value = raw / scale + form.constant - error
    return math.ceil(value - 1e-9) if problem.is_integral else value
