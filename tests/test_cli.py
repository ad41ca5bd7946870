"""The stratopt command line: contract output, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stratopt.cli import main
from stratopt.problem import evaluate, read_iopddl

from .conftest import needs_iopddl

EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "stratopt" / "data" / "iopddl-example.json"


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_solve_example_json(capsys):
    """The issue's acceptance command: optimal, 445, [0, 0, 2, 1, 0]."""
    code, out, _ = run(capsys, "solve", "example", "--solver", "brute", "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["status"], data["objective"], data["assignment"]) == ("optimal", 445, [0, 0, 2, 1, 0])
    assert set(data) >= {"instance", "solver", "status", "objective", "bound", "assignment", "wall_time", "stats"}


def test_solve_summary_says_which_solver(capsys):
    """Without --solver, solve says which solver 'auto' picked."""
    code, out, err = run(capsys, "solve", "example")
    assert code == 0 and "445" in out
    assert err.splitlines() == [
        "the dp optimum breaks the usage limit (usage 55 exceeds the limit 50 at time 50 (3 vertices live))",
        "solver: brute (picked by 'auto')",
    ]


def test_infeasible_solve_exits_1(tmp_path, capsys):
    """A proven-infeasible problem is a status with exit code 1, not an error."""
    data = json.loads(EXAMPLE.read_text())
    data["problem"]["usage_limit"] = 10
    (tmp_path / "p.json").write_text(json.dumps(data))
    code, out, _ = run(capsys, "solve", str(tmp_path / "p.json"), "--solver", "brute", "--json")
    assert code == 1 and json.loads(out)["status"] == "infeasible"


def test_evaluate(tmp_path, capsys):
    """evaluate accepts a list or a solve --json file; an infeasible assignment exits 1."""
    code, out, _ = run(capsys, "evaluate", "example", "--assignment", "[0,0,2,1,0]", "--json")
    assert code == 0 and json.loads(out)["objective"] == 445
    code, out, _ = run(capsys, "evaluate", "example", "-a", "0,0,1,1,0")
    assert code == 1 and "feasible: no: usage 55 exceeds the limit 50 at time 50" in out
    run(capsys, "solve", "example", "--json")
    saved = tmp_path / "r.json"
    main(["solve", "example", "--json"])
    saved.write_text(capsys.readouterr().out)
    code, out, _ = run(capsys, "evaluate", "example", "-a", str(saved))
    assert code == 0 and "objective: 445" in out


def _write(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    return str(path)


GOOD = {
    "problem": {
        "name": "t",
        "nodes": {"intervals": [[0, 2], [1, 3]], "costs": [[1, 2], [3]], "usages": [[1, 1], [1]]},
        "edges": {"nodes": [[0, 1]], "costs": [[0, 1]]},
        "usage_limit": 5,
    }
}


def _variant(path, value):
    data = json.loads(json.dumps(GOOD))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "args", "fragment"),
    [
        (json.dumps(GOOD)[:-9], [], "invalid JSON at line 1"),
        (_variant(["problem", "edges", "costs"], [[0, 1, 2]]), [], "edge 0 (0 -> 1): 3 entries, expected 2x1 = 2"),
        (_variant(["problem", "nodes", "usages"], [[1], [1]]), [], "vertex 0 usages: 1 entries for 2 choices"),
        (_variant(["problem", "edges", "nodes"], [[0, 5]]), [], "edge 0 (0 -> 5): vertex 5 does not exist"),
        (_variant(["problem", "usage_limit"], -3), [], "usage_limit -3 is negative"),
        (json.dumps(GOOD), ["evaluate", "-a", "[0]"], "assignment has 1 entries, expected 2"),
        (json.dumps(GOOD), ["evaluate", "-a", "[0, 4]"], "assignment[1] = 4 is out of range"),
        (json.dumps(GOOD), ["solve", "--solver", "nope"], "unknown solver 'nope'"),
        (json.dumps(GOOD), ["solve", "--time-limit", "-1"], "expected a positive number of seconds"),
        (json.dumps(GOOD), ["solve", "--bound-share", "1.5"], "expected a share from 0 to 1, got '1.5'"),
        (json.dumps(GOOD), ["solve", "--solver", "dp", "--bound-share", "0.2"], "--bound-share applies to"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, text, args, fragment):
    """Every bad input gives exit code 2 and exactly one stderr line naming the problem."""
    path = _write(tmp_path, text)
    command = args[:1] or ["solve"]
    code, out, err = run(capsys, command[0], path, *args[1:])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("stratopt: error: ") and fragment in err


def test_ray_is_for_lagrange_only(capsys):
    """--ray with another solver is a one-line error, exit 2 (nothing silently ignored)."""
    code, out, err = run(capsys, "solve", "example", "--solver", "greedy", "--ray")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--ray applies to --solver lagrange" in err


def test_missing_file_and_usage_errors(capsys):
    """A missing file and a missing argument are one-line errors too."""
    for args in (["solve", "nowhere.json"], ["solve"], ["evaluate", "example"], ["frobnicate"]):
        code, _, err = run(capsys, *args)
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_iopddl_example(capsys):
    """The contest interface prints the optimal answer as its last stdout line."""
    code, out, _ = run(capsys, "iopddl", str(EXAMPLE), "5")
    assert code == 0 and out.strip().splitlines()[-1] == "[0, 0, 2, 1, 0]"


def test_console_script_runs():
    """The installed command runs in a fresh process (no traceback on bad input)."""
    proc = subprocess.run([sys.executable, "-m", "stratopt", "solve", "nowhere.json"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(
        "stratopt: error: nowhere.json: no such file, built-in instance (example), network (alexnet, gpt,"
    )
    assert "placement job (inception3-large," in proc.stderr


# The contest instances: each must get a feasible answer. The command holds one from its first
# moment (least_usage, feasible on each of them by 7 s on 2 cores, reading and the canonical form
# included) and lagrange keeps only feasible answers, so A, S and P get 10 s rather than the contest
# limit; those three (the largest: about 25 s each with reading) and V (its 20 s limit; its
# relaxation's bound is tested in test_relaxation) are marked slow, left out of the default run (`python -m pytest -m slow` runs them); scripts/bench_iopddl.py measures cost and time
# at the contest limits on all sixteen.
LIMITS = {"B": 15, "G": 15, "V": 20, "A": 10, "S": 10, "P": 10}
_LARGEST = {"A", "S", "P", "V"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _LARGEST else n for n in LIMITS])
def test_iopddl_instances_feasible(name):
    """stratopt iopddl prints an assignment that evaluate() confirms feasible."""
    path = needs_iopddl(f"asplos-2025-iopddl-{name}.json.gz")
    proc = subprocess.run(
        [sys.executable, "-m", "stratopt", "iopddl", str(path), str(LIMITS[name])],
        capture_output=True,
        text=True,
        timeout=LIMITS[name] + 60,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assignment = json.loads(last)
    assert proc.returncode == 0 and assignment, proc.stderr[-2000:]
    ev = evaluate(read_iopddl(path), assignment)
    assert ev.feasible, ev.violation
    if name == "V" and (os.cpu_count() or 1) >= 2:  # wcsp does not prove V: lagrange joins it
        assert "; beside it lagrange: cost" in proc.stderr.splitlines()[-1], proc.stderr[-2000:]


def test_solve_network_pase_profile(capsys):
    """`solve alexnet --procs 4 --profile pase` reproduces PaSE's optimum and names configurations."""
    code, out, err = run(capsys, "solve", "alexnet", "--procs", "4", "--profile", "pase", "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "optimal"
    assert abs(data["objective"] - 148215719552) <= 1e-9 * 148215719552
    assert data["graph"]["procs"] == 4 and data["graph"]["units"] == "flops"
    assert len(data["graph"]["configs"]) == 14 and data["graph"]["names"][0] == "conv1"
    assert "alexnet: 14 operators, 13 edges, p = 4, profile pase" in err


def test_solve_explain_default_profile(capsys):
    """--explain prints a per-operator table of compute, communication and memory."""
    code, out, _ = run(capsys, "solve", "gpt", "--procs", "8", "--machine", "h100", "--explain")
    assert code == 0
    assert "per-operator costs (us" in out and "lm_head1" in out and "memory MiB" in out
    code, out, _ = run(capsys, "solve", "gpt", "--procs", "8", "--explain", "--json")
    data = json.loads(out)
    assert sum(r["total"] for r in data["explain"]) == pytest.approx(data["objective"], rel=1e-9)


def test_models_lists_networks(capsys):
    """`stratopt models` lists every network with its vertex and edge counts."""
    code, out, _ = run(capsys, "models", "--json")
    data = json.loads(out)
    names = {m["name"]: m for m in data["networks"]}
    assert code == 0
    assert {"alexnet", "inception3", "rnnlm", "transformer", "resnet101", "gpt", "resnet50", "vgg19"} <= set(names)
    assert (names["alexnet"]["operators"], names["alexnet"]["edges"]) == (14, 13)


def test_graph_bad_input_exits_2(tmp_path, capsys):
    """p = 0, a malformed graph file and graph options on a problem file: exit 2, one line."""
    code, out, err = run(capsys, "solve", "alexnet", "--procs", "0")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "positive integer" in err
    from stratopt.graph.io import graph_to_dict
    from stratopt.graph.zoo import ZOO

    data = graph_to_dict(ZOO["alexnet"].build())
    data["operators"][1]["inputs"][0]["shape"] = [128, 96, 55, 54]
    (tmp_path / "g.json").write_text(json.dumps(data))
    code, out, err = run(capsys, "solve", str(tmp_path / "g.json"), "--procs", "4")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "operator 'pool1': input 0 expects shape [128, 96, 55, 54]" in err
    code, _, err = run(capsys, "solve", "example", "--procs", "4")
    assert code == 2 and "--procs apply to operator graphs" in err
    code, _, err = run(capsys, "solve", "alexnet", "--machine", "tpu")
    assert code == 2 and "unknown machine 'tpu'" in err


def test_iopddl_answers_when_the_harness_sends_sigterm(tmp_path):
    """A contest harness kills at its limit: on SIGTERM `stratopt iopddl` prints the best feasible
    assignment found so far as its last stdout line (sent here once it announces an incumbent).
    The signal goes to the whole process group, as `timeout` sends it: the worker processes end
    without printing anything (they must not answer with their stale copy of the handler)."""
    import os
    import signal

    import numpy as np

    from stratopt import StrategyProblem, write_iopddl

    rng = np.random.default_rng(7)
    n = 6000  # past 'auto's MIP sizes, and too wide for the DP: lagrange, its toulbar2 runs in workers
    edges = {(int(u), int(v)) for u, v in rng.integers(0, n, (3 * n, 2)) if u != v}
    p = StrategyProblem(
        rng.integers(0, 100, (n, 3)).tolist(),
        sorted(edges),
        [rng.integers(0, 100, (3, 3)) for _ in edges],
        intervals=[[v % 50, v % 50 + 10] for v in range(n)],
        usages=rng.integers(1, 10, (n, 3)).tolist(),
        usage_limit=6000,
    )
    path = tmp_path / "big.json"
    write_iopddl(p, path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stratopt", "iopddl", str(path), "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for line in proc.stderr:  # wait until a feasible assignment is held
            if line.startswith("incumbent at"):
                break
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = out.strip().splitlines()
    assignment = json.loads(lines[-1])
    assert proc.returncode == 0 and len(assignment) == n
    assert evaluate(p, assignment).feasible
    assert not any(line.startswith("[") for line in lines[:-1])  # one answer: the parent's
