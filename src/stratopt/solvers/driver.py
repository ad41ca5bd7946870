"""The one driver every formulation runs under, and the re-check every answer passes.

A formulation back-end (``cpsat``, ``mip-highs``, ``mip-cbc``, ...) is three steps, as in cvxpy's
apply / solve_via_data / invert:

- ``build(problem) -> encoding``: the presolved, back-end-neutral model (inspectable: its tests
  count variables and rows); imports no back-end.
- ``run(encoding, limits) -> Raw``: hands the encoding to the back-end and reads its verdict; the
  only place that imports OR-Tools, PuLP or toulbar2.
- ``decode(encoding, raw) -> Raw``: back in the problem's terms (a full assignment, the bound in
  the problem's units, the status the proof supports).

:func:`drive` owns everything around them: the time budget (building and the hint count against
it), the hint (from a *provider* passed in, so no formulation imports a heuristic), the fallback to
the hint when the back-end keeps nothing, and the proofs the presolve already gives (infeasible,
every vertex fixed). :func:`check` is the final re-check :func:`stratopt.solve` applies to every
solver's answer. Adding a back-end is one module with the three methods.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from stratopt.errors import ModelError
from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers.base import Limit, Result, Solver, Status
from stratopt.solvers.formulation import Formulation

__all__ = ["Backend", "Driven", "HintProvider", "Limits", "Raw", "check", "decode_scaled", "drive", "pick_hint"]

#: A function that proposes a full assignment for a problem (or None when it finds none).
HintProvider = Callable[[StrategyProblem], "Sequence[int] | np.ndarray | None"]


@dataclass(frozen=True)
class Limits:
    """What a back-end's ``run`` may use: seconds left (None: no limit), seed, threads, the hint
    (a full assignment, or None), whether to print the back-end's log, and back-end options."""

    time_limit: float | None = None
    seed: int | None = None
    threads: int = 1
    hint: tuple[int, ...] | None = None
    log: bool = False
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Raw:
    """A back-end's verdict: status and limit in our vocabulary, the choice ``picked`` for each
    vertex the encoding left free (``decode`` turns it into a full ``assignment``), its bound (in
    the encoding's units before ``decode``, the problem's after) and its figures."""

    status: Status
    limit: Limit | None = None
    picked: dict[int, int] | None = None
    assignment: tuple[int, ...] | None = None
    bound: float | int | None = None
    stats: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """A formulation back-end (see the module docstring)."""

    name: str

    def build(self, problem: StrategyProblem) -> Any: ...

    def run(self, encoding: Any, limits: Limits) -> Raw: ...

    def decode(self, encoding: Any, raw: Raw) -> Raw: ...


class Driven:
    """Base of the formulation solvers: :meth:`solve` (the :class:`~stratopt.Solver` protocol) runs
    :func:`drive` on the subclass's build / run / decode.

    Options every formulation takes: ``threads`` (default: the core count), ``hint`` (True: the
    provider the registry passed in; False: none; or a provider or an assignment) and ``log``;
    back-end options are the keys of ``OPTIONS`` with their defaults, and others are refused.
    """

    name = "formulation"
    exact = True
    OPTIONS: ClassVar[dict[str, Any]] = {}

    def __init__(self, hint: HintProvider | None = None) -> None:
        self.hint = hint

    def solve(
        self,
        problem: StrategyProblem,
        *,
        time_limit: float | None = None,
        seed: int | None = None,
        threads: int | None = None,
        hint: HintProvider | Sequence[int] | bool | None = True,
        log: bool = False,
        **options: Any,
    ) -> Result:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise ModelError(
                f"{self.name}: unknown option {unknown[0]!r}; options: {', '.join(self.OPTIONS) or 'none'}"
            )
        return drive(
            self,  # type: ignore[arg-type]
            problem,
            time_limit=time_limit,
            seed=seed,
            hint=pick_hint(hint, self.hint),
            threads=threads,
            log=log,
            options={**self.OPTIONS, **options},
        )


