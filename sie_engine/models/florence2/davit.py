"""DaViT, Florence-2's vision tower, and the projector that turns its last stage into encoder
tokens; read leaf to root: MLP, window attention (spatial), channel-group attention, the two
blocks (each a depthwise-conv positional step before attention and before the MLP), the conv
patch embedding of each stage, the tower, the projector. Names are transformers'
(`vision_tower.convs.{stage}`, `vision_tower.blocks.{stage}.{block}.spatial_block...`,
`multi_modal_projector...`) so the checkpoint loads by name.

Every image of a batch has the processor's fixed size, so the tower runs on `[B, C, H, W]` with no
packing; the windows of all images are one attention call per block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...layers.blocks import activation


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


@dataclass(frozen=True)
class DaViTConfig:
    """config.json's `vision_config` (Florence2VisionConfig); one entry per stage in the tuples."""

    in_channels: int
    depths: tuple[int, ...]
    patch_size: tuple[int, ...]
    patch_stride: tuple[int, ...]
    patch_padding: tuple[int, ...]
    patch_prenorm: tuple[bool, ...]
    embed_dim: tuple[int, ...]
    num_heads: tuple[int, ...]
    num_groups: tuple[int, ...]
    window_size: int
    mlp_ratio: float
    qkv_bias: bool
    activation_function: str
    projection_dim: int  # the encoder's width the projector maps to (BART's d_model)
    max_position_embeddings: int  # rows (and columns) of the learned 2-D position table
    max_temporal_embeddings: int
    # the original remote-code checkpoints (microsoft/Florence-2-*): their names, the projection as a
    # raw `[vision, projection]` matrix
    original_layout: bool = False

    @classmethod
    def from_original(cls, config: Mapping[str, Any], projection_dim: int | None) -> DaViTConfig:
        """The original remote-code `vision_config` (`dim_embed`, nested position settings), mapped as
        transformers' convert_florence2_original_pytorch_to_hf maps it."""
        source = config.get("image_feature_source", ["spatial_avg_pool", "temporal_avg_pool"])
        if list(source) != ["spatial_avg_pool", "temporal_avg_pool"]:
            raise ValueError(f"vision_config image_feature_source {source}: SIE's projector pools as Florence-2's "
                             "checkpoints do (spatial_avg_pool, temporal_avg_pool)")
        mapped = {k: v for k, v in config.items() if k not in ("dim_embed", "image_pos_embed",
                                                               "visual_temporal_embedding")}
        mapped["embed_dim"] = config["dim_embed"]
        # the conversion passes `max_pos_embeddings`, which Florence2VisionConfig does not read: its default (50)
        # stands, the original's own value
        mapped["max_position_embeddings"] = (config.get("image_pos_embed") or {}).get("max_pos_embeddings", 50)
        mapped["max_temporal_embeddings"] = (config.get("visual_temporal_embedding") or {}).get(
            "max_temporal_embeddings", 100)
        if projection_dim is not None:
            mapped.setdefault("projection_dim", projection_dim)
        return replace(cls.from_hf(mapped), original_layout=True)

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> DaViTConfig:
        parsed = cls(
            in_channels=int(config.get("in_channels", 3)), depths=_ints(config.get("depths", (1, 1, 9, 1))),
            patch_size=_ints(config.get("patch_size", (7, 3, 3, 3))),
            patch_stride=_ints(config.get("patch_stride", (4, 2, 2, 2))),
            patch_padding=_ints(config.get("patch_padding", (3, 1, 1, 1))),
            patch_prenorm=tuple(bool(v) for v in config.get("patch_prenorm", (False, True, True, True))),
            embed_dim=_ints(config.get("embed_dim", (128, 256, 512, 1024))),
            num_heads=_ints(config.get("num_heads", (4, 8, 16, 32))),
            num_groups=_ints(config.get("num_groups", (4, 8, 16, 32))),
            window_size=int(config.get("window_size", 12)), mlp_ratio=float(config.get("mlp_ratio", 4.0)),
            qkv_bias=bool(config.get("qkv_bias", True)),
            activation_function=str(config.get("activation_function", "gelu")),
            projection_dim=int(config.get("projection_dim", 1024)),
            max_position_embeddings=int(config.get("max_position_embeddings", 50)),
            max_temporal_embeddings=int(config.get("max_temporal_embeddings", 100)))
        stages = len(parsed.embed_dim)
        for name in ("depths", "patch_size", "patch_stride", "patch_padding", "patch_prenorm", "num_heads",
                     "num_groups"):
            if len(getattr(parsed, name)) != stages:
                raise ValueError(f"vision_config {name} has {len(getattr(parsed, name))} entries, embed_dim {stages}")
        return parsed

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """The last stage's patch grid (h, w) for `height` x `width` pixels (each stage's conv arithmetic)."""
        for k, s, p in zip(self.patch_size, self.patch_stride, self.patch_padding, strict=True):
            height, width = (height + 2 * p - k) // s + 1, (width + 2 * p - k) // s + 1
        return height, width

    def image_tokens(self, height: int, width: int) -> int:
        """Encoder positions an image fills: the grid's patches plus the spatially pooled one."""
        h, w = self.grid(height, width)
        return h * w + 1


