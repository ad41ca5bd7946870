"""Apply an exported plan to a PyTorch model on a device mesh (see :mod:`stratopt.torch`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import networkx as nx

from stratopt.errors import ModelError
from stratopt.planning.export import ExportedPlan, load_plan
from stratopt.torch.fused import beside_pieces, fused_colwise, pieces_class, strided_vectors
from stratopt.torch.norms import split_width
from stratopt.torch.selective import selective_context

__all__ = ["Parallelized", "parallelize", "plan_of", "validate"]


def _torch() -> Any:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise ModelError("applying a plan needs the 'torch' extra: pip install 'stratopt[torch]'") from None
    if not dist.is_available():
        raise ModelError("this PyTorch build has no torch.distributed")
    return torch


def plan_of(plan: Any) -> ExportedPlan:
    """An :class:`ExportedPlan` from a :class:`~stratopt.planning.PlanResult`, an exported plan or
    the path of one; a plan DTensor cannot run is a :class:`ModelError` saying why."""
    if isinstance(plan, str | os.PathLike):
        plan = load_plan(plan)
    elif not isinstance(plan, ExportedPlan):
        plan = ExportedPlan.of(plan)
    if plan.mesh is None:
        raise ModelError(f"the plan has no PyTorch form: {plan.why or 'it was exported without modules (version 1)'}")
    return plan


@dataclass
class Parallelized:
    """What :func:`parallelize` did: the mesh, the modules it split or sharded, the modules whose
    gradients it all-reduces over the data-parallel groups, and the blocks it checkpoints."""

    mesh: Any
    plan: ExportedPlan
    styles: dict[str, str] = field(default_factory=dict)
    sharded: list[str] = field(default_factory=list)
    synced: list[str] = field(default_factory=list)
    recomputed: list[str] = field(default_factory=list)
    sync: list[bool] = field(default_factory=lambda: [True])  # [False]: gradients accumulate unreduced

    @property
    def dp(self) -> int:
        return int(self.mesh.shape[0])

    def local_batch(self, tensors: Any) -> Any:
        """This rank's part of a batch (dimension 0 split over the data-parallel groups)."""
        torch = _torch()
        rank = int(self.mesh.get_coordinate()[0])

        def cut(t: Any) -> Any:
            if not isinstance(t, torch.Tensor) or not t.dim():
                return t
            if t.shape[0] % self.dp:
                raise ModelError(f"the batch of {t.shape[0]} does not split over {self.dp} data-parallel groups")
            return t.chunk(self.dp, dim=0)[rank]

        return tuple(cut(t) for t in tensors) if isinstance(tensors, tuple | list) else cut(tensors)


def _module_class(module: Any) -> str:
    return type(module).__name__


