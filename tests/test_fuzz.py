"""Careless input never gets a traceback: every kind of file a command reads, mutated at random (values
of the wrong type or sign, keys dropped, lists cut or grown, text truncated or garbled), makes the
command answer, say it found nothing, or refuse with one line on stderr (exit 0, 1 or 2), never raise.

Each property runs the real command line in this process (``stratopt.cli.main``); an exception that
escapes it fails the test with its traceback, and hypothesis prints the seed of the mutation.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import math
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratopt.cli import main
from stratopt.graph.io import graph_to_dict
from stratopt.instances import load_instance
from stratopt.machine import MACHINE_FORMAT, MACHINE_VERSION, MACHINES
from stratopt.problem import to_iopddl_dict

ROOT = Path(__file__).resolve().parents[1]
SEEDS = st.integers(0, 2**32 - 1)
#: Derandomized: CI draws the same files every run (thousands more were drawn while writing this).
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

#: Values a careless hand or a broken tool puts where another belongs.
ODD: list[Any] = [None, True, False, -1, 0, 1, 3, 2**63, -(2**40), 1e308, -0.5, 0.5, math.nan, math.inf]
ODD += ["", "x", "-1", "nan", [], {}, [0], [[1, 2]], {"a": 1}, [None]]


def _slots(data: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) of a JSON value, depth first."""
    found: list[tuple[Any, Any]] = []
    stack = [data]
    while stack:
        node = stack.pop()
        keys = list(node) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
        for k in keys:
            found.append((node, k))
            stack.append(node[k])
    return found


def mutate_json(data: Any, rng: random.Random) -> str:
    """``data`` with one to three random mutations, as the text of a file (sometimes cut short or
    with a character changed, so that it is no longer JSON)."""
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 3)):
        slots = _slots(data)
        if not slots:
            break
        node, key = rng.choice(slots)
        value, roll = node[key], rng.random()
        if roll < 0.15 and isinstance(node, dict):
            del node[key]
        elif roll < 0.3 and isinstance(value, list) and value:
            node[key] = value[: rng.randrange(len(value))] if rng.random() < 0.5 else [*value, rng.choice(value)]
        elif roll < 0.5 and isinstance(value, int | float) and not isinstance(value, bool):
            node[key] = rng.choice([-value, value * 10**9, value + 0.5, str(value), 0])
        else:
            node[key] = copy.deepcopy(rng.choice(ODD))
    text = json.dumps(data)
    roll = rng.random()
    if roll < 0.1:
        text = text[: rng.randrange(len(text))]
    elif roll < 0.2:
        i = rng.randrange(len(text))
        text = text[:i] + rng.choice('}]",:x0-') + text[i + 1 :]
    return text


def mutate_csv(rows: list[dict[str, str]], rng: random.Random) -> str:
    """A measurements table with cells changed, a column dropped or the text cut short."""
    rows = [dict(r) for r in rows]
    columns = list(rows[0])
    if rng.random() < 0.1:
        columns.remove(rng.choice(columns))
    for _ in range(rng.randint(1, 3)):
        row = rng.choice(rows)
        row[rng.choice(list(row))] = str(rng.choice([*ODD, "1e400", "3.5", "ddp", "megatron-tp3", "TRUE", " "]))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    text = out.getvalue()
    return text[: rng.randrange(len(text))] if rng.random() < 0.1 else text


