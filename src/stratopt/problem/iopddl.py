"""IOPDDL problem files (ASPLOS 2025 contest JSON, plain or gzip) and assignment lists."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.problem.core import StrategyProblem


def from_iopddl_dict(data: Any, *, source: str = "problem") -> StrategyProblem:
    """Build a problem from parsed IOPDDL JSON (``{"problem": {...}}``).

    Optional fields ``problem.nodes.names`` and ``problem.nodes.labels`` (ours; other readers
    ignore them) carry vertex names and choice labels.
    """

    def need(obj: Any, key: str, path: str, kind: type = dict) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise ModelError(f"{source}: {path}.{key} is missing")
        value = obj[key]
        if not isinstance(value, kind):
            raise ModelError(f"{source}: {path}.{key} must be a {'JSON object' if kind is dict else 'list'}")
        return value

    if not isinstance(data, dict):
        raise ModelError(f"{source}: expected a JSON object with a 'problem' field")
    prob = need(data, "problem", "")
    nodes = need(prob, "nodes", "problem")
    costs = need(nodes, "costs", "problem.nodes", list)
    intervals = need(nodes, "intervals", "problem.nodes", list)
    usages = need(nodes, "usages", "problem.nodes", list)
    if "edges" in prob:
        edges_obj = need(prob, "edges", "problem")
        pairs = need(edges_obj, "nodes", "problem.edges", list)
        edge_costs = need(edges_obj, "costs", "problem.edges", list)
    else:
        pairs, edge_costs = [], []
    for e, pair in enumerate(pairs):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ModelError(f"{source}: problem.edges.nodes[{e}] must be a pair [u, v], got {pair!r}")
    for e, row in enumerate(edge_costs):
        if not isinstance(row, list):
            raise ModelError(f"{source}: problem.edges.costs[{e}] must be a list of numbers")
    for v, row in enumerate(costs):
        if not isinstance(row, list):
            raise ModelError(f"{source}: problem.nodes.costs[{v}] must be a list of numbers")
    try:
        return StrategyProblem(
            costs,
            pairs,
            edge_costs,
            intervals=intervals,
            usages=usages,
            usage_limit=prob.get("usage_limit"),
            names=nodes.get("names"),
            labels=nodes.get("labels"),
            name=str(prob.get("name", source)),
        )
    except ModelError as exc:
        raise ModelError(f"{source}: {exc}") from None


def read_json(path: Path) -> Any:
    """A JSON file, gzipped or not, with a one-line :class:`ModelError` for a missing or malformed one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ModelError(f"{path}: broken gzip data ({exc})") from None
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise ModelError(f"{path}: not a JSON text file") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def read_iopddl(path: str | os.PathLike[str]) -> StrategyProblem:
    """Read an IOPDDL problem file (plain or gzip-compressed JSON, detected by content).

    Raises
    ------
    ModelError
        If the file is missing, is not JSON, or does not describe a valid problem; the message
        starts with the path.
    """
    path = Path(path)
    return from_iopddl_dict(read_json(path), source=str(path))


def to_iopddl_dict(problem: StrategyProblem) -> dict[str, Any]:
    """The IOPDDL JSON object of a problem.

    A problem without usages is written with empty intervals ``[0, 0]`` and zero usages, so that
    the contest's own tools (which require those fields) can read it; that adds no constraint.
    """
    n = problem.num_vertices
    nodes: dict[str, Any] = {}
    if problem.intervals is not None:
        nodes["intervals"] = problem.intervals.tolist()
        nodes["usages"] = [problem.usage(v).tolist() for v in range(n)]
    else:
        nodes["intervals"] = [[0, 0]] * n
        nodes["usages"] = [[0] * int(k) for k in problem.num_choices]
    nodes["costs"] = [problem.node_cost(v).tolist() for v in range(n)]
    if problem.names is not None:
        nodes["names"] = list(problem.names)
    if problem.labels is not None:
        nodes["labels"] = [list(lab) for lab in problem.labels]
    out: dict[str, Any] = {
        "name": problem.name,
        "nodes": nodes,
        "edges": {
            "nodes": problem.edges.tolist(),
            "costs": [
                problem.edge_flat[problem.edge_offsets[e] : problem.edge_offsets[e + 1]].tolist()
                for e in range(problem.num_edges)
            ],
        },
    }
    if problem.usage_limit is not None:
        out["usage_limit"] = problem.usage_limit
    return {"problem": out}


def write_iopddl(problem: StrategyProblem, path: str | os.PathLike[str]) -> None:
    """Write a problem as IOPDDL JSON; a path ending in ``.gz`` is gzip-compressed."""
    path = Path(path)
    text = json.dumps(to_iopddl_dict(problem), separators=(",", ":")).encode()
    if path.suffix == ".gz":
        text = gzip.compress(text, mtime=0)
    path.write_bytes(text)


def parse_assignment(text: str) -> list[int]:
    """An assignment as users write it: a JSON list, a comma-separated list, or a file holding either
    (or a ``solve --json`` object); a one-line :class:`ModelError` for anything else.

    Examples
    --------
    >>> parse_assignment("0,0,2, 1,0"), parse_assignment('{"assignment": [1, 2]}')
    ([0, 0, 2, 1, 0], [1, 2])
    """
    source = text
    path = Path(text)
    if not text.lstrip().startswith("[") and "," not in text and path.exists():
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"assignment file {source}: cannot read ({exc})") from None
    stripped = text.strip()
    if not stripped:
        raise ModelError(f"assignment {source!r} is empty")
    if stripped[0] in "[{":
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ModelError(
                f"assignment {source}: invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
            ) from None
        if isinstance(data, dict):
            data = data.get("assignment")
        if not isinstance(data, list):
            raise ModelError(f"assignment {source}: expected a list of choice indices")
        return data
    try:
        return [int(x) for x in stripped.replace(" ", "").strip(",").split(",")]
    except ValueError:
        if not path.exists() and "," not in stripped and "[" not in stripped:
            raise ModelError(f"assignment {source!r}: no such file, and not a list of choice indices") from None
        raise ModelError(f"assignment {source!r}: expected comma-separated integers") from None
