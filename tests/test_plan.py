"""stratopt plan: clusters with nodes, the hand-written baselines' textbook communication, the plan
never worse than an in-space baseline, the memory search's answer and bound, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stratopt.cli import main
from stratopt.cost import build
from stratopt.graph import GraphBuilder
from stratopt.planning import baselines, cluster, plan
from stratopt.problem import evaluate
from stratopt.solvers import solve

from .machines import DATASHEET_H100

B, D = 64, 256


def mlp():
    g = GraphBuilder("mlp2")
    g.fc(g.fc(g.input((B, D)), 4 * D, pointwise=1), D)
    return g.build()


def priced(nodes: int, gpus: int, memory_gb: float | None = None, shard: bool = True):
    where = cluster(nodes, gpus, DATASHEET_H100)
    costing = build(mlp(), where.devices, machine=where.machine, cutoff=1, memory_gb=memory_gb, shard_weights=shard)
    return where, costing


def comm(costing, assignment) -> tuple[list[float], float]:
    """Per operator communication inside it, and the edges' total (microseconds)."""
    inside = [float(costing.vertex_costs[v].comm[c]) for v, c in enumerate(assignment)]
    nodes = costing.node_costs()
    edges = float(evaluate(costing.problem, assignment).objective) - sum(
        float(nodes[v][c]) for v, c in enumerate(assignment)
    )
    return inside, edges


def by_name(costing, gpus):
    return {name: found for name, found, _ in baselines(costing, gpus)}


def ar(machine, elems, group, span=None) -> float:
    return (
        float(machine.all_reduce(np.array(elems * 2.0), np.array(group), None if span is None else np.array(span)))
        * 1e6
    )


def grad_ar(machine, elems, group, span=None) -> float:
    """A weight gradient's all-reduce in DDP's 25 MB buckets: its share of one collective's latency."""
    spans = None if span is None else np.array(span)
    latency = 2 * (group - 1) * float(machine.link(np.array(group), spans)[1])
    return ar(machine, elems, group, span) - latency * (1 - min(1.0, elems * 2.0 / 25e6)) * 1e6


def ag(machine, elems, group) -> float:
    return float(machine.all_gather(np.array(elems * 2.0), np.array(group))) * 1e6


def test_data_parallel_all_reduces_every_weight_gradient() -> None:
    """Data parallelism on 4 devices: each linear all-reduces its weight gradient (bucketed: its
    share of one collective's latency), nothing else moves."""
    where, costing = priced(1, 4)
    found = by_name(costing, 4)["data-parallel"]
    inside, edges = comm(costing, found)
    m = where.machine
    assert inside == pytest.approx([grad_ar(m, D * 4 * D, 4), grad_ar(m, 4 * D * D, 4)])
    assert edges == 0


def test_sharded_twins_price_fsdp_per_operator() -> None:
    """build(shard_weights=True) gives each product whose weights are replicated two twins of the
    same split with the state sharded over the replicas: ZeRO-3 (FSDP), the tile all-gathered for the
    forward and the backward pass, a reduce-scatter instead of the gradient all-reduce, the state
    held divided by the replicas; ZeRO-2, the tile gathered once (forward) and its value held whole,
    the gradient and Adam's state divided; splits with unreplicated weights get none; the
    unconstrained optimum is unchanged."""
    where, plain = priced(1, 4, shard=False)
    _, costing = priced(1, 4)
    m = where.machine
    for v, op in enumerate(costing.graph.operators):
        table, shard = costing.configs[v], costing.sharded[v]
        assert np.array_equal(table[~shard], plain.configs[v])
        base = {tuple(r): c for c, r in enumerate(plain.configs[v].tolist())}
        for c in np.flatnonzero(shard):
            row = dict(zip(op.axes, table[c].tolist(), strict=True))
            b = base[tuple(table[c].tolist())]
            reps = row["b"]
            tile = op.inputs[1].use.size / (row["n"] * row["k"])
            zero2 = costing.is_zero2(v, int(c))
            assert reps > 1 and costing.problem.labels[v][c].endswith(" zero2" if zero2 else " fsdp")
            gather = ag(m, tile, reps)
            old, new = plain.vertex_costs[v], costing.vertex_costs[v]
            # the bucketed gradient all-reduce becomes a reduce-scatter (one all-gather's time), and the
            # tile is gathered twice (forward, backward; ZeRO-2: once, forward)
            gathers = 1 if zero2 else 2
            assert new.comm[c] == pytest.approx(old.comm[b] - old.grad_sync[b] + (1 + gathers) * gather)
            assert new.grad_sync[c] == pytest.approx(gather)
            assert new.weight_gather[c] == pytest.approx(gathers * gather)
            kept = 10 if zero2 else 12  # bytes per element sharded: gradient and state (and value: ZeRO-3)
            assert old.memory[b] - new.memory[c] == pytest.approx(tile * kept * (1 - 1 / reps))
        assert shard.sum() == 2 * costing.zero2[v].sum()  # a ZeRO-2 twin for every ZeRO-3 one
        unsharded = {tuple(r) for r, s in zip(table.tolist(), shard, strict=True) if not s}
        for r in unsharded - {tuple(r) for r in table[shard].tolist()}:
            assert dict(zip(op.axes, r, strict=True))["b"] == 1  # only unreplicated weights lack a twin
    assert solve(costing.problem, "dp").objective == pytest.approx(solve(plain.problem, "dp").objective)


