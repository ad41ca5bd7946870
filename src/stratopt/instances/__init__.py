"""What an INSTANCE argument names: a built-in problem, a network or placement job in ``models/``, a
file (IOPDDL, operator graph, placement, ONNX; detected by content), or a Python entry point; and
loading it, priced where it is a network (:func:`load_priced`)."""

from stratopt.instances.catalogue import BUILTIN, catalogue, list_models, list_placements, models_dir
from stratopt.instances.entry_points import is_entry_point, load_entry_point
from stratopt.instances.loading import (
    forget_entry_points,
    load_instance,
    load_placement,
    load_priced,
    load_problem,
)

__all__ = [
    "BUILTIN",
    "catalogue",
    "forget_entry_points",
    "is_entry_point",
    "list_models",
    "list_placements",
    "load_entry_point",
    "load_instance",
    "load_placement",
    "load_priced",
    "load_problem",
    "models_dir",
]
