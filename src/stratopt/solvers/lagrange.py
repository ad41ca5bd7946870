"""Memory as penalties: the usage limit relaxed into per-vertex weights, toulbar2 on each penalised
problem, repair at the worst violation and polish under the limit.

Without its usage rows the problem is a plain cost function network, which toulbar2 solves well
even at IOPDDL's largest sizes. So the limit leaves the constraints and enters the node costs:
choice ``c`` of vertex ``v`` pays ``w_v * (usage[v][c] - least usage of v)`` on top of its cost.
Without the usage rows every follower (a vertex that an edge makes a function of its neighbour)
merges into its leader, which then pays its penalties too: the network toulbar2 gets is built
once, after these reductions (:class:`Network`; IOPDDL A goes from 34,932 vertices to 285).
Each weight vector is one toulbar2 run (in worker processes, one per core, or Ray tasks): TRW-S
message passing first (:data:`TRWS_ACCURACY`), then limited discrepancy search. After
each run, every vertex whose live interval still breaks the limit somewhere learns that its
weight was too low, every other vertex that its weight was high enough; the next weights lie
between the highest weight that broke and the lowest that kept, per vertex (bisection in log
space). Every answer that breaks the limit is repaired two ways, the cheaper kept: single-vertex
moves at the time of the worst violation (least cost increase per unit of usage freed), and,
close to the limit, toulbar2 re-solving the vertices live at the over-full slots on the true
costs under knapsack rows there (coupled vertices, which forbidden pairs tie together, move at
once). Then descent that keeps the limit polishes it. Repair and polish run in the worker.

The lower bound is the Lagrangian dual: for slot prices ``lam_t >= 0``, any feasible assignment
costs at least ``min_x [cost(x) + sum_t lam_t (load_t(x) - limit)]``. A run with vertex weights
``w`` bounds that minimum from below for every ``lam`` whose interval sums cover ``w``
(``sum_{t in I_v} lam_t >= w_v``), through toulbar2's dual bound on the penalised problem. The
narrowing's runs use the cover that puts each vertex's weight on the slot of its interval with
the least room below the limit; one run in :data:`BOUND_EVERY` instead takes its weights from
slot prices that a projected subgradient ascent (Polyak steps towards the best cost) moves, whose
value is the Lagrangian dual at those prices (IOPDDL A: within 1% of the best cost known; S,
where toulbar2 proves nothing in 20 s and these runs are short: about 22% below the best answer).

References
----------
The IOPDDL contest's winning entry ("Soft Constraints, Strong Solutions", ASPLOS 2025 IOPDDL):
per-vertex usage penalties, several penalty scales in parallel, per-vertex narrowing.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.errors import ModelError, SolverUnavailableError
from stratopt.problem import FORBIDDEN, StrategyProblem, evaluate, float_costs
from stratopt.solvers.base import Limit, Result, Status
from stratopt.solvers.local_search import FORBIDDEN_COST, LocalEngine, _ragged_arange
from stratopt.solvers.reductions import Reducer

__all__ = ["Lagrange", "PenaltyModel"]

#: The largest total any toulbar2 run sees (allowed costs plus penalties), well inside toulbar2's
#: 64-bit costs; costs are scaled by a power of two to reach it.
_TOTAL = 2.0**50

#: Runs whose peak usage is at most this many times the limit, over at most this many time slots, are
#: also repaired by re-solving the region around the over-full slots (on IOPDDL S, a run 1% over
#: the limit on 3 slots: a region of 1,214 vertices, solved in 5 s, +2.2% where single-vertex moves
#: cost +4.3%). Farther out the region is most of the problem and the next weights do better.
REGION_REPAIR_EXCESS = 1.05
REGION_REPAIR_SLOTS = 64

#: Every this many runs, the weights of the best answer so far run again, each multiplied by
#: exp(N(0, SHAKE)), with a new toulbar2 seed. On IOPDDL S, with the reduced network, the same
#: weights with another seed changed the answer by up to 5%: every 2nd run ended S at 1.016x and
#: 1.007x the best submitted cost (two seeds), every 4th at 1.035x.
EXPLOIT = 2
SHAKE = 0.15

#: One run in this many is a run for the bound (slot prices), after BOUND_EVERY - 1 answer runs.
#: Where toulbar2 does not prove its runs' optima, a step of the ascent only needs toulbar2's root
#: bound and a first answer, so these runs get 1 / BOUND_FRACTION of the time (doubled after one
#: that found nothing). On IOPDDL S, 19 such 6 s runs in a row raise the bound from the floor
#: (2,738) to 1.29e9 (84% of the best submitted cost).
BOUND_EVERY = 4
BOUND_FRACTION = 3

#: Before its search, each penalised run passes toulbar2's TRW-S messages (sequential
#: tree-reweighted message passing, option ``trwsAccuracy``) until five iterations in a row raise
#: the dual bound by at most this fraction of it; along the way toulbar2 rounds the messages into
#: answers. The search then starts from reparametrised costs and a tighter bound. On the penalised
#: network of IOPDDL S, at fixed weights, a 20 s run's penalised cost was 2.4-3.1% lower at half and
#: 0.7 times good weights (within 0.6% either way at 0.85 and 1 times); whole searches (2 cores, 240 s)
#: ended at 1.002x (twice), 1.006x and 1.010x (three times) the best submitted cost, bounds 1.13-1.21e9
#: (without it: 1.007x to 1.023x over six searches, bounds about 1.09e9). On V its bound rose from
#: 969864 to 1140281; A's answer stayed the same, P's moved by 0.0001%.
TRWS_ACCURACY = 0.01


@dataclass
class PenaltyModel:
    """What every toulbar2 run needs, built once (workers inherit it when they fork).

    ``node`` and ``edge`` are the problem's costs multiplied by ``scale`` (a power of two) and
    shifted so that each function's least allowed entry is 0 (``shift`` is the sum of what was
    taken off, in scaled units); forbidden entries are ``inf``. ``excess`` is each choice's usage
    above its vertex's least usage, zero for vertices that are never live or whose intervals
    cannot break the limit whatever they choose (``relevant`` is False for those).
    """

    n: int
    k: np.ndarray
    node_off: np.ndarray
    node: np.ndarray
    edges: np.ndarray
    edge_off: np.ndarray
    edge: np.ndarray
    shift: float
    scale: float
    excess: np.ndarray
    relevant: np.ndarray
    least_usage: np.ndarray
    #: Per slot, the limit less the least usage of the vertices live there; per vertex, the slot
    #: of its interval with the least such room (the Lagrangian bound prices the vertex there).
    room: np.ndarray
    room_slot: np.ndarray
    weight_cap: float
    #: The network toulbar2 gets: the problem after the exact reductions that hold for every
    #: weight vector (see :class:`Network`).
    network: Network | None = None

    @classmethod
    def build(cls, problem: StrategyProblem) -> PenaltyModel:
        n = problem.num_vertices
        k = problem.num_choices
        off = problem.node_offsets
        node = float_costs(problem.node_flat)
        edge = float_costs(problem.edge_flat)
        edges = problem.edges
        eoff = problem.edge_offsets
        node_min = _segment_min(node, off)
        edge_min = _segment_min(edge, eoff)
        # A vertex or edge whose entries are all forbidden has min inf: shift it by 0 (toulbar2
        # proves nothing then, and the answer's evaluation says what is forbidden).
        node_min = np.where(np.isfinite(node_min), node_min, 0.0)
        edge_min = np.where(np.isfinite(edge_min), edge_min, 0.0)
        node = node - np.repeat(node_min, k)
        edge = edge - np.repeat(edge_min, np.diff(eoff))
        worst = _finite_max_sum(node, off) + _finite_max_sum(edge, eoff)
        scale = 2.0 ** math.floor(math.log2(_TOTAL / 8 / worst)) if worst > 0 else 1.0
        excess = np.zeros(len(node))
        relevant = np.zeros(n, dtype=bool)
        least = np.zeros(n)
        room = np.zeros(1)
        room_slot = np.zeros(n, dtype=np.int64)
        if problem.usage_flat is not None and problem.usage_limit is not None:
            usage = problem.usage_flat.astype(np.float64)
            least = _segment_min(usage, off)
            most = _segment_max(usage, off)
            _, start, end = problem.time_slots
            live = end > start
            slots = len(problem.time_slots[0])
            limit = float(problem.usage_limit)
            room = limit - _interval_sum(least * live, start, end, slots)
            ceiling = _interval_sum(most * live, start, end, slots)
            # Only vertices live where the most usage could break the limit are ever penalised.
            peak = ceiling[_range_argmin(-ceiling, start, end)]
            relevant = live & (most > least) & (peak > limit)
            excess = (usage - np.repeat(least, k)) * np.repeat(relevant, k)
            room_slot = _range_argmin(room, start, end)
        biggest = float(_segment_max(excess, off).sum()) if n else 0.0
        # Penalties stay below _TOTAL / 2 in all: weights above this cap change nothing toulbar2 can see.
        cap = (_TOTAL / 2) / (scale * biggest) if biggest > 0 else 0.0
        model = cls(
            n=n,
            k=k,
            node_off=off,
            node=node * scale,
            edges=edges,
            edge_off=eoff,
            edge=edge * scale,
            shift=float((node_min.sum() + edge_min.sum()) * scale),
            scale=scale,
            excess=excess,
            relevant=relevant,
            least_usage=least,
            room=room,
            room_slot=room_slot,
            weight_cap=cap,
        )
        model.network = Network.build(problem, model)
        return model

    def penalised(self, weights: np.ndarray) -> np.ndarray:
        """Scaled node costs with the penalties of ``weights`` (cost per unit of usage)."""
        return self.node + self.scale * np.repeat(weights, self.k) * self.excess

    def dual_value(self, weights: np.ndarray, penalised_bound: float, prices: np.ndarray | None = None) -> float:
        """A proven lower bound on the optimum under the limit, from a lower bound on the scaled,
        shifted penalised problem: the Lagrangian value at slot prices that cover ``weights``
        (``sum over the slots of v's interval >= w_v`` for every relevant ``v``). Without
        ``prices``: each relevant vertex's weight at its tightest slot, at each slot the largest
        such weight."""
        lam = prices
        if lam is None:
            lam = np.zeros(len(self.room))
            np.maximum.at(lam, self.room_slot[self.relevant], weights[self.relevant])
        return (penalised_bound + self.shift) / self.scale - float(lam @ self.room)

    def weights_of(self, prices: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Each relevant vertex's weight under slot prices: their sum over its interval (slots
        ``start .. end - 1``); the others get 0 (their excess is 0 in the penalised problem,
        which keeps the bound a bound)."""
        total = np.concatenate([[0.0], np.cumsum(prices)])
        return np.where(self.relevant, total[end] - total[start], 0.0)


@dataclass
class Network:
    """The penalised problems after the exact reductions that hold whatever the weights
    (:class:`~stratopt.solvers.reductions.Reducer` with ``usage=False``: single-choice folding, arc
    consistency, follower merging, parallel and separable edges; IOPDDL A goes from 34,932
    vertices to 285, S from 28,526 to 6,509). A remaining choice implies a choice of every vertex
    merged into it, whose penalties it therefore pays: ``pen_row`` (flat index here),
    ``pen_vertex`` and ``pen_entry`` (the original vertex and its flat choice index) list them,
    and ``fixed_vertex`` / ``fixed_entry`` the penalties of the vertices the reductions fixed.

    Costs are scaled as the model's and shifted so each function's least allowed entry is 0:
    an assignment's scaled cost is the network's cost plus ``shift``.
    """

    k: np.ndarray
    node_off: np.ndarray
    node: np.ndarray
    edges: np.ndarray
    edge_off: np.ndarray
    edge: np.ndarray
    shift: float
    pen_row: np.ndarray
    pen_vertex: np.ndarray
    pen_entry: np.ndarray
    fixed_vertex: np.ndarray
    fixed_entry: np.ndarray
    reducer: Reducer
    free: list[int]
    open: list[np.ndarray]
    stats: dict[str, int]

    @classmethod
    def build(cls, problem: StrategyProblem, model: PenaltyModel) -> Network:
        red = Reducer(problem, usage=False)
        red.run(dominance=False)
        if red.infeasible is None:
            red.separate()
        free = red.free() if red.infeasible is None else []
        position = {v: i for i, v in enumerate(free)}
        opened = [np.flatnonzero(red.allowed[v]) for v in free]
        k = np.array([len(o) for o in opened], dtype=np.int64)
        node_off = np.zeros(len(free) + 1, dtype=np.int64)
        np.cumsum(k, out=node_off[1:])
        scale = model.scale
        node = (
            np.concatenate([red.node[v][o] for v, o in zip(free, opened, strict=True)]) * scale if free else np.zeros(0)
        )
        pairs = sorted(red.merged.items()) if red.infeasible is None else []
        edges = np.array([[position[u], position[v]] for (u, v), _ in pairs], dtype=np.int64).reshape(-1, 2)
        tables = [mat[np.ix_(red.allowed[u], red.allowed[v])].ravel() * scale for (u, v), mat in pairs]
        edge_off = np.zeros(len(tables) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tables], out=edge_off[1:])
        edge = np.concatenate(tables) if tables else np.zeros(0)
        node_min = np.where(np.isfinite(low := _segment_min(node, node_off)), low, 0.0)
        edge_min = np.where(np.isfinite(low := _segment_min(edge, edge_off)), low, 0.0)
        node = node - np.repeat(node_min, k)
        edge = edge - np.repeat(edge_min, np.diff(edge_off))
        shift = float(node_min.sum() + edge_min.sum() + red.constant * scale)
        # Who pays which penalty: each remaining choice for itself and for its members.
        off = model.node_off
        rows, verts, entries = [], [], []
        for i, (v, o) in enumerate(zip(free, opened, strict=True)):
            base = node_off[i] + np.arange(len(o))
            rows.append(base)
            verts.append(np.full(len(o), v))
            entries.append(off[v] + o)
            for m, g in red.members.get(v, []):
                rows.append(base)
                verts.append(np.full(len(o), m))
                entries.append(off[m] + g[o])
        pen_row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        pen_vertex = np.concatenate(verts) if verts else np.zeros(0, dtype=np.int64)
        pen_entry = np.concatenate(entries) if entries else np.zeros(0, dtype=np.int64)
        paying = model.excess[pen_entry] > 0
        fixed = np.array(sorted(red.fixed.items()), dtype=np.int64).reshape(-1, 2)
        stats = {key: int(val) for key, val in red.stats.items()}
        stats.update(network_vertices=len(free), network_edges=len(tables), network_choices=int(k.sum()))
        return cls(
            k=k,
            node_off=node_off,
            node=node,
            edges=edges,
            edge_off=edge_off,
            edge=edge,
            shift=shift,
            pen_row=pen_row[paying],
            pen_vertex=pen_vertex[paying],
            pen_entry=pen_entry[paying],
            fixed_vertex=fixed[:, 0],
            fixed_entry=off[fixed[:, 0]] + fixed[:, 1],
            reducer=red,
            free=free,
            open=opened,
            stats=stats,
        )

    def penalised(self, model: PenaltyModel, weights: np.ndarray) -> np.ndarray:
        """The network's node costs with the penalties of ``weights`` (scaled)."""
        pay = weights[self.pen_vertex] * model.excess[self.pen_entry]
        return self.node + model.scale * np.bincount(self.pen_row, weights=pay, minlength=len(self.node))

    def fixed_penalty(self, model: PenaltyModel, weights: np.ndarray) -> float:
        """The scaled penalties of the vertices the reductions fixed."""
        return model.scale * float(weights[self.fixed_vertex] @ model.excess[self.fixed_entry])

    def lift(self, values: np.ndarray) -> np.ndarray:
        """The original problem's assignment from the network's values."""
        picked = {v: int(o[x]) for v, o, x in zip(self.free, self.open, values.tolist(), strict=True)}
        return np.asarray(self.reducer.lift(picked), dtype=np.int64)


