"""The choices an edge cannot tell apart (stratopt.solvers.lagrange.classes): classes checked row by
row against their tables, and the relaxation over them against the relaxation over every entry."""

from __future__ import annotations

import numpy as np
import pytest

from stratopt import StrategyProblem
from stratopt.solvers.lagrange import PenaltyModel
from stratopt.solvers.lagrange import relaxation as relaxation_module
from stratopt.solvers.lagrange.classes import EdgeClasses, edge_classes
from stratopt.solvers.lagrange.model import CostNetwork
from stratopt.solvers.lagrange.relaxation import lp_bound

from ..conftest import BIG

pytest.importorskip("pytoulbar2")


def _network(rng: np.random.Generator, edges: int = 30) -> CostNetwork:
    """Random tables built from few distinct rows and columns (forbidden entries among them)."""
    k = rng.integers(1, 6, size=12)
    pairs = np.array([rng.choice(12, size=2, replace=False) for _ in range(edges)])
    tables = []
    for u, v in pairs:
        base = rng.integers(0, 4, size=(int(rng.integers(1, 4)), int(rng.integers(1, 4)))).astype(np.float64)
        base[rng.random(base.shape) < 0.15] = np.inf
        table = base[rng.integers(0, base.shape[0], size=k[u])][:, rng.integers(0, base.shape[1], size=k[v])]
        tables.append(table.ravel())
    edge_off = np.concatenate([[0], np.cumsum([len(t) for t in tables])])
    node_off = np.concatenate([[0], np.cumsum(k)])
    return CostNetwork(k, node_off, np.zeros(node_off[-1]), pairs, edge_off, np.concatenate(tables), 0.0)


def test_classes_group_exactly_the_equal_rows_and_columns():
    """Two choices share a class exactly where their rows (columns) are equal entry by entry;
    classes are numbered from 0 by first row; each allowed cell has one entry, of its cell."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        net = _network(rng)
        got = edge_classes(net)
        cells = 0
        for e, (u, v) in enumerate(net.edges):
            table = net.edge[net.edge_off[e] : net.edge_off[e + 1]].reshape(net.k[u], net.k[v])
            rows = got.row_class[got.row_off[e] : got.row_off[e + 1]]
            cols = got.col_class[got.col_off[e] : got.col_off[e + 1]]
            for a in range(net.k[u]):
                for b in range(net.k[u]):
                    assert (rows[a] == rows[b]) == np.array_equal(table[a], table[b])
            for a in range(net.k[v]):
                for b in range(net.k[v]):
                    assert (cols[a] == cols[b]) == np.array_equal(table[:, a], table[:, b])
            assert got.rows[e] == rows.max() + 1 and got.cols[e] == cols.max() + 1
            assert list(dict.fromkeys(rows.tolist())) == list(range(got.rows[e]))
            allowed = {(rows[a], cols[b]) for a in range(net.k[u]) for b in range(net.k[v]) if np.isfinite(table[a, b])}
            mine = got.cell_edge == e
            assert set(zip(got.cell_row[mine].tolist(), got.cell_col[mine].tolist(), strict=True)) == allowed
            assert mine.sum() == len(allowed)
            for flat, r, c in zip(got.cell[mine], got.cell_row[mine], got.cell_col[mine], strict=True):
                local = flat - net.edge_off[e]
                a, b = divmod(int(local), int(net.k[v]))
                assert rows[a] == r and cols[b] == c
            cells += len(allowed)
        assert cells == len(got.cell) < np.isfinite(net.edge).sum()


def _every_entry(net: CostNetwork) -> EdgeClasses:
    """Each choice its own class: the relaxation over every entry, as before classes."""
    ku, kv = net.k[net.edges[:, 0]], net.k[net.edges[:, 1]]
    row_off = np.concatenate([[0], np.cumsum(ku)])
    col_off = np.concatenate([[0], np.cumsum(kv)])
    of = np.repeat(np.arange(len(ku)), ku * kv)
    local = np.arange(len(net.edge)) - net.edge_off[of]
    cell = np.flatnonzero(np.isfinite(net.edge))
    return EdgeClasses(
        rows=ku,
        cols=kv,
        row_off=row_off,
        col_off=col_off,
        row_class=np.arange(row_off[-1]) - np.repeat(row_off[:-1], ku),
        col_class=np.arange(col_off[-1]) - np.repeat(col_off[:-1], kv),
        cell=cell,
        cell_edge=of[cell],
        cell_row=(local // kv[of])[cell],
        cell_col=(local % kv[of])[cell],
    )


def _classed_problem(rng: np.random.Generator) -> StrategyProblem:
    """A random problem under a usage limit whose edge tables repeat rows and columns (forbidden
    entries and parallel edges among them), as resharding tables do."""
    n = int(rng.integers(4, 10))
    k = rng.integers(1, 5, size=n)
    node = [rng.integers(0, 30, size=kv).tolist() for kv in k]
    edges, tables = [], []
    for _ in range(int(rng.integers(n - 1, n + 4))):
        u, v = (int(x) for x in rng.choice(n, size=2, replace=False))
        base = rng.integers(0, 20, size=(int(rng.integers(1, 3)), int(rng.integers(1, 3))))
        base[rng.random(base.shape) < 0.1] = BIG
        table = base[rng.integers(0, base.shape[0], size=k[u])][:, rng.integers(0, base.shape[1], size=k[v])]
        edges.append((u, v))
        tables.append(table.ravel().tolist())
    starts = rng.integers(0, 5, size=n)
    return StrategyProblem(
        node,
        edges,
        tables,
        intervals=[[int(a), int(a + rng.integers(0, 4))] for a in starts],
        usages=[rng.integers(0, 9, size=kv).tolist() for kv in k],
        usage_limit=int(rng.integers(5, 30)),
    )


def test_the_relaxation_over_classes_has_the_value_of_the_one_over_entries(monkeypatch):
    """On random problems whose tables repeat rows and columns (forbidden entries, parallel
    edges, usage limits): HiGHS's value of the relaxation over classes equals its value over every
    entry, with fewer columns, and the certified bounds agree."""
    rng = np.random.default_rng(11)
    compared = smaller = 0
    for _ in range(400):
        problem = _classed_problem(rng)
        model = PenaltyModel.build(problem)
        if model.network is None or not len(model.network.edges):
            continue
        _, start, end = problem.time_slots
        classed = lp_bound(model, start, end, 60.0)
        with monkeypatch.context() as m:
            m.setattr(relaxation_module, "edge_classes", _every_entry)
            every = lp_bound(model, start, end, 60.0)
        assert classed.infeasible == every.infeasible
        assert classed.columns <= every.columns
        smaller += classed.columns < every.columns
        if classed.status == every.status == "Optimal":
            assert classed.objective == pytest.approx(every.objective, rel=1e-6, abs=1e-6)
            assert classed.bound == pytest.approx(every.bound, rel=1e-6, abs=1e-6)
            compared += 1
    assert compared >= 40 and smaller >= 60, (compared, smaller)
