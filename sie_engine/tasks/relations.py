"""Relation extraction with GLiREL: the `extract` task on a card whose outputs include
`relations` (tasks/extract.py picks it).

Per item, the entities come from the request (`{"text", "entities": [{"start", "end",
"label"}]}`, character offsets, end exclusive) or are found first by the GLiNER model named
in `entity_model` with `entity_labels` (one request, entities and relations together: a
knowledge-graph pipeline). Every ordered pair of an item's entities is scored against every
relation label in `labels`; a triple is kept when its probability is above `threshold`
(glirel's comparison), and `top_k` keeps each pair's k best labels. Triples come in glirel's
order: by head entity, tail entity, then label, in request order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .. import validation as v
from ..card import ModelCard
from ..errors import InvalidRequest
from ..models.gliner.prompt import PromptTooLong, split_words
from ..models.glirel.checkpoint import REL_TOKEN, SEP_TOKEN, GlirelConfig, load_glirel_config
from ..models.glirel.head import RELATIONS, RelationWork
from ..models.glirel.prompt import Prepared, SpanOutsideWords, prepare, word_span
from ..types import Entity, ExtractedItem, ExtractResult, Relation, Timings
from ..weights import resolve_weights
from ..work import WorkItem
from .common import check_labels, longest_first
from .context import Call, TaskContext
from .extract import ITEM_ENTITIES, ExtractMode

OUTPUTS = frozenset({RELATIONS})
DEFAULT_THRESHOLD = 0.5  # glirel's predict_relations default; a card may set options.relations.threshold
ENTITY_FIELDS = ("entity_model", "entity_labels", "entity_threshold")  # an entity model finds the entities
MAX_ENTITIES = 256  # per item: every ordered pair is scored, so the work grows with their square

_configs: dict[tuple, GlirelConfig] = {}


def glirel_config(card: ModelCard) -> GlirelConfig:
    key = (card.id, card.weights)
    if key not in _configs:
        _configs[key] = load_glirel_config(resolve_weights(card))
    return _configs[key]


def split_entities(items: Any) -> tuple[Any, list[Any]]:
    """Items without their `entities` (for the shared item parser) and each item's raw entities (None: none sent)."""
    if not isinstance(items, list):
        return items, []
    plain, entities = [], []
    for item in items:
        if isinstance(item, dict) and "entities" in item:
            item = dict(item)
            entities.append(item.pop("entities"))
        else:
            entities.append(None)
        plain.append(item)
    return plain, entities


def check_entities(raw: Any, text: str, where: str) -> list[Entity]:
    """`[{start, end, label}]` character spans inside the text -> Entities. `text` and `score` may come too
    (a GLiNER answer's entities sent back as they are); the score is echoed, the text is the span's."""
    if not isinstance(raw, list):
        raise InvalidRequest(f"{where} must be a list of {{start, end, label}} objects", field=where)
    check_entity_count(len(raw), where)
    entities = []
    for k, entity in enumerate(raw):
        here = f"{where}[{k}]"
        if not isinstance(entity, dict) or set(entity) - {"start", "end", "label", "text", "score"}:
            raise InvalidRequest(f"{here} must be an object with start, end and label (text and score optional)",
                                 field=here)
        start, end, label, score = entity.get("start"), entity.get("end"), entity.get("label"), entity.get("score")
        if isinstance(start, bool) or not isinstance(start, int) or isinstance(end, bool) or not isinstance(end, int):
            raise InvalidRequest(f"{here} needs integer start and end (character offsets, end exclusive)", field=here)
        if not 0 <= start < end <= len(text):
            raise InvalidRequest(f"{here} span {start}..{end} lies outside the text ({len(text)} characters): "
                                 "0 <= start < end <= len(text)", field=here)
        if not isinstance(label, str) or not label.strip():
            raise InvalidRequest(f"{here}.label must be a non-blank string (the entity's type)", field=f"{here}.label")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            raise InvalidRequest(f"{here}.score must be a number when given", field=f"{here}.score")
        entities.append(Entity(text=text[start:end], label=label, score=None if score is None else float(score),
                               start=start, end=end))
    return entities


def check_entity_count(count: int, where: str) -> None:
    if count > MAX_ENTITIES:
        raise InvalidRequest(f"{where} holds {count} entities; at most {MAX_ENTITIES} per item (each ordered pair "
                             "is scored): split the text", field=where)


def relation_settings(card: ModelCard, fields: Mapping[str, Any], limits: v.Limits) -> tuple[float, int | None]:
    default = float((card.options or {}).get(RELATIONS, {}).get("threshold", DEFAULT_THRESHOLD))
    return float(fields.get("threshold", default)), fields.get("top_k")  # of their declared types already


def label_limits(card: ModelCard, limits: v.Limits) -> v.Limits:
    """The card's `options.relations.max_labels` (relation labels sit in every window's prompt)."""
    max_labels = (card.options or {}).get(RELATIONS, {}).get("max_labels")
    return limits if max_labels is None else replace(limits, max_labels=min(int(max_labels), limits.max_labels))


