"""The cost-model layer: PaSE's t_V and t_E by hand, its published optimum, the default profile."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stratopt import solve
from stratopt.cost import build, config_label
from stratopt.errors import ModelError
from stratopt.graph import ConfigPolicy, GraphBuilder, configurations
from stratopt.graph.zoo import ZOO
from stratopt.machine import get_machine

from .machines import DATASHEET_H100

R = 5000.0  # PaSE's flops per word at its defaults (10 TFLOPS, 16 GB/s)


def ar(words: float, procs: int) -> float:
    """All-reduce in PaSE's units, written out independently of the library."""
    return R * 2 * (procs - 1) * words / procs


def choice(costing, v: int, config: tuple[int, ...]) -> int:
    rows = costing.configs[v].tolist()
    return rows.index(list(config))


def mlp():
    g = GraphBuilder("mlp")
    h = g.fc(g.input((8, 16)), 8, pointwise=1)
    g.fc(h, 4)
    return g.build()


def test_fc_vertex_cost_by_hand():
    """t_V of a GEMM: 3mnk + 3pw mn + the three all-reduces, per device block."""
    c = build(mlp(), 4, profile="pase")
    # fc1 domain (b=8, n=8, k=16); config b2 k2: block m=4, n=8, k=8.
    i = choice(c, 0, (2, 1, 2))
    expected = 3 * 4 * 8 * 8 + 3 * 1 * 4 * 8 + ar(4 * 8, 2) + ar(4 * 8, 1) + ar(8 * 8, 2)
    assert c.problem.node_cost(0)[i] == pytest.approx(expected, rel=1e-12)
    assert expected == 480864


def test_conv_vertex_cost_by_hand():
    """t_V of a convolution: the im2col GEMM m = b h w, n = filters, k = c r s; h, w never split."""
    g = GraphBuilder("conv")
    g.conv(g.input((16, 8, 8, 8)), (16, 8, 3, 3), pad=1)
    c = build(g.build(), 4, profile="pase")
    assert all(row[2] == row[3] == 1 for row in c.configs[0].tolist())
    i = choice(c, 0, (2, 2, 1, 1, 1, 1, 1))  # b2 c2
    m, n, k = 16 * 8 * 8 / 2, 16, 8 * 3 * 3 / 2
    expected = 3 * m * n * k + ar(m * n, 2) + ar(m * k, 1) + ar(n * k, 2)
    assert c.problem.node_cost(0)[i] == pytest.approx(expected, rel=1e-12)
    assert expected == 44724736


@pytest.mark.parametrize(
    ("src", "dst", "words"),
    [
        ((2, 1, 1), (1, 1, 2), 16),  # (4x8 tile) -> (8x4 tile), both on 2 devices: 16 overlap of 32
        ((2, 1, 1), (1, 1, 1), 32),  # gather the whole 8x8 on one device that holds 4x8
        ((1, 1, 1), (2, 1, 1), 32),  # more consumer devices than producers: no overlap counted
        ((2, 1, 1), (2, 1, 1), 0),  # same layout: nothing moves
    ],
)
def test_edge_cost_by_hand(src, dst, words):
    """t_E = r * 2 * (consumer tile - overlap with the producer tile), overlap 0 when P_v > P_u."""
    c = build(mlp(), 4, profile="pase")
    matrix = c.problem.edge_cost(0)
    assert matrix[choice(c, 0, src), choice(c, 1, dst)] == R * 2 * words


def test_alexnet_matches_pase_optimum():
    """PaSE's published optimum for AlexNet (batch 128, 1024 classes) at p = 4, and CP-SAT agrees."""
    costing = build(ZOO["alexnet"].build(), 4, profile="pase")
    dp = solve(costing.problem, "dp")
    assert dp.status.value == "optimal"
    assert math.isclose(dp.objective, 148215719552, rel_tol=1e-9)
    cp = solve(costing.problem, "cpsat", time_limit=120)
    # PaSE's costs are floats: CP-SAT proves the optimum of the rounded costs, so its answer is
    # FEASIBLE (Limit.PRECISION) with a bound lowered by the rounding error, never OPTIMAL.
    assert cp.status.value == "feasible" and cp.bound <= dp.objective <= cp.objective
    if cp.limit.value == "precision":  # the rounded model was solved to the end (a second here)
        assert math.isclose(cp.objective, dp.objective, rel_tol=1e-9)


