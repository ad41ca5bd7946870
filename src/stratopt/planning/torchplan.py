"""Which strategies PyTorch's DTensor runs as they are priced, and each module's placement in them.

A strategy runs on a ``dp x tp`` device mesh (``dp`` data-parallel groups of ``tp`` devices, tensor
parallelism inside a node) when every operator splits its batch over exactly ``dp`` devices (one that
no batch reaches, over none) and splits its other axes over ``1`` or ``tp`` devices, and every
operator that holds weights takes a form DTensor has a style for:

- a matrix product (``nn.Linear``, Hugging Face's ``Conv1D``) whose other axes are whole
  (``replicate``), whose output features split ``tp`` ways (``colwise``: ``ColwiseParallel``) or whose
  input features do (``rowwise``: ``RowwiseParallel``, its output all-reduced);
- an embedding split over its vocabulary (``vocab``: ``RowwiseParallel`` on ``nn.Embedding``) or its
  width (``colwise``), or whole;
- a mixture of experts' products split over the experts (``expert``: each device holds ``1/tp`` of
  the experts and runs them on every token of its data-parallel group routed to them; dispatch and
  combine split the same way, the tokens' partial sums all-reduced forward and their gradient
  backward), over the data-parallel groups (``expert-dp``: products and activation split the
  experts ``dp`` ways and nothing else, dispatch and combine keep the tokens split, the tokens sent
  to their experts all-to-all; the only operators whose split is not their batch over ``dp``), or
  whole;
- a norm split over the sequence (``sequence``: ``SequenceParallel``) or over its width, its
  weights split alike (``width``; both :mod:`~stratopt.planning.sequence`);
- anything else that holds weights (convolutions, norms) whole; several operators that read one
  module's weights (a mixture of experts' up and down products) are that module once.

A model's output (an operator no other reads: its caller, or the loss inside a Hugging Face model,
reads it whole) is never column-split: DTensor would hand the caller its shard, and the gather the
caller needs is not priced (the graph has no reader for it).

Each may also shard its weight state over its ``dp`` replicas (``fsdp``: ``fully_shard``). An
operator recomputes its outputs only as a checkpointed block's inner operator
(:mod:`~stratopt.planning.recompute`); a module inside such a block runs its forward, and its
forward collectives (``"recompute"`` among its collectives), again in the backward pass. Between a column-parallel module and the row-parallel ones it feeds,
the activations stay split (``output: shard``) when every operator in between keeps the split as the
plan priced it (the same ``tp`` ways, no re-layout on the way) and reads nothing else along the split
(a rotary table broadcast over the heads is read whole); otherwise the column-parallel module
gathers its output. A row-parallel module may open one too, its partial sums reduce-scattered over
their last dimension (``RowwiseParallel(output_layouts=Shard(-1))``). The operators without weights run on what their modules
hand them: the search keeps to the pairs of configurations on each edge that run as priced
(:func:`~stratopt.planning.pairs.handed_on`: a split made or read by an operator without weights must be made and read the
same way), and :func:`as_run` says which operators a strategy would run whole anyway (a region
gathered after all), which the runnable estimate prices as they run.

:func:`module_placements` gives each module's placement and the collectives the cost model priced for
it (kind and count, forward and backward), which ``stratopt check-plan`` holds against PyTorch's own
count; :func:`restricted_costs` is the restriction ``plan(..., expressible="torch")`` searches in
(every other configuration forbidden), :func:`find_mesh` the mesh a strategy runs on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from stratopt.cost.common import output_bytes
from stratopt.errors import ModelError
from stratopt.graph.ir import Operator
from stratopt.planning.batch import batch_axes, shared
from stratopt.planning.recompute import block_of, blocks, checkpointed, tails
from stratopt.planning.regions import config_of as _config
from stratopt.planning.regions import fused_pieces
from stratopt.planning.regions import split_regions as _split_regions
from stratopt.planning.sequence import STREAM_NORMS, SequenceLayouts, sequence_layouts, sequenced, stream_norm
from stratopt.problem import FORBIDDEN

__all__ = [
    "AS_RUN_ROUNDS",
    "ModulePlacement",
    "as_run",
    "find_mesh",
    "mesh_shapes",
    "module_placements",
    "restricted_costs",
    "style",
    "unpriced_gathers",
    "untied",
]


@dataclass(frozen=True)
class ModulePlacement:
    """One module of a plan as DTensor runs it: its style over the ``tp`` mesh dimension, whether
    ``fully_shard`` shards it over ``dp``, the layout of the activation it reads and writes
    (``shard``: split over ``tp``; ``replicate``: whole), the parameters the graph prices for it, and
    the collectives the cost model priced (``{"forward": {kind: count}, "backward": {...}}``)."""

    module: str
    operator: str
    tp: str
    fsdp: bool
    input: str = "replicate"
    output: str = "replicate"
    params: tuple[str, ...] = ()
    collectives: dict[str, dict[str, int]] = field(default_factory=dict)
    held: float = 0.0
    #: Whether a checkpointed block's re-run runs the module's product again (False: the re-run
    #: stops before it, :func:`~stratopt.planning.recompute.tails`).
    rerun: bool = True
    #: The dimension a ``sequence`` input or output splits (:mod:`~stratopt.planning.sequence`).
    sequence_dim: int = -1
    #: How many equal pieces the split region a column-parallel module opens cuts its output into
    #: (a fused projection: :func:`~stratopt.planning.regions.fused_pieces`); 1: not fused.
    pieces: int = 1
    #: Whether FSDP frees the weights it gathered after the forward pass (ZeRO-3) or keeps them
    #: whole until the backward pass is done (False: ZeRO-2, ``reshard_after_forward=False``).
    reshard: bool = True
    #: HSDP: the data-parallel devices of one node the weight state is sharded over (the gradient's
    #: shards all-reduced across the groups of them); 0: FSDP shards over every data-parallel device.
    hsdp: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The export's entry for the module (keyed by its name there): every other field, the
        parameters as a list and ``held`` as ``held_elements`` (``rerun`` only where it is false)."""
        skip = ["module", "held"] + ([] if not self.rerun else ["rerun"])
        skip += [] if "sequence" in (self.input, self.output) else ["sequence_dim"]
        skip += [] if self.pieces > 1 else ["pieces"]
        skip += [] if self.fsdp and not self.reshard else ["reshard"]
        skip += [] if self.hsdp else ["hsdp"]
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        return {**out, "params": list(self.params), "held_elements": self.held}


