"""The engine's metric hooks (`ServerMetrics.pool_events` / `scheduler_events`): the pool and
the scheduler call them from the engine's threads. Apart from metrics.py because the event
classes' modules import torch, which a split server's frontends never load. A load also freezes
the heap after a model's first load (heap.py)."""

from __future__ import annotations

from typing import Any

from sie_engine.pool import PoolEvents
from sie_engine.scheduler import SchedulerEvents

from . import heap

# `metrics` below is a metrics.ServerMetrics (not imported: metrics.py imports this module)


class SchedulerHooks(SchedulerEvents):
    def __init__(self, metrics: Any):
        self.m = metrics

    def batch(self, model_id: str, items: int, tokens: int, padded: int, seconds: float) -> None:
        self.m.batch_tokens.labels(model_id).observe(tokens)
        self.m.batch_items.labels(model_id).observe(items)
        self.m.batches.labels(model_id).inc()
        self.m.tokens.labels(model_id).inc(tokens)

    def queue_changed(self, model_id: str, items: int, tokens: int) -> None:
        with self.m._lock:
            self.m._queues[model_id] = (items, tokens)
        queued_items, queued_tokens, _ = self.m.queue_children(model_id)
        queued_items.set(items)
        queued_tokens.set(tokens)

    def queue_wait(self, model_id: str, seconds: float) -> None:
        self.m.queue_children(model_id)[2].set(seconds)

    def admitted_cold(self, model_id: str) -> None:
        self.m.cold_admissions.labels(model_id).inc()


class PoolHooks(PoolEvents):
    def __init__(self, metrics: Any):
        self.m = metrics

    def loaded(self, model_id: str, nbytes: int, seconds: float) -> None:
        self.m.loads.labels(model_id).inc()
        self.m.load_seconds.labels(model_id).observe(seconds)
        self.m.model_memory.labels(model_id).set(nbytes)
        with self.m._lock:
            self.m._resident.add(model_id)
            self.m.models_loaded.set(len(self.m._resident))
        heap.after_load(model_id)  # its modules and structures out of full collections (heap.py)

    def load_failed(self, model_id: str, reason: str) -> None:
        self.m.load_failures.labels(model_id).inc()

    def evicted(self, model_id: str) -> None:
        self.m.evictions.labels(model_id).inc()
        self.m.model_memory.labels(model_id).set(0)
        with self.m._lock:
            self.m._resident.discard(model_id)
            self.m.models_loaded.set(len(self.m._resident))
