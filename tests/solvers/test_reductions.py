"""The exact reductions: each keeps an optimum (brute force over what is left, on random problems),
lifting gives back assignments of the same cost, and the penalised (usage-free) mode keeps every
penalised minimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import Status, StrategyProblem, evaluate, solve
from stratopt.solvers.formulation import Formulation, build
from stratopt.solvers.reductions import Reducer

from ..conftest import BIG, problems


@st.composite
def follower_problems(draw, max_vertices: int = 6):
    """Random problems whose edges are often functions (each row allows one column), chains and
    cycles of them, with forbidden entries, parallel edges and usage over shared or distinct
    intervals."""
    n = draw(st.integers(2, max_vertices))
    ks = [draw(st.integers(2, 3)) for _ in range(n)]
    # A planted assignment that the forbidden entries spare, so that most problems are feasible.
    planted = [draw(st.integers(0, k - 1)) for k in ks]
    cost = st.integers(0, 20)
    # About one node cost in eight forbidden.
    node_cost = st.integers(0, 23).map(lambda x: BIG if x > 20 else x)
    node = [[0 if c == planted[v] else draw(node_cost) for c in range(k)] for v, k in enumerate(ks)]
    for v in range(n):
        node[v][planted[v]] = draw(cost)
    edges, mats = [], []
    for _ in range(draw(st.integers(1, n + 2))):
        u = draw(st.integers(0, n - 1))
        w = draw(st.integers(0, n - 2))
        v = w if w < u else w + 1
        mat = [[draw(cost) for _ in range(ks[v])] for _ in range(ks[u])]
        if draw(st.integers(0, 3)) < 3:  # mostly a function u -> v: one finite entry per row
            for a, row in enumerate(mat):
                shift = 0 if a == planted[u] else draw(st.integers(0, 1))  # 0: a shift, often a bijection
                keep = (planted[v] + a - planted[u] + shift) % ks[v]
                for b in range(ks[v]):
                    if b != keep:
                        row[b] = BIG
        edges.append((u, v))
        mats.append(mat)
    kwargs = {}
    if draw(st.booleans()):
        shared = [draw(st.integers(0, 3)) for _ in range(n)]
        intervals = [[s, s + draw(st.integers(0, 3))] if draw(st.booleans()) else [0, 3] for s in shared]
        usages = [[draw(st.integers(0, 6)) for _ in range(k)] for k in ks]
        kwargs = {"intervals": intervals, "usages": usages, "usage_limit": draw(st.integers(0, 20))}
    return StrategyProblem(node, edges, mats, **kwargs)


def _brute_over(form: Formulation, n: int) -> tuple[float | None, dict[int, int] | None]:
    """The least cost over the reduced model alone (its choices, pairs and usage rows), and the
    choices that reach it: independent of how the reductions got there."""
    free = [v for v in range(n) if len(form.choices[v])]
    pairs = [dict(zip(map(tuple, p.tolist()), c.tolist(), strict=True)) for _, _, p, c in form.edges]
    best, best_pick = None, None
    for combo in itertools.product(*(range(len(form.choices[v])) for v in free)):
        idx = dict(zip(free, combo, strict=True))
        total = form.constant + sum(float(form.costs[v][i]) for v, i in idx.items())
        ok = True
        for (u, v, _, _), table in zip(form.edges, pairs, strict=True):
            key = (int(form.choices[u][idx[u]]), int(form.choices[v][idx[v]]))
            if key not in table:
                ok = False
                break
            total += table[key]
        if ok and form.usages is not None:
            for members, room in form.usage_rows:
                if sum(float(form.usages[v][idx[v]]) for v in members.tolist()) > room:
                    ok = False
                    break
        if ok and (best is None or total < best):
            best, best_pick = total, {v: int(form.choices[v][i]) for v, i in idx.items()}
    return best, best_pick


def _check_keeps_optimum(problem: StrategyProblem, **options) -> None:
    exact = solve(problem, "brute")
    form = build(problem, **options)
    if form.infeasible:
        assert exact.status is Status.INFEASIBLE, form.infeasible
        return
    best, pick = _brute_over(form, problem.num_vertices)
    if best is None:
        assert exact.status is Status.INFEASIBLE
        return
    assert exact.status is Status.OPTIMAL
    assert best == pytest.approx(float(exact.objective))
    assert pick is not None
    lifted = evaluate(problem, form.assignment(pick))
    assert lifted.feasible and float(lifted.objective) == pytest.approx(best)


@settings(max_examples=150, deadline=None)
@given(follower_problems(), st.booleans(), st.booleans())
def test_reductions_keep_an_optimum(problem, dominance, followers):
    """Brute force over the reduced model reaches the true optimum, and its argmin lifts to an
    assignment of the original problem with the same cost (each reduction on and off)."""
    _check_keeps_optimum(problem, dominance=dominance, followers=followers)


@settings(max_examples=100, deadline=None)
@given(problems(max_vertices=6))
def test_reductions_keep_an_optimum_on_general_problems(problem):
    _check_keeps_optimum(problem)


@settings(max_examples=100, deadline=None)
@given(follower_problems(), st.lists(st.floats(0, 5), min_size=6, max_size=6))
def test_usage_free_mode_keeps_every_penalised_minimum(problem, weights):
    """``Reducer(problem, usage=False)`` merges every follower; adding each member's penalty
    ``w_m * usage`` at the choice it is implied to take gives the penalised minimum exactly."""
    if problem.usage_limit is None:
        problem = problem.replace(
            intervals=[[0, 1]] * problem.num_vertices,
            usages=[list(range(k)) for k in problem.num_choices.tolist()],
            usage_limit=100,
        )
    w = np.array(weights[: problem.num_vertices])
    free_problem = problem.replace(usage_limit=None)

    def penalised(a) -> float:
        ev = evaluate(free_problem, a)
        if not ev.feasible:
            return np.inf
        return float(ev.objective) + sum(w[v] * problem.usage(v)[c] for v, c in enumerate(a))

    truth = min(penalised(a) for a in itertools.product(*(range(k) for k in problem.num_choices.tolist())))
    red = Reducer(problem, usage=False)
    red.run(dominance=False)
    if red.infeasible:
        assert truth == np.inf
        return
    free = red.free()
    best = np.inf
    for combo in itertools.product(*(np.flatnonzero(red.allowed[v]).tolist() for v in free)):
        pick = dict(zip(free, combo, strict=True))
        total = red.constant + sum(red.node[v][c] for v, c in pick.items())
        for (u, v), mat in red.merged.items():
            total += mat[pick[u], pick[v]]
        a = red.lift(pick)
        total += sum(w[m] * problem.usage(m)[a[m]] for m in range(problem.num_vertices))
        assert total == pytest.approx(penalised(a)) or (np.isinf(total) and np.isinf(penalised(a)))
        best = min(best, total)
    assert best == pytest.approx(truth) or best == truth == np.inf


def test_a_chain_of_followers_joins_its_leader():
    """0 -> 1 -> 2 are functions (no usage): both followers merge into vertex 0, their node and
    edge costs become its node costs, and lifting picks what the edges imply."""
    f = BIG
    p = StrategyProblem(
        [[0, 5], [1, 2], [3, 0]],
        [(0, 1), (1, 2)],
        [[[f, 4], [1, f]], [[0, f], [f, 7]]],
    )
    form = build(p, dominance=False)
    assert form.stats["followers_merged"] == 2
    assert [len(c) for c in form.choices] == [2, 0, 0]
    best, pick = _brute_over(form, 3)
    assert best == solve(p, "brute").objective
    assert evaluate(p, form.assignment(pick)).objective == best


def test_a_follower_with_its_own_interval_and_varying_usage_stays():
    """A follower whose usage depends on its leader's choice, live over another interval, cannot
    join it (the usage would need two intervals); over the same interval it joins."""
    f = BIG
    kwargs = {"usages": [[1, 2], [5, 1]], "usage_limit": 6}
    apart = StrategyProblem([[0, 1], [0, 0]], [(0, 1)], [[[0, f], [f, 0]]], intervals=[[0, 2], [1, 3]], **kwargs)
    together = apart.replace(intervals=[[0, 2], [0, 2]])
    assert build(apart, dominance=False).stats["followers_merged"] == 0
    assert build(together, dominance=False).stats["followers_merged"] == 1
    for p in (apart, together):
        _check_keeps_optimum(p)


def test_duplicate_usage_rows_are_kept_once():
    """Two maximal cliques that differ only by a fixed vertex give one row with the least room."""
    p = StrategyProblem(
        [[0], [0, 1], [1, 0], [0]],
        intervals=[[0, 1], [0, 3], [0, 3], [2, 3]],
        usages=[[1], [3, 1], [1, 3], [2]],
        usage_limit=4,
    )
    form = build(p, dominance=False)
    assert form.stats["usage_rows_duplicate"] == 1 and form.usage_rows[0][1] == 2
    _check_keeps_optimum(p, dominance=False)


def test_unsupported_choices_are_dropped():
    """A choice no open choice of a neighbour allows is dropped before anything else."""
    f = BIG
    p = StrategyProblem([[0, 0, 0], [0, 0]], [(0, 1)], [[[0, 1], [f, f], [2, 0]]])
    form = build(p, dominance=False, followers=False)
    assert form.stats["choices_unsupported"] == 1 and form.choices[0].tolist() == [0, 2]
