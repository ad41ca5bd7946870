"""Third-party model code: Hugging Face models import with every product priced, on the CPU and on
the meta device; mixture-of-experts and grouped-query attention map to what they compute; repeated
blocks are priced once; entry points reach the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from stratopt.cli import main  # noqa: E402
from stratopt.cost import build  # noqa: E402
from stratopt.cost.default import DefaultProfile  # noqa: E402
from stratopt.errors import ModelError  # noqa: E402
from stratopt.graph import GraphBuilder  # noqa: E402
from stratopt.importers import flops, from_torch, hf  # noqa: E402
from stratopt.importers.pytorch import reference_flops  # noqa: E402
from stratopt.instances import load_entry_point  # noqa: E402
from stratopt.machine import get_machine  # noqa: E402
from stratopt.problem import evaluate  # noqa: E402
from stratopt.solvers import solve_auto  # noqa: E402


def signature(graph):
    return [(op.op, op.sizes, op.pointwise, len(op.inputs)) for op in graph.operators]


@pytest.mark.parametrize("name", sorted(hf.SMALL))
def test_every_product_is_priced(name: str) -> None:
    """Each family imports with no unmapped operator (a warning fails the test: pytest turns warnings
    into errors), and the dense products the graph prices carry PyTorch's own count of the forward
    flops (products, convolutions, attention, grouped expert products) to within 0.1%."""
    model, inputs = hf.SMALL[name]()
    graph = from_torch(model, inputs, name=name)
    assert flops(graph) == pytest.approx(reference_flops(model, inputs), rel=1e-3)


@pytest.mark.parametrize("name", ["llama", "resnet"])
def test_imported_models_price_and_solve(name: str) -> None:
    """An imported decoder and an imported CNN price and solve exactly; the answer re-evaluates."""
    model, inputs = hf.SMALL[name](layers=1) if name == "llama" else hf.SMALL[name]()
    costing = build(from_torch(model, inputs), 4)
    result = solve_auto(costing.problem)
    assert result.status.value == "optimal"
    assert evaluate(costing.problem, result.assignment).objective == pytest.approx(result.objective)


def test_meta_device_imports_the_same_graph() -> None:
    """A model built on the meta device (no memory for weights, no values) imports to the same
    operators, shapes and pointwise counts as the same model on the CPU, though transformers runs
    another path there (an explicit causal mask, and keys and values repeated per query head, which
    the importer folds back into grouped-query attention)."""
    on_cpu = from_torch(*hf.llama(layers=2), name="m")
    on_meta = from_torch(*hf.llama(layers=2, device="meta"), name="m")
    assert signature(on_meta) == signature(on_cpu)
    assert not any(p.device.type != "meta" for p in hf.llama(layers=1, device="meta")[0].parameters())


def test_grouped_query_attention_shares_keys_across_the_group() -> None:
    """With 8 query heads over 2 key/value heads, the scores are one product over (kv head, group,
    query, key) with the 16-wide head dimension reduced: no copy of k or v is priced."""
    graph = from_torch(*hf.llama(layers=1, hidden=128, heads=8, kv_heads=2, batch=2, seq=16), name="gqa")
    scores = [op for op in graph.operators if op.name.endswith("scores")]
    assert len(scores) == 1
    op = scores[0]
    assert op.op == "gemm" and math.prod(op.sizes) == 2 * 8 * 16 * 16 * 16
    assert [op.size_of(a) for a in op.attrs["k"]] == [16]
    assert [op.size_of(a) for a in op.attrs["batch"]] == [2, 2]  # batch and kv heads; the group is on q's side


def test_sdpa_is_fused_attention() -> None:
    """scaled_dot_product_attention imports as one fused kernel: its scores and softmax carry their
    role and hold no memory, so a decoder's kept activations do not grow with the sequence squared."""
    graph = from_torch(*hf.llama(layers=1, hidden=128, heads=8, kv_heads=2, batch=2, seq=16), name="gqa")
    costing = build(graph, 1)
    roles = {op.attrs.get("fused_attention"): vc for op, vc in zip(graph.operators, costing.vertex_costs, strict=True)}
    assert {"scores", "softmax", "context"} <= set(roles)
    assert float(roles["scores"].memory[0]) == float(roles["softmax"].memory[0]) == 0.0
    assert float(roles["context"].memory[0]) > 0.0  # attention's output is kept for the backward pass


