"""LoRA deltas over a packed batch whose sequences use different adapters (multi-LoRA serving).

The base weights run once for the whole batch; each adapter's low-rank delta is added to the
rows of its own sequences only: for the token rows `[s, e)` of a run of sequences that use
adapter i, `out[s:e] += (x[s:e] @ A_i^T) @ B_i^T` (the scaling folded into `B_i`), the
segmented LoRA matmul of multi-LoRA servers (Punica's SGMV, S-LoRA). The runner sorts a batch's
sequences by adapter, so there is one segment per adapter, and rows of sequences without an
adapter are in no segment: they get the base model alone.

On CPU a loop over the segments is the simple form: each segment is two small dense matmuls on
contiguous rows (no gather, no padding to the largest rank). bench/bench_lora.py (a MiniLM-sized
BERT, 32 texts of 80 tokens, rank 8 on query/key/value/dense; busy 2-core box, one torch thread,
2026-12-02): one adapter for the whole batch costs +0% over the base model, four adapters +8%, 32
(one per sequence) +29%, the last being 768 pairs of tiny matmuls; a gathered kernel (Punica's
BGMV) is the next step where batches of many adapters are common.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True, eq=False)
class LoRAWeights:
    """One linear layer's delta `x @ a.T @ b.T`.

    a: `[r, in]`; b: `[out, r]`, peft's scaling (`lora_alpha / r`, or `/ sqrt(r)` with rsLoRA)
    folded in. For a fused projection (BERT's QKV) the shards' `a`s are stacked (`r` is their
    ranks' sum) and `b` is block-diagonal: each shard's `b` fills its output rows and its
    own rank's columns, zeros elsewhere (a shard peft did not target has no block).
    An embedding table's delta (`add_embedding_`) is `a[ids] @ b.T`: a `[vocab, r]`, b `[dim, r]`."""

    a: torch.Tensor
    b: torch.Tensor


@dataclass(eq=False)
class LoRAAdapter:
    """A loaded adapter: its deltas by the backbone's module names (`encoder.layer.0.attention.qkv`)."""

    name: str
    modules: Mapping[str, LoRAWeights]

    @property
    def nbytes(self) -> int:
        return sum(w.a.nbytes + w.b.nbytes for w in self.modules.values())

    def to(self, device: torch.device) -> LoRAAdapter:
        return LoRAAdapter(self.name, {k: LoRAWeights(w.a.to(device), w.b.to(device))
                                       for k, w in self.modules.items()})


@dataclass(frozen=True)
class LoRABatch:
    """Which token rows of a packed batch each adapter owns.

    segments: `(start, end, adapter)` over the batch's rows, one per contiguous run of sequences
        that use one adapter; rows in no segment run the base model alone.
    prefix: the module-name prefix of the layer this view is for (`encoder.layer.3.`), so a
        layer names its linear layers as the checkpoint does (`attention.qkv`)."""

    segments: tuple[tuple[int, int, LoRAAdapter], ...]
    prefix: str = ""

    def scope(self, prefix: str) -> LoRABatch:
        """The view for a submodule (`encoder.layer.{i}.`)."""
        return LoRABatch(self.segments, self.prefix + prefix)

    def add_(self, out: torch.Tensor, x: torch.Tensor, module: str) -> torch.Tensor:
        """`out[rows] += x[rows] @ a.T @ b.T` for each segment whose adapter adapts `module`;
        `x` is the linear layer's input `[T, in]`, `out` its output `[T, out]` (written in place,
        returned). The delta is linear in `x`, so it may be added after the base output's bias,
        activation-free residual or not."""
        key = self.prefix + module
        for start, end, adapter in self.segments:
            weights = adapter.modules.get(key)
            if weights is not None:
                out[start:end].addmm_(x[start:end] @ weights.a.t(), weights.b.t())
        return out

    def add_embedding_(self, out: torch.Tensor, ids: torch.Tensor, module: str) -> torch.Tensor:
        """`out[rows] += a[ids[rows]] @ b.T` for each segment whose adapter adapts the embedding
        table `module`: the rows of the delta table `a @ b.T` for the tokens, without building it."""
        key = self.prefix + module
        for start, end, adapter in self.segments:
            weights = adapter.modules.get(key)
            if weights is not None:
                out[start:end].addmm_(weights.a[ids[start:end]], weights.b.t())
        return out


def require_positive(config: Mapping[str, Any], keys: Sequence[str], where: str = "") -> None:
    """ValueError (prefixed `where`) unless each of `keys` is a positive number: an adapter config's
    rank and alpha (peft's `r` / `lora_alpha`, Jina's `lora_rank` / `lora_alpha`)."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{where}{key} must be a positive number, not {value!r}")


def scoped(lora: LoRABatch | None, prefix: str) -> LoRABatch | None:
    """`lora`'s view for the submodule under `prefix`; None (no adapter in the batch) stays None."""
    return lora.scope(prefix) if lora is not None else None


def lora_batch(adapters: Sequence[LoRAAdapter | None], seq_lens: Sequence[int]) -> LoRABatch | None:
    """The segments of a batch whose i-th sequence (`seq_lens[i]` rows) uses `adapters[i]`
    (None: the base model); consecutive sequences of one adapter make one segment. None when
    no sequence uses an adapter."""
    segments: list[tuple[int, int, LoRAAdapter]] = []
    row = 0
    for adapter, length in zip(adapters, seq_lens):
        if adapter is not None:
            if segments and segments[-1][2] is adapter and segments[-1][1] == row:
                segments[-1] = (segments[-1][0], row + length, adapter)
            else:
                segments.append((row, row + length, adapter))
        row += length
    return LoRABatch(tuple(segments)) if segments else None
