"""GLiNER2: entities, relations and a classification in one pass (the `extract` task on a card whose
outputs include `gliner2`; tasks/extract.py picks it).

`labels` are the entity types; `relation_labels` adds one schema per relation type and
`classify: {"task", "labels", "multi_label"?}` one classification task, all in the same sequence.
Entities are decoded as gliner2 2.1.0 decodes them: per label, the spans scoring at least
`threshold`, best first, each dropped when it overlaps one already kept; they come label by
label, in that order. Relations too: per relation type and predicted instance, the best span at
or above `threshold` for the head and for the tail; an instance with both is a triple, listed by
type, then instance (the library's order, its duplicates kept). A triple's score is the lower of
its head's and tail's; each end is an Entity whose label is that of an entity found at the same
span, else its field ("head" / "tail"). Classifications list every label with its probability,
best first: a softmax over the labels, or with `multi_label` a sigmoid each (the library answers
the first, or those at 0.5 and above).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import validation as v
from ..errors import InvalidRequest
from ..models.gliner2.checkpoint import SPECIAL_TOKENS
from ..models.gliner2.head import GLINER2, Gliner2Scores, Gliner2Work
from ..models.gliner2.prompt import RELATION_FIELDS, Words, prepare
from ..types import Classification, Entity, ExtractedItem, ExtractResult, Relation
from ..work import WorkItem
from .common import check_labels, labels_under, longest_first
from .context import Call, TaskContext
from .extract import ExtractMode

OUTPUTS = frozenset({GLINER2})


def check_classify(value: Any, limits: v.Limits) -> tuple[str, list[str], bool] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"task", "labels", "multi_label"}:
        raise InvalidRequest('classify must be {"task": str, "labels": [str, ...], "multi_label"?: bool}',
                             field="classify")
    task = value.get("task")
    if not isinstance(task, str) or not task.strip() or len(task) > limits.max_label_chars:
        raise InvalidRequest(f"classify.task must be a non-blank string of at most {limits.max_label_chars} "
                             "characters (the task's name, e.g. \"sentiment\")", field="classify.task")
    labels = labels_under("classify.", value.get("labels"), limits)
    multi_label = bool(value.get("multi_label", False))
    return task, labels, multi_label


def check_prompt_words(words: list[str], field: str) -> None:
    for i, word in enumerate(words):
        if any(token in word for token in SPECIAL_TOKENS):
            raise InvalidRequest(f"{field}[{i}] contains one of the model's prompt tokens", field=f"{field}[{i}]")


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts = v.parse_items(fields["items"], engine.limits)
    labels = check_labels(fields["labels"], engine.limits)
    threshold = float(fields.get("threshold", 0.5))
    classify = check_classify(fields.get("classify"), engine.limits)
    task, class_labels, multi_label = classify if classify else (None, [], False)
    relation_types = [] if fields.get("relation_labels") is None else labels_under(
        "relation_", fields["relation_labels"], engine.limits)
    check_prompt_words(labels, "labels")
    check_prompt_words(class_labels + ([task] if task else []), "classify.labels")
    check_prompt_words(relation_types, "relation_labels")

    (normalized, words, inputs), tokenize_s = await engine.with_tokenizer(card, prepare, texts, labels, task,
                                                                          class_labels, relation_types)
    request = engine.new_request(call, "extract", len(inputs))
    work: list[WorkItem[Gliner2Work]] = [
        WorkItem(request, i, inputs[i].ids, outputs=OUTPUTS, extra=Gliner2Work(inputs[i]))
        for i in longest_first([x.ids for x in inputs])]
    scores: list[Gliner2Scores] = [r[GLINER2] for r in await engine.run_items(card, "extract", work, request)]
    items = []
    for item_id, text, norm, item_words, s in zip(ids, texts, normalized, words, scores):
        entities = decode_entities(s, labels, text, norm, item_words, threshold)
        classifications = None if task is None or s.class_logits is None else classify_scores(
            s.class_logits, class_labels, multi_label)
        triples = None if not relation_types else decode_relations(s, relation_types, entities, text, norm,
                                                                   item_words, threshold)
        items.append(ExtractedItem(id=item_id, entities=entities, classifications=classifications,
                                   relations=triples))
    tokens = sum(len(x.ids) for x in inputs)
    return ExtractResult(card.id, items, tokens, engine.timings(request, call.started, tokenize_s))


def ranked_spans(probs: np.ndarray, scores: Gliner2Scores, normalized: str, words: Words,
                 threshold: float) -> list[tuple[float, int, int]]:
    """gliner2's _find_spans then finalize_spans over one query's span probabilities `[S]`:
    (score, start, end) in the normalised text, best first, none overlapping a better one."""
    span_starts, span_widths = scores.starts, scores.widths
    if span_starts is None or span_widths is None:  # the head scores spans only with their grid
        raise ValueError("span probabilities without the spans' starts and widths")
    found = []
    for row in np.nonzero(probs >= threshold)[0].tolist():
        first = int(span_starts[row])
        last = first + int(span_widths[row])
        start, end = words.starts[first], words.ends[last]
        if normalized[start:end].strip():
            found.append((float(probs[row]), start, end))
    kept: list[tuple[float, int, int]] = []
    for span in sorted(found, key=lambda s: -s[0]):  # stable: ties keep (start, width) order
        if not any(span[1] < k[2] and k[1] < span[2] for k in kept):
            kept.append(span)
    return kept


def in_text(score: float, start: int, end: int, text: str, label: str) -> Entity | None:
    """A span of the normalised text as an Entity of the request's text; None for a span only in
    the "." gliner2 appends to a text without final punctuation."""
    if start >= len(text):
        return None
    end = min(end, len(text))
    return Entity(text=text[start:end].strip(), label=label, score=score, start=start, end=end)


def decode_entities(scores: Gliner2Scores, labels: list[str], text: str, normalized: str, words: Words,
                    threshold: float) -> list[Entity]:
    """Label by label, its spans best first; offsets into the request's text."""
    if scores.entity_probs is None:
        return []
    entities = []
    for c, label in enumerate(labels):
        for span in ranked_spans(scores.entity_probs[:, c], scores, normalized, words, threshold):
            entity = in_text(*span, text, label)
            if entity is not None:
                entities.append(entity)
    return entities


