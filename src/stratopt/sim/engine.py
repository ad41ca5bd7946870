"""Full and delta simulation of a task graph (FlexFlow's Algorithms 1 and 2, seed 003).

The timeline both compute is fixed by three rules (FlexFlow's assumptions: a task runs whole on one
resource; each resource runs its tasks one at a time in the order they become ready):

1. ``ready(t) = max(end(p) for p in preds(t))`` (0 for a task without predecessors);
2. each resource runs its tasks in increasing ``(ready, rank)`` order (the rank is structural and
   consistent with the dependencies, so ties break the same way however the graph was built);
3. ``start(t) = max(ready(t), end(previous task on the resource))``, ``end = start + exe``.

Algorithm 1 dequeues tasks from a priority queue keyed by ``(ready, rank)``. A successor's key is
always larger than its predecessor's (its ready time is at least the predecessor's end, and its
rank larger), so the dequeue order is exactly the sorted key order, the resources' orders follow
rule 2, and the timeline satisfying 1-3 is unique (each task's values depend only on tasks with
smaller keys). Delta simulation therefore only has to restore rules 1-3 after an edit.

Delta simulation (Algorithm 2, made exact). An edit removes the changed operator's tasks and those
of its edges, adds their replacements, and changes the predecessors of some neighbours. Let K0 be
the smallest of: the old keys of removed tasks and of neighbours whose predecessors changed, and a
lower bound on the new key of every added or re-wired task (the largest end of its surviving
predecessors, and for added predecessors their own bound plus execution time). By induction in key
order, no task keyed below K0 changes and no task moves below K0. So the delta simulation keeps
every resource's prefix below K0 as it is and replays Algorithm 1's loop from K0 on, with each
resource resuming after the last kept task. Tasks after K0 are re-simulated even when unchanged
(seed 003's sketch propagates only changed tasks, swapping tasks to keep FIFO; in a training step
almost everything after a changed operator shifts, and a replay at Algorithm 1's cost per task
beats bookkeeping per changed task, which we measured at 5-10x the cost per task). The timelines
are identical, which the property tests check on thousands of random edits.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stratopt.errors import CrossCheckError
from stratopt.sim.taskgraph import StrategyTasks, TaskGraph

__all__ = ["DeltaSimulator", "Timeline", "check_timeline", "simulate_tasks"]


@dataclass
class Timeline:
    """Start and end of every task of a task graph (indexed by task id), and the makespan."""

    graph: TaskGraph
    ready: list[float]
    start: list[float]
    end: list[float]
    makespan: float

    def tasks(self) -> list[int]:
        return list(self.graph.tasks())

    def busy(self) -> list[float]:
        """Busy time of every resource (devices first, then links)."""
        out = [0.0] * self.graph.num_resources
        for t in self.graph.tasks():
            out[self.graph.res[t]] += self.end[t] - self.start[t]
        return out

    def utilisation(self) -> dict[str, float]:
        """Fraction of the makespan each device computes."""
        busy = self.busy()
        span = self.makespan or 1.0
        return {name: busy[d] / span for d, name in enumerate(self.graph.devices)}

    def critical_path(self) -> list[int]:
        """Tasks from the start to the last end, each one waiting on the one before it (a
        predecessor whose end is its ready time, or the task before it on its resource)."""
        g = self.graph
        alive = list(g.tasks())
        if not alive:
            return []
        t = max(alive, key=lambda x: (self.end[x], g.rank[x]))
        order: dict[int, list[int]] = {}
        for x in sorted(alive, key=lambda x: (self.ready[x], g.rank[x])):
            order.setdefault(g.res[x], []).append(x)
        before = {}
        for seq in order.values():
            for a, b in itertools.pairwise(seq):
                before[b] = a
        path = [t]
        while True:
            if self.start[t] > self.ready[t] and t in before:
                t = before[t]
            elif g.preds[t]:
                t = max(g.preds[t], key=lambda p: (self.end[p], g.rank[p]))
            elif t in before and self.start[t] > 0.0:
                t = before[t]
            else:
                break
            path.append(t)
        return path[::-1]


def simulate_tasks(graph: TaskGraph) -> Timeline:
    """Seed 003's Algorithm 1 on a task graph: the full simulation.

    References
    ----------
    Jia, Zaharia, Aiken, "Beyond Data and Model Parallelism for Deep Neural Networks", SysML 2019
    (supplement, Algorithm 1).
    """
    return _full(graph)[0]


def _full(graph: TaskGraph) -> tuple[Timeline, list[list[tuple[float, int, int]]]]:
    size = len(graph.rank)
    ready = [0.0] * size
    start = [0.0] * size
    end = [0.0] * size
    preds, rank = graph.preds, graph.rank
    waiting = [len(p) for p in preds]
    queue = [(0.0, rank[t], t) for t in graph.tasks() if not preds[t]]
    heapq.heapify(queue)
    last = [0.0] * graph.num_resources
    order: list[list[tuple[float, int, int]]] = [[] for _ in range(graph.num_resources)]
    done = _run(graph, queue, waiting, last, order, ready, start, end)
    if done != graph.count:
        raise CrossCheckError(f"task graph has a cycle: {graph.count - done} tasks never became ready")
    return Timeline(graph, ready, start, end, max(last, default=0.0)), order


def _run(
    graph: TaskGraph,
    queue: list[tuple[float, int, int]],
    waiting: list[int],
    last: list[float],
    order: list[list[tuple[float, int, int]]],
    ready: list[float],
    start: list[float],
    end: list[float],
) -> int:
    """Algorithm 1's loop (lines 11-25) from a heap of ready tasks; returns how many it ran.

    ``waiting[t]`` counts t's predecessors still to run, ``ready[t]`` holds the largest end among
    those that ran, ``last[d]`` the end of resource d's last task; each task run is appended to its
    resource's ``order``.
    """
    succs, rank, res, exe = graph.succs, graph.rank, graph.res, graph.exe
    appends = [seq.append for seq in order]
    done = 0
    pop, push = heapq.heappop, heapq.heappush
    while queue:
        key = pop(queue)
        r, _, t = key
        d = res[t]
        s = last[d]
        if r > s:
            s = r
        e = s + exe[t]
        start[t] = s
        end[t] = e
        last[d] = e
        appends[d](key)
        done += 1
        for n in succs[t]:
            if e > ready[n]:
                ready[n] = e
            w = waiting[n] - 1
            waiting[n] = w
            if not w:
                push(queue, (ready[n], rank[n], n))
    return done


def check_timeline(timeline: Timeline, *, tol: float | None = None) -> list[str]:
    """Problems with a timeline, checked from scratch (empty when it is the one rules 1-3 fix).

    Written apart from both simulations: it sorts each resource's tasks by ``(ready, rank)`` and
    checks durations, ready times, start times and that no two tasks on a resource overlap. ``tol``
    (default 1e-9 of the makespan) absorbs rounding in ``end - start``.
    """
    g = timeline.graph
    if tol is None:
        tol = 1e-9 * max(1.0, timeline.makespan)
    problems: list[str] = []
    by_res: dict[int, list[int]] = {}
    makespan = 0.0
    for t in g.tasks():
        want_ready = max((timeline.end[p] for p in g.preds[t]), default=0.0)
        if abs(timeline.ready[t] - want_ready) > tol:
            problems.append(f"{g.name(t)}: ready {timeline.ready[t]} but its inputs end at {want_ready}")
        if abs(timeline.end[t] - timeline.start[t] - g.exe[t]) > tol:
            problems.append(f"{g.name(t)}: runs {timeline.end[t] - timeline.start[t]} but takes {g.exe[t]}")
        by_res.setdefault(g.res[t], []).append(t)
        makespan = max(makespan, timeline.end[t])
    for r, tasks in by_res.items():
        tasks.sort(key=lambda t: (timeline.ready[t], g.rank[t]))
        prev_end = 0.0
        for t in tasks:
            want = max(timeline.ready[t], prev_end)
            if abs(timeline.start[t] - want) > tol:
                problems.append(f"{g.name(t)} on {g.resource_names[r]}: starts {timeline.start[t]}, expected {want}")
            prev_end = timeline.end[t]
    if abs(makespan - timeline.makespan) > tol:
        problems.append(f"makespan {timeline.makespan} but the last task ends at {makespan}")
    return problems


class DeltaSimulator:
    """A strategy's task graph and timeline, kept up to date one operator change at a time.

    ``change(v, c)`` edits the task graph (:meth:`StrategyTasks.change`) and re-simulates from the
    earliest key the edit can affect (seed 003's Algorithm 2, see the module docstring);
    ``timeline()`` is then identical to a full simulation of the new strategy.

    Examples
    --------
    >>> from stratopt import load_instance
    >>> from stratopt.cost import build
    >>> costing = build(load_instance("alexnet"), 4)
    >>> sim = DeltaSimulator(costing, [0] * len(costing.graph))
    >>> after = sim.change(1, 2)
    >>> after == simulate_tasks(StrategyTasks(costing, sim.assignment).graph).makespan
    True
    """

    def __init__(self, costing: Any, assignment: Sequence[int]) -> None:
        self.tasks = StrategyTasks(costing, assignment)
        self.graph = self.tasks.graph
        timeline, order = _full(self.graph)
        self.ready, self.start, self.end = timeline.ready, timeline.start, timeline.end
        self.order = order
        size = len(self.ready)
        self._fresh = [0] * size
        self._later = [0] * size
        self._waiting = [0] * size
        self._stamp = 0
        self.last_stats: dict[str, int] = {}

    @property
    def assignment(self) -> list[int]:
        return list(self.tasks.assignment)

    @property
    def makespan(self) -> float:
        end = self.end
        return max((end[seq[-1][2]] for seq in self.order if seq), default=0.0)

    def timeline(self) -> Timeline:
        return Timeline(self.graph, list(self.ready), list(self.start), list(self.end), self.makespan)

    def _grow(self) -> None:
        size = len(self.graph.rank)
        extra = size - len(self.ready)
        if extra > 0:
            for arr, fill in ((self.ready, 0.0), (self.start, 0.0), (self.end, 0.0)):
                arr.extend([fill] * extra)  # type: ignore[list-item]
            self._fresh.extend([0] * extra)
            self._later.extend([0] * extra)
            self._waiting.extend([0] * extra)
        while len(self.order) < self.graph.num_resources:
            self.order.append([])

    def change(self, v: int, c: int) -> float:
        """Give operator ``v`` configuration ``c``; returns the new makespan."""
        if self.tasks.assignment[v] == c:
            return self.makespan
        began = time.perf_counter()
        g = self.graph
        retired = self._retire(v)
        new, touched = self.tasks.change(v, c)
        self._grow()
        ready, start, end, order = self.ready, self.start, self.end, self.order
        rank, exe, preds = g.rank, g.exe, g.preds
        self._stamp += 1
        stamp = self._stamp
        fresh = self._fresh  # fresh[t] == stamp: t is new in this change
        for t in new:
            fresh[t] = stamp
        # K0: no task with a smaller key changes, and no task gets a smaller key (module docstring).
        k0 = min(retired, default=(math.inf, 0))
        for t in touched:
            if (ready[t], rank[t]) < k0:
                k0 = (ready[t], rank[t])
        bound: dict[int, float] = {}
        for t in sorted(new + touched, key=rank.__getitem__):
            low = 0.0
            for p in preds[t]:
                x = bound[p] + exe[p] if fresh[p] == stamp else end[p]
                if x > low:
                    low = x
            bound[t] = low
            if (low, rank[t]) < k0:
                k0 = (low, rank[t])
        # Everything before K0 stays; the rest is replayed with Algorithm 1's loop.
        later = self._later  # later[t] == stamp: t is replayed in this change
        last = [0.0] * len(order)
        replay: list[int] = []
        key0 = (k0[0], k0[1], -1)
        for d, seq in enumerate(order):
            i = bisect_left(seq, key0)
            if i < len(seq):
                replay.extend([entry[2] for entry in seq[i:]])
                del seq[i:]
            if i > 0:
                last[d] = end[seq[i - 1][2]]
        replay.extend(new)
        for t in replay:
            later[t] = stamp
        waiting = self._waiting
        queue: list[tuple[float, int, int]] = []
        for t in replay:
            low = 0.0
            count = 0
            for p in preds[t]:
                if later[p] == stamp:
                    count += 1
                elif end[p] > low:
                    low = end[p]
            ready[t] = low
            waiting[t] = count
            if not count:
                queue.append((low, rank[t], t))
        heapq.heapify(queue)
        done = _run(g, queue, waiting, last, order, ready, start, end)
        if done != len(replay):
            raise CrossCheckError(f"delta simulation replayed {done} of {len(replay)} tasks (a cycle?)")
        self.last_stats = {
            "tasks": g.count,
            "new": len(new),
            "touched": len(touched),
            "replayed": done,
            "microseconds": int((time.perf_counter() - began) * 1e6),
        }
        return self.makespan

    def _retire(self, v: int) -> list[tuple[float, int]]:
        """Take the tasks a change of ``v`` removes off their resources (while their ids still
        mean them); returns their keys."""
        g = self.graph
        keys = []
        for t in self.tasks.doomed(v):
            seq = self.order[g.res[t]]
            i = bisect_left(seq, (self.ready[t], g.rank[t], t))
            del seq[i]
            keys.append((self.ready[t], g.rank[t]))
        return keys
