"""The ``stratopt`` commands: each parses nothing, calls one library function and renders its
answer (:mod:`stratopt.report`); its docstring is its ``--help`` (:mod:`stratopt.cli.parser`).

Exit codes (DESIGN section 7): 0 success; 1 no solution, an infeasible assignment or a cross-check
mismatch; 2 bad input, one line on stderr. Defaults are the library's (:mod:`stratopt.cost.costing`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratopt import plots, report
from stratopt.errors import ModelError
from stratopt.graph.decoder import parse_decoder
from stratopt.graph.io import save_graph
from stratopt.graph.ir import Graph
from stratopt.harness import compare, solver_names
from stratopt.harness.demo import demo
from stratopt.importers import describe
from stratopt.instances import catalogue, load_instance, load_placement, load_priced
from stratopt.machine import get_machine, write_machine
from stratopt.placement import ALGORITHMS, place
from stratopt.placement.instance import PlacementInstance
from stratopt.planning import ExportedPlan, parse_stages, plan, plan_pipeline, whole_nodes
from stratopt.planning.calibrate import calibrate_file, predict_file
from stratopt.planning.pipelined import runnable_stages
from stratopt.planning.predict import Run, predict
from stratopt.problem import evaluate, parse_assignment
from stratopt.sim import mcmc
from stratopt.sim.runs import simulate_job, simulate_network
from stratopt.solvers import solve_named
from stratopt.solvers.base import Status
from stratopt.solvers.contest import answer
from stratopt.torch import check_plan
from stratopt.torch.profile import profile
from stratopt.torch.train import train

OK, NO_SOLUTION, BAD_INPUT = 0, 1, 2


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _show(args: argparse.Namespace, data: Any, render: Callable[[], object]) -> None:
    """``--json``: ``data`` as one JSON object; otherwise ``render()`` prints the report."""
    print(json.dumps(data)) if args.json else render()


_PRICING = {"procs": "procs", "profile": "profile", "machine": "machine", "memory_gb": "memory"}


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """The problem and, for a network, its costing; says on stderr what was priced."""
    options = {key: getattr(args, name, None) for key, name in _PRICING.items()}
    problem, costing = load_priced(args.instance, say=stderr, **options)
    if costing is None and getattr(args, "explain", False):
        raise ModelError(f"{args.instance}: --explain applies to operator graphs, not to a problem file")
    return problem, costing


def solve_cmd(args: argparse.Namespace) -> int:
    """solve a problem: assignment, cost and proven bound

    Without --solver, 'auto' picks the best exact solver that applies and says which it used.
    """
    problem, costing = _load(args)
    result = solve_named(
        problem,
        args.solver,
        time_limit=args.time_limit,
        seed=args.seed,
        ray=args.ray,
        bound_share=args.bound_share,
        progress=stderr,
    )
    explain = costing.explain(result.assignment) if costing and args.explain and result.assignment else None
    data = report.result_json(result, args.instance, costing, explain)
    _show(args, data, lambda: report.print_result(problem, result, args.instance, costing, explain))
    return OK if result.status in (Status.OPTIMAL, Status.FEASIBLE) else NO_SOLUTION


def compare_cmd(args: argparse.Namespace) -> int:
    """run several solvers and cross-check their answers

    Recompute every answer's cost; check that exact optima agree, that no bound exceeds a feasible cost and no
    answer beats a proven optimum (exit code 1 on a mismatch).
    """
    problem, _ = _load(args)
    names = solver_names(args.solvers, problem)
    comparison = compare(problem, names, time_limit=args.time_limit, progress=stderr, raise_on_mismatch=False)
    _show(args, comparison.to_dict(args.instance), lambda: report.print_comparison(comparison))
    return OK if comparison.agree else NO_SOLUTION


def demo_cmd(args: argparse.Namespace) -> int:
    """a one-minute tour: a network solved three ways, its strategy, a plot

    Solve a network with the DP, CP-SAT and greedy, show that they agree, print the strategy, plot the optimum.
    """
    return OK if demo(args.network, args.procs, None if args.no_plot else args.plot) else NO_SOLUTION


def models_cmd(args: argparse.Namespace) -> int:
    """list the networks and placement jobs in models/ and the built-in problems"""
    found = catalogue()
    print(json.dumps(found)) if args.json else report.print_models(found)
    return OK


def place_cmd(args: argparse.Namespace) -> int:
    """place a job graph on heterogeneous devices (seed 004 and its anchors)

    Makespan (simulated), seed 004's JCT, and for cpsat the proven bound; exit code 1 when nothing was placed.
    """
    inst = load_placement(args.instance)
    if args.algo not in ALGORITHMS:
        raise ModelError(f"unknown placement algorithm {args.algo!r}; choose from: {', '.join(ALGORITHMS)}")
    stderr(f"{inst.describe()}; placing with {args.algo}")
    result = place(inst, args.algo, time_limit=args.time_limit, seed=args.seed)
    _show(args, result.to_dict(), lambda: report.print_placement(result))
    return OK if result.placement is not None else NO_SOLUTION


def _costing(args: argparse.Namespace, command: str) -> Any:
    """A network priced for the simulator (no memory limit: the simulator has none)."""
    if not isinstance(load_instance(args.instance), Graph):
        raise ModelError(f"{args.instance}: {command} needs an operator graph (a network), not a bare problem file")
    return load_priced(args.instance, procs=args.procs, profile=args.profile, machine=args.machine)[1]


def simulate_cmd(args: argparse.Namespace) -> int:
    """simulate a strategy's training step (or a placement): iteration time, utilisation, trace

    One training step of a strategy (default: the additive model's optimum) as FlexFlow simulates it; for a
    placement job, --placement gives the node -> device map.
    """
    if isinstance(load_instance(args.instance), PlacementInstance):
        return _simulate_placement(args)
    if args.placement is not None:
        raise ModelError(f"{args.instance}: --placement applies to placement jobs; give --strategy or --solver")
    if args.microbatches == "auto" and args.stages is None:
        raise ModelError("--microbatches auto cuts the batch for a pipeline: give --stages auto or N as well")
    costing = _costing(args, "simulate")
    if args.stages is not None:
        return _simulate_pipeline(args, costing)
    info = simulate_network(
        costing, strategy=args.strategy, solver=args.solver, trace=args.trace, gantt=args.gantt, notes=stderr
    )
    head = {"instance": args.instance, "procs": costing.policy.procs, "profile": costing.profile.name}
    _show(args, {**head, "units": costing.units, **info}, lambda: report.print_simulation(costing, info))
    return OK


def _simulate_pipeline(args: argparse.Namespace, costing: Any) -> int:
    """simulate --stages: the p devices as nodes of the machine's size, the stage search, its schedule."""
    if args.strategy is not None or args.solver is not None:
        raise ModelError("--stages searches each stage's strategy itself; leave out --strategy and --solver")
    p, machine = costing.policy.procs, costing.profile.machine
    info = plan_pipeline(costing.graph, *whole_nodes(p, machine), machine, **_staging(args))
    data = {"instance": args.instance, "procs": p, "units": costing.units, "pipeline": info}
    _show(args, data, lambda: report.print_pipeline_step(costing.graph.name, p, info))
    return OK


def _simulate_placement(args: argparse.Namespace) -> int:
    inst = load_placement(args.instance)
    if args.placement is None:
        raise ModelError(f"{args.instance}: a placement job needs --placement FILE (a node -> device map)")
    given = [f"--{o}" for o in ("strategy", "solver", "procs", "profile", "machine") if getattr(args, o) is not None]
    if given:
        raise ModelError(f"{args.instance}: {', '.join(given)} apply to networks, not to a placement job")
    out = simulate_job(inst, args.placement, trace=args.trace, gantt=args.gantt, notes=stderr)
    _show(args, out, lambda: report.print_schedule(inst.name, out, args.show))
    return OK


def search_cmd(args: argparse.Namespace) -> int:
    """search strategies with MCMC on the simulated iteration time (FlexFlow)

    Each proposal gives one operator another configuration, priced by the delta simulation.
    """
    costing = _costing(args, "search")
    how: Any = args.start if args.start in ("dp", "data-parallel") else parse_assignment(args.start)

    def progress(i: int, current: float, best: float) -> None:
        if not args.json:
            stderr(f"search: {i} proposals, current {current:,.1f}, best {best:,.1f} {costing.units}")

    budget = 1000 if args.budget is None and args.time_limit is None else args.budget
    r = mcmc(costing, how, budget=budget, time_limit=args.time_limit, beta=args.beta, seed=args.seed, progress=progress)
    out = r.to_dict(costing, args.start)
    _show(args, {"instance": args.instance, **out}, lambda: report.print_search(costing, args.start, r, out))
    return OK


def import_cmd(args: argparse.Namespace) -> int:
    """import a model (ONNX file or PyTorch entry point) as an operator graph

    An ONNX model, or a function (module:function, e.g. stratopt.importers.hf:llama_70b) returning a PyTorch
    model and its example inputs; unmapped operators are priced as elementwise work, with a warning.
    """

    loaded = load_instance(args.model)
    if not isinstance(loaded, Graph):
        raise ModelError(f"{args.model}: not a model (expected an ONNX file or an operator graph)")
    print(describe(loaded))
    if args.output is not None:
        save_graph(loaded, args.output)
        print(f"wrote {args.output} (stratopt-graph JSON: 'stratopt solve {args.output} --procs 8')")
    return OK


def plan_cmd(args: argparse.Namespace) -> int:
    """plan a model for a cluster, side by side with data parallel, FSDP and Megatron

    The fastest strategy whose memory fits NODES x GPUS_PER_NODE devices, beside data parallel, FSDP and
    Megatron priced the same way; with --stages, also pipeline stages and their simulated iteration.
    """
    parse_stages(args.stages)  # a bad --stages is refused before the long part
    if args.schedule in ("interleaved", "auto") and args.expressible != "torch":
        raise ModelError(
            f"--schedule {args.schedule} is searched among the pipelines PyTorch runs: add --expressible torch"
        )
    if args.microbatches == "auto" and args.stages == "1":
        raise ModelError("--microbatches auto cuts the batch for a pipeline: give --stages auto or N as well")
    # with --expressible torch, --stages 1 --microbatches M is gradient accumulation, run as a stage of one
    staged = args.stages != "1" or (args.expressible == "torch" and args.microbatches != 1)
    limit = 120.0 if args.time_limit is None else args.time_limit
    options = {"machine": args.machine, "memory_gb": args.memory, "time_limit": limit, "simulate": not args.no_simulate}
    options["expressible"], options["recompute"] = args.expressible, args.recompute
    result = plan(args.model, args.nodes, args.gpus_per_node, progress=None if args.json else stderr, **options)
    pipelined, exported = None, None
    if staged and args.expressible == "torch":  # a pipeline that runs: it is what is exported
        pipelined, run = runnable_stages(result, recompute=args.recompute, **_staging(args))
        exported = ExportedPlan.of_pipeline(result, run) if run is not None else None
    elif args.stages != "1":
        graph, machine = result.costing.graph, result.cluster.machine
        pipelined = plan_pipeline(
            graph, args.nodes, args.gpus_per_node, machine, memory_gb=result.memory_gb, beside=result, **_staging(args)
        )
    if args.export is not None:
        (exported or ExportedPlan.of(result)).write(args.export)
    written = result.export_all(args.export_all, exported) if args.export_all is not None else None
    data = {**result.to_dict(), **({"pipeline": pipelined} if pipelined is not None else {})}
    if written is not None:
        data["exported"] = written
    _show(args, data, lambda: report.print_plan(result, pipelined, args.export, written))
    return OK if result.plan.assignment is not None and result.plan.fits else NO_SOLUTION


def check_plan_cmd(args: argparse.Namespace) -> int:
    """run an exported plan on N gloo processes and check it against one process

    Applies the plan ('plan --export', made with --expressible torch) to MODEL with DTensor and FSDP on
    --world CPU processes, runs one forward and backward pass, and compares the loss and every gradient
    with one process, the parameter bytes per rank with the plan's, and the collectives counted per
    module with those the plan priced. Exit 1 on a mismatch.
    """

    options = {"seed": args.seed or 0, "timeout": args.time_limit or 300.0, "dtype": args.dtype}
    found = check_plan(args.model, args.plan, args.world, **options)
    _show(args, found.to_dict(), lambda: report.print_check(found))
    return OK if found.ok else NO_SOLUTION


def train_cmd(args: argparse.Namespace) -> int:
    """train MODEL with an exported plan on N ranks: loss, throughput and memory per step

    Applies the plan ('plan --export', made with --expressible torch) to MODEL on --world ranks (gloo
    processes on the CPU, NCCL where CUDA has a GPU per rank), runs --steps AdamW steps on synthetic
    batches of the model's example shapes, and prints each step's loss, tokens (or images) per second
    and peak memory per rank, the measured step (median after the first) beside the plan's estimate.
    --check also runs the steps on one process and compares the losses (exit 1 on a mismatch).
    """
    options = {"seed": args.seed or 0, "timeout": args.time_limit or 600.0, "dtype": args.dtype}
    found = train(args.model, args.plan, args.world, args.steps, check=args.check, **options)
    _show(args, found.to_dict(), lambda: report.print_train(found))
    return NO_SOLUTION if found.ok is False else OK


def _staging(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline options of plan and simulate, as :func:`stratopt.planning.plan_pipeline` takes them."""
    keys = ("stages", "microbatches", "schedule", "trace", "gantt")
    return {**{k: getattr(args, k) for k in keys}, "progress": None if args.json else stderr, "notes": stderr}


def predict_cmd(args: argparse.Namespace) -> int:
    """predict a decoder's training step, or every row of a measurements file

    Step time, tokens/s, MFU, HFU and memory per GPU of a decoder shape (mpt:layers=L,d_model=D,heads=H,vocab=V)
    under a strategy, on the machine's calibration; with --measurements, every row beside its measured throughput.
    """
    machine = get_machine(args.machine)
    if args.measurements is not None:
        out = predict_file(args.measurements, machine)
        _show(args, out, lambda: report.print_measured(out, f"tokens/s per GPU on {machine.name}"))
        return OK
    if args.model is None or args.seq is None:
        raise ModelError("predict needs MODEL and --seq, or --measurements FILE")
    model = parse_decoder(args.model)
    run = Run(
        args.seq, args.nodes, args.gpus_per_node, args.strategy, args.micro_batch, args.grad_accum, args.recompute
    )
    p = predict(model, run, machine)
    _show(args, {"model": args.model, **p.to_dict()}, lambda: report.print_prediction(model, run, p))
    return OK


def calibrate_cmd(args: argparse.Namespace) -> int:
    """fit a machine's free parameters to measured runs; write a machine file

    Least squares on log error over the rows of FILE (with --fit-seq-max, only the shorter sequences; the
    others are then predicted as held out); -o writes a machine file every command takes as --machine.
    """
    fitted, out = calibrate_file(args.file, get_machine(args.machine), fit_seq_max=args.fit_seq_max, progress=stderr)
    write_machine(dataclasses.replace(fitted, name=Path(args.output).stem), args.output)
    _show(args, out, lambda: report.print_calibration(out, args.output))
    return OK


def evaluate_cmd(args: argparse.Namespace) -> int:
    """price and check an assignment as the IOPDDL contest does

    Exit code 1 when it is infeasible.
    """
    problem, _ = _load(args)
    ev = evaluate(problem, parse_assignment(args.assignment))
    data = {"instance": args.instance, **ev.to_dict(), "usage_limit": problem.usage_limit}
    _show(args, data, lambda: report.print_evaluation(problem, ev))
    return OK if ev.feasible else NO_SOLUTION


def iopddl_cmd(args: argparse.Namespace) -> int:
    """the contest interface: last stdout line is the answer

    Progress on stderr, the answer "[i, j, ...]" as the last stdout line; "[]" (exit 1) only when no feasible
    assignment was found in time.
    """
    found = answer(args.file, args.timeout, stderr, bound_share=args.bound_share, started=args.started)
    return LeaveAtOnce(OK if found else NO_SOLUTION)


class LeaveAtOnce(int):
    """An exit code after which :func:`entry` ends the process at once (the contest's clock runs until then)."""


def profile_cmd(args: argparse.Namespace) -> int:
    """measure this machine with PyTorch and write it as a machine file

    Times matrix products across sizes, fused attention, memory bandwidth and, over --world local
    ranks (gloo on the CPU, NCCL on GPUs), all-reduce, all-gather, reduce-scatter, all-to-all and
    send/recv across message sizes; fits the machine the cost model prices with and writes it (-o),
    a file every --machine takes.
    """
    if args.output is not None and not Path(args.output).resolve().parent.is_dir():
        raise ModelError(f"{args.output}: cannot write the machine file (no such folder)")
    found = profile(
        args.device, args.world, name=args.name, progress=not args.json, window=args.window, rounds=args.rounds,
        dtype=args.dtype,
    )  # fmt: skip
    if args.output is not None:
        write_machine(found.machine, args.output)
    if args.plot is not None:
        plots.machine_profile(found.to_dict(), args.plot)
    _show(args, found.to_dict(), lambda: report.print_profile(found, args.output, args.plot))
    return OK
