"""MPNet encoders (all-mpnet-base-v2 and the other sentence-transformers MPNet models) over packed input.

Read leaf to root: relative position buckets, embeddings, attention, MLP, layer, encoder,
model. Names follow Hugging Face's `MPNetModel` (`attention.attn.q/k/v/o`,
`encoder.relative_attention_bias`), except the fused QKV projection, which the weight
spec stacks from `attention.attn.q/k/v`.

A post-norm BERT with two differences: positions are numbered from `padding_idx + 1 = 2`
(RoBERTa's convention; `MPNetEmbeddings` fixes padding_idx at 1 whatever the config says),
and every layer adds to its attention scores one learned scalar per head and bucketed
relative position (T5's buckets). That term depends only on the distance between two
tokens, so, as in transformers' `MPNetEncoder.compute_position_bias`, it is computed once
per forward (for the batch's longest sequence; a shorter sequence's is its top-left
corner) and shared by every layer. It reaches the attention backend through its `bias`
hook (grouped SDPA: `attention_bias_group_tokens`); everything else stays packed `[T, ...]`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, SeqGroup, default_scale, select_backend
from ...layers.blocks import residual_linear_
from ...layers.weights import WeightSpec
from ..base import Backbone, Family, MaskedLMLayout
from ..bert.model import BertIntermediate, BertOutput

# Padded positions per attention group: a padded group's bias is `[n, heads, L, L]`.
GROUP_TOKENS = 8192
# transformers' MPNetEncoder buckets with its defaults (32 buckets, distance 128), whatever
# `relative_attention_num_buckets` says; SIE accepts only configs where the two agree.
NUM_BUCKETS = 32
MAX_DISTANCE = 128
# MPNetEmbeddings' padding_idx (hard-coded to 1): the first real token sits at position 2.
POSITION_OFFSET = 2


@dataclass(frozen=True)
class MPNetConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    max_position_embeddings: int = 514
    layer_norm_eps: float = 1e-12
    relative_attention_num_buckets: int = NUM_BUCKETS

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> MPNetConfig:
        buckets = config.get("relative_attention_num_buckets", NUM_BUCKETS)
        if buckets != NUM_BUCKETS:
            raise ValueError(f"relative_attention_num_buckets={buckets} is not supported (transformers' MPNet "
                             f"buckets relative positions into {NUM_BUCKETS} whatever the config says)")
        if config["hidden_size"] % config["num_attention_heads"]:
            raise ValueError(f"hidden_size={config['hidden_size']} is not a multiple of "
                             f"num_attention_heads={config['num_attention_heads']}")
        return MPNetConfig(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            hidden_act=config.get("hidden_act", "gelu"),
            max_position_embeddings=config.get("max_position_embeddings", 514),
            layer_norm_eps=config.get("layer_norm_eps", 1e-12),
            relative_attention_num_buckets=buckets,
        )

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings - POSITION_OFFSET


def relative_position_bucket(relative: torch.Tensor, num_buckets: int = NUM_BUCKETS,
                             max_distance: int = MAX_DISTANCE) -> torch.Tensor:
    """transformers' `MPNetEncoder.relative_position_bucket` (T5's, bidirectional): key - query
    distances -> bucket ids; half the buckets per direction, exact below num_buckets / 4,
    logarithmic up to max_distance, the last bucket beyond."""
    n = -relative
    half = num_buckets // 2
    ret = (n < 0).to(torch.long) * half
    n = torch.abs(n)
    max_exact = half // 2
    is_small = n < max_exact
    large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (half - max_exact)
    ).to(torch.long)
    large = torch.clamp_max(large, half - 1)
    return ret + torch.where(is_small, n, large)


class RelativePositionBias:
    """One forward's relative position term: `[1, heads, Lmax, Lmax]` for the batch's longest
    sequence, computed once; each attention group takes its length's top-left corner (made
    contiguous once per length, then shared by every layer)."""

    def __init__(self, table: torch.Tensor, max_len: int):
        """table: `[buckets, heads]` (`encoder.relative_attention_bias.weight`)."""
        positions = torch.arange(max_len, device=table.device)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None])  # [L(query), L(key)]
        self.full = table[buckets].permute(2, 0, 1).unsqueeze(0)  # [1, heads, L, L]
        self.max_len = max_len
        self._by_length: dict[int, torch.Tensor] = {}

    def __call__(self, group: SeqGroup, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The additive scores of one group, `[1, heads, L, L]` (broadcast over its n members)."""
        length = group.length
        if length == self.max_len:
            return self.full
        if length not in self._by_length:
            self._by_length[length] = self.full[:, :, :length, :length].contiguous()
        return self._by_length[length]


