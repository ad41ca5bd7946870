"""Cost models: turn an operator graph on a machine into a :class:`~stratopt.StrategyProblem`.

:func:`build` enumerates every operator's configurations (:mod:`stratopt.graph.configs`), prices
them with a profile (``pase``: PaSE's formulas in its units; ``default``: microseconds on a real
machine) and returns a :class:`Costing`: the problem the solvers see (vertex names and
configuration labels included, no graph), plus what :meth:`Costing.explain` needs to say why a
strategy costs what it does.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.cost.common import EdgePricing, VertexCosts, output_bytes, replicas, weight_tile
from stratopt.cost.default import DefaultProfile
from stratopt.cost.pase import PaseProfile
from stratopt.errors import ModelError
from stratopt.graph.configs import ConfigPolicy, configurations
from stratopt.graph.ir import Graph, Operator
from stratopt.machine import Machine, get_machine
from stratopt.problem import StrategyProblem, check_assignment, evaluate

__all__ = [
    "DEFAULT_MACHINES",
    "DEFAULT_PROCS",
    "DEFAULT_PROFILE",
    "PROFILES",
    "Costing",
    "build",
    "config_label",
    "default_machine",
    "signature",
]

#: Cost profiles by name.
PROFILES: dict[str, Callable[[Machine], Any]] = {"pase": PaseProfile, "default": DefaultProfile}

#: What a user gets without saying, from Python and from ``stratopt`` alike: the realistic
#: profile (microseconds per training step) on 8 devices of each profile's own machine (PaSE's
#: profile is only meaningful on the machine its formulas assume).
DEFAULT_PROFILE = "default"
DEFAULT_PROCS = 8
#: Least block size per split axis when the graph does not ask for another (PaSE's default).
DEFAULT_CUTOFF = 4
DEFAULT_MACHINES = {"pase": "pase", "default": "h100"}


def default_machine(profile: str | Any) -> str:
    """The machine a profile is priced on unless one is named: ``pase`` for PaSE's, else ``h100``."""
    return DEFAULT_MACHINES.get(profile, "h100") if isinstance(profile, str) else "h100"


def config_label(op: Operator, config: Iterable[int]) -> str:
    """A short label for a configuration: the split axes and their counts, or ``1`` for none.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("t"); _ = g.fc(g.input((8, 16)), 8)
    >>> config_label(g.build().operators[0], (2, 1, 4))
    'b2 k4'
    """
    parts = [f"{a}{c}" for a, c in zip(op.axes, config, strict=True) if c > 1]
    return " ".join(parts) or "1"


