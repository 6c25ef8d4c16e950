"""LLaMA-style decoders used as embedders over packed input: Qwen2 / Qwen3 (Qwen3-Embedding,
gte-Qwen2), Mistral (e5-mistral-7b-instruct, SFR-Embedding, Linq-Embed-Mistral, GritLM) and Llama
(llama-embed-nemotron-8b; Llama 3.1's llama3-scaled rotary, `QwenConfig.from_llama`).

Read leaf to root: attention, MLP, layer, model. Module names follow Hugging
Face's `Qwen2Model` / `Qwen3Model` / `MistralModel` / `LlamaModel` (the same names in all four)
except two fused projections, stacked by the weight spec: `self_attn.kv_proj` (k_proj, v_proj:
equal shards, so they fuse; q_proj is larger under grouped-query attention and stays
separate) and `mlp.gate_up_proj`.

They differ only in Qwen2's biases on q/k/v (Llama's on all four where `attention_bias`), Qwen3's
per-head RMSNorm on queries and keys, Llama 3.1's rotary scaling, and Mistral's sliding window (every
token attends to at most `sliding_window` tokens back): SIE runs no sliding window, so a Mistral
checkpoint's window caps the sequence length, within which full causal attention is the same
computation. Attention is causal unless config.json says `is_causal: false` (transformers' switch for
bidirectional decoders) or its model_type is NVIDIA's bidirectional `llama_bidirec`.
Grouped-query attention hands the backend fewer K/V heads; no backend repeats them.
Every tensor is `[T, ...]` with T the batch's real tokens, except in the cached decode path
(`decode_embedded`, a generating model's: LightOnOCR's decoder), whose rows are the running
decode batch's, `[rows, Q, ...]`, attending over generation/cache.py's KV cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, default_scale
from ...generation.cache import DecodeCache
from ...layers.blocks import RMSNorm, activation
from ...layers.rotary import Llama3Scaling, RotaryEmbedding, apply_rotary
from ...layers.weights import WeightSpec
from ..base import Backbone, Family


@dataclass(frozen=True)
class QwenConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    head_dim: int
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000.0
    # Qwen2: biases on q/k/v, none on o. Qwen3: `attention_bias` for all four (False in practice).
    qkv_bias: bool = False
    o_bias: bool = False
    # Qwen3's RMSNorm over each head of q and k, before rotary.
    qk_norm: bool = False
    causal: bool = True
    # Mistral: each token sees at most this many tokens back; SIE serves sequences up to it only.
    sliding_window: int | None = None
    # Llama 3.1's rope_type llama3 (None: plain rotary)
    rope_scaling: Llama3Scaling | None = None

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> QwenConfig:
        model_type = config.get("model_type", "qwen2")
        if model_type in LLAMA_TYPES:
            return QwenConfig.from_llama(config)
        if model_type not in ("qwen2", "qwen3", "mistral"):
            raise ValueError(f"model_type={model_type!r} is not a Qwen2/Qwen3/Mistral/Llama checkpoint")
        qwen3, mistral = model_type == "qwen3", model_type == "mistral"
        rope, scaling = _rope(config)
        layer_types = config.get("layer_types") or []
        if config.get("use_sliding_window") and any(t == "sliding_attention" for t in layer_types):
            raise ValueError("use_sliding_window=true is not supported for Qwen embedders "
                             "(no released embedder uses it)")
        attention_bias = config.get("attention_bias", False)
        return QwenConfig(
            **decoder_shape(config, positions=32768, rope=rope, scaling=scaling),
            qkv_bias=attention_bias if qwen3 else not mistral,
            o_bias=attention_bias if qwen3 else False,
            qk_norm=qwen3,
            causal=bool(config.get("is_causal", True)),
            # Qwen2 configs carry a sliding_window that only use_sliding_window turns on (refused above)
            sliding_window=config.get("sliding_window") if mistral else None,
        )

    @staticmethod
    def from_llama(config: Mapping[str, Any]) -> QwenConfig:
        """transformers' LlamaConfig (as a dict; also NVIDIA's bidirectional `llama_bidirec`, which
        attends both ways unless `is_causal` says otherwise) -> the same blocks: biases on all four
        projections where `attention_bias`, no MLP bias (refused), plain or llama3-scaled rotary."""
        if config.get("mlp_bias"):
            raise ValueError("mlp_bias=true is not supported (Llama checkpoints have none)")
        rope, scaling = _rope(config)
        bias = bool(config.get("attention_bias", False))
        bidirectional = config.get("model_type") == "llama_bidirec"
        return QwenConfig(**decoder_shape(config, positions=2048, rope=rope, scaling=scaling), qkv_bias=bias,
                          o_bias=bias, causal=bool(config.get("is_causal", not bidirectional)))

    @property
    def max_seq_len(self) -> int:
        if self.sliding_window is not None:
            return min(self.max_position_embeddings, self.sliding_window)
        return self.max_position_embeddings


LLAMA_TYPES = ("llama", "llama_bidirec")


def decoder_shape(config: Mapping[str, Any], *, positions: int, hidden_act: str = "silu", rope_theta: float = 10_000.0,
                  rope: Mapping[str, Any] | None = None, scaling: Llama3Scaling | None = None) -> dict[str, Any]:
    """The QwenConfig fields every LLaMA-style config (a config.json, a VLM's text_config) gives alike:
    sizes, activation, norm epsilon, rotary; `positions`, `hidden_act`, `rope_theta`: the config class's
    defaults where the config leaves them out; `rope`: its rotary parameters (`_rope`)."""
    heads = config["num_attention_heads"]
    return dict(
        vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
        num_hidden_layers=config["num_hidden_layers"], num_attention_heads=heads,
        num_key_value_heads=config.get("num_key_value_heads") or heads,
        intermediate_size=config["intermediate_size"],
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        hidden_act=config.get("hidden_act") or hidden_act,
        max_position_embeddings=config.get("max_position_embeddings", positions),
        rms_norm_eps=config.get("rms_norm_eps", 1e-6),
        rope_theta=float((rope or {}).get("rope_theta") or config.get("rope_theta") or rope_theta),
        rope_scaling=scaling,
    )


def _rope(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], Llama3Scaling | None]:
    """A config's rotary parameters (transformers 5's `rope_parameters`, or 4.x's `rope_theta` and
    `rope_scaling`) and its llama3 scaling, if any; another rope_type is refused."""
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type == "default":
        return rope, None
    if rope_type != "llama3":
        raise ValueError(f"rope_type={rope_type!r} is not supported (only 'default' and 'llama3')")
    values = {**scaling, **rope}
    return rope, Llama3Scaling(float(values["factor"]), float(values["low_freq_factor"]),
                               float(values["high_freq_factor"]), int(values["original_max_position_embeddings"]))


class QwenAttention(nn.Module):
    """q and fused kv projections, optional per-head q/k norm, rotary, (causal) GQA attention, o projection."""

    def __init__(self, config: QwenConfig, backend: AttentionBackend):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                            config.head_dim)
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=config.qkv_bias)
        self.kv_proj = nn.Linear(config.hidden_size, 2 * self.num_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=config.o_bias)
        self.q_norm: RMSNorm | None  # both or neither (Qwen3's per-head norms)
        self.k_norm: RMSNorm | None
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.causal = config.causal
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def project(self, x: torch.Tensor,
                rotary: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`[T, H]` -> rotated q `[T, Hq, D]`, rotated k and v `[T, Hkv, D]`."""
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.num_heads, self.head_dim)  # [T, Hq, D]
        k, v = self.kv_proj(x).view(T, 2, self.num_kv_heads, self.head_dim).unbind(1)  # each [T, Hkv, D]
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rotary
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        q, k, v = self.project(x, rotary)
        context = self.backend(q, k, v, attn, scale=self.scale, causal=self.causal)  # [T, Hq, D]
        return self.o_proj(context.reshape(x.shape[0], self.num_heads * self.head_dim))

    def decode(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], index: int,
               cache: DecodeCache) -> torch.Tensor:
        """A decode step of rows `[rows, Q, H]` (rotary tables over the rows' tokens flattened,
        `[rows * Q, D]`): causal attention over each row's cached history (generation/cache.py,
        which stores this step's keys and values) -> `[rows, Q, H]`."""
        rows, q_len = x.shape[0], x.shape[1]
        q, k, v = self.project(x.reshape(rows * q_len, -1), rotary)

        def heads_first(t: torch.Tensor) -> torch.Tensor:  # [rows * Q, h, D] -> [rows, h, Q, D]
            return t.view(rows, q_len, t.shape[1], self.head_dim).transpose(1, 2)

        context = cache.attend_self(index, heads_first(q), heads_first(k), heads_first(v), scale=self.scale)
        return self.o_proj(context.transpose(1, 2).reshape(rows, q_len, self.num_heads * self.head_dim))


