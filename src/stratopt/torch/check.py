"""Run a plan on N gloo processes and hold it against one process and against its prices
(``stratopt check-plan``; see :func:`check_plan`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stratopt.errors import ModelError
from stratopt.planning.export import PHASES, ExportedPlan, plan_from_dict
from stratopt.torch.apply import _torch, parallelize, plan_of, tied_groups, validate
from stratopt.torch.checkpipe import staged_case
from stratopt.torch.launch import run_ranks
from stratopt.torch.record import CollectiveRecorder
from stratopt.torch.runs import build_model, errors_of, full, local_part, loss_of

__all__ = ["TOLERANCE", "CheckReport", "build_model", "check_plan", "check_plans", "local_part", "loss_of"]

#: Loss and every gradient agree with one process to this relative error (fp32).
TOLERANCE = 1e-5


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check_plan` found: ``ok`` when every check passed; each check's figures."""

    model: str
    world: int
    mesh: tuple[int, int]
    loss: float
    reference_loss: float
    loss_error: float
    worst_gradient: str
    gradient_error: float
    param_bytes: list[int]
    planned_bytes: float
    priced_bytes: float
    collectives: list[dict[str, Any]]
    unpriced: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    seconds: float = 0.0
    reruns: dict[str, dict[str, int]] = field(default_factory=dict)
    stages: int = 1
    transfers: list[dict[str, Any]] = field(default_factory=list)
    products: list[dict[str, Any]] = field(default_factory=list)

    @property
    def checks(self) -> dict[str, bool]:
        out = {
            "loss": self.loss_error <= TOLERANCE,
            "gradients": self.gradient_error <= TOLERANCE,
            "parameter bytes": sum(self.param_bytes) == round(self.planned_bytes * self.world),
            "collectives": all(row["match"] for row in self.collectives),
            "recomputation": all(r["planned"] == r["counted"] for r in [*self.reruns.values(), *self.products]),
        }
        if self.stages > 1:
            out["pipeline transfers"] = all(row["match"] for row in self.transfers)
        return out

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checks": self.checks,
            "model": self.model,
            "world": self.world,
            "mesh": list(self.mesh),
            "tolerance": TOLERANCE,
            "loss": {"parallel": self.loss, "one_process": self.reference_loss, "relative_error": self.loss_error},
            "gradients": {"worst": self.worst_gradient, "relative_error": self.gradient_error},
            "parameter_bytes": {
                "per_rank": self.param_bytes,
                "plan_per_rank": self.planned_bytes,
                "cost_model_per_device": self.priced_bytes,
            },
            "collectives": self.collectives,
            "unpriced_modules": self.unpriced,
            "recomputed_forwards": self.reruns,
            "recomputed_products": self.products,
            **({"stages": self.stages, "pipeline_transfers": self.transfers} if self.stages > 1 else {}),
            "seconds": self.seconds,
        }


def _reference(entry: str, seed: int, dtype: str) -> dict[str, Any]:
    """One process's loss and gradients."""
    model, inputs = build_model(entry, seed, dtype)
    loss = loss_of(model(*inputs))
    loss.backward()
    return {
        "loss": float(loss.detach()),
        "grads": {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None},
    }


def _one_case(entry: str, plan: ExportedPlan, seed: int, rank: int, world: int, dtype: str) -> dict[str, Any] | None:
    """Run one plan on this rank; rank 0 returns the figures, the others None."""
    import torch.distributed as dist

    if plan.pipeline is not None:
        return staged_case(entry, plan, seed, rank, world, dtype, _reference(entry, seed, dtype) if rank == 0 else {})
    reference = _reference(entry, seed, dtype) if rank == 0 else {}
    model, inputs = build_model(entry, seed, dtype)
    tied = [g for g in tied_groups(dict(model.named_modules()), list(plan.modules)) if len(g) > 1]
    done = parallelize(model, plan, prefetch=False)
    local = done.local_batch(inputs)
    param_bytes = sum(local_part(p).numel() * p.element_size() for p in model.parameters())
    with CollectiveRecorder(model) as recorder:
        loss = loss_of(model(*local), int(done.mesh.get_coordinate()[0]), done.dp)
        loss.backward()
    counts, runs, work = recorder.by_module(), recorder.forward_runs(), recorder.computed()
    value = loss.detach().clone()
    dist.all_reduce(value, group=done.mesh.get_group("dp"))
    value /= done.dp
    grads = {n: full(p.grad).detach() for n, p in model.named_parameters() if p.grad is not None}
    sizes = [0] * world
    dist.all_gather_object(sizes, param_bytes)
    if rank != 0:
        return None
    errors = errors_of(grads, reference["grads"])
    worst = max(errors, key=lambda n: errors[n]) if errors else ""
    return {
        "loss": float(value),
        "reference_loss": reference["loss"],
        "worst": worst,
        "error": errors.get(worst, 0.0),
        "bytes": sizes,
        "counts": counts,
        "runs": {name: r["recompute"] for name, r in runs.items()},
        "computed": work,
        # every parameter, a gradient or not (BERT's pooler, off the loss's path, holds its bytes too)
        "numels": _numels(model, plan),
        "tied": tied,
        "element": int(next(model.parameters()).element_size()),
    }


