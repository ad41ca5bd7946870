"""Measure the machine at hand with PyTorch and write it as a machine file (``stratopt profile``).

What the ``default`` cost profile prices with, measured instead of taken from a datasheet, on
``world`` ranks at once (processes on this machine, as ``train`` starts them; the slowest rank's
time kept), so that on a CPU each rank sees its share of the cores, as in training:

- **matrix products** of several sizes and shapes: the time of ``w`` flops fitted as
  ``(w + gemm_half) / rate`` (small products do not reach the rate), the calibration's
  ``gemm_half_gflop``; the peak is the best rate measured, ``gemm_efficiency`` the fitted rate over it;
- **fused attention** (``scaled_dot_product_attention``, causal), forward and backward: its rate
  on the causal half of its two products, 3.5 forward passes' worth (how the profile prices it),
  over the peak: ``attention_efficiency``;
- **memory bandwidth**: an elementwise add (two reads, one write) of tensors past every cache:
  ``hbm_gbps`` (smaller ones are shown beside it);
- **a convolution** (3 x 3, forward and both gradients) against the products' fitted curve at its
  work: ``conv_efficiency``;
- **pointwise work** (:func:`~stratopt.torch.probes.pointwise_block`: norms, GELU, SiLU, softmax, a residual add),
  forward and backward, against what the ``default`` profile prices its streams at:
  ``hbm_efficiency``;
- **dispatch**: chains of tiny modules forward and backward (:func:`~stratopt.torch.probes.dispatch_chains`),
  per module and pass: a tanh's is ``launch_us``, charged to every operator that runs kernels in
  each of its three passes, a linear layer's beyond it ``weight_launch_us`` (operators with
  weights), a view's ``view_us`` (reshapes and transposes); on a GPU, whose kernels queue behind
  each other, each figure is the time of several calls in a row over their number, and the
  dispatch hides under the kernels' own time (``launch_hidden`` 1);
- **recomputation**: the same blocks with and without PyTorch's ``checkpoint`` (:func:`~stratopt.torch.probes.recompute_chains`),
  beyond running the forward once more, per operator: ``recompute_us``;
- **collectives** over ``world`` ranks of ``torch.distributed`` on this machine (gloo on the CPU,
  NCCL on GPUs): all-reduce, all-gather, reduce-scatter, all-to-all and a send/receive ping-pong,
  from 4 KB to 16 MB, each issued right after a matrix product, as training issues them between
  its operators (the product's own time taken off: on a CPU a collective between ranks that
  compute costs several times what one issued back to back does, gloo's threads waiting for the
  cores); one bandwidth and one latency per message fitted to the all-reduces and the messages by
  the ring formulas the machine model uses (:mod:`stratopt.machine`): the links inside a node (one
  machine is measured, so the network between nodes is taken as the same); the all-gathers' and
  reduce-scatters' speed against those links is ``gather_efficiency`` and ``scatter_efficiency``
  (:func:`kind_efficiency`; gloo's run well below the ring formula's);
- **FSDP's own work**: a chain of linear modules each sharded by ``fully_shard``, against the same
  chain unsharded, beyond its collectives, per module and pass: ``op_overhead_us``.

Every figure but the collectives' is the median of ``rounds`` rounds. The figures are achieved
ones, so the file's ``network_efficiency`` is 1; on
the CPU, where gloo's collectives run on the cores that compute, ``overlap`` is 0. Values are the
dtype measured (``dtype``: float32 on the CPU, bfloat16 on a GPU unless named: ``dtype_bytes``);
``train`` runs float32, so a GPU profile that prices its runs names ``dtype="float32"``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.machine import Calibration, Machine
from stratopt.torch import probes
from stratopt.torch.launch import backend, run_ranks

__all__ = ["DTYPES", "KINDS", "Profile", "bar", "fit_gemm", "fit_links", "kind_efficiency", "profile"]

#: The dtypes ``profile`` measures in, and their bytes (``dtype_bytes``).
DTYPES = {"float32": 4, "bfloat16": 2}
#: The collectives measured, as the machine model names them.
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
#: Per kind, (bandwidth term's factor on the bytes, latency terms) for ``g`` devices: ring formulas.
_RING: dict[str, Callable[[int], tuple[float, float]]] = {
    "all_reduce": lambda g: (2.0 * (g - 1) / g, 2.0 * (g - 1)),
    "all_gather": lambda g: ((g - 1) / g, g - 1.0),
    "reduce_scatter": lambda g: ((g - 1) / g, g - 1.0),
    "all_to_all": lambda g: ((g - 1) / g, g - 1.0),
    "send_recv": lambda g: (1.0, 1.0),
}
_MESSAGES = tuple(4096 * 4**k for k in range(7))  # 4 KB .. 16 MB
_CALLS = 15  # timed calls of each collective at each size (every rank makes the same calls)
#: The side of the square product issued before each collective (about a millisecond's work).
_BUSY = {"cpu": 384, "cuda": 4096}


@dataclass(frozen=True)
class Profile:
    """What :func:`profile` measured, and the machine fitted to it."""

    device: str
    world: int
    backend: str
    dtype: str
    gemm: list[dict[str, float]]
    attention: dict[str, float]
    bandwidth: list[dict[str, float]]
    collectives: list[dict[str, Any]]
    machine: Machine
    seconds: float
    fit: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "world": self.world,
            "backend": self.backend,
            "dtype": self.dtype,
            "gemm": self.gemm,
            "attention": self.attention,
            "bandwidth": self.bandwidth,
            "collectives": self.collectives,
            "fit": self.fit,
            "machine": self.machine.to_dict(),
            "seconds": self.seconds,
        }


def _clock(torch: Any, device: Any) -> Callable[[], float]:
    if device.type == "cuda":

        def synced() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()

        return synced
    return time.perf_counter


def _timed(
    run: Callable[[], Any], clock: Callable[[], float], *, least: float = 0.05, most: int = 50, calls: int = 0
) -> float:
    """The median seconds of ``run`` (one call first to warm up; then calls until ``least`` seconds
    or ``most`` calls, at least 3; exactly ``calls`` where given, as every rank of a collective must)."""
    run()
    times: list[float] = []
    spent = 0.0
    while len(times) < max(calls, 3) if calls else len(times) < 3 or (spent < least and len(times) < most):
        started = clock()
        run()
        took = clock() - started
        times.append(took)
        spent += took
    return float(statistics.median(times))


def fit_gemm(rows: list[dict[str, float]]) -> tuple[float, float]:
    """(rate in flop/s, half in flops): ``seconds = (flops + half) / rate`` fitted to the products in
    relative error (least squares, the half kept non-negative).

    >>> rows = [{"flops": w, "seconds": (w + 1e6) / 1e9} for w in (1e6, 1e7, 1e8)]
    >>> rate, half = fit_gemm(rows)
    >>> round(rate / 1e9, 6), round(half / 1e6, 6)
    (1.0, 1.0)
    """
    w = np.array([r["flops"] for r in rows], dtype=np.float64)
    t = np.array([r["seconds"] for r in rows], dtype=np.float64)
    design = np.stack([w / t, 1.0 / t], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if b < 0 or a <= 0:  # no visible overhead: the rate alone
        a, b = float(np.sum(w * t) / np.sum(w * w)), 0.0
    return 1.0 / float(a), float(b) / float(a)


def fit_links(rows: list[dict[str, Any]], world: int) -> tuple[float, float]:
    """(bytes per second, seconds per message) of the links: every collective's time fitted as the
    ring formulas' ``factor * bytes / bandwidth + steps * latency`` in relative error, the latency
    kept non-negative.

    >>> rows = [{"kind": "all_reduce", "bytes": n, "seconds": 2 * 0.5 * n / 1e9 + 2 * 1e-5} for n in (1e3, 1e6, 1e8)]
    >>> bw, lat = fit_links(rows, 2)
    >>> round(bw / 1e9, 6), round(lat * 1e6, 6)
    (1.0, 10.0)
    """
    x = np.array([[_RING[r["kind"]](world)[0] * r["bytes"], _RING[r["kind"]](world)[1]] for r in rows])
    t = np.array([r["seconds"] for r in rows], dtype=np.float64)
    (inv_bw, lat), *_ = np.linalg.lstsq(x / t[:, None], np.ones_like(t), rcond=None)
    if lat < 0 or inv_bw <= 0:
        inv_bw, lat = float(np.sum(x[:, 0] * t) / np.sum(x[:, 0] ** 2)), 0.0
    return 1.0 / float(inv_bw), float(lat)


def kind_efficiency(rows: list[dict[str, Any]], world: int, bandwidth: float, latency: float, kind: str) -> float:
    """How fast ``kind`` runs against the links fitted to the others: the median, over its messages
    of 1 MB and more, of the ring formula's seconds over the measured ones, at most 1.

    >>> rows = [{"kind": "all_gather", "bytes": n, "seconds": 2 * (0.5 * n / 1e9 + 1e-5)} for n in (1e6, 4e6)]
    >>> kind_efficiency(rows, 2, 1e9, 1e-5, "all_gather")
    0.5
    """
    factor, steps = _RING[kind](world)
    ratios = [
        (factor * r["bytes"] / bandwidth + steps * latency) / r["seconds"]
        for r in rows
        if r["kind"] == kind and r["bytes"] >= 1 << 20
    ]
    return min(1.0, float(statistics.median(ratios))) if ratios else 1.0


def _at_size(dist: Any, rank: int, world: int, nbytes: int, device: Any, pair: tuple[Any, Any]) -> list[dict[str, Any]]:
    """Each collective's seconds on messages of about ``nbytes`` (float32 values, a multiple of the
    ranks), and the send/receive's (rank 0 and 1 pass the tensor there and back: two messages),
    each issued as training issues it: right after a matrix product on every rank (a collective
    between ranks that compute; on a CPU, gloo's threads then wait for cores the product held),
    the product's own time taken off."""
    import torch

    gather, scatter = pair
    clock = _clock(torch, device)
    n = max(nbytes // 4 // world * world, world)
    whole = torch.ones(n, device=device)
    part = torch.ones(n // world, device=device)
    out = torch.empty_like(whole)
    side = _BUSY[device.type]
    a, b = torch.randn(side, side, device=device), torch.randn(side, side, device=device)

    def product() -> Any:
        return torch.matmul(a, b)

    ops: dict[str, Callable[[], Any]] = {
        "all_reduce": lambda: dist.all_reduce(whole),
        "all_gather": lambda: gather(out, part),
        "reduce_scatter": lambda: scatter(part, whole),
        "all_to_all": lambda: dist.all_to_all_single(out, whole),
    }
    rows = []
    for name, run in ops.items():
        dist.barrier()
        alone = _timed(product, clock, calls=_CALLS)
        after = _timed(partial(_after, product, run), clock, calls=_CALLS)
        rows.append({"kind": name, "bytes": n * 4, "seconds": max(after - alone, 1e-7)})
    dist.barrier()

    def ping() -> None:
        product()
        if rank == 0:
            dist.send(whole, 1)
            dist.recv(whole, 1)
        elif rank == 1:
            dist.recv(whole, 0)
            dist.send(whole, 0)

    alone = _timed(product, clock, calls=_CALLS)
    rows.append(
        {"kind": "send_recv", "bytes": n * 4, "seconds": max(_timed(ping, clock, calls=_CALLS) - alone, 2e-7) / 2.0}
    )
    return rows


def _after(first: Callable[[], Any], then: Callable[[], Any]) -> None:
    first()
    then()


def _fsdp_chain(torch: Any, device: Any, world: int) -> dict[str, float]:
    """A chain of linear modules, forward and backward, plain and with each module sharded by
    FSDP over the ranks: the seconds of each, the modules and the bytes of one module's weights."""
    from torch.distributed.fsdp import fully_shard

    clock = _clock(torch, device)
    width, count = 256, 8
    x = torch.randn(16, width, device=device)

    def chain() -> Any:
        torch.manual_seed(0)
        return torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False) for _ in range(count))).to(device)

    plain = chain()
    sharded = chain()
    for module in sharded:
        fully_shard(module)
    fully_shard(sharded)
    out = {"modules": float(count), "bytes": float(width * width * 4)}
    for name, model in (("plain", plain), ("sharded", sharded)):
        out[name] = _timed(partial(_step, model, x), clock, calls=_CALLS)
    return out


