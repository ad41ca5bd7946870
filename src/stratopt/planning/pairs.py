"""The pairs of configurations DTensor runs as the cost model prices them, edge by edge
(:func:`handed_on`): what the search for a plan that runs keeps to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.graph.ir import Operator
from stratopt.planning.batch import batch_axes
from stratopt.planning.torchplan import _holds

__all__ = ["Pairs", "handed_on"]


@dataclass(frozen=True)
class Pairs:
    """Per edge, which pairs of splits DTensor runs as the edge prices them (:func:`handed_on`):
    ``allowed[e]`` over the distinct configuration rows of its two operators (twins, the same split
    with its weights sharded or its outputs recomputed, share a row), ``rows[v]`` each configuration's
    row (in ``numpy.unique`` order), ``ends[e]`` the edge's two operators; ``meshes``: per ``(dp,
    tp)`` mesh, which configurations DTensor runs there at all, kept once found
    (:func:`~stratopt.planning.torchplan.restricted_costs`: every search with these pairs asks)."""

    rows: tuple[np.ndarray, ...]
    allowed: dict[int, np.ndarray]
    ends: dict[int, tuple[int, int]]
    meshes: dict[tuple[int, int], list[np.ndarray]] = field(default_factory=dict)

    def full(self, e: int) -> np.ndarray:
        """Edge ``e``'s pairs over every configuration of its two operators."""
        u, w = self.ends[e]
        return self.allowed[e][np.ix_(self.rows[u], self.rows[w])]

    def permits(self, assignment: Sequence[int]) -> bool:
        """Whether ``assignment`` keeps to the allowed pairs on every edge."""
        a, rows = assignment, self.rows
        return all(ok[rows[u][a[u]], rows[w][a[w]]] for e, ok in self.allowed.items() for u, w in (self.ends[e],))


def handed_on(costing: Any) -> Pairs:
    """Per edge, which pairs of configurations DTensor runs as the edge prices them (only the edges
    where some pair it does not; :meth:`Pairs.full` for
    :meth:`~stratopt.problem.StrategyProblem.forbid`). Operators without weights run on the plain
    tensors they are handed, so a tensor split beyond the batch where it is made and whole where it
    is read needs a module to make it (DTensor gathers a column-parallel output), one whole where it
    is made and split where it is read needs a module to read it (a row-parallel module takes its
    slice) or to make it (hand it on split over the sequence: :mod:`~stratopt.planning.sequence`), and one split on both sides must need no re-layout on the way. A mixture of experts'
    operators (dispatch, products, combine) run in one module on one split of the experts: none of
    them makes or takes a split the others do not, but for the all-to-all between tokens split over
    the data-parallel groups and experts split over them (:func:`_all_to_all`). Computed over
    distinct splits (at 128 devices with recomputation offered, masks over every configuration were
    gigabytes)."""
    batches, ops = batch_axes(costing.graph), costing.graph.operators
    distinct, rows, lead = [], [], []
    for table in costing.configs:
        table = np.asarray(table)
        found, first, inverse = np.unique(table.reshape(len(table), -1), axis=0, return_index=True, return_inverse=True)
        distinct.append(found)
        rows.append(np.asarray(inverse).reshape(-1))
        lead.append(np.asarray(first, dtype=np.int64))
    out, ends = {}, {}
    for e, (u, w, i) in enumerate(costing.edges):
        read = ops[w].inputs[i]
        made = _beyond(ops[u], ops[u].outputs[read.output], distinct[u], batches[ops[u].name])
        taken = _beyond(ops[w], read.use, distinct[w], batches[ops[w].name])
        # splits of the last (feature) dimension, and of the others (the sequence)
        made_last = made & _beyond(ops[u], ops[u].outputs[read.output], distinct[u], batches[ops[u].name], last=True)
        taken_last = taken & _beyond(ops[w], read.use, distinct[w], batches[ops[w].name], last=True)
        made_seq, taken_seq = made & ~made_last, taken & ~taken_last
        if not made.any() and not taken.any():
            continue
        ok = np.ones((len(made), len(taken)), dtype=bool)
        # (but a module may gather a split it reads, of the sequence or of the width, or hand its
        # output on split over the sequence, reduce-scattered or sliced, or over its last dimension
        # where it splits its input features, reduce-scattered; whether the stream or the region
        # runs is the whole layout's matter, :mod:`~stratopt.planning.sequence`)
        if not _lays_out(ops[u]):  # (a product gathers a split of the width only column-parallel,
            # ColwiseParallel(input_layouts=Shard(-1)): a split region ends there as at a row-parallel one)
            gathers = made[:, None]
            if ops[w].op == "gemm":
                output = ops[w].outputs[0]
                colwise = _beyond(ops[w], output, distinct[w], batches[ops[w].name], last=True)
                gathers = made_seq[:, None] | (made_last[:, None] & colwise[None, :])
            ok &= ~(made[:, None] & ~taken[None, :]) | (gathers & _lays_out(ops[w]))
        if not _lays_out(ops[w]):
            scatters = taken_last[None, :] & _reduces(ops[u], distinct[u])[:, None]
            ok &= ~(~made[:, None] & taken[None, :]) | ((taken_seq[None, :] | scatters) & _lays_out(ops[u]))
        both = made[:, None] & taken[None, :]
        free = both.any() and np.asarray(costing.problem.edge_cost(e))[np.ix_(lead[u], lead[w])] == 0
        if both.any() and ops[u].attrs.get("lookup") and not _holds(ops[w]):
            # an embedding split over its width hands on its output gathered, but to a stream split
            # over its width, to which it hands its split as it is
            ok &= ~both | (free & (made_last & ~made_seq)[:, None] & (taken_last & ~taken_seq)[None, :])
        elif both.any():
            ok &= ~both | free
        if ops[u].attrs.get("units") and ops[w].attrs.get("units"):
            ok |= _all_to_all(ops[u], ops[w], distinct[u], distinct[w], batches)
        if not ok.all():
            out[e], ends[e] = ok, (u, w)
    return Pairs(tuple(rows), out, ends)


