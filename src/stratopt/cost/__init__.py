"""Cost models: turn an operator graph on a machine into a :class:`~stratopt.StrategyProblem`.

:func:`build` (:mod:`.costing`) enumerates every operator's configurations, prices them with a
profile (``pase``: PaSE's formulas in its units, :mod:`.pase`; ``default``: microseconds on a real
machine, :mod:`.default`) and returns a :class:`Costing`.
"""

from stratopt.cost import costing
from stratopt.cost.costing import *  # noqa: F403 (the names its __all__ lists, gathered here)
from stratopt.cost.default import DefaultProfile
from stratopt.cost.pase import PaseProfile

__all__ = [*costing.__all__, "DefaultProfile", "PaseProfile"]
