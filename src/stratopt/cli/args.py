"""The ``stratopt`` command line's shared argument types and option groups (see :mod:`stratopt.cli.parser`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["count", "count_or_auto", "options", "positive", "seconds", "share"]


def positive(kind: type, unit: str) -> Callable[[str], Any]:
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


seconds, count = positive(float, "number of seconds"), positive(int, "integer")


def share(text: str) -> float:
    """An argparse type: a share of a whole, from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}")
    return value


def count_or_auto(text: str) -> int | str:
    return "auto" if text == "auto" else positive(int, "integer or auto")(text)  # an argparse type


def options(p: argparse.ArgumentParser, *names: str, limit: str = "seconds the solver may use") -> None:
    """Options that several commands share, in their usual order."""
    for name in names:
        if name == "time":
            p.add_argument("--time-limit", "-t", type=seconds, metavar="SEC", help=limit)
        elif name == "seed":
            p.add_argument("--seed", type=int, help="seed for randomised solvers and searches (same seed, same answer)")
        elif name == "json":
            p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
        elif name == "outputs":
            p.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace (Perfetto, chrome://tracing)")
            p.add_argument("--gantt", metavar="FILE.png", help="write a Gantt chart")
        elif name == "pipeline":
            g = p.add_argument_group("pipelines (with --stages)")
            g.add_argument("--microbatches", type=count_or_auto, default=1, metavar="M|auto", help=MICRO)
            g.add_argument(
                "--schedule",
                choices=("1f1b", "gpipe", "interleaved", "auto"),
                default="1f1b",
                help="the schedule (1f1b); with --expressible torch also interleaved (several stages per device "
                "group) or auto (the faster of 1f1b and interleaved)",
            )
        elif name in ("pricing", "memory"):
            g = p.add_argument_group(
                "operator graphs (networks, graph and ONNX files; defaults: stratopt.cost.build's)"
            )
            g.add_argument("--procs", "-p", type=count, metavar="P", help="devices to split over (default 8)")
            g.add_argument("--profile", choices=("pase", "default"), help="cost profile (default: default)")
            g.add_argument("--machine", metavar="NAME", help="h100 (pase for --profile pase), a100, pase, a .json file")
            if name == "memory":
                g.add_argument("--memory", type=positive(float, "number of GB"), metavar="GB", help="per device")


MICRO = "M micro-batches of the model's batch each (1), or auto: the model's batch cut into the best number"
