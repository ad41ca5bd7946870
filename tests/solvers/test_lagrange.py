"""Usage as penalties (toulbar2 per weight vector): answers feasible and no better than the optimum,
bounds no higher, repair and the Lagrangian value checked by brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratopt import Status, StrategyProblem, evaluate, load_problem, solve
from stratopt.errors import ModelError
from stratopt.solvers.lagrange import Lagrange, PenaltyModel, repair, run_penalised
from stratopt.solvers.local_search import LocalEngine

from ..conftest import all_assignments, costs_times, problems, reference_evaluate

pytest.importorskip("pytoulbar2")


@settings(max_examples=120, deadline=None)
@given(problems(max_vertices=5))
def test_answers_and_bounds_against_brute(problem):
    """With and without usage limits and forbidden entries: every answer is feasible (recomputed
    from scratch) and costs at least the optimum, every bound is at most the optimum, and a
    problem brute force proves infeasible gets no answer."""
    exact = solve(problem, "brute")
    r = solve(problem, "lagrange", workers=0, runs=4)
    assert r.status in (Status.FEASIBLE, Status.NO_SOLUTION, Status.INFEASIBLE)
    if exact.status is Status.INFEASIBLE:
        assert r.assignment is None
        return
    if r.status is Status.INFEASIBLE:
        pytest.fail("lagrange claimed infeasible a problem brute force solves")
    if r.assignment is not None:
        cost, feasible = reference_evaluate(problem, r.assignment)
        assert feasible and cost == r.objective >= exact.objective
    if r.bound is not None:
        assert r.bound <= exact.objective


@settings(max_examples=30, deadline=None)
@given(problems(max_vertices=4, usage=True), st.floats(0.001, 1000.0))
def test_float_costs_bound_below_the_optimum(problem, factor):
    """Float costs are scaled and rounded for toulbar2: the bound still never exceeds the optimum."""
    scaled = costs_times(problem, factor)
    exact = solve(scaled, "brute")
    r = solve(scaled, "lagrange", workers=0, runs=3)
    if exact.status is Status.OPTIMAL and r.bound is not None:
        assert r.bound <= exact.objective + 1e-9 * max(1.0, abs(exact.objective))
    if r.assignment is not None:
        assert evaluate(scaled, r.assignment).feasible


def _penalised_minimum(problem: StrategyProblem, model: PenaltyModel, weights: np.ndarray) -> float:
    """min over all assignments of the scaled, shifted penalised cost, by enumeration."""
    node = model.penalised(weights)
    best = np.inf
    for a in all_assignments(problem):
        a = np.asarray(a)
        total = node[model.node_off[:-1] + a].sum()
        if len(model.edges):
            k = model.k
            total += model.edge[
                model.edge_off[:-1] + a[model.edges[:, 0]] * k[model.edges[:, 1]] + a[model.edges[:, 1]]
            ].sum()
        best = min(best, total)
    return float(best)


@settings(max_examples=80, deadline=None)
@given(problems(max_vertices=5, usage=True, forbidden=False), st.lists(st.floats(0.0, 50.0), min_size=5, max_size=5))
def test_lagrangian_value_is_a_lower_bound(problem, raw):
    """For any weights, the dual value computed from the exact penalised minimum (by enumeration,
    no toulbar2) is at most the optimum under the limit."""
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return
    model = PenaltyModel.build(problem)
    weights = np.asarray(raw[: problem.num_vertices])
    value = model.dual_value(weights, _penalised_minimum(problem, model, weights))
    assert value <= exact.objective + 1e-6 * max(1.0, abs(exact.objective))


@settings(max_examples=80, deadline=None)
@given(problems(max_vertices=5, usage=True, forbidden=False), st.lists(st.floats(0.0, 50.0), min_size=12, max_size=12))
def test_lagrangian_value_at_slot_prices_is_a_lower_bound(problem, raw):
    """For any slot prices, the weights they give and the exact penalised minimum make a dual
    value at most the optimum; the network toulbar2 gets (after the reductions) has the same
    penalised minimum as the model, so the worker's bound is one too."""
    exact = solve(problem, "brute")
    if exact.status is not Status.OPTIMAL:
        return
    model = PenaltyModel.build(problem)
    _, start, end = problem.time_slots
    prices = np.asarray(raw[: len(model.room)] + [0.0] * max(0, len(model.room) - len(raw)))
    weights = model.weights_of(prices, start, end)
    value = model.dual_value(weights, _penalised_minimum(problem, model, weights), prices)
    assert value <= exact.objective + 1e-6 * max(1.0, abs(exact.objective))
    _, bound, _ = run_penalised(model, weights, 5, 1, prices)
    assert bound <= value + 1e-6 * max(1.0, abs(value))


