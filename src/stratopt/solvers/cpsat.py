"""CP-SAT (OR-Tools) on the shared formulation, in the driver's build / run / decode shape."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from stratopt.problem import StrategyProblem
from stratopt.solvers.base import Limit, Status
from stratopt.solvers.driver import Driven, Limits, Raw, decode_scaled
from stratopt.solvers.formulation import Formulation, Key, build, integer_scale

__all__ = ["CpSat", "CpSatEncoding", "map_status"]


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


@dataclass
class CpSatEncoding:
    """The shared formulation and the integer scaling CP-SAT needs.

    ``scale`` multiplies every cost before rounding (1 for integer costs; a power of two for
    float costs, so dyadic costs such as 0.25 stay exact); ``rounding_error`` is the most the
    rounding can move any assignment's total, in the problem's units (0 when nothing was rounded).
    """

    problem: StrategyProblem
    formulation: Formulation
    scale: float
    rounding_error: float
    stats: dict[str, Any] = field(default_factory=dict)


class CpSat(Driven):
    """One-hot CP-SAT model: exactly-one per vertex, marginal-linearised edges, clique usage rows.

    Integer costs are used as they are; float costs are scaled by a power of two so that the
    largest coefficient is about 1e9, and rounded. The proof then holds for the rounded costs:
    when the rounding changed any cost, an optimum of the rounded model is reported FEASIBLE
    with ``Limit.PRECISION`` and a bound lowered by the worst total rounding error
    (``stats["rounding_error"]``), never OPTIMAL. ``threads`` (CP-SAT's workers) defaults to the core count; the
    hint comes from the provider the registry passes in (greedy), or ``hint=`` (a provider, an
    assignment, or None).

    Examples
    --------
    >>> from stratopt import StrategyProblem, solve
    >>> p = StrategyProblem([[3, 1], [0, 5]], [(0, 1)], [[[0, 9], [9, 0]]])
    >>> r = solve(p, "cpsat", seed=0)
    >>> r.status.value, r.assignment, r.objective, r.bound
    ('optimal', (0, 0), 3, 3)
    """

    name = "cpsat"
    OPTIONS: ClassVar[dict[str, Any]] = {"presolve": False}

    def build(self, problem: StrategyProblem) -> CpSatEncoding:
        form = build(problem)
        if form.infeasible:
            return CpSatEncoding(problem, form, 1.0, 0.0, dict(form.stats))
        scale, error = integer_scale(problem, form)
        stats = dict(
            form.stats, x_vars=form.num_x, y_vars=form.num_y, rows=form.num_rows, scale=scale, rounding_error=error
        )
        return CpSatEncoding(problem, form, scale, error, stats)

    def run(self, encoding: CpSatEncoding, limits: Limits) -> Raw:
        from ortools.sat.python import cp_model

        form, scale = encoding.formulation, encoding.scale
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
        if limits.hint is not None:
            for key, value in form.values(np.asarray(limits.hint)):
                model.add_hint(lits[key], bool(value))

        solver = cp_model.CpSolver()
        solver.parameters.num_workers = limits.threads
        if limits.time_limit is not None:
            solver.parameters.max_time_in_seconds = max(0.01, limits.time_limit)
        if limits.seed is not None:
            solver.parameters.random_seed = int(limits.seed)
        solver.parameters.cp_model_presolve = bool(limits.options.get("presolve", False))
        solver.parameters.log_search_progress = limits.log
        code = solver.solve(model)
        status, limit = map_status(solver.status_name(code))
        picked = None
        if status in (Status.OPTIMAL, Status.FEASIBLE):
            picked = {key[0]: key[1] for key, lit in lits.items() if len(key) == 2 and solver.boolean_value(lit)}
        bound = solver.best_objective_bound if status is not Status.INFEASIBLE else None
        bound = bound if bound is not None and math.isfinite(bound) else None
        return Raw(status, limit, picked, bound=bound, stats={"cpsat_status": solver.status_name(code)})

    def decode(self, encoding: CpSatEncoding, raw: Raw) -> Raw:
        return decode_scaled(encoding.problem, encoding.formulation, raw, encoding.scale, encoding.rounding_error)
