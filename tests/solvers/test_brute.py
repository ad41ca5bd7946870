"""Brute force: the reference every other solver is measured against."""

from __future__ import annotations

import pytest
from hypothesis import given

from stratopt import Status, StrategyProblem, UnsupportedProblemError, load_problem, solve

from ..conftest import all_assignments, problems, reference_evaluate


def test_example_optimum():
    """The contest example: 445 at [0, 0, 2, 1, 0] with its usage limit, 415 without it."""
    p = load_problem("example")
    r = solve(p, "brute")
    assert (r.status, r.objective, r.assignment, r.bound) == (Status.OPTIMAL, 445, (0, 0, 2, 1, 0), 445)
    r = solve(p.replace(usage_limit=None), "brute")
    assert (r.status, r.objective, r.assignment) == (Status.OPTIMAL, 415, (0, 0, 1, 1, 0))


@given(problems())
def test_brute_is_never_beaten(problem):
    """No assignment is feasible and cheaper than brute's; ties go to the first in lexicographic order."""
    scored = [(reference_evaluate(problem, a), a) for a in all_assignments(problem)]
    feasible = [(cost, a) for (cost, ok), a in scored if ok]
    r = solve(problem, "brute")
    if not feasible:
        assert r.status is Status.INFEASIBLE and r.assignment is None
        return
    best_cost = min(cost for cost, _ in feasible)
    first_best = next(a for cost, a in feasible if cost == best_cost)
    assert r.status is Status.OPTIMAL
    assert r.objective == best_cost == r.bound
    assert r.assignment == first_best


def test_refuses_beyond_the_stated_limit():
    """Brute force refuses a problem with more assignments than max_strategies, and says so."""
    p = StrategyProblem([[0, 1, 2, 3]] * 12)
    with pytest.raises(UnsupportedProblemError, match=r"1\.68e\+07 assignments, more than max_strategies=2000000"):
        solve(p, "brute")
    assert solve(p, "brute", max_strategies=20_000_000).objective == 0


def test_infeasible_usage_limit():
    """When no assignment fits the usage limit the status is INFEASIBLE, not an exception."""
    p = load_problem("example").replace(usage_limit=10)
    r = solve(p, "brute")
    assert r.status is Status.INFEASIBLE and r.objective is None and r.limit is None
