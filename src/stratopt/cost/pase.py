"""The ``pase`` cost profile: PaSE's t_V and t_E, exactly, so that our optima can be checked.

Units are PaSE's: "flops" of one device, with communicated words converted at
``r = peak_flops / (bandwidth / 8 bytes per word)``, which is 5000 for PaSE's defaults of
10 TFLOPS and 16 GB/s. An all-reduce of w words over P devices costs ``r * 2 (P-1) w / P``.
Every formula below follows PaSE's ``nn_ops.py`` (baidu-research/PaSE); we checked them against
its published optima (AlexNet and RNNLM at p = 4, in the tests).

References: V. Elango, "Pase: Parallelization Strategies for Efficient DNN Training", IPDPS 2021.
"""

from __future__ import annotations

import numpy as np

from stratopt.cost.common import (
    EdgePricing,
    VertexCosts,
    axes_product,
    expert_sums,
    gemm_shape,
    halo,
    lstm_relay,
    memory_bytes,
    per_device,
)
from stratopt.graph.ir import LAYOUT_OPS, Operator
from stratopt.machine import Machine

__all__ = ["PaseProfile"]


class PaseProfile(EdgePricing):
    """PaSE's cost model on a machine (only peak flops and bandwidth matter).

    Examples
    --------
    >>> from stratopt.machine import get_machine
    >>> PaseProfile(get_machine("pase")).r
    5000.0
    """

    name = "pase"
    units = "flops"
    #: Bytes per word for the memory estimate (PaSE itself has no memory model; fp32 training).
    dtype_bytes = 4
    state_bytes = 8

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        # r: flops per communicated word; words are 8 bytes in PaSE's conversion.
        self.r = 8000.0 * machine.peak_tflops / machine.inter_gbps

    def all_reduce(self, words: np.ndarray, procs: np.ndarray) -> np.ndarray:
        procs = np.asarray(procs, dtype=np.float64)
        return self.r * 2.0 * (procs - 1.0) * words / procs

    # -- vertices --------------------------------------------------------------------------------

    def vertex(self, op: Operator, configs: np.ndarray) -> VertexCosts:
        """t_V of every configuration of ``op``, split into compute and communication."""
        handler = getattr(self, f"_{op.op}", None)
        k = configs.shape[0]
        if op.op in LAYOUT_OPS or handler is None:
            compute, comm = np.zeros(k), np.zeros(k)
        else:
            compute, comm = handler(op, configs.astype(np.float64))
        fwd = sync = None
        if op.op in ("gemm", "conv", "lstm"):
            g = gemm_shape(op, configs.astype(np.float64))
            fwd = g.bb * self.all_reduce(g.m * g.n, g.ck)
            sync = g.bb * self.all_reduce(g.n * g.k, g.cm)
            if op.op == "lstm":  # the cell relay happens once forward and once backward
                fwd = fwd + (comm - fwd - sync) / 2.0 - g.bb * self.all_reduce(g.m * g.k, g.cn) / 2.0
        elif op.attrs.get("moe") in ("dispatch", "combine"):  # combine's sum forward, dispatch's backward
            fwd = comm if op.attrs["moe"] == "combine" else np.zeros_like(comm)
        return VertexCosts(compute, comm, memory_bytes(op, configs, self.dtype_bytes, self.state_bytes), fwd, sync)

    def message(self, words: float, same_node: bool) -> float:
        """Time of one point-to-point message of ``words`` elements (the simulator's transfers)."""
        return self.r * words

    def _gemm(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # One GEMM forward and two backward; each fused pointwise op costs a forward, a backward
        # and a chain-rule product per output element. Reductions: the output over k splits,
        # the input gradient over n splits, the weight gradient over m splits.
        g = gemm_shape(op, cfg)
        compute = 3.0 * g.m * g.n * g.k
        if op.pointwise > 0:
            compute = compute + 3.0 * op.pointwise * g.m * g.n
        comm = self.all_reduce(g.m * g.n, g.ck) + self.all_reduce(g.m * g.k, g.cn) + self.all_reduce(g.n * g.k, g.cm)
        return g.bb * compute, g.bb * comm

    _conv = _gemm

    def _lstm(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # PaSE prices a stacked LSTM as one batched GEMM (see gemm_shape) with 3 fused pointwise
        # ops, plus, per layer and time step, the words that re-lay the cell output (b, n) as
        # the next cell's input (b, k).
        compute, comm = self._gemm(op, cfg)
        words, _, steps = lstm_relay(op, cfg)
        return compute, comm + steps * self.r * words

    def _elementwise(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        elems = per_device(op, cfg).prod(axis=1)
        words, ways = expert_sums(op, cfg)  # a mixture of experts' sums over split experts
        return (1.0 + op.pointwise) * elems, self.all_reduce(words, ways) if words.any() else np.zeros(cfg.shape[0])

    def _pool(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        compute = per_device(op, cfg).prod(axis=1)
        ghost, _ = halo(op, cfg)
        return compute, self.r * ghost

    def _norm(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = per_device(op, cfg)
        elems = block.prod(axis=1)
        ax = op.axis_index(op.attrs["axis"])
        # Mean and variance: 2 reductions forward, 2 backward, of one word per other element.
        comm = 4.0 * self.all_reduce(elems / block[:, ax], cfg[:, ax])
        # Scale and bias: broadcast forward, gradient reduction backward.
        others = np.delete(cfg, ax, axis=1).prod(axis=1)
        comm = comm + 4.0 * self.all_reduce(block[:, ax], others)
        return 16.0 * elems, comm

    def _softmax(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = per_device(op, cfg)
        elems = block.prod(axis=1)
        ax = op.axis_index(op.attrs["axis"])
        size = op.sizes[ax]
        # Exponent (3) and sum (1) forward; the Jacobian product backward costs size per element.
        compute = 4.0 * elems + elems * size
        rows = elems / block[:, ax]
        comm = self.all_reduce(rows, cfg[:, ax]) + self.all_reduce(rows * size, cfg[:, ax])
        comm = comm + self.all_reduce(rows, cfg[:, ax])
        return compute, comm

    def _softmax_xent(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = per_device(op, cfg)
        elems = block.prod(axis=1)
        ax = op.axis_index(op.attrs["axis"])
        rows = elems / block[:, ax]
        compute = 4.0 * elems + 2.0 * rows
        # Partial sums and the label broadcast along a split class axis: 2 words per row.
        comm = np.where(cfg[:, ax] > 1, self.r * 2.0 * rows, 0.0)
        return compute, comm

    def _reduce_mean(self, op: Operator, cfg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        elems = per_device(op, cfg).prod(axis=1)
        procs = axes_product(cfg, op, list(op.attrs["axes"]))
        return np.zeros(cfg.shape[0]), self.all_reduce(elems, procs)

    # -- edges -----------------------------------------------------------------------------------

    def words_cost(self, words: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """t_E: ``r * 2 * words`` each consumer device receives (forward, and the gradient back)."""
        return self.r * 2.0 * words

    def describe(self) -> str:
        return f"pase: PaSE's cost model, units 'flops', r = {self.r:g} flops per word ({self.machine.name})"
