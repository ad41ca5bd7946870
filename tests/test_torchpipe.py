"""Pipelines that run: the layout DP against brute force, the runnable search's stages (blocks in
order, strategies DTensor runs on their mesh, memory within the limit, the estimate its own formula),
its refusals, the export's pipeline section read back and refused when wrong, and a model cut into
stages computing, stage after stage on one process, what the whole model computes."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import numpy as np
import pytest

from stratopt.errors import ModelError
from stratopt.instances import load_instance
from stratopt.planning import plan
from stratopt.planning.export import ExportedPlan, load_plan, plan_from_dict
from stratopt.planning.stages import one_f_one_b
from stratopt.planning.torchpipe import best_layout, flight, runnable_pipeline
from stratopt.planning.torchplan import restricted_costs
from stratopt.problem import FORBIDDEN


def _brute(times: np.ndarray, moves, stages: int, m: int) -> float:
    units = times.shape[0] - 1
    best = math.inf
    for inner in itertools.combinations(range(1, units), stages - 1):
        cuts = [0, *inner, units]
        parts = [times[a, b] for a, b in itertools.pairwise(cuts)] + [moves(c, k + 1) for k, c in enumerate(inner)]
        if all(np.isfinite(parts)):
            best = min(best, sum(parts) + (m - 1) * max(parts))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_layout_is_the_brute_force_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    units = int(rng.integers(2, 7))
    times = np.full((units + 1, units + 1), np.inf)
    for i in range(units):
        for j in range(i + 1, units + 1):
            if rng.random() > 0.15:
                times[i, j] = float(rng.integers(1, 40))
    cost = rng.integers(0, 10, size=(units + 1, units + 1)).astype(float)

    def moves(i: int, k: int) -> float:
        return float(cost[i, k])

    stages = int(rng.integers(1, units + 1))
    m = int(rng.integers(1, 6))
    found = best_layout(times, moves, stages, m)
    expected = _brute(times, moves, stages, m)
    if expected == math.inf:
        assert found is None
        return
    assert found is not None
    value, cuts = found
    assert value == pytest.approx(expected)
    parts = [times[a, b] for a, b in itertools.pairwise(cuts)] + [moves(c, k + 1) for k, c in enumerate(cuts[1:-1])]
    assert len(cuts) == stages + 1 and sum(parts) + (m - 1) * max(parts) == pytest.approx(value)


def test_in_flight_counts() -> None:
    assert [flight("1f1b", k, 3, 8) for k in range(3)] == [3, 2, 1]
    assert [flight("gpipe", k, 3, 8) for k in range(3)] == [8, 8, 8]


@pytest.mark.parametrize(("model", "devices", "mesh"), [("llama", 4, (1, 2)), ("mlp", 4, (2, 1)), ("mixtral", 2, None)])
def test_runnable_stages(model: str, devices: int, mesh) -> None:
    """Stages cover the blocks in order, each on the mesh with strategies DTensor runs there, within
    the memory limit, and the estimate is 1F1B's formula over the stages' step-model times."""
    entry = f"stratopt.torch.models:{model}" if model == "mlp" else f"stratopt.importers.hf:{model}"
    graph = load_instance(entry)
    run = runnable_pipeline(graph, 1, devices, stages=2, microbatches=2, mesh=mesh)
    assert len(run.plan.stages) == 2 and run.plan.microbatches == 2
    assert mesh is None or run.mesh == mesh
    assert [b for s in run.blocks for b in s] == [f"{'blocks' if model == 'mlp' else 'layers'}.{k}" for k in range(2)]
    assert run.plan.stages[0].start == 0 and run.plan.stages[-1].end == len(run.graph)
    assert run.plan.stages[0].end == run.plan.stages[1].start
    for stage, costing in zip(run.plan.stages, run.costings(), strict=True):
        allowed = restricted_costs(costing, *run.mesh)
        assert allowed is not None
        assert all(a[c] < FORBIDDEN for a, c in zip(allowed, stage.assignment, strict=True))
        assert stage.time == pytest.approx(costing.stage_time(stage.assignment, 2))
    assert max(run.memory()) <= run.where.machine.memory_gb * 1e9
    times = [s.time for s in run.plan.stages] + list(run.plan.transfers)
    assert run.estimate == pytest.approx(one_f_one_b(times, 2) + run.step_overhead)
    section = run.export()["pipeline"]
    assert section["boundaries"][0]["before"] == run.blocks[1][0]


def test_memory_binds_stage_by_stage() -> None:
    """Under 75% of the free pipeline's memory each stage still fits, sharding (FSDP) where it must."""
    graph = load_instance("stratopt.importers.hf:llama")
    free = runnable_pipeline(graph, 1, 4, stages=2, microbatches=2, mesh=(2, 1), recompute="none")
    limit = 0.75 * max(free.memory())
    tight = runnable_pipeline(
        graph, 1, 4, stages=2, microbatches=2, mesh=(2, 1), recompute="none", memory_gb=limit / 1e9
    )
    assert max(tight.memory()) <= limit < max(free.memory())
    assert any(e["fsdp"] for e in tight.export()["modules"].values())
    assert tight.estimate >= free.estimate - 1e-6


