"""Recomputation as PyTorch runs it: whole blocks checkpointed (``plan --recompute``), read back from
the strategy, exported, and refused where the search recomputed operators no block covers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stratopt.cli import main
from stratopt.cost import build
from stratopt.errors import ModelError
from stratopt.graph import GraphBuilder
from stratopt.planning import plan
from stratopt.planning.export import ExportedPlan, load_plan, plan_from_dict
from stratopt.planning.recompute import allowed, block_of, blocks, checkpointed, confined, kept, savable, tails
from stratopt.planning.torchplan import find_mesh
from stratopt.problem import FORBIDDEN


def _stack(layers: int = 3):
    """A graph named as an importer names it: ``layers.N.*`` operators, each block a norm, two
    products and a residual add; an embedding before and a head after."""
    b = GraphBuilder("stack")
    x = b.input((64, 32))
    for i in range(layers):
        h = b.layernorm(x, name=f"layers.{i}.norm")
        h = b.fc(h, 64, name=f"layers.{i}.up")
        h = b.fc(h, 32, name=f"layers.{i}.down")
        x = b.elementwise(x, h, name=f"layers.{i}.add")
    b.fc(x, 10, name="head")
    graph = b.build()
    for op in graph.operators:  # the parameters an importer would name
        if any(i.param for i in op.inputs):
            op.attrs["params"] = [f"{op.name}.weight"]
    return graph


def test_block_of_names_the_outermost_repeated_module() -> None:
    assert block_of("layers.3.mlp.up_proj") == "layers.3"
    assert block_of("model.layers.12.self_attn.q_proj.matmul") == "model.layers.12"
    assert block_of("encoder.stages.0.layers.1.conv") == "encoder.stages.0"
    assert block_of("lm_head") is None and block_of("0.weight") is None and block_of("layers.3") is None


def test_blocks_and_their_inner_operators() -> None:
    graph = _stack(3)
    found = blocks(graph)
    assert [b.module for b in found] == ["layers.0", "layers.1", "layers.2"]
    names = [op.name for op in graph.operators]
    for b in found:
        inner = {names[v] for v in b.inner}
        # what only the block reads is freed; its output (the add, read by the next block) is kept
        assert inner == {f"{b.module}.{x}" for x in ("norm", "up", "down")}, inner
        assert all(names[v].startswith(b.module + ".") for v in b.ops)


def test_allowed_forces_the_blocks_and_forbids_the_rest() -> None:
    graph = _stack(3)
    costing = build(graph, 4, profile="default", machine="h100", recompute=True)
    found = blocks(graph)
    mask = allowed(costing, ["layers.1"], found)
    inner = set(found[1].inner)
    for v, m in enumerate(mask):
        again = np.asarray(costing.recomputed[v], dtype=bool)
        assert m.any(), graph.operators[v].name
        assert (m == again).all() if v in inner else (m == ~again).all()
    # read back: any strategy the mask allows recomputes exactly that block
    pick = tuple(int(np.flatnonzero(m)[0]) for m in mask)
    assert checkpointed(costing, pick) == ["layers.1"]
    assert checkpointed(costing, tuple(int(np.flatnonzero(m)[0]) for m in allowed(costing, [], found))) == []


def _keeping_but(costing):
    """The strategy that keeps every output (each operator's first such configuration), and a
    function giving it with the operators named recomputing instead."""
    base = tuple(int(np.flatnonzero(~np.asarray(r, dtype=bool))[0]) for r in costing.recomputed)
    names = [op.name for op in costing.graph.operators]

    def recomputing(*ops: str) -> tuple[int, ...]:
        a = list(base)
        for name in ops:
            v = names.index(name)
            a[v] = int(np.flatnonzero(np.asarray(costing.recomputed[v], dtype=bool))[0])
        return tuple(a)

    return base, recomputing


def test_checkpointed_refuses_recomputation_no_block_runs() -> None:
    graph = _stack(2)
    costing = build(graph, 2, profile="default", machine="h100", recompute=True)
    _, recomputing = _keeping_but(costing)
    assert "outside every block" in checkpointed(costing, recomputing("head"))
    assert "keeps its outputs in block layers.0" in checkpointed(costing, recomputing("layers.0.up"))
    assert checkpointed(costing, recomputing("layers.0.norm", "layers.0.up", "layers.0.down")) == ["layers.0"]
    assert isinstance(find_mesh(costing, recomputing("layers.0.up"), 2), str)


def test_selective_keeps_a_modules_products_and_recomputes_the_rest() -> None:
    """Checkpointed selectively, a block's products may keep their outputs (each module whole) and
    every other inner operator recomputes; read back, the kept modules are what the runtime saves."""
    graph = _stack(2)
    costing = build(graph, 2, profile="default", machine="h100", recompute=True)
    found = blocks(graph)
    names = [op.name for op in graph.operators]
    mask = allowed(costing, ["layers.0"], found, selective=True)
    whole = allowed(costing, ["layers.0"], found)
    for v, m in enumerate(mask):
        again = np.asarray(costing.recomputed[v], dtype=bool)
        if v in found[0].inner and savable(graph.operators[v]):  # the two products: either way
            assert m.all() and not (whole[v] == m).all(), names[v]
        else:  # the norm recomputes; the rest as without selection
            assert (m == whole[v]).all(), names[v]
            assert (m == again).all() == (v in found[0].inner), names[v]
    assert not savable(graph.operators[names.index("layers.0.norm")])
    base, recomputing = _keeping_but(costing)

    a = recomputing("layers.0.norm", "layers.0.down")  # up keeps its outputs
    assert checkpointed(costing, a) == ["layers.0"]
    assert kept(costing, a) == (["layers.0.up"], [])
    assert not isinstance(find_mesh(costing, a, 2), str)
    assert kept(costing, recomputing("layers.0.norm", "layers.0.up", "layers.0.down")) == ([], [])
    assert kept(costing, base) == ([], [])
    # two operators of one module (shared weights) cannot differ: PyTorch saves a module whole
    graph.operators[names.index("layers.0.down")].attrs["params"] = ["layers.0.up.weight"]
    assert "keeps part of its outputs" in checkpointed(costing, a)


def test_a_selective_plan_exports_what_it_keeps_and_loads_back(llama_graph, tmp_path) -> None:
    fastest = plan(llama_graph, 1, 2, simulate=False, expressible="torch", recompute="none")
    limit = 0.4 * float(fastest.plan.memory) / 1e9
    result = plan(llama_graph, 1, 2, simulate=False, expressible="torch", memory_gb=limit)
    assert result.plan.fits and result.plan.memory <= limit * 1e9
    exported = ExportedPlan.of(result)
    assert exported.selective and exported.recompute
    assert all(any(n.startswith(b + ".") for b in exported.recompute) for n in exported.keep)
    assert set(exported.keep) <= set(exported.modules)
    path = tmp_path / "plan.json"
    exported.write(path)
    back = load_plan(path)
    assert (back.keep, back.keep_attention) == (exported.keep, exported.keep_attention)
    # recomputing only where memory binds: faster than every block recomputed whole at the same limit
    whole = plan(llama_graph, 1, 2, simulate=False, expressible="torch", recompute="full", memory_gb=limit)
    assert whole.plan.estimate is None or result.plan.estimate < whole.plan.estimate
    data = exported.to_dict()
    with pytest.raises(ModelError, match="in no block the plan recomputes"):
        plan_from_dict(data | {"keep": ["embed_tokens"]})
    with pytest.raises(ModelError, match="'keep_attention' names 'norm'"):
        plan_from_dict(data | {"keep_attention": ["norm"]})
    with pytest.raises(ModelError, match="'keep' must be a list of module names"):
        plan_from_dict(data | {"keep": "layers.0.mlp"})
    assert not plan_from_dict({k: v for k, v in data.items() if not k.startswith("keep")}).selective


def test_torch_fx_operators_carry_the_module_that_ran_them() -> None:
    torch = pytest.importorskip("torch")
    from torch import nn

    from stratopt.importers import from_torch

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.up, self.down = nn.LayerNorm(32), nn.Linear(32, 64), nn.Linear(64, 32)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(self.norm(x))) * 2)

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers, self.head = nn.ModuleList([Block(), Block()]), nn.Linear(32, 4)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    graph = from_torch(Stack(), (torch.randn(8, 32),))
    assert any("_" in op.name for op in graph.operators)  # fx's own names, not the modules'
    found = blocks(graph)
    assert [b.module for b in found] == ["layers.0", "layers.1"]
    names = [op.name for op in graph.operators]
    # the residual add leaves the block (kept); the norm and both products are inner
    assert all(len(b.inner) == 3 and len(b.ops) == 4 for b in found), [[names[v] for v in b.ops] for b in found]


@pytest.fixture(scope="module")
def llama_graph():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from stratopt.instances import load_instance

    return load_instance("stratopt.importers.hf:llama")


def test_full_recomputes_every_block_and_exports_them(llama_graph, tmp_path) -> None:
    result = plan(llama_graph, 1, 4, simulate=False, expressible="torch", recompute="full")
    costing, a = result.costing, result.plan.assignment
    assert a is not None and result.plan.fits
    found = blocks(costing.graph)
    assert len(found) == 2
    assert checkpointed(costing, a) == [b.module for b in found]
    for b in found:
        assert all(costing.is_recomputed(v, a[v]) for v in b.inner)
    exported = ExportedPlan.of(result)
    assert exported.recompute == tuple(b.module for b in found)
    inside = [n for n in exported.modules if block_of(n) in exported.recompute]
    assert inside and all("recompute" in exported.modules[n]["collectives"] for n in inside)
    outside = [n for n in exported.modules if block_of(n) not in exported.recompute]
    assert all("recompute" not in exported.modules[n]["collectives"] for n in outside)
    path = tmp_path / "plan.json"
    exported.write(path)
    assert load_plan(path).recompute == exported.recompute
    # recomputation costs time: the same search without it is faster and holds more
    none = plan(llama_graph, 1, 4, simulate=False, expressible="torch", recompute="none")
    assert none.plan.estimate < result.plan.estimate and none.plan.memory > result.plan.memory


def test_auto_recomputes_whole_blocks_where_memory_binds(llama_graph) -> None:
    free = plan(llama_graph, 1, 4, simulate=False, expressible="torch", recompute="none")
    limit = 0.8 * free.plan.memory / 1e9
    fastest_fsdp = plan(llama_graph, 1, 4, simulate=False, expressible="torch", recompute="none", memory_gb=limit)
    auto = plan(llama_graph, 1, 4, simulate=False, expressible="torch", memory_gb=limit)
    a = auto.plan.assignment
    assert a is not None and auto.plan.fits and auto.plan.memory <= limit * 1e9
    assert not isinstance(find_mesh(auto.costing, a, 4), str)  # its recomputation runs
    if fastest_fsdp.plan.assignment is not None:
        assert auto.plan.estimate <= fastest_fsdp.plan.estimate + 1e-6
    assert auto.bound is None or auto.bound <= float(auto.plan.objective) + 1e-6


def test_none_never_recomputes_even_where_memory_binds() -> None:
    result = plan("gpt", 1, 4, simulate=False, recompute="none", memory_gb=1.0)
    if result.plan.assignment is not None:
        assert not any(result.costing.is_recomputed(v, c) for v, c in enumerate(result.plan.assignment))
    assert not result.costing.recomputed


def test_full_without_blocks_and_bad_modes_are_one_line_errors(capsys) -> None:
    with pytest.raises(ModelError, match="no block to recompute"):
        plan("alexnet", 1, 2, simulate=False, recompute="full")
    with pytest.raises(ModelError, match="recompute must be one of auto, full, none"):
        plan("alexnet", 1, 2, simulate=False, recompute="some")
    assert main(["plan", "alexnet", "--nodes", "1", "--gpus-per-node", "2", "--recompute", "full"]) == 2
    err = capsys.readouterr().err
    assert "no block to recompute" in err and len(err.strip().splitlines()) == 1


def test_a_version_2_plan_loads_and_a_bad_recompute_list_is_refused(llama_graph) -> None:
    data = ExportedPlan.of(plan(llama_graph, 1, 2, simulate=False, expressible="torch")).to_dict()
    old = {k: v for k, v in data.items() if k != "recompute"} | {"version": 2}
    assert plan_from_dict(old).recompute == ()
    with pytest.raises(ModelError, match="'recompute' must be a list of module names"):
        plan_from_dict(data | {"recompute": "layers.0"})
    with pytest.raises(ModelError, match="plan version 4"):
        plan_from_dict(data | {"version": 4})


def test_the_least_memory_counts_only_configurations_not_forbidden() -> None:
    """A limit only forbidden configurations could meet is seen at once as infeasible (the least
    memory is taken over what is allowed), not searched for."""
    from stratopt.planning.memory import under_memory
    from stratopt.problem import FORBIDDEN

    costing = build(_stack(2), 2, profile="default", machine="h100")
    base = [np.asarray(n, dtype=np.float64) for n in costing.node_costs()]
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    least = [int(np.argmin(m)) for m in memory]
    costs = [np.where(np.arange(len(b)) == k, float(FORBIDDEN), b) for b, k in zip(base, least, strict=True)]
    floor = sum(float(np.sort(m)[1]) for m in memory)  # the least over what is allowed
    limit = (sum(float(m.min()) for m in memory) + floor) / 2
    found, status, bound = under_memory(costing.problem.replace(node_costs=costs), costs, memory, limit, 60, print)
    assert found is None and bound is None and status.startswith("infeasible"), status


def test_meshes_skipped_by_their_bound_lose_no_objective(llama_graph) -> None:
    """The runnable search skips a mesh whose unconstrained optimum is no better than what it found;
    the best objective found is the same as searching every mesh in full."""
    from stratopt.machine import get_machine
    from stratopt.planning.cluster import price
    from stratopt.planning.memory import under_memory
    from stratopt.planning.planner import _torch_search
    from stratopt.planning.torchplan import mesh_shapes, restricted_costs
    from stratopt.problem import evaluate

    costing = price(llama_graph, 4, get_machine("h100"))
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    free = plan(llama_graph, 1, 4, simulate=False, expressible="torch", recompute="none")
    limit = 0.7 * float(free.plan.memory)
    said: list[str] = []
    found, _, bound = _torch_search(costing, 4, limit, 60, said.append)
    assert found is not None and bound is not None
    objective = float(evaluate(costing.problem, found).objective)
    every = []
    for dp, tp in mesh_shapes(4, 4):
        costs = restricted_costs(costing, dp, tp)
        if costs is not None:
            a, _, _ = under_memory(costing.problem.replace(node_costs=costs), costs, memory, limit, 60, lambda _m: None)
            if a is not None:
                every.append(float(evaluate(costing.problem, a).objective))
    # the skipped meshes could not have done better; what is picked among meshes is by step time
    assert min(every) >= bound - 1e-6
    assert objective <= min(every) * 1.05
    assert any("no better than" in line for line in said) or len(every) <= 1


def test_the_check_reports_a_kept_product_run_again() -> None:
    """check-plan's recomputed products: a kept module runs none again, a recomputed one as many as
    its forward ran, the block's attention kernel as the plan keeps it; any other count fails."""
    from stratopt.torch.check import _product_rows

    plan_ = ExportedPlan("m", {}, None, None, None, {}, recompute=("layers.0",), keep=("layers.0.up",))
    good = {
        "layers.0.up": {"forward": {"product": 1}, "recompute": {}},
        "layers.0.down": {"forward": {"product": 1}, "recompute": {"product": 1}},
        "layers.0.attn": {"forward": {"attention": 1}, "recompute": {"attention": 1}},
        "head": {"forward": {"product": 1}, "recompute": {}},  # outside every checkpointed block
    }
    rows = _product_rows(plan_, good)
    assert [(r["what"], r["planned"], r["counted"]) for r in rows] == [
        ("layers.0.down", 1, 1),
        ("layers.0.up", 0, 0),
        ("layers.0", 1, 1),
    ]
    bad = good | {"layers.0.up": {"forward": {"product": 1}, "recompute": {"product": 1}}}
    assert [r["what"] for r in _product_rows(plan_, bad) if r["planned"] != r["counted"]] == ["layers.0.up"]
    kept_attention = dataclasses.replace(plan_, keep_attention=("layers.0",))
    assert [r["what"] for r in _product_rows(kept_attention, good) if r["planned"] != r["counted"]] == ["layers.0"]
    # a block's last product: the re-run stops before it, so it runs none again
    stops = dataclasses.replace(plan_, modules={"layers.0.down": {"tp": "replicate", "fsdp": False, "rerun": False}})
    assert [r["what"] for r in _product_rows(stops, good) if r["planned"] != r["counted"]] == ["layers.0.down"]
    ran = good | {"layers.0.down": {"forward": {"product": 1}, "recompute": {}}}
    assert all(r["planned"] == r["counted"] for r in _product_rows(stops, ran))


def test_a_plan_on_paper_keeps_what_leaves_a_block(llama_graph) -> None:
    """Recomputing the residual stream between blocks would chain the recomputation through every
    block before it; the plan on paper recomputes inside blocks only, and still fits."""
    free = plan(llama_graph, 1, 4, simulate=False, recompute="none")
    limit = 0.6 * free.plan.memory / 1e9
    result = plan(llama_graph, 1, 4, simulate=False, memory_gb=limit)
    a, costing = result.plan.assignment, result.costing
    assert a is not None and result.plan.fits and costing.recomputed
    inner = {v for b in blocks(llama_graph) for v in b.inner}
    again = {v for v, c in enumerate(a) if costing.is_recomputed(v, c)}
    assert again and again <= inner
    # every recomputing configuration outside the blocks is forbidden, every other one untouched
    # (a block's last product recomputes as it keeps: the re-run stops before it)
    raw = build(llama_graph, 4, profile="default", machine="h100", cutoff=1, shard_weights=True, recompute=True)
    tail = tails(llama_graph, blocks(llama_graph, owned=False))
    assert tail
    for v, (mine, theirs) in enumerate(zip(costing.node_costs(), raw.node_costs(), strict=True)):
        shut = np.asarray(raw.recomputed[v], dtype=bool) & (v not in inner)
        assert np.all(mine[shut] >= FORBIDDEN)
        if v in tail:
            half = len(theirs) // 2
            assert np.array_equal(mine, np.concatenate([theirs[:half], theirs[:half]]))
        else:
            assert np.array_equal(mine[~shut], theirs[~shut])


def test_a_blocks_last_product_is_not_run_again() -> None:
    """PyTorch's re-run of a checkpointed block stops once the last tensor it saved is rebuilt: the
    last product (which saves its input before it computes) where only additions and reshapes follow
    it. Its recomputing configurations cost what keeping does and hold less; an earlier product's
    cost more. A block ending in a norm has no such tail."""
    graph = _stack()
    tail = tails(graph, blocks(graph))
    assert sorted(graph.operators[v].name for v in tail) == [f"layers.{i}.down" for i in range(3)]
    costing = confined(build(graph, 4, profile="default", machine="h100", recompute=True))
    names = [op.name for op in graph.operators]
    down, up = names.index("layers.1.down"), names.index("layers.1.up")
    for v, free in ((down, True), (up, False)):
        node, memory = costing.node_costs()[v], costing.vertex_costs[v].memory
        half = len(node) // 2
        assert np.array_equal(node[half:], node[:half]) is free
        assert np.all(memory[half:] <= memory[:half]) and np.any(memory[half:] < memory[:half])
    assert np.array_equal(costing.vertex_costs[down].compute[half:], costing.vertex_costs[down].compute[:half])

    b = GraphBuilder("post-norm")
    x = b.input((64, 32))
    for i in range(2):
        h = b.fc(b.fc(x, 64, name=f"layers.{i}.up"), 32, name=f"layers.{i}.down")
        x = b.layernorm(b.elementwise(x, h, name=f"layers.{i}.add"), name=f"layers.{i}.norm")
    b.fc(x, 10, name="head")
    post = b.build()
    for op in post.operators:
        if any(i.param for i in op.inputs):
            op.attrs["params"] = [f"{op.name}.weight"]
    assert blocks(post) and not tails(post, blocks(post))


def test_a_graph_without_blocks_keeps_recomputation_per_operator() -> None:
    b = GraphBuilder("chain")
    x = b.input((64, 32))
    for i in range(3):
        x = b.fc(x, 32, name=f"fc{i}")
    costing = build(b.build(), 4, profile="default", machine="h100", recompute=True)
    assert confined(costing) is costing


def test_a_decoder_shape_is_confined_by_its_layer_names() -> None:
    """A decoder shape (``gpt:``) names its layers but not its parameters: its blocks count for the
    plan on paper all the same, its residual stream between layers kept."""
    from stratopt.instances import load_instance
    from stratopt.planning.cluster import cluster, price

    graph = load_instance("gpt:layers=2,d_model=256,heads=4,vocab=1000,seq=64,batch=4")
    assert not blocks(graph) and len(blocks(graph, owned=False)) == 2
    where = cluster(1, 4, "h100")
    costing = price(graph, where.devices, where.machine, recompute=True)
    inner = {v for b in blocks(graph, owned=False) for v in b.inner}
    for v, node in enumerate(costing.node_costs()):
        again = np.asarray(costing.recomputed[v], dtype=bool)
        assert np.all(node[again] < FORBIDDEN) == (v in inner), graph.operators[v].name


def test_a_relaxed_answer_is_moved_into_the_blocks_and_fitted(llama_graph) -> None:
    """``_repaired`` moves a strategy into what checkpointed blocks allow by twins only (the same
    split, outputs kept or recomputed), then recomputes kept outputs until it fits: every operator
    ends in the mask, within the limit, each change a twin; a limit nothing meets gives None. And a
    plan that takes such an answer (``the relaxation's answer runs as it is``) runs as priced."""
    from stratopt.planning.cluster import price
    from stratopt.planning.memory import strategy_memory
    from stratopt.planning.planner import _repaired

    free = plan(llama_graph, 1, 2, simulate=False, expressible="torch", recompute="none")
    costing = price(llama_graph, 2, free.cluster.machine, recompute=True)
    kept_all = free.plan.assignment  # the first half of the configurations keeps: the same indices
    assert not any(costing.is_recomputed(v, c) for v, c in enumerate(kept_all))
    found = blocks(llama_graph)
    mask = allowed(costing, [b.module for b in found], found, selective=True)
    assert not all(m[c] for m, c in zip(mask, kept_all, strict=True))  # the blocks' other operators recompute
    changed = []
    for share in (1.0, 0.7):  # moved into the mask alone it needs 71% of the memory; at 70%, more recomputes
        limit = share * strategy_memory(costing, kept_all)
        fixed = _repaired(costing, kept_all, mask, limit)
        assert fixed is not None, share
        assert all(m[c] for m, c in zip(mask, fixed, strict=True)) and strategy_memory(costing, fixed) <= limit
        for v, (c, d) in enumerate(zip(kept_all, fixed, strict=True)):
            assert c == d or (d - c == len(costing.configs[v]) // 2 and costing.is_recomputed(v, d)), v
        changed.append(sum(c != d for c, d in zip(kept_all, fixed, strict=True)))
    assert changed[1] > changed[0]
    assert _repaired(costing, kept_all, mask, 0.0) is None
    tight = plan(llama_graph, 1, 2, simulate=False, expressible="torch", memory_gb=0.35 * free.plan.memory / 1e9)
    assert tight.plan.fits and not isinstance(find_mesh(tight.costing, tight.plan.assignment, 2), str)
    assert not isinstance(checkpointed(tight.costing, tight.plan.assignment), str)
