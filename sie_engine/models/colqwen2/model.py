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
  plain rotary, which is what SIE runs (equal to transformers, as tests/engine/families/
  test_colqwen2.py checks); a 3D-position variant would answer differently from the reference.
- Attention in the decoder is causal (Qwen2's); every position yields a vector.

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
from ...layers.blocks import activation
from ...layers.rotary import RotaryEmbedding, apply_rotary
from ...layers.weights import WeightSpec
from ..base import Backbone
from ..colpali.vlm_config import RetrieverConfig, complete_config, decoder_config
from ..qwen.model import FUSED_KV_AND_GATE_UP, QwenConfig, QwenModel


@dataclass(frozen=True)
class VisionConfig:
    """Qwen2-VL's `vision_config`: `embed_dim` wide blocks, `hidden_size` the merger's output (the
    decoder's width)."""

    depth: int
    embed_dim: int
    num_heads: int
    mlp_ratio: float
    hidden_act: str
    in_channels: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int


@dataclass(frozen=True)
class ColQwen2Config(RetrieverConfig):
    """config.json of a ColQwen2 checkpoint (`vlm_config` with its `vision_config` and `text_config`).

    vision: the vision tower; text: the Qwen2 decoder as models/qwen/model.py's config (causal,
    biases on q/k/v); image_token_id: the placeholder the processor writes once per image feature;
    embedding_dim: the width of ColQwen2's token vectors (128).
    """

    vision: VisionConfig
    text: QwenConfig
    image_token_id: int
    embedding_dim: int

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> ColQwen2Config:
        """Every key completed by transformers' config classes (a published config.json lists only
        what differs from their defaults)."""
        full, text, vision = complete_config(config, "colqwen2", "qwen2_vl",
                                             "only Qwen2-VL-based ColQwen2 is supported (ColQwen2.5's "
                                             "Qwen2.5-VL windowed vision attention is not)")
        if text.get("use_sliding_window"):
            raise ValueError("use_sliding_window=true is not supported (no published ColQwen2 uses it)")
        # Qwen2VLAttention's: biases on q/k/v, none on o; causal; head_dim = hidden_size / heads
        decoder = decoder_config({**text, "head_dim": None}, hidden_act="silu", max_positions=32768,
                                 rope_theta=1_000_000.0, qkv_bias=True, o_bias=False, causal=True)
        if vision["hidden_size"] != decoder.hidden_size:
            raise ValueError(f"vision_config hidden_size {vision['hidden_size']} != text hidden_size "
                             f"{decoder.hidden_size}")
        return ColQwen2Config(
            vision=VisionConfig(
                depth=vision["depth"], embed_dim=vision["embed_dim"], num_heads=vision["num_heads"],
                mlp_ratio=float(vision["mlp_ratio"]), hidden_act=vision["hidden_act"],
                in_channels=vision["in_channels"], patch_size=vision["patch_size"],
                temporal_patch_size=vision["temporal_patch_size"], spatial_merge_size=vision["spatial_merge_size"]),
            text=decoder, image_token_id=int(full.vlm_config.image_token_id), embedding_dim=int(full.embedding_dim),
        )


class PatchEmbed(nn.Module):
    """`[N, C * T * p * p]` flattened patches -> `[N, E]` through Qwen2-VL's Conv3d (kernel = stride =
    the patch: one output per patch)."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.shape = (config.in_channels, config.temporal_patch_size, config.patch_size, config.patch_size)
        self.proj = nn.Conv3d(config.in_channels, config.embed_dim, kernel_size=self.shape[1:],
                              stride=self.shape[1:], bias=False)

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
    def __init__(self, config: VisionConfig):
        super().__init__()
        hidden = int(config.embed_dim * config.mlp_ratio)
        self.fc1 = nn.Linear(config.embed_dim, hidden)
        self.fc2 = nn.Linear(hidden, config.embed_dim)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, config: VisionConfig, backend: AttentionBackend):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.embed_dim, eps=1e-6)
        self.attn = VisionAttention(config, backend)
        self.norm2 = nn.LayerNorm(config.embed_dim, eps=1e-6)
        self.mlp = VisionMlp(config)

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
        self.ln_q = nn.LayerNorm(config.embed_dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(self.width, self.width), nn.GELU(), nn.Linear(self.width, hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.ln_q(x).view(-1, self.width))


class VisionTower(nn.Module):
    """Qwen2-VL's vision transformer: `[N, C * T * p * p]` patches of the pages -> `[N / merge**2, H]`."""

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
        device = patches.device
        positions = torch.from_numpy(patch_positions(grids, self.config.spatial_merge_size)).to(device)
        freqs = (positions.float()[:, :, None] * self.rotary.inv_freq(device)).flatten(1)  # [N, head_dim / 2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [N, head_dim]
        rotary = (emb.cos(), emb.sin())
        attn = self.backend.prepare(tuple(h * w for h, w in grids), device)  # each page attends to itself
        x = self.patch_embed(patches)
        for block in self.blocks:
            x = block(x, rotary, attn)
        return self.merger(x)


class ColQwen2Model(Backbone):
    """Packed Qwen2-VL (ColQwen2's `vlm`); see the module docstring. `image_prompt`: the tokens
    before and after each page's image features, set from the checkpoint's processor when the
    family's multivector head is built (models/colqwen2/head.py)."""

    supports_images = True
    patch_grids = True  # each page at its own resolution, its patches as the processor flattens them

    weight_spec = WeightSpec(
        # transformers 5 saves `vlm.visual.*` / `vlm.language_model.*`; checkpoints converted under
        # transformers 4 (vidore/colqwen2-v1.0-hf) nest both in `vlm.model.`: the anchor finds either prefix
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
        return self.language_model.forward_embeddings(x, positions, attn)