def _segment_min(values: np.ndarray, off: np.ndarray) -> np.ndarray:
    out = np.full(len(off) - 1, np.inf)
    nonempty = np.diff(off) > 0
    out[nonempty] = np.minimum.reduceat(values, off[:-1][nonempty])
    return out


def _segment_max(values: np.ndarray, off: np.ndarray) -> np.ndarray:
    out = np.full(len(off) - 1, -np.inf)
    nonempty = np.diff(off) > 0
    out[nonempty] = np.maximum.reduceat(values, off[:-1][nonempty])
    return out


def _finite_max_sum(values: np.ndarray, off: np.ndarray) -> float:
    top = _segment_max(np.where(np.isfinite(values), values, -np.inf), off)
    return float(top[np.isfinite(top)].sum())


def _interval_sum(values: np.ndarray, start: np.ndarray, end: np.ndarray, slots: int) -> np.ndarray:
    diff = np.zeros(slots + 1)
    np.add.at(diff, start, values)
    np.add.at(diff, end, -values)
    return np.cumsum(diff[:-1])


def _range_argmin(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per query, the index of the least value in ``values[lo:hi]`` (a sparse table; ``lo`` for
    empty ranges)."""
    out = lo.copy()
    length = hi - lo
    ask = np.flatnonzero(length > 0)
    if ask.size == 0:
        return out
    levels = [np.arange(len(values))]
    span = 1
    while span * 2 <= int(length[ask].max()):
        prev = levels[-1]
        a, b = prev[:-span], prev[span:]
        levels.append(np.where(values[b] < values[a], b, a))
        span *= 2
    level = np.floor(np.log2(length[ask])).astype(np.int64)
    for j in np.unique(level).tolist():
        sel = ask[level == j]
        a = levels[j][lo[sel]]
        b = levels[j][hi[sel] - (1 << j)]
        out[sel] = np.where(values[b] < values[a], b, a)
    return out


# ---------------------------------------------------------------------------------------------
# One penalised run: the model's cost function network with the penalties, solved by toulbar2.

_MODEL: PenaltyModel | None = None  # a worker's model and engine, set once when it starts
_ENGINE: LocalEngine | None = None


def _start_worker(model: PenaltyModel, engine: LocalEngine) -> None:
    global _MODEL, _ENGINE
    _MODEL, _ENGINE = model, engine
    as_child()


def as_child() -> None:
    """Set up a forked child (a worker, or the run beside an exact one): Linux ends it when its
    parent ends (a contest harness may kill the parent, which then leaves at once without
    shutting its pool down), and SIGTERM and SIGINT take their default action in it. The parent's
    handlers, inherited by the fork, must not run here: ``stratopt iopddl`` answers SIGTERM by
    printing its best assignment, and a child holding a stale copy would print it too."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown still ends the workers
        pass


def _worker_run(
    weights: np.ndarray,
    seconds: int,
    seed: int,
    prices: np.ndarray | None,
    budget: float | None,
    trws: float | None = None,
) -> Attempt:
    assert _MODEL is not None and _ENGINE is not None
    return attempt(_MODEL, _ENGINE, weights, seconds, seed, prices, budget, trws)


def _ray_run(
    shared: tuple[PenaltyModel, LocalEngine],
    weights: np.ndarray,
    seconds: int,
    seed: int,
    prices: np.ndarray | None,
    budget: float | None,
    trws: float | None = None,
) -> Attempt:
    model, engine = shared
    return attempt(model, engine, weights, seconds, seed, prices, budget, trws)


@dataclass
class Attempt:
    """One weight vector's outcome: toulbar2's answer on the penalised problem (or None), the
    bound it proves, toulbar2's seconds, and the assignments made from the answer for the true
    problem (the answer itself if it keeps the limit, else its repairs), each polished."""

    raw: np.ndarray | None
    bound: float
    seconds: float
    fixed: list[np.ndarray]


def attempt(
    model: PenaltyModel,
    engine: LocalEngine,
    weights: np.ndarray,
    seconds: int,
    seed: int,
    prices: np.ndarray | None = None,
    budget: float | None = None,
    trws: float | None = None,
) -> Attempt:
    """A penalised run, then repair and polish of its answer (in the worker that ran it, so
    that the workers, not the search's own process, do the work). ``budget``: the seconds, from
    the start of this call, after which the repairs and polish stop (a duration, not a clock
    time, so that it holds on another machine of a Ray cluster)."""
    deadline = None if budget is None else time.monotonic() + budget
    a, bound, took = run_penalised(model, weights, seconds, seed, prices, trws)
    if a is None:
        return Attempt(None, bound, took, [])

    def left() -> float:
        return math.inf if deadline is None else deadline - time.monotonic()

    def out_of_time() -> bool:
        return left() <= 0

    feasible = evaluate(engine.problem, a).feasible
    if not engine.has_limit:
        return Attempt(a, bound, took, [a] if feasible else [])
    candidates = [a] if feasible else _repairs(model, engine, a, out_of_time, left, np.random.default_rng(seed))
    return Attempt(a, bound, took, [polish(engine, c, out_of_time) for c in candidates])


def run_penalised(
    model: PenaltyModel,
    weights: np.ndarray,
    seconds: int,
    seed: int,
    prices: np.ndarray | None = None,
    trws: float | None = None,
) -> tuple[np.ndarray | None, float, float]:
    """toulbar2 on the penalised problem for at most ``seconds`` of CPU time (whole seconds, at
    least one): (assignment or None, a proven lower bound under the limit, seconds taken).
    ``prices``: slot prices that cover ``weights``, for the bound (see :meth:`PenaltyModel.dual_value`).
    ``trws``: the accuracy of TRW-S message passing before the search (:data:`TRWS_ACCURACY`), or None."""
    started = time.perf_counter()
    net = model.network
    assert net is not None
    if len(net.k):
        values, dual, functions = _toulbar2(
            net.k,
            net.node_off,
            net.penalised(model, weights),
            net.edges,
            net.edge_off,
            net.edge,
            seconds,
            seed,
            trws=trws,
        )
    else:  # the reductions decided every vertex
        values, dual, functions = np.zeros(0, dtype=np.int64), 0.0, 0
    # The network's bound plus what the reductions took out bounds the model's shifted penalised
    # problem; rounding moved each function's chosen entry by at most 1/2 (scaled units).
    penalised_bound = dual - 0.5 * functions + net.shift + net.fixed_penalty(model, weights) - model.shift
    bound = model.dual_value(weights, penalised_bound, prices)
    a = None if values is None or net.reducer.infeasible else net.lift(values)
    return a, bound, time.perf_counter() - started


def _toulbar2(
    k: np.ndarray,
    node_off: np.ndarray,
    node: np.ndarray,
    edges: np.ndarray,
    edge_off: np.ndarray,
    edge: np.ndarray,
    seconds: float,
    seed: int,
    rows: Sequence[tuple[list[tuple[int, int, int]], int]] = (),
    trws: float | None = None,
) -> tuple[np.ndarray | None, float, int]:
    """One cost function network (float costs, ``inf`` forbidden, rounded here) solved by
    toulbar2, with optional knapsack rows ``(terms (variable, value, usage), capacity)``, after
    TRW-S message passing to accuracy ``trws`` when given (see :data:`TRWS_ACCURACY`):
    (values or None, its dual bound, the number of cost functions)."""
    import pytoulbar2

    node = np.round(node)
    edge = np.round(edge)
    # The hard cost: above every total of allowed entries, so no forbidden entry is ever preferred.
    top = int(_finite_max_sum(node, node_off) + _finite_max_sum(edge, edge_off)) + 1
    node_int = np.where(np.isfinite(node), node, top).astype(np.int64)
    edge_int = np.where(np.isfinite(edge), edge, top).astype(np.int64)
    cfn = pytoulbar2.CFN(ubinit=None, verbose=-1, seed=seed)
    saved = cfn.Option.lds, cfn.Option.hbfs, cfn.Option.trwsAccuracy
    try:
        if trws is not None:
            cfn.Option.trwsAccuracy = trws
        return _post_and_solve(cfn, k, node_off, node_int, edges, edge_off, edge_int, seconds, rows)
    except (cfn.Contradiction, cfn.SolverOut):
        # An empty domain or a knapsack nothing meets (Contradiction) proves nothing to stop for:
        # the caller treats it as no answer.
        return None, -math.inf, 0
    finally:
        # toulbar2's time limit is a process-wide alarm that outlives a run that ends early; left
        # armed, it would interrupt the next network built in this process. Its options are
        # process-wide too: LDS (and the HBFS it turns off) left set would cost a later exact run
        # (wcsp) its proof.
        cfn.CFN.timerStop()
        cfn.Option.lds, cfn.Option.hbfs, cfn.Option.trwsAccuracy = saved


def _post_and_solve(
    cfn: Any,
    k: np.ndarray,
    node_off: np.ndarray,
    node_int: np.ndarray,
    edges: np.ndarray,
    edge_off: np.ndarray,
    edge_int: np.ndarray,
    seconds: float,
    rows: Sequence[tuple[list[tuple[int, int, int]], int]],
) -> tuple[np.ndarray | None, float, int]:
    cfn.Option.lds = 4  # limited discrepancy search first: good answers early (the contest winner's setting)
    wcsp = cfn.CFN.wcsp
    ks, off, eoff = k.tolist(), node_off.tolist(), edge_off.tolist()
    for v, kv in enumerate(ks):
        wcsp.makeEnumeratedVariable(f"x{v}", 0, kv - 1)
    for v, kv in enumerate(ks):
        if kv > 1:
            wcsp.postUnaryConstraint(v, node_int[off[v] : off[v + 1]].tolist(), False)
    functions = len(ks)
    for e, (u, v) in enumerate(edges.tolist()):
        if ks[u] * ks[v] > 1:
            wcsp.postBinaryConstraint(u, v, edge_int[eoff[e] : eoff[e + 1]].tolist(), False)
            functions += 1
    for terms, capacity in rows:
        cfn.AddGeneralizedLinearConstraint(terms, "<=", capacity)
    wcsp.sortConstraints()
    found = cfn.Solve(timeLimit=max(1, int(seconds)))
    values = None if found is None else np.asarray(found[0], dtype=np.int64)
    return values, float(cfn.GetDDualBound()), functions


# ---------------------------------------------------------------------------------------------
# Repair and polish: local moves on the true costs.


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
        cls = engine._build_class(verts)
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
) -> np.ndarray | None:
    """The vertices in ``free`` re-solved by toulbar2 under ``weights``, every other vertex kept:
    a large-neighbourhood move, which changes coupled vertices together where a single-vertex
    move would meet a forbidden pair. With ``slots`` (integer usages only), the usage at each of
    those time slots is kept within the limit by a knapsack row over the free vertices live
    there. None when toulbar2 finds nothing in time (or nothing meets the rows)."""
    verts = np.flatnonzero(free)
    if verts.size == 0:
        return None
    outside = free[engine.inc_x] & ~free[engine.inc_other]
    cls = engine._build_class(verts, incidence_mask=outside)
    unary = engine.local_costs(cls, a)  # own cost plus edges to the kept vertices
    unary = np.where(unary >= FORBIDDEN, np.inf, unary + weights[verts][cls.slot_vertex] * model.excess[cls.slots])
    seg_off = np.append(cls.seg_start, len(cls.slots))
    low = _segment_min(unary, seg_off)
    unary = (unary - np.repeat(np.where(np.isfinite(low), low, 0.0), cls.seg_len)) * model.scale
    local = np.full(model.n, -1, dtype=np.int64)
    local[verts] = np.arange(len(verts))
    inner = free[model.edges[:, 0]] & free[model.edges[:, 1]]
    sizes = np.diff(model.edge_off)[inner]
    rows, within = _ragged_arange(sizes)
    table = model.edge[model.edge_off[:-1][inner][rows] + within]
    knapsacks: list[tuple[list[tuple[int, int, int]], int]] = []
    if slots is not None:
        limit = engine.problem.usage_limit
        profile = engine.profile(a)
        current = engine.usage[engine.off[:-1] + a]
        for t in slots.tolist():
            members = verts[(engine.start[verts] <= t) & (engine.end[verts] > t)]
            capacity = int(limit - (profile[t] - current[members].sum()))
            terms = [
                (int(local[v]), c, int(use))
                for v in members.tolist()
                for c, use in enumerate(engine.usage[engine.off[v] : engine.off[v + 1]].tolist())
                if use
            ]
            knapsacks.append((terms, capacity))
    values, _, _ = _toulbar2(
        cls.seg_len,
        seg_off,
        unary,
        local[model.edges[inner]],
        np.append(0, np.cumsum(sizes)),
        table,
        seconds,
        seed,
        knapsacks,
    )
    if values is None:
        return None
    out = a.copy()
    out[verts] = values
    return out


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


