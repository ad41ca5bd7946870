"""Third-party models through the importer: flops coverage, and LLM-sized graphs priced and solved.

Two Markdown tables, with the machine recorded above them:

1. Every small Hugging Face model of :data:`stratopt.importers.hf.SMALL` (built from a configuration,
   on the CPU): operators and edges, the forward GFLOP on the graph's priced products, PyTorch's own
   count on the same inputs (``torch.utils.flop_counter``, given formulas for CPU attention and grouped
   expert products), the share, the operators left unmapped (warnings), import seconds, and the
   seconds to price on 8 devices and solve (with the solver's status).
2. Full-size shapes on the meta device (:data:`stratopt.importers.hf.LARGE`) on 8 and 64 devices:
   import, pricing (with the distinct operators priced, and the pricing seconds operator by operator,
   without sharing repeated blocks, for comparison), solving (status and gap), and peak memory. Each
   case runs in its own process, so its peak memory is its own.

    python scripts/bench_models.py [--large llama-70b,gpt3-175b] [--procs 8,64] [--limit 60] [--no-unshared]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings


def machine() -> str:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    return (
        f"{platform.node()}: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}"
    )


def small_table(procs: int) -> None:
    from stratopt.cost import build
    from stratopt.importers import UnmappedOperatorWarning, flops, from_torch, hf
    from stratopt.importers.pytorch import reference_flops
    from stratopt.solvers import solve_auto

    print(
        f"| model | operators | edges | priced GFLOP | torch GFLOP | share | unmapped | import s | p={procs}: price + solve s | status |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, make in hf.SMALL.items():
        model, inputs = make()
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnmappedOperatorWarning)
            graph = from_torch(model, inputs, name=name)
        seconds = time.perf_counter() - start
        unmapped = "; ".join(str(w.message).split(": ", 2)[-1] for w in caught) or "none"
        ours, theirs = flops(graph), reference_flops(model, inputs)
        start = time.perf_counter()
        result = solve_auto(build(graph, procs).problem)
        solve = time.perf_counter() - start
        print(
            f"| {name} | {len(graph)} | {len(graph.edges())} | {ours / 1e9:.4f} | {theirs / 1e9:.4f} | "
            f"{100 * ours / theirs:.2f}% | {unmapped} | {seconds:.2f} | {solve:.2f} | {result.status.value} |"
        )


def child(name: str, procs: int, limit: float, unshared: bool) -> None:
    """One large case, in this process; prints one JSON line."""
    from stratopt.cost import build
    from stratopt.cost.default import DefaultProfile
    from stratopt.importers import flops, from_torch, hf
    from stratopt.machine import get_machine
    from stratopt.solvers import solve_auto

    start = time.perf_counter()
    model, inputs = hf.LARGE[name]()
    graph = from_torch(model, inputs, name=name)
    imported = time.perf_counter() - start
    costing = build(graph, procs)
    row = {
        "model": name,
        "procs": procs,
        "params_b": sum(p.numel() for p in model.parameters()) / 1e9,
        "operators": len(graph),
        "edges": len(graph.edges()),
        "pflop": flops(graph) / 1e15,
        "import_s": imported,
        "distinct": costing.stats["priced_operators"],
        "price_s": costing.build_time,
        "entries": costing.stats["edge_entries"],
    }
    if unshared:

        class EachOperator:  # the default profile behind an object that is not one: nothing shared
            def __init__(self) -> None:
                self.inner = DefaultProfile(get_machine("h100"))
                self.name, self.units, self.machine = self.inner.name, self.inner.units, self.inner.machine
                self.vertex, self.edge, self.describe = self.inner.vertex, self.inner.edge, self.inner.describe

        row["unshared_s"] = build(graph, procs, profile=EachOperator()).build_time
    start = time.perf_counter()
    result = solve_auto(costing.problem, time_limit=limit)
    row.update(
        solve_s=time.perf_counter() - start,
        solver=result.solver,
        status=result.status.value,
        gap=result.gap,
        objective=result.objective,
        peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    print(json.dumps(row))


def large_table(names: list[str], procs: list[int], limit: float, unshared: bool) -> None:
    print(
        "| model | params (B) | p | operators | PFLOP fwd | import s | distinct priced | price s | "
        "price s, each operator | solve s | status | gap | total s | peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for p in procs:
            cmd = [sys.executable, __file__, "--child", name, str(p), str(limit)] + (
                [] if unshared else ["--no-unshared"]
            )
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["?"])[-1]
                print(f"| {name} | | {p} | failed: {tail} |")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            total = r["import_s"] + r["price_s"] + r["solve_s"]
            gap = "0 (proven)" if r["status"] == "optimal" else f"{100 * r['gap']:.2f}%"
            each = f"{r['unshared_s']:.1f}" if "unshared_s" in r else "-"
            print(
                f"| {name} | {r['params_b']:.1f} | {p} | {r['operators']} | {r['pflop']:.2f} | {r['import_s']:.1f} | "
                f"{r['distinct']} | {r['price_s']:.1f} | {each} | {r['solve_s']:.1f} | {r['status']} ({r['solver']}) | "
                f"{gap} | {total:.1f} | {r['peak_mib']:.0f} |",
                flush=True,
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, procs, limit = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        child(name, procs, limit, "--no-unshared" not in sys.argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", default="llama-70b,gpt3-175b", help="comma-separated LARGE models ('' for none)")
    parser.add_argument("--procs", default="8,64", help="device counts for the large models")
    parser.add_argument("--small-procs", type=int, default=8, help="device count for the small models")
    parser.add_argument("--limit", type=float, default=60.0, help="solver time limit per large case (seconds)")
    parser.add_argument("--no-unshared", action="store_true", help="skip pricing each operator on its own")
    parser.add_argument("--no-small", action="store_true", help="skip the small models' table")
    args = parser.parse_args()
    print(f"machine: {machine()}\n")
    if not args.no_small:
        small_table(args.small_procs)
        print()
    names = [n for n in args.large.split(",") if n]
    if names:
        large_table(names, [int(p) for p in args.procs.split(",")], args.limit, not args.no_unshared)


if __name__ == "__main__":
    main()
