"""Strategies in the words users use: tensor- and data-parallel degrees, column / row / vocabulary
splits, sharded weights, one row per group of alike layers."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.cost.common import weight_tile
from stratopt.graph.ir import Graph
from stratopt.planning.batch import batch_axes

_LAYER = re.compile(r"\d+")


def describe_layers(
    graph: Graph,
    configs: tuple[np.ndarray, ...],
    assignment: tuple[int, ...],
    sharded: Callable[[int, int], bool | str],
    recomputed: Callable[[int, int], bool] | None = None,
) -> list[dict]:
    """The strategy in words, for every operator that holds weights: data-parallel degree (batch
    split), tensor-parallel degree (the other splits) and how (column / row / vocabulary / heads /
    experts; a norm's sequence or width), whether its weights are sharded (``sharded``: true, or
    ``"zero2"`` for ZeRO-2, ``"hsdp"`` for HSDP) (and, with ``recomputed``, whether its output is recomputed in
    the backward pass). Operators named alike up to a layer number (``layers.3.mlp``)
    with the same words are one row (``layers.*.mlp``, with the layer numbers)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    batches = batch_axes(graph)
    for v, op in enumerate(graph.operators):
        if not any(i.param for i in op.inputs):
            continue
        config = dict(zip(op.axes, configs[v][assignment[v]].tolist(), strict=True))
        batch = batches[op.name]
        dp = math.prod(config[a] for a in batch)
        tp = math.prod(c for a, c in config.items() if a not in batch)
        how = ""
        if tp > 1 and op.op in ("gemm", "conv"):
            attrs = op.attrs
            split = [
                g for g in ("n", "k", "m", "batch") if any(config[a] > 1 for a in attrs.get(g, []) if a not in batch)
            ]
            # a batched product's batch axis: attention heads, or a mixture of experts' experts
            named = {"n": "column", "k": "row", "m": "sequence", "batch": "experts" if attrs.get("units") else "heads"}
            how = "+".join(named[g] for g in split)
            if attrs.get("lookup") and "k" in split:
                how = "vocabulary"
        elif tp > 1 and op.op == "norm":  # over the axes its weights have (the width), or others (the sequence)
            scaled = {a for i in op.inputs if i.param for group in i.use.dims for a in group}
            how = "width" if any(config[a] > 1 for a in scaled) else "sequence"
        fsdp = sharded(v, assignment[v])
        held = float(weight_tile(op, configs[v][assignment[v] : assignment[v] + 1])[0])
        divided = held < sum(i.use.size for i in op.inputs if i.param)
        kind = {"zero2": "ZeRO-2", "hsdp": "HSDP"}.get(str(fsdp), "FSDP")
        weights = f"sharded ({kind})" if fsdp else ("split" if divided else "replicated")
        if recomputed is not None and recomputed(v, assignment[v]):
            weights += ", output recomputed"
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
