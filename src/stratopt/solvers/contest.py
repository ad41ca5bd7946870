"""The IOPDDL contest's interface: read a problem file, search within the time the harness gives,
print the best feasible answer as the last stdout line, also when the harness ends the run early
(SIGTERM or SIGINT)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from stratopt.problem import FORBIDDEN, evaluate, read_iopddl
from stratopt.problem.canonical import canonical
from stratopt.solvers.base import Status
from stratopt.solvers.dispatch import solve_auto

__all__ = ["answer", "process_age"]


def process_age() -> float:
    """Seconds since this process started (from Linux's /proc; 0 where that cannot be read)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, from the state on
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: start time
    except (OSError, ValueError, IndexError):
        return 0.0


def answer(
    path: str,
    timeout: float,
    say: Callable[[str], None],
    *,
    bound_share: float | None = None,
    started: float | None = None,
) -> bool:
    """Solve the problem in ``path`` within ``timeout`` seconds (reading it included) and print the
    answer ``[i, j, ...]`` as the last stdout line; ``[]`` when nothing feasible was found. Progress
    goes to ``say``. Returns whether an answer was printed. A SIGTERM or SIGINT during the search
    prints the best answer so far and ends the process at once (exit 0 with one, 1 without).
    ``bound_share``: lagrange's share of the time for its linear relaxation (None: its default).
    ``started``: the ``time.perf_counter()`` from which ``timeout`` counts (None: now); the
    ``stratopt`` command passes its process's start, since a harness times the whole process and
    Python's start and the imports take 1-3 s on a loaded 2-core machine.
    """
    start = time.perf_counter() if started is None else started
    original = read_iopddl(path)
    # The search runs on the canonical form (stratopt.problem.canonical): how the file numbers the
    # vertices and choices, and the units of its costs, usages and times, do not change the answer.
    form = canonical(original)
    problem = form.problem
    loaded = time.perf_counter() - start
    # Leave room to print the answer: 5% of the budget and at least half a second.
    budget = timeout - loaded - max(0.5, 0.05 * timeout)
    say(
        f"read {problem.num_vertices} vertices, {problem.num_edges} edges {loaded:.1f} s after the start (canonical form: "
        f"costs in units of {form.cost_scale}, usages of {form.usage_scale}); {budget:.1f} s left"
    )
    best: list[tuple[int, ...]] = []  # feasible assignments of the original problem as the search finds them

    def line() -> str:
        return "[" + ", ".join(map(str, best[-1])) + "]" if best else "[]"

    def leave(signum: int, frame: Any) -> None:  # the harness ends the run: answer with what there is
        sys.stdout.write(line() + "\n")
        sys.stdout.flush()
        os._exit(0 if best else 1)

    def keep(assignment: tuple[int, ...]) -> None:
        best.append(form.restore(assignment))
        cost = evaluate(original, best[-1]).objective
        say(f"incumbent at {time.perf_counter() - start:.1f} s: cost {cost}")

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, leave)
    first = least_usage(problem)
    if first is not None:  # an answer from the first moment, however early the harness stops us
        keep(first)
    result = (
        solve_auto(problem, time_limit=budget, progress=say, incumbent=keep, bound_share=bound_share)
        if budget > 0
        else None
    )
    if result is not None:
        took = time.perf_counter() - start
        gap = "" if result.gap is None else f", gap {100 * result.gap:.2f}%"
        scale = form.cost_scale
        cost = None if result.objective is None else result.objective * scale
        bound = None if result.bound is None else result.bound * scale
        say(
            f"{result.solver}: {result.status.value}, cost {cost}, bound {bound}{gap}, {took:.1f} s"
            f"{_beside(result.stats, scale)}{'' if result.bound is None else f'; bound from {result.bound_method}'}"
            f"{_relaxation(result.stats, scale)}"
        )
        if result.assignment is not None and result.status in (Status.OPTIMAL, Status.FEASIBLE):
            best.append(form.restore(result.assignment))
    print(line(), flush=True)
    return bool(best)


