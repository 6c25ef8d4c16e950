"""Qwen3-VL (transformers' `Qwen3VLModel`, the backbone of Qwen3-VL-Embedding and Qwen3-VL-Reranker):
a vision tower over each image at its own resolution, its patch merger and DeepStack mergers into
the decoder's width, and the Qwen3 decoder (models/qwen/model.py's) over the chat prompt with the
image features where the processor put its `<|image_pad|>` placeholders.

Read top to bottom: the config, the vision tower, 3D positions, the model. The input preparation
(chat prompts, smart resize) is inputs.py.

- The vision tower (`Qwen3VLVisionModel`): Qwen2-VL's Conv3d patch embedding (with a bias here)
  plus a learned `num_position_embeddings` table of a square grid, resampled bilinearly (corners
  aligned) to each image's patch grid; blocks of bidirectional attention within each image with
  2D rotary positions (models/colqwen2's), LayerNorm and a plain MLP; the patch merger (LayerNorm,
  each `merge` x `merge` window side by side, MLP). After the blocks `deepstack_visual_indexes`
  a DeepStack merger (its LayerNorm over the concatenated window) makes features of the same
  shape, added to the image positions' hidden states after the decoder's first layers (one
  merger per layer, in order: `Qwen3VLTextModel._deepstack_process`).
- Positions in the decoder: `get_rope_index`'s 3D positions (text counts on every axis; an image's
  features sit at one time step, their row and column offsets on the height and width axes; the
  text after it goes on from the largest of those) through interleaved M-RoPE
  (layers/rotary.py's `multimodal_rotary(..., interleaved=True)`). A text-only sequence has equal
  axes, which is plain rotary.
- Attention in the decoder is causal, Qwen3's (per-head q/k RMSNorm, `attention_bias`).

`forward(input_ids, positions, attn)` runs text sequences; `forward_mixed(input_ids, seq_lens,
pixel_values, grids, attn)` runs sequences whose `<|image_pad|>` runs take the images' features in
order; `forward_image_prompts(patches, attn, grids, prompts)` runs one image per sequence inside its
item's prompt ids (the input preparation's chat, one placeholder each). Each returns hidden `[T, H]`
after the final norm.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...batch import Grids
from ...layers.blocks import activation
from ...layers.rotary import RotaryEmbedding, multimodal_rotary
from ...layers.weights import WeightSpec
from ..base import Backbone
from ..colpali.vlm_config import RetrieverConfig, decoder_config
from ..colqwen2.model import PatchEmbed, VisionAttention, VisionConfig, patch_positions, patch_rotary
from ..qwen.model import FUSED_KV_AND_GATE_UP, QwenConfig, QwenModel


@dataclass(frozen=True)
class Qwen3VisionConfig(VisionConfig):
    """Qwen3-VL's `vision_config`: Qwen2-VL's tower fields plus the learned position table
    (`num_position_embeddings`, a square grid) and the blocks whose output DeepStack merges."""

    num_position_embeddings: int = 2304
    deepstack_layers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Qwen3VLConfig(RetrieverConfig):
    """config.json of a Qwen3-VL checkpoint (`Qwen3VLForConditionalGeneration` / `Qwen3VLModel`),
    completed by transformers' config classes. mrope_section: the rotary channels per axis
    (text_config's `rope_parameters.mrope_section`), interleaved as Qwen3-VL's text rotary does."""

    vision: Qwen3VisionConfig
    text: QwenConfig
    image_token_id: int
    mrope_section: tuple[int, ...]

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> Qwen3VLConfig:
        from transformers import CONFIG_MAPPING

        if config.get("model_type") != "qwen3_vl":
            raise ValueError(f"model_type={config.get('model_type')!r} is not a qwen3_vl checkpoint")
        full = CONFIG_MAPPING["qwen3_vl"].from_dict(dict(config))
        text, vision = full.text_config.to_dict(), full.vision_config.to_dict()
        # Qwen3VLTextAttention: Qwen3's per-head q/k norms, `attention_bias` on all four projections, causal
        bias = bool(text.get("attention_bias", False))
        decoder = decoder_config(text, hidden_act="silu", max_positions=128000, rope_theta=500_000.0,
                                 qkv_bias=bias, o_bias=bias, qk_norm=True, causal=True)
        if vision["out_hidden_size"] != decoder.hidden_size:
            raise ValueError(f"the vision merger's width {vision['out_hidden_size']} != text hidden_size "
                             f"{decoder.hidden_size}")
        side = math.isqrt(vision["num_position_embeddings"])
        if side * side != vision["num_position_embeddings"]:
            raise ValueError(f"vision_config.num_position_embeddings={vision['num_position_embeddings']} is not "
                             "a square grid")
        tower = Qwen3VisionConfig(
            depth=vision["depth"], embed_dim=vision["hidden_size"], num_heads=vision["num_heads"],
            intermediate_size=vision["intermediate_size"], hidden_act=vision["hidden_act"],
            in_channels=vision["in_channels"], patch_size=vision["patch_size"],
            temporal_patch_size=vision["temporal_patch_size"], spatial_merge_size=vision["spatial_merge_size"],
            num_position_embeddings=vision["num_position_embeddings"],
            deepstack_layers=tuple(vision["deepstack_visual_indexes"]))
        sections = tuple((text.get("rope_parameters") or {}).get("mrope_section") or (24, 20, 20))
        return Qwen3VLConfig(vision=tower, text=decoder, image_token_id=int(full.image_token_id),
                             mrope_section=sections)


class VisionMlp(nn.Module):
    """Qwen3-VL's: linear_fc1, activation, linear_fc2."""

    def __init__(self, config: VisionConfig):
        super().__init__()
        self.linear_fc1 = nn.Linear(config.embed_dim, config.intermediate_size)
        self.linear_fc2 = nn.Linear(config.intermediate_size, config.embed_dim)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(self.act(self.linear_fc1(x)))


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
    """LayerNorm (over each patch, or with `after_shuffle` over the window's patches side by side:
    DeepStack's), each window's `merge**2` patches side by side, MLP (Linear, GELU, Linear) into the
    decoder's width: `[N, E]` -> `[N / merge**2, H]`."""

    def __init__(self, config: VisionConfig, hidden_size: int, after_shuffle: bool = False):
        super().__init__()
        self.width = config.embed_dim * config.spatial_merge_size ** 2
        self.after_shuffle = after_shuffle
        self.norm = nn.LayerNorm(self.width if after_shuffle else config.embed_dim, eps=1e-6)
        self.linear_fc1 = nn.Linear(self.width, self.width)
        self.act = nn.GELU()
        self.linear_fc2 = nn.Linear(self.width, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x.view(-1, self.width)) if self.after_shuffle else self.norm(x).view(-1, self.width)
        return self.linear_fc2(self.act(self.linear_fc1(x)))


class VisionTower(nn.Module):
    """Qwen3-VL's vision transformer: `[N, C * T * p * p]` patches of the images -> the merged
    features `[N / merge**2, H]` and the DeepStack features (one such tensor per merger)."""

    def __init__(self, config: Qwen3VisionConfig, hidden_size: int, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.backend = backend
        self.side = math.isqrt(config.num_position_embeddings)
        self.patch_embed = PatchEmbed(config, bias=True)
        self.pos_embed = nn.Embedding(config.num_position_embeddings, config.embed_dim)
        self.rotary = RotaryEmbedding(config.embed_dim // config.num_heads // 2, 10_000.0)
        self.blocks = nn.ModuleList(VisionBlock(config, backend) for _ in range(config.depth))
        self.merger = PatchMerger(config, hidden_size)
        self.deepstack_merger_list = nn.ModuleList(PatchMerger(config, hidden_size, after_shuffle=True)
                                                   for _ in config.deepstack_layers)

    def position_embeddings(self, grids: Grids, positions: np.ndarray) -> torch.Tensor:
        """`[N, E]`: the learned square table resampled to each image's grid (bilinear, corners
        aligned: `get_vision_interpolation_indices_and_weights`), read at each patch's (row, column)."""
        weight = self.pos_embed.weight
        table = weight.float().view(self.side, self.side, -1).permute(2, 0, 1)[None]  # [1, E, side, side]
        resampled: dict[tuple[int, int], torch.Tensor] = {}
        rows = torch.from_numpy(positions).to(weight.device)
        pieces, offset = [], 0
        for h, w in grids:
            if (h, w) not in resampled:
                resampled[(h, w)] = F.interpolate(table, size=(h, w), mode="bilinear", align_corners=True)[0]
            row, column = rows[offset:offset + h * w].unbind(1)
            pieces.append(resampled[(h, w)][:, row, column].T)  # [h * w, E]
            offset += h * w
        return torch.cat(pieces).to(weight.dtype)

    def forward(self, patches: torch.Tensor, grids: Grids) -> tuple[torch.Tensor, list[torch.Tensor]]:
        config, device = self.config, patches.device
        positions = patch_positions(grids, config.spatial_merge_size)  # [N, 2], window by window
        x = self.patch_embed(patches) + self.position_embeddings(grids, positions)  # [N, E]
        rotary = patch_rotary(self.rotary, positions, device)
        images = self.backend.prepare(tuple(h * w for h, w in grids), device)  # each image attends to itself
        deepstack: list[torch.Tensor] = []
        for index, block in enumerate(self.blocks):
            x = block(x, rotary, images)
            if index in config.deepstack_layers:
                deepstack.append(self.deepstack_merger_list[config.deepstack_layers.index(index)](x))
        return self.merger(x), deepstack


def rope_positions(input_ids: np.ndarray, seq_lens: Sequence[int], image_token_id: int, grids: Grids,
                   merge: int) -> np.ndarray:
    """`[3, T]` (temporal, height, width) positions of packed sequences as `get_rope_index` computes
    them: text tokens count on, on all three axes; each run of an image's `<|image_pad|>` tokens
    (the images in `grids` taken in order, rows x columns merge windows in raster order) sits at
    the count so far in time and at count + row, count + column; the count then goes on from
    count + max(rows, columns)."""
    out: np.ndarray = np.empty((3, len(input_ids)), dtype=np.int64)
    images = iter(grids)
    start = 0
    for length in seq_lens:
        sequence = input_ids[start:start + length]
        is_image = sequence == image_token_id
        at, count = 0, 0
        while at < length:
            if is_image[at]:
                h, w = next(images)
                rows, columns = h // merge, w // merge
                row, column = np.divmod(np.arange(rows * columns), columns)
                span = slice(start + at, start + at + rows * columns)
                out[0, span], out[1, span], out[2, span] = count, count + row, count + column
                at, count = at + rows * columns, count + max(rows, columns)
            else:
                following = np.flatnonzero(is_image[at:])
                end = at + int(following[0]) if len(following) else length
                out[:, start + at:start + end] = count + np.arange(end - at)
                at, count = end, count + end - at
        start += length
    return out


class Qwen3VLModel(Backbone):
    """Packed Qwen3-VL; see the module docstring."""

    supports_images = True
    patch_grids = True  # each image at its own resolution, its patches as the processor flattens them
    image_prompts = True  # each image inside its item's chat prompt (its text beside it)

    # Qwen3VLForConditionalGeneration keeps `model.visual.*`, `model.language_model.*` and `lm_head`;
    # Qwen3VLModel alone `visual.*` and `language_model.*`: the anchor finds either prefix
    weight_spec = WeightSpec(anchor="visual.merger.linear_fc2.weight", stacked=FUSED_KV_AND_GATE_UP)

    def __init__(self, config: Qwen3VLConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.merge = config.vision.spatial_merge_size
        self.visual = VisionTower(config.vision, config.text.hidden_size, backend)
        self.language_model = QwenModel(config.text, backend)

    def input_embeddings(self) -> nn.Embedding:
        return self.language_model.embed_tokens

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.language_model(input_ids, positions, attn)  # text only: equal M-RoPE axes, plain rotary

    def forward_mixed(self, input_ids: torch.Tensor, seq_lens: Sequence[int], pixel_values: torch.Tensor | None,
                      grids: Grids, attn: AttentionMetadata) -> torch.Tensor:
        """Packed sequences `[T]` whose `<|image_pad|>` runs (one per image, h * w / merge**2 long)
        take the features of the images `[N, C * T * p * p]` with their `grids`, in order -> `[T, H]`."""
        ids = input_ids.cpu().numpy()
        x = self.language_model.embed_tokens(input_ids)
        deepstack = None
        if pixel_values is not None and grids:
            rows = torch.from_numpy(np.flatnonzero(ids == self.config.image_token_id)).to(x.device)
            features, stacked = self.image_features(pixel_values, grids)  # [V, H], each [V, H]
            if len(rows) != features.shape[0]:
                raise ValueError(f"{len(rows)} image placeholders for {features.shape[0]} image features")
            x = x.index_copy(0, rows, features.to(x.dtype))
            deepstack = (rows, stacked)
        spatial = torch.from_numpy(rope_positions(ids, seq_lens, self.config.image_token_id, grids,
                                                  self.merge)).to(x.device)
        rotary = multimodal_rotary(self.language_model.rotary, spatial, self.config.mrope_section, interleaved=True)
        return self.language_model.forward_embeddings(x, spatial[0], attn, rotary=rotary, deepstack=deepstack)

    def image_features(self, pixel_values: torch.Tensor, grids: Grids) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The vision tower's features of the images `[N, C * T * p * p]` (every image's, in order), each
        distinct image run once: a reranker's image query stands in every pair of its request. Images
        are matched exactly (their grid and patches), after a fingerprint of both sums that costs one
        host sync for the batch."""
        sizes = [h * w for h, w in grids]
        if len(grids) < 2:
            return self.visual(pixel_values, grids)
        pieces = pixel_values.split(sizes)
        # per image, not atomics across images: equal images get equal sums on any device
        sums = torch.stack([torch.stack([p.float().sum(), p.float().square().sum()]) for p in pieces])
        unique: list[int] = []  # the first image of each distinct one
        source: list[int] = []  # each image's place among the distinct ones
        prints = [(grid, tuple(row)) for grid, row in zip(grids, sums.tolist())]
        for i in range(len(grids)):
            same = next((k for k, j in enumerate(unique)
                         if prints[j] == prints[i] and torch.equal(pieces[j], pieces[i])), None)
            source.append(len(unique) if same is None else same)
            if same is None:
                unique.append(i)
        if len(unique) == len(grids):
            return self.visual(pixel_values, grids)
        features, stacked = self.visual(torch.cat([pieces[j] for j in unique]), [grids[j] for j in unique])
        counts = [sizes[j] // self.merge ** 2 for j in unique]

        def spread(distinct: torch.Tensor) -> torch.Tensor:
            parts = distinct.split(counts)
            return torch.cat([parts[k] for k in source])

        return spread(features), [spread(layer) for layer in stacked]

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        raise RuntimeError("Qwen3-VL image items run inside prompts of their own (forward_image_prompts)")

    def forward_image_prompts(self, pixel_values: torch.Tensor, attn: AttentionMetadata, grids: Grids | None,
                              prompts: Sequence[np.ndarray]) -> torch.Tensor:
        """B image items, each inside its prompt ids (Qwen3VLInputs.image_prompts: one `<|image_pad|>`
        per image of the item, each expanded here to its image's features; the `grids` of every item's
        images in order) -> `[sum of B sequence lengths, H]`."""
        if grids is None:
            raise ValueError("a Qwen3-VL image batch carries each image's patch grid (patch_grids)")
        image_id = self.config.image_token_id
        places = sum(int((prompt == image_id).sum()) for prompt in prompts)
        if places != len(grids):
            raise ValueError(f"an image batch's prompts hold {places} image placeholders for {len(grids)} images")
        images = iter(grids)
        sequences = []
        for prompt in prompts:
            pieces = np.split(prompt, np.flatnonzero(prompt == image_id))  # each after the first starts at one
            expanded = [pieces[0]]
            for piece in pieces[1:]:
                h, w = next(images)
                expanded += [np.full(h * w // self.merge ** 2, image_id), piece[1:]]
            sequences.append(np.concatenate(expanded).astype(np.int64))
        ids = torch.from_numpy(np.concatenate(sequences)).to(pixel_values.device)
        return self.forward_mixed(ids, [len(s) for s in sequences], pixel_values, grids, attn)
