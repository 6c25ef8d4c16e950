"""Zero-shot classification with an NLI cross-encoder (the `zeroshot` output, served by `extract`).

Every (item, label) pair is one packed sentence pair: premise = the item's text,
hypothesis = the template filled with the label. The head is the checkpoint's own
`*ForSequenceClassification` classifier (`classifier.build_classifier`); per pair it
returns the `[entailment, contradiction]` logits, and `tasks/zeroshot.py` turns them into
scores as transformers' `ZeroShotClassificationPipeline` does.

The two indices come from config.json's `id2label`: entailment is the label whose name
starts with "entail" (case-insensitive, as the pipeline finds it); contradiction is the
label named "contradiction", or, in a two-class model (`entailment` / `not_entailment`),
the other class, which is where the pipeline looks (index 0, or the last when entailment
is 0). A checkpoint without them cannot serve zero-shot classification and fails to load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..batch import PackedBatch
from .base import Head
from .classifier import SequenceClassifier, build_classifier
from .context import HeadContext


def nli_indices(config: Mapping[str, Any], num_labels: int) -> tuple[int, int]:
    """(entailment, contradiction) indices from config.json's `id2label`; ValueError naming the field."""
    id2label = config.get("id2label") or {}
    try:
        names = {int(k): str(v).lower() for k, v in id2label.items()}
    except (TypeError, ValueError, AttributeError):
        raise ValueError(f"config.json id2label {id2label!r} is not a mapping of class index to name") from None
    entailment = next((i for i, name in sorted(names.items()) if name.startswith("entail")), None)
    if entailment is None:
        raise ValueError(f"zero-shot classification needs an entailment class: config.json id2label {id2label!r} "
                         "names none (a label starting with 'entail')")
    contradiction = next((i for i, name in sorted(names.items()) if name == "contradiction"), None)
    if contradiction is None and len(names) == 2:  # entailment / not_entailment
        contradiction = next(i for i in names if i != entailment)
    if contradiction is None:
        raise ValueError(f"zero-shot classification needs a contradiction class: config.json id2label {id2label!r} "
                         "names no 'contradiction' (and has more than two classes)")
    for index in (entailment, contradiction):
        if not 0 <= index < num_labels:
            raise ValueError(f"config.json id2label index {index} is outside the classifier's {num_labels} outputs")
    return entailment, contradiction


class NliHead(Head):
    """hidden `[T, H]` of packed (premise, hypothesis) pairs -> per pair `[entailment, contradiction]` logits."""

    def __init__(self, classifier: SequenceClassifier, entailment: int, contradiction: int):
        super().__init__()
        self.classifier = classifier
        self.entailment = entailment
        self.contradiction = contradiction

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[list[float]]:
        logits = self.classifier(hidden, batch)
        return logits[:, [self.entailment, self.contradiction]].cpu().tolist()


def build_zeroshot_head(ctx: HeadContext) -> dict[str, nn.Module]:
    classifier = build_classifier(ctx)
    try:
        entailment, contradiction = nli_indices(ctx.hf_config, classifier.classifier.out_features)
    except ValueError as exc:
        raise ValueError(f"card {ctx.card.id}: {exc}") from None
    return {"zeroshot": NliHead(classifier, entailment, contradiction).eval()}
