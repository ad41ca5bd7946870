"""Whether the exact DP could solve a penalised run's network: the width of its elimination orders.

    python scripts/network_widths.py FILE [FILE ...]

Each bound run of `lagrange` minimises the reduced network (`stratopt.solvers.lagrange.model.Network`:
the problem after the reductions that hold whatever the slot prices) under penalties. Where that
network is a forest or of small width, the DP by vertex elimination (`stratopt.solvers.dp`) would
give each run's exact value. This prints, per file, the network's size, its 2-core (what is left
after leaves are folded in, as the DP's pre-pass does), and for each elimination order simulated on
the 2-core (`stratopt.solvers.orderings.plan`; min-fill only on cores of at most 1,500 vertices) the
width, the largest table and the summed table entries, against the DP's memory cap on this machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import networkx as nx
import numpy as np

from stratopt import load_problem
from stratopt.errors import StratoptError
from stratopt.solvers.dp import default_memory_cap
from stratopt.solvers.lagrange.model import PenaltyModel
from stratopt.solvers.orderings import plan

MIN_FILL_CORE = 1500  # min-fill's simulation is quadratic in the degrees: larger cores take minutes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    cap = default_memory_cap()
    print(
        f"machine: {platform.node() or 'unknown'} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M')}; the DP's memory cap here: {cap / 2**30:.1f} GiB (8-byte entries)\n"
    )
    print(
        "| file | network vertices | edges | components | 2-core | most choices | order | width | largest table | all tables | fits | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for file in args.files:
        t0 = time.perf_counter()
        try:
            problem = load_problem(file)
        except StratoptError as exc:
            print(f"network_widths: {exc}", file=sys.stderr)
            sys.exit(2)
        net = PenaltyModel.build(problem).network
        assert net is not None
        graph = nx.Graph()
        graph.add_nodes_from(range(len(net.k)))
        graph.add_edges_from(map(tuple, net.edges.tolist()))
        core = nx.k_core(graph, 2)
        adj = {v: set(core[v]) for v in core}
        k = [int(x) for x in net.k]
        orders = ["min-degree", "min-size"] + (["min-fill"] if len(adj) <= MIN_FILL_CORE else [])
        head = (
            f"| {Path(file).name} | {len(net.k)} | {len(net.edges)} | {nx.number_connected_components(graph)} | "
            f"{len(adj)} | {int(np.max(net.k)) if len(net.k) else 0}"
        )
        for ordering in orders:
            found = plan(adj, k, ordering) if adj else None
            width = found.width if found else 0
            largest = found.largest_table if found else 0
            total = found.total_entries if found else 0
            fits = "yes" if total * 8 <= cap else "no"
            print(
                f"{head} | {ordering} | {width} | {largest:.2e} | {total:.2e} | {fits} | {time.perf_counter() - t0:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
