"""Pipeline stages: where a cut may go, a stage's own graph, the transfer across a cut, the plan's shape."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.cost import Costing
from stratopt.cost.costing import signature
from stratopt.graph.ir import Graph, Input
from stratopt.machine import Machine
from stratopt.planning.cluster import price

_US = 1e6


@dataclass(frozen=True)
class Stage:
    """Operators ``[start, end)`` of the graph on ``devices`` devices: per micro-batch ``time``
    (microseconds, gradient synchronisation counted 1 / M; the intra-operator optimum unless memory
    binds) with ``assignment`` (configuration indices of the stage's own problem, :func:`stage_costing`;
    ``recompute``: priced with recomputation offered per operator)."""

    start: int
    end: int
    devices: int
    time: float
    assignment: tuple[int, ...]
    recompute: bool = False


@dataclass(frozen=True)
class PipelinePlan:
    """Stages in order, the transfers between them (microseconds per micro-batch), and 1F1B's
    iteration time for ``microbatches`` micro-batches: ``estimate`` over the stages' step-model times
    (:meth:`~stratopt.cost.Costing.stage_time`, as ``plan`` prices a strategy), ``objective`` over
    the additive times the search minimised exactly (overlap taken operator by operator).
    ``chunks`` > 1: an interleaved pipeline, stage ``j`` on device group ``j % groups`` (each group
    runs ``chunks`` stages), priced by :func:`interleaved`."""

    stages: tuple[Stage, ...]
    transfers: tuple[float, ...]
    microbatches: int
    devices: int
    objective: float
    chunks: int = 1

    @property
    def groups(self) -> int:
        """Device groups (pipeline ranks): the stages over their chunks."""
        return len(self.stages) // self.chunks

    @property
    def estimate(self) -> float:
        times = [s.time for s in self.stages]
        if self.chunks > 1:
            return interleaved(times, list(self.transfers), self.groups, self.microbatches)
        return one_f_one_b(times + list(self.transfers), self.microbatches)

    @property
    def bottleneck(self) -> float:
        return max([s.time for s in self.stages] + list(self.transfers))


def one_f_one_b(times: list[float], microbatches: int) -> float:
    """1F1B's iteration time: every stage and transfer runs each micro-batch once, and the slowest
    sets the pace.

    >>> one_f_one_b([3.0, 1.0, 2.0], 4)
    15.0
    """
    return sum(times) + (microbatches - 1) * max(times)


def interleaved(times: list[float], transfers: list[float], groups: int, microbatches: int) -> float:
    """Interleaved 1F1B's iteration time, stage ``j`` of ``times`` on group ``j % groups``: the
    busiest group (or transfer) runs every micro-batch, and the fill and drain cost the rest of
    one micro-batch's way through the pipeline over the chunks per group (Narayanan et al., 2021:
    a bubble of ``(groups - 1) / chunks`` stage times). One chunk per group is 1F1B's time.

    >>> interleaved([1.0, 1.0, 1.0, 1.0], [], 2, 4), one_f_one_b([2.0, 2.0], 4)
    (9.0, 10.0)
    """
    chunks = len(times) // groups
    per_group = [sum(times[g::groups]) for g in range(groups)]
    busiest = max(per_group + transfers)
    return microbatches * busiest + (sum(times) + sum(transfers) - busiest) / chunks


def cut_points(graph: Graph) -> list[int]:
    """Positions ``i`` (a cut between operators ``i - 1`` and ``i``) where exactly one tensor
    crosses: one producer before the cut feeds operators after it. 0 and ``len(graph)`` included.

    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("chain"); x = g.fc(g.fc(g.fc(g.input((8, 16)), 16), 16), 16)
    >>> cut_points(g.build())
    [0, 1, 2, 3]
    """
    n = len(graph)
    last = [-1] * n
    for u, v, _ in graph.edges():
        last[u] = max(last[u], v)
    live = np.zeros(n + 1, dtype=np.int64)  # producers live across cut i: u < i <= last[u]
    for u in range(n):
        if last[u] > u:
            live[u + 1] += 1
            live[last[u] + 1] -= 1
    live = np.cumsum(live)
    return [0, *[i for i in range(1, n) if live[i] == 1], n]


def stage_graph(graph: Graph, start: int, end: int) -> Graph:
    """Operators ``[start, end)`` as a graph of their own: a tensor from before ``start`` becomes a
    graph input (the stage receives it)."""
    ops = graph.operators[start:end]
    inside = {op.name for op in ops}
    out = []
    for op in ops:
        inputs = tuple(i if i.source is None or i.source in inside else Input(None, i.use, 0, False) for i in op.inputs)
        out.append(dataclasses.replace(op, inputs=inputs))
    return Graph(f"{graph.name}[{start}:{end}]", tuple(out), graph.source, graph.cutoff)


def stage_costing(graph: Graph, stage: Stage, machine: Machine) -> Costing:
    """The stage's own problem: its operators (:func:`stage_graph`) on its devices, priced as planning
    prices (:func:`~stratopt.planning.cluster.price`)."""
    return price(stage_graph(graph, stage.start, stage.end), stage.devices, machine, recompute=stage.recompute)


def crossing_bytes(graph: Graph, cut: int) -> float:
    """Bytes of the one tensor crossing ``cut`` (a :func:`cut_points` position), in bf16."""
    index = graph.index
    producers = {index[i.source] for op in graph.operators[cut:] for i in op.inputs if i.source is not None}
    u = max(x for x in producers if x < cut)
    return graph.operators[u].outputs[0].size * 2.0


def transfer_time(nbytes: float, devices_before: int, where: Any, crosses: bool | None = None) -> float:
    """Microseconds to send a stage boundary's tensor forward and its gradient back, on NVLink
    unless the devices before the boundary fill whole nodes of ``where`` (a
    :class:`~stratopt.planning.Cluster`), then on the network (``crosses``: say which instead)."""
    if crosses is None:
        crosses = devices_before % where.gpus_per_node == 0
    size = np.array(where.devices if crosses else 1)
    bw, lat = where.machine.link(size, size)
    return float(2.0 * (nbytes / bw + lat)) * _US


def group_sizes(nodes: int, per_node: int) -> list[int]:
    """Group sizes: divisors of a node's devices, then whole numbers of nodes."""
    small = [d for d in range(1, per_node + 1) if per_node % d == 0]
    return sorted(set(small) | {k * per_node for k in range(1, nodes + 1)})


def unit_cuts(graph: Graph, max_units: int | None) -> list[int]:
    """The cuts stages may use: every :func:`cut_points` cut, or at most ``max_units`` units made by
    keeping every ``step``-th cut, ``step`` a multiple of the graph's period (the number of cuts
    after which the units repeat: 2 for a Transformer block, attention then MLP), so that the units
    stay alike and alike stages are solved once."""
    cuts = cut_points(graph)
    if max_units is None or len(cuts) - 1 <= max_units:
        return cuts

    keys = [hash(signature(op)) for op in graph.operators]
    content = [tuple(keys[a:b]) for a, b in itertools.pairwise(cuts)]
    period = 1
    for q in range(1, 9):
        middle = range(2, len(content) - q - 2)
        if middle and sum(content[i] == content[i + q] for i in middle) >= 0.9 * len(middle):
            period = q
            break
    step = period * max(1, math.ceil((len(cuts) - 1) / (period * max_units)))
    inner = cuts[1:-1]
    return [0, *inner[::step], len(graph)]
