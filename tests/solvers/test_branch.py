"""Branch and cut on the reduced model (stratopt.solvers.lagrange.branch): the reduced problem
itself, so its optimum is the problem's; checked against brute force, and inside the search."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import Status, StrategyProblem, evaluate, load_problem, solve
from stratopt.solvers.lagrange import PenaltyModel
from stratopt.solvers.lagrange.branch import (
    BranchJob,
    branch_bound,
    fixed_by_reduced_cost,
    network_values,
)
from stratopt.solvers.lagrange.relaxation import lp_bound

from ..conftest import problems

pytest.importorskip("pytoulbar2")


def _branch(problem, known=None):
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    return model, branch_bound(model, start, end, BranchJob(60.0, known))


@settings(max_examples=60, deadline=None)
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


@settings(max_examples=30, deadline=None)
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


@settings(max_examples=60, deadline=None)
@given(problems(max_vertices=6, usage=True), st.sampled_from([0, 1, 25]))
def test_fixing_by_reduced_cost_keeps_the_optimum(problem, slack):
    """The relaxation's reduced costs fix columns at 0 against a ceiling (the optimum itself, or a
    cost above it): no column of brute force's optimum is ever fixed (it costs no more than the
    ceiling), and branch and cut on what is left proves the same optimum, its bound capped at the
    ceiling."""
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return
    model = PenaltyModel.build(problem)
    net = model.network
    if net is None or not len(net.k):
        return
    _, start, end = problem.time_slots
    lp = lp_bound(model, start, end, 60.0)
    if lp.bound is None or lp.reduced is None:
        return
    ceiling = float(exact.objective) + slack
    fix = fixed_by_reduced_cost(lp.reduced, lp.bound, ceiling)
    values = network_values(net, np.asarray(exact.assignment, dtype=np.int64))
    if values is not None:  # the optimum's own choices are never fixed
        assert not fix[net.node_off[:-1] + values].any()
    job = BranchJob(60.0, None, lp.reduced, lp.bound, ceiling)
    out = branch_bound(model, start, end, job)
    assert out.bound is not None
    assert out.bound <= exact.objective + 1e-6 * max(1.0, abs(exact.objective))
    assert out.bound >= exact.objective - 1e-6 * max(1.0, abs(exact.objective))
    if out.assignment is not None:
        assert evaluate(problem, out.assignment).objective == exact.objective


@pytest.mark.parametrize("seed", range(12))
def test_fixing_by_reduced_cost_on_grids_whose_networks_keep_their_edges(seed):
    """The same on 3 x 3 grids (the random problems above mostly reduce to nothing): the
    relaxation fixes some columns against the optimum's cost, never the optimum's own, and branch
    and cut on the rest proves brute force's optimum."""
    from .test_messages import grid

    problem = grid(seed)
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return
    model = PenaltyModel.build(problem)
    net = model.network
    assert net is not None and len(net.edges)
    _, start, end = problem.time_slots
    lp = lp_bound(model, start, end, 60.0)
    assert lp.bound is not None and lp.reduced is not None
    fix = fixed_by_reduced_cost(lp.reduced, lp.bound, float(exact.objective))
    values = network_values(net, np.asarray(exact.assignment, dtype=np.int64))
    if values is not None:
        assert not fix[net.node_off[:-1] + values].any()
    out = branch_bound(model, start, end, BranchJob(60.0, None, lp.reduced, lp.bound, float(exact.objective)))
    assert out.fixed == int(fix.sum())
    assert out.bound is not None and out.bound == pytest.approx(exact.objective, rel=1e-6)
    assert out.bound <= exact.objective
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


@pytest.mark.usefixtures("rows_not_kept")
def test_the_search_runs_branch_and_cut_after_the_relaxation_and_takes_its_answer_not_its_bound():
    """Where the relaxation leaves a gap, the search (under a time limit) runs branch and cut after
    it; its answer is brute force's optimum, HiGHS's claim of a bound is in the stats, and the
    result's bound stays a certified one (at most the optimum, not from branch and cut)."""
    problem = _knapsack()
    r = solve(problem, "lagrange", workers=2, time_limit=12)
    assert r.stats["lp"]["bound"] < 34
    branch = r.stats["branch"]
    assert branch["status"] == "Optimal" and branch["cost"] == 34
    assert branch["highs_bound"] == pytest.approx(34)
    assert solve(problem, "brute").objective == 34
    assert r.objective == 34 and r.bound is not None and r.bound <= 34
    assert "mip" not in (r.bound_method or "")


def test_no_branch_and_cut_when_asked_or_without_a_time_limit():
    problem = _knapsack()
    assert "branch" not in solve(problem, "lagrange", workers=2, time_limit=5, branch=False).stats
    assert "branch" not in solve(problem, "lagrange", workers=0, runs=3).stats


def test_the_closing_line_says_what_branch_and_cut_gave():
    """stratopt iopddl's closing line: the relaxation, then branch and cut's bound and answer in
    the file's units (the canonical form's times its scale) with HiGHS's claim of a bound, or why
    it did not run."""
    from stratopt.solvers.contest import _relaxation

    lp = {"status": "Optimal", "bound": 10.5, "seconds": 2.0, "columns": 100}
    branch = {"status": "Optimal", "highs_bound": 12.0, "cost": 12.0, "seconds": 3.5, "columns": 100}
    line = _relaxation({"lp": lp, "branch": branch}, scale=3)
    assert line == (
        "; relaxation: bound 31.5 (Optimal, 2.0 s, 100 columns); "
        "branch and cut: answer 36 (Optimal, HiGHS's bound 36 not taken, 3.5 s)"
    )
    skipped = _relaxation({"lp": {**lp, "branch": "not run: 100 columns at 1000/s need more than half the 0 s left"}})
    assert skipped.endswith("; branch and cut not run: 100 columns at 1000/s need more than half the 0 s left")
