"""Zero-shot classification with an NLI cross-encoder: the `extract` task on a card whose
outputs include `zeroshot` (tasks/extract.py picks it).

Every (item, label) pair is one sentence pair, premise = the item's text and hypothesis =
`hypothesis_template.format(label)`, tokenised as the model's pairs are and queued as
`extract` work: N items x M labels are N x M packed sequences in the token-budget batches
(shared with other requests), not N x M requests. The head gives each pair's
[entailment, contradiction] logits; per item the scores are, as transformers'
`ZeroShotClassificationPipeline` computes them:

- single-label (default): softmax of the entailment logits across the item's labels (they sum to 1);
- multi-label (or a single label): per label, softmax over [contradiction, entailment], the entailment part.

Labels come back best first (ties in request order); `threshold` keeps those scoring at
least it, `top_k` the k best.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import validation as v
from ..errors import InvalidRequest
from ..types import Classification, ExtractedItem, ExtractResult
from ..work import WorkItem
from .common import check_labels, longest_first
from .context import Call, TaskContext
from .extract import ExtractMode

ZEROSHOT = "zeroshot"  # the card output and the head extract work runs on NLI models
OUTPUTS = frozenset({ZEROSHOT})
DEFAULT_TEMPLATE = "This example is {}."  # transformers' ZeroShotClassificationPipeline's


def check_template(template: Any, limits: v.Limits) -> str:
    """A template with one `{}` that formats every label; 400 naming the field otherwise."""
    if template is None:
        return DEFAULT_TEMPLATE
    if not isinstance(template, str) or "{}" not in template or len(template) > limits.max_instruction_chars:
        raise InvalidRequest(f'hypothesis_template must be a string of at most {limits.max_instruction_chars} '
                             'characters with {} where the label goes, e.g. "This example is {}."',
                             field="hypothesis_template")
    try:
        template.format("label")
    except (IndexError, KeyError, ValueError) as exc:
        raise InvalidRequest(f"hypothesis_template does not format with one label ({exc}); write literal braces "
                             "as {{ and }}", field="hypothesis_template") from None
    return template


@dataclass(frozen=True)
class Ranking:
    """How a classification request wants its labels: scored together or each on its own, and which to keep."""

    multi_label: bool
    threshold: float | None
    top_k: int | None

    @staticmethod
    def of(fields: Mapping[str, Any], default_multi_label: bool = False) -> Ranking:
        threshold = fields.get("threshold")  # the fields are of their declared types (the request struct)
        return Ranking(
            multi_label=fields.get("multi_label", default_multi_label),
            threshold=None if threshold is None else float(threshold),
            top_k=fields.get("top_k"),
        )


def classified(item_id: str, labels: list[str], row: np.ndarray, ranking: Ranking) -> ExtractedItem:
    """One item's answer: its labels best first (ties in request order), cut by threshold and top_k."""
    order = sorted(range(len(labels)), key=lambda j: -row[j])  # stable: ties keep request order
    if ranking.threshold is not None:
        order = [j for j in order if row[j] >= ranking.threshold]
    if ranking.top_k is not None:
        order = order[:ranking.top_k]
    return ExtractedItem(id=item_id, entities=[],
                         classifications=[Classification(labels[j], float(row[j])) for j in order])


def scores(logits: np.ndarray, multi_label: bool) -> np.ndarray:
    """`[N, M, 2]` ([entailment, contradiction]) logits -> `[N, M]` scores, as the pipeline's postprocess."""
    logits = logits.astype(np.float64)
    if multi_label or logits.shape[1] == 1:
        entail, contra = logits[..., 0], logits[..., 1]
        return 1.0 / (1.0 + np.exp(contra - entail))  # softmax([contra, entail])[1]
    entail = logits[..., 0]
    e = np.exp(entail - entail.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts = v.parse_items(fields["items"], engine.limits)
    labels = check_labels(fields["labels"], engine.limits)
    template = check_template(fields.get("hypothesis_template"), engine.limits)
    ranking = Ranking.of(fields)

    hypotheses = [template.format(label) for label in labels]
    premises = [text for text in texts for _ in labels]
    tokenized, tokenize_s = await engine.tokenize(card, "encode_pairs", premises, hypotheses * len(texts))
    request = engine.new_request(call, "extract", len(premises))
    types = tokenized.type_ids
    work: list[WorkItem[None]] = [
        WorkItem(request, i, tokenized.ids[i], type_ids=types[i] if types else None, outputs=OUTPUTS)
        for i in longest_first(tokenized.ids)]
    results = await engine.run_items(card, "extract", work, request)
    logits = np.asarray([r[ZEROSHOT] for r in results], dtype=np.float32).reshape(len(texts), len(labels), 2)

    rows = scores(logits, ranking.multi_label)
    items = [classified(item_id, labels, row, ranking) for item_id, row in zip(ids, rows)]
    return ExtractResult(card.id, items, tokenized.num_tokens, engine.timings(request, call.started, tokenize_s))


MODE = ExtractMode(
    kind="an NLI classifier", family="NLI classifier", labels="candidate classes",
    fields=frozenset({"threshold", "multi_label", "hypothesis_template", "top_k"}),
    answers=frozenset({"classifications"}), run=run, example="cross-encoder/nli-deberta-v3-small",
)
