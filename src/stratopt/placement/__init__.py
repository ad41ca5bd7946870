"""Device placement (seed 004 and its anchors): put every operator of a job graph on one device of
a heterogeneous set so that the job finishes soonest.

:func:`place` runs one algorithm and returns a :class:`Placement`: the device of every node, the
device order, the schedule that order gives (re-checked by :func:`check_schedule` before it is
returned), its makespan and seed 004's JCT. Algorithms (:data:`ALGORITHMS`):

=============================  ==================================================================
``heuristic``                  TensorFlow whitepaper greedy (seed 004's Heuristic-G)
``submodular``                 Submodular-G (seed 004, section 2.2), every f evaluated each round
``submodular-lazy``            the same placements by the accelerated (lazy) greedy
``submodular-improved``        Submodular-GI (section 2.3)
``submodular-improved-lazy``   the same placements by the lazy greedy
``heft``                       HEFT: upward rank, insertion-based earliest finish
``etf``                        memory-aware Earliest Task First (Baechi's m-ETF)
``cpsat``                      makespan-optimal (CP-SAT), with its proven bound
``additive``                   the additive view's optimum (:func:`to_problem`, solved exactly)
=============================  ==================================================================
"""

from stratopt.placement.algorithms import ALGORITHMS, Placement, lower_bound, place, to_problem
from stratopt.placement.instance import (
    Device,
    PlacementInstance,
    is_placement_dict,
    placement_from_dict,
    read_placement,
)
from stratopt.placement.schedule import Schedule, check_placement, check_schedule, jct, simulate
from stratopt.placement.submodular import Round

__all__ = [
    "ALGORITHMS",
    "Device",
    "Placement",
    "PlacementInstance",
    "Round",
    "Schedule",
    "check_placement",
    "check_schedule",
    "is_placement_dict",
    "jct",
    "lower_bound",
    "place",
    "placement_from_dict",
    "read_placement",
    "simulate",
    "to_problem",
]
