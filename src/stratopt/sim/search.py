"""MCMC strategy search on the simulator (FlexFlow's execution optimizer, seed 003).

Each proposal gives one random operator a random other configuration; the delta simulation prices
it, and it is accepted with probability ``min(1, exp(-beta * (new - current) / current))``: always
when it is no slower, and the more rarely the larger the relative slowdown. A rejected proposal is
undone by a second delta simulation, which restores the previous timeline exactly.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.problem import evaluate
from stratopt.sim.engine import DeltaSimulator
from stratopt.solvers import solve

__all__ = ["SearchResult", "data_parallel", "mcmc", "start_strategy"]

#: Default inverse temperature: a 0.1% slowdown is accepted with probability 0.37, 1% with 5e-5, so
#: the chain mostly walks among equally fast strategies and downhill. Measured from the DP's
#: strategy at p = 8 with 400 proposals: beta 50 found nothing better on VGG-19, ResNet-50,
#: Inception-v3 and the Transformer; beta 1000 found 1.5%, 3.0%, 5.9% and 0.9% faster ones.
BETA = 1000.0


@dataclass(frozen=True)
class SearchResult:
    """What an MCMC search found: the start and best strategies with their simulated times."""

    start: tuple[int, ...]
    start_time: float
    best: tuple[int, ...]
    best_time: float
    iterations: int
    accepted: int
    improvements: int
    wall_time: float
    seed: int | None
    beta: float
    history: tuple[tuple[int, float], ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, costing: Any, start: str) -> dict[str, Any]:
        """The ``search --json`` object: the start's and the best strategy's simulated time,
        additive cost and assignment, and the search's counts; ``start`` names where it began."""

        def strategy(assignment: tuple[int, ...], time: float) -> dict[str, Any]:
            cost = evaluate(costing.problem, assignment).objective
            return {"iteration_time": time, "additive_cost": cost, "assignment": list(assignment)}

        return {
            "procs": costing.policy.procs,
            "profile": costing.profile.name,
            "units": costing.units,
            "method": "mcmc",
            "seed": self.seed,
            "beta": self.beta,
            "start": {"strategy": start, **strategy(self.start, self.start_time)},
            "best": strategy(self.best, self.best_time),
            "iterations": self.iterations,
            "accepted": self.accepted,
            "improvements": self.improvements,
            "wall_time": self.wall_time,
        }


def data_parallel(costing: Any) -> list[int]:
    """Data parallelism: every operator splits only the axes that index its output's first
    (batch) dimension, as far as its configurations allow (ties: the lower index)."""
    out = []
    for op, configs in zip(costing.graph.operators, costing.configs, strict=True):
        batch = {op.axis_index(a) for a in op.outputs[0].dims[0]} if op.outputs[0].dims else set()
        best, best_split = 0, 0
        for c, row in enumerate(configs.tolist()):
            if any(x > 1 for i, x in enumerate(row) if i not in batch):
                continue
            split = math.prod(row)
            if split > best_split:
                best, best_split = c, split
        out.append(best)
    return out


def start_strategy(costing: Any, how: str | Sequence[int], *, time_limit: float | None = None) -> list[int]:
    """A start strategy: ``"dp"`` (the additive model's optimum, by the exact solver that fits),
    ``"data-parallel"``, or a list of configuration indices."""
    if isinstance(how, str):
        if how == "data-parallel":
            return data_parallel(costing)
        if how == "dp":
            result = solve(costing.problem, "auto", time_limit=time_limit)
            if result.assignment is None:
                raise ModelError(f"{costing.graph.name}: the exact solver found no strategy to start from")
            return [int(x) for x in result.assignment]
        raise ModelError(f"unknown start strategy {how!r}; use dp, data-parallel or a list of choices")
    if not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in how):
        raise ModelError("a strategy must list one integer configuration index per operator")
    choice = [int(x) for x in how]
    k = costing.problem.num_choices
    if len(choice) != len(k):
        raise ModelError(f"the strategy has {len(choice)} choices but {costing.graph.name} has {len(k)} operators")
    for v, (c, kv) in enumerate(zip(choice, k, strict=True)):
        if not 0 <= c < kv:
            raise ModelError(f"operator {costing.graph.operators[v].name!r}: choice {c} is out of range (it has {kv})")
    return choice


def mcmc(
    costing: Any,
    start: str | Sequence[int] = "dp",
    *,
    budget: int | None = 1000,
    time_limit: float | None = None,
    beta: float = BETA,
    seed: int | None = None,
    progress: Callable[[int, float, float], None] | None = None,
) -> SearchResult:
    """Search strategies by Markov chain Monte Carlo on the simulated iteration time.

    Parameters
    ----------
    costing
        A priced operator graph (:func:`stratopt.cost.build`).
    start
        ``"dp"``, ``"data-parallel"`` or a list of configuration indices (:func:`start_strategy`).
    budget, time_limit
        Stop after this many proposals or seconds, whichever comes first (at least one must be set).
    beta
        Inverse temperature of the acceptance rule.
    seed
        Seed of the proposal and acceptance draws: the same seed gives the same search.
    progress
        Called as ``progress(iteration, current, best)`` about every 100 proposals.

    References
    ----------
    Jia, Zaharia, Aiken, "Beyond Data and Model Parallelism for Deep Neural Networks", SysML 2019
    (section 6, the execution optimizer).

    Examples
    --------
    >>> from stratopt.cost import build
    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("mlp")
    >>> _ = g.softmax_xent(g.fc(g.fc(g.input((64, 256)), 128), 64))
    >>> r = mcmc(build(g.build(), 4, profile="default", machine="h100"), "data-parallel", budget=200, seed=1)
    >>> r.best_time <= r.start_time
    True
    """
    if budget is None and time_limit is None:
        raise ModelError("give the search a budget (proposals) or a time limit")
    if budget is not None and budget < 0:
        raise ModelError(f"the budget must not be negative, got {budget}")
    if not beta >= 0:
        raise ModelError(f"beta must be a non-negative number, got {beta!r}")
    began = time.perf_counter()
    first = start_strategy(costing, start)
    sim = DeltaSimulator(costing, first)
    rng = random.Random(seed)
    k = np.asarray(costing.problem.num_choices).tolist()
    movable = [v for v, kv in enumerate(k) if kv > 1]
    current = sim.makespan
    start_time = best_time = current
    best = tuple(first)
    accepted = improvements = iterations = 0
    history = [(0, current)]
    deadline = None if time_limit is None else began + time_limit
    while movable and (budget is None or iterations < budget):
        if deadline is not None and time.perf_counter() >= deadline:
            break
        iterations += 1
        v = movable[rng.randrange(len(movable))]
        old = sim.tasks.assignment[v]
        c = rng.randrange(k[v] - 1)
        c += c >= old
        proposed = sim.change(v, c)
        draw = rng.random()
        if proposed <= current or draw < math.exp(-beta * (proposed - current) / max(current, 1e-300)):
            accepted += 1
            current = proposed
            if current < best_time:
                best_time, best = current, tuple(sim.tasks.assignment)
                improvements += 1
                history.append((iterations, best_time))
        else:
            sim.change(v, old)
        if progress is not None and iterations % 100 == 0:
            progress(iterations, current, best_time)
    return SearchResult(
        tuple(first),
        start_time,
        best,
        best_time,
        iterations,
        accepted,
        improvements,
        time.perf_counter() - began,
        seed,
        beta,
        tuple(history),
        {"tasks": sim.graph.count},
    )
