"""Plots written to files (matplotlib's Agg back-end: no display needed)."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["cost_vs_procs"]


def cost_vs_procs(
    series: dict[str, Sequence[tuple[int, float]]], path: str | os.PathLike[str], *, title: str, units: str
) -> None:
    """One line per network: the optimal strategy's cost against the device count (log-log),
    with the ideal linear-scaling line from each network's first point for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