def test_mixture_of_experts_layer_and_its_all_to_all() -> None:
    """Mixtral's experts become dispatch, expert products batched over the expert axis, and combine;
    changing the routed tokens from a slot split to an expert split costs exactly the all-to-all's
    bytes: each device keeps 1/p of its slots and receives the rest."""
    graph = from_torch(*hf.mixtral(layers=1, experts=4, top_k=2, batch=2, seq=32), name="moe")
    names = {op.name: op for op in graph.operators}
    up = names["layers.0.mlp.experts.up"]
    assert up.attrs["batch"] == ["e"] and up.size_of("e") == 4
    p, tokens, top_k, experts, hidden = 4, 64, 2, 4, 128
    slots = tokens * top_k // experts
    g = GraphBuilder("moe")
    g.moe(g.input((tokens, hidden)), experts, top_k, 256, name="m")
    ops = g.build().operators
    dispatch, expert_up = ops[0], ops[1]
    assert (dispatch.name, expert_up.name) == ("m.dispatch", "m.up")
    profile = DefaultProfile(get_machine("h100"))
    by_slot = np.ones((1, len(dispatch.axes)), dtype=np.int64)
    by_slot[0, dispatch.axis_index("c")] = p
    by_expert = np.ones((1, len(expert_up.axes)), dtype=np.int64)
    by_expert[0, expert_up.axis_index("e")] = p
    cost = profile.edge(dispatch, dispatch.outputs[0], by_slot, expert_up, expert_up.inputs[0].use, by_expert)
    words = experts * slots * hidden / p * (1 - 1 / p)
    expected = 2 * profile.links.transfer(np.array([words * profile.dtype_bytes]), np.array([p])) * 1e6
    assert cost[0, 0] == pytest.approx(float(expected[0]))
    same = profile.edge(dispatch, dispatch.outputs[0], by_slot, dispatch, dispatch.outputs[0], by_slot)
    assert same[0, 0] == 0


class _Delegate:
    """The default profile behind an object that is not one: pricing without shared tables."""

    def __init__(self) -> None:
        self.inner = DefaultProfile(get_machine("h100"))
        self.name, self.units, self.machine = self.inner.name, self.inner.units, self.inner.machine
        self.overlap = self.inner.overlap  # communication hidden under the compute, as the inner profile hides it

    def vertex(self, op, configs):
        return self.inner.vertex(op, configs)

    def edge(self, *args, **kwargs):
        return self.inner.edge(*args, **kwargs)

    def describe(self) -> str:
        return self.inner.describe()


def test_repeated_blocks_are_priced_once_and_price_the_same() -> None:
    """Four identical decoder layers share one pricing: the distinct operators are far fewer than
    the operators, the edge tables are shared objects, and the problem equals the one priced
    operator by operator."""
    graph = from_torch(*hf.llama(layers=4), name="four")
    shared = build(graph, 8)
    each = build(graph, 8, profile=_Delegate())
    assert shared.stats["priced_operators"] < len(graph) / 2
    assert each.stats["priced_operators"] == len(graph)
    assert np.array_equal(shared.problem.node_flat, each.problem.node_flat)
    assert np.array_equal(shared.problem.edge_flat, each.problem.edge_flat)
    assert "distinct operators" in shared.summary()


