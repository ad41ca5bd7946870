"""Pipeline stage search: exact against brute force over every cut and group size, one stage equal
to today's intra-operator optimum, and the 1F1B objective."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from stratopt.cost import build
from stratopt.errors import ModelError
from stratopt.graph import GraphBuilder
from stratopt.planning import cluster, cut_points, search, stage_graph
from stratopt.planning.stages import group_sizes
from stratopt.solvers import solve

from .machines import DATASHEET_H100


def chain(widths=(64, 256, 64, 512, 64, 128)):
    g = GraphBuilder("chain")
    x = g.input((32, 64))
    for w in widths:
        x = g.fc(x, w, pointwise=1)
    return g.build()


def once_a_step(costing) -> list:
    """Per operator, the part of each configuration's cost done once an iteration however many
    micro-batches it runs: the exposed gradient reduction and the optimizer's step."""
    o = costing.overlap
    return [c.exposed_sync(o) + (0.0 if c.per_step is None else c.per_step) for c in costing.vertex_costs]


def stage_time(graph, start, end, devices, machine, microbatches=1) -> float:
    """A stage's least time per micro-batch: the DP's optimum with the once-a-step parts counted
    ``1 / microbatches`` each micro-batch."""
    costing = build(stage_graph(graph, start, end), devices, machine=machine, cutoff=1)
    share = 1.0 - 1.0 / microbatches
    nodes = [n - share * x for n, x in zip(costing.node_costs(), once_a_step(costing), strict=True)]
    return float(solve(costing.problem.replace(node_costs=nodes), "dp").objective)


def stage_memory(graph, start, end, devices, machine) -> tuple[float, float]:
    """(bytes per device of the stage's fastest strategy, one micro-batch's activations), by hand."""
    from stratopt.cost.common import layout

    costing = build(stage_graph(graph, start, end), devices, machine=machine, cutoff=1)
    chosen = solve(costing.problem, "dp").assignment
    total = sum(float(costing.vertex_costs[v].memory[c]) for v, c in enumerate(chosen))
    acts = 0.0
    for v, op in enumerate(costing.graph.operators):
        split = layout(op, op.outputs[0], costing.configs[v][chosen[v] : chosen[v] + 1])
        acts += op.outputs[0].size / float(split.prod()) * 2.0
    return total, acts


def brute(graph, nodes, gpus, microbatches, stages=None, memory=None) -> float:
    """Every way to cut the units into consecutive stages and give each a group size (stage k of S
    holding min(S - k, M) micro-batches' activations within ``memory`` bytes, when given)."""
    where = cluster(nodes, gpus)
    p = where.devices
    cuts = cut_points(graph)
    units = len(cuts) - 1
    sizes = [g for g in group_sizes(nodes, gpus) if g <= p]
    index = graph.index
    best = math.inf
    for count in range(1, units + 1):
        if stages is not None and count != stages:
            continue
        for inner in itertools.combinations(range(1, units), count - 1):
            bounds = [0, *inner, units]
            for groups in itertools.product(sizes, repeat=count):
                if sum(groups) > p:
                    continue
                times, used, fits = [], 0, True
                for k in range(count):
                    start, end = cuts[bounds[k]], cuts[bounds[k + 1]]
                    times.append(stage_time(graph, start, end, groups[k], where.machine, microbatches))
                    if memory is not None:
                        total, acts = stage_memory(graph, start, end, groups[k], where.machine)
                        fits = fits and total + (min(count - k, microbatches) - 1) * acts <= memory
                    used += groups[k]
                    if k < count - 1:
                        u = max(
                            index[i.source]
                            for op in graph.operators[end:]
                            for i in op.inputs
                            if i.source and index[i.source] < end
                        )
                        words = graph.operators[u].outputs[0].size * 2.0
                        crosses = used % gpus == 0
                        bw, lat = where.machine.link(p if crosses else 1, p if crosses else 1)
                        times.append(float(2.0 * (words / bw + lat)) * 1e6)
                if fits:
                    best = min(best, sum(times) + (microbatches - 1) * max(times))
    return best


