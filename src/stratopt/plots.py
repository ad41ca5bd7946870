"""Plots written to files (matplotlib's Agg back-end: no display needed)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

__all__ = ["cost_vs_procs", "gaps", "machine_profile", "pyplot", "time_vs_size"]


def cost_vs_procs(
    series: Mapping[str, Sequence[tuple[int, float]]], path: str | os.PathLike[str], *, title: str, units: str
) -> None:
    """One line per network: the optimal strategy's cost against the device count (log-log),
    with the ideal linear-scaling line from each network's first point for reference."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    for name, points in series.items():
        procs = [p for p, _ in points]
        costs = [c for _, c in points]
        (line,) = ax.plot(procs, costs, marker="o", label=name)
        ax.plot(procs, [costs[0] * procs[0] / p for p in procs], linestyle=":", color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("devices p")
    ax.set_ylabel(f"optimal cost per step ({units})")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="dotted: linear scaling", fontsize="small")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pyplot():  # type: ignore[no-untyped-def]
    """matplotlib.pyplot on the Agg back-end (files only, no screen needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def time_vs_size(records: Sequence[dict], path: str | os.PathLike[str]) -> None:
    """Solve seconds against problem size (total choices over all vertices), one series per solver."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    for solver in dict.fromkeys(r["solver"] for r in records):
        pts = sorted((r["choices"], max(r["seconds"], 1e-4)) for r in records if r["solver"] == solver)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", linestyle="none", label=solver, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("problem size: configurations summed over operators")
    ax.set_ylabel("solve seconds (floor 1e-4)")
    ax.set_title("solve time vs problem size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def gaps(rows: Sequence[tuple[str, str, float]], path: str | os.PathLike[str]) -> None:
    """Each heuristic's relative gap to the proven optimum, one group of bars per (instance, p)."""
    plt = pyplot()
    cases = list(dict.fromkeys(c for c, _, _ in rows))
    solvers = list(dict.fromkeys(s for _, s, _ in rows))
    fig, ax = plt.subplots(figsize=(max(6.4, 0.45 * len(cases) + 2), 4.4), layout="constrained")
    width = 0.8 / max(1, len(solvers))
    for i, solver in enumerate(solvers):
        by_case = {c: g for c, s, g in rows if s == solver}
        xs = [j + i * width for j, c in enumerate(cases) if c in by_case]
        ax.bar(xs, [100 * by_case[c] for c in cases if c in by_case], width=width, label=solver)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))], cases, rotation=60, ha="right", fontsize="small")
    ax.set_ylabel("gap to the proven optimum (%)")
    ax.set_title(
        "gaps of answers without a proof (heuristics, time-limited exact runs)"
        if rows
        else "no unproven answers: every answer optimal"
    )
    ax.grid(True, axis="y", alpha=0.3)
    if solvers:
        ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine_profile(data: Mapping, path: str | os.PathLike[str]) -> None:
    """``stratopt profile --plot``: the matrix products' rate against their size with the fitted
    curve, the memory bandwidth, and each collective's bandwidth against the message size."""
    plt = pyplot()
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14.0, 4.2), layout="constrained")
    gemm = data["gemm"]
    flops = sorted(r["flops"] for r in gemm)
    left.plot([r["flops"] / 1e9 for r in gemm], [r["tflops"] for r in gemm], "o", label="measured")
    rate, half = data["fit"]["gemm_rate_tflops"], data["fit"]["gemm_half_gflop"] * 1e9
    left.plot([w / 1e9 for w in flops], [rate * w / (w + half) for w in flops], "-", label="fitted")
    left.axhline(data["attention"]["tflops"], linestyle=":", color="gray", label="fused attention")
    left.set_xscale("log")
    left.set_xlabel("GFLOP per product")
    left.set_ylabel("TFLOP/s")
    left.set_title("matrix products")
    left.legend(fontsize="small")
    band = data["bandwidth"]
    middle.plot([r["bytes"] / 1e6 for r in band], [r["gbps"] for r in band], "o-")
    middle.set_xscale("log")
    middle.set_xlabel("MB moved")
    middle.set_ylabel("GB/s")
    middle.set_title("memory bandwidth (elementwise add)")
    for kind in dict.fromkeys(r["kind"] for r in data["collectives"]):
        rows = [r for r in data["collectives"] if r["kind"] == kind]
        right.plot([r["bytes"] for r in rows], [r["gbps"] for r in rows], "o-", label=kind)
    right.set_xscale("log")
    right.set_xlabel("bytes per message")
    right.set_ylabel("GB/s (bytes / seconds)")
    right.set_title(f"collectives over {data['world']} ranks ({data['backend']})")
    if data["collectives"]:
        right.legend(fontsize="small")
    for ax in (left, middle, right):
        ax.grid(True, which="both", alpha=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)
