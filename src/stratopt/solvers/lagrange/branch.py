"""The reduced model solved whole by HiGHS's branch and cut, where it is small enough
(:func:`branch_bound`).

The linear relaxation of :mod:`.relaxation` with its network choices made integer is the reduced
problem itself: one choice per network vertex (the pair columns and the running usage sums follow
from them), every usage row exact. So on a small network HiGHS's branch and cut answers the
problem, and its dual bound is the problem's: where it closes, the answer is optimal. On IOPDDL P
(198 network vertices, 51k columns) it proves the optimum 651,833,115,436 in about 42 s on one
core, 1.6% below the best cost the contest's entries submitted; the relaxation's own bound lies
1.57% below it, and the search's toulbar2 runs had ended 1.6% above it. What closes it is an
incumbent near the optimum (HiGHS's own, from its sub-MIP heuristic): reduced-cost fixing then
takes out about half of the columns and the restarted root proves it. The search's best answer
goes in as HiGHS's start.

It runs after the relaxation (whose interior point is far quicker than the simplex HiGHS's root
uses: IOPDDL A's root takes 77 s against the interior point's 10 s), in one worker for the rest of
the time limit, where its root fits half of that at :data:`ROOT_RATE`.

The bound is HiGHS's (both gaps 0, as :class:`~stratopt.solvers.mip.MipHighs` has its relative
gap): its node relaxations are solved to HiGHS's tolerances, not certified as
:func:`.relaxation.certified_bound` certifies the relaxation's. The search takes it only where it
lies at or below every answer's exact cost (one above an answer is wrong, and dropped), and
recomputes the answer exactly like every other.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from stratopt.solvers.lagrange.model import Network, PenaltyModel
from stratopt.solvers.lagrange.relaxation import LpBound, Relaxation

__all__ = ["BRANCH_METHOD", "ROOT_RATE", "BranchJob", "branch_bound", "network_values"]

#: Columns per second of HiGHS's root (dual simplex, presolve and cuts) on the relaxation with its
#: choices integer, on this project's 2-core machine (IOPDDL P 51k columns: root 26 s, A 74k: 77
#: s, C 114k: unsolved after 150 s). Branch and cut runs where ``columns / ROOT_RATE`` is at most
#: half the time it gets: at the contest limits, P alone of the instances the relaxation serves.
ROOT_RATE = 1000.0

#: The largest cost entry HiGHS sees in branch and cut (see :func:`branch_bound`).
COST_RANGE = 1e9

#: How a bound from branch and cut was obtained (:attr:`~stratopt.solvers.base.Result.bound_method`).
BRANCH_METHOD = (
    "mip: HiGHS's branch and cut on the reduced model (the relaxation with integer choices; "
    "its dual bound, to HiGHS's tolerances)"
)


@dataclass(frozen=True)
class BranchJob:
    """Branch and cut as a worker's job: HiGHS stopped after ``seconds``, starting from ``known``
    (an assignment of the problem, the search's best; None: no start)."""

    seconds: float
    known: np.ndarray | None = None


def network_values(net: Network, assignment: np.ndarray) -> np.ndarray | None:
    """The network's values (one choice index per network vertex) that ``assignment`` takes, or
    None where it picks a choice the reductions removed."""
    values = np.zeros(len(net.free), dtype=np.int64)
    for i, (v, opened) in enumerate(zip(net.free, net.open, strict=True)):
        at = int(np.searchsorted(opened, assignment[v]))
        if at >= len(opened) or opened[at] != assignment[v]:
            return None
        values[i] = at
    return values


def branch_bound(model: PenaltyModel, start: np.ndarray, end: np.ndarray, job: BranchJob) -> LpBound:
    """HiGHS's branch and cut on the reduced model for ``job.seconds``: its dual bound, and its
    best answer lifted to the problem (``assignment``; None where it found none)."""
    import highspy

    t0 = time.perf_counter()
    net = model.network
    assert net is not None
    relax = Relaxation.build(model, start, end)
    m = relax.matrix
    if relax.infeasible or m.shape[1] == 0:  # the relaxation's own job has said so already
        return LpBound(None, None, "nothing to branch on", time.perf_counter() - t0, m.shape[1], m.shape[0])
    nx = len(net.node)
    # HiGHS prunes a node whose bound comes within its feasibility tolerance (1e-6) of the
    # incumbent, in the objective's own units: with the largest cost entry at 1 (the relaxation's
    # units) that is 1e-6 of an entry, 37 million units on IOPDDL P, where branch and cut then
    # stopped 200,000 units above the optimum with a bound above it. At COST_RANGE it is a
    # thousand-millionth of an entry, well under a unit.
    relax = dataclasses.replace(relax, cost=relax.cost * COST_RANGE, cost_unit=relax.cost_unit / COST_RANGE)
    h = relax.highs("choose")
    h.setOptionValue("threads", 1)  # one worker: the others run toulbar2
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
    h.setOptionValue("random_seed", 0)
    h.changeColsIntegrality(nx, np.arange(nx, dtype=np.int32), np.full(nx, highspy.HighsVarType.kInteger))
    values = None if job.known is None else network_values(net, job.known)
    if values is not None:
        picked = np.zeros(nx)
        picked[net.node_off[:-1] + values] = 1.0
        h.setSolution(nx, np.arange(nx, dtype=np.int32), picked)  # HiGHS completes the rest
    h.setOptionValue("time_limit", max(1.0, job.seconds - (time.perf_counter() - t0)))
    try:
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        info = h.getInfo()
        solution = h.getSolution()
    finally:
        highspy.Highs.resetGlobalScheduler(True)  # see relaxation.lp_bound
    dual = float(info.mip_dual_bound)
    bound = dual * relax.cost_unit + relax.offset if np.isfinite(dual) else None
    assignment = None
    objective = None
    if solution.value_valid and int(info.primal_solution_status) == 2:  # kSolutionStatusFeasible
        x = np.asarray(solution.col_value, dtype=np.float64)[:nx]
        chosen = np.maximum.reduceat(x, net.node_off[:-1]) if nx else np.zeros(0)
        values = np.array(
            [int(np.argmax(x[net.node_off[i] : net.node_off[i + 1]])) for i in range(len(net.k))], dtype=np.int64
        )
        if not len(chosen) or chosen.min() > 0.5:
            assignment = net.lift(values)
            objective = float(info.objective_function_value) * relax.cost_unit + relax.offset
    return LpBound(
        bound,
        None,
        status,
        time.perf_counter() - t0,
        m.shape[1],
        m.shape[0],
        objective=objective,
        method="mip",
        assignment=assignment,
    )
