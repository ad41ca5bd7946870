"""Train with a plan: ``world`` ranks run ``steps`` AdamW steps of the model laid out as the plan says
(``stratopt train``; see :func:`train`), and optionally one process beside them to hold the losses
against.

Each step draws a synthetic batch of the model's example shapes (token ids in the example's range,
images from a normal distribution; the same on every rank, each rank feeding its data-parallel part),
runs forward and backward, steps AdamW and clears the gradients. The loss is check-plan's (the mean of
the first output times a fixed random tensor). Models run in eval mode (no dropout), so that the
parallel run and one process compute the same thing. Under ``torchrun`` the same module runs as
``torchrun --nproc-per-node N -m stratopt.torch.train MODEL --plan FILE --steps S``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from stratopt.errors import ModelError, StratoptError
from stratopt.planning.export import plan_from_dict
from stratopt.torch.apply import _torch, parallelize, plan_of
from stratopt.torch.check import check_shape
from stratopt.torch.launch import backend, run_ranks
from stratopt.torch.pipeline import pipeline_stage
from stratopt.torch.runs import build_model, local_part, loss_of

__all__ = ["LOSS_TOLERANCE", "TrainReport", "train"]

#: Each step's loss agrees with one process's to this relative error (float32, a few AdamW steps).
LOSS_TOLERANCE = 1e-4


@dataclass(frozen=True)
class TrainReport:
    """What :func:`train` measured: per step the loss (averaged over the data-parallel groups), the
    seconds the slowest rank took, the tokens (or images) per second, and each rank's peak memory;
    the plan's own estimate of a step; with a check, one process's losses."""

    model: str
    world: int
    mesh: tuple[int, int]
    backend: str
    losses: list[float]
    seconds: list[float]
    samples: int
    unit: str
    peak_memory: list[float]
    predicted_step_s: float | None
    one_process_losses: list[float] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    stages: int = 1

    @property
    def measured_step_s(self) -> float:
        """The median step after the first (which pays the warm-up), or the only one."""
        later = self.seconds[1:] or self.seconds
        return float(statistics.median(later))

    @property
    def max_relative_error(self) -> float | None:
        if self.one_process_losses is None:
            return None
        pairs = zip(self.losses, self.one_process_losses, strict=True)
        return max((abs(a - b) / max(abs(b), 1e-30) for a, b in pairs), default=0.0)

    @property
    def ok(self) -> bool | None:
        error = self.max_relative_error
        return None if error is None else error <= LOSS_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "world": self.world,
            "mesh": list(self.mesh),
            "stages": self.stages,
            "backend": self.backend,
            "steps": [
                {
                    "step": k + 1,
                    "loss": loss,
                    "seconds": s,
                    f"{self.unit}_per_s": self.samples / s if s > 0 else math.inf,
                    "peak_memory_bytes": self.peak_memory,
                }
                for k, (loss, s) in enumerate(zip(self.losses, self.seconds, strict=True))
            ],
            "losses": self.losses,
            "measured_step_s": self.measured_step_s,
            "predicted_step_s": self.predicted_step_s,
        }
        if self.one_process_losses is not None:
            out.update(
                ok=self.ok,
                one_process_losses=self.one_process_losses,
                max_relative_error=self.max_relative_error,
                tolerance=LOSS_TOLERANCE,
            )
        return out


def train(
    model: str,
    plan: Any,
    world: int,
    steps: int,
    *,
    check: bool = False,
    seed: int = 0,
    lr: float = 1e-3,
    dtype: str = "float32",
    timeout: float = 600.0,
) -> TrainReport:
    """Run ``steps`` AdamW steps of ``model`` (an entry point or ``hf:`` configuration, as ``plan``
    and ``check-plan`` take it) laid out by ``plan`` (an exported plan, its path or a
    :class:`~stratopt.planning.PlanResult`) on ``world`` ranks (gloo on the CPU, NCCL where CUDA has a
    device per rank); with ``check``, the same steps on one process too. Bad input (a plan for
    another model or mesh, a batch that does not split, a bad count) is a one-line
    :class:`ModelError`."""
    _torch()
    exported = plan_of(plan)
    assert exported.mesh is not None
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ModelError(f"--steps must be a positive number of steps, got {steps!r}")
    if dtype not in ("float32", "float64"):
        raise ModelError(f"--dtype must be float32 or float64, got {dtype!r}")
    dp, tp = exported.mesh
    check_shape(model, exported, world, seed)
    payload = (model, exported.to_dict(), steps, seed, lr, dtype)
    ranks = run_ranks(_steps, world, payload, timeout=timeout, what="train")
    first = ranks[0]
    reference = _one_process(model, steps, seed, lr, dtype) if check else None
    seconds = [max(r["seconds"][k] for r in ranks) for k in range(steps)]  # a step ends when its slowest rank does
    estimate = exported.estimate_us
    return TrainReport(
        model, world, (dp, tp), backend(world), first["losses"], seconds, first["samples"], first["unit"],
        [float(r["peak"]) for r in ranks], None if estimate is None else estimate / 1e6, reference,
        stages=exported.stages,
    )  # fmt: skip


def _batch(inputs: tuple[Any, ...], seed: int, step: int) -> tuple[Any, ...]:
    """A synthetic batch of the example's shapes: token ids in the example's range, else normal values."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    out = []
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            out.append(t)
        elif t.is_floating_point():
            out.append(torch.randn(t.shape, generator=generator, dtype=t.dtype))
        else:
            high = max(int(t.max()) + 1, 1) if t.numel() else 1
            out.append(torch.randint(0, high, t.shape, generator=generator, dtype=t.dtype))
    return tuple(out)


