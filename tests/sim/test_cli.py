"""`stratopt simulate` on networks and `stratopt search`."""

from __future__ import annotations

import json

from stratopt.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_dp_strategy_with_outputs(capsys, tmp_path):
    """Default: the additive optimum, simulated; JSON has the iteration time, utilisation and the
    critical path; the trace and the chart are written."""
    trace, chart = tmp_path / "t.json", tmp_path / "g.png"
    code, out, err = run(
        capsys, "simulate", "alexnet", "-p", "4", "--json", "--trace", str(trace), "--gantt", str(chart)
    )
    assert code == 0
    data = json.loads(out)
    assert data["strategy"]["source"].startswith("dp")
    assert data["iteration_time"] > 0 and data["additive_cost"] > 0
    assert set(data["utilisation"]) == {"dev0", "dev1", "dev2", "dev3"}
    assert data["critical_path"][-1]["end"] == data["iteration_time"]
    assert json.loads(trace.read_text())["traceEvents"]
    assert chart.read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in err


def test_simulate_given_strategy_matches_search_output(capsys, tmp_path):
    """A 'search --json' output is a strategy file for simulate, which reproduces its best time."""
    code, out, _ = run(capsys, "search", "vgg19", "-p", "4", "--mcmc", "--budget", "60", "--seed", "5", "--json")
    assert code == 0
    found = json.loads(out)
    assert found["best"]["iteration_time"] <= found["start"]["iteration_time"]
    again = json.loads(run(capsys, "search", "vgg19", "-p", "4", "--budget", "60", "--seed", "5", "--json")[1])
    assert again["best"] == found["best"]
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"assignment": found["best"]["assignment"]}))
    code, out, _ = run(capsys, "simulate", "vgg19", "-p", "4", "--strategy", str(path), "--json")
    assert code == 0
    assert json.loads(out)["iteration_time"] == found["best"]["iteration_time"]


def test_simulate_and_search_bad_input(capsys):
    """Bad strategies, placement options on a network and bare problems: exit 2, one line."""
    for args in (
        ("simulate", "alexnet", "--strategy", "[1,2]"),
        ("simulate", "alexnet", "--strategy", '["a"]'),
        ("simulate", "alexnet", "--strategy", "0,1", "--solver", "dp"),
        ("simulate", "alexnet", "--placement", "x.json"),
        ("simulate", "seed004-appendix"),
        ("simulate", "seed004-appendix", "--placement", "{}", "--procs", "4"),
        ("simulate", "example"),
        ("search", "example"),
        ("search", "alexnet", "--start", "nowhere"),
        ("search", "alexnet", "--beta", "-1"),
    ):
        code, _out, err = run(capsys, *args)
        assert code == 2, args
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, args


def test_simulate_placement_trace(capsys, tmp_path):
    """A placement job still simulates from a 'place --json' object given inline (longer than a file
    name may be), and can write its trace."""
    trace = tmp_path / "p.json"
    code, out, _ = run(capsys, "place", "seed004-appendix", "--json")
    data = json.loads(out)
    code, out, _ = run(capsys, "simulate", "seed004-appendix", "--placement", json.dumps(data), "--trace", str(trace))
    assert code == 0 and "makespan 14" in out
    assert len([e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]) == 5


def test_simulate_and_search_summaries(capsys):
    """The text forms: simulate's iteration time, utilisation, critical path by task kind and
    busiest links; search's start and best lines (the same figures the JSON gives)."""
    code, out, _ = run(capsys, "simulate", "vgg19", "-p", "4")
    data = json.loads(run(capsys, "simulate", "vgg19", "-p", "4", "--json")[1])
    lines = out.splitlines()
    assert code == 0 and f"iteration time {data['iteration_time']:,.1f} us simulated" in lines[0]
    assert lines[1].startswith("device utilisation: dev0 ")
    kinds = data["critical_path_by_kind"]
    assert lines[2].startswith(f"critical path: {len(data['critical_path'])} tasks; {next(iter(kinds))} ")
    assert sum(kinds.values()) <= data["iteration_time"] + 1e-6
    code, out, _ = run(capsys, "search", "vgg19", "-p", "4", "--budget", "20", "--seed", "1")
    assert code == 0 and "MCMC from dp (20 proposals" in out and "  best " in out