def _tight_problem() -> StrategyProblem:
    """Three vertices live together; choice 0 is cheap and big, choice 1 dear and small.
    Vertex 2 frees the most usage per unit of cost."""
    return StrategyProblem(
        [[0, 10], [0, 10], [0, 3]],
        [(0, 1)],
        [[0, 0, 0, 0]],
        intervals=[[0, 2], [0, 2], [0, 2]],
        usages=[[5, 1], [5, 1], [5, 1]],
        usage_limit=11,
    )


def test_repair_takes_the_cheapest_usage_per_cost():
    """Repair at the worst violation frees the excess with the move of least cost per unit freed."""
    p = _tight_problem()
    engine = LocalEngine(p)
    fixed = repair(engine, np.zeros(3, dtype=np.int64), lambda: False)
    assert fixed is not None and fixed.tolist() == [0, 0, 1]
    assert evaluate(p, fixed).feasible and evaluate(p, fixed).objective == 3


def test_repair_gives_up_when_nothing_frees_usage():
    """If no live vertex has a choice that uses less, repair returns None (no answer is invented)."""
    p = StrategyProblem([[0], [0]], [], [], intervals=[[0, 1], [0, 1]], usages=[[5], [5]], usage_limit=9)
    assert repair(LocalEngine(p), np.zeros(2, dtype=np.int64), lambda: False) is None


def test_least_usage_above_the_limit_is_a_proof():
    """When every vertex at its least usage still breaks the limit, the status is INFEASIBLE."""
    p = _tight_problem().replace(usage_limit=2)
    assert solve(p, "lagrange", workers=0).status is Status.INFEASIBLE


@pytest.mark.usefixtures("search_never_closes")
def test_worker_processes_give_the_same_kind_of_answer():
    """The same search in two worker processes: feasible, at least the optimum, bound below it."""
    p = load_problem("example")
    r = solve(p, "lagrange", workers=2, runs=4)
    assert r.status is Status.FEASIBLE and r.objective == 445 and r.bound <= 445
    assert r.stats["runs"] == 4


@pytest.mark.usefixtures("search_never_closes")
def test_ray_tasks_give_the_same_kind_of_answer():
    """The same search as Ray tasks on a local Ray cluster: the model goes to the object store once,
    each task runs toulbar2, repairs and polishes; feasible, the optimum here, bound below it."""
    ray = pytest.importorskip("ray")
    p = _tight_problem()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        r = solve(p, "lagrange", executor="ray", runs=4)
    finally:
        ray.shutdown()
    assert r.status is Status.FEASIBLE and r.objective == solve(p, "brute").objective and r.bound <= r.objective
    assert r.stats["runs"] == 4 and r.stats["executor"] == "ray"


def test_an_unknown_executor_is_refused():
    with pytest.raises(ModelError, match="unknown executor 'dask'"):
        solve(_tight_problem(), "lagrange", executor="dask")


def test_the_reductions_are_counted_in_stats():
    """A chain of functional edges merges into one vertex before toulbar2 sees it, and the result
    says so (followers merged, what is left)."""
    f = 10**18
    p = StrategyProblem(
        [[0, 5], [1, 2], [3, 0]],
        [(0, 1), (1, 2)],
        [[[f, 4], [1, f]], [[0, f], [f, 7]]],
        intervals=[[0, 2], [1, 3], [2, 4]],
        usages=[[1, 2], [2, 1], [1, 1]],
        usage_limit=3,
    )
    r = solve(p, "lagrange", workers=0, runs=2)
    counts = r.stats["reductions"]
    assert counts["followers_merged"] == 2 and counts["network_vertices"] == 1
    assert r.objective == solve(p, "brute").objective


def test_incumbents_are_feasible_and_improve():
    """Every assignment offered to ``incumbent`` is feasible, each cheaper than the one before."""
    seen = []
    p = _tight_problem()
    r = Lagrange().solve(p, workers=0, runs=4, incumbent=seen.append)
    costs = [evaluate(p, a).objective for a in seen]
    assert seen and all(evaluate(p, a).feasible for a in seen)
    assert costs == sorted(costs, reverse=True) and len(set(costs)) == len(costs)
    assert tuple(seen[-1]) == r.assignment


