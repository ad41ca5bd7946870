"""The execution simulator (seed 003): task graphs, full and delta simulation, MCMC search, traces.

Build a strategy's task graph (:class:`StrategyTasks`) or a placement's (:func:`placement_tasks`),
simulate it (:func:`simulate_tasks`, FlexFlow's Algorithm 1), keep it current through one-operator
changes (:class:`DeltaSimulator`, Algorithm 2), search strategies (:func:`mcmc`), and write what ran
(:func:`write_chrome_trace`, :func:`gantt`).
"""

from stratopt.sim.engine import DeltaSimulator, Timeline, check_timeline, simulate_tasks
from stratopt.sim.search import SearchResult, data_parallel, mcmc, start_strategy
from stratopt.sim.taskgraph import KINDS, StrategyTasks, TaskGraph, placement_tasks
from stratopt.sim.trace import Event, events, gantt, simulate_strategy, summary, write_chrome_trace, write_timeline

__all__ = [
    "KINDS",
    "DeltaSimulator",
    "Event",
    "SearchResult",
    "StrategyTasks",
    "TaskGraph",
    "Timeline",
    "check_timeline",
    "data_parallel",
    "events",
    "gantt",
    "mcmc",
    "placement_tasks",
    "simulate_strategy",
    "simulate_tasks",
    "start_strategy",
    "summary",
    "write_chrome_trace",
    "write_timeline",
]
