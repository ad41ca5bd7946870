"""Cross-checking solvers against each other: :func:`compare` (:mod:`.compare`), the case bank
(:mod:`.cases`) and sweeps over grids of networks, device counts and solvers (:mod:`.sweep`)."""

from stratopt.harness.compare import REL_TOL, Comparison, compare, default_solvers

__all__ = ["REL_TOL", "Comparison", "compare", "default_solvers"]
