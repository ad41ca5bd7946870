"""CP-SAT and the shared formulation: counts, exactness against brute force, status mapping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import Limit, Status, StrategyProblem, load_problem, solve
from stratopt.solvers.formulation import _maximal_cliques, build

from ..conftest import BIG, costs_times, problems

cp_model = pytest.importorskip("ortools.sat.python.cp_model")


def test_formulation_counts_on_the_example():
    """The example: two single-choice vertices fold away; what is left is small and countable."""
    form = build(load_problem("example"))
    assert form.fixed == {0: 0, 4: 0}
    # Vertex 2 keeps no edge; its choice 0 (cost 25 + 50 + 60, usage 15) is dominated by
    # choice 2 (35 + 40 + 30, usage 15). Choice 1 is cheaper still but uses more memory.
    assert form.choices[2].tolist() == [1, 2] and form.stats["choices_dominated"] == 1
    assert (form.num_x, form.num_y) == (6, 4)  # vertices 1, 2, 3; the one edge 1 -> 3 left
    assert form.num_rows == 3 + (2 + 2) + 1  # exactly-one, marginals, one usage row
    assert form.constant == 15 + 95 + 0  # the fixed vertices' own costs (their edges became node costs)


def test_forbidden_pairs_get_no_variable():
    """Forbidden choices and pairs are dropped before building."""
    p = StrategyProblem([[0, 0, BIG], [0, 0]], [(0, 1)], [[[1, BIG], [2, 3], [4, 5]]])
    form = build(p, dominance=False)
    assert form.choices[0].tolist() == [0, 1] and form.num_y == 3
    # With dominance: vertex 1's choice 0 is never worse than its choice 1, which leaves vertex 0
    # without edges and its choice 0 the cheaper: everything folds away.
    form = build(p)
    assert form.fixed == {0: 0, 1: 0} and form.num_x == 0 and form.constant == 1


def test_parallel_edges_are_merged():
    """Two edges between the same pair become one set of y variables."""
    p = StrategyProblem([[0, 0], [0, 0]], [(0, 1), (1, 0)], [[[0, 1], [2, 3]], [[5, 0], [0, 5]]])
    form = build(p)
    assert form.stats["parallel_edges_merged"] == 1 and len(form.edges) == 1


def test_separable_edges_become_node_costs():
    """An edge whose cost is f(a) + g(b) (a constant included) needs no variables."""
    p = StrategyProblem([[0, 5, 9], [1, 0]], [(0, 1), (1, 0)], [[[1, 4], [2, 5], [7, 10]], [[3, 3, 3], [3, 3, 3]]])
    form = build(p, dominance=False)
    assert form.stats["separable_edges"] == 1 and form.num_y == 0
    assert solve(p, "cpsat").objective == solve(p, "brute").objective


def test_dominance_keeps_what_the_usage_limit_needs():
    """A cheaper choice that uses more memory does not dominate; one that is never worse does."""
    # Vertex 0: choice 1 is cheaper everywhere, but heavier; choice 2 is as light as 0 and never worse.
    p = StrategyProblem(
        [[5, 1, 4], [2, 0]],
        [(0, 1)],
        [[[0, 3], [0, 3], [1, 2]]],
        intervals=[[0, 1], [0, 1]],
        usages=[[1, 9, 1], [1, 1]],
        usage_limit=5,
    )
    form = build(p)
    assert form.choices[0].tolist() == [1, 2] and form.stats["choices_dominated"] == 1
    assert solve(p, "cpsat").objective == solve(p, "brute").objective == 6


@settings(max_examples=60)
@given(problems(max_vertices=6))
def test_presolve_keeps_an_optimum(problem):
    """Brute force over the presolved choices alone reaches the true optimum (or both prove
    infeasibility): the presolve only removes what an optimal assignment can do without."""
    import itertools

    from stratopt import evaluate

    exact = solve(problem, "brute")
    form = build(problem)
    if form.infeasible:
        assert exact.status is Status.INFEASIBLE
        return
    domains = [[form.fixed[v]] if v in form.fixed else form.choices[v].tolist() for v in range(problem.num_vertices)]
    best = None
    for a in itertools.product(*domains):
        ev = evaluate(problem, a)
        if ev.feasible and (best is None or ev.objective < best):
            best = ev.objective
    assert best == exact.objective


def test_maximal_cliques_of_intervals():
    """Only live sets contained in no other one give usage rows."""

    iv = np.array([[0, 4], [1, 2], [3, 6], [5, 7], [2, 2]])
    assert sorted(map(sorted, _maximal_cliques(iv))) == [[0, 1], [0, 2], [2, 3]]


@settings(max_examples=40)
@given(problems(max_vertices=5))
def test_cpsat_equals_brute(problem):
    """CP-SAT, usage limits included, finds brute force's optimum or proves infeasibility."""
    exact = solve(problem, "brute")
    r = solve(problem, "cpsat", time_limit=20)
    assert r.status is exact.status
    if exact.status is Status.OPTIMAL:
        assert r.objective == exact.objective == r.bound


