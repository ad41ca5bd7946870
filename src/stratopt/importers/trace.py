"""Eager tracing of a PyTorch model: run it once and record every torch call it makes.

torch.fx traces code symbolically and stops at the first branch on a tensor's shape or value;
``torch.export`` needs every output to be a known container. Third-party model code (Hugging Face
``transformers``, timm) meets both. This tracer instead *runs* the model on its example inputs under
a :class:`torch.overrides.TorchFunctionMode`, which sees each call into torch's Python API
(``torch.nn.functional``, ``torch.*`` and tensor methods, in-place ones included) with the real
tensors, and records one :class:`~stratopt.importers.common.Node` per call that produces a tensor
derived from the inputs. Any Python control flow runs as it would, and on tensors of torch's
``meta`` device nothing is computed and no memory is held for weights, so a 70B-parameter model
traces on a laptop.

Some modules are recorded whole (their inner calls are not): linear, convolution, embedding and
every normalisation (``LayerNorm``, ``RMSNorm`` and the classes models write for them, such as
``LlamaRMSNorm`` or ``T5LayerNorm``), so that an RMSNorm written as seven pointwise calls is one
norm operator named after its module; the calls such a module makes are counted on its operator
(``attrs["calls"]``, where more than one: what dispatching it costs, :mod:`stratopt.cost.default`).
A mixture-of-experts ``*Experts`` module (3-D expert weights, called with the hidden states and
the router's top-k choice) is recorded as one ``moe`` node and
never run, since its routing depends on data a meta tensor does not have; the importer turns it
into dispatch, expert products and combine, with the all-to-all that expert parallelism implies.

Calls whose inputs are all weights or constants (a causal mask built from ``arange``, a weight
transposed before use) produce constants, not operators. Node names are the module path of the
call (``layers.3.self_attn.q_proj``, ``layers.3.self_attn.matmul``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from stratopt.importers.common import Node, fused_pieces, inferred_dims, layer_norm_module

__all__ = ["trace"]

#: Calls that return one of their inputs unchanged or re-typed: aliases, not operators.
VIEWS = frozenset({
    "to", "type", "float", "half", "bfloat16", "double", "int", "long", "short", "bool", "type_as",
    "contiguous", "clone", "detach", "dropout",
    "requires_grad_", "cpu", "cuda", "alpha_dropout", "feature_alpha_dropout", "dropout1d",
    "dropout2d", "identity", "detach_", "data",
})  # fmt: skip
RESHAPES = frozenset({"view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "view_as", "reshape_as"})
TRANSPOSES = frozenset({"transpose", "permute", "t", "swapaxes", "swapdims", "mT", "movedim"})
#: Pointwise functions of one tensor (other arguments scalars or constants).
UNARY = frozenset({
    "relu", "gelu", "silu", "tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "neg", "abs", "erf", "pow",
    "square", "leaky_relu", "elu", "hardtanh", "hardswish", "hardsigmoid", "mish", "softplus", "relu6",
    "clamp", "clip", "reciprocal", "sin", "cos", "log1p", "expm1", "sign", "floor", "ceil", "round", "trunc",
    "masked_fill", "logical_not", "bitwise_not", "invert", "isnan", "isinf", "nan_to_num", "tril", "triu",
    "glu", "log_sigmoid", "logsigmoid", "celu", "selu", "gelu_", "silu_", "relu_", "sigmoid_", "tanh_",
    "exp_", "erf_", "clamp_min", "clamp_max", "fill_", "zero_", "sqrt_", "rsqrt_", "neg_", "pow_",
    "masked_fill_", "clamp_", "abs_", "uniform_", "normal_", "bernoulli", "bernoulli_",
})  # fmt: skip
#: Pointwise functions of two tensors (broadcasting), and their operator spellings.
BINARY = frozenset({
    "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "maximum", "minimum",
    "max_elementwise", "pow_tensor", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
    "bitwise_and", "bitwise_or", "and", "or", "xor", "truediv", "floordiv", "mod", "radd", "rsub", "rmul",
    "rtruediv", "rdiv", "rpow", "iadd", "isub", "imul", "itruediv", "idiv", "add_", "sub_", "mul_", "div_",
    "addcmul", "addcdiv", "lerp", "hypot", "atan2", "copysign", "xlogy", "subtract", "multiply", "divide",
    "greater", "less", "greater_equal", "less_equal", "equal", "not_equal", "copy_",
})  # fmt: skip
#: Known data movement and selection: priced as elementwise work over the output, without a warning.
MOVES = frozenset({
    "getitem", "setitem", "as_strided", "index_select", "gather", "take_along_dim", "where", "expand", "expand_as", "repeat",
    "repeat_interleave", "tile", "chunk", "split", "tensor_split", "unbind", "narrow", "select", "slice",
    "stack", "hstack", "vstack", "roll", "flip", "pad", "topk", "sort", "argsort", "max", "min", "amax", "amin",
    "argmax", "argmin", "one_hot", "scatter", "scatter_", "scatter_add", "scatter_add_", "index_add",
    "index_add_", "index_copy", "index_copy_", "index_put", "index_put_", "masked_scatter", "masked_select",
    "nonzero", "interpolate", "upsample", "pixel_shuffle", "pixel_unshuffle", "unfold", "fold", "cumsum",
    "cumprod", "diff", "outer", "diag", "diagonal", "triu_", "tril_", "new_zeros", "new_ones", "new_full",
    "new_empty", "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "clamp_",
    "sum", "prod", "var", "std", "all", "any", "norm", "logsumexp", "count_nonzero", "var_mean", "std_mean",
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "unsqueeze_", "squeeze_", "view_as_real", "view_as_complex", "real", "imag", "polar", "complex",
    "channel_shuffle", "broadcast_to", "index_fill", "index_fill_", "fill_diagonal_", "masked_fill_",
    "contiguous_", "bucketize", "searchsorted", "multinomial", "unique", "histc", "bincount",
})  # fmt: skip
PRODUCTS = {"linear": "fc", "matmul": "matmul", "mm": "matmul", "bmm": "matmul", "rmatmul": "matmul"}
NORMS = {"layer_norm": "layernorm", "rms_norm": "layernorm", "group_norm": "layernorm", "batch_norm": "batchnorm"}
NORMS |= {"instance_norm": "layernorm", "normalize": "layernorm", "local_response_norm": "layernorm"}
POOLS = frozenset({"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "max_pool1d"})
POOLS |= frozenset({"avg_pool1d", "adaptive_avg_pool1d", "max_pool2d_with_indices", "lp_pool2d"})
#: Calls that make tensors from nothing: constants.
FACTORIES = frozenset({
    "arange", "zeros", "ones", "full", "empty", "tensor", "as_tensor", "rand", "randn", "randint", "linspace",
    "eye", "logspace", "range", "from_numpy", "scalar_tensor", "randperm", "empty_strided", "tril_indices",
    "triu_indices", "meshgrid",
})  # fmt: skip


def _tensors(obj: Any, torch: Any) -> Iterator[Any]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, list | tuple):
        for x in obj:
            yield from _tensors(x, torch)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x, torch)


def _name(func: Any) -> str:
    name = str(getattr(func, "__name__", None) or getattr(func, "__qualname__", None) or func)
    if name == "__get__":  # a property such as Tensor.mT or Tensor.T
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", "get")
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
    return name


def _is_norm(mod: Any, nn: Any) -> bool:
    cls = type(mod).__name__
    if isinstance(mod, nn.LayerNorm | nn.GroupNorm | nn.LocalResponseNorm):
        return True
    if hasattr(nn, "RMSNorm") and isinstance(mod, nn.RMSNorm):
        return True
    return cls.endswith(("RMSNorm", "LayerNorm", "RmsNorm", "Norm2d")) and not list(mod.children())


def _experts(mod: Any) -> list[tuple[int, ...]] | None:
    """The 3-D expert weight shapes of a mixture-of-experts ``*Experts`` module, else None."""
    if not type(mod).__name__.endswith("Experts"):
        return None
    shapes = [tuple(p.shape) for p in mod.parameters(recurse=False) if p.dim() == 3]
    if len(shapes) < 2 or len({s[0] for s in shapes}) != 1:
        return None
    return shapes


class _Recorder:
    """The trace's state: nodes so far, which node made each live tensor, and the module scope."""

    def __init__(self, torch: Any, module: Any) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self.torch = torch
        self.made: Any = WeakIdKeyDictionary()  # tensor -> node name
        self.nodes: list[Node] = []
        self.kind: dict[str, str] = {}
        self.scope: list[str] = []
        self.causal: list[Any] = []  # per module running, its ``is_causal`` (None where it has none)
        self.counts: dict[str, int] = {}
        self.quiet = 0
        self.inside = 0  # calls made inside modules recorded whole (what their operator dispatches)
        self.labelled: set[str] = set()  # the nodes of named weights
        self.weights = {id(p): n for n, p in module.named_parameters()}
        self.weights |= {id(b): n for n, b in module.named_buffers()}

    def fresh(self, base: str) -> str:
        base = base.strip(".") or "op"
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def here(self, what: str) -> str:
        """A fresh name for a call made inside the innermost module running (its path is the prefix)."""
        scope = self.scope[-1] if self.scope else ""
        return self.fresh(f"{scope}.{what}" if scope else what)

    def causal_module(self) -> bool:
        """Whether the innermost running module that says whether it is causal (``is_causal``, as
        transformers' attention modules do) says so."""
        return next((c for c in reversed(self.causal) if isinstance(c, bool)), False)

    def source(self, t: Any) -> str:
        """The node that made ``t``; a weight or constant node the first time an unknown tensor is seen."""
        name = self.made.get(t)
        if name is None:
            label = self.weights.get(id(t))
            name = self.fresh(label if label is not None else "constant")
            named = {"param": label} if label is not None else {}
            self.nodes.append(Node(name, "param", [], tuple(int(s) for s in t.shape), named))
            self.kind[name] = "param"
            self.made[t] = name
            if label is not None:
                self.labelled.add(name)
        return name

    def live(self, name: str) -> bool:
        return self.kind.get(name) != "param"

    def add(self, node: Node, outputs: list[Any]) -> None:
        """Append ``node`` (one per output tensor) and remember which tensors it made."""
        if not outputs:
            return
        for i, t in enumerate(outputs):
            name = node.name if i == 0 else self.fresh(f"{node.name}.{i}")
            shape = tuple(int(s) for s in t.shape)
            self.nodes.append(Node(name, node.kind, list(node.inputs), shape, dict(node.attrs)))
            self.kind[name] = node.kind
            self.made[t] = name


