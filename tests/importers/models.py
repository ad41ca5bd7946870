"""Networks defined inline for the importer tests (no torchvision; nothing is downloaded)."""

from __future__ import annotations

import math

import torch
from torch import nn


class GPTBlock(nn.Module):
    """A pre-norm transformer block: causal-free self-attention and a GELU MLP."""

    def __init__(self, d_model: int = 64, heads: int = 4, seq: int = 32) -> None:
        super().__init__()
        self.d, self.h, self.t = d_model, heads, seq
        self.ln1 = nn.LayerNorm(d_model)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, self.t, self.h, self.d // self.h).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        q, k, v = self.heads(self.q(h)), self.heads(self.k(h)), self.heads(self.v(h))
        att = torch.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d // self.h)), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(-1, self.t, self.d)
        x = x + self.proj(y)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


def gpt_flops(batch: int, seq: int, d: int) -> float:
    """Forward flops (2 per multiply-add) of GPTBlock's products: 12 d^2 per token in the four
    projections and the MLP, and 2 T d per token for QK^T and AV."""
    return 2.0 * batch * seq * (12 * d * d) + 4.0 * batch * seq * seq * d


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(channels)
        self.c2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(x + self.b2(self.c2(y)))


class SmallResNet(nn.Module):
    """A stem convolution, two basic blocks, global average pooling and a classifier."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(BasicBlock(channels), BasicBlock(channels))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet_flops(batch: int, image: int, channels: int = 16, classes: int = 10) -> float:
    """Forward flops of SmallResNet's convolutions (stem from 3 channels, four c x c) and classifier."""
    pixels = batch * image * image
    return 2.0 * pixels * channels * 9 * (3 + 4 * channels) + 2.0 * batch * channels * classes
