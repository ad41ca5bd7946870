"""The pipelined iteration simulated as a task graph: each stage's passes per micro-batch in its
schedule's order, the transfers between stages on their links."""

from __future__ import annotations

from typing import Any

import numpy as np

from stratopt.cost.common import layout
from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.machine import get_machine
from stratopt.planning.stages import PipelinePlan, Stage, stage_costing
from stratopt.planning.words import describe_layers
from stratopt.sim.engine import check_timeline, simulate_tasks
from stratopt.sim.taskgraph import KINDS, StrategyTasks, TaskGraph


def _stage_memory(costing: Any, assignment: tuple[int, ...]) -> tuple[float, float]:
    """(bytes per device of a stage's strategy: weights, gradients, optimizer state and one
    micro-batch's kept activations; the kept activations alone, those of every operator that does not
    recompute its outputs)."""

    dtype = costing.profile.dtype_bytes
    total = activations = 0.0
    for v, op in enumerate(costing.graph.operators):
        c = assignment[v]
        total += float(costing.vertex_costs[v].memory[c])
        if costing.is_recomputed(v, c):  # recomputed in the backward pass: not held between the passes
            continue
        row = costing.configs[v][c : c + 1]
        activations += sum(float(u.size / np.prod(layout(op, u, row))) * dtype for u in op.outputs)
    return total, activations


def _stage_passes(graph: Graph, stage: Stage, machine: Any) -> tuple[float, float, float]:
    """(forward, backward, gradient sync) microseconds of one micro-batch through a stage, from the
    operator-level simulator on the stage's own devices: the passes simulated without the
    weight-gradient synchronisation (forward ends when the last forward task does), and the sync's
    share is what it adds to the whole step's makespan (it overlaps the backward pass; a pipeline
    runs it once per iteration, after the stage's last backward), with the optimizer's step moved
    from the backward pass to it (once an iteration too)."""

    costing = stage_costing(graph, stage, machine)
    tasks = StrategyTasks(costing, stage.assignment).graph
    whole = simulate_tasks(tasks).makespan
    for t in tasks.tasks():  # the same step without the sync (it no longer competes for the links)
        if KINDS.get(tasks.label[t][:2]) == "grad-sync":
            tasks.exe[t] = 0.0
    timeline = simulate_tasks(tasks)
    forward = max((timeline.end[t] for t in tasks.tasks() if tasks.label[t][0] == 0), default=0.0)
    # the optimizer's step, inside the operators' compute, runs once an iteration too
    step = sum(
        float(vc.per_step[c])
        for vc, c in zip(costing.vertex_costs, stage.assignment, strict=True)
        if vc.per_step is not None
    )
    backward = timeline.makespan - forward
    step = min(step, backward)
    return forward, backward - step, max(0.0, whole - timeline.makespan) + step


def schedule_order(stage: int, stages: int, microbatches: int, schedule: str) -> list[tuple[str, int]]:
    """The order a stage runs its passes in: ``gpipe`` all forwards then all backwards; ``1f1b``
    ``stages - stage - 1`` warm-up forwards, then one forward and one backward in turn, then the
    remaining backwards (PipeDream-Flush), which keeps at most ``stages - stage`` micro-batches in flight.

    >>> schedule_order(0, 2, 3, "1f1b")
    [('F', 0), ('F', 1), ('B', 0), ('F', 2), ('B', 1), ('B', 2)]
    """
    if schedule == "gpipe":
        return [("F", m) for m in range(microbatches)] + [("B", m) for m in range(microbatches)]
    if schedule != "1f1b":
        raise ModelError(f"unknown pipeline schedule {schedule!r}; use 1f1b, gpipe or interleaved")
    warm = min(stages - stage - 1, microbatches)
    order = [("F", m) for m in range(warm)]
    for m in range(microbatches):
        if warm + m < microbatches:
            order.append(("F", warm + m))
        order.append(("B", m))
    return order


