"""Resolve an INSTANCE argument: a built-in name or a path, its format detected by content."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from stratopt.errors import ModelError
from stratopt.problem import StrategyProblem, _read_json, from_iopddl_dict

__all__ = ["BUILTIN", "load_problem"]

#: Built-in instances shipped inside the package: name -> (file, one-line description).
BUILTIN: dict[str, tuple[str, str]] = {
    "example": ("iopddl-example.json", "IOPDDL contest example: 5 vertices, usage limit 50, optimum 445"),
}


def _builtin_path(name: str) -> Path:
    return Path(str(resources.files("stratopt.data").joinpath(BUILTIN[name][0])))


def load_problem(instance: str | os.PathLike[str]) -> StrategyProblem:
    """Load a StrategyProblem from a built-in name or a file path.

    Files may be plain or gzip-compressed JSON; an object with a ``problem`` field is read as
    IOPDDL. Raises :class:`~stratopt.errors.ModelError` naming the path on any problem.

    Examples
    --------
    >>> load_problem("example").num_vertices
    5
    """
    text = os.fspath(instance)
    path = _builtin_path(text) if text in BUILTIN else Path(text)
    if not path.exists() and text not in BUILTIN:
        names = ", ".join(sorted(BUILTIN))
        raise ModelError(f"{text}: no such file or built-in instance (built-in: {names})")
    data = _read_json(path)
    if isinstance(data, dict) and "problem" in data:
        return from_iopddl_dict(data, source=text)
    raise ModelError(f"{text}: not a recognised instance (expected IOPDDL JSON with a 'problem' object)")
