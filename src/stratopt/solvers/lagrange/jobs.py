"""The bound worker's job: which one a search gives it (:func:`relaxation_job`: the linear
relaxation, its dual by message passing, or the bound with the usage rows kept) and how a worker
runs it (:func:`bound_job`, branch and cut included)."""

from __future__ import annotations

from typing import Any

import numpy as np

from stratopt.solvers.lagrange.branch import BranchJob, branch_bound
from stratopt.solvers.lagrange.kept import KeptJob, kept_bound, rows_fit
from stratopt.solvers.lagrange.messages import message_bound
from stratopt.solvers.lagrange.model import PenaltyModel
from stratopt.solvers.lagrange.relaxation import LP_RATE, LpBound, LpJob, columns, lp_bound
from stratopt.solvers.local_search import LocalEngine

__all__ = ["LP_SAFE", "bound_job", "relaxation_job"]


#: The linear relaxation runs only where its size at
#: :data:`~stratopt.solvers.lagrange.relaxation.LP_RATE` fits this part of its share; elsewhere
#: (where the network has edges) the message bound takes the share and stops where it stalls. The
#: rate is an average and the machine's load moves it: IOPDDL C and D, whose relaxations need
#: about 0.8 of their 30 s share at that rate, gave no duals in it in some searches (D then ended at
#: a gap of 3.9-6.6%, 1.8% when they came), while the message bound alone reached 0.08% (C) and
#: 1.8% (D) below their best answers in 22-27 s, and L (its relaxation skipped, 2.33M columns)
#: 0.4% in 33 s.
LP_SAFE = 0.6


def relaxation_job(
    model: PenaltyModel, engine: LocalEngine, share: float, time_limit: float | None, stats: dict[str, Any]
) -> LpJob | KeptJob | None:
    """The relaxation's job where it applies (a usage limit and a share): under a time limit,
    where the usage rows are few, the bound with them kept (:mod:`.kept`); HiGHS on the relaxation
    where its size fits :data:`LP_SAFE` of the share at :data:`~.relaxation.LP_RATE` (without a
    time limit, always; where the network has no edges, where it fits the whole share); else (the
    reason in ``stats["lp"]``), where the network has edges, its dual by message passing for the
    share, stopping where it stalls (:mod:`.messages`: its price steps by row generation stay
    small whatever the programme's size)."""
    if not engine.has_limit or share <= 0:
        return None
    _, start, end = engine.problem.time_slots
    if time_limit is not None and rows_fit(model, start, end):
        stats["lp"] = {"kept": "the usage rows fit: kept as knapsack constraints"}
        return KeptJob(share * time_limit)
    size = columns(model, start, end)
    if time_limit is None:
        return LpJob(None)
    seconds = share * time_limit
    if size <= LP_SAFE * LP_RATE * seconds:
        return LpJob(seconds)
    network = model.network
    if network is None or not len(network.edges):  # no message bound: HiGHS where it fits at all
        if size <= LP_RATE * seconds:
            return LpJob(seconds)
        stats["lp"] = {"skipped": f"{_about(size)}: more than its share ({seconds:.0f} s)", "columns": size}
        return None
    stats["lp"] = {"skipped": f"{_about(size)}: more than {LP_SAFE:g} of its share ({seconds:.0f} s)", "columns": size}
    return LpJob(seconds, messages=True, stall=True)


def _about(size: int) -> str:
    return f"{size} columns, about {size / LP_RATE:.0f} s at {LP_RATE:.0f} columns/s"


def bound_job(job: LpJob | BranchJob | KeptJob, model: PenaltyModel, start: np.ndarray, end: np.ndarray) -> LpBound:
    """The bound worker's job: HiGHS on the relaxation (:func:`~.relaxation.lp_bound`) or, with
    ``job.messages``, its dual by message passing (:func:`~.messages.message_bound`), for
    ``job.seconds``; after it, branch and cut (:func:`~.branch.branch_bound`); or the bound with
    the rows kept (:func:`kept_bound`)."""
    if isinstance(job, KeptJob):
        return kept_bound(model, start, end, job.seconds)
    if isinstance(job, BranchJob):
        return branch_bound(model, start, end, job)
    if job.messages:
        return message_bound(model, start, end, job.seconds, stall=job.stall)
    return lp_bound(model, start, end, job.seconds)