class MPNetEmbeddings(nn.Module):
    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """`[T]` ids, `[T]` positions from 0 -> `[T, H]`."""
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions + POSITION_OFFSET)
        return self.LayerNorm(x)


class MPNetSelfAttention(nn.Module):
    """Fused QKV projection and the output projection `o` (`MPNetSelfAttention`'s q, k, v, o)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.o = nn.Linear(hidden_size, hidden_size)


class MPNetAttention(nn.Module):
    """Variable-length attention with the relative position bias, output projection, post-norm."""

    def __init__(self, hidden_size: int, num_heads: int, eps: float, backend: AttentionBackend):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.attn = MPNetSelfAttention(hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata, bias: RelativePositionBias) -> torch.Tensor:
        T, H = x.shape
        qkv = self.attn.qkv(x).view(T, 3, self.num_heads, self.head_dim)  # [T, 3, heads, head_dim]
        q, k, v = qkv.unbind(1)
        context = self.backend(q, k, v, attn, scale=self.scale, bias=bias).reshape(T, H)
        return self.LayerNorm(residual_linear_(x, self.attn.o, context))


class MPNetLayer(nn.Module):
    def __init__(self, config: MPNetConfig, backend: AttentionBackend):
        super().__init__()
        eps = config.layer_norm_eps
        self.attention = MPNetAttention(config.hidden_size, config.num_attention_heads, eps, backend)
        # the feed-forward half is BERT's, layer for layer and name for name
        self.intermediate = BertIntermediate(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.output = BertOutput(config.intermediate_size, config.hidden_size, eps)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata, bias: RelativePositionBias) -> torch.Tensor:
        # both sublayers overwrite their input x in place (it is not used again)
        x = self.attention(x, attn, bias)
        h = self.intermediate.act(self.intermediate.dense(x))
        return self.output.LayerNorm(residual_linear_(x, self.output.dense, h))


class MPNetEncoder(nn.Module):
    def __init__(self, config: MPNetConfig, backend: AttentionBackend):
        super().__init__()
        self.layer = nn.ModuleList(MPNetLayer(config, backend) for _ in range(config.num_hidden_layers))
        self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_attention_heads)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        bias = RelativePositionBias(self.relative_attention_bias.weight, attn.max_seqlen)  # once, for every layer
        for layer in self.layer:
            x = layer(x, attn, bias)
        return x


class MPNetModel(Backbone):
    """Packed MPNet: `forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> hidden [T, H]`
    (MPNet has no segment embeddings: token_type_ids is ignored)."""

    weight_spec = WeightSpec(
        anchor="embeddings.word_embeddings.weight",
        stacked=(
            ("attention.attn.q.", "attention.attn.qkv.", 0),
            ("attention.attn.k.", "attention.attn.qkv.", 1),
            ("attention.attn.v.", "attention.attn.qkv.", 2),
        ),
        # MPNetModel's pooler (a tanh over the first token) serves no SIE output
        ignore=("embeddings.position_ids", "pooler."),
    )

    # linear layers kept float32 under int8 quantisation (see runner.quantize_linear_int8), as BERT's
    int8_sensitive = ("attn.o", "output.dense")

    # the relative position term is a score bias: grouped SDPA with groups of at most this many positions
    attention_bias_group_tokens = GROUP_TOKENS

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def sequence_classifier(self, ctx: Any) -> nn.Module:
        """MPNetForSequenceClassification: RoBERTa's `classifier.dense` + tanh on <s>, then `classifier.out_proj`."""
        from ...heads.classifier import dense_out_proj_classifier

        return dense_out_proj_classifier(ctx)

    @classmethod
    def masked_lm_layout(cls, config: Mapping[str, Any]) -> MaskedLMLayout:
        """MPNetForMaskedLM's `lm_head` (RoBERTa's layout: dense, GELU, layer_norm, decoder, bias)."""
        return MaskedLMLayout(dense="lm_head.dense", norm="lm_head.layer_norm", activation="gelu",
                              eps=config.get("layer_norm_eps", 1e-12), decoder="lm_head.decoder.weight",
                              bias=("lm_head.bias", "lm_head.decoder.bias"))

    def __init__(self, config: MPNetConfig, backend: AttentionBackend | None = None):
        super().__init__()
        backend = backend or select_backend(torch.device("cpu"), torch.float32,
                                            bias_group_tokens=self.attention_bias_group_tokens)
        self.config = config
        self.hidden_size = config.hidden_size
        self.embeddings = MPNetEmbeddings(config)
        self.encoder = MPNetEncoder(config, backend)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.encoder(self.embeddings(input_ids, positions), attn)


FAMILY = Family("mpnet", MPNetConfig.from_hf, MPNetModel, "mean")
