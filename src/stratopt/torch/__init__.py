"""Plans that run: apply a stratopt plan to the PyTorch model it was imported from, and check it.

- :func:`parallelize` lays the model's modules out on a ``dp x tp`` :class:`DeviceMesh` as the plan
  says (DTensor's ``parallelize_module`` for tensor parallelism, ``fully_shard`` for sharded weight
  state, a gradient all-reduce per module for replicated weights);
- :func:`pipeline_stage` makes this rank's stage of a pipelined plan from the model and runs it with
  ``torch.distributed.pipelining`` (:mod:`stratopt.torch.pipeline`);
- :func:`check_plan` runs the model once on one process and once on N gloo processes with the plan
  applied, and compares loss, gradients, parameter bytes per rank and the collectives per module
  with what the plan priced (``stratopt check-plan``);
- :func:`stratopt.torch.train.train` runs AdamW steps of the model with the plan applied on N ranks
  (gloo on the CPU, NCCL on GPUs), measures each step, and optionally holds the losses against one
  process (``stratopt train``; under torchrun, ``python -m stratopt.torch.train``: the module keeps
  its name, so the function is not gathered here);
- :mod:`stratopt.torch.models`: small PyTorch models (an MLP and a Transformer) to try it on.

Which strategies DTensor can run is :mod:`stratopt.planning.torchplan`; ``plan(...,
expressible="torch")`` searches among those only. Needs the ``torch`` extra.
"""

from stratopt.torch.apply import Parallelized, parallelize
from stratopt.torch.check import CheckReport, check_plan
from stratopt.torch.pipeline import Staged, pipeline_stage

__all__ = ["CheckReport", "Parallelized", "Staged", "check_plan", "parallelize", "pipeline_stage"]
