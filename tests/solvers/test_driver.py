"""The formulation driver: what it does around any back-end's build / run / decode."""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stratopt import Limit, Status, StrategyProblem, load_problem, solve
from stratopt.solvers import driver
from stratopt.solvers.driver import Limits, Raw, drive
from stratopt.solvers.formulation import Formulation, build


@dataclass
class Encoding:
    formulation: Formulation
    stats: dict = field(default_factory=dict)


class Scripted:
    """A back-end that answers what it is told and records what the driver handed it."""

    name = "scripted"
    exact = True

    def __init__(self, raw: Raw) -> None:
        self.raw, self.calls = raw, []

    def build(self, problem: StrategyProblem) -> Encoding:
        return Encoding(build(problem), {"built": True})

    def run(self, encoding: Encoding, limits: Limits) -> Raw:
        self.calls.append(limits)
        return self.raw

    def decode(self, encoding: Encoding, raw: Raw) -> Raw:
        if raw.picked is not None:
            raw.assignment = tuple(encoding.formulation.assignment(raw.picked))
        return raw


def _chain() -> StrategyProblem:
    """Three vertices, two choices each, nothing the presolve can fix: optimum (1, 1, 1) = 3."""
    return StrategyProblem([[2, 1], [2, 1], [2, 1]], [(0, 1), (1, 2)], [[[0, 5], [5, 0]], [[0, 5], [5, 0]]])


def test_the_back_end_gets_the_hint_and_the_time_left():
    """The hint provider's assignment and the remaining seconds reach run(); its answer is decoded."""
    backend = Scripted(Raw(Status.OPTIMAL, picked={0: 1, 1: 1, 2: 1}))
    result = drive(backend, _chain(), time_limit=30, hint=lambda p: [0, 0, 0], threads=1)
    (limits,) = backend.calls
    assert limits.hint == (0, 0, 0) and 0 < limits.time_limit <= 30 and limits.threads == 1
    assert result.status is Status.OPTIMAL and result.assignment == (1, 1, 1)
    assert result.stats["built"] and result.stats["hint_objective"] == 6


def test_no_solution_falls_back_to_a_feasible_hint():
    """A back-end that keeps nothing: the hint is the answer, FEASIBLE with the back-end's limit."""
    backend = Scripted(Raw(Status.NO_SOLUTION, Limit.TIME, bound=2))
    result = solve(_chain(), _Wrapped(backend), time_limit=10)
    assert result.status is Status.FEASIBLE and result.limit is Limit.TIME
    assert result.assignment == (0, 0, 0) and result.objective == 6 and result.bound == 2
    assert result.stats["answer_from"] == "hint"


def test_an_infeasible_hint_is_dropped():
    """A hint that breaks the problem is not handed over, and is not the fallback."""
    backend = Scripted(Raw(Status.NO_SOLUTION, Limit.TIME))
    p = load_problem("example")
    result = drive(backend, p, hint=[0, 0, 1, 1, 0])  # usage 55 > 50
    assert backend.calls[0].hint is None and "dropped" in result.stats["hint"]
    assert result.status is Status.NO_SOLUTION and result.assignment is None


def test_budget_spent_before_the_back_end_answers_with_the_hint():
    """A hint provider that uses up the time budget: run() is never called, the hint answers."""
    backend = Scripted(Raw(Status.OPTIMAL, picked={0: 1, 1: 1, 2: 1}))

    def slow(problem):
        time.sleep(0.05)
        return [0, 0, 0]

    result = drive(backend, _chain(), time_limit=0.01, hint=slow)
    assert backend.calls == [] and result.status is Status.FEASIBLE and result.limit is Limit.TIME


def test_presolve_proofs_need_no_back_end():
    """Infeasibility the presolve proves, and a problem it fixes entirely, never reach run()."""
    backend = Scripted(Raw(Status.ERROR))
    infeasible = StrategyProblem([[10**18, 10**18]], [], [])
    assert drive(backend, infeasible).status is Status.INFEASIBLE
    single = StrategyProblem([[3, 1]], [], [])
    result = drive(backend, single)
    assert result.status is Status.OPTIMAL and result.assignment == (1,) and backend.calls == []


class _Wrapped:
    """A Solver around a back-end, as cpsat.py and mip.py are, with a fixed hint."""

    name = "wrapped"
    exact = True

    def __init__(self, backend: Scripted) -> None:
        self.backend = backend

    def solve(self, problem, *, time_limit=None, seed=None):
        return drive(self.backend, problem, time_limit=time_limit, seed=seed, hint=lambda p: [0, 0, 0])


@pytest.mark.parametrize("module", ["cpsat", "mip", "formulation", "driver"])
def test_formulations_import_no_heuristic(module):
    """The formulations get their hint from a provider; none imports greedy (or the DP)."""
    source = Path(driver.__file__).with_name(f"{module}.py").read_text()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert not imported & {"stratopt.solvers.greedy", "stratopt.solvers.dp", "stratopt.solvers.local_search"}


def test_unknown_formulation_options_are_refused():
    """A misspelt back-end option is a one-line error naming the options there are."""
    from stratopt import ModelError

    with pytest.raises(ModelError, match="cpsat: unknown option 'presolv'; options: presolve"):
        solve(_chain(), "cpsat", presolv=True)
