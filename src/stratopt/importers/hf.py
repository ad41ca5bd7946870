"""Hugging Face ``transformers`` models built from configurations, offline (optional extra ``hf``).

Nothing is downloaded: every model is constructed from a configuration written here, with random
(or, on torch's ``meta`` device, no) weights, which is all that shapes and costs need. Each function
returns ``(model, example_inputs)``, the pair :func:`~stratopt.importers.from_torch` takes, so each is
also an entry point the CLI accepts (``stratopt import stratopt.importers.hf:llama_70b``).

Two kinds:

- **small** models of every family the importer supports (:data:`SMALL`: GPT-2, Llama with
  grouped-query attention, Mixtral, BERT, T5, ResNet, ViT, ConvNeXt, Swin), a few layers wide enough to
  be real, built on the CPU so that PyTorch's own flop counter can run them;
- **full-size shapes** on the meta device (:data:`LARGE`: Llama-7B, Llama-70B, GPT-3 175B, ViT-L/16),
  which take no memory for weights: a 70B model imports on a laptop.

>>> model, inputs = llama(layers=1, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=100, batch=1, seq=8)
>>> type(model).__name__, tuple(inputs[0].shape)
('LlamaModel', (1, 8))
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stratopt.errors import ModelError
from stratopt.importers.common import first_line

__all__ = [
    "LARGE",
    "SMALL",
    "bert",
    "convnext",
    "from_config",
    "gpt2",
    "gpt3_175b",
    "is_config_spec",
    "keyword_call",
    "llama",
    "llama_7b",
    "llama_70b",
    "mixtral",
    "resnet",
    "swin",
    "t5",
    "vit",
    "vit_large",
]


def _modules() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        raise ModelError("Hugging Face models need the 'hf' extra: pip install 'stratopt[hf]'") from None
    transformers.logging.set_verbosity_error()
    return torch, transformers


def _make(cls: Any, config: Any, device: str) -> Any:
    torch, _ = _modules()
    with torch.device(device):
        model = cls(config)
    return model.eval()


def _ids(batch: int, seq: int, vocab: int, device: str) -> tuple[Any, ...]:
    torch, _ = _modules()
    if device == "meta":
        return (torch.zeros((batch, seq), dtype=torch.long, device="meta"),)
    generator = torch.Generator().manual_seed(0)
    return (torch.randint(0, vocab, (batch, seq), generator=generator),)


def _image(batch: int, size: int, device: str) -> tuple[Any, ...]:
    torch, _ = _modules()
    if device == "meta":
        return (torch.zeros((batch, 3, size, size), device="meta"),)
    generator = torch.Generator().manual_seed(0)
    return (torch.randn((batch, 3, size, size), generator=generator),)


def gpt2(
    *, layers: int = 2, hidden: int = 128, heads: int = 4, vocab: int = 1000, batch: int = 4, seq: int = 64,
    device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """GPT-2 (learned positions, fused QKV written as ``Conv1D``, GELU MLP)."""
    _, t = _modules()
    cfg = t.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab, n_positions=max(seq, 64))
    cfg.use_cache = False
    return _make(t.GPT2Model, cfg, device), _ids(batch, seq, vocab, device)


def llama(
    *, layers: int = 2, hidden: int = 128, heads: int = 4, kv_heads: int = 2, ffn: int = 256, vocab: int = 1000,
    batch: int = 4, seq: int = 64, device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """Llama: grouped-query attention (``kv_heads`` < ``heads``), rotary embeddings, RMSNorm, SwiGLU."""
    _, t = _modules()
    cfg = t.LlamaConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
        intermediate_size=ffn, vocab_size=vocab, max_position_embeddings=max(seq, 64), use_cache=False,
    )  # fmt: skip
    return _make(t.LlamaModel, cfg, device), _ids(batch, seq, vocab, device)


def mixtral(
    *, layers: int = 2, hidden: int = 128, heads: int = 4, kv_heads: int = 2, ffn: int = 256, experts: int = 4,
    top_k: int = 2, vocab: int = 1000, batch: int = 4, seq: int = 64, device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """Mixtral: a Llama-like decoder whose MLPs are ``experts`` SwiGLU experts, ``top_k`` per token."""
    _, t = _modules()
    cfg = t.MixtralConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
        intermediate_size=ffn, num_local_experts=experts, num_experts_per_tok=top_k, vocab_size=vocab,
        max_position_embeddings=max(seq, 64), use_cache=False,
    )  # fmt: skip
    return _make(t.MixtralModel, cfg, device), _ids(batch, seq, vocab, device)


def bert(
    *, layers: int = 2, hidden: int = 128, heads: int = 4, ffn: int = 512, vocab: int = 1000, batch: int = 4,
    seq: int = 64, device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """BERT (an encoder; learned positions and token types, GELU MLP)."""
    _, t = _modules()
    cfg = t.BertConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn,
        vocab_size=vocab, max_position_embeddings=max(seq, 64),
    )  # fmt: skip
    return _make(t.BertModel, cfg, device), _ids(batch, seq, vocab, device)


def t5(
    *, layers: int = 2, hidden: int = 128, heads: int = 4, ffn: int = 512, vocab: int = 1000, batch: int = 4,
    seq: int = 64, device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """The T5 encoder (relative position bias, RMS-style ``T5LayerNorm``, ReLU MLP)."""
    _, t = _modules()
    cfg = t.T5Config(
        num_layers=layers, d_model=hidden, num_heads=heads, d_kv=hidden // heads, d_ff=ffn, vocab_size=vocab,
        use_cache=False,
    )  # fmt: skip
    return _make(t.T5EncoderModel, cfg, device), _ids(batch, seq, vocab, device)


def resnet(
    *, widths: tuple[int, ...] = (32, 64), depths: tuple[int, ...] = (1, 1), batch: int = 4, image: int = 64,
    device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """ResNet (bottleneck-free basic blocks by default; convolutions, batch norm, pooling)."""
    _, t = _modules()
    cfg = t.ResNetConfig(hidden_sizes=list(widths), depths=list(depths), embedding_size=widths[0] // 2)
    return _make(t.ResNetModel, cfg, device), _image(batch, image, device)


def vit(
    *, layers: int = 2, hidden: int = 128, heads: int = 4, ffn: int = 512, patch: int = 8, batch: int = 4,
    image: int = 64, device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """ViT (a patch-embedding convolution, then a Transformer encoder)."""
    _, t = _modules()
    cfg = t.ViTConfig(
        num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn,
        patch_size=patch, image_size=image,
    )  # fmt: skip
    return _make(t.ViTModel, cfg, device), _image(batch, image, device)


def convnext(
    *, widths: tuple[int, ...] = (32, 64), depths: tuple[int, ...] = (1, 1), batch: int = 4, image: int = 64,
    device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """ConvNeXt (depthwise 7x7 convolutions, channels-last layer norm, pointwise MLPs as linears)."""
    _, t = _modules()
    cfg = t.ConvNextConfig(hidden_sizes=list(widths), depths=list(depths), num_stages=len(widths))
    return _make(t.ConvNextModel, cfg, device), _image(batch, image, device)


def swin(
    *, dim: int = 32, depths: tuple[int, ...] = (2, 2), heads: tuple[int, ...] = (2, 4), window: int = 4,
    batch: int = 4, image: int = 64, device: str = "cpu",
) -> tuple[Any, tuple[Any, ...]]:  # fmt: skip
    """Swin (shifted-window attention with a relative position bias, patch merging)."""
    _, t = _modules()
    cfg = t.SwinConfig(
        image_size=image, patch_size=4, embed_dim=dim, depths=list(depths), num_heads=list(heads), window_size=window,
    )  # fmt: skip
    return _make(t.SwinModel, cfg, device), _image(batch, image, device)


def llama_7b(*, batch: int = 8, seq: int = 4096, layers: int = 32) -> tuple[Any, tuple[Any, ...]]:
    """Llama-2-7B's shape on the meta device: 32 layers, hidden 4096, 32 heads, SwiGLU 11008."""
    return llama(
        layers=layers, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, batch=batch, seq=seq, device="meta"
    )


