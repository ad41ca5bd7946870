"""Random small placement instances for the property tests."""

from __future__ import annotations

import numpy as np

from stratopt.placement.instance import Device, PlacementInstance


def random_instance(
    seed: int,
    *,
    nodes: tuple[int, int] = (3, 12),
    devices: tuple[int, int] = (2, 5),
    bandwidth: bool = False,
    memory: bool = False,
    integer: bool = True,
) -> PlacementInstance:
    """A random layered DAG. Nodes of one layer often share their whole predecessor set (so the
    submodular parallelism factor matters); devices come in kinds whose members share costs (so
    ties are common); small integer costs make exact ties likelier still."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(nodes[0], nodes[1] + 1))
    m = int(rng.integers(devices[0], devices[1] + 1))
    kinds = [f"k{int(rng.integers(0, 2))}" for _ in range(m)]
    devs = [Device(f"d{i}", kinds[i], float(rng.integers(5, 20)) if memory else None) for i in range(m)]
    layers: list[list[int]] = []
    j = 0
    while j < n:
        width = int(rng.integers(1, 4))
        layers.append(list(range(j, min(n, j + width))))
        j += width
    edges = []
    for k in range(1, len(layers)):
        earlier = [v for layer in layers[:k] for v in layer]
        shared = sorted(
            set(rng.choice(earlier, size=int(rng.integers(1, min(3, len(earlier)) + 1)), replace=False).tolist())
        )
        for v in layers[k]:
            preds = shared if rng.random() < 0.7 else sorted(set(rng.choice(earlier, size=1).tolist()))
            edges.extend((f"n{u}", f"n{v}", float(rng.integers(0, 8))) for u in preds)
    per_kind = {kind: rng.integers(1, 9, size=n) for kind in sorted(set(kinds))}
    cost = np.stack([per_kind[kinds[i]] for i in range(m)], axis=1).astype(float)
    if not integer:
        cost = cost * rng.uniform(0.5, 1.5, size=cost.shape)
    return PlacementInstance.build(
        devices=devs,
        nodes=[f"n{v}" for v in range(n)],
        cost=cost,
        edges=edges,
        node_memory=rng.integers(0, 6, size=n).astype(float) if memory else None,
        bandwidth=2.0 if bandwidth else None,
        name=f"random{seed}",
    )
