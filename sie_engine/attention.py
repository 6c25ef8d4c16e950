"""Variable-length attention over packed sequences.

Every backbone calls one interface:

    backend.prepare(seq_lens, device) -> AttentionMetadata   (once per batch, on the host)
    backend(q, k, v, meta, scale=..., causal=..., window=..., bias=...) -> out

with q `[total_tokens, n_heads, head_dim]`, k and v `[total_tokens, n_kv_heads, head_dim]`
(grouped-query attention passes fewer K/V heads and the backend does not repeat
them), out `[total_tokens, n_heads, head_dim]`. `window=(left, right)` limits each
query to keys at most `left` before and `right` after it (flash-attn's
`window_size`; None: unlimited). `prepare(..., key_lens=)` limits each sequence's keys to
its first `key_lens[i]` tokens while every token still is a query (ColBERT's query
expansion tokens, which colbert-ir and PyLate hide from attention).

`bias(group, q, k) -> [n, heads, L, L]` adds a score term computed from each padded group's
own queries and keys (`[n, heads, L, d]`): relative-position schemes such as DeBERTa's
disentangled attention. Only the grouped-SDPA backend takes it; a model that needs it
says so (`attention_bias_group_tokens`) and `select_backend` picks that backend at load.

Three backends:

- `FlashVarlenAttention`: flash-attn's `flash_attn_varlen_func` on CUDA. No
  padding at all.
- `TorchVarlenAttention`: PyTorch's own flash-attention varlen kernel
  (`torch.nn.attention.varlen.varlen_attn`, CUDA) where flash-attn is not
  installed. No padding either.
- `GroupedSDPAAttention`: everywhere else. Sequences are sorted by length and
  cut into groups whose lengths differ by at most `1/8`; each group is padded to
  its longest member and runs one `scaled_dot_product_attention` call with a key
  mask. Padding is thus bounded (and counted in `meta.padded_tokens`) while the
  number of kernel calls stays small. A group whose members all have one length
  needs no mask and, when the members are adjacent in the packed tensor, no copy.
  With `solo_min_len` (the CPU default), a sequence at least that long runs alone, on
  a view of the packed tensor: no gather, no padding and no mask. Its kernel call
  costs less than the gathers and padded keys it saves; below that length the call
  overhead wins and short sequences keep sharing calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

Window = tuple[int, int] | None
# (group, q [n, heads, L, d], k [n, kv_heads, L, d]) -> additive scores [n, heads, L, L]
AttentionBias = Callable[["SeqGroup", torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class SeqGroup:
    """Sequences that share one padded SDPA call.

    rows: `[n, L]` packed-row index of each (sequence, position); padding points at
        the sequence's first row (masked out as a key, dropped as a query).
    valid: `[n * L]` flat positions of real tokens inside the `[n, L]` block, or None when
        no position is padding.
    token_rows: `[n_real]` packed rows of those real tokens, in the same order.
    contiguous: (start, end) when the group is one dense slab of the packed tensor
        (every member has length L and they are adjacent): a free view replaces the gather.
    lengths: `[n]` real length of each member (for masks).
    key_lengths: `[n]` keys each member may attend to (its length unless limited).
    """

    n: int
    length: int
    rows: torch.Tensor
    valid: torch.Tensor | None
    token_rows: torch.Tensor | None
    contiguous: tuple[int, int] | None
    lengths: torch.Tensor
    key_lengths: torch.Tensor
    key_limited: bool = False
    _masks: dict = field(default_factory=dict)

    def mask(self, causal: bool, window: Window) -> torch.Tensor | None:
        """Boolean `[n, 1, L or 1, L]` mask (True = attend), built once per batch and reused by all layers."""
        key = (causal, window)
        if key not in self._masks:
            self._masks[key] = _build_mask(self.key_lengths, self.length, causal, window,
                                           self.valid is not None or self.key_limited)
        return self._masks[key]


def _build_mask(lengths: torch.Tensor, length: int, causal: bool, window: Window, padded: bool) -> torch.Tensor | None:
    """`lengths`: keys each member attends to; `padded`: some member has fewer keys than L."""
    if not causal and window is None:
        if not padded:
            return None
        keys = torch.arange(length, device=lengths.device)
        return (keys[None, :] < lengths[:, None])[:, None, None, :]  # [n, 1, 1, L]
    pos = torch.arange(length, device=lengths.device)
    rel = pos[None, :] - pos[:, None]  # [L(query), L(key)]: key - query
    allowed = torch.ones(length, length, dtype=torch.bool, device=lengths.device)
    if causal:
        allowed &= rel <= 0
    if window is not None:
        left, right = window
        allowed &= (rel >= -left) & (rel <= right)
    key_ok = pos[None, :] < lengths[:, None]  # [n, L]
    return allowed[None, None, :, :] & key_ok[:, None, None, :]  # [n, 1, L, L]


@dataclass
class AttentionMetadata:
    """Per-batch attention metadata, built once on the host by `prepare`.

    cu_seqlens: `[B + 1]` int32 cumulative lengths on the compute device.
    max_seqlen: the longest sequence, a Python int (no host sync in forward).
    groups: the grouped-SDPA plan (None for flash-attn).
    padded_tokens: positions the backend computes beyond the real tokens.
    """

    cu_seqlens: torch.Tensor
    max_seqlen: int
    seq_lens: tuple[int, ...]
    groups: list[SeqGroup] | None = None
    padded_tokens: int = 0
    # keys limited to a prefix of each sequence (None: all tokens are keys); varlen kernels
    # take the gathered key rows with their own cumulative lengths
    key_lens: tuple[int, ...] | None = None
    key_rows: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    max_seqlen_k: int = 0


def _no_bias(backend: AttentionBackend, bias: AttentionBias | None) -> None:
    """Varlen kernels add no bias to the scores: a model with one (MPNet, DeBERTa) needs grouped SDPA."""
    if bias is not None:
        raise ValueError(f"the {backend.name} attention backend takes no attention bias; use grouped SDPA")


class AttentionBackend:
    name = "abstract"

    def prepare(self, seq_lens: Sequence[int], device: torch.device,
                key_lens: Sequence[int] | None = None) -> AttentionMetadata:
        raise NotImplementedError

    def __call__(self, q, k, v, meta: AttentionMetadata, *, scale: float, causal: bool = False,
                 window: Window = None, bias: AttentionBias | None = None) -> torch.Tensor:
        raise NotImplementedError


def _index_tensor(values: np.ndarray, device: torch.device) -> torch.Tensor:
    """An int64 index tensor on `device` from a numpy array (no copy on the CPU)."""
    tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))
    return tensor if device.type == "cpu" else tensor.to(device)


def _cu_seqlens(seq_lens: Sequence[int], device: torch.device) -> torch.Tensor:
    cu = torch.zeros(len(seq_lens) + 1, dtype=torch.int32)
    torch.cumsum(torch.tensor(seq_lens, dtype=torch.int32), 0, out=cu[1:])
    return cu.to(device)


# On CPU a sequence of 32 tokens or more is cheaper alone than in a padded group
# (all-MiniLM-L6-v2 on 1,000 dev documents, 2-core box, two batches side by side, 2026-11-30:
# 1.065x the engine's tokens/s for one large request, 1.046x for 8-document requests from 64
# clients; on dev queries of ~12 tokens, running every sequence alone cost 0.74x).
CPU_SOLO_MIN_LEN = 32


class GroupedSDPAAttention(AttentionBackend):
    """Exact attention with bounded padding; see the module docstring."""

    name = "grouped_sdpa"

    def __init__(self, max_pad_fraction: float = 0.125, max_group_tokens: int = 1 << 16,
                 solo_min_len: int | None = None):
        # A sequence joins the current group while its length is within
        # `max_pad_fraction` of the group's longest; groups stop growing at
        # `max_group_tokens` padded positions to bound the attention matrix.
        # A group whose longest member has `solo_min_len` tokens or more takes no others.
        self.max_pad_fraction = max_pad_fraction
        self.max_group_tokens = max_group_tokens
        self.solo_min_len = solo_min_len

    def prepare(self, seq_lens: Sequence[int], device: torch.device,
                key_lens: Sequence[int] | None = None) -> AttentionMetadata:
        seq_lens = tuple(int(n) for n in seq_lens)
        key_lens = tuple(int(n) for n in key_lens) if key_lens is not None else seq_lens
        starts = [0]
        for n in seq_lens[:-1]:
            starts.append(starts[-1] + n)
        order = sorted(range(len(seq_lens)), key=lambda i: -seq_lens[i])
        groups: list[SeqGroup] = []
        padded = 0
        i = 0
        while i < len(order):
            longest = seq_lens[order[i]]
            members = [order[i]]
            i += 1
            solo = self.solo_min_len is not None and longest >= self.solo_min_len
            while (
                not solo
                and i < len(order)
                and seq_lens[order[i]] >= longest * (1 - self.max_pad_fraction)
                and (len(members) + 1) * longest <= self.max_group_tokens
            ):
                members.append(order[i])
                i += 1
            group, group_padding = self._group(members, seq_lens, key_lens, starts, longest, device)
            groups.append(group)
            padded += group_padding
        return AttentionMetadata(
            cu_seqlens=_cu_seqlens(seq_lens, device),
            max_seqlen=max(seq_lens) if seq_lens else 0,
            seq_lens=seq_lens,
            groups=groups,
            padded_tokens=padded,
        )

    @staticmethod
    def _group(members, seq_lens, key_lens, starts, length, device) -> tuple[SeqGroup, int]:
        # index arithmetic in numpy: a batch plans a few groups of a few members, where each
        # torch call on a tiny tensor costs more than the work (prepare was ~380 us a batch)
        lengths = np.array([seq_lens[m] for m in members])
        member_starts = np.array([starts[m] for m in members])
        n = len(members)
        same_length = bool((lengths == length).all())
        contiguous = None
        if same_length:
            order = np.argsort(member_starts, kind="stable")
            if (np.diff(member_starts[order]) == length).all():  # one dense slab, members by position
                members = [members[i] for i in order]
                member_starts = member_starts[order]
                contiguous = (int(member_starts[0]), int(member_starts[0]) + n * length)
        pos = np.arange(length)
        real = pos[None, :] < lengths[:, None]  # [n, L]
        rows = np.where(real, member_starts[:, None] + pos[None, :], member_starts[:, None]).reshape(-1)
        rows_t = _index_tensor(rows, device)
        valid = token_rows = None
        if not same_length:
            flat_real = real.reshape(-1)
            valid = _index_tensor(np.flatnonzero(flat_real), device)
            token_rows = _index_tensor(rows[flat_real], device)
        key_lengths = [key_lens[m] for m in members]
        group = SeqGroup(
            n=n,
            length=length,
            rows=rows_t,
            valid=valid,
            token_rows=token_rows if token_rows is not None else rows_t,
            contiguous=contiguous,
            lengths=_index_tensor(lengths, device),
            key_lengths=_index_tensor(np.array(key_lengths), device),
            key_limited=any(key_lens[m] < seq_lens[m] for m in members),
        )
        return group, n * length - int(lengths.sum())

    def __call__(self, q, k, v, meta: AttentionMetadata, *, scale: float, causal: bool = False,
                 window: Window = None, bias: AttentionBias | None = None) -> torch.Tensor:
        groups = meta.groups
        if groups is None:
            raise ValueError("grouped SDPA needs the metadata of its own prepare (a plan of groups)")
        n_heads, n_kv = q.shape[1], k.shape[1]
        gqa = n_heads != n_kv
        if len(groups) == 1 and groups[0].contiguous is not None:
            return self._group_attention(q, k, v, groups[0], scale, causal, window, gqa, bias)
        out = torch.empty_like(q)
        for group in groups:
            result = self._group_attention(q, k, v, group, scale, causal, window, gqa, bias)
            if group.contiguous is not None:
                out[group.contiguous[0]:group.contiguous[1]] = result
            else:
                out.index_copy_(0, group.token_rows, result)
        return out

    @staticmethod
    def _group_attention(q, k, v, group: SeqGroup, scale, causal, window, gqa,
                         bias: AttentionBias | None = None) -> torch.Tensor:
        """Attention of one group; returns `[real tokens of the group, H, D]` in `token_rows` order."""
        n, length = group.n, group.length
        if group.contiguous is not None:
            start, end = group.contiguous
            qg, kg, vg = q[start:end], k[start:end], v[start:end]
        else:
            qg, kg, vg = q.index_select(0, group.rows), k.index_select(0, group.rows), v.index_select(0, group.rows)
        # [n * L, H, D] -> [n, H, L, D]
        qg = qg.view(n, length, qg.shape[1], qg.shape[2]).transpose(1, 2)
        kg = kg.view(n, length, kg.shape[1], kg.shape[2]).transpose(1, 2)
        vg = vg.view(n, length, vg.shape[1], vg.shape[2]).transpose(1, 2)
        mask = group.mask(causal, window)
        if bias is not None:  # the additive term, with masked keys pushed to the dtype's minimum
            scores = bias(group, qg, kg)
            mask = scores if mask is None else scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, scale=scale, enable_gqa=gqa)
        out = out.transpose(1, 2).reshape(n * length, out.shape[1], out.shape[3])  # [n * L, H, D]
        if group.valid is not None:
            out = out.index_select(0, group.valid)
        return out


class FlashVarlenAttention(AttentionBackend):
    """flash-attn's varlen kernel: packed input, no padding, native GQA and windows."""

    name = "flash_varlen"

    def __init__(self):
        try:
            from flash_attn import flash_attn_varlen_func
        except ImportError as exc:  # settled at construction, never in forward
            raise ImportError("FlashVarlenAttention needs the flash-attn package "
                              "(pip install flash-attn, or '.[gpu]' in a clone of SIE)") from exc
        self._fn = flash_attn_varlen_func

    def prepare(self, seq_lens: Sequence[int], device: torch.device,
                key_lens: Sequence[int] | None = None) -> AttentionMetadata:
        seq_lens = tuple(int(n) for n in seq_lens)
        meta = AttentionMetadata(cu_seqlens=_cu_seqlens(seq_lens, device), max_seqlen=max(seq_lens), seq_lens=seq_lens)
        if key_lens is not None and any(int(k) < n for k, n in zip(key_lens, seq_lens)):
            key_lens = tuple(int(k) for k in key_lens)
            starts = torch.cumsum(torch.tensor((0,) + seq_lens[:-1]), 0)
            rows = torch.cat([torch.arange(int(s), int(s) + k) for s, k in zip(starts, key_lens)])
            meta.key_lens, meta.key_rows = key_lens, rows.to(device)
            meta.cu_seqlens_k, meta.max_seqlen_k = _cu_seqlens(key_lens, device), max(key_lens)
        return meta

    @staticmethod
    def _keys(k, v, meta: AttentionMetadata):
        """K/V rows and their cumulative lengths (a prefix of each sequence when keys are limited)."""
        if meta.key_rows is None:
            return k, v, meta.cu_seqlens, meta.max_seqlen
        return k.index_select(0, meta.key_rows), v.index_select(0, meta.key_rows), meta.cu_seqlens_k, meta.max_seqlen_k

    def __call__(self, q, k, v, meta: AttentionMetadata, *, scale: float, causal: bool = False,
                 window: Window = None, bias: AttentionBias | None = None) -> torch.Tensor:
        _no_bias(self, bias)
        k, v, cu_k, max_k = self._keys(k, v, meta)
        return self._fn(
            q, k, v, meta.cu_seqlens, cu_k, meta.max_seqlen, max_k,
            softmax_scale=scale, causal=causal, window_size=window if window is not None else (-1, -1),
        )


