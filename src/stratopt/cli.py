"""The ``stratopt`` command line: parse, call the library, print (:mod:`stratopt.report`).

Exit codes (DESIGN section 7): 0 success; 1 no solution, an infeasible assignment or a cross-check
mismatch; 2 bad input, one line on stderr. Defaults are the library's (:mod:`stratopt.cost.costing`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from stratopt import __version__, report
from stratopt.errors import CrossCheckError, ModelError, StratoptError
from stratopt.graph.ir import Graph
from stratopt.instances import catalogue, load_instance, load_placement, load_priced, load_problem
from stratopt.placement.instance import PlacementInstance, read_placement_map
from stratopt.problem import evaluate, parse_assignment
from stratopt.solvers import registry, solve, solve_auto
from stratopt.solvers.base import Status

OK, NO_SOLUTION, BAD_INPUT = 0, 1, 2


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # a usage error is bad input: one line, exit 2
        raise ModelError(f"{message} (see '{self.prog} --help')")


def _positive(kind: type, unit: str) -> Callable[[str], Any]:
    """An argparse type: a positive number of ``kind``, with ``unit`` named in its errors."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {unit}, got {text!r}")
        return value

    return parse


_seconds = _positive(float, "number of seconds")
_count = _positive(int, "integer")


def _count_or_auto(text: str) -> int | str:
    """An argparse type: a positive integer or ``auto``."""
    return "auto" if text == "auto" else _positive(int, "integer or auto")(text)


_PRICING = {"procs": "procs", "profile": "profile", "machine": "machine", "memory_gb": "memory"}


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """The problem and, for a network, its costing; says on stderr what was priced."""
    options = {key: getattr(args, name, None) for key, name in _PRICING.items()}
    problem, costing = load_priced(args.instance, **options)
    if costing is None:
        if getattr(args, "explain", False):
            raise ModelError(f"{args.instance}: --explain applies to operator graphs, not to a problem file")
        if isinstance(load_instance(args.instance), PlacementInstance):
            _stderr(
                f"{problem.name}: a placement instance, solved in its additive view (choices = devices; cost = total "
                "compute + transfer time, not the makespan: see 'stratopt place')"
            )
        return problem, None
    _stderr(costing.summary())
    return problem, costing


def _solve_cmd(args: argparse.Namespace) -> int:
    """solve a problem: assignment, cost and proven bound

    Solve a problem and print the assignment, its cost and the proven bound. Without --solver, 'auto' picks
    the best exact solver that applies and says which it used.
    """
    problem, costing = _load(args)
    if args.solver != "auto" and args.solver not in registry.names():
        raise ModelError(f"unknown solver {args.solver!r}; choose from: auto, {', '.join(registry.names())}")
    if args.ray and args.solver != "lagrange":
        raise ModelError(f"--ray applies to --solver lagrange, not {args.solver!r}")
    if args.solver == "auto":
        result = solve_auto(problem, time_limit=args.time_limit, seed=args.seed, progress=_stderr)
        _stderr(f"solver: {result.solver} (picked by 'auto')")
    else:
        extra: dict[str, Any] = {"progress": _stderr} if args.solver in ("greedy", "lagrange") else {}
        if args.ray:
            extra["executor"] = "ray"
        result = solve(problem, args.solver, time_limit=args.time_limit, seed=args.seed, **extra)
    explain = costing.explain(result.assignment) if costing and args.explain and result.assignment else None
    if args.json:
        out = result.to_dict(args.instance)
        if costing is not None:
            out["graph"] = costing.describe(result.assignment)
        if explain is not None:
            out["explain"] = explain
        print(json.dumps(out))
    else:
        report.print_result(problem, result, args.instance)
        if explain is not None:
            report.print_explain(explain, costing.units)
    return OK if result.status in (Status.OPTIMAL, Status.FEASIBLE) else NO_SOLUTION


