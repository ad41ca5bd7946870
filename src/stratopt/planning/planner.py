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
A plan that runs adds what the per-operator prices leave out of how PyTorch runs it
(:func:`runnable_time`: the forward communication checkpointing repeats, the gathers DTensor issues
where an operator keeps a split but also reads a whole tensor).
Where the simulator runs a fitting baseline faster than the plan, the result says so
(:meth:`PlanResult.simulated_faster`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.graph.ir import Graph
from stratopt.instances import load_instance
from stratopt.machine import Machine
from stratopt.planning.again import unsplit
from stratopt.planning.baselines import baselines
from stratopt.planning.cluster import cluster, price
from stratopt.planning.memory import solve_under_memory, strategy_memory, under_memory
from stratopt.planning.pairs import Pairs, handed_on
from stratopt.planning.recompute import MODES, allowed, blocks, checkpointed, keeping, reissue_costs, reissued
from stratopt.planning.result import PlanResult, Strategy
from stratopt.planning.torchplan import (
    AS_RUN_ROUNDS,
    as_run,
    find_mesh,
    mesh_shapes,
    restricted_costs,
    unpriced_gathers,
)
from stratopt.planning.twins import Twins
from stratopt.planning.words import describe_layers
from stratopt.problem import FORBIDDEN, evaluate
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
    recompute: str = "auto",
) -> PlanResult:
    """The optimal plan for ``model`` on ``nodes`` x ``gpus_per_node`` devices, and the baselines.

    ``model`` is an operator graph or anything ``stratopt solve`` takes (a zoo name, an ONNX file, a
    graph file, a ``module:function`` entry point). ``memory_gb`` defaults to the device's memory.
    ``expressible="torch"``: the plan is the best strategy among those PyTorch's DTensor runs as they
    are priced (:mod:`stratopt.planning.torchplan`), so that ``stratopt.torch.parallelize`` applies it.
    ``recompute`` (:mod:`stratopt.planning.recompute`): ``auto`` offers recomputation where memory
    binds (per operator on paper; per block, checkpointed whole, for a plan that runs), ``full``
    recomputes every block, ``none`` nothing.

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
    if recompute not in MODES:
        raise ModelError(f"recompute must be one of {', '.join(MODES)}, got {recompute!r}")
    if expressible not in (None, "torch"):
        raise ModelError(f"expressible must be 'torch' or None, got {expressible!r}")
    if recompute == "full" and not blocks(graph):
        raise ModelError(f"{graph.name}: no block to recompute (no repeated module, such as layers.0, holds weights)")
    costing = price(graph, where.devices, where.machine, recompute=recompute == "full")
    say(costing.summary())
    limit = limit_gb * 1e9
    if recompute == "full":
        assignment, status, bound = _full_recompute(costing, gpus_per_node, limit, time_limit, say, expressible)
    elif expressible == "torch":
        pairs = handed_on(costing)  # the pairs of configurations DTensor runs as priced
        assignment, status, bound = _torch_search(costing, gpus_per_node, limit, time_limit, say, pairs=pairs)
        if recompute == "auto":
            held = [costing, pairs]  # let go of inside: at 128 devices the tables are gigabytes
            del costing, pairs
            costing, assignment, status, bound = _torch_recompute(
                held, graph, where, (assignment, status, bound), limit, time_limit, say
            )
    else:
        assignment, status, bound = solve_under_memory(costing, limit, time_limit, say)
        fastest = (
            Twins(costing.problem, costing.configs).solve(costing.node_costs(), time_limit)
            if recompute == "auto"
            else None
        )
        if fastest is not None and strategy_memory(costing, fastest[0]) > limit:
            # Memory binds: every operator may also recompute its outputs instead of keeping them. The
            # configurations double; the first half is as before (so is every baseline and the plan
            # found without recomputation, which stays a candidate), the bound is the larger space's.
            costing = price(graph, where.devices, where.machine, recompute=True)
            say(f"the fastest strategy needs more than {limit_gb:g} GB per device: recomputation offered per operator")
            again, _, bound = solve_under_memory(costing, limit, time_limit, say)
            if assignment is not None or again is not None:
                assignment, status = _better(costing, (assignment, again), bound)

    constant = float(getattr(costing.profile, "step_overhead", 0.0))  # per step, outside the task graph

    def timed(a: tuple[int, ...]) -> float:
        return runnable_time(costing, a, gpus_per_node) if expressible == "torch" else costing.step_time(a)

    def measured(name: str, a: tuple[int, ...], note: str) -> Strategy:
        estimate = timed(a)
        memory = strategy_memory(costing, a)
        simulated = None
        if simulate:
            simulated = float(simulate_strategy(costing, a)[1]["iteration_time"]) + constant
        layers = tuple(describe_layers(graph, costing.configs, a, costing.sharding, costing.is_recomputed))
        objective = float(evaluate(costing.problem, a).objective)
        return Strategy(name, a, estimate, simulated, memory, memory <= limit, note, layers, objective)

    results: list[Strategy] = []
    candidates: list[tuple[float, tuple[int, ...]]] = []
    for name, found, remark in baselines(costing, gpus_per_node):
        if isinstance(found, str):
            results.append(Strategy(name, None, None, None, None, False, f"cannot be expressed: {found}"))
            continue
        results.append(measured(name, found, remark))
        runs = expressible is None or not isinstance(find_mesh(costing, found, gpus_per_node), str)
        if results[-1].fits and runs and recompute != "full":  # no baseline recomputes
            candidates.append((float(results[-1].estimate or 0.0), found))
        say(f"baseline {name}: {results[-1].estimate or 0.0:.1f} us, {(results[-1].memory or 0.0) / 1e9:.1f} GB")
    note = "the DP's optimum" if status == "optimal" else "Lagrangian DP under the memory limit"
    if expressible == "torch":
        note += " among the strategies DTensor runs"
    if assignment is not None:
        candidates.append((timed(assignment), assignment))
    if candidates:
        cost, chosen = min(candidates, key=lambda c: c[0])
        if assignment is None or cost < timed(assignment) - 1e-9:
            note = "a baseline: better than what the memory search found"
        best = measured("plan", chosen, note)
    else:
        best = Strategy("plan", None, None, None, None, False, status)
    return PlanResult(
        graph.name, where, limit_gb, best, tuple(results), status, bound, time.perf_counter() - started, costing
    )


def runnable_time(costing: Any, assignment: tuple[int, ...], gpus_per_node: int) -> float:
    """The step time of a strategy PyTorch runs: :meth:`~stratopt.cost.Costing.step_time` plus what
    the per-operator prices leave out of how it runs (the forward communication checkpointing
    repeats, :func:`~stratopt.planning.recompute.reissued`; the gathers DTensor issues where the
    plan keeps a split, :func:`~stratopt.planning.torchplan.unpriced_gathers`), each operator priced
    as it runs (:func:`~stratopt.planning.torchplan.as_run`: one the plan splits but no module hands
    a shard runs whole)."""
    mesh = find_mesh(costing, assignment, gpus_per_node)
    extra = 0.0
    if not isinstance(mesh, str):
        with contextlib.suppress(ModelError):  # its modules take no single placement: the export says why
            assignment = as_run(costing, assignment, *mesh)
            extra += unpriced_gathers(costing, assignment, *mesh)
    return costing.step_time(assignment) + reissued(costing, assignment) + extra


def _better(
    costing: Any, answers: tuple[tuple[int, ...] | None, ...], bound: float | None
) -> tuple[tuple[int, ...] | None, str]:
    """The cheapest of ``answers`` (by the search's objective) and whether ``bound`` proves it optimal."""
    found = [a for a in answers if a is not None]
    if not found:
        return None, "no strategy fits"
    best = min(found, key=lambda a: float(evaluate(costing.problem, a).objective))
    cost = float(evaluate(costing.problem, best).objective)
    return best, "optimal" if bound is not None and cost - bound <= 1e-9 * max(cost, 1.0) else "feasible"


def _masked(costs: list[np.ndarray], mask: list[np.ndarray] | None) -> list[np.ndarray]:
    if mask is None:
        return costs
    return [np.where(m, c, float(FORBIDDEN)) for c, m in zip(costs, mask, strict=True)]


def _full_recompute(
    costing: Any,
    gpus_per_node: int,
    limit: float,
    time_limit: float | None,
    say: Callable[[str], None],
    expressible: str | None,
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """The fastest strategy that fits with every block checkpointed (``recompute="full"``)."""
    found = blocks(costing.graph)
    mask = allowed(costing, [b.module for b in found], found)
    say(f"every one of {len(found)} blocks recomputes (full activation checkpointing)")
    if expressible == "torch":
        return _torch_search(costing, gpus_per_node, limit, time_limit, say, mask)
    costs = _masked([np.asarray(n, dtype=np.float64) for n in costing.node_costs()], mask)
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    return under_memory(costing.problem.replace(node_costs=costs), costs, memory, limit, time_limit, say)


def _torch_recompute(
    held: list[Any],
    graph: Graph,
    where: Any,
    found: tuple[tuple[int, ...] | None, str, float | None],
    limit: float,
    time_limit: float | None,
    say: Callable[[str], None],
) -> tuple[Any, tuple[int, ...] | None, str, float | None]:
    """``recompute="auto"`` for a plan that runs: where the fastest strategy DTensor runs does not fit,
    the search again with the first ``k`` blocks checkpointed selectively (each module's product
    kept or recomputed as the search decides, :mod:`~stratopt.planning.recompute`), for a few ``k``
    (how many blocks the per-operator relaxation recomputes in, half way from there to all, all),
    each answer then giving as many blocks their outputs back as the memory left holds; the
    cheapest that fits wins, every block recomputed whole among them (the fused attention
    recomputed too), and the relaxation's own answer where, moved into what checkpointing every
    block selectively allows and fitted, it runs as it is (:func:`_runs_as_is`). The bound is the
    relaxation's (recomputation per operator: a superset).
    ``held``: the costing without recomputation and its :func:`~stratopt.planning.pairs.handed_on`,
    emptied here once the costing with recomputation is priced (the plan's assignment, if any, is
    the same in its first half of the configurations)."""
    gpus = where.gpus_per_node
    costing, pairs = held.pop(0), held.pop(0)
    fastest, _, _ = _torch_search(costing, gpus, math.inf, time_limit, lambda _m: None, pairs=pairs)
    chain = blocks(graph)
    if fastest is None or strategy_memory(costing, fastest) <= limit or not chain:
        return (costing, *found)
    del costing, pairs, fastest
    again = price(graph, where.devices, where.machine, recompute=True)
    say(f"the fastest strategy DTensor runs needs more than {limit / 1e9:g} GB: recomputation offered per block")
    pairs = handed_on(again)
    relaxed, _, bound = _torch_search(again, gpus, limit, time_limit, lambda _m: None, as_run=False, pairs=pairs)
    if relaxed is None:
        return (again, *found)
    recomputing = {b.module for b in chain for v in b.inner if again.is_recomputed(v, relaxed[v])}
    k0, total = len(recomputing), len(chain)
    best = found[0]
    best_time = math.inf if best is None else runnable_time(again, best, gpus)
    whole = allowed(again, [b.module for b in chain], chain, selective=True)  # every block, selectively
    as_is = _runs_as_is(again, relaxed, gpus, limit, pairs, whole)
    if as_is is not None:  # the relaxation's answer itself (moved into the mask), where it runs
        took = runnable_time(again, as_is, gpus)
        say(f"the relaxation's answer runs as it is: {took:.1f} us")
        if took < best_time:
            best, best_time = as_is, took
    tries = [(k, True) for k in sorted({max(k0, 1), (max(k0, 1) + total + 1) // 2, total})]
    for k, selective in [*tries, (total, False)]:  # and every block recomputed whole
        on = [b.module for b in chain[:k]]
        mask = allowed(again, on, chain, selective=selective)
        extra = reissue_costs(again, on, chain) if selective else None
        assignment, _, _ = _torch_search(
            again, gpus, limit, time_limit, lambda _m: None, mask, loosen=True, surcharge=extra, pairs=pairs
        )
        what = f"{k} of {total} blocks recomputing{'' if selective else ' whole'}"
        if assignment is None:
            say(f"{what}: nothing fits")
            continue
        took = runnable_time(again, assignment, gpus)
        say(f"{what}: {took:.1f} us")
        if took < best_time:
            best, best_time = assignment, took
    if best is None:
        return again, None, "no strategy DTensor runs fits", bound
    chosen, status = _better(again, (best,), bound)
    return again, chosen, status, bound


def _repaired(costing: Any, assignment: tuple[int, ...], mask: list[np.ndarray], limit: float) -> Any:
    """``assignment`` moved into ``mask`` (per operator, the configurations a plan that runs may take):
    an operator outside it takes its twin (the same split, its outputs kept instead of recomputed or
    the other way: the costing's second half of configurations recomputes the first's); then, while
    it needs more than ``limit`` bytes, the kept output whose recomputation costs least time per
    byte it frees is recomputed. None where no twin is allowed or it cannot be made to fit."""
    nodes = costing.node_costs()
    memory = [np.asarray(vc.memory, dtype=np.float64) for vc in costing.vertex_costs]

    def twin(v: int, c: int) -> int:
        half = len(costing.configs[v]) // 2
        return c - half if c >= half else c + half

    out = list(assignment)
    for v, c in enumerate(out):
        if not mask[v][c]:
            if not costing.recomputed or not mask[v][twin(v, c)]:
                return None
            out[v] = twin(v, c)
    used = sum(float(memory[v][c]) for v, c in enumerate(out))
    options = []
    for v, c in enumerate(out):
        t = twin(v, c) if costing.recomputed else c
        freed = float(memory[v][c] - memory[v][t])
        if used > limit and mask[v][t] and costing.is_recomputed(v, t) and freed > 0:
            options.append((float(nodes[v][t] - nodes[v][c]) / freed, v, t, freed))
    for _, v, t, freed in sorted(options):
        if used <= limit:
            break
        out[v], used = t, used - freed
    return tuple(out) if used <= limit else None


def _runs_as_is(
    costing: Any, assignment: tuple[int, ...], gpus: int, limit: float, pairs: Pairs, mask: list[np.ndarray]
) -> Any:
    """``assignment`` (a relaxation's answer: recomputation per operator, operators PyTorch would run
    whole left split) moved into ``mask`` and fitted (:func:`_repaired`) and as PyTorch runs it
    (:func:`~stratopt.planning.torchplan.as_run`; fitted again where that moves it), where that runs
    as it is (:func:`~stratopt.planning.again.unsplit` has nothing to change), keeps to the pairs
    DTensor runs as priced and recomputes only as checkpointed blocks do; else None."""
    for _ in range(AS_RUN_ROUNDS):
        fixed = _repaired(costing, assignment, mask, limit)
        mesh = None if fixed is None else find_mesh(costing, fixed, gpus)
        if fixed is None or mesh is None or isinstance(mesh, str):
            return None
        try:
            ran = as_run(costing, fixed, *mesh)
        except ModelError:  # (a layout no module placement takes: not as it is)
            return None
        if ran != fixed:
            assignment = ran
            continue
        runs = unsplit(costing, [], ran, *mesh) is None and pairs.permits(ran)
        return ran if runs and not isinstance(checkpointed(costing, ran), str) else None
    return None


def _torch_search(
    costing: Any,
    gpus_per_node: int,
    limit: float,
    time_limit: float | None,
    say: Callable[[str], None],
    mask: list[np.ndarray] | None = None,
    *,
    loosen: bool = False,
    surcharge: list[np.ndarray] | None = None,
    as_run: bool = True,
    pairs: Pairs | None = None,
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """The fastest strategy that fits among those DTensor runs, over every ``dp x tp`` mesh (each
    solved as :func:`solve_under_memory` solves the whole space; ``mask``: per operator, the
    configurations allowed besides; ``loosen``: the mixes may give masked blocks their outputs
    back, whole; ``surcharge``: per operator, time added to the allowed configurations, the forward
    communication a selectively checkpointed block issues again); the bound is the least of the
    meshes' bounds. A mesh's answer in which PyTorch would run an operator whole that it splits
    (:func:`~stratopt.planning.torchplan.as_run`) is searched again with those splits forbidden, up
    to ``AS_RUN_ROUNDS`` times (``as_run=False``: not, for a relaxation); ``pairs``: the costing's
    :func:`~stratopt.planning.pairs.handed_on`, where the caller has it (the pairs of
    configurations DTensor runs as priced: the DP keeps to them, and so do the mixes).

    Each mesh's unconstrained optimum (one DP) bounds what the mesh can do, so the meshes are searched
    best bound first, and one whose bound is no better than the best objective found is not searched
    further (its bound stands for it); among the strategies found, the least step time wins."""
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]

    def lift(runnable: list[np.ndarray]) -> dict[str, Any]:
        """With blocks checkpointed by ``mask`` and ``loosen``: the mixes may give whole blocks their
        outputs back (the companion), priced without the mask (the mesh's ``runnable`` costs), and
        must still checkpoint whole blocks; every mix keeps to the pairs DTensor runs as priced."""
        if mask is None or not loosen or not costing.recomputed:
            return {"valid": kept_to}
        return {
            "companion": partial(keeping, costing),
            "judge": costing.problem.replace(node_costs=runnable),
            "valid": lambda a: kept_to(a) and not isinstance(checkpointed(costing, a), str),
            "together": [b.inner for b in blocks(costing.graph)],
        }

    pairs = handed_on(costing) if pairs is None else pairs
    kept_to = pairs.permits

    twins = Twins(costing.problem, costing.configs, pairs)  # every mesh's costs differ at the nodes only
    runs = []
    for dp, tp in mesh_shapes(costing.policy.procs, gpus_per_node):
        runnable = costs = restricted_costs(costing, dp, tp, pairs.meshes)
        if costs is not None and mask is not None:
            costs = _masked(costs, mask)
            costs = None if any(not np.any(c < FORBIDDEN) for c in costs) else costs
        if costs is not None and surcharge is not None:
            costs = [np.where(c < FORBIDDEN, c + s, c) for c, s in zip(costs, surcharge, strict=True)]
        if costs is None:
            say(f"mesh {dp} x {tp}: some operator has no DTensor form")
            continue
        problem = costing.problem.replace(node_costs=costs)
        fastest = twins.solve(costs, time_limit)
        if fastest is not None and runnable is not None:
            runs.append((fastest[1], dp, tp, problem, costs, fastest, runnable))
    best: tuple[int, ...] | None = None
    best_objective = math.inf
    bounds: list[float] = []
    for value, dp, tp, problem, costs, fastest, runnable in sorted(runs, key=lambda r: r[0]):
        if value >= best_objective:
            bounds.append(value)
            say(f"mesh {dp} x {tp}: at best {value:.1f} us, no better than {best_objective:.1f} us found")
            continue

        found, bound = None, None
        for rounds in range(AS_RUN_ROUNDS):  # until every operator runs as the plan splits it

            def oracle(price: float, costs: Any = costs, fastest: Any = fastest) -> Any:
                if price == 0.0:
                    return fastest
                return twins.solve([c + price * m for c, m in zip(costs, memory, strict=True)], time_limit)

            found, _, relaxed = under_memory(
                problem, costs, memory, limit, time_limit, say, oracle=oracle, **lift(runnable)
            )
            bound = relaxed if rounds == 0 else bound  # the first space holds every later one
            again = None if found is None or not as_run else unsplit(costing, [costs, runnable], found, dp, tp)
            if again is None:
                break
            say(f"mesh {dp} x {tp}: operators PyTorch would run whole where the plan splits them: again without")
            costs, runnable = again
            problem = costing.problem.replace(node_costs=costs)
            fastest = twins.solve(costs, time_limit)
            found = None
        if bound is not None:
            bounds.append(bound)
        if found is not None:
            say(f"mesh {dp} x {tp}: {costing.step_time(found):.1f} us")
            best_objective = min(best_objective, float(evaluate(costing.problem, found).objective))
            if best is None or costing.step_time(found) < costing.step_time(best):
                best = found
    if best is None:
        return None, "no strategy DTensor runs fits", None
    bound = min(bounds) if bounds else None
    cost = float(evaluate(costing.problem, best).objective)
    exact = bound is not None and cost - bound <= 1e-9 * max(cost, 1.0)
    return best, "optimal" if exact else "feasible", bound