def test_full_recomputation_checkpoints_every_block() -> None:
    graph = load_instance("stratopt.importers.hf:gpt2")
    run = runnable_pipeline(graph, 1, 2, stages=2, microbatches=2, recompute="full", schedule="gpipe")
    parts = run.export()
    assert parts["recompute"] == ["h.0", "h.1"] and parts["pipeline"]["schedule"] == "gpipe"
    assert [s["recompute"] for s in parts["pipeline"]["stages"]] == [["h.0"], ["h.1"]]
    again = [n for n, e in parts["modules"].items() if "recompute" in e["collectives"]]
    assert again and all(n.startswith(("h.0.", "h.1.")) for n in again)


def test_refusals() -> None:
    llama = load_instance("stratopt.importers.hf:llama")
    with pytest.raises(ModelError, match="no repeated blocks"):
        runnable_pipeline(load_instance("alexnet"), 1, 2, stages=2, microbatches=2)
    with pytest.raises(ModelError, match="at least 2 micro-batches"):
        runnable_pipeline(llama, 1, 2, stages=2, microbatches=1)
    with pytest.raises(ModelError, match="schedule"):
        runnable_pipeline(llama, 1, 2, stages=2, microbatches=2, schedule="zigzag")
    with pytest.raises(ModelError, match="only 2 runs of blocks"):
        runnable_pipeline(llama, 1, 4, stages=4, microbatches=4)
    with pytest.raises(ModelError, match="whole groups"):
        runnable_pipeline(llama, 1, 6, stages=4, microbatches=4)


@pytest.fixture(scope="module")
def exported() -> ExportedPlan:
    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    run = runnable_pipeline(result.costing.graph, 1, 2, stages=2, microbatches=2)
    return ExportedPlan.of_pipeline(result, run)


def test_the_pipeline_section_is_read_back(exported: ExportedPlan, tmp_path) -> None:
    path = tmp_path / "plan.json"
    exported.write(path)
    loaded = load_plan(path)
    assert loaded.stages == 2 and loaded.mesh == (1, 1) and loaded.pipeline == exported.pipeline
    assert loaded.cluster["devices"] == 2 and set(loaded.modules) == set(exported.modules)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.update(microbatches=0), "'microbatches' must be a positive integer"),
        (lambda p: p.update(schedule="zigzag"), "'schedule' must be 1f1b, gpipe or interleaved"),
        (lambda p: p.update(chunks=2), "'chunks' .* goes with the interleaved schedule only"),
        (lambda p: p.update(schedule="interleaved"), "'chunks' .* goes with the interleaved schedule only"),
        (lambda p: p.update(schedule="interleaved", chunks=2), "2 stages do not split into device groups of 2"),
        (lambda p: p.update(stages=[]), "'stages' must be a list of stage objects"),
        (lambda p: p.update(stages=p["stages"][:1]), "'boundaries' must list the 0 boundaries"),
        (lambda p: p["boundaries"][0].update(before="layers.0"), "boundary 0 must name stage 1's first block"),
        (lambda p: p["stages"][1].update(blocks=[]), "stage 1 has no block"),
        (lambda p: p["boundaries"].clear(), "'boundaries' must list the 1 boundaries"),
    ],
)
def test_a_bad_pipeline_section_is_one_line(exported: ExportedPlan, change, message: str) -> None:
    data = json.loads(json.dumps(exported.to_dict()))
    change(data["pipeline"])
    with pytest.raises(ModelError, match=message) as caught:
        plan_from_dict(data, "plan.json")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("plan.json: pipeline")