async def find_entities(engine: TaskContext, call: Call, ids: list[str],
                        texts: list[str]) -> tuple[list[list[Entity]], int]:
    """The GLiNER model named in `entity_model` finds each item's entities: one `extract` call on it,
    within this call (its deadline and admission)."""
    fields = call.fields
    name, labels = fields.get("entity_model"), fields.get("entity_labels")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("entity_model must name a GLiNER model served here (entity_labels need it)",
                             field="entity_model")
    if labels is None:
        raise InvalidRequest("entity_labels is required with entity_model: the entity types to find, e.g. "
                             '["person", "organization"]', field="entity_labels")
    threshold = float(fields.get("entity_threshold", 0.5))
    if "extract" not in engine.card(name).outputs:
        raise InvalidRequest(f"entity_model {name!r} does not extract entities (a GLiNER model does)",
                             field="entity_model")
    request = {"items": [{"id": i, "text": t} for i, t in zip(ids, texts)], "labels": labels, "threshold": threshold}
    try:
        found = await engine.run_within(call, "extract", name, request)
    except InvalidRequest as exc:  # the inner call's labels are this request's entity_labels
        field = "entity_labels" if (exc.field or "").startswith("labels") else "entity_model"
        raise InvalidRequest(f"entity_model {name!r}: {exc}", field=field) from None
    for i, item in enumerate(found.items):
        check_entity_count(len(item.entities), f"items[{i}] (entities found by {name})")
    return [item.entities for item in found.items], found.tokens


def prepare_request(tokenizer, card: ModelCard, texts: list[str], labels: list[str],
                    spans: list[np.ndarray]) -> Prepared:
    """On the tokenizer pool: prompt, windows and pairs of every text."""
    for i, label in enumerate(labels):
        if REL_TOKEN in label or SEP_TOKEN in label:
            raise InvalidRequest(f"labels[{i}] contains the model's prompt token", field=f"labels[{i}]")
    try:
        return prepare(tokenizer, glirel_config(card), texts, labels, spans)
    except PromptTooLong as exc:
        raise InvalidRequest(str(exc), field="labels") from exc


def word_spans(entities: list[list[Entity]], words_of, texts: list[str]) -> list[np.ndarray]:
    spans = []
    for i, (item_entities, text) in enumerate(zip(entities, texts)):
        words = words_of(text)
        rows = []
        for k, e in enumerate(item_entities):
            try:
                rows.append(word_span(words, e.start, e.end))
            except SpanOutsideWords as exc:
                raise InvalidRequest(f"items[{i}].entities[{k}]: {exc}", field=f"items[{i}].entities[{k}]") from None
        spans.append(np.asarray(rows, dtype=np.int64).reshape(-1, 2))
    return spans


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields, started = call.card, call.fields, call.started
    plain, raw_entities = split_entities(fields["items"])
    ids, texts = v.parse_items(plain, engine.limits)
    labels = check_labels(fields["labels"], label_limits(card, engine.limits))
    threshold, top_k = relation_settings(card, fields, engine.limits)
    entity_tokens = 0
    if fields.get("entity_model") is not None or fields.get("entity_labels") is not None:
        if any(raw is not None for raw in raw_entities):
            raise InvalidRequest("send entities in the items or an entity_model to find them, not both",
                                 field="entity_model")
        entities, entity_tokens = await find_entities(engine, call, ids, texts)
    else:
        entities = [[] if raw is None else check_entities(raw, text, f"items[{i}].entities")
                    for i, (raw, text) in enumerate(zip(raw_entities, texts))]

    spans = word_spans(entities, split_words, texts)
    prepared, tokenize_s = await engine.with_tokenizer(card, prepare_request, card, texts, labels, spans)
    windows = prepared.windows
    probs: list[np.ndarray] = []
    timings = Timings(tokenize=tokenize_s)
    if windows:
        request = engine.new_request(call, "extract", len(windows))
        order = longest_first([w.ids for w in windows])
        work: list[WorkItem[RelationWork]] = [
            WorkItem(request, i, windows[i].ids, outputs=OUTPUTS, extra=RelationWork(windows[i])) for i in order]
        probs = [r[RELATIONS] for r in await engine.run_items(card, "extract", work, request)]
        timings = engine.timings(request, started, tokenize_s)
    else:
        timings.total = time.monotonic() - started
    relations = await asyncio.get_running_loop().run_in_executor(
        None, assemble, len(texts), entities, labels, prepared, probs, threshold, top_k)
    items = [ExtractedItem(id=i, entities=e, relations=r) for i, e, r in zip(ids, entities, relations)]
    return ExtractResult(card.id, items, prepared.num_tokens + entity_tokens, timings)


def assemble(num_texts: int, entities: Sequence[list[Entity]], labels: list[str], prepared: Prepared,
             probs: list[np.ndarray], threshold: float, top_k: int | None) -> list[list[Relation]]:
    """Per text: its windows' triples above the threshold, in glirel's order, each pair's top_k labels."""
    found: list[list[tuple[int, int, int, float]]] = [[] for _ in range(num_texts)]
    for window, p in zip(prepared.windows, probs):
        rows, cols = np.nonzero(p > threshold)
        heads, tails = window.pair_ids[rows, 0], window.pair_ids[rows, 1]
        found[window.item] += zip(heads.tolist(), tails.tolist(), cols.tolist(), p[rows, cols].tolist())
    result = []
    for item, triples in enumerate(found):
        triples.sort(key=lambda t: t[:3])
        if top_k is not None:
            best: dict[tuple[int, int], list] = {}
            for t in sorted(triples, key=lambda t: -t[3]):  # stable: ties keep label order
                best.setdefault(t[:2], []).append(t)
            kept = {t for group in best.values() for t in group[:top_k]}
            triples = [t for t in triples if t in kept]
        item_entities = entities[item]
        result.append([Relation(head=item_entities[h], relation=labels[c], tail=item_entities[t], score=float(s))
                       for h, t, c, s in triples])
    return result


MODE = ExtractMode(
    kind="a GLiREL relation model", family="GLiREL relation", labels="relation types",
    fields=frozenset({"threshold", "top_k", ITEM_ENTITIES, *ENTITY_FIELDS}),
    inputs=frozenset({ITEM_ENTITIES, *ENTITY_FIELDS}),
    answers=frozenset({"entities", "relations"}), run=run, example="jackboyla/glirel-large-v0",
)