@pytest.mark.parametrize(
    ("nodes", "gpus", "microbatches", "stages"), [(1, 4, 8, None), (2, 2, 4, None), (2, 2, 1, None), (1, 4, 16, 2)]
)
def test_search_equals_brute_force(nodes, gpus, microbatches, stages) -> None:
    """A six-layer chain (a cut between every pair of layers) on 4 devices: the search's 1F1B time
    equals the best over every cut, every group size and (unless fixed) every stage count, and its
    own stages re-price to its estimate."""
    graph = chain()
    found = search(graph, nodes, gpus, microbatches=microbatches, stages=stages, max_units=None)
    assert found.estimate == pytest.approx(brute(graph, nodes, gpus, microbatches, stages))
    times = [s.time for s in found.stages] + list(found.transfers)
    assert found.estimate == pytest.approx(sum(times) + (microbatches - 1) * max(times))
    assert stages is None or len(found.stages) == stages
    bounds = [(s.start, s.end) for s in found.stages]
    assert bounds[0][0] == 0 and bounds[-1][1] == len(graph)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))  # consecutive, covering all


def residual(blocks: int = 4):
    """Residual blocks (fc, fc, add) between which one tensor crosses, then a last layer."""
    g = GraphBuilder("residual")
    x = g.input((64, 128))
    for _ in range(blocks):
        x = g.elementwise(x, g.fc(g.fc(x, 256), 128))
    g.fc(x, 32)
    return g.build()


@pytest.mark.parametrize(("graph", "nodes", "gpus"), [(chain(), 1, 4), (residual(), 2, 2), (residual(), 1, 4)])
def test_chained_stage_times_equal_the_dp(graph, nodes, gpus) -> None:
    """Every stage's time from the chain of unit tables equals the DP's optimum of that stage's own
    graph, and the strategy recovered for it re-prices to that optimum on the stage's own problem."""
    from stratopt.planning.units import StageCosts
    from stratopt.problem import evaluate

    where = cluster(nodes, gpus)
    cuts = cut_points(graph)
    cost = StageCosts(graph, cuts, where.machine, 1, None)
    sizes = [g for g in group_sizes(nodes, gpus) if g <= where.devices]
    times = cost.times(len(cuts) - 1, sizes, lambda _m: None)
    assert cost.chainable and len(times) == len(sizes) * (len(cuts) - 1) * len(cuts) // 2
    for (i, j, g), t in times.items():
        problem = build(stage_graph(graph, cuts[i], cuts[j]), g, machine=where.machine, cutoff=1).problem
        assert t == pytest.approx(float(solve(problem, "dp").objective), rel=1e-9)
        _, assignment = cost.fastest(i, j, g)
        assert float(evaluate(problem, assignment).objective) == pytest.approx(t, rel=1e-9)


def test_one_stage_is_the_intra_operator_optimum() -> None:
    """With one stage the pipeline is today's plan: the DP's optimum on all devices (or fewer, as the
    configuration policy allows), and M micro-batches take M times one but for the gradient
    reduction and the optimizer's step, once a step (gradient accumulation)."""
    graph = chain()
    where = cluster(2, 2)
    costing = build(graph, 4, machine=where.machine, cutoff=1)
    reference = solve(costing.problem, "dp")
    one = search(graph, 2, 2, stages=1)
    assert one.estimate == pytest.approx(reference.objective)
    five = search(graph, 2, 2, stages=1, microbatches=5).estimate
    assert five == pytest.approx(5 * stage_time(graph, 0, len(graph), 4, where.machine, 5))
    once = sum(float(x[c]) for x, c in zip(once_a_step(costing), reference.assignment, strict=True))
    assert once > 0 and five <= 5 * reference.objective - 4 * once + 1e-6


def wide_batch():
    """Small layers on a big batch: data parallelism wins, so the weight gradients are synchronised."""
    g = GraphBuilder("wide")
    x = g.input((65536, 1024))
    for w in (1024, 1024, 1024):
        x = g.fc(x, w)
    return g.build()


