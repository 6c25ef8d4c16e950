"""The dense head: pooling (the card's mode), then sentence-transformers' Dense modules
where the model has them. Normalisation and Matryoshka truncation are per-request
post-processing (tasks/encode.py).

Card options (`options.dense`): `include_prompt` (default true; false leaves each text's prompt,
the card's template before `{text}`, out of the poolings that read every token, as
sentence-transformers' Pooling option does; GritLM pools its text alone so)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..batch import PackedBatch
from ..models.base import TwoTowerBackbone
from .base import Head
from .context import HeadContext
from .pooling import NEEDS_SEQ_INDEX, pool, span_mean
from .st_dense import pooled_dense_stack


class DenseHead(Head):
    """hidden `[T, H]` -> pooled vectors `[B, dim]` float32 (a host array, one row per item); where an
    item has `spans` (late chunking), a list whose entry for that item is `[len(spans), dim]`."""

    def __init__(self, mode: str, projection: nn.Sequential | None, hidden_size: int, dtype: torch.dtype):
        super().__init__()
        self.mode = mode
        self.projection = projection
        self.compute_dtype = dtype
        self.dim = projection[-1].projection.out_features if projection is not None else hidden_size

    def forward(self, hidden: torch.Tensor, batch: PackedBatch,
                items: Sequence = ()) -> np.ndarray | list[np.ndarray]:
        prompted = any(item.prompt_tokens for item in items)  # include_prompt: false
        seq_index = batch.seq_index() if self.mode in NEEDS_SEQ_INDEX or prompted else None
        keep = None
        if seq_index is not None and prompted:
            prompts = torch.tensor([item.prompt_tokens for item in items], device=hidden.device)
            keep = batch.positions >= prompts[seq_index]
        pooled = self._project(pool(self.mode, hidden, batch.cu_seqlens, seq_index, keep))
        if not any(item.spans for item in items):
            return pooled
        return self._with_spans(pooled, hidden, items)

    def _project(self, pooled: torch.Tensor) -> np.ndarray:
        if self.projection is not None:
            pooled = self.projection(pooled.to(self.compute_dtype))
        return pooled.float().cpu().numpy()

    def _with_spans(self, pooled: np.ndarray, hidden: torch.Tensor, items: Sequence) -> list[np.ndarray]:
        """Late chunking: an item with `spans` gets `[len(spans), dim]`, the mean of each range of its
        tokens, projected as a pooled vector is; the others their pooled vector."""
        starts, lengths, offset = [], [], 0
        for item in items:
            for start, end in item.spans or ():
                starts.append(offset + start)
                lengths.append(end - start)
            offset += item.num_tokens
        vectors = self._project(span_mean(hidden, torch.tensor(starts, device=hidden.device),
                                          torch.tensor(lengths, device=hidden.device)))
        out: list[np.ndarray] = list(pooled)
        taken = 0
        for i, item in enumerate(items):
            if item.spans:
                out[i] = vectors[taken:taken + len(item.spans)]
                taken += len(item.spans)
        return out


class TableMeanHead(Head):
    """A static embedder's mean pooling, fused with its table lookup (`mean_of_rows`): reads the
    batch's token ids, not hidden states, so the runner skips the backbone's `[T, dim]` rows."""

    reads_hidden = False

    def __init__(self, mean_of_rows, dim: int):
        super().__init__()
        self._mean_of_rows = mean_of_rows  # the backbone's bound method (the weights are the backbone's)
        self.dim = dim

    def forward(self, hidden: torch.Tensor | None, batch: PackedBatch, items: Sequence = ()) -> np.ndarray:
        return self._mean_of_rows(batch.input_ids, batch.cu_seqlens).cpu().numpy()


def build_dense(ctx: HeadContext) -> dict[str, Head]:
    if isinstance(ctx.backbone, TwoTowerBackbone):  # a two-tower image-text model pools and projects per tower
        from .towers import build_tower_dense

        return build_tower_dense(ctx)
    include_prompt = ctx.options("dense").get("include_prompt", True)
    if not isinstance(include_prompt, bool):
        raise ValueError(f"card {ctx.card.id}: options.dense.include_prompt must be true or false")
    projection = pooled_dense_stack(ctx.root, ctx.device, ctx.dtype)
    # float32 only: mean_pool accumulates lower precisions in float32, embedding_bag would not
    if (ctx.backbone.fuses_mean_pool and ctx.card.pooling == "mean" and projection is None
            and ctx.dtype == torch.float32 and include_prompt):
        return {"dense": TableMeanHead(ctx.backbone.mean_of_rows, ctx.config.hidden_size).eval()}
    return {"dense": DenseHead(ctx.card.pooling, projection, ctx.config.hidden_size, ctx.dtype).eval()}
