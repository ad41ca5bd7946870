"""`stratopt plan` against the strategies people write by hand, on three models and three clusters.

For GPT (the zoo's, batch 8: strong scaling), a Llama-7B-shaped decoder (1 sequence of 1024 tokens
per device) and a ViT-L/16-shaped encoder (8 images per device), both built on the meta device, on
1 x 8, 4 x 8 and 16 x 8 H100s (80 GB each): one Markdown row per strategy with its step time by the
additive model and by the simulator, memory per device, whether it fits, how much faster the plan
is, and the seconds `plan` took. A `*` marks a strategy that the simulator ranks differently from
the additive model (against the plan). The machine is recorded above the table.

    python scripts/bench_plan.py [--models gpt,llama-7b,vit-l] [--clusters 1x8,4x8,16x8] [--no-simulate]
"""

from __future__ import annotations

import argparse
import os
import platform
import time


def model(name: str, devices: int):
    from stratopt.importers import from_torch, hf

    if name == "gpt":
        return "gpt"
    if name == "llama-7b":
        return from_torch(*hf.llama_7b(batch=devices, seq=1024), name="llama-7b")
    if name == "vit-l":
        return from_torch(*hf.vit_large(batch=8 * devices), name="vit-l")
    raise SystemExit(f"unknown model {name!r}")


def main() -> None:
    from stratopt import plan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt,llama-7b,vit-l")
    parser.add_argument("--clusters", default="1x8,4x8,16x8")
    parser.add_argument("--no-simulate", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print(
        "| model | cluster | strategy | step ms (model) | step ms (simulated) | GB per device | fits | plan faster by (model / sim.) | plan s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for spec in args.clusters.split(","):
            nodes, gpus = (int(x) for x in spec.split("x"))
            graph = model(name, nodes * gpus)
            start = time.perf_counter()
            r = plan(graph, nodes, gpus, simulate=not args.no_simulate)
            seconds = time.perf_counter() - start
            p = r.plan
            for s in (p, *r.baselines):
                if s.assignment is None:
                    print(f"| {name} | {spec} | {s.name} | - | - | - | - | {s.note} | |")
                    continue
                both = s is not p and p.simulated is not None and s.simulated is not None and p.estimate and s.estimate
                flag = " *" if both and (s.estimate < p.estimate) != (s.simulated < p.simulated) else ""
                ratio = "-"
                if s is not p and p.estimate and s.estimate:
                    ratio = f"{s.estimate / p.estimate:.2f}x"
                    if p.simulated and s.simulated:
                        ratio += f" / {s.simulated / p.simulated:.2f}x"
                sim = "-" if s.simulated is None else f"{s.simulated / 1e3:,.1f}"
                print(
                    f"| {name} | {spec} | {s.name}{flag} | {s.estimate / 1e3:,.1f} | {sim} | {s.memory / 1e9:.1f} | "
                    f"{'yes' if s.fits else 'no'} | {ratio} | {f'{seconds:.1f}' if s is p else ''} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
