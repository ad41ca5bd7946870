"""Solution merging: two answers re-solved together where they differ, checked against brute force
over the same restricted choices, and the elite pool that picks the pairs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import stratopt.solvers.lagrange.merge as merge
from stratopt import Status, StrategyProblem, solve
from stratopt.solvers.lagrange import PenaltyModel
from stratopt.solvers.lagrange.merge import Elite, MergeJob, merge_job
from stratopt.solvers.local_search import LocalEngine

from ..conftest import all_assignments, problems, reference_evaluate
from .test_lagrange_groups import grouped_problems, with_a_limit

pytest.importorskip("pytoulbar2")


def _restricted_optimum(problem: StrategyProblem, a: list[int], b: list[int]) -> int | None:
    """The least cost of a feasible assignment taking each vertex's value from ``a`` or ``b``."""
    best = None
    for x in itertools.product(*({u, v} for u, v in zip(a, b, strict=True))):
        cost, ok = reference_evaluate(problem, x)
        if ok and (best is None or cost < best):
            best = cost
    return best


@st.composite
def limited_problems(draw):
    """3-6 vertices of 2-3 choices, random costs on a few edges, overlapping intervals, and a limit
    between the least and the most total usage: many feasible assignments, some slots tight."""
    n = draw(st.integers(3, 6))
    ks = [draw(st.integers(2, 3)) for _ in range(n)]
    node = [[draw(st.integers(0, 30)) for _ in range(k)] for k in ks]
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=n + 2))
    edges = [(u, v) for u, v in pairs if u != v]
    tables = [[draw(st.integers(0, 20)) for _ in range(ks[u] * ks[v])] for u, v in edges]
    return with_a_limit(draw, node, edges, tables)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(problems(max_vertices=6, usage=True), limited_problems(), grouped_problems()),
    st.randoms(use_true_random=False),
)
def test_a_merge_is_the_optimum_over_both_answers_choices(problem, rnd):
    """From two feasible answers (the cheaper first), the merge keeps the limit (checked time step
    by time step) and costs exactly the least any mix of their values costs: toulbar2 proves the
    restricted problem's optimum on these sizes, never above the cheaper answer."""
    feasible = [list(a) for a in all_assignments(problem) if reference_evaluate(problem, a)[1]]
    if len(feasible) < 2:
        return
    a, b = sorted(rnd.sample(feasible, 2), key=lambda x: reference_evaluate(problem, x)[0])
    model, engine = PenaltyModel.build(problem), LocalEngine(problem)
    out = merge.merge(model, engine, np.array([a, b]), 30.0, 1)
    assert out is not None
    cost, ok = reference_evaluate(problem, out.tolist())
    assert ok and cost == _restricted_optimum(problem, a, b) <= reference_evaluate(problem, a)[0]
    assert all(x in (u, v) for x, u, v in zip(out.tolist(), a, b, strict=True))
    event("merged" if cost < reference_evaluate(problem, a)[0] else "kept the cheaper")


def _two_slot_problem() -> StrategyProblem:
    """Four vertices in two time slots (0, 1 live in slot 0; 2, 3 in slot 1), each with a cheap
    big choice (0: cost 0, usage 5) and a dear small one (1: cost 10, usage 1), limit 6: each slot
    fits one big choice. Answer A is cheap in slot 0 only, B in slot 1 only; their merge, cheap in
    both, is the optimum."""
    return StrategyProblem(
        [[0, 10]] * 4,
        [],
        [],
        intervals=[[0, 1], [0, 1], [1, 2], [1, 2]],
        usages=[[5, 1]] * 4,
        usage_limit=6,
    )


def test_a_merge_takes_the_good_half_of_each_answer():
    p = _two_slot_problem()
    a, b = [0, 1, 1, 1], [1, 1, 0, 1]
    assert reference_evaluate(p, a) == (30, True) and reference_evaluate(p, b) == (30, True)
    model, engine = PenaltyModel.build(p), LocalEngine(p)
    outcome = merge_job(model, engine, MergeJob(np.array([a, b]), 10.0, 1), 30.0)
    assert outcome.free == 2 and [x.tolist() for x in outcome.fixed] == [[0, 1, 0, 1]]
    assert reference_evaluate(p, [0, 1, 0, 1]) == (20, True) == (solve(p, "brute").objective, True)


def _slots_problem(slots: int) -> StrategyProblem:
    """``slots`` time slots of two vertices each (as :func:`_two_slot_problem`, laid end to end)."""
    return StrategyProblem(
        [[0, 10]] * (2 * slots),
        [],
        [],
        intervals=[[t, t + 1] for t in range(slots) for _ in range(2)],
        usages=[[5, 1]] * (2 * slots),
        usage_limit=6,
    )


