"""Resolve an INSTANCE argument: a built-in problem, a network in ``models/``, a path, or a Python
entry point (``module:function`` returning a graph or a PyTorch model and its example inputs).

Files are detected by content: an object with a ``problem`` field is an IOPDDL problem; one with
``"format": "stratopt-graph"`` is an operator graph (priced by :func:`stratopt.cost.build`); one with
``"format": "stratopt-placement"`` is a placement instance (:mod:`stratopt.placement`), which
:func:`load_problem` turns into its additive view.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratopt.errors import ModelError
from stratopt.graph.io import graph_from_dict, is_graph_dict
from stratopt.graph.ir import Graph
from stratopt.placement.instance import PlacementInstance, is_placement_dict, placement_from_dict
from stratopt.problem import StrategyProblem, from_iopddl_dict, read_json

if TYPE_CHECKING:
    from stratopt.cost import Costing

__all__ = [
    "BUILTIN",
    "catalogue",
    "is_entry_point",
    "list_models",
    "list_placements",
    "load_entry_point",
    "load_instance",
    "load_placement",
    "load_priced",
    "load_problem",
    "models_dir",
]

#: Built-in instances shipped inside the package: name -> (file, one-line description).
BUILTIN: dict[str, tuple[str, str]] = {
    "example": ("iopddl-example.json", "IOPDDL contest example: 5 vertices, usage limit 50, optimum 445"),
}


def _builtin_path(name: str) -> Path:
    return Path(str(resources.files("stratopt.data").joinpath(BUILTIN[name][0])))


def models_dir() -> Path:
    """Where the networks live: ``$STRATOPT_MODELS``, the installed package's copy, or the
    source tree's ``models/``."""
    env = os.environ.get("STRATOPT_MODELS")
    if env:
        return Path(env)
    packaged = Path(str(resources.files("stratopt"))) / "models"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "models"


def _model_files() -> list[tuple[str, Any]]:
    """``(name, parsed JSON)`` for every ``*.json`` in :func:`models_dir`, sorted by name."""
    directory = models_dir()
    if not directory.is_dir():
        return []
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"{path}: not readable JSON ({exc})") from None
        found.append((path.name.removesuffix(".json"), data))
    return found


def list_models() -> list[tuple[str, dict[str, object]]]:
    """``(name, header)`` per network file in :func:`models_dir`, sorted by name; the header
    holds the graph's name, source and operator and edge counts."""
    found = []
    for name, data in _model_files():
        if not is_graph_dict(data):
            continue
        ops = data.get("operators", [])
        edges = sum(1 for op in ops for t in op.get("inputs", []) if t.get("from") is not None)
        found.append((name, {"source": data.get("source", ""), "operators": len(ops), "edges": edges}))
    return found


def list_placements() -> list[tuple[str, dict[str, object]]]:
    """``(name, header)`` per placement instance in :func:`models_dir`: node, edge and device counts."""
    found = []
    for name, data in _model_files():
        if not is_placement_dict(data):
            continue
        kinds: dict[str, int] = {}
        for d in data.get("devices", []):
            kinds[d.get("kind", "?")] = kinds.get(d.get("kind", "?"), 0) + 1
        header = {
            "nodes": len(data.get("nodes", [])),
            "edges": len(data.get("edges", [])),
            "devices": " + ".join(f"{k} {kind}" for kind, k in kinds.items()),
            "source": data.get("source", ""),
        }
        found.append((name, header))
    return found


def _resolve(instance: str | os.PathLike[str]) -> tuple[str, Path]:
    text = os.fspath(instance)
    if text in BUILTIN:
        return text, _builtin_path(text)
    path = Path(text)
    if path.exists():
        return text, path
    model = models_dir() / f"{text}.json"
    if "/" not in text and model.exists():
        return text, model
    builtin = ", ".join(sorted(BUILTIN))
    networks = ", ".join(name for name, _ in list_models()) or "none found"
    jobs = ", ".join(name for name, _ in list_placements()) or "none found"
    raise ModelError(
        f"{text}: no such file, built-in instance ({builtin}), network ({networks}), placement job ({jobs}) "
        "or Python entry point (module:function)"
    )


_ENTRY_POINT = re.compile(r"^(?P<module>[A-Za-z_][\w.]*|[^:]+\.py):(?P<function>[A-Za-z_]\w*)$")


def is_entry_point(text: str) -> bool:
    """Whether ``text`` names a Python entry point: ``package.module:function`` or ``file.py:function``.

    >>> is_entry_point("stratopt.importers.hf:llama"), is_entry_point("models/gpt.json")
    (True, False)
    """
    return _ENTRY_POINT.match(text) is not None


def load_entry_point(text: str) -> Graph:
    """The operator graph of a Python entry point (see :func:`is_entry_point`).

    The function is called with no arguments and returns either an operator :class:`Graph` or a
    pair ``(model, example_inputs)``, a PyTorch ``nn.Module`` and the tuple of tensors to run it on
    (on the ``meta`` device for a model larger than memory), which :func:`stratopt.importers.from_torch`
    imports. Every failure is a :class:`ModelError` naming the entry point.
    """
    import importlib
    import importlib.util
    import sys

    match = _ENTRY_POINT.match(text)
    if match is None:
        raise ModelError(f"{text}: not an entry point (expected module:function or file.py:function)")
    where, function = match["module"], match["function"]
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise ModelError(f"{text}: no such file {where}")
            spec = importlib.util.spec_from_file_location(f"_stratopt_entry_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ModelError(f"{text}: cannot load {where} as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ModelError:
        raise
    except Exception as exc:  # the user's module: any error on import is theirs to see, in one line
        raise ModelError(f"{text}: cannot import {where} ({type(exc).__name__}: {_first_line(exc)})") from None
    target = getattr(module, function, None)
    if target is None:
        raise ModelError(f"{text}: {where} has no attribute {function!r}")
    try:
        made = target() if callable(target) else target
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"{text}: calling {function}() failed ({type(exc).__name__}: {_first_line(exc)})") from None
    if isinstance(made, Graph):
        return made
    if isinstance(made, tuple) and len(made) == 2:
        from stratopt.importers import from_torch

        model, inputs = made
        return from_torch(model, inputs, name=function)
    raise ModelError(
        f"{text}: {f'{function}() returned' if callable(target) else f'{function} is a'} {type(made).__name__}; "
        "expected an operator Graph or (model, example_inputs), or a function returning one"
    )


