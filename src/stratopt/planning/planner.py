"""The optimal plan for a real cluster, beside the strategies people write by hand.

A :class:`Cluster` is ``nodes x gpus_per_node`` devices of a preset machine, the fast fabric inside
a node and the network between nodes. :func:`plan` prices a model on it with the ``default``
profile, finds the cheapest strategy whose memory per device fits (weights, gradients, Adam state
and kept activations), and measures the baselines on the same model:

- ``data-parallel``: every operator splits only its batch dimension, over every device;
- ``fsdp``: the same computation with weights, gradients and optimizer state sharded over the
  devices (ZeRO-3): weights all-gathered before use, forward and backward, gradients
  reduce-scattered. Sharding what is stored, not what is computed, is not a split of an operator's
  iteration domain, so the configuration space is extended for it: every product whose weights are
  replicated also has the same split with its weight state sharded over the replicas
  (:func:`stratopt.cost.build` with ``shard_weights=True``), one more all-gather of the weights
  and a reduce-scatter instead of an all-reduce. The plan may use it too, per operator.
- ``megatron-tp<t>``: Megatron-LM's tensor parallelism inside a node, data parallelism across:
  the linear layers that read the residual stream (after a norm or an embedding) split their
  output features over ``t`` devices (column parallel), the others split their input features
  (row parallel, whose output all-reduce Megatron has), embeddings split the vocabulary, norms are
  replicated, and every operator splits its batch over the other ``p / t`` devices; the layouts of
  the operators between the linears (attention's heads, reshapes, pointwise work) are the cheapest
  that keep to that pattern (the exact DP over the pattern's configurations).
- ``megatron-tp<t>-fsdp``: the same with the state sharded over the data-parallel groups.

The plan is the exact DP's optimum when it fits; otherwise the memory is a Lagrangian penalty
(one price per byte, found by bisection, each step solved exactly by the DP), which gives both a
plan that fits and a lower bound on the best one in the configuration space; the baselines that
fit are candidates too (all are in the space), so the plan is never worse than any of them.

Every strategy's estimate is :meth:`~stratopt.cost.Costing.step_time`: on a calibrated machine,
communication overlapped with the compute as frameworks overlap it (the search minimises the same
with the overlap taken operator by operator); the plan is the candidate with the least estimate.
Where the simulator runs a fitting baseline faster than the plan, the result says so
(:meth:`PlanResult.simulated_faster`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.instances import load_instance
from stratopt.machine import Machine
from stratopt.planning.baselines import baselines
from stratopt.planning.cluster import cluster, price
from stratopt.planning.memory import exact_dp, solve_under_memory, strategy_memory, under_memory
from stratopt.planning.result import PlanResult, Strategy
from stratopt.planning.torchplan import find_mesh, mesh_shapes, restricted_costs
from stratopt.planning.words import describe_layers
from stratopt.problem import evaluate
from stratopt.sim.trace import simulate_strategy


def plan(
    model: Graph | str,
    nodes: int,
    gpus_per_node: int,
    *,
    machine: str | Machine = "h100",
    memory_gb: float | None = None,
    time_limit: float | None = 120.0,
    simulate: bool = True,
    progress: Callable[[str], None] | None = None,
    expressible: str | None = None,
) -> PlanResult:
    """The optimal plan for ``model`` on ``nodes`` x ``gpus_per_node`` devices, and the baselines.

    ``model`` is an operator graph or anything ``stratopt solve`` takes (a zoo name, an ONNX file, a
    graph file, a ``module:function`` entry point). ``memory_gb`` defaults to the device's memory.
    ``expressible="torch"``: the plan is the best strategy among those PyTorch's DTensor runs as they
    are priced (:mod:`stratopt.planning.torchplan`), so that ``stratopt.torch.parallelize`` applies it.

    >>> r = plan("gpt", 1, 4, simulate=False)
    >>> r.plan.fits and all(r.plan.estimate <= b.estimate + 1e-6 for b in r.baselines if b.fits and b.estimate)
    True
    """

    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    where = cluster(nodes, gpus_per_node, machine)
    graph = load_instance(model) if isinstance(model, str) else model
    if not isinstance(graph, Graph):
        raise ModelError(f"{model}: not a model (expected a network, graph file, ONNX file or entry point)")
    limit_gb = where.machine.memory_gb if memory_gb is None else float(memory_gb)
    if not limit_gb > 0:
        raise ModelError(f"the memory per device must be a positive number of GB, got {memory_gb!r}")
    costing = price(graph, where.devices, where.machine)
    say(costing.summary())
    limit = limit_gb * 1e9
    if expressible not in (None, "torch"):
        raise ModelError(f"expressible must be 'torch' or None, got {expressible!r}")
    if expressible == "torch":
        assignment, status, bound = _torch_search(costing, gpus_per_node, limit, time_limit, say)
        fastest = None
    else:
        assignment, status, bound = solve_under_memory(costing, limit, time_limit, say)
        fastest = exact_dp(costing.problem, time_limit)
    if fastest is not None and strategy_memory(costing, fastest[0]) > limit:
        # Memory binds: every operator may also recompute its outputs instead of keeping them. The
        # configurations double; the first half is as before (so is every baseline and the plan
        # found without recomputation, which stays a candidate), the bound is the larger space's.
        costing = price(graph, where.devices, where.machine, recompute=True)
        say(f"the fastest strategy needs more than {limit_gb:g} GB per device: recomputation offered per operator")
        again, _, bound = solve_under_memory(costing, limit, time_limit, say)
        answers = [a for a in (assignment, again) if a is not None]
        if answers:
            assignment = min(answers, key=lambda a: float(evaluate(costing.problem, a).objective))
            cost = float(evaluate(costing.problem, assignment).objective)
            status = "optimal" if bound is not None and cost - bound <= 1e-9 * max(cost, 1.0) else "feasible"

    def sharded(v: int, c: int) -> bool:
        return costing.is_sharded(v, c)

    constant = float(getattr(costing.profile, "step_overhead", 0.0))  # per step, outside the task graph

    def measured(name: str, a: tuple[int, ...], note: str) -> Strategy:
        estimate = costing.step_time(a)
        memory = strategy_memory(costing, a)
        simulated = None
        if simulate:
            simulated = float(simulate_strategy(costing, a)[1]["iteration_time"]) + constant
        layers = tuple(describe_layers(graph, costing.configs, a, sharded, costing.is_recomputed))
        objective = float(evaluate(costing.problem, a).objective)
        return Strategy(name, a, estimate, simulated, memory, memory <= limit, note, layers, objective)

    results: list[Strategy] = []
    candidates: list[tuple[float, tuple[int, ...]]] = []
    for name, found, remark in baselines(costing, gpus_per_node):
        if isinstance(found, str):
            results.append(Strategy(name, None, None, None, None, False, f"cannot be expressed: {found}"))
            continue
        results.append(measured(name, found, remark))
        if results[-1].fits and (expressible is None or not isinstance(find_mesh(costing, found, gpus_per_node), str)):
            candidates.append((float(results[-1].estimate or 0.0), found))
        say(f"baseline {name}: {results[-1].estimate or 0.0:.1f} us, {(results[-1].memory or 0.0) / 1e9:.1f} GB")
    note = "the DP's optimum" if status == "optimal" else "Lagrangian DP under the memory limit"
    if expressible == "torch":
        note += " among the strategies DTensor runs"
    if assignment is not None:
        candidates.append((costing.step_time(assignment), assignment))
    if candidates:
        cost, chosen = min(candidates, key=lambda c: c[0])
        if assignment is None or cost < costing.step_time(assignment) - 1e-9:
            note = "a baseline: better than what the memory search found"
        best = measured("plan", chosen, note)
    else:
        best = Strategy("plan", None, None, None, None, False, status)
    return PlanResult(
        graph.name, where, limit_gb, best, tuple(results), status, bound, time.perf_counter() - started, costing
    )


def _torch_search(
    costing: Any, gpus_per_node: int, limit: float, time_limit: float | None, say: Callable[[str], None]
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """The fastest strategy that fits among those DTensor runs, over every ``dp x tp`` mesh (each
    solved as :func:`solve_under_memory` solves the whole space); the bound is the least of the
    meshes' bounds."""
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    best: tuple[int, ...] | None = None
    bounds: list[float] = []
    for dp, tp in mesh_shapes(costing.policy.procs, gpus_per_node):
        costs = restricted_costs(costing, dp, tp)
        if costs is None:
            say(f"mesh {dp} x {tp}: some operator has no DTensor form")
            continue
        found, _, bound = under_memory(costing.problem.replace(node_costs=costs), costs, memory, limit, time_limit, say)
        if bound is not None:
            bounds.append(bound)
        if found is not None:
            say(f"mesh {dp} x {tp}: {costing.step_time(found):.1f} us")
            if best is None or costing.step_time(found) < costing.step_time(best):
                best = found
    if best is None:
        return None, "no strategy DTensor runs fits", None
    bound = min(bounds) if bounds else None
    cost = float(evaluate(costing.problem, best).objective)
    exact = bound is not None and cost - bound <= 1e-9 * max(cost, 1.0)
    return best, "optimal" if exact else "feasible", bound
