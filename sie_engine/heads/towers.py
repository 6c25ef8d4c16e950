"""The dense head of a two-tower image-text model (CLIP, SigLIP): each tower's own pooling
and projection into the shared space, which the family's model defines (`text_features`,
`image_features`: CLIP's end-of-text token and class token, SigLIP's last position and
attention-pooling head) beside the weights they use."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..batch import ImageBatch, PackedBatch
from .base import Head
from .context import HeadContext


class TowerDenseHead(Head):
    """hidden of a text batch `[T, H_text]` or an image batch `[B * P, H_vision]` -> `[B, dim]`
    float32 host array. The model is held unregistered: it is the runner's backbone already."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self._model = (model,)
        self.dim = model.config.projection_dim

    def forward(self, hidden: torch.Tensor, batch: PackedBatch | ImageBatch, items: Sequence = ()) -> np.ndarray:
        model = self._model[0]
        if isinstance(batch, ImageBatch):
            features = model.image_features(hidden, batch.cu_seqlens)
        else:
            features = model.text_features(hidden, batch.input_ids, batch.cu_seqlens, batch.seq_index())
        return features.float().cpu().numpy()


def build_tower_dense(ctx: HeadContext) -> dict[str, nn.Module]:
    return {"dense": TowerDenseHead(ctx.backbone).eval()}
