"""Solvers of the core problem and the one entry point, :func:`solve`."""

from stratopt.solvers.base import Limit, Result, Solver, Status
from stratopt.solvers.dispatch import solve, solve_auto, solve_named

__all__ = ["Limit", "Result", "Solver", "Status", "solve", "solve_auto", "solve_named"]
