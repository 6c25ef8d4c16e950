"""OWLv2's heads: `queries` (a label's query embedding, over a text batch of labels) and
`detect` (over an image batch: boxes and per-label logits against each image's own queries,
then the post-processing, postprocess.py). The extract task's detect mode (tasks/detect.py)
runs the labels first and hands each image its request's queries, threshold and size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...batch import ImageBatch, PackedBatch
from ...heads.base import Head
from ...heads.context import HeadContext
from .postprocess import Detections, detections


@dataclass(frozen=True)
class DetectionWork:
    """What an image's work item carries: its request's query embeddings `[Q, D]` (float32, the
    `queries` head's rows), the score threshold and the image's (height, width) in pixels."""

    queries: np.ndarray
    threshold: float
    size: tuple[int, int]


class QueryHead(Head):
    """Label hidden states `[T, H_text]` -> one query embedding `[D]` float32 per label."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self._model = (model,)  # the runner's backbone already: held unregistered

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> np.ndarray:
        queries = self._model[0].query_embeddings(hidden, batch.input_ids, batch.cu_seqlens, batch.seq_index())
        return queries.float().cpu().numpy()


class DetectHead(Head):
    """Image hidden states `[B * (P + 1), H]` -> per image its `Detections`."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self._model = (model,)

    def forward(self, hidden: torch.Tensor, batch: ImageBatch, items: Sequence = ()) -> list[Detections]:
        model = self._model[0]
        features = model.patch_features(hidden, batch.cu_seqlens)  # [B, P, H]
        boxes = model.boxes(features)  # [B, P, 4]
        found = []
        for i, item in enumerate(items):
            work: DetectionWork = item.extra
            queries = torch.from_numpy(work.queries).to(features.device, features.dtype)
            found.append(detections(model.class_logits(features[i], queries), boxes[i], work.threshold, work.size))
        return found


def build_detect_heads(ctx: HeadContext) -> dict[str, Head]:
    return {"queries": QueryHead(ctx.backbone).eval(), "detect": DetectHead(ctx.backbone).eval()}
