"""The exact DP: equal to brute force on every kind of small graph, with every ordering."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import Limit, Result, Status, StrategyProblem, UnsupportedProblemError, load_problem, solve
from stratopt.problem import FORBIDDEN
from stratopt.solvers import dp as dp_module
from stratopt.solvers import registry
from stratopt.solvers.dp import ORDERINGS, plan

from ..conftest import BIG, problems


def assert_matches_brute(problem: StrategyProblem, solver: str = "dp", **options) -> None:
    exact = solve(problem, "brute")
    r = solve(problem, solver, **options)
    assert r.status is not Status.ERROR, r.stats
    if problem.usage_limit is None:
        if exact.status is Status.INFEASIBLE:
            assert r.status is Status.INFEASIBLE
        else:
            assert r.status is Status.OPTIMAL and r.objective == exact.objective == r.bound
    elif r.status is Status.OPTIMAL:
        assert r.objective == exact.objective
    elif r.status is Status.NO_SOLUTION:
        # The DP ignored the limit: its optimum is a proven lower bound.
        assert exact.status is Status.INFEASIBLE or r.bound <= exact.objective
    else:
        assert r.status is Status.INFEASIBLE and exact.status is Status.INFEASIBLE


@st.composite
def shaped(draw, kind: str, floats: bool = False):
    """Problems on trees, chains with parallel edges, series-parallel graphs, dense small DAGs."""
    n = draw(st.integers(2, 7))
    if kind == "tree":
        edges = [(draw(st.integers(0, v - 1)), v) for v in range(1, n)]
    elif kind == "chain":
        edges = [(v, v + 1) for v in range(n - 1)]
        edges += [(v, v + 1) if draw(st.booleans()) else (v + 1, v) for v in range(n - 1) if draw(st.booleans())]
    elif kind == "series-parallel":
        edges = [(0, 1)]
        size = 2
        while size < n:  # subdivide an edge (series) or double it (parallel), then add a vertex
            u, v = edges[draw(st.integers(0, len(edges) - 1))]
            if draw(st.booleans()):
                edges.remove((u, v))
                edges += [(u, size), (size, v)]
            else:
                edges += [(u, size), (size, v)]
            size += 1
    else:  # DAG: forward edges with probability, enough to need real tables (degree >= 3)
        edges = [(u, v) for u in range(n) for v in range(u + 1, n) if draw(st.integers(0, 9)) < 6]
    nv = max([n] + [max(e) + 1 for e in edges])
    ks = [draw(st.integers(1, 3)) for _ in range(nv)]
    value = st.floats(0, 20, allow_nan=False).map(lambda x: round(x, 3)) if floats else st.integers(0, 20)
    entry = st.one_of(value, value, value, st.just(BIG))
    node = [[draw(entry) for _ in range(k)] for k in ks]
    costs = [[draw(entry) for _ in range(ks[u] * ks[v])] for u, v in edges]
    return StrategyProblem(node, edges, costs)


@pytest.mark.parametrize("solver", ["dp", "dp-reference"])
@pytest.mark.parametrize("kind", ["tree", "chain", "series-parallel", "dag"])
@settings(max_examples=80)
@given(data=st.data())
def test_dp_equals_brute_on_shapes(solver, kind, data):
    """dp = dp-reference = brute on trees, chains with parallel edges, series-parallel graphs, small DAGs."""
    assert_matches_brute(data.draw(shaped(kind)), solver)


@given(shaped("dag", floats=True))
def test_dp_equals_brute_with_float_costs(problem):
    """Float costs give the same optimum as brute force."""
    exact, r = solve(problem, "brute"), solve(problem, "dp")
    assert r.status is exact.status
    if exact.status is Status.OPTIMAL:
        assert r.objective == pytest.approx(exact.objective, rel=1e-12)


@pytest.mark.parametrize("solver", ["dp", "dp-reference"])
@given(problem=problems(max_vertices=6))
def test_dp_against_brute_with_usage(solver, problem):
    """With usage limits: optimal when the relaxed optimum fits, otherwise a valid lower bound."""
    assert_matches_brute(problem, solver)


@pytest.mark.parametrize("ordering", ORDERINGS)
@settings(max_examples=30)
@given(problem=shaped("dag"))
def test_every_ordering_is_exact(ordering, problem):
    """Each elimination order gives the brute-force optimum."""
    assert_matches_brute(problem, ordering=ordering)


def test_example_bound_and_relaxed_optimum():
    """The contest example: the DP's unconstrained optimum 415 breaks the limit, so it is a bound."""
    p = load_problem("example")
    r = solve(p, "dp")
    assert r.status is Status.NO_SOLUTION and r.bound == 415 and r.limit is not None
    assert solve(p.replace(usage_limit=None), "dp").objective == 415
    assert solve(p).objective == 445  # auto: brute takes over under the limit