def llama_70b(*, batch: int = 8, seq: int = 4096, layers: int = 80) -> tuple[Any, tuple[Any, ...]]:
    """Llama-2-70B's shape on the meta device: 80 layers, hidden 8192, 64 query and 8 key/value heads."""
    return llama(
        layers=layers, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000, batch=batch, seq=seq, device="meta"
    )


def gpt3_175b(*, batch: int = 8, seq: int = 2048, layers: int = 96) -> tuple[Any, tuple[Any, ...]]:
    """GPT-3 175B's shape (96 layers, hidden 12288, 96 heads) as a GPT-2 model on the meta device."""
    return gpt2(layers=layers, hidden=12288, heads=96, vocab=50257, batch=batch, seq=seq, device="meta")


def vit_large(*, batch: int = 64, image: int = 224, layers: int = 24) -> tuple[Any, tuple[Any, ...]]:
    """ViT-L/16's shape on the meta device: 24 layers, hidden 1024, 16 heads, MLP 4096."""
    return vit(layers=layers, hidden=1024, heads=16, ffn=4096, patch=16, batch=batch, image=image, device="meta")


#: The small models, one per family, by name.
SMALL: dict[str, Callable[..., tuple[Any, tuple[Any, ...]]]] = {
    "gpt2": gpt2,
    "llama": llama,
    "mixtral": mixtral,
    "bert": bert,
    "t5": t5,
    "resnet": resnet,
    "vit": vit,
    "convnext": convnext,
    "swin": swin,
}

