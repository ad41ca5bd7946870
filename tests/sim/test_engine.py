"""Task graphs, Algorithm 1 and the delta simulation: delta == full on thousands of random edits."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt.cost import build
from stratopt.errors import CrossCheckError, ModelError
from stratopt.graph import GraphBuilder
from stratopt.instances import load_instance
from stratopt.machine import Machine
from stratopt.problem import evaluate
from stratopt.sim import DeltaSimulator, StrategyTasks, TaskGraph, check_timeline, simulate_tasks

#: Two devices per node, so random strategies use intra- and inter-node links, with latencies.
SMALL_NODES = Machine(
    "test", peak_tflops=100.0, memory_gb=16.0, hbm_gbps=1000.0, devices_per_node=2, intra_gbps=100.0,
    inter_gbps=10.0, intra_latency_us=2.0, inter_latency_us=5.0, efficiency=0.5,
)  # fmt: skip


def random_graph(rng: random.Random) -> GraphBuilder:
    """A random branching network of fc, add, layernorm and softmax on (batch, width) tensors."""
    g = GraphBuilder(f"random{rng.randrange(10**6)}")
    batch = rng.choice([8, 16, 32])
    tensors = [g.input((batch, rng.choice([16, 32])))]
    for _ in range(rng.randrange(2, 9)):
        x = rng.choice(tensors)
        kind = rng.random()
        same = [t for t in tensors if t.shape == x.shape and t is not x]
        if kind < 0.45:
            y = g.fc(x, rng.choice([16, 32, 64]), pointwise=rng.randrange(2))
        elif kind < 0.65 and same:
            y = g.elementwise(x, rng.choice(same))
        elif kind < 0.85:
            y = g.layernorm(x)
        else:
            y = g.softmax(x)
        tensors.append(y)
    g.softmax_xent(tensors[-1])
    return g


def costing_for(rng: random.Random, procs: int, profile: str):
    machine = SMALL_NODES if profile == "default" else "pase"
    return build(random_graph(rng).build(), procs, profile=profile, machine=machine, cutoff=1)


def by_rank(graph: TaskGraph, start: list[float], end: list[float]) -> dict[int, tuple[float, float]]:
    return {graph.rank[t]: (start[t], end[t]) for t in graph.tasks()}


def assert_same_as_full(sim: DeltaSimulator) -> None:
    fresh = StrategyTasks(sim.tasks.costing, sim.assignment).graph
    full = simulate_tasks(fresh)
    assert by_rank(sim.graph, sim.start, sim.end) == by_rank(fresh, full.start, full.end)
    assert sim.makespan == full.makespan
    assert check_timeline(sim.timeline()) == []


@settings(max_examples=75)
@given(seed=st.integers(0, 10**9), procs=st.sampled_from([2, 3, 4, 8]), profile=st.sampled_from(["default", "pase"]))
def test_delta_equals_full_on_random_edits(seed: int, procs: int, profile: str) -> None:
    """40 random one-operator changes per random graph (3,000 in all): after each, every task's start and end
    equal a full simulation of the new strategy built from scratch, and the timeline re-checks."""
    rng = random.Random(seed)
    costing = costing_for(rng, procs, profile)
    ks = costing.problem.num_choices.tolist()
    sim = DeltaSimulator(costing, [rng.randrange(k) for k in ks])
    assert check_timeline(sim.timeline()) == []
    for _ in range(40):
        v = rng.randrange(len(ks))
        sim.change(v, rng.randrange(ks[v]))
        assert_same_as_full(sim)


@pytest.mark.parametrize(("network", "procs"), [("vgg19", 8), ("resnet50", 4), ("transformer", 8)])
def test_delta_equals_full_on_zoo_networks(network: str, procs: int) -> None:
    """On real networks (thousands of tasks), random edits keep the delta timeline identical."""
    costing = build(load_instance(network), procs, profile="default", machine="h100")
    rng = random.Random(7)
    ks = costing.problem.num_choices.tolist()
    sim = DeltaSimulator(costing, [rng.randrange(k) for k in ks])
    for _ in range(6):
        v = rng.randrange(len(ks))
        sim.change(v, rng.randrange(ks[v]))
        assert_same_as_full(sim)


def test_undoing_a_change_restores_the_timeline() -> None:
    """Changing an operator and changing it back gives the original timeline exactly."""
    costing = build(load_instance("alexnet"), 4, profile="default", machine="h100")
    sim = DeltaSimulator(costing, [1] * len(costing.graph.operators))
    before = by_rank(sim.graph, sim.start, sim.end)
    sim.change(3, 0)
    assert by_rank(sim.graph, sim.start, sim.end) != before
    sim.change(3, 1)
    assert by_rank(sim.graph, sim.start, sim.end) == before


def test_unsplit_strategy_costs_the_additive_objective() -> None:
    """With every operator on one device nothing overlaps and nothing moves: the simulated step
    is the sum of the operators' costs, the additive model's objective."""
    for profile, machine in (("pase", "pase"), ("default", "h100")):
        costing = build(load_instance("vgg19"), 8, profile=profile, machine=machine)
        unsplit = [0] * len(costing.graph.operators)
        assert all(math.prod(cfg[0]) == 1 for cfg in costing.configs)
        timeline = simulate_tasks(StrategyTasks(costing, unsplit).graph)
        assert timeline.makespan == pytest.approx(evaluate(costing.problem, unsplit).objective, rel=1e-12)


def test_recomputed_unsplit_strategy_costs_the_additive_objective() -> None:
    """Every operator unsplit and recomputed: the simulated step is still the additive objective,
    each operator's forward as before and its backward one forward longer."""
    costing = build(load_instance("vgg19"), 8, recompute=True)
    again = [len(cfg) // 2 for cfg in costing.configs]  # the first recomputed twin: unsplit
    assert all(
        math.prod(cfg[c]) == 1 and costing.is_recomputed(v, c)
        for v, (cfg, c) in enumerate(zip(costing.configs, again, strict=True))
    )
    timeline = simulate_tasks(StrategyTasks(costing, again).graph)
    assert timeline.makespan == pytest.approx(evaluate(costing.problem, again).objective, rel=1e-12)
    plain = [0] * len(again)
    assert evaluate(costing.problem, again).objective > evaluate(costing.problem, plain).objective


def test_algorithm_1_by_hand() -> None:
    """FIFO in order of readiness, ties by rank: b and c both wait for a; c has the lower rank."""
    g = TaskGraph(["d0", "d1"])
    a = g.add(0, 0, 2.0, (0, 1, "a", None, ""))
    c = g.add(1, 1, 1.0, (0, 1, "c", None, ""))
    b = g.add(2, 1, 3.0, (0, 1, "b", None, ""))
    x = g.add(3, 1, 1.0, (0, 1, "x", None, ""))  # no inputs: ready at 0, runs first on d1
    d = g.add(4, 0, 1.0, (0, 1, "d", None, ""))
    for before, after in ((a, b), (a, c), (b, d), (c, d)):
        g.depend(before, after)
    t = simulate_tasks(g)
    assert (t.start[x], t.start[c], t.start[b], t.start[d]) == (0.0, 2.0, 3.0, 6.0)
    assert t.makespan == 7.0
    assert check_timeline(t) == []
    assert [g.label[i][2] for i in t.critical_path()] == ["a", "c", "b", "d"]


def test_checker_catches_each_violation() -> None:
    """A wrong duration, an early start or an out-of-order resource is reported."""
    costing = build(load_instance("alexnet"), 4, profile="default", machine="h100")
    timeline = simulate_tasks(StrategyTasks(costing, [1] * len(costing.graph.operators)).graph)
    some = max(timeline.tasks(), key=lambda t: timeline.start[t])
    for field, delta in (("end", 1.0), ("start", -1.0), ("ready", -0.5)):
        values = getattr(timeline, field)
        values[some] += delta
        assert check_timeline(timeline), field
        values[some] -= delta
    assert check_timeline(timeline) == []


def test_critical_path_spans_the_step() -> None:
    """The critical path starts at 0, ends at the makespan, and each task starts when the one
    before it ends."""
    costing = build(load_instance("resnet50"), 8, profile="default", machine="h100")
    timeline = simulate_tasks(StrategyTasks(costing, [2] * len(costing.graph.operators)).graph)
    path = timeline.critical_path()
    assert timeline.start[path[0]] == 0.0
    assert timeline.end[path[-1]] == timeline.makespan
    for a, b in itertools.pairwise(path):
        assert timeline.end[a] == timeline.start[b]
    util = timeline.utilisation()
    assert len(util) == 8 and all(0.0 <= u <= 1.0 for u in util.values()) and max(util.values()) > 0.0


def test_transfers_follow_the_layouts() -> None:
    """Consistent splits move nothing; re-laying a batch-split tensor as a feature split moves the
    parts a device lacks, on links between devices."""
    g = GraphBuilder("two")
    _ = g.fc(g.fc(g.input((64, 32)), 32), 16)
    costing = build(g.build(), 4, profile="default", machine="h100")
    labels = [[" ".join(f"{a}{c}" for a, c in zip(op.axes, row, strict=True) if c > 1) for row in cfg.tolist()]
              for op, cfg in zip(costing.graph.operators, costing.configs, strict=True)]  # fmt: skip
    batch4 = [labels[v].index("b4") for v in range(2)]
    same = StrategyTasks(costing, batch4).graph
    assert not any(same.kind(t) == "transfer" for t in same.tasks())
    mixed = StrategyTasks(costing, [batch4[0], labels[1].index("k4")]).graph
    moves = [t for t in mixed.tasks() if mixed.kind(t) == "transfer"]
    assert len(moves) == 12  # every consumer device lacks 3 of the 4 batch slices of its k-slice
    assert all(mixed.is_link(mixed.res[t]) for t in moves)


def test_bad_strategy_is_a_model_error() -> None:
    """A wrong-length strategy or an out-of-range choice names the problem."""
    costing = build(load_instance("alexnet"), 4)
    with pytest.raises(ModelError, match="choices but the graph has"):
        StrategyTasks(costing, [0])
    with pytest.raises(ModelError, match="out of range"):
        StrategyTasks(costing, [99] * len(costing.graph.operators))
    sim = DeltaSimulator(costing, [0] * len(costing.graph.operators))
    with pytest.raises(ModelError, match="out of range"):
        sim.change(0, 10**6)


def test_cycle_is_reported() -> None:
    """A task graph with a cycle cannot be simulated, and says so."""
    g = TaskGraph(["d0"])
    a = g.add(0, 0, 1.0, (0, 1, "a", None, ""))
    b = g.add(1, 0, 1.0, (0, 1, "b", None, ""))
    g.depend(a, b)
    g.depend(b, a)
    with pytest.raises(CrossCheckError, match="cycle"):
        simulate_tasks(g)
