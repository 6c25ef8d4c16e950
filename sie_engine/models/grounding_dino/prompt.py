"""Grounding DINO's prompt: the request's labels as one text ("a cat. a dog.", lower-cased, as
GroundingDinoProcessor merges candidate labels) and its phrases.

The model cuts the tokenised prompt at BERT's [CLS], [SEP], "." and "?" ids (transformers'
`generate_masks_with_special_tokens_and_transfer_map`): the tokens up to and including each
delimiter after the first are one phrase that attends only within itself, with positions
counted from the phrase's start (the delimiter itself at 0); [CLS], [SEP] and tokens after the
last delimiter attend only to themselves, at position 0. A phrase is therefore a sequence of its
own: SIE packs the phrases of a prompt as separate sequences (variable-length attention is that
block-diagonal mask), and the text tower sets the delimiters' positions to 0.
"""

from __future__ import annotations

import numpy as np

# BERT uncased's ids of [CLS], [SEP], "." and "?": transformers' SPECIAL_TOKENS, fixed in the model
DELIMITERS = (101, 102, 1012, 1029)


def merged_prompt(labels: list[str]) -> str:
    """["A cat", "a dog"] -> "a cat. a dog." (GroundingDinoProcessor's `_merge_candidate_labels_text`)."""
    return ". ".join(label.strip().lower() for label in labels) + "."


def phrases(ids: np.ndarray) -> list[tuple[int, int]]:
    """A prompt's token ids `[T]` -> its phrases as (start, end) token ranges, in order, covering it."""
    n = len(ids)
    delimiter = np.isin(ids, DELIMITERS)
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(n):
        if not delimiter[i]:
            continue
        if i == 0 or i == n - 1:  # a phrase closed at the first or the last token is no phrase
            spans.extend((j, j + 1) for j in range(start, i + 1))
        else:
            spans.append((start, i + 1))
        start = i + 1
    spans.extend((j, j + 1) for j in range(start, n))  # no delimiter after them: each alone
    return spans


def phrase_positions(ids: np.ndarray) -> np.ndarray:
    """`[T]` int64: each token's position within its phrase, the delimiters' at 0 (the text tower's
    and the encoder's text position ids)."""
    positions: np.ndarray = np.zeros(len(ids), dtype=np.int64)
    for start, end in phrases(ids):
        positions[start:end] = np.arange(end - start)
    positions[np.isin(ids, DELIMITERS)] = 0
    return positions
