"""Choices that split an operator the same way, solved as one.

The configuration space is extended twice over the splits: a product whose weights are replicated
also has the same split with its weight state sharded (FSDP), and where memory binds every operator
also has each split recomputing its outputs (:func:`stratopt.cost.build` with ``shard_weights`` and
``recompute``). Such twins differ in their node cost and memory only: an edge's re-layout depends on
the two splits alone, so their rows of every edge table are the same. For any node costs (a memory
price added), the cheaper twin is therefore at least as good wherever the other could be, and the
DP need only see one choice per split: :class:`Twins` builds that smaller problem once (its edge
tables the original's rows and columns of each split's first twin) and solves it for given node
costs, each split's cost the least of its twins', its answer mapped back to the cheapest twin. The
min-plus products the DP makes shrink with the cube of the choices: on Llama-2-70B's shape with
recomputation offered (up to 896 choices an operator, 448 splits) one solve took 3 s against 14 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from stratopt.problem import FORBIDDEN, StrategyProblem
from stratopt.solvers import solve

if TYPE_CHECKING:  # for the annotation only
    from stratopt.planning.pairs import Pairs

__all__ = ["Twins"]


class Twins:
    """``problem``'s choices grouped by their configuration row (``configs[v][c]``): the smaller
    problem with one choice per split, and the map back. ``forbid``: the pairs of splits allowed on
    some edges (:class:`~stratopt.planning.pairs.Pairs`, over the distinct configuration rows),
    the rest forbidden in the smaller problem (without a copy of the full tables)."""

    def __init__(self, problem: StrategyProblem, configs: Sequence[Any], forbid: Pairs | None = None) -> None:
        self.members: list[np.ndarray] = []  # per vertex: splits x twins, choice indices (-1: none)
        first = []
        for rows in configs:
            table = np.asarray(rows)
            _, lead, inverse = np.unique(table.reshape(len(table), -1), axis=0, return_index=True, return_inverse=True)
            inverse = np.asarray(inverse).reshape(-1)
            order = np.argsort(inverse, kind="stable")
            counts = np.bincount(inverse, minlength=len(lead))
            rank = np.arange(len(order)) - np.repeat(np.cumsum(counts) - counts, counts)
            grid = np.full((len(lead), int(counts.max())), -1, dtype=np.int64)
            grid[inverse[order], rank] = order
            self.members.append(grid)
            first.append(np.asarray(lead, dtype=np.int64))
        self.shrinks = any(len(f) < len(rows) for f, rows in zip(first, configs, strict=True))
        if not self.shrinks:
            self.reduced = problem if forbid is None else problem.forbid({e: forbid.full(e) for e in forbid.allowed})
            self.reduced.edge_floats()
            return
        edges = problem.edges.tolist()
        tables = [problem.edge_cost(e)[np.ix_(first[u], first[v])] for e, (u, v) in enumerate(edges)]
        for e, ok in ({} if forbid is None else forbid.allowed).items():  # rows in the same (numpy.unique) order
            tables[e] = np.where(ok, tables[e], float(FORBIDDEN))
        self.reduced = StrategyProblem([np.zeros(len(f)) for f in first], edges, tables, name=problem.name)
        self.reduced.edge_floats()  # the DP's float tables, made once: every solve reprices the nodes only

    def solve(self, node_costs: Sequence[np.ndarray], time_limit: float | None) -> tuple[tuple[int, ...], float] | None:
        """The DP's optimum (assignment of the full problem, value) for ``node_costs``, or None where
        the DP gives no proven optimum in ``time_limit``."""
        if not self.shrinks:
            picks = None
            costs: list[np.ndarray] = [np.asarray(c, dtype=np.float64) for c in node_costs]
        else:
            picks, costs = [], []
            for grid, cost in zip(self.members, node_costs, strict=True):
                cost = np.asarray(cost, dtype=np.float64)
                priced = np.where(grid >= 0, cost[np.maximum(grid, 0)], np.inf)
                best = grid[np.arange(len(grid)), np.argmin(priced, axis=1)]
                picks.append(best)
                costs.append(cost[best])
        result = solve(self.reduced.replace(node_costs=costs), "dp", time_limit=time_limit)
        if result.assignment is None or result.status.value != "optimal":
            return None
        reduced = [int(c) for c in result.assignment]
        chosen = tuple(reduced) if picks is None else tuple(int(p[c]) for p, c in zip(picks, reduced, strict=True))
        return chosen, float(result.objective or 0.0)