def test_gradient_sync_once_per_iteration() -> None:
    """Weight gradients are synchronised once per iteration, not per micro-batch: one stage over M
    micro-batches costs M times the optimum of (per micro-batch work + sync / M), found by the DP on
    those costs here, less than M whole steps; the simulation runs the sync once, after the last
    backward pass, so M micro-batches take one step plus M - 1 times a step without its sync."""
    from stratopt.planning import simulate
    from stratopt.sim.trace import simulate_strategy

    graph = wide_batch()
    where = cluster(1, 4, DATASHEET_H100)
    costing = build(graph, 4, machine=where.machine, cutoff=1)
    whole = solve(costing.problem, "dp")
    syncs = [c.phases()[2] for c in costing.vertex_costs]
    assert sum(float(s[c]) for s, c in zip(syncs, whole.assignment, strict=True)) > 0  # DP syncs gradients
    m = 6
    amortised = costing.problem.replace(
        node_costs=[c.total - (1 - 1 / m) * s for c, s in zip(costing.vertex_costs, syncs, strict=True)]
    )
    found = search(graph, 1, 4, machine=DATASHEET_H100, stages=1, microbatches=m)
    assert found.estimate == pytest.approx(m * solve(amortised, "dp").objective)
    assert found.estimate < m * whole.objective - 1e-6
    one = search(graph, 1, 4, machine=DATASHEET_H100, stages=1)
    _, info = simulate(graph, one, where.machine)
    today = simulate_strategy(costing, one.stages[0].assignment)[1]["iteration_time"]
    assert info["iteration_time"] == pytest.approx(today)
    passes = info["stage_passes"][0]
    assert passes["grad_sync"] > 0
    many = dataclasses.replace(one, microbatches=m)  # the same strategy, m micro-batches
    expected = today + (m - 1) * (passes["forward"] + passes["backward"])
    assert simulate(graph, many, where.machine)[1]["iteration_time"] == pytest.approx(expected)


def test_cuts_and_errors() -> None:
    """Cuts fall only where one tensor crosses (not inside a residual block); bad requests are one-line errors."""
    g = GraphBuilder("residual")
    x = g.input((16, 32))
    a = g.fc(x, 32)
    b = g.fc(a, 32)
    c = g.elementwise(a, b)  # a crosses the cut after b as well as b: no cut there
    g.fc(c, 32)
    assert cut_points(g.build()) == [0, 1, 3, 4]
    with pytest.raises(ModelError, match="micro-batches"):
        search(chain(), 1, 2, microbatches=0)
    with pytest.raises(ModelError, match="places to cut"):
        search(chain(), 1, 2, stages=9)


def test_simulation_of_one_stage_is_todays_simulation() -> None:
    """A one-stage, one-micro-batch pipeline simulates to exactly the operator-level simulation of
    today's plan; with M micro-batches, to M times it (the stage never idles)."""
    from stratopt.planning import simulate
    from stratopt.sim.trace import simulate_strategy

    graph = chain()
    where = cluster(1, 4, DATASHEET_H100)
    one = search(graph, 1, 4, machine=DATASHEET_H100, stages=1)
    costing = build(graph, one.stages[0].devices, machine=where.machine, cutoff=1)
    today = simulate_strategy(costing, one.stages[0].assignment)[1]["iteration_time"]
    assert simulate(graph, one, where.machine)[1]["iteration_time"] == pytest.approx(today)
    many = search(graph, 1, 4, machine=DATASHEET_H100, stages=1, microbatches=3)
    assert simulate(graph, many, where.machine)[1]["iteration_time"] == pytest.approx(3 * today)


def test_uniform_pipeline_simulates_to_the_formula_and_gpipe_is_no_faster() -> None:
    """Equal stages with no transfer time: 1F1B takes (M + S - 1) (f + b) and then the optimizer's
    step, once, the estimate's formula, and GPipe's order takes as long or longer; the bubble is
    the idle share of that."""
    from stratopt.planning import PipelinePlan, Stage, simulate

    graph = chain((64,) * 4)
    where = cluster(1, 4)
    stages = tuple(Stage(k, k + 1, 1, 0.0, (0,)) for k in range(4))
    plan = PipelinePlan(stages, (0.0, 0.0, 0.0), 8, 4, 0.0)
    _, info = simulate(graph, plan, where.machine)
    f, b = info["stage_passes"][1]["forward"], info["stage_passes"][1]["backward"]
    # no data parallelism: what runs once an iteration is the optimizer's step (Adam's streams)
    once = build(stage_graph(graph, 1, 2), 1, machine=where.machine, cutoff=1).vertex_costs[0].per_step[0]
    assert once > 0
    assert all(p == pytest.approx({"forward": f, "backward": b, "grad_sync": once}) for p in info["stage_passes"])
    assert info["iteration_time"] == pytest.approx((8 + 4 - 1) * (f + b) + once)
    assert info["bubble"] == pytest.approx(1.0 - (8 * (f + b) + once) / ((8 + 4 - 1) * (f + b) + once))
    assert simulate(graph, plan, where.machine, "gpipe")[1]["iteration_time"] >= info["iteration_time"] - 1e-9


