"""stratopt train: a plan's AdamW steps on gloo ranks, measured, and held against one process."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from stratopt.cli import main
from stratopt.errors import ModelError
from stratopt.planning import plan
from stratopt.planning.export import ExportedPlan
from stratopt.torch.train import LOSS_TOLERANCE, TrainReport, train

MODEL = "stratopt.importers.hf:llama"


@pytest.fixture(scope="module")
def llama_plan(tmp_path_factory) -> str:
    """The tiny Llama's plan on 1 x 2 devices among those DTensor runs, exported."""
    path = tmp_path_factory.mktemp("train") / "plan.json"
    ExportedPlan.of(plan(MODEL, 1, 2, simulate=False, expressible="torch")).write(str(path))
    return str(path)


def test_train_steps_match_one_process(llama_plan, capsys) -> None:
    """Three AdamW steps on two gloo ranks: the loss of every step equals one process's (the plan
    changes where the work runs, not what it computes), the loss falls, and the JSON carries the
    measured step beside the plan's estimate."""
    assert main(["train", MODEL, "--plan", llama_plan, "--world", "2", "--steps", "3", "--check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["max_relative_error"] <= LOSS_TOLERANCE
    assert len(out["losses"]) == len(out["one_process_losses"]) == 3
    assert out["losses"] == pytest.approx(out["one_process_losses"], rel=LOSS_TOLERANCE)
    assert out["losses"][-1] < out["losses"][0]
    assert out["measured_step_s"] > 0 and out["predicted_step_s"] > 0 and out["backend"] == "gloo"
    assert [s["step"] for s in out["steps"]] == [1, 2, 3] and all(s["tokens_per_s"] > 0 for s in out["steps"])
    assert len(out["steps"][0]["peak_memory_bytes"]) == 2


def test_a_wrong_loss_is_a_mismatch() -> None:
    """The check can fail: one process's losses a step off are a mismatch."""
    report = TrainReport(MODEL, 2, (2, 1), "gloo", [1.0, 0.9], [0.1, 0.1], 64, "tokens", [1.0, 1.0], 0.1, [1.0, 0.8])
    assert report.ok is False and report.max_relative_error == pytest.approx(0.125)
    assert report.measured_step_s == pytest.approx(0.1)


def test_bad_train_input_is_one_line(llama_plan, capsys) -> None:
    """A world the plan was not made for, or a plan for another model: one line, exit 2, before any rank starts."""
    assert main(["train", MODEL, "--plan", llama_plan, "--world", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not --world 3" in err[0]
    with pytest.raises(ModelError, match="not in"):
        train("stratopt.torch.models:mlp", llama_plan, 2, 1)


def test_a_pipelined_plan_trains_as_one_process(tmp_path, capsys) -> None:
    """plan --stages 2 --microbatches auto --expressible torch exports a pipeline (micro-batches
    searched, at least one per stage); three AdamW steps of it on two gloo ranks, one stage each,
    give one process's losses, and the JSON says how many stages ran."""
    path = tmp_path / "pipeline.json"
    command = ["plan", MODEL, "--nodes", "1", "--gpus-per-node", "2", "--expressible", "torch", "--no-simulate"]
    assert main([*command, "--stages", "2", "--microbatches", "auto", "--export", str(path), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["pipeline"]["runs"] == "torch" and len(planned["pipeline"]["stages"]) == 2
    section = json.loads(path.read_text())["pipeline"]
    assert section["microbatches"] >= 2 and section["microbatches"] == planned["pipeline"]["microbatches"]
    assert main(["train", MODEL, "--plan", str(path), "--world", "2", "--steps", "3", "--check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["stages"] == 2
    assert out["losses"] == pytest.approx(out["one_process_losses"], rel=LOSS_TOLERANCE)
    assert main(["train", MODEL, "--plan", str(path), "--world", "4"]) == 2
    assert "2 stages of 1 x 1 devices, not --world 4" in capsys.readouterr().err
    # --microbatches without --stages: gradient accumulation, one stage over both devices
    assert main([*command, "--microbatches", "2", "--export", str(path), "--json"]) == 0
    section = json.loads(path.read_text())["pipeline"]
    assert len(section["stages"]) == 1 and section["microbatches"] == 2 and section["boundaries"] == []
