"""The memory search's mixes (``stratopt.planning.mixing``): what the Lagrangian's jumps leave between
two answers, filled by taking some vertices' choices from one and the rest from the other; every
mix fits, is priced exactly and never costs more than the answer it starts from."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from stratopt.instances import load_instance
from stratopt.planning.cluster import cluster, price
from stratopt.planning.memory import solve_under_memory, under_memory
from stratopt.planning.mixing import _components, mix, mix_all
from stratopt.planning.recompute import keeping
from stratopt.problem import StrategyProblem, evaluate


def _layers(n: int, rng: np.random.Generator | None = None) -> tuple[StrategyProblem, list[np.ndarray]]:
    """``n`` layers in a chain, each a pair (stream, work): the stream vertex has one choice, each
    work vertex a fast choice that holds 3 units of memory and a lean one that holds 1 and costs
    more (the same in every layer unless ``rng`` varies them)."""
    node, memory, edges = [], [], []
    for i in range(n):
        slow = 5.0 + (rng.uniform(0, 2) if rng is not None else 0.0)
        node += [np.array([0.0]), np.array([1.0, slow])]
        memory += [np.array([0.0]), np.array([3.0, 1.0])]
        edges.append(((2 * i, 2 * i + 1), np.zeros((1, 2))))
        if i:
            edges.append(((2 * i - 2, 2 * i), np.zeros((1, 1))))
    return StrategyProblem(node, [e for e, _ in edges], [m for _, m in edges]), memory


def _brute(problem: StrategyProblem, memory: list[np.ndarray], limit: float) -> float:
    best = math.inf
    for a in itertools.product(*(range(len(m)) for m in memory)):
        if sum(memory[v][c] for v, c in enumerate(a)) <= limit:
            best = min(best, float(evaluate(problem, a).objective))
    return best


def test_identical_layers_fill_the_memory_the_lagrangian_leaves() -> None:
    """Eight identical layers: every price answers all fast or all lean, so the bisection alone
    ends with all lean (cost 48, 8 units of 14); the mixes keep three layers fast, the optimum."""
    problem, memory = _layers(8)
    base = [np.asarray(c, dtype=np.float64) for c in problem.node_costs]
    limit = 14.0
    found, status, bound = under_memory(problem, base, memory, limit, 60, lambda _m: None)
    assert found is not None
    used = sum(memory[v][c] for v, c in enumerate(found))
    cost = float(evaluate(problem, found).objective)
    assert used <= limit
    assert cost == pytest.approx(_brute(problem, memory, limit)) == pytest.approx(3 * 1.0 + 5 * 5.0)
    assert bound is not None and bound <= cost + 1e-9 and status == "feasible"


@pytest.mark.parametrize("seed", range(6))
def test_a_mix_fits_never_costs_more_and_is_never_below_the_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    problem, memory = _layers(5, rng)
    fast = tuple(0 for _ in memory)
    lean = tuple(1 if len(m) > 1 else 0 for m in memory)
    limit = float(rng.uniform(6, 14))
    mixed = mix(problem, memory, limit, fast, lean)
    used = sum(memory[v][c] for v, c in enumerate(mixed))
    cost = float(evaluate(problem, mixed).objective)
    assert used <= limit
    assert cost <= float(evaluate(problem, lean).objective) + 1e-9
    assert cost >= _brute(problem, memory, limit) - 1e-9


def test_vertices_held_together_switch_together_and_valid_rejects() -> None:
    """Layers 0 and 1 tied: with room for one fast layer only, the pair cannot switch and layer 2
    does; a ``valid`` that refuses every mix leaves the answer as it was."""
    problem, memory = _layers(3)
    fast, lean = (0, 0, 0, 0, 0, 0), (0, 1, 0, 1, 0, 1)
    tied = mix(problem, memory, 5.0, fast, lean, together=[(1, 3)])
    assert tied == (0, 1, 0, 1, 0, 0) or tied == (0, 1, 0, 1, 0, 1)
    assert tied[1] == tied[3]
    assert mix(problem, memory, 5.0, fast, lean, valid=lambda _a: False) == lean


def test_mix_all_takes_the_cheapest_other_first_and_keeps_fitting() -> None:
    problem, memory = _layers(4)
    lean = (0, 1, 0, 1, 0, 1, 0, 1)
    others = [(0, 0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 1, 0, 1, 0, 1)]
    best = mix_all(problem, memory, 8.0, lean, others)
    assert sum(memory[v][c] for v, c in enumerate(best)) <= 8.0
    assert float(evaluate(problem, best).objective) == pytest.approx(_brute(problem, memory, 8.0))


def test_recomputing_operators_get_their_outputs_back_where_memory_is_left() -> None:
    """The memory search on GPT's shape with recomputation offered, under a limit 80% of the way
    from the least memory to what the fastest strategy needs: in its answer, no piece of
    recomputing operators (joined by edges) could keep its outputs again, still fit and cost less
    (without the companion mix, 24 such pieces were left)."""
    where = cluster(1, 4, "h100")
    costing = price(load_instance("gpt"), where.devices, where.machine, recompute=True)
    memory = [np.asarray(c.memory, dtype=np.float64) for c in costing.vertex_costs]
    least = sum(float(m.min()) for m in memory)
    free, _, _ = solve_under_memory(costing, math.inf, 60, lambda _m: None)
    assert free is not None
    limit = least + 0.8 * (sum(float(m[c]) for m, c in zip(memory, free, strict=True)) - least)
    found, _, bound = solve_under_memory(costing, limit, 60, lambda _m: None)
    assert found is not None and bound is not None
    used = sum(float(m[c]) for m, c in zip(memory, found, strict=True))
    cost = float(evaluate(costing.problem, found).objective)
    assert used <= limit and cost >= bound - 1e-6
    kept = keeping(costing, found)
    for piece in _components(costing.problem, kept, found):
        other = list(found)
        for v in piece:
            other[v] = kept[v]
        grows = sum(float(memory[v][kept[v]] - memory[v][found[v]]) for v in piece)
        saves = cost - float(evaluate(costing.problem, other).objective)
        assert saves <= 1e-9 * cost or used + grows > limit
