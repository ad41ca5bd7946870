"""toulbar2 on the shared formulation: the problem as a weighted CSP (a cost function network).

The field's own representation of a pairwise cost network, and the encoding the IOPDDL contest's
winner solved: one variable per free vertex whose domain is its allowed choices, a unary cost
function per vertex, one binary cost function per (merged) edge, forbidden pairs at the hard cost
``top``, and, under a usage limit, one linear (knapsack) constraint per maximal clique of live
intervals. Costs are integers: float costs are scaled by a power of two and rounded as for CP-SAT,
and an optimum of rounded costs is reported FEASIBLE with ``Limit.PRECISION``.

toulbar2 is a single-threaded solver with global state; a run holds the process's toulbar2 for its
duration. With a time limit (whole seconds of CPU time, at least one) it is anytime: the best
assignment found and toulbar2's dual bound come back with ``Limit.TIME``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stratopt.errors import UnsupportedProblemError
from stratopt.problem import StrategyProblem, evaluate
from stratopt.solvers.base import Limit, Status
from stratopt.solvers.driver import Driven, Limits, Raw, decode_scaled
from stratopt.solvers.formulation import Formulation, build, integer_scale

__all__ = ["MAX_KNAPSACK_TERMS", "Wcsp", "WcspEncoding", "post_knapsack"]

#: Most usage-row terms handed to toulbar2 as knapsack constraints. IOPDDL B, G and V have 46k-99k
#: (toulbar2 proves B and G in seconds); S and P have 319M and 361M, and A's 20k rows took 19 GB
#: and more than six minutes before any search: such problems are refused at once.
MAX_KNAPSACK_TERMS = 5_000_000


@dataclass
class WcspEncoding:
    """The shared formulation, its integer scaling and the cost functions toulbar2 gets.

    ``unary[v]`` and ``binary`` (``(u, v, table)`` with forbidden pairs at ``top``) are integer
    costs over each free vertex's allowed choices (domain value i is choice
    ``formulation.choices[v][i]``); ``knapsacks`` are ``(terms, capacity)`` with terms
    ``(v, value index, usage)``; ``top`` is one more than the most any assignment of allowed
    entries can cost.
    """

    problem: StrategyProblem
    formulation: Formulation
    scale: float
    rounding_error: float
    unary: dict[int, list[int]]
    binary: list[tuple[int, int, list[int]]]
    knapsacks: list[tuple[list[tuple[int, int, int]], int]]
    top: int
    stats: dict[str, Any] = field(default_factory=dict)


class Wcsp(Driven):
    """The problem as a cost function network, solved by toulbar2 (exact without a time limit).

    OPTIMAL only when toulbar2's dual bound meets the cost it found (a proof), INFEASIBLE only when
    its search ends with nothing below the hard cost; the dual bound is reported as ``bound``.
    The hint (greedy's assignment by default) sets toulbar2's initial upper bound to its cost, so
    the search looks only for assignments at least as good.

    References
    ----------
    D. Allouche et al., "Tractability-preserving transformations of global cost functions",
    Artificial Intelligence 2016 (toulbar2); the IOPDDL contest's winning entry, "Soft Constraints,
    Strong Solutions" (ASPLOS 2025 IOPDDL), for this encoding of sharding problems.

    Examples
    --------
    >>> from stratopt import load_problem, solve
    >>> r = solve(load_problem("example"), "wcsp", seed=0)
    >>> r.status.value, r.assignment, r.objective, r.bound
    ('optimal', (0, 0, 2, 1, 0), 445, 445)
    """

    name = "wcsp"

    def build(self, problem: StrategyProblem) -> WcspEncoding:
        form = build(problem)
        if form.infeasible or form.num_x == 0:
            return WcspEncoding(problem, form, 1.0, 0.0, {}, [], [], 1, dict(form.stats, rounding_error=0.0))
        scale, error = integer_scale(problem, form)
        free = [v for v, cs in enumerate(form.choices) if len(cs)]
        unary = {v: np.round(form.costs[v] * scale).astype(np.int64) for v in free}
        position = {v: {c: i for i, c in enumerate(form.choices[v].tolist())} for v in free}
        tables = []
        for u, v, pairs, costs in form.edges:
            tables.append(
                (
                    u,
                    v,
                    [position[u][a] for a in pairs[:, 0].tolist()],
                    [position[v][b] for b in pairs[:, 1].tolist()],
                    np.round(costs * scale).astype(np.int64),
                )
            )
        # The hard cost: above the worst total of allowed entries, so a forbidden pair is never
        # part of an answer and no allowed assignment reaches it.
        worst = sum(int(np.abs(c).max()) for c in unary.values()) + sum(
            int(np.abs(t[4]).max()) for t in tables if len(t[4])
        )
        top = worst + 1
        binary = []
        for u, v, pu, pv, costs in tables:
            table = np.full((len(form.choices[u]), len(form.choices[v])), top, dtype=np.int64)
            table[pu, pv] = costs
            binary.append((u, v, table.ravel().tolist()))
        knapsacks = []
        if form.usages is not None and form.usage_rows:
            nonzero = np.array([int(np.count_nonzero(u)) for u in form.usages])
            terms_total = int(sum(nonzero[members].sum() for members, _ in form.usage_rows))
            if terms_total > MAX_KNAPSACK_TERMS:
                raise UnsupportedProblemError(
                    f"wcsp: the usage rows have {terms_total:,} terms in all, more than toulbar2's knapsack "
                    f"constraints take here ({MAX_KNAPSACK_TERMS:,}); use 'greedy', or 'mip-highs' for a bound"
                )
            if any((u != np.round(u)).any() for u in form.usages):
                raise UnsupportedProblemError(
                    "wcsp: toulbar2's knapsack rows need integer usages; use 'mip-highs' or 'cpsat'"
                )
            for members, room in form.usage_rows:
                terms = [(int(v), i, int(use)) for v in members.tolist() for i, use in enumerate(form.usages[v]) if use]
                knapsacks.append((terms, math.floor(room)))
        stats = dict(
            form.stats,
            variables=len(free),
            cost_functions=len(unary) + len(binary),
            knapsacks=len(knapsacks),
            scale=scale,
            rounding_error=error,
        )
        return WcspEncoding(
            problem, form, scale, error, {v: c.tolist() for v, c in unary.items()}, binary, knapsacks, top, stats
        )

    def run(self, encoding: WcspEncoding, limits: Limits) -> Raw:
        import pytoulbar2

        ub = encoding.top
        if limits.hint is not None:
            ub = min(ub, self._upper_bound(encoding, limits.hint))
        cfn = pytoulbar2.CFN(ubinit=ub, verbose=-1, seed=1 if limits.seed is None else int(limits.seed))
        # Process-wide options: complete search with hybrid best-first search (toulbar2's defaults,
        # whose dual bound meets the optimum at the end), whatever ran in this process before.
        cfn.Option.lds, cfn.Option.hbfs = 0, 1
        index: dict[int, int] = {}
        for v in encoding.unary:
            index[v] = len(index)
            cfn.AddVariable(f"x{v}", [f"c{c}" for c in encoding.formulation.choices[v].tolist()])
        for v, costs in encoding.unary.items():
            cfn.AddFunction([index[v]], costs)
        for u, v, table in encoding.binary:
            cfn.AddFunction([index[u], index[v]], table)
        for terms, room in encoding.knapsacks:
            post_knapsack(cfn, [(index[v], i, use) for v, i, use in terms], room)
        limit = 0 if limits.time_limit is None else max(1, math.floor(limits.time_limit))
        started = time.perf_counter()
        try:
            found = cfn.Solve(timeLimit=limit)
        finally:
            # toulbar2's time limit is a process-wide alarm that outlives a run that ends early;
            # left armed, it would interrupt the next network built in this process.
            cfn.CFN.timerStop()
        seconds = time.perf_counter() - started
        dual = cfn.GetDDualBound()
        stats = {"toulbar2_seconds": round(seconds, 3), "dual_bound": dual, "initial_ub": ub}
        if found is not None:
            values, cost, _ = found
            picked = {v: int(encoding.formulation.choices[v][values[index[v]]]) for v in encoding.unary}
            if dual >= cost:
                return Raw(Status.OPTIMAL, picked=picked, bound=cost, stats=stats)
            return Raw(Status.FEASIBLE, Limit.TIME, picked=picked, bound=dual, stats=stats)
        if dual >= ub and ub == encoding.top:
            return Raw(Status.INFEASIBLE, stats=stats)  # the search ended with nothing below the hard cost
        # Stopped by the time limit (or, with a hint, nothing better than the hint: the driver
        # then answers with the hint, and the bound says how good it is).
        return Raw(Status.NO_SOLUTION, Limit.TIME, bound=min(dual, ub - 1), stats=stats)

    @staticmethod
    def _upper_bound(encoding: WcspEncoding, hint: tuple[int, ...]) -> int:
        """An initial upper bound that keeps an assignment as good as the hint: its true cost less
        the presolve's constant, scaled, plus the most rounding can add, plus one (toulbar2 looks
        for costs strictly below it). The hint may use choices the presolve dropped as
        dominated; the reduced problem still holds an assignment no worse, which this bound keeps."""
        objective = float(evaluate(encoding.problem, hint).objective)
        scaled = (objective - encoding.formulation.constant + encoding.rounding_error) * encoding.scale
        return math.floor(scaled + 1e-9 * max(1.0, abs(scaled))) + 1

    def decode(self, encoding: WcspEncoding, raw: Raw) -> Raw:
        return decode_scaled(encoding.problem, encoding.formulation, raw, encoding.scale, encoding.rounding_error)


def post_knapsack(cfn: Any, terms: Sequence[tuple[int, int, int]], capacity: int) -> None:
    """Post ``sum of usage over the (variable, value, usage) terms taken <= capacity`` to a
    pytoulbar2 ``CFN`` as a knapsack constraint. pytoulbar2's ``AddGeneralizedLinearConstraint``
    scans every term once per variable of the row, which on IOPDDL K's rows of a few thousand
    vertices took minutes; this writes toulbar2's parameters (the negated row as ``>=``) in one pass."""
    by_var: dict[int, list[str]] = {}
    for var, value, use in terms:
        by_var.setdefault(int(var), []).extend((str(int(value)), str(-int(use))))
    parts = [str(-int(capacity))]
    for pairs in by_var.values():
        parts.append(str(len(pairs) // 2))
        parts.extend(pairs)
    cfn.CFN.wcsp.postKnapsackConstraint(list(by_var), " ".join(parts), kp=True)
