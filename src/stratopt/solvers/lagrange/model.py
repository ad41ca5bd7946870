"""What every penalised run needs, built once: the scaled costs, each choice's usage above its
vertex's least (:class:`PenaltyModel`), and the reduced network toulbar2 gets (:class:`Network`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.problem import StrategyProblem, float_costs
from stratopt.solvers.reductions import Reducer

__all__ = ["Network", "PenaltyModel"]

#: The largest total any toulbar2 run sees (allowed costs plus penalties), well inside toulbar2's
#: 64-bit costs; costs are scaled by a power of two to reach it.
_TOTAL = 2.0**50


@dataclass
class CostNetwork:
    """A cost function network in flat arrays: ``k`` choices per variable, node costs ``node``
    (``node_off`` per variable), ``edges`` and their flattened tables ``edge`` (``edge_off``), each
    function shifted so that its least allowed entry is 0, ``shift`` the sum of what was taken off."""

    k: np.ndarray
    node_off: np.ndarray
    node: np.ndarray
    edges: np.ndarray
    edge_off: np.ndarray
    edge: np.ndarray
    shift: float


def network_costs(
    k: np.ndarray,
    node_off: np.ndarray,
    node: np.ndarray,
    edges: np.ndarray,
    edge_off: np.ndarray,
    edge: np.ndarray,
    constant: float = 0.0,
) -> dict[str, Any]:
    """A :class:`CostNetwork`'s fields: every function shifted so that its least allowed entry is 0,
    what was taken off (and ``constant``) summed in ``shift``."""
    node, node_taken = shift_to_zero(node, node_off)
    edge, edge_taken = shift_to_zero(edge, edge_off)
    shift = float(node_taken + edge_taken + constant)
    return {
        "k": k,
        "node_off": node_off,
        "node": node,
        "edges": edges,
        "edge_off": edge_off,
        "edge": edge,
        "shift": shift,
    }


def shift_to_zero(values: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, float]:
    """Each segment of ``values`` less its least entry (0 for an all-forbidden one, which toulbar2
    then proves nothing about), and the sum of what was taken off."""
    low = segment_min(values, off)
    low = np.where(np.isfinite(low), low, 0.0)
    return values - np.repeat(low, np.diff(off)), float(low.sum())


@dataclass
class PenaltyModel(CostNetwork):
    """What every toulbar2 run needs, built once (workers inherit it when they fork).

    ``node`` and ``edge`` are the problem's costs multiplied by ``scale`` (a power of two) and
    shifted so that each function's least allowed entry is 0 (``shift`` is the sum of what was
    taken off, in scaled units); forbidden entries are ``inf``. ``excess`` is each choice's usage
    above its vertex's least usage, zero for vertices that are never live or whose intervals
    cannot break the limit whatever they choose (``relevant`` is False for those).
    """

    n: int
    scale: float
    excess: np.ndarray
    relevant: np.ndarray
    least_usage: np.ndarray
    #: Per slot, the limit less the least usage of the vertices live there; per vertex, the slot
    #: of its interval with the least such room (the Lagrangian bound prices the vertex there).
    room: np.ndarray
    room_slot: np.ndarray
    weight_cap: float
    #: The network toulbar2 gets: the problem after the exact reductions that hold for every
    #: weight vector (see :class:`Network`).
    network: Network | None = None

    @classmethod
    def build(cls, problem: StrategyProblem) -> PenaltyModel:
        n = problem.num_vertices
        k = problem.num_choices
        off = problem.node_offsets
        eoff = problem.edge_offsets
        base = network_costs(
            k, off, float_costs(problem.node_flat), problem.edges, eoff, float_costs(problem.edge_flat)
        )
        node, edge = base["node"], base["edge"]
        worst = finite_max_sum(node, off) + finite_max_sum(edge, eoff)
        scale = 2.0 ** math.floor(math.log2(_TOTAL / 8 / worst)) if worst > 0 else 1.0
        excess = np.zeros(len(node))
        relevant = np.zeros(n, dtype=bool)
        least = np.zeros(n)
        room = np.zeros(1)
        room_slot = np.zeros(n, dtype=np.int64)
        if problem.usage_flat is not None and problem.usage_limit is not None:
            usage = problem.usage_flat.astype(np.float64)
            least = segment_min(usage, off)
            most = segment_max(usage, off)
            _, start, end = problem.time_slots
            live = end > start
            slots = len(problem.time_slots[0])
            limit = float(problem.usage_limit)
            room = limit - interval_sum(least * live, start, end, slots)
            ceiling = interval_sum(most * live, start, end, slots)
            # Only vertices live where the most usage could break the limit are ever penalised.
            peak = ceiling[range_argmin(-ceiling, start, end)]
            relevant = live & (most > least) & (peak > limit)
            excess = (usage - np.repeat(least, k)) * np.repeat(relevant, k)
            room_slot = range_argmin(room, start, end)
        biggest = float(segment_max(excess, off).sum()) if n else 0.0
        # Penalties stay below _TOTAL / 2 in all: weights above this cap change nothing toulbar2 can see.
        cap = (_TOTAL / 2) / (scale * biggest) if biggest > 0 else 0.0
        model = cls(
            n=n,
            **{**base, "node": node * scale, "edge": edge * scale, "shift": base["shift"] * scale},
            scale=scale,
            excess=excess,
            relevant=relevant,
            least_usage=least,
            room=room,
            room_slot=room_slot,
            weight_cap=cap,
        )
        model.network = Network.build(problem, model)
        return model

    def penalised(self, weights: np.ndarray) -> np.ndarray:
        """Scaled node costs with the penalties of ``weights`` (cost per unit of usage)."""
        return self.node + self.scale * np.repeat(weights, self.k) * self.excess

    def dual_value(self, weights: np.ndarray, penalised_bound: float, prices: np.ndarray | None = None) -> float:
        """A proven lower bound on the optimum under the limit, from a lower bound on the scaled,
        shifted penalised problem: the Lagrangian value at slot prices that cover ``weights``
        (``sum over the slots of v's interval >= w_v`` for every relevant ``v``). Without
        ``prices``: each relevant vertex's weight at its tightest slot, at each slot the largest
        such weight."""
        lam = prices
        if lam is None:
            lam = np.zeros(len(self.room))
            np.maximum.at(lam, self.room_slot[self.relevant], weights[self.relevant])
        return (penalised_bound + self.shift) / self.scale - float(lam @ self.room)

    def weights_of(self, prices: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Each relevant vertex's weight under slot prices: their sum over its interval (slots
        ``start .. end - 1``); the others get 0 (their excess is 0 in the penalised problem,
        which keeps the bound a bound)."""
        total = np.concatenate([[0.0], np.cumsum(prices)])
        return np.where(self.relevant, total[end] - total[start], 0.0)


@dataclass
class Network(CostNetwork):
    """The penalised problems after the exact reductions that hold whatever the weights
    (:class:`~stratopt.solvers.reductions.Reducer` with ``usage=False``: single-choice folding, arc
    consistency, follower merging, parallel and separable edges; IOPDDL A goes from 34,932
    vertices to 285, S from 28,526 to 6,509). A remaining choice implies a choice of every vertex
    merged into it, whose penalties it therefore pays: ``pen_row`` (flat index here),
    ``pen_vertex`` and ``pen_entry`` (the original vertex and its flat choice index) list them,
    and ``fixed_vertex`` / ``fixed_entry`` the penalties of the vertices the reductions fixed.

    Costs are scaled as the model's and shifted so each function's least allowed entry is 0:
    an assignment's scaled cost is the network's cost plus ``shift``.
    """

    pen_row: np.ndarray
    pen_vertex: np.ndarray
    pen_entry: np.ndarray
    fixed_vertex: np.ndarray
    fixed_entry: np.ndarray
    reducer: Reducer
    free: list[int]
    open: list[np.ndarray]
    stats: dict[str, int]

    @classmethod
    def build(cls, problem: StrategyProblem, model: PenaltyModel) -> Network:
        red = Reducer(problem, usage=False)
        red.run(dominance=False)
        if red.infeasible is None:
            red.separate()
        free = red.free() if red.infeasible is None else []
        position = {v: i for i, v in enumerate(free)}
        opened = [np.flatnonzero(red.allowed[v]) for v in free]
        k = np.array([len(o) for o in opened], dtype=np.int64)
        node_off = np.zeros(len(free) + 1, dtype=np.int64)
        np.cumsum(k, out=node_off[1:])
        scale = model.scale
        node = (
            np.concatenate([red.node[v][o] for v, o in zip(free, opened, strict=True)]) * scale if free else np.zeros(0)
        )
        pairs = sorted(red.merged.items()) if red.infeasible is None else []
        edges = np.array([[position[u], position[v]] for (u, v), _ in pairs], dtype=np.int64).reshape(-1, 2)
        tables = [mat[np.ix_(red.allowed[u], red.allowed[v])].ravel() * scale for (u, v), mat in pairs]
        edge_off = np.zeros(len(tables) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tables], out=edge_off[1:])
        edge = np.concatenate(tables) if tables else np.zeros(0)
        costs = network_costs(k, node_off, node, edges, edge_off, edge, red.constant * scale)
        # Who pays which penalty: each remaining choice for itself and for its members.
        off = model.node_off
        rows, verts, entries = [], [], []
        for i, (v, o) in enumerate(zip(free, opened, strict=True)):
            base = node_off[i] + np.arange(len(o))
            rows.append(base)
            verts.append(np.full(len(o), v))
            entries.append(off[v] + o)
            for m, g in red.members.get(v, []):
                rows.append(base)
                verts.append(np.full(len(o), m))
                entries.append(off[m] + g[o])
        pen_row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        pen_vertex = np.concatenate(verts) if verts else np.zeros(0, dtype=np.int64)
        pen_entry = np.concatenate(entries) if entries else np.zeros(0, dtype=np.int64)
        paying = model.excess[pen_entry] > 0
        fixed = np.array(sorted(red.fixed.items()), dtype=np.int64).reshape(-1, 2)
        stats = {key: int(val) for key, val in red.stats.items()}
        stats.update(network_vertices=len(free), network_edges=len(tables), network_choices=int(k.sum()))
        return cls(
            **costs,
            pen_row=pen_row[paying],
            pen_vertex=pen_vertex[paying],
            pen_entry=pen_entry[paying],
            fixed_vertex=fixed[:, 0],
            fixed_entry=off[fixed[:, 0]] + fixed[:, 1],
            reducer=red,
            free=free,
            open=opened,
            stats=stats,
        )

    def penalised(self, model: PenaltyModel, weights: np.ndarray) -> np.ndarray:
        """The network's node costs with the penalties of ``weights`` (scaled)."""
        pay = weights[self.pen_vertex] * model.excess[self.pen_entry]
        return self.node + model.scale * np.bincount(self.pen_row, weights=pay, minlength=len(self.node))

    def fixed_penalty(self, model: PenaltyModel, weights: np.ndarray) -> float:
        """The scaled penalties of the vertices the reductions fixed."""
        return model.scale * float(weights[self.fixed_vertex] @ model.excess[self.fixed_entry])

    def lift(self, values: np.ndarray) -> np.ndarray:
        """The original problem's assignment from the network's values."""
        picked = {v: int(o[x]) for v, o, x in zip(self.free, self.open, values.tolist(), strict=True)}
        return np.asarray(self.reducer.lift(picked), dtype=np.int64)


