"""Placement algorithms: the appendix anchors, every schedule valid, CP-SAT against brute force,
memory, and the additive view meeting the exact solvers."""

from __future__ import annotations

import itertools

import pytest

from stratopt.errors import CrossCheckError, ModelError
from stratopt.placement import ALGORITHMS, Schedule, check_schedule, lower_bound, place, simulate, to_problem
from stratopt.placement.cpsat import _width
from stratopt.placement.instance import Device, PlacementInstance
from stratopt.placement.jobs import appendix, job
from stratopt.placement.list_scheduling import etf, memory_use
from stratopt.solvers.base import Limit, Status

from ._random import random_instance

QUICK = [a for a in ALGORITHMS if a != "cpsat"]


def test_heuristic_reaches_14_and_cpsat_proves_it():
    """TensorFlow's greedy places the appendix job with makespan 14; CP-SAT proves 14 optimal."""
    assert place(appendix(), "heuristic").makespan == 14
    best = place(appendix(), "cpsat")
    assert (best.makespan, best.status, best.bound) == (14, Status.OPTIMAL, 14)


def _brute_makespan(inst: PlacementInstance) -> float:
    """Least makespan over every placement and every global topological order (each order gives
    every device its order; some semi-active schedule is optimal)."""
    n, m = inst.num_nodes, inst.num_devices
    orders = [
        p for p in itertools.permutations(range(n)) if all(p.index(u) < p.index(v) for u, v in inst.edges.tolist())
    ]
    best = float("inf")
    for placement in itertools.product(range(m), repeat=n):
        use = memory_use(inst, placement)
        if any(d.memory is not None and use[i] > d.memory for i, d in enumerate(inst.devices)):
            continue
        for perm in orders:
            order = [[j for j in perm if placement[j] == i] for i in range(m)]
            best = min(best, simulate(inst, placement, order).makespan)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_cpsat_equals_brute_force(seed):
    """On tiny random instances (transfers and memory in half of them) CP-SAT's proven optimum is
    the brute-force least makespan, and no other algorithm beats it."""
    inst = random_instance(seed, nodes=(3, 5), devices=(2, 3), bandwidth=seed % 2 == 0, memory=seed % 4 == 1)
    truth = _brute_makespan(inst)
    best = place(inst, "cpsat", time_limit=20)
    assert best.status is Status.OPTIMAL
    assert best.makespan == pytest.approx(truth)
    assert best.bound == pytest.approx(truth)
    for algo in QUICK:
        try:
            other = place(inst, algo)
        except ModelError:  # etf: memory too tight for its greedy choices
            continue
        if other.fits_memory:
            assert other.makespan >= truth - 1e-9, algo


@pytest.mark.parametrize("seed", range(40))
def test_every_schedule_is_valid(seed):
    """Every algorithm's schedule passes the independent check, simulating its order reproduces
    it, and its makespan is at least the cheap lower bound."""
    inst = random_instance(1000 + seed, nodes=(4, 30), devices=(2, 8), bandwidth=seed % 2 == 0, integer=seed % 3 != 0)
    for algo in QUICK:
        r = place(inst, algo)
        assert check_schedule(inst, r.schedule) == []
        again = simulate(inst, r.placement, r.order)
        assert again.end == pytest.approx(r.schedule.end)
        assert r.makespan >= lower_bound(inst) - 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_on_float_costs_never_claims_too_much(seed):
    """With non-integral costs the model rounds durations down: its bound stays a lower bound on
    every other algorithm's makespan and its own makespan is the true (re-simulated) one."""
    inst = random_instance(2000 + seed, nodes=(5, 10), devices=(2, 4), bandwidth=True, integer=False)
    best = place(inst, "cpsat", time_limit=10)
    assert check_schedule(inst, best.schedule) == []
    assert best.bound is not None and best.bound <= best.makespan + 1e-9
    for algo in QUICK:
        assert place(inst, algo).makespan >= best.bound - 1e-9


