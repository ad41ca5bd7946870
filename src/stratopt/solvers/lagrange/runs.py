"""One penalised run: the model's network with a weight vector's penalties solved by toulbar2, its
answer repaired to the limit and polished (:func:`attempt`)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from stratopt.problem import evaluate
from stratopt.solvers.lagrange.messages import Messages
from stratopt.solvers.lagrange.model import Network, PenaltyModel, finite_max_sum
from stratopt.solvers.lagrange.repair import polish, repairs
from stratopt.solvers.lagrange.toulbar import toulbar2
from stratopt.solvers.local_search import LocalEngine

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


#: Before toulbar2, each bound run (a run at the level method's slot prices) passes messages over
#: the network's edges at its weights (:class:`~stratopt.solvers.lagrange.messages.Messages`: block
#: coordinate ascent on the dual of the edges' linear relaxation, each worker's messages kept from
#: one run to the next) and hands toulbar2 the costs they reparametrise, with what they prove as a
#: constant: every assignment costs the same, and toulbar2's own bound starts from that floor. At
#: most this many sweeps, in at most :data:`REPARAM_SHARE` of the run's seconds. At fixed prices
#: (IOPDDL K, N and S, at the prices of a short message bound, 10 s of toulbar2;
#: ``scripts/bench_reparam.py``) toulbar2's proven bound rose by 1-11% and its penalised answer's
#: cost fell by 2-8% with 10-100 sweeps from cold, more with warm messages. Answer runs keep the
#: plain costs: in one whole search of N with every run reparametrised (contest limit, 2 cores) it
#: ended at 1.021x the best submitted cost with a gap of 36.0%; with bound runs alone, 1.0015x and
#: 18.5%.
REPARAM_SWEEPS = 20

#: The most of a run's seconds its message sweeps take (:data:`REPARAM_SWEEPS`).
REPARAM_SHARE = 0.1

#: The costs toulbar2 is given stay below this after the reparametrisation (their largest entries
#: summed over the functions), or the run takes the plain penalised costs.
_REPARAM_TOP = 2.0**56

_WARM: list[tuple[Network, Messages]] = []  # this process's network and its messages


@dataclass
class Attempt:
    """One weight vector's outcome: toulbar2's answer on the penalised problem (or None), the
    bound it proves, toulbar2's seconds, and the assignments made from the answer for the true
    problem (the answer itself if it keeps the limit, else its repairs), each polished."""

    raw: np.ndarray | None
    bound: float
    seconds: float
    fixed: list[np.ndarray]


@dataclass(frozen=True)
class Run:
    """One penalised run to make: the vertex weights, toulbar2's whole seconds and seed, the slot
    prices of a bound run (None for an answer run), the TRW-S accuracy (None: search alone), and
    whether toulbar2 stops at its search's first backtrack (``first``: the run that times it)."""

    weights: np.ndarray
    seconds: int
    seed: int
    prices: np.ndarray | None = None
    trws: float | None = None
    first: bool = False


def attempt(model: PenaltyModel, engine: LocalEngine, run: Run, budget: float | None = None) -> Attempt:
    """A penalised run, then repair and polish of its answer (in the worker that ran it, so
    that the workers, not the search's own process, do the work). ``budget``: the seconds, from
    the start of this call, after which the repairs and polish stop (a duration, not a clock
    time, so that it holds on another machine of a Ray cluster)."""
    deadline = None if budget is None else time.monotonic() + budget
    a, bound, took = run_penalised(model, run.weights, run.seconds, run.seed, run.prices, run.trws, run.first)
    if a is None:
        return Attempt(None, bound, took, [])

    def left() -> float:
        return math.inf if deadline is None else deadline - time.monotonic()

    feasible = evaluate(engine.problem, a).feasible
    if not engine.has_limit:
        return Attempt(a, bound, took, [a] if feasible else [])
    candidates = [a] if feasible else repairs(model, engine, a, left, run.seed)
    return Attempt(a, bound, took, [polish(model, engine, c, left) for c in candidates])


def run_penalised(
    model: PenaltyModel,
    weights: np.ndarray,
    seconds: int,
    seed: int,
    prices: np.ndarray | None = None,
    trws: float | None = None,
    first: bool = False,
) -> tuple[np.ndarray | None, float, float]:
    """toulbar2 on the penalised problem for at most ``seconds`` of CPU time (whole seconds, at
    least one): (assignment or None, a proven lower bound under the limit, seconds taken).
    ``prices``: slot prices that cover ``weights``, for the bound (see :meth:`PenaltyModel.dual_value`).
    ``trws``: the accuracy of TRW-S message passing before the search (:data:`TRWS_ACCURACY`), or None.
    ``first``: toulbar2 stops at its search's first backtrack."""
    started = time.perf_counter()
    net = model.network
    assert net is not None
    constant = 0.0
    if len(net.k):
        penalised = dataclasses.replace(net, node=net.penalised(model, weights))
        if prices is not None:  # a bound run
            penalised, constant = reparametrised(net, penalised.node, seconds * REPARAM_SHARE)
        values, dual, functions = toulbar2(penalised, seconds, seed, trws=trws, first=first)
    else:  # the reductions decided every vertex
        values, dual, functions = np.zeros(0, dtype=np.int64), 0.0, 0
    # The network's bound plus what the reductions and the messages took out bounds the model's
    # shifted penalised problem; rounding moved each function's chosen entry by at most 1/2 (scaled
    # units).
    penalised_bound = dual - 0.5 * functions + constant + net.shift + net.fixed_penalty(model, weights) - model.shift
    bound = model.dual_value(weights, penalised_bound, prices)
    a = None if values is None or net.reducer.infeasible else net.lift(values)
    return a, bound, time.perf_counter() - started


def reparametrised(
    net: Network, node: np.ndarray, seconds: float, messages: Messages | None = None, sweeps: int | None = None
) -> tuple[Network, float]:
    """The network with node costs ``node`` (scaled, penalties included) after ``messages`` (by
    default this process's), swept again at these costs (``sweeps``, by default
    :data:`REPARAM_SWEEPS`, within ``seconds``), and the constant they took out (what they prove,
    less a margin for floating-point rounding). The plain network and 0 where the reparametrised
    costs would grow past what toulbar2 is given."""
    plain = dataclasses.replace(net, node=node)
    sweeps = REPARAM_SWEEPS if sweeps is None else sweeps
    if not len(net.edges) or sweeps <= 0:
        return plain, 0.0
    if messages is None:
        if not _WARM or _WARM[0][0] is not net:
            _WARM[:] = [(net, Messages(net))]
        messages = _WARM[0][1]
    deadline = time.perf_counter() + seconds
    messages.reprice(node)
    for _ in range(sweeps):
        messages.sweep()
        if time.perf_counter() >= deadline:
            break
    new_node, new_edge, constant = messages.reparametrised()
    if not (
        np.isfinite(constant)
        and finite_max_sum(new_node, net.node_off) + finite_max_sum(new_edge, net.edge_off) < _REPARAM_TOP
    ):
        return plain, 0.0
    size = float(np.abs(new_node[np.isfinite(new_node)]).sum() + np.abs(new_edge[np.isfinite(new_edge)]).sum())
    return dataclasses.replace(net, node=new_node, edge=new_edge), constant - 1e-12 * (size + abs(constant))