def run(argv: list[str]) -> None:
    """The command ends with 0, 1 or 2, and an exit 2 says why in one line on stderr."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    assert code in (0, 1, 2), (argv, code)
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert lines and lines[-1].startswith("stratopt: error: ") and "Traceback" not in err.getvalue(), lines


def fuzz(text: str, suffix: str, commands: Callable[[str, str], list[list[str]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_text(text)
        for argv in commands(str(path), tmp):
            run(argv)


@FUZZ
@given(SEEDS)
def test_contest_files(seed: int) -> None:
    """IOPDDL problem files, as solve and evaluate read them."""
    text = mutate_json(to_iopddl_dict(load_instance("example")), random.Random(seed))
    fuzz(text, ".json", lambda f, _: [["evaluate", f, "-a", "0,0,0,0,0"], ["solve", f, "--time-limit", "5"]])


@FUZZ
@given(SEEDS)
def test_graph_files(seed: int) -> None:
    """Operator-graph files, as solve prices them and import reads them."""
    text = mutate_json(graph_to_dict(load_instance("alexnet")), random.Random(seed))
    fuzz(text, ".json", lambda f, _: [["import", f], ["solve", f, "--procs", "2", "--time-limit", "5"]])


@FUZZ
@given(SEEDS)
def test_placement_files(seed: int) -> None:
    """Placement jobs, as place and simulate read them."""
    data = json.loads((ROOT / "models" / "seed004-appendix.json").read_text())
    text = mutate_json(data, random.Random(seed))
    fuzz(text, ".json", lambda f, _: [["place", f, "--algo", "heuristic"], ["place", f, "--algo", "submodular"]])


_MEASURED = ROOT.parent / "shared" / "measurements" / "mpt-h100-bf16.csv"
_TABLE = [
    dict(
        zip(
            ("model", "layers", "d_model", "heads", "vocab", "seq_len", "gpus", "gpus_per_node", "strategy"),
            row,
            strict=True,
        )
    )
    | {"recompute": "false", "micro_batch": "4", "grad_accum": "1", "tokens_per_s_per_gpu": tps}
    for row, tps in (
        (("m1", "4", "512", "8", "1000", "1024", "8", "8", "fsdp"), "9000"),
        (("m2", "8", "1024", "16", "1000", "2048", "16", "8", "fsdp"), "4000"),
        (("m2", "8", "1024", "16", "1000", "2048", "8", "8", "megatron-tp2"), "3500"),
    )
]


@settings(FUZZ, max_examples=25)
@given(SEEDS)
def test_measurement_tables(seed: int) -> None:
    """Measured runs, as predict reads them and calibrate fits them."""
    text = mutate_csv(_TABLE, random.Random(seed))
    fuzz(
        text,
        ".csv",
        lambda f, tmp: [["predict", "--measurements", f], ["calibrate", f, "-o", str(Path(tmp) / "fit.json")]],
    )


@FUZZ
@given(SEEDS)
def test_machine_files(seed: int) -> None:
    """Machine files, as predict and a priced solve read them."""
    data = {"format": MACHINE_FORMAT, "version": MACHINE_VERSION, "machine": MACHINES["h100"].to_dict()}
    text = mutate_json(data, random.Random(seed))
    decoder = "mpt:layers=2,d_model=256,heads=4,vocab=1000"
    fuzz(
        text,
        ".json",
        lambda f, _: [
            ["predict", decoder, "--seq", "512", "--machine", f],
            ["solve", "alexnet", "--procs", "2", "--machine", f, "--time-limit", "5"],
        ],
    )


class _Launched(Exception):
    """check-plan accepted the plan and would start its processes now."""


@pytest.fixture(scope="module")
def exported_plan(tmp_path_factory) -> dict[str, Any]:
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    args = ["plan", "stratopt.torch.models:llama", "--nodes", "1", "--gpus-per-node", "4", "--no-simulate"]
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main([*args, "--expressible", "torch", "--export", str(path)]) == 0
    return json.loads(path.read_text())


@settings(FUZZ, max_examples=30, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=SEEDS)
def test_exported_plans(exported_plan, monkeypatch, seed: int) -> None:
    """Exported plans, as check-plan reads and validates them against the model (up to the moment it
    would start its processes, which the test stops)."""
    import stratopt.torch.check as check

    def launch(*_args: Any, **_kwargs: Any) -> None:
        raise _Launched

    monkeypatch.setattr(check, "run_ranks", launch)
    text = mutate_json(exported_plan, random.Random(seed))
    with contextlib.suppress(_Launched):
        fuzz(text, ".json", lambda f, _: [["check-plan", "stratopt.torch.models:llama", "--plan", f, "--world", "4"]])
