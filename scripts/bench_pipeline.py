"""Pipeline stages with intra-operator splits, against no pipeline and a Megatron-style manual plan.

Table 1: GPT and the Transformer (zoo; their batch is one micro-batch) on 2, 4 and 8 nodes of 8
H100s, 8 micro-batches per iteration, 1F1B: the searched pipeline (stages, group sizes and intra-
operator strategies chosen together), the best plan without pipelining (one stage: the DP's optimum on every
device, micro-batch after micro-batch), and a Megatron-style manual plan (tensor parallel 8 inside
each node, one pipeline stage per node over equal runs of units). Each estimated (the 1F1B formula,
ms per iteration) and simulated (the pipeline simulator over each stage's operator-level
simulation), with the search's seconds. Every plan synchronises weight gradients once per iteration
(gradient accumulation over the micro-batches), "no pipeline" included: it is the one-stage search.

Table 2: --microbatches auto: the model's batch (GPT 8, Transformer 64) cut into M micro-batches for
every power of two M that divides it, the stage search on each, the best kept.

Table 3: how the search time grows with depth: GPT-2-shaped decoders (hidden 1024, 16 heads, batch 8
x 1024 tokens, meta device) of 12, 24, 48 and 96 layers on 2 x 8 devices.

    python scripts/bench_pipeline.py [--nodes 2,4,8] [--microbatches 8] [--max-units 12] [--layers 12,24,48,96]
"""

from __future__ import annotations

import argparse
import os
import platform
import time


def manual(graph, nodes: int, machine, microbatches: int, max_units: int | None):
    """Megatron-style: one stage per node on equal runs of units, tensor parallel 8 in each."""
    from stratopt.planning import PipelinePlan, Stage, baselines, cluster, crossing_bytes, transfer_time
    from stratopt.planning.stages import one_f_one_b, stage_costing, unit_cuts
    from stratopt.problem import evaluate

    cuts = unit_cuts(graph, max_units)
    units = len(cuts) - 1
    if units < nodes:
        return None
    bounds = [round(k * units / nodes) for k in range(nodes + 1)]
    stages, searched = [], []
    for k in range(nodes):
        start, end = cuts[bounds[k]], cuts[bounds[k + 1]]
        costing = stage_costing(graph, Stage(start, end, 8, 0.0, ()), machine)
        found = dict((name, a) for name, a, _ in baselines(costing, 8))["megatron-tp8"]
        if isinstance(found, str):
            return None
        # The search's additive time (gradient synchronisation counted once per iteration), and the
        # step model's, which the estimate uses as it does for the searched pipeline.
        share = 1.0 - 1.0 / microbatches
        amortised = costing.problem.replace(node_costs=[c.total - share * c.phases()[2] for c in costing.vertex_costs])
        searched.append(float(evaluate(amortised, found).objective))
        stages.append(Stage(start, end, 8, costing.stage_time(found, microbatches), found))

    where = cluster(nodes, 8)
    transfers = [
        transfer_time(crossing_bytes(graph, cuts[bounds[k + 1]]), 8 * (k + 1), where) for k in range(nodes - 1)
    ]
    objective = one_f_one_b(searched + transfers, microbatches)
    return PipelinePlan(tuple(stages), tuple(transfers), microbatches, nodes * 8, objective)


def main() -> None:
    from stratopt import planning as pipeline
    from stratopt.instances import load_instance
    from stratopt.planning import cluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt,transformer")
    parser.add_argument("--nodes", default="2,4,8")
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--max-units", type=int, default=12)
    parser.add_argument("--layers", default="12,24,48,96")
    args = parser.parse_args()
    m = args.microbatches
    print(f"machine: {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| model | devices | plan | stages (devices each) | ms per iteration (model) | ms (simulated) | search s |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        graph = load_instance(name)
        for nodes in (int(n) for n in args.nodes.split(",")):
            where = cluster(nodes, 8)
            p = where.devices
            flat = pipeline.search(graph, nodes, 8, microbatches=m, stages=1)
            flat_sim = pipeline.simulate(graph, flat, where.machine)[1]["iteration_time"]
            print(
                f"| {name} | {p} | no pipeline | 1 ({flat.stages[0].devices}) | {flat.estimate / 1e3:,.1f} | "
                f"{flat_sim / 1e3:,.1f} | |"
            )
            start = time.perf_counter()
            found = pipeline.search(graph, nodes, 8, microbatches=m, max_units=args.max_units)
            seconds = time.perf_counter() - start
            sim = pipeline.simulate(graph, found, where.machine)[1]["iteration_time"]
            sizes = ",".join(str(s.devices) for s in found.stages)
            print(
                f"| {name} | {p} | searched | {len(found.stages)} ({sizes}) | {found.estimate / 1e3:,.1f} | {sim / 1e3:,.1f} | {seconds:.1f} |"
            )
            hand = manual(graph, nodes, where.machine, m, args.max_units)
            if hand is None:
                print(f"| {name} | {p} | Megatron TP 8 x PP {nodes} | cannot be expressed | - | - | |")
            else:
                hand_sim = pipeline.simulate(graph, hand, where.machine)[1]["iteration_time"]
                assert found.objective <= hand.objective + 1e-6, "the search missed a plan in its space"
                print(
                    f"| {name} | {p} | Megatron TP 8 x PP {nodes} | {nodes} (8 each) | {hand.estimate / 1e3:,.1f} | "
                    f"{hand_sim / 1e3:,.1f} | |",
                    flush=True,
                )
    print()
    print(
        "| model | devices | ms per iteration at M = 1, 2, 4, ... (model's batch cut into M) | best M | stages | ms (simulated) | search s |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        graph = load_instance(name)
        for nodes in (int(n) for n in args.nodes.split(",")):
            where = cluster(nodes, 8)
            start = time.perf_counter()
            found, micro, tried = pipeline.search_microbatches(graph, nodes, 8, max_units=args.max_units)
            seconds = time.perf_counter() - start
            sim = pipeline.simulate(micro, found, where.machine)[1]["iteration_time"]
            row = ", ".join("-" if e == float("inf") else f"{e / 1e3:,.1f}" for _, e in tried)
            print(
                f"| {name} | {where.devices} | {row} | {found.microbatches} | {len(found.stages)} | "
                f"{sim / 1e3:,.1f} | {seconds:.1f} |",
                flush=True,
            )
    print()
    print("| layers | operators | units | distinct unit tables | stages | search s |")
    print("|---|---|---|---|---|---|")
    from stratopt.importers import from_torch, hf

    for layers in (int(n) for n in args.layers.split(",")):
        graph = from_torch(
            *hf.gpt2(layers=layers, hidden=1024, heads=16, vocab=50257, batch=8, seq=1024, device="meta")
        )
        lines: list[str] = []
        start = time.perf_counter()
        found = pipeline.search(graph, 2, 8, microbatches=m, max_units=args.max_units, progress=lines.append)
        seconds = time.perf_counter() - start
        summary = next(line for line in lines if " units, group sizes " in line)
        units = summary.split(": ", 1)[1].split(" units")[0]
        tables = summary.split(": ")[-1].split(" unit tables")[0]
        print(f"| {layers} | {len(graph)} | {units} | {tables} | {len(found.stages)} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
