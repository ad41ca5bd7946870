"""Which strategies DTensor runs (stratopt.planning.torchplan), without running anything: the style
of each configuration, the restricted search, and the placements and priced collectives of
Megatron's pattern on Llama (grouped-query attention)."""

from __future__ import annotations

import dataclasses

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


def split_heads(
    result, tp: int, out: str = "o_proj", *, qkv=("q_proj", "k_proj", "v_proj"), inside=".self_attn.", styles=None
):
    """Megatron's attention on a ``1 x tp`` mesh (no FSDP, nothing recomputed): the ``qkv``
    projections column-parallel, the output projection row-parallel, every operator between them
    (in modules named ``inside``) split ``tp`` ways (over the heads, through the views and the rotary
    embedding), the modules ``styles`` names in their style, the rest as the restricted DP decides."""
    from stratopt.planning.batch import batch_axes
    from stratopt.planning.torchplan import _config, restricted_costs
    from stratopt.problem import FORBIDDEN
    from stratopt.solvers import solve

    costing = result.costing
    ops, batches = costing.graph.operators, batch_axes(costing.graph)
    costs = restricted_costs(costing, 1, tp)
    wanted = {**dict.fromkeys(qkv, "colwise"), out: "rowwise", **(styles or {})}
    out = []
    for v, op in enumerate(ops):
        node = np.array(costs[v], dtype=np.float64)
        for c in range(len(node)):
            config = _config(costing, v, c)
            model = int(np.prod([n for a, n in config.items() if a not in batches[op.name]]))
            kind = wanted.get(op.name.rsplit(".", 1)[-1])
            plain = not costing.is_sharded(v, c) and not costing.is_recomputed(v, c)
            styled = kind is None or style(op, config, batches[op.name], 1, tp) == kind
            between = kind is not None or op.attrs.get("params") or inside not in op.name or model == tp
            if not (plain and styled and between):
                node[c] = FORBIDDEN
        out.append(node)
    found = solve(costing.problem.replace(node_costs=out), "dp")
    assert found.assignment is not None
    return tuple(int(c) for c in found.assignment)


def sequence_split(result, tp: int, *, embedding: str | None = None):
    """Megatron's blocks with sequence parallelism on a ``1 x tp`` mesh (nothing sharded or
    recomputed): q, k, v, gate and up column-parallel, o and down row-parallel, every block's norms
    ``SequenceParallel`` and its residual additions split over the sequence ``tp`` ways, the final
    norm (the model's output) whole, the embedding in style ``embedding`` where given, the rest as
    the restricted DP decides within the pairs that run."""
    return _stream_split(result, tp, "sequence", 1, ("o_proj", "down_proj"), embedding)


def width_split(result, tp: int, rows: tuple[str, ...] = ("k_proj", "v_proj")):
    """Llama's blocks with the stream split over its width on a ``1 x tp`` mesh (nothing sharded or
    recomputed): every block's norms ``width`` and its residual additions split over their last
    dimension ``tp`` ways, the products named in ``rows`` and o and down row-parallel (reading their
    slice of the stream, or of the heads), the other products column-parallel, the final norm whole,
    the rest as the restricted DP decides within the pairs that run."""
    return _stream_split(result, tp, "width", -1, ("o_proj", "down_proj", *rows), None)


def gpt2_width_split(result, tp: int, embedding: str | None = None):
    """GPT-2's blocks on a ``1 x tp`` mesh with the stream split over its width (:func:`_stream_split`):
    its norms ``width``, ``c_attn`` and ``c_fc`` column-parallel, both ``c_proj`` row-parallel,
    starting from the embeddings' sum (both embeddings in style ``embedding`` where given).
    ``result``: a plan whose ``plan`` is Megatron's."""
    return _stream_split(result, tp, "width", -1, ("c_proj",), embedding, **GPT2_NAMES)


#: GPT-2's modules as :func:`_stream_split` names them: the column-parallel projections (the fused
#: query, key and value one among them), the blocks' prefix, the final norm and the stream's start
#: (the token and position embeddings added).
GPT2_NAMES = {"column": ("c_attn", "c_fc"), "block": "h.", "final": "ln_f", "start": "add_1"}


