"""The canonical form: an equivalent copy of a problem (vertices renumbered, choices reordered, costs,
usages and times rescaled, edges turned round) has the same canonical form as the problem, answers
map back, and the contest interface answers a copy as it answers the original."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stratopt.problem import FORBIDDEN, StrategyProblem, evaluate, read_iopddl, write_iopddl
from stratopt.problem.canonical import canonical, equivalent_copy
from stratopt.solvers import solve

SHARED = Path(__file__).resolve().parents[2] / "shared" / "iopddl"
FIELDS = ("node_flat", "edge_flat", "edges", "intervals", "usage_flat")


def random_problem(seed: int, n: int = 7) -> StrategyProblem:
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 4, size=n)
    nodes = [rng.integers(0, 30, size=int(c)) * 4 for c in k]
    pairs = {(int(u), int(v)) for u, v in rng.integers(0, n, size=(2 * n, 2)) if u != v}
    edges, matrices = [], []
    for u, v in sorted(pairs):
        matrix = rng.integers(0, 20, size=(int(k[u]), int(k[v]))) * 4
        matrix[rng.random(matrix.shape) < 0.1] = FORBIDDEN
        edges.append((u, v))
        matrices.append(matrix)
    starts = rng.integers(0, 10, size=n)
    intervals = [[int(s), int(s + rng.integers(0, 6))] for s in starts]
    usages = [rng.integers(1, 10, size=int(c)) * 2 for c in k]
    limit = int(sum(u.max() for u in usages) * 0.6) * 2
    return StrategyProblem(nodes, edges, matrices, intervals=intervals, usages=usages, usage_limit=limit)


def _same(a: StrategyProblem, b: StrategyProblem) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS) and a.usage_limit == b.usage_limit


@pytest.mark.parametrize("seed", range(25))
def test_a_copy_has_the_same_canonical_form_and_optimum(seed: int) -> None:
    problem = random_problem(seed)
    copy, factor, back = equivalent_copy(problem, seed + 100)
    assert _same(canonical(problem).problem, canonical(copy).problem)
    exact = solve(problem, "brute")
    again = solve(copy, "brute")
    assert (exact.objective is None) == (again.objective is None)
    if exact.objective is None:
        return
    assert again.objective == exact.objective * factor
    mapped = back.restore(again.assignment)
    checked = evaluate(problem, mapped)
    assert checked.feasible and checked.objective == exact.objective
    # the canonical form's own optimum, mapped back, is the original's
    form = canonical(problem)
    found = solve(form.problem, "brute")
    assert found.objective * form.cost_scale == exact.objective
    assert evaluate(problem, form.restore(found.assignment)).objective == exact.objective


def test_units_and_time_are_taken_out() -> None:
    """Costs in units of their common divisor, usages too, time as ranks of the end points."""
    problem = StrategyProblem(
        [[6, 12], [18]], [(0, 1)], [[[0], [6]]], intervals=[[10, 30], [20, 40]], usages=[[4, 8], [4]], usage_limit=12
    )
    form = canonical(problem)
    assert form.cost_scale == 6 and form.usage_scale == 4
    assert form.problem.node_flat.tolist() == [1, 2, 3] and form.problem.usage_limit == 3
    assert form.problem.intervals.tolist() == [[0, 2], [1, 3]]
    assert form.restore(form.adopt((1, 0))) == (1, 0)


@pytest.mark.parametrize("name", ["B", "G"])
def test_contest_copies_have_the_same_canonical_form(name: str) -> None:
    path = SHARED / f"asplos-2025-iopddl-{name}.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not there")
    problem = read_iopddl(path)
    copy, factor, back = equivalent_copy(problem, 3)
    form, other = canonical(problem), canonical(copy)
    assert _same(form.problem, other.problem)
    assert other.cost_scale == form.cost_scale * factor
    answer = tuple(int(np.argmin(problem.node_cost(v))) for v in range(problem.num_vertices))
    assert form.restore(form.adopt(answer)) == answer
    # an answer of the copy's canonical form is the same answer of the original's
    assert back.restore(other.restore(form.adopt(answer))) == answer


def test_the_contest_interface_answers_a_copy_as_the_original(tmp_path, capsys) -> None:
    """B's copy (renumbered, reordered, costs x factor): `stratopt iopddl` finds the contest's best
    cost times the factor, proven optimal, and the answer maps back to an optimal one of B."""
    from stratopt.solvers.contest import answer

    path = SHARED / "asplos-2025-iopddl-B.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is not there")
    problem = read_iopddl(path)
    copy, factor, back = equivalent_copy(problem, 11)
    written = tmp_path / "copy.json"
    write_iopddl(copy, written)
    lines: list[str] = []
    assert answer(str(written), 60.0, lines.append)
    found = [int(x) for x in capsys.readouterr().out.strip().splitlines()[-1].strip("[]").split(",")]
    assert evaluate(copy, found).objective == 532843 * factor
    assert evaluate(problem, back.restore(found)).objective == 532843
    assert any("optimal" in line for line in lines)


def test_from_flat_refuses_what_does_not_fit() -> None:
    from stratopt.errors import ModelError

    good = StrategyProblem.from_flat(np.array([2, 1]), np.array([1, 2, 3]), np.array([[0, 1]]), np.array([4, 5]))
    assert evaluate(good, (1, 0)).objective == 2 + 3 + 5
    with pytest.raises(ModelError, match="do not match"):
        StrategyProblem.from_flat(np.array([2, 1]), np.array([1, 2]), np.array([[0, 1]]), np.array([4, 5]))
    with pytest.raises(ModelError, match="joins a vertex to itself"):
        StrategyProblem.from_flat(np.array([2, 1]), np.array([1, 2, 3]), np.array([[1, 1]]), np.array([4]))
