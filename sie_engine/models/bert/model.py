"""BERT-family encoders (BERT, RoBERTa, XLM-RoBERTa, CamemBERT) over packed input.

Read leaf to root: embeddings, attention, MLP, layer, encoder, model. Module names
follow Hugging Face's so checkpoint names map one to one, except the fused QKV
projection, which the weight spec stacks from `self.query/key/value`.

Every tensor is `[T, ...]` with T the batch's total real tokens: there is no
padding anywhere in this file; attention is variable-length through the backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, default_scale
from ...layers.blocks import activation, residual_linear_
from ...layers.lora import LoRABatch, scoped
from ...layers.weights import WeightSpec
from ..base import Backbone, Family, MaskedLMLayout

# model_types of RoBERTa-style checkpoints: positions from padding_idx + 1, RoBERTa's head names
ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # 0 or 1 for models without sentence-pair segments
    layer_norm_eps: float = 1e-12
    # RoBERTa-style models number positions from padding_idx + 1; BERT from 0.
    position_offset: int = 0

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> BertConfig:
        model_type = config.get("model_type", "bert")
        roberta_like = model_type in ROBERTA_TYPES
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"position_embedding_type={config['position_embedding_type']!r} is not supported "
                             "(only 'absolute')")
        return BertConfig(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            hidden_act=config.get("hidden_act", "gelu"),
            max_position_embeddings=config.get("max_position_embeddings", 512),
            type_vocab_size=config.get("type_vocab_size", 2),
            layer_norm_eps=config.get("layer_norm_eps", 1e-12),
            position_offset=(config.get("pad_token_id", 1) + 1) if roberta_like else 0,
        )

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings - self.position_offset


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, max_positions: int, type_vocab_size: int,
                 eps: float, position_offset: int):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.position_embeddings = nn.Embedding(max_positions, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size) if type_vocab_size > 0 else None
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        self.position_offset = position_offset

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                token_type_ids: torch.Tensor | None) -> torch.Tensor:
        """`[T]` ids, `[T]` positions from 0, optional `[T]` segments -> `[T, H]`."""
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions + self.position_offset)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]  # every token is segment 0: no gather
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class BertSelfOutput(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)


class BertAttention(nn.Module):
    """Fused QKV projection, variable-length attention, output projection, post-norm."""

    def __init__(self, hidden_size: int, num_heads: int, eps: float, backend: AttentionBackend):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.output = BertSelfOutput(hidden_size, eps)
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata, lora: LoRABatch | None = None) -> torch.Tensor:
        T, H = x.shape
        qkv = self.qkv(x)  # [T, 3H]
        if lora is not None:
            lora.add_(qkv, x, "attention.qkv")
        q, k, v = qkv.view(T, 3, self.num_heads, self.head_dim).unbind(1)  # [T, heads, head_dim] each
        context = self.backend(q, k, v, attn, scale=self.scale).reshape(T, H)
        out = residual_linear_(x, self.output.dense, context)
        if lora is not None:
            lora.add_(out, context, "attention.output.dense")
        return self.output.LayerNorm(out)


class BertIntermediate(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, act: str):
        super().__init__()
        self.dense = nn.Linear(hidden_size, intermediate_size)
        self.act = activation(act, inplace=True)


class BertOutput(nn.Module):
    def __init__(self, intermediate_size: int, hidden_size: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(intermediate_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, backend: AttentionBackend):
        super().__init__()
        eps = config.layer_norm_eps
        self.attention = BertAttention(config.hidden_size, config.num_attention_heads, eps, backend)
        self.intermediate = BertIntermediate(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.output = BertOutput(config.intermediate_size, config.hidden_size, eps)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata, lora: LoRABatch | None = None) -> torch.Tensor:
        # both sublayers overwrite their input x in place (it is not used again)
        x = self.attention(x, attn, lora)
        h = self.intermediate.dense(x)
        if lora is not None:  # the delta goes in before the activation, as peft's LoRA linear adds it
            lora.add_(h, x, "intermediate.dense")
        h = self.intermediate.act(h)
        out = residual_linear_(x, self.output.dense, h)
        if lora is not None:
            lora.add_(out, h, "output.dense")
        return self.output.LayerNorm(out)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig, backend: AttentionBackend):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config, backend) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, attn: AttentionMetadata, lora: LoRABatch | None = None) -> torch.Tensor:
        for i, layer in enumerate(self.layer):
            x = layer(x, attn, scoped(lora, f"encoder.layer.{i}."))
        return x


class BertModel(Backbone):
    """Packed BERT: `forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> hidden [T, H]`."""

    weight_spec = WeightSpec(
        anchor="embeddings.word_embeddings.weight",
        renames=((".gamma", ".weight"), (".beta", ".bias")),
        stacked=(
            ("attention.self.query", "attention.qkv", 0),
            ("attention.self.key", "attention.qkv", 1),
            ("attention.self.value", "attention.qkv", 2),
        ),
        ignore=("embeddings.position_ids", "embeddings.token_type_ids"),
    )

    # linear layers kept float32 under int8 quantisation (see runner.quantize_linear_int8)
    int8_sensitive = ("output.dense",)
    # every linear layer of a layer takes a LoRA delta (peft's query/key/value/dense targets)
    lora_targets = ("attention.qkv", "attention.output.dense", "intermediate.dense", "output.dense")

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def sequence_classifier(self, ctx: Any) -> nn.Module:
        """BertForSequenceClassification's pooler + classifier, or RoBERTa's `classifier.dense` +
        `classifier.out_proj` (XLM-R's; bge-reranker)."""
        from ...heads.classifier import dense_out_proj_classifier, pooler_classifier

        if ctx.hf_config.get("model_type", "bert") in ROBERTA_TYPES:
            return dense_out_proj_classifier(ctx)
        return pooler_classifier(ctx)

    @classmethod
    def masked_lm_layout(cls, config: Mapping[str, Any]) -> MaskedLMLayout:
        """BertForMaskedLM's `cls.predictions` (its `hidden_act`), or RoBERTa's `lm_head` (GELU
        whatever `hidden_act` says, as RobertaLMHead runs)."""
        eps = config.get("layer_norm_eps", 1e-12)
        if config.get("model_type", "bert") in ROBERTA_TYPES:
            return MaskedLMLayout(dense="lm_head.dense", norm="lm_head.layer_norm", activation="gelu", eps=eps,
                                  decoder="lm_head.decoder.weight", bias=("lm_head.bias", "lm_head.decoder.bias"))
        return MaskedLMLayout(dense="cls.predictions.transform.dense", norm="cls.predictions.transform.LayerNorm",
                              activation=config.get("hidden_act", "gelu"), eps=eps,
                              decoder="cls.predictions.decoder.weight",
                              bias=("cls.predictions.bias", "cls.predictions.decoder.bias"))

    def __init__(self, config: BertConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.embeddings = BertEmbeddings(
            config.vocab_size, config.hidden_size, config.max_position_embeddings, config.type_vocab_size,
            config.layer_norm_eps, config.position_offset,
        )
        self.encoder = BertEncoder(config, backend)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None, lora: LoRABatch | None = None) -> torch.Tensor:
        """`lora`: each sequence's LoRA adapter over its rows (None: the base model alone)."""
        x = self.embeddings(input_ids, positions, token_type_ids)
        return self.encoder(x, attn, lora)


FAMILY = Family("bert", BertConfig.from_hf, BertModel, "mean")
