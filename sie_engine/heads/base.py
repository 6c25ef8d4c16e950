"""What every head declares (class-level defaults the runner reads; a head overrides what differs)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn


class Head(nn.Module):
    """A module from the backbone's packed hidden states `[T, H]` (and the batch) to one value per
    work item: `forward(hidden, batch, items) -> sequence of values`."""

    # Width of the vectors it produces (reported as the model's dims); None: not a vector output.
    dim: int | None = None
    # False for a head that reads the batch alone (a static embedder's fused table mean): when no
    # head of a batch reads hidden states, the runner skips the backbone's forward.
    reads_hidden: ClassVar[bool] = True
