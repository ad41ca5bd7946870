"""StrategyProblem construction, validation, IOPDDL files and evaluate()."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratopt import ModelError, StrategyProblem, evaluate, read_iopddl, write_iopddl
from stratopt.instances import load_problem
from stratopt.problem import from_iopddl_dict, to_iopddl_dict

from .conftest import BIG, problems, reference_evaluate


def small(**overrides):
    args = dict(
        node_costs=[[1, 2], [3, 4, 5]],
        edges=[(0, 1)],
        edge_costs=[[0, 1, 2, 3, 4, 5]],
        intervals=[[0, 2], [1, 3]],
        usages=[[1, 2], [1, 1, 1]],
        usage_limit=3,
    )
    args.update(overrides)
    return StrategyProblem(**args)


def test_example_optimum_with_and_without_limit():
    """The contest example's optimum assignment costs 445 and is feasible; 415's is not."""
    p = load_problem("example")
    assert evaluate(p, [0, 0, 2, 1, 0]).objective == 445
    ev = evaluate(p, [0, 0, 1, 1, 0])
    assert ev.objective == 415 and not ev.feasible
    assert evaluate(p.replace(usage_limit=None), [0, 0, 1, 1, 0]).feasible


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"edge_costs": [[0, 1, 2, 3]]}, "edge 0 (0 -> 1): 4 entries, expected 2x3 = 6"),
        ({"edge_costs": [np.zeros((2, 2))]}, "edge 0 (0 -> 1): cost matrix is 2x2, expected 2x3"),
        ({"edges": [(0, 7)]}, "edge 0 (0 -> 7): vertex 7 does not exist"),
        ({"edges": [(1, 1)], "edge_costs": [[0] * 9]}, "edge 0 joins vertex 1 to itself"),
        ({"node_costs": [[1, 2], []]}, "vertex 1: empty choice list"),
        ({"node_costs": [[1, float("nan")], [3, 4, 5]]}, "vertex 0 choice 1: cost is NaN"),
        ({"edge_costs": [[0, 1, 2, 3, float("nan"), 5]]}, "edge 0 (0 -> 1) entry (1, 1): cost is NaN"),
        ({"intervals": [[0, 2], [3, 1]]}, "vertex 1: interval [3, 1) is reversed"),
        ({"usage_limit": -1}, "usage_limit -1 is negative"),
        ({"usages": [[1, 2], [1, -1, 1]]}, "vertex 1 choice 1: usage -1 is negative"),
        ({"usages": [[1, 2], [1, 1]]}, "vertex 1 usages: 2 entries for 3 choices"),
        ({"node_costs": [[1, 2], ["a", 4, 5]]}, "node costs must be numbers"),
        ({"intervals": None}, "needs both intervals and usages"),
    ],
)
def test_bad_problem_names_the_item(overrides, fragment):
    """Each malformed part raises ModelError with a message naming the offending item."""
    with pytest.raises(ModelError) as info:
        small(**overrides)
    assert fragment in str(info.value)


def test_names_appear_in_messages():
    """With vertex names, messages name the vertices by name too."""
    with pytest.raises(ModelError, match=r"edge 0 \(conv1 -> pool1\): cost matrix is 2x2, expected 2x3"):
        small(names=["conv1", "pool1"], edge_costs=[np.zeros((2, 2))])


def test_problem_is_immutable():
    """Attributes cannot be set and the numpy arrays inside are read-only."""
    p = small()
    with pytest.raises(AttributeError):
        p.name = "x"
    with pytest.raises(ValueError):
        p.node_cost(0)[0] = 9
    with pytest.raises(ValueError):
        p.edges[0, 0] = 1


def test_parallel_edges_add_up():
    """Two edges between the same pair both count."""
    p = StrategyProblem([[0, 0], [0, 0]], [(0, 1), (1, 0)], [[[1, 2], [3, 4]], [[10, 20], [30, 40]]])
    assert evaluate(p, [0, 1]).objective == 2 + 30


def test_half_open_intervals():
    """A vertex live over [s, e) does not overlap one that starts at e."""
    p = StrategyProblem([[0], [0]], intervals=[[0, 2], [2, 4]], usages=[[5], [5]], usage_limit=5)
    assert evaluate(p, [0, 0]).feasible
    q = p.replace(intervals=[[0, 3], [2, 4]])
    ev = evaluate(q, [0, 0])
    assert not ev.feasible and ev.violation == "usage 10 exceeds the limit 5 at time 2 (2 vertices live)"


def test_forbidden_entries_are_reported_not_hidden():
    """A forbidden entry keeps its number in the objective but makes the assignment infeasible."""
    p = StrategyProblem([[BIG, 1]], name="f")
    ev = evaluate(p, [0])
    assert ev.objective == BIG and not ev.feasible and "forbidden" in ev.violation
    assert evaluate(p, [1]).feasible


def test_exact_integer_sums_beyond_int64():
    """Sums of many huge integers stay exact (no int64 overflow, no float rounding)."""
    p = StrategyProblem([[9 * 10**17 + 1]] * 40)
    assert evaluate(p, [0] * 40).objective == 40 * (9 * 10**17 + 1)


def test_float_costs_are_accepted():
    """Float costs give a float objective."""
    p = StrategyProblem([[0.5, 1.25]], [], [])
    assert evaluate(p, [1]).objective == 1.25


def test_numpy_tables_and_lists_build_the_same_problem():
    """Cost tables given as numpy arrays (kept as arrays, not turned into Python numbers), nested
    lists and flat lists, mixed in one problem, give the same flat costs and dtype as lists alone;
    a float array among integer lists makes every cost a float, as a float in a list does."""
    nodes = [[1, 2], [3, 4, 5], [6, 7]]
    tables = [[[0, 1, 2], [3, 4, 5]], [[1, 1], [2, 2], [3, 3]]]
    as_lists = StrategyProblem(nodes, [(0, 1), (1, 2)], [[x for row in t for x in row] for t in tables])
    mixed = StrategyProblem(
        [np.array(nodes[0]), nodes[1], np.array(nodes[2], dtype=np.uint8)],
        [(0, 1), (1, 2)],
        [np.array(tables[0], dtype=np.int32), tables[1]],
    )
    assert mixed.edge_flat.dtype == as_lists.edge_flat.dtype == np.int64
    assert np.array_equal(mixed.node_flat, as_lists.node_flat)
    assert np.array_equal(mixed.edge_flat, as_lists.edge_flat)
    floats = StrategyProblem(nodes, [(0, 1), (1, 2)], [np.array(tables[0], dtype=np.float32), tables[1]])
    assert floats.edge_flat.dtype == np.float64 and floats.edge_flat.tolist() == as_lists.edge_flat.tolist()
    with pytest.raises(ModelError, match="must be numbers"):
        StrategyProblem([np.array([True, False])])


@pytest.mark.parametrize(
    ("assignment", "fragment"),
    [
        ([0], "assignment has 1 entries, expected 2"),
        ([0, 3], "assignment[1] = 3 is out of range: vertex 1 has 3 choices (0..2)"),
        ([0, -1], "assignment[1] = -1 is out of range"),
        ([0, 1.5], "assignment[1] = 1.5 is not a choice index"),
        ([0, "a"], "assignment[1] = 'a' is not a choice index"),
    ],
)
def test_bad_assignment(assignment, fragment):
    """A malformed assignment is a ModelError naming the entry."""
    with pytest.raises(ModelError) as info:
        evaluate(small(), assignment)
    assert fragment in str(info.value)


@given(problems(), st.data())
def test_evaluate_matches_reference(problem, data):
    """evaluate() equals a from-scratch recomputation, objective and feasibility alike."""
    a = [data.draw(st.integers(0, k - 1)) for k in problem.num_choices.tolist()]
    ev = evaluate(problem, a)
    assert (ev.objective, ev.feasible) == reference_evaluate(problem, a)
    assert (ev.violation is None) == ev.feasible


@given(problem=problems())
def test_iopddl_round_trip(tmp_path_factory, problem):
    """Writing and reading IOPDDL JSON (plain and gzip) gives back the same problem."""
    for name in ("p.json", "p.json.gz"):
        path = tmp_path_factory.mktemp("rt") / name
        write_iopddl(problem, path)
        back = read_iopddl(path)
        assert to_iopddl_dict(back) == to_iopddl_dict(problem)


def test_round_trip_keeps_names_and_labels(tmp_path):
    """Our optional names and labels survive a round trip; other fields stay contest-compatible."""
    p = small(names=["a", "b"], labels=[["x", "y"], ["p", "q", "r"]])
    write_iopddl(p, tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    assert set(data["problem"]["nodes"]) == {"intervals", "costs", "usages", "names", "labels"}
    back = read_iopddl(tmp_path / "p.json")
    assert back.names == ("a", "b") and back.labels[1] == ("p", "q", "r")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b'{"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[1', "invalid JSON at line 1"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"problem": {"nodes": {"intervals": [[0, 1]], "usages": [[1]]}}}', "problem.nodes.costs is missing"),
        (gzip.compress(b'{"problem": 1}')[:-6], "broken gzip data"),
        (b"\xff\xfe\x00", "not a JSON text file"),
    ],
)
def test_bad_files(tmp_path, content, fragment):
    """Broken files raise ModelError naming the path and what is wrong."""
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ModelError) as info:
        read_iopddl(path)
    assert str(path) in str(info.value) and fragment in str(info.value)


def test_from_dict_prefixes_source():
    """Validation errors from a file say which file."""
    data = {"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[1]], "usages": [[1]]}, "usage_limit": -5}}
    with pytest.raises(ModelError, match=r"^f\.json: usage_limit -5 is negative$"):
        from_iopddl_dict(data, source="f.json")


def test_new_node_costs_share_the_edge_tables():
    """replace(node_costs=...) with as many choices per vertex keeps every other array (a large
    model's edge tables are gigabytes) and all else as it was; other changes build anew."""
    p = StrategyProblem(
        [[1, 2], [3, 4]],
        [(0, 1)],
        [[[0, 1], [1, 0]]],
        intervals=[[0, 1], [0, 1]],
        usages=[[1, 2], [1, 1]],
        usage_limit=3,
        names=["a", "b"],
        name="two",
    )
    q = p.replace(node_costs=[[5, 6], [7, 8]])
    assert np.shares_memory(q.edge_flat, p.edge_flat)
    assert q.names == p.names and q.name == "two" and q.usage_limit == 3
    assert [c.tolist() for c in q.node_costs] == [[5, 6], [7, 8]]
    assert [c.tolist() for c in p.node_costs] == [[1, 2], [3, 4]]
    assert evaluate(q, (0, 1)).objective == 5 + 8 + 1
    with pytest.raises(ModelError, match="cost matrix is 2x2, expected 1x2"):
        p.replace(node_costs=[[1], [2, 3]])


def test_edge_floats_shared_by_new_node_costs_and_remade_by_forbid():
    """The DP's float tables are made once for problems that differ in node costs only; a problem
    with pairs forbidden makes its own (never the stale tables), and a pickled copy none."""
    import pickle

    from stratopt.problem import FORBIDDEN

    p = StrategyProblem([[1, 2], [3, 4]], [(0, 1)], [[[0, 5], [5, 0]]])
    floats = p.edge_floats()
    assert p.replace(node_costs=[[0, 0], [0, 0]]).edge_floats() is floats
    q = p.forbid({0: np.array([[True, False], [True, True]])})
    assert np.isinf(q.edge_floats()[1]) and np.isfinite(floats).all()
    assert q.edge_cost(0)[0, 1] == FORBIDDEN
    assert "_edge_floats" not in pickle.loads(pickle.dumps(q)).__dict__
