"""The exported plan: ``stratopt plan --export`` / :meth:`PlanResult.export`, read back by
:func:`load_plan`.

A JSON object ``{"format": "stratopt-plan", "version": 3, "model", "strategy", "cluster", "estimate_us",
"simulated_us", "memory_bytes", "operators", "mesh", "modules", "recompute"}``; ``operators`` maps each operator
name to ``{"op", "mesh": [[axis, ways], ...], "axes": {axis: size}}``: the axes it splits and how many
ways. ``mesh`` is ``{"shape": [dp, tp], "names": ["dp", "tp"]}``, the device mesh PyTorch runs the
plan on, and ``modules`` maps each PyTorch module (qualified name) to its placement
(:class:`~stratopt.planning.torchplan.ModulePlacement`: ``tp`` style, ``fsdp`` (with ``"reshard":
false`` for ZeRO-2: the weights kept whole from the forward pass to the end of the backward; ``"hsdp":
s`` for HSDP: sharded over groups of ``s`` data-parallel devices, one node's), activation
layouts, parameters and the collectives priced); where DTensor cannot run the plan, ``mesh`` is null,
``modules`` empty and ``why`` says which operator stops it. ``recompute`` lists the blocks (modules)
checkpointed: each runs its forward again in the backward pass instead of keeping what it makes
(:mod:`~stratopt.planning.recompute`); a module inside one has a ``"recompute"`` pass among its
collectives (empty, and ``"rerun": false``, for a block's last product, before which the re-run
stops). Where a block is checkpointed selectively, ``keep`` lists the modules inside checkpointed
blocks whose products keep their outputs and ``keep_attention`` the blocks whose attention kernel
does (both absent where every checkpointed block recomputes whole). ``strategy`` names it: ``plan``, or the baseline ``plan --export-all`` wrote. Versions 1
(no mesh) and 2 (no recomputation) still load.

A pipelined plan (``plan --stages N --expressible torch``, or ``--microbatches M`` alone: gradient
accumulation, a pipeline of one stage; :mod:`~stratopt.planning.torchpipe`) adds
``"pipeline": {"microbatches", "schedule", "batch", "stages", "boundaries"}``: ``mesh`` is then each
stage's mesh (the cluster is ``stages x dp x tp``), ``stages`` lists each stage's blocks, modules,
checkpointed blocks and time per micro-batch, ``boundaries`` the tensor crossing each stage boundary
(``before``: the next stage's first block; ``elements`` per micro-batch, every data-parallel group's
together), ``batch`` is ``cut`` where the model's batch is cut into the micro-batches (else each
micro-batch is a whole batch of the model's), and the modules' collectives count a whole step. The
interleaved schedule adds ``"chunks"``: the stages each device group runs (stage ``j`` on group ``j
% groups``; the cluster is then ``groups x dp x tp``, ``groups`` the stages over the chunks).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.planning.recompute import checkpointed, kept
from stratopt.planning.torchplan import find_mesh, module_placements
from stratopt.problem import read_json

FORMAT, VERSION = "stratopt-plan", 3
PHASES = ("forward", "backward", "recompute")
STYLES = ("replicate", "colwise", "rowwise", "vocab", "expert", "expert-dp", "sequence", "width")

__all__ = ["ExportedPlan", "load_plan", "operator_splits", "plan_from_dict"]


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
    mesh: tuple[int, int] | None = None
    modules: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    why: str = ""
    recompute: tuple[str, ...] = ()
    name: str = "plan"
    pipeline: dict[str, Any] | None = None
    keep: tuple[str, ...] = ()
    keep_attention: tuple[str, ...] = ()

    @property
    def selective(self) -> bool:
        """Whether some checkpointed block keeps part of its outputs (selective checkpointing)."""
        return bool(self.keep or self.keep_attention)

    @property
    def stages(self) -> int:
        """Pipeline device groups (ranks along the pipeline): the stages over their chunks."""
        return 1 if self.pipeline is None else len(self.pipeline["stages"]) // self.chunks

    @property
    def chunks(self) -> int:
        """Stages each device group runs: more than one under the interleaved schedule."""
        return 1 if self.pipeline is None else int(self.pipeline.get("chunks", 1))

    @classmethod
    def of(cls, result: Any) -> ExportedPlan:
        """The plan of a :class:`~stratopt.planning.PlanResult`, keyed by operator name."""
        costing, plan = result.costing, result.plan
        if plan.assignment is None:
            raise ModelError("no plan to export: nothing fits in the memory limit")
        ops = operator_splits(costing, plan.assignment)
        cluster = result.to_dict()["cluster"]
        mesh, modules, why = _modules(costing, plan.assignment, result.cluster.gpus_per_node)
        found = checkpointed(costing, plan.assignment)
        recompute = tuple(found) if isinstance(found, list) else ()
        saved, attention = kept(costing, plan.assignment) if mesh is not None else ([], [])
        return cls(
            result.model, cluster, plan.estimate, plan.simulated, plan.memory, ops, mesh, modules, why, recompute,
            keep=tuple(saved), keep_attention=tuple(attention),
        )  # fmt: skip

    @classmethod
    def of_pipeline(cls, result: Any, run: Any) -> ExportedPlan:
        """The pipeline ``run`` (a :class:`~stratopt.planning.torchpipe.RunnablePipeline`) for the model
        of ``result`` (a :class:`~stratopt.planning.PlanResult`, whose cluster it runs on)."""
        parts = run.export()
        simulated = run.summary()["simulated"]
        return cls(
            result.model, result.to_dict()["cluster"], run.estimate, simulated, max(run.group_memory()),
            parts["operators"], run.mesh, parts["modules"], "", tuple(parts["recompute"]), "plan", parts["pipeline"],
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.model,
            "strategy": self.name,
            "cluster": self.cluster,
            "estimate_us": self.estimate_us,
            "simulated_us": self.simulated_us,
            "memory_bytes": self.memory_bytes,
            "operators": self.operators,
            "mesh": None if self.mesh is None else {"shape": list(self.mesh), "names": ["dp", "tp"]},
            "modules": self.modules,
            "recompute": list(self.recompute),
            **({"keep": list(self.keep), "keep_attention": list(self.keep_attention)} if self.selective else {}),
            **({"why": self.why} if self.why else {}),
            **({"pipeline": self.pipeline} if self.pipeline is not None else {}),
        }

    def write(self, path: str | os.PathLike[str]) -> None:
        try:
            with open(path, "w") as fh:
                json.dump(self.to_dict(), fh, indent=1)
        except OSError as exc:
            raise ModelError(f"{path}: cannot write the plan ({exc.strerror})") from None


def operator_splits(costing: Any, assignment: Any) -> dict[str, dict[str, Any]]:
    """Each operator of ``assignment`` as the export states it: ``{"op", "mesh": [[axis, ways], ...],
    "axes": {axis: size}}``, keyed by its name."""
    out = {}
    for v, op in enumerate(costing.graph.operators):
        config = costing.configs[v][assignment[v]].tolist()
        out[op.name] = {
            "op": op.op,
            "mesh": [[axis, int(c)] for axis, c in zip(op.axes, config, strict=True) if c > 1],
            "axes": {axis: int(size) for axis, size in zip(op.axes, op.sizes, strict=True)},
        }
    return out


def _modules(
    costing: Any, assignment: tuple[int, ...], gpus_per_node: int
) -> tuple[tuple[int, int] | None, dict[str, dict[str, Any]], str]:
    """The mesh and module placements PyTorch runs ``assignment`` with, or why it cannot."""

    mesh = find_mesh(costing, assignment, gpus_per_node)
    if isinstance(mesh, str):
        return None, {}, mesh
    try:
        placements = module_placements(costing, assignment, *mesh)
    except ModelError as exc:
        return None, {}, str(exc)
    return mesh, {p.module: p.to_dict() for p in placements}, ""


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
    return plan_from_dict(read_json(Path(path)), path)


def plan_from_dict(data: Any, path: Any = "plan") -> ExportedPlan:
    """An exported plan's JSON value (see :func:`load_plan`), validated; ``path`` names it in errors."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ModelError(f'{path}: not a stratopt plan (expected "format": "{FORMAT}")')
    if data.get("version") not in (1, 2, VERSION):
        raise ModelError(f"{path}: plan version {data.get('version')!r}; this stratopt reads versions 1 to {VERSION}")
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
        for axis, size in entry["axes"].items():
            if not _positive_int(size):
                raise ModelError(f"{where}: axis {axis!r} must have a positive integer size, got {size!r}")
        ways = 1
        for item in entry["mesh"]:
            if not (
                isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and item[0] in entry["axes"]
            ):
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
    pipeline = _check_pipeline(path, data.get("pipeline"))
    stages = 1 if pipeline is None else len(pipeline["stages"]) // int(pipeline.get("chunks", 1))
    if cluster["devices"] % stages:
        raise ModelError(f"{path}: {stages} pipeline stages do not split the cluster's {cluster['devices']} devices")
    mesh, modules = _check_modules(path, data, cluster["devices"] // stages)
    recompute = data.get("recompute", [])
    if not (isinstance(recompute, list) and all(isinstance(x, str) and x for x in recompute)):
        raise ModelError(f"{path}: 'recompute' must be a list of module names, got {recompute!r}")
    keep, attention = data.get("keep", []), data.get("keep_attention", [])
    for key, names in (("keep", keep), ("keep_attention", attention)):
        if not (isinstance(names, list) and all(isinstance(x, str) and x for x in names)):
            raise ModelError(f"{path}: {key!r} must be a list of module names, got {names!r}")
    for name in keep:
        if not any(name.startswith(block + ".") for block in recompute):
            raise ModelError(f"{path}: 'keep' names module {name!r}, which is in no block the plan recomputes")
    for name in attention:
        if name not in recompute:
            raise ModelError(f"{path}: 'keep_attention' names {name!r}, which is not a block the plan recomputes")
    return ExportedPlan(
        data["model"],
        cluster,
        operators=data["operators"],
        mesh=mesh,
        modules=modules,
        why=str(data.get("why", "")),
        recompute=tuple(recompute),
        name=str(data.get("strategy", "plan")),
        pipeline=pipeline,
        keep=tuple(keep),
        keep_attention=tuple(attention),
        **figures,
    )


def _check_pipeline(path: Any, section: Any) -> dict[str, Any] | None:
    """A plan's ``pipeline`` section, validated (None where the plan has none)."""
    if section is None:
        return None
    where = f"{path}: pipeline"
    if not isinstance(section, dict):
        raise ModelError(f"{where}: must be a JSON object")
    if not _positive_int(section.get("microbatches")):
        raise ModelError(f"{where}: 'microbatches' must be a positive integer, got {section.get('microbatches')!r}")
    if section.get("schedule") not in ("1f1b", "gpipe", "interleaved"):
        raise ModelError(f"{where}: 'schedule' must be 1f1b, gpipe or interleaved, got {section.get('schedule')!r}")
    chunks = section.get("chunks", 1)
    if not _positive_int(chunks) or (chunks > 1) != (section["schedule"] == "interleaved"):
        raise ModelError(f"{where}: 'chunks' (2 or more) goes with the interleaved schedule only, got {chunks!r}")
    if section.get("batch", "whole") not in ("cut", "whole"):
        raise ModelError(f"{where}: 'batch' must be cut or whole, got {section.get('batch')!r}")
    stages, boundaries = section.get("stages"), section.get("boundaries")
    if not (isinstance(stages, list) and stages and all(isinstance(s, dict) for s in stages)):
        raise ModelError(f"{where}: 'stages' must be a list of stage objects (one: gradient accumulation)")
    for k, stage in enumerate(stages):
        for key in ("blocks", "modules", "recompute"):
            names = stage.get(key)
            if not (isinstance(names, list) and all(isinstance(x, str) and x for x in names)):
                raise ModelError(f"{where}: stage {k}: {key!r} must be a list of module names, got {names!r}")
        if not stage["blocks"]:
            raise ModelError(f"{where}: stage {k} has no block")
    if not (isinstance(boundaries, list) and len(boundaries) == len(stages) - 1):
        raise ModelError(f"{where}: 'boundaries' must list the {len(stages) - 1} boundaries between the stages")
    if chunks > 1 and (len(stages) % chunks or len(stages) < 2 * chunks):
        raise ModelError(f"{where}: {len(stages)} stages do not split into device groups of {chunks} chunks")
    for k, row in enumerate(boundaries):
        if not isinstance(row, dict) or row.get("before") != stages[k + 1]["blocks"][0]:
            raise ModelError(f"{where}: boundary {k} must name stage {k + 1}'s first block in 'before'")
        if not _positive_int(row.get("elements")):
            raise ModelError(f"{where}: boundary {k}: 'elements' must be a positive integer")
    return section


def _check_modules(path: Any, data: dict[str, Any], devices: int) -> tuple[tuple[int, int] | None, dict[str, Any]]:
    """The mesh and module placements of a plan of version 2 or later, validated."""
    mesh, modules = data.get("mesh"), data.get("modules") or {}
    if mesh is None:
        return None, {}
    shape = mesh.get("shape") if isinstance(mesh, dict) else None
    if not (isinstance(shape, list) and len(shape) == 2 and all(_positive_int(x) for x in shape)):
        raise ModelError(f'{path}: "mesh" must be {{"shape": [dp, tp], ...}} with positive integers, got {mesh!r}')
    if shape[0] * shape[1] != devices:
        raise ModelError(f"{path}: mesh {shape[0]} x {shape[1]} is not the cluster's {devices} devices")
    if not isinstance(modules, dict):
        raise ModelError(f'{path}: "modules" must be a JSON object')
    for name, entry in modules.items():
        where = f"{path}: module {name!r}"
        if not isinstance(entry, dict) or entry.get("tp") not in STYLES:
            raise ModelError(f"{where}: 'tp' must be one of {', '.join(STYLES)}")
        if not isinstance(entry.get("fsdp"), bool):
            raise ModelError(f"{where}: 'fsdp' must be true or false")
        for key in ("input", "output"):
            if entry.get(key, "replicate") not in ("shard", "replicate", "sequence"):
                raise ModelError(f"{where}: {key!r} must be 'shard', 'replicate' or 'sequence'")
        dim = entry.get("sequence_dim")
        if "sequence" in (entry.get("input"), entry.get("output")) and not (_count(dim) or dim == -1):
            raise ModelError(
                f"{where}: a 'sequence' layout needs 'sequence_dim', the dimension it splits (-1: the last)"
            )
        params = entry.get("params", [])
        if not (isinstance(params, list) and all(isinstance(x, str) for x in params)):
            raise ModelError(f"{where}: 'params' must be a list of parameter names, got {params!r}")
        if not isinstance(entry.get("rerun", True), bool):
            raise ModelError(f"{where}: 'rerun' must be true or false")
        if not isinstance(entry.get("reshard", True), bool) or (entry.get("reshard") is False and not entry["fsdp"]):
            raise ModelError(f"{where}: 'reshard' must be true or false, false (ZeRO-2) only where 'fsdp' is true")
        group = entry.get("hsdp", 0)
        if group and not (_positive_int(group) and entry["fsdp"] and shape[0] % group == 0):
            raise ModelError(f"{where}: 'hsdp' must divide the data-parallel devices, on a module 'fsdp' shards")
        pieces = entry.get("pieces", 1)
        if not _positive_int(pieces) or (pieces > 1 and (entry["tp"], entry.get("output")) != ("colwise", "shard")):
            raise ModelError(
                f"{where}: 'pieces' must be a positive integer, above 1 only on a colwise module handing on its shard"
            )
        held = entry.get("held_elements", 0.0)
        if isinstance(held, bool) or not isinstance(held, int | float) or not 0 <= held < math.inf:
            raise ModelError(f"{where}: 'held_elements' must be a non-negative number, got {held!r}")
        counts = entry.get("collectives", {})
        if not (
            isinstance(counts, dict)
            and set(counts) <= set(PHASES)
            and all(isinstance(c, dict) and all(_count(n) for n in c.values()) for c in counts.values())
        ):
            raise ModelError(
                f'{where}: \'collectives\' must be {{"forward": {{kind: count}}, "backward": {{...}}, "recompute": {{...}}}}'
            )
    return (shape[0], shape[1]), modules


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
