"""networkx where graphs meet users: problems and operator graphs to and from networkx graphs.

- :func:`to_networkx` / :func:`from_networkx` for a :class:`~stratopt.StrategyProblem`: a
  ``MultiDiGraph`` with one node per vertex (attributes ``costs``, and where the problem has them
  ``name``, ``labels``, ``usages``, ``interval``) and one edge per problem edge, parallel edges kept
  (attribute ``costs``, a K_u x K_v nested list; ``index``, its position in the problem); the usage limit is the graph attribute
  ``usage_limit``. ``from_networkx`` also takes a plain ``DiGraph`` or ``Graph`` built by hand, the
  way PaSE and similar tools keep an operator graph with per-configuration costs on it: nodes
  carrying ``costs`` and edges carrying ``costs`` become a problem in one call.
- :func:`graph_to_networkx` / :func:`graph_from_networkx` for an operator
  :class:`~stratopt.graph.Graph`: a ``MultiDiGraph`` with one node per operator (its
  ``stratopt-graph`` entry as the ``operator`` attribute, plus ``op``) and one edge per tensor
  flowing between operators (``input``: which input of the consumer, ``shape``).
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from stratopt.errors import ModelError
from stratopt.graph.io import FORMAT, VERSION, graph_from_dict, graph_to_dict
from stratopt.graph.ir import Graph
from stratopt.problem import StrategyProblem

__all__ = ["from_networkx", "graph_from_networkx", "graph_to_networkx", "to_networkx"]


def to_networkx(problem: StrategyProblem) -> nx.MultiDiGraph:
    """The problem as a ``MultiDiGraph`` (see the module docstring); costs as plain Python numbers.

    Examples
    --------
    >>> from stratopt import load_problem
    >>> g = to_networkx(load_problem("example"))
    >>> g.number_of_nodes(), g.number_of_edges(), g.graph["usage_limit"], g.nodes[0]["costs"]
    (5, 5, 50, [15])
    """
    g = nx.MultiDiGraph(name=problem.name, usage_limit=problem.usage_limit)
    for v in range(problem.num_vertices):
        attrs: dict[str, Any] = {"costs": problem.node_cost(v).tolist()}
        if problem.names is not None:
            attrs["name"] = problem.names[v]
        if problem.labels is not None:
            attrs["labels"] = list(problem.labels[v])
        if problem.usage_flat is not None:
            attrs["usages"] = problem.usage(v).tolist()
        if problem.intervals is not None:
            attrs["interval"] = problem.intervals[v].tolist()
        g.add_node(v, **attrs)
    for e, (u, v) in enumerate(problem.edges.tolist()):
        g.add_edge(u, v, key=e, index=e, costs=problem.edge_cost(e).tolist())
    return g


def from_networkx(g: nx.Graph, *, name: str | None = None) -> StrategyProblem:
    """A problem from a networkx graph whose nodes carry ``costs`` and whose edges carry ``costs``.

    Nodes are numbered in the graph's node order. Optional node attributes: ``name``,
    ``labels``, ``usages`` and ``interval`` (all nodes or none); graph attribute ``usage_limit``.
    In an undirected graph each edge's matrix is read from the first endpoint networkx reports.
    Missing or malformed attributes raise a :class:`ModelError` naming the node or edge.

    Examples
    --------
    >>> import networkx as nx
    >>> g = nx.DiGraph()
    >>> g.add_node("conv", costs=[3, 1])
    >>> g.add_node("fc", costs=[0, 2])
    >>> g.add_edge("conv", "fc", costs=[[0, 9], [9, 0]])
    >>> p = from_networkx(g)
    >>> p.names, p.num_choices.tolist()
    (('conv', 'fc'), [2, 2])
    """
    nodes = list(g.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    node_costs = []
    for node in nodes:
        costs = g.nodes[node].get("costs")
        if costs is None:
            raise ModelError(f"node {node!r}: no 'costs' attribute (one cost per choice)")
        node_costs.append(np.asarray(costs).tolist())
    edges, matrices = [], []
    listed = list(g.edges(data=True))
    if all("index" in data for *_, data in listed):  # to_networkx's edge order (networkx lists by node)
        listed.sort(key=lambda edge: edge[2]["index"])
    for u, v, data in listed:
        if "costs" not in data:
            raise ModelError(f"edge {u!r} -> {v!r}: no 'costs' attribute (a K_u x K_v matrix)")
        edges.append((index[u], index[v]))
        matrices.append(np.asarray(data["costs"]).tolist())
    kwargs: dict[str, Any] = {}
    for attr, key in (("usages", "usages"), ("interval", "intervals"), ("labels", "labels")):
        given = [attr in g.nodes[node] for node in nodes]
        if any(given) and not all(given):
            missing = nodes[given.index(False)]
            raise ModelError(f"node {missing!r}: no {attr!r} attribute, but other nodes have one")
        if given and all(given):
            kwargs[key] = [g.nodes[node][attr] for node in nodes]
    if g.graph.get("usage_limit") is not None:
        kwargs["usage_limit"] = g.graph["usage_limit"]
    names = [str(g.nodes[node].get("name", node)) for node in nodes]
    title = name or g.graph.get("name") or "networkx"
    return StrategyProblem(node_costs, edges, matrices, names=names, name=str(title), **kwargs)


def graph_to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """An operator graph as a ``MultiDiGraph`` of operators and the tensors between them.

    Examples
    --------
    >>> from stratopt import load_instance
    >>> g = graph_to_networkx(load_instance("alexnet"))
    >>> g.number_of_nodes(), g.number_of_edges(), g.nodes["conv1"]["op"]
    (14, 13, 'conv')
    """
    data = graph_to_dict(graph)
    g = nx.MultiDiGraph(name=graph.name, source=graph.source, cutoff=graph.cutoff)
    for entry in data["operators"]:
        g.add_node(entry["name"], op=entry["op"], operator=entry)
    for entry in data["operators"]:
        for i, tensor in enumerate(entry["inputs"]):
            if tensor.get("from") is not None:
                g.add_edge(tensor["from"], entry["name"], input=i, shape=tensor["shape"])
    return g


def graph_from_networkx(g: nx.Graph) -> Graph:
    """An operator graph from :func:`graph_to_networkx`'s form: nodes carrying their
    ``stratopt-graph`` entry as ``operator`` (edges are implied by each entry's inputs)."""
    entries = []
    for node, data in g.nodes(data=True):
        if not isinstance(data.get("operator"), dict):
            raise ModelError(f"node {node!r}: no 'operator' attribute (a stratopt-graph operator entry)")
        entries.append(data["operator"])
    doc = {"format": FORMAT, "version": VERSION, "name": g.graph.get("name", "networkx"), "operators": entries}
    for key in ("source", "cutoff"):
        if g.graph.get(key) is not None:
            doc[key] = g.graph[key]
    return graph_from_dict(doc, source=str(doc["name"]))