def test_the_checker_catches_each_kind_of_violation():
    """A wrong duration, a start before an input arrives, an overlap on a device and a missing
    transfer are each reported."""
    inst = PlacementInstance.build(
        devices=[Device("a", "cpu"), Device("b", "cpu")],
        nodes=["x", "y", "z"],
        cost=[[2, 2], [3, 3], [1, 1]],
        edges=[("x", "y", 4.0)],
        bandwidth=2.0,
    )
    good = Schedule((0, 1, 0), (0.0, 4.0, 2.0), (2.0, 7.0, 3.0))
    assert check_schedule(inst, good) == []
    assert any("runs" in p for p in check_schedule(inst, Schedule((0, 1, 0), (0.0, 4.0, 2.0), (2.0, 7.5, 3.0))))
    assert any(
        "before its input" in p for p in check_schedule(inst, Schedule((0, 1, 0), (0.0, 3.0, 2.0), (2.0, 6.0, 3.0)))
    )
    assert any("overlap" in p for p in check_schedule(inst, Schedule((0, 1, 0), (0.0, 4.0, 1.0), (2.0, 7.0, 2.0))))
    # y on the same device as x needs no transfer: starting at 2 is fine there, not across devices.
    assert check_schedule(inst, Schedule((0, 0, 1), (0.0, 2.0, 0.0), (2.0, 5.0, 1.0))) == []
    assert check_schedule(inst, Schedule((0, 1, 1), (0.0, 2.0, 5.0), (2.0, 5.0, 6.0))) != []


def test_place_refuses_an_invalid_schedule(monkeypatch):
    """place() re-checks what an algorithm returns: a broken plan raises CrossCheckError."""
    import stratopt.placement.algorithms as placement

    monkeypatch.setattr(placement, "simulate", lambda inst, p, o: Schedule(tuple(p), (0.0,) * 5, (0.0,) * 5))
    with pytest.raises(CrossCheckError):
        placement.place(appendix(), "heuristic")


def test_etf_honours_device_memory():
    """With room for only two of three heavy nodes on the fast device, m-ETF keeps within every
    device's memory while TensorFlow's greedy (which ignores memory) overfills it."""
    inst = PlacementInstance.build(
        devices=[Device("cpu", "cpu", 100.0), Device("gpu", "gpu", 10.0)],
        nodes=["a", "b", "c"],
        cost=[[10, 1], [10, 1], [10, 1]],
        edges=[("a", "b", 0), ("b", "c", 0)],
        node_memory=[5, 5, 5],
    )
    assert not place(inst, "heuristic").fits_memory
    r = place(inst, "etf")
    assert r.fits_memory and sorted(r.placement) == [0, 1, 1]
    best = place(inst, "cpsat")
    assert best.fits_memory and best.status is Status.OPTIMAL and best.makespan == 12


def test_etf_reports_a_node_that_fits_nowhere():
    """A node bigger than every device is a clear error."""
    inst = PlacementInstance.build(devices=[Device("d", "cpu", 1.0)], nodes=["a"], cost=[[1]], node_memory=[2])
    with pytest.raises(ModelError, match="no device has that much memory"):
        etf(inst)


@pytest.mark.parametrize("seed", range(30))
def test_width_is_the_largest_antichain(seed):
    """The matching-based width equals the largest set of pairwise unreachable nodes (brute force)."""
    inst = random_instance(3000 + seed, nodes=(2, 9))
    n = inst.num_nodes
    reach = [set() for _ in range(n)]
    for j in reversed(inst.order):
        for v in inst.succs[j]:
            reach[j] |= {v} | reach[v]
    best = max(
        len(s)
        for r in range(1, n + 1)
        for s in itertools.combinations(range(n), r)
        if all(b not in reach[a] and a not in reach[b] for a, b in itertools.combinations(s, 2))
    )
    assert _width(inst) == best


