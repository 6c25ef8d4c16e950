"""Sequence pooling over packed hidden states (sentence-transformers' Pooling).

All functions take hidden `[T, H]` and the batch's `cu_seqlens` `[B + 1]` (int32,
on the device) and return `[B, H]`; none syncs with the host. `pool`'s `keep` `[T]` (bool)
leaves tokens out as sentence-transformers' Pooling with `include_prompt: false` masks a prompt's
tokens: out of the poolings that read every token, and cls reads the first token kept (the one
after the prompt); last reads the last token either way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cls_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor | None = None) -> torch.Tensor:
    return hidden.index_select(0, cu_seqlens[:-1].long())


def last_token_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor,
                    seq_index: torch.Tensor | None = None) -> torch.Tensor:
    return hidden.index_select(0, cu_seqlens[1:].long() - 1)


def _sums(values: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """Per-sequence sums of `[T, ...]` values in float32. `seq_index` `[T]`: sequence of each token."""
    sums = torch.zeros(cu_seqlens.shape[0] - 1, *values.shape[1:], dtype=torch.float32, device=values.device)
    return sums.index_add_(0, seq_index, values.float())


def _lengths(cu_seqlens: torch.Tensor) -> torch.Tensor:
    return (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.float32)


def mean_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's tokens, accumulated in float32."""
    return _sums(hidden, cu_seqlens, seq_index) / _lengths(cu_seqlens)[:, None]


def mean_sqrt_len_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """The sum over each sequence's tokens divided by the square root of its length."""
    return _sums(hidden, cu_seqlens, seq_index) / _lengths(cu_seqlens).sqrt()[:, None]


def max_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over each sequence's tokens."""
    out = torch.full((cu_seqlens.shape[0] - 1, hidden.shape[1]), float("-inf"), dtype=torch.float32,
                     device=hidden.device)
    return out.scatter_reduce_(0, seq_index[:, None].expand(-1, hidden.shape[1]), hidden.float(), "amax")


def weighted_mean_pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """Mean weighted by position (1 for a sequence's first token, n for its n-th; SGPT)."""
    weights = (torch.arange(hidden.shape[0], device=hidden.device) - cu_seqlens[seq_index] + 1).to(torch.float32)
    return (_sums(hidden.float() * weights[:, None], cu_seqlens, seq_index)
            / _sums(weights, cu_seqlens, seq_index)[:, None])


def span_mean(hidden: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`[S, H]`: the mean of each token range `starts[i]` to `starts[i] + lengths[i]` of hidden `[T, H]`
    (late chunking: ranges within sequences), accumulated in float32. Every length is at least 1."""
    span_of_token = torch.repeat_interleave(torch.arange(len(starts), device=hidden.device), lengths)
    first_of_span = torch.cumsum(lengths, 0) - lengths
    tokens = (torch.arange(span_of_token.shape[0], device=hidden.device) - first_of_span[span_of_token]
              + starts[span_of_token])
    sums = torch.zeros(len(starts), hidden.shape[1], dtype=torch.float32, device=hidden.device)
    sums.index_add_(0, span_of_token, hidden.index_select(0, tokens).float())
    return sums / lengths.to(torch.float32)[:, None]


POOLERS = {"cls": cls_pool, "last": last_token_pool, "mean": mean_pool, "max": max_pool,
           "weightedmean": weighted_mean_pool, "mean_sqrt_len": mean_sqrt_len_pool}
# poolers that read every token (the others index one token per sequence)
NEEDS_SEQ_INDEX = frozenset({"mean", "max", "weightedmean", "mean_sqrt_len"})


def pool(mode: str, hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor,
         keep: torch.Tensor | None = None) -> torch.Tensor:
    if keep is None or mode not in MASKED_POOLERS:
        return POOLERS[mode](hidden, cu_seqlens, seq_index)
    return MASKED_POOLERS[mode](hidden, cu_seqlens, seq_index, keep)


def _kept_counts(keep: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """`[B]` tokens each sequence keeps, at least 1e-9 (sentence-transformers' clamp: a sequence of
    prompt alone pools to zeros)."""
    return _sums(keep.float(), cu_seqlens, seq_index).clamp(min=1e-9)


def _masked_mean(hidden, cu_seqlens, seq_index, keep):
    return _sums(hidden * keep[:, None], cu_seqlens, seq_index) / _kept_counts(keep, cu_seqlens, seq_index)[:, None]


def _masked_mean_sqrt_len(hidden, cu_seqlens, seq_index, keep):
    counts = _kept_counts(keep, cu_seqlens, seq_index)
    return _sums(hidden * keep[:, None], cu_seqlens, seq_index) / counts.sqrt()[:, None]


def _masked_weighted_mean(hidden, cu_seqlens, seq_index, keep):
    """Weights by position within the whole sequence (prompt included), zero for the left-out tokens."""
    weights = (torch.arange(hidden.shape[0], device=hidden.device) - cu_seqlens[seq_index] + 1).to(torch.float32)
    weights = weights * keep
    return (_sums(hidden.float() * weights[:, None], cu_seqlens, seq_index)
            / _sums(weights, cu_seqlens, seq_index).clamp(min=1e-9)[:, None])


def _masked_max(hidden, cu_seqlens, seq_index, keep):
    return max_pool(hidden.masked_fill(~keep[:, None], float("-inf")), cu_seqlens, seq_index)


def _masked_cls(hidden, cu_seqlens, seq_index, keep):
    """Each sequence's first token kept; a sequence that keeps none, its first token."""
    starts, ends = cu_seqlens[:-1].long(), cu_seqlens[1:].long()
    index = torch.arange(hidden.shape[0], device=hidden.device)
    first = ends.scatter_reduce(0, seq_index[keep], index[keep], "amin")
    return hidden.index_select(0, torch.where(first < ends, first, starts))


MASKED_POOLERS = {"cls": _masked_cls, "mean": _masked_mean, "max": _masked_max, "weightedmean": _masked_weighted_mean,
                  "mean_sqrt_len": _masked_mean_sqrt_len}


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x.float(), p=2, dim=-1)
