"""Sequence pooling over packed hidden states (sentence-transformers' Pooling).

All functions take hidden `[T, H]` and the batch's `cu_seqlens` `[B + 1]` (int32,
on the device) and return `[B, H]`; none syncs with the host.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cls_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor | None = None) -> torch.Tensor:
    return hidden.index_select(0, cu_seqlens[:-1].long())


def last_token_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor | None = None) -> torch.Tensor:
    return hidden.index_select(0, cu_seqlens[1:].long() - 1)


def mean_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's tokens, accumulated in float32. `seq_index` `[T]`: sequence of each token."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.float32)
    sums = torch.zeros(lengths.shape[0], hidden.shape[1], dtype=torch.float32, device=hidden.device)
    sums.index_add_(0, seq_index, hidden.float())
    return sums / lengths[:, None]


POOLERS = {"cls": cls_pool, "last": last_token_pool, "mean": mean_pool}


def pool(mode: str, hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    return POOLERS[mode](hidden, cu_seqlens, seq_index)


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x.float(), p=2, dim=-1)
