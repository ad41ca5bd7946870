"""Run `stratopt iopddl` on every IOPDDL contest instance with its contest time limit.

Prints a Markdown table: instance, cost, ratio to the best submitted cost, the proven lower
bound and status the command reports on stderr (its last line), the solver that answered,
seconds (wall time of the whole command, file reading included), its peak resident memory,
and whether `stratopt evaluate` confirms the answer feasible. The machine is recorded above the
table. This script never loads a problem itself: a child's peak memory as the kernel reports
it starts from its parent's at exec, so the parent stays small.

    python scripts/bench_iopddl.py [--dir ../shared/iopddl] [--only B,G] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Contest time limits (seconds, 8-core machine) and best submitted costs (../shared/iopddl/README.md).
CONTEST = {
    "B": (60, 532843),
    "G": (120, 217039),
    "V": (300, 1632051),
    "A": (60, 6548641531),
    "S": (240, 1534613444),
    "P": (240, 662197407330),
}


def run_one(path: Path, limit: float) -> tuple[list[int], float, float, str]:
    """(assignment, seconds, peak RSS in MiB, stderr tail) of one `stratopt iopddl` run."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "stratopt", "iopddl", str(path), str(limit)], stdout=out, stderr=err
        )
        _, _, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = 0  # reaped by wait4
        out.seek(0)
        err.seek(0)
        lines = out.read().strip().splitlines()
        answer = json.loads(lines[-1]) if lines else []
        return answer, seconds, usage.ru_maxrss / 1024, err.read()[-300:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "iopddl"))
    parser.add_argument("--only", default=",".join(CONTEST), help="comma-separated instance letters")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every time limit by this")
    args = parser.parse_args()

    print(
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}\n")
    print(
        "| instance | limit s | cost | best submitted | ratio | bound | status | solver | seconds | peak MiB | feasible |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.only.split(","):
        limit, best = CONTEST[name]
        path = Path(args.dir) / f"asplos-2025-iopddl-{name}.json.gz"
        if not path.exists():
            print(f"| {name} | {limit} | missing: {path} | | | | | | | | |")
            continue
        answer, seconds, peak, tail = run_one(path, limit * args.scale)
        if answer:
            ev = check(path, answer)
            ratio = f"{ev['objective'] / best:.3f}"
            ok = "yes" if ev["feasible"] else f"NO: {ev['violation']}"
            cost = ev["objective"]
        else:
            cost, ratio, ok = "[]", "-", "no answer: " + " ".join(tail.split())[-120:]
        solver, status, bound = summary(tail)
        print(
            f"| {name} | {limit * args.scale:g} | {cost} | {best} | {ratio} | {bound} | {status} | {solver} "
            f"| {seconds:.1f} | {peak:.0f} | {ok} |",
            flush=True,
        )


def summary(stderr_tail: str) -> tuple[str, str, str]:
    """(solver, status, bound) from the command's closing stderr line
    ("<solver>: <status>, cost <c>, bound <b>, <t> s in all")."""
    m = re.search(r"^([\w-]+): (\w+), cost \S+, bound (\S+),", stderr_tail, re.MULTILINE)
    if not m:
        return "?", "?", "?"
    bound = m.group(3)
    return m.group(1), m.group(2), "-" if bound == "None" else bound


def check(path: Path, answer: list[int]) -> dict:
    """`stratopt evaluate --json` of an answer, in its own process."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(answer, f)
        f.flush()
        cmd = [sys.executable, "-m", "stratopt", "evaluate", str(path), "--assignment", f.name, "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"evaluate failed on {path}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


if __name__ == "__main__":
    main()