class QwenMLP(nn.Module):
    """SwiGLU: gate_up_proj projects to [gate | up], down_proj(act(gate) * up) (biases: Qwen2.5-VL's
    vision blocks)."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, bias: bool = False):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # each [T, I]
        return self.down_proj(self.act(gate) * up)


class QwenDecoderLayer(nn.Module):
    def __init__(self, config: QwenConfig, backend: AttentionBackend):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = QwenAttention(config, backend)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = QwenMLP(config.hidden_size, config.intermediate_size, config.hidden_act)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rotary, attn)
        return x + self.mlp(self.post_attention_layernorm(x))

    def decode(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], index: int,
               cache: DecodeCache) -> torch.Tensor:
        x = x + self.self_attn.decode(self.input_layernorm(x), rotary, index, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


# LLaMA-style checkpoints keep k/v and gate/up apart; SIE's blocks fuse each pair into one matmul.
FUSED_KV_AND_GATE_UP = (
    ("self_attn.k_proj", "self_attn.kv_proj", 0),
    ("self_attn.v_proj", "self_attn.kv_proj", 1),
    ("mlp.gate_proj", "mlp.gate_up_proj", 0),
    ("mlp.up_proj", "mlp.gate_up_proj", 1),
)


class QwenModel(Backbone):
    """Packed Qwen2/Qwen3/Mistral: `forward(input_ids [T], positions [T], attn, token_type_ids=None) -> hidden [T, H]`
    (after the final norm; last-token pooling picks each sequence's last row)."""

    weight_spec = WeightSpec(anchor="embed_tokens.weight", stacked=FUSED_KV_AND_GATE_UP)

    def __init__(self, config: QwenConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(QwenDecoderLayer(config, backend) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)

    def input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.forward_embeddings(self.embed_tokens(input_ids), positions, attn)

    def forward_embeddings(self, x: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                           rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
                           deepstack: tuple[torch.Tensor, Sequence[torch.Tensor]] | None = None) -> torch.Tensor:
        """The decoder over input embeddings `[T, H]` -> hidden `[T, H]` (a vision-language family
        places image features among the token embeddings: models/colqwen2, which may bring its own
        rotary tables: M-RoPE's). `deepstack`: (rows `[V]`, features `[V, H]` per layer), Qwen3-VL's
        DeepStack: the i-th features are added to those rows after the i-th layer."""
        if rotary is None:
            rotary = self.rotary(positions)  # once per batch, shared by every layer
        rows, features = deepstack if deepstack is not None else (None, ())
        for index, layer in enumerate(self.layers):
            x = layer(x, rotary, attn)
            if rows is not None and index < len(features):
                x = x.index_add(0, rows, features[index].to(x.dtype))
        return self.norm(x)

    def decode_embedded(self, x: torch.Tensor, positions: torch.Tensor, cache: DecodeCache,
                        rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """The cached decode path (a generating model's step, generation/loop.py's DecoderOnlyLM):
        input embeddings `[rows, Q, H]` of each row's new tokens at rotary `positions` `[rows, Q]`
        (or the caller's `rotary` tables over the flattened tokens, M-RoPE's), after
        `cache.begin_step` -> the final-normed hidden state of each row's last new token `[rows, H]`."""
        if rotary is None:
            rotary = self.rotary(positions.reshape(-1))
        for i, layer in enumerate(self.layers):
            x = layer.decode(x, rotary, i, cache)
        last = x[torch.arange(x.shape[0], device=x.device), cache.last_index]  # [rows, H]
        return self.norm(last)


# A card-less directory of any of the three gets the generic encoder card at the family's
# last-token pooling (sentence-transformers' files, where present, say otherwise: Qwen3-Embedding's do).
QWEN2 = Family("qwen2", QwenConfig.from_hf, QwenModel, "last")
QWEN3 = Family("qwen3", QwenConfig.from_hf, QwenModel, "last")
# Mistral (e5-mistral-7b-instruct and the embedders trained from it): the same blocks, no biases,
# a sliding window that caps the sequence length.
MISTRAL = Family("mistral", QwenConfig.from_hf, QwenModel, "last")
# Llama (Llama 3.1's llama3-scaled rotary; llama-embed-nemotron-8b's bidirectional `llama_bidirec`): the
# same blocks, biases on all four projections where the config says so.
LLAMA = Family("llama", QwenConfig.from_hf, QwenModel, "last")
