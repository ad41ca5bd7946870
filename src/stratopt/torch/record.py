"""Count the collectives a step issues, per module and pass (forward or backward).

PyTorch's ``CommDebugMode`` counts them per module too, but follows the backward pass with module
backward hooks, which refuse a model that modifies a module's output in place (Hugging Face's ResNet
adds its shortcut into the block's output). :class:`CollectiveRecorder` instead sees every collective
in a ``TorchDispatchMode`` (c10d's and the functional collectives DTensor issues, those inside its
operators too: the mode lets DTensor run first) and attributes it
to the module running: in the forward pass the innermost module whose forward is executing; in the
backward pass the module whose output's gradient arrived last (a hook on the output tensor), which
is where its gathers, its input gradient's reduction and its weights' gradient reduction happen; a
forward the backward pass runs (a checkpointed block recomputing) counts as ``recompute``. It also
counts, the same way, the matrix products and attention kernels each module runs (those selective
checkpointing saves are not run again: :mod:`stratopt.torch.selective`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from stratopt.torch.runs import tensors_of
from stratopt.torch.selective import is_attention, is_product

__all__ = ["CollectiveRecorder", "kind_of"]

#: Collectives by their operator names, as the plan names them.
KINDS = {
    "all_reduce": "all_reduce", "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_gather_into_tensor": "all_gather", "_allgather_base_": "all_gather", "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "allgather_coalesced_": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter", "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all_single": "all_to_all",
    "alltoall_base_": "all_to_all", "alltoall_": "all_to_all", "broadcast": "broadcast", "broadcast_": "broadcast",
}  # fmt: skip
_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd")


def kind_of(func: Any) -> str | None:
    """``all_reduce`` for ``c10d.allreduce_.default`` and the like; None for anything else."""
    packet = getattr(func, "_overloadpacket", func)
    namespace = getattr(packet, "_qualified_op_name", str(packet)).split("::")[0]
    if namespace not in _NAMESPACES:
        return None
    return KINDS.get(getattr(packet, "__name__", str(packet)).split(".")[-1])


class _Restore:
    """A handle that removes an attribute set on an instance (the class's method shows again)."""

    def __init__(self, owner: Any, attribute: str) -> None:
        self.owner, self.attribute = owner, attribute

    def remove(self) -> None:
        self.owner.__dict__.pop(self.attribute, None)


class CollectiveRecorder:
    """Use as ``with CollectiveRecorder(model) as rec: loss = f(model(x)); loss.backward()`` (or a list
    of models: a pipeline rank's stages); then
    ``rec.counts[(module, "forward" | "backward" | "recompute")]`` is a Counter of collective kinds (module ``""``:
    outside every module of ``model``)."""

    def __init__(self, model: Any) -> None:
        self.models = list(model) if isinstance(model, list | tuple) else [model]  # several: a rank's stages
        self.counts: dict[tuple[str, str], Counter[str]] = {}
        self.stack: list[tuple[str, bool]] = []
        self.runs: Counter[tuple[str, str]] = Counter()
        self.work: dict[tuple[str, str], Counter[str]] = {}  # (module, pass): products and attention kernels
        self.backward_at = ""
        self.in_backward = False
        self.handles: list[Any] = []
        self.mode: Any = None

    def _where(self) -> tuple[str, str]:
        if self.stack and self.stack[-1][1]:
            return self.stack[-1][0], "recompute"
        if self.in_backward:
            return self.backward_at, "backward"
        return self.stack[-1][0] if self.stack else "", "forward"

    def _record(self, kind: str) -> None:
        self.counts.setdefault(self._where(), Counter())[kind] += 1

    def _computed(self, func: Any) -> None:
        kind = "attention" if is_attention(func) else "product" if is_product(func) else None
        if kind is not None:
            module, phase = self._where()
            if phase != "backward":
                self.work.setdefault((module, phase), Counter())[kind] += 1

    def __enter__(self) -> CollectiveRecorder:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self

        from torch.distributed.tensor import DTensor

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                if any(issubclass(t, DTensor) for t in types):
                    # DTensor first: it issues what its operators need (a width-split norm's
                    # statistics all-reduced), and this mode then sees those collectives and the
                    # local operators it runs, as CommDebugMode does
                    return NotImplemented
                kind = kind_of(func)
                if kind is not None:
                    recorder._record(kind)
                else:
                    recorder._computed(func)
                return func(*args, **(kwargs or {}))

        for name, module in (pair for model in self.models for pair in model.named_modules()):
            self.handles.append(module.register_forward_pre_hook(self._enter(name, torch), prepend=True))
            # after DTensor's output re-layout (the module's own), before FSDP's hook on the same
            # output, whose gradient hook gathers the weights at the start of the module's backward
            self.handles.append(module.register_forward_hook(self._claim(name, torch)))
            # also when the forward raises: a checkpointed block's re-run stops inside its last product
            self.handles.append(module.register_forward_hook(self._leave(name), always_call=True))
            state = module._get_fsdp_state() if hasattr(module, "_get_fsdp_state") else None
            handle = getattr(state, "_post_forward_hook_handle", None)
            # modules sharded together (tied weights) share one state, whose handle holds one hook each
            for one in getattr(handle, "handles", (handle,) if handle is not None else ()):
                if one.id in module._forward_hooks:
                    module._forward_hooks.move_to_end(one.id)
            self._attribute_post_backward(name, module, state)
        self.mode = Mode()
        self.mode.__enter__()
        return self

    def _attribute_post_backward(self, name: str, module: Any, state: Any) -> None:
        """FSDP reduce-scatters a module's gradients after its backward pass, or, where nothing the
        module reads needs a gradient (an embedding of token ids, a position bias of constant ids),
        at the end of the backward pass, for every such module at once: either way, what it issues
        there belongs to the module (one sharded alone; modules sharded together keep the rule
        above)."""
        group = getattr(state, "_fsdp_param_group", None)
        if group is None or len(getattr(group, "modules", ())) != 1 or group.modules[0] is not module:
            return
        original = group.post_backward

        def post_backward(*args: Any) -> Any:
            before = self.in_backward, self.backward_at
            self.in_backward, self.backward_at = True, name
            try:
                return original(*args)
            finally:
                self.in_backward, self.backward_at = before

        group.post_backward = post_backward
        self.handles.append(_Restore(group, "post_backward"))

    def _enter(self, name: str, torch: Any) -> Any:
        def hook(_module: Any, _args: Any) -> None:
            again = torch._C._current_graph_task_id() != -1  # a forward run by the backward pass
            if not again:
                self.in_backward = False
            self.stack.append((name, again))
            self.runs[(name, "recompute" if again else "forward")] += 1

        return hook

    def _claim(self, name: str, torch: Any) -> Any:
        def arrived(grad: Any) -> None:
            self.in_backward = True
            self.backward_at = name

        def hook(_module: Any, _args: Any, output: Any) -> None:
            for t in tensors_of(output, torch):
                # a tensor handed out unchanged by several modules belongs to the innermost
                if t.requires_grad and not getattr(t, "_stratopt_claimed", False):
                    t._stratopt_claimed = True
                    t.register_hook(arrived)

        return hook

    def _leave(self, name: str) -> Any:
        def hook(_module: Any, _args: Any, _output: Any) -> None:
            if self.stack and self.stack[-1][0] == name:
                self.stack.pop()

        return hook

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def by_module(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{module: {"forward": {kind: count}, "backward": {...}, "recompute": {...}}}``."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (module, phase), counter in self.counts.items():
            out.setdefault(module, {"forward": {}, "backward": {}, "recompute": {}})[phase] = dict(
                sorted(counter.items())
            )
        return out

    def computed(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{module: {"forward": {"product": n, "attention": k}, "recompute": {...}}}``: the products and
        attention kernels each module ran as the innermost module running, forward and recomputing."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for (module, phase), counter in self.work.items():
            out.setdefault(module, {"forward": {}, "recompute": {}})[phase] = dict(counter)
        return out

    def forward_runs(self) -> dict[str, dict[str, int]]:
        """``{module: {"forward": n, "recompute": m}}``: how often each module's forward ran, in the
        forward pass and again in the backward pass (recomputation)."""
        out: dict[str, dict[str, int]] = {}
        for (module, phase), n in self.runs.items():
            out.setdefault(module, {"forward": 0, "recompute": 0})[phase] = n
        return out
