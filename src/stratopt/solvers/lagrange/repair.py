"""Repair and polish: an answer that breaks the usage limit brought within it (single-vertex moves at
the worst violation; the reduced network's moves there, a vertex with those merged into it; toulbar2
re-solving the region around the over-full slots), then descent that keeps the limit (by the
network's moves, then by single vertices), all on the true costs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.problem import FORBIDDEN
from stratopt.solvers.lagrange.groups import group_moves, polish_groups, repair_groups
from stratopt.solvers.lagrange.model import CostNetwork, PenaltyModel, segment_min
from stratopt.solvers.lagrange.toulbar import toulbar2
from stratopt.solvers.local_search import FORBIDDEN_COST, LocalEngine, ragged_arange

#: Runs whose peak usage is at most this many times the limit, over at most this many time slots, are
#: also repaired by re-solving the region around the over-full slots (on IOPDDL S, a run 1% over
#: the limit on 3 slots: a region of 1,214 vertices, solved in 5 s, +2.2% where single-vertex moves
#: cost +4.3%). Farther out the region is most of the problem and the next weights do better.
REGION_REPAIR_EXCESS = 1.05
REGION_REPAIR_SLOTS = 64

#: Runs whose peak usage is at most this many times the limit are also repaired by the reduced
#: network's moves (:func:`~stratopt.solvers.lagrange.groups.repair_groups`). On IOPDDL S such a
#: repair of a run 2.7-11% over the limit ended 0.6-7% below single-vertex repair (or where that
#: gave up); from runs 20% and more over it gave answers 40% or more above the best, which, made
#: best early, set the weights the exploiting runs re-run. (IOPDDL N ended at 1.024x the best
#: submitted cost with every run repaired this way, 0.995x with this threshold: one search each.)
GROUP_REPAIR_EXCESS = 1.15


def repair(engine: LocalEngine, a: np.ndarray, out_of_time: Callable[[], bool]) -> np.ndarray | None:
    """Bring an assignment within the usage limit, or None if no move frees usage where needed.

    At the time of the worst violation, each live vertex's choices that use less are ranked by
    cost increase (its neighbours as they are) per unit of usage freed; the best moves of
    distinct, non-adjacent vertices are taken until they free the excess there. A move only lowers
    usage, so it never breaks the limit elsewhere.
    """
    a = a.copy()
    limit = engine.problem.usage_limit
    profile = engine.profile(a)
    # Neighbours of x: inc_other over x's incidences, grouped by x (a CSR view of the incidences).
    by_x = np.argsort(engine.inc_x, kind="stable")
    first = np.searchsorted(engine.inc_x[by_x], np.arange(engine.n + 1))
    while profile.max() > limit:
        if out_of_time():
            return None
        t = int(np.argmax(profile))
        verts = np.flatnonzero((engine.start <= t) & (engine.end > t))
        cls = engine.build_class(verts)
        costs = engine.local_costs(cls, a)
        use = engine.usage[cls.slots]
        here = cls.seg_start + a[verts]
        freed = use[here][cls.slot_vertex] - use
        rise = costs - costs[here][cls.slot_vertex]
        ok = (freed > 0) & (costs < FORBIDDEN_COST)
        if not ok.any():
            return None
        candidates = np.flatnonzero(ok)
        ratio = rise[candidates] / freed[candidates]
        need = profile[t] - limit
        taken: set[int] = set()
        blocked: set[int] = set()
        for i in candidates[np.argsort(ratio, kind="stable")].tolist():
            v = int(verts[cls.slot_vertex[i]])
            if v in taken or v in blocked:
                continue
            c = i - int(cls.seg_start[cls.slot_vertex[i]])
            profile[engine.start[v] : engine.end[v]] -= freed[i]
            need -= freed[i]
            a[v] = c
            taken.add(v)
            blocked.update(engine.inc_other[by_x[first[v] : first[v + 1]]].tolist())
            if need <= 0:
                break
    return a


def resolve_region(
    model: PenaltyModel,
    engine: LocalEngine,
    a: np.ndarray,
    weights: np.ndarray,
    free: np.ndarray,
    seconds: float,
    seed: int,
    slots: np.ndarray | None = None,
    among: np.ndarray | None = None,
    no_worse: bool = False,
    max_terms: int | None = None,
    report: dict[str, int] | None = None,
) -> np.ndarray | None:
    """The vertices in ``free`` re-solved by toulbar2 under ``weights``, every other vertex kept:
    a large-neighbourhood move, which changes coupled vertices together where a single-vertex
    move would meet a forbidden pair. With ``slots`` (integer usages only), the usage at each of
    those time slots is kept within the limit by a knapsack row over the free vertices live
    there (:func:`_knapsack_rows`). With ``among`` (assignments, one per row), each free vertex
    only takes a value one of them gives it. With ``no_worse`` (``a`` meeting the rows), toulbar2
    looks only for answers that cost no more than ``a``. None when toulbar2 finds nothing in time
    (or nothing meets the rows), or when the rows hold more than ``max_terms`` terms (``report``,
    when given, gets their number as ``"terms"``)."""
    verts = np.flatnonzero(free)
    if verts.size == 0:
        return None
    outside = free[engine.inc_x] & ~free[engine.inc_other]
    cls = engine.build_class(verts, incidence_mask=outside)
    unary = engine.local_costs(cls, a)  # own cost plus edges to the kept vertices
    unary = np.where(unary >= FORBIDDEN, np.inf, unary + weights[verts][cls.slot_vertex] * model.excess[cls.slots])
    if among is not None:
        value = np.arange(len(cls.slots)) - cls.seg_start[cls.slot_vertex]
        given = (among[:, verts][:, cls.slot_vertex] == value).any(axis=0)
        unary = np.where(given, unary, np.inf)
    seg_off = np.append(cls.seg_start, len(cls.slots))
    low = segment_min(unary, seg_off)
    unary = (unary - np.repeat(np.where(np.isfinite(low), low, 0.0), cls.seg_len)) * model.scale
    local = np.full(model.n, -1, dtype=np.int64)
    local[verts] = np.arange(len(verts))
    inner = free[model.edges[:, 0]] & free[model.edges[:, 1]]
    sizes = np.diff(model.edge_off)[inner]
    rows, within = ragged_arange(sizes)
    table = model.edge[model.edge_off[:-1][inner][rows] + within]
    knapsacks = [] if slots is None else _knapsack_rows(engine, a, verts, cls, np.isfinite(unary), slots)
    terms = sum(len(row) for row, _ in knapsacks)
    if report is not None:
        report["terms"] = terms
    if max_terms is not None and terms > max_terms:
        return None
    region = CostNetwork(
        cls.seg_len, seg_off, unary, local[model.edges[inner]], np.append(0, np.cumsum(sizes)), table, 0.0
    )
    values, _, _ = toulbar2(region, seconds, seed, knapsacks, known=a[verts] if no_worse else None)
    if values is None:
        return None
    out = a.copy()
    out[verts] = values
    return out


def _knapsack_rows(
    engine: LocalEngine, a: np.ndarray, verts: np.ndarray, cls: Any, allowed: np.ndarray, slots: np.ndarray
) -> list[tuple[list[tuple[int, int, int]], int]]:
    """The knapsack rows that keep the usage at ``slots`` within the limit, the vertices ``verts``
    free (``cls`` their choices, ``allowed`` those toulbar2 may take), every other as in ``a``.
    Each free vertex counts its usage above its least allowed one, so a vertex whose allowed
    choices use alike drops out; a row goes only where the free vertices at their most could
    break the limit (between two answers that agree on most vertices, few slots)."""
    problem = engine.problem
    assert problem.usage_limit is not None
    limit = int(problem.usage_limit)
    seg_off = np.append(cls.seg_start, len(cls.slots))
    use = engine.usage[cls.slots].astype(np.int64)
    least = np.minimum.reduceat(np.where(allowed, use, np.iinfo(np.int64).max), seg_off[:-1])
    most = np.maximum.reduceat(np.where(allowed, use, np.iinfo(np.int64).min), seg_off[:-1])
    none = ~np.logical_or.reduceat(allowed, seg_off[:-1])  # no allowed choice: toulbar2 finds nothing
    least, most = np.where(none, 0, least), np.where(none, 0, most)
    current = engine.usage[engine.off[verts] + a[verts]].astype(np.int64)
    profile = engine.profile(a).astype(np.int64)
    slots_n = len(profile)

    def over_time(values: np.ndarray) -> np.ndarray:
        diff = np.zeros(slots_n + 1, dtype=np.int64)
        np.add.at(diff, engine.start[verts], values)
        np.add.at(diff, engine.end[verts], -values)
        return np.cumsum(diff[:-1])

    # The load with every free vertex at its least allowed usage, and how far they could raise it.
    floor = profile - over_time(current - least)
    reach = over_time(most - least)
    slots = slots[slots < slots_n]
    binding = slots[floor[slots] + reach[slots] > limit]
    extra = use - np.repeat(least, cls.seg_len)
    value = np.arange(len(cls.slots)) - cls.seg_start[cls.slot_vertex]
    take = allowed & (extra > 0)
    rows = []
    for t in binding.tolist():
        live = (engine.start[verts] <= t) & (engine.end[verts] > t)
        pick = take & live[cls.slot_vertex]
        terms = list(zip(cls.slot_vertex[pick].tolist(), value[pick].tolist(), extra[pick].tolist(), strict=True))
        rows.append((terms, limit - int(floor[t])))
    return rows


def repair_region(
    model: PenaltyModel,
    engine: LocalEngine,
    a: np.ndarray,
    left: Callable[[], float],
    seed: int,
    rounds: int = 4,
) -> np.ndarray | None:
    """Re-solve, on the true costs, the vertices live at the over-full time slots that use more
    than their least, with their neighbours, under a knapsack row at each of those slots; slots
    that the new choices overfill join the rows and the region is solved again (at most
    ``rounds`` times). None when the run is too far above the limit for this to pay (see
    :data:`REGION_REPAIR_EXCESS`), or nothing fits in time."""
    problem = engine.problem
    assert problem.usage_limit is not None
    limit = float(problem.usage_limit)
    least = model.least_usage
    watched: set[int] = set()
    b = a
    for _ in range(rounds):
        profile = engine.profile(b)
        over = np.flatnonzero(profile > limit)
        if over.size == 0:
            return b
        watched.update(over.tolist())
        if profile.max() > REGION_REPAIR_EXCESS * limit or len(watched) > REGION_REPAIR_SLOTS or left() < 3.0:
            return None
        slots = np.array(sorted(watched))
        live = np.zeros(engine.n, dtype=bool)
        for t in slots.tolist():
            live |= (engine.start <= t) & (engine.end > t)
        free = live & (engine.usage[engine.off[:-1] + b] > least)
        free[engine.inc_other[free[engine.inc_x]]] = True
        free &= engine.k > 1
        moved = resolve_region(model, engine, b, np.zeros(engine.n), free, min(8.0, left() - 2.0), seed, slots=slots)
        if moved is None:
            return None
        b = moved
    return b if engine.profile(b).max() <= limit else None


def polish(model: PenaltyModel, engine: LocalEngine, a: np.ndarray, left: Callable[[], float]) -> np.ndarray:
    """Best-response descent on the true costs, keeping the usage limit (never raises the cost):
    first by the reduced network's moves (a vertex with every vertex merged into it), then by
    single vertices."""

    def out_of_time() -> bool:
        return left() <= 0

    if model.network is not None and len(model.network.k):
        a = polish_groups(group_moves(model.network, engine), a, out_of_time)
    polished, _, _ = engine.descend(a, guard=True, deadline_check=out_of_time)
    return polished


def repairs(
    model: PenaltyModel, engine: LocalEngine, a: np.ndarray, left: Callable[[], float], seed: int
) -> list[np.ndarray]:
    """Feasible assignments made from one that breaks the limit (until ``left()`` seconds run
    out): single-vertex moves at the worst violation, the reduced network's moves there
    (:func:`~stratopt.solvers.lagrange.groups.repair_groups`; within
    :data:`GROUP_REPAIR_EXCESS` times the limit), and (close to the limit, integer
    usages) toulbar2 re-solving the region around the over-full slots under knapsack rows there (its
    seed drawn from ``seed``)."""

    def out_of_time() -> bool:
        return left() <= 0

    out = []
    single = repair(engine, a, out_of_time)
    if single is not None:
        out.append(single)
    limit = engine.problem.usage_limit
    near = limit is not None and engine.profile(a).max() <= GROUP_REPAIR_EXCESS * limit
    if near and model.network is not None and len(model.network.k):
        grouped = repair_groups(group_moves(model.network, engine), a, out_of_time)
        if grouped is not None:
            out.append(grouped)
    problem = engine.problem
    if problem.usage_flat is not None and problem.usage_flat.dtype.kind in "iu":
        region = repair_region(model, engine, a, left, int(np.random.default_rng(seed).integers(1, 2**31)))
        if region is not None:
            out.append(region)
    return out
