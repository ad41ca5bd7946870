"""The ``default`` cost profile: seconds on a real machine, the profile users should trust.

Per training step and per device, in microseconds:

- dense products (GEMM, convolution, LSTM): 2 flops per multiply-add, forward plus two backward
  products, at ``efficiency x peak``; fused pointwise work and every other operator are
  memory-bound: bytes read and written at the device memory bandwidth;
- communication: the same reductions PaSE identifies (the output over k splits, the input
  gradient over n splits, the weight gradient over m splits, statistics of split norms and
  softmaxes, halos of split pooling windows) as alpha-beta collectives on the machine's links,
  intra-node when the group lies in a node (:mod:`stratopt.machine`; devices numbered with an
  operator's feature axes innermost: :func:`~stratopt.cost.common.span`); weight gradients
  (products', and norms' scales and shifts) are all-reduced in 25 MB buckets, so each pays its
  share of a collective's latency (each module's in a collective of its own where the machine's
  calibration says ``grad_bucket_mb = 0``, as ``stratopt profile`` writes for stratopt's runtime);
- edges: the bytes each consumer device lacks (forward) and the gradient bytes each producer device
  lacks (backward), one message each on the link the larger of the two layouts uses; where the
  consumer spreads over more devices than the producer, a producer device sends to several through
  its own links, and the busier side counts; where a product's all-reduce (its input gradient's,
  or its partial sums') needs only reduce-scatter the tile the other side holds, the edge takes
  that saving off (Megatron's sequence parallelism: a gather forward and a reduce-scatter back);
- memory: weights, gradients and optimizer state of the device's weight blocks plus its output
  activations (kept for the backward pass), in bytes; it becomes the usage constraint when a
  memory limit is given.

On a calibrated machine (one with a fitted :class:`~stratopt.machine.Calibration`, such
as the ``h100`` preset) the same operators are priced as the step predictor prices them, with the
fitted parameters in place of the datasheet's: a product of ``w`` flops per device takes
``(w + gemm_half) / (gemm_efficiency x peak)`` (small products do not reach the peak); products
marked ``fused_attention`` (FlashAttention, :mod:`stratopt.graph.decoder`) run the causal half
(split over the positions, the busiest device's share: :func:`causal_imbalance`)
at ``attention_efficiency x peak``, 3.5 times the forward (the backward recomputes the scores),
and neither store nor stream the score matrices; memory-bound work streams at ``hbm_efficiency``
of the bandwidth, collectives at ``network_efficiency`` of the links; every product whose weights
FSDP shards costs ``op_overhead_us`` per pass (its hooks around the module); every operator costs
``launch_us`` per pass and call (dispatching it: 0 on the presets, measured by ``stratopt profile``;
an operator imported from a module of several calls, or with pointwise work fused into it, makes
more than one), one with weights ``weight_launch_us`` more, a view (reshape, transpose)
``view_us`` instead, of which ``launch_hidden`` hides under the operator's own work (a GPU's
queue); a recomputed operator costs ``recompute_us`` more; Adam's step streams 30 bytes per weight
element held.
Weight gathers (FSDP) and gradient reductions hide under up to ``overlap`` of the compute
(:meth:`~stratopt.cost.common.VertexCosts.exposed`); ``step_overhead_ms`` is a constant per step.
An operator marked ``tied`` reads another's weight (a tied output projection): its weight has no
state, gather or gradient reduction of its own.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stratopt.cost.common import (
    EdgePricing,
    VertexCosts,
    axes_product,
    expert_sums,
    gemm_axes,
    gemm_shape,
    halo,
    layout,
    lstm_relay,
    memory_bytes,
    output_bytes,
    per_device,
    replicas,
    span,
    weight_tile,
)
from stratopt.graph.ir import Operator, TensorUse
from stratopt.machine import Machine, calibration_of

__all__ = ["DefaultProfile"]

_US = 1e6  # seconds -> microseconds


@dataclasses.dataclass(frozen=True)
class _Relayout:
    """One edge's re-layout between every pair of layouts (each Ku x Kv): microseconds forward and
    backward, whether the consumer fans out over more devices, the devices that exchange the
    pieces, the producer's tile over the consumer's, and whether the consumer's tile lies in the
    producer's (nothing moves forward) or the producer's in the consumer's (nothing moves back)."""

    forward: np.ndarray
    backward: np.ndarray
    spread: np.ndarray
    group: np.ndarray
    ratio: np.ndarray
    inside_producer: np.ndarray
    inside_consumer: np.ndarray


