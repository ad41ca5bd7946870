"""Recomputation as PyTorch runs it: blocks checkpointed, whole or selectively.

The cost model offers recomputation per operator (:func:`stratopt.cost.build` with
``recompute=True``): a recomputing configuration keeps none of its outputs for the backward pass and
runs its forward again there. PyTorch recomputes at the granularity of a module: activation
checkpointing (``torch.distributed._composable.checkpoint``, ``checkpoint_wrapper``) keeps a module's
inputs and runs its whole forward again when the backward pass reaches it. The two meet on a
**block**: the outermost module of a repeated stack (``layers.3``, ``transformer.h.0``, a ResNet
stage), found in the operators' names (the eager tracer names each operator after the module that
runs it; torch.fx's operators carry it as ``attrs["scope"]``). Checkpointing block ``B`` frees every tensor made inside it that only ``B`` reads (its
**inner** operators recompute) and keeps what leaves it (the block's output, the next block's kept
input), so a strategy PyTorch runs recomputes exactly the inner operators of a set of blocks and no
other. The re-run stops once every tensor the block saved is rebuilt (PyTorch's early stopping):
the block's last product and what follows it (the residual add) are not run again, and their
recomputation is priced as free (:func:`tails`).

**Selective** checkpointing (``plan --recompute auto`` for a plan that runs) keeps some outputs of a
checkpointed block: PyTorch's selective activation checkpointing saves the outputs of the operations
a policy names and runs the rest of the block's forward again. Here the policy names the products of
the modules the plan keeps (a linear layer's matrix product: a :func:`savable` operator keeping its
outputs inside a checkpointed block) and the fused attention kernel (always kept: its scores are never
stored, and half a kernel cannot be recomputed); every other operator of the block recomputes. A kept
module's forward still runs again around its saved product, so its forward collectives are issued
again (as in a block recomputed whole): the search adds their time to the kept product
(:func:`reissue_costs`), and a plan's estimate adds it with the output re-layouts a checkpointed
module repeats (:func:`reissued`), which the per-operator prices leave out.

:func:`blocks` finds the blocks, :func:`allowed` is the per-operator restriction for a set of them
(whole or selective), :func:`checkpointed` reads the blocks a strategy checkpoints back (or why
PyTorch cannot run its recomputation) and :func:`kept` what selective checkpointing saves in them,
:func:`keeping` is a strategy with nothing recomputed, and :data:`MODES` are ``plan --recompute``'s
choices.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.graph.ir import Graph, Operator
from stratopt.problem import FORBIDDEN

__all__ = [
    "MODES",
    "Block",
    "allowed",
    "block_of",
    "blocks",
    "checkpointed",
    "confined",
    "keeping",
    "kept",
    "parted",
    "reissue_costs",
    "reissued",
    "savable",
    "tails",
]

#: ``auto``: the search decides (per operator for the plan on paper, per block for one that runs);
#: ``full``: every block recomputes (full activation checkpointing); ``none``: nothing does.
MODES = ("auto", "full", "none")


@dataclass(frozen=True)
class Block:
    """A module PyTorch may checkpoint: its qualified name, the operators it runs and its inner ones
    (those whose outputs only the block reads: freed and recomputed when it is checkpointed)."""

    module: str
    ops: tuple[int, ...]
    inner: tuple[int, ...]


def block_of(name: str) -> str | None:
    """The block an operator (or module) name lies in: its name up to the first numeric part
    (``layers.3.mlp.up_proj`` -> ``layers.3``), or None outside every repeated stack."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1] if len(parts) > 1 else []):
        if part.isdigit() and i > 0:
            return ".".join(parts[: i + 1])
    return None


def blocks(graph: Graph, *, owned: bool = True) -> list[Block]:
    """The graph's blocks in the order their first operator runs: those of which some operator holds
    weights of the block's own (the module exists in the model; ``owned=False``: named so is
    enough, as a decoder shape's layers are) and some operator is inner."""
    members: dict[str, list[int]] = {}
    for v, op in enumerate(graph.operators):
        scope = op.attrs.get("scope")  # the module that ran it, where the importer's names do not say
        name = block_of(f"{scope}.op" if scope else op.name)
        if name is not None:
            members.setdefault(name, []).append(v)
    readers: dict[int, set[int]] = {}
    for u, w, _ in graph.edges():
        readers.setdefault(u, set()).add(w)
    found = []
    for name, ops in members.items():
        own = not owned or any(
            str(p).startswith(name + ".") for v in ops for p in graph.operators[v].attrs.get("params") or ()
        )
        inside = set(ops)
        inner = tuple(v for v in ops if readers.get(v) and readers[v] <= inside)
        if own and inner:
            found.append(Block(name, tuple(ops), inner))
    return found


