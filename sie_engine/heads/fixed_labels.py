"""Fixed-label classification (the `classifier` output, served by `extract`): a
`*ForSequenceClassification` checkpoint's own head over one text, its labels from config.json.

The head is the checkpoint's classifier in the layout its family declares
(`classifier.build_classifier`: BERT's pooler + `classifier`, RoBERTa's / XLM-R's
`classifier.dense` + `classifier.out_proj`, DistilBERT's `pre_classifier` + ReLU, DeBERTa-v2's
ContextPooler); per text it gives the `[num_labels]` logits, and `tasks/classify.py` turns them
into scores as transformers' `TextClassificationPipeline` does.

What the model is comes from config.json, read once here, at load:

- `id2label`: the label of each logit (transformers' default `LABEL_{i}` where it names none);
- the activation, the pipeline's default `function_to_apply`: none for `problem_type: regression`,
  sigmoid for `multi_label_classification` or a single label, softmax otherwise.

A card may state what its model publishes (`options.classifier`): `num_labels`, checked against the
checkpoint at load (a checkpoint that changed under the card fails to load, naming both), and
`multi_label`, the model card's word where config.json names no problem_type (a Jigsaw model
trained one sigmoid per label): sigmoid (true) or softmax (false) by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..batch import PackedBatch
from .base import Head
from .classifier import SequenceClassifier, build_classifier
from .context import HeadContext

FUNCTIONS = ("sigmoid", "softmax", "none")


def label_names(config: Mapping[str, Any], num_labels: int) -> tuple[str, ...]:
    """The name of each of the classifier's `num_labels` outputs (config.json's `id2label`, else
    `LABEL_{i}` as transformers names them); ValueError naming the field when they do not match."""
    id2label = config.get("id2label") or {}
    try:
        names = {int(k): str(v) for k, v in id2label.items()}
    except (TypeError, ValueError, AttributeError):
        raise ValueError(f"config.json id2label {id2label!r} is not a mapping of class index to name") from None
    if names and sorted(names) != list(range(num_labels)):
        raise ValueError(f"config.json id2label names classes {sorted(names)}, but the classifier has "
                         f"{num_labels} outputs")
    return tuple(names.get(i, f"LABEL_{i}") for i in range(num_labels))


def default_function(config: Mapping[str, Any], num_labels: int) -> str:
    """transformers' TextClassificationPipeline's `function_to_apply` when none is given."""
    problem_type = config.get("problem_type")
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


@dataclass(frozen=True)
class Logits:
    """One text's answer from the head: its logits, with what the model says they mean (the
    same `labels` tuple for every text, so nothing is copied per item)."""

    labels: tuple[str, ...]
    function: str  # the model's default activation (FUNCTIONS)
    values: list[float]  # [num_labels]


class FixedLabelHead(Head):
    """hidden `[T, H]` of packed texts -> per text its `Logits`."""

    def __init__(self, classifier: SequenceClassifier, labels: tuple[str, ...], function: str):
        super().__init__()
        self.classifier = classifier
        self.labels = labels
        self.function = function

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[Logits]:
        rows = self.classifier(hidden, batch).cpu().tolist()  # [B, num_labels] float32
        return [Logits(self.labels, self.function, row) for row in rows]


OPTIONS = ("num_labels", "multi_label")


def build_classifier_head(ctx: HeadContext) -> dict[str, nn.Module]:
    options = ctx.options("classifier")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"card {ctx.card.id}: options.classifier takes {', '.join(OPTIONS)}; got {', '.join(unknown)}")
    classifier = build_classifier(ctx)
    num_labels = classifier.classifier.out_features
    expected = options.get("num_labels")
    if expected is not None and expected != num_labels:
        raise ValueError(f"card {ctx.card.id}: options.classifier.num_labels is {expected}, but the checkpoint's "
                         f"classifier has {num_labels} outputs")
    try:
        labels = label_names(ctx.hf_config, num_labels)
    except ValueError as exc:
        raise ValueError(f"card {ctx.card.id}: {exc}") from None
    multi_label = options.get("multi_label")
    if multi_label is not None and not isinstance(multi_label, bool):
        raise ValueError(f"card {ctx.card.id}: options.classifier.multi_label must be true or false")
    function = default_function(ctx.hf_config, num_labels) if multi_label is None else (
        "sigmoid" if multi_label else "softmax")
    return {"classifier": FixedLabelHead(classifier, labels, function).eval()}
