"""Qwen2-VL as ColQwen2 runs it (vidore/colqwen2-v1.0-hf: `ColQwen2ForRetrieval`, whose `vlm` is a
`Qwen2VLModel`): a vision tower over each page at its own resolution, its patch merger into the
decoder's width, and the Qwen2 decoder (models/qwen/model.py's) over the page's prompt with the
image features where the processor put its `<|image_pad|>` placeholders.

Read top to bottom: the config, the vision tower (patch embedding, 2D rotary positions, blocks,
merger), the model. The input preparation (prompts, smart resize) is inputs.py.

- The vision tower: every `patch_size` x `patch_size` patch of the resized page (two identical
  frames: `temporal_patch_size`) through a Conv3d, then blocks of bidirectional attention over the
  page's patches with 2D rotary positions (half of each head's channels rotate by the patch's row,
  half by its column), then the merger: LayerNorm, each `merge_size` x `merge_size` window of
  patches concatenated (the processor hands them over window by window) and an MLP into the
  decoder's width. One image feature per window.
- Positions in the decoder: transformers' `ColQwen2ForRetrieval.forward` merges the image features
  into `inputs_embeds` itself and calls the `Qwen2VLModel` with neither `input_ids` nor
  `image_grid_thw`, so `get_rope_index` never runs and every token, image feature or text, gets
  the 1D position of its place in the sequence on all three M-RoPE axes. M-RoPE with equal axes is
  plain rotary, which is what SIE runs by default (equal to transformers, as tests/engine/families/
  test_colqwen2.py checks). colpali-engine's ColQwen2 (the training code: illuin-tech/colpali,
  `ColQwen2.forward`) passes `get_rope_index`'s 3D positions instead, which move a page's image
  features and the prompt after them; a card turns those on with `options.backbone:
  {mrope_positions: true}` (`mrope_positions`; equal to transformers' model given those
  position_ids). Queries are text only: the same 1D positions either way.
- Attention in the decoder is causal (Qwen2's); every position yields a vector.
- ColQwen2.5 (a `vlm_config` of model_type qwen2_5_vl): the same retriever over Qwen2.5-VL, whose
  vision blocks use RMSNorm and a SwiGLU MLP with biases and attend within windows of
  `window_size` pixels (the patches laid out window by window: `window_order`) except in
  `fullatt_block_indexes`; its decoder is the same Qwen2 decoder.

`forward(input_ids, positions, attn)` runs a query's tokens; `forward_images(patches, attn, grids)`
runs pages (attn over each page's prompt + image-feature positions) and returns
`[sum of sequence lengths, H]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...batch import Grids
from ...layers.blocks import RMSNorm, activation
from ...layers.rotary import RotaryEmbedding, apply_rotary, multimodal_rotary
from ...layers.weights import WeightSpec
from ..base import Backbone
from ..colpali.vlm_config import RetrieverConfig, complete_config, decoder_config
from ..qwen.model import FUSED_KV_AND_GATE_UP, QwenConfig, QwenMLP, QwenModel

# The card's switch (`options.backbone`, laid over config.json) to 3D M-RoPE positions over pages
MROPE_SWITCH = "mrope_positions"


@dataclass(frozen=True)
class VisionConfig:
    """The vision tower of Qwen2-VL's `vision_config` (`embed_dim` wide blocks) or Qwen2.5-VL's
    (`hidden_size` wide), its merger into the decoder's width.

    window_size: Qwen2.5-VL's blocks (None: Qwen2-VL's): RMSNorm, a SwiGLU MLP with biases, and
    attention within windows of `window_size` pixels a side except in `full_attention_blocks`.
    """

    depth: int
    embed_dim: int
    num_heads: int
    intermediate_size: int
    hidden_act: str
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    window_size: int | None = None
    full_attention_blocks: tuple[int, ...] = ()

    @staticmethod
    def from_hf(vision: Mapping[str, Any], model_type: str) -> VisionConfig:
        common = dict(depth=vision["depth"], num_heads=vision["num_heads"], hidden_act=vision["hidden_act"],
                      in_channels=vision["in_channels"], patch_size=vision["patch_size"],
                      temporal_patch_size=vision["temporal_patch_size"],
                      spatial_merge_size=vision["spatial_merge_size"])
        if model_type == "qwen2_vl":
            return VisionConfig(embed_dim=vision["embed_dim"],
                                intermediate_size=int(vision["embed_dim"] * vision["mlp_ratio"]), **common)
        return VisionConfig(embed_dim=vision["hidden_size"], intermediate_size=vision["intermediate_size"],
                            window_size=vision["window_size"],
                            full_attention_blocks=tuple(vision["fullatt_block_indexes"]), **common)


@dataclass(frozen=True)
class ColQwen2Config(RetrieverConfig):
    """config.json of a ColQwen2 checkpoint (`vlm_config` with its `vision_config` and `text_config`).

    vision: the vision tower; text: the Qwen2 decoder as models/qwen/model.py's config (causal,
    biases on q/k/v); image_token_id: the placeholder the processor writes once per image feature;
    embedding_dim: the width of ColQwen2's token vectors (128); mrope_section: where a card turns
    on M-RoPE over pages (`options.backbone: {mrope_positions: true}`), the rotary channels per
    axis (text_config's `rope_parameters.mrope_section`); None: transformers' 1D positions.
    """

    vision: VisionConfig
    text: QwenConfig
    image_token_id: int
    embedding_dim: int
    mrope_section: tuple[int, ...] | None = None

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> ColQwen2Config:
        """Every key completed by transformers' config classes (a published config.json lists only
        what differs from their defaults)."""
        # ColQwen2.5's vlm_config is a Qwen2.5-VL; anything else is refused as not Qwen2-VL
        vlm_type = "qwen2_5_vl" if (config.get("vlm_config") or {}).get("model_type") == "qwen2_5_vl" else "qwen2_vl"
        mrope = bool(config.get(MROPE_SWITCH, False))
        config = {key: value for key, value in config.items() if key != MROPE_SWITCH}  # not a ColQwen2Config key
        full, text, vision = complete_config(config, "colqwen2", vlm_type,
                                             "only Qwen2-VL (ColQwen2) and Qwen2.5-VL (ColQwen2.5) are supported")
        if text.get("use_sliding_window"):
            raise ValueError("use_sliding_window=true is not supported (no published ColQwen2 uses it)")
        # Qwen2VLAttention's: biases on q/k/v, none on o; causal; head_dim = hidden_size / heads
        decoder = decoder_config({**text, "head_dim": None}, hidden_act="silu", max_positions=32768,
                                 rope_theta=1_000_000.0, qkv_bias=True, o_bias=False, causal=True)
        merged = vision["hidden_size"] if vlm_type == "qwen2_vl" else vision["out_hidden_size"]
        if merged != decoder.hidden_size:
            raise ValueError(f"the vision merger's width {merged} != text hidden_size {decoder.hidden_size}")
        return ColQwen2Config(
            vision=VisionConfig.from_hf(vision, vlm_type), text=decoder,
            image_token_id=int(full.vlm_config.image_token_id), embedding_dim=int(full.embedding_dim),
            mrope_section=tuple(text["rope_parameters"]["mrope_section"]) if mrope else None,
        )


class PatchEmbed(nn.Module):
    """`[N, C * T * p * p]` flattened patches -> `[N, E]` through Qwen2-VL's Conv3d (kernel = stride =
    the patch: one output per patch; Qwen3-VL's has a bias)."""

    def __init__(self, config: VisionConfig, bias: bool = False):
        super().__init__()
        self.shape = (config.in_channels, config.temporal_patch_size, config.patch_size, config.patch_size)
        self.proj = nn.Conv3d(config.in_channels, config.embed_dim, kernel_size=self.shape[1:],
                              stride=self.shape[1:], bias=bias)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        return self.proj(patches.view(-1, *self.shape)).flatten(1)  # [N, E, 1, 1, 1] -> [N, E]


