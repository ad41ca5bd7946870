"""A cluster: nodes of devices of a preset machine, the fabric inside a node and the network between."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from stratopt.cost import Costing, build
from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.machine import Machine, get_machine
from stratopt.planning.recompute import confined


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


def price(graph: Graph, devices: int, machine: Machine, *, recompute: bool = False) -> Costing:
    """``graph`` on ``devices`` devices of ``machine`` as planning prices it, the plan, its baselines
    and every pipeline stage alike: the ``default`` profile, any block size down to one element
    (data parallelism over as many devices as samples), and every product with replicated weights
    also offered with its weight state sharded over the replicas (FSDP); with ``recompute``, every
    operator also offered recomputing its outputs, inside the graph's blocks where it has them
    (:func:`~stratopt.planning.recompute.confined`: what leaves a block is kept)."""
    costing = build(
        graph, devices, profile="default", machine=machine, cutoff=1, shard_weights=True, recompute=recompute
    )
    return confined(costing) if recompute else costing