def _attrs_for(fname: str, args: tuple[Any, ...], kwargs: dict[str, Any], shapes: list[tuple[int, ...]]) -> dict:
    """The attributes the emitter needs for calls that have any (axes, permutations, strides)."""
    attrs: dict[str, Any] = {"op": fname}

    def arg(i: int, key: str, default: Any = None) -> Any:
        return kwargs.get(key, args[i] if len(args) > i else default)

    if fname in ("softmax", "log_softmax"):
        attrs["axis"] = int(arg(1, "dim", -1))
    elif fname in ("cat", "concat", "concatenate"):
        attrs["axis"] = int(arg(1, "dim", 0))
    elif fname in TRANSPOSES and shapes:
        rank = len(shapes[0])
        perm = list(range(rank))
        if fname == "permute":
            dims = args[1:] if not isinstance(arg(1, "dims"), list | tuple) else arg(1, "dims")
            perm = [int(d) % rank for d in dims]
        elif fname in ("transpose", "swapaxes", "swapdims"):
            a, b = int(arg(1, "dim0")) % rank, int(arg(2, "dim1")) % rank
            perm[a], perm[b] = perm[b], perm[a]
        elif fname in ("t", "mT") and rank >= 2:
            perm[-1], perm[-2] = perm[-2], perm[-1]
        else:
            attrs["perm"] = None
            return attrs
        attrs["perm"] = perm
    elif fname == "mean":
        dims = arg(1, "dim")
        attrs["axes"] = None if dims is None else [int(d) for d in (dims if isinstance(dims, list | tuple) else [dims])]
        attrs["keepdims"] = bool(arg(2, "keepdim", False))
    elif fname in ("conv1d", "conv2d"):
        attrs.update(stride=arg(3, "stride", 1), pad=arg(4, "padding", 0), dilation=arg(5, "dilation", 1))
        attrs["groups"] = int(arg(6, "groups", 1))
    elif fname == "einsum" and args and isinstance(args[0], str):
        attrs["equation"] = args[0]
    elif fname in POOLS:
        attrs.update(window=arg(1, "kernel_size" if "adaptive" not in fname else "output_size"))
        attrs.update(stride=arg(2, "stride", None), pad=arg(3, "padding", 0))
    elif fname in ("view", "reshape") and len(args) > 1 and not isinstance(args[1], str):
        sizes = args[1] if isinstance(args[1], list | tuple) else args[1:]
        if all(isinstance(x, int) for x in sizes):  # (not a dtype view)
            attrs["inferred"] = inferred_dims(sizes)
    elif fname == "scaled_dot_product_attention":
        attrs["gqa"] = bool(kwargs.get("enable_gqa", False))
        attrs["causal"] = bool(arg(5, "is_causal", False))
    return attrs


