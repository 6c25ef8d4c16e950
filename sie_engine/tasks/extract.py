"""The `extract` task: zero-shot entity extraction with GLiNER (zero-shot classification
with NLI cross-encoders, cards with the `zeroshot` output, is in tasks/zeroshot.py; with
GLiClass, cards with the `gliclass` output, in tasks/gliclass.py; relation extraction with
GLiREL, cards with the `relations` output, in tasks/relations.py).

Each text is split into words and cut into windows that fit the model (with the
labels' prompt in front of every window); the windows of all requests run as
`extract` work, batched like any other. The head decodes a text that fits one
window; for a longer text it returns each window's candidate spans, decoded here
once over the whole text. Entities get character offsets in the original text.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping, Sequence

import numpy as np

from .. import validation as v
from ..card import ModelCard
from ..errors import InvalidRequest, ModelLoadFailed
from ..models.gliner.head import WindowWork
from ..checkpoints import kind as checkpoint_kind
from ..models.gliner.checkpoint import GlinerConfig, load_gliner_config
from ..models.gliner.decode import DecodeSettings, merge_windows
from ..models.gliner.prompt import Prepared, PromptTooLong, class_token_id, prepare
from ..types import Entity, ExtractedItem, ExtractResult
from ..weights import resolve_weights
from ..work import WorkItem
from .context import TaskContext
from . import gliclass, gliner2, relations, zeroshot

EXTRACT = frozenset({"extract"})  # the head extract work runs

_configs: dict[tuple, GlinerConfig] = {}


def gliner_config(card: ModelCard) -> GlinerConfig:
    """The card's GLiNER settings, read once per card (the tokenizer pool calls this)."""
    key = (card.id, card.weights)
    config = _configs.get(key)
    if config is None:
        root = resolve_weights(card)
        if checkpoint_kind(root) != "gliner":  # a card that says extract over a model that cannot: it cannot load
            raise ModelLoadFailed(card.id, "unsupported_architecture",
                                  f"extract needs a GLiNER checkpoint (gliner_config.json) in {root}")
        try:
            config = _configs[key] = load_gliner_config(root)
        except ValueError as exc:
            raise ModelLoadFailed(card.id, "unsupported_architecture", str(exc)) from exc
    return config


def check_labels(labels: Any, limits: v.Limits) -> list[str]:
    """A non-empty list of label strings; duplicates dropped, first occurrence kept (as GLiNER does)."""
    if isinstance(labels, str) or not isinstance(labels, Sequence) or not labels:
        raise InvalidRequest('labels must be a non-empty list of strings, e.g. ["person", "organization"]',
                             field="labels")
    if len(labels) > limits.max_labels:
        raise InvalidRequest(f"labels holds {len(labels)} labels; at most {limits.max_labels}", field="labels")
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not label.strip() or len(label) > limits.max_label_chars:
            raise InvalidRequest(
                f"labels[{i}] must be a non-blank string of at most {limits.max_label_chars} characters",
                field=f"labels[{i}]",
            )
    return list(dict.fromkeys(labels))


def prepare_request(tokenizer, card: ModelCard, texts: list[str], labels: list[str]) -> Prepared:
    """On the tokenizer pool: words, prompt and windows of every text."""
    config = gliner_config(card)
    for i, label in enumerate(labels):
        if config.ent_token in label or config.sep_token in label:
            raise InvalidRequest(f"labels[{i}] contains the model's prompt token", field=f"labels[{i}]")
    try:
        return prepare(tokenizer, config, texts, labels, class_token_id(tokenizer, config))
    except PromptTooLong as exc:
        raise InvalidRequest(str(exc), field="labels") from exc


async def run(engine: TaskContext, model: str, fields: Mapping[str, Any], timeout: float | None) -> ExtractResult:
    started = time.monotonic()
    card = engine.card(model)
    if gliner2.GLINER2 not in card.outputs:
        for name, other in (("classify", "a classifier takes its candidate classes in labels"),
                            ("relation_labels", "a relation model takes its relation types in labels")):
            if fields.get(name) is not None:
                raise InvalidRequest(f"model {card.id!r} is not a GLiNER2 model: {name} applies to GLiNER2 models "
                                     f"only ({other})", field=name)
    if relations.RELATIONS in card.outputs:  # a GLiREL model: relations between the items' entities
        return await relations.run(engine, card, fields, timeout, started, check_labels, run)
    relations.refuse_relation_fields(card, fields)
    ids, texts = v.parse_items(fields["items"], engine.limits)
    labels = check_labels(fields["labels"], engine.limits)
    if zeroshot.ZEROSHOT in card.outputs:  # an NLI cross-encoder: zero-shot classification
        return await zeroshot.run(engine, card, ids, texts, labels, fields, timeout, started)
    if gliclass.GLICLASS in card.outputs:  # a GLiClass model: all labels and the text in one pass
        return await gliclass.run(engine, card, ids, texts, labels, fields, timeout, started)
    if gliner2.GLINER2 in card.outputs:  # GLiNER2: entities, relations and a classification in one pass
        return await gliner2.run(engine, card, ids, texts, labels, fields, timeout, started, check_labels)
    for name in ("hypothesis_template", "top_k"):
        if fields.get(name) is not None:
            raise InvalidRequest(f"model {card.id!r} extracts entities: {name} applies to classification models",
                                 field=name)
    flat = v.check_optional_bool(fields.get("flat"), "flat")
    settings = DecodeSettings(
        threshold=v.check_number(fields.get("threshold"), "threshold", 0.0, 1.0, 0.5),
        flat=True if flat is None else flat,
        multi_label=bool(v.check_optional_bool(fields.get("multi_label"), "multi_label")),
    )
    prepared, tokenize_s = await engine.with_tokenizer(card, prepare_request, card, texts, labels)
    windows = prepared.windows
    request = engine.new_request(card, "extract", len(windows), timeout)
    longest_first = sorted(range(len(windows)), key=lambda i: -len(windows[i].ids))
    windows_per_text = np.bincount([w.item for w in windows], minlength=len(texts))
    work = [WorkItem(request, i, windows[i].ids, outputs=EXTRACT,
                     extra=WindowWork(windows[i], settings, alone=bool(windows_per_text[windows[i].item] == 1)))
            for i in longest_first]
    decoded = [r["extract"] for r in await engine.run_items(card, "extract", work, request)]

    # decoding long texts is pure Python over possibly many candidates: off the event loop
    result_items = await asyncio.get_running_loop().run_in_executor(
        None, assemble, ids, texts, labels, prepared, decoded, settings, gliner_config(card).token_level)
    return ExtractResult(card.id, result_items, prepared.num_tokens, engine.timings(request, started, tokenize_s))


def assemble(ids: list[str], texts: list[str], labels: list[str], prepared: Prepared, decoded: list,
             settings: DecodeSettings, token_level: bool) -> list[ExtractedItem]:
    """Per text: its windows' spans merged and decoded, with character offsets into the text."""
    per_text: list[list] = [[] for _ in texts]
    for window, spans in zip(prepared.windows, decoded):
        per_text[window.item].append((window.first_word, spans))
    result_items = []
    for item_id, text, words, parts in zip(ids, texts, prepared.words, per_text):
        entities = []
        for span in merge_windows(parts, settings, token_level):
            start, end = words.starts[span.start], words.ends[span.end]
            entities.append(Entity(text=text[start:end], label=labels[span.label], score=float(span.score),
                                   start=start, end=end))
        result_items.append(ExtractedItem(id=item_id, entities=entities))
    return result_items
