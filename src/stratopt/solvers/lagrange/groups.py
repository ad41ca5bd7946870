"""Repair and polish by groups: a vertex of the reduced network moved together with every vertex
merged into it, to bring an answer within the usage limit (:func:`repair_groups`) or to lower its
cost within it (:func:`polish_groups`).

A vertex whose choice is tied to a neighbour's (a follower: the pair forbids every other
combination) cannot lower its usage alone, and at the over-full slots of IOPDDL S most of the
usage sits in such vertices: in runs 3-25% over the limit only a fifth of the vertices live at
the worst slot could move alone, freeing less than the excess, so single-vertex repair gave up.
The reduced network (:class:`~stratopt.solvers.lagrange.model.Network`) has already merged each
follower into its leader; a move there changes the leader and its followers at once, at a cost
the network's functions give exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from stratopt.solvers.lagrange.model import Network
from stratopt.solvers.local_search import LocalEngine, ragged_arange


class GroupMoves:
    """The network's moves in the original problem's terms, built once per network.

    Each network choice (flat index ``r``) sets a group of original vertices: ``pair_vertex`` and
    ``pair_entry`` (the flat choice index of that vertex) for pairs ``pair_off[r] .. pair_off[r + 1]``.
    Local costs in the network come from ``node`` plus, per incidence, an edge table entry at
    ``inc_base + other's value * inc_stride``.
    """

    def __init__(self, net: Network, engine: LocalEngine) -> None:
        self.net, self.engine = net, engine
        off = engine.off
        rows, verts, entries = [], [], []
        for i, (v, o) in enumerate(zip(net.free, net.open, strict=True)):
            base = int(net.node_off[i]) + np.arange(len(o))
            rows.append(base)
            verts.append(np.full(len(o), v))
            entries.append(off[v] + o)
            for m, g in net.reducer.members.get(v, []):
                rows.append(base)
                verts.append(np.full(len(o), m))
                entries.append(off[m] + g[o])
        row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        order = np.argsort(row, kind="stable")
        self.pair_vertex = np.concatenate(verts)[order] if rows else np.zeros(0, dtype=np.int64)
        self.pair_entry = np.concatenate(entries)[order] if rows else np.zeros(0, dtype=np.int64)
        self.pair_row = row[order]
        self.pair_off = np.searchsorted(self.pair_row, np.arange(len(net.node) + 1))
        self.row_var = np.repeat(np.arange(len(net.k)), net.k)
        # Each free vertex's original choices as network values (-1: removed by the reductions).
        self.free = np.asarray(net.free, dtype=np.int64)
        self.value_of = np.full(int(off[-1]), -1, dtype=np.int64)
        for v, o in zip(net.free, net.open, strict=True):
            self.value_of[off[v] + o] = np.arange(len(o))
        # Incidences: edge (u, v)'s table is k_u x k_v, row-major. u's choice j given v's value b
        # is at edge_off + j * k_v + b; v's choice j given u's value b at edge_off + b * k_v + j
        # (u: ``lead``, v: ``tail``).
        k, edges, eoff = net.k, net.edges.reshape(-1, 2), net.edge_off
        lead, tail = edges[:, 0], edges[:, 1]
        ru, ju = ragged_arange(k[lead])
        rv, jv = ragged_arange(k[tail])
        self.inc_row = np.concatenate([net.node_off[lead][ru] + ju, net.node_off[tail][rv] + jv])
        self.inc_base = np.concatenate([eoff[:-1][ru] + ju * k[tail][ru], eoff[:-1][rv] + jv])
        self.inc_other = np.concatenate([tail[ru], lead[rv]])
        self.inc_stride = np.concatenate([np.ones(len(ru), dtype=np.int64), k[tail][rv]])
        self.neighbours: list[set[int]] = [set() for _ in range(len(k))]
        for a, b in edges.tolist():
            self.neighbours[a].add(b)
            self.neighbours[b].add(a)

    def project(self, a: np.ndarray) -> np.ndarray | None:
        """The network's values of an assignment of the original problem (its free vertices'
        choices); None where one of them is a choice the reductions removed."""
        x = self.value_of[self.engine.off[self.free] + a[self.free]]
        return None if (x < 0).any() else x

    def local_costs(self, x: np.ndarray) -> np.ndarray:
        """Every network choice's cost with the other variables at ``x`` (``inf``: forbidden)."""
        net = self.net
        gathered = net.edge[self.inc_base + x[self.inc_other] * self.inc_stride]
        return net.node + np.bincount(self.inc_row, gathered, minlength=len(net.node))


_CACHE: list[GroupMoves] = []  # this process's moves for the network it last saw


def group_moves(net: Network, engine: LocalEngine) -> GroupMoves:
    """The moves of ``net`` over ``engine``'s problem, built once per process and network (a
    worker keeps those of its current search only)."""
    if not _CACHE or _CACHE[0].net is not net or _CACHE[0].engine is not engine:
        _CACHE[:] = [GroupMoves(net, engine)]
    return _CACHE[0]


def _breaking(moves: GroupMoves, rise: np.ndarray, asked: np.ndarray, profile: np.ndarray) -> np.ndarray:
    """Per network choice, whether one of its group's vertices (among the pairs ``asked``) would
    rise by ``rise`` above the room the limit leaves it anywhere in its interval."""
    engine = moves.engine
    limit = engine.problem.usage_limit
    start, end = engine.start[moves.pair_vertex], engine.end[moves.pair_vertex]
    up = (rise > 0) & asked
    room = np.full(len(rise), np.iinfo(np.int64).max)
    if up.any():
        room[up] = limit - engine.range_max(profile, start[up], end[up])
    return np.bincount(moves.pair_row, (rise > room).astype(np.float64), minlength=len(moves.net.node)) > 0


