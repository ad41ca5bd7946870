"""What running costs: for each model and cluster, the fastest plan PyTorch runs (`plan --expressible
torch`) against the fastest plan on paper (unrestricted), and whether the paper plan runs as it is.

Models are the Hugging Face zoo of `stratopt.importers.hf` (tiny decoders, an MoE, encoders, CNNs,
built on the CPU) and the small PyTorch models of `stratopt.torch.models`, plus four mid-size shapes
on the meta device, 8 of their layers each (the rest alike): Llama-7B, GPT-3 XL and Mixtral 8x7B (one
1024-token sequence per device) and ViT-L/16 (8 images per device); clusters are nodes x GPUs of H100s. On the
tiny models the per-step constant (47.5 ms on the calibrated H100) is most of every estimate. One Markdown
row per (model, cluster): both estimates, their ratio, the runnable plan's mesh, whether the paper
plan runs as it is (and if not, why), and the seconds both searches took; then the median ratio and
how many paper plans run. The machine is recorded above the table.

    python scripts/bench_runnable.py [--models gpt2,llama,...] [--clusters 1x8,2x8]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

MODELS = [
    "gpt2", "llama", "mixtral", "bert", "t5", "vit", "resnet", "convnext", "swin", "mlp", "transformer",
    "llama-7b", "gpt-1.3b", "vit-l", "mixtral-8x7b",
]  # fmt: skip


def entry(name: str, devices: int):
    from stratopt.importers import from_torch, hf

    if name in ("mlp", "transformer"):
        return f"stratopt.torch.models:{name}"
    if name == "llama-7b":
        return from_torch(*hf.llama_7b(batch=devices, seq=1024, layers=8), name="llama-7b-8-layers")
    if name == "gpt-1.3b":  # GPT-3 XL's width (2048, 16 heads), 8 of its 24 layers
        made = hf.gpt2(layers=8, hidden=2048, heads=16, vocab=50257, batch=devices, seq=1024, device="meta")
        return from_torch(*made, name="gpt-1.3b-8-layers")
    if name == "mixtral-8x7b":  # Mixtral 8x7B's shape (8 experts, 2 per token), 8 of its 32 layers
        made = hf.mixtral(
            layers=8, hidden=4096, heads=32, kv_heads=8, ffn=14336, experts=8, top_k=2, vocab=32000,
            batch=devices, seq=1024, device="meta",
        )  # fmt: skip
        return from_torch(*made, name="mixtral-8x7b-8-layers")
    if name == "vit-l":
        return from_torch(*hf.vit_large(batch=8 * devices, layers=8), name="vit-l-8-layers")
    return f"stratopt.importers.hf:{name}"


def main() -> None:
    from stratopt.errors import StratoptError
    from stratopt.planning import plan
    from stratopt.planning.export import ExportedPlan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--clusters", default="1x8,2x8")
    args = parser.parse_args()
    print(f"machine: {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| model | cluster | paper us | runnable us | runnable / paper | mesh | paper plan runs | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    ratios, runs, total = [], 0, 0
    for cluster in args.clusters.split(","):
        nodes, gpus = (int(x) for x in cluster.split("x"))
        for name in args.models.split(","):
            started = time.perf_counter()
            model = entry(name, nodes * gpus)
            try:
                paper = plan(model, nodes, gpus, simulate=False)
                runnable = plan(model, nodes, gpus, simulate=False, expressible="torch")
            except StratoptError as exc:
                print(f"| {name} | {cluster} | - | - | - | - | {exc} | - |")
                continue
            seconds = time.perf_counter() - started
            if not (paper.plan.fits and runnable.plan.fits):
                print(f"| {name} | {cluster} | - | - | - | - | nothing fits | {seconds:.0f} |")
                continue
            exported = ExportedPlan.of(paper)
            runs += exported.mesh is not None
            total += 1
            ratio = float(runnable.plan.estimate) / float(paper.plan.estimate)
            ratios.append(ratio)
            shape = ExportedPlan.of(runnable).mesh
            mesh = f"{shape[0]} x {shape[1]}" if shape else "-"
            why = "yes" if exported.mesh is not None else f"no: {exported.why[:90]}"
            print(
                f"| {name} | {cluster} | {paper.plan.estimate:,.1f} | {runnable.plan.estimate:,.1f} | {ratio:.3f} "
                f"| {mesh} | {why} | {seconds:.0f} |",
                flush=True,
            )
    if ratios:
        print(
            f"\nmedian runnable / paper over {len(ratios)} cases: {statistics.median(ratios):.3f} (max {max(ratios):.3f});"
        )
        print(f"paper plans that run as they are: {runs} of {total}")


if __name__ == "__main__":
    main()