def test_hybrid_twins_shard_inside_each_node_and_reduce_across() -> None:
    """On 2 nodes of 2 devices, a product whose weights are replicated over all 4 (data parallel 4
    ways) also gets an HSDP twin: the weight state sharded over the 2 replicas of each node, its
    tile gathered twice on the node's links, the gradient reduce-scattered there and each half
    all-reduced across the 2 nodes (the network), the state held halved. A split whose replicas all
    lie in one node (2 ways, inside a node) or one per node has none; the labels say ``hsdp``."""
    where, costing = priced(2, 2)
    _, plain = priced(2, 2, shard=False)
    m = where.machine
    found = 0
    for v, op in enumerate(costing.graph.operators):
        base = {tuple(r): c for c, r in enumerate(plain.configs[v].tolist())}
        for c, row in enumerate(costing.configs[v].tolist()):
            group = costing.hybrid_group(v, c)
            if not group:
                continue
            split = dict(zip(op.axes, row, strict=True))
            assert split["b"] == 4 and group == 2 and costing.problem.labels[v][c].endswith(" hsdp")
            assert costing.sharding(v, c) == "hsdp" and costing.is_sharded(v, c)
            tile = op.inputs[1].use.size / (split["n"] * split["k"])
            gather = ag(m, tile, 2)  # a compact group of 2: one node
            across = float(m.all_reduce(np.array(tile / 2 * 2.0), np.array(2), np.array(4))) * 1e6
            old, new = plain.vertex_costs[v], costing.vertex_costs[v]
            b = base[tuple(row)]
            assert new.weight_gather[c] == pytest.approx(2 * gather)
            assert new.grad_sync[c] == pytest.approx(gather + across)
            assert new.comm[c] == pytest.approx(old.comm[b] - old.grad_sync[b] + 3 * gather + across)
            assert old.memory[b] - new.memory[c] == pytest.approx(tile * 12 * (1 - 1 / 2))
            assert costing.held_weights(v, c) == pytest.approx(tile / 2)
            found += 1
        rows = [dict(zip(op.axes, r, strict=True)) for r in costing.configs[v].tolist()]
        assert not any(costing.hybrid_group(v, c) for c, r in enumerate(rows) if r["b"] < 4)
    assert found


def test_fsdp_gathers_every_weight_twice_and_shards_the_state() -> None:
    """FSDP over 4 devices: data parallelism's (bucketed) all-reduce becomes a reduce-scatter, and
    each weight is all-gathered twice (forward, backward): three all-gathers in all; the weights,
    gradients and Adam state held drop to a quarter."""
    result = plan(mlp(), 1, 4, machine=DATASHEET_H100, simulate=False)
    rows = {b.name: b for b in result.baselines}
    dp, fsdp = rows["data-parallel"], rows["fsdp"]
    m = result.cluster.machine
    weights = (D * 4 * D, 4 * D * D)
    assert fsdp.estimate - dp.estimate == pytest.approx(sum(3 * ag(m, w, 4) - grad_ar(m, w, 4) for w in weights))
    state = 2 * D * 4 * D * (2 * 2 + 8)  # two weights: value and gradient in bf16, Adam's two fp32 moments
    assert dp.memory - fsdp.memory == pytest.approx(state * 3 / 4)


