"""Recomputation as PyTorch runs it: whole blocks checkpointed.

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
other. The forward of the operators whose outputs leave the block (one residual add) also runs
again in PyTorch and is not priced: one elementwise pass per block.

:func:`blocks` finds the blocks, :func:`allowed` is the per-operator restriction for a set of them,
:func:`checkpointed` reads the blocks a strategy checkpoints back (or why PyTorch cannot run its
recomputation), :func:`keeping` is a strategy with nothing recomputed, and :data:`MODES` are ``plan
--recompute``'s choices.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.graph.ir import Graph

__all__ = ["MODES", "Block", "allowed", "block_of", "blocks", "checkpointed", "keeping"]

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


def blocks(graph: Graph) -> list[Block]:
    """The graph's blocks in the order their first operator runs: those of which some operator holds
    weights of the block's own (the module exists in the model) and some operator is inner."""
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
        own = any(str(p).startswith(name + ".") for v in ops for p in graph.operators[v].attrs.get("params") or ())
        inside = set(ops)
        inner = tuple(v for v in ops if readers.get(v) and readers[v] <= inside)
        if own and inner:
            found.append(Block(name, tuple(ops), inner))
    return found


def allowed(costing: Any, on: Collection[str], found: list[Block] | None = None) -> list[np.ndarray]:
    """Per operator, the configurations a strategy that checkpoints the blocks ``on`` (names) may
    take: an inner operator of those blocks only recomputing ones, every other operator only ones
    that keep their outputs (all of them where the costing offers no recomputation)."""
    found = blocks(costing.graph) if found is None else found
    inner = {v for b in found if b.module in on for v in b.inner}
    out = []
    for v, rows in enumerate(costing.configs):
        again = np.asarray(costing.recomputed[v], dtype=bool) if costing.recomputed else np.zeros(len(rows), dtype=bool)
        out.append(again if v in inner else ~again)
    return out


def checkpointed(costing: Any, assignment: tuple[int, ...]) -> list[str] | str:
    """The blocks whose checkpointing runs ``assignment``'s recomputation, or why none does (the first
    operator that recomputes outside them, or that keeps its outputs inside one that recomputes)."""
    found = blocks(costing.graph)
    again = {v for v, c in enumerate(assignment) if costing.is_recomputed(v, c)}
    if not again:
        return []
    names = [b.module for b in found if again & set(b.inner)]
    ops = costing.graph.operators
    for b in found:
        if b.module in names:
            kept = [v for v in b.inner if v not in again]
            if kept:
                return f"operator {ops[kept[0]].name} keeps its outputs in block {b.module}, which recomputes"
    covered = {v for b in found if b.module in names for v in b.inner}
    stray = sorted(again - covered)
    if stray:
        return f"operator {ops[stray[0]].name} recomputes its outputs outside every block PyTorch checkpoints"
    return names


def keeping(costing: Any, assignment: tuple[int, ...]) -> tuple[int, ...]:
    """``assignment`` with every recomputing configuration replaced by its twin that keeps its
    outputs (the same split: :func:`stratopt.cost.build` with ``recompute=True`` lists the
    configurations twice, the second half recomputing)."""
    out = []
    for v, c in enumerate(assignment):
        out.append(c - len(costing.configs[v]) // 2 if costing.is_recomputed(v, c) else c)
    return tuple(out)
