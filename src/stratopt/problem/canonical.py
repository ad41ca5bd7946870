"""A problem in a form that does not depend on how its file numbers it (:func:`canonical`), and the
equivalent copies that test it (:func:`equivalent_copy`).

Two files can state the same problem differently: vertices numbered in another order, each vertex's
choices listed in another order, every cost multiplied by one integer and every usage and the limit
by another, time points moved by an increasing affine map. A search that reads vertex ids, choice
indices or cost magnitudes (an elimination order, a variable order, a tie broken by index, an absolute
tolerance) then behaves differently on the two. :func:`canonical` undoes all of it before any search
starts, from the problem's own content only:

- **time** is compressed to the ranks of the distinct interval end points (only the order of the time
  points decides which vertices are live together);
- **costs** are divided by the greatest common divisor of the finite ones, **usages and the limit**
  by theirs (integer problems; forbidden entries stay forbidden);
- each vertex's **choices** are ordered by (cost, usage, what its edges hold for it): per edge, the
  sorted row of the edge matrix that the choice selects, hashed, added over the vertex's edges (so
  the neighbours' own order does not matter);
- **vertices** are ordered by (first slot, last slot, what they are: their choices' keys, their
  edges' contents and their neighbours' keys, hashed);
- **edges** are stated from the earlier vertex to the later, in order of their end points and
  contents.

Equal keys are left in the file's order: such choices or vertices hold the same costs, usages and edge
contents up to the neighbours' order, and are interchangeable to every search. The hashes are sums of
64-bit products that wrap, so they are exact and do not depend on the order they are added in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.problem.core import StrategyProblem
from stratopt.problem.iopddl import read_iopddl, write_iopddl
from stratopt.problem.numbers import FORBIDDEN

__all__ = ["Canonical", "canonical", "equivalent_copy", "write_copy"]

_WEIGHTS = np.random.default_rng(20250301).integers(1, 2**62, size=4096, dtype=np.int64).view(np.uint64) | np.uint64(1)


def _bits(values: np.ndarray) -> np.ndarray:
    """The values' 64-bit patterns (integers as two's complement, floats as IEEE 754)."""
    values = np.ascontiguousarray(values)
    return (
        values.astype(np.int64).view(np.uint64)
        if values.dtype.kind in "iub"
        else values.astype(np.float64).view(np.uint64)
    )


def _hash_rows(rows: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of the 2-D (or 3-D, rows along the middle axis) array ``rows``, of its
    values in sorted order: a row and any permutation of it hash alike."""
    ordered = np.sort(rows, axis=-1)
    width = ordered.shape[-1]
    weights = np.resize(_WEIGHTS, width)
    return (_bits(ordered) * weights).sum(axis=-1, dtype=np.uint64)


def _mix(a: np.ndarray, salt: int) -> np.ndarray:
    """A second hash of ``a`` (so that sums of mixed values keep apart what plain sums would merge)."""
    x = (np.asarray(a, dtype=np.uint64) ^ np.uint64(salt)) * np.uint64(0x9E3779B97F4A7C15)
    return x ^ (x >> np.uint64(29))


@dataclass(frozen=True)
class Canonical:
    """A problem's canonical form (:func:`canonical`): ``problem``; ``order[i]``, the original vertex
    of canonical vertex ``i``; ``choices[i][c]``, the original choice of its choice ``c``; the
    original costs are the canonical ones times ``cost_scale`` (usages: ``usage_scale``)."""

    problem: StrategyProblem
    order: np.ndarray
    choices: tuple[np.ndarray, ...]
    cost_scale: int = 1
    usage_scale: int = 1

    def restore(self, assignment: Any) -> tuple[int, ...]:
        """A canonical assignment as the original problem's."""
        out = [0] * len(self.order)
        for i, c in enumerate(assignment):
            out[int(self.order[i])] = int(self.choices[i][int(c)])
        return tuple(out)

    def adopt(self, assignment: Any) -> tuple[int, ...]:
        """An assignment of the original problem as the canonical one's."""
        out = []
        for i, v in enumerate(self.order):
            where = np.flatnonzero(self.choices[i] == int(assignment[int(v)]))
            out.append(int(where[0]))
        return tuple(out)


