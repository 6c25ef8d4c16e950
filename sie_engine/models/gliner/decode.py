"""GLiNER's decoding: span-label probabilities -> entities.

A span-label pair is a candidate when its probability is above the threshold (span
models), or when its first word starts, its last word ends and every word in it is
inside the label above the threshold (token models).
Candidates are then taken greedily, best first (GLiNER's `greedy_search`): flat
decoding keeps no two overlapping spans; nested decoding allows a span inside
another but not two that cross. Without `multi_label` a span keeps one label.
Ties keep GLiNER's order (start, width, label), so results match it exactly.

A text longer than the model's window is cut into overlapping windows, each of
which answers for the spans starting in its core (the cores split the text). Their
candidates are pooled and decoded once, as if one window had scored the whole text:
`merge_windows`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Span:
    start: int  # first word (inclusive)
    end: int  # last word (inclusive)
    label: int  # index into the request's labels
    score: float


@dataclass(frozen=True)
class DecodeSettings:
    threshold: float = 0.5
    flat: bool = True
    multi_label: bool = False


def candidates(probs: np.ndarray, starts: np.ndarray, widths: np.ndarray, threshold: float) -> list[Span]:
    """Spans whose probability for a label is above `threshold`.

    probs: `[S, C]` float32 probabilities; starts, widths: `[S]` the spans' first word and
    width (end - start), enumerated start-major then width, as GLiNER does."""
    rows, labels = np.nonzero(probs > threshold)
    scores = probs[rows, labels].tolist()
    return [Span(int(s), int(s + w), int(c), score)
            for s, w, c, score in zip(starts[rows].tolist(), widths[rows].tolist(), labels.tolist(), scores)]


def token_candidates(probs: np.ndarray, threshold: float) -> list[Span]:
    """Token models (GLiNER's TokenDecoder): probs `[W, C, 3]` start / end / inside per word and
    label. A span of label c runs from a start above the threshold to an end above it, every
    word inside at least the threshold; its score is the least of those probabilities.
    Candidates come in GLiNER's order: by start (word, label), then by end word."""
    start, end, inside = probs[..., 0], probs[..., 1], probs[..., 2]
    ends_of_label: dict[int, list[int]] = {}
    for word, label in zip(*(x.tolist() for x in np.nonzero(end > threshold))):
        ends_of_label.setdefault(label, []).append(word)
    spans = []
    for first, label in zip(*(x.tolist() for x in np.nonzero(start > threshold))):
        for last in ends_of_label.get(label, ()):
            if last < first:
                continue
            inner = inside[first:last + 1, label]
            if (inner < threshold).any():
                continue
            score = min(float(inner.min()), float(start[first, label]), float(end[last, label]))
            spans.append(Span(first, last, label, score))
    return spans


def greedy(spans: Iterable[Span], flat: bool, multi_label: bool) -> list[Span]:
    """Best-first selection without conflicts; the result is ordered by start."""
    ordered = sorted(spans, key=lambda span: -span.score)  # stable: ties keep candidate order
    chosen: list[Span] = []
    if flat:
        owner: dict[int, tuple[int, int]] = {}  # word -> bounds of the chosen span covering it
        for span in ordered:
            bounds = (span.start, span.end)
            clash = any(
                (w in owner) and (owner[w] != bounds or not multi_label) for w in range(span.start, span.end + 1)
            )
            if not clash:
                chosen.append(span)
                for w in range(span.start, span.end + 1):
                    owner[w] = bounds
    else:
        for span in ordered:
            if not any(_crosses(span, other, multi_label) for other in chosen):
                chosen.append(span)
    chosen.sort(key=lambda span: span.start)
    return chosen


def _crosses(a: Span, b: Span, multi_label: bool) -> bool:
    """GLiNER's `has_overlapping_nested`: overlapping, and neither inside the other."""
    if (a.start, a.end) == (b.start, b.end):
        return not multi_label
    disjoint = a.start > b.end or b.start > a.end
    nested = (a.start <= b.start and a.end >= b.end) or (b.start <= a.start and b.end >= a.end)
    return not disjoint and not nested


def merge_windows(per_window: Sequence[tuple[int, list[Span]]], settings: DecodeSettings,
                  token_level: bool = False) -> list[Span]:
    """One text's entities, in text word indices.

    per_window: (the window's first word in the text, its spans in window word indices): a
    lone window's decoded spans, or each window's candidates from its core."""
    if len(per_window) == 1:
        first_word, spans = per_window[0]
        return [Span(s.start + first_word, s.end + first_word, s.label, s.score) for s in spans]
    union = [Span(s.start + first, s.end + first, s.label, s.score) for first, spans in per_window for s in spans]
    # GLiNER's candidate order, which breaks ties in the greedy pass
    union.sort(key=(lambda s: (s.start, s.label, s.end)) if token_level else (lambda s: (s.start, s.end, s.label)))
    return greedy(union, settings.flat, settings.multi_label)
