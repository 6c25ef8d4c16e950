"""DeBERTa-v2 / v3 encoders over packed input (the backbone of most GLiNER models).

Read leaf to root: relative positions, embeddings, disentangled attention, layer,
encoder, model. Names follow Hugging Face's `DebertaV2Model`, except the fused QKV
projection, which the weight spec stacks from `query_proj/key_proj/value_proj`.

DeBERTa's attention adds, to the content score q_i.k_j, a content-to-position term
q_i.Pk[r(i,j)] and a position-to-content term k_j.Pq[r(j,i)] over bucketed relative
positions r. Those terms depend on each sequence's own q and k, so no varlen kernel
takes them: they are the shared attention backend's score bias (grouped SDPA, groups of
similar-length sequences padded to their longest member, at most GROUP_TOKENS padded
positions a group because the bias is `[n, heads, L, L]`). Everything outside attention
stays packed `[T, ...]`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, SeqGroup, select_backend
from ...layers.blocks import activation
from ...layers.weights import WeightSpec
from ..base import Backbone, Family

# Padded positions per attention group: the disentangled bias holds heads x L of them each.
GROUP_TOKENS = 8192


@dataclass(frozen=True)
class DebertaV2Config:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-7
    embedding_size: int | None = None  # None: hidden_size (else projected by embed_proj)
    position_biased_input: bool = True  # absolute position embeddings added to the input (v3: no)
    relative_attention: bool = False
    max_relative_positions: int = -1  # < 1: max_position_embeddings
    position_buckets: int = -1  # > 0: log-bucketed relative positions (v3: 256)
    pos_att_type: tuple[str, ...] = ()  # subset of ("c2p", "p2c")
    share_att_key: bool = False  # position terms through the content q/k projections (v3: yes)
    norm_rel_ebd: tuple[str, ...] = ("none",)  # "layer_norm": LayerNorm on the relative embeddings
    attention_head_size: int | None = None

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> DebertaV2Config:
        if config.get("conv_kernel_size", 0) > 0:
            raise ValueError(f"conv_kernel_size={config['conv_kernel_size']} (DeBERTa-v2 convolution layer) "
                             "is not supported")
        pos_att_type = config.get("pos_att_type") or ()
        if isinstance(pos_att_type, str):  # older configs: "p2c|c2p"
            pos_att_type = [x.strip() for x in pos_att_type.lower().split("|")]
        unknown = set(pos_att_type) - {"c2p", "p2c"}
        if unknown:
            raise ValueError(f"pos_att_type {sorted(unknown)} is not supported (only c2p, p2c)")
        norm_rel = tuple(x.strip() for x in str(config.get("norm_rel_ebd", "none")).lower().split("|"))
        return DebertaV2Config(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            hidden_act=config.get("hidden_act", "gelu"),
            max_position_embeddings=config.get("max_position_embeddings", 512),
            type_vocab_size=config.get("type_vocab_size", 0),
            layer_norm_eps=config.get("layer_norm_eps", 1e-7),
            embedding_size=config.get("embedding_size"),
            position_biased_input=config.get("position_biased_input", True),
            relative_attention=config.get("relative_attention", False),
            max_relative_positions=config.get("max_relative_positions", -1),
            position_buckets=config.get("position_buckets", -1),
            pos_att_type=tuple(pos_att_type),
            share_att_key=config.get("share_att_key", False),
            norm_rel_ebd=norm_rel,
            attention_head_size=config.get("attention_head_size"),
        )

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.attention_head_size or self.hidden_size // self.num_attention_heads

    @property
    def relative_span(self) -> int:
        """Half the number of relative embeddings (`att_span` in Hugging Face's code)."""
        if self.position_buckets > 0:
            return self.position_buckets
        return self.max_relative_positions if self.max_relative_positions >= 1 else self.max_position_embeddings


def log_bucket_position(relative: torch.Tensor, bucket_size: int, max_position: int) -> torch.Tensor:
    """DeBERTa's `make_log_bucket_position`: exact within +-bucket_size/2, logarithmic beyond."""
    sign = torch.sign(relative)
    mid = bucket_size // 2
    abs_pos = torch.where((relative < mid) & (relative > -mid), torch.tensor(mid - 1).type_as(relative),
                          torch.abs(relative))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative.type_as(log_pos), log_pos * sign).long()


def relative_positions(length: int, config: DebertaV2Config, device: torch.device) -> torch.Tensor:
    """`[L, L]` (query i, key j) -> relative position of i to j, bucketed as the config says."""
    ids = torch.arange(length, device=device)
    relative = ids[:, None] - ids[None, :]
    max_position = (config.max_relative_positions if config.max_relative_positions >= 1
                    else config.max_position_embeddings)
    if config.position_buckets > 0 and max_position > 0:
        relative = log_bucket_position(relative, config.position_buckets, max_position)
    return relative


