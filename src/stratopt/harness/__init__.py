"""Cross-checking solvers against each other: :func:`compare` (:mod:`.compare`), the case bank
(:mod:`.cases`), sweeps over grids of networks, device counts and solvers (:mod:`.sweep`), and the
one-minute tour ``stratopt demo`` runs (:mod:`.demo`)."""

from stratopt.harness.compare import REL_TOL, Comparison, compare, default_solvers, solver_names

__all__ = ["REL_TOL", "Comparison", "compare", "default_solvers", "solver_names"]