class DefaultProfile(EdgePricing):
    """Realistic step time (microseconds) and memory (bytes) on ``machine``.

    ``dtype_bytes`` is the training dtype (default: the machine's, 2 for bf16 on the presets),
    ``state_bytes`` the optimizer state per weight element (8: Adam's two fp32 moments).
    """

    name = "default"
    units = "us"
    #: Gradients are all-reduced in buckets of this many bytes (:meth:`_grad_ar`), unless the
    #: machine's calibration says otherwise (``grad_bucket_mb``).
    BUCKET_BYTES = 25e6
    #: operators that PyTorch runs as views of their input (no kernel): ``view_us`` to dispatch
    VIEWS = frozenset({"reshape", "transpose", "split", "unstack", "variable"})

    def __init__(self, machine: Machine, *, dtype_bytes: int | None = None, state_bytes: int = 8) -> None:
        self.machine = machine
        self.dtype_bytes = machine.dtype_bytes if dtype_bytes is None else dtype_bytes
        self.state_bytes = state_bytes
        self.flops = machine.peak_tflops * 1e12 * machine.efficiency
        self.hbm = machine.hbm_gbps * 1e9
        self.calibrated = bool(machine.calibration)
        #: the links collectives and messages run on (their achieved bandwidth)
        self.links = machine
        self.attention_flops, self.gemm_half, self.conv_efficiency = self.flops, 0.0, 1.0
        self.gathers = self.scatters = 1.0
        self.op_overhead = self.overlap = self.step_overhead = self.launch = 0.0
        self.weight_launch = self.view = self.launch_hidden = self.recompute = 0.0
        self.bucket = self.BUCKET_BYTES
        if self.calibrated:
            c = calibration_of(machine)
            peak = machine.peak_tflops * 1e12
            self.flops, self.gemm_half = peak * c.gemm_efficiency, c.gemm_half_gflop * 1e9
            self.attention_flops = peak * c.attention_efficiency
            self.hbm = machine.hbm_gbps * 1e9 * c.hbm_efficiency
            net = c.network_efficiency
            self.links = dataclasses.replace(
                machine, intra_gbps=machine.intra_gbps * net, inter_gbps=machine.inter_gbps * net
            )
            self.op_overhead, self.overlap, self.launch = c.op_overhead_us, c.overlap, c.launch_us
            self.weight_launch, self.view, self.launch_hidden = c.weight_launch_us, c.view_us, c.launch_hidden
            self.recompute = c.recompute_us
            self.step_overhead = c.step_overhead_ms * 1e3
            self.bucket = c.grad_bucket_mb * 1e6
            self.conv_efficiency = c.conv_efficiency
            self.gathers, self.scatters = c.gather_efficiency, c.scatter_efficiency

    def _ar(self, elems: np.ndarray, group: np.ndarray, spans: np.ndarray | None = None) -> np.ndarray:
        return self.links.all_reduce(elems * self.dtype_bytes, group, spans) * _US

    def _grad_ar(self, elems: np.ndarray, group: np.ndarray, spans: np.ndarray | None = None) -> np.ndarray:
        """A weight gradient's all-reduce as data parallelism runs it: in buckets of
        :attr:`BUCKET_BYTES` (PyTorch DDP's default), so the gradient pays its share of one
        collective's latency, not a whole one; a whole one where the calibration's bucket is 0
        (each module's gradients reduced on their own, as stratopt's runtime does)."""
        nbytes = elems * self.dtype_bytes
        whole = self.links.all_reduce(nbytes, group, spans)
        if self.bucket <= 0:
            return whole * _US
        steps = np.maximum(np.asarray(group, dtype=np.float64) - 1.0, 0.0)
        latency = 2.0 * steps * self.links.link(group, spans)[1]
        return (whole - latency * (1.0 - np.minimum(1.0, nbytes / self.bucket))) * _US

    def _stream(self, elems: np.ndarray) -> np.ndarray:
        """Microseconds to read or write ``elems`` elements of device memory."""
        return elems * self.dtype_bytes / self.hbm * _US

    def vertex(self, op: Operator, configs: np.ndarray) -> VertexCosts:
        cfg = configs.astype(np.float64)
        handler = getattr(self, f"_{op.op}", self._layout)
        compute, comm = handler(op, cfg)
        fwd = sync = ahead = None
        if op.op in ("gemm", "conv", "lstm"):
            fwd, sync = self._gemm_phases(op, cfg, comm)
        elif op.attrs.get("moe") in ("dispatch", "combine"):  # combine's sum forward, dispatch's backward
            fwd = comm if op.attrs["moe"] == "combine" else np.zeros_like(comm)
        elif op.op == "norm" and any(t.param for t in op.inputs):
            # a norm's own weights (scale, shift): their gradient reduced over the data-parallel
            # replicas as a product's is; its statistics' reductions half forward, half backward
            group, spans = replicas(op, configs)
            fwd, sync = comm / 2.0, self._grad_ar(weight_tile(op, cfg), group, spans)
            comm = comm + sync
        memory = memory_bytes(op, configs, self.dtype_bytes, self.state_bytes)
        role = op.attrs.get("fused_attention")
        if role in ("scores", "softmax"):  # inside the fused kernel: nothing stored
            memory = memory - output_bytes(op, configs, self.dtype_bytes)
        if op.attrs.get("tied"):
            memory = memory - weight_tile(op, cfg) * (2 * self.dtype_bytes + self.state_bytes)
        if role:  # the fused kernel's forward is 1 of its 3.5 passes (the backward recomputes the scores)
            ahead = compute / 3.5
        step = None
        if self.calibrated:  # Adam's step (once a step), and dispatching the operator in each of its 3 passes
            held = weight_tile(op, cfg)
            step = self._optimizer(op, held)
            if op.op in self.VIEWS:
                dispatch = 3.0 * self.view
            else:
                calls = int(op.attrs.get("calls", 1)) + op.pointwise  # a module's calls, the fused ones'
                dispatch = 3.0 * (self.launch * calls + (self.weight_launch if np.any(held > 0) else 0.0))
            compute = compute + step + dispatch - self.launch_hidden * np.minimum(compute, dispatch)
        return VertexCosts(compute, comm, memory, fwd, sync, ahead, per_step=step)

    def recompute_overhead(self, op: Operator) -> float:
        """Microseconds checkpointing costs ``op`` when recomputed, beyond its forward run again
        (the calibration's ``recompute_us``; none for a view, which saves nothing)."""
        return 0.0 if op.op in self.VIEWS else self.recompute

    def _optimizer(self, op: Operator, held: np.ndarray) -> np.ndarray:
        """Adam's step over the weight elements held: fp32 master weights, gradients and two
        moments read and written (30 bytes per element); none for a tied weight."""
        if not self.calibrated or op.attrs.get("tied"):
            return np.zeros_like(held)
        return held * 30.0 / self.hbm * _US

    def _gemm_phases(self, op: Operator, cfg: np.ndarray, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(forward, weight-gradient) parts of a product's communication (see VertexCosts)."""
        a = op.attrs
        if op.attrs.get("lookup"):
            block = per_device(op, cfg)
            rows = axes_product(block, op, a["batch"]) * axes_product(block, op, a["m"])
            fwd = self._ar(rows * axes_product(block, op, a["n"]), axes_product(cfg, op, a["k"]), span(op, cfg, a["k"]))
            return fwd, comm - fwd
        g = gemm_shape(op, cfg)
        m, n, k = (span(op, cfg, axes) for axes in gemm_axes(op))
        fwd = self._ar(g.bb * g.m * g.n, g.ck, k)
        sync = np.zeros_like(fwd) if a.get("tied") else self._grad_ar(g.bb * g.n * g.k, g.cm, m)
        if op.op == "lstm":  # the cell relay happens once forward and once backward
            fwd = fwd + (comm - fwd - sync - self._ar(g.bb * g.m * g.k, g.cn, n)) / 2.0
        return fwd, sync

    def message(self, words: float, same_node: bool) -> float:
        """Microseconds for one point-to-point message of ``words`` values (the simulator's transfers)."""
        m = self.links
        bw, lat = (m.intra_gbps, m.intra_latency_us) if same_node else (m.inter_gbps, m.inter_latency_us)
        return words * self.dtype_bytes / (bw * 1e3) + lat

    def _gemm(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if op.attrs.get("lookup"):
            return self._lookup(op, cfg, per_device(op, cfg))
        g = gemm_shape(op, cfg)
        work = g.bb * 2.0 * g.m * g.n * g.k  # forward flops per device
        if op.attrs.get("fused_attention"):  # the causal half, forward and 2.5x in the backward
            work = work * (0.5 * causal_imbalance(op, cfg) if op.attrs.get("causal") else 1.0)
            compute = 3.5 * work / self.attention_flops * _US
        else:
            rate = self.flops * (self.conv_efficiency if op.op == "conv" else 1.0)
            compute = 3.0 * (work + self.gemm_half) / rate * _US
            # Fused pointwise ops: forward and backward passes over the output block.
            compute = compute + self._stream(g.bb * g.m * g.n * 4.0 * op.pointwise)
        m, n, k = (span(op, cfg, axes) for axes in gemm_axes(op))
        comm = self._ar(g.bb * g.m * g.n, g.ck, k) + self._ar(g.bb * g.m * g.k, g.cn, n)
        if not op.attrs.get("tied"):  # a tied weight's gradient is reduced with its owner's
            comm = comm + self._grad_ar(g.bb * g.n * g.k, g.cm, m)
        return compute, comm

    _conv = _gemm

    def _lookup(self, op: Operator, cfg: np.ndarray, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # An embedding is a gather, not a product with a one-hot matrix: read and write each
        # output row forward, scatter-add the gradient backward. Splitting the vocabulary (k)
        # masks the lookup and all-reduces the output (vocabulary-parallel embedding); the
        # table's gradient is all-reduced over the rows' (m) splits; ids need no gradient.
        a = op.attrs
        rows = axes_product(block, op, a["batch"]) * axes_product(block, op, a["m"])
        width = axes_product(block, op, a["n"])
        compute = self._stream(4.0 * rows * width)
        comm = self._ar(rows * width, axes_product(cfg, op, a["k"]), span(op, cfg, a["k"]))
        comm = comm + self._grad_ar(
            width * axes_product(block, op, a["k"]),
            axes_product(cfg, op, a["m"]) * axes_product(cfg, op, a["batch"]),
            span(op, cfg, [*a["m"], *a["batch"]]),
        )
        return compute, comm

    def _lstm(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        compute, comm = self._gemm(op, cfg)
        # Every cell's output (b, n) is re-laid as the next cell's input (b, k): one message per
        # layer and time step when the layouts differ.
        words, group, steps = lstm_relay(op, cfg)
        relay = self.links.transfer(words * self.dtype_bytes, group) * _US
        return compute, comm + steps * 2.0 * relay

    def _elementwise(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        elems = per_device(op, cfg).prod(axis=1)
        # Two inputs read, one output written, forward and backward, plus fused ops; a mixture of
        # experts' combine (dispatch) split over the experts all-reduces the tokens (their gradient).
        stream = self._stream(elems * (6.0 + 4.0 * op.pointwise))
        words, ways = expert_sums(op, cfg)
        return stream, (self._ar(words, ways, span(op, cfg, ["e"])) if words.any() else np.zeros(cfg.shape[0]))

    def _pool(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        image = np.asarray(op.inputs[0].use.shape, dtype=np.float64)
        splits = cfg[:, [op.axis_index(a) for a in op.attrs["image"]]]
        out = per_device(op, cfg).prod(axis=1)
        compute = self._stream(2.0 * (image.prod() / splits.prod(axis=1) + out))
        ghost, group = halo(op, cfg)
        exchange = self.links.transfer(ghost * self.dtype_bytes, group, messages=2) * _US
        return compute, 2.0 * exchange

    def _norm(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = per_device(op, cfg)
        elems = block.prod(axis=1)
        ax = op.axis_index(op.attrs["axis"])
        compute = self._stream(8.0 * elems)
        others = np.delete(cfg, ax, axis=1).prod(axis=1)
        axis = op.attrs["axis"]
        rest = [x for x in op.axes if x != axis]
        comm = 2.0 * self._ar(2.0 * elems / block[:, ax], cfg[:, ax], span(op, cfg, [axis]))
        comm = comm + self._ar(2.0 * block[:, ax], others, span(op, cfg, rest))
        return compute, comm

    def _softmax(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._rows(op, cfg, 0.0 if op.attrs.get("fused_attention") else 6.0)

    def _softmax_xent(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._rows(op, cfg, 4.0)

    def _rows(self, op: Operator, cfg: np.ndarray, passes: float) -> tuple[np.ndarray, np.ndarray]:
        """A softmax-like operator: ``passes`` streams over its elements, and three row reductions
        across a split of its axis (max and sum forward, one dot product backward)."""
        block = per_device(op, cfg)
        elems = block.prod(axis=1)
        ax = op.axis_index(op.attrs["axis"])
        rows = elems / block[:, ax]
        return self._stream(passes * elems), 3.0 * self._ar(rows, cfg[:, ax], span(op, cfg, [op.attrs["axis"]]))

    def _reduce_mean(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = per_device(op, cfg)
        elems = block.prod(axis=1)
        procs = axes_product(cfg, op, list(op.attrs["axes"]))
        out = elems / axes_product(block, op, list(op.attrs["axes"]))
        return self._stream(2.0 * elems), self._ar(out, procs, span(op, cfg, list(op.attrs["axes"])))

    def _transpose(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        elems = per_device(op, cfg).prod(axis=1)
        return self._stream(4.0 * elems), np.zeros(cfg.shape[0])

    def _layout(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(cfg.shape[0]), np.zeros(cfg.shape[0])

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
        """The edge's cost matrix (Ku x Kv): the re-layout forward and its gradient's backward
        (:meth:`relayout_cost`), less what the re-layout saves the two operators' own collectives.
        A product that all-reduces its input's gradient over its output-feature splits needs only
        reduce-scatter it where the producer holds a tile that many times smaller (a column-parallel
        layer reading a stream split over the sequence: Megatron's sequence parallelism gathers
        forward and reduce-scatters backward); a product (or vocabulary-split lookup) that
        all-reduces its partial sums needs only reduce-scatter them where its only reader
        (``readers``: how many operators read the tensor) takes a tile that many times smaller (the
        row-parallel layer handing on a split stream). Each saving is a reduce-scatter's difference
        to an all-reduce (one all-gather); an edge that moves anything costs at least one message's
        latency. ``forward``: the forward pass's part alone (what a checkpointed module's re-run
        issues again), the forward message less the partial sums' saving (negative where nothing
        moves forward: the producer's priced all-reduce is a reduce-scatter as it runs)."""
        src, dst = layout(producer, produced, src_configs), layout(consumer, consumed, dst_configs)
        d = self._relayout(produced.shape, src, dst, (np.prod(src_configs, axis=1), np.prod(dst_configs, axis=1)))
        sums = self._scattered_sums(producer, src_configs, d) if readers == 1 else 0.0
        if forward:
            return d.forward - sums
        saved = self._scattered_gradient(consumer, consumed, dst_configs, d) + sums
        cost = d.forward + d.backward
        latency = self.links.link(d.group)[1] * _US
        return np.where(d.spread | (saved <= 0.0), cost, np.maximum(cost - saved, np.minimum(cost, latency)))

    def relayout_cost(
        self, shape: tuple[int, ...], src: np.ndarray, dst: np.ndarray, devices: tuple[np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """Forward, each consumer device receives the words it lacks; backward, each producer device
        receives the gradient words it lacks, the consumer's gradient complete on its tile (a
        consumer whose tile holds the producer's sends nothing back: its gradient is sliced; a
        producer whose tile holds the consumer's gathers the gradient back). Where the consumer runs
        on more devices than the producer (its tiles, or copies of them on the splits of axes the
        tensor does not have), some consumer device holds nothing of the tensor and receives its
        whole tile, and each producer device sends to ``pd / ps`` consumer devices through its own
        links (inside a node when they fit in one): its own tile, once, scattered or broadcast along
        a ring, and as much back; the busier of the two sides sets the time."""
        d = self._relayout(shape, src, dst, devices)
        return d.forward + d.backward

    def _relayout(
        self, shape: tuple[int, ...], src: np.ndarray, dst: np.ndarray, devices: tuple[np.ndarray, np.ndarray]
    ) -> _Relayout:
        t = np.asarray(shape, dtype=np.float64)
        fan = devices[1][None, :] / devices[0][:, None]
        spread = fan > 1.0
        own, tile = np.prod(t / src, axis=1)[:, None], np.prod(t / dst, axis=1)[None, :]
        # what the two tiles share on a device that holds both: a layout in fewer pieces than the
        # devices is copied over them, and an operator on fewer devices than the other runs whole
        # on each as PyTorch runs a module it does not split (not PaSE's rule, :func:`needed_words`,
        # which counts a consumer in more pieces as holding nothing)
        shared = np.prod(np.minimum((t / src)[:, None, :], (t / dst)[None, :, :]), axis=2)
        words = np.clip(tile - shared, 0.0, None)
        back = np.clip(own - shared, 0.0, None)
        # the devices a producer device feeds sit next to each other (feature axes innermost): a
        # fan-out over at most a node's devices stays on the node's links, both ways
        fanned_words = np.maximum(words, tile)
        sent = np.minimum(fanned_words * fan, own)  # its tile, scattered or broadcast along a ring
        fanned = self.links.transfer(np.maximum(fanned_words, sent) * self.dtype_bytes, fan) * _US
        group = exchanging(src, dst)
        forward = self.links.transfer(words * self.dtype_bytes, group) * _US
        backward = self.links.transfer(back * self.dtype_bytes, group) * _US
        return _Relayout(
            np.where(spread, fanned, forward),
            np.where(spread, fanned, backward),
            spread,
            group,
            own / tile,
            (words <= 0.0) & ~spread,
            (back <= 0.0) & ~spread,
        )

    def _scattered_gradient(
        self, consumer: Operator, consumed: TensorUse, dst_configs: np.ndarray, d: _Relayout
    ) -> np.ndarray:
        """Per pair (Ku x Kv), what a product's all-reduce of its input's gradient (over its
        output-feature splits c_n) saves as a reduce-scatter: where the producer's tile lies in the
        consumer's and is at least c_n times smaller. Zero elsewhere, and for any other consumer."""
        if consumer.op != "gemm" or consumer.attrs.get("lookup"):
            return np.zeros(d.group.shape)
        _, n, k = gemm_axes(consumer)
        read = {a for dims in consumed.dims for a in dims}
        if read & set(n) or not read & set(k):  # not the (m, k) operand
            return np.zeros(d.group.shape)
        cfg = dst_configs.astype(np.float64)
        cn = axes_product(cfg, consumer, n)
        tile = consumed.size / np.prod(layout(consumer, consumed, cfg), axis=1)
        saving = self.links.all_gather(tile * self.dtype_bytes, cn, span(consumer, cfg, n)) * _US
        ok = d.inside_consumer & (1.0 / d.ratio >= cn[None, :] * (1.0 - 1e-9)) & (cn[None, :] > 1.0)
        return np.where(ok, saving[None, :], 0.0)

    def _scattered_sums(self, producer: Operator, src_configs: np.ndarray, d: _Relayout) -> np.ndarray:
        """Per pair (Ku x Kv), what a product's (or vocabulary-split lookup's) all-reduce of its
        output's partial sums (over its input-feature splits c_k) saves as a reduce-scatter: where
        the consumer's tile lies in the producer's and is at least c_k times smaller."""
        if producer.op != "gemm" or not producer.outputs:
            return np.zeros(d.group.shape)
        cfg = src_configs.astype(np.float64)
        k = list(producer.attrs["k"])
        ck = axes_product(cfg, producer, k)
        out = producer.outputs[0]
        tile = out.size / np.prod(layout(producer, out, cfg), axis=1)
        saving = self.links.all_gather(tile * self.dtype_bytes, ck, span(producer, cfg, k)) * _US
        ok = d.inside_producer & (d.ratio >= ck[:, None] * (1.0 - 1e-9)) & (ck[:, None] > 1.0)
        return np.where(ok, saving[:, None], 0.0)

    def sharded(self, op: Operator, configs: np.ndarray, base: VertexCosts, *, regather: bool = True) -> VertexCosts:
        """The same configurations with the operator's weight state sharded over its replicas (ZeRO-3 /
        FSDP): the devices that hold the same weight tile (the splits of the axes no weight has) each keep
        1/r of its value, gradient and optimizer state; the tile is all-gathered before the forward and
        again before the backward pass, and the gradient reduce-scattered instead of all-reduced. Against
        ``base`` (the unsharded costs of the same rows): the gradient's (bucketed) all-reduce becomes a
        reduce-scatter, and two all-gathers of the tile come in, one on the forward path; the state
        held drops to 1/r. ``regather=False``: ZeRO-2 (FSDP's ``reshard_after_forward=False``), the
        tile gathered once, before the forward pass, and held whole until the backward pass is done:
        the gradient and optimizer state drop to 1/r, the value does not."""
        cfg = configs.astype(np.float64)
        reps, spans = replicas(op, cfg)
        held = weight_tile(op, cfg) * (0.0 if op.attrs.get("tied") else 1.0)
        ring = self.links.all_gather(held * self.dtype_bytes, reps, spans) * _US
        return self._shard(op, base, held, reps, ring, 2.0 if regather else 1.0, np.zeros_like(ring))

    def hybrid(self, op: Operator, configs: np.ndarray, base: VertexCosts) -> tuple[VertexCosts, np.ndarray]:
        """The same configurations with the weight state sharded inside each node only (HSDP: FSDP
        over the replicas a node holds, data parallel across the nodes), and which rows have such a
        form (a replica group that spans several nodes, with several replicas in each). Against
        ``base``: the tile is all-gathered inside the node before the forward and again before the
        backward pass; the gradient is reduce-scattered inside the node and each shard all-reduced
        over the nodes (one replica group per shard); the state held drops to 1/s, s the
        replicas per node: (the costs, s per row, 1 where there is no such form)."""
        cfg = configs.astype(np.float64)
        reps, spans = replicas(op, cfg)
        node = float(self.links.devices_per_node)
        stride = spans / np.maximum(reps, 1.0)  # devices between two replicas
        inside = np.where((spans > node) & (stride < node), np.floor(node / stride), 1.0)
        s = np.where((inside > 1) & (np.mod(reps, inside) == 0), inside, 1.0)
        held = weight_tile(op, cfg) * (0.0 if op.attrs.get("tied") else 1.0)
        ring = self.links.all_gather(held * self.dtype_bytes, s, s * stride) * _US
        reduce = self.links.all_reduce(held / s * self.dtype_bytes, reps / s, spans) * _US
        return self._shard(op, base, held, s, ring, 2.0, reduce), s

    def _shard(
        self,
        op: Operator,
        base: VertexCosts,
        held: np.ndarray,
        group: np.ndarray,
        ring: np.ndarray,
        gathers: float,
        reduce: np.ndarray,
    ) -> VertexCosts:
        """``base`` with the weight state of ``held`` elements sharded over ``group`` devices: the
        (bucketed) gradient all-reduce becomes a reduce-scatter (``ring``, one all-gather's ring
        formula, at the reduce-scatters' speed) and ``reduce`` (HSDP's all-reduce of each shard
        across the groups), the tile is gathered ``gathers`` times (``ring`` at the gathers' speed;
        one on the forward path), the optimizer steps on 1/group, FSDP's hooks cost a fixed time per
        pass of a product, and the bytes held drop by the gradient and optimizer state sharded (and
        the value, gathered twice: ZeRO-3; ZeRO-2 keeps it whole)."""
        gather, scatter = ring / self.gathers, ring / self.scatters
        fwd, _, sync = base.phases()
        kept = (2 if gathers == 2.0 else 1) * self.dtype_bytes + self.state_bytes  # bytes per element sharded
        saved = held * kept * (1.0 - 1.0 / group)
        optimizer = self._optimizer(op, held) * (1.0 - 1.0 / group)
        hooks = 3.0 * self.op_overhead if op.op in ("gemm", "conv", "lstm") else 0.0
        return VertexCosts(
            base.compute - optimizer + hooks,
            base.comm - sync + gathers * gather + scatter + reduce,
            base.memory - saved,
            fwd + gather,
            scatter + reduce,
            base.forward_compute,
            gathers * gather,
            None if base.per_step is None else base.per_step - optimizer,
        )

    def describe(self) -> str:
        m = self.machine
        return (
            f"default: step time in microseconds on {m.name} ({m.peak_tflops:g} TFLOPS x {m.efficiency:g}, "
            f"HBM {m.hbm_gbps:g} GB/s, {m.devices_per_node} per node, {m.intra_gbps:g}/{m.inter_gbps:g} GB/s), "
            f"{self.dtype_bytes}-byte values"
        )


def causal_imbalance(op: Operator, configs: np.ndarray) -> np.ndarray:
    """Per configuration, how much more than its share of a causal attention product's work its
    busiest device does (the others wait for it at the next collective): splitting the query (or
    key) positions ``c`` ways into contiguous ranges gives the last queries (the first keys) ``2 -
    1/c`` times the average; splitting both, some device holds a block wholly below the diagonal,
    twice the average; splitting neither (heads, batch), 1. A load-balanced order of the positions
    (context parallelism's zigzag) would even it out; an operator's split is contiguous.

    The query positions index the output's second-to-last dimension; the keys its last (the
    scores) or the first input's last (the context, ``probabilities x values``)."""
    role = op.attrs.get("fused_attention")
    out = op.outputs[0].dims if op.outputs else ()
    if role not in ("scores", "context") or len(out) < 2 or not op.inputs:
        return np.ones(configs.shape[0])
    keys = out[-1] if role == "scores" else op.inputs[0].use.dims[-1]
    cq = axes_product(np.asarray(configs, dtype=np.float64), op, list(out[-2]))
    ck = axes_product(np.asarray(configs, dtype=np.float64), op, list(keys))
    return np.where((cq > 1.0) & (ck > 1.0), 2.0, 2.0 - 1.0 / np.maximum(cq, ck))


def exchanging(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """How many devices exchange a tensor's pieces between the producer's splits ``src`` and the
    consumer's ``dst`` (one row per layout; a (Ku, Kv) matrix): the larger side's devices, less the
    tensor's outer splits the two share. A split both sides make alike on the tensor's first
    dimensions (the batch, split over the data-parallel groups) cuts the re-layout into independent
    groups of devices that lie next to each other (feature axes innermost), each moving its own
    tile: a tensor-parallel group's gather inside a node, not a transfer across all the devices."""
    total = np.maximum(np.prod(src, axis=1)[:, None], np.prod(dst, axis=1)[None, :])
    shared = np.ones(total.shape)
    alike = np.ones(total.shape, dtype=bool)  # the first dimensions so far split alike
    for i in range(src.shape[1]):
        a, b = src[:, i][:, None], dst[:, i][None, :]
        alike &= a == b
        shared = np.where(alike, shared * a, shared)
    return total / shared
