"""What each exact reduction removes on the IOPDDL contest instances.

For every instance: vertices, edges and choices before; then, per reduction of
:mod:`stratopt.solvers.reductions`, how much it removed, and the sizes of the reduced model the
exact back-ends (CP-SAT, MIP, toulbar2) receive, with the presolve's seconds. Once with the usage
limit kept (the exact encodings) and once without it (``usage=False``: the penalised problems
of the Lagrangian search, where every follower merges). The machine is recorded above the table.

    python scripts/bench_reductions.py [--dir ../shared/iopddl] [--only A,S,P,V]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from stratopt.problem import read_iopddl
from stratopt.solvers.formulation import build
from stratopt.solvers.reductions import Reducer

COUNTS = [
    "parallel_edges_merged",
    "choices_unsupported",
    "vertices_fixed",
    "followers_merged",
    "choices_dominated",
    "separable_edges",
    "usage_rows_duplicate",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "iopddl"))
    parser.add_argument("--only", default="A,S,P,V,B,G", help="comma-separated instance letters")
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {platform.processor() or 'cpu'}\n")
    header = [
        "instance",
        "mode",
        "vertices",
        "edges",
        "choices",
        *COUNTS,
        "free vertices",
        "edges left",
        "choices left",
        "usage rows",
        "s",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for letter in args.only.split(","):
        problem = read_iopddl(Path(args.dir) / f"asplos-2025-iopddl-{letter}.json.gz")
        size = [problem.num_vertices, problem.num_edges, int(problem.num_choices.sum())]
        start = time.perf_counter()
        form = build(problem)
        took = time.perf_counter() - start
        left = [sum(1 for c in form.choices if len(c)), len(form.edges), form.num_x, form.stats.get("usage_rows", 0)]
        row = [letter, "usage rows", *size, *(form.stats.get(k, 0) for k in COUNTS), *left, f"{took:.1f}"]
        print("| " + " | ".join(map(str, row)) + " |", flush=True)
        start = time.perf_counter()
        red = Reducer(problem, usage=False)
        red.run(dominance=False)
        red.separate()
        took = time.perf_counter() - start
        free = red.free()
        choices = int(sum(int(red.allowed[v].sum()) for v in free))
        counts = [red.stats.get(k, 0) if k != "usage_rows_duplicate" else "-" for k in COUNTS]
        row = [letter, "penalised", *size, *counts, len(free), len(red.merged), choices, "-", f"{took:.1f}"]
        print("| " + " | ".join(map(str, row)) + " |", flush=True)


if __name__ == "__main__":
    main()
