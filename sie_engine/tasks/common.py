"""Steps several tasks share."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import InvalidRequest
from ..tokenizer import Tokenized


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
