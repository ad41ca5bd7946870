"""Elimination orders for the DP (:mod:`stratopt.solvers.dp`): each heuristic simulated on the graph
left after the exact pre-pass, with its width, its largest table and the bytes it would need, so
that the DP takes the cheapest and refuses, before allocating, an order whose tables do not fit."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from stratopt.errors import ModelError

__all__ = ["CHUNK_ENTRIES", "ORDERINGS", "Plan", "plan"]

#: Elimination orders we can simulate (see :func:`plan`).
ORDERINGS = ("seeds", "min-degree", "min-fill", "min-size")

CHUNK_ENTRIES = 1 << 20  # build joint tables in slices of at most this many entries


@dataclass(frozen=True)
class Plan:
    """An elimination order for the vertices left after the pre-pass, and what it will cost."""

    ordering: str
    order: tuple[int, ...]
    width: int  # largest dependent set
    largest_table: int  # entries of the largest table built (dependent set and the vertex)
    total_entries: int  # summed entries of all tables built
    bytes_estimate: int


def _table_bytes(entries_new: int, entries_joint: int) -> int:
    # One new float table, one back-pointer (<= 2 bytes) per entry, a joint slice in flight.
    return 8 * entries_new + 2 * entries_new + 8 * min(entries_joint, CHUNK_ENTRIES)


def plan(adj: dict[int, set[int]], k: list[int], ordering: str, *, cap_entries: int | None = None) -> Plan | None:
    """Simulate an elimination order on the graph ``adj``; None if it passes ``cap_entries``.

    ``seeds`` is the seeds' GetNextVertex (Alg. 6 of seed 000): fewest dependent vertices first,
    the dependent sets growing as vertices are eliminated, ties to the lowest index.
    ``min-degree`` breaks the same ties by table size; ``min-fill`` adds the fewest new edges;
    ``min-size`` makes the smallest table.
    """
    if ordering not in ORDERINGS:
        raise ModelError(f"unknown ordering {ordering!r}; choose from {', '.join(ORDERINGS)}")
    g = {v: set(nb) for v, nb in adj.items()}

    def size(v: int) -> int:
        return math.prod(k[w] for w in g[v])

    def fill(v: int) -> int:
        nb = list(g[v])
        return sum(1 for i, a in enumerate(nb) for b in nb[i + 1 :] if b not in g[a])

    score: Callable[[int], tuple[int, ...]]
    if ordering == "seeds":
        score = lambda v: (len(g[v]),)  # noqa: E731
    elif ordering == "min-degree":
        score = lambda v: (len(g[v]), size(v))  # noqa: E731
    elif ordering == "min-fill":
        score = lambda v: (fill(v), size(v))  # noqa: E731
    else:
        score = lambda v: (size(v) * k[v],)  # noqa: E731
    current = {v: score(v) for v in g}
    heap = [(s, v) for v, s in current.items()]
    heapq.heapify(heap)
    order: list[int] = []
    width = largest = total = peak = persistent = 0
    while heap:
        s, v = heapq.heappop(heap)
        if v not in g or current[v] != s:
            continue
        nbrs = g.pop(v)
        new = math.prod(k[w] for w in nbrs)
        joint = new * k[v]
        width = max(width, len(nbrs))
        largest = max(largest, joint)
        total += joint
        persistent += 2 * new  # back-pointers stay until the end
        peak = max(peak, persistent + _table_bytes(new, joint))
        if cap_entries is not None and (total > cap_entries or peak > 8 * cap_entries):
            return None
        order.append(v)
        touched = set(nbrs)
        if ordering == "min-fill":
            # A vertex's fill changes when its neighbourhood changes (the neighbours of v) or when
            # a new edge joins two of its neighbours (the common neighbours of each fill edge).
            listed = sorted(nbrs)
            for i, a in enumerate(listed):
                for b in listed[i + 1 :]:
                    if b not in g[a]:
                        touched |= g[a] & g[b]
        for a in nbrs:
            g[a].discard(v)
            g[a] |= nbrs - {a}
        for a in touched:
            if a in g:
                current[a] = score(a)
                heapq.heappush(heap, (current[a], a))
    return Plan(ordering, tuple(order), width, largest, total, peak)