def test_megatron_mlp_is_two_activation_all_reduces() -> None:
    """Megatron on one node of 4: the first linear column-parallel, the second row-parallel, no
    re-layout between them; one all-reduce of the (batch, hidden) activations forward (after the
    row-parallel linear) and one backward (before the column-parallel one), nothing for weights."""
    where, costing = priced(1, 4)
    found = by_name(costing, 4)["megatron-tp4"]
    fc1, fc2 = costing.graph.operators
    assert dict(zip(fc1.axes, costing.configs[0][found[0]].tolist(), strict=True))["n"] == 4
    assert dict(zip(fc2.axes, costing.configs[1][found[1]].tolist(), strict=True))["k"] == 4
    inside, edges = comm(costing, found)
    assert inside == pytest.approx([ar(where.machine, B * D, 4), ar(where.machine, B * D, 4)])
    assert edges == 0


def stacked_attention():
    """PaSE's attention block: the normed stream stacked three times, q, k and v projected by one
    einsum, unstacked, scores, softmax, context, the output projection."""
    heads, d, dk, s = 4, 64, 16, 32
    g = GraphBuilder("stacked")
    x = g.layernorm(g.input((B, s, d)))
    qkv = g.einsum("sble,shek->sbhlk", g.stack([x, x, x]), g.input((3, heads, d, dk), param=True))
    q, k, v = g.unstack(qkv)
    probs = g.softmax(g.einsum("bhlk,bhmk->bhlm", q, k), axis=3)
    ctx = g.einsum("bhlm,bhmk->bhlk", probs, v)
    g.einsum("bhlk,hek->ble", ctx, g.input((heads, d, dk), param=True))
    return g.build()


def test_batch_is_followed_through_stacks() -> None:
    """The batch axes are those that index the samples, followed from the data input: the stack's
    and the stacked projection's are the samples' axis, not the new axis of size 3 in front, so
    data parallelism and Megatron's data-parallel groups can be expressed on them."""
    from stratopt.planning import batch_axes

    graph = stacked_attention()
    axes = batch_axes(graph)
    for op in graph.operators:
        (a,) = axes[op.name]
        assert op.size_of(a) == B, op.name
    where = cluster(1, 4, DATASHEET_H100)
    costing = build(graph, 4, machine=where.machine, cutoff=1, shard_weights=True)
    found = by_name(costing, 4)
    assert not isinstance(found["data-parallel"], str) and not isinstance(found["megatron-tp2"], str)


def test_megatron_stacked_qkv_is_column_parallel() -> None:
    """Megatron maps PaSE's stacked q/k/v einsum as its QKV projection: it reads the normed stream
    through the stack, so it splits its output features (column parallel) and the output
    projection its input features (row parallel), each with the one all-reduce Megatron has."""
    graph = stacked_attention()
    costing = build(graph, 4, machine=cluster(1, 4, DATASHEET_H100).machine, cutoff=1, shard_weights=True)
    found = by_name(costing, 4)["megatron-tp4"]
    assert not isinstance(found, str)
    ops = graph.operators
    qkv = next(v for v, op in enumerate(ops) if op.attrs.get("equation") == "sble,shek->sbhlk")
    out = next(v for v, op in enumerate(ops) if op.attrs.get("equation") == "bhlk,hek->ble")
    for v, group in ((qkv, "n"), (out, "k")):
        config = dict(zip(ops[v].axes, costing.configs[v][found[v]].tolist(), strict=True))
        assert np.prod([config[a] for a in ops[v].attrs[group]]) == 4, ops[v].name
    # Megatron's communication and nothing else: the QKV projection all-reduces its (stacked) input's
    # gradient in the backward pass, the output projection its output in the forward pass.
    machine = cluster(1, 4, DATASHEET_H100).machine
    assert float(costing.vertex_costs[qkv].comm[found[qkv]]) == pytest.approx(ar(machine, 3 * B * 32 * 64, 4))
    assert float(costing.vertex_costs[out].comm[found[out]]) == pytest.approx(ar(machine, B * 32 * 64, 4))


