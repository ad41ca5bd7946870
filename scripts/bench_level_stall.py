"""How the level method's bound fares with inexact runs, with and without its stall rule (Polyak's
step where the run's prices would come back, `stratopt.solvers.lagrange.bound.Level`), on small
random problems under a usage limit.

    python scripts/bench_level_stall.py [--problems N] [--steps N]

Each bound run is simulated by enumeration: its answer is the penalised problem's minimiser at the
prices, and it "proves" the Lagrangian value there less ``noise`` times its distance to the
optimum, less one (a toulbar2 run stopped before its optimum proves less than its answer costs).
Prints the machine, then a Markdown table: per noise and rule, the mean and median gap of the best
value proven to the optimum, and on how many problems the stall rule ended closer or further.
"""

from __future__ import annotations

import argparse
import itertools
import math
import platform
import time

import numpy as np

from stratopt import Status, StrategyProblem, solve
from stratopt.solvers.lagrange import Level, PenaltyModel
from stratopt.solvers.local_search import LocalEngine


def random_limited(rng: np.random.Generator, n: int = 7, k: int = 3) -> StrategyProblem:
    """A chain of ``n`` vertices with ``k`` choices, live intervals and a usage limit."""
    node = rng.integers(0, 30, size=(n, k)).tolist()
    edges = [(i, i + 1) for i in range(n - 1)]
    tables = [rng.integers(0, 20, size=k * k).tolist() for _ in edges]
    intervals = [[s, s + int(rng.integers(1, 4))] for s in rng.integers(0, 6, size=n).tolist()]
    usages = rng.integers(0, 10, size=(n, k)).tolist()
    return StrategyProblem(
        node, edges, tables, intervals=intervals, usages=usages, usage_limit=int(rng.integers(10, 25))
    )


def lagrangian(problem: StrategyProblem, model: PenaltyModel, prices: np.ndarray) -> tuple[np.ndarray, float]:
    """The penalised problem's minimiser at ``prices`` and the Lagrangian value there, by enumeration."""
    _, start, end = problem.time_slots
    weights = model.weights_of(prices, start, end)
    node = model.penalised(weights)
    k = model.k
    best, arg = math.inf, np.zeros(problem.num_vertices, dtype=np.int64)
    for choice in itertools.product(*(range(int(c)) for c in k)):
        a = np.asarray(choice)
        total = (
            node[model.node_off[:-1] + a].sum()
            + model.edge[model.edge_off[:-1] + a[model.edges[:, 0]] * k[model.edges[:, 1]] + a[model.edges[:, 1]]].sum()
        )
        if total < best:
            best, arg = float(total), a
    return arg, model.dual_value(weights, best, prices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=48, help="random problems drawn (some are skipped)")
    parser.add_argument("--steps", type=int, default=20, help="bound runs per search")
    args = parser.parse_args()
    print(f"machine: {platform.node() or 'unknown'} {platform.machine()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}\n")
    rules = {"stall rule": Level._on_level, "without": lambda *_: False}
    gaps: dict[tuple[float, str], list[float]] = {}
    rng = np.random.default_rng(0)
    for _ in range(args.problems):
        problem = random_limited(rng)
        exact = solve(problem, "brute")
        model, engine = PenaltyModel.build(problem), LocalEngine(problem)
        if exact.status is not Status.OPTIMAL or not model.relevant.any():
            continue
        optimum = float(exact.objective)
        for noise in (0.2, 0.5):
            for name, stall in rules.items():
                Level._on_level = stall  # type: ignore[method-assign]
                level = Level(model, engine)
                level.cut(np.asarray(exact.assignment))
                best = -math.inf
                for _ in range(args.steps):
                    prices = level.next_prices()
                    a, value = lagrangian(problem, model, prices)
                    proved = value - noise * abs(optimum - value) - 1.0
                    best = max(best, proved)
                    level.learn(prices, a, proved, optimum)
                gaps.setdefault((noise, name), []).append((optimum - best) / max(1.0, abs(optimum)))
    Level._on_level = rules["stall rule"]  # type: ignore[method-assign]
    print("| noise | rule | problems | mean gap | median gap | stall rule closer | further |")
    print("|---|---|---|---|---|---|---|")
    for noise in (0.2, 0.5):
        with_rule, without = np.asarray(gaps[(noise, "stall rule")]), np.asarray(gaps[(noise, "without")])
        closer, further = int((with_rule < without - 1e-9).sum()), int((with_rule > without + 1e-9).sum())
        for name, values in (("stall rule", with_rule), ("without", without)):
            extra = f"{closer} | {further}" if name == "stall rule" else "- | -"
            print(f"| {noise} | {name} | {len(values)} | {values.mean():.2%} | {np.median(values):.2%} | {extra} |")


if __name__ == "__main__":
    main()
