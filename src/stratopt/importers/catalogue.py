"""Every architecture of the installed ``transformers``, built tiny from its own configuration.

The task groups users train: causal LM, masked LM, encoder-decoder seq2seq, image classification.
:func:`architectures` lists them from ``transformers``' auto mappings; :func:`tiny` builds one from
its configuration's defaults with the sizes shrunk (2 layers, hidden 64, 4 heads and 2 key/value
heads, MLP 128, vocabulary 512; set through each configuration's own attribute names and
``attribute_map``), on the CPU, with example inputs (token ids, or pixels); :func:`import_one`
imports it and compares the flops of its priced products with PyTorch's count. Used by
``scripts/sweep_transformers.py`` and, on a subset, by the tests.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any

from stratopt.cost import build
from stratopt.importers import UnmappedOperatorWarning, flops, from_torch
from stratopt.importers.hf import keyword_call
from stratopt.importers.pytorch import reference_flops
from stratopt.solvers import solve_auto

__all__ = ["TASKS", "TINY", "architectures", "import_one", "tiny"]

#: Task group -> the auto mapping that lists its model classes.
TASKS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
}

#: Configuration attributes and their tiny values (only those a configuration has are set).
TINY: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "num_layers", "n_layer", "encoder_layers", "decoder_layers"), 2),
    **dict.fromkeys(("num_decoder_layers", "num_encoder_layers", "n_layers"), 2),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim", "dim"), 64),
    **dict.fromkeys(("num_attention_heads", "n_head", "encoder_attention_heads", "decoder_attention_heads"), 4),
    **dict.fromkeys(("num_heads", "n_heads"), 4),
    **dict.fromkeys(("num_key_value_heads", "num_kv_heads"), 2),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner"), 128),
    **dict.fromkeys(("moe_intermediate_size", "shared_expert_intermediate_size"), 128),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), 4),
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 2,  # expert groups (group-limited routing): two groups of the four experts, one chosen
    "topk_group": 1,
    # Multi-head latent attention (DeepSeek's family): the rotary part is as wide as head_dim, as
    # these configurations have it, and the query/key head is the rotary part plus the rest.
    **dict.fromkeys(("head_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "index_head_dim"), 16),
    "qk_head_dim": 32,
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), 32),
    "index_n_heads": 2,
    "rotary_dim": 8,  # GPT-J, CodeGen: the rotary part of a 16-wide head
    "d_kv": 16,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}

#: Of :data:`TINY`, the attributes set even where the default configuration leaves them ``None``.
_REQUIRED = frozenset(
    {"num_experts_per_tok", "head_dim", "num_key_value_heads", "n_routed_experts", "num_local_experts"}
    | {"moe_intermediate_size", "n_shared_experts"}
)


def architectures() -> list[tuple[str, str, str]]:
    """``(model_type, task, class name)`` for every class of the task groups, sorted."""
    from transformers.models.auto import modeling_auto

    found = set()
    for task, mapping in TASKS.items():
        for model_type, cls in getattr(modeling_auto, mapping).items():
            if isinstance(cls, str):
                found.add((model_type, task, cls))
    return sorted(found)


def tiny(model_type: str, task: str, cls_name: str, *, batch: int = 2, seq: int = 32) -> tuple[Any, tuple[Any, ...]]:
    """The class ``cls_name`` of ``transformers`` built from ``model_type``'s default configuration
    shrunk (:data:`TINY`), with example inputs for ``task``: ``(model, inputs)``."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    config: Any = transformers.AutoConfig.for_model(model_type)
    own = getattr(getattr(transformers, cls_name, None), "config_class", None)
    text = getattr(config, "text_config", None)
    if isinstance(own, type) and not isinstance(config, own) and isinstance(text, own):
        config = text  # a multimodal configuration: the class is its language model, built from that part
    # A multi-stage vision model sizes each stage by a list: it stays as configured.
    staged = any(
        isinstance(getattr(config, k, None), list | tuple)
        for k in ("hidden_sizes", "embed_dims", "num_heads", "depths")
    )
    for key, value in TINY.items():
        current = getattr(config, key, None)
        if staged:
            break
        if key == "vocab_size":  # room for every special token the configuration names
            special = [getattr(config, f"{t}_token_id", None) for t in ("pad", "bos", "eos", "decoder_start", "unk")]
            named = [i for x in special for i in (x if isinstance(x, list) else [x]) if isinstance(i, int)]
            value = max([value, *(i + 1 for i in named)])
        unset = current is None and key in _REQUIRED  # a count the model needs but the default leaves open
        if unset or (isinstance(current, int) and not isinstance(current, bool)):
            with contextlib.suppress(AttributeError):  # a property computed from the others (Falcon's head_dim)
                setattr(config, key, value)
    if not staged and isinstance(getattr(config, "kv_lora_rank", None), int):
        # latent attention expands its keys and values to every head: as many key/value heads as heads
        with contextlib.suppress(AttributeError):
            config.num_key_value_heads = config.num_attention_heads
    if hasattr(config, "use_cache"):
        config.use_cache = False
    model = getattr(transformers, cls_name)(config).eval()
    generator = torch.Generator().manual_seed(0)
    if task == "image-classification":
        size = getattr(config, "image_size", 224)
        size = size[0] if isinstance(size, list | tuple) else size
        channels = getattr(config, "num_channels", 3)
        return keyword_call(model, ("pixel_values",)), (
            torch.randn((batch, channels, size, size), generator=generator),
        )
    vocab = int(getattr(config, "vocab_size", 512) or 512)
    ids = torch.randint(0, vocab, (batch, seq), generator=generator)
    if task == "seq2seq" or getattr(config, "is_encoder_decoder", False):
        return keyword_call(model, ("input_ids", "decoder_input_ids")), (ids, ids[:, : seq // 2].clone())
    return keyword_call(model, ("input_ids",)), (ids,)


def import_one(
    model_type: str, task: str, cls_name: str, *, procs: int = 8, solve_seconds: float = 30.0
) -> dict[str, Any]:
    """Build, run, import, count and solve one architecture; a row for the sweep. ``status`` is
    ``imported`` (with the share of PyTorch's flops on priced products and the solver's status at
    ``procs`` devices), ``failed`` (the import or the solve broke: the one-line reason), or
    ``skipped`` (the model cannot be built or run on the CPU from its configuration: the reason)."""
    import torch

    row: dict[str, Any] = {"model_type": model_type, "task": task, "class": cls_name}

    def stage(name: str, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except Exception as exc:  # any error of a third-party model is the row's, in one line
            text = " ".join(str(exc).split())[:160]
            raise _Stop(name, f"{type(exc).__name__}: {text}") from None

    try:
        model, inputs = stage("build", lambda: tiny(model_type, task, cls_name))
        with torch.no_grad():
            stage("run", lambda: model(*inputs))
        reference = stage("run", lambda: reference_flops(model, inputs))
        started = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnmappedOperatorWarning)
            graph = stage("import", lambda: from_torch(model, inputs, name=model_type))
        row["import_s"] = time.perf_counter() - started
        unmapped = [
            str(w.message).split(": ", 2)[-1] for w in caught if issubclass(w.category, UnmappedOperatorWarning)
        ]
        priced = flops(graph)
        result = stage("solve", lambda: solve_auto(build(graph, procs).problem, time_limit=solve_seconds))
    except _Stop as stop:
        skipped = stop.stage in ("build", "run")
        row.update(status="skipped" if skipped else "failed", reason=f"{stop.stage}: {stop.reason}")
        return row
    row.update(
        status="imported",
        operators=len(graph.operators),
        share=priced / reference if reference else None,
        unmapped="; ".join(unmapped),
        solve=result.status.value,
    )
    return row


class _Stop(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(reason)
        self.stage, self.reason = stage, reason
