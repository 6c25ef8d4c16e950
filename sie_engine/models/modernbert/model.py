"""ModernBERT encoders (ModernBERT, gte-modernbert, modernbert-embed, granite-embedding-r2)
over packed input.

Read leaf to root: embeddings, attention, MLP, layer, model. Module names follow
Hugging Face's `ModernBertModel`, whose checkpoint already fuses QKV (`attn.Wqkv`)
and the GeGLU input (`mlp.Wi`), so names map one to one.

What differs from BERT: pre-norm layers without biases, no position embeddings
but rotary ones with one base for global layers and another for local layers,
and local layers that attend only within a sliding window. Every tensor is
`[T, ...]` with T the batch's real tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, default_scale
from ...layers.blocks import activation
from ...layers.rotary import RotaryEmbedding, apply_rotary
from ...layers.weights import WeightSpec
from ..base import Backbone, Family, MaskedLMLayout

GLOBAL, LOCAL = "full_attention", "sliding_attention"


@dataclass(frozen=True)
class ModernBertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    # One entry per layer: "full_attention" (global) or "sliding_attention" (local).
    layer_types: tuple[str, ...]
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    norm_eps: float = 1e-5
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    # Total width of a local layer's window: a token sees local_attention // 2 tokens each side.
    local_attention: int = 128

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> ModernBertConfig:
        layers = config["num_hidden_layers"]
        layer_types = config.get("layer_types")
        if layer_types is None:  # checkpoints saved before transformers 5: every n-th layer is global
            every = config.get("global_attn_every_n_layers", 3)
            layer_types = [LOCAL if i % every else GLOBAL for i in range(layers)]
        unknown = set(layer_types) - {GLOBAL, LOCAL}
        if unknown or len(layer_types) != layers:
            raise ValueError(f"layer_types={layer_types!r} is not {layers} entries of {GLOBAL!r}/{LOCAL!r}")
        rope = config.get("rope_parameters") or {}
        for kind, params in rope.items():
            if isinstance(params, dict) and params.get("rope_type", "default") != "default":
                raise ValueError(f"rope_parameters[{kind!r}].rope_type={params['rope_type']!r} is not supported "
                                 "(only 'default')")
        if config.get("rope_scaling"):
            raise ValueError(f"rope_scaling={config['rope_scaling']!r} is not supported")
        global_theta = (rope.get(GLOBAL) or {}).get("rope_theta") or config.get("global_rope_theta") or 160_000.0
        local_theta = (rope.get(LOCAL) or {}).get("rope_theta") or config.get("local_rope_theta") or 10_000.0
        return ModernBertConfig(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=layers,
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            layer_types=tuple(layer_types),
            hidden_activation=config.get("hidden_activation", "gelu"),
            max_position_embeddings=config.get("max_position_embeddings", 8192),
            norm_eps=config.get("norm_eps", 1e-5),
            norm_bias=config.get("norm_bias", False),
            attention_bias=config.get("attention_bias", False),
            mlp_bias=config.get("mlp_bias", False),
            global_rope_theta=float(global_theta),
            local_rope_theta=float(local_theta),
            local_attention=config.get("local_attention", 128),
        )

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class ModernBertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, eps: float, norm_bias: bool):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=eps, bias=norm_bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`[T]` ids -> `[T, H]` (no position embeddings: positions enter through rotary)."""
        return self.norm(self.tok_embeddings(input_ids))


class ModernBertAttention(nn.Module):
    """Fused QKV, rotary, variable-length attention (windowed on local layers), output projection."""

    def __init__(self, hidden_size: int, num_heads: int, bias: bool, window: tuple[int, int] | None,
                 backend: AttentionBackend):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.Wqkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.window = window
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        T, H = x.shape
        qkv = self.Wqkv(x).view(T, 3, self.num_heads, self.head_dim)  # [T, 3, heads, head_dim]
        q, k, v = qkv.unbind(1)
        cos, sin = rotary
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        context = self.backend(q, k, v, attn, scale=self.scale, window=self.window).reshape(T, H)
        return self.Wo(context)