def _compare_cmd(args: argparse.Namespace) -> int:
    """run several solvers and cross-check their answers

    Run several solvers on one problem, recompute every answer's cost, and check that the exact solvers
    agree, that no bound exceeds a feasible cost and that no answer beats a proven optimum. Exit code 1 on a
    mismatch.
    """
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
    for name in names:
        registry.get(name)  # raises SolverUnavailableError naming the extra
    comparison = compare(problem, names, time_limit=args.time_limit, progress=_stderr, raise_on_mismatch=False)
    if args.json:
        print(json.dumps(comparison.to_dict(args.instance)))
    else:
        report.print_comparison(comparison)
    return OK if comparison.agree else NO_SOLUTION


def _demo_cmd(args: argparse.Namespace) -> int:
    """a one-minute tour: a network solved three ways, its strategy, a plot

    Build a network from models/, solve it with the DP, CP-SAT and greedy, show that they agree, print the
    optimal strategy operator by operator, and plot the optimal cost against the device count.
    """
    from stratopt.demo import demo

    return OK if demo(args.network, args.procs, None if args.no_plot else args.plot) else NO_SOLUTION


def _models_cmd(args: argparse.Namespace) -> int:
    """list the networks and placement jobs in models/ and the built-in problems

    List the networks (operator graphs in models/) with their vertex and edge counts, the placement jobs, and
    the built-in problems.
    """
    found = catalogue()
    print(json.dumps(found)) if args.json else report.print_models(found)
    return OK


def _place_cmd(args: argparse.Namespace) -> int:
    """place a job graph on heterogeneous devices (seed 004 and its anchors)

    Place every node of a job graph on one device: makespan (simulated), seed 004's JCT, and for cpsat the
    proven bound. Exit code 1 when no placement was found (infeasible memory, or the time ran out).
    """
    from stratopt.placement import ALGORITHMS, place

    inst = load_placement(args.instance)
    if args.algo not in ALGORITHMS:
        raise ModelError(f"unknown placement algorithm {args.algo!r}; choose from: {', '.join(ALGORITHMS)}")
    _stderr(
        f"{inst.name}: {inst.num_nodes} nodes, {len(inst.edges)} edges, {inst.num_devices} devices; placing with {args.algo}"
    )
    result = place(inst, args.algo, time_limit=args.time_limit, seed=args.seed)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        report.print_placement(result)
    return OK if result.placement is not None else NO_SOLUTION


def _outputs(args: argparse.Namespace, rows: list[Any], title: str, units: str) -> None:
    from stratopt.sim import write_timeline

    for note in write_timeline(rows, trace_file=args.trace, gantt_file=args.gantt, title=title, units=units):
        _stderr(note)


def _costing(args: argparse.Namespace, command: str) -> Any:
    """A network priced for the simulator (no memory limit: the simulator has none)."""
    if not isinstance(load_instance(args.instance), Graph):
        raise ModelError(f"{args.instance}: {command} needs an operator graph (a network), not a bare problem file")
    return load_priced(args.instance, procs=args.procs, profile=args.profile, machine=args.machine)[1]


