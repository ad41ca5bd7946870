"""Which strategies DTensor runs (stratopt.planning.torchplan), without running anything: the style
of each configuration, the restricted search, and the placements and priced collectives of
Megatron's pattern on Llama (grouped-query attention)."""

from __future__ import annotations

import numpy as np
import pytest

from stratopt.graph import GraphBuilder
from stratopt.planning.torchplan import mesh_shapes, style


def _fc():
    g = GraphBuilder("t")
    x = g.input((8, 16))
    g.fc(x, 32, name="fc")
    return g.build().operators[0]


def test_styles_of_a_linear_layer() -> None:
    op = _fc()
    m, n, k = op.attrs["m"][0], op.attrs["n"][0], op.attrs["k"][0]

    def config(**splits: int) -> dict[str, int]:
        return {a: splits.get(a, 1) for a in op.axes}

    batch = (m,)
    assert style(op, config(**{m: 2}), batch, 2, 1) == "replicate"
    assert style(op, config(**{m: 2, n: 2}), batch, 2, 2) == "colwise"
    assert style(op, config(**{m: 2, k: 2}), batch, 2, 2) == "rowwise"
    assert style(op, config(**{n: 2, k: 2}), batch, 1, 4) is None  # both features split: no style
    assert style(op, config(**{m: 4}), batch, 2, 2) is None  # the batch over more than dp
    assert style(op, config(**{n: 2}), batch, 1, 4) is None  # 2 of a tensor-parallel 4


def test_meshes_keep_tensor_parallelism_inside_a_node() -> None:
    assert mesh_shapes(8, 4) == [(8, 1), (4, 2), (2, 4)]
    assert mesh_shapes(4, 4) == [(4, 1), (2, 2), (1, 4)]


def test_megatron_on_llama_as_dtensor_runs_it() -> None:
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.torchplan import find_mesh, module_placements, restricted_costs
    from stratopt.problem import FORBIDDEN, evaluate

    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    megatron = next(b for b in result.baselines if b.name == "megatron-tp2")
    assert find_mesh(result.costing, megatron.assignment, 2) == (1, 2)
    placed = {p.module: p for p in module_placements(result.costing, megatron.assignment, 1, 2)}
    assert placed["embed_tokens"].tp == "vocab"
    assert placed["embed_tokens"].collectives["forward"] == {"all_reduce": 1}
    for name in ("q_proj", "k_proj", "v_proj"):
        assert placed[f"layers.0.self_attn.{name}"].tp == "colwise"
    mlp = {n: placed[f"layers.0.mlp.{n}"] for n in ("gate_proj", "up_proj", "down_proj")}
    assert mlp["gate_proj"].output == mlp["up_proj"].output == "shard" and mlp["down_proj"].input == "shard"
    assert mlp["down_proj"].collectives == {"forward": {"all_reduce": 1}, "backward": {}}
    assert mlp["up_proj"].collectives == {"forward": {}, "backward": {"all_reduce": 1}}
    # the plan is the optimum of the restricted space on its mesh: no configuration outside it
    dp, tp = find_mesh(result.costing, result.plan.assignment, 2)
    costs = restricted_costs(result.costing, dp, tp)
    assert costs is not None
    assert all(costs[v][c] < FORBIDDEN for v, c in enumerate(result.plan.assignment))
    restricted = result.costing.problem.replace(node_costs=costs)
    assert np.isclose(float(evaluate(restricted, result.plan.assignment).objective), result.plan.objective)


def mixed_mlp(result):
    """Megatron's Llama MLP on 1 x 2 with the gate projection whole: the product of the two branches
    keeps the up projection's split but also reads the whole gate (no edge pays for it)."""
    costing, a = result.costing, list(next(b for b in result.baselines if b.name == "megatron-tp2").assignment)
    names = [op.name for op in costing.graph.operators]
    v = names.index("layers.0.mlp.gate_proj")
    a[v] = costing.problem.labels[v].index("1")
    return tuple(a)


