"""Detections from Grounding DINO's outputs, as `GroundingDinoProcessor.post_process_grounded_object_detection`
makes them: per query its best token's sigmoid score, the queries above the box threshold kept in
query order, their boxes as corners `[x0, y0, x1, y1]` scaled by the image's own width and height
(the processor resizes without padding: a box is relative to the image), and as its label the
prompt's tokens that score above the text threshold, the first and the last of the model's
`max_text_len` slots left out (`get_phrases_from_posmap`), decoded by the tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class GroundedDetections:
    """One image's kept boxes: `scores` `[K]` float32, `boxes` `[K, 4]` float32 (x0, y0, x1, y1 in
    pixels), `tokens` the prompt token ids of each box's label (decoded by the task)."""

    scores: np.ndarray
    boxes: np.ndarray
    tokens: list[list[int]]


def grounded_detections(logits: torch.Tensor, boxes: torch.Tensor, prompt_ids: np.ndarray, box_threshold: float,
                        text_threshold: float, size: tuple[int, int]) -> GroundedDetections:
    """logits `[Q, max_text_len]` (-inf past the prompt), boxes `[Q, 4]` (cx, cy, w, h in [0, 1]),
    the prompt's ids `[T]` and the image's (height, width) -> the kept boxes (strictly above each
    threshold, as transformers)."""
    probs = torch.sigmoid(logits.float())
    scores = probs.max(dim=-1).values
    height, width = size
    cx, cy, w, h = boxes.float().unbind(-1)
    corners = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)
    corners = corners * torch.tensor([width, height, width, height], dtype=torch.float32, device=corners.device)
    keep = scores > box_threshold
    posmap = probs[keep] > text_threshold
    posmap[:, 0] = False
    posmap[:, posmap.shape[-1] - 1:] = False
    tokens = [[int(prompt_ids[i]) for i in row.nonzero(as_tuple=True)[0].tolist()] for row in posmap.cpu()]
    return GroundedDetections(scores[keep].cpu().numpy(), corners[keep].cpu().numpy(), tokens)
