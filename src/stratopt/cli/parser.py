"""The ``stratopt`` argument parser and entry point: sub-commands, their options, and the exit codes
(:mod:`stratopt.cli.commands` runs each command; :mod:`stratopt.cli.args` holds the shared types).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from stratopt import __version__, report
from stratopt.cli import commands
from stratopt.cli.args import count as _count
from stratopt.cli.args import options as _options
from stratopt.cli.args import positive as _positive
from stratopt.cli.args import seconds as _seconds
from stratopt.cli.args import share as _share
from stratopt.cli.commands import BAD_INPUT, NO_SOLUTION, OK, stderr
from stratopt.errors import CrossCheckError, ModelError, NoSolutionError, StratoptError
from stratopt.importers.common import UnmappedOperatorWarning
from stratopt.instances import forget_entry_points
from stratopt.placement import ALGORITHMS
from stratopt.sim.search import BETA
from stratopt.solvers import registry
from stratopt.solvers.contest import process_age


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # a usage error is bad input: one line, exit 2
        raise ModelError(f"{message} (see '{self.prog} --help')")


def _add(sub: Any, func: Callable[[argparse.Namespace], int], **extra: Any) -> argparse.ArgumentParser:
    """A sub-command named after ``func`` (``commands.solve_cmd`` -> ``solve``); its docstring's first line
    is the help, the rest the description."""
    head, _, body = (func.__doc__ or "").partition("\n")
    name = func.__name__.removeprefix("_").removesuffix("_cmd").replace("_", "-")
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=head.strip(), description=" ".join(body.split()) + extra.pop("more", "")
    )
    p.set_defaults(func=func)
    return p


_BOUND_SHARE_HELP = (
    "lagrange (alone or picked by auto): the share of the time limit its linear relaxation may take "
    "on one core, for the lower bound (default 0.5, or 0.85 beside an exact run; 0: none); where it is "
    "too large and S is at least 1, its dual by message passing takes half that share, and where its "
    "prices' programme is small, the share until it stalls, at any S; where the usage rows are few, "
    "the bound with them kept as knapsacks takes the share instead"
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``stratopt`` (its sub-commands carry their own help)."""

    parser = _Parser(
        prog="stratopt",
        description="Find optimal parallelization strategies and device placements, and prove how good they are.",
        epilog="Exit codes: 0 success; 1 no solution, an infeasible assignment or a cross-check mismatch; 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"stratopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    instance = "a built-in problem (example), a network or placement job from 'stratopt models', or a file"
    network = "a network from 'stratopt models', a stratopt-graph file or an ONNX file"

    _options(_add(sub, commands.models_cmd), "json")
    p = _add(sub, commands.solve_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=instance)
    p.add_argument("--solver", "-s", default="auto", metavar="S", help=f"auto or {', '.join(registry.names())}")
    p.add_argument("--explain", action="store_true", help="per operator: configuration, compute, comm., memory")
    p.add_argument("--ray", action="store_true", help="lagrange only: weight vectors as Ray tasks (ray.init())")
    p.add_argument("--bound-share", type=_share, metavar="S", help=_BOUND_SHARE_HELP)
    _options(p, "time", "seed", "json", "memory")
    p = _add(sub, commands.evaluate_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=instance)
    p.add_argument("--assignment", "-a", required=True, metavar="FILE_OR_LIST", help="'[0,1,2]', '0,1,2', or a file")
    _options(p, "json", "memory")
    p = _add(sub, commands.compare_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=instance)
    p.add_argument("--solvers", metavar="A,B,..", help="default: installed exact ones, greedy; brute if small")
    _options(p, "time", "json", "memory", limit="seconds each solver may use")
    p = _add(sub, commands.demo_cmd)
    p.add_argument("--network", default="vgg19", help="a network from 'stratopt models' (default vgg19)")
    p.add_argument("--procs", "-p", type=_count, default=8, metavar="P", help="devices (default 8)")
    p.add_argument("--plot", default="stratopt-demo.png", metavar="FILE", help="where to write the plot (PNG)")
    p.add_argument("--no-plot", action="store_true", help="skip the plot")
    p = _add(sub, commands.place_cmd, more=" Algorithms: " + "; ".join(f"{k}: {v}" for k, v in ALGORITHMS.items()))
    p.add_argument("instance", metavar="INSTANCE", help="a placement job from 'stratopt models' or a placement file")
    p.add_argument("--algo", "-a", default="heuristic", metavar="NAME", help=f"one of {', '.join(ALGORITHMS)}")
    p.add_argument("--time-limit", "-t", type=_seconds, default=30.0, metavar="SEC", help="for cpsat and additive (30)")
    _options(p, "seed", "json")
    p = _add(sub, commands.simulate_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=network + "; or a placement job / file")
    p.add_argument("--strategy", metavar="FILE", help="a 'solve/search --json' output, a JSON list or '0,1,2'")
    p.add_argument("--solver", "-s", metavar="S", help="the additive model's solver for the strategy (auto)")
    p.add_argument("--placement", metavar="FILE", help="placement jobs: node -> device JSON or 'place --json'")
    p.add_argument("--show", type=_count, default=20, metavar="N", help="placement jobs: tasks to print (default 20)")
    p.add_argument(
        "--stages", metavar="auto|N", help="pipeline the step: N stages or auto (nodes of the machine's size)"
    )
    _options(p, "outputs", "json", "pricing", "pipeline")
    p = _add(sub, commands.search_cmd)
    p.add_argument("instance", metavar="INSTANCE", help=network)
    p.add_argument("--mcmc", action="store_true", help="the search method (MCMC, the only one; may be left out)")
    p.add_argument("--budget", type=_count, metavar="ITERATIONS", help="proposals (default 1000)")
    p.add_argument("--start", default="dp", metavar="FROM", help="dp (default), data-parallel, or a strategy file/list")
    p.add_argument("--beta", type=_positive(float, "inverse temperature"), default=BETA, metavar="B")
    _options(p, "time", "seed", "json", "pricing", limit="seconds (stops first)")
    p = _add(sub, commands.plan_cmd)
    p.add_argument(
        "model", metavar="MODEL", help=f"{network}, module:function, hf:CONFIG,seq=S,batch=B, or mpt:...,seq=S,batch=B"
    )
    p.add_argument("--nodes", type=_count, required=True, metavar="N", help="nodes in the cluster")
    p.add_argument("--gpus-per-node", type=_count, required=True, metavar="G", help="devices per node")
    p.add_argument("--machine", default="h100", metavar="NAME", help="h100 (default), a100, or a machine file")
    p.add_argument("--memory", type=_positive(float, "number of GB"), metavar="GB", help="per device (the device's)")
    p.add_argument("--export", metavar="FILE.json", help="write the plan, operator by operator, as mesh splits")
    p.add_argument("--export-all", metavar="DIR", help="write the plan and every baseline that runs, a file each")
    p.add_argument("--no-simulate", action="store_true", help="skip the simulator (large models)")
    p.add_argument("--expressible", choices=("torch",), help="only strategies PyTorch's DTensor runs (check-plan)")
    p.add_argument(
        "--recompute", choices=("auto", "full", "none"), default="auto", help="auto (where memory binds), full, none"
    )
    p.add_argument("--stages", default="1", metavar="auto|N", help="pipeline stages: 1 (default: none), N, or auto")
    _options(p, "outputs", "time", "json", "pipeline", limit="seconds for the memory search (default 120)")
    p = _add(sub, commands.check_plan_cmd)
    p.add_argument("model", metavar="MODEL", help="what the plan was made from (module:function or hf:CONFIG,...)")
    p.add_argument("--plan", required=True, metavar="FILE.json", help="the plan, from 'plan --export'")
    p.add_argument("--world", type=_count, required=True, metavar="N", help="processes (the plan's devices)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="float64 tells rounding apart")
    _options(p, "time", "seed", "json", limit="seconds the processes may take (300)")
    p = _add(sub, commands.train_cmd)
    p.add_argument("model", metavar="MODEL", help="what the plan was made from (module:function or hf:CONFIG,...)")
    p.add_argument("--plan", required=True, metavar="FILE.json", help="the plan, from 'plan --export'")
    p.add_argument("--world", type=_count, required=True, metavar="N", help="ranks (the plan's devices)")
    p.add_argument("--steps", type=_count, default=3, metavar="S", help="AdamW steps (default 3)")
    p.add_argument("--check", action="store_true", help="also run the steps on one process and compare the losses")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="float64 tells rounding apart")
    _options(p, "time", "seed", "json", limit="seconds the ranks may take (600)")
    p = _add(sub, commands.profile_cmd)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="what to measure (cpu)")
    p.add_argument("--world", type=_count, default=2, metavar="N", help="local ranks for the collectives (2)")
    p.add_argument("--name", metavar="NAME", help="the machine's name (profiled-DEVICE)")
    p.add_argument("--output", "-o", metavar="FILE.json", help="write the machine file here")
    p.add_argument("--plot", metavar="FILE.png", help="plot the measured curves")
    p.add_argument("--window", type=float, default=0.2, metavar="SEC", help="seconds of calls per figure (0.2)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="rounds of the figures, their median kept (3)")
    p.add_argument(
        "--dtype", choices=("float32", "bfloat16"), help="what to measure in (float32 on cpu, bfloat16 on cuda)"
    )
    _options(p, "json")
    p = _add(sub, commands.import_cmd)
    p.add_argument(
        "model",
        metavar="MODEL",
        help="an ONNX file, an entry point (module:function), hf:CONFIG,seq=S,batch=B, or a graph",
    )
    p.add_argument("--output", "-o", metavar="FILE.json", help="write the operator graph here")
    p = _add(sub, commands.predict_cmd)
    p.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help="a decoder shape, e.g. mpt:layers=32,d_model=4096,heads=32,vocab=50368",
    )
    p.add_argument("--measurements", metavar="FILE.csv", help="predict every row of a measurements file instead")
    p.add_argument("--seq", type=_count, metavar="S", help="tokens per sequence")
    p.add_argument("--nodes", type=_count, default=1, metavar="N", help="nodes (1)")
    p.add_argument("--gpus-per-node", type=_count, default=8, metavar="G", help="GPUs per node (8)")
    p.add_argument("--strategy", default="fsdp", metavar="S", help="fsdp (default), zero2, ddp or megatron-tpT")
    p.add_argument("--micro-batch", type=_count, default=1, metavar="B", help="sequences per GPU per micro-batch (1)")
    p.add_argument("--grad-accum", type=_count, default=1, metavar="A", help="micro-batches per step (1)")
    p.add_argument("--recompute", action="store_true", help="recompute every block's activations")
    p.add_argument("--machine", default="h100", metavar="M", help="a preset or a machine file (h100)")
    _options(p, "json")
    p = _add(sub, commands.calibrate_cmd)
    p.add_argument("file", metavar="FILE.csv", help="measured runs (the columns of ../shared/measurements)")
    p.add_argument("--machine", default="h100", metavar="M", help="the machine to start from (h100)")
    p.add_argument("--output", "-o", required=True, metavar="FILE.json", help="where to write the machine file")
    p.add_argument("--fit-seq-max", type=_count, metavar="S", help="fit only rows with sequences up to S")
    _options(p, "json")
    p = _add(sub, commands.iopddl_cmd)
    p.add_argument("file", metavar="FILE", help="an IOPDDL problem file (JSON, .gz allowed)")
    p.add_argument(
        "timeout",
        metavar="TIMEOUT",
        type=_seconds,
        help="seconds in all, from the process's start, reading the file included",
    )
    p.add_argument("--bound-share", type=_share, metavar="S", help=_BOUND_SHARE_HELP)
    return parser


def entry() -> NoReturn:
    """The ``stratopt`` console script and ``python -m stratopt``: a process of its own, so that
    the contest interface's clock starts where the process did (:func:`process_age`)."""
    code = main(started=time.perf_counter() - process_age())
    if isinstance(code, commands.LeaveAtOnce):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit code.
    ``started``: the ``time.perf_counter()`` at which the process began (the contest interface's
    time limit counts from there; None: from now)."""
    forget_entry_points()  # one command, one import of an entry point
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        args.started = started
        if args.command is None:
            parser.print_help()
            return OK
        with report.one_line_warnings(stderr, UnmappedOperatorWarning):
            return args.func(args)  # type: ignore[no-any-return]
    except CrossCheckError as exc:  # a mismatch between solvers, not bad input
        stderr(f"stratopt: mismatch: {report.one_line(str(exc))}")
        return NO_SOLUTION
    except NoSolutionError as exc:  # nothing found: a status, not bad input
        stderr(f"{args.instance}: {report.one_line(str(exc))}")
        return NO_SOLUTION
    except StratoptError as exc:
        stderr(f"stratopt: error: {report.one_line(str(exc))}")
        return BAD_INPUT
    except KeyboardInterrupt:
        stderr("stratopt: interrupted")
        return 130