def repair_groups(
    moves: GroupMoves, a: np.ndarray, out_of_time: Callable[[], bool], max_rounds: int = 10_000
) -> np.ndarray | None:
    """``a`` (an assignment the network's values lift to) brought within the usage limit by
    network moves, or None when no move frees usage where needed.

    At the worst slot, each network choice that lowers the usage of its group's vertices live
    there, and raises no group vertex's usage beyond the limit anywhere in its interval, is ranked
    by cost increase per unit freed; the best moves of distinct, non-adjacent network vertices
    are taken until they free the excess there.
    """
    engine, net = moves.engine, moves.net
    limit = engine.problem.usage_limit
    x = moves.project(a)
    if x is None:
        return None
    a = a.copy()
    usage = engine.usage
    start, end = engine.start[moves.pair_vertex], engine.end[moves.pair_vertex]
    profile = engine.profile(a)
    for _ in range(max_rounds):
        if profile.max() <= limit:
            return a
        if out_of_time():
            return None
        t = int(np.argmax(profile))
        # Per network choice: the usage its group has at t, and the most any group vertex's
        # usage rises over the room it has in its interval.
        now = usage[engine.off[moves.pair_vertex] + a[moves.pair_vertex]]
        new = usage[moves.pair_entry]
        live = (start <= t) & (end > t)
        at_t = np.bincount(moves.pair_row, np.where(live, new, 0), minlength=len(net.node))
        current = at_t[net.node_off[:-1] + x][moves.row_var]
        freed = current - at_t
        breaks = _breaking(moves, new - now, np.ones(len(now), dtype=bool), profile)
        costs = moves.local_costs(x)
        here = costs[net.node_off[:-1] + x][moves.row_var]
        ok = (freed > 0) & np.isfinite(costs) & ~breaks
        if not ok.any():
            return None
        candidates = np.flatnonzero(ok)
        ratio = (costs[candidates] - here[candidates]) / freed[candidates]
        need = profile[t] - limit
        taken: set[int] = set()
        for r in candidates[np.argsort(ratio, kind="stable")].tolist():
            i = int(moves.row_var[r])
            if i in taken or taken & moves.neighbours[i]:
                continue
            lo, hi = moves.pair_off[r], moves.pair_off[r + 1]
            verts = moves.pair_vertex[lo:hi]
            for v, entry in zip(verts.tolist(), moves.pair_entry[lo:hi].tolist(), strict=True):
                delta = int(usage[entry]) - int(usage[engine.off[v] + a[v]])
                profile[engine.start[v] : engine.end[v]] += delta
                a[v] = entry - engine.off[v]
            x[i] = r - net.node_off[i]
            taken.add(i)
            need -= int(freed[r])
            if need <= 0:
                break
    return a if profile.max() <= limit else None


def polish_groups(
    moves: GroupMoves, a: np.ndarray, out_of_time: Callable[[], bool], max_rounds: int = 1000
) -> np.ndarray:
    """Best-response descent by network moves on the true costs, keeping the usage limit
    (``a`` must keep it). A move sets a network vertex's group to the choices the network implies,
    so it gains at least what the network's costs say (a merged vertex that strayed from its
    implied choice for the limit only costs more); the result is checked and ``a`` returned where
    it would cost more all the same."""
    engine, net = moves.engine, moves.net
    limit = engine.problem.usage_limit
    x = moves.project(a)
    if x is None:
        return a
    given, a = a, a.copy()
    usage = engine.usage
    profile = engine.profile(a)
    for _ in range(max_rounds):
        if out_of_time():
            break
        costs = moves.local_costs(x)
        here = costs[net.node_off[:-1] + x]
        gain = here[moves.row_var] - costs
        better = np.isfinite(costs) & (gain > 1e-9 * np.maximum(np.abs(here[moves.row_var]), 1.0))
        if not better.any():
            break
        now = usage[engine.off[moves.pair_vertex] + a[moves.pair_vertex]]
        better &= ~_breaking(moves, usage[moves.pair_entry] - now, better[moves.pair_row], profile)
        rows = np.flatnonzero(better)
        if rows.size == 0:
            break
        # The best row per network vertex, the vertices in order of gain.
        order = rows[np.lexsort((-gain[rows], moves.row_var[rows]))]
        first = np.r_[True, moves.row_var[order][1:] != moves.row_var[order][:-1]]
        best = order[first]
        best = best[np.argsort(-gain[best], kind="stable")]
        moved: set[int] = set()
        for r in best.tolist():
            i = int(moves.row_var[r])
            if moves.neighbours[i] & moved:
                continue
            lo, hi = moves.pair_off[r], moves.pair_off[r + 1]
            verts = moves.pair_vertex[lo:hi].tolist()
            before = [int(a[v]) for v in verts]
            raised = False
            for v, entry in zip(verts, moves.pair_entry[lo:hi].tolist(), strict=True):
                d = int(usage[entry]) - int(usage[engine.off[v] + a[v]])
                profile[engine.start[v] : engine.end[v]] += d
                a[v] = entry - engine.off[v]
                raised |= d > 0
            if raised and any(
                engine.end[v] > engine.start[v] and profile[engine.start[v] : engine.end[v]].max() > limit
                for v in verts
            ):  # the group's rises together break the limit: undo
                for v, c in zip(verts, before, strict=True):
                    profile[engine.start[v] : engine.end[v]] += int(usage[engine.off[v] + c]) - int(
                        usage[engine.off[v] + a[v]]
                    )
                    a[v] = c
                continue
            x[i] = r - net.node_off[i]
            moved.add(i)
        if not moved:
            break
    return a if engine.total_cost(a) <= engine.total_cost(given) else given
