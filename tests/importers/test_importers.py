"""PyTorch and ONNX import: analytic flops, end-to-end strategies, ONNX round trips, warnings, errors."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")

from stratopt.cli import main  # noqa: E402
from stratopt.cost import build  # noqa: E402
from stratopt.errors import ModelError  # noqa: E402
from stratopt.importers import UnmappedOperatorWarning, flops, from_torch  # noqa: E402
from stratopt.importers.pytorch import reference_flops  # noqa: E402
from stratopt.problem import evaluate  # noqa: E402
from stratopt.solvers import solve_auto  # noqa: E402

from .models import GPTBlock, SmallResNet, gpt_flops, resnet_flops  # noqa: E402

CASES = {
    "gpt": (GPTBlock, (8, 32, 64), lambda: gpt_flops(8, 32, 64)),
    "resnet": (SmallResNet, (8, 3, 32, 32), lambda: resnet_flops(8, 32)),
}


def model(name: str):
    torch.manual_seed(0)
    cls, shape, _ = CASES[name]
    return cls().eval(), (torch.randn(*shape),)


def signature(graph):
    return [(op.op, op.outputs[0].shape) for op in graph.operators]


@pytest.mark.parametrize("name", sorted(CASES))
def test_flops_match_the_analytic_count_and_strategies_solve(name: str) -> None:
    """A GPT block and a small ResNet import with their products' flops within 1% of the count by
    hand; the graph prices and solves end to end, and the answer's cost re-evaluates."""
    net, example = model(name)
    graph = from_torch(net, example, name=name)
    assert flops(graph) == pytest.approx(CASES[name][2](), rel=0.01)
    costing = build(graph, 8, profile="default", machine="h100")
    result = solve_auto(costing.problem)
    assert result.status.value == "optimal"
    assert evaluate(costing.problem, result.assignment).objective == pytest.approx(result.objective)


def test_gpt_block_operators() -> None:
    """The block's linears are GEMMs with fused pointwise work where PyTorch applies it (GELU, the
    attention scale), its norms and softmax are operators, and the residual adds are elementwise."""
    net, example = model("gpt")
    ops = {op.name: op for op in from_torch(net, example).operators}
    assert ops["fc1"].op == "gemm" and ops["fc1"].pointwise == 1  # GELU fused
    assert ops["matmul"].pointwise == 1  # the 1/sqrt(d) scale fused into QK^T
    assert ops["ln1"].op == "norm" and ops["softmax"].op == "softmax"
    assert [op.op for op in ops.values()].count("elementwise") == 2
    assert [op.op for op in ops.values()].count("transpose") == 4  # k's two transposes merge into one


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_export_imports_to_the_same_graph(name: str, tmp_path) -> None:
    """The same model exported to ONNX (TorchScript exporter, batch norm kept) imports to the same
    operator kinds and shapes, and the same flops."""
    pytest.importorskip("onnx")
    from stratopt.importers import from_onnx

    net, example = model(name)
    path = tmp_path / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, example, str(path), dynamo=False, training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False
        )
    direct, imported = from_torch(net, example, name=name), from_onnx(path)
    assert signature(imported) == signature(direct)
    assert flops(imported) == flops(direct)


def test_dynamo_export_of_the_gpt_block(tmp_path) -> None:
    """torch's default (dynamo) exporter writes GELU as five ONNX nodes and pre-transposed weights;
    the import still gives the same operators and shapes."""
    pytest.importorskip("onnxscript")
    from stratopt.importers import from_onnx

    net, example = model("gpt")
    path = tmp_path / "gpt.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, example, str(path), dynamo=True, verbose=False)
    assert signature(from_onnx(path)) == signature(from_torch(net, example))


