"""stratopt: optimal parallelization strategies and device placements for deep-learning graphs.

The core problem is a :class:`StrategyProblem` (one choice per vertex, node and edge costs,
an optional usage limit); :mod:`stratopt.cost` builds one from an operator graph
(:class:`GraphBuilder`, :func:`load_graph`, networks in ``models/``) on a :class:`Machine`; :func:`solve` runs any registered solver on it and returns a checked
:class:`Result`; :func:`evaluate` prices an assignment exactly as the IOPDDL contest does; :func:`place` puts a job
graph's operators on heterogeneous devices (:mod:`stratopt.placement`, seed 004 and its anchors);
:func:`plan` finds the plan for a cluster of nodes beside data parallel, FSDP and Megatron.
"""

from stratopt.errors import (
    CrossCheckError,
    ModelError,
    NoSolutionError,
    SolverError,
    SolverUnavailableError,
    StratoptError,
    UnsupportedProblemError,
)
from stratopt.graph import Graph, GraphBuilder
from stratopt.graph.io import load_graph, save_graph
from stratopt.instances import load_instance, load_problem
from stratopt.interop import from_networkx, to_networkx
from stratopt.machine import MACHINES, Machine
from stratopt.placement import Placement, PlacementInstance, place, read_placement
from stratopt.planning import PlanResult, plan
from stratopt.problem import (
    FORBIDDEN,
    Evaluation,
    StrategyProblem,
    evaluate,
    read_iopddl,
    write_iopddl,
)
from stratopt.solvers import solve
from stratopt.solvers.base import Limit, Result, Solver, Status
from stratopt.solvers.registry import available

__version__ = "0.1.0"

__all__ = [
    "FORBIDDEN",
    "MACHINES",
    "CrossCheckError",
    "Evaluation",
    "Graph",
    "GraphBuilder",
    "Limit",
    "Machine",
    "ModelError",
    "NoSolutionError",
    "Placement",
    "PlacementInstance",
    "PlanResult",
    "Result",
    "Solver",
    "SolverError",
    "SolverUnavailableError",
    "Status",
    "StrategyProblem",
    "StratoptError",
    "UnsupportedProblemError",
    "__version__",
    "available",
    "evaluate",
    "from_networkx",
    "load_graph",
    "load_instance",
    "load_problem",
    "place",
    "plan",
    "read_iopddl",
    "read_placement",
    "save_graph",
    "solve",
    "to_networkx",
    "write_iopddl",
]
