"""GLiNER2's input side (gliner2 2.1.0's SchemaTransformer at inference): words, the schema
prompt, token ids and the positions the heads read.

The text gets a final "." when it ends without sentence punctuation, and is split into
lower-cased words (GLiNER2's whitespace splitter). Each task is a schema, written as words:
`( [P] entities ( [E] person [E] location ) )`, `( [P] <relation> ( [R] head [R] tail ) )` per
relation type and `( [P] <task> ( [L] label ... ) )`; the
schemas, joined by `[SEP_STRUCT]`, then `[SEP_TEXT]`, then the words make one sequence, each
word tokenised on its own and no special tokens added. The heads read each text word's
first sub-token, and per schema its `[P]` and its label markers' first sub-tokens.

Runs on the tokenizer pool: plain Python and numpy, no torch.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ...errors import InvalidRequest

ENTITIES = "entities"
RELATION = "relation"
CLASSIFICATION = "classification"
# a relation schema's fields, in gliner2's order (its `relations([...])` schemas)
RELATION_FIELDS = ("head", "tail")


@lru_cache(maxsize=1)
def word_pattern() -> re.Pattern:
    """gliner2's WhitespaceTokenSplitter: URLs, e-mails, @handles, words (letters, digits, combining
    marks, joiners, inner - or _), or any other non-space character. Built once (the mark class
    takes a scan of Unicode)."""
    marks = "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)).startswith("M"))
    word = rf"[\w{marks}\u200c\u200d]"
    return re.compile(rf"""(?:https?://[^\s]+|www\.[^\s]+)
        |[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{{2,}}
        |@[a-z0-9_]+
        |{word}+(?:[-_]{word}+)*
        |\S""", re.VERBOSE | re.IGNORECASE)


def normalize_text(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


@dataclass
class Words:
    texts: list[str]  # lower-cased
    starts: list[int]
    ends: list[int]


def split_words(text: str) -> Words:
    matches = list(word_pattern().finditer(text))
    return Words([m.group().lower() for m in matches], [m.start() for m in matches], [m.end() for m in matches])


def schema_words(parent: str, labels: Sequence[str], marker: str) -> list[str]:
    words = ["(", "[P]", parent, "("]
    for label in labels:
        words += [marker, label]
    return words + [")", ")"]


@dataclass
class Gliner2Input:
    """One item's sequence. word_positions: `[W]` first sub-token of each text word;
    schema_positions: per schema (entities, relation types, the classification), `[1 + fields]`
    positions of its [P] and its field markers; kinds: the schemas' kinds."""

    item: int
    ids: np.ndarray
    word_positions: np.ndarray
    schema_positions: list[np.ndarray] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)


def prepare(tokenizer, texts: Sequence[str], entity_labels: Sequence[str], task: str | None,
            class_labels: Sequence[str], relation_types: Sequence[str] = ()) -> tuple[list[str], list[Words],
                                                                                      list[Gliner2Input]]:
    """Per text: the normalised text, its words and its sequence. `tokenizer` is SIE's TextTokenizer.
    Schemas in gliner2's order: entities, one per relation type, the classification."""
    hf = tokenizer.hf
    cache: dict[str, list[int]] = {}

    def pieces(word: str) -> list[int]:
        if word not in cache:
            cache[word] = hf.convert_tokens_to_ids(hf.tokenize(word))
        return cache[word]

    schemas, kinds = [], []
    if entity_labels:
        schemas.append(schema_words(ENTITIES, entity_labels, "[E]"))
        kinds.append(ENTITIES)
    for relation in relation_types:
        schemas.append(schema_words(relation, RELATION_FIELDS, "[R]"))
        kinds.append(RELATION)
    if task is not None:
        schemas.append(schema_words(task, class_labels, "[L]"))
        kinds.append(CLASSIFICATION)
    prompt_ids: list[int] = []
    schema_positions = []
    for s, words in enumerate(schemas):
        if s:
            prompt_ids += pieces("[SEP_STRUCT]")
        markers = {1} | set(range(4, len(words) - 2, 2))  # [P] and the label markers
        positions = []
        for w, word in enumerate(words):
            if w in markers:
                positions.append(len(prompt_ids))
            prompt_ids += pieces(word)
        schema_positions.append(np.asarray(positions, dtype=np.int64))
    prompt_ids += pieces("[SEP_TEXT]")
    if len(prompt_ids) >= tokenizer.max_length:  # no room left for a single word of any text
        raise InvalidRequest(f"the labels, relation_labels and classify of this request take {len(prompt_ids)} tokens "
                             f"of the model's {tokenizer.max_length}-token window, leaving none for the text; "
                             "send fewer or shorter labels", field="labels")

    normalized, all_words, inputs = [], [], []
    for item, text in enumerate(texts):
        text = normalize_text(text)
        item_words = split_words(text)
        ids = list(prompt_ids)
        word_positions = []
        for word in item_words.texts:
            piece_ids = pieces(word)
            if len(ids) + len(piece_ids) > tokenizer.max_length:  # the model's window: later words are cut
                break
            word_positions.append(len(ids))  # a word without pieces keeps the next one's place, as gliner2
            ids += piece_ids
        normalized.append(text)
        all_words.append(item_words)
        inputs.append(Gliner2Input(item, np.asarray(ids, dtype=np.int32), np.asarray(word_positions, dtype=np.int64),
                                   schema_positions, kinds))
    return normalized, all_words, inputs