def test_stages_compute_the_whole_model(exported: ExportedPlan) -> None:
    """Cut into its two stages, Llama run stage after stage (the second given the first's output and
    the model's inputs) computes what the whole model does; each stage holds only its own weights."""
    torch = pytest.importorskip("torch")
    from stratopt.torch.pipeline import cut_model
    from stratopt.torch.runs import build_model

    entry = "stratopt.importers.hf:llama"
    whole, (ids,) = build_model(entry, 0)
    first = cut_model(build_model(entry, 0)[0], exported, 0)
    second = cut_model(build_model(entry, 0)[0], exported, 1)
    with torch.no_grad():
        expected = whole(ids).last_hidden_state
        out = second(first(ids), input0=ids)
    assert torch.allclose(out, expected, atol=1e-6)
    names = [{n.removeprefix("model.") for n, _ in stage.named_parameters()} for stage in (first, second)]
    assert names[0].isdisjoint(names[1]) and names[0] | names[1] == {n for n, _ in whole.named_parameters()}
    assert "embed_tokens.weight" in names[0] and "norm.weight" in names[1]


def test_a_weight_shared_across_stages_is_refused(exported: ExportedPlan) -> None:
    pytest.importorskip("torch")
    from stratopt.torch.pipeline import cut_model
    from stratopt.torch.runs import build_model

    model, _ = build_model("stratopt.importers.hf:llama", 0)
    model.norm.weight = model.layers[0].input_layernorm.weight
    with pytest.raises(ModelError, match="share a weight across stages"):
        cut_model(model, dataclasses.replace(exported), 1)


def test_recomputed_outputs_are_not_held_in_flight() -> None:
    """A micro-batch in flight holds the outputs an operator keeps, not those it recomputes."""
    from stratopt.planning.cluster import price
    from stratopt.planning.torchpipe import _usage

    graph = load_instance("stratopt.importers.hf:llama")
    costing = price(
        graph, 2, __import__("stratopt.machine", fromlist=["get_machine"]).get_machine("h100"), recompute=True
    )
    one, three = _usage(costing, 1), _usage(costing, 3)
    again = [(v, c) for v in range(len(graph)) for c in range(len(one[v])) if costing.is_recomputed(v, c)]
    kept = [(v, c) for v in range(len(graph)) for c in range(len(one[v])) if not costing.is_recomputed(v, c)]
    assert again and all(three[v][c] == one[v][c] for v, c in again)
    assert any(three[v][c] > one[v][c] for v, c in kept)


def test_stages_auto_keeps_the_plan_where_no_pipeline_is_faster(tmp_path, capsys) -> None:
    """The tiny Llama on 1 x 2: every two-stage pipeline is slower than the plan, so --stages auto
    exports the plan itself (no pipeline section) and says so."""
    from stratopt.cli import main

    path = tmp_path / "plan.json"
    command = ["plan", "stratopt.importers.hf:llama", "--nodes", "1", "--gpus-per-node", "2", "--no-simulate"]
    flags = ["--expressible", "torch", "--stages", "auto", "--microbatches", "auto", "--export", str(path), "--json"]
    assert main([*command, *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pipeline"]["chosen"] == "one stage"
    assert out["pipeline"]["without_pipelining"] <= out["pipeline"]["estimate"]
    assert "pipeline" not in json.loads(path.read_text())
