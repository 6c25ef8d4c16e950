"""The toy family's own dense head: each sequence's max over its token rows, projected."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from sie_engine.batch import PackedBatch
from sie_engine.heads.base import Head
from sie_engine.heads.context import HeadContext


class ToyMaxHead(Head):
    """hidden `[T, H]` -> `[B, out_dim]` float32 host array: max over each sequence's rows, then `proj`."""

    def __init__(self, proj: nn.Linear):
        super().__init__()
        self.proj = proj
        self.dim = proj.out_features

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> np.ndarray:
        bounds = batch.cu_seqlens.tolist()
        pooled = torch.stack([hidden[a:b].amax(dim=0) for a, b in zip(bounds[:-1], bounds[1:])])  # [B, H]
        return self.proj(pooled).float().cpu().numpy()


def build_toy_dense(ctx: HeadContext) -> dict[str, Head]:
    weight, bias = ctx.checkpoint["head.weight"], ctx.checkpoint["head.bias"]
    proj = nn.Linear(weight.shape[1], weight.shape[0], device=ctx.device, dtype=ctx.dtype)
    with torch.no_grad():
        proj.weight.copy_(weight)
        proj.bias.copy_(bias)
    return {"dense": ToyMaxHead(proj).eval()}