def _simulate_cmd(args: argparse.Namespace) -> int:
    """simulate a strategy's training step (or a placement): iteration time, utilisation, trace

    Build the task graph of a network's strategy (compute per partition, transfers on links, collectives,
    gradient sync) and simulate one training step as FlexFlow does: iteration time, device utilisation,
    critical path; optionally a Chrome trace and a Gantt chart. The strategy is the exact optimum of the
    additive model unless --strategy or --solver says otherwise. For a placement job, --placement gives the
    node -> device map.
    """
    if isinstance(load_instance(args.instance), PlacementInstance):
        return _simulate_placement(args)
    if args.placement is not None:
        raise ModelError(f"{args.instance}: --placement applies to placement jobs; give --strategy or --solver")
    from stratopt.sim import events, simulate_strategy, start_strategy

    if args.microbatches == "auto" and args.stages is None:
        raise ModelError("--microbatches auto cuts the batch for a pipeline: give --stages auto or N as well")
    costing = _costing(args, "simulate")
    if args.stages is not None:
        return _simulate_pipeline(args, costing)
    if args.strategy is not None and args.solver is not None:
        raise ModelError("give --strategy or --solver, not both")
    if args.strategy is not None:
        assignment, source = start_strategy(costing, parse_assignment(args.strategy)), args.strategy
    else:
        result = solve(costing.problem, args.solver or "auto")
        if result.assignment is None:
            _stderr(f"{args.instance}: {args.solver or 'auto'} found no strategy ({result.status.value})")
            return NO_SOLUTION
        assignment, source = list(result.assignment), f"{result.solver} ({result.status.value})"
    timeline, info = simulate_strategy(costing, assignment)
    procs, units = costing.policy.procs, costing.units
    title = f"{costing.graph.name} p={procs} ({source})"
    _outputs(args, events(timeline) if args.trace or args.gantt else [], title, units)
    if args.json:
        head = {"instance": args.instance, "procs": procs, "profile": costing.profile.name, "units": units}
        print(json.dumps({**head, "strategy": {"source": source, "assignment": assignment}, **info}))
    else:
        report.print_simulation(costing.graph.name, procs, source, info, units)
    return OK