_ENTRY_GRAPHS: dict[str, Graph] = {}


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


def load_instance(instance: str | os.PathLike[str]) -> StrategyProblem | Graph | PlacementInstance:
    """A StrategyProblem (IOPDDL file or built-in), an operator :class:`Graph` (network name,
    graph file, ONNX model file or ``module:function`` entry point) or a
    :class:`~stratopt.placement.PlacementInstance`. Raises :class:`ModelError` naming the path on
    any problem. An entry point is called once per process and its graph kept (a command may ask
    twice); :func:`load_entry_point` calls it afresh.

    Examples
    --------
    >>> type(load_instance("example")).__name__
    'StrategyProblem'
    >>> len(load_instance("alexnet"))
    14
    """
    text = os.fspath(instance)
    if text not in BUILTIN and not Path(text).exists() and is_entry_point(text):
        if text not in _ENTRY_GRAPHS:  # a command may ask twice; a 70B model imports once
            _ENTRY_GRAPHS[text] = load_entry_point(text)
        return _ENTRY_GRAPHS[text]
    text, path = _resolve(instance)
    if path.suffix.lower() == ".onnx":
        from stratopt.importers import from_onnx

        return from_onnx(path)
    data = read_json(path)
    if isinstance(data, dict) and "problem" in data:
        return from_iopddl_dict(data, source=text)
    if is_graph_dict(data):
        return graph_from_dict(data, source=text)
    if is_placement_dict(data):
        return placement_from_dict(data, source=text)
    raise ModelError(
        f"{text}: not a recognised instance (expected IOPDDL JSON with a 'problem' object, "
        'an operator graph with "format": "stratopt-graph" or a placement with "format": "stratopt-placement")'
    )


def load_problem(instance: str | os.PathLike[str]) -> StrategyProblem:
    """Load a StrategyProblem from a built-in name or an IOPDDL file path.

    Files may be plain or gzip-compressed JSON. An operator graph is refused with a hint to
    price it first (:func:`stratopt.cost.build`).

    Examples
    --------
    >>> load_problem("example").num_vertices
    5
    """
    loaded = load_instance(instance)
    if isinstance(loaded, PlacementInstance):
        from stratopt.placement import to_problem

        return to_problem(loaded)
    if isinstance(loaded, Graph):
        raise ModelError(f"{os.fspath(instance)}: an operator graph; price it first (stratopt.cost.build or --procs)")
    return loaded


def catalogue() -> dict[str, list[dict[str, Any]]]:
    """What ``stratopt models`` lists: networks, placement jobs and built-in problems, with sizes."""
    return {
        "networks": [{"name": n, **h} for n, h in list_models()],
        "placements": [{"name": n, **h} for n, h in list_placements()],
        "problems": [{"name": n, "description": d} for n, (_, d) in sorted(BUILTIN.items())],
    }


def load_placement(instance: str | os.PathLike[str]) -> PlacementInstance:
    """A placement job (name or file); a :class:`ModelError` for anything else."""
    loaded = load_instance(instance)
    if not isinstance(loaded, PlacementInstance):
        raise ModelError(
            f'{os.fspath(instance)}: not a placement instance (expected a file with "format": "stratopt-placement" '
            "or a placement job from 'stratopt models')"
        )
    return loaded


def load_priced(
    instance: str | os.PathLike[str],
    *,
    procs: int | None = None,
    profile: str | None = None,
    machine: str | None = None,
    memory_gb: float | None = None,
) -> tuple[StrategyProblem, Costing | None]:
    """The problem behind any instance, and its :class:`~stratopt.cost.Costing` for a network.

    A network (or graph or ONNX file) is priced by :func:`stratopt.cost.build` with the given
    options and the library's defaults for the rest; a problem file or a placement job (in its
    additive view) is taken as it is, and pricing options for it are refused with a
    :class:`ModelError` naming them.
    """
    from stratopt.cost import DEFAULT_PROCS, DEFAULT_PROFILE, build

    loaded = load_instance(instance)
    if not isinstance(loaded, Graph):
        given = [
            name
            for name, v in (("procs", procs), ("profile", profile), ("machine", machine), ("memory", memory_gb))
            if v is not None
        ]
        if given:
            kind = "a placement" if isinstance(loaded, PlacementInstance) else "a problem file"
            raise ModelError(
                f"{os.fspath(instance)}: {', '.join('--' + g for g in given)} apply to operator graphs, not to {kind}"
            )
        return load_problem(instance) if isinstance(loaded, PlacementInstance) else loaded, None
    costing = build(
        loaded,
        DEFAULT_PROCS if procs is None else procs,
        profile=profile or DEFAULT_PROFILE,
        machine=machine,
        memory_gb=memory_gb,
    )
    return costing.problem, costing
