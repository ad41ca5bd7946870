"""Prove that a refactoring left behaviour unchanged: zoo and case-bank optima, lagrange runs, command outputs.

``python scripts/check_unchanged.py record`` writes ``tests/data/unchanged.json`` from the current
code; ``python scripts/check_unchanged.py`` (check) recomputes everything and prints a table of what
differs (exit 1 if anything does). The zoo part of the file is also pinned by
``tests/test_unchanged.py``; the README commands are only here (they take a minute).

Recorded: the DP optimum of every network in ``models/`` at p = 4 and 8 under both profiles
(``pase`` on the ``pase`` machine, ``default`` on ``h100``), every case-bank optimum by brute force,
seeded ``lagrange`` runs on random problems whose usage limit binds, and the stdout (and any file
written) of the commands below, the documented ones and the planning side's, with wall times masked.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "unchanged.json"

#: Commands whose output does not depend on the machine's speed.
README_COMMANDS = (
    "stratopt solve example",
    "stratopt evaluate example --assignment 0,0,1,1,0",
    "stratopt compare example --solvers brute,dp,mip-highs,mip-cbc,cpsat,greedy",
    "stratopt solve alexnet --procs 4 --profile pase",
    "stratopt solve vgg19 --procs 8 --machine a100 --explain",
    "stratopt place seed004-appendix --algo submodular --json",
    "stratopt place seed004-appendix --algo cpsat",
    "stratopt simulate vgg19 -p 8",
    "stratopt search vgg19 -p 8 --mcmc --budget 500 --seed 0",
    # the planning side: the plan, its baselines and export, pipelines (layout issue 33)
    "stratopt plan gpt --nodes 1 --gpus-per-node 4 --json",
    "stratopt plan gpt --nodes 2 --gpus-per-node 4",
    "stratopt plan vgg19 --nodes 1 --gpus-per-node 4 --memory 1 --no-simulate --json",
    "stratopt plan transformer --nodes 1 --gpus-per-node 8 --json",
    "stratopt plan gpt --nodes 1 --gpus-per-node 4 --no-simulate --export {tmp}/plan.json",
    "stratopt plan gpt --nodes 2 --gpus-per-node 4 --stages auto --microbatches 4 --json",
    "stratopt plan gpt --nodes 2 --gpus-per-node 4 --stages 2 --microbatches auto --no-simulate",
    "stratopt simulate gpt -p 8 --stages auto --microbatches 2 --json",
)

#: Seconds, timestamps and wall times vary from run to run; everything else must not.
_VARYING = (
    (re.compile(r'"(wall_time|seconds|build_seconds|priced_in)": [0-9.e-]+'), r'"\1": T'),
    (re.compile(r"\b\d+(\.\d+)? s\b"), "T s"),
    (re.compile(r"│\s+[0-9.]+\s+│\n"), "│ T │\n"),
    (re.compile(r"(time\s+)[0-9.]+ s"), r"\1T s"),
)


def zoo_optima() -> dict[str, object]:
    """DP optimum per (network, profile, p)."""
    from stratopt.cost import build
    from stratopt.instances import list_models, load_instance
    from stratopt.solvers import solve

    out: dict[str, object] = {}
    for name, _ in list_models():
        graph = load_instance(name)
        for profile, machine in (("pase", "pase"), ("default", "h100")):
            for p in (4, 8):
                costing = build(graph, p, profile=profile, machine=machine)
                result = solve(costing.problem, "dp")
                out[f"{name}/{profile}/p{p}"] = result.objective
    return out


def case_optima() -> dict[str, object]:
    """Brute-force optimum per case-bank case (None: infeasible)."""
    from stratopt.harness.cases import CASES
    from stratopt.solvers import solve

    out: dict[str, object] = {}
    for case in CASES:
        result = solve(case.build(), "brute")
        out[case.name] = result.objective
    return out


def lagrange_answers() -> dict[str, object]:
    """``lagrange`` (one process, a fixed number of runs, seeded) on seeded random problems whose
    usage limit binds: answer, bound and every run's cost, which a faithful move keeps exactly."""
    import numpy as np

    from stratopt import StrategyProblem
    from stratopt.solvers import solve

    out: dict[str, object] = {}
    for seed in range(8):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(8, 20))
        ks = rng.integers(2, 5, n).tolist()
        node = [rng.integers(0, 50, k).tolist() for k in ks]
        edges = [(int(u), int(v)) for u, v in (rng.choice(n, 2, replace=False) for _ in range(2 * n))]
        costs = [rng.integers(0, 30, ks[u] * ks[v]).tolist() for u, v in edges]
        starts = rng.integers(0, 10, n)
        intervals = [[int(s), int(s + rng.integers(1, 6))] for s in starts]
        usages = [rng.integers(1, 10, k).tolist() for k in ks]
        least = sum(min(u) for u in usages)
        problem = StrategyProblem(node, edges, costs, intervals=intervals, usages=usages, usage_limit=least // 2 + 5)
        r = solve(problem, "lagrange", workers=0, runs=6, seed=seed)
        runs = [h.get("cost") for h in r.stats.get("history", [])]
        out[f"random-{seed}"] = {"status": r.status.value, "objective": r.objective, "bound": r.bound, "runs": runs}
    return out


def readme_outputs() -> dict[str, str]:
    import tempfile

    out = {}
    for command in README_COMMANDS:
        with tempfile.TemporaryDirectory() as tmp:
            argv = [sys.executable, "-m", "stratopt", *command.format(tmp=tmp).split()[1:]]
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
            text = f"exit {proc.returncode}\n{proc.stdout.replace(tmp, '{tmp}')}"
            written = sorted(Path(tmp).iterdir())
            text += "".join(f"\n-- {f.name}\n{f.read_text()}" for f in written)
        for pattern, repl in _VARYING:
            text = pattern.sub(repl, text)
        out[command] = text
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=("record", "check"), default="check")
    parser.add_argument("--no-readme", action="store_true", help="skip the README commands")
    args = parser.parse_args()
    now = {"zoo": zoo_optima(), "cases": case_optima(), "lagrange": lagrange_answers()}
    if not args.no_readme:
        now["readme"] = readme_outputs()
    if args.mode == "record":
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"recorded {sum(len(v) for v in now.values())} values in {DATA.relative_to(ROOT)}")
        return 0
    before = json.loads(DATA.read_text())
    differ = 0
    for part, values in now.items():
        for key, value in values.items():
            same = before[part].get(key) == value
            differ += not same
            if not same:
                print(f"DIFFERS {part} {key}:\n  before: {before[part].get(key)!r}\n  now:    {value!r}")
        print(f"{part}: {len(values)} checked, {sum(before[part].get(k) == v for k, v in values.items())} identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