def test_zoo_files_match_builders():
    """models/*.json hold exactly what the zoo builders make (regenerate with scripts/make_models.py)."""
    from stratopt.graph.io import graph_to_dict
    from stratopt.instances import load_instance

    for name, entry in ZOO.items():
        assert graph_to_dict(load_instance(name)) == graph_to_dict(entry.build()), name


def test_explain_rows_sum_to_objective():
    """--explain's per-operator totals add up to the strategy's cost (default profile, GPT, p = 8)."""
    costing = build(ZOO["gpt"].build(), 8, profile="default", machine="h100")
    result = solve(costing.problem, "dp")
    rows = costing.explain(result.assignment)
    assert len(rows) == costing.problem.num_vertices
    assert sum(r["total"] for r in rows) == pytest.approx(result.objective, rel=1e-9)
    assert all(r["memory_bytes"] > 0 for r in rows)
    assert {r["config"] for r in rows} - {"1"}, "at p = 8 some operator must split"


def test_default_profile_single_device_gemm():
    """On one device the default profile's GEMM is 6 mnk flops at efficiency x peak, no communication
    (the datasheet machine); on the calibrated H100, (w + gemm_half) / (gemm_efficiency x peak) for
    each of the three products and Adam's 30 bytes per weight element streamed at the achieved
    bandwidth (FSDP's fixed cost only where it shards the weights: nothing to shard on one device)."""
    h100 = DATASHEET_H100
    g = GraphBuilder("one")
    g.fc(g.input((1024, 2048)), 4096)
    c = build(g.build(), 1, profile="default", machine=h100)
    expected_us = 6 * 1024 * 4096 * 2048 / (h100.peak_tflops * 1e12 * h100.efficiency) * 1e6
    assert c.problem.node_cost(0).tolist() == pytest.approx([expected_us], rel=1e-12)
    assert c.vertex_costs[0].comm.tolist() == [0.0]
    fitted = get_machine("h100")
    cal = dict(fitted.calibration)
    c = build(g.build(), 1, profile="default", machine=fitted)
    work, peak = 2 * 1024 * 4096 * 2048, fitted.peak_tflops * 1e12
    products = 3 * (work + cal["gemm_half_gflop"] * 1e9) / (cal["gemm_efficiency"] * peak) * 1e6
    adam = 2048 * 4096 * 30 / (fitted.hbm_gbps * 1e9 * cal["hbm_efficiency"]) * 1e6
    expected = products + adam
    assert c.problem.node_cost(0).tolist() == pytest.approx([expected], rel=1e-12)


def test_memory_limit_becomes_usage_constraint():
    """A memory limit adds one usage row over all operators; too small a limit has no solution."""
    graph = ZOO["alexnet"].build()
    loose = build(graph, 4, profile="default", machine="a100", memory_gb=80)
    assert loose.problem.usage_limit == 80 * 10**9
    result = solve(loose.problem, "dp")
    assert result.status.value == "optimal"
    tight = build(graph, 4, profile="default", machine="a100", memory_gb=0.01)
    assert solve(
        tight.problem, "brute" if tight.problem.search_space_size < 10**5 else "cpsat", time_limit=30
    ).status.value in (
        "infeasible",
        "no_solution",
    )


def test_machine_collectives():
    """Ring all-reduce 2(g-1)/g n/B + 2(g-1) a, intra-node inside a node, inter-node beyond."""
    a100 = get_machine("a100")
    n = 1e9
    intra = float(a100.all_reduce(np.array(n), np.array(8)))
    assert intra == pytest.approx(2 * 7 / 8 * n / 300e9 + 2 * 7 * 3e-6)
    inter = float(a100.all_reduce(np.array(n), np.array(16)))
    assert inter == pytest.approx(2 * 15 / 16 * n / 25e9 + 2 * 15 * 8e-6)
    assert float(a100.all_reduce(np.array(n), np.array(1))) == 0.0


