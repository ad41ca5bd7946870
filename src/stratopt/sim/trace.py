"""Timelines out: task rows, Chrome trace JSON (chrome://tracing, Perfetto) and a Gantt chart."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stratopt.errors import CrossCheckError, ModelError
from stratopt.placement.instance import PlacementInstance
from stratopt.placement.schedule import Schedule
from stratopt.plots import pyplot
from stratopt.problem import evaluate
from stratopt.sim.engine import Timeline, check_timeline, simulate_tasks
from stratopt.sim.taskgraph import StrategyTasks

__all__ = [
    "Event",
    "events",
    "gantt",
    "schedule_events",
    "simulate_strategy",
    "summary",
    "write_chrome_trace",
    "write_timeline",
]

#: Colours of the Gantt chart by task kind.
_COLOURS = {
    "forward": "#4C78A8",
    "backward": "#F58518",
    "transfer": "#54A24B",
    "grad-transfer": "#88D27A",
    "collective": "#B279A2",
    "grad-collective": "#D6A5C9",
    "grad-sync": "#E45756",
    "task": "#9D755D",
}


@dataclass(frozen=True)
class Event:
    """One task as it ran: name, kind, resource (device or link), start and end."""

    name: str
    kind: str
    resource: str
    start: float
    end: float


def schedule_events(instance: PlacementInstance, schedule: Schedule) -> list[Event]:
    """A placement job's schedule as rows (for traces and Gantt charts), by start."""
    return [
        Event(
            instance.nodes[j], "task", instance.devices[schedule.placement[j]].name, schedule.start[j], schedule.end[j]
        )
        for j in sorted(range(len(schedule.start)), key=lambda j: (schedule.start[j], j))
    ]


def events(timeline: Timeline) -> list[Event]:
    """Every task of ``timeline``, by start time (ties: rank)."""
    g = timeline.graph
    order = sorted(g.tasks(), key=lambda t: (timeline.start[t], g.rank[t]))
    return [Event(g.name(t), g.kind(t), g.resource_names[g.res[t]], timeline.start[t], timeline.end[t]) for t in order]


def summary(timeline: Timeline, *, top: int = 0) -> dict[str, Any]:
    """Iteration time, per-device utilisation, link busy time, the critical path and its time per
    task kind (forward, backward, transfer, ...), longest first."""
    g = timeline.graph
    busy = timeline.busy()
    path = timeline.critical_path()
    links = {g.resource_names[r]: busy[r] for r in range(len(g.devices), g.num_resources) if busy[r] > 0}
    by_kind: dict[str, float] = {}
    for t in path:
        by_kind[g.kind(t)] = by_kind.get(g.kind(t), 0.0) + timeline.end[t] - timeline.start[t]
    out: dict[str, Any] = {
        "iteration_time": timeline.makespan,
        "tasks": g.count,
        "utilisation": timeline.utilisation(),
        "busiest_links": dict(sorted(links.items(), key=lambda kv: -kv[1])[: top or len(links)]),
        "critical_path": [
            {
                "name": g.name(t),
                "resource": g.resource_names[g.res[t]],
                "start": timeline.start[t],
                "end": timeline.end[t],
            }
            for t in path
        ],
        "critical_path_by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
    }
    return out


def write_chrome_trace(rows: Sequence[Event], path: str | os.PathLike[str], *, units: str = "us") -> None:
    """Write the Trace Event Format (complete events, one thread per device or link); times are
    written as microseconds, so a profile in other units shows its own numbers as microseconds."""
    threads: dict[str, int] = {}
    trace: list[dict[str, Any]] = []
    for ev in rows:
        tid = threads.setdefault(ev.resource, len(threads))
        trace.append(
            {
                "name": ev.name,
                "cat": ev.kind,
                "ph": "X",
                "ts": ev.start,
                "dur": ev.end - ev.start,
                "pid": 0 if "->" not in ev.resource else 1,
                "tid": tid,
            }
        )
    meta = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "devices"}},
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "links"}},
    ]
    for name, tid in threads.items():
        pid = 0 if "->" not in name else 1
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"traceEvents": meta + trace, "displayTimeUnit": "ms", "otherData": {"units": units}}, fh)
    except OSError as exc:
        raise ModelError(f"cannot write the trace to {os.fspath(path)!r}: {exc.strerror}") from None


