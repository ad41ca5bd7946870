"""`stratopt iopddl` stopped by the harness: killed with SIGTERM at 3 random moments of a run on
a contest instance (once it has announced its first answer, which it does before any search), it
always prints a feasible answer as its last stdout line and exits 0.

IOPDDL G (816 vertices) goes through every stage of the command in a few seconds: the quick first
answer, greedy, toulbar2 on the presolved model in the command's own process and `lagrange` in a
child process beside it. Two runs at a time, and three moments (six took 22 s of CI's 15 minutes), to keep the test short."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import stratopt.cli.commands as commands
from stratopt import evaluate
from stratopt.cli import main
from stratopt.instances import load_problem
from stratopt.solvers.contest import least_usage

SHARED = Path(__file__).resolve().parents[2] / "shared" / "iopddl"
G = SHARED / "asplos-2025-iopddl-G.json.gz"


def _killed(after: float) -> tuple[int, list[int], float]:
    """(exit code, answer, seconds from the first answer to the kill) of one run killed ``after``
    seconds past its first announced answer."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stratopt", "iopddl", str(G), "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the first incumbent: from here on the command holds an answer
        if line.startswith("incumbent at"):
            break
    time.sleep(after)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    lines = out.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else [], after


@pytest.mark.skipif(not G.exists(), reason="../shared/iopddl is not beside the repository")
def test_sigterm_at_3_random_moments_always_answers() -> None:
    problem = load_problem(str(G))
    rng = random.Random(2025)
    moments = sorted(rng.uniform(0.0, 5.0) for _ in range(3))
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(_killed, moments))
    for code, answer, after in runs:
        assert code == 0, f"killed {after:.2f} s after its first answer: exit {code}"
        ev = evaluate(problem, answer)
        assert ev.feasible, f"killed {after:.2f} s after its first answer: {ev.violation}"


@pytest.mark.skipif(not G.exists(), reason="../shared/iopddl is not beside the repository")
def test_the_first_answer_is_feasible_and_immediate() -> None:
    """The answer the command holds before searching: feasible on G despite its forbidden pairs."""
    problem = load_problem(str(G))
    first = least_usage(problem)
    assert first is not None and evaluate(problem, first).feasible


def test_the_contest_clock_starts_with_the_process():
    """The harness times the whole process, Python's start and the imports included: the budget's
    clock counts the seconds before ``answer`` was called (a process that slept 0.5 s first)."""
    code = "import time; time.sleep(0.5); from stratopt.solvers.contest import process_age; print(process_age())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    age = float(out.stdout.strip())
    assert 0.45 <= age <= 60.0


def test_the_command_counts_its_process_start_and_a_call_in_process_does_not():
    """``stratopt iopddl`` as a process (its entry point after a 1 s sleep standing in for a slow
    start) reads the file more than a second after its clock began; ``main`` called in this long
    running process starts its clock at the call."""
    example = SHARED / "example.json"
    code = (
        "import sys, time; time.sleep(1.0); from stratopt.cli import entry; "
        f"sys.argv = ['stratopt', 'iopddl', {str(example)!r}, '5']; entry()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1].startswith("[")
    after = re.search(r"edges ([0-9.]+) s after the start", out.stderr)
    assert after is not None and float(after.group(1)) >= 1.0, out.stderr
    lines: list[str] = []
    original = commands.stderr
    commands.stderr = lines.append  # type: ignore[assignment]
    try:
        main(["iopddl", str(example), "5"])
    finally:
        commands.stderr = original  # type: ignore[assignment]
    read = next(line for line in lines if line.startswith("read "))
    assert float(re.search(r"edges ([0-9.]+) s after", read).group(1)) < 1.0  # type: ignore[union-attr]