def test_every_cpsat_status_is_mapped():
    """Each value of CP-SAT's status enum maps to one of ours."""
    from ortools.sat import cp_model_pb2

    from stratopt.solvers.cpsat import map_status

    names = cp_model_pb2.CpSolverStatus.keys()
    assert set(names) == {"UNKNOWN", "MODEL_INVALID", "FEASIBLE", "INFEASIBLE", "OPTIMAL"}
    for name in names:
        status, limit = map_status(name)
        assert (limit is not None) == (status in (Status.FEASIBLE, Status.NO_SOLUTION))


def test_float_costs_report_rounding():
    """Float costs that the scaling rounds: the answer is FEASIBLE (Limit.PRECISION), never
    OPTIMAL, and the bound is lowered by the reported rounding error (below brute's optimum)."""
    p = StrategyProblem([[0.25, 1.5], [0.75, 0.1]], [(0, 1)], [[[0.0, 2.5], [2.5, 0.0]]])
    r = solve(p, "cpsat")
    optimum = solve(p, "brute").objective
    assert r.status is Status.FEASIBLE and r.limit is Limit.PRECISION
    assert r.objective == pytest.approx(optimum)
    assert 0 < r.stats["rounding_error"] < 1e-6
    assert r.bound <= optimum and r.bound >= optimum - 2 * r.stats["rounding_error"]


def test_dyadic_float_costs_scale_exactly():
    """Costs that a power-of-two scale makes integral lose nothing: OPTIMAL with error 0."""
    p = StrategyProblem([[0.25, 1.5], [0.75, 0.125]], [(0, 1)], [[[0.0, 2.5], [2.5, 0.0]]])
    r = solve(p, "cpsat")
    assert r.status is Status.OPTIMAL and r.stats["rounding_error"] == 0
    assert r.objective == r.bound == solve(p, "brute").objective


@settings(max_examples=40, deadline=None)
@given(problems(max_vertices=4), st.floats(0.001, 1000.0))
def test_cpsat_float_bound_never_exceeds_the_optimum(problem, factor):
    """Random problems with every cost multiplied by a float: CP-SAT's bound is at most brute
    force's optimum, its answer within twice the rounding error of it, OPTIMAL only when exact."""
    scaled = costs_times(problem, factor)
    exact = solve(scaled, "brute")
    r = solve(scaled, "cpsat", time_limit=60)
    if exact.status is not Status.OPTIMAL:
        assert r.status is exact.status
        return
    error = r.stats["rounding_error"]
    assert r.status is (Status.OPTIMAL if error == 0 else Status.FEASIBLE)
    assert r.bound <= exact.objective + 1e-9 * max(1.0, abs(exact.objective))
    assert r.objective <= exact.objective + 2 * error + 1e-9 * max(1.0, abs(exact.objective))


def test_auto_uses_an_exact_formulation_when_the_limit_binds():
    """Beyond brute's range, 'auto' answers a binding usage limit with toulbar2 (HiGHS where the
    usages are fractional), exactly."""

    rng = np.random.default_rng(3)
    n = 10  # 4**10 assignments: past 'auto's brute range, within brute's own
    edges = [(v, v + 1) for v in range(n - 1)] + [(0, 5), (3, 8)]
    node = [[0, 1, 2, 3]] * n
    p = StrategyProblem(
        node,
        edges,
        [rng.integers(0, 3, (4, 4)) for _ in edges],
        intervals=[[0, 1]] * n,
        usages=[[3, 2, 1, 0]] * n,
        usage_limit=15,
    )
    r = solve(p)
    assert r.solver == "wcsp" and r.status is Status.OPTIMAL
    assert r.objective == solve(p, "brute").objective
    fractional = p.replace(usages=[[1.5, 1, 0.5, 0]] * n, usage_limit=7)
    r = solve(fractional)
    assert r.solver == "mip-highs" and r.status is Status.OPTIMAL
    assert r.objective == solve(fractional, "brute").objective


def test_unknown_status_falls_back_to_the_hint(monkeypatch):
    """If CP-SAT ends with nothing (UNKNOWN), the feasible greedy hint is returned, marked as such."""
    from stratopt import Limit
    from stratopt.solvers import cpsat

    monkeypatch.setattr(cpsat, "map_status", lambda name: (Status.NO_SOLUTION, Limit.TIME))
    p = load_problem("example")
    r = solve(p, "cpsat")
    assert r.status is Status.FEASIBLE and r.stats["answer_from"] == "hint"
    assert r.objective >= 445 and r.bound <= 445 and r.limit is Limit.TIME


def test_presolve_stops_when_a_fold_proves_infeasibility():
    """Dominance empties vertex 2 down to choice 1, whose fold leaves vertex 1 nothing allowed:
    the presolve reports infeasibility (it used to test dominance on the empty domain and crash)."""
    f = BIG
    p = StrategyProblem(
        [[0, f, 0], [0, 0, f], [0, 0], [0]],
        [(0, 1), (1, 2)],
        [
            [[f, 0, 0], [0, 0, f], [0, f, 0]],
            [[f, f], [f, f], [0, f]],
        ],
    )
    # (Arc consistency now finds the empty domain at vertex 2 first: either proves it.)
    assert build(p).infeasible in {f"vertex {v} has no allowed choice left" for v in (1, 2)}
    assert solve(p, "cpsat").status is solve(p, "brute").status is Status.INFEASIBLE
