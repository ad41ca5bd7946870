"""The bound with the usage rows kept (`stratopt.solvers.lagrange.kept`) on one instance alone: the
message bound's prices, then one toulbar2 run with the rows kept at each fraction of them, each for
at most so many seconds, whether it closed and the bound it proved.

    python scripts/bench_kept.py FILE [--message-seconds S] [--fractions 1,0.9,...] [--seconds S]
                                       [--reference COST]

Prints the machine, then a Markdown table (fraction, seconds, closed, bound, how far below the
reference it lies). Every run is made, closed or not (the search stops at the first that does not).
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from stratopt import load_problem
from stratopt.solvers.lagrange.kept import KEPT_MAX_TERMS, kept_run, network_rows
from stratopt.solvers.lagrange.messages import Messages, message_bound
from stratopt.solvers.lagrange.model import PenaltyModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--message-seconds", type=float, default=20.0, help="the message bound's time (prices)")
    parser.add_argument("--fractions", default="1,0.95,0.9", help="fractions of the prices, one run each")
    parser.add_argument("--seconds", type=float, default=120.0, help="the most seconds per run")
    parser.add_argument("--reference", type=float, help="a cost to measure the bound against (the optimum known)")
    args = parser.parse_args()
    print(f"machine: {platform.node() or 'unknown'} {platform.machine()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}, file: {args.file}\n")
    problem = load_problem(args.file)
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    rows = network_rows(model, start, end, KEPT_MAX_TERMS)
    if rows is None:
        raise SystemExit("the usage rows do not fit (fractional usages, or more terms than KEPT_MAX_TERMS)")
    assert model.network is not None
    t0 = time.perf_counter()
    found = message_bound(model, start, end, args.message_seconds)
    prices = found.prices if found.prices is not None else np.zeros(len(model.room))

    def below(value: float) -> str:
        return "-" if not args.reference else f"{(args.reference - value) / args.reference:.1%}"

    print(f"{len(rows)} rows, {sum(len(t) for t, _ in rows)} terms; ", end="")
    print(f"message bound {found.bound:.6g} ({below(found.bound or 0.0)}) in {time.perf_counter() - t0:.1f} s\n")
    print("| fraction of the prices | seconds | closed | bound | below the reference |")
    print("|---|---|---|---|---|")
    messages = Messages(model.network)
    for fraction in (float(f) for f in args.fractions.split(",")):
        t = time.perf_counter()
        value, _, closed = kept_run(model, messages, prices * fraction, start, end, rows, args.seconds, 1)
        took = time.perf_counter() - t
        print(f"| {fraction:g} | {took:.1f} | {'yes' if closed else 'no'} | {value:.6g} | {below(value)} |", flush=True)


if __name__ == "__main__":
    main()