class TorchVarlenAttention(FlashVarlenAttention):
    """PyTorch's varlen flash kernel (torch >= 2.10, CUDA): same contract as flash-attn's.

    Early releases of `varlen_attn` take no `scale`, `window_size` or `enable_gqa`; what the
    installed one accepts is read once here. Without `scale`, q is pre-scaled; without GQA,
    K/V heads are repeated; without windows, windowed layers take the grouped SDPA path
    (planned lazily, once per batch)."""

    name = "torch_varlen"

    def __init__(self):
        import inspect

        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError as exc:
            raise ImportError("TorchVarlenAttention needs torch >= 2.10 (torch.nn.attention.varlen)") from exc
        self._fn = varlen_attn
        params = inspect.signature(varlen_attn).parameters
        self._has_scale = "scale" in params
        self._has_window = "window_size" in params
        self._has_gqa = "enable_gqa" in params
        self._has_is_causal = "is_causal" in params
        self._grouped = GroupedSDPAAttention()

    def __call__(self, q, k, v, meta: AttentionMetadata, *, scale: float, causal: bool = False,
                 window: Window = None, bias: AttentionBias | None = None) -> torch.Tensor:
        _no_bias(self, bias)
        if window is not None and not self._has_window:
            if meta.groups is None:
                meta.groups = self._grouped.prepare(meta.seq_lens, q.device, meta.key_lens).groups
            return self._grouped(q, k, v, meta, scale=scale, causal=causal, window=window)
        kwargs: dict[str, Any] = {}
        if causal and self._has_is_causal:
            kwargs["is_causal"] = True
        elif causal:
            window = (window[0] if window is not None else -1, 0)
        if window is not None:
            kwargs["window_size"] = window
        if q.shape[1] != k.shape[1]:
            if self._has_gqa:
                kwargs["enable_gqa"] = True
            else:
                repeat = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
        if self._has_scale:
            kwargs["scale"] = scale
        elif scale != default_scale(q.shape[-1]):
            q = q * (scale / default_scale(q.shape[-1]))
        k, v, cu_k, max_k = self._keys(k, v, meta)
        return self._fn(q, k, v, meta.cu_seqlens, cu_k, meta.max_seqlen, max_k, **kwargs)