def _numels(model: Any, plan: ExportedPlan) -> dict[str, int]:
    """Every parameter's elements, once, under the name of a module the plan places where one
    holds it (T5's ``encoder.embed_tokens``, not the ``shared`` module beside it)."""
    named: dict[int, tuple[str, int]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        placed = name.rpartition(".")[0] in plan.modules
        if id(p) not in named or (placed and named[id(p)][0].rpartition(".")[0] not in plan.modules):
            named[id(p)] = (name, int(p.numel()))
    return dict(named.values())


def _summed(counts: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Counts by pass and kind, added over several modules (zeros dropped)."""
    out: dict[str, dict[str, int]] = {}
    for c in counts:
        for phase, kinds in c.items():
            for kind, n in kinds.items():
                out.setdefault(phase, {})[kind] = out.get(phase, {}).get(kind, 0) + n
    return _kind_counts(out)


def _folded(counts: dict[str, dict[str, dict[str, int]]], planned: Any) -> dict[str, dict[str, dict[str, int]]]:
    """The counts with each module the plan does not name added to the innermost planned module that
    holds it (an activation inside a mixture of experts' module, whose output gradient arrives last
    in that module's backward): a plan's module includes its submodules."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for name, phases in counts.items():
        owner = name
        if name not in planned:
            holders = [m for m in planned if name.startswith(m + ".")]
            owner = max(holders, key=len) if holders else name
        for phase, kinds in phases.items():
            into = out.setdefault(owner, {}).setdefault(phase, {})
            for kind, n in kinds.items():
                into[kind] = into.get(kind, 0) + n
    return out


def _after_forward(counts: dict[str, dict[str, int]]) -> tuple[dict[str, int], dict[str, int]]:
    """The forward pass's counts, and the backward's with the recomputation's added: FSDP gathers a
    recomputing module's weights once after the forward, in its recomputed forward or at the start
    of its backward, whichever the backward pass reaches first (the plan prices one either way)."""
    after: Counter[str] = Counter()
    for phase in ("backward", "recompute"):
        after.update(counts.get(phase, {}))
    return _kind_counts({"f": counts.get("forward", {})})["f"], {k: n for k, n in sorted(after.items()) if n}


def _kind_counts(raw: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """The same counts with the zeros dropped and the kinds sorted, so that two compare equal."""
    return {phase: {k: n for k, n in sorted(ops.items()) if n} for phase, ops in raw.items()}


def _cases(rank: int, world: int, payload: tuple[list[tuple[str, dict[str, Any]]], int, str]) -> list[Any]:
    """Every case on this rank (:func:`~stratopt.torch.launch.run_ranks`' work); rank 0's figures."""
    cases, seed, dtype = payload
    results = []
    for i, (entry, data) in enumerate(cases):
        started = time.perf_counter()
        try:
            found = _one_case(entry, plan_from_dict(data), seed, rank, world, dtype)
        except Exception as exc:  # say which case, in one line
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise RuntimeError(f"{entry} (plan {i + 1} of {len(cases)}): {type(exc).__name__}: {first}") from None
        if found is not None:
            found["seconds"] = time.perf_counter() - started
        results.append(found)
    return results


def _report(entry: str, plan: ExportedPlan, world: int, found: dict[str, Any]) -> CheckReport:
    assert plan.mesh is not None
    dp, tp = plan.mesh
    counts = _folded(found["counts"], plan.modules)
    rows = []
    for name, entry_ in plan.modules.items():
        priced = _kind_counts(entry_.get("collectives", {}))
        seen = _kind_counts(counts.get(name, {}))
        priced = {phase: priced.get(phase, {}) for phase in PHASES}
        seen = {phase: seen.get(phase, {}) for phase in PHASES}
        rows.append(
            {
                "module": name,
                "tp": entry_["tp"],
                "fsdp": entry_["fsdp"],
                "priced": priced,
                "counted": seen,
                "match": _after_forward(priced) == _after_forward(seen),
            }
        )
    # modules that share a weight are sharded together: their collectives are compared as one
    for group in found.get("tied", []):
        members = [r for r in rows if r["module"] in group]
        match = _after_forward(_summed([r["priced"] for r in members])) == _after_forward(
            _summed([r["counted"] for r in members])
        )
        for r in members:
            r["match"] = match
    unpriced = {
        name or "(outside every module)": _kind_counts(phases)
        for name, phases in counts.items()
        if name not in plan.modules and any(phases.values())
    }
    numels = found["numels"]
    planned = 0.0  # bytes per rank, on average over the stages
    for name, numel in numels.items():
        module, _, pname = name.rpartition(".")
        placed = plan.modules.get(module)
        share = 1.0
        if placed is not None:
            whole = ("replicate", "sequence")  # a sequence-parallel norm's weights are whole on each device
            split = placed["tp"] not in whole and not (placed["tp"] == "rowwise" and pname == "bias")
            # (a fused projection's bias stays out of FSDP: :mod:`stratopt.torch.fused`)
            apart = placed.get("pieces", 1) > 1 and pname == "bias"
            group = int(placed.get("hsdp") or dp)  # HSDP: sharded over one node's group only
            share = (1.0 / tp if split else 1.0) / (group if placed["fsdp"] and not apart else 1)
            if placed["tp"] == "expert-dp":  # the experts split over the data-parallel groups
                share = 1.0 / dp
        planned += numel * found["element"] * share / plan.stages
    held = sum(float(e.get("held_elements", 0.0)) for e in plan.modules.values()) * found["element"]
    # every block the plan checkpoints, and every module inside one, runs its forward once more
    runs = found.get("runs", {})
    m = int(plan.pipeline["microbatches"]) if plan.pipeline is not None else 1  # a forward per micro-batch
    reruns = {name: {"planned": m, "counted": runs.get(name, 0)} for name in plan.recompute}
    for name, entry_ in plan.modules.items():
        again = m * int("recompute" in entry_.get("collectives", {}))
        reruns[name] = {"planned": again, "counted": runs.get(name, 0)}
    loss, ref = found["loss"], found["reference_loss"]
    return CheckReport(
        entry, world, (dp, tp), loss, ref, abs(loss - ref) / max(abs(ref), 1e-30), found["worst"], found["error"],
        found["bytes"], planned, held, rows, unpriced, found.get("seconds", 0.0), reruns, plan.stages,
        _transfer_rows(plan, found), _product_rows(plan, found.get("computed", {})),
    )  # fmt: skip


def _product_rows(plan: ExportedPlan, work: dict[str, dict[str, dict[str, int]]]) -> list[dict[str, Any]]:
    """In every checkpointed block, the matrix products each module ran again in the backward pass
    and the block's attention kernels run again, against the plan's: none where it keeps them
    (selective checkpointing) or the re-run stops before them (a block's last product), as many as
    the forward pass ran otherwise."""

    def inside(name: str, block: str) -> bool:
        return name == block or name.startswith(block + ".")

    rows = []
    for name, phases in sorted(work.items()):
        ran = phases.get("forward", {}).get("product", 0)
        if ran and any(inside(name, b) for b in plan.recompute):
            stops = not plan.modules.get(name, {}).get("rerun", True)  # the re-run stops before it
            planned = 0 if name in plan.keep or stops else ran
            again = phases.get("recompute", {}).get("product", 0)
            rows.append({"what": name, "kind": "product", "planned": planned, "counted": again})
    for block in plan.recompute:
        within = [p for n, p in work.items() if inside(n, block)]
        ran = sum(p.get("forward", {}).get("attention", 0) for p in within)
        if ran:
            planned = 0 if block in plan.keep_attention else ran
            again = sum(p.get("recompute", {}).get("attention", 0) for p in within)
            rows.append({"what": block, "kind": "attention", "planned": planned, "counted": again})
    return rows


def _transfer_rows(plan: ExportedPlan, found: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stage (device group), the pipeline's sends and receives of activations and their gradients
    (count by bytes) against the plan's: a micro-batch's tensor across each boundary of each of the
    group's stages, each way."""
    if plan.pipeline is None or plan.mesh is None:
        return []
    m = int(plan.pipeline["microbatches"])
    per = [int(b["elements"]) * found["element"] // plan.mesh[0] for b in plan.pipeline["boundaries"]]
    rows = []
    groups = plan.stages
    for k, seen in enumerate(found["transfers"]):
        planned: Counter[str] = Counter()
        for j in range(k, len(per) + 1, groups):  # the group's stages (several: interleaved)
            for near in ([per[j]] if j < len(per) else []) + ([per[j - 1]] if j > 0 else []):
                for kind in ("send", "recv"):
                    planned[f"{kind} {near} B"] += m
        counted = {key: n for key, n in seen.items() if key in planned}
        rows.append({"stage": k, "planned": dict(planned), "counted": counted, "match": counted == dict(planned)})
    return rows


def check_shape(entry: str, plan: ExportedPlan, world: int, seed: int = 0) -> None:
    """A one-line :class:`ModelError` unless ``plan`` runs ``entry`` on ``world`` processes: its
    devices, its modules and blocks in the model, the batch over its groups and micro-batches."""
    assert plan.mesh is not None
    dp, tp = plan.mesh
    if plan.stages * dp * tp != world:
        shape = f"{plan.stages} stages of " if plan.stages > 1 else ""
        raise ModelError(f"{entry}: the plan runs on {shape}{dp} x {tp} devices, not --world {world}")
    model, inputs = build_model(entry, seed)
    validate(model, plan)
    parts = dp * (int(plan.pipeline["microbatches"]) if plan.pipeline is not None else 1)
    batch = next((t.shape[0] for t in inputs if hasattr(t, "shape") and t.dim()), parts)
    if batch % parts:
        what = f"{dp} data-parallel groups" + (f" x {parts // dp} micro-batches" if parts > dp else "")
        raise ModelError(f"{entry}: the batch of {batch} does not split over the plan's {what}")


def check_plans(
    cases: Sequence[tuple[str, Any]],
    world: int,
    *,
    seed: int = 0,
    timeout: float = 300.0,
    dtype: str = "float32",
    progress: Callable[[str], None] | None = None,
) -> list[CheckReport]:
    """Check several ``(entry point, plan)`` pairs on one launch of ``world`` processes (see
    :func:`check_plan`)."""

    _torch()
    if world < 1:
        raise ModelError(f"--world must be a positive number of processes, got {world}")
    plans = [plan_of(p) for _, p in cases]
    for (entry, _), plan in zip(cases, plans, strict=True):
        check_shape(entry, plan, world, seed)
    if progress is not None:
        progress(f"running {len(cases)} plan(s) on {world} gloo processes")
    if dtype not in ("float32", "float64"):
        raise ModelError(f"--dtype must be float32 or float64, got {dtype!r}")
    payload = ([(entry, p.to_dict()) for (entry, _), p in zip(cases, plans, strict=True)], seed, dtype)
    found = run_ranks(_cases, world, payload, timeout=timeout, what="check-plan")[0]
    return [_report(entry, plan, world, f) for (entry, _), plan, f in zip(cases, plans, found, strict=True)]


def check_plan(
    model: str, plan: Any, world: int, *, seed: int = 0, timeout: float = 300.0, dtype: str = "float32"
) -> CheckReport:
    """Run ``model`` (a ``module:function`` entry point returning the model and a batch) with ``plan``
    on ``world`` gloo processes and compare it with one process: the loss (the mean of the first
    output times a fixed random tensor) and every gradient within :data:`TOLERANCE` relative error,
    the parameter bytes per rank against the plan's, and the collectives counted per module and pass
    (:class:`~stratopt.torch.record.CollectiveRecorder`) against those the plan priced. Models run in
    eval mode (no dropout; batch norm on its running statistics), in ``dtype`` (float32; float64
    tells rounding from a wrong layout)."""
    return check_plans([(model, plan)], world, seed=seed, timeout=timeout, dtype=dtype)[0]
