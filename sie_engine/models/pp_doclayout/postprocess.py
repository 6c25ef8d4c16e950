"""Layout regions from PP-DocLayoutV3's outputs, as `PPDocLayoutV3ImageProcessor.post_process_object_detection`
makes them (its polygons from the masks aside: they need OpenCV, and the answer is boxes): every
(query, class) pair's sigmoid score, the best `num_queries` pairs, those at or above the threshold
kept, their boxes as corners `[x0, y0, x1, y1]` scaled by the image's own width and height (the
processor resizes without padding), sorted into the model's reading order (each query's rank by
the global pointer's pairwise votes, `_get_order_seqs`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class LayoutRegions:
    """One image's kept regions in reading order: `scores` `[K]` float32, `labels` `[K]` class ids,
    `boxes` `[K, 4]` float32 (x0, y0, x1, y1 in pixels), `order` `[K]` each region's reading rank."""

    scores: np.ndarray
    labels: np.ndarray
    boxes: np.ndarray
    order: np.ndarray


def reading_order(order_logits: torch.Tensor) -> torch.Tensor:
    """`[Q, Q]` -> `[Q]` each query's rank: its votes to come later (from the pairs above the
    diagonal, and the complements of those below), ranked ascending."""
    scores = torch.sigmoid(order_logits.float())
    votes = scores.triu(diagonal=1).sum(0) + (1.0 - scores.T).tril(diagonal=-1).sum(0)
    pointers = torch.argsort(votes)
    ranks = torch.empty_like(pointers)
    ranks[pointers] = torch.arange(len(pointers), device=pointers.device)
    return ranks


def layout_regions(logits: torch.Tensor, boxes: torch.Tensor, order_logits: torch.Tensor, threshold: float,
                   size: tuple[int, int]) -> LayoutRegions:
    """logits `[Q, C]`, boxes `[Q, 4]` (cx, cy, w, h in [0, 1]), order logits `[Q, Q]`, the threshold
    and the image's (height, width) -> its regions."""
    logits, boxes = logits.float(), boxes.float()
    queries, classes = logits.shape
    height, width = size
    cx, cy, w, h = boxes.unbind(-1)
    corners = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)
    corners = corners * torch.tensor([width, height, width, height], dtype=torch.float32, device=corners.device)
    scores, index = torch.topk(torch.sigmoid(logits).flatten(), queries)
    labels, query = index % classes, index // classes
    order = reading_order(order_logits)[query]
    keep = scores >= threshold
    # stable: a query kept for two classes has one rank, its pairs stay in score order (as on transformers' CPU)
    order, by_order = torch.sort(order[keep], stable=True)
    return LayoutRegions(scores[keep][by_order].cpu().numpy(), labels[keep][by_order].cpu().numpy(),
                         corners[query][keep][by_order].cpu().numpy(), order.cpu().numpy())