def test_config_policy():
    """Divisors with a minimum block, locked axes, powers of two, prod == p, reported K."""
    g = GraphBuilder("t")
    g.fc(g.input((12, 16)), 6)  # domain b=12, n=6, k=16
    op = g.build().operators[0]
    rows = configurations(op, ConfigPolicy(procs=6)).tolist()
    assert all(math.prod(r) <= 6 for r in rows)
    assert {r[1] for r in rows} == {1}  # n=6 has no split leaving 4 per block
    assert {r[0] for r in rows} == {1, 2, 3}  # 12/c >= 4
    two = configurations(op, ConfigPolicy(procs=6, powers_of_two=True)).tolist()
    assert {r[0] for r in two} == {1, 2} and all(c & (c - 1) == 0 for r in two for c in r)
    exact = configurations(op, ConfigPolicy(procs=4, exact=True)).tolist()
    assert exact and all(math.prod(r) == 4 for r in exact)
    with pytest.raises(ModelError, match=r"fc1.*no configuration"):
        configurations(op, ConfigPolicy(procs=5, exact=True))
    assert config_label(op, (2, 1, 4)) == "b2 k4"
    with pytest.raises(ModelError, match="positive integer"):
        ConfigPolicy(procs=0)


def test_reshape_only_contiguous_splits():
    """A reshape's halves split the domain contiguously: whole leading axes, one partial, then none."""
    g = GraphBuilder("r")
    g.reshape(g.input((4, 8, 6)), (32, 6))
    ravel = g.build().operators[0]
    rows = configurations(ravel, ConfigPolicy(procs=8, cutoff=1)).tolist()
    assert [4, 2, 1] in rows and [1, 2, 1] not in rows and [2, 1, 2] not in rows


@pytest.mark.parametrize(
    ("procs", "optimum"),
    [(4, 6866837733376), (8, 4024963186688)],
)
def test_rnnlm_matches_pase(procs, optimum):
    """PaSE's RNNLM (its final graph.py: cutoff 1, one-hot embedding einsum, stacked LSTM, FC,
    softmax cross-entropy) at p = 4 is its published optimum, to the last digit; p = 8 is what
    PaSE's own scheduler prints for the same sources (run by hand; the README has p = 4..64)."""
    costing = build(ZOO["rnnlm"].build(), procs, profile="pase")
    assert costing.policy.cutoff == 1
    if procs == 4:  # PaSE prints its configuration counts: Einsum 15, LSTM 14, FC 15, softmax 10
        assert costing.problem.num_choices.tolist() == [15, 14, 15, 10]
    dp = solve(costing.problem, "dp")
    assert dp.status.value == "optimal" and dp.objective == optimum


def test_graph_cutoff_is_the_default_policy():
    """A graph's own cutoff prices it unless build() is told another; it survives JSON."""
    from stratopt.graph.io import graph_from_dict, graph_to_dict

    graph = ZOO["rnnlm"].build()
    assert graph.cutoff == 1 and graph_from_dict(graph_to_dict(graph)).cutoff == 1
    assert build(graph, 4, profile="pase").problem.num_choices[1] == 14  # the layer axis splits
    assert build(graph, 4, profile="pase", cutoff=4).problem.num_choices[1] == 10
    assert build(ZOO["alexnet"].build(), 4).policy.cutoff == 4


def test_default_edge_prices_the_fan_out_to_more_devices():
    """A tensor produced on 2 devices (batch split) and read on 4 (batch split, and each half
    copied to the 2 devices of a feature split): each consumer device lacks its whole tile, and each
    producer device sends its tile to 2 neighbours; priced on the links of those 2. Between layouts
    on as many devices, the edge is the words each consumer lacks (PaSE's rule)."""
    from stratopt.cost.default import DefaultProfile

    g = GraphBuilder("fan")
    g.fc(g.fc(g.input((64, 256)), 256), 512)
    first, second = g.build().operators
    profile = DefaultProfile(DATASHEET_H100)
    by_batch = np.array([[2 if a == "b" else 1 for a in first.axes]])
    fanned = np.array([[2 if a in ("b", "n") else 1 for a in second.axes]])
    batch_only = np.array([[2 if a == "b" else 1 for a in second.axes]])
    out, use = first.outputs[0], second.inputs[0].use
    tile = 64 * 256 / 2  # a batch half, on both sides
    expected = 2 * DATASHEET_H100.transfer(np.array(tile * 2.0), np.array(2.0)) * 1e6
    assert profile.edge(first, out, by_batch, second, use, fanned)[0, 0] == pytest.approx(float(expected))
    assert profile.edge(first, out, by_batch, second, use, batch_only)[0, 0] == 0.0  # the same tiles


