"""Seed 004's Tables 1-3 for our three job graphs and three device sets, plus what the paper lacks.

For each network x device set: the paper's columns (JCT, and the difference to Heuristic-G in JCT,
placement memory and placement time) for Heuristic-G, Submodular-G and Submodular-GI; then the
simulated makespan of every algorithm (also HEFT, ETF and CP-SAT), CP-SAT's proven bound, each
algorithm's gap to that bound, and the plain vs lazy submodular times (with a check that the two
return the same placement).

    python scripts/bench_placement.py                      # all nine instances, CP-SAT 30 s each
    python scripts/bench_placement.py --networks vgg19 --devices small --time-limit 5
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import tracemalloc

from stratopt.placement import place
from stratopt.placement.jobs import DEVICE_SETS, JOBS, job

PAPER = [("Heuristic-G", "heuristic"), ("Submodular-G", "submodular"), ("Submodular-GI", "submodular-improved")]
OTHERS = ["heft", "etf", "cpsat"]


def peak_kib(instance, algorithm):
    """Peak Python memory the algorithm allocates (tracemalloc), in KiB."""
    tracemalloc.start()
    place(instance, algorithm)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1024


def timed(instance, algorithm, repeat, time_limit=None):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = place(instance, algorithm, time_limit=time_limit)
        best = min(best, time.perf_counter() - start)
    return result, best


def pct(a, b):
    return f"{100 * (a - b) / b:+.1f}" if b else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", default=",".join(JOBS))
    ap.add_argument("--devices", default=",".join(DEVICE_SETS))
    ap.add_argument("--time-limit", type=float, default=30.0, help="CP-SAT seconds per instance")
    ap.add_argument("--repeat", type=int, default=3, help="timing runs per heuristic (the best is kept)")
    args = ap.parse_args()
    networks, device_sets = args.networks.split(","), args.devices.split(",")
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    rows = {}
    for devices in device_sets:
        for network in networks:
            inst = job(network, devices)
            row = {}
            for name in (
                "heuristic",
                "submodular",
                "submodular-lazy",
                "submodular-improved",
                "submodular-improved-lazy",
                "heft",
                "etf",
            ):
                row[name] = timed(inst, name, args.repeat)
            row["cpsat"] = timed(inst, "cpsat", 1, args.time_limit)
            for _, name in PAPER:
                row[name + ":mem"] = peak_kib(inst, name)
            assert row["submodular"][0].placement == row["submodular-lazy"][0].placement
            assert row["submodular-improved"][0].placement == row["submodular-improved-lazy"][0].placement
            rows[network, devices] = row
            cp = row["cpsat"][0]
            print(
                f"  {network}-{devices}: heuristic {row['heuristic'][0].makespan:g}, cpsat {cp.makespan:g} "
                f"({cp.status.value}, bound {cp.bound:g}) in {row['cpsat'][1]:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    for devices in device_sets:
        cpus, gpus = DEVICE_SETS[devices]
        print(
            f"\n### {devices}: {cpus} CPU cores + {gpus} GPUs (seed 004's Table {list(DEVICE_SETS).index(devices) + 1})\n"
        )
        head = "| algorithm |" + "".join(f" {n} JCT (us) | dJCT % | dmem % | drun % |" for n in networks)
        print(head)
        print("|---|" + "---|---|---|---|" * len(networks))
        for label, name in PAPER:
            cells = []
            for network in networks:
                row = rows[network, devices]
                h, t_h, m_h = row["heuristic"][0], row["heuristic"][1], row["heuristic:mem"]
                r, t_r, m_r = row[name][0], row[name][1], row[name + ":mem"]
                cells.append(f" {r.jct:.0f} | {pct(r.jct, h.jct)} | {pct(m_r, m_h)} | {pct(t_r, t_h)} |")
            print(f"| {label} |" + "".join(cells))
    print("\n### Simulated makespan (us), CP-SAT's proven bound, gap to the bound, placement times\n")
    print(
        "| instance | heuristic | sub-G | sub-GI | heft | etf | cpsat | status | bound | gaps % (heur / G / GI / heft / etf) "
        "| heuristic s | sub-G plain s | sub-G lazy s | sub-GI plain s | sub-GI lazy s | cpsat s |"
    )
    print("|---|" + "---|" * 15)
    for devices in device_sets:
        for network in networks:
            row = rows[network, devices]
            cp = row["cpsat"][0]
            names = ["heuristic", "submodular", "submodular-improved", "heft", "etf"]
            gaps = " / ".join(pct(row[n][0].makespan, cp.bound) for n in names)
            times = " | ".join(
                f"{row[n][1]:.4f}"
                for n in (
                    "heuristic",
                    "submodular",
                    "submodular-lazy",
                    "submodular-improved",
                    "submodular-improved-lazy",
                )
            )
            print(
                f"| {network}-{devices} | "
                + " | ".join(f"{row[n][0].makespan:g}" for n in names)
                + f" | {cp.makespan:g} | {cp.status.value} | {cp.bound:g} | {gaps} | {times} | {row['cpsat'][1]:.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
