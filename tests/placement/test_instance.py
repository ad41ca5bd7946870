"""Placement instances: the JSON format, its errors, the built-in jobs, and the CLI."""

from __future__ import annotations

import json

import pytest

from stratopt.cli import main
from stratopt.errors import ModelError
from stratopt.instances import load_instance, load_problem
from stratopt.placement import place, placement_from_dict, simulate
from stratopt.placement.jobs import DEVICE_SETS, JOBS, appendix, job

from ._random import random_instance


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _minimal():
    return {
        "format": "stratopt-placement",
        "version": 1,
        "capacity": 100,
        "devices": [{"name": "cpu1", "kind": "cpu"}, {"name": "gpu1", "kind": "gpu"}],
        "nodes": [{"name": "n1", "cost": {"cpu1": 4, "gpu1": 2}}, {"name": "n2", "cost": {"cpu": 1, "gpu": 3}}],
        "edges": [{"src": "n1", "dst": "n2", "bytes": 0}],
    }


def test_design_minimal_json_reads():
    """DESIGN section 5's minimal object reads; costs may be keyed by device name or kind."""
    inst = placement_from_dict(_minimal())
    assert inst.cost.tolist() == [[4, 2], [1, 3]]
    assert inst.bandwidth is None and inst.capacity == 100


@pytest.mark.parametrize("seed", range(10))
def test_json_round_trip(seed):
    """to_dict() and placement_from_dict() preserve every field (costs, bytes, memory, bandwidth)."""
    inst = random_instance(seed, memory=True, bandwidth=True, integer=False)
    back = placement_from_dict(json.loads(json.dumps(inst.to_dict())))
    assert back.nodes == inst.nodes and back.devices == inst.devices
    assert back.cost.tolist() == inst.cost.tolist()
    assert back.edges.tolist() == inst.edges.tolist() and back.edge_bytes.tolist() == inst.edge_bytes.tolist()
    assert back.node_memory.tolist() == inst.node_memory.tolist()
    assert (back.bandwidth, back.capacity) == (inst.bandwidth, inst.capacity)


def _broken(path, value):
    data = _minimal()
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (("format",), "other", "not a placement instance"),
        (("version",), 2, "version 2"),
        (("edges", 0, "dst"), "n9", "unknown node 'n9'"),
        (("edges", 0, "src"), "n2", "a node cannot feed itself"),
        (("nodes", 1, "cost"), {"cpu": 1}, "no cost for device 'gpu1'"),
        (("nodes", 1, "cost"), {"cpu": 1, "gpu": 2, "tpu": 3}, "neither a device nor a device kind"),
        (("nodes", 0, "cost", "cpu1"), -1, "not a finite number >= 0"),
        (("nodes", 1, "name"), "n1", "appears twice"),
        (("capacity",), 0, "capacity"),
        (("bandwidth",), -3, "bandwidth"),
        (("edges", 0, "bytes"), "big", "not a number"),
    ],
)
def test_bad_json_names_the_problem(path, value, fragment):
    """Each malformed field gives a ModelError naming it."""
    with pytest.raises(ModelError, match=fragment):
        placement_from_dict(_broken(path, value))


def test_a_cycle_is_refused():
    """Edges that form a cycle are refused, naming a node on it."""
    data = _minimal()
    data["edges"].append({"src": "n2", "dst": "n1", "bytes": 0})
    with pytest.raises(ModelError, match="cycle"):
        placement_from_dict(data)


def test_jobs_have_the_papers_sizes():
    """VGG-19 24 nodes, ResNet-50 176, Inception-v3 311; device sets 3, 30, 60; the files in
    models/ are what the builders make."""
    assert {n: job(n, "small").num_nodes for n in JOBS} == {"vgg19": 24, "resnet50": 176, "inception3": 311}
    assert {s: sum(c) for s, c in DEVICE_SETS.items()} == {"small": 3, "medium": 30, "large": 60}
    for network in JOBS:
        for devices in DEVICE_SETS:
            built, stored = job(network, devices), load_instance(f"{network}-{devices}")
            assert stored.cost.tolist() == built.cost.tolist() and stored.edges.tolist() == built.edges.tolist()
    stored = load_instance("seed004-appendix")
    assert stored.cost.tolist() == appendix().cost.tolist()


def test_transfers_delay_only_across_devices():
    """With a bandwidth, a consumer on another device waits bytes / bandwidth more."""
    data = _minimal()
    data["bandwidth"] = 2
    data["edges"][0]["bytes"] = 10
    inst = placement_from_dict(data)
    assert simulate(inst, [0, 0]).makespan == 5  # 4 + 1, same device
    assert simulate(inst, [1, 1]).makespan == 5  # 2 + 3, same device
    assert simulate(inst, [1, 0]).makespan == 2 + 5 + 1  # transfer of 10 bytes at 2 per unit


