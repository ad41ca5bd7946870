"""MIP back-ends through PuLP: HiGHS (``mip-highs``) and CBC (``mip-cbc``) on the shared formulation.

The model is :mod:`stratopt.solvers.formulation`'s: binary ``x[v, c]`` with an exactly-one row
per vertex, and for each allowed pair of an edge a *continuous* ``y[e, a, b] >= 0`` tied to the
``x`` by the marginal equalities. With integral ``x`` the equalities leave exactly one positive
``y`` per edge (the chosen pair, at 1), so ``y`` needs no integrality and the branch-and-bound
branches on ``x`` alone.

PuLP's own status is not trusted: after a time limit it reports "Optimal" for an incumbent.
HiGHS's status is read from the ``highspy.Highs`` object PuLP leaves on the problem, and CBC's
from its solution file ("Optimal" vs "Stopped on time") together with its log, which also gives
the best bound. Both get the relative gap 0 (HiGHS would otherwise stop at 1e-4) and a complete
warm start from the greedy heuristic.
"""

from __future__ import annotations

import math
import os
import re
import signal
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stratopt.errors import SolverError
from stratopt.problem import StrategyProblem
from stratopt.solvers.base import Limit, Status
from stratopt.solvers.driver import Driven, Limits, Raw
from stratopt.solvers.formulation import Formulation, Key, build

__all__ = ["MipCbc", "MipEncoding", "MipHighs", "map_cbc_status", "map_highs_status"]

#: Integrality tolerance when reading binary values back.
_HALF = 0.5


def map_highs_status(name: str, has_solution: bool) -> tuple[Status, Limit | None]:
    """Our status for a ``highspy.HighsModelStatus`` member name and whether HiGHS holds a
    feasible primal solution (every member is mapped; a test walks the enum)."""
    if name == "kOptimal":
        return Status.OPTIMAL, None
    if name == "kInfeasible":
        return Status.INFEASIBLE, None
    stopped = {
        "kTimeLimit": Limit.TIME,
        "kIterationLimit": Limit.ITERATION,
        "kSolutionLimit": Limit.ITERATION,
        "kMemoryLimit": Limit.MEMORY,
        "kInterrupt": Limit.INTERRUPTED,
        "kHighsInterrupt": Limit.INTERRUPTED,
        "kObjectiveBound": Limit.OTHER,
        "kObjectiveTarget": Limit.OTHER,
        "kUnknown": Limit.OTHER,
    }
    if name in stopped:
        return (Status.FEASIBLE if has_solution else Status.NO_SOLUTION), stopped[name]
    errors = {
        "kNotset",
        "kLoadError",
        "kModelError",
        "kPresolveError",
        "kSolveError",
        "kPostsolveError",
        "kModelEmpty",
        # The objective is bounded below by the constant and every variable is bounded: neither
        # can happen on a well-formed model.
        "kUnboundedOrInfeasible",
        "kUnbounded",
    }
    if name in errors:
        return Status.ERROR, None
    raise SolverError(f"unmapped HiGHS status {name}")


def map_cbc_status(word: str, has_solution: bool) -> tuple[Status, Limit | None]:
    """Our status for the first word of CBC's solution file (the words PuLP's CBC reader knows:
    "Optimal", "Infeasible", "Integer" (infeasible), "Unbounded", "Stopped") and whether the
    file holds a feasible solution; "Killed" is ours, for a run the watchdog stopped)."""
    if word == "Optimal":
        return Status.OPTIMAL, None
    if word in ("Infeasible", "Integer"):
        return Status.INFEASIBLE, None
    if word == "Stopped":
        return (Status.FEASIBLE if has_solution else Status.NO_SOLUTION), Limit.TIME
    if word == "Killed":  # our watchdog ended a run that overran its time limit
        return Status.NO_SOLUTION, Limit.TIME
    return Status.ERROR, None


@dataclass
class MipEncoding:
    """The shared formulation (the MIPs need no scaling)."""

    problem: StrategyProblem
    formulation: Formulation
    stats: dict[str, Any] = field(default_factory=dict)