def savable(op: Operator) -> bool:
    """Whether selective checkpointing may keep ``op``'s outputs in a checkpointed block: a product
    of a module's weights (its matrix product saved) or part of the fused attention kernel."""
    if op.attrs.get("fused_attention"):
        return True
    return op.op in ("gemm", "conv") and not op.attrs.get("lookup") and any(i.param for i in op.inputs)


def allowed(
    costing: Any, on: Collection[str], found: list[Block] | None = None, *, selective: bool = False
) -> list[np.ndarray]:
    """Per operator, the configurations a strategy that checkpoints the blocks ``on`` (names) may
    take: an inner operator of those blocks only recomputing ones, every other operator only ones
    that keep their outputs (all of them where the costing offers no recomputation). ``selective``:
    inside those blocks a module's product may also keep its outputs, and the fused attention keeps
    them (see the module's docstring)."""
    found = blocks(costing.graph) if found is None else found
    inner = {v for b in found if b.module in on for v in b.inner}
    out = []
    for v, rows in enumerate(costing.configs):
        again = np.asarray(costing.recomputed[v], dtype=bool) if costing.recomputed else np.zeros(len(rows), dtype=bool)
        op = costing.graph.operators[v]
        if v not in inner or (selective and op.attrs.get("fused_attention")):  # the fused kernel keeps
            out.append(~again)
        elif selective and savable(op):
            out.append(np.ones(len(rows), dtype=bool))
        else:
            out.append(again)
    return out


def confined(costing: Any) -> Any:
    """``costing`` with recomputation confined to the inner operators of the graph's blocks (every
    other recomputing configuration forbidden), where the graph has blocks; as it is otherwise.

    A recomputed operator's forward runs once more in the backward pass, from inputs that must be at
    hand then: kept, or recomputed from kept ones. Recomputing a block's inner operators re-runs part
    of one block from its kept input, one block at a time, as checkpointing does. An operator whose
    outputs leave its block (the residual stream between blocks) recomputed too would chain the
    recomputation back through every block before it: rebuilt in one pass, all of the chain is held
    at once in the backward pass (the memory its recomputation claims to save), or it is rebuilt
    once per block (quadratic time); the per-operator prices count neither. So a plan keeps what
    leaves a block, on paper as PyTorch does; a graph without blocks (named ``layers.N`` and the like:
    a decoder shape's layers count) keeps the per-operator choice."""
    found = blocks(costing.graph, owned=False)
    if not found or not costing.recomputed:
        return costing
    inner, tail = {v for b in found for v in b.inner}, tails(costing.graph, found)
    nodes, vertex_costs = [], list(costing.vertex_costs)
    for v, node in enumerate(costing.node_costs()):
        again = np.asarray(costing.recomputed[v], dtype=bool)
        if v in tail:  # never run again: recomputing it costs what keeping it does, and holds nothing
            half = len(again) // 2  # the recomputing configurations are the second half (keeping)
            node = np.concatenate([node[:half], node[:half]])
            vertex_costs[v] = _as_kept(vertex_costs[v], half)
        nodes.append(node if v in inner else np.where(again, float(FORBIDDEN), node))
    problem = costing.problem.replace(node_costs=nodes)
    return dataclasses.replace(costing, problem=problem, vertex_costs=tuple(vertex_costs))


def _as_kept(costs: Any, half: int) -> Any:
    """An operator's costs with each recomputing configuration (the second ``half``) timed as its
    keeping twin: every time but the memory copied over."""
    timed = {}
    for f in dataclasses.fields(costs):
        value = getattr(costs, f.name)
        if f.name != "memory" and value is not None:
            value = np.asarray(value)
            timed[f.name] = np.concatenate([value[:half], value[:half]])
    return dataclasses.replace(costs, **timed)