def _three_products(readers: int):
    """A product (rows 64, features 512) whose output ``readers`` products read."""
    g = GraphBuilder("sp")
    h = g.fc(g.input((64, 512)), 512)
    for _ in range(readers):
        g.fc(h, 512)
    return g.build()


def _config(op, **splits) -> np.ndarray:
    return np.array([[splits.get(a, 1) for a in op.axes]])


def test_sequence_parallel_edges_price_a_gather_and_a_reduce_scatter():
    """Megatron's sequence parallelism as the default profile prices it. A column-parallel product
    (output features split 4 ways) reading a tensor split 4 ways over its rows: with its own
    all-reduce of its input's gradient, it pays what a gather forward and a reduce-scatter backward
    cost (and one message's latency), not that all-reduce and a message each way. A row-parallel
    product (input features split 4 ways) whose one reader takes a quarter of its output: its
    all-reduce and the edge cost a reduce-scatter forward and the gradient's gather back. With two
    readers, the all-reduce stays and the gradient's gather back is paid in full."""
    from stratopt.cost.costing import _readers
    from stratopt.cost.default import DefaultProfile

    profile = DefaultProfile(DATASHEET_H100)
    first, second = _three_products(1).operators
    tile = 64 * 512 * profile.dtype_bytes
    gather = float(DATASHEET_H100.all_gather(np.array(tile), np.array(4.0))) * 1e6
    latency = float(DATASHEET_H100.link(np.array(4.0))[1]) * 1e6
    out, use = first.outputs[0], second.inputs[0].use
    by_rows, by_features, by_inputs = _config(first, b=4), _config(second, n=4), _config(first, k=4)

    # a column-parallel reader of a row-split tensor
    edge = profile.edge(first, out, by_rows, second, use, by_features)[0, 0]
    own = profile.vertex(second, by_features).comm[0] - profile.vertex(second, _config(second)).comm[0]
    assert own == pytest.approx(2 * gather)  # its input gradient's all-reduce
    assert edge == pytest.approx(latency)
    assert edge + own == pytest.approx(2 * gather + latency)  # gather + reduce-scatter
    moved = DATASHEET_H100.transfer(np.array(tile * 3 / 4), np.array(4.0)) * 1e6
    assert profile.relayout_cost(
        (64, 512), np.array([[4.0, 1.0]]), np.array([[1.0, 1.0]]), (np.array([4]), np.array([4]))
    )[0, 0] == pytest.approx(float(moved))  # forward only: the whole tensor's gradient is sliced back

    # a row-parallel producer handing a quarter of its output to its one reader (rows split 4 ways)
    by_rows_reader = _config(second, b=4)
    edge = profile.edge(first, out, by_inputs, second, use, by_rows_reader, readers=1)[0, 0]
    assert edge == pytest.approx(latency)
    alone = profile.edge(first, out, by_inputs, second, use, by_rows_reader, readers=2)[0, 0]
    assert alone == pytest.approx(float(moved))  # the gradient gathered back, the all-reduce kept
    assert profile.edge(first, out, by_inputs, second, use, by_rows_reader, forward=True)[0, 0] == pytest.approx(
        -gather
    )

    # the graph says how many read a tensor
    assert _readers(_three_products(2))[(0, 0)] == 2 and _readers(_three_products(1))[(0, 0)] == 1


