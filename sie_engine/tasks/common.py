"""Steps several tasks share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidRequest
from ..tokenizer import Tokenized
from ..validation import Limits


def check_truncation(tokenized: Tokenized, truncate: bool | None, field: str = "items", offset: int = 0,
                     positions: Sequence[int] | None = None) -> None:
    """With truncate=false, a text longer than the model's window is a 400 naming it (its index:
    `offset` plus its place in `tokenized`, or its entry in `positions`)."""
    if truncate is False:
        for j, was_truncated in enumerate(tokenized.truncated):
            i = positions[j] if positions is not None else offset + j
            if was_truncated:
                raise InvalidRequest(
                    f"{field}[{i}] is longer than the model's window; shorten it or allow truncation",
                    field=f"{field}[{i}].text",
                )


def longest_first(ids: list[np.ndarray]) -> list[int]:
    """Item order for the queue: long first, so batches hold similar lengths."""
    return sorted(range(len(ids)), key=lambda i: -len(ids[i]))


def check_labels(labels: Any, limits: Limits) -> list[str]:
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


def labels_under(prefix: str, value: Any, limits: Limits) -> list[str]:
    """`check_labels` on a label list kept under another name (`classify.labels`,
    `relation_labels`): its errors name the field as the request spells it."""
    try:
        return check_labels(value, limits)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{prefix}{exc}", field=f"{prefix}{exc.field}") from None