def least_usage(problem: Any) -> tuple[int, ...] | None:
    """Vertex by vertex, the most connected first, the choice of least usage (the cheapest of those)
    among the ones no forbidden entry rules out given the neighbours already chosen; where none is
    left, the choice with the fewest forbidden pairs, each neighbour it clashes with chosen again.
    An answer in about linear time, which the contest interface holds before any search starts, so
    that a harness that stops it at once still gets one; None where the pass fails or ends above
    the usage limit.

    >>> from stratopt import load_problem
    >>> least_usage(load_problem("example"))
    (0, 0, 0, 1, 0)
    """
    n = problem.num_vertices
    around: list[list[tuple[int, int, bool]]] = [[] for _ in range(n)]
    for e, (u, w) in enumerate(problem.edges.tolist()):
        around[u].append((e, w, True))
        around[w].append((e, u, False))
    picks = [-1] * n

    def clashes(v: int) -> tuple[Any, list[tuple[int, Any]]]:
        """Per choice of ``v``: forbidden pairs with the chosen neighbours; and each neighbour's row."""
        count = (np.asarray(problem.node_cost(v), dtype=np.float64) >= FORBIDDEN).astype(np.int64) * n
        rows = []
        for e, w, first in around[v]:
            if picks[w] >= 0:
                table = problem.edge_cost(e)
                bad = (table[:, picks[w]] if first else table[picks[w], :]) >= FORBIDDEN
                count = count + bad
                rows.append((w, bad))
        return count, rows

    def choose(v: int) -> list[tuple[int, Any]]:
        count, rows = clashes(v)
        usage = np.asarray(problem.usage(v), dtype=np.float64) if problem.has_usage else np.zeros(len(count))
        cost = np.asarray(problem.node_cost(v), dtype=np.float64)
        picks[v] = int(np.lexsort((cost, usage, count))[0])
        return [(w, bad) for w, bad in rows if bad[picks[v]]]

    for v in sorted(range(n), key=lambda x: -len(around[x])):
        for w, _ in choose(v):  # clashes left: the neighbours it clashes with choose again
            if choose(w):
                return None
    return tuple(picks) if evaluate(problem, picks).feasible else None


def _relaxation(stats: dict[str, Any], scale: int = 1) -> str:
    """What lagrange's linear relaxation gave (its own run's or the run beside), for the closing line
    (in the file's units: the canonical form's times ``scale``)."""
    lp = stats.get("lp") or (stats.get("beside") or {}).get("lp")
    if not lp:
        return ""
    got = "no bound" if lp.get("bound") is None else f"bound {lp['bound'] * scale:.10g}"
    if lp.get("method") == "kept":
        return f"; usage rows kept: {got} ({lp['status']}, {lp['seconds']} s)"
    if "skipped" in lp and lp.get("method") == "messages":
        return f"; relaxation skipped: {lp['skipped']}; its dual by message passing: {got} ({lp['status']})"
    if "skipped" in lp:
        return f"; relaxation skipped: {lp['skipped']}"
    branch = stats.get("branch") or (stats.get("beside") or {}).get("branch")
    cut = ""
    if branch:
        cost = "no answer" if branch.get("cost") is None else f"answer {branch['cost'] * scale:.10g}"
        claim = branch.get("highs_bound")
        said = "" if claim is None else f", HiGHS's bound {claim * scale:.10g} not taken"
        cut = f"; branch and cut: {cost} ({branch['status']}{said}, {branch['seconds']} s)"
    elif "branch" in lp:
        cut = f"; branch and cut {lp['branch']}"
    return f"; relaxation: {got} ({lp['status']}, {lp['seconds']} s, {lp['columns']} columns){cut}"


def _beside(stats: dict[str, Any], scale: int = 1) -> str:
    """What the run beside the main one gave, for the closing line (in the file's units)."""
    beside = stats.get("beside")
    if beside and "error" in beside:
        return f"; beside it {beside['solver']}: nothing ({beside['error']})"
    if beside:
        taken = ", its answer taken" if stats.get("answer_from") else ""
        cost = None if beside["objective"] is None else beside["objective"] * scale
        bound = None if beside["bound"] is None else beside["bound"] * scale
        return f"; beside it {beside['solver']}: cost {cost}, bound {bound}{taken}"
    return ""
