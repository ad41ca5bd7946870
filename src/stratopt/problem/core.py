"""The core problem: a pairwise cost network with an optional usage (memory) constraint.

A :class:`StrategyProblem` has vertices ``0..n-1``; vertex ``v`` has ``K_v`` choices with costs
``node_cost(v)``; each edge ``e = (u, v)`` has a ``K_u x K_v`` cost matrix. Parallel edges are
kept: their costs add up. Optionally every vertex is live over a half-open time interval
``[s, e)`` and each choice has a usage; at every time step the summed usage of the live vertices
must stay at or below ``usage_limit``. The objective is the sum of chosen node and edge costs.

Its file format is the public IOPDDL problem JSON (ASPLOS 2025 contest), read and written by
:func:`read_iopddl` and :func:`write_iopddl`. Costs at or above :data:`FORBIDDEN` (the contest
writes 1e18) mark a forbidden choice or pair: :func:`evaluate` adds them up exactly as the
contest's evaluator does but reports the assignment infeasible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property
from operator import attrgetter
from typing import Any

import numpy as np

from stratopt.errors import ModelError
from stratopt.problem.numbers import FORBIDDEN, Number, float_costs


def _as_number_array(chunks: list[Any], what: str) -> np.ndarray:
    """One flat int64 array for integer input, float64 otherwise (no values at all are integral).

    ``chunks`` are Python lists of numbers and flat numpy arrays (what :func:`_flatten` returns).
    """
    arrays = []
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        try:
            arr = chunk if isinstance(chunk, np.ndarray) else np.asarray(chunk)
        except (ValueError, TypeError) as exc:
            raise ModelError(f"{what} must be numbers ({exc})") from None
        if arr.dtype == object:  # integers beyond int64 or mixed junk
            try:
                arr = np.asarray(chunk, dtype=np.float64)
            except (ValueError, TypeError):
                raise ModelError(f"{what} must be numbers") from None
        if arr.dtype == bool or arr.dtype.kind not in "iuf":
            raise ModelError(f"{what} must be numbers, found {arr.dtype.name} values")
        if arr.dtype.kind == "u":
            arr = arr.astype(np.float64) if int(arr.max()) >= 2**63 else arr.astype(np.int64)
        arrays.append(arr.ravel())
    if not arrays:
        return np.zeros(0, dtype=np.int64)
    arr = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    return arr.astype(np.float64, copy=False)


def _flatten(items: Sequence[Any], shapes: Sequence[tuple[int, ...]], label: Any) -> tuple[list, np.ndarray]:
    """Concatenate per-item cost vectors or matrices, checking each one's shape.

    ``label(i)`` names item ``i`` in error messages. Items may be flat sequences (row-major for a
    matrix, as IOPDDL stores them) or nested sequences / arrays of the exact shape. Returns the
    values as chunks (Python lists, and numeric numpy arrays kept as arrays, so that a priced
    network's tables are not turned into Python numbers and back) and each item's size.
    """
    chunks: list[Any] = []
    flat: list[Any] = []
    sizes = np.empty(len(items), dtype=np.int64)
    for i, (item, shape) in enumerate(zip(items, shapes, strict=True)):
        expected = math.prod(shape)
        if isinstance(item, list) and (not item or not isinstance(item[0], (list, tuple, np.ndarray))):
            if len(item) != expected:
                raise ModelError(f"{label(i)}: {_shape_text(len(item), shape)}")
            flat.extend(item)
        else:
            try:
                arr = np.asarray(item)
            except (ValueError, TypeError):
                raise ModelError(f"{label(i)}: not a regular list of numbers") from None
            if arr.ndim == 1 and arr.size == expected and len(shape) == 2:
                pass  # row-major flattened matrix
            elif arr.shape != shape:
                got = "x".join(map(str, arr.shape)) if arr.ndim else "a scalar"
                want = "x".join(map(str, shape))
                noun = "cost matrix" if len(shape) == 2 else "list"
                raise ModelError(f"{label(i)}: {noun} is {got}, expected {want}")
            if arr.dtype.kind in "iuf" and arr.dtype != bool:
                if flat:
                    chunks.append(flat)
                    flat = []
                chunks.append(arr.ravel())
            else:
                flat.extend(arr.ravel().tolist())
        sizes[i] = expected
    if flat:
        chunks.append(flat)
    return chunks, sizes


def _shape_text(got: int, shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"{got} entries for {shape[0]} choices"
    return f"{got} entries, expected {shape[0]}x{shape[1]} = {shape[0] * shape[1]}"


def _offsets(sizes: np.ndarray) -> np.ndarray:
    off = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=off[1:])
    return off


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


class StrategyProblem:
    """A pairwise cost network: one choice per vertex, node and edge costs, optional usage limit.

    Parameters
    ----------
    node_costs
        One cost sequence per vertex; its length is the vertex's number of choices.
    edges
        Pairs ``(u, v)`` of vertex indices. Parallel edges are allowed and add up.
    edge_costs
        One cost matrix per edge, shaped ``K_u x K_v``, as a nested sequence, a 2-D array or a
        flat row-major sequence (index ``c_u * K_v + c_v``, as IOPDDL stores it).
    intervals, usages, usage_limit
        The usage constraint: vertex ``v`` is live over ``[s_v, e_v)`` and choice ``c`` uses
        ``usages[v][c]``; at every integer time the live usage must not exceed ``usage_limit``.
        ``intervals`` and ``usages`` come together; ``usage_limit`` may be left out (no limit).
    names
        Optional unique vertex names; ``labels`` optional per-vertex choice labels.
    name
        The problem's name.

    Raises
    ------
    ModelError
        On any malformed part; the message names the vertex, edge or field.

    Examples
    --------
    >>> from stratopt import evaluate
    >>> p = StrategyProblem([[1, 2], [3, 0]], [(0, 1)], [[[0, 5], [5, 0]]])
    >>> p.num_vertices, p.num_edges, p.num_choices.tolist()
    (2, 1, [2, 2])
    >>> evaluate(p, [1, 1]).objective
    2
    """

    name: str
    _k: np.ndarray
    _names: tuple[str, ...] | None
    _labels: tuple[tuple[str, ...], ...] | None
    _node_off: np.ndarray
    _node_flat: np.ndarray
    _edges: np.ndarray
    _edge_off: np.ndarray
    _edge_flat: np.ndarray
    _intervals: np.ndarray | None
    _usage_flat: np.ndarray | None
    _usage_limit: Number | None

    def __init__(
        self,
        node_costs: Sequence[Sequence[Number] | np.ndarray],
        edges: Sequence[Sequence[int]] = (),
        edge_costs: Sequence[Any] = (),
        *,
        intervals: Sequence[Sequence[int]] | None = None,
        usages: Sequence[Sequence[Number]] | None = None,
        usage_limit: Number | None = None,
        names: Sequence[str] | None = None,
        labels: Sequence[Sequence[str]] | None = None,
        name: str = "problem",
    ) -> None:
        node_costs = list(node_costs)
        edges = list(edges)
        edge_costs = list(edge_costs)
        n = len(node_costs)
        if n == 0:
            raise ModelError("the problem has no vertices")

        k = np.empty(n, dtype=np.int64)
        for v, costs in enumerate(node_costs):
            try:
                k[v] = len(costs)
            except TypeError:
                raise ModelError(f"vertex {v}: costs must be a list of numbers") from None
            if k[v] == 0:
                raise ModelError(f"vertex {v}: empty choice list (every vertex needs a choice)")
        self._k = _readonly(k)
        self._names = self._check_names(names, n)
        self.name = str(name)

        flat, sizes = _flatten(node_costs, [(int(x),) for x in k], lambda v: f"vertex {self.vertex_label(v)}")
        self._node_off = _readonly(_offsets(sizes))
        self._node_flat = _readonly(self._check_costs(_as_number_array(flat, "node costs"), "node"))

        pairs = self._check_edges(edges, n)
        self._edges = _readonly(pairs)
        if len(edge_costs) != len(pairs):
            raise ModelError(f"{len(pairs)} edges but {len(edge_costs)} edge cost matrices")
        shapes = [(int(k[u]), int(k[v])) for u, v in pairs.tolist()]
        flat, sizes = _flatten(edge_costs, shapes, self.edge_label)
        self._edge_off = _readonly(_offsets(sizes))
        self._edge_flat = _readonly(self._check_costs(_as_number_array(flat, "edge costs"), "edge"))

        self._set_usage(intervals, usages, usage_limit)
        self._labels = self._check_labels(labels)
        self._frozen = True

    @classmethod
    def from_flat(
        cls,
        num_choices: np.ndarray,
        node_flat: np.ndarray,
        edges: np.ndarray,
        edge_flat: np.ndarray,
        *,
        intervals: np.ndarray | None = None,
        usage_flat: np.ndarray | None = None,
        usage_limit: Number | None = None,
        name: str = "problem",
    ) -> StrategyProblem:
        """A problem from its flat storage (as :attr:`node_flat`, :attr:`edges` and :attr:`edge_flat`
        hold it), checked as a whole rather than item by item: for problems derived from others (a
        renumbering, :func:`stratopt.problem.canonical.canonical`), where building one list per edge
        would cost more than the derivation."""
        k = np.asarray(num_choices, dtype=np.int64)
        pairs = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        n = len(k)
        if n == 0 or (k < 1).any():
            raise ModelError("every vertex needs at least one choice")
        if pairs.size and ((pairs < 0).any() or (pairs >= n).any() or (pairs[:, 0] == pairs[:, 1]).any()):
            raise ModelError("an edge names a vertex that does not exist, or joins a vertex to itself")
        node_off, edge_off = (
            _offsets(k),
            _offsets(k[pairs[:, 0]] * k[pairs[:, 1]]) if pairs.size else np.zeros(1, np.int64),
        )
        if len(node_flat) != node_off[-1] or len(edge_flat) != edge_off[-1]:
            raise ModelError("the flat costs do not match the vertices' choices and the edges' shapes")
        self = object.__new__(cls)
        for attr, value in (
            ("_k", _readonly(k)), ("_names", None), ("name", str(name)), ("_node_off", _readonly(node_off)),
            ("_node_flat", _readonly(np.asarray(node_flat))), ("_edges", _readonly(pairs)),
            ("_edge_off", _readonly(edge_off)), ("_edge_flat", _readonly(np.asarray(edge_flat))), ("_labels", None),
        ):  # fmt: skip
            object.__setattr__(self, attr, value)
        object.__setattr__(self, "_intervals", None)
        object.__setattr__(self, "_usage_flat", None)
        object.__setattr__(self, "_usage_limit", None)
        if intervals is not None:
            iv = np.asarray(intervals, dtype=np.int64).reshape(n, 2)
            use = np.asarray(usage_flat)
            if (iv[:, 0] > iv[:, 1]).any() or len(use) != node_off[-1] or (use < 0).any():
                raise ModelError("the intervals or usages do not fit the vertices")
            object.__setattr__(self, "_intervals", _readonly(iv))
            object.__setattr__(self, "_usage_flat", _readonly(use))
            object.__setattr__(self, "_usage_limit", usage_limit)
        object.__setattr__(self, "_frozen", True)
        return self

    # -- construction helpers ------------------------------------------------------------------

    def __setattr__(self, attr: str, value: Any) -> None:
        if self.__dict__.get("_frozen"):
            raise AttributeError("StrategyProblem is immutable; use replace() to derive a new one")
        object.__setattr__(self, attr, value)

    @staticmethod
    def _check_names(names: Sequence[str] | None, n: int) -> tuple[str, ...] | None:
        if names is None:
            return None
        names = tuple(names)
        if len(names) != n:
            raise ModelError(f"{len(names)} vertex names for {n} vertices")
        seen: dict[str, int] = {}
        for v, nm in enumerate(names):
            if not isinstance(nm, str) or not nm:
                raise ModelError(f"vertex {v}: name must be a non-empty string, got {nm!r}")
            if nm in seen:
                raise ModelError(f"vertex {v}: name {nm!r} is already used by vertex {seen[nm]}")
            seen[nm] = v
        return names

    def _check_labels(self, labels: Sequence[Sequence[str]] | None) -> tuple[tuple[str, ...], ...] | None:
        if labels is None:
            return None
        checked: list[tuple[str, ...]] = [tuple(map(str, lab)) for lab in labels]
        if len(checked) != self.num_vertices:
            raise ModelError(f"{len(checked)} label lists for {self.num_vertices} vertices")
        for v, lab in enumerate(checked):
            if len(lab) != self._k[v]:
                raise ModelError(f"vertex {self.vertex_label(v)}: {len(lab)} choice labels for {self._k[v]} choices")
        return tuple(checked)

    def _check_costs(self, flat: np.ndarray, kind: str) -> np.ndarray:
        if flat.dtype.kind == "f":
            bad = np.flatnonzero(np.isnan(flat) | (flat == -np.inf))
            if bad.size:
                i = int(bad[0])
                what = "NaN" if math.isnan(flat[i]) else "-inf"
                raise ModelError(f"{self._locate(kind, i)}: cost is {what}")
        return flat

    def _locate(self, kind: str, flat_index: int) -> str:
        off = self._node_off if kind == "node" else self._edge_off
        item = int(np.searchsorted(off, flat_index, side="right")) - 1
        pos = flat_index - int(off[item])
        if kind == "node":
            return f"vertex {self.vertex_label(item)} choice {pos}"
        kv = int(self._k[self._edges[item, 1]])
        return f"{self.edge_label(item)} entry ({pos // kv}, {pos % kv})"

    def _check_edges(self, edges: list, n: int) -> np.ndarray:
        pairs = np.empty((len(edges), 2), dtype=np.int64)
        for e, pair in enumerate(edges):
            try:
                u, v = pair
            except (TypeError, ValueError):
                raise ModelError(f"edge {e}: expected a pair of vertex indices, got {pair!r}") from None
            for x in (u, v):
                if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                    raise ModelError(f"edge {e}: vertex index {x!r} is not an integer")
                if not 0 <= x < n:
                    raise ModelError(f"edge {e} ({u} -> {v}): vertex {x} does not exist (the problem has {n} vertices)")
            if u == v:
                raise ModelError(
                    f"edge {e} joins vertex {self.vertex_label(u)} to itself; fold its diagonal into the node costs"
                )
            pairs[e] = (u, v)
        return pairs

    def _set_usage(self, intervals, usages, usage_limit) -> None:
        if (intervals is None) != (usages is None):
            missing = "usages" if usages is None else "intervals"
            raise ModelError(f"a usage constraint needs both intervals and usages; {missing} are missing")
        if intervals is None:
            if usage_limit is not None:
                raise ModelError("usage_limit is given but the vertices have no intervals and usages")
            self._intervals = self._usage_flat = self._usage_limit = None
            return
        n = self.num_vertices
        intervals = list(intervals)
        if len(intervals) != n:
            raise ModelError(f"{len(intervals)} intervals for {n} vertices")
        iv = np.empty((n, 2), dtype=np.int64)
        for v, pair in enumerate(intervals):
            try:
                s, e = pair
                if isinstance(s, bool) or isinstance(e, bool) or int(s) != s or int(e) != e:
                    raise TypeError
            except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite bound
                raise ModelError(
                    f"vertex {self.vertex_label(v)}: interval must be two integers [start, end], got {pair!r}"
                ) from None
            if s > e:
                raise ModelError(f"vertex {self.vertex_label(v)}: interval [{s}, {e}) is reversed (start after end)")
            if not -(2**62) <= s <= e <= 2**62:  # time points are 64-bit integers, with room for their sums
                raise ModelError(f"vertex {self.vertex_label(v)}: interval [{s}, {e}) lies beyond +-2**62")
            iv[v] = (s, e)
        self._intervals = _readonly(iv)

        usages = list(usages)
        if len(usages) != n:
            raise ModelError(f"{len(usages)} usage lists for {n} vertices")
        flat, _ = _flatten(usages, [(int(x),) for x in self._k], lambda v: f"vertex {self.vertex_label(v)} usages")
        u = _as_number_array(flat, "usages")
        if u.dtype.kind == "f" and not np.isfinite(u).all():
            i = int(np.flatnonzero(~np.isfinite(u))[0])
            raise ModelError(f"{self._locate('node', i)}: usage is {u[i]}")
        if u.size and u.min() < 0:
            i = int(np.argmin(u))
            raise ModelError(f"{self._locate('node', i)}: usage {u[i]} is negative")
        self._usage_flat = _readonly(u)

        if usage_limit is not None:
            if isinstance(usage_limit, bool) or not isinstance(usage_limit, (int, float, np.integer, np.floating)):
                raise ModelError(f"usage_limit must be a number, got {usage_limit!r}")
            if isinstance(usage_limit, (float, np.floating)) and not math.isfinite(usage_limit):
                raise ModelError(f"usage_limit must be finite, got {usage_limit}")
            if usage_limit < 0:
                raise ModelError(f"usage_limit {usage_limit} is negative")
            usage_limit = int(usage_limit) if isinstance(usage_limit, (int, np.integer)) else float(usage_limit)
        self._usage_limit = usage_limit

    # -- sizes and names -----------------------------------------------------------------------

    @property
    def num_vertices(self) -> int:
        return len(self._k)

    @property
    def num_edges(self) -> int:
        return len(self._edges)

    @property
    def num_choices(self) -> np.ndarray:
        """Number of choices per vertex (read-only int64 array)."""
        return self._k

    @property
    def largest_total(self) -> float:
        """The largest magnitude any sum of one allowed cost per vertex and per edge can reach
        (forbidden entries left out): what a float64 accumulator must hold exactly."""
        total = 0.0
        for v in range(self.num_vertices):
            allowed = np.abs(float_costs(self.node_cost(v), 0.0))
            total += float(allowed.max()) if allowed.size else 0.0
        for e in range(self.num_edges):
            allowed = np.abs(float_costs(self.edge_cost(e), 0.0))
            total += float(allowed.max()) if allowed.size else 0.0
        return total

    @property
    def search_space_size(self) -> int:
        """The number of complete assignments, prod(K_v), as an exact integer."""
        return math.prod(self._k.tolist())

    @property
    def names(self) -> tuple[str, ...] | None:
        return self._names

    @property
    def labels(self) -> tuple[tuple[str, ...], ...] | None:
        return self._labels

    def vertex_label(self, v: int) -> str:
        """``"3"`` or ``"3 (conv1)"`` when vertices have names: how messages name a vertex."""
        if self._names is None:
            return str(v)
        return f"{v} ({self._names[v]})"

    def edge_label(self, e: int) -> str:
        u, v = (int(x) for x in self._edges[e])
        if self._names is None:
            return f"edge {e} ({u} -> {v})"
        return f"edge {e} ({self._names[u]} -> {self._names[v]})"

    # -- costs ---------------------------------------------------------------------------------

    @property
    def is_integral(self) -> bool:
        """True when all costs are integers (objectives are then exact Python ints)."""
        return self._node_flat.dtype.kind == "i" and self._edge_flat.dtype.kind == "i"

    def node_cost(self, v: int) -> np.ndarray:
        """Cost vector of vertex ``v`` (a read-only view)."""
        return self._node_flat[self._node_off[v] : self._node_off[v + 1]]

    def edge_cost(self, e: int) -> np.ndarray:
        """Cost matrix ``K_u x K_v`` of edge ``e`` (a read-only view)."""
        u, v = self._edges[e]
        return self._edge_flat[self._edge_off[e] : self._edge_off[e + 1]].reshape(self._k[u], self._k[v])

    @cached_property
    def node_costs(self) -> tuple[np.ndarray, ...]:
        return tuple(self.node_cost(v) for v in range(self.num_vertices))

    @cached_property
    def edge_costs(self) -> tuple[np.ndarray, ...]:
        return tuple(self.edge_cost(e) for e in range(self.num_edges))

    @property
    def edges(self) -> np.ndarray:
        """``(m, 2)`` read-only array of edge endpoints, in input order."""
        return self._edges

    # Flat (CSR-like) storage for vectorised solvers, read-only: entry c of vertex v is
    # node_flat[node_offsets[v] + c]; entry (a, b) of edge e is edge_flat[edge_offsets[e] + a * K_v + b].
    node_offsets = property(attrgetter("_node_off"))
    node_flat = property(attrgetter("_node_flat"))
    edge_offsets = property(attrgetter("_edge_off"))
    edge_flat = property(attrgetter("_edge_flat"))

    # -- usage ---------------------------------------------------------------------------------

    @property
    def has_usage(self) -> bool:
        """True when vertices carry intervals and usages (a limit may still be absent)."""
        return self._intervals is not None

    @property
    def intervals(self) -> np.ndarray | None:
        return self._intervals

    @property
    def usage_flat(self) -> np.ndarray | None:
        return self._usage_flat

    @property
    def usage_limit(self) -> Number | None:
        return self._usage_limit

    def usage(self, v: int) -> np.ndarray:
        if self._usage_flat is None:
            raise ModelError("the problem has no usages")
        return self._usage_flat[self._node_off[v] : self._node_off[v + 1]]

    @cached_property
    def time_slots(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Compressed time axis ``(times, start_slot, end_slot)``.

        ``times`` are the sorted distinct interval endpoints; slot ``i`` covers
        ``[times[i], times[i+1])``, in which the live set does not change. Vertex ``v`` is live in
        slots ``start_slot[v] .. end_slot[v] - 1``. Checking every slot equals checking every
        integer time, as the contest does.
        """
        if self._intervals is None:
            raise ModelError("the problem has no intervals")
        times = np.unique(self._intervals)
        start = np.searchsorted(times, self._intervals[:, 0])
        end = np.searchsorted(times, self._intervals[:, 1])
        return _readonly(times), _readonly(start), _readonly(end)

    # -- derivation ----------------------------------------------------------------------------

    def replace(self, **changes: Any) -> StrategyProblem:
        """A new problem with some constructor arguments changed (``usage_limit=None`` drops the limit).

        Examples
        --------
        >>> p = StrategyProblem([[1], [2]], intervals=[[0, 1], [0, 1]], usages=[[1], [1]], usage_limit=2)
        >>> p.replace(usage_limit=None).usage_limit is None
        True
        """
        args: dict[str, Any] = {
            "node_costs": list(self.node_costs),
            "edges": self._edges.tolist(),
            "edge_costs": list(self.edge_costs),
            "intervals": None if self._intervals is None else self._intervals.tolist(),
            "usages": None if self._usage_flat is None else [self.usage(v) for v in range(self.num_vertices)],
            "usage_limit": self._usage_limit,
            "names": self._names,
            "labels": self._labels,
            "name": self.name,
        }
        unknown = set(changes) - set(args)
        if unknown:
            raise ModelError(f"replace() got unknown fields: {', '.join(sorted(unknown))}")
        if set(changes) == {"node_costs"}:
            costs = list(changes["node_costs"])
            if len(costs) == len(self._k) and all(len(c) == int(k) for c, k in zip(costs, self._k, strict=True)):
                return self._with_node_costs(costs)
        args.update(changes)
        return StrategyProblem(**args)

    def _with_node_costs(self, costs: list[Any]) -> StrategyProblem:
        """The same problem with new node costs (as many choices each), sharing every other array:
        a large model's edge tables are gigabytes, and the memory search reprices the nodes only."""
        flat, _ = _flatten(costs, [(int(x),) for x in self._k], lambda v: f"vertex {self.vertex_label(v)}")
        return self._sharing(_node_flat=_readonly(self._check_costs(_as_number_array(flat, "node costs"), "node")))

    def forbid(self, pairs: dict[int, np.ndarray]) -> StrategyProblem:
        """The same problem with the choice pairs of edge ``e`` where ``pairs[e]`` (a ``K_u x K_v``
        boolean matrix) is False forbidden, sharing the node costs (one copy of the edge tables)."""
        flat = np.array(self._edge_flat)
        for e, ok in pairs.items():
            part = flat[self._edge_off[e] : self._edge_off[e + 1]]
            part[~np.asarray(ok, dtype=bool).ravel()] = FORBIDDEN
        return self._sharing(_edge_flat=_readonly(flat))

    def edge_floats(self) -> np.ndarray:
        """:attr:`edge_flat` as float64 with forbidden entries infinite (read-only): made once, and
        shared by the problems that differ in their node costs only (a DP per memory price)."""
        made = self.__dict__.get("_edge_floats")
        if made is None:
            flat = self._edge_flat
            plain = flat.dtype == np.float64 and (flat.size == 0 or float(flat.max()) < FORBIDDEN)
            made = flat if plain else _readonly(float_costs(flat))
            object.__setattr__(self, "_edge_floats", made)
        return made

    def __getstate__(self) -> dict[str, Any]:  # a process the problem is sent to makes its own floats
        return {k: v for k, v in self.__dict__.items() if k != "_edge_floats"}

    def _sharing(self, **arrays: np.ndarray) -> StrategyProblem:
        out = object.__new__(type(self))
        for attr, value in self.__dict__.items():
            stale = attr == "_edge_floats" and "_edge_flat" in arrays
            if (attr.startswith("_") or attr == "name") and not stale:  # stored fields; cached properties recomputed
                object.__setattr__(out, attr, value)
        for attr, value in arrays.items():
            object.__setattr__(out, attr, value)
        return out

    def __repr__(self) -> str:
        limit = "" if self._usage_limit is None else f", usage_limit={self._usage_limit}"
        return (
            f"StrategyProblem({self.name!r}, vertices={self.num_vertices}, edges={self.num_edges}, "
            f"max_choices={int(self._k.max())}{limit})"
        )
