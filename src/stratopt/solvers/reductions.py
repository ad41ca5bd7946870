"""Exact reductions of a strategy problem, shared by every encoding.

Each reduction keeps at least one optimal assignment of the original problem, and each is
counted in :attr:`Reducer.stats`:

``parallel_edges_merged``
    edges between the same two vertices become one cost matrix (their sum);
``choices_unsupported``
    a choice that some neighbour allows with none of its open choices is dropped (arc consistency);
``vertices_fixed``
    a vertex left with one open choice is fixed; its edges become node costs of its neighbours
    (single-choice folding), repeatedly;
``followers_merged``
    a vertex ``v`` whose edge to ``u`` allows exactly one choice ``f(a)`` of ``v`` for every open
    choice ``a`` of ``u`` is a function of ``u``: it joins ``u`` (its node cost and that edge become
    ``u``'s node cost, its other edges ``u``'s edges). Under a usage limit only where the usage
    stays expressible: ``v`` is never live, its usage is the same whatever ``u`` picks, or both
    live over the same interval (``v``'s usage joins ``u``'s);
``choices_dominated``
    a choice that another choice of the same vertex dominates (never worse whatever the
    neighbours pick, never more usage) is dropped;
``separable_edges``
    an edge that forbids nothing and whose cost is ``f(a) + g(b)`` becomes node costs;
``usage_rows_duplicate``
    usage rows over the same free vertices are one row (the least room), counted by the
    formulation that builds the rows.

:class:`Reducer` applies them to a mutable copy of the network and remembers how to lift an
assignment of what is left back to every original vertex (:meth:`Reducer.lift`).
``Reducer(problem, usage=False)`` ignores the usage limit (every follower merges): for the
penalised problems of the Lagrangian search, whose usage enters the node costs through
:attr:`Reducer.members`, which says which original choice each remaining choice implies.
"""

from __future__ import annotations

import numpy as np

from stratopt.problem import FORBIDDEN, StrategyProblem, float_costs

__all__ = ["Reducer", "tolerance"]

#: Largest dominance test (choices^2 x neighbour choices, summed over edges) run for one vertex.
DOMINANCE_WORK = 4_000_000


def tolerance(*arrays: np.ndarray | list[np.ndarray]) -> float:
    """Zero for integer-valued data; for fractional data, a relative 1e-12 of the largest finite
    magnitude (so float round-off cannot make a reduction drop the better choice)."""
    flat = [np.ravel(a) for x in arrays for a in (x if isinstance(x, list) else [x])]
    values = np.concatenate(flat) if flat else np.zeros(0)
    values = values[np.isfinite(values)]
    if values.size == 0 or (values == np.round(values)).all():
        return 0.0
    return 1e-12 * float(np.abs(values).max())


