"""Seed 004: placement as greedy submodular maximisation under a partition matroid.

Ground set: E_ij = "node j on device i"; independent sets hold at most one element per node
(the partition matroid). The greedy adds, each round, the element that makes f largest, until every
node is placed. Two objectives:

- Submodular-G (section 2.2): f(S) = sum_i sqrt(sum_{j on i} b_ij) with
  b_ij = (2 - (c_ij + placed_i) / i_cap) * pf_ij;
- Submodular-GI (section 2.3): b_ij = 2 - (c_ij + placed_i) / i_cap and the candidate's
  parallelism factor multiplies the whole sum, f(S + E_ij) = pf_ij * sum_i sqrt(...).

Readings of the paper's typos (DESIGN section 5):

- pf_ij = 1 + |P_S^j|, not |P_S^j|: the worked rounds use pf = 1 for a node with no parallel
  partner placed (|P_S^j| = 0 would zero every benefit) and 2 with one, and the proof needs pf >= 1.
- Parallel candidates PC_j are the nodes with the *same* dependency (predecessor) set as j; the
  printed "!=" contradicts the text ("both nodes depend on the same thing") and the walk-through.
  P_S^j counts the candidates already placed, on a device other than i.
- An element's benefit is fixed when it is added, with placed_i as it was then (the walk-through
  keeps b_13 = 1.99 after more nodes join device 1).
- Section 2.3 prints "c_ij - placed"; we read "+", as in 2.2: a busier device must not look freer.
- Ties go to the lower device index, then the lower node index (round 1 picks E_13 over the equal
  E_23).

The walk-through's arithmetic slips are not ours to copy: round 3 prints b_15 with c = 2 instead of
5, round 4 prints b_25 = 1.89 for 2 - 9/100; neither changes a pick.

Two implementations of each objective return identical placements:

- ``plain``: every round evaluates f(S + E_ij) for every unplaced node and device (O(n^2 m)),
  as the paper does;
- ``lazy``: Minoux's accelerated greedy. Adding a node to device i only lowers the gains on i
  (placed_i and the device's sum grow, and sqrt is concave), so stale gains in a heap are upper
  bounds and are recomputed only when they reach the top. The one way a gain *rises*, a parallel
  partner of j landing on another device (pf_ij grows), is handled by pushing fresh entries for j.
  For Submodular-GI the factor pf multiplies f(S), which grows every round, so the candidates are
  kept in one heap per pf value, ranked by their pf-free gain, and the heaps' tops are compared.

Both rank candidates by the same floating-point expression, so ties resolve identically.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from stratopt.errors import ModelError
from stratopt.placement.instance import PlacementInstance
from stratopt.placement.schedule import parallel_groups

__all__ = ["Round", "submodular_greedy"]


@dataclass(frozen=True)
class Round:
    """One greedy round: the element added (device, node) and f of the set after it."""

    device: int
    node: int
    f: float


class _State:
    """What the benefit needs: per device the benefit sum and the placed cost; per node the
    device (-1 while unplaced) and its parallel partners."""

    def __init__(self, instance: PlacementInstance, improved: bool) -> None:
        self.inst = instance
        self.improved = improved
        self.cost = instance.cost.tolist()
        self.cap = instance.capacity
        m = instance.num_devices
        self.benefit_sum = [0.0] * m
        self.placed_cost = [0.0] * m
        self.device = [-1] * instance.num_nodes
        self.partners: list[tuple[int, ...]] = [() for _ in range(instance.num_nodes)]
        for group in parallel_groups(instance):
            for j in group:
                self.partners[j] = tuple(k for k in group if k != j)

    def pf(self, i: int, j: int) -> int:
        # 1 + |P_S^j|: partners already placed, on a device other than i.
        return 1 + sum(1 for k in self.partners[j] if self.device[k] >= 0 and self.device[k] != i)

    def benefit(self, i: int, j: int, pf: int) -> float:
        free = 2.0 - (self.cost[j][i] + self.placed_cost[i]) / self.cap
        return free if self.improved else free * pf

    def gain(self, i: int, j: int, pf: int) -> float:
        """sqrt(sum_i + b_ij) - sqrt(sum_i): what E_ij adds to f (before GI's factor)."""
        total = self.benefit_sum[i]
        new = total + self.benefit(i, j, pf)
        if new < 0:
            raise ModelError(
                f"{self.inst.name}: capacity {self.cap:g} is too small: node {self.inst.nodes[j]!r} on "
                f"{self.inst.devices[i].name!r} would get a negative benefit (seed 004 needs c + placed <= i_cap)"
            )
        return math.sqrt(new) - math.sqrt(total)

    def total(self) -> float:
        """f(S) before GI's factor: sum over devices of sqrt(benefit sum), in device order."""
        return sum(math.sqrt(b) for b in self.benefit_sum)

    def add(self, i: int, j: int, pf: int) -> None:
        self.benefit_sum[i] += self.benefit(i, j, pf)
        self.placed_cost[i] += self.cost[j][i]
        self.device[j] = i


def _plain(state: _State) -> list[Round]:
    n, m = state.inst.num_nodes, state.inst.num_devices
    rounds = []
    for _ in range(n):
        f_now = state.total()
        best: tuple[float, int, int] | None = None  # (-rank, device, node): the smallest wins
        best_pf = 1
        for i in range(m):
            for j in range(n):
                if state.device[j] >= 0:
                    continue
                pf = state.pf(i, j)
                g = state.gain(i, j, pf)
                rank = pf * (f_now + g) if state.improved else g
                key = (-rank, i, j)
                if best is None or key < best:
                    best, best_pf = key, pf
        assert best is not None
        _, i, j = best
        f_new = best_pf * (f_now + state.gain(i, j, best_pf)) if state.improved else f_now + state.gain(i, j, best_pf)
        state.add(i, j, best_pf)
        rounds.append(Round(i, j, f_new))
    return rounds


def _lazy(state: _State) -> list[Round]:
    n, m = state.inst.num_nodes, state.inst.num_devices
    dev_stamp = [0] * m
    node_stamp = [0] * n
    # Heaps of (-gain, device, node, device stamp, node stamp), one per pf value (Submodular-G
    # keeps them all in heap 0: its gain already includes pf).
    heaps: dict[int, list[tuple[float, int, int, int, int]]] = {}

    def push(i: int, j: int) -> None:
        pf = state.pf(i, j)
        heapq.heappush(
            heaps.setdefault(pf if state.improved else 0, []),
            (-state.gain(i, j, pf), i, j, dev_stamp[i], node_stamp[j]),
        )

    def top(heap: list[tuple[float, int, int, int, int]]) -> tuple[float, int, int] | None:
        """The heap's best fresh entry (left in place), recomputing stale ones on the way."""
        while heap:
            neg, i, j, ds, ns = heap[0]
            if state.device[j] >= 0 or ns != node_stamp[j]:
                heapq.heappop(heap)  # placed, or a newer entry for (i, j) exists
            elif ds != dev_stamp[i]:
                heapq.heappop(heap)
                push(i, j)
            else:
                return -neg, i, j
        return None

    for j in range(n):
        for i in range(m):
            push(i, j)
    rounds = []
    for _ in range(n):
        f_now = state.total()
        best: tuple[float, int, int] | None = None
        best_pf, best_gain = 1, 0.0
        for pf, heap in heaps.items():
            found = top(heap)
            if found is None:
                continue
            g, i, j = found
            rank = pf * (f_now + g) if state.improved else g
            key = (-rank, i, j)
            if best is None or key < best:
                best, best_pf, best_gain = key, pf, g
        assert best is not None
        _, i, j = best
        pf = best_pf if state.improved else state.pf(i, j)
        f_new = pf * (f_now + best_gain) if state.improved else f_now + best_gain
        state.add(i, j, pf)
        rounds.append(Round(i, j, f_new))
        dev_stamp[i] += 1
        # A partner of j placed on i raises pf on every other device: fresh entries for all.
        for k in state.partners[j]:
            if state.device[k] < 0:
                node_stamp[k] += 1
                for d in range(m):
                    push(d, k)
    return rounds


_IMPLEMENTATIONS: dict[str, Callable[[_State], list[Round]]] = {"plain": _plain, "lazy": _lazy}


def submodular_greedy(instance: PlacementInstance, *, improved: bool = False, lazy: bool = True) -> list[Round]:
    """Run seed 004's greedy; the rounds in order, each with the element added and f after it.

    Parameters
    ----------
    improved
        Submodular-GI (section 2.3) instead of Submodular-G (section 2.2).
    lazy
        The accelerated greedy (same placements, far fewer evaluations of f).

    References
    ----------
    A. Carbonari, N. Kodirov, M. Golub, "TensorFlow Job Placement Optimization as a Submodular
    Function Maximization", 2017 (seed 004), sections 2.2, 2.3 and the appendix.

    Examples
    --------
    >>> from stratopt.placement.jobs import appendix
    >>> [(r.device + 1, r.node + 1, round(r.f, 3)) for r in submodular_greedy(appendix())]
    [(1, 3, 1.411), (3, 4, 3.401), (2, 1, 4.801), (1, 5, 5.372), (2, 2, 5.937)]
    """
    state = _State(instance, improved)
    return _IMPLEMENTATIONS["lazy" if lazy else "plain"](state)