def _kind(fname: str, live: int) -> str:
    """The node kind of a call with ``live`` inputs that derive from the model's inputs."""
    if fname in PRODUCTS:
        return PRODUCTS[fname]
    if fname in ("addmm", "baddbmm", "addbmm"):
        return "matmul"
    if fname in ("einsum",):
        return "einsum"
    if fname in ("conv1d", "conv2d"):
        return "conv"
    if fname == "embedding":
        return "embedding"
    if fname in NORMS:
        return NORMS[fname]
    if fname in ("softmax", "log_softmax"):
        return "softmax"
    if fname in POOLS:
        return "pool"
    if fname == "scaled_dot_product_attention":
        return "sdpa"
    if fname in VIEWS:
        return "view"
    if fname in RESHAPES:
        return "reshape"
    if fname in TRANSPOSES:
        return "transpose"
    if fname in ("cat", "concat", "concatenate"):
        return "concat"
    if fname == "mean":
        return "reduce_mean"
    if fname in BINARY:
        return "add" if live >= 2 else "unary"
    if fname in UNARY or fname.rstrip("_") in UNARY:
        return "unary"
    if fname in MOVES:
        return "move"
    return "other"


def trace(torch: Any, module: Any, example: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> list[Node]:
    """The nodes of one eager run of ``module(*example, **kwargs)`` (see the module docstring)."""
    from torch.overrides import TorchFunctionMode

    nn = torch.nn
    rec = _Recorder(torch, module)
    for i, t in enumerate(_tensors(list(example) + list((kwargs or {}).values()), torch)):
        name = rec.fresh(f"input{i}" if i else "input")
        rec.nodes.append(Node(name, "input", [], tuple(int(s) for s in t.shape)))
        rec.kind[name] = "input"
        rec.made[t] = name

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kw: dict | None = None) -> Any:
            kw = kw or {}
            out = func(*args, **kw)
            fname = _name(func)
            if fname in ("size", "dim", "numel", "shape", "dtype", "device", "item", "tolist", "bool", "len"):
                return out
            if rec.quiet:
                rec.inside += isinstance(out, torch.Tensor)
                return out
            record_call(fname, args, kw, out)
            return out

    def record_call(fname: str, args: tuple, kw: dict, out: Any) -> None:
        outs = [t for t in _tensors(out, torch)]
        if not outs and fname == "setitem" and args and isinstance(args[0], torch.Tensor):
            outs = [args[0]]
        if not outs:
            return
        ins = [rec.source(t) for t in _tensors((args, kw), torch)]
        ins = list(dict.fromkeys(ins))
        live = sum(1 for x in ins if rec.live(x))
        shapes = [tuple(int(s) for s in t.shape) for t in _tensors(args, torch)]
        weight = ins[0] if len(ins) == 1 and ins[0] in rec.labelled else None
        if live == 0 and fname in VIEWS and weight is not None:
            for t in outs:  # a weight re-typed or copied (a router's float32 copy): still that weight
                rec.made[t] = weight
            return
        if live == 0 or fname in FACTORIES:
            for t in outs:  # computed from weights and constants only: itself a constant
                name = rec.here(fname)
                rec.nodes.append(Node(name, "param", [], tuple(int(s) for s in t.shape)))
                rec.kind[name] = "param"
                rec.made[t] = name
            return
        kind = _kind(fname, live)
        attrs = _attrs_for(fname, args, kw, shapes)
        if kind == "transpose" and attrs.get("perm") is None:
            kind = "move"
        if kind == "matmul" and fname in ("addmm", "baddbmm", "addbmm") and len(ins) == 3:
            attrs["bias"], ins = ins[0], ins[1:]  # the added term: a bias where it is a weight
        if kind == "sdpa":  # q, k, v and a mask computed from the inputs; a constant mask is free
            mask = kw.get("attn_mask", args[3] if len(args) > 3 else None)
            if isinstance(mask, torch.Tensor) and not rec.live(rec.source(mask)) and rec.causal_module():
                # a causal module's mask built from the positions alone (transformers builds one where
                # it cannot look at values, under a fake-tensor trace): the kernel's causal half
                attrs["causal"] = True
            ins = [x for x in ins if rec.live(x)]
        if fname in ("split", "chunk") and len(ins) == 1 and shapes:
            nodes = {n.name: n for n in rec.nodes}
            attrs.update(fused_pieces(nodes, ins[0], shapes[0], [tuple(int(s) for s in t.shape) for t in outs]))
        rec.add(Node(rec.here(fname), kind, ins, (), attrs), outs)

    # Modules recorded whole: wrap their forward for the duration of the trace.
    wrapped: list[Any] = []
    path = {id(m): n for n, m in module.named_modules()}

    def whole(mod: Any, kind: str, attrs: dict[str, Any], run: bool = True) -> None:
        original = mod.forward

        def forward(*args: Any, **kw: Any) -> Any:
            if rec.quiet:
                return original(*args, **kw)
            rec.quiet += 1
            before = rec.inside
            try:
                # an experts module is not run: its output has the hidden states' shape
                out = original(*args, **kw) if run else torch.zeros_like(args[0])
            finally:
                rec.quiet -= 1
            calls = rec.inside - before
            first = next(_tensors(args, torch), None)
            # a lookup of constant ids (GPT-2's positions from an arange) is a lookup all the same:
            # its table is learned (priced, and a module the plan places), its ids a graph input
            constant_ids = kind == "embedding" and first is not None and not first.is_floating_point()
            if first is None or ((rec.made.get(first) is None or not rec.live(rec.made[first])) and not constant_ids):
                return out
            ins = list(dict.fromkeys(rec.source(t) for t in _tensors(args, torch)))
            ins = [x for x in ins if rec.live(x)]  # the data first (the router's choice too, for a moe)
            params = []
            for pname, p in mod.named_parameters(recurse=False):
                node = rec.fresh(f"{path[id(mod)]}.{pname}")
                qualified = {"param": f"{path[id(mod)]}.{pname}".lstrip(".")}
                rec.nodes.append(Node(node, "param", [], tuple(int(s) for s in p.shape), qualified))
                rec.kind[node] = "param"
                params.append(node)
            extra = dict(attrs)
            if calls > 1:  # a module of several calls (an RMS norm's power, mean, root, products)
                extra["calls"] = calls
            if kind == "moe":
                index = list(_tensors(args, torch))[1:2]
                extra["top_k"] = int(index[0].shape[-1]) if index else 1
            outs = [t for t in _tensors(out, torch)][:1]
            rec.add(Node(rec.fresh(path[id(mod)] or kind), kind, ins + params, (), extra), outs)
            return out

        mod.forward = forward
        wrapped.append(mod)

    def enter(mod: Any, _args: Any) -> None:
        rec.scope.append(path.get(id(mod), ""))
        rec.causal.append(getattr(mod, "is_causal", None))

    def leave(mod: Any, _args: Any, _out: Any) -> None:
        if rec.scope:
            rec.scope.pop()
        if rec.causal:
            rec.causal.pop()

    for mod in module.modules():
        if mod is module:
            continue
        experts = _experts(mod)
        if experts is not None:
            whole(mod, "moe", {"op": type(mod).__name__, "experts": [list(s) for s in experts]}, run=False)
        elif isinstance(mod, nn.Linear):
            whole(mod, "fc", {"op": "Linear"})
        elif isinstance(mod, nn.Embedding):
            whole(mod, "embedding", {"op": "Embedding"})
        elif isinstance(mod, nn.Conv1d | nn.Conv2d) and mod.padding_mode == "zeros":
            if all(d == 1 for d in mod.dilation):
                pad = mod.padding if isinstance(mod.padding, str) else tuple(mod.padding)
                attrs = {"op": type(mod).__name__, "stride": tuple(mod.stride), "pad": pad, "groups": mod.groups}
                whole(mod, "conv", attrs)
        elif isinstance(mod, nn.modules.batchnorm._BatchNorm) or type(mod).__name__.endswith("BatchNorm2d"):
            whole(mod, "batchnorm", {"op": type(mod).__name__})  # before the norms: "Norm2d" names both
        elif _is_norm(mod, nn):
            whole(mod, "layernorm", {"op": type(mod).__name__, "layer_norm": layer_norm_module(mod, nn)})
    pre = nn.modules.module.register_module_forward_pre_hook(enter)
    post = nn.modules.module.register_module_forward_hook(leave)
    fake: Any = contextlib.nullcontext()
    if any(t.is_meta for t in _tensors(list(example), torch)) or any(p.is_meta for p in module.parameters()):
        # Meta tensors hold no values, so code that asks one (a mask check, `if x.any()`) fails. Under a
        # fake-tensor mode the same meta tensors count as traced, and library code such as
        # transformers' skips those value checks as it does under torch.compile.
        from torch._subclasses.fake_tensor import FakeTensorMode

        fake = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with torch.no_grad(), fake, Mode():
            result = module(*example, **(kwargs or {}))
    finally:
        pre.remove()
        post.remove()
        for mod in wrapped:
            del mod.forward
    _share_key_value_heads(rec.nodes)
    return _reachable(rec.nodes, [rec.made.get(t) for t in _tensors(result, torch)])


