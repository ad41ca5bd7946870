"""Vectorised local-cost machinery shared by the heuristics.

For a vertex ``x`` with current neighbour choices, its *local cost* of choice ``c`` is its node
cost plus, over every incident edge, the edge cost with ``x`` at ``c`` and the neighbour at its
current choice. Every edge matrix is kept twice (row-major and transposed) in one array, so each
(edge, endpoint) incidence contributes a contiguous block to the endpoint's local-cost vector.
Vertices are split into colour classes (no edge inside a class), so best responses of a whole
class can be computed with one gather and one ``bincount`` and applied at once: that is exact
coordinate descent, never two neighbours moving together.

Forbidden entries are the finite number ``FORBIDDEN_COST`` (10 * FORBIDDEN) here, not +inf:
a sum that includes k forbidden entries is about k * FORBIDDEN_COST, so descent lowers the count of
forbidden entries first and the true cost second, and never compares inf with inf. Usage feasibility is kept with a sparse-table range maximum
over the compressed time axis, which gives every vertex's headroom in O(1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.problem import FORBIDDEN, StrategyProblem, float_costs, usage_profile

__all__ = ["LocalEngine"]


def ragged_arange(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row of each entry, position within its row) for rows of the given lengths."""
    total = int(lengths.sum())
    rows = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    within = np.arange(total, dtype=np.int64) - starts[rows]
    return rows, within


#: Working value of every forbidden entry: ten times the threshold, so one forbidden entry
#: outweighs any sum of allowed costs (each below FORBIDDEN) the descent compares it with.
FORBIDDEN_COST = float(10 * FORBIDDEN)


def greedy_colouring(n: int, edges: np.ndarray) -> np.ndarray:
    """First-fit colouring in vertex order; returns a colour per vertex."""
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges.tolist():
        adj[u].append(v)
        adj[v].append(u)
    colour = [-1] * n
    for v in range(n):
        used = {colour[w] for w in adj[v]}
        c = 0
        while c in used:
            c += 1
        colour[v] = c
    return np.asarray(colour, dtype=np.int64)


@dataclass
class _Class:
    verts: np.ndarray  # vertices of the class
    slots: np.ndarray  # global choice slots of those vertices, concatenated
    seg_start: np.ndarray  # local start of each vertex's segment within ``slots``
    seg_len: np.ndarray
    slot_vertex: np.ndarray  # local vertex index (into verts) of each local slot
    inc_base: np.ndarray  # per gathered entry: base offset into the edge array
    inc_other: np.ndarray  # per gathered entry: the neighbour whose choice selects the block
    inc_len: np.ndarray  # per gathered entry: block length (= K of the class vertex)
    inc_within: np.ndarray  # per gathered entry: position within the block
    inc_dest: np.ndarray  # per gathered entry: local slot it adds to


