"""The `extract` task: zero-shot entity extraction with GLiNER.

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
from ..heads.gliner import WindowWork
from ..heads.gliner_checkpoint import GlinerConfig, is_gliner_dir, load_gliner_config
from ..heads.gliner_decode import DecodeSettings, merge_windows
from ..heads.gliner_prompt import Prepared, PromptTooLong, class_token_id, prepare
from ..runner import WorkItem
from ..types import Entity, ExtractedItem, ExtractResult
from ..weights import resolve_weights

OPTIONS = ("multi_label",)

_configs: dict[tuple, GlinerConfig] = {}


def gliner_config(card: ModelCard) -> GlinerConfig:
    """The card's GLiNER settings, read once per card (the tokenizer pool calls this)."""
    key = (card.id, card.weights)
    config = _configs.get(key)
    if config is None:
        root = resolve_weights(card)
        if not is_gliner_dir(root):  # a card that says extract over a model that cannot: the model cannot load
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
        raise InvalidRequest('labels must be a non-empty list of strings, e.g. ["person", "organization"]', field="labels")
    if len(labels) > limits.max_labels:
        raise InvalidRequest(f"labels holds {len(labels)} labels; at most {limits.max_labels}", field="labels")
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not label.strip() or len(label) > limits.max_label_chars:
            raise InvalidRequest(
                f"labels[{i}] must be a non-blank string of at most {limits.max_label_chars} characters", field=f"labels[{i}]"
            )
    return list(dict.fromkeys(labels))


def check_options(options: Mapping[str, Any]) -> bool:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise InvalidRequest(f"unknown extract options {sorted(unknown)} (known: {', '.join(OPTIONS)})", field=sorted(unknown)[0])
    return bool(v.check_optional_bool(options.get("multi_label"), "multi_label"))


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


async def run(engine, model: str, items: Sequence[Any], labels: Any, threshold: Any, flat: Any,
              timeout: float | None, options: Mapping[str, Any]) -> ExtractResult:
    started = time.monotonic()
    card = engine.card(model)
    ids, texts = v.parse_items(items, engine.limits)
    labels = check_labels(labels, engine.limits)
    flat = v.check_optional_bool(flat, "flat")
    settings = DecodeSettings(
        threshold=v.check_number(threshold, "threshold", 0.0, 1.0, 0.5),
        flat=True if flat is None else flat,
        multi_label=check_options(options or {}),
    )
    prepared, tokenize_s = await engine.with_tokenizer(card, prepare_request, card, texts, labels)
    windows = prepared.windows
    request = engine.new_request(card, "extract", len(windows), timeout)
    longest_first = sorted(range(len(windows)), key=lambda i: -len(windows[i].ids))
    windows_per_text = np.bincount([w.item for w in windows], minlength=len(texts))
    work = [WorkItem(request, i, windows[i].ids,
                     extra=WindowWork(windows[i], settings, alone=bool(windows_per_text[windows[i].item] == 1)))
            for i in longest_first]
    decoded = await engine.run_items(card, "extract", work, request)

    # decoding long texts is pure Python over possibly many candidates: off the event loop
    result_items = await asyncio.get_running_loop().run_in_executor(
        None, assemble, ids, texts, labels, prepared, decoded, settings, gliner_config(card).token_level)
    return ExtractResult(card.id, result_items, prepared.num_tokens, engine._timings(request, started, tokenize_s))


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
