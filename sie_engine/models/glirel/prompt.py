"""GLiREL's input side: words, entity spans in words, the relation prompt, entity pairs, windows.

GLiREL splits a text into words with GLiNER's regular expression, puts the relation labels
in front as words (`[REL] label [REL] label ... [SEP]`, each label one word even when it
has spaces), tokenises the word list pre-split with the tokenizer's special tokens, and
keeps one vector per word (its first or last sub-token). Entities are spans of whole
words; the pairs it scores are every ordered pair of distinct entities (i, j), those with
i > j only within `max_entity_pair_distance` start words (glirel's
`generate_entity_pairs_indices`, in its row-major order).

A text longer than the model's window (its `max_len` words, or the tokens left beside the
prompt) is cut into windows of whole words, each overlapping the next by half; a pair is
scored in the first window holding both of its entities, and a pair that no window holds
(entities further apart than about half a window) is not scored.

Runs on the tokenizer pool: plain Python and numpy, no torch.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..gliner.prompt import PromptTooLong, Words, plan_windows, split_words
from .checkpoint import REL_TOKEN, SEP_TOKEN, GlirelConfig

MIN_WINDOW_WORDS = 8  # fewer text words beside the prompt than this: the labels take the window


class SpanOutsideWords(ValueError):
    """An entity whose characters cover no word of the text (only spaces)."""


@dataclass
class RelationWindow:
    """One GLiREL input: the prompt and a run of a text's words, with the pairs it scores.

    ids: `[N]` int32 token ids of the whole sequence.
    element_tokens, element_slots: `[M]` positions in `ids` of the sub-tokens that make the
        vectors of the sequence's words ("elements": the prompt's 2C + 1, then the text's) and
        the element each one feeds.
    entities: `[K, 2]` first and last window word of each entity the window's pairs use.
    pairs: `[P, 2]` rows of `entities` (head, tail); pair_ids: `[P, 2]` the request's entity indices.
    """

    item: int
    first_word: int
    num_words: int
    num_labels: int
    ids: np.ndarray
    element_tokens: np.ndarray
    element_slots: np.ndarray
    entities: np.ndarray
    pairs: np.ndarray
    pair_ids: np.ndarray

    @property
    def num_elements(self) -> int:
        return 2 * self.num_labels + 1 + self.num_words


def prompt_words(labels: Sequence[str]) -> list[str]:
    words: list[str] = []
    for label in labels:
        words += [REL_TOKEN, label]
    return words + [SEP_TOKEN]


def word_span(words: Words, start: int, end: int) -> tuple[int, int]:
    """Characters `[start, end)` -> the first and last word they touch; SpanOutsideWords if none."""
    first = bisect.bisect_right(words.ends, start)  # the first word ending after `start`
    last = bisect.bisect_left(words.starts, end) - 1  # the last word starting before `end`
    if first > last:
        raise SpanOutsideWords(f"characters {start}..{end} cover no word of the text")
    return first, last


def entity_pairs(spans: np.ndarray, max_distance: int | None) -> np.ndarray:
    """glirel's pair order: `[P, 2]` (i, j), row-major, i != j; i > j only within max_distance start words."""
    n = len(spans)
    i: np.ndarray
    j: np.ndarray
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    keep = i != j
    if max_distance is not None:
        near = np.abs(spans[:, 0][:, None] - spans[:, 0][None, :]) <= max_distance
        keep &= (i < j) | near
    return np.stack([i[keep], j[keep]], axis=1)


def element_selection(word_ids: Sequence[int | None], pooling: str) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence: the token positions that feed element vectors and the element of each
    (glirel's first / last masks over word-id changes)."""
    positions, slots = [], []
    for position, wid in enumerate(word_ids):
        if wid is None:
            continue
        if pooling == "first" and position > 0 and word_ids[position - 1] == wid:
            continue
        if pooling == "last" and position + 1 < len(word_ids) and word_ids[position + 1] == wid:
            continue
        positions.append(position)
        slots.append(wid)
    return np.asarray(positions, dtype=np.int64), np.asarray(slots, dtype=np.int64)


@dataclass
class Prepared:
    words: list[Words]  # per text
    windows: list[RelationWindow]  # every text's windows that score at least one pair

    @property
    def num_tokens(self) -> int:
        return sum(len(w.ids) for w in self.windows)


def prepare(tokenizer, config: GlirelConfig, texts: Sequence[str], labels: Sequence[str],
            entity_spans: Sequence[np.ndarray]) -> Prepared:
    """Windows and token ids for a request. entity_spans: per text, `[K, 2]` first and last word of
    each entity (request order). `tokenizer` is SIE's TextTokenizer, truncating at the model's window."""
    backend = tokenizer.hf.backend_tokenizer
    prompt = prompt_words(labels)
    prompt_tokens = len(backend.encode(prompt, is_pretokenized=True, add_special_tokens=False).ids)
    budget = tokenizer.max_length - tokenizer.hf.num_special_tokens_to_add() - prompt_tokens
    if budget < MIN_WINDOW_WORDS:
        raise PromptTooLong(f"the relation labels take {prompt_tokens} tokens of the model's "
                            f"{tokenizer.max_length}-token window, leaving too little for text; send fewer or "
                            "shorter labels")
    words = [split_words(text) for text in texts]
    windows: list[RelationWindow] = []
    for item, (ws, spans) in enumerate(zip(words, entity_spans)):
        pairs = entity_pairs(spans, config.max_entity_pair_distance)
        if len(pairs):
            windows += _text_windows(backend, config, prompt, ws, spans, pairs, budget, item, len(labels))
    return Prepared(words, windows)


def _text_windows(backend, config: GlirelConfig, prompt: list[str], words: Words, spans: np.ndarray,
                  pairs: np.ndarray, budget: int, item: int, num_labels: int) -> list[RelationWindow]:
    counts = [len(e.ids) for e in backend.encode_batch([[w] for w in words.texts], is_pretokenized=True,
                                                        add_special_tokens=False)]
    text_budget = budget
    for _attempt in range(4):  # a tokenizer whose pieces depend on context may need a re-plan
        # an overlap larger than any window: consecutive windows share half of each
        plan = plan_windows(counts, text_budget, config.max_len, overlap=len(words))
        encodings = backend.encode_batch([prompt + words.texts[s:e] for s, e in plan], is_pretokenized=True)
        excess = max((sum(len(o.ids) for o in e.overflowing) for e, (s, end) in zip(encodings, plan)
                      if e.overflowing and end - s > 1), default=0)
        if not excess:
            break
        text_budget -= excess
    owner = np.full(len(pairs), -1)
    for w, (start, end) in enumerate(plan):
        inside = (spans[:, 0] >= start) & (spans[:, 1] < end)
        take = (owner < 0) & inside[pairs[:, 0]] & inside[pairs[:, 1]]
        owner[take] = w
    windows = []
    for w, ((start, end), encoding) in enumerate(zip(plan, encodings)):
        mine = pairs[owner == w]
        if not len(mine):
            continue
        used, rows = np.unique(mine, return_inverse=True)
        positions, slots = element_selection(encoding.word_ids, config.subtoken_pooling)
        windows.append(RelationWindow(
            item=item, first_word=start, num_words=end - start, num_labels=num_labels,
            ids=np.asarray(encoding.ids, dtype=np.int32), element_tokens=positions, element_slots=slots,
            entities=spans[used] - start, pairs=rows.reshape(-1, 2), pair_ids=mine,
        ))
    return windows