def polish(engine: LocalEngine, a: np.ndarray, out_of_time: Callable[[], bool]) -> np.ndarray:
    """Best-response descent on the true costs, keeping the usage limit (never raises the cost)."""
    polished, _, _ = engine.descend(a, guard=True, deadline_check=out_of_time)
    return polished


# ---------------------------------------------------------------------------------------------
# The search


class _Weights:
    """Per-vertex bisection in log space between the highest weight whose run broke the limit
    in the vertex's interval (``low``) and the lowest whose run kept it there (``high``)."""

    def __init__(self, model: PenaltyModel, unit: float) -> None:
        self.model = model
        self.unit = unit
        self.low = np.zeros(model.n)
        self.high = np.full(model.n, np.inf)

    def propose(self, f: float) -> np.ndarray:
        """Weights for a run; ``f`` in (0, 1) places them between the bounds (or, where a bound is
        missing, how far to step beyond the other)."""
        low, high = self.low, self.high
        both = (low > 0) & np.isfinite(high)
        w = np.where(both, low ** (1 - f) * np.where(both, high, 1.0) ** f, 0.0)
        only_low = (low > 0) & ~np.isfinite(high)
        w = np.where(only_low, low * 10.0 ** (0.5 + f), w)
        only_high = (low == 0) & np.isfinite(high)
        w = np.where(only_high, high / 10.0 ** (0.5 + f), w)
        none = (low == 0) & ~np.isfinite(high)
        w = np.where(none, self.unit * 10.0 ** (4 * f - 2), w)
        w = np.minimum(w, self.model.weight_cap)
        return np.where(self.model.relevant, w, 0.0)

    def learn(self, weights: np.ndarray, broken: np.ndarray) -> None:
        rel = self.model.relevant
        up = rel & broken
        self.low[up] = np.maximum(self.low[up], weights[up])
        down = rel & ~broken
        self.high[down] = np.minimum(self.high[down], weights[down])
        # Runs are heuristic: a weight that broke may lie above one that kept. Trust the newest,
        # and keep a narrow bracket around it (a factor of two) rather than forgetting the other side.
        clash = rel & (self.low >= self.high)
        self.low[clash & up] = weights[clash & up]
        self.high[clash & up] = 2.0 * weights[clash & up]
        self.high[clash & down] = weights[clash & down]
        self.low[clash & down] = 0.5 * weights[clash & down]


