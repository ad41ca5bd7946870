"""Whether the message bound's price step gets faster on fewer columns: one instance alone, the
message bound's rounds as `message_bound` makes them (two sweeps, then the prices' programme by
HiGHS's warm primal simplex), and every N rounds the same programme without its dominated choices.

    python scripts/bench_price_step.py FILE ROUNDS [--every N] [--fix]

A network choice is dominated where another choice of its vertex costs no more (node cost after
the messages) and uses no more at each vertex merged into it (the usage does not change between
rounds, so the pairs that can dominate are found once); dropping dominated choices leaves the
programme's optimum as it is, which the table checks (both objectives). The restricted programme is
built and solved cold (dual simplex, then interior point with crossover): its rows keep only the
slots where a kept choice's vertex starts or ends. With --fix, the warm programme instead gets the
dominated choices' upper bounds set to 0 before each solve, and the table shows what that does to
the warm solves' seconds. Prints the machine, then a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time

import numpy as np

from stratopt import load_problem
from stratopt.solvers.lagrange.messages import SWEEPS, Messages, _PriceLp
from stratopt.solvers.lagrange.model import PenaltyModel
from stratopt.solvers.lagrange.relaxation import Relaxation


def dominating_pairs(model: PenaltyModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (a, b) of choices of one network vertex with a's usage at most b's at every vertex
    merged into it, and whether b's is at most a's too (equal usage)."""
    net = model.network
    assert net is not None
    k, off = net.k, net.node_off
    owner = np.repeat(np.arange(len(k)), k)
    pay = model.excess[net.pen_entry]
    of = owner[net.pen_row]
    order = np.lexsort((net.pen_row, of))
    cuts = np.searchsorted(of[order], np.arange(len(k) + 1))
    firsts, seconds, mutual = [], [], []
    for u in range(len(k)):
        if k[u] < 2:
            continue
        sel = order[cuts[u] : cuts[u + 1]]
        verts, column = np.unique(net.pen_vertex[sel], return_inverse=True)
        usage = np.zeros((int(k[u]), len(verts)))
        usage[net.pen_row[sel] - off[u], column] = pay[sel]
        le = (usage[:, None, :] <= usage[None, :, :]).all(-1)
        np.fill_diagonal(le, False)
        a, b = np.nonzero(le)
        firsts.append(a + off[u])
        seconds.append(b + off[u])
        mutual.append(le[b, a])
    if not firsts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=bool)
    return np.concatenate(firsts), np.concatenate(seconds), np.concatenate(mutual)


def dominated(cost: np.ndarray, a: np.ndarray, b: np.ndarray, mutual: np.ndarray) -> np.ndarray:
    """The choices another one dominates at these costs (of equals, all but the first), and the forbidden."""
    ca, cb = cost[a], cost[b]
    hit = (ca < cb) | ((ca == cb) & (~mutual | (a < b)))
    out = ~np.isfinite(cost)
    out[b[hit]] = True
    return out


def restricted(model: PenaltyModel, keep: np.ndarray) -> PenaltyModel:
    """The model whose network has only the ``keep`` choices (their penalties with them)."""
    net = model.network
    assert net is not None
    owner = np.repeat(np.arange(len(net.k)), net.k)
    k = np.bincount(owner[keep], minlength=len(net.k))
    index = np.cumsum(keep) - 1
    paid = keep[net.pen_row]
    sub = dataclasses.replace(
        net,
        k=k,
        node_off=np.concatenate([[0], np.cumsum(k)]),
        node=net.node[keep],
        pen_row=index[net.pen_row[paid]],
        pen_vertex=net.pen_vertex[paid],
        pen_entry=net.pen_entry[paid],
    )
    return dataclasses.replace(model, network=sub)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("rounds", type=int)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--fix", action="store_true", help="dominated choices' bounds set to 0 in the warm programme")
    args = parser.parse_args()
    print(f"machine: {platform.node() or 'unknown'} {platform.machine()}, Python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}, file: {args.file}, fix: {args.fix}\n")
    problem = load_problem(args.file)
    model = PenaltyModel.build(problem)
    net = model.network
    assert net is not None and len(net.edges)
    _, start, end = problem.time_slots
    t0 = time.perf_counter()
    a, b, mutual = dominating_pairs(model)
    print(f"{len(a)} pairs that can dominate, found in {time.perf_counter() - t0:.2f} s\n")
    print(
        "| round | warm s (this round) | warm s (rounds 2..) | objective | kept choices | restricted shape | dual simplex s | interior point s | its objective |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    messages = Messages(net)
    lam = np.zeros(len(model.room))
    relax: Relaxation | None = None
    lp: _PriceLp | None = None
    warm_total = 0.0
    for r in range(1, args.rounds + 1):
        penalty = net.penalised(model, model.weights_of(lam, start, end)) - net.node
        messages.reprice(net.node + penalty)
        for _ in range(SWEEPS):
            messages.sweep()
        moved, floor, _ = messages.parts()
        node = net.node + moved
        if relax is None:
            relax = Relaxation.build(model, start, end, node_costs=node, constant=floor)
            lp = _PriceLp(relax, "simplex")
        assert lp is not None
        drop = dominated(node, a, b, mutual)
        if args.fix and not lp.first:
            nx = len(node)
            upper = np.where(drop, 0.0, relax.col_upper[:nx])
            lp.h.changeColsBounds(nx, np.arange(nx, dtype=np.int32), relax.col_lower[:nx], upper)
        t1 = time.perf_counter()
        duals = lp.solve(node, (net.shift + floor) / model.scale, model.scale, 1e9)
        warm = time.perf_counter() - t1
        if duals is None:
            print(f"round {r}: HiGHS gave no duals")
            break
        warm_total += warm if r > 1 else 0.0
        objective = lp.h.getInfo().objective_function_value * relax.cost_unit + relax.offset
        lam = relax.slot_prices(duals, len(model.room))
        if r % args.every and r != args.rounds:
            continue
        cells = [f"{r}", f"{warm:.2f}", f"{warm_total:.1f}", f"{objective:.7g}"]
        if args.fix:
            print("| " + " | ".join(cells + ["-"] * 5) + " |", flush=True)
            continue
        small = Relaxation.build(restricted(model, ~drop), start, end, node_costs=node[~drop], constant=floor)
        took, value = [], None
        for solver in ("simplex", "ipm"):
            t1 = time.perf_counter()
            h = small.highs(solver)
            if solver == "ipm":
                h.setOptionValue("run_crossover", "on")
            h.run()
            took.append(time.perf_counter() - t1)
            value = h.getInfo().objective_function_value * small.cost_unit + small.offset
        shape = small.matrix.shape
        cells += [
            f"{int((~drop).sum())} of {len(node)}",
            f"{shape[0]} x {shape[1]}",
            f"{took[0]:.2f}",
            f"{took[1]:.2f}",
            f"{value:.7g}",
        ]
        print("| " + " | ".join(cells) + " |", flush=True)
    if lp is not None:
        lp.close()


if __name__ == "__main__":
    main()
