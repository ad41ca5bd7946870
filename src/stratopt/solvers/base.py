"""The solver contract: statuses, limits, the frozen Result, and the Solver protocol."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from stratopt.errors import SolverError
from stratopt.problem import Number, StrategyProblem

__all__ = ["Limit", "Result", "Solver", "Status"]


class Status(enum.Enum):
    """How a solve ended.

    OPTIMAL: the assignment is proven optimal (``bound == objective``).
    FEASIBLE: a feasible assignment without proof; ``limit`` says what stopped the search.
    INFEASIBLE: proven that no feasible assignment exists.
    NO_SOLUTION: no feasible assignment found and none proven impossible; ``limit`` says why.
    ERROR: the back-end failed or returned something that does not check out (see ``stats``).
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"
    ERROR = "error"


class Limit(enum.Enum):
    """Why a search stopped short of a proof (set exactly for FEASIBLE and NO_SOLUTION)."""

    TIME = "time"
    ITERATION = "iteration"
    MEMORY = "memory"
    INTERRUPTED = "interrupted"
    #: The search finished, but on costs it could not hold exactly (floats scaled and rounded for
    #: CP-SAT, integer sums past 2**53 in float64 tables): the bound allows for the error.
    PRECISION = "precision"
    #: The method never proves optimality (a heuristic), or gave up without a reason to state.
    HEURISTIC = "heuristic"
    OTHER = "other"


@dataclass(frozen=True)
class Result:
    """The outcome of one solve.

    Attributes
    ----------
    solver
        The registered name of the solver that ran.
    status
        A :class:`Status`.
    assignment
        One choice index per vertex (plain ints), or None when there is no feasible assignment.
    objective
        The assignment's cost recomputed by :func:`stratopt.evaluate`; None without assignment.
    bound
        A proven lower bound on the optimum (equal to ``objective`` when optimal), or None.
    limit
        A :class:`Limit`, set exactly when ``status`` is FEASIBLE or NO_SOLUTION.
    wall_time
        Seconds spent in the solver, as measured around it.
    stats
        Solver-specific figures (plain JSON-able values).
    """

    solver: str
    status: Status
    assignment: tuple[int, ...] | None = None
    objective: Number | None = None
    bound: Number | None = None
    limit: Limit | None = None
    wall_time: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        needs_limit = self.status in (Status.FEASIBLE, Status.NO_SOLUTION)
        if needs_limit != (self.limit is not None):
            raise SolverError(f"a {self.status.value} result must {'' if needs_limit else 'not '}carry a limit")
        has_answer = self.status in (Status.OPTIMAL, Status.FEASIBLE)
        if has_answer and self.assignment is None:
            raise SolverError(f"a {self.status.value} result needs an assignment")

    @property
    def gap(self) -> float | None:
        """Relative gap ``(objective - bound) / |objective|``, or None without both."""
        if self.objective is None or self.bound is None:
            return None
        if self.objective == self.bound:
            return 0.0
        return float(self.objective - self.bound) / max(abs(float(self.objective)), 1e-300)

    @property
    def bound_method(self) -> str | None:
        """How :attr:`bound` was obtained (``stats["bound_method"]`` where a run other than this
        solver's own gave it), or None without a bound."""
        if self.bound is None:
            return None
        return str(self.stats.get("bound_method") or BOUND_METHODS.get(self.solver, f"{self.solver}'s own bound"))

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        """The command line's JSON object (DESIGN section 7)."""
        return {
            "instance": instance,
            "solver": self.solver,
            "status": self.status.value,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "bound_method": self.bound_method,
            "assignment": None if self.assignment is None else list(self.assignment),
            "wall_time": round(self.wall_time, 6),
            "limit": None if self.limit is None else self.limit.value,
            "stats": self.stats,
        }


#: How each solver's own lower bound is obtained (:attr:`Result.bound_method`).
BOUND_METHODS = {
    "dp": "dp: the exact optimum of vertex elimination",
    "dp-reference": "dp-reference: the exact optimum of vertex elimination",
    "brute": "brute: enumeration of every assignment",
    "wcsp": "wcsp: toulbar2's dual bound on the presolved model",
    "mip-highs": "mip-highs: HiGHS's branch-and-bound bound (LP relaxations)",
    "mip-cbc": "mip-cbc: CBC's branch-and-bound bound (LP relaxations)",
    "cpsat": "cpsat: CP-SAT's objective bound",
    "lagrange": "lagrange: the Lagrangian dual over time-slot prices (a level method; each value toulbar2's proven bound at its prices)",
}


@runtime_checkable
class Solver(Protocol):
    """What :func:`stratopt.solve` accepts besides a registered name.

    ``name`` is a short key; ``exact`` says whether an OPTIMAL status is a proof. ``solve``
    returns a Result whose objective may be left None: :func:`stratopt.solve` recomputes it.
    """

    name: str
    exact: bool

    def solve(
        self, problem: StrategyProblem, *, time_limit: float | None = None, seed: int | None = None, **options: Any
    ) -> Result: ...
