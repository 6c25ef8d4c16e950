"""NomicBERT encoders (nomic-embed-text v1 / v1.5) over packed input.

Read leaf to root: embeddings, attention, MLP, layer, model. Module names are the
checkpoint's own (Nomic's original layout, which is also what transformers'
`NomicBertModel` reads and writes through its conversion mapping): `emb_ln`,
`encoder.layers.N.attn.Wqkv` (fused QKV), `mlp.fc11` (up) / `mlp.fc12` (gate) /
`mlp.fc2` (down), `norm1` / `norm2`.

A post-norm BERT without position embeddings: rotary on queries and keys
instead, and a SwiGLU MLP. Every tensor is `[T, ...]` with T the batch's real tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, default_scale
from ...layers.blocks import activation
from ...layers.lora import LoRABatch
from ...layers.rotary import RotaryEmbedding, apply_rotary
from ...layers.weights import WeightSpec
from ..base import Backbone, Family
from .card import nomic_card

# Nomic's `activation_function` names the gated MLP; the gate's activation is what differs.
_GATED = {"swiglu": "silu", "geglu": "gelu"}


def rotary_settings(config: Mapping[str, Any], unsupported: Mapping[str, tuple[Any, ...]]) -> Mapping[str, Any]:
    """The config's `rope_parameters` ({} where none), after refusing the flash-attention-era settings
    SIE does not run (`unsupported`: key -> the values it runs, the first the one to name) and any
    rope_type but the default. NomicBERT's and Jina's XLM-RoBERTa configs share these settings."""
    for key, allowed in unsupported.items():
        if key in config and config[key] not in allowed:
            raise ValueError(f"{key}={config[key]!r} is not supported (supported: {allowed[0]!r})")
    rope = config.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type={rope['rope_type']!r} is not supported (only 'default')")
    return rope


@dataclass(frozen=True)
class NomicBertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "silu"  # the gate's activation
    max_position_embeddings: int = 2048
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    rope_theta: float = 1000.0
    qkv_bias: bool = False
    fc1_bias: bool = False  # fc11 and fc12
    fc2_bias: bool = False

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> NomicBertConfig:
        """Reads both config layouts: Nomic's original (`n_embd`, `n_layer`, ...) and transformers' port."""
        def get(*names, default=None):
            for name in names:
                if config.get(name) is not None:
                    return config[name]
            return default

        rope = rotary_settings(config, {
            "rotary_emb_fraction": (1.0, None), "rotary_emb_interleaved": (False, None), "prenorm": (False, None),
            "parallel_block": (False, None), "use_rms_norm": (False, None), "rotary_scaling_factor": (None,),
        })
        if "activation_function" in config:
            if config["activation_function"] not in _GATED:
                raise ValueError(f"activation_function={config['activation_function']!r} is not supported "
                                 f"(supported: {', '.join(_GATED)})")
            act = _GATED[config["activation_function"]]
        else:
            act = config.get("hidden_act", "silu")
        hidden = get("hidden_size", "n_embd")
        heads = get("num_attention_heads", "n_head")
        if get("head_dim", default=hidden // heads) != hidden // heads:
            raise ValueError(f"head_dim={config['head_dim']} != hidden_size / num_attention_heads is not supported")
        return NomicBertConfig(
            vocab_size=config["vocab_size"],
            hidden_size=hidden,
            num_hidden_layers=get("num_hidden_layers", "n_layer"),
            num_attention_heads=heads,
            intermediate_size=get("intermediate_size", "n_inner", default=4 * hidden),
            hidden_act=act,
            max_position_embeddings=get("max_position_embeddings", "n_positions", default=2048),
            type_vocab_size=config.get("type_vocab_size", 2),
            layer_norm_eps=get("layer_norm_eps", "layer_norm_epsilon", default=1e-12),
            rope_theta=float(get("rope_theta", "rotary_emb_base", default=rope.get("rope_theta", 1000.0))),
            qkv_bias=bool(config.get("qkv_proj_bias", False)),
            fc1_bias=bool(config.get("mlp_fc1_bias", False)),
            fc2_bias=bool(config.get("mlp_fc2_bias", False)),
        )

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class NomicBertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, type_vocab_size: int):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size) if type_vocab_size > 0 else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                lora: LoRABatch | None = None) -> torch.Tensor:
        """`[T]` ids, optional `[T]` segments -> `[T, H]` (before `emb_ln`; no position embeddings).
        `lora`: deltas of the tables (Jina's task adapters adapt both)."""
        x = self.word_embeddings(input_ids)
        if lora is not None:
            lora.add_embedding_(x, input_ids, "word_embeddings")
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]  # every token is segment 0: no gather
            else:
                x = x + self.token_type_embeddings(token_type_ids)
            if lora is not None:
                segments = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
                lora.add_embedding_(x, segments, "token_type_embeddings")
        return x


