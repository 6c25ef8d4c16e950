"""Grounding DINO's heads: `prompt` (over a text batch of prompt phrases: each phrase's projected
text features) and `detect` (over an image batch: each image's flattened feature levels through
the encoder and decoder with its own request's prompt, then the post-processing, postprocess.py).
The extract task's detect mode (tasks/grounded_detect.py) runs the prompt first and hands each
image its request's prompt, thresholds and size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...batch import ImageBatch, PackedBatch
from ...heads.base import Head
from ...heads.context import HeadContext
from .model import level_shapes, phrase_mask
from .postprocess import GroundedDetections, grounded_detections


@dataclass(frozen=True)
class PromptWork:
    """What an image's work item carries: its request's prompt as the model reads it. `ids` `[T]`,
    `features` `[T, d_model]` float32 (the `prompt` head's rows, phrase after phrase), `positions`
    `[T]` (phrase positions), `phrases` (start, end) ranges, the box and text thresholds and the
    image's (height, width) in pixels."""

    ids: np.ndarray
    features: np.ndarray
    positions: np.ndarray
    phrases: tuple[tuple[int, int], ...]
    box_threshold: float
    text_threshold: float
    size: tuple[int, int]


class PromptHead(Head):
    """Phrase hidden states `[T, d_model]` -> each phrase's rows `[n, d_model]` float32."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self._model = (model,)  # the runner's backbone already: held unregistered

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[np.ndarray]:
        rows = hidden.float().cpu().numpy()
        bounds = batch.attn.cu_seqlens.tolist()
        return [rows[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]


class DetectHead(Head):
    """Image sources `[sum S, d_model]` -> per image its `GroundedDetections`. One image at a time:
    each has its own map sizes and prompt (the encoder's work per image dwarfs the loop)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self._model = (model,)

    def forward(self, hidden: torch.Tensor, batch: ImageBatch, items: Sequence = ()) -> list[GroundedDetections]:
        model = self._model[0]
        assert batch.grids is not None  # the backbone takes own-size images
        found, start = [], 0
        for (height, width), item in zip(batch.grids, items):
            work: PromptWork = item.extra
            shapes = level_shapes(model.config, height, width)
            count = sum(h * w for h, w in shapes)
            sources, start = hidden[start:start + count], start + count
            text = torch.from_numpy(work.features).to(hidden.device, hidden.dtype)
            positions = torch.from_numpy(work.positions).to(hidden.device)
            mask = phrase_mask(work.ids, work.phrases, hidden.device, hidden.dtype)
            logits, boxes = model.detect(sources, shapes, text, positions, mask)
            found.append(grounded_detections(logits, boxes, work.ids, work.box_threshold, work.text_threshold,
                                             work.size))
        return found


def build_detect_heads(ctx: HeadContext) -> dict[str, Head]:
    return {"prompt": PromptHead(ctx.backbone).eval(), "detect": DetectHead(ctx.backbone).eval()}
