"""The weighted-CSP encoding (toulbar2): counts, exactness against brute force, honest statuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import Limit, Status, StrategyProblem, load_problem, solve

from ..conftest import costs_times, problems

pytest.importorskip("pytoulbar2")


def test_encoding_counts_on_the_example():
    """The example: the presolve leaves three free vertices and one edge; one knapsack row."""
    from stratopt.solvers.wcsp import Wcsp

    enc = Wcsp().build(load_problem("example"))
    assert enc.stats["variables"] == 3 and len(enc.binary) == 1 and len(enc.knapsacks) == 1
    assert enc.top > sum(max(c) for c in enc.unary.values())
    ((terms, room),) = enc.knapsacks
    ((members, left),) = enc.formulation.usage_rows
    # The limit 50 less what the vertices the presolve fixed use there; one term per nonzero usage.
    assert room == left == 40 and {v for v, *_ in terms} == set(members.tolist())
    assert all(use > 0 for *_, use in terms)


@settings(max_examples=150, deadline=None)
@given(problems(max_vertices=5))
def test_wcsp_equals_brute(problem):
    """toulbar2, with and without usage limits and forbidden entries, reaches brute force's optimum
    (OPTIMAL, bound = objective) or proves infeasibility, with and without greedy's hint."""
    exact = solve(problem, "brute")
    for hint in (True, False):
        r = solve(problem, "wcsp", hint=hint)
        assert r.status is exact.status, (hint, r.stats)
        if exact.status is Status.OPTIMAL:
            assert r.objective == exact.objective == r.bound


@settings(max_examples=40, deadline=None)
@given(problems(max_vertices=4), st.floats(0.001, 1000.0))
def test_wcsp_float_costs_bound_below_the_optimum(problem, factor):
    """Float costs: the bound never exceeds brute force's optimum; OPTIMAL only when nothing was
    rounded, else FEASIBLE with Limit.PRECISION."""
    scaled = costs_times(problem, factor)
    exact = solve(scaled, "brute")
    r = solve(scaled, "wcsp")
    if exact.status is not Status.OPTIMAL:
        assert r.status is exact.status
        return
    error = r.stats["rounding_error"]
    assert r.status is (Status.OPTIMAL if error == 0 else Status.FEASIBLE)
    assert r.bound <= exact.objective + 1e-9 * max(1.0, abs(exact.objective))
    assert r.objective <= exact.objective + 2 * error + 1e-9 * max(1.0, abs(exact.objective))


def test_time_limited_run_is_anytime():
    """A run stopped by its limit keeps what it found (or greedy's hint) with toulbar2's bound."""
    rng = np.random.default_rng(0)
    n = 60
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < 0.3]
    p = StrategyProblem(rng.integers(0, 100, (n, 6)).tolist(), edges, [rng.integers(0, 100, (6, 6)) for _ in edges])
    r = solve(p, "wcsp", time_limit=1)
    assert r.status in (Status.OPTIMAL, Status.FEASIBLE)
    if r.status is Status.FEASIBLE:
        assert r.limit is Limit.TIME and r.bound <= r.objective


def test_non_integer_usages_are_refused():
    """Knapsack rows need integer usages: fractional ones are a clear refusal, not a wrong answer."""
    from stratopt import UnsupportedProblemError

    p = StrategyProblem(
        [[1, 2], [1, 2]],
        [(0, 1)],
        [[[0, 1], [1, 0]]],
        intervals=[[0, 2], [1, 3]],
        usages=[[1.5, 1], [1, 1]],
        usage_limit=2,
    )
    with pytest.raises(UnsupportedProblemError, match="integer usages"):
        solve(p, "wcsp")


def test_a_hint_with_a_dominated_choice():
    """Vertex 2's choice 0 is dropped by the presolve (choice 2 dominates it); a hint that uses it
    still bounds the search correctly (it used to fail looking the choice up)."""
    p = load_problem("example")
    r = solve(p, "wcsp", hint=[0, 0, 0, 1, 0])
    assert r.stats["hint_objective"] == 475
    assert r.status is Status.OPTIMAL and r.objective == 445


def test_too_many_usage_terms_are_refused_at_once(monkeypatch):
    """Usage rows too large for toulbar2's knapsack constraints are refused before anything is
    built, naming the count (IOPDDL S and P have over 300 million terms)."""
    from stratopt import UnsupportedProblemError
    from stratopt.solvers import wcsp

    monkeypatch.setattr(wcsp, "MAX_KNAPSACK_TERMS", 2)
    with pytest.raises(UnsupportedProblemError, match="the usage rows have 4 terms in all"):
        solve(load_problem("example"), "wcsp")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 9), min_size=2, max_size=3), min_size=1, max_size=4),
    st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 6)), max_size=6), max_size=3),
    st.lists(st.integers(0, 12), min_size=3, max_size=3),
)
def test_posted_knapsack_rows_mean_what_they_say(unary, rows, capacities):
    """Rows posted by ``post_knapsack`` (terms on any variables, a variable twice, values of any
    usage): toulbar2's optimum equals brute force over the assignments that meet every row."""
    import itertools

    pytoulbar2 = pytest.importorskip("pytoulbar2")
    from stratopt.solvers.wcsp import post_knapsack

    n = len(unary)
    rows = [[(v % n, c % len(unary[v % n]), use) for v, c, use in terms] for terms in rows]
    rows = [terms for terms in rows if terms]

    def meets(x) -> bool:
        return all(
            sum(u for v, c, u in terms if x[v] == c) <= cap for terms, cap in zip(rows, capacities, strict=False)
        )

    allowed = [
        sum(unary[v][c] for v, c in enumerate(x)) for x in itertools.product(*map(range, map(len, unary))) if meets(x)
    ]
    cfn = pytoulbar2.CFN(ubinit=1000, verbose=-1)
    try:
        for v, costs in enumerate(unary):
            cfn.AddVariable(f"x{v}", range(len(costs)))
            cfn.AddFunction([v], costs)
        for terms, cap in zip(rows, capacities, strict=False):
            post_knapsack(cfn, terms, cap)
        found = cfn.Solve(timeLimit=20)
    except cfn.Contradiction:
        found = None
    finally:
        cfn.CFN.timerStop()
    if not allowed:
        assert found is None
    else:
        assert found is not None and found[1] == min(allowed) and meets(found[0])