@dataclass(frozen=True)
class Costing:
    """A priced operator graph: the :class:`StrategyProblem` and where its numbers come from."""

    graph: Graph
    profile: Any
    policy: ConfigPolicy
    configs: tuple[np.ndarray, ...]
    vertex_costs: tuple[VertexCosts, ...]
    edges: tuple[tuple[int, int, int], ...]
    problem: StrategyProblem
    memory_limit: float | None = None
    build_time: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    #: Per operator, which configurations keep the weight state sharded (``shard_weights=True``).
    sharded: tuple[np.ndarray, ...] = ()
    #: Per operator, which configurations recompute the outputs (``recompute=True``).
    recomputed: tuple[np.ndarray, ...] = ()
    #: Per operator, which sharded configurations keep the gathered weights for the backward pass
    #: (ZeRO-2: FSDP's ``reshard_after_forward=False``; a subset of ``sharded``).
    zero2: tuple[np.ndarray, ...] = ()
    #: Per operator, each configuration's HSDP shard group (the replicas of one node the weight
    #: state is sharded over, data parallel across the nodes); 0 where it is not HSDP.
    hybrid: tuple[np.ndarray, ...] = ()
    #: How many inputs read each operator output, ``(operator, output index)`` (an edge's price may depend on it).
    readers: dict[tuple[int, int], int] = field(default_factory=dict)

    def is_sharded(self, v: int, c: int) -> bool:
        """Whether operator ``v``'s configuration ``c`` shards its weight state (FSDP / ZeRO-3)."""
        return bool(self.sharded[v][c]) if self.sharded else False

    def is_zero2(self, v: int, c: int) -> bool:
        """Whether operator ``v``'s configuration ``c`` shards its weight state ZeRO-2 style (the
        weights gathered once, before the forward pass, and kept whole until the backward is done)."""
        return bool(self.zero2[v][c]) if self.zero2 else False

    def hybrid_group(self, v: int, c: int) -> int:
        """The shard group of operator ``v``'s configuration ``c`` where it shards its weight state
        HSDP style (inside each node), else 0."""
        return int(self.hybrid[v][c]) if self.hybrid else 0

    def sharding_mode(self, v: int, c: int) -> str:
        """How operator ``v``'s configuration ``c`` shards its weight state: ``"fsdp"`` (ZeRO-3),
        ``"zero2"``, ``"hsdp"`` (inside each node) or ``""`` (not at all)."""
        if self.is_zero2(v, c):
            return "zero2"
        return "hsdp" if self.hybrid_group(v, c) else "fsdp" if self.is_sharded(v, c) else ""

    def sharding(self, v: int, c: int) -> bool | str:
        """``"zero2"`` or ``"hsdp"`` where :meth:`sharding_mode` says so, else :meth:`is_sharded`
        (how a plan's words name it)."""
        mode = self.sharding_mode(v, c)
        return mode if mode in ("zero2", "hsdp") else bool(mode)

    def held_weights(self, v: int, c: int) -> float:
        """Weight elements one device holds for operator ``v`` in configuration ``c``: its tile,
        divided over the replicas that share it where the configuration shards it."""

        op, config = self.graph.operators[v], self.configs[v][c : c + 1]
        tile = float(weight_tile(op, config)[0])
        group = self.hybrid_group(v, c) or (float(replicas(op, config)[0][0]) if self.is_sharded(v, c) else 1.0)
        return tile / group

    @property
    def overlap(self) -> float:
        """The fraction of the compute communication can hide under (the profile's; 0: none)."""
        return float(getattr(self.profile, "overlap", 0.0))

    def node_costs(self) -> list[np.ndarray]:
        """Per operator, the cost of each configuration the search optimises: compute plus the
        exposed communication (:meth:`VertexCosts.exposed`), the problem's node costs."""
        return [np.asarray(self.problem.node_cost(v), dtype=np.float64) for v in range(self.problem.num_vertices)]

    def step_time(self, assignment: Sequence[int], microbatches: int = 1) -> float:
        """The step time of ``assignment`` with communication overlapped as frameworks overlap it:
        ``microbatches`` times :meth:`stage_time` (gradient accumulation: each micro-batch's compute,
        the communication on its critical path and the weight gathers beyond ``overlap`` of its
        compute) plus the profile's constant per step. The one model of a step: ``plan`` prices
        every strategy with it, and a pipeline prices its stages with :meth:`stage_time`, so a
        pipeline of one stage costs what the same strategy costs unpipelined. Never above the
        problem's objective plus that constant (which hides per operator, :meth:`node_costs`) for
        one micro-batch, and equal to it where nothing overlaps."""
        constant = float(getattr(self.profile, "step_overhead", 0.0))
        return microbatches * self.stage_time(assignment, microbatches) + constant

    def stage_time(self, assignment: Sequence[int], microbatches: int = 1) -> float:
        """One micro-batch of ``microbatches`` through the whole graph (a pipeline stage's own, or
        a step's share): the compute, the communication that lies on the critical path
        (activations' reductions, re-layouts between operators), the weight gathers beyond
        ``overlap`` of the compute (FSDP gathers for every micro-batch), and ``1 / microbatches`` of
        the gradient reductions beyond ``overlap`` of the backward pass (they run once a step,
        under the last micro-batch's backward pass) and ``1 / microbatches`` of the optimizer's
        step (``per_step``: once a step too); no constant per step."""
        # the edges (re-layouts) are the objective less the node costs; they lie on the critical path
        critical = float(evaluate(self.problem, assignment).objective)
        compute = backward = gathers = syncs = steps = 0.0
        for c, vc, node in zip(assignment, self.vertex_costs, self.node_costs(), strict=True):
            gather = 0.0 if vc.weight_gather is None else float(vc.weight_gather[c])
            sync = float(vc.phases()[2][c])
            compute += float(vc.compute[c])
            steps += 0.0 if vc.per_step is None else float(vc.per_step[c])
            backward += float(vc.compute_phases()[1][c])
            gathers, syncs = gathers + gather, syncs + sync
            critical += float(vc.comm[c]) - gather - sync - float(node[c])
        o = self.overlap
        once = max(0.0, syncs - o * backward) - (microbatches - 1.0) * steps  # the optimizer's step: once too
        return compute + critical + max(0.0, gathers - o * compute) + once / microbatches

    def is_recomputed(self, v: int, c: int) -> bool:
        """Whether operator ``v``'s configuration ``c`` recomputes its outputs in the backward pass."""
        return bool(self.recomputed[v][c]) if self.recomputed else False

    @property
    def units(self) -> str:
        return str(self.profile.units)

    def summary(self) -> str:
        """One line: what was priced, how, and how long it took."""
        p, s = self.problem, self.stats
        return (
            f"{self.graph.name}: {p.num_vertices} operators, {p.num_edges} edges, p = {self.policy.procs}, "
            f"profile {self.profile.name} on {self.profile.machine.name}; {s['choices_min']}-{s['choices_max']} "
            f"configurations per operator ({s['choices_total']} in all), priced in {self.build_time:.2f} s"
            + (f" ({s['priced_operators']} distinct operators)" if s["priced_operators"] < p.num_vertices else "")
        )

    def describe(self, assignment: Iterable[int] | None = None) -> dict[str, Any]:
        """How the problem was priced (the ``"graph"`` object of ``solve --json``): devices, profile,
        machine, units, memory limit, operator names and, for an assignment, its configurations."""
        problem = self.problem
        configs = None
        if assignment is not None and problem.labels is not None:
            configs = [problem.labels[v][c] for v, c in enumerate(assignment)]
        return {
            "procs": self.policy.procs,
            "profile": self.profile.name,
            "machine": self.profile.machine.name,
            "units": self.units,
            "memory_gb": self.memory_limit,
            "names": list(problem.names or ()),
            "configs": configs,
        }

    def forward_relayout(self, e: int, cu: int, cv: int) -> float:
        """The forward pass's part of edge ``e``'s cost between configurations ``cu`` and ``cv``
        (what re-running the producer issues again): the profile's own where its ``edge`` takes
        ``forward``, else half the edge (a message each way)."""
        if not _takes(self.profile, "forward"):
            return float(self.problem.edge_cost(e)[cu, cv]) / 2.0
        u, v, i = self.edges[e]
        ops = self.graph.operators
        consumed = ops[v].inputs[i]
        produced = ops[u].outputs[consumed.output]
        src, dst = self.configs[u][cu : cu + 1], self.configs[v][cv : cv + 1]
        many = (self.readers or _readers(self.graph))[(u, consumed.output)]
        table = self.profile.edge(ops[u], produced, src, ops[v], consumed.use, dst, readers=many, forward=True)
        return float(table[0, 0])

    def explain(self, assignment: Iterable[int]) -> list[dict[str, Any]]:
        """Per-operator breakdown of a strategy: configuration, compute, communication inside the
        operator (``comm``; ``hidden``: the part of it that overlaps the compute), communication on
        its input edges, and memory per device.

        Edge costs are charged to the consumer. The rows' ``total`` column sums to the
        strategy's objective.
        """
        choice = check_assignment(self.problem, assignment)
        incoming = np.zeros(len(self.graph.operators))
        for e, (u, v, _) in enumerate(self.edges):
            incoming[v] += float(self.problem.edge_cost(e)[choice[u], choice[v]])
        rows = []
        for v, (op, node) in enumerate(zip(self.graph.operators, self.node_costs(), strict=True)):
            c = int(choice[v])
            costs = self.vertex_costs[v]
            compute, comm = float(costs.compute[c]), float(costs.comm[c])
            hidden = compute + comm - float(node[c])
            rows.append(
                {
                    "operator": op.name,
                    "op": op.op,
                    "config": self.problem.labels[v][c]
                    if self.problem.labels
                    else config_label(op, self.configs[v][c]),
                    "choices": int(self.configs[v].shape[0]),
                    "compute": compute,
                    "comm": comm,
                    "hidden": hidden,
                    "edges_in": float(incoming[v]),
                    "total": float(node[c]) + float(incoming[v]),
                    "memory_bytes": float(costs.memory[c]),
                }
            )
        return rows


