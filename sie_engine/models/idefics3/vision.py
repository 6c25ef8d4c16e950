"""Idefics3's vision tower (transformers' `Idefics3VisionTransformer`, SigLIP's encoder) over the
tiles of pages, and the connector into the decoder's width.

- Tiles: the processor cuts a page into `image_size` x `image_size` tiles plus a global view of the
  whole page at that size; every tile is one full image (no padding: the processor's tiles always
  fill it), so the tower runs them batched, each attending to itself.
- Embeddings: a Conv2d with a bias over `patch_size` patches, plus learned positions. transformers
  buckets each patch's fractional coordinate (NaViT's variable-resolution positions, in the
  pixels' dtype); for a full tile this is the patch's index except where the dtype rounds the
  coordinate across a boundary, so the ids are computed as transformers computes them.
- Layers: SigLIP's pre-norm blocks (clip.EncoderLayer: LayerNorm, q/k/v with biases, GELU MLP;
  k and v fused as the decoder's are: colpali.SplitQueryAttention), then the post LayerNorm.
- The connector: pixel shuffle (each `scale_factor` x `scale_factor` block of patches into one
  feature `scale_factor**2` times as wide, in transformers' channel order), then a linear map
  without bias into the decoder's width: `(image_size / patch_size / scale_factor)**2` features
  per tile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend
from ..clip.model import Encoder, PatchEmbeddings, TowerConfig
from ..colpali.model import SplitQueryAttention


@dataclass(frozen=True)
class Idefics3VisionConfig:
    """`vision_config` of an Idefics3 config.json (transformers' Idefics3VisionConfig fills the rest)."""

    vision: TowerConfig
    image_size: int
    patch_size: int
    num_channels: int

    @staticmethod
    def from_hf(vision: Mapping[str, Any]) -> Idefics3VisionConfig:
        return Idefics3VisionConfig(vision=TowerConfig.from_hf(vision), image_size=int(vision["image_size"]),
                                    patch_size=int(vision["patch_size"]), num_channels=int(vision["num_channels"]))

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def tile_position_ids(side: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`[side * side]` position ids of a full tile's patches, as Idefics3VisionEmbeddings buckets
    them (fractional coordinates in `dtype`, bucketised against float32 boundaries)."""
    boundaries = torch.arange(1 / side, 1.0, 1 / side, device=device)
    steps = torch.arange(side, device=device, dtype=torch.float32) * (1.0 / torch.tensor(float(side), device=device))
    buckets = torch.bucketize(steps.clamp(max=1.0 - 1e-6).to(dtype), boundaries, right=True)
    return (buckets[:, None] * side + buckets[None, :]).reshape(-1)


class TileEmbeddings(PatchEmbeddings):
    """SigLIP's patch embeddings (no class token, a bias on the convolution) at transformers'
    bucketed positions."""

    def __init__(self, config: Idefics3VisionConfig):
        super().__init__(config, class_token=False, conv_bias=True)
        self.side = config.image_size // config.patch_size

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """`[B, C, S, S]` tiles -> `[B * P, H]`, tile after tile."""
        patches = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)  # [B, P, H]
        ids = tile_position_ids(self.side, pixel_values.dtype, pixel_values.device)
        x = patches + self.position_embedding(ids)[None]
        return x.reshape(-1, x.shape[-1])


class VisionTower(nn.Module):
    """`[B, C, S, S]` tiles -> `[B, P, H_vision]` (after the post LayerNorm)."""

    def __init__(self, config: Idefics3VisionConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.backend = backend
        self.embeddings = TileEmbeddings(config)
        self.encoder = Encoder(config.vision, backend, causal=False)
        for layer in self.encoder.layers:  # the decoder's weight layout, so one stacking rule loads both (ColPali's)
            layer.self_attn = SplitQueryAttention(config.vision.hidden_size, config.vision.num_attention_heads,
                                                  backend, causal=False)
        self.post_layernorm = nn.LayerNorm(config.vision.hidden_size, eps=config.vision.layer_norm_eps)

    def forward(self, tiles: torch.Tensor) -> torch.Tensor:
        patches = self.config.num_patches
        attn = self.backend.prepare((patches,) * tiles.shape[0], tiles.device)  # each tile attends to itself
        x = self.encoder(self.embeddings(tiles.to(self.embeddings.patch_embedding.weight.dtype)), attn)
        return self.post_layernorm(x).view(tiles.shape[0], patches, -1)


def pixel_shuffle(x: torch.Tensor, scale: int) -> torch.Tensor:
    """`[B, P, E]` patch states (P a square) -> `[B, P / scale**2, E * scale**2]`, each feature one
    `scale` x `scale` block of patches (Idefics3Connector.pixel_shuffle's order)."""
    batch, seq, width = x.shape
    side = int(seq ** 0.5)
    x = x.view(batch, side, side // scale, width * scale).permute(0, 2, 1, 3)
    x = x.reshape(batch, side // scale, side // scale, width * scale * scale).permute(0, 2, 1, 3)
    return x.reshape(batch, seq // scale ** 2, width * scale ** 2)


class ModalityProjection(nn.Module):
    def __init__(self, width: int, out: int):
        super().__init__()
        self.proj = nn.Linear(width, out, bias=False)


class Connector(nn.Module):
    """Tile states `[B, P, E]` -> image features `[B, P / scale**2, H_text]`."""

    def __init__(self, vision_width: int, text_width: int, scale: int):
        super().__init__()
        self.scale = scale
        self.modality_projection = ModalityProjection(vision_width * scale ** 2, text_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.modality_projection.proj(pixel_shuffle(x, self.scale))
