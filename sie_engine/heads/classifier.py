"""Cross-encoder heads: sequence classification over a packed (query, document)
pair, giving one relevance score per pair (the `score` task).

Three checkpoint layouts, as transformers names them:

- `BertForSequenceClassification`: pooler (dense + tanh on [CLS]) then `classifier`.
- `*RobertaForSequenceClassification` (XLM-R, RoBERTa; bge-reranker): `classifier.dense` + tanh
  on [CLS], then `classifier.out_proj`.
- `ModernBertForSequenceClassification` (gte-reranker-modernbert): CLS or mean pooling
  (`classifier_pooling`), `head.dense` + activation + `head.norm`, then `classifier`.

The activation on the logits follows sentence-transformers' `CrossEncoder`: the
one config.json names (`sentence_transformers.activation_fn`, or the older
`sbert_ce_default_activation_function`), else sigmoid for one label and identity
for more. A card may override it with `options.score.activation`
(sigmoid | identity | softmax) and pick the label scored with `options.score.label`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn

from ..arch.layers import activation as hidden_activation
from ..batch import PackedBatch
from ..runner import HEAD_BUILDERS, ModelRunner, WorkItem
from ..weights import read_config
from .common import head_options, linear, layer_norm, ln_tensors, module_bytes, optional, tensor
from .pooling import cls_pool, mean_pool

ACTIVATIONS = ("sigmoid", "identity", "softmax")
# sentence-transformers stores the activation as an import path.
_ST_ACTIVATIONS = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.Sigmoid": "sigmoid",
    "torch.nn.Identity": "identity",
}


def default_activation(config: Mapping[str, Any], labels: int) -> str:
    """sentence-transformers' CrossEncoder.get_default_activation_fn, as a name. `labels`: the
    classifier's output size (the checkpoint's truth; transformers 5 omits a default id2label)."""
    path = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function"
    )
    if path is not None:
        if path not in _ST_ACTIVATIONS:
            raise ValueError(f"config.json names activation {path!r}; supported: {sorted(_ST_ACTIVATIONS)}")
        return _ST_ACTIVATIONS[path]
    return "sigmoid" if labels == 1 else "identity"


class SequenceClassifier(nn.Module):
    """hidden `[T, H]` of packed pairs -> logits `[B, num_labels]` (float32).

    `pool`: "cls" or "mean"; `pre`: the layers between pooled state and classifier
    (pooler dense + tanh, or dense + act + norm); `classifier`: `[num_labels, H]`.
    """

    def __init__(self, pool: str, pre: nn.Module, classifier: nn.Linear):
        super().__init__()
        self.pool = pool
        self.pre = pre
        self.classifier = classifier

    def forward(self, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        if self.pool == "mean":
            pooled = mean_pool(hidden, batch.cu_seqlens, batch.seq_index()).to(hidden.dtype)
        else:
            pooled = cls_pool(hidden, batch.cu_seqlens)
        return self.classifier(self.pre(pooled)).float()


class _DenseAct(nn.Module):
    def __init__(self, dense: nn.Linear, act, norm: nn.Module | None = None):
        super().__init__()
        self.dense = dense
        self.act = act
        self.norm = norm if norm is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(x)))


def build_classifier(runner: ModelRunner, tensors: Mapping[str, torch.Tensor], prefix: str,
                     config: Mapping[str, Any]) -> SequenceClassifier:
    """The classification head named by the checkpoint's architecture."""
    device, dtype = runner.device, runner.dtype
    architectures = config.get("architectures") or []
    arch = next((a for a in architectures if a.endswith("ForSequenceClassification")), None)
    if arch is None:
        raise ValueError(
            f"card {runner.card.id}: `score` needs a *ForSequenceClassification checkpoint; config.json names {architectures}"
        )
    if arch.startswith("ModernBert"):
        pool = config.get("classifier_pooling", "cls")
        if pool not in ("cls", "mean"):
            raise ValueError(f"classifier_pooling {pool!r} is not supported (cls, mean)")
        norm_w, norm_b = ln_tensors(tensors, "head.norm")
        pre = _DenseAct(
            linear(tensor(tensors, "head.dense.weight"), optional(tensors, "head.dense.bias"), device, dtype),
            hidden_activation(config.get("classifier_activation", "gelu")),
            layer_norm(norm_w, norm_b, config.get("norm_eps", 1e-5), device, dtype),
        )
        classifier = linear(tensor(tensors, "classifier.weight"), optional(tensors, "classifier.bias"), device, dtype)
    elif "classifier.out_proj.weight" in tensors:  # RoBERTa-style head
        pool = "cls"
        pre = _DenseAct(linear(tensors["classifier.dense.weight"], tensors["classifier.dense.bias"], device, dtype), torch.tanh)
        classifier = linear(tensors["classifier.out_proj.weight"], tensors["classifier.out_proj.bias"], device, dtype)
    else:  # BERT: pooler + classifier
        pool = "cls"
        pooler = f"{prefix}pooler.dense"
        pre = _DenseAct(linear(tensor(tensors, f"{pooler}.weight"), tensor(tensors, f"{pooler}.bias"), device, dtype), torch.tanh)
        classifier = linear(tensor(tensors, "classifier.weight"), optional(tensors, "classifier.bias"), device, dtype)
    return SequenceClassifier(pool, pre, classifier).eval()


def to_scores(logits: torch.Tensor, activation: str, label: int) -> torch.Tensor:
    """`[B, num_labels]` float32 logits -> `[B]` scores."""
    if activation == "softmax":
        return torch.softmax(logits, dim=-1)[:, label]
    if activation == "sigmoid":
        return torch.sigmoid(logits[:, label])
    return logits[:, label]


def build_score_head(runner: ModelRunner, tensors: Mapping[str, torch.Tensor], prefix: str) -> None:
    config = read_config(runner.root)
    options = head_options(runner, "score")
    head = build_classifier(runner, tensors, prefix, config)
    labels = head.classifier.out_features
    activation = options.get("activation") or default_activation(config, labels)
    if activation not in ACTIVATIONS:
        raise ValueError(f"card {runner.card.id}: options.score.activation {activation!r} not one of {ACTIVATIONS}")
    label = int(options.get("label", 0 if labels == 1 else labels - 1))
    if not 0 <= label < labels:
        raise ValueError(f"card {runner.card.id}: options.score.label {label} out of range for {labels} labels")

    def score(_runner: ModelRunner, hidden: torch.Tensor, batch: PackedBatch, items: Sequence[WorkItem]) -> list[float]:
        return to_scores(head(hidden, batch), activation, label).cpu().tolist()

    runner.task_heads["score"] = score
    runner.param_bytes += module_bytes(head)


HEAD_BUILDERS["score"] = build_score_head
