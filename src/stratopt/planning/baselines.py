"""The strategies people write by hand, as configurations of the same model: data parallel, FSDP
(ZeRO-3), Megatron-LM tensor parallelism inside a node with data parallelism across, and Megatron
with FSDP (see :mod:`stratopt.planning.planner` for each one's definition). Each is the cheapest
assignment that keeps to its pattern (the exact DP over the pattern's configurations).

Megatron's rule, which linear is column parallel and which row parallel, is :func:`_column_parallel`:
the one place it is written."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.graph.ir import Graph, Operator
from stratopt.planning.batch import batch_axes, shared
from stratopt.planning.memory import exact_dp
from stratopt.problem import FORBIDDEN


def _is_product(op: Operator) -> bool:
    return op.op in ("gemm", "conv") and any(i.param for i in op.inputs)


#: Operators that only move data: Megatron's rule looks through them to the layer that computed it.
_LAYOUT = frozenset({"concat", "split", "stack", "unstack", "transpose", "reshape"})


def _column_parallel(graph: Graph, index: dict[str, int], op: Operator) -> bool:
    """Megatron's rule of thumb: a linear that reads the residual stream (a norm's or an embedding's
    output, or a graph input) splits its output features; one that reads another layer's output
    (attention's, the MLP's activation) splits its input features. Layout operators in between
    are looked through: PaSE's Transformer stacks the normed stream three times and projects q, k
    and v in one einsum, which Megatron runs as one column-parallel QKV projection (heads split),
    its output projection row parallel (one all-reduce after it)."""
    source = next((i.source for i in op.inputs if not i.param), None)
    while source is not None:
        producer = graph.operators[index[source]]
        if producer.op not in _LAYOUT:
            return producer.op == "norm" or bool(producer.attrs.get("lookup"))
        source = next((i.source for i in producer.inputs if not i.param), None)
    return True


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
    costs, node_costs = [], costing.node_costs()
    for v, op in enumerate(graph.operators):
        table = costing.configs[v]
        rows = [dict(zip(op.axes, r, strict=True)) for r in table.tolist()]
        # FSDP's ZeRO-3 twins (the patterns people write shard that way; ZeRO-2 and HSDP are the search's)
        zero2 = np.array([costing.sharding(v, c) in ("zero2", "hsdp") for c in range(len(rows))], dtype=bool)
        shard = np.array([costing.is_sharded(v, c) for c in range(len(rows))], dtype=bool) & ~zero2
        twinned = {tuple(r) for r in table[shard].tolist()}
        # fsdp: the twin where there is one, else the configuration itself
        form = (shard | np.array([tuple(r) not in twinned for r in table.tolist()]) if fsdp else ~shard) & ~zero2
        form &= ~np.array(
            [costing.is_recomputed(v, c) for c in range(len(rows))], dtype=bool
        )  # people keep activations
        ok = np.array([allowed(v, op, r) for r in rows]) & form
        if not ok.any() and fallback is not None:
            ok = np.array([fallback(v, op, r) for r in rows]) & form
            if ok.any() and notes is not None:
                notes.append(op.name)
        if not ok.any():
            return why(op)
        costs.append(np.where(ok, np.asarray(node_costs[v], dtype=np.float64), float(FORBIDDEN)))
    found = exact_dp(problem.replace(node_costs=costs), None)
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
    batches = batch_axes(graph)

    def groups(op: Operator, d: int) -> int:
        """How many ways the pattern splits ``op``'s batch over ``d`` data-parallel groups: none
        where the samples share it (each group runs it whole)."""
        return 1 if shared(op, batches[op.name]) else d

    def data_parallel(v: int, op: Operator, config: dict[str, int]) -> bool:
        batch = batches[op.name]
        return math.prod(config[a] for a in batch) == groups(op, p) and all(
            c == 1 for a, c in config.items() if a not in batch
        )

    def no_batch(op: Operator) -> str:
        size = math.prod(op.size_of(a) for a in batches[op.name])
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
            batch = batches[op.name]
            if math.prod(config[a] for a in batch) != groups(op, d):
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
            batch = batches[op.name]
            rest = math.prod(c for a, c in config.items() if a not in batch)
            return math.prod(config[a] for a in batch) == groups(op, d) and rest == 1

        def no_split(op: Operator, d: int = d) -> str:
            size = math.prod(op.size_of(a) for a in batches[op.name])
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
