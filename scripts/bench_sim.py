"""The simulator's benchmarks (issue 7): full vs delta simulation, and three strategies simulated.

Part 1, full vs delta per one-operator change on growing task graphs: from the additive model's
optimum, a random walk of one-operator changes (random operator, random other configuration).
After each change, the delta simulation updates the task graph and its timeline; the full
simulation builds the new strategy's task graph and runs Algorithm 1. The build is timed twice:
from scratch ("cold", as Algorithm 1's BUILDTASKGRAPH does), and sharing the edges' transfer plans
with earlier builds ("warm", the full simulation's most favourable setting). Every delta timeline
is checked equal to the full one. Times are medians per change.

Part 2, the simulated iteration time of data parallelism, of the additive model's optimum (the DP)
and of MCMC started from the DP's strategy, for the zoo networks at p = 8 and 16, with each one's
additive cost, and the rank of the three strategies under each model.

    python scripts/bench_sim.py                                   # both parts
    python scripts/bench_sim.py --part delta --changes 50
    python scripts/bench_sim.py --part strategies --networks vgg19,resnet50 --budget 300
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time

from stratopt.cost import build
from stratopt.graph.zoo import ZOO
from stratopt.problem import evaluate
from stratopt.sim import DeltaSimulator, StrategyTasks, data_parallel, mcmc, simulate_tasks, start_strategy

DELTA_CASES = [("alexnet", 8), ("vgg19", 8), ("vgg19", 16), ("resnet50", 8), ("inception3", 8), ("transformer", 8),
               ("resnet50", 16), ("inception3", 16), ("transformer", 16), ("gpt", 16)]  # fmt: skip


def same(sim, graph, timeline):
    a = {sim.graph.rank[t]: (sim.start[t], sim.end[t]) for t in sim.graph.tasks()}
    b = {graph.rank[t]: (timeline.start[t], timeline.end[t]) for t in graph.tasks()}
    return a == b


def part_delta(cases, changes, seed):
    print("## Full vs delta simulation per one-operator change (median ms; profile default on h100)\n")
    print("| network | p | tasks | build cold | build warm | Alg. 1 | delta | replayed | speedup vs cold full | "
          "vs warm full | vs Alg. 1 alone | Alg. 1 tasks/s | equal |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, procs in cases:
        costing = build(ZOO[name].build(), procs, profile="default", machine="h100")
        rng = random.Random(seed)
        start = start_strategy(costing, "dp")
        sim = DeltaSimulator(costing, start)
        plans: dict = {}
        StrategyTasks(costing, start, plans=plans)
        ks = costing.problem.num_choices.tolist()
        movable = [v for v, k in enumerate(ks) if k > 1]
        cold_t, build_t, alg1_t, delta_t, replayed, equal = [], [], [], [], [], 0
        for _ in range(changes):
            v = rng.choice(movable)
            c = rng.randrange(ks[v] - 1)
            c += c >= sim.tasks.assignment[v]
            t0 = time.perf_counter()
            sim.change(v, c)
            delta_t.append(time.perf_counter() - t0)
            replayed.append(sim.last_stats["replayed"] / sim.last_stats["tasks"])
            t0 = time.perf_counter()
            StrategyTasks(costing, sim.assignment)
            cold_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            graph = StrategyTasks(costing, sim.assignment, plans=plans).graph
            t1 = time.perf_counter()
            timeline = simulate_tasks(graph)
            t2 = time.perf_counter()
            build_t.append(t1 - t0)
            alg1_t.append(t2 - t1)
            equal += same(sim, graph, timeline)
        cb, b, a, d = (statistics.median(x) * 1e3 for x in (cold_t, build_t, alg1_t, delta_t))
        cold = statistics.median(x + y for x, y in zip(cold_t, alg1_t, strict=True)) * 1e3
        warm = statistics.median(x + y for x, y in zip(build_t, alg1_t, strict=True)) * 1e3
        tasks = sim.graph.count
        print(
            f"| {name} | {procs} | {tasks} | {cb:.1f} | {b:.1f} | {a:.1f} | {d:.1f} | "
            f"{statistics.mean(replayed):.0%} | {cold / d:.1f}x | {warm / d:.1f}x | {a / d:.1f}x | "
            f"{tasks / (a / 1e3):,.0f} | {equal}/{changes} |",
            flush=True,
        )
    print()


def rank_of(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    for r, i in enumerate(order, 1):
        out[i] = r
    return out


def part_strategies(networks, procs_list, budget, seconds, seed):
    print("## Data parallel, the additive optimum (DP) and MCMC from it, simulated (profile default on h100)\n")
    print(
        f"MCMC: {budget} proposals or {seconds:g} s, seed {seed}; times in us; ranks 1 = fastest (additive / simulated)\n"
    )
    print("| network | p | DP-par additive | DP-par simulated | DP additive | DP simulated | MCMC additive | "
          "MCMC simulated | MCMC gain | ranks additive | ranks simulated | MCMC s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in networks:
        for procs in procs_list:
            costing = build(ZOO[name].build(), procs, profile="default", machine="h100")
            dpar = data_parallel(costing)
            t0 = time.perf_counter()
            opt = start_strategy(costing, "dp")
            solve_s = time.perf_counter() - t0
            r = mcmc(costing, opt, budget=budget, time_limit=seconds, seed=seed)
            strategies = [dpar, opt, list(r.best)]
            additive = [evaluate(costing.problem, s).objective for s in strategies]
            simulated = [simulate_tasks(StrategyTasks(costing, s).graph).makespan for s in strategies]
            assert simulated[1] == r.start_time and simulated[2] == r.best_time
            gain = 1 - r.best_time / r.start_time
            ra, rs = rank_of(additive), rank_of(simulated)
            print(
                f"| {name} | {procs} | {additive[0]:,.0f} | {simulated[0]:,.0f} | {additive[1]:,.0f} | "
                f"{simulated[1]:,.0f} | {additive[2]:,.0f} | {simulated[2]:,.0f} | {gain:.1%} | "
                f"{'/'.join(map(str, ra))} | {'/'.join(map(str, rs))} | {r.wall_time:.1f} (+{solve_s:.1f} DP) |",
                flush=True,
            )
    print()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("delta", "strategies", "both"), default="both")
    parser.add_argument("--changes", type=int, default=30, help="one-operator changes per graph (default 30)")
    parser.add_argument("--networks", default=",".join(ZOO), help="comma-separated zoo networks for part 2")
    parser.add_argument("--procs", default="8,16", help="device counts for part 2 (default 8,16)")
    parser.add_argument("--budget", type=int, default=500, help="MCMC proposals (default 500)")
    parser.add_argument("--seconds", type=float, default=30.0, help="MCMC time limit per search (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n"
    )
    if args.part in ("delta", "both"):
        part_delta(DELTA_CASES, args.changes, args.seed)
    if args.part in ("strategies", "both"):
        names = [n for n in args.networks.split(",") if n]
        unknown = [n for n in names if n not in ZOO]
        if unknown:
            sys.exit(f"unknown network(s) {', '.join(unknown)}; known: {', '.join(ZOO)}")
        part_strategies(names, [int(p) for p in args.procs.split(",")], args.budget, args.seconds, args.seed)


if __name__ == "__main__":
    main()
