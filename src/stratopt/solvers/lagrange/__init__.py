"""Memory as penalties: the usage limit relaxed into per-vertex weights, toulbar2 on each penalised
problem, repair at the worst violation and polish under the limit.

Without its usage rows the problem is a plain cost function network, which toulbar2 solves well
even at IOPDDL's largest sizes. So the limit leaves the constraints and enters the node costs:
choice ``c`` of vertex ``v`` pays ``w_v * (usage[v][c] - least usage of v)`` on top of its cost.
Without the usage rows every follower (a vertex that an edge makes a function of its neighbour)
merges into its leader, which then pays its penalties too: the network toulbar2 gets is built
once, after these reductions (:class:`Network`; IOPDDL A goes from 34,932 vertices to 285).
Each weight vector is one toulbar2 run (in worker processes, one per core, or Ray tasks): TRW-S
message passing first (:data:`TRWS_ACCURACY`), then limited discrepancy search. After
each run, every vertex whose live interval still breaks the limit somewhere learns that its
weight was too low, every other vertex that its weight was high enough; the next weights lie
between the highest weight that broke and the lowest that kept, per vertex (bisection in log
space). Every answer that breaks the limit is repaired two ways, the cheaper kept: single-vertex
moves at the time of the worst violation (least cost increase per unit of usage freed), and,
close to the limit, toulbar2 re-solving the vertices live at the over-full slots on the true
costs under knapsack rows there (coupled vertices, which forbidden pairs tie together, move at
once). Then descent that keeps the limit polishes it. Repair and polish run in the worker. One
worker at a time merges the best answer with another good one (:mod:`.merge`): toulbar2 re-solves
the vertices where they differ, each between its two values, under exact knapsack rows, and starts
from the better one's cost.

The lower bound is the Lagrangian dual: for slot prices ``lam_t >= 0``, any feasible assignment
costs at least ``min_x [cost(x) + sum_t lam_t (load_t(x) - limit)]``. A run with vertex weights
``w`` bounds that minimum from below for every ``lam`` whose interval sums cover ``w``
(``sum_{t in I_v} lam_t >= w_v``), through toulbar2's dual bound on the penalised problem. The
narrowing's runs use the cover that puts each vertex's weight on the slot of its interval with
the least room below the limit; one run in :data:`BOUND_EVERY` (every run once a relaxation's
prices have come: :data:`PRICED_EVERY`) instead takes its weights from slot prices that a proximal
level method over the cuts of every answer seen chooses (Polyak's subgradient steps until an answer
keeps the limit, and where a run proved too little for the level to move: :mod:`.bound`); its value
is toulbar2's proven bound at those prices (IOPDDL A: within 1% of the best cost known; S, where
toulbar2 proves nothing in 20 s and these runs are short: about 10% below the best answer).
Where its size fits a share of the time (``bound_share``), one worker also solves the linear
relaxation of the reduced model with HiGHS's interior point method; weak duality turns its row
duals, whatever their accuracy, into a proven bound, and its usage rows' duals into the slot prices
the ascent starts from (IOPDDL C: 0.1% below the best answer, against 3% from the ascent alone).

References
----------
The IOPDDL contest's winning entry ("Soft Constraints, Strong Solutions", ASPLOS 2025 IOPDDL):
per-vertex usage penalties, several penalty scales in parallel, per-vertex narrowing.

The method in modules, each step in its own: :mod:`.model` (the penalty model and the reduced
network), :mod:`.toulbar` (one network through toulbar2), :mod:`.runs` (one penalised run),
:mod:`.repair` (repair and polish), :mod:`.groups` (the reduced network's moves), :mod:`.merge`
(solution merging), :mod:`.schedule` (which weights each run gets), :mod:`.bound`
(the slot-price ascent and the dual bound), :mod:`.relaxation` (the linear relaxation of the
reduced model, whose certified bound and slot prices start the ascent; its edges over the
choices each tells apart, :mod:`.classes`), :mod:`.messages` (its
dual by message passing where it is too large), :mod:`.branch` (branch and cut on it where it is
small), :mod:`.kept` (the bound with the usage rows kept as knapsacks, where they are few),
:mod:`.jobs` (which of these the bound worker gets, and running it), :mod:`.workers` (processes or
Ray tasks) and :mod:`.solver` (:class:`Lagrange`, the outline).
"""

from stratopt.solvers.lagrange.bound import Ascent, Level
from stratopt.solvers.lagrange.model import Network, PenaltyModel
from stratopt.solvers.lagrange.repair import (
    REGION_REPAIR_EXCESS,
    REGION_REPAIR_SLOTS,
    polish,
    repair,
    repair_region,
    resolve_region,
)
from stratopt.solvers.lagrange.runs import TRWS_ACCURACY, Attempt, Run, attempt, run_penalised
from stratopt.solvers.lagrange.schedule import (
    BOUND_EVERY,
    BOUND_FRACTION,
    EXPLOIT,
    PRICED_EVERY,
    SHAKE,
    Schedule,
    Weights,
)
from stratopt.solvers.lagrange.solver import Lagrange
from stratopt.solvers.lagrange.workers import as_child

__all__ = [
    "BOUND_EVERY",
    "BOUND_FRACTION",
    "EXPLOIT",
    "PRICED_EVERY",
    "REGION_REPAIR_EXCESS",
    "REGION_REPAIR_SLOTS",
    "SHAKE",
    "TRWS_ACCURACY",
    "Ascent",
    "Attempt",
    "Lagrange",
    "Level",
    "Network",
    "PenaltyModel",
    "Run",
    "Schedule",
    "Weights",
    "as_child",
    "attempt",
    "polish",
    "repair",
    "repair_region",
    "resolve_region",
    "run_penalised",
]
