"""Pipelined plans at world 8, outside the default test run: each model planned on 2 x 4 devices with
``--expressible torch --stages 2 --microbatches auto`` three ways (as the search decides, with
``--recompute full``, and under ``--memory`` at 60% of the free plan's memory per device), every
plan checked with ``check-plan`` on 8 gloo processes and trained with ``train --steps 3 --check``.

Prints one Markdown row per plan (mesh, micro-batches, checkpointed blocks, FSDP modules, experts
modules split over their experts and how, every check, the training check) and exits 1 when any is not ok. Models are entry points (``module:function``
returning a model and a batch) or ``hf:`` configurations; the default is the tiny Hugging Face
decoders and MoE model of ``stratopt.importers.hf``; ``--layers N`` builds them with N blocks
(``stratopt.importers.hf:llama,layers=N``), which the interleaved schedule needs (``--schedule
interleaved``: two stages or more per device group, so four blocks or more).

    python scripts/check_world8.py [--nodes 2] [--gpus-per-node 4] [--schedule S] [--layers N] [MODEL ...]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

from stratopt.errors import StratoptError
from stratopt.planning import plan
from stratopt.planning.export import ExportedPlan
from stratopt.planning.pipelined import runnable_stages
from stratopt.torch.check import check_plans
from stratopt.torch.train import train

DEFAULT = ["stratopt.importers.hf:llama", "stratopt.importers.hf:gpt2", "stratopt.importers.hf:mixtral"]


def planned(model: str, nodes: int, gpus: int, **options: object) -> ExportedPlan:
    """The pipelined plan ``plan --stages 2 --microbatches auto --expressible torch`` exports."""
    memory = options.pop("memory_gb", None)
    result = plan(model, nodes, gpus, simulate=False, expressible="torch", memory_gb=memory)  # type: ignore[arg-type]
    _, run = runnable_stages(result, stages=2, microbatches="auto", **options)  # type: ignore[arg-type]
    return ExportedPlan.of_pipeline(result, run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--schedule", default="1f1b", help="1f1b, gpipe, interleaved or auto (plan's --schedule)")
    parser.add_argument("--layers", type=int, help="build the models with this many blocks (their layers=N)")
    args = parser.parse_args(argv)
    if args.layers is not None:
        args.models = [f"{model},layers={args.layers}" for model in args.models]
    world = args.nodes * args.gpus_per_node
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, world {world} (gloo)\n")
    cases = []
    started = time.perf_counter()
    for model in args.models:
        try:
            where = (model, args.nodes, args.gpus_per_node)
            free = planned(*where, schedule=args.schedule)
            full = planned(*where, recompute="full", schedule=args.schedule)
            limit = 0.6 * float(free.memory_bytes or 0.0) / 1e9
            tight = planned(*where, memory_gb=limit, schedule=args.schedule)
        except StratoptError as exc:
            print(f"{model}: {exc}", file=sys.stderr)
            return 1
        cases += [(model, "search", free), (model, "recompute full", full), (model, "60% memory", tight)]
        print(f"planned {model} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    reports = check_plans(
        [(m, p) for m, _, p in cases], world, timeout=1800, progress=lambda s: print(s, file=sys.stderr)
    )
    print(
        "| model | plan | mesh | M | schedule | checkpointed | FSDP modules | split experts | check-plan | failed checks "
        "| train --check |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for (model, name, exported), report in zip(cases, reports, strict=True):
        trained = train(model, exported, world, 3, check=True, timeout=1800)
        assert exported.pipeline is not None and exported.mesh is not None
        failed = ", ".join(k for k, ok in report.checks.items() if not ok) or "-"
        fsdp = sum(1 for e in exported.modules.values() if e["fsdp"])
        kinds = [e["tp"] for e in exported.modules.values() if e["tp"] in ("expert", "expert-dp")]
        experts = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) or "0"
        mesh = f"{exported.stages} x {exported.mesh[0]} x {exported.mesh[1]}"
        schedule = exported.pipeline["schedule"] + (f" ({exported.chunks} per group)" if exported.chunks > 1 else "")
        again = len(exported.recompute)
        verdict = "ok" if trained.ok else f"MISMATCH ({trained.max_relative_error:.1e})"
        print(
            f"| {model} | {name} | {mesh} | {exported.pipeline['microbatches']} | {schedule} | {again} | {fsdp} | {experts} "
            f"| {'ok' if report.ok else 'MISMATCH'} | {failed} | {verdict} |"
        )
        bad += (not report.ok) + (not trained.ok)
    print(f"\n{len(cases)} plans, {bad} failures, {time.perf_counter() - started:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