class _Mip(Driven):
    """The PuLP model shared by both back-ends; subclasses set the back-end and read its status."""

    name = "mip"

    def build(self, problem: StrategyProblem) -> MipEncoding:
        form = build(problem)
        stats = dict(form.stats)
        if not form.infeasible:
            stats.update(x_vars=form.num_x, y_vars=form.num_y, rows=form.num_rows)
        return MipEncoding(problem, form, stats)

    def run(self, encoding: MipEncoding, limits: Limits) -> Raw:
        import pulp

        started = time.perf_counter()
        form = encoding.formulation
        model = pulp.LpProblem("stratopt", pulp.LpMinimize)
        var: dict[Key, pulp.LpVariable] = {}
        objective = []
        for key, w in form.variables():
            if len(key) == 2:
                var[key] = model.add_variable("x{}_{}".format(*key), 0, 1, cat=pulp.LpBinary)
            else:
                var[key] = model.add_variable("y{}_{}_{}".format(*key), 0)
            if w:
                objective.append((var[key], w))
        for name, kind, terms, rhs in form.rows():
            expr = pulp.LpAffineExpression([(var[k], coef) for k, coef in terms])
            model += (expr <= rhs if kind == "usage" else expr == rhs), name
        model += pulp.LpAffineExpression(objective)
        if limits.hint is not None:
            for key, value in form.values(np.asarray(limits.hint)):
                var[key].setInitialValue(value)

        build_seconds = round(time.perf_counter() - started, 3)
        stats: dict[str, Any] = {"build_seconds": build_seconds}
        remaining = limits.time_limit
        # The back-end loads the model (PuLP hands it over one variable at a time) before its own
        # clock starts; that costs about as long again as building it, so it is set aside, and
        # when even that does not fit, the back-end is skipped (the driver falls back to the hint).
        if remaining is not None:
            remaining -= 2 * build_seconds
            if remaining <= 0:
                stats["skipped"] = "no time left to hand the model to the back-end"
                return Raw(Status.NO_SOLUTION, Limit.TIME, stats=stats)
            remaining = max(0.01, remaining)
        status, limit, bound, backend = self._run(
            model, remaining, limits.seed, limits.threads, limits.hint is not None, limits.log
        )
        stats.update(backend)
        picked = None
        if status in (Status.OPTIMAL, Status.FEASIBLE):
            picked = {
                key[0]: key[1]
                for key, x in var.items()
                if len(key) == 2 and x.varValue is not None and x.varValue > _HALF
            }
        return Raw(status, limit, picked, bound=bound, stats=stats)

    def decode(self, encoding: MipEncoding, raw: Raw) -> Raw:
        form = encoding.formulation
        if raw.bound is not None:
            raw.bound = _bound(encoding.problem, raw.bound + form.constant)
        if raw.picked is not None:
            if len(raw.picked) != sum(1 for cs in form.choices if len(cs)):
                return Raw(Status.ERROR, stats={"error": "the back-end's solution leaves a vertex without a choice"})
            raw.assignment = tuple(form.assignment(raw.picked))
        if raw.status is Status.OPTIMAL:
            raw.bound = None  # solve() sets it to the recomputed objective
        return raw

    def _run(
        self, model: Any, time_limit: float | None, seed: int | None, threads: int, warm: bool, log: bool
    ) -> tuple[Status, Limit | None, float | None, dict[str, Any]]:
        raise NotImplementedError


class MipHighs(_Mip):
    """HiGHS through PuLP's in-process ``highspy`` interface, with ``mip_rel_gap = 0``.

    Examples
    --------
    The same model on HiGHS and on CBC (:class:`MipCbc`):

    >>> from stratopt import load_problem, solve
    >>> for name in ("mip-highs", "mip-cbc"):
    ...     r = solve(load_problem("example"), name, seed=0)
    ...     print(name, r.status.value, r.assignment, r.objective)
    mip-highs optimal (0, 0, 2, 1, 0) 445
    mip-cbc optimal (0, 0, 2, 1, 0) 445
    """

    name = "mip-highs"

    def _run(
        self, model: Any, time_limit: float | None, seed: int | None, threads: int, warm: bool, log: bool
    ) -> tuple[Status, Limit | None, float | None, dict[str, Any]]:
        import highspy
        import pulp

        class _WarmHighs(pulp.HiGHS):  # type: ignore[misc, name-defined]
            """PuLP's HiGHS, handing the variables' initial values to HiGHS before it runs."""

            def callSolver(self, lp: Any) -> None:
                if warm:
                    sol = highspy.HighsSolution()
                    sol.col_value = [v.varValue if v.varValue is not None else 0.0 for v in lp.variables()]
                    sol.value_valid = True
                    lp.solverModel.setSolution(sol)
                lp.solverModel.run()

        options: dict[str, Any] = {}
        if seed is not None:
            options["random_seed"] = int(seed)
        solver = _WarmHighs(msg=log, gapRel=0.0, timeLimit=time_limit, threads=threads, **options)
        model.solve(solver)
        highs = model.solverModel
        info = highs.getInfo()
        name = highs.getModelStatus().name
        has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
        status, limit = map_highs_status(name, has_solution)
        bound = float(info.mip_dual_bound)
        backend = {"highs_status": name, "nodes": int(info.mip_node_count)}
        return status, limit, (bound if math.isfinite(bound) else None), backend


