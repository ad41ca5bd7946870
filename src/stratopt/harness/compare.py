"""Cross-checking solvers against each other: :func:`compare` and the case bank.

:func:`compare` runs several solvers on one problem and checks every answer independently of the
solver that produced it: each returned assignment is priced again with :func:`stratopt.evaluate`
and must be feasible; exact solvers that claim optimality must agree; no proven bound may exceed
a feasible objective, and no answer may beat a proven optimum (so no heuristic can either); an
exact solver may not call a problem infeasible that another solver answered. A failed check
raises :class:`~stratopt.CrossCheckError` showing both answers.

Floating-point objectives are compared with the relative tolerance ``REL_TOL`` (CP-SAT scales
float costs to integers; its reported rounding error is added to that tolerance). Integer
objectives must match exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stratopt.errors import CrossCheckError, ModelError
from stratopt.problem import Number, StrategyProblem, evaluate
from stratopt.solvers import registry, solve
from stratopt.solvers.base import Result, Solver, Status
from stratopt.solvers.brute import SMALL_SPACE
from stratopt.solvers.registry import available, get

__all__ = ["REL_TOL", "Comparison", "compare", "default_solvers"]

#: Relative tolerance for comparing float objectives and bounds.
REL_TOL = 1e-6

#: Solvers :func:`default_solvers` picks from, in this order.
_DEFAULTS = ("dp", "mip-highs", "mip-cbc", "cpsat", "wcsp", "greedy")


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found. ``optimum`` is the agreed proven optimum (None when no exact
    solver proved one); ``infeasible`` says an exact solver proved that nothing is feasible;
    ``mismatch`` describes the first failed check (None when all passed); ``results`` holds one
    checked :class:`Result` per solver, in the order run."""

    optimum: Number | None
    infeasible: bool
    results: tuple[Result, ...]
    mismatch: str | None = None

    @property
    def agree(self) -> bool:
        return self.mismatch is None

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        """The command line's JSON object: ``{"agree", "optimum", "results": [...]}`` and the
        mismatch when there is one."""
        return {
            "instance": instance,
            "agree": self.agree,
            "optimum": self.optimum,
            "infeasible": self.infeasible,
            "mismatch": self.mismatch,
            "results": [r.to_dict(instance) for r in self.results],
        }


def default_solvers(problem: StrategyProblem) -> list[str]:
    """The installed solvers worth running on ``problem``: every exact formulation, the DP, greedy,
    and brute force when its enumeration is small."""
    names = [n for n in _DEFAULTS if available(n)]
    if problem.search_space_size <= SMALL_SPACE:
        names.insert(0, "brute")
    return names


def solver_names(text: str | None, problem: StrategyProblem) -> list[str]:
    """The solvers a comma-separated list names (None: :func:`default_solvers`), each registered
    and installed; otherwise a :class:`ModelError` (unknown) or :class:`SolverUnavailableError`
    naming the extra to install.

    >>> from stratopt import load_problem
    >>> solver_names("dp, greedy", load_problem("example"))
    ['dp', 'greedy']
    """

    names = default_solvers(problem) if text is None else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in registry.names()]
    if unknown or not names:
        raise ModelError(
            f"unknown solver {unknown[0] if unknown else text!r}; choose from: {', '.join(registry.names())}"
        )
    for name in names:
        registry.get(name)  # raises SolverUnavailableError naming the extra
    return names