def _step(model: Any, x: Any) -> None:
    model(x).sum().backward()


def _repeat(run: Callable[[], Any], times: int) -> None:
    for _ in range(times):
        run()


def _measure(rank: int, world: int, payload: tuple[str, tuple[int, ...], bool, float, int, str]) -> Any:
    """Every measurement on this rank, all ranks at once (:func:`run_ranks`' work): the products,
    attention, bandwidth and dispatch each rank sees while the others compute too (on a CPU they share its cores, as training's ranks do), then the collectives and
    the FSDP chain; rank 0's figures, each the slowest rank's."""
    import torch

    device, sizes, show, window, repeat, kind = payload
    together = world > 1
    total, done = repeat * (len(probes.shapes(device)) + 5) + 2 * together, 0

    def say(what: str) -> None:
        nonlocal done
        done += 1
        if show and rank == 0:
            print(bar(what, done, total), file=sys.stderr, flush=True)

    if together:
        import torch.distributed as dist

        dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    else:
        dev = torch.device(device)
    dtype = getattr(torch, kind)
    clock = _clock(torch, dev)

    def timed(run: Callable[[], Any]) -> float:  # a window of calls: steadier than a few
        if together:
            dist.barrier()
        if dev.type == "cuda":  # kernels queue behind each other, as training's do: several calls a time
            queue = max(1, min(64, int(2e-3 / max(_timed(run, clock, least=0.0, most=3), 1e-7))))
            return _timed(partial(_repeat, run, queue), clock, least=window, most=400) / queue
        return _timed(run, clock, least=window, most=400)

    rounds = [_compute(torch, dev, dtype, timed, device, say) for _ in range(repeat)]
    found: dict[str, Any] = _combined(rounds, statistics.median)
    found["collectives"], found["fsdp"] = [], {}
    if together:
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in 2.13
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        found["collectives"] = [row for n in sizes for row in _at_size(dist, rank, world, n, dev, (gather, scatter))]
        say(f"collectives over {world} ranks ({dist.get_backend()})")
        found["fsdp"] = _fsdp_chain(torch, dev, world)
        say("FSDP's own work")
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, found)
        if rank != 0:
            return None
        found = _slowest(everyone)
    for r in found["gemm"]:
        r["tflops"] = r["flops"] / r["seconds"] / 1e12
    for r in found["bandwidth"]:
        r["gbps"] = r["bytes"] / r["seconds"] / 1e9
    return found


