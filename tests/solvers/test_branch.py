"""Branch and cut on the reduced model (stratopt.solvers.lagrange.branch): the reduced problem
itself, so its optimum is the problem's; checked against brute force, and inside the search."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from stratopt import Status, StrategyProblem, evaluate, load_problem, solve
from stratopt.solvers.lagrange import PenaltyModel
from stratopt.solvers.lagrange.branch import BRANCH_METHOD, BranchJob, branch_bound, network_values

from ..conftest import problems

pytest.importorskip("pytoulbar2")


def _branch(problem, known=None):
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    return model, branch_bound(model, start, end, BranchJob(60.0, known))


@settings(max_examples=120, deadline=None)
@given(problems(max_vertices=6, usage=True))
def test_branch_and_cut_finds_the_optimum_brute_force_finds(problem):
    """With forbidden entries, parallel edges and usage limits: where brute force finds an
    optimum, branch and cut proves the same cost, its answer (lifted to the problem and
    recomputed) costs exactly that and keeps the limit, and its bound is at most it; where none
    keeps the limit, branch and cut finds no answer."""
    exact = solve(problem, "brute")
    model, out = _branch(problem)
    if model.network is None or not len(model.network.k):
        return
    if exact.status is not Status.OPTIMAL:
        assert out.assignment is None or not evaluate(problem, out.assignment).feasible
        return
    if out.status == "nothing to branch on":
        return
    assert out.status == "Optimal"
    assert out.assignment is not None
    ev = evaluate(problem, out.assignment)
    assert ev.feasible and ev.objective == exact.objective
    assert out.bound is not None
    assert out.bound <= exact.objective + 1e-6 * max(1.0, abs(exact.objective))
    assert out.bound >= exact.objective - 1e-6 * max(1.0, abs(exact.objective))


@settings(max_examples=60, deadline=None)
@given(problems(max_vertices=6, usage=True))
def test_a_start_from_the_optimum_changes_nothing_and_maps_back(problem):
    """The optimum handed in as the start: its network values lift back to an assignment that
    costs no more, and branch and cut ends at the same cost."""
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return
    model = PenaltyModel.build(problem)
    net = model.network
    if net is None or not len(net.k):
        return
    known = np.asarray(exact.assignment, dtype=np.int64)
    values = network_values(net, known)
    if values is not None:
        lifted = evaluate(problem, net.lift(values))
        assert lifted.objective <= exact.objective or not lifted.feasible
    _, out = _branch(problem, known)
    if out.assignment is not None:
        assert evaluate(problem, out.assignment).objective == exact.objective


def test_a_choice_the_reductions_removed_gives_no_start():
    """An assignment that picks a choice no network vertex kept maps to no network values."""
    problem = load_problem("../shared/iopddl/asplos-2025-iopddl-G.json.gz")
    net = PenaltyModel.build(problem).network
    assert net is not None
    removed = next((i, v) for i, v in enumerate(net.free) if len(net.open[i]) < problem.num_choices[v])
    a = np.zeros(problem.num_vertices, dtype=np.int64)
    i, v = removed
    a[v] = int(np.setdiff1d(np.arange(problem.num_choices[v]), net.open[i])[0])
    assert network_values(net, a) is None


def _knapsack() -> StrategyProblem:
    """Four vertices live together, each either cheap and large (usage 10) or dear and small, the
    limit room for one large one: the relaxation takes halves (bound 28), the optimum 34 does not."""
    n = 4
    return StrategyProblem(
        [[0, 10 + i] for i in range(n)],
        [(0, 1), (1, 2), (2, 3)],
        [[0, 1, 1, 0]] * 3,
        intervals=[[0, 3]] * n,
        usages=[[10, 0]] * n,
        usage_limit=15,
    )


def test_the_search_runs_branch_and_cut_after_the_relaxation_and_takes_its_proof():
    """Where the relaxation leaves a gap, the search (under a time limit) runs branch and cut after
    it, which proves brute force's optimum; the result's bound names branch and cut and equals its
    answer's cost, and the search stops there (no further runs once the bound meets the answer:
    the result's limit is not the time's)."""
    problem = _knapsack()
    r = solve(problem, "lagrange", workers=2, time_limit=60)
    assert r.stats["lp"]["bound"] < 34
    assert r.stats["branch"]["status"] == "Optimal"
    assert solve(problem, "brute").objective == 34
    assert r.objective == 34 and r.bound == 34
    assert r.bound_method == BRANCH_METHOD
    assert r.status is Status.FEASIBLE and r.gap == 0.0
    assert r.limit is not None and r.limit.value != "time"


def test_no_branch_and_cut_when_asked_or_without_a_time_limit():
    problem = _knapsack()
    assert "branch" not in solve(problem, "lagrange", workers=2, time_limit=5, branch=False).stats
    assert "branch" not in solve(problem, "lagrange", workers=0, runs=3).stats


def test_the_closing_line_says_what_branch_and_cut_gave():
    """stratopt iopddl's closing line: the relaxation, then branch and cut's bound and answer in
    the file's units (the canonical form's times its scale), or why it did not run."""
    from stratopt.solvers.contest import _relaxation

    lp = {"status": "Optimal", "bound": 10.5, "seconds": 2.0, "columns": 100}
    branch = {"status": "Optimal", "bound": 12.0, "cost": 12.0, "seconds": 3.5, "columns": 100}
    line = _relaxation({"lp": lp, "branch": branch}, scale=3)
    assert line == (
        "; relaxation: bound 31.5 (Optimal, 2.0 s, 100 columns); branch and cut: bound 36, answer 36 (Optimal, 3.5 s)"
    )
    skipped = _relaxation({"lp": {**lp, "branch": "not run: 100 columns at 1000/s need more than half the 0 s left"}})
    assert skipped.endswith("; branch and cut not run: 100 columns at 1000/s need more than half the 0 s left")
