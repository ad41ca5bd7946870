"""Write every network of the model zoo (stratopt.graph.zoo) to models/<name>.json.

Run after changing a builder:  python scripts/make_models.py
The files are data: `stratopt models` lists them and `stratopt solve NAME` reads them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stratopt.graph.io import save_graph
from stratopt.graph.zoo import ZOO


def main() -> int:
    out = Path(__file__).resolve().parents[1] / "models"
    out.mkdir(exist_ok=True)
    for name, entry in ZOO.items():
        graph = entry.build()
        path = out / f"{name}.json"
        save_graph(graph, path)
        print(
            f"{path.name:20s} {len(graph):4d} operators {len(graph.edges()):4d} edges {path.stat().st_size / 1024:8.1f} KiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
