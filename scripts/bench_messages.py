"""How the message bound (`stratopt.solvers.lagrange.messages.message_bound`) climbs on one
instance alone: the bound it proves after so many rounds and seconds, against a reference cost.

    python scripts/bench_messages.py FILE SECONDS [--reference COST] [--every N] [--price rows|lp]
                                     [--price-cap S]

Prints the machine, then a Markdown table (round, seconds since the start, bound, how far below
the reference it lies) every N rounds and at the end. --price picks the price step: rows (row
generation, the library's default) or lp (the whole programme, HiGHS warm from its last basis).
With --price-cap (lp only), every price solve after the first is given at most S seconds (at least
1, HiGHS's floor in the library), a variant the library does not use: a cut-short solve's duals
still give a valid bound, but the next round's warm solve starts from where that one stopped (the
closing line counts the solves cut short).
"""

from __future__ import annotations

import argparse
import platform
import time

from stratopt import load_problem
from stratopt.solvers.lagrange import messages
from stratopt.solvers.lagrange.messages import message_bound
from stratopt.solvers.lagrange.model import PenaltyModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("seconds", type=float)
    parser.add_argument("--reference", type=float, help="a cost to measure the bound against (the best known)")
    parser.add_argument("--every", type=int, default=40, help="a row every this many rounds")
    parser.add_argument("--price", choices=messages.PRICE_STEPS, default="rows", help="the price step")
    parser.add_argument("--price-cap", type=float, help="seconds for each price solve after the first (lp)")
    args = parser.parse_args()
    if args.price_cap is not None and args.price != "lp":
        parser.error("--price-cap applies to --price lp")
    print(f"machine: {platform.node() or 'unknown'} {platform.machine()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}, file: {args.file}, price step: {args.price}\n")
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

    cut = [0, 0]  # price solves after the first, and those HiGHS stopped at their time
    if args.price_cap is not None:
        solve = messages._PriceLp.solve

        def capped(lp, node, offset, scale, seconds):  # type: ignore[no-untyped-def]
            if lp.first:
                return solve(lp, node, offset, scale, seconds)
            duals = solve(lp, node, offset, scale, min(seconds, args.price_cap))
            cut[0] += 1
            cut[1] += "time limit" in lp.h.modelStatusToString(lp.h.getModelStatus()).lower()
            return duals

        messages._PriceLp.solve = capped  # type: ignore[method-assign]
    result = message_bound(model, start, end, args.seconds, progress=progress, price=args.price)
    if last and last[0][0] % args.every:
        row(*last[0])
    print(f"\n{result.status}; {result.columns} columns in the last prices' programme")
    if args.price_cap is not None:
        print(f"price solves after the first: {cut[0]}, {cut[1]} of them stopped at {args.price_cap:g} s")


if __name__ == "__main__":
    main()