class Reducer:
    """The network under reduction.

    ``node[v]`` holds full-length cost rows (folded and merged costs added in), ``allowed[v]`` the
    choices still open, ``merged[(u, v)]`` (u < v) one float matrix per vertex pair with +inf for
    forbidden pairs, ``fixed`` the vertices fixed (directly or through their leader) and
    ``constant`` their cost. ``members[u]`` lists ``(m, g)`` for every vertex ``m`` merged into
    ``u``: ``m`` picks ``g[a]`` when ``u`` picks ``a`` (-1 where ``a`` is not open). ``load[v]``
    is the usage a removed vertex still puts on its interval (its choice is fixed, or its usage
    does not depend on its leader's choice). ``infeasible`` says why nothing is allowed, if so.
    """

    def __init__(self, problem: StrategyProblem, *, usage: bool = True) -> None:
        self.problem = problem
        n = problem.num_vertices
        self.node = [problem.node_cost(v).astype(np.float64) for v in range(n)]
        self.allowed = [problem.node_cost(v) < FORBIDDEN for v in range(n)]
        self.merged: dict[tuple[int, int], np.ndarray] = {}
        for e, (u, v) in enumerate(problem.edges.tolist()):
            mat = float_costs(problem.edge_cost(e))
            if u > v:
                u, v, mat = v, u, mat.T
            self.merged[(u, v)] = self.merged[(u, v)] + mat if (u, v) in self.merged else mat
        self.adj: dict[int, set[int]] = {v: set() for v in range(n)}
        for u, v in self.merged:
            self.adj[u].add(v)
            self.adj[v].add(u)
        self.fixed: dict[int, int] = {}
        self.removed = np.zeros(n, dtype=bool)  # fixed, or merged into a leader
        self.members: dict[int, list[tuple[int, np.ndarray]]] = {}
        self.load = np.zeros(n)
        self.constant = 0.0
        self.stats = {
            "parallel_edges_merged": problem.num_edges - len(self.merged),
            "choices_unsupported": 0,
            "vertices_fixed": 0,
            "followers_merged": 0,
            "choices_dominated": 0,
        }
        self.usage: list[np.ndarray] | None = None
        self.intervals = problem.intervals
        if usage and problem.usage_flat is not None and problem.usage_limit is not None:
            self.usage = [problem.usage(v).astype(np.float64) for v in range(n)]
        self.infeasible: str | None = None
        self.pending = [v for v in range(n) if self.allowed[v].sum() <= 1]
        # Vertices whose choices or edges changed since arc consistency (resp. follower merging)
        # last looked at their pairs: only those pairs can have changed their verdict.
        self.dirty_support: set[int] = set(range(n))
        self.dirty_follow: set[int] = set(range(n))

    def _touch(self, v: int) -> None:
        self.dirty_support.add(v)
        self.dirty_follow.add(v)

    # -- the reductions ------------------------------------------------------------------------

    def run(self, *, dominance: bool = True, followers: bool = True) -> None:
        """Every reduction, repeated until none applies (or nothing is allowed)."""
        self.fold()
        while self.infeasible is None:
            changed = self.prune_unsupported()
            self.fold()
            if followers and self.infeasible is None:
                changed |= self.merge_followers()
                self.fold()
            if dominance and self.infeasible is None:
                changed |= self.drop_dominated()
                self.fold()
            if not changed:
                break

    def _matrix(self, v: int, w: int) -> np.ndarray:
        """The merged matrix of the pair with ``v``'s choices as rows."""
        return self.merged[(v, w)] if v < w else self.merged[(w, v)].T

    def _no_choice(self, v: int) -> None:
        self.infeasible = f"vertex {self.problem.vertex_label(v)} has no allowed choice left"

    def _fix(self, v: int, c: int) -> None:
        self.fixed[v] = c
        self.removed[v] = True
        self.stats["vertices_fixed"] += 1
        if self.usage is not None:
            self.load[v] = self.usage[v][c]
        for m, g in self.members.pop(v, []):
            self.fixed[m] = int(g[c])

    def fold(self) -> None:
        """Fix every vertex left with one allowed choice; its edges become its neighbours' node
        costs (removing the neighbours' choices it forbids), until none is left to fold."""
        queue, self.pending = self.pending, []
        while queue and self.infeasible is None:
            v = queue.pop()
            if self.removed[v]:
                continue
            if not self.allowed[v].any():
                return self._no_choice(v)
            if self.allowed[v].sum() > 1:
                continue
            c = int(np.flatnonzero(self.allowed[v])[0])
            self._fix(v, c)
            self.constant += self.node[v][c]
            for w in sorted(self.adj[v]):
                row = self._matrix(v, w)[c]
                del self.merged[(min(v, w), max(v, w))]
                self.node[w] = self.node[w] + np.where(np.isfinite(row), row, 0.0)
                self.allowed[w] &= np.isfinite(row)
                self.adj[w].discard(v)
                self._touch(w)
                if not self.allowed[w].any():
                    return self._no_choice(w)
                if self.allowed[w].sum() == 1:
                    queue.append(w)
            self.adj[v].clear()

    def prune_unsupported(self) -> bool:
        """Drop every open choice that some neighbour allows with none of its open choices."""
        removed = 0
        todo, self.dirty_support = self.dirty_support, set()
        pairs = {(min(v, w), max(v, w)) for v in todo if not self.removed[v] for w in self.adj[v]}
        for u, v in sorted(pairs):
            mat = self.merged[(u, v)]
            for x, y, m in ((u, v, mat), (v, u, mat.T)):
                ok = np.isfinite(m[:, self.allowed[y]]).any(axis=1)
                dead = self.allowed[x] & ~ok
                if dead.any():
                    self.allowed[x] &= ok
                    removed += int(dead.sum())
                    self.pending.append(x)
                    self._touch(x)
        self.stats["choices_unsupported"] += removed
        return removed > 0

    def merge_followers(self) -> bool:
        """Merge every vertex that an edge makes a function of its neighbour; True if any merged."""
        merged = 0
        todo, self.dirty_follow = self.dirty_follow, set()
        pairs = {(min(v, w), max(v, w)) for v in todo if not self.removed[v] for w in self.adj[v]}
        for key in sorted(pairs):
            if key not in self.merged:
                continue
            u, v = key
            if self.removed[u] or self.removed[v]:
                continue
            for leader, follower in ((u, v), (v, u)):
                f = self._function(leader, follower)
                if f is not None and self._usage_allows(leader, follower, f):
                    self._merge(leader, follower, f)
                    merged += 1
                    break
        self.stats["followers_merged"] += merged
        return merged > 0

    def _function(self, leader: int, follower: int) -> np.ndarray | None:
        """``f`` (over the leader's choices, -1 where not open) when every open choice of the
        leader allows exactly one open choice of the follower; else None."""
        m = self._matrix(leader, follower)
        rows = np.flatnonzero(self.allowed[leader])
        ok = np.isfinite(m[rows]) & self.allowed[follower][None, :]
        if rows.size == 0 or not (ok.sum(axis=1) == 1).all():
            return None
        f = np.full(len(self.allowed[leader]), -1, dtype=np.int64)
        f[rows] = np.argmax(ok, axis=1)
        return f

    def _usage_allows(self, leader: int, follower: int, f: np.ndarray) -> bool:
        if self.usage is None or self.intervals is None:
            return True
        s, e = self.intervals[follower]
        if e <= s:
            return True
        image = self.usage[follower][f[f >= 0]]
        if (image == image[0]).all():
            return True
        return bool((self.intervals[leader] == self.intervals[follower]).all())

    def _merge(self, u: int, v: int, f: np.ndarray) -> None:
        """``v`` joins ``u``: ``v`` picks ``f[a]`` when ``u`` picks ``a``."""
        open_ = f >= 0
        picked = np.where(open_, f, 0)
        uv = self._matrix(u, v)
        add = self.node[v][picked] + uv[np.arange(len(f)), picked]
        self.node[u] = self.node[u] + np.where(open_, add, 0.0)
        del self.merged[(min(u, v), max(u, v))]
        self.adj[u].discard(v)
        self.adj[v].discard(u)
        for w in sorted(self.adj[v]):
            mat = self._matrix(v, w)[picked]  # rows: u's choices
            mat[~open_] = 0.0  # u never picks those: any finite value
            del self.merged[(min(v, w), max(v, w))]
            self.adj[w].discard(v)
            if w in self.adj[u]:
                self.stats["parallel_edges_merged"] += 1
                if u < w:
                    self.merged[(u, w)] = self.merged[(u, w)] + mat
                else:
                    self.merged[(w, u)] = self.merged[(w, u)] + mat.T
            else:
                self.merged[(u, w) if u < w else (w, u)] = mat if u < w else mat.T.copy()
                self.adj[u].add(w)
                self.adj[w].add(u)
            self._touch(w)
        self.adj[v].clear()
        self._touch(u)
        if self.usage is not None and self.intervals is not None:
            s, e = self.intervals[v]
            image = self.usage[v][picked[open_]]
            if e <= s:
                pass
            elif (image == image[0]).all():
                self.load[v] = image[0]
            else:  # same interval: v's usage joins u's
                self.usage[u] = self.usage[u] + np.where(open_, self.usage[v][picked], 0.0)
        self.removed[v] = True
        group = self.members.setdefault(u, [])
        group.append((v, np.where(open_, f, -1)))
        for m, g in self.members.pop(v, []):
            group.append((m, np.where(open_, g[picked], -1)))
        self.pending.append(u)

    def drop_dominated(self) -> bool:
        """Remove choices that another choice of the same vertex dominates; True if any went.

        Choice ``d`` dominates ``a`` when switching any assignment from ``a`` to ``d`` can neither
        raise the cost nor break a constraint, whatever the neighbours pick: ``d`` is allowed
        with every neighbour choice ``a`` is allowed with, uses no more memory (same live
        interval), and ``node[d] - node[a] + sum over edges of max_b (M[d, b] - M[a, b]) <= 0``
        (the max over the neighbour's open choices ``b`` that ``a`` allows). Dominance is
        transitive, so removing dominated choices one at a time, each against those still open,
        always keeps an optimal assignment. Vertices whose test would exceed
        :data:`DOMINANCE_WORK` entries are skipped.
        """
        removed = 0
        for v in range(len(self.node)):
            if self.removed[v]:
                continue
            open_ = np.flatnonzero(self.allowed[v])
            k = len(open_)
            if k < 2:
                continue
            mats = [self._matrix(v, w)[np.ix_(open_, self.allowed[w])] for w in self.adj[v]]
            if k * k * sum(m.shape[1] for m in mats) > DOMINANCE_WORK:
                continue
            # excess[d, a]: the most switching a -> d can add; +inf when d is not always allowed.
            cost = self.node[v][open_]
            excess = cost[:, None] - cost[None, :]
            for m in mats:
                allowed_a = np.isfinite(m)  # (k, K_w)
                diff = m[:, None, :] - np.where(allowed_a, m, 0.0)[None, :, :]  # (d, a, b)
                diff = np.where(allowed_a[None, :, :], diff, -np.inf)
                worst = diff.max(axis=2)
                worst = np.where(np.isnan(worst), np.inf, worst)
                excess = excess + np.where(allowed_a.any(axis=1)[None, :], worst, 0.0)
            ok = excess <= tolerance(cost, mats)
            if self.usage is not None:
                use = self.usage[v][open_]
                ok &= use[:, None] <= use[None, :]
            np.fill_diagonal(ok, False)
            alive = np.ones(k, dtype=bool)
            for a in np.argsort(cost, kind="stable").tolist():
                if (ok[:, a] & alive).any():
                    alive[a] = False
            if not alive.all():
                self.allowed[v][open_[~alive]] = False
                removed += int((~alive).sum())
                self._touch(v)
                if alive.sum() == 1:
                    self.pending.append(v)
        self.stats["choices_dominated"] += removed
        return removed > 0

    def separate(self) -> int:
        """Turn every edge that forbids nothing among the open choices and whose cost there is
        ``f(a) + g(b)`` into node costs of its two ends; the number of such edges."""
        count = 0
        for (u, v), mat in list(self.merged.items()):
            sub = mat[np.ix_(self.allowed[u], self.allowed[v])]
            if not np.isfinite(sub).all():
                continue
            row, col = sub[:, 0] - sub[0, 0], sub[0, :]
            if np.abs(sub - row[:, None] - col[None, :]).max() <= tolerance(sub):
                self.node[u][self.allowed[u]] += row
                self.node[v][self.allowed[v]] += col
                del self.merged[(u, v)]
                self.adj[u].discard(v)
                self.adj[v].discard(u)
                count += 1
        self.stats["separable_edges"] = self.stats.get("separable_edges", 0) + count
        return count

    # -- reading the result --------------------------------------------------------------------

    def free(self) -> list[int]:
        """The vertices left to decide."""
        return np.flatnonzero(~self.removed).tolist()

    def lift(self, picked: dict[int, int]) -> list[int]:
        """A full assignment of the original problem from choices of the free vertices."""
        out = [-1] * len(self.node)
        for v, c in self.fixed.items():
            out[v] = c
        for u, a in picked.items():
            out[u] = a
            for m, g in self.members.get(u, []):
                out[m] = int(g[a])
        return out
