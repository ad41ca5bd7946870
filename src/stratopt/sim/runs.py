"""One simulated step as the ``simulate`` command runs it: a network's strategy (given, or solved on
the additive model) or a placement job's placement, its summary, and its trace and Gantt chart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stratopt.errors import ModelError, NoSolutionError
from stratopt.placement import jct, simulate
from stratopt.placement.instance import read_placement_map
from stratopt.problem import parse_assignment
from stratopt.sim.search import start_strategy
from stratopt.sim.trace import events, schedule_events, simulate_strategy, write_timeline
from stratopt.solvers import solve

__all__ = ["simulate_job", "simulate_network"]


def simulate_network(
    costing: Any,
    *,
    strategy: str | None = None,
    solver: str | None = None,
    trace: str | None = None,
    gantt: str | None = None,
    notes: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Simulate one training step of a priced network's strategy: ``strategy`` (a file, a JSON
    list or ``0,1,2``) or the optimum ``solver`` (default ``auto``) finds on the additive model.
    Returns ``{"strategy": {"source", "assignment"}, ...}`` with :func:`simulate_strategy`'s
    summary; writes ``trace`` and ``gantt`` (a line each to ``notes``). Raises
    :class:`NoSolutionError` when the solver finds no strategy.
    """

    if strategy is not None and solver is not None:
        raise ModelError("give --strategy or --solver, not both")
    if strategy is not None:
        assignment, source = start_strategy(costing, parse_assignment(strategy)), strategy
    else:
        result = solve(costing.problem, solver or "auto")
        if result.assignment is None:
            raise NoSolutionError(f"{solver or 'auto'} found no strategy ({result.status.value})")
        assignment, source = list(result.assignment), f"{result.solver} ({result.status.value})"
    timeline, info = simulate_strategy(costing, assignment)
    title = f"{costing.graph.name} p={costing.policy.procs} ({source})"
    rows = events(timeline) if trace or gantt else []
    for line in write_timeline(rows, trace_file=trace, gantt_file=gantt, title=title, units=costing.units):
        (notes or (lambda _m: None))(line)
    return {"strategy": {"source": source, "assignment": assignment}, **info}


def simulate_job(
    inst: Any,
    placement_map: str,
    *,
    trace: str | None = None,
    gantt: str | None = None,
    notes: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Simulate a placement job under a node -> device map (a file or ``place --json`` output):
    ``{"makespan", "jct", "policy", "tasks"}``, ``policy`` ``order`` when the map gives each
    device's order, else ``dispatch`` (in order of readiness); writes ``trace`` and ``gantt``."""

    placement, order = read_placement_map(inst, placement_map)
    schedule = simulate(inst, placement, order)
    rows = schedule_events(inst, schedule)
    for line in write_timeline(rows, trace_file=trace, gantt_file=gantt, title=inst.name, units="time units"):
        (notes or (lambda _m: None))(line)
    tasks = [{"name": e.name, "device": e.resource, "start": e.start, "end": e.end} for e in rows]
    return {
        "makespan": schedule.makespan,
        "jct": jct(inst, placement),
        "policy": "order" if order else "dispatch",
        "tasks": tasks,
    }
