"""The linear relaxation of the reduced model, solved by HiGHS's interior point method, as a lower
bound and as slot prices for the Lagrangian ascent (:func:`lp_bound`).

The model is the network toulbar2 gets (:class:`~stratopt.solvers.lagrange.model.Network`: the
exact reductions that hold whatever the weights), with the usage limit put back as linear rows: a
choice of the network implies a choice, hence a usage, of every vertex merged into it, so each
slot's load above the least usages is linear in the network's one-hot variables. Edges are the
local polytope over the choices each edge tells apart (:mod:`.classes`: one pair variable per
allowed cell of its row and column classes, tied to both ends by marginal equalities; the same
relaxation with fewer columns: IOPDDL A's pair columns go from 49k to 21k, D's from 92k to 78k and
its relaxation from 33 s to 28 s alone). The slot rows are written as a running sum over the
slots where a penalised vertex starts or ends (``u_k = u_{k-1} + what starts - what ends``,
``0 <= u_k <= room``), so that each vertex appears in two rows however long it lives: IOPDDL A's
relaxation has 28k such rows and 2x112k of their entries.

The bound never trusts the solver's objective value: from whatever row duals HiGHS returns (an
interior point stopped early, without crossover, included) :func:`certified_bound` computes the
Lagrangian value of those duals over the variables' boxes, which weak duality makes a lower bound
on the relaxation, hence on every assignment that keeps the limit. The usage rows' duals are the
slot prices the relaxation puts on the limit; the ascent of the Lagrangian bound starts from them
(toulbar2's dual bound on the penalised network at those prices is at least the local polytope's
where its message passing converges, and can be higher: it reasons over integer assignments).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from stratopt.solvers.lagrange.classes import edge_classes
from stratopt.solvers.lagrange.model import Network, PenaltyModel, interval_sum, range_argmin

__all__ = [
    "BOUND_SHARE",
    "DUAL_TOLERANCE",
    "LP_METHOD",
    "LP_RATE",
    "LpBound",
    "LpJob",
    "Relaxation",
    "certified_bound",
    "columns",
    "lp_bound",
]

#: The share of the time limit the relaxation may take (in one worker, beside the runs in the
#: others), and how many of its columns HiGHS's interior point clears per second on this project's
#: 2-core machine, the other core busy (IOPDDL, build included: P 51k columns in 5.8 s, A 74k in
#: 10.4 s, Q 82k in 14.2 s, C 114k in 18.9 s, D 121k in 21.5 s, V 795k in 163-222 s). The relaxation
#: runs only where its columns at this rate fit in its share: A, C, D, P and Q at their contest
#: limits, none of the instances whose network keeps millions of pair entries.
BOUND_SHARE = 0.5
LP_RATE = 5000.0

#: HiGHS's dual feasibility tolerance for the relaxation (its default is 1e-7). The certified
#: bound pays for every column's dual infeasibility times its box, so a looser tolerance costs
#: bound on relaxations with many columns: IOPDDL V's certified bound was 1,223,182 at the default
#: against HiGHS's objective 1,297,645, and 1,293,053 at this tolerance (A, C and P move by
#: 0.001-0.02%); the time is about the same (V 218 s and 222 s, P 9 s, A 21 s and 17 s).
DUAL_TOLERANCE = 1e-10

#: How a bound from the relaxation was obtained (:attr:`~stratopt.solvers.base.Result.bound_method`).
LP_METHOD = "lp: the linear relaxation of the reduced model (HiGHS interior point; the bound certified from its duals)"


@dataclass(frozen=True)
class LpJob:
    """The relaxation as a worker's job, HiGHS stopped after ``seconds`` (None: no limit);
    ``messages``: its dual climbed by message passing instead (:mod:`.messages`), for a relaxation
    too large for HiGHS in the time."""

    seconds: float | None
    messages: bool = False
    #: With ``messages``: stop where the bound stalls (:data:`~.messages.STALL_ROUNDS`), giving
    #: the worker back to the runs.
    stall: bool = False


def columns(model: PenaltyModel, start: np.ndarray, end: np.ndarray) -> int:
    """The relaxation's size for the estimate of its time, without building it: one column per
    network choice, allowed pair entry and segment of the running usage sum. (Per entry, not per
    cell of the edges' classes: :data:`LP_RATE` was measured so, and the relaxation over classes is
    no larger. Counted per cell, IOPDDL L's 2.33M columns would be 249k and seem to fit its share at
    that rate, but HiGHS takes 89 s over them alone and gave no duals in a search.)"""
    net = model.network
    assert net is not None
    segments = max(0, len(_events(net, start, end)) - 1)
    return int(len(net.node) + np.isfinite(net.edge).sum() + segments)


def _events(net: Network, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The slots where a vertex that pays a penalty starts or ends, in order."""
    vs = net.pen_vertex
    return np.unique(np.concatenate([start[vs], end[vs]])) if vs.size else np.zeros(0, dtype=np.int64)