def test_data_parallel_across_nodes_takes_the_network() -> None:
    """Tensor parallel 2 inside each of 2 nodes and data parallel 2 across: the data-parallel
    weight-gradient all-reduce (a group of 2 spread over 4 devices) runs on the network, the
    tensor-parallel one on NVLink."""
    where, costing = priced(2, 2)
    found = by_name(costing, 2)["megatron-tp2"]
    inside, _ = comm(costing, found)
    m = where.machine
    fc1 = ar(m, B // 2 * D, 2) + grad_ar(m, D * 4 * D // 2, 2, span=4)
    assert inside[0] == pytest.approx(fc1)
    assert ar(m, D * 4 * D // 2, 2, span=4) > 2 * ar(m, D * 4 * D // 2, 2)  # the network is slower


def test_megatron_with_fsdp_gathers_each_weight_tile_across_nodes() -> None:
    """Megatron TP 2 x DP 2 on 2 nodes of 2, with ZeRO-3 over the data-parallel pairs: the same
    splits as Megatron, each linear's weight tile all-gathered twice over its data-parallel pair and
    its gradient reduce-scattered there instead of all-reduced (bucketed), across both nodes (the
    network), and its state halved."""
    where, costing = priced(2, 2)
    plain, sharded = (by_name(costing, 2)[name] for name in ("megatron-tp2", "megatron-tp2-fsdp"))
    assert [costing.configs[v][c].tolist() for v, c in enumerate(sharded)] == [
        costing.configs[v][c].tolist() for v, c in enumerate(plain)
    ]
    assert all(costing.is_sharded(v, c) for v, c in enumerate(sharded))
    tile = D * 4 * D / 2  # each linear's weights split over the tensor-parallel pair
    gather = float(where.machine.all_gather(np.array(tile * 2.0), np.array(2), np.array(4))) * 1e6
    extra = evaluate(costing.problem, sharded).objective - evaluate(costing.problem, plain).objective
    assert extra == pytest.approx(2 * (3 * gather - grad_ar(where.machine, tile, 2, span=4)))


@pytest.mark.parametrize(
    ("network", "nodes", "gpus", "memory"),
    [("gpt", 1, 8, None), ("gpt", 2, 4, 6.15), ("transformer", 1, 4, None), ("vgg19", 2, 4, None)],
)
def test_plan_is_never_worse_than_a_baseline_in_the_space(network, nodes, gpus, memory) -> None:
    """On zoo networks (GPT without and with a binding memory limit, the Transformer, VGG-19 on two
    nodes), on the calibrated H100: the plan fits, its estimate (communication overlapped) is at
    most every baseline's that fits (FSDP's included: all are in the space), the bound is below the
    objective the search minimised, and the estimate is at most that objective plus the constant
    per step (overlap taken over the whole step hides at least what it hides operator by operator)."""
    result = plan(network, nodes, gpus, memory_gb=memory, simulate=False)
    assert result.plan.fits
    inside = [b for b in result.baselines if b.fits]
    assert inside
    if network == "gpt":
        assert any(b.name.endswith("fsdp") for b in inside)
    assert all(result.plan.estimate <= b.estimate + 1e-6 for b in inside)
    recomputed = evaluate(result.costing.problem, result.plan.assignment).objective
    assert recomputed == pytest.approx(result.plan.objective)
    assert result.bound is not None and result.bound <= result.plan.objective + 1e-6
    overhead = result.costing.profile.step_overhead
    assert overhead > 0 and result.costing.overlap > 0
    for s in (result.plan, *inside):
        assert overhead < s.estimate <= s.objective + overhead + 1e-6


def test_memory_search_against_the_exact_mip() -> None:
    """With a limit between the least memory and the unconstrained optimum's, the plan fits, the
    bound is at most HiGHS's proven optimum under the same limit, and the plan is at least it (equal
    when the plan says optimal)."""
    _, free = priced(1, 4)
    unconstrained = solve(free.problem, "dp").assignment
    used = sum(float(free.vertex_costs[v].memory[c]) for v, c in enumerate(unconstrained))
    least = sum(float(c.memory.min()) for c in free.vertex_costs)
    limit_gb = (least + used) / 2 / 1e9
    _, bounded = priced(1, 4, memory_gb=limit_gb)
    exact = solve(bounded.problem, "mip-highs", time_limit=60)
    assert exact.status.value == "optimal"
    result = plan(mlp(), 1, 4, machine=DATASHEET_H100, memory_gb=limit_gb, simulate=False)
    assert result.plan.fits and result.plan.memory <= limit_gb * 1e9
    assert result.bound <= exact.objective + 1e-6 <= result.plan.estimate + 2e-6
    if result.status == "optimal":
        assert result.plan.estimate == pytest.approx(exact.objective)


def test_cli(tmp_path, capsys) -> None:
    """--json carries the plan and every baseline with estimate, simulated, memory and fits;
    --export writes the plan by operator as mesh splits; bad input is one line, exit 2."""
    out = tmp_path / "plan.json"
    assert main(["plan", "gpt", "--nodes", "1", "--gpus-per-node", "4", "--json", "--export", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    for strategy in [data["plan"], *data["baselines"]]:
        assert {"estimate", "simulated", "memory", "fits"} <= set(strategy)
    assert {b["name"] for b in data["baselines"]} >= {"data-parallel", "fsdp", "megatron-tp4"}
    assert data["plan"]["simulated"] > 0 and data["speedup"] >= 1.0
    exported = json.loads(out.read_text())
    assert exported["format"] == "stratopt-plan" and len(exported["operators"]) == 317
    assert all(all(c > 1 for _, c in op["mesh"]) for op in exported["operators"].values())
    assert main(["plan", "gpt", "--nodes", "1", "--gpus-per-node", "4", "--no-simulate"]) == 0
    text = capsys.readouterr().out
    assert "speed-up over the best baseline that fits" in text and "megatron-tp4" in text
    for bad in (
        ["plan", "gpt", "--nodes", "0", "--gpus-per-node", "4"],
        ["plan", "nope", "--nodes", "1", "--gpus-per-node", "2"],
    ):
        assert main(bad) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_recompute_twins_price_a_second_forward_and_free_the_output() -> None:
    """build(recompute=True) doubles every operator's configurations: the first half as without it
    (costs and edge tables), each twin one more forward (a third of the step's compute, and the
    forward-path communication again) and its outputs not held."""
    from stratopt.cost.common import output_bytes

    where = cluster(1, 4, DATASHEET_H100)
    plain = build(mlp(), 4, machine=where.machine, cutoff=1)
    twice = build(mlp(), 4, machine=where.machine, cutoff=1, recompute=True)
    for v, op in enumerate(plain.graph.operators):
        k = len(plain.configs[v])
        a, b = plain.vertex_costs[v], twice.vertex_costs[v]
        assert len(twice.configs[v]) == 2 * k and (twice.configs[v][k:] == plain.configs[v]).all()
        assert np.allclose(b.compute[:k], a.compute) and np.allclose(b.memory[:k], a.memory)
        assert np.allclose(b.compute[k:], a.compute * 4 / 3)
        assert np.allclose(b.comm[k:], a.comm + a.phases()[0])
        assert np.allclose(b.memory[k:], a.memory - output_bytes(op, plain.configs[v], 2))
        assert all(twice.is_recomputed(v, c) == (c >= k) for c in range(2 * k))
    for e in range(plain.problem.num_edges):
        k_u, k_v = plain.problem.edge_cost(e).shape
        assert (twice.problem.edge_cost(e)[:k_u, :k_v] == plain.problem.edge_cost(e)).all()


def test_recompute_under_a_limit_mip_equals_brute() -> None:
    """Recomputation as a choice in the one-hot problem: under a memory limit that binds, the MIP's
    optimum equals brute force's, and it recomputes somewhere (the cheapest fitting strategy
    without recomputation costs more, or does not exist)."""
    g = GraphBuilder("small")
    g.fc(g.fc(g.input((16, 64)), 64, pointwise=1), 16)
    graph = g.build()
    free = build(graph, 2, cutoff=4, recompute=True)
    least_plain = sum(float(c.memory[: len(c.memory) // 2].min()) for c in free.vertex_costs)
    least = sum(float(c.memory.min()) for c in free.vertex_costs)
    limit_gb = (least + least_plain) / 2 / 1e9
    bounded = build(graph, 2, cutoff=4, recompute=True, memory_gb=limit_gb)
    brute = solve(bounded.problem, "brute")
    highs = solve(bounded.problem, "mip-highs", time_limit=60)
    assert brute.status.value == highs.status.value == "optimal"
    assert brute.objective == pytest.approx(highs.objective)
    assert any(bounded.is_recomputed(v, c) for v, c in enumerate(brute.assignment))


def test_plan_recomputes_where_memory_binds() -> None:
    """Under a limit below the least memory any strategy keeping its activations needs, the plan
    still fits, by recomputing, and says so in its words."""
    where = cluster(1, 4, DATASHEET_H100)
    plain = build(mlp(), 4, machine=where.machine, cutoff=1, shard_weights=True)
    twice = build(mlp(), 4, machine=where.machine, cutoff=1, shard_weights=True, recompute=True)
    least_plain = sum(float(c.memory.min()) for c in plain.vertex_costs)
    limit = (least_plain + sum(float(c.memory.min()) for c in twice.vertex_costs)) / 2
    result = plan(mlp(), 1, 4, machine=DATASHEET_H100, memory_gb=limit / 1e9, simulate=False)
    assert result.plan.fits and result.plan.memory <= limit < least_plain
    assert any(result.costing.is_recomputed(v, c) for v, c in enumerate(result.plan.assignment))
    assert any("recomputed" in row["weights"] for row in result.plan.layers)
