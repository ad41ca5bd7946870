"""Mixing two answers of the memory search: the Lagrangian's duality gap filled.

The memory search (:mod:`~stratopt.planning.memory`) prices memory at one price per byte and solves
each price exactly, so it only ever returns answers that are optimal for some price: between the
last price whose answer breaks the limit (``lo``, fast) and the first whose answer fits (``hi``,
slower), a model of many identical layers jumps from "no layer recomputes" to "every layer does",
and the answer that fits may use a third of the memory there is. Taking some vertices' choices from
``lo`` and the rest from ``hi`` gives the answers in between:

- **components**: the vertices where the two differ, joined by the graph's edges. Switching one
  component from ``hi`` to ``lo`` changes its own node costs and the edges that touch it, whose
  other end is a vertex both answers agree on, so each component's change in cost and memory is
  exact and independent of the others': choosing which to switch is a 0/1 knapsack, solved
  greedily by cost saved per byte (components that save both are always taken);
- **cuts**: where one component spans the graph (the two answers lay the residual stream out
  differently), the first ``k`` vertices from one answer and the rest from the other, every ``k``
  priced incrementally in one sweep each way.

Every mixed answer is evaluated exactly; ``valid`` rejects those that break a rule the costs do not
encode (a plan that runs recomputes whole blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from stratopt.problem import StrategyProblem, evaluate

__all__ = ["mix", "mix_all"]

Assignment = tuple[int, ...]


def _used(memory: Sequence[np.ndarray], a: Sequence[int]) -> float:
    return float(sum(memory[v][c] for v, c in enumerate(a)))


def _components(
    problem: StrategyProblem, lo: Assignment, hi: Assignment, together: Sequence[Sequence[int]] = ()
) -> list[list[int]]:
    """The vertices where ``lo`` and ``hi`` differ, in the pieces the graph's edges (and the sets
    ``together``) join them into."""
    n = problem.num_vertices
    differ = np.fromiter((lo[v] != hi[v] for v in range(n)), dtype=bool, count=n)
    edges = np.asarray(problem.edges, dtype=np.int64).reshape(-1, 2)
    ties = [(int(s[0]), int(w)) for s in together if len(s) > 1 for w in s[1:]]
    if ties:
        edges = np.vstack([edges, np.asarray(ties, dtype=np.int64)])
    keep = differ[edges[:, 0]] & differ[edges[:, 1]] if len(edges) else np.zeros(0, dtype=bool)
    pairs = edges[keep]
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    found: dict[int, list[int]] = {}
    for v in np.flatnonzero(differ):
        found.setdefault(int(label[v]), []).append(int(v))
    return list(found.values())


def _incident(problem: StrategyProblem) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(problem.num_vertices)]
    for e, (u, w) in enumerate(problem.edges):
        out[int(u)].append(e)
        if w != u:
            out[int(w)].append(e)
    return out


def _switch_cost(problem: StrategyProblem, incident: list[list[int]], now: list[int], v: int, to: int) -> float:
    """The change in cost when vertex ``v`` moves from ``now[v]`` to ``to``, the rest as in ``now``."""
    before, delta = now[v], float(problem.node_cost(v)[to] - problem.node_cost(v)[now[v]])
    for e in incident[v]:
        u, w = (int(x) for x in problem.edges[e])
        table = problem.edge_cost(e)
        if u == v:
            delta += float(table[to, now[w]] - table[before, now[w]])
        else:
            delta += float(table[now[u], to] - table[now[u], before])
    return delta


def _by_components(
    problem: StrategyProblem,
    memory: Sequence[np.ndarray],
    room: float,
    lo: Assignment,
    hi: Assignment,
    incident: list[list[int]],
    together: Sequence[Sequence[int]],
) -> Assignment | None:
    """The knapsack over the components where ``lo`` and ``hi`` differ, greedy (``None``: fewer
    than two components, nothing to choose)."""
    parts = _components(problem, lo, hi, together)
    if len(parts) < 2:
        return None
    items = []
    for part in parts:
        now = list(hi)
        saved = 0.0
        for v in part:
            saved -= _switch_cost(problem, incident, now, v, lo[v])
            now[v] = lo[v]
        grows = float(sum(memory[v][lo[v]] - memory[v][hi[v]] for v in part))
        items.append((saved, grows, part))
    out = list(hi)
    for saved, grows, part in items:  # cheaper and no larger: always
        if saved >= 0.0 and grows <= 0.0:
            room -= grows
            for v in part:
                out[v] = lo[v]
    gains = sorted((i for i in items if i[0] > 0.0 and i[1] > 0.0), key=lambda i: -i[0] / i[1])
    for _saved, grows, part in gains:
        if grows <= room:
            room -= grows
            for v in part:
                out[v] = lo[v]
    return tuple(out)


def _by_cuts(
    problem: StrategyProblem,
    memory: Sequence[np.ndarray],
    limit: float,
    first: Assignment,
    then: Assignment,
    incident: list[list[int]],
) -> list[tuple[float, Assignment]]:
    """Every cut ``k``: vertices before ``k`` as ``first``, the rest as ``then``; those that fit, by
    the change in cost from ``then`` (cheapest first)."""
    now = list(then)
    delta, used = 0.0, _used(memory, then)
    fitting: list[tuple[float, int]] = []
    for v in range(problem.num_vertices):
        if first[v] != now[v]:
            delta += _switch_cost(problem, incident, now, v, first[v])
            used += float(memory[v][first[v]] - memory[v][now[v]])
            now[v] = first[v]
        if used <= limit:
            fitting.append((delta, v + 1))
    fitting.sort()
    return [(d, tuple(first[:k]) + tuple(then[k:])) for d, k in fitting[:16]]


def mix(
    problem: StrategyProblem,
    memory: Sequence[np.ndarray],
    limit: float,
    lo: Assignment,
    hi: Assignment,
    *,
    valid: Callable[[Assignment], bool] | None = None,
    together: Sequence[Sequence[int]] = (),
) -> Assignment:
    """The cheapest answer found by mixing ``lo`` (cheaper, may not fit) into ``hi`` (fits) whose
    summed ``memory`` stays within ``limit`` (``hi`` itself where no mix is better); ``valid``
    rejects mixes beside the limit, and the vertices of each set in ``together`` switch together
    (a checkpointed block's operators)."""
    incident = _incident(problem)
    candidates: list[Assignment] = []
    joined = _by_components(problem, memory, limit - _used(memory, hi), lo, hi, incident, together)
    if joined is not None:
        candidates.append(joined)
    for first, then in ((lo, hi), (hi, lo)):
        candidates.extend(a for _, a in _by_cuts(problem, memory, limit, first, then, incident))
    best, best_cost = hi, float(evaluate(problem, hi).objective)
    for a in candidates:
        cost = float(evaluate(problem, a).objective)
        better = cost < best_cost - 1e-9 * max(1.0, abs(best_cost)) and _used(memory, a) <= limit
        if better and (valid is None or valid(a)):
            best, best_cost = a, cost
    return best


def mix_all(
    problem: StrategyProblem,
    memory: Sequence[np.ndarray],
    limit: float,
    fitting: Assignment,
    others: Sequence[Assignment],
    *,
    valid: Callable[[Assignment], bool] | None = None,
    together: Sequence[Sequence[int]] = (),
) -> Assignment:
    """``fitting`` mixed with each of ``others`` in turn (the cheapest first), each mix starting from
    the best so far."""
    best = fitting
    ranked = sorted(set(others), key=lambda a: float(evaluate(problem, a).objective))
    for other in ranked:
        if other != best:
            best = mix(problem, memory, limit, other, best, valid=valid, together=together)
    return best