class NomicBertAttention(nn.Module):
    """Fused QKV, rotary on queries and keys, `out_proj`; also the attention of the Jina XLM-RoBERTa
    family (models/jina_xlm_roberta), which names it `mixer` and applies LoRA deltas to it."""

    def __init__(self, hidden_size: int, num_heads: int, bias: bool, backend: AttentionBackend):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.Wqkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)
        self.out_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.backend = backend
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata, lora: LoRABatch | None = None) -> torch.Tensor:
        """`lora`: the deltas of this module's `Wqkv` and `out_proj` (scoped to it), or None."""
        T, H = x.shape
        qkv = self.Wqkv(x)
        if lora is not None:
            lora.add_(qkv, x, "Wqkv")
        q, k, v = qkv.view(T, 3, self.num_heads, self.head_dim).unbind(1)  # each [T, heads, head_dim]
        cos, sin = rotary
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        context = self.backend(q, k, v, attn, scale=self.scale).reshape(T, H)
        out = self.out_proj(context)
        if lora is not None:
            lora.add_(out, context, "out_proj")
        return out


class NomicBertGatedMLP(nn.Module):
    """fc2(fc11(x) * act(fc12(x))): fc11 is the up projection, fc12 the gate."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, fc1_bias: bool, fc2_bias: bool):
        super().__init__()
        self.fc11 = nn.Linear(hidden_size, intermediate_size, bias=fc1_bias)
        self.fc12 = nn.Linear(hidden_size, intermediate_size, bias=fc1_bias)
        self.fc2 = nn.Linear(intermediate_size, hidden_size, bias=fc2_bias)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc11(x) * self.act(self.fc12(x)))


class NomicBertBlock(nn.Module):
    """Post-norm: norm1(x + attn(x)), then norm2(x + mlp(x))."""

    def __init__(self, config: NomicBertConfig, backend: AttentionBackend):
        super().__init__()
        eps = config.layer_norm_eps
        self.attn = NomicBertAttention(config.hidden_size, config.num_attention_heads, config.qkv_bias, backend)
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=eps)
        self.mlp = NomicBertGatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                                     config.fc1_bias, config.fc2_bias)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=eps)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                attn: AttentionMetadata) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, rotary, attn))
        return self.norm2(x + self.mlp(x))


class NomicBertEncoder(nn.Module):
    def __init__(self, config: NomicBertConfig, backend: AttentionBackend):
        super().__init__()
        self.layers = nn.ModuleList(NomicBertBlock(config, backend) for _ in range(config.num_hidden_layers))


class NomicBertModel(Backbone):
    """Packed NomicBERT: `forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> hidden [T, H]`."""

    weight_spec = WeightSpec(anchor="embeddings.word_embeddings.weight")

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def sequence_classifier(self, ctx: Any) -> nn.Module:
        """transformers' NomicBertForSequenceClassification: BERT's layout (the backbone's pooler,
        dense + tanh on [CLS], then `classifier`)."""
        from ...heads.classifier import pooler_classifier

        return pooler_classifier(ctx)

    def __init__(self, config: NomicBertConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.embeddings = NomicBertEmbeddings(config.vocab_size, config.hidden_size, config.type_vocab_size)
        self.emb_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.encoder = NomicBertEncoder(config, backend)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.emb_ln(self.embeddings(input_ids, token_type_ids))
        rotary = self.rotary(positions)  # once per batch, shared by every layer
        for layer in self.encoder.layers:
            x = layer(x, rotary, attn)
        return x


FAMILY = Family("nomic_bert", NomicBertConfig.from_hf, NomicBertModel, "mean", local_card=nomic_card)
