"""The case bank: small problems whose optima are derived by hand (derivation beside each).

Every registered solver that is installed runs on every case in CI (``tests/test_harness.py``),
and brute force re-derives each optimum independently. Each case exercises one thing the
encodings must get right: ties, forbidden pairs, parallel edges, odd cycles, usage limits over
overlapping live intervals, infeasibility that no single vertex reveals, float costs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stratopt.instances import load_problem
from stratopt.problem import FORBIDDEN, Number, StrategyProblem

__all__ = ["CASES", "Case"]

F = FORBIDDEN  # a forbidden entry


@dataclass(frozen=True)
class Case:
    """A problem and its optimum (None when it is infeasible)."""

    name: str
    build: Callable[[], StrategyProblem]
    optimum: Number | None
    why: str


def _example() -> StrategyProblem:
    return load_problem("example")


CASES: tuple[Case, ...] = (
    Case(
        "iopddl-example",
        _example,
        445,
        "the contest's worked example: [0, 0, 2, 1, 0]; choice 1 of vertex 2 is cheaper but breaks the limit 50",
    ),
    Case(
        "single-vertex",
        lambda: StrategyProblem([[7, 3, 9]], [], []),
        3,
        "no edges: the cheapest choice",
    ),
    Case(
        "forbidden-node-choice",
        lambda: StrategyProblem([[F, 2], [0, 4]], [(0, 1)], [[[1, 1], [1, 0]]]),
        3,
        "vertex 0 must take choice 1; then (1, 0) costs 2 + 0 + 1 and (1, 1) costs 2 + 4 + 0",
    ),
    Case(
        "all-ties",
        lambda: StrategyProblem([[1, 1], [1, 1]], [(0, 1)], [[[2, 2], [2, 2]]]),
        4,
        "every assignment costs 1 + 1 + 2",
    ),
    Case(
        "forbidden-pairs",
        lambda: StrategyProblem([[0, 5], [0, 5], [0, 5]], [(0, 1), (1, 2)], [[[F, 1], [1, F]], [[F, 1], [1, F]]]),
        7,
        "neighbours must differ: (0, 1, 0) costs 5 + 1 + 1 = 7, (1, 0, 1) costs 10 + 2",
    ),
    Case(
        "parallel-edges",
        lambda: StrategyProblem([[0, 0], [0, 0]], [(0, 1), (1, 0)], [[[0, 4], [4, 1]], [[3, 0], [0, 3]]]),
        3,
        "the two edges sum to [[3, 4], [4, 4]] over (choice of 0, choice of 1)",
    ),
    Case(
        "odd-cycle",
        lambda: StrategyProblem([[0, 0]] * 3, [(0, 1), (1, 2), (2, 0)], [[[1, 0], [0, 1]]] * 3),
        1,
        "equal neighbours cost 1; a triangle cannot make all three pairs differ",
    ),
    Case(
        "usage-limit",
        lambda: StrategyProblem(
            [[1, 5], [1, 5]],
            [(0, 1)],
            [[[0, 0], [0, 0]]],
            intervals=[[0, 1], [0, 1]],
            usages=[[4, 1], [4, 1]],
            usage_limit=5,
        ),
        6,
        "both cheap choices use 8 > 5; one cheap and one light costs 1 + 5",
    ),
    Case(
        "usage-over-time",
        lambda: StrategyProblem(
            [[0, 3]] * 3,
            [],
            [],
            intervals=[[0, 2], [1, 3], [2, 4]],
            usages=[[5, 1]] * 3,
            usage_limit=6,
        ),
        3,
        "live sets {0, 1} and {1, 2}: vertex 1 light (3) lets 0 and 2 be cheap (5 + 1 <= 6 in each); "
        "summing all three at once would wrongly forbid that",
    ),
    Case(
        "infeasible-pair",
        lambda: StrategyProblem(
            [[0, 0], [0, 0]],
            [(0, 1)],
            [[[0, F], [F, 0]]],
            intervals=[[0, 1], [0, 1]],
            usages=[[3, 1], [1, 3]],
            usage_limit=3,
        ),
        None,
        "the edge forces equal choices and both pairs use 4 > 3, though each vertex alone fits",
    ),
    Case(
        "float-costs",
        lambda: StrategyProblem([[0.25, 1.5], [0.75, 0.1]], [(0, 1)], [[[0.0, 2.5], [2.5, 0.0]]]),
        1.0,
        "(0, 0) costs 0.25 + 0.75; (1, 1) costs 1.6; mixed pairs pay 2.5",
    ),
)
