"""The one list of registered solvers.

Each entry names the module and class that implement it, the Python modules it needs and the
extra that installs them. :func:`available` checks the needed modules without importing them.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

import numpy as np

from stratopt.errors import SolverUnavailableError
from stratopt.problem import StrategyProblem
from stratopt.solvers.base import Solver
from stratopt.solvers.greedy import Greedy

__all__ = ["SolverInfo", "available", "get", "greedy_hint", "names"]


@dataclass(frozen=True)
class SolverInfo:
    name: str
    module: str
    attr: str
    requires: tuple[str, ...] = ()
    extra: str | None = None
    #: A formulation: constructed with :func:`greedy_hint` as its hint provider.
    hinted: bool = False


_SOLVERS: tuple[SolverInfo, ...] = (
    SolverInfo(
        "brute",
        "stratopt.solvers.brute",
        "BruteForce",
    ),
    SolverInfo(
        "dp",
        "stratopt.solvers.dp",
        "DynamicProgramming",
    ),
    SolverInfo(
        "dp-reference",
        "stratopt.solvers.dp_reference",
        "ReferenceDP",
    ),
    SolverInfo(
        "cpsat",
        "stratopt.solvers.cpsat",
        "CpSat",
        requires=("ortools",),
        hinted=True,
    ),
    SolverInfo(
        "mip-highs",
        "stratopt.solvers.mip",
        "MipHighs",
        requires=("pulp", "highspy"),
        hinted=True,
    ),
    SolverInfo(
        "mip-cbc",
        "stratopt.solvers.mip",
        "MipCbc",
        requires=("pulp",),
        hinted=True,
    ),
    SolverInfo(
        "wcsp",
        "stratopt.solvers.wcsp",
        "Wcsp",
        requires=("pytoulbar2",),
        hinted=True,
    ),
    SolverInfo(
        "lagrange",
        "stratopt.solvers.lagrange",
        "Lagrange",
        requires=("pytoulbar2",),
    ),
    SolverInfo(
        "greedy",
        "stratopt.solvers.greedy",
        "Greedy",
    ),
)

_BY_NAME = {info.name: info for info in _SOLVERS}


def names() -> list[str]:
    """All registered solver names, installed or not."""
    return [info.name for info in _SOLVERS]


def info(name: str) -> SolverInfo:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SolverUnavailableError(f"unknown solver {name!r}; registered solvers: {', '.join(names())}") from None


def available(name: str | None = None) -> bool | list[str]:
    """Whether solver ``name`` can run here; without a name, the list of those that can."""
    if name is None:
        return [n for n in names() if available(n)]
    return all(importlib.util.find_spec(mod) is not None for mod in info(name).requires)


def get(name: str) -> Solver:
    """An instance of the registered solver ``name``.

    Raises
    ------
    SolverUnavailableError
        If the name is unknown or its back-end is not installed (the message names the extra).
    """
    entry = info(name)
    if not available(name):
        hint = f"pip install 'stratopt[{entry.extra}]'" if entry.extra else "reinstall stratopt"
        raise SolverUnavailableError(f"solver {name!r} needs {', '.join(entry.requires)}: {hint}")
    cls = getattr(importlib.import_module(entry.module), entry.attr)
    return cls(hint=greedy_hint) if entry.hinted else cls()


def greedy_hint(problem: StrategyProblem) -> np.ndarray | None:
    """The formulations' default hint provider: greedy's assignment without a time limit (the
    window search needs one, so it does not run), or None when greedy finds none."""

    res = Greedy().solve(problem)
    return None if res.assignment is None else np.asarray(res.assignment)