def patch_positions(grids: Grids, merge: int) -> np.ndarray:
    """`[N, 2]` (row, column) of every patch of the pages, in the processor's order: window by
    window of `merge` x `merge` patches (transformers' `get_vision_position_ids`)."""
    pages: list[np.ndarray] = []
    for h, w in grids:
        window = (h // merge, merge, w // merge, merge)
        row: np.ndarray = np.repeat(np.arange(h), w).reshape(window)  # [h * w] raster order, then window by window
        column = np.tile(np.arange(w), h).reshape(window)
        pages.append(np.stack([a.transpose(0, 2, 1, 3).reshape(-1) for a in (row, column)], axis=1))
    return np.concatenate(pages)


def patch_rotary(rotary: RotaryEmbedding, positions: np.ndarray,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """2D rotary tables (cos, sin) `[N, head_dim]` of patches at `[N, 2]` (row, column): the first
    quarter of a head's frequencies by the row, the second by the column, the half-table repeated
    (Qwen2-VL's `VisionRotaryEmbedding`, shared by the Qwen3-VL and GLM-OCR vision towers)."""
    freqs = torch.from_numpy(positions).to(device).float()[:, :, None] * rotary.inv_freq(device)  # [N, 2, D / 4]
    emb = torch.cat((freqs.flatten(1), freqs.flatten(1)), dim=-1)  # [N, head_dim]
    return emb.cos(), emb.sin()


def window_order(grids: Grids, merge: int, side: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """Qwen2.5-VL's windows (transformers' `get_vision_window_index`): the order `[N / merge**2]` in
    which the merge windows of the pages are laid out so that each attention window of `side` x
    `side` merge windows (row of windows by row, each in raster order; partial at the page's right
    and bottom edges) is contiguous, and each attention window's length in patches."""
    order: list[np.ndarray] = []
    lengths: list[int] = []
    offset = 0
    for h, w in grids:
        rows, columns = h // merge, w // merge
        padded = np.full((-(-rows // side) * side, -(-columns // side) * side), -1)
        padded[:rows, :columns] = np.arange(rows * columns).reshape(rows, columns)
        windows = padded.reshape(padded.shape[0] // side, side, padded.shape[1] // side, side).transpose(0, 2, 1, 3)
        for window in windows.reshape(-1, side * side):
            kept = window[window >= 0]
            order.append(kept + offset)
            lengths.append(len(kept) * merge ** 2)
        offset += rows * columns
    return np.concatenate(order), tuple(lengths)


class VisionAttention(nn.Module):
    """Fused qkv, 2D rotary on q and k, bidirectional attention within each page, output proj."""

    def __init__(self, config: VisionConfig, backend: AttentionBackend):
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, config.embed_dim // config.num_heads
        self.qkv = nn.Linear(config.embed_dim, 3 * config.embed_dim)
        self.proj = nn.Linear(config.embed_dim, config.embed_dim)
        self.backend = backend
        self.scale = self.head_dim ** -0.5

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        T, E = x.shape
        q, k, v = self.qkv(x).view(T, 3, self.num_heads, self.head_dim).unbind(1)  # each [T, heads, D]
        cos, sin = rotary
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return self.proj(self.backend(q, k, v, attn, scale=self.scale, causal=False).reshape(T, E))


class VisionMlp(nn.Module):
    """Qwen2-VL's: fc1, activation, fc2."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.embed_dim, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.embed_dim)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def vision_norm(config: VisionConfig, width: int) -> nn.Module:
    """Qwen2-VL's LayerNorm, Qwen2.5-VL's RMSNorm (both eps 1e-6)."""
    return nn.LayerNorm(width, eps=1e-6) if config.window_size is None else RMSNorm(width, 1e-6)


class VisionBlock(nn.Module):
    def __init__(self, config: VisionConfig, backend: AttentionBackend):
        super().__init__()
        self.norm1 = vision_norm(config, config.embed_dim)
        self.attn = VisionAttention(config, backend)
        self.norm2 = vision_norm(config, config.embed_dim)
        self.mlp: nn.Module = (VisionMlp(config) if config.window_size is None else  # Qwen2.5-VL: SwiGLU, biases
                               QwenMLP(config.embed_dim, config.intermediate_size, config.hidden_act, bias=True))

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rotary, attn)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """LayerNorm, each window's `merge**2` patches side by side, MLP (Linear, GELU, Linear) into the
    decoder's width: `[N, E]` -> `[N / merge**2, H]`."""

    def __init__(self, config: VisionConfig, hidden_size: int):
        super().__init__()
        self.width = config.embed_dim * config.spatial_merge_size ** 2
        self.ln_q = vision_norm(config, config.embed_dim)
        self.mlp = nn.Sequential(nn.Linear(self.width, self.width), nn.GELU(), nn.Linear(self.width, hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.ln_q(x).view(-1, self.width))


class VisionTower(nn.Module):
    """Qwen2-VL's vision transformer: `[N, C * T * p * p]` patches of the pages -> `[N / merge**2, H]`.
    Qwen2.5-VL's lays the patches out window by window first (`window_order`), attends within each
    window except in its full-attention blocks, and puts the merged features back in page order."""

    def __init__(self, config: VisionConfig, hidden_size: int, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.backend = backend
        self.patch_embed = PatchEmbed(config)
        # half of each head's channels rotate by the row, half by the column: a table of head_dim / 2
        self.rotary = RotaryEmbedding(config.embed_dim // config.num_heads // 2, 10_000.0)
        self.blocks = nn.ModuleList(VisionBlock(config, backend) for _ in range(config.depth))
        self.merger = PatchMerger(config, hidden_size)

    def forward(self, patches: torch.Tensor, grids: Grids) -> torch.Tensor:
        config, device = self.config, patches.device
        merge = config.spatial_merge_size
        positions = patch_positions(grids, merge)  # [N, 2]
        x = self.patch_embed(patches)  # [N, E]
        pages = self.backend.prepare(tuple(h * w for h, w in grids), device)  # each page attends to itself
        windows, order = pages, None
        if config.window_size is not None:
            order, lengths = window_order(grids, merge, config.window_size // merge // config.patch_size)
            units = torch.from_numpy(order).to(device)
            x = x.view(-1, merge ** 2, x.shape[-1])[units].flatten(0, 1)  # [N, E], window by window
            positions = positions.reshape(-1, merge ** 2, 2)[order].reshape(-1, 2)
            windows = self.backend.prepare(lengths, device)
        rotary = patch_rotary(self.rotary, positions, device)
        for index, block in enumerate(self.blocks):
            x = block(x, rotary, pages if order is None or index in config.full_attention_blocks else windows)
        merged = self.merger(x)  # [N / merge**2, H]
        if order is None:
            return merged
        return merged[torch.from_numpy(np.argsort(order)).to(device)]  # back in page order


def mrope_positions(before: int, grids: Grids, after: int, merge: int) -> np.ndarray:
    """`[3, sum of sequence lengths]` (temporal, height, width) positions of the pages' sequences as
    transformers' `get_rope_index` computes them: the prompt's first `before` tokens count 0, 1, ...
    on all three axes; the page's image features (a rows x columns grid of merge windows, raster
    order) sit at `before` in time and `before + row`, `before + column`; the last `after` tokens
    count on from `before + max(rows, columns)`."""
    pages = []
    for h, w in grids:
        rows, columns = h // merge, w // merge
        row, column = np.divmod(np.arange(rows * columns), columns)
        image = np.stack([np.full(rows * columns, before), before + row, before + column])
        text_after: np.ndarray = before + max(rows, columns) + np.arange(after)
        pages.append(np.concatenate([np.tile(np.arange(before), (3, 1)), image, np.tile(text_after, (3, 1))], axis=1))
    return np.concatenate(pages, axis=1)


class ColQwen2Model(Backbone):
    """Packed Qwen2-VL (ColQwen2's `vlm`); see the module docstring. `image_prompt`: the tokens
    before and after each page's image features, set from the checkpoint's processor when the
    family's multivector head is built (models/colqwen2/head.py)."""

    supports_images = True
    patch_grids = True  # each page at its own resolution, its patches as the processor flattens them

    weight_spec = WeightSpec(
        # transformers 5 saves `vlm.visual.*` / `vlm.language_model.*`; checkpoints saved under transformers 4
        # nest both in `vlm.model.` (which transformers 5 strips on load: conversion_mapping.py's colqwen2
        # entry): the anchor finds either prefix
        anchor="visual.merger.ln_q.weight",
        stacked=FUSED_KV_AND_GATE_UP,
    )

    def __init__(self, config: ColQwen2Config, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.merge = config.vision.spatial_merge_size
        self.visual = VisionTower(config.vision, config.text.hidden_size, backend)
        self.language_model = QwenModel(config.text, backend)
        self.image_prompt: tuple[torch.Tensor, torch.Tensor] | None = None

    def set_image_prompt(self, before: Sequence[int], after: Sequence[int]) -> None:
        """The tokens before and after each page's image features (ColQwen2Inputs.image_prompt)."""
        self.image_prompt = (torch.as_tensor(before, dtype=torch.long), torch.as_tensor(after, dtype=torch.long))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.language_model(input_ids, positions, attn)

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        """`[N, C * T * p * p]` patches of B pages with their grids -> `[sum of B sequence lengths, H]`:
        each page's prompt start, its image features, its prompt end."""
        if self.image_prompt is None:
            raise RuntimeError("the image prompt was not set (ColQwen2's multivector head sets it at load: "
                               "models/colqwen2/head.py)")
        if grids is None:
            raise ValueError("a ColQwen2 image batch carries each page's patch grid (patch_grids)")
        features = self.visual(pixel_values, grids)  # [sum features, H]
        embed = self.language_model.embed_tokens
        before, after = (embed(ids.to(pixel_values.device)) for ids in self.image_prompt)  # [Lb, H], [La, H]
        counts = [h * w // self.merge ** 2 for h, w in grids]
        pieces: list[torch.Tensor] = []
        for page in features.split(counts):
            pieces += [before, page, after]
        x = torch.cat(pieces).to(before.dtype)
        lengths = np.asarray(counts) + len(before) + len(after)
        starts: np.ndarray = np.repeat(np.cumsum(lengths) - lengths, lengths)
        positions = torch.from_numpy(np.arange(int(lengths.sum())) - starts).to(x.device)
        sections = self.config.mrope_section
        if sections is None:  # transformers' ColQwen2ForRetrieval: 1D positions (module docstring)
            return self.language_model.forward_embeddings(x, positions, attn)
        spatial = torch.from_numpy(mrope_positions(len(before), grids, len(after), self.merge)).to(x.device)
        rotary = multimodal_rotary(self.language_model.rotary, spatial, sections)
        return self.language_model.forward_embeddings(x, positions, attn, rotary=rotary)
