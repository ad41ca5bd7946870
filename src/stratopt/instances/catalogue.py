"""What ships and what is named: the built-in problems, the networks and placement jobs in
``models/``, and how a name or path resolves to a file."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratopt.errors import ModelError
from stratopt.graph.io import is_graph_dict
from stratopt.placement.instance import is_placement_dict

if TYPE_CHECKING:
    pass

#: Built-in instances shipped inside the package: name -> (file, one-line description).
BUILTIN: dict[str, tuple[str, str]] = {
    "example": ("iopddl-example.json", "IOPDDL contest example: 5 vertices, usage limit 50, optimum 445"),
}


def builtin_path(name: str) -> Path:
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
    return Path(__file__).resolve().parents[3] / "models"


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


def resolve(instance: str | os.PathLike[str]) -> tuple[str, Path]:
    text = os.fspath(instance)
    if text in BUILTIN:
        return text, builtin_path(text)
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


def catalogue() -> dict[str, list[dict[str, Any]]]:
    """What ``stratopt models`` lists: networks, placement jobs and built-in problems, with sizes."""
    return {
        "networks": [{"name": n, **h} for n, h in list_models()],
        "placements": [{"name": n, **h} for n, h in list_placements()],
        "problems": [{"name": n, "description": d} for n, (_, d) in sorted(BUILTIN.items())],
    }
