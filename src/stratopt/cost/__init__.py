"""Cost models: turn an operator graph on a machine into a :class:`~stratopt.StrategyProblem`.

:func:`build` (:mod:`.costing`) enumerates every operator's configurations, prices them with a
profile (``pase``: PaSE's formulas in its units, :mod:`.pase`; ``default``: microseconds on a real
machine, :mod:`.default`) and returns a :class:`Costing`.
"""

from stratopt.cost.costing import (
    DEFAULT_MACHINES,
    DEFAULT_PROCS,
    DEFAULT_PROFILE,
    PROFILES,
    Costing,
    build,
    config_label,
    default_machine,
)
from stratopt.cost.default import DefaultProfile
from stratopt.cost.pase import PaseProfile

__all__ = [
    "DEFAULT_MACHINES",
    "DEFAULT_PROCS",
    "DEFAULT_PROFILE",
    "PROFILES",
    "Costing",
    "DefaultProfile",
    "PaseProfile",
    "build",
    "config_label",
    "default_machine",
]
