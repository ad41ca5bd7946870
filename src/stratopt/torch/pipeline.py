"""Run a pipelined plan (``plan --stages N --expressible torch``) with ``torch.distributed.pipelining``.

A stage is the user's own model with the other stages' parts taken out, so that every module keeps
its name (and the plan's module placements, checkpointing and collectives apply as they do to a
plan of one stage):

- the blocks before the stage's first one become pass-throughs, and the tensor the previous stage
  sent replaces the input of its first block (a forward pre-hook), so that everything the model
  computes on the way without weights (positions, masks, rotary tables) is computed as it is in one
  process;
- a module with weights that an earlier stage runs (a token embedding) becomes a stand-in that hands
  on zeros of its output's shape (found by running a copy of it on the meta device);
- the block after the stage's last one ends the forward, handing its input on as the stage's output;
  the modules after it are taken out (the forward never reaches them).

The stages run on a ``pp x dp x tp`` device mesh: each stage's ``dp x tp`` part is laid out by
:func:`~stratopt.torch.apply.parallelize` with the stage's modules; the data-parallel gradient
reductions (FSDP's and the per-module all-reduces) run once a step, in the last micro-batch's
backward pass, the gradients accumulating locally before it, as the plan prices them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from stratopt.errors import ModelError
from stratopt.planning.export import ExportedPlan
from stratopt.torch.apply import Parallelized, _torch, parallelize, plan_of
from stratopt.torch.runs import loss_weights

__all__ = ["Staged", "count_transfers", "pipeline_stage"]


class StageOutput(Exception):
    """Raised by the block after a stage's last one: the stage's output, caught by the stage."""

    def __init__(self, value: Any) -> None:
        super().__init__("stage output")
        self.value = value


def _hidden(args: tuple[Any, ...], kwargs: dict[str, Any], where: str) -> Any:
    if args:
        return args[0]
    if "hidden_states" in kwargs:
        return kwargs["hidden_states"]
    raise ModelError(f"block {where}: cannot tell which input is the tensor a pipeline stage receives")


@functools.cache
def _classes() -> dict[str, Any]:
    """The stand-in modules (made once, when torch is there)."""
    torch = _torch()
    nn = torch.nn
    from torch.utils._pytree import tree_map_only

    class PassThrough(nn.Module):  # type: ignore[misc, name-defined]
        """A block before the stage: hands its input on (the stage's first block reads the received tensor)."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return _hidden(args, kwargs, self.name)

    class StageEnd(nn.Module):  # type: ignore[misc, name-defined]
        """The block after the stage's last one: its input is the stage's output."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            raise StageOutput(_hidden(args, kwargs, self.name))

    class StandIn(nn.Module):  # type: ignore[misc, name-defined]
        """A module with weights that an earlier stage runs: zeros of its output's shape."""

        def __init__(self, name: str, module: Any) -> None:
            super().__init__()
            self.name = name
            self._meta = [copy.deepcopy(module).to("meta")]  # a list: not a submodule, no parameters

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
            device = tensors[0].device if tensors else torch.device("cpu")
            meta = tree_map_only(torch.Tensor, lambda t: t.detach().to("meta"), (args, kwargs))
            try:
                with torch.no_grad():
                    out = self._meta[0](*meta[0], **meta[1])
            except Exception as exc:
                raise ModelError(f"module {self.name}: cannot stand in for it on a later stage ({exc})") from None
            return tree_map_only(torch.Tensor, lambda t: torch.zeros(t.shape, dtype=t.dtype, device=device), out)

    class Elsewhere(nn.Module):  # type: ignore[misc, name-defined]
        """A module of a later stage: never reached (the stage ends before it)."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            raise ModelError(
                f"module {self.name} ran before the stage's end: the model does not run its blocks in order"
            )

    class Stage(nn.Module):  # type: ignore[misc, name-defined]
        """The model as a pipeline stage: ``forward(*inputs)`` on the first stage, ``forward(received,
        **inputs)`` on the others (the model's inputs as ``input0``, ``input1``, ...: shapes for what
        it computes without weights); returns the stage's output (the model's first output tensor on
        the last stage)."""

        def __init__(self, model: Any, first: Any) -> None:
            super().__init__()
            self.model = model
            self.received: Any = None
            self.first = first is not None
            if first is not None:
                first.register_forward_pre_hook(self._swap, with_kwargs=True, prepend=True)

        def _swap(self, _module: Any, args: Any, kwargs: Any) -> Any:
            if self.received is None:  # the recomputation of a checkpointed block: its inputs are saved
                return None
            received, self.received = self.received, None
            if args:
                return (received, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": received}

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            if self.first:
                self.received = args[0]
                args = tuple(kwargs[f"input{i}"] for i in range(len(kwargs)))
            try:
                out = self.model(*args)
            except StageOutput as stop:
                return stop.value
            finally:
                self.received = None
            while not isinstance(out, torch.Tensor):
                out = out[0] if isinstance(out, list | tuple) else next(iter(out.values()))
            return out

    return {
        "PassThrough": PassThrough,
        "StageEnd": StageEnd,
        "StandIn": StandIn,
        "Elsewhere": Elsewhere,
        "Stage": Stage,
    }


def _swap_module(model: Any, name: str, new: Any) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, new)


def _inside(name: str, blocks: list[str]) -> bool:
    return any(name == b or name.startswith(b + ".") for b in blocks)


def cut_model(model: Any, plan: ExportedPlan, stage: int) -> Any:
    """``model`` (changed in place) as stage ``stage`` of ``plan``'s pipeline: the stage module
    :func:`pipeline_stage` runs (see the module's docstring)."""
    assert plan.pipeline is not None
    stages = plan.pipeline["stages"]
    chain = [b for s in stages for b in s["blocks"]]
    mine = stages[stage]["blocks"]
    modules = dict(model.named_modules())
    for name in chain:
        if name not in modules:
            raise ModelError(f"the plan's block {name!r} is not in {type(model).__name__} (a plan for another model?)")
    owner = {m: k for k, s in enumerate(stages) for m in s["modules"]}
    # a module with weights the plan does not name (a position table the graph folded into a
    # constant) goes with the first stage when the model registers it before its blocks, else the last
    order = list(modules)
    start = order.index(chain[0])
    for k, name in enumerate(order):
        if (
            name not in owner
            and not _inside(name, chain)
            and any(True for _ in modules[name].parameters(recurse=False))
        ):
            owner[name] = 0 if k < start else len(stages) - 1
    placed = {b: k for k, s in enumerate(stages) for b in s["blocks"]}

    def stage_of(name: str) -> int | None:
        block = next((b for b in chain if name == b or name.startswith(b + ".")), None)
        return placed[block] if block is not None else owner.get(name)

    holders: dict[int, set[str]] = {}
    for name, module in modules.items():
        for p in module.parameters(recurse=False):
            holders.setdefault(id(p), set()).add(name)
    for names in holders.values():
        if len({stage_of(n) for n in names}) > 1:
            raise ModelError(
                f"modules {' and '.join(sorted(names))} share a weight across stages; pipelining needs it untied"
            )
    kinds = _classes()
    first, last = chain.index(mine[0]), chain.index(mine[-1])
    for k, name in enumerate(chain):
        if k < first:
            _swap_module(model, name, kinds["PassThrough"](name))
        elif k == last + 1:
            _swap_module(model, name, kinds["StageEnd"](name))
        elif k > last + 1:
            _swap_module(model, name, kinds["Elsewhere"](name))
    for name, module in modules.items():
        if _inside(name, chain) or name not in owner or owner[name] == stage:
            continue
        if owner[name] < stage:
            _swap_module(model, name, kinds["StandIn"](name, module))
        else:
            _swap_module(model, name, kinds["Elsewhere"](name))
    return kinds["Stage"](model, model.get_submodule(mine[0]) if stage > 0 else None)


@dataclass
class Staged:
    """What :func:`pipeline_stage` did on this rank: the ``pp x dp x tp`` mesh, the device group it is
    (``stage`` of ``stages`` along the pipeline), the stages it runs (``indices`` of ``count``: one,
    or ``chunks`` under the interleaved schedule), each stage's cut model (``models``, the user's
    model first), stage module (``modules``) and layout (``dones``: :class:`Parallelized`), and the
    schedule. Feed it :meth:`step`."""

    mesh: Any
    stage: int
    stages: int
    models: list[Any]
    modules: list[Any]
    dones: list[Parallelized]
    indices: list[int]
    count: int
    schedule: Any
    microbatches: int

    @property
    def module(self) -> Any:
        return self.modules[0]

    @property
    def done(self) -> Parallelized:
        return self.dones[0]

    @property
    def first(self) -> bool:
        return self.indices[0] == 0

    @property
    def last(self) -> bool:
        return self.indices[-1] == self.count - 1

    @property
    def dp(self) -> int:
        return self.done.dp

    def parameters(self) -> list[Any]:
        """Every parameter of this rank's stages (a stage's copy of the model holds only its own)."""
        return [p for model in self.models for p in model.parameters()]

    def named_parameters(self) -> list[tuple[str, Any]]:
        return [pair for model in self.models for pair in model.named_parameters()]

    def zero_grad(self) -> None:
        for model in self.models:
            model.zero_grad(set_to_none=True)

    def step(self, inputs: tuple[Any, ...], rows: Any) -> float | None:
        """One step on this rank's data-parallel part ``inputs`` (every stage gets them: shapes for
        what the model computes without weights); ``rows``: their rows' places in the whole batch,
        which the loss reads its weights at. Returns the loss of this part on the last stage's rank
        (the mean over its micro-batches), None elsewhere."""
        args = inputs if self.first else ()  # the first stage reads the inputs, the others take them as shapes
        named = {f"input{i}": t for i, t in enumerate(inputs)} if len(self.indices) > 1 or not self.first else {}
        if self.last:
            losses: list[Any] = []
            self.schedule.step(*args, target=rows, losses=losses, **named)
            return float(sum(float(x.detach()) for x in losses))
        self.schedule.step(*args, **named)
        return None


def pipeline_stage(model: Any, plan: Any, mesh: Any = None, *, prefetch: bool = True) -> Staged:
    """This rank's stages of ``plan``'s pipeline (an exported plan with a ``pipeline`` section, or its
    path): ``model`` cut to the stage (:func:`cut_model`; under the interleaved schedule a copy of it
    for each further stage the rank runs, made before the cut), laid out on its ``dp x tp`` part of
    the ``pp x dp x tp`` ``mesh`` (default: one made on the process group) by
    :func:`~stratopt.torch.apply.parallelize`, and the plan's schedule (1F1B, GPipe or interleaved
    1F1B) over its micro-batches, with the loss :func:`~stratopt.torch.check.loss_of` takes."""
    torch = _torch()
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    exported = plan_of(plan)
    if exported.pipeline is None or exported.mesh is None:
        raise ModelError("the plan has no pipeline stages (made with plan --stages N --expressible torch?)")
    dp, tp = exported.mesh
    groups, chunks = exported.stages, exported.chunks
    count = groups * chunks
    if not dist.is_initialized():
        raise ModelError("a pipeline stage needs an initialised process group (torch.distributed.init_process_group)")
    if mesh is None:
        if dist.get_world_size() != groups * dp * tp:
            raise ModelError(
                f"the plan runs on {groups} stages of {dp} x {tp} = {groups * dp * tp} processes, not {dist.get_world_size()}"
            )
        kind = "cuda" if dist.get_backend() == "nccl" else "cpu"
        mesh = init_device_mesh(kind, (groups, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    rank = int(mesh.get_coordinate()[0])
    indices = [rank + i * groups for i in range(chunks)]
    m = int(exported.pipeline["microbatches"])
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    # the copies first, from the whole model, one at a time (each cut at once: at most two models whole)
    cut: list[tuple[Any, Any]] = []  # each stage's model and stage module
    for i in reversed(range(chunks)):
        whole = copy.deepcopy(model) if i else model
        cut.insert(0, (whole, cut_model(whole, exported, indices[i])))
    modules, dones, runners = [], [], []
    for (own_model, module), j in zip(cut, indices, strict=True):
        section = exported.pipeline["stages"][j]
        mine = set(section["modules"])
        own = dataclasses.replace(
            exported,
            modules={n: e for n, e in exported.modules.items() if n in mine},
            recompute=tuple(section["recompute"]),
            pipeline=None,
        )
        done = parallelize(own_model, own, mesh["dp", "tp"], prefetch=prefetch)
        runners.append(_sync_once(PipelineStage, own_model, done)(module, j, count, device, group=mesh.get_group("pp")))
        modules.append(module)
        dones.append(done)
    part = int(mesh.get_coordinate()[1])

    def loss(out: Any, rows: Any) -> Any:
        per_part = rows.numel() * m
        whole = (per_part * dp, *out.shape[1:])
        weights = loss_weights(whole, 1, 0, out.dtype, out.device)
        return (out * weights[rows + part * per_part]).mean() / m

    kind = exported.pipeline["schedule"]
    if kind == "interleaved":
        schedule = ScheduleInterleaved1F1B(runners, m, loss_fn=loss, scale_grads=False)
    else:
        schedules: dict[str, Any] = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}
        schedule = schedules[kind](runners[0], m, loss_fn=loss, scale_grads=False)
    return Staged(mesh, rank, groups, [pair[0] for pair in cut], modules, dones, indices, count, schedule, m)


def _sync_once(base: Any, model: Any, done: Parallelized) -> Any:
    """``base`` (``PipelineStage``) whose stage reduces its gradients over the data-parallel replicas
    in the last micro-batch's backward only."""

    class SyncOnce(base):  # type: ignore[misc, valid-type]
        def backward_maybe_with_nosync(self, backward_type: Any, bwd_kwargs: dict, last_backward: bool = False) -> Any:
            done.sync[0] = last_backward
            if hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(last_backward)
            return super().backward_maybe_with_nosync(backward_type, bwd_kwargs, last_backward)

    return SyncOnce


@contextmanager
def count_transfers(into: Counter[tuple[str, int]]) -> Iterator[None]:
    """Count the pipeline's sends and receives (``("send" | "recv", bytes)``) while inside: every
    point-to-point operation the schedules issue goes through ``_batch_p2p``."""
    from torch.distributed.pipelining import schedules

    original = schedules._batch_p2p

    def counted(ops: list[Any], desc: str | None = None) -> Any:
        for op in ops:
            kind = "send" if "send" in getattr(op.op, "__name__", "") else "recv"
            into[(kind, int(op.tensor.numel() * op.tensor.element_size()))] += 1
        return original(ops, desc)

    schedules._batch_p2p = counted  # type: ignore[assignment]
    try:
        yield
    finally:
        schedules._batch_p2p = original