def segment_min(values: np.ndarray, off: np.ndarray) -> np.ndarray:
    out = np.full(len(off) - 1, np.inf)
    nonempty = np.diff(off) > 0
    out[nonempty] = np.minimum.reduceat(values, off[:-1][nonempty])
    return out


def segment_argmin(values: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Per nonempty segment ``values[off[i]:off[i + 1]]``, the index of its first least value (a
    stable sort's pick, at two reductions' cost rather than a sort's)."""
    nonempty = np.diff(off) > 0
    starts = off[:-1][nonempty]
    if starts.size == 0:
        return np.zeros(0, dtype=np.int64)
    least = np.minimum.reduceat(values, starts)
    sizes = np.diff(np.append(starts, len(values)))
    at = np.where(values[starts[0] :] == np.repeat(least, sizes), np.arange(starts[0], len(values)), len(values))
    return np.minimum.reduceat(at, starts - starts[0])


def segment_max(values: np.ndarray, off: np.ndarray) -> np.ndarray:
    out = np.full(len(off) - 1, -np.inf)
    nonempty = np.diff(off) > 0
    out[nonempty] = np.maximum.reduceat(values, off[:-1][nonempty])
    return out


def finite_max_sum(values: np.ndarray, off: np.ndarray) -> float:
    top = segment_max(np.where(np.isfinite(values), values, -np.inf), off)
    return float(top[np.isfinite(top)].sum())


def interval_sum(values: np.ndarray, start: np.ndarray, end: np.ndarray, slots: int) -> np.ndarray:
    diff = np.zeros(slots + 1)
    np.add.at(diff, start, values)
    np.add.at(diff, end, -values)
    return np.cumsum(diff[:-1])


def range_argmin(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per query, the index of the least value in ``values[lo:hi]`` (a sparse table; ``lo`` for
    empty ranges)."""
    out = lo.copy()
    length = hi - lo
    ask = np.flatnonzero(length > 0)
    if ask.size == 0:
        return out
    levels = [np.arange(len(values))]
    span = 1
    while span * 2 <= int(length[ask].max()):
        prev = levels[-1]
        a, b = prev[:-span], prev[span:]
        levels.append(np.where(values[b] < values[a], b, a))
        span *= 2
    level = np.floor(np.log2(length[ask])).astype(np.int64)
    for j in np.unique(level).tolist():
        sel = ask[level == j]
        a = levels[j][lo[sel]]
        b = levels[j][hi[sel] - (1 << j)]
        out[sel] = np.where(values[b] < values[a], b, a)
    return out
