"""The tour ``stratopt demo`` gives: one network priced, solved three ways, explained and plotted."""

from __future__ import annotations

import time

from stratopt import plots, report
from stratopt.cost import build
from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.harness import compare
from stratopt.instances import load_instance
from stratopt.solvers import solve

__all__ = ["demo"]


def demo(network: str = "vgg19", procs: int = 8, plot: str | None = "stratopt-demo.png") -> bool:
    """Price ``network`` on ``procs`` H100s (profile ``default``), solve it with the DP, CP-SAT
    and greedy, print the comparison and the optimal strategy per operator, and (unless ``plot``
    is None) plot the optimal cost against the device count. Returns whether the solvers agree."""
    graph = load_instance(network)
    if not isinstance(graph, Graph):
        raise ModelError(f"{network}: the demo needs a network (see 'stratopt models'), not a problem file")
    print(
        f"stratopt demo: {graph.name}, {len(graph.operators)} operators, split over p = {procs} "
        "devices of a DGX H100 (profile 'default': microseconds per training step)"
    )
    start = time.perf_counter()
    costing = build(graph, procs)
    s = costing.stats
    print(
        f"priced {s['choices_total']} configurations ({s['choices_min']}-{s['choices_max']} per operator) "
        f"in {time.perf_counter() - start:.2f} s; solving with the DP, CP-SAT and greedy ..."
    )
    comparison = compare(costing.problem, ["dp", "cpsat", "greedy"], raise_on_mismatch=False)
    report.print_comparison(comparison)
    best = next(r for r in comparison.results if r.solver == "dp")
    if best.assignment is not None:
        report.print_explain(costing.explain(best.assignment), costing.units)
    if plot is not None:
        optima = [(p, solve(build(graph, p).problem, "dp").objective) for p in (1, 2, 4, 8, 16, 32, 64)]
        points = [(p, float(c)) for p, c in optima if c is not None]
        title = f"{graph.name}: optimal strategy cost vs devices (H100)"
        plots.cost_vs_procs({graph.name: points}, plot, title=title, units="us")
        print("optimal cost per step: " + ", ".join(f"p={p}: {c:.4g} us" for p, c in points))
        print(f"wrote {plot} (cost against p, log-log, with the linear-scaling line)")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return comparison.agree
