"""The message bound's price step by row generation (:class:`PriceRows`): the best slot prices for
node costs without edges, found from the few usage rows that bind.

With the messages fixed, the prices' problem is the linear programme of :mod:`.messages`: one
choice per vertex (one-hot rows) and, per segment between the slots where a paying vertex starts
or ends, its load at most its room. Few of those rows bind: after the first rounds on IOPDDL K 98
of 28,828 slots had a price, on T 27 of 48,994. So each price step solves the programme over a
small set of segments (the rows kept from the rounds before) and adds the segments the answer
overloads, the largest overload of each overloaded run of segments first, until none is
overloaded; that answer then keeps every row, so its duals are the whole programme's. A vertex
live on none of the kept segments takes its cheapest choice and stays out of the programme, so
the programmes stay small (hundreds of rows, thousands of vertices) where the whole one has
hundreds of thousands of columns and tens of thousands of rows (T: 585k columns, whose first
solve by HiGHS took 154 s).

Any prices are a bound (the rows left out have price 0), so a step cut short by time still
gives a valid one: :func:`~.messages.message_bound` computes its value afresh from the prices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from stratopt.solvers.lagrange.model import PenaltyModel, interval_sum, range_argmin, segment_argmin

__all__ = ["ADD_PER_PASS", "PriceRows"]

#: The most segments one pass adds (the worst overloaded run's largest overloads first).
ADD_PER_PASS = 64

#: An overload counts where it exceeds this share of the largest usage a choice adds: above
#: HiGHS's primal feasibility tolerance (1e-7 of the programme's usage unit), so that a kept row's
#: rounding never counts.
_OVERLOAD = 1e-6


class PriceRows:
    """The prices' programme over a growing set of segments (see the module's docstring), built
    once per model; :meth:`solve` gives the slot prices for node costs."""

    def __init__(self, model: PenaltyModel, start: np.ndarray, end: np.ndarray) -> None:
        net = model.network
        assert net is not None
        self.model = model
        self.k = net.k
        self.node_off = net.node_off
        self.owner = np.repeat(np.arange(len(net.k)), net.k)
        vs = net.pen_vertex
        self.pay = model.excess[net.pen_entry]
        self.usage_unit = float(self.pay.max()) if self.pay.size and self.pay.max() > 0 else 1.0
        self.row = net.pen_row
        events = np.unique(np.concatenate([start[vs], end[vs]])) if vs.size else np.zeros(0, dtype=np.int64)
        self.nseg = max(0, len(events) - 1)
        slots = len(model.room)
        fixed_load = interval_sum(model.excess[net.fixed_entry], start[net.fixed_vertex], end[net.fixed_vertex], slots)
        room = model.room - fixed_load
        self.segment_slot = range_argmin(room, events[:-1], events[1:]) if self.nseg else np.zeros(0, dtype=np.int64)
        self.seg_room = room[self.segment_slot]
        self.first = np.searchsorted(events, start[vs])  # each paying entry's segments: first .. last - 1
        self.last = np.searchsorted(events, end[vs])
        self.kept: list[int] = []
        self._built: _Programme | None = None
        self.slots = slots
        #: Per solve: passes, rows kept, vertices in the last programme (for benchmarks).
        self.history: list[tuple[int, int, int]] = []

    @property
    def shape(self) -> tuple[int, int]:
        """The last programme's (rows, columns): 0 before the first."""
        b = self._built
        if b is None:
            return (0, 0)
        return (len(b.verts) + len(b.kept), len(b.cols) + len(b.kept))

    @property
    def infeasible(self) -> bool:
        """Whether some segment's room is below zero (no assignment keeps the limit)."""
        return bool(self.nseg and self.seg_room.min() < 0)

    def loads(self, x: np.ndarray) -> np.ndarray:
        """Each segment's load (usage above the least) under choice weights ``x``."""
        diff = np.zeros(self.nseg + 1)
        amount = self.pay * x[self.row]
        np.add.at(diff, self.first, amount)
        np.add.at(diff, self.last, -amount)
        return np.cumsum(diff[:-1])

    def _worst(self, over: np.ndarray) -> np.ndarray:
        """Up to :data:`ADD_PER_PASS` overloaded segments: each overloaded run's largest overload,
        the largest first."""
        bad = over > 0
        if not bad.any():
            return np.zeros(0, dtype=np.int64)
        edge = np.diff(np.concatenate([[0], bad.astype(np.int8), [0]]))
        lo, hi = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
        peaks = lo + np.array([int(np.argmax(over[a:b])) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)])
        peaks = peaks[np.argsort(-over[peaks], kind="stable")]
        return peaks[:ADD_PER_PASS]

    def solve(self, node: np.ndarray, seconds: float) -> np.ndarray:
        """Slot prices (problem cost per unit of usage) for the network's node costs ``node``
        (scaled): the whole programme's best where the passes finish in ``seconds``, else the
        last pass's."""
        deadline = time.perf_counter() + seconds
        model = self.model
        cost = np.where(np.isfinite(node), node, np.inf) / model.scale
        prices = np.zeros(self.slots)
        passes = 0
        while True:
            passes += 1
            x, seg_price, vertices = self._pass(cost)
            if seg_price is not None:
                prices = np.zeros(self.slots)
                np.maximum.at(prices, self.segment_slot[np.asarray(self.kept, dtype=np.int64)], seg_price)
            over = self.loads(x) - self.seg_room - _OVERLOAD * self.usage_unit
            over[self.kept] = -1.0  # a kept row's overload is HiGHS's rounding
            add = self._worst(over)
            if add.size == 0 or time.perf_counter() >= deadline:
                break
            self.kept = sorted(set(self.kept) | set(add.tolist()))
        self.history.append((passes, len(self.kept), vertices))
        return prices

    def _pass(self, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, int]:
        """The programme over the kept segments: the choice weights (every vertex out of it at
        its cheapest choice), the kept segments' prices (None where there are none, or HiGHS gave
        no duals) and how many vertices it held."""
        finite = np.where(np.isfinite(cost), cost, np.inf)
        # Each vertex's cheapest choice, for those the kept rows leave out.
        cheapest = segment_argmin(finite, self.node_off)
        x = np.zeros(len(cost))
        x[cheapest] = 1.0
        if not self.kept:
            return x, None, 0
        kept = np.asarray(self.kept, dtype=np.int64)
        if self._built is None or not np.array_equal(self._built.kept, kept):
            self._built = self._programme(kept, finite)
            warm = False
        else:
            warm = True
        b = self._built
        if b.verts.size == 0:
            return x, np.zeros(len(kept)), 0
        c = finite[b.cols] / b.cost_unit
        h = b.h
        if warm:
            h.changeColsCost(len(b.cols), np.arange(len(b.cols), dtype=np.int32), c)
        else:
            lp = b.lp
            lp.col_cost_ = np.concatenate([c, np.zeros(len(kept))])
            h.passModel(lp)
        h.run()
        # Later runs of this programme change only its costs: the last basis stays feasible, so
        # the primal simplex goes on from it.
        h.setOptionValue("simplex_strategy", 4)
        solution = h.getSolution()
        nv, nx = len(b.verts), len(b.cols)
        if not solution.value_valid:
            return x, None, nv
        x[b.mask] = 0.0
        x[b.cols] = np.asarray(solution.col_value)[:nx]
        if not solution.dual_valid:
            return x, None, nv
        # Each kept segment's price: the negated reduced cost of its running sum where that
        # presses on its room (its column: +1 in its row, -1 in the next).
        y = np.asarray(solution.row_dual)[nv:]
        reduced = -(y - np.concatenate([y[1:], [0.0]]))
        return x, np.maximum(0.0, -reduced) * b.cost_unit / self.usage_unit, nv

    def _programme(self, kept: np.ndarray, finite: np.ndarray) -> _Programme:
        """The programme over the segments ``kept`` (sorted), costs to be set."""
        import highspy

        n, nk = len(self.k), len(kept)
        # Each entry's kept segments are a run lo .. hi - 1 of the kept ones: as in the whole
        # programme, the loads are a running sum over the kept segments (u_i = u_{i-1} + what
        # starts - what ends), each entry in two rows at most.
        lo = np.searchsorted(kept, self.first)
        hi = np.searchsorted(kept, self.last)
        on = np.flatnonzero(hi > lo)
        involved = np.zeros(n, dtype=bool)
        involved[self.owner[self.row[on]]] = True
        verts = np.flatnonzero(involved)
        # Columns: every allowed choice of an involved vertex, then one running sum per kept segment.
        mask = np.repeat(involved, self.k)
        cols = np.flatnonzero(mask & np.isfinite(finite))
        position = np.full(len(finite), -1, dtype=np.int64)
        position[cols] = np.arange(len(cols))
        nv, nx = len(verts), len(cols)
        vrow = np.searchsorted(verts, self.owner[cols])
        at = position[self.row[on]]
        ok = at >= 0
        on, at = on[ok], at[ok]
        ends = hi[on] < nk
        share = self.pay[on] / self.usage_unit
        u = nx + np.arange(nk)
        rows = np.concatenate([vrow, nv + lo[on], nv + hi[on][ends], nv + np.arange(nk), nv + 1 + np.arange(nk - 1)])
        colsi = np.concatenate([np.arange(nx), at, at[ends], u, u[:-1]])
        vals = np.concatenate([np.ones(nx), -share, share[ends], np.ones(nk), -np.ones(nk - 1)])
        # CSC by column, HiGHS's format; duplicate (row, column) pairs summed.
        matrix = sp.csc_matrix((vals, (rows, colsi)), shape=(nv + nk, nx + nk))
        matrix.sum_duplicates()
        c = finite[cols]
        cost_unit = float(np.abs(c).max()) if c.size and np.abs(c).max() > 0 else 1.0
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = nx + nk, nv + nk
        lp.col_lower_ = np.zeros(nx + nk)
        lp.col_upper_ = np.concatenate([np.ones(nx), self.seg_room[kept] / self.usage_unit])
        lp.row_lower_ = np.concatenate([np.ones(nv), np.zeros(nk)])
        lp.row_upper_ = lp.row_lower_
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = matrix.indptr
        lp.a_matrix_.index_ = matrix.indices
        lp.a_matrix_.value_ = matrix.data
        return _Programme(kept, verts, cols, mask, cost_unit, h, lp)


@dataclass
class _Programme:
    """One programme over kept segments: its vertices, its choice columns (``mask``: every choice
    of its vertices), the cost unit its costs are divided by, and HiGHS holding it."""

    kept: np.ndarray
    verts: np.ndarray
    cols: np.ndarray
    mask: np.ndarray
    cost_unit: float
    h: Any
    lp: Any
