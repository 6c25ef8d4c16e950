"""PP-DocLayout's `layout` head: over an image batch, the model's per-query rows (its logits, box
and order-logit row: model.py's `forward_images`) into each image's regions (postprocess.py) with
its request's threshold and the image's size riding on its work item. The extract task's layout
mode (tasks/layout.py) names the classes from config.json's id2label."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ...batch import ImageBatch
from ...heads.base import Head
from ...heads.context import HeadContext
from .postprocess import LayoutRegions, layout_regions


@dataclass(frozen=True)
class LayoutWork:
    """What an image's work item carries: the score threshold and the image's (height, width) in pixels."""

    threshold: float
    size: tuple[int, int]


class LayoutHead(Head):
    """Rows `[B * Q, labels + 4 + Q]` -> per image its `LayoutRegions`."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self._model = (model,)  # the runner's backbone already: held unregistered

    def forward(self, hidden: torch.Tensor, batch: ImageBatch, items: Sequence = ()) -> list[LayoutRegions]:
        config = self._model[0].config
        classes, queries = len(config.id2label), config.num_queries
        rows = hidden.view(len(items), queries, -1)  # [B, Q, labels + 4 + Q]
        found = []
        for image, item in zip(rows, items):
            work: LayoutWork = item.extra
            found.append(layout_regions(image[:, :classes], image[:, classes:classes + 4], image[:, classes + 4:],
                                        work.threshold, work.size))
        return found


def build_layout_heads(ctx: HeadContext) -> dict[str, Head]:
    return {"layout": LayoutHead(ctx.backbone).eval()}
