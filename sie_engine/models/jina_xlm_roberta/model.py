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

jina-embeddings-v3 keeps its task adapters (config.json `lora_adaptations`: retrieval.query,
retrieval.passage, separation, classification, text-matching) inside its checkpoint as torch
parametrizations of every linear and embedding layer (Jina's modeling_lora.py): the base weight as
`<module>.parametrizations.weight.original`, all tasks' deltas stacked in `...weight.0.lora_A` /
`lora_B`, scaled by `lora_alpha / lora_rank`. Their parametrization is the identity (the delta
applies only for a task), so the base weight loads as the module's weight and each task becomes
a LoRA adapter of its own (`checkpoint_adapters`), batched with the others as PEFT adapters are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...layers.blocks import activation
from ...layers.lora import LoRAAdapter, LoRABatch, LoRAWeights, require_positive, scoped
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

    # jina-embeddings-v3's task adapters in the checkpoint (config.json lora_adaptations), in the
    # order their deltas are stacked; empty: a checkpoint without them
    task_adapters: tuple[str, ...] = ()
    lora_scaling: float = 0.0  # lora_alpha / lora_rank

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> JinaXLMRobertaConfig:
        """Reads Jina's own config.json (`rotary_emb_base`, `lora_adaptations`) and transformers' port
        (`rope_parameters`)."""
        tasks, scaling = _task_adapters(config)
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
            task_adapters=tasks, lora_scaling=scaling,
        )

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def _task_adapters(config: Mapping[str, Any]) -> tuple[tuple[str, ...], float]:
    """config.json's task adapters and their scaling (Jina's XLMRobertaLoRA), checked."""
    tasks = config.get("lora_adaptations") or ()
    if not tasks:
        return (), 0.0
    if not isinstance(tasks, list) or not all(isinstance(t, str) and t for t in tasks) or len(set(tasks)) < len(tasks):
        raise ValueError(f"lora_adaptations must be a list of distinct task names, not {tasks!r}")
    if config.get("load_trained_adapters") is False:
        raise ValueError("load_trained_adapters is false: this checkpoint's task adapters are not trained ones "
                         "(Jina's code initialises them anew), so there are none to serve")
    require_positive(config, ("lora_rank", "lora_alpha"))
    return tuple(tasks), float(config["lora_alpha"]) / float(config["lora_rank"])


# Jina's parametrized checkpoint: a module's base weight and its tasks' stacked deltas
ORIGINAL = ".parametrizations.weight.original"
LORA_A, LORA_B = ".parametrizations.weight.0.lora_A", ".parametrizations.weight.0.lora_B"


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
        if config.task_adapters:  # Jina's parametrized layout: each base weight is the parametrization's original
            spec = type(self).weight_spec
            self.weight_spec = WeightSpec(anchor="embeddings.word_embeddings" + ORIGINAL,
                                          renames=((ORIGINAL, ".weight"), *spec.renames), stacked=spec.stacked,
                                          ignore=spec.ignore)
        self.hidden_size = config.hidden_size
        self.embeddings = NomicBertEmbeddings(config.vocab_size, config.hidden_size, config.type_vocab_size)
        self.emb_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(JinaBlock(config, backend) for _ in range(config.num_hidden_layers))
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None, lora: LoRABatch | None = None) -> torch.Tensor:
        """`lora`: each sequence's LoRA adapter over its rows (None: the base model alone)."""
        x = self.emb_ln(self.embeddings(input_ids, token_type_ids, scoped(lora, "embeddings.")))
        rotary = self.rotary(positions)  # once per batch, shared by every layer
        for i, layer in enumerate(self.layers):
            x = layer(x, rotary, attn, scoped(lora, f"layers.{i}."))
        return x

    def checkpoint_adapters(self, checkpoint: Mapping[str, torch.Tensor], prefix: str) -> dict[str, LoRAAdapter]:
        """jina-embeddings-v3's tasks, one adapter each: a linear layer's `lora_A [tasks, r, in]` and
        `lora_B [tasks, out, r]` give task i `x @ A_i^T @ B_i^T * scaling`; an embedding table's
        `lora_A [tasks, vocab, r]` and `lora_B [tasks, r, dim]` give rows of `A_i @ B_i * scaling`
        (Jina's `lora_forward`). A delta for a module the forward does not adapt is an error."""
        tasks = self.config.task_adapters
        if not tasks:
            return {}
        modules = dict(self.named_modules())
        adapted = (*self.lora_targets, "word_embeddings", "token_type_embeddings")
        per_task: list[dict[str, LoRAWeights]] = [{} for _ in tasks]
        errors: list[str] = []
        dtype = self.emb_ln.weight.dtype
        for key in [k for k in checkpoint.keys() if k.startswith(prefix) and k.endswith(LORA_A)]:
            path = key[len(prefix):-len(LORA_A)]
            if any(path.startswith(ignored) for ignored in self.weight_spec.ignore):
                continue  # the pooler's: no encode head reads it
            name, _ = self.weight_spec.mapped(path)
            module = modules.get(name)
            if module is None or not any(name.endswith(target) for target in adapted):
                errors.append(f"{key}: no module the forward adapts (it adapts {', '.join(adapted)})")
                continue
            a, b = checkpoint[key].float(), checkpoint[key[:-len(LORA_A)] + LORA_B].float()
            problem = _delta_problem(module, a, b, len(tasks))
            if problem:
                errors.append(f"{key}: {problem}")
                continue
            for i in range(len(tasks)):
                b_i = b[i] * self.config.lora_scaling
                if isinstance(module, nn.Embedding):  # rows looked up by token: a [vocab, r], b [dim, r]
                    b_i = b_i.t()
                per_task[i][name] = LoRAWeights(a[i].to(dtype).contiguous(), b_i.to(dtype).contiguous())
        if errors:
            raise ValueError("the checkpoint's task adapters do not fit the model:\n  " + "\n  ".join(errors))
        if not per_task[0]:
            raise ValueError(f"config.json names task adapters ({', '.join(tasks)}) and the checkpoint holds none "
                             f"(no '*{LORA_A}' tensors)")
        return {task: LoRAAdapter(task, modules_of) for task, modules_of in zip(tasks, per_task)}


def _delta_problem(module: nn.Module, a: torch.Tensor, b: torch.Tensor, tasks: int) -> str | None:
    """Why stacked deltas do not fit `module`, or None."""
    if isinstance(module, nn.Embedding):
        rows, width = module.weight.shape
        fits = a.ndim == b.ndim == 3 and a.shape[:2] == (tasks, rows) and b.shape[0] == tasks \
            and b.shape[2] == width and a.shape[2] == b.shape[1]
        shape = f"an embedding table ({rows} x {width})"
    elif isinstance(module, nn.Linear):
        fits = a.ndim == b.ndim == 3 and a.shape[0] == b.shape[0] == tasks and a.shape[2] == module.in_features \
            and b.shape[1] == module.out_features and a.shape[1] == b.shape[2]
        shape = f"a linear layer ({module.in_features} in, {module.out_features} out)"
    else:
        return f"{type(module).__name__} takes no delta"
    if fits:
        return None
    return f"lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} do not fit {shape} for {tasks} tasks"


FAMILY = Family("jina_xlm_roberta", JinaXLMRobertaConfig.from_hf, JinaXLMRobertaModel, "mean")
