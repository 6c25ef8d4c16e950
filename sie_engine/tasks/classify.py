"""Fixed-label classification: the `extract` task on a card whose outputs include `classifier`
(a sentiment, emotion, toxicity, language or topic model with its own `id2label`).

Each item's text is one packed sequence (tokenised as the model's single texts are), queued as
`extract` work; the head (heads/fixed_labels.py) gives its logits. Scores as transformers'
`TextClassificationPipeline` computes them:

- the activation: the model's (config.json's `problem_type`: sigmoid for multi-label or one label,
  softmax otherwise, none for regression); `multi_label` true / false asks for sigmoid / softmax
  (the pipeline's `function_to_apply`), `raw_scores` for the logits;
- `top_k`: the k best labels, best first (ties in the model's label order); not sent, the best one
  (the pipeline's default); `null` (over the wire), every label. `threshold` then keeps those
  scoring at least it.

A request gives no `labels`: the model answers its own (tasks/extract.py refuses labels sent).
"""

from __future__ import annotations

import numpy as np

from .. import validation as v
from ..errors import InvalidRequest
from ..heads.fixed_labels import Logits
from ..types import ExtractResult
from ..work import WorkItem
from .common import check_truncation, longest_first
from .context import Call, TaskContext
from .extract import ExtractMode
from .zeroshot import Ranking, classified

CLASSIFIER = "classifier"  # the card output and the head extract work runs on fixed-label models
OUTPUTS = frozenset({CLASSIFIER})


def activated(logits: np.ndarray, function: str) -> np.ndarray:
    """`[N, L]` logits -> scores under `function` (sigmoid | softmax | none), as the pipeline's postprocess."""
    logits = logits.astype(np.float64)
    if function == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    if function == "softmax":
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return logits


def function_of(fields, default: str) -> str:
    """The activation a request asks for: `raw_scores` (none), else `multi_label` (sigmoid / softmax),
    else the model's."""
    if fields.get("raw_scores"):
        if fields.get("multi_label") is not None:
            raise InvalidRequest("raw_scores answers the logits: send it without multi_label (which picks "
                                 "sigmoid or softmax)", field="raw_scores")
        return "none"
    multi_label = fields.get("multi_label")
    if multi_label is None:
        return default
    return "sigmoid" if multi_label else "softmax"


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts = v.parse_items(fields["items"], engine.limits)
    # not sent: the best label (the pipeline's top_k=1); sent as null: every label
    ranking = Ranking(multi_label=False, threshold=fields.get("threshold"),
                      top_k=fields["top_k"] if "top_k" in fields else 1)
    tokenized, tokenize_s = await engine.tokenize(card, "encode", texts)
    check_truncation(tokenized, fields.get("truncate"))
    request = engine.new_request(call, "extract", len(texts))
    work: list[WorkItem[None]] = [WorkItem(request, i, tokenized.ids[i], outputs=OUTPUTS)
                                  for i in longest_first(tokenized.ids)]
    results = await engine.run_items(card, "extract", work, request)
    answers: list[Logits] = [r[CLASSIFIER] for r in results]
    labels = list(answers[0].labels)
    rows = activated(np.asarray([a.values for a in answers], dtype=np.float32).reshape(len(texts), len(labels)),
                     function_of(fields, answers[0].function))
    items = [classified(item_id, labels, row, ranking) for item_id, row in zip(ids, rows)]
    return ExtractResult(card.id, items, tokenized.num_tokens, engine.timings(request, call.started, tokenize_s))


MODE = ExtractMode(
    kind="a fixed-label classifier", family="fixed-label classifier", labels="",
    fields=frozenset({"threshold", "multi_label", "top_k", "raw_scores", "truncate"}),
    answers=frozenset({"classifications"}), run=run, takes_labels=False,
    example="distilbert/distilbert-base-uncased-finetuned-sst-2-english",
)