def grid(side: int, k: int, seed: int) -> StrategyProblem:
    """A side x side grid (treewidth = side) with k choices per vertex and random costs."""
    at = lambda r, c: r * side + c  # noqa: E731
    edges = [(at(r, c), at(r, c + 1)) for r in range(side) for c in range(side - 1)]
    edges += [(at(r, c), at(r + 1, c)) for r in range(side - 1) for c in range(side)]
    rng = np.random.default_rng(seed)
    return StrategyProblem(
        rng.integers(0, 9, (side * side, k)).tolist(), edges, [rng.integers(0, 9, (k, k)) for _ in edges]
    )


def test_grid_is_refused_before_allocating():
    """A 12x12 grid with 8 choices per vertex is refused from the plan alone, naming the width."""
    with pytest.raises(UnsupportedProblemError, match=r"table entries \(largest .*, width \d+\)"):
        solve(grid(12, 8, 0), "dp", memory_cap=1 << 30)


def test_auto_moves_on_when_the_dp_refuses(monkeypatch):
    """'auto' hands a problem too wide for the DP to toulbar2; beyond the formulations' sizes to
    lagrange (toulbar2 on the penalised network), or to greedy where toulbar2 is missing."""
    p = grid(8, 16, 1)
    r = solve(p, time_limit=5)
    assert r.solver == "wcsp" and r.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert r.stats["auto"].startswith("dp refused")
    monkeypatch.setattr("stratopt.solvers.dispatch.AUTO_MIP_VERTICES", 10)
    r = solve(p, time_limit=4)
    assert r.solver == "lagrange" and r.status is Status.FEASIBLE
    real = registry.available
    monkeypatch.setattr(registry, "available", lambda name=None: name != "lagrange" and real(name))
    r = solve(p, time_limit=2)
    assert r.solver == "greedy" and r.status is Status.FEASIBLE


def test_complete_graph_needs_tables():
    """On K5 nothing is left to the pre-pass: real tables over dependent sets give the optimum."""
    rng = np.random.default_rng(2)
    edges = [(u, v) for u in range(5) for v in range(u + 1, 5)]
    p = StrategyProblem(rng.integers(0, 50, (5, 4)).tolist(), edges, [rng.integers(0, 50, (4, 4)) for _ in edges])
    r = solve(p, "dp")
    assert r.stats["core_vertices"] == 5 and r.stats["width"] == 4
    assert r.objective == solve(p, "brute").objective


def test_plan_width_on_a_cycle():
    """Eliminating a cycle never needs more than two dependent vertices."""
    n = 6
    adj = {v: {(v - 1) % n, (v + 1) % n} for v in range(n)}
    for ordering in ORDERINGS:
        assert plan(adj, [3] * n, ordering).width == 2


def test_prepass_solves_trees_without_tables():
    """A tree is solved entirely by the exact pre-pass (leaves and series vertices)."""
    p = StrategyProblem([[1, 2, 3]] * 5, [(0, 1), (1, 2), (1, 3), (3, 4)], [np.eye(3) * 5] * 4)
    r = solve(p, "dp")
    assert r.stats["core_vertices"] == 0 and r.status is Status.OPTIMAL


