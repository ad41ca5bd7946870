"""Resolve an INSTANCE argument: a built-in problem, a network in ``models/``, a path, or a Python
entry point (``module:function`` returning a graph or a PyTorch model and its example inputs).

Files are detected by content: an object with a ``problem`` field is an IOPDDL problem; one with
``"format": "stratopt-graph"`` is an operator graph (priced by :func:`stratopt.cost.build`); one with
``"format": "stratopt-placement"`` is a placement instance (:mod:`stratopt.placement`), which
:func:`load_problem` turns into its additive view.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from stratopt.cost import DEFAULT_PROCS, DEFAULT_PROFILE, Costing, build
from stratopt.errors import ModelError
from stratopt.graph.decoder import decoder_graph
from stratopt.graph.io import graph_from_dict, is_graph_dict
from stratopt.graph.ir import Graph
from stratopt.importers import from_onnx
from stratopt.instances.catalogue import BUILTIN, resolve
from stratopt.instances.entry_points import is_entry_point, load_entry_point
from stratopt.placement import to_problem
from stratopt.placement.instance import PlacementInstance, is_placement_dict, placement_from_dict
from stratopt.problem import StrategyProblem, from_iopddl_dict, read_json

_ENTRY_GRAPHS: dict[str, Graph] = {}  # an entry point's graph, imported once per command


def forget_entry_points() -> None:
    """Forget the graphs of entry points already called (each command imports its own afresh)."""
    _ENTRY_GRAPHS.clear()


def load_instance(instance: str | os.PathLike[str]) -> StrategyProblem | Graph | PlacementInstance:
    """A StrategyProblem (IOPDDL file or built-in), an operator :class:`Graph` (network name,
    graph file, ONNX model file, ``module:function`` entry point, or a decoder shape with its run,
    ``mpt:layers=32,d_model=4096,heads=32,vocab=50368,seq=2048,batch=48``) or a
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
    if text not in BUILTIN and not Path(text).exists() and text.startswith(("mpt:", "gpt:")):
        return decoder_graph(text)
    if text not in BUILTIN and not Path(text).exists() and is_entry_point(text):
        if text not in _ENTRY_GRAPHS:  # a command may ask twice; a 70B model imports once
            _ENTRY_GRAPHS[text] = load_entry_point(text)
        return _ENTRY_GRAPHS[text]
    text, path = resolve(instance)
    if path.suffix.lower() == ".onnx":
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
        return to_problem(loaded)
    if isinstance(loaded, Graph):
        raise ModelError(f"{os.fspath(instance)}: an operator graph; price it first (stratopt.cost.build or --procs)")
    return loaded


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
    say: Callable[[str], None] | None = None,
) -> tuple[StrategyProblem, Costing | None]:
    """The problem behind any instance, and its :class:`~stratopt.cost.Costing` for a network.

    A network (or graph or ONNX file) is priced by :func:`stratopt.cost.build` with the given
    options and the library's defaults for the rest; a problem file or a placement job (in its
    additive view) is taken as it is, and pricing options for it are refused with a
    :class:`ModelError` naming them. ``say`` receives a line on what was priced (a network) or
    how a placement job is read (its additive view).
    """
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
        if not isinstance(loaded, PlacementInstance):
            return loaded, None
        problem = load_problem(instance)
        if say is not None:
            say(
                f"{problem.name}: a placement instance, solved in its additive view (choices = devices; cost = total "
                "compute + transfer time, not the makespan: see 'stratopt place')"
            )
        return problem, None
    costing = build(
        loaded,
        DEFAULT_PROCS if procs is None else procs,
        profile=profile or DEFAULT_PROFILE,
        machine=machine,
        memory_gb=memory_gb,
    )
    if say is not None:
        say(costing.summary())
    return costing.problem, costing
