"""Machines: devices, their links, and alpha-beta collective costs.

A :class:`Machine` is a homogeneous cluster: nodes of ``devices_per_node`` devices joined by a
fast intra-node fabric (NVLink), nodes joined by a slower network (InfiniBand). A collective over
a group of devices runs on the intra-node fabric when the group lies in one node and is bound by
the inter-node network otherwise. Where a group lies is its *span*: the devices from its first
member to its last. A group of g devices that varies the innermost split is compact (span g); one
that varies an outer split, while inner splits vary fastest, is strided (span g times the inner
splits): with tensor parallelism 8 inside each node and data parallelism 4 across, the
data-parallel group of 4 spans 32 devices and crosses nodes.

Collective times use the alpha-beta model of ring algorithms (Thakur, Rabenseifner and Gropp,
"Optimization of collective communication operations in MPICH", IJHPCA 2005): for g devices, n
bytes, link bandwidth B and per-message latency a,
all-reduce 2(g-1)/g * n/B + 2(g-1) a; all-gather and reduce-scatter (g-1)/g * n/B + (g-1) a;
all-to-all (g-1)/g * n/B + (g-1) a.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.problem import read_json

__all__ = ["MACHINES", "Calibration", "Machine", "calibration_of", "get_machine", "read_machine", "write_machine"]


#: The largest figure a machine or its calibration may hold (in any of its units): past it, times
#: overflow rather than mean anything.
_LARGEST = 1e12


@dataclass(frozen=True)
class Machine:
    """A cluster of identical devices.

    Parameters
    ----------
    name, description
        Preset name and where its numbers come from.
    peak_tflops
        Dense peak of one device in TFLOP/s (for the training dtype).
    memory_gb
        Memory per device in GB (1e9 bytes).
    hbm_gbps
        Device memory bandwidth in GB/s (memory-bound operators).
    devices_per_node
        Devices sharing the intra-node fabric.
    intra_gbps, inter_gbps
        Per-device, per-direction bandwidth inside a node and between nodes, in GB/s.
    intra_latency_us, inter_latency_us
        Per-message latency in microseconds.
    efficiency
        Fraction of peak that dense matrix products reach (the ``default`` profile's assumption).
    calibration
        Fitted parameters of the step predictor (``(name, value)`` pairs of
        :class:`Calibration`; empty: its defaults), as
        ``stratopt calibrate`` writes them into a machine file.
    dtype_bytes
        Bytes per value of the training dtype the figures are for: 2 (bf16, the presets) or 4
        (float32, as ``stratopt profile`` measures a CPU); the ``default`` profile prices with it.
    """

    name: str
    peak_tflops: float
    memory_gb: float
    hbm_gbps: float
    devices_per_node: int
    intra_gbps: float
    inter_gbps: float
    intra_latency_us: float = 0.0
    inter_latency_us: float = 0.0
    efficiency: float = 1.0
    description: str = ""
    calibration: tuple[tuple[str, float], ...] = ()
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool) and not abs(value) <= _LARGEST:
                raise ModelError(f"machine {self.name!r}: {f.name} must be a finite number up to 1e12, got {value!r}")
        for name in ("peak_tflops", "memory_gb", "hbm_gbps", "intra_gbps", "inter_gbps", "efficiency"):
            value = getattr(self, name)
            if not value > 0:
                raise ModelError(f"machine {self.name!r}: {name} must be positive, got {value!r}")
        if self.devices_per_node < 1:
            raise ModelError(f"machine {self.name!r}: devices_per_node must be at least 1")
        if self.dtype_bytes not in (1, 2, 4, 8):
            raise ModelError(f"machine {self.name!r}: dtype_bytes must be 1, 2, 4 or 8, got {self.dtype_bytes!r}")
        if self.intra_latency_us < 0 or self.inter_latency_us < 0:
            raise ModelError(f"machine {self.name!r}: latencies must not be negative")

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["calibration"] = dict(self.calibration)
        return out

    # -- links -----------------------------------------------------------------------------------

    def link(self, group: np.ndarray, span: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(bytes per second, latency in seconds) of the links a group of ``group`` devices uses.

        ``span`` is how many consecutive devices the group's members lie among (default: the group
        itself, a compact group): a group of 4 spread over 32 devices, one per 8, crosses nodes.
        """
        intra = np.asarray(group if span is None else np.maximum(span, group)) <= self.devices_per_node
        bw = np.where(intra, self.intra_gbps, self.inter_gbps) * 1e9
        lat = np.where(intra, self.intra_latency_us, self.inter_latency_us) * 1e-6
        return bw, lat

    def all_reduce(self, nbytes: np.ndarray, group: np.ndarray, span: np.ndarray | None = None) -> np.ndarray:
        """Seconds for a ring all-reduce of ``nbytes`` over ``group`` devices (0 for one device);
        ``span`` as in :meth:`link`.

        >>> m = get_machine("pase")
        >>> float(m.all_reduce(np.array(8e9), np.array(4)))  # 2 * 3/4 * 8 GB at 16 GB/s
        0.75
        >>> h = get_machine("h100")  # 4 devices, one per node of 8: the network, not NVLink
        >>> float(h.all_reduce(np.array(1e9), np.array(4), span=np.array(32))) > float(h.all_reduce(np.array(1e9), np.array(4)))
        True
        """
        # A ring all-reduce is a reduce-scatter followed by an all-gather.
        return 2.0 * self.all_gather(nbytes, group, span)

    def all_gather(self, nbytes: np.ndarray, group: np.ndarray, span: np.ndarray | None = None) -> np.ndarray:
        """Seconds for a ring all-gather (or reduce-scatter) whose result is ``nbytes``."""
        group = np.asarray(group, dtype=np.float64)
        bw, lat = self.link(group, span)
        steps = np.maximum(group - 1.0, 0.0)
        return np.where(group > 1, steps / group * nbytes / bw + steps * lat, 0.0)

    def all_to_all(self, nbytes: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Seconds for an all-to-all where every device holds ``nbytes`` in all."""
        return self.all_gather(nbytes, group)

    def transfer(self, nbytes: np.ndarray, group: np.ndarray, messages: int = 1) -> np.ndarray:
        """Seconds to move ``nbytes`` per device between layouts spread over ``group`` devices."""
        bw, lat = self.link(group)
        return np.where(np.asarray(nbytes) > 0, nbytes / bw + messages * lat, 0.0)


@dataclass(frozen=True)
class Calibration:
    """A machine's free parameters (fractions of its datasheet figures, and a few sizes).

    ``gemm_efficiency``: the fraction of the peak that large matrix products reach;
    ``gemm_half_gflop``: the work (GFLOP per device) at which a product reaches half of that;
    ``attention_efficiency``: the fused attention kernel's fraction of the peak;
    ``hbm_efficiency``: the fraction of HBM bandwidth memory-bound operators reach;
    ``network_efficiency``: the fraction of link bandwidth collectives reach;
    ``overlap``: the fraction of the compute that communication can hide under;
    ``step_overhead_ms``: a fixed cost per step (the data loader, logging);
    ``op_overhead_us``: a fixed cost per product and pass where FSDP shards the weights (its hooks
    around each module: gathers launched and awaited, shards freed); what keeps small models far
    from the peak in the measured runs, which all shard;
    ``launch_us``: a fixed cost per operator and pass (dispatching it: what small operators cost
    beyond their work), as ``stratopt profile`` measures it; 0 on the presets; ``weight_launch_us``
    its extra for an operator with weights (their gradients accumulated), ``view_us`` in its place
    for a view (a reshape or transpose, which runs no kernel); ``launch_hidden``: the share of the
    dispatch that hides under the operator's own work (0 on a CPU, which dispatches and computes in
    turn; 1 on a GPU, whose kernels run while the next are dispatched);
    ``recompute_us``: what checkpointing costs a recomputed operator beyond its forward run again
    (PyTorch's ``checkpoint`` saving and restoring its tensors), as ``stratopt profile`` measures it;
    ``conv_efficiency``: convolutions' rate over the products' at the same work (1: as fast; on a CPU
    they are slower), as ``stratopt profile`` measures it; 1 on the presets;
    ``gather_efficiency``, ``scatter_efficiency``: FSDP's all-gathers' and reduce-scatters' speed
    against the ring formula on the links (1 on the presets; ``stratopt profile`` measures them);
    ``grad_bucket_mb``: data parallelism all-reduces the weight gradients in buckets of this many MB,
    each gradient paying its share of a collective's latency (25: PyTorch DDP's default, the
    presets'); 0: each module's gradients in a collective of their own, as stratopt's runtime
    (:mod:`stratopt.torch`) reduces them, so ``stratopt profile`` writes 0.
    Each field's ``fit`` metadata holds the bounds :func:`~stratopt.planning.calibrate.calibrate`
    fits it within; the ``default`` cost profile and the step predictor
    (:func:`stratopt.planning.predict.predict`) price with it.
    """

    gemm_efficiency: float = field(default=0.7, metadata={"fit": (0.2, 1.0)})
    # cuBLAS reaches half its large-product rate on products of a few GFLOP; the bound keeps the
    # fit from trading this curve against the per-operator overhead, which the rows cannot tell apart.
    gemm_half_gflop: float = field(default=1.0, metadata={"fit": (0.001, 20.0)})
    attention_efficiency: float = field(default=0.4, metadata={"fit": (0.05, 1.0)})
    hbm_efficiency: float = field(default=0.7, metadata={"fit": (0.1, 1.0)})
    network_efficiency: float = field(default=0.7, metadata={"fit": (0.05, 1.0)})
    overlap: float = field(default=0.8, metadata={"fit": (0.0, 1.0)})
    step_overhead_ms: float = field(default=5.0, metadata={"fit": (0.0, 500.0)})
    op_overhead_us: float = field(default=0.0, metadata={"fit": (0.0, 1000.0)})
    # measured by `stratopt profile`, not fitted: the published runs are on GPUs, where it hides
    launch_us: float = 0.0
    weight_launch_us: float = 0.0
    view_us: float = 0.0
    launch_hidden: float = 0.0
    recompute_us: float = 0.0
    conv_efficiency: float = 1.0
    gather_efficiency: float = 1.0
    scatter_efficiency: float = 1.0
    grad_bucket_mb: float = 25.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not abs(value) <= _LARGEST:
                raise ModelError(f"calibration: {f.name} must be a finite number up to 1e12, got {value!r}")
            if f.name.endswith("efficiency") and not 0 < value <= 1:  # a rate: the time divides by it
                raise ModelError(f"calibration: {f.name} must lie in (0, 1], got {value!r}")
            if value < 0 or (f.name in ("overlap", "launch_hidden") and value > 1):
                raise ModelError(f"calibration: {f.name} must lie in [0, 1] (or be non-negative), got {value!r}")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def calibration_of(machine: Machine) -> Calibration:
    """The machine's calibration (a machine file's fitted one, or the defaults).

    >>> calibration_of(get_machine("pase")) == Calibration()
    True
    """
    return Calibration(**dict(machine.calibration))


def _dgx(name: str, **fields: Any) -> Machine:
    """A DGX node's preset: 8 GPUs of 80 GB a node, 3 us a message inside it and 8 us across, and the
    60% of the peak products reach (both our assumptions; the rest from the datasheets)."""
    shared = {"memory_gb": 80.0, "devices_per_node": 8, "intra_latency_us": 3.0, "inter_latency_us": 8.0}
    return Machine(name, **{**shared, "efficiency": 0.6, **fields})


#: Preset machines. Sources: PaSE's defaults (Elango, IPDPS 2021, and its scheduler.py:
#: 10 TFLOPS, 16 GB/s); NVIDIA A100 and H100 datasheets and DGX A100 / DGX H100 user guides
#: (dense BF16 peak, HBM bandwidth, NVLink per-direction bandwidth = half the quoted
#: bidirectional figure, one 200 Gb/s HDR or 400 Gb/s NDR InfiniBand port per GPU). Latencies
#: and the 60% GEMM efficiency are our assumptions, typical of NCCL and cuBLAS measurements.
MACHINES: dict[str, Machine] = {
    "pase": Machine(
        "pase",
        peak_tflops=10.0,
        memory_gb=16.0,
        hbm_gbps=900.0,
        devices_per_node=1 << 20,
        intra_gbps=16.0,
        inter_gbps=16.0,
        description="PaSE's defaults: 10 TFLOPS, 16 GB/s everywhere, no latency",
    ),
    "a100": _dgx(
        "a100",
        peak_tflops=312.0,
        hbm_gbps=2039.0,
        intra_gbps=300.0,
        inter_gbps=25.0,
        description="DGX A100 nodes: 8x A100-SXM4-80GB, BF16 312 TFLOPS, NVLink3 300 GB/s, HDR IB 25 GB/s per GPU",
    ),
    "h100": _dgx(
        "h100",
        peak_tflops=989.0,
        hbm_gbps=3350.0,
        intra_gbps=450.0,
        inter_gbps=50.0,
        description="DGX H100 nodes: 8x H100-SXM5-80GB, BF16 989 TFLOPS, NVLink4 450 GB/s, NDR IB 50 GB/s per GPU",
        # The step predictor's parameters fitted to the 52 measured MPT runs on H100s (llm-foundry's
        # table, ../shared/measurements): `stratopt calibrate ../shared/measurements/mpt-h100-bf16.csv
        # --machine h100 -o h100.json` from the predictor's defaults. Median |error| 2.9%, 90th
        # percentile 5.5% (scripts/bench_fidelity.py).
        calibration=(
            ("attention_efficiency", 0.18),
            ("gemm_efficiency", 0.6274),
            ("gemm_half_gflop", 7.092),
            ("hbm_efficiency", 0.7087),
            ("network_efficiency", 0.8374),
            ("op_overhead_us", 285.1),
            ("overlap", 0.3453),
            ("step_overhead_ms", 47.55),
        ),
    ),
}


MACHINE_FORMAT, MACHINE_VERSION = "stratopt-machine", 1


def get_machine(name: str) -> Machine:
    """A preset machine by name, or a machine file (``*.json``, as ``stratopt calibrate`` writes
    it: :func:`read_machine`); :class:`ModelError` lists the presets otherwise."""
    if name in MACHINES:
        return MACHINES[name]
    if name.endswith(".json"):
        return read_machine(name)
    raise ModelError(f"unknown machine {name!r}; presets: {', '.join(MACHINES)}, or a machine file (.json)")


def read_machine(path: str) -> Machine:
    """A machine file: ``{"format": "stratopt-machine", "version": 1, "machine": {Machine's
    fields}}``; every field is checked, and a bad file is a one-line :class:`ModelError`."""
    data = read_json(Path(path))
    if not isinstance(data, dict) or data.get("format") != MACHINE_FORMAT or data.get("version") != MACHINE_VERSION:
        raise ModelError(f'{path}: not a machine file (expected "format": "{MACHINE_FORMAT}", "version": 1)')
    given = data.get("machine")
    if not isinstance(given, dict):
        raise ModelError(f"{path}: 'machine' must be a JSON object of the machine's fields")
    known = set(Machine.__dataclass_fields__)
    unknown = sorted(set(given) - known)
    if unknown:
        raise ModelError(f"{path}: unknown machine field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
    kinds = {"name": str, "description": str, "devices_per_node": int, "dtype_bytes": int}
    values: dict[str, object] = {}
    for key, value in given.items():
        if key == "calibration":
            if not isinstance(value, dict) or not all(isinstance(v, int | float) for v in value.values()):
                raise ModelError(f"{path}: 'calibration' must be an object of numbers")
            value = tuple(sorted((str(k), float(v)) for k, v in value.items()))
        elif not isinstance(value, kinds.get(key, (int, float))) or isinstance(value, bool):
            raise ModelError(f"{path}: machine field {key!r} has the wrong type ({value!r})")
        values[key] = value
    needed = [f.name for f in fields(Machine) if f.default is MISSING]
    missing = sorted(k for k in needed if k not in values)
    if missing:
        raise ModelError(f"{path}: the machine lacks {', '.join(missing)}")
    try:
        machine = Machine(**values)  # type: ignore[arg-type]
    except ModelError as exc:
        raise ModelError(f"{path}: {exc}") from None
    if machine.calibration:
        try:
            calibration_of(machine)
        except (ModelError, TypeError) as exc:
            raise ModelError(f"{path}: {exc}") from None
    return machine


def write_machine(machine: Machine, path: str) -> None:
    """Write ``machine`` as a machine file that :func:`get_machine` reads back."""
    data = {"format": MACHINE_FORMAT, "version": MACHINE_VERSION, "machine": machine.to_dict()}
    try:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
    except OSError as exc:
        raise ModelError(f"{path}: cannot write the machine file ({exc.strerror})") from None