class ModernBertMLP(nn.Module):
    """GeGLU: Wi projects to [input | gate], Wo(act(input) * gate)."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, bias: bool):
        super().__init__()
        self.Wi = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.act = activation(act)
        self.Wo = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs, gate = self.Wi(x).chunk(2, dim=-1)  # each [T, I]
        return self.Wo(self.act(inputs) * gate)


class ModernBertEncoderLayer(nn.Module):
    """Pre-norm layer. The first layer has no attention norm: the embedding norm precedes it."""

    def __init__(self, config: ModernBertConfig, index: int, backend: AttentionBackend):
        super().__init__()
        eps, bias = config.norm_eps, config.norm_bias
        self.attention_type = config.layer_types[index]
        half = config.local_attention // 2
        # HF masks |i - j| <= local_attention // 2 on local layers: flash-attn's inclusive (left, right) window.
        window = (half, half) if self.attention_type == LOCAL else None
        self.attn_norm = nn.Identity() if index == 0 else nn.LayerNorm(config.hidden_size, eps=eps, bias=bias)
        self.attn = ModernBertAttention(config.hidden_size, config.num_attention_heads, config.attention_bias, window,
                                        backend)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=eps, bias=bias)
        self.mlp = ModernBertMLP(config.hidden_size, config.intermediate_size, config.hidden_activation,
                                 config.mlp_bias)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rotary, attn)
        return x + self.mlp(self.mlp_norm(x))


class ModernBertModel(Backbone):
    """Packed ModernBERT: `forward(input_ids [T], positions [T], attn, token_type_ids=None) -> hidden [T, H]`."""

    weight_spec = WeightSpec(anchor="embeddings.tok_embeddings.weight")

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.tok_embeddings

    @classmethod
    def masked_lm_layout(cls, config: Mapping[str, Any]) -> MaskedLMLayout:
        """ModernBertForMaskedLM's `head` (dense, `classifier_activation`, norm) and `decoder`, whose
        bias is absent under `decoder_bias: false`."""
        return MaskedLMLayout(dense="head.dense", norm="head.norm",
                              activation=config.get("classifier_activation", "gelu"),
                              eps=config.get("norm_eps", 1e-5), decoder="decoder.weight", bias=("decoder.bias",),
                              bias_required=False)

    def sequence_classifier(self, ctx: Any) -> nn.Module:
        """ModernBertForSequenceClassification (gte-reranker-modernbert): CLS or mean pooling
        (`classifier_pooling`), `head.dense` + activation + `head.norm`, then `classifier`."""
        from ...heads.classifier import DenseAct, SequenceClassifier
        from ...heads.common import layer_norm, linear, ln_tensors, optional, tensor

        device, dtype, tensors, config = ctx.device, ctx.dtype, ctx.checkpoint, ctx.hf_config
        pool = config.get("classifier_pooling", "cls")
        if pool not in ("cls", "mean"):
            raise ValueError(f"classifier_pooling {pool!r} is not supported (cls, mean)")
        norm_w, norm_b = ln_tensors(tensors, "head.norm")
        pre = DenseAct(
            linear(tensor(tensors, "head.dense.weight"), optional(tensors, "head.dense.bias"), device, dtype),
            activation(config.get("classifier_activation", "gelu")),
            layer_norm(norm_w, norm_b, config.get("norm_eps", 1e-5), device, dtype),
        )
        classifier = linear(tensor(tensors, "classifier.weight"), optional(tensors, "classifier.bias"), device, dtype)
        return SequenceClassifier(pool, pre, classifier)

    def __init__(self, config: ModernBertConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.embeddings = ModernBertEmbeddings(config.vocab_size, config.hidden_size, config.norm_eps, config.norm_bias)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i, backend) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.rotary = nn.ModuleDict({
            GLOBAL: RotaryEmbedding(config.head_dim, config.global_rope_theta),
            LOCAL: RotaryEmbedding(config.head_dim, config.local_rope_theta),
        })

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embeddings(input_ids)
        # cos/sin once per batch and layer type, shared by all layers of that type
        tables = {kind: self.rotary[kind](positions) for kind in set(self.config.layer_types)}
        for layer in self.layers:
            x = layer(x, tables[layer.attention_type], attn)
        return self.final_norm(x)


FAMILY = Family("modernbert", ModernBertConfig.from_hf, ModernBertModel, "mean")