def test_weights_narrow_per_vertex():
    """A vertex whose run broke the limit gets a higher weight next; one that kept it, lower."""
    from stratopt.solvers.lagrange import Weights

    p = _tight_problem()
    w = Weights(PenaltyModel.build(p), unit=1.0)
    first = w.propose(0.5)
    assert np.allclose(first, 1.0)
    w.learn(first, np.array([True, True, False]))
    nxt = w.propose(0.5)
    assert nxt[0] > 1.0 and nxt[1] > 1.0 and nxt[2] < 1.0
    w.learn(nxt, np.array([False, False, False]))
    between = w.propose(0.5)
    assert 1.0 < between[0] < nxt[0]


def test_every_choice_pair_is_seen_by_the_penalty_model():
    """The model keeps every allowed entry, scaled and shifted: the penalised cost of any
    assignment with zero weights is its true cost times the scale, less the shift."""
    p = load_problem("example")
    m = PenaltyModel.build(p)
    zero = np.zeros(p.num_vertices)
    node = m.penalised(zero)
    for a in itertools.islice(all_assignments(p), 50):
        a = np.asarray(a)
        total = (
            node[m.node_off[:-1] + a].sum()
            + m.edge[m.edge_off[:-1] + a[m.edges[:, 0]] * m.k[m.edges[:, 1]] + a[m.edges[:, 1]]].sum()
        )
        assert (total + m.shift) / m.scale == pytest.approx(evaluate(p, a).objective)


def _coupled_problem() -> StrategyProblem:
    """Two live vertices that must choose alike (unequal pairs are forbidden): the usage only
    falls below the limit if both move, which no single-vertex move can do."""
    big = 10**18
    return StrategyProblem(
        [[0, 5], [0, 5], [0, 1]],
        [(0, 1)],
        [[0, big, big, 0]],
        intervals=[[0, 2], [0, 2], [0, 2]],
        usages=[[5, 1], [5, 1], [1, 1]],
        usage_limit=4,
    )


def test_region_resolve_moves_coupled_vertices_together():
    """Single-vertex repair gives up on coupled vertices; re-solving their region with toulbar2
    under raised weights moves both at once and fits the limit."""
    from stratopt.solvers.lagrange import resolve_region

    p = _coupled_problem()
    engine = LocalEngine(p)
    start = np.zeros(3, dtype=np.int64)
    assert repair(engine, start, lambda: False) is None
    model = PenaltyModel.build(p)
    moved = resolve_region(model, engine, start, np.full(3, 100.0), np.array([True, True, False]), 5, 1)
    assert moved is not None and moved.tolist() == [1, 1, 0]
    assert evaluate(p, moved).feasible and evaluate(p, moved).objective == 10


def test_coupled_problem_is_solved_to_its_optimum():
    """The whole search reaches the optimum of the coupled problem (brute force's)."""
    p = _coupled_problem()
    assert solve(p, "lagrange", workers=0, runs=4).objective == solve(p, "brute").objective


def test_region_repair_under_knapsack_rows():
    """The knapsack repair re-solves the vertices live at the over-full slot on their true costs
    with the limit as a row there: the coupled pair moves together, the cheapest way that fits."""
    from stratopt.solvers.lagrange import repair_region

    # A third vertex live beside them uses 100: at choice 0 the pair breaks the limit by under 5%.
    p = _coupled_problem().replace(usages=[[5, 1], [5, 1], [100, 100]], usage_limit=105)
    fixed = repair_region(PenaltyModel.build(p), LocalEngine(p), np.zeros(3, dtype=np.int64), lambda: 60.0, 1)
    assert fixed is not None and fixed.tolist() == [1, 1, 0] and evaluate(p, fixed).feasible


def test_region_repair_declines_far_above_the_limit():
    """A run more than REGION_REPAIR_EXCESS times the limit is left to the next weights."""
    from stratopt.solvers.lagrange import REGION_REPAIR_EXCESS, repair_region

    p = _coupled_problem()
    # Both coupled vertices at choice 0 use 11 against a limit of 4: far above.
    assert REGION_REPAIR_EXCESS * 4 < 11
    assert repair_region(PenaltyModel.build(p), LocalEngine(p), np.zeros(3, dtype=np.int64), lambda: 60.0, 1) is None


