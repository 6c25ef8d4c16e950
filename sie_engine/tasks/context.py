"""What a task's implementation may ask of the engine (the Engine provides it).

A Protocol, so task modules depend on this description and never import the engine."""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import torch

from ..card import ModelCard
from ..tokenizer import Tokenized
from ..types import Timings
from ..validation import Limits
from ..work import WorkItem


class TaskContext(Protocol):
    limits: Limits
    device: torch.device

    def card(self, model_id: str, precision: str | None = None) -> ModelCard:
        """The served card (a precision variant when asked); raises ModelNotFound."""

    async def tokenize(self, card: ModelCard, method: str, *args, **kwargs) -> tuple[Tokenized, float]:
        """`TextTokenizer.<method>(*args, **kwargs)` on the tokenizer pool, and its seconds."""

    async def with_tokenizer(self, card: ModelCard, fn: Callable[..., Any], *args) -> tuple[Any, float]:
        """`fn(tokenizer, *args)` on the tokenizer pool (a task's own preparation), and its seconds."""

    def new_request(self, card: ModelCard, task: str, size: int, timeout: float | None) -> Any:
        """A request of `size` work items with its deadline, to submit work for."""

    def submit(self, card: ModelCard, task: str, items: Sequence[WorkItem], request: Any) -> None:
        """Queue work items (may be called several times for one request)."""

    async def run_items(self, card: ModelCard, task: str, items: list[WorkItem], request: Any) -> list:
        """Queue work items and wait for every result of the request (in item order)."""

    def timings(self, request: Any, started: float, tokenize_s: float) -> Timings:
        """Where the request's time went."""