class MLP(nn.Module):
    def __init__(self, dim: int, ratio: float, act: str):
        super().__init__()
        self.fc1 = nn.Linear(dim, int(dim * ratio))
        self.fc2 = nn.Linear(int(dim * ratio), dim)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class WindowAttention(nn.Module):
    """Multi-head attention inside non-overlapping windows; the map is zero-padded right and bottom
    to whole windows (after the norm, as transformers does: padding positions are keys, unmasked)."""

    def __init__(self, dim: int, heads: int, window: int, qkv_bias: bool):
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `[B, H, W, C]` -> `[B, H * W, C]`."""
        b, h, w, c = x.shape
        win = self.window
        x = F.pad(x, (0, 0, 0, (win - w % win) % win, 0, (win - h % win) % win))
        hp, wp = x.shape[1:3]
        windows = x.view(b, hp // win, win, wp // win, win, c).transpose(2, 3).reshape(-1, win * win, c)
        n = windows.shape[0]
        qkv = self.qkv(windows).view(n, win * win, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])  # [n, heads, win², d]
        out = self.proj(out.transpose(1, 2).reshape(n, win * win, c))
        out = out.view(b, hp // win, wp // win, win, win, c).transpose(2, 3).reshape(b, hp, wp, c)
        return out[:, :h, :w].reshape(b, h * w, c)


class ChannelAttention(nn.Module):
    """Attention across channels within groups: each group's channels are the "tokens", the image's
    positions their features (scale: positions ** -0.5, transformers' choice)."""

    def __init__(self, dim: int, groups: int, qkv_bias: bool):
        super().__init__()
        self.groups = groups
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `[B, N, C]` -> `[B, N, C]`."""
        b, n, c = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.groups, c // self.groups).permute(2, 0, 3, 4, 1)  # [3, B, g, C/g, N]
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], scale=n ** -0.5)  # [B, g, C/g, N]
        return self.proj(out.permute(0, 3, 1, 2).reshape(b, n, c))


def _depthwise(dim: int) -> nn.Conv2d:
    return nn.Conv2d(dim, dim, kernel_size=3, padding=1, groups=dim)


class _Block(nn.Module):
    """x + conv1(x), then x + attention(norm1(x)); x + conv2(x), then x + ffn(norm2(x))."""

    def __init__(self, dim: int, config: DaViTConfig):
        super().__init__()
        self.conv1 = _depthwise(dim)
        self.norm1 = nn.LayerNorm(dim)
        self.conv2 = _depthwise(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = MLP(dim, config.mlp_ratio, config.activation_function)

    def attend(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[B, C, H, W]` -> `[B, C, H, W]`."""
        b, c, h, w = x.shape
        x = self.conv1(x) + x
        t = x.flatten(2).transpose(1, 2)  # [B, H * W, C]
        t = t + self.attend(self.norm1(t), h, w)
        x = t.transpose(1, 2).reshape(b, c, h, w)
        x = self.conv2(x) + x
        t = x.flatten(2).transpose(1, 2)
        t = t + self.ffn(self.norm2(t))
        return t.transpose(1, 2).reshape(b, c, h, w)


class SpatialBlock(_Block):
    def __init__(self, dim: int, heads: int, config: DaViTConfig):
        super().__init__(dim, config)
        self.window_attn = WindowAttention(dim, heads, config.window_size, config.qkv_bias)

    def attend(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        return self.window_attn(x.view(x.shape[0], h, w, x.shape[-1]))


class ChannelBlock(_Block):
    def __init__(self, dim: int, groups: int, config: DaViTConfig):
        super().__init__(dim, config)
        self.channel_attn = ChannelAttention(dim, groups, config.qkv_bias)

    def attend(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        return self.channel_attn(x)


class DaViTBlock(nn.Module):
    def __init__(self, config: DaViTConfig, stage: int):
        super().__init__()
        dim = config.embed_dim[stage]
        self.spatial_block = SpatialBlock(dim, config.num_heads[stage], config)
        self.channel_block = ChannelBlock(dim, config.num_groups[stage], config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.channel_block(self.spatial_block(x))


class ConvEmbed(nn.Module):
    """A stage's patch embedding: a strided conv, its LayerNorm over channels before (stages > 0)
    or after it (stage 0)."""

    def __init__(self, config: DaViTConfig, stage: int):
        super().__init__()
        dim_in = config.in_channels if stage == 0 else config.embed_dim[stage - 1]
        dim = config.embed_dim[stage]
        self.pre_norm = config.patch_prenorm[stage]
        self.conv = nn.Conv2d(dim_in, dim, kernel_size=config.patch_size[stage], stride=config.patch_stride[stage],
                              padding=config.patch_padding[stage])
        self.norm = nn.LayerNorm(dim_in if self.pre_norm else dim)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            return self.conv(self._norm(x))
        return self._norm(self.conv(x))


class DaViT(nn.Module):
    """Pixels `[B, C, H, W]` -> the last stage's map `[B, embed_dim[-1], h, w]`."""

    def __init__(self, config: DaViTConfig):
        super().__init__()
        self.convs = nn.ModuleList(ConvEmbed(config, i) for i in range(len(config.embed_dim)))
        self.blocks = nn.ModuleList(nn.ModuleList(DaViTBlock(config, i) for _ in range(depth))
                                    for i, depth in enumerate(config.depths))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, blocks in zip(self.convs, self.blocks, strict=True):
            x = conv(x)
            for block in blocks:
                x = block(x)
        return x


class LearnedPositions2D(nn.Module):
    """Position (row r, column c) adds `[column_embeddings[c], row_embeddings[r]]` (that order)."""

    def __init__(self, positions: int, dim: int):
        super().__init__()
        self.row_embeddings = nn.Embedding(positions, dim // 2)
        self.column_embeddings = nn.Embedding(positions, dim - dim // 2)

    def forward(self, h: int, w: int) -> torch.Tensor:
        """-> `[h * w, dim]`, row-major."""
        cols = self.column_embeddings.weight[:w][None].expand(h, w, -1)
        rows = self.row_embeddings.weight[:h][:, None].expand(h, w, -1)
        return torch.cat([cols, rows], dim=-1).reshape(h * w, -1)


class Projector(nn.Module):
    """transformers' `Florence2MultiModalProjector`: the map plus its 2-D positions and the first
    temporal (1-D sinusoidal) position, as tokens; the tokens' mean in front of them (spatial
    pooling; the temporal mean over one frame is the tokens themselves); projection and LayerNorm."""

    def __init__(self, config: DaViTConfig):
        super().__init__()
        dim = config.embed_dim[-1]
        # the original checkpoints hold the projection as a raw `[vision, projection]` matrix (used as `x @ W`),
        # transformers' a Linear's `[projection, vision]` weight: each loads as it is
        self.transposed = config.original_layout
        self.image_projection: nn.Module | nn.Parameter = (
            nn.Parameter(torch.zeros(dim, config.projection_dim)) if self.transposed
            else nn.Linear(dim, config.projection_dim, bias=False))
        self.image_proj_norm = nn.LayerNorm(config.projection_dim)
        self.image_position_embed = LearnedPositions2D(config.max_position_embeddings, dim)
        self.visual_temporal_embed = nn.Module()
        # a persistent buffer in the checkpoint (the sinusoid table); only frame 0 is read for images
        self.visual_temporal_embed.register_buffer("pos_idx_to_embed",
                                                   torch.zeros(config.max_temporal_embeddings, dim))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """`[B, C, h, w]` -> image tokens `[B, 1 + h * w, projection_dim]`."""
        h, w = features.shape[-2:]
        tokens = features.flatten(2).transpose(1, 2) + self.image_position_embed(h, w)
        tokens = tokens + self.visual_temporal_embed.pos_idx_to_embed[0]
        tokens = torch.cat([tokens.mean(dim=1, keepdim=True), tokens], dim=1)
        projected = tokens @ self.image_projection if self.transposed else self.image_projection(tokens)
        return self.image_proj_norm(projected)