class Lagrange:
    """The usage limit as per-vertex penalties, each penalised problem solved by toulbar2.

    Weight vectors run in worker processes (one per core by default), each for ``seconds`` of
    toulbar2; every answer is repaired to the limit where it breaks it, polished, and offered to
    ``incumbent`` when it is the best so far; the weights then narrow per vertex. Without a time
    limit it stops after ``runs`` runs. The status is FEASIBLE (never a proof of optimality; the
    Lagrangian dual value is the bound) or NO_SOLUTION; INFEASIBLE only when the least usage of
    every vertex already breaks the limit somewhere (a proof).

    References
    ----------
    "Soft Constraints, Strong Solutions: Optimizing Intra-Operator Parallelism for Distributed Deep
    Learning" (the IOPDDL contest's winning entry): usage penalties per vertex, toulbar2, scales in
    parallel, per-vertex narrowing.

    Examples
    --------
    >>> from stratopt import load_problem, solve
    >>> r = solve(load_problem("example"), "lagrange", workers=0)
    >>> r.status.value, r.objective, r.bound <= 445
    ('feasible', 445, True)
    """

    name = "lagrange"
    exact = False

    def solve(
        self,
        problem: StrategyProblem,
        *,
        time_limit: float | None = None,
        seed: int | None = None,
        workers: int | None = None,
        executor: str = "process",
        seconds: float | None = None,
        runs: int = 8,
        unit: float = 1.0,
        trws: float | None = TRWS_ACCURACY,
        progress: Callable[[str], None] | None = None,
        incumbent: Callable[[tuple[int, ...]], None] | None = None,
    ) -> Result:
        """``workers``: processes (None: one per core; 0: toulbar2 in this process). ``executor``:
        ``"process"`` (forked worker processes) or ``"ray"`` (Ray tasks on the cluster
        ``ray.init()`` connects to; ``workers`` None: one per CPU of the cluster). ``seconds``:
        toulbar2 time per run (default: a quarter of the time limit, at most 20; 10 without one).
        ``runs``: how many runs without a time limit. ``unit``: the weight (cost per unit of usage)
        the first runs spread around, from a hundredth to a hundred times it. ``trws``: each run's
        TRW-S accuracy (:data:`TRWS_ACCURACY`; None: toulbar2's search alone)."""
        if trws is not None and not (isinstance(trws, (int, float)) and 0 < trws < 1):
            raise ModelError(f"lagrange: trws must be an accuracy in (0, 1) or None, got {trws!r}")
        t0 = time.perf_counter()
        deadline = None if time_limit is None else t0 + time_limit

        def left() -> float:
            return math.inf if deadline is None else deadline - time.perf_counter()

        def out_of_time() -> bool:
            return left() <= 0

        def say(msg: str) -> None:
            if progress is not None:
                progress(f"[lagrange {time.perf_counter() - t0:6.1f}s] {msg}")

        model = PenaltyModel.build(problem)
        engine = LocalEngine(problem)
        has_limit = engine.has_limit
        stats: dict[str, Any] = {"relevant_vertices": int(model.relevant.sum()), "scale": model.scale}
        if model.network is not None:
            stats["reductions"] = model.network.stats  # what the network toulbar2 gets lost, per reduction
        if has_limit and len(model.room) and model.room.min() < 0:
            stats["proof"] = "every vertex at its least usage still exceeds the limit"
            return Result(self.name, Status.INFEASIBLE, stats=stats)
        if seconds is None:
            seconds = 10.0 if time_limit is None else max(1.0, min(20.0, time_limit / 4))
        if executor not in ("process", "ray"):
            raise ModelError(f"lagrange: unknown executor {executor!r}; choose 'process' or 'ray'")
        if workers is None and executor == "process":
            workers = os.cpu_count() or 1
        weights = _Weights(model, unit)
        rng = np.random.default_rng(0 if seed is None else seed)
        best: np.ndarray | None = None
        best_weights: np.ndarray | None = None
        best_cost = math.inf
        # Every function at its least allowed entry (weights zero, penalised bound zero): the
        # floor every Lagrangian value from the runs must beat to be worth reporting.
        bound = model.dual_value(np.zeros(model.n), 0.0)
        history: list[dict[str, Any]] = []
        say(
            f"{problem.num_vertices} vertices, {int(model.relevant.sum())} penalised; {'Ray tasks' if executor == 'ray' else f'{workers or 1} worker(s)'}, {seconds:.0f} s per run{'' if trws is None else f', TRW-S to {trws:g}'}"
        )

        # Slot prices for the bound runs (projected subgradient ascent on the Lagrangian dual,
        # Polyak steps towards the best cost; the factor halves after two runs without progress).
        prices = np.zeros(len(model.room))
        slot_start, slot_end = (problem.time_slots[1], problem.time_slots[2]) if has_limit else (model.k, model.k)
        ascent = {"theta": 1.0, "best": -math.inf, "stalls": 0, "runs": 0}

        def learn_prices(lam: np.ndarray, a: np.ndarray, run_bound: float) -> None:
            nonlocal prices
            ascent["runs"] += 1
            if run_bound > ascent["best"]:
                ascent.update(best=run_bound, stalls=0)
            else:
                ascent["stalls"] += 1
                if ascent["stalls"] >= 2:
                    ascent.update(theta=ascent["theta"] / 2, stalls=0)
            g = engine.profile(a).astype(np.float64) - float(problem.usage_limit or 0)
            move = (lam > 0) | (g > 0)
            norm = float(g[move] @ g[move])
            if norm > 0 and math.isfinite(best_cost):
                prices = np.maximum(0.0, lam + ascent["theta"] * (best_cost - run_bound) / norm * g)

        def take(w: np.ndarray, outcome: Attempt, lam: np.ndarray | None = None) -> None:
            nonlocal best, best_cost, bound, best_weights
            a, took = outcome.raw, outcome.seconds
            bound = max(bound, outcome.bound)
            if a is None:
                history.append({"seconds": round(took, 2), "found": False, "bound_run": lam is not None})
                if lam is not None:  # too short to find the answer the ascent steps from
                    short["seconds"] = min(seconds, 2 * short["seconds"])
                return
            if lam is not None:
                learn_prices(lam, a, outcome.bound)
            ev = evaluate(problem, a)
            broken = np.zeros(model.n, dtype=bool)
            peak = ev.peak_usage
            if has_limit:
                profile = engine.profile(a)
                broken = engine.range_max(profile, engine.start, engine.end) > problem.usage_limit
                # A bound run's weights follow the slot prices, not the narrowing: it teaches the
                # narrowing only where its run is exact (short heuristic runs at such weights
                # dragged every vertex's upper bracket down on IOPDDL S: 1.035x against 1.007-1.023x).
                if lam is None or proving():
                    weights.learn(w, broken)
            cost = math.inf
            for fixed in outcome.fixed:
                final = evaluate(problem, fixed)
                if final.feasible and float(final.objective) < cost:
                    cost = float(final.objective)
                    if cost < best_cost:
                        best, best_cost, best_weights = fixed, cost, w
                        if incumbent is not None:
                            incumbent(tuple(fixed.tolist()))
            history.append(
                {
                    "seconds": round(took, 2),
                    "raw_cost": float(ev.objective),
                    "peak": peak,
                    "cost": cost,
                    "broken": int(broken.sum()),
                    "bound_run": lam is not None,
                }
            )
            say(
                f"{'bound ' if lam is not None else ''}run {len(history)}: weights ~{np.median(w[model.relevant]) if model.relevant.any() else 0:.3g}, "
                f"cost {float(ev.objective):.6g}, peak {peak} ({int(broken.sum())} vertices broken) -> "
                f"{'kept ' if ev.feasible else 'repaired ' if math.isfinite(cost) else 'unrepaired '}{cost:.6g}; "
                f"best {best_cost:.6g}, bound {bound:.6g}"
            )

        def proving() -> bool:
            took = [h["seconds"] for h in history if not h.get("bound_run")]
            return bool(took) and float(np.median(took)) < seconds / 2

        # Answer runs (narrowing and exploiting) count on their own: the bound runs come between
        # them, so the answer runs' sequence is the same with or without them.
        schedule = {"answers": 0, "since_bound": 0}

        def next_weights() -> tuple[np.ndarray, np.ndarray | None]:
            if not has_limit:
                return np.zeros(model.n), None
            # After every BOUND_EVERY - 1 answer runs, a run of the slot prices of the bound's
            # ascent: weights that a price per slot covers exactly, so that its Lagrangian value
            # is as high as those prices allow (capped weights stay covered: a lower weight only
            # lowers the bound). In place of an answer run instead, they ended IOPDDL S at
            # 1.028-1.035x three times (1.007-1.023x without them).
            if best_weights is not None and schedule["since_bound"] >= BOUND_EVERY - 1:
                schedule["since_bound"] = 0
                lam = prices.copy()
                return np.minimum(model.weights_of(lam, slot_start, slot_end), model.weight_cap), lam
            i = schedule["answers"]
            schedule["answers"] += 1
            schedule["since_bound"] += 1
            # Every EXPLOIT-th run tries the weights of the best answer so far, each shaken by a
            # random factor, with a new toulbar2 seed.
            if best_weights is not None and i % EXPLOIT == EXPLOIT - 1:
                return np.minimum(best_weights * np.exp(rng.normal(0.0, SHAKE, model.n)), model.weight_cap), None
            # Spread the runs: the golden-ratio sequence fills (0, 1) evenly whatever the count.
            f = (0.5 + i * 0.6180339887) % 1.0 if i else 0.5
            return weights.propose(min(max(f, 0.05), 0.95)), None

        # Seconds of the bound runs where toulbar2 does not prove its runs (see BOUND_FRACTION).
        short = {"seconds": max(2.0, seconds / BOUND_FRACTION)}

        def run_seconds(lam: np.ndarray | None = None) -> int:
            # Without a limit there is one run: it gets the whole time (less a second to answer).
            own = seconds if lam is None or proving() else short["seconds"]
            return max(1, int(min(own if has_limit or deadline is None else math.inf, left() - 1.0)))

        def more(started: int) -> bool:
            if deadline is None:
                return started < runs
            return left() > 2.0

        started = 0
        if workers == 0:
            while more(started):
                w, lam = next_weights()
                started += 1
                budget = None if deadline is None else left()
                take(
                    w, attempt(model, engine, w, run_seconds(lam), int(rng.integers(1, 2**31)), lam, budget, trws), lam
                )
                if not has_limit:
                    break
        else:
            pool = _RayPool(model, engine, workers) if executor == "ray" else _ProcessPool(model, engine, workers or 1)
            stats["executor"] = executor
            try:
                while True:
                    while pool.free() and more(started) and (has_limit or started == 0):
                        w, lam = next_weights()
                        started += 1
                        seed_i = int(rng.integers(1, 2**31))
                        pool.submit(
                            (w, lam), w, run_seconds(lam), seed_i, lam, None if deadline is None else left(), trws
                        )
                    if not pool.busy():
                        break
                    (w, lam), outcome = pool.next_done()
                    if isinstance(outcome, BaseException):  # a worker died (toulbar2 crashed, memory)
                        stats["worker_error"] = f"{type(outcome).__name__}: {outcome}"
                        say(f"a worker failed ({stats['worker_error']}); stopping with the best so far")
                        break
                    take(w, outcome, lam)
            finally:
                pool.close()
        stats.update(runs=len(history), history=history, lagrangian_bound=bound, bound_runs=ascent["runs"])
        lower = _round_down(problem, bound)
        if best is None:
            return Result(
                self.name,
                Status.NO_SOLUTION,
                limit=Limit.TIME if out_of_time() else Limit.ITERATION,
                bound=lower,
                stats=stats,
            )
        return Result(
            self.name,
            Status.FEASIBLE,
            assignment=tuple(best.tolist()),
            bound=lower,
            limit=Limit.TIME if out_of_time() else Limit.HEURISTIC,
            stats=stats,
        )


