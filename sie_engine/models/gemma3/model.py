"""Gemma 3 text decoders used as embedders (EmbeddingGemma) over packed input.

Read leaf to root: norm, attention, layer, model; the gated MLP is models/qwen/model.py's (GeGLU
here: the gate's activation is config.json's). Module names follow Hugging Face's
`Gemma3TextModel` except the fused projections the weight spec stacks: `self_attn.kv_proj`
(k_proj, v_proj) and `mlp.gate_up_proj` (gate_proj, up_proj).

What sets Gemma 3 apart from the LLaMA-style blocks of models/qwen/model.py:
- RMSNorm scales by `1 + weight` (weights stored as offsets from one), in float32;
- four norms per layer: before and after attention, before and after the MLP (the
  "after" norms apply to the sublayer's output, before the residual add);
- the input embeddings are multiplied by sqrt(hidden_size), rounded to the compute dtype
  first as transformers does;
- per-head RMSNorm on queries and keys; scores scaled by query_pre_attn_scalar ** -0.5,
  not head_dim ** -0.5;
- layers are "sliding_attention" (local: a window, rotary base rope_local_base_freq) or
  "full_attention" (global: rotary base rope_theta), five local to one global by default.

EmbeddingGemma sets `use_bidirectional_attention: true`: no causal mask, and a local layer's
token sees `sliding_window // 2` tokens on each side (transformers: |i - j| < window // 2 + 1).
A causal Gemma 3 sees `sliding_window - 1` tokens back on local layers.
Every tensor is `[T, ...]` with T the batch's real tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...layers.rotary import RotaryEmbedding, apply_rotary
from ...layers.weights import WeightSpec
from ..base import Backbone, Family
from ..qwen.model import FUSED_KV_AND_GATE_UP, QwenMLP

LOCAL, GLOBAL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class Gemma3TextConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    # One entry per layer: LOCAL or GLOBAL.
    layer_types: tuple[str, ...]
    hidden_activation: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    # Scores are scaled by query_pre_attn_scalar ** -0.5.
    query_pre_attn_scalar: float = 256.0
    # config.json's window (before transformers halves it for bidirectional models).
    sliding_window: int = 4096
    rope_theta: float = 1_000_000.0  # global layers
    local_rope_theta: float = 10_000.0  # local layers
    bidirectional: bool = False
    attention_bias: bool = False
    max_position_embeddings: int = 32768

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> Gemma3TextConfig:
        if config.get("model_type") != "gemma3_text":
            raise ValueError(f"model_type={config.get('model_type')!r} is not a Gemma 3 text checkpoint")
        for field in ("attn_logit_softcapping", "final_logit_softcapping"):
            if config.get(field) is not None:
                raise ValueError(f"{field}={config[field]!r} is not supported (embedders leave it null)")
        layers = config["num_hidden_layers"]
        pattern = config.get("sliding_window_pattern", 6)
        layer_types = tuple(config.get("layer_types")
                            or (LOCAL if (i + 1) % pattern else GLOBAL for i in range(layers)))
        if len(layer_types) != layers or set(layer_types) - {LOCAL, GLOBAL}:
            raise ValueError(f"layer_types={list(layer_types)!r} must name {LOCAL!r} or {GLOBAL!r} for each layer")
        rope = config.get("rope_parameters") or {}
        per_type = rope if GLOBAL in rope or LOCAL in rope else {GLOBAL: rope}
        if config.get("rope_scaling"):
            per_type = {**per_type, GLOBAL: {**(per_type.get(GLOBAL) or {}), **config["rope_scaling"]}}
        for kind, params in per_type.items():
            rope_type = (params or {}).get("rope_type") or (params or {}).get("type") or "default"
            if rope_type != "default":
                raise ValueError(f"rope_type={rope_type!r} on {kind} layers is not supported (only 'default')")
        heads = config["num_attention_heads"]
        return Gemma3TextConfig(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            intermediate_size=config["intermediate_size"],
            layer_types=layer_types,
            hidden_activation=config.get("hidden_activation") or config.get("hidden_act") or "gelu_pytorch_tanh",
            rms_norm_eps=config.get("rms_norm_eps", 1e-6),
            query_pre_attn_scalar=float(config.get("query_pre_attn_scalar", 256)),
            sliding_window=int(config.get("sliding_window") or 4096),
            rope_theta=float((per_type.get(GLOBAL) or {}).get("rope_theta") or config.get("rope_theta")
                             or 1_000_000.0),
            local_rope_theta=float((per_type.get(LOCAL) or {}).get("rope_theta")
                                   or config.get("rope_local_base_freq") or 10_000.0),
            bidirectional=bool(config.get("use_bidirectional_attention", False)),
            attention_bias=bool(config.get("attention_bias", False)),
            max_position_embeddings=config.get("max_position_embeddings", 32768),
        )

    @property
    def local_window(self) -> tuple[int, int]:
        """A local layer's inclusive (left, right) key window."""
        if self.bidirectional:
            half = self.sliding_window // 2
            return half, half
        return self.sliding_window - 1, 0

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings


class Gemma3RMSNorm(nn.Module):
    """x / rms(x) * (1 + weight), in float32, then back to x's dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)
        return (normed * (1.0 + self.weight.float())).to(x.dtype)


class Gemma3Attention(nn.Module):
    """q and fused kv projections, per-head q/k norms, rotary, (windowed, causal or not) GQA attention."""

    def __init__(self, config: Gemma3TextConfig, local: bool, backend: AttentionBackend):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                            config.head_dim)
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.kv_proj = nn.Linear(config.hidden_size, 2 * self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = Gemma3RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = Gemma3RMSNorm(self.head_dim, config.rms_norm_eps)
        self.scale = config.query_pre_attn_scalar ** -0.5
        self.causal = not config.bidirectional
        self.window = config.local_window if local else None
        self.backend = backend

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        T = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(T, self.num_heads, self.head_dim))  # [T, Hq, D]
        k, v = self.kv_proj(x).view(T, 2, self.num_kv_heads, self.head_dim).unbind(1)  # each [T, Hkv, D]
        k = self.k_norm(k)
        cos, sin = rotary
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        context = self.backend(q, k, v, attn, scale=self.scale, causal=self.causal, window=self.window)
        return self.o_proj(context.reshape(T, self.num_heads * self.head_dim))


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, config: Gemma3TextConfig, layer_type: str, backend: AttentionBackend):
        super().__init__()
        eps = config.rms_norm_eps
        self.layer_type = layer_type
        self.input_layernorm = Gemma3RMSNorm(config.hidden_size, eps)
        self.self_attn = Gemma3Attention(config, layer_type == LOCAL, backend)
        self.post_attention_layernorm = Gemma3RMSNorm(config.hidden_size, eps)
        self.pre_feedforward_layernorm = Gemma3RMSNorm(config.hidden_size, eps)
        self.mlp = QwenMLP(config.hidden_size, config.intermediate_size, config.hidden_activation)  # GeGLU
        self.post_feedforward_layernorm = Gemma3RMSNorm(config.hidden_size, eps)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rotary, attn))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3TextModel(Backbone):
    """Packed Gemma 3 text model: `forward(input_ids [T], positions [T], attn, token_type_ids=None) ->
    hidden [T, H]` (after the final norm)."""

    weight_spec = WeightSpec(anchor="embed_tokens.weight", stacked=FUSED_KV_AND_GATE_UP)

    def __init__(self, config: Gemma3TextConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.embed_scale = config.hidden_size ** 0.5
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Gemma3DecoderLayer(config, kind, backend) for kind in config.layer_types)
        self.norm = Gemma3RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = nn.ModuleDict({
            GLOBAL: RotaryEmbedding(config.head_dim, config.rope_theta),
            LOCAL: RotaryEmbedding(config.head_dim, config.local_rope_theta),
        })

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        # the scale rounded to the weights' dtype first, as transformers multiplies (a host scalar: no copy)
        x = x * torch.tensor(self.embed_scale, dtype=x.dtype).item()
        kinds = set(self.config.layer_types)
        rotary = {kind: self.rotary[kind](positions) for kind in kinds}  # once per batch per base
        for layer in self.layers:
            x = layer(x, rotary[layer.layer_type], attn)
        return self.norm(x)


FAMILY = Family("gemma3_text", Gemma3TextConfig.from_hf, Gemma3TextModel, "mean")
