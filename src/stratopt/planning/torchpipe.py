"""Pipelines PyTorch runs: stages cut between blocks, one ``dp x tp`` mesh per stage, every stage's
strategy among those DTensor runs (``plan --stages N --expressible torch``).

``torch.distributed.pipelining`` runs a stage as a module of its own on a group of devices, and
``stratopt.torch`` builds that module from the user's model by cutting its repeated stack of blocks
(``layers.3``, ``h.7``; :func:`~stratopt.planning.recompute.blocks`). So the pipelines that run are
a subset of those :mod:`~stratopt.planning.pipeline` searches:

- a stage boundary lies where a block begins, and one tensor (the residual stream) crosses it;
- every stage has ``devices / stages`` devices laid out as the same ``dp x tp`` mesh (a
  ``pp x dp x tp`` device mesh), and its operators take only configurations DTensor runs there
  (:func:`~stratopt.planning.torchplan.restricted_costs`; on each edge, only pairs that run as
  priced when a stage is fitted: :func:`~stratopt.planning.pairs.handed_on`), recomputation
  only as whole blocks checkpointed (:func:`~stratopt.planning.recompute.allowed`).

For every mesh, and with and without every block checkpointed (``recompute``: ``auto`` tries both,
``full`` and ``none`` one each), the stage times of every run of blocks come from the unit tables
of :class:`~stratopt.planning.units.StageCosts` with the forbidden configurations priced out; the
boundaries are then chosen exactly for 1F1B's objective ``sum + (M - 1) * max`` over the stages
and transfers (a DP per candidate bottleneck, :func:`best_layout`). Memory is fitted afterwards,
stage by stage, with that stage's micro-batches in flight (1F1B: ``min(S - k, M)``; GPipe: ``M``):
its fastest strategy, else with its blocks checkpointed, else the Lagrangian memory search's
(:func:`~stratopt.planning.memory.under_memory`); a layout a stage of which fits none of them is
dropped. Exact for the time where memory does not bind; a heuristic where it does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.cost.common import layout
from stratopt.cost.default import DefaultProfile
from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.planning.again import unsplit
from stratopt.planning.batch import batch_size
from stratopt.planning.cluster import Cluster, cluster, price
from stratopt.planning.export import operator_splits
from stratopt.planning.memory import exact_dp, under_memory
from stratopt.planning.microbatch import microbatch
from stratopt.planning.pairs import handed_on
from stratopt.planning.recompute import allowed, blocks, checkpointed, kept
from stratopt.planning.simulation import _stage_memory, describe, flight, simulate
from stratopt.planning.stages import (
    PipelinePlan,
    Stage,
    crossing_bytes,
    cut_points,
    group_sizes,
    stage_costing,
    transfer_time,
)
from stratopt.planning.torchplan import (
    AS_RUN_ROUNDS,
    mesh_shapes,
    module_placements,
    restricted_costs,
)
from stratopt.planning.units import StageCosts
from stratopt.problem import FORBIDDEN

__all__ = ["SCHEDULES", "RunnablePipeline", "best_layout", "runnable_pipeline"]

SCHEDULES = ("1f1b", "gpipe", "interleaved", "auto")
MAX_CHUNKS = 8  # the most stages per device group the interleaved search tries


@dataclass(frozen=True)
class RunnablePipeline:
    """A pipeline PyTorch runs: ``plan``'s stages (each a :class:`~stratopt.planning.stages.Stage` of
    ``graph``, one micro-batch, its assignment indexing the stage's own costing), all on a
    ``mesh = (dp, tp)``; ``blocks``: each stage's blocks; ``cut``: the model's batch is cut into the
    micro-batches (else each micro-batch is the model's batch); ``tried``: (micro-batches, estimate
    or inf) when the count was searched."""

    graph: Graph
    plan: PipelinePlan
    mesh: tuple[int, int]
    schedule: str
    blocks: tuple[tuple[str, ...], ...]
    where: Cluster
    cut: bool = False
    tried: tuple[tuple[int, float], ...] = ()

    @property
    def step_overhead(self) -> float:
        return float(DefaultProfile(self.where.machine).step_overhead)

    @property
    def estimate(self) -> float:
        """1F1B's iteration over the stages' step-model times, plus the step's constant (us)."""
        return self.plan.estimate + self.step_overhead

    def in_flight(self, k: int) -> int:
        return flight(self.schedule, k, len(self.plan.stages), self.plan.microbatches, self.plan.chunks)

    def costings(self) -> list[Any]:
        return [stage_costing(self.graph, s, self.where.machine) for s in self.plan.stages]

    def memory(self) -> list[float]:
        """Bytes per device of each stage, its micro-batches in flight counted (interleaved: a device
        group holds the sum of its stages')."""
        out = []
        for k, (s, costing) in enumerate(zip(self.plan.stages, self.costings(), strict=True)):
            total, acts = _stage_memory(costing, s.assignment)
            out.append(total + (self.in_flight(k) - 1) * acts)
        return out

    def group_memory(self) -> list[float]:
        """Bytes per device of each device group: its stages' together."""
        per, groups = self.memory(), self.plan.groups
        return [sum(per[g::groups]) for g in range(groups)]

    def summary(self) -> dict[str, Any]:
        """What ``plan --json`` prints under ``"pipeline"`` (the shape :func:`plan_pipeline` gives)."""
        _, info = simulate(self.graph, self.plan, self.where.machine, self.schedule)
        stages = describe(self.graph, self.plan, self.where.machine)
        for k, (row, memory) in enumerate(zip(stages, self.memory(), strict=True)):
            row.update(in_flight=self.in_flight(k), memory=memory, blocks=list(self.blocks[k]))
            if self.plan.chunks > 1:
                row["group"] = k % self.plan.groups
        out: dict[str, Any] = {
            "runs": "torch",
            "mesh": list(self.mesh),
            "microbatches": self.plan.microbatches,
            "schedule": self.schedule,
            **({"chunks": self.plan.chunks} if self.plan.chunks > 1 else {}),
            "estimate": self.estimate,
            "simulated": info["iteration_time"] + self.step_overhead,
            "bubble": info["bubble"],
            "transfers": list(self.plan.transfers),
            "stages": stages,
        }
        if self.tried:
            out["tried"] = [{"microbatches": m, "estimate": None if e == math.inf else e} for m, e in self.tried]
        return out

    def export(self) -> dict[str, Any]:
        """The operators, modules, checkpointed blocks and ``pipeline`` section of the plan's export."""
        graph, (dp, tp) = self.graph, self.mesh
        m = self.plan.microbatches
        operators: dict[str, Any] = {}
        modules: dict[str, Any] = {}
        recompute: list[str] = []
        stages = []
        for k, (s, costing) in enumerate(zip(self.plan.stages, self.costings(), strict=True)):
            operators.update(operator_splits(costing, s.assignment))
            again = checkpointed(costing, s.assignment)
            if isinstance(again, str):
                raise ModelError(f"stage {k}: {again}")
            if any(kept(costing, s.assignment)):
                raise ModelError(f"stage {k}: a pipeline stage checkpoints its blocks whole")
            recompute += again
            names = []
            for p in module_placements(costing, s.assignment, dp, tp, microbatches=m):
                if p.module in modules:
                    raise ModelError(f"module {p.module} runs in two stages; PyTorch places a module once")
                modules[p.module] = p.to_dict()
                names.append(p.module)
            stages.append({"blocks": list(self.blocks[k]), "modules": names, "recompute": again, "time_us": s.time})
        boundaries = [
            {"before": self.blocks[k + 1][0], "elements": int(crossing_bytes(graph, s.end) // 2)}
            for k, s in enumerate(self.plan.stages[:-1])
        ]
        for k, row in enumerate(boundaries):
            row["transfer_us"] = self.plan.transfers[k]
        section: dict[str, Any] = {
            "microbatches": m,
            "schedule": self.schedule,
            "batch": "cut" if self.cut else "whole",
        }
        if self.plan.chunks > 1:
            section["chunks"] = self.plan.chunks
        section.update(stages=stages, boundaries=boundaries)
        return {"operators": operators, "modules": modules, "recompute": recompute, "pipeline": section}


def best_layout(
    times: np.ndarray, moves: Callable[[int, int], float], stages: int, microbatches: int
) -> tuple[float, list[int]] | None:
    """The cuts ``0 = c_0 < c_1 < ... < c_S = U`` minimising ``sum + (M - 1) * max`` over the stages'
    ``times[c_k, c_k+1]`` (+inf: not allowed) and the transfers ``moves(c_k, k)`` at each inner cut
    (the transfer before stage ``k``): the least sum with every term at most T, for every
    candidate T in increasing order (stopping once ``(M - 1) * T`` alone is no better). Returns
    (value, cuts) or None when no layout is allowed.

    >>> t = np.full((4, 4), np.inf); t[0, 1], t[1, 3], t[0, 2], t[2, 3] = 1.0, 5.0, 3.0, 3.0
    >>> best_layout(t, lambda i, k: 0.0, 2, 4)
    (15.0, [0, 2, 3])
    """
    units = times.shape[0] - 1
    if stages > units:
        return None
    move = np.full((stages, units + 1), np.inf)
    for k in range(1, stages):
        for i in range(1, units):
            move[k, i] = moves(i, k)
    finite = times[np.isfinite(times)]
    if microbatches == 1:
        candidates = [math.inf]
    else:
        candidates = sorted(set(finite.tolist()) | set(move[np.isfinite(move)].tolist()))
    best: tuple[float, list[int]] | None = None
    for bound in candidates:
        if best is not None and (microbatches - 1) * bound >= best[0]:
            break
        allowed_t = np.where(times <= bound, times, np.inf)
        allowed_m = np.where(move <= bound, move, np.inf)
        f = allowed_t[0].copy()  # f[j]: least sum with units [0, j) in k + 1 stages
        back = []
        for k in range(1, stages):
            total = (f + allowed_m[k])[:, None] + allowed_t
            arg = np.argmin(total, axis=0)
            f = total[arg, np.arange(units + 1)]
            back.append(arg)
        if not np.isfinite(f[units]):
            continue
        value = float(f[units]) + ((microbatches - 1) * bound if microbatches > 1 else 0.0)
        if best is None or value < best[0] - 1e-9:
            cuts = [units]
            for arg in reversed(back):
                cuts.append(int(arg[cuts[-1]]))
            best = (value, [0, *reversed(cuts)])
    return best


class _Restricted(StageCosts):
    """:class:`StageCosts` on one group size with every configuration a stage on a ``dp x tp`` mesh
    cannot run (and, with ``checkpoint``, every recomputation outside whole blocks) priced out."""

    def __init__(self, graph: Graph, cuts: list[int], where: Cluster, m: int, limit: Any, mesh: Any, again: bool):
        super().__init__(graph, cuts, where.machine, m, limit)
        self.mesh, self.again = mesh, again
        self.found = blocks(graph)
        self.mask: dict[int, list[np.ndarray] | None] = {}

    def costing(self, g: int) -> Any:
        found = self._costings.get(g)
        if found is None:
            found = self._costings[g] = price(self.graph, g, self.machine, recompute=self.again)
        return found

    def allowed(self, g: int) -> list[np.ndarray] | None:
        if g not in self.mask:
            costing = self.costing(g)
            runs = restricted_costs(costing, *self.mesh)
            if runs is None:
                self.mask[g] = None
            else:
                on = [b.module for b in self.found] if self.again else []
                ok = [(r < FORBIDDEN) & a for r, a in zip(runs, allowed(costing, on, self.found), strict=True)]
                self.mask[g] = None if any(not x.any() for x in ok) else ok
                if self.mask[g] is not None:  # alike units share tables only where their masks agree too
                    self.keys = [hash((k, x.tobytes())) for k, x in zip(self.keys, ok, strict=True)]
        return self.mask[g]

    def prices(self, g: int) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
        found = self._prices.get(g)
        if found is None:
            nodes, edges, acts = super().prices(g)
            mask = self.allowed(g)
            assert mask is not None
            nodes = [np.where(m, n, float(FORBIDDEN)) for n, m in zip(nodes, mask, strict=True)]
            found = self._prices[g] = (nodes, edges, acts)
        return found


def runnable_pipeline(
    graph: Graph,
    nodes: int,
    gpus_per_node: int,
    machine: Any = "h100",
    *,
    stages: int | None = None,
    microbatches: int | str = 1,
    schedule: str = "1f1b",
    memory_gb: float | None = None,
    recompute: str = "auto",
    mesh: tuple[int, int] | None = None,
    time_limit: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> RunnablePipeline:
    """The fastest pipeline PyTorch runs for ``graph`` on ``nodes`` x ``gpus_per_node`` devices (see
    the module's docstring): ``stages`` stages (None: every count of at least two the devices and
    blocks allow; 1: gradient accumulation over the micro-batches), the model's batch cut into ``microbatches`` micro-batches (``auto``: the best of
    the powers of two that divide it; a step is the model's batch either way), under
    ``memory_gb`` per device (default: the machine's), each stage on ``mesh`` (``(dp, tp)``; default:
    the best). A one-line :class:`ModelError` when no pipeline runs or fits.

    >>> p = runnable_pipeline(__import__("stratopt").load_instance("stratopt.torch.models:mlp"), 1, 2, stages=2, microbatches=2)
    >>> [len(b) for b in p.blocks], p.mesh
    ([1, 1], (1, 1))
    """
    if schedule not in SCHEDULES:
        raise ModelError(f"unknown pipeline schedule {schedule!r}; use {' or '.join(SCHEDULES)}")
    say = progress or (lambda _msg: None)
    where = cluster(nodes, gpus_per_node, machine)
    limit = (where.machine.memory_gb if memory_gb is None else float(memory_gb)) * 1e9
    options: dict[str, Any] = {
        "stages": stages, "schedule": schedule, "limit": limit, "recompute": recompute, "mesh": mesh,
    }  # fmt: skip
    batch = batch_size(graph) or 1
    if microbatches != "auto":
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise ModelError(f"micro-batches must be a positive integer or 'auto', got {microbatches!r}")
        if stages is not None and stages > microbatches:
            raise ModelError(
                f"{stages} stages need at least {stages} micro-batches (PyTorch's schedules run one per stage)"
            )
        found = _search(microbatch(graph, microbatches), where, microbatches, time_limit, say, **options)
        if found is None:
            raise ModelError(f"{graph.name}: no pipeline PyTorch runs fits {limit / 1e9:g} GB per device")
        return dataclasses.replace(found, cut=True)
    best: RunnablePipeline | None = None
    tried = []
    for m in (x for x in (1, 2, 4, 8, 16, 32, 64) if batch % x == 0):
        found = _search(microbatch(graph, m), where, m, time_limit, say, **options)
        tried.append((m, math.inf if found is None else found.estimate))
        say(f"{graph.name}: {m} micro-batches: " + ("nothing runs" if found is None else f"{found.estimate:,.1f} us"))
        if found is not None and (best is None or found.estimate < best.estimate):
            best = found
    if best is None:
        raise ModelError(f"{graph.name}: no pipeline PyTorch runs fits {limit / 1e9:g} GB per device")
    return dataclasses.replace(best, cut=True, tried=tuple(tried))


def _search(
    graph: Graph,
    where: Cluster,
    m: int,
    time_limit: float | None,
    say: Callable[[str], None],
    *,
    stages: int | None,
    schedule: str,
    limit: float,
    recompute: str,
    mesh: tuple[int, int] | None,
) -> RunnablePipeline | None:
    """The fastest runnable pipeline of ``m`` micro-batches (``graph`` is one), or None."""
    chain = blocks(graph)
    if len(chain) < 2:
        raise ModelError(
            f"{graph.name}: no repeated blocks to cut into stages (PyTorch pipelines cut between blocks such as layers.0)"
        )
    points = set(cut_points(graph))
    starts = [min(b.ops) for b in chain[1:]]
    cuts = [0, *(s for s in starts if s in points), len(graph)]
    units = len(cuts) - 1
    p = where.devices
    sizes = set(group_sizes(where.nodes, where.gpus_per_node))
    counts = [stages] if stages is not None else [s for s in range(2, units + 1) if p % s == 0 and p // s in sizes]
    if stages is not None and (p % stages or p // stages not in sizes):
        raise ModelError(f"{stages} stages do not split {p} devices into whole groups of a node or of nodes")
    if stages is not None and stages > units:
        raise ModelError(f"{graph.name}: {stages} stages asked, but only {units} runs of blocks can be cut")
    if schedule == "interleaved" and stages is not None and 2 * stages > units:  # auto: 1F1B is left
        raise ModelError(
            f"{graph.name}: the interleaved schedule runs two stages or more per device group; "
            f"{2 * stages} stages asked, but only {units} runs of blocks can be cut"
        )
    counts = [c for c in counts if c <= m]  # PyTorch's schedules run at least a micro-batch per stage
    modes = {"auto": (False, True), "none": (False,), "full": (True,)}[recompute]
    best: RunnablePipeline | None = None
    for count, chunks, kind in _shapes(counts, units, m, schedule):
        d = p // count
        for shape in mesh_shapes(d, min(d, where.gpus_per_node)):
            if mesh is not None and tuple(mesh) != shape:
                continue
            for again in modes:
                costs = _Restricted(graph, cuts, where, m, time_limit, shape, again)
                if costs.allowed(d) is None:
                    continue
                table = costs.times(units, [d], lambda _m: None)
                times = np.full((units + 1, units + 1), np.inf)
                for (i, j, _), t in table.items():
                    times[i, j] = t if t < FORBIDDEN / 2 else np.inf

                def moves(i: int, k: int, d: int = d, dp: int = shape[0], count: int = count) -> float:
                    return _transfer(crossing_bytes(graph, cuts[i]) / dp, k, count, d, where)

                # interleaved: the cuts balance the count x chunks stages (the bottleneck taken once
                # per micro-batch and chunk); the estimate is the interleaved schedule's
                layout = best_layout(times, moves, count * chunks, m * chunks)
                if layout is None:
                    continue
                found = _fitted(
                    graph, costs, cuts, layout[1], d, shape, again, recompute, m, kind, limit, where, say, chunks
                )
                what = f"{count} stages{f' of {chunks} chunks' if chunks > 1 else ''} on {shape[0]} x {shape[1]}"
                what += " (checkpointed)" if again else ""
                if found is None:
                    say(f"{what}: nothing fits")
                    continue
                stage_list, transfers = found
                names = tuple(tuple(b.module for b in chain if s.start <= min(b.ops) < s.end) for s in stage_list)
                plan = PipelinePlan(tuple(stage_list), tuple(transfers), m, p, layout[0], chunks)
                run = RunnablePipeline(graph, plan, shape, kind, names, where)
                say(f"{what}: {run.estimate:,.1f} us")
                if best is None or run.estimate < best.estimate:
                    best = run
    return best


def _fitted(
    graph: Graph,
    costs: _Restricted,
    cuts: list[int],
    layout: list[int],
    d: int,
    mesh: tuple[int, int],
    again: bool,
    recompute: str,
    m: int,
    schedule: str,
    limit: float,
    where: Cluster,
    say: Callable[[str], None],
    chunks: int = 1,
) -> tuple[list[Stage], list[float]] | None:
    """The layout's stages, each with the fastest strategy that fits with its micro-batches in flight
    (checkpointing its blocks where that does not fit and ``recompute`` allows), and the transfers.
    With ``chunks`` stages per device group, each stage fits its share of the memory."""
    out: list[Stage] = []
    transfers: list[float] = []
    count = len(layout) - 1
    for k in range(count):
        i, j = layout[k], layout[k + 1]
        f = flight(schedule, k, count, m, chunks)
        _, assignment = costs.fastest(i, j, d)
        stage = Stage(cuts[i], cuts[j], d, 0.0, assignment, again)
        tries = [again] if again or recompute == "none" else [False, True]
        fitted = None
        for checkpoint in tries:
            trial = dataclasses.replace(stage, recompute=checkpoint)
            fitted = _fit(graph, trial, where.machine, mesh, m, f, limit / chunks, say)
            if fitted is not None:
                break
        if fitted is None:
            return None
        out.append(fitted)
        if k < count - 1:
            transfers.append(_transfer(crossing_bytes(graph, cuts[j]) / mesh[0], k + 1, count // chunks, d, where))
    return out, transfers


def _shapes(counts: list[int], units: int, m: int, schedule: str) -> list[tuple[int, int, str]]:
    """(device groups, stages per group, schedule) to try: one stage per group, or for the interleaved
    schedule every count from two to :data:`MAX_CHUNKS` stages per group the blocks allow (PyTorch runs its
    micro-batches in rounds of about one per group: a count it cannot split into rounds is left out);
    ``auto``: 1F1B and interleaved both."""
    if schedule not in ("interleaved", "auto"):
        return [(c, 1, schedule) for c in counts]
    out = [(c, 1, "1f1b") for c in counts] if schedule == "auto" else []
    for c in counts:
        rounds = max(1, m // c)
        if m % rounds:
            continue
        out += [(c, v, "interleaved") for v in range(2, min(MAX_CHUNKS, units // c) + 1)]
    return out


def _transfer(nbytes: float, k: int, groups: int, d: int, where: Cluster) -> float:
    """The transfer into stage ``k`` (on device group ``k % groups`` of ``d`` devices each): across
    the network where the groups before it fill whole nodes, or where it wraps from the last group
    to the first and the pipeline spans more than a node."""
    if k % groups:
        return transfer_time(nbytes, (k % groups) * d, where)
    return transfer_time(nbytes, 0, where, crosses=groups * d > where.gpus_per_node)


def _fit(
    graph: Graph, stage: Stage, machine: Any, mesh: tuple[int, int], m: int, f: int, limit: float, say: Any
) -> Stage | None:
    """``stage`` with a strategy that fits ``limit`` bytes with ``f`` micro-batches in flight (its own
    where it fits; else the stage's fastest with its blocks checkpointed when ``checkpoint``; else
    the Lagrangian memory search's), priced by the step model; None where none fits."""
    costing = stage_costing(graph, stage, machine)
    checkpoint = stage.recompute
    runs = restricted_costs(costing, *mesh)
    if runs is None:
        return None
    found = blocks(costing.graph)
    on = [b.module for b in found] if checkpoint else []
    mask = [(r < FORBIDDEN) & a for r, a in zip(runs, allowed(costing, on, found), strict=True)]
    if any(not x.any() for x in mask):
        return None
    usage = _usage(costing, f)

    def used(a: tuple[int, ...]) -> float:
        return float(sum(u[c] for u, c in zip(usage, a, strict=True)))

    assignment: tuple[int, ...] | None = tuple(stage.assignment)
    if len(stage.assignment) != len(costing.graph) or not all(
        x[c] for x, c in zip(mask, stage.assignment, strict=True)
    ):
        assignment = None
    costs = [
        np.where(x, np.asarray(n, dtype=np.float64), float(FORBIDDEN))
        for n, x in zip(costing.node_costs(), mask, strict=True)
    ]
    pairs = handed_on(costing)
    runs_as_priced = costing.problem.forbid({e: pairs.full(e) for e in pairs.allowed})
    for _ in range(AS_RUN_ROUNDS):  # until every operator runs as the stage's strategy splits it
        if assignment is None or used(assignment) > limit:
            problem = runs_as_priced.replace(node_costs=costs)
            fastest = exact_dp(problem, None)
            assignment = fastest[0] if fastest is not None and used(fastest[0]) <= limit else None
            if assignment is None and fastest is not None:
                assignment, _, _ = under_memory(problem, costs, usage, limit, None, say)
        if assignment is None or used(assignment) > limit:
            return None
        again = unsplit(costing, [costs], assignment, *mesh)
        if again is None:
            return dataclasses.replace(stage, assignment=assignment, time=costing.stage_time(assignment, m))
        costs, assignment = again[0], None
    return None


def _usage(costing: Any, f: int) -> list[np.ndarray]:
    """Bytes per device of each operator's choices with ``f`` micro-batches' activations held."""
    dtype = costing.profile.dtype_bytes
    out = []
    for v, op in enumerate(costing.graph.operators):
        acts = sum(
            (u.size / np.prod(layout(op, u, costing.configs[v]), axis=1) * dtype for u in op.outputs), np.zeros(1)
        )
        if costing.recomputed:  # a recomputed output is not held between the passes: nothing in flight
            acts = np.where(np.asarray(costing.recomputed[v], dtype=bool), 0.0, acts)
        out.append(np.asarray(costing.vertex_costs[v].memory, dtype=np.float64) + (f - 1) * acts)
    return out