def _styles(torch: Any, name: str, module: Any, entry: dict[str, Any]) -> Any:
    """The ParallelStyle that runs ``module`` as ``entry`` says."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    kind = entry["tp"]
    if kind == "expert":
        return _experts(name, module)
    if kind == "sequence":
        from torch.distributed.tensor.parallel import SequenceParallel

        return SequenceParallel(sequence_dim=entry["sequence_dim"], use_local_output=False)
    seq = Shard(entry.get("sequence_dim", 1))  # split over the sequence: DTensors of the whole shape
    out = Shard(-1) if entry.get("output") == "shard" else seq if entry.get("output") == "sequence" else Replicate()
    into = Shard(-1) if entry.get("input") == "shard" else seq if entry.get("input") == "sequence" else Replicate()
    summed: dict[str, Any] = (
        {"output_layouts": seq, "use_local_output": False} if entry.get("output") == "sequence" else {}
    )
    if kind == "rowwise" and entry.get("output") == "shard":  # partial sums reduce-scattered into a split region
        summed = {"output_layouts": Shard(-1)}
    nn = torch.nn
    fused = isinstance(module, nn.Linear) or _module_class(module) == "Conv1D"
    if kind == "colwise" and int(entry.get("pieces", 1)) > 1 and fused:
        return fused_colwise(name, module, int(entry["pieces"]), into)
    if isinstance(module, nn.Embedding):
        if kind == "vocab":
            return RowwiseParallel(input_layouts=Replicate(), **summed)
        if kind == "colwise":  # (its split handed on as it is to a stream split over the width)
            return ColwiseParallel(output_layouts=out, use_local_output=entry.get("output") != "sequence")
    elif isinstance(module, nn.Linear):
        if kind == "colwise":  # (its split of the width handed on as it is to a stream split so: a DTensor)
            return ColwiseParallel(
                input_layouts=into, output_layouts=out, use_local_output=entry.get("output") != "sequence"
            )
        if kind == "rowwise":
            return RowwiseParallel(input_layouts=into, **summed)
    elif _module_class(module) == "Conv1D" and getattr(module, "weight", None) is not None:
        if kind == "colwise":
            local = entry.get("output") != "sequence"
            return _conv1d(ColwiseParallel, input_layouts=into, output_layouts=out, use_local_output=local)
        if kind == "rowwise":
            return _conv1d(RowwiseParallel, input_layouts=into, **summed)
    raise ModelError(f"module {name!r} ({_module_class(module)}): DTensor has no {kind} style for it")


def _conv1d(base: Any, **layouts: Any) -> Any:
    """``base`` (ColwiseParallel or RowwiseParallel) for Hugging Face's ``Conv1D``, whose weight is
    stored transposed (``[in, out]``): the split dimension of the weight swaps, the bias follows the
    output features (split when they are, whole otherwise)."""
    from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor

    column = base.__name__.startswith("Colwise")

    class Conv1DStyle(base):  # type: ignore[misc, valid-type]
        def _apply(self, module: Any, device_mesh: Any) -> Any:
            import torch

            def partition(_name: str, mod: Any, mesh: Any) -> None:
                for pname, param in list(mod.named_parameters(recurse=False)):
                    place: list[Any] = [Shard(1) if column else Shard(0)]
                    if pname != "weight":
                        place = [Shard(0)] if column else [Replicate()]
                    dt = distribute_tensor(param, mesh, place)
                    mod.register_parameter(pname, torch.nn.Parameter(dt, requires_grad=param.requires_grad))

            desired = (Replicate(),) if column else (Shard(-1),)
            return distribute_module(
                module,
                device_mesh,
                partition,
                partial(self._prepare_input_fn, self.input_layouts, desired),
                partial(self._prepare_output_fn, self.output_layouts, self.use_local_output),
            )

    return Conv1DStyle(**layouts)


def _stacked(name: str, module: Any, ways: int, over: str) -> tuple[dict[str, Any], int]:
    """A mixture of experts' ``*Experts`` module's parameters and expert count, once every parameter
    is stacked over the experts (its first dimension) and the experts split ``ways`` ways over
    ``over``; else a one-line :class:`ModelError`."""
    params = dict(module.named_parameters(recurse=False))
    count = getattr(module, "num_experts", None)
    if not isinstance(count, int) or not params or any(p.shape[0] != count for p in params.values()):
        raise ModelError(f"module {name!r} ({_module_class(module)}): not a mixture of experts' stacked experts")
    if count % ways:
        raise ModelError(f"module {name!r}: {count} experts do not split over {ways} {over}")
    return params, count


def _split_experts(module: Any, params: dict[str, Any], mesh: Any) -> None:
    """Each of ``params`` split over ``mesh`` on its first dimension (a contiguous share of the
    experts per device)."""
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor

    for pname, param in params.items():
        dt = distribute_tensor(param, mesh, [Shard(0)])
        module.register_parameter(pname, torch.nn.Parameter(dt, requires_grad=param.requires_grad))


@contextlib.contextmanager
def _local_experts(module: Any, names: list[str], count: int, local: int, skipped: bool) -> Iterator[None]:
    """``module`` as the experts of this device only while inside: its parameters ``names`` their
    local shares, ``num_experts`` ``local`` (``skipped``: choices of index ``local`` are "not here",
    Hugging Face's contract, which its batched kernels follow with ``_is_expert_parallel``)."""
    held = {n: module._parameters[n] for n in names}
    flag = getattr(module, "_is_expert_parallel", None)
    try:
        for n, p in held.items():
            module._parameters[n] = p.to_local() if hasattr(p, "to_local") else p
        module.num_experts = local
        if skipped and flag is not None:
            module._is_expert_parallel = True
        yield
    finally:
        module._parameters.update(held)
        module.num_experts = count
        if flag is not None:
            module._is_expert_parallel = flag


def _experts(name: str, module: Any) -> Any:
    """A ParallelStyle for a mixture of experts' ``*Experts`` module (stacked weights, called with the
    tokens, each token's chosen experts and their weights): each device of the ``tp`` group holds a
    contiguous ``1/tp`` of the experts (every parameter split on its first dimension, the expert
    axis) and runs the module's own forward on them, every other expert's choices turned into the
    module's "not here" index (``num_experts``, which Hugging Face's experts skip); the tokens'
    partial sums are all-reduced in the forward pass, and the gradients of the tokens and of their
    weights (each device's experts add their part) in one all-reduce in the backward pass."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor.parallel import ParallelStyle

    forward = type(module).forward

    class _Summed(torch.autograd.Function):
        """The experts' partial sums all-reduced forward; the gradient passed on as it is. The sum
        is kept for the backward pass (it is the module's output, which the plan keeps): a
        checkpointed block's re-run then runs to it and issues the all-reduce again, as the plan
        prices a recomputed combine (early stopping would otherwise end the re-run before it)."""

        @staticmethod
        def forward(ctx: Any, part: Any, group: Any) -> Any:
            out = part.clone()
            dist.all_reduce(out, group=group)
            ctx.save_for_backward(out)
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    class _Shared(torch.autograd.Function):
        """Tokens (and their weights) every device reads whole: passed on as they are; their gradients,
        each device's part, all-reduced in one collective (as float32 where their types differ)."""

        @staticmethod
        def forward(ctx: Any, group: Any, *tensors: Any) -> Any:
            ctx.group = group
            return tuple(t.view_as(t) for t in tensors)

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            kinds = {g.dtype for g in grads}
            common = grads[0].dtype if len(kinds) == 1 else torch.float32
            flat = torch.cat([g.reshape(-1).to(common) for g in grads])
            dist.all_reduce(flat, group=ctx.group)
            out, at = [], 0
            for g in grads:
                out.append(flat[at : at + g.numel()].view_as(g).to(g.dtype))
                at += g.numel()
            return (None, *out)

    class ExpertParallel(ParallelStyle):
        def _apply(self, module: Any, mesh: Any) -> Any:
            ways = mesh.size()
            params, count = _stacked(name, module, ways, "devices")
            local, group = count // ways, mesh.get_group()
            first = mesh.get_local_rank() * local
            _split_experts(module, params, mesh)

            def run(tokens: Any, chosen: Any, weights: Any, *args: Any, **kwargs: Any) -> Any:
                tokens, weights = _Shared.apply(group, tokens, weights)
                here = chosen - first
                mine = (here >= 0) & (here < local)
                here = torch.where(mine, here, torch.full_like(here, local))
                weights = torch.where(mine, weights, torch.zeros_like(weights))  # Hugging Face's EP contract
                with _local_experts(module, list(params), count, local, skipped=True):  # its own forward
                    part = forward(module, tokens, here, weights, *args, **kwargs)
                return _Summed.apply(part, group)

            module.forward = run
            return module

    return ExpertParallel()


def _experts_dp(name: str, module: Any, mesh: Any) -> None:
    """Split a mixture of experts' ``*Experts`` module over the data-parallel groups of ``mesh``
    (its ``dp`` dimension): each group holds a contiguous ``1/dp`` of the experts, every parameter
    split on its first dimension. Each token's choices travel to the groups holding their experts
    (the counts per expert first, then the tokens, in all-to-alls), run there through the
    module's own forward one choice at a time, and come back to be weighted and summed where the
    token lives; the gradients travel back the same two ways."""
    import torch
    import torch.distributed as dist
    from torch.distributed._functional_collectives import all_to_all_single_autograd

    ways = mesh.size()
    params, count = _stacked(name, module, ways, "data-parallel groups")
    local, group = count // ways, mesh.get_group()
    forward = type(module).forward
    _split_experts(module, params, mesh)
    for pname, param in params.items():
        if param.requires_grad:  # every group's tokens add to it: averaged as data parallelism averages
            module._parameters[pname].register_hook(lambda g: g / ways)

    def run(tokens: Any, chosen: Any, weights: Any, *args: Any, **kwargs: Any) -> Any:
        rows, k = chosen.shape
        experts = chosen.reshape(-1)
        order = torch.argsort(experts, stable=True)  # each choice, grouped by its expert
        sent = torch.bincount(experts, minlength=count)  # choices per expert, from here
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=group)  # per group, its choices of each of my experts
        send = sent.view(ways, local).sum(1).tolist()
        take = got.view(ways, local).sum(1).tolist()
        arrived = all_to_all_single_autograd(tokens[order // k], take, send, group)
        mine = torch.repeat_interleave(torch.arange(local, device=got.device).repeat(ways), got)
        ones = torch.ones(len(mine), 1, dtype=weights.dtype, device=weights.device)
        with _local_experts(module, list(params), count, local, skipped=False):  # one choice per row
            done = forward(module, arrived, mine[:, None], ones, *args, **kwargs)
        back = all_to_all_single_autograd(done.contiguous(), send, take, group)
        placed = torch.empty_like(back).index_copy(0, order, back)  # each choice's result, in (token, k) order
        return (placed.view(rows, k, -1) * weights[..., None].to(placed.dtype)).sum(1).to(tokens.dtype)

    module.forward = run


def _sequence_ends(module: Any, entry: dict[str, Any], mesh: Any) -> None:
    """A module with whole weights that reads a tensor split over the sequence gathers it first (its
    input a DTensor: ``full_tensor``); one that hands its output on split so takes its device's slice
    (a DTensor of the whole shape, as every sequence-parallel operator reads it)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    if entry.get("input") == "sequence":

        def gather(_module: Any, args: Any, kwargs: Any) -> Any:
            def whole(x: Any) -> Any:
                return x.full_tensor() if isinstance(x, DTensor) else x

            return tuple(whole(a) for a in args), {k: whole(v) for k, v in kwargs.items()}

        module.register_forward_pre_hook(gather, with_kwargs=True)
    if entry.get("output") == "sequence":
        dim = int(entry["sequence_dim"])

        def cut(_module: Any, _args: Any, output: Any) -> Any:
            whole = DTensor.from_local(output, mesh, [Replicate()], run_check=False)
            return whole.redistribute(mesh, [Shard(dim % output.ndim)])

        module.register_forward_hook(cut)


def _summed_weights(module: Any) -> None:
    """A sequence-parallel norm's weights are whole on every device of the group and each device's
    tokens add their part of the gradient (DTensor leaves it a partial sum): all-reduced over the
    group as the backward pass reaches it, so that every device steps with the whole gradient."""
    from torch.distributed.tensor import Replicate

    for param in module.parameters(recurse=False):
        if param.requires_grad:
            param.register_hook(
                lambda g: g.redistribute(g.device_mesh, [Replicate()]) if g.placements[0].is_partial() else g
            )


def _sync_gradients(torch: Any, params: list[Any], group: Any, ways: int, gate: list[bool]) -> None:
    """Average the gradients of one module's ``params`` over the data-parallel ``group`` in one
    all-reduce, once the last of them is accumulated (a bucket per module, as DDP buckets them);
    while ``gate[0]`` is false (a pipeline's micro-batches before the last), they accumulate unreduced."""
    import torch.distributed as dist

    ready: set[int] = set()

    def local(g: Any) -> Any:
        return g._local_tensor if hasattr(g, "_local_tensor") else g

    def hook(p: Any) -> None:
        ready.add(id(p))
        if len(ready) < len(params):
            return
        ready.clear()
        if not gate[0]:
            return
        grads = [local(q.grad) for q in params if q.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads]) if len(grads) > 1 else grads[0].reshape(-1)
        dist.all_reduce(flat, group=group)
        flat /= ways
        if len(grads) > 1:
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        else:
            grads[0].copy_(flat.view_as(grads[0]))

    for p in params:
        p.register_post_accumulate_grad_hook(hook)


def _owned_output(_module: Any, _inputs: Any, output: Any) -> Any:
    """A tensor-parallel module's local output, which DTensor hands on as a view of its own
    (``to_local``), as a tensor of its own: model code that adds to it in place (Falcon's
    ``mlp_output += attention_output``) may not modify that view."""
    import torch

    if isinstance(output, torch.Tensor) and not isinstance(output, pieces_class()) and output._is_view():
        return output.clone()  # (an all-reduced output is a collective's tensor, waited for here)
    return output


def _shared_params(modules: dict[str, Any]) -> list[list[tuple[str, str]]]:
    """The parameters several modules hold (a tied embedding and output projection), each as its
    ``(module, parameter)`` names in the model's order."""
    holders: dict[int, list[tuple[str, str]]] = {}
    for name, module in modules.items():
        for pname, param in module.named_parameters(recurse=False):
            holders.setdefault(id(param), []).append((name, pname))
    return [group for group in holders.values() if len(group) > 1]


def _retie(modules: dict[str, Any], shared: list[list[tuple[str, str]]], named: Any) -> None:
    """Tie each of ``shared`` again after the tensor-parallel styles, or FSDP, laid its modules out
    (each makes its own distributed copy): every holder takes the parameter of the first the plan
    names (``named``; a module it does not name, T5's ``shared`` beside the encoder's
    ``embed_tokens``, holds what its tied readers hold), which the plan splits the same way for all
    of those it names (else a one-line :class:`ModelError`)."""
    for group in shared:
        ours = [(n, p) for n, p in group if n in named]
        (first, fname), *_ = ours or group
        param = modules[first]._parameters[fname]
        for name, pname in group:
            mine = modules[name]._parameters[pname]
            if mine is param:
                continue
            here, there = (getattr(p, "placements", None) for p in (param, mine))
            if name in named and here != there:
                raise ModelError(
                    f"modules {first!r} and {name!r} share {fname!r}, which the plan lays out as {here} and {there}"
                )
            modules[name].register_parameter(pname, param)


def validate(model: Any, plan: ExportedPlan) -> dict[str, Any]:
    """``model``'s modules by name, once every module and parameter ``plan`` names is found in it
    (else a one-line :class:`ModelError` naming the first that is not)."""
    modules = dict(model.named_modules())
    for name in plan.recompute:
        if name not in modules:
            raise ModelError(f"the plan's block {name!r} is not in {type(model).__name__} (a plan for another model?)")
    for name, entry in plan.modules.items():
        if name not in modules:
            raise ModelError(f"the plan's module {name!r} is not in {type(model).__name__} (a plan for another model?)")
        own = dict(modules[name].named_parameters(recurse=False))
        for pname in entry.get("params", []):
            where, _, leaf = pname.rpartition(".")
            if where == name and leaf not in own:
                raise ModelError(f"the plan's parameter {pname!r} is not in module {name!r}")
    return modules


def _hybrid_mesh(mesh: Any, exported: ExportedPlan) -> Any:
    """The 2-D mesh (replicate, shard) HSDP shards the plan's ``hsdp`` modules over: the ``dp``
    dimension of ``mesh`` cut into groups of the plan's shard size (one node's data-parallel
    devices, next to each other), or None where no module is HSDP. One size for the plan (else a
    one-line :class:`ModelError`)."""
    sizes = {int(e["hsdp"]) for e in exported.modules.values() if e.get("hsdp")}
    if not sizes:
        return None
    if len(sizes) > 1:
        raise ModelError(f"the plan shards HSDP over groups of {sorted(sizes)} devices; one size per plan runs")
    (size,) = sizes
    dp = int(mesh["dp"].size())
    return mesh["dp"]._unflatten(0, (dp // size, size), ("replicate", "shard"))


def tied_groups(modules: dict[str, Any], names: list[str]) -> list[list[str]]:
    """``names`` grouped by the parameters their modules share (a group and its members in the plan's
    order): the connected pieces of the graph joining each module to its parameters."""
    graph = nx.Graph()
    for name in names:
        graph.add_node(name)
        graph.add_edges_from((name, id(p)) for p in modules[name].parameters(recurse=False))
    order = {name: k for k, name in enumerate(names)}
    groups = [
        sorted((n for n in piece if n in order), key=order.__getitem__) for piece in nx.connected_components(graph)
    ]
    return sorted(groups, key=lambda g: order[g[0]])


def parallelize(model: Any, plan: Any, mesh: Any = None, *, prefetch: bool = True) -> Parallelized:
    """Lay ``model`` out as ``plan`` says (a :class:`~stratopt.planning.PlanResult`, an exported
    plan or its path) on ``mesh``: a 2-D ``DeviceMesh`` named ``("dp", "tp")`` of the plan's shape
    (default: one made on the initialised process group, CPU for gloo). Column- and row-parallel
    modules become DTensor's ``ColwiseParallel`` / ``RowwiseParallel`` over ``tp`` (an embedding
    split over its vocabulary ``RowwiseParallel``, a mixture of experts' module split over its
    experts :func:`_experts`' style); modules with sharded weight state are
    ``fully_shard``-ed over ``dp``; every other module's gradients are all-reduced over ``dp``, one
    collective per module; the blocks the plan recomputes are checkpointed (PyTorch's composable
    ``checkpoint``, which keeps every module's name; the forward runs again up to the last tensor
    it saved, ``early_stop``, as the plan prices it: a block's last product is not run again). The
    plan must come from this model: a module it names that the model lacks is a one-line
    :class:`ModelError`. Feed each rank :meth:`Parallelized.local_batch`.
    ``prefetch=False`` keeps each sharded module's gathers inside its own forward and backward (FSDP
    otherwise issues the next module's early), so that they are counted where the plan priced them.
    A block checkpointed selectively saves the products of the modules the plan keeps, and its
    attention kernel's outputs where the plan keeps them (:mod:`stratopt.torch.selective`)."""
    torch = _torch()
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    exported = plan_of(plan)
    assert exported.mesh is not None
    if exported.pipeline is not None:
        raise ModelError("a pipelined plan runs stage by stage: use stratopt.torch.pipeline_stage")
    dp, tp = exported.mesh
    if not dist.is_initialized():
        raise ModelError("parallelize needs an initialised process group (torch.distributed.init_process_group)")
    if mesh is None:
        world = dist.get_world_size()
        if world != dp * tp:
            raise ModelError(f"the plan runs on {dp} x {tp} = {dp * tp} processes, not {world}")
        kind = "cuda" if dist.get_backend() == "nccl" else "cpu"
        mesh = init_device_mesh(kind, (dp, tp), mesh_dim_names=("dp", "tp"))
    if tuple(mesh.shape) != (dp, tp):
        raise ModelError(f"the plan's mesh is {dp} x {tp}, the mesh given {' x '.join(map(str, mesh.shape))}")
    modules = validate(model, exported)
    shared = _shared_params(modules)
    done = Parallelized(mesh, exported)
    for name, entry in exported.modules.items():  # experts over the data-parallel groups (all-to-all)
        if entry["tp"] == "expert-dp":
            _experts_dp(name, modules[name], mesh["dp"])
            done.styles[name] = "expert-dp"
    split = {n: e for n, e in exported.modules.items() if e["tp"] not in ("replicate", "expert-dp", "width")}
    if split and tp > 1:
        from torch.distributed.tensor.parallel import parallelize_module

        styles = {name: _styles(torch, name, modules[name], e) for name, e in split.items()}
        parallelize_module(model, mesh["tp"], styles)
        _retie(modules, shared, exported.modules)
        for name in styles:
            modules[name].register_forward_hook(_owned_output)
        done.styles.update({name: type(s).__name__ for name, s in styles.items()})
    for name, entry in exported.modules.items():  # whole modules at the ends of a sequence split
        if entry["tp"] == "replicate" and "sequence" in (entry.get("input"), entry.get("output")):
            _sequence_ends(modules[name], entry, mesh["tp"])
        elif entry["tp"] == "sequence" and tp > 1:
            _summed_weights(modules[name])
        elif entry["tp"] == "width" and tp > 1:
            split_width(torch, modules[name], mesh["tp"])
            done.styles[name] = "width"
    if exported.recompute:
        from torch.distributed._composable import checkpoint

        for name in exported.recompute:  # hooks only: every module keeps its name
            keep = [m for m in exported.keep if m.startswith(name + ".")]
            if keep or name in exported.keep_attention:  # selective: the plan keeps some products
                context = selective_context(name, modules[name], keep, name in exported.keep_attention)
                checkpoint(modules[name], early_stop=True, context_fn=context)
            else:
                checkpoint(modules[name], early_stop=True)
        done.recomputed = list(exported.recompute)
    if dp > 1:
        from torch.distributed.fsdp import fully_shard

        sharded = [name for name, entry in exported.modules.items() if entry["fsdp"]]
        hybrid = _hybrid_mesh(mesh, exported)
        apart_of: dict[str, list[Any]] = {}  # a fused projection's vectors: interleaved on their one dimension
        for names in tied_groups(modules, sharded):
            # modules that share a parameter (a tied embedding and output projection) shard it once, together
            group = [modules[n] for n in names]
            vectors = {n: strided_vectors(modules[n]) for n in names}
            apart_of.update({n: v for n, v in vectors.items() if v})
            fully_shard(
                group if len(group) > 1 else group[0],
                # HSDP: sharded inside each node's group, replicated across them
                mesh=hybrid if exported.modules[names[0]].get("hsdp") else mesh["dp"],
                # ZeRO-2: the weights gathered for the forward pass kept for the backward pass
                reshard_after_forward=all(exported.modules[n].get("reshard", True) for n in names),
                ignored_params={p for v in vectors.values() for p in v} or None,
                shard_placement_fn=beside_pieces,
            )
            if not prefetch:  # an explicit list turns the implicit prefetch off; itself is already gathered
                for m in group:
                    m.set_modules_to_backward_prefetch([m])
            done.sharded.extend(names)
        owned = set(done.sharded)
        if owned:  # the root holds the rest unsharded, so that each sharded module reshards after its forward
            kept = {p for n, m in modules.items() if n not in owned for p in m.parameters(recurse=False)}
            kept |= {p for v in apart_of.values() for p in v}
            fully_shard(model, mesh=mesh["dp"], ignored_params=kept)
            _retie(modules, shared, exported.modules)  # a holder the plan does not name takes the sharded parameter
        group = mesh.get_group("dp")
        apart = {n for n, e in exported.modules.items() if e["tp"] == "expert-dp"}  # held once, not replicas
        seen: set[int] = set()  # a tied parameter synchronised once, by the module the plan names
        for name, module in sorted(modules.items(), key=lambda item: item[0] not in exported.modules):
            params = [p for p in module.parameters(recurse=False) if p.requires_grad and id(p) not in seen]
            params = apart_of.get(name, []) if name in owned else params
            seen.update(id(p) for p in module.parameters(recurse=False))
            if params and name not in apart:
                _sync_gradients(torch, params, group, dp, done.sync)
                done.synced.append(name)
    return done
