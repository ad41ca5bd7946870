"""Benchmark the exact DP: vertices, K max, width, largest table, seconds, peak memory, objective.

Rows: the IOPDDL contest instances (solved, or refused with the reason) and synthetic graphs
of known treewidth at growing sizes: chains, ladders (treewidth 2, fully reduced by the exact
pre-pass) and random partial k-trees (real tables over k dependent vertices). Each row runs in
its own process so that peak memory (the child's max RSS) is its own. Then the model-zoo
networks under the PaSE profile at p = 4 ... 64 (their optima are PaSE-comparable; "price s" is
the time to enumerate configurations and build the cost tables, "dp seconds" the solve).

    python scripts/bench_dp.py [--quick] [--zoo-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

IOPDDL = Path(__file__).resolve().parents[2] / "shared" / "iopddl"

CHILD = r"""
import json, sys, time
import numpy as np
from stratopt import StrategyProblem, read_iopddl, solve, UnsupportedProblemError

def synthetic(kind, n, k, seed):
    rng = np.random.default_rng(seed)
    if kind == "chain":
        edges = [(v, v + 1) for v in range(n - 1)]
    elif kind == "ladder":
        half = n // 2
        edges = [(v, v + 1) for v in range(half - 1)] + [(half + v, half + v + 1) for v in range(half - 1)]
        edges += [(v, half + v) for v in range(half)]
    else:  # random partial k-tree: each new vertex joins a random clique of size `width`
        width = int(kind.split("-")[0])
        cliques = [tuple(range(width))]
        edges = [(a, b) for a in range(width) for b in range(a + 1, width)]
        for v in range(width, n):
            base = cliques[rng.integers(len(cliques))]
            edges += [(u, v) for u in base]
            for drop in range(width):
                cliques.append(tuple(sorted(base[:drop] + base[drop + 1 :] + (v,))))
    node = rng.integers(0, 1000, (n, k)).tolist()
    return StrategyProblem(node, edges, [rng.integers(0, 1000, (k, k)) for _ in edges], name=f"{kind} n={n} K={k}")

spec = json.loads(sys.argv[1])
price = None
if "model" in spec:
    from stratopt.cost import build
    from stratopt.instances import load_instance
    t0 = time.perf_counter()
    p = build(load_instance(spec["model"]), spec["procs"], profile="pase").problem
    price = time.perf_counter() - t0
elif "file" in spec:
    p = read_iopddl(spec["file"])
else:
    p = synthetic(spec["kind"], spec["n"], spec["k"], 0)
row = {"vertices": p.num_vertices, "kmax": int(p.num_choices.max()), "price": price}
try:
    r = solve(p, "dp")
    row.update(status=r.status.value, objective=r.objective if r.objective is not None else r.bound,
               seconds=r.wall_time, width=r.stats["width"], largest=r.stats["largest_table"],
               core=r.stats["core_vertices"], ordering=r.stats["ordering"])
except UnsupportedProblemError as exc:
    row.update(status="refused", reason=str(exc).split(": ", 2)[-1][:90])
print(json.dumps(row))
"""


def run(spec: dict) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, status, usage = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read(), proc.stderr.read()
    if status != 0:
        return {"status": "crashed", "reason": " ".join(err.split())[-120:]}
    row = json.loads(out)
    row["peak_mib"] = usage.ru_maxrss / 1024
    row["process_seconds"] = time.perf_counter() - start
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller synthetic sizes only")
    parser.add_argument("--zoo-only", action="store_true", help="only the model-zoo networks")
    args = parser.parse_args()
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}\n")
    print(
        "| instance | vertices | K max | core after pre-pass | width | largest core table | ordering | price s | dp seconds | peak MiB | result |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    specs: list[tuple[str, dict]] = []
    for letter in "BGVASP":
        path = IOPDDL / f"asplos-2025-iopddl-{letter}.json.gz"
        if path.exists():
            specs.append((f"IOPDDL {letter}", {"file": str(path)}))
    sizes = [200, 2000] if args.quick else [200, 2000, 20000]
    for n in sizes:
        specs.append((f"chain n={n} K=16", {"kind": "chain", "n": n, "k": 16}))
        specs.append((f"ladder n={n} K=16", {"kind": "ladder", "n": n, "k": 16}))
    for width, k, n in [(3, 8, 200), (3, 16, 200), (4, 8, 200), (3, 8, 2000), (4, 16, 200)][
        : 3 if args.quick else None
    ]:
        specs.append((f"partial {width}-tree n={n} K={k}", {"kind": f"{width}-tree", "n": n, "k": k}))
    if args.zoo_only:
        specs = []
    for model in ("alexnet", "rnnlm", "inception3", "resnet101", "transformer", "gpt", "resnet50", "vgg19"):
        for procs in (4, 8, 16, 32, 64):
            specs.append((f"{model} p={procs} (pase)", {"model": model, "procs": procs}))
    for name, spec in specs:
        row = run(spec)
        if row["status"] in ("refused", "crashed"):
            print(
                f"| {name} | {row.get('vertices', '-')} | {row.get('kmax', '-')} | | | | | | | {row.get('peak_mib', 0):.0f} | {row['status']}: {row['reason']} |"
            )
            continue
        print(
            f"| {name} | {row['vertices']} | {row['kmax']} | {row['core']} | {row['width']} | {row['largest']:.3g} | "
            f"{row['ordering']} | {'-' if row['price'] is None else format(row['price'], '.2f')} | {row['seconds']:.3f} | "
            f"{row['peak_mib']:.0f} | {row['status']} {row['objective']:.13g} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
