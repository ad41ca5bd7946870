"""The Lagrangian with the usage rows kept (:func:`kept_bound`): toulbar2, run to its proof, on the
network at slot prices, reparametrised by messages, under a knapsack row at every slot that could
break the limit.

For prices ``lam >= 0`` and any assignment ``x`` that keeps the limit,

    cost(x) >= cost(x) + sum over slots of lam_t * (load_t(x) - room_t)

(each ``load_t(x) - room_t`` is at most 0), so the least penalised cost over the assignments that
keep the limit, less ``lam . room``, bounds the optimum. That is the Lagrangian's value with the
rows put back as constraints: at least the Lagrangian itself, since it minimises over fewer
assignments, and at zero prices the optimum. toulbar2 solves it on the penalised network with the
rows as knapsack constraints, its costs reparametrised by messages at those prices
(:meth:`~.messages.Messages.reparametrised`), so that its search starts from the bound the messages
prove and the knapsacks cut off what the prices alone let through. The prices decide how hard that
search is: from good prices it closes quickly, and nearer zero it starts from less and has more to
prove. So the prices come from message passing first (:func:`~.messages.message_bound`), then each
run takes a fraction of them (:data:`KEPT_STEPS`), the next only where the last closed (the first
at most half the time left, so that where it cannot close the search gets the rest back).

On IOPDDL V (342 network vertices, 163 rows of 68k terms; this project's 2-core machine): the
message bound's prices after 20 s (its own bound 1.235e6, 23.6% below V's optimum 1617084),
1000 sweeps at them (8 s), then toulbar2 with the rows closed in 16-21 s at a bound of 1.445e6
(10.6% below the optimum); at the linear relaxation's prices (its own bound 1.293e6, 222 s of HiGHS)
it closed at 1.399e6. At 0.9 times the relaxation's prices it closed in 17 s at 1.429e6; at 0.95
times the message prices it had not closed in 90 s. Every bound here is toulbar2's proven bound on
the rounded costs, less half a unit per cost function, so a run cut short still bounds.

It applies where the rows are few (their terms at most :data:`KEPT_MAX_TERMS`): problems with few
time slots, such as IOPDDL B, G and V (676 slots), where the search runs beside ``wcsp``. With tens
of thousands of slots (IOPDDL A, C, D, P: 10^8 terms and more) the rows do not fit, and the linear
relaxation or the message bound serve as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stratopt.solvers.lagrange.messages import Messages, message_bound
from stratopt.solvers.lagrange.model import Network, PenaltyModel, interval_sum
from stratopt.solvers.lagrange.relaxation import LpBound
from stratopt.solvers.lagrange.runs import reparametrised
from stratopt.solvers.lagrange.toulbar import toulbar2

__all__ = [
    "KEPT_MAX_TERMS",
    "KEPT_MESSAGE_SHARE",
    "KEPT_METHOD",
    "KEPT_STEPS",
    "KEPT_SWEEPS",
    "KeptJob",
    "kept_bound",
    "kept_run",
    "network_rows",
    "rows_fit",
]

#: The most terms the rows may hold in all for the bound to run (IOPDDL V: 68k; IOPDDL A, C, D,
#: P, with 28k-58k slots: more than 10^8).
KEPT_MAX_TERMS = 1_000_000

#: The share of the job's seconds the message bound takes to find the prices (V: its bound stops
#: rising after about 20 s).
KEPT_MESSAGE_SHARE = 0.1

#: Message sweeps at the run's prices before toulbar2 (each run; at most a tenth of what is left).
#: On IOPDDL V, toulbar2 closed in 5 s after 1000 sweeps and in 14 s after 200.
KEPT_SWEEPS = 1000

#: The fractions of the message bound's prices the runs take, in turn, each only where the one
#: before closed (see the module's docstring); the last, at zero prices, is the problem itself,
#: and where it closes the bound is the optimum.
KEPT_STEPS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)

#: How a bound with the rows kept was obtained (:attr:`~stratopt.solvers.base.Result.bound_method`).
KEPT_METHOD = (
    "kept: toulbar2 run to its proof with the usage rows as knapsack constraints, on the costs at "
    "slot prices from message passing, reparametrised"
)

Rows = list[tuple[list[tuple[int, int, int]], int]]


@dataclass(frozen=True)
class KeptJob:
    """The bound with the rows kept as a worker's job, for ``seconds`` (None: no limit)."""

    seconds: float | None


def rows_fit(model: PenaltyModel, start: np.ndarray, end: np.ndarray) -> bool:
    """Whether the rows can be written (integer usages) and may fit :data:`KEPT_MAX_TERMS` (a
    bound that costs nothing to compute: each penalty term in a row for every slot of its
    interval; the rows merge terms of one choice, so they hold fewer)."""
    net = model.network
    if net is None or not len(net.k) or not net.pen_vertex.size or not _integral(model):
        return False
    pv = net.pen_vertex
    return int((end[pv] - start[pv]).sum()) <= 4 * KEPT_MAX_TERMS


def _integral(model: PenaltyModel) -> bool:
    """Whether the penalised usages and the room are integers (knapsack rows need them)."""
    assert model.network is not None
    excess = model.excess[model.network.pen_entry]
    return bool(np.all(excess == np.round(excess)) and np.all(model.room == np.round(model.room)))