def _simulate_pipeline(args: argparse.Namespace, costing: Any) -> int:
    """simulate --stages: the p devices as nodes of the machine's size, the stage search, its schedule."""
    if args.strategy is not None or args.solver is not None:
        raise ModelError("--stages searches each stage's strategy itself; leave out --strategy and --solver")
    p, machine = costing.policy.procs, costing.profile.machine
    gpus = min(p, machine.devices_per_node)
    if p % gpus:
        raise ModelError(f"--stages: {p} devices are not whole nodes of {gpus}")
    info = _pipelined(args, costing.graph, p // gpus, gpus, machine, None)
    if args.json:
        print(json.dumps({"instance": args.instance, "procs": p, "units": costing.units, "pipeline": info}))
    else:
        report.print_pipeline_step(costing.graph.name, p, info)
    return OK


def _simulate_placement(args: argparse.Namespace) -> int:
    from stratopt.placement import jct, simulate

    inst = load_placement(args.instance)
    if args.placement is None:
        raise ModelError(f"{args.instance}: a placement job needs --placement FILE (a node -> device map)")
    given = [f"--{o}" for o in ("strategy", "solver", "procs", "profile", "machine") if getattr(args, o) is not None]
    if given:
        raise ModelError(f"{args.instance}: {', '.join(given)} apply to networks, not to a placement job")
    placement, order = read_placement_map(inst, args.placement)
    schedule = simulate(inst, placement, order)
    rows = schedule.events(inst)
    _outputs(args, rows, inst.name, "time units")
    tasks = [{"name": e.name, "device": e.resource, "start": e.start, "end": e.end} for e in rows]
    makespan, cost = schedule.makespan, jct(inst, placement)
    if args.json:
        print(
            json.dumps({"makespan": makespan, "jct": cost, "policy": "order" if order else "dispatch", "tasks": tasks})
        )
    else:
        how = "the given device order" if order else "dispatch in order of readiness"
        report.print_schedule(inst.name, makespan, cost, tasks, how, args.show)
    return OK


def _search_cmd(args: argparse.Namespace) -> int:
    """search strategies with MCMC on the simulated iteration time (FlexFlow)

    Markov chain Monte Carlo over strategies: each proposal gives one operator another configuration, priced
    by the delta simulation and accepted with probability min(1, exp(-beta * relative slowdown)). Reports the
    start's and the best strategy's simulated time.
    """
    from stratopt.sim import mcmc, start_strategy

    costing = _costing(args, "search")
    how: Any = (
        args.start if args.start in ("dp", "data-parallel") else start_strategy(costing, parse_assignment(args.start))
    )

    def progress(i: int, current: float, best: float) -> None:
        if not args.json:
            _stderr(f"search: {i} proposals, current {current:,.1f}, best {best:,.1f} {costing.units}")

    budget = 1000 if args.budget is None and args.time_limit is None else args.budget
    r = mcmc(costing, how, budget=budget, time_limit=args.time_limit, beta=args.beta, seed=args.seed, progress=progress)
    out = r.to_dict(costing, args.start)
    if args.json:
        print(json.dumps({"instance": args.instance, **out}))
    else:
        costs = (out["start"]["additive_cost"], out["best"]["additive_cost"])
        report.print_search(costing.graph.name, costing.policy.procs, costing.units, args.start, r, *costs)
    return OK


def _import_cmd(args: argparse.Namespace) -> int:
    """import a model (ONNX file or PyTorch entry point) as an operator graph

    Read an ONNX model (shapes from ONNX shape inference), or call a Python function that returns a PyTorch
    model and its example inputs (module:function, e.g. stratopt.importers.hf:llama_70b, or file.py:function;
    build large models on the meta device) and trace it; map its nodes to stratopt operators (products,
    convolutions, attention, mixture-of-experts layers, norms, softmax, pooling, pointwise, layout), fold
    view-only nodes and fuse pointwise ones, and optionally write the graph as stratopt-graph JSON. Unmapped
    operators are priced as elementwise work, with a warning naming them. Any command taking a network also
    takes an ONNX file or an entry point.
    """
    from stratopt.graph.io import save_graph
    from stratopt.importers import describe

    loaded = load_instance(args.model)
    if not isinstance(loaded, Graph):
        raise ModelError(f"{args.model}: not a model (expected an ONNX file or an operator graph)")
    print(describe(loaded))
    if args.output is not None:
        save_graph(loaded, args.output)
        print(f"wrote {args.output} (stratopt-graph JSON: 'stratopt solve {args.output} --procs 8')")
    return OK


def _plan_cmd(args: argparse.Namespace) -> int:
    """plan a model for a cluster, side by side with data parallel, FSDP and Megatron

    Price MODEL on NODES x GPUS_PER_NODE devices of a machine (collectives inside a node on its fabric,
    across nodes on the network), find the fastest strategy whose memory per device (weights, gradients,
    Adam state, kept activations) fits (the exact DP; under the limit, a Lagrangian search whose every step
    is an exact DP, with a lower bound), and measure the strategies people write by hand on the same model:
    data parallel, FSDP (ZeRO-3), Megatron tensor parallel inside a node with data parallel across nodes,
    and Megatron with FSDP. Prints the plan per layer in those words, then every strategy's step time (the
    additive model and the simulator), memory per device and whether it fits. With --stages, also cuts the
    model into pipeline stages with their own device groups and strategies (1F1B over --microbatches) and
    simulates the pipelined iteration.
    """
    from stratopt.plan import plan

    if args.stages != "auto" and not (args.stages.isdigit() and int(args.stages) >= 1):
        raise ModelError(f"--stages must be a positive number or auto, got {args.stages!r}")  # before the long part
    if args.microbatches == "auto" and args.stages == "1":
        raise ModelError("--microbatches auto cuts the batch for a pipeline: give --stages auto or N as well")
    result = plan(
        args.model,
        args.nodes,
        args.gpus_per_node,
        machine=args.machine,
        memory_gb=args.memory,
        time_limit=120.0 if args.time_limit is None else args.time_limit,
        simulate=not args.no_simulate,
        progress=None if args.json else _stderr,
    )
    if args.export is not None:
        _export_plan(result, args.export)
    pipelined = _pipeline(args, result) if args.stages != "1" else None
    if args.json:
        out = result.to_dict()
        if pipelined is not None:
            out["pipeline"] = pipelined
        print(json.dumps(out))
    else:
        report.print_plan(result)
        if pipelined is not None:
            report.print_pipeline(pipelined, result)
        if args.export is not None:
            print(f"wrote {args.export}")
    return OK if result.plan.assignment is not None and result.plan.fits else NO_SOLUTION


def _pipeline(args: argparse.Namespace, result: Any) -> dict[str, Any]:
    """--stages: the stage search and its simulation, beside the plan run without a pipeline: with
    --microbatches M, M times the plan's step less M - 1 gradient syncs (gradient accumulation); with
    auto (the model's batch cut into micro-batches), the plan's step."""
    graph, machine = result.costing.graph, result.cluster.machine
    single = result.plan.estimate
    if single is not None and args.microbatches != "auto" and result.plan.assignment is not None:
        m = args.microbatches
        sync = sum(
            float(c.phases()[2][a]) for c, a in zip(result.costing.vertex_costs, result.plan.assignment, strict=True)
        )
        single = m * single - (m - 1) * sync
    return {
        **_pipelined(args, graph, args.nodes, args.gpus_per_node, machine, result.memory_gb),
        "without_pipelining": single,
    }


def _pipelined(
    args: argparse.Namespace, graph: Graph, nodes: int, gpus: int, machine: Any, memory_gb: float | None
) -> dict[str, Any]:
    """The stage search for --stages, its simulation under --schedule, and --trace / --gantt of it;
    --microbatches auto also chooses how many micro-batches the model's batch is cut into."""
    from stratopt import pipeline
    from stratopt.sim.trace import events, write_timeline

    if args.stages != "auto" and not (args.stages.isdigit() and int(args.stages) >= 1):
        raise ModelError(f"--stages must be a positive number or auto, got {args.stages!r}")
    options = {
        "machine": machine,
        "stages": None if args.stages == "auto" else int(args.stages),
        "memory_gb": memory_gb,
    }
    progress = None if args.json else _stderr
    tried: list[tuple[int, float]] = []
    if args.microbatches == "auto":
        found, graph, tried = pipeline.search_microbatches(graph, nodes, gpus, progress=progress, **options)
    else:
        found = pipeline.search(graph, nodes, gpus, microbatches=args.microbatches, progress=progress, **options)
    timeline, info = pipeline.simulate(graph, found, machine, args.schedule)
    for line in write_timeline(
        events(timeline), trace_file=args.trace, gantt_file=args.gantt, title=f"{graph.name}: {args.schedule}"
    ):
        _stderr(line)
    out = {
        "microbatches": found.microbatches,
        "schedule": args.schedule,
        "estimate": found.estimate,
        "simulated": info["iteration_time"],
        "bubble": info["bubble"],
        "transfers": list(found.transfers),
        "stages": pipeline.describe(graph, found, machine),
    }
    if tried:
        out["tried"] = [{"microbatches": m, "estimate": None if e == math.inf else e} for m, e in tried]
    return out


def _export_plan(result: Any, path: str) -> None:
    """The plan as JSON keyed by operator (module) name: each split as mesh dimensions."""
    costing = result.costing
    plan = result.plan
    if plan.assignment is None:
        raise ModelError("no plan to export: nothing fits in the memory limit")
    ops = {}
    for v, op in enumerate(costing.graph.operators):
        config = costing.configs[v][plan.assignment[v]].tolist()
        ops[op.name] = {
            "op": op.op,
            "mesh": [[axis, int(c)] for axis, c in zip(op.axes, config, strict=True) if c > 1],
            "axes": {axis: int(size) for axis, size in zip(op.axes, op.sizes, strict=True)},
        }
    data = {
        "format": "stratopt-plan",
        "version": 1,
        "model": result.model,
        "cluster": result.to_dict()["cluster"],
        "estimate_us": plan.estimate,
        "simulated_us": plan.simulated,
        "memory_bytes": plan.memory,
        "operators": ops,
    }
    try:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
    except OSError as exc:
        raise ModelError(f"{path}: cannot write the plan ({exc.strerror})") from None


def _evaluate_cmd(args: argparse.Namespace) -> int:
    """price and check an assignment as the IOPDDL contest does

    Price an assignment exactly as the IOPDDL contest does and check it; exit code 1 when it is infeasible.
    """
    problem, _ = _load(args)
    ev = evaluate(problem, parse_assignment(args.assignment))
    if args.json:
        print(json.dumps({"instance": args.instance, **ev.to_dict(), "usage_limit": problem.usage_limit}))
    else:
        report.print_evaluation(problem, ev)
    return OK if ev.feasible else NO_SOLUTION


def _iopddl_cmd(args: argparse.Namespace) -> int:
    """the contest interface: last stdout line is the answer

    The IOPDDL contest interface: progress on stderr, the answer "[i, j, ...]" as the last stdout line; "[]"
    (exit 1) only when no feasible assignment was found in time.
    """
    start = time.perf_counter()
    problem = load_problem(args.file)
    loaded = time.perf_counter() - start
    # Leave room to print the answer: 5% of the budget and at least half a second.
    budget = args.timeout - loaded - max(0.5, 0.05 * args.timeout)
    _stderr(f"read {problem.num_vertices} vertices, {problem.num_edges} edges in {loaded:.1f} s; {budget:.1f} s left")
    best: list[tuple[int, ...]] = []  # feasible assignments as greedy finds them

    def line() -> str:
        return "[" + ", ".join(map(str, best[-1])) + "]" if best else "[]"

    def leave(signum: int, frame: Any) -> None:  # the harness ends the run: answer with what there is
        sys.stdout.write(line() + "\n")
        sys.stdout.flush()
        os._exit(OK if best else NO_SOLUTION)

    def keep(assignment: tuple[int, ...]) -> None:
        best.append(assignment)
        cost = evaluate(problem, assignment).objective
        _stderr(f"incumbent at {time.perf_counter() - start:.1f} s: cost {cost}")

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, leave)
    result = solve_auto(problem, time_limit=budget, progress=_stderr, incumbent=keep) if budget > 0 else None
    if result is not None:
        took = time.perf_counter() - start
        beside = result.stats.get("beside")
        joined = ""
        if beside and "error" in beside:
            joined = f"; beside it {beside['solver']}: nothing ({beside['error']})"
        elif beside:
            joined = (
                f"; beside it {beside['solver']}: cost {beside['objective']}, bound {beside['bound']}"
                f"{', its answer taken' if result.stats.get('answer_from') else ''}"
            )
        _stderr(
            f"{result.solver}: {result.status.value}, cost {result.objective}, bound {result.bound}, {took:.1f} s{joined}"
        )
        if result.assignment is not None and result.status in (Status.OPTIMAL, Status.FEASIBLE):
            best.append(result.assignment)
    print(line(), flush=True)
    return _LeaveAtOnce(OK if best else NO_SOLUTION)


