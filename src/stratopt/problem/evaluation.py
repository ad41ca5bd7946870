"""Pricing an assignment exactly as the IOPDDL contest's evaluator does: integer sums, forbidden
entries, usage checked at every time step."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.problem.core import StrategyProblem
from stratopt.problem.numbers import INT64_SAFE, Number, exact_sum, forbidden_mask


@dataclass(frozen=True)
class Evaluation:
    """What an assignment costs and whether it is allowed.

    ``objective`` is the contest's sum of chosen node and edge costs (exact for integer problems,
    forbidden entries included as the numbers they are). ``feasible`` is False when a forbidden
    entry is chosen or the usage limit is exceeded at some time; ``violation`` then describes the
    first one (forbidden entries in file order first, then the earliest usage overflow).
    ``peak_usage`` is the highest live usage, or None without usages.
    """

    objective: Number
    feasible: bool
    violation: str | None
    peak_usage: Number | None

    def to_dict(self) -> dict[str, Any]:
        """The ``evaluate --json`` fields."""
        return {k: getattr(self, k) for k in ("objective", "feasible", "violation", "peak_usage")}


def check_assignment(problem: StrategyProblem, assignment: Iterable[int]) -> np.ndarray:
    """Validate an assignment (one choice index per vertex) and return it as an int64 array.

    Raises
    ------
    ModelError
        On a wrong length, a non-integer entry or a choice index out of range.
    """
    raw = assignment if isinstance(assignment, np.ndarray) else np.asarray(list(assignment), dtype=object)
    n = problem.num_vertices
    if raw.ndim != 1:
        raise ModelError(f"assignment must be a flat list of choice indices, got shape {raw.shape}")
    if len(raw) != n:
        raise ModelError(f"assignment has {len(raw)} entries, expected {n} (one per vertex)")
    if raw.dtype.kind in "iu":
        a = raw.astype(np.int64)
    else:
        a = np.empty(n, dtype=np.int64)
        for v, x in enumerate(raw.tolist()):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x):
                raise ModelError(f"assignment[{v}] = {x!r} is not a choice index")
            a[v] = int(x)
    bad = np.flatnonzero((a < 0) | (a >= problem.num_choices))
    if bad.size:
        v = int(bad[0])
        raise ModelError(
            f"assignment[{v}] = {a[v]} is out of range: vertex {problem.vertex_label(v)} "
            f"has {problem.num_choices[v]} choices (0..{problem.num_choices[v] - 1})"
        )
    return a


def usage_profile(problem: StrategyProblem, assignment: np.ndarray) -> np.ndarray:
    """Live usage in each slot of ``problem.time_slots`` (int64, or float for float usages)."""
    if problem.usage_flat is None:
        raise ModelError("the problem has no usages")
    _, start, end = problem.time_slots
    used = problem.usage_flat[problem.node_offsets[:-1] + assignment]
    diff = np.zeros(len(problem.time_slots[0]) + 1, dtype=used.dtype if used.dtype.kind == "f" else np.int64)
    if used.dtype.kind != "f" and used.size and int(used.max()) * used.size >= INT64_SAFE:
        diff = diff.astype(object)
    np.add.at(diff, start, used)
    np.add.at(diff, end, -used)
    return np.cumsum(diff[:-1])


def evaluate(problem: StrategyProblem, assignment: Iterable[int]) -> Evaluation:
    """Cost and feasibility of an assignment, following the IOPDDL contest's evaluation.

    Parameters
    ----------
    problem
        The problem.
    assignment
        One choice index per vertex, in vertex order.

    Returns
    -------
    Evaluation

    Raises
    ------
    ModelError
        If the assignment has the wrong length or an index out of range.

    References
    ----------
    ASPLOS 2025 / EuroSys 2025 Contest on Intra-Operator Parallelism for Distributed Deep
    Learning: evaluation sums node and edge costs and checks usage at every t in [start, end).

    Examples
    --------
    >>> p = StrategyProblem([[5, 1], [2, 2]], [(0, 1)], [[0, 3, 3, 0]],
    ...                     intervals=[[0, 2], [1, 3]], usages=[[1, 4], [1, 1]], usage_limit=4)
    >>> r = evaluate(p, [1, 0])
    >>> r.objective, r.feasible
    (6, False)
    >>> r.violation
    'usage 5 exceeds the limit 4 at time 1 (2 vertices live)'
    >>> evaluate(p, [0, 0]).feasible
    True
    """
    a = check_assignment(problem, assignment)
    node_picks = problem.node_flat[problem.node_offsets[:-1] + a]
    edges = problem.edges
    k = problem.num_choices
    edge_picks = problem.edge_flat[problem.edge_offsets[:-1] + a[edges[:, 0]] * k[edges[:, 1]] + a[edges[:, 1]]]
    objective = exact_sum(node_picks) + exact_sum(edge_picks)

    violation = None
    bad = np.flatnonzero(forbidden_mask(node_picks))
    if bad.size:
        v = int(bad[0])
        violation = f"vertex {problem.vertex_label(v)} choice {a[v]} is forbidden (cost {node_picks[v]})"
    else:
        bad = np.flatnonzero(forbidden_mask(edge_picks))
        if bad.size:
            e = int(bad[0])
            u, v = edges[e]
            violation = f"{problem.edge_label(e)} pair ({a[u]}, {a[v]}) is forbidden (cost {edge_picks[e]})"

    peak = None
    if problem.has_usage:
        profile = usage_profile(problem, a)
        peak = _plain(profile.max()) if profile.size else 0
        limit = problem.usage_limit
        if violation is None and limit is not None and peak > limit:
            slot = int(np.flatnonzero(profile > limit)[0])
            times, start, end = problem.time_slots
            live = int(np.count_nonzero((start <= slot) & (end > slot)))
            violation = (
                f"usage {_plain(profile[slot])} exceeds the limit {limit} at time {int(times[slot])} "
                f"({live} vertices live)"
            )
    return Evaluation(objective=objective, feasible=violation is None, violation=violation, peak_usage=peak)


def _plain(x: Any) -> Number:
    """A numpy scalar as a plain Python number."""
    return x.item() if hasattr(x, "item") else x
