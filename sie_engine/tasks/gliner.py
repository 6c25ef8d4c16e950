"""Zero-shot entity extraction with GLiNER: the `extract` task's mode for a card whose
outputs include `extract` (tasks/extract.py picks it).

Each text is split into words and cut into windows that fit the model (with the
labels' prompt in front of every window); the windows of all requests run as
`extract` work, batched like any other. The head decodes a text that fits one
window; for a longer text it returns each window's candidate spans, decoded here
once over the whole text. Entities get character offsets in the original text.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from .. import validation as v
from ..card import ModelCard
from ..checkpoints import kind as checkpoint_kind
from ..errors import InvalidRequest, ModelLoadFailed
from ..models.gliner.checkpoint import GlinerConfig, load_gliner_config
from ..models.gliner.decode import DecodeSettings, merge_windows
from ..models.gliner.head import WindowWork
from ..models.gliner.prompt import Prepared, PromptTooLong, class_token_id, prepare
from ..types import Entity, ExtractedItem, ExtractResult, Timings
from ..weights import resolve_weights
from ..work import WorkItem
from .common import check_labels
from .context import Call, TaskContext
from .extract import ExtractMode

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


def prepare_request(tokenizer, card: ModelCard, texts: list[str], labels: list[str]) -> Prepared:
    """On the tokenizer pool: words, prompt and windows of every text."""
    config = gliner_config(card)
    for i, label in enumerate(labels):
        if not config.bi_encoder and (config.ent_token in label or config.sep_token in label):
            raise InvalidRequest(f"labels[{i}] contains the model's prompt token", field=f"labels[{i}]")
    try:
        return prepare(tokenizer, config, texts, labels, class_token_id(tokenizer, config))
    except PromptTooLong as exc:
        raise InvalidRequest(str(exc), field="labels") from exc


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts = v.parse_items(fields["items"], engine.limits)
    labels = check_labels(fields["labels"], engine.limits)
    settings = DecodeSettings(  # the fields are of their declared types (the request struct checked them)
        threshold=float(fields.get("threshold", 0.5)),
        flat=fields.get("flat", True),
        multi_label=fields.get("multi_label", False),
    )
    prepared, tokenize_s = await engine.with_tokenizer(card, prepare_request, card, texts, labels)
    windows = prepared.windows
    if not windows:  # only blank texts: no word to find an entity in, nothing to queue
        return ExtractResult(card.id, [ExtractedItem(id=item_id, entities=[]) for item_id in ids], 0,
                             Timings(tokenize=tokenize_s, total=time.monotonic() - call.started))
    request = engine.new_request(call, "extract", len(windows))
    longest_first = sorted(range(len(windows)), key=lambda i: -len(windows[i].ids))
    windows_per_text = np.bincount([w.item for w in windows], minlength=len(texts))
    separate_labels = tuple(labels) if gliner_config(card).bi_encoder else ()  # encoded apart from the text
    work: list[WorkItem[WindowWork]] = [
        WorkItem(request, i, windows[i].ids, outputs=EXTRACT,
                 extra=WindowWork(windows[i], settings, alone=bool(windows_per_text[windows[i].item] == 1),
                                  labels=separate_labels))
        for i in longest_first]
    decoded = [r["extract"] for r in await engine.run_items(card, "extract", work, request)]

    # decoding long texts is pure Python over possibly many candidates: off the event loop
    result_items = await asyncio.get_running_loop().run_in_executor(
        None, assemble, ids, texts, labels, prepared, decoded, settings, gliner_config(card).token_level)
    return ExtractResult(card.id, result_items, prepared.num_tokens, engine.timings(request, call.started, tokenize_s))


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


MODE = ExtractMode(
    kind="a GLiNER entity model", family="GLiNER entity", labels="entity types",
    fields=frozenset({"threshold", "flat", "multi_label"}), answers=frozenset({"entities"}), run=run,
    example="EmergentMethods/gliner_medium_news-v2.1",
)
