"""One cost function network solved by toulbar2 (float costs rounded, forbidden entries hard,
optional knapsack rows, TRW-S before the search)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from stratopt.solvers.lagrange.model import CostNetwork, finite_max_sum
from stratopt.solvers.wcsp import post_knapsack


def toulbar2(
    network: CostNetwork,
    seconds: float,
    seed: int,
    rows: Sequence[tuple[list[tuple[int, int, int]], int]] = (),
    trws: float | None = None,
    first: bool = False,
    known: np.ndarray | None = None,
    lds: int = 4,
) -> tuple[np.ndarray | None, float, int]:
    """One cost function network (float costs, ``inf`` forbidden, rounded here) solved by
    toulbar2, with optional knapsack rows ``(terms (variable, value, usage), capacity)``, after
    TRW-S message passing to accuracy ``trws`` when given (see :data:`TRWS_ACCURACY`):
    (values or None, its dual bound, the number of cost functions). ``first``: stop at the
    search's first backtrack (the answers of its first descent), within ``seconds`` still.
    ``known``: values (that meet the rows) whose cost is toulbar2's initial upper bound, so
    that it looks only for answers that cost no more (None when it finds none in time). ``lds``:
    the limited discrepancy search's first discrepancy limit (0: hybrid best-first search alone,
    which proves more where it can finish). The network's ``shift`` plays no part."""
    import pytoulbar2

    k, node_off, edges, edge_off = network.k, network.node_off, network.edges, network.edge_off
    node = np.round(network.node)
    edge = np.round(network.edge)
    # The hard cost: above every total of allowed entries, so no forbidden entry is ever preferred.
    top = int(finite_max_sum(node, node_off) + finite_max_sum(edge, edge_off)) + 1
    node_int = np.where(np.isfinite(node), node, top).astype(np.int64)
    edge_int = np.where(np.isfinite(edge), edge, top).astype(np.int64)
    upper = None
    if known is not None:  # its cost in the functions posted below, plus one: an answer may tie it
        u, v = edges[:, 0], edges[:, 1]
        entry = edge_off[:-1] + known[u] * k[v] + known[v]
        posted = node_int[node_off[:-1] + known][k > 1].sum() + edge_int[entry][k[u] * k[v] > 1].sum()
        upper = int(posted) + 1
    cfn = pytoulbar2.CFN(ubinit=upper, verbose=-1, seed=seed)
    saved = cfn.Option.lds, cfn.Option.hbfs, cfn.Option.trwsAccuracy, cfn.Option.backtrackLimit
    try:
        if trws is not None:
            cfn.Option.trwsAccuracy = trws
        if first:
            cfn.Option.backtrackLimit = 1
        return _post_and_solve(cfn, k, node_off, node_int, edges, edge_off, edge_int, seconds, rows, lds)
    except (cfn.Contradiction, cfn.SolverOut):
        # An empty domain or a knapsack nothing meets (Contradiction) proves nothing to stop for:
        # the caller treats it as no answer.
        return None, -math.inf, 0
    finally:
        # toulbar2's time limit is a process-wide alarm that outlives a run that ends early; left
        # armed, it would interrupt the next network built in this process. Its options are
        # process-wide too: LDS (and the HBFS it turns off) left set would cost a later exact run
        # (wcsp) its proof.
        cfn.CFN.timerStop()
        cfn.Option.lds, cfn.Option.hbfs, cfn.Option.trwsAccuracy, cfn.Option.backtrackLimit = saved


def _post_and_solve(
    cfn: Any,
    k: np.ndarray,
    node_off: np.ndarray,
    node_int: np.ndarray,
    edges: np.ndarray,
    edge_off: np.ndarray,
    edge_int: np.ndarray,
    seconds: float,
    rows: Sequence[tuple[list[tuple[int, int, int]], int]],
    lds: int,
) -> tuple[np.ndarray | None, float, int]:
    cfn.Option.lds = lds  # 4: limited discrepancy search first, good answers early (the contest winner's setting)
    wcsp = cfn.CFN.wcsp
    ks, off, eoff = k.tolist(), node_off.tolist(), edge_off.tolist()
    for v, kv in enumerate(ks):
        wcsp.makeEnumeratedVariable(f"x{v}", 0, kv - 1)
    for v, kv in enumerate(ks):
        if kv > 1:
            wcsp.postUnaryConstraint(v, node_int[off[v] : off[v + 1]].tolist(), False)
    functions = len(ks)
    for e, (u, v) in enumerate(edges.tolist()):
        if ks[u] * ks[v] > 1:
            wcsp.postBinaryConstraint(u, v, edge_int[eoff[e] : eoff[e + 1]].tolist(), False)
            functions += 1
    for terms, capacity in rows:
        post_knapsack(cfn, terms, capacity)
    wcsp.sortConstraints()
    found = cfn.Solve(timeLimit=max(1, int(seconds)))
    values = None if found is None else np.asarray(found[0], dtype=np.int64)
    return values, float(cfn.GetDDualBound()), functions
