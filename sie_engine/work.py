"""The unit of work the scheduler queues and a model runs: one sequence of a request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

if TYPE_CHECKING:
    from .layers.lora import LoRAAdapter

# What a kind of work hands its head beside the ids (`WorkItem.extra`), one type per kind,
# declared beside the head that reads it: `encode`'s items carry whether the text is a query
# (bool: inference-free sparse heads weigh queries apart), late-interaction `score` items the
# query's vectors (`[Lq, D]` float32, MaxSim on the device), each extract mode its own payload
# (windows, label spans, prompt inputs). None: the head needs nothing beyond the sequence.
Payload = TypeVar("Payload")


# slots: a large request queues thousands of items, and the scheduler reads each one's
# `num_tokens` several times (queue, batch, throughput)
@dataclass(eq=False, slots=True)
class WorkItem(Generic[Payload]):
    """One sequence of a request, as the scheduler queues it. `WorkItem[P]`: an item whose
    `extra` is a `P` (a task writes `work: list[WorkItem[WindowWork]] = [...]`; no runtime cost).

    outputs: the heads whose results this item needs (`dense`, `score`, ...); its
    result is `{head name: that head's value for the item}`."""

    request: Any  # scheduler.Request
    index: int  # position in the request
    ids: np.ndarray  # int32 token ids
    type_ids: np.ndarray | None = None
    outputs: frozenset = frozenset()
    extra: Payload | None = None  # the kind of work's payload for its head (Payload above)
    # attention keys limited to the first key_len tokens (ColBERT query expansion); None: all
    key_len: int | None = None
    # an image item: its `[C, S, S]` pixel values (ids empty) and the positions the vision tower
    # runs for it (patches, plus a class token), which the batcher counts as its tokens. An item
    # whose images run inside a prompt of its own (Qwen3-VL) may hold several, in the prompt's
    # order: a reranker's pair of an image query and an image document.
    pixels: np.ndarray | tuple[np.ndarray, ...] | None = None
    image_tokens: int = 0
    # the LoRA adapter applied to this sequence's rows (None: the base model); resolved once per
    # request, so a batch of several adapters needs no lookups (layers/lora.py)
    adapter: LoRAAdapter | None = None
    # leading tokens (the card's prompt) the pooling leaves out: sentence-transformers' Pooling with
    # `include_prompt: false` (`options.dense.include_prompt`), GritLM's mean over the text alone
    prompt_tokens: int = 0
    # late chunking: (start, end) token ranges of this sequence, each pooled on its own by the dense
    # head (the mean of its tokens), one vector per range instead of one per sequence
    spans: tuple[tuple[int, int], ...] | None = None
    # tokens the batcher counts: the text's, or the positions the vision tower runs for an image
    num_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.num_tokens = self.image_tokens if self.pixels is not None else len(self.ids)
