"""The core problem: a pairwise cost network with an optional usage (memory) constraint
(:mod:`~stratopt.problem.core`), priced as the IOPDDL contest does (:mod:`~stratopt.problem.evaluation`),
read and written as IOPDDL files (:mod:`~stratopt.problem.iopddl`)."""

from stratopt.problem.core import StrategyProblem
from stratopt.problem.evaluation import Evaluation, check_assignment, evaluate, usage_profile
from stratopt.problem.iopddl import (
    from_iopddl_dict,
    parse_assignment,
    read_iopddl,
    read_json,
    to_iopddl_dict,
    write_iopddl,
)
from stratopt.problem.numbers import FORBIDDEN, Number, float_costs

__all__ = [
    "FORBIDDEN",
    "Evaluation",
    "Number",
    "StrategyProblem",
    "check_assignment",
    "evaluate",
    "float_costs",
    "from_iopddl_dict",
    "parse_assignment",
    "read_iopddl",
    "read_json",
    "to_iopddl_dict",
    "usage_profile",
    "write_iopddl",
]
