"""The full-size shapes of issue 44: Llama-2-70B (Hugging Face's `LlamaForCausalLM` on the meta device,
one 4096-token sequence per GPU, 4 x 8 H100 80 GB) and GPT-3 175B (as GPT-2's model class, one
2048-token sequence per GPU, 16 x 8 H100), each planned on paper (`stratopt plan`) and among the
strategies PyTorch runs (`plan --expressible torch`). One Markdown row per search: the estimate, the
memory per device, the search's objective and lower bound (both in the search's sum of per-operator
times, which the estimate overlaps), the gap between them, the forward communication selective
checkpointing issues again unpriced (:func:`~stratopt.planning.recompute.reissued`), and the seconds
it took; then the runnable
plan's estimate over the paper plan's. The machine is recorded above the table.

    python scripts/bench_large.py [--models llama-70b,gpt3-175b] [--searches paper,torch] [--time-limit 120]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time

CASES = {  # name: (entry point factory, nodes, gpus per node)
    "llama-70b": ("llama_70b", 4, 8, 4096),
    "gpt3-175b": ("gpt3_175b", 16, 8, 2048),
}


def main() -> None:
    from stratopt.importers import from_torch, hf
    from stratopt.planning import plan
    from stratopt.planning.recompute import reissued

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--searches", default="paper,torch", help="paper (unrestricted), torch (runnable) or both")
    parser.add_argument("--time-limit", type=float, default=120.0, help="the memory search's seconds (plan's default)")
    args = parser.parse_args()
    print(f"machine: {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| model | cluster | search | estimate s | memory GB | objective s | bound s | gap | re-issued s | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        factory, nodes, gpus, seq = CASES[name]
        graph = from_torch(*getattr(hf, factory)(batch=nodes * gpus, seq=seq), name=name)
        estimates = {}
        for kind in [None if k == "paper" else k for k in args.searches.split(",")]:
            result = None  # the last search's costing (gigabytes at 128 devices) gone first
            gc.collect()
            started = time.perf_counter()
            result = plan(graph, nodes, gpus, simulate=False, expressible=kind, time_limit=args.time_limit)
            took = time.perf_counter() - started
            best = result.plan
            if best.estimate is None:
                print(
                    f"| {name} | {nodes}x{gpus} | {kind or 'paper'} | - | - | - | - | - | - | {took:.0f} |", flush=True
                )
                continue
            estimates[kind] = best.estimate
            bound = result.bound
            objective = best.objective
            again = reissued(result.costing, best.assignment)
            gap = "-" if bound is None else f"{100 * (objective - bound) / objective:.1f}%"
            shown = "-" if bound is None else f"{bound / 1e6:.3f}"
            print(
                f"| {name} | {nodes}x{gpus} | {kind or 'paper'} | {best.estimate / 1e6:.3f} | {best.memory / 1e9:.1f} "
                f"| {objective / 1e6:.3f} | {shown} | {gap} | {again / 1e6:.3f} | {took:.0f} |",
                flush=True,
            )
        if len(estimates) == 2:
            print(f"\n{name}: runnable / paper = {estimates['torch'] / estimates[None]:.3f}\n", flush=True)


if __name__ == "__main__":
    main()