def test_an_edges_forward_part_counts_the_tensors_readers():
    """``Costing.forward_relayout`` (what a checkpointed module's re-run issues again): a
    row-parallel product handing its one reader a quarter of its output reduce-scatters its partial
    sums where it was priced an all-reduce, so the edge's forward part is minus one all-gather; with
    two readers the all-reduce stays and nothing moves forward. The pase profile's edges are a
    message each way: half."""
    tile = 64 * 512 * 2
    gather = float(DATASHEET_H100.all_gather(np.array(tile), np.array(4.0))) * 1e6
    for readers, expected in ((1, -gather), (2, 0.0)):
        costing = build(_three_products(readers), 4, machine=DATASHEET_H100, cutoff=1)
        first, second = costing.graph.operators[:2]
        cu = choice(costing, 0, tuple(_config(first, k=4)[0]))
        cv = choice(costing, 1, tuple(_config(second, b=4)[0]))
        assert costing.forward_relayout(0, cu, cv) == pytest.approx(expected, abs=1e-9)
    pase = build(_three_products(1), 4, profile="pase", cutoff=1)
    cu, cv = choice(pase, 0, tuple(_config(first, b=4)[0])), choice(pase, 1, tuple(_config(second, n=4)[0]))
    whole = float(pase.problem.edge_cost(0)[cu, cv])
    assert whole > 0 and pase.forward_relayout(0, cu, cv) == pytest.approx(whole / 2)


def test_causal_attention_split_over_positions_waits_for_its_busiest_device():
    """Causal attention's two products split over the query positions 4 ways (contiguous ranges)
    cost 2 - 1/4 times the same products split over the heads 4 ways: the last queries' device
    does 7/4 of the average share; split over queries and keys both, twice; over the keys alone of
    the context product (its reduced axis), 2 - 1/2 at 2 ways. Checked by counting each device's
    unmasked query-key pairs on a small square."""
    from stratopt.cost.default import DefaultProfile, causal_imbalance
    from stratopt.graph.decoder import decoder_graph

    graph = decoder_graph("mpt:layers=1,d_model=64,heads=4,vocab=512,seq=32,batch=8")
    profile = DefaultProfile(DATASHEET_H100)
    for op in (o for o in graph.operators if o.attrs.get("fused_attention") in ("scores", "context")):
        role = op.attrs["fused_attention"]
        query = op.outputs[0].dims[-2][0]
        key = (op.outputs[0].dims[-1] if role == "scores" else op.inputs[0].use.dims[-1])[0]
        heads = _config(op, h=4)
        assert causal_imbalance(op, heads)[0] == 1.0
        cases = {(4, 1): 2 - 1 / 4, (1, 2): 2 - 1 / 2, (2, 2): 2.0}
        for (cq, ck), expected in cases.items():
            both = _config(op, **{query: cq, key: ck})
            assert causal_imbalance(op, both)[0] == pytest.approx(expected), (role, cq, ck)
            assert _busiest(32, cq, ck) == pytest.approx(expected)
        split = profile.vertex(op, _config(op, **{query: 4})).compute[0]
        assert split == pytest.approx(profile.vertex(op, heads).compute[0] * (2 - 1 / 4))


def _busiest(seq: int, cq: int, ck: int) -> float:
    """The most unmasked (query, key) pairs one block of a ``cq x ck`` split of a causal
    ``seq x seq`` square holds, over the average (continuous: each diagonal pair counts half)."""
    a, b = seq // cq, seq // ck
    areas = []
    for i in range(cq):
        for j in range(ck):
            pairs = sum(
                min(max(q - j * b, 0), b) + (0.5 if j * b <= q < (j + 1) * b else 0.0)
                for q in range(i * a, (i + 1) * a)
            )
            areas.append(pairs)
    return max(areas) / (seq * seq / 2 / (cq * ck))