def test_a_finished_run_leaves_no_alarm_behind():
    """toulbar2's time limit is a process-wide CPU-time alarm (ITIMER_VIRTUAL): a run that ends
    before it must disarm it, or it fires while the process builds its next network (seen in the
    repairs, which run toulbar2 in the search's own process)."""
    import signal

    from stratopt.solvers.lagrange import run_penalised

    p = _tight_problem()
    a, _, _ = run_penalised(PenaltyModel.build(p), np.ones(3), 30, 1)
    assert a is not None and signal.getitimer(signal.ITIMER_VIRTUAL) == (0.0, 0.0)
    assert solve(p, "wcsp", time_limit=30).status is Status.OPTIMAL
    assert signal.getitimer(signal.ITIMER_VIRTUAL) == (0.0, 0.0)


def test_a_run_leaves_toulbar2s_options_as_it_found_them():
    """toulbar2's options are process-wide: the LDS a penalised run sets (and the HBFS that LDS
    turns off) left behind made a later exact 'wcsp' run in the same process end without its
    proof (its dual bound one short of the optimum on this chain). The TRW-S accuracy is
    restored too."""
    from stratopt.solvers.lagrange import run_penalised

    rng = np.random.default_rng(3)
    n = 10
    edges = [(v, v + 1) for v in range(n - 1)] + [(0, 5), (3, 8)]
    chain = StrategyProblem(
        [[0, 1, 2, 3]] * n,
        edges,
        [rng.integers(0, 3, (4, 4)) for _ in edges],
        intervals=[[0, 1]] * n,
        usages=[[3, 2, 1, 0]] * n,
        usage_limit=15,
    )
    import pytoulbar2

    from stratopt.solvers.lagrange import TRWS_ACCURACY

    before = pytoulbar2.CFN(verbose=-1).Option.trwsAccuracy
    p = _tight_problem()
    a, _, _ = run_penalised(PenaltyModel.build(p), np.ones(3), 30, 1, trws=TRWS_ACCURACY)
    assert a is not None
    assert pytoulbar2.CFN(verbose=-1).Option.trwsAccuracy == before != TRWS_ACCURACY
    r = solve(chain, "wcsp")
    assert r.status is Status.OPTIMAL and r.objective == r.bound == solve(chain, "brute").objective


@settings(max_examples=40, deadline=None)
@given(problems(max_vertices=5))
def test_without_trws_answers_and_bounds_against_brute(problem):
    """The runs without TRW-S message passing (``trws=None``) hold the same guarantees: a
    feasible answer costs at least the optimum, the bound is at most it."""
    exact = solve(problem, "brute")
    r = solve(problem, "lagrange", workers=0, runs=2, trws=None)
    if r.assignment is not None:
        cost, feasible = reference_evaluate(problem, r.assignment)
        assert feasible and exact.objective is not None and cost == r.objective >= exact.objective
    if r.bound is not None and exact.objective is not None:
        assert r.bound <= exact.objective


@pytest.mark.parametrize("trws", [None, 0.05])
def test_every_run_gets_the_trws_accuracy_asked_for(monkeypatch, trws):
    """By default every penalised run passes TRW-S messages to TRWS_ACCURACY; ``trws`` sets the
    accuracy, None leaves toulbar2's search alone."""
    from stratopt.solvers import lagrange

    real = lagrange.runs.run_penalised
    seen: list[float | None] = []

    def recording(model, weights, seconds, seed, prices=None, trws=None, first=False):
        seen.append(trws)
        return real(model, weights, seconds, seed, prices, trws, first)

    monkeypatch.setattr(lagrange.runs, "run_penalised", recording)
    p = _tight_problem()
    assert solve(p, "lagrange", workers=0, runs=3).assignment is not None
    assert seen and set(seen) == {lagrange.TRWS_ACCURACY}
    seen.clear()
    assert solve(p, "lagrange", workers=0, runs=3, trws=trws).assignment is not None
    assert seen and set(seen) == {trws}


@pytest.mark.parametrize("bad", [0, 1.5, -0.01, "fast"])
def test_a_bad_trws_accuracy_is_refused(bad):
    with pytest.raises(ModelError, match="trws"):
        solve(load_problem("example"), "lagrange", workers=0, trws=bad)


def _failing_run(*args):
    raise RuntimeError("toulbar2 went away")


def test_a_failed_worker_ends_the_search_with_what_there_is(monkeypatch):
    """A worker that dies is reported in stats and the search stops: no traceback, no answer
    invented (here no run succeeded, so NO_SOLUTION)."""
    from stratopt.solvers import lagrange

    monkeypatch.setattr(lagrange.workers, "_worker_run", _failing_run)
    r = solve(_tight_problem(), "lagrange", workers=2, runs=4)
    assert r.status is Status.NO_SOLUTION and r.assignment is None
    assert "toulbar2 went away" in r.stats["worker_error"]


