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


def test_a_view_passes_a_split_of_the_heads_and_nothing_finer():
    """``view``: the width split into heads is one operator whose axes are the heads and each head's
    width (locked), so heads split over the devices pass it at no cost from a product that splits
    its output features and back into one that splits its input features; a reshape that is no
    split or merge falls back to the flatten-unflatten pair."""
    from stratopt.graph.configs import ConfigPolicy, configurations
    from stratopt.problem import evaluate

    g = GraphBuilder("heads")
    x = g.fc(g.input((4, 16, 64)), 64, name="q")
    y = g.view(x, (4, 16, 8, 8), name="split")
    z = g.view(y, (4, 16, 64), name="merge")
    g.fc(z, 64, name="o")
    g.view(g.input((4, 6, 10)), (4, 10, 6), name="odd")
    graph = g.build()
    names = [op.name for op in graph]
    assert names == ["q", "split", "merge", "o", "odd.ravel", "odd.unravel"]
    view = graph.operators[1]
    assert view.op == "reshape" and view.sizes == (4, 16, 8, 8) and view.locked == {view.axes[3]}
    assert view.inputs[0].use.dims[2] == (view.axes[2], view.axes[3])
    rows = configurations(view, ConfigPolicy(procs=2, cutoff=1)).tolist()
    assert [1, 1, 2, 1] in rows and [1, 1, 1, 2] not in rows
    costing = build(graph, 2, profile="default", machine="h100", cutoff=1)
    labels = costing.problem.labels

    def pick(v: int, label: str) -> int:
        return labels[v].index(label)

    q, o = graph.operators[0], graph.operators[3]
    heads = [
        pick(0, f"{q.attrs['n'][0]}2"),
        pick(1, f"{view.axes[2]}2"),
        pick(2, f"{graph.operators[2].axes[2]}2"),
        pick(3, f"{o.attrs['k'][0]}2"),
        0,
        0,
    ]
    edges = evaluate(costing.problem, heads).objective - sum(
        float(costing.node_costs()[v][c]) for v, c in enumerate(heads)
    )
    assert edges == pytest.approx(0.0)  # no re-layout on the way
    with pytest.raises(ModelError, match="cannot reshape"):
        g.view(g.input((4, 6)), (5, 5))