class _ProcessPool:
    """Worker processes forked with the model and engine (each inherits them once)."""

    def __init__(self, model: PenaltyModel, engine: LocalEngine, workers: int) -> None:
        self.workers = workers
        context = multiprocessing.get_context("fork")
        self.pool = cf.ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start_worker, initargs=(model, engine)
        )
        self.pending: dict[cf.Future, Any] = {}

    def free(self) -> bool:
        return len(self.pending) < self.workers

    def busy(self) -> bool:
        return bool(self.pending)

    def submit(self, key: Any, *args: Any) -> None:
        self.pending[self.pool.submit(_worker_run, *args)] = key

    def next_done(self) -> tuple[Any, Attempt | BaseException]:
        done, _ = cf.wait(self.pending, return_when=cf.FIRST_COMPLETED)
        fut = next(iter(done))
        key = self.pending.pop(fut)
        try:
            return key, fut.result()
        except Exception as exc:
            return key, exc

    def close(self) -> None:
        for fut in self.pending:
            fut.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)


class _RayPool:
    """Ray tasks on the cluster ``ray.init()`` connects to (a local one if none is running): the
    model and engine go to the object store once; ``workers`` (None: the cluster's CPUs) runs at a
    time, so a cluster tries more weight vectors in the same time."""

    def __init__(self, model: PenaltyModel, engine: LocalEngine, workers: int | None) -> None:
        try:
            import ray
        except ImportError:
            raise SolverUnavailableError("lagrange's ray executor needs Ray: pip install 'stratopt[ray]'") from None
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        self.ray = ray
        self.workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.shared = ray.put((model, engine))
        self.remote = ray.remote(_ray_run)
        self.pending: dict[Any, Any] = {}

    def free(self) -> bool:
        return len(self.pending) < self.workers

    def busy(self) -> bool:
        return bool(self.pending)

    def submit(self, key: Any, *args: Any) -> None:
        self.pending[self.remote.remote(self.shared, *args)] = key

    def next_done(self) -> tuple[Any, Attempt | BaseException]:
        done, _ = self.ray.wait(list(self.pending), num_returns=1)
        key = self.pending.pop(done[0])
        try:
            return key, self.ray.get(done[0])
        except Exception as exc:
            return key, exc

    def close(self) -> None:
        for ref in self.pending:
            self.ray.cancel(ref, force=True)


def _repairs(
    model: PenaltyModel,
    engine: LocalEngine,
    a: np.ndarray,
    out_of_time: Callable[[], bool],
    left: Callable[[], float],
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Feasible assignments made from one that breaks the limit: single-vertex moves at the
    worst violation, and (close to the limit, integer usages) toulbar2 re-solving the region
    around the over-full slots under knapsack rows there."""
    out = []
    single = repair(engine, a, out_of_time)
    if single is not None:
        out.append(single)
    problem = engine.problem
    if problem.usage_flat is not None and problem.usage_flat.dtype.kind in "iu":
        region = repair_region(model, engine, a, left, int(rng.integers(1, 2**31)))
        if region is not None:
            out.append(region)
    return out


def _round_down(problem: StrategyProblem, bound: float) -> float | int:
    """The bound less a margin for float error. With integer costs the optimum is an integer at
    least the true bound, hence at least its ceiling: that is the bound integer problems get."""
    safe = bound - 1e-9 * max(1.0, abs(bound))
    return math.ceil(safe) if problem.is_integral else safe