@dataclass
class Relaxation:
    """The relaxation as arrays (``matrix`` in CSC form over the columns x, then y, then u); costs
    divided by ``cost_unit`` and usages by ``usage_unit`` so that HiGHS sees numbers near one;
    ``offset`` (problem units) is what every assignment pays on top of ``cost_unit`` times the
    objective. ``segment_slot[k]``: the slot of segment ``k`` with the least room, where its price goes."""

    matrix: sp.csc_matrix
    cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    u_first: int
    segment_slot: np.ndarray
    cost_unit: float
    usage_unit: float
    offset: float
    infeasible: bool = False

    @classmethod
    def build(
        cls,
        model: PenaltyModel,
        start: np.ndarray,
        end: np.ndarray,
        node_costs: np.ndarray | None = None,
        constant: float = 0.0,
    ) -> Relaxation:
        """The relaxation of ``model``'s network; with ``node_costs`` (scaled, one per network
        choice) the programme of those costs without edges, ``constant`` (scaled) added to what
        every assignment pays (:mod:`.messages`: the edges' share after their messages)."""
        net = model.network
        assert net is not None
        scale = model.scale
        node = (net.node if node_costs is None else node_costs) / scale
        edge = net.edge / scale if node_costs is None else np.zeros(0)
        finite = np.concatenate([node[np.isfinite(node)], edge[np.isfinite(edge)]])
        cost_unit = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
        nx = len(node)
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        # One choice per network vertex.
        nv = len(net.k)
        owner = np.repeat(np.arange(nv), net.k)
        rows.append(owner)
        cols.append(np.arange(nx))
        vals.append(np.ones(nx))
        r = nv
        # The edges as the local polytope over the choices they tell apart (:mod:`.classes`): per
        # edge, a marginal row per row class (its cells less its choices), then per column class.
        if node_costs is None and len(net.edges):
            tell = edge_classes(net)
            edges = np.asarray(net.edges, dtype=np.int64)
            allowed = tell.cell
            first_rows = np.zeros(len(edges) + 1, dtype=np.int64)
            np.cumsum(tell.rows + tell.cols, out=first_rows[1:])
            first_rows += r
            ny = len(allowed)
            ycols = nx + np.arange(ny)
            rows += [
                first_rows[tell.cell_edge] + tell.cell_row,
                first_rows[tell.cell_edge] + tell.rows[tell.cell_edge] + tell.cell_col,
            ]
            cols += [ycols, ycols]
            vals += [np.ones(ny), np.ones(ny)]
            of_row = np.repeat(np.arange(len(edges)), np.diff(tell.row_off))
            of_col = np.repeat(np.arange(len(edges)), np.diff(tell.col_off))
            rows += [first_rows[of_row] + tell.row_class, first_rows[of_col] + tell.rows[of_col] + tell.col_class]
            cols += [
                net.node_off[edges[of_row, 0]] + np.arange(len(of_row)) - tell.row_off[of_row],
                net.node_off[edges[of_col, 1]] + np.arange(len(of_col)) - tell.col_off[of_col],
            ]
            vals += [-np.ones(len(of_row)), -np.ones(len(of_col))]
        else:
            allowed = np.zeros(0, dtype=np.int64)
            first_rows = np.full(1, r, dtype=np.int64)
            ny = 0
        r = int(first_rows[-1])
        n_equal = r
        # Usage: a running sum over the segments between the slots where a paying vertex starts or ends.
        pay = model.excess[net.pen_entry]
        usage_unit = float(pay.max()) if pay.size and pay.max() > 0 else 1.0
        vs = net.pen_vertex
        events = _events(net, start, end)
        nseg = max(0, len(events) - 1)
        slots = len(model.room)
        fixed_load = interval_sum(model.excess[net.fixed_entry], start[net.fixed_vertex], end[net.fixed_vertex], slots)
        room = model.room - fixed_load
        segment_slot = range_argmin(room, events[:-1], events[1:]) if nseg else np.zeros(0, dtype=np.int64)
        seg_room = room[segment_slot]  # each segment's least room, at its tightest slot
        if nseg:
            at_start = np.searchsorted(events, start[vs])
            at_end = np.searchsorted(events, end[vs])
            keep_end = at_end < nseg  # the last event only ends intervals: no row after it
            rows += [r + at_start, r + at_end[keep_end]]
            cols += [net.pen_row, net.pen_row[keep_end]]
            vals += [-pay / usage_unit, pay[keep_end] / usage_unit]
            u_cols = nx + ny + np.arange(nseg)
            rows += [r + np.arange(nseg), r + 1 + np.arange(nseg - 1)]
            cols += [u_cols, u_cols[:-1]]
            vals += [np.ones(nseg), -np.ones(nseg - 1)]
        n_rows = r + nseg
        ncol = nx + ny + nseg
        matrix = sp.csc_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, ncol)
        )
        cost = np.concatenate([np.where(np.isfinite(node), node, 0.0), edge[allowed], np.zeros(nseg)]) / cost_unit
        col_upper = np.concatenate([np.where(np.isfinite(node), 1.0, 0.0), np.ones(ny), seg_room / usage_unit])
        row_bounds = np.concatenate([np.ones(nv), np.zeros(n_equal - nv), np.zeros(nseg)])
        return cls(
            matrix=matrix,
            cost=cost,
            col_lower=np.zeros(ncol),
            col_upper=col_upper,
            row_lower=row_bounds,
            row_upper=row_bounds,
            u_first=nx + ny,
            segment_slot=segment_slot,
            cost_unit=cost_unit,
            usage_unit=usage_unit,
            offset=(net.shift + constant) / scale,
            infeasible=bool(nseg and seg_room.min() < 0),
        )

    def highs(self, solver: str) -> Any:
        """A HiGHS object (``highspy.Highs``, quiet) holding this programme, to run with ``solver``."""
        import highspy

        m = self.matrix
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("solver", solver)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = m.shape[1], m.shape[0]
        lp.col_cost_ = self.cost
        lp.col_lower_ = self.col_lower
        lp.col_upper_ = self.col_upper
        lp.row_lower_ = self.row_lower
        lp.row_upper_ = self.row_upper
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = m.indptr
        lp.a_matrix_.index_ = m.indices
        lp.a_matrix_.value_ = m.data
        h.passModel(lp)
        return h

    def value(self, duals: np.ndarray) -> float:
        """The proven lower bound (problem units) that row duals give (:func:`certified_bound`)."""
        raw = certified_bound(
            self.matrix, self.cost, self.row_lower, self.row_upper, self.col_lower, self.col_upper, duals
        )
        return raw * self.cost_unit + self.offset

    def reduced(self, duals: np.ndarray) -> np.ndarray:
        """Each choice and pair column's reduced cost (problem units) under the row duals as
        :func:`certified_bound` signs them: setting such a column to 1 raises that bound by at
        least its reduced cost (where positive), which is what fixing by reduced cost uses."""
        y = _signed(duals, self.row_lower, self.row_upper)
        return np.asarray(self.cost - self.matrix.T @ y)[: self.u_first] * self.cost_unit

    def slot_prices(self, duals: np.ndarray, slots: int) -> np.ndarray:
        """The slot prices (problem cost per unit of usage) the duals put on the limit: each
        segment's price, the negated reduced cost of its running sum ``u`` where that presses on
        its room, at the segment's tightest slot."""
        reduced = self.cost - self.matrix.T @ duals
        seg = np.maximum(0.0, -reduced[self.u_first :]) * self.cost_unit / self.usage_unit
        prices = np.zeros(slots)
        np.maximum.at(prices, self.segment_slot, seg)
        return prices


