"""A pipelined iteration end to end: the stage search (micro-batch count chosen too, if asked), its
simulation under a schedule, its trace and Gantt chart, as ``stratopt plan/simulate --stages`` print
it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from stratopt.cost.default import DefaultProfile
from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.machine import get_machine
from stratopt.planning.microbatch import search_microbatches
from stratopt.planning.pipeline import search
from stratopt.planning.simulation import describe, simulate
from stratopt.planning.stages import PipelinePlan, Stage
from stratopt.planning.torchpipe import runnable_pipeline
from stratopt.sim.trace import events, write_timeline

__all__ = ["as_one_stage", "parse_stages", "plan_pipeline", "runnable_stages", "whole_nodes"]


def parse_stages(stages: str | int | None) -> int | None:
    """``auto`` (or None) -> None (the search chooses), a positive integer (or its text) -> itself.

    >>> parse_stages("auto"), parse_stages("3")
    (None, 3)
    """
    if stages is None or stages == "auto":
        return None
    text = str(stages)
    if isinstance(stages, bool) or not text.isdigit() or int(text) < 1:
        raise ModelError(f"--stages must be a positive number or auto, got {stages!r}")
    return int(text)


def whole_nodes(devices: int, machine: Any) -> tuple[int, int]:
    """``devices`` as (nodes, devices per node) in nodes of ``machine``'s size (all of them in one
    node when fewer); a :class:`ModelError` when they are not whole nodes.

    >>> from stratopt.machine import get_machine
    >>> whole_nodes(16, get_machine("h100")), whole_nodes(4, get_machine("h100"))
    ((2, 8), (1, 4))
    """
    gpus = min(devices, machine.devices_per_node)
    if devices % gpus:
        raise ModelError(f"--stages: {devices} devices are not whole nodes of {gpus}")
    return devices // gpus, gpus


def plan_pipeline(
    graph: Graph,
    nodes: int,
    gpus_per_node: int,
    machine: Any,
    *,
    stages: str | int | None = "auto",
    microbatches: int | str = 1,
    schedule: str = "1f1b",
    memory_gb: float | None = None,
    trace: str | None = None,
    gantt: str | None = None,
    progress: Callable[[str], None] | None = None,
    notes: Callable[[str], None] | None = None,
    beside: Any = None,
) -> dict[str, Any]:
    """The stage search for ``graph`` (:func:`~stratopt.planning.pipeline.search`, or with
    ``microbatches="auto"`` :func:`~stratopt.planning.microbatch.search_microbatches`), the
    iteration simulated under ``schedule``, and ``trace`` / ``gantt`` written; returns the summary
    ``stratopt plan --json`` prints under ``"pipeline"``. ``beside`` (a
    :class:`~stratopt.planning.PlanResult`) adds ``"without_pipelining"``: its plan run as
    ``microbatches`` micro-batches, each step less M - 1 gradient syncs (gradient accumulation),
    or its one step when the model's batch is cut (``auto``). ``progress`` receives the search's
    lines, ``notes`` (default: ``progress``) a line per file written.
    """

    count = parse_stages(stages)
    if schedule in ("interleaved", "auto"):
        raise ModelError(
            f"--schedule {schedule} is searched only among the pipelines PyTorch runs (plan --expressible torch)"
        )
    say = notes or progress or (lambda _msg: None)
    options = {"machine": machine, "stages": count, "memory_gb": memory_gb}
    tried: list[tuple[int, float]] = []
    if microbatches == "auto":
        found, graph, tried = search_microbatches(graph, nodes, gpus_per_node, progress=progress, **options)
    elif isinstance(microbatches, int):
        found = search(graph, nodes, gpus_per_node, microbatches=microbatches, progress=progress, **options)
    else:
        raise ModelError(f"micro-batches must be a positive integer or 'auto', got {microbatches!r}")
    if beside is not None and count in (None, 1) and microbatches != "auto":
        # One stage is the plan: its strategy over every device, as gradient accumulation.
        one = as_one_stage(beside, found.microbatches)
        if one is not None and one.estimate <= found.estimate:
            say(f"{graph.name}: one stage, the plan's strategy, is the fastest pipeline")
            found = one
    timeline, info = simulate(graph, found, machine, schedule)
    constant = _per_step(machine)  # outside the stages' work: once per iteration
    for line in write_timeline(events(timeline), trace_file=trace, gantt_file=gantt, title=f"{graph.name}: {schedule}"):
        say(line)
    out: dict[str, Any] = {
        "microbatches": found.microbatches,
        "schedule": schedule,
        "estimate": found.estimate + constant,
        "simulated": info["iteration_time"] + constant,
        "bubble": info["bubble"],
        "transfers": list(found.transfers),
        "stages": describe(graph, found, machine),
    }
    if tried:
        out["tried"] = [{"microbatches": m, "estimate": None if e == math.inf else e + constant} for m, e in tried]
    if beside is not None:
        single = as_one_stage(beside, found.microbatches if microbatches != "auto" else 1)
        out["without_pipelining"] = None if single is None else single.estimate + constant
    return out


def runnable_stages(
    result: Any,
    *,
    stages: str | int | None = "auto",
    microbatches: int | str = 1,
    schedule: str = "1f1b",
    recompute: str = "auto",
    trace: str | None = None,
    gantt: str | None = None,
    progress: Callable[[str], None] | None = None,
    notes: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], Any | None]:
    """``plan --stages --expressible torch``: the fastest pipeline PyTorch runs
    (:func:`~stratopt.planning.torchpipe.runnable_pipeline`) for the model and cluster of ``result``
    (a :class:`~stratopt.planning.PlanResult`), under its memory limit; returns the summary ``plan
    --json`` prints under ``"pipeline"`` (with ``"without_pipelining"``: ``result``'s plan) and the
    pipeline itself, whose export (:meth:`~stratopt.planning.export.ExportedPlan.of_pipeline`)
    ``check-plan`` and ``train`` run; with ``stages="auto"``, None in its place (and ``"chosen": "one
    stage"``) where ``result``'s plan is no slower than every pipeline of stages."""
    say = notes or progress or (lambda _msg: None)
    where = result.cluster
    run = runnable_pipeline(
        result.costing.graph, where.nodes, where.gpus_per_node, where.machine, stages=parse_stages(stages),
        microbatches=microbatches, schedule=schedule, memory_gb=result.memory_gb, recompute=recompute,
        time_limit=None, progress=progress,
    )  # fmt: skip
    info = run.summary()
    if trace is not None or gantt is not None:  # the summary simulated it already; again only to draw it
        timeline, _ = simulate(run.graph, run.plan, where.machine, run.schedule)
        title = f"{run.graph.name}: {run.schedule}"
        for line in write_timeline(events(timeline), trace_file=trace, gantt_file=gantt, title=title):
            say(line)
    single = result.plan.estimate if result.plan.fits else None
    info["without_pipelining"] = single
    if parse_stages(stages) is None and single is not None and single <= run.estimate:
        # --stages auto: the plan itself, one stage without micro-batches, is the fastest pipeline
        say(f"{run.graph.name}: one stage, the plan itself, is no slower than any pipeline of stages: it is the plan")
        info["chosen"] = "one stage"
        return info, None
    return info, run


def _per_step(machine: Any) -> float:
    """The ``default`` profile's constant per step on ``machine`` (microseconds; 0 uncalibrated)."""

    return float(DefaultProfile(get_machine(machine) if isinstance(machine, str) else machine).step_overhead)


def as_one_stage(result: Any, microbatches: int) -> PipelinePlan | None:
    """``result``'s plan (a :class:`~stratopt.planning.PlanResult`) as a pipeline of one stage over
    all its devices, running ``microbatches`` micro-batches (gradient accumulation), priced by the
    step model as ``plan`` prices it; None where the plan has no strategy that fits."""
    a = result.plan.assignment
    if a is None or not result.plan.fits:
        return None
    costing = result.costing
    stage = Stage(0, len(costing.graph), costing.policy.procs, costing.stage_time(a, microbatches), a)
    stage = dataclasses.replace(stage, recompute=bool(costing.recomputed))
    # The objective the stage search would give it: the additive times, the gradients' share once.
    sync = sum(float(c.exposed_sync(costing.overlap)[x]) for c, x in zip(costing.vertex_costs, a, strict=True))
    objective = microbatches * float(result.plan.objective) - (microbatches - 1) * sync
    return PipelinePlan((stage,), (), microbatches, costing.policy.procs, objective)
