"""Where the runs happen: forked worker processes or Ray tasks behind one interface (``free``,
``submit``, ``next_done``, ``close``), each worker holding the model and engine once."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import signal
from typing import Any

from stratopt.errors import SolverUnavailableError
from stratopt.solvers.lagrange.branch import BranchJob
from stratopt.solvers.lagrange.jobs import bound_job
from stratopt.solvers.lagrange.kept import KeptJob
from stratopt.solvers.lagrange.merge import Merged, MergeJob, merge_job
from stratopt.solvers.lagrange.model import PenaltyModel
from stratopt.solvers.lagrange.relaxation import LpBound, LpJob
from stratopt.solvers.lagrange.runs import Attempt, Run, attempt
from stratopt.solvers.local_search import LocalEngine

_MODEL: PenaltyModel | None = None  # a worker's model and engine, set once when it starts
_ENGINE: LocalEngine | None = None


def start_worker(model: PenaltyModel, engine: LocalEngine) -> None:
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


Outcome = Attempt | LpBound | Merged


def do(
    model: PenaltyModel, engine: LocalEngine, job: Run | LpJob | BranchJob | KeptJob | MergeJob, budget: float | None
) -> Outcome:
    """One job: a penalised run (:func:`attempt`, ``budget`` its seconds for repair and polish),
    a bound (:func:`~stratopt.solvers.lagrange.jobs.bound_job`) or a merge of
    two answers (:func:`~stratopt.solvers.lagrange.merge.merge_job`)."""
    if isinstance(job, (LpJob, BranchJob, KeptJob)):
        _, start, end = engine.problem.time_slots
        return bound_job(job, model, start, end)
    if isinstance(job, MergeJob):
        return merge_job(model, engine, job, budget)
    return attempt(model, engine, job, budget)


def _worker_run(*args: Any) -> Outcome:
    """One job in a forked worker, on the model and engine it holds (``args`` as
    :meth:`ProcessPool.submit` passes them on: the job and its budget)."""
    assert _MODEL is not None and _ENGINE is not None
    return do(_MODEL, _ENGINE, *args)


def _ray_run(shared: tuple[PenaltyModel, LocalEngine], *args: Any) -> Outcome:
    """One job as a Ray task: the model and engine come from the object store."""
    model, engine = shared
    return do(model, engine, *args)


class ProcessPool:
    """Worker processes forked with the model and engine (each inherits them once)."""

    def __init__(self, model: PenaltyModel, engine: LocalEngine, workers: int) -> None:
        self.workers = workers
        context = multiprocessing.get_context("fork")
        self.pool = cf.ProcessPoolExecutor(
            workers, mp_context=context, initializer=start_worker, initargs=(model, engine)
        )
        self.pending: dict[cf.Future, Any] = {}

    def free(self) -> bool:
        return len(self.pending) < self.workers

    def busy(self) -> bool:
        return bool(self.pending)

    def submit(self, key: Any, *args: Any) -> None:
        self.pending[self.pool.submit(_worker_run, *args)] = key

    def next_done(self, timeout: float | None = None) -> tuple[Any, Outcome | BaseException] | None:
        """The next job to end and its outcome (or its error); None when none ends in ``timeout`` seconds."""
        done, _ = cf.wait(self.pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        if not done:
            return None
        fut = next(iter(done))
        key = self.pending.pop(fut)
        try:
            return key, fut.result()
        except Exception as exc:
            return key, exc

    def close(self) -> None:
        """Shut the workers down; jobs still running (past the search's deadline) are killed with them."""
        for fut in self.pending:
            fut.cancel()
        if any(fut.running() for fut in self.pending):
            for proc in list(getattr(self.pool, "_processes", {}).values()):
                proc.kill()
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayPool:
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

    def next_done(self, timeout: float | None = None) -> tuple[Any, Outcome | BaseException] | None:
        """The next task to end and its outcome (or its error); None when none ends in ``timeout`` seconds."""
        done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=timeout)
        if not done:
            return None
        key = self.pending.pop(done[0])
        try:
            return key, self.ray.get(done[0])
        except Exception as exc:
            return key, exc

    def close(self) -> None:
        for ref in self.pending:
            self.ray.cancel(ref, force=True)