class MipCbc(_Mip):
    """CBC (bundled with PuLP) with ``ratio 0``; status and bound read from its solution and log
    (an example beside HiGHS's in :class:`MipHighs`)."""

    name = "mip-cbc"

    def _run(
        self, model: Any, time_limit: float | None, seed: int | None, threads: int, warm: bool, log: bool
    ) -> tuple[Status, Limit | None, float | None, dict[str, Any]]:
        import pulp

        with tempfile.TemporaryDirectory(prefix="stratopt-cbc-") as tmp:
            log_path = Path(tmp) / "cbc.log"
            options = [f"randomCbcSeed {int(seed) + 1}"] if seed is not None else []
            with warnings.catch_warnings():
                # PuLP 3.x warns that its bundled CBC goes away in 4.0; pyproject pins pulp < 4.
                warnings.simplefilter("ignore", DeprecationWarning)
                solver = pulp.PULP_CBC_CMD(
                    msg=False,
                    gapRel=0.0,
                    timeLimit=None if time_limit is None else max(1, math.ceil(time_limit)),
                    threads=threads,
                    warmStart=warm,
                    logPath=str(log_path),
                    keepFiles=False,
                    options=options,
                )
            solver.tmpDir = tmp
            # CBC checks its time limit only between search steps and can overrun it by minutes
            # in root processing; past a grace period a watchdog kills it (PuLP may still be
            # writing the model file then, so the watchdog keeps looking until the solve ends).
            done = threading.Event()
            kills: list[int] = []
            if time_limit is not None:
                grace = time_limit + max(2.0, 0.05 * time_limit)
                threading.Thread(target=_watchdog, args=(tmp, grace, done, kills), daemon=True).start()
            try:
                model.solve(solver)
            except pulp.PulpSolverError:
                if not kills:
                    raise
            finally:
                done.set()
            killed = bool(kills)
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
        word = "Killed" if killed else _cbc_result_word(text, model)
        has_solution = model.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
        status, limit = map_cbc_status(word, has_solution)
        if log:
            print(text)
        return status, limit, _cbc_bound(text), {"cbc_status": word}


def _watchdog(marker: str, after: float, done: threading.Event, kills: list[int]) -> None:
    """From ``after`` seconds on, until ``done`` is set, kill the children running with ``marker``."""
    if done.wait(after):
        return
    while not done.is_set():
        kills.extend(_kill_children(marker))
        done.wait(0.2)


def _kill_children(marker: str) -> list[int]:
    """Kill this process's children whose command line mentions ``marker``; their pids (Linux
    /proc; nothing where /proc is missing)."""
    me = str(os.getpid())
    killed = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
            if ppid == me and marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue
    return killed


def _cbc_result_word(text: str, model: Any) -> str:
    """CBC's verdict: the word after "Result - " in its log, else PuLP's reading of the file."""
    import pulp

    m = re.search(r"^Result - (\w+)", text, re.MULTILINE)
    if m:
        word = m.group(1)
        return {"Problem": "Infeasible", "Linear": "Infeasible"}.get(word, word)
    return {
        pulp.LpStatusOptimal: "Optimal" if model.sol_status == pulp.LpSolutionOptimal else "Stopped",
        pulp.LpStatusInfeasible: "Infeasible",
        pulp.LpStatusNotSolved: "Stopped",
    }.get(model.status, "Error")


def _cbc_bound(text: str) -> float | None:
    """The best bound CBC states in its closing summary ("Lower bound:"), if any."""
    m = re.search(r"^Lower bound:\s+(\S+)", text, re.MULTILINE)
    if not m:
        return None
    try:
        value = float(m.group(1))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _bound(problem: StrategyProblem, value: float) -> float | int:
    """A back-end's bound in the problem's units; rounded up for integer costs (a MIP's bound
    carries its feasibility tolerance, so a hair is taken off first)."""
    if problem.is_integral:
        return math.ceil(value - 1e-6 * max(1.0, abs(value)))
    return value - 1e-9 * max(1.0, abs(value))