def test_cpsat_on_the_networks_with_many_devices():
    """VGG-19 and ResNet-50 on 40 CPU cores + 20 GPUs: CP-SAT (with the devices cut to the graph's
    width) proves the list schedules optimal."""
    for network in ("vgg19", "resnet50"):
        inst = job(network, "large")
        best = place(inst, "cpsat", time_limit=30)
        assert best.status is Status.OPTIMAL
        assert best.makespan == place(inst, "heft").makespan


@pytest.mark.parametrize("seed", range(8))
def test_the_additive_view_meets_the_exact_solvers(seed):
    """The placement's additive view (choices = devices, transfer costs on edges) has one optimum
    for brute force, the DP, CP-SAT and HiGHS, and the 'additive' placement attains it."""
    from stratopt import evaluate
    from stratopt.harness import compare

    inst = random_instance(4000 + seed, nodes=(3, 8), devices=(2, 3), bandwidth=True)
    problem = to_problem(inst)
    comparison = compare(problem, ["brute", "dp", "cpsat", "mip-highs"], time_limit=20)
    assert comparison.agree
    r = place(inst, "additive")
    assert evaluate(problem, r.placement).objective == pytest.approx(comparison.optimum)


def test_every_placement_cpsat_status_is_mapped():
    """Each value of CP-SAT's status enum maps to a Status, with a limit exactly when needed."""
    from ortools.sat import cp_model_pb2

    from stratopt.placement.cpsat import map_status

    for name in list(cp_model_pb2.CpSolverStatus.keys()):
        for exact in (True, False):
            for has_hint in (True, False):
                status, limit = map_status(name, exact=exact, has_hint=has_hint)
                assert (limit is not None) == (status in (Status.FEASIBLE, Status.NO_SOLUTION)), name
    assert map_status("OPTIMAL", exact=False) == (Status.FEASIBLE, Limit.PRECISION)
    assert map_status("UNKNOWN", has_hint=True) == (Status.FEASIBLE, Limit.TIME)


def test_place_reports_an_infeasible_memory_budget_as_a_status():
    """Three nodes of 5 units on two devices of 6: CP-SAT proves that nothing fits, and place()
    returns INFEASIBLE without a placement instead of raising."""
    inst = PlacementInstance.build(
        devices=[Device("d0", "cpu", 6.0), Device("d1", "cpu", 6.0)],
        nodes=["a", "b", "c"],
        cost=[[1, 1], [1, 1], [1, 1]],
        edges=[("a", "b", 0)],
        node_memory=[5, 5, 5],
    )
    r = place(inst, "cpsat", time_limit=60)
    assert r.status is Status.INFEASIBLE and r.limit is None
    assert r.placement is None and r.makespan is None and r.fits_memory is None
    assert r.to_dict()["status"] == "infeasible" and r.to_dict()["placement"] is None


def test_heuristic_placements_say_why_there_is_no_proof():
    """List schedulers and the submodular greedy are FEASIBLE with Limit.HEURISTIC."""
    for algo in ("heuristic", "heft", "submodular"):
        r = place(appendix(), algo)
        assert r.status is Status.FEASIBLE and r.limit is Limit.HEURISTIC


def test_dispatch_serves_each_device_in_order_of_readiness():
    """Without a device order the simulation follows FlexFlow's Algorithm 1, as the strategy
    simulator does: node 4 (ready at 2) runs on d0 before node 3 (ready at 4), though both could
    start at 10 when d0 frees up and node 3 has the lower index."""
    inst = PlacementInstance.build(
        devices=[Device("d0", "cpu"), Device("d1", "cpu")],
        nodes=["a", "s1", "s2", "c", "b"],
        cost=[[10, 10], [2, 2], [2, 2], [1, 1], [1, 1]],
        edges=[("s1", "b", 0), ("s2", "c", 0)],
    )
    schedule = simulate(inst, [0, 1, 1, 0, 0])
    assert schedule.start == (0.0, 0.0, 2.0, 11.0, 10.0)
    assert schedule.makespan == 12.0 and check_schedule(inst, schedule) == []