def _overrunning_run(*args):
    import time

    time.sleep(60)  # a toulbar2 run that ignores its time limit


def test_a_run_past_the_deadline_is_stopped(monkeypatch):
    """Runs still going at the time limit are killed, not waited for: the search answers with what
    it holds (here nothing) and says so in stats."""
    from stratopt.solvers import lagrange

    monkeypatch.setattr(lagrange.workers, "_worker_run", _overrunning_run)
    r = solve(_tight_problem(), "lagrange", workers=2, time_limit=3)
    assert r.status is Status.NO_SOLUTION and "stopped" in r.stats["stopped_at_deadline"]


def test_without_a_limit_one_run_takes_the_time():
    """Without a usage limit the penalties vanish: one toulbar2 run, whose answer is optimal on
    a small problem (the same cost as brute force)."""
    p = load_problem("example").replace(usage_limit=None)
    r = solve(p, "lagrange", workers=2, time_limit=5)
    assert r.stats["runs"] == 1 and r.objective == solve(p, "brute").objective == 415


@pytest.mark.usefixtures("rows_not_kept", "search_never_closes")
def test_bound_runs_are_short_where_toulbar2_does_not_prove(monkeypatch):
    """Where toulbar2's runs use their whole time (no proofs), a run after every BOUND_EVERY - 1
    answer runs prices the slots for the bound with a fraction of the time, one that finds nothing
    doubles the next one's, and only the answer runs teach the per-vertex narrowing; the bound
    still never exceeds the optimum."""
    from stratopt.solvers import lagrange

    real = lagrange.runs.run_penalised
    calls: list[tuple[int, bool]] = []

    def slow(model, weights, seconds, seed, prices=None, trws=None, first=False):
        a, bound, _ = real(model, weights, seconds, seed, prices, trws, first)
        calls.append((seconds, prices is not None))
        first_bound_run = prices is not None and sum(b for _, b in calls) == 1
        return (None if first_bound_run else a), bound, float(seconds)  # as if it used its time

    learned: list[np.ndarray] = []
    real_learn = lagrange.schedule.Weights.learn

    def learn(self, weights, broken):
        learned.append(weights.copy())
        real_learn(self, weights, broken)

    monkeypatch.setattr(lagrange.runs, "run_penalised", slow)
    monkeypatch.setattr(lagrange.schedule.Weights, "learn", learn)
    p = _tight_problem()
    r = solve(p, "lagrange", workers=0, runs=10, seconds=12)
    bound = [s for s, b in calls if b]  # the relaxation's prices came: PRICED_EVERY runs after them
    assert len(bound) >= 3 and bound == [4] + [8] * (len(bound) - 1) and all(s == 12 for s, b in calls if not b)
    # Only the answer runs taught the narrowing (all of them found an answer).
    assert len(learned) == sum(1 for _, b in calls if not b) == 10 - len(bound)
    assert r.stats["bound_runs"] == len(bound) - 1  # the one that found nothing had no answer to step from
    assert r.bound <= solve(p, "brute").objective == r.objective


def test_run_length_follows_the_network_and_the_first_run():
    """toulbar2's seconds per run: by the penalised network's pair entries within their bounds, at
    most a quarter of the limit; the first run's time to its first backtrack shortens it to
    FIRST_RUN_FACTOR times that, never under the minimum nor over the size rule."""
    from types import SimpleNamespace

    from stratopt.solvers.lagrange import solver as lagrange_solver

    def model(entries):
        return SimpleNamespace(network=SimpleNamespace(edge=np.zeros(entries)))

    low, high = lagrange_solver.RUN_SECONDS_MIN, lagrange_solver.RUN_SECONDS_MAX
    assert lagrange_solver.run_seconds(model(3_300_000), 180.0) == high
    assert lagrange_solver.run_seconds(model(100_000), 600.0) == low
    assert lagrange_solver.run_seconds(model(3_300_000), 8.0) == 2.0
    assert lagrange_solver.run_seconds(model(3_300_000), None) == 10.0
    factor = lagrange_solver.FIRST_RUN_FACTOR
    assert lagrange_solver.timed_seconds(2.8, high) == pytest.approx(factor * 2.8)
    assert lagrange_solver.timed_seconds(high, high) == high  # never longer than by size
    assert lagrange_solver.timed_seconds(0.1, high) == low  # never under the minimum
    assert lagrange_solver.timed_seconds(0.1, 2.0) == 2.0  # nor over a short limit's quarter