def decode_relations(scores: Gliner2Scores, relation_types: list[str], entities: list[Entity], text: str,
                     normalized: str, words: Words, threshold: float) -> list[Relation]:
    """gliner2's _extract_relations: per type and instance, the best head and tail span; both found
    make a triple. An end takes the label of an entity found at its span, else its field's name."""
    labels_at = {(e.start, e.end): e.label for e in entities}
    triples = []
    for relation, probs in zip(relation_types, scores.relation_probs):
        for instance in probs if probs is not None else ():  # [2, S]: head, tail
            ends: list[Entity | None] = []
            end_scores: list[float] = []  # each found end's span score (its Entity's score, typed optional)
            for name, field_probs in zip(RELATION_FIELDS, instance):
                best = ranked_spans(field_probs, scores, normalized, words, threshold)[:1]
                ends.append(in_text(*best[0], text, name) if best else None)
                end_scores.extend(score for score, _, _ in best)
            head, tail = ends
            if head is None or tail is None:
                continue
            for end in (head, tail):
                end.label = labels_at.get((end.start, end.end), end.label)
            triples.append(Relation(head=head, relation=relation, tail=tail, score=min(end_scores)))
    return triples


def classify_scores(logits: np.ndarray, labels: list[str], multi_label: bool) -> list[Classification]:
    logits = logits.astype(np.float64)
    if multi_label:
        probs = 1.0 / (1.0 + np.exp(-logits))
    else:
        e = np.exp(logits - logits.max())
        probs = e / e.sum()
    order = sorted(range(len(labels)), key=lambda j: -probs[j])
    return [Classification(labels[j], float(probs[j])) for j in order]


MODE = ExtractMode(
    kind="a GLiNER2 model", family="GLiNER2", labels="entity types",
    fields=frozenset({"threshold", "classify", "relation_labels"}),
    answers=frozenset({"entities", "classifications", "relations"}), run=run, example="fastino/gliner2-base-v1",
    hints={"multi_label": "classify.multi_label sets the classification's mode"},
)
