"""The solver contract: Result invariants, solve()'s checks, the registry."""

from __future__ import annotations

import dataclasses

import pytest

from stratopt import (
    Limit,
    ModelError,
    Result,
    Solver,
    SolverError,
    SolverUnavailableError,
    Status,
    StratoptError,
    available,
    load_problem,
    solve,
)
from stratopt.solvers import registry


@dataclasses.dataclass
class Fake:
    """A solver that returns a fixed answer, to check what solve() does with it."""

    answer: Result
    name: str = "fake"
    exact: bool = True

    def solve(self, problem, *, time_limit=None, seed=None):
        return self.answer


def test_fake_meets_protocol():
    """Any object with name, exact and solve() is a Solver."""
    assert isinstance(Fake(Result("fake", Status.INFEASIBLE)), Solver)


def test_objective_is_recomputed():
    """solve() ignores the objective a solver reports and recomputes it."""
    p = load_problem("example")
    r = solve(p, Fake(Result("fake", Status.OPTIMAL, assignment=(0, 0, 2, 1, 0), objective=1)))
    assert r.objective == 445 and r.bound == 445 and r.status is Status.OPTIMAL


def test_infeasible_answer_becomes_error():
    """An assignment called feasible that breaks the usage limit turns the status into ERROR."""
    p = load_problem("example")
    answer = Result("fake", Status.FEASIBLE, assignment=(0, 0, 1, 1, 0), limit=Limit.HEURISTIC)
    r = solve(p, Fake(answer))
    assert r.status is Status.ERROR and "usage 55 exceeds the limit 50" in r.stats["error"]
    assert r.limit is None and r.objective == 415


def test_bound_above_objective_is_error():
    """A claimed bound above the recomputed objective is an error, not an optimum."""
    p = load_problem("example")
    r = solve(p, Fake(Result("fake", Status.OPTIMAL, assignment=(0, 0, 2, 1, 0), bound=500)))
    assert r.status is Status.ERROR and "bound 500 exceeds" in r.stats["error"]


def test_heuristic_cannot_claim_optimal():
    """A solver that is not exact may not report OPTIMAL."""
    p = load_problem("example")
    r = solve(p, Fake(Result("fake", Status.OPTIMAL, assignment=(0, 0, 2, 1, 0)), exact=False))
    assert r.status is Status.ERROR


@pytest.mark.parametrize("status", list(Status))
def test_limit_is_set_exactly_for_feasible_and_no_solution(status):
    """Result refuses a limit on a final status and demands one on FEASIBLE / NO_SOLUTION (a
    SolverError: a solver broke the contract)."""
    answer = None if status in (Status.INFEASIBLE, Status.NO_SOLUTION, Status.ERROR) else (0,)
    needs = status in (Status.FEASIBLE, Status.NO_SOLUTION)
    with pytest.raises(SolverError):
        Result("x", status, assignment=answer, limit=None if needs else Limit.TIME)
    Result("x", status, assignment=answer, limit=Limit.TIME if needs else None)


def test_results_are_frozen():
    """Result is immutable."""
    r = Result("x", Status.INFEASIBLE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.status = Status.OPTIMAL


def test_registry():
    """Every registered solver is listed, importable here, and unknown names are refused."""
    assert set(registry.names()) >= {"brute", "dp", "greedy"}
    assert set(available()) == set(registry.names())
    with pytest.raises(SolverUnavailableError, match="unknown solver 'nope'"):
        solve(load_problem("example"), "nope")


def test_options_need_a_named_solver():
    """Solver-specific options are refused with solver='auto', as a library error (not TypeError)."""
    with pytest.raises(StratoptError, match="need a named solver"):
        solve(load_problem("example"), max_strategies=5)


def test_bad_time_limit():
    """A non-positive time limit is bad input."""
    with pytest.raises(ModelError, match="time_limit must be a positive number"):
        solve(load_problem("example"), "brute", time_limit=0)


def test_auto_prefers_the_exact_dp():
    """'auto' answers with the DP when its optimum stands, and with brute under a binding limit."""
    assert solve(load_problem("example").replace(usage_limit=None)).solver == "dp"
    r = solve(load_problem("example"))
    assert r.solver == "brute" and r.objective == 445 and "breaks the usage limit" in r.stats["auto"]


def test_json_keys_match_the_contract():
    """to_dict() has the keys DESIGN section 7 promises."""
    d = solve(load_problem("example"), "brute").to_dict("example")
    assert set(d) >= {"instance", "solver", "status", "objective", "bound", "assignment", "wall_time", "stats"}
    assert d["gap"] == 0.0 and d["bound_method"].startswith("brute: enumeration")
    assert d["status"] == "optimal" and d["assignment"] == [0, 0, 2, 1, 0]


def test_a_feasible_answer_names_the_bound_it_carries():
    """Greedy proves nothing (no bound, no gap); a result whose bound came from another run names
    that run, and the gap is (cost - bound) / cost."""
    r = solve(load_problem("example"), "greedy")
    assert r.to_dict()["bound"] is None and r.gap is None and r.bound_method is None
    lower = Result(
        "greedy", Status.FEASIBLE, (0, 0, 2, 1, 0), 445, 400, Limit.HEURISTIC, stats={"bound_method": "dp: x"}
    )
    assert lower.gap == pytest.approx(45 / 445) and lower.to_dict()["bound_method"] == "dp: x"