def certified_bound(
    matrix: sp.spmatrix,
    cost: np.ndarray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    col_lower: np.ndarray,
    col_upper: np.ndarray,
    duals: np.ndarray,
) -> float:
    """A lower bound on ``min cost @ z`` over ``row_lower <= matrix @ z <= row_upper`` and
    ``col_lower <= z <= col_upper`` (finite boxes) from any row duals: each dual is first given
    the sign its row's finite sides allow, then the bound is the row terms (a positive dual times
    the row's lower side, a negative one times its upper side) plus, per variable, the least of
    its reduced cost times either end of its box. Weak duality, whatever the duals."""
    y = _signed(duals, row_lower, row_upper)
    reduced = cost - matrix.T @ y
    row_terms = np.where(y > 0, y * np.where(np.isfinite(row_lower), row_lower, 0.0), 0.0) + np.where(
        y < 0, y * np.where(np.isfinite(row_upper), row_upper, 0.0), 0.0
    )
    col_terms = np.minimum(reduced * col_lower, reduced * col_upper)
    total = math.fsum(row_terms.tolist()) + math.fsum(col_terms.tolist())
    # The sums above are exact to a few units in the last place of their largest terms.
    slack = 1e-12 * (float(np.abs(row_terms).sum()) + float(np.abs(col_terms).sum()))
    return total - slack


