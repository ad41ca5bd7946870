"""The exported plan: PlanResult.export writes what the CLI's --export writes, load_plan reads it
back unchanged, and a file that does not match the format is a one-line error naming what and where."""

from __future__ import annotations

import json

import pytest

from stratopt.cli import main
from stratopt.errors import ModelError
from stratopt.planning import load_plan, plan


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    result = plan("alexnet", 1, 4, simulate=False)
    result.export(path)
    return result, path


def test_round_trip(exported) -> None:
    """Every operator's splits, the cluster and the figures come back as written; the mesh of each
    operator is its configuration's splits above 1, over at most the cluster's devices."""
    result, path = exported
    loaded = load_plan(path)
    costing = result.costing
    assert loaded.model == "alexnet" and loaded.cluster["devices"] == 4
    assert loaded.estimate_us == result.plan.estimate and loaded.memory_bytes == result.plan.memory
    assert list(loaded.operators) == [op.name for op in costing.graph.operators]
    for v, op in enumerate(costing.graph.operators):
        config = dict(zip(op.axes, costing.configs[v][result.plan.assignment[v]].tolist(), strict=True))
        assert dict(loaded.operators[op.name]["mesh"]) == {a: c for a, c in config.items() if c > 1}
    assert loaded.to_dict() == json.loads(path.read_text())


def test_cli_export_equals_the_library_export(exported, tmp_path, capsys) -> None:
    """stratopt plan --export writes the same file as PlanResult.export."""
    _, path = exported
    out = tmp_path / "cli.json"
    assert main(["plan", "alexnet", "--nodes", "1", "--gpus-per-node", "4", "--no-simulate", "--export", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text()) == json.loads(path.read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(format="other"), "not a stratopt plan"),
        (lambda d: d.update(version=4), "plan version 4"),
        (lambda d: d.update(mesh={"shape": [3, 1]}), "not the cluster"),
        (
            lambda d: d.update(mesh={"shape": [1, 4]}, modules={"fc": {"tp": "diagonal", "fsdp": False}}),
            "must be one of",
        ),
        (
            lambda d: d.update(mesh={"shape": [1, 4]}, modules={"fc": {"tp": "colwise", "fsdp": False, "rerun": "no"}}),
            "module 'fc': 'rerun' must be true or false",
        ),
        (
            lambda d: d.update(
                mesh={"shape": [4, 1]}, modules={"fc": {"tp": "replicate", "fsdp": False, "reshard": False}}
            ),
            "module 'fc': 'reshard' must be true or false, false (ZeRO-2) only where 'fsdp' is true",
        ),
        (
            lambda d: d.update(mesh={"shape": [4, 1]}, modules={"fc": {"tp": "replicate", "fsdp": True, "hsdp": 3}}),
            "module 'fc': 'hsdp' must divide the data-parallel devices, on a module 'fsdp' shards",
        ),
        (
            lambda d: d.update(mesh={"shape": [1, 4]}, modules={"fc": {"tp": "rowwise", "fsdp": False, "pieces": 3}}),
            "module 'fc': 'pieces' must be a positive integer, above 1 only on a colwise module handing on its shard",
        ),
        (
            lambda d: d.update(
                mesh={"shape": [1, 4]}, modules={"fc": {"tp": "sequence", "fsdp": False, "input": "sequence"}}
            ),
            "module 'fc': a 'sequence' layout needs 'sequence_dim'",
        ),
        (lambda d: d.pop("operators"), "'operators' must be a JSON object"),
        (lambda d: d["cluster"].update(nodes=0), "cluster.nodes must be a positive integer"),
        (lambda d: d["cluster"].update(devices=5), "cluster.devices is 5, not nodes x gpus_per_node"),
        (lambda d: d["operators"]["conv1"].update(mesh=[["zz", 2]]), "operator 'conv1': mesh entry ['zz', 2]"),
        (
            lambda d: d["operators"]["conv1"].update(mesh=[["n", 7]]),
            "operator 'conv1': axis 'n' of size 96 cannot split 7 ways",
        ),
        (lambda d: d["operators"]["conv1"].update(mesh=[["n", 8]]), "splits over 8 devices, more than the cluster's 4"),
        (lambda d: d.update(estimate_us="fast"), "'estimate_us' must be a number or null"),
    ],
)
def test_bad_files_are_one_line_errors(exported, tmp_path, edit, message) -> None:
    """Each defect is named, with the file, on one line."""
    _, path = exported
    data = json.loads(path.read_text())
    edit(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ModelError) as err:
        load_plan(bad)
    text = str(err.value)
    assert message in text and str(bad) in text and "\n" not in text


def test_unreadable_files(tmp_path) -> None:
    """A missing file and a file that is not JSON are one-line errors too."""
    with pytest.raises(ModelError, match="no such file"):
        load_plan(tmp_path / "none.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ModelError, match="invalid JSON"):
        load_plan(broken)


def test_export_all_writes_every_strategy_that_runs(tmp_path, capsys) -> None:
    """plan --export-all DIR: the plan and each baseline PyTorch runs as priced, a file each, named
    after the strategy and loading back as it; the others are listed with the reason."""
    pytest.importorskip("torch")
    result = plan("stratopt.torch.models:mlp", 1, 4, simulate=False, expressible="torch")
    written = result.export_all(tmp_path / "all")
    assert set(written) == {"plan", *(b.name for b in result.baselines)}
    files = {name: where for name, where in written.items() if where.endswith(".json")}
    assert {"plan", "data-parallel", "fsdp", "megatron-tp2", "megatron-tp4"} <= set(files), written
    for name, where in files.items():
        loaded = load_plan(where)
        strategy = result.plan if name == "plan" else next(b for b in result.baselines if b.name == name)
        assert loaded.name == name and loaded.mesh is not None and loaded.estimate_us == strategy.estimate
    assert load_plan(files["megatron-tp4"]).mesh == (1, 4) and load_plan(files["data-parallel"]).mesh == (4, 1)
    for name in set(written) - set(files):
        assert written[name], name  # a reason, never silence
    argv = ["plan", "stratopt.torch.models:mlp", "--nodes", "1", "--gpus-per-node", "4", "--no-simulate"]
    assert main([*argv, "--expressible", "torch", "--export-all", str(tmp_path / "cli"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {k: v.replace(str(tmp_path / "cli"), "") for k, v in data["exported"].items() if v.endswith(".json")} == {
        k: v.replace(str(tmp_path / "all"), "") for k, v in files.items()
    }
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main([*argv, "--export-all", str(blocked / "sub")]) == 2
    assert "cannot make the folder" in capsys.readouterr().err
