"""``auto`` runs ``lagrange`` beside an exact run that may end without a proof: the joined result
keeps the better answer (re-checked) and the higher bound, and claims OPTIMAL only where they meet."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from stratopt import Status, StrategyProblem, evaluate, solve
from stratopt.solvers import dispatch
from stratopt.solvers.base import Limit, Result

from ..conftest import problems, reference_evaluate

pytest.importorskip("pytoulbar2")


@settings(max_examples=60, deadline=None)
@given(problems(max_vertices=5, usage=True))
def test_joined_answer_and_bound_against_brute(problem):
    """Whatever the two runs found (greedy's answer or none, lagrange's answer and bound), the
    joined answer is feasible, recomputed, no dearer than either; the bound never exceeds the
    optimum; OPTIMAL only on the optimum itself."""
    exact = solve(problem, "brute")
    if exact.status is Status.INFEASIBLE:
        return  # an exact run proves this itself: nothing is joined then
    first = solve(problem, "greedy")
    if first.status is not Status.FEASIBLE:
        first = Result("greedy", Status.NO_SOLUTION, limit=Limit.HEURISTIC)
    other = solve(problem, "lagrange", workers=0, runs=3)
    joined = dispatch._join(problem, first, other)
    assert joined.stats["beside"]["solver"] == "lagrange"
    if joined.assignment is not None:
        cost, feasible = reference_evaluate(problem, joined.assignment)
        assert feasible and cost == joined.objective
        for r in (first, other):
            if r.assignment is not None:
                assert joined.objective <= r.objective
    else:
        assert first.assignment is None and other.assignment is None
    if joined.bound is not None:
        assert joined.bound <= exact.objective
        # the method named is the run's whose bound stands
        higher = other.bound is not None and (first.bound is None or other.bound > first.bound)
        stands = other if higher else first
        assert joined.bound_method is not None and stands.bound_method is not None
        assert stands.bound_method in joined.bound_method
        assert joined.gap is not None and joined.gap >= 0.0
    if joined.status is Status.OPTIMAL:
        assert joined.objective == exact.objective == joined.bound


def test_a_bad_answer_from_beside_is_not_taken():
    """The answer from the child process is checked again where it is used: one that breaks the
    limit (however it got there) leaves the exact run's answer in place."""
    p = StrategyProblem([[0, 5], [0, 5]], [], [], intervals=[[0, 1], [0, 1]], usages=[[3, 1], [3, 1]], usage_limit=4)
    first = Result("wcsp", Status.FEASIBLE, assignment=(1, 1), objective=10, limit=Limit.TIME)
    liar = Result("lagrange", Status.FEASIBLE, assignment=(0, 0), objective=0, limit=Limit.HEURISTIC)
    joined = dispatch._join(p, first, liar)
    assert joined.assignment == (1, 1) and joined.objective == 10 and "answer_from" not in joined.stats


def _binding_problem(seed: int = 3) -> StrategyProblem:
    """40 vertices in a chain, 3 choices each, all live at once, under a limit that the
    cheapest choices break (so 'auto' passes the DP and brute force by)."""
    rng = np.random.default_rng(seed)
    n = 40
    extra = rng.integers(0, 50, size=(n, 2)).tolist()
    costs = [[0, a + 20, b + 60] for a, b in extra]  # the biggest choice is the cheapest
    edges = [(i, i + 1) for i in range(n - 1)]
    edge = [rng.integers(0, 30, size=9).tolist() for _ in edges]
    usages = [[9, 5, 2] for _ in range(n)]
    return StrategyProblem(costs, edges, edge, intervals=[[0, 1]] * n, usages=usages, usage_limit=5 * n)


def test_auto_runs_lagrange_beside_an_exact_run_without_proof(monkeypatch):
    """With a spare core, an exact run that ends without a proof (greedy stands in for one here)
    is joined by lagrange from a child process: its bound is there and the answer is the better."""
    p = _binding_problem()
    monkeypatch.setattr(dispatch, "BESIDE_MIN_SECONDS", 1.0)
    monkeypatch.setattr(dispatch, "_first_available", lambda *names: "greedy" if "wcsp" in names else names[0])
    monkeypatch.setattr(dispatch.os, "cpu_count", lambda: 2)
    r = solve(p, time_limit=6)
    optimum = solve(p, "wcsp").objective
    assert r.stats["beside"] is not None and r.stats["beside"]["solver"] == "lagrange"
    assert r.bound is not None and r.bound <= optimum <= r.objective
    assert evaluate(p, r.assignment).feasible
    assert r.objective <= min(solve(p, "greedy").objective, r.stats["beside"]["objective"] or np.inf)


def test_the_run_beside_gives_its_relaxation_the_larger_share(monkeypatch):
    """Beside an exact run lagrange is there for its bound: its relaxation gets
    BESIDE_BOUND_SHARE of the time unless the caller names a share."""
    seen = []

    class Recorder:
        def __init__(self, problem, seconds, seed, options):
            seen.append(options)

        def collect(self, wait):
            return "recorded"

        def stop(self):
            pass

    p = _binding_problem()
    monkeypatch.setattr(dispatch, "_Beside", Recorder)
    monkeypatch.setattr(dispatch, "BESIDE_MIN_SECONDS", 1.0)
    monkeypatch.setattr(dispatch, "_first_available", lambda *names: "greedy" if "wcsp" in names else names[0])
    monkeypatch.setattr(dispatch.os, "cpu_count", lambda: 2)
    dispatch.solve_auto(p, time_limit=6)
    dispatch.solve_auto(p, time_limit=6, bound_share=0.2)
    assert seen == [{"bound_share": dispatch.BESIDE_BOUND_SHARE}, {"bound_share": 0.2}]


def test_a_proof_stops_the_run_beside():
    """When the exact run proves its answer, nothing is joined (and the child is ended)."""
    p = _binding_problem()
    dispatch_min = dispatch.BESIDE_MIN_SECONDS
    try:
        dispatch.BESIDE_MIN_SECONDS = 1.0
        r = solve(p, time_limit=60)
    finally:
        dispatch.BESIDE_MIN_SECONDS = dispatch_min
    assert r.status is Status.OPTIMAL and r.solver == "wcsp" and "beside" not in r.stats


def test_a_failed_run_beside_is_reported_not_hidden():
    """A run beside that gives nothing (its error, a death, no answer in time) leaves the exact
    run's result as it was, with the reason in stats."""
    p = _binding_problem()
    first = solve(p, "greedy")
    joined = dispatch._join(p, first, "RuntimeError: toulbar2 went away")
    assert joined.stats["beside"] == {"solver": "lagrange", "error": "RuntimeError: toulbar2 went away"}
    assert (joined.status, joined.assignment, joined.bound) == (first.status, first.assignment, first.bound)
