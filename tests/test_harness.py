"""The comparison harness: the case bank against every installed solver, and crafted mismatches."""

from __future__ import annotations

import json

import pytest

from stratopt import CrossCheckError, Limit, Result, Status, StrategyProblem, available, load_problem, solve
from stratopt.cli import main
from stratopt.harness import compare, default_solvers
from stratopt.harness.cases import CASES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_bank_against_every_solver(case):
    """Every installed solver on every case: the harness's checks pass and the agreed optimum is
    the hand-derived one (brute force, an independent enumeration, among the solvers)."""
    problem = case.build()
    names = available()
    assert "brute" in names and "dp" in names
    c = compare(problem, names)
    assert c.agree
    if case.optimum is None:
        assert c.infeasible and c.optimum is None
        assert all(r.assignment is None for r in c.results)
    else:
        assert c.optimum == pytest.approx(case.optimum, rel=1e-9)
        brute = next(r for r in c.results if r.solver == "brute")
        assert brute.objective == pytest.approx(case.optimum, rel=1e-12)


class FakeExact:
    """An 'exact' solver that answers a fixed assignment and calls it optimal."""

    name = "fake-exact"
    exact = True

    def __init__(self, assignment, bound=None):
        self.assignment, self.bound = tuple(assignment), bound

    def solve(self, problem, *, time_limit=None, seed=None, **_):
        return Result(self.name, Status.OPTIMAL, assignment=self.assignment, bound=self.bound)


class FakeHeuristic:
    name = "fake-heuristic"
    exact = False

    def __init__(self, assignment, bound):
        self.assignment, self.bound = tuple(assignment), bound

    def solve(self, problem, *, time_limit=None, seed=None, **_):
        return Result(self.name, Status.FEASIBLE, assignment=self.assignment, bound=self.bound, limit=Limit.HEURISTIC)


def test_worse_optimal_answer_raises():
    """A fake exact solver calling a worse assignment optimal is caught, with both answers shown."""
    p = load_problem("example")
    worse = (0, 1, 2, 1, 0)  # feasible (usage 50), cost 535
    assert solve(p, FakeExact(worse)).objective == 535
    with pytest.raises(CrossCheckError, match=r"exact solvers disagree: dp|exact solvers disagree: brute"):
        compare(p, ["brute", FakeExact(worse)])
    c = compare(p, ["brute", FakeExact(worse)], raise_on_mismatch=False)
    assert not c.agree and "535" in c.mismatch and "445" in c.mismatch and c.optimum is None


def test_bound_above_a_feasible_answer_raises():
    p = load_problem("example")
    with pytest.raises(CrossCheckError, match="a bound exceeds a feasible objective"):
        compare(p, ["brute", FakeHeuristic((0, 0, 2, 1, 0), bound=446)])


def test_infeasible_answer_raises():
    """An assignment that breaks the usage limit becomes an ERROR in solve() and a mismatch here."""
    p = load_problem("example")
    with pytest.raises(CrossCheckError, match="fake-exact failed: solver returned an infeasible assignment"):
        compare(p, [FakeExact((0, 0, 1, 1, 0))])


def test_answer_against_a_proof_of_infeasibility_raises():
    case = next(c for c in CASES if c.name == "infeasible-pair")
    with pytest.raises(CrossCheckError):
        compare(case.build(), ["brute", FakeHeuristic((0, 0), bound=None)])


def test_default_solvers_include_brute_only_when_small():
    small = load_problem("example")
    assert default_solvers(small)[0] == "brute"
    big = StrategyProblem([[0] * 8] * 12, [], [])  # 8**12 assignments
    assert "brute" not in default_solvers(big)


