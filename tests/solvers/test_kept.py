"""The bound with the usage rows kept (:mod:`stratopt.solvers.lagrange.kept`): its rows hold exactly
the assignments that keep the limit, a run at zero prices closes at the optimum, and no bound it
proves passes the optimum (brute force on small problems)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from stratopt import Status, evaluate, solve
from stratopt.solvers.base import Limit
from stratopt.solvers.lagrange import PenaltyModel, kept
from stratopt.solvers.lagrange.messages import Messages

from ..conftest import problems
from .test_messages import grid

pytest.importorskip("pytoulbar2")


def _setup(problem):
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    return model, start, end


def _meets(rows, values: np.ndarray) -> bool:
    return all(sum(use for var, value, use in terms if values[var] == value) <= capacity for terms, capacity in rows)


@pytest.mark.parametrize("seed", range(12))
def test_the_rows_hold_exactly_the_assignments_that_keep_the_limit(seed):
    """Every assignment of the network meets the rows exactly where the problem's assignment it
    stands for keeps the usage limit (enumerated)."""
    problem = grid(seed)
    model, start, end = _setup(problem)
    net = model.network
    rows = kept.network_rows(model, start, end, kept.KEPT_MAX_TERMS)
    assert rows is not None
    broken = 0
    for values in itertools.product(*(range(int(k)) for k in net.k)):
        v = np.asarray(values, dtype=np.int64)
        keeps = evaluate(problem, net.lift(v)).peak_usage <= problem.usage_limit
        assert _meets(rows, v) == keeps
        broken += not keeps
    assert rows and broken  # the grids are built so that the limit binds


def test_rows_are_refused_for_fractional_usages_or_too_many_terms():
    problem = grid(3)
    model, start, end = _setup(problem)
    assert kept.network_rows(model, start, end, 0) is None
    assert kept.rows_fit(model, start, end)
    model.excess = model.excess + 0.5 * (model.excess > 0)
    assert kept.network_rows(model, start, end, kept.KEPT_MAX_TERMS) is None
    assert not kept.rows_fit(model, start, end)  # so the relaxation keeps its place there


@pytest.mark.parametrize("seed", range(12))
def test_a_run_at_zero_prices_closes_at_the_optimum_and_any_prices_stay_below(seed):
    """At zero prices the rows kept make the run the problem itself: it closes, and its bound is
    the optimum (within rounding); at random prices it proves no more than the optimum."""
    problem = grid(seed)
    exact = solve(problem, "brute")
    model, start, end = _setup(problem)
    rows = kept.network_rows(model, start, end, kept.KEPT_MAX_TERMS)
    messages = Messages(model.network)
    zero = np.zeros(len(model.room))
    value, values, closed = kept.kept_run(model, messages, zero, start, end, rows, 60.0, 1)
    if exact.status is Status.INFEASIBLE:  # (seed 3) no assignment keeps the limit
        assert values is None and not closed
        return
    assert closed and values is not None
    assert value == pytest.approx(exact.objective, abs=1e-6 * max(1.0, exact.objective))
    rng = np.random.default_rng(seed)
    prices = rng.exponential(2.0, len(model.room))
    value, _, _ = kept.kept_run(model, messages, prices, start, end, rows, 60.0, 1)
    assert value <= exact.objective + 1e-6 * max(1.0, exact.objective)


@pytest.mark.parametrize("seed", range(8))
def test_on_small_grids_every_run_closes_and_the_bound_is_the_optimum(seed):
    """The whole bound (message prices, then runs at fractions of them down to zero): on the grids
    every run closes, so the last proves the optimum; its answer keeps the limit."""
    problem = grid(seed)
    exact = solve(problem, "brute")
    model, start, end = _setup(problem)
    out = kept.kept_bound(model, start, end, None)
    assert out.method == "kept"
    if exact.status is Status.INFEASIBLE:
        assert out.assignment is None
        return
    assert out.status.startswith(f"{len(kept.KEPT_STEPS)} of its runs closed")
    assert out.bound == pytest.approx(exact.objective, abs=1e-6 * max(1.0, exact.objective))
    assert out.assignment is not None
    final = evaluate(problem, out.assignment)
    assert final.feasible and final.objective == exact.objective


@settings(max_examples=25, deadline=None)
@given(problems(usage=True))
def test_small_problems_keep_the_bound_below_the_optimum(problem):
    """On small random problems (forbidden entries, parallel edges, ties): no bound above the
    optimum, none at all where no assignment keeps the limit."""
    exact = solve(problem, "brute")
    model, start, end = _setup(problem)
    if model.network is None or not kept.rows_fit(model, start, end):
        return
    out = kept.kept_bound(model, start, end, None)
    if exact.status is Status.OPTIMAL and out.bound is not None:
        assert out.bound <= exact.objective + 1e-6 * max(1.0, exact.objective)


@pytest.mark.parametrize("seed", [0, 2])
def test_lagrange_keeps_the_rows_where_they_fit(seed):
    """Under a time limit, a problem with few rows gets the bound with them kept in place of the
    relaxation; on a grid its last run, at zero prices, closes at the optimum, and the search stops
    there (gap 0: ``lagrange`` is not an exact solver, so its status stays feasible)."""
    problem = grid(seed)
    exact = solve(problem, "brute")
    r = solve(problem, "lagrange", workers=0, time_limit=20)
    assert "kept" in r.stats["lp"] and r.stats["lp"]["method"] == "kept"
    assert r.bound == exact.objective and r.objective == exact.objective
    assert r.gap == 0 and r.limit is not Limit.TIME


def test_the_closing_line_and_the_bench_say_what_the_rows_kept_gave():
    """stratopt iopddl's closing line names the bound with the rows kept in the file's units, and
    the bench's reason for a gap above 2% reads it back."""
    import importlib.util
    from pathlib import Path

    from stratopt.solvers.contest import _relaxation

    lp = {"kept": "fit", "method": "kept", "status": "3 of its runs closed (165 rows)", "bound": 10.5, "seconds": 2.0}
    line = _relaxation({"beside": {"lp": lp}}, scale=2)
    assert line == "; usage rows kept: bound 21 (3 of its runs closed (165 rows), 2.0 s)"
    path = Path(__file__).parents[2] / "scripts" / "bench_iopddl.py"
    spec = importlib.util.spec_from_file_location("bench_iopddl", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.why(line, 0.2, 25.0) == "the bound with the usage rows kept (3 runs closed) is 16.0% below the answer"
