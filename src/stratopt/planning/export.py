"""The exported plan: ``stratopt plan --export`` / :meth:`PlanResult.export`, read back by
:func:`load_plan`.

A JSON object ``{"format": "stratopt-plan", "version": 1, "model", "cluster", "estimate_us",
"simulated_us", "memory_bytes", "operators"}``; ``operators`` maps each operator (module) name to
``{"op", "mesh": [[axis, ways], ...], "axes": {axis: size}}``: the axes it splits and how many ways.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.problem import read_json

FORMAT, VERSION = "stratopt-plan", 1

__all__ = ["ExportedPlan", "load_plan"]


@dataclass(frozen=True)
class ExportedPlan:
    """A plan as exported: the model's name, the cluster (``nodes``, ``gpus_per_node``,
    ``devices``, ``machine``), its figures, and each operator's splits."""

    model: str
    cluster: dict[str, Any]
    estimate_us: float | None
    simulated_us: float | None
    memory_bytes: float | None
    operators: dict[str, dict[str, Any]]

    @classmethod
    def of(cls, result: Any) -> ExportedPlan:
        """The plan of a :class:`~stratopt.planning.PlanResult`, keyed by operator name."""
        costing, plan = result.costing, result.plan
        if plan.assignment is None:
            raise ModelError("no plan to export: nothing fits in the memory limit")
        ops = {}
        for v, op in enumerate(costing.graph.operators):
            config = costing.configs[v][plan.assignment[v]].tolist()
            ops[op.name] = {
                "op": op.op,
                "mesh": [[axis, int(c)] for axis, c in zip(op.axes, config, strict=True) if c > 1],
                "axes": {axis: int(size) for axis, size in zip(op.axes, op.sizes, strict=True)},
            }
        cluster = result.to_dict()["cluster"]
        return cls(result.model, cluster, plan.estimate, plan.simulated, plan.memory, ops)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.model,
            "cluster": self.cluster,
            "estimate_us": self.estimate_us,
            "simulated_us": self.simulated_us,
            "memory_bytes": self.memory_bytes,
            "operators": self.operators,
        }

    def write(self, path: str | os.PathLike[str]) -> None:
        try:
            with open(path, "w") as fh:
                json.dump(self.to_dict(), fh, indent=1)
        except OSError as exc:
            raise ModelError(f"{path}: cannot write the plan ({exc.strerror})") from None


def load_plan(path: str | os.PathLike[str]) -> ExportedPlan:
    """Read and validate an exported plan; a bad file is a one-line :class:`ModelError` naming
    what is wrong and where.

    >>> import tempfile, os
    >>> from stratopt.planning import plan
    >>> path = os.path.join(tempfile.mkdtemp(), "plan.json")
    >>> plan("alexnet", 1, 2, simulate=False).export(path)
    >>> loaded = load_plan(path)
    >>> loaded.model, loaded.cluster["devices"], len(loaded.operators)
    ('alexnet', 2, 14)
    """
    data = read_json(Path(path))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ModelError(f'{path}: not a stratopt plan (expected "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise ModelError(f"{path}: plan version {data.get('version')!r}; this stratopt reads version {VERSION}")
    for key, kind in (("model", str), ("cluster", dict), ("operators", dict)):
        if not isinstance(data.get(key), kind):
            raise ModelError(f"{path}: {key!r} must be a JSON {'string' if kind is str else 'object'}")
    cluster = data["cluster"]
    for key in ("nodes", "gpus_per_node", "devices"):
        value = cluster.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelError(f"{path}: cluster.{key} must be a positive integer, got {value!r}")
    if cluster["nodes"] * cluster["gpus_per_node"] != cluster["devices"]:
        raise ModelError(f"{path}: cluster.devices is {cluster['devices']}, not nodes x gpus_per_node")
    for name, entry in data["operators"].items():
        where = f"{path}: operator {name!r}"
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("mesh"), list)
            or not isinstance(entry.get("axes"), dict)
        ):
            raise ModelError(f'{where}: expected {{"op", "mesh": [[axis, ways], ...], "axes": {{axis: size}}}}')
        ways = 1
        for item in entry["mesh"]:
            if not (isinstance(item, list) and len(item) == 2 and item[0] in entry["axes"]):
                raise ModelError(f"{where}: mesh entry {item!r} is not [axis, ways] over one of its axes")
            c = item[1]
            if isinstance(c, bool) or not isinstance(c, int) or c < 1 or entry["axes"][item[0]] % c:
                raise ModelError(f"{where}: axis {item[0]!r} of size {entry['axes'][item[0]]} cannot split {c!r} ways")
            ways *= c
        if ways > cluster["devices"]:
            raise ModelError(f"{where}: splits over {ways} devices, more than the cluster's {cluster['devices']}")
    figures = {}
    for key in ("estimate_us", "simulated_us", "memory_bytes"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ModelError(f"{path}: {key!r} must be a number or null, got {value!r}")
        figures[key] = None if value is None else float(value)
    return ExportedPlan(data["model"], cluster, operators=data["operators"], **figures)
