"""Detections from OWLv2's outputs, as `Owlv2Processor.post_process_grounded_object_detection`
(its image processor's `post_process_object_detection`) makes them: per patch the best label
and its sigmoid score, the patches scoring above the threshold kept in patch order, their boxes
as corners `[x0, y0, x1, y1]` in the image's pixels.

OWLv2's processor pads an image at the bottom and right to a square before resizing it, so a
box relative to the model's input is relative to that square: both coordinates scale by the
image's longer side (transformers' `_scale_boxes`), and a box may reach into the padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Detections:
    """One image's kept boxes: `scores` `[K]` float32, `labels` `[K]` int64 (indices into the
    request's labels), `boxes` `[K, 4]` float32 (x0, y0, x1, y1 in pixels)."""

    scores: np.ndarray
    labels: np.ndarray
    boxes: np.ndarray


def detections(logits: torch.Tensor, boxes: torch.Tensor, threshold: float, size: tuple[int, int]) -> Detections:
    """logits `[P, Q]`, boxes `[P, 4]` (cx, cy, w, h in [0, 1] of the padded square) and the image's
    (height, width) -> the patches whose best label scores above `threshold` (strictly, as
    transformers keeps them)."""
    best = logits.float().max(dim=-1)
    scores = torch.sigmoid(best.values)
    cx, cy, w, h = boxes.float().unbind(-1)
    corners = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1) * float(max(size))
    keep = scores > threshold
    return Detections(scores[keep].cpu().numpy(), best.indices[keep].cpu().numpy(), corners[keep].cpu().numpy())
