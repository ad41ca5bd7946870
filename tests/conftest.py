"""Shared fixtures: random small problems and an independent evaluator."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from stratopt import StrategyProblem

settings.register_profile("default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")

#: The IOPDDL contest instances, beside the repository (absent on a bare clone).
IOPDDL_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "iopddl"

BIG = 10**18  # what contest files write for a forbidden entry


def needs_iopddl(name: str) -> Path:
    path = IOPDDL_DIR / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


@st.composite
def problems(draw, max_vertices: int = 5, max_choices: int = 3, usage: bool | None = None, forbidden: bool = True):
    """A small random StrategyProblem with parallel edges, ties, forbidden entries and usage."""
    n = draw(st.integers(1, max_vertices))
    ks = [draw(st.integers(1, max_choices)) for _ in range(n)]
    cost = st.integers(0, 30)
    entry = st.one_of(cost, st.just(BIG)) if forbidden else cost
    node = [[draw(st.one_of(cost, cost, cost, st.just(BIG)) if forbidden else cost) for _ in range(k)] for k in ks]
    edges, edge_costs = [], []
    if n > 1:
        for _ in range(draw(st.integers(0, n + 2))):
            u = draw(st.integers(0, n - 1))
            w = draw(st.integers(0, n - 2))
            v = w if w < u else w + 1
            edges.append((u, v))
            edge_costs.append([draw(st.one_of(cost, cost, cost, entry)) for _ in range(ks[u] * ks[v])])
    with_usage = draw(st.booleans()) if usage is None else usage
    kwargs = {}
    if with_usage:
        intervals = []
        for _ in range(n):
            s = draw(st.integers(0, 5))
            intervals.append([s, s + draw(st.integers(0, 4))])
        usages = [[draw(st.integers(0, 9)) for _ in range(k)] for k in ks]
        kwargs = {"intervals": intervals, "usages": usages, "usage_limit": draw(st.integers(0, 30))}
    return StrategyProblem(node, edges, edge_costs, **kwargs)


def reference_evaluate(problem: StrategyProblem, a) -> tuple[int, bool]:
    """Cost and feasibility recomputed from scratch with plain Python, time step by time step."""
    a = list(a)
    k = problem.num_choices.tolist()
    node = [problem.node_cost(v).tolist() for v in range(problem.num_vertices)]
    total = sum(node[v][a[v]] for v in range(len(a)))
    feasible = all(node[v][a[v]] < 10**17 for v in range(len(a)))
    for e, (u, v) in enumerate(problem.edges.tolist()):
        flat = problem.edge_cost(e).ravel().tolist()
        c = flat[a[u] * k[v] + a[v]]
        total += c
        feasible &= c < 10**17
    if problem.usage_limit is not None:
        iv = problem.intervals.tolist()
        for t in range(min(s for s, _ in iv), max(e for _, e in iv)):
            live = sum(problem.usage(v)[a[v]] for v in range(len(a)) if iv[v][0] <= t < iv[v][1])
            feasible &= bool(live <= problem.usage_limit)
    return total, feasible


def all_assignments(problem: StrategyProblem):
    return itertools.product(*(range(k) for k in problem.num_choices.tolist()))


def costs_times(problem: StrategyProblem, factor: float) -> StrategyProblem:
    """``problem`` with every allowed cost multiplied by ``factor`` (forbidden entries kept)."""
    node = [
        np.where(problem.node_cost(v) >= BIG, BIG, problem.node_cost(v) * factor) for v in range(problem.num_vertices)
    ]
    edge = [np.where(problem.edge_cost(e) >= BIG, BIG, problem.edge_cost(e) * factor) for e in range(problem.num_edges)]
    return problem.replace(node_costs=node, edge_costs=edge)