def network_rows(model: PenaltyModel, start: np.ndarray, end: np.ndarray, max_terms: int) -> Rows | None:
    """The usage limit as knapsack rows over the network's variables: one per stretch of slots
    with the same penalised vertices live (its least room the capacity) where their largest
    usages could break it, rows with the same terms once (the least capacity), each ``(terms
    (variable, value, usage above the least), capacity)``; None where the usages are not integers
    or the rows would hold more than ``max_terms`` terms."""
    net = model.network
    assert net is not None
    slots = len(model.room)
    pv, pr = net.pen_vertex, net.pen_row
    excess = model.excess[net.pen_entry]
    if not _integral(model):
        return None
    var = np.searchsorted(net.node_off, pr, side="right") - 1
    fixed = model.excess[net.fixed_entry]
    room = model.room - interval_sum(fixed, start[net.fixed_vertex], end[net.fixed_vertex], slots)
    # Between two slots where a penalised vertex starts or ends, the same ones are live.
    cuts = np.unique(np.concatenate([start[pv], end[pv], [0, slots]]).clip(0, slots))
    found: dict[bytes, tuple[list[tuple[int, int, int]], int]] = {}
    total = 0
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        live = (start[pv] <= a) & (end[pv] > a)
        if not live.any():
            continue
        use = np.bincount(pr[live], excess[live], len(net.node))
        most = np.maximum.reduceat(use, net.node_off[:-1])[np.unique(var[live])].sum()
        capacity = int(room[a:b].min())
        if most <= capacity:
            continue
        at = np.flatnonzero(use > 0)
        key = np.concatenate([at, use[at]]).astype(np.int64).tobytes()
        if key in found:
            terms, before = found[key]
            found[key] = (terms, min(before, capacity))
            continue
        total += len(at)
        if total > max_terms:
            return None
        owners = np.searchsorted(net.node_off, at, side="right") - 1
        values = at - net.node_off[owners]
        terms = list(zip(owners.tolist(), values.tolist(), use[at].astype(np.int64).tolist(), strict=True))
        found[key] = (terms, capacity)
    return list(found.values())


def kept_bound(model: PenaltyModel, start: np.ndarray, end: np.ndarray, seconds: float | None) -> LpBound:
    """The bound with the rows kept (see the module's docstring) within ``seconds`` (None: the
    message bound's default rounds and an hour per run): the best bound proven, the message
    bound's prices, and the cheapest answer the runs found (an assignment of the problem that
    keeps the limit), method "kept"."""
    t0 = time.perf_counter()
    deadline = math.inf if seconds is None else t0 + seconds
    net = model.network
    assert net is not None
    rows = network_rows(model, start, end, KEPT_MAX_TERMS)
    if rows is None or not len(net.k):
        return LpBound(None, None, "the rows do not fit", time.perf_counter() - t0, 0, 0, method="kept")
    found = message_bound(model, start, end, None if seconds is None else KEPT_MESSAGE_SHARE * seconds)
    best = -math.inf if found.bound is None else found.bound
    prices = found.prices if found.prices is not None else np.zeros(len(model.room))
    messages = Messages(net)
    answer: np.ndarray | None = None
    answer_cost = math.inf
    closed = 0
    for step in KEPT_STEPS:
        left = deadline - time.perf_counter()
        if left < 1.0:
            break
        lam = prices * step
        # The first run at most half of what is left: where it cannot close, the rest goes back to
        # the search (its bound runs start from these prices); later runs are a bonus and take all.
        allowed = min(left if closed else left / 2, 3600.0)
        value, values, finished = kept_run(model, messages, lam, start, end, rows, allowed, closed)
        best = max(best, value)
        cost = math.inf if values is None else _cost(net, values)
        if values is not None and cost < answer_cost:
            answer, answer_cost = net.lift(values), cost
        if not finished:
            break
        closed += 1
    status = f"{closed} of its runs closed ({len(rows)} rows)"
    return LpBound(
        best if math.isfinite(best) else None,
        prices,
        status,
        time.perf_counter() - t0,
        len(net.node),
        len(rows),
        method="kept",
        assignment=answer,
    )


def _cost(net: Network, values: np.ndarray) -> float:
    """The network's cost of ``values`` at zero prices (scaled; what the search compares exactly)."""
    k, e = net.k, net.edges
    cost = float(net.node[net.node_off[:-1] + values].sum())
    if len(e):
        cost += float(net.edge[net.edge_off[:-1] + values[e[:, 0]] * k[e[:, 1]] + values[e[:, 1]]].sum())
    return cost


def kept_run(
    model: PenaltyModel,
    messages: Messages,
    lam: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    rows: Sequence[tuple[list[tuple[int, int, int]], int]],
    seconds: float,
    seed: int,
) -> tuple[float, np.ndarray | None, bool]:
    """One run at prices ``lam``: (the bound it proves, toulbar2's values or None, whether it
    closed)."""
    net = model.network
    assert net is not None
    started = time.perf_counter()
    weights = model.weights_of(lam, start, end)
    node = net.penalised(model, weights)
    network, constant = reparametrised(net, node, 0.1 * seconds, messages, KEPT_SWEEPS)
    left = max(1.0, seconds - (time.perf_counter() - started))
    values, dual, functions = toulbar2(network, left, seed + 1, rows=rows, lds=0)
    took = time.perf_counter() - started
    finished = values is not None and took < seconds - 0.5
    penalised_bound = dual - 0.5 * functions + constant + net.shift + net.fixed_penalty(model, weights) - model.shift
    return model.dual_value(weights, penalised_bound, lam), values, finished
