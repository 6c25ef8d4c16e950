"""GLiNER's input side: words, the label prompt, and windows over long texts.

GLiNER splits a text into words with one regular expression, puts the labels in
front as words (`<<ENT>> label <<ENT>> label ... <<SEP>>`), tokenises the whole
word list at once (pre-tokenised, so every word keeps its token positions), and
marks which sub-token(s) make each text word's vector. This module does exactly
that, and cuts texts longer than the model's window into overlapping windows of
whole words; each window carries the prompt, so it is a complete GLiNER input.

Runs on the tokenizer pool: plain Python and numpy, no torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .checkpoint import GlinerConfig

# GLiNER's WhitespaceTokenSplitter: words (with inner hyphens/underscores) or any other
# single non-space character.
WORD_PATTERN = re.compile(r"\w+(?:[-_]\w+)*|\S")


@dataclass
class Words:
    """A text's words and their character offsets (end exclusive)."""

    texts: list[str]
    starts: list[int]
    ends: list[int]

    def __len__(self) -> int:
        return len(self.texts)


def split_words(text: str) -> Words:
    matches = list(WORD_PATTERN.finditer(text))
    return Words([m.group() for m in matches], [m.start() for m in matches], [m.end() for m in matches])


def prompt_words(labels: Sequence[str], config: GlinerConfig) -> list[str]:
    """`<<ENT>> label ... <<SEP>>`: the words GLiNER puts before the text (none for a bi-encoder,
    whose labels have their own encoder)."""
    if config.bi_encoder:
        return []
    words: list[str] = []
    for label in labels:
        words += [config.ent_token, label]
    return words + [config.sep_token]


@dataclass
class Window:
    """One GLiNER input: the prompt and a run of a text's words.

    ids: `[N]` int32 token ids of the whole sequence.
    word_tokens, word_slots: `[M]` positions in `ids` of the sub-tokens that make word
        vectors and the window word (0..num_words-1) each one feeds.
    label_positions: `[C]` positions in `ids` whose hidden state is each label's vector (none for a
        bi-encoder: its labels are encoded apart, models/gliner/labels.py).
    """

    item: int  # the text's index in the request
    first_word: int  # the text's word index of the window's word 0
    num_words: int
    core: tuple[int, int]  # text word range whose span *starts* this window answers for
    ids: np.ndarray
    word_tokens: np.ndarray
    word_slots: np.ndarray
    label_positions: np.ndarray
    truncated: bool = False


def word_mask(word_ids: Sequence[int | None], skip_words: int, pooling: str) -> np.ndarray:
    """GLiNER's `prepare_word_mask` for one sequence: per token, the 1-based text word it
    feeds or 0. Words are numbered by counting word-id changes, as GLiNER does (a word
    that yields no token therefore shifts the numbering, in GLiNER and here alike)."""
    mask: np.ndarray = np.zeros(len(word_ids), dtype=np.int64)
    previous = None
    seen = 0
    for position, wid in enumerate(word_ids):
        if wid is not None:
            first = wid != previous
            if first:
                seen += 1
            following = word_ids[position + 1] if position + 1 < len(word_ids) else None
            last = following != wid
            selected = pooling in ("mean", "max") or (pooling == "first" and first) or (pooling == "last" and last)
            if seen > skip_words and selected:
                mask[position] = seen - skip_words
        previous = wid
    return mask


