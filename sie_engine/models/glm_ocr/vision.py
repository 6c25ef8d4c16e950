"""GLM-OCR's vision tower (transformers' `GlmOcrVisionModel`, the CogViT encoder) over pages packed
at their own resolutions, and its connector into the decoder's width.

Read top to bottom: the config, the blocks, the tower.

- Patches: every `patch_size` x `patch_size` patch of the resized page (two identical frames:
  `temporal_patch_size`) through a Conv3d with a bias, in the processor's order (window by window
  of `spatial_merge_size` x `spatial_merge_size` patches: Qwen2-VL's layout, models/colqwen2).
- Blocks: RMSNorm, fused qkv with biases, RMSNorm over each head of q and k, 2D rotary positions
  (half of each head's channels rotate by the patch's row, half by its column: Qwen2-VL's),
  bidirectional attention within each page, output projection; RMSNorm and a SwiGLU MLP with biases.
- The connector: RMSNorm, a Conv2d over each merge window (kernel = stride = the window: one
  feature per window, `out_hidden_size` wide), then the merger: a linear map, LayerNorm, GELU, and
  a SwiGLU MLP (no biases). One image feature per merge window, in the processor's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, default_scale
from ...batch import Grids
from ...layers.blocks import RMSNorm, activation
from ...layers.rotary import RotaryEmbedding, apply_rotary
from ..colqwen2.model import patch_positions, patch_rotary


@dataclass(frozen=True)
class GlmOcrVisionConfig:
    """`vision_config` of a GLM-OCR config.json (transformers' GlmOcrVisionConfig fills the rest)."""

    depth: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    out_hidden_size: int
    hidden_act: str
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    rms_norm_eps: float
    attention_bias: bool

    @staticmethod
    def from_hf(vision: Mapping[str, Any]) -> GlmOcrVisionConfig:
        return GlmOcrVisionConfig(**{name: vision[name] for name in GlmOcrVisionConfig.__dataclass_fields__})


class SwiGLU(nn.Module):
    """down(act(gate(x)) * up(x)) with the three projections apart, as GLM-OCR's checkpoints keep them
    (the vision blocks' MLP, with biases, and the merger's, without)."""

    def __init__(self, width: int, inner: int, act: str, bias: bool):
        super().__init__()
        self.gate_proj = nn.Linear(width, inner, bias=bias)
        self.up_proj = nn.Linear(width, inner, bias=bias)
        self.down_proj = nn.Linear(inner, width, bias=bias)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class VisionAttention(nn.Module):
    def __init__(self, config: GlmOcrVisionConfig, backend: AttentionBackend):
        super().__init__()
        self.heads, self.head_dim = config.num_heads, config.hidden_size // config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        T, E = x.shape
        q, k, v = self.qkv(x).view(T, 3, self.heads, self.head_dim).unbind(1)  # each [T, heads, D]
        cos, sin = rotary
        q, k = apply_rotary(self.q_norm(q), cos, sin), apply_rotary(self.k_norm(k), cos, sin)
        return self.proj(self.backend(q, k, v, attn, scale=self.scale, causal=False).reshape(T, E))


class VisionBlock(nn.Module):
    def __init__(self, config: GlmOcrVisionConfig, backend: AttentionBackend):
        super().__init__()
        self.norm1 = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = VisionAttention(config, backend)
        self.norm2 = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size, config.hidden_act, bias=config.attention_bias)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rotary, attn)
        return x + self.mlp(self.norm2(x))


class PatchMerger(SwiGLU):
    """`[N', out]` window features -> `[N', out]`: proj, LayerNorm, GELU, then the SwiGLU (transformers'
    GlmOcrVisionPatchMerger, whose inner width is out_hidden_size * in_channels)."""

    def __init__(self, config: GlmOcrVisionConfig):
        width = config.out_hidden_size
        super().__init__(width, width * config.in_channels, config.hidden_act, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.post_projection_norm = nn.LayerNorm(width)
        self.act1 = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.act1(self.post_projection_norm(self.proj(x))))


class VisionTower(nn.Module):
    """`[N, C * T * p * p]` patches of the pages (their grids) -> `[N / merge**2, out_hidden_size]`."""

    def __init__(self, config: GlmOcrVisionConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.backend = backend
        self.patch_shape = (config.in_channels, config.temporal_patch_size, config.patch_size, config.patch_size)
        self.patch_embed = nn.Conv3d(config.in_channels, config.hidden_size, kernel_size=self.patch_shape[1:],
                                     stride=self.patch_shape[1:])
        # half of each head's channels rotate by the row, half by the column: a table of head_dim / 2
        self.rotary = RotaryEmbedding(config.hidden_size // config.num_heads // 2, 10_000.0)
        self.blocks = nn.ModuleList(VisionBlock(config, backend) for _ in range(config.depth))
        self.post_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        merge = config.spatial_merge_size
        self.downsample = nn.Conv2d(config.hidden_size, config.out_hidden_size, kernel_size=merge, stride=merge)
        self.merger = PatchMerger(config)

    def forward(self, patches: torch.Tensor, grids: Grids) -> torch.Tensor:
        config, device = self.config, patches.device
        merge = config.spatial_merge_size
        x = self.patch_embed(patches.view(-1, *self.patch_shape).to(self.patch_embed.weight.dtype)).flatten(1)  # [N, E]
        rotary = patch_rotary(self.rotary, patch_positions(grids, merge), device)
        pages = self.backend.prepare(tuple(h * w for h, w in grids), device)  # each page attends to itself
        for block in self.blocks:
            x = block(x, rotary, pages)
        x = self.post_layernorm(x)
        # each merge window's patches (contiguous: the processor's order) as a [E, merge, merge] image
        windows = x.view(-1, merge, merge, x.shape[-1]).permute(0, 3, 1, 2)
        return self.merger(self.downsample(windows).flatten(1))  # [N / merge**2, out]
