"""Repair and polish by the reduced network's moves (a vertex with every vertex merged into it):
answers checked from scratch against the limit, costs never raised, coupled vertices moved together
where single-vertex moves are stuck."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import StrategyProblem, evaluate
from stratopt.solvers.lagrange import PenaltyModel, repair
from stratopt.solvers.lagrange.groups import GroupMoves, group_moves, polish_groups, repair_groups
from stratopt.solvers.local_search import LocalEngine

from ..conftest import all_assignments, problems, reference_evaluate
from .test_lagrange import _coupled_problem

pytest.importorskip("pytoulbar2")


def _pair(limit: int) -> StrategyProblem:
    """Vertices 0 and 1 must choose alike (unequal pairs are forbidden); choice 0 is cheap and
    big, choice 1 dear and small; vertex 2 lives beside them (``test_lagrange``'s coupled problem)."""
    return _coupled_problem().replace(usage_limit=limit)


def _moves(p: StrategyProblem) -> GroupMoves:
    model = PenaltyModel.build(p)
    assert model.network is not None
    return GroupMoves(model.network, LocalEngine(p))


def test_the_pair_is_one_network_vertex():
    """The reductions merge the coupled pair: one network vertex whose choices set both."""
    moves = _moves(_pair(4))
    groups = {
        tuple(sorted(set(moves.pair_vertex[moves.pair_row == r].tolist()))) for r in range(len(moves.pair_off) - 1)
    }
    assert (0, 1) in groups


def test_group_repair_moves_a_coupled_pair_where_single_moves_give_up():
    """Both at their big choice break the limit of 4; single-vertex repair has no allowed move,
    the network's move takes both to their small choice."""
    p = _pair(4)
    start = np.zeros(3, dtype=np.int64)
    assert repair(LocalEngine(p), start, lambda: False) is None
    fixed = repair_groups(_moves(p), start, lambda: False)
    assert fixed is not None and fixed.tolist() == [1, 1, 0]
    assert reference_evaluate(p, fixed) == (10, True)


def test_group_polish_moves_a_coupled_pair_back_where_the_limit_allows():
    """With room for both big choices (limit 11), polish by groups takes the pair from its dear
    choice to its cheap one; single-vertex descent cannot (each move alone is forbidden)."""
    p = _pair(11)
    start = np.array([1, 1, 0])
    engine = LocalEngine(p)
    alone, _, _ = engine.descend(start, guard=True)
    assert alone.tolist() == [1, 1, 0]
    polished = polish_groups(_moves(p), start, lambda: False)
    assert polished.tolist() == [0, 0, 0] and reference_evaluate(p, polished) == (0, True)


def test_group_polish_keeps_a_limit_that_only_one_of_them_could_meet():
    """At a limit of 10 the pair's big choices (5 + 5 + 1) do not fit: polish leaves it dear."""
    p = _pair(10)
    polished = polish_groups(_moves(p), np.array([1, 1, 0]), lambda: False)
    assert polished.tolist() == [1, 1, 0]


def test_moves_are_cached_per_network():
    """A worker builds the moves once per search and rebuilds them for another network."""
    p = _pair(4)
    model, engine = PenaltyModel.build(p), LocalEngine(p)
    assert model.network is not None
    first = group_moves(model.network, engine)
    assert group_moves(model.network, engine) is first
    other = PenaltyModel.build(_pair(11))
    assert other.network is not None and group_moves(other.network, LocalEngine(_pair(11))) is not first


@st.composite
def grouped_problems(draw):
    """Leaders with followers tied to them (each leader choice allows one follower choice, a
    permutation), random costs between the leaders, intervals and usages, and a limit between the
    least and the most total usage: networks whose vertices carry members."""
    big = 10**18
    leaders = draw(st.integers(1, 3))
    k = [draw(st.integers(2, 3)) for _ in range(leaders)]
    ks, edges, tables = list(k), [], []
    for leader in range(leaders):
        for _ in range(draw(st.integers(1, 2))):
            follower = len(ks)
            ks.append(k[leader])
            image = draw(st.permutations(range(k[leader])))
            edges.append((leader, follower))
            tables.append([0 if b == image[a] else big for a in range(k[leader]) for b in range(k[leader])])
    for u, v in itertools.combinations(range(leaders), 2):
        if draw(st.booleans()):
            edges.append((u, v))
            tables.append([draw(st.integers(0, 20)) for _ in range(k[u] * k[v])])
    node = [[draw(st.integers(0, 20)) for _ in range(kv)] for kv in ks]
    return with_a_limit(draw, node, edges, tables)


def with_a_limit(draw, node: list[list[int]], edges: list, tables: list) -> StrategyProblem:
    """The problem with drawn intervals (start 0-3, 1-3 slots long), usages (0-9) and a limit
    between the least and the most total usage."""
    intervals = []
    for _ in node:
        start = draw(st.integers(0, 3))
        intervals.append([start, start + draw(st.integers(1, 3))])
    usages = [[draw(st.integers(0, 9)) for _ in costs] for costs in node]
    least = sum(min(u) for u in usages)
    limit = draw(st.integers(least, least + sum(max(u) - min(u) for u in usages)))
    return StrategyProblem(node, edges, tables, intervals=intervals, usages=usages, usage_limit=limit)


@settings(max_examples=150, deadline=None)
@given(st.one_of(problems(max_vertices=5, usage=True), grouped_problems()), st.randoms(use_true_random=False))
def test_group_moves_keep_the_limit_and_never_raise_the_cost(problem, rnd):
    """On small random problems (forbidden entries, parallel edges): from any assignment the
    network lifts to that takes no forbidden entry (as no toulbar2 answer does), a group repair
    that answers keeps the limit and takes none (checked time step by time step); from any
    feasible assignment, group polish keeps it feasible and costs no more."""
    model = PenaltyModel.build(problem)
    net = model.network
    if net is None or not len(net.k):
        return
    moves = GroupMoves(net, LocalEngine(problem))
    unlimited = problem.replace(usage_limit=None)
    lifted = [net.lift(np.array(values)) for values in itertools.product(*[range(k) for k in net.k.tolist()])]
    lifted = [a for a in lifted if reference_evaluate(unlimited, a.tolist())[1]]
    for a in rnd.sample(lifted, min(4, len(lifted))):
        fixed = repair_groups(moves, a, lambda: False)
        if fixed is not None:
            assert reference_evaluate(problem, fixed.tolist())[1]
    feasible = [a for a in all_assignments(problem) if reference_evaluate(problem, a)[1]]
    for a in rnd.sample(feasible, min(4, len(feasible))):
        start = np.array(a, dtype=np.int64)
        polished = polish_groups(moves, start, lambda: False)
        cost, ok = reference_evaluate(problem, polished.tolist())
        assert ok and cost <= evaluate(problem, start).objective


def test_repairs_use_the_network_only_near_the_limit():
    """Among a run's repairs, the network's moves come in within GROUP_REPAIR_EXCESS times the
    limit: the pair at its big choices uses 11, which a limit of 10 repairs (the pair moves
    together) and a limit of 4 (2.75 times over) leaves to the next weights."""
    from stratopt.solvers.lagrange.repair import GROUP_REPAIR_EXCESS, repairs

    start = np.zeros(3, dtype=np.int64)
    near, far = _pair(10), _pair(4)
    assert GROUP_REPAIR_EXCESS * 4 < 11 <= GROUP_REPAIR_EXCESS * 10
    fixed = repairs(PenaltyModel.build(near), LocalEngine(near), start, lambda: 60.0, 1)
    assert [a.tolist() for a in fixed] == [[1, 1, 0]] and reference_evaluate(near, [1, 1, 0])[1]
    assert repairs(PenaltyModel.build(far), LocalEngine(far), start, lambda: 60.0, 1) == []