def tails(graph: Graph, found: list[Block]) -> set[int]:
    """The operators of the blocks ``found`` that a checkpointed block's re-run never reaches.

    PyTorch's non-reentrant checkpointing ends a block's re-run once every tensor the block saved
    for the backward pass is rebuilt (``early_stop``, its default), and a matrix product saves its
    inputs before it computes. So a block's last product, where only reshapes and additions (which
    save nothing) follow it inside the block, is not run again, and neither are they: Llama's
    ``down_proj`` and its output's all-reduce, GPT-2's ``c_proj``; none in a block that ends in a
    norm (BERT) or in a combination that saves its inputs (a mixture of experts). Recomputing
    such an operator costs nothing and frees its outputs. (Dropout the importers read as a view: a
    model trained with dropout after its last product re-runs that product.)"""
    ops = graph.operators
    out: set[int] = set()
    for b in found:
        inner, after = set(b.inner), list[int]()
        for v in sorted(b.ops, reverse=True):
            op = ops[v]
            if savable(op) and not op.attrs.get("fused_attention"):
                if v in inner:
                    out.update([v, *(w for w in after if w in inner)])
                break
            if not _saves_nothing(op):
                break
            after.append(v)
    return out


def _saves_nothing(op: Operator) -> bool:
    """Whether ``op``'s backward pass reads none of its tensors: a reshape, or an addition."""
    if op.op == "reshape":
        return True
    return op.op == "elementwise" and re.fullmatch(r"(add|sub)(_\d+)?", op.name.rsplit(".", 1)[-1]) is not None


def reissue_costs(costing: Any, on: Collection[str], found: list[Block] | None = None) -> list[np.ndarray]:
    """Per operator and configuration, the time selective checkpointing of the blocks ``on`` adds
    that the per-operator prices leave out: a module's product kept inside one of them runs its
    forward again around the saved product, its forward-path communication with it (see
    :func:`reissued`); zero elsewhere. The search adds it to the node costs."""
    found = blocks(costing.graph) if found is None else found
    inner = {v for b in found if b.module in on for v in b.inner} - tails(costing.graph, found)
    out = []
    for v, rows in enumerate(costing.configs):
        vc, op = costing.vertex_costs[v], costing.graph.operators[v]
        extra = np.zeros(len(rows))
        if v in inner and vc.forward_comm is not None and any(i.param for i in op.inputs):
            again = np.asarray(costing.recomputed[v], dtype=bool) if costing.recomputed else np.zeros(len(rows), bool)
            extra = np.where(again, 0.0, np.asarray(vc.forward_comm, dtype=np.float64))
        out.append(extra)
    return out


def checkpointed(costing: Any, assignment: tuple[int, ...]) -> list[str] | str:
    """The blocks whose checkpointing runs ``assignment``'s recomputation, or why none does (the first
    operator that recomputes outside them, that keeps its outputs inside one that recomputes and is
    not :func:`savable`, or whose kept outputs its module or attention kernel does not keep whole)."""
    found = blocks(costing.graph)
    again = {v for v, c in enumerate(assignment) if costing.is_recomputed(v, c)}
    if not again:
        return []
    names = [b.module for b in found if again & set(b.inner)]
    ops = costing.graph.operators
    for b in found:
        if b.module not in names:
            continue
        kept = [v for v in b.inner if v not in again]
        for v in kept:
            if not savable(ops[v]):
                return f"operator {ops[v].name} keeps its outputs in block {b.module}, which recomputes"
        units: dict[str, set[bool]] = {}  # a module's products, the attention kernel: kept whole or not at all
        for v in b.inner:
            if savable(ops[v]):
                units.setdefault(_unit(ops[v], b.module), set()).add(v in again)
        mixed = [u for u, states in units.items() if len(states) > 1]
        if mixed:
            return f"{mixed[0]} in block {b.module} keeps part of its outputs; PyTorch saves it whole or not at all"
    covered = {v for b in found if b.module in names for v in b.inner}
    stray = sorted(again - covered)
    if stray:
        return f"operator {ops[stray[0]].name} recomputes its outputs outside every block PyTorch checkpoints"
    return names


