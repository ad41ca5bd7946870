"""The Lagrangian dual by message passing (stratopt.solvers.lagrange.messages): every round's value
a lower bound, checked against brute force and the linear relaxation it climbs towards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from stratopt import Status, StrategyProblem, load_problem, solve
from stratopt.solvers.lagrange import PenaltyModel
from stratopt.solvers.lagrange.messages import MESSAGE_METHOD, Messages, matchings, message_bound
from stratopt.solvers.lagrange.model import segment_min
from stratopt.solvers.lagrange.relaxation import lp_bound

from ..conftest import costs_times, problems

pytest.importorskip("pytoulbar2")


BIG = 10**18  # a forbidden entry, as the contest files write it


def grid(seed: int, usage: bool = True) -> StrategyProblem:
    """A 3 x 3 grid (every neighbour joined, 2-3 choices, random costs, a few forbidden entries,
    usage intervals and a limit between the least load and a little above): the reduced network
    keeps its edges for the messages to pass along, where the small sparse problems of
    ``problems`` reduce to a network without any."""
    rng = np.random.default_rng(seed)
    n = 9
    ks = rng.integers(2, 4, n).tolist()
    node = [rng.integers(0, 31, k).tolist() for k in ks]
    edges = [(r * 3 + c, r * 3 + c + 1) for r in range(3) for c in range(2)]
    edges += [(r * 3 + c, (r + 1) * 3 + c) for r in range(2) for c in range(3)]
    tables = []
    for u, v in edges:
        table = rng.integers(0, 31, ks[u] * ks[v])
        table[rng.random(len(table)) < 0.08] = BIG
        tables.append(table.tolist())
    kwargs = {}
    if usage:
        usages = [rng.integers(0, 10, k).tolist() for k in ks]
        starts = rng.integers(0, 4, n)
        kwargs = {
            "intervals": [[int(s), int(s) + int(rng.integers(1, 4))] for s in starts],
            "usages": usages,
            "usage_limit": sum(min(u) for u in usages) // 2 + int(rng.integers(0, 20)),
        }
    return StrategyProblem(node, edges, tables, **kwargs)


def _slack(value: float) -> float:
    return 1e-6 * max(1.0, abs(value))


def _model(problem):
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    return model, start, end


def solved(problem):
    """Brute force's optimum with the model, its start and end slots; None where it is infeasible."""
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return None
    return (exact.objective, *_model(problem))


@pytest.mark.parametrize("seed", range(20))
def test_the_message_bound_lies_below_the_optimum_and_the_relaxation(seed):
    """Grids whose reduced network keeps its edges, with forbidden entries and usage limits: after
    1, 3 and 30 rounds the bound is at most the optimum brute force finds, and at most the linear
    relaxation's value (it climbs that relaxation's dual)."""
    problem = grid(seed)
    exact = solve(problem, "brute")
    model, start, end = _model(problem)
    assert model.network is not None and len(model.network.edges) > 0
    if exact.status is not Status.OPTIMAL:
        assert exact.status is Status.INFEASIBLE
        return
    for rounds in (1, 3, 30):
        got = message_bound(model, start, end, rounds=rounds)
        assert got.bound is not None
        assert got.bound <= exact.objective + _slack(exact.objective)
    lp = lp_bound(model, start, end, 60.0)
    if lp.objective is not None and lp.status == "Optimal":
        assert got.bound <= lp.objective + _slack(lp.objective)


@settings(max_examples=40, deadline=None)
@given(problems(max_vertices=6, usage=True, forbidden=False))
def test_fractional_costs_keep_the_bound_below_the_optimum(problem):
    scaled = costs_times(problem, 0.37)
    exact = solve(scaled, "brute")
    model, start, end = _model(scaled)
    if exact.status is Status.OPTIMAL and model.network is not None:
        got = message_bound(model, start, end, rounds=10)
        assert got.bound is not None and got.bound <= exact.objective + _slack(exact.objective)


def _value(messages: Messages) -> float:
    moved, floor, _ = messages.parts()
    least = segment_min(messages.unary + moved, messages.net.node_off)
    return float(least.sum()) + floor


