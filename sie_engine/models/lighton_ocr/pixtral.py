"""Pixtral's vision tower (transformers' `PixtralVisionModel`), packed: every page at its own size
(a multiple of the patch), its patches flattened row by row and the pages' patches concatenated,
each page attending to itself only (the attention backend's sequences; transformers builds the
same block-diagonal mask over its concatenated patches). Read leaf to root: 2D rotary, attention,
layer, tower. Module names are transformers' (`patch_conv`, `ln_pre`, `transformer.layers.N.
{attention_norm, attention, ffn_norm, feed_forward}`) except two fusions the weight spec stacks:
`attention.qkv_proj` (q, k, v) and `feed_forward.gate_up_proj` (gate, up).

The 2D rotary gives each patch at (row, column) the angles row * f[0::2] on the first quarter of
each half of a head and column * f[1::2] on the second (Pixtral's `PixtralRotaryEmbedding` table,
computed here for the patches present rather than looked up in a max-size table)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, default_scale
from ...layers.blocks import RMSNorm
from ...layers.rotary import apply_rotary
from ..qwen.model import QwenMLP

# PixtralRMSNorm's eps, fixed in transformers (not read from the config)
NORM_EPS = 1e-5

STACKED = (
    ("attention.q_proj", "attention.qkv_proj", 0),
    ("attention.k_proj", "attention.qkv_proj", 1),
    ("attention.v_proj", "attention.qkv_proj", 2),
    ("feed_forward.gate_proj", "feed_forward.gate_up_proj", 0),
    ("feed_forward.up_proj", "feed_forward.gate_up_proj", 1),
)


@dataclass(frozen=True)
class PixtralConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    patch_size: int
    image_size: int
    num_channels: int = 3
    hidden_act: str = "silu"
    rope_theta: float = 10_000.0

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> PixtralConfig:
        if config.get("model_type", "pixtral") != "pixtral":
            raise ValueError(f"vision model_type {config.get('model_type')!r}: LightOnOCR runs a Pixtral vision tower")
        rope = config.get("rope_parameters") or {}
        if (rope.get("rope_type") or "default") != "default":
            raise ValueError(f"vision rope_type={rope.get('rope_type')!r} is not supported (only 'default')")
        hidden, heads = int(config.get("hidden_size", 1024)), int(config.get("num_attention_heads", 16))
        head_dim = config.get("head_dim") or hidden // heads
        if head_dim != hidden // heads:  # the attention splits hidden by heads; the rotary reads head_dim
            raise ValueError(f"vision head_dim {head_dim} != hidden_size / num_attention_heads ({hidden // heads})")
        return PixtralConfig(
            hidden_size=hidden, intermediate_size=int(config.get("intermediate_size", 4096)),
            num_hidden_layers=int(config.get("num_hidden_layers", 24)), num_attention_heads=heads,
            patch_size=int(config.get("patch_size", 16)), image_size=int(config.get("image_size", 1024)),
            num_channels=int(config.get("num_channels", 3)), hidden_act=str(config.get("hidden_act", "gelu")),
            rope_theta=float(rope.get("rope_theta") or config.get("rope_theta") or 10_000.0))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def rotary_2d(grids: Sequence[tuple[int, int]], head_dim: int, theta: float,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Patch grids (rows, columns) of the pages -> float32 (cos, sin) `[sum of h * w, head_dim]`."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))  # [D / 2]
    angles = []
    for h, w in grids:
        rows = torch.arange(h).repeat_interleave(w).float()[:, None] * freqs[None, ::2]  # [h * w, D / 4]
        cols = torch.arange(w).repeat(h).float()[:, None] * freqs[None, 1::2]
        angles.append(torch.cat((rows, cols), dim=-1))
    half = torch.cat(angles).to(device)
    emb = torch.cat((half, half), dim=-1)
    return emb.cos(), emb.sin()


class PixtralAttention(nn.Module):
    def __init__(self, config: PixtralConfig, backend: AttentionBackend):
        super().__init__()
        self.heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], attn: Any) -> torch.Tensor:
        T = x.shape[0]
        q, k, v = self.qkv_proj(x).view(T, 3, self.heads, self.head_dim).unbind(1)  # each [T, heads, D]
        cos, sin = rotary
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        context = self.backend(q, k, v, attn, scale=self.scale, causal=False)
        return self.o_proj(context.reshape(T, -1))


class PixtralLayer(nn.Module):
    def __init__(self, config: PixtralConfig, backend: AttentionBackend):
        super().__init__()
        self.attention_norm = RMSNorm(config.hidden_size, NORM_EPS)
        self.attention = PixtralAttention(config, backend)
        self.ffn_norm = RMSNorm(config.hidden_size, NORM_EPS)
        self.feed_forward = QwenMLP(config.hidden_size, config.intermediate_size, config.hidden_act)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], attn: Any) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rotary, attn)
        return x + self.feed_forward(self.ffn_norm(x))


class PixtralTransformer(nn.Module):
    def __init__(self, config: PixtralConfig, backend: AttentionBackend):
        super().__init__()
        self.layers = nn.ModuleList(PixtralLayer(config, backend) for _ in range(config.num_hidden_layers))


class PixtralVision(nn.Module):
    """Pages `[C, H_i, W_i]` (each a multiple of the patch) -> their patches' states, concatenated
    `[sum of (H_i / p) * (W_i / p), hidden]`, each page's row by row."""

    def __init__(self, config: PixtralConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        p = config.patch_size
        self.patch_conv = nn.Conv2d(config.num_channels, config.hidden_size, kernel_size=p, stride=p, bias=False)
        self.ln_pre = RMSNorm(config.hidden_size, NORM_EPS)
        self.transformer = PixtralTransformer(config, backend)
        self.backend = backend

    def grid(self, page: torch.Tensor) -> tuple[int, int]:
        p = self.config.patch_size
        return page.shape[-2] // p, page.shape[-1] // p

    def forward(self, pages: Sequence[torch.Tensor]) -> torch.Tensor:
        p = self.config.patch_size
        grids = [self.grid(page) for page in pages]
        # the stride-p convolution as one matmul over every page's patches (channel, row, column order)
        patches = torch.cat([page[:, :h * p, :w * p].reshape(page.shape[0], h, p, w, p).permute(1, 3, 0, 2, 4)
                             .reshape(h * w, -1) for page, (h, w) in zip(pages, grids, strict=True)])
        x = self.ln_pre(F.linear(patches.to(self.patch_conv.weight.dtype), self.patch_conv.weight.flatten(1)))
        device = x.device
        rotary = rotary_2d(grids, self.config.head_dim, self.config.rope_theta, device)
        attn = self.backend.prepare([h * w for h, w in grids], device)  # each page attends to itself
        for layer in self.transformer.layers:
            x = layer(x, rotary, attn)
        return x
