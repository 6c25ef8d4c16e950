"""What a decoder-only vision-language model over one page image (GLM-OCR, PaddleOCR-VL) gives the
decode loop (generation.DecoderOnlyLM) and its `generate` head, shared: the page's image features
in its prompt's embeddings, a step's hidden states and logits through the decode cache.

A subclass builds `language_model` (its `embed_tokens`, and `forward(x, positions, cache)`),
`lm_head` (None: tied to the token table), `config.image_token_id` and `encode_images`, and calls
`size_decoder`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import AttentionMetadata
from ..generation.cache import DecodeCache
from .base import Backbone


class PageDecoderLM(Backbone):
    supports_images = True
    patch_grids = True  # each page at its own resolution, its patches as the processor flattens them
    # no packed text batches: the decode worker runs it (generation/worker.py)
    cpu_float32_batch_tokens = None
    position_axes = 3  # M-RoPE: temporal, height, width

    language_model: nn.Module
    lm_head: nn.Linear | None

    def size_decoder(self, text: Any, merge: int) -> None:
        """generation.DecoderOnlyLM's sizes, what the decode loop asks, from the text config
        (`num_hidden_layers`, `num_key_value_heads`, `head_dim`, `max_position_embeddings`), and the
        vision tower's `merge` (spatial_merge_size) the head reads."""
        self.decoder_layers = text.num_hidden_layers
        self.decoder_heads = text.num_key_value_heads  # the cache holds the key/value heads
        self.decoder_head_dim = text.head_dim
        self.decoder_positions = text.max_position_embeddings
        self.merge = merge

    def input_embeddings(self) -> nn.Embedding:
        return self.language_model.embed_tokens  # type: ignore[return-value]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} generates from page images: it has no packed text forward")

    def prompt_embeddings(self, ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """A prompt's ids `[L]` (its image placeholders in one run) and its page's features `[n, H]`
        -> the decoder's input embeddings `[L, H]`, the features where the placeholders are."""
        x = self.input_embeddings()(ids)
        places = (ids == self.config.image_token_id).nonzero().squeeze(1)
        return x.index_copy(0, places, features.to(x.dtype))

    def token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids `[rows, Q]` -> input embeddings `[rows, Q, H]`."""
        return self.input_embeddings()(tokens)  # type: ignore[no-any-return]

    def hidden(self, x: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """One step's input embeddings `[rows, Q, H]` at positions `[3, rows, Q]` -> hidden `[rows, Q, H]`
        of every new token (after the final norm)."""
        return self.language_model(x, positions, cache)  # type: ignore[no-any-return]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states `[..., H]` -> float32 logits `[..., V]` (the token table where tied)."""
        weight = self.input_embeddings().weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    def decode_embedded(self, embeddings: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """One step (after `cache.begin_step`) -> float32 logits `[rows, V]` of each row's last new token."""
        hidden = self.hidden(embeddings, positions, cache)
        return self.logits(hidden[torch.arange(hidden.shape[0], device=hidden.device), cache.last_index])
