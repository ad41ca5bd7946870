"""The cheapest strategy under a memory limit: the DP's optimum when it fits, else a Lagrangian
bisection on one price per byte, each step solved exactly, which also gives a lower bound."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.problem import FORBIDDEN, StrategyProblem, evaluate
from stratopt.solvers import solve


def strategy_memory(costing: Any, assignment: tuple[int, ...]) -> float:
    return float(sum(costing.vertex_costs[v].memory[c] for v, c in enumerate(assignment)))


def exact_dp(problem: StrategyProblem, time_limit: float | None) -> tuple[tuple[int, ...], float] | None:

    result = solve(problem, "dp", time_limit=time_limit)
    if result.assignment is None or result.status.value != "optimal":
        return None
    return tuple(int(c) for c in result.assignment), float(result.objective or 0.0)


def _with_node_costs(problem: StrategyProblem, costs: list[np.ndarray]) -> StrategyProblem:
    return problem.replace(node_costs=costs)


def solve_under_memory(
    costing: Any, limit: float, time_limit: float | None, say: Callable[[str], None]
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """(assignment, status, lower bound): the DP's optimum if it fits, else Lagrangian bisection on
    one price per byte, each step an exact DP; the bound is the best dual value."""
    base = [np.asarray(n, dtype=np.float64) for n in costing.node_costs()]
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    return under_memory(costing.problem, base, memory, limit, time_limit, say)


def under_memory(
    problem: StrategyProblem,
    base: list[np.ndarray],
    memory: list[np.ndarray],
    limit: float,
    time_limit: float | None,
    say: Callable[[str], None],
    *,
    oracle: Callable[[float], tuple[tuple[int, ...], float] | None] | None = None,
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """The least-cost assignment of ``problem`` (node costs ``base``) whose summed per-vertex
    ``memory`` stays within ``limit``, as :func:`solve_under_memory` finds it: (assignment, status,
    lower bound). ``oracle(price)``, when given, is the exact optimum (assignment, value) of the
    costs ``base + price * memory`` (default: the DP on ``problem`` with those node costs)."""
    started = time.perf_counter()

    def left() -> float | None:
        return None if time_limit is None else max(1.0, time_limit - (time.perf_counter() - started))

    def exact(price: float) -> tuple[tuple[int, ...], float] | None:
        if oracle is not None:
            return oracle(price)
        if price == 0.0:
            return exact_dp(problem, left())
        return exact_dp(_with_node_costs(problem, [b + price * m for b, m in zip(base, memory, strict=True)]), left())

    def cost(a: tuple[int, ...]) -> float:
        return float(evaluate(problem, a).objective)

    found = exact(0.0)
    if found is None:
        return None, "no answer from the DP", None
    best, best_cost = found

    def used(a: tuple[int, ...]) -> float:
        return float(sum(memory[v][c] for v, c in enumerate(a)))

    if used(best) <= limit:
        return best, "optimal", best_cost
    allowed = [b < FORBIDDEN for b in base]  # the least over the configurations not forbidden
    least = sum(float(m[ok].min()) if ok.any() else math.inf for ok, m in zip(allowed, memory, strict=True))
    if least > limit:
        return None, f"infeasible: the least memory any strategy needs is {least / 1e9:.1f} GB per device", None
    bound = -math.inf

    def penalised(price: float) -> tuple[tuple[int, ...], bool] | None:
        """The exact optimum with memory at ``price`` microseconds per byte, and whether it fits;
        its Lagrangian dual value raises the bound."""
        nonlocal bound
        step = exact(price)
        if step is None:
            return None
        a, value = step
        bound = max(bound, value - price * limit)
        return a, used(a) <= limit

    feasible: tuple[int, ...] | None = None
    feasible_cost = math.inf
    lo, hi = 0.0, max(best_cost, 1.0) / max(limit, 1.0)
    for _ in range(60):  # find a price at which the penalised optimum fits
        found = penalised(hi)
        if found is None:
            break
        if found[1]:
            feasible, feasible_cost = found[0], cost(found[0])
            break
        lo, hi = hi, hi * 4.0
    if feasible is None:
        return None, "no plan under the memory limit found", None
    for i in range(14):  # narrow the price
        if time_limit is not None and time.perf_counter() - started > time_limit:
            break
        mid = (lo + hi) / 2.0
        found = penalised(mid)
        if found is None:
            break
        if found[1]:
            hi = mid
            value = cost(found[0])
            if value < feasible_cost:
                feasible, feasible_cost = found[0], value
        else:
            lo = mid
        say(f"memory price {mid:.3g} us/byte: best fitting {feasible_cost:.1f} us, bound {bound:.1f} us ({i + 1}/14)")
    gap = (feasible_cost - bound) / feasible_cost if feasible_cost > 0 else 0.0
    return feasible, "optimal" if gap <= 1e-9 else "feasible", bound


# -- baselines ------------------------------------------------------------------------------------