def signature(op: Operator) -> tuple[Any, ...]:
    """What an operator's configurations and costs depend on: everything but its name and where
    its inputs come from. Two layers of a Transformer with the same shapes have the same signature.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("t"); x = g.input((8, 16)); _ = g.fc(x, 16); _ = g.fc(x, 16, name="other")
    >>> a, b = g.build().operators
    >>> signature(a) == signature(b), a.name == b.name
    (True, False)
    """
    return (
        op.op,
        op.axes,
        op.sizes,
        tuple((i.use, i.param, i.source is None) for i in op.inputs),
        op.outputs,
        tuple(sorted(op.locked)),
        op.pointwise,
        repr(sorted((k, v) for k, v in op.attrs.items() if k not in ("params", "scope"))),  # names only
        op.contiguous,
    )


def _profile(profile: str | Any, machine: Machine) -> Any:
    if isinstance(profile, str):
        try:
            return PROFILES[profile](machine)
        except KeyError:
            raise ModelError(f"unknown cost profile {profile!r}; choose from: {', '.join(PROFILES)}") from None
    return profile


def build(
    graph: Graph,
    procs: int = DEFAULT_PROCS,
    *,
    profile: str | Any = DEFAULT_PROFILE,
    machine: str | Machine | None = None,
    memory_gb: float | None = None,
    powers_of_two: bool = False,
    exact: bool = False,
    cutoff: int | None = None,
    shard_weights: bool = False,
    recompute: bool = False,
) -> Costing:
    """Price ``graph`` on ``procs`` devices of ``machine`` with a cost profile.

    Parameters
    ----------
    graph
        The operator graph.
    procs
        Devices to split each operator over (p; default 8).
    profile
        ``"default"`` (microseconds per training step; the default), ``"pase"`` (PaSE's t_V and
        t_E, units "flops") or an object with the same ``vertex``/``edge`` methods.
    machine
        A preset name (:data:`stratopt.machine.MACHINES`) or a :class:`Machine`; default
        :func:`default_machine` of the profile (``h100``, or ``pase`` for PaSE's profile).
    memory_gb
        Per-device memory limit in GB; when given, every operator's memory is a usage that must
        fit under it (all operators are live at the end of the forward pass).
    powers_of_two, exact, cutoff
        The configuration policy (:class:`~stratopt.graph.configs.ConfigPolicy`); ``cutoff``
        (least block size per split axis) defaults to the graph's own (PaSE's RNNLM and
        Transformer ask for 1), else 4.
    shard_weights
        Also offer, for every product whose weights are replicated (data parallelism), the same
        configuration with the weight state sharded over the replicas, FSDP / ZeRO-3 style
        (labelled ``... fsdp``; priced by the profile's ``sharded`` method; ``default`` only), and
        ZeRO-2 style (labelled ``... zero2``: the weights gathered once and kept whole through the
        backward pass, the gradient and optimizer state sharded; ``sharded(..., regather=False)``),
        and, where the replicas span several nodes, HSDP style (labelled ``... hsdp``: sharded over
        each node's replicas, the gradient's shards all-reduced across the nodes; ``hybrid``).
    recompute
        Also offer every configuration (sharded twins included) with the operator's outputs
        recomputed in the backward pass instead of kept for it (labelled ``... recompute``): its
        forward runs twice, communication on the forward path included (but for a sharded weight's
        gather: FSDP keeps the weights it gathers for the recomputation for the backward pass), and
        its outputs are not held. Each operator decides for itself (selective recomputation), so a search under a
        memory limit recomputes where memory binds. ``default`` profile only.

    Raises
    ------
    ModelError
        For an impossible request (p < 1, an operator with no allowed configuration) or an
        unknown profile or machine.

    Examples
    --------
    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("mlp")
    >>> _ = g.softmax_xent(g.fc(g.input((64, 256)), 128))
    >>> c = build(g.build(), 4)
    >>> c.problem.num_vertices, c.problem.num_choices.tolist()
    (2, [10, 6])
    """
    start = time.perf_counter()
    if isinstance(procs, bool) or not isinstance(procs, int | np.integer) or procs < 1:
        raise ModelError(f"the number of devices must be a positive integer, got {procs!r}")
    if memory_gb is not None and not memory_gb > 0:
        raise ModelError(f"the memory limit must be a positive number of GB, got {memory_gb!r}")
    if machine is None:
        machine = default_machine(profile)
    mach = get_machine(machine) if isinstance(machine, str) else machine
    prof = _profile(profile, mach)
    if cutoff is None:
        cutoff = DEFAULT_CUTOFF if graph.cutoff is None else graph.cutoff
    policy = ConfigPolicy(int(procs), powers_of_two=powers_of_two, exact=exact, cutoff=cutoff)
    ops = graph.operators
    # Repeated blocks are priced once: operators with the same signature (kind, domain, tensors,
    # attributes) share their configurations, costs and labels, and edges between the same pair of
    # signatures share one cost table (the same array object).
    shared = isinstance(prof, DefaultProfile | PaseProfile)  # a user's profile may price by name
    keys = [signature(op) if shared else (v,) for v, op in enumerate(ops)]
    first: dict[Any, int] = {}
    for v, key in enumerate(keys):
        first.setdefault(key, v)
    unique_configs = {key: configurations(ops[v], policy) for key, v in first.items()}
    unique_costs = {key: prof.vertex(ops[v], unique_configs[key]) for key, v in first.items()}
    for asked, needs, what in (
        (shard_weights, "sharded", "sharded weights"),
        (recompute, "dtype_bytes", "recomputation"),
    ):
        if asked and not hasattr(prof, needs):
            raise ModelError(f"profile {prof.name!r} cannot price {what} (the default profile can)")
    unique_sharded = {key: np.zeros(unique_configs[key].shape[0], dtype=bool) for key in first}
    unique_zero2 = {key: np.zeros(unique_configs[key].shape[0], dtype=bool) for key in first}
    unique_hybrid = {key: np.zeros(unique_configs[key].shape[0]) for key in first}
    if shard_weights:
        for key, v in first.items():
            op, cfg = ops[v], unique_configs[key]
            if op.op not in ("gemm", "conv") or not any(i.param for i in op.inputs):
                continue
            twins = np.flatnonzero(replicas(op, cfg)[0] > 1)
            if twins.size == 0:
                continue
            base = _fields(unique_costs[key])
            rows: list[Any] = [None if x is None else x[twins] for x in base]
            picked = VertexCosts(*rows)
            zero3 = _fields(prof.sharded(op, cfg[twins], picked))
            zero2 = _fields(prof.sharded(op, cfg[twins], picked, regather=False))
            joined = _joined(_fields(_joined(base, zero3)), zero2)
            hybrid, group = prof.hybrid(op, cfg[twins], picked) if hasattr(prof, "hybrid") else (None, None)
            spread = np.zeros(0, dtype=np.int64) if group is None else np.flatnonzero(group > 1)
            none, some = np.zeros(cfg.shape[0], dtype=bool), np.ones(twins.size, dtype=bool)
            unique_configs[key] = np.vstack([cfg, cfg[twins], cfg[twins], cfg[twins][spread]])
            if hybrid is not None and spread.size:
                rows = [None if x is None else x[spread] for x in _fields(hybrid)]
                joined = _joined(_fields(joined), tuple(rows))
            unique_costs[key] = joined
            unique_sharded[key] = np.concatenate([none, some, some, np.ones(spread.size, dtype=bool)])
            unique_zero2[key] = np.concatenate([none, ~some, some, np.zeros(spread.size, dtype=bool)])
            sizes = np.zeros(0) if group is None else group[spread]
            unique_hybrid[key] = np.concatenate([np.zeros(cfg.shape[0] + 2 * twins.size), sizes])
    unique_recomputed = {key: np.zeros(unique_configs[key].shape[0], dtype=bool) for key in first}
    if recompute:
        for key, v in first.items():
            cfg, costs = unique_configs[key], unique_costs[key]
            compute, comm, memory, fwd, sync, _, gather, step = _fields(costs)
            ahead = costs.compute_phases()[0]
            held = np.minimum(output_bytes(ops[v], cfg, prof.dtype_bytes), memory)  # none inside a fused kernel
            # the forward runs again with its communication, but for FSDP's weight gather: the
            # weights gathered for the recomputation stay for the backward pass, which gathers none
            # (ZeRO-2 gathers once, forward, and keeps them)
            extra = prof.recompute_overhead(ops[v]) if hasattr(prof, "recompute_overhead") else 0.0
            one = np.where(unique_zero2[key], gather, gather / 2.0)
            again = (compute + ahead + extra, comm + fwd - one, memory - held, fwd, sync, ahead, gather, step)
            unique_configs[key] = np.vstack([cfg, cfg])
            unique_costs[key] = _joined(_fields(costs), again)
            unique_sharded[key] = np.concatenate([unique_sharded[key], unique_sharded[key]])
            unique_zero2[key] = np.concatenate([unique_zero2[key], unique_zero2[key]])
            unique_hybrid[key] = np.concatenate([unique_hybrid[key], unique_hybrid[key]])
            unique_recomputed[key] = np.concatenate(
                [np.zeros(cfg.shape[0], dtype=bool), np.ones(cfg.shape[0], dtype=bool)]
            )
    configs = tuple(unique_configs[key] for key in keys)
    vcosts = tuple(unique_costs[key] for key in keys)
    edges = tuple(graph.edges())
    matrices = []
    tables: dict[Any, np.ndarray] = {}
    readers = _readers(graph)
    counted = _takes(prof, "readers")
    for u, v, i in edges:
        consumed = ops[v].inputs[i]
        many = readers[(u, consumed.output)]
        key = (keys[u], keys[v], i, many == 1)
        table = tables.get(key)
        if table is None:
            produced = ops[u].outputs[consumed.output]
            more = {"readers": many} if counted else {}
            table = prof.edge(ops[u], produced, configs[u], ops[v], consumed.use, configs[v], **more)
            table.setflags(write=False)
            tables[key] = table
        matrices.append(table)
    unique_labels = {
        key: [
            config_label(ops[v], row)
            + (" zero2" if keep else " hsdp" if hybrid else " fsdp" if shard else "")
            + (" recompute" if again else "")
            for row, shard, keep, hybrid, again in zip(
                unique_configs[key].tolist(),
                unique_sharded[key].tolist(),
                unique_zero2[key].tolist(),
                unique_hybrid[key].tolist(),
                unique_recomputed[key].tolist(),
                strict=True,
            )
        ]
        for key, v in first.items()
    }
    labels = [unique_labels[key] for key in keys]
    usage: dict[str, Any] = {}
    if memory_gb is not None:
        usage = {
            "intervals": [(0, 1)] * len(ops),
            "usages": [np.ceil(c.memory).astype(np.int64) for c in vcosts],
            "usage_limit": int(memory_gb * 1e9),
        }
    overlap = float(getattr(prof, "overlap", 0.0))
    problem = StrategyProblem(
        [c.exposed(overlap) for c in vcosts],
        [(u, v) for u, v, _ in edges],
        matrices,
        names=[op.name for op in ops],
        labels=labels,
        name=f"{graph.name} p={procs} {prof.name}",
        **usage,
    )
    ks = [int(c.shape[0]) for c in configs]
    stats = {
        "policy": policy.describe(),
        "profile": prof.describe(),
        "choices_min": min(ks),
        "choices_max": max(ks),
        "choices_total": int(sum(ks)),
        "edge_entries": int(sum(m.size for m in matrices)),
        "log10_space": float(sum(math.log10(k) for k in ks)),
        "priced_operators": len(first),
        "priced_edges": len(tables),
    }
    sharded = tuple(unique_sharded[key] for key in keys) if shard_weights else ()
    recomputed = tuple(unique_recomputed[key] for key in keys) if recompute else ()
    zero2 = tuple(unique_zero2[key] for key in keys) if shard_weights else ()
    hybrid = tuple(unique_hybrid[key] for key in keys) if shard_weights else ()
    stats["sharded_choices"] = int(sum(x.sum() for x in sharded))
    stats["zero2_choices"] = int(sum(x.sum() for x in zero2))
    stats["hybrid_choices"] = int(sum((x > 0).sum() for x in hybrid))
    stats["recomputed_choices"] = int(sum(x.sum() for x in recomputed))
    took = time.perf_counter() - start
    return Costing(
        graph,
        prof,
        policy,
        configs,
        vcosts,
        edges,
        problem,
        memory_gb,
        took,
        stats,
        sharded,
        recomputed,
        zero2,
        hybrid,
        readers,
    )


