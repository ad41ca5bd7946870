"""The zoo networks under a memory limit that their unconstrained optimum breaks.

For each network (default profile, p = 8, h100 unless told otherwise): the DP's unconstrained
optimum and its memory per device; the least memory any strategy needs; a limit halfway between
the two (so the unconstrained optimum is infeasible and a feasible strategy exists); then each
exact formulation under that limit, and the DP, whose relaxed optimum is a proven lower bound.
Prints a Markdown table with the machine recorded above it. Memory is bytes per device summed
over all operators (the `default` profile's conservative "everything live at once" model).

    python scripts/bench_memory.py [--procs 8] [--machine h100] [--time-limit 60] [--only gpt,vgg19]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from stratopt import solve
from stratopt.cost import build
from stratopt.graph.zoo import ZOO

SOLVERS = ("mip-highs", "cpsat", "mip-cbc")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--machine", default="h100")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--only", default=",".join(ZOO))
    args = parser.parse_args()

    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}; p = {args.procs}, {args.machine}, limit {args.time_limit:g} s\n")
    cols = " | ".join(f"{s} (us, status, s)" for s in SOLVERS)
    print(f"| network | ops | least GB | free opt us | its GB | limit GB | {cols} | dp bound us | bound < opt |")
    print("|---" * (8 + len(SOLVERS)) + "|")
    for name in args.only.split(","):
        graph = ZOO[name].build()
        free = build(graph, args.procs, profile="default", machine=args.machine, memory_gb=1e9).problem
        relaxed = solve(free, "dp")
        if relaxed.assignment is None:
            print(f"| {name} | {free.num_vertices} | dp: {relaxed.status.value} |")
            continue
        used = sum(int(free.usage(v)[c]) for v, c in enumerate(relaxed.assignment))
        least = sum(int(free.usage(v).min()) for v in range(free.num_vertices))
        if used <= least:
            print(
                f"| {name} | {free.num_vertices} | {least / 1e9:.3f} | {relaxed.objective:.1f} | {used / 1e9:.3f} | (the optimum already uses the least memory) |"
            )
            continue
        limit_gb = int((least + used) / 2 / 1e6) / 1e3  # halfway, rounded down to a megabyte
        problem = build(graph, args.procs, profile="default", machine=args.machine, memory_gb=limit_gb).problem
        cells, best = [], None
        for solver in SOLVERS:
            r = solve(problem, solver, time_limit=args.time_limit)
            cells.append(
                f"{r.objective:.1f}, {r.status.value}, {r.wall_time:.1f}" if r.objective is not None else r.status.value
            )
            if r.objective is not None and (best is None or r.objective < best):
                best = r.objective
        dp = solve(problem, "dp")
        bound = dp.bound
        below = "-" if bound is None or best is None else ("yes" if bound < best else "NO")
        print(
            f"| {name} | {problem.num_vertices} | {least / 1e9:.3f} | {relaxed.objective:.1f} | {used / 1e9:.3f} "
            f"| {limit_gb:.3f} | {' | '.join(cells)} | {bound:.1f} | {below} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
