"""Shared pieces of the cost profiles: tensor layouts under configurations, overlap of layouts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stratopt.graph.ir import Operator, TensorUse

__all__ = [
    "EdgePricing",
    "GemmShape",
    "VertexCosts",
    "axes_product",
    "expert_sums",
    "gemm_axes",
    "gemm_shape",
    "halo",
    "layout",
    "lstm_relay",
    "memory_bytes",
    "needed_words",
    "output_bytes",
    "per_device",
    "replicas",
    "span",
    "weight_tile",
]


@dataclass(frozen=True)
class VertexCosts:
    """Per-configuration costs of one operator: compute and communication time, memory bytes.

    The simulator also needs to know *when* the communication happens: ``forward_comm`` is the part
    on the forward path (the output's reduction over split k), ``grad_sync`` the weight-gradient
    reduction that may overlap the rest of the backward pass; the remainder of ``comm`` is on the
    backward path. A profile that does not say puts half on each path and nothing in ``grad_sync``.
    ``forward_compute`` is the forward pass's part of ``compute`` (default a third: a product's
    backward pass is two products of its size); a recomputed configuration runs it twice.
    ``weight_gather`` is the part of ``comm`` that all-gathers sharded weights (FSDP, forward and
    backward), which frameworks prefetch under the compute. ``per_step`` is the part of ``compute``
    done once a step however many micro-batches it accumulates (the optimizer's update of the
    weights held).
    """

    compute: np.ndarray
    comm: np.ndarray
    memory: np.ndarray
    forward_comm: np.ndarray | None = None
    grad_sync: np.ndarray | None = None
    forward_compute: np.ndarray | None = None
    weight_gather: np.ndarray | None = None
    per_step: np.ndarray | None = None

    @property
    def total(self) -> np.ndarray:
        """Compute plus all communication, none of it hidden."""
        return self.compute + self.comm

    def exposed(self, overlap: float) -> np.ndarray:
        """Compute plus the communication not hidden when collectives run on their own stream and
        hide under up to ``overlap`` of the compute: the weight gathers under the operator's
        compute, its gradient reduction under its backward pass (0: :attr:`total`)."""
        if not overlap:
            return self.total
        _, backward = self.compute_phases()
        sync = self.phases()[2]
        gather = np.zeros_like(self.comm) if self.weight_gather is None else self.weight_gather
        hidden = np.minimum(gather, overlap * self.compute) + np.minimum(sync, overlap * backward)
        return self.total - hidden

    def exposed_sync(self, overlap: float) -> np.ndarray:
        """The part of :meth:`exposed` that is the gradient reduction: once per iteration however
        many micro-batches it accumulates."""
        sync = self.phases()[2]
        return sync if not overlap else np.maximum(sync - overlap * self.compute_phases()[1], 0.0)

    def compute_phases(self) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) compute per configuration; they sum to ``compute``."""
        if self.forward_compute is None:
            return self.compute / 3.0, 2.0 * self.compute / 3.0
        return self.forward_compute, self.compute - self.forward_compute

    def phases(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(forward, backward, gradient-sync) communication per configuration; they sum to ``comm``."""
        fwd = self.comm / 2.0 if self.forward_comm is None else self.forward_comm
        sync = np.zeros_like(self.comm) if self.grad_sync is None else self.grad_sync
        return fwd, np.clip(self.comm - fwd - sync, 0.0, None), sync


def layout(op: Operator, use: TensorUse, configs: np.ndarray) -> np.ndarray:
    """Split count of every dimension of ``use`` under each configuration: shape (K, ndim).

    A dimension indexed by several axes is split by their product; by none, not at all.
    """
    out = np.ones((configs.shape[0], len(use.dims)), dtype=np.float64)
    for d, group in enumerate(use.dims):
        for axis in group:
            out[:, d] *= configs[:, op.axis_index(axis)]
    return out


def per_device(op: Operator, configs: np.ndarray) -> np.ndarray:
    """The domain block each device holds: sizes / split counts, shape (K, naxes), float."""
    return np.asarray(op.sizes, dtype=np.float64) / configs


def axes_product(values: np.ndarray, op: Operator, axes: list[str]) -> np.ndarray:
    """Per configuration, the product of ``values`` (K x naxes) over the named axes (1 for none)."""
    out = np.ones(values.shape[0], dtype=np.float64)
    for a in axes:
        out = out * values[:, op.axis_index(a)]
    return out


def expert_sums(op: Operator, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(words, ways) of the token rows a mixture of experts' dispatch or combine
    (``attrs["moe"]``, :meth:`~stratopt.graph.GraphBuilder.moe`) sums over its split experts, per
    configuration: combine's output, whose parts each device's experts add (all-reduced forward),
    and dispatch's input, whose gradient each device's experts add (all-reduced backward); each
    device's tile of the tokens, and the split of the expert axis (1: nothing to sum)."""
    role = op.attrs.get("moe")
    ways = axes_product(configs, op, ["e"]) if role in ("dispatch", "combine") else np.ones(configs.shape[0])
    if role not in ("dispatch", "combine"):
        return np.zeros(configs.shape[0]), ways
    use = op.outputs[0] if role == "combine" else op.inputs[0].use
    words = use.size / np.prod(layout(op, use, configs), axis=1)
    return np.where(ways > 1, words, 0.0), ways


def span(op: Operator, configs: np.ndarray, axes: list[str]) -> np.ndarray:
    """Per configuration, how many consecutive devices a collective over the splits of ``axes``
    lies among (see :mod:`stratopt.machine`): devices are numbered with the operator's last axis
    varying fastest, so a group over its outermost split axis in ``axes`` spans that axis and every
    axis inside it. Leading (batch) axes are the outermost, feature axes the innermost: tensor
    parallelism stays inside a node and data parallelism crosses nodes, as Megatron-LM lays them out.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("t"); _ = g.fc(g.input((64, 512)), 512)
    >>> op = g.build().operators[0]  # axes b, n, k
    >>> span(op, np.array([[4.0, 8.0, 1.0], [4.0, 1.0, 1.0]]), ["b"]).tolist()
    [32.0, 4.0]
    """
    cfg = np.asarray(configs, dtype=np.float64)
    if not axes or cfg.size == 0:
        return np.ones(cfg.shape[0])
    idx = sorted(op.axis_index(a) for a in axes)
    inner = np.cumprod(cfg[:, ::-1], axis=1)[:, ::-1]  # inner[:, i] = prod of the splits of axes i..end
    split = cfg[:, idx] > 1
    first = np.asarray(idx)[np.argmax(split, axis=1)]
    return np.where(split.any(axis=1), inner[np.arange(cfg.shape[0]), first], 1.0)


def gemm_axes(op: Operator) -> tuple[list[str], list[str], list[str]]:
    """The (m, n, k) axis lists of a ``gemm``/``conv`` operator (batch axes are not among them) or an LSTM."""
    a = op.attrs
    if op.op == "lstm":
        return [a["seq"], a["batch"]], [a["n"]], [a["k"]]
    return list(a["m"]), list(a["n"]), list(a["k"])


@dataclass(frozen=True)
class GemmShape:
    """A (batched) GEMM per device: batch count ``bb``, block sizes m, n, k, split counts of m, n, k."""

    bb: np.ndarray
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    cm: np.ndarray
    cn: np.ndarray
    ck: np.ndarray


def gemm_shape(op: Operator, configs: np.ndarray) -> GemmShape:
    """The GEMM a ``gemm``/``conv`` operator (groups in its attrs) or an ``lstm`` computes.

    PaSE prices a stacked LSTM as one batched GEMM: batch = layers, m = seq x batch,
    n = 4 gates x units, k = [input, hidden] = 2 x units.
    """
    a = op.attrs
    block = per_device(op, configs)
    if op.op == "lstm":
        return GemmShape(
            axes_product(block, op, [a["layer"]]),
            axes_product(block, op, [a["seq"], a["batch"]]),
            4.0 * axes_product(block, op, [a["n"]]),
            2.0 * axes_product(block, op, [a["k"]]),
            axes_product(configs, op, [a["seq"], a["batch"]]),
            axes_product(configs, op, [a["n"]]),
            axes_product(configs, op, [a["k"]]),
        )
    return GemmShape(
        axes_product(block, op, a["batch"]),
        axes_product(block, op, a["m"]),
        axes_product(block, op, a["n"]),
        axes_product(block, op, a["k"]),
        axes_product(configs, op, a["m"]),
        axes_product(configs, op, a["n"]),
        axes_product(configs, op, a["k"]),
    )


def lstm_relay(op: Operator, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Re-laying an LSTM cell's output (b, n) as the next cell's input (b, k): (words each device
    receives, devices of the larger layout, how many times per step: layers x sequence length).
    Overlap rules as :func:`needed_words`."""
    a = op.attrs
    block = per_device(op, configs)
    col = op.axis_index
    b_block, n_block, k_block = (block[:, col(a[x])] for x in ("batch", "n", "k"))
    p_out = configs[:, col(a["batch"])] * configs[:, col(a["n"])]
    p_in = configs[:, col(a["batch"])] * configs[:, col(a["k"])]
    overlap = np.where(p_in > p_out, 0.0, b_block * np.minimum(n_block, k_block))
    words = np.clip(b_block * k_block - overlap, 0.0, None)
    return words, np.maximum(p_in, p_out), op.size_of(a["layer"]) * op.size_of(a["seq"])


def halo(op: Operator, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A pooling window's halo: (extra input elements a device needs, devices used), per config.

    A block split along h (w) needs r (s) more rows (columns) of its input image.
    """
    r, s = op.attrs["window"]
    splits = configs[:, [op.axis_index(a) for a in op.attrs["image"]]].astype(np.float64)
    tile = np.asarray(op.inputs[0].use.shape, dtype=np.float64) / splits
    h = tile[:, 2] + np.where(splits[:, 2] > 1, r, 0)
    w = tile[:, 3] + np.where(splits[:, 3] > 1, s, 0)
    ghost = (h * w - tile[:, 2] * tile[:, 3]) * tile[:, 0] * tile[:, 1]
    return ghost, splits.prod(axis=1)


def needed_words(shape: tuple[int, ...], src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Words each consumer device must receive to change a tensor's layout from ``src`` splits
    to ``dst`` splits (one row per layout): a (Ku, Kv) matrix.

    A consumer needs its whole tile ``prod(T_i / dst_i)``; it already holds the part that
    overlaps the producer's tile ``prod(min(T_i / src_i, T_i / dst_i))``, except when the
    consumer uses more devices than the producer, where some consumer holds nothing (PaSE's
    GetAreaNeeded, which we follow exactly).
    """
    t = np.asarray(shape, dtype=np.float64)
    s_tile = t / src  # (Ku, d)
    d_tile = t / dst  # (Kv, d)
    p_src = np.prod(src, axis=1)
    p_dst = np.prod(dst, axis=1)
    need = np.prod(d_tile, axis=1)[None, :]
    overlap = np.prod(np.minimum(s_tile[:, None, :], d_tile[None, :, :]), axis=2)
    overlap = np.where(p_dst[None, :] > p_src[:, None], 0.0, overlap)
    return np.clip(need - overlap, 0.0, None)


def memory_bytes(op: Operator, configs: np.ndarray, dtype_bytes: int, state_bytes: int) -> np.ndarray:
    """Bytes one device holds for ``op`` under each configuration.

    Weights (graph inputs marked ``param``) count their value and gradient in the training dtype
    plus ``state_bytes`` of optimizer state per element (8 for Adam's two fp32 moments); outputs
    count once, kept for the backward pass. A weight whose dimensions are not split is held
    whole by every device (data parallelism replicates it).
    """
    total = np.zeros(configs.shape[0], dtype=np.float64)
    for t in op.inputs:
        if t.param:
            tile = t.use.size / np.prod(layout(op, t.use, configs), axis=1)
            total += tile * (2 * dtype_bytes + state_bytes)
    return total + output_bytes(op, configs, dtype_bytes)


def output_bytes(op: Operator, configs: np.ndarray, dtype_bytes: int) -> np.ndarray:
    """Bytes of the operator's outputs one device holds under each configuration (kept for the
    backward pass unless the operator is recomputed)."""
    total = np.zeros(configs.shape[0], dtype=np.float64)
    for use in op.outputs:
        total += use.size / np.prod(layout(op, use, configs), axis=1) * dtype_bytes
    return total


def weight_tile(op: Operator, configs: np.ndarray) -> np.ndarray:
    """Per configuration, the weight elements one device holds (every ``param`` input's tile)."""
    total = np.zeros(configs.shape[0], dtype=np.float64)
    for t in op.inputs:
        if t.param:
            total += t.use.size / np.prod(layout(op, t.use, configs), axis=1)
    return total


def replicas(op: Operator, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration, (how many devices hold the same weight tile, the span of that group): the
    splits of the axes that index no weight (data parallelism's gradient all-reduce group)."""
    indexed = {a for t in op.inputs if t.param for dims in t.use.dims for a in dims}
    free = [a for a in op.axes if a not in indexed]
    return axes_product(np.asarray(configs, dtype=np.float64), op, free), span(op, configs, free)


class EdgePricing:
    """What every profile's edge cost shares: the words each consumer device needs beyond what it
    already holds, between the producer's layout of a tensor and the consumer's; a profile prices
    those words (:meth:`words_cost`)."""

    def edge(
        self,
        producer: Operator,
        produced: TensorUse,
        src_configs: np.ndarray,
        consumer: Operator,
        consumed: TensorUse,
        dst_configs: np.ndarray,
        *,
        readers: int = 1,
        forward: bool = False,
    ) -> np.ndarray:
        """The edge's cost matrix (Ku x Kv) for every pair of the two operators' configurations
        (``readers``: how many operators read the tensor; a profile may price by it); ``forward``:
        the forward pass's part alone (here half: a message each way)."""
        src = layout(producer, produced, src_configs)
        dst = layout(consumer, consumed, dst_configs)
        devices = (np.prod(src_configs, axis=1), np.prod(dst_configs, axis=1))
        return self.relayout_cost(produced.shape, src, dst, devices) / (2.0 if forward else 1.0)

    def relayout_cost(
        self, shape: tuple[int, ...], src: np.ndarray, dst: np.ndarray, devices: tuple[np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """The cost of changing a tensor of ``shape`` from the producer's tiles ``src`` to the
        consumer's ``dst``, the two operators running on ``devices`` (per configuration, each
        side): the words each consumer device lacks (:func:`needed_words`), priced."""
        return self.words_cost(needed_words(shape, src, dst), src, dst)

    def words_cost(self, words: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The cost of moving ``words`` (Ku x Kv) between the producer's tiles ``src`` and the
        consumer's ``dst``, forward and back."""
        raise NotImplementedError
