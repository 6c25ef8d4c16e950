"""MBart's decoder as Donut uses it (`MBartForCausalLM` with cross-attention), read leaf to root:
scaled token embeddings plus learned positions (offset by 2, MBart's convention), a layer norm,
pre-norm layers (causal self-attention over the KV cache, cross-attention over the encoder's
states, MLP), a final layer norm and the LM head (tied to the token embeddings unless the
checkpoint has its own). Names are transformers' under `decoder.model.decoder.` (renamed by the
family's weight spec).

The decoder runs one step at a time over the running batch's rows (generation/cache.py):
`decode(tokens [rows, Q], cache) -> logits [rows, V]`.
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

# MBartLearnedPositionalEmbedding: position p reads row p + 2 (rows 0 and 1 are fairseq's padding legacy)
POSITION_OFFSET = 2


@dataclass(frozen=True)
class MBartDecoderConfig:
    vocab_size: int
    d_model: int
    layers: int
    heads: int
    ffn_dim: int
    max_position_embeddings: int
    activation_function: str
    scale_embedding: bool
    tie_word_embeddings: bool

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> MBartDecoderConfig:
        if config.get("model_type") not in ("mbart", None):
            raise ValueError(f"decoder model_type {config.get('model_type')!r}: the Donut family runs an MBart decoder")
        return cls(vocab_size=int(config["vocab_size"]), d_model=int(config.get("d_model", 1024)),
                   layers=int(config.get("decoder_layers", 12)), heads=int(config.get("decoder_attention_heads", 16)),
                   ffn_dim=int(config.get("decoder_ffn_dim", 4096)),
                   max_position_embeddings=int(config.get("max_position_embeddings", 1024)),
                   activation_function=str(config.get("activation_function", "gelu")),
                   scale_embedding=bool(config.get("scale_embedding", False)),
                   tie_word_embeddings=bool(config.get("tie_word_embeddings", True)))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads



class DecoderLayer(nn.Module):
    def __init__(self, config: MBartDecoderConfig):
        super().__init__()
        d = config.d_model
        self.self_attn = ProjectedAttention(d, config.heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = ProjectedAttention(d, config.heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)
        self.act = activation(config.activation_function)

    def forward(self, x: torch.Tensor, index: int, cache: DecodeCache) -> torch.Tensor:
        """x `[rows, Q, d]` -> `[rows, Q, d]`."""
        a = self.self_attn
        y = self.self_attn_layer_norm(x)
        x = x + a.merge(cache.attend_self(index, a.split(a.q_proj(y)), a.split(a.k_proj(y)), a.split(a.v_proj(y))))
        c = self.encoder_attn
        y = self.encoder_attn_layer_norm(x)
        x = x + c.merge(cache.attend_cross(index, c.split(c.q_proj(y))))
        return x + self.fc2(self.act(self.fc1(self.final_layer_norm(x))))

    def cross_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder_attn.keys_values(memory)


class MBartDecoder(nn.Module):
    def __init__(self, config: MBartDecoderConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed_scale = math.sqrt(d) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.vocab_size, d)
        self.embed_positions = nn.Embedding(config.max_position_embeddings + POSITION_OFFSET, d)
        self.layernorm_embedding = nn.LayerNorm(d)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.layers))
        self.layer_norm = nn.LayerNorm(d)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(d, config.vocab_size, bias=False)

    def cross_attention_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Encoder states `[B, S, d]` -> per layer (keys, values) `[B, heads, S, head_dim]`."""
        return [layer.cross_kv(memory) for layer in self.layers]

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """tokens, positions `[rows, Q]` -> float32 logits `[rows, V]` at each row's last new token."""
        x = self.embed_tokens(tokens) * self.embed_scale + self.embed_positions(positions + POSITION_OFFSET)
        x = self.layernorm_embedding(x)
        for i, layer in enumerate(self.layers):
            x = layer(x, i, cache)
        last = x[torch.arange(x.shape[0], device=x.device), cache.last_index]  # [rows, d]
        last = self.layer_norm(last)
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(last, weight).float()