def _stream_split(
    result,
    tp: int,
    norms: str,
    dim: int,
    row: tuple[str, ...],
    embedding: str | None,
    *,
    column: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"),
    block: str = "layers.",
    final: str = "norm",
    start: str = "",
):
    """A decoder's blocks (Llama's names unless told) on a ``1 x tp`` mesh with the products of the
    modules in ``row`` row-parallel and those in ``column`` column-parallel, every block's norms in
    style ``norms`` and its residual additions split over their axis ``dim`` ``tp`` ways (nothing
    sharded or recomputed), the final norm whole, the embedding in style ``embedding`` where given,
    the operator named ``start`` split as the residual additions, the rest as the restricted DP
    decides within the pairs that run."""
    from stratopt.planning.batch import batch_axes
    from stratopt.planning.pairs import handed_on
    from stratopt.planning.torchplan import _config, restricted_costs
    from stratopt.problem import FORBIDDEN
    from stratopt.solvers import solve

    costing = result.costing
    ops, batches = costing.graph.operators, batch_axes(costing.graph)
    costs = restricted_costs(costing, 1, tp)
    column = tuple(c for c in column if c not in row)
    out = []
    for v, op in enumerate(ops):
        node = np.array(costs[v], dtype=np.float64)
        last = op.name.rsplit(".", 1)[-1]
        residual = op.name.startswith(block) and last.startswith("add") and op.name.count(".") == block.count(".") + 1
        residual = residual or op.name == start
        # a product of a module named (Hugging Face's Conv1D names its product after its module's addmm)
        named = set(op.name.split(".")) if op.op == "gemm" and op.attrs.get("params") else set()
        for c in range(len(node)):
            config = _config(costing, v, c)
            kind = style(op, config, batches[op.name], 1, tp)
            wanted = {
                bool(named & set(column)): kind == "colwise",
                bool(named & set(row)): kind == "rowwise",
                op.op == "norm": kind == ("replicate" if op.name == final else norms),
                residual: kind == "free" and config[op.axes[dim]] == tp,
                bool(op.attrs.get("lookup")) and embedding is not None: kind == embedding,
            }.get(True, True)
            if costing.is_sharded(v, c) or costing.is_recomputed(v, c) or not wanted:
                node[c] = FORBIDDEN
        out.append(node)
    pairs = handed_on(costing)
    problem = costing.problem.replace(node_costs=out).forbid({e: pairs.full(e) for e in pairs.allowed})
    found = solve(problem, "dp")
    assert found.assignment is not None
    return tuple(int(c) for c in found.assignment)


def _width_placed(result, split, norm_name: str, backward: str) -> dict:
    """The module placements of ``split`` on 1 x 2, checked to run as it is split, with norm
    ``norm_name`` split over the width on a split stream: its statistics all-reduced forward and
    ``backward`` (the collective of its backward pass) once."""
    from stratopt.planning.torchplan import as_run, module_placements

    assert as_run(result.costing, split, 1, 2) == split
    placed = {p.module: p for p in module_placements(result.costing, split, 1, 2)}
    norm = placed[norm_name]
    assert (norm.tp, norm.input, norm.output, norm.sequence_dim) == ("width", "sequence", "sequence", -1)
    assert norm.collectives == {"forward": {"all_reduce": 1}, "backward": {backward: 1}}
    return placed


