"""Running one placement algorithm: :func:`place`, its :class:`Placement` result, the additive view."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.errors import CrossCheckError, ModelError, SolverError
from stratopt.placement.cpsat import cpsat_placement
from stratopt.placement.instance import PlacementInstance
from stratopt.placement.list_scheduling import etf, heft, memory_use, tf_greedy
from stratopt.placement.schedule import Schedule, check_schedule, jct, simulate
from stratopt.placement.submodular import submodular_greedy
from stratopt.problem import StrategyProblem
from stratopt.solvers import solve_auto
from stratopt.solvers.base import Limit, Status

__all__ = ["ALGORITHMS", "Placement", "lower_bound", "place", "to_problem"]

#: Algorithm name -> one-line description.
ALGORITHMS: dict[str, str] = {
    "heuristic": "TensorFlow whitepaper greedy: topological order, earliest finish (Heuristic-G)",
    "submodular": "Submodular-G (seed 004, 2.2), f evaluated for every candidate each round",
    "submodular-lazy": "Submodular-G by the lazy greedy: the same placement, far fewer evaluations",
    "submodular-improved": "Submodular-GI (seed 004, 2.3): the parallelism factor outside the sum",
    "submodular-improved-lazy": "Submodular-GI by the lazy greedy",
    "heft": "HEFT: upward rank, insertion-based earliest finish time",
    "etf": "Earliest Task First honouring device memory (Baechi's m-ETF)",
    "cpsat": "makespan-optimal placement by CP-SAT, hinted by the best list schedule",
    "additive": "the additive view's optimum: least total compute + transfer time (exact, dp)",
}


@dataclass(frozen=True)
class Placement:
    """What :func:`place` returns, in the solvers' result vocabulary.

    ``status`` is a :class:`~stratopt.Status`: OPTIMAL only for a makespan proven optimal
    (``cpsat``); FEASIBLE with ``limit`` saying why there is no proof (``Limit.HEURISTIC`` for the
    list schedulers and the submodular greedy, ``Limit.TIME`` for a CP-SAT run stopped by its time
    limit); INFEASIBLE when no placement fits the devices' memory (proven); NO_SOLUTION when
    nothing was found in time. Without a placement, ``placement``, ``schedule``, ``makespan`` and
    ``jct`` are None. ``bound`` is a proven lower bound on every placement's makespan (``cpsat``,
    else None). ``wall_time`` is the algorithm's own time, without the final simulation and checks.
    """

    algorithm: str
    instance: PlacementInstance = field(repr=False)
    status: Status
    limit: Limit | None = None
    placement: tuple[int, ...] | None = None
    order: tuple[tuple[int, ...], ...] | None = None
    schedule: Schedule | None = field(default=None, repr=False)
    makespan: float | None = None
    jct: float | None = None
    wall_time: float = 0.0
    bound: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        needs_limit = self.status in (Status.FEASIBLE, Status.NO_SOLUTION)
        if needs_limit != (self.limit is not None):
            raise SolverError(f"a {self.status.value} placement must {'' if needs_limit else 'not '}carry a limit")
        if (self.status in (Status.OPTIMAL, Status.FEASIBLE)) != (self.placement is not None):
            raise SolverError(
                f"a {self.status.value} placement {'needs' if self.placement is None else 'has no'} nodes placed"
            )

    @property
    def fits_memory(self) -> bool | None:
        """Whether every device with a memory size holds no more than it (None without a placement)."""
        return None if self.placement is None else _fits(self.instance, self.placement)

    def to_dict(self) -> dict[str, Any]:
        """The ``place --json`` object: DESIGN section 7's fields and a few more."""
        inst = self.instance
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "instance": inst.name,
            "status": self.status.value,
            "limit": None if self.limit is None else self.limit.value,
            "placement": None
            if self.placement is None
            else {inst.nodes[j]: inst.devices[i].name for j, i in enumerate(self.placement)},
            "makespan": self.makespan,
            "jct": self.jct,
            "wall_time": self.wall_time,
            "bound": self.bound,
            "fits_memory": self.fits_memory,
            "order": None
            if self.order is None
            else {inst.devices[i].name: [inst.nodes[j] for j in items] for i, items in enumerate(self.order) if items},
        }
        if "rounds" in self.stats:
            out["rounds"] = [
                {"device": inst.devices[r.device].name, "node": inst.nodes[r.node], "f": r.f}
                for r in self.stats["rounds"]
            ]
        out["stats"] = {k: v for k, v in self.stats.items() if k != "rounds"}
        return out


def to_problem(instance: PlacementInstance) -> StrategyProblem:
    """The additive view: a StrategyProblem with one vertex per node and one choice per device;
    node cost = the node's time there, edge cost = the transfer time when the two ends sit on
    different devices. Its objective is the total busy time of all devices and links (no overlap,
    so not the makespan); device memory has no counterpart (the usage constraint is one global sum)
    and is left out.

    Examples
    --------
    >>> from stratopt.placement.jobs import appendix
    >>> from stratopt import solve
    >>> solve(to_problem(appendix()), "dp").objective
    15.0
    """
    n, m = instance.num_nodes, instance.num_devices
    delays = instance.transfer_times()
    edges, mats = [], []
    off_diagonal = 1.0 - np.eye(m)
    for (u, v), t in zip(instance.edges.tolist(), delays.tolist(), strict=False):
        if t > 0:
            edges.append((u, v))
            mats.append(off_diagonal * t)
    return StrategyProblem(
        [instance.cost[j] for j in range(n)],
        edges,
        mats,
        names=list(instance.nodes),
        labels=[list(instance.device_names)] * n,
        name=instance.name,
    )


