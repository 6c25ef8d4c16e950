"""Checks every zero-shot classification test makes of an `extract` answer: all labels scored as the
reference scores them, best first, single-label scores summing to 1; top_k and threshold cutting the
same ranking."""

from __future__ import annotations

import numpy as np

# items and candidate labels the classification tests share
TEXTS = [
    "python3-pip is the package installer for Python; install it with apt.",
    "A library for reading and writing PNG images.",
    "The Debian packaging tools: dpkg, apt and friends manage software packages.",
    "Football is a team sport played with a ball.",
]
LABELS = ["software", "graphics", "sports", "python packaging", "system administration"]


def assert_classified(items, expected: list[dict], labels: list[str], multi_label: bool, atol: float,
                      spread: float) -> None:
    """`expected`: per item, the reference's score of every label. `spread`: the least gap between the best
    and the worst score (the random weights must tell the labels apart for the check to mean anything)."""
    assert len(items) == len(expected)
    for item, want in zip(items, expected):
        assert item.entities == []
        got = {c.label: c.score for c in item.classifications}
        assert set(got) == set(labels)
        np.testing.assert_allclose([got[label] for label in labels], [want[label] for label in labels], atol=atol)
        scores = [c.score for c in item.classifications]
        assert scores == sorted(scores, reverse=True)  # best first
        assert scores[0] - scores[-1] > spread
        if not multi_label:
            assert abs(sum(scores) - 1.0) < 1e-5


def assert_top_k_and_threshold_cut_the_ranking(engine, model: str, texts: list[str], labels: list[str],
                                               **fields) -> None:
    full = engine.extract_sync(model, texts, labels, **fields)
    top = engine.extract_sync(model, texts, labels, top_k=2, **fields)
    for a, b in zip(full.items, top.items):
        assert b.classifications == a.classifications[:2]
    cut = float(np.median([c.score for i in full.items for c in i.classifications]))
    kept = engine.extract_sync(model, texts, labels, threshold=cut, **fields)
    for a, b in zip(full.items, kept.items):
        assert b.classifications == [c for c in a.classifications if c.score >= cut]
