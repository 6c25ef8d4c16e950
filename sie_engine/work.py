"""The unit of work the scheduler queues and a model runs: one sequence of a request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(eq=False)
class WorkItem:
    """One sequence of a request, as the scheduler queues it.

    outputs: the heads whose results this item needs (`dense`, `score`, ...); its
    result is `{head name: that head's value for the item}`."""

    request: Any  # scheduler.Request
    index: int  # position in the request
    ids: np.ndarray  # int32 token ids
    type_ids: np.ndarray | None = None
    outputs: frozenset = frozenset()
    extra: Any = None  # task-specific data for the task's head
    # attention keys limited to the first key_len tokens (ColBERT query expansion); None: all
    key_len: int | None = None
    # an image item: its `[C, S, S]` pixel values (ids empty) and the positions the vision tower
    # runs for it (patches, plus a class token), which the batcher counts as its tokens
    pixels: np.ndarray | None = None
    image_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return self.image_tokens if self.pixels is not None else len(self.ids)
