"""Plots written to files (matplotlib's Agg back-end: no display needed)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

__all__ = ["cost_vs_procs", "gaps", "pyplot", "time_vs_size"]


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
