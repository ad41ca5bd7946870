"""The linear relaxation's bound (stratopt.solvers.lagrange.relaxation): a lower bound by
construction, checked against brute force and the MIP, whatever duals certify it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import Status, load_problem, solve
from stratopt.errors import ModelError
from stratopt.solvers.lagrange import PenaltyModel
from stratopt.solvers.lagrange.relaxation import LP_METHOD, Relaxation, certified_bound, lp_bound

from ..conftest import costs_times, problems

pytest.importorskip("pytoulbar2")


def _bound(problem):
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    return model, lp_bound(model, start, end, 60.0)


def _slack(value: float) -> float:
    return 1e-6 * max(1.0, abs(value))


@settings(max_examples=150, deadline=None)
@given(problems(max_vertices=6, usage=True))
def test_the_relaxation_bounds_the_optimum_from_below(problem):
    """With forbidden entries, parallel edges and usage limits: the certified bound is at most the
    optimum brute force finds, and (a check of the certificate's signs) within a hair of the value
    HiGHS reports for the same relaxation where HiGHS reports it optimal."""
    exact = solve(problem, "brute")
    _, lp = _bound(problem)
    if exact.status is not Status.OPTIMAL:
        return
    assert not lp.infeasible, "the relaxation of a feasible problem is feasible"
    assert lp.bound is not None
    assert lp.bound <= exact.objective + _slack(exact.objective)
    if lp.objective is not None and lp.status == "Optimal":  # an interior point stopped short
        # ("Unknown") certifies less than its objective: the bound stays a bound, but not that value
        assert lp.bound == pytest.approx(lp.objective, rel=1e-6, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(problems(max_vertices=5, usage=True, forbidden=False), st.floats(0.01, 1000.0))
def test_float_costs_keep_the_bound_below_the_mip_optimum(problem, factor):
    """Fractional costs (scaled by any factor): the bound stays at most the optimum the MIP proves."""
    scaled = costs_times(problem, factor)
    exact = solve(scaled, "mip-highs", time_limit=60)
    _, lp = _bound(scaled)
    if exact.status is Status.OPTIMAL:
        assert lp.bound is not None and lp.bound <= exact.objective + _slack(exact.objective)


@settings(max_examples=60, deadline=None)
@given(problems(max_vertices=5, usage=True, forbidden=False), st.integers(0, 2**31))
def test_any_duals_give_a_bound(problem, seed):
    """Weak duality needs no optimal duals: HiGHS's duals shaken by noise, or random ones, still
    certify a bound at most the optimum (and the optimal duals the best of them)."""
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    relax = Relaxation.build(model, start, end)
    if relax.matrix.shape[1] == 0:
        return
    rng = np.random.default_rng(seed)
    rows = relax.matrix.shape[0]
    for duals in (rng.normal(0, 1, rows), rng.normal(0, 100, rows), np.zeros(rows)):
        assert relax.value(duals) <= exact.objective + _slack(exact.objective)


def test_the_certificate_on_a_known_linear_program():
    """min x + y over x + y >= 1 (a row with only a lower side) and 0 <= x, y <= 1: the optimum
    is 1; the dual 1 certifies it, a dual of the wrong sign is clipped to 0 (bound 0), and a
    dual of 0.5 certifies 0.5."""
    a = sp.csc_matrix(np.array([[1.0, 1.0]]))
    args = (a, np.array([1.0, 1.0]), np.array([1.0]), np.array([np.inf]), np.zeros(2), np.ones(2))
    assert certified_bound(*args, np.array([1.0])) == pytest.approx(1.0)
    assert certified_bound(*args, np.array([-3.0])) == pytest.approx(0.0)
    assert certified_bound(*args, np.array([0.5])) == pytest.approx(0.5)
    assert certified_bound(*args, np.array([5.0])) == pytest.approx(5.0 - 2 * 4.0)


# B (9 s) is marked slow to keep CI short; G stays in the default run.
@pytest.mark.parametrize(("name", "optimum"), [pytest.param("B", 532843, marks=pytest.mark.slow), ("G", 217039)])
def test_contest_instances_bound_below_their_optima(name, optimum):
    """IOPDDL B and G, whose optima toulbar2 proves: the relaxation's bound lies below each, and
    within 5% of it (it is 3.4% and 4.3% below)."""
    problem = load_problem(f"../shared/iopddl/asplos-2025-iopddl-{name}.json.gz")
    _, lp = _bound(problem)
    assert lp.bound is not None
    assert 0.95 * optimum <= lp.bound <= optimum


def test_lagrange_reports_the_relaxation_and_starts_the_ascent_from_it():
    """On the built-in example the relaxation runs once; its bound is one of the search's, the
    result's bound is at least it (rounded down to the integer below at most) and the method names it
    where it stands; its prices start the ascent."""
    p = load_problem("example")
    r = solve(p, "lagrange", workers=0, runs=4)
    lp = r.stats["lp"]
    assert lp["status"] and lp["bound"] <= solve(p, "brute").objective
    assert r.bound >= int(lp["bound"]) - 1
    if lp["bound"] > r.stats["lagrangian_bound"]:
        assert r.bound_method == LP_METHOD


def test_no_share_no_relaxation_and_a_bad_share_is_refused():
    p = load_problem("example")
    r = solve(p, "lagrange", workers=0, runs=2, bound_share=0)
    assert "lp" not in r.stats
    with pytest.raises(ModelError, match="bound_share"):
        solve(p, "lagrange", workers=0, runs=2, bound_share=1.5)


@pytest.mark.usefixtures("rows_not_kept")
def test_a_relaxation_too_large_for_its_share_is_skipped_with_the_reason(monkeypatch):
    from stratopt.solvers.lagrange import jobs

    monkeypatch.setattr(jobs, "LP_RATE", 0.001)
    r = solve(load_problem("example"), "lagrange", workers=2, time_limit=4)
    assert "of its share" in r.stats["lp"]["skipped"]
    assert r.status is Status.FEASIBLE


def test_v_bounds_stay_below_its_proven_optimum():
    """IOPDDL V, whose optimum (1617084) an exact run proved: lagrange's bound after a short search
    (its usage rows kept, :mod:`~stratopt.solvers.lagrange.kept`, for half the time) stays below it."""
    problem = load_problem("../shared/iopddl/asplos-2025-iopddl-V.json.gz")
    r = solve(problem, "lagrange", workers=0, time_limit=10)
    assert r.stats["lp"]["method"] == "kept"
    assert r.bound is not None and 0 < r.bound <= 1617084
    assert r.objective is None or r.objective >= 1617084


def test_mip_highs_still_runs_after_the_relaxation_in_the_same_process():
    """The relaxation's HiGHS run leaves no process-wide scheduler behind that would stop a later
    HiGHS run (PuLP's, for mip-highs) with other thread options."""
    p = load_problem("example")
    assert "bound" in solve(p, "lagrange", workers=0, runs=2).stats["lp"]
    assert solve(p, "mip-highs").status is Status.OPTIMAL
