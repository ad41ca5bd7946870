"""The message bound's price step by row generation (stratopt.solvers.lagrange.prices): the prices it
finds are the whole prices' programme's best (its value checked against HiGHS on the whole
programme), its loads are the segments' loads, and the message bound with it stays below brute
force's optimum and agrees with the bound of the whole-programme step."""

from __future__ import annotations

import numpy as np
import pytest

from stratopt.solvers.lagrange import PenaltyModel
from stratopt.solvers.lagrange.messages import _value, message_bound
from stratopt.solvers.lagrange.prices import PriceRows
from stratopt.solvers.lagrange.relaxation import Relaxation

from .test_messages import grid, solved

pytest.importorskip("highspy")


def _model(problem):
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    return model, start, end


def _whole(model, start, end, node) -> float | None:
    """The whole prices' programme's optimum (problem units), by HiGHS's simplex, or None where it
    has no rows or no solution."""
    relax = Relaxation.build(model, start, end, node_costs=node)
    if relax.infeasible or relax.matrix.shape[1] == 0:
        return None
    h = relax.highs("simplex")
    h.run()
    solution = h.getSolution()
    if not solution.dual_valid:
        return None
    return relax.value(np.asarray(solution.row_dual))


@pytest.mark.parametrize("seed", range(30))
def test_the_prices_reach_the_whole_programmes_optimum(seed):
    """Grids with usage limits, node costs moved at random (as messages move them): the value of the
    rows step's prices is the whole programme's optimum (HiGHS on every row), to rounding, and a
    second solve from the rows kept gives it again."""
    problem = grid(seed)
    model, start, end = _model(problem)
    net = model.network
    assert net is not None
    rows = PriceRows(model, start, end)
    if rows.infeasible:
        return
    rng = np.random.default_rng(seed)
    for _ in range(3):
        node = net.node + model.scale * rng.uniform(-5.0, 5.0, len(net.node))
        whole = _whole(model, start, end, node)
        if whole is None:
            continue
        lam = rows.solve(node, 60.0)
        assert np.all(lam >= 0)
        got = _value(model, lam, node, 0.0, 0.0, start, end)
        assert got == pytest.approx(whole, rel=1e-6, abs=1e-6)
        again = _value(model, rows.solve(node, 60.0), node, 0.0, 0.0, start, end)
        assert again == pytest.approx(whole, rel=1e-6, abs=1e-6)
        assert rows.history[-1][0] == 1  # nothing left to add: one pass


@pytest.mark.parametrize("seed", range(10))
def test_the_loads_are_each_segments_usage_above_the_least(seed):
    """For a random one-hot choice per network vertex, each segment's load is the sum of the
    excess usage of every paying entry live there, counted entry by entry."""
    problem = grid(seed)
    model, start, end = _model(problem)
    net = model.network
    assert net is not None
    rows = PriceRows(model, start, end)
    rng = np.random.default_rng(seed)
    x = np.zeros(len(net.node))
    for v in range(len(net.k)):
        x[net.node_off[v] + rng.integers(0, net.k[v])] = 1.0
    loads = rows.loads(x)
    assert len(loads) == rows.nseg
    for seg in range(rows.nseg):
        live = (rows.first <= seg) & (rows.last > seg)
        expected = float((rows.pay[live] * x[rows.row[live]]).sum())
        assert loads[seg] == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_both_price_steps_bound_below_the_optimum_and_agree(seed):
    """The message bound with the rows step and with the whole programme's warm simplex: both below
    brute force's optimum, and after 30 rounds within 1% of each other (each round solves the same
    programme; where its best prices are not unique the two may go on from different ones)."""
    case = solved(grid(seed))
    if case is None:
        return
    optimum, model, start, end = case
    got = {}
    for price in ("rows", "lp"):
        got[price] = message_bound(model, start, end, rounds=30, price=price).bound
        assert got[price] is not None
        assert got[price] <= optimum + 1e-6 * max(1.0, abs(optimum))
    assert abs(got["rows"] - got["lp"]) <= 0.01 * max(1.0, abs(optimum))


def test_an_unknown_price_step_is_an_error():
    problem = grid(0)
    model, start, end = _model(problem)
    with pytest.raises(ValueError, match="price step"):
        message_bound(model, start, end, rounds=1, price="fast")


@pytest.mark.parametrize("seed", range(8))
def test_segment_argmin_picks_what_a_stable_sort_picks(seed):
    """Each nonempty segment's first least value, ties, forbidden (infinite) choices and empty
    segments included: the index a stable sort by (segment, value) puts first."""
    from stratopt.solvers.lagrange.model import segment_argmin

    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 5, 40)
    off = np.concatenate([[0], np.cumsum(sizes)])
    values = rng.integers(0, 3, int(off[-1])).astype(float)  # few values: many ties
    values[rng.random(len(values)) < 0.2] = np.inf
    owner = np.repeat(np.arange(len(sizes)), sizes)
    expected = np.lexsort((values, owner))[off[:-1][sizes > 0]]
    assert np.array_equal(segment_argmin(values, off), expected)
