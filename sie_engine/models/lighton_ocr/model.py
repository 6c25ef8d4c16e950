"""LightOnOCR (transformers' `LightOnOcrForConditionalGeneration`): a Pixtral vision tower
(pixtral.py) reads each page at its own size; the projector (an RMSNorm, the patch merger that
concatenates each 2 x 2 block of patches and projects it back, then linear - GELU - linear) makes
one image feature per block; the features stand in the prompt where the processor put its image
tokens, and a Qwen3 decoder (models/qwen) generates the page's text over the decode cache.

It is a `DecoderOnlyLM` (generation/loop.py): `page_prompt` builds a page's request inputs (its
prompt's embeddings with the image features spliced in; positions 0..P-1, no offset: Qwen3's
1D RoPE), `decode_embedded` is the Qwen decoder's cached path and the LM head. Module names are
transformers' (`model.vision_encoder`, `model.vision_projection`, `model.language_model`, `lm_head`),
so the checkpoint loads as saved; the LM head is the token embeddings where the config ties them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, select_backend
from ...generation.cache import DecodeCache
from ...layers.blocks import RMSNorm
from ...layers.weights import WeightSpec
from ..base import Backbone
from ..qwen.model import FUSED_KV_AND_GATE_UP, QwenConfig, QwenModel
from .pixtral import STACKED, PixtralConfig, PixtralVision


@dataclass(frozen=True)
class LightOnOcrConfig:
    vision: PixtralConfig
    text: QwenConfig
    spatial_merge_size: int
    image_token_id: int
    tie_word_embeddings: bool

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> LightOnOcrConfig:
        if config.get("model_type") != "lighton_ocr":
            raise ValueError(f"model_type={config.get('model_type')!r} is not a LightOnOCR checkpoint")
        text = dict(config.get("text_config") or {})
        text.setdefault("model_type", "qwen3")
        if text["model_type"] != "qwen3":
            raise ValueError(f"text model_type {text['model_type']!r}: the LightOnOCR family runs a Qwen3 decoder")
        return LightOnOcrConfig(vision=PixtralConfig.from_hf(config.get("vision_config") or {}),
                                text=QwenConfig.from_hf(text),
                                spatial_merge_size=int(config.get("spatial_merge_size", 2)),
                                image_token_id=int(config.get("image_token_id", 151655)),
                                tie_word_embeddings=bool(config.get("tie_word_embeddings", True)))

    @property
    def max_seq_len(self) -> int:
        return self.text.max_position_embeddings

    @property
    def block(self) -> int:
        """Pixels per side of one image feature (patch x merge)."""
        return self.vision.patch_size * self.spatial_merge_size


class PatchMerger(nn.Module):
    """transformers' `LightOnOcrPatchMerger`: each page's `merge x merge` blocks of patch states,
    concatenated channel-major (torch.unfold's order), projected back to the vision width."""

    def __init__(self, hidden: int, merge: int):
        super().__init__()
        self.merge = merge
        self.merging_layer = nn.Linear(hidden * merge ** 2, hidden, bias=False)

    def forward(self, x: torch.Tensor, grids: Sequence[tuple[int, int]]) -> torch.Tensor:
        m, d = self.merge, x.shape[-1]
        blocks = []
        for page, (h, w) in zip(x.split([h * w for h, w in grids]), grids, strict=True):
            grid = page.view(h, w, d)[:h // m * m, :w // m * m]  # unfold drops a ragged last row / column
            blocks.append(grid.reshape(h // m, m, w // m, m, d).permute(0, 2, 4, 1, 3).reshape(-1, d * m * m))
        return self.merging_layer(torch.cat(blocks))


class Projector(nn.Module):
    def __init__(self, config: LightOnOcrConfig):
        super().__init__()
        vision, text = config.vision.hidden_size, config.text.hidden_size
        self.norm = RMSNorm(vision, config.text.rms_norm_eps)
        self.patch_merger = PatchMerger(vision, config.spatial_merge_size)
        self.linear_1 = nn.Linear(vision, text, bias=False)
        self.linear_2 = nn.Linear(text, text, bias=False)

    def forward(self, x: torch.Tensor, grids: Sequence[tuple[int, int]]) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(self.patch_merger(self.norm(x), grids))))


class LightOnOcrParts(nn.Module):
    """transformers' `LightOnOcrModel` (the `model.` of the checkpoint's names)."""

    def __init__(self, config: LightOnOcrConfig, backend: AttentionBackend):
        super().__init__()
        self.vision_encoder = PixtralVision(config.vision, backend)
        self.vision_projection = Projector(config)
        self.language_model = QwenModel(config.text, backend)


class LightOnOcrModel(Backbone):
    weight_spec = WeightSpec(anchor="model.vision_projection.linear_1.weight",
                             stacked=(*STACKED, *FUSED_KV_AND_GATE_UP))
    supports_images = True
    # no packed text batches: the decode worker runs it (generation/worker.py), pages a few at a time
    cpu_float32_batch_tokens = None
    position_axes = 1

    def __init__(self, config: LightOnOcrConfig, backend: AttentionBackend | None = None):
        super().__init__()
        self.config = config
        self.model = LightOnOcrParts(config, backend or select_backend(torch.device("cpu"), torch.float32))
        text = config.text
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(text.hidden_size, text.vocab_size,
                                                                         bias=False)
        self.decoder_layers = text.num_hidden_layers
        self.decoder_heads = text.num_key_value_heads
        self.decoder_head_dim = text.head_dim
        self.decoder_positions = text.max_position_embeddings

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError("LightOnOCR generates from pages: it has no packed text forward")

    def image_features(self, pages: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Pages `[C, H_i, W_i]` (the processor's: multiples of the patch) -> each page's image
        features `[(H_i / block) * (W_i / block), H_text]`, the vision tower run over all of them packed."""
        vision = self.model.vision_encoder
        grids = [vision.grid(page) for page in pages]
        features = self.model.vision_projection(vision(pages), grids)
        m = self.config.spatial_merge_size
        return list(features.split([(h // m) * (w // m) for h, w in grids]))

    def page_prompt(self, prompt: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """A page's prompt ids `[P]` (its image tokens among them, one per feature) -> its input
        embeddings `[P, H]`, the features in the image tokens' places (transformers' masked_scatter)."""
        x = self.model.language_model.embed_tokens(prompt)
        slots = prompt == self.config.image_token_id
        if int(slots.sum()) != features.shape[0]:
            raise ValueError(f"the prompt has {int(slots.sum())} image tokens for {features.shape[0]} image features")
        x[slots] = features.to(x.dtype)
        return x

    def token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.language_model.embed_tokens(tokens)

    def decode_embedded(self, embeddings: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        last = self.model.language_model.decode_embedded(embeddings, positions[0], cache)  # [rows, H]
        weight = self.model.language_model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(last, weight).float()
