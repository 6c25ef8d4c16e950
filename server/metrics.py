"""Prometheus metrics of one engine server (names and labels: docs/api.md).

`ServerMetrics` owns its own registry (so several apps can live in one
process, as in tests) and hands the engine two hook objects:
`pool_events` (loads, failures, evictions, resident memory) and
`scheduler_events` (batches, queue depth). The engine calls those hooks from
its own thread; prometheus_client's metrics are thread-safe, and the small
queue table kept here for /v1/status is guarded by a lock.
"""

from __future__ import annotations

import threading

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from sie_engine.pool import PoolEvents
from sie_engine.scheduler import SchedulerEvents
from sie_engine.types import Timings

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_TOKEN_BUCKETS = tuple(2**k for k in range(4, 18))  # 16 .. 131072
BATCH_ITEM_BUCKETS = tuple(2**k for k in range(0, 11))  # 1 .. 1024
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        self.requests = Counter("sie_requests_total", "Answered requests", ["model", "route", "status"], registry=r)
        self.duration = Histogram("sie_request_duration_seconds", "Request latency by phase",
                                  ["model", "route", "phase"], buckets=LATENCY_BUCKETS, registry=r)
        self.queued_items = Gauge("sie_queued_items", "Items waiting for a batch", ["model"], registry=r)
        self.queued_tokens = Gauge("sie_queued_tokens", "Tokens waiting for a batch (autoscaling signal)",
                                   ["model"], registry=r)
        # admission's estimate (sie_engine/admission.py): the model's queued work in seconds at its
        # measured throughput; summed over a server's models, the wait a new request would see
        self.queue_wait = Gauge("sie_queue_wait_seconds",
                                "Seconds of work queued for the model at its measured throughput (autoscaling signal)",
                                ["model"], registry=r)
        self.inflight = Gauge("sie_inflight_requests", "Requests accepted and not yet answered", registry=r)
        self.batch_tokens = Histogram("sie_batch_tokens", "Real tokens per batch", ["model"],
                                      buckets=BATCH_TOKEN_BUCKETS, registry=r)
        self.batch_items = Histogram("sie_batch_items", "Sequences per batch", ["model"],
                                     buckets=BATCH_ITEM_BUCKETS, registry=r)
        self.batches = Counter("sie_batches_total", "Batches run", ["model"], registry=r)
        self.tokens = Counter("sie_tokens_processed_total", "Real tokens computed", ["model"], registry=r)
        self.models_loaded = Gauge("sie_models_loaded", "Resident models", registry=r)
        self.model_memory = Gauge("sie_model_memory_bytes", "Memory charged to a resident model", ["model"], registry=r)
        self.memory_budget = Gauge("sie_memory_budget_bytes", "The model pool's memory budget", registry=r)
        self.loads = Counter("sie_model_loads_total", "Model loads", ["model"], registry=r)
        self.load_failures = Counter("sie_model_load_failures_total", "Failed model loads", ["model"], registry=r)
        self.evictions = Counter("sie_model_evictions_total", "Model evictions", ["model"], registry=r)
        self.load_seconds = Histogram("sie_model_load_seconds", "Model load (or swap-in) time", ["model"],
                                      buckets=LOAD_BUCKETS, registry=r)
        self.rejected = Counter("sie_rejected_total", "Requests refused by admission (429/503/504)",
                                ["model", "reason"], registry=r)
        # queue mode (server/queue/consumer.py): what became of each message this server pulled
        self.queue_messages = Counter("sie_queue_messages_total", "Queue messages pulled, by outcome (answered, "
                                      "expired, dead_lettered, handed_back)", ["outcome"], registry=r)
        self._lock = threading.Lock()
        self._request_children: dict[tuple[str, str, int], tuple] = {}
        self._queue_children: dict[str, tuple] = {}
        self._queues: dict[str, tuple[int, int]] = {}
        self._resident: set[str] = set()
        self.pool_events = _PoolHooks(self)
        self.scheduler_events = _SchedulerHooks(self)

    # ---- requests ----------------------------------------------------------
    def observe_request(self, model: str, route: str, status: int, timings: Timings | None, total_s: float) -> None:
        children = self._request_children.get((model, route, status))
        if children is None:
            children = self._request_children[(model, route, status)] = self._children_of(model, route, status)
        count, queue, tokenize, inference, total = children
        count.inc()
        if timings is not None:
            queue.observe(timings.queue)
            tokenize.observe(timings.tokenize)
            inference.observe(timings.inference)
        total.observe(total_s)

    def _children_of(self, model: str, route: str, status: int) -> tuple:
        """A request's counter and phase histograms, looked up once per (model, route, status):
        `labels()` takes a lock and builds its key on every call, five times a request (issue 27).
        The keys are bounded: served model ids (or ""), route names, statuses."""
        return (self.requests.labels(model, route, str(status)),
                *(self.duration.labels(model, route, phase) for phase in ("queue", "tokenize", "inference", "total")))

    def queue_children(self, model: str) -> tuple:
        """A model's queued items, queued tokens and queue wait gauges, looked up once."""
        children = self._queue_children.get(model)
        if children is None:
            children = self._queue_children[model] = (self.queued_items.labels(model),
                                                      self.queued_tokens.labels(model), self.queue_wait.labels(model))
        return children

    # ---- queue table (for /v1/status) --------------------------------------
    def queues(self) -> dict[str, tuple[int, int]]:
        """model -> (queued items, queued tokens)."""
        with self._lock:
            return dict(self._queues)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _SchedulerHooks(SchedulerEvents):
    def __init__(self, metrics: ServerMetrics):
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


class _PoolHooks(PoolEvents):
    def __init__(self, metrics: ServerMetrics):
        self.m = metrics

    def loaded(self, model_id: str, nbytes: int, seconds: float) -> None:
        self.m.loads.labels(model_id).inc()
        self.m.load_seconds.labels(model_id).observe(seconds)
        self.m.model_memory.labels(model_id).set(nbytes)
        with self.m._lock:
            self.m._resident.add(model_id)
            self.m.models_loaded.set(len(self.m._resident))

    def load_failed(self, model_id: str, reason: str) -> None:
        self.m.load_failures.labels(model_id).inc()

    def evicted(self, model_id: str) -> None:
        self.m.evictions.labels(model_id).inc()
        self.m.model_memory.labels(model_id).set(0)
        with self.m._lock:
            self.m._resident.discard(model_id)
            self.m.models_loaded.set(len(self.m._resident))