#: Full-size shapes on the meta device, by name.
LARGE: dict[str, Callable[..., tuple[Any, tuple[Any, ...]]]] = {
    "llama-7b": llama_7b,
    "llama-70b": llama_70b,
    "gpt3-175b": gpt3_175b,
    "vit-l": vit_large,
}


def keyword_call(model: Any, names: tuple[str, ...]) -> Any:
    """``model`` called with its inputs by keyword (``decoder_input_ids`` for seq2seq), as a module
    that :func:`~stratopt.importers.from_torch` calls with positional inputs."""
    import torch

    class Call(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args, strict=True)), return_dict=False)

    return Call().eval()


_SPEC = re.compile(r"^hf:(?P<path>[^,]+)(?P<options>(?:,[^,]*)*)$")
#: What an ``hf:`` model takes after its path, with the defaults.
SPEC_KEYS = {"seq": 1024, "batch": 8, "image": 0}


def is_config_spec(text: str) -> bool:
    """Whether ``text`` names a Hugging Face configuration: ``hf:PATH[,seq=S][,batch=B][,image=N]``.

    >>> is_config_spec("hf:llama-config,seq=1024,batch=16"), is_config_spec("gpt")
    (True, False)
    """
    return _SPEC.match(text.strip()) is not None


def from_config(spec: str, *, device: str = "meta") -> tuple[Any, tuple[Any, ...]]:
    """``(model, example_inputs)`` of ``hf:PATH[,seq=S][,batch=B][,image=N]``: PATH a ``config.json``
    or a folder holding one (what every Hugging Face model ships, ``save_pretrained`` writes), the
    model the configuration's ``architectures`` field names (else its ``model_type``'s base model),
    built on ``device`` (``meta``: no memory for weights). A text model reads ``batch`` sequences of
    ``seq`` tokens (default 8 of 1024); a vision model ``batch`` images of its configuration's size
    (or ``image``). A path that is not there, a configuration ``transformers`` cannot read or an
    architecture it does not know is a one-line :class:`ModelError`."""
    torch, t = _modules()
    match = _SPEC.match(spec.strip())
    if match is None:
        raise ModelError(f"{spec}: expected hf:PATH[,seq=S][,batch=B][,image=N] (PATH a config.json or its folder)")
    sizes = dict(SPEC_KEYS)
    for item in filter(None, (x.strip() for x in match["options"].split(","))):
        key, _, value = (s.strip() for s in item.partition("="))
        if key not in SPEC_KEYS or not value.isdigit() or int(value) < 1:
            raise ModelError(f"{spec}: {item!r} is not one of {', '.join(f'{k}=N' for k in SPEC_KEYS)} (N positive)")
        sizes[key] = int(value)
    path = Path(match["path"]).expanduser()
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        where = f"no config.json in {path}" if path.is_dir() else f"no such file or folder {path}"
        raise ModelError(f"{spec}: {where}")
    try:
        config = t.AutoConfig.from_pretrained(str(file), local_files_only=True)
    except Exception as exc:  # any failure to read it is the file's: one line
        raise ModelError(f"{spec}: transformers cannot read {file} ({type(exc).__name__}: {first_line(exc)})") from None
    names = list(getattr(config, "architectures", None) or [])
    cls = getattr(t, names[0], None) if names else None
    if names and cls is None:
        raise ModelError(f"{spec}: transformers {t.__version__} does not know the architecture {names[0]!r}")
    if hasattr(config, "use_cache"):
        config.use_cache = False
    try:
        with torch.device(device):
            model = cls(config) if cls is not None else t.AutoModel.from_config(config)
    except Exception as exc:
        what = names[0] if names else f"model type {config.model_type!r}"
        raise ModelError(f"{spec}: cannot build {what} ({type(exc).__name__}: {first_line(exc)})") from None
    return _example(model.eval(), config, sizes, device)


def _example(model: Any, config: Any, sizes: dict[str, int], device: str) -> tuple[Any, tuple[Any, ...]]:
    """The model and its inputs: images or token ids, positional (so its parameters keep their own
    names); a seq2seq model is called by keyword, its decoder's ids beside the encoder's."""
    batch = sizes["batch"]
    if getattr(model, "main_input_name", "input_ids") == "pixel_values":
        size = sizes["image"] or getattr(config, "image_size", 224)
        size = size[0] if isinstance(size, list | tuple) else int(size)
        channels = int(getattr(config, "num_channels", 3))
        torch, _ = _modules()
        pixels = torch.zeros((batch, channels, size, size), device=device)
        if device != "meta":
            pixels = torch.randn((batch, channels, size, size), generator=torch.Generator().manual_seed(0))
        return model, (pixels,)
    vocab = int(getattr(config, "vocab_size", None) or 1000)
    (ids,) = _ids(batch, sizes["seq"], vocab, device)
    if getattr(config, "is_encoder_decoder", False):
        return keyword_call(model, ("input_ids", "decoder_input_ids")), (ids, ids[:, : max(1, sizes["seq"] // 2)])
    return model, (ids,)