def test_a_merge_too_large_whole_is_made_in_windows_of_time(monkeypatch):
    """Six slots of two vertices (as :func:`_two_slot_problem`, end to end), three kinds in turn:
    both answers cost 10 with one big choice each way (both vertices free: a knapsack row of two
    terms), B cheaper, A cheaper. Both answers cost 80, their best mix 60. With room for two terms,
    the whole merge (four) is refused; in windows of time it reaches 60. Without windows, nothing."""
    p = _slots_problem(6)
    kinds_a, kinds_b = [(0, 1), (1, 1), (0, 1)], [(1, 0), (0, 1), (1, 1)]
    a = [x for t in range(6) for x in kinds_a[t % 3]]
    b = [x for t in range(6) for x in kinds_b[t % 3]]
    assert reference_evaluate(p, a) == (80, True) == reference_evaluate(p, b)
    model, engine = PenaltyModel.build(p), LocalEngine(p)
    monkeypatch.setattr(merge, "MERGE_MAX_TERMS", 2)
    out = merge.merge(model, engine, np.array([a, b]), 30.0, 1)
    assert out is not None
    assert reference_evaluate(p, out.tolist()) == (60, True) == (solve(p, "brute").objective, True)
    monkeypatch.setattr(merge, "WINDOWS", 0)
    assert merge.merge(model, engine, np.array([a, b]), 30.0, 1) is None


def test_a_merge_of_equal_answers_is_nothing_to_do():
    p = _two_slot_problem()
    model, engine = PenaltyModel.build(p), LocalEngine(p)
    a = np.array([0, 1, 1, 1])
    assert merge.merge(model, engine, np.stack([a, a]), 10.0, 1) is None


def test_the_elite_keeps_the_best_distinct_answers():
    elite = Elite(size=3)
    for cost, values in [(5.0, [0, 0]), (3.0, [1, 0]), (5.0, [0, 0]), (9.0, [1, 1]), (4.0, [0, 1]), (8.0, [2, 2])]:
        elite.offer(np.array(values), cost)
    assert [(m.cost, m.a.tolist()) for m in elite.members] == [(3.0, [1, 0]), (4.0, [0, 1]), (5.0, [0, 0])]


def test_the_elite_pairs_the_best_with_each_answer_once():
    """The best is merged with the cheapest answer it has not absorbed; a merge's result that
    becomes the best has absorbed what was absorbed and what it was made from; a run's answer that
    becomes the best absorbs them all again."""
    elite = Elite()
    elite.offer(np.array([0, 0]), 10.0)
    elite.offer(np.array([1, 0]), 12.0)
    elite.offer(np.array([0, 1]), 11.0)
    pair = elite.next_pair()
    assert pair is not None and pair.tolist() == [[0, 0], [0, 1]]
    pair = elite.next_pair()
    assert pair is not None and pair.tolist() == [[0, 0], [1, 0]]
    assert elite.next_pair() is None
    made_from = [np.array([0, 0]).tobytes(), np.array([1, 0]).tobytes()]
    elite.offer(np.array([1, 1]), 9.0, made_from)  # a merge's result: nothing new to absorb
    assert elite.next_pair() is None
    elite.offer(np.array([2, 2]), 8.0)  # a run's answer, the new best: every other is new to it
    pairs = [elite.next_pair() for _ in range(4)]
    assert [p.tolist()[1] for p in pairs if p is not None] == [[1, 1], [0, 0], [0, 1], [1, 0]]
    assert pairs[-1] is not None and elite.next_pair() is None


def test_the_search_merges_and_its_answer_stays_exact():
    """A search on a random problem with a usage limit merges its answers (each merge recorded),
    and its answer is feasible at the cost it claims, recomputed from scratch."""
    rng = np.random.default_rng(3)
    n = 24
    node = [rng.integers(0, 50, 3).tolist() for _ in range(n)]
    edges = [(v, v + 1) for v in range(n - 1)] + [(v, v + 3) for v in range(n - 3)]
    tables = [rng.integers(0, 30, 9).tolist() for _ in edges]
    intervals = [[v // 2, v // 2 + 4] for v in range(n)]
    usages = [rng.integers(1, 9, 3).tolist() for _ in range(n)]
    p = StrategyProblem(node, edges, tables, intervals=intervals, usages=usages, usage_limit=30)
    r = solve(p, "lagrange", workers=0, runs=10)
    assert r.status is Status.FEASIBLE and r.assignment is not None
    assert reference_evaluate(p, r.assignment) == (r.objective, True)
    merges = r.stats["merges"]
    assert merges and all(m["free"] > 0 for m in merges)
    assert min(m["cost"] for m in merges) >= r.objective