def rank_order(rank: int, groups: int, chunks: int, microbatches: int, schedule: str) -> list[tuple[str, int, int]]:
    """The passes device group ``rank`` of ``groups`` runs, in order, as (kind, stage, micro-batch):
    its one stage's :func:`schedule_order`, or with ``chunks`` stages per group (stage ``j`` on group
    ``j % groups``) interleaved 1F1B as ``torch.distributed.pipelining`` orders it: the micro-batches
    in rounds of ``microbatches // max(1, microbatches // groups)``, each round through one chunk
    after the other (depth first); ``2 (groups - rank - 1) + (chunks - 1) x round`` warm-up
    forwards, then a forward and a backward in turn (the backwards through the chunks the other
    way), then the remaining backwards.

    >>> rank_order(0, 2, 2, 2, "interleaved")
    [('F', 0, 0), ('F', 0, 1), ('F', 2, 0), ('F', 2, 1), ('B', 2, 0), ('B', 2, 1), ('B', 0, 0), ('B', 0, 1)]
    """
    if chunks == 1 and schedule != "interleaved":
        return [(kind, rank, m) for kind, m in schedule_order(rank, groups, microbatches, schedule)]
    if schedule != "interleaved":
        raise ModelError(f"{chunks} stages per device group need the interleaved schedule, not {schedule!r}")
    rounds = max(1, microbatches // groups)
    if microbatches % rounds:
        raise ModelError(
            f"interleaved 1F1B runs micro-batches in rounds of {microbatches // rounds}: {microbatches} is not a multiple"
        )
    per_round = microbatches // rounds
    total = chunks * microbatches
    warm = min((chunks - 1) * per_round + 2 * (groups - rank - 1), total)

    def forward_chunk(op: int) -> int:
        return ((op // per_round) % chunks) * groups + rank

    def backward_chunk(op: int) -> int:
        return (chunks - 1 - ((op - warm) // per_round) % chunks) * groups + rank

    done: dict[tuple[str, int], int] = {}

    def take(kind: str, stage: int) -> tuple[str, int, int]:
        m = done.get((kind, stage), 0)
        done[(kind, stage)] = m + 1
        return kind, stage, m

    order = []
    for op in range(total + warm):  # warm-up forwards, then forward and backward in turn, then the drain
        if op < total:
            order.append(take("F", forward_chunk(op)))
        if op >= warm:
            order.append(take("B", backward_chunk(op)))
    return order


def in_flight(order: list[tuple[str, int, int]]) -> dict[int, int]:
    """The most micro-batches each stage of ``order`` holds at once (forwards run, backwards not yet).

    >>> in_flight(rank_order(0, 2, 2, 2, "interleaved"))
    {0: 2, 2: 2}
    """
    held: dict[int, int] = {}
    most: dict[int, int] = {}
    for kind, stage, _ in order:
        held[stage] = held.get(stage, 0) + (1 if kind == "F" else -1)
        most[stage] = max(most.get(stage, 0), held[stage])
    return most


def flight(schedule: str, k: int, stages: int, microbatches: int, chunks: int = 1) -> int:
    """Micro-batches whose activations stage ``k`` of ``stages`` holds at once: 1F1B's
    ``min(stages - k, M)``, GPipe's ``M``; interleaved (``chunks`` stages per device group), counted
    from the order its group runs them in (:func:`rank_order`).

    >>> flight("1f1b", 0, 4, 8), flight("1f1b", 3, 4, 8), flight("gpipe", 3, 4, 8)
    (4, 1, 8)
    >>> tuple(flight("interleaved", k, 4, 4, 2) for k in range(4))
    (4, 3, 2, 1)
    """
    if chunks > 1:
        groups = stages // chunks
        return in_flight(rank_order(k % groups, groups, chunks, microbatches, "interleaved"))[k]
    return microbatches if schedule == "gpipe" else min(stages - k, microbatches)


def simulate(graph: Graph, plan: PipelinePlan, machine: Any, schedule: str = "1f1b") -> tuple[Any, dict[str, Any]]:
    """Simulate one iteration of ``plan``: every micro-batch's forward and backward pass on every
    stage (durations from the operator-level simulator of that stage), the transfers between stages
    on their links, each device group's passes in ``schedule``'s order (:func:`rank_order`). Returns
    the timeline (for :func:`stratopt.sim.trace.events`, Chrome traces and Gantt charts) and a
    summary with ``iteration_time`` and the bubble fraction (the share of group time spent idle)."""

    if isinstance(machine, str):
        machine = get_machine(machine)
    count = len(plan.stages)
    groups = plan.groups
    m_count = plan.microbatches
    passes = [_stage_passes(graph, s, machine) for s in plan.stages]
    if plan.chunks > 1:
        names = [f"group {k} ({plan.stages[k].devices} dev)" for k in range(groups)]
    else:
        names = [f"stage {k} ({s.devices} dev)" for k, s in enumerate(plan.stages)]
    g = TaskGraph(names)
    task: dict[tuple[str, int, int], int] = {}
    for r in range(groups):
        previous = None
        order = rank_order(r, groups, plan.chunks, m_count, schedule)
        for position, (kind, k, m) in enumerate(order):
            fwd, bwd, _ = passes[k]
            phase = 0 if kind == "F" else 1
            t = g.add(position * groups + r, r, fwd if kind == "F" else bwd, (phase, 1, f"stage{k}", m, ""))
            task[(kind, k, m)] = t
            if previous is not None:
                g.depend(previous, t)  # the schedule's order on the group's devices
            previous = t
        for k in range(r, count, groups):  # accumulated weight gradients, synchronised once
            sync = passes[k][2]
            if sync > 0.0 and previous is not None:
                label = (1, 3, f"stage{k}", m_count - 1, "gradients of the iteration")
                t = g.add(len(order) * groups + r, r, sync, label)
                g.depend(previous, t)
                previous = t
    for k in range(count):
        for m in range(m_count):
            g.depend(task[("F", k, m)], task[("B", k, m)])
            if k + 1 < count:
                here, there = k % groups, (k + 1) % groups
                half = plan.transfers[k] / 2.0
                send = g.add(0, g.link(here, there), half, (0, 0, f"stage{k}", m, "activations"))
                g.depend(task[("F", k, m)], send)
                g.depend(send, task[("F", k + 1, m)])
                back = g.add(0, g.link(there, here), half, (1, 0, f"stage{k + 1}", m, "gradients"))
                g.depend(task[("B", k + 1, m)], back)
                g.depend(back, task[("B", k, m)])
    timeline = simulate_tasks(g)
    problems = check_timeline(timeline)
    if problems:
        raise ModelError(f"the pipeline timeline fails its check: {problems[0]}")
    busy = sum(m_count * (f + b) + sync for f, b, sync in passes)
    idle = 1.0 - busy / (groups * timeline.makespan) if timeline.makespan > 0 else 0.0
    return timeline, {
        "iteration_time": timeline.makespan,
        "schedule": schedule,
        "stage_passes": [{"forward": f, "backward": b, "grad_sync": sync} for f, b, sync in passes],
        "bubble": idle,
    }


def describe(graph: Graph, plan: PipelinePlan, machine: Any) -> list[dict[str, Any]]:
    """Each stage in words: its operators (first and last), device group, time per micro-batch,
    memory per device (weights, gradients, optimizer state, and the activations of every micro-batch
    1F1B keeps in flight there: ``min(stages - k, microbatches)`` on stage k; interleaved, what its
    group's order holds: :func:`flight`) and strategy
    (:func:`stratopt.planning.words.describe_layers`)."""

    out = []
    count = len(plan.stages)
    schedule = "interleaved" if plan.chunks > 1 else "1f1b"
    for k, s in enumerate(plan.stages):
        costing = stage_costing(graph, s, machine)
        total, activations = _stage_memory(costing, s.assignment)
        held = flight(schedule, k, count, plan.microbatches, plan.chunks)  # forwards waiting for their backward
        out.append(
            {
                "stage": k,
                "operators": [graph.operators[s.start].name, graph.operators[s.end - 1].name],
                "start": s.start,
                "end": s.end,
                "devices": s.devices,
                "time": s.time,
                "in_flight": held,
                "memory": total + (held - 1) * activations,
                "strategy": describe_layers(
                    costing.graph, costing.configs, s.assignment, costing.sharding, costing.is_recomputed
                ),
            }
        )
    return out
