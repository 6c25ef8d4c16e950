"""Engines over tiny random BERT models, with batch and pool events recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.pool import PoolEvents
from sie_engine.scheduler import SchedulerEvents
from tiny_models import make_tiny_bert


@dataclass
class Recorder(SchedulerEvents, PoolEvents):
    batches: list = field(default_factory=list)  # (model, items, tokens)
    loads: list = field(default_factory=list)
    evictions: list = field(default_factory=list)
    failures: list = field(default_factory=list)

    def batch(self, model_id, items, tokens, padded, seconds):
        self.batches.append((model_id, items, tokens))

    def loaded(self, model_id, nbytes, seconds):
        self.loads.append(model_id)

    def evicted(self, model_id):
        self.evictions.append(model_id)

    def load_failed(self, model_id, reason):
        self.failures.append((model_id, reason))


def tiny_cards(tmp: Path, names=("a", "b", "c"), max_batch_tokens: int = 512) -> list[ModelCard]:
    cards = []
    for seed, name in enumerate(names):
        root = make_tiny_bert(tmp / name, seed=seed)
        cards.append(ModelCard(id=f"tiny/{name}", weights=WeightsSource(path=str(root)), max_seq_len=120,
                               max_batch_tokens=max_batch_tokens))
    return cards


def make_engine(cards, recorder: Recorder, **kwargs) -> Engine:
    return Engine(Catalog(cards), device="cpu", pool_events=recorder, scheduler_events=recorder, **kwargs)


def patch_run(engine, model, wrapper):
    """Wrap the loaded runner's `run` (the function the inference thread calls):
    `wrapper(original_run, items)` runs in its place."""
    engine.load_sync(model)
    runner = engine.pool.resident(model)
    original = runner.run
    runner.run = lambda items: wrapper(original, items)
    return runner