def _gcd(values: np.ndarray) -> int:
    values = np.abs(values[values != 0])
    return int(np.gcd.reduce(values)) if values.size else 1


def _shapes(edges: np.ndarray, k: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """The edges grouped by their matrices' shapes."""
    if not len(edges):
        return {}
    ku, kv = k[edges[:, 0]], k[edges[:, 1]]
    key = ku * (int(k.max()) + 1) + kv
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    return {(int(ku[g[0]]), int(kv[g[0]])): g for g in np.split(order, cuts)}


def canonical(problem: StrategyProblem) -> Canonical:
    """``problem`` in canonical form (see the module's docstring)."""
    n, m = problem.num_vertices, problem.num_edges
    k = problem.num_choices.astype(np.int64)
    node_off, edge_off = problem.node_offsets, problem.edge_offsets
    node_flat, edge_flat = problem.node_flat, problem.edge_flat
    edges = problem.edges.astype(np.int64).reshape(-1, 2)
    integral = problem.is_integral
    # costs and usages in their own units
    scale = 1
    if integral:
        finite = np.concatenate([node_flat[node_flat < FORBIDDEN], edge_flat[edge_flat < FORBIDDEN]])
        scale = max(_gcd(finite), 1)
    nodes = np.where(node_flat < FORBIDDEN, node_flat // scale if integral else node_flat, node_flat)
    flat = np.where(edge_flat < FORBIDDEN, edge_flat // scale if integral else edge_flat, edge_flat)
    usage_scale, usages, limit, slots = 1, None, problem.usage_limit, None
    if problem.has_usage:
        assert problem.usage_flat is not None and problem.intervals is not None
        raw = problem.usage_flat
        if raw.dtype.kind in "iu" and (limit is None or float(limit).is_integer()):
            extra = np.array([] if limit is None else [int(limit)], dtype=np.int64)
            usage_scale = max(_gcd(np.concatenate([raw.astype(np.int64), extra])), 1)
            usages = raw // usage_scale
            limit = None if limit is None else int(limit) // usage_scale
        else:
            usages = raw
        slots = np.searchsorted(np.unique(problem.intervals), problem.intervals).astype(np.int64)
    owner = np.repeat(np.arange(n), k)  # the vertex of each flat choice entry
    local = np.arange(len(nodes)) - node_off[owner]
    use = np.zeros(len(nodes), dtype=np.int64) if usages is None else usages
    groups = []
    for (ku, kv), group in _shapes(edges, k).items():
        idx = np.asarray(group)
        mats = flat[edge_off[idx][:, None] + np.arange(ku * kv)[None, :]].reshape(len(idx), ku, kv)
        groups.append((idx, _bits(mats), node_off[edges[idx, 0]][:, None] + np.arange(ku)[None, :],
                       node_off[edges[idx, 1]][:, None] + np.arange(kv)[None, :]))  # fmt: skip
    # what each edge holds for each choice of its two ends, hashed and added over the vertex's edges:
    # first its rows as sets of values (the neighbours' order unknown), then, round by round, its rows
    # in the neighbours' order of the round before (which tells apart choices the sets did not)
    edge_hash = np.zeros(m, dtype=np.uint64)
    held = np.zeros(len(nodes), dtype=np.uint64)
    for idx, bits, at_u, at_v in groups:
        rows, cols = _hash_rows(bits), _hash_rows(np.swapaxes(bits, 1, 2))
        edge_hash[idx] = _mix(_hash_rows(bits.reshape(len(idx), -1)), 7)
        np.add.at(held, at_u.ravel(), _mix(rows, 1).ravel())
        np.add.at(held, at_v.ravel(), _mix(cols, 1).ravel())
    keys = [held]
    by_entry = np.lexsort((local, held, _bits(use), _bits(nodes), owner))
    for round_ in range(6):
        # each choice's place among its vertex's, equal keys sharing one (so that no tie leaks in)
        columns = [owner, _bits(nodes), _bits(use), *keys]
        changed = np.zeros(len(nodes), dtype=bool)
        changed[0] = True
        for column in columns:
            ordered = column[by_entry]
            changed[1:] |= ordered[1:] != ordered[:-1]
        dense = np.cumsum(changed)
        opens = np.r_[True, owner[by_entry][1:] != owner[by_entry][:-1]]  # a vertex's first entry
        first_of = np.maximum.accumulate(np.where(opens, dense, 0))
        rank = np.empty(len(nodes), dtype=np.int64)
        rank[by_entry] = dense - first_of
        weights = _WEIGHTS[rank % len(_WEIGHTS)]
        again = np.zeros(len(nodes), dtype=np.uint64)
        for _, bits, at_u, at_v in groups:
            rows = (bits * weights[at_v][:, None, :]).sum(axis=2, dtype=np.uint64)
            cols = (bits * weights[at_u][:, :, None]).sum(axis=1, dtype=np.uint64)
            np.add.at(again, at_u.ravel(), _mix(rows, 10 + round_).ravel())
            np.add.at(again, at_v.ravel(), _mix(cols, 10 + round_).ravel())
        keys.append(again)
        refined = np.lexsort((local, *reversed(keys), _bits(use), _bits(nodes), owner))
        if np.array_equal(refined, by_entry):
            break
        by_entry = refined
    summary: np.ndarray = keys[0]
    for later in keys[1:]:
        summary = _mix(summary + later, 11)
    # the choice keys in canonical order, hashed per vertex (position-weighted)
    entry_key = _mix(_bits(nodes), 2) + _mix(_bits(use), 3) * np.uint64(3) + _mix(summary, 4) * np.uint64(5)
    position = np.arange(len(nodes)) - node_off[owner[by_entry]]
    per_vertex = np.zeros(n, dtype=np.uint64)
    np.add.at(per_vertex, owner[by_entry], entry_key[by_entry] * _WEIGHTS[position % len(_WEIGHTS)])
    first = slots[:, 0] if slots is not None else np.zeros(n, dtype=np.int64)
    last = slots[:, 1] if slots is not None else np.zeros(n, dtype=np.int64)
    base = _mix(
        per_vertex
        + _mix(k.astype(np.uint64), 5)
        + _mix(first.astype(np.uint64) * np.uint64(7) + last.astype(np.uint64), 6),
        8,
    )
    around = base
    for round_ in range(2):  # refinement: the neighbours' keys and the edges' contents
        near = np.zeros(n, dtype=np.uint64)
        np.add.at(near, edges[:, 0], _mix(around[edges[:, 1]] + edge_hash, 20 + round_))
        np.add.at(near, edges[:, 1], _mix(around[edges[:, 0]] + edge_hash, 20 + round_))
        around = _mix(around + near, 30 + round_)
    order = np.lexsort((np.arange(n), around, base, last, first))
    new_of = np.empty(n, dtype=np.int64)
    new_of[order] = np.arange(n)
    # the r-th canonical choice of each (original) vertex, as its original local index
    chosen = by_entry - node_off[owner[by_entry]]
    choices = tuple(chosen[node_off[v] : node_off[v + 1]] for v in order.tolist())
    flat_order = np.concatenate([by_entry[node_off[v] : node_off[v + 1]] for v in order.tolist()])
    new_nodes = nodes[flat_order]
    new_usage = None if usages is None else usages[flat_order]
    # edges from the earlier (canonical) end to the later, in order of their ends and contents
    ends = new_of[edges]
    flip = ends[:, 0] > ends[:, 1]
    lo, hi = np.where(flip, ends[:, 1], ends[:, 0]), np.where(flip, ends[:, 0], ends[:, 1])
    edge_order = np.lexsort((np.arange(m), edge_hash, hi, lo))
    sizes = k[edges[:, 0]] * k[edges[:, 1]]
    out_off = np.zeros(m + 1, dtype=np.int64)
    out_off[1:] = np.cumsum(sizes[edge_order])
    where_new = np.empty(m, dtype=np.int64)  # each edge's place in the canonical order
    where_new[edge_order] = np.arange(m)
    gather = np.empty(int(out_off[-1]), dtype=np.int64)  # canonical edge entry -> original flat entry
    for (ku, kv), group in _shapes(edges, k).items():
        idx = np.asarray(group)
        at_u = chosen[node_off[edges[idx, 0]][:, None] + np.arange(ku)[None, :]]  # (g, ku) original rows
        at_v = chosen[node_off[edges[idx, 1]][:, None] + np.arange(kv)[None, :]]
        source = edge_off[idx][:, None, None] + at_u[:, :, None] * kv + at_v[:, None, :]  # (g, ku, kv)
        turned = flip[idx]
        dest = out_off[where_new[idx]]
        straight = ~turned
        if straight.any():
            block = source[straight].reshape(int(straight.sum()), -1)
            gather[(dest[straight][:, None] + np.arange(ku * kv)[None, :]).ravel()] = block.ravel()
        if turned.any():
            block = np.swapaxes(source[turned], 1, 2).reshape(int(turned.sum()), -1)
            gather[(dest[turned][:, None] + np.arange(ku * kv)[None, :]).ravel()] = block.ravel()
    made = StrategyProblem.from_flat(
        k[order], new_nodes, np.stack([lo[edge_order], hi[edge_order]], axis=1), flat[gather],
        intervals=None if slots is None else slots[order], usage_flat=new_usage,
        usage_limit=limit if problem.has_usage else None, name=problem.name,
    )  # fmt: skip
    return Canonical(made, order, choices, scale, usage_scale)


def equivalent_copy(problem: StrategyProblem, seed: int) -> tuple[StrategyProblem, int, Canonical]:
    """The same problem written another way (seeded): vertices renumbered, each vertex's choices
    reordered, costs multiplied by an integer from 2 to 9, usages and the limit by another, time
    points moved by ``t -> a t + b`` (``a`` from 1 to 4, ``b`` from 0 to 99), each edge stated either
    way round. Returns the copy, the cost factor (its optimum is the original's times it) and the map
    back (a :class:`Canonical` whose ``restore`` turns the copy's assignments into the original's)."""
    rng = np.random.default_rng(seed)
    n = problem.num_vertices
    k = problem.num_choices
    factor, usage_factor = int(rng.integers(2, 10)), int(rng.integers(2, 10))
    a, b = int(rng.integers(1, 5)), int(rng.integers(0, 100))
    order = rng.permutation(n)  # copy vertex i is original vertex order[i]
    new_of = np.empty(n, dtype=np.int64)
    new_of[order] = np.arange(n)
    choices = tuple(rng.permutation(int(k[v])) for v in order.tolist())  # copy choice c: original choices[i][c]

    def scaled(values: np.ndarray, by: int) -> np.ndarray:
        return np.where(values < FORBIDDEN, values * by, values) if problem.is_integral else values * by

    node_costs = [scaled(problem.node_cost(int(v))[c], factor) for v, c in zip(order.tolist(), choices, strict=True)]
    edges, matrices = [], []
    for e in rng.permutation(problem.num_edges).tolist():
        u, v = (int(x) for x in problem.edges[e])
        matrix = scaled(problem.edge_cost(e), factor)[np.ix_(choices[new_of[u]], choices[new_of[v]])]
        if rng.random() < 0.5:
            edges.append((int(new_of[u]), int(new_of[v])))
            matrices.append(matrix)
        else:
            edges.append((int(new_of[v]), int(new_of[u])))
            matrices.append(matrix.T)
    options: dict[str, Any] = {}
    if problem.has_usage:
        assert problem.intervals is not None
        options["intervals"] = (problem.intervals[order] * a + b).tolist()
        options["usages"] = [
            problem.usage(int(v))[c] * usage_factor for v, c in zip(order.tolist(), choices, strict=True)
        ]
        limit = problem.usage_limit
        options["usage_limit"] = None if limit is None else limit * usage_factor
    copy = StrategyProblem(node_costs, edges, matrices, name=f"{problem.name} (copy {seed})", **options)
    return copy, factor, Canonical(copy, order, choices, factor, usage_factor)


def write_copy(source: Any, target: Any, seed: int) -> dict[str, Any]:
    """Write an equivalent copy (:func:`equivalent_copy`) of the IOPDDL file ``source`` to ``target``;
    returns ``{"seed", "factor", "order", "choices"}``: the copy's optimum is the original's times
    ``factor``, and an answer ``a`` of the copy is ``b`` of the original with
    ``b[order[i]] = choices[i][a[i]]``."""
    copy, factor, back = equivalent_copy(read_iopddl(source), seed)
    write_iopddl(copy, target)
    return {"seed": seed, "factor": factor, "order": back.order.tolist(), "choices": [c.tolist() for c in back.choices]}