def test_cli_stages(tmp_path, capsys) -> None:
    """plan --stages N --microbatches M: the JSON carries the stages (operators, devices, strategy)
    and the pipelined estimate and simulated time; --gantt writes a chart; a bad --stages is one
    line, exit 2; --stages 1 (the default) adds nothing."""
    import json

    from stratopt.cli import main

    gantt = tmp_path / "pipe.png"
    args = ["plan", "alexnet", "--nodes", "1", "--gpus-per-node", "4", "--no-simulate", "--json"]
    assert main([*args, "--stages", "2", "--microbatches", "4", "--gantt", str(gantt)]) == 0
    out = json.loads(capsys.readouterr().out)
    pipe = out["pipeline"]
    assert len(pipe["stages"]) == 2 and sum(s["devices"] for s in pipe["stages"]) <= 4
    assert pipe["estimate"] > 0 and pipe["simulated"] > 0 and gantt.stat().st_size > 0
    assert pipe["stages"][0]["start"] == 0 and pipe["stages"][1]["start"] == pipe["stages"][0]["end"]
    assert main(args) == 0
    assert "pipeline" not in json.loads(capsys.readouterr().out)
    assert main([*args, "--stages", "two"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def fitted_time(graph, start, end, devices, machine, limit, flight, microbatches) -> float:
    """The exact least per-micro-batch time of a stage whose strategy holds its weight state and
    ``flight`` micro-batches' activations within ``limit`` bytes (the MIP, with the usage row)."""
    from stratopt.cost.common import layout

    costing = build(stage_graph(graph, start, end), devices, machine=machine, cutoff=1)
    share = 1.0 - 1.0 / microbatches
    usages = []
    for v, op in enumerate(costing.graph.operators):
        split = layout(op, op.outputs[0], costing.configs[v]).prod(axis=1)
        usages.append(np.ceil(costing.vertex_costs[v].memory + (flight - 1) * op.outputs[0].size / split * 2.0))
    problem = costing.problem.replace(
        node_costs=[n - share * o for n, o in zip(costing.node_costs(), once_a_step(costing), strict=True)],
        intervals=[(0, 1)] * len(costing.graph),
        usages=usages,
        usage_limit=int(limit),
    )
    result = solve(problem, "mip-highs")
    return float(result.objective) if result.status.value == "optimal" else math.inf


def brute_fitted(graph, nodes, gpus, microbatches, memory) -> float:
    """Every cut, group size and stage count, each stage at its exact best that fits its place."""
    where = cluster(nodes, gpus)
    p = where.devices
    cuts = cut_points(graph)
    units = len(cuts) - 1
    sizes = [g for g in group_sizes(nodes, gpus) if g <= p]
    cache: dict = {}
    best = math.inf
    for count in range(1, units + 1):
        for inner in itertools.combinations(range(1, units), count - 1):
            bounds = [0, *inner, units]
            for groups in itertools.product(sizes, repeat=count):
                if sum(groups) > p:
                    continue
                times, used = [], 0
                for k in range(count):
                    start, end = cuts[bounds[k]], cuts[bounds[k + 1]]
                    key = (start, end, groups[k], min(count - k, microbatches))
                    if key not in cache:
                        cache[key] = fitted_time(
                            graph, start, end, groups[k], where.machine, memory, key[3], microbatches
                        )
                    times.append(cache[key])
                    used += groups[k]
                    if k < count - 1:
                        bw, lat = where.machine.link(1, 1)
                        times.append(float(2.0 * (graph.operators[end - 1].outputs[0].size * 2.0 / bw + lat)) * 1e6)
                best = min(best, sum(times) + (microbatches - 1) * max(times))
    return best


def test_memory_in_flight_against_brute_force() -> None:
    """Under a memory limit that stages break with 1F1B's in-flight activations, the search's plan
    fits (every stage, with its in-flight count), is no worse than the best over every cut, group
    size and stage count with each stage's fastest strategy, and no better than the same with each
    stage at its exact best that fits (the MIP): a stage whose fastest strategy does not fit takes
    a slower one that does. A limit nothing meets is a one-line error."""
    from stratopt.cost.common import layout

    graph = chain((512, 2048, 512, 2048, 512))
    where = cluster(1, 4)
    free = search(graph, 1, 4, microbatches=8, max_units=None)
    stage = free.stages[0]
    total, acts = stage_memory(graph, stage.start, stage.end, stage.devices, where.machine)
    limit = total + 0.5 * (len(free.stages) - 1) * acts  # the free optimum's first stage no longer fits
    if len(free.stages) == 1:
        limit = 0.9 * total
    found = search(graph, 1, 4, microbatches=8, max_units=None, memory_gb=limit / 1e9)
    assert found.estimate > free.estimate  # the limit binds
    assert found.estimate <= brute(graph, 1, 4, 8, memory=limit) * (1 + 1e-9)
    # the MIP rounds each operator's usage up to a whole byte: an answer that fills the limit to the
    # byte (the memory search's mixes do) may beat it by a hair
    assert found.estimate >= brute_fitted(graph, 1, 4, 8, limit) * (1 - 1e-4)
    for k, s in enumerate(found.stages):
        costing = build(stage_graph(graph, s.start, s.end), s.devices, machine=where.machine, cutoff=1)
        in_flight = min(len(found.stages) - k, 8)
        used = 0.0
        for v, op in enumerate(costing.graph.operators):
            c = s.assignment[v]
            split = float(layout(op, op.outputs[0], costing.configs[v][c : c + 1]).prod())
            used += float(costing.vertex_costs[v].memory[c]) + (in_flight - 1) * op.outputs[0].size / split * 2.0
        assert used <= limit
    with pytest.raises(ModelError, match="fits"):
        search(graph, 1, 4, microbatches=8, max_units=None, memory_gb=1e-6)


def test_a_stage_too_big_for_its_fastest_strategy_takes_one_that_fits() -> None:
    """One stage whose fastest strategy needs more memory than the limit: the search takes a
    slower strategy that fits instead of giving up, never faster than the MIP's exact constrained
    optimum (the Lagrangian memory search is a heuristic where memory binds: 17% above it here)."""
    graph = chain((4096, 4096, 4096))
    where = cluster(1, 4, DATASHEET_H100)
    free = search(graph, 1, 4, machine=DATASHEET_H100, stages=1, max_units=None)
    s = free.stages[0]
    total, _ = stage_memory(graph, s.start, s.end, s.devices, where.machine)
    limit = 0.8 * total
    found = search(graph, 1, 4, machine=DATASHEET_H100, stages=1, max_units=None, memory_gb=limit / 1e9)
    exact = min(fitted_time(graph, 0, len(graph), g, where.machine, limit, 1, 1) for g in (1, 2, 4))
    assert found.estimate > free.estimate
    assert found.estimate >= exact * (1 - 1e-9)
    stage = found.stages[0]
    costing = build(stage_graph(graph, stage.start, stage.end), stage.devices, machine=where.machine, cutoff=1)
    assert sum(float(costing.vertex_costs[v].memory[c]) for v, c in enumerate(stage.assignment)) <= limit


def test_simulate_shows_the_pipelined_step(capsys) -> None:
    """simulate --stages: the devices as nodes of the machine's size, the searched stages and the
    simulated 1F1B step in JSON; a strategy given beside --stages is a one-line error."""
    import json

    from stratopt.cli import main

    assert main(["simulate", "alexnet", "-p", "4", "--stages", "2", "--microbatches", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["pipeline"]
    assert len(out["stages"]) == 2 and out["simulated"] > 0 and out["schedule"] == "1f1b"
    assert main(["simulate", "alexnet", "-p", "4", "--stages", "2", "--solver", "dp"]) == 2
    assert "leave out --strategy and --solver" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name", ["alexnet", "inception3", "rnnlm", "transformer", "resnet101", "gpt", "resnet50", "vgg19"]
)
def test_microbatch_is_the_model_at_a_smaller_batch(name) -> None:
    """Cutting a zoo model's batch into 4 gives exactly the model built at a quarter of the batch:
    every operator's domain, input and output shapes."""
    from stratopt.graph.zoo import ZOO
    from stratopt.planning import microbatch

    build_at = ZOO[name].build
    whole = build_at()
    batch = next(i.use.shape[0] for op in whole.operators for i in op.inputs if i.source is None and not i.param)
    cut = microbatch(whole, 4)
    small = build_at(batch // 4)
    assert len(cut) == len(small)
    for a, b in zip(cut.operators, small.operators, strict=True):
        assert (a.name, a.sizes) == (b.name, b.sizes)
        assert [i.use.shape for i in a.inputs] == [i.use.shape for i in b.inputs]
        assert [u.shape for u in a.outputs] == [u.shape for u in b.outputs]


def test_microbatch_search_and_errors(capsys) -> None:
    """search_microbatches tries every power of two that divides the batch and keeps the best
    estimate (each the stage search on its micro-batch); a batch that does not divide is a
    one-line error, and so is plan --microbatches auto without --stages."""
    from stratopt.cli import main
    from stratopt.planning import microbatch, search_microbatches

    graph = chain()  # batch 32
    found, micro, tried = search_microbatches(graph, 1, 4)
    assert [m for m, _ in tried] == [1, 2, 4, 8, 16, 32]
    assert found.estimate == min(e for _, e in tried)
    m = found.microbatches
    assert micro.operators[0].outputs[0].shape[0] == 32 // m
    assert found.estimate == pytest.approx(search(microbatch(graph, m), 1, 4, microbatches=m).estimate)
    with pytest.raises(ModelError, match="does not split"):
        microbatch(graph, 3)
    args = ["plan", "alexnet", "--nodes", "1", "--gpus-per-node", "4", "--no-simulate", "--json"]
    assert main([*args, "--stages", "auto", "--microbatches", "auto"]) == 0
    pipe = __import__("json").loads(capsys.readouterr().out)["pipeline"]
    assert pipe["microbatches"] in (1, 2, 4, 8, 16, 32, 64) and pipe["tried"]
    assert main([*args, "--microbatches", "auto"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_unit_that_passes_its_input_through() -> None:
    """A side branch that ends inside a unit (an auxiliary loss) leaves that unit's end cut crossed by
    a tensor from before it: no chain of unit tables there, so every stage is solved by the DP on
    its own slice, and the search still equals brute force."""
    from stratopt.planning.units import StageCosts

    g = GraphBuilder("aux")
    x = g.fc(g.input((32, 64)), 64)
    g.softmax_xent(g.fc(x, 16))
    g.fc(g.fc(x, 64), 64)
    graph = g.build()
    assert not StageCosts(graph, cut_points(graph), cluster(1, 4).machine, 1, None).chainable
    found = search(graph, 1, 4, microbatches=4, max_units=None)
    assert found.estimate == pytest.approx(brute(graph, 1, 4, 4))


def test_simulate_chooses_the_microbatches(capsys) -> None:
    """simulate --stages N --microbatches auto: the JSON names the count chosen and every count
    tried; --microbatches auto without --stages is a one-line error, exit 2."""
    import json

    from stratopt.cli import main

    assert main(["simulate", "alexnet", "-p", "4", "--stages", "2", "--microbatches", "auto", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["pipeline"]
    tried = [t["microbatches"] for t in out["tried"]]
    assert out["microbatches"] in tried and tried == [1, 2, 4, 8, 16, 32, 64]  # alexnet's batch is 128
    assert main(["simulate", "alexnet", "-p", "4", "--microbatches", "auto"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_one_stage_prices_what_plan_prices() -> None:
    """A pipeline of one stage is priced by the step model plan prices with (overlap taken over the
    whole step, not operator by operator): the same estimate as the plan, below the additive objective
    the stage search minimises; with --stages auto the pipeline is never slower than the plan, and
    the plan run as M micro-batches costs M times its per-micro-batch time plus the step's constant."""
    from stratopt.planning import plan, plan_pipeline
    from stratopt.planning.pipelined import as_one_stage

    result = plan("gpt", 1, 8, simulate=False)
    constant = float(result.costing.profile.step_overhead)
    one = search(result.costing.graph, 1, 8, stages=1)
    assert one.estimate + constant == pytest.approx(result.plan.estimate, rel=1e-12)
    assert one.estimate < one.objective - 1.0  # the two models differ here: the test tells them apart
    auto = plan_pipeline(result.costing.graph, 1, 8, result.cluster.machine, stages="auto", beside=result)
    assert auto["estimate"] <= result.plan.estimate * (1 + 1e-12)
    assert auto["without_pipelining"] == pytest.approx(result.plan.estimate, rel=1e-12)
    four = as_one_stage(result, 4)
    assert four is not None and four.estimate + constant == pytest.approx(
        result.costing.step_time(result.plan.assignment, 4), rel=1e-12
    )