@pytest.mark.parametrize("seed", range(12))
def test_a_sweep_never_lowers_the_bound_nor_passes_the_optimum(seed):
    """Each sweep keeps or raises the value (block coordinate ascent); the value never passes the
    network's optimum (brute force on the unconstrained grid)."""
    problem = grid(seed, usage=False)
    model = PenaltyModel.build(problem)
    net = model.network
    assert net is not None and len(net.edges) > 0
    messages = Messages(net)
    messages.reprice(net.node.copy())
    last = _value(messages)
    for _ in range(10):
        messages.sweep()
        now = _value(messages)
        assert now >= last - 1e-9 * max(1.0, abs(last))
        last = now
    exact = solve(problem, "brute")
    if exact.status is Status.OPTIMAL:
        optimum = exact.objective * model.scale - net.shift
        assert last <= optimum + 1e-6 * max(1.0, abs(optimum))


def test_the_matchings_share_no_vertex():
    rng = np.random.default_rng(3)
    edges = rng.integers(0, 30, size=(200, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    colour = matchings(edges, 30)
    for c in np.unique(colour):
        ends = edges[colour == c].ravel()
        assert len(ends) == len(set(ends.tolist()))
    degree = np.bincount(edges.ravel(), minlength=30).max()
    assert colour.max() < 2 * degree


def test_g_bound_lies_below_its_optimum_and_within_ten_percent():
    """IOPDDL G, whose optimum (217039) toulbar2 proves: the message bound lies below it and, after
    100 rounds, within 10% of it (the linear relaxation is 4.3% below)."""
    problem = load_problem("../shared/iopddl/asplos-2025-iopddl-G.json.gz")
    model, start, end = _model(problem)
    got = message_bound(model, start, end, rounds=100)
    assert got.bound is not None
    assert 0.9 * 217039 <= got.bound <= 217039


@pytest.mark.usefixtures("rows_not_kept")
def test_lagrange_uses_message_passing_where_the_relaxation_is_too_large(monkeypatch):
    """With the relaxation made too large for its share, the search runs the message bound in its
    place: the reason stays in the stats, the bound lies below the optimum, and the method is named
    where that bound is the result's."""
    from stratopt.solvers.lagrange import jobs

    monkeypatch.setattr(jobs, "LP_RATE", 0.001)
    problem = load_problem("../shared/iopddl/asplos-2025-iopddl-G.json.gz")
    r = solve(problem, "lagrange", workers=0, time_limit=10, bound_share=1.0)
    lp = r.stats["lp"]
    assert "of its share" in lp["skipped"] and lp["method"] == "messages"
    assert lp["bound"] is not None and lp["bound"] <= 217039
    assert r.bound is not None and r.bound <= 217039
    if r.stats.get("bound_method") == MESSAGE_METHOD:
        assert r.bound >= int(lp["bound"]) - 1


@pytest.mark.usefixtures("rows_not_kept")
def test_the_message_bound_takes_the_share_whatever_the_size_and_no_share_none(monkeypatch):
    """Where the relaxation would not fit its share, the message bound takes the share (half the
    limit at the default) and stops where it stalls, however large the network: its price steps
    stay small. At a share of 0 there is no bound job at all."""
    from stratopt.solvers.lagrange import jobs

    problem = load_problem("../shared/iopddl/asplos-2025-iopddl-G.json.gz")
    model, _, _ = _model(problem)
    monkeypatch.setattr(jobs, "LP_RATE", 0.001)
    stats: dict = {}
    job = jobs.relaxation_job(model, jobs.LocalEngine(problem), 0.5, 120.0, stats)
    assert job is not None and job.messages and job.stall and job.seconds == 60.0
    assert "more than 0.6 of its share (60 s)" in stats["lp"]["skipped"]
    assert jobs.relaxation_job(model, jobs.LocalEngine(problem), 0.0, 120.0, {}) is None


@pytest.mark.usefixtures("rows_not_kept")
def test_a_quick_message_bound_runs_at_the_default_share_and_stops_where_it_stalls(monkeypatch):
    """Where the prices' programme is small and the relaxation would not fit LP_SAFE of its share,
    the message bound takes the share at the default ``bound_share`` and stops where it stalls:
    the reason and its status are in the stats, its bound lies below G's optimum (217039) and
    within 10% of it."""
    from stratopt.solvers.lagrange import jobs

    problem = load_problem("../shared/iopddl/asplos-2025-iopddl-G.json.gz")
    model, start, end = _model(problem)
    size = jobs.columns(model, start, end)
    # The relaxation fits its share (30 s of a 60 s limit), but not LP_SAFE of it.
    monkeypatch.setattr(jobs, "LP_RATE", size / (0.8 * 30.0))
    stats: dict = {}
    job = jobs.relaxation_job(model, jobs.LocalEngine(problem), 0.5, 60.0, stats)
    assert job is not None and job.messages and job.stall and job.seconds == 30.0
    assert "more than 0.6 of its share (30 s)" in stats["lp"]["skipped"]
    monkeypatch.setattr(jobs, "LP_RATE", 0.001)
    r = solve(problem, "lagrange", workers=0, time_limit=4)
    lp = r.stats["lp"]
    assert lp["method"] == "messages" and "of its share" in lp["skipped"]
    assert lp["status"].startswith(("stalled", "stopped at its time"))
    assert lp["bound"] is not None and 0.9 * 217039 <= lp["bound"] <= 217039
    assert r.bound is not None and r.bound <= 217039


def test_the_stall_rule():
    """Stalled only once STALL_ROUNDS rounds have passed with a rise of at most STALL_GAIN of the bound."""
    from stratopt.solvers.lagrange.messages import STALL_GAIN, STALL_ROUNDS, _stalled

    rising = [1000.0 + 10.0 * i for i in range(3 * STALL_ROUNDS)]
    assert not _stalled(rising)
    flat = rising[:STALL_ROUNDS] + [rising[STALL_ROUNDS - 1]] * (STALL_ROUNDS + 1)
    assert _stalled(flat)
    assert not _stalled(flat[:STALL_ROUNDS])  # too few rounds to tell
    crawl = [1e6 * (1 + 0.5 * STALL_GAIN * i / STALL_ROUNDS) for i in range(STALL_ROUNDS + 1)]
    assert _stalled(crawl)
    climb = [1e6 * (1 + 2 * STALL_GAIN * i / STALL_ROUNDS) for i in range(STALL_ROUNDS + 1)]
    assert not _stalled(climb)
    assert not _stalled([-np.inf] + [5.0] * STALL_ROUNDS)  # from nothing to a bound is a rise


@pytest.mark.parametrize("seed", range(8))
def test_a_stalled_message_bound_stops_early_below_the_optimum(seed):
    """With the stall rule, the message bound on a grid ends before its rounds are done, with a
    bound no higher than brute force's optimum and no lower than its own first round's."""
    problem = grid(seed)
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return
    model, start, end = _model(problem)
    first = message_bound(model, start, end, rounds=1)
    got = message_bound(model, start, end, rounds=500, stall=True)
    assert got.status.startswith("stalled")
    assert int(got.status.split(": ")[1].split()[0]) < 500
    assert got.bound is not None and first.bound is not None
    assert first.bound - _slack(first.bound) <= got.bound <= exact.objective + _slack(exact.objective)


@pytest.mark.parametrize("quick", [0, 10**9])
@pytest.mark.parametrize("seed", range(6))
def test_both_first_price_solves_bound_below_the_optimum(seed, quick, monkeypatch):
    """The whole programme's price step (``price="lp"``), its first solve by the dual simplex (a
    programme above QUICK_PRICE_COLUMNS) or by the interior point with crossover (below it), the
    warm primal simplex after either: every bound
    stays below brute force's optimum, and 30 rounds from either end within 1% of each other."""
    from stratopt.solvers.lagrange import messages

    case = solved(grid(seed))
    if case is None:
        return
    optimum, model, start, end = case
    got = {}
    for columns in (quick, 10**9 - quick):
        monkeypatch.setattr(messages, "QUICK_PRICE_COLUMNS", columns)
        got[columns] = message_bound(model, start, end, rounds=30, price="lp").bound
        assert got[columns] is not None and got[columns] <= optimum + _slack(optimum)
    a, b = got.values()
    assert abs(a - b) <= 0.01 * max(1.0, abs(optimum))


def _all_costs(net, node: np.ndarray, edge: np.ndarray) -> np.ndarray:
    """Every assignment's cost on the network's graph under ``node`` and ``edge`` (inf where an
    entry is forbidden), by enumeration."""
    grids = np.meshgrid(*[np.arange(int(k)) for k in net.k], indexing="ij")
    values = np.stack([g.ravel() for g in grids], axis=1)
    total = node[net.node_off[:-1] + values].sum(axis=1)
    u, v = net.edges[:, 0], net.edges[:, 1]
    total += edge[net.edge_off[:-1] + values[:, u] * net.k[v] + values[:, v]].sum(axis=1)
    return total


@pytest.mark.parametrize("seed", range(12))
def test_the_reparametrised_costs_price_every_assignment_the_same(seed):
    """After some sweeps at penalised node costs, the reparametrised network prices every
    assignment of the grid as the penalised network does (forbidden ones forbidden), each of its
    functions has least entry 0, and its constant is a lower bound on the penalised optimum: the
    message bound's value."""
    problem = grid(seed)
    model = PenaltyModel.build(problem)
    net = model.network
    assert net is not None and len(net.edges) > 0
    rng = np.random.default_rng(seed)
    unary = net.penalised(model, rng.uniform(0.0, 3.0, model.n))
    messages = Messages(net)
    messages.reprice(unary)
    for _ in range(int(rng.integers(1, 6))):
        messages.sweep()
    node, edge, constant = messages.reparametrised()
    before = _all_costs(net, unary, net.edge)
    after = _all_costs(net, node, edge) + constant
    allowed = np.isfinite(before)
    assert np.array_equal(allowed, np.isfinite(after))
    assert np.allclose(after[allowed], before[allowed], rtol=1e-9, atol=1e-6)
    assert np.array_equal(np.isinf(edge), np.isinf(net.edge))
    for values, off in ((node, net.node_off), (edge, net.edge_off)):
        low = segment_min(values, off)
        assert np.all(low[np.isfinite(low)] == 0)
    assert constant <= before[allowed].min() + 1e-6 * max(1.0, abs(before[allowed].min()))
    assert constant == pytest.approx(_value(messages), rel=1e-9, abs=1e-6)


@pytest.mark.parametrize("seed", range(12))
def test_a_run_after_the_messages_proves_the_exact_lagrangian_value(seed, monkeypatch):
    """toulbar2 solves each grid exactly, with and without the message sweeps before it: both runs'
    bounds are the Lagrangian's exact value at their prices (brute force over the penalised
    network, within the rounding margin); the messages stay for the worker's next run."""
    from stratopt.solvers.lagrange import runs

    problem = grid(seed)
    model, start, end = _model(problem)
    net = model.network
    assert net is not None
    rng = np.random.default_rng(100 + seed)
    prices = rng.uniform(0.0, 4.0, len(model.room))
    weights = model.weights_of(prices, start, end)
    penalised = net.penalised(model, weights)
    costs = _all_costs(net, penalised, net.edge)
    if not np.isfinite(costs).any():
        return
    exact = (costs.min() + net.shift + net.fixed_penalty(model, weights) - model.shift) / model.scale
    exact = model.dual_value(weights, exact * model.scale, prices)
    margin = (0.5 * (len(net.k) + len(net.edges)) + 1.0) / model.scale + 1e-9 * abs(exact)
    for sweeps in (0, runs.REPARAM_SWEEPS):
        monkeypatch.setattr(runs, "REPARAM_SWEEPS", sweeps)
        runs._WARM.clear()
        _, bound, _ = runs.run_penalised(model, weights, 10, 1, prices)
        assert exact - margin <= bound <= exact + 1e-9 * max(1.0, abs(exact))
    assert runs._WARM and runs._WARM[0][0] is net  # the messages stay for the next run


def test_answer_runs_keep_the_plain_costs_and_an_oversized_reparametrisation_falls_back(monkeypatch):
    """A run without prices (an answer run) sweeps no messages; a bound run whose reparametrised
    costs would pass what toulbar2 is given takes the plain costs and still proves the exact
    Lagrangian value."""
    from stratopt.solvers.lagrange import runs

    problem = grid(3)
    model, start, end = _model(problem)
    net = model.network
    assert net is not None
    prices = np.full(len(model.room), 1.5)
    weights = model.weights_of(prices, start, end)
    runs._WARM.clear()
    runs.run_penalised(model, weights, 10, 1)
    assert not runs._WARM
    costs = _all_costs(net, net.penalised(model, weights), net.edge)
    exact = model.dual_value(weights, costs.min() + net.shift + net.fixed_penalty(model, weights) - model.shift, prices)
    margin = (0.5 * (len(net.k) + len(net.edges)) + 1.0) / model.scale + 1e-9 * abs(exact)
    monkeypatch.setattr(runs, "_REPARAM_TOP", 0.0)
    plain, constant = runs.reparametrised(net, net.penalised(model, weights), 10.0)
    assert constant == 0.0 and plain.edge is net.edge
    _, bound, _ = runs.run_penalised(model, weights, 10, 1, prices)
    assert exact - margin <= bound <= exact + 1e-9 * max(1.0, abs(exact))
