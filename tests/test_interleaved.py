"""The interleaved pipeline schedule: the order each device group runs its stages in against the order
PyTorch's ``ScheduleInterleaved1F1B`` runs, its iteration time against the simulation, the search's
choice of stages per group (and ``--schedule auto``'s of the schedule), its refusals, and a plan of
two device groups of two stages each run on two gloo processes as one process computes it."""

from __future__ import annotations

import json

import pytest

from stratopt.cli import main
from stratopt.errors import ModelError
from stratopt.instances import load_instance
from stratopt.planning import plan
from stratopt.planning.export import ExportedPlan, plan_from_dict
from stratopt.planning.simulation import in_flight, rank_order, simulate
from stratopt.planning.stages import interleaved, one_f_one_b
from stratopt.planning.torchpipe import runnable_pipeline


@pytest.fixture(scope="module")
def deep() -> str:
    """A four-block Llama (two device groups of two stages need four runs of blocks)."""
    pytest.importorskip("transformers")
    return "stratopt.importers.hf:llama,layers=4"


def _torch_order(rank: int, groups: int, chunks: int, microbatches: int) -> list[tuple[str, int, int]]:
    """The passes PyTorch's interleaved schedule gives ``rank``, from its own planner (no process group)."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    kind = schedules.ScheduleInterleaved1F1B
    fake = kind.__new__(kind)
    fake.n_local_stages, fake.pp_group_size, fake._n_microbatches = chunks, groups, microbatches
    fake.number_of_rounds = max(1, microbatches // groups)
    fake.microbatches_per_round = microbatches // fake.number_of_rounds
    forward = schedules._ComputationType.FORWARD
    actions = kind._calculate_single_rank_operations(fake, rank)
    return [("F" if a.computation_type == forward else "B", a.stage_index, a.microbatch_index) for a in actions if a]


@pytest.mark.parametrize("groups", [2, 3, 4])
@pytest.mark.parametrize("chunks", [2, 3])
@pytest.mark.parametrize("microbatches", [1, 2, 3, 4, 8])
def test_the_order_is_pytorchs(groups: int, chunks: int, microbatches: int) -> None:
    if microbatches % max(1, microbatches // groups):
        with pytest.raises(ModelError, match="rounds of"):
            rank_order(0, groups, chunks, microbatches, "interleaved")
        return
    for rank in range(groups):
        mine = rank_order(rank, groups, chunks, microbatches, "interleaved")
        assert mine == _torch_order(rank, groups, chunks, microbatches), rank
        # every stage of the group runs each micro-batch forward, then backward, once
        for stage in range(rank, groups * chunks, groups):
            for kind in "FB":
                assert sorted(m for k, s, m in mine if (k, s) == (kind, stage)) == list(range(microbatches))
        assert max(in_flight(mine).values()) <= microbatches


def test_one_chunk_is_one_f_one_b_and_more_chunks_shrink_the_bubble() -> None:
    times = [3.0, 1.0, 2.0, 2.5]
    for m in (1, 2, 5):
        assert interleaved(times[:2], [0.5], 2, m) == pytest.approx(one_f_one_b([*times[:2], 0.5], m))
    # the same work per group (5.0 and 3.5) cut into two chunks each: the fill and drain halve
    two = interleaved([3.0, 1.0, 2.0, 2.5], [], 2, 4)
    one = one_f_one_b([5.0, 3.5], 4)
    assert two == pytest.approx(4 * 5.0 + (8.5 - 5.0) / 2) and two < one


def test_the_search_interleaves_and_the_simulation_agrees(deep: str) -> None:
    """On a four-block Llama at two groups, interleaving two stages per group beats 1F1B's bubble;
    its estimate is the simulated iteration within 1%, each stage holds its order's micro-batches in
    flight, and ``auto`` keeps the faster schedule."""
    graph = load_instance(deep)
    runs = {s: runnable_pipeline(graph, 1, 2, stages=2, microbatches=4, schedule=s) for s in ("1f1b", "interleaved")}
    inter = runs["interleaved"]
    assert inter.plan.chunks == 2 and inter.plan.groups == 2 and len(inter.plan.stages) == 4
    assert [len(b) for b in inter.blocks] == [1, 1, 1, 1]
    summary = inter.summary()
    assert summary["chunks"] == 2 and [r["group"] for r in summary["stages"]] == [0, 1, 0, 1]
    assert summary["simulated"] == pytest.approx(summary["estimate"], rel=0.01)
    assert summary["bubble"] < runs["1f1b"].summary()["bubble"]
    _, info = simulate(inter.graph, inter.plan, inter.where.machine, "interleaved")
    assert info["iteration_time"] + inter.step_overhead == pytest.approx(summary["simulated"])
    held = {}
    for r in range(2):
        held.update(in_flight(rank_order(r, 2, 2, 4, "interleaved")))
    assert [inter.in_flight(k) for k in range(4)] == [held[k] for k in range(4)]
    assert inter.group_memory() == pytest.approx([sum(inter.memory()[g::2]) for g in range(2)])
    best = runnable_pipeline(graph, 1, 2, stages=2, microbatches=4, schedule="auto")
    assert best.estimate == pytest.approx(min(r.estimate for r in runs.values()))
    exported = inter.export()["pipeline"]
    assert exported["chunks"] == 2 and exported["schedule"] == "interleaved"
    assert [s["blocks"] for s in exported["stages"]] == [[f"layers.{i}"] for i in range(4)]


def test_refusals(deep: str, capsys) -> None:
    llama = load_instance("stratopt.importers.hf:llama")  # two blocks: one stage per group at most
    with pytest.raises(ModelError, match="4 stages asked, but only 2 runs of blocks"):
        runnable_pipeline(llama, 1, 2, stages=2, microbatches=2, schedule="interleaved")
    command = ["plan", deep, "--nodes", "1", "--gpus-per-node", "2", "--stages", "2", "--schedule", "interleaved"]
    assert main(command) == 2
    assert "--schedule interleaved is searched among the pipelines PyTorch runs" in capsys.readouterr().err
    assert main(["simulate", "gpt", "-p", "8", "--stages", "2", "--schedule", "auto"]) == 2  # no such option there
    assert "only among the pipelines PyTorch runs (plan --expressible torch)" in capsys.readouterr().err


def test_an_interleaved_plan_runs_and_trains_as_one_process(deep: str, tmp_path, capsys) -> None:
    """Two gloo processes, each running two of the four stages under PyTorch's interleaved 1F1B:
    check-plan's loss, gradients, bytes, collectives and every transfer (each rank sends and
    receives a micro-batch's tensor across each boundary of its stages, each way), then three
    training steps against one process."""
    from stratopt.torch.check import check_plans

    result = plan(deep, 1, 2, simulate=False, expressible="torch")
    run = runnable_pipeline(result.costing.graph, 1, 2, stages=2, microbatches=2, schedule="interleaved")
    exported = ExportedPlan.of_pipeline(result, run)
    path = tmp_path / "interleaved.json"
    exported.write(path)
    loaded = plan_from_dict(json.loads(path.read_text()), str(path))
    assert loaded.stages == 2 and loaded.chunks == 2
    (report,) = check_plans([(deep, loaded)], 2, timeout=600)
    assert report.ok, report.to_dict()["checks"]
    assert report.stages == 2 and report.checks["pipeline transfers"]
    # rank 0 runs stages 0 and 2 (three boundaries: 0-1, 1-2, 2-3), rank 1 stages 1 and 3: each
    # crosses three boundaries, two micro-batches, a send and a receive each way
    assert [sum(r["counted"].values()) for r in report.transfers] == [3 * 2 * 2, 3 * 2 * 2]
    assert main(["train", deep, "--plan", str(path), "--world", "2", "--steps", "3", "--check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["stages"] == 2
