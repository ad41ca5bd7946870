"""The full comparison grid: networks x device counts x solvers, as JSON Lines, a table and plots.

Every task prices its network at p, solves it with one solver and recomputes the objective; the
proven optimum of each (network, p) is the exact solvers' agreed value, and each heuristic's
gap is measured against it. Writes OUT/results.jsonl, OUT/results.md, OUT/time_vs_size.png,
OUT/gaps.png and OUT/cost_vs_procs.png, and prints the table with the machine above it.

    python scripts/compare_solvers.py [--networks alexnet,vgg19] [--procs 4,8,16]
        [--solvers dp,mip-highs,cpsat,mip-cbc,greedy] [--time-limit 60] [--profile default]
        [--executor process|serial|ray] [--workers N] [--out sweep]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

from stratopt.graph.zoo import ZOO
from stratopt.harness.sweep import grid, run_sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default=",".join(ZOO))
    parser.add_argument("--procs", default="4,8,16")
    parser.add_argument("--solvers", default="dp,mip-highs,cpsat,mip-cbc,greedy")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per exact solve (greedy: none)")
    parser.add_argument("--profile", default="default", choices=("default", "pase"))
    parser.add_argument("--executor", default="process", choices=("process", "serial", "ray"))
    parser.add_argument("--workers", type=int, default=1, help="parallel tasks (1 keeps every timing clean)")
    parser.add_argument("--out", default="sweep")
    args = parser.parse_args()

    tasks = grid(
        args.networks.split(","),
        [int(p) for p in args.procs.split(",")],
        args.solvers.split(","),
        profile=args.profile,
        time_limit=args.time_limit,
    )
    # greedy spends any time limit it is given on window search; here it runs to its own end.
    tasks = [replace(t, time_limit=None) if t.solver == "greedy" else t for t in tasks]
    start = time.perf_counter()
    records = run_sweep(tasks, args.out, executor=args.executor, workers=args.workers)
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M')}; profile {args.profile}; {len(records)} tasks in "
        f"{time.perf_counter() - start:.0f} s; time limit {args.time_limit:g} s per solve\n"
    )
    print(Path(args.out, "results.md").read_text())


if __name__ == "__main__":
    main()
