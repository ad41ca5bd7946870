"""The optimal plan for a real cluster, beside the strategies people write by hand.

A :class:`Cluster` is ``nodes x gpus_per_node`` devices of a preset machine, the fast fabric inside
a node and the network between nodes. :func:`plan` prices a model on it with the ``default``
profile, finds the cheapest strategy whose memory per device fits (weights, gradients, Adam state
and kept activations), and measures the baselines on the same model:

- ``data-parallel``: every operator splits only its batch dimension, over every device;
- ``fsdp``: the same computation with weights, gradients and optimizer state sharded over the
  devices (ZeRO-3): weights all-gathered before use, forward and backward, gradients
  reduce-scattered. Sharding what is stored, not what is computed, is not a split of an operator's
  iteration domain, so the configuration space is extended for it: every product whose weights are
  replicated also has the same split with its weight state sharded over the replicas
  (:func:`stratopt.cost.build` with ``shard_weights=True``), one more all-gather of the weights
  and a reduce-scatter instead of an all-reduce. The plan may use it too, per operator.
- ``megatron-tp<t>``: Megatron-LM's tensor parallelism inside a node, data parallelism across:
  the linear layers that read the residual stream (after a norm or an embedding) split their
  output features over ``t`` devices (column parallel), the others split their input features
  (row parallel, whose output all-reduce Megatron has), embeddings split the vocabulary, norms are
  replicated, and every operator splits its batch over the other ``p / t`` devices; the layouts of
  the operators between the linears (attention's heads, reshapes, pointwise work) are the cheapest
  that keep to that pattern (the exact DP over the pattern's configurations).
- ``megatron-tp<t>-fsdp``: the same with the state sharded over the data-parallel groups.

The plan is the exact DP's optimum when it fits; otherwise the memory is a Lagrangian penalty
(one price per byte, found by bisection, each step solved exactly by the DP), which gives both a
plan that fits and a lower bound on the best one in the configuration space; the baselines that
fit are candidates too (all are in the space), so the plan is never worse than any of them.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.cost.common import weight_tile
from stratopt.errors import ModelError
from stratopt.graph.ir import Graph, Operator
from stratopt.machine import Machine, get_machine
from stratopt.problem import FORBIDDEN, StrategyProblem, evaluate

__all__ = ["Cluster", "PlanResult", "Strategy", "baselines", "cluster", "plan"]


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of ``gpus_per_node`` devices of ``machine`` (its node size replaced)."""

    nodes: int
    gpus_per_node: int
    machine: Machine

    @property
    def devices(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        m = self.machine
        return (
            f"{self.nodes} x {self.gpus_per_node} {m.name} ({self.devices} devices, {m.memory_gb:g} GB each; "
            f"{m.intra_gbps:g} GB/s inside a node, {m.inter_gbps:g} GB/s between nodes)"
        )


def cluster(nodes: int, gpus_per_node: int, machine: str | Machine = "h100") -> Cluster:
    """A cluster of ``nodes`` x ``gpus_per_node`` devices of a preset machine.

    >>> cluster(4, 8).describe()
    '4 x 8 h100 (32 devices, 80 GB each; 450 GB/s inside a node, 50 GB/s between nodes)'
    """
    for what, value in (("nodes", nodes), ("gpus per node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ModelError(f"the number of {what} must be a positive integer, got {value!r}")
    base = get_machine(machine) if isinstance(machine, str) else machine
    return Cluster(int(nodes), int(gpus_per_node), dataclasses.replace(base, devices_per_node=int(gpus_per_node)))


@dataclass(frozen=True)
class Strategy:
    """One strategy on the cluster: the plan or a baseline.

    ``estimate`` is the additive model's step time and ``simulated`` the simulator's (microseconds;
    None where not simulated), ``memory`` the bytes per device, ``layers`` the strategy in words, one
    row per group of operators that hold weights (identical layers collapsed). ``note`` says how it
    was obtained, or why it cannot be expressed (then ``assignment`` is None).
    """

    name: str
    assignment: tuple[int, ...] | None
    estimate: float | None
    simulated: float | None
    memory: float | None
    fits: bool
    note: str = ""
    layers: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "estimate": self.estimate,
            "simulated": self.simulated,
            "memory": self.memory,
            "fits": self.fits,
            "note": self.note,
            "layers": list(self.layers),
            "assignment": None if self.assignment is None else list(self.assignment),
        }


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` returns (frozen); ``to_dict()`` is ``stratopt plan --json``."""

    model: str
    cluster: Cluster
    memory_gb: float
    plan: Strategy
    baselines: tuple[Strategy, ...]
    status: str
    bound: float | None
    seconds: float
    costing: Any = field(repr=False, compare=False, default=None)

    def best_baseline(self) -> Strategy | None:
        """The fastest baseline that fits (by the additive estimate), or None."""
        fitting = [b for b in self.baselines if b.fits and b.estimate is not None]
        return min(fitting, key=lambda b: b.estimate or 0.0) if fitting else None

    def speedup(self) -> float | None:
        """The best fitting baseline's estimate over the plan's (None without both)."""
        best = self.best_baseline()
        if best is None or best.estimate is None or self.plan.estimate is None or not self.plan.fits:
            return None
        return best.estimate / self.plan.estimate

    def to_dict(self) -> dict[str, Any]:
        best = self.best_baseline()
        return {
            "model": self.model,
            "cluster": {
                "nodes": self.cluster.nodes,
                "gpus_per_node": self.cluster.gpus_per_node,
                "devices": self.cluster.devices,
                "machine": self.cluster.machine.name,
            },
            "memory_gb": self.memory_gb,
            "units": "us",
            "status": self.status,
            "bound": self.bound,
            "seconds": self.seconds,
            "plan": self.plan.to_dict(),
            "baselines": [b.to_dict() for b in self.baselines],
            "best_baseline": None if best is None else best.name,
            "speedup": self.speedup(),
        }


# -- what operators are ------------------------------------------------------------------------


def batch_axes(op: Operator) -> list[str]:
    """The axes that index the operator's batch (its output's first dimension)."""
    return list(op.outputs[0].dims[0]) if op.outputs and op.outputs[0].dims else []


def _is_product(op: Operator) -> bool:
    return op.op in ("gemm", "conv") and any(i.param for i in op.inputs)


def _column_parallel(graph: Graph, index: dict[str, int], op: Operator) -> bool:
    """Megatron's rule of thumb: a linear that reads the residual stream (a norm's or an embedding's
    output, or a graph input) splits its output features; one that reads another layer's output
    (attention's, the MLP's activation) splits its input features."""
    source = next((i.source for i in op.inputs if not i.param), None)
    if source is None:
        return True
    producer = graph.operators[index[source]]
    return producer.op == "norm" or bool(producer.attrs.get("lookup"))


# -- the words users use ---------------------------------------------------------------------------


_LAYER = re.compile(r"\d+")


def describe_layers(
    graph: Graph, configs: tuple[np.ndarray, ...], assignment: tuple[int, ...], sharded: Callable[[int, int], bool]
) -> list[dict]:
    """The strategy in words, for every operator that holds weights: data-parallel degree (batch
    split), tensor-parallel degree (the other splits) and how (column / row / vocabulary / heads),
    whether its weights are sharded. Operators named alike up to a layer number (``layers.3.mlp``)
    with the same words are one row (``layers.*.mlp``, with the layer numbers)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for v, op in enumerate(graph.operators):
        if not any(i.param for i in op.inputs):
            continue
        config = dict(zip(op.axes, configs[v][assignment[v]].tolist(), strict=True))
        batch = batch_axes(op)
        dp = math.prod(config[a] for a in batch)
        tp = math.prod(c for a, c in config.items() if a not in batch)
        how = ""
        if tp > 1 and op.op in ("gemm", "conv"):
            attrs = op.attrs
            split = [
                g for g in ("n", "k", "m", "batch") if any(config[a] > 1 for a in attrs.get(g, []) if a not in batch)
            ]
            named = {"n": "column", "k": "row", "m": "sequence", "batch": "heads"}
            how = "+".join(named[g] for g in split)
            if attrs.get("lookup") and "k" in split:
                how = "vocabulary"
        fsdp = sharded(v, assignment[v])
        held = float(weight_tile(op, configs[v][assignment[v] : assignment[v] + 1])[0])
        divided = held < sum(i.use.size for i in op.inputs if i.param)
        weights = "sharded (FSDP)" if fsdp else ("split" if divided else "replicated")
        numbers = _LAYER.findall(op.name)
        pattern = _LAYER.sub("*", op.name) if numbers else op.name
        words = f"TP {tp}{f' ({how})' if how else ''}, DP {dp}, weights {weights}"
        key = (pattern, words)
        row = rows.setdefault(
            key,
            {"layer": pattern, "op": op.op, "tp": tp, "dp": dp, "how": how, "weights": weights, "count": 0, "at": []},
        )
        row.setdefault("first", op.name)
        row["count"] += 1
        if numbers:
            row["at"].append(int(numbers[0]))
        row["config"] = {a: c for a, c in config.items() if c > 1}
    out = []
    for row in rows.values():
        at = sorted(set(row.pop("at")))
        first = row.pop("first")
        if row["count"] == 1:
            row["layer"], at = first, []
        row["layers"] = _ranges(at) if at else ""
        out.append(row)
    return out


def _ranges(values: list[int]) -> str:
    """``1-24``, ``2,4,6``, or the first and last and how many when that is long."""
    parts, start = [], values[0]
    for a, b in zip(values, [*values[1:], None], strict=True):
        if b is None or b != a + 1:
            parts.append(f"{start}" if start == a else f"{start}-{a}")
            if b is not None:
                start = b
    if len(parts) > 4:
        return f"{values[0]}..{values[-1]}, {len(values)} of them"
    return ",".join(parts)


# -- solving under the memory limit -----------------------------------------------------------------


def _memory(costing: Any, assignment: tuple[int, ...]) -> float:
    return float(sum(costing.vertex_costs[v].memory[c] for v, c in enumerate(assignment)))


def _dp(problem: StrategyProblem, time_limit: float | None) -> tuple[tuple[int, ...], float] | None:
    from stratopt.solvers import solve

    result = solve(problem, "dp", time_limit=time_limit)
    if result.assignment is None or result.status.value != "optimal":
        return None
    return tuple(int(c) for c in result.assignment), float(result.objective or 0.0)


def _with_node_costs(problem: StrategyProblem, costs: list[np.ndarray]) -> StrategyProblem:
    return problem.replace(node_costs=costs)


def _solve_under_memory(
    costing: Any, limit: float, time_limit: float | None, say: Callable[[str], None]
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """(assignment, status, lower bound): the DP's optimum if it fits, else Lagrangian bisection on
    one price per byte, each step an exact DP; the bound is the best dual value."""
    base = [np.asarray(c.total, dtype=np.float64) for c in costing.vertex_costs]
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    return under_memory(costing.problem, base, memory, limit, time_limit, say)


def under_memory(
    problem: StrategyProblem,
    base: list[np.ndarray],
    memory: list[np.ndarray],
    limit: float,
    time_limit: float | None,
    say: Callable[[str], None],
    *,
    oracle: Callable[[float], tuple[tuple[int, ...], float] | None] | None = None,
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """The least-cost assignment of ``problem`` (node costs ``base``) whose summed per-vertex
    ``memory`` stays within ``limit``, as :func:`_solve_under_memory` finds it: (assignment, status,
    lower bound). ``oracle(price)``, when given, is the exact optimum (assignment, value) of the
    costs ``base + price * memory`` (default: the DP on ``problem`` with those node costs)."""
    started = time.perf_counter()

    def left() -> float | None:
        return None if time_limit is None else max(1.0, time_limit - (time.perf_counter() - started))

    def exact(price: float) -> tuple[tuple[int, ...], float] | None:
        if oracle is not None:
            return oracle(price)
        if price == 0.0:
            return _dp(problem, left())
        return _dp(_with_node_costs(problem, [b + price * m for b, m in zip(base, memory, strict=True)]), left())

    def cost(a: tuple[int, ...]) -> float:
        return float(evaluate(problem, a).objective)

    found = exact(0.0)
    if found is None:
        return None, "no answer from the DP", None
    best, best_cost = found

    def used(a: tuple[int, ...]) -> float:
        return float(sum(memory[v][c] for v, c in enumerate(a)))

    if used(best) <= limit:
        return best, "optimal", best_cost
    least = sum(float(m.min()) for m in memory)
    if least > limit:
        return None, f"infeasible: the least memory any strategy needs is {least / 1e9:.1f} GB per device", None
    bound = -math.inf

    def penalised(price: float) -> tuple[tuple[int, ...], bool] | None:
        """The exact optimum with memory at ``price`` microseconds per byte, and whether it fits;
        its Lagrangian dual value raises the bound."""
        nonlocal bound
        step = exact(price)
        if step is None:
            return None
        a, value = step
        bound = max(bound, value - price * limit)
        return a, used(a) <= limit

    feasible: tuple[int, ...] | None = None
    feasible_cost = math.inf
    lo, hi = 0.0, max(best_cost, 1.0) / max(limit, 1.0)
    for _ in range(60):  # find a price at which the penalised optimum fits
        found = penalised(hi)
        if found is None:
            break
        if found[1]:
            feasible, feasible_cost = found[0], cost(found[0])
            break
        lo, hi = hi, hi * 4.0
    if feasible is None:
        return None, "no plan under the memory limit found", None
    for i in range(14):  # narrow the price
        if time_limit is not None and time.perf_counter() - started > time_limit:
            break
        mid = (lo + hi) / 2.0
        found = penalised(mid)
        if found is None:
            break
        if found[1]:
            hi = mid
            value = cost(found[0])
            if value < feasible_cost:
                feasible, feasible_cost = found[0], value
        else:
            lo = mid
        say(f"memory price {mid:.3g} us/byte: best fitting {feasible_cost:.1f} us, bound {bound:.1f} us ({i + 1}/14)")
    gap = (feasible_cost - bound) / feasible_cost if feasible_cost > 0 else 0.0
    return feasible, "optimal" if gap <= 1e-9 else "feasible", bound


# -- baselines ------------------------------------------------------------------------------------


Pattern = Callable[[int, Operator, dict[str, int]], bool]


def _pick(
    costing: Any,
    allowed: Pattern,
    *,
    fsdp: bool = False,
    fallback: Pattern | None = None,
    why: Callable[[Operator], str] = lambda op: f"operator {op.name} has no configuration in the pattern",
    notes: list[str] | None = None,
) -> tuple[int, ...] | str:
    """The cheapest assignment whose every operator takes an allowed configuration (the exact DP
    over the allowed ones), or why there is none. ``fsdp``: a configuration that has a sharded twin
    takes the twin (the weight state sharded over its replicas), else none is sharded. Where an
    operator has no allowed configuration, ``fallback`` (if given) says which it takes instead, and
    ``notes`` records it."""
    graph, problem = costing.graph, costing.problem
    costs = []
    for v, op in enumerate(graph.operators):
        table = costing.configs[v]
        rows = [dict(zip(op.axes, r, strict=True)) for r in table.tolist()]
        shard = np.array([costing.is_sharded(v, c) for c in range(len(rows))], dtype=bool)
        twinned = {tuple(r) for r in table[shard].tolist()}
        # fsdp: the twin where there is one, else the configuration itself
        form = shard | np.array([tuple(r) not in twinned for r in table.tolist()]) if fsdp else ~shard
        ok = np.array([allowed(v, op, r) for r in rows]) & form
        if not ok.any() and fallback is not None:
            ok = np.array([fallback(v, op, r) for r in rows]) & form
            if ok.any() and notes is not None:
                notes.append(op.name)
        if not ok.any():
            return why(op)
        costs.append(np.where(ok, np.asarray(costing.vertex_costs[v].total, dtype=np.float64), float(FORBIDDEN)))
    found = _dp(_with_node_costs(problem, costs), None)
    if found is None:
        return "the pattern admits no strategy"
    return found[0]


Baseline = tuple[str, "tuple[int, ...] | str", str]


def baselines(costing: Any, gpus_per_node: int) -> list[Baseline]:
    """The hand-written strategies as (name, assignment or why it cannot be expressed, a note).
    ``costing`` must come from :func:`stratopt.cost.build` with ``shard_weights=True`` for the FSDP
    ones to shard anything."""
    graph = costing.graph
    p = costing.policy.procs
    out: list[Baseline] = []

    def data_parallel(v: int, op: Operator, config: dict[str, int]) -> bool:
        batch = batch_axes(op)
        return math.prod(config[a] for a in batch) == p and all(c == 1 for a, c in config.items() if a not in batch)

    def no_batch(op: Operator) -> str:
        size = math.prod(op.size_of(a) for a in batch_axes(op))
        return f"the batch of {size} ({op.name}) does not split over {p} devices"

    out.append(("data-parallel", _pick(costing, data_parallel, why=no_batch), ""))
    out.append(("fsdp", _pick(costing, data_parallel, fsdp=True, why=no_batch), ""))
    index = graph.index
    column = {v: _column_parallel(graph, index, op) for v, op in enumerate(graph.operators) if _is_product(op)}
    for t in sorted({gpus_per_node, gpus_per_node // 2}, reverse=True):
        if t < 2 or p % t:
            continue
        d = p // t

        def megatron(v: int, op: Operator, config: dict[str, int], t: int = t, d: int = d) -> bool:
            batch = batch_axes(op)
            if math.prod(config[a] for a in batch) != d:
                return False
            rest = {a: c for a, c in config.items() if a not in batch}
            model = math.prod(rest.values())
            if op.op == "norm":
                return model == 1
            if v in column:
                attrs = op.attrs
                if attrs.get("lookup"):
                    wanted = attrs["k"]
                elif column[v]:
                    wanted = attrs["n"]
                else:
                    wanted = attrs["k"]
                return math.prod(rest.get(a, 1) for a in wanted) == t and model == t
            return model in (1, t)

        def replicated(v: int, op: Operator, config: dict[str, int], d: int = d) -> bool:
            batch = batch_axes(op)
            rest = math.prod(c for a, c in config.items() if a not in batch)
            return math.prod(config[a] for a in batch) == d and rest == 1

        def no_split(op: Operator, d: int = d) -> str:
            size = math.prod(op.size_of(a) for a in batch_axes(op))
            return f"the batch of {size} ({op.name}) does not split over {d} data-parallel groups"

        for sharded in (False, True) if d > 1 else (False,):  # one data-parallel group: nothing to shard over
            kept: list[str] = []
            tp = _pick(costing, megatron, fsdp=sharded, fallback=replicated, why=no_split, notes=kept)
            note = ""
            if kept and not isinstance(tp, str):  # Megatron-LM pads a vocabulary to split it; we cannot
                names = ", ".join(kept[:3]) + (f" and {len(kept) - 3} more" if len(kept) > 3 else "")
                note = f"{names} cannot split {t} ways (sizes not divisible): replicated"
            out.append((f"megatron-tp{t}{'-fsdp' if sharded else ''}", tp, note))
    return out


# -- the plan --------------------------------------------------------------------------------------


def plan(
    model: Graph | str,
    nodes: int,
    gpus_per_node: int,
    *,
    machine: str | Machine = "h100",
    memory_gb: float | None = None,
    time_limit: float | None = 120.0,
    simulate: bool = True,
    progress: Callable[[str], None] | None = None,
) -> PlanResult:
    """The optimal plan for ``model`` on ``nodes`` x ``gpus_per_node`` devices, and the baselines.

    ``model`` is an operator graph or anything ``stratopt solve`` takes (a zoo name, an ONNX file, a
    graph file, a ``module:function`` entry point). ``memory_gb`` defaults to the device's memory.

    >>> r = plan("gpt", 1, 4, simulate=False)
    >>> r.plan.fits and all(r.plan.estimate <= b.estimate + 1e-6 for b in r.baselines if b.fits and b.estimate)
    True
    """
    from stratopt.cost import build
    from stratopt.instances import load_instance

    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    where = cluster(nodes, gpus_per_node, machine)
    graph = load_instance(model) if isinstance(model, str) else model
    if not isinstance(graph, Graph):
        raise ModelError(f"{model}: not a model (expected a network, graph file, ONNX file or entry point)")
    limit_gb = where.machine.memory_gb if memory_gb is None else float(memory_gb)
    if not limit_gb > 0:
        raise ModelError(f"the memory per device must be a positive number of GB, got {memory_gb!r}")
    # Any block size down to one element: data parallelism over as many devices as samples.
    costing = build(graph, where.devices, profile="default", machine=where.machine, cutoff=1, shard_weights=True)
    say(costing.summary())
    limit = limit_gb * 1e9
    assignment, status, bound = _solve_under_memory(costing, limit, time_limit, say)

    def sharded(v: int, c: int) -> bool:
        return costing.is_sharded(v, c)

    def measured(name: str, a: tuple[int, ...], note: str) -> Strategy:
        estimate = float(evaluate(costing.problem, a).objective)
        memory = _memory(costing, a)
        simulated = None
        if simulate:
            from stratopt.sim.trace import simulate_strategy

            simulated = float(simulate_strategy(costing, a)[1]["iteration_time"])
        layers = tuple(describe_layers(graph, costing.configs, a, sharded))
        return Strategy(name, a, estimate, simulated, memory, memory <= limit, note, layers)

    results: list[Strategy] = []
    candidates: list[tuple[float, tuple[int, ...]]] = []
    for name, found, remark in baselines(costing, gpus_per_node):
        if isinstance(found, str):
            results.append(Strategy(name, None, None, None, None, False, f"cannot be expressed: {found}"))
            continue
        results.append(measured(name, found, remark))
        if results[-1].fits:
            candidates.append((float(results[-1].estimate or 0.0), found))
        say(f"baseline {name}: {results[-1].estimate or 0.0:.1f} us, {(results[-1].memory or 0.0) / 1e9:.1f} GB")
    note = "the DP's optimum" if status == "optimal" else "Lagrangian DP under the memory limit"
    if assignment is not None:
        candidates.append((float(evaluate(costing.problem, assignment).objective), assignment))
    if candidates:
        cost, chosen = min(candidates, key=lambda c: c[0])
        if assignment is None or cost < float(evaluate(costing.problem, assignment).objective) - 1e-9:
            note = "a baseline: better than what the memory search found"
        best = measured("plan", chosen, note)
    else:
        best = Strategy("plan", None, None, None, None, False, status)
    return PlanResult(
        graph.name, where, limit_gb, best, tuple(results), status, bound, time.perf_counter() - started, costing
    )