def lower_bound(instance: PlacementInstance) -> float:
    """A cheap proven lower bound on the makespan: the longest path with every node at its least
    cost (transfers can be avoided), and the least total work spread over all devices."""
    least = instance.cost.min(axis=1)
    finish = [0.0] * instance.num_nodes
    for j in instance.order:
        finish[j] = least[j] + max((finish[u] for u in instance.preds[j]), default=0.0)
    return max(max(finish), float(least.sum()) / instance.num_devices)


def _plan(
    instance: PlacementInstance, algorithm: str, time_limit: float | None, seed: int | None
) -> tuple[list[int] | None, list[list[int]] | None, dict[str, Any]]:
    if algorithm == "heuristic":
        p, o = tf_greedy(instance)
        return p, o, {}
    if algorithm == "heft":
        p, o = heft(instance)
        return p, o, {}
    if algorithm == "etf":
        p, o = etf(instance)
        return p, o, {}
    if algorithm.startswith("submodular"):
        rounds = submodular_greedy(instance, improved="improved" in algorithm, lazy=algorithm.endswith("lazy"))
        p = [0] * instance.num_nodes
        for r in rounds:
            p[r.node] = r.device
        return p, None, {"rounds": rounds}
    if algorithm == "additive":
        result = solve_auto(to_problem(instance), time_limit=time_limit, seed=seed)
        stats = {"additive_objective": result.objective, "solver": result.solver, "status": result.status}
        return None if result.assignment is None else list(result.assignment), None, stats
    raise AssertionError(algorithm)


def place(
    instance: PlacementInstance,
    algorithm: str = "heuristic",
    *,
    time_limit: float | None = 30.0,
    seed: int | None = None,
) -> Placement:
    """Place ``instance`` with one of :data:`ALGORITHMS`.

    The schedule is the algorithm's own device order, simulated (list-scheduling algorithms and
    CP-SAT), or for the submodular and additive placements, which choose devices only, the
    simulator's dispatch policy (:func:`simulate`). Every schedule is re-checked by
    :func:`check_schedule`; a failure raises :class:`CrossCheckError`. ``time_limit`` applies to
    ``cpsat`` and ``additive``; running out of it, or proving that no placement fits the devices'
    memory, is a status of the returned :class:`Placement` (NO_SOLUTION, INFEASIBLE), never an
    exception.

    References
    ----------
    Seed 004 (Carbonari, Kodirov, Golub 2017) for ``heuristic`` and the submodular greedy; the
    other algorithms' docstrings in :mod:`stratopt.placement.list_scheduling` and
    :mod:`stratopt.placement.cpsat`.

    Examples
    --------
    >>> from stratopt.placement.jobs import appendix
    >>> r = place(appendix(), "submodular")
    >>> r.jct, r.makespan
    (17.0, 17.0)
    >>> place(appendix(), "heuristic").makespan
    14.0
    """
    if algorithm not in ALGORITHMS:
        raise ModelError(f"unknown placement algorithm {algorithm!r}; choose from: {', '.join(ALGORITHMS)}")
    started = time.perf_counter()
    status: Status = Status.FEASIBLE
    limit: Limit | None = Limit.HEURISTIC
    bound: float | None = None
    if algorithm == "cpsat":
        candidates = [tf_greedy(instance), heft(instance)]
        with contextlib.suppress(ModelError):
            candidates.append(etf(instance))
        fitting = [c for c in candidates if _fits(instance, c[0])]
        hint = min(fitting, key=lambda c: simulate(instance, c[0], c[1]).makespan) if fitting else None
        plan = cpsat_placement(
            instance,
            hint=hint,
            time_limit=None if time_limit is None else max(0.01, time_limit - (time.perf_counter() - started)),
            seed=seed,
        )
        placement, order, stats = plan.placement, plan.order, dict(plan.stats)
        status, limit, bound = plan.status, plan.limit, plan.bound
    else:
        placement, order, stats = _plan(instance, algorithm, time_limit, seed)
        if algorithm == "additive":
            solved = stats.pop("status")
            status, limit = (Status.FEASIBLE, Limit.HEURISTIC) if placement is not None else (solved, None)
            if status is Status.NO_SOLUTION:
                limit = Limit.TIME
    wall = time.perf_counter() - started
    if placement is None:
        return Placement(algorithm, instance, status, limit, wall_time=wall, stats=stats)
    schedule = simulate(instance, placement, order)
    problems = check_schedule(instance, schedule)
    if problems:
        raise CrossCheckError(f"{instance.name}: {algorithm} produced an invalid schedule: {'; '.join(problems[:3])}")
    makespan = schedule.makespan
    if bound is not None:
        cheap = lower_bound(instance)
        bound = max(bound, cheap)
        if makespan < bound - 1e-9 * max(1.0, abs(bound)):
            raise CrossCheckError(
                f"{instance.name}: {algorithm}: makespan {makespan} is below the proven bound {bound}"
            )
        if status is Status.OPTIMAL and makespan > bound + 1e-9 * max(1.0, abs(bound)):
            status, limit = Status.FEASIBLE, Limit.PRECISION
    return Placement(
        algorithm=algorithm,
        instance=instance,
        status=status,
        limit=limit,
        placement=tuple(schedule.placement),
        order=tuple(tuple(o) for o in schedule.order(instance.num_devices)),
        schedule=schedule,
        makespan=makespan,
        jct=jct(instance, placement),
        wall_time=wall,
        bound=bound,
        stats=stats,
    )


def _fits(instance: PlacementInstance, placement: Sequence[int]) -> bool:
    use = memory_use(instance, list(placement))
    return all(d.memory is None or use[i] <= d.memory for i, d in enumerate(instance.devices))
