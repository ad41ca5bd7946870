"""Split regions: where the activations between a module that splits its output features (or
reduce-scatters its partial sums over their last dimension) and the row-parallel modules it feeds
(or column-parallel ones that gather what they read, ``ColwiseParallel(input_layouts=Shard(-1))``)
stay split over the tensor-parallel devices, as Megatron keeps them
(:func:`split_regions`; :mod:`~stratopt.planning.torchplan` lays plans out with them)."""

from __future__ import annotations

import math
from typing import Any

from stratopt.errors import ModelError

__all__ = ["config_of", "fused_pieces", "split_regions"]


def config_of(costing: Any, v: int, c: int) -> dict[str, int]:
    """Operator ``v``'s configuration ``c`` as a split count per axis."""
    op = costing.graph.operators[v]
    return dict(zip(op.axes, (int(x) for x in costing.configs[v][c]), strict=True))


def split_regions(
    costing: Any,
    assignment: tuple[int, ...],
    styles: dict[int, str],
    tp: int,
    batches: dict[str, Any],
    out_edges: dict[int, list[tuple[int, int]]],
    in_edges: dict[int, list[tuple[int, int]]],
) -> tuple[dict[int, set[int]], set[int]]:
    """(per column-parallel module, the operators between it and the row-parallel modules it feeds
    where the activations may stay split; the modules whose region does stay split: every operator
    in it reads only from split regions or their modules). A region may cut a fused projection's
    output into its pieces (:func:`fused_pieces`) only where a column-parallel module opens it."""
    problem, ops = costing.problem, costing.graph.operators

    def cost(e: int, u: int, w: int) -> float:
        return float(problem.edge_cost(e)[assignment[u], assignment[w]])

    def model_split(v: int) -> int:
        config = config_of(costing, v, assignment[v])
        return math.prod(c for a, c in config.items() if a not in batches[ops[v].name])

    # the modules that hold weights: an operator inside one runs on DTensors, whose views take the
    # whole sizes; one between modules runs on each device's share
    modules = {str(p).rpartition(".")[0] for op in ops for p in (op.attrs.get("params") or ())[:1]}

    def local_view(w: int) -> bool:
        """Whether ``w``, if a view or reshape between modules, leaves PyTorch to work out every
        dimension the split lies on (a size the model fixed stays whole on a device's share)."""
        op = ops[w]
        if op.op != "reshape" or "inferred" not in op.attrs or op.name.rpartition(".")[0] in modules:
            return True
        config = config_of(costing, w, assignment[w])
        split = [
            i
            for i, group in enumerate(op.outputs[0].dims)
            if any(config.get(a, 1) > 1 and a not in batches[op.name] for a in group)
        ]
        return set(split) <= set(op.attrs["inferred"])

    def region(v: int) -> set[int] | None:
        """The operators between column-parallel ``v`` (or row-parallel ``v``, whose partial sums
        the edges out of it split, as a reduce-scatter does) and the row-parallel modules it feeds,
        when the activations may stay split all the way (None otherwise)."""
        seen: set[int] = set()
        todo = [v]
        while todo:
            u = todo.pop()
            for w, e in out_edges.get(u, []):
                if styles[w] == "colwise" and u != v and _holds_split(u):
                    continue  # a column-parallel module gathers the split it reads (the edge prices it)
                if cost(e, u, w) > 0.0 and not (u == v and styles[v] == "rowwise"):
                    return None
                if styles[w] == "rowwise":
                    continue
                if styles[v] == "rowwise" and ops[w].attrs.get("pieces"):
                    return None  # a reduce-scatter hands each device a contiguous share, not one of each piece
                if styles[w] != "free" or model_split(w) != tp or not out_edges.get(w) or not local_view(w):
                    return None
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    def _holds_split(u: int) -> bool:
        """Whether operator ``u`` (inside a region) splits its output's last dimension beyond the batch."""
        config = config_of(costing, u, assignment[u])
        last = ops[u].outputs[0].dims[-1]
        return any(config.get(a, 1) > 1 and a not in batches[ops[u].name] for a in last)

    regions = {}
    for v in styles:
        # (a lookup opens one split over its table's width: T5's position bias over the heads)
        if styles[v] == "colwise" or (styles[v] == "rowwise" and not ops[v].attrs.get("lookup")):
            between = region(v)  # a row-parallel module opens one only where all it feeds lies inside
            feeds = {w for w, _ in out_edges.get(v, [])}
            if between is not None and (styles[v] == "colwise" or (bool(feeds) and feeds <= between)):
                regions[v] = between

    # an operator in a split region must read only from split regions (or from modules that hand
    # them a split), or read whole what it does not split (rotary tables broadcast over the heads):
    # a region one of whose operators also reads a whole tensor along a split axis is gathered
    # instead, and so are the regions that read from it, until none does
    def splits(w: int, e: int) -> bool:
        """Whether ``w`` splits an axis of the input it reads over edge ``e`` beyond the batch."""
        config = config_of(costing, w, assignment[w])
        split = {a for a, c in config.items() if c > 1 and a not in batches[ops[w].name]}
        return any(a in split for group in ops[w].inputs[costing.edges[e][2]].use.dims for a in group)

    shard_out = set(regions)
    while True:
        inside = set().union(*(regions[v] for v in shard_out))
        bad = {
            v
            for v in shard_out
            if any(
                u not in inside and u not in shard_out and splits(w, e)
                for w in regions[v]
                for u, e in in_edges.get(w, [])
            )
        }
        if not bad:
            break
        shard_out -= bad
    return regions, shard_out


def fused_pieces(costing: Any, region: set[int]) -> int:
    """How many pieces the operators of a column-parallel module's split ``region`` cut its output
    into (1: none does): a fused projection (GPT-2's ``c_attn``, cut into query, key and value) whose
    output features split over the tensor-parallel devices runs as priced when each device holds its
    share of every piece, the weight's output features laid out interleaved
    (:mod:`stratopt.torch.apply`), and the pieces are cut from each device's share."""
    ops = costing.graph.operators
    found = {int(ops[w].attrs["pieces"]) for w in region if ops[w].attrs.get("pieces")}
    if len(found) > 1:
        raise ModelError(f"a split region cuts one output into {sorted(found)} pieces at once")
    return found.pop() if found else 1