def _samples(inputs: tuple[Any, ...]) -> tuple[int, str]:
    """What a step processes: the first input's tokens (integer ids), else its samples (images)."""
    first = next((t for t in inputs if hasattr(t, "shape") and t.dim()), None)
    if first is None:
        return 1, "samples"
    return (int(first.numel()), "tokens") if not first.is_floating_point() else (int(first.shape[0]), "samples")


def _peak_memory(torch: Any) -> float:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return float(torch.cuda.max_memory_allocated())
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0  # KiB on Linux


def _steps(rank: int, world: int, payload: tuple[str, dict[str, Any], int, int, float, str]) -> dict[str, Any]:
    """This rank's part of every step (:func:`~stratopt.torch.launch.run_ranks`' work)."""
    import torch
    import torch.distributed as dist

    entry, data, steps, seed, lr, dtype = payload
    model, inputs = build_model(entry, seed, dtype)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    if device is not None:
        model = model.to(device)
    exported = plan_from_dict(data)
    staged = pipeline_stage(model, exported) if exported.pipeline is not None else None
    done = staged.done if staged is not None else parallelize(model, exported)
    optimizer = torch.optim.AdamW(staged.parameters() if staged is not None else model.parameters(), lr=lr)
    part = int(done.mesh.get_coordinate()[0])
    losses, seconds = [], []
    for step in range(steps):
        local = done.local_batch(_batch(inputs, seed, step))
        if device is not None:
            local = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in local)
            torch.cuda.synchronize()
        started = time.perf_counter()
        if staged is None:
            loss = loss_of(model(*local), part, done.dp)
            loss.backward()
            value = local_part(loss.detach()).clone().double()
        else:
            rows = torch.arange(next(t for t in local if isinstance(t, torch.Tensor) and t.dim()).shape[0])
            found = staged.step(local, rows.to(device) if device is not None else rows)
            speaks = found is not None and int(staged.mesh.get_coordinate()[2]) == 0
            value = torch.tensor([found if speaks else 0.0], dtype=torch.float64, device=device)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device is not None:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
        dist.all_reduce(value, group=done.mesh.get_group("dp") if staged is None else None)
        losses.append(float(value) / done.dp)
        if rank == 0:
            print(f"train: step {step + 1}/{steps}: loss {losses[-1]:.6g}, {seconds[-1]:.3f} s", file=sys.stderr)
    samples, unit = _samples(inputs)
    return {"losses": losses, "seconds": seconds, "peak": _peak_memory(torch), "samples": samples, "unit": unit}


def _one_process(entry: str, steps: int, seed: int, lr: float, dtype: str) -> list[float]:
    """The same steps on one process, the whole batch at once: the losses to hold the ranks' against."""
    import torch

    model, inputs = build_model(entry, seed, dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        loss = loss_of(model(*_batch(inputs, seed, step)))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses


def main(argv: list[str] | None = None) -> int:
    """``torchrun --nproc-per-node N -m stratopt.torch.train MODEL --plan FILE --steps S``: each rank
    runs its part; rank 0 prints a line per step (stderr) and the figures as JSON (stdout)."""
    import torch.distributed as dist

    parser = argparse.ArgumentParser(prog="python -m stratopt.torch.train", description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    args = parser.parse_args(argv)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    try:
        exported = plan_of(args.plan)
        kind = backend(world)
        if kind == "nccl":
            import torch

            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(kind)
        found = _steps(rank, world, (args.model, exported.to_dict(), args.steps, args.seed, 1e-3, args.dtype))
    except StratoptError as exc:
        print(f"stratopt.torch.train: error: {exc}", file=sys.stderr)
        return 2
    if rank == 0:
        print(json.dumps(found))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
