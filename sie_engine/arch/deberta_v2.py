"""DeBERTa-v2 / v3 encoders over packed input (the backbone of most GLiNER models).

Read leaf to root: relative positions, embeddings, disentangled attention, layer,
encoder, model. Names follow Hugging Face's `DebertaV2Model`, except the fused QKV
projection, which the weight spec stacks from `query_proj/key_proj/value_proj`.

DeBERTa's attention adds, to the content score q_i.k_j, a content-to-position term
q_i.Pk[r(i,j)] and a position-to-content term k_j.Pq[r(j,i)] over bucketed relative
positions r. Those terms depend on each sequence's own q and k, so no varlen kernel
takes them: attention runs on groups of similar-length sequences padded to their
longest member (the grouped-SDPA plan, with a smaller group size because the bias is
`[n, heads, L, L]`), the two terms becoming SDPA's additive mask. Everything outside
attention stays packed `[T, ...]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import AttentionMetadata, GroupedSDPAAttention, SeqGroup
from .layers import activation
from .weights import WeightSpec

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
    def from_hf(config: Mapping[str, Any]) -> "DebertaV2Config":
        if config.get("conv_kernel_size", 0) > 0:
            raise ValueError(f"conv_kernel_size={config['conv_kernel_size']} (DeBERTa-v2 convolution layer) is not supported")
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
    max_position = config.max_relative_positions if config.max_relative_positions >= 1 else config.max_position_embeddings
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

    def forward(self, x: torch.Tensor, plan: "AttentionPlan", rel_embeddings: torch.Tensor | None) -> torch.Tensor:
        """`[T, H]` -> context `[T, heads * d]`."""
        T = x.shape[0]
        q, k, v = self.qkv(x).view(T, 3, self.num_heads, self.head_dim).unbind(1)  # [T, heads, d] each
        pos_key, pos_query = self.position_projections(rel_embeddings) if self.pos_att_type else (None, None)
        out = torch.empty_like(q)
        for group in plan.groups:
            rows = group.rows
            n, L = group.n, group.length
            # [n * L, heads, d] -> [n, heads, L, d]
            qg, kg, vg = (t.index_select(0, rows).view(n, L, self.num_heads, self.head_dim).transpose(1, 2)
                          for t in (q, k, v))
            bias = plan.key_mask(group, qg.dtype)  # [n, 1, 1, L] additive, or None
            span = self.config.relative_span
            if pos_key is not None:  # content -> position: q_i . Pk[r(i, j)]
                index = plan.c2p_index(L, span)
                c2p = torch.matmul(qg, pos_key.transpose(-1, -2))  # [n, heads, L, 2S]
                c2p = torch.gather(c2p, -1, index.expand(n, self.num_heads, L, L)) * self.scale
                bias = c2p if bias is None else bias + c2p
            if pos_query is not None:  # position -> content: k_j . Pq[r(j, i)], transposed
                index = plan.p2c_index(L, span)
                p2c = torch.matmul(kg, pos_query.transpose(-1, -2))  # [n, heads, L(key), 2S]
                p2c = torch.gather(p2c, -1, index.expand(n, self.num_heads, L, L)).transpose(-1, -2) * self.scale
                bias = p2c if bias is None else bias + p2c
            context = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=bias, scale=self.scale)
            context = context.transpose(1, 2).reshape(n * L, self.num_heads, self.head_dim)
            if group.valid is not None:
                context = context.index_select(0, group.valid)
            out.index_copy_(0, group.token_rows, context)
        return out.view(T, self.num_heads * self.head_dim)


class AttentionPlan:
    """The batch's groups (built once per forward) and per-length position indices shared by all layers."""

    def __init__(self, attn: AttentionMetadata, config: DebertaV2Config, device: torch.device):
        self.config = config
        self.device = device
        self.groups: list[SeqGroup] = GroupedSDPAAttention(max_group_tokens=GROUP_TOKENS).prepare(attn.seq_lens, device).groups
        self._cache: dict = {}

    def key_mask(self, group: SeqGroup, dtype: torch.dtype) -> torch.Tensor | None:
        if group.valid is None:
            return None
        key = ("mask", id(group), dtype)
        if key not in self._cache:
            keep = group.mask(False, None)  # [n, 1, 1, L] bool
            self._cache[key] = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(
                ~keep, torch.finfo(dtype).min)
        return self._cache[key]

    def c2p_index(self, length: int, span: int) -> torch.Tensor:
        key = ("c2p", length)
        if key not in self._cache:
            relative = relative_positions(length, self.config, self.device)
            self._cache[key] = torch.clamp(relative + span, 0, 2 * span - 1)
        return self._cache[key]

    def p2c_index(self, length: int, span: int) -> torch.Tensor:
        key = ("p2c", length)
        if key not in self._cache:
            relative = relative_positions(length, self.config, self.device)
            self._cache[key] = torch.clamp(-relative + span, 0, 2 * span - 1)
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
        self.rel_embeddings = nn.Embedding(2 * config.relative_span, config.hidden_size) if config.relative_attention else None
        self.LayerNorm = (nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
                          if "layer_norm" in config.norm_rel_ebd else None)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        plan = AttentionPlan(attn, self.config, x.device)
        rel = None
        if self.rel_embeddings is not None:
            rel = self.rel_embeddings.weight
            if self.LayerNorm is not None:
                rel = self.LayerNorm(rel)
        for layer in self.layer:
            x = layer(x, plan, rel)
        return x


class DebertaV2Model(nn.Module):
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

    def __init__(self, config: DebertaV2Config, backend=None):
        super().__init__()
        # `backend` is accepted for the common signature; DeBERTa's attention plans its own groups.
        self.config = config
        self.hidden_size = config.hidden_size
        self.embeddings = DebertaV2Embeddings(config)
        self.encoder = DebertaV2Encoder(config)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.encoder(self.embeddings(input_ids, positions, token_type_ids), attn)
