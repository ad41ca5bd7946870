"""Device placement (seed 004 and its anchors): put every operator of a job graph on one device of
a heterogeneous set so that the job finishes soonest.

:func:`place` runs one algorithm and returns a :class:`Placement`: the device of every node, the
device order, the schedule that order gives (re-checked by :func:`check_schedule` before it is
returned), its makespan and seed 004's JCT. Algorithms (:data:`ALGORITHMS`):

=============================  ==================================================================
``heuristic``                  TensorFlow whitepaper greedy (seed 004's Heuristic-G)
``submodular``                 Submodular-G (seed 004, section 2.2), every f evaluated each round
``submodular-lazy``            the same placements by the accelerated (lazy) greedy
``submodular-improved``        Submodular-GI (section 2.3)
``submodular-improved-lazy``   the same placements by the lazy greedy
``heft``                       HEFT: upward rank, insertion-based earliest finish
``etf``                        memory-aware Earliest Task First (Baechi's m-ETF)
``cpsat``                      makespan-optimal (CP-SAT), with its proven bound
``additive``                   the additive view's optimum (:func:`to_problem`, solved exactly)
=============================  ==================================================================
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.errors import CrossCheckError, ModelError
from stratopt.placement.instance import (
    Device,
    PlacementInstance,
    is_placement_dict,
    placement_from_dict,
    read_placement,
)
from stratopt.placement.list_scheduling import etf, heft, memory_use, tf_greedy
from stratopt.placement.schedule import Schedule, check_placement, check_schedule, jct, simulate
from stratopt.placement.submodular import Round, submodular_greedy
from stratopt.problem import StrategyProblem

__all__ = [
    "ALGORITHMS",
    "Device",
    "Placement",
    "PlacementInstance",
    "Schedule",
    "check_schedule",
    "is_placement_dict",
    "jct",
    "lower_bound",
    "place",
    "placement_from_dict",
    "read_placement",
    "simulate",
    "to_problem",
]

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
    """What :func:`place` returns.

    ``status`` is ``"optimal"`` only for a makespan proven optimal (``cpsat``); ``bound`` is a
    proven lower bound on the makespan of every placement (``cpsat``, else None). ``wall_time``
    is the algorithm's own time, without the final simulation and checks.
    """

    algorithm: str
    instance: PlacementInstance = field(repr=False)
    placement: tuple[int, ...]
    order: tuple[tuple[int, ...], ...]
    schedule: Schedule = field(repr=False)
    makespan: float
    jct: float
    wall_time: float
    status: str = "feasible"
    bound: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def fits_memory(self) -> bool:
        """Whether every device with a memory size holds no more than it."""
        return _fits(self.instance, self.placement)

    def to_dict(self) -> dict[str, Any]:
        """The ``place --json`` object: DESIGN section 7's fields and a few more."""
        inst = self.instance
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "instance": inst.name,
            "placement": {inst.nodes[j]: inst.devices[i].name for j, i in enumerate(self.placement)},
            "makespan": self.makespan,
            "jct": self.jct,
            "wall_time": self.wall_time,
            "status": self.status,
            "bound": self.bound,
            "fits_memory": self.fits_memory,
            "order": {
                inst.devices[i].name: [inst.nodes[j] for j in items] for i, items in enumerate(self.order) if items
            },
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
) -> tuple[list[int], list[list[int]] | None, dict[str, Any]]:
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
        from stratopt.solvers import solve_auto

        result = solve_auto(to_problem(instance), time_limit=time_limit, seed=seed)
        if result.assignment is None:
            raise ModelError(f"{instance.name}: the additive view found no placement ({result.status.value})")
        return list(result.assignment), None, {"additive_objective": result.objective, "solver": result.solver}
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
    ``cpsat`` and ``additive``.

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
    status, bound = "feasible", None
    if algorithm == "cpsat":
        from stratopt.placement.cpsat import cpsat_placement

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
        if plan.placement is None:
            raise ModelError(f"{instance.name}: cpsat found no placement ({plan.status}, {plan.stats['cpsat_status']})")
        placement, order, stats = plan.placement, plan.order, dict(plan.stats)
        status, bound = plan.status, plan.bound
    else:
        placement, order, stats = _plan(instance, algorithm, time_limit, seed)
    wall = time.perf_counter() - started
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
        if status == "optimal" and makespan > bound + 1e-9 * max(1.0, abs(bound)):
            status = "feasible"
    return Placement(
        algorithm=algorithm,
        instance=instance,
        placement=tuple(schedule.placement),
        order=tuple(tuple(o) for o in schedule.order(instance.num_devices)),
        schedule=schedule,
        makespan=makespan,
        jct=jct(instance, placement),
        wall_time=wall,
        status=status,
        bound=bound,
        stats=stats,
    )


def _fits(instance: PlacementInstance, placement: Sequence[int]) -> bool:
    use = memory_use(instance, list(placement))
    return all(d.memory is None or use[i] <= d.memory for i, d in enumerate(instance.devices))


__all__ += ["Round", "check_placement"]