def compare(
    problem: StrategyProblem,
    solvers: Sequence[str | Solver] | None = None,
    *,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
    raise_on_mismatch: bool = True,
) -> Comparison:
    """Run each solver on ``problem`` and cross-check the answers (see the module docstring).

    ``solvers`` defaults to :func:`default_solvers`. With ``raise_on_mismatch=False`` a failed
    check is returned in ``Comparison.mismatch`` instead of raised.

    Parameters
    ----------
    problem
        The problem every solver runs on.
    solvers
        Registered names or :class:`~stratopt.Solver` objects.
    time_limit
        Seconds each solver may use.
    progress
        Receives a line before and after each solver.
    raise_on_mismatch
        Raise on a failed check (default) or report it in the result.

    Raises
    ------
    CrossCheckError
        On the first failed check, with both answers in the message.

    Examples
    --------
    >>> from stratopt import load_problem
    >>> c = compare(load_problem("example"), ["brute", "dp", "greedy"])
    >>> c.agree, c.optimum, [r.status.value for r in c.results]
    (True, 445, ['optimal', 'no_solution', 'feasible'])
    """
    say = progress or (lambda _msg: None)
    chosen = list(solvers) if solvers is not None else list(default_solvers(problem))
    runs = []
    for s in chosen:
        name = s if isinstance(s, str) else s.name
        say(f"{name}: solving")
        r = solve(problem, s, time_limit=time_limit)
        say(f"{name}: {r.status.value}, objective {r.objective}, bound {r.bound}, {r.wall_time:.2f} s")
        runs.append((r, _is_exact(s)))
    results = tuple(r for r, _ in runs)
    optimal = [r for r, exact in runs if exact and r.status is Status.OPTIMAL]
    proofs = [r for r, exact in runs if exact and r.status is Status.INFEASIBLE]
    optimum = min((r.objective for r in optimal if r.objective is not None), key=float, default=None)
    mismatch = _mismatch(problem, results, optimal, proofs)
    if mismatch is not None and raise_on_mismatch:
        raise CrossCheckError(mismatch)
    return Comparison(None if mismatch else optimum, bool(proofs), results, mismatch)


def _is_exact(solver: str | Solver) -> bool:
    return bool(get(solver).exact) if isinstance(solver, str) else bool(solver.exact)


def _close(a: Number, b: Number, slack: float = 0.0) -> bool:
    if isinstance(a, int) and isinstance(b, int) and slack == 0.0:
        return a == b
    return abs(float(a) - float(b)) <= REL_TOL * max(1.0, abs(float(a)), abs(float(b))) + slack


def _below(a: Number, b: Number, slack: float = 0.0) -> bool:
    """a < b by more than the tolerance."""
    return float(a) < float(b) and not _close(a, b, slack)


def _slack(r: Result) -> float:
    return float(r.stats.get("rounding_error", 0.0) or 0.0)


def _show(r: Result) -> str:
    return f"{r.solver}: {r.status.value}, objective {r.objective}, bound {r.bound}, assignment {r.assignment}"


def _mismatch(
    problem: StrategyProblem, results: tuple[Result, ...], optimal: list[Result], proofs: list[Result]
) -> str | None:
    """The first failed check, described with both answers, or None."""
    answered: list[tuple[Number, Result]] = []
    for r in results:
        if r.status is Status.ERROR:
            return f"{r.solver} failed: {r.stats.get('error', 'error status')}"
        if r.assignment is None:
            continue
        ev = evaluate(problem, r.assignment)
        if not ev.feasible:
            return f"{_show(r)} is infeasible: {ev.violation}"
        if r.objective is None or not _close(ev.objective, r.objective):
            return f"{_show(r)} but its assignment costs {ev.objective}"
        answered.append((ev.objective, r))
    if optimal:
        first = optimal[0]
        assert first.objective is not None
        for r in optimal[1:]:
            assert r.objective is not None
            if not _close(r.objective, first.objective, _slack(r) + _slack(first)):
                return f"exact solvers disagree: {_show(first)} vs {_show(r)}"
    if proofs and answered:
        return f"infeasibility proven but answered: {_show(proofs[0])} vs {_show(answered[0][1])}"
    if not answered:
        return None
    best_value, best = min(answered, key=lambda pair: float(pair[0]))
    for r in results:
        if r.bound is not None and _below(best_value, r.bound, _slack(r)):
            return f"a bound exceeds a feasible objective: {_show(r)} vs {_show(best)}"
    if optimal and optimal[0].objective is not None and _below(best_value, optimal[0].objective, _slack(optimal[0])):
        return f"an answer beats a proven optimum: {_show(best)} vs {_show(optimal[0])}"
    return None
