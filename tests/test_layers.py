"""The package's layers look only down, its imports sit at the top, and nothing imports in a cycle.

The layers are read from ``docs/concepts/layout.md`` (its numbered list under "Layers"), so the page
and the code cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "stratopt"
LAYOUT = ROOT / "docs" / "concepts" / "layout.md"

#: Imports of the package's own modules inside functions the house rules allow (DESIGN section 2).
MOST_LOCAL_IMPORTS = 10


def layers() -> dict[str, int]:
    """Each top-level module or package of ``stratopt`` and its layer (1 lowest), from the page."""
    text = LAYOUT.read_text().split("## Layers", 1)[1]
    out: dict[str, int] = {}
    for number, line in re.findall(r"^(\d+)\. (.+)$", text, re.M):
        for name in re.findall(r"`([a-z_]+)`", line.split(":", 1)[0]):
            out[name] = int(number)
    return out


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at the top)`` for every import of ``stratopt`` in ``path``; an import
    of names from a package counts as an import of each submodule so named."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "stratopt":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                known = (SRC.parent / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    SRC.parent / sub.replace(".", "/")
                ).is_dir()
                found.append((sub if known else node.module, node.lineno, id(node) in top))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno, id(node) in top) for a in node.names if a.name.split(".")[0] == "stratopt"]
    return found


SOURCES = sorted(SRC.rglob("*.py"))


def test_every_top_level_module_has_a_layer():
    """Nothing sits loose at the top of the package: every module and package is on the layout page."""
    known = layers()
    tops = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in SOURCES}
    assert tops - known.keys() == set(), "add these to the Layers list of docs/concepts/layout.md"
    assert known.keys() - tops == set(), "the layout page names modules that are not there"


def test_no_import_reaches_up_a_layer():
    """A module imports only from its own layer or the layers below it."""
    rank = layers()
    up = []
    for path in SOURCES:
        unit = path.relative_to(SRC).parts[0].removesuffix(".py")
        for target, line, _ in imports(path):
            parts = target.split(".")
            if len(parts) > 1 and rank[parts[1]] > rank[unit]:
                up.append(f"{path.relative_to(ROOT)}:{line} ({unit}, layer {rank[unit]}) imports {target}")
    assert up == []


def test_no_import_cycle():
    """The modules' imports form no cycle (a package's __init__ counts as the package)."""
    graph = nx.DiGraph()
    for path in SOURCES:
        me = module_name(path)
        graph.add_node(me)
        for target, _, _ in imports(path):
            if target != me:
                graph.add_edge(me, target)
    cycles = sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)
    assert cycles == []


def test_imports_sit_at_the_top():
    """At most a handful of the package's own imports hide inside functions."""
    local = [f"{p.relative_to(ROOT)}:{line}" for p in SOURCES for _, line, at_top in imports(p) if not at_top]
    assert len(local) <= MOST_LOCAL_IMPORTS, local


def test_the_layer_list_reads_the_page():
    """The parser finds the lowest and the highest layers (a page edit that breaks it fails here)."""
    rank = layers()
    assert rank["errors"] == 1 and rank["cli"] == max(rank.values()) and rank["problem"] < rank["solvers"]
