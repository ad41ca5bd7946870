"""Close the loop on this machine: profile it, plan small and mid-size models on it, run every
strategy that runs, and hold each prediction against the measured step.

1. `stratopt profile` measures this machine before each model (on `--device cuda`, once, in
   float32, what `train` runs in; or `--machine FILE` takes a machine file for all of them);
2. each model (Hugging Face configurations written here: two decoders, an MoE, a CNN) is planned on
   it at `--world` devices with `--expressible torch`, and the plan and every baseline that runs are
   exported (`plan --export-all`); the plan with every block recomputed and the best two-stage
   pipeline PyTorch runs (`--stages 2 --microbatches auto`) are exported beside them (at world 1,
   where no pipeline has two stages: the plan with 4 micro-batches of gradient accumulation);
3. each strategy runs `--steps` AdamW steps with `stratopt train` on `--world` ranks, in `--rounds`
   rounds (the second in the reverse order); the measured step is the median after the first, of
   the round that measured it fastest (the least disturbed by the machine's drifts).

Prints one Markdown row per strategy (predicted, measured, their ratio) and per model whether the
strategy predicted fastest measures within 10% of the fastest measured, then the median
|predicted / measured - 1|. The machine is recorded above the table.

    python scripts/bench_loop.py [--world 2] [--steps 4] [--rounds 2] [--machine FILE] [--models ...]
    python scripts/bench_loop.py --device cuda --world 1   # a GPU: plain, recomputed, accumulated
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def configs(folder: Path) -> dict[str, str]:
    """The models, as `hf:` specifications of configurations written into ``folder``."""
    import transformers as t

    made = {
        "gpt2": (t.GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8192, n_positions=256), "seq=256,batch=8"),
        "llama": (
            t.LlamaConfig(
                hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                intermediate_size=1408, vocab_size=8192, max_position_embeddings=256,
            ),
            "seq=256,batch=8",
        ),
        "mixtral": (
            t.MixtralConfig(
                hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=512, num_local_experts=4, num_experts_per_tok=2, vocab_size=4096,
                max_position_embeddings=128,
            ),
            "seq=128,batch=8",
        ),
        "resnet": (t.ResNetConfig(hidden_sizes=[32, 64, 128], depths=[1, 1, 1], embedding_size=16), "batch=16,image=64"),
    }  # fmt: skip
    out = {}
    for name, (config, run) in made.items():
        where = folder / name
        where.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(where)
        out[name] = f"hf:{where},{run}"
    return out


def main() -> None:
    from stratopt.errors import StratoptError
    from stratopt.machine import write_machine
    from stratopt.planning import plan
    from stratopt.planning.export import ExportedPlan
    from stratopt.planning.pipelined import runnable_stages
    from stratopt.torch.profile import profile
    from stratopt.torch.train import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each strategy (the least disturbed kept)")
    parser.add_argument("--machine", help="a machine file (default: profile this machine)")
    parser.add_argument("--models", default="gpt2,llama,mixtral,resnet")
    parser.add_argument("--json", help="also write every row here")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take (900)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_loop_"))

    def machine_now(name: str) -> str:
        """The machine file to price ``name`` on: ``--machine``, else this machine profiled now (a
        shared machine's speed drifts: each model is priced on a profile taken just before it runs)."""
        if args.machine is not None:
            return str(args.machine)
        if args.device == "cuda":  # a GPU's speed holds still: one profile, in train's float32
            path = str(folder / "machine-cuda.json")
            if not Path(path).exists():
                found = profile("cuda", args.world, name="this-gpu", dtype="float32")
                write_machine(found.machine, path)
                print(f"profiled {found.machine.description} in {found.seconds:.0f} s", file=sys.stderr)
            return path
        found = profile("cpu", args.world, name="this-cpu")
        path = str(folder / f"machine-{name}.json")
        write_machine(found.machine, path)
        print(f"{name}: profiled in {found.seconds:.0f} s", file=sys.stderr)
        return path

    where = args.machine or f"a profile of this machine taken before each model ({folder})"
    if args.device == "cuda" and args.machine is None:
        where = f"a profile of this machine's GPU in float32 ({folder})"
    card = ""
    if args.device == "cuda":
        import torch

        card = f", {torch.cuda.get_device_name(0)} (PyTorch {torch.__version__})"
    print(
        f"machine: {platform.node()}: {os.cpu_count()} cores{card}, Python {platform.python_version()}; "
        f"priced on {where}\n"
    )
    models = configs(folder)
    rows = []
    print("| model | strategy | mesh | predicted s | measured s | predicted / measured |")
    print("|---|---|---|---|---|---|")
    verdicts = []
    for name in args.models.split(","):
        entry = models[name]
        machine = machine_now(name)
        started = time.perf_counter()
        result = plan(entry, 1, args.world, machine=machine, simulate=False, expressible="torch")
        written = result.export_all(folder / name / "plans")
        try:
            again = plan(entry, 1, args.world, machine=machine, simulate=False, expressible="torch", recompute="full")
            exported = ExportedPlan.of(again)
            if exported.mesh is not None:
                path = folder / name / "plans" / "recompute-full.json"
                exported.write(path)
                written["recompute-full"] = str(path)
        except StratoptError as exc:
            written["recompute-full"] = str(exc)
        # two pipeline stages, the micro-batches searched; at world 1, 4 micro-batches accumulated
        staged, stages, micro = ("pipeline-2", 2, "auto") if args.world > 1 else ("accumulate-4", 1, 4)
        try:
            _, run = runnable_stages(result, stages=stages, microbatches=micro)
            path = folder / name / "plans" / f"{staged}.json"
            ExportedPlan.of_pipeline(result, run).write(path)
            written[staged] = str(path)
        except StratoptError as exc:
            written[staged] = str(exc)
        print(f"{name}: planned in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        measured = {}
        runnable, layouts = [], {}
        for strategy, path in written.items():  # each layout once (at world 1 data parallelism is the plan)
            if not path.endswith(".json"):
                continue
            found = json.loads(Path(path).read_text())
            layout = json.dumps([found.get(k) for k in ("mesh", "modules", "recompute", "pipeline")], sort_keys=True)
            if layout in layouts:
                print(f"{name}: {strategy} not run: the layout of {layouts[layout]}", file=sys.stderr)
                continue
            layouts[layout] = strategy
            runnable.append(strategy)
        for strategy in written:
            if not written[strategy].endswith(".json"):
                print(f"{name}: {strategy} not run: {written[strategy]}", file=sys.stderr)
        reports: dict[str, list] = {s: [] for s in runnable}
        for round_ in range(args.rounds):  # each round in the other order: drifts of the machine even out
            for strategy in runnable if round_ % 2 == 0 else runnable[::-1]:
                try:
                    reports[strategy].append(
                        train(entry, written[strategy], args.world, args.steps, timeout=args.timeout)
                    )
                except StratoptError as exc:
                    print(f"{name}: {strategy} failed: {exc}", file=sys.stderr)
        for strategy in runnable:
            if not reports[strategy]:
                continue
            report = min(reports[strategy], key=lambda r: r.measured_step_s)  # the least disturbed run
            predicted, took = report.predicted_step_s, report.measured_step_s
            measured[strategy] = (predicted, took)
            ratio = predicted / took if predicted else float("nan")
            mesh = " x ".join(map(str, ((report.stages,) if report.stages > 1 else ()) + tuple(report.mesh)))
            print(f"| {name} | {strategy} | {mesh} | {predicted:.3f} | {took:.3f} | {ratio:.2f} |", flush=True)
            rows.append({"model": name, "strategy": strategy, "mesh": list(report.mesh), "predicted_s": predicted,
                         "measured_s": took, "seconds": report.seconds})  # fmt: skip
        if measured:
            fastest = min(measured, key=lambda s: measured[s][1])
            chosen = min(measured, key=lambda s: measured[s][0])
            slower = measured[chosen][1] / measured[fastest][1]
            verdicts.append((name, chosen, fastest, slower))
    errors = [abs(r["predicted_s"] / r["measured_s"] - 1.0) for r in rows if r["predicted_s"]]
    print()
    for name, chosen, fastest, slower in verdicts:
        print(f"- {name}: predicted fastest {chosen}, measured fastest {fastest}: {slower:.2f}x the fastest")
    if errors:
        print(f"\nmedian |predicted / measured - 1| over {len(errors)} runs: {statistics.median(errors):.1%}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": json.loads(Path(machine).read_text()), "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
