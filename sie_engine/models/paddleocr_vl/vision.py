"""PaddleOCR-VL's vision encoder (transformers' `PaddleOCRVisionModel`: SigLIP's blocks run NaViT
style) over pages packed at their own resolutions, and its projector into the decoder's width.

Read top to bottom: the config, the embeddings, the blocks, the tower, the projector.

- Patches: every `patch_size` x `patch_size` patch of the resized page, in raster order (the
  processor's: one frame, `temporal_patch_size` 1), through a Conv2d with a bias, plus SigLIP's
  learned square grid of positions resized to the page's grid (bilinear, align_corners=True: the
  taps of transformers' `get_vision_interpolation_indices_and_weights` are F.interpolate's).
- Blocks: LayerNorm, q / k / v with biases, 2D rotary positions (half of each head's channels
  rotate by the patch's row, half by its column: Qwen2-VL's table, merge 1), bidirectional
  attention within each page, out_proj; LayerNorm and SigLIP's MLP (fc1, GELU-tanh, fc2). Then
  the post LayerNorm.
- The projector: LayerNorm (eps 1e-5), each 2 x 2 window of patches concatenated (the merge
  happens here, after the encoder, unlike Qwen2-VL's), linear, GELU, linear into the decoder's
  width. One image feature per window, windows in raster order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, default_scale
from ...batch import Grids
from ...layers.blocks import activation
from ...layers.rotary import RotaryEmbedding, apply_rotary
from ..colqwen2.model import patch_positions, patch_rotary


@dataclass(frozen=True)
class PaddleOcrVisionConfig:
    """`vision_config` of a PaddleOCR-VL config.json (transformers' PaddleOCRVisionConfig fills the rest)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_channels: int
    image_size: int
    patch_size: int
    hidden_act: str
    layer_norm_eps: float
    spatial_merge_size: int

    @staticmethod
    def from_hf(vision: Mapping[str, Any]) -> PaddleOcrVisionConfig:
        return PaddleOcrVisionConfig(**{name: vision[name] for name in PaddleOcrVisionConfig.__dataclass_fields__})


class VisionEmbeddings(nn.Module):
    """`[N, C * p * p]` patches of the pages -> `[N, E]`: the patch convolution plus each page's
    resized grid of learned positions."""

    def __init__(self, config: PaddleOcrVisionConfig):
        super().__init__()
        self.patch_shape = (config.num_channels, config.patch_size, config.patch_size)
        self.patch_embedding = nn.Conv2d(config.num_channels, config.hidden_size, kernel_size=config.patch_size,
                                         stride=config.patch_size)
        self.side = config.image_size // config.patch_size
        self.position_embedding = nn.Embedding(self.side ** 2, config.hidden_size)

    def positions(self, height: int, width: int) -> torch.Tensor:
        """The learned grid resized to `height x width` patches: `[height * width, E]`."""
        table = self.position_embedding.weight
        grid = table.reshape(self.side, self.side, -1).permute(2, 0, 1)[None]
        resized = F.interpolate(grid, size=(height, width), mode="bilinear", align_corners=True)
        return resized.reshape(table.shape[1], height * width).T

    def forward(self, patches: torch.Tensor, grids: Grids) -> torch.Tensor:
        weight = self.patch_embedding.weight
        x = self.patch_embedding(patches.view(-1, *self.patch_shape).to(weight.dtype)).flatten(1)  # [N, E]
        return x + torch.cat([self.positions(h, w) for h, w in grids]).to(x.dtype)


class VisionAttention(nn.Module):
    def __init__(self, config: PaddleOcrVisionConfig, backend: AttentionBackend):
        super().__init__()
        self.heads, self.head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
        self.q_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        T, E = x.shape
        q, k, v = (proj(x).view(T, self.heads, self.head_dim)  # each [T, heads, D]
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = rotary
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return self.out_proj(self.backend(q, k, v, attn, scale=self.scale, causal=False).reshape(T, E))


class VisionMLP(nn.Module):
    def __init__(self, config: PaddleOcrVisionConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class VisionLayer(nn.Module):
    def __init__(self, config: PaddleOcrVisionConfig, backend: AttentionBackend):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attn = VisionAttention(config, backend)  # the checkpoint's self_attn (model.py's renames)
        self.layer_norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = VisionMLP(config)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        x = x + self.attn(self.layer_norm1(x), rotary, attn)
        return x + self.mlp(self.layer_norm2(x))


class VisionTower(nn.Module):
    """`[N, C * p * p]` patches of the pages (their grids) -> `[N, E]` after the post LayerNorm."""

    def __init__(self, config: PaddleOcrVisionConfig, backend: AttentionBackend):
        super().__init__()
        self.backend = backend
        self.embeddings = VisionEmbeddings(config)
        # half of each head's channels rotate by the row, half by the column: a table of head_dim / 2
        self.rotary = RotaryEmbedding(config.hidden_size // config.num_attention_heads // 2, 10_000.0)
        self.layers = nn.ModuleList(VisionLayer(config, backend) for _ in range(config.num_hidden_layers))
        self.post_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, patches: torch.Tensor, grids: Grids) -> torch.Tensor:
        x = self.embeddings(patches, grids)
        rotary = patch_rotary(self.rotary, patch_positions(grids, 1), x.device)  # raster order: merge 1
        pages = self.backend.prepare(tuple(h * w for h, w in grids), x.device)  # each page attends to itself
        for layer in self.layers:
            x = layer(x, rotary, pages)
        return self.post_layernorm(x)


class Projector(nn.Module):
    """`[N, E]` patch states of the pages -> `[N / merge**2, H]` image features (transformers'
    PaddleOCRProjector)."""

    def __init__(self, config: PaddleOcrVisionConfig, text_hidden_size: int):
        super().__init__()
        self.merge = config.spatial_merge_size
        merged = config.hidden_size * self.merge ** 2
        self.pre_norm = nn.LayerNorm(config.hidden_size, eps=1e-5)
        self.linear_1 = nn.Linear(merged, merged)
        self.act = activation("gelu")
        self.linear_2 = nn.Linear(merged, text_hidden_size)

    def forward(self, x: torch.Tensor, grids: Grids) -> torch.Tensor:
        m, width = self.merge, x.shape[-1]
        x = self.pre_norm(x)
        windows = [page.view(h // m, m, w // m, m, width).transpose(1, 2).reshape(-1, m * m * width)
                   for page, (h, w) in zip(x.split([h * w for h, w in grids]), grids, strict=True)]
        return self.linear_2(self.act(self.linear_1(torch.cat(windows))))