def drive(
    backend: Backend,
    problem: StrategyProblem,
    *,
    time_limit: float | None = None,
    seed: int | None = None,
    hint: HintProvider | Sequence[int] | None = None,
    threads: int | None = None,
    log: bool = False,
    options: dict[str, Any] | None = None,
) -> Result:
    """Build, hint, run and decode one back-end within one time budget.

    ``hint`` is a provider called on the problem, or a full assignment; a hint that is not a
    feasible assignment is dropped (``stats["hint"]`` says why). When the back-end keeps no
    solution (NO_SOLUTION) but the hint is feasible, the hint is the answer, marked
    ``stats["answer_from"] = "hint"``.
    """
    started = time.perf_counter()
    encoding = backend.build(problem)
    stats: dict[str, Any] = dict(encoding.stats)
    form = encoding.formulation
    if form.infeasible:
        stats["proof"] = form.infeasible
        return Result(backend.name, Status.INFEASIBLE, stats=stats)
    if form.num_x == 0:  # the presolve fixed every vertex
        stats["answer_from"] = "presolve"
        return Result(backend.name, Status.OPTIMAL, assignment=tuple(form.assignment({})), stats=stats)

    start = _hint(problem, hint, stats)
    left = None if time_limit is None else time_limit - (time.perf_counter() - started)
    if left is not None and left <= 0:
        raw = Raw(Status.NO_SOLUTION, Limit.TIME, stats={"skipped": "no time left for the back-end"})
    else:
        limits = Limits(left, seed, threads or os.cpu_count() or 1, start, log, dict(options or {}))
        raw = backend.decode(encoding, backend.run(encoding, limits))
    stats.update(raw.stats)
    if raw.status is Status.NO_SOLUTION and start is not None:
        stats["answer_from"] = "hint"
        return Result(backend.name, Status.FEASIBLE, start, bound=raw.bound, limit=raw.limit, stats=stats)
    return Result(backend.name, raw.status, raw.assignment, bound=raw.bound, limit=raw.limit, stats=stats)


def pick_hint(
    given: HintProvider | Sequence[int] | bool | None, default: HintProvider | None
) -> HintProvider | Sequence[int] | None:
    """A solver's ``hint=`` option: True (the default provider its registry entry passed in),
    False or None (no hint), a provider, or a full assignment."""
    if given is True:
        return default
    if given is False or given is None:
        return None
    return given


def _hint(
    problem: StrategyProblem, hint: HintProvider | Sequence[int] | None, stats: dict[str, Any]
) -> tuple[int, ...] | None:
    if hint is None:
        return None
    proposed = hint(problem) if callable(hint) else hint
    if proposed is None:
        stats["hint"] = "the hint provider found no assignment"
        return None
    start = tuple(int(c) for c in np.asarray(proposed).tolist())
    try:
        ev = evaluate(problem, start)
    except ModelError as exc:
        raise ModelError(f"hint: {exc}") from None
    if not ev.feasible:
        stats["hint"] = f"dropped: {ev.violation}"
        return None
    stats["hint_objective"] = ev.objective
    return start


def check(problem: StrategyProblem, impl: Solver, result: Result, wall: float) -> Result:
    """Recompute the objective and demote answers that do not check out to ERROR.

    An assignment called optimal or feasible must be feasible; only an exact solver may call one
    optimal, and its bound may not exceed the recomputed objective.
    """
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


def decode_scaled(problem: StrategyProblem, form: Formulation, raw: Raw, scale: float, rounding_error: float) -> Raw:
    """``decode`` for back-ends on integer-scaled costs (CP-SAT, toulbar2): the bound back in the
    problem's units and lowered by the rounding error, the full assignment, and OPTIMAL only when
    nothing was rounded (else FEASIBLE with ``Limit.PRECISION``: optimal for the rounded costs only)."""
    if raw.bound is not None:
        value = raw.bound / scale + form.constant - rounding_error
        raw.bound = math.ceil(value - 1e-9) if problem.is_integral else value
    if raw.picked is not None:
        raw.assignment = tuple(form.assignment(raw.picked))
    if raw.status is Status.OPTIMAL:
        if rounding_error > 0:
            raw.status, raw.limit = Status.FEASIBLE, Limit.PRECISION
        else:
            raw.bound = None  # solve() sets it to the recomputed objective
    return raw
