"""DonutSwin: the Swin Transformer Donut encodes a page with (no final layer norm), read leaf to
root: patch embedding, windowed attention with relative position bias (every other block on
windows shifted by half a window, the wrapped-around regions kept apart by a -100 mask), MLP,
block, patch merging between stages, encoder. Names are transformers' (`encoder.embeddings...`,
`encoder.encoder.layers.{stage}.blocks.{block}...`) so the checkpoint loads by name.

Every image of a batch has the processor's fixed size, so the encoder runs on `[B, C, H, W]`
with no packing; windows of all images are one attention call per block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...layers.blocks import activation


@dataclass(frozen=True)
class SwinConfig:
    image_size: tuple[int, int]  # (height, width) the processor resizes and pads pages to
    patch_size: int
    num_channels: int
    embed_dim: int
    depths: tuple[int, ...]
    num_heads: tuple[int, ...]
    window_size: int
    mlp_ratio: float
    qkv_bias: bool
    hidden_act: str
    layer_norm_eps: float

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> SwinConfig:
        if config.get("use_absolute_embeddings"):
            raise ValueError("donut-swin use_absolute_embeddings: true is not supported "
                             "(Donut's checkpoints have none)")
        size = config.get("image_size", 224)
        image_size = (int(size[0]), int(size[1])) if isinstance(size, list | tuple) else (int(size), int(size))
        patch = config.get("patch_size", 4)
        if isinstance(patch, list | tuple):
            if patch[0] != patch[1]:
                raise ValueError(f"donut-swin patch_size {patch}: only square patches are supported")
            patch = patch[0]
        parsed = cls(image_size=image_size, patch_size=int(patch), num_channels=int(config.get("num_channels", 3)),
                     embed_dim=int(config.get("embed_dim", 96)), depths=tuple(config.get("depths", (2, 2, 6, 2))),
                     num_heads=tuple(config.get("num_heads", (3, 6, 12, 24))),
                     window_size=int(config.get("window_size", 7)), mlp_ratio=float(config.get("mlp_ratio", 4.0)),
                     qkv_bias=bool(config.get("qkv_bias", True)), hidden_act=str(config.get("hidden_act", "gelu")),
                     layer_norm_eps=float(config.get("layer_norm_eps", 1e-5)))
        for stage, (h, w) in enumerate(parsed.stage_resolutions()):
            if min(h, w) < parsed.window_size:
                # transformers shrinks the window there and its relative position table no longer fits
                raise ValueError(f"donut-swin stage {stage} is {h}x{w} patches, smaller than window_size "
                                 f"{parsed.window_size}: image_size {list(image_size)} is too small for this encoder")
        return parsed

    @property
    def hidden_size(self) -> int:
        return self.embed_dim * 2 ** (len(self.depths) - 1)

    def stage_resolutions(self) -> list[tuple[int, int]]:
        h = -(-self.image_size[0] // self.patch_size)
        w = -(-self.image_size[1] // self.patch_size)
        out = []
        for _ in self.depths:
            out.append((h, w))
            h, w = (h + 1) // 2, (w + 1) // 2
        return out

    def memory_length(self) -> int:
        """Encoder positions per image (the decoder's cross-attention memory)."""
        h, w = self.stage_resolutions()[-1]
        return h * w


def window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """`[B, H, W, C]` -> `[B * windows, window * window, C]`, windows in row-major order per image."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c).transpose(2, 3)
    return x.reshape(-1, window * window, c)


def window_reverse(windows: torch.Tensor, window: int, h: int, w: int) -> torch.Tensor:
    """`[B * windows, window * window, C]` -> `[B, H, W, C]`."""
    c = windows.shape[-1]
    x = windows.view(-1, h // window, w // window, window, window, c).transpose(2, 3)
    return x.reshape(-1, h, w, c)


def relative_position_index(window: int) -> torch.Tensor:
    """`[window², window²]`: the bias table row for each (query, key) pair of a window."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
    return rel[:, :, 0] * (2 * window - 1) + rel[:, :, 1]


def shift_mask(h: int, w: int, window: int, shift: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`[windows, window², window²]`: -100 between positions the cyclic shift brought together from
    different regions of the (padded) map, 0 elsewhere (transformers' value, not -inf)."""
    rows, cols = torch.arange(h, device=device), torch.arange(w, device=device)
    h_region = (rows >= h - window).long() + (rows >= h - shift).long()
    w_region = (cols >= w - window).long() + (cols >= w - shift).long()
    regions = (h_region[None, :, None, None] * 3 + w_region[None, None, :, None]).to(dtype)
    windows = window_partition(regions, window).squeeze(-1)  # [windows, window²]
    diff = windows[:, None, :] - windows[:, :, None]
    return torch.zeros_like(diff).masked_fill(diff != 0, -100.0)


class SwinSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, window: int, qkv_bias: bool):
        super().__init__()
        self.heads, self.window = heads, window
        self.query = nn.Linear(dim, dim, bias=qkv_bias)
        self.key = nn.Linear(dim, dim, bias=qkv_bias)
        self.value = nn.Linear(dim, dim, bias=qkv_bias)
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        # Rebuilt, not loaded (the checkpoint's copy is the same arithmetic), and no module buffer: the
        # engine builds backbones on the meta device and materialises them with `to_empty`, which would
        # leave a buffer uninitialised (layers/rotary.py does the same). Made per device on first use.
        self._index: dict[torch.device, torch.Tensor] = {}

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x `[B * windows, N, C]` (N = window²); mask `[windows, N, N]` or None -> `[B * windows, N, C]`."""
        bw, n, c = x.shape
        d = c // self.heads
        q, k, v = (proj(x).view(bw, n, self.heads, d).transpose(1, 2) for proj in (self.query, self.key, self.value))
        index = self._index.get(x.device)
        if index is None:
            index = self._index[x.device] = relative_position_index(self.window).view(-1).to(x.device)
        bias = self.relative_position_bias_table[index].view(n, n, -1)
        bias = bias.permute(2, 0, 1)[None]  # [1, heads, N, N]
        if mask is not None:
            windows = mask.shape[0]
            bias = (bias + mask[:, None]).repeat(bw // windows, 1, 1, 1)  # [B * windows, heads, N, N]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
        return out.transpose(1, 2).reshape(bw, n, c)


class SwinLayer(nn.Module):
    """One block: x + attention(norm(x)) over (shifted) windows, then x + mlp(norm(x))."""

    def __init__(self, config: SwinConfig, dim: int, heads: int, resolution: tuple[int, int], shifted: bool):
        super().__init__()
        window = config.window_size
        # transformers' `set_shift_and_window_size`: a map no larger than a window is one window, unshifted
        if min(resolution) <= window:
            window, shifted = min(resolution), False
        self.window = window
        self.shift = window // 2 if shifted else 0
        self.layernorm_before = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.attention = nn.Module()
        self.attention.self = SwinSelfAttention(dim, heads, window, config.qkv_bias)
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(dim, dim)
        self.layernorm_after = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        hidden = int(config.mlp_ratio * dim)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(dim, hidden)
        self.output = nn.Module()
        self.output.dense = nn.Linear(hidden, dim)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """x `[B, H * W, C]` -> `[B, H * W, C]`."""
        b, _, c = x.shape
        win, shift = self.window, self.shift
        y = self.layernorm_before(x).view(b, h, w, c)
        pad_w, pad_h = (win - w % win) % win, (win - h % win) % win
        y = F.pad(y, (0, 0, 0, pad_w, 0, pad_h))  # zeros right and bottom, after the norm (as transformers)
        hp, wp = h + pad_h, w + pad_w
        if shift:
            y = torch.roll(y, shifts=(-shift, -shift), dims=(1, 2))
        mask = shift_mask(hp, wp, win, shift, y.device, y.dtype) if shift else None
        y = self.attention.self(window_partition(y, win), mask)
        y = window_reverse(self.attention.output.dense(y), win, hp, wp)
        if shift:
            y = torch.roll(y, shifts=(shift, shift), dims=(1, 2))
        x = x + y[:, :h, :w].reshape(b, h * w, c)
        return x + self.output.dense(self.act(self.intermediate.dense(self.layernorm_after(x))))


class PatchMerging(nn.Module):
    """2x2 neighbouring patches concatenated (order: (0,0), (1,0), (0,1), (1,1)), normed, `4C -> 2C`."""

    def __init__(self, dim: int):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """`[B, H * W, C]` -> `[B, ceil(H/2) * ceil(W/2), 2C]`."""
        b, _, c = x.shape
        x = F.pad(x.view(b, h, w, c), (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[:, row::2, col::2, :] for col in range(2) for row in range(2)], dim=-1)
        return self.reduction(self.norm(x.view(b, -1, 4 * c)))


class SwinStage(nn.Module):
    def __init__(self, config: SwinConfig, stage: int, resolution: tuple[int, int], last: bool):
        super().__init__()
        dim = config.embed_dim * 2 ** stage
        self.blocks = nn.ModuleList(SwinLayer(config, dim, config.num_heads[stage], resolution, shifted=i % 2 == 1)
                                    for i in range(config.depths[stage]))
        self.downsample = None if last else PatchMerging(dim)


class SwinEncoder(nn.Module):
    """Pixels `[B, C, H, W]` -> `[B, positions, hidden_size]` (the last stage's patches, row-major)."""

    def __init__(self, config: SwinConfig):
        super().__init__()
        self.config = config
        self.embeddings = nn.Module()
        self.embeddings.patch_embeddings = nn.Module()
        p = config.patch_size
        self.embeddings.patch_embeddings.projection = nn.Conv2d(config.num_channels, config.embed_dim, p, stride=p)
        self.embeddings.norm = nn.LayerNorm(config.embed_dim)
        resolutions = config.stage_resolutions()
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(SwinStage(config, i, resolutions[i], last=i == len(config.depths) - 1)
                                            for i in range(len(config.depths)))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        p = self.config.patch_size
        height, width = pixel_values.shape[-2:]
        pixel_values = F.pad(pixel_values, (0, (p - width % p) % p, 0, (p - height % p) % p))
        x = self.embeddings.patch_embeddings.projection(pixel_values)  # [B, C, h, w]
        h, w = x.shape[-2:]
        x = self.embeddings.norm(x.flatten(2).transpose(1, 2))
        for stage in self.encoder.layers:
            for block in stage.blocks:
                x = block(x, h, w)
            if stage.downsample is not None:
                x = stage.downsample(x, h, w)
                h, w = (h + 1) // 2, (w + 1) // 2
        return x
