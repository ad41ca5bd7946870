"""A training step of a decoder-only transformer, as real runs do it, predicted in closed form.

What the additive model of :mod:`stratopt.cost` leaves out and measured runs depend on:

- **fused attention** (FlashAttention): the score matrices are neither stored nor streamed
  through memory; the kernel runs the causal half of the products, forward, and recomputes the
  scores in the backward pass (2.5 times the forward's products);
- **activation recomputation**: each block keeps its input only and runs its forward again
  during the backward pass (less memory, one more forward);
- **micro-batches and gradient accumulation**: FSDP (ZeRO-3) gathers the weights for every
  micro-batch's forward and backward pass; gradients are reduced and the optimizer steps once per
  step; ZeRO-2 (``zero2``) gathers the weights once per step; DDP all-reduces the gradients once;
- **communication overlapped with computation**: the weight gathers of a micro-batch hide under
  its compute (FSDP prefetches the next block's weights), the gradient reduction under the last
  backward pass, up to the fraction ``overlap``; Megatron's activation all-reduces lie on the
  critical path and are exposed;
- **the efficiency of a product as a function of its size**: a GEMM of ``w`` flops per device
  runs at ``gemm_efficiency * w / (w + gemm_half)`` of the peak (small products do not reach it);
- **the optimizer step's memory traffic** (Adam in fp32: about 30 bytes per parameter held).

The machine's free parameters (:class:`Calibration`) are fitted to measured runs by
:func:`stratopt.planning.calibrate.calibrate`. Model FLOPs utilisation and hardware FLOPs
utilisation follow llm-foundry: MFU counts ``6 N + 12 L d s`` flops per token, HFU also the
recomputed forward.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from stratopt.errors import ModelError
from stratopt.graph.decoder import Decoder, parse_decoder
from stratopt.machine import Calibration, Machine, calibration_of, get_machine

__all__ = ["STRATEGIES", "Calibration", "Decoder", "Prediction", "Run", "calibration_of", "parse_decoder", "predict"]

#: How weights, gradients and optimizer state are spread: ``megatron-tpT`` is tensor parallel T
#: inside a node with DDP across.
STRATEGIES = ("fsdp", "zero2", "ddp", "megatron-tpT")


#: Products with weights of one decoder block (the q/k/v product, the output projection, the MLP's
#: two) and outside the blocks (embedding, output projection): those of the decoder's graph, each
#: of which costs ``op_overhead_us`` per pass where FSDP shards its weights.
BLOCK_OPERATORS, OUTER_OPERATORS = 4, 2


@dataclass(frozen=True)
class Run:
    """How the model is trained: ``nodes x gpus_per_node`` devices, sequences of ``seq`` tokens,
    ``micro_batch`` sequences per device per micro-batch, ``grad_accum`` micro-batches per step."""

    seq: int
    nodes: int
    gpus_per_node: int
    strategy: str
    micro_batch: int
    grad_accum: int = 1
    recompute: bool = False

    def __post_init__(self) -> None:
        for name in ("seq", "nodes", "gpus_per_node", "micro_batch", "grad_accum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"{name} must be a positive integer, got {value!r}")
        if self.strategy not in ("fsdp", "zero2", "ddp") and not re.fullmatch(r"megatron-tp\d+", self.strategy):
            raise ModelError(f"unknown strategy {self.strategy!r}; choose fsdp, zero2, ddp or megatron-tpT")
        if self.tp > self.gpus_per_node or self.gpus_per_node % self.tp:
            raise ModelError(f"{self.strategy}: tensor parallelism must divide the {self.gpus_per_node} GPUs of a node")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def tp(self) -> int:
        return int(self.strategy.removeprefix("megatron-tp")) if self.strategy.startswith("megatron-tp") else 1


@dataclass(frozen=True)
class Prediction:
    """A predicted step: seconds, throughput, utilisation, memory per device (bytes) and the
    parts of the step (seconds): compute, exposed communication, optimizer, overhead."""

    step_time: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    memory: float
    fits: bool
    parts: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def predict(model: Decoder, run: Run, machine: str | Machine = "h100") -> Prediction:
    """The step time of ``run`` on ``machine`` (its calibration: :func:`calibration_of`).

    >>> mpt7b = parse_decoder("mpt:layers=32,d_model=4096,heads=32,vocab=50368")
    >>> p = predict(mpt7b, Run(seq=2048, nodes=1, gpus_per_node=8, strategy="fsdp", micro_batch=6))
    >>> p.fits, round(p.mfu, 2) == round(p.hfu, 2)
    (True, True)
    """
    m = get_machine(machine) if isinstance(machine, str) else machine
    c = calibration_of(m)
    peak = m.peak_tflops * 1e12
    hbm = m.hbm_gbps * 1e9 * max(c.hbm_efficiency, 1e-6)
    L, d, V, s, t = model.layers, model.d_model, model.vocab, run.seq, run.tp
    T = run.micro_batch * s  # tokens per micro-batch per device
    ff = model.mlp_ratio * d
    dp = run.gpus // t

    def gemm(flops: float) -> float:
        eff = max(c.gemm_efficiency, 1e-6) * flops / (flops + c.gemm_half_gflop * 1e9)
        return flops / (peak * max(eff, 1e-9))

    # One block's forward on one micro-batch: its four products (split t ways), fused causal
    # attention, the memory-bound work and each operator's fixed cost, as the ``default`` profile
    # prices the operators of the decoder's graph (stratopt.planning.decoder): a norm streams 8
    # values per element forward and backward, a residual add 6, the activation fused into the
    # MLP's first product 4; the backward pass is two thirds of that, and of each operator's cost.
    block_gemms = sum(gemm(2.0 * T * d * n / t) for n in (3 * d, d, ff, ff))
    attention = 2.0 * T * s * d / t / (peak * max(c.attention_efficiency, 1e-6))
    streamed = 2.0 * T * d * (2 * 8.0 + 2 * 6.0 + 4.0 * model.mlp_ratio / t) / hbm / 3.0
    ops = c.op_overhead_us * 1e-6 if run.strategy in ("fsdp", "zero2") else 0.0  # FSDP's hooks per module
    block_fwd = block_gemms + attention + streamed + BLOCK_OPERATORS * ops
    block_bwd = 2.0 * block_gemms + 2.5 * attention + 2.0 * (streamed + BLOCK_OPERATORS * ops)
    # Outside the blocks: the embedding (a gather, 4 values per element), the final norm, the
    # output projection and the loss (4 passes over the logits).
    outer = gemm(2.0 * T * d * V / t)
    outer_streamed = 2.0 * T * (4.0 * d + 8.0 * d + 4.0 * V / t) / hbm / 3.0 + OUTER_OPERATORS * ops
    fwd = L * block_fwd + outer + outer_streamed
    bwd = L * block_bwd + 2.0 * (outer + outer_streamed) + (L * block_fwd if run.recompute else 0.0)

    # Communication: an all-gather or reduce-scatter over the data-parallel group, one per block
    # (FSDP's units) and one for the embedding, in two levels: inside each node on its fabric,
    # then across nodes with every device's own network link carrying its share (NCCL runs a ring
    # per link); Megatron's activation all-reduces inside a node.
    eff = max(c.network_efficiency, 1e-6)

    def gathered(nbytes: float) -> float:
        k, n = run.gpus_per_node // t, run.nodes
        if k * n <= 1:
            return 0.0
        inside = (k - 1) / k * nbytes / (m.intra_gbps * 1e9 * eff) + (k - 1) * m.intra_latency_us * 1e-6
        across = (n - 1) / n * nbytes / (k * m.inter_gbps * 1e9 * eff) + (n - 1) * m.inter_latency_us * 1e-6
        return inside + across + L * ((k - 1) * m.intra_latency_us + (n - 1) * m.inter_latency_us) * 1e-6

    params = model.params / t
    gather = gathered(2.0 * params)  # bf16 weights
    reduce = gathered(4.0 * params)  # fp32 gradients, reduce-scattered
    per_micro = {"fsdp": (2.0 + run.recompute) * gather, "zero2": 0.0, "ddp": 0.0}.get(run.strategy, 0.0)
    per_step = {"fsdp": reduce, "zero2": reduce + gather, "ddp": 2.0 * reduce}.get(run.strategy, 2.0 * reduce)
    tp_comm = 0.0
    if t > 1:  # two all-reduces of the activations per block, forward and backward (and the recompute)
        bw = m.intra_gbps * 1e9 * eff
        one = 2.0 * (t - 1) / t * 2.0 * T * d / bw + 2.0 * (t - 1) * m.intra_latency_us * 1e-6
        tp_comm = L * one * (4.0 + 2.0 * run.recompute)
    compute = fwd + bwd
    exposed_micro = max(0.0, per_micro - c.overlap * compute)
    exposed_step = max(0.0, per_step - c.overlap * bwd)
    held = {"fsdp": model.params / run.gpus, "zero2": model.params / run.gpus, "ddp": model.params}.get(
        run.strategy, model.params / t
    )
    optimizer = 30.0 * held / hbm
    step = run.grad_accum * (compute + exposed_micro + tp_comm) + exposed_step + optimizer + c.step_overhead_ms * 1e-3
    tokens = run.micro_batch * run.grad_accum * s * dp
    per_gpu = tokens / step / run.gpus
    model_flops = 6.0 * model.params + 12.0 * L * d * s
    hardware_flops = model_flops + (2.0 * model.block_params + 4.0 * L * d * s if run.recompute else 0.0)
    memory = _memory(model, run)
    parts = {
        "compute": run.grad_accum * compute,
        "exposed_comm": run.grad_accum * (exposed_micro + tp_comm) + exposed_step,
        "optimizer": optimizer,
        "overhead": c.step_overhead_ms * 1e-3,
    }
    return Prediction(
        step,
        tokens / step,
        per_gpu,
        100.0 * model_flops * per_gpu / peak,
        100.0 * hardware_flops * per_gpu / peak,
        memory,
        memory <= m.memory_gb * 1e9,
        parts,
    )


def _memory(model: Decoder, run: Run) -> float:
    """Bytes per device: fp32 weights, gradients and Adam state as the strategy spreads them, the
    bf16 weights being computed with, the activations one micro-batch keeps (fused attention stores
    no scores; with recomputation each block keeps its input and one block is recomputed at a
    time), the logits, and 3 GB the framework holds."""
    t, n = run.tp, model.params
    state = {"fsdp": 16.0 * n / run.gpus, "zero2": 2.0 * n + 14.0 * n / run.gpus, "ddp": 18.0 * n}.get(
        run.strategy, 18.0 * n / t
    )
    if run.strategy == "fsdp":  # two blocks gathered at a time (the one running, the one prefetched)
        state += 2.0 * 2.0 * model.block_params / model.layers + 2.0 * model.vocab * model.d_model
    T, d = run.micro_batch * run.seq, model.d_model
    block = T * d * (8.0 + 22.0 / t)  # bytes a block keeps for its backward pass (bf16, no scores)
    kept = model.layers * (2.0 * T * d if run.recompute else block) + (block if run.recompute else 0.0)
    logits = 4.0 * T * model.vocab / t
    return state + kept + logits + 3e9
