"""Planning for a real cluster: the plan beside the strategies people write by hand, pipeline stages,
micro-batches, and the plan's export format.

- :mod:`~stratopt.planning.cluster`: :class:`Cluster`, nodes of devices of a preset machine;
- :mod:`~stratopt.planning.planner`: :func:`plan`, the fastest strategy that fits, and the baselines
  measured on the same model (:mod:`~stratopt.planning.baselines`: data parallel, FSDP, Megatron),
  with the batch followed through the graph (:mod:`~stratopt.planning.batch`);
- :mod:`~stratopt.planning.memory`: the cheapest strategy under a memory limit (Lagrangian bisection,
  each step an exact DP, with a lower bound);
- :mod:`~stratopt.planning.words`: a strategy in the words users use;
- :mod:`~stratopt.planning.result` and :mod:`~stratopt.planning.export`: :class:`PlanResult`, its
  JSON export and :func:`load_plan`;
- pipelines: :mod:`~stratopt.planning.stages` (cuts and stages), :mod:`~stratopt.planning.units`
  (unit tables), :mod:`~stratopt.planning.pipeline` (the stage search),
  :mod:`~stratopt.planning.microbatch` (cutting the batch), :mod:`~stratopt.planning.simulation`
  (1F1B and GPipe simulated), :mod:`~stratopt.planning.pipelined` (all of it end to end).
"""

from stratopt.planning.baselines import baselines
from stratopt.planning.batch import batch_axes, follow_batch
from stratopt.planning.cluster import Cluster, cluster
from stratopt.planning.export import ExportedPlan, load_plan
from stratopt.planning.memory import under_memory
from stratopt.planning.microbatch import microbatch, search_microbatches
from stratopt.planning.pipeline import search
from stratopt.planning.pipelined import parse_stages, plan_pipeline, whole_nodes
from stratopt.planning.planner import plan
from stratopt.planning.result import PlanResult, Strategy
from stratopt.planning.simulation import describe, schedule_order, simulate
from stratopt.planning.stages import PipelinePlan, Stage, crossing_bytes, cut_points, stage_graph, transfer_time
from stratopt.planning.words import describe_layers

__all__ = [
    "Cluster",
    "ExportedPlan",
    "PipelinePlan",
    "PlanResult",
    "Stage",
    "Strategy",
    "baselines",
    "batch_axes",
    "cluster",
    "crossing_bytes",
    "cut_points",
    "describe",
    "describe_layers",
    "follow_batch",
    "load_plan",
    "microbatch",
    "parse_stages",
    "plan",
    "plan_pipeline",
    "schedule_order",
    "search",
    "search_microbatches",
    "simulate",
    "stage_graph",
    "transfer_time",
    "under_memory",
    "whole_nodes",
]
