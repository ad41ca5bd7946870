"""The numbers problems are made of: the forbidden-cost threshold, exact sums, float copies."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FORBIDDEN", "INT64_SAFE", "Number", "exact_sum", "float_costs", "forbidden_mask"]

#: Costs at or above this value are forbidden (the IOPDDL files write 10**18).
FORBIDDEN = 10**17

INT64_SAFE = 2**62

Number = int | float


def exact_sum(values: np.ndarray) -> Number:
    """Sum exactly: a Python int for integer arrays (no int64 overflow), else a float."""
    if values.dtype.kind == "f":
        return float(values.sum())
    if values.size == 0:
        return 0
    peak = int(np.abs(values).max())
    if peak * values.size < INT64_SAFE:
        return int(values.sum())
    return sum(values.tolist())


def forbidden_mask(values: np.ndarray) -> np.ndarray:
    return values >= FORBIDDEN


def float_costs(values: np.ndarray, forbidden: float = math.inf) -> np.ndarray:
    """A float64 copy of cost values with every forbidden entry (>= FORBIDDEN) set to ``forbidden``."""
    out = values.astype(np.float64)
    out[forbidden_mask(values)] = forbidden
    return out