def test_width_split_stream_feeds_row_parallel_products_their_slice() -> None:
    """Norms and residual additions split over the width: a root-mean-square norm runs on its
    slice of every token with its weights split alike (its statistics all-reduced), the
    column-parallel products gather the stream, the key and value products read their slice as it
    is and reduce-scatter their partial sums into the heads' split region, o and down reduce-scatter
    into the stream; PyTorch runs that as priced."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.torchplan import unpriced_gathers

    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    split = width_split(result, 2)
    placed = _width_placed(result, split, "layers.1.input_layernorm", "reduce_scatter")
    key = placed["layers.1.self_attn.k_proj"]
    assert (key.tp, key.input, key.output) == ("rowwise", "sequence", "shard")
    assert key.collectives == {"forward": {"reduce_scatter": 1}, "backward": {"all_gather": 1}}
    query = placed["layers.1.self_attn.q_proj"]
    assert (query.tp, query.input, query.output) == ("colwise", "sequence", "shard")
    assert query.collectives == {"forward": {"all_gather": 1}, "backward": {"reduce_scatter": 1}}
    out = placed["layers.1.self_attn.o_proj"]
    assert (out.input, out.output) == ("shard", "sequence") and out.collectives["forward"] == {"reduce_scatter": 1}
    assert placed["norm"].tp == "replicate" and placed["norm"].collectives["forward"] == {"all_gather": 1}
    assert unpriced_gathers(result.costing, split, 1, 2) == 0.0


def test_a_layer_norm_splits_over_its_width_and_conv1d_reads_the_stream_through_its_view() -> None:
    """GPT-2's blocks with the stream split over its width: its norms are ``nn.LayerNorm`` (one
    fused call, a scale and a shift), which run split as :mod:`stratopt.torch.norms` runs them (two
    sums all-reduced each way); its projections are ``Conv1D`` modules, whose first operator is the
    view that flattens the stream, through which they gather it. The stream starts where the
    token and position embeddings (the positions' table a lookup of its own) are added."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.torchplan import as_run, module_placements, unpriced_gathers

    result = plan("stratopt.importers.hf:gpt2", 1, 2, simulate=False, expressible="torch")
    megatron = next(b for b in result.baselines if b.name == "megatron-tp2")
    split = gpt2_width_split(dataclasses.replace(result, plan=megatron), 2)
    placed = _width_placed(result, split, "h.1.ln_2", "all_reduce")
    fused = placed["h.1.attn.c_attn"]
    assert (fused.tp, fused.input, fused.output, fused.pieces) == ("colwise", "sequence", "shard", 3)
    assert fused.collectives == {"forward": {"all_gather": 1}, "backward": {"reduce_scatter": 1}}
    down = placed["h.1.mlp.c_proj"]
    assert (down.tp, down.input, down.output, down.sequence_dim) == ("rowwise", "shard", "sequence", -1)
    assert {placed["wte"].output, placed["wpe"].output} == {"sequence"}
    assert unpriced_gathers(result.costing, split, 1, 2) == 0.0
    # embeddings split over the width hand their split on as it is (not gathered, as elsewhere)
    split = gpt2_width_split(dataclasses.replace(result, plan=megatron), 2, "colwise")
    assert as_run(result.costing, split, 1, 2) == split
    table = {p.module: p for p in module_placements(result.costing, split, 1, 2)}["wte"]
    assert (table.tp, table.output, table.sequence_dim) == ("colwise", "sequence", -1)
    assert table.collectives == {"forward": {}, "backward": {}}


def test_sequence_parallel_blocks_keep_the_stream_split_between_their_modules() -> None:
    """Norms and residual additions split over the sequence keep that split between the modules
    that hand it on (row-parallel products reduce-scatter, the embedding slices its output) and the
    ones that gather it (column-parallel products, the final norm whole); PyTorch runs that as
    priced (nothing run whole), with each module's collectives as DTensor issues them."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.torchplan import as_run, module_placements, unpriced_gathers
    from stratopt.planning.words import describe_layers

    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    split = sequence_split(result, 2)
    assert as_run(result.costing, split, 1, 2) == split
    placed = {p.module: p for p in module_placements(result.costing, split, 1, 2)}
    norm = placed["layers.0.input_layernorm"]
    assert (norm.tp, norm.input, norm.output, norm.sequence_dim) == ("sequence", "sequence", "sequence", 1)
    assert norm.collectives["backward"] == {"all_reduce": 1} and not norm.collectives["forward"]
    down = placed["layers.1.mlp.down_proj"]
    assert down.output == "sequence" and down.collectives["forward"] == {"reduce_scatter": 1}
    assert down.collectives["backward"] == {"all_gather": 1}
    gate = placed["layers.1.mlp.gate_proj"]
    assert gate.input == "sequence" and gate.collectives == {
        "forward": {"all_gather": 1},
        "backward": {"reduce_scatter": 1},
    }
    assert placed["embed_tokens"].output == "sequence" and placed["norm"].input == "sequence"
    words = describe_layers(result.costing.graph, result.costing.configs, split, result.costing.is_sharded)
    assert {r["layer"]: r["how"] for r in words if r["op"] == "norm"} == {
        "layers.*.input_layernorm": "sequence",
        "layers.*.post_attention_layernorm": "sequence",
        "norm": "",
    }
    assert placed["norm"].collectives["forward"] == {"all_gather": 1}
    # the final norm split too (the model's output, which its caller reads whole) runs whole, the stream kept
    ops = result.costing.graph.operators
    last = next(v for v, op in enumerate(ops) if op.name == "norm")
    config = result.costing.configs[last][split[last]]
    twin = next(
        c
        for c, row in enumerate(result.costing.configs[last])
        if list(row) == [config[0], 2, 1]
        and not result.costing.is_sharded(last, c)
        and not result.costing.is_recomputed(last, c)
    )
    assert twin != split[last] and as_run(result.costing, (*split[:last], twin, *split[last + 1 :]), 1, 2) == split
    # the first block's norm whole beside its residual addition split: the embedding hands on its
    # output split, the whole norm gathers it (a gather no edge prices, unpriced_gathers adds it)
    first = next(v for v, op in enumerate(ops) if op.name == "layers.0.input_layernorm")
    rows = result.costing.configs[first]
    whole = next(
        c
        for c, row in enumerate(rows)
        if list(row) == [1, 1, 1]
        and not result.costing.is_sharded(first, c)
        and not result.costing.is_recomputed(first, c)
    )
    mixed = (*split[:first], whole, *split[first + 1 :])
    assert as_run(result.costing, mixed, 1, 2) == mixed
    placed = {p.module: p for p in module_placements(result.costing, mixed, 1, 2)}
    norm = placed["layers.0.input_layernorm"]
    assert (norm.tp, norm.input, norm.collectives["forward"]) == ("replicate", "sequence", {"all_gather": 1})
    assert unpriced_gathers(result.costing, mixed, 1, 2) > unpriced_gathers(result.costing, split, 1, 2)


def test_megatron_attention_splits_the_heads_through_views_and_rotary_tables() -> None:
    """A view that splits the width into heads passes a split of the heads (the importer's reshape
    is one operator: PyTorch's view moves no data), and the rotary tables the attention reads whole
    are broadcast over the heads: the q, k and v projections hand their shards on to the output
    projection, and nothing runs whole."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.torchplan import as_run, find_mesh, module_placements

    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    a = split_heads(result, 2)
    costing = result.costing
    assert find_mesh(costing, a, 2) == (1, 2) and as_run(costing, a, 1, 2) == a
    placed = {p.module: p for p in module_placements(costing, a, 1, 2)}
    for layer in ("layers.0", "layers.1"):
        for name in ("q_proj", "k_proj", "v_proj"):
            p = placed[f"{layer}.self_attn.{name}"]
            assert (p.tp, p.output) == ("colwise", "shard") and p.collectives["forward"] == {}, name
        o = placed[f"{layer}.self_attn.o_proj"]
        assert (o.tp, o.input) == ("rowwise", "shard") and o.collectives["forward"] == {"all_reduce": 1}


def test_a_split_the_runtime_gathers_anyway_is_counted_and_priced() -> None:
    """DTensor's operators without weights run on what the modules hand them: where one keeps a
    column-parallel output's split but also reads a whole tensor, the module gathers its output all
    the same. The placement counts that gather and the runnable estimate adds its time."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.planner import runnable_time
    from stratopt.planning.torchplan import as_run, find_mesh, module_placements, unpriced_gathers

    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    megatron = next(b for b in result.baselines if b.name == "megatron-tp2").assignment
    mixed = mixed_mlp(result)
    assert find_mesh(result.costing, mixed, 2) == (1, 2)
    placed = {p.module: p for p in module_placements(result.costing, mixed, 1, 2)}
    up = placed["layers.0.mlp.up_proj"]
    assert up.tp == "colwise" and up.output == "replicate" and up.collectives["forward"] == {"all_gather": 1}
    assert unpriced_gathers(result.costing, mixed, 1, 2) > 0.0
    assert unpriced_gathers(result.costing, megatron, 1, 2) == 0.0
    # the product of the two branches runs whole too (it reads the gathered up projection)
    ran = as_run(result.costing, mixed, 1, 2)
    names = [op.name for op in result.costing.graph.operators]
    assert [names[v] for v, (c, r) in enumerate(zip(mixed, ran, strict=True)) if c != r] == ["layers.0.mlp.mul"]
    gap = runnable_time(result.costing, mixed, 2) - result.costing.step_time(ran)
    assert np.isclose(gap, unpriced_gathers(result.costing, ran, 1, 2))


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


def _megatron_on_two(model: str):
    """(the runnable search's result for ``model`` on 1 x 2, its operators, their batch axes,
    Megatron's hand-written strategy there), Megatron's checked to run as it is split."""
    from stratopt.planning import plan
    from stratopt.planning.batch import batch_axes
    from stratopt.planning.torchplan import as_run

    result = plan(model, 1, 2, simulate=False, expressible="torch")
    costing = result.costing
    megatron = next(b for b in result.baselines if b.name == "megatron-tp2").assignment
    assert as_run(costing, megatron, 1, 2) == megatron
    return result, costing.graph.operators, batch_axes(costing.graph), megatron


def _styled(costing, v: int, kind: str, batches) -> int:
    """Operator ``v``'s first configuration of style ``kind`` on 1 x 2, its weights unsharded and
    its outputs kept."""
    from stratopt.planning.torchplan import _config

    op = costing.graph.operators[v]
    return next(
        c
        for c in range(len(costing.configs[v]))
        if style(op, _config(costing, v, c), batches[op.name], 1, 2) == kind
        and not costing.is_sharded(v, c)
        and not costing.is_recomputed(v, c)
    )


def test_an_operator_no_module_hands_a_shard_runs_whole() -> None:
    """Megatron's attention on 1 x 2 with the q, k and v projections made whole: their outputs are
    whole, so the views, rotary embedding and attention kernel between them and the output
    projection run whole on both devices, though the plan splits them over the heads. ``as_run``
    says so, the runnable estimate prices it so, and the plan the search returns already runs as it
    is split. Made row-parallel instead, they reduce-scatter their partial sums over the heads
    (``output: shard``), and the split attention runs as priced."""
    pytest.importorskip("transformers")
    from stratopt.planning.planner import runnable_time
    from stratopt.planning.torchplan import _config, as_run, find_mesh, module_placements

    result, ops, batches, _ = _megatron_on_two("stratopt.importers.hf:llama")
    costing = result.costing

    def split(v: int, c: int) -> int:
        return int(np.prod([n for a, n in _config(costing, v, c).items() if a not in batches[ops[v].name]]))

    def projections(kind: str) -> tuple[int, ...]:
        a = list(split_heads(result, 2))
        for v, op in enumerate(ops):
            if op.name.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "v_proj"):
                a[v] = _styled(costing, v, kind, batches)
        return tuple(a)

    whole = projections("replicate")
    assert find_mesh(costing, whole, 2) == (1, 2)
    ran = as_run(costing, whole, 1, 2)
    between = [v for v, op in enumerate(ops) if ".self_attn." in op.name and not op.attrs.get("params")]
    assert [v for v in range(len(ops)) if ran[v] != whole[v]] == between
    assert all(split(v, whole[v]) == 2 and split(v, ran[v]) == 1 for v in between)
    assert np.isclose(runnable_time(costing, whole, 2), runnable_time(costing, ran, 2))
    assert not np.isclose(runnable_time(costing, whole, 2), costing.step_time(whole))
    rowwise = projections("rowwise")
    assert as_run(costing, rowwise, 1, 2) == rowwise
    placed = {p.module: p for p in module_placements(costing, rowwise, 1, 2)}
    key = placed["layers.0.self_attn.k_proj"]
    assert (key.input, key.output) == ("replicate", "shard") and key.collectives["forward"] == {"reduce_scatter": 1}
    assert key.collectives["backward"] == {"all_gather": 2}  # its partial sums' gradient, and its whole input's
    best = result.plan.assignment
    assert as_run(costing, best, *find_mesh(costing, best, 2)) == best


def test_the_pairs_dtensor_runs_as_priced() -> None:
    """``handed_on``: on every edge, a split made by an operator without weights reaches its reader
    split the same way, and one read split by an operator without weights was made split: Megatron's
    attention passes every edge, a whole projection feeding split heads does not (a row-parallel one
    does: it reduce-scatters its partial sums), nor does the MLP product reading the whole gate
    beside the split up projection."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.pairs import handed_on
    from stratopt.planning.torchplan import module_placements
    from stratopt.problem import evaluate

    result = plan("stratopt.importers.hf:llama", 1, 2, simulate=False, expressible="torch")
    costing = result.costing
    pairs = handed_on(costing)
    edges = costing.edges

    def refused(a: tuple[int, ...]) -> list[str]:
        names = [op.name for op in costing.graph.operators]
        return [
            f"{names[edges[e][0]]} -> {names[edges[e][1]]}"
            for e in pairs.allowed
            if not pairs.full(e)[a[edges[e][0]], a[edges[e][1]]]
        ]

    heads = split_heads(result, 2)
    assert refused(heads) == [] and refused(result.plan.assignment) == []
    assert refused(mixed_mlp(result)) == ["layers.0.mlp.gate_proj -> layers.0.mlp.mul"]
    a, rowwise = list(heads), list(heads)
    for v, op in enumerate(costing.graph.operators):
        if op.name == "layers.0.self_attn.q_proj":
            rowwise[v] = costing.problem.labels[v].index(f"{op.attrs['k'][0]}2")
            a[v] = costing.problem.labels[v].index("1")  # whole
    assert refused(tuple(rowwise)) == []
    assert refused(tuple(a)) == ["layers.0.self_attn.q_proj -> layers.0.self_attn.view"]
    assert pairs.permits(heads) and not pairs.permits(tuple(a))
    # a product gathers a split of the width from an operator without weights only column-parallel
    # (ColwiseParallel(input_layouts=Shard(-1))): the heads' region may end at a column-parallel
    # output projection as at a row-parallel one, but not at one that runs whole
    gathering, whole = list(heads), list(heads)
    for v, op in enumerate(costing.graph.operators):
        if op.name == "layers.0.self_attn.o_proj":
            gathering[v] = costing.problem.labels[v].index(f"{op.attrs['n'][0]}2")
            whole[v] = costing.problem.labels[v].index("1")
    assert refused(tuple(gathering)) == []
    assert any(r.endswith("-> layers.0.self_attn.o_proj") for r in refused(tuple(whole)))
    placed = {p.module: p for p in module_placements(costing, tuple(gathering), 1, 2)}["layers.0.self_attn.o_proj"]
    assert (placed.tp, placed.input, placed.output) == ("colwise", "shard", "replicate")
    assert placed.collectives == {"forward": {"all_gather": 2}, "backward": {"reduce_scatter": 1}}
    forbidding = costing.problem.forbid({e: pairs.full(e) for e in pairs.allowed})
    assert evaluate(forbidding, heads).objective == evaluate(costing.problem, heads).objective
    assert not evaluate(forbidding, tuple(a)).feasible


def expert_split(result, ways: int, *, sharded: bool | None = None):
    """``result``'s plan with its mixture of experts' operators (dispatch, products, activation,
    combine) split ``ways`` over the experts and nothing else beyond the batch, as before otherwise
    (weights sharded as ``sharded`` says where given)."""
    costing = result.costing
    a = list(result.plan.assignment)
    for v, op in enumerate(costing.graph.operators):
        units = op.attrs.get("units")
        if not units:
            continue
        rows, now = costing.configs[v], costing.configs[v][a[v]]
        shard = costing.is_sharded(v, a[v]) if sharded is None or not op.attrs.get("params") else sharded
        a[v] = next(
            c
            for c, row in enumerate(rows)
            if all(
                n == (ways if x in units else now[i] if x == "c" else 1)
                for i, (x, n) in enumerate(zip(op.axes, row, strict=True))
            )
            and costing.is_sharded(v, c) == shard
            and costing.is_recomputed(v, c) == costing.is_recomputed(v, a[v])
        )
    return tuple(a)


def test_a_mixture_of_experts_splits_over_its_experts_inside_the_tensor_parallel_group() -> None:
    """Mixtral's experts split over a 1 x 2 mesh's two devices: the products take the ``expert``
    style, their module one placement whose collectives are combine's all-reduce forward and the
    tokens' gradient's backward; dispatch, activation and combine keep the expert split as it runs
    (``as_run``), and the pairs refuse a chain whose operators split the experts differently."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.pairs import handed_on
    from stratopt.planning.torchplan import as_run, find_mesh, module_placements
    from stratopt.planning.words import describe_layers

    result = plan("stratopt.importers.hf:mixtral", 1, 2, simulate=False, expressible="torch")
    costing = result.costing
    a = expert_split(result, 2)
    assert find_mesh(costing, a, 2) == (1, 2) and as_run(costing, a, 1, 2) == a
    placed = {p.module: p for p in module_placements(costing, a, 1, 2)}
    experts = placed["layers.0.mlp.experts"]
    assert experts.tp == "expert" and not experts.fsdp
    assert experts.collectives == {"forward": {"all_reduce": 1}, "backward": {"all_reduce": 1}}
    weights = sum(
        costing.held_weights(v, a[v])
        for v, op in enumerate(costing.graph.operators)
        if op.name.startswith("layers.0.mlp.experts.")
    )
    assert experts.held == weights > 0
    pairs = handed_on(costing)
    assert pairs.permits(a)
    words = describe_layers(costing.graph, costing.configs, a, costing.is_sharded)
    assert {r["layer"]: r["how"] for r in words if "experts" in r["layer"]} == {
        "layers.*.mlp.experts.up": "experts",
        "layers.*.mlp.experts.down": "experts",
    }
    names = [op.name for op in costing.graph.operators]
    mixed = list(a)
    for name in ("layers.0.mlp.experts.up", "layers.0.mlp.experts.dispatch"):  # the products split, dispatch not
        v = names.index(name)
        mixed[v] = result.plan.assignment[v]
        assert not pairs.permits(tuple(mixed))


def test_a_module_sharded_in_part_is_searched_again_sharded_whole() -> None:
    """FSDP shards a module whole: an answer whose experts' up product is sharded and whose down
    product is not has no single placement, and ``unsplit`` forbids both products' configurations
    that are not sharded that way (unsharded, or ZeRO-2) for the next search (nothing else)."""
    pytest.importorskip("transformers")
    from stratopt.errors import ModelError
    from stratopt.planning import plan
    from stratopt.planning.again import unsplit
    from stratopt.planning.torchplan import module_placements
    from stratopt.problem import FORBIDDEN

    result = plan("stratopt.importers.hf:mixtral", 1, 4, simulate=False, expressible="torch")
    costing = result.costing
    dp = next(b for b in result.baselines if b.name == "data-parallel")
    base = dataclasses.replace(result, plan=dp)
    a = list(expert_split(base, 1, sharded=False))
    names = [op.name for op in costing.graph.operators]
    up, down = names.index("layers.0.mlp.experts.up"), names.index("layers.0.mlp.experts.down")
    a[up] = expert_split(base, 1, sharded=True)[up]
    with pytest.raises(ModelError, match="take different placements"):
        module_placements(costing, tuple(a), 4, 1)
    tables = [list(costing.node_costs())]
    again = unsplit(costing, tables, tuple(a), 4, 1)
    assert again is not None
    for v in range(len(names)):
        before, after = np.asarray(tables[0][v]), np.asarray(again[0][v])
        if v in (up, down):
            whole = np.array([not costing.is_sharded(v, c) or costing.is_zero2(v, c) for c in range(len(after))])
            assert (after[whole] >= FORBIDDEN).all() and (after[~whole] == before[~whole]).all()
        else:
            assert (after == before).all(), names[v]


def experts_over_groups(result, ways: int):
    """``result``'s data-parallel baseline with its mixture of experts' activation and products split
    ``ways`` over the experts and nothing else (dispatch and combine keep the tokens split): the
    all-to-all form of expert parallelism over the data-parallel groups."""
    costing = result.costing
    a = list(next(b for b in result.baselines if b.name == "data-parallel").assignment)
    for v, op in enumerate(costing.graph.operators):
        units = op.attrs.get("units")
        if not units or op.attrs.get("moe") in ("dispatch", "combine"):
            continue
        a[v] = next(
            c
            for c, row in enumerate(costing.configs[v])
            if all(n == (ways if x in units else 1) for x, n in zip(op.axes, row, strict=True))
            and not costing.is_recomputed(v, c)
            and not costing.is_sharded(v, c)
        )
    return tuple(a)


def test_experts_over_the_data_parallel_groups_trade_tokens_all_to_all() -> None:
    """Mixtral on 4 x 1: the experts' products split 4 ways over the experts while dispatch and
    combine keep the tokens split 4 ways (the all-to-all between them priced on the edges). The
    pairs run it (and no other change of split between a mixture of experts' operators), its
    products take the ``expert-dp`` placement: three all-to-alls forward (the counts, the tokens,
    their results), two backward, no gradient reduction and nothing for FSDP to shard."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.pairs import handed_on
    from stratopt.planning.torchplan import as_run, find_mesh, module_placements

    result = plan("stratopt.importers.hf:mixtral", 1, 4, simulate=False, expressible="torch")
    costing = result.costing
    a = experts_over_groups(result, 4)
    names = [op.name for op in costing.graph.operators]
    dispatch, up = names.index("layers.0.mlp.experts.dispatch"), names.index("layers.0.mlp.experts.up")
    edge = next(e for e, (u, w, _) in enumerate(costing.edges) if (u, w) == (dispatch, up))
    assert float(costing.problem.edge_cost(edge)[a[dispatch], a[up]]) > 0.0  # the all-to-all
    assert find_mesh(costing, a, 4) == (4, 1) and as_run(costing, a, 4, 1) == a
    assert handed_on(costing).permits(a)
    placed = {p.module: p for p in module_placements(costing, a, 4, 1)}["layers.0.mlp.experts"]
    assert placed.tp == "expert-dp" and not placed.fsdp
    assert placed.collectives == {"forward": {"all_to_all": 3}, "backward": {"all_to_all": 2}}
    # micro-batches: each one's all-to-alls, and still no gradient reduction to count once
    stepped = {p.module: p for p in module_placements(costing, a, 4, 1, microbatches=2)}["layers.0.mlp.experts"]
    assert stepped.collectives == {"forward": {"all_to_all": 6}, "backward": {"all_to_all": 4}}
    mixed = list(a)
    mixed[dispatch] = next(  # dispatch with the tokens whole: no module runs that
        c
        for c, row in enumerate(costing.configs[dispatch])
        if row.max() == 1 and not costing.is_recomputed(dispatch, c)
    )
    assert not handed_on(costing).permits(tuple(mixed))


def test_a_module_recomputed_in_part_is_searched_again_recomputed_whole() -> None:
    """Selective checkpointing saves a module's products whole or not at all: an answer that keeps
    the experts' up product and recomputes their down product (block checkpointed) is one no
    checkpointing runs; ``parted`` names both products and ``unsplit`` forbids their keeping
    configurations for the next search (nothing else)."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.again import unsplit
    from stratopt.planning.recompute import checkpointed, parted
    from stratopt.planning.torchplan import find_mesh
    from stratopt.problem import FORBIDDEN

    result = plan("stratopt.importers.hf:mixtral", 1, 2, simulate=False, expressible="torch", recompute="full")
    costing = result.costing
    a = list(result.plan.assignment)
    names = [op.name for op in costing.graph.operators]
    up, down = names.index("layers.0.mlp.experts.up"), names.index("layers.0.mlp.experts.down")
    assert costing.is_recomputed(up, a[up]) and costing.is_recomputed(down, a[down])
    a[up] -= len(costing.configs[up]) // 2  # its keeping twin: the same split
    assert not costing.is_recomputed(up, a[up]) and isinstance(checkpointed(costing, tuple(a)), str)
    assert sorted(parted(costing, tuple(a))) == [up, down]
    tables = [list(costing.node_costs())]
    again = unsplit(costing, tables, tuple(a), *find_mesh(costing, result.plan.assignment, 2))
    assert again is not None
    for v in range(len(names)):
        before, after = np.asarray(tables[0][v]), np.asarray(again[0][v])
        if v in (up, down):
            kept = ~np.asarray(costing.recomputed[v], dtype=bool)
            assert (after[kept] >= FORBIDDEN).all() and (after[~kept] == before[~kept]).all()
        else:
            assert (after == before).all(), names[v]


def test_a_fused_projection_hands_on_its_pieces_only_column_parallel() -> None:
    """GPT-2's ``c_attn`` (query, key and value in one weight, cut into three by ``split``) under
    Megatron's attention on 1 x 2: column-parallel, its split region reaches the output projection
    through the three pieces and the heads (``output: shard``, ``pieces: 3``: the weight laid out
    interleaved, each device its share of every piece) and runs as priced. Row-parallel and
    reduce-scattering instead, each device would get a contiguous share of the fused output, not
    of every piece: no region opens there, the pieces and attention run whole (``as_run``)."""
    pytest.importorskip("transformers")
    from stratopt.planning.torchplan import as_run, module_placements

    result, ops, batches, megatron = _megatron_on_two("stratopt.importers.hf:gpt2")
    costing = result.costing
    placed = {p.module: p for p in module_placements(costing, megatron, 1, 2)}
    fused = placed["h.0.attn.c_attn"]
    assert (fused.tp, fused.output, fused.pieces) == ("colwise", "shard", 3)
    assert fused.to_dict()["pieces"] == 3 and "pieces" not in placed["h.0.attn.c_proj"].to_dict()
    pieces = [v for v, op in enumerate(ops) if op.name.startswith("h.0.attn.split")]
    assert len(pieces) == 3 and all(ops[v].attrs["pieces"] == 3 for v in pieces)
    rowwise = list(megatron)
    v = next(v for v, op in enumerate(ops) if op.name == "h.0.attn.c_attn.addmm")
    rowwise[v] = _styled(costing, v, "rowwise", batches)
    ran = as_run(costing, tuple(rowwise), 1, 2)
    assert all(ran[w] != rowwise[w] for w in pieces)
    placed = {p.module: p for p in module_placements(costing, tuple(rowwise), 1, 2)}
    assert (placed["h.0.attn.c_attn"].output, placed["h.0.attn.c_attn"].pieces) == ("replicate", 1)


def test_heads_split_through_a_view_that_fixes_the_head_count_run_whole() -> None:
    """OPT views its query as ``view(bsz, -1, num_heads, head_dim)``: on a device's share of a
    column-parallel output PyTorch works out the sequence, not the heads, and the attention runs on
    the wrong cut (check-plan: loss 3.4e-2 off, every collective as priced). The importers record
    which dimensions a view leaves to PyTorch; a split region may pass a view between modules only
    where every split dimension is one of them, so Megatron's heads split gathers the projections
    on OPT (the heads run whole), and still runs split on Llama (``view(*shape, -1, head_dim)``)."""
    pytest.importorskip("transformers")
    from stratopt.importers import from_torch
    from stratopt.importers.catalogue import tiny
    from stratopt.planning import plan
    from stratopt.planning.torchplan import as_run, module_placements

    result = plan(from_torch(*tiny("opt", "causal-lm", "OPTModel"), name="opt"), 1, 2, simulate=False)
    views = [op for op in result.costing.graph.operators if op.name.endswith("self_attn.view")]
    assert views and all(op.attrs["inferred"] == [1] for op in views)  # (bsz, -1, heads, dim)
    split = split_heads(result, 2, out="out_proj")
    run = as_run(result.costing, split, 1, 2)
    assert run != split
    placed = {p.module: p for p in module_placements(result.costing, run, 1, 2)}
    query = placed["model.decoder.layers.0.self_attn.q_proj"]
    assert (query.tp, query.output, query.collectives["forward"]) == ("colwise", "replicate", {"all_gather": 1})


def test_a_per_head_position_bias_splits_with_the_heads() -> None:
    """T5 adds its relative position bias (a lookup at constant bucket ids, computed once, read by
    every block) to the attention's scores as the kernel's mask: the importer has the softmax read
    it along the heads, so the samples share it (no batch reaches it: it runs whole on every
    data-parallel device) and a heads split must take the bias's table over its width too. With the
    table column-parallel, its lookup opens a split region like a projection, and everything runs
    as the plan splits it; with the bias whole, the heads cannot split (PyTorch would add a whole
    bias to each device's heads), so the attention runs whole."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.batch import batch_axes
    from stratopt.planning.torchplan import as_run, module_placements

    result = plan("stratopt.importers.hf:t5", 1, 2, simulate=False, expressible="torch")
    costing, ops = result.costing, result.costing.graph.operators
    softmax = next(op for op in ops if op.name.endswith("0.layer.0.SelfAttention.scaled_dot_product_attention.softmax"))
    assert [i.use.dims for i in softmax.inputs][1] == ((), ("d1",), ("d2",), ("d3",))  # broadcast over the batch
    batches = batch_axes(costing.graph)
    assert all(batches[op.name] == [] for op in ops if op.name.endswith(("relative_attention_bias", "unsqueeze")))
    qkv, table = ("q", "k", "v"), "relative_attention_bias"
    split = split_heads(result, 2, out="o", qkv=qkv, inside=".SelfAttention.", styles={table: "colwise"})
    assert as_run(costing, split, 1, 2) == split
    placed = {p.module: p for p in module_placements(costing, split, 1, 2)}
    bias = placed[f"encoder.block.0.layer.0.SelfAttention.{table}"]
    assert (bias.tp, bias.output, bias.collectives["forward"]) == ("colwise", "shard", {})
    for block in ("0", "1"):
        o = placed[f"encoder.block.{block}.layer.0.SelfAttention.o"]
        assert (o.tp, o.input) == ("rowwise", "shard")
    # the table split over the buckets: the bias all-reduced whole, so the attention runs whole
    whole = split_heads(result, 2, out="o", qkv=qkv, inside=".SelfAttention.", styles={table: "vocab"})
    run = as_run(costing, whole, 1, 2)
    assert run != whole
    placed = {p.module: p for p in module_placements(costing, run, 1, 2)}
    assert placed["encoder.block.0.layer.0.SelfAttention.q"].output == "replicate"
    assert placed[f"encoder.block.0.layer.0.SelfAttention.{table}"].output == "replicate"


@pytest.mark.slow  # two processes for 33 s on a 2-core machine
def test_a_column_parallel_product_hands_the_width_split_stream_its_slice() -> None:
    """The 1,024-wide Llama on 1 x 2 under 60% of its free plan's memory: each output projection is
    column-parallel, gathering the heads' split it reads (``input: shard``) and handing the stream,
    split over its width between width norms, its own slice as it is (``output: sequence`` on the
    last dimension: no gather forward); two gloo processes compute one process's loss and gradients
    with every collective as priced."""
    pytest.importorskip("transformers")
    from stratopt.planning import plan
    from stratopt.planning.export import ExportedPlan
    from stratopt.torch.check import check_plans

    entry = "stratopt.torch.models:llama"
    free = plan(entry, 1, 2, simulate=False, expressible="torch")
    tight = ExportedPlan.of(
        plan(entry, 1, 2, simulate=False, expressible="torch", memory_gb=0.6 * free.plan.memory / 1e9)
    )
    projections = {n: e for n, e in tight.modules.items() if n.endswith("self_attn.o_proj")}
    assert len(projections) == 2
    for e in projections.values():
        assert (e["tp"], e["input"], e["output"], e.get("sequence_dim")) == ("colwise", "shard", "sequence", -1)
        assert e["collectives"]["forward"] == {"all_gather": 1}, e  # the input's gather only
    assert any(e["tp"] == "width" for e in tight.modules.values())
    (report,) = check_plans([(entry, tight)], 2, timeout=600)
    assert report.ok, report.to_dict()["checks"]
