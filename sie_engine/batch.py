"""The packed batch: every sequence of a batch concatenated, no padding.

Built on the host by the model runner from tokenised sequences (like TEI's
`Batch`), then moved to the device in one go. Backbones receive its fields as
explicit arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .attention import AttentionBackend, AttentionMetadata

# each image's patch grid (h, w), for a family whose images come as their own grids (SigLIP 2 NaFlex)
Grids = tuple[tuple[int, int], ...]


@dataclass
class PackedBatch:
    """
    input_ids: `[T]` int64, all sequences back to back.
    positions: `[T]` int64, position of each token inside its sequence (from 0).
    token_type_ids: `[T]` int64 or None (segment ids of sentence pairs).
    attn: attention metadata (`cu_seqlens` `[B + 1]`, `max_seqlen`, backend plan).
    seq_lens: host copy of the B lengths.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    token_type_ids: torch.Tensor | None
    attn: AttentionMetadata
    seq_lens: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def cu_seqlens(self) -> torch.Tensor:
        return self.attn.cu_seqlens

    def seq_index(self) -> torch.Tensor:
        """`[T]` index of the sequence each token belongs to."""
        lens = torch.tensor(self.seq_lens, device=self.input_ids.device)
        return torch.repeat_interleave(torch.arange(len(self.seq_lens), device=lens.device), lens)


def pack(
    ids: Sequence[np.ndarray],
    backend: AttentionBackend,
    device: torch.device,
    type_ids: Sequence[np.ndarray] | None = None,
    key_lens: Sequence[int] | None = None,
) -> PackedBatch:
    """Pack tokenised sequences (1-D integer arrays) into one batch on `device`.
    `key_lens`: attention keys limited to each sequence's first tokens (see attention.py)."""
    seq_lens = tuple(len(x) for x in ids)
    if not seq_lens or min(seq_lens) == 0:
        raise ValueError("pack needs at least one sequence and no empty sequence")
    flat = torch.from_numpy(np.concatenate(ids).astype(np.int64, copy=False))
    # positions restart at 0 for every sequence: arange minus each token's sequence start
    lens = np.fromiter(seq_lens, dtype=np.int64, count=len(seq_lens))
    starts: np.ndarray = np.repeat(np.cumsum(lens) - lens, lens)
    positions = torch.from_numpy(np.arange(len(flat), dtype=np.int64) - starts)
    types = None
    if type_ids is not None:
        types = torch.from_numpy(np.concatenate(type_ids).astype(np.int64, copy=False)).to(device, non_blocking=True)
    return PackedBatch(
        input_ids=flat.to(device, non_blocking=True),
        positions=positions.to(device, non_blocking=True),
        token_type_ids=types,
        attn=backend.prepare(seq_lens, device, key_lens),
        seq_lens=seq_lens,
    )


@dataclass
class ImageBatch:
    """
    pixel_values: `[B, C, S, S]` in the model's dtype (every image of a model has one size), or
        for a model that takes each image's own patch grid (SigLIP 2 NaFlex, Qwen2-VL) `[T, C * p * p]`
        (Qwen2-VL: `[T, C * 2 * p * p]`, two frames a patch), the images' patches back to back.
    attn: attention metadata over the vision tower's packed positions.
    seq_lens: host copy of the B lengths (positions per image).
    grids: each image's patch grid (h, w) when the images come as their own grids; else None.
    """

    pixel_values: torch.Tensor
    attn: AttentionMetadata
    seq_lens: tuple[int, ...]
    grids: Grids | None = None

    @property
    def cu_seqlens(self) -> torch.Tensor:
        return self.attn.cu_seqlens

    def seq_index(self) -> torch.Tensor:
        """`[T]` index of the image each position belongs to (ColPali's MaxSim)."""
        device = self.pixel_values.device
        return torch.arange(len(self.seq_lens), device=device).repeat_interleave(
            torch.tensor(self.seq_lens, device=device))


def pack_images(pixels: Sequence[np.ndarray | tuple[np.ndarray, ...]], positions: Sequence[int],
                backend: AttentionBackend, device: torch.device, dtype: torch.dtype,
                patch_grids: bool = False) -> ImageBatch:
    """Preprocessed images into one batch on `device`: `[C, S, S]` float32 each, or with
    `patch_grids` each image's own grid of flattened patches, `[h, w, C * p * p]` (an item of a
    prompted model may hold several: its images in order, their grids one after another).
    `positions`: the positions the vision tower runs for each item."""
    seq_lens = tuple(int(n) for n in positions)
    if patch_grids:
        images = [p for item in pixels for p in (item if isinstance(item, tuple) else (item,))]
        grids = tuple((int(p.shape[0]), int(p.shape[1])) for p in images)
        flat = np.concatenate([p.reshape(-1, p.shape[-1]) for p in images])
        values = torch.from_numpy(flat).to(device, dtype, non_blocking=True)
        return ImageBatch(pixel_values=values, attn=backend.prepare(seq_lens, device), seq_lens=seq_lens, grids=grids)
    values = torch.from_numpy(np.stack(pixels)).to(device, dtype, non_blocking=True)
    return ImageBatch(pixel_values=values, attn=backend.prepare(seq_lens, device), seq_lens=seq_lens)