#: How many times a search runs again with the splits PyTorch would not keep
#: (:func:`~stratopt.planning.again.unsplit`)
#: forbidden before it gives up on the mesh.
AS_RUN_ROUNDS = 6


def mesh_shapes(devices: int, gpus_per_node: int) -> list[tuple[int, int]]:
    """The ``(dp, tp)`` meshes of ``devices``: tensor parallelism over a divisor of a node."""
    return [(devices // t, t) for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0 and devices % t == 0]


def _holds(op: Operator) -> bool:
    return any(i.param for i in op.inputs)


def style(op: Operator, config: dict[str, int], batch: Sequence[str], dp: int, tp: int) -> str | None:
    """The DTensor style of ``op`` under ``config`` on a ``dp x tp`` mesh (``free`` for an operator
    without weights), or None where there is none."""
    units = op.attrs.get("units") or ()
    if units and dp > 1 and all(config[a] == (dp if a in units else 1) for a in config):
        # a mixture of experts' activation and products over the tokens every data-parallel group
        # sends its experts (the all-to-all form: dispatch and combine split the tokens)
        return "expert-dp" if _holds(op) else "free"
    # an operator the samples share (a lookup of the positions, whose batch is 1) runs whole on each
    if math.prod(config[a] for a in batch) != (1 if shared(op, batch) else dp):
        return None
    rest = {a: c for a, c in config.items() if a not in batch and c > 1}
    model = math.prod(rest.values())
    if model not in (1, tp):
        return None
    if not _holds(op):
        return "free"
    if model == 1:
        return "replicate"
    if stream := stream_norm(op, config, batch, tp):
        return stream
    attrs = op.attrs
    weights = [i for i in op.inputs if i.param and len(i.use.shape) > 1]  # a bias beside them follows n
    if op.op != "gemm" or not {"n", "k"} <= attrs.keys() or len(weights) != 1:
        return None
    split = [g for g in ("m", "n", "k", "batch") if any(a in rest for a in attrs.get(g, []))]
    if any(i.param and len(i.use.shape) > 2 for i in op.inputs):  # experts' stacked weights
        return "expert" if split == ["batch"] and attrs.get("units") else None
    if split == ["k"]:
        return "vocab" if attrs.get("lookup") else "rowwise"
    return "colwise" if split == ["n"] else None


def restricted_costs(costing: Any, dp: int, tp: int, memo: dict[Any, Any] | None = None) -> list[Any] | None:
    """The node costs with every configuration DTensor cannot run on a ``dp x tp`` mesh forbidden
    (None where some operator has none left). ``memo``: the meshes' masks already found for this
    costing (:attr:`~stratopt.planning.pairs.Pairs.meshes`), added to."""
    masks = None if memo is None else memo.get((dp, tp))
    if masks is None:
        batches, outputs = batch_axes(costing.graph), _read_whole(costing)
        masks = []
        for v in range(len(costing.configs)):
            # one look per distinct split (the weight-sharded and recomputing twins share a row)
            _, lead, inverse = np.unique(np.asarray(costing.configs[v]), axis=0, return_index=True, return_inverse=True)
            runs = np.array([_runs(costing, v, int(c), batches, outputs, dp, tp) is not None for c in lead])
            masks.append(runs[np.asarray(inverse).reshape(-1)])
        if memo is not None:
            memo[(dp, tp)] = masks
    if not all(ok.any() for ok in masks):
        return None
    return [
        np.where(ok, np.asarray(node, dtype=np.float64), float(FORBIDDEN))
        for ok, node in zip(masks, costing.node_costs(), strict=True)
    ]


def _read_whole(costing: Any) -> set[int]:
    """The operators whose output no operator reads: the model's outputs, which its caller (or the
    loss inside a Hugging Face model) reads whole."""
    read = {u for u, _, _ in costing.edges}
    return set(range(len(costing.graph.operators))) - read


def _runs(costing: Any, v: int, c: int, batches: dict[str, Any], outputs: set[int], dp: int, tp: int) -> str | None:
    """Operator ``v``'s style under configuration ``c`` where DTensor runs it as priced, else None:
    a style, and no column split of a model output (DTensor would hand the caller its shard, and the
    gather the caller needs is not priced: the graph has no reader for it). Whether its
    recomputation runs is a matter of its block (:func:`~stratopt.planning.recompute.checkpointed`)."""
    op = costing.graph.operators[v]
    found = style(op, _config(costing, v, c), batches[op.name], dp, tp)
    return None if found == "colwise" and v in outputs else found


def find_mesh(costing: Any, assignment: tuple[int, ...], gpus_per_node: int) -> tuple[int, int] | str:
    """The mesh on which DTensor runs ``assignment`` as priced, or why there is none (naming the first
    operator that has no style on the mesh that runs the most of it, whose recomputation no
    checkpointed block runs, or that splits a weight it shares otherwise than its owner:
    :func:`untied`)."""
    graph, p = costing.graph, costing.policy.procs
    recomputed = checkpointed(costing, assignment)
    if isinstance(recomputed, str):
        return recomputed
    batches, outputs = batch_axes(graph), _read_whole(costing)
    why, furthest = "no operator", -1  # the reason on the mesh that runs the most of it
    for dp, tp in sorted(mesh_shapes(p, gpus_per_node), key=lambda m: -m[1]):
        for v, op in enumerate(graph.operators):
            c = assignment[v]
            if _runs(costing, v, c, batches, outputs, dp, tp) is None:
                if v > furthest:
                    label = costing.problem.labels[v][c] if costing.problem.labels else c
                    why, furthest = f"operator {op.name} ({label}) has no DTensor form on a {dp} x {tp} mesh", v
                break
        else:
            pair = untied(costing, assignment, dp, tp)
            if not pair:
                return dp, tp
            first, then = (graph.operators[v].name for v in pair[:2])
            why = f"operators {first} and {then} share a weight and split it differently over {tp} devices"
            break
    return why


def _module(op: Operator) -> str:
    params = op.attrs.get("params") or []
    if not params:
        raise ModelError(f"operator {op.name}: the graph does not name its parameters (import it from PyTorch)")
    return str(params[0]).rpartition(".")[0]


def module_placements(
    costing: Any, assignment: tuple[int, ...], dp: int, tp: int, *, microbatches: int = 1
) -> list[ModulePlacement]:
    """Each weight-holding operator of ``assignment`` as a module placement on a ``dp x tp`` mesh
    (see the module's docstring), with the collectives the cost model priced for it in a step of
    ``microbatches`` micro-batches (``costing`` prices one): every collective once per micro-batch
    but for the weight gradients' reduction over the data-parallel replicas, once a step (gradients
    accumulate locally, as a pipeline stage accumulates them)."""
    ops = costing.graph.operators
    laid = _laid_out(costing, assignment, dp, tp)
    styles, out_edges, in_edges, regions, shard_out = laid
    seq = _sequence(costing, assignment, tp, laid)
    reaches: set[int] = set()  # the row-parallel modules that read a split activation
    for v in shard_out:
        todo, seen = [v], {v}
        while todo:
            for w, _ in out_edges.get(todo.pop(), []):
                if w not in seen:
                    seen.add(w)
                    (reaches.add if styles[w] in ("rowwise", "colwise") else todo.append)(w)
    # a tied weight (an output projection reading the embedding's table) is sharded with its owner
    owned = {
        n: costing.sharding_mode(u, assignment[u]) if dp > 1 else "" for u, op in enumerate(ops) for n in _params(op)
    }
    recomputing = checkpointed(costing, assignment)
    if isinstance(recomputing, str):
        raise ModelError(recomputing)
    again, tail = set(recomputing), tails(costing.graph, blocks(costing.graph))
    out = []
    for v, op in enumerate(ops):
        if styles[v] != "free":
            p = _placement(
                costing, v, assignment, styles[v], dp, v in reaches, v in shard_out, out_edges, in_edges, owned
            )
            fused = op.attrs.get("fused") == "layer_norm"
            p = sequenced(p, seq.taken.get(v), seq.members.get(v, seq.made.get(v)), fused=fused)
            vectors = False  # a fused projection's bias, sharded by FSDP: kept whole and all-reduced instead
            if v in shard_out and styles[v] == "colwise" and (pieces := fused_pieces(costing, regions[v])) > 1:
                vectors = p.fsdp and any(i.param and len(i.use.shape) == 1 for i in op.inputs)
                p = dataclasses.replace(p, pieces=pieces, collectives=_vectors_reduced(p.collectives, vectors))
            p = _recomputing(p, bool(op.attrs.get("tied")), v not in tail) if block_of(p.module) in again else p
            synced = dp > 1 and (not p.fsdp or vectors) and not op.attrs.get("tied") and p.tp != "expert-dp"
            out.append(_per_step(p, microbatches, synced))
    merged: dict[str, ModulePlacement] = {}
    for p in out:
        merged[p.module] = _merged(merged[p.module], p) if p.module in merged else p
    return list(merged.values())


def _laid_out(
    costing: Any, assignment: tuple[int, ...], dp: int, tp: int
) -> tuple[
    dict[int, str], dict[int, list[tuple[int, int]]], dict[int, list[tuple[int, int]]], dict[int, set[int]], set[int]
]:
    """(each operator's style, its outgoing and incoming edges as (operator, edge), the split
    regions and the column-parallel modules whose region stays split: :func:`_split_regions`)."""
    batches, outputs = batch_axes(costing.graph), _read_whole(costing)
    styles = {}
    for v, op in enumerate(costing.graph.operators):
        found = _runs(costing, v, assignment[v], batches, outputs, dp, tp)
        if found is None:
            raise ModelError(f"operator {op.name}: its configuration has no DTensor form on a {dp} x {tp} mesh")
        styles[v] = found
    out_edges: dict[int, list[tuple[int, int]]] = {}
    in_edges: dict[int, list[tuple[int, int]]] = {}
    for e, (u, w, _) in enumerate(costing.edges):
        out_edges.setdefault(u, []).append((w, e))
        in_edges.setdefault(w, []).append((u, e))
    regions, shard_out = _split_regions(costing, assignment, styles, tp, batches, out_edges, in_edges)
    return styles, out_edges, in_edges, regions, shard_out


def _sequence(costing: Any, assignment: tuple[int, ...], tp: int, laid: tuple[Any, ...]) -> SequenceLayouts:
    """The sequence-parallel parts of ``assignment``, from what :func:`_laid_out` found."""
    return sequence_layouts(costing, assignment, laid, lambda v: _config(costing, v, assignment[v]), tp)


def as_run(costing: Any, assignment: tuple[int, ...], dp: int, tp: int) -> tuple[int, ...]:
    """``assignment`` as PyTorch runs it on a ``dp x tp`` mesh: an operator without weights that the
    plan splits over the tensor-parallel devices but that lies in no split region (between a
    column-parallel module handing on its shard and the row-parallel ones it feeds) runs on the whole
    tensors the modules around it hand it, every tensor-parallel device the same work: its
    configuration with only its batch split (the same recomputation; a mixture of experts'
    operators keep their expert split). Elsewhere the same."""
    laid = _laid_out(costing, assignment, dp, tp)
    styles, _, _, regions, shard_out = laid
    inside = set().union(*(regions[v] for v in shard_out)) if shard_out else set()
    kept = _sequence(costing, assignment, tp, laid).members
    batches = batch_axes(costing.graph)
    out = list(assignment)
    for v, style in styles.items():
        if style not in ("free", *STREAM_NORMS) or v in inside or v in kept:
            continue
        op, rows = costing.graph.operators[v], costing.configs[v]
        # a mixture of experts' dispatch, activation and combine split over the experts run inside
        # the experts module, as its products split (the pairs the search keeps to make them agree)
        keep = [i for i, a in enumerate(op.axes) if a in batches[op.name] or a in op.attrs.get("units", ())]
        config = rows[assignment[v]]
        if all(config[i] == 1 for i in range(len(op.axes)) if i not in keep):
            continue
        again, sharded = costing.is_recomputed(v, assignment[v]), costing.sharding_mode(v, assignment[v])
        for c, row in enumerate(rows):
            whole = all(row[i] == (config[i] if i in keep else 1) for i in range(len(op.axes)))
            if whole and costing.is_recomputed(v, c) == again and costing.sharding_mode(v, c) == sharded:
                out[v] = c
                break
    return tuple(out)


def _merged(first: ModulePlacement, then: ModulePlacement) -> ModulePlacement:
    """One module whose weights several operators read (a mixture of experts' up and down products
    on its fused expert weights): PyTorch lays the module out once, so the operators must agree,
    whole or both split over the experts, both sharded or neither. The module's gradients are reduced
    in one bucket and FSDP gathers its weights in one collective, so each collective counts once
    per pass (the cost model prices each operator's share of the bytes, and a latency each)."""
    alike = (first.fsdp, first.reshard, first.hsdp) == (then.fsdp, then.reshard, then.hsdp)
    if first.tp != then.tp or first.tp not in ("replicate", "expert", "expert-dp") or not alike:
        raise ModelError(
            f"module {first.module}: operators {first.operator} and {then.operator} take different placements "
            f"({first.tp}{', fsdp' if first.fsdp else ''} and {then.tp}{', fsdp' if then.fsdp else ''}); "
            "PyTorch lays a module out once"
        )
    phases = {}
    for phase in dict.fromkeys([*first.collectives, *then.collectives]):
        a, b = first.collectives.get(phase, {}), then.collectives.get(phase, {})
        phases[phase] = {k: max(a.get(k, 0), b.get(k, 0)) for k in dict.fromkeys([*a, *b])}
    params = tuple(dict.fromkeys([*first.params, *then.params]))
    held, rerun = first.held + then.held, first.rerun or then.rerun
    return dataclasses.replace(first, params=params, collectives=phases, held=held, rerun=rerun)


def _recomputing(placement: ModulePlacement, tied: bool, rerun: bool) -> ModulePlacement:
    """A module inside a checkpointed block: its forward runs again in the backward pass, with the
    forward's collectives but for FSDP's weight gather (the weights gathered for the recomputation
    stay for the backward, which the plan prices with one gather either way; which of the two
    passes issues it depends on the order the backward reaches the block's modules). Not
    ``rerun``: the block's re-run stops as it enters the module (its last product,
    :func:`~stratopt.planning.recompute.tails`), which issues nothing again."""
    again = dict(placement.collectives.get("forward", {})) if rerun else {}
    if placement.fsdp and not tied and rerun:  # a tied weight's gathers are its owner's (ZeRO-2: kept)
        again["all_gather"] -= 1
    collectives = {**placement.collectives, "recompute": _nonzero(again)}
    return dataclasses.replace(placement, collectives=collectives, rerun=rerun)


def _per_step(placement: ModulePlacement, microbatches: int, synced: bool) -> ModulePlacement:
    """A placement's collectives in a step of ``microbatches`` micro-batches: each pass's once per
    micro-batch, the weight gradients' reduction once (FSDP's reduce-scatter; without FSDP, the
    data-parallel all-reduce where ``synced``, one of the backward pass's all-reduces)."""
    if microbatches == 1:
        return placement
    phases = {phase: {k: n * microbatches for k, n in kinds.items()} for phase, kinds in placement.collectives.items()}
    backward = phases.get("backward", {})
    if placement.fsdp and backward.get("reduce_scatter"):
        backward["reduce_scatter"] = 1
    if synced:
        backward["all_reduce"] -= microbatches - 1  # the data-parallel one of them, once
    return dataclasses.replace(placement, collectives=phases)


def _vectors_reduced(collectives: dict[str, dict[str, int]], vectors: bool) -> dict[str, dict[str, int]]:
    """``collectives`` with the data-parallel all-reduce of a fused projection's bias added where
    FSDP leaves it out (``vectors``; :mod:`stratopt.torch.fused`)."""
    if not vectors:
        return collectives
    backward = dict(collectives.get("backward", {}))
    backward["all_reduce"] = backward.get("all_reduce", 0) + 1
    return {**collectives, "backward": backward}


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: n for k, n in counts.items() if n}


def _params(op: Operator) -> list[str]:
    return [str(n) for n in op.attrs.get("params") or ()]


def _relaid(
    costing: Any, assignment: tuple[int, ...], v: int, edges: dict[int, list[tuple[int, int]]], *, upstream: bool
) -> bool:
    """Whether the plan pays a re-layout between split module ``v`` and the whole tensors it reads
    (``upstream``) or hands on: on an edge next to it, or further along operators without weights
    that keep the split (which DTensor runs whole, the re-layout then falling at the module)."""
    problem, ops = costing.problem, costing.graph.operators
    batches = batch_axes(costing.graph)
    todo, seen = [v], {v}
    while todo:
        u = todo.pop()
        for w, e in edges.get(u, []):
            cost = problem.edge_cost(e)[(assignment[w], assignment[u]) if upstream else (assignment[u], assignment[w])]
            if float(cost) > 0.0:
                return True
            config = _config(costing, w, assignment[w])
            split = math.prod(c for a, c in config.items() if a not in batches[ops[w].name])
            if w not in seen and split > 1 and not _holds(ops[w]):
                seen.add(w)
                todo.append(w)
    return False


def _placement(
    costing: Any,
    v: int,
    assignment: tuple[int, ...],
    kind: str,
    dp: int,
    split_in: bool,
    split_out: bool,
    out_edges: dict[int, list[tuple[int, int]]],
    in_edges: dict[int, list[tuple[int, int]]],
    owned: dict[str, str],
) -> ModulePlacement:
    """Operator ``v``'s module placement and the collectives priced for it: the output's all-reduce
    over split input features (forward), the input gradient's over split output features (backward,
    where the input is computed), a gather of a split output its consumers read whole (forward: where
    the plan pays no re-layout for it, an operator after it keeps the split but also reads a whole
    tensor, so PyTorch gathers anyway, and :func:`unpriced_gathers` prices it), the gradient of a
    whole input a row-parallel module splits gathered back (backward; priced by that function where
    no edge pays for it), and the weight gradient's reduction over the data-parallel replicas
    (backward; FSDP: the weights gathered forward and backward, the gradient reduce-scattered)."""
    op = costing.graph.operators[v]
    c = assignment[v]
    tied = op.attrs.get("tied")
    mode = owned.get(tied, "") if isinstance(tied, str) else costing.sharding_mode(v, c) if dp > 1 else ""
    fsdp, reshard = bool(mode), mode != "zero2"  # ZeRO-2: gathered once, kept for the backward pass
    hsdp = 0  # HSDP's group: the owner's, for a tied weight
    if mode == "hsdp":
        u = next((u for u, o in enumerate(costing.graph.operators) if tied in _params(o)), v) if tied else v
        hsdp = costing.hybrid_group(u, assignment[u])
    forward: dict[str, int] = {}
    backward: dict[str, int] = {}
    if kind in ("rowwise", "vocab", "expert"):  # partial sums (an expert split: combine's), or scattered into a region
        forward["reduce_scatter" if kind == "rowwise" and split_out else "all_reduce"] = 1
    if kind == "rowwise" and split_out:  # and their gradient gathered
        backward["all_gather"] = 1
    reads_data = any(i.source is not None for i in op.inputs if not i.param)
    if kind == "expert" and reads_data:  # and the tokens' gradient, dispatch's
        backward["all_reduce"] = 1
    if kind == "expert-dp":  # the counts, the tokens sent and their results returned; their gradients
        forward["all_to_all"], backward["all_to_all"] = 3, 2
        fsdp, reshard = False, True  # its experts are on one data-parallel group each: nothing to shard or reduce
    if kind == "colwise" and not op.attrs.get("lookup") and reads_data:  # a split input: gathered,
        backward["reduce_scatter" if split_in else "all_reduce"] = 1  # its gradient reduce-scattered
    if kind == "rowwise" and not split_in and reads_data:  # a whole input split here: its gradient gathered back
        backward["all_gather"] = backward.get("all_gather", 0) + 1
    if kind == "colwise" and (split_in or not split_out):  # and ColwiseParallel gathers a whole output
        forward["all_gather"] = int(split_in) + int(not split_out)
    if fsdp and not tied:  # a tied weight's gathers and reduction are its owner's
        forward["all_gather"] = forward.get("all_gather", 0) + 1
        if reshard:
            backward["all_gather"] = backward.get("all_gather", 0) + 1
        backward["reduce_scatter"] = 1
        if hsdp:  # each shard of the gradient all-reduced across the nodes' groups
            backward["all_reduce"] = backward.get("all_reduce", 0) + 1
    elif dp > 1 and not op.attrs.get("tied") and kind != "expert-dp":
        backward["all_reduce"] = backward.get("all_reduce", 0) + 1
    return ModulePlacement(
        _module(op),
        op.name,
        kind,
        fsdp,
        "shard" if split_in else "replicate",
        "shard" if split_out else "replicate",
        tuple(op.attrs.get("params") or ()),
        {"forward": forward, "backward": backward},
        float(costing.held_weights(v, c)),
        reshard=reshard,
        hsdp=hsdp,
    )


def unpriced_gathers(costing: Any, assignment: tuple[int, ...], dp: int, tp: int) -> float:
    """Microseconds of the all-gathers PyTorch issues for ``assignment`` on a ``dp x tp`` mesh that the
    plan does not pay on any edge: a column-parallel module whose output is handed on whole though
    its readers keep the split (one of them also reads a whole tensor, and DTensor's operators
    without weights run on what the modules hand them) gathers it in the forward pass; a row-parallel
    module that splits a whole input gathers that input's gradient back in the backward pass (an
    edge prices that gather where the producer holds the input whole; not where operators without
    weights before it split the input alike, which PyTorch runs whole). Each: its tile from each of
    the ``tp`` devices, on the machine's links for a group of ``tp``."""
    placements = module_placements(costing, assignment, dp, tp)  # (a ModelError where there are none)
    links, element = getattr(costing.profile, "links", None), getattr(costing.profile, "dtype_bytes", None)
    if links is None or element is None or tp == 1:
        return 0.0
    ops = costing.graph.operators
    out_edges: dict[int, list[tuple[int, int]]] = {}
    in_edges: dict[int, list[tuple[int, int]]] = {}
    for e, (u, w, _) in enumerate(costing.edges):
        out_edges.setdefault(u, []).append((w, e))
        in_edges.setdefault(w, []).append((u, e))
    names = {op.name: v for v, op in enumerate(ops)}
    total = 0.0
    for p in placements:
        v = names.get(p.operator)
        if v is None:
            continue
        whole = 0.0  # bytes of the tensor gathered, as one device of the tp group holds it whole
        if p.tp == "colwise" and p.output == "replicate":
            if not _relaid(costing, assignment, v, out_edges, upstream=False):
                config = np.asarray(costing.configs[v][assignment[v]])[None, :]
                whole = float(output_bytes(ops[v], config, element)[0]) * tp
        elif (
            p.input == "sequence"
            and p.tp not in ("rowwise", *STREAM_NORMS)  # (a stream norm, a row-parallel reader: no gather)
            and not any(
                float(costing.problem.edge_cost(e)[assignment[u], assignment[v]]) for u, e in in_edges.get(v, [])
            )
        ):
            whole = sum(i.use.size for i in ops[v].inputs if not i.param and i.source is not None) * element / dp
        elif (
            p.tp == "rowwise"
            and p.input == "replicate"
            and not _relaid(costing, assignment, v, in_edges, upstream=True)
        ):
            data = [i for i in ops[v].inputs if not i.param and i.source is not None]
            whole = sum(i.use.size for i in data) * element / dp
        if whole:
            total += float(links.transfer(np.asarray(whole * (tp - 1) / tp), np.asarray(tp))) * 1e6
    return total


#: Which dimension of a module's weight as PyTorch stores it (an embedding's table ``[rows,
#: width]``, a linear layer's ``[out, in]``) a tensor-parallel style splits.
_TABLE_DIM = {("lookup", "vocab"): 0, ("lookup", "colwise"): 1, ("product", "colwise"): 0, ("product", "rowwise"): 1}


def untied(costing: Any, assignment: tuple[int, ...], dp: int, tp: int) -> list[int]:
    """The operators sharing a tied weight (the embedding's table and the output projection reading
    it) where ``assignment`` splits it over the tensor-parallel devices along different dimensions
    (or one splits it and the other not): one parameter has one placement, so PyTorch would run
    them untied. Those pairs are searched again with both whole over the devices."""
    if tp == 1:
        return []
    ops, batches = costing.graph.operators, batch_axes(costing.graph)

    def table_dim(v: int) -> int | None:
        op = ops[v]
        config = dict(zip(op.axes, (int(x) for x in costing.configs[v][assignment[v]]), strict=True))
        kind = style(op, config, batches[op.name], dp, tp)
        return _TABLE_DIM.get(("lookup" if op.attrs.get("lookup") else "product", str(kind)))

    owners = {str(p): v for v, op in enumerate(ops) if not op.attrs.get("tied") for p in op.attrs.get("params") or ()}
    out = []
    for v, op in enumerate(ops):
        owner = owners.get(str(op.attrs.get("tied")))
        if owner is not None and table_dim(v) != table_dim(owner):
            out += [owner, v]
    return out
