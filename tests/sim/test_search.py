"""MCMC search, start strategies, traces, and placement task graphs."""

from __future__ import annotations

import json

import pytest

from stratopt.cost import build
from stratopt.errors import ModelError
from stratopt.instances import load_instance
from stratopt.placement import place
from stratopt.sim import (
    StrategyTasks,
    check_timeline,
    data_parallel,
    events,
    gantt,
    mcmc,
    placement_tasks,
    simulate_tasks,
    start_strategy,
    summary,
    write_chrome_trace,
)


@pytest.fixture(scope="module")
def vgg():
    return build(load_instance("vgg19"), 8, profile="default", machine="h100")


def test_search_is_reproducible_and_honest(vgg) -> None:
    """The same seed gives the same search; the best time is what a full simulation of the best
    strategy gives, and it is no worse than the start."""
    a = mcmc(vgg, "data-parallel", budget=150, seed=3)
    b = mcmc(vgg, "data-parallel", budget=150, seed=3)
    assert (a.best, a.best_time, a.accepted) == (b.best, b.best_time, b.accepted)
    assert a.iterations == 150
    assert a.best_time <= a.start_time
    assert simulate_tasks(StrategyTasks(vgg, a.best).graph).makespan == a.best_time
    assert simulate_tasks(StrategyTasks(vgg, a.start).graph).makespan == a.start_time
    assert [t for _, t in a.history] == sorted((t for _, t in a.history), reverse=True)


def test_search_from_data_parallel_improves_vgg(vgg) -> None:
    """VGG-19's fully connected layers are cheaper split by features than by batch: the search finds it."""
    r = mcmc(vgg, "data-parallel", budget=300, seed=0)
    assert r.best_time < r.start_time


def test_search_time_limit_and_bad_arguments(vgg) -> None:
    """A time limit alone stops the search; a missing budget, a negative beta or a bad start is refused.
    (The limit counts the start's simulation too, 0.36 s once on a loaded 2-core machine: 3 s leaves
    room for iterations.)"""
    r = mcmc(vgg, "dp", budget=None, time_limit=3.0, seed=1)
    assert r.iterations > 0 and r.stats is not None
    with pytest.raises(ModelError, match="budget"):
        mcmc(vgg, "dp", budget=None)
    with pytest.raises(ModelError, match="beta"):
        mcmc(vgg, "dp", beta=-1.0)
    with pytest.raises(ModelError, match="unknown start"):
        mcmc(vgg, "random")
    with pytest.raises(ModelError, match="out of range"):
        start_strategy(vgg, [10**6] * len(vgg.graph.operators))


def test_data_parallel_splits_the_batch_only(vgg) -> None:
    """Data parallelism splits each operator's batch axis as far as allowed and nothing else."""
    for op, configs, c in zip(vgg.graph.operators, vgg.configs, data_parallel(vgg), strict=True):
        row = configs[c].tolist()
        batch = {op.axis_index(a) for a in op.outputs[0].dims[0]}
        assert all(x == 1 for i, x in enumerate(row) if i not in batch)
        assert max(row) == 8  # VGG-19's batch of 64 splits 8 ways everywhere


def test_dp_start_is_the_additive_optimum(vgg) -> None:
    """The 'dp' start is the exact solver's optimum of the additive model."""
    from stratopt.problem import evaluate
    from stratopt.solvers import solve

    start = start_strategy(vgg, "dp")
    assert evaluate(vgg.problem, start).objective == pytest.approx(solve(vgg.problem, "dp").objective)


def test_trace_and_gantt(vgg, tmp_path) -> None:
    """The Chrome trace holds one complete event per task, named threads; the Gantt chart is a PNG."""
    timeline = simulate_tasks(StrategyTasks(vgg, data_parallel(vgg)).graph)
    rows = events(timeline)
    assert len(rows) == timeline.graph.count
    path = tmp_path / "t.json"
    write_chrome_trace(rows, path)
    data = json.loads(path.read_text())
    complete = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(rows)
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(timeline.makespan)
    assert {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"} >= {"dev0", "dev7"}
    png = tmp_path / "g.png"
    gantt(rows, png, title="vgg19")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    info = summary(timeline)
    assert info["iteration_time"] == timeline.makespan
    assert info["critical_path"][-1]["end"] == timeline.makespan
    with pytest.raises(ModelError, match="cannot write"):
        write_chrome_trace(rows, tmp_path / "missing" / "t.json")


def test_placement_task_graph() -> None:
    """A placement's task graph: one task per node, transfers across devices when there is a
    bandwidth; its Algorithm 1 timeline is valid and no shorter than CP-SAT's proven optimum."""
    inst = load_instance("seed004-appendix")
    result = place(inst, "heuristic")
    g = placement_tasks(inst, result.placement)
    timeline = simulate_tasks(g)
    assert g.count == inst.num_nodes
    assert check_timeline(timeline) == []
    assert timeline.makespan >= 14  # CP-SAT proves 14 optimal for the appendix
    job = load_instance("resnet50-small")
    placed = place(job, "heft")
    tasks = placement_tasks(job, placed.placement)
    assert check_timeline(simulate_tasks(tasks)) == []
    with pytest.raises(ModelError, match="nodes"):
        placement_tasks(inst, [0])
