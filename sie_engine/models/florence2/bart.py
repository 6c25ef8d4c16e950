"""BART, Florence-2's language model, read leaf to root: attention, the post-norm encoder layer
(self-attention, MLP, each added then normed), the encoder over given embeddings (image tokens and
the prompt's), the post-norm decoder layer (causal self-attention over the KV cache,
cross-attention over the encoder's states, MLP) and the decoder step with its LM head. Learned
positions read row p + 2 (fairseq's legacy offset). Names are transformers' under
`model.language_model.` (renamed to `language_model.` by the family's weight spec).

The encoder runs on a right-padded batch `[B, L, d]` with a key mask: a batch's sequences differ
only by their prompts (a few tokens beside hundreds of image tokens), so padding costs little. The
decoder runs one step at a time over the decode loop's rows (generation/cache.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...generation.attention import ProjectedAttention
from ...generation.cache import DecodeCache
from ...layers.blocks import activation

POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding: position p reads row p + 2


@dataclass(frozen=True)
class BartConfig:
    vocab_size: int
    d_model: int
    encoder_layers: int
    encoder_heads: int
    encoder_ffn_dim: int
    decoder_layers: int
    decoder_heads: int
    decoder_ffn_dim: int
    max_position_embeddings: int
    activation_function: str
    scale_embedding: bool  # token embeddings times sqrt(d_model) (image tokens are never scaled)
    # the decoder's (and the encoder's) token table is `shared` (text_config's tie_word_embeddings)
    tie_word_embeddings: bool

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> BartConfig:
        """`text_config`: transformers' `bart`, or the original checkpoints' `florence2_language` (BART's fields)."""
        if config.get("model_type", "bart") not in ("bart", "florence2_language"):
            raise ValueError(f"text_config model_type {config.get('model_type')!r}: Florence-2 runs a BART "
                             "language model")
        if config.get("add_final_layer_norm") or config.get("normalize_before"):
            raise ValueError("text_config asks for pre-norm layers (normalize_before / add_final_layer_norm): "
                             "BART's are post-norm")
        return cls(vocab_size=int(config["vocab_size"]), d_model=int(config.get("d_model", 1024)),
                   encoder_layers=int(config.get("encoder_layers", 12)),
                   encoder_heads=int(config.get("encoder_attention_heads", 16)),
                   encoder_ffn_dim=int(config.get("encoder_ffn_dim", 4096)),
                   decoder_layers=int(config.get("decoder_layers", 12)),
                   decoder_heads=int(config.get("decoder_attention_heads", 16)),
                   decoder_ffn_dim=int(config.get("decoder_ffn_dim", 4096)),
                   max_position_embeddings=int(config.get("max_position_embeddings", 1024)),
                   activation_function=str(config.get("activation_function", "gelu")),
                   scale_embedding=bool(config.get("scale_embedding", False)),
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", True)))

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.d_model) if self.scale_embedding else 1.0



class EncoderLayer(nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        d = config.d_model
        self.self_attn = ProjectedAttention(d, config.encoder_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, config.encoder_ffn_dim)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.act = activation(config.activation_function)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x `[B, L, d]`, mask `[B, 1, 1, L]` (True: a real key) or None -> `[B, L, d]`."""
        a = self.self_attn
        y = F.scaled_dot_product_attention(a.split(a.q_proj(x)), a.split(a.k_proj(x)), a.split(a.v_proj(x)),
                                           attn_mask=mask)
        x = self.self_attn_layer_norm(x + a.merge(y))
        return self.final_layer_norm(x + self.fc2(self.act(self.fc1(x))))


class BartEncoder(nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        self.embed_positions = nn.Embedding(config.max_position_embeddings + POSITION_OFFSET, config.d_model)
        self.layernorm_embedding = nn.LayerNorm(config.d_model)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))

    def forward(self, embeds: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """embeds `[B, L, d]` (sequence i's first `lengths[i]` rows real, the rest padding) -> `[B, L, d]`."""
        b, length, _ = embeds.shape
        positions = torch.arange(length, device=embeds.device) + POSITION_OFFSET
        x = self.layernorm_embedding(embeds + self.embed_positions(positions))
        mask = None
        if min(lengths) != length:
            ends = torch.tensor(lengths, device=embeds.device)
            mask = (torch.arange(length, device=embeds.device)[None, :] < ends[:, None])[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return x


class DecoderLayer(nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        d = config.d_model
        self.self_attn = ProjectedAttention(d, config.decoder_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = ProjectedAttention(d, config.decoder_heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.act = activation(config.activation_function)

    def forward(self, x: torch.Tensor, index: int, cache: DecodeCache) -> torch.Tensor:
        """x `[rows, Q, d]` -> `[rows, Q, d]`."""
        a = self.self_attn
        y = cache.attend_self(index, a.split(a.q_proj(x)), a.split(a.k_proj(x)), a.split(a.v_proj(x)))
        x = self.self_attn_layer_norm(x + a.merge(y))
        c = self.encoder_attn
        x = self.encoder_attn_layer_norm(x + c.merge(cache.attend_cross(index, c.split(c.q_proj(x)))))
        return self.final_layer_norm(x + self.fc2(self.act(self.fc1(x))))

    def cross_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder_attn.keys_values(memory)


class BartDecoder(nn.Module):
    def __init__(self, config: BartConfig):
        super().__init__()
        d = config.d_model
        # None where tied: the model's `shared` table is passed in
        self.embed_tokens = None if config.tie_word_embeddings else nn.Embedding(config.vocab_size, d)
        self.embed_positions = nn.Embedding(config.max_position_embeddings + POSITION_OFFSET, d)
        self.layernorm_embedding = nn.LayerNorm(d)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))

    def cross_attention_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Encoder states `[B, S, d]` -> per layer (keys, values) `[B, heads, S, head_dim]`."""
        return [layer.cross_kv(memory) for layer in self.layers]

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """Token embeddings (scaled) and positions `[rows, Q]` -> each row's last new token's state `[rows, d]`."""
        x = self.layernorm_embedding(embeds + self.embed_positions(positions + POSITION_OFFSET))
        for i, layer in enumerate(self.layers):
            x = layer(x, i, cache)
        return x[torch.arange(x.shape[0], device=x.device), cache.last_index]