def test_a_gather_inside_each_data_parallel_group_stays_on_the_node():
    """A tensor split over its rows 8 ways and its features 4 ways (32 devices, four nodes of 8),
    read with its features whole: each group of 4 that shares a row split gathers its own tile, on
    a node's links, so the edge costs what one such group's gather costs alone (before, the 32
    devices made it a transfer across nodes)."""
    from stratopt.cost.default import DefaultProfile, exchanging

    profile = DefaultProfile(DATASHEET_H100)
    shape = (64, 512, 1024)
    spread = profile.relayout_cost(
        shape, np.array([[8, 4, 1]]), np.array([[8, 1, 1]]), (np.array([32]), np.array([32]))
    )
    alone = profile.relayout_cost(
        (8, 512, 1024), np.array([[1, 4, 1]]), np.array([[1, 1, 1]]), (np.array([4]), np.array([4]))
    )
    assert spread[0, 0] == pytest.approx(alone[0, 0]) and spread[0, 0] > 0.0
    assert exchanging(np.array([[8, 4, 1]]), np.array([[8, 1, 1]]))[0, 0] == 4
    # a split the two sides make differently from the first dimension on: all their devices
    assert exchanging(np.array([[4, 8, 1]]), np.array([[8, 1, 1]]))[0, 0] == 32


def test_a_norms_weights_have_their_gradient_reduced():
    """A layer norm with a scale and a shift, its rows split over 4 devices (data parallelism):
    its gradient-sync phase is a ring all-reduce of those 2 x 1024 values over the 4 replicas (a
    whole one where the calibration reduces each module's gradients on its own); with its feature
    axis split too the replicas are 2; without weights, nothing."""
    import dataclasses

    h100 = get_machine("h100")
    whole = dataclasses.replace(
        h100, calibration=tuple(sorted({**dict(h100.calibration), "grad_bucket_mb": 0.0}.items()))
    )
    checked = 0
    for weights in (2, 0):
        g = GraphBuilder("norm")
        g.layernorm(g.input((64, 1024)), weights=weights)
        c = build(g.build(), 4, profile="default", machine=whole)
        net = dict(h100.calibration)["network_efficiency"]
        for row, cfg in enumerate(c.configs[0]):
            sync = float(c.vertex_costs[0].phases()[2][row])
            replicas = int(cfg[0])  # the rows' split: the devices that hold the same weights
            if weights == 0 or replicas == 1:
                assert sync == 0.0
                continue
            held = 2 * 1024 / int(cfg[1]) * whole.dtype_bytes
            ring = 2 * (replicas - 1) / replicas * held / (whole.intra_gbps * 1e9 * net)
            expected = (ring + 2 * (replicas - 1) * whole.intra_latency_us * 1e-6) * 1e6
            assert sync == pytest.approx(expected, rel=1e-9), config_label(c.graph.operators[0], cfg)
            checked += 1
    assert checked >= 2  # rows split 4 ways, and 2 ways with the features split 2


def test_a_mixture_of_experts_split_over_its_experts_sums_the_tokens():
    """Dispatch and combine split over the experts (each device runs its experts on every token):
    combine all-reduces the tokens' partial sums (forward), dispatch the tokens' gradient (backward),
    each a ring all-reduce of one device's token tile over the expert split; whole, neither pays.
    The expert axis splits down to one expert per device (its whole units), others keep the cutoff."""
    g = GraphBuilder("moe")
    x = g.input((64, 32))
    g.moe(x, 4, 2, 48, name="m")
    graph = g.build()
    costing = build(graph, 4, machine="h100")
    profile = costing.profile
    for v, op in enumerate(graph.operators):
        rows = np.asarray(costing.configs[v])
        if op.attrs.get("units"):
            assert 4 in rows[:, op.axis_index("e")]  # 4 experts over 4 devices: one each
        role = op.attrs.get("moe")
        if role not in ("dispatch", "combine"):
            continue
        vc = costing.vertex_costs[v]
        fwd, _, _ = vc.phases()
        for c, row in enumerate(rows):
            split = dict(zip(op.axes, row.tolist(), strict=True))
            ways, tokens = split["e"], 64 * 32 / (split["c"] * split["h"])
            expected = 0.0
            if ways > 1:  # 2 (w - 1) / w of the tile each way, at the links' speed for w devices
                nbytes = np.asarray(tokens * profile.dtype_bytes)
                expected = float(profile.links.all_reduce(nbytes, np.asarray(ways))) * 1e6
            assert vc.comm[c] == pytest.approx(expected, rel=1e-9, abs=1e-12), (op.name, split)
            assert fwd[c] == pytest.approx(expected if role == "combine" else 0.0, abs=1e-12)
