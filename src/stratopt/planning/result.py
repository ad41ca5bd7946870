"""What a plan is: one strategy on the cluster (:class:`Strategy`) and the plan beside its baselines
(:class:`PlanResult`)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.planning.cluster import Cluster
from stratopt.planning.export import ExportedPlan


@dataclass(frozen=True)
class Strategy:
    """One strategy on the cluster: the plan or a baseline.

    ``estimate`` is the model's step time (:meth:`~stratopt.cost.Costing.step_time`: communication
    overlapped as frameworks overlap it), ``objective`` the cost the search minimised (the same
    with the overlap taken per operator, no constant per step: what the bound bounds), and
    ``simulated`` the simulator's (with the profile's constant per step; microseconds; None where
    not simulated), ``memory`` the bytes
    per device, ``layers`` the strategy in words, one
    row per group of operators that hold weights (identical layers collapsed). ``note`` says how it
    was obtained, or why it cannot be expressed (then ``assignment`` is None).
    """

    name: str
    assignment: tuple[int, ...] | None
    estimate: float | None
    simulated: float | None
    memory: float | None
    fits: bool
    note: str = ""
    layers: tuple[dict[str, Any], ...] = ()
    objective: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field, tuples as lists (JSON's own)."""
        return {f.name: _listed(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` returns (frozen); ``to_dict()`` is ``stratopt plan --json``."""

    model: str
    cluster: Cluster
    memory_gb: float
    plan: Strategy
    baselines: tuple[Strategy, ...]
    status: str
    bound: float | None
    seconds: float
    costing: Any = field(repr=False, compare=False, default=None)

    def best_baseline(self) -> Strategy | None:
        """The fastest baseline that fits (by the estimate), or None."""
        fitting = [b for b in self.baselines if b.fits and b.estimate is not None]
        return min(fitting, key=lambda b: b.estimate or 0.0) if fitting else None

    def speedup(self) -> float | None:
        """The best fitting baseline's estimate over the plan's (None without both)."""
        best = self.best_baseline()
        if best is None or best.estimate is None or self.plan.estimate is None or not self.plan.fits:
            return None
        return best.estimate / self.plan.estimate

    def simulated_faster(self) -> list[Strategy]:
        """The baselines that fit and that the simulator runs faster than the plan: where the
        estimate the plan was chosen by and the simulator disagree (empty when not simulated)."""
        p = self.plan.simulated
        return [b for b in self.baselines if b.fits and p is not None and b.simulated is not None and b.simulated < p]

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write the plan as JSON keyed by operator (module) name, each split as mesh dimensions
        (:mod:`stratopt.planning.export`; read back with :func:`~stratopt.planning.load_plan`)."""

        ExportedPlan.of(self).write(path)

    def export_all(self, folder: str | os.PathLike[str], pipelined: ExportedPlan | None = None) -> dict[str, str]:
        """Write the plan (``plan.json``) and every baseline PyTorch runs as priced and that fits
        (``data-parallel.json``, ``fsdp.json``, ``megatron-tp2.json``, ...) into ``folder`` (made if
        need be), so that each can be run and timed; ``{strategy: the file written, or why not}``.
        With ``pipelined`` (a pipeline's export), that is ``plan.json`` and the plan without
        pipelining ``one-stage.json``."""
        out = Path(folder)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ModelError(f"{folder}: cannot make the folder ({exc.strerror})") from None
        done: dict[str, str] = {}
        if pipelined is not None:
            pipelined.write(out / "plan.json")
            done["plan"] = str(out / "plan.json")
        for strategy in (self.plan, *self.baselines):
            name = "one-stage" if pipelined is not None and strategy is self.plan else strategy.name
            if strategy.assignment is None:
                done[name] = strategy.note or "no strategy"
                continue
            if not strategy.fits:
                done[name] = "does not fit in the memory limit"
                continue
            exported = dataclasses.replace(ExportedPlan.of(dataclasses.replace(self, plan=strategy)), name=name)
            if exported.mesh is None:
                done[name] = f"PyTorch does not run it as priced: {exported.why}"
                continue
            path = out / f"{name}.json"
            exported.write(path)
            done[name] = str(path)
        return done

    def to_dict(self) -> dict[str, Any]:
        best = self.best_baseline()
        return {
            "model": self.model,
            "cluster": {
                "nodes": self.cluster.nodes,
                "gpus_per_node": self.cluster.gpus_per_node,
                "devices": self.cluster.devices,
                "machine": self.cluster.machine.name,
            },
            "memory_gb": self.memory_gb,
            "units": "us",
            "status": self.status,
            "bound": self.bound,
            "seconds": self.seconds,
            "plan": self.plan.to_dict(),
            "baselines": [b.to_dict() for b in self.baselines],
            "best_baseline": None if best is None else best.name,
            "speedup": self.speedup(),
            "simulated_faster": [b.name for b in self.simulated_faster()],
        }


def _listed(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