def gantt(rows: Sequence[Event], path: str | os.PathLike[str], *, title: str, units: str = "us") -> None:
    """A Gantt chart PNG: one row per device (and per busy link), bars coloured by task kind."""

    resources: list[str] = []
    for ev in rows:
        if ev.resource not in resources:
            resources.append(ev.resource)
    resources.sort(key=lambda r: ("->" in r, _natural(r)))
    row = {r: i for i, r in enumerate(resources)}
    plt = pyplot()
    height = max(2.5, 0.22 * len(resources) + 1.2)
    fig, ax = plt.subplots(figsize=(11, min(height, 40)), layout="constrained")
    by_kind: dict[str, list[tuple[float, float, int]]] = {}
    for ev in rows:
        if ev.end > ev.start:
            by_kind.setdefault(ev.kind, []).append((ev.start, ev.end - ev.start, row[ev.resource]))
    for kind, bars in by_kind.items():
        colour = _COLOURS.get(kind, _COLOURS["task"])
        for i, (x, w, y) in enumerate(bars):
            ax.broken_barh([(x, w)], (y - 0.4, 0.8), facecolors=colour, label=kind if i == 0 else None)
    ax.set_yticks(range(len(resources)))
    ax.set_yticklabels(resources, fontsize=6 if len(resources) > 24 else 8)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({units})")
    ax.set_title(title)
    fig.legend(loc="outside lower center", fontsize="small", ncols=len(by_kind) or 1)
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ModelError(f"cannot write the chart to {os.fspath(path)!r}: {exc.strerror}") from None
    finally:
        plt.close(fig)


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def simulate_strategy(costing: Any, assignment: Sequence[int]) -> tuple[Timeline, dict[str, Any]]:
    """Simulate one training step of a strategy and check the timeline independently.

    Returns the timeline and :func:`summary` (top 5 links) with the strategy's ``additive_cost``
    and the simulation's ``wall_time`` added.

    References
    ----------
    Z. Jia, M. Zaharia, A. Aiken, "Beyond Data and Model Parallelism for Deep Neural Networks"
    (FlexFlow), SysML 2019: Algorithm 1 (seed 003).

    Examples
    --------
    >>> from stratopt.cost import build
    >>> from stratopt.instances import load_instance
    >>> costing = build(load_instance("alexnet"), 4)
    >>> timeline, info = simulate_strategy(costing, [0] * 14)
    >>> abs(info["iteration_time"] - info["additive_cost"]) < 1e-9 * info["additive_cost"]  # nothing split: nothing overlaps
    True
    """
    import time

    started = time.perf_counter()
    timeline = simulate_tasks(StrategyTasks(costing, assignment).graph)
    took = time.perf_counter() - started
    problems = check_timeline(timeline)
    if problems:  # the simulator and the checker disagree: a bug, not bad input
        raise CrossCheckError(f"simulated timeline fails its check: {problems[0]}")
    info = summary(timeline, top=5)
    return timeline, {**info, "additive_cost": evaluate(costing.problem, assignment).objective, "wall_time": took}


def write_timeline(
    rows: Sequence[Event],
    *,
    trace_file: str | None = None,
    gantt_file: str | None = None,
    title: str = "",
    units: str = "us",
) -> list[str]:
    """Write a Chrome trace and/or a Gantt chart of ``rows``; one line per file written, to show."""
    notes = []
    if trace_file is not None:
        write_chrome_trace(rows, trace_file, units=units)
        notes.append(f"wrote {trace_file} ({len(rows)} events; open in Perfetto or chrome://tracing)")
    if gantt_file is not None:
        gantt(rows, gantt_file, title=title, units=units)
        notes.append(f"wrote {gantt_file}")
    return notes
