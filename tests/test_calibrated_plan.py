"""The plan on the calibrated machine: a decoder shape's graph priced operator by operator agrees
with the closed-form predictor, fused attention stores no scores, a tied weight is held once, and
communication hidden under the compute is never counted twice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stratopt.cli import main
from stratopt.cost import build
from stratopt.errors import ModelError
from stratopt.graph import GraphBuilder
from stratopt.graph.decoder import decoder_graph, parse_decoder
from stratopt.instances import load_instance
from stratopt.machine import get_machine
from stratopt.planning import plan
from stratopt.planning.predict import BLOCK_OPERATORS, OUTER_OPERATORS, Run, predict
from stratopt.problem import evaluate
from stratopt.solvers import solve

from .machines import DATASHEET_H100

MPT7B = "mpt:layers=32,d_model=4096,heads=32,vocab=50368"


def test_the_predictor_counts_the_graphs_operators() -> None:
    """The calibrated profile charges FSDP's fixed cost per pass to the sharded configurations of
    the products the predictor counts, per block and outside the blocks (the decoder graph's
    products with weights), and to nothing else."""
    graph = decoder_graph("mpt:layers=3,d_model=64,heads=4,vocab=512,seq=32,batch=4")
    h100 = get_machine("h100")
    calibration = dict(h100.calibration)
    free = dataclasses.replace(h100, calibration=tuple({**calibration, "op_overhead_us": 0.0}.items()))
    charged = []
    with_cost = build(graph, 2, machine=h100, shard_weights=True)
    without = build(graph, 2, machine=free, shard_weights=True)
    for v, op in enumerate(graph.operators):
        extra = with_cost.vertex_costs[v].compute - without.vertex_costs[v].compute
        sharded = with_cost.sharded[v]
        assert np.allclose(extra[~sharded], 0.0)
        if sharded.any():
            assert np.allclose(extra[sharded], 3 * calibration["op_overhead_us"])
            charged.append(op.name)
    blocks = [n for n in charged if n.startswith("layers.")]
    assert len(blocks) == 3 * BLOCK_OPERATORS and len(charged) - len(blocks) == OUTER_OPERATORS


def test_fused_attention_and_the_tied_embedding() -> None:
    """The scores and softmax of fused attention hold no memory and stream nothing; the products run
    the causal half, 3.5 times the forward; the output projection's tied weight has no state of its own."""
    graph = decoder_graph("mpt:layers=1,d_model=64,heads=4,vocab=512,seq=32,batch=4")
    costing = build(graph, 1, machine="h100")
    ops = {op.name: (op, vc) for op, vc in zip(graph.operators, costing.vertex_costs, strict=True)}
    for role in ("scores", "softmax"):
        assert ops[f"layers.0.attn.{role}"][1].memory.tolist() == [0.0]
    vc = ops["layers.0.attn.scores"][1]
    cal = dict(costing.profile.machine.calibration)
    work = 2 * 4 * 4 * 32 * 32 * 16 / 2  # b h l m k, the causal half
    kernel = 3.5 * work / (costing.profile.machine.peak_tflops * 1e12 * cal["attention_efficiency"]) * 1e6
    assert float(vc.compute[0]) == pytest.approx(kernel)
    assert float(ops["layers.0.attn.softmax"][1].compute[0]) == pytest.approx(0.0)
    for role in ("scores", "context"):  # forward: one of the kernel's 3.5 passes, on any machine
        for machine in ("h100", DATASHEET_H100):
            fused = next(c for o, c in zip(graph.operators, build(graph, 1, machine=machine).vertex_costs, strict=True)
                         if o.name == f"layers.0.attn.{role}")  # fmt: skip
            assert float(fused.compute_phases()[0][0]) == pytest.approx(float(fused.compute[0]) / 3.5)
    logits = 4 * 32 * 512 * 2  # the lm_head's output, bf16: its weight holds nothing more
    assert float(ops["lm_head"][1].memory[0]) == pytest.approx(logits)


@pytest.mark.parametrize("micro", [pytest.param(6, marks=pytest.mark.slow), 4])
def test_fsdp_baseline_is_the_predictors_step(micro: int) -> None:
    """MPT-7B at sequence 2048 on 1 x 8 H100 with the published runs' batch: plan's FSDP baseline
    takes the predictor's step time (within 0.5%: collective latencies are per operator in the
    graph, per block in the closed form) and fits as the measured run did; its memory is within 10%
    of the predictor's (which also counts fp32 master weights, the two gathered blocks and what the
    framework holds)."""
    result = plan(f"{MPT7B},seq=2048,batch={8 * micro}", 1, 8, simulate=False)
    fsdp = next(b for b in result.baselines if b.name == "fsdp")
    expected = predict(parse_decoder(MPT7B), Run(2048, 1, 8, "fsdp", micro))
    assert fsdp.estimate / 1e6 == pytest.approx(expected.step_time, rel=5e-3)
    assert fsdp.fits and expected.fits
    assert fsdp.memory == pytest.approx(expected.memory, rel=0.1)
    assert result.plan.fits and result.plan.estimate <= fsdp.estimate + 1e-6


