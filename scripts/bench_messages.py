"""How the message bound (`stratopt.solvers.lagrange.messages.message_bound`) climbs on one
instance alone: the bound it proves after so many rounds and seconds, against a reference cost.

    python scripts/bench_messages.py FILE SECONDS [--reference COST] [--every N]

Prints the machine, then a Markdown table (round, seconds since the start, bound, how far below
the reference it lies) every N rounds and at the end.
"""

from __future__ import annotations

import argparse
import platform
import time

from stratopt import load_problem
from stratopt.solvers.lagrange.messages import message_bound
from stratopt.solvers.lagrange.model import PenaltyModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("seconds", type=float)
    parser.add_argument("--reference", type=float, help="a cost to measure the bound against (the best known)")
    parser.add_argument("--every", type=int, default=40, help="a row every this many rounds")
    args = parser.parse_args()
    print(f"machine: {platform.node() or 'unknown'} {platform.machine()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}, file: {args.file}\n")
    t0 = time.perf_counter()
    problem = load_problem(args.file)
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    print(f"model built in {time.perf_counter() - t0:.1f} s\n")
    print("| round | seconds | bound | below the reference |")
    print("|---|---|---|---|")

    def row(done: int, seconds: float, best: float) -> None:
        below = "-" if not args.reference else f"{(args.reference - best) / args.reference:.1%}"
        print(f"| {done} | {seconds:.1f} | {best:.4g} | {below} |", flush=True)

    last: list[tuple[int, float, float]] = []

    def progress(done: int, seconds: float, best: float) -> None:
        last[:] = [(done, seconds, best)]
        if done % args.every == 0:
            row(done, seconds, best)

    result = message_bound(model, start, end, args.seconds, progress=progress)
    if last and last[0][0] % args.every:
        row(*last[0])
    print(f"\n{result.status}; {result.columns} columns in the prices' programme")


if __name__ == "__main__":
    main()