def test_entry_points(tmp_path, capsys) -> None:
    """'module:function' and 'file.py:function' reach every command that takes a network; a missing
    module, attribute or file, a failing function and a wrong return are one-line errors, exit 2."""
    assert main(["import", "stratopt.importers.hf:bert", "-o", str(tmp_path / "g.json")]) == 0
    assert "bert: " in capsys.readouterr().out
    script = tmp_path / "mine.py"
    script.write_text(
        "import torch\n"
        "def model():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()), (torch.randn(8, 16),)\n"
        "def broken():\n"
        "    raise RuntimeError('no GPU here')\n"
        "def wrong():\n"
        "    return 42\n"
        "def sized(width=16, deep=False, act='relu'):\n"
        "    act = torch.nn.ReLU if act == 'relu' else getattr(torch.nn, act)\n"
        "    pairs = [(torch.nn.Linear(width if i else 16, width), act()) for i in range(2 if deep else 1)]\n"
        "    return torch.nn.Sequential(*(m for pair in pairs for m in pair)), (torch.randn(8, 16),)\n"
    )
    assert main(["solve", f"{script}:model", "--procs", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "optimal"
    # keyword arguments after commas: integers, booleans and words, as the function takes them
    sized = load_entry_point(f"{script}:sized,width=24,deep=true,act=GELU")
    assert [op.sizes for op in sized.operators if op.op == "gemm"] == [(8, 24, 16), (8, 24, 24)]
    assert [op.sizes for op in load_entry_point(f"{script}:sized").operators if op.op == "gemm"] == [(8, 16, 16)]
    assert len(load_entry_point("stratopt.importers.hf:llama,layers=3").operators) > len(
        load_entry_point("stratopt.importers.hf:llama").operators
    )
    for bad, says in [
        ("no_such_module_here:f", "cannot import no_such_module_here"),
        ("stratopt.importers.hf:nothing", "has no attribute 'nothing'"),
        (f"{tmp_path}/absent.py:f", "no such file"),
        (f"{script}:broken", "RuntimeError: no GPU here"),
        (f"{script}:wrong", "wrong() returned int"),
        (f"{script}:sized,depth=2", "unexpected keyword argument 'depth'"),
    ]:
        assert main(["import", bad]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and says in err, (bad, err)
    with pytest.raises(ModelError, match="not an entry point"):
        load_entry_point("no colon here")


def _config(folder, cls, **fields):
    """A configuration as ``save_pretrained`` writes it (a folder holding config.json)."""
    import transformers

    getattr(transformers, cls)(**fields).save_pretrained(str(folder))
    return folder


def test_a_config_folder_plans_like_its_model(tmp_path, capsys) -> None:
    """``hf:FOLDER,seq=S,batch=B``: the model its configuration's architectures field names, built on
    the meta device with B sequences of S tokens, imports to the graph the model itself gives, and
    plan prints a plan that fits (exit 0)."""
    llama = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=256)
    folder = _config(
        tmp_path / "tiny-llama", "LlamaConfig", num_key_value_heads=2, architectures=["LlamaForCausalLM"], **llama
    )
    graph = load_entry_point(f"hf:{folder},seq=32,batch=4")
    import transformers

    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_key_value_heads=2, use_cache=False, **llama))
    ids = torch.zeros((4, 32), dtype=torch.long)
    assert signature(graph) == signature(from_torch(model.eval(), (ids,), name="direct"))
    assert graph.name == "tiny-llama" and any("lm_head.weight" in op.attrs.get("params", ()) for op in graph.operators)
    args = ["plan", f"hf:{folder / 'config.json'},seq=32,batch=8", "--nodes", "1", "--gpus-per-node", "4"]
    assert main([*args, "--no-simulate", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["fits"] is True


def test_config_vision_and_seq2seq(tmp_path) -> None:
    """A vision configuration reads images of its own size (or ``image=``); an encoder-decoder's
    model reads the decoder's tokens too."""
    vit = _config(tmp_path / "vit", "ViTConfig", hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                  intermediate_size=128, image_size=32, patch_size=8, architectures=["ViTForImageClassification"])  # fmt: skip
    model, (pixels,) = hf.from_config(f"hf:{vit},batch=2")
    assert type(model).__name__ == "ViTForImageClassification"
    assert tuple(pixels.shape) == (2, 3, 32, 32) and pixels.is_meta
    assert tuple(hf.from_config(f"hf:{vit},image=64")[1][0].shape) == (8, 3, 64, 64)
    t5 = _config(tmp_path / "t5", "T5Config", d_model=64, d_ff=128, num_layers=1, num_heads=4, d_kv=16, vocab_size=128)
    graph = load_entry_point(f"hf:{t5},seq=16,batch=2")  # no architectures field: the model type's base model
    assert sum(op.op == "gemm" for op in graph.operators) > 4


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("hf:{tmp}/absent,seq=8", "no such file or folder"),
        ("hf:{tmp}/empty", "no config.json in"),
        ("hf:{tmp}/broken", "transformers cannot read"),
        ("hf:{tmp}/unknown", "does not know the architecture 'LlamaForTimeTravel'"),
        ("hf:{tmp}/unknown,seq=0", "'seq=0' is not one of seq=N, batch=N, image=N"),
        ("hf:{tmp}/unknown,depth=3", "'depth=3' is not one of"),
    ],
)
def test_bad_configs_are_one_line(tmp_path, capsys, spec, message) -> None:
    """A path that is not there, a folder without config.json, a file transformers cannot read, an
    architecture it does not know or a bad size: one line naming it, exit 2."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "llama", "hidden_size":')
    (tmp_path / "unknown").mkdir()
    (tmp_path / "unknown" / "config.json").write_text(
        json.dumps({"model_type": "llama", "architectures": ["LlamaForTimeTravel"], "vocab_size": 100})
    )
    text = spec.format(tmp=tmp_path)
    with pytest.raises(ModelError, match=message.replace("(", r"\(")):
        load_entry_point(text)
    assert main(["import", text]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.split("'")[0].strip() in err[0]


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "resnet"])
def test_every_weight_is_priced_and_named(name: str) -> None:
    """The graph holds every parameter the model has, each under its own name: linear layers' and
    GPT-2's Conv1D biases (the term ``addmm`` adds), norms' scales and shifts (a batch norm's per
    channel, not over the batch as PaSE prices them), learned position and token-type tables read
    at constant ids (lookups the samples share, once folded into constants); a tied weight counts once."""
    model, inputs = hf.SMALL[name]()
    graph = from_torch(model, inputs, name=name)
    params = {n: p.numel() for n, p in model.named_parameters()}
    held = sum(i.use.size for op in graph.operators if not op.attrs.get("tied") for i in op.inputs if i.param)
    assert held == sum(params.values())
    assert {n for op in graph.operators for n in op.attrs.get("params") or ()} == set(params)
    biased = any(n.endswith(".bias") and len(model.get_parameter(n).shape) == 1 for n in params)
    assert biased == (name != "llama")  # Llama's products have none (ResNet's are its batch norms' shifts)


@pytest.mark.parametrize("branch", [False, True], ids=["fx", "eager"])
def test_a_weight_copied_in_another_type_is_still_that_weight(branch: bool) -> None:
    """A router that multiplies in float32 (DeepSeek-V3's and GLM-4-MoE's: ``F.linear(x.float(),
    self.weight.float())``) reads its own weight: the product names it (a plan can lay the module
    out), where a copy of a weight used to be an anonymous constant; through torch.fx and through
    the eager tracer (a branch on the data, which torch.fx cannot follow)."""

    class Router(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(4, 16))

        def forward(self, x):
            return torch.nn.functional.linear(x.type(torch.float32), self.weight.type(torch.float32))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = Router()

        def forward(self, x):
            if branch and bool(x.sum() > 1e9):
                x = x * 2
            return self.gate(x).softmax(-1)

    graph = from_torch(Net(), (torch.randn(8, 16),), name="router")
    products = [op for op in graph.operators if op.op == "gemm"]
    assert len(products) == 1 and products[0].attrs.get("params") == ["gate.weight"]
    assert sum(i.use.size for i in products[0].inputs if i.param) == 64


def test_an_index_that_adds_a_dimension_keeps_the_batch() -> None:
    """Repeating key and value heads as eager attention does (``x[:, :, None, :, :].expand(...)``,
    gpt-oss's attention with sinks): the new dimension of size 1 is skipped, so every other
    dimension, the batch with them, runs along its own axis and the batch is followed through."""
    from stratopt.planning.batch import follow_batch

    class Repeat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, x):
            if bool(x.sum() > 1e9):  # torch.fx cannot follow it: the eager tracer records the indexing
                x = x * 2
            kv = self.proj(x).view(4, 8, 2, 8).transpose(1, 2)  # (batch, heads, seq, dim)
            wide = kv[:, :, None, :, :].expand(4, 2, 3, 8, 8).reshape(4, 6, 8, 8)
            return wide

    graph = from_torch(Repeat(), (torch.randn(4, 8, 16),), name="repeat")
    followed = follow_batch(graph)
    index = next(op for op in graph.operators if "getitem" in op.name)
    assert followed[index.name] == (index.axes[0],)
    assert index.inputs[0].use.dims[0] == (index.axes[0],)


def test_t5_reads_its_position_bias_along_the_heads_and_its_table_once() -> None:
    """T5 passes its relative position bias to ``scaled_dot_product_attention`` as the mask: every
    block's softmax reads it (broadcast over the batch, along the heads, queries and keys), so a
    split of the heads splits the bias. Its token table is held by two modules (``shared``, which
    the encoder model never calls, and ``encoder.embed_tokens``): the lookup that reads it pays for
    it (not tied to a module with no operator), and every weight counts once."""
    model, inputs = hf.SMALL["t5"]()
    graph = from_torch(model, inputs, name="t5")
    softmaxes = [op for op in graph.operators if op.op == "softmax"]
    assert len(softmaxes) == 2
    for op in softmaxes:
        bias = op.inputs[1]
        assert bias.source.endswith("block.0.layer.0.SelfAttention.unsqueeze")
        assert bias.use.dims == ((), ("d1",), ("d2",), ("d3",))
    table = next(op for op in graph.operators if op.name == "encoder.embed_tokens")
    assert not table.attrs.get("tied") and table.attrs["params"] == ["encoder.embed_tokens.weight"]
    held = sum(i.use.size for op in graph.operators if not op.attrs.get("tied") for i in op.inputs if i.param)
    assert held == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_attention_is_as_causal_on_the_meta_device_as_on_the_cpu(name: str) -> None:
    """On the meta device transformers cannot look at values, so it hands attention a causal mask
    built from the positions instead of ``is_causal``: the attention a causal module runs is still
    priced as the kernel's causal half there (it was priced as the whole square, twice the work,
    for the full-size shapes), and an encoder's stays whole."""
    graphs = [from_torch(*getattr(hf, name)(device=device, batch=2, seq=16), name=name) for device in ("cpu", "meta")]
    marks = [[op.attrs.get("causal") for op in g.operators if op.attrs.get("fused_attention")] for g in graphs]
    assert marks[0] == marks[1] and marks[0]
    assert all(marks[0]) == (name != "bert") and any(marks[0]) == (name != "bert")