def test_gradient_accumulation_steps_the_optimizer_once_as_the_predictor_does() -> None:
    """MPT-7B's FSDP baseline priced at a micro-batch of 2 sequences per device and run 3 times a
    step (``step_time(a, 3)``) takes the closed-form predictor's step with ``grad_accum=3`` as
    closely as one micro-batch takes its step with one: the
    weights gathered for every micro-batch, the gradients reduced and Adam's update once a step."""
    result = plan(f"{MPT7B},seq=2048,batch=16", 1, 8, simulate=False)
    fsdp = next(b for b in result.baselines if b.name == "fsdp")
    costing = result.costing
    ratios = []
    for accumulated in (1, 3):
        expected = predict(parse_decoder(MPT7B), Run(2048, 1, 8, "fsdp", 2, grad_accum=accumulated))
        ratios.append(costing.step_time(fsdp.assignment, accumulated) / 1e6 / expected.step_time)
    # within 1% (latencies per operator here, per block there), and the same ratio with and without
    # accumulation: what runs once a step is counted once by both
    assert ratios[0] == pytest.approx(1.0, abs=1e-2) and ratios[1] == pytest.approx(ratios[0], abs=1e-3)
    # the optimizer's part (``per_step``) is Adam's 30 bytes per weight element held, streamed
    machine = get_machine("h100")
    c = dict(machine.calibration)
    stream = machine.hbm_gbps * 1e9 * c["hbm_efficiency"]
    held = sum(
        costing.held_weights(v, k)
        for v, k in enumerate(fsdp.assignment)
        if not costing.graph.operators[v].attrs.get("tied")
    )
    steps = sum(float(vc.per_step[k]) for vc, k in zip(costing.vertex_costs, fsdp.assignment, strict=True))
    assert steps == pytest.approx(held * 30.0 / stream * 1e6, rel=1e-9)
    # accumulating M micro-batches saves (M - 1) of the once-a-step parts against M single steps
    single = costing.step_time(fsdp.assignment) - c["step_overhead_ms"] * 1e3
    four = costing.step_time(fsdp.assignment, 4) - c["step_overhead_ms"] * 1e3
    assert 4 * single - four >= 3 * steps - 1e-6


def test_step_time_hides_at_least_what_the_search_hid() -> None:
    """On random strategies of a decoder on 8 calibrated H100s, the step time with overlap over the
    whole step is at most the objective (overlap per operator) plus the constant per step, and at
    least the compute; on the datasheet machine nothing overlaps and the two are equal."""
    graph = decoder_graph("mpt:layers=2,d_model=256,heads=4,vocab=1024,seq=128,batch=16")
    rng = np.random.default_rng(0)
    for machine, overlaps in (("h100", True), (DATASHEET_H100, False)):
        costing = build(graph, 8, machine=machine, shard_weights=True)
        overhead = costing.profile.step_overhead
        for _ in range(20):
            a = tuple(int(rng.integers(len(c))) for c in costing.configs)
            step = costing.step_time(a)
            objective = float(evaluate(costing.problem, a).objective)
            compute = sum(float(vc.compute[c]) for vc, c in zip(costing.vertex_costs, a, strict=True))
            assert compute + overhead - 1e-6 <= step <= objective + overhead + 1e-6
            if not overlaps:
                assert step == pytest.approx(objective) and overhead == 0


def test_recomputation_choices_on_the_calibrated_machine_agree_with_brute_force() -> None:
    """The calibrated pricing keeps the one-hot problem every solver takes: with recomputation
    offered and a memory limit that binds, the MIP and brute force find the same optimum."""
    g = GraphBuilder("mlp3")
    g.fc(g.fc(g.fc(g.input((4096, 256)), 1024, pointwise=1), 256), 1024)
    graph = g.build()
    free = build(graph, 4, machine="h100", recompute=True, cutoff=1)
    fastest = solve(free.problem, "dp").assignment
    used = sum(float(free.vertex_costs[v].memory[c]) for v, c in enumerate(fastest))
    least = sum(float(c.memory.min()) for c in free.vertex_costs)
    bounded = build(graph, 4, machine="h100", recompute=True, cutoff=1, memory_gb=(least + 0.1 * (used - least)) / 1e9)
    assert bounded.problem.search_space_size < 10**5
    brute = solve(bounded.problem, "brute", time_limit=600)
    mip = solve(bounded.problem, "mip-highs", time_limit=120)
    assert brute.status.value == mip.status.value == "optimal"
    assert mip.objective == pytest.approx(brute.objective, rel=1e-9)
    assert brute.objective > solve(free.problem, "dp").objective  # the limit binds
    assert any(bounded.is_recomputed(v, c) for v, c in enumerate(brute.assignment))


def test_decoder_shapes_as_models(capsys) -> None:
    """A decoder shape with its run is a model every command takes; without seq or batch, or with a
    bad value, it is a one-line error (exit 2)."""
    assert len(load_instance("gpt:layers=2,d_model=64,heads=4,vocab=512,seq=32,batch=8")) == 2 * 12 + 4
    with pytest.raises(ModelError, match="needs batch"):
        decoder_graph("mpt:layers=2,d_model=64,heads=4,vocab=512,seq=32")
    for bad, message in (("seq=0,batch=8", "seq must be a positive integer"), ("seq=32,batch=x", "batch must")):
        assert (
            main(["plan", f"mpt:layers=2,d_model=64,heads=4,vocab=512,{bad}", "--nodes", "1", "--gpus-per-node", "2"])
            == 2
        )
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