def test_pruned_choices_map_back_to_original_indices():
    """Dominated choices are dropped before elimination and the answer uses original indices."""
    # Vertex 0's choices 0 and 2 cost far more than choice 1's worst case; vertex 2 has 1 choice.
    node = [[1000, 1, 900], [5, 6], [0]]
    edges = [(0, 1), (1, 2), (0, 2)]
    costs = [[[0, 3], [2, 4], [1, 1]], [[7], [0]], [[0], [5], [0]]]
    problem = StrategyProblem(node, edges, costs)
    result = solve(problem, "dp")
    assert result.stats["choices_pruned"] >= 2
    assert result.status is Status.OPTIMAL and result.assignment[0] == 1
    assert_matches_brute(problem)


def test_pruning_drops_forbidden_choices_beside_forbidden_pairs():
    """A forbidden pair on an edge makes every worst case infinite; the forbidden choices (by their
    node cost, or by every choice a neighbour has) still go before the elimination."""
    F = FORBIDDEN
    node = [[F, 2, 3, F], [1, F, 4], [0, 0]]
    edges = [(0, 1), (1, 2)]
    costs = [[[0, F, 1], [F, 0, 2], [0, 0, F], [0, 0, 0]], [[F, F], [0, 1], [1, F]]]
    problem = StrategyProblem(node, edges, costs)
    result = solve(problem, "dp")
    # 0's choices 0 and 3, 1's choice 1 (forbidden), then 1's choice 0 (every pair with 2 forbidden)
    assert result.stats["choices_pruned"] >= 4
    assert_matches_brute(problem)


@settings(max_examples=150)
@given(data=st.data())
def test_pruning_keeps_an_optimum_with_spread_costs(data):
    """With node costs spread over orders of magnitude (so pruning fires), dp still equals brute."""
    n = data.draw(st.integers(2, 6))
    ks = [data.draw(st.integers(1, 4)) for _ in range(n)]
    node = [[data.draw(st.sampled_from([0, 1, 5, 50, 500, 5000])) for _ in range(k)] for k in ks]
    edges = [(data.draw(st.integers(0, v - 1)), v) for v in range(1, n)]
    edges += [(0, n - 1)] if n > 2 else []
    costs = [[[data.draw(st.integers(0, 60)) for _ in range(ks[v])] for _ in range(ks[u])] for u, v in edges]
    assert_matches_brute(StrategyProblem(node, edges, costs))


def test_dp_honours_its_time_limit():
    """Past its time limit the DP stops between eliminations: NO_SOLUTION with Limit.TIME (it used
    to ignore the limit and answer OPTIMAL however long it took)."""
    rng = np.random.default_rng(5)
    edges = [(u, v) for u in range(6) for v in range(u + 1, 6)]  # K6: nothing for the pre-pass
    p = StrategyProblem(rng.integers(0, 50, (6, 4)).tolist(), edges, [rng.integers(0, 50, (4, 4)) for _ in edges])
    r = solve(p, "dp", time_limit=1e-9)
    assert r.status is Status.NO_SOLUTION and r.limit is Limit.TIME and r.assignment is None
    assert solve(p, "dp").status is Status.OPTIMAL


def test_sums_past_two_to_the_53_are_not_called_optimal():
    """Integer costs whose sums pass 2**53 cannot be held exactly in the DP's float64 tables: the
    answer is FEASIBLE with Limit.PRECISION and a bound below brute force's exact optimum."""
    big = 2**52
    p = StrategyProblem([[big, big + 1], [big + 3, big]], [(0, 1)], [[[1, 0], [0, 1]]])
    assert p.largest_total >= 2**53
    exact = solve(p, "brute")
    r = solve(p, "dp")
    assert r.status is Status.FEASIBLE and r.limit is Limit.PRECISION and "2**53" in r.stats["precision"]
    assert r.bound <= exact.objective <= r.objective


def test_auto_gives_the_dp_half_its_budget(monkeypatch):
    """'auto' hands the DP half its time limit; a DP out of time leaves the answer to the next step."""
    seen = []

    def spy(self, problem, *, time_limit=None, **kw):
        seen.append(time_limit)
        return Result("dp", Status.NO_SOLUTION, limit=Limit.TIME)

    monkeypatch.setattr(dp_module.DynamicProgramming, "solve", spy)
    r = solve(load_problem("example"), time_limit=8)
    assert seen == [4] and r.stats["auto"] == "dp stopped at half the time limit"
    assert r.status is Status.OPTIMAL and r.objective == 445  # brute force, the next step


