"""The attention projections of the BART family's layers (MBart for Donut, BART for Florence-2):
`q_proj`, `k_proj`, `v_proj` and `out_proj` with biases, named as their checkpoints name them.
The attention itself is the layer's: SDPA in an encoder, the decode cache's in a decoder."""

from __future__ import annotations

import torch
from torch import nn


class ProjectedAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, L, dim]` -> `[B, heads, L, head_dim]`."""
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, heads, L, head_dim]` -> `out_proj` of `[B, L, dim]`."""
        return self.out_proj(x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1))

    def keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A cross-attention's keys and values of the encoder's states, computed once per sequence."""
        return self.split(self.k_proj(memory)), self.split(self.v_proj(memory))
