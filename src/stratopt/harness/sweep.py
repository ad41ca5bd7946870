"""Sweeps: solve a grid of (instance, p, solver) tasks, in local processes or on a Ray cluster.

Each task prices its instance at its device count (networks; problem files are taken as they
are), runs one solver, recomputes the objective, and becomes one JSON record. A task that fails
becomes a record with ``"error"`` set; the sweep goes on. :func:`run_sweep` writes the records as
JSON Lines (``results.jsonl``, one line as each task finishes), then ``results.md`` (one row per
instance and p, one column per solver, each heuristic's gap to the proven optimum) and three
plots: ``time_vs_size.png``, ``gaps.png`` and ``cost_vs_procs.png``.

Executors: ``"process"`` (default; a local process pool, one task per process at a time, so a
task's time is its own), ``"serial"`` (in this process), ``"ray"`` (the ``ray`` extra: each task
is a Ray remote task on the cluster ``ray.init()`` connects to, so a team can fan a sweep out
across machines).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stratopt import plots
from stratopt.cost import build
from stratopt.errors import ModelError, SolverUnavailableError
from stratopt.graph.ir import Graph
from stratopt.harness import REL_TOL
from stratopt.instances import load_instance
from stratopt.placement import to_problem
from stratopt.problem import StrategyProblem
from stratopt.solvers import solve

__all__ = ["Task", "grid", "run_sweep", "run_task", "summarise"]


@dataclass(frozen=True)
class Task:
    """One cell of a sweep. ``procs``, ``profile`` and ``machine`` apply to networks only."""

    instance: str
    procs: int | None
    solver: str
    profile: str = "default"
    machine: str | None = None
    time_limit: float | None = None


def grid(
    instances: Sequence[str],
    procs: Sequence[int],
    solvers: Sequence[str],
    *,
    profile: str = "default",
    machine: str | None = None,
    time_limit: float | None = None,
) -> list[Task]:
    """Every combination, instance-major (a problem file gets one task per solver, not per p)."""

    tasks = []
    for inst in instances:
        is_graph = isinstance(load_instance(inst), Graph)
        for p in procs if is_graph else [None]:
            for s in solvers:
                tasks.append(Task(inst, p, s, profile, machine, time_limit))
    return tasks


def run_task(task: Task) -> dict[str, Any]:
    """Solve one task; never raises (a failure is the record's ``"error"``)."""

    record: dict[str, Any] = asdict(task)
    try:
        start = time.perf_counter()
        loaded = load_instance(task.instance)
        if isinstance(loaded, Graph):
            machine = task.machine or ("pase" if task.profile == "pase" else "h100")
            costing = build(loaded, task.procs or 8, profile=task.profile, machine=machine)
            problem = costing.problem
            record["units"] = costing.units
        elif isinstance(loaded, StrategyProblem):
            problem = loaded
        else:
            problem = to_problem(loaded)
        record.update(
            vertices=problem.num_vertices,
            edges=problem.num_edges,
            choices=int(problem.num_choices.sum()),
            price_seconds=round(time.perf_counter() - start, 4),
        )
        r = solve(problem, task.solver, time_limit=task.time_limit)
        record.update(
            status=r.status.value,
            objective=r.objective,
            bound=r.bound,
            seconds=round(r.wall_time, 4),
            limit=None if r.limit is None else r.limit.value,
            error=r.stats.get("error"),
        )
    except Exception as exc:  # a sweep reports a failed cell and goes on
        record.update(status="error", error=f"{type(exc).__name__}: {exc}")
    return record


def _serial(tasks: Sequence[Task], _workers: int) -> Iterator[dict[str, Any]]:
    for t in tasks:
        yield run_task(t)


def _processes(tasks: Sequence[Task], workers: int) -> Iterator[dict[str, Any]]:
    # Spawned, not forked: the parent may hold solver threads (HiGHS, CP-SAT) that a fork would
    # copy mid-lock.
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(run_task, t) for t in tasks]
        for f in as_completed(futures):
            yield f.result()


def _ray(tasks: Sequence[Task], _workers: int) -> Iterator[dict[str, Any]]:
    try:
        import ray
    except ImportError:
        raise SolverUnavailableError("the ray executor needs Ray: pip install 'stratopt[ray]'") from None
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_task)
    pending = [remote.remote(t) for t in tasks]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])


_EXECUTORS: dict[str, Callable[[Sequence[Task], int], Iterator[dict[str, Any]]]] = {
    "serial": _serial,
    "process": _processes,
    "ray": _ray,
}