def _takes(profile: Any, name: str) -> bool:
    """Whether ``profile.edge`` takes the keyword ``name`` (every :class:`EdgePricing` takes
    ``readers`` and ``forward``; a profile of the user's own may not)."""
    if isinstance(profile, EdgePricing):
        return True
    try:
        params = inspect.signature(profile.edge).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _readers(graph: Graph) -> dict[tuple[int, int], int]:
    """How many inputs read each operator output (``(operator, output index)``) over the graph's edges."""
    out: dict[tuple[int, int], int] = {}
    ops = graph.operators
    for u, v, i in graph.edges():
        key = (u, ops[v].inputs[i].output)
        out[key] = out.get(key, 0) + 1
    return out


def _fields(c: VertexCosts) -> tuple[Any, ...]:
    """compute, comm, memory, the forward and gradient-sync communication (their defaults filled
    in), the forward compute (None for the default third), the weight gathers and the work once a
    step (zeros where not given), in :class:`VertexCosts`' order."""
    fwd, _, sync = c.phases()
    gather = np.zeros_like(c.comm) if c.weight_gather is None else c.weight_gather
    step = np.zeros_like(c.compute) if c.per_step is None else c.per_step
    return (c.compute, c.comm, c.memory, fwd, sync, c.forward_compute, gather, step)


def _joined(first: tuple[Any, ...], then: tuple[Any, ...]) -> VertexCosts:
    """The costs of ``first``'s configurations followed by ``then``'s (a forward compute left to
    its default on one side and given on the other is filled in as the default)."""
    if (first[5] is None) != (then[5] is None):
        first, then = ((*side[:5], side[0] / 3.0 if side[5] is None else side[5], *side[6:]) for side in (first, then))
    joined: list[Any] = [None if a is None else np.concatenate([a, b]) for a, b in zip(first, then, strict=True)]
    return VertexCosts(*joined)