class WithCumsum(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(torch.cumsum(x, dim=1))


class WithLogCumSumExp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc(torch.logcumsumexp(x, dim=1))


def test_unsupported_operator_warns_and_imports() -> None:
    """An operator with no stratopt counterpart becomes elementwise work, and the warning names it
    (cumsum, which both tracers know as a scan over the data, imports without one)."""
    with pytest.warns(UnmappedOperatorWarning, match="logcumsumexp"):
        graph = from_torch(WithLogCumSumExp(), (torch.randn(4, 16),))
    assert [op.op for op in graph.operators] == ["elementwise", "gemm"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnmappedOperatorWarning)
        assert [op.op for op in from_torch(WithCumsum(), (torch.randn(4, 16),)).operators] == ["elementwise", "gemm"]


class Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        if x.shape[0] > 1:  # fx cannot trace a branch on a traced value; running it can
            return torch.relu(self.fc(x))
        return self.fc(x)


def test_falls_back_to_the_eager_tracer() -> None:
    """Where torch.fx fails, the eager tracer runs the model and records what it calls."""
    graph = from_torch(Branchy(), (torch.randn(4, 16),))
    assert [op.op for op in graph.operators] == ["gemm"]
    assert flops(graph) == 2 * 4 * 16 * 8


def test_bad_arguments() -> None:
    """Not a module, or a model that cannot run on the example, is a one-line ModelError."""
    with pytest.raises(ModelError, match=r"nn\.Module"):
        from_torch("resnet", (torch.randn(1),))
    with pytest.raises(ModelError, match="cannot trace"):
        from_torch(torch.nn.Linear(16, 8), (torch.randn(4, 15),))


def test_cli_import_solve_and_errors(tmp_path, capsys) -> None:
    """'stratopt import' writes a graph that solves; 'solve model.onnx' works directly; a malformed
    file exits 2 with one line; an unmapped ONNX operator is a one-line warning."""
    pytest.importorskip("onnx")
    net, example = model("resnet")
    onnx_path = tmp_path / "resnet.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, example, str(onnx_path), dynamo=False, training=torch.onnx.TrainingMode.PRESERVE)
    out_path = tmp_path / "g.json"
    assert main(["import", str(onnx_path), "-o", str(out_path)]) == 0
    assert "conv 5" in capsys.readouterr().out
    assert json.loads(out_path.read_text())["format"] == "stratopt-graph"
    assert main(["solve", str(out_path), "--procs", "4", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["solve", str(onnx_path), "--procs", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["objective"] == from_file["objective"]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage")
    assert main(["import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a readable ONNX model" in err

    cum = tmp_path / "cum.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(WithCumsum().eval(), (torch.randn(4, 16),), str(cum), dynamo=False)
    assert main(["import", str(cum)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning" in err and "CumSum" in err


class SDPA(torch.nn.Module):
    """Attention written with PyTorch's fused call, and a feature mixing written as an einsum."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.h, self.d = heads, d
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.mix = torch.nn.Parameter(torch.randn(d, d))

    def split(self, z):
        return z.reshape(2, 16, self.h, self.d // self.h).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 16, self.d)
        return torch.einsum("btd,bsd->bts", y, torch.relu(y @ self.mix))


def test_attention_and_einsum_map_to_products() -> None:
    """scaled_dot_product_attention becomes q k^T, softmax and a product with v; an einsum of two
    tensors is a GEMM; nothing is left unmapped (a warning would fail this test)."""
    graph = from_torch(SDPA(), (torch.randn(2, 16, 32),))
    ops = [op.op for op in graph.operators]
    assert ops.count("softmax") == 1 and "elementwise" not in ops
    b, t, d = 2, 16, 32
    expected = 3 * 2 * b * t * d * d + 2 * 2 * b * t * t * d + 2 * b * t * d * d + 2 * b * t * t * d
    assert flops(graph) == pytest.approx(expected)


def test_a_mapping_refused_by_the_builder_falls_back() -> None:
    """A node the builder refuses (an einsum whose operands disagree on a letter's size) is priced as
    elementwise work, and the warning names it."""
    from stratopt.importers.common import Node, emit

    nodes = [
        Node("x", "input", [], (4, 8)),
        Node("y", "input", [], (4, 6)),
        Node("m", "einsum", ["x", "y"], (4, 4), {"op": "einsum", "equation": "ab,ab->aa"}),
    ]
    with pytest.warns(UnmappedOperatorWarning, match="einsum"):
        graph = emit("t", nodes)
    assert [(op.name, op.op) for op in graph.operators] == [("m", "elementwise")]


class _EmptySlices(torch.nn.Module):
    """A decoder-style projection sliced into q, k and v, plus an empty slice and a size-0 constant
    (as attention code builds for a cache that is empty)."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.d = d
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)

    def forward(self, x):
        qkv = self.qkv(x)
        q, k, v = qkv[..., : self.d], qkv[..., self.d : 2 * self.d], qkv[..., 2 * self.d :]
        cache = x.new_zeros(x.shape[0], 0, self.d)  # nothing cached yet
        k = torch.cat([cache, k], dim=1)
        nothing = qkv[..., 3 * self.d :]  # an empty slice of the fused projection
        mix = torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v
        return self.out(mix) + nothing.sum()


def test_zero_size_tensors_are_no_operators() -> None:
    """An empty slice or a size-0 constant is not an operator: the model imports (no 'size 0'
    error), every product is priced, and the graph stays connected from input to output."""
    model, x = _EmptySlices(), torch.randn(2, 8, 32)
    graph = from_torch(model, (x,), name="empty")
    assert all(all(s > 0 for s in op.sizes) for op in graph.operators)
    assert flops(graph) == pytest.approx(reference_flops(model, (x,)), rel=1e-3)
    solve_auto(build(graph, 2).problem)


class _StringPadding(torch.nn.Module):
    """Convolutions with string padding and an explicit pad layer, as some vision families write them."""

    def __init__(self) -> None:
        super().__init__()
        self.same = torch.nn.Conv2d(3, 8, 3, padding="same")
        self.valid = torch.nn.Conv2d(8, 8, 3, padding="valid")
        self.pad = torch.nn.ZeroPad2d(1)
        self.after = torch.nn.Conv2d(8, 4, 3, stride=2)

    def forward(self, x):
        return self.after(self.pad(torch.relu(self.valid(torch.relu(self.same(x))))))


def _imported(model, x, tracer: str, name: str):
    """``model`` on ``x`` imported by torch.fx, or by the tracer that runs the model (``eager``: where
    torch.fx cannot trace it)."""
    if tracer == "eager":
        from stratopt.importers.common import emit
        from stratopt.importers.trace import trace

        return emit(name, trace(torch, model, (x,)))
    return from_torch(model, (x,), name=name)


@pytest.mark.parametrize("tracer", ["fx", "eager"])
def test_string_padding_convolutions_are_priced(tracer: str) -> None:
    """padding='same' and 'valid' (and an explicit ZeroPad2d) import as convolutions: every flop of
    PyTorch's count is on a priced product, with no unmapped-operator warning (an error here)."""
    model, x = _StringPadding(), torch.randn(2, 3, 16, 16)
    graph = _imported(model, x, tracer, "pads")
    assert sum(op.op == "conv" for op in graph.operators) == 3
    assert flops(graph) == pytest.approx(reference_flops(model, (x,)), rel=1e-3)


class _Conv1d(torch.nn.Module):
    """A depthwise causal convolution over a sequence, as state-space blocks write it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(16, 16, 4, groups=16, padding=3)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(self.conv(x)[..., : x.shape[-1]].transpose(1, 2))


def test_conv1d_is_a_convolution() -> None:
    """A 1-D convolution imports as a convolution of height 1: every flop on a priced product."""
    model, x = _Conv1d(), torch.randn(2, 16, 32)
    graph = from_torch(model, (x,), name="conv1d")
    assert any(op.op == "conv" for op in graph.operators)
    assert flops(graph) == pytest.approx(reference_flops(model, (x,)), rel=1e-3)


class _DepthwiseConv(torch.nn.Conv2d):
    """A subclass of nn.Conv2d outside torch.nn (as Hugging Face's EfficientNet writes its depthwise
    convolution): torch.fx traces through it, so the model calls F.conv2d itself."""


class _FunctionalConvs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.depthwise = _DepthwiseConv(8, 8, 5, stride=2, padding=2, groups=8)
        self.same = _DepthwiseConv(8, 16, 3, padding="same")
        self.weight = torch.nn.Parameter(torch.randn(4, 16, 1, 1))

    def forward(self, x):
        y = self.same(torch.relu(self.depthwise(x)))
        return torch.nn.functional.conv2d(y, self.weight, stride=1)


def test_convolutions_called_as_functions_are_priced() -> None:
    """F.conv2d under torch.fx (a convolution subclass traced through, strided and depthwise, or
    'same'; a model's own call with keyword arguments) imports as a convolution: every flop priced,
    no unmapped-operator warning (an error here)."""
    model, x = _FunctionalConvs(), torch.randn(2, 8, 16, 16)
    graph = from_torch(model, (x,), name="functional-convs")
    assert sum(op.op == "conv" for op in graph.operators) == 3
    assert flops(graph) == pytest.approx(reference_flops(model, (x,)), rel=1e-3)


class _BigWindow(torch.nn.Module):
    """EfficientNet's pooler: an average pool whose window is wider than the image (ceil_mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(64, ceil_mode=True)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))


@pytest.mark.parametrize("tracer", ["fx", "eager"])
def test_a_window_wider_than_the_image_pools_it_whole(tracer: str) -> None:
    """A pooling window wider than the image pools the whole image (no unmapped-operator warning)."""
    model, x = _BigWindow(), torch.randn(2, 3, 7, 7)
    graph = _imported(model, x, tracer, "big-window")
    pools = [op for op in graph.operators if op.op == "pool"]
    assert len(pools) == 1 and pools[0].outputs[0].shape == (2, 8, 1, 1)


class _ConstantOperand(torch.nn.Module):
    """Attention against fixed global tokens: an einsum whose second operand is a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("tokens", torch.randn(4, 8, 16))
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.einsum("bhnd,hgd->bhng", self.fc(x), self.tokens)


def test_a_product_with_a_constant_operand_is_priced() -> None:
    """An einsum against a constant (a buffer) is a product all the same: every flop priced."""
    model, x = _ConstantOperand(), torch.randn(2, 4, 32, 16)
    graph = from_torch(model, (x,), name="constant")
    assert flops(graph) == pytest.approx(reference_flops(model, (x,)), rel=1e-3)


class _BroadcastProducts(torch.nn.Module):
    """Products whose batch dimensions broadcast, as DeepSeek's sparse-attention indexer scores
    every head of a query against one shared key: ``[b, s, h, d] @ [b, 1, d, t]``."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = torch.nn.Linear(16, 32), torch.nn.Linear(16, 16)

    def forward(self, x):
        q = self.q(x).view(*x.shape[:2], 2, 16)
        k = self.k(x)
        scores = torch.matmul(q, k.transpose(-1, -2).unsqueeze(1))  # [b, s, 2, s]: k shared over s
        mixed = torch.matmul(scores, k.unsqueeze(1))  # [b, s, 2, 16]: again over s
        fewer = torch.matmul(k.unsqueeze(0), q[:, 0].transpose(-1, -2))  # [1, b, s, 16] @ [b, 16, 2]
        return mixed.sum() + fewer.sum()


def test_products_with_broadcast_batch_dimensions_are_priced() -> None:
    """A product whose operands broadcast over a batch dimension is a product, not elementwise
    work: every flop priced, and the graph still solves."""
    model, x = _BroadcastProducts(), torch.randn(2, 8, 16)
    graph = from_torch(model, (x,), name="broadcast")
    products = [op for op in graph.operators if op.op == "gemm" and "matmul" in op.name]
    assert len(products) == 3
    assert flops(graph) == pytest.approx(reference_flops(model, (x,)), rel=1e-6)
    problem = build(graph, 4).problem
    assert solve_auto(problem, time_limit=60).status.value == "optimal"


class _DeadProduct(torch.nn.Module):
    """A recurrent step that also updates a state nothing reads (a linear-attention layer's final
    state after its last chunk): the model computes that product all the same."""

    def __init__(self) -> None:
        super().__init__()
        self.k, self.v = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        k, v = self.k(x), self.v(x)
        state = torch.zeros(x.shape[0], 16, 16)
        out = v - k @ state  # read before the update
        _final = state + k.transpose(-1, -2) @ v  # computed, never read
        return out


def test_a_product_whose_result_goes_unread_is_priced() -> None:
    """The final-state product is kept (its flops are PyTorch's too); the graph still solves."""
    model, x = _DeadProduct(), torch.randn(2, 8, 16)
    graph = from_torch(model, (x,), name="dead")
    assert flops(graph) == pytest.approx(reference_flops(model, (x,)), rel=1e-6)
    assert solve_auto(build(graph, 2).problem, time_limit=60).status.value == "optimal"


class _Norms(torch.nn.Module):
    """A norm with no weights (OLMo's), one (RMSNorm's scale) and two (LayerNorm's scale and shift)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.plain = torch.nn.LayerNorm(16, elementwise_affine=False)
        self.rms = torch.nn.RMSNorm(16)
        self.affine = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.affine(self.rms(self.plain(self.fc(x))))


@pytest.mark.parametrize("tracer", ["fx", "eager"])
def test_norms_are_priced_by_their_weights(tracer: str) -> None:
    """Each norm holds the weight vectors its module has: none (the cost model prices no state, and a
    plan needs no module for it: OLMo's plans had no PyTorch form before), a scale, or a scale and a
    shift (RMSNorm was priced with two: a Llama's bytes 0.02% over what its ranks hold)."""
    graph = _imported(_Norms(), torch.randn(4, 16), tracer, "norms")
    held = [
        sum(i.use.shape[0] for i in op.inputs if i.param) if any(i.param for i in op.inputs) else 0
        for op in graph.operators
        if op.op == "norm"
    ]
    assert held == [0, 1, 2]


class _HandRMSNorm(torch.nn.Module):
    """An RMS norm as Hugging Face models write it: seven calls, recorded as one norm operator."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(16))

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


class _Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.norm = _HandRMSNorm()
        self.layer = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.layer(self.norm(self.fc(x)))


def test_a_module_recorded_whole_counts_the_calls_it_makes() -> None:
    """The eager tracer records a hand-written RMS norm as one operator and counts the calls it
    dispatches (what the cost model charges ``launch_us`` for, each); a module of one call (a
    linear layer, PyTorch's own layer norm) carries no count."""
    from stratopt.importers.common import emit
    from stratopt.importers.trace import trace

    graph = emit("counted", trace(torch, _Counted(), (torch.randn(4, 16),)))
    calls = {
        op.op + (":" + op.name.split(".")[0] if op.op == "norm" else ""): op.attrs.get("calls")
        for op in graph.operators
    }
    # to, pow, mean, add, rsqrt, mul, to and the weight's mul: the converts count (each a dispatch)
    assert calls == {"gemm": None, "norm:norm": 8, "norm:layer": None}


class _Pieces(torch.nn.Module):
    """A fused projection cut into equal pieces (``split`` by size, then ``chunk``), an activation
    cut the same way (no product made it), and a product cut into unequal pieces."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.d = d
        self.fused = torch.nn.Linear(d, 3 * d)
        self.pair = torch.nn.Linear(d, 2 * d)
        self.uneven = torch.nn.Linear(d, 2 * d)

    def forward(self, x):
        q, k, v = self.fused(x).split(self.d, dim=-1)
        gate, up = self.pair(x).chunk(2, dim=-1)
        left, right = torch.relu(torch.cat([q, k], dim=-1)).chunk(2, dim=-1)
        small, big = self.uneven(x).split([self.d // 2, self.d + self.d // 2], dim=-1)
        return q * k + v + gate * up + left * right + small.sum(-1, keepdim=True) + big[..., : self.d]


@pytest.mark.parametrize("tracer", ["fx", "eager"])
def test_the_pieces_of_a_fused_projection_run_along_its_output_features(tracer: str) -> None:
    """A split or chunk of a product's output into equal pieces along its last dimension reads that
    dimension as its own (a split over it costs no re-layout: each device may hold its share of
    every piece) and says how many pieces; a cut of an activation no product makes, or into unequal
    pieces, reads it whole. Each piece reads the tensor it is cut from (torch.fx's ``getitem``s were
    once left reading nothing, the graph cut in two)."""
    model, x = _Pieces(), torch.randn(2, 4, 16)
    graph = _imported(model, x, tracer, "pieces")
    ops = graph.operators
    cuts = [
        op
        for op in ops
        if op.op == "elementwise" and len(op.inputs) == 1 and op.inputs[0].use.shape[-1] > op.sizes[-1] > 1
    ]
    fused = [op for op in cuts if ops[graph.index[op.inputs[0].source]].op == "gemm" and op.attrs.get("pieces")]
    assert sorted(op.attrs["pieces"] for op in fused) == [2, 2, 3, 3, 3]
    for op in cuts:
        last = op.inputs[0].use.dims[-1]
        assert last == ((op.axes[-1],) if op in fused else ()), op.name
    assert len(cuts) == 10  # the activation's two halves, the uneven pair and a slice read their whole width
    solve_auto(build(graph, 2).problem)


class _Positions(torch.nn.Module):
    """Token and learned position embeddings added (the positions a buffer: constant ids), then
    PyTorch's ``LayerNorm``, a subclass of it that normalises in its own forward, and ``RMSNorm``."""

    class Upcast(torch.nn.LayerNorm):
        def forward(self, x):
            return super().forward(x.float()).to(x.dtype)

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(50, d), torch.nn.Embedding(12, d)
        self.layer, self.upcast, self.rms = torch.nn.LayerNorm(d), self.Upcast(d), torch.nn.RMSNorm(d)
        self.register_buffer("at", torch.arange(12)[None], persistent=False)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(self.at)
        return self.rms(self.upcast(self.layer(x)))


@pytest.mark.parametrize("tracer", ["fx", "eager"])
def test_a_position_table_read_at_constant_ids_is_a_lookup_and_layer_norms_say_they_are(tracer: str) -> None:
    """A learned position table read at constant positions is a lookup with its table (priced, a
    module a plan places), not a constant; PyTorch's own ``nn.LayerNorm`` is marked ``fused:
    layer_norm`` (a width split runs it), a subclass with a forward of its own and other norms are not."""
    graph = _imported(_Positions(), torch.randint(0, 50, (2, 12)), tracer, "positions")
    ops = {op.name.replace("_", "."): op for op in graph.operators}
    assert ops["positions"].attrs.get("lookup") and ops["positions"].attrs["params"] == ["positions.weight"]
    added = next(op for op in graph.operators if {i.source for i in op.inputs} == {"tokens", "positions"})
    assert added.op == "elementwise"
    fused = {name: op.attrs.get("fused") for name, op in ops.items() if op.op == "norm"}
    assert fused.pop("layer") == "layer_norm" and len(fused) == 2 and set(fused.values()) == {None}


class _Views(torch.nn.Module):
    """Heads viewed two ways: the head count left to PyTorch (Llama's ``view(*shape, -1, dim)``) and
    fixed by the module (OPT's ``view(bsz, -1, heads, dim)``), then read back whole."""

    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.q, self.k = heads, torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q = self.q(x).view(b, s, -1, d // self.heads)
        k = self.k(x).view(b, -1, self.heads, d // self.heads)
        return (q * k).reshape(b, s, -1)


@pytest.mark.parametrize("tracer", ["fx", "eager"])
def test_a_view_says_which_dimensions_pytorch_works_out(tracer: str) -> None:
    """Each view or reshape records the dimensions its sizes leave to PyTorch (``-1``; under torch.fx
    also a size read from a tensor): a split region passes a view only along those."""
    graph = _imported(_Views(), torch.randn(2, 6, 16), tracer, "views")
    inferred = {op.name: op.attrs.get("inferred") for op in graph.operators if op.op == "reshape"}
    q, k, back = (
        next(v for n, v in inferred.items() if n.endswith(suffix)) for suffix in ("view", "view_1", "reshape")
    )
    assert 2 in q and 2 not in k and 1 in k and 2 in back  # (fx: the sizes read from x adapt too)


class _Stacked(torch.nn.Module):
    """GPT-J's and CodeGen's rotary half-turn: the two halves' pairs stacked on a new last
    dimension, then flattened back."""

    def forward(self, x):
        pairs = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1)
        return pairs.flatten(-2) * x


@pytest.mark.parametrize("tracer", ["fx", "eager"])
def test_a_stack_reads_its_tensors_along_the_dimensions_they_keep(tracer: str) -> None:
    """``torch.stack`` adds a dimension: the tensors stacked run along the others (the batch
    among them), not broadcast whole (data parallelism and micro-batches found no batch axis in
    CodeGen's rotary embedding)."""
    from stratopt.planning.batch import follow_batch

    graph = _imported(_Stacked(), torch.randn(4, 6, 8), tracer, "stacked")
    stack = next(op for op in graph.operators if "stack" in op.name)
    assert all(len(i.use.dims) == 3 and all(i.use.dims) for i in stack.inputs)
    assert follow_batch(graph)[stack.name] == (stack.axes[0],)