def _all_to_all(u: Operator, w: Operator, made: np.ndarray, taken: np.ndarray, batches: Any) -> np.ndarray:
    """The pairs of splits of a mixture of experts' dispatch ``u`` and first product ``w`` (or last
    product ``u`` and combine ``w``) that its all-to-all form runs: the tokens split ``k`` ways on
    one side (dispatch, combine), the experts ``k`` ways on the other, nothing else split."""

    def tokens_experts(op: Operator, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = np.prod(rows[:, [op.axis_index(a) for a in batches[op.name]]], axis=1)
        x = np.prod(rows[:, [op.axis_index(a) for a in op.attrs["units"]]], axis=1)
        return np.where(np.prod(rows, axis=1) == t * x, t, 0), x  # 0: something else split

    tu, xu = tokens_experts(u, made)
    tw, xw = tokens_experts(w, taken)
    if u.attrs.get("moe") == "dispatch":
        return (xu[:, None] == 1) & (tw[None, :] == 1) & (xw[None, :] == tu[:, None]) & (tu[:, None] > 1)
    if w.attrs.get("moe") == "combine":
        return (tu[:, None] == 1) & (xw[None, :] == 1) & (tw[None, :] == xu[:, None]) & (xu[:, None] > 1)
    return np.zeros((len(made), len(taken)), dtype=bool)


def _reduces(op: Operator, configs: np.ndarray) -> np.ndarray:
    """Per configuration of ``op``, whether it splits the axes a matrix product sums over (its
    output partial sums, which a reduce-scatter may hand on split)."""
    out = np.zeros(configs.shape[0], dtype=bool)
    if op.op == "gemm":
        for a in op.attrs.get("k", []):
            out |= configs[:, op.axis_index(a)] > 1
    return out


def _lays_out(op: Operator) -> bool:
    """Whether ``op`` is a module that gathers a split it makes or takes the slice it splits: one
    that holds weights, but for a mixture of experts' products (their module runs dispatch,
    products and combine on one expert split, which all of them must make and read alike)."""
    return _holds(op) and not op.attrs.get("units")


def _beyond(op: Operator, use: Any, configs: np.ndarray, batch: Sequence[str], *, last: bool = False) -> np.ndarray:
    """Per configuration of ``op``, whether it splits the tensor ``use`` over more than the batch
    (``last``: its last dimension so)."""
    out = np.zeros(configs.shape[0], dtype=bool)
    for group in use.dims[-1:] if last else use.dims:
        for a in group:
            if a not in batch:
                out |= configs[:, op.axis_index(a)] > 1
    return out
