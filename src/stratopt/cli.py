"""The ``stratopt`` command line: parse, call the library, print.

Exit codes: 0 success; 1 no solution (or an infeasible assignment, or a cross-check mismatch);
2 bad input, reported as one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from stratopt import __version__
from stratopt.errors import ModelError, StratoptError
from stratopt.graph.ir import Graph
from stratopt.instances import BUILTIN, list_models, list_placements, load_instance, load_problem
from stratopt.placement.instance import PlacementInstance
from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers import registry, solve, solve_auto
from stratopt.solvers.base import Result, Status

_OK = 0
_NO_SOLUTION = 1
_BAD_INPUT = 2


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _short(values: list[int], limit: int = 40) -> str:
    if len(values) <= limit:
        return "[" + ", ".join(map(str, values)) + "]"
    head = ", ".join(map(str, values[:limit]))
    return f"[{head}, ...] ({len(values)} entries; --json prints all)"


class _UsageError(Exception):
    """A command-line usage error (argparse's), reported as one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def _positive_number(unit: str) -> Callable[[str], float]:
    """An argparse type: a positive float, with ``unit`` named in its error messages."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number of {unit}, got {text!r}")
        return value

    return parse


_positive_seconds = _positive_number("seconds")
_positive_gb = _positive_number("GB")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


_GRAPH_OPTIONS = ("procs", "profile", "machine", "memory")


def _load(args: argparse.Namespace) -> tuple[StrategyProblem, Any]:
    """The problem to solve and, for an operator graph, its :class:`~stratopt.cost.Costing`."""
    loaded = load_instance(args.instance)
    if isinstance(loaded, PlacementInstance):
        from stratopt.placement import to_problem

        given = [f"--{opt}" for opt in _GRAPH_OPTIONS if getattr(args, opt, None) is not None]
        if given or getattr(args, "explain", False):
            raise ModelError(
                f"{args.instance}: {', '.join(given) or '--explain'} apply to operator graphs, not to a placement"
            )
        _stderr(
            f"{loaded.name}: a placement instance, solved in its additive view (choices = devices; cost = total "
            "compute + transfer time, not the makespan: see 'stratopt place')"
        )
        return to_problem(loaded), None
    if isinstance(loaded, StrategyProblem):
        given = [f"--{opt}" for opt in _GRAPH_OPTIONS if getattr(args, opt, None) is not None]
        if given:
            raise ModelError(f"{args.instance}: {', '.join(given)} apply to operator graphs, not to a problem file")
        if getattr(args, "explain", False):
            raise ModelError(f"{args.instance}: --explain applies to operator graphs, not to a problem file")
        return loaded, None
    from stratopt.cost import build

    assert isinstance(loaded, Graph)
    profile = args.profile or "default"
    machine = args.machine or ("pase" if profile == "pase" else "h100")
    procs = args.procs or 8
    start = time.perf_counter()
    costing = build(loaded, procs, profile=profile, machine=machine, memory_gb=args.memory)
    p = costing.problem
    _stderr(
        f"{loaded.name}: {p.num_vertices} operators, {p.num_edges} edges, p = {procs}, profile {profile} "
        f"on {machine}; {costing.stats['choices_min']}-{costing.stats['choices_max']} configurations per operator "
        f"({costing.stats['choices_total']} in all), priced in {time.perf_counter() - start:.2f} s"
    )
    return p, costing


def _solve_cmd(args: argparse.Namespace) -> int:
    problem, costing = _load(args)
    if args.solver != "auto" and args.solver not in registry.names():
        raise ModelError(f"unknown solver {args.solver!r}; choose from: auto, {', '.join(registry.names())}")
    # Progress (and why 'auto' moved past the DP) goes to stderr as it happens.
    if args.solver == "auto":
        result = solve_auto(problem, time_limit=args.time_limit, seed=args.seed, progress=_stderr)
        _stderr(f"solver: {result.solver} (picked by 'auto')")
    elif args.solver == "greedy":
        result = solve(problem, "greedy", time_limit=args.time_limit, seed=args.seed, progress=_stderr)
    else:
        result = solve(problem, args.solver, time_limit=args.time_limit, seed=args.seed)
    explain = None
    if costing is not None and args.explain and result.assignment is not None:
        explain = costing.explain(result.assignment)
    if args.json:
        out = result.to_dict(args.instance)
        if costing is not None:
            out["graph"] = {
                "procs": costing.policy.procs,
                "profile": costing.profile.name,
                "machine": costing.profile.machine.name,
                "units": costing.units,
                "memory_gb": costing.memory_limit,
                "names": list(problem.names or ()),
                "configs": [problem.labels[v][c] for v, c in enumerate(result.assignment)]
                if result.assignment is not None and problem.labels is not None
                else None,
            }
        if explain is not None:
            out["explain"] = explain
        _emit_json(out)
    else:
        _print_result(problem, result, args.instance)
        if explain is not None and costing is not None:
            _print_explain(explain, costing.units)
    return _OK if result.status in (Status.OPTIMAL, Status.FEASIBLE) else _NO_SOLUTION


def _compare_cmd(args: argparse.Namespace) -> int:
    from stratopt.harness import compare, default_solvers

    problem, _ = _load(args)
    names = (
        default_solvers(problem) if args.solvers is None else [n.strip() for n in args.solvers.split(",") if n.strip()]
    )
    unknown = [n for n in names if n not in registry.names()]
    if unknown or not names:
        raise ModelError(
            f"unknown solver {unknown[0] if unknown else args.solvers!r}; choose from: {', '.join(registry.names())}"
        )
    missing = [n for n in names if not registry.available(n)]
    if missing:
        registry.get(missing[0])  # raises SolverUnavailableError naming the extra
    comparison = compare(problem, names, time_limit=args.time_limit, progress=_stderr, raise_on_mismatch=False)
    if args.json:
        _emit_json(comparison.to_dict(args.instance))
    else:
        _print_comparison(comparison)
    return _OK if comparison.agree else _NO_SOLUTION


def _print_comparison(comparison: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="solvers side by side (every objective recomputed by evaluate)")
    for col in ("solver", "status", "objective", "bound", "seconds"):
        table.add_column(col, justify="left" if col in ("solver", "status") else "right")
    for r in comparison.results:
        table.add_row(
            r.solver,
            r.status.value + (f" ({r.limit.value})" if r.limit else ""),
            "-" if r.objective is None else f"{r.objective:.10g}",
            "-" if r.bound is None else f"{r.bound:.10g}",
            f"{r.wall_time:.2f}",
        )
    console = Console(soft_wrap=True)
    console.print(table)
    if not comparison.agree:
        console.print(f"[bold red]MISMATCH[/]: {comparison.mismatch}")
    elif comparison.infeasible:
        console.print("agree: infeasible (proven)")
    elif comparison.optimum is not None:
        console.print(f"agree: yes; proven optimum {comparison.optimum:.10g}")
    else:
        console.print("agree: yes; no solver proved an optimum in its time")


def _demo_cmd(args: argparse.Namespace) -> int:
    from rich.console import Console

    from stratopt.cost import build
    from stratopt.harness import compare

    graph = load_instance(args.network)
    if not isinstance(graph, Graph):
        raise ModelError(f"{args.network}: the demo needs a network (see 'stratopt models'), not a problem file")
    console = Console(soft_wrap=True)
    console.print(
        f"[bold]stratopt demo[/]: {graph.name}, {len(graph.operators)} operators, split over p = {args.procs} "
        "devices of a DGX H100 (profile 'default': microseconds per training step)"
    )
    start = time.perf_counter()
    costing = build(graph, args.procs, profile="default", machine="h100")
    stats = costing.stats
    console.print(
        f"priced {stats['choices_total']} configurations ({stats['choices_min']}-{stats['choices_max']} per operator) "
        f"in {time.perf_counter() - start:.2f} s; solving with the DP, CP-SAT and greedy ..."
    )
    comparison = compare(costing.problem, ["dp", "cpsat", "greedy"], raise_on_mismatch=False)
    _print_comparison(comparison)
    best = next((r for r in comparison.results if r.solver == "dp"), None)
    if best is not None and best.assignment is not None:
        _print_explain(costing.explain(best.assignment), costing.units)
    if not args.no_plot:
        from stratopt import plots

        points = []
        for p in (1, 2, 4, 8, 16, 32, 64):
            r = solve(build(graph, p, profile="default", machine="h100").problem, "dp")
            if r.objective is not None:
                points.append((p, float(r.objective)))
        plots.cost_vs_procs(
            {graph.name: points}, args.plot, title=f"{graph.name}: optimal strategy cost vs devices (H100)", units="us"
        )
        console.print(
            "optimal cost per step: "
            + ", ".join(f"p={p}: {c:.4g} us" for p, c in points)
            + f"\nwrote {args.plot} (cost against p, log-log, with the linear-scaling line)"
        )
    console.print(f"done in {time.perf_counter() - start:.1f} s")
    return _OK if comparison.agree else _NO_SOLUTION


def _print_result(problem: StrategyProblem, result: Result, instance: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_row("instance", f"{instance} ({problem.num_vertices} vertices, {problem.num_edges} edges)")
    table.add_row("solver", result.solver)
    table.add_row("status", result.status.value + (f" (stopped by: {result.limit.value})" if result.limit else ""))
    table.add_row("objective", "-" if result.objective is None else f"{result.objective}")
    table.add_row("bound", "-" if result.bound is None else f"{result.bound}")
    if result.gap is not None:
        table.add_row("gap", f"{result.gap:.3%}")
    table.add_row("time", f"{result.wall_time:.3f} s")
    if result.assignment is not None:
        table.add_row("assignment", _short(list(result.assignment)))
    if "error" in result.stats:
        table.add_row("error", str(result.stats["error"]))
    Console(soft_wrap=True).print(table)


def _print_explain(rows: list[dict[str, Any]], units: str) -> None:
    from rich.console import Console
    from rich.table import Table

    def num(x: float) -> str:
        return "0" if x == 0 else f"{x:.4g}"

    table = Table(title=f"per-operator costs ({units}; edge costs charged to the consumer; memory per device)")
    for col in ("operator", "op", "config", "compute", "comm", "edges in", "total", "memory MiB"):
        table.add_column(col, justify="left" if col in ("operator", "op", "config") else "right")
    totals = [0.0, 0.0, 0.0, 0.0, 0.0]
    for r in rows:
        table.add_row(
            r["operator"],
            r["op"],
            r["config"],
            num(r["compute"]),
            num(r["comm"]),
            num(r["edges_in"]),
            num(r["total"]),
            f"{r['memory_bytes'] / 2**20:.1f}",
        )
        for i, key in enumerate(("compute", "comm", "edges_in", "total", "memory_bytes")):
            totals[i] += r[key]
    table.add_section()
    table.add_row("all", "", "", *(num(t) for t in totals[:4]), f"{totals[4] / 2**20:.1f}")
    # Piped output gets a width that fits the table instead of rich's 80-column default.
    Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160).print(table)


def _models_cmd(args: argparse.Namespace) -> int:
    models = list_models()
    if args.json:
        _emit_json(
            {
                "networks": [{"name": n, **h} for n, h in models],
                "placements": [{"name": n, **h} for n, h in list_placements()],
                "problems": [{"name": n, "description": d} for n, (_, d) in sorted(BUILTIN.items())],
            }
        )
        return _OK
    from rich.console import Console
    from rich.table import Table

    table = Table(title="networks (operator graphs; solve with --procs P --profile pase|default)")
    for col in ("name", "vertices", "edges", "source"):
        table.add_column(col, justify="right" if col in ("vertices", "edges") else "left")
    for name, head in models:
        table.add_row(name, str(head["operators"]), str(head["edges"]), str(head["source"]))
    console = Console(soft_wrap=True)
    console.print(table)
    placements = Table(title="placement jobs (stratopt place NAME --algo A)")
    for col in ("name", "nodes", "edges", "devices"):
        placements.add_column(col, justify="right" if col in ("nodes", "edges") else "left")
    for name, head in list_placements():
        placements.add_row(name, str(head["nodes"]), str(head["edges"]), str(head["devices"]))
    console.print(placements)
    problems = Table(title="built-in problems")
    problems.add_column("name")
    problems.add_column("description")
    for name, (_, desc) in sorted(BUILTIN.items()):
        problems.add_row(name, desc)
    console.print(problems)
    return _OK


def _load_placement(instance: str) -> PlacementInstance:
    loaded = load_instance(instance)
    if not isinstance(loaded, PlacementInstance):
        raise ModelError(
            f'{instance}: not a placement instance (expected a file with "format": "stratopt-placement" '
            "or a placement job from 'stratopt models')"
        )
    return loaded


def _place_cmd(args: argparse.Namespace) -> int:
    from stratopt.placement import ALGORITHMS, place

    inst = _load_placement(args.instance)
    if args.algo not in ALGORITHMS:
        raise ModelError(f"unknown placement algorithm {args.algo!r}; choose from: {', '.join(ALGORITHMS)}")
    _stderr(
        f"{inst.name}: {inst.num_nodes} nodes, {len(inst.edges)} edges, {inst.num_devices} devices; placing with {args.algo}"
    )
    result = place(inst, args.algo, time_limit=args.time_limit, seed=args.seed)
    if args.json:
        _emit_json(result.to_dict())
        return _OK
    from rich.console import Console
    from rich.table import Table

    use: dict[str, list[str]] = {}
    for j, i in enumerate(result.placement):
        use.setdefault(inst.devices[i].name, []).append(inst.nodes[j])
    table = Table(title=f"{inst.name}: {args.algo}")
    table.add_column("device")
    table.add_column("nodes", justify="right")
    table.add_column("busy", justify="right")
    table.add_column("first nodes")
    for i, d in enumerate(inst.devices):
        nodes = use.get(d.name, [])
        if nodes:
            busy = sum(float(inst.cost[inst.nodes.index(v), i]) for v in nodes)
            table.add_row(
                d.name, str(len(nodes)), f"{busy:g}", ", ".join(nodes[:6]) + (" ..." if len(nodes) > 6 else "")
            )
    Console(soft_wrap=True).print(table)
    bound = "" if result.bound is None else f", proven bound {result.bound:g}"
    print(
        f"makespan {result.makespan:g} ({result.status}{bound}); seed 004's JCT {result.jct:g}; placed in {result.wall_time:.3f} s"
    )
    if not result.fits_memory:
        print("note: this placement exceeds some device's memory (only etf and cpsat honour memory)")
    return _OK


def _read_placement_file(inst: PlacementInstance, text: str) -> tuple[list[int], list[list[int]] | None]:
    """A node -> device map, from a JSON file or string; a 'place --json' object works too (its
    device order is then used)."""
    try:
        # Inline JSON first: a long object is no file name (and would fail as one).
        raw = text if text.lstrip().startswith("{") else Path(text).read_text(encoding="utf-8")
        data = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"{text}: not a readable JSON file or object ({exc})") from None
    order_in = None
    if isinstance(data, dict) and isinstance(data.get("placement"), dict):
        order_in = data.get("order")
        data = data["placement"]
    if not isinstance(data, dict):
        raise ModelError(f"{text}: expected a JSON object mapping node name to device name")
    index = {v: j for j, v in enumerate(inst.nodes)}
    for v in data:
        if v not in index:
            raise ModelError(f"{text}: node {v!r} is not in {inst.name}")
    missing = [v for v in inst.nodes if v not in data]
    if missing:
        raise ModelError(
            f"{text}: no device for node {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
        )
    placement = []
    for v in inst.nodes:
        if not isinstance(data[v], str):
            raise ModelError(f"{text}: node {v!r}: device {data[v]!r} is not a device name")
        placement.append(inst.device_index(data[v]))
    order: list[list[int]] | None = None
    if isinstance(order_in, dict):
        order = [[] for _ in inst.devices]
        for dev, nodes in order_in.items():
            if not isinstance(nodes, list) or not all(isinstance(v, str) and v in index for v in nodes):
                raise ModelError(f"{text}: order of {dev!r} must list node names of {inst.name}")
            order[inst.device_index(dev)] = [index[v] for v in nodes]
    return placement, order


def _simulate_cmd(args: argparse.Namespace) -> int:
    loaded = load_instance(args.instance)
    if isinstance(loaded, PlacementInstance):
        return _simulate_placement(args, loaded)
    if args.placement is not None:
        raise ModelError(f"{args.instance}: --placement applies to placement jobs; give --strategy or --solver")
    costing = _costing(args, loaded, "simulate")
    from stratopt.sim import StrategyTasks, check_timeline, simulate_tasks, summary

    if args.strategy is not None and args.solver is not None:
        raise ModelError("give --strategy or --solver, not both")
    if args.strategy is not None:
        from stratopt.sim import start_strategy

        assignment = start_strategy(costing, _parse_assignment(args.strategy))
        source = args.strategy
    else:
        solver = args.solver or "auto"
        result = solve_auto(costing.problem) if solver == "auto" else solve(costing.problem, solver)
        if result.assignment is None:
            _stderr(f"{args.instance}: {solver} found no strategy ({result.status.value})")
            return _NO_SOLUTION
        assignment = [int(x) for x in result.assignment]
        source = f"{result.solver} ({result.status.value})"
    started = time.perf_counter()
    tasks = StrategyTasks(costing, assignment)
    timeline = simulate_tasks(tasks.graph)
    took = time.perf_counter() - started
    problems = check_timeline(timeline)
    if problems:  # the simulator and the checker disagree: a bug, not bad input
        raise AssertionError(f"simulated timeline fails its check: {problems[0]}")
    info = summary(timeline, top=5)
    units = costing.units
    _write_timeline(args, timeline, f"{loaded.name} p={costing.policy.procs} ({source})", units)
    additive = evaluate(costing.problem, assignment).objective
    if args.json:
        _emit_json(
            {
                "instance": args.instance,
                "procs": costing.policy.procs,
                "profile": costing.profile.name,
                "units": units,
                "strategy": {"source": source, "assignment": assignment},
                "additive_cost": additive,
                **info,
                "wall_time": took,
            }
        )
        return _OK
    print(
        f"{loaded.name} on {costing.policy.procs} devices, strategy from {source}: iteration time "
        f"{timeline.makespan:,.1f} {units} simulated (additive model: {additive:,.1f}); "
        f"{tasks.graph.count} tasks simulated in {took:.2f} s"
    )
    util = info["utilisation"]
    print("device utilisation: " + ", ".join(f"{d} {u:.0%}" for d, u in util.items()))
    path = info["critical_path"]
    kinds: dict[str, float] = {}
    for step in path:
        kind = step["name"].split(" ")[0]
        kinds[kind] = kinds.get(kind, 0.0) + step["end"] - step["start"]
    print(
        f"critical path: {len(path)} tasks; "
        + ", ".join(f"{k} {v:,.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    )
    if info["busiest_links"]:
        print("busiest links: " + ", ".join(f"{k} {v:,.1f}" for k, v in info["busiest_links"].items()))
    return _OK


def _costing(args: argparse.Namespace, loaded: Any, command: str) -> Any:
    """Price an operator graph for the simulator (default profile on h100 unless told)."""
    if not isinstance(loaded, Graph):
        raise ModelError(f"{args.instance}: {command} needs an operator graph (a network), not a bare problem file")
    from stratopt.cost import build

    profile = args.profile or "default"
    machine = args.machine or ("pase" if profile == "pase" else "h100")
    return build(loaded, args.procs or 8, profile=profile, machine=machine)


def _write_timeline(args: argparse.Namespace, timeline: Any, title: str, units: str) -> None:
    from stratopt.sim import events, gantt, write_chrome_trace

    if args.trace is None and args.gantt is None:
        return
    rows = events(timeline)
    if args.trace is not None:
        write_chrome_trace(rows, args.trace, units=units)
        _stderr(f"wrote {args.trace} ({len(rows)} events; open in Perfetto or chrome://tracing)")
    if args.gantt is not None:
        gantt(rows, args.gantt, title=title, units=units)
        _stderr(f"wrote {args.gantt}")


def _simulate_placement(args: argparse.Namespace, inst: PlacementInstance) -> int:
    from stratopt.placement import check_schedule, jct, simulate

    if args.placement is None:
        raise ModelError(f"{args.instance}: a placement job needs --placement FILE (a node -> device map)")
    given = [f"--{o}" for o in ("strategy", "solver", "procs", "profile", "machine") if getattr(args, o) is not None]
    if given:
        raise ModelError(f"{args.instance}: {', '.join(given)} apply to networks, not to a placement job")
    placement, order = _read_placement_file(inst, args.placement)
    schedule = simulate(inst, placement, order)
    problems = check_schedule(inst, schedule)
    if problems:  # the simulator and the checker disagree: a bug, not bad input
        raise AssertionError(f"simulated schedule fails its check: {problems[0]}")
    if args.trace is not None or args.gantt is not None:
        from stratopt.sim import Event, gantt, write_chrome_trace

        rows = [
            Event(inst.nodes[j], "task", inst.devices[schedule.placement[j]].name, schedule.start[j], schedule.end[j])
            for j in sorted(range(inst.num_nodes), key=lambda j: (schedule.start[j], j))
        ]
        if args.trace is not None:
            write_chrome_trace(rows, args.trace, units="time units")
            _stderr(f"wrote {args.trace} ({len(rows)} events)")
        if args.gantt is not None:
            gantt(rows, args.gantt, title=inst.name, units="time units")
            _stderr(f"wrote {args.gantt}")
    tasks = [
        {
            "name": inst.nodes[j],
            "device": inst.devices[schedule.placement[j]].name,
            "start": schedule.start[j],
            "end": schedule.end[j],
        }
        for j in sorted(range(inst.num_nodes), key=lambda j: (schedule.start[j], j))
    ]
    if args.json:
        _emit_json(
            {
                "makespan": schedule.makespan,
                "jct": jct(inst, placement),
                "policy": "order" if order else "dispatch",
                "tasks": tasks,
            }
        )
        return _OK
    how = "the given device order" if order else "dispatch in order of readiness"
    print(f"{inst.name}: makespan {schedule.makespan:g} ({how}); seed 004's JCT {jct(inst, placement):g}")
    for task in tasks[: args.show]:
        print(f"  {task['start']:>12g} {task['end']:>12g}  {task['device']:>8s}  {task['name']}")
    if len(tasks) > args.show:
        print(f"  ... {len(tasks) - args.show} more (--json prints all)")
    return _OK


def _search_cmd(args: argparse.Namespace) -> int:
    from stratopt.sim import mcmc, start_strategy

    loaded = load_instance(args.instance)
    costing = _costing(args, loaded, "search")
    if args.budget is None and args.time_limit is None:
        args.budget = 1000
    how: Any = args.start
    if how not in ("dp", "data-parallel"):
        how = start_strategy(costing, _parse_assignment(how))
    quiet = args.json

    def progress(i: int, current: float, best: float) -> None:
        if not quiet:
            _stderr(f"search: {i} proposals, current {current:,.1f}, best {best:,.1f} {costing.units}")

    r = mcmc(
        costing, how, budget=args.budget, time_limit=args.time_limit, beta=args.beta, seed=args.seed, progress=progress
    )
    start_cost = evaluate(costing.problem, r.start).objective
    best_cost = evaluate(costing.problem, r.best).objective
    if args.json:
        _emit_json(
            {
                "instance": args.instance,
                "procs": costing.policy.procs,
                "profile": costing.profile.name,
                "units": costing.units,
                "method": "mcmc",
                "seed": r.seed,
                "beta": r.beta,
                "start": {"strategy": args.start, "iteration_time": r.start_time, "additive_cost": start_cost,
                          "assignment": list(r.start)},
                "best": {"iteration_time": r.best_time, "additive_cost": best_cost, "assignment": list(r.best)},
                "iterations": r.iterations,
                "accepted": r.accepted,
                "improvements": r.improvements,
                "wall_time": r.wall_time,
            }
        )  # fmt: skip
        return _OK
    gain = 1.0 - r.best_time / r.start_time if r.start_time else 0.0
    print(
        f"{loaded.name} on {costing.policy.procs} devices: MCMC from {args.start} ({r.iterations} proposals, "
        f"{r.accepted} accepted, {r.wall_time:.1f} s, seed {r.seed})"
    )
    print(f"  start  {r.start_time:>14,.1f} {costing.units} simulated   {start_cost:>14,.1f} additive")
    print(
        f"  best   {r.best_time:>14,.1f} {costing.units} simulated   {best_cost:>14,.1f} additive   ({gain:.1%} faster)"
    )
    return _OK


def _import_cmd(args: argparse.Namespace) -> int:
    from stratopt.graph.io import save_graph
    from stratopt.importers import flops

    loaded = load_instance(args.model)
    if not isinstance(loaded, Graph):
        raise ModelError(f"{args.model}: not a model (expected an ONNX file or an operator graph)")
    kinds: dict[str, int] = {}
    for op in loaded.operators:
        kinds[op.op] = kinds.get(op.op, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    print(
        f"{loaded.name}: {len(loaded)} operators ({summary}), {len(loaded.edges())} edges, "
        f"{flops(loaded) / 1e9:,.3f} GFLOP forward in products"
    )
    if args.output is not None:
        try:
            save_graph(loaded, args.output)
        except OSError as exc:
            raise ModelError(f"cannot write {args.output}: {exc.strerror}") from None
        print(f"wrote {args.output} (stratopt-graph JSON: 'stratopt solve {args.output} --procs 8')")
    return _OK


def _parse_assignment(text: str) -> list[int]:
    """A JSON list, a comma-separated list, or a file holding either (or a `solve --json` object)."""
    source = text
    path = Path(text)
    if not text.lstrip().startswith("[") and "," not in text and path.exists():
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"assignment file {source}: cannot read ({exc})") from None
    stripped = text.strip()
    if not stripped:
        raise ModelError(f"assignment {source!r} is empty")
    if stripped[0] in "[{":
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ModelError(
                f"assignment {source}: invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
            ) from None
        if isinstance(data, dict):
            data = data.get("assignment")
        if not isinstance(data, list):
            raise ModelError(f"assignment {source}: expected a list of choice indices")
        return data
    try:
        return [int(x) for x in stripped.replace(" ", "").strip(",").split(",")]
    except ValueError:
        if not path.exists() and "," not in stripped and "[" not in stripped:
            raise ModelError(f"assignment {source!r}: no such file, and not a list of choice indices") from None
        raise ModelError(f"assignment {source!r}: expected comma-separated integers") from None


def _evaluate_cmd(args: argparse.Namespace) -> int:
    problem, _ = _load(args)
    ev = evaluate(problem, _parse_assignment(args.assignment))
    if args.json:
        _emit_json(
            {
                "instance": args.instance,
                "objective": ev.objective,
                "feasible": ev.feasible,
                "violation": ev.violation,
                "peak_usage": ev.peak_usage,
                "usage_limit": problem.usage_limit,
            }
        )
    else:
        print(f"objective: {ev.objective}")
        if ev.peak_usage is not None:
            limit = "no limit" if problem.usage_limit is None else f"limit {problem.usage_limit}"
            print(f"peak usage: {ev.peak_usage} ({limit})")
        print("feasible: yes" if ev.feasible else f"feasible: no: {ev.violation}")
    return _OK if ev.feasible else _NO_SOLUTION


def _iopddl_cmd(args: argparse.Namespace) -> int:
    timeout = args.timeout
    start = time.perf_counter()
    problem = load_problem(args.file)
    loaded = time.perf_counter() - start
    # Leave room to print the answer: 5% of the budget and at least half a second.
    budget = timeout - loaded - max(0.5, 0.05 * timeout)
    _stderr(
        f"read {problem.num_vertices} vertices, {problem.num_edges} edges in {loaded:.1f} s; solving for up to {budget:.1f} s"
    )
    if budget <= 0:
        _stderr("no time left after reading the file")
        print("[]", flush=True)
        return _NO_SOLUTION
    result = solve_auto(problem, time_limit=budget, progress=_stderr)
    _stderr(
        f"{result.solver}: {result.status.value}, cost {result.objective}, bound {result.bound}, "
        f"{time.perf_counter() - start:.1f} s in all"
    )
    global _PROMPT_EXIT
    _PROMPT_EXIT = True
    if result.status in (Status.OPTIMAL, Status.FEASIBLE) and result.assignment is not None:
        print("[" + ", ".join(map(str, result.assignment)) + "]", flush=True)
        return _OK
    print("[]", flush=True)
    return _NO_SOLUTION


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stratopt`` (its sub-commands carry their own help)."""
    parser = _Parser(
        prog="stratopt",
        description="Find optimal parallelization strategies and device placements, and prove how good they are.",
        epilog="Exit codes: 0 success; 1 no solution or an infeasible assignment; 2 bad input (one line on stderr).",
    )
    parser.add_argument("--version", action="version", version=f"stratopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    instance_help = (
        f"a built-in problem ({', '.join(sorted(BUILTIN))}), a network from 'stratopt models', "
        "or a file (IOPDDL problem or stratopt-graph JSON, .gz allowed)"
    )

    def graph_options(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("operator graphs (networks and stratopt-graph files)")
        g.add_argument("--procs", "-p", type=_positive_int, metavar="P", help="devices to split over (default 8)")
        g.add_argument(
            "--profile",
            choices=("pase", "default"),
            help="cost profile: 'default' (microseconds on a real machine; the default) or 'pase' (PaSE's units)",
        )
        g.add_argument(
            "--machine",
            metavar="NAME",
            help="machine preset: pase, a100, h100 (default: pase for --profile pase, else h100)",
        )
        g.add_argument(
            "--memory",
            type=_positive_gb,
            metavar="GB",
            help="per-device memory limit in GB (adds the usage constraint)",
        )

    def pricing_options(p: argparse.ArgumentParser) -> None:
        """How simulate and search price a network (no memory limit: the simulator has none)."""
        p.add_argument("--procs", "-p", type=_positive_int, metavar="P", help="devices (default 8)")
        p.add_argument("--profile", choices=("pase", "default"), help="cost profile (default: default)")
        p.add_argument(
            "--machine", metavar="NAME", help="machine preset: pase, a100, h100 (default h100; pase for --profile pase)"
        )

    p = sub.add_parser(
        "models",
        help="list the networks and placement jobs in models/ and the built-in problems",
        description="List the networks (operator graphs in models/) with their vertex and edge counts, "
        "the placement jobs, and the built-in problems.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_models_cmd)

    p = sub.add_parser(
        "solve",
        help="solve a problem: assignment, cost and proven bound",
        description="Solve a problem and print the assignment, its cost and the proven bound.",
    )
    p.add_argument("instance", metavar="INSTANCE", help=instance_help)
    p.add_argument(
        "--solver",
        "-s",
        default="auto",
        metavar="S",
        help=f"solver: auto (default: dp when it fits, else brute, mip-highs or greedy by size) or one of {', '.join(registry.names())}",
    )
    p.add_argument("--time-limit", "-t", type=_positive_seconds, metavar="SEC", help="seconds the solver may use")
    p.add_argument("--seed", type=int, help="seed for randomised solvers")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    p.add_argument(
        "--explain", action="store_true", help="per operator: configuration, compute, communication and memory"
    )
    graph_options(p)
    p.set_defaults(func=_solve_cmd)

    p = sub.add_parser(
        "evaluate",
        help="price and check an assignment as the IOPDDL contest does",
        description="Price an assignment exactly as the IOPDDL contest does and check it; "
        "exit code 1 when it is infeasible.",
    )
    p.add_argument("instance", metavar="INSTANCE", help=instance_help)
    p.add_argument(
        "--assignment",
        "-a",
        required=True,
        metavar="FILE_OR_LIST",
        help="choice index per vertex: '[0,1,2]', '0,1,2', or a file with a JSON list or a 'solve --json' object",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    graph_options(p)
    p.set_defaults(func=_evaluate_cmd)

    p = sub.add_parser(
        "compare",
        help="run several solvers and cross-check their answers",
        description="Run several solvers on one problem, recompute every answer's cost, and check that the "
        "exact solvers agree, that no bound exceeds a feasible cost and that no answer beats a proven optimum. "
        "Exit code 1 on a mismatch.",
    )
    p.add_argument("instance", metavar="INSTANCE", help=instance_help)
    p.add_argument(
        "--solvers",
        metavar="A,B,..",
        help="comma-separated solver names (default: every installed exact solver and greedy; brute on small problems)",
    )
    p.add_argument("--time-limit", "-t", type=_positive_seconds, metavar="SEC", help="seconds each solver may use")
    p.add_argument("--json", action="store_true", help='print one JSON object {"agree", "optimum", "results"}')
    graph_options(p)
    p.set_defaults(func=_compare_cmd)

    p = sub.add_parser(
        "demo",
        help="a one-minute tour: a network solved three ways, its strategy, a plot",
        description="Build a network from models/, solve it with the DP, CP-SAT and greedy, show that they agree, "
        "print the optimal strategy operator by operator, and plot the optimal cost against the device count.",
    )
    p.add_argument("--network", default="vgg19", help="a network from 'stratopt models' (default vgg19)")
    p.add_argument("--procs", "-p", type=_positive_int, default=8, metavar="P", help="devices (default 8)")
    p.add_argument("--plot", default="stratopt-demo.png", metavar="FILE", help="where to write the plot (PNG)")
    p.add_argument("--no-plot", action="store_true", help="skip the plot")
    p.set_defaults(func=_demo_cmd)

    from stratopt.placement import ALGORITHMS

    p = sub.add_parser(
        "place",
        help="place a job graph on heterogeneous devices (seed 004 and its anchors)",
        description="Place every node of a job graph on one device: makespan (simulated), seed 004's JCT, "
        "and for cpsat the proven bound. Algorithms: " + "; ".join(f"{k}: {v}" for k, v in ALGORITHMS.items()),
    )
    p.add_argument(
        "instance", metavar="INSTANCE", help="a placement job from 'stratopt models' or a stratopt-placement JSON file"
    )
    p.add_argument(
        "--algo", "-a", default="heuristic", metavar="NAME", help=f"one of {', '.join(ALGORITHMS)} (default heuristic)"
    )
    p.add_argument(
        "--time-limit", "-t", type=_positive_seconds, default=30.0, metavar="SEC", help="seconds for cpsat (default 30)"
    )
    p.add_argument("--seed", type=int, help="seed for CP-SAT's search")
    p.add_argument(
        "--json", action="store_true", help='print one JSON object {"algorithm", "placement", "makespan", "jct", ...}'
    )
    p.set_defaults(func=_place_cmd)

    p = sub.add_parser(
        "simulate",
        help="simulate a strategy's training step (or a placement): iteration time, utilisation, trace",
        description="Build the task graph of a network's strategy (compute per partition, transfers on links, "
        "collectives, gradient sync) and simulate one training step as FlexFlow does: iteration time, device "
        "utilisation, critical path; optionally a Chrome trace and a Gantt chart. The strategy is the exact "
        "optimum of the additive model unless --strategy or --solver says otherwise. For a placement job, "
        "--placement gives the node -> device map.",
    )
    p.add_argument(
        "instance",
        metavar="INSTANCE",
        help="a network from 'stratopt models' or a stratopt-graph file; or a placement job / file",
    )
    p.add_argument(
        "--strategy",
        metavar="FILE",
        help="configuration index per operator: a 'solve --json' or 'search --json' output, a JSON list or '0,1,2'",
    )
    p.add_argument(
        "--solver", "-s", metavar="S", help="solve the additive model with S for the strategy (default auto)"
    )
    pricing_options(p)
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace (Perfetto, chrome://tracing)")
    p.add_argument("--gantt", metavar="FILE.png", help="write a Gantt chart")
    p.add_argument(
        "--placement",
        metavar="FILE",
        help="placement jobs: JSON mapping node name to device name, or a 'place --json' output",
    )
    p.add_argument(
        "--show", type=_positive_int, default=20, metavar="N", help="placement jobs: tasks to print (default 20)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object (networks: {"iteration_time", "additive_cost", "utilisation", "critical_path", '
        '...}; placements: {"makespan", "jct", "policy", "tasks"})',
    )
    p.set_defaults(func=_simulate_cmd)

    from stratopt.sim.search import BETA

    p = sub.add_parser(
        "search",
        help="search strategies with MCMC on the simulated iteration time (FlexFlow)",
        description="Markov chain Monte Carlo over strategies: each proposal gives one operator another "
        "configuration, priced by the delta simulation and accepted with probability "
        "min(1, exp(-beta * relative slowdown)). Reports the start's and the best strategy's simulated time.",
    )
    p.add_argument("instance", metavar="INSTANCE", help="a network from 'stratopt models' or a stratopt-graph file")
    p.add_argument("--mcmc", action="store_true", help="the search method (MCMC, the only one; may be left out)")
    p.add_argument("--budget", type=_positive_int, metavar="ITERATIONS", help="proposals (default 1000)")
    p.add_argument("--time-limit", "-t", type=_positive_seconds, metavar="SEC", help="seconds (stops first)")
    p.add_argument(
        "--start",
        default="dp",
        metavar="FROM",
        help="dp (the additive model's optimum; default), data-parallel, or a strategy file/list",
    )
    p.add_argument(
        "--beta",
        type=_positive_number("inverse temperature"),
        default=BETA,
        metavar="B",
        help=f"inverse temperature (default {BETA:g})",
    )
    p.add_argument("--seed", type=int, help="seed of the proposals (same seed, same search)")
    pricing_options(p)
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"start": {"iteration_time", ...}, "best": {"iteration_time", "assignment", ...}, ...}',
    )
    p.set_defaults(func=_search_cmd)

    p = sub.add_parser(
        "import",
        help="import a model (ONNX file) as an operator graph",
        description="Read an ONNX model (shapes from ONNX shape inference), map its nodes to stratopt operators "
        "(products, convolutions, norms, softmax, pooling, pointwise, layout), fold view-only nodes and fuse "
        "pointwise ones, and optionally write the graph as stratopt-graph JSON. Unmapped operators are priced "
        "as elementwise work, with a warning naming them. Any command taking a network also takes an ONNX file.",
    )
    p.add_argument("model", metavar="MODEL", help="an ONNX model file (.onnx), or any operator graph")
    p.add_argument("--output", "-o", metavar="FILE.json", help="write the operator graph here")
    p.set_defaults(func=_import_cmd)

    p = sub.add_parser(
        "iopddl",
        help="the contest interface: last stdout line is the answer",
        description='The IOPDDL contest interface: progress on stderr, the answer "[i, j, ...]" as the '
        'last stdout line; "[]" (exit 1) only when no feasible assignment was found in time.',
    )
    p.add_argument("file", metavar="FILE", help="an IOPDDL problem file (JSON, .gz allowed)")
    p.add_argument(
        "timeout", metavar="TIMEOUT", type=_positive_seconds, help="seconds allowed in all, reading the file included"
    )
    p.set_defaults(func=_iopddl_cmd)
    return parser


#: Set by ``iopddl`` once its answer is printed: :func:`entry` then ends the process at once.
_PROMPT_EXIT = False


def entry() -> NoReturn:
    """The ``stratopt`` console script and ``python -m stratopt``: :func:`main`, then exit.

    After ``iopddl`` has printed its answer the process leaves without tearing down what the
    solvers built (seconds for a large model), because the contest's clock runs until it ends.
    """
    code = main()
    if _PROMPT_EXIT:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        if args.command is None:
            parser.print_help()
            return _OK
        func: Callable[[argparse.Namespace], int] = args.func
        from stratopt.importers.common import UnmappedOperatorWarning

        with warnings.catch_warnings():
            warnings.simplefilter("always", UnmappedOperatorWarning)
            warnings.showwarning = _show_warning
            return func(args)
    except _UsageError as exc:
        _stderr(f"stratopt: error: {_one_line(str(exc))}")
        return _BAD_INPUT
    except StratoptError as exc:
        _stderr(f"stratopt: error: {_one_line(str(exc))}")
        return _BAD_INPUT
    except KeyboardInterrupt:
        _stderr("stratopt: interrupted")
        return 130


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Warnings reach the user as one line each, without the source line Python would show."""
    _stderr(f"stratopt: warning: {_one_line(str(message))}")


def _one_line(msg: str) -> str:
    return " ".join(msg.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
