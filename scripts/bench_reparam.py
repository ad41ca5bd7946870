"""What the message sweeps before each penalised run (`stratopt.solvers.lagrange.runs.reparametrised`)
do to one toulbar2 run at fixed weights: its proven Lagrangian bound and its penalised answer's
cost, by sweep count.

    python scripts/bench_reparam.py FILE [FILE ...] [--price-seconds S] [--seconds T] [--sweeps 0,10,20,100]

For each file, slot prices from a short message bound (S seconds: prices a search could reach),
then one penalised run of T toulbar2 seconds per sweep count, each from cold messages (0: the plain
penalised costs), and one "warm" run: 100 sweeps at 0.6 times the weights first, then the default
count at the weights (what a worker's messages look like after an earlier run). Prints the machine
and a Markdown table per file.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import stratopt.solvers.lagrange.runs as runs
from stratopt import load_problem
from stratopt.solvers.lagrange.messages import message_bound
from stratopt.solvers.lagrange.model import PenaltyModel

DEFAULT_SWEEPS = runs.REPARAM_SWEEPS  # the search's own count, for the warm row


def penalised_cost(model: PenaltyModel, weights: np.ndarray, values: np.ndarray, prices: np.ndarray) -> float:
    """The Lagrangian's value at ``prices`` of the network's assignment ``values`` (problem units)."""
    net = model.network
    assert net is not None
    node = net.penalised(model, weights)
    k, edges = net.k, net.edges
    total = node[net.node_off[:-1] + values].sum()
    total += net.edge[net.edge_off[:-1] + values[edges[:, 0]] * k[edges[:, 1]] + values[edges[:, 1]]].sum()
    scaled = total + net.shift + net.fixed_penalty(model, weights)
    return float(scaled / model.scale - prices @ model.room)


def run(model: PenaltyModel, weights: np.ndarray, prices: np.ndarray, seconds: int, sweeps: int) -> tuple:
    runs.REPARAM_SWEEPS = sweeps
    runs.REPARAM_SHARE = 1e9  # the sweep count alone decides here
    t0 = time.perf_counter()
    net = model.network
    assert net is not None
    penalised, constant = runs.reparametrised(net, net.penalised(model, weights), 1e9)
    swept = time.perf_counter() - t0
    values, dual, functions = runs.toulbar2(penalised, seconds, 1, trws=runs.TRWS_ACCURACY)
    bound = (dual - 0.5 * functions + constant + net.shift + net.fixed_penalty(model, weights)) / model.scale
    bound -= float(prices @ model.room)
    cost = None if values is None else penalised_cost(model, weights, values, prices)
    return bound, cost, swept, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--price-seconds", type=float, default=40.0)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--sweeps", default="0,10,20,100")
    args = parser.parse_args()
    counts = [int(x) for x in args.sweeps.split(",")]
    print(f"machine: {platform.node() or 'unknown'} {platform.machine()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}, toulbar2 {args.seconds} s per run\n")
    for file in args.files:
        problem = load_problem(file)
        model = PenaltyModel.build(problem)
        _, start, end = problem.time_slots
        priced = message_bound(model, start, end, args.price_seconds)
        prices = priced.prices if priced.prices is not None else np.zeros(len(model.room))
        weights = model.weights_of(prices, start, end)
        print(f"{file}: prices from {priced.status} ({args.price_seconds:.0f} s), its bound {priced.bound:.6g}\n")
        print("| sweeps | sweep s | toulbar2's bound | penalised answer | bound vs plain | answer vs plain |")
        print("|---|---|---|---|---|---|")
        plain: tuple = ()
        for label in [str(c) for c in counts] + ["warm"]:
            runs._WARM.clear()
            if label == "warm":
                runs.REPARAM_SWEEPS = 100
                runs.reparametrised(model.network, model.network.penalised(model, 0.6 * weights), 1e9)  # type: ignore[union-attr]
                bound, cost, swept, _ = run(model, weights, prices, args.seconds, DEFAULT_SWEEPS)
            else:
                bound, cost, swept, _ = run(model, weights, prices, args.seconds, int(label))
            if not plain:
                plain = (bound, cost)
            rel_b = f"{bound / plain[0] - 1:+.1%}"
            rel_c = "-" if cost is None or plain[1] is None else f"{cost / plain[1] - 1:+.1%}"
            shown = "-" if cost is None else f"{cost:.6g}"
            print(f"| {label} | {swept:.1f} | {bound:.6g} | {shown} | {rel_b} | {rel_c} |", flush=True)
        print()


if __name__ == "__main__":
    main()
