"""What a search for a plan that runs forbids before it searches again: the splits PyTorch would not
keep (an operator no module hands a shard runs whole: :func:`~stratopt.planning.torchplan.as_run`),
and the modules an answer lays out in part (``fully_shard`` shards a module whole, selective
checkpointing saves a module's products whole): :func:`unsplit`."""

from __future__ import annotations

from typing import Any

import numpy as np

from stratopt.planning.batch import batch_axes
from stratopt.planning.recompute import parted
from stratopt.planning.torchplan import _holds, _module, as_run, untied
from stratopt.problem import FORBIDDEN

__all__ = ["unsplit"]


def unsplit(
    costing: Any, tables: list[list[np.ndarray]], assignment: tuple[int, ...], dp: int, tp: int
) -> list[list[np.ndarray]] | None:
    """Each of ``tables`` (per operator, its configurations' costs) with every configuration that
    splits more than the batch forbidden for the operators :func:`as_run` runs whole in
    ``assignment``, every unsharded one for the operators of a module whose weights it shards in
    part (a mixture of experts' two products: ``fully_shard`` shards a module whole) and every
    keeping one for the products of a module it recomputes in part (selective checkpointing saves a
    module whole: :func:`~stratopt.planning.recompute.parted`), for a search again; None where
    ``assignment`` runs as it is split, sharded and recomputed. A tied weight's two operators (an
    output projection reading the embedding's table) that split it differently over the
    tensor-parallel devices are searched again with both whole over them
    (:func:`~stratopt.planning.torchplan.untied`)."""
    ran = as_run(costing, assignment, dp, tp)
    moved = [v for v, (c, r) in enumerate(zip(assignment, ran, strict=True)) if c != r]
    halves, parts = _half_sharded(costing, assignment, dp), parted(costing, assignment)
    moved += [v for v in untied(costing, assignment, dp, tp) if v not in moved]
    if not moved and not halves and not parts:
        return None
    batches, out = batch_axes(costing.graph), [list(t) for t in tables]
    for v, mode in halves.items():  # FSDP shards a module whole, one way: all of its operators' weights, then
        whole = np.array([costing.sharding_mode(v, c) != mode for c in range(len(costing.configs[v]))])
        for t in out:
            t[v] = np.where(whole, float(FORBIDDEN), t[v])
    for v in parts:  # and checkpointing saves a module's products whole: all of them recomputed, then
        kept = ~np.asarray(costing.recomputed[v], dtype=bool)
        for t in out:
            t[v] = np.where(kept, float(FORBIDDEN), t[v])
    for v in moved:
        op = costing.graph.operators[v]
        rows = np.asarray(costing.configs[v])
        split = (rows[:, [i for i, a in enumerate(op.axes) if a not in batches[op.name]]] > 1).any(axis=1)
        for t in out:
            t[v] = np.where(split, float(FORBIDDEN), t[v])
    return out


def _half_sharded(costing: Any, assignment: tuple[int, ...], dp: int) -> dict[int, str]:
    """The operators of the modules whose weights ``assignment`` shards over the ``dp`` replicas for
    some of their operators and not for others, or one way for some and another for others (none
    where ``dp`` is 1: nothing is sharded), each with the way its module is to be sharded: ZeRO-3
    where one of them is, else ZeRO-2 where one is, else HSDP."""
    if dp == 1 or not costing.sharded:
        return {}
    modules: dict[str, list[int]] = {}
    for v, op in enumerate(costing.graph.operators):
        if _holds(op) and op.attrs.get("params") and not op.attrs.get("tied"):
            modules.setdefault(_module(op), []).append(v)
    out: dict[int, str] = {}
    for members in modules.values():
        modes = {costing.sharding_mode(v, assignment[v]) for v in members}
        if len(modes) > 1:
            out.update(dict.fromkeys(members, next(m for m in ("fsdp", "zero2", "hsdp") if m in modes)))
    return out
