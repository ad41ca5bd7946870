"""Configurations: how an operator's iteration domain may be split over devices.

A configuration gives each domain axis a split count ``c_i``. The policy (:class:`ConfigPolicy`)
is explicit and reported: split counts are divisors of the axis size (or powers of two only),
each block keeps at least ``cutoff`` elements (an axis too small for any split stays whole; an
axis of whole units, ``attrs["units"]`` such as a mixture of experts' expert axis, one),
locked axes never split, and ``prod(c) <= p`` (or ``== p`` with ``exact``). PaSE's policy is
divisors, ``cutoff = 4``, ``<= p``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stratopt.errors import ModelError
from stratopt.graph.ir import Operator

__all__ = ["ConfigPolicy", "configurations", "divisors"]


@dataclass(frozen=True)
class ConfigPolicy:
    """Which configurations an operator may take on ``procs`` devices.

    Examples
    --------
    >>> ConfigPolicy(procs=4).describe()
    'p = 4; split counts: divisors of the axis size; at least 4 elements per block; prod(c) <= p'
    """

    procs: int
    powers_of_two: bool = False
    exact: bool = False
    cutoff: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.procs, int) or self.procs < 1:
            raise ModelError(f"the number of devices must be a positive integer, got {self.procs!r}")
        if self.cutoff < 1:
            raise ModelError(f"the minimum block size must be at least 1, got {self.cutoff!r}")

    def describe(self) -> str:
        kind = "powers of two dividing the axis size" if self.powers_of_two else "divisors of the axis size"
        rule = "prod(c) == p" if self.exact else "prod(c) <= p"
        return f"p = {self.procs}; split counts: {kind}; at least {self.cutoff} elements per block; {rule}"


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _axis_options(size: int, policy: ConfigPolicy, locked: bool, cutoff: int | None = None) -> list[int]:
    if locked:
        return [1]
    least = policy.cutoff if cutoff is None else cutoff
    options = [c for c in divisors(size) if c <= policy.procs and size // c >= least]
    if policy.powers_of_two:
        options = [c for c in options if c & (c - 1) == 0]
    # An axis too small for any split stays whole (PaSE does the same).
    return options or [1]


def _is_contiguous(sizes: tuple[int, ...], config: tuple[int, ...]) -> bool:
    """Leading axes split completely, then one partly split axis, then whole axes (a reshape's rule)."""
    i = 0
    while i < len(sizes) and config[i] == sizes[i]:
        i += 1
    return all(c == 1 for c in config[i + 1 :])


def configurations(op: Operator, policy: ConfigPolicy) -> np.ndarray:
    """All configurations of ``op`` under ``policy``, one row per configuration (int64).

    Rows are in lexicographic order of the split counts, so row 0 is the unsplit configuration
    whenever it is allowed. Raises :class:`ModelError` naming the operator when none is allowed.

    Examples
    --------
    >>> from stratopt.graph import GraphBuilder
    >>> g = GraphBuilder("t")
    >>> x = g.input((8, 16))
    >>> _ = g.fc(x, 8, name="fc")
    >>> configurations(g.build().operators[0], ConfigPolicy(procs=2)).tolist()
    [[1, 1, 1], [1, 1, 2], [1, 2, 1], [2, 1, 1]]
    """
    units = set(op.attrs.get("units", ()))  # axes of whole units (experts): one per block will do
    options = [
        _axis_options(s, policy, a in op.locked, 1 if a in units else None)
        for a, s in zip(op.axes, op.sizes, strict=True)
    ]
    rows: list[tuple[int, ...]] = []
    limit = policy.procs

    def extend(prefix: tuple[int, ...], used: int) -> None:
        depth = len(prefix)
        if depth == len(options):
            if (not policy.exact or used == limit) and (not op.contiguous or _is_contiguous(op.sizes, prefix)):
                rows.append(prefix)
            return
        for c in options[depth]:
            if used * c > limit:
                break
            extend((*prefix, c), used * c)

    extend((), 1)
    if not rows:
        raise ModelError(
            f"operator {op.name!r}: no configuration fits the policy ({policy.describe()}); "
            f"axes {dict(zip(op.axes, op.sizes, strict=True))}"
        )
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(op.axes))