def test_cli_place_and_simulate_round_trip(tmp_path, capsys):
    """place --json prints DESIGN's fields; simulate reads that output back (keeping its device
    order) and a bare node -> device map too."""
    code, out, _ = run(capsys, "place", "seed004-appendix", "--algo", "cpsat", "--json")
    assert code == 0
    placed = json.loads(out)
    assert {"algorithm", "placement", "makespan", "jct", "wall_time"} <= placed.keys()
    assert placed["makespan"] == 14 and placed["status"] == "optimal"
    path = tmp_path / "p.json"
    path.write_text(out)
    code, out, _ = run(capsys, "simulate", "seed004-appendix", "--placement", str(path), "--json")
    sim = json.loads(out)
    assert code == 0 and sim["makespan"] == 14 and sim["policy"] == "order"
    assert {t["name"] for t in sim["tasks"]} == {f"node{j}" for j in range(1, 6)}
    assert all({"name", "device", "start", "end"} == t.keys() for t in sim["tasks"])
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(placed["placement"]))
    code, out, _ = run(capsys, "simulate", "seed004-appendix", "--placement", str(bare), "--json")
    assert code == 0 and json.loads(out)["policy"] == "dispatch"


def test_cli_place_submodular_summary(capsys):
    """The summary names the makespan and the JCT."""
    code, out, _ = run(capsys, "place", "seed004-appendix", "--algo", "submodular")
    assert code == 0 and "JCT 17" in out and "makespan 17" in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("place", "seed004-appendix", "--algo", "nope"), "unknown placement algorithm"),
        (("place", "example"), "not a placement instance"),
        (("simulate", "seed004-appendix", "--placement", '{"node1": "gpu1"}'), "no device for node 'node2'"),
        (
            (
                "simulate",
                "seed004-appendix",
                "--placement",
                '{"node1": "tpu", "node2": "gpu1", "node3": "gpu1", "node4": "gpu1", "node5": "gpu1"}',
            ),
            "no device named 'tpu'",
        ),
        (("simulate", "seed004-appendix", "--placement", "{not json"), "not a readable JSON"),
        (("solve", "seed004-appendix", "--procs", "4"), "apply to operator graphs"),
    ],
)
def test_cli_bad_input_exits_2(capsys, args, fragment):
    """Bad placement input: one line on stderr naming it, exit code 2."""
    code, _, err = run(capsys, *args)
    assert code == 2
    assert fragment in err and len(err.strip().splitlines()) == 1


def test_solve_takes_a_placement_in_its_additive_view(capsys):
    """`stratopt solve` on a placement job solves its additive view: each node on its cheapest
    device when transfers are free."""
    code, out, err = run(capsys, "solve", "seed004-appendix", "--json")
    assert code == 0 and "additive view" in err
    result = json.loads(out)
    assert result["objective"] == 15 and result["status"] == "optimal"
    assert load_problem("seed004-appendix").num_vertices == 5


def test_models_lists_the_placement_jobs(capsys):
    """`stratopt models --json` lists the ten placement jobs."""
    code, out, _ = run(capsys, "models", "--json")
    names = {p["name"] for p in json.loads(out)["placements"]}
    assert code == 0 and "seed004-appendix" in names and "inception3-large" in names and len(names) == 10


def test_lazy_submodular_places_inception_large(capsys):
    """The lazy greedy places Inception-v3 on 60 devices (311 nodes) with the plain greedy's placement."""
    inst = job("inception3", "large")
    assert place(inst, "submodular-lazy").placement == place(inst, "submodular").placement


def test_place_cli_reports_no_placement_as_exit_1(capsys, tmp_path):
    """An infeasible memory budget is a status, not bad input: `place --json` exits 1 and says
    "infeasible" in its JSON (it used to exit 2 with an error)."""
    job = {
        "format": "stratopt-placement",
        "version": 1,
        "devices": [{"name": "d0", "kind": "cpu", "memory": 6}, {"name": "d1", "kind": "cpu", "memory": 6}],
        "nodes": [{"name": n, "cost": {"cpu": 1}, "memory": 5} for n in ("a", "b", "c")],
        "edges": [],
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    code, out, _ = run(capsys, "place", str(path), "--algo", "cpsat", "--json")
    data = json.loads(out)
    assert code == 1 and data["status"] == "infeasible" and data["placement"] is None


def test_a_failed_cross_check_exits_1(capsys, monkeypatch):
    """A schedule that fails its independent check is a mismatch (exit 1), not bad input (exit 2)."""
    import stratopt.placement.algorithms as algorithms
    from stratopt.placement import Schedule

    monkeypatch.setattr(algorithms, "simulate", lambda inst, p, o: Schedule(tuple(p), (0.0,) * 5, (0.0,) * 5))
    code, _, err = run(capsys, "place", "seed004-appendix")
    assert code == 1 and err.strip().splitlines()[-1].startswith("stratopt: mismatch:")