def torch_varlen_available() -> bool:
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True


def flash_attn_available() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def select_backend(device: torch.device, dtype: torch.dtype, prefer: str = "auto",
                   bias_group_tokens: int | None = None) -> AttentionBackend:
    """The attention backend for a device and dtype, decided once at model construction.
    `bias_group_tokens`: the model adds a score bias (only grouped SDPA takes one), with groups
    of at most that many padded positions (the bias is `[n, heads, L, L]`)."""
    if bias_group_tokens is not None:
        if prefer not in ("auto", "sdpa"):
            raise ValueError(f"attention backend {prefer!r} takes no score bias; this model needs grouped SDPA")
        return _grouped_sdpa_for(device, bias_group_tokens)
    if prefer == "sdpa":
        return _grouped_sdpa_for(device)
    half = device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)
    if half and prefer in ("auto", "flash") and flash_attn_available():
        return FlashVarlenAttention()
    if half and prefer in ("auto", "torch_varlen") and torch_varlen_available():
        return TorchVarlenAttention()
    if prefer != "auto":
        raise ImportError(f"attention backend {prefer!r} needs CUDA, float16/bfloat16 and its kernel package")
    return _grouped_sdpa_for(device)


def _grouped_sdpa_for(device: torch.device, max_group_tokens: int = 1 << 16) -> GroupedSDPAAttention:
    if device.type == "cpu":
        return GroupedSDPAAttention(max_group_tokens=max_group_tokens, solo_min_len=CPU_SOLO_MIN_LEN)
    # on CUDA a launch per sequence would cost more than the padding
    return GroupedSDPAAttention(max_group_tokens=max_group_tokens)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
