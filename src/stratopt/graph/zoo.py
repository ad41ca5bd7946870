"""Builders of the benchmark networks shipped as data files in ``models/``.

PaSE's five benchmarks are built as PaSE's ``graph.py`` builds them (baidu-research/PaSE; layer
shapes and the order of vertices follow it, einsums use PaSE's domain indexing, see
:meth:`GraphBuilder.einsum`). Two differences are deliberate: a tensor read twice by one
operator is two edges (PaSE's ``nx.DiGraph`` keeps one), and weights appear as graph inputs so
the ``default`` profile can count their memory (they add no vertex and no edge).

``scripts/make_models.py`` writes every network here to ``models/<name>.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stratopt.graph.ir import Graph
from stratopt.graph.layers import GraphBuilder, TensorRef

__all__ = ["ZOO", "ZooEntry"]

_PASE = "baidu-research/PaSE graph.py (Elango, IPDPS 2021)"


@dataclass(frozen=True)
class ZooEntry:
    build: Callable[[], Graph]
    description: str
    source: str


def alexnet(b: int = 128) -> Graph:
    g = GraphBuilder("alexnet", source=f"{_PASE}: AlexNet, batch {b}, 1024-class last layer")
    x = g.input((b, 3, 227, 227))
    x = g.conv(x, (96, 3, 11, 11), stride=4, pointwise=1)
    x = g.pooling(x, (3, 3), stride=2)
    x = g.conv(x, (256, 96, 5, 5), pad=2, pointwise=1)
    x = g.pooling(x, (3, 3), stride=2)
    x = g.conv(x, (384, 256, 3, 3), pad=1, pointwise=1)
    x = g.conv(x, (384, 384, 3, 3), pad=1, pointwise=1)
    x = g.conv(x, (256, 384, 3, 3), pad=1, pointwise=1)
    x = g.pooling(x, (3, 3), stride=2)
    x = g.reshape(x, (b, 256 * 6 * 6))
    x = g.fc(x, 4096, pointwise=1)
    x = g.fc(x, 4096, pointwise=1)
    x = g.fc(x, 1024)
    g.softmax_xent(x)
    return g.build()


def _resnet(name: str, layers: tuple[int, int, int, int], b: int, image: int, source: str) -> Graph:
    g = GraphBuilder(name, source=source)
    expansion = 4
    inplanes = 64

    def bottleneck(x: TensorRef, planes: int, stride: int, downsample: bool) -> TensorRef:
        y = g.batchnorm(g.conv(x, (planes, inplanes, 1, 1)))
        y = g.batchnorm(g.conv(y, (planes, planes, 3, 3), stride=stride, pad=1))
        y = g.batchnorm(g.conv(y, (planes * expansion, planes, 1, 1)))
        identity = x
        if downsample:
            identity = g.batchnorm(g.conv(x, (planes * expansion, inplanes, 1, 1), stride=stride))
        return g.elementwise(y, identity, pointwise=1)

    def stage(x: TensorRef, planes: int, blocks: int, stride: int) -> TensorRef:
        nonlocal inplanes
        x = bottleneck(x, planes, stride, stride != 1 or inplanes != planes * expansion)
        inplanes = planes * expansion
        for _ in range(1, blocks):
            x = bottleneck(x, planes, 1, False)
        return x

    x = g.input((b, 3, image, image))
    x = g.batchnorm(g.conv(x, (64, 3, 7, 7), stride=2, pad=3))
    x = g.pooling(x, (3, 3), stride=2, pad=1)
    for planes, blocks, stride in zip((64, 128, 256, 512), layers, (1, 2, 2, 2), strict=True):
        x = stage(x, planes, blocks, stride)
    x = g.reduce_mean(x, (2, 3))
    g.softmax_xent(g.fc(x, 1000))
    return g.build()


def resnet101(b: int = 128) -> Graph:
    return _resnet("resnet101", (3, 4, 23, 3), b, 227, f"{_PASE}: ResNet-101, batch {b}, 227x227 images")


def resnet50(b: int = 256) -> Graph:
    return _resnet(
        "resnet50", (3, 4, 6, 3), b, 224, f"He et al. 2016 (torchvision layout): ResNet-50, batch {b}, 224x224"
    )


def inception3(b: int = 128) -> Graph:
    g = GraphBuilder("inception3", source=f"{_PASE}: Inception-v3, batch {b}, no auxiliary head")

    def basic(
        x: TensorRef, fltr: tuple[int, int, int, int], stride: int = 1, pad: int | tuple[int, int] = 0
    ) -> TensorRef:
        return g.batchnorm(g.conv(x, fltr, stride=stride, pad=pad))

    def block_a(x: TensorRef, cin: int, pool_features: int) -> TensorRef:
        b1 = basic(x, (64, cin, 1, 1))
        b5 = basic(basic(x, (48, cin, 1, 1)), (64, 48, 5, 5), pad=2)
        b3 = basic(x, (64, cin, 1, 1))
        b3 = basic(b3, (96, 64, 3, 3), pad=1)
        b3 = basic(b3, (96, 96, 3, 3), pad=1)
        bp = basic(g.pooling(x, (3, 3), stride=1, pad=1), (pool_features, cin, 1, 1))
        return g.concat([b1, b5, b3, bp], 1)

    def block_b(x: TensorRef, cin: int) -> TensorRef:
        b3 = basic(x, (384, cin, 3, 3), stride=2)
        bd = basic(x, (64, cin, 1, 1))
        bd = basic(bd, (96, 64, 3, 3), pad=1)
        bd = basic(bd, (96, 96, 3, 3), stride=2)
        bp = g.pooling(x, (3, 3), stride=2)
        return g.concat([b3, bd, bp], 1)

    def block_c(x: TensorRef, cin: int, c7: int) -> TensorRef:
        b1 = basic(x, (192, cin, 1, 1))
        b7 = basic(x, (c7, cin, 1, 1))
        b7 = basic(b7, (c7, c7, 1, 7), pad=(0, 3))
        b7 = basic(b7, (192, c7, 7, 1), pad=(3, 0))
        bd = basic(x, (c7, cin, 1, 1))
        bd = basic(bd, (c7, c7, 7, 1), pad=(3, 0))
        bd = basic(bd, (c7, c7, 1, 7), pad=(0, 3))
        bd = basic(bd, (c7, c7, 7, 1), pad=(3, 0))
        bd = basic(bd, (192, c7, 1, 7), pad=(0, 3))
        bp = basic(g.pooling(x, (3, 3), stride=1, pad=1), (192, cin, 1, 1))
        return g.concat([b1, b7, bd, bp], 1)

    def block_d(x: TensorRef, cin: int) -> TensorRef:
        b3 = basic(basic(x, (192, cin, 1, 1)), (320, 192, 3, 3), stride=2)
        b7 = basic(x, (192, cin, 1, 1))
        b7 = basic(b7, (192, 192, 1, 7), pad=(0, 3))
        b7 = basic(b7, (192, 192, 7, 1), pad=(3, 0))
        b7 = basic(b7, (192, 192, 3, 3), stride=2)
        bp = g.pooling(x, (3, 3), stride=2)
        return g.concat([b3, b7, bp], 1)

    def block_e(x: TensorRef, cin: int) -> TensorRef:
        b1 = basic(x, (320, cin, 1, 1))
        b3 = basic(x, (384, cin, 1, 1))
        b3 = g.concat([basic(b3, (384, 384, 1, 3), pad=(0, 1)), basic(b3, (384, 384, 3, 1), pad=(1, 0))], 1)
        bd = basic(x, (448, cin, 1, 1))
        bd = basic(bd, (384, 448, 3, 3), pad=1)
        bd = g.concat([basic(bd, (384, 384, 1, 3), pad=(0, 1)), basic(bd, (384, 384, 3, 1), pad=(1, 0))], 1)
        bp = basic(g.pooling(x, (3, 3), stride=1, pad=1), (192, cin, 1, 1))
        return g.concat([b1, b3, bd, bp], 1)

    x = g.input((b, 3, 299, 299))
    x = basic(x, (32, 3, 3, 3), stride=2)
    x = basic(x, (32, 32, 3, 3))
    x = basic(x, (64, 32, 3, 3), pad=1)
    x = g.pooling(x, (3, 3), stride=2)
    x = basic(x, (80, 64, 1, 1))
    x = basic(x, (192, 80, 3, 3))
    x = g.pooling(x, (3, 3), stride=2)
    x = block_a(x, 192, 32)
    x = block_a(x, 256, 64)
    x = block_a(x, 288, 64)
    x = block_b(x, 288)
    for c7 in (128, 160, 160, 192):
        x = block_c(x, 768, c7)
    x = block_d(x, 768)
    x = block_e(x, 1280)
    x = block_e(x, 2048)
    x = g.reduce_mean(x, (2, 3))
    g.softmax_xent(g.fc(x, 1000))
    return g.build()


def rnnlm(b: int = 64) -> Graph:
    # PaSE's RNNLM(b) in its final graph.py (baidu-research/PaSE 32aa761): 2 LSTM layers of 2048
    # units, vocabulary 100k, sequence 256, SetCutoff(1) for the whole graph (so the layer axis
    # can split: pipelined parallelism), an Embedding (a one-hot einsum with the table), the
    # stacked LSTM op, an FC to the vocabulary and SoftmaxCrossEntropy.
    layers, units, vocab, seq = 2, 2048, 100_000, 256
    g = GraphBuilder(
        "rnnlm",
        source=f"{_PASE}, final version 32aa761: RNNLM, batch {b}, {layers}x LSTM {units}, vocab {vocab}, seq {seq}, cutoff 1",
        cutoff=1,
    )
    x = g.embedding(g.input((b, seq)), vocab, units)
    x = g.lstm(x, units, layers)
    x = g.fc(x, vocab, name="fc")
    g.softmax_xent(x)
    return g.build()


def transformer(b: int = 64) -> Graph:
    seq, vocab, embed, heads, ff, nx, dk = 512, 50_000, 1024, 16, 16 * 512, 6, 128
    g = GraphBuilder(
        "transformer",
        source=f"{_PASE}: Transformer, batch {b}, {nx}+{nx} layers, d_model {embed}, {heads} heads, ff {ff}, seq {seq}",
    )

    def attention(q: TensorRef, k: TensorRef, v: TensorRef) -> TensorRef:
        qkv = g.stack([q, k, v])
        w = g.input((3, heads, embed, dk), param=True)
        qkv = g.einsum("sble,shek->sbhlk", qkv, w, pase_layout=True)
        q, k, v = g.unstack(qkv)
        logits = g.einsum("bhlk,bhmk->bhlm", q, k, pase_layout=True)
        weights = g.softmax(logits, axis=3)
        scores = g.einsum("bhlm,bhmk->bhlk", weights, v, pase_layout=True)
        wo = g.input((heads, embed, dk), param=True)
        return g.einsum("bhlk,hek->ble", scores, wo, pase_layout=True)

    def feed_forward(x: TensorRef) -> TensorRef:
        h = g.einsum("ble,ef->blf", x, g.input((embed, ff), param=True), pointwise=2, pase_layout=True)
        return g.einsum("blf,fe->ble", h, g.input((ff, embed), param=True), pase_layout=True)

    def encoder(x: TensorRef) -> TensorRef:
        n1 = g.layernorm(x)
        att = g.elementwise(x, attention(n1, n1, n1))
        return g.elementwise(att, feed_forward(g.layernorm(att)))

    def decoder(x: TensorRef, memory: TensorRef) -> TensorRef:
        n1 = g.layernorm(x)
        a1 = g.elementwise(x, attention(n1, n1, n1))
        n2 = g.layernorm(a1)
        a2 = g.elementwise(a1, attention(n2, memory, memory))
        return g.elementwise(a2, feed_forward(g.layernorm(a2)))

    pos = g.input((b, seq, embed))
    x = g.elementwise(g.embedding(g.input((b, seq)), vocab, embed, pase_layout=True), pos)
    for _ in range(nx):
        x = encoder(x)
    memory = g.layernorm(x)
    x = g.elementwise(g.embedding(g.input((b, seq)), vocab, embed, pase_layout=True), pos)
    for _ in range(nx):
        x = decoder(x, memory)
    x = g.layernorm(x)
    x = g.einsum("ble,ev->blv", x, g.input((embed, vocab), param=True), pase_layout=True, kind="projection")
    g.softmax_xent(x)
    return g.build()


def gpt(b: int = 8) -> Graph:
    """A GPT-2-medium-style decoder: 24 layers, d_model 1024, 16 heads, seq 1024, vocab 50257."""
    layers, seq, vocab, d, heads = 24, 1024, 50_257, 1024, 16
    dk = d // heads
    g = GraphBuilder(
        "gpt",
        source=f"Radford et al. 2019 (GPT-2 medium shapes): decoder-only, batch {b}, {layers} layers, "
        f"d_model {d}, {heads} heads, seq {seq}, vocab {vocab}",
    )
    x = g.elementwise(g.embedding(g.input((b, seq)), vocab, d), g.input((b, seq, d)))
    for _ in range(layers):
        h = g.layernorm(x)
        q = g.einsum("ble,ehk->bhlk", h, g.input((d, heads, dk), param=True), kind="q")
        k = g.einsum("ble,ehk->bhlk", h, g.input((d, heads, dk), param=True), kind="k")
        v = g.einsum("ble,ehk->bhlk", h, g.input((d, heads, dk), param=True), kind="v")
        logits = g.einsum("bhlk,bhmk->bhlm", q, k, kind="scores")
        probs = g.softmax(logits, axis=3)
        ctx = g.einsum("bhlm,bhmk->bhlk", probs, v, kind="context")
        out = g.einsum("bhlk,hke->ble", ctx, g.input((heads, dk, d), param=True), kind="attn_out")
        x = g.elementwise(x, out)
        h = g.layernorm(x)
        h = g.einsum("ble,ef->blf", h, g.input((d, 4 * d), param=True), pointwise=1, kind="mlp_up")
        h = g.einsum("blf,fe->ble", h, g.input((4 * d, d), param=True), kind="mlp_down")
        x = g.elementwise(x, h)
    x = g.layernorm(x)
    x = g.einsum("ble,ev->blv", x, g.input((d, vocab), param=True), kind="lm_head")
    g.softmax_xent(x)
    return g.build()


def vgg19(b: int = 64) -> Graph:
    """VGG-19 (Simonyan and Zisserman 2015, configuration E) on 224x224 images."""
    g = GraphBuilder("vgg19", source=f"Simonyan & Zisserman 2015, configuration E: VGG-19, batch {b}, 224x224")
    x = g.input((b, 3, 224, 224))
    cin = 3
    for width, convs in ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4)):
        for _ in range(convs):
            x = g.conv(x, (width, cin, 3, 3), pad=1, pointwise=1)
            cin = width
        x = g.pooling(x, (2, 2), stride=2)
    x = g.reshape(x, (b, 512 * 7 * 7))
    x = g.fc(x, 4096, pointwise=1)
    x = g.fc(x, 4096, pointwise=1)
    g.softmax_xent(g.fc(x, 1000))
    return g.build()


ZOO: dict[str, ZooEntry] = {
    "alexnet": ZooEntry(alexnet, "AlexNet, batch 128, 1024 classes (PaSE)", _PASE),
    "inception3": ZooEntry(inception3, "Inception-v3, batch 128 (PaSE)", _PASE),
    "rnnlm": ZooEntry(rnnlm, "RNNLM: 2x LSTM 2048, vocab 100k, seq 256, batch 64 (PaSE)", _PASE),
    "transformer": ZooEntry(transformer, "Transformer 6+6 layers, d 1024, 16 heads, batch 64 (PaSE)", _PASE),
    "resnet101": ZooEntry(resnet101, "ResNet-101, batch 128 (PaSE)", _PASE),
    "gpt": ZooEntry(gpt, "GPT-2-medium-style decoder, 24 layers, d 1024, seq 1024, batch 8", "GPT-2 shapes"),
    "resnet50": ZooEntry(resnet50, "ResNet-50, batch 256, 224x224", "He et al. 2016"),
    "vgg19": ZooEntry(vgg19, "VGG-19, batch 64, 224x224", "Simonyan & Zisserman 2015"),
}