def _share_key_value_heads(nodes: list[Node]) -> None:
    """Grouped-query attention written with its keys and values repeated per query head (``repeat_kv``
    in ``transformers``: a new axis, ``expand``, ``reshape``; or ``repeat_interleave``) attends to the
    unrepeated tensors instead: the attention's products then share each key/value head across its
    group, as ``enable_gqa`` does, and the copies (no longer used) are dropped."""
    by_name = {n.name: n for n in nodes}

    def unrepeated(name: str, heads: int) -> str:
        node = by_name.get(name)
        if node is None or len(node.shape) != 4:
            return name
        if node.kind == "move" and node.attrs.get("op") == "repeat_interleave":
            src = by_name.get(node.inputs[0]) if node.inputs else None
        elif node.kind == "reshape" and node.inputs:
            wide = by_name.get(node.inputs[0])
            if wide is None or wide.attrs.get("op") not in ("expand", "broadcast_to") or len(wide.shape) != 5:
                return name
            narrow = by_name.get(wide.inputs[0]) if wide.inputs else None
            if narrow is None or len(narrow.shape) != 5 or narrow.shape[2] != 1:
                return name
            src = by_name.get(narrow.inputs[0]) if narrow.inputs else None
        else:
            return name
        if src is None or len(src.shape) != 4 or src.shape[1] >= heads or heads % src.shape[1]:
            return name
        if (src.shape[0], *src.shape[2:]) != (node.shape[0], *node.shape[2:]):
            return name
        return src.name

    for n in nodes:
        if n.kind == "sdpa" and len(n.inputs) >= 3:
            q = by_name.get(n.inputs[0])
            if q is not None and len(q.shape) == 4:
                n.inputs[1:3] = [unrepeated(x, q.shape[1]) for x in n.inputs[1:3]]


def _reachable(nodes: list[Node], outputs: list[str | None]) -> list[Node]:
    """The nodes the model's outputs depend on (a cache update or an unused branch is dropped),
    and the products whose results nothing reads, with what they need: the model computes them
    all the same (a recurrent layer's final state, updated after its last chunk)."""
    wanted = {x for x in outputs if x is not None}
    if not wanted:
        return nodes
    wanted.update(n.name for n in nodes if n.kind in _PRICED)
    for n in reversed(nodes):
        if n.name in wanted:
            wanted.update(n.inputs)
            if "bias" in n.attrs:  # the weight a product adds (addmm's first term)
                wanted.add(str(n.attrs["bias"]))
    return [n for n in nodes if n.name in wanted or n.kind == "input"]


#: Node kinds whose work is priced as products (kept where their results go unread).
_PRICED = frozenset({"fc", "matmul", "einsum", "conv"})
