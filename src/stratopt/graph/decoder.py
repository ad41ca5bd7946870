"""A decoder shape (``mpt:`` / ``gpt:``) as an operator graph, for ``plan`` and ``solve``.

``mpt:layers=32,d_model=4096,heads=32,vocab=50368,seq=2048,batch=48`` is the decoder
:func:`parse_decoder` reads plus the sequence length and the global
batch (sequences per step): ``batch`` sequences of ``seq`` tokens through an embedding, ``layers``
pre-norm blocks (norm, one product for q, k and v, attention, output projection, residual add;
norm, the MLP's two products with the activation fused into the first, residual add), a final norm, the
output projection and the loss. MPT's block has no biases; the output projection reads the
embedding's table (tied), so its weight is not counted twice (``tied``).

Attention is what FlashAttention runs: the scores, softmax and context products are marked
``fused_attention`` with their role (and ``causal``), so the ``default`` profile stores no score matrix, streams
none through memory, runs the causal half of the products and recomputes the scores in the
backward pass, as :func:`~stratopt.planning.predict.predict` does.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.graph.layers import GraphBuilder

__all__ = ["FUSED", "Decoder", "build_decoder", "decoder_graph", "is_decoder_shape", "parse_decoder"]

#: The attribute that marks an operator as part of a fused attention kernel: its role, ``scores``,
#: ``softmax`` or ``context``.
FUSED = "fused_attention"

_RUN_KEYS = re.compile(r",\s*(seq|batch)\s*=\s*([^,]*)")


@dataclass(frozen=True)
class Decoder:
    """A decoder-only transformer: ``layers`` blocks of attention (``heads`` heads) and an MLP of
    ``mlp_ratio * d_model``, no biases, the input and output embeddings tied (MPT's block)."""

    name: str
    layers: int
    d_model: int
    heads: int
    vocab: int
    mlp_ratio: float = 4.0

    def __post_init__(self) -> None:
        for name in ("layers", "d_model", "heads", "vocab"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"decoder {self.name!r}: {name} must be a positive integer, got {value!r}")
        if self.d_model % self.heads:
            raise ModelError(f"decoder {self.name!r}: heads ({self.heads}) must divide d_model ({self.d_model})")
        if not 0 < self.mlp_ratio < math.inf:
            raise ModelError(f"decoder {self.name!r}: mlp_ratio must be a positive number, got {self.mlp_ratio!r}")

    @property
    def block_params(self) -> float:
        return self.layers * (4 + 2 * self.mlp_ratio) * self.d_model**2

    @property
    def params(self) -> float:
        return self.block_params + self.vocab * self.d_model


_SHAPE = re.compile(r"^(?P<kind>mpt|gpt):(?P<args>.+)$")


def parse_decoder(text: str) -> Decoder:
    """``mpt:layers=32,d_model=4096,heads=32,vocab=50368`` (``gpt:`` takes the same keys;
    ``mlp_ratio`` is optional, default 4).

    >>> parse_decoder("mpt:layers=32,d_model=4096,heads=32,vocab=50368").params / 1e9
    6.648758272
    """
    match = _SHAPE.match(text.strip())
    if match is None:
        raise ModelError(f"{text!r}: expected a decoder shape such as mpt:layers=32,d_model=4096,heads=32,vocab=50368")
    values: dict[str, float] = {}
    for item in match["args"].split(","):
        key, _, value = item.partition("=")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            raise ModelError(f"{text!r}: {item.strip()!r} is not key=number") from None
    need = ("layers", "d_model", "heads", "vocab")
    unknown = sorted(set(values) - {*need, "mlp_ratio"})
    missing = [k for k in need if k not in values]
    if unknown or missing:
        raise ModelError(f"{text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'missing ' + ', '.join(missing)}")
    ints = {k: int(values[k]) for k in need}
    if any(ints[k] != values[k] or ints[k] < 1 for k in need) or ints["d_model"] % ints["heads"]:
        raise ModelError(
            f"{text!r}: layers, d_model, heads and vocab must be positive integers, heads dividing d_model"
        )
    return Decoder(match["kind"], mlp_ratio=values.get("mlp_ratio", 4.0), **ints)


def is_decoder_shape(text: str) -> bool:
    """Whether ``text`` reads as a decoder shape (``mpt:...`` or ``gpt:...``)."""
    return re.match(r"^(mpt|gpt):\S", text.strip()) is not None


def decoder_graph(text: str) -> Graph:
    """The graph of a decoder shape with ``seq=`` and ``batch=`` (see the module docstring).

    >>> g = decoder_graph("mpt:layers=2,d_model=64,heads=4,vocab=512,seq=32,batch=8")
    >>> len(g.operators), sum(FUSED in op.attrs for op in g.operators)
    (28, 6)
    """
    run = {k: v.strip() for k, v in _RUN_KEYS.findall(text)}
    missing = [k for k in ("seq", "batch") if k not in run]
    if missing:
        raise ModelError(f"{text!r}: a decoder graph needs {' and '.join(missing)} (e.g. ...,seq=2048,batch=48)")
    sizes: dict[str, int] = {}
    for key, value in run.items():
        if not value.isdigit() or int(value) < 1:
            raise ModelError(f"{text!r}: {key} must be a positive integer, got {value!r}")
        sizes[key] = int(value)
    return build_decoder(parse_decoder(_RUN_KEYS.sub("", text)), sizes["seq"], sizes["batch"], text.strip())


def build_decoder(model: Decoder, seq: int, batch: int, name: str | None = None) -> Graph:
    """``model`` over ``batch`` sequences of ``seq`` tokens (see the module docstring)."""
    d, heads, vocab = model.d_model, model.heads, model.vocab
    dk, ff = d // heads, round(model.mlp_ratio * d)
    g = GraphBuilder(
        name or f"{model.name}-{model.layers}x{d}",
        source=f"decoder shape ({model.name}): {model.layers} layers, d_model {d}, {heads} heads, "
        f"MLP {ff}, vocab {vocab}, seq {seq}, batch {batch}; fused causal attention, tied embedding",
    )
    x = g.embedding(g.input((batch, seq)), vocab, d, name="embed")
    for i in range(model.layers):
        at = f"layers.{i}"
        h = g.layernorm(x, name=f"{at}.norm_1")
        w_qkv = g.input((3, d, heads, dk), param=True)
        qkv = g.einsum("ble,sehk->sbhlk", h, w_qkv, name=f"{at}.attn.Wqkv", kind="qkv")
        q, k, v = g.unstack(qkv, name=f"{at}.attn.split")
        scores = g.einsum("bhlk,bhmk->bhlm", q, k, name=f"{at}.attn.scores", kind="scores")
        probs = g.softmax(scores, axis=3, name=f"{at}.attn.softmax")
        ctx = g.einsum("bhlm,bhmk->bhlk", probs, v, name=f"{at}.attn.context", kind="context")
        out = g.einsum("bhlk,hke->ble", ctx, g.input((heads, dk, d), param=True), name=f"{at}.attn.out_proj")
        x = g.elementwise(x, out, name=f"{at}.attn_residual")
        h = g.layernorm(x, name=f"{at}.norm_2")
        h = g.einsum("ble,ef->blf", h, g.input((d, ff), param=True), pointwise=1, name=f"{at}.mlp.up_proj")
        h = g.einsum("blf,fe->ble", h, g.input((ff, d), param=True), name=f"{at}.mlp.down_proj")
        x = g.elementwise(x, h, name=f"{at}.mlp_residual")
    x = g.layernorm(x, name="norm_f")
    x = g.einsum("ble,ev->blv", x, g.input((d, vocab), param=True), name="lm_head", kind="lm_head")
    g.softmax_xent(x, name="loss")
    graph = g.build()
    marked = []
    for op in graph.operators:
        role = op.name.rpartition(".")[2]
        if role in ("scores", "softmax", "context") and ".attn." in op.name:
            op = dataclasses.replace(op, attrs={**op.attrs, FUSED: role, "causal": True})
        elif op.name == "lm_head":
            op = dataclasses.replace(op, attrs={**op.attrs, "tied": True})
        marked.append(op)
    return dataclasses.replace(graph, operators=tuple(marked))
