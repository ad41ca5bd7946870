"""The reduced model solved whole by HiGHS's branch and cut after its linear relaxation
(:func:`branch_bound`).

The linear relaxation of :mod:`.relaxation` with its network choices made integer is the reduced
problem itself: one choice per network vertex (the pair columns and the running usage sums follow
from them), every usage row exact. So HiGHS's branch and cut on it finds answers of the problem,
optimal ones where it closes: on IOPDDL P (198 network vertices, 51k columns) it finds
651,833,115,436, 1.6% below the best cost the contest's entries submitted, where the search's
toulbar2 runs had ended 1.6% above it. The search's best answer goes in as HiGHS's start.

It runs after the relaxation, in one worker for the rest of the time limit. First the
relaxation's reduced costs fix columns (:func:`fixed_by_reduced_cost`): every choice or pair whose
reduced cost takes the relaxation's certified bound past the best answer's cost is set at 0, since
no cheaper assignment uses it. That is what makes it fit the contest's limits: IOPDDL A's root
took 77 s on the whole model and 3.3 s after fixing (30k of 49k pair columns fixed against an
answer 0.45% above the bound); A, C and P close in 7-55 s.

Its bound is not taken, only its answers (recomputed exactly, like every other). HiGHS's bound is
its own claim, to its tolerances, with nothing to certify it: with costs scaled to a largest entry
of 1e9 it declared 662,196,688,373 optimal on P's canonical form with columns fixed, where
651,833,115,436 is feasible in the same model (at 1e6 and 1e3 it found that one); and at the
relaxation's own units (largest entry 1) its pruning tolerance, 1e-6 in the objective's units,
is 37 million units of P's costs. So the search's bound stays the certified one; branch and cut's
claim is in ``stats["branch"]["highs_bound"]``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from stratopt.solvers.lagrange.model import Network, PenaltyModel
from stratopt.solvers.lagrange.relaxation import LpBound, Relaxation

__all__ = [
    "FIX_MARGIN",
    "ROOT_RATE",
    "BranchJob",
    "branch_bound",
    "fixed_by_reduced_cost",
    "network_values",
]

#: Columns per second of HiGHS's root (dual simplex, presolve and cuts) on the whole relaxation
#: with its choices integer, on this project's 2-core machine (IOPDDL P 51k columns: root 26 s, A
#: 74k: 77 s, C 114k: unsolved after 150 s). Without an answer to fix columns against, branch and
#: cut runs only where ``columns / ROOT_RATE`` is at most half the time it gets.
ROOT_RATE = 1000.0

#: The largest cost entry HiGHS sees in branch and cut: its pruning tolerance is 1e-6 in the
#: objective's units, a millionth of an entry here (at 1e9, HiGHS's search went wrong on IOPDDL P:
#: see the module's docstring).
COST_RANGE = 1e6


@dataclass(frozen=True)
class BranchJob:
    """Branch and cut as a worker's job: HiGHS stopped after ``seconds``, starting from ``known``
    (an assignment of the problem, the search's best; None: no start). With ``reduced`` (the
    relaxation's reduced costs, :meth:`~.relaxation.Relaxation.reduced`), ``floor`` (its certified
    bound) and ``ceiling`` (``known``'s cost), every column whose reduced cost takes the bound past
    the ceiling is fixed at 0 first (:func:`fixed_by_reduced_cost`)."""

    seconds: float
    known: np.ndarray | None = None
    reduced: np.ndarray | None = None
    floor: float | None = None
    ceiling: float | None = None


def fixed_by_reduced_cost(reduced: np.ndarray, floor: float, ceiling: float) -> np.ndarray:
    """The columns to fix at 0: where ``floor + reduced`` passes ``ceiling`` (by more than a
    margin of 1e-6 of it, for float error), any assignment that sets the column costs more than
    ``ceiling`` (weak duality: the certified bound rises by the column's reduced cost), so every
    assignment cheaper than the answer that costs ``ceiling`` keeps it at 0, and that answer does
    too. Branch and cut on what is left finds every answer cheaper than ``ceiling``."""
    return np.asarray(floor + reduced > ceiling + FIX_MARGIN * max(1.0, abs(ceiling)))


#: The relative margin :func:`fixed_by_reduced_cost` leaves for float error.
FIX_MARGIN = 1e-6


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
    """HiGHS's branch and cut on the reduced model for ``job.seconds``: its best answer lifted to
    the problem (``assignment``; None where it found none), and HiGHS's dual bound (its claim,
    capped at ``job.ceiling`` where columns were fixed; see the module's docstring)."""
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
    # units) that is 37 million units on IOPDDL P, where branch and cut stopped 200,000 units above
    # the optimum. At COST_RANGE it is a millionth of an entry (37 units there).
    relax = dataclasses.replace(relax, cost=relax.cost * COST_RANGE, cost_unit=relax.cost_unit / COST_RANGE)
    fixed = 0
    if (
        job.reduced is not None
        and job.floor is not None
        and job.ceiling is not None
        and len(job.reduced) == relax.u_first
    ):
        fix = fixed_by_reduced_cost(job.reduced, job.floor, job.ceiling)
        upper = relax.col_upper.copy()
        upper[: len(fix)][fix] = 0.0
        relax = dataclasses.replace(relax, col_upper=upper)
        fixed = int(fix.sum())
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
    # A HiGHS run elsewhere in this process (PuLP's, for mip-highs) may have left the process-wide
    # scheduler running with other threads: then this run, with one thread, ends "Not Set".
    highspy.Highs.resetGlobalScheduler(True)
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
    if bound is not None and job.ceiling is not None and fixed:
        bound = min(bound, job.ceiling)  # what the fixing cut off costs more than the ceiling
    # (HiGHS's claim: the search keeps it in its stats, and never takes it as a bound.)
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
        fixed=fixed,
    )
