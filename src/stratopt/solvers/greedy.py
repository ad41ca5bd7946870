"""A fast usage-aware heuristic: propagating construction, exact block descent, priced repair, DP windows."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.problem import FORBIDDEN, StrategyProblem
from stratopt.solvers.base import Limit, Result, Status
from stratopt.solvers.local_search import FORBIDDEN_COST, Domains, InducedForest, LocalEngine
from stratopt.solvers.window_search import WindowSearch

__all__ = ["Greedy"]


class Greedy:
    """Greedy start plus exact block descent, made to respect the usage limit.

    0. Arc consistency over the forbidden entries prunes choices that no allowed assignment
       uses; a wiped-out domain proves infeasibility.
    1. A forward-checking construction gives every vertex its cheapest choice given its assigned
       neighbours, keeping all domains non-empty. Then, until nothing improves: best-response
       descent by colour class, and exact min-sum DP over a few vertex sets that induce forests
       (everything else fixed). Both are block-coordinate steps: the cost never rises.
    2. While the live usage exceeds the limit somewhere, the over-full time slots get a price
       per unit of usage, raised geometrically each round, and one pass of step 1's descent
       re-runs on the priced costs.
    3. Descent on the true costs, taking only steps that keep the usage within the limit.
    4. Only when a time limit is given: until it runs out, windows of vertices around random
       vertices are re-solved exactly by the DP with the rest fixed (large-neighbourhood
       search), keeping each change that lowers the cost and keeps the limit.

    If arc consistency empties a domain, or every vertex at its least-usage choice still exceeds
    the limit, no assignment can be feasible and the status is INFEASIBLE (a proof). Otherwise the result is FEASIBLE (no proof of
    optimality) or NO_SOLUTION when no feasible assignment was reached.

    Examples
    --------
    >>> from stratopt import load_problem, solve
    >>> r = solve(load_problem("example"), "greedy", seed=0)
    >>> r.status.value, r.limit.value, r.objective, r.bound is None
    ('feasible', 'heuristic', 445, True)
    """

    name = "greedy"
    exact = False

    def solve(
        self,
        problem: StrategyProblem,
        *,
        time_limit: float | None = None,
        seed: int | None = None,
        forests: int = 4,
        max_rounds: int = 60,
        growth: float = 3.0,
        progress: Callable[[str], None] | None = None,
        incumbent: Callable[[tuple[int, ...]], None] | None = None,
    ) -> Result:
        t0 = time.perf_counter()
        deadline = None if time_limit is None else t0 + time_limit

        def out_of_time() -> bool:
            return deadline is not None and time.perf_counter() > deadline

        def say(msg: str) -> None:
            if progress is not None:
                progress(f"[greedy {time.perf_counter() - t0:6.1f}s] {msg}")

        engine = LocalEngine(problem)
        stats: dict[str, Any] = {"colour_classes": len(engine.classes)}
        limit = problem.usage_limit
        domains = Domains(problem)
        if not domains.propagate(list(domains.allowed)):
            stats["proof"] = "arc consistency empties a domain: every assignment uses a forbidden entry"
            return Result(self.name, Status.INFEASIBLE, stats=stats)
        # Choices that arc consistency removed can never be part of an allowed assignment.
        engine.node[~domains.alive] = FORBIDDEN_COST
        stats["pruned_choices"] = int((~domains.alive).sum() - (problem.node_flat >= FORBIDDEN).sum())
        if engine.has_limit:
            floor = engine.profile(engine.min_usage_start())
            if floor.size and floor.max() > limit:
                stats["least_usage_peak"] = floor.max().item()
                stats["proof"] = "every vertex at its least usage still exceeds the limit"
                return Result(self.name, Status.INFEASIBLE, stats=stats)

        # seed=None means seed 0: the same problem always gets the same answer.
        rng = np.random.default_rng(0 if seed is None else seed)
        degree = np.bincount(problem.edges.ravel(), minlength=engine.n)
        # Hubs first: a hub whose edges only allow matching choices can move only together with
        # its whole star, which a forest grown from the hub contains.
        orders = [np.argsort(-degree, kind="stable"), np.arange(engine.n), np.arange(engine.n)[::-1]]
        orders += [np.argsort(-degree + rng.random(engine.n) * 2) for _ in range(max(0, forests - 3))]
        blocks = [InducedForest(engine, order) for order in orders[:forests]]
        stats["forest_coverage"] = [round(float(b.inside.mean()), 3) for b in blocks]
        say(f"{engine.n} vertices, {len(engine.classes)} colour classes, forests cover {stats['forest_coverage']}")

        def improve(
            a: np.ndarray, penalty: np.ndarray | None = None, guard: bool = False, passes: int = 1000
        ) -> np.ndarray:
            for _ in range(passes):
                if out_of_time():
                    break
                changed = False
                for block in blocks:
                    new, gain = block.step(a, penalty)
                    if gain > 0 and (not guard or engine.profile(new).max() <= limit):
                        a, changed = new, True
                    if out_of_time():
                        break
                a, _, moves = engine.descend(a, penalty=penalty, guard=guard, deadline_check=out_of_time)
                if not changed and moves == 0:
                    break
            return a

        a = improve(domains.construct(engine, np.arange(engine.n)))
        stats["unconstrained_cost"] = engine.total_cost(a)
        say(f"cost ignoring usage: {stats['unconstrained_cost']:.6g}")
        if engine.has_limit:
            profile = engine.profile(a)
            price = np.zeros(engine.num_slots)
            # The first price is a small fraction of the average cost per unit of usage.
            unit = max(stats["unconstrained_cost"] % FORBIDDEN, 1.0) / max(float(profile.sum()), 1.0) * 1e-3
            rounds = 0
            while profile.max() > limit and rounds < max_rounds and not out_of_time():
                rounds += 1
                over = profile > limit
                price[over] = np.maximum(price[over] * growth, unit)
                a = improve(a, engine.vertex_penalty(price), passes=1)
                profile = engine.profile(a)
                say(f"round {rounds}: peak usage {profile.max()} (limit {limit}), cost {engine.total_cost(a):.6g}")
            stats["penalty_rounds"] = rounds
            if profile.max() > limit:
                stats["peak_usage"] = profile.max().item()
                why = Limit.TIME if out_of_time() else Limit.ITERATION
                return Result(self.name, Status.NO_SOLUTION, limit=why, stats=stats)
        a = improve(a, guard=True)
        cost = engine.total_cost(a)
        if incumbent is not None and cost < FORBIDDEN:
            incumbent(tuple(a.tolist()))  # before it is reported, so a listener can rely on it
        say(f"descent done: cost {cost:.6g}")
        if deadline is not None and cost < FORBIDDEN:
            # Prices one or two rounds below the last steer windows best (measured on B and G).
            penalty = engine.vertex_penalty(price / growth**2) if engine.has_limit else None
            a, cost = self._windows(engine, a, cost, rng, out_of_time, say, stats, penalty, incumbent)
        if cost >= FORBIDDEN:
            return Result(self.name, Status.NO_SOLUTION, limit=Limit.HEURISTIC, stats=stats)
        why = Limit.TIME if out_of_time() else Limit.HEURISTIC
        return Result(self.name, Status.FEASIBLE, assignment=tuple(a.tolist()), limit=why, stats=stats)

    @staticmethod
    def _windows(
        engine: LocalEngine,
        a: np.ndarray,
        cost: float,
        rng: np.random.Generator,
        out_of_time: Callable[[], bool],
        say: Callable[[str], None],
        stats: dict[str, Any],
        penalty: np.ndarray | None,
        incumbent: Callable[[tuple[int, ...]], None] | None = None,
    ) -> tuple[np.ndarray, float]:
        """Step 4, only with a time limit: exact DP window moves until the time is up; the best
        assignment goes to ``incumbent`` at every progress report (every 5 s)."""
        limit = engine.problem.usage_limit

        def fits(candidate: np.ndarray) -> bool:
            return not engine.has_limit or engine.profile(candidate).max() <= limit

        search = WindowSearch(engine, rng)
        start_cost = cost
        next_report = time.perf_counter() + 5.0
        while not out_of_time():
            a, cost = search.step(a, cost, fits, penalty)
            if time.perf_counter() > next_report:
                if incumbent is not None:
                    incumbent(tuple(a.tolist()))
                say(f"windows: {search.tried} tried, {search.improved} improved, size {search.size}, cost {cost:.6g}")
                next_report += 5.0
        stats["windows"] = {"tried": search.tried, "improved": search.improved, "refused": search.refused}
        say(f"windows lowered the cost from {start_cost:.6g} to {cost:.6g}")
        return a, cost