def plan_windows(token_counts: Sequence[int], budget: int, max_words: int, overlap: int) -> list[tuple[int, int]]:
    """Cut words into windows `[start, end)` of at most `budget` tokens and `max_words`
    words, consecutive windows sharing about `overlap` words (never less than half a
    window of progress, so many labels cannot make the plan quadratic)."""
    n = len(token_counts)
    windows = []
    start = 0
    while True:
        end, tokens = start, 0
        while end < n and end - start < max_words and tokens + token_counts[end] <= budget:
            tokens += token_counts[end]
            end += 1
        end = max(end, start + 1)  # a single word longer than the window goes alone (truncated)
        windows.append((start, end))
        if end >= n:
            return windows
        start = max(end - overlap, start + max(1, (end - start) // 2))


def window_cores(windows: Sequence[tuple[int, int]], num_words: int) -> list[tuple[int, int]]:
    """Split the words among the windows: each window answers for the spans that start in
    its core, cut midway through each overlap so every such span has context on both sides."""
    bounds = [0]
    for (_, end), (next_start, _) in zip(windows, windows[1:]):
        bounds.append(min(max((next_start + end) // 2, next_start), end))
    bounds.append(num_words)
    return [(bounds[i], max(bounds[i], bounds[i + 1])) for i in range(len(windows))]


@dataclass
class Prepared:
    words: list[Words]  # per text
    windows: list[Window]  # every text's windows, in text order

    @property
    def num_tokens(self) -> int:
        return sum(len(w.ids) for w in self.windows)


class PromptTooLong(ValueError):
    pass


def prepare(tokenizer, config: GlinerConfig, texts: Sequence[str], labels: Sequence[str],
            class_token_id: int) -> Prepared:
    """Words, windows and token ids for a request. `tokenizer` is SIE's TextTokenizer (its
    fast tokenizer truncates at `tokenizer.max_length`, the model's window)."""
    backend = tokenizer.hf.backend_tokenizer
    prompt = prompt_words(labels, config)
    prompt_tokens = len(backend.encode(prompt, is_pretokenized=True, add_special_tokens=False).ids) if prompt else 0
    budget = tokenizer.max_length - tokenizer.hf.num_special_tokens_to_add() - prompt_tokens
    if budget < config.max_width:
        raise PromptTooLong(
            f"the labels take {prompt_tokens} tokens of the model's {tokenizer.max_length}-token window, "
            "leaving too little for text; send fewer or shorter labels"
        )
    overlap = 2 * config.max_width
    words = [split_words(text) for text in texts]
    # Per-word token counts size the windows; each window's real encoding below is checked
    # for truncation, so a tokenizer whose pieces depend on context only costs a re-plan.
    all_words = [w for ws in words for w in ws.texts]
    counts = [len(e.ids) for e in backend.encode_batch([[w] for w in all_words], is_pretokenized=True,
                                                       add_special_tokens=False)]
    windows: list[Window] = []
    offset = 0
    for item, ws in enumerate(words):
        text_counts = counts[offset:offset + len(ws)]
        offset += len(ws)
        windows += _text_windows(backend, config, prompt, ws, text_counts, budget, overlap, item, class_token_id,
                                 0 if config.bi_encoder else len(labels))
    return Prepared(words, windows)


def _text_windows(backend, config, prompt, words: Words, counts, budget, overlap, item, class_token_id,
                  num_labels) -> list[Window]:
    if not words.texts:  # a blank text: no word to span, no window (gliner answers [] for it too)
        return []
    text_budget = budget
    for _attempt in range(4):
        spans = plan_windows(counts, text_budget, config.max_len, overlap)
        encodings = backend.encode_batch([prompt + words.texts[s:e] for s, e in spans], is_pretokenized=True)
        excess = max((sum(len(o.ids) for o in e.overflowing) for e, (s, end) in zip(encodings, spans)
                      if e.overflowing and end - s > 1), default=0)
        if not excess:
            break
        text_budget -= excess
    cores = window_cores(spans, len(words))
    windows = []
    for (start, end), core, encoding in zip(spans, cores, encodings):
        ids = np.asarray(encoding.ids, dtype=np.int32)
        mask = word_mask(encoding.word_ids, len(prompt), config.subtoken_pooling)
        word_tokens = np.nonzero(mask)[0]
        label_positions = np.nonzero(ids == class_token_id)[0][:num_labels]
        if len(label_positions) < num_labels:
            raise PromptTooLong(f"the window holds {len(label_positions)} of the {num_labels} label markers; "
                                "send fewer or shorter labels")
        if not config.embed_ent_token:
            label_positions = label_positions + 1  # the label's first token instead of its marker
        windows.append(Window(
            item=item, first_word=start, num_words=end - start, core=core, ids=ids,
            word_tokens=word_tokens.astype(np.int64), word_slots=mask[word_tokens] - 1,
            label_positions=label_positions.astype(np.int64), truncated=bool(encoding.overflowing),
        ))
    return windows


def class_token_id(tokenizer, config: GlinerConfig) -> int:
    """The id of `<<ENT>>`: the checkpoint's `class_token_index`, else the tokenizer's id for it
    (-1 for a bi-encoder: its text carries no label markers)."""
    if config.bi_encoder:
        return -1
    if config.class_token_index >= 0:
        return config.class_token_index
    token_id = tokenizer.hf.convert_tokens_to_ids(config.ent_token)
    if token_id is None or token_id == tokenizer.hf.unk_token_id:
        raise ValueError(f"the tokenizer has no {config.ent_token!r} token: not a GLiNER tokenizer")
    return int(token_id)