def _signed(duals: np.ndarray, row_lower: np.ndarray, row_upper: np.ndarray) -> np.ndarray:
    """Each dual given the sign its row's finite sides allow (0 where the side it needs is infinite)."""
    y = np.where(np.isfinite(row_lower), duals, np.minimum(duals, 0.0))
    return np.where(np.isfinite(row_upper), y, np.maximum(y, 0.0))


@dataclass
class LpBound:
    """What the relaxation gave: the proven bound (None: HiGHS gave no duals, or the relaxation is
    infeasible: then ``infeasible``), the slot prices of its usage rows, HiGHS's status, its own
    objective value (problem units, unproven: the certified bound is what counts) and the time;
    from branch and cut, its answer too."""

    bound: float | None
    prices: np.ndarray | None
    status: str
    seconds: float
    columns: int
    rows: int
    infeasible: bool = False
    objective: float | None = None
    #: "lp" (:func:`lp_bound`), "messages" (:func:`~stratopt.solvers.lagrange.messages.message_bound`)
    #: or "mip" (:func:`~stratopt.solvers.lagrange.branch.branch_bound`).
    method: str = "lp"
    #: An assignment of the problem found on the way (branch and cut's best), or None. (From branch
    #: and cut, ``bound`` is HiGHS's claim, which the search does not take.)
    assignment: np.ndarray | None = None
    #: The relaxation's reduced cost per choice and pair column (:meth:`Relaxation.reduced`), or None.
    reduced: np.ndarray | None = None
    #: How many columns branch and cut fixed at 0 by reduced cost before it ran.
    fixed: int = 0


def lp_bound(model: PenaltyModel, start: np.ndarray, end: np.ndarray, time_limit: float | None = None) -> LpBound:
    """The relaxation of the reduced model solved by HiGHS's interior point method (no crossover:
    the bound comes from its duals, :func:`certified_bound`), within ``time_limit`` seconds."""
    import highspy

    t0 = time.perf_counter()
    relax = Relaxation.build(model, start, end)
    m = relax.matrix
    if relax.infeasible:
        return LpBound(None, None, "infeasible", time.perf_counter() - t0, m.shape[1], m.shape[0], True)
    if m.shape[1] == 0:  # the reductions decided every vertex: what they fixed is all there is
        return LpBound(relax.offset, np.zeros(len(model.room)), "empty", time.perf_counter() - t0, 0, m.shape[0])
    h = relax.highs("ipm")
    h.setOptionValue("run_crossover", "off")
    h.setOptionValue("dual_feasibility_tolerance", DUAL_TOLERANCE)
    if time_limit is not None:
        h.setOptionValue("time_limit", max(1.0, float(time_limit - (time.perf_counter() - t0))))
    try:
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        solution = h.getSolution()
        info = h.getInfo()
    finally:
        # HiGHS's thread scheduler is process-wide: left running, a later HiGHS run in this
        # process with other thread options (PuLP's, for mip-highs) fails before it starts.
        highspy.Highs.resetGlobalScheduler(True)
    took = time.perf_counter() - t0
    if not solution.dual_valid:
        infeasible = h.getModelStatus() == highspy.HighsModelStatus.kInfeasible
        return LpBound(None, None, status, took, m.shape[1], m.shape[0], infeasible)
    duals = np.asarray(solution.row_dual, dtype=np.float64)
    bound = relax.value(duals)
    prices = relax.slot_prices(duals, len(model.room))
    objective = float(info.objective_function_value) * relax.cost_unit + relax.offset
    return LpBound(
        bound,
        prices,
        status,
        time.perf_counter() - t0,
        m.shape[1],
        m.shape[0],
        objective=objective,
        reduced=relax.reduced(duals),
    )
