"""The Lagrangian dual by message passing, for networks whose linear relaxation is too large for
HiGHS in the time (:func:`message_bound`).

The relaxation's dual has two kinds of variables: slot prices ``lam`` on the usage limit, and
messages ``m`` that move cost between each edge and its two ends (a reparametrisation: every
assignment costs the same after it). For any messages and any prices ``lam >= 0``,

    sum over vertices of min over choices [cost + messages + penalty at lam]
    + sum over edges of min over entries [edge cost - messages] - lam . room

is a lower bound on every assignment that keeps the limit (each term is at most what the
assignment pays there). Its maximum over both is the relaxation's value. This module climbs it by
blocks, each exact:

- **messages, prices fixed**: edge-by-edge block coordinate ascent (the max-product linear
  programming update of Globerson and Jaakkola, in its min-sum form: each edge's pairwise minimum,
  with both ends' other messages, is split evenly between its two ends), over a colouring of the
  edges into matchings so that the edges of one colour update together as numpy arrays
  (:class:`Messages`); every update keeps or raises the bound;
- **prices, messages fixed**: the bound is then the Lagrangian of a problem without edges, whose
  best prices are the duals of its linear programme (one-hot rows and the usage rows of
  :class:`~stratopt.solvers.lagrange.relaxation.Relaxation`, no pair columns). Few of its usage
  rows bind, so it is solved by row generation over them (:class:`~.prices.PriceRows`: the rows
  kept from round to round, HiGHS warm while they stay the same); ``price="lp"`` solves the whole
  programme instead, HiGHS's simplex warm-started from the previous round's basis.

A round is :data:`SWEEPS` sweeps of messages and one price step, and the bound rises with the
rounds' count, not with how far each sweep goes (in a first version, 100, 25, 5 and 2 sweeps a
round gave the same bound per round on IOPDDL K). Alone on this project's 2-core machine
(``scripts/bench_messages.py``, 2026-12-02), the rows step gives the whole programme's bound
round for round, and its rounds stay small where the whole programme is large: on T (59,397
vertices; the whole programme 585k columns, whose cold solve took 154 s) the first round takes 7 s
and the next 0.3 s each (the kept programme about 140 rows over 9,800 vertices): 10 rounds in 17 s
(278 s with the whole programme), 40 in 28 s (388 s), 350 in 119 s, the bound then 3.0% below T's
best answer known; on K 433 rounds in 90 s (2.02e9 against 2.21e9).
The bound reported is the best of every round's value, each computed afresh from the messages and
prices (never from the solver's objective).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from stratopt.solvers.lagrange.model import Network, PenaltyModel, segment_min, shift_to_zero
from stratopt.solvers.lagrange.prices import PriceRows
from stratopt.solvers.lagrange.relaxation import LpBound, Relaxation

__all__ = [
    "MESSAGE_METHOD",
    "PRICE_STEPS",
    "QUICK_PRICE_COLUMNS",
    "STALL_GAIN",
    "STALL_ROUNDS",
    "SWEEPS",
    "Messages",
    "message_bound",
    "price_columns",
]

#: Message sweeps per round (see the module's docstring).
SWEEPS = 2

#: With ``price="lp"`` (the whole prices' programme, HiGHS warm from the last basis: the step
#: before :mod:`.prices`, kept to compare against), the first, cold solve is HiGHS's interior point
#: with crossover where the programme has at most this many columns, else the dual simplex.
#: Measured on IOPDDL (this project's 2-core machine, the other core busy), the first solve took,
#: by dual simplex and by interior point: A (24.6k columns) 8.8 s and 6.5 s, C (24.2k) 30 s and
#: 9.2 s, D (28.8k) 14.1 s and 7.7 s, L (37.7k) 9.7 s and 7.8 s, Q (39.8k) 38.8 s and 19.4 s; on
#: the larger programmes of networks with thousands of vertices the interior point was the slower
#: one (K, 91k: 7.0 s and 11.6 s; M, 81k: 14.0 s and 38.2 s; S, 109k: 10.5 s and 21.2 s), and the
#: cold solve alone took 34 s on N (349k) and 154 s on T (585k).
QUICK_PRICE_COLUMNS = 50_000

#: The price steps :func:`message_bound` knows: ``rows`` (:class:`~.prices.PriceRows`, the
#: default) and ``lp`` (the whole programme, :class:`_PriceLp`).
PRICE_STEPS = ("rows", "lp")

#: A message bound with ``stall`` stops where its best bound has risen by at most STALL_GAIN of itself over
#: the last STALL_ROUNDS rounds. Alone on IOPDDL (2 cores, the other busy): C's bound was 0.08% below
#: its best answer known after 60 rounds (21.7 s), D's 1.8% after 140 (27 s), L's 0.3-0.4% after
#: 40-60 (33-38 s), each then rising by less than 0.05% in 20 rounds.
STALL_ROUNDS = 20
STALL_GAIN = 1e-4

#: How a bound from message passing was obtained (:attr:`~stratopt.solvers.base.Result.bound_method`).
MESSAGE_METHOD = (
    "messages: the linear relaxation's dual by message passing over the edges and the usage rows' "
    "prices by HiGHS (each round's value a bound)"
)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, s + l)`` over the pairs."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(starts - before, lengths) + np.arange(total)


def matchings(edges: np.ndarray, n: int) -> np.ndarray:
    """A colour per edge such that no two edges of one colour share a vertex (greedy: each edge
    takes the least colour neither end has yet; at most twice the largest degree)."""
    used: list[set[int]] = [set() for _ in range(n)]
    colour = np.zeros(len(edges), dtype=np.int64)
    for e, (u, v) in enumerate(edges.tolist()):
        at_u, at_v = used[u], used[v]
        c = 0
        while c in at_u or c in at_v:
            c += 1
        colour[e] = c
        at_u.add(c)
        at_v.add(c)
    return colour


class _Batch:
    """The edges of one colour as flat arrays: their messages' places (``umsg``, ``vmsg``), the
    choices those messages go to (``uch``, ``vch``), their entries' costs (``theta``, first end
    major) with each entry's message (``aidx``, ``bidx``, within the batch), the starts of each
    row for the minimum over the second end (``arows``) and, in second-end-major order
    (``perm``), over the first (``brows``)."""

    aidx: np.ndarray
    arows: np.ndarray
    bidx: np.ndarray
    brows: np.ndarray
    perm: np.ndarray
    theta: np.ndarray
    uch: np.ndarray
    umsg: np.ndarray
    vch: np.ndarray
    vmsg: np.ndarray


class Messages:
    """Messages on every edge of a network, updated by matchings (see the module's docstring).
    ``reprice(unary)`` sets the node costs (penalties included, scaled); ``sweep()`` updates every
    edge once; ``parts()`` gives the reparametrised node costs without ``unary`` and each edge's
    least remaining entry, computed afresh from the messages."""

    def __init__(self, net: Network) -> None:
        self.net = net
        k, node_off, edges, edge_off = net.k, net.node_off, net.edges, net.edge_off
        count = len(edges)
        ku = k[edges[:, 0]] if count else np.zeros(0, dtype=np.int64)
        kv = k[edges[:, 1]] if count else np.zeros(0, dtype=np.int64)
        uoff = np.concatenate([[0], np.cumsum(ku)])
        voff = np.concatenate([[0], np.cumsum(kv)])
        self.mu = np.zeros(int(uoff[-1]))
        self.mv = np.zeros(int(voff[-1]))
        self.uchoice = _ranges(node_off[edges[:, 0]], ku) if count else np.zeros(0, dtype=np.int64)
        self.vchoice = _ranges(node_off[edges[:, 1]], kv) if count else np.zeros(0, dtype=np.int64)
        sizes = np.diff(edge_off)
        edge_of = np.repeat(np.arange(count), sizes)
        local = np.arange(len(net.edge)) - edge_off[:-1][edge_of]
        self.ent_u = uoff[:-1][edge_of] + local // kv[edge_of] if count else np.zeros(0, dtype=np.int64)
        self.ent_v = voff[:-1][edge_of] + local % kv[edge_of] if count else np.zeros(0, dtype=np.int64)
        # A forbidden entry costs more than any allowed assignment: a lower bound on "forbidden"
        # that keeps every sum finite.
        finite = net.edge[np.isfinite(net.edge)]
        top = 4.0 * (float(np.abs(finite).sum()) + float(np.abs(net.node).sum()) + 1.0)
        self.theta = np.where(np.isfinite(net.edge), net.edge, top)
        self.batches: list[_Batch] = []
        if count:
            colour = matchings(edges, len(k))
            order = np.argsort(colour, kind="stable")
            cuts = np.searchsorted(colour[order], np.arange(int(colour.max()) + 2))
            for c in range(len(cuts) - 1):
                self.batches.append(self._batch(order[cuts[c] : cuts[c + 1]], ku, kv, uoff, voff, sizes))
        self.unary = net.node.copy()
        self.phi = self.unary.copy()

    def _batch(
        self, es: np.ndarray, ku: np.ndarray, kv: np.ndarray, uoff: np.ndarray, voff: np.ndarray, sizes: np.ndarray
    ) -> _Batch:
        b = _Batch()
        edge_off = self.net.edge_off
        b.umsg = _ranges(uoff[es], ku[es])
        b.vmsg = _ranges(voff[es], kv[es])
        b.uch = self.uchoice[b.umsg]
        b.vch = self.vchoice[b.vmsg]
        entries = _ranges(edge_off[es], sizes[es])
        owner = np.repeat(np.arange(len(es)), sizes[es])
        local = entries - edge_off[es][owner]
        a, c = local // kv[es][owner], local % kv[es][owner]
        b.aidx = (np.concatenate([[0], np.cumsum(ku[es])])[:-1][owner] + a).astype(np.int32)
        b.bidx = (np.concatenate([[0], np.cumsum(kv[es])])[:-1][owner] + c).astype(np.int32)
        b.arows = np.concatenate([[0], np.cumsum(np.repeat(kv[es], ku[es]))])[:-1]
        b.perm = np.lexsort((a, c, owner)).astype(np.int32)
        b.brows = np.concatenate([[0], np.cumsum(np.repeat(ku[es], kv[es]))])[:-1]
        b.theta = self.theta[entries]
        return b

    def reprice(self, unary: np.ndarray) -> None:
        """Node costs ``unary`` (scaled, penalties included) under the present messages."""
        self.unary = unary
        n = len(unary)
        self.phi = unary + np.bincount(self.uchoice, self.mu, n) + np.bincount(self.vchoice, self.mv, n)

    def sweep(self) -> None:
        """Every edge once: its pairwise minimum with both ends' other messages, split evenly."""
        phi, mu, mv = self.phi, self.mu, self.mv
        for b in self.batches:
            at_u = phi[b.uch] - mu[b.umsg]
            at_v = phi[b.vch] - mv[b.vmsg]
            pair = b.theta + at_u[b.aidx] + at_v[b.bidx]
            half_u = 0.5 * np.minimum.reduceat(pair, b.arows)
            half_v = 0.5 * np.minimum.reduceat(pair[b.perm], b.brows)
            mu[b.umsg] = half_u - at_u
            mv[b.vmsg] = half_v - at_v
            phi[b.uch] = half_u
            phi[b.vch] = half_v

    def reparametrised(self) -> tuple[np.ndarray, np.ndarray, float]:
        """The network's costs after the messages, ``unary`` in the node costs: (node costs, edge
        costs, constant), each function shifted so that its least allowed entry is 0 and the
        constant the sum of what was taken off, so that every assignment costs what it costs under
        ``unary`` and the edges (up to floating-point rounding). The constant is the bound the
        messages prove; forbidden entries stay ``inf``."""
        net = self.net
        node, node_taken = shift_to_zero(self.unary + self._moved(), net.node_off)
        if not len(net.edges):
            return node, net.edge.copy(), node_taken
        edge = np.where(np.isfinite(net.edge), net.edge - self.mu[self.ent_u] - self.mv[self.ent_v], np.inf)
        edge, edge_taken = shift_to_zero(edge, net.edge_off)
        return node, edge, node_taken + edge_taken

    def _moved(self) -> np.ndarray:
        """The messages' sum per choice."""
        n = len(self.unary)
        return np.bincount(self.uchoice, self.mu, n) + np.bincount(self.vchoice, self.mv, n)

    def parts(self) -> tuple[np.ndarray, float, float]:
        """(the messages' sum per choice, the sum over edges of each one's least entry after its
        messages, the absolute size of the terms summed: a scale for rounding error)."""
        n = len(self.unary)
        moved = self._moved()
        if not len(self.net.edges):
            return moved, 0.0, 0.0
        rest = segment_min(self.theta - self.mu[self.ent_u] - self.mv[self.ent_v], self.net.edge_off)
        return moved, math.fsum(rest.tolist()), float(np.abs(rest).sum() + np.abs(moved).max(initial=0.0) * n)


class _PriceLp:
    """The usage rows' linear programme without edges, its costs changed in place each round so
    that HiGHS's simplex starts from the last basis (dual simplex the first time, then primal:
    only the costs move, so the last basis stays feasible)."""

    def __init__(self, relax: Relaxation, cold: str = "simplex") -> None:
        self.relax = relax
        h = relax.highs(cold)
        if cold == "ipm":  # the interior point's crossover leaves the basis the simplex goes on from
            h.setOptionValue("run_crossover", "on")
        self.h = h
        self.first = True

    def solve(self, node: np.ndarray, offset: float, scale: float, seconds: float) -> np.ndarray | None:
        """Costs ``node`` (scaled) and ``offset`` (problem units): the row duals, or None where
        HiGHS gave none in ``seconds``."""
        relax, h = self.relax, self.h
        nx = relax.u_first
        relax.cost[:nx] = np.where(np.isfinite(node), node, 0.0) / scale / relax.cost_unit
        relax.offset = offset
        if not self.first:
            h.changeColsCost(nx, np.arange(nx, dtype=np.int32), relax.cost[:nx])
        # HiGHS's time limit counts every run of this object: this run's seconds go on top.
        h.setOptionValue("time_limit", h.getRunTime() + max(1.0, seconds))
        h.run()
        if self.first:
            h.setOptionValue("solver", "simplex")
            h.setOptionValue("simplex_strategy", 4)  # primal simplex from here on
            self.first = False
        solution = h.getSolution()
        return np.asarray(solution.row_dual, dtype=np.float64) if solution.dual_valid else None

    def close(self) -> None:
        import highspy

        highspy.Highs.resetGlobalScheduler(True)


def price_columns(model: PenaltyModel, start: np.ndarray, end: np.ndarray) -> int:
    """The prices' programme's column count (one per network choice and segment of the running
    usage sum), without building it."""
    net = model.network
    assert net is not None
    segments = (
        len(np.unique(np.concatenate([start[net.pen_vertex], end[net.pen_vertex]]))) if net.pen_vertex.size else 1
    )
    return int(len(net.node) + segments - 1)


def _stalled(trail: list[float]) -> bool:
    """Whether the best bound rose by at most :data:`STALL_GAIN` of itself over the last
    :data:`STALL_ROUNDS` rounds (``trail``: the best after each round)."""
    if len(trail) <= STALL_ROUNDS or not math.isfinite(trail[-STALL_ROUNDS - 1]):
        return False
    return trail[-1] - trail[-STALL_ROUNDS - 1] <= STALL_GAIN * max(1.0, abs(trail[-1]))


def _value(
    model: PenaltyModel,
    lam: np.ndarray,
    node: np.ndarray,
    floor: float,
    size: float,
    start: np.ndarray,
    end: np.ndarray,
) -> float:
    """The bound (problem units) that slot prices ``lam`` prove with node costs ``node`` (scaled,
    the messages' sums in) and the edges' least entries summing to ``floor``; ``size`` scales the
    allowance for rounding (:meth:`Messages.parts`)."""
    net = model.network
    assert net is not None
    weights = model.weights_of(lam, start, end)
    least = segment_min(net.penalised(model, weights) - net.node + node, net.node_off)
    least = least[np.isfinite(least)]
    fixed = net.fixed_penalty(model, weights)
    value = (math.fsum(least.tolist()) + floor + net.shift + fixed) / model.scale - float(lam @ model.room)
    return value - 1e-12 * (size + float(np.abs(least).sum())) / model.scale


def message_bound(
    model: PenaltyModel,
    start: np.ndarray,
    end: np.ndarray,
    time_limit: float | None = None,
    rounds: int = 200,
    progress: Callable[[int, float, float], None] | None = None,
    stall: bool = False,
    price: str = "rows",
) -> LpBound:
    """The Lagrangian dual climbed by message passing and price steps (see the module's
    docstring) for ``time_limit`` seconds (None: ``rounds`` rounds): the best round's proven
    bound and its slot prices. ``progress(round, seconds, best bound)`` after each round.
    ``stall``: stop early where the best bound has stalled (:data:`STALL_ROUNDS`, :data:`STALL_GAIN`).
    ``price``: the price step, ``rows`` (:class:`~.prices.PriceRows`) or ``lp`` (the whole
    programme; its first solve the interior point's where it is small,
    :data:`QUICK_PRICE_COLUMNS`, else the dual simplex's). The result's ``columns`` and ``rows``
    are the last price programme's (with ``rows``: the kept one)."""
    if price not in PRICE_STEPS:
        raise ValueError(f"message_bound: unknown price step {price!r}; choose one of {', '.join(PRICE_STEPS)}")
    t0 = time.perf_counter()
    net = model.network
    assert net is not None
    deadline = math.inf if time_limit is None else t0 + time_limit
    messages = Messages(net)
    slots = len(model.room)
    lam = np.zeros(slots)
    best, best_prices = -math.inf, lam
    relax: Relaxation | None = None
    lp: _PriceLp | None = None
    rows_step: PriceRows | None = None
    done = 0
    status = "stopped at its time" if time_limit is not None else "rounds done"
    cold = "ipm" if price_columns(model, start, end) <= QUICK_PRICE_COLUMNS else "simplex"
    trail: list[float] = []  # the best bound after each round, for the stall rule
    try:
        while done < rounds if time_limit is None else time.perf_counter() < deadline:
            done += 1
            weights = model.weights_of(lam, start, end)
            penalty = net.penalised(model, weights) - net.node
            messages.reprice(net.node + penalty)
            for _ in range(SWEEPS):
                messages.sweep()
            moved, floor, size = messages.parts()
            node = net.node + moved
            value = _value(model, lam, node, floor, size, start, end)
            if value > best:
                best, best_prices = value, lam
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            if price == "rows":
                if rows_step is None:
                    rows_step = PriceRows(model, start, end)
                    if rows_step.infeasible:
                        status = "the usage rows cannot be met"
                        break
                lam = rows_step.solve(node, left)
                certified = _value(model, lam, node, floor, size, start, end)
            else:
                if relax is None:
                    relax = Relaxation.build(model, start, end, node_costs=node, constant=floor)
                    if relax.infeasible or relax.matrix.shape[1] == 0:
                        status = "the usage rows cannot be met" if relax.infeasible else "nothing left to price"
                        break
                    lp = _PriceLp(relax, cold)
                assert lp is not None
                duals = lp.solve(node, (net.shift + floor) / model.scale, model.scale, min(left, 1e9))
                if duals is None:
                    status = "HiGHS gave no prices in time"
                    break
                certified = relax.value(duals)
                lam = relax.slot_prices(duals, slots)
            if certified > best:
                best, best_prices = certified, lam
            if progress is not None:
                progress(done, time.perf_counter() - t0, best)
            trail.append(best)
            if stall and _stalled(trail):
                status = "stalled"
                break
    finally:
        if lp is not None or rows_step is not None:
            import highspy

            # HiGHS's thread scheduler is process-wide: reset, as every HiGHS user here leaves it.
            highspy.Highs.resetGlobalScheduler(True)
    took = time.perf_counter() - t0
    shape = (0, 0) if relax is None else relax.matrix.shape
    if rows_step is not None:
        shape = rows_step.shape
    return LpBound(
        best if math.isfinite(best) else None,
        best_prices,
        f"{status}: {done} rounds",
        took,
        int(shape[1]),
        int(shape[0]),
        method="messages",
    )