def test_marginal_table_equals_brute_force() -> None:
    """marginal_table (eliminate all but the kept vertices) gives, for every joint choice of one or
    two kept vertices, the least cost over everything else, and recovers choices that cost exactly
    that: checked by enumeration on 300 random problems with forbidden entries and parallel edges."""
    import itertools

    from stratopt.solvers.dp import marginal_table

    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(2, 7))
        k = rng.integers(1, 4, size=n)
        unary = [rng.integers(0, 10, size=kk).astype(float) for kk in k]
        for u in unary:
            u[rng.random(u.shape) < 0.15] = np.inf  # forbidden choices: dropped unless kept vertices'
        pairs = []
        for _ in range(int(rng.integers(0, 2 * n))):
            u, v = (int(x) for x in rng.choice(n, 2, replace=False))
            m = rng.integers(0, 10, size=(k[u], k[v])).astype(float)
            m[rng.random(m.shape) < 0.1] = np.inf
            pairs.append((u, v, m))
        keep = tuple(int(x) for x in rng.choice(n, int(rng.integers(1, 3)), replace=False))
        want = np.full(tuple(int(k[v]) for v in keep), np.inf)
        for a in itertools.product(*[range(int(x)) for x in k]):
            c = sum(unary[v][a[v]] for v in range(n)) + sum(m[a[u], a[v]] for u, v, m in pairs)
            idx = tuple(a[v] for v in keep)
            want[idx] = min(want[idx], c)
        got, how = marginal_table(unary, pairs, keep, prune=bool(rng.integers(2)))
        np.testing.assert_allclose(got, want)
        fixed = tuple(int(x) for x in np.unravel_index(int(np.argmin(got)), got.shape))
        a = how.assignment(fixed)  # the recovered choices cost exactly the table's entry
        assert tuple(a[v] for v in keep) == fixed
        cost = sum(unary[v][a[v]] for v in range(n)) + sum(m[a[u], a[v]] for u, v, m in pairs)
        assert cost == pytest.approx(got[fixed]) or cost == got[fixed] == np.inf


def test_repeated_layers_reuse_their_products_and_agree_without(monkeypatch) -> None:
    """Identical layers (the same tables in every one, K = 128): a stream vertex per layer joined to
    the next both directly and through a branch of two (as a residual and its block), every stream
    vertex to one hub of two choices (so that the branches go first). The min-plus
    products the pre-pass computes for one layer's branch are found again for the others
    (remembered by a digest of both operands), and the optimum and its cost are those of the same
    solve remembering nothing."""
    rng = np.random.default_rng(7)
    k, layers = 128, 6
    unary = [rng.uniform(0, 10, k) for _ in range(3)]
    tables = [rng.uniform(0, 10, (k, k)) for _ in range(4)]
    node, edges, costs = [], [], []
    for i in range(layers):  # stream s = 3i, branch a = 3i + 1, b = 3i + 2, then the next stream
        s = 3 * i
        node += unary
        edges += [(s, s + 1), (s + 1, s + 2)]
        costs += tables[:2]
        if i + 1 < layers:
            edges += [(s + 2, s + 3), (s, s + 3)]
            costs += tables[2:]
    hub = 3 * layers
    node.append(np.zeros(2))
    for i in range(layers):
        edges.append((3 * i, hub))
        costs.append(rng.uniform(0, 1, (k, 2)))
    problem = StrategyProblem(node, edges, costs)
    solved: list[dp_module._Graph] = []
    original = dp_module._Graph.from_problem.__func__

    def keep(cls, p):
        graph = original(cls, p)
        solved.append(graph)
        return graph

    monkeypatch.setattr(dp_module._Graph, "from_problem", classmethod(keep))
    with_memo = solve(problem, "dp")
    products = [bp for _, dep, bp in solved[-1].steps if len(dep) == 2]
    assert solved[-1].products and len({id(bp) for bp in products}) < len(products)  # found again, shared
    monkeypatch.setattr(dp_module, "_MEMO_WORK", 1 << 62)
    without = solve(problem, "dp")
    assert not solved[-1].products
    assert with_memo.objective == pytest.approx(without.objective)
    assert with_memo.assignment == without.assignment
