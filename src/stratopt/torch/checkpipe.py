"""check-plan's run of a pipelined plan on one rank (see :func:`stratopt.torch.check.check_plan`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stratopt.planning.export import ExportedPlan
from stratopt.torch.pipeline import count_transfers, pipeline_stage
from stratopt.torch.record import CollectiveRecorder
from stratopt.torch.runs import build_model, errors_of, full, local_part

__all__ = ["staged_case"]


def _merged(parts: list[dict[str, dict[str, dict[str, int]]]]) -> dict[str, dict[str, dict[str, int]]]:
    """Counts per module and pass from several stages, added up."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for part in parts:
        for name, phases in part.items():
            for phase, kinds in phases.items():
                into = out.setdefault(name, {}).setdefault(phase, {})
                for kind, n in kinds.items():
                    into[kind] = into.get(kind, 0) + n
    return out


def staged_case(
    entry: str, plan: ExportedPlan, seed: int, rank: int, world: int, dtype: str, reference: dict[str, Any]
) -> dict[str, Any] | None:
    """Run one step of ``plan``'s pipeline on this rank; rank 0 (given one process's ``reference``)
    returns the figures check-plan compares, gathered from every stage, the others None."""
    import torch
    import torch.distributed as dist

    model, inputs = build_model(entry, seed, dtype)
    staged = pipeline_stage(model, plan, prefetch=False)
    local = staged.done.local_batch(inputs)
    rows = torch.arange(next(t for t in local if isinstance(t, torch.Tensor) and t.dim()).shape[0])
    param_bytes = sum(local_part(p).numel() * p.element_size() for p in staged.parameters())
    # The first step also finds the shapes the stages exchange (running a forward to do so): a step
    # before the one checked, its gradients dropped.
    staged.step(local, rows)
    staged.zero_grad()
    moved: Counter[tuple[str, int]] = Counter()
    with CollectiveRecorder(staged.models) as recorder, count_transfers(moved):
        value = staged.step(local, rows)
    coordinate = [int(x) for x in staged.mesh.get_coordinate()]
    speaks = coordinate[1:] == [0, 0]  # one rank of each stage reports it
    total = torch.tensor([value if value is not None and coordinate[2] == 0 else 0.0], dtype=torch.float64)
    dist.all_reduce(total)
    grads = {n: full(p.grad).detach() for n, p in staged.named_parameters() if p.grad is not None}
    report = None
    if speaks:
        seen = {f"{kind} {size} B": n for (kind, size), n in sorted(moved.items())}
        again = {name: r["recompute"] for name, r in recorder.forward_runs().items()}
        report = (staged.stage, grads, recorder.by_module(), again, seen)
    reports: list[Any] = [None] * world
    dist.all_gather_object(reports, report)
    sizes = [0] * world
    dist.all_gather_object(sizes, param_bytes)
    if rank != 0:
        return None
    found = sorted((r for r in reports if r is not None), key=lambda r: r[0])
    all_grads = {n: g for r in found for n, g in r[1].items()}
    errors = errors_of(all_grads, reference["grads"])
    worst = max(errors, key=lambda n: errors[n]) if errors else ""
    runs: dict[str, int] = {}
    for r in found:
        for name, n in r[3].items():
            runs[name] = runs.get(name, 0) + n
    return {
        "loss": float(total) / staged.dp,
        "reference_loss": reference["loss"],
        "worst": worst,
        "error": errors.get(worst, 0.0),
        "bytes": sizes,
        "counts": _merged([r[2] for r in found]),
        "runs": runs,
        "numels": {n: int(g.numel()) for n, g in reference["grads"].items()},
        "tied": [],
        "element": int(next(iter(reference["grads"].values())).element_size()),
        "transfers": [r[4] for r in found],
    }