class _LeaveAtOnce(int):
    """An exit code after which :func:`entry` ends the process at once (the contest's clock runs until then)."""


def _add(sub: Any, func: Callable[[argparse.Namespace], int], **extra: Any) -> argparse.ArgumentParser:
    """A sub-command named after ``func`` (``_solve_cmd`` -> ``solve``); its docstring's first line
    is the help, the rest the description."""
    head, _, body = (func.__doc__ or "").partition("\n")
    name = func.__name__.removeprefix("_").removesuffix("_cmd")
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=head.strip(), description=" ".join(body.split()) + extra.pop("more", "")
    )
    p.set_defaults(func=func)
    return p


def _options(p: argparse.ArgumentParser, *names: str, limit: str = "seconds the solver may use") -> None:
    """Options that several commands share, in their usual order."""
    for name in names:
        if name == "time":
            p.add_argument("--time-limit", "-t", type=_seconds, metavar="SEC", help=limit)
        elif name == "seed":
            p.add_argument("--seed", type=int, help="seed for randomised solvers and searches (same seed, same answer)")
        elif name == "json":
            p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
        elif name in ("pricing", "memory"):
            g = p.add_argument_group(
                "operator graphs (networks, graph and ONNX files; defaults: stratopt.cost.build's)"
            )
            g.add_argument("--procs", "-p", type=_count, metavar="P", help="devices to split over (default 8)")
            g.add_argument("--profile", choices=("pase", "default"), help="cost profile (default: default)")
            g.add_argument("--machine", metavar="NAME", help="pase, a100, h100 (default h100; pase for --profile pase)")
            if name == "memory":
                g.add_argument("--memory", type=_positive(float, "number of GB"), metavar="GB", help="per device")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stratopt`` (its sub-commands carry their own help)."""
    from stratopt.placement import ALGORITHMS
    from stratopt.sim.search import BETA

    parser = _Parser(
        prog="stratopt",
        description="Find optimal parallelization strategies and device placements, and prove how good they are.",
        epilog="Exit codes: 0 success; 1 no solution, an infeasible assignment or a cross-check mismatch; 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"stratopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    instance = "a built-in problem (example), a network or placement job from 'stratopt models', or a file"
    network = "a network from 'stratopt models', a stratopt-graph file or an ONNX file"

    _options(_add(sub, _models_cmd), "json")
    p = _add(sub, _solve_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=instance)
    p.add_argument("--solver", "-s", default="auto", metavar="S", help=f"auto or {', '.join(registry.names())}")
    p.add_argument("--explain", action="store_true", help="per operator: configuration, compute, comm., memory")
    p.add_argument(
        "--ray",
        action="store_true",
        help="lagrange only: run its weight vectors as Ray tasks on the cluster ray.init() connects to",
    )
    _options(p, "time", "seed", "json", "memory")
    p = _add(sub, _evaluate_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=instance)
    p.add_argument("--assignment", "-a", required=True, metavar="FILE_OR_LIST", help="'[0,1,2]', '0,1,2', or a file")
    _options(p, "json", "memory")
    p = _add(sub, _compare_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=instance)
    p.add_argument(
        "--solvers", metavar="A,B,..", help="solvers (default: installed exact ones, greedy; brute if small)"
    )
    _options(p, "time", "json", "memory", limit="seconds each solver may use")
    p = _add(sub, _demo_cmd)
    p.add_argument("--network", default="vgg19", help="a network from 'stratopt models' (default vgg19)")
    p.add_argument("--procs", "-p", type=_count, default=8, metavar="P", help="devices (default 8)")
    p.add_argument("--plot", default="stratopt-demo.png", metavar="FILE", help="where to write the plot (PNG)")
    p.add_argument("--no-plot", action="store_true", help="skip the plot")
    p = _add(sub, _place_cmd, more=" Algorithms: " + "; ".join(f"{k}: {v}" for k, v in ALGORITHMS.items()))
    p.add_argument("instance", metavar="INSTANCE", help="a placement job from 'stratopt models' or a placement file")
    p.add_argument("--algo", "-a", default="heuristic", metavar="NAME", help=f"one of {', '.join(ALGORITHMS)}")
    p.add_argument("--time-limit", "-t", type=_seconds, default=30.0, metavar="SEC", help="for cpsat and additive (30)")
    _options(p, "seed", "json")
    p = _add(sub, _simulate_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=network + "; or a placement job / file")
    p.add_argument("--strategy", metavar="FILE", help="a 'solve/search --json' output, a JSON list or '0,1,2'")
    p.add_argument("--solver", "-s", metavar="S", help="the additive model's solver for the strategy (auto)")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace (Perfetto, chrome://tracing)")
    p.add_argument("--gantt", metavar="FILE.png", help="write a Gantt chart")
    p.add_argument("--placement", metavar="FILE", help="placement jobs: node -> device JSON or 'place --json'")
    p.add_argument("--show", type=_count, default=20, metavar="N", help="placement jobs: tasks to print (default 20)")
    p.add_argument(
        "--stages", metavar="auto|N", help="pipeline the step: N stages or auto, searched (nodes of the machine's size)"
    )
    p.add_argument(
        "--microbatches",
        type=_count_or_auto,
        default=1,
        metavar="M|auto",
        help="with --stages: micro-batches of the model's batch each (1), or auto: the model's batch cut into the best number",
    )
    p.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b", help="with --stages: the schedule (1f1b)")
    _options(p, "json", "pricing")
    p = _add(sub, _search_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=network)
    p.add_argument("--mcmc", action="store_true", help="the search method (MCMC, the only one; may be left out)")
    p.add_argument("--budget", type=_count, metavar="ITERATIONS", help="proposals (default 1000)")
    p.add_argument("--start", default="dp", metavar="FROM", help="dp (default), data-parallel, or a strategy file/list")
    p.add_argument("--beta", type=_positive(float, "inverse temperature"), default=BETA, metavar="B")
    _options(p, "time", "seed", "json", "pricing", limit="seconds (stops first)")
    p = _add(sub, _plan_cmd)
    p.add_argument("model", metavar="MODEL", help=network + ", or a Python entry point (module:function)")
    p.add_argument("--nodes", type=_count, required=True, metavar="N", help="nodes in the cluster")
    p.add_argument("--gpus-per-node", type=_count, required=True, metavar="G", help="devices per node")
    p.add_argument("--machine", default="h100", metavar="NAME", help="the device: h100 (default), a100")
    p.add_argument(
        "--memory", type=_positive(float, "number of GB"), metavar="GB", help="per device (default: the device's)"
    )
    p.add_argument("--export", metavar="FILE.json", help="write the plan, operator by operator, as mesh splits")
    p.add_argument("--no-simulate", action="store_true", help="skip the simulator (large models)")
    p.add_argument(
        "--stages", default="1", metavar="auto|N", help="pipeline stages: 1 (default: no pipeline), N, or auto"
    )
    p.add_argument(
        "--microbatches",
        type=_count_or_auto,
        default=1,
        metavar="M|auto",
        help="with --stages: M micro-batches of the model's batch each (1), or auto: the model's batch cut into the best number",
    )
    p.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b", help="pipeline schedule (1f1b)")
    p.add_argument("--trace", metavar="FILE.json", help="with --stages: a Chrome trace of the pipelined iteration")
    p.add_argument("--gantt", metavar="FILE.png", help="with --stages: a Gantt chart of the pipelined iteration")
    _options(p, "time", "json", limit="seconds for the memory search (default 120)")
    p = _add(sub, _import_cmd)
    p.add_argument(
        "model",
        metavar="MODEL",
        help="an ONNX model file (.onnx), a Python entry point (module:function or file.py:function returning "
        "a PyTorch model and its example inputs), or any operator graph",
    )
    p.add_argument("--output", "-o", metavar="FILE.json", help="write the operator graph here")
    p = _add(sub, _iopddl_cmd)
    p.add_argument("file", metavar="FILE", help="an IOPDDL problem file (JSON, .gz allowed)")
    p.add_argument("timeout", metavar="TIMEOUT", type=_seconds, help="seconds in all, reading the file included")
    return parser


def entry() -> NoReturn:
    """The ``stratopt`` console script and ``python -m stratopt``."""
    code = main()
    if isinstance(code, _LeaveAtOnce):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    from stratopt import instances

    instances._ENTRY_GRAPHS.clear()  # one command, one import of an entry point
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        if args.command is None:
            parser.print_help()
            return OK
        from stratopt.importers.common import UnmappedOperatorWarning

        with warnings.catch_warnings():
            warnings.simplefilter("always", UnmappedOperatorWarning)
            warnings.showwarning = _show_warning
            return args.func(args)  # type: ignore[no-any-return]
    except CrossCheckError as exc:  # a mismatch between solvers, not bad input
        _stderr(f"stratopt: mismatch: {_one_line(str(exc))}")
        return NO_SOLUTION
    except StratoptError as exc:
        _stderr(f"stratopt: error: {_one_line(str(exc))}")
        return BAD_INPUT
    except KeyboardInterrupt:
        _stderr("stratopt: interrupted")
        return 130


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Warnings reach the user as one line each, without the source line Python would show."""
    _stderr(f"stratopt: warning: {_one_line(str(message))}")


def _one_line(msg: str) -> str:
    return " ".join(msg.split())