def parted(costing: Any, assignment: tuple[int, ...]) -> list[int]:
    """The products of the modules that ``assignment`` recomputes in part (a mixture of experts'
    up product kept and its down product recomputed), which no checkpointing runs: selective
    checkpointing saves a module's products whole or not at all."""
    again = {v for v, c in enumerate(assignment) if costing.is_recomputed(v, c)}
    if not again:
        return []
    out = []
    ops = costing.graph.operators
    for b in blocks(costing.graph):
        units: dict[str, list[int]] = {}
        for v in b.inner:
            if savable(ops[v]):
                units.setdefault(_unit(ops[v], b.module), []).append(v)
        out += [v for members in units.values() if 0 < len(again.intersection(members)) < len(members) for v in members]
    return out


def _unit(op: Operator, block: str) -> str:
    """What selective checkpointing saves ``op`` with: its module (named by its first parameter) or,
    for the fused attention, the attention kernel of its ``block``."""
    if op.attrs.get("fused_attention"):
        return f"the attention of {block}"
    params = op.attrs.get("params") or []
    return f"module {str(params[0]).rpartition('.')[0]}" if params else f"operator {op.name}"


def kept(costing: Any, assignment: tuple[int, ...]) -> tuple[list[str], list[str]]:
    """What selective checkpointing saves in ``assignment``'s checkpointed blocks: the modules whose
    products keep their outputs (named by their parameters) and the blocks whose attention kernel
    does (empty where every checkpointed block recomputes whole)."""
    names = checkpointed(costing, assignment)
    if isinstance(names, str) or not names:
        return [], []
    on = set(names)
    modules: dict[str, None] = {}
    attention: dict[str, None] = {}
    for b in blocks(costing.graph):
        if b.module not in on:
            continue
        for v in b.inner:
            op = costing.graph.operators[v]
            if costing.is_recomputed(v, assignment[v]) or not savable(op):
                continue
            if op.attrs.get("fused_attention"):
                attention[b.module] = None
            elif op.attrs.get("params"):
                modules[str(op.attrs["params"][0]).rpartition(".")[0]] = None
    return list(modules), list(attention)


def keeping(costing: Any, assignment: tuple[int, ...]) -> tuple[int, ...]:
    """``assignment`` with every recomputing configuration replaced by its twin that keeps its
    outputs (the same split: :func:`stratopt.cost.build` with ``recompute=True`` lists the
    configurations twice, the second half recomputing)."""
    out = []
    for v, c in enumerate(assignment):
        out.append(c - len(costing.configs[v]) // 2 if costing.is_recomputed(v, c) else c)
    return tuple(out)


def reissued(costing: Any, assignment: tuple[int, ...]) -> float:
    """Microseconds of forward-path communication that checkpointing issues again in the backward
    pass and the per-operator prices leave out, for ``assignment``'s checkpointed blocks: a module
    kept by selective checkpointing runs its forward again around its saved product (its output's
    all-reduce with it, not its sharded weights' gather), and every module of a checkpointed block
    re-lays its output out again where the plan pays for that on an edge (the forward part of its
    costliest outgoing re-layout, :meth:`~stratopt.cost.Costing.forward_relayout`)."""
    names = checkpointed(costing, assignment)
    if isinstance(names, str) or not names:
        return 0.0
    on = set(names)
    ops = costing.graph.operators
    out: dict[int, list[int]] = {}
    for e, (u, _, _) in enumerate(costing.edges):
        out.setdefault(u, []).append(e)
    total, found = 0.0, blocks(costing.graph)
    tail = tails(costing.graph, found)
    for b in found:
        if b.module not in on:
            continue
        for v in b.inner:
            c, vc = assignment[v], costing.vertex_costs[v]
            if v in tail or not (any(i.param for i in ops[v].inputs) or ops[v].attrs.get("moe") == "dispatch"):
                continue  # the re-run stops before the tail; a dispatch's all-to-all is a module's too
            if not costing.is_recomputed(v, c) and vc.forward_comm is not None:
                # but for a sharded weight's gather: FSDP keeps what it gathered for the re-run
                gather = 0.0 if vc.weight_gather is None else float(vc.weight_gather[c])
                total += float(vc.forward_comm[c]) - gather / (1.0 if costing.is_zero2(v, c) else 2.0)
            relaid = [costing.forward_relayout(e, c, assignment[costing.edges[e][1]]) for e in out.get(v, [])]
            total += max(relaid, default=0.0)  # (negative: a reduce-scatter where an all-reduce is priced)
    return total
