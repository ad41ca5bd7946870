"""The greedy heuristic: never better than the optimum, feasible answers, sound proofs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from stratopt import Limit, Status, StrategyProblem, load_problem, solve
from stratopt.solvers.local_search import Domains, LocalEngine

from ..conftest import BIG, problems


@given(problems(max_vertices=6))
def test_greedy_against_brute(problem):
    """Greedy's answer is feasible and no better than the optimum; its INFEASIBLE is a real proof."""
    exact = solve(problem, "brute")
    r = solve(problem, "greedy", seed=0)
    assert r.status is not Status.ERROR, r.stats
    if r.status is Status.INFEASIBLE:
        assert exact.status is Status.INFEASIBLE
    if exact.status is Status.INFEASIBLE:
        assert r.status in (Status.INFEASIBLE, Status.NO_SOLUTION)
    if r.status is Status.FEASIBLE:
        assert r.objective >= exact.objective and r.limit is not None and r.bound is None


def test_example():
    """On the contest example greedy reaches a feasible answer no better than 445."""
    r = solve(load_problem("example"), "greedy")
    assert r.status is Status.FEASIBLE and r.objective >= 445 and r.limit is Limit.HEURISTIC


def test_infeasible_by_least_usage():
    """If every vertex at its least usage exceeds the limit, greedy proves infeasibility."""
    p = StrategyProblem([[0, 0], [0]], intervals=[[0, 2], [1, 3]], usages=[[4, 3], [3]], usage_limit=5)
    r = solve(p, "greedy")
    assert r.status is Status.INFEASIBLE and "least usage" in r.stats["proof"]


def test_infeasible_by_arc_consistency():
    """Forbidden pairs that empty a domain under arc consistency prove infeasibility."""
    ok, no = 0, BIG
    p = StrategyProblem([[0, 0], [no, 0]], [(0, 1)], [[[ok, no], [ok, no]]])
    r = solve(p, "greedy")
    assert r.status is Status.INFEASIBLE and "arc consistency" in r.stats["proof"]
    assert solve(p, "brute").status is Status.INFEASIBLE


def test_no_false_proof_on_an_odd_cycle():
    """An arc-consistent but unsatisfiable triangle gets NO_SOLUTION from greedy, never INFEASIBLE."""
    ok, no = 0, BIG
    same, differ = [[ok, no], [no, ok]], [[no, ok], [ok, no]]
    p = StrategyProblem([[0, 0]] * 3, [(0, 1), (1, 2), (0, 2)], [same, same, differ])
    assert solve(p, "brute").status is Status.INFEASIBLE
    r = solve(p, "greedy")
    assert r.status is Status.NO_SOLUTION and r.limit is not None


def test_arc_consistency_keeps_every_allowed_assignment():
    """Pruning removes only choices that no allowed assignment uses."""
    ok, no = 0, BIG
    p = StrategyProblem([[0, 0, 0], [0, 0]], [(0, 1)], [[[ok, no], [no, no], [no, ok]]])
    d = Domains(p)
    assert d.propagate(list(d.allowed))
    assert d.domain(0).tolist() == [True, False, True] and d.domain(1).tolist() == [True, True]


def test_forest_step_never_raises_cost():
    """An exact forest step on a chain finds the chain's optimum from any start."""
    p = StrategyProblem([[0, 5], [5, 0], [0, 5]], [(0, 1), (1, 2)], [[[9, 0], [0, 9]], [[9, 0], [0, 9]]])
    import numpy as np

    from stratopt.solvers.local_search import InducedForest

    engine = LocalEngine(p)
    forest = InducedForest(engine, np.arange(3))
    a, gain = forest.step(np.array([1, 0, 1]))
    assert engine.total_cost(a) == solve(p, "brute").objective and gain > 0


def test_greedy_is_reproducible():
    """Without a seed greedy is deterministic; the seed only changes the forest orders."""
    p = StrategyProblem(
        [[3, 1, 2]] * 6,
        [(i, i + 1) for i in range(5)] + [(0, 5)],
        [[[0, 4, 4], [4, 0, 4], [4, 4, 0]]] * 6,
    )
    assert solve(p, "greedy").assignment == solve(p, "greedy").assignment
    assert solve(p, "greedy", seed=3).assignment == solve(p, "greedy", seed=3).assignment


def test_window_covering_the_graph_reaches_the_optimum():
    """A window as large as the problem is an exact DP solve: one step reaches the optimum."""
    from stratopt.solvers.window_search import WindowSearch

    rng = np.random.default_rng(5)
    edges = [(v, v + 1) for v in range(9)] + [(0, 5), (2, 7)]
    p = StrategyProblem(rng.integers(0, 20, (10, 3)).tolist(), edges, [rng.integers(0, 20, (3, 3)) for _ in edges])
    engine = LocalEngine(p)
    search = WindowSearch(engine, np.random.default_rng(0), size=10)
    a = np.zeros(10, dtype=np.int64)
    a, cost = search.step(a, engine.total_cost(a), lambda _: True)
    assert cost == solve(p, "brute").objective


@settings(max_examples=25)
@given(problems(max_vertices=6))
def test_timed_greedy_stays_feasible_and_above_optimum(problem):
    """With a time limit (window search on), answers stay feasible and never beat the optimum."""
    exact = solve(problem, "brute")
    r = solve(problem, "greedy", time_limit=0.1)
    assert r.status is not Status.ERROR, r.stats
    if r.status is Status.FEASIBLE:
        assert exact.status is Status.OPTIMAL and r.objective >= exact.objective and r.limit is Limit.TIME


def test_zero_usage_limit():
    """A limit of zero is handled (only zero-usage choices fit) without arithmetic warnings."""
    p = StrategyProblem(
        [[0, 5], [0, 5]],
        [(0, 1)],
        [[[9, 0], [0, 9]]],
        intervals=[[0, 2], [1, 3]],
        usages=[[3, 0], [3, 0]],
        usage_limit=0,
    )
    r = solve(p, "greedy")
    assert r.status is Status.FEASIBLE and r.assignment == (1, 1)
