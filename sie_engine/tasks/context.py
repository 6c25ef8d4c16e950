"""What a task's implementation is handed: one resolved `Call`, and the engine's side as a
`TaskContext` (the Engine provides it).

A Protocol, so task modules depend on this description and never import the engine.
The engine turns (task, model id, fields) into a `Call` once, at its boundary: the card
(the precision the call asked for included), the fields as the client sent them, the
deadline and the admission reservation. A task reads what it needs from the call and
never resolves the model id again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..admission import Reservation
from ..card import ModelCard
from ..generation.worker import DecodeWorker
from ..layers.lora import LoRAAdapter
from ..types import Timings
from ..validation import Limits
from ..work import WorkItem


@dataclass(frozen=True)
class Call:
    """One task call, resolved once.

    task: the registered task's name (`encode`, `extract`, a plug-in's).
    card: the served card for the model id; with `precision`, the card that computes in it.
    fields: the request's fields as the client sent them (name -> value; validated by the task).
    deadline: `time.monotonic()` by which its work must have started (None: no deadline);
        work not started by then is dropped (504 over HTTP).
    reservation: the tokens admission reserved for the call (None: not admitted, an
        embedded sub-call shares its parent's).
    precision: the compute precision asked for (None: the card's dtype).
    started: `time.monotonic()` when the call was resolved (its timings count from here)."""

    task: str
    card: ModelCard
    fields: Mapping[str, Any]
    deadline: float | None = None
    reservation: Reservation | None = None
    precision: str | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def model(self) -> str:
        """The model id as the call named it (the card's id)."""
        return self.card.id

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())


class TaskContext(Protocol):
    limits: Limits
    device: torch.device

    def card(self, model_id: str) -> ModelCard:
        """Another model's served card (GLiREL's `entity_model`; a call's own is `call.card`);
        raises ModelNotFound."""

    async def tokenize(self, card: ModelCard, method: str, *args, **kwargs) -> tuple[Any, float]:
        """`TextTokenizer.<method>(*args, **kwargs)` on the tokenizer pool, and its seconds; the result
        is the named method's (`encode`: Tokenized, `tokens_of`: a list of token lists per item)."""

    async def with_tokenizer(self, card: ModelCard, fn: Callable[..., Any], *args) -> tuple[Any, float]:
        """`fn(tokenizer, *args)` on the tokenizer pool (a task's own preparation), and its seconds."""

    def new_request(self, call: Call, task: str, size: int) -> Any:
        """A scheduler request of `size` work items for `call` (its deadline and admission), queued
        as `task` work (the queue's name: batches never mix queues)."""

    def submit(self, card: ModelCard, task: str, items: Sequence[WorkItem], request: Any) -> None:
        """Queue work items (may be called several times for one request)."""

    async def run_items(self, card: ModelCard, task: str, items: list[WorkItem], request: Any) -> list:
        """Queue work items and wait for every result of the request (in item order)."""

    async def acquire_adapter(self, card: ModelCard, name: str) -> LoRAAdapter:
        """The card's LoRA adapter `name` (its `adapters`), loaded if needed and held resident for the
        caller until `release_adapter(card, name)`; raises ModelLoadFailed when it cannot load."""

    def release_adapter(self, card: ModelCard, name: str) -> None:
        """The caller no longer needs the adapter (it may be evicted)."""

    def timings(self, request: Any, started: float, tokenize_s: float) -> Timings:
        """Where the request's time went."""

    async def decode_worker(self, card: ModelCard) -> DecodeWorker:
        """The decode worker of a generative model (its `generate` head), loading the model if needed."""

    async def run_within(self, parent: Call, task: str, model: str, fields: Mapping[str, Any]) -> Any:
        """Run `task` on another model as part of `parent` (GLiREL's `entity_model`): the model id is
        resolved and its task checked as for any call, and the parent's deadline and admission cover
        the work (it is not admitted a second time). Raises ModelNotFound, UnsupportedTask and the
        task's own errors."""
