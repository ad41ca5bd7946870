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