@pytest.mark.usefixtures("rows_not_kept", "search_never_closes")
def test_the_first_run_stops_at_its_first_backtrack_and_times_the_others(monkeypatch):
    """With a time limit and no ``seconds``, the first run asks toulbar2 to stop at its first
    backtrack, only that one, and the later runs get the length its time gives; toulbar2's
    backtrack limit is left as it was found."""
    import pytoulbar2

    from stratopt.solvers.lagrange import runs as lagrange_runs
    from stratopt.solvers.lagrange import solver as lagrange_solver

    before = pytoulbar2.CFN().Option.backtrackLimit
    asked = []
    real = lagrange_runs.run_penalised

    def spy(model, weights, seconds, seed, prices=None, trws=None, first=False):
        asked.append((seconds, first))
        return real(model, weights, seconds, seed, prices, trws, first)

    monkeypatch.setattr(lagrange_runs, "run_penalised", spy)
    monkeypatch.setattr(lagrange_solver, "timed_seconds", lambda first_run, by_size: 3.0)
    problem = load_problem("example")
    r = Lagrange().solve(problem, time_limit=4.0, workers=0)
    assert r.status is Status.FEASIBLE and evaluate(problem, r.assignment).feasible
    assert asked[0][1] and not any(first for _, first in asked[1:])
    assert len(asked) > 1 and all(seconds <= 3 for seconds, _ in asked[1:])
    assert "first_run_seconds" in r.stats and r.stats["seconds_per_run"] == 3.0  # by size: 1 s
    assert pytoulbar2.CFN().Option.backtrackLimit == before


def test_shorter_answer_runs_leave_the_bound_runs_their_time():
    """time_runs shortens the answer runs only; a bound run that finds nothing still doubles up
    to the length by size."""
    from stratopt.solvers.lagrange.schedule import BOUND_FRACTION, Schedule

    s = Schedule(None, None, None, None, 12.0, True)  # type: ignore[arg-type]
    s.time_runs(3.0)
    price = np.zeros(2)
    assert s.run_seconds(None, False, 100.0, True) == 3
    assert s.run_seconds(price, False, 100.0, True) == 12 // BOUND_FRACTION
    s.found_nothing()
    s.found_nothing()
    assert s.run_seconds(price, False, 100.0, True) == 12


def _random_limited(rng: np.random.Generator, n: int = 7, k: int = 3) -> StrategyProblem:
    node = rng.integers(0, 30, size=(n, k)).tolist()
    edges = [(i, i + 1) for i in range(n - 1)]
    tables = [rng.integers(0, 20, size=k * k).tolist() for _ in edges]
    intervals = [[s, s + int(rng.integers(1, 4))] for s in rng.integers(0, 6, size=n).tolist()]
    usages = rng.integers(0, 10, size=(n, k)).tolist()
    limit = int(rng.integers(10, 25))
    return StrategyProblem(node, edges, tables, intervals=intervals, usages=usages, usage_limit=limit)


def _exact_oracle(problem: StrategyProblem, model: PenaltyModel, prices: np.ndarray) -> tuple[np.ndarray, float]:
    """The penalised problem's minimiser at slot ``prices`` and its Lagrangian value, by enumeration."""
    _, start, end = problem.time_slots
    weights = model.weights_of(prices, start, end)
    node = model.penalised(weights)
    every = np.asarray(list(all_assignments(problem)), dtype=np.int64)
    k = model.k
    total = node[model.node_off[:-1] + every].sum(axis=1)
    total = total + model.edge[
        model.edge_off[:-1] + every[:, model.edges[:, 0]] * k[model.edges[:, 1]] + every[:, model.edges[:, 1]]
    ].sum(axis=1)
    best = int(np.argmin(total))  # the first least, as a loop in enumeration order finds it
    return every[best], model.dual_value(weights, float(total[best]), prices)


