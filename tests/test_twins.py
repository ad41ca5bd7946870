"""One choice per split (``stratopt.planning.twins``): twins (the same split with its weights sharded,
or its outputs recomputed) share their rows of every edge table, and the DP on the smaller problem
gives the full problem's optimum at any memory price."""

from __future__ import annotations

import numpy as np
import pytest

from stratopt.instances import load_instance
from stratopt.planning.cluster import cluster, price
from stratopt.planning.memory import exact_dp
from stratopt.planning.twins import Twins
from stratopt.problem import evaluate


@pytest.fixture(scope="module", params=["gpt", "alexnet"])
def costing(request):
    where = cluster(1, 4, "h100")
    return price(load_instance(request.param), where.devices, where.machine, recompute=True)


def test_twins_share_their_edge_rows(costing) -> None:
    """The premise: choices with the same configuration row have the same rows (and columns) in
    every edge table, and recomputation and sharding make such twins."""
    twins = Twins(costing.problem, costing.configs)
    assert twins.shrinks
    assert sum(len(m) for m in twins.members) < sum(len(c) for c in costing.configs)
    for e, (u, v) in enumerate(costing.problem.edges.tolist()):
        table = costing.problem.edge_cost(e)
        for grid in twins.members[u]:
            group = grid[grid >= 0]
            assert (table[group] == table[group[0]]).all()
        for grid in twins.members[v]:
            group = grid[grid >= 0]
            assert (table[:, group] == table[:, [group[0]]]).all()


@pytest.mark.parametrize("memory_price", [0.0, 1e-9, 1e-7, 1e-5])
def test_the_smaller_problem_gives_the_full_optimum(costing, memory_price: float) -> None:
    twins = Twins(costing.problem, costing.configs)
    base = [np.asarray(n, dtype=np.float64) for n in costing.node_costs()]
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    costs = [b + memory_price * m for b, m in zip(base, memory, strict=True)]
    full = exact_dp(costing.problem.replace(node_costs=costs), None)
    found = twins.solve(costs, None)
    assert full is not None and found is not None
    assert found[1] == pytest.approx(full[1], rel=1e-12)
    # the assignment maps back to the full problem and costs what the DP says
    assert float(evaluate(costing.problem.replace(node_costs=costs), found[0]).objective) == pytest.approx(found[1])


def test_forbidden_pairs_are_forbidden_in_the_smaller_problem(costing) -> None:
    """``forbid``: pairs of splits ruled out on some edges (the same for twins) give the optimum of
    the full problem with those pairs forbidden, without copying its tables."""
    from stratopt.planning.pairs import Pairs

    rng = np.random.default_rng(3)
    rows = tuple(
        np.unique(np.asarray(c).reshape(len(c), -1), axis=0, return_inverse=True)[1].reshape(-1)
        for c in costing.configs
    )
    allowed, ends = {}, {}
    for e, (u, v) in enumerate(costing.problem.edges.tolist()):
        if e % 3 == 0:
            keep = rng.random((rows[u].max() + 1, rows[v].max() + 1)) < 0.7
            keep[0, :] = keep[:, 0] = True  # some pair always left
            allowed[e], ends[e] = keep, (u, v)
    pairs = Pairs(rows, allowed, ends)
    found = Twins(costing.problem, costing.configs, pairs).solve(costing.node_costs(), None)
    full = costing.problem.forbid({e: pairs.full(e) for e in allowed})
    best = exact_dp(full, None)
    assert found is not None and best is not None
    assert found[1] == pytest.approx(best[1], rel=1e-9)
    assert evaluate(full, found[0]).feasible and pairs.permits(found[0])
