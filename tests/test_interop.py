"""networkx round trips: problems and operator graphs to networkx and back, and a PaSE-style graph."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings

from stratopt import ModelError, from_networkx, load_instance, load_problem, solve, to_networkx
from stratopt.graph.io import graph_to_dict
from stratopt.interop import graph_from_networkx, graph_to_networkx
from stratopt.solvers import dp

from .conftest import problems


def _same(a, b) -> None:
    assert a.num_choices.tolist() == b.num_choices.tolist()
    assert a.node_flat.tolist() == b.node_flat.tolist()
    assert a.edges.tolist() == b.edges.tolist()
    assert a.edge_flat.tolist() == b.edge_flat.tolist()
    assert a.usage_limit == b.usage_limit
    assert (a.usage_flat is None) == (b.usage_flat is None)
    if a.usage_flat is not None:
        assert a.usage_flat.tolist() == b.usage_flat.tolist()
        assert a.intervals.tolist() == b.intervals.tolist()


@settings(max_examples=60, deadline=None)
@given(problems(max_vertices=5))
def test_problem_round_trip(problem):
    """Random problems (parallel edges, forbidden entries, usage limits) survive to_networkx and
    back unchanged, and keep their optimum."""
    g = to_networkx(problem)
    assert isinstance(g, nx.MultiDiGraph) and g.number_of_edges() == problem.num_edges
    back = from_networkx(g)
    _same(problem, back)
    assert solve(back, "brute").objective == solve(problem, "brute").objective


def test_example_round_trip_keeps_names_and_limit():
    p = load_problem("example")
    back = from_networkx(to_networkx(p))
    _same(p, back)
    assert solve(back, "brute").objective == 445


def test_pase_style_graph_becomes_a_problem():
    """A DiGraph of operators with costs per configuration on nodes and edges, as PaSE keeps it,
    is a problem in one call; names come from the nodes."""
    g = nx.DiGraph()
    g.add_node("conv", costs=[4, 1, 3])
    g.add_node("pool", costs=[2, 2])
    g.add_node("fc", costs=[1, 5])
    g.add_edge("conv", "pool", costs=[[0, 3], [7, 0], [1, 1]])
    g.add_edge("pool", "fc", costs=[[0, 2], [2, 0]])
    p = from_networkx(g)
    assert p.names == ("conv", "pool", "fc") and p.num_edges == 2
    r = solve(p, "dp")
    # Enumerate on the networkx attributes themselves: conv 1, pool 1, fc 0 costs 1 + 2 + 1 + 0 + 2.
    best = min(
        sum(g.nodes[n]["costs"][c] for n, c in zip(g.nodes, a, strict=True))
        + sum(g.edges[u, v]["costs"][a[list(g.nodes).index(u)]][a[list(g.nodes).index(v)]] for u, v in g.edges)
        for a in itertools.product(range(3), range(2), range(2))
    )
    assert r.objective == best == 6 and r.assignment == (1, 1, 0)


def test_missing_costs_name_the_node():
    g = nx.DiGraph()
    g.add_node("a")
    with pytest.raises(ModelError, match="node 'a': no 'costs'"):
        from_networkx(g)


@pytest.mark.parametrize("name", ["alexnet", "inception3", "transformer"])
def test_operator_graph_round_trip(name):
    """A zoo network to networkx and back is the same graph (same stratopt-graph document)."""
    graph = load_instance(name)
    g = graph_to_networkx(graph)
    assert g.number_of_nodes() == len(graph) and g.number_of_edges() == len(graph.edges())
    assert nx.is_directed_acyclic_graph(g)
    assert graph_to_dict(graph_from_networkx(g)) == graph_to_dict(graph)


def _order_width(adj: dict[int, set[int]], order) -> int:
    """The width of an elimination order, recomputed on a networkx graph."""
    g = nx.Graph()
    g.add_nodes_from(adj)
    g.add_edges_from((u, v) for u, nb in adj.items() for v in nb)
    width = 0
    for v in order:
        nbrs = list(g.neighbors(v))
        width = max(width, len(nbrs))
        g.add_edges_from((a, b) for i, a in enumerate(nbrs) for b in nbrs[i + 1 :])
        g.remove_node(v)
    return width


@pytest.mark.parametrize("seed", range(8))
def test_dp_width_against_networkx(seed):
    """On random graphs the width the DP plans for an elimination order equals the width networkx
    computes for that order, and the DP's best order is as wide as networkx's min-degree and
    min-fill-in treewidth heuristics find, within one (same heuristics, other tie-breaks)."""
    g = nx.gnm_random_graph(14, 24, seed=seed)
    adj = {v: set(g.neighbors(v)) for v in g.nodes}
    k = [3] * g.number_of_nodes()
    for ordering in ("min-degree", "min-fill"):
        plan = dp.plan(adj, k, ordering)
        assert plan.width == _order_width(adj, plan.order)
    nx_width = min(
        nx.algorithms.approximation.treewidth_min_degree(g)[0],
        nx.algorithms.approximation.treewidth_min_fill_in(g)[0],
    )
    # With equal K the DP's orders minimise the same quantities; widths agree within one.
    best = min(dp.plan(adj, k, o).width for o in ("min-degree", "min-fill"))
    assert abs(best - nx_width) <= 1
