"""Rotary position embeddings (RoFormer; the "rotate half" layout of GPT-NeoX,
Llama, Qwen, ModernBERT and NomicBERT) over packed tokens.

`RotaryEmbedding(head_dim, base)(positions [T]) -> (cos [T, D], sin [T, D])` is
computed once per forward pass and shared by every layer with the same base (`scaling`: Llama 3.1's
frequency scaling, `Llama3Scaling`);
`apply_rotary(x [T, H, D], cos, sin)` rotates queries or keys.

The inverse frequencies are not a module buffer: backbones are built on the
meta device and materialised with `to_empty`, which would leave a buffer
uninitialised. They are computed on the host the first time a device is seen,
exactly as transformers computes them (float32 on the CPU), then cached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Llama3Scaling:
    """Llama 3.1's `rope_type: llama3` (transformers' `_compute_llama3_parameters`): frequencies whose
    wavelength passes `original_max_position_embeddings / low_freq_factor` are divided by `factor`,
    those below `... / high_freq_factor` kept, those between blended smoothly."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __call__(self, inv_freq: torch.Tensor) -> torch.Tensor:
        old = self.original_max_position_embeddings
        low_wavelen, high_wavelen = old / self.low_freq_factor, old / self.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / self.factor, inv_freq)
        smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, base: float, scaling: Llama3Scaling | None = None):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head_dim, got {head_dim}")
        self.head_dim = head_dim
        self.base = float(base)
        self.scaling = scaling
        self._inv_freq: dict[torch.device, torch.Tensor] = {}

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        """`[D / 2]` float32 inverse frequencies on `device`."""
        cached = self._inv_freq.get(device)
        if cached is None:
            exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim
            inv_freq = 1.0 / (self.base ** exponents)
            cached = (self.scaling(inv_freq) if self.scaling is not None else inv_freq).to(device)
            if cached.is_cuda:  # shared by every inference thread's stream: complete before any reads it
                torch.cuda.current_stream(cached.device).synchronize()
            self._inv_freq[device] = cached
        return cached

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`[T]` positions -> float32 (cos, sin), each `[T, D]` (the half-table repeated twice)."""
        freqs = positions.float()[:, None] * self.inv_freq(positions.device)[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        return emb.cos(), emb.sin()

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `[T, H, D]` queries or keys by float32 `[T, D]` tables; the math runs in
    float32 (as ModernBERT's reference does) and the result has x's dtype."""
    xf = x.float()
    half = x.shape[-1] // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)  # rotate_half
    return (xf * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


def multimodal_rotary(rotary: RotaryEmbedding, positions: torch.Tensor, sections: tuple[int, ...],
                      interleaved: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """M-RoPE (Qwen2-VL's `apply_multimodal_rotary_pos_emb`): `[3, T]` (temporal, height, width)
    positions -> float32 (cos, sin), each `[T, D]`, where the i-th block of `sections` channels (in
    each half of the table) rotates by axis i % 3. `interleaved` (Qwen3-VL's `apply_interleaved_mrope`):
    channel j of each half rotates by axis j % 3 instead, height and width only within their first
    `3 * sections[axis]` channels (temporal elsewhere). Equal axes give `rotary(positions[0])`."""
    freqs = positions.float()[:, :, None] * rotary.inv_freq(positions.device)[None, None, :]  # [3, T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [3, T, D]
    if interleaved:
        half = [j % 3 if j % 3 and j < 3 * sections[j % 3] else 0 for j in range(freqs.shape[-1])]
    else:
        half = [i % 3 for i, width in enumerate(sections) for _ in range(width)]
    axis = torch.tensor(half * 2, device=positions.device)  # [D]: the axis each channel rotates by
    chosen = emb.gather(0, axis[None, None, :].expand(1, emb.shape[1], -1)).squeeze(0)  # [T, D]
    return chosen.cos(), chosen.sin()