def test_compare_cli_on_the_contest_example(capsys):
    """`stratopt compare example.json --json` reports agreement and the optimum 445."""
    from .conftest import IOPDDL_DIR

    path = IOPDDL_DIR / "example.json"
    instance = str(path) if path.exists() else "example"
    code = main(["compare", instance, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["agree"] is True and data["optimum"] == 445
    assert {r["solver"] for r in data["results"]} >= {"brute", "dp", "greedy"}
    assert all(r["objective"] == 445 for r in data["results"] if r["status"] == "optimal")


def test_compare_cli_bad_solver(capsys):
    code = main(["compare", "example", "--solvers", "dp,nonsense"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "nonsense" in err


def test_compare_cli_table(capsys):
    code = main(["compare", "example", "--solvers", "brute,dp,greedy"])
    out = capsys.readouterr().out
    assert code == 0 and "proven optimum 445" in out


def test_demo_runs_and_plots(tmp_path, capsys):
    """The demo agrees, prints the strategy and writes a PNG."""
    plot = tmp_path / "demo.png"
    code = main(["demo", "--network", "alexnet", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert code == 0 and "agree: yes; proven optimum" in out and "per-operator costs" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_refuses_a_problem_file(capsys):
    code = main(["demo", "--network", "example", "--no-plot"])
    assert code == 2 and "needs a network" in capsys.readouterr().err


@pytest.mark.parametrize("network", ["alexnet", "vgg19"])
def test_zoo_under_a_binding_memory_limit(network):
    """p = 8, default profile, a memory limit halfway between the least memory any strategy needs
    and what the unconstrained optimum uses: that optimum becomes infeasible, the exact
    formulations agree on the constrained optimum, and the DP's relaxed optimum is a bound below
    it. (scripts/bench_memory.py runs every network.)"""
    from stratopt import evaluate
    from stratopt.cost import build
    from stratopt.graph.zoo import ZOO

    graph = ZOO[network].build()
    free = build(graph, 8, profile="default", machine="h100", memory_gb=1e9).problem
    relaxed = solve(free, "dp")
    used = sum(int(free.usage(v)[c]) for v, c in enumerate(relaxed.assignment))
    least = sum(int(free.usage(v).min()) for v in range(free.num_vertices))
    assert least < used
    limit_gb = (least + used) / 2 / 1e9
    problem = build(graph, 8, profile="default", machine="h100", memory_gb=limit_gb).problem
    assert not evaluate(problem, relaxed.assignment).feasible
    c = compare(problem, ["mip-highs", "cpsat", "mip-cbc", "dp"], time_limit=120)
    assert c.agree
    dp = next(r for r in c.results if r.solver == "dp")
    assert dp.status is Status.NO_SOLUTION and dp.bound == pytest.approx(relaxed.objective)
    # HiGHS proves both in seconds here (scripts/bench_memory.py); under a heavy load a run may
    # stop at its limit, and then every answer still lies above the DP's bound.
    found = [r.objective for r in c.results if r.objective is not None]
    assert found and dp.bound < min(found)
    assert c.optimum is None or c.optimum == min(found)


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_sweep_writes_records_table_and_plots(tmp_path, executor):
    from stratopt.harness.sweep import grid, run_sweep

    tasks = grid(["alexnet", "example"], [2, 4], ["dp", "greedy", "mip-highs"])  # greedy: no window search
    assert len(tasks) == 2 * 3 + 3  # the problem file gets one task per solver, not one per p
    records = run_sweep(tasks, tmp_path, executor=executor, workers=2, progress=False)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(records) == len(tasks)
    assert all(json.loads(line)["status"] in ("optimal", "feasible", "no_solution") for line in lines)
    by = {(r["instance"], r["procs"], r["solver"]): r for r in records}
    for p in (2, 4):
        assert by[("alexnet", p, "dp")]["objective"] == pytest.approx(by[("alexnet", p, "mip-highs")]["objective"])
        assert by[("alexnet", p, "greedy")]["objective"] >= by[("alexnet", p, "dp")]["objective"] * (1 - 1e-9)
    assert by[("example", None, "mip-highs")]["objective"] == 445
    table = (tmp_path / "results.md").read_text()
    assert "| alexnet | 2 |" in table and "| example | - |" in table
    for name in ("time_vs_size.png", "gaps.png", "cost_vs_procs.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_sweep_records_a_failing_cell(tmp_path):
    from stratopt.harness.sweep import Task, run_sweep

    records = run_sweep(
        [Task("alexnet", 4, "no-such-solver")], tmp_path, executor="serial", progress=False, plots=False
    )
    assert records[0]["status"] == "error" and "no-such-solver" in records[0]["error"]


@pytest.mark.slow  # (7 s, mostly Ray starting; kept out of the default run to keep CI short)
def test_sweep_on_ray(tmp_path):
    """The same sweep as Ray remote tasks on a local Ray cluster."""
    ray = pytest.importorskip("ray")
    from stratopt.harness.sweep import grid, run_sweep

    tasks = grid(["alexnet"], [2, 4], ["dp", "mip-highs"])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        records = run_sweep(tasks, tmp_path, executor="ray", progress=False, plots=False)
    finally:
        ray.shutdown()
    assert len(records) == 4 and all(r["status"] == "optimal" for r in records)
    serial = run_sweep(tasks, tmp_path / "serial", executor="serial", progress=False, plots=False)
    assert [r["objective"] for r in records] == pytest.approx([r["objective"] for r in serial])