class DebertaV2Embeddings(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        size = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, size)
        self.position_embeddings = (
            nn.Embedding(config.max_position_embeddings, size) if config.position_biased_input else None
        )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, size) if config.type_vocab_size > 0 else None
        self.embed_proj = nn.Linear(size, config.hidden_size, bias=False) if size != config.hidden_size else None
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """`[T]` ids, `[T]` positions, optional `[T]` segments -> `[T, H]`."""
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(positions)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        return self.LayerNorm(x)


class DisentangledSelfAttention(nn.Module):
    """Fused QKV; content, content-to-position and position-to-content scores."""

    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        inner = self.num_heads * self.head_dim
        self.qkv = nn.Linear(config.hidden_size, 3 * inner)
        self.pos_att_type = config.pos_att_type if config.relative_attention else ()
        if self.pos_att_type and not config.share_att_key:
            if "c2p" in self.pos_att_type:
                self.pos_key_proj = nn.Linear(config.hidden_size, inner)
            if "p2c" in self.pos_att_type:
                self.pos_query_proj = nn.Linear(config.hidden_size, inner)
        # Hugging Face divides each of the (1 + terms) scores by sqrt(head_dim * (1 + terms))
        self.scale = 1.0 / math.sqrt(self.head_dim * (1 + len(self.pos_att_type)))

    def position_projections(self, rel_embeddings: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """`[2S, H]` relative embeddings -> position keys and queries `[heads, 2S, d]` (None where unused)."""
        inner = self.num_heads * self.head_dim

        def heads(x):
            return x.view(x.shape[0], self.num_heads, self.head_dim).transpose(0, 1)

        pos_key = pos_query = None
        if self.config.share_att_key:
            w, b = self.qkv.weight, self.qkv.bias
            if "c2p" in self.pos_att_type:
                pos_key = heads(F.linear(rel_embeddings, w[inner:2 * inner], b[inner:2 * inner]))
            if "p2c" in self.pos_att_type:
                pos_query = heads(F.linear(rel_embeddings, w[:inner], b[:inner]))
        else:
            if "c2p" in self.pos_att_type:
                pos_key = heads(self.pos_key_proj(rel_embeddings))
            if "p2c" in self.pos_att_type:
                pos_query = heads(self.pos_query_proj(rel_embeddings))
        return pos_key, pos_query

    def forward(self, x: torch.Tensor, plan: RelativePositions, rel_embeddings: torch.Tensor | None) -> torch.Tensor:
        """`[T, H]` -> context `[T, heads * d]`."""
        T = x.shape[0]
        q, k, v = self.qkv(x).view(T, 3, self.num_heads, self.head_dim).unbind(1)  # [T, heads, d] each
        pos_key, pos_query = self.position_projections(rel_embeddings) if self.pos_att_type else (None, None)
        bias = None
        if pos_key is not None or pos_query is not None:
            def bias(group: SeqGroup, qg: torch.Tensor, kg: torch.Tensor) -> torch.Tensor:
                return self.relative_scores(group, qg, kg, pos_key, pos_query, plan)
        out = plan.backend(q, k, v, plan.attn, scale=self.scale, bias=bias)
        return out.view(T, self.num_heads * self.head_dim)

    def relative_scores(self, group: SeqGroup, qg: torch.Tensor, kg: torch.Tensor, pos_key: torch.Tensor | None,
                        pos_query: torch.Tensor | None, plan: RelativePositions) -> torch.Tensor:
        """The disentangled terms of one group, `[n, heads, L, L]`, from its `[n, heads, L, d]` q and k."""
        n, L = group.n, group.length
        span = self.config.relative_span
        scores = None
        # Only the relative positions a group of length L reaches (about 2L of the 2S) are projected:
        # for short sequences that is a fraction of the matmul and of its [n, heads, L, 2S] result.
        if pos_key is not None:  # content -> position: q_i . Pk[r(i, j)]
            index, lo, hi = plan.c2p_index(L, span)
            c2p = torch.matmul(qg, pos_key[:, lo:hi].transpose(-1, -2))  # [n, heads, L, hi - lo]
            scores = torch.gather(c2p, -1, index.expand(n, self.num_heads, L, L)) * self.scale
        if pos_query is not None:  # position -> content: k_j . Pq[r(j, i)], transposed
            index, lo, hi = plan.p2c_index(L, span)
            p2c = torch.matmul(kg, pos_query[:, lo:hi].transpose(-1, -2))  # [n, heads, L(key), hi - lo]
            p2c = torch.gather(p2c, -1, index.expand(n, self.num_heads, L, L)).transpose(-1, -2)
            scores = p2c * self.scale if scores is None else scores + p2c * self.scale
        return scores


class RelativePositions:
    """One forward's attention inputs: the backend, the batch's metadata (grouped once, by
    `prepare`) and the per-length relative position indices all layers share."""

    def __init__(self, backend: AttentionBackend, attn: AttentionMetadata, config: DebertaV2Config,
                 device: torch.device):
        self.backend = backend
        self.attn = attn
        self.config = config
        self.device = device
        self._cache: dict = {}

    def c2p_index(self, length: int, span: int) -> tuple[torch.Tensor, int, int]:
        """`[L, L]` rows of the relative embeddings each (i, j) reads, counted from `lo`, and the
        window [lo, hi) of rows they cover."""
        return self._window(("c2p", length), length, span, 1)

    def p2c_index(self, length: int, span: int) -> tuple[torch.Tensor, int, int]:
        return self._window(("p2c", length), length, span, -1)

    def _window(self, key: tuple, length: int, span: int, sign: int) -> tuple[torch.Tensor, int, int]:
        if key not in self._cache:
            relative = relative_positions(length, self.config, self.device)
            index = torch.clamp(sign * relative + span, 0, 2 * span - 1)
            lo, hi = int(index.min()), int(index.max()) + 1
            self._cache[key] = (index - lo, lo, hi)
        return self._cache[key]


class DebertaV2SelfOutput(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.dense = nn.Linear(config.num_attention_heads * config.head_dim, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class DebertaV2Attention(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.self = DisentangledSelfAttention(config)
        self.output = DebertaV2SelfOutput(config)

    def forward(self, x, plan, rel_embeddings):
        return self.output.LayerNorm(self.output.dense(self.self(x, plan, rel_embeddings)) + x)


class DebertaV2Intermediate(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)


class DebertaV2Output(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class DebertaV2Layer(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.attention = DebertaV2Attention(config)
        self.intermediate = DebertaV2Intermediate(config)
        self.output = DebertaV2Output(config)

    def forward(self, x, plan, rel_embeddings):
        x = self.attention(x, plan, rel_embeddings)
        h = self.intermediate.act(self.intermediate.dense(x))
        return self.output.LayerNorm(self.output.dense(h) + x)


class DebertaV2Encoder(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList(DebertaV2Layer(config) for _ in range(config.num_hidden_layers))
        self.rel_embeddings = (nn.Embedding(2 * config.relative_span, config.hidden_size)
                               if config.relative_attention else None)
        self.LayerNorm = (nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
                          if "layer_norm" in config.norm_rel_ebd else None)

    def forward(self, x: torch.Tensor, backend: AttentionBackend, attn: AttentionMetadata) -> torch.Tensor:
        plan = RelativePositions(backend, attn, self.config, x.device)
        rel = None
        if self.rel_embeddings is not None:
            rel = self.rel_embeddings.weight
            if self.LayerNorm is not None:
                rel = self.LayerNorm(rel)
        for layer in self.layer:
            x = layer(x, plan, rel)
        return x


class DebertaV2Model(Backbone):
    """Packed DeBERTa-v2/v3: `forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> hidden [T, H]`."""

    weight_spec = WeightSpec(
        anchor="embeddings.word_embeddings.weight",
        stacked=(
            ("attention.self.query_proj", "attention.self.qkv", 0),
            ("attention.self.key_proj", "attention.self.qkv", 1),
            ("attention.self.value_proj", "attention.self.qkv", 2),
        ),
        ignore=("embeddings.position_ids",),
    )

    # the disentangled terms are a score bias: grouped SDPA with groups of at most this many positions
    attention_bias_group_tokens = GROUP_TOKENS

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def sequence_classifier(self, ctx: Any) -> nn.Module:
        """DebertaV2ForSequenceClassification (NLI cross-encoders): ContextPooler (`pooler.dense` +
        `pooler_hidden_act` on [CLS]), then `classifier`."""
        from ...heads.classifier import DenseAct, SequenceClassifier
        from ...heads.common import linear, optional, tensor

        device, dtype, tensors, config = ctx.device, ctx.dtype, ctx.checkpoint, ctx.hf_config
        pre = DenseAct(linear(tensor(tensors, "pooler.dense.weight"), tensor(tensors, "pooler.dense.bias"), device,
                              dtype), activation(config.get("pooler_hidden_act", "gelu")))
        classifier = linear(tensor(tensors, "classifier.weight"), optional(tensors, "classifier.bias"), device, dtype)
        return SequenceClassifier("cls", pre, classifier)

    def __init__(self, config: DebertaV2Config, backend: AttentionBackend | None = None):
        super().__init__()
        self.backend = backend or select_backend(torch.device("cpu"), torch.float32,
                                                 bias_group_tokens=self.attention_bias_group_tokens)
        self.config = config
        self.hidden_size = config.hidden_size
        self.embeddings = DebertaV2Embeddings(config)
        self.encoder = DebertaV2Encoder(config)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.encoder(self.embeddings(input_ids, positions, token_type_ids), self.backend, attn)


# Mean pooling for a card-less directory without sentence-transformers' files (what such a
# directory has always got; its usual use is a cross-encoder or NLI model, whose heads pool their own way).
FAMILY = Family("deberta-v2", DebertaV2Config.from_hf, DebertaV2Model, "mean")