def test_a_split_the_runtime_gathers_anyway_is_counted_and_priced() -> None:
    """DTensor's operators without weights run on what the modules hand them: where one keeps a
    column-parallel output's split but also reads a whole tensor, the module gathers its output all
    the same. The placement counts that gather and the runnable estimate adds its time."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.planner import runnable_time
    from stratopt.planning.torchplan import find_mesh, module_placements, unpriced_gathers

    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    megatron = next(b for b in result.baselines if b.name == "megatron-tp2").assignment
    mixed = mixed_mlp(result)
    assert find_mesh(result.costing, mixed, 2) == (1, 2)
    placed = {p.module: p for p in module_placements(result.costing, mixed, 1, 2)}
    up = placed["layers.0.mlp.up_proj"]
    assert up.tp == "colwise" and up.output == "replicate" and up.collectives["forward"] == {"all_gather": 1}
    assert unpriced_gathers(result.costing, mixed, 1, 2) > 0.0
    assert unpriced_gathers(result.costing, megatron, 1, 2) == 0.0
    gap = runnable_time(result.costing, mixed, 2) - result.costing.step_time(mixed)
    assert np.isclose(gap, unpriced_gathers(result.costing, mixed, 1, 2))


def test_a_model_output_is_never_column_split() -> None:
    """The model's output (a head no operator reads: its caller, or the loss inside a Hugging Face
    model, reads it whole) has no column-split form: DTensor would hand the caller its shard, and the
    gather the caller needs is not priced. Phi-3 under a memory limit on 2 x 2 computed a loss 1.5
    relative error away from one process with its head column split; the same split of a layer
    inside the model stays allowed."""
    from stratopt.machine import get_machine
    from stratopt.planning.cluster import price
    from stratopt.planning.torchplan import _config, find_mesh, restricted_costs
    from stratopt.problem import FORBIDDEN

    g = GraphBuilder("head")
    g.fc(g.fc(g.input((8, 16)), 32, name="hidden"), 64, name="head")
    costing = price(g.build(), 4, get_machine("h100"))
    costs = restricted_costs(costing, 2, 2)
    assert costs is not None
    by_style = []
    for v, op in enumerate(costing.graph.operators):
        kinds = {c: style(op, _config(costing, v, c), [op.attrs["m"][0]], 2, 2) for c in range(len(costs[v]))}
        by_style.append({k: [c for c in kinds if kinds[c] == k] for k in ("colwise", "rowwise")})
    hidden, head = by_style
    assert all(costs[0][c] < FORBIDDEN for c in hidden["colwise"])  # read by the head: may stay split
    assert head["colwise"] and all(costs[1][c] >= FORBIDDEN for c in head["colwise"])
    assert all(costs[1][c] < FORBIDDEN for c in head["rowwise"])
    assert isinstance(find_mesh(costing, (hidden["colwise"][0], head["colwise"][0]), 4), str)
    assert find_mesh(costing, (hidden["colwise"][0], head["rowwise"][0]), 4) == (2, 2)


def test_a_mixture_of_experts_module_is_one_placement(tmp_path) -> None:
    """The experts' up and down products read one module's fused weights: exported as that module
    once (both weights, one gradient reduction per pass); no DTensor style splits the stacked
    expert weights, so Megatron's row split of them does not run, and says why."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan

    result = plan("stratopt.importers.hf:mixtral", 1, 2, simulate=False, expressible="torch")
    written = result.export_all(tmp_path)
    assert "no DTensor form" in written["megatron-tp2"] and "experts" in written["megatron-tp2"]
    from stratopt.planning import load_plan

    dp = load_plan(written["data-parallel"])
    experts = dp.modules["layers.0.mlp.experts"]
    assert experts["params"] == ["layers.0.mlp.experts.gate_up_proj", "layers.0.mlp.experts.down_proj"]
    assert experts["tp"] == "replicate" and experts["collectives"]["backward"] == {"all_reduce": 1}
    fsdp = load_plan(written["fsdp"]).modules["layers.0.mlp.experts"]
    assert fsdp["fsdp"] and fsdp["collectives"]["backward"] == {"all_gather": 1, "reduce_scatter": 1}


def test_the_runnable_estimate_of_a_module_laid_out_twice_is_still_a_figure() -> None:
    """A strategy whose experts' two products take different placements has a mesh (each operator has
    a style) but no single layout of the module: its runnable estimate is still given (the export
    says why it does not run), never an error."""
    pytest.importorskip("transformers")
    from stratopt.errors import ModelError
    from stratopt.planning import plan
    from stratopt.planning.planner import runnable_time
    from stratopt.planning.torchplan import find_mesh, module_placements

    result = plan("stratopt.importers.hf:mixtral", 1, 2, simulate=False, expressible="torch")
    costing = result.costing
    a = list(next(b for b in result.baselines if b.name == "data-parallel").assignment)
    names = [op.name for op in costing.graph.operators]
    v = names.index("layers.0.mlp.experts.up")
    a[v] = next(
        c
        for c in range(len(costing.configs[v]))
        if costing.is_sharded(v, c) and costing.problem.labels[v][c] == costing.problem.labels[v][a[v]] + " fsdp"
    )
    a = tuple(a)
    assert find_mesh(costing, a, 2) == (2, 1)
    with pytest.raises(ModelError, match="take different placements"):
        module_placements(costing, a, 2, 1)
    assert runnable_time(costing, a, 2) >= costing.step_time(a)
