"""Idefics3 (transformers' `Idefics3ForConditionalGeneration`: granite-docling, SmolDocling): the
vision tower and connector (vision.py) over each page's tiles, the tiles' image features where the
processor put its `<image>` placeholders, and the Llama decoder, which generates the page's DocTags.

- The decoder is Llama's (granite-docling's Granite 165M and SmolDocling's SmolLM2 are Llama
  checkpoints): SIE's LLaMA-style blocks (models/qwen: RMSNorm, grouped-query attention with
  rotary positions, SwiGLU MLP) under transformers' names, its cached decode path
  (`QwenModel.decode_embedded`) the generation protocol's step.
- Positions are plain RoPE: the prompt's tokens count 0, 1, ..., image features included, and
  generated tokens count on (no position offset).
- `tie_word_embeddings` (the top-level config's, which transformers ties by) shares the LM head
  with the input embeddings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...generation.cache import DecodeCache
from ...generation.head import GenerationHead
from ...layers.weights import WeightSpec
from ..base import Backbone
from ..qwen.model import FUSED_KV_AND_GATE_UP, QwenConfig, QwenModel
from .vision import Connector, Idefics3VisionConfig, VisionTower

# transformers' MAX_IMAGE_SIZE (a 4096-pixel longest edge) in 512-pixel tiles a side, plus the global view:
# the most tiles a page can have under any processor settings (admission's and the activations' bound)
MAX_TILES = 8 * 8 + 1


def llama_decoder_config(text: Mapping[str, Any]) -> QwenConfig:
    """transformers' LlamaConfig (as a dict) -> SIE's LLaMA-style decoder config (QwenConfig.from_llama
    refuses what the blocks do not run)."""
    if text.get("model_type") != "llama":
        raise ValueError(f"text_config.model_type={text.get('model_type')!r}: SIE runs Idefics3 with a Llama "
                         "decoder (granite-docling's and SmolDocling's)")
    return QwenConfig.from_llama(text)


@dataclass(frozen=True)
class Idefics3Config:
    """config.json of an Idefics3 checkpoint, completed by transformers' Idefics3Config."""

    vision: Idefics3VisionConfig
    text: QwenConfig
    scale_factor: int
    image_token_id: int
    tie_word_embeddings: bool

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> Idefics3Config:
        from transformers import Idefics3Config as Reference

        if config.get("model_type") != "idefics3":
            raise ValueError(f"model_type={config.get('model_type')!r} is not an Idefics3 (idefics3) checkpoint")
        full = Reference.from_dict(dict(config))
        vision = Idefics3VisionConfig.from_hf(full.vision_config.to_dict())
        side, scale = vision.image_size // vision.patch_size, int(full.scale_factor)
        if side % scale:
            raise ValueError(f"scale_factor {scale} does not divide the tile's {side} patches a side")
        return Idefics3Config(vision=vision, text=llama_decoder_config(full.text_config.to_dict()), scale_factor=scale,
                              image_token_id=int(full.image_token_id),
                              tie_word_embeddings=bool(full.tie_word_embeddings))

    @property
    def max_seq_len(self) -> int:
        """Decoder positions: the prompt (image features included) plus generated tokens."""
        return self.text.max_position_embeddings

    @property
    def image_seq_len(self) -> int:
        """Image features per tile (the processor's `image_seq_len`)."""
        return self.vision.num_patches // self.scale_factor ** 2


class Idefics3Model(Backbone):
    """Idefics3 under transformers' names (`model.vision_model.*`, `model.connector.*`,
    `model.text_model.*`, `lm_head`); see the module docstring."""

    supports_images = True
    # no packed text batches: the decode worker runs it (generation/worker.py)
    cpu_float32_batch_tokens = None

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """The vision tower's activations for the pages that join the decode batch together (the
        generation head's `encode_batch`), each at the processor's most tiles (MAX_TILES):
        every patch's states, q/k/v and MLP; the decode cache is charged apart (generation/worker.py)."""
        vision: Idefics3VisionConfig = config.vision  # config: the family's Idefics3Config
        per_patch = 8 * vision.vision.hidden_size + 2 * vision.vision.intermediate_size
        patches = MAX_TILES * vision.num_patches
        return GenerationHead.encode_batch * patches * per_patch * torch.empty((), dtype=dtype).element_size()

    def __init__(self, config: Idefics3Config, backend: AttentionBackend):
        super().__init__()
        self.config = config
        text = config.text
        self.vision_model = VisionTower(config.vision, backend)
        self.connector = Connector(config.vision.vision.hidden_size, text.hidden_size, config.scale_factor)
        self.text_model = QwenModel(text, backend)
        self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.text_model.embed_tokens.weight
        self.weight_spec = WeightSpec(
            anchor="model.connector.modality_projection.proj.weight",
            renames=(("model.vision_model.", "vision_model."), ("model.connector.", "connector."),
                     ("model.text_model.", "text_model.")),
            stacked=FUSED_KV_AND_GATE_UP,  # both towers keep q_proj apart and fuse k_proj and v_proj
        )
        # generation.DecoderOnlyLM: what the decode loop asks
        self.decoder_layers = text.num_hidden_layers
        self.decoder_heads = text.num_key_value_heads  # the cache holds the key/value heads
        self.decoder_head_dim = text.head_dim
        self.decoder_positions = text.max_position_embeddings

    position_axes = 1  # plain RoPE

    def input_embeddings(self) -> nn.Embedding:
        return self.text_model.embed_tokens

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError("Idefics3 generates from page images: it has no packed text forward")

    def encode_tiles(self, tiles: torch.Tensor) -> torch.Tensor:
        """`[B, C, S, S]` tiles -> their image features `[B, image_seq_len, H]`."""
        return self.connector(self.vision_model(tiles))

    def prompt_embeddings(self, ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """A prompt's ids `[L]` and its page's features `[n, H]` (tile after tile, the global view
        last) -> the decoder's input embeddings `[L, H]`, the features where the `<image>`
        placeholders are, in order (transformers' inputs_merger)."""
        x = self.text_model.embed_tokens(ids)
        places = (ids == self.config.image_token_id).nonzero().squeeze(1)
        if len(places) != features.shape[0]:
            raise ValueError(f"the prompt holds {len(places)} image placeholders; the page has {features.shape[0]} "
                             "image features")
        return x.index_copy(0, places, features.to(x.dtype))

    def token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids `[rows, Q]` -> input embeddings `[rows, Q, H]`."""
        return self.text_model.embed_tokens(tokens)

    def decode_embedded(self, embeddings: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """One step (after `cache.begin_step`): embeddings `[rows, Q, H]` at positions `[1, rows, Q]`
        -> float32 logits `[rows, V]` of each row's last new token."""
        return self.lm_head(self.text_model.decode_embedded(embeddings, positions[0], cache)).float()
