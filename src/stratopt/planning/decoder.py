"""A decoder shape (``mpt:`` / ``gpt:``) as an operator graph, for ``plan`` and ``solve``.

``mpt:layers=32,d_model=4096,heads=32,vocab=50368,seq=2048,batch=48`` is the decoder
:func:`~stratopt.planning.predict.parse_decoder` reads plus the sequence length and the global
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
import re

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.graph.layers import GraphBuilder
from stratopt.planning.predict import Decoder, parse_decoder

__all__ = ["FUSED", "decoder_graph", "is_decoder_shape"]

#: The attribute that marks an operator as part of a fused attention kernel: its role, ``scores``,
#: ``softmax`` or ``context``.
FUSED = "fused_attention"

_RUN_KEYS = re.compile(r",\s*(seq|batch)\s*=\s*([^,]*)")


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