def _compute(
    torch: Any,
    dev: Any,
    dtype: Any,
    timed: Callable[[Callable[[], Any]], float],
    device: str,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """One round of the figures each rank measures alone: products, attention, bandwidth, a
    convolution, the pointwise work of a block and dispatch."""
    gemm = []
    for m, n, k in probes.shapes(device):
        a, b = torch.randn(m, k, device=dev, dtype=dtype), torch.randn(k, n, device=dev, dtype=dtype)
        seconds = timed(partial(torch.matmul, a, b))
        flops = 2.0 * m * n * k
        gemm.append({"m": m, "n": n, "k": k, "flops": flops, "seconds": seconds})
        say(f"matrix product {m} x {k} x {n}")
    attention = probes.attention(torch, dev, dtype, timed, device)
    say("fused attention")
    bandwidth = []
    for elements in (1 << 20, 1 << 22, 1 << 25) if device == "cpu" else (1 << 24, 1 << 26, 1 << 28):
        x, y = torch.randn(elements, device=dev, dtype=dtype), torch.randn(elements, device=dev, dtype=dtype)
        z = torch.empty_like(x)
        seconds = timed(partial(torch.add, x, y, out=z))
        bandwidth.append({"bytes": 3.0 * elements * x.element_size(), "seconds": seconds})
        del x, y, z
    say("memory bandwidth")
    conv = probes.conv(torch, dev, dtype, timed, device)
    say("convolution")
    work, (x,) = probes.pointwise_block(device)
    work = work.to(device=dev, dtype=dtype)
    x = x.to(device=dev, dtype=dtype).requires_grad_(True)
    pointwise = timed(partial(_step, work, x))
    say("pointwise work")
    chains = probes.dispatch_chains(torch, dev, dtype)
    dispatch = {name: timed(partial(_step, *chain)) / (32 * 3) for name, chain in chains.items()}  # a module and pass
    plain, again, tiny = probes.recompute_chains(torch, dev, dtype)
    twice = timed(partial(_step, again, tiny)) - timed(partial(_step, plain, tiny)) - timed(partial(plain, tiny))
    say("dispatching an operator")
    return {
        "gemm": gemm, "attention": attention, "bandwidth": bandwidth, "conv": conv, "pointwise": pointwise,
        "launch": dispatch["kernel"], "weighted": dispatch["weighted"], "view": dispatch["view"],
        "recompute": max(0.0, twice) / 32,  # an operator: checkpointing's own work beyond the forward again
    }  # fmt: skip


def _combined(rounds: list[dict[str, Any]], pick: Callable[[list[float]], float]) -> dict[str, Any]:
    """The first round's figures with every time ``pick`` of the rounds' (their median across
    rounds, the slowest across ranks); the attention's rate follows its time."""
    first = dict(rounds[0])
    for key in ("gemm", "bandwidth", "collectives"):
        if key in first:
            rows = first[key]
            first[key] = [
                {**row, "seconds": pick([r[key][i]["seconds"] for r in rounds])} for i, row in enumerate(rows)
            ]
    for key in ("attention", "conv"):
        first[key] = {**first[key], "seconds": pick([r[key]["seconds"] for r in rounds])}
    work = rounds[0]["attention"]["tflops"] * rounds[0]["attention"]["seconds"]
    first["attention"]["tflops"] = work / first["attention"]["seconds"]
    for key in ("launch", "weighted", "view", "recompute", "pointwise"):
        first[key] = pick([r[key] for r in rounds])
    return first


def bar(what: str, done: int, total: int, width: int = 20) -> str:
    """One line of a progress bar: ``profile [#####.....] 5/10 what``."""
    filled = round(width * done / max(total, 1))
    return f"profile [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what}"


def _slowest(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's figures with each time the slowest rank's (a step ends when its slowest rank does)."""
    out = _combined(ranks, max)
    out["fsdp"] = {k: max(r["fsdp"][k] for r in ranks) for k in ranks[0]["fsdp"]}
    return out


def profile(
    device: str = "cpu",
    world: int = 2,
    *,
    name: str | None = None,
    progress: bool = False,
    window: float = 0.2,
    rounds: int = 3,
    dtype: str | None = None,
    timeout: float = 300.0,
) -> Profile:
    """Measure this machine (``device``: ``cpu`` or ``cuda``; collectives over ``world`` local
    ranks, none for 1) and fit a :class:`~stratopt.machine.Machine` to it (see the module's
    docstring). With ``progress``, rank 0 prints a progress bar on stderr as it measures
    (:func:`bar`); each product, attention, bandwidth and dispatch figure is the median of
    ``window`` seconds of calls (at least 3), and the median of ``rounds`` such figures, measured
    in turn (a shared machine's drifts even out). ``dtype`` (``float32`` or ``bfloat16``; default
    float32 on the CPU, bfloat16 on a GPU) is what the products and streams are measured in."""
    try:
        import torch
    except ImportError:
        raise ModelError("profile needs the 'torch' extra: pip install 'stratopt[torch]'") from None
    if device not in ("cpu", "cuda"):
        raise ModelError(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("--device cuda: this PyTorch sees no CUDA device")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ModelError(f"--world must be a positive number of ranks, got {world!r}")
    if not 0 < window <= 60:
        raise ModelError(f"--window must be a number of seconds in (0, 60], got {window!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 20:
        raise ModelError(f"--rounds must be a number of rounds in 1..20, got {rounds!r}")
    kind = dtype if dtype is not None else ("float32" if device == "cpu" else "bfloat16")
    if kind not in DTYPES:
        raise ModelError(f"--dtype must be one of {', '.join(DTYPES)}, got {kind!r}")
    if device == "cuda" and world > torch.cuda.device_count():
        raise ModelError(f"--world {world}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    started = time.perf_counter()
    payload = (device, _MESSAGES, bool(progress), float(window), rounds, kind)
    # in ranks as train starts them, one included: on a CPU each sees the threads a rank of train has
    found = run_ranks(_measure, world, payload, timeout=timeout, what="profile")[0]
    gemm, attention, bandwidth = found["gemm"], found["attention"], found["bandwidth"]
    rate, half = fit_gemm(gemm)
    peak = max(rate, max(r["flops"] / r["seconds"] for r in gemm))
    hbm = bandwidth[-1]["gbps"]  # the largest streams from memory, past every cache
    streamed = probes.priced_pointwise(device, hbm, DTYPES[kind])
    conv = found["conv"]  # forward and both gradients: three products' work, priced on the fitted curve
    conv_efficiency = min(1.0, 3.0 * (conv["flops"] + half) / rate / conv["seconds"])
    stream_efficiency = min(1.0, streamed / found["pointwise"])
    collectives: list[dict[str, Any]] = [{**r, "gbps": r["bytes"] / r["seconds"] / 1e9} for r in found["collectives"]]
    link_bw, latency, hooks, gathers, scatters = hbm * 1e9, 0.0, 0.0, 1.0, 1.0
    if collectives:
        # the links from the all-reduces and messages (data parallelism's, tensor parallelism's,
        # a pipeline's); gathers and reduce-scatters as fractions of what those links give them
        link_bw, latency = fit_links([r for r in collectives if r["kind"] in ("all_reduce", "send_recv")], world)
        gathers = kind_efficiency(collectives, world, link_bw, latency, "all_gather")
        scatters = kind_efficiency(collectives, world, link_bw, latency, "reduce_scatter")
        # FSDP's own work per module and pass: the sharded chain's time beyond the plain chain's and
        # beyond its collectives (two gathers and a reduce-scatter of each module's weights)
        sharded = found["fsdp"]
        one = (world - 1.0) / world * sharded["bytes"] / link_bw + (world - 1.0) * latency
        moved = one * (2.0 / gathers + 1.0 / scatters)
        hooks = max(0.0, (sharded["sharded"] - sharded["plain"]) / sharded["modules"] - moved) / 3.0
    launch, view = found["launch"], found["view"]
    weighted = max(0.0, found["weighted"] - launch)  # a linear layer's dispatch beyond a tanh's
    calibration = Calibration(
        gemm_efficiency=min(1.0, rate / peak),
        gemm_half_gflop=half / 1e9,
        attention_efficiency=min(1.0, attention["tflops"] * 1e12 / peak),
        hbm_efficiency=max(stream_efficiency, 1e-3),
        network_efficiency=1.0,
        overlap=0.0 if device == "cpu" else Calibration().overlap,
        step_overhead_ms=0.0,
        op_overhead_us=hooks * 1e6,
        launch_us=launch * 1e6,
        weight_launch_us=weighted * 1e6,
        view_us=view * 1e6,
        recompute_us=found["recompute"] * 1e6,
        launch_hidden=0.0 if device == "cpu" else 1.0,  # a GPU runs its queue while the next is dispatched
        conv_efficiency=max(conv_efficiency, 1e-3),
        gather_efficiency=max(gathers, 1e-3),
        scatter_efficiency=max(scatters, 1e-3),
        grad_bucket_mb=0.0,  # the runtime reduces each module's gradients on their own
    )
    label = name or f"profiled-{device}"
    memory = _memory_gb(torch, device, world)
    where = "this machine's" if world > 1 else "no"
    machine = Machine(
        label,
        peak_tflops=peak / 1e12,
        memory_gb=memory,
        hbm_gbps=hbm,
        devices_per_node=max(world, 1),
        intra_gbps=link_bw / 1e9,
        inter_gbps=link_bw / 1e9,
        intra_latency_us=latency * 1e6,
        inter_latency_us=latency * 1e6,
        efficiency=calibration.gemm_efficiency,
        description=(
            f"measured by stratopt profile on {_device_name(torch, device)} ({kind}); "
            f"{where} collectives over {world} rank(s); the network between nodes taken as the links inside"
        ),
        calibration=tuple(sorted(calibration.to_dict().items())),
        dtype_bytes=DTYPES[kind],
    )
    fit = {"gemm_rate_tflops": rate / 1e12, "gemm_half_gflop": half / 1e9, "link_gbps": link_bw / 1e9}
    fit["latency_us"], fit["launch_us"], fit["fsdp_us"] = latency * 1e6, launch * 1e6, hooks * 1e6
    fit["weight_launch_us"], fit["view_us"] = weighted * 1e6, view * 1e6
    fit["recompute_us"] = found["recompute"] * 1e6
    fit["pointwise_ms"], fit["pointwise_priced_ms"] = found["pointwise"] * 1e3, streamed * 1e3
    fit["stream_efficiency"], fit["conv_efficiency"] = stream_efficiency, conv_efficiency
    fit["conv_tflops"] = 3.0 * conv["flops"] / conv["seconds"] / 1e12
    fit["gather_efficiency"], fit["scatter_efficiency"] = gathers, scatters
    return Profile(
        device, world, backend(world) if world > 1 else "-", kind, gemm, attention,
        bandwidth, collectives, machine, time.perf_counter() - started, fit,
    )  # fmt: skip


def _memory_gb(torch: Any, device: str, world: int) -> float:
    """Memory per rank in GB: the device's, or the machine's RAM shared by the ranks."""
    if device == "cuda":
        return float(torch.cuda.get_device_properties(0).total_memory) / 1e9
    try:
        total = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        total = 16e9
    return total / 1e9 / max(world, 1)


def _device_name(torch: Any, device: str) -> str:
    if device == "cuda":
        return str(torch.cuda.get_device_name(0))
    return f"the CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"