def test_the_level_step_over_the_live_slots_is_the_step_over_all():
    """The level step solves its two problems over the slots some cut overloads or the centre
    prices, distinct columns once in the maximum: the same ceiling and the same prices as over
    every slot (random cuts, half the slots never overloaded, a third duplicated)."""
    from stratopt.solvers.lagrange import bound as bound_module

    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(30):
        m, s = int(rng.integers(2, 9)), int(rng.integers(4, 40))
        g = rng.normal(size=(m, s))
        never = rng.random(s) < 0.5  # slots no answer overloads
        g[:, never] = -np.abs(g[:, never])
        copies = rng.integers(0, s, size=s // 3)
        g[:, rng.integers(0, s, size=len(copies))] = g[:, copies]
        g[0] = -np.abs(g[0])  # one answer keeps the limit everywhere: the model is bounded
        k = rng.normal(size=m) * 3
        centre = np.where(rng.random(s) < 0.2, rng.random(s), 0.0)
        level = bound_module.Level.__new__(bound_module.Level)
        level.constants, level.slopes, level.centre = list(k), list(g), centre
        level.levels, level.ceiling = 0, math.inf
        full = bound_module._model_maximum(k, g)
        assert full is not None
        low = full[0] - abs(full[0]) - 1.0
        step = level._level_step(low)
        assert step is not None and math.isclose(level.ceiling, full[0], rel_tol=1e-7, abs_tol=1e-7)
        need = bound_module.LEVEL * full[0] + (1 - bound_module.LEVEL) * low - k
        whole = bound_module._project(centre, g, need)
        assert np.allclose(step, whole, atol=1e-4), (step, whole)
        assert (g @ step >= need - 1e-4).all()
        checked += 1
    assert checked == 30


def test_the_level_method_reaches_the_dual_where_polyak_creeps(monkeypatch):
    """With an exact oracle, the level method's best Lagrangian value reaches the dual's maximum (the
    linear programme over every assignment's cut, to 2e-5) in 25 steps on every problem; Polyak's
    steps stay more than 1e-4 short on some; no value exceeds the dual or the optimum."""
    from stratopt.solvers.lagrange import Ascent, Level
    from stratopt.solvers.lagrange import bound as bound_module

    rng = np.random.default_rng(0)
    short = 0
    checked = 0
    for _ in range(12):
        problem = _random_limited(rng)
        exact = solve(problem, "brute")
        model, engine = PenaltyModel.build(problem), LocalEngine(problem)
        if exact.status is not Status.OPTIMAL or not model.relevant.any():
            continue  # (no vertex can break the limit: nothing to price)
        monkeypatch.setattr(bound_module, "BUNDLE", 10**6)
        every = Level(model, engine)
        for a in all_assignments(problem):
            every.cut(np.asarray(a))
        found = bound_module._model_maximum(np.asarray(every.constants), np.vstack(every.slopes))
        assert found is not None
        dual = found[0]
        monkeypatch.setattr(bound_module, "BUNDLE", 64)
        best = {}
        for method in (Ascent, Level):
            ascent = method(model, engine)
            if isinstance(ascent, Level):
                ascent.cut(np.asarray(exact.assignment))  # the incumbent, as the search offers it
            values = []
            for _ in range(25):
                prices = ascent.prices.copy()
                a, value = _exact_oracle(problem, model, prices)
                values.append(value)
                ascent.learn(prices, a, value, float(exact.objective))
            best[method] = max(values)
            assert best[method] <= dual + 1e-6 * abs(dual) and dual <= exact.objective + 1e-9
            if isinstance(ascent, Level):
                assert ascent.stalled == 0  # an exact run's cut always leaves its prices below the level
        assert best[Level] >= dual - 2e-5 * max(1.0, abs(dual)), (dual, best)
        short += best[Ascent] < dual - 1e-4 * max(1.0, abs(dual))
        checked += 1
    assert checked >= 8 and short >= 2


def test_the_level_method_leaves_prices_where_an_inexact_run_proved_too_little(monkeypatch):
    """A run that proves less than the Lagrangian (toulbar2 stopped before its optimum) can leave
    its answer's cut on the level at its prices, where the projection would send the next run back
    to them; the level method then steps by Polyak's rule. Against the same search without that
    rule, over random problems: never further from the optimum, closer on some."""
    from stratopt.solvers.lagrange import Level

    def best_proved(problem, model, engine, optimum, start) -> tuple[float, int]:
        ascent = Level(model, engine)
        ascent.cut(start)
        best = -np.inf
        for _ in range(20):
            prices = ascent.next_prices()
            a, value = _exact_oracle(problem, model, prices)
            proved = value - 0.5 * abs(optimum - value) - 1.0  # what a short run proves there
            best = max(best, proved)
            ascent.learn(prices, a, proved, optimum)
        return best, ascent.stalled

    rng = np.random.default_rng(0)
    closer = stalled = 0
    rule = Level._on_level
    for _ in range(24):
        problem = _random_limited(rng)
        exact = solve(problem, "brute")
        model, engine = PenaltyModel.build(problem), LocalEngine(problem)
        if exact.status is not Status.OPTIMAL or not model.relevant.any():
            continue
        optimum, start = float(exact.objective), np.asarray(exact.assignment)
        monkeypatch.setattr(Level, "_on_level", rule)
        with_rule, stalls = best_proved(problem, model, engine, optimum, start)
        monkeypatch.setattr(Level, "_on_level", lambda *_: False)
        without, _ = best_proved(problem, model, engine, optimum, start)
        assert with_rule <= optimum
        assert with_rule >= without - 1e-9 * max(1.0, abs(without)), (with_rule, without)
        closer += with_rule > without + 1e-9 * max(1.0, abs(without))
        stalled += stalls
    assert stalled > 0 and closer > 0


def test_a_bound_run_taken_after_the_last_start_teaches_the_ascent_nothing():
    """A bound run the search takes with ``learn=False`` (no run follows it) leaves the ascent's
    prices and its step count as they were; the same run taken with ``learn`` moves them. Its
    proven value counts either way."""
    from stratopt.solvers.lagrange import Level
    from stratopt.solvers.lagrange.runs import Attempt
    from stratopt.solvers.lagrange.schedule import Schedule, Weights
    from stratopt.solvers.lagrange.solver import _Search

    rng = np.random.default_rng(1)
    moved = 0
    for _ in range(12):
        problem = _random_limited(rng)
        model, engine = PenaltyModel.build(problem), LocalEngine(problem)
        if not model.relevant.any():
            continue
        searches = []
        for learn in (False, True):
            ascent = Level(model, engine)
            schedule = Schedule(model, Weights(model, 1.0), ascent, np.random.default_rng(0), 5.0, True)
            search = _Search(problem, model, engine, schedule, None, lambda _msg: None)
            prices = ascent.prices.copy()
            a, value = _exact_oracle(problem, model, prices)
            search.take(np.ones(model.n), Attempt(np.asarray(a), value, 0.1, []), prices, learn=learn)
            assert search.lagrangian == value
            searches.append((ascent, prices))
        (still, before), (taught, start) = searches
        assert np.array_equal(still.prices, before) and still.runs == 0
        moved += taught.runs > 0 or not np.array_equal(taught.prices, start)
    assert moved >= 3


def test_prices_from_a_relaxation_bring_the_next_run_and_every_priced_one_to_them():
    """Before a relaxation's prices come, one run in BOUND_EVERY is a bound run; once they come
    (:meth:`Schedule.priced`), the very next run is a bound run at the ascent's prices, and then
    every PRICED_EVERY-th run."""
    from stratopt.solvers.lagrange import Level
    from stratopt.solvers.lagrange.schedule import BOUND_EVERY, PRICED_EVERY, Schedule, Weights

    assert PRICED_EVERY < BOUND_EVERY
    problem = _tight_problem()
    model, engine = PenaltyModel.build(problem), LocalEngine(problem)
    ascent = Level(model, engine)
    schedule = Schedule(model, Weights(model, 1.0), ascent, np.random.default_rng(0), 5.0, True)
    best = np.ones(model.n)
    before = [schedule.next(best)[1] is not None for _ in range(2 * BOUND_EVERY)]
    assert before == ([False] * (BOUND_EVERY - 1) + [True]) * 2
    schedule.next(best)  # an answer run: the next bound run is BOUND_EVERY - 2 runs away
    prices = np.full(len(model.room), 0.5)
    ascent.start_from(prices)
    schedule.priced()
    after = [schedule.next(best) for _ in range(2 * PRICED_EVERY + 1)]
    assert [lam is not None for _, lam in after] == [True] + ([False] * (PRICED_EVERY - 1) + [True]) * 2
    assert np.array_equal(after[0][1], prices)


def test_bound_runs_last_past_the_first_runs_first_answer():
    """A bound run gets at least FIRST_ANSWER_FACTOR times the first run's time to its first
    backtrack, never more than the length by size."""
    from stratopt.solvers.lagrange.schedule import BOUND_FRACTION, FIRST_ANSWER_FACTOR, Schedule

    price = np.zeros(2)
    s = Schedule(None, None, None, None, 20.0, True)  # type: ignore[arg-type]
    assert s.run_seconds(price, False, 100.0, True) == int(20 / BOUND_FRACTION)
    s.first_answer(7.7)
    assert s.run_seconds(price, False, 100.0, True) == int(FIRST_ANSWER_FACTOR * 7.7)
    s.first_answer(1.0)  # a quicker first answer never shortens them
    assert s.run_seconds(price, False, 100.0, True) == int(FIRST_ANSWER_FACTOR * 7.7)
    s.first_answer(50.0)
    assert s.run_seconds(price, False, 100.0, True) == 20
