"""Small PyTorch models to plan and run: entry points ``stratopt.torch.models:mlp`` and
``stratopt.torch.models:transformer``, and a Hugging Face Llama sized so that its plan splits it,
``stratopt.torch.models:llama`` (each returns the model and a batch, on the CPU)."""

from __future__ import annotations

from typing import Any

from stratopt.importers.hf import llama as build
from stratopt.torch.apply import _torch

__all__ = ["llama", "mlp", "transformer"]


def _nn() -> Any:

    return _torch().nn


def mlp(*, batch: int = 512, width: int = 1024, hidden: int = 4096, depth: int = 2) -> tuple[Any, tuple[Any, ...]]:
    """An MLP: ``depth`` blocks of Linear(width, hidden), GELU, Linear(hidden, width) with a
    residual connection and a LayerNorm before each, and a Linear head. Its default size (17M
    weights, 512 samples) is large enough that on 4 H100s the plan splits it (tensor parallel 2 x
    data parallel 2) and small enough to run on a CPU in seconds."""
    import torch

    nn = _nn()

    class Block(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, hidden)
            self.down = nn.Linear(hidden, width)

        def forward(self, x: Any) -> Any:
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    class MLP(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.head = nn.Linear(width, width)

        def forward(self, x: Any) -> Any:
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return MLP(), (torch.randn(batch, width),)


def transformer(
    *, batch: int = 4, seq: int = 16, width: int = 64, heads: int = 4, layers: int = 2, vocab: int = 128
) -> tuple[Any, tuple[Any, ...]]:
    """A pre-norm Transformer encoder: a token embedding, ``layers`` blocks of multi-head attention
    (separate q, k, v projections without biases, as Llama's, the heads found from the width so
    that a split by heads runs as it is) and a GELU MLP, and a final norm."""
    import torch

    nn = _nn()
    F = torch.nn.functional
    head_dim = width // heads

    class Block(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.q, self.k, self.v = (nn.Linear(width, width, bias=False) for _ in range(3))
            self.o = nn.Linear(width, width)
            self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def split(self, x: Any) -> Any:
            b, s, _ = x.shape
            return x.view(b, s, -1, head_dim).transpose(1, 2)

        def forward(self, x: Any) -> Any:
            h = self.ln1(x)
            q, k, v = self.split(self.q(h)), self.split(self.k(h)), self.split(self.v(h))
            y = F.scaled_dot_product_attention(q, k, v)
            x = x + self.o(y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Transformer(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.LayerNorm(width)

        def forward(self, ids: Any) -> Any:
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            return self.norm(x)

    return Transformer(), (torch.randint(0, vocab, (batch, seq)),)


def llama() -> tuple[Any, tuple[Any, ...]]:
    """Hugging Face's Llama (``transformers``) with 2 layers, hidden 1024, 8 query and 4 key/value
    heads, SwiGLU 4096, a vocabulary of 8000, and 8 sequences of 256 tokens: on 4 H100s its plan mixes
    tensor and data parallelism, and it runs on a CPU in seconds."""

    return build(layers=2, hidden=1024, heads=8, kv_heads=4, ffn=4096, vocab=8000, batch=8, seq=256)
