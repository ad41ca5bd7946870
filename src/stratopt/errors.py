"""The exception tree of stratopt.

::

    StratoptError
    +-- ModelError (also ValueError)        bad problem, file, graph, machine or assignment
    +-- SolverError                         a solver could not run
    |   +-- SolverUnavailableError          its back-end is not installed
    |   +-- UnsupportedProblemError         it cannot take this problem (too big, wrong kind)
    +-- NoSolutionError                     a caller asked for an answer and there is none
    +-- CrossCheckError (also AssertionError)  two encodings disagree

Infeasible and time-limited runs are *statuses* of a :class:`~stratopt.Result`, not exceptions.
Messages name the offending item and, where it helps, say what to do next; the command line
prints them as one line and exits with code 2.
"""

from __future__ import annotations

__all__ = [
    "CrossCheckError",
    "ModelError",
    "NoSolutionError",
    "SolverError",
    "SolverUnavailableError",
    "StratoptError",
    "UnsupportedProblemError",
]


class StratoptError(Exception):
    """Base class of every error stratopt raises on purpose."""


class ModelError(StratoptError, ValueError):
    """The input is malformed: a problem, a file, an assignment, a graph or a machine."""


class SolverError(StratoptError):
    """A solver could not be run on the problem it was given."""


class SolverUnavailableError(SolverError):
    """A solver's back-end is not installed; the message names the extra to install."""


class UnsupportedProblemError(SolverError):
    """A solver refuses a problem it cannot handle (for example one that is too large)."""


class NoSolutionError(StratoptError):
    """A caller asked for an assignment and the solve produced none."""


class CrossCheckError(StratoptError, AssertionError):
    """Two solvers or two encodings that must agree do not; the message shows both answers."""
