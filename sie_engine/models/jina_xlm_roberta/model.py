"""Jina's XLM-RoBERTa with rotary positions (jina-colbert-v2, jina-embeddings-v3) over packed input.

XLM-RoBERTa's post-norm encoder with its position table dropped: rotary positions on queries and
keys instead (the "rotate half" layout, as flash-attention's non-interleaved rotary applies them),
a fused QKV projection and a plain GELU MLP, every linear layer with a bias. transformers ports it
as `JinaEmbeddingsV3Model` (model_type `jina_embeddings_v3`); Jina's own checkpoints say
`model_type: xlm-roberta` with `position_embedding_type: rotary` and run remote code
(jinaai/xlm-roberta-flash-implementation).

Module names are the checkpoint's own (Jina's flash layout, which transformers' port also writes):
`emb_ln`, `encoder.layers.N.mixer.Wqkv` / `mixer.out_proj`, `norm1`, `mlp.fc1` / `mlp.fc2`,
`norm2`. The weight spec also reads transformers' in-memory names (`layers.N.self_attn.q_proj`
... `post_mlp_layernorm`), which is what peft names the adapters it trains on the port.
Every tensor is `[T, ...]` with T the batch's real tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...layers.blocks import activation
from ...layers.lora import LoRABatch, scoped
from ...layers.rotary import RotaryEmbedding
from ...layers.weights import WeightSpec
from ..base import Backbone, Family
from ..nomic_bert.model import NomicBertAttention, NomicBertEmbeddings, rotary_settings

# transformers' JinaEmbeddingsV3Config.default_theta, used when its config.json has no rope_parameters
PORT_DEFAULT_THETA = 20000.0
# settings of Jina's XLMRobertaFlashConfig that change the computation in ways SIE does not run
_UNSUPPORTED = {"rotary_emb_fraction": (1.0, None), "rotary_emb_interleaved": (False, None),
                "last_layer_subset": (False, None), "rotary_emb_scale_base": (None,)}


@dataclass(frozen=True)
class JinaXLMRobertaConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    rope_theta: float
    hidden_act: str = "gelu"
    max_position_embeddings: int = 8194
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> JinaXLMRobertaConfig:
        """Reads Jina's own config.json (`rotary_emb_base`) and transformers' port (`rope_parameters`)."""
        if config.get("lora_adaptations"):
            raise ValueError("this checkpoint keeps its task LoRA adapters (lora_adaptations) inside its weights as "
                             "torch parametrizations, which SIE does not read; transformers' port "
                             "(model_type jina_embeddings_v3) loads, and PEFT adapters over it are served")
        if config.get("model_type") != "jina_embeddings_v3" and config.get("position_embedding_type") != "rotary":
            raise ValueError(f"position_embedding_type={config.get('position_embedding_type')!r}: not Jina's rotary "
                             "XLM-RoBERTa (a plain XLM-RoBERTa is the bert family's)")
        rope = rotary_settings(config, _UNSUPPORTED)
        if "rope_theta" in rope:
            theta = float(rope["rope_theta"])
        elif config.get("rotary_emb_base") is not None:
            theta = float(config["rotary_emb_base"])
        elif config.get("model_type") == "jina_embeddings_v3":
            theta = PORT_DEFAULT_THETA
        else:
            raise ValueError("config.json names no rotary base (rotary_emb_base or rope_parameters.rope_theta)")
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        if hidden % heads:
            raise ValueError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        return JinaXLMRobertaConfig(
            vocab_size=config["vocab_size"], hidden_size=hidden, num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=heads, intermediate_size=config["intermediate_size"], rope_theta=theta,
            hidden_act=config.get("hidden_act", "gelu"),
            max_position_embeddings=config.get("max_position_embeddings", 8194),
            type_vocab_size=config.get("type_vocab_size", 1), layer_norm_eps=config.get("layer_norm_eps", 1e-5),
        )

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class JinaMLP(nn.Module):
    """fc2(act(fc1(x)))."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, hidden_size)
        self.act = activation(act)

    def forward(self, x: torch.Tensor, lora: LoRABatch | None = None) -> torch.Tensor:
        h = self.fc1(x)
        if lora is not None:  # before the activation, as peft's LoRA linear adds it
            lora.add_(h, x, "fc1")
        h = self.act(h)
        out = self.fc2(h)
        if lora is not None:
            lora.add_(out, h, "fc2")
        return out


class JinaBlock(nn.Module):
    """Post-norm: norm1(x + mixer(x)), then norm2(x + mlp(x))."""

    def __init__(self, config: JinaXLMRobertaConfig, backend: AttentionBackend):
        super().__init__()
        eps = config.layer_norm_eps
        self.mixer = NomicBertAttention(config.hidden_size, config.num_attention_heads, True, backend)
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=eps)
        self.mlp = JinaMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=eps)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], attn: AttentionMetadata,
                lora: LoRABatch | None = None) -> torch.Tensor:
        x = self.norm1(x + self.mixer(x, rotary, attn, scoped(lora, "mixer.")))
        return self.norm2(x + self.mlp(x, scoped(lora, "mlp.")))


class JinaXLMRobertaModel(Backbone):
    """Packed Jina XLM-RoBERTa: `forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> hidden [T, H]`."""

    weight_spec = WeightSpec(
        anchor="embeddings.word_embeddings.weight",
        # transformers' in-memory names of the port (peft adapters trained on it name these)
        renames=(("self_attn.o_proj", "mixer.out_proj"), ("post_attention_layernorm", "norm1"),
                 ("post_mlp_layernorm", "norm2"), ("embeddings.LayerNorm", "emb_ln"), ("encoder.layers.", "layers.")),
        stacked=(("self_attn.q_proj", "mixer.Wqkv", 0), ("self_attn.k_proj", "mixer.Wqkv", 1),
                 ("self_attn.v_proj", "mixer.Wqkv", 2)),
        # the pooler (dense + tanh on <s>) that no encode head reads
        ignore=("pooler.",),
    )
    # every linear layer of a layer takes a LoRA delta
    lora_targets = ("mixer.Wqkv", "mixer.out_proj", "mlp.fc1", "mlp.fc2")

    def input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def __init__(self, config: JinaXLMRobertaConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.embeddings = NomicBertEmbeddings(config.vocab_size, config.hidden_size, config.type_vocab_size)
        self.emb_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(JinaBlock(config, backend) for _ in range(config.num_hidden_layers))
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None, lora: LoRABatch | None = None) -> torch.Tensor:
        """`lora`: each sequence's LoRA adapter over its rows (None: the base model alone)."""
        x = self.emb_ln(self.embeddings(input_ids, token_type_ids))
        rotary = self.rotary(positions)  # once per batch, shared by every layer
        for i, layer in enumerate(self.layers):
            x = layer(x, rotary, attn, scoped(lora, f"layers.{i}."))
        return x


FAMILY = Family("jina_xlm_roberta", JinaXLMRobertaConfig.from_hf, JinaXLMRobertaModel, "mean")