def run_sweep(
    tasks: Sequence[Task],
    out_dir: str | os.PathLike[str],
    *,
    executor: str = "process",
    workers: int | None = None,
    progress: bool = True,
    plots: bool = True,
) -> list[dict[str, Any]]:
    """Run the tasks, write ``results.jsonl``, ``results.md`` and the plots under ``out_dir``, and
    return the records in task order."""

    if executor not in _EXECUTORS:
        raise ModelError(f"unknown executor {executor!r}; choose from: {', '.join(_EXECUTORS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    workers = workers or max(1, (os.cpu_count() or 1))
    records: list[dict[str, Any]] = []
    with (out / "results.jsonl").open("w") as jsonl:
        for record in _with_progress(_EXECUTORS[executor](tasks, workers), len(tasks), progress):
            jsonl.write(json.dumps(record) + "\n")
            jsonl.flush()
            records.append(record)
    order = {t: i for i, t in enumerate(tasks)}
    records.sort(key=lambda r: order[Task(**{k: r[k] for k in Task.__dataclass_fields__})])
    (out / "results.md").write_text(summarise(records))
    if plots:
        _plot(records, out)
    return records


def _with_progress(items: Iterable[dict[str, Any]], total: int, show: bool) -> Iterator[dict[str, Any]]:
    if not show:
        yield from items
        return
    if not sys.stderr.isatty():  # a log file gets one plain line per finished task
        for k, record in enumerate(items, 1):
            print(
                f"[{k}/{total}] {record['instance']} p={record['procs']} {record['solver']}: {record['status']}"
                f" ({record.get('seconds', '-')} s)",
                file=sys.stderr,
                flush=True,
            )
            yield record
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, transient=False) as bar:
        job = bar.add_task("", total=total)
        for record in items:
            bar.update(
                job,
                advance=1,
                description=f"{record['instance']} p={record['procs']} {record['solver']}: {record['status']}",
            )
            yield record


def _optima(records: Sequence[dict[str, Any]]) -> dict[tuple[str, int | None], float]:
    """The proven optimum of each (instance, p), from the exact solvers' OPTIMAL records."""
    best: dict[tuple[str, int | None], float] = {}
    for r in records:
        if r.get("status") == "optimal" and r.get("objective") is not None:
            key = (r["instance"], r["procs"])
            best[key] = min(best.get(key, float("inf")), float(r["objective"]))
    return best


def _gap(record: dict[str, Any], optima: dict[tuple[str, int | None], float]) -> float | None:
    opt = optima.get((record["instance"], record["procs"]))
    if opt is None or record.get("objective") is None:
        return None
    return (float(record["objective"]) - opt) / max(abs(opt), 1e-300)


def summarise(records: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: one row per (instance, p); per solver its objective, status and seconds
    (a heuristic's gap to the proven optimum in brackets)."""
    solvers = list(dict.fromkeys(r["solver"] for r in records))
    optima = _optima(records)
    rows: dict[tuple[str, int | None], dict[str, dict[str, Any]]] = {}
    size: dict[tuple[str, int | None], str] = {}
    for r in records:
        key = (r["instance"], r["procs"])
        rows.setdefault(key, {})[r["solver"]] = r
        if "vertices" in r:
            size[key] = f"{r['vertices']} / {r['choices']}"
    head = "| instance | p | vertices / choices | optimum | exact agree | " + " | ".join(solvers) + " |"
    lines = [head, "|---" * (5 + len(solvers)) + "|"]
    for key, cells in rows.items():
        opt = optima.get(key)
        proven = [float(r["objective"]) for r in cells.values() if r.get("status") == "optimal"]
        agree = (
            "-"
            if not proven
            else ("yes" if max(proven) - min(proven) <= REL_TOL * max(1.0, abs(min(proven))) else "NO")
        )
        out = []
        for s in solvers:
            cell = cells.get(s)
            if cell is None:
                out.append("")
                continue
            r = cell
            if r.get("objective") is None:
                out.append(f"{r['status']}" + (f": {r['error']}" if r.get("error") else ""))
            else:
                gap = _gap(r, optima)
                extra = f" [+{gap:.2%}]" if gap is not None and r["status"] != "optimal" else ""
                out.append(f"{float(r['objective']):.6g} ({r['status']}, {r['seconds']:.2f} s){extra}")
        p = "-" if key[1] is None else str(key[1])
        opt_text = "-" if opt is None else f"{opt:.6g}"
        lines.append(f"| {key[0]} | {p} | {size.get(key, '')} | {opt_text} | {agree} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def _plot(records: Sequence[dict[str, Any]], out: Path) -> None:

    ok = [r for r in records if r.get("objective") is not None]
    plots.time_vs_size(ok, out / "time_vs_size.png")
    optima = _optima(records)
    heuristics = [r for r in ok if r["status"] != "optimal" and _gap(r, optima) is not None]
    plots.gaps(
        [(f"{r['instance']} p={r['procs']}", r["solver"], _gap(r, optima) or 0.0) for r in heuristics], out / "gaps.png"
    )
    series: dict[str, list[tuple[int, float]]] = {}
    units = str(next((r["units"] for r in ok if r.get("units")), "cost"))
    for (inst, p), value in sorted(optima.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        if p is not None:
            series.setdefault(inst, []).append((p, value))
    if series:
        plots.cost_vs_procs(series, out / "cost_vs_procs.png", title="optimal strategy cost vs devices", units=units)