class LocalEngine:
    """Local costs, colour classes and the usage profile of one problem."""

    def __init__(self, problem: StrategyProblem) -> None:
        self.problem = problem
        n = problem.num_vertices
        k = problem.num_choices
        self.n = n
        self.k = k
        self.off = problem.node_offsets
        self.node = float_costs(problem.node_flat, FORBIDDEN_COST)
        self.slot_vertex = np.repeat(np.arange(n), k)

        edges = problem.edges
        m = len(edges)
        u, v = edges[:, 0], edges[:, 1]
        eoff = problem.edge_offsets
        sizes = np.diff(eoff)
        forward = float_costs(problem.edge_flat, FORBIDDEN_COST)
        # Transposed copy: entry (a, b) of edge e moves to eoff[e] + b * K_u + a.
        rows, within = ragged_arange(sizes)
        kv = k[v][rows]
        ku = k[u][rows]
        transposed = np.empty_like(forward)
        transposed[eoff[rows] + (within % kv) * ku + within // kv] = forward
        total = len(forward)
        self.edge = np.concatenate([forward, transposed])
        # Incidence (x, other, base): x's choice c given other's choice b costs edge[base + b*K_x + c].
        self.inc_x = np.concatenate([v, u])
        self.inc_other = np.concatenate([u, v])
        self.inc_base = np.concatenate([eoff[:m], eoff[:m] + total])

        colour = greedy_colouring(n, edges) if m else np.zeros(n, dtype=np.int64)
        self.classes = [self.build_class(np.flatnonzero(colour == c)) for c in range(int(colour.max()) + 1)]

        self.has_limit = problem.has_usage and problem.usage_limit is not None
        # Without usages every choice uses nothing and no vertex is live anywhere.
        self.usage: np.ndarray = np.zeros(len(self.node), dtype=np.int64)
        self.start: np.ndarray = np.zeros(n, dtype=np.int64)
        self.end: np.ndarray = np.zeros(n, dtype=np.int64)
        self.num_slots = 0
        if problem.usage_flat is not None:
            self.usage = problem.usage_flat
            _, self.start, self.end = problem.time_slots
            self.num_slots = len(problem.time_slots[0])

    def build_class(self, verts: np.ndarray, incidence_mask: np.ndarray | None = None) -> _Class:
        k, off = self.k, self.off
        seg_len = k[verts]
        seg_start = np.zeros(len(verts), dtype=np.int64)
        np.cumsum(seg_len[:-1], out=seg_start[1:])
        local_of = np.full(self.n, -1, dtype=np.int64)
        local_of[verts] = np.arange(len(verts))
        vrows, vwithin = ragged_arange(seg_len)
        slots = off[verts][vrows] + vwithin
        mask = local_of[self.inc_x] >= 0
        if incidence_mask is not None:
            mask &= incidence_mask
        x = self.inc_x[mask]
        lens = k[x]
        rows, within = ragged_arange(lens)
        return _Class(
            verts=verts,
            slots=slots,
            seg_start=seg_start,
            seg_len=seg_len,
            slot_vertex=vrows,
            inc_base=self.inc_base[mask][rows],
            inc_other=self.inc_other[mask][rows],
            inc_len=lens[rows],
            inc_within=within,
            inc_dest=seg_start[local_of[x]][rows] + within,
        )

    # -- costs ---------------------------------------------------------------------------------

    def local_costs(self, cls: _Class, a: np.ndarray) -> np.ndarray:
        """Local cost of every choice of every vertex in ``cls`` (concatenated segments)."""
        gathered = self.edge[cls.inc_base + a[cls.inc_other] * cls.inc_len + cls.inc_within]
        return self.node[cls.slots] + np.bincount(cls.inc_dest, gathered, minlength=len(cls.slots))

    def total_cost(self, a: np.ndarray) -> float:
        """Objective in float (at least 1e17 when a forbidden entry is used)."""
        edges = self.problem.edges
        fwd = self.edge[: len(self.edge) // 2]
        e = fwd[self.problem.edge_offsets[:-1] + a[edges[:, 0]] * self.k[edges[:, 1]] + a[edges[:, 1]]]
        return float(self.node[self.off[:-1] + a].sum() + e.sum())

    # -- usage ---------------------------------------------------------------------------------

    def profile(self, a: np.ndarray) -> np.ndarray:
        """Live usage per time slot (only for problems with usages)."""
        return usage_profile(self.problem, a)

    def range_max(self, profile: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """max(profile[lo:hi]) per query (a sparse table); empty ranges give -inf-like minimum."""
        length = hi - lo
        out = np.full(len(lo), np.iinfo(np.int64).min if profile.dtype.kind == "i" else -np.inf, dtype=profile.dtype)
        nonempty = length > 0
        if not nonempty.any():
            return out
        levels = [profile]
        span = 1
        while span * 2 <= int(length.max()):
            prev = levels[-1]
            levels.append(np.maximum(prev[:-span], prev[span:]))
            span *= 2
        ln = length[nonempty]
        j = np.floor(np.log2(ln)).astype(np.int64)
        lo_n, hi_n = lo[nonempty], hi[nonempty]
        res = np.empty(len(ln), dtype=profile.dtype)
        for level in np.unique(j):
            sel = j == level
            table = levels[level]
            res[sel] = np.maximum(table[lo_n[sel]], table[hi_n[sel] - (1 << int(level))])
        out[nonempty] = res
        return out

    # -- descent -------------------------------------------------------------------------------

    def vertex_penalty(self, slot_price: np.ndarray) -> np.ndarray:
        """Per vertex, the summed price of the time slots it is live in."""
        cum = np.concatenate([[0.0], np.cumsum(slot_price)])
        return cum[self.end] - cum[self.start]

    def min_usage_start(self) -> np.ndarray:
        """Per vertex, the choice of least usage (ties: least node cost, then lowest index).

        This reaches, at every time at once, the least live usage of any assignment: if it
        exceeds the limit, no assignment meets the limit.
        """
        a = np.empty(self.n, dtype=np.int64)
        # Lexicographic (usage, node cost, index) per ragged segment: sort slots once.
        order = np.lexsort((np.arange(len(self.node)), self.node, self.usage, self.slot_vertex))
        first = np.r_[0, np.flatnonzero(np.diff(self.slot_vertex[order])) + 1]
        a[:] = order[first] - self.off[:-1]
        return a

    def descend(
        self,
        a: np.ndarray,
        *,
        penalty: np.ndarray | None = None,
        guard: bool = True,
        deadline_check=None,
        max_sweeps: int = 1000,
    ) -> tuple[np.ndarray, int, int]:
        """Best-response descent by colour class until no vertex improves.

        With a usage limit and ``guard``, moves keep the assignment within the limit (the start
        must be within it). ``penalty`` (per vertex, cost per unit of usage) is added to local
        costs to steer moves.
        Returns (assignment, sweeps, moves).
        """
        a = a.copy()
        profile = self.profile(a) if self.has_limit and guard else None
        limit = self.problem.usage_limit
        sweeps = moves = 0
        for sweeps in range(1, max_sweeps + 1):
            moved = 0
            for cls in self.classes:
                if deadline_check is not None and deadline_check():
                    return a, sweeps, moves
                if len(cls.verts) == 0:
                    continue
                costs = self.local_costs(cls, a)
                verts = cls.verts
                cur_slot = cls.seg_start + a[verts]
                if penalty is not None:
                    costs = costs + penalty[verts][cls.slot_vertex] * self.usage[cls.slots]
                if profile is not None:
                    cur_use = self.usage[self.off[verts] + a[verts]]
                    head = limit - self.range_max(profile, self.start[verts], self.end[verts]) + cur_use
                    live = self.end[verts] > self.start[verts]
                    blocked = live[cls.slot_vertex] & (self.usage[cls.slots] > head[cls.slot_vertex])
                    costs = np.where(blocked, np.inf, costs)
                cur = costs[cur_slot]
                best = np.minimum.reduceat(costs, cls.seg_start)
                better = best < cur - 1e-12 * np.abs(np.where(np.isfinite(cur), cur, 0))
                better &= np.isfinite(best)
                if not better.any():
                    continue
                hit = np.flatnonzero(costs == np.repeat(best, cls.seg_len))
                seg = cls.slot_vertex[hit]
                first = hit[np.r_[True, seg[1:] != seg[:-1]]]
                choice = first - cls.seg_start[cls.slot_vertex[first]]
                idx = np.flatnonzero(better)
                new = choice[idx]
                vs = verts[idx]
                if profile is None:
                    a[vs] = new
                    moved += len(vs)
                    continue
                delta = self.usage[self.off[vs] + new] - self.usage[self.off[vs] + a[vs]]
                down = delta <= 0
                if down.any():
                    a[vs[down]] = new[down]
                    moved += int(down.sum())
                    profile = self.profile(a)
                for v, c, d in zip(vs[~down].tolist(), new[~down].tolist(), delta[~down].tolist(), strict=True):
                    s, e = self.start[v], self.end[v]
                    if s == e or profile[s:e].max() + d <= limit:
                        profile[s:e] += d
                        a[v] = c
                        moved += 1
            moves += moved
            if moved == 0:
                break
        return a, sweeps, moves


class InducedForest:
    """A vertex set whose induced subgraph is a forest, ready for exact min-sum DP.

    With every other vertex fixed, the best choices for the set follow exactly from messages
    passed leaf to root along the forest: a block-coordinate step that never raises the cost.
    """

    def __init__(self, engine: LocalEngine, order: np.ndarray) -> None:
        self.engine = engine
        n = engine.n
        edges = engine.problem.edges.tolist()
        adj: list[dict[int, list[int]]] = [{} for _ in range(n)]
        for e, (u, v) in enumerate(edges):
            adj[u].setdefault(v, []).append(e)
            adj[v].setdefault(u, []).append(e)
        parent_uf = list(range(n))

        def find(x: int) -> int:
            while parent_uf[x] != x:
                parent_uf[x] = parent_uf[parent_uf[x]]
                x = parent_uf[x]
            return x

        inside = np.zeros(n, dtype=bool)
        for v in order.tolist():
            roots = [find(w) for w in adj[v] if inside[w]]
            if len(roots) != len(set(roots)):
                continue  # two neighbours already connected: v would close a cycle
            inside[v] = True
            for r in roots:
                parent_uf[r] = v
            parent_uf[v] = v
        self.inside = inside
        verts = np.flatnonzero(inside)
        # Root each tree and list vertices so that children come before their parents.
        seen = np.zeros(n, dtype=bool)
        post: list[int] = []
        self.parent = {}
        self.parent_edges: dict[int, list[int]] = {}
        for r in verts.tolist():
            if seen[r]:
                continue
            seen[r] = True
            stack = [r]
            bfs = []
            while stack:
                x = stack.pop()
                bfs.append(x)
                for w, es in adj[x].items():
                    if inside[w] and not seen[w]:
                        seen[w] = True
                        self.parent[w] = x
                        self.parent_edges[w] = es
                        stack.append(w)
            post.extend(reversed(bfs))
        self.post = post
        # Unary part: incidences from a forest vertex to a vertex outside the forest.
        mask = inside[engine.inc_x] & ~inside[engine.inc_other]
        self.verts = verts
        self.cls = engine.build_class(verts, incidence_mask=mask)

    def step(self, a: np.ndarray, penalty: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """Best choices of the forest's vertices given the rest; returns (assignment, gain)."""
        eng = self.engine
        cls = self.cls
        unary = eng.local_costs(cls, a)
        if penalty is not None:
            unary = unary + penalty[cls.verts][cls.slot_vertex] * eng.usage[cls.slots]
        local = {
            int(v): unary[s : s + k] for v, s, k in zip(cls.verts.tolist(), cls.seg_start, cls.seg_len, strict=True)
        }
        belief = {v: u.copy() for v, u in local.items()}
        back: dict[int, np.ndarray] = {}
        current = 0.0
        for x in self.post:
            current += local[x][a[x]]
            p = self.parent.get(x)
            if p is None:
                continue
            mat = self._matrix(x, p)
            current += mat[a[x], a[p]]
            total = belief[x][:, None] + mat
            back[x] = np.argmin(total, axis=0)
            belief[p] = belief[p] + total[back[x], np.arange(total.shape[1])]
        new = a.copy()
        best = 0.0
        for x in reversed(self.post):
            p = self.parent.get(x)
            if p is None:
                new[x] = int(np.argmin(belief[x]))
                best += belief[x][new[x]]
            else:
                new[x] = back[x][new[p]]
        if not np.isfinite(best) or not best < current - 1e-12 * abs(current if np.isfinite(current) else 0):
            return a, 0.0
        return new, current - best

    def _matrix(self, x: int, p: int) -> np.ndarray:
        """Summed cost matrix K_x x K_p of all edges between x and its parent."""
        eng = self.engine
        mat = None
        for e in self.parent_edges[x]:
            u = int(eng.problem.edges[e, 0])
            lo, hi = eng.problem.edge_offsets[e], eng.problem.edge_offsets[e + 1]
            m = eng.edge[lo:hi].reshape(eng.k[u], -1)
            m = m if u == x else m.T
            mat = m if mat is None else mat + m
        assert mat is not None  # every non-root forest vertex has at least one edge to its parent
        return mat


class Domains:
    """Allowed choices per vertex under the forbidden entries, kept arc consistent.

    A choice of ``u`` survives only if every edge at ``u`` allows it with some surviving choice
    of the other end. Removing a choice this way never removes a feasible assignment; an empty
    domain proves that no assignment avoids the forbidden entries. Only edges with a forbidden
    entry can remove anything, so only those are propagated.
    """

    def __init__(self, problem: StrategyProblem) -> None:
        self.problem = problem
        self.off = problem.node_offsets
        self.alive = problem.node_flat < FORBIDDEN
        edges = problem.edges.tolist()
        self.edges = edges
        self.allowed: dict[int, np.ndarray] = {}
        self.incident: list[list[int]] = [[] for _ in range(problem.num_vertices)]
        eoff = problem.edge_offsets
        k = problem.num_choices
        has_forbidden: Any = np.add.reduceat(problem.edge_flat >= FORBIDDEN, eoff[:-1]) if len(edges) else []
        for e, (u, v) in enumerate(edges):
            if eoff[e + 1] > eoff[e] and has_forbidden[e]:
                self.allowed[e] = (problem.edge_flat[eoff[e] : eoff[e + 1]] < FORBIDDEN).reshape(k[u], k[v])
                self.incident[u].append(e)
                self.incident[v].append(e)

    def domain(self, v: int) -> np.ndarray:
        return self.alive[self.off[v] : self.off[v + 1]]

    def propagate(self, queue: list[int], trail: list[int] | None = None) -> bool:
        """Run AC-3 from the given edges; False on a domain wipe-out. Removed slots go to ``trail``."""
        pending = set(queue)
        queue = list(pending)
        while queue:
            e = queue.pop()
            pending.discard(e)
            u, v = self.edges[e]
            ok = self.allowed[e]
            for x, y, support in ((u, v, None), (v, u, None)):
                dx, dy = self.domain(x), self.domain(y)
                support = ok[:, dy].any(axis=1) if x == u else ok[dy, :].any(axis=0)
                lost = dx & ~support
                if lost.any():
                    idx = np.flatnonzero(lost)
                    if trail is not None:
                        trail.extend((self.off[x] + idx).tolist())
                    dx[idx] = False
                    if not dx.any():
                        return False
                    for f in self.incident[x]:
                        if f != e and f not in pending:
                            pending.add(f)
                            queue.append(f)
        return True

    def undo(self, trail: list[int]) -> None:
        self.alive[trail] = True

    def construct(self, engine: LocalEngine, order: np.ndarray, tries: int = 4) -> np.ndarray:
        """Assign vertices in ``order``, each its cheapest choice given the assigned neighbours
        among those that keep every domain non-empty (forward checking with AC-3)."""
        problem = self.problem
        k = problem.num_choices
        eoff = problem.edge_offsets
        adj: list[list[tuple[int, int, bool]]] = [[] for _ in range(problem.num_vertices)]
        for e, (u, v) in enumerate(self.edges):
            adj[u].append((e, v, True))
            adj[v].append((e, u, False))
        fwd = engine.edge[: len(engine.edge) // 2]
        a = np.full(problem.num_vertices, -1, dtype=np.int64)
        for v in order.tolist():
            score = engine.node[self.off[v] : self.off[v + 1]].copy()
            for e, w, v_is_u in adj[v]:
                if a[w] < 0:
                    continue
                mat = (
                    fwd[eoff[e] : eoff[e + 1]].reshape(k[v], k[w])
                    if v_is_u
                    else fwd[eoff[e] : eoff[e + 1]].reshape(k[w], k[v]).T
                )
                score += mat[:, a[w]]
            dom = self.domain(v)
            candidates = np.flatnonzero(dom)
            if candidates.size == 0:
                a[v] = int(np.argmin(score))
                continue
            ranked = candidates[np.argsort(score[candidates], kind="stable")]
            a[v] = int(ranked[0])
            for c in ranked[:tries].tolist():
                trail = [int(self.off[v]) + int(i) for i in np.flatnonzero(dom) if i != c]
                dom[:] = False
                dom[c] = True
                if self.propagate(self.incident[v], trail):
                    a[v] = c
                    break
                self.undo(trail)
        return a
