"""The operator-graph IR, the layer builders and the JSON format."""

from __future__ import annotations

import json

import pytest

from stratopt.cost import build
from stratopt.errors import ModelError
from stratopt.graph import GraphBuilder
from stratopt.graph.io import graph_from_dict, graph_to_dict, load_graph, save_graph
from stratopt.graph.zoo import ZOO


def small():
    g = GraphBuilder("small")
    x = g.input((8, 3, 16, 16))
    y = g.conv(x, (8, 3, 3, 3), pad=1, pointwise=1)
    y = g.pooling(y, (2, 2), stride=2)
    y = g.reshape(y, (8, 8 * 8 * 8))
    a = g.fc(y, 16)
    b = g.fc(y, 16)
    g.softmax_xent(g.elementwise(a, b))
    return g.build()


def test_builders_shapes():
    """Conv and pooling output sizes, reshape as ravel + unravel, fan-out as two edges."""
    graph = small()
    names = [op.name for op in graph]
    assert names == ["conv1", "pool1", "reshape1.ravel", "reshape1.unravel", "fc1", "fc2", "add1", "softmax_xent1"]
    assert graph.operators[0].outputs[0].shape == (8, 8, 16, 16)
    assert graph.operators[1].outputs[0].shape == (8, 8, 8, 8)
    assert len(graph.edges()) == 8


def test_parallel_edges_are_kept():
    """A tensor read twice by one operator is two edges (PaSE's DiGraph keeps one); both are priced."""
    g = GraphBuilder("twice")
    x = g.fc(g.input((8, 8)), 8)
    g.elementwise(x, x)
    costing = build(g.build(), 2)
    assert costing.problem.num_edges == 2
    assert costing.problem.edges.tolist() == [[0, 1], [0, 1]]


def test_json_round_trip(tmp_path):
    """save_graph / load_graph keep the graph exactly, plain and gzip, and price it identically."""
    graph = ZOO["transformer"].build()
    for name in ("t.json", "t.json.gz"):
        save_graph(graph, tmp_path / name)
        again = load_graph(tmp_path / name)
        assert graph_to_dict(again) == graph_to_dict(graph)
    a, b = build(graph, 4).problem, build(load_graph(tmp_path / "t.json"), 4).problem
    assert a.node_flat.tolist() == b.node_flat.tolist() and a.edge_flat.tolist() == b.edge_flat.tolist()


def test_unordered_file_is_sorted():
    """Operators may be listed in any order in a file; loading sorts them topologically."""
    data = graph_to_dict(small())
    data["operators"].reverse()
    graph = graph_from_dict(data)
    assert graph.operators[0].name == "conv1"


def _broken(mutate):
    data = graph_to_dict(small())
    mutate(data)
    return data


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["operators"][0]["inputs"].__setitem__(
                0, {**d["operators"][0]["inputs"][0], "from": "softmax_xent1"}
            ),
            "cycle",
        ),
        (
            lambda d: d["operators"][1]["inputs"][0].__setitem__("shape", [8, 8, 16, 15]),
            "operator 'pool1': input 0 expects shape",
        ),
        (
            lambda d: d["operators"][4]["outputs"][0]["dims"].__setitem__(1, ["zz"]),
            "operator 'fc1': output 0 refers to unknown axis 'zz'",
        ),
        (lambda d: d["operators"][4].__setitem__("op", "magic"), "operator 'fc1': unknown op 'magic'"),
        (
            lambda d: d["operators"][4]["inputs"][0].__setitem__("from", "nowhere"),
            "operator 'fc1': input 0 comes from unknown operator 'nowhere'",
        ),
        (lambda d: d["operators"][4]["axes"][0].__setitem__(1, 0), "operator 'fc1': axis 'b' has size 0"),
        (lambda d: d.__setitem__("version", 7), "version 7 is not supported"),
        (lambda d: d["operators"][5].pop("name"), r"operators\[5\]: missing or empty 'name'"),
        (lambda d: d.__setitem__("cutoff", 0), "'cutoff' must be a positive integer, got 0"),
    ],
)
def test_malformed_graphs_name_the_operator(mutate, message):
    """Cycles, mismatched tensor sizes, unknown axes and bad fields are ModelErrors naming the place."""
    with pytest.raises(ModelError, match=message):
        graph_from_dict(_broken(mutate))


def test_builder_errors():
    """Impossible layers are refused when built, with the layer named."""
    g = GraphBuilder("bad")
    x = g.input((8, 3, 16, 16))
    with pytest.raises(ModelError, match="3 channels but the filters expect 4"):
        g.conv(x, (8, 4, 3, 3))
    with pytest.raises(ModelError, match="cannot reshape"):
        g.reshape(x, (7, 7))
    with pytest.raises(ModelError, match="does not divide into 5 parts"):
        g.split(x, 5, 1)
    with pytest.raises(ModelError, match="letter 'k' has sizes"):
        g.einsum("bk,kn->bn", g.input((4, 8)), g.input((6, 2)))


def test_pase_einsum_layout():
    """With PaSE's indexing, 'ble,ef->blf' splits the input's e by f's split count."""
    g = GraphBuilder("e")
    g.einsum("ble,ef->blf", g.input((2, 4, 8)), g.input((8, 16)), pase_layout=True)
    op = g.build().operators[0]
    assert op.axes == ("b", "l", "f", "e")
    assert op.inputs[0].use.dims == (("b",), ("l",), ("f",))
    assert (op.attrs["n"], op.attrs["k"]) == (["e"], ["f"])
    g = GraphBuilder("e")
    g.einsum("ble,ef->blf", g.input((2, 4, 8)), g.input((8, 16)))
    op = g.build().operators[0]
    assert op.inputs[0].use.dims == (("b",), ("l",), ("e",))
    assert (op.attrs["n"], op.attrs["k"]) == (["f"], ["e"])


def test_json_file_is_valid_json(tmp_path):
    """The one-operator-per-line layout is still plain JSON."""
    save_graph(small(), tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["format"] == "stratopt-graph"
