"""The cheapest strategy under a memory limit: the DP's optimum when it fits, else a Lagrangian
bisection on one price per byte, each step solved exactly, which also gives a lower bound."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from stratopt.planning.mixing import mix, mix_all
from stratopt.planning.recompute import keeping
from stratopt.planning.twins import Twins
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
    one price per byte, each step an exact DP (on one choice per split: :class:`Twins`); the bound is
    the best dual value. Where the costing offers recomputation, the answer's recomputing operators
    keep their outputs again as far as the memory left holds (:func:`~stratopt.planning.recompute.keeping`
    as the mixes' companion)."""
    base = [np.asarray(n, dtype=np.float64) for n in costing.node_costs()]
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    companion = partial(keeping, costing) if costing.recomputed else None
    twins = Twins(costing.problem, costing.configs)

    def oracle(price: float) -> tuple[tuple[int, ...], float] | None:
        return twins.solve([b + price * m for b, m in zip(base, memory, strict=True)], time_limit)

    return under_memory(costing.problem, base, memory, limit, time_limit, say, oracle=oracle, companion=companion)


def under_memory(
    problem: StrategyProblem,
    base: list[np.ndarray],
    memory: list[np.ndarray],
    limit: float,
    time_limit: float | None,
    say: Callable[[str], None],
    *,
    oracle: Callable[[float], tuple[tuple[int, ...], float] | None] | None = None,
    valid: Callable[[tuple[int, ...]], bool] | None = None,
    together: Sequence[Sequence[int]] = (),
    companion: Callable[[tuple[int, ...]], tuple[int, ...]] | None = None,
    judge: StrategyProblem | None = None,
) -> tuple[tuple[int, ...] | None, str, float | None]:
    """The least-cost assignment of ``problem`` (node costs ``base``) whose summed per-vertex
    ``memory`` stays within ``limit``, as :func:`solve_under_memory` finds it: (assignment, status,
    lower bound). ``oracle(price)``, when given, is the exact optimum (assignment, value) of the
    costs ``base + price * memory`` (default: the DP on ``problem`` with those node costs).

    The answers that break the limit are then mixed into the one that fits (:func:`mix_all`):
    between two prices, the Lagrangian's answers jump (no layer recomputes, then all), and the mixes
    fill the memory in between; ``valid`` rejects mixes the costs do not rule out, the vertices of
    each set in ``together`` switch together. ``companion(a)``, when given, is one more answer to mix
    into each (the same strategy recomputing nothing), before the others and after them, the
    cheaper kept; ``judge`` prices the mixes where they may leave ``problem``'s costs (its
    forbidden entries a mask the companion lifts; default ``problem``)."""
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
    over: list[tuple[int, ...]] = [best]  # the answers that break the limit, to mix into one that fits

    def penalised(price: float) -> tuple[tuple[int, ...], bool] | None:
        """The exact optimum with memory at ``price`` microseconds per byte, and whether it fits;
        its Lagrangian dual value raises the bound."""
        nonlocal bound
        step = exact(price)
        if step is None:
            return None
        a, value = step
        bound = max(bound, value - price * limit)
        if used(a) > limit:
            over.append(a)
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
    mixed = _mixed(judge or problem, memory, limit, feasible, over[-4:], valid, together, companion)
    if mixed != feasible:
        feasible, feasible_cost = mixed, float(evaluate(judge or problem, mixed).objective)
        say(f"mixed with the answers that break the limit: {feasible_cost:.1f} us, bound {bound:.1f} us")
    gap = (feasible_cost - bound) / feasible_cost if feasible_cost > 0 else 0.0
    return feasible, "optimal" if gap <= 1e-9 else "feasible", bound


def _mixed(
    judge: StrategyProblem,
    memory: list[np.ndarray],
    limit: float,
    fitting: tuple[int, ...],
    over: list[tuple[int, ...]],
    valid: Callable[[tuple[int, ...]], bool] | None,
    together: Sequence[Sequence[int]],
    companion: Callable[[tuple[int, ...]], tuple[int, ...]] | None,
) -> tuple[int, ...]:
    """``fitting`` with ``over`` mixed into it, and the companion's mix before and after them
    (:func:`under_memory`): the cheapest by ``judge``'s costs."""
    rules: dict[str, Any] = {"valid": valid, "together": together}
    answers = [mix_all(judge, memory, limit, fitting, over, **rules)]
    if companion is not None:
        first = mix(judge, memory, limit, companion(fitting), fitting, **rules)
        answers.append(mix_all(judge, memory, limit, first, over, **rules))
        answers.append(mix(judge, memory, limit, companion(answers[0]), answers[0], **rules))
    return min(answers, key=lambda a: float(evaluate(judge, a).objective))


# -- baselines ------------------------------------------------------------------------------------
